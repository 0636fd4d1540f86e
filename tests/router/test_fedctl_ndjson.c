/* test_fedctl_ndjson.c - fedctl's incremental NDJSON reader
 * (router/cli/ndjson.c): answers cut at every possible place. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fr/buf.h"
#include "ndjson.h"

struct sink {
  struct fr_buf fd[3];
  int calls;
  int fail_with;
};

static int on_out(int fd, const void *data, size_t len, void *arg) {
  struct sink *s = arg;

  ck_assert(fd == 1 || fd == 2);
  ck_assert_uint_gt(len, 0);
  s->calls++;
  if (s->fail_with != 0)
    return s->fail_with;
  return fr_buf_append(&s->fd[fd], data, len);
}

static void sink_init(struct sink *s) {
  memset(s, 0, sizeof(*s));
}

static void sink_close(struct sink *s) {
  fr_buf_free(&s->fd[1]);
  fr_buf_free(&s->fd[2]);
}

/* Feeds <text> in pieces of <step> bytes; returns the first error. */
static int feed_in_steps(struct fc_nd *d, const char *text, size_t len, size_t step) {
  size_t at, n;
  int rc;

  for (at = 0; at < len; at += n) {
    n = len - at < step ? len - at : step;
    if ((rc = fc_nd_feed(d, text + at, n)) != 0)
      return rc;
  }
  return 0;
}

/* "€" is E2 82 AC: every cut of the answer lands once inside it. */
static const char exec_answer[] =
    "{\"stdout\":\"a\\n\"}\n"
    "{\"stderr\":\"warn \xe2\x82\xac\\n\"}\n"
    "{\"stdout_b64\":\"/+4AQQ==\"}\n"
    "{\"stdout\":\"nul\\u0000byte\"}\n"
    "{\"exit_code\":3,\"timed_out\":false,\"duration_ms\":1003}\n";

START_TEST(nd_exec_answer_cut_anywhere_same_output) {
  static const char want_out[] = "a\n\xff\xee\x00" "Anul\0byte";
  size_t step;

  for (step = 1; step <= sizeof(exec_answer); step++) {
    struct fc_nd d;
    struct sink s;

    sink_init(&s);
    fc_nd_init(&d, on_out, &s);
    ck_assert_int_eq(feed_in_steps(&d, exec_answer, sizeof(exec_answer) - 1, step), 0);
    ck_assert_int_eq(fc_nd_finish(&d), 0);
    ck_assert_uint_eq(s.fd[1].len, sizeof(want_out) - 1);
    ck_assert_mem_eq(s.fd[1].data, want_out, sizeof(want_out) - 1);
    ck_assert_str_eq(s.fd[2].data, "warn \xe2\x82\xac\n");
    ck_assert_int_eq(d.ended, 1);
    ck_assert_int_eq(d.exit_code, 3);
    ck_assert_int_eq(d.timed_out, 0);
    ck_assert_int_eq(d.failed, 0);
    fc_nd_close(&d);
    sink_close(&s);
  }
}
END_TEST

START_TEST(nd_utf8_split_across_chunks_decodes_whole_character) {
  /* The character's bytes arrive in three network chunks. */
  static const char *const parts[] = {"{\"stdout\":\"x\xe2", "\x82", "\xac\"}\r\n"};
  struct fc_nd d;
  struct sink s;
  size_t i;

  sink_init(&s);
  fc_nd_init(&d, on_out, &s);
  for (i = 0; i < 3; i++)
    ck_assert_int_eq(fc_nd_feed(&d, parts[i], strlen(parts[i])), 0);
  ck_assert_int_eq(s.calls, 1);
  ck_assert_str_eq(s.fd[1].data, "x\xe2\x82\xac");
  ck_assert_int_eq(d.ended, 0);
  /* Stopping here is a clean end of the bytes (no partial line). */
  ck_assert_int_eq(fc_nd_finish(&d), 0);
  fc_nd_close(&d);
  sink_close(&s);
}
END_TEST

START_TEST(nd_b64_chunks_concatenate_to_the_bytes) {
  static const char answer[] = "{\"stdout_b64\":\"AAECAw==\"}\n{\"stderr_b64\":\"/w==\"}\n"
                               "{\"stdout_b64\":\"BAU\"}\n{\"exit_code\":0,\"timed_out\":false}\n";
  static const unsigned char want[] = {0, 1, 2, 3, 4, 5};
  struct fc_nd d;
  struct sink s;

  sink_init(&s);
  fc_nd_init(&d, on_out, &s);
  ck_assert_int_eq(feed_in_steps(&d, answer, sizeof(answer) - 1, 7), 0);
  ck_assert_uint_eq(s.fd[1].len, sizeof(want));
  ck_assert_mem_eq(s.fd[1].data, want, sizeof(want));
  ck_assert_uint_eq(s.fd[2].len, 1);
  ck_assert_int_eq((unsigned char)s.fd[2].data[0], 0xff);
  ck_assert_int_eq(d.ended, 1);
  ck_assert_int_eq(d.exit_code, 0);
  fc_nd_close(&d);
  sink_close(&s);
}
END_TEST

START_TEST(nd_timeout_error_running_and_lost_bytes_are_reported) {
  struct fc_nd d;
  struct sink s;
  static const char timed_out[] = "{\"stdout\":\"x\\n\"}\n{\"exit_code\":null,\"timed_out\":true,\"duration_ms\":1000}\n";
  static const char broken[] = "{\"stdout\":\"x\"}\n{\"error\":{\"code\":\"agent_unavailable\",\"message\":\"gone\"}}\n";
  static const char replay[] = "{\"lost_bytes\":7}\n{\"stdout\":\"tail\"}\n{\"running\":true}\n";

  sink_init(&s);
  fc_nd_init(&d, on_out, &s);
  ck_assert_int_eq(fc_nd_feed(&d, timed_out, sizeof(timed_out) - 1), 0);
  ck_assert_int_eq(d.ended, 1);
  ck_assert_int_eq(d.timed_out, 1);
  ck_assert_int_eq(d.exit_code, -1);
  fc_nd_close(&d);

  fc_nd_init(&d, on_out, &s);
  ck_assert_int_eq(fc_nd_feed(&d, broken, sizeof(broken) - 1), 0);
  ck_assert_int_eq(d.ended, 0);
  ck_assert_int_eq(d.failed, 1);
  ck_assert_str_eq(d.err_code, "agent_unavailable");
  ck_assert_str_eq(d.err_msg, "gone");
  fc_nd_close(&d);

  fc_nd_init(&d, on_out, &s);
  ck_assert_int_eq(fc_nd_feed(&d, replay, sizeof(replay) - 1), 0);
  ck_assert_int_eq(d.lost_bytes, 7);
  ck_assert_int_eq(d.running, 1);
  ck_assert_int_eq(d.ended, 0);
  fc_nd_close(&d);
  sink_close(&s);
}
END_TEST

START_TEST(nd_bad_input_is_a_protocol_error) {
  static const char *const bad[] = {
      "not json\n",
      "[1,2]\n",
      "{\"stdout\":42}\n",
      "{\"stdout_b64\":\"!!!!\"}\n",
      "{\"exit_code\":\"3\"}\n",
      "{\"exit_code\":null,\"timed_out\":false}\n",
      "{\"lost_bytes\":-1}\n",
      "{\"exit_code\":0,\"timed_out\":false}\n{\"stdout\":\"late\"}\n",
  };
  size_t i;

  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct fc_nd d;
    struct sink s;

    sink_init(&s);
    fc_nd_init(&d, on_out, &s);
    ck_assert_msg(fc_nd_feed(&d, bad[i], strlen(bad[i])) == -EPROTO, "accepted: %s", bad[i]);
    fc_nd_close(&d);
    sink_close(&s);
  }
}
END_TEST

START_TEST(nd_partial_last_line_and_overlong_line_fail) {
  struct fc_nd d;
  struct sink s;
  char *big;

  sink_init(&s);
  fc_nd_init(&d, on_out, &s);
  ck_assert_int_eq(fc_nd_feed(&d, "{\"stdout\":\"cut", strlen("{\"stdout\":\"cut")), 0);
  ck_assert_int_eq(s.calls, 0);
  ck_assert_int_eq(fc_nd_finish(&d), -EPROTO);
  fc_nd_close(&d);

  /* A line past the bound is refused before it is all buffered. */
  big = malloc(FC_ND_MAX_LINE + 1);
  ck_assert_ptr_nonnull(big);
  memset(big, 'x', FC_ND_MAX_LINE + 1);
  fc_nd_init(&d, on_out, &s);
  ck_assert_int_eq(fc_nd_feed(&d, big, FC_ND_MAX_LINE / 2), 0);
  ck_assert_int_eq(fc_nd_feed(&d, big, FC_ND_MAX_LINE / 2 + 1), -EPROTO);
  ck_assert_uint_le(d.line.len, FC_ND_MAX_LINE);
  fc_nd_close(&d);
  free(big);
  sink_close(&s);
}
END_TEST

START_TEST(nd_output_callback_error_stops_the_feed) {
  struct fc_nd d;
  struct sink s;

  sink_init(&s);
  s.fail_with = -EPIPE;
  fc_nd_init(&d, on_out, &s);
  ck_assert_int_eq(fc_nd_feed(&d, exec_answer, sizeof(exec_answer) - 1), -EPIPE);
  ck_assert_int_eq(s.calls, 1);
  ck_assert_int_eq(d.ended, 0);
  fc_nd_close(&d);
  sink_close(&s);
}
END_TEST

int main(void) {
  Suite *s = suite_create("fedctl_ndjson");
  TCase *tc = tcase_create("core");
  SRunner *sr;
  int failed;

  tcase_add_test(tc, nd_exec_answer_cut_anywhere_same_output);
  tcase_add_test(tc, nd_utf8_split_across_chunks_decodes_whole_character);
  tcase_add_test(tc, nd_b64_chunks_concatenate_to_the_bytes);
  tcase_add_test(tc, nd_timeout_error_running_and_lost_bytes_are_reported);
  tcase_add_test(tc, nd_bad_input_is_a_protocol_error);
  tcase_add_test(tc, nd_partial_last_line_and_overlong_line_fail);
  tcase_add_test(tc, nd_output_callback_error_stops_the_feed);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
