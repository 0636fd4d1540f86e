/* test_urlsafe.c - what a path, query or name must look like before it
 * goes upstream (fr/urlsafe.h). */
#include "fr/urlsafe.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fr/util.h"

static int path_ok(const char *p) {
  return fr_url_path_check(p, strlen(p), NULL) == 0;
}

/* Paths a router serves and paths the adapter sends. */
static const char *const good_paths[] = {
    "/",
    "/healthz",
    "/v1/sandboxes/c1.sb-abc12",
    "/e2b/process.Process/Start",
    "/api/v1/namespaces/default/pods/sb-1:49983/proxy/files",
    "/api/v1/namespaces/default/pods/sb-1:49983/proxy/",
    "/v1/sandboxes/x/ports/8000/caf%C3%A9",
    "/a/.hidden/..x/x../...",
    "/v1/x%20y",
};

/* Each would mean another path after a server's normalization. */
static const char *const bad_paths[] = {
    "",
    "relative",
    "/a/../b",
    "/a/./b",
    "/..",
    "/.",
    "/a/..",
    "/a/%2e%2e/b",
    "/a/%2E%2E/b",
    "/a/.%2e/b",
    "/a/%2e/b",
    "/a/..%2fb",
    "/a/..%2Fb",
    "/a/b%5c..%5cc",
    "/a/b\\..\\c",
    "/a/%252e%252e/b",
    "/a/..;/b",
    "/a/b;x",
    "/a/b%3bx",
    "/a/b%00c",
    "/a/b%0d%0aX: y",
    "/a/b%7f",
    "/a//b",
    "//a",
    "/a/b%",
    "/a/b%4",
    "/a/b%zz",
    "/a b",
    "/a#b",
    "/a\tb",
    "/a\x80" "b",
};

START_TEST(path_check_table_good_paths_pass) {
  ck_assert_msg(path_ok(good_paths[_i]), "refused %s", good_paths[_i]);
}
END_TEST

START_TEST(path_check_table_bad_paths_refused_with_reason) {
  const char *why = NULL;

  ck_assert_int_eq(fr_url_path_check(bad_paths[_i], strlen(bad_paths[_i]), &why), -EINVAL);
  ck_assert_ptr_nonnull(why);
}
END_TEST

/* The length bounds what is read: a NUL after it does not matter, what
 * lies past it is not looked at. */
START_TEST(path_check_reads_only_len_bytes) {
  ck_assert_int_eq(fr_url_path_check("/a/b/../c", 4, NULL), 0);
  ck_assert_int_eq(fr_url_path_check("/a/%2", 5, NULL), -EINVAL);
  ck_assert_int_eq(fr_url_path_check(NULL, 0, NULL), -EINVAL);
}
END_TEST

START_TEST(query_check_printable_and_escapes) {
  static const char *const good[] = {"", "a=1", "labelSelector=fedrouter.io/sandbox!=true&limit=500",
                                     "path=%2Ftmp%2Fx", "x=%C3%A9", "a=..%2f.."};
  static const char *const bad[] = {"a=%00", "a=%1f", "a=%7F", "a=b c", "a=b#c", "a=%", "a=%g1", "a=\x01",
                                    "a=\xc3\xa9"};
  size_t i;

  for (i = 0; i < FR_ARRAY_SIZE(good); i++)
    ck_assert_msg(fr_url_query_check(good[i], strlen(good[i]), NULL) == 0, "refused %s", good[i]);
  for (i = 0; i < FR_ARRAY_SIZE(bad); i++)
    ck_assert_msg(fr_url_query_check(bad[i], strlen(bad[i]), NULL) == -EINVAL, "passed %s", bad[i]);
}
END_TEST

START_TEST(dns_names_labels_and_subdomains) {
  char long_label[70], long_sub[300];

  ck_assert(fr_dns_label("default"));
  ck_assert(fr_dns_label("a"));
  ck_assert(fr_dns_label("sb-0001"));
  ck_assert(!fr_dns_label(""));
  ck_assert(!fr_dns_label(NULL));
  ck_assert(!fr_dns_label("-a"));
  ck_assert(!fr_dns_label("a-"));
  ck_assert(!fr_dns_label("A"));
  ck_assert(!fr_dns_label("a.b"));
  ck_assert(!fr_dns_label(".."));
  memset(long_label, 'a', 64);
  long_label[64] = '\0';
  ck_assert(!fr_dns_label(long_label));
  long_label[63] = '\0';
  ck_assert(fr_dns_label(long_label));

  ck_assert(fr_dns_subdomain("fr-pool-default"));
  ck_assert(fr_dns_subdomain("a.b-c.d"));
  ck_assert(!fr_dns_subdomain(".."));
  ck_assert(!fr_dns_subdomain("."));
  ck_assert(!fr_dns_subdomain("a..b"));
  ck_assert(!fr_dns_subdomain("a."));
  ck_assert(!fr_dns_subdomain(".a"));
  ck_assert(!fr_dns_subdomain("a/b"));
  ck_assert(!fr_dns_subdomain("a%2fb"));
  ck_assert(!fr_dns_subdomain(""));
  memset(long_sub, 'a', sizeof(long_sub));
  for (size_t i = 60; i < 254; i += 61)
    long_sub[i] = '.';
  long_sub[254] = '\0';
  ck_assert(!fr_dns_subdomain(long_sub));
  long_sub[253] = '\0';
  ck_assert(fr_dns_subdomain(long_sub));
}
END_TEST

START_TEST(query_escape_escapes_all_but_unreserved) {
  char out[32];
  size_t at = 0;

  ck_assert_int_eq(fr_url_query_escape(out, sizeof(out), &at, "/tmp/a b&c=..~"), 0);
  ck_assert_str_eq(out, "%2Ftmp%2Fa%20b%26c%3D..~");
  ck_assert_uint_eq(at, strlen(out));
  /* Too long: an error, and what was there stays as it was. */
  at = 3;
  memcpy(out, "ab=", 4);
  ck_assert_int_eq(fr_url_query_escape(out, 8, &at, "/////"), -ENAMETOOLONG);
  ck_assert_uint_eq(at, 3);
  ck_assert_str_eq(out, "ab=");
}
END_TEST

static Suite *urlsafe_suite(void) {
  Suite *s = suite_create("urlsafe");
  TCase *tc = tcase_create("checks");

  tcase_add_loop_test(tc, path_check_table_good_paths_pass, 0, (int)FR_ARRAY_SIZE(good_paths));
  tcase_add_loop_test(tc, path_check_table_bad_paths_refused_with_reason, 0, (int)FR_ARRAY_SIZE(bad_paths));
  tcase_add_test(tc, path_check_reads_only_len_bytes);
  tcase_add_test(tc, query_check_printable_and_escapes);
  tcase_add_test(tc, dns_names_labels_and_subdomains);
  tcase_add_test(tc, query_escape_escapes_all_but_unreserved);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(urlsafe_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
