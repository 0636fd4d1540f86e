/* routes.c - the router's route table and dispatcher (routes.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fr/buf.h"
#include "fr/config.h"
#include "fr/http.h"
#include "fr/util.h"
#include "api.h"
#include "router.h"
#include "metrics.h"
#include "routes.h"
#include "tenants.h"
#include "workspaces.h"

#define SB "/v1/sandboxes/{id}"
#define PROC SB "/processes/{pid}"

/* Specific rows before general ones: the first match wins. */
static const struct route routes[] = {
    /* liveness, readiness, metrics, the dashboard page */
    {"GET", "/healthz", router_get_healthz, RF_PUBLIC | RF_HEALTH, NULL},
    {"GET", "/readyz", router_get_readyz, RF_PUBLIC | RF_HEALTH, NULL},
    {"GET", "/metrics", router_get_metrics, RF_PUBLIC | RF_HEALTH, NULL},
    {"GET", "/dashboard", router_get_dashboard, RF_PUBLIC, NULL},

    /* the v1 API */
    {"GET", "/v1/clusters", router_get_clusters, RF_TENANT, NULL},
    {"GET", "/v1/events", router_get_events, RF_TENANT, NULL},
    {"GET", "/v1/history", history_get, RF_TENANT, NULL},
    {"GET", "/v1/usage", usage_get, RF_TENANT, NULL},
    {"GET", "/v1/policy", router_get_policy, RF_TENANT, NULL},
    {"GET", "/v1/config", router_get_config, RF_TENANT, NULL},
    {"GET", "/v1/queue", router_get_queue, RF_TENANT, NULL},
    {"GET", "/v1/secrets", secrets_list, RF_TENANT, NULL},
    {"PUT", "/v1/secrets/{name}", secrets_put, RF_TENANT, "/v1/secrets/{key}"},
    {"DELETE", "/v1/secrets/{name}", secrets_delete, RF_TENANT, "/v1/secrets/{key}"},
    {"POST", "/v1/placement/explain", sandboxes_explain, RF_TENANT, NULL},
    {"POST", "/v1/sandboxes", sandboxes_create, RF_TENANT, NULL},
    {"GET", "/v1/sandboxes", sandboxes_list, RF_TENANT, NULL},
    {"DELETE", "/v1/sandboxes", sandboxes_terminate_many, RF_TENANT, NULL},
    {"GET", SB, sandboxes_get, RF_TENANT, NULL},
    {"DELETE", SB, sandboxes_terminate, RF_TENANT, NULL},
    {"POST", SB "/pause", sandboxes_pause, RF_TENANT, NULL},
    {"POST", SB "/resume", sandboxes_resume, RF_TENANT, NULL},
    {"POST", SB "/fork", sandboxes_fork, RF_TENANT | RF_SANDBOX | RF_REACH | RF_RESUME, NULL},
    {"POST", SB "/keepalive", sandboxes_keepalive, RF_TENANT, NULL},
    {"POST", SB "/exec", exec_sandbox, RF_TENANT | RF_RESUME, NULL},
    {"POST", SB "/processes", procs_start, RF_TENANT | RF_SANDBOX | RF_REACH | RF_RESUME, NULL},
    {"GET", SB "/processes", procs_list, RF_TENANT | RF_SANDBOX | RF_REACH | RF_RESUME, NULL},
    {"GET", PROC "/output", procs_output, RF_TENANT | RF_SANDBOX | RF_REACH | RF_RESUME, NULL},
    {"POST", PROC "/stdin", procs_stdin, RF_TENANT | RF_SANDBOX | RF_REACH | RF_RESUME, NULL},
    {"POST", PROC "/signal", procs_signal, RF_TENANT | RF_SANDBOX | RF_REACH | RF_RESUME, NULL},
    {"POST", PROC "/resize", procs_resize, RF_TENANT | RF_SANDBOX | RF_REACH | RF_RESUME, NULL},
    {"*", SB "/ports/{port}/{tail*}", ports_path, RF_TENANT | RF_SANDBOX | RF_REACH | RF_RESUME | RF_STREAM_BODY, NULL},
    {"GET", SB "/files", files_get, RF_TENANT | RF_SANDBOX | RF_REACH | RF_RESUME, NULL},
    {"PUT", SB "/files", files_put, RF_TENANT | RF_SANDBOX | RF_REACH | RF_RESUME | RF_STREAM_BODY, NULL},
    {"POST", SB "/files", files_put, RF_TENANT | RF_SANDBOX | RF_REACH | RF_RESUME | RF_STREAM_BODY, NULL},
    {"DELETE", SB "/files", files_delete, RF_TENANT | RF_SANDBOX | RF_REACH | RF_RESUME, NULL},
    {"GET", SB "/snapshot", snapshot_get, RF_TENANT | RF_SANDBOX | RF_REACH | RF_RESUME, NULL},
    {"POST", SB "/restore", snapshot_restore, RF_TENANT | RF_SANDBOX | RF_REACH | RF_RESUME | RF_STREAM_BODY, NULL},
    {"POST", "/v1/pools", pools_create, RF_TENANT, NULL},
    {"GET", "/v1/pools", pools_list, RF_TENANT, NULL},
    {"GET", "/v1/pools/{name}", pools_get, RF_TENANT, NULL},
    {"PATCH", "/v1/pools/{name}", pools_patch, RF_TENANT, NULL},
    {"DELETE", "/v1/pools/{name}", pools_delete, RF_TENANT, NULL},

    /* the E2B endpoint: control API (X-API-Key) */
    {"POST", "/e2b/sandboxes", e2b_create, RF_E2B, NULL},
    {"GET", "/e2b/sandboxes", e2b_list, RF_E2B, NULL},
    {"POST", "/e2b/v2/sandboxes", e2b_create, RF_E2B, NULL},
    {"GET", "/e2b/v2/sandboxes", e2b_list, RF_E2B, NULL},
    {"GET", "/e2b/sandboxes/{id}", e2b_get, RF_E2B, NULL},
    {"DELETE", "/e2b/sandboxes/{id}", e2b_kill, RF_E2B, NULL},
    {"POST", "/e2b/sandboxes/{id}/timeout", e2b_timeout, RF_E2B, NULL},
    {"POST", "/e2b/v2/sandboxes/{id}/timeout", e2b_timeout, RF_E2B, NULL},
    {"POST", "/e2b/sandboxes/{id}/connect", e2b_connect, RF_E2B, NULL},
    {"POST", "/e2b/v2/sandboxes/{id}/connect", e2b_connect, RF_E2B, NULL},
    {"POST", "/e2b/sandboxes/{id}/pause", e2b_pause, RF_E2B, NULL},
    {"POST", "/e2b/sandboxes/{id}/resume", e2b_resume, RF_E2B, NULL},
    {"POST", "/e2b/v2/sandboxes/{id}/pause", e2b_pause, RF_E2B, NULL},
    {"POST", "/e2b/v2/sandboxes/{id}/resume", e2b_resume, RF_E2B, NULL},
    {"*", "/e2b/sandboxes/{id}/snapshots", e2b_no_snapshots, RF_E2B, NULL},
    {"*", "/e2b/v2/sandboxes/{id}/snapshots", e2b_no_snapshots, RF_E2B, NULL},
    {"*", "/e2b/snapshots/{tail*}", e2b_no_snapshots, RF_E2B, NULL},
    {"*", "/e2b/templates/{tail*}", e2b_no_templates, RF_E2B, NULL},
    {"*", "/e2b/v2/templates/{tail*}", e2b_no_templates, RF_E2B, NULL},
    {"*", "/e2b/v3/templates/{tail*}", e2b_no_templates, RF_E2B, NULL},
    {"*", "/e2b/volumes/{tail*}", e2b_no_volumes, RF_E2B, NULL},
    /* the E2B endpoint: calls into a sandbox (E2b-Sandbox-Id, X-Access-Token),
     * relayed to the agent routes of the adapter's allow-list, which also
     * answers 405 for a method the agent route does not take */
    {"*", "/e2b/process.Process/{rpc}", e2b_relay_process, RF_E2B | RF_E2B_SANDBOX | RF_RESUME, "/e2b/{envd}"},
    {"*", "/e2b/filesystem.Filesystem/{rpc}", e2b_relay_filesystem, RF_E2B | RF_E2B_SANDBOX | RF_RESUME, "/e2b/{envd}"},
    {"POST", "/e2b/files", e2b_relay_files, RF_E2B | RF_E2B_SANDBOX | RF_RESUME | RF_STREAM_BODY, "/e2b/{envd}"},
    {"PUT", "/e2b/files", e2b_relay_files, RF_E2B | RF_E2B_SANDBOX | RF_RESUME | RF_STREAM_BODY, "/e2b/{envd}"},
    {"*", "/e2b/files", e2b_relay_files, RF_E2B | RF_E2B_SANDBOX | RF_RESUME, "/e2b/{envd}"},
    {"*", "/e2b/health", e2b_relay_health, RF_E2B | RF_E2B_SANDBOX | RF_RESUME, "/e2b/{envd}"},
    {"*", "/e2b/envs", e2b_relay_envs, RF_E2B | RF_E2B_SANDBOX | RF_RESUME, "/e2b/{envd}"},
    /* anything else under /e2b: a clear 501, never a 404 the SDK takes as final */
    {"*", "/e2b/{tail*}", e2b_unsupported, RF_E2B, "/e2b/{api}"},
};

/* Matches the one segment <seg> (<n> bytes) of a path against pattern
 * segment <pat> (<pn> bytes), storing a parameter's value. 1 match, 0 no,
 * -1 a parameter that does not fit. */
static int segment_match(const char *pat, size_t pn, const char *seg, size_t n, struct route_params *p,
                         size_t *used) {
  const char **slot = NULL;

  if (pn < 3 || pat[0] != '{' || pat[pn - 1] != '}')
    return pn == n && memcmp(pat, seg, n) == 0;
  if (n == 0)
    return 0;
  if (pn == 4 && memcmp(pat, "{id}", 4) == 0)
    slot = &p->id;
  else if (pn == 6 && memcmp(pat, "{name}", 6) == 0)
    slot = &p->name;
  else if (pn == 5 && memcmp(pat, "{svc}", 5) == 0)
    slot = &p->svc;
  else if (pn == 5 && memcmp(pat, "{rpc}", 5) == 0)
    slot = &p->rpc;
  else if (pn == 6 && memcmp(pat, "{port}", 6) == 0) {
    char v[8];
    int64_t port;
    if (n < sizeof(v)) {
      memcpy(v, seg, n);
      v[n] = '\0';
      p->port = fr_parse_int64(v, 1, 65535, &port) == 0 ? (int)port : 0;
    }
    return 1;
  } else if (pn == 5 && memcmp(pat, "{pid}", 5) == 0) {
    char v[24];
    int64_t pid;
    if (n >= sizeof(v))
      return 1; /* pid stays 0: the dispatcher answers invalid_pid */
    memcpy(v, seg, n);
    v[n] = '\0';
    p->pid = fr_parse_int64(v, 1, INT32_MAX, &pid) == 0 ? pid : 0;
    return 1;
  }
  if (slot == NULL)
    return 0;
  if (*used + n + 1 > sizeof(p->buf))
    return -1;
  memcpy(p->buf + *used, seg, n);
  p->buf[*used + n] = '\0';
  *slot = p->buf + *used;
  *used += n + 1;
  return 1;
}

/* Does <path> match <pattern>? 1, 0, or -1 (a parameter too long). */
static int pattern_match(const char *pattern, const char *path, struct route_params *p) {
  const char *pat = pattern, *s = path;
  size_t used = 0;

  memset(p, 0, sizeof(*p));
  for (;;) {
    size_t pn, n;
    int m;
    if (*pat != '/' || *s != '/')
      return *pat == '\0' && *s == '\0';
    pat++;
    s++;
    pn = strcspn(pat, "/");
    if (pn == 7 && memcmp(pat, "{tail*}", 7) == 0) {
      n = strlen(s);
      if (used + n + 1 > sizeof(p->buf))
        return -1;
      memcpy(p->buf + used, s, n + 1);
      p->tail = p->buf + used;
      return 1;
    }
    n = strcspn(s, "/");
    m = segment_match(pat, pn, s, n, p, &used);
    if (m <= 0)
      return m;
    pat += pn;
    s += n;
  }
}

/* "/e2b/templates" matches "/e2b/templates/{tail*}" too: a {tail*} may
 * stand for nothing, slash included. */
static int pattern_match_tail(const char *pattern, const char *path, struct route_params *p) {
  size_t pl = strlen(pattern);
  int m = pattern_match(pattern, path, p);

  if (m == 0 && pl > 8 && strcmp(pattern + pl - 8, "/{tail*}") == 0 && strlen(path) == pl - 8 &&
      strncmp(pattern, path, pl - 8) == 0) {
    memset(p, 0, sizeof(*p));
    p->tail = "";
    return 1;
  }
  return m;
}

static int method_ok(const char *row, const char *method) {
  return strcmp(row, "*") == 0 || strcmp(row, method) == 0 || (strcmp(method, "HEAD") == 0 && strcmp(row, "GET") == 0);
}

int route_match(const char *method, const char *path, int health_only, const struct route **out,
                struct route_params *p, char *allow, size_t allow_cap) {
  struct route_params scratch;
  size_t i, at = 0;
  int path_seen = 0, too_long = 0;

  *out = NULL;
  if (allow_cap > 0)
    allow[0] = '\0';
  for (i = 0; i < FR_ARRAY_SIZE(routes); i++) {
    const struct route *r = &routes[i];
    int m;
    if (health_only && !(r->flags & RF_HEALTH))
      continue;
    m = pattern_match_tail(r->pattern, path, method_ok(r->method, method) ? p : &scratch);
    if (m < 0)
      too_long = 1;
    if (m <= 0)
      continue;
    if (method_ok(r->method, method)) {
      *out = r;
      return 0;
    }
    /* The path is served, not with this method: collect the others. */
    if (allow_cap > 0 && strstr(allow, r->method) == NULL) {
      int n = snprintf(allow + at, allow_cap - at, "%s%s", path_seen ? ", " : "Allow: ", r->method);
      if (n > 0 && (size_t)n < allow_cap - at)
        at += (size_t)n;
    }
    path_seen = 1;
  }
  if (path_seen) {
    if (at + 3 <= allow_cap)
      memcpy(allow + at, "\r\n", 3);
    return -EPERM;
  }
  return too_long ? -EMSGSIZE : -ENOENT;
}

const char *route_label(const char *method, const char *path) {
  const struct route *r;
  struct route_params p;
  char allow[128];

  if (path == NULL || method == NULL)
    return "unparsed";
  if (route_match(method, path, 0, &r, &p, allow, sizeof(allow)) != 0)
    return "other";
  return r->label != NULL ? r->label : r->pattern;
}

int route_streams_body(const struct fr_http_req *req) {
  const struct route *r;
  struct route_params p;
  char allow[128];

  if (route_match(req->method, req->path, 0, &r, &p, allow, sizeof(allow)) != 0 || !(r->flags & RF_STREAM_BODY))
    return 0;
  return !(r->flags & RF_E2B_SANDBOX) || fr_http_req_header(req, "E2b-Sandbox-Id") != NULL;
}

static void rerun(struct api_req *q) {
  route_dispatch(q, 0);
}

/* ---------------------------------------------------------------------- */
/* before the handler: authentication and admission (RF_TENANT)            */

static int is_loopback(const char *ip) {
  return strncmp(ip, "127.", 4) == 0 || strcmp(ip, "::1") == 0 || strncmp(ip, "::ffff:127.", 11) == 0;
}

/* Authenticates <q> with <token> (may be NULL) against the request's
 * config snapshot: 0 with q->tenant and q->ts set (the loopback-only
 * router: "local", for loopback clients only), or -1 after answering 401
 * unauthorized / token_expired or 403 forbidden. <scheme> "Bearer" adds
 * the WWW-Authenticate header. The token's name goes in the access log. */
static int authenticate(struct api_req *q, const char *token, const char *scheme) {
  const struct fr_config_token *tok;
  const struct fr_config_tenant *t;
  char msg[300], when[21];

  if (q->cfg->ntenants == 0) {
    /* No tenants configured: a single-user router, reachable from this
     * machine only. */
    if (!is_loopback(q->req->peer_ip)) {
      api_fail(q, 403, "forbidden", "this router has no tenants configured and accepts loopback clients only",
               NULL);
      return -1;
    }
    api_set_tenant(q, "local");
    return 0;
  }
  t = fr_config_tenant_by_token(q->cfg, token, &tok);
  if (t == NULL) {
    api_fail(q, 401, "unauthorized", "unknown token",
             strcmp(scheme, "Bearer") == 0 ? "WWW-Authenticate: Bearer realm=\"fedrouter\", error=\"invalid_token\"\r\n"
                                           : NULL);
    return -1;
  }
  if (fr_config_token_expired(tok, fr_wall_ms() / 1000)) {
    /* The holder of a token may learn its name and end: the next step
     * is to ask for the new one. */
    fr_time_rfc3339(tok->expires_at, when);
    snprintf(msg, sizeof(msg), "token \"%s\" of tenant %s expired at %s; ask for its successor", tok->name,
             t->name, when);
    router_note(q->req, "token", tok->name);
    api_fail(q, 401, "token_expired", msg,
             strcmp(scheme, "Bearer") == 0 ? "WWW-Authenticate: Bearer realm=\"fedrouter\", error=\"invalid_token\"\r\n"
                                           : NULL);
    return -1;
  }
  router_note(q->req, "token", tok->name);
  {
    struct fr_buf l;
    fr_buf_init(&l);
    metrics_label(&l, "tenant", t->name);
    metrics_label(&l, "token", tok->name);
    metrics_inc(q->r->metrics, "fedrouter_auth_total", l.data ? l.data : "", 1);
    fr_buf_free(&l);
  }
  api_set_tenant(q, t->name);
  if (q->ts == NULL) {
    api_oom(q); /* the table follows the config it swapped in with: not reached */
    return -1;
  }
  return 0;
}

/* The tenant of <q>'s bearer token (q->tenant, q->ts set), within its
 * in-flight bound: 0, or -1 after answering 401/403/429. */
static int admit(struct api_req *q) {
  const char *h = fr_http_req_header(q->req, "Authorization");
  char msg[200];

  if (q->cfg->ntenants > 0 && (h == NULL || strncasecmp(h, "Bearer ", 7) != 0 || h[7] == '\0')) {
    api_fail(q, 401, "unauthorized", "missing bearer token: send Authorization: Bearer <token>",
             "WWW-Authenticate: Bearer realm=\"fedrouter\"\r\n");
    return -1;
  }
  if (authenticate(q, h != NULL && strlen(h) > 7 ? h + 7 : NULL, "Bearer") != 0)
    return -1;
  router_note(q->req, "tenant", q->tenant);
  /* Admission: a tenant with too much going at once waits, others not. */
  if (q->ts != NULL && q->ts->inflight >= q->ts->max_inflight) {
    snprintf(msg, sizeof(msg), "tenant %s has %" PRId64 " requests in flight (max_requests_in_flight)", q->tenant,
             q->ts->inflight);
    api_reply(q, 429, api_limit_body(msg, "max_requests_in_flight"), "Retry-After: 1\r\n");
    return -1;
  }
  return 0;
}


void route_dispatch(struct api_req *q, int health_only) {
  struct route_params p;
  const struct route *r;
  char allow[128];
  int rc = route_match(q->req->method, q->req->path, health_only, &r, &p, allow, sizeof(allow));
  q->rerun = rerun;

  if (rc == -EPERM) {
    api_fail(q, 405, "method_not_allowed", "method not allowed here", allow);
    return;
  }
  if (rc != 0) {
    api_fail(q, 404, "not_found",
             health_only ? "the health listener serves /healthz, /readyz and /metrics only" : "no such endpoint",
             NULL);
    return;
  }
  if ((r->flags & RF_E2B) && e2b_begin(q, r) != 0)
    return; /* answered: E2B's own auth and shapes */
  if ((r->flags & RF_TENANT) && admit(q) != 0)
    return; /* answered: 401/403 or the tenant's in-flight bound */
  if (strstr(r->pattern, "{pid}") != NULL && p.pid <= 0) {
    api_fail(q, 400, "invalid_pid", "a pid is a positive integer", NULL);
    return;
  }
  if (strstr(r->pattern, "{port}") != NULL && p.port <= 0) {
    api_fail(q, 400, "invalid_port", "a port is an integer from 1 to 65535", NULL);
    return;
  }
  /* A paused sandbox created with auto_resume: resumed first, then this
   * runs again (rerun) as if it had just come. */
  if ((r->flags & RF_RESUME) &&
      workspaces_auto_resume(q, (r->flags & RF_E2B_SANDBOX) ? fr_http_req_header(q->req, "E2b-Sandbox-Id") : p.id,
                             rerun))
    return;
  if ((r->flags & RF_SANDBOX) &&
      ((p.pod = (r->flags & RF_REACH) ? api_find_reachable_sandbox(q, p.id, &p.a) : api_find_sandbox(q, p.id, &p.a)) ==
       NULL))
    return; /* answered: 400/404/503 */
  if (r->flags & RF_SANDBOX) {
    /* Handlers see the canonical "<cluster>.<pod>", whichever form came. */
    snprintf(p.canon, sizeof(p.canon), "%s.%s", fr_adapter_name(p.a), p.pod->name);
    p.id = p.canon;
  }
  r->fn(q, &p);
}
