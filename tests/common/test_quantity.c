/* test_quantity.c - Kubernetes quantity parsing, rounding and formatting. */
#include "fr/quantity.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fr/util.h"

#define KI INT64_C(1024)
#define MI (KI * 1024)
#define GI (MI * 1024)
#define PI_ (GI * 1024 * 1024)

struct parse_case {
  const char *in;
  int rc;
  int64_t want;
};

/* ---- fr_quantity_parse_milli ---- */

static const struct parse_case milli_cases[] = {
    /* plain numbers and fractions */
    {"0", 0, 0},
    {"2", 0, 2000},
    {"8", 0, 8000},
    {"110", 0, 110000},
    {"0.5", 0, 500},
    {"1.5", 0, 1500},
    {".5", 0, 500},
    {"5.", 0, 5000},
    {"+5", 0, 5000},
    {"-1", 0, -1000},
    {"-0", 0, 0},
    {"-.5", 0, -500},
    {"0000000000000000000000001", 0, 1000},
    /* SI suffixes */
    {"100m", 0, 100},
    {"1500m", 0, 1500},
    {"1k", 0, 1000000},
    {"1M", 0, INT64_C(1000000000)},
    {"1G", 0, INT64_C(1000000000000)},
    {"1T", 0, INT64_C(1000000000000000)},
    {"1P", 0, INT64_C(1000000000000000000)},
    {"9P", 0, INT64_C(9000000000000000000)},
    {"1.5k", 0, 1500000},
    /* Kubernetes also takes micro and nano */
    {"100u", 0, 1},
    {"1500000n", 0, 2},
    {"0n", 0, 0},
    /* binary suffixes */
    {"1Ki", 0, KI * 1000},
    {"1Mi", 0, MI * 1000},
    {"512Mi", 0, 512 * MI * 1000},
    {"1Gi", 0, INT64_C(1073741824000)},
    {"32Gi", 0, 32 * GI * 1000},
    {"1.5Gi", 0, INT64_C(1610612736000)},
    {"-1.5Gi", 0, INT64_C(-1610612736000)},
    {"0.5Ki", 0, 512000},
    {"0.5Mi", 0, 524288000},
    {"1Ti", 0, GI * 1024 * 1000},
    {"1Pi", 0, PI_ * 1000},
    {"8Pi", 0, 8 * PI_ * 1000},
    {"0Ei", 0, 0},
    /* exponents */
    {"1e3", 0, 1000000},
    {"1E3", 0, 1000000},
    {"1e+3", 0, 1000000},
    {"1.5e3", 0, 1500000},
    {"12e-1", 0, 1200},
    {"1e-3", 0, 1},
    {"1e0", 0, 1000},
    {"0e100", 0, 0},
    /* fractions of a milli-unit round away from zero, like MilliValue */
    {"0.0001", 0, 1},
    {"-0.0001", 0, -1},
    {"1.5m", 0, 2},
    {"0.1m", 0, 1},
    {"0.001m", 0, 1},
    {"1e-100", 0, 1},
    {"1e-99999999999999999999", 0, 1},
    {"1.000000000000000000000000001", 0, 1001},
    {"0.0000000000000000000000000001Ei", 0, 1},
    {"0.001Ki", 0, 1024},
    {"0.0001Ki", 0, 103},
    /* the int64 edges */
    {"9223372036854775807m", 0, INT64_MAX},
    {"-9223372036854775807m", 0, -INT64_MAX},
    {"9223372036854775807.0001m", -ERANGE, 0},
    {"9223372036854775808m", -ERANGE, 0},
    {"1E", -ERANGE, 0},
    {"10P", -ERANGE, 0},
    {"9Pi", -ERANGE, 0},
    {"1Ei", -ERANGE, 0},
    {"10Ei", -ERANGE, 0},
    {"-10Ei", -ERANGE, 0},
    {"1e16", -ERANGE, 0},
    {"1e100", -ERANGE, 0},
    {"1e99999999999999999999", -ERANGE, 0},
    {"99999999999999999999999", -ERANGE, 0},
    /* bad syntax */
    {"", -EINVAL, 0},
    {"1.2.3", -EINVAL, 0},
    {"5x", -EINVAL, 0},
    {"Gi", -EINVAL, 0},
    {"m", -EINVAL, 0},
    {" 1", -EINVAL, 0},
    {"1 ", -EINVAL, 0},
    {"1 Gi", -EINVAL, 0},
    {"-", -EINVAL, 0},
    {"+", -EINVAL, 0},
    {".", -EINVAL, 0},
    {"--1", -EINVAL, 0},
    {"+-1", -EINVAL, 0},
    {"1e", -EINVAL, 0},
    {"1e+", -EINVAL, 0},
    {"1e-", -EINVAL, 0},
    {"1e3.5", -EINVAL, 0},
    {"1e3m", -EINVAL, 0},
    {"e3", -EINVAL, 0},
    {"1i", -EINVAL, 0},
    {".5i", -EINVAL, 0},
    {"1K", -EINVAL, 0},
    {"1KI", -EINVAL, 0},
    {"1Ki5", -EINVAL, 0},
    {"1mm", -EINVAL, 0},
    {"1Gb", -EINVAL, 0},
    {"0x10", -EINVAL, 0},
    {"1,5", -EINVAL, 0},
    {"0.1mi", -EINVAL, 0},
};

START_TEST(parse_milli_table_values_match) {
  const struct parse_case *c = &milli_cases[_i];
  int64_t got = -424242;
  int rc = fr_quantity_parse_milli(c->in, &got);

  ck_assert_msg(rc == c->rc, "\"%s\": rc %d, want %d", c->in, rc, c->rc);
  if (c->rc == 0)
    ck_assert_msg(got == c->want, "\"%s\": got %lld, want %lld", c->in, (long long)got,
                  (long long)c->want);
  else
    ck_assert_msg(got == -424242, "\"%s\": output written on error", c->in);
}
END_TEST

START_TEST(parse_milli_null_string_einval) {
  int64_t got = 7;

  ck_assert_int_eq(fr_quantity_parse_milli(NULL, &got), -EINVAL);
  ck_assert_int_eq(got, 7);
}
END_TEST

/* ---- fr_quantity_parse_value ---- */

static const struct parse_case value_cases[] = {
    {"1", 0, 1},
    {"0", 0, 0},
    {"1500m", 0, 2},
    {"1000m", 0, 1},
    {"1m", 0, 1},
    {"0.1", 0, 1},
    {"2.5", 0, 3},
    {"100m", 0, 1},
    {"-1500m", 0, -2},
    {"1Gi", 0, INT64_C(1073741824)},
    {"1.5Gi", 0, INT64_C(1610612736)},
    {"32Gi", 0, 32 * GI},
    {"1e3", 0, 1000},
    {"110", 0, 110},
    /* whole units reach further than milli-units */
    {"1E", 0, INT64_C(1000000000000000000)},
    {"1Ei", 0, INT64_C(1152921504606846976)},
    {"7Ei", 0, 7 * INT64_C(1152921504606846976)},
    {"9223372036854775807", 0, INT64_MAX},
    {"9223372036854775808", -ERANGE, 0},
    {"8Ei", -ERANGE, 0},
    {"10E", -ERANGE, 0},
    {"", -EINVAL, 0},
    {"Gi", -EINVAL, 0},
    {"5x", -EINVAL, 0},
};

START_TEST(parse_value_table_values_match) {
  const struct parse_case *c = &value_cases[_i];
  int64_t got = -424242;
  int rc = fr_quantity_parse_value(c->in, &got);

  ck_assert_msg(rc == c->rc, "\"%s\": rc %d, want %d", c->in, rc, c->rc);
  if (c->rc == 0)
    ck_assert_msg(got == c->want, "\"%s\": got %lld, want %lld", c->in, (long long)got,
                  (long long)c->want);
}
END_TEST

/* ---- formatting ---- */

struct format_case {
  int64_t in;
  const char *want;
};

static const struct format_case milli_formats[] = {
    {0, "0"},
    {500, "500m"},
    {1, "1m"},
    {1500, "1500m"},
    {2000, "2"},
    {-500, "-500m"},
    {-2000, "-2"},
    {110000, "110"},
    {1000000, "1000"},
    {1023000, "1023"},
    {1024000, "1Ki"},
    {1536000, "1536"},
    {1536 * KI * 1000, "1536Ki"},
    {512 * MI * 1000, "512Mi"},
    {INT64_C(1073741824000), "1Gi"},
    {-INT64_C(1073741824000), "-1Gi"},
    {32 * GI * 1000, "32Gi"},
    {GI * 1024 * 1000, "1Ti"},
    {PI_ * 1000, "1Pi"},
    {INT64_MAX, "9223372036854775807m"},
    {INT64_MIN, "-9223372036854775808m"},
};

START_TEST(format_milli_table_canonical) {
  const struct format_case *c = &milli_formats[_i];
  char out[32];
  size_t n;

  memset(out, 'x', sizeof(out));
  n = fr_quantity_format_milli(c->in, out, sizeof(out));
  ck_assert_str_eq(out, c->want);
  ck_assert_uint_eq(n, strlen(c->want));
}
END_TEST

static const struct format_case byte_formats[] = {
    {0, "0"},
    {1, "1"},
    {1000, "1000"},
    {1023, "1023"},
    {1024, "1Ki"},
    {1536, "1536"},
    {2048, "2Ki"},
    {-2048, "-2Ki"},
    {512 * MI, "512Mi"},
    {32 * GI, "32Gi"},
    {3 * PI_, "3Pi"},
    {INT64_C(1) << 60, "1Ei"},
    {INT64_C(7) << 60, "7Ei"},
    {INT64_MIN, "-8Ei"},
    {INT64_MAX, "9223372036854775807"},
};

START_TEST(format_bytes_table_canonical) {
  const struct format_case *c = &byte_formats[_i];
  char out[32];
  size_t n;

  n = fr_quantity_format_bytes(c->in, out, sizeof(out));
  ck_assert_str_eq(out, c->want);
  ck_assert_uint_eq(n, strlen(c->want));
}
END_TEST

START_TEST(format_exact_fit_written) {
  char out[5];

  /* <cap> counts the NUL: four characters fit in five bytes */
  ck_assert_uint_eq(fr_quantity_format_milli(500, out, 5), 4);
  ck_assert_str_eq(out, "500m");
  ck_assert_uint_eq(fr_quantity_format_bytes(1023, out, 5), 4);
  ck_assert_str_eq(out, "1023");
}
END_TEST

START_TEST(format_short_buffer_writes_empty_returns_zero) {
  char out[5] = "abcd";

  ck_assert_uint_eq(fr_quantity_format_milli(512 * MI * 1000, out, 5), 0);
  ck_assert_str_eq(out, "");
  memcpy(out, "abcd", 5);
  ck_assert_uint_eq(fr_quantity_format_bytes(12345, out, 5), 0);
  ck_assert_str_eq(out, "");
  ck_assert_uint_eq(fr_quantity_format_milli(1, out, 0), 0);
  ck_assert_uint_eq(fr_quantity_format_milli(1, NULL, 10), 0);
}
END_TEST

/* Whatever we print must parse back to the same value. */
START_TEST(format_milli_then_parse_roundtrips) {
  static const int64_t values[] = {
      0,    1,    -1,   999,  1000, 1001, 250,  123456789, 1024000, -1024000, 1536000,
      2000, 1500, 110000, INT64_C(1073741824000), 512 * MI * 1000, 7 * PI_ * 1000,
      INT64_MAX, INT64_MIN + 1, INT64_MAX / 1000 * 1000, 1024 * 1000 * 3 + 1000,
  };
  char out[32];
  int64_t back;

  for (size_t i = 0; i < FR_ARRAY_SIZE(values); i++) {
    ck_assert_uint_gt(fr_quantity_format_milli(values[i], out, sizeof(out)), 0);
    ck_assert_int_eq(fr_quantity_parse_milli(out, &back), 0);
    ck_assert_msg(back == values[i], "%lld -> \"%s\" -> %lld", (long long)values[i], out,
                  (long long)back);
  }
}
END_TEST

START_TEST(format_bytes_then_parse_roundtrips) {
  static const int64_t values[] = {
      0, 1, 1023, 1024, 1025, 4096, 1000000, 512 * MI, 32 * GI, 3 * PI_, INT64_C(1) << 60,
      INT64_MAX, -4096,
  };
  char out[32];
  int64_t back;

  for (size_t i = 0; i < FR_ARRAY_SIZE(values); i++) {
    ck_assert_uint_gt(fr_quantity_format_bytes(values[i], out, sizeof(out)), 0);
    ck_assert_int_eq(fr_quantity_parse_value(out, &back), 0);
    ck_assert_msg(back == values[i], "%lld -> \"%s\" -> %lld", (long long)values[i], out,
                  (long long)back);
  }
}
END_TEST

struct canon_case {
  const char *in;
  const char *want;
};

/* What a node or quota figure looks like after a parse/format cycle. */
static const struct canon_case canon_cases[] = {
    {"500m", "500m"}, {"0.5", "500m"}, {"2", "2"},         {"2000m", "2"},
    {"1Gi", "1Gi"},   {"1.5Gi", "1536Mi"}, {"1024Mi", "1Gi"}, {"1e3", "1000"},
    {"1k", "1000"},   {"0.25Ki", "256"},   {"32Gi", "32Gi"}, {"110", "110"},
    {"1.5", "1500m"},
};

START_TEST(parse_then_format_canonical) {
  const struct canon_case *c = &canon_cases[_i];
  int64_t milli;
  char out[32];

  ck_assert_int_eq(fr_quantity_parse_milli(c->in, &milli), 0);
  fr_quantity_format_milli(milli, out, sizeof(out));
  ck_assert_msg(strcmp(out, c->want) == 0, "\"%s\" -> \"%s\", want \"%s\"", c->in, out, c->want);
}
END_TEST

static Suite *quantity_suite(void) {
  Suite *s = suite_create("quantity");
  TCase *tc;

  tc = tcase_create("parse");
  tcase_add_loop_test(tc, parse_milli_table_values_match, 0, (int)FR_ARRAY_SIZE(milli_cases));
  tcase_add_test(tc, parse_milli_null_string_einval);
  tcase_add_loop_test(tc, parse_value_table_values_match, 0, (int)FR_ARRAY_SIZE(value_cases));
  suite_add_tcase(s, tc);

  tc = tcase_create("format");
  tcase_add_loop_test(tc, format_milli_table_canonical, 0, (int)FR_ARRAY_SIZE(milli_formats));
  tcase_add_loop_test(tc, format_bytes_table_canonical, 0, (int)FR_ARRAY_SIZE(byte_formats));
  tcase_add_test(tc, format_exact_fit_written);
  tcase_add_test(tc, format_short_buffer_writes_empty_returns_zero);
  tcase_add_test(tc, format_milli_then_parse_roundtrips);
  tcase_add_test(tc, format_bytes_then_parse_roundtrips);
  tcase_add_loop_test(tc, parse_then_format_canonical, 0, (int)FR_ARRAY_SIZE(canon_cases));
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(quantity_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
