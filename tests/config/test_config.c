/* test_config.c - the router configuration: the shipped examples load with
 * the values they document, every class of mistake is rejected with its
 * message and the right file:line, relative paths resolve against the
 * config's directory, snapshots are refcounted, tokens find their tenant. */
#include "fr/config.h"
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

#include "fr/egress.h"
#include "fr/util.h"
#include "fr_test_errors.h"

#ifndef FR_CONFIG_EXAMPLES_DIR
#error "FR_CONFIG_EXAMPLES_DIR must point at config/examples"
#endif

/* snprintf into an array, asserting nothing was cut off. */
#define PATHF(buf, ...) ck_assert_int_lt(snprintf(buf, sizeof(buf), __VA_ARGS__), (int)sizeof(buf))

/* ---- fixture: a fresh temporary directory per test ---- */

static char tmpdir[PATH_MAX];  /* as created */
static char realtmp[PATH_MAX]; /* its realpath (TMPDIR may be a symlink) */

static void setup(void) {
  const char *base = getenv("TMPDIR");
  PATHF(tmpdir, "%s/fr-config-XXXXXX", base != NULL && base[0] != '\0' ? base : "/tmp");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
  ck_assert_ptr_nonnull(realpath(tmpdir, realtmp));
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

/* Writes <text> to <tmpdir>/<name>; the full path goes to <path>. */
static void write_file(const char *name, const char *text, char *path, size_t size) {
  FILE *f;

  ck_assert_int_lt(snprintf(path, size, "%s/%s", tmpdir, name), (int)size);
  f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fputs(text, f) >= 0, 1);
  ck_assert_int_eq(fclose(f), 0);
}

static void make_dir(const char *name) {
  char path[PATH_MAX];
  PATHF(path, "%s/%s", tmpdir, name);
  ck_assert_int_eq(mkdir(path, 0755), 0);
}

/* Writes <text> as <tmpdir>/t.conf and loads it. */
static int load_text(const char *text, struct fr_config **c, struct fr_config_error *err) {
  char path[PATH_MAX];
  write_file("t.conf", text, path, sizeof(path));
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

#define LISTEN "listen = \"127.0.0.1:8080\";\n"
#define REGION "region = \"us\";\n"
#define CLUSTER "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"a.kc\"; } );\n"
#define MINIMAL LISTEN REGION CLUSTER
#define HASH_A "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb" /* "a" */
#define HASH_B "3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d" /* "b" */

/* ---- the shipped examples ---- */

START_TEST(example_fedrouter_conf_loads_with_documented_values) {
  struct fr_config *c = NULL;
  struct fr_config_error err;
  const struct fr_config_cluster *cl;
  char want[PATH_MAX], dir[PATH_MAX];
  int rc = fr_config_load(FR_CONFIG_EXAMPLES_DIR "/fedrouter.conf", &c, &err);

  ck_assert_msg(rc == 0, "%s:%d: %s", err.file, err.line, err.msg);
  ck_assert_ptr_nonnull(realpath(FR_CONFIG_EXAMPLES_DIR, dir));
  PATHF(want, "%s/fedrouter.conf", dir);
  ck_assert_str_eq(c->source, want);
  ck_assert_str_eq(c->listen_host, "127.0.0.1");
  ck_assert_int_eq(c->listen_port, 8080);
  ck_assert_ptr_null(c->health_host); /* not in the example */
  ck_assert_int_eq(c->health_port, -1);
  ck_assert_ptr_null(c->tls_cert);
  ck_assert_ptr_null(c->tls_key);
  ck_assert_str_eq(c->region, "us");
  PATHF(want, "%s/policy.conf", dir);
  ck_assert_str_eq(c->policy, want);
  ck_assert_int_eq(c->default_lifetime_s, 3600);
  ck_assert_int_eq(c->max_lifetime_s, 86400);
  ck_assert_str_eq(c->gpu_resource, "nvidia.com/gpu");
  ck_assert_int_eq(c->max_batch, 5000);
  ck_assert_uint_eq(c->max_body_bytes, 1048576);
  ck_assert_int_eq(c->max_exec_output_bytes, 16777216);
  ck_assert_int_eq(c->max_exec_timeout_s, 3600);
  /* The example runs sandboxes as a non-root uid. */
  ck_assert_int_eq(c->run_as_user, 1000);

  ck_assert_uint_eq(c->ntenants, 2);
  ck_assert_str_eq(c->tenants[0].name, "rl");
  ck_assert_int_eq(c->tenants[0].max_sandboxes, 20000);
  ck_assert_str_eq(c->tenants[1].name, "eval");
  ck_assert_int_eq(c->tenants[1].max_sandboxes, 0);
  ck_assert_str_eq(c->tenants[0].secret, "rl-sandbox-secrets");
  ck_assert_str_eq(c->tenants[1].secret, "eval-sandbox-secrets");
  ck_assert_ptr_eq(fr_config_tenant_by_token(c, "rl-team-token", NULL), &c->tenants[0]);
  ck_assert_ptr_eq(fr_config_tenant_by_token(c, "eval-token", NULL), &c->tenants[1]);
  ck_assert_uint_eq(c->tenants[0].ntokens, 1);
  ck_assert_str_eq(c->tenants[0].tokens[0].name, "team");
  ck_assert_str_eq(c->tenants[1].tokens[0].name, "default");
  ck_assert_int_eq(c->tenants[0].weight, 1);
  ck_assert_int_eq(c->queue_max_wait_s, 600);
  ck_assert_ptr_null(c->tenants[0].network);
  ck_assert_ptr_nonnull(c->tenants[1].network);
  ck_assert_int_eq(c->tenants[1].network->allow_internet, 0);
  ck_assert_uint_eq(c->tenants[1].network->nallow, 1);
  ck_assert_uint_eq(c->tenants[1].network->ndeny, 0);

  ck_assert_uint_eq(c->nclusters, 2);
  cl = &c->clusters[0];
  ck_assert_str_eq(cl->name, "us-east");
  ck_assert_str_eq(cl->region, "us");
  PATHF(want, "%s/kube/us-east.kubeconfig", dir);
  ck_assert_str_eq(cl->kubeconfig, want);
  ck_assert_str_eq(cl->context, "us-east");
  ck_assert_str_eq(cl->ns, "sandboxes");
  ck_assert_double_eq_tol(cl->cost.per_core_hour, 0.0316, 1e-12);
  ck_assert_double_eq_tol(cl->cost.per_gib_hour, 0.0042, 1e-12);
  ck_assert_double_eq(cl->cost.node_hour, 0);
  ck_assert_int_eq(cl->cost.sandboxes_per_node, 0);
  cl = &c->clusters[1];
  ck_assert_str_eq(cl->name, "ap-tokyo");
  ck_assert_str_eq(cl->region, "apac");
  ck_assert_str_eq(cl->kubeconfig, "/etc/fedrouter/ap-tokyo.kubeconfig");
  ck_assert_ptr_null(cl->context);
  ck_assert_str_eq(cl->ns, "default");
  ck_assert_double_eq(cl->cost.per_core_hour, 0);
  ck_assert_double_eq_tol(cl->cost.node_hour, 1.52, 1e-12);
  ck_assert_int_eq(cl->cost.sandboxes_per_node, 32);
  fr_config_unref(c);
}
END_TEST

START_TEST(example_demo_conf_loads_with_three_clusters_and_demo_tenant) {
  struct fr_config *c = NULL;
  struct fr_config_error err;
  static const char *const names[] = {"us-east", "us-west", "ap-tokyo"};
  static const char *const regions[] = {"us", "us", "apac"};
  size_t i;
  int rc = fr_config_load(FR_CONFIG_EXAMPLES_DIR "/demo.conf", &c, &err);

  ck_assert_msg(rc == 0, "%s:%d: %s", err.file, err.line, err.msg);
  ck_assert_str_eq(c->listen_host, "127.0.0.1");
  ck_assert_int_eq(c->listen_port, 8080);
  ck_assert_str_eq(c->region, "us");
  ck_assert_ptr_null(c->policy);
  ck_assert_uint_eq(c->ntenants, 1);
  ck_assert_str_eq(c->tenants[0].name, "demo");
  ck_assert_str_eq(c->tenants[0].tokens[0].sha256,
                   "7c43ef5ae21d43ce2743f770c68e24def1a43ee2f416d2438410c8af7af2ff2c");
  ck_assert_ptr_eq(fr_config_tenant_by_token(c, "demo-token", NULL), &c->tenants[0]);
  ck_assert_ptr_null(fr_config_tenant_by_token(c, "demo-token ", NULL));
  ck_assert_int_eq(c->run_as_user, 1000);
  ck_assert_uint_eq(c->nclusters, 3);
  for (i = 0; i < 3; i++) {
    char kc[128];
    PATHF(kc, "/tmp/fedrouter-demo/%s.kubeconfig", names[i]);
    ck_assert_str_eq(c->clusters[i].name, names[i]);
    ck_assert_str_eq(c->clusters[i].region, regions[i]);
    ck_assert_str_eq(c->clusters[i].kubeconfig, kc);
    ck_assert_str_eq(c->clusters[i].context, names[i]);
    ck_assert_str_eq(c->clusters[i].ns, "default");
    ck_assert(c->clusters[i].cost.per_core_hour > 0);
    ck_assert_ptr_eq(fr_config_cluster_by_name(c, names[i]), &c->clusters[i]);
  }
  fr_config_unref(c);
}
END_TEST

/* ---- values and defaults ---- */

START_TEST(config_minimal_gets_defaults) {
  struct fr_config *c = load_ok(MINIMAL);

  ck_assert_int_eq(c->refs, 1);
  ck_assert_int_eq(c->default_lifetime_s, 3600);
  ck_assert_int_eq(c->max_lifetime_s, 86400);
  ck_assert_str_eq(c->gpu_resource, "nvidia.com/gpu");
  ck_assert_int_eq(c->batch_commit_timeout_s, 30);
  ck_assert_int_eq(c->max_batch, 5000);
  ck_assert_uint_eq(c->max_body_bytes, 1024 * 1024);
  ck_assert_int_eq(c->max_exec_output_bytes, 16 * 1024 * 1024);
  ck_assert_int_eq(c->max_exec_timeout_s, 3600);
  ck_assert_int_eq(c->shutdown_delay_ms, 2000);
  ck_assert_ptr_null(c->tls_cert);
  ck_assert_ptr_null(c->policy);
  ck_assert_uint_eq(c->ntenants, 0);
  ck_assert_ptr_null(c->tenants);
  ck_assert_uint_eq(c->nclusters, 1);
  ck_assert_str_eq(c->clusters[0].ns, "default");
  ck_assert_ptr_null(c->clusters[0].context);
  ck_assert_double_eq(c->clusters[0].cost.per_core_hour, 0);
  ck_assert_int_eq(c->clusters[0].cost.sandboxes_per_node, 0);
  ck_assert_ptr_null(c->prometheus_url);
  ck_assert_int_eq(c->history_step_s, 10);
  fr_config_unref(c);
}
END_TEST

START_TEST(config_metrics_group_is_kept) {
  struct fr_config *c = load_ok(MINIMAL "metrics = { prometheus_url = \"http://127.0.0.1:9090/prom/\";"
                                        " history_step_s = 2; };\n");

  /* the trailing '/' goes: the API paths are appended */
  ck_assert_str_eq(c->prometheus_url, "http://127.0.0.1:9090/prom");
  ck_assert_int_eq(c->history_step_s, 2);
  fr_config_unref(c);
}
END_TEST

START_TEST(cost_per_gpu_hour_is_kept_and_prices_usage) {
  struct fr_config *c =
      load_ok(LISTEN REGION "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"k\";\n"
                            "  cost = { per_core_hour = 0.036; per_gib_hour = 0.0036; per_gpu_hour = 3.6; }; },\n"
                            " { name = \"b\"; region = \"us\"; kubeconfig = \"k\";\n"
                            "  cost = { node_hour = 0.72; sandboxes_per_node = 2; }; } );\n");

  ck_assert_double_eq(c->clusters[0].cost.per_gpu_hour, 3.6);
  ck_assert(fr_cost_known(&c->clusters[0].cost));
  /* 3600 sandbox-s, 7200 core-s, 3600 GiB-s, 1800 GPU-s:
   * (7200 * 0.036 + 3600 * 0.0036 + 1800 * 3.6) / 3600 */
  ck_assert_double_eq_tol(fr_cost_usage_dollars(&c->clusters[0].cost, 3600, 7200, 3600, 1800),
                          (7200 * 0.036 + 3600 * 0.0036 + 1800 * 3.6) / 3600, 1e-12);
  ck_assert_double_eq_tol(fr_cost_gpu_hour(&c->clusters[0].cost, 2), 7.2, 1e-12);
  /* the node model: sandbox-seconds at node_hour / sandboxes_per_node */
  ck_assert_double_eq_tol(fr_cost_usage_dollars(&c->clusters[1].cost, 7200, 99, 99, 99), 0.72, 1e-12);
  ck_assert_double_eq(fr_cost_gpu_hour(&c->clusters[1].cost, 2), 0);
  fr_config_unref(c);
}
END_TEST

/* Preview URLs' domain (with the port clients dial), the bounds on
 * requests to sandbox ports, E2B template names standing for pools. */
START_TEST(config_ports_and_e2b_templates_loaded) {
  struct fr_config *c = load_ok(MINIMAL "ports = { domain = \"sbx.localhost:8080\"; max_requests_per_sandbox = 8; };\n"
                                        "e2b = { templates = ( { name = \"code-interpreter-v1\"; pool = \"ci\"; },\n"
                                        "                      { name = \"base\"; pool = \"default\"; } ); };\n");

  ck_assert_str_eq(c->ports_domain, "sbx.localhost:8080");
  /* The cluster's short-id code: SHA-256("a") starts ca 97 81 12 (mod 36: m 7 l i). */
  ck_assert_str_eq(c->clusters[0].code, "m7li");
  ck_assert_int_eq(c->max_port_requests_per_sandbox, 8);
  ck_assert_int_eq(c->max_port_requests_per_tenant, 1024);
  ck_assert_uint_eq(c->ne2b_templates, 2);
  ck_assert_str_eq(c->e2b_templates[0].name, "code-interpreter-v1");
  ck_assert_str_eq(c->e2b_templates[0].pool, "ci");
  ck_assert_str_eq(c->e2b_templates[1].pool, "default");
  fr_config_unref(c);
  c = load_ok(MINIMAL);
  ck_assert_ptr_null(c->ports_domain);
  ck_assert_int_eq(c->max_port_requests_per_sandbox, 64);
  ck_assert_uint_eq(c->ne2b_templates, 0);
  fr_config_unref(c);
}
END_TEST

START_TEST(config_batch_commit_timeout_is_kept) {
  struct fr_config *c = load_ok(MINIMAL "sandbox = { batch_commit_timeout_s = 120; run_as_user = 1000; };\n");

  ck_assert_int_eq(c->batch_commit_timeout_s, 120);
  ck_assert_int_eq(c->run_as_user, 1000);
  fr_config_unref(c);
  c = load_ok(MINIMAL);
  ck_assert_int_eq(c->run_as_user, 0);
  fr_config_unref(c);
}
END_TEST

START_TEST(config_tenant_network_is_the_normalized_default) {
  struct fr_config *c = load_ok(MINIMAL
                                "tenants = ( { name = \"t\"; token_sha256 = \"" HASH_A "\";\n"
                                "  network = { allow_internet = false;\n"
                                "    allow_out = [\"10.1.0.0/16\", \"2001:db8::1\", \"10.1.0.0/16\"]; }; },\n"
                                "  { name = \"u\"; token_sha256 = \"" HASH_B "\";\n"
                                "    network = { deny_out = [\"169.254.169.254\"]; }; } );\n");
  char text[FR_EGRESS_TEXT_MAX];

  ck_assert_ptr_nonnull(c->tenants[0].network);
  ck_assert_int_eq(fr_egress_text(c->tenants[0].network, text, sizeof(text)), 0);
  ck_assert_str_eq(text, "internet=0;allow=10.1.0.0/16,2001:db8::1/128;deny=");
  ck_assert_int_eq(fr_egress_text(c->tenants[1].network, text, sizeof(text)), 0);
  ck_assert_str_eq(text, "internet=1;allow=;deny=169.254.169.254/32");
  fr_config_unref(c);
  /* No network group: no default of its own. */
  c = load_ok(MINIMAL "tenants = ( { name = \"t\"; token_sha256 = \"" HASH_A "\"; } );\n");
  ck_assert_ptr_null(c->tenants[0].network);
  fr_config_unref(c);
}
END_TEST

START_TEST(config_all_limits_set_are_kept) {
  struct fr_config *c = load_ok(MINIMAL
                                "sandbox = { default_lifetime_s = 60; max_lifetime_s = 600;\n"
                                "  gpu_resource = \"amd.com/gpu\"; };\n"
                                "limits = { max_batch = 100000; max_body_bytes = 1024;\n"
                                "  max_exec_output_bytes = 1; max_exec_timeout_s = 5L; };\n"
                                "tenants = ( { name = \"t\"; token_sha256 = \"" HASH_A "\";\n"
                                "  max_sandboxes = 7; } );\n"
                                "shutdown_delay_ms = 0;\n");

  ck_assert_int_eq(c->default_lifetime_s, 60);
  ck_assert_int_eq(c->max_lifetime_s, 600);
  ck_assert_str_eq(c->gpu_resource, "amd.com/gpu");
  ck_assert_int_eq(c->max_batch, 100000);
  ck_assert_uint_eq(c->max_body_bytes, 1024);
  ck_assert_int_eq(c->max_exec_output_bytes, 1);
  ck_assert_int_eq(c->max_exec_timeout_s, 5);
  ck_assert_int_eq(c->tenants[0].max_sandboxes, 7);
  ck_assert_int_eq(c->shutdown_delay_ms, 0);
  fr_config_unref(c);
}
END_TEST

START_TEST(config_empty_tenant_list_is_allowed) {
  struct fr_config *c = load_ok(MINIMAL "tenants = ();\n");

  ck_assert_uint_eq(c->ntenants, 0);
  ck_assert_ptr_null(fr_config_tenant_by_token(c, "a", NULL));
  fr_config_unref(c);
}
END_TEST

START_TEST(cluster_name_of_32_chars_is_accepted) {
  struct fr_config *c =
      load_ok(LISTEN REGION "clusters = ( { name = \"abcdefghijklmnopqrstuvwxyz-01234\";\n"
                            "  region = \"us\"; kubeconfig = \"k\"; } );\n");

  ck_assert_uint_eq(strlen(c->clusters[0].name), 32);
  fr_config_unref(c);
}
END_TEST

START_TEST(cost_integers_are_accepted_as_amounts) {
  struct fr_config *c =
      load_ok(LISTEN REGION "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"k\";\n"
                            "  cost = { node_hour = 2; sandboxes_per_node = 8; }; } );\n");

  ck_assert_double_eq(c->clusters[0].cost.node_hour, 2.0);
  ck_assert_int_eq(c->clusters[0].cost.sandboxes_per_node, 8);
  fr_config_unref(c);
}
END_TEST

/* ---- listen addresses ---- */

struct listen_case {
  const char *in;
  const char *host;
  int port;
};

static const struct listen_case listen_ok_cases[] = {
    {"127.0.0.1:8080", "127.0.0.1", 8080},
    {"[::1]:8080", "::1", 8080},
    {"[::]:443", "::", 443},
    {"[fe80::1%eth0]:9000", "fe80::1%eth0", 9000},
    {"0.0.0.0:65535", "0.0.0.0", 65535},
    {"localhost:0", "localhost", 0},
    {"router.internal.example:80", "router.internal.example", 80},
};

START_TEST(listen_valid_address_is_split_into_host_and_port) {
  const struct listen_case *t = &listen_ok_cases[_i];
  char text[512];
  struct fr_config *c;

  snprintf(text, sizeof(text), "listen = \"%s\";\n" REGION CLUSTER, t->in);
  c = load_ok(text);
  ck_assert_str_eq(c->listen_host, t->host);
  ck_assert_int_eq(c->listen_port, t->port);
  fr_config_unref(c);
}
END_TEST

/* ---- every class of error: message and line ---- */

struct err_case {
  const char *name; /* <subject>_<condition>, the result is always "rejected" */
  const char *text;
  int line;         /* 0: the top level (no line of its own) */
  const char *msg;  /* a substring of the message */
};

#define T(s) "    token_sha256 = \"" s "\";\n"

static const struct err_case err_cases[] = {
    /* required keys: reported at the enclosing group, here the top level */
    {"listen_missing", REGION CLUSTER, 0, "listen: missing (HOST:PORT"},
    {"region_missing", LISTEN CLUSTER, 0, "region: missing"},
    {"clusters_missing", LISTEN REGION, 0, "clusters: missing (at least one cluster is required)"},
    {"clusters_empty", LISTEN REGION "clusters = ();\n", 3, "clusters: empty"},
    {"clusters_not_a_list", LISTEN REGION "clusters = { name = \"a\"; };\n", 3,
     "clusters: expected a list of groups ( { ... }, { ... } ), got a group"},
    {"clusters_element_not_a_group", LISTEN REGION "clusters = ( \"a\" );\n", 3,
     "clusters.[0]: expected a group { ... }, got a string"},
    {"cluster_region_missing",
     LISTEN REGION "clusters = (\n  { name = \"a\"; region = \"us\"; kubeconfig = \"k\"; },\n  {\n"
                   "    name = \"b\";\n    kubeconfig = \"k\";\n  }\n);\n",
     5, "clusters.[1].region: missing (every cluster needs a region)"},
    {"cluster_kubeconfig_missing", LISTEN REGION "clusters = (\n  { name = \"a\"; region = \"us\"; }\n);\n",
     4, "clusters.[0].kubeconfig: missing"},
    {"cluster_name_missing", LISTEN REGION "clusters = (\n  { region = \"us\"; kubeconfig = \"k\"; }\n);\n",
     4, "clusters.[0].name: missing"},
    {"tenant_name_missing", MINIMAL "tenants = (\n  {\n" T(HASH_A) "  }\n);\n", 5,
     "tenants.[0].name: missing"},
    {"tenant_token_missing", MINIMAL "tenants = (\n  {\n    name = \"t\";\n  }\n);\n", 5,
     "tenants.[0].token_sha256: missing"},
    {"tenant_token_name_missing", MINIMAL "tenants = (\n  { name = \"t\"; tokens = (\n    { sha256 = \"" HASH_A "\"; } ); }\n);\n",
     6, "tenants.[0].tokens.[0].name: missing"},
    {"tenant_token_expires_bad", MINIMAL "tenants = (\n  { name = \"t\"; tokens = (\n    { name = \"x\"; sha256 = \"" HASH_A "\";\n"
                                         "      expires = \"tomorrow\"; } ); }\n);\n",
     7, "tenants.[0].tokens.[0].expires: \"tomorrow\" is not a UTC time"},
    {"tenant_token_name_twice", MINIMAL "tenants = (\n  { name = \"t\"; tokens = (\n    { name = \"x\"; sha256 = \"" HASH_A "\"; },\n"
                                        "    { name = \"x\"; sha256 = \"" HASH_B "\"; } ); }\n);\n",
     7, "tenant t has two tokens named \"x\""},
    {"tenant_token_in_two_tenants", MINIMAL "tenants = (\n  { name = \"t\"; token_sha256 = \"" HASH_A "\"; },\n"
                                            "  { name = \"u\"; tokens = ( { name = \"x\";\n    sha256 = \"" HASH_A "\"; } ); }\n);\n",
     6, "same token as tenant \"t\" (line 5)"},
    {"tenant_weight_zero", MINIMAL "tenants = (\n  { name = \"t\"; token_sha256 = \"" HASH_A "\";\n    weight = 0; }\n);\n",
     6, "tenants.[0].weight: 0 is out of range (1-1000)"},
    {"tenant_max_cpus_zero", MINIMAL "tenants = (\n  { name = \"t\"; token_sha256 = \"" HASH_A "\";\n    max_cpus = 0; }\n);\n",
     6, "tenants.[0].max_cpus: must be a number above 0"},
    {"queue_e2b_wait_above_max", MINIMAL "queue = {\n  max_wait_s = 10;\n  e2b_wait_s = 20;\n};\n", 6,
     "queue.e2b_wait_s: 20 is above max_wait_s (10)"},
    {"tls_key_missing", MINIMAL "tls = {\n  cert = \"t.conf\";\n};\n", 4, "tls.key: missing"},
    {"cost_node_hour_without_sandboxes_per_node",
     LISTEN REGION "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"k\";\n"
                   "  cost = {\n    node_hour = 1.5;\n  }; } );\n",
     4, "clusters.[0].cost.sandboxes_per_node: missing"},
    {"cost_sandboxes_per_node_without_node_hour",
     LISTEN REGION "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"k\";\n"
                   "  cost = {\n    sandboxes_per_node = 4;\n  }; } );\n",
     4, "clusters.[0].cost.node_hour: missing"},

    /* types: name what was expected and what was given */
    {"listen_number", "listen = 8080;\n" REGION CLUSTER, 1,
     "listen: expected a string, got an integer"},
    {"max_batch_string", MINIMAL "limits = {\n  max_batch = \"5000\";\n};\n", 5,
     "limits.max_batch: expected an integer, got a string (\"5000\")"},
    {"max_body_bytes_float", MINIMAL "limits = {\n  max_body_bytes = 1.5;\n};\n", 5,
     "limits.max_body_bytes: expected an integer, got a float"},
    {"default_lifetime_bool", MINIMAL "sandbox = { default_lifetime_s = true; };\n", 4,
     "expected an integer, got a boolean"},
    {"region_list", LISTEN "region = ( \"us\" );\n" CLUSTER, 2,
     "region: expected a string, got a list"},
    {"sandbox_not_a_group", MINIMAL "sandbox = 5;\n", 4, "sandbox: expected a group { ... }, got an integer"},
    {"tenants_group", MINIMAL "tenants = { name = \"a\"; };\n", 4,
     "tenants: expected a list of groups"},
    {"cost_string", LISTEN REGION "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"k\";\n"
                                  "  cost = { per_core_hour = \"0.03\"; }; } );\n",
     4, "clusters.[0].cost.per_core_hour: expected a number, got a string (\"0.03\")"},
    {"tenant_max_sandboxes_string",
     MINIMAL "tenants = (\n  { name = \"t\"; token_sha256 = \"" HASH_A "\";\n"
             "    max_sandboxes = \"10\"; }\n);\n",
     6, "tenants.[0].max_sandboxes: expected an integer, got a string"},

    /* listen addresses */
    {"health_listen_same_as_listen", MINIMAL "health_listen = \"127.0.0.1:8080\";\n", 4,
     "health_listen: \"127.0.0.1:8080\" is the listen address too"},
    {"health_listen_bad_port", MINIMAL "health_listen = \"127.0.0.1:x\";\n", 4, "health_listen: "},
    {"listen_port_above_65535", "listen = \"127.0.0.1:70000\";\n" REGION CLUSTER, 1,
     "port 70000 is out of range (0-65535)"},
    {"listen_port_negative", "listen = \"127.0.0.1:-1\";\n" REGION CLUSTER, 1, "out of range (0-65535)"},
    {"listen_port_missing", REGION "\nlisten = \"127.0.0.1\";\n" CLUSTER, 3, "missing \":PORT\""},
    {"listen_port_empty", "listen = \"127.0.0.1:\";\n" REGION CLUSTER, 1, "port \"\" is not a number"},
    {"listen_port_not_a_number", "listen = \"127.0.0.1:http\";\n" REGION CLUSTER, 1,
     "port \"http\" is not a number"},
    {"listen_host_empty", "listen = \":8080\";\n" REGION CLUSTER, 1, "missing host"},
    {"listen_ipv6_without_brackets", "listen = \"::1:8080\";\n" REGION CLUSTER, 1,
     "put an IPv6 address in brackets, e.g. \"[::1]:8080\""},
    {"listen_ipv6_invalid", "listen = \"[::g]:8080\";\n" REGION CLUSTER, 1, "not a valid IPv6 address"},
    {"listen_ipv6_unclosed", "listen = \"[::1:8080\";\n" REGION CLUSTER, 1, "missing ']'"},
    {"listen_ipv6_no_port", "listen = \"[::1]8080\";\n" REGION CLUSTER, 1, "expected \":PORT\" after ']'"},
    {"listen_ipv4_invalid", "listen = \"300.1.1.1:80\";\n" REGION CLUSTER, 1,
     "\"300.1.1.1\" is not a valid IPv4 address"},
    /* Digits and dots past an IPv4 address's length were copied into a
     * 110-byte stack buffer (found by fuzz_config). */
    {"listen_ipv4_too_long",
     "listen = \"1111111111111111111111111111111111111111111111111111111111111111111111111111111111"
     "111111111111111111111111111111111111111111111111111111111111.1:80\";\n" REGION CLUSTER, 1,
     "is not a valid IPv4 address"},
    {"listen_host_bad_chars", "listen = \"my_host!:80\";\n" REGION CLUSTER, 1,
     "is not a valid IPv4 address or host name"},

    /* ranges */
    {"default_lifetime_zero", MINIMAL "sandbox = {\n  default_lifetime_s = 0;\n};\n", 5,
     "sandbox.default_lifetime_s: 0 is out of range (1-"},
    {"max_lifetime_negative", MINIMAL "sandbox = {\n  max_lifetime_s = -5;\n};\n", 5,
     "sandbox.max_lifetime_s: -5 is out of range (1-"},
    {"run_as_user_negative", MINIMAL "sandbox = {\n  run_as_user = -1;\n};\n", 5,
     "sandbox.run_as_user: -1 is out of range (0-2147483647)"},
    {"gpu_resource_unprefixed", MINIMAL "sandbox = {\n  gpu_resource = \"gpu\";\n};\n", 5,
     "sandbox.gpu_resource: \"gpu\" is not an extended resource name"},
    {"gpu_resource_kubernetes_io", MINIMAL "sandbox = {\n  gpu_resource = \"kubernetes.io/gpu\";\n};\n", 5,
     "sandbox.gpu_resource: \"kubernetes.io/gpu\" is not an extended resource name"},
    {"default_lifetime_above_max",
     MINIMAL "sandbox = {\n  default_lifetime_s = 7200;\n  max_lifetime_s = 3600;\n};\n", 5,
     "sandbox.default_lifetime_s: 7200 is above max_lifetime_s (3600)"},
    {"max_lifetime_below_default_default", MINIMAL "sandbox = {\n  max_lifetime_s = 600;\n};\n", 5,
     "sandbox.max_lifetime_s: 600 is below default_lifetime_s (3600, the default)"},
    {"max_batch_zero", MINIMAL "limits = { max_batch = 0; };\n", 4,
     "limits.max_batch: 0 is out of range (1-100000)"},
    {"max_batch_above_100000", MINIMAL "limits = { max_batch = 100001; };\n", 4,
     "limits.max_batch: 100001 is out of range (1-100000)"},
    {"max_body_bytes_tiny", MINIMAL "limits = { max_body_bytes = 10; };\n", 4,
     "limits.max_body_bytes: 10 is out of range (1024-1073741824)"},
    {"max_body_bytes_huge", MINIMAL "limits = { max_body_bytes = 2147483647; };\n", 4,
     "out of range (1024-1073741824)"},
    {"max_exec_output_bytes_zero", MINIMAL "limits = { max_exec_output_bytes = 0; };\n", 4,
     "limits.max_exec_output_bytes: 0 is out of range (1-1073741824)"},
    {"shutdown_delay_above_10000", MINIMAL "shutdown_delay_ms = 10001;\n", 4,
     "shutdown_delay_ms: 10001 is out of range (0-10000)"},
    {"shutdown_delay_negative", MINIMAL "shutdown_delay_ms = -1;\n", 4,
     "shutdown_delay_ms: -1 is out of range (0-10000)"},
    {"max_exec_timeout_zero", MINIMAL "limits = { max_exec_timeout_s = 0; };\n", 4,
     "limits.max_exec_timeout_s: 0 is out of range"},
    {"tenant_secret_not_a_secret_name",
     MINIMAL "tenants = ( { name = \"t\"; token_sha256 = \"" HASH_A "\"; secret = \"Team_A\"; } );\n",
     4, "tenants.[0].secret: \"Team_A\" is not a Kubernetes Secret name"},
    {"tenant_secret_names_another_tenants",
     MINIMAL "tenants = ( { name = \"t\"; token_sha256 = \"" HASH_A "\"; },\n"
             "  { name = \"u\"; token_sha256 = \"" HASH_B "\"; secret = \"t-sandbox-secrets\"; } );\n",
     5, "tenants \"t\" and \"u\" would both read Secret \"t-sandbox-secrets\""},
    {"tenant_default_secrets_collide",
     MINIMAL "tenants = ( { name = \"Team_A\"; token_sha256 = \"" HASH_A "\"; },\n"
             "  { name = \"team-a\"; token_sha256 = \"" HASH_B "\"; } );\n",
     5, "would both read Secret \"team-a-sandbox-secrets\""},
    {"tenant_max_sandboxes_negative",
     MINIMAL "tenants = ( { name = \"t\"; token_sha256 = \"" HASH_A "\"; max_sandboxes = -1; } );\n",
     4, "tenants.[0].max_sandboxes: -1 is out of range (0-"},
    {"cost_negative",
     LISTEN REGION "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"k\";\n"
                   "  cost = { per_core_hour = 0.1;\n    per_gib_hour = -0.5; }; } );\n",
     5, "clusters.[0].cost.per_gib_hour: must be a number >= 0, got -0.5"},
    {"cost_both_forms",
     LISTEN REGION "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"k\";\n"
                   "  cost = { per_core_hour = 0.1;\n    node_hour = 1.0; sandboxes_per_node = 4; }; } );\n",
     5, "give either per_core_hour/per_gib_hour/per_gpu_hour or node_hour + sandboxes_per_node, not both"},
    {"cost_gpu_with_node_model",
     LISTEN REGION "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"k\";\n"
                   "  cost = { per_gpu_hour = 2.0;\n    node_hour = 1.0; sandboxes_per_node = 4; }; } );\n",
     5, "give either per_core_hour/per_gib_hour/per_gpu_hour or node_hour + sandboxes_per_node, not both"},
    {"metrics_url_not_http", MINIMAL "metrics = { prometheus_url = \"prometheus:9090\"; };\n", 4,
     "metrics.prometheus_url: \"prometheus:9090\" is not an http:// or https:// URL of a Prometheus server"},
    {"metrics_url_with_query", MINIMAL "metrics = { prometheus_url = \"http://p:9090/?x=1\"; };\n", 4,
     "is not an http:// or https:// URL"},
    {"metrics_history_step_zero", MINIMAL "metrics = { history_step_s = 0; };\n", 4,
     "metrics.history_step_s: 0 is out of range (1-3600)"},
    {"metrics_key_misspelled", MINIMAL "metrics = { prometheus = \"http://p:9090\"; };\n", 4,
     "metrics.prometheus: unknown key (known keys here: prometheus_url, history_step_s)"},
    {"cost_sandboxes_per_node_zero",
     LISTEN REGION "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"k\";\n"
                   "  cost = { node_hour = 1.0; sandboxes_per_node = 0; }; } );\n",
     4, "sandboxes_per_node: 0 is out of range (1-"},

    /* unknown keys, with and without a suggestion */
    {"top_key_misspelled", LISTEN "regoin = \"us\";\n" CLUSTER, 2,
     "regoin: unknown key (did you mean \"region\"?)"},
    {"nested_key_misspelled",
     MINIMAL "tenants = (\n  { name = \"t\"; token_sha256 = \"" HASH_A "\"; },\n"
             "  { name = \"u\";\n    token_sha265 = \"" HASH_B "\"; }\n);\n",
     7, "tenants.[1].token_sha265: unknown key (did you mean \"token_sha256\"?)"},
    {"cluster_code_collision",
     LISTEN REGION "clusters = (\n  { name = \"c1209\"; region = \"us\"; kubeconfig = \"k\"; },\n"
                   "  { name = \"c1505\"; region = \"us\"; kubeconfig = \"k\"; }\n);\n",
     5, "cluster names \"c1209\" and \"c1505\" have the same short-id code \"ovr4\""},
    {"cluster_key_misspelled",
     LISTEN REGION "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"k\";\n"
                   "  namespce = \"x\"; } );\n",
     4, "clusters.[0].namespce: unknown key (did you mean \"namespace\"?)"},
    {"tls_key_misspelled", MINIMAL "tls = {\n  crt = \"x\";\n};\n", 5,
     "tls.crt: unknown key (did you mean \"cert\"?)"},
    {"limits_key_misspelled", MINIMAL "limits = { max_bach = 10; };\n", 4,
     "limits.max_bach: unknown key (did you mean \"max_batch\"?)"},
    {"ports_domain_bad", MINIMAL "ports = { domain = \"Sbx_Local\"; };\n", 4,
     "ports.domain: \"Sbx_Local\" is not a domain name with an optional :port"},
    {"ports_domain_bad_port", MINIMAL "ports = { domain = \"sbx.localhost:99999\"; };\n", 4,
     "is not a domain name with an optional :port"},
    {"ports_bound_zero", MINIMAL "ports = { max_requests_per_sandbox = 0; };\n", 4,
     "ports.max_requests_per_sandbox: 0 is out of range (1-100000)"},
    {"e2b_template_no_pool", MINIMAL "e2b = { templates = ( { name = \"base\"; } ); };\n", 4,
     "pool"},
    {"top_key_unknown", MINIMAL "colour = \"blue\";\n", 4,
     "colour: unknown key (known keys here: listen, health_listen, tls, region, policy, sandbox, limits, "
     "tenants, clusters, hosted, metrics_token_sha256, agent, shutdown_delay_ms, queue, ports, e2b, metrics)"},

    /* names */
    {"cluster_name_uppercase", LISTEN REGION "clusters = (\n  { name = \"US_East\"; region = \"us\"; kubeconfig = \"k\"; }\n);\n",
     4, "clusters.[0].name: \"US_East\" may only hold lowercase letters, digits and '-'"},
    {"cluster_name_33_chars",
     LISTEN REGION "clusters = ( { name = \"abcdefghijklmnopqrstuvwxyz-012345\"; region = \"us\"; kubeconfig = \"k\"; } );\n",
     3, "is 33 characters long (at most 32"},
    {"cluster_name_duplicate",
     LISTEN REGION "clusters = (\n  { name = \"a\"; region = \"us\"; kubeconfig = \"k\"; },\n"
                   "  { name = \"b\"; region = \"us\"; kubeconfig = \"k\"; },\n"
                   "  { name = \"a\"; region = \"apac\"; kubeconfig = \"k\"; }\n);\n",
     6, "clusters.[2].name: duplicate cluster name \"a\" (first defined at line 4)"},
    {"cluster_in_cluster_with_kubeconfig",
     LISTEN REGION "clusters = (\n  { name = \"a\"; region = \"us\";\n    in_cluster = true; kubeconfig = \"k\"; }\n);\n",
     5, "in_cluster = true reaches the cluster with the pod's service account: drop kubeconfig and context"},
    {"cluster_in_cluster_twice",
     LISTEN REGION "clusters = (\n  { name = \"a\"; region = \"us\"; in_cluster = true; },\n"
     "  { name = \"b\"; region = \"us\";\n    in_cluster = true; }\n);\n",
     6, "cluster \"a\" is in_cluster already"},
    {"cluster_in_cluster_not_a_bool",
     LISTEN REGION "clusters = (\n  { name = \"a\"; region = \"us\";\n    in_cluster = \"yes\"; }\n);\n", 5,
     "expected true or false"},
    {"cluster_name_empty", LISTEN REGION "clusters = ( { name = \"\"; region = \"us\"; kubeconfig = \"k\"; } );\n",
     3, "clusters.[0].name: must not be empty"},
    {"cluster_namespace_invalid",
     LISTEN REGION "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"k\"; namespace = \"Sand_boxes\"; } );\n",
     3, "\"Sand_boxes\" is not a valid Kubernetes namespace"},
    {"region_with_space", LISTEN "region = \"us east\";\n" CLUSTER, 2, "\"us east\" is not a valid region"},
    {"cluster_region_invalid",
     LISTEN REGION "clusters = ( { name = \"a\"; region = \"us/east\"; kubeconfig = \"k\"; } );\n",
     3, "clusters.[0].region: \"us/east\" is not a valid region"},
    {"policy_empty", MINIMAL "policy = \"\";\n", 4, "policy: must not be empty"},
    {"tenant_name_duplicate",
     MINIMAL "tenants = (\n  { name = \"t\";" T(HASH_A) "  },\n  { name = \"t\";" T(HASH_B) "  }\n);\n",
     7, "tenants.[1].name: duplicate tenant name \"t\" (first defined at line 5)"},
    {"tenant_name_invalid", MINIMAL "tenants = ( { name = \"-team a\";" T(HASH_A) "} );\n", 4,
     "tenants.[0].name: \"-team a\" may only hold letters, digits"},
    {"tenant_token_duplicate",
     MINIMAL "tenants = (\n  { name = \"t\";\n" T(HASH_A) "  },\n  { name = \"u\";\n" T(HASH_A) "  }\n);\n",
     9, "tenants.[1].token_sha256: same token as tenant \"t\" (line 6)"},
    {"tenant_token_short", MINIMAL "tenants = (\n  { name = \"t\";\n" T("abc123") "  }\n);\n", 6,
     "tenants.[0].token_sha256: expected the SHA-256 of the token as 64 hex characters, got 6"},
    {"tenant_token_uppercase",
     MINIMAL "tenants = (\n  { name = \"t\";\n"
             T("CA978112CA1BBDCAFAC231B39A23DC4DA786EFF8147C4E72B9807785AFEE48BB") "  }\n);\n",
     6, "write the hex digits in lowercase"},
    {"tenant_token_not_hex",
     MINIMAL "tenants = (\n  { name = \"t\";\n"
             T("ga978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb") "  }\n);\n",
     6, "64 hex characters, got 64 characters with non-hex ones"},

    /* a tenant's network: only addresses and CIDRs, file:line of the entry */
    {"tenant_network_domain",
     MINIMAL "tenants = (\n  { name = \"t\";\n" T(HASH_A) "    network = { allow_internet = false;\n"
             "      allow_out = [ \"10.0.0.0/8\",\n        \"pypi.org\" ]; }; }\n);\n",
     9, "tenants.[0].network.allow_out.[1]: \"pypi.org\" is a domain name, not an IP address or CIDR"},
    {"tenant_network_host_bits",
     MINIMAL "tenants = (\n  { name = \"t\";\n" T(HASH_A) "    network = {\n      deny_out = [\"10.0.0.1/8\"]; }; }\n);\n",
     8, "has address bits set past its prefix length (did you mean 10.0.0.0/8?)"},
    {"tenant_network_prefix",
     MINIMAL "tenants = (\n  { name = \"t\";\n" T(HASH_A) "    network = { deny_out = [\"::/129\"]; }; }\n);\n",
     7, "the prefix length must be a number from 0 to 128"},
    {"tenant_network_not_strings",
     MINIMAL "tenants = (\n  { name = \"t\";\n" T(HASH_A) "    network = { deny_out = [ 10 ]; }; }\n);\n",
     7, "expected a string (an IP address or CIDR), got an integer"},
    {"tenant_network_bool",
     MINIMAL "tenants = (\n  { name = \"t\";\n" T(HASH_A) "    network = { allow_internet = \"no\"; }; }\n);\n",
     7, "expected true or false, got a string"},
    {"tenant_network_unknown_key",
     MINIMAL "tenants = (\n  { name = \"t\";\n" T(HASH_A) "    network = { allow_outs = []; }; }\n);\n",
     7, "unknown key (did you mean \"allow_out\"?)"},

    /* files */
    {"tls_cert_absent", MINIMAL "tls = {\n  cert = \"no-such.crt\";\n  key = \"t.conf\";\n};\n", 5,
     "tls.cert: cannot read \""},
    {"tls_key_absent", MINIMAL "tls = {\n  cert = \"t.conf\";\n  key = \"no-such.key\";\n};\n", 6,
     "no-such.key\": No such file or directory"},
    {"tls_cert_directory", MINIMAL "tls = { cert = \".\"; key = \"t.conf\"; };\n", 4,
     "is not a regular file"},

    /* libconfig's own errors keep their line */
    {"syntax_missing_value", LISTEN "region = ;\n" CLUSTER, 2, "parse error: syntax error"},
    {"syntax_duplicate_key", LISTEN REGION "region = \"apac\";\n" CLUSTER, 3,
     "parse error: duplicate setting name"},
};

START_TEST(config_error_is_rejected_with_message_and_line) {
  const struct err_case *t = &err_cases[_i];
  struct fr_config *c = (struct fr_config *)&c; /* must be reset to NULL */
  struct fr_config_error err;
  int rc = load_text(t->text, &c, &err);

  ck_assert_msg(rc == -EINVAL, "%s: rc %d, want -EINVAL", t->name, rc);
  ck_assert_msg(c == NULL, "%s: *out not NULL on error", t->name);
  ck_assert_msg(strstr(err.msg, t->msg) != NULL, "%s: message \"%s\" lacks \"%s\"", t->name,
                err.msg, t->msg);
  ck_assert_msg(err.line == t->line, "%s: line %d, want %d (%s)", t->name, err.line, t->line,
                err.msg);
  ck_assert_msg(strstr(err.file, "/t.conf") != NULL, "%s: file \"%s\"", t->name, err.file);
}
END_TEST

START_TEST(config_unknown_key_is_reported_before_missing_key) {
  struct fr_config *c = NULL;
  struct fr_config_error err;
  /* "regoin" would otherwise surface as "region: missing" */
  int rc = load_text(LISTEN CLUSTER "\n\nregoin = \"us\";\n", &c, &err);

  ck_assert_int_eq(rc, -EINVAL);
  ck_assert_str_eq(err.msg, "regoin: unknown key (did you mean \"region\"?)");
  ck_assert_int_eq(err.line, 5);
}
END_TEST

/* A check lists every error, each with its line: unknown keys at the top
 * and in a tenant, two bad values in one group, a bad tenant, a duplicate
 * cluster. */
START_TEST(config_check_reports_every_error_with_its_line) {
  char path[PATH_MAX];
  struct fr_config *c = (struct fr_config *)&c;
  struct fr_test_heard h;
  int rc;

  memset(&h, 0, sizeof(h));
  write_file("t.conf",
             LISTEN REGION
             "colour = 1;\n"
             "sandbox = { default_lifetime_s = 0;\n  batch_commit_timeout_s = 5; };\n"
             "tenants = ( { name = \"Bad Name\"; token_sha256 = \"00\"; },\n"
             "            { name = \"ok\"; token_sha256 = \"" "0000000000000000000000000000000000000000000000000000000000000000" "\"; sizee = 1; } );\n"
             "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"k\"; },\n"
             "             { name = \"a\"; region = \"us\"; kubeconfig = \"k\"; } );\n",
             path, sizeof(path));
  write_file("k", "", path, sizeof(path));
  PATHF(path, "%s/t.conf", realtmp);
  rc = fr_config_check(path, fr_test_hear, &h, &c);
  ck_assert_int_eq(rc, -EINVAL);
  ck_assert_ptr_null(c);
  ck_assert_int_eq(h.n, 6);
  for (rc = 0; rc < h.n; rc++)
    ck_assert_msg(strstr(h.files[rc], "/t.conf") != NULL, "file \"%s\"", h.files[rc]);
  ck_assert_int_eq(h.lines[0], 3);
  ck_assert_str_eq(h.msgs[0], "colour: unknown key (known keys here: listen, health_listen, tls, region, policy, sandbox, "
                              "limits, tenants, clusters, hosted, metrics_token_sha256, agent, shutdown_delay_ms, queue, ports, "
                              "e2b, metrics)");
  ck_assert_int_eq(h.lines[1], 4);
  ck_assert_ptr_nonnull(strstr(h.msgs[1], "sandbox.default_lifetime_s: 0 is out of range"));
  ck_assert_int_eq(h.lines[2], 5);
  ck_assert_str_eq(h.msgs[2], "sandbox.batch_commit_timeout_s: 5 is out of range (10-3600)");
  ck_assert_int_eq(h.lines[3], 6);
  ck_assert_ptr_nonnull(strstr(h.msgs[3], "tenants.[0].name"));
  ck_assert_int_eq(h.lines[4], 7);
  ck_assert_ptr_nonnull(strstr(h.msgs[4], "tenants.[1].sizee: unknown key"));
  ck_assert_int_eq(h.lines[5], 9);
  ck_assert_ptr_nonnull(strstr(h.msgs[5], "duplicate cluster name \"a\" (first defined at line 8)"));
}
END_TEST

/* A syntax error stops libconfig: it is the one error, with its line. */
START_TEST(config_check_syntax_error_is_the_one_error) {
  char path[PATH_MAX];
  struct fr_config *c = NULL;
  struct fr_test_heard h;

  memset(&h, 0, sizeof(h));
  write_file("t.conf", LISTEN "region = ;\ncolour = 1;\n", path, sizeof(path));
  PATHF(path, "%s/t.conf", realtmp);
  ck_assert_int_eq(fr_config_check(path, fr_test_hear, &h, &c), -EINVAL);
  ck_assert_int_eq(h.n, 1);
  ck_assert_int_eq(h.lines[0], 2);
  ck_assert_ptr_nonnull(strstr(h.msgs[0], "parse error"));
}
END_TEST

START_TEST(config_nul_byte_is_an_error_not_an_exit) {
  /* What fuzz_config found: libconfig's scanner exits the process on a
   * NUL byte (here inside an @include's name); the loader refuses it. */
  static const char text[] = "@include \"\0\0her.conf\"\nlisten = \"127.0.0.1:0\";\n";
  char path[PATH_MAX];
  struct fr_config *c = NULL;
  struct fr_config_error err;
  FILE *f;

  PATHF(path, "%s/nul.conf", tmpdir);
  f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(text, 1, sizeof(text) - 1, f), sizeof(text) - 1);
  ck_assert_int_eq(fclose(f), 0);
  ck_assert_int_eq(fr_config_load(path, &c, &err), -EINVAL);
  ck_assert_ptr_null(c);
  ck_assert_ptr_nonnull(strstr(err.msg, "NUL byte"));
}
END_TEST

START_TEST(config_missing_file_returns_enoent) {
  struct fr_config *c = NULL;
  struct fr_config_error err;
  char path[PATH_MAX];
  int rc;

  PATHF(path, "%s/absent.conf", tmpdir);
  rc = fr_config_load(path, &c, &err);
  ck_assert_int_eq(rc, -ENOENT);
  ck_assert_ptr_null(c);
  ck_assert_str_eq(err.file, path);
  ck_assert_int_eq(err.line, 0);
  ck_assert_ptr_nonnull(strstr(err.msg, "No such file or directory"));
}
END_TEST

START_TEST(config_directory_path_returns_einval) {
  struct fr_config *c = NULL;
  struct fr_config_error err;

  ck_assert_int_eq(fr_config_load(tmpdir, &c, &err), -EINVAL);
  ck_assert_ptr_null(c);
  ck_assert_str_eq(err.msg, "not a regular file");
}
END_TEST

START_TEST(config_null_error_struct_is_accepted) {
  struct fr_config *c = NULL;
  char path[PATH_MAX];

  write_file("t.conf", REGION CLUSTER, path, sizeof(path));
  ck_assert_int_eq(fr_config_load(path, &c, NULL), -EINVAL);
  ck_assert_ptr_null(c);
  write_file("t.conf", MINIMAL, path, sizeof(path));
  ck_assert_int_eq(fr_config_load(path, &c, NULL), 0);
  ck_assert_ptr_nonnull(c);
  fr_config_unref(c);
}
END_TEST

START_TEST(config_error_in_included_file_names_that_file) {
  struct fr_config *c = NULL;
  struct fr_config_error err;
  char path[PATH_MAX], inc[PATH_MAX];
  int rc;

  /* @include resolves against the config's directory, not the cwd */
  write_file("clusters.inc", "\nclusters = ( { name = \"Bad\"; region = \"us\"; kubeconfig = \"k\"; } );\n",
             inc, sizeof(inc));
  write_file("t.conf", LISTEN REGION "@include \"clusters.inc\"\n", path, sizeof(path));
  rc = fr_config_load(path, &c, &err);
  ck_assert_int_eq(rc, -EINVAL);
  PATHF(path, "%s/clusters.inc", realtmp);
  ck_assert_str_eq(err.file, path);
  ck_assert_int_eq(err.line, 2);
  ck_assert_ptr_nonnull(strstr(err.msg, "clusters.[0].name: \"Bad\""));
}
END_TEST

/* ---- paths ---- */

START_TEST(config_relative_paths_resolve_against_config_dir_realpath) {
  struct fr_config *c = NULL;
  struct fr_config_error err;
  char path[PATH_MAX], link[PATH_MAX], want[PATH_MAX + 64];
  int rc;

  /* <tmp>/real/conf/t.conf, loaded through the symlink <tmp>/link -> real */
  make_dir("real");
  make_dir("real/conf");
  make_dir("real/conf/tls");
  write_file("real/conf/tls/r.crt", "cert", path, sizeof(path));
  write_file("real/conf/tls/r.key", "key", path, sizeof(path));
  write_file("real/conf/t.conf",
             LISTEN REGION "policy = \"policy.conf\";\n"
             "tls = { cert = \"tls/r.crt\"; key = \"./tls//r.key\"; };\n"
             "clusters = (\n"
             "  { name = \"a\"; region = \"us\"; kubeconfig = \"kube/a.kc\"; },\n"
             "  { name = \"b\"; region = \"us\"; kubeconfig = \"../b.kc\"; },\n"
             "  { name = \"c\"; region = \"us\"; kubeconfig = \"/etc/k/c.kc\"; },\n"
             "  { name = \"d\"; region = \"us\"; kubeconfig = \"./x/../y.kc\"; }\n"
             ");\n",
             path, sizeof(path));
  PATHF(link, "%s/link", tmpdir);
  ck_assert_int_eq(symlink("real", link), 0);
  PATHF(path, "%s/link/conf/t.conf", tmpdir);

  rc = fr_config_load(path, &c, &err);
  ck_assert_msg(rc == 0, "%s:%d: %s", err.file, err.line, err.msg);
  PATHF(want, "%s/real/conf/t.conf", realtmp);
  ck_assert_str_eq(c->source, want);
  PATHF(want, "%s/real/conf/policy.conf", realtmp);
  ck_assert_str_eq(c->policy, want);
  PATHF(want, "%s/real/conf/tls/r.crt", realtmp);
  ck_assert_str_eq(c->tls_cert, want);
  PATHF(want, "%s/real/conf/tls/r.key", realtmp);
  ck_assert_str_eq(c->tls_key, want);
  PATHF(want, "%s/real/conf/kube/a.kc", realtmp);
  ck_assert_str_eq(c->clusters[0].kubeconfig, want);
  PATHF(want, "%s/real/b.kc", realtmp);
  ck_assert_str_eq(c->clusters[1].kubeconfig, want);
  ck_assert_str_eq(c->clusters[2].kubeconfig, "/etc/k/c.kc");
  /* ".." after a named segment is left to the kernel (x may be a symlink) */
  PATHF(want, "%s/real/conf/x/../y.kc", realtmp);
  ck_assert_str_eq(c->clusters[3].kubeconfig, want);
  fr_config_unref(c);
}
END_TEST

START_TEST(config_relative_config_path_resolves_against_cwd) {
  struct fr_config *c = NULL;
  struct fr_config_error err;
  char path[PATH_MAX], cwd[PATH_MAX], want[PATH_MAX + 64];
  int rc;

  make_dir("d");
  write_file("d/t.conf", MINIMAL, path, sizeof(path));
  ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
  ck_assert_int_eq(chdir(tmpdir), 0);
  rc = fr_config_load("d/t.conf", &c, &err);
  ck_assert_int_eq(chdir(cwd), 0);
  ck_assert_msg(rc == 0, "%s:%d: %s", err.file, err.line, err.msg);
  PATHF(want, "%s/d/t.conf", realtmp);
  ck_assert_str_eq(c->source, want);
  PATHF(want, "%s/d/a.kc", realtmp);
  ck_assert_str_eq(c->clusters[0].kubeconfig, want);
  fr_config_unref(c);
}
END_TEST

START_TEST(config_kubeconfig_need_not_exist_at_load) {
  struct fr_config *c = load_ok(MINIMAL);
  char want[PATH_MAX + 16];

  PATHF(want, "%s/a.kc", realtmp);
  ck_assert_str_eq(c->clusters[0].kubeconfig, want);
  ck_assert_int_eq(access(want, F_OK), -1);
  fr_config_unref(c);
}
END_TEST

START_TEST(config_in_cluster_needs_no_kubeconfig) {
  struct fr_config *c = load_ok(LISTEN REGION "clusters = ( { name = \"home\"; region = \"us\"; in_cluster = true; },\n"
                                "  { name = \"b\"; region = \"us\"; kubeconfig = \"b.kc\"; } );\n");

  ck_assert_int_eq(c->clusters[0].in_cluster, 1);
  ck_assert_ptr_null(c->clusters[0].kubeconfig);
  ck_assert_ptr_null(c->clusters[0].context);
  ck_assert_int_eq(c->clusters[1].in_cluster, 0);
  ck_assert_ptr_nonnull(c->clusters[1].kubeconfig);
  fr_config_unref(c);
}
END_TEST


/* ---- a cluster's gateway ---- */

#define GW_KEY "0123456789abcdef0123456789abcdef0123\n"
#define GW_CA "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
/* A cluster with gateway group <g> on line 3. */
#define GW_CLUSTER(g) LISTEN REGION "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"a.kc\";\n" g " } );\n"

static void gateway_files(void) {
  char path[PATH_MAX];

  write_file("gw.key", GW_KEY, path, sizeof(path));
  write_file("short.key", "too-short\n", path, sizeof(path));
  write_file("gw-ca.pem", GW_CA, path, sizeof(path));
  write_file("not-a-ca.pem", "hello\n", path, sizeof(path));
}

START_TEST(config_gateway_group_is_loaded) {
  struct fr_config *c;
  char want[PATH_MAX + 16];

  gateway_files();
  c = load_ok(LISTEN REGION "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"a.kc\";\n"
              "  gateway = { url = \"https://gw.example.svc:8443\"; ca_file = \"gw-ca.pem\"; key_file = \"gw.key\"; }; },\n"
              "  { name = \"b\"; region = \"us\"; kubeconfig = \"b.kc\"; },\n"
              "  { name = \"c\"; region = \"us\"; kubeconfig = \"c.kc\";\n"
              "    gateway = { url = \"http://127.0.0.1:9443\"; key_file = \"gw.key\"; }; } );\n");
  ck_assert_uint_eq(c->clusters[0].gateway_nurls, 1);
  ck_assert_str_eq(c->clusters[0].gateway_urls[0], "https://gw.example.svc:8443");
  PATHF(want, "%s/gw.key", realtmp);
  ck_assert_str_eq(c->clusters[0].gateway_key_file, want);
  PATHF(want, "%s/gw-ca.pem", realtmp);
  ck_assert_str_eq(c->clusters[0].gateway_ca_file, want);
  ck_assert_uint_eq(c->clusters[0].gateway_key_len, 36); /* the trailing newline is not part of it */
  ck_assert_int_eq(memcmp(c->clusters[0].gateway_key, GW_KEY, 36), 0);
  ck_assert_uint_eq(c->clusters[1].gateway_nurls, 0);
  ck_assert_ptr_null(c->clusters[1].gateway_key);
  ck_assert_ptr_null(c->clusters[1].gateway_key_file);
  ck_assert_uint_eq(c->clusters[2].gateway_nurls, 1);
  ck_assert_str_eq(c->clusters[2].gateway_urls[0], "http://127.0.0.1:9443");
  ck_assert_ptr_null(c->clusters[2].gateway_ca_file);
  fr_config_unref(c);
}
END_TEST

/* `urls`: several URLs of one gateway, in order. */
START_TEST(config_gateway_urls_are_loaded_in_order) {
  struct fr_config *c;

  gateway_files();
  c = load_ok(GW_CLUSTER("  gateway = { urls = [\"https://gw-a:8443\", \"https://gw-b:8443\", \"https://[::1]:9\"];\n"
                         "              ca_file = \"gw-ca.pem\"; key_file = \"gw.key\"; };"));
  ck_assert_uint_eq(c->clusters[0].gateway_nurls, 3);
  ck_assert_str_eq(c->clusters[0].gateway_urls[0], "https://gw-a:8443");
  ck_assert_str_eq(c->clusters[0].gateway_urls[1], "https://gw-b:8443");
  ck_assert_str_eq(c->clusters[0].gateway_urls[2], "https://[::1]:9");
  ck_assert_uint_eq(c->clusters[0].gateway_key_len, 36);
  fr_config_unref(c);
  /* A list (parentheses) is taken as well as an array. */
  c = load_ok(GW_CLUSTER("  gateway = { urls = (\"http://127.0.0.1:1\", \"http://127.0.0.2:1\"); key_file = \"gw.key\"; };"));
  ck_assert_uint_eq(c->clusters[0].gateway_nurls, 2);
  fr_config_unref(c);
}
END_TEST

static const struct err_case gw_err_cases[] = {
    {"gateway_unknown_key", GW_CLUSTER("  gateway = { url = \"https://gw\"; key_file = \"gw.key\"; ca = \"x\"; };"), 4,
     "clusters.[0].gateway.ca: unknown key (known keys here: url, urls, ca_file, key_file)"},
    {"gateway_not_a_group", GW_CLUSTER("  gateway = \"https://gw\";"), 4, "gateway"},
    {"gateway_url_missing", GW_CLUSTER("  gateway = { key_file = \"gw.key\"; };"), 4, "url: missing"},
    {"gateway_url_ftp", GW_CLUSTER("  gateway = { url = \"ftp://gw\"; key_file = \"gw.key\"; };"), 4,
     "\"ftp://gw\" is not an https:// URL"},
    {"gateway_url_with_path", GW_CLUSTER("  gateway = { url = \"https://gw:8443/v1/proxy\"; key_file = \"gw.key\"; };"),
     4, "no path (the router adds /v1/proxy/...)"},
    {"gateway_url_with_user", GW_CLUSTER("  gateway = { url = \"https://u@gw\"; key_file = \"gw.key\"; };"), 4,
     "the host may only hold letters, digits"},
    {"gateway_url_bad_port", GW_CLUSTER("  gateway = { url = \"https://gw:70000\"; key_file = \"gw.key\"; };"), 4,
     "the port must be 1-65535"},
    {"gateway_url_port_leading_zero", GW_CLUSTER("  gateway = { url = \"https://gw:0443\"; key_file = \"gw.key\"; };"),
     4, "the port must be 1-65535"},
    {"gateway_url_empty_host", GW_CLUSTER("  gateway = { url = \"https://:443\"; key_file = \"gw.key\"; };"), 4,
     "not a host name or address"},
    {"gateway_url_bad_ipv6", GW_CLUSTER("  gateway = { url = \"https://[::g]:443\"; key_file = \"gw.key\"; };"), 4,
     "is not an IPv6 address"},
    {"gateway_plain_http_remote", GW_CLUSTER("  gateway = { url = \"http://gw.example:80\"; key_file = \"gw.key\"; };"),
     4, "plain http:// is only for a gateway on this machine"},
    {"gateway_ca_with_plain_http",
     GW_CLUSTER("  gateway = { url = \"http://127.0.0.1:80\"; ca_file = \"gw-ca.pem\"; key_file = \"gw.key\"; };"), 4,
     "ca_file verifies an https:// gateway"},
    {"gateway_ca_absent", GW_CLUSTER("  gateway = { url = \"https://gw\"; ca_file = \"no.pem\"; key_file = \"gw.key\"; };"),
     4, "no.pem\": No such file or directory"},
    {"gateway_ca_not_pem",
     GW_CLUSTER("  gateway = { url = \"https://gw\"; ca_file = \"not-a-ca.pem\"; key_file = \"gw.key\"; };"), 4,
     "holds no PEM certificate"},
    {"gateway_key_missing", GW_CLUSTER("  gateway = { url = \"https://gw\"; };"), 4, "key_file: missing"},
    {"gateway_key_absent", GW_CLUSTER("  gateway = { url = \"https://gw\"; key_file = \"no.key\"; };"), 4,
     "cannot read"},
    {"gateway_key_short", GW_CLUSTER("  gateway = { url = \"https://gw\"; key_file = \"short.key\"; };"), 4,
     "the gateway key needs 32 to 4096"},
    {"gateway_url_and_urls",
     GW_CLUSTER("  gateway = { url = \"https://gw\"; urls = [\"https://gw2\"]; key_file = \"gw.key\"; };"), 4,
     "give either url (one gateway URL) or urls (a list of them), not both"},
    {"gateway_urls_empty", GW_CLUSTER("  gateway = { urls = []; key_file = \"gw.key\"; };"), 4, "0 URLs; give 1 to 8"},
    {"gateway_urls_too_many",
     GW_CLUSTER("  gateway = { urls = [\"https://a\", \"https://b\", \"https://c\", \"https://d\", \"https://e\",\n"
                "  \"https://f\", \"https://g\", \"https://h\", \"https://i\"]; key_file = \"gw.key\"; };"),
     4, "9 URLs; give 1 to 8"},
    {"gateway_urls_not_a_list", GW_CLUSTER("  gateway = { urls = \"https://gw\"; key_file = \"gw.key\"; };"), 4,
     "expected a list of the gateway's https:// URLs"},
    {"gateway_urls_not_strings", GW_CLUSTER("  gateway = { urls = [1, 2]; key_file = \"gw.key\"; };"), 4,
     "expected a string (a gateway URL"},
    {"gateway_urls_duplicate",
     GW_CLUSTER("  gateway = { urls = [\"https://gw-a\",\n \"https://gw-a\"]; key_file = \"gw.key\"; };"), 5,
     "\"https://gw-a\" is listed twice"},
    {"gateway_urls_one_bad",
     GW_CLUSTER("  gateway = { urls = [\"https://gw-a\",\n \"https://gw-b/x\"]; key_file = \"gw.key\"; };"), 5,
     "no path (the router adds /v1/proxy/...)"},
    {"gateway_urls_ca_with_plain_http",
     GW_CLUSTER("  gateway = { urls = [\"https://gw-a\", \"http://127.0.0.1:80\"]; ca_file = \"gw-ca.pem\";\n"
                "  key_file = \"gw.key\"; };"), 4, "ca_file verifies an https:// gateway; \"http://127.0.0.1:80\" is plain http"},
};

START_TEST(config_gateway_error_is_rejected_with_message_and_line) {
  const struct err_case *t = &gw_err_cases[_i];
  struct fr_config *c = NULL;
  struct fr_config_error err;
  int rc;

  gateway_files();
  rc = load_text(t->text, &c, &err);
  ck_assert_msg(rc == -EINVAL, "%s: rc %d, want -EINVAL", t->name, rc);
  ck_assert_ptr_null(c);
  ck_assert_msg(strstr(err.msg, t->msg) != NULL, "%s: message \"%s\" lacks \"%s\"", t->name, err.msg, t->msg);
  ck_assert_msg(err.line == t->line, "%s: line %d, want %d (%s)", t->name, err.line, t->line, err.msg);
}
END_TEST

/* The gateway group takes effect on a restart only. */
START_TEST(config_reload_refuses_a_gateway_change) {
  char path[PATH_MAX];
  struct fr_config *running, *next = NULL;
  struct fr_config_error err;

  gateway_files();
  running = load_ok(GW_CLUSTER("  gateway = { url = \"https://gw\"; key_file = \"gw.key\"; };"));
  write_file("t.conf", GW_CLUSTER("  gateway = { url = \"https://gw2\"; key_file = \"gw.key\"; };"), path, sizeof(path));
  ck_assert_int_eq(fr_config_load_next(path, running, &next, &err), -EINVAL);
  ck_assert_ptr_null(next);
  ck_assert_msg(strstr(err.msg, "a cluster's gateway (url or urls, ca_file or key_file's path) changed") != NULL,
                "message: %s", err.msg);
  /* A second URL is a change too. */
  write_file("t.conf", GW_CLUSTER("  gateway = { urls = [\"https://gw\", \"https://gw2\"]; key_file = \"gw.key\"; };"),
             path, sizeof(path));
  ck_assert_int_eq(fr_config_load_next(path, running, &next, &err), -EINVAL);
  write_file("t.conf", MINIMAL, path, sizeof(path));
  ck_assert_int_eq(fr_config_load_next(path, running, &next, &err), -EINVAL);
  /* `urls` with the one URL is the same gateway as `url`. */
  write_file("t.conf", GW_CLUSTER("  gateway = { urls = [\"https://gw\"]; key_file = \"gw.key\"; };"), path, sizeof(path));
  ck_assert_int_eq(fr_config_load_next(path, running, &next, &err), 0);
  fr_config_unref(next);
  next = NULL;
  /* The key file's content changed (a rotation): not a restart, the
   * router re-reads the file by itself; other edits still reload. */
  write_file("gw.key", "fedcba9876543210fedcba9876543210-new\n", path, sizeof(path));
  write_file("t.conf", GW_CLUSTER("  gateway = { url = \"https://gw\"; key_file = \"gw.key\"; };"), path, sizeof(path));
  ck_assert_msg(fr_config_load_next(path, running, &next, &err) == 0, "a rotated key refused the reload: %s", err.msg);
  ck_assert_int_eq(memcmp(next->clusters[0].gateway_key, "fedcba9876543210fedcba9876543210-new", 36), 0);
  fr_config_unref(next);
  fr_config_unref(running);
}
END_TEST

/* ---- refcount ---- */

START_TEST(config_ref_and_unref_free_at_zero) {
  struct fr_config *c = load_ok(MINIMAL);

  ck_assert_int_eq(c->refs, 1);
  ck_assert_ptr_eq(fr_config_ref(c), c);
  ck_assert_ptr_eq(fr_config_ref(c), c);
  ck_assert_int_eq(c->refs, 3);
  fr_config_unref(c);
  fr_config_unref(c);
  ck_assert_int_eq(c->refs, 1);
  ck_assert_str_eq(c->region, "us"); /* still alive */
  fr_config_unref(c);                /* freed: ASan reports a leak otherwise */
  fr_config_unref(NULL);
  ck_assert_ptr_null(fr_config_ref(NULL));
}
END_TEST

/* ---- lookups ---- */

START_TEST(tenant_by_token_finds_the_matching_tenant_only) {
  char h[3][65], text[2048];
  struct fr_config *c;
  static const char *const tokens[] = {"alpha-token", "beta-token", "gamma-token"};
  size_t i;

  for (i = 0; i < 3; i++)
    fr_sha256_hex(tokens[i], strlen(tokens[i]), h[i]);
  snprintf(text, sizeof(text),
           MINIMAL "tenants = (\n"
                   "  { name = \"alpha\"; token_sha256 = \"%s\"; },\n"
                   "  { name = \"beta\"; token_sha256 = \"%s\"; max_sandboxes = 5; },\n"
                   "  { name = \"gamma\"; token_sha256 = \"%s\"; }\n);\n",
           h[0], h[1], h[2]);
  c = load_ok(text);
  ck_assert_uint_eq(c->ntenants, 3);
  ck_assert_ptr_eq(fr_config_tenant_by_token(c, "alpha-token", NULL), &c->tenants[0]);
  ck_assert_ptr_eq(fr_config_tenant_by_token(c, "beta-token", NULL), &c->tenants[1]);
  ck_assert_str_eq(fr_config_tenant_by_token(c, "beta-token", NULL)->name, "beta");
  ck_assert_int_eq(fr_config_tenant_by_token(c, "beta-token", NULL)->max_sandboxes, 5);
  ck_assert_ptr_eq(fr_config_tenant_by_token(c, "gamma-token", NULL), &c->tenants[2]);
  ck_assert_ptr_null(fr_config_tenant_by_token(c, "delta-token", NULL));
  ck_assert_ptr_null(fr_config_tenant_by_token(c, "alpha-toke", NULL));
  ck_assert_ptr_null(fr_config_tenant_by_token(c, h[0], NULL)); /* the hash is not the token */
  ck_assert_ptr_null(fr_config_tenant_by_token(c, "", NULL));
  ck_assert_ptr_null(fr_config_tenant_by_token(c, NULL, NULL));
  ck_assert_ptr_null(fr_config_tenant_by_token(NULL, "alpha-token", NULL));
  fr_config_unref(c);
}
END_TEST

START_TEST(tenant_secret_defaults_to_the_lowercased_name) {
  struct fr_config *c = load_ok(MINIMAL "tenants = (\n"
                                        "  { name = \"RL_team.x\"; token_sha256 = \"" HASH_A "\"; },\n"
                                        "  { name = \"eval\"; token_sha256 = \"" HASH_B "\"; "
                                        "secret = \"eval.keys\"; }\n);\n");

  ck_assert_str_eq(c->tenants[0].secret, "rl-team-x-sandbox-secrets");
  ck_assert_str_eq(c->tenants[1].secret, "eval.keys");
  fr_config_unref(c);
}
END_TEST

START_TEST(tenant_by_token_without_tenants_returns_null) {
  struct fr_config *c = load_ok(MINIMAL);

  ck_assert_ptr_null(fr_config_tenant_by_token(c, "a", NULL));
  fr_config_unref(c);
}
END_TEST

START_TEST(cluster_by_name_finds_exact_name_only) {
  struct fr_config *c =
      load_ok(LISTEN REGION "clusters = (\n"
                            "  { name = \"us-east\"; region = \"us\"; kubeconfig = \"k\"; },\n"
                            "  { name = \"ap-tokyo\"; region = \"apac\"; kubeconfig = \"k\"; }\n);\n");

  ck_assert_ptr_eq(fr_config_cluster_by_name(c, "us-east"), &c->clusters[0]);
  ck_assert_ptr_eq(fr_config_cluster_by_name(c, "ap-tokyo"), &c->clusters[1]);
  ck_assert_str_eq(fr_config_cluster_by_name(c, "ap-tokyo")->region, "apac");
  ck_assert_ptr_null(fr_config_cluster_by_name(c, "us-eas"));
  ck_assert_ptr_null(fr_config_cluster_by_name(c, "US-EAST"));
  ck_assert_ptr_null(fr_config_cluster_by_name(c, NULL));
  ck_assert_ptr_null(fr_config_cluster_by_name(NULL, "us-east"));
  fr_config_unref(c);
}
END_TEST


/* ---- tokens, quotas, the queue, reloads ---- */

START_TEST(tenant_tokens_list_with_names_and_expiry) {
  char h[3][65], text[2048];
  struct fr_config *c;
  const struct fr_config_token *tok = NULL;
  static const char *const tokens[] = {"old-token", "new-token", "other-token"};
  size_t i;

  for (i = 0; i < 3; i++)
    fr_sha256_hex(tokens[i], strlen(tokens[i]), h[i]);
  snprintf(text, sizeof(text),
           MINIMAL "tenants = (\n"
                   "  { name = \"rl\"; tokens = (\n"
                   "      { name = \"old\"; sha256 = \"%s\"; expires = \"2030-01-02T03:04:05Z\"; },\n"
                   "      { name = \"new\"; sha256 = \"%s\"; } ); },\n"
                   "  { name = \"eval\"; token_sha256 = \"%s\"; }\n);\n",
           h[0], h[1], h[2]);
  c = load_ok(text);
  ck_assert_uint_eq(c->tenants[0].ntokens, 2);
  ck_assert_str_eq(c->tenants[0].tokens[0].name, "old");
  ck_assert_int_eq(c->tenants[0].tokens[0].expires_at, 1893553445); /* date -d 2030-01-02T03:04:05Z +%s */
  ck_assert_int_eq(c->tenants[0].tokens[1].expires_at, 0);
  ck_assert_uint_eq(c->tenants[1].ntokens, 1);
  ck_assert_str_eq(c->tenants[1].tokens[0].name, "default");
  ck_assert_ptr_eq(fr_config_tenant_by_token(c, "old-token", &tok), &c->tenants[0]);
  ck_assert_ptr_eq(tok, &c->tenants[0].tokens[0]);
  ck_assert_ptr_eq(fr_config_tenant_by_token(c, "new-token", &tok), &c->tenants[0]);
  ck_assert_ptr_eq(tok, &c->tenants[0].tokens[1]);
  ck_assert_ptr_eq(fr_config_tenant_by_token(c, "other-token", &tok), &c->tenants[1]);
  ck_assert_ptr_eq(tok, &c->tenants[1].tokens[0]);
  ck_assert_ptr_null(fr_config_tenant_by_token(c, "nope", &tok));
  ck_assert_ptr_null(tok);
  /* Expiry: refused from its second on, never for a token without one. */
  ck_assert_int_eq(fr_config_token_expired(&c->tenants[0].tokens[0], 1893553444), 0);
  ck_assert_int_eq(fr_config_token_expired(&c->tenants[0].tokens[0], 1893553445), 1);
  ck_assert_int_eq(fr_config_token_expired(&c->tenants[0].tokens[1], INT64_MAX), 0);
  ck_assert_ptr_eq(fr_config_tenant_by_name(c, "eval"), &c->tenants[1]);
  ck_assert_ptr_null(fr_config_tenant_by_name(c, "Eval"));
  fr_config_unref(c);
}
END_TEST

START_TEST(tenant_quotas_weight_and_queue_are_kept) {
  struct fr_config *c = load_ok(MINIMAL "queue = { max_wait_s = 900; max_sandboxes = 5000; exec_wait_s = 5;\n"
                                        "          e2b_wait_s = 20; };\n"
                                        "tenants = (\n"
                                        "  { name = \"t\"; token_sha256 = \"" HASH_A "\"; max_cpus = 1.5;\n"
                                        "    max_memory_gb = 3; max_gpus = 2; weight = 7;\n"
                                        "    max_queued_sandboxes = 100; max_queued_execs = 0; },\n"
                                        "  { name = \"u\"; token_sha256 = \"" HASH_B "\"; }\n);\n");

  ck_assert_int_eq(c->queue_max_wait_s, 900);
  ck_assert_int_eq(c->queue_max_sandboxes, 5000);
  ck_assert_int_eq(c->queue_exec_wait_s, 5);
  ck_assert_int_eq(c->queue_e2b_wait_s, 20);
  ck_assert_int_eq(c->tenants[0].max_cpu_m, 1500);
  ck_assert_int_eq(c->tenants[0].max_mem_b, (int64_t)3 << 30);
  ck_assert_int_eq(c->tenants[0].max_gpus, 2);
  ck_assert_int_eq(c->tenants[0].weight, 7);
  ck_assert_int_eq(c->tenants[0].max_queued_sandboxes, 100);
  ck_assert_int_eq(c->tenants[0].max_queued_execs, 0);
  /* Defaults: no quota, weight 1, the queue's bounds. */
  ck_assert_int_eq(c->tenants[1].max_cpu_m, 0);
  ck_assert_int_eq(c->tenants[1].max_mem_b, 0);
  ck_assert_int_eq(c->tenants[1].max_gpus, 0);
  ck_assert_int_eq(c->tenants[1].weight, 1);
  ck_assert_int_eq(c->tenants[1].max_queued_sandboxes, FR_DEFAULT_TENANT_QUEUED_SANDBOXES);
  ck_assert_int_eq(c->tenants[1].max_queued_execs, FR_DEFAULT_TENANT_QUEUED_EXECS);
  fr_config_unref(c);
  c = load_ok(MINIMAL);
  ck_assert_int_eq(c->queue_max_wait_s, 600);
  ck_assert_int_eq(c->queue_max_sandboxes, 100000);
  ck_assert_int_eq(c->queue_exec_wait_s, 30);
  ck_assert_int_eq(c->queue_e2b_wait_s, 0);
  fr_config_unref(c);
}
END_TEST

/* The version covers the file and every file it @includes; the list
 * names them. */
START_TEST(config_version_follows_included_files) {
  char main_path[PATH_MAX], inc_path[PATH_MAX], v1[65], v2[65], v3[65];
  struct fr_config *c = NULL;
  struct fr_config_error err;

  write_file("tenants.conf", "{ name = \"t\"; token_sha256 = \"" HASH_A "\"; }\n", inc_path, sizeof(inc_path));
  write_file("main.conf", MINIMAL "tenants = (\n  @include \"tenants.conf\"\n);\n", main_path, sizeof(main_path));
  ck_assert_int_eq(fr_config_load(main_path, &c, &err), 0);
  ck_assert_uint_eq(c->nfiles, 2);
  ck_assert_str_eq(c->files[1], inc_path);
  ck_assert_int_eq(fr_config_version(main_path, v1), 0);
  ck_assert_str_eq(v1, c->version);
  fr_config_unref(c);
  /* An edit of the included file alone changes the version. */
  write_file("tenants.conf", "{ name = \"t\"; token_sha256 = \"" HASH_B "\"; }\n", inc_path, sizeof(inc_path));
  ck_assert_int_eq(fr_config_version(main_path, v2), 0);
  ck_assert_str_ne(v1, v2);
  ck_assert_int_eq(fr_config_version(main_path, v3), 0);
  ck_assert_str_eq(v2, v3);
  ck_assert_int_eq(fr_config_version("/nonexistent/fr.conf", v3), -ENOENT);
}
END_TEST

/* A reload may change tenants and per-request limits; it is refused, with
 * the line, when it changes what only a restart applies. */
START_TEST(config_reload_refuses_restart_only_keys_with_their_line) {
  char path[PATH_MAX];
  struct fr_config *running, *next = NULL;
  struct fr_config_error err;

  running = load_ok(MINIMAL "limits = { max_batch = 10; };\n");
  write_file("t.conf", MINIMAL "limits = { max_batch = 20; };\n"
                       "tenants = ( { name = \"t\"; token_sha256 = \"" HASH_A "\"; } );\n", path, sizeof(path));
  ck_assert_int_eq(fr_config_load_next(path, running, &next, &err), 0);
  ck_assert_int_eq(next->max_batch, 20);
  ck_assert_uint_eq(next->ntenants, 1);
  fr_config_unref(next);
  next = NULL;
  write_file("t.conf", "listen = \"127.0.0.1:9999\";\n" REGION CLUSTER, path, sizeof(path));
  ck_assert_int_eq(fr_config_load_next(path, running, &next, &err), -EINVAL);
  ck_assert_ptr_null(next);
  ck_assert_int_eq(err.line, 1);
  ck_assert_msg(strstr(err.msg, "listen: the listen address changed") != NULL &&
                    strstr(err.msg, "only on a restart") != NULL, "message: %s", err.msg);
  write_file("t.conf", LISTEN REGION "clusters = ( { name = \"a\"; region = \"us\"; kubeconfig = \"a.kc\"; },\n"
                       "  { name = \"b\"; region = \"us\"; kubeconfig = \"b.kc\"; } );\n", path, sizeof(path));
  ck_assert_int_eq(fr_config_load_next(path, running, &next, &err), -EINVAL);
  ck_assert_int_eq(err.line, 3);
  ck_assert_msg(strstr(err.msg, "clusters: the list of clusters changed") != NULL, "message: %s", err.msg);
  write_file("t.conf", MINIMAL "limits = {\n  max_batch = 10;\n  max_body_bytes = 2048;\n};\n", path, sizeof(path));
  ck_assert_int_eq(fr_config_load_next(path, running, &next, &err), -EINVAL);
  ck_assert_int_eq(err.line, 6);
  ck_assert_msg(strstr(err.msg, "limits.max_body_bytes: the body limit changed") != NULL, "message: %s", err.msg);
  /* A key taken out: its group's line. */
  fr_config_unref(running);
  running = load_ok(MINIMAL "sandbox = { run_as_user = 1000; };\n");
  write_file("t.conf", MINIMAL "sandbox = {\n  max_lifetime_s = 7200;\n};\n", path, sizeof(path));
  ck_assert_int_eq(fr_config_load_next(path, running, &next, &err), -EINVAL);
  ck_assert_int_eq(err.line, 4);
  ck_assert_msg(strstr(err.msg, "sandbox.run_as_user (the sandboxes' uid) changed") != NULL, "message: %s", err.msg);
  fr_config_unref(running);
}
END_TEST

static Suite *config_suite(void) {
  Suite *s = suite_create("config");
  TCase *tc;

  tc = tcase_create("examples");
  tcase_add_test(tc, example_fedrouter_conf_loads_with_documented_values);
  tcase_add_test(tc, example_demo_conf_loads_with_three_clusters_and_demo_tenant);
  suite_add_tcase(s, tc);

  tc = tcase_create("values");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, config_minimal_gets_defaults);
  tcase_add_test(tc, config_metrics_group_is_kept);
  tcase_add_test(tc, cost_per_gpu_hour_is_kept_and_prices_usage);
  tcase_add_test(tc, config_batch_commit_timeout_is_kept);
  tcase_add_test(tc, config_tenant_network_is_the_normalized_default);
  tcase_add_test(tc, config_ports_and_e2b_templates_loaded);
  tcase_add_test(tc, config_check_reports_every_error_with_its_line);
  tcase_add_test(tc, config_check_syntax_error_is_the_one_error);
  tcase_add_test(tc, config_nul_byte_is_an_error_not_an_exit);
  tcase_add_test(tc, config_all_limits_set_are_kept);
  tcase_add_test(tc, config_empty_tenant_list_is_allowed);
  tcase_add_test(tc, cluster_name_of_32_chars_is_accepted);
  tcase_add_test(tc, cost_integers_are_accepted_as_amounts);
  tcase_add_loop_test(tc, listen_valid_address_is_split_into_host_and_port, 0,
                      (int)FR_ARRAY_SIZE(listen_ok_cases));
  suite_add_tcase(s, tc);

  tc = tcase_create("errors");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, config_error_is_rejected_with_message_and_line, 0,
                      (int)FR_ARRAY_SIZE(err_cases));
  tcase_add_test(tc, config_unknown_key_is_reported_before_missing_key);
  tcase_add_loop_test(tc, config_gateway_error_is_rejected_with_message_and_line, 0,
                      (int)FR_ARRAY_SIZE(gw_err_cases));
  tcase_add_test(tc, config_reload_refuses_a_gateway_change);
  tcase_add_test(tc, config_missing_file_returns_enoent);
  tcase_add_test(tc, config_directory_path_returns_einval);
  tcase_add_test(tc, config_null_error_struct_is_accepted);
  tcase_add_test(tc, config_error_in_included_file_names_that_file);
  suite_add_tcase(s, tc);

  tc = tcase_create("paths");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, config_relative_paths_resolve_against_config_dir_realpath);
  tcase_add_test(tc, config_relative_config_path_resolves_against_cwd);
  tcase_add_test(tc, config_kubeconfig_need_not_exist_at_load);
  tcase_add_test(tc, config_in_cluster_needs_no_kubeconfig);
  tcase_add_test(tc, config_gateway_group_is_loaded);
  tcase_add_test(tc, config_gateway_urls_are_loaded_in_order);
  suite_add_tcase(s, tc);

  tc = tcase_create("snapshot");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, config_ref_and_unref_free_at_zero);
  tcase_add_test(tc, tenant_by_token_finds_the_matching_tenant_only);
  tcase_add_test(tc, tenant_by_token_without_tenants_returns_null);
  tcase_add_test(tc, tenant_secret_defaults_to_the_lowercased_name);
  tcase_add_test(tc, cluster_by_name_finds_exact_name_only);
  tcase_add_test(tc, tenant_tokens_list_with_names_and_expiry);
  tcase_add_test(tc, tenant_quotas_weight_and_queue_are_kept);
  tcase_add_test(tc, config_version_follows_included_files);
  tcase_add_test(tc, config_reload_refuses_restart_only_keys_with_their_line);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(config_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
