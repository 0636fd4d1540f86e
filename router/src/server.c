/* server.c - the top of the router's request handling: what the HTTP
 * server (common/http.c) calls. Every request gets a request id and its
 * record (api.h), paths that could be normalized into other paths are
 * refused, a Host naming a sandbox's port goes to ports.c, and the rest to
 * the route table (routes.c). When the answer is sent, the access log line
 * and the request metrics. Nothing below calls back up into this file.
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
#include "server.h"
#include "routes.h"
#include "tenants.h"

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
