/* test_gwpath.c - a cluster's gateway URLs as the router sees them
 * (gwpath.c): what each call's end says of a URL's health, the breakers
 * and the round-robin pick that skips open URLs and falls back to the pod
 * proxy, the signed headers (a client's Fr-Gateway-* dropped), and the
 * key file re-read on the loop's thread pool (a file without a valid key
 * keeps the old one). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "fr/gwproto.h"
#include "gwpath.h"

#define KEY_A "0123456789abcdef0123456789abcdef"
#define KEY_B "fedcba9876543210fedcba9876543210-b"

static uv_loop_t loop;
static struct gwpath *gw;

static void closed_cb(void *arg) {
  *(int *)arg = 1;
}

static struct gwpath *make(const char *key_file, size_t nurls) {
  static const char *const urls[] = {"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"};
  struct fr_adapter_gateway g = {urls, nurls, NULL, KEY_A, sizeof(KEY_A) - 1, key_file};
  struct gwpath *out = NULL;
  char err[256];

  ck_assert_int_eq(uv_loop_init(&loop), 0);
  ck_assert_msg(gwpath__new(&loop, "c1", &g, &out, err, sizeof(err)) == 0, "gwpath__new: %s", err);
  return out;
}

static void teardown(void) {
  int closed = 0;

  gwpath__close(gw, closed_cb, &closed);
  while (!closed)
    uv_run(&loop, UV_RUN_ONCE);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}

START_TEST(gwpath_outcome_of_a_response_says_what_it_tells_of_the_gateway) {
  struct fr_kube_response r;

  memset(&r, 0, sizeof(r));
  /* No connection at all: not there. */
  r.attempts = 1;
  r.not_sent = 1;
  ck_assert_int_eq(gwpath__outcome(&r, 0, ""), GWPATH_DOWN);
  /* Sent, no answer: may be slow or gone. */
  r.not_sent = 0;
  ck_assert_int_eq(gwpath__outcome(&r, 0, ""), GWPATH_FAILED);
  /* Cut after the answer began, or never sent (the client's queue): nothing. */
  ck_assert_int_eq(gwpath__outcome(&r, 1, ""), GWPATH_NONE);
  r.attempts = 0;
  r.not_sent = 1;
  ck_assert_int_eq(gwpath__outcome(&r, 0, ""), GWPATH_NONE);
  /* Its own 503s fail it; a sandbox's 503 and its refusals are answers. */
  r.attempts = 1;
  r.not_sent = 0;
  r.status = 503;
  ck_assert_int_eq(gwpath__outcome(&r, 1, "not_ready"), GWPATH_FAILED);
  ck_assert_int_eq(gwpath__outcome(&r, 1, "shutting_down"), GWPATH_DOWN);
  ck_assert_int_eq(gwpath__outcome(&r, 1, ""), GWPATH_OK);
  r.status = 401;
  ck_assert_int_eq(gwpath__outcome(&r, 1, "unauthenticated"), GWPATH_OK);
  r.status = 404;
  ck_assert_int_eq(gwpath__outcome(&r, 1, "sandbox_not_found"), GWPATH_OK);
  r.status = 200;
  ck_assert_int_eq(gwpath__outcome(&r, 1, ""), GWPATH_OK);
}
END_TEST

START_TEST(gwpath_pick_skips_open_urls_and_falls_back_to_the_pod_proxy) {
  int seen[3] = {0, 0, 0}, i;

  gw = make(NULL, 3);
  ck_assert_int_eq(gwpath__pick(gw), 0);
  ck_assert_int_eq(gwpath__pick(gw), 1);
  ck_assert_int_eq(gwpath__pick(gw), 2);
  ck_assert_int_eq(gwpath__pick(gw), 0);
  ck_assert_ptr_nonnull(gwpath__client(gw, 2));
  ck_assert_ptr_null(gwpath__client(gw, 3));
  ck_assert_ptr_null(gwpath__client(gw, GWPATH_POD_PROXY));
  /* A refused connection opens URL 1 at once. */
  gwpath__report(gw, 1, GWPATH_DOWN);
  for (i = 0; i < 6; i++)
    seen[gwpath__pick(gw)]++;
  ck_assert_int_eq(seen[1], 0);
  ck_assert_int_eq(seen[0], 3);
  ck_assert_int_eq(seen[2], 3);
  /* Other failures: two in a row; an answer between resets the count. */
  gwpath__report(gw, 0, GWPATH_FAILED);
  gwpath__report(gw, 0, GWPATH_OK);
  gwpath__report(gw, 0, GWPATH_FAILED);
  ck_assert_msg(gwpath__pick(gw) == 0 || gwpath__pick(gw) == 0, "one failure opened URL 0");
  gwpath__report(gw, 0, GWPATH_FAILED);
  ck_assert_int_eq(gwpath__pick(gw), 2);
  ck_assert_int_eq(gwpath__pick(gw), 2);
  /* Every URL open: the pod proxy. */
  gwpath__report(gw, 2, GWPATH_DOWN);
  ck_assert_int_eq(gwpath__healthy(gw), 0);
  ck_assert_int_eq(gwpath__pick(gw), GWPATH_POD_PROXY);
  /* A cut answer says nothing: still open. An answer closes it. */
  gwpath__report(gw, 2, GWPATH_NONE);
  ck_assert_int_eq(gwpath__pick(gw), GWPATH_POD_PROXY);
  gwpath__report(gw, 2, GWPATH_OK);
  ck_assert_int_eq(gwpath__healthy(gw), 1);
  ck_assert_int_eq(gwpath__pick(gw), 2);
  /* Out of range and the pod proxy are ignored. */
  gwpath__report(gw, 7, GWPATH_DOWN);
  gwpath__report(gw, GWPATH_POD_PROXY, GWPATH_DOWN);
  ck_assert_int_eq(gwpath__pick(gw), 2);
  /* No gateway at all. */
  ck_assert_int_eq(gwpath__pick(NULL), GWPATH_POD_PROXY);
  ck_assert_int_eq(gwpath__healthy(NULL), 0);
  teardown();
}
END_TEST

/* 1 when <headers> hold an Fr-Gateway-Auth for c1/ns/pod:port made with <key>. */
static int signed_with(const char *headers, const char *key) {
  struct fr_gw_keyring ring;
  struct fr_gw_target t;
  char value[FR_GW_AUTH_MAX + 1];
  const char *v = strstr(headers, FR_GW_AUTH_HEADER ": ");
  size_t n;

  if (v == NULL)
    return 0;
  v += sizeof(FR_GW_AUTH_HEADER ": ") - 1;
  n = strcspn(v, "\n");
  if (n >= sizeof(value))
    return 0;
  memcpy(value, v, n);
  value[n] = '\0';
  memset(&ring, 0, sizeof(ring));
  ring.k[0].key = (unsigned char *)key;
  ring.k[0].len = strlen(key);
  ring.n = 1;
  memset(&t, 0, sizeof(t));
  snprintf(t.ns, sizeof(t.ns), "ns");
  snprintf(t.pod, sizeof(t.pod), "pod");
  t.port = 49983;
  return fr_gw_verify(&ring, value, "c1", &t, (int64_t)time(NULL), NULL) == FR_GW_OK;
}

START_TEST(gwpath_headers_are_signed_and_drop_a_clients_gateway_headers) {
  char *h;
  const char *p;
  int n = 0;

  gw = make(NULL, 1);
  h = gwpath__headers(gw, "c1", "ns", "pod", 49983, "X-A: 1\nFr-Gateway-Auth: v1.1.forged\nfr-gateway-error: x\nX-B: 2");
  ck_assert_ptr_nonnull(h);
  ck_assert_msg(strncmp(h, FR_GW_AUTH_HEADER ": v1.", sizeof(FR_GW_AUTH_HEADER ": v1.") - 1) == 0, "%s", h);
  ck_assert_msg(strstr(h, "\nX-A: 1\nX-B: 2\n") != NULL, "%s", h);
  for (p = h; *p != '\0'; p++)
    n += strncasecmp(p, "fr-gateway", 10) == 0;
  ck_assert_int_eq(n, 1);
  ck_assert(signed_with(h, KEY_A));
  free(h);
  teardown();
}
END_TEST

static void write_key(const char *path, const char *text) {
  FILE *f = fopen(path, "w");

  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

/* 1 when the headers made now are signed with <key>. */
static int signs_with(const char *key) {
  char *h = gwpath__headers(gw, "c1", "ns", "pod", 49983, NULL);
  int ok = h != NULL && signed_with(h, key);

  free(h);
  return ok;
}

/* Runs the loop until two more reads of the key file are done (the first
 * may have begun before the file changed), or 10 s of loop time pass. */
static int wait_reads(void) {
  uint64_t want = gwpath__key_reads(gw) + 2, deadline;

  uv_update_time(&loop);
  deadline = uv_now(&loop) + 10000;
  while (gwpath__key_reads(gw) < want && uv_now(&loop) < deadline)
    uv_run(&loop, UV_RUN_ONCE);
  return gwpath__key_reads(gw) >= want;
}

START_TEST(gwpath_key_file_is_reread_and_a_bad_one_keeps_the_key) {
  char dir[] = "/tmp/test_gwpath_XXXXXX", path[64];

  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/key", dir);
  write_key(path, KEY_A "\n");
  gw = make(path, 1);
  gwpath__start(gw);
  ck_assert(signs_with(KEY_A));
  /* Rewritten: the next signatures use the new key. */
  write_key(path, KEY_B "\n");
  ck_assert(wait_reads());
  ck_assert_msg(signs_with(KEY_B), "the key file was not re-read");
  /* Too short, then gone: the key read before stays. */
  write_key(path, "short\n");
  ck_assert(wait_reads());
  ck_assert(signs_with(KEY_B));
  ck_assert_int_eq(unlink(path), 0);
  ck_assert(wait_reads());
  ck_assert(signs_with(KEY_B));
  /* Back with the first key. */
  write_key(path, KEY_A);
  ck_assert(wait_reads());
  ck_assert(signs_with(KEY_A));
  teardown();
  unlink(path);
  rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("gwpath");
  TCase *tc = tcase_create("gwpath");
  SRunner *sr;
  int failed;

  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, gwpath_outcome_of_a_response_says_what_it_tells_of_the_gateway);
  tcase_add_test(tc, gwpath_pick_skips_open_urls_and_falls_back_to_the_pod_proxy);
  tcase_add_test(tc, gwpath_headers_are_signed_and_drop_a_clients_gateway_headers);
  tcase_add_test(tc, gwpath_key_file_is_reread_and_a_bad_one_keeps_the_key);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
