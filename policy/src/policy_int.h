/* policy_int.h - the private layout of a policy snapshot, shared by the
 * loader (policy_load.c), the planner (policy_plan.c) and the small helpers
 * (policy_util.c). Nothing here is visible outside policy/.
 *
 * A policy is immutable once fr_policy_load() returns it. Everything the
 * planner needs per cluster that depends only on the cluster's name (its
 * tier, its overrides, which rule patterns name it) is precomputed at load
 * time for the clusters the router named ("known" clusters) and found at
 * plan time through a small hash table; a cluster the policy has never heard
 * of takes a slower path that matches the patterns then.
 */
#ifndef FR_POLICY_INT_H
#define FR_POLICY_INT_H

#include <stddef.h>
#include <stdint.h>

#include "fr/policy.h"

enum policy_split { SPLIT_FILL_FIRST = 0, SPLIT_SPREAD = 1 };
enum policy_order { ORDER_TIER_FIRST = 0, ORDER_REGION_FIRST = 1 };

/* Rank of a region that no nearness list names: after every listed one. */
#define NEAR_UNLISTED 1000000

/* Bits of struct facts.rule_bits[r]: which of rule r's cluster lists name
 * the cluster. */
#define RULE_PIN 1u
#define RULE_ALLOW 2u
#define RULE_DENY 4u

/* Cluster names or globs ("gke-*"; '*' and '?' only). */
struct patlist {
  char **pats;
  int *lines;            /* source line of each pattern (for messages) */
  size_t n;
};

struct region_group {
  char *name;
  int line;
  size_t *regions;       /* region ids */
  size_t nregions;
};

struct tier {
  char *name;
  int line;
  struct patlist clusters;
};

/* One entry of `clusters = ( ... )`: per-cluster overrides. */
struct override {
  char *pattern;
  int line;
  int has_cold_start, has_ceiling;
  double cold_start_ms;
  double ceiling_ms;
};

/* "key=value-glob" or just "key" (present with any value). */
struct label_cond {
  char *key;
  char *value;           /* NULL: the key only has to be present */
};

struct rule {
  char *name;            /* "eu-residency", or "rules.[3]" when unnamed */
  int line;
  struct patlist tenants, pools;   /* any of (globs); empty = any */
  struct label_cond *labels;       /* all of */
  size_t nlabels;
  int has_pin, has_allow, has_deny, has_only_regions;
  struct patlist pin, allow, deny;
  uint8_t *region_ok;    /* per region id: in only_regions (when has_only_regions) */
  size_t nregion_ok;     /* ids at or above are regions named after this rule: not in */
  int split;             /* enum policy_split, or -1 when the rule leaves it */
};

/* What the policy says about one cluster by name. */
struct facts {
  int tier;              /* index into tiers; ntiers = the implicit last tier */
  double cold_start_ms;
  double ceiling_ms;     /* 0 = no ceiling */
  const uint8_t *rule_bits;   /* nrules entries of RULE_* */
};

struct known_cluster {
  char *name;
  size_t region;         /* region id of the region the router gave */
  struct facts facts;
};

struct fr_policy {
  int refs;
  char *source;
  char version[65];

  int split;             /* enum policy_split */
  int order;             /* enum policy_order */
  double max_age_ms;
  double ceiling_ms;     /* 0 = no ceiling */
  double w_latency, w_warm, w_capacity, w_cost;
  double latency_ref_ms, cost_ref;
  int beats_cold;
  double cold_start_ms;
  double round_trips;
  /* cheaper_region: a cluster of another region (same tier) ranks first
   * when it costs more than <cheaper_saving> (a fraction) less per
   * sandbox-hour than the cluster that would otherwise, and its latency is
   * at most <cheaper_max_ms>. */
  int cheaper;
  double cheaper_saving, cheaper_max_ms;

  /* Every region the policy knows: the router's and those the file names. */
  char **regions;
  size_t nregions;
  int *region_group;     /* per region id: group index or -1 */

  struct region_group *groups;
  size_t ngroups;
  int *near_rank;        /* [group * near_stride + region]: 0 none, k = k-th near entry */
  size_t near_stride;    /* regions known when the near lists were read */

  struct tier *tiers;
  size_t ntiers;

  struct override *overrides;
  size_t noverrides;

  struct rule *rules;
  size_t nrules;

  struct known_cluster *known;
  size_t nknown;
  uint8_t *known_bits;   /* nknown * nrules */
  uint32_t *hash;        /* open addressing: known index + 1, 0 = empty */
  size_t hash_mask;
};

/* Where a cluster stands after the rules that matched a request. Pin and
 * only_regions are restrictions nothing undoes (data residency must not be
 * widened by a later rule); a deny is undone by a later allow. */
enum eligibility { ELIG_OK = 0, ELIG_DENIED, ELIG_NOT_PINNED, ELIG_REGION };

/* Applies rule <r> (index <ri>) to a cluster with rule bits <bits> whose
 * region has id <region> (-1, or beyond the policy's table, when the policy
 * does not know it). Within one rule: pin, only_regions, deny, then allow.
 * <*by> receives the rule that set the current state. */
static inline void policy_rule_apply(const struct rule *r, size_t ri, uint8_t bits, long region,
                                     int *state, size_t *by) {
  if (*state == ELIG_NOT_PINNED || *state == ELIG_REGION)
    return;
  if (r->has_pin && !(bits & RULE_PIN)) {
    *state = ELIG_NOT_PINNED;
    *by = ri;
    return;
  }
  if (r->has_only_regions &&
      !(region >= 0 && (size_t)region < r->nregion_ok && r->region_ok[region])) {
    *state = ELIG_REGION;
    *by = ri;
    return;
  }
  if (r->has_deny && (bits & RULE_DENY) && *state == ELIG_OK) {
    *state = ELIG_DENIED;
    *by = ri;
  }
  if (r->has_allow && (bits & RULE_ALLOW) && *state == ELIG_DENIED)
    *state = ELIG_OK;
}

/* ---- policy_util.c ---- */

/* Shell-style match of <s> against <pat> with '*' (any run) and '?' (one
 * character). No character classes: cluster names do not need them. */
int policy_glob_match(const char *pat, const char *s);
int policy_is_glob(const char *pat);
int policy_patlist_match(const struct patlist *pl, const char *s);
/* Levenshtein distance; SIZE_MAX for strings of 64 bytes or more. */
uint64_t policy_hash(const char *s);

/* The known cluster called <name>, or NULL. */
const struct known_cluster *policy_find_known(const struct fr_policy *p, const char *name);
/* Region id of <name>, or -1. */
long policy_region_id(const struct fr_policy *p, const char *name);
/* Fills <f> for a cluster called <name>; <bits> receives nrules entries. */
void policy_compute_facts(const struct fr_policy *p, const char *name, struct facts *f,
                          uint8_t *bits);
void policy_free(struct fr_policy *p);

#endif
