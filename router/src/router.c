/* router.c - the fedrouter HTTP API: authentication, request ids, JSON
 * errors, the access log, and the endpoints that need no sandbox work
 * (health, readiness, /metrics, the dashboard, clusters, events, policy);
 * /v1/sandboxes, /v1/pools and /v1/placement go on to sandboxes.c, /e2b/
 * to e2b.c.
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
#include "metrics.h"
#include "router.h"
#include "routes.h"

/* ---------------------------------------------------------------------- */
/* responses                                                               */

static void send_json(struct fr_http_req *req, int status, json_t *body, const char *extra) {
  api_reply(api_req_of(req), status, body, extra);
}

void router_error(struct fr_http_req *req, int status, const char *code, const char *message,
                  const char *extra_headers) {
  api_fail(api_req_of(req), status, code, message, extra_headers);
}

void router_note(struct fr_http_req *req, const char *key, const char *value) {
  struct fr_buf b;
  size_t used = strlen(req->note);

  fr_buf_init(&b);
  fr_buf_printf(&b, ",\"%s\":", key);
  fr_buf_put_json_str(&b, value ? value : "", value ? strlen(value) : 0);
  /* A note that does not fit is dropped whole rather than cut mid-JSON. */
  if (b.data != NULL && used + b.len < sizeof(req->note))
    memcpy(req->note + used, b.data, b.len + 1);
  fr_buf_free(&b);
}

void router_event(struct router *r, const char *cluster, const char *reason, const char *request_id,
                  const char *tenant) {
  struct router_event *e = &r->events[r->next_event];

  snprintf(e->tenant, sizeof(e->tenant), "%s", tenant ? tenant : "");

  e->t_ms = fr_wall_ms();
  snprintf(e->cluster, sizeof(e->cluster), "%s", cluster);
  snprintf(e->reason, sizeof(e->reason), "%s", reason);
  snprintf(e->request_id, sizeof(e->request_id), "%s", request_id ? request_id : "");
  r->next_event = (r->next_event + 1) % FR_ARRAY_SIZE(r->events);
  if (r->nevents < FR_ARRAY_SIZE(r->events))
    r->nevents++;
}

void router_cluster_cost(struct router *r, size_t i, const struct fr_adapter_view *v, struct router_cost *out) {
  const struct fr_config_cluster *cc = &r->cfg->clusters[i];

  memset(out, 0, sizeof(*out));
  out->known = fr_cost_known(&cc->cost);
  /* Both prices are linear, so the view's running sums are enough. */
  out->now = fr_cost_fleet_hour(&cc->cost, v->sandboxes, v->sandbox_cpu_m, v->sandbox_mem_b);
  out->hosted = fr_cost_hosted_hour(&r->cfg->hosted, v->sandbox_cpu_m, v->sandbox_mem_b);
  out->capacity = (double)fr_adapter_total_slots(r->adapters[i], 1000, 2147483648LL) *
                  fr_cost_sandbox_hour(&cc->cost, 1000, 2147483648LL);
}

void router_request_done(const struct fr_http_req *req, int status, size_t bytes, uint64_t ms, void *arg) {
  struct router *r = arg;
  const char *route = route_label(req->method, req->path);
  struct fr_buf l, line;
  char st[8], ts[32];
  int64_t now = fr_wall_ms();

  snprintf(st, sizeof(st), "%d", status);
  fr_buf_init(&l);
  metrics_label(&l, "route", route);
  metrics_label(&l, "method", req->method ? req->method : "-");
  metrics_label(&l, "status", st);
  metrics_inc(r->metrics, "fedrouter_http_requests_total", l.data ? l.data : "", 1);
  fr_buf_reset(&l);
  metrics_label(&l, "route", route);
  metrics_observe(r->metrics, "fedrouter_http_request_duration_seconds", l.data ? l.data : "", ms / 1000.0);
  fr_buf_free(&l);
  if (strcmp(route, "/metrics") == 0 || strcmp(route, "/healthz") == 0 || strcmp(route, "/readyz") == 0)
    return; /* scrapes and probes would drown the access log */
  /* One JSON line per request (docs/metrics.md). */
  fr_time_rfc3339(now / 1000, ts);
  ts[19] = '\0';
  fr_buf_init(&line);
  fr_buf_printf(&line, "{\"time\":\"%s.%03dZ\",\"method\":", ts, (int)(now % 1000));
  fr_buf_put_json_str(&line, req->method ? req->method : "-", req->method ? strlen(req->method) : 1);
  fr_buf_puts(&line, ",\"route\":");
  fr_buf_put_json_str(&line, route, strlen(route));
  fr_buf_puts(&line, ",\"path\":");
  fr_buf_put_json_str(&line, req->path ? req->path : "-", req->path ? strlen(req->path) : 1);
  fr_buf_printf(&line, ",\"status\":%d,\"duration_ms\":%" PRIu64 ",\"bytes\":%zu,\"peer\":", status, ms, bytes);
  fr_buf_put_json_str(&line, req->peer_ip ? req->peer_ip : "", req->peer_ip ? strlen(req->peer_ip) : 0);
  fr_buf_puts(&line, req->note);
  fr_buf_puts(&line, "}\n");
  if (line.data != NULL)
    fwrite(line.data, 1, line.len, stderr);
  fr_buf_free(&line);
}

/* ---------------------------------------------------------------------- */
/* auth                                                                    */

static int is_loopback(const char *ip) {
  return strncmp(ip, "127.", 4) == 0 || strcmp(ip, "::1") == 0 || strncmp(ip, "::ffff:127.", 11) == 0;
}

int router_tenants_init(struct router *r) {
  size_t i, n = r->cfg->ntenants ? r->cfg->ntenants : 1;

  r->tenants = calloc(n, sizeof(*r->tenants));
  if (r->tenants == NULL)
    return -ENOMEM;
  r->ntenants = n;
  for (i = 0; i < n; i++) {
    struct tenant_state *t = &r->tenants[i];
    if (r->cfg->ntenants == 0) {
      /* the loopback-only router: one user, the defaults of a tenant */
      t->name = "local";
      t->max_inflight = 4096;
      t->max_execs = 2048;
      t->max_file_bytes = FR_DEFAULT_TENANT_FILE_BYTES;
      t->admin = 1;
      t->secret = FR_LOCAL_SECRET;
    } else {
      t->name = r->cfg->tenants[i].name;
      t->max_inflight = r->cfg->tenants[i].max_requests_in_flight;
      t->max_execs = r->cfg->tenants[i].max_concurrent_execs;
      t->max_sandboxes = r->cfg->tenants[i].max_sandboxes;
      t->max_pool_replicas = r->cfg->tenants[i].max_pool_replicas;
      t->max_file_bytes = r->cfg->tenants[i].max_file_bytes;
      t->admin = r->cfg->tenants[i].admin;
      t->secret = r->cfg->tenants[i].secret;
      t->network = r->cfg->tenants[i].network;
    }
  }
  return 0;
}

struct tenant_state *router_tenant(struct router *r, const char *name) {
  size_t i;

  for (i = 0; i < r->ntenants; i++)
    if (strcmp(r->tenants[i].name, name) == 0)
      return &r->tenants[i];
  return NULL;
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

const char *api_tenant_of_bearer(struct router *r, const struct fr_http_req *req) {
  const char *h = fr_http_req_header(req, "Authorization");
  const struct fr_config_tenant *t;

  if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0 || h[7] == '\0' ||
      (t = fr_config_tenant_by_token(r->cfg, h + 7)) == NULL)
    return NULL;
  return t->name;
}

/* Returns the tenant name for <req>, or NULL after answering 401/403. */
static const char *authenticate(struct router *r, struct fr_http_req *req) {
  const char *h = fr_http_req_header(req, "Authorization");
  const struct fr_config_tenant *t;

  if (r->cfg->ntenants == 0) {
    /* No tenants configured: a single-user router, reachable from this
     * machine only. */
    if (!is_loopback(req->peer_ip)) {
      router_error(req, 403, "forbidden",
                   "this router has no tenants configured and accepts loopback clients only", NULL);
      return NULL;
    }
    return "local";
  }
  if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0 || h[7] == '\0') {
    router_error(req, 401, "unauthorized",
                 "missing bearer token: send Authorization: Bearer <token>",
                 "WWW-Authenticate: Bearer realm=\"fedrouter\"\r\n");
    return NULL;
  }
  t = fr_config_tenant_by_token(r->cfg, h + 7);
  if (t == NULL) {
    router_error(req, 401, "unauthorized", "unknown token",
                 "WWW-Authenticate: Bearer realm=\"fedrouter\", error=\"invalid_token\"\r\n");
    return NULL;
  }
  return t->name;
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
  if (metrics_render(q->r, &m, q->r->cfg->metrics_token_sha256[0] != '\0') == 0)
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

int router_admit(struct api_req *q) {
  const char *tenant = authenticate(q->r, q->req);

  if (tenant == NULL)
    return -1;
  router_note(q->req, "tenant", tenant);
  snprintf(q->tenant, sizeof(q->tenant), "%s", tenant);
  q->ts = router_tenant(q->r, tenant);
  /* Admission: a tenant with too much going at once waits, others not. */
  if (q->ts != NULL && q->ts->inflight >= q->ts->max_inflight) {
    char msg[200];
    snprintf(msg, sizeof(msg), "tenant %s has %" PRId64 " requests in flight (max_requests_in_flight)", tenant,
             q->ts->inflight);
    api_reply(q, 429, api_limit_body(msg, "max_requests_in_flight"), "Retry-After: 1\r\n");
    return -1;
  }
  return 0;
}

/* ---------------------------------------------------------------------- */
/* dispatch                                                                */

static void handle(struct fr_http_req *req, struct router *r, int health_only) {
  const char *rid = fr_http_req_header(req, "X-Request-Id");
  char gen[33];
  struct api_req *q;

  /* Every response carries a request id: the client's if it sent a sane
   * one, else a fresh one. */
  if (rid == NULL || *rid == '\0' || strlen(rid) > 128 || strpbrk(rid, "\r\n") != NULL) {
    unsigned char raw[16];
    size_t i;
    fr_random_bytes(raw, sizeof(raw));
    for (i = 0; i < sizeof(raw); i++)
      snprintf(gen + 2 * i, 3, "%02x", raw[i]);
    rid = gen;
  }
  /* The request's record (api.h): its id for every answer, its tenant,
   * and the reference a handler that answers later takes. */
  q = api_req_new(r, req, rid);
  if (q == NULL) {
    static const char oom[] = "{\"error\":{\"code\":\"out_of_memory\",\"message\":\"the router is out of memory\"}}";
    fr_http_respond(req, 503, "application/json", NULL, oom, sizeof(oom) - 1);
    return;
  }
  router_note(req, "request_id", rid);

  /* A path that a server's normalization could turn into another path goes
   * no further (fr/urlsafe.h): dot segments, encoded slashes, ';', NUL...
   * nothing below can then be steered outside the route it matched. */
  {
    const char *why, *qm = strchr(req->url, '?');
    size_t plen = qm != NULL ? (size_t)(qm - req->url) : strlen(req->url);
    char msg[200];
    if (fr_url_path_check(req->url, plen, &why) != 0) {
      snprintf(msg, sizeof(msg), "the request path is refused: it holds %s", why);
      api_fail(q, 400, "invalid_path", msg, NULL);
      api_req_unref(q);
      return;
    }
  }
  /* While shutting down every request still gets its answer: the load
   * balancer stops sending once /readyz fails, and what was already on its
   * way (also after the listener closed, on open connections) is served.
   * A Host naming a sandbox's port (a preview URL) is the sandbox's. */
  if (health_only || !ports_host(q))
    route_dispatch(q, health_only);
  api_req_unref(q);
}

void router_handle(struct fr_http_req *req, void *arg) {
  handle(req, arg, 0);
}

/* The health listener (health_listen): /healthz, /readyz and /metrics
 * only, on a socket of its own, so probes never wait in the accept queue
 * behind a burst of API connections. */
void router_handle_health(struct fr_http_req *req, void *arg) {
  handle(req, arg, 1);
}

int router_streams_body(const struct fr_http_req *req, void *arg) {
  (void)arg;
  return route_streams_body(req);
}
