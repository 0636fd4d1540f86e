/* test_cost.c - the cost model: the seed's worked example to the cent,
 * per-resource and per-node cluster prices, an unpriced cluster costing 0,
 * and the `hosted` group of the router config (defaults, custom values,
 * errors with file:line). Expected figures are computed by hand in the
 * comments, not by the code under test. */
#include "fr/cost.h"

#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fr/config.h"

#ifndef FR_CONFIG_EXAMPLES_DIR
#error "FR_CONFIG_EXAMPLES_DIR must point at config/examples"
#endif

#define GIB INT64_C(1073741824)
#define CENT 0.01
#define EPS 1e-9

/* Modal's published on-demand rates, the documented defaults. */
#define MODAL_CORE_SECOND 0.00003942
#define MODAL_GIB_SECOND 0.00000672

/* ---- the seed's worked example (docs/metrics.md) ---- */

/* 50,000 sandboxes of 2 vCPU / 4 GiB. Hosted: 2 * 0.00003942 * 3600 =
 * 0.283824 plus 4 * 0.00000672 * 3600 = 0.096768, i.e. 0.380592 $/h each,
 * $19,029.60 for all. Self-run: one n4-standard-2 node at $0.093/h each,
 * $4,650. Saving: $14,379.60 per hour. */
START_TEST(worked_example_50k_sandboxes_match_seed_figures) {
  const struct fr_config_hosted hosted = {MODAL_CORE_SECOND, MODAL_GIB_SECOND};
  const struct fr_config_cost n4 = {.node_hour = 0.093, .sandboxes_per_node = 1};
  double one_hosted = fr_cost_hosted_hour(&hosted, 2000, 4 * GIB);
  double one_node = fr_cost_sandbox_hour(&n4, 2000, 4 * GIB);
  double fleet_hosted = 50000 * one_hosted;
  double fleet_nodes = 50000 * one_node;

  ck_assert_double_eq_tol(one_hosted, 0.380592, EPS);
  ck_assert_double_eq_tol(one_node, 0.093, EPS);
  ck_assert_double_eq_tol(fleet_hosted, 19029.60, CENT);
  ck_assert_double_eq_tol(fleet_nodes, 4650.00, CENT);
  ck_assert_double_eq_tol(fleet_hosted - fleet_nodes, 14379.60, CENT);
  ck_assert_int_eq(fr_cost_known(&n4), 1);
}
END_TEST

START_TEST(hosted_hour_splits_into_core_and_gib_parts) {
  const struct fr_config_hosted hosted = {MODAL_CORE_SECOND, MODAL_GIB_SECOND};

  /* 1 core: 0.00003942 * 3600 = 0.141912; 1 GiB: 0.00000672 * 3600 = 0.024192 */
  ck_assert_double_eq_tol(fr_cost_hosted_hour(&hosted, 1000, 0), 0.141912, EPS);
  ck_assert_double_eq_tol(fr_cost_hosted_hour(&hosted, 0, GIB), 0.024192, EPS);
  /* the default shape, 1 cpu / 2 GiB: 0.141912 + 0.048384 */
  ck_assert_double_eq_tol(fr_cost_hosted_hour(&hosted, 1000, 2 * GIB), 0.190296, EPS);
  /* 250 millicores / 512 MiB: 0.035478 + 0.012096 */
  ck_assert_double_eq_tol(fr_cost_hosted_hour(&hosted, 250, GIB / 2), 0.047574, EPS);
}
END_TEST

START_TEST(hosted_hour_null_or_zero_request_is_zero) {
  const struct fr_config_hosted hosted = {MODAL_CORE_SECOND, MODAL_GIB_SECOND};
  const struct fr_config_hosted free_ = {0, 0};

  ck_assert_double_eq(fr_cost_hosted_hour(NULL, 2000, 4 * GIB), 0.0);
  ck_assert_double_eq(fr_cost_hosted_hour(&free_, 2000, 4 * GIB), 0.0);
  ck_assert_double_eq(fr_cost_hosted_hour(&hosted, 0, 0), 0.0);
  ck_assert_double_eq(fr_cost_hosted_hour(&hosted, -1000, -GIB), 0.0);
}
END_TEST

/* ---- cluster prices ---- */

START_TEST(sandbox_hour_per_resource_prices_cores_and_gib) {
  /* the example config's us-east: 0.0316 $/core-h, 0.0042 $/GiB-h */
  const struct fr_config_cost c = {.per_core_hour = 0.0316, .per_gib_hour = 0.0042};

  /* 2 * 0.0316 + 4 * 0.0042 = 0.0632 + 0.0168 */
  ck_assert_double_eq_tol(fr_cost_sandbox_hour(&c, 2000, 4 * GIB), 0.0800, EPS);
  /* 0.5 * 0.0316 + 0.25 * 0.0042 = 0.0158 + 0.00105 */
  ck_assert_double_eq_tol(fr_cost_sandbox_hour(&c, 500, GIB / 4), 0.01685, EPS);
  ck_assert_double_eq_tol(fr_cost_sandbox_hour(&c, 1000, 0), 0.0316, EPS);
  ck_assert_double_eq_tol(fr_cost_sandbox_hour(&c, 0, GIB), 0.0042, EPS);
  ck_assert_double_eq(fr_cost_sandbox_hour(&c, -5, -5), 0.0);
  ck_assert_int_eq(fr_cost_known(&c), 1);
}
END_TEST

START_TEST(sandbox_hour_only_core_price_is_known) {
  const struct fr_config_cost core = {.per_core_hour = 0.05};
  const struct fr_config_cost mem = {.per_gib_hour = 0.01};

  ck_assert_double_eq_tol(fr_cost_sandbox_hour(&core, 3000, 8 * GIB), 0.15, EPS);
  ck_assert_double_eq_tol(fr_cost_sandbox_hour(&mem, 3000, 8 * GIB), 0.08, EPS);
  ck_assert_int_eq(fr_cost_known(&core), 1);
  ck_assert_int_eq(fr_cost_known(&mem), 1);
}
END_TEST

START_TEST(sandbox_hour_shared_node_divides_node_price) {
  /* the example config's ap-tokyo: 1.52 $/node-h over 32 sandboxes */
  const struct fr_config_cost tokyo = {.node_hour = 1.52, .sandboxes_per_node = 32};
  const struct fr_config_cost four = {.node_hour = 0.093, .sandboxes_per_node = 4};

  ck_assert_double_eq_tol(fr_cost_sandbox_hour(&tokyo, 1000, 2 * GIB), 0.0475, EPS);
  /* 0.093 / 4 = 0.02325, whatever the shape */
  ck_assert_double_eq_tol(fr_cost_sandbox_hour(&four, 2000, 4 * GIB), 0.02325, EPS);
  ck_assert_double_eq_tol(fr_cost_sandbox_hour(&four, 250, GIB / 4), 0.02325, EPS);
  /* 50,000 such sandboxes on 12,500 nodes: 12,500 * 0.093 */
  ck_assert_double_eq_tol(50000 * fr_cost_sandbox_hour(&four, 2000, 4 * GIB), 1162.50, CENT);
  ck_assert_int_eq(fr_cost_known(&four), 1);
}
END_TEST

START_TEST(sandbox_hour_free_nodes_are_known_at_zero) {
  /* on-premises hardware already paid for: node_hour = 0 is a price */
  const struct fr_config_cost c = {.node_hour = 0, .sandboxes_per_node = 8};

  ck_assert_double_eq(fr_cost_sandbox_hour(&c, 2000, 4 * GIB), 0.0);
  ck_assert_int_eq(fr_cost_known(&c), 1);
}
END_TEST

START_TEST(sandbox_hour_node_price_without_divisor_counts_one_per_node) {
  /* not producible from a config file, but a hand-built struct must not
   * divide by zero */
  const struct fr_config_cost c = {.node_hour = 0.5, .sandboxes_per_node = 0};

  ck_assert_double_eq_tol(fr_cost_sandbox_hour(&c, 2000, 4 * GIB), 0.5, EPS);
  ck_assert_int_eq(fr_cost_known(&c), 1);
}
END_TEST

START_TEST(sandbox_hour_unknown_cost_is_zero) {
  const struct fr_config_cost none = {0};

  ck_assert_double_eq(fr_cost_sandbox_hour(&none, 2000, 4 * GIB), 0.0);
  ck_assert_double_eq(fr_cost_sandbox_hour(NULL, 2000, 4 * GIB), 0.0);
  ck_assert_int_eq(fr_cost_known(&none), 0);
  ck_assert_int_eq(fr_cost_known(NULL), 0);
}
END_TEST

/* ---- the `hosted` group of the router config ---- */

static char tmpdir[PATH_MAX];

static void setup(void) {
  const char *base = getenv("TMPDIR");
  int n = snprintf(tmpdir, sizeof(tmpdir), "%s/fr-cost-XXXXXX",
                   base != NULL && base[0] != '\0' ? base : "/tmp");

  ck_assert_int_lt(n, (int)sizeof(tmpdir));
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void teardown(void) {
  nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Writes <text> as <tmpdir>/t.conf and loads it. */
static int load_text(const char *text, struct fr_config **c, struct fr_config_error *err) {
  char path[PATH_MAX];
  FILE *f;

  ck_assert_int_lt(snprintf(path, sizeof(path), "%s/t.conf", tmpdir), (int)sizeof(path));
  f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_ge(fputs(text, f), 0);
  ck_assert_int_eq(fclose(f), 0);
  return fr_config_load(path, c, err);
}

static struct fr_config *load_ok(const char *text) {
  struct fr_config *c = NULL;
  struct fr_config_error err;
  int rc = load_text(text, &c, &err);

  ck_assert_msg(rc == 0, "load failed (%d): %s:%d: %s", rc, err.file, err.line, err.msg);
  ck_assert_ptr_nonnull(c);
  return c;
}

/* Loads <text>, which must fail with -EINVAL at <line> with <msg> exactly. */
static void load_fails(const char *text, int line, const char *msg) {
  struct fr_config *c = (struct fr_config *)&c; /* must be reset to NULL */
  struct fr_config_error err;
  int rc = load_text(text, &c, &err);

  ck_assert_int_eq(rc, -EINVAL);
  ck_assert_ptr_null(c);
  ck_assert_str_eq(err.msg, msg);
  ck_assert_int_eq(err.line, line);
  ck_assert_ptr_nonnull(strstr(err.file, "/t.conf"));
}

#define MINIMAL                                                                              \
  "listen = \"127.0.0.1:8080\";\n"                                                           \
  "region = \"us\";\n"                                                                       \
  "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"a.kc\"; } );\n"

START_TEST(hosted_absent_gets_modal_defaults) {
  struct fr_config *c = load_ok(MINIMAL);

  ck_assert_double_eq_tol(c->hosted.per_core_second, 0.00003942, 1e-15);
  ck_assert_double_eq_tol(c->hosted.per_gib_second, 0.00000672, 1e-15);
  /* and they price the seed's sandbox at 0.380592 $/h */
  ck_assert_double_eq_tol(fr_cost_hosted_hour(&c->hosted, 2000, 4 * GIB), 0.380592, EPS);
  fr_config_unref(c);
}
END_TEST

START_TEST(hosted_empty_group_keeps_defaults) {
  struct fr_config *c = load_ok(MINIMAL "hosted = { };\n");

  ck_assert_double_eq_tol(c->hosted.per_core_second, 0.00003942, 1e-15);
  ck_assert_double_eq_tol(c->hosted.per_gib_second, 0.00000672, 1e-15);
  fr_config_unref(c);
}
END_TEST

START_TEST(hosted_custom_values_are_kept) {
  struct fr_config *c =
      load_ok(MINIMAL "hosted = { per_core_second = 0.0001; per_gib_second = 0.00002; };\n");

  ck_assert_double_eq_tol(c->hosted.per_core_second, 0.0001, 1e-15);
  ck_assert_double_eq_tol(c->hosted.per_gib_second, 0.00002, 1e-15);
  /* 2 * 0.0001 * 3600 + 4 * 0.00002 * 3600 = 0.72 + 0.288 */
  ck_assert_double_eq_tol(fr_cost_hosted_hour(&c->hosted, 2000, 4 * GIB), 1.008, EPS);
  fr_config_unref(c);
}
END_TEST

START_TEST(hosted_one_key_keeps_the_other_default) {
  struct fr_config *c = load_ok(MINIMAL "hosted = { per_gib_second = 0; };\n");

  ck_assert_double_eq_tol(c->hosted.per_core_second, 0.00003942, 1e-15);
  ck_assert_double_eq(c->hosted.per_gib_second, 0.0);
  fr_config_unref(c);
}
END_TEST

START_TEST(hosted_integer_amount_is_accepted) {
  struct fr_config *c = load_ok(MINIMAL "hosted = { per_core_second = 1; per_gib_second = 0; };\n");

  ck_assert_double_eq(c->hosted.per_core_second, 1.0);
  ck_assert_double_eq(c->hosted.per_gib_second, 0.0);
  fr_config_unref(c);
}
END_TEST

START_TEST(hosted_negative_price_is_rejected_with_line) {
  load_fails(MINIMAL "hosted = {\n  per_core_second = 0.00003942;\n  per_gib_second = -0.5;\n};\n",
             6, "hosted.per_gib_second: must be a number >= 0, got -0.5");
}
END_TEST

START_TEST(hosted_misspelled_key_suggests_the_known_one) {
  load_fails(MINIMAL "hosted = {\n  per_core_secnd = 0.0001;\n};\n", 5,
             "hosted.per_core_secnd: unknown key (did you mean \"per_core_second\"?)");
}
END_TEST

START_TEST(hosted_unrelated_key_lists_the_known_ones) {
  load_fails(MINIMAL "hosted = { vendor = \"modal\"; };\n", 4,
             "hosted.vendor: unknown key (known keys here: per_core_second, per_gib_second)");
}
END_TEST

START_TEST(hosted_string_price_is_rejected) {
  load_fails(MINIMAL "hosted = { per_core_second = \"0.0001\"; };\n", 4,
             "hosted.per_core_second: expected a number, got a string (\"0.0001\"); write "
             "numbers without quotes");
}
END_TEST

START_TEST(hosted_not_a_group_is_rejected) {
  load_fails(MINIMAL "hosted = 0.00003942;\n", 4,
             "hosted: expected a group { ... }, got a float");
}
END_TEST

START_TEST(hosted_misspelled_group_suggests_hosted) {
  load_fails(MINIMAL "hostd = { per_core_second = 0.0001; };\n", 4,
             "hostd: unknown key (did you mean \"hosted\"?)");
}
END_TEST

START_TEST(example_fedrouter_conf_documents_the_default_hosted_rates) {
  struct fr_config *c = NULL;
  struct fr_config_error err;
  int rc = fr_config_load(FR_CONFIG_EXAMPLES_DIR "/fedrouter.conf", &c, &err);

  ck_assert_msg(rc == 0, "%s:%d: %s", err.file, err.line, err.msg);
  ck_assert_double_eq_tol(c->hosted.per_core_second, 0.00003942, 1e-15);
  ck_assert_double_eq_tol(c->hosted.per_gib_second, 0.00000672, 1e-15);
  /* us-east prices resources: 2 * 0.0316 + 4 * 0.0042 */
  ck_assert_double_eq_tol(fr_cost_sandbox_hour(&c->clusters[0].cost, 2000, 4 * GIB), 0.08, EPS);
  /* ap-tokyo prices nodes: 1.52 / 32 */
  ck_assert_double_eq_tol(fr_cost_sandbox_hour(&c->clusters[1].cost, 2000, 4 * GIB), 0.0475,
                          EPS);
  fr_config_unref(c);
}
END_TEST

static Suite *cost_suite(void) {
  Suite *s = suite_create("cost");
  TCase *tc;

  tc = tcase_create("model");
  tcase_add_test(tc, worked_example_50k_sandboxes_match_seed_figures);
  tcase_add_test(tc, hosted_hour_splits_into_core_and_gib_parts);
  tcase_add_test(tc, hosted_hour_null_or_zero_request_is_zero);
  tcase_add_test(tc, sandbox_hour_per_resource_prices_cores_and_gib);
  tcase_add_test(tc, sandbox_hour_only_core_price_is_known);
  tcase_add_test(tc, sandbox_hour_shared_node_divides_node_price);
  tcase_add_test(tc, sandbox_hour_free_nodes_are_known_at_zero);
  tcase_add_test(tc, sandbox_hour_node_price_without_divisor_counts_one_per_node);
  tcase_add_test(tc, sandbox_hour_unknown_cost_is_zero);
  suite_add_tcase(s, tc);

  tc = tcase_create("config");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, hosted_absent_gets_modal_defaults);
  tcase_add_test(tc, hosted_empty_group_keeps_defaults);
  tcase_add_test(tc, hosted_custom_values_are_kept);
  tcase_add_test(tc, hosted_one_key_keeps_the_other_default);
  tcase_add_test(tc, hosted_integer_amount_is_accepted);
  tcase_add_test(tc, hosted_negative_price_is_rejected_with_line);
  tcase_add_test(tc, hosted_misspelled_key_suggests_the_known_one);
  tcase_add_test(tc, hosted_unrelated_key_lists_the_known_ones);
  tcase_add_test(tc, hosted_string_price_is_rejected);
  tcase_add_test(tc, hosted_not_a_group_is_rejected);
  tcase_add_test(tc, hosted_misspelled_group_suggests_hosted);
  tcase_add_test(tc, example_fedrouter_conf_documents_the_default_hosted_rates);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(cost_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
