/* server.c - fedrouter-gateway's HTTP handler: health, metrics, and for
 * every other request the checks that decide whether it is forwarded
 * (docs/gateway.md, "What is refused").
 *
 * Order of the checks, each answering before the next runs:
 *   1. method (405) and the URL: prefix, namespace, pod, port, and a path
 *      and query no server could normalize into another (400);
 *   2. the signature over (cluster, namespace, pod, port, expiry) (401);
 *   3. the namespace is one this gateway watches (403), its cache synced
 *      (503), the pod in it (404 sandbox_not_found; also while it is being
 *      deleted), not on the host network (403), Ready with an address
 *      (404 sandbox_not_ready) that no other cached pod claims (503);
 *   4. the route: the agent's internal paths on its port (403);
 *   5. the per-sandbox limit (429);
 *   6. the head sent upstream is built from these checked parts only.
 * Nothing is dialled before all have passed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/buf.h"
#include "fr/kube.h"
#include "fr/log.h"
#include "fr/podcache.h"
#include "fr/util.h"
#include "fr/version.h"
#include "gateway.h"
#include "target.h"

#define LOGC "gateway"

static const char *const outcome_names[GW_OUT_COUNT] = {
    "forwarded", "tunnel", "bad_request", "unauthenticated", "forbidden", "not_found",
    "limited", "unavailable", "upstream_error", "cut", "client_gone",
};

/* Seconds; from a pod on the same node to a command that takes a minute
 * to print its first line. */
static const double ttfb_le[12] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 60};

/* ------------------------------------------------------------ per-sandbox counts */

static uint64_t key_hash(const char *s) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */

  for (; *s != '\0'; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static struct gw_sbcount *sb_slot(struct gw *g, const char *key) {
  size_t i = (size_t)key_hash(key) & (g->sb_cap - 1);

  while (g->sb[i].key != NULL && strcmp(g->sb[i].key, key) != 0)
    i = (i + 1) & (g->sb_cap - 1);
  return &g->sb[i];
}

/* One more open exchange for <key>, if under the limit: 1 counted, 0 at
 * the limit, -ENOMEM. */
static int sb_take(struct gw *g, const char *key) {
  struct gw_sbcount *e;

  if (g->sb_n + 1 > g->sb_cap / 2) {
    size_t cap = g->sb_cap ? g->sb_cap * 2 : 256, i, ocap = g->sb_cap;
    struct gw_sbcount *old = g->sb, *nt = calloc(cap, sizeof(*nt));
    if (nt == NULL)
      return -ENOMEM;
    g->sb = nt;
    g->sb_cap = cap;
    for (i = 0; i < ocap; i++)
      if (old[i].key != NULL)
        *sb_slot(g, old[i].key) = old[i];
    free(old);
  }
  e = sb_slot(g, key);
  if (e->key == NULL) {
    if ((e->key = strdup(key)) == NULL)
      return -ENOMEM;
    g->sb_n++;
  }
  if (e->n >= g->opts.max_per_sandbox)
    return 0;
  e->n++;
  return 1;
}

void gw_count_done(struct gw *g, const char *key) {
  struct gw_sbcount *e;
  size_t i, j, home, mask;

  if (g->sb_cap == 0)
    return;
  e = sb_slot(g, key);
  if (e->key == NULL || (e->n > 0 && --e->n > 0))
    return;
  /* At zero the entry leaves; backward-shift deletion keeps probe runs
   * whole (as the HTTP core's per-address counts). */
  free(e->key);
  e->key = NULL;
  mask = g->sb_cap - 1;
  i = (size_t)(e - g->sb);
  for (j = (i + 1) & mask; g->sb[j].key != NULL; j = (j + 1) & mask) {
    home = (size_t)key_hash(g->sb[j].key) & mask;
    if (((j - home) & mask) >= ((j - i) & mask)) {
      g->sb[i] = g->sb[j];
      g->sb[j].key = NULL;
      g->sb[j].n = 0;
      i = j;
    }
  }
  g->sb_n--;
}

void gw_server_free(struct gw *g) {
  size_t i;

  for (i = 0; i < g->sb_cap; i++)
    free(g->sb[i].key);
  free(g->sb);
  g->sb = NULL;
  g->sb_cap = g->sb_n = 0;
}

/* ------------------------------------------------------------ answers */

void gw_refuse(struct gw *g, struct fr_http_req *req, enum gw_outcome outcome, int status, const char *code,
               const char *message) {
  struct fr_buf b, h;

  g->m.outcomes[outcome]++;
  fr_buf_init(&b);
  fr_buf_init(&h);
  fr_buf_printf(&h, FR_GW_ERROR_HEADER ": %s\r\n", code);
  if (status == 429 || status == 503)
    fr_buf_puts(&h, "Retry-After: 1\r\n");
  fr_buf_printf(&b, "{\"error\":{\"code\":\"%s\",\"message\":", code);
  fr_buf_put_json_str(&b, message, strlen(message));
  fr_buf_puts(&b, "}}\n");
  /* The done callback logs it with this note. */
  snprintf(req->note, sizeof(req->note), "%s", code);
  if (b.data == NULL || h.data == NULL) {
    static const char oom[] = "{\"error\":{\"code\":\"out_of_memory\",\"message\":\"out of memory\"}}\n";
    fr_http_respond(req, 503, "application/json", FR_GW_ERROR_HEADER ": out_of_memory\r\nRetry-After: 1\r\n",
                    oom, sizeof(oom) - 1);
  } else {
    fr_http_respond(req, status, "application/json", h.data, b.data, b.len);
  }
  fr_buf_free(&b);
  fr_buf_free(&h);
}

int gw_ready(const struct gw *g) {
  size_t i;

  if (g->shutting_down)
    return 0;
  for (i = 0; i < g->opts.nnamespaces; i++)
    if (!fr_podcache_synced(g->caches[i]))
      return 0;
  return 1;
}

void gw_observe_ttfb(struct gw *g, double seconds) {
  size_t i;

  for (i = 0; i < FR_ARRAY_SIZE(ttfb_le); i++)
    if (seconds <= ttfb_le[i])
      g->m.ttfb_buckets[i]++;
  g->m.ttfb_count++;
  g->m.ttfb_sum += seconds;
}

/* ------------------------------------------------------------ health and metrics */

static void metrics(struct gw *g, struct fr_http_req *req) {
  struct fr_http_server_stats st;
  struct fr_informer_stats is;
  struct fr_buf b;
  size_t i;

  fr_buf_init(&b);
  fr_buf_printf(&b, "# HELP fedrouter_gateway_build_info The gateway's version.\n"
                    "# TYPE fedrouter_gateway_build_info gauge\n"
                    "fedrouter_gateway_build_info{version=\"%s\",cluster=\"%s\"} 1\n",
                FR_VERSION, g->opts.cluster);
  fr_buf_puts(&b, "# HELP fedrouter_gateway_requests_total Requests to forward, by how they ended.\n"
                  "# TYPE fedrouter_gateway_requests_total counter\n");
  for (i = 0; i < GW_OUT_COUNT; i++)
    fr_buf_printf(&b, "fedrouter_gateway_requests_total{outcome=\"%s\"} %" PRIu64 "\n", outcome_names[i],
                  g->m.outcomes[i]);
  fr_buf_puts(&b, "# HELP fedrouter_gateway_auth_failures_total Requests refused for their signature, by reason.\n"
                  "# TYPE fedrouter_gateway_auth_failures_total counter\n");
  for (i = FR_GW_MISSING; i <= FR_GW_BAD_SIGNATURE; i++)
    fr_buf_printf(&b, "fedrouter_gateway_auth_failures_total{reason=\"%s\"} %" PRIu64 "\n",
                  fr_gw_verdict_name((enum fr_gw_verdict)i), g->m.auth_failures[i]);
  fr_buf_printf(&b,
                "# HELP fedrouter_gateway_bytes_total Body and tunnel bytes forwarded, by direction.\n"
                "# TYPE fedrouter_gateway_bytes_total counter\n"
                "fedrouter_gateway_bytes_total{direction=\"to_sandbox\"} %" PRIu64 "\n"
                "fedrouter_gateway_bytes_total{direction=\"from_sandbox\"} %" PRIu64 "\n",
                g->m.bytes_to_sandbox, g->m.bytes_from_sandbox);
  fr_http_server_stats(g->http, &st);
  fr_buf_printf(&b,
                "# HELP fedrouter_gateway_connections Open connections from routers.\n"
                "# TYPE fedrouter_gateway_connections gauge\n"
                "fedrouter_gateway_connections %zu\n"
                "# HELP fedrouter_gateway_idle_connections Router connections idle between requests.\n"
                "# TYPE fedrouter_gateway_idle_connections gauge\n"
                "fedrouter_gateway_idle_connections %zu\n"
                "# HELP fedrouter_gateway_exchanges Requests being forwarded now (tunnels included).\n"
                "# TYPE fedrouter_gateway_exchanges gauge\n"
                "fedrouter_gateway_exchanges %zu\n"
                "# HELP fedrouter_gateway_tunnels Upgraded connections (WebSocket and others) open now.\n"
                "# TYPE fedrouter_gateway_tunnels gauge\n"
                "fedrouter_gateway_tunnels %zu\n"
                "# HELP fedrouter_gateway_upstream_connections Connections to sandbox pods open now.\n"
                "# TYPE fedrouter_gateway_upstream_connections gauge\n"
                "fedrouter_gateway_upstream_connections %zu\n"
                "# HELP fedrouter_gateway_upstream_idle_connections Of them, kept alive and idle.\n"
                "# TYPE fedrouter_gateway_upstream_idle_connections gauge\n"
                "fedrouter_gateway_upstream_idle_connections %zu\n"
                "# HELP fedrouter_gateway_upstream_reused_total Requests sent on a kept-alive connection.\n"
                "# TYPE fedrouter_gateway_upstream_reused_total counter\n"
                "fedrouter_gateway_upstream_reused_total %" PRIu64 "\n"
                "# HELP fedrouter_gateway_upstream_retries_total Requests sent again after a kept-alive "
                "connection failed before any answer.\n"
                "# TYPE fedrouter_gateway_upstream_retries_total counter\n"
                "fedrouter_gateway_upstream_retries_total %" PRIu64 "\n",
                fr_http_server_nconns(g->http), st.idle, g->nexchanges, g->ntunnels, g->nupconns, g->npooled,
                g->pool_hits, g->pool_retries);
  fr_buf_puts(&b, "# HELP fedrouter_gateway_upstream_ttfb_seconds From a request to the sandbox's answer head.\n"
                  "# TYPE fedrouter_gateway_upstream_ttfb_seconds histogram\n");
  for (i = 0; i < FR_ARRAY_SIZE(ttfb_le); i++)
    fr_buf_printf(&b, "fedrouter_gateway_upstream_ttfb_seconds_bucket{le=\"%g\"} %" PRIu64 "\n", ttfb_le[i],
                  g->m.ttfb_buckets[i]);
  fr_buf_printf(&b,
                "fedrouter_gateway_upstream_ttfb_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n"
                "fedrouter_gateway_upstream_ttfb_seconds_sum %.6f\n"
                "fedrouter_gateway_upstream_ttfb_seconds_count %" PRIu64 "\n",
                g->m.ttfb_count, g->m.ttfb_sum, g->m.ttfb_count);
  fr_buf_puts(&b, "# HELP fedrouter_gateway_pods Sandbox pods in the cache, by namespace.\n"
                  "# TYPE fedrouter_gateway_pods gauge\n");
  for (i = 0; i < g->opts.nnamespaces; i++)
    fr_buf_printf(&b, "fedrouter_gateway_pods{namespace=\"%s\"} %zu\n", g->opts.namespaces[i],
                  fr_podcache_size(g->caches[i]));
  fr_buf_puts(&b, "# HELP fedrouter_gateway_cache_synced 1 once the namespace's first list is in.\n"
                  "# TYPE fedrouter_gateway_cache_synced gauge\n");
  for (i = 0; i < g->opts.nnamespaces; i++)
    fr_buf_printf(&b, "fedrouter_gateway_cache_synced{namespace=\"%s\"} %d\n", g->opts.namespaces[i],
                  fr_podcache_synced(g->caches[i]));
  fr_buf_puts(&b, "# HELP fedrouter_gateway_cache_healthy 1 while the namespace's last list or watch worked.\n"
                  "# TYPE fedrouter_gateway_cache_healthy gauge\n");
  for (i = 0; i < g->opts.nnamespaces; i++)
    fr_buf_printf(&b, "fedrouter_gateway_cache_healthy{namespace=\"%s\"} %d\n", g->opts.namespaces[i],
                  fr_podcache_healthy(g->caches[i]));
  fr_buf_puts(&b, "# HELP fedrouter_gateway_cache_relists_total Complete lists of a namespace (1 + relists).\n"
                  "# TYPE fedrouter_gateway_cache_relists_total counter\n");
  for (i = 0; i < g->opts.nnamespaces; i++) {
    fr_podcache_stats(g->caches[i], &is);
    fr_buf_printf(&b, "fedrouter_gateway_cache_relists_total{namespace=\"%s\"} %" PRIu64 "\n",
                  g->opts.namespaces[i], is.lists);
  }
  fr_buf_printf(&b,
                "# HELP fedrouter_gateway_keys Keys in the signature key ring.\n"
                "# TYPE fedrouter_gateway_keys gauge\n"
                "fedrouter_gateway_keys %zu\n"
                "# HELP fedrouter_gateway_key_reloads_total Key ring reloads, by result.\n"
                "# TYPE fedrouter_gateway_key_reloads_total counter\n"
                "fedrouter_gateway_key_reloads_total{result=\"ok\"} %" PRIu64 "\n"
                "fedrouter_gateway_key_reloads_total{result=\"error\"} %" PRIu64 "\n"
                "# HELP fedrouter_gateway_ready 1 when /readyz answers 200.\n"
                "# TYPE fedrouter_gateway_ready gauge\n"
                "fedrouter_gateway_ready %d\n",
                g->ring.n, g->m.key_reloads, g->m.key_reload_errors, gw_ready(g));
  if (b.data == NULL) {
    gw_refuse(g, req, GW_OUT_UNAVAILABLE, 503, "out_of_memory", "out of memory");
    return;
  }
  fr_http_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, b.data, b.len);
  fr_buf_free(&b);
}

/* /healthz, /readyz, /metrics: 1 if <req> was one of them (answered). */
static int health(struct gw *g, struct fr_http_req *req) {
  static const char ok[] = "{\"status\":\"ok\"}\n";

  if (strcmp(req->path, "/healthz") == 0) {
    fr_http_respond(req, 200, "application/json", NULL, ok, sizeof(ok) - 1);
  } else if (strcmp(req->path, "/readyz") == 0) {
    if (gw_ready(g)) {
      fr_http_respond(req, 200, "application/json", NULL, ok, sizeof(ok) - 1);
    } else {
      static const char sd[] = "{\"error\":{\"code\":\"shutting_down\",\"message\":\"the gateway is stopping\"}}\n";
      static const char ns[] = "{\"error\":{\"code\":\"not_ready\",\"message\":\"the pod cache is not synced yet\"}}\n";
      if (g->shutting_down)
        fr_http_respond(req, 503, "application/json", "Retry-After: 1\r\n", sd, sizeof(sd) - 1);
      else
        fr_http_respond(req, 503, "application/json", "Retry-After: 1\r\n", ns, sizeof(ns) - 1);
    }
  } else if (strcmp(req->path, "/metrics") == 0) {
    metrics(g, req);
  } else {
    return 0;
  }
  return 1;
}

void gw_handle_health(struct fr_http_req *req, void *arg) {
  struct gw *g = arg;
  static const char nf[] = "{\"error\":{\"code\":\"not_found\",\"message\":"
                           "\"the health listener serves /healthz, /readyz and /metrics only\"}}\n";

  if ((strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0) || !health(g, req))
    fr_http_respond(req, 404, "application/json", NULL, nf, sizeof(nf) - 1);
}

/* A body up to this size is read whole before the request is forwarded:
 * a Connect RPC's JSON, a small file. Such a request can be sent again,
 * so it may use a kept-alive connection to the pod (proxy.c); a refusal
 * or an early answer keeps the router's connection; and a server reading
 * that little whole costs no memory to speak of. Larger and chunked
 * bodies stream. */
#define WHOLE_BODY_MAX 65536

int gw_stream_body(const struct fr_http_req *req, void *arg) {
  const char *cl = fr_http_req_header(req, "Content-Length");
  int64_t n;

  (void)arg;
  if (fr_http_req_header(req, "Transfer-Encoding") == NULL &&
      (cl == NULL || (fr_parse_int64(cl, 0, WHOLE_BODY_MAX, &n) == 0)))
    return 0;
  return strncmp(req->url, FR_GW_PREFIX, sizeof(FR_GW_PREFIX) - 1) == 0;
}

void gw_request_done(const struct fr_http_req *req, int status, size_t body_bytes, uint64_t duration_ms,
                     void *arg) {
  (void)arg;
  (void)body_bytes;
  /* Refusals are the gateway's own answers (a note carries their code);
   * forwarded answers and probes are not logged one by one. */
  if (req->note[0] != '\0')
    FR_INFO(LOGC, "refused %s %.200s from %s: %d %s (%" PRIu64 " ms)", req->method ? req->method : "-",
            req->url ? req->url : "-", req->peer_ip ? req->peer_ip : "-", status, req->note, duration_ms);
}

/* ------------------------------------------------------------ forwarding */

static struct fr_podcache *cache_of(struct gw *g, const char *ns) {
  size_t i;

  for (i = 0; i < g->opts.nnamespaces; i++)
    if (strcmp(g->opts.namespaces[i], ns) == 0)
      return g->caches[i];
  return NULL;
}

static int pod_sockaddr(const struct fr_pod_addr *p, int port, struct sockaddr_storage *ss) {
  memset(ss, 0, sizeof(*ss));
  if (p->family == 4) {
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    memcpy(&a->sin_addr, p->ip, 4);
    return 0;
  }
  if (p->family == 6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t)port);
    memcpy(&a->sin6_addr, p->ip, 16);
    return 0;
  }
  return -ENOENT;
}

static void forward(struct gw *g, struct fr_http_req *req) {
  struct fr_gw_target t;
  struct gw_refusal why;
  struct fr_podcache *pc;
  const struct fr_pod *pod;
  struct fr_pod_addr addr;
  const char *reason = NULL, *code = NULL, *route;
  enum fr_gw_verdict v;
  struct sockaddr_storage ss;
  struct fr_buf head;
  char ip[46], key[320];
  size_t roff;
  int64_t body;
  /* An upgrade as http-parser saw it (Connection: upgrade and an Upgrade
   * header): such a request is not streamed, its connection ends after
   * it. A stray Upgrade header on another request is hop-by-hop and
   * dropped. */
  int upgrade = !req->body_streaming && fr_http_req_header(req, "Upgrade") != NULL, rc;

  if (!gw_method_allowed(req->method)) {
    gw_refuse(g, req, GW_OUT_BAD_REQUEST, 405, "method_not_allowed",
              "the gateway forwards GET, HEAD, POST, PUT, PATCH, DELETE and OPTIONS");
    return;
  }
  if (fr_gw_parse(req->url, &t, &roff, &reason, &code) != 0) {
    gw_refuse(g, req, GW_OUT_BAD_REQUEST, 400, code, reason);
    return;
  }
  route = req->url + roff;
  v = fr_gw_verify(&g->ring, fr_http_req_header(req, FR_GW_AUTH_HEADER), g->opts.cluster, &t,
                   fr_wall_ms() / 1000, NULL);
  if (v != FR_GW_OK) {
    char msg[160];
    g->m.auth_failures[v]++;
    snprintf(msg, sizeof(msg), "no valid " FR_GW_AUTH_HEADER " for this target (%s)", fr_gw_verdict_name(v));
    FR_WARN(LOGC, "refused %s %s/%s:%d from %s: signature %s", req->method, t.ns, t.pod, t.port, req->peer_ip,
            fr_gw_verdict_name(v));
    gw_refuse(g, req, GW_OUT_UNAUTHENTICATED, 401, "unauthenticated", msg);
    return;
  }
  pc = cache_of(g, t.ns);
  if (pc == NULL) {
    gw_refuse(g, req, GW_OUT_FORBIDDEN, 403, "namespace_not_allowed",
              "this gateway does not serve sandboxes of that namespace");
    return;
  }
  if (!fr_podcache_synced(pc)) {
    gw_refuse(g, req, GW_OUT_UNAVAILABLE, 503, "not_ready", "the gateway has not listed the sandboxes yet");
    return;
  }
  pod = fr_podcache_get(pc, t.pod);
  /* A pod being deleted is gone for its callers: its address may be
   * handed to another pod at any moment. */
  if (pod == NULL || fr_pod_done(pod)) {
    gw_refuse(g, req, GW_OUT_NOT_FOUND, 404, "sandbox_not_found", "no such sandbox");
    return;
  }
  fr_podcache_addr(pc, t.pod, &addr);
  if (addr.host_network) {
    gw_refuse(g, req, GW_OUT_FORBIDDEN, 403, "target_not_allowed",
              "the sandbox runs on its node's network: its ports are the node's");
    return;
  }
  if (!pod->ready || addr.family == 0) {
    gw_refuse(g, req, GW_OUT_NOT_FOUND, 404, "sandbox_not_ready", "the sandbox is not ready");
    return;
  }
  if (fr_podcache_ip_holders(pc, &addr) != 1) {
    gw_refuse(g, req, GW_OUT_UNAVAILABLE, 503, "sandbox_address_conflict",
              "another pod claims the sandbox's address (the cache is catching up); try again");
    return;
  }
  if (gw_route_allowed(route, t.port == fr_pod_agent_port(pod), &why) != 0) {
    gw_refuse(g, req, GW_OUT_FORBIDDEN, why.status, why.code, why.message);
    return;
  }
  body = req->body_streaming ? gw_body_framing(req) : req->body_len > 0 ? (int64_t)req->body_len : GW_BODY_NONE;
  if (body == -EINVAL) {
    gw_refuse(g, req, GW_OUT_BAD_REQUEST, 400, "invalid_header", "Content-Length is not a number");
    return;
  }
  fr_buf_init(&head);
  fr_pod_addr_text(&addr, ip);
  rc = gw_upstream_head(&head, req->method, ip, t.port, route, req->headers, req->nheaders, body, upgrade,
                        "keep-alive", &why);
  if (rc != 0) {
    fr_buf_free(&head);
    gw_refuse(g, req, why.status == 503 ? GW_OUT_UNAVAILABLE : GW_OUT_BAD_REQUEST, why.status, why.code,
              why.message);
    return;
  }
  snprintf(key, sizeof(key), "%s/%s", t.ns, t.pod);
  rc = sb_take(g, key);
  if (rc <= 0) {
    fr_buf_free(&head);
    if (rc == 0)
      gw_refuse(g, req, GW_OUT_LIMITED, 429, "too_many_connections",
                "this sandbox already has as many open requests as the gateway allows");
    else
      gw_refuse(g, req, GW_OUT_UNAVAILABLE, 503, "out_of_memory", "out of memory");
    return;
  }
  pod_sockaddr(&addr, t.port, &ss);
  if (gw_proxy_start(g, req, (const struct sockaddr *)&ss, &head, body, upgrade, key) != 0) {
    fr_buf_free(&head);
    gw_count_done(g, key);
    gw_refuse(g, req, GW_OUT_UNAVAILABLE, 503, "out_of_memory", "out of memory");
  }
}

void gw_handle(struct fr_http_req *req, void *arg) {
  struct gw *g = arg;

  if ((strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0) && health(g, req))
    return;
  forward(g, req);
}
