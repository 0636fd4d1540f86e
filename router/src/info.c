/* info.c - the endpoints that need no sandbox work: health, readiness,
 * /metrics, the dashboard, clusters, events, policy, config and the queue
 * (route handlers of routes.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/config.h"
#include "fr/cost.h"
#include "fr/http.h"
#include "fr/log.h"
#include "fr/quantity.h"
#include "fr/urlsafe.h"
#include "fr/util.h"
#include "api.h"
#include "dashboard.h"
#include "queue.h"
#include "reload.h"
#include "metrics.h"
#include "router.h"
#include "route_types.h"
#include "tenants.h"

static void send_json(struct fr_http_req *req, int status, json_t *body, const char *extra) {
  api_reply(api_req_of(req), status, body, extra);
}

/* /metrics is open unless the config names a metrics token; then only
 * that token (compared as its SHA-256, in constant time) reads it. */
static int metrics_allowed(struct router *r, struct fr_http_req *req) {
  const char *h = fr_http_req_header(req, "Authorization");
  char hash[65];

  if (r->cfg->metrics_token_sha256[0] == '\0')
    return 1;
  if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0 || h[7] == '\0')
    return 0;
  fr_sha256_hex(h + 7, strlen(h + 7), hash);
  return fr_secret_equal(hash, r->cfg->metrics_token_sha256);
}

/* ---------------------------------------------------------------------- */
/* endpoints                                                               */

static json_t *slot_json(const char *pool, int64_t cpu_m, int64_t mem_b, int64_t free_slots, int64_t total) {
  json_t *j = json_pack("{s:f,s:f,s:I,s:I}", "cpus", cpu_m / 1000.0, "memory_gb", mem_b / 1073741824.0, "free",
                        (json_int_t)free_slots, "total", (json_int_t)total);

  if (j != NULL)
    json_object_set_new(j, "pool", pool ? json_string(pool) : json_null());
  return j;
}

/* Free and total sandbox slots for each pool's shape, and for the default
 * shape of a create without pool (1 cpu, 2 GiB). */
static json_t *slots_json(struct fr_adapter *a) {
  json_t *arr = json_array();
  struct fr_adapter_view v;
  size_t k;

  int64_t fs, ts;

  json_array_append_new(arr, slot_json(NULL, 1000, 2147483648LL, fr_adapter_free_slots(a, 1000, 2147483648LL),
                                       fr_adapter_total_slots(a, 1000, 2147483648LL)));
  fr_adapter_view(a, &v);
  for (k = 0; k < v.npools; k++) {
    if (v.pools[k].image[0] == '\0') /* a pool whose shape is unreadable has no slots to show */
      continue;
    /* Its pod options (GPUs, node selector, ...) narrow the nodes that count. */
    fr_adapter_pool_slots(a, &v.pools[k], &fs, &ts);
    json_array_append_new(arr, slot_json(v.pools[k].name, v.pools[k].cpu_m, v.pools[k].mem_b, fs, ts));
  }
  return arr;
}

/* Cluster <idx> as tenant <ts> may see it: the cluster's own figures
 * (health, capacity, cost), but of sandboxes and pools only the tenant's
 * own and the shared pools; an admin tenant (<ts> NULL too: the
 * loopback-only router) sees every tenant's. */
static json_t *cluster_json(struct router *r, size_t idx, const struct tenant_state *ts) {
  struct fr_adapter *a = r->adapters[idx];
  struct fr_adapter_view v;
  struct router_cost cost;
  json_t *pools = json_array(), *j, *quota;
  int all = ts == NULL || ts->admin;
  int64_t warm = 0, sandboxes;
  size_t i;

  fr_adapter_view(a, &v);
  for (i = 0; i < v.npools; i++) {
    if (!all && v.pools[i].owner != NULL && strcmp(v.pools[i].owner, ts->name) != 0)
      continue;
    warm += v.pools[i].ready;
    json_array_append_new(pools, json_pack("{s:s,s:I,s:I}", "name", v.pools[i].name, "target",
                                           (json_int_t)v.pools[i].target, "ready",
                                           (json_int_t)v.pools[i].ready));
  }
  sandboxes = all ? v.sandboxes : fr_adapter_tenant_sandboxes(a, ts->name);
  if (all)
    warm = v.warm_pods;
  quota = json_object();
  if (v.quota_pods >= 0)
    json_object_set_new(quota, "pods", json_integer(v.quota_pods));
  if (v.quota_cpu_m >= 0)
    json_object_set_new(quota, "cpu_millis", json_integer(v.quota_cpu_m));
  if (v.quota_mem_b >= 0)
    json_object_set_new(quota, "memory_bytes", json_integer(v.quota_mem_b));
  j = json_pack("{s:s,s:s,s:s,s:b,s:s,s:b,s:f,s:{s:I,s:I},s:{s:{s:I,s:I},s:{s:I,s:I},s:{s:I,s:I}},"
                "s:b,s:o,s:o,s:I,s:I,s:I,s:o}",
                "name", v.name, "region", v.region, "server", v.server, "healthy", v.healthy,
                "breaker", v.breaker, "synced", v.synced, "api_latency_ms", v.api_latency_ms, "nodes",
                "total", (json_int_t)v.nodes, "ready", (json_int_t)v.nodes_ready, "capacity",
                "cpu_millis", "allocatable", (json_int_t)v.alloc_cpu_m, "requested", (json_int_t)v.used_cpu_m,
                "memory_bytes", "allocatable", (json_int_t)v.alloc_mem_b, "requested",
                (json_int_t)v.used_mem_b, "pods", "allocatable", (json_int_t)v.alloc_pods,
                "requested", (json_int_t)v.used_pods, "usage_counts_all_pods", v.usage_exact,
                "quota_room", quota, "slots", slots_json(a), "inflight_creates", (json_int_t)(v.inflight + v.reserved),
                "sandboxes", (json_int_t)sandboxes, "warm_pods", (json_int_t)warm, "pools", pools);
  if (j != NULL && v.last_contact_age_ms != UINT64_MAX)
    json_object_set_new(j, "last_contact_ms_ago", json_integer((json_int_t)v.last_contact_age_ms));
  router_cluster_cost(r, idx, &v, &cost);
  if (j != NULL && cost.known)
    json_object_set_new(j, "cost", json_pack("{s:f,s:f,s:f,s:f}", "now", cost.now, "capacity", cost.capacity,
                                             "hosted_equivalent", cost.hosted, "savings", cost.hosted - cost.now));
  else if (j != NULL)
    json_object_set_new(j, "cost", json_pack("{s:n,s:f}", "now", "hosted_equivalent", cost.hosted));
  return j;
}

static void get_clusters(struct router *r, struct fr_http_req *req, const struct tenant_state *ts) {
  json_t *arr = json_array();
  size_t i;

  for (i = 0; i < r->nadapters; i++)
    json_array_append_new(arr, cluster_json(r, i, ts));
  send_json(req, 200, json_pack("{s:o}", "clusters", arr), NULL);
}

static void get_readyz(struct router *r, struct fr_http_req *req) {
  struct fr_buf waiting;
  size_t i;

  fr_buf_init(&waiting);
  for (i = 0; i < r->nadapters; i++) {
    struct fr_adapter_view v;
    fr_adapter_view(r->adapters[i], &v);
    if (!v.synced)
      fr_buf_printf(&waiting, "%s%s", waiting.len ? ", " : "", v.name);
  }
  if (r->shutting_down) {
    router_error(req, 503, "shutting_down", "the router is shutting down", NULL);
  } else if (waiting.len > 0) {
    char msg[600];
    snprintf(msg, sizeof(msg), "waiting for the first sync of: %s", waiting.data);
    router_error(req, 503, "not_ready", msg, "Retry-After: 1\r\n");
  } else {
    send_json(req, 200, json_pack("{s:s,s:I}", "status", "ready", "clusters", (json_int_t)r->nadapters), NULL);
  }
  fr_buf_free(&waiting);
}

/* ---------------------------------------------------------------------- */
/* the handlers of router.c's own routes (routes.c)                         */

void router_get_healthz(struct api_req *q, const struct route_params *p) {
  (void)p;
  send_json(q->req, 200, json_pack("{s:s}", "status", "ok"), NULL);
}

void router_get_readyz(struct api_req *q, const struct route_params *p) {
  (void)p;
  get_readyz(q->r, q->req);
}

void router_get_metrics(struct api_req *q, const struct route_params *p) {
  struct fr_buf m;

  (void)p;
  if (!metrics_allowed(q->r, q->req)) {
    router_error(q->req, 401, "unauthorized", "/metrics wants the metrics token: Authorization: Bearer <token>",
                 "WWW-Authenticate: Bearer realm=\"fedrouter-metrics\"\r\n");
    return;
  }
  fr_buf_init(&m);
  /* Open (no metrics token): no tenant's pool names. */
  /* The router's own figures, then the create queue's and the reloads'
   * (metrics.c knows neither: they count into it). */
  metrics_render(q->r, &m, q->r->cfg->metrics_token_sha256[0] != '\0');
  queue_metrics(q->r, &m);
  reload_metrics(q->r, &m);
  if (m.data != NULL)
    fr_http_respond(q->req, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, m.data, m.len);
  else
    router_error(q->req, 503, "out_of_memory", "the router is out of memory", NULL);
  fr_buf_free(&m);
}

void router_get_dashboard(struct api_req *q, const struct route_params *p) {
  size_t len;
  const char *html = dashboard_html(&len);

  (void)p;
  /* The page itself is public (it holds no data); it asks the API with
   * the user's token. */
  fr_http_respond(q->req, 200, "text/html; charset=utf-8",
                  "Cache-Control: no-cache\r\nContent-Security-Policy: default-src 'self'; "
                  "style-src 'self' 'unsafe-inline'; script-src 'self' 'unsafe-inline'\r\n",
                  html, len);
}

void router_get_clusters(struct api_req *q, const struct route_params *p) {
  (void)p;
  get_clusters(q->r, q->req, q->ts);
}

void router_get_events(struct api_req *q, const struct route_params *p) {
  struct router *r = q->r;
  json_t *arr = json_array();
  size_t n;

  (void)p;
  /* newest first */
  for (n = 0; n < r->nevents; n++) {
    const struct router_event *e =
        &r->events[(r->next_event + FR_ARRAY_SIZE(r->events) - 1 - n) % FR_ARRAY_SIZE(r->events)];
    char t[21];
    if (strcmp(e->tenant, q->tenant) != 0)
      continue; /* another tenant's: its clusters' names are not secret, its requests are */
    fr_time_rfc3339(e->t_ms / 1000, t);
    json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:s}", "time", t, "cluster", e->cluster, "reason", e->reason,
                                         "request_id", e->request_id));
  }
  send_json(q->req, 200, json_pack("{s:o}", "events", arr), NULL);
}

void router_get_policy(struct api_req *q, const struct route_params *p) {
  (void)p;
  placement_policy_json(q->r, q->req, q->rid);
}

void router_get_config(struct api_req *q, const struct route_params *p) {
  (void)p;
  /* File paths, tenant names, token names and the last error: the
   * operator's, not a tenant's. */
  if (q->ts == NULL || !q->ts->admin) {
    api_fail(q, 403, "forbidden", "GET /v1/config is for admin tenants", NULL);
    return;
  }
  api_reply(q, 200, reload_json(q->r), NULL);
}

void router_get_queue(struct api_req *q, const struct route_params *p) {
  (void)p;
  /* A tenant sees its own line and the totals; an admin every tenant's. */
  api_reply(q, 200, queue_json(q->r, q->ts, q->ts == NULL || q->ts->admin), NULL);
}

