/* fuzz_policy.c - the placement policy loader (policy/src/policy_load.c,
 * fr_policy_load) on arbitrary file contents, and the planner on what it
 * accepts.
 *
 * The input is written to policy.conf and loaded twice: against the demo's
 * three clusters (us-east and us-west in "us", ap-tokyo in "apac"), which
 * turns on the name checks and the warnings that need them, and without
 * cluster names. A rejected file must say why; an accepted one is asked
 * for a plan (pure code: fr_policy_plan) for a small request with labels
 * and a pool, and the plan must be complete: one entry per cluster, the
 * counts adding up to what was planned.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fr/policy.h"
#include "fuzz_util.h"

static const char *const clusters[] = {"us-east", "us-west", "ap-tokyo", NULL};
static const char *const regions[] = {"us", "us", "apac", NULL};

static void check(int cond) {
  if (!cond)
    abort();
}

static void plan(const struct fr_policy *p) {
  static const char *const keys[] = {"team", "fedrouter.io/pool"};
  static const char *const values[] = {"rl", "py"};
  struct fr_cluster_state st[3];
  struct fr_placement_request req;
  struct fr_plan out;
  int64_t sum = 0;
  size_t i;

  memset(st, 0, sizeof(st));
  for (i = 0; i < 3; i++) {
    st[i].name = clusters[i];
    st[i].region = regions[i];
    st[i].healthy = i != 1;
    st[i].synced = 1;
    st[i].latency_ms = 5.0 + 60.0 * (double)i;
    st[i].free_slots = 4 - (int64_t)i;
    st[i].warm_ready = (int64_t)i;
    st[i].cost_per_hour = 0.05 * (double)i;
  }
  memset(&req, 0, sizeof(req));
  req.tenant = "rl";
  req.pool = "py";
  req.region = "us";
  req.label_keys = keys;
  req.label_values = values;
  req.nlabels = 2;
  req.count = 7;
  if (fr_policy_plan(p, st, 3, &req, &out) != 0)
    return;
  check(out.nentries == 3);
  for (i = 0; i < out.nentries; i++) {
    check(out.entries[i].cluster < 3);
    check(out.entries[i].count >= 0);
    sum += out.entries[i].count;
  }
  check(sum == out.planned);
  check(out.planned + out.shortfall == req.count);
  fr_plan_free(&out);
}

static void load(const char *path, const char *const *names, const char *const *regs) {
  struct fr_policy *p = NULL;
  struct fr_policy_error err;
  struct fr_policy_warning *w = NULL;
  size_t nw = 0;

  memset(&err, 0, sizeof(err));
  if (fr_policy_load(path, names, regs, &p, &err, &w, &nw) != 0) {
    check(err.msg[0] != '\0');
    free(w);
    return;
  }
  check(p != NULL);
  check(fr_policy_version(p) != NULL && fr_policy_source(p) != NULL);
  (void)fr_policy_knows_region(p, "us");
  (void)fr_policy_knows_region(p, "eu");
  plan(p);
  free(w);
  fr_policy_unref(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_write_file("policy.conf", data, size);

  load(path, clusters, regions);
  load(path, NULL, NULL);
  return 0;
}
