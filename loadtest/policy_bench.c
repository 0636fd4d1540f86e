/* policy_bench.c - decisions per second of the placement policy.
 *
 * 20 clusters in 8 regions (on-prem and cloud), a realistic policy (three
 * region groups with near lists, two spillover tiers, a latency ceiling,
 * cost-aware weights, per-cluster cold starts, seven rules on tenants,
 * pools and labels) and a rotating mix of requests: single sandboxes from
 * APAC, US and EU clients, a 5,000-sandbox RL batch spread over the US, an
 * EU-labelled batch, a GPU pool pinned on-prem, a client region nobody
 * knows. Each decision includes fr_plan_free(). Target: <= 5 us/decision.
 *
 *   build/policy_bench [decisions]     (default 2,000,000)
 *
 * Prints ns/decision and decisions/s, then one JSON line for scripts.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fr/policy.h"
#include "fr/util.h"

#define NCLUSTERS 20

static const char *const names[NCLUSTERS + 1] = {
    "gke-ap-tokyo-1",   "gke-ap-tokyo-2",   "eks-ap-singapore", "gke-ap-sydney",
    "onprem-tyo",       "eks-us-west-1",    "eks-us-west-2",    "gke-us-central-1",
    "gke-us-central-2", "eks-us-east-1",    "eks-us-east-2",    "gke-us-east-3",
    "onprem-sjc",       "onprem-iad",       "onprem-dfw",       "gke-eu-west-1",
    "gke-eu-west-2",    "eks-eu-central",   "onprem-fra",       "onprem-ams",
    NULL};
static const char *const regions[NCLUSTERS + 1] = {
    "ap-tokyo",   "ap-tokyo",   "ap-singapore", "ap-sydney",  "ap-tokyo",
    "us-west",    "us-west",    "us-central",   "us-central", "us-east",
    "us-east",    "us-east",    "us-west",      "us-east",    "us-central",
    "eu-west",    "eu-west",    "eu-central",   "eu-central", "eu-west",
    NULL};

static const char policy_text[] =
    "region_groups = (\n"
    "  { name = \"apac\"; regions = [\"ap-tokyo\", \"ap-singapore\", \"ap-sydney\"];\n"
    "    near = [\"us-west\", \"us\", \"eu\"]; },\n"
    "  { name = \"us\"; regions = [\"us-west\", \"us-central\", \"us-east\"];\n"
    "    near = [\"eu\", \"apac\"]; },\n"
    "  { name = \"eu\"; regions = [\"eu-west\", \"eu-central\"]; near = [\"us-east\", \"us\"]; }\n"
    ");\n"
    "spillover = { order = \"region_first\";\n"
    "  tiers = ( { name = \"onprem\"; clusters = [\"onprem-*\"]; },\n"
    "            { name = \"cloud\"; clusters = [\"gke-*\", \"eks-*\"]; } ); };\n"
    "latency_ceiling_ms = 300;\n"
    "max_state_age_ms = 10000;\n"
    "weights = { latency = 1.0; warm = 0.5; capacity = 0.5; cost = 0.5; };\n"
    "warm = { beats_cold = true; cold_start_s = 12.0; round_trips = 3; };\n"
    "clusters = ( { name = \"onprem-*\"; cold_start_s = 3.0; },\n"
    "             { name = \"gke-ap-sydney\"; latency_ceiling_ms = 400; } );\n"
    "rules = (\n"
    "  { name = \"eu-residency\"; labels = [\"data-residency=eu\"]; only_regions = \"eu\"; },\n"
    "  { name = \"gdpr-tenants\"; tenant = [\"eu-*\", \"gdpr-audit\"]; only_regions = \"eu\"; },\n"
    "  { name = \"rl-us-spread\"; tenant = \"rl\"; only_regions = \"us\"; split = \"spread\"; },\n"
    "  { name = \"gpu-on-prem\"; pool = \"gpu-*\"; pin = \"onprem-*\"; },\n"
    "  { name = \"eval-cloud-only\"; tenant = \"eval\"; deny = \"onprem-*\"; },\n"
    "  { name = \"maintenance\"; deny = [\"gke-us-central-2\", \"eks-eu-central\"]; },\n"
    "  { name = \"ops-sees-all\"; tenant = \"ops\"; labels = \"oncall\";\n"
    "    allow = [\"gke-us-central-2\", \"eks-eu-central\"]; }\n"
    ");\n";

static double now_s(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  char path[] = "/tmp/fr-policy-bench-XXXXXX";
  struct fr_cluster_state st[NCLUSTERS];
  struct fr_placement_request req[8];
  static const char *const eu_keys[] = {"team", "data-residency"};
  static const char *const eu_values[] = {"ml", "eu"};
  static const char *const oncall_keys[] = {"oncall"};
  static const char *const oncall_values[] = {"true"};
  struct fr_policy *p = NULL;
  struct fr_policy_error err;
  struct fr_policy_warning *warn = NULL;
  size_t nwarn = 0, i;
  long long n = 2000000, k;
  int64_t checksum = 0;
  double t0, dt, ns;
  int fd, rc;

  if (argc > 1) {
    int64_t v;
    if (fr_parse_int64(argv[1], 1, INT64_C(1000000000), &v) != 0) {
      fprintf(stderr, "usage: %s [decisions]\n", argv[0]);
      return 2;
    }
    n = (long long)v;
  }

  fd = mkstemp(path);
  if (fd < 0 || write(fd, policy_text, sizeof(policy_text) - 1) != (ssize_t)(sizeof(policy_text) - 1)) {
    perror("policy_bench: writing the policy");
    return 1;
  }
  close(fd);
  rc = fr_policy_load(path, names, regions, &p, &err, &warn, &nwarn);
  unlink(path);
  if (rc != 0) {
    fprintf(stderr, "policy_bench: %s:%d: %s\n", err.file, err.line, err.msg);
    return 1;
  }
  for (i = 0; i < nwarn; i++)
    fprintf(stderr, "policy_bench: warning: line %d: %s\n", warn[i].line, warn[i].msg);
  free(warn);

  /* A plausible snapshot: mixed capacity, some warm pools, one cluster
   * down, one stale, one slow. */
  for (i = 0; i < NCLUSTERS; i++) {
    memset(&st[i], 0, sizeof(st[i]));
    st[i].name = names[i];
    st[i].region = regions[i];
    st[i].healthy = 1;
    st[i].synced = 1;
    st[i].age_ms = 200 + 37.0 * (double)i;
    st[i].latency_ms = strncmp(regions[i], "ap-", 3) == 0   ? 140 + 9.0 * (double)i
                       : strncmp(regions[i], "eu-", 3) == 0 ? 75 + 2.0 * (double)i
                                                            : 4 + 3.0 * (double)i;
    st[i].free_slots = 500 + 173 * (int64_t)((i * 7) % 11);
    st[i].warm_ready = (i % 3 == 0) ? 20 + (int64_t)i : 0;
    st[i].cost_per_hour = strncmp(names[i], "onprem-", 7) == 0 ? 0 : 0.03 + 0.004 * (double)i;
  }
  st[6].healthy = 0;         /* eks-us-west-2: circuit open */
  st[16].age_ms = 60000;     /* gke-eu-west-2: stale */
  st[3].latency_ms = 350;    /* gke-ap-sydney: slow, but under its own 400 ms */
  st[2].latency_ms = 320;    /* eks-ap-singapore: over the 300 ms ceiling */

  memset(req, 0, sizeof(req));
  req[0] = (struct fr_placement_request){.tenant = "agents", .region = "ap-tokyo", .count = 1};
  req[1] = (struct fr_placement_request){.tenant = "rl", .region = "us-east", .count = 5000};
  req[2] = (struct fr_placement_request){.tenant = "ml", .region = "us-west", .count = 10,
                                         .label_keys = eu_keys, .label_values = eu_values,
                                         .nlabels = 2};
  req[3] = (struct fr_placement_request){.tenant = "eval", .region = "eu-west", .count = 1};
  req[4] = (struct fr_placement_request){.tenant = "rl", .pool = "gpu-a100",
                                         .region = "us-central", .count = 64};
  req[5] = (struct fr_placement_request){.tenant = "agents", .region = "sa-east", .count = 3};
  req[6] = (struct fr_placement_request){.tenant = "ops", .region = "us-central", .count = 2,
                                         .label_keys = oncall_keys, .label_values = oncall_values,
                                         .nlabels = 1};
  req[7] = (struct fr_placement_request){.tenant = "eu-research", .region = "eu-central",
                                         .pool = "python", .count = 200};

  /* Warm up caches and the allocator. */
  for (k = 0; k < 20000; k++) {
    struct fr_plan plan;
    if (fr_policy_plan(p, st, NCLUSTERS, &req[k % 8], &plan) != 0)
      return 1;
    fr_plan_free(&plan);
  }
  t0 = now_s();
  for (k = 0; k < n; k++) {
    struct fr_plan plan;
    if (fr_policy_plan(p, st, NCLUSTERS, &req[k % 8], &plan) != 0) {
      fprintf(stderr, "policy_bench: out of memory\n");
      return 1;
    }
    checksum += plan.planned + plan.entries[0].count;
    fr_plan_free(&plan);
  }
  dt = now_s() - t0;
  ns = dt * 1e9 / (double)n;
  printf("policy_bench: %d clusters, 7 rules, %lld decisions in %.3f s\n", NCLUSTERS, n, dt);
  printf("  %.0f ns/decision, %.0f decisions/s (target <= 5000 ns) %s\n", ns, (double)n / dt,
         ns <= 5000 ? "OK" : "OVER TARGET");
  printf("{\"benchmark\":\"policy_decision\",\"clusters\":%d,\"rules\":7,\"decisions\":%lld,"
         "\"ns_per_decision\":%.0f,\"decisions_per_s\":%.0f,\"checksum\":%lld}\n",
         NCLUSTERS, n, ns, (double)n / dt, (long long)checksum);
  fr_policy_unref(p);
  return 0;
}
