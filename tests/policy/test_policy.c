/* test_policy.c - the placement policy: the shipped examples load and place
 * as documented; plans for regions, weights, tiers, rules, batch splits,
 * warm vs cold, stale/unhealthy clusters, latency ceilings, ties and a full
 * federation; the plan's JSON; every class of file error with its message
 * and line; warnings for rules that can never place anything.
 *
 * Plans are compared as strings rendered by plan_str(): the clusters used,
 * in plan order, as "name=count" ("+wN" when N of them are warm claims),
 * then " | " and the skipped clusters. That asserts order, verdicts and
 * exact counts in one readable line. */
#include "fr/policy.h"

#include <check.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fr/util.h"
#include "fr_test_errors.h"

#ifndef FR_POLICY_EXAMPLES_DIR
#error "FR_POLICY_EXAMPLES_DIR must point at policy/examples"
#endif
#ifndef FR_POLICY_DOCS
#error "FR_POLICY_DOCS must point at docs/policy.md"
#endif

#define PATHF(buf, ...) ck_assert_int_lt(snprintf(buf, sizeof(buf), __VA_ARGS__), (int)sizeof(buf))

/* ---- the example federation of docs/policy.md ---- */

#define NFED 10
static const char *const fed_names[NFED + 1] = {
    "ap-tokyo", "ap-singapore", "us-west",    "us-central", "us-east",
    "eu-west",  "eu-central",   "onprem-sjc", "onprem-iad", "onprem-fra", NULL};
static const char *const fed_regions[NFED + 1] = {
    "ap-tokyo", "ap-singapore", "us-west",    "us-central", "us-east",
    "eu-west",  "eu-central",   "us-west",    "us-east",    "eu-central", NULL};
/* Latency from a router in us-east. */
static const double fed_latency[NFED] = {150, 200, 60, 35, 5, 80, 90, 62, 6, 95};

/* A healthy federation, 100 free slots and no warm pods everywhere. */
static void fed_states(struct fr_cluster_state *st) {
  size_t i;

  for (i = 0; i < NFED; i++) {
    memset(&st[i], 0, sizeof(st[i]));
    st[i].name = fed_names[i];
    st[i].region = fed_regions[i];
    st[i].healthy = 1;
    st[i].synced = 1;
    st[i].age_ms = 500;
    st[i].latency_ms = fed_latency[i];
    st[i].free_slots = 100;
  }
}

static struct fr_cluster_state *fed_find(struct fr_cluster_state *st, size_t n, const char *name) {
  size_t i;

  for (i = 0; i < n; i++)
    if (strcmp(st[i].name, name) == 0)
      return &st[i];
  ck_abort_msg("no cluster %s", name);
  return NULL;
}

static void set_free(struct fr_cluster_state *st, size_t n, const char *name, int64_t free_slots,
                     int64_t warm) {
  struct fr_cluster_state *s = fed_find(st, n, name);
  s->free_slots = free_slots;
  s->warm_ready = warm;
}

/* ---- fixture: a temporary directory for policy files ---- */

static char tmpdir[PATH_MAX];

static void setup(void) {
  const char *base = getenv("TMPDIR");
  PATHF(tmpdir, "%s/fr-policy-XXXXXX", base != NULL && base[0] != '\0' ? base : "/tmp");
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

static void write_file(const char *text, char *path, size_t size) {
  FILE *f;

  ck_assert_int_lt(snprintf(path, size, "%s/p.conf", tmpdir), (int)size);
  f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fputs(text, f) >= 0, 1);
  ck_assert_int_eq(fclose(f), 0);
}

/* Loads <text> against the example federation. */
static int load_text(const char *text, struct fr_policy **p, struct fr_policy_error *err,
                     struct fr_policy_warning **w, size_t *nw) {
  char path[PATH_MAX];
  write_file(text, path, sizeof(path));
  return fr_policy_load(path, fed_names, fed_regions, p, err, w, nw);
}

/* Loads <text>, asserting success and no warnings. */
static struct fr_policy *load_ok(const char *text) {
  struct fr_policy *p = NULL;
  struct fr_policy_error err;
  struct fr_policy_warning *w = NULL;
  size_t nw = 0;
  int rc = load_text(text, &p, &err, &w, &nw);

  ck_assert_msg(rc == 0, "load failed (%d): %s:%d: %s", rc, err.file, err.line, err.msg);
  ck_assert_msg(nw == 0, "unexpected warning: line %d: %s", nw > 0 ? w[0].line : 0,
                nw > 0 ? w[0].msg : "");
  free(w);
  return p;
}

static struct fr_policy *load_example(const char *name) {
  struct fr_policy *p = NULL;
  struct fr_policy_error err;
  struct fr_policy_warning *w = NULL;
  size_t nw = 0;
  char path[PATH_MAX];
  int rc;

  PATHF(path, "%s/%s", FR_POLICY_EXAMPLES_DIR, name);
  rc = fr_policy_load(path, fed_names, fed_regions, &p, &err, &w, &nw);
  ck_assert_msg(rc == 0, "%s:%d: %s", err.file, err.line, err.msg);
  ck_assert_msg(nw == 0, "%s: unexpected warning: line %d: %s", name, nw > 0 ? w[0].line : 0,
                nw > 0 ? w[0].msg : "");
  free(w);
  return p;
}

/* ---- plans ---- */

static struct fr_placement_request request(const char *tenant, const char *region, int64_t count) {
  struct fr_placement_request r;

  memset(&r, 0, sizeof(r));
  r.tenant = tenant;
  r.region = region;
  r.count = count;
  return r;
}

/* "a=3+w1 b=0 | c d": used clusters in order, then the skipped ones (the
 * bar is always there, so "a=1 |" says nothing was skipped). */
static void plan_str(const struct fr_plan *plan, const struct fr_cluster_state *st, char *buf,
                     size_t size) {
  size_t i, len = 0;
  int sep = 0;

  buf[0] = '\0';
  for (i = 0; i <= plan->nentries; i++) {
    const struct fr_plan_entry *e = i < plan->nentries ? &plan->entries[i] : NULL;
    int w = 0;
    if ((e == NULL || e->verdict == FR_PLAN_SKIP) && !sep) {
      w = snprintf(buf + len, size - len, "%s|", len > 0 ? " " : "");
      ck_assert_int_lt(w, (int)(size - len));
      len += (size_t)w;
      sep = 1;
    }
    if (e == NULL)
      break;
    if (e->verdict == FR_PLAN_USE && e->warm > 0)
      w = snprintf(buf + len, size - len, "%s%s=%lld+w%lld", len > 0 ? " " : "",
                   st[e->cluster].name, (long long)e->count, (long long)e->warm);
    else if (e->verdict == FR_PLAN_USE)
      w = snprintf(buf + len, size - len, "%s%s=%lld", len > 0 ? " " : "", st[e->cluster].name,
                   (long long)e->count);
    else
      w = snprintf(buf + len, size - len, " %s", st[e->cluster].name);
    ck_assert_int_lt(w, (int)(size - len));
    len += (size_t)w;
  }
}

/* Plans and renders; returns the plan for further checks (caller frees). */
static void plan_ok(const struct fr_policy *p, const struct fr_cluster_state *st, size_t n,
                    const struct fr_placement_request *req, struct fr_plan *plan, char *buf,
                    size_t size) {
  ck_assert_int_eq(fr_policy_plan(p, st, n, req, plan), 0);
  ck_assert_uint_eq(plan->nentries, n);
  plan_str(plan, st, buf, size);
}

static const struct fr_plan_entry *entry_of(const struct fr_plan *plan,
                                            const struct fr_cluster_state *st, const char *name) {
  size_t i;

  for (i = 0; i < plan->nentries; i++)
    if (strcmp(st[plan->entries[i].cluster].name, name) == 0)
      return &plan->entries[i];
  ck_abort_msg("%s is not in the plan", name);
  return NULL;
}

#define ASSERT_REASON(plan, st, name, sub)                                                      \
  do {                                                                                          \
    const struct fr_plan_entry *e_ = entry_of(plan, st, name);                                  \
    ck_assert_msg(strstr(e_->reason, sub) != NULL, "%s: reason \"%s\" lacks \"%s\"", name,      \
                  e_->reason, sub);                                                             \
  } while (0)

/* ---- the shipped examples ---- */

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  char *buf;
  long len;

  ck_assert_msg(f != NULL, "cannot open %s", path);
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  len = ftell(f);
  ck_assert_int_ge(len, 0);
  rewind(f);
  buf = malloc((size_t)len + 1);
  ck_assert_ptr_nonnull(buf);
  ck_assert_uint_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
  buf[len] = '\0';
  fclose(f);
  return buf;
}


static const char *const example_files[] = {"apac-stays-in-apac.conf", "onprem-first.conf",
                                            "rl-spread-us.conf", "eu-stays-in-eu.conf"};

START_TEST(example_file_loads_without_warnings_and_hashes_its_bytes) {
  struct fr_policy *p = load_example(example_files[_i]);
  char path[PATH_MAX], real[PATH_MAX], want[65];
  char *text;

  PATHF(path, "%s/%s", FR_POLICY_EXAMPLES_DIR, example_files[_i]);
  ck_assert_ptr_nonnull(realpath(path, real));
  ck_assert_str_eq(fr_policy_source(p), real);
  text = read_all(path);
  fr_sha256_hex(text, strlen(text), want);
  free(text);
  ck_assert_str_eq(fr_policy_version(p), want);
  fr_policy_unref(p);
}
END_TEST

/* docs/policy.md shows each example file whole: they cannot drift apart. */
START_TEST(docs_policy_md_shows_example_file_verbatim) {
  char path[PATH_MAX];
  char *doc = read_all(FR_POLICY_DOCS), *text;
  size_t n;

  PATHF(path, "%s/%s", FR_POLICY_EXAMPLES_DIR, example_files[_i]);
  text = read_all(path);
  n = strlen(text);
  ck_assert_uint_gt(n, 0);
  ck_assert(text[n - 1] == '\n');
  text[n - 1] = '\0'; /* the docs close the code block right after the last line */
  ck_assert_msg(strstr(doc, text) != NULL, "docs/policy.md does not show %s as it is",
                example_files[_i]);
  free(text);
  free(doc);
}
END_TEST

/* APAC example: home region, then the rest of APAC, then us-west, then the
 * rest of the US by measured latency, then Europe. */
struct apac_case {
  const char *client;
  int tokyo_free, singapore_free, us_west_free;
  int64_t count;
  const char *want;
};

static const struct apac_case apac_cases[] = {
    /* An APAC client lands in its own region. */
    {"ap-tokyo", 100, 100, 100, 3,
     "ap-tokyo=3 ap-singapore=0 us-west=0 onprem-sjc=0 us-east=0 onprem-iad=0 us-central=0 "
     "eu-west=0 eu-central=0 onprem-fra=0 |"},
    {"ap-singapore", 100, 100, 100, 3,
     "ap-singapore=3 ap-tokyo=0 us-west=0 onprem-sjc=0 us-east=0 onprem-iad=0 us-central=0 "
     "eu-west=0 eu-central=0 onprem-fra=0 |"},
    /* A client naming the group ("apac") stays in the group. */
    {"apac", 100, 100, 100, 3,
     "ap-tokyo=3 ap-singapore=0 us-west=0 onprem-sjc=0 us-east=0 onprem-iad=0 us-central=0 "
     "eu-west=0 eu-central=0 onprem-fra=0 |"},
    /* Tokyo full: Singapore, still APAC. */
    {"ap-tokyo", 0, 100, 100, 3,
     "ap-singapore=3 us-west=0 onprem-sjc=0 us-east=0 onprem-iad=0 us-central=0 eu-west=0 "
     "eu-central=0 onprem-fra=0 ap-tokyo=0 |"},
    /* APAC full: the nearest US region (us-west, by the near list). */
    {"ap-tokyo", 0, 0, 100, 3,
     "us-west=3 onprem-sjc=0 us-east=0 onprem-iad=0 us-central=0 eu-west=0 eu-central=0 "
     "onprem-fra=0 ap-tokyo=0 ap-singapore=0 |"},
    /* Part fits in APAC: the rest spills in near order. */
    {"ap-tokyo", 2, 1, 100, 5,
     "ap-tokyo=2 ap-singapore=1 us-west=2 onprem-sjc=0 us-east=0 onprem-iad=0 us-central=0 "
     "eu-west=0 eu-central=0 onprem-fra=0 |"},
    /* us-west full too: the rest of the US, fastest region first. */
    {"ap-tokyo", 0, 0, 0, 3,
     "onprem-sjc=3 us-east=0 onprem-iad=0 us-central=0 eu-west=0 eu-central=0 onprem-fra=0 "
     "ap-tokyo=0 ap-singapore=0 us-west=0 |"},
};

START_TEST(apac_example_places_by_region_then_nearness) {
  const struct apac_case *t = &apac_cases[_i];
  struct fr_policy *p = load_example("apac-stays-in-apac.conf");
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request("team", t->client, t->count);
  struct fr_plan plan;
  char got[1024];

  fed_states(st);
  set_free(st, NFED, "ap-tokyo", t->tokyo_free, 0);
  set_free(st, NFED, "ap-singapore", t->singapore_free, 0);
  set_free(st, NFED, "us-west", t->us_west_free, 0);
  if (t->us_west_free == 0)
    set_free(st, NFED, "onprem-sjc", 100, 0);
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, t->want);
  ck_assert_int_eq(plan.planned, t->count);
  ck_assert_int_eq(plan.shortfall, 0);
  ck_assert_str_eq(plan.split, "fill_first");
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

START_TEST(apac_example_reasons_name_region_and_nearness) {
  struct fr_policy *p = load_example("apac-stays-in-apac.conf");
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request("team", "ap-tokyo", 1);
  struct fr_plan plan;
  char got[1024];

  fed_states(st);
  set_free(st, NFED, "ap-singapore", 0, 0);
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(entry_of(&plan, st, "ap-tokyo")->reason,
                   "region ap-tokyo (client region): 100 free + 0 warm");
  ck_assert_str_eq(entry_of(&plan, st, "ap-singapore")->reason,
                   "region ap-singapore (client's group apac): 0 free + 0 warm, full");
  ck_assert_str_eq(entry_of(&plan, st, "us-west")->reason,
                   "region us-west (near apac #1): 100 free + 0 warm, not needed");
  ck_assert_str_eq(entry_of(&plan, st, "eu-west")->reason,
                   "region eu-west (near apac #3): 100 free + 0 warm, not needed");
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

/* On-prem example: every on-prem cluster of the client's group fills
 * before the cloud; then the cheaper, nearer cloud clusters. */
START_TEST(onprem_example_fills_onprem_before_cloud) {
  struct fr_policy *p = load_example("onprem-first.conf");
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request("team", "us-east", 0);
  struct fr_plan plan;
  char got[1024];

  fed_states(st);
  set_free(st, NFED, "onprem-iad", 30, 5);
  set_free(st, NFED, "onprem-sjc", 20, 0);
  fed_find(st, NFED, "us-east")->cost_per_hour = 0.08;
  fed_find(st, NFED, "us-central")->cost_per_hour = 0.02;
  fed_find(st, NFED, "us-west")->cost_per_hour = 0.05;

  /* 40: on-prem only, the client's region first, warm pods first. */
  req.count = 40;
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "onprem-iad=35+w5 onprem-sjc=5 us-east=0 us-central=0 us-west=0 "
                        "onprem-fra=0 eu-west=0 eu-central=0 ap-tokyo=0 ap-singapore=0 |");
  ASSERT_REASON(&plan, st, "onprem-iad", "region us-east (client region), tier onprem: 30 free");
  ASSERT_REASON(&plan, st, "us-east", "tier cloud");
  fr_plan_free(&plan);

  /* 100: both on-prem clusters full up (55), then 45 burst to the cloud:
   * the client's region first. */
  req.count = 100;
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "onprem-iad=35+w5 onprem-sjc=20 us-east=45 us-central=0 us-west=0 "
                        "onprem-fra=0 eu-west=0 eu-central=0 ap-tokyo=0 ap-singapore=0 |");
  fr_plan_free(&plan);

  /* From us-central: no on-prem in its region; the group's on-prem first,
   * then us-central (its own region), then the rest of the US cloud. */
  req.region = "us-central";
  req.count = 60;
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "onprem-iad=35+w5 onprem-sjc=20 us-central=5 us-east=0 us-west=0 "
                        "onprem-fra=0 eu-west=0 eu-central=0 ap-tokyo=0 ap-singapore=0 |");
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

/* RL example: a big batch is spread over every US cluster in proportion to
 * free capacity; other tenants fill first; RL never leaves the US. */
START_TEST(rl_example_spreads_batch_over_all_us_clusters) {
  struct fr_policy *p = load_example("rl-spread-us.conf");
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request("rl", "us-east", 5000);
  struct fr_plan plan;
  char got[1024];

  fed_states(st);
  set_free(st, NFED, "us-east", 2000, 0);
  set_free(st, NFED, "us-central", 1500, 500);
  set_free(st, NFED, "us-west", 2000, 0);
  set_free(st, NFED, "onprem-iad", 1000, 0);
  set_free(st, NFED, "onprem-sjc", 1000, 0);
  /* 8000 free: 5000 * 2000/8000 = 1250 each for the 2000s, 625 for the
   * 1000s. */
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "us-east=1250 onprem-iad=625 us-central=1250+w500 us-west=1250 "
                        "onprem-sjc=625 | ap-singapore ap-tokyo eu-central eu-west onprem-fra");
  ck_assert_str_eq(plan.split, "spread");
  ck_assert_str_eq(plan.rules, "rl-spreads-over-us");
  ck_assert_int_eq(plan.planned, 5000);
  ASSERT_REASON(&plan, st, "us-west", "spread by capacity");
  ASSERT_REASON(&plan, st, "eu-west",
                "skipped: region eu-west is not in only_regions of rule rl-spreads-over-us (line ");
  fr_plan_free(&plan);

  /* From APAC too: still only the US. */
  req.region = "ap-tokyo";
  req.count = 80;
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "us-east=20 onprem-iad=10 us-central=20+w20 us-west=20 onprem-sjc=10 | "
                        "ap-singapore ap-tokyo eu-central eu-west onprem-fra");
  fr_plan_free(&plan);

  /* Another tenant: fill first, where a sandbox is ready soonest: the warm
   * pods in us-central (30 ms farther) beat a 10 s cold start in us-east. */
  req.tenant = "eval";
  req.region = "us-east";
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(plan.split, "fill_first");
  ck_assert_str_eq(plan.rules, "");
  ck_assert_str_eq(st[plan.entries[0].cluster].name, "us-central");
  ck_assert_int_eq(plan.entries[0].count, 80);
  ck_assert_int_eq(plan.entries[0].warm, 80);
  ASSERT_REASON(&plan, st, "us-central", "warm beats a 10.0 s cold start in us-east");
  fr_plan_free(&plan);

  /* RL GPU pool: pinned to the US on-prem clusters, spread over them. */
  req.tenant = "rl";
  req.pool = "gpu-a100";
  req.count = 300;
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "onprem-iad=150 onprem-sjc=150 | ap-singapore ap-tokyo eu-central "
                        "eu-west onprem-fra us-central us-east us-west");
  ck_assert_str_eq(plan.rules, "rl-spreads-over-us,rl-gpu-on-prem");
  ASSERT_REASON(&plan, st, "us-east", "skipped: not pinned by rule rl-gpu-on-prem (line ");
  ASSERT_REASON(&plan, st, "onprem-fra", "not in only_regions of rule rl-spreads-over-us");
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

/* EU example: EU-labelled work stays in the EU even when the EU is full
 * (a shortfall, not a spill). */
START_TEST(eu_example_label_never_leaves_eu_even_when_full) {
  struct fr_policy *p = load_example("eu-stays-in-eu.conf");
  struct fr_cluster_state st[NFED];
  static const char *const keys[] = {"team", "data-residency"};
  static const char *const values[] = {"ml", "eu"};
  struct fr_placement_request req = request("team", "us-east", 150);
  struct fr_plan plan;
  char got[1024];

  req.label_keys = keys;
  req.label_values = values;
  req.nlabels = 2;
  fed_states(st);
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "eu-west=100 eu-central=50 onprem-fra=0 | ap-singapore ap-tokyo "
                        "onprem-iad onprem-sjc us-central us-east us-west");
  ck_assert_str_eq(plan.rules, "eu-data-stays-in-eu");
  ASSERT_REASON(&plan, st, "us-east",
                "skipped: region us-east is not in only_regions of rule eu-data-stays-in-eu");
  fr_plan_free(&plan);

  /* The EU is full: nothing is placed anywhere. */
  set_free(st, NFED, "eu-west", 0, 0);
  set_free(st, NFED, "eu-central", 0, 0);
  set_free(st, NFED, "onprem-fra", 0, 0);
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "eu-west=0 eu-central=0 onprem-fra=0 | ap-singapore ap-tokyo "
                        "onprem-iad onprem-sjc us-central us-east us-west");
  ck_assert_int_eq(plan.planned, 0);
  ck_assert_int_eq(plan.shortfall, 150);
  ASSERT_REASON(&plan, st, "eu-west", "full");
  fr_plan_free(&plan);

  /* The same request without the label goes anywhere: us-east first. */
  req.nlabels = 1;
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(st[plan.entries[0].cluster].name, "us-east");
  ck_assert_int_eq(plan.entries[0].count, 100);
  ck_assert_int_eq(plan.shortfall, 0);
  ck_assert_str_eq(plan.rules, "");
  fr_plan_free(&plan);

  /* An EU tenant (by glob) is EU-only without the label. */
  req.tenant = "eu-research";
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_int_eq(plan.planned, 0);
  ck_assert_str_eq(plan.rules, "eu-tenants");
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

/* ---- the built-in policy with the demo's three clusters ---- */

struct region_case {
  const char *client;
  int64_t tokyo_free;
  const char *want;
  const char *first_reason;
};

static const struct region_case region_cases[] = {
    {"apac", 10, "ap-tokyo=1 us-west=0 us-east=0 |", "region apac (client region)"},
    /* Tokyo full: the nearest US cluster (by measured latency). */
    {"apac", 0, "us-west=1 us-east=0 ap-tokyo=0 |", "region us (other region)"},
    {"us", 10, "us-west=1 us-east=0 ap-tokyo=0 |", "region us (client region)"},
    /* Unknown client region: the fastest region first. */
    {"mars", 10, "us-west=1 us-east=0 ap-tokyo=0 |", "region us (other region)"},
    {NULL, 10, "us-west=1 us-east=0 ap-tokyo=0 |", "region us (client region unknown)"},
};

START_TEST(default_policy_prefers_client_region_then_latency) {
  const struct region_case *t = &region_cases[_i];
  struct fr_policy *p = fr_policy_default();
  struct fr_cluster_state st[3];
  struct fr_placement_request req = request("demo", t->client, 1);
  struct fr_plan plan;
  char got[512];
  size_t i;

  static const char *const names[] = {"us-east", "us-west", "ap-tokyo"};
  static const char *const regions[] = {"us", "us", "apac"};
  static const double lat[] = {40, 20, 120};
  ck_assert_ptr_nonnull(p);
  memset(st, 0, sizeof(st));
  for (i = 0; i < 3; i++) {
    st[i].name = names[i];
    st[i].region = regions[i];
    st[i].healthy = st[i].synced = 1;
    st[i].latency_ms = lat[i];
    st[i].free_slots = 10;
  }
  st[2].free_slots = t->tokyo_free;
  plan_ok(p, st, 3, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, t->want);
  ck_assert_msg(strncmp(plan.entries[0].reason, t->first_reason, strlen(t->first_reason)) == 0,
                "reason \"%s\"", plan.entries[0].reason);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

START_TEST(default_policy_has_builtin_source_and_stable_version) {
  struct fr_policy *a = fr_policy_default(), *b = fr_policy_default();

  ck_assert_str_eq(fr_policy_source(a), "(built-in)");
  ck_assert_uint_eq(strlen(fr_policy_version(a)), 64);
  ck_assert_str_eq(fr_policy_version(a), fr_policy_version(b));
  ck_assert_ptr_eq(fr_policy_ref(a), a);
  fr_policy_unref(a);
  fr_policy_unref(a);
  fr_policy_unref(b);
  fr_policy_unref(NULL);
}
END_TEST

/* ---- weights ---- */

/* Two clusters in one region, each best on one term. */
struct weight_case {
  const char *weights;
  const char *want;
};

static const struct weight_case weight_cases[] = {
    {"latency = 1.0; warm = 0; capacity = 0; cost = 0;", "us-east=1+w1 onprem-iad=0 |"},
    {"latency = 0; warm = 0; capacity = 1.0; cost = 0;", "onprem-iad=1 us-east=0 |"},
    {"latency = 0; warm = 0; capacity = 0; cost = 1.0;", "onprem-iad=1 us-east=0 |"},
    {"latency = 0; warm = 1.0; capacity = 0; cost = 0;", "us-east=1+w1 onprem-iad=0 |"},
    /* us-east 0.2*100/105 + 11/12 + 0.1/0.3 = 1.44 < onprem-iad
     * 0.2*100/150 + 1000/1001 + 0.1/0.11 = 2.04. */
    {"latency = 0.2; warm = 0; capacity = 1.0; cost = 1.0;", "onprem-iad=1 us-east=0 |"},
    /* All zero: equal scores, the lower latency breaks the tie. */
    {"latency = 0; warm = 0; capacity = 0; cost = 0;", "us-east=1+w1 onprem-iad=0 |"},
};

START_TEST(weights_decide_between_clusters_of_one_region) {
  const struct weight_case *t = &weight_cases[_i];
  char text[512];
  struct fr_policy *p;
  struct fr_cluster_state st[2];
  struct fr_placement_request req = request("t", "us-east", 1);
  struct fr_plan plan;
  char got[256];

  PATHF(text, "weights = { %s };\nwarm = { beats_cold = false; };\n", t->weights);
  p = load_ok(text);
  memset(st, 0, sizeof(st));
  st[0] = (struct fr_cluster_state){"us-east", "us-east", 1, 1, 0, 5, 10, 1, 0.20, NULL, NULL};
  st[1] = (struct fr_cluster_state){"onprem-iad", "us-east", 1, 1, 0, 50, 1000, 0, 0.01, NULL, NULL};
  plan_ok(p, st, 2, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, t->want);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

START_TEST(weights_components_follow_documented_formula) {
  struct fr_policy *p = load_ok("weights = { latency = 2.0; warm = 1.0; capacity = 0.5; cost = 4.0;"
                                " latency_ref_ms = 50; cost_ref_per_hour = 0.1; };\n");
  struct fr_cluster_state st[1] = {{"us-east", "us-east", 1, 1, 0, 150, 30, 10, 0.3, NULL, NULL}};
  struct fr_placement_request req = request("t", "us-east", 20);
  struct fr_plan plan;
  char got[256];

  plan_ok(p, st, 1, &req, &plan, got, sizeof(got));
  /* latency 2 * 50/(50+150); warm 1 * min(10,20)/20; capacity 0.5 * 40/(40+20);
   * cost 4 * 0.1/(0.1+0.3) */
  ck_assert_double_eq_tol(plan.entries[0].s_latency, 0.5, 1e-9);
  ck_assert_double_eq_tol(plan.entries[0].s_warm, 0.5, 1e-9);
  ck_assert_double_eq_tol(plan.entries[0].s_capacity, 0.5 * 40.0 / 60.0, 1e-9);
  ck_assert_double_eq_tol(plan.entries[0].s_cost, 1.0, 1e-9);
  ck_assert_double_eq_tol(plan.entries[0].score, 2.0 + 1.0 / 3.0, 1e-9);
  fr_plan_free(&plan);
  st[0].cost_per_hour = 0; /* unknown: neutral 0.5 */
  plan_ok(p, st, 1, &req, &plan, got, sizeof(got));
  ck_assert_double_eq_tol(plan.entries[0].s_cost, 2.0, 1e-9);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

/* ---- tiers ---- */

#define TIERS_TEXT(order)                                                                     \
  "region_groups = ( { name = \"us\"; regions = [\"us-west\", \"us-central\", \"us-east\"]; },\n" \
  "                  { name = \"eu\"; regions = [\"eu-west\", \"eu-central\"]; } );\n"          \
  "spillover = { order = \"" order "\";\n"                                                    \
  "  tiers = ( { name = \"onprem\"; clusters = [\"onprem-*\"]; },\n"                          \
  "            { name = \"cloud\"; clusters = [\"us-*\", \"eu-*\"]; } ); };\n"

START_TEST(tiers_tier_first_uses_every_onprem_before_any_cloud) {
  struct fr_policy *p = load_ok(TIERS_TEXT("tier_first"));
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request("t", "us-east", 250);
  struct fr_plan plan;
  char got[1024];

  fed_states(st);
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  /* Tier onprem: the US group, then EU on-prem; then cloud. The APAC
   * clusters are in no tier: last. */
  ck_assert_str_eq(got, "onprem-iad=100 onprem-sjc=100 onprem-fra=50 us-east=0 us-central=0 "
                        "us-west=0 eu-west=0 eu-central=0 ap-tokyo=0 ap-singapore=0 |");
  ASSERT_REASON(&plan, st, "ap-tokyo", "no tier (last)");
  ck_assert_int_eq(entry_of(&plan, st, "ap-tokyo")->tier, 2);
  ck_assert_int_eq(entry_of(&plan, st, "us-east")->tier, 1);
  ck_assert_int_eq(entry_of(&plan, st, "onprem-fra")->tier, 0);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

START_TEST(tiers_region_first_bursts_to_cloud_before_other_groups) {
  struct fr_policy *p = load_ok(TIERS_TEXT("region_first"));
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request("t", "us-east", 250);
  struct fr_plan plan;
  char got[1024];

  fed_states(st);
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "onprem-iad=100 onprem-sjc=100 us-east=50 us-central=0 us-west=0 "
                        "onprem-fra=0 eu-west=0 eu-central=0 ap-tokyo=0 ap-singapore=0 |");
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

/* ---- rules ---- */

struct rule_case {
  const char *rules;
  const char *tenant, *pool, *label; /* label as "key=value" or NULL */
  const char *want;
  const char *matched;
  const char *reason_of, *reason;
};

static const struct rule_case rule_cases[] = {
    /* pin: only these clusters (still ranked by the policy). */
    {"{ name = \"pin-west\"; tenant = \"ml\"; pin = [\"us-west\", \"onprem-sjc\"]; }", "ml", NULL,
     NULL, "us-west=5 onprem-sjc=0 | ap-singapore ap-tokyo eu-central eu-west onprem-fra "
     "onprem-iad us-central us-east",
     "pin-west", "us-east", "skipped: not pinned by rule pin-west (line 1)"},
    /* The rule does not match another tenant. */
    {"{ name = \"pin-west\"; tenant = \"ml\"; pin = [\"us-west\", \"onprem-sjc\"]; }", "eval",
     NULL, NULL, "us-east=5 onprem-iad=0 us-central=0 us-west=0 onprem-sjc=0 eu-west=0 "
     "eu-central=0 onprem-fra=0 ap-tokyo=0 ap-singapore=0 |", "", NULL, NULL},
    /* deny by glob, for a pool glob. */
    {"{ name = \"no-onprem\"; pool = \"cpu-*\"; deny = \"onprem-*\"; }", "ml", "cpu-small", NULL,
     "us-east=5 us-central=0 us-west=0 eu-west=0 eu-central=0 ap-tokyo=0 ap-singapore=0 | "
     "onprem-fra onprem-iad onprem-sjc",
     "no-onprem", "onprem-iad", "skipped: denied by rule no-onprem (line 1)"},
    /* A later allow re-admits one denied cluster. */
    {"{ name = \"no-us\"; deny = \"us-*\"; },\n{ name = \"but-west\"; tenant = \"ml\"; allow = "
     "\"us-west\"; }", "ml", NULL, NULL,
     "onprem-iad=5 us-west=0 onprem-sjc=0 eu-west=0 eu-central=0 onprem-fra=0 ap-tokyo=0 "
     "ap-singapore=0 | us-central us-east",
     "no-us,but-west", "us-east", "skipped: denied by rule no-us (line 1)"},
    /* only_regions by region names; a label condition with a glob. */
    {"{ name = \"apac-only\"; labels = [\"geo=ap*\"]; only_regions = [\"ap-tokyo\", "
     "\"ap-singapore\"]; }", "ml", NULL, "geo=apac",
     "ap-tokyo=5 ap-singapore=0 | eu-central eu-west onprem-fra onprem-iad onprem-sjc us-central "
     "us-east us-west",
     "apac-only", "us-east", "not in only_regions of rule apac-only (line 1)"},
    /* allow cannot widen only_regions. */
    {"{ name = \"apac-only\"; only_regions = \"ap-tokyo\"; },\n{ name = \"widen\"; deny = "
     "\"ap-singapore\"; allow = [\"us-east\", \"ap-singapore\"]; }", "ml", NULL, NULL,
     "ap-tokyo=5 | ap-singapore eu-central eu-west onprem-fra onprem-iad onprem-sjc us-central "
     "us-east us-west",
     "apac-only,widen", "us-east", "not in only_regions of rule apac-only"},
    /* A label key alone matches any value; the split override applies. */
    {"{ name = \"batch\"; labels = \"batch\"; split = \"spread\"; }", "ml", NULL, "batch=yes",
     "us-east=1 onprem-iad=1 us-central=1 us-west=1 onprem-sjc=1 eu-west=0 eu-central=0 "
     "onprem-fra=0 ap-tokyo=0 ap-singapore=0 |", "batch", NULL, NULL},
    /* Every condition must hold. */
    {"{ name = \"both\"; tenant = \"ml\"; pool = \"gpu\"; deny = \"us-east\"; }", "ml", "cpu",
     NULL, "us-east=5 onprem-iad=0 us-central=0 us-west=0 onprem-sjc=0 eu-west=0 eu-central=0 "
     "onprem-fra=0 ap-tokyo=0 ap-singapore=0 |", "", NULL, NULL},
};

START_TEST(rule_restricts_clusters_as_documented) {
  const struct rule_case *t = &rule_cases[_i];
  char text[2048], key[64], value[64];
  const char *keys[1], *values[1];
  struct fr_policy *p = NULL;
  struct fr_policy_error err;
  struct fr_policy_warning *w = NULL;
  size_t nw = 0;
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request(t->tenant, "us-east", 5);
  struct fr_plan plan;
  char got[1024];
  int rc;

  PATHF(text, "rules = ( %s );\n"
              "region_groups = ( { name = \"us\"; regions = [\"us-west\", \"us-central\", "
              "\"us-east\"]; } );\n", t->rules);
  rc = load_text(text, &p, &err, &w, &nw); /* some cases warn (allow with no effect) */
  ck_assert_msg(rc == 0, "%s:%d: %s", err.file, err.line, err.msg);
  free(w);
  req.pool = t->pool;
  if (t->label != NULL) {
    const char *eq = strchr(t->label, '=');
    PATHF(key, "%.*s", (int)(eq - t->label), t->label);
    PATHF(value, "%s", eq + 1);
    keys[0] = key;
    values[0] = value;
    req.label_keys = keys;
    req.label_values = values;
    req.nlabels = 1;
  }
  fed_states(st);
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, t->want);
  ck_assert_str_eq(plan.rules, t->matched);
  if (t->reason_of != NULL)
    ASSERT_REASON(&plan, st, t->reason_of, t->reason);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

START_TEST(request_cluster_list_restricts_the_plan) {
  struct fr_policy *p = fr_policy_default();
  struct fr_cluster_state st[NFED];
  static const char *const only[] = {"eu-west", "ap-tokyo"};
  struct fr_placement_request req = request("t", "us-east", 150);
  struct fr_plan plan;
  char got[1024];

  req.clusters = only;
  req.nclusters = 2;
  fed_states(st);
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "eu-west=100 ap-tokyo=50 | ap-singapore eu-central onprem-fra "
                        "onprem-iad onprem-sjc us-central us-east us-west");
  ASSERT_REASON(&plan, st, "us-east", "skipped: not in the request's cluster list");
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

/* ---- batch split ---- */

struct split_case {
  const char *split;
  int64_t count;
  const char *want;
  int64_t shortfall;
};

/* a: 500 free + 100 warm, b: 300, c: 100; ranked a, b, c by latency. */
static const struct split_case split_cases[] = {
    {"fill_first", 500, "a=500+w100 b=0 c=0 |", 0},
    {"fill_first", 800, "a=600+w100 b=200 c=0 |", 0},
    {"fill_first", 1000, "a=600+w100 b=300 c=100 |", 0},
    {"fill_first", 1200, "a=600+w100 b=300 c=100 |", 200},
    {"spread", 500, "a=300+w100 b=150 c=50 |", 0},
    /* 7 * (600, 300, 100) / 1000 = 4.2, 2.1, 0.7: floors 4, 2, 0 and the
     * remainder to the largest fraction (c). */
    {"spread", 7, "a=4+w4 b=2 c=1 |", 0},
    /* 1 unit: the largest fraction is a's (0.6). */
    {"spread", 1, "a=1+w1 b=0 c=0 |", 0},
    {"spread", 1000, "a=600+w100 b=300 c=100 |", 0},
    {"spread", 1200, "a=600+w100 b=300 c=100 |", 200},
};

START_TEST(batch_split_gives_exact_counts) {
  const struct split_case *t = &split_cases[_i];
  char text[256];
  struct fr_policy *p;
  struct fr_cluster_state st[3] = {
      {"c", "r1", 1, 1, 0, 30, 100, 0, 0, NULL, NULL},
      {"a", "r1", 1, 1, 0, 10, 500, 100, 0, NULL, NULL},
      {"b", "r1", 1, 1, 0, 20, 300, 0, 0, NULL, NULL},
  };
  struct fr_placement_request req = request("t", "r1", t->count);
  struct fr_plan plan;
  char got[256];

  PATHF(text, "split = \"%s\";\nweights = { latency = 1.0; warm = 0; capacity = 0; };\n",
        t->split);
  {
    static const char *const names[] = {"a", "b", "c", NULL};
    static const char *const regions[] = {"r1", "r1", "r1", NULL};
    struct fr_policy_error err;
    char path[PATH_MAX];
    write_file(text, path, sizeof(path));
    ck_assert_int_eq(fr_policy_load(path, names, regions, &p, &err, NULL, NULL), 0);
  }
  plan_ok(p, st, 3, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, t->want);
  ck_assert_int_eq(plan.shortfall, t->shortfall);
  ck_assert_int_eq(plan.planned, t->count - t->shortfall);
  ck_assert_str_eq(plan.split, t->split);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

START_TEST(batch_spread_spills_to_next_group_when_best_is_short) {
  struct fr_policy *p = load_ok("split = \"spread\";\n"
                                "region_groups = ( { name = \"us\"; regions = [\"us-west\", "
                                "\"us-central\", \"us-east\"]; near = [\"eu\"]; },\n"
                                "  { name = \"eu\"; regions = [\"eu-west\", \"eu-central\"]; } );\n");
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request("t", "us", 700);
  struct fr_plan plan;
  char got[1024];

  fed_states(st);
  set_free(st, NFED, "eu-west", 300, 0);
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  /* The US group holds 500: all of it; the 200 left spread over the EU
   * (300 + 100 + 100). */
  ck_assert_str_eq(got, "us-east=100 onprem-iad=100 us-central=100 us-west=100 onprem-sjc=100 "
                        "eu-west=120 eu-central=40 onprem-fra=40 ap-tokyo=0 ap-singapore=0 |");
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

/* ---- warm vs cold ---- */

struct warm_case {
  const char *warm;      /* the warm group */
  const char *overrides; /* clusters = (...) or "" */
  int64_t count;
  const char *want;
  const char *reason;    /* of us-west, or NULL */
};

/* ap-tokyo: 10 ms, cold only; us-west: 120 ms, 3 warm. Difference 110 ms. */
static const struct warm_case warm_cases[] = {
    /* 5 s cold start > 110 ms: the farther warm pod wins. */
    {"beats_cold = true; cold_start_s = 5.0;", "", 1, "us-west=1+w1 ap-tokyo=0 |",
     "warm beats a 5.0 s cold start in ap-tokyo"},
    /* 50 ms cold start < 110 ms: the nearer cold start wins. */
    {"beats_cold = true; cold_start_s = 0.05;", "", 1, "ap-tokyo=1 us-west=0 |", NULL},
    /* 100 round trips * 110 ms = 11 s > 5 s: near wins. */
    {"beats_cold = true; cold_start_s = 5.0; round_trips = 100;", "", 1,
     "ap-tokyo=1 us-west=0 |", NULL},
    /* 40 round trips * 110 ms = 4.4 s < 5 s: warm wins. */
    {"beats_cold = true; cold_start_s = 5.0; round_trips = 40;", "", 1,
     "us-west=1+w1 ap-tokyo=0 |", NULL},
    {"beats_cold = false; cold_start_s = 5.0;", "", 1, "ap-tokyo=1 us-west=0 |", NULL},
    /* All 3 warm pods first, then cold starts near. */
    {"beats_cold = true; cold_start_s = 5.0;", "", 5, "us-west=3+w3 ap-tokyo=2 |", NULL},
    /* A per-cluster cold start: Tokyo's image is cached. */
    {"beats_cold = true; cold_start_s = 5.0;",
     "clusters = ( { name = \"ap-*\"; cold_start_s = 0.1; } );", 1, "ap-tokyo=1 us-west=0 |",
     NULL},
    /* Later overrides win. */
    {"beats_cold = true; cold_start_s = 5.0;",
     "clusters = ( { name = \"ap-*\"; cold_start_s = 0.1; }, { name = \"ap-tokyo\"; cold_start_s"
     " = 9; } );", 1, "us-west=1+w1 ap-tokyo=0 |", "warm beats a 9.0 s cold start in ap-tokyo"},
};

START_TEST(warm_farther_beats_cold_nearer_only_when_cold_start_is_longer) {
  const struct warm_case *t = &warm_cases[_i];
  char text[1024];
  struct fr_policy *p;
  struct fr_cluster_state st[2] = {
      {"ap-tokyo", "ap-tokyo", 1, 1, 0, 10, 10, 0, 0, NULL, NULL},
      {"us-west", "us-west", 1, 1, 0, 120, 10, 3, 0, NULL, NULL},
  };
  struct fr_placement_request req = request("t", "ap-tokyo", t->count);
  struct fr_plan plan;
  char got[256];

  PATHF(text, "warm = { %s };\n%s\n", t->warm, t->overrides);
  p = load_ok(text);
  plan_ok(p, st, 2, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, t->want);
  if (t->reason != NULL)
    ASSERT_REASON(&plan, st, "us-west", t->reason);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

/* ---- unusable clusters ---- */

struct skip_case {
  int healthy, synced;
  double age_ms;
  const char *reason;
  const char *unfit, *unfit_detail; /* pod options the cluster cannot host */
};

static const struct skip_case skip_cases[] = {
    {0, 1, 100, "skipped: unhealthy (circuit breaker open)", NULL, NULL},
    {1, 0, 100, "skipped: not synced (capacity unknown until its caches are complete)", NULL, NULL},
    {1, 1, 15001, "skipped: stale, capacity view 15001 ms old (max 15000 ms): unknown, not free", NULL, NULL},
    {1, 1, INFINITY, "skipped: stale, capacity view of unknown age (max 15000 ms): unknown, not "
                     "free", NULL, NULL},
    {1, 1, 100, "skipped: no_runtime_class (RuntimeClass \"gvisor\" not found)", "no_runtime_class",
     "RuntimeClass \"gvisor\" not found"},
    {1, 1, 100, "skipped: no_gpu_node", "no_gpu_node", NULL},
};

START_TEST(unusable_cluster_is_skipped_with_reason) {
  const struct skip_case *t = &skip_cases[_i];
  struct fr_policy *p = fr_policy_default();
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request("t", "us-east", 120);
  struct fr_plan plan;
  char got[1024];
  struct fr_cluster_state *s;

  fed_states(st);
  s = fed_find(st, NFED, "us-east");
  s->healthy = t->healthy;
  s->synced = t->synced;
  s->age_ms = t->age_ms;
  s->unfit = t->unfit;
  s->unfit_detail = t->unfit_detail;
  s->free_slots = 1000; /* plenty, and still not used */
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "onprem-iad=100 us-central=20 us-west=0 onprem-sjc=0 eu-west=0 "
                        "eu-central=0 onprem-fra=0 ap-tokyo=0 ap-singapore=0 | us-east");
  ck_assert_str_eq(entry_of(&plan, st, "us-east")->reason, t->reason);
  ck_assert_int_eq(entry_of(&plan, st, "us-east")->count, 0);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

/* ---- latency ceiling ---- */

START_TEST(latency_ceiling_skips_slow_cluster_unless_nothing_else_fits) {
  struct fr_policy *p = load_ok("latency_ceiling_ms = 100;\n"
                                "clusters = ( { name = \"eu-west\"; latency_ceiling_ms = 70; } );\n");
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request("t", "ap-tokyo", 150);
  struct fr_plan plan;
  char got[1024];

  fed_states(st);
  /* ap-tokyo (150 ms) and ap-singapore (200 ms) are over 100 ms; eu-west
   * (80 ms) over its own 70 ms. The client's own region is not used while
   * others can take the request. */
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "us-east=100 onprem-iad=50 us-central=0 us-west=0 onprem-sjc=0 "
                        "eu-central=0 onprem-fra=0 | ap-singapore ap-tokyo eu-west");
  ck_assert_str_eq(entry_of(&plan, st, "ap-tokyo")->reason,
                   "skipped: latency 150 ms over the 100 ms ceiling (other clusters can take the "
                   "request)");
  ASSERT_REASON(&plan, st, "eu-west", "skipped: latency 80 ms over the 70 ms ceiling");
  fr_plan_free(&plan);

  /* The others can take 700: the 50 left go to the slow ones, client
   * region first. */
  req.count = 750;
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "us-east=100 onprem-iad=100 us-central=100 us-west=100 onprem-sjc=100 "
                        "eu-central=100 onprem-fra=100 ap-tokyo=50 eu-west=0 ap-singapore=0 |");
  ck_assert_str_eq(entry_of(&plan, st, "ap-tokyo")->reason,
                   "region ap-tokyo (client region), over the 100 ms latency ceiling (150 ms) but "
                   "no other cluster can take the request: 100 free + 0 warm");
  ck_assert_int_eq(plan.shortfall, 0);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST


/* ---- cheaper_region: cost against region within a latency budget ---- */

/* Prices for the cheaper_region tests: us-east and onprem-iad (the
 * client's region) cost $0.10 a sandbox-hour, us-central $0.05, us-west
 * $0.04, eu-west $0.02. */
static void cheap_prices(struct fr_cluster_state *st) {
  size_t i;

  for (i = 0; i < NFED; i++)
    st[i].cost_per_hour = 0.10;
  fed_find(st, NFED, "us-central")->cost_per_hour = 0.05;
  fed_find(st, NFED, "us-west")->cost_per_hour = 0.04;
  fed_find(st, NFED, "eu-west")->cost_per_hour = 0.02;
}

START_TEST(cost_weight_alone_never_leaves_the_client_region) {
  /* The cost term ranks clusters within a region only: even at 20 it does
   * not move a request out of the client's region. */
  struct fr_policy *p = load_ok("weights = { cost = 20.0; };\n");
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request("t", "us-east", 3);
  struct fr_plan plan;
  char got[1024];

  fed_states(st);
  cheap_prices(st);
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_msg(strncmp(got, "us-east=3 ", 10) == 0, "plan %s", got);
  ck_assert_int_eq(plan.entries[0].first_choice, 1);
  ck_assert_int_eq(plan.entries[0].cheaper_than, -1);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

START_TEST(cheaper_region_moves_the_request_within_the_latency_budget) {
  /* us-central (35 ms, 50% cheaper) and us-west (60 ms, 60% cheaper) are
   * within 70 ms; eu-west (80 ms, 80% cheaper) is not. The cheapest of
   * those that qualify comes first, then the next; then the usual order. */
  struct fr_policy *p = load_ok("cheaper_region = { min_saving = 0.25; max_latency_ms = 70; };\n");
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request("t", "us-east", 150);
  const struct fr_plan_entry *e;
  struct fr_plan plan;
  char got[1024];
  json_t *j, *first;

  fed_states(st);
  cheap_prices(st);
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_msg(strncmp(got, "us-west=100 us-central=50 us-east=0 onprem-iad=0 ", 49) == 0, "plan %s", got);
  e = entry_of(&plan, st, "us-west");
  ck_assert_str_eq(e->reason, "region us-west (other region), cheaper region: $0.0400/h vs $0.1000/h in "
                              "us-east (60% less, over 25%; latency 60 ms within 70 ms): 100 free + 0 warm");
  ck_assert_str_eq(st[e->cluster].name, "us-west");
  ck_assert_str_eq(st[e->cheaper_than].name, "us-east");
  ck_assert_int_eq(e->first_choice, 1);
  ASSERT_REASON(&plan, st, "us-central", "cheaper region: $0.0500/h vs $0.1000/h in us-east (50% less");
  ck_assert_int_eq(entry_of(&plan, st, "eu-west")->cheaper_than, -1);
  /* explain's JSON names the cluster it was cheaper than */
  j = fr_plan_json(&plan, st);
  first = json_array_get(json_object_get(j, "clusters"), 0);
  ck_assert_str_eq(json_string_value(json_object_get(first, "cluster")), "us-west");
  ck_assert_str_eq(json_string_value(json_object_get(first, "cheaper_than")), "us-east");
  ck_assert(json_is_true(json_object_get(first, "first_choice")));
  ck_assert_ptr_null(json_object_get(json_array_get(json_object_get(j, "clusters"), 2), "cheaper_than"));
  json_decref(j);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

/* When cheaper_region moves a request, and when it does not. */
static const struct cheap_case {
  const char *policy;
  const char *first;      /* the first cluster of the plan */
  double central, west;   /* prices of us-central and us-west */
  const char *why;
} cheap_cases[] = {
    {"cheaper_region = { min_saving = 0.5; max_latency_ms = 40; };\n", "us-east", 0.05, 0.10,
     "exactly 50% cheaper is not more than 50%"},
    {"cheaper_region = { min_saving = 0.49; max_latency_ms = 40; };\n", "us-central", 0.05, 0.10,
     "51% cheaper, within 40 ms"},
    {"cheaper_region = { min_saving = 0.25; max_latency_ms = 30; };\n", "us-east", 0.05, 0.04,
     "both cheaper ones are over 30 ms"},
    {"cheaper_region = { min_saving = 0.25; max_latency_ms = 70; };\n", "us-west", 0.05, 0.04,
     "the cheapest of the two that qualify"},
    {"cheaper_region = { min_saving = 0.25; max_latency_ms = 70; };\n", "us-east", 0, 0,
     "an unknown price (0) is never cheaper"},
    {"cheaper_region = { min_saving = 0.25; max_latency_ms = 70; };\n"
     "spillover = { tiers = ( { name = \"cloud\"; clusters = [\"us-*\", \"eu-*\", \"ap-*\"]; },\n"
     " { name = \"onprem\"; clusters = \"onprem-*\"; } ); };\n",
     "us-central", 0.05, 0.10, "same tier as us-east: moved"},
    {"cheaper_region = { min_saving = 0.25; max_latency_ms = 70; };\n"
     "spillover = { tiers = ( { name = \"a\"; clusters = [\"us-east\", \"onprem-iad\"]; },\n"
     " { name = \"b\"; clusters = [\"us-central\", \"us-west\"]; } ); };\n",
     "us-east", 0.05, 0.04, "another tier: never moved ahead of the first tier"},
};

START_TEST(cheaper_region_moves_only_when_cheaper_by_more_and_near_enough) {
  const struct cheap_case *t = &cheap_cases[_i];
  struct fr_policy *p = load_ok(t->policy);
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request("t", "us-east", 1);
  struct fr_plan plan;
  char got[1024];

  fed_states(st);
  cheap_prices(st);
  fed_find(st, NFED, "us-central")->cost_per_hour = t->central;
  fed_find(st, NFED, "us-west")->cost_per_hour = t->west;
  fed_find(st, NFED, "eu-west")->cost_per_hour = 0.10;
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_msg(strcmp(st[plan.entries[0].cluster].name, t->first) == 0, "%s: plan %s, want %s first", t->why,
                got, t->first);
  ck_assert_int_eq(plan.entries[0].cheaper_than >= 0, strcmp(t->first, "us-east") != 0);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

START_TEST(cheaper_region_full_cluster_spills_to_the_usual_order) {
  struct fr_policy *p = load_ok("cheaper_region = { min_saving = 0.25; max_latency_ms = 40; };\n");
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request("t", "us-east", 30);
  struct fr_plan plan;
  char got[1024];

  fed_states(st);
  cheap_prices(st);
  set_free(st, NFED, "us-central", 10, 0);
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_msg(strncmp(got, "us-central=10 us-east=20 ", 25) == 0, "plan %s", got);
  ck_assert_int_eq(entry_of(&plan, st, "us-central")->first_choice, 1);
  /* us-east took the rest because us-central was full: those spilled */
  ck_assert_int_eq(entry_of(&plan, st, "us-east")->first_choice, 0);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

START_TEST(first_choice_marks_the_top_cluster_or_a_spread_group) {
  struct fr_policy *p = fr_policy_default();
  struct fr_policy *sp = load_ok("split = \"spread\";\n");
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request("t", "us-east", 150);
  struct fr_plan plan;
  char got[1024];

  fed_states(st);
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_msg(strncmp(got, "us-east=100 onprem-iad=50 ", 26) == 0, "plan %s", got);
  ck_assert_int_eq(entry_of(&plan, st, "us-east")->first_choice, 1);
  ck_assert_int_eq(entry_of(&plan, st, "onprem-iad")->first_choice, 0);
  fr_plan_free(&plan);
  /* spread: the client's whole region is the first group */
  plan_ok(sp, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_int_eq(entry_of(&plan, st, "us-east")->first_choice, 1);
  ck_assert_int_eq(entry_of(&plan, st, "onprem-iad")->first_choice, 1);
  ck_assert_int_eq(entry_of(&plan, st, "us-central")->first_choice, 0);
  fr_plan_free(&plan);
  fr_policy_unref(p);
  fr_policy_unref(sp);
}
END_TEST

/* The example of docs/policy.md, "Cost against region", row by row. */
START_TEST(cheaper_region_docs_example_rows) {
  static const char *const names[] = {"us-east", "eu-west", "eu-north"};
  static const char *const regions[] = {"us-east", "eu-west", "eu-north"};
  static const double lat[] = {5, 80, 150}, price[] = {0.10, 0.06, 0.04};
  struct fr_cluster_state st[3];
  struct fr_placement_request req = request("t", "us-east", 3);
  struct fr_policy *p = NULL, *wide = NULL;
  struct fr_policy_error err;
  struct fr_plan plan;
  char path[PATH_MAX], got[512];
  size_t i;

  write_file("cheaper_region = {\n  min_saving = 0.30;\n  max_latency_ms = 120;\n};\n", path, sizeof(path));
  ck_assert_int_eq(fr_policy_load(path, NULL, NULL, &p, &err, NULL, NULL), 0);
  write_file("cheaper_region = { min_saving = 0.30; max_latency_ms = 200; };\n", path, sizeof(path));
  ck_assert_int_eq(fr_policy_load(path, NULL, NULL, &wide, &err, NULL, NULL), 0);
  memset(st, 0, sizeof(st));
  for (i = 0; i < 3; i++) {
    st[i].name = names[i];
    st[i].region = regions[i];
    st[i].healthy = st[i].synced = 1;
    st[i].age_ms = 100;
    st[i].latency_ms = lat[i];
    st[i].free_slots = 100;
    st[i].cost_per_hour = price[i];
  }
  plan_ok(p, st, 3, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "eu-west=3 us-east=0 eu-north=0 |");
  ck_assert_str_eq(plan.entries[0].reason, "region eu-west (other region), cheaper region: $0.0600/h vs $0.1000/h in "
                                           "us-east (40% less, over 30%; latency 80 ms within 120 ms): 100 free + 0 warm");
  fr_plan_free(&plan);
  st[1].free_slots = 1;
  plan_ok(p, st, 3, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "eu-west=1 us-east=2 eu-north=0 |");
  ck_assert_int_eq(plan.entries[1].first_choice, 0); /* the 2 spilled */
  fr_plan_free(&plan);
  st[1].free_slots = 100;
  st[1].cost_per_hour = 0.075;
  plan_ok(p, st, 3, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "us-east=3 eu-west=0 eu-north=0 |");
  fr_plan_free(&plan);
  st[1].cost_per_hour = 0.06;
  plan_ok(wide, st, 3, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "eu-north=3 eu-west=0 us-east=0 |");
  fr_plan_free(&plan);
  fr_policy_unref(p);
  fr_policy_unref(wide);
}
END_TEST

START_TEST(cheaper_region_needs_both_keys) {
  struct fr_policy *p = NULL;
  struct fr_policy_error err;
  struct fr_policy_warning *w = NULL;
  size_t nw = 0;

  ck_assert_int_eq(load_text("cheaper_region = { min_saving = 0.3; };\n", &p, &err, &w, &nw), -EINVAL);
  ck_assert_int_eq(err.line, 1);
  ck_assert_msg(strstr(err.msg, "cheaper_region needs both min_saving") != NULL, "%s", err.msg);
  ck_assert_int_eq(load_text("cheaper_region = { min_saving = 1.5; max_latency_ms = 50; };\n", &p, &err, &w,
                             &nw), -EINVAL);
  ck_assert_str_eq(err.msg, "cheaper_region.min_saving: 1.5 is too large (at most 0.99)");
  ck_assert_int_eq(load_text("cheaper_region = { min_saving = 0.2; max_latency = 50; };\n", &p, &err, &w,
                             &nw), -EINVAL);
  ck_assert_str_eq(err.msg, "cheaper_region.max_latency: unknown key (known keys here: min_saving, max_latency_ms)");
  free(w);
}
END_TEST

/* ---- ties, a full federation, JSON ---- */

START_TEST(ties_are_broken_by_name_whatever_the_input_order) {
  struct fr_policy *p = fr_policy_default();
  struct fr_cluster_state st[3] = {
      {"zeta", "r", 1, 1, 0, 10, 5, 0, 0, NULL, NULL},
      {"alpha", "r", 1, 1, 0, 10, 5, 0, 0, NULL, NULL},
      {"mid", "r", 1, 1, 0, 10, 5, 0, 0, NULL, NULL},
  };
  struct fr_cluster_state rev[3] = {st[2], st[1], st[0]};
  struct fr_placement_request req = request("t", "r", 7);
  struct fr_plan plan;
  char got[256];

  plan_ok(p, st, 3, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "alpha=5 mid=2 zeta=0 |");
  fr_plan_free(&plan);
  plan_ok(p, rev, 3, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "alpha=5 mid=2 zeta=0 |");
  fr_plan_free(&plan);
  /* Skipped ones are listed by name too. */
  st[0].healthy = st[1].healthy = 0;
  plan_ok(p, st, 3, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "mid=5 | alpha zeta");
  ck_assert_int_eq(plan.shortfall, 2);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

START_TEST(full_federation_gives_shortfall_and_ranks_every_cluster) {
  struct fr_policy *p = fr_policy_default();
  struct fr_cluster_state st[NFED];
  struct fr_placement_request req = request("t", "us-east", 10);
  struct fr_plan plan;
  char got[1024];
  size_t i;

  fed_states(st);
  for (i = 0; i < NFED; i++)
    st[i].free_slots = 0;
  st[3].free_slots = -5; /* reservations beyond the view: counts as 0 */
  plan_ok(p, st, NFED, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "us-east=0 onprem-iad=0 us-central=0 us-west=0 onprem-sjc=0 eu-west=0 "
                        "eu-central=0 onprem-fra=0 ap-tokyo=0 ap-singapore=0 |");
  ck_assert_int_eq(plan.planned, 0);
  ck_assert_int_eq(plan.shortfall, 10);
  for (i = 0; i < NFED; i++)
    ck_assert_msg(strstr(plan.entries[i].reason, ", full") != NULL, "%s", plan.entries[i].reason);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

START_TEST(plan_json_lists_every_cluster_with_verdict_and_reason) {
  struct fr_policy *p = load_ok("rules = ( { name = \"no-b\"; deny = \"ap-tokyo\"; } );\n");
  struct fr_cluster_state st[3] = {
      {"us-east", "us-east", 1, 1, 0, 5, 1, 1, 0, NULL, NULL},
      {"ap-tokyo", "ap-tokyo", 1, 1, 0, 150, 9, 0, 0, NULL, NULL},
      {"eu-west", "eu-west", 1, 1, 0, 80, 9, 0, 0, NULL, NULL},
  };
  struct fr_placement_request req = request("t", "us-east", 3);
  struct fr_plan plan;
  json_t *j, *list, *e;
  char got[256];

  plan_ok(p, st, 3, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "us-east=2+w1 eu-west=1 | ap-tokyo");
  j = fr_plan_json(&plan, st);
  ck_assert_ptr_nonnull(j);
  ck_assert_str_eq(json_string_value(json_object_get(j, "split")), "fill_first");
  ck_assert_int_eq(json_integer_value(json_object_get(j, "planned")), 3);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "shortfall")), 0);
  ck_assert_uint_eq(json_array_size(json_object_get(j, "rules")), 1);
  ck_assert_str_eq(json_string_value(json_array_get(json_object_get(j, "rules"), 0)), "no-b");
  list = json_object_get(j, "clusters");
  ck_assert_uint_eq(json_array_size(list), 3);
  e = json_array_get(list, 0);
  ck_assert_str_eq(json_string_value(json_object_get(e, "cluster")), "us-east");
  ck_assert_str_eq(json_string_value(json_object_get(e, "verdict")), "use");
  ck_assert_int_eq(json_integer_value(json_object_get(e, "count")), 2);
  ck_assert_int_eq(json_integer_value(json_object_get(e, "warm")), 1);
  ck_assert_int_eq(json_integer_value(json_object_get(e, "tier")), 0);
  ck_assert_double_eq_tol(json_real_value(json_object_get(e, "score")),
                          round(plan.entries[0].score * 10000) / 10000, 1e-12);
  ck_assert_double_eq_tol(
      json_real_value(json_object_get(json_object_get(e, "scores"), "latency")),
      round(100.0 / 105.0 * 10000) / 10000, 1e-12);
  ck_assert_str_eq(json_string_value(json_object_get(e, "reason")),
                   "region us-east (client region): 1 free + 1 warm");
  e = json_array_get(list, 2);
  ck_assert_str_eq(json_string_value(json_object_get(e, "cluster")), "ap-tokyo");
  ck_assert_str_eq(json_string_value(json_object_get(e, "verdict")), "skip");
  ck_assert_int_eq(json_integer_value(json_object_get(e, "count")), 0);
  ck_assert_str_eq(json_string_value(json_object_get(e, "reason")),
                   "skipped: denied by rule no-b (line 1)");
  json_decref(j);
  fr_plan_free(&plan);
  fr_policy_unref(p);
}
END_TEST

START_TEST(plan_handles_clusters_unknown_to_policy_and_empty_input) {
  /* Loaded without the router's list: names are matched at plan time. */
  static const char text[] =
      "spillover = { tiers = ( { name = \"a\"; clusters = [\"x-*\"]; } ); };\n"
      "rules = ( { name = \"r\"; deny = \"x-2\"; only_regions = [\"north\", \"south\"]; } );\n";
  struct fr_policy *p = NULL;
  struct fr_policy_error err;
  char path[PATH_MAX];
  struct fr_cluster_state st[4] = {
      {"y-1", "north", 1, 1, 0, 1, 5, 0, 0, NULL, NULL},
      {"x-1", "north", 1, 1, 0, 9, 5, 0, 0, NULL, NULL},
      {"x-2", "south", 1, 1, 0, 1, 5, 0, 0, NULL, NULL},
      {"x-3", "west", 1, 1, 0, 1, 5, 0, 0, NULL, NULL},
  };
  struct fr_placement_request req = request("t", "north", 8);
  struct fr_plan plan;
  char got[256];

  write_file(text, path, sizeof(path));
  ck_assert_int_eq(fr_policy_load(path, NULL, NULL, &p, &err, NULL, NULL), 0);
  plan_ok(p, st, 4, &req, &plan, got, sizeof(got));
  ck_assert_str_eq(got, "x-1=5 y-1=3 | x-2 x-3");
  fr_plan_free(&plan);
  ck_assert_int_eq(fr_policy_plan(p, NULL, 0, &req, &plan), 0);
  ck_assert_uint_eq(plan.nentries, 0);
  ck_assert_int_eq(plan.shortfall, 8);
  fr_plan_free(&plan);
  ck_assert_int_eq(fr_policy_plan(p, st, 4, NULL, &plan), -EINVAL);
  fr_policy_unref(p);
}
END_TEST

/* ---- errors ---- */

struct err_case {
  const char *text;
  int line;
  const char *msg; /* the whole message */
};

static const struct err_case err_cases[] = {
    {"split = ;\n", 1, "parse error: syntax error"},
    {"splitt = \"spread\";\n", 1, "splitt: unknown key (did you mean \"split\"?)"},
    {"\n\nweights = {\n  latncy = 1.0;\n};\n", 4,
     "weights.latncy: unknown key (did you mean \"latency\"?)"},
    {"frobnicate = 1;\n", 1,
     "frobnicate: unknown key (known keys here: split, max_state_age_ms, latency_ceiling_ms, "
     "weights, warm, region_groups, spillover, clusters, rules, cheaper_region)"},
    {"weights = { latency = \"1\"; };\n", 1,
     "weights.latency: expected a number, got a string (\"1\"); write numbers without quotes"},
    {"split = 1;\n", 1, "split: expected a string, got an integer (put the value in double quotes)"},
    {"region_groups = { };\n", 1,
     "region_groups: expected a list of groups ( { ... }, { ... } ), got a group { ... }"},
    {"warm = { beats_cold = 1; };\n", 1, "warm.beats_cold: expected true or false, got an integer"},
    {"weights = {\n cost = -1;\n};\n", 2, "weights.cost: must be >= 0, got -1"},
    {"latency_ceiling_ms = 0;\n", 1, "latency_ceiling_ms: must be > 0, got 0"},
    {"max_state_age_ms = 99999999999.0;\n", 1,
     "max_state_age_ms: 1e+11 is too large (at most 8.64e+07)"},
    {"clusters = ( { name = \"us-east\";\n latency_ceiling_ms = -5; } );\n", 2,
     "clusters.[0].latency_ceiling_ms: must be > 0, got -5"},
    {"warm = { cold_start_s = -0.5; };\n", 1, "warm.cold_start_s: must be >= 0, got -0.5"},
    {"split = \"fill-first\";\n", 1, "split: unknown value \"fill-first\" (did you mean "
                                     "\"fill_first\"?)"},
    {"spillover = { order = \"nearest\"; };\n", 1,
     "spillover.order: unknown value \"nearest\" (expected one of: tier_first, region_first)"},
    {"spillover = { tiers = (\n { name = \"a\"; clusters = [\"us-eats\"]; } ); };\n", 2,
     "spillover.tiers.[0].clusters.[0]: unknown cluster \"us-eats\" (did you mean \"us-east\"?)"},
    {"rules = ( { pin = [\"us-east\",\n \"onprem-sfo\"]; } );\n", 2,
     "rules.[0].pin.[1]: unknown cluster \"onprem-sfo\" (did you mean \"onprem-sjc\"?)"},
    {"rules = ( { deny = \"gke\"; } );\n", 1,
     "rules.[0].deny: unknown cluster \"gke\" (known clusters: ap-tokyo, ap-singapore, us-west, "
     "us-central, us-east, eu-west, eu-central, onprem-sjc, onprem-iad, onprem-fra)"},
    {"region_groups = ( { name = \"apac\"; regions = [\"ap-tokio\"]; } );\n", 1,
     "region_groups.[0].regions.[0]: unknown region \"ap-tokio\" (did you mean \"ap-tokyo\"?)"},
    {"region_groups = ( { name = \"eu\"; regions = [\"eu-west\"]; } );\nrules = ( {\n"
     " only_regions = [\"eu\", \"eu-wst\"]; } );\n", 3,
     "rules.[0].only_regions.[1]: unknown region or region group \"eu-wst\" (did you mean "
     "\"eu-west\"?)"},
    {"region_groups = ( { name = \"eu\"; regions = [\"eu-west\"]; near = [\"mars\"]; } );\n", 1,
     "region_groups.[0].near.[0]: unknown region or region group \"mars\" (known: ap-tokyo, "
     "ap-singapore, us-west, us-central, us-east, eu-west, eu-central, eu)"},
    {"rules = ( { only_regions = \"sa-east\"; } );\n", 1,
     "rules.[0].only_regions: unknown region or region group \"sa-east\" (did you mean "
     "\"us-east\"?)"},
    {"spillover = { tiers = (\n { name = \"a\"; clusters = [\"us-east\"]; },\n"
     " { name = \"b\"; clusters = [\"eu-west\", \"us-east\"]; } ); };\n", 3,
     "spillover.tiers.[1].clusters.[1]: \"us-east\" is already in tier \"a\" (line 2); a cluster "
     "belongs to one tier"},
    {"spillover = { tiers = (\n { name = \"a\"; clusters = [\"us-*\"]; },\n"
     " { name = \"b\"; clusters = [\"*-east\"]; } ); };\n", 3,
     "spillover.tiers.[1].clusters.[0]: \"*-east\" puts cluster \"us-east\" in tier \"b\", but it "
     "is already in tier \"a\" (line 2); a cluster belongs to one tier"},
    {"spillover = { tiers = ( { name = \"a\"; clusters = [\"us-*\", \"us-*\"]; } ); };\n", 1,
     "spillover.tiers.[0].clusters.[1]: \"us-*\" is listed twice (first at line 1)"},
    {"spillover = { tiers = ( { name = \"a\"; clusters = \"us-*\"; },\n { name = \"a\"; clusters"
     " = \"eu-*\"; } ); };\n", 2,
     "spillover.tiers.[1].name: duplicate tier \"a\" (first defined at line 1)"},
    {"spillover = { tiers = ( { name = \"a\"; } ); };\n", 1,
     "spillover.tiers.[0].clusters: missing (the clusters in this tier, by name or glob)"},
    {"region_groups = (\n { name = \"us\"; regions = [\"us-east\"]; },\n"
     " { name = \"east\"; regions = [\"eu-west\", \"us-east\"]; } );\n", 3,
     "region_groups.[1].regions.[1]: region \"us-east\" is already in group \"us\" (line 2); a "
     "region belongs to one group"},
    {"region_groups = ( { name = \"us\"; regions = [\"us-east\"]; },\n { name = \"us\"; regions ="
     " [\"us-west\"]; } );\n", 2,
     "region_groups.[1].name: duplicate region group \"us\" (first defined at line 1)"},
    {"region_groups = ( { name = \"us-west\"; regions = [\"us-east\"]; } );\n", 1,
     "region_groups.[0].name: \"us-west\" is also a region outside this group; give the group "
     "another name"},
    {"region_groups = ( { name = \"us\"; regions = [\"us-east\"]; near = [\"us\"]; } );\n", 1,
     "region_groups.[0].near.[0]: \"us\" is this group's own name; it always comes first, leave "
     "it out"},
    {"region_groups = ( { name = \"us\"; regions = [\"us-east\", \"us-west\"]; },\n"
     " { name = \"eu\"; regions = [\"eu-west\"]; near = [\"us\", \"us-west\"]; } );\n", 2,
     "region_groups.[1].near.[1]: region \"us-west\" is already covered by an earlier entry "
     "(position 1); list it before its group to rank it first"},
    {"rules = ( { name = \"x\"; tenant = \"rl\"; } );\n", 1,
     "rules.[0]: rule \"x\" has no action (give pin, allow, deny, only_regions or split)"},
    {"rules = ( { name = \"x\"; deny = \"us-east\"; },\n { name = \"x\"; deny = \"us-west\"; } );\n",
     2, "rules.[1].name: duplicate rule name \"x\" (first used at line 1)"},
    {"rules = ( { labels = [\"=eu\"]; deny = \"us-east\"; } );\n", 1,
     "rules.[0].labels.[0]: \"=eu\": missing the label key (write \"key=value\" or \"key\")"},
    {"rules = ( { labels = [\"a b=c\"]; deny = \"us-east\"; } );\n", 1,
     "rules.[0].labels.[0]: \"a b=c\": \"a b\" is not a valid label key (letters, digits, '-', "
     "'_', '.', '/')"},
    {"rules = ( { pin = []; } );\n", 1,
     "rules.[0].pin: empty list (give at least one name, or leave the key out)"},
    {"rules = ( { pin = [1, 2]; } );\n", 1,
     "rules.[0].pin.[0]: expected a string, got an integer (put names in double quotes)"},
    {"rules = ( { tenant = \"a b\"; deny = \"us-east\"; } );\n", 1,
     "rules.[0].tenant: \"a b\" is not a valid tenant name or pattern (letters, digits, '-', '_', "
     "'.', and the wildcards '*' and '?')"},
    {"rules = ( { split = \"spred\"; } );\n", 1,
     "rules.[0].split: unknown value \"spred\" (did you mean \"spread\"?)"},
    {"clusters = ( { name = \"us-east\"; } );\n", 1,
     "clusters.[0]: sets nothing (give cold_start_s and/or latency_ceiling_ms)"},
    {"clusters = ( { cold_start_s = 1; } );\n", 1,
     "clusters.[0].name: missing (the cluster name or glob these settings apply to)"},
    {"rules = ( { pin = \"us-[ab]\"; } );\n", 1,
     "rules.[0].pin: \"us-[ab]\" is not a valid cluster name or pattern (letters, digits, '-', '_',"
     " '.', and the wildcards '*' and '?')"},
};

START_TEST(policy_error_is_rejected_with_message_and_line) {
  const struct err_case *t = &err_cases[_i];
  struct fr_policy *p = (struct fr_policy *)&p; /* must be reset */
  struct fr_policy_error err;
  char path[PATH_MAX];
  int rc;

  write_file(t->text, path, sizeof(path));
  rc = fr_policy_load(path, fed_names, fed_regions, &p, &err, NULL, NULL);
  ck_assert_int_eq(rc, -EINVAL);
  ck_assert_ptr_null(p);
  ck_assert_str_eq(err.file, path);
  ck_assert_int_eq(err.line, t->line);
  ck_assert_str_eq(err.msg, t->msg);
}
END_TEST

START_TEST(policy_missing_file_returns_enoent) {
  struct fr_policy *p = NULL;
  struct fr_policy_error err;
  char path[PATH_MAX];

  PATHF(path, "%s/nope.conf", tmpdir);
  ck_assert_int_eq(fr_policy_load(path, fed_names, fed_regions, &p, &err, NULL, NULL), -ENOENT);
  ck_assert_ptr_null(p);
  ck_assert_str_eq(err.file, path);
  ck_assert_int_eq(err.line, 0);
  ck_assert_str_eq(err.msg, "cannot open the policy file: No such file or directory");
  ck_assert_int_eq(fr_policy_load(tmpdir, fed_names, fed_regions, &p, NULL, NULL, NULL), -EINVAL);
}
END_TEST

/* A check lists every error with its line: a bad value and an unknown key
 * at the top, an unknown key in a tier and a duplicate tier, a bad
 * override, an unknown cluster, an unknown key in one rule, a rule with no
 * action, a duplicate rule name. */
START_TEST(policy_check_reports_every_error_with_its_line) {
  char path[PATH_MAX];
  struct fr_test_heard h;
  int rc;

  memset(&h, 0, sizeof(h));
  write_file("split = \"fill_firts\";\n"
             "weigths = { latency = 1.0; };\n"
             "clusters = ( { name = \"us-east\"; cold_start_s = -1.0; },\n"
             "             { name = \"us-eastt\"; cold_start_s = 1.0; } );\n"
             "rules = (\n"
             "  { name = \"a\"; tenant = \"t1\"; pin = \"us-east\"; colour = \"red\"; },\n"
             "  { name = \"b\"; tenant = \"t2\"; },\n"
             "  { name = \"a\"; tenant = \"t3\"; deny = \"us-east\"; }\n"
             ");\n"
             "spillover = { tiers = ( { name = \"x\"; clusters = \"us-east\"; size = 1; },\n"
             "                        { name = \"x\"; clusters = \"us-west\"; } ); };\n",
             path, sizeof(path));
  rc = fr_policy_check(path, fed_names, fed_regions, fr_test_hear, &h, NULL, NULL);
  ck_assert_int_eq(rc, -EINVAL);
  ck_assert_int_eq(h.n, 9);
  for (rc = 0; rc < h.n; rc++)
    ck_assert_msg(strstr(h.files[rc], "/p.conf") != NULL, "file \"%s\"", h.files[rc]);
  /* In the order found: the top's keys first, then section by section. */
  ck_assert_int_eq(h.lines[0], 2);
  ck_assert_str_eq(h.msgs[0], "weigths: unknown key (did you mean \"weights\"?)");
  ck_assert_int_eq(h.lines[1], 1);
  ck_assert_str_eq(h.msgs[1], "split: unknown value \"fill_firts\" (did you mean \"fill_first\"?)");
  ck_assert_int_eq(h.lines[2], 10);
  ck_assert_ptr_nonnull(strstr(h.msgs[2], "spillover.tiers.[0].size: unknown key"));
  ck_assert_int_eq(h.lines[3], 11);
  ck_assert_ptr_nonnull(strstr(h.msgs[3], "duplicate tier \"x\" (first defined at line 10)"));
  ck_assert_int_eq(h.lines[4], 3);
  ck_assert_ptr_nonnull(strstr(h.msgs[4], "clusters.[0].cold_start_s: must be >= 0"));
  ck_assert_int_eq(h.lines[5], 4);
  ck_assert_ptr_nonnull(strstr(h.msgs[5], "unknown cluster \"us-eastt\" (did you mean \"us-east\"?)"));
  ck_assert_int_eq(h.lines[6], 6);
  ck_assert_ptr_nonnull(strstr(h.msgs[6], "rules.[0].colour: unknown key"));
  ck_assert_int_eq(h.lines[7], 7);
  ck_assert_ptr_nonnull(strstr(h.msgs[7], "rule \"b\" has no action"));
  ck_assert_int_eq(h.lines[8], 8);
  ck_assert_ptr_nonnull(strstr(h.msgs[8], "duplicate rule name \"a\" (first used at line 6)"));
}
END_TEST

/* An error in a group that also has an unknown key is reported too, in
 * every kind of group: weights, warm, a region group, a cluster override
 * and a rule (each field of a rule on its own). */
START_TEST(policy_check_reports_errors_sharing_a_group_with_unknown_key) {
  static const struct {
    int line;
    const char *msg;
  } want[] = {
      {1, "weights.latncy: unknown key (did you mean \"latency\"?)"},
      {1, "weights.cost: must be >= 0, got -1"},
      {2, "warm.beats_kold: unknown key (did you mean \"beats_cold\"?)"},
      {2, "warm.round_trips: must be >= 0, got -2"},
      {3, "region_groups.[0].colour: unknown key"},
      {3, "region_groups.[0].regions: unknown region \"us-eastt\""},
      {4, "clusters.[0].colour: unknown key"},
      {4, "clusters.[0].name: unknown cluster \"us-eastt\""},
      {4, "clusters.[0].cold_start_s: must be >= 0, got -1"},
      {4, "clusters.[0].latency_ceiling_ms: must be > 0, got 0"},
      {5, "rules.[0].colour: unknown key"},
      {5, "rules.[0].tenant: \"t 1\" is not a valid tenant name or pattern"},
      {5, "rules.[0].pin: unknown cluster \"us-eastt\""},
      {5, "rules.[0].split: unknown value \"spred\" (did you mean \"spread\"?)"},
  };
  char path[PATH_MAX];
  struct fr_test_heard h;
  size_t i;
  int k, found;

  memset(&h, 0, sizeof(h));
  write_file("weights = { latncy = 1.0; cost = -1.0; };\n"
             "warm = { beats_kold = true; round_trips = -2; };\n"
             "region_groups = ( { name = \"g\"; colour = 1; regions = \"us-eastt\"; } );\n"
             "clusters = ( { name = \"us-eastt\"; colour = 1; cold_start_s = -1.0; latency_ceiling_ms = 0; } );\n"
             "rules = ( { name = \"r\"; colour = 1; tenant = \"t 1\"; pin = \"us-eastt\"; split = \"spred\"; } );\n",
             path, sizeof(path));
  ck_assert_int_eq(fr_policy_check(path, fed_names, fed_regions, fr_test_hear, &h, NULL, NULL), -EINVAL);
  ck_assert_int_eq(h.n, (int)FR_ARRAY_SIZE(want));
  for (i = 0; i < FR_ARRAY_SIZE(want); i++) {
    for (found = 0, k = 0; k < h.n && !found; k++)
      found = h.lines[k] == want[i].line && strncmp(h.msgs[k], want[i].msg, strlen(want[i].msg)) == 0;
    ck_assert_msg(found, "not reported: line %d: %s", want[i].line, want[i].msg);
  }
}
END_TEST

/* fr_policy_load() (the router's hot reload keeps only its record, as
 * last_reload_error) tells every error in the record's message: the first
 * with the record's file and line, each later one as "; line N: ...". */
START_TEST(policy_load_record_tells_every_error) {
  struct fr_policy *p = NULL;
  struct fr_policy_error err;
  char path[PATH_MAX];

  write_file("split = \"spread\";\n"
             "weights = { latncy = 1.0; cost = -1.0; };\n"
             "warm = { round_trips = -2; };\n",
             path, sizeof(path));
  ck_assert_int_eq(fr_policy_load(path, fed_names, fed_regions, &p, &err, NULL, NULL), -EINVAL);
  ck_assert_ptr_null(p);
  ck_assert_str_eq(err.file, path);
  ck_assert_int_eq(err.line, 2);
  ck_assert_str_eq(err.msg, "weights.latncy: unknown key (did you mean \"latency\"?); "
                            "line 2: weights.cost: must be >= 0, got -1; "
                            "line 3: warm.round_trips: must be >= 0, got -2");
}
END_TEST

/* More errors than the record holds: as many as fit, then how many more
 * (the count of the check's list less those told). */
START_TEST(policy_load_record_counts_errors_it_has_no_room_for) {
  struct fr_policy *p = NULL;
  struct fr_policy_error err;
  struct fr_test_heard h;
  char path[PATH_MAX], text[2048], *more;
  size_t n = 0;
  int i, told = 1, untold;
  const char *c;

  for (i = 0; i < 15; i++)
    n += (size_t)snprintf(text + n, sizeof(text) - n, "unknown_key_number_%02d = %d;\n", i, i);
  write_file(text, path, sizeof(path));
  memset(&h, 0, sizeof(h));
  ck_assert_int_eq(fr_policy_check(path, fed_names, fed_regions, fr_test_hear, &h, NULL, NULL), -EINVAL);
  ck_assert_int_eq(h.n, 15);
  ck_assert_int_eq(fr_policy_load(path, fed_names, fed_regions, &p, &err, NULL, NULL), -EINVAL);
  ck_assert_int_eq(err.line, 1);
  ck_assert_ptr_nonnull(strstr(err.msg, "unknown_key_number_00: unknown key"));
  for (c = err.msg; (c = strstr(c, "; line ")) != NULL; c++)
    told++;
  more = strstr(err.msg, "; and ");
  ck_assert_msg(more != NULL, "no count of the untold errors: %s", err.msg);
  ck_assert_int_eq(sscanf(more, "; and %d more", &untold), 1);
  ck_assert_int_gt(told, 1);
  ck_assert_int_eq(told + untold, h.n);
  ck_assert_str_eq(strstr(more, " more"), " more (`fedrouter policy check` lists every error)");
  ck_assert_uint_lt(strlen(err.msg), sizeof(err.msg) - 1);
}
END_TEST

/* A syntax error stops libconfig: it is the one error, with its line;
 * a valid file reports none. */
START_TEST(policy_check_syntax_error_is_the_one_error) {
  char path[PATH_MAX];
  struct fr_test_heard h;

  memset(&h, 0, sizeof(h));
  write_file("split = \"spread\";\nweights = ;\ncolour = 1;\n", path, sizeof(path));
  ck_assert_int_eq(fr_policy_check(path, fed_names, fed_regions, fr_test_hear, &h, NULL, NULL), -EINVAL);
  ck_assert_int_eq(h.n, 1);
  ck_assert_int_eq(h.lines[0], 2);
  ck_assert_ptr_nonnull(strstr(h.msgs[0], "parse error"));
  memset(&h, 0, sizeof(h));
  write_file("split = \"spread\";\n", path, sizeof(path));
  ck_assert_int_eq(fr_policy_check(path, fed_names, fed_regions, fr_test_hear, &h, NULL, NULL), 0);
  ck_assert_int_eq(h.n, 0);
}
END_TEST

START_TEST(policy_without_router_lists_accepts_any_name) {
  struct fr_policy *p = NULL;
  struct fr_policy_error err;
  struct fr_policy_warning *w = NULL;
  size_t nw = 7;
  char path[PATH_MAX];

  write_file("region_groups = ( { name = \"g\"; regions = [\"r1\", \"r2\"]; near = [\"r3\"]; } );\n"
             "rules = ( { pin = \"anything\"; only_regions = \"r9\"; } );\n",
             path, sizeof(path));
  ck_assert_int_eq(fr_policy_load(path, NULL, NULL, &p, &err, &w, &nw), 0);
  ck_assert_uint_eq(nw, 0);
  ck_assert_ptr_null(w);
  fr_policy_unref(p);
}
END_TEST

/* ---- warnings ---- */

struct warn_case {
  const char *text;
  size_t count; /* warnings in all; one of them is <line>: <msg> */
  int line;
  const char *msg;
};

static const struct warn_case warn_cases[] = {
    /* only_regions naming regions whose every cluster an earlier rule
     * (that always applies with it) denies. */
    {"region_groups = ( { name = \"eu\"; regions = [\"eu-west\", \"eu-central\"]; } );\n"
     "rules = (\n { name = \"no-eu\"; deny = [\"eu-*\", \"onprem-fra\"]; },\n"
     " { name = \"eu-data\"; labels = \"data-residency=eu\";\n only_regions = \"eu\"; } );\n", 1, 4,
     "rules.[1]: rule \"eu-data\" can never place a sandbox: every cluster it leaves is denied or "
     "excluded by earlier rules that always apply with it: \"no-eu\" (line 3)"},
    /* pin to clusters an earlier catch-all rule denies. */
    {"rules = (\n { name = \"no-us\"; deny = \"us-*\"; },\n"
     " { name = \"rl\"; tenant = \"rl\"; pin = [\"us-west\", \"us-east\"]; } );\n", 1, 3,
     "rules.[1]: rule \"rl\" can never place a sandbox: every cluster it leaves is denied or "
     "excluded by earlier rules that always apply with it: \"no-us\" (line 2)"},
    /* only_regions against an earlier pin for the same tenant. */
    {"region_groups = ( { name = \"eu\"; regions = [\"eu-west\", \"eu-central\"]; } );\n"
     "rules = (\n { name = \"apac\"; tenant = \"t*\"; pin = \"ap-*\"; },\n"
     " { name = \"eu\"; tenant = \"team\"; only_regions = \"eu\"; } );\n", 1, 4,
     "rules.[1]: rule \"eu\" can never place a sandbox: every cluster it leaves is denied or "
     "excluded by earlier rules that always apply with it: \"apac\" (line 3)"},
    /* pin and only_regions of one rule with nothing in common. */
    {"rules = ( { name = \"x\"; pin = \"us-east\"; only_regions = \"eu-west\"; } );\n", 1, 1,
     "rules.[0]: rule \"x\" can never place a sandbox: no cluster it pins is in its only_regions"},
    /* A glob that matches no cluster. */
    {"rules = ( { deny = [\"us-east\",\n \"gke-*\"]; } );\n", 1, 2,
     "rules.[0].deny.[1]: pattern \"gke-*\" matches no cluster"},
    /* allow with nothing to re-admit. */
    {"rules = ( { deny = \"us-east\"; },\n { tenant = \"a\";\n allow = \"us-west\"; } );\n", 1, 3,
     "rules.[1].allow: allow in rule \"rules.[1]\" has no effect: no earlier rule denies any "
     "cluster it names (allow only re-admits clusters a deny removed)"},
};

START_TEST(policy_warning_names_line_and_does_not_fail) {
  const struct warn_case *t = &warn_cases[_i];
  struct fr_policy *p = NULL;
  struct fr_policy_error err;
  struct fr_policy_warning *w = NULL;
  size_t nw = 0;
  int rc = load_text(t->text, &p, &err, &w, &nw);

  size_t i, found = 0;

  ck_assert_msg(rc == 0, "%s:%d: %s", err.file, err.line, err.msg);
  ck_assert_ptr_nonnull(p);
  ck_assert_uint_eq(nw, t->count);
  for (i = 0; i < nw; i++)
    if (w[i].line == t->line && strcmp(w[i].msg, t->msg) == 0)
      found++;
  ck_assert_msg(found == 1, "no warning %d: %s (first: %d: %s)", t->line, t->msg, w[0].line,
                w[0].msg);
  free(w);
  fr_policy_unref(p);
}
END_TEST

START_TEST(policy_rule_after_narrower_rule_does_not_warn) {
  /* The deny applies only to tenant "a": a pin for everyone still works for
   * the other tenants. */
  struct fr_policy *p = load_ok("rules = (\n { tenant = \"a\"; deny = \"us-*\"; },\n"
                                " { pin = [\"us-west\", \"us-east\"]; } );\n");
  fr_policy_unref(p);
}
END_TEST

static Suite *policy_suite(void) {
  Suite *s = suite_create("policy");
  TCase *tc;

  tc = tcase_create("examples");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, example_file_loads_without_warnings_and_hashes_its_bytes, 0,
                      (int)FR_ARRAY_SIZE(example_files));
  tcase_add_loop_test(tc, docs_policy_md_shows_example_file_verbatim, 0,
                      (int)FR_ARRAY_SIZE(example_files));
  tcase_add_loop_test(tc, apac_example_places_by_region_then_nearness, 0,
                      (int)FR_ARRAY_SIZE(apac_cases));
  tcase_add_test(tc, apac_example_reasons_name_region_and_nearness);
  tcase_add_test(tc, onprem_example_fills_onprem_before_cloud);
  tcase_add_test(tc, rl_example_spreads_batch_over_all_us_clusters);
  tcase_add_test(tc, eu_example_label_never_leaves_eu_even_when_full);
  suite_add_tcase(s, tc);

  tc = tcase_create("placement");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, default_policy_prefers_client_region_then_latency, 0,
                      (int)FR_ARRAY_SIZE(region_cases));
  tcase_add_test(tc, default_policy_has_builtin_source_and_stable_version);
  tcase_add_loop_test(tc, weights_decide_between_clusters_of_one_region, 0,
                      (int)FR_ARRAY_SIZE(weight_cases));
  tcase_add_test(tc, weights_components_follow_documented_formula);
  tcase_add_test(tc, tiers_tier_first_uses_every_onprem_before_any_cloud);
  tcase_add_test(tc, tiers_region_first_bursts_to_cloud_before_other_groups);
  tcase_add_loop_test(tc, rule_restricts_clusters_as_documented, 0,
                      (int)FR_ARRAY_SIZE(rule_cases));
  tcase_add_test(tc, request_cluster_list_restricts_the_plan);
  tcase_add_loop_test(tc, batch_split_gives_exact_counts, 0, (int)FR_ARRAY_SIZE(split_cases));
  tcase_add_test(tc, batch_spread_spills_to_next_group_when_best_is_short);
  tcase_add_loop_test(tc, warm_farther_beats_cold_nearer_only_when_cold_start_is_longer, 0,
                      (int)FR_ARRAY_SIZE(warm_cases));
  tcase_add_loop_test(tc, unusable_cluster_is_skipped_with_reason, 0,
                      (int)FR_ARRAY_SIZE(skip_cases));
  tcase_add_test(tc, latency_ceiling_skips_slow_cluster_unless_nothing_else_fits);
  tcase_add_test(tc, cost_weight_alone_never_leaves_the_client_region);
  tcase_add_test(tc, cheaper_region_moves_the_request_within_the_latency_budget);
  tcase_add_loop_test(tc, cheaper_region_moves_only_when_cheaper_by_more_and_near_enough, 0,
                      (int)FR_ARRAY_SIZE(cheap_cases));
  tcase_add_test(tc, cheaper_region_full_cluster_spills_to_the_usual_order);
  tcase_add_test(tc, first_choice_marks_the_top_cluster_or_a_spread_group);
  tcase_add_test(tc, cheaper_region_needs_both_keys);
  tcase_add_test(tc, cheaper_region_docs_example_rows);
  tcase_add_test(tc, ties_are_broken_by_name_whatever_the_input_order);
  tcase_add_test(tc, full_federation_gives_shortfall_and_ranks_every_cluster);
  tcase_add_test(tc, plan_json_lists_every_cluster_with_verdict_and_reason);
  tcase_add_test(tc, plan_handles_clusters_unknown_to_policy_and_empty_input);
  suite_add_tcase(s, tc);

  tc = tcase_create("errors");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, policy_error_is_rejected_with_message_and_line, 0,
                      (int)FR_ARRAY_SIZE(err_cases));
  tcase_add_test(tc, policy_missing_file_returns_enoent);
  tcase_add_test(tc, policy_without_router_lists_accepts_any_name);
  tcase_add_test(tc, policy_check_reports_every_error_with_its_line);
  tcase_add_test(tc, policy_check_syntax_error_is_the_one_error);
  tcase_add_test(tc, policy_check_reports_errors_sharing_a_group_with_unknown_key);
  tcase_add_test(tc, policy_load_record_tells_every_error);
  tcase_add_test(tc, policy_load_record_counts_errors_it_has_no_room_for);
  tcase_add_loop_test(tc, policy_warning_names_line_and_does_not_fail, 0,
                      (int)FR_ARRAY_SIZE(warn_cases));
  tcase_add_test(tc, policy_rule_after_narrower_rule_does_not_warn);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(policy_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
