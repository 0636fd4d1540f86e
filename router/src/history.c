/* history.c - the in-memory history and GET /v1/history (history.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/config.h"
#include "fr/cost.h"
#include "fr/http.h"
#include "fr/log.h"
#include "fr/util.h"
#include "api.h"
#include "history.h"
#include "metrics.h"
#include "promq.h"
#include "router.h"
#include "route_types.h"
#include "tenants.h"

/* The rings: every step, every 24 steps, every 168 steps. */
#define NTIERS 3
static const int tier_every[NTIERS] = {1, 24, 168};
/* Per tenant and point: cumulative creates by outcome, then failures. */
enum { TC_WARM, TC_COLD, TC_COLD_POOL, TC_SPILLED, TC_FAILED, TC_N };
#define TOP_TENANTS 10

struct ring {
  double *v;                /* HISTORY_POINTS points of <width> doubles */
  size_t n, next;           /* points held; where the next one goes */
};

struct history {
  struct router *r;
  uv_timer_t *timer;        /* closed in history_stop (freed in its close callback) */
  int64_t started_ms;       /* wall */
  uint64_t ticks;
  size_t nclusters, ntenants, nregions, nbuckets;
  char **regions;           /* own copies (a reload replaces the config) */
  size_t *cluster_region;   /* per cluster: its region's index */
  char **tenants;           /* own copies, those at start; the last one is "_other"
                               (a tenant a reload adds counts there) */
  size_t width;             /* doubles per point */
  /* offsets into a point */
  size_t o_sb, o_cap, o_cost, o_cr, o_cold, o_warm;
  struct ring rings[NTIERS];
  /* what the router counts itself, cumulative since start */
  double *failed;           /* per tenant */
  double *cold_b, *warm_b;  /* create durations per bucket (+Inf last), not cumulative over le */
  double *scratch;          /* one point */
};

/* ---------------------------------------------------------------------- */
/* labels                                                                  */

static size_t tenant_index(const struct history *h, const char *tenant) {
  size_t i;

  for (i = 0; tenant != NULL && i + 1 < h->ntenants; i++)
    if (strcmp(h->tenants[i], tenant) == 0)
      return i;
  return h->ntenants - 1;
}

/* ---------------------------------------------------------------------- */
/* sampling                                                                */

static void sample(struct history *h, double *pt) {
  struct router *r = h->r;
  size_t i, k, j;
  struct fr_adapter_usage u;

  memset(pt, 0, h->width * sizeof(*pt));
  pt[0] = (double)fr_wall_ms() / 1000.0;
  for (i = 0; i < h->nclusters && i < r->nadapters; i++) {
    const struct fr_config_cost *price = &r->cfg->clusters[i].cost;
    size_t reg = h->cluster_region[i];
    pt[h->o_cap + i] = (double)fr_adapter_total_slots(r->adapters[i], 1000, (int64_t)2 << 30);
    for (k = 0; fr_adapter_usage_row(r->adapters[i], k, &u) == 0; k++) {
      j = tenant_index(h, u.tenant);
      pt[h->o_sb + j * h->nclusters + i] += (double)u.sandboxes;
      pt[h->o_cost + j * h->nregions + reg] +=
          fr_cost_usage_dollars(price, u.sandbox_seconds, u.cpu_core_seconds, u.memory_gib_seconds, u.gpu_seconds);
      pt[h->o_cr + j * TC_N + TC_WARM] += (double)u.created_warm;
      pt[h->o_cr + j * TC_N + TC_COLD] += (double)u.created_cold;
      if (u.pool[0] != '\0')
        pt[h->o_cr + j * TC_N + TC_COLD_POOL] += (double)u.created_cold;
      pt[h->o_cr + j * TC_N + TC_SPILLED] += (double)u.created_spilled;
    }
  }
  for (j = 0; j < h->ntenants; j++)
    pt[h->o_cr + j * TC_N + TC_FAILED] = h->failed[j];
  memcpy(pt + h->o_cold, h->cold_b, h->nbuckets * sizeof(double));
  memcpy(pt + h->o_warm, h->warm_b, h->nbuckets * sizeof(double));
}

static void ring_push(struct history *h, struct ring *g, const double *pt) {
  memcpy(g->v + g->next * h->width, pt, h->width * sizeof(*pt));
  g->next = (g->next + 1) % HISTORY_POINTS;
  if (g->n < HISTORY_POINTS)
    g->n++;
}

/* Point <i> of <g>, oldest first. */
static const double *ring_at(const struct history *h, const struct ring *g, size_t i) {
  size_t first = g->n < HISTORY_POINTS ? 0 : g->next;

  return g->v + ((first + i) % HISTORY_POINTS) * h->width;
}

static void on_tick(uv_timer_t *t) {
  struct history *h = t->data;
  size_t k;

  sample(h, h->scratch);
  for (k = 0; k < NTIERS; k++)
    if (h->ticks % (uint64_t)tier_every[k] == 0)
      ring_push(h, &h->rings[k], h->scratch);
  h->ticks++;
}

void history_create_done(struct history *h, int warm, double seconds) {
  size_t i, n;
  const double *le = metrics_buckets(&n);

  if (h == NULL)
    return;
  for (i = 0; i < n && seconds > le[i]; i++)
    ;
  (warm ? h->warm_b : h->cold_b)[i] += 1; /* i == n: +Inf */
}

void history_create_failed(struct history *h, const char *tenant, int64_t n) {
  if (h != NULL && n > 0)
    h->failed[tenant_index(h, tenant)] += (double)n;
}

/* ---------------------------------------------------------------------- */
/* life                                                                    */

struct history *history_new(struct router *r) {
  struct history *h = calloc(1, sizeof(*h));
  size_t i, k, nb;
  const struct fr_config *cfg = r->cfg;

  if (h == NULL)
    return NULL;
  h->r = r;
  h->started_ms = fr_wall_ms();
  metrics_buckets(&nb);
  h->nbuckets = nb + 1;
  h->nclusters = cfg->nclusters;
  h->ntenants = r->ntenants + 1;
  h->regions = calloc(cfg->nclusters + 1, sizeof(*h->regions));
  h->cluster_region = calloc(cfg->nclusters + 1, sizeof(*h->cluster_region));
  h->tenants = calloc(h->ntenants, sizeof(*h->tenants));
  if (h->regions == NULL || h->cluster_region == NULL || h->tenants == NULL)
    goto oom;
  for (i = 0; i < cfg->nclusters; i++) {
    for (k = 0; k < h->nregions && strcmp(h->regions[k], cfg->clusters[i].region) != 0; k++)
      ;
    if (k == h->nregions && (h->regions[h->nregions++] = strdup(cfg->clusters[i].region)) == NULL)
      goto oom;
    h->cluster_region[i] = k;
  }
  for (i = 0; i < h->ntenants; i++)
    if ((h->tenants[i] = strdup(i + 1 < h->ntenants ? r->tenants[i]->name : FR_USAGE_OTHER)) == NULL)
      goto oom;
  h->o_sb = 1;
  h->o_cap = h->o_sb + h->ntenants * h->nclusters;
  h->o_cost = h->o_cap + h->nclusters;
  h->o_cr = h->o_cost + h->ntenants * (h->nregions ? h->nregions : 1);
  h->o_cold = h->o_cr + h->ntenants * TC_N;
  h->o_warm = h->o_cold + h->nbuckets;
  h->width = h->o_warm + h->nbuckets;
  for (k = 0; k < NTIERS; k++)
    if ((h->rings[k].v = calloc(HISTORY_POINTS * h->width, sizeof(double))) == NULL)
      goto oom;
  h->failed = calloc(h->ntenants, sizeof(double));
  h->cold_b = calloc(h->nbuckets, sizeof(double));
  h->warm_b = calloc(h->nbuckets, sizeof(double));
  h->scratch = calloc(h->width, sizeof(double));
  if (h->failed == NULL || h->cold_b == NULL || h->warm_b == NULL || h->scratch == NULL)
    goto oom;
  return h;
oom:
  history_free(h);
  return NULL;
}

void history_start(struct history *h) {
  uint64_t step = (uint64_t)h->r->cfg->history_step_s * 1000;

  if (h->timer != NULL || (h->timer = malloc(sizeof(*h->timer))) == NULL)
    return;
  uv_timer_init(h->r->loop, h->timer);
  h->timer->data = h;
  /* The first point at once: the answer has a start, counters a base. */
  uv_timer_start(h->timer, on_tick, 0, step);
  uv_unref((uv_handle_t *)h->timer);
}

static void on_timer_closed(uv_handle_t *t) {
  free(t);
}

void history_stop(struct history *h) {
  if (h == NULL || h->timer == NULL)
    return;
  uv_close((uv_handle_t *)h->timer, on_timer_closed);
  h->timer = NULL;
}

void history_free(struct history *h) {
  size_t k;

  if (h == NULL)
    return;
  for (k = 0; k < NTIERS; k++)
    free(h->rings[k].v);
  for (k = 0; h->regions != NULL && k < h->nregions; k++)
    free(h->regions[k]);
  free(h->regions);
  free(h->cluster_region);
  for (k = 0; h->tenants != NULL && k < h->ntenants; k++)
    free(h->tenants[k]);
  free(h->tenants);
  free(h->failed);
  free(h->cold_b);
  free(h->warm_b);
  free(h->scratch);
  free(h);
}

/* ---------------------------------------------------------------------- */
/* answers                                                                 */

static const struct window {
  const char *name;
  int64_t seconds;
} windows[] = {{"1h", 3600}, {"24h", 86400}, {"7d", 7 * 86400}};

/* The quantile <q> of the create durations between two cumulative bucket
 * arrays (per-bucket counts, +Inf last), interpolated linearly inside its
 * bucket as Prometheus' histogram_quantile() does; -1 when none. */
static double quantile(const struct history *h, const double *a, const double *b, double q) {
  size_t n, i;
  const double *le = metrics_buckets(&n);
  double total = 0, rank, seen = 0;

  for (i = 0; i < h->nbuckets; i++)
    total += b[i] - a[i];
  if (total <= 0)
    return -1;
  rank = q * total;
  for (i = 0; i < h->nbuckets; i++) {
    double c = b[i] - a[i];
    if (seen + c >= rank && c > 0) {
      double lo = i == 0 ? 0 : le[i - 1];
      if (i >= n)
        return le[n - 1]; /* in +Inf: the highest finite bound, as Prometheus */
      return lo + (le[i] - lo) * ((rank - seen) / c);
    }
    seen += c;
  }
  return le[n - 1];
}

static json_t *num_or_null(double v) {
  return isfinite(v) && v >= 0 ? json_real(round(v * 1e6) / 1e6) : json_null();
}

/* What the tenant of <q> may see: every tenant (admins), or itself. */
static int sees_all(const struct api_req *q) {
  return q->ts != NULL && q->ts->admin;
}

struct series_set {
  json_t *t, *sandboxes, *capacity, *creates, *cold, *hit, *by_region, *by_tenant, *top;
};

static void set_init(struct series_set *s) {
  s->t = json_array();
  s->sandboxes = json_array();
  s->capacity = json_array();
  s->creates = json_pack("{s:[],s:[],s:[],s:[]}", "warm", "cold", "spilled", "failed");
  s->cold = json_pack("{s:[],s:[]}", "p50", "p99");
  s->hit = json_array();
  s->by_region = json_array();
  s->by_tenant = json_array();
  s->top = json_array();
}

/* The answer's body from a filled set (taken). */
static json_t *history_body(const char *window, const char *source, double step, int64_t since_s, const char *note,
                            struct series_set *s) {
  char since[21];
  json_t *body;

  fr_time_rfc3339(since_s, since);
  body = json_pack("{s:s,s:s,s:f,s:s,s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:{s:o,s:o},s:o}", "window", window, "source",
                   source, "step_s", step, "since", since, "note", note, "t", s->t, "sandboxes", s->sandboxes,
                   "capacity", s->capacity, "creates_per_s", s->creates, "cold_start_s", s->cold, "warm_hit_rate",
                   s->hit, "spend_per_hour", "by_region", s->by_region, "by_tenant", s->by_tenant, "top_tenants",
                   s->top);
  memset(s, 0, sizeof(*s));
  return body;
}

/* The finest ring that holds the window, or everything since the start
 * when that is shorter. */
static const struct ring *pick_ring(const struct history *h, int64_t window_s, int *tier) {
  int64_t up = (fr_wall_ms() - h->started_ms) / 1000, want = window_s < up ? window_s : up;
  int k;

  for (k = 0; k < NTIERS - 1; k++)
    if ((int64_t)HISTORY_POINTS * tier_every[k] * h->r->cfg->history_step_s >= want)
      break;
  *tier = k;
  return &h->rings[k];
}

static json_t *memory_answer(struct api_req *q, const struct window *w) {
  struct history *h = q->r->history;
  struct series_set s;
  const struct ring *g;
  const double **pts;
  size_t i, j, k, reg, n = 0;
  int tier, all = sees_all(q);
  double now = (double)fr_wall_ms() / 1000.0, *top;
  size_t own = tenant_index(h, q->tenant);
  json_t *body;

  g = pick_ring(h, w->seconds, &tier);
  if ((pts = calloc(g->n + 1, sizeof(*pts))) == NULL || (top = calloc(h->ntenants, sizeof(*top))) == NULL) {
    free(pts);
    return NULL;
  }
  for (i = 0; i < g->n; i++)
    if (ring_at(h, g, i)[0] >= now - (double)w->seconds)
      pts[n++] = ring_at(h, g, i);
  set_init(&s);
  for (i = 0; i < n; i++)
    json_array_append_new(s.t, json_real(round(pts[i][0] * 1000) / 1000));
  /* as GET /v1/clusters: every cluster's capacity, and the sandboxes of
   * the tenants the caller may see */
  for (k = 0; k < h->nclusters; k++) {
    json_t *sb = json_array(), *cap = json_array();
    for (i = 0; i < n; i++) {
      double live = 0;
      for (j = 0; j < h->ntenants; j++)
        if (all || j == own)
          live += pts[i][h->o_sb + j * h->nclusters + k];
      json_array_append_new(sb, json_real(live));
      json_array_append_new(cap, json_real(pts[i][h->o_cap + k]));
    }
    json_array_append_new(s.sandboxes, json_pack("{s:s,s:s,s:o}", "cluster", q->r->cfg->clusters[k].name, "region",
                                                 q->r->cfg->clusters[k].region, "values", sb));
    json_array_append_new(s.capacity, json_pack("{s:s,s:s,s:o}", "cluster", q->r->cfg->clusters[k].name, "region",
                                                q->r->cfg->clusters[k].region, "values", cap));
  }
  /* creates, hit rate, cold starts: rates between consecutive points, of
   * the tenants the caller may see */
  for (i = 0; i < n; i++) {
    static const char *const names[] = {"warm", "cold", "spilled", "failed"};
    static const int cols[] = {TC_WARM, TC_COLD, TC_SPILLED, TC_FAILED};
    double dt = i > 0 ? pts[i][0] - pts[i - 1][0] : 0, d[TC_N] = {0};
    for (j = 0; i > 0 && j < h->ntenants; j++) {
      if (!all && j != own)
        continue;
      for (k = 0; k < TC_N; k++)
        d[k] += pts[i][h->o_cr + j * TC_N + k] - pts[i - 1][h->o_cr + j * TC_N + k];
    }
    for (k = 0; k < 4; k++)
      json_array_append_new(json_object_get(s.creates, names[k]), i > 0 && dt > 0 ? json_real(d[cols[k]] / dt)
                                                                                 : json_null());
    json_array_append_new(s.hit, i > 0 && d[TC_WARM] + d[TC_COLD_POOL] > 0
                                     ? json_real(d[TC_WARM] / (d[TC_WARM] + d[TC_COLD_POOL]))
                                     : json_null());
    json_array_append_new(json_object_get(s.cold, "p50"),
                          i > 0 ? num_or_null(quantile(h, pts[i - 1] + h->o_cold, pts[i] + h->o_cold, 0.5))
                                : json_null());
    json_array_append_new(json_object_get(s.cold, "p99"),
                          i > 0 ? num_or_null(quantile(h, pts[i - 1] + h->o_cold, pts[i] + h->o_cold, 0.99))
                                : json_null());
  }
  /* spend per hour by region and by tenant */
  for (reg = 0; reg < h->nregions; reg++) {
    json_t *vals = json_array();
    for (i = 0; i < n; i++) {
      double dt = i > 0 ? pts[i][0] - pts[i - 1][0] : 0, d = 0;
      for (j = 0; j < h->ntenants; j++)
        if (all || j == own)
          d += pts[i][h->o_cost + j * h->nregions + reg] - (i > 0 ? pts[i - 1][h->o_cost + j * h->nregions + reg] : 0);
      json_array_append_new(vals, i > 0 && dt > 0 ? json_real(d / dt * 3600.0) : json_null());
    }
    json_array_append_new(s.by_region, json_pack("{s:s,s:o}", "region", h->regions[reg], "values", vals));
  }
  for (j = 0; j < h->ntenants; j++) {
    json_t *vals;
    if (!all && j != own)
      continue;
    vals = json_array();
    for (i = 0; i < n; i++) {
      double dt = i > 0 ? pts[i][0] - pts[i - 1][0] : 0, d = 0;
      for (reg = 0; reg < h->nregions; reg++)
        d += pts[i][h->o_cost + j * h->nregions + reg] - (i > 0 ? pts[i - 1][h->o_cost + j * h->nregions + reg] : 0);
      json_array_append_new(vals, i > 0 && dt > 0 ? json_real(d / dt * 3600.0) : json_null());
    }
    for (reg = 0; n > 1 && reg < h->nregions; reg++)
      top[j] += pts[n - 1][h->o_cost + j * h->nregions + reg] - pts[0][h->o_cost + j * h->nregions + reg];
    json_array_append_new(s.by_tenant, json_pack("{s:s,s:o}", "tenant", h->tenants[j], "values", vals));
  }
  /* the top tenants by spend over the window, highest first */
  for (k = 0; k < TOP_TENANTS; k++) {
    size_t best = h->ntenants;
    for (j = 0; j < h->ntenants; j++)
      if ((all || j == own) && top[j] > 0 && (best == h->ntenants || top[j] > top[best]))
        best = j;
    if (best == h->ntenants)
      break;
    json_array_append_new(s.top, json_pack("{s:s,s:f}", "tenant", h->tenants[best], "dollars",
                                           round(top[best] * 1e6) / 1e6));
    top[best] = -1;
  }
  free(pts);
  free(top);
  body = history_body(w->name, "memory", (double)(tier_every[tier] * q->r->cfg->history_step_s),
                      h->started_ms / 1000,
                      "in-memory history since this router started (no metrics.prometheus_url): it "
                      "starts empty with every restart and each replica has its own",
                      &s);
  return body;
}

/* ---------------------------------------------------------------------- */
/* from Prometheus                                                         */

/* The label matcher that limits a query to what the caller may see:
 * "" for admins, tenant="<name>" for a tenant (names are config values:
 * [A-Za-z0-9._-], nothing to escape). */
static void tenant_filter(const struct api_req *q, char *out, size_t cap) {
  if (sees_all(q))
    out[0] = '\0';
  else
    snprintf(out, cap, "tenant=\"%s\"", tenant_label(q->r, q->tenant));
}

enum { HQ_SB, HQ_CAP, HQ_CREATES, HQ_FAILED, HQ_P50, HQ_P99, HQ_HIT, HQ_REGION, HQ_TENANT, HQ_TOP, HQ_N };

struct prom_history {
  struct api_req *q;
  const struct window *w;
  struct promq_query qs[HQ_N];
  char exprs[HQ_N][800];
  double start, end, step;
  size_t npts;
};

/* Values of one range result aligned on the answer's time grid. */
static json_t *aligned(const struct prom_history *ph, json_t *values, double scale) {
  json_t *arr = json_array(), *v;
  size_t i, k;

  for (i = 0; i < ph->npts; i++)
    json_array_append_new(arr, json_null());
  json_array_foreach(values, k, v) {
    double t = json_number_value(json_array_get(v, 0));
    double x = strtod(json_string_value(json_array_get(v, 1)) ? json_string_value(json_array_get(v, 1)) : "nan",
                      NULL);
    long idx = lround((t - ph->start) / ph->step);
    if (idx >= 0 && (size_t)idx < ph->npts && isfinite(x))
      json_array_set_new(arr, (size_t)idx, json_real(round(x * scale * 1e6) / 1e6));
  }
  return arr;
}

/* The series of result <res> as [{<label>: ..., [<label2>: ...,] "values": [...]}]. */
static json_t *labelled(const struct prom_history *ph, json_t *res, const char *label, const char *label2,
                        double scale) {
  json_t *out = json_array(), *e;
  size_t i;

  json_array_foreach(res, i, e) {
    json_t *m = json_object_get(e, "metric");
    json_t *o = json_pack("{s:o}", "values", aligned(ph, json_object_get(e, "values"), scale));
    json_object_set_new(o, label, json_string(json_string_value(json_object_get(m, label)) ? json_string_value(json_object_get(m, label)) : ""));
    if (label2 != NULL)
      json_object_set_new(o, label2, json_string(json_string_value(json_object_get(m, label2)) ? json_string_value(json_object_get(m, label2)) : ""));
    json_array_append_new(out, o);
  }
  return out;
}

/* The one series of <res> (a sum without labels), or nulls. */
static json_t *single(const struct prom_history *ph, json_t *res, double scale) {
  return aligned(ph, json_object_get(json_array_get(res, 0), "values"), scale);
}

static void on_prom_history(struct promq_query *qs, size_t n, void *arg) {
  struct prom_history *ph = arg;
  struct api_req *q = ph->q;
  struct series_set s;
  json_t *body, *e;
  size_t i, k;
  char msg[600];

  for (i = 0; i < n; i++) {
    if (!qs[i].ok) {
      snprintf(msg, sizeof(msg), "Prometheus (metrics.prometheus_url) did not answer: %s", qs[i].error);
      api_fail(q, 502, "prometheus_unavailable", msg, NULL);
      free(ph);
      return;
    }
  }
  set_init(&s);
  for (k = 0; k < ph->npts; k++)
    json_array_append_new(s.t, json_real(ph->start + (double)k * ph->step));
  json_decref(s.sandboxes);
  json_decref(s.capacity);
  s.sandboxes = labelled(ph, qs[HQ_SB].result, "cluster", "region", 1);
  s.capacity = labelled(ph, qs[HQ_CAP].result, "cluster", "region", 1);
  {
    static const char *const outcomes[] = {"warm", "cold", "spilled"};
    for (k = 0; k < 3; k++) {
      json_t *vals = NULL;
      json_array_foreach(qs[HQ_CREATES].result, i, e) {
        const char *o = json_string_value(json_object_get(json_object_get(e, "metric"), "outcome"));
        if (o != NULL && strcmp(o, outcomes[k]) == 0)
          vals = aligned(ph, json_object_get(e, "values"), 1);
      }
      if (vals == NULL) {
        vals = json_array();
        for (i = 0; i < ph->npts; i++)
          json_array_append_new(vals, json_null());
      }
      json_object_set_new(s.creates, outcomes[k], vals);
    }
    json_object_set_new(s.creates, "failed", single(ph, qs[HQ_FAILED].result, 1));
  }
  json_object_set_new(s.cold, "p50", single(ph, qs[HQ_P50].result, 1));
  json_object_set_new(s.cold, "p99", single(ph, qs[HQ_P99].result, 1));
  json_decref(s.hit);
  s.hit = single(ph, qs[HQ_HIT].result, 1);
  json_decref(s.by_region);
  json_decref(s.by_tenant);
  s.by_region = labelled(ph, qs[HQ_REGION].result, "region", NULL, 3600);
  s.by_tenant = labelled(ph, qs[HQ_TENANT].result, "tenant", NULL, 3600);
  json_array_foreach(qs[HQ_TOP].result, i, e) {
    const char *t = json_string_value(json_object_get(json_object_get(e, "metric"), "tenant"));
    double v = strtod(json_string_value(json_array_get(json_object_get(e, "value"), 1))
                          ? json_string_value(json_array_get(json_object_get(e, "value"), 1))
                          : "nan",
                      NULL);
    if (t != NULL && isfinite(v))
      json_array_append_new(s.top, json_pack("{s:s,s:f}", "tenant", t, "dollars", round(v * 1e6) / 1e6));
  }
  body = history_body(ph->w->name, "prometheus", ph->step, (int64_t)ph->start,
                      "from Prometheus (metrics.prometheus_url): every replica's view, counted once", &s);
  api_reply(q, body != NULL ? 200 : 503, body != NULL ? body : api_err_body("out_of_memory", "out of memory"),
            NULL);
  free(ph);
}

static void prom_answer(struct api_req *q, const struct window *w) {
  struct prom_history *ph = calloc(1, sizeof(*ph));
  char tf[128], tfc[140];
  double range;
  size_t i;

  if (ph == NULL) {
    api_oom(q);
    return;
  }
  ph->q = q;
  ph->w = w;
  /* About 240 points whatever the window; rates over two steps (at least
   * a minute, so a 15 s scrape interval has points in every range). */
  ph->step = (double)w->seconds / 240.0;
  ph->end = floor((double)fr_wall_ms() / 1000.0); /* the last point is now */
  ph->start = ph->end - (double)w->seconds;
  ph->npts = 241;
  range = 2 * ph->step > 60 ? 2 * ph->step : 60;
  tenant_filter(q, tf, sizeof(tf));
  snprintf(tfc, sizeof(tfc), "%s%s", tf, tf[0] ? "," : "");
  snprintf(ph->exprs[HQ_SB], sizeof(ph->exprs[0]), "max by (cluster, region) (fedrouter_cluster_sandboxes)");
  snprintf(ph->exprs[HQ_CAP], sizeof(ph->exprs[0]),
           "max by (cluster, region) (fedrouter_cluster_capacity_slots{pool=\"\",state=\"total\"})");
  snprintf(ph->exprs[HQ_CREATES], sizeof(ph->exprs[0]),
           "sum by (outcome) (max by (" HISTORY_USAGE_KEY ", outcome) (rate(fedrouter_sandbox_creates_total{%s}[%.0fs])))", tf,
           range);
  snprintf(ph->exprs[HQ_FAILED], sizeof(ph->exprs[0]),
           "sum(rate(fedrouter_sandbox_create_failures_total{%s}[%.0fs]))", tf, range);
  snprintf(ph->exprs[HQ_P50], sizeof(ph->exprs[0]),
           "histogram_quantile(0.5, sum by (le) (rate(fedrouter_create_duration_seconds_bucket{start=\"cold\"}[%.0fs])))",
           range);
  snprintf(ph->exprs[HQ_P99], sizeof(ph->exprs[0]),
           "histogram_quantile(0.99, sum by (le) (rate(fedrouter_create_duration_seconds_bucket{start=\"cold\"}[%.0fs])))",
           range);
  snprintf(ph->exprs[HQ_HIT], sizeof(ph->exprs[0]),
           "sum(max by (" HISTORY_USAGE_KEY ") (rate(fedrouter_sandbox_creates_total{%soutcome=\"warm\"}[%.0fs]))) / "
           "sum(max by (" HISTORY_USAGE_KEY ", outcome) (rate(fedrouter_sandbox_creates_total{%soutcome=~\"warm|cold\","
           "pool!=\"\"}[%.0fs])))",
           tfc, range, tfc, range);
  snprintf(ph->exprs[HQ_REGION], sizeof(ph->exprs[0]),
           "sum by (region) (max by (" HISTORY_USAGE_KEY ") (rate(fedrouter_cost_dollars_total{%s}[%.0fs])))", tf, range);
  snprintf(ph->exprs[HQ_TENANT], sizeof(ph->exprs[0]),
           "sum by (tenant) (max by (" HISTORY_USAGE_KEY ") (rate(fedrouter_cost_dollars_total{%s}[%.0fs])))", tf, range);
  snprintf(ph->exprs[HQ_TOP], sizeof(ph->exprs[0]),
           "topk(%d, sum by (tenant) (max by (" HISTORY_USAGE_KEY ") (increase(fedrouter_cost_dollars_total{%s}[%" PRId64
           "s]))) > 0)",
           TOP_TENANTS, tf, w->seconds);
  for (i = 0; i < HQ_N; i++) {
    ph->qs[i].expr = ph->exprs[i];
    ph->qs[i].range = i != HQ_TOP;
    ph->qs[i].start = ph->start;
    ph->qs[i].end = ph->end;
    ph->qs[i].step = ph->step;
    ph->qs[i].time = ph->end;
  }
  if (history_prom_run(q, ph->qs, HQ_N, on_prom_history, ph) != 0)
    free(ph);
}

int history_prom_run(struct api_req *q, struct promq_query *qs, size_t n, promq_done_cb cb, void *arg) {
  int rc;

  api_defer(q);
  rc = promq_run(q->r->prom, qs, n, cb, arg);
  if (rc != 0) {
    api_fail(q, 503, rc == -EBUSY ? "busy" : "out_of_memory",
             rc == -EBUSY ? "too many Prometheus queries in flight; try again" : "out of memory",
             "Retry-After: 1\r\n");
    return -1;
  }
  return 0;
}

/* ---------------------------------------------------------------------- */
/* GET /v1/history?window=1h|24h|7d                                        */

static int only_keys(const char *key, const char *value, void *arg) {
  const char *const *known = arg;
  size_t i;

  (void)value;
  for (i = 0; known[i] != NULL; i++)
    if (strcmp(known[i], key) == 0)
      return 0;
  return 1;
}

int history_query_keys(struct api_req *q, const char *const *known) {
  char msg[200];
  int rc = fr_http_query_each(q->req->query, only_keys, (void *)known);

  if (rc != 0) {
    snprintf(msg, sizeof(msg), "unknown or malformed query parameter (this endpoint takes: %s%s%s%s%s)", known[0],
             known[1] ? ", " : "", known[1] ? known[1] : "", known[1] && known[2] ? ", " : "",
             known[1] && known[2] ? known[2] : "");
    api_fail(q, 400, "invalid_query", msg, NULL);
    return -1;
  }
  return 0;
}

void history_get(struct api_req *q, const struct route_params *p) {
  static const char *const keys[] = {"window", NULL};
  char win[16];
  long n;
  size_t i;

  (void)p;
  if (history_query_keys(q, keys) != 0)
    return;
  n = fr_http_query_get(q->req->query, "window", win, sizeof(win));
  if (n == -ENOENT)
    snprintf(win, sizeof(win), "1h");
  for (i = 0; n != -ENOSPC && i < FR_ARRAY_SIZE(windows); i++)
    if (strcmp(windows[i].name, win) == 0)
      break;
  if (n == -ENOSPC || i == FR_ARRAY_SIZE(windows)) {
    api_fail(q, 400, "invalid_window", "window is 1h, 24h or 7d", NULL);
    return;
  }
  if (q->r->prom != NULL) {
    prom_answer(q, &windows[i]);
    return;
  }
  if (q->r->history == NULL) {
    api_oom(q);
    return;
  }
  {
    json_t *body = memory_answer(q, &windows[i]);
    if (body == NULL)
      api_oom(q);
    else
      api_reply(q, 200, body, NULL);
  }
}
