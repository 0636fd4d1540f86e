/* fr/policy.h - routing policy: a libconfig file parsed into an immutable,
 * reference-counted policy, and a pure placement function.
 *
 * Pure means: no I/O, no loop, no logging, no clock. fr_policy_plan() turns
 * (policy, snapshot of cluster states, request) into an ordered plan with a
 * count per cluster and a reason for every cluster considered or skipped.
 * The create path and POST /v1/placement/explain call the same function.
 *
 * The file format is documented in docs/policy.md, with worked examples
 * in the policy/examples/ folder.
 */
#ifndef FR_POLICY_H
#define FR_POLICY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct fr_policy;

struct fr_policy_error {
  char file[512];
  int line;               /* 0 when not tied to a line */
  char msg[512];          /* includes a did-you-mean where one helps */
};

/* Warnings do not stop loading (e.g. a rule that can never match). */
struct fr_policy_warning {
  int line;
  char msg[512];
};

/* Parses and validates <path>. <clusters> (NULL-terminated) are the names
 * the router knows, with <regions> their regions (same order): a policy
 * naming an unknown cluster or region is an error with a did-you-mean.
 * <clusters> may be NULL (then <regions> is ignored): names cannot be
 * checked and any name is accepted, and the warnings that need the
 * clusters (patterns matching nothing, rules that can never place) are not
 * given. On failure returns -EINVAL (a bad file: <err> says where and why:
 * its file and line are the first error's, its message tells that one and
 * then every later one as "; line N: ..."),
 * -ENOENT/-EACCES/-EIO (cannot read it) or -ENOMEM. <err> may be NULL.
 * On success returns 0 and a policy with one reference; warnings (if
 * <warnings> is non-NULL) are returned in a malloc'd array the caller frees,
 * with their count in <nwarnings>. Blocking file I/O: call off the loop. */
int fr_policy_load(const char *path, const char *const *clusters, const char *const *regions,
                   struct fr_policy **out, struct fr_policy_error *err,
                   struct fr_policy_warning **warnings, size_t *nwarnings);
/* `fedrouter policy check`: validates <path> like fr_policy_load() but goes
 * on after an error wherever the rest can still be checked (every unknown
 * key, every rule and cluster override, every section), and calls <cb> for
 * each error in the order found: its file, line (0: none) and message
 * ("<path>: <what>", as fr_policy_error's). A syntax error
 * stops libconfig: it is the one error then. Keeps no policy. Returns 0
 * when the file is valid, else the first error's code (as
 * fr_policy_load()); warnings as there. Blocking file I/O. */
int fr_policy_check(const char *path, const char *const *clusters, const char *const *regions,
                    void (*cb)(void *arg, const char *file, int line, const char *msg), void *arg,
                    struct fr_policy_warning **warnings, size_t *nwarnings);
/* The built-in policy used when the router config names no policy file:
 * client region first, then the others by latency; fill first; warm
 * preferred when the cold start would take longer than the latency
 * difference. Never fails except for out-of-memory (NULL). */
struct fr_policy *fr_policy_default(void);
struct fr_policy *fr_policy_ref(struct fr_policy *p);
void fr_policy_unref(struct fr_policy *p);   /* accepts NULL */
/* Source path ("(built-in)" for the default) and a content hash (SHA-256
 * hex of the file bytes, or of the built-in text). */
const char *fr_policy_source(const struct fr_policy *p);
const char *fr_policy_version(const struct fr_policy *p);
/* 1 when <name> is a region or a region group <p> knows (the regions of
 * the clusters it was loaded for and those its file names), else 0. */
int fr_policy_knows_region(const struct fr_policy *p, const char *name);

/* What the router knows about one cluster when it decides. */
struct fr_cluster_state {
  const char *name;
  const char *region;
  int healthy;             /* circuit breaker closed */
  int synced;              /* caches complete */
  double age_ms;           /* how old the capacity view is */
  double latency_ms;       /* API latency EWMA from the router */
  int64_t free_slots;      /* sandboxes of the request's shape that fit now,
                              after reservations of creates in flight */
  int64_t warm_ready;      /* ready warm pods of the request's pool */
  double cost_per_hour;    /* per sandbox of the request's shape; 0 if unknown */
  const char *unfit;       /* the cluster cannot host the request's pods at all (pod options it
                              lacks): a stable code such as "no_runtime_class"; NULL = it can */
  const char *unfit_detail;/* what it lacks, for the reason; may be NULL */
};

struct fr_placement_request {
  const char *tenant;
  const char *pool;        /* NULL if none */
  const char *region;      /* the client's region (already resolved) */
  const char *const *label_keys;   /* the request's labels */
  const char *const *label_values;
  size_t nlabels;
  const char *const *clusters;     /* restriction from the request, or NULL */
  size_t nclusters;
  int64_t count;           /* sandboxes wanted */
};

enum fr_plan_verdict {
  FR_PLAN_USE,             /* gets <count> sandboxes (possibly 0 when earlier ones suffice) */
  FR_PLAN_SKIP,            /* not usable; <reason> says why */
};

struct fr_plan_entry {
  size_t cluster;          /* index into the states array */
  enum fr_plan_verdict verdict;
  int64_t count;           /* sandboxes planned here */
  int64_t warm;            /* of which expected to be warm claims */
  int tier;                /* spillover tier (0 first) */
  double score;            /* higher is better; rank within a tier */
  double s_latency, s_warm, s_capacity, s_cost; /* weighted components */
  int first_choice;        /* USE: where the request goes when room is no object (the first of
                              the ranking, a spread's first group, warm pods that beat its cold
                              start); sandboxes placed elsewhere spilled */
  long cheaper_than;       /* cheaper_region ranked it first instead of this cluster (an index
                              into the states), else -1 */
  char reason[256];        /* "region apac (client region), tier onprem", "skipped: unhealthy", ... */
};

struct fr_plan {
  struct fr_plan_entry *entries;   /* every cluster: used ones first in order, then skipped */
  size_t nentries;
  int64_t planned;                 /* sum of counts */
  int64_t shortfall;               /* count - planned (0 when all fit) */
  const char *split;               /* "fill_first" or "spread" */
  char rules[256];                 /* names/indexes of the rules that matched, comma-separated */
};

/* The placement decision. Pure: same inputs, same plan. Returns 0 or
 * -ENOMEM (or -EINVAL for a NULL <p>, <req> or <out>, or a state without a
 * name). The plan owns its entries: fr_plan_free(). When every usable
 * cluster is full the plan still ranks them (counts 0) so a caller can try
 * them in order if the capacity view was stale. Everything is borrowed;
 * the plan points at nothing but its own entries (plan->split is a static
 * string), so it outlives <p>, <states> and <req>. Thread-safe: a policy
 * may be shared by any number of concurrent callers. Counts are clamped to
 * [0, 1e9]. */
int fr_policy_plan(const struct fr_policy *p, const struct fr_cluster_state *states, size_t n,
                   const struct fr_placement_request *req, struct fr_plan *out);
void fr_plan_free(struct fr_plan *plan);
/* The plan as JSON for /v1/placement/explain (cluster names from <states>,
 * the array the plan was made from): {"split", "planned", "shortfall",
 * "rules": [names], "clusters": [{"cluster", "verdict": "use"|"skip",
 * "count", "warm", "tier", "score", "scores": {"latency", "warm",
 * "capacity", "cost"}, "reason"}]} in plan order (docs/policy.md). A new
 * reference, or NULL when out of memory. */
json_t *fr_plan_json(const struct fr_plan *plan, const struct fr_cluster_state *states);

#endif
