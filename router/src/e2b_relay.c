/* e2b_relay.c - calls into a sandbox through the E2B endpoint (e2b_answer.h, e2b_relay.h):
 * envd's Connect services, /files, /health and /envs relayed as they are
 * to the sandbox's fedrouter-agent (data_proxy), and calls to its other
 * ports (ports.c). The sandbox's access token (X-Access-Token) proves the
 * caller; for a port, also the owner's API key, the traffic token or a
 * public port.
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
#include "fr/egress.h"
#include "fr/http.h"
#include "fr/urlsafe.h"
#include "fr/util.h"
#include "api.h"
#include "e2b_answer.h"
#include "e2b_relay.h"
#include "router.h"
#include "route_types.h"
#include "tenants.h"
#include "workspaces.h"

/* ---------------------------------------------------------------------- */
/* in-sandbox calls                                                        */

/* Is <p> one of the agent's routes a client may reach (envd's services,
 * /files, /health, /envs)? The allow-list is the adapter's
 * (fr_agent_route_known): the exact path, never a prefix, never /init. */
static int agent_path_ok(const char *p) {
  return fr_agent_route_known("POST", p) != 0 || fr_agent_route_known("GET", p) != 0;
}

/* The agent route and the query rebuilt from the client's: only the
 * parameters /files takes, each value decoded and encoded again, so what
 * goes upstream is made of checked parts only. */
struct relay_query {
  char *out;          /* the route, then the query being appended */
  size_t cap, at, start;
  const char *refused; /* what was refused: a parameter the route does not take, a value */
  int bad_path;        /* the refused value is the file path */
};

static int relay_param(const char *key, const char *value, void *arg) {
  static const char *const taken[] = {"path", "username"};
  struct relay_query *rq = arg;
  size_t i;
  int n, k;

  for (i = 0; i < FR_ARRAY_SIZE(taken) && strcmp(key, taken[i]) != 0; i++)
    ;
  if (i == FR_ARRAY_SIZE(taken)) {
    rq->refused = key[0] != '\0' ? "a query parameter /files does not take" : "an empty query parameter";
    return 1;
  }
  for (n = 0; value[n] != '\0'; n += k)
    if ((k = fr_utf8_char((const unsigned char *)value + n, strlen(value + n))) <= 0) {
      rq->refused = strcmp(key, "path") == 0 ? "a path that is not UTF-8 text" : "a value that is not UTF-8 text";
      rq->bad_path = strcmp(key, "path") == 0;
      return 1;
    }
  n = snprintf(rq->out + rq->at, rq->cap - rq->at, "%s%s=", rq->at == rq->start ? "?" : "&", taken[i]);
  if (n < 0 || (size_t)n >= rq->cap - rq->at)
    return -ENAMETOOLONG;
  rq->at += (size_t)n;
  return fr_url_query_escape(rq->out, rq->cap, &rq->at, value);
}

/* The sandbox <id> (either form) that the request may reach, of <tenant>
 * when it is not NULL: its access token (X-Access-Token) proves it, or,
 * for a call to <port> (0: envd's), the owner's API key, the traffic
 * token or a public port (ports_traffic_ok). Found, reachable, its tenant's request
 * admitted; <canon> gets its "<cluster>.<pod>" id. 0, or -1 after
 * answering: a token that is not this sandbox's is answered like an id
 * that does not exist, so nothing tells a guesser which ids are real. */
static int by_token(struct api_req *q, const char *id, const char *tenant, int port, char *canon, size_t canon_cap,
                    char *cluster, size_t ccap, struct fr_adapter **a, const struct fr_pod **p) {
  const char *token = fr_http_req_header(q->req, "X-Access-Token");
  const char *pod;
  char msg[300];
  int ok;

  if (port == 0 && (token == NULL || *token == '\0')) {
    api_fail(q, 401, "unauthorized", "missing X-Access-Token (the sandbox's envdAccessToken)", NULL);
    return -1;
  }
  ok = e2b__split_id(q->r, id, canon, canon_cap, cluster, ccap, &pod) == 0 && (*a = api_adapter(q->r, cluster)) != NULL &&
       (*p = fr_adapter_pod(*a, pod)) != NULL && (*p)->tenant != NULL &&
       (tenant == NULL || strcmp(tenant, (*p)->tenant) == 0);
  if (ok) /* the owner's API key reaches its ports, never envd */
    ok = (token != NULL && *token != '\0' && fr_adapter_agent_token_ok(*a, pod, token)) ||
         (port != 0 && (tenant != NULL || ports_traffic_ok(q->r, q->req, canon, *p, port)));
  if (!ok) {
    /* isRunning() is GET /health, and reads a 502 as "not running" (what
     * E2B's proxy answers for a sandbox it does not know): that route
     * says 502 for every id it cannot reach, the rest 404. */
    int st = port == 0 && strcmp(q->req->path, "/e2b/health") == 0 ? 502 : 404;
    snprintf(msg, sizeof(msg), "no sandbox %.200s for this access token", id);
    api_fail(q, st, "sandbox_not_found", msg, NULL);
    return -1;
  }
  api_set_tenant(q, (*p)->tenant);
  router_note(q->req, "tenant", q->tenant);
  if ((*p = api_find_reachable_sandbox(q, canon, a)) == NULL || !e2b__admitted(q))
    return -1;
  return 0;
}

/* E2B's call to a port of the sandbox other than envd's (E2b-Sandbox-Port:
 * the Code Interpreter's 49999, a user's server): the request as it came,
 * path and all, to that port (ports.c). The Code Interpreter SDK sends
 * the traffic token alone on some calls (/contexts), the access token on
 * others (/execute): either proves the caller. */
/* An E2B call to <port> of paused sandbox <id> created with autoResume, by
 * its owner's API key (<tenant>), its access or traffic token, or anyone
 * for a public port: resumed first, then the call runs again (q->rerun).
 * 1 if so (<q> is taken). */
static int port_auto_resume(struct api_req *q, const char *id, const char *tenant, int port) {
  const char *token = fr_http_req_header(q->req, "X-Access-Token"), *pod;
  char cluster[64], canon[320];
  struct fr_adapter *a;
  struct fr_workspace w;
  int ok;

  if (q->resumed || q->rerun == NULL ||
      e2b__split_id(q->r, id, canon, sizeof(canon), cluster, sizeof(cluster), &pod) != 0 ||
      (a = api_adapter(q->r, cluster)) == NULL || !workspace_auto_resumable(q->r, a, pod, &w))
    return 0;
  ok = tenant != NULL ? strcmp(tenant, w.tenant) == 0
                      : (token != NULL && fr_adapter_agent_token_ok(a, pod, token)) ||
                            ports_traffic_ok_label(q->r, q->req, canon, workspace_spec_label(&w, FR_LABEL_PUBLIC_PORTS),
                                                   port);
  if (ok) {
    api_set_tenant(q, w.tenant);
    workspaces_resume_then(q, a, &w, q->rerun);
  }
  fr_workspace_clear(&w);
  return ok;
}

void e2b__port_relay(struct api_req *q, const char *id, const char *tenant, const char *port_text) {
  char cluster[64], canon[320];
  struct fr_adapter *a;
  const struct fr_pod *p;
  int64_t port;

  if (fr_parse_int64(port_text, 1, 65535, &port) != 0) {
    api_fail(q, 400, "invalid_port", "E2b-Sandbox-Port must be a port number from 1 to 65535", NULL);
    return;
  }
  if (port_auto_resume(q, id, tenant, (int)port))
    return;
  if (by_token(q, id, tenant, (int)port, canon, sizeof(canon), cluster, sizeof(cluster), &a, &p) != 0)
    return;
  ports_e2b(q, a, p, canon, (int)port);
}

/* A call into sandbox <id> (E2b-Sandbox-Id) for agent route <path>
 * ("/process.Process/Start", "/files", ...), by <tenant> (NULL: X-API-Key
 * absent; the access token alone proves it). */
static void in_sandbox(struct api_req *q, const char *id, const char *tenant, const char *path) {
  static const char *const pass[] = {"Connect-Protocol-Version", "Connect-Timeout-Ms", "Keepalive-Ping-Interval",
                                     "Accept", NULL};
  const char *port = fr_http_req_header(q->req, "E2b-Sandbox-Port");
  struct fr_adapter *a;
  const struct fr_pod *p;
  char cluster[64], canon[320], msg[400];
  struct fr_buf h;
  size_t i;

  (void)port; /* another port than envd's went to e2b__port_relay() */
  if (!agent_path_ok(path)) {
    snprintf(msg, sizeof(msg), "inside a sandbox, %.200s", path);
    e2b__not_supported(q, msg);
    return;
  }
  if (fr_agent_route_known(q->req->method, path) < 0) {
    api_fail(q, 405, "method_not_allowed", "that method is not allowed on this sandbox route", NULL);
    return;
  }
  if (by_token(q, id, tenant, 0, canon, sizeof(canon), cluster, sizeof(cluster), &a, &p) != 0)
    return;
  id = canon;
  fr_buf_init(&h);
  for (i = 0; pass[i] != NULL; i++) {
    const char *v = fr_http_req_header(q->req, pass[i]);
    if (v != NULL && strpbrk(v, "\r\n") == NULL)
      fr_buf_printf(&h, "%s: %s\n", pass[i], v);
  }
  /* The agent's route, and for /files the query rebuilt from the
   * parameters it takes; the Connect routes take none. */
  {
    struct relay_query rq;
    char url[8400];
    int rc = 0;
    memset(&rq, 0, sizeof(rq));
    rq.out = url;
    rq.cap = sizeof(url);
    rq.at = rq.start = (size_t)snprintf(url, sizeof(url), "%s", path);
    if (strcmp(path, "/files") == 0)
      rc = fr_http_query_each(q->req->query, relay_param, &rq);
    else if (q->req->query[0] != '\0')
      rq.refused = "a query (this route takes none)";
    if (rq.refused != NULL || rc == -EINVAL) {
      snprintf(msg, sizeof(msg), "the request's query is refused: it holds %s",
               rq.refused != NULL ? rq.refused : "a NUL byte (%00)");
      api_fail(q, 400, rq.bad_path ? "invalid_path" : "invalid_query", msg, NULL);
    } else if (rc != 0) {
      api_fail(q, 400, "invalid_query", "the request's query is too long", NULL);
    } else if (h.len > 0 && h.data == NULL) {
      api_oom(q);
    } else {
      data_proxy(q, a, id, url, h.data);
    }
  }
  fr_buf_free(&h);
  if (q->req != NULL)
    router_note(q->req, "cluster", cluster);
}

/* The relays: the agent route from the row and its parameters. */
static void relay(struct api_req *q, const char *svc, const char *rpc) {
  char path[160];

  snprintf(path, sizeof(path), "/%s%s%.100s", svc, rpc != NULL ? "/" : "", rpc != NULL ? rpc : "");
  in_sandbox(q, fr_http_req_header(q->req, "E2b-Sandbox-Id"), q->tenant[0] != '\0' ? q->tenant : NULL, path);
}

void e2b_relay_process(struct api_req *q, const struct route_params *p) {
  relay(q, "process.Process", p->rpc);
}

void e2b_relay_filesystem(struct api_req *q, const struct route_params *p) {
  relay(q, "filesystem.Filesystem", p->rpc);
}

void e2b_relay_files(struct api_req *q, const struct route_params *p) {
  (void)p;
  relay(q, "files", NULL);
}

void e2b_relay_health(struct api_req *q, const struct route_params *p) {
  (void)p;
  relay(q, "health", NULL);
}

void e2b_relay_envs(struct api_req *q, const struct route_params *p) {
  (void)p;
  relay(q, "envs", NULL);
}
