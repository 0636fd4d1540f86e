/* test_buf.c - fr_buf and fr/util.h helpers. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fr/buf.h"
#include "fr/util.h"

START_TEST(buf_append_grows_keeps_terminator) {
  struct fr_buf b;
  int i;

  fr_buf_init(&b);
  for (i = 0; i < 1000; i++)
    ck_assert_int_eq(fr_buf_puts(&b, "ab"), 0);
  ck_assert_uint_eq(b.len, 2000);
  ck_assert_int_eq(b.data[2000], '\0');
  ck_assert_int_eq(strncmp(b.data + 1998, "ab", 2), 0);
  fr_buf_free(&b);
  ck_assert_ptr_null(b.data);
}
END_TEST

START_TEST(buf_printf_consume_detach_roundtrip) {
  struct fr_buf b;
  size_t len;
  char *p;

  fr_buf_init(&b);
  ck_assert_int_eq(fr_buf_printf(&b, "%d-%s", 42, "x"), 0);
  ck_assert_str_eq(b.data, "42-x");
  fr_buf_consume(&b, 3);
  ck_assert_str_eq(b.data, "x");
  p = fr_buf_detach(&b, &len);
  ck_assert_str_eq(p, "x");
  ck_assert_uint_eq(len, 1);
  ck_assert_ptr_null(b.data);
  free(p);
  p = fr_buf_detach(&b, &len);
  ck_assert_str_eq(p, "");
  free(p);
}
END_TEST

START_TEST(buf_json_str_escapes_and_replaces_invalid_utf8) {
  struct fr_buf b;
  const char in[] = "a\"b\\c\n\x01\xc3\xa9\xff";

  fr_buf_init(&b);
  ck_assert_int_eq(fr_buf_put_json_str(&b, in, sizeof(in) - 1), 0);
  ck_assert_str_eq(b.data, "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\xef\xbf\xbd\"");
  fr_buf_free(&b);
}
END_TEST

START_TEST(utf8_char_lengths_malformed_and_cut_short) {
  const unsigned char *u;

  ck_assert_int_eq(fr_utf8_char((const unsigned char *)"a", 1), 1);
  u = (const unsigned char *)"\xC3\xA9";          /* é */
  ck_assert_int_eq(fr_utf8_char(u, 2), 2);
  ck_assert_int_eq(fr_utf8_char(u, 1), -1);       /* cut short */
  u = (const unsigned char *)"\xE2\x82\xAC";      /* € */
  ck_assert_int_eq(fr_utf8_char(u, 3), 3);
  ck_assert_int_eq(fr_utf8_char(u, 2), -1);
  u = (const unsigned char *)"\xF0\x9F\x98\x80";  /* U+1F600 */
  ck_assert_int_eq(fr_utf8_char(u, 4), 4);
  ck_assert_int_eq(fr_utf8_char(u, 3), -1);
  /* malformed: a lone continuation, an overlong, a surrogate, past
   * U+10FFFF, a cut start followed by a non-continuation byte */
  ck_assert_int_eq(fr_utf8_char((const unsigned char *)"\x80", 1), 0);
  ck_assert_int_eq(fr_utf8_char((const unsigned char *)"\xC0\xAF", 2), 0);
  ck_assert_int_eq(fr_utf8_char((const unsigned char *)"\xE0\x80\xAF", 3), 0);
  ck_assert_int_eq(fr_utf8_char((const unsigned char *)"\xED\xA0\x80", 3), 0);
  ck_assert_int_eq(fr_utf8_char((const unsigned char *)"\xF4\x90\x80\x80", 4), 0);
  ck_assert_int_eq(fr_utf8_char((const unsigned char *)"\xE2\x41", 2), 0);
}
END_TEST

START_TEST(json_chars_length_matches_what_is_appended) {
  static const char text[] = "a\"b\\c\n\t\r\b\f\x01\x1f\x7f \xC3\xA9\xE2\x82\xAC";
  struct fr_buf b;

  fr_buf_init(&b);
  ck_assert_int_eq(fr_buf_put_json_chars(&b, text, sizeof(text) - 1), 0);
  ck_assert_str_eq(b.data, "a\\\"b\\\\c\\n\\t\\r\\b\\f\\u0001\\u001f\x7f \xC3\xA9\xE2\x82\xAC");
  ck_assert_uint_eq(fr_json_escaped_len(text, sizeof(text) - 1), b.len);
  fr_buf_free(&b);
}
END_TEST

START_TEST(base64_roundtrip_and_urlsafe_decode) {
  char enc[64];
  unsigned char dec[64];
  long n;

  fr_base64_encode("hello world", 11, enc);
  ck_assert_str_eq(enc, "aGVsbG8gd29ybGQ=");
  n = fr_base64_decode(enc, strlen(enc), dec);
  ck_assert_int_eq(n, 11);
  ck_assert_int_eq(memcmp(dec, "hello world", 11), 0);
  n = fr_base64_decode("-_8", 3, dec);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(dec[0], 0xfb);
  ck_assert_int_eq(dec[1], 0xff);
  ck_assert_int_eq(fr_base64_decode("a$bc", 4, dec), -EINVAL);
}
END_TEST

START_TEST(parse_int64_rejects_junk_and_range) {
  int64_t v;

  ck_assert_int_eq(fr_parse_int64("123", 0, 1000, &v), 0);
  ck_assert_int_eq(v, 123);
  ck_assert_int_eq(fr_parse_int64("12x", 0, 1000, &v), -EINVAL);
  ck_assert_int_eq(fr_parse_int64("", 0, 1000, &v), -EINVAL);
  ck_assert_int_eq(fr_parse_int64(" 1", 0, 1000, &v), -EINVAL);
  ck_assert_int_eq(fr_parse_int64("1001", 0, 1000, &v), -ERANGE);
  ck_assert_int_eq(fr_parse_int64("99999999999999999999", 0, INT64_MAX, &v), -ERANGE);
}
END_TEST

START_TEST(time_rfc3339_roundtrip) {
  char out[21];
  int64_t t;

  fr_time_rfc3339(1795303276, out);
  ck_assert_str_eq(out, "2026-11-21T23:21:16Z");
  ck_assert_int_eq(fr_time_parse_rfc3339(out, &t), 0);
  ck_assert_int_eq(t, 1795303276);
  ck_assert_int_eq(fr_time_parse_rfc3339("2026-11-21T23:21:16.123Z", &t), 0);
  ck_assert_int_eq(t, 1795303276);
  ck_assert_int_eq(fr_time_parse_rfc3339("2026-11-21 23:21:16", &t), -EINVAL);
}
END_TEST

/* RFC 4231, test case 2. */
START_TEST(hmac_sha256_hex_rfc4231_vector) {
  char out[65];
  static const char msg[] = "what do ya want for nothing?";

  ck_assert_int_eq(fr_hmac_sha256_hex("Jefe", 4, msg, sizeof(msg) - 1, out), 0);
  ck_assert_str_eq(out, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}
END_TEST

/* A buffer only reserved, never appended to, is "" (fr/buf.h keeps the
 * data terminated): a kubesim proxy once sent such a buffer's garbage as
 * response headers. */
START_TEST(buf_reserved_only_reads_as_empty_string) {
  struct fr_buf b;

  fr_buf_init(&b);
  ck_assert_int_eq(fr_buf_reserve(&b, 0), 0);
  ck_assert_ptr_nonnull(b.data);
  ck_assert_str_eq(b.data, "");
  ck_assert_int_eq(fr_buf_reserve(&b, 1000), 0); /* grown: still terminated */
  ck_assert_str_eq(b.data, "");
  ck_assert_int_eq(fr_buf_puts(&b, "ab"), 0);
  ck_assert_int_eq(fr_buf_reserve(&b, 100000), 0);
  ck_assert_str_eq(b.data, "ab");
  fr_buf_free(&b);
}
END_TEST

START_TEST(sha256_hex_known_vector) {
  char out[65];

  fr_sha256_hex("abc", 3, out);
  ck_assert_str_eq(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
END_TEST

START_TEST(edit_distance_counts_edits) {
  ck_assert_uint_eq(fr_edit_distance("region", "region"), 0);
  ck_assert_uint_eq(fr_edit_distance("regoin", "region"), 2);
  ck_assert_uint_eq(fr_edit_distance("latncy", "latency"), 1);
  ck_assert_uint_eq(fr_edit_distance("", "abc"), 3);
  ck_assert_uint_eq(fr_edit_distance("kitten", "sitting"), 3);
  ck_assert_uint_eq(fr_edit_distance("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "a"), SIZE_MAX);
}
END_TEST

START_TEST(secret_equal_compares_whole_strings) {
  ck_assert_int_eq(fr_secret_equal("abc", "abc"), 1);
  ck_assert_int_eq(fr_secret_equal("abc", "abd"), 0);
  ck_assert_int_eq(fr_secret_equal("abc", "abcd"), 0);
  ck_assert_int_eq(fr_secret_equal("", ""), 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("buf");
  TCase *tc = tcase_create("core");
  SRunner *sr;
  int failed;

  tcase_add_test(tc, buf_append_grows_keeps_terminator);
  tcase_add_test(tc, buf_printf_consume_detach_roundtrip);
  tcase_add_test(tc, buf_json_str_escapes_and_replaces_invalid_utf8);
  tcase_add_test(tc, base64_roundtrip_and_urlsafe_decode);
  tcase_add_test(tc, utf8_char_lengths_malformed_and_cut_short);
  tcase_add_test(tc, json_chars_length_matches_what_is_appended);
  tcase_add_test(tc, parse_int64_rejects_junk_and_range);
  tcase_add_test(tc, time_rfc3339_roundtrip);
  tcase_add_test(tc, sha256_hex_known_vector);
  tcase_add_test(tc, buf_reserved_only_reads_as_empty_string);
  tcase_add_test(tc, hmac_sha256_hex_rfc4231_vector);
  tcase_add_test(tc, secret_equal_compares_whole_strings);
  tcase_add_test(tc, edit_distance_counts_edits);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
