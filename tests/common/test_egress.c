/* test_egress.c - egress policies (fr/egress.h): what counts as an address
 * or CIDR and what is refused with which words, the canonical form (order,
 * duplicates, the default), its text both ways and the hash two writings
 * of one policy share. */
#include "fr/egress.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static const struct {
  const char *in, *canon;
} good[] = {
    {"10.0.0.0/8", "10.0.0.0/8"},
    {"203.0.113.7", "203.0.113.7/32"},
    {"0.0.0.0/0", "0.0.0.0/0"},
    {"192.168.1.128/25", "192.168.1.128/25"},
    {"2001:db8::/32", "2001:db8::/32"},
    {"2001:DB8:0:0::1", "2001:db8::1/128"},
    {"::/0", "::/0"},
    {"::ffff:10.1.2.3/128", "::ffff:10.1.2.3/128"},
    {"fe80::/10", "fe80::/10"},
};

START_TEST(cidr_valid_is_parsed_into_its_canonical_text) {
  struct fr_cidr c;
  char why[300], out[FR_CIDR_STRLEN];

  ck_assert_msg(fr_cidr_parse(good[_i].in, &c, why, sizeof(why)) == 0, "%s: %s", good[_i].in, why);
  fr_cidr_format(&c, out);
  ck_assert_str_eq(out, good[_i].canon);
}
END_TEST

static const struct {
  const char *in, *words;
} bad[] = {
    {"example.com", "is a domain name"},
    {"api.openai.com/32", "is a domain name"},
    {"localhost", "is a domain name"},
    {"10.0.0.0/33", "prefix length must be a number from 0 to 32"},
    {"2001:db8::/129", "from 0 to 128"},
    {"10.0.0.0/", "prefix length"},
    {"10.0.0.0/08", "prefix length"},
    {"10.0.0.0/+8", "prefix length"},
    {"10.0.0.0/8/8", "prefix length"},
    {"10.0.0.1/8", "did you mean 10.0.0.0/8?"},
    {"2001:db8::1/32", "did you mean 2001:db8::/32?"},
    {"010.0.0.1", "not an IP address or CIDR"},
    {"10.0.0", "not an IP address or CIDR"},
    {"256.0.0.1", "not an IP address or CIDR"},
    {"fe80::1%eth0", "not an IP address or CIDR"},
    {" 10.0.0.1", "not an IP address or CIDR"},
    {"", "empty"},
};

START_TEST(cidr_invalid_is_refused_saying_why) {
  struct fr_cidr c;
  char why[300] = "";

  ck_assert_int_eq(fr_cidr_parse(bad[_i].in, &c, why, sizeof(why)), -EINVAL);
  ck_assert_msg(strstr(why, bad[_i].words) != NULL, "%s: \"%s\" lacks \"%s\"", bad[_i].in, why, bad[_i].words);
}
END_TEST

START_TEST(cidr_too_long_is_refused) {
  char s[200];
  struct fr_cidr c;

  memset(s, '1', sizeof(s) - 1);
  s[sizeof(s) - 1] = '\0';
  ck_assert_int_eq(fr_cidr_parse(s, &c, NULL, 0), -EINVAL);
}
END_TEST

START_TEST(cidr_contains_only_its_own_family_and_range) {
  struct fr_cidr a, b;

  ck_assert_int_eq(fr_cidr_parse("10.0.0.0/8", &a, NULL, 0), 0);
  ck_assert_int_eq(fr_cidr_parse("10.1.2.0/24", &b, NULL, 0), 0);
  ck_assert_int_eq(fr_cidr_contains(&a, &b), 1);
  ck_assert_int_eq(fr_cidr_contains(&b, &a), 0);
  ck_assert_int_eq(fr_cidr_parse("11.1.2.0/24", &b, NULL, 0), 0);
  ck_assert_int_eq(fr_cidr_contains(&a, &b), 0);
  ck_assert_int_eq(fr_cidr_parse("::/0", &b, NULL, 0), 0);
  ck_assert_int_eq(fr_cidr_contains(&b, &a), 0);
  ck_assert_int_eq(fr_cidr_parse("0.0.0.0/0", &b, NULL, 0), 0);
  ck_assert_int_eq(fr_cidr_contains(&b, &a), 1);
}
END_TEST

START_TEST(egress_list_is_bounded) {
  struct fr_egress e;
  char s[32], why[200];
  int i;

  fr_egress_init(&e);
  for (i = 0; i < FR_EGRESS_MAX_CIDRS; i++) {
    snprintf(s, sizeof(s), "10.0.%d.0/24", i);
    ck_assert_int_eq(fr_egress_add(&e, 1, s, why, sizeof(why)), 0);
  }
  ck_assert_int_eq(fr_egress_add(&e, 1, "10.1.0.0/24", why, sizeof(why)), -E2BIG);
  ck_assert_ptr_nonnull(strstr(why, "at most 64"));
  ck_assert_int_eq(fr_egress_add(&e, 0, "10.1.0.0/24", why, sizeof(why)), 0);
}
END_TEST

START_TEST(egress_same_policy_written_differently_has_one_hash) {
  struct fr_egress a, b;
  char ha[FR_EGRESS_HASH_LEN + 1], hb[FR_EGRESS_HASH_LEN + 1], text[FR_EGRESS_TEXT_MAX];

  fr_egress_init(&a);
  a.allow_internet = 0;
  ck_assert_int_eq(fr_egress_add(&a, 0, "2001:db8::/32", NULL, 0), 0);
  ck_assert_int_eq(fr_egress_add(&a, 0, "10.0.0.0/8", NULL, 0), 0);
  ck_assert_int_eq(fr_egress_add(&a, 0, "10.0.0.0/8", NULL, 0), 0);
  fr_egress_normalize(&a);
  fr_egress_init(&b);
  b.allow_internet = 0;
  ck_assert_int_eq(fr_egress_add(&b, 0, "10.0.0.0/8", NULL, 0), 0);
  ck_assert_int_eq(fr_egress_add(&b, 0, "2001:DB8::/32", NULL, 0), 0);
  fr_egress_normalize(&b);
  fr_egress_hash(&a, ha);
  fr_egress_hash(&b, hb);
  ck_assert_str_eq(ha, hb);
  ck_assert_int_eq(fr_egress_hash_valid(ha), 1);
  ck_assert_int_eq(fr_egress_text(&a, text, sizeof(text)), 0);
  ck_assert_str_eq(text, "internet=0;allow=10.0.0.0/8,2001:db8::/32;deny=");
  /* Another policy, another hash. */
  b.allow_internet = 1;
  ck_assert_int_eq(fr_egress_add(&b, 1, "10.0.0.0/8", NULL, 0), 0);
  fr_egress_normalize(&b);
  fr_egress_hash(&b, hb);
  ck_assert_str_ne(ha, hb);
}
END_TEST

START_TEST(egress_default_needs_no_policy) {
  struct fr_egress e;
  char text[FR_EGRESS_TEXT_MAX];

  ck_assert_int_eq(fr_egress_is_default(NULL), 1);
  fr_egress_init(&e);
  ck_assert_int_eq(fr_egress_is_default(&e), 1);
  /* Allowing more than everything is still everything. */
  ck_assert_int_eq(fr_egress_add(&e, 0, "10.0.0.0/8", NULL, 0), 0);
  fr_egress_normalize(&e);
  ck_assert_int_eq(fr_egress_is_default(&e), 1);
  ck_assert_int_eq(fr_egress_text(&e, text, sizeof(text)), 0);
  ck_assert_str_eq(text, "internet=1;allow=;deny=");
  /* But not once something is denied: then allow wins over it. */
  ck_assert_int_eq(fr_egress_add(&e, 0, "10.1.0.0/16", NULL, 0), 0);
  ck_assert_int_eq(fr_egress_add(&e, 1, "10.0.0.0/8", NULL, 0), 0);
  fr_egress_normalize(&e);
  ck_assert_int_eq(fr_egress_is_default(&e), 0);
  ck_assert_int_eq(fr_egress_text(&e, text, sizeof(text)), 0);
  ck_assert_str_eq(text, "internet=1;allow=10.1.0.0/16;deny=10.0.0.0/8");
  e.allow_internet = 0;
  e.ndeny = 0;
  ck_assert_int_eq(fr_egress_is_default(&e), 0);
}
END_TEST

START_TEST(egress_text_reads_back_and_refuses_anything_else) {
  static const char *const texts[] = {"internet=0;allow=;deny=", "internet=1;allow=10.1.0.0/16;deny=10.0.0.0/8,::/0",
                                      "internet=0;allow=192.0.2.1/32,2001:db8::/32;deny="};
  static const char *const junk[] = {"", "internet=2;allow=;deny=", "internet=1;allow=;", "internet=1;allow=x;deny=",
                                     "internet=1;allow=10.0.0.0/8,;deny=", "internet=1;deny=;allow="};
  struct fr_egress e;
  char text[FR_EGRESS_TEXT_MAX];
  size_t i;

  for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
    ck_assert_int_eq(fr_egress_parse_text(texts[i], &e), 0);
    ck_assert_int_eq(fr_egress_text(&e, text, sizeof(text)), 0);
    ck_assert_str_eq(text, texts[i]);
  }
  for (i = 0; i < sizeof(junk) / sizeof(junk[0]); i++)
    ck_assert_msg(fr_egress_parse_text(junk[i], &e) == -EINVAL, "\"%s\" was read", junk[i]);
  ck_assert_int_eq(fr_egress_parse_text(NULL, &e), -EINVAL);
}
END_TEST

START_TEST(egress_full_lists_fit_the_text_bound) {
  struct fr_egress e;
  char s[64], text[FR_EGRESS_TEXT_MAX];
  int i;

  fr_egress_init(&e);
  for (i = 0; i < FR_EGRESS_MAX_CIDRS; i++) {
    snprintf(s, sizeof(s), "ffff:ffff:ffff:ffff:ffff:ffff:ffff:%x/128", 0xff00 + i);
    ck_assert_int_eq(fr_egress_add(&e, 0, s, NULL, 0), 0);
    ck_assert_int_eq(fr_egress_add(&e, 1, s, NULL, 0), 0);
  }
  fr_egress_normalize(&e);
  ck_assert_int_eq(fr_egress_text(&e, text, sizeof(text)), 0);
  ck_assert_int_eq(fr_egress_text(&e, text, 100), -ENOSPC);
}
END_TEST

int main(void) {
  Suite *s = suite_create("egress");
  TCase *tc = tcase_create("egress");
  SRunner *sr;
  int failed;

  tcase_add_loop_test(tc, cidr_valid_is_parsed_into_its_canonical_text, 0, sizeof(good) / sizeof(good[0]));
  tcase_add_loop_test(tc, cidr_invalid_is_refused_saying_why, 0, sizeof(bad) / sizeof(bad[0]));
  tcase_add_test(tc, cidr_too_long_is_refused);
  tcase_add_test(tc, cidr_contains_only_its_own_family_and_range);
  tcase_add_test(tc, egress_list_is_bounded);
  tcase_add_test(tc, egress_same_policy_written_differently_has_one_hash);
  tcase_add_test(tc, egress_default_needs_no_policy);
  tcase_add_test(tc, egress_text_reads_back_and_refuses_anything_else);
  tcase_add_test(tc, egress_full_lists_fit_the_text_bound);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
