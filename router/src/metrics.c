/* metrics.c - counters, histograms and the /metrics exposition. */
#include <errno.h>
#include <inttypes.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/cost.h"
#include "fr/http.h"
#include "fr/config.h"
#include "fr/policy.h"
#include "fr/util.h"
#include "fr/version.h"
#include "metrics.h"
#include "router.h"
#include "tenants.h"

#define NBUCKETS 15
/* Seconds; from a millisecond API call to a minute-long exec. */
static const double bucket_le[NBUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                           0.25,  0.5,    1,     2.5,  5,     10,   30, 60};

struct family {
  const char *name, *type, *help;
};

/* Recorded families, in exposition order. Gauges read at scrape time are
 * written by render_gauges(). */
static const struct family recorded[] = {
    {"fedrouter_cluster_api_latency_seconds", "histogram",
     "Duration of Kubernetes API calls to the cluster (REST; watches excluded)."},
    {"fedrouter_creates_total", "counter", "Sandbox creates by cluster, tenant, outcome and warm or cold start."},
    {"fedrouter_create_duration_seconds", "histogram",
     "Time from a sandbox's create starting in a cluster to the sandbox being exec-ready, by cluster and warm or "
     "cold start."},
    {"fedrouter_sandbox_create_failures_total", "counter",
     "Sandboxes a create asked for and did not get (no room, rolled back), by tenant and pool; counted by the "
     "replica that served the create."},
    {"fedrouter_spills_total", "counter",
     "Times a cluster answered with a no-room signal and the rest of a batch moved on."},
    {"fedrouter_execs_total", "counter", "Execs by cluster and outcome."},
    {"fedrouter_exec_duration_seconds", "histogram", "Exec wall time as seen by the router."},
    {"fedrouter_http_requests_total", "counter", "API requests by route template, method and status."},
    {"fedrouter_http_request_duration_seconds", "histogram", "API request latency by route template."},
    {"fedrouter_queue_wait_seconds", "histogram",
     "Time a create waited in the queue for room, by tenant and outcome (started, expired, gone, refused)."},
    {"fedrouter_exec_wait_seconds", "histogram",
     "Time an exec waited for one of its tenant's max_concurrent_execs slots, by tenant and outcome."},
    {"fedrouter_queue_started_sandboxes_total", "counter",
     "Sandboxes that started after waiting in the create queue, by tenant."},
    {"fedrouter_auth_total", "counter", "Authenticated requests by tenant and token name (rotations: is the old "
     "token still used?)."},
};

struct series {
  size_t family;          /* index into recorded[] */
  char *labels;
  double value;           /* counters */
  uint64_t buckets[NBUCKETS];
  double sum;
  uint64_t count;
};

struct metrics {
  struct series *v;
  size_t n, cap;
  json_t *index;          /* "family\x1flabels" -> series index */
};

const double *metrics_buckets(size_t *n) {
  *n = NBUCKETS;
  return bucket_le;
}

struct metrics *metrics_new(void) {
  struct metrics *m = calloc(1, sizeof(*m));

  if (m == NULL || (m->index = json_object()) == NULL) {
    free(m);
    return NULL;
  }
  return m;
}

void metrics_free(struct metrics *m) {
  size_t i;

  if (m == NULL)
    return;
  for (i = 0; i < m->n; i++)
    free(m->v[i].labels);
  free(m->v);
  json_decref(m->index);
  free(m);
}

static struct series *find(struct metrics *m, const char *family, const char *labels) {
  char key[1024];
  size_t f;
  json_t *idx;

  for (f = 0; f < sizeof(recorded) / sizeof(recorded[0]); f++)
    if (strcmp(recorded[f].name, family) == 0)
      break;
  if (f == sizeof(recorded) / sizeof(recorded[0]))
    return NULL; /* a bug: every family is declared above */
  snprintf(key, sizeof(key), "%s\x1f%s", family, labels);
  idx = json_object_get(m->index, key);
  if (idx != NULL)
    return &m->v[json_integer_value(idx)];
  if (m->n == m->cap) {
    size_t ncap = m->cap ? m->cap * 2 : 64;
    struct series *nv = realloc(m->v, ncap * sizeof(*nv));
    if (nv == NULL)
      return NULL;
    m->v = nv;
    m->cap = ncap;
  }
  memset(&m->v[m->n], 0, sizeof(m->v[m->n]));
  m->v[m->n].family = f;
  m->v[m->n].labels = strdup(labels);
  if (m->v[m->n].labels == NULL || json_object_set_new(m->index, key, json_integer((json_int_t)m->n)) != 0) {
    free(m->v[m->n].labels);
    return NULL;
  }
  return &m->v[m->n++];
}

void metrics_inc(struct metrics *m, const char *family, const char *labels, double by) {
  struct series *s = m ? find(m, family, labels) : NULL;

  if (s != NULL)
    s->value += by;
}

void metrics_observe(struct metrics *m, const char *family, const char *labels, double seconds) {
  struct series *s = m ? find(m, family, labels) : NULL;
  size_t i;

  if (s == NULL)
    return;
  for (i = 0; i < NBUCKETS; i++)
    if (seconds <= bucket_le[i])
      s->buckets[i]++;
  s->sum += seconds;
  s->count++;
}

void metrics_label(struct fr_buf *b, const char *name, const char *value) {
  const char *p;

  fr_buf_printf(b, "%s%s=\"", b->len ? "," : "", name);
  for (p = value ? value : ""; *p; p++) {
    if (*p == '\\')
      fr_buf_puts(b, "\\\\");
    else if (*p == '"')
      fr_buf_puts(b, "\\\"");
    else if (*p == '\n')
      fr_buf_puts(b, "\\n");
    else
      fr_buf_putc(b, *p);
  }
  fr_buf_putc(b, '"');
}

/* ---------------------------------------------------------------------- */
/* rendering                                                               */

static void head(struct fr_buf *b, const char *name, const char *type, const char *help);
static void sample(struct fr_buf *b, const char *name, const char *labels, double v);

static void head(struct fr_buf *b, const char *name, const char *type, const char *help) {
  fr_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample(struct fr_buf *b, const char *name, const char *labels, double v) {
  if (labels != NULL && *labels)
    fr_buf_printf(b, "%s{%s} %.12g\n", name, labels, v);
  else
    fr_buf_printf(b, "%s %.12g\n", name, v);
}

/* A gauge line with cluster/region and up to two more labels. */
static void gauge(struct fr_buf *b, const char *name, const char *cluster, const char *region,
                  const char *k1, const char *v1, const char *k2, const char *v2, double v) {
  struct fr_buf l;

  fr_buf_init(&l);
  if (cluster)
    metrics_label(&l, "cluster", cluster);
  if (region)
    metrics_label(&l, "region", region);
  if (k1)
    metrics_label(&l, k1, v1);
  if (k2)
    metrics_label(&l, k2, v2);
  sample(b, name, l.data ? l.data : "", v);
  fr_buf_free(&l);
}

static void render_gauges(struct router *r, struct fr_buf *b, int all_pools) {
  size_t i, k;
  struct fr_adapter_view *views = calloc(r->nadapters ? r->nadapters : 1, sizeof(*views));

  if (views == NULL)
    return;
  head(b, "fedrouter_build_info", "gauge", "Always 1; the version label says which fedrouter.");
  gauge(b, "fedrouter_build_info", NULL, NULL, "version", FR_VERSION, NULL, NULL, 1);

  head(b, "fedrouter_cluster_healthy", "gauge", "1 while the cluster's circuit breaker is closed.");
  for (i = 0; i < r->nadapters; i++) {
    fr_adapter_view(r->adapters[i], &views[i]);
    gauge(b, "fedrouter_cluster_healthy", views[i].name, views[i].region, NULL, NULL, NULL, NULL, views[i].healthy);
  }
  head(b, "fedrouter_cluster_synced", "gauge", "1 once the cluster's caches completed their first list.");
  for (i = 0; i < r->nadapters; i++)
    gauge(b, "fedrouter_cluster_synced", views[i].name, views[i].region, NULL, NULL, NULL, NULL, views[i].synced);

  head(b, "fedrouter_data_path_requests_total", "counter",
       "Calls to sandboxes' agents and ports by path: through the cluster's gateway or the API server's pod proxy.");
  for (i = 0; i < r->nadapters; i++) {
    uint64_t gw, pp;
    fr_adapter_data_path_calls(r->adapters[i], &gw, &pp);
    gauge(b, "fedrouter_data_path_requests_total", views[i].name, NULL, "path", "gateway", NULL, NULL, (double)gw);
    gauge(b, "fedrouter_data_path_requests_total", views[i].name, NULL, "path", "pod-proxy", NULL, NULL, (double)pp);
  }
  head(b, "fedrouter_cluster_capacity_slots", "gauge",
       "Sandboxes of a pool's shape (pool \"\" = 1 cpu, 2 GiB) that fit now (free) or on empty nodes (total).");
  for (i = 0; i < r->nadapters; i++) {
    struct fr_adapter *a = r->adapters[i];
    gauge(b, "fedrouter_cluster_capacity_slots", views[i].name, views[i].region, "pool", "", "state", "free",
          (double)fr_adapter_free_slots(a, 1000, 2147483648LL));
    gauge(b, "fedrouter_cluster_capacity_slots", views[i].name, views[i].region, "pool", "", "state", "total",
          (double)fr_adapter_total_slots(a, 1000, 2147483648LL));
    for (k = 0; k < views[i].npools; k++) {
      const struct fr_adapter_pool_view *pv = &views[i].pools[k];
      int64_t fs, ts;
      if (pv->image[0] == '\0' || (!all_pools && pv->owner != NULL))
        continue; /* its shape is unreadable, or its name is its tenant's */
      fr_adapter_pool_slots(a, pv, &fs, &ts);
      gauge(b, "fedrouter_cluster_capacity_slots", views[i].name, views[i].region, "pool", pv->name, "state",
            "free", (double)fs);
      gauge(b, "fedrouter_cluster_capacity_slots", views[i].name, views[i].region, "pool", pv->name, "state",
            "total", (double)ts);
    }
  }
  head(b, "fedrouter_cluster_sandboxes", "gauge", "Claimed or created sandboxes, running or starting.");
  for (i = 0; i < r->nadapters; i++) {
    gauge(b, "fedrouter_cluster_sandboxes", views[i].name, views[i].region, NULL, NULL, NULL, NULL,
          (double)views[i].sandboxes);
  }
  /* One walk per family: the text format wants a family's samples together. */
  {
    struct fr_adapter_cache_stats *cs = calloc(r->nadapters ? r->nadapters : 1, sizeof(*cs));
    if (cs != NULL) {
      for (i = 0; i < r->nadapters; i++)
        fr_adapter_cache_stats(r->adapters[i], &cs[i]);
      head(b, "fedrouter_pod_cache_pods", "gauge", "Pod records in the cluster's sandbox pod cache.");
      for (i = 0; i < r->nadapters; i++)
        gauge(b, "fedrouter_pod_cache_pods", views[i].name, NULL, NULL, NULL, NULL, NULL, (double)cs[i].pods);
      head(b, "fedrouter_pod_cache_bytes", "gauge",
           "Memory of the sandbox pod cache: its hash table, and the pages of its records and the reaper's names.");
      for (i = 0; i < r->nadapters; i++) {
        gauge(b, "fedrouter_pod_cache_bytes", views[i].name, NULL, "part", "table", NULL, NULL,
              (double)cs[i].table_slots * (double)sizeof(void *));
        gauge(b, "fedrouter_pod_cache_bytes", views[i].name, NULL, "part", "records", NULL, NULL,
              (double)cs[i].record_bytes);
      }
      head(b, "fedrouter_reaper_queue_entries", "gauge", "Entries of the reaper's due-time queue.");
      for (i = 0; i < r->nadapters; i++)
        gauge(b, "fedrouter_reaper_queue_entries", views[i].name, NULL, NULL, NULL, NULL, NULL,
              (double)cs[i].reaper_entries);
      free(cs);
    }
  }
#ifdef __GLIBC__
  {
    /* In use vs free in malloc's heap: free memory that stays resident
     * after a burst is fragmentation, not a leak (docs/benchmarks.md). */
    struct mallinfo2 mi = mallinfo2();
    head(b, "fedrouter_heap_bytes", "gauge", "malloc's heap: bytes in use and bytes free inside it.");
    gauge(b, "fedrouter_heap_bytes", NULL, NULL, "state", "in_use", NULL, NULL, (double)(mi.uordblks + mi.hblkhd));
    gauge(b, "fedrouter_heap_bytes", NULL, NULL, "state", "free", NULL, NULL, (double)mi.fordblks);
  }
#endif
  head(b, "fedrouter_pool_warm_pods", "gauge", "Warm pool depth: ready unclaimed pods and the target.");
  for (i = 0; i < r->nadapters; i++) {
    for (k = 0; k < views[i].npools; k++) {
      if (!all_pools && views[i].pools[k].owner != NULL)
        continue;
      gauge(b, "fedrouter_pool_warm_pods", views[i].name, NULL, "pool", views[i].pools[k].name, "state", "ready",
            (double)views[i].pools[k].ready);
      gauge(b, "fedrouter_pool_warm_pods", views[i].name, NULL, "pool", views[i].pools[k].name, "state", "target",
            (double)views[i].pools[k].target);
    }
  }
  head(b, "fedrouter_cluster_cost_dollars_per_hour", "gauge",
       "Cost of the running sandboxes (now), of every default-shape slot filled (capacity), and what a hosted "
       "vendor would charge for the running sandboxes (hosted_equivalent).");
  for (i = 0; i < r->nadapters; i++) {
    struct router_cost c;
    router_cluster_cost(r, i, &views[i], &c);
    gauge(b, "fedrouter_cluster_cost_dollars_per_hour", views[i].name, views[i].region, "basis", "now", NULL, NULL,
          c.now);
    gauge(b, "fedrouter_cluster_cost_dollars_per_hour", views[i].name, views[i].region, "basis", "capacity", NULL,
          NULL, c.capacity);
    gauge(b, "fedrouter_cluster_cost_dollars_per_hour", views[i].name, views[i].region, "basis",
          "hosted_equivalent", NULL, NULL, c.hosted);
  }
  head(b, "fedrouter_http_requests_in_flight", "gauge", "Requests being answered later (creates, execs, ...).");
  sample(b, "fedrouter_http_requests_in_flight", "", (double)r->inflight);
  head(b, "fedrouter_port_tunnels", "gauge",
       "Upgraded connections (WebSockets) to sandboxes' ports, open or being opened (ports.max_tunnels).");
  sample(b, "fedrouter_port_tunnels", "", (double)r->port_tunnels);
  {
    struct fr_http_server_stats hs;
    fr_http_server_stats(r->http, &hs);
    head(b, "fedrouter_http_connections", "gauge", "Client connections: open, and idle between requests.");
    sample(b, "fedrouter_http_connections", "state=\"open\"", (double)fr_http_server_nconns(r->http));
    sample(b, "fedrouter_http_connections", "state=\"idle\"", (double)hs.idle);
    head(b, "fedrouter_http_connections_limited_total", "counter",
         "Connections closed by the connection limits: idle ones evicted for new clients, new ones refused.");
    sample(b, "fedrouter_http_connections_limited_total", "action=\"evicted\"", (double)hs.evicted);
    sample(b, "fedrouter_http_connections_limited_total", "action=\"refused\"", (double)hs.refused);
  }
  head(b, "fedrouter_policy_info", "gauge", "The loaded routing policy; always 1.");
  gauge(b, "fedrouter_policy_info", NULL, NULL, "source", fr_policy_source(r->policy), "version",
        fr_policy_version(r->policy), 1);
  head(b, "fedrouter_policy_reloads_total", "counter", "Policy reloads by result.");
  gauge(b, "fedrouter_policy_reloads_total", NULL, NULL, "result", "ok", NULL, NULL, (double)r->policy_reloads);
  gauge(b, "fedrouter_policy_reloads_total", NULL, NULL, "result", "error", NULL, NULL,
        (double)r->policy_reload_failures);
  free(views);
}

/* ---- usage (docs/metrics.md, "Usage"): the adapters' usage tables ---- */

/* One label set of a cluster's usage: the rows of fr_adapter_usage mapped
 * to bounded labels (tenants the config does not know as "_other", a
 * tenant's own pool as "_private" on an open /metrics), summed. */
struct ukey {
  const char *tenant, *pool;
  int declared_only;        /* a zero creates series declared ahead, not a row */
  double v[5];              /* seconds, core-seconds, GiB-seconds, GPU-seconds, dollars */
  double created[3];        /* warm, cold, spilled */
};

static int ukey_cmp(const void *a, const void *b) {
  const struct ukey *x = a, *y = b;
  int d = strcmp(x->tenant, y->tenant);

  return d != 0 ? d : strcmp(x->pool, y->pool);
}

/* Pool <pool> of cluster <v> as a label: a tenant's own pool is that
 * tenant's business when /metrics is open. */
static const char *pool_label(const struct fr_adapter_view *v, const char *pool, int all_pools) {
  size_t k;

  if (all_pools || pool[0] == '\0')
    return pool;
  for (k = 0; k < v->npools; k++)
    if (strcmp(v->pools[k].name, pool) == 0 && v->pools[k].owner != NULL)
      return "_private";
  return pool;
}

/* The merged label sets of cluster <i>, sorted; *<n> of them. NULL when
 * out of memory (or none). */
static struct ukey *usage_keys(struct router *r, size_t i, const struct fr_adapter_view *v, int all_pools, size_t *n) {
  struct fr_adapter *a = r->adapters[i];
  const struct fr_config_cost *price = &r->cfg->clusters[i].cost;
  size_t rows = fr_adapter_usage_rows(a), cap = rows + r->ntenants * (v->npools + 1), k, t, out = 0;
  struct ukey *keys = calloc(cap ? cap : 1, sizeof(*keys));
  struct fr_adapter_usage u;

  *n = 0;
  if (keys == NULL)
    return NULL;
  for (k = 0; k < rows && fr_adapter_usage_row(a, k, &u) == 0; k++) {
    struct ukey *e = &keys[out++];
    e->tenant = tenant_label(r, u.tenant);
    e->pool = pool_label(v, u.pool, all_pools);
    e->v[0] = u.sandbox_seconds;
    e->v[1] = u.cpu_core_seconds;
    e->v[2] = u.memory_gib_seconds;
    e->v[3] = u.gpu_seconds;
    e->v[4] = fr_cost_usage_dollars(price, u.sandbox_seconds, u.cpu_core_seconds, u.memory_gib_seconds, u.gpu_seconds);
    e->created[0] = (double)u.created_warm;
    e->created[1] = (double)u.created_cold;
    e->created[2] = (double)u.created_spilled;
  }
  /* Every configured tenant's creates series exist from the start (at 0)
   * for the default shape and each pool it may use here: Prometheus'
   * increase() never sees the first step of a series that is born at 1. */
  for (t = 0; t < r->ntenants; t++) {
    for (k = 0; k <= v->npools; k++) {
      const struct fr_adapter_pool_view *pv = k < v->npools ? &v->pools[k] : NULL;
      struct ukey *e;
      if (pv != NULL && pv->owner != NULL && strcmp(pv->owner, r->tenants[t]->name) != 0)
        continue; /* another tenant's pool */
      e = &keys[out++];
      e->tenant = r->tenants[t]->name;
      e->pool = pv != NULL ? pool_label(v, pv->name, all_pools) : "";
      e->declared_only = 1;
    }
  }
  qsort(keys, out, sizeof(*keys), ukey_cmp);
  for (k = 0, *n = 0; k < out; k++) {
    struct ukey *d = *n > 0 ? &keys[*n - 1] : NULL;
    size_t j;
    if (d != NULL && ukey_cmp(d, &keys[k]) == 0) {
      for (j = 0; j < 5; j++)
        d->v[j] += keys[k].v[j];
      for (j = 0; j < 3; j++)
        d->created[j] += keys[k].created[j];
      d->declared_only &= keys[k].declared_only;
      continue;
    }
    keys[(*n)++] = keys[k];
  }
  return keys;
}

static void declare_failures(struct router *r, const char *tenant, const char *pool) {
  struct fr_buf l;

  fr_buf_init(&l);
  metrics_label(&l, "tenant", tenant);
  metrics_label(&l, "pool", pool);
  metrics_inc(r->metrics, "fedrouter_sandbox_create_failures_total", l.data ? l.data : "", 0);
  fr_buf_free(&l);
}

static void usage_labels(struct fr_buf *l, const struct ukey *e, const struct fr_adapter_view *v) {
  fr_buf_reset(l);
  metrics_label(l, "tenant", e->tenant);
  metrics_label(l, "pool", e->pool);
  metrics_label(l, "region", v->region);
  metrics_label(l, "cluster", v->name);
}

static void render_usage(struct router *r, struct fr_buf *b, int all_pools) {
  static const struct family fams[] = {
      {"fedrouter_sandbox_seconds_total", "counter", "Seconds of live sandboxes, integrated from the cluster's state."},
      {"fedrouter_cpu_core_seconds_total", "counter", "Requested cpu cores of live sandboxes, integrated over time."},
      {"fedrouter_memory_gib_seconds_total", "counter", "Requested memory (GiB) of live sandboxes, integrated over time."},
      {"fedrouter_gpu_seconds_total", "counter", "Requested GPUs of live sandboxes, integrated over time."},
      {"fedrouter_cost_dollars_total", "counter", "What the live sandboxes cost, by the cluster's cost model."},
  };
  static const char *const outcomes[] = {"warm", "cold", "spilled"};
  struct fr_adapter_view *views = calloc(r->nadapters ? r->nadapters : 1, sizeof(*views));
  struct ukey **keys = calloc(r->nadapters ? r->nadapters : 1, sizeof(*keys));
  size_t *nkeys = calloc(r->nadapters ? r->nadapters : 1, sizeof(*nkeys));
  size_t f, i, k, o;
  struct fr_buf l, lo;

  fr_buf_init(&l);
  fr_buf_init(&lo);
  if (views == NULL || keys == NULL || nkeys == NULL)
    goto out;
  for (i = 0; i < r->nadapters; i++) {
    fr_adapter_view(r->adapters[i], &views[i]);
    keys[i] = usage_keys(r, i, &views[i], all_pools, &nkeys[i]);
  }
  /* The failures counter of every configured tenant exists from the start
   * too, for the default shape and every pool it may use (see above). */
  for (i = 0; i < r->ntenants; i++) {
    declare_failures(r, r->tenants[i]->name, "");
    for (k = 0; k < r->nadapters; k++)
      for (o = 0; o < views[k].npools; o++)
        if (views[k].pools[o].owner == NULL)
          declare_failures(r, r->tenants[i]->name, views[k].pools[o].name);
        else if (strcmp(views[k].pools[o].owner, r->tenants[i]->name) == 0)
          declare_failures(r, r->tenants[i]->name, "_private"); /* count_failed()'s label */
  }
  for (f = 0; f < FR_ARRAY_SIZE(fams); f++) {
    head(b, fams[f].name, fams[f].type, fams[f].help);
    for (i = 0; i < r->nadapters; i++) {
      if (f == 4 && !fr_cost_known(&r->cfg->clusters[i].cost))
        continue; /* no price: no cost series, rather than a false $0 */
      for (k = 0; k < nkeys[i]; k++) {
        if (keys[i][k].declared_only)
          continue;
        usage_labels(&l, &keys[i][k], &views[i]);
        sample(b, fams[f].name, l.data, keys[i][k].v[f]);
      }
    }
  }
  head(b, "fedrouter_sandbox_creates_total", "counter",
       "Sandboxes that appeared in the cluster's state: a pod created (cold) or a warm pod claimed (warm), or either "
       "placed away from its plan's first choice (spilled).");
  for (i = 0; i < r->nadapters; i++)
    for (k = 0; k < nkeys[i]; k++)
      for (o = 0; o < 3; o++) {
        usage_labels(&l, &keys[i][k], &views[i]);
        fr_buf_reset(&lo);
        fr_buf_puts(&lo, l.data);
        metrics_label(&lo, "outcome", outcomes[o]);
        sample(b, "fedrouter_sandbox_creates_total", lo.data, keys[i][k].created[o]);
      }
out:
  for (i = 0; keys != NULL && i < r->nadapters; i++)
    free(keys[i]);
  free(keys);
  free(nkeys);
  free(views);
  fr_buf_free(&l);
  fr_buf_free(&lo);
}

int metrics_render(struct router *r, struct fr_buf *out, int all_pools) {
  struct metrics *m = r->metrics;
  size_t f, i, k;

  render_gauges(r, out, all_pools);
  render_usage(r, out, all_pools);
  for (f = 0; f < sizeof(recorded) / sizeof(recorded[0]); f++) {
    const char *name = recorded[f].name;
    int hist = strcmp(recorded[f].type, "histogram") == 0;
    head(out, name, recorded[f].type, recorded[f].help);
    for (i = 0; m != NULL && i < m->n; i++) {
      struct series *s = &m->v[i];
      if (s->family != f)
        continue;
      if (!hist) {
        sample(out, name, s->labels, s->value);
        continue;
      }
      for (k = 0; k < NBUCKETS; k++)
        fr_buf_printf(out, "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", name, s->labels, *s->labels ? "," : "",
                      bucket_le[k], s->buckets[k]);
      fr_buf_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, s->labels, *s->labels ? "," : "",
                    s->count);
      if (*s->labels) {
        fr_buf_printf(out, "%s_sum{%s} %.17g\n", name, s->labels, s->sum);
        fr_buf_printf(out, "%s_count{%s} %" PRIu64 "\n", name, s->labels, s->count);
      } else {
        fr_buf_printf(out, "%s_sum %.17g\n", name, s->sum);
        fr_buf_printf(out, "%s_count %" PRIu64 "\n", name, s->count);
      }
    }
  }
  return out->data != NULL ? 0 : -ENOMEM;
}
