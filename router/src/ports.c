/* ports.c - the ports a sandbox serves (docs/api.md "Ports"): preview URLs
 * and the E2B SDKs' calls to ports other than envd's.
 *
 * Three ways in, one way through (data_proxy_port, files.c, over the
 * adapter's data path):
 *   - path routing: /v1/sandboxes/{id}/ports/{port}/<path> with the owner's
 *     bearer token (routes.c);
 *   - host routing: Host: <port>-<short id>.<ports.domain>, the whole path
 *     passed on, allowed by the sandbox's traffic token
 *     (E2B-Traffic-Access-Token), by the owner's bearer token, or freely
 *     on a port the sandbox was made public on;
 *   - the E2B relay: E2b-Sandbox-Port not envd's (e2b.c, after checking the
 *     sandbox's access token).
 * Every way is bounded: requests in flight per sandbox and per tenant
 * (ports.max_requests_per_*), 429 past them. An upgrade request
 * (WebSocket, ...) takes the same ways and checks, then becomes a tunnel
 * (porttunnel.c), counted as a request in flight while it is open. The agent's port is never a
 * port here (its routes and token are the agent's). Short ids, traffic
 * tokens and public ports: sandbox_ids.c.
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
#include "fr/http.h"
#include "fr/util.h"
#include "api.h"
#include "porttunnel.h"
#include "router.h"
#include "tenants.h"
#include "route_types.h"
#include "workspaces.h"

/* ---------------------------------------------------------------------- */
/* bounds                                                                  */

/* Requests in flight to each sandbox's ports: the router's small hash
 * table of ids (entries only while a request is in flight). */
struct port_inflight {
  struct port_inflight *next;
  struct port_inflight **bucket;  /* its chain's head in the router's table */
  struct tenant_state *ts;         /* a reference: the record outlives a reload that removes it */
  int64_t n;
  char id[];
};

static unsigned bucket_of(const char *id) {
  unsigned h = 2166136261u;

  for (; *id != '\0'; id++)
    h = (h ^ (unsigned char)*id) * 16777619u;
  return h % PORTS_INFLIGHT_BUCKETS;
}

static struct port_inflight *inflight_find(struct router *r, const char *id) {
  struct port_inflight *e;

  for (e = r->port_inflight[bucket_of(id)]; e != NULL; e = e->next)
    if (strcmp(e->id, id) == 0)
      return e;
  return NULL;
}

static void on_call_over(void *arg) {
  struct port_inflight *e = arg, **pp;

  if (e->ts != NULL)
    e->ts->port_requests--;
  if (--e->n > 0)
    return;
  for (pp = e->bucket; *pp != e; pp = &(*pp)->next)
    ;
  *pp = e->next;
  tenant_unref(e->ts);
  free(e);
}

/* Counts one more request to <id>'s ports, or answers 429 and returns
 * NULL. */
static struct port_inflight *admit(struct api_req *q, const char *id) {
  const struct fr_config *cfg = q->cfg;
  struct port_inflight *e = inflight_find(q->r, id);
  char msg[300];

  if (e != NULL && e->n >= cfg->max_port_requests_per_sandbox) {
    snprintf(msg, sizeof(msg), "sandbox %.100s has %" PRId64 " requests to its ports in flight "
             "(ports.max_requests_per_sandbox)", id, e->n);
    api_reply(q, 429, api_limit_body(msg, "ports.max_requests_per_sandbox"), "Retry-After: 1\r\n");
    return NULL;
  }
  if (q->ts != NULL && q->ts->port_requests >= cfg->max_port_requests_per_tenant) {
    snprintf(msg, sizeof(msg), "tenant %s has %" PRId64 " requests to sandbox ports in flight "
             "(ports.max_requests_per_tenant)", q->tenant, q->ts->port_requests);
    api_reply(q, 429, api_limit_body(msg, "ports.max_requests_per_tenant"), "Retry-After: 1\r\n");
    return NULL;
  }
  if (e == NULL) {
    unsigned b = bucket_of(id);
    e = calloc(1, sizeof(*e) + strlen(id) + 1);
    if (e == NULL) {
      api_oom(q);
      return NULL;
    }
    memcpy(e->id, id, strlen(id) + 1);
    e->bucket = &q->r->port_inflight[b];
    e->next = *e->bucket;
    *e->bucket = e;
  }
  e->n++;
  /* The tenant whose count this is: one tenant owns a sandbox. */
  if (e->ts == NULL)
    e->ts = tenant_ref(q->ts);
  if (e->ts != NULL)
    e->ts->port_requests++;
  return e;
}

/* ---------------------------------------------------------------------- */
/* forwarding                                                              */

/* The request headers a sandbox's server gets: the client's end-to-end
 * ones, less our credentials and routing, plus X-Forwarded-*. */
static int forward_headers(struct api_req *q, struct fr_buf *h) {
  static const char *const drop[] = {"host", "content-length", "transfer-encoding", "content-type", "connection",
                                     "keep-alive", "proxy-authorization", "proxy-connection", "te", "trailer",
                                     "upgrade", "expect", "authorization", "x-access-token",
                                     "e2b-traffic-access-token", "x-api-key", "e2b-sandbox-id",
                                     "e2b-sandbox-port", "x-forwarded-for", "x-forwarded-host",
                                     "x-forwarded-proto", NULL};
  const struct fr_http_req *req = q->req;
  const char *host = fr_http_req_header(req, "Host");
  size_t i, k;

  for (i = 0; i < req->nheaders; i++) {
    const char *name = req->headers[i].name, *value = req->headers[i].value;
    for (k = 0; drop[k] != NULL && strcasecmp(name, drop[k]) != 0; k++)
      ;
    if (drop[k] == NULL && strpbrk(value, "\r\n") == NULL && strpbrk(name, "\r\n:") == NULL)
      fr_buf_printf(h, "%s: %s\n", name, value);
  }
  fr_buf_printf(h, "X-Forwarded-For: %s\nX-Forwarded-Proto: http\n", req->peer_ip);
  if (host != NULL && strpbrk(host, "\r\n") == NULL)
    fr_buf_printf(h, "X-Forwarded-Host: %s\n", host);
  return h->data != NULL ? 0 : -ENOMEM;
}

/* Sends <q> to port <port> of sandbox <id> (canonical; its adapter <a>),
 * the server getting <path> and the request's query. */
static void forward(struct api_req *q, struct fr_adapter *a, const char *id, const char *pod_agent_label, int port,
                    const char *path) {
  struct port_inflight *e;
  struct fr_buf h, pq;
  char msg[200];
  int64_t agent_port = 0;

  if (pod_agent_label != NULL && fr_parse_int64(pod_agent_label, 1, 65535, &agent_port) != 0)
    agent_port = 0;
  if (port < 1 || port > 65535 || port == FR_AGENT_DEFAULT_PORT || agent_port == port) {
    snprintf(msg, sizeof(msg), "port %d is not a port of the sandbox's own (1-65535, not the agent's %d)", port,
             FR_AGENT_DEFAULT_PORT);
    api_fail(q, 400, "invalid_port", msg, NULL);
    return;
  }
  if ((e = admit(q, id)) == NULL)
    return;
  fr_buf_init(&h);
  fr_buf_init(&pq);
  fr_buf_printf(&pq, "%s%s%s", path[0] == '/' ? "" : "/", path, q->req->query[0] != '\0' ? "?" : "");
  fr_buf_puts(&pq, q->req->query);
  if (forward_headers(q, &h) != 0 || pq.data == NULL) {
    on_call_over(e);
    api_oom(q);
  } else {
    router_note(q->req, "cluster", fr_adapter_name(a));
    if (port_tunnel_wanted(q->req))
      port_tunnel_start(q, a, id, port, pq.data, h.data, on_call_over, e);
    else
      data_proxy_port(q, a, id, port, pq.data, h.data, on_call_over, e);
  }
  fr_buf_free(&h);
  fr_buf_free(&pq);
}

void ports_path(struct api_req *q, const struct route_params *p) {
  forward(q, p->a, p->id, fr_pod_label(p->pod, FR_LABEL_AGENT), p->port, p->tail != NULL ? p->tail : "");
}

void ports_e2b(struct api_req *q, struct fr_adapter *a, const struct fr_pod *pod, const char *id, int port) {
  char path[16];

  (void)path;
  forward(q, a, id, fr_pod_label(pod, FR_LABEL_AGENT), port, q->req->path + 4 /* after /e2b */);
}

/* Host: <port>-<short id>.<domain>[:<listen port>] -> port, short id. */
static int parse_host(const char *host, const char *domain, int *port, char *sid, size_t cap) {
  size_t hn = strcspn(host, ":"), dn = strcspn(domain, ":"), ln;
  const char *dash;
  char num[8];
  int64_t v;

  if (hn <= dn + 1 || host[hn - dn - 1] != '.' || strncasecmp(host + hn - dn, domain, dn) != 0)
    return -1;
  ln = hn - dn - 1; /* the first label */
  dash = memchr(host, '-', ln);
  if (dash == NULL || dash == host || (size_t)(dash - host) >= sizeof(num) || ln - (size_t)(dash - host) - 1 >= cap ||
      memchr(host, '.', ln) != NULL)
    return -1;
  memcpy(num, host, (size_t)(dash - host));
  num[dash - host] = '\0';
  if (fr_parse_int64(num, 1, 65535, &v) != 0)
    return -1;
  *port = (int)v;
  memcpy(sid, dash + 1, ln - (size_t)(dash - host) - 1);
  sid[ln - (size_t)(dash - host) - 1] = '\0';
  for (char *c = sid; *c != '\0'; c++)
    if (*c >= 'A' && *c <= 'Z')
      *c = (char)(*c - 'A' + 'a'); /* host names are case-insensitive */
  return 0;
}

static void host_rerun(struct api_req *q) {
  (void)ports_host(q);
}

/* A host-routed call into paused sandbox <id> (pod <pod> of <a>) created
 * with auto_resume, by someone who may reach <port> (its traffic token, a
 * public port, the owner's token): resumed first, then the call runs
 * again. 1 if so (<q> is taken). */
static int host_auto_resume(struct api_req *q, struct fr_adapter *a, const char *id, const char *pod, int port) {
  struct fr_workspace w;
  const char *t;
  int ok;

  if (q->resumed || !workspace_auto_resumable(q->r, a, pod, &w))
    return 0;
  ok = ports_traffic_ok_label(q->r, q->req, id, workspace_spec_label(&w, FR_LABEL_PUBLIC_PORTS), port);
  if (!ok && fr_http_req_header(q->req, "Authorization") != NULL)
    ok = (t = router_tenant_of_bearer(q->r, q->req)) != NULL && strcmp(t, w.tenant) == 0;
  if (ok) {
    api_set_tenant(q, w.tenant);
    workspaces_resume_then(q, a, &w, host_rerun);
  }
  fr_workspace_clear(&w);
  return ok;
}

int ports_host(struct api_req *q) {
  const char *domain = q->cfg->ports_domain, *host;
  char sid[64], id[320], cluster[64];
  const struct fr_pod *pod;
  struct fr_adapter *a;
  const char *pod_name;
  int port, allowed = 0;

  if (domain == NULL || (host = fr_http_req_header(q->req, "Host")) == NULL ||
      parse_host(host, domain, &port, sid, sizeof(sid)) != 0)
    return 0;
  /* From here the request is the sandbox's: every answer is ours. Another
   * tenant, a guessed id and a wrong token all get the same 404. */
  if (api_canonical_id(q->r, sid, id, sizeof(id)) != 0 || (pod_name = strchr(id, '.')) == NULL ||
      (size_t)(pod_name - id) >= sizeof(cluster)) {
    api_fail(q, 404, "sandbox_not_found", "no such sandbox port", NULL);
    return 1;
  }
  memcpy(cluster, id, (size_t)(pod_name - id));
  cluster[pod_name - id] = '\0';
  pod_name++;
  a = api_adapter(q->r, cluster);
  pod = a != NULL ? fr_adapter_pod(a, pod_name) : NULL;
  if ((pod == NULL || pod->state == NULL || strcmp(pod->state, "claimed") != 0) && a != NULL &&
      host_auto_resume(q, a, id, pod_name, port))
    return 1;
  if (pod == NULL || pod->tenant == NULL || pod->state == NULL || strcmp(pod->state, "claimed") != 0 ||
      !api_sandbox_visible(a, pod)) {
    api_fail(q, 404, "sandbox_not_found", "no such sandbox port", NULL);
    return 1;
  }
  if (ports_traffic_ok(q->r, q->req, id, pod, port)) {
    allowed = 1;
  } else if (fr_http_req_header(q->req, "Authorization") != NULL) {
    /* The owner's own token works too (curl -H "Authorization: Bearer"). */
    const char *t = router_tenant_of_bearer(q->r, q->req);
    allowed = t != NULL && strcmp(t, pod->tenant) == 0;
  }
  if (!allowed) {
    api_fail(q, 404, "sandbox_not_found", "no such sandbox port", NULL);
    return 1;
  }
  api_set_tenant(q, pod->tenant);
  router_note(q->req, "tenant", q->tenant);
  if (fr_adapter_node_unready(a, pod->node)) {
    api_fail(q, 503, "sandbox_unreachable", "the sandbox's node is not Ready", "Retry-After: 5\r\n");
    return 1;
  }
  forward(q, a, id, fr_pod_label(pod, FR_LABEL_AGENT), port, q->req->path);
  return 1;
}
