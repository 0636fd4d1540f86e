/* policy_plan.c - the placement decision: (policy, cluster states, request)
 * -> ordered plan. Pure: no I/O, no clock, no logging, no globals; the same
 * inputs always give the same plan (ties fall to names).
 *
 * Steps (docs/policy.md says the same for operators):
 *   1. the rules that match the request (tenant, pool, labels) restrict the
 *      clusters (pin, only_regions, deny/allow) and may change the split;
 *   2. clusters filtered away, unhealthy, unsynced or with a stale view are
 *      skipped with their reason; clusters over their latency ceiling are
 *      held back as a last resort;
 *   3. the others are ranked: tier and proximity to the client (client
 *      region, its group, the group's near list, the rest), the region's
 *      measured latency, then the weighted score, latency and name;
 *   4. the count is split over the ranking (fill_first, with warm pods
 *      allowed to jump ahead of cold starts, or spread by free capacity),
 *      and over the last-resort clusters only if the others cannot take it.
 * The decision is O(n^2) in the number of clusters with small constants:
 * about 2.5 us for 20 clusters and seven rules (loadtest/policy_bench.c).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy_int.h"

/* Counts are clamped to this so that count * capacity fits in int64 in the
 * proportional split (one cluster tops out around 50k sandboxes). */
#define MAX_UNITS INT64_C(1000000000)

struct cand {
  size_t idx;            /* into the states */
  long region;           /* region id; ids >= nregions are this plan's unknown regions */
  const char *region_name;
  int tier, prox, sub, last_resort;
  double region_lat;     /* lowest latency among candidates of the region */
  double lat, cold_ms, ceiling_ms;
  int64_t free, warm, avail;
  double sl, sw, sc, scost, score;
  int64_t count, wcount;
  long seq;              /* order of first allocation, -1 while unused */
  int warm_taken;
  long beat;             /* candidate whose cold start its warm pods beat, or -1 */
  int spread;            /* placed by a proportional split */
  int extra;             /* got one unit of the split's remainder */
  int cheap;             /* cheaper_region moved it up to the preferred cluster's place */
  long cheaper_than;     /* then: that cluster's candidate index, else -1 */
  int prox0, sub0;       /* its own proximity, for its reason, when moved */
  double cost;           /* cost per sandbox-hour, 0 = unknown */
};

struct planner {
  const struct fr_policy *p;
  const struct fr_cluster_state *st;
  size_t n;              /* states */
  const struct fr_placement_request *req;
  int split;
  long client_region;    /* region id, or -1 */
  long client_group;     /* group index, or -1 */
  struct cand *c;
  size_t nc;
  size_t *ord;
  int64_t remaining;
  long seq;
  /* Scratch of one decision, one block starting at <tmp> (planner_alloc). */
  struct fr_plan_entry *tmp; /* per state, by index: its entry while the plan forms */
  long *cand_of;         /* per state: its candidate; -1 skipped, -2 last resort not needed */
  uint8_t *matched;      /* per rule: it matches the request */
  uint8_t *bits;         /* per state and rule: facts of clusters the policy does not know */
};

/* ---- a bounded string builder (reasons are built on every decision, so
 * no printf: it would dominate the decision time) ---- */

struct sb {
  char *buf;
  size_t len, cap;       /* cap includes the NUL */
};

static void sb_str(struct sb *b, const char *s) {
  size_t n = strlen(s), room = b->cap - 1 - b->len;

  if (n > room)
    n = room;
  memcpy(b->buf + b->len, s, n);
  b->len += n;
  b->buf[b->len] = '\0';
}

static void sb_int(struct sb *b, int64_t v) {
  char tmp[24];
  size_t n = 0;
  uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  char out[26];
  size_t k = 0;

  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (v < 0)
    out[k++] = '-';
  while (n > 0)
    out[k++] = tmp[--n];
  out[k] = '\0';
  sb_str(b, out);
}

/* Milliseconds, rounded. */
static void sb_ms(struct sb *b, double ms) {
  sb_int(b, ms >= 9.2e15 ? INT64_C(9200000000000000) : (int64_t)llround(ms));
  sb_str(b, " ms");
}

/* Seconds with one decimal. */
static void sb_s1(struct sb *b, double ms) {
  int64_t tenths = (int64_t)llround(ms / 100.0);
  char d[2] = {(char)('0' + tenths % 10), '\0'};

  sb_int(b, tenths / 10);
  sb_str(b, ".");
  sb_str(b, d);
  sb_str(b, " s");
}

/* Dollars with four decimals: "$0.0500". */
static void sb_money(struct sb *b, double v) {
  int64_t c = (int64_t)llround(v * 10000.0);
  char d[5];
  int i;

  for (i = 3; i >= 0; i--) {
    d[i] = (char)('0' + (c % 10 + 10) % 10);
    c /= 10;
  }
  d[4] = '\0';
  sb_str(b, "$");
  sb_int(b, (int64_t)llround(v * 10000.0) / 10000);
  sb_str(b, ".");
  sb_str(b, d);
}

static void sb_rule(struct sb *b, const struct rule *r) {
  sb_str(b, "rule ");
  sb_str(b, r->name);
  sb_str(b, " (line ");
  sb_int(b, r->line);
  sb_str(b, ")");
}

/* ---- request matching ---- */

static int rule_matches(const struct rule *r, const struct fr_placement_request *req) {
  size_t i, j;

  if (r->tenants.n > 0 && (req->tenant == NULL || !policy_patlist_match(&r->tenants, req->tenant)))
    return 0;
  if (r->pools.n > 0 && (req->pool == NULL || !policy_patlist_match(&r->pools, req->pool)))
    return 0;
  for (i = 0; i < r->nlabels; i++) {
    const struct label_cond *c = &r->labels[i];
    int found = 0;
    for (j = 0; j < req->nlabels && !found; j++)
      found = req->label_keys[j] != NULL && strcmp(req->label_keys[j], c->key) == 0 &&
              (c->value == NULL ||
               (req->label_values[j] != NULL && policy_glob_match(c->value, req->label_values[j])));
    if (!found)
      return 0;
  }
  return 1;
}

static int in_request_list(const struct fr_placement_request *req, const char *name) {
  size_t i;

  for (i = 0; i < req->nclusters; i++)
    if (req->clusters[i] != NULL && strcmp(req->clusters[i], name) == 0)
      return 1;
  return 0;
}

static int64_t clamp_units(int64_t v) {
  return v < 0 ? 0 : (v > MAX_UNITS ? MAX_UNITS : v);
}

/* ---- ranking ---- */

static int cmp_int(long a, long b) {
  return a < b ? -1 : (a > b ? 1 : 0);
}

static int cand_cmp(const struct planner *x, const struct cand *a, const struct cand *b) {
  int d;

  if ((d = cmp_int(a->last_resort, b->last_resort)) != 0)
    return d;
  if (x->p->order == ORDER_TIER_FIRST) {
    if ((d = cmp_int(a->tier, b->tier)) != 0 || (d = cmp_int(a->prox, b->prox)) != 0 ||
        (d = cmp_int(a->sub, b->sub)) != 0)
      return d;
  } else {
    /* The region group comes first, then the tiers within it, then the
     * client's own region before its group-mates. */
    if ((d = cmp_int(a->prox, b->prox)) != 0 || (d = cmp_int(a->tier, b->tier)) != 0 ||
        (d = cmp_int(a->sub, b->sub)) != 0)
      return d;
  }
  /* cheaper_region: the clusters it moved up come first, cheapest first. */
  if ((d = cmp_int(b->cheap, a->cheap)) != 0)
    return d;
  if (a->cheap && a->cost != b->cost)
    return a->cost < b->cost ? -1 : 1;
  /* Equally near regions: the one measured faster first. */
  if (a->region != b->region) {
    if (a->region_lat != b->region_lat)
      return a->region_lat < b->region_lat ? -1 : 1;
    if ((d = strcmp(a->region_name != NULL ? a->region_name : "",
                    b->region_name != NULL ? b->region_name : "")) != 0)
      return d;
  }
  if (a->score != b->score)
    return a->score > b->score ? -1 : 1;
  if (a->lat != b->lat)
    return a->lat < b->lat ? -1 : 1;
  if ((d = strcmp(x->st[a->idx].name, x->st[b->idx].name)) != 0)
    return d;
  return cmp_int((long)a->idx, (long)b->idx);
}

/* Insertion sort: n is tens of clusters, and it is stable and allocation-free. */
static void rank(struct planner *x) {
  size_t i, j;

  for (i = 0; i < x->nc; i++)
    x->ord[i] = i;
  for (i = 1; i < x->nc; i++) {
    size_t v = x->ord[i];
    for (j = i; j > 0 && cand_cmp(x, &x->c[v], &x->c[x->ord[j - 1]]) < 0; j--)
      x->ord[j] = x->ord[j - 1];
    x->ord[j] = v;
  }
}

/* ---- allocation ---- */

static void give(struct planner *x, struct cand *c, int64_t n, int warm) {
  if (n <= 0)
    return;
  c->count += n;
  if (warm)
    c->wcount += n;
  x->remaining -= n;
  if (c->seq < 0)
    c->seq = x->seq++;
}

static void take_warm(struct planner *x, struct cand *c) {
  int64_t n = c->warm < x->remaining ? c->warm : x->remaining;

  c->warm_taken = 1;
  give(x, c, n, 1);
}

/* Best first: each cluster's warm pods, then its cold slots. With
 * warm.beats_cold, before cluster A's cold slots come the warm pods of any
 * later cluster B of the same tier for which
 *     cold_start_ms(A) > round_trips * (latency_ms(B) - latency_ms(A)),
 * i.e. a warm claim in B is ready sooner than a cold start in A even after
 * paying B's extra latency <round_trips> times. */
static void fill_first(struct planner *x, const size_t *ord, size_t m) {
  const struct fr_policy *p = x->p;
  size_t a, b;

  for (a = 0; a < m && x->remaining > 0; a++) {
    struct cand *A = &x->c[ord[a]];
    int64_t n;

    if (!A->warm_taken)
      take_warm(x, A);
    if (p->beats_cold && A->free > 0 && x->remaining > 0) {
      for (b = a + 1; b < m && x->remaining > 0; b++) {
        struct cand *B = &x->c[ord[b]];
        if (B->warm_taken || B->warm == 0 || B->tier != A->tier)
          continue;
        if (A->cold_ms > p->round_trips * (B->lat - A->lat)) {
          int64_t before = B->count;
          take_warm(x, B);
          if (B->count > before)
            B->beat = (long)ord[a];
        }
      }
    }
    n = A->free < x->remaining ? A->free : x->remaining;
    give(x, A, n, 0);
  }
}

/* Group by group (same tier and proximity), in ranking order: a group that
 * cannot take the rest gives each member all it has; otherwise the rest is
 * split in proportion to free capacity (free slots + warm pods), with the
 * remainder of the integer division going to the largest fractions (ties to
 * the better ranked). */
static void spread(struct planner *x, const size_t *ord, size_t m) {
  size_t i, j;
  uint8_t done_stack[64];
  uint8_t *done = m <= sizeof(done_stack) ? done_stack : calloc(m, 1);

  if (done == NULL) {
    fill_first(x, ord, m); /* out of memory: degrade, do not fail */
    return;
  }
  memset(done, 0, m);
  for (i = 0; i < m && x->remaining > 0; i++) {
    const struct cand *head = &x->c[ord[i]];
    int64_t total = 0, want, given = 0;

    if (done[i])
      continue;
    for (j = i; j < m; j++) {
      const struct cand *c = &x->c[ord[j]];
      if (!done[j] && c->tier == head->tier && c->prox == head->prox)
        total += c->avail;
    }
    want = x->remaining;
    for (j = i; j < m; j++) {
      struct cand *c = &x->c[ord[j]];
      int64_t n;
      if (done[j] || c->tier != head->tier || c->prox != head->prox)
        continue;
      n = want >= total ? c->avail : (total > 0 ? want * c->avail / total : 0);
      c->count = n; /* the warm part is settled below */
      given += n;
    }
    /* Largest remainders: at most (members - 1) more units. */
    while (want < total && given < want) {
      size_t best = m;
      int64_t best_frac = -1;
      for (j = i; j < m; j++) {
        const struct cand *c = &x->c[ord[j]];
        int64_t frac;
        if (done[j] || c->tier != head->tier || c->prox != head->prox || c->count >= c->avail ||
            c->extra)
          continue;
        frac = (want * c->avail) % total;
        if (frac > best_frac) {
          best_frac = frac;
          best = j;
        }
      }
      if (best == m)
        break;
      x->c[ord[best]].count++;
      x->c[ord[best]].extra = 1; /* one extra unit each, at most */
      given++;
    }
    for (j = i; j < m; j++) {
      struct cand *c = &x->c[ord[j]];
      int64_t n;
      if (done[j] || c->tier != head->tier || c->prox != head->prox)
        continue;
      done[j] = 1;
      n = c->count;
      c->count = 0;
      c->spread = 1;
      c->warm_taken = 1;
      if (n > 0) {
        int64_t w = n < c->warm ? n : c->warm;
        give(x, c, w, 1);
        give(x, c, n - w, 0);
      }
    }
  }
  if (done != done_stack)
    free(done);
}

static void allocate(struct planner *x, const size_t *ord, size_t m) {
  if (x->split == SPLIT_SPREAD)
    spread(x, ord, m);
  else
    fill_first(x, ord, m);
}

/* ---- reasons ---- */

static void use_reason(const struct planner *x, const struct cand *c, struct sb *b) {
  const struct fr_policy *p = x->p;
  const struct fr_placement_request *req = x->req;
  int prox = c->cheap ? c->prox0 : c->prox, sub = c->cheap ? c->sub0 : c->sub;

  sb_str(b, "region ");
  sb_str(b, c->region_name != NULL ? c->region_name : "(none)");
  if (req->region == NULL || req->region[0] == '\0') {
    sb_str(b, " (client region unknown)");
  } else if (prox == 0 && sub == 0) {
    sb_str(b, " (client region)");
  } else if (prox == 0) {
    sb_str(b, " (client's group ");
    sb_str(b, p->groups[x->client_group].name);
    sb_str(b, ")");
  } else if (prox < NEAR_UNLISTED) {
    sb_str(b, " (near ");
    sb_str(b, p->groups[x->client_group].name);
    sb_str(b, " #");
    sb_int(b, prox);
    sb_str(b, ")");
  } else {
    sb_str(b, " (other region)");
  }
  if (p->ntiers > 0) {
    if ((size_t)c->tier < p->ntiers) {
      sb_str(b, ", tier ");
      sb_str(b, p->tiers[c->tier].name);
    } else {
      sb_str(b, ", no tier (last)");
    }
  }
  if (c->last_resort) {
    sb_str(b, ", over the ");
    sb_ms(b, c->ceiling_ms);
    sb_str(b, " latency ceiling (");
    sb_ms(b, c->lat);
    sb_str(b, ") but no other cluster can take the request");
  }
  if (c->cheap) {
    const struct cand *o = &x->c[c->cheaper_than];
    sb_str(b, ", cheaper region: ");
    sb_money(b, c->cost);
    sb_str(b, "/h vs ");
    sb_money(b, o->cost);
    sb_str(b, "/h in ");
    sb_str(b, x->st[o->idx].name);
    sb_str(b, " (");
    sb_int(b, (int64_t)llround(100.0 * (1.0 - c->cost / o->cost)));
    sb_str(b, "% less, over ");
    sb_int(b, (int64_t)llround(100.0 * p->cheaper_saving));
    sb_str(b, "%; latency ");
    sb_ms(b, c->lat);
    sb_str(b, " within ");
    sb_ms(b, p->cheaper_max_ms);
    sb_str(b, ")");
  }
  sb_str(b, ": ");
  sb_int(b, c->free);
  sb_str(b, " free + ");
  sb_int(b, c->warm);
  sb_str(b, " warm");
  if (c->avail == 0) {
    sb_str(b, ", full");
  } else if (c->count == 0) {
    sb_str(b, ", not needed");
  } else if (c->beat >= 0) {
    sb_str(b, ", warm beats a ");
    sb_s1(b, x->c[c->beat].cold_ms);
    sb_str(b, " cold start in ");
    sb_str(b, x->st[x->c[c->beat].idx].name);
  } else if (c->spread) {
    sb_str(b, ", spread by capacity");
  }
}

static const char *verdict_name(enum fr_plan_verdict v) {
  return v == FR_PLAN_USE ? "use" : "skip";
}

static void fill_entry(struct fr_plan_entry *e, size_t idx, int tier) {
  memset(e, 0, sizeof(*e));
  e->cluster = idx;
  e->cheaper_than = -1;
  e->verdict = FR_PLAN_SKIP;
  e->tier = tier;
}

/* ---- the decision ---- */

/* The scratch of one decision, in one block (freed with x->tmp), plus the
 * entries the caller gets in <*entries> (NULL when there are no states). */
static int planner_alloc(struct planner *x, struct fr_plan_entry **entries) {
  size_t n = x->n, nrules = x->p->nrules;
  size_t sz = n * sizeof(struct fr_plan_entry) + n * sizeof(struct cand) + n * sizeof(size_t) +
              n * sizeof(long) + nrules + n * nrules + 16;
  char *blk = malloc(sz);

  *entries = NULL;
  if (blk == NULL)
    return -ENOMEM;
  x->tmp = (struct fr_plan_entry *)blk;
  x->c = (struct cand *)(x->tmp + n);
  x->ord = (size_t *)(x->c + n);
  x->cand_of = (long *)(x->ord + n);
  x->matched = (uint8_t *)(x->cand_of + n);
  x->bits = x->matched + nrules;
  if (n > 0 && (*entries = malloc(n * sizeof(**entries))) == NULL) {
    free(x->tmp);
    return -ENOMEM;
  }
  return 0;
}

static void sb_reset(struct sb *b, char *buf, size_t cap) {
  b->buf = buf;
  b->cap = cap;
  b->len = 0;
  buf[0] = '\0';
}

/* 1. The rules that match the request: their names go to out->rules, the
 * last one that sets a split decides it. */
static void match_rules(struct planner *x, struct fr_plan *out) {
  const struct fr_policy *p = x->p;
  struct sb sb;
  size_t r;

  x->split = p->split;
  sb_reset(&sb, out->rules, sizeof(out->rules));
  for (r = 0; r < p->nrules; r++) {
    x->matched[r] = (uint8_t)rule_matches(&p->rules[r], x->req);
    if (!x->matched[r])
      continue;
    if (p->rules[r].split >= 0)
      x->split = p->rules[r].split;
    if (sb.len > 0)
      sb_str(&sb, ",");
    sb_str(&sb, p->rules[r].name);
  }
  out->split = x->split == SPLIT_SPREAD ? "spread" : "fill_first";
}

/* The client's region, or a group named like it ("apac"). */
static void locate_client(struct planner *x) {
  const struct fr_policy *p = x->p;
  const char *region = x->req->region;
  size_t k;

  x->client_region = policy_region_id(p, region);
  x->client_group = x->client_region >= 0 ? p->region_group[x->client_region] : -1;
  if (x->client_group < 0 && region != NULL)
    for (k = 0; k < p->ngroups; k++)
      if (strcmp(p->groups[k].name, region) == 0)
        x->client_group = (long)k;
}

/* 2. Whether state <i> is filtered away, unhealthy, unsynced or stale: the
 * reason goes to <sb> and the answer is 1; 0 keeps it. */
static int skipped(const struct planner *x, size_t i, const struct facts *f, long region, struct sb *sb) {
  const struct fr_policy *p = x->p;
  const struct fr_cluster_state *s = &x->st[i];
  int st = ELIG_OK;
  size_t r, by = 0;

  if (x->req->clusters != NULL && !in_request_list(x->req, s->name)) {
    sb_str(sb, "skipped: not in the request's cluster list");
    return 1;
  }
  for (r = 0; r < p->nrules; r++)
    if (x->matched[r])
      policy_rule_apply(&p->rules[r], r, f->rule_bits[r], region, &st, &by);
  if (st == ELIG_NOT_PINNED) {
    sb_str(sb, "skipped: not pinned by ");
    sb_rule(sb, &p->rules[by]);
    return 1;
  }
  if (st == ELIG_REGION) {
    sb_str(sb, "skipped: region ");
    sb_str(sb, s->region != NULL ? s->region : "(none)");
    sb_str(sb, " is not in only_regions of ");
    sb_rule(sb, &p->rules[by]);
    return 1;
  }
  if (st == ELIG_DENIED) {
    sb_str(sb, "skipped: denied by ");
    sb_rule(sb, &p->rules[by]);
    return 1;
  }
  if (!s->healthy) {
    sb_str(sb, "skipped: unhealthy (circuit breaker open)");
    return 1;
  }
  if (!s->synced) {
    sb_str(sb, "skipped: not synced (capacity unknown until its caches are complete)");
    return 1;
  }
  if (s->unfit != NULL) {
    sb_str(sb, "skipped: ");
    sb_str(sb, s->unfit);
    if (s->unfit_detail != NULL && *s->unfit_detail != '\0') {
      sb_str(sb, " (");
      sb_str(sb, s->unfit_detail);
      sb_str(sb, ")");
    }
    return 1;
  }
  if (!(s->age_ms <= p->max_age_ms)) { /* NaN counts as stale too */
    sb_str(sb, "skipped: stale, capacity view ");
    if (isfinite(s->age_ms)) {
      sb_ms(sb, s->age_ms);
      sb_str(sb, " old");
    } else {
      sb_str(sb, "of unknown age");
    }
    sb_str(sb, " (max ");
    sb_ms(sb, p->max_age_ms);
    sb_str(sb, "): unknown, not free");
    return 1;
  }
  return 0;
}

/* 2. State <i> becomes the next candidate, with its proximity to the
 * client (tier 0 same region, 0/1 same group, the group's near rank, or
 * unlisted). */
static void add_candidate(struct planner *x, size_t i, const struct facts *f, long region) {
  const struct fr_policy *p = x->p;
  const struct fr_cluster_state *s = &x->st[i];
  const char *client = x->req->region;
  struct cand *c = &x->c[x->nc];

  memset(c, 0, sizeof(*c));
  c->idx = i;
  c->region = region;
  c->region_name = s->region;
  c->tier = f->tier;
  c->lat = isfinite(s->latency_ms) && s->latency_ms > 0 ? s->latency_ms : 0;
  c->cold_ms = f->cold_start_ms;
  c->ceiling_ms = f->ceiling_ms;
  c->last_resort = f->ceiling_ms > 0 && c->lat > f->ceiling_ms;
  c->free = clamp_units(s->free_slots);
  c->warm = clamp_units(s->warm_ready);
  c->avail = c->free + c->warm;
  c->seq = -1;
  c->beat = -1;
  c->cheaper_than = -1;
  c->cost = isfinite(s->cost_per_hour) && s->cost_per_hour > 0 ? s->cost_per_hour : 0;
  if (x->client_region >= 0 ? region == x->client_region
                            : (client != NULL && s->region != NULL && strcmp(client, s->region) == 0)) {
    c->prox = 0;
    c->sub = 0;
  } else if (x->client_group >= 0 && region >= 0 && (size_t)region < p->nregions &&
             p->region_group[region] == x->client_group) {
    c->prox = 0;
    c->sub = 1;
  } else if (x->client_group >= 0 && region >= 0 && (size_t)region < p->near_stride &&
             p->near_rank[(size_t)x->client_group * p->near_stride + (size_t)region] > 0) {
    c->prox = p->near_rank[(size_t)x->client_group * p->near_stride + (size_t)region];
  } else {
    c->prox = NEAR_UNLISTED;
  }
  x->cand_of[i] = (long)x->nc;
  x->nc++;
}

/* 2. Every state: its entry (a skip with its reason until step 4 uses
 * it) and, when it passes the filters, a candidate. */
static void filter(struct planner *x) {
  const struct fr_policy *p = x->p;
  size_t i;

  for (i = 0; i < x->n; i++) {
    const struct fr_cluster_state *s = &x->st[i];
    const struct known_cluster *kc = policy_find_known(p, s->name);
    struct fr_plan_entry *e = &x->tmp[i];
    struct facts f;
    struct sb sb;
    long region;

    x->cand_of[i] = -1;
    if (kc != NULL) {
      f = kc->facts;
      region = s->region != NULL && strcmp(p->regions[kc->region], s->region) == 0
                   ? (long)kc->region
                   : policy_region_id(p, s->region);
    } else {
      policy_compute_facts(p, s->name, &f, x->bits + i * p->nrules);
      region = policy_region_id(p, s->region);
    }
    fill_entry(e, i, f.tier);
    sb_reset(&sb, e->reason, sizeof(e->reason));
    if (!skipped(x, i, &f, region, &sb))
      add_candidate(x, i, &f, region);
  }
}

/* Regions the policy does not know get ids of their own for this plan. */
static void number_unknown_regions(struct planner *x) {
  size_t i, j;

  for (i = 0; i < x->nc; i++) {
    struct cand *c = &x->c[i];
    if (c->region >= 0 || c->region_name == NULL)
      continue;
    c->region = (long)(x->p->nregions + i);
    for (j = 0; j < i; j++)
      if (x->c[j].region >= (long)x->p->nregions && x->c[j].region_name != NULL &&
          strcmp(x->c[j].region_name, c->region_name) == 0) {
        c->region = x->c[j].region;
        break;
      }
  }
}

/* 3. Scores. Each term is in [0, 1] before its weight:
 *   latency  = ref / (ref + latency_ms)
 *   warm     = min(warm_ready, count) / count
 *   capacity = avail / (avail + count)          (avail = free + warm)
 *   cost     = cref / (cref + cost_per_hour), 0.5 when the cost is unknown
 * and each candidate's region latency is the lowest of its region's. */
static void score(struct planner *x, int64_t count) {
  const struct fr_policy *p = x->p;
  double cnt = count > 0 ? (double)count : 1.0;
  size_t i, j;

  for (i = 0; i < x->nc; i++) {
    struct cand *c = &x->c[i];
    const struct fr_cluster_state *s = &x->st[c->idx];
    double w = (double)(c->warm < (int64_t)cnt ? c->warm : (int64_t)cnt);
    double cost = isfinite(s->cost_per_hour) && s->cost_per_hour > 0 ? s->cost_per_hour : 0;

    c->sl = p->w_latency * (p->latency_ref_ms / (p->latency_ref_ms + c->lat));
    c->sw = p->w_warm * (w / cnt);
    c->sc = p->w_capacity * ((double)c->avail / ((double)c->avail + cnt));
    c->scost = p->w_cost * (cost > 0 ? p->cost_ref / (p->cost_ref + cost) : 0.5);
    c->score = c->sl + c->sw + c->sc + c->scost;
    c->region_lat = c->lat;
  }
  for (i = 0; i < x->nc; i++)
    for (j = 0; j < x->nc; j++)
      if (x->c[j].region == x->c[i].region && x->c[j].region_lat < x->c[i].region_lat)
        x->c[i].region_lat = x->c[j].region_lat;
}

/* 3b. cheaper_region: with the ranking made, P is the cluster that would
 * come first. A cluster B of another region and the same tier, within its
 * ceiling and within cheaper_region.max_latency_ms, whose price per
 * sandbox-hour is more than min_saving below P's, takes P's place in the
 * proximity order (cheapest first), and the ranking is made again. Prices
 * must be known on both sides: an unknown price is never "cheaper". */
static void cheaper_region(struct planner *x) {
  const struct fr_policy *p = x->p;
  const struct cand *top = NULL;
  size_t i, moved = 0;
  long pi = -1;

  if (!p->cheaper || x->nc < 2)
    return;
  for (i = 0; i < x->nc && top == NULL; i++)
    if (!x->c[x->ord[i]].last_resort) {
      top = &x->c[x->ord[i]];
      pi = (long)x->ord[i];
    }
  if (top == NULL || top->cost <= 0)
    return;
  for (i = 0; i < x->nc; i++) {
    struct cand *c = &x->c[i];
    if (c == top || c->last_resort || c->tier != top->tier || c->region == top->region || c->cost <= 0 ||
        c->lat > p->cheaper_max_ms || !(c->cost < top->cost * (1.0 - p->cheaper_saving)))
      continue;
    c->cheap = 1;
    c->cheaper_than = pi;
    c->prox0 = c->prox;
    c->sub0 = c->sub;
    c->prox = top->prox;
    c->sub = top->sub;
    moved++;
  }
  if (moved > 0)
    rank(x);
}

/* The clusters a request goes to when room is no object: the first of the
 * ranking (within the ceilings when any is), the whole first group (tier
 * and proximity) of a spread, and the clusters whose warm pods beat its cold
 * start. A sandbox placed anywhere else spilled (fr_plan_entry). */
static int first_choice(const struct planner *x, const struct cand *c) {
  const struct cand *top = NULL;
  size_t i;

  for (i = 0; i < x->nc && top == NULL; i++)
    if (!x->c[x->ord[i]].last_resort)
      top = &x->c[x->ord[i]];
  if (top == NULL && x->nc > 0)
    top = &x->c[x->ord[0]]; /* only last-resort clusters */
  if (top == NULL)
    return 0;
  if (c == top || c->beat >= 0)
    return 1;
  return x->split == SPLIT_SPREAD && !c->last_resort && c->tier == top->tier && c->prox == top->prox &&
         c->cheap == top->cheap;
}

/* 4. Split <count> over the ranked clusters within their ceilings, then
 * the others if needed. Returns how many ranked candidates the plan may
 * list as usable: all of them when the last-resort ones were needed. */
static size_t split_count(struct planner *x, int64_t count) {
  size_t normal;

  x->remaining = count;
  for (normal = 0; normal < x->nc && !x->c[x->ord[normal]].last_resort; normal++)
    ;
  allocate(x, x->ord, normal);
  if (x->remaining > 0 && normal < x->nc) {
    allocate(x, x->ord + normal, x->nc - normal);
    return x->nc;
  }
  return normal;
}

/* The plan's entries into <entries>: used (in order of use), unused with
 * room, full (both by rank among the first <limit>), skipped (by name).
 * Returns how many. */
static size_t order_entries(struct planner *x, size_t limit, struct fr_plan_entry *entries) {
  size_t i, j, k, nout = 0, first;
  struct sb sb;
  long s;
  int pass;

  for (s = 0; s < x->seq; s++)
    for (i = 0; i < x->nc; i++)
      if (x->c[i].seq == s) {
        entries[nout++] = x->tmp[x->c[i].idx];
        break;
      }
  for (pass = 0; pass < 2; pass++)
    for (i = 0; i < limit; i++) {
      const struct cand *c = &x->c[x->ord[i]];
      if (c->count == 0 && ((pass == 0) == (c->avail > 0)))
        entries[nout++] = x->tmp[c->idx];
    }
  /* Fill in the USE entries in place. */
  for (k = 0; k < nout; k++) {
    struct fr_plan_entry *e = &entries[k];
    const struct cand *c = &x->c[x->cand_of[e->cluster]];
    e->verdict = FR_PLAN_USE;
    e->count = c->count;
    e->warm = c->wcount;
    e->score = c->score;
    e->s_latency = c->sl;
    e->s_warm = c->sw;
    e->s_capacity = c->sc;
    e->s_cost = c->scost;
    e->first_choice = first_choice(x, c);
    e->cheaper_than = c->cheap ? (long)x->c[c->cheaper_than].idx : -1;
    sb_reset(&sb, e->reason, sizeof(e->reason));
    use_reason(x, c, &sb);
  }
  /* Last-resort clusters that were not needed are skipped. */
  for (i = limit; i < x->nc; i++) {
    const struct cand *c = &x->c[x->ord[i]];
    sb_reset(&sb, x->tmp[c->idx].reason, sizeof(x->tmp[c->idx].reason));
    sb_str(&sb, "skipped: latency ");
    sb_ms(&sb, c->lat);
    sb_str(&sb, " over the ");
    sb_ms(&sb, c->ceiling_ms);
    sb_str(&sb, " ceiling (other clusters can take the request)");
    x->cand_of[c->idx] = -2;
  }
  /* Skipped, by name. */
  first = nout;
  for (i = 0; i < x->n; i++) {
    if (x->cand_of[i] >= 0)
      continue;
    entries[nout] = x->tmp[i];
    for (j = nout; j > first && strcmp(x->st[entries[j - 1].cluster].name, x->st[i].name) > 0; j--)
      entries[j] = entries[j - 1];
    if (j != nout)
      entries[j] = x->tmp[i];
    nout++;
  }
  return nout;
}

int fr_policy_plan(const struct fr_policy *p, const struct fr_cluster_state *states, size_t n,
                   const struct fr_placement_request *req, struct fr_plan *out) {
  struct planner x;
  struct fr_plan_entry *entries;
  int64_t count;
  size_t i, limit;

  if (out == NULL)
    return -EINVAL;
  memset(out, 0, sizeof(*out));
  out->split = "fill_first";
  if (p == NULL || req == NULL || (n > 0 && states == NULL))
    return -EINVAL;
  for (i = 0; i < n; i++)
    if (states[i].name == NULL)
      return -EINVAL;

  memset(&x, 0, sizeof(x));
  x.p = p;
  x.st = states;
  x.n = n;
  x.req = req;
  if (planner_alloc(&x, &entries) != 0)
    return -ENOMEM;
  match_rules(&x, out);     /* 1 */
  locate_client(&x);
  count = clamp_units(req->count);
  filter(&x);               /* 2 */
  number_unknown_regions(&x);
  score(&x, count);         /* 3 */
  rank(&x);
  cheaper_region(&x);
  limit = split_count(&x, count); /* 4 */
  out->planned = count - x.remaining;
  out->shortfall = x.remaining;
  out->entries = entries;
  out->nentries = order_entries(&x, limit, entries);
  free(x.tmp);
  return 0;
}

void fr_plan_free(struct fr_plan *plan) {
  if (plan == NULL)
    return;
  free(plan->entries);
  plan->entries = NULL;
  plan->nentries = 0;
}

/* Rounds for display: the JSON is for people and tools, not for replaying
 * the float arithmetic. */
static double round4(double v) {
  return round(v * 10000.0) / 10000.0;
}

json_t *fr_plan_json(const struct fr_plan *plan, const struct fr_cluster_state *states) {
  json_t *root, *list, *rules;
  const char *s;
  size_t i;

  if (plan == NULL)
    return NULL;
  if ((root = json_object()) == NULL)
    return NULL;
  /* The arrays belong to <root> from here on (set_new steals the reference
   * even when it fails), so one decref of <root> cleans up every path. */
  rules = json_array();
  list = json_array();
  if (json_object_set_new(root, "split", json_string(plan->split != NULL ? plan->split
                                                                          : "fill_first")) != 0 ||
      json_object_set_new(root, "planned", json_integer(plan->planned)) != 0 ||
      json_object_set_new(root, "shortfall", json_integer(plan->shortfall)) != 0 ||
      json_object_set_new(root, "rules", rules) != 0 ||
      json_object_set_new(root, "clusters", list) != 0)
    goto fail;
  for (s = plan->rules; *s != '\0';) {
    const char *comma = strchr(s, ',');
    size_t len = comma != NULL ? (size_t)(comma - s) : strlen(s);
    if (json_array_append_new(rules, json_stringn(s, len)) != 0)
      goto fail;
    s += len + (comma != NULL);
  }
  for (i = 0; i < plan->nentries; i++) {
    const struct fr_plan_entry *e = &plan->entries[i];
    const char *name = states != NULL ? states[e->cluster].name : NULL;
    json_t *o = json_pack("{s:s?, s:s, s:I, s:I, s:i, s:f, s:{s:f, s:f, s:f, s:f}, s:s}",
                          "cluster", name, "verdict", verdict_name(e->verdict), "count",
                          (json_int_t)e->count, "warm", (json_int_t)e->warm, "tier", e->tier,
                          "score", round4(e->score), "scores", "latency", round4(e->s_latency),
                          "warm", round4(e->s_warm), "capacity", round4(e->s_capacity), "cost",
                          round4(e->s_cost), "reason", e->reason);
    /* The price behind the cost score, so an operator can see why a
     * cheaper cluster ranks first (null: no price configured). */
    if (o != NULL && states != NULL)
      json_object_set_new(o, "cost_per_hour",
                          isfinite(states[e->cluster].cost_per_hour) && states[e->cluster].cost_per_hour > 0
                              ? json_real(states[e->cluster].cost_per_hour)
                              : json_null());
    if (o != NULL && e->verdict == FR_PLAN_USE)
      json_object_set_new(o, "first_choice", json_boolean(e->first_choice));
    if (o != NULL && states != NULL && e->cheaper_than >= 0)
      json_object_set_new(o, "cheaper_than", json_string(states[e->cheaper_than].name));
    if (json_array_append_new(list, o) != 0)
      goto fail;
  }
  return root;

fail:
  json_decref(root);
  return NULL;
}
