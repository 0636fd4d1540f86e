/* e2b.c - the E2B-compatible endpoint under /e2b (docs/e2b.md): what the
 * official E2B SDKs call, so that they run unmodified with
 * E2B_API_URL = E2B_SANDBOX_URL = <router>/e2b and E2B_API_KEY = a tenant
 * token.
 *
 * Two kinds of request arrive here:
 *   - the control API (X-API-Key): create, connect, list, get, set timeout,
 *     kill, answered from the clusters' caches and through create.c's
 *     placement path, in E2B's JSON shapes;
 *   - in-sandbox calls (E2b-Sandbox-Id, X-Access-Token): envd's Connect
 *     services and /files, relayed as they are to the sandbox's
 *     fedrouter-agent (data_proxy), which speaks envd's protocol.
 * Nothing is kept between requests: the sandbox id is fedrouter's own
 * (<cluster>.<pod>) and the access token is the sandbox's HMAC token, which
 * every replica derives alike, so any replica serves any sandbox.
 *
 * Every answer of /e2b, errors included, goes through e2b__shape():
 * errors carry E2B's {"code":<status>,"message":...} (what the SDK reads)
 * next to fedrouter's {"error":{"code","message"}}.
 *
 * This file holds the route handlers of the control API and e2b_begin,
 * which every /e2b route passes first; the relays into a sandbox are
 * e2b_relay.c's, the JSON shapes e2b_answer.c's (e2b_answer.h, e2b_relay.h).
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

/* The workspace of an E2B sandbox created with lifecycle.onTimeout
 * "pause": E2B's user's home, what its templates work in. */
#define E2B_WORKSPACE_PATH "/home/user"
#define E2B_WORKSPACE_SIZE "10Gi"
#define LIST_DEFAULT 100
#define LIST_MAX 1000

/* ---------------------------------------------------------------------- */
/* control API                                                             */

static void create(struct api_req *q) {
  static const char *const refused[] = {"mcp", "volumeMounts", NULL};
  json_error_t jerr;
  json_t *b = json_loadb(q->req->body, q->req->body_len, 0, &jerr), *v1, *v, *n, *net;
  const char *tmpl;
  size_t i;
  char msg[300];

  if (!json_is_object(b)) {
    snprintf(msg, sizeof(msg), "the body must be a JSON object (%s)", b ? "got another JSON value" : jerr.text);
    json_decref(b);
    api_fail(q, 400, "invalid_json", msg, NULL);
    return;
  }
  tmpl = json_string_value(json_object_get(b, "templateID"));
  if (tmpl == NULL || *tmpl == '\0') {
    json_decref(b);
    api_field_fail(q, "templateID", "templateID (the name of a fedrouter pool) is required");
    return;
  }
  for (i = 0; refused[i] != NULL; i++) {
    v = json_object_get(b, refused[i]);
    if (v != NULL && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0)) {
      json_decref(b);
      e2b__not_supported(q, strcmp(refused[i], "mcp") == 0 ? "MCP gateways" : "volume mounts");
      return;
    }
  }
  /* lifecycle.onTimeout "pause" (autoPause): a sandbox with a workspace
   * at E2B's home directory, paused at its timeout. Memory is not kept
   * (autoPauseMemory true is refused: only the files are). */
  if (json_is_true(json_object_get(b, "autoPauseMemory"))) {
    json_decref(b);
    e2b__not_supported(q, "keeping a paused sandbox's memory (onTimeout.keepMemory): only its files are kept");
    return;
  }
  /* The template names the config maps to pools (the SDKs' defaults:
   * "base", "code-interpreter-v1"); any other name is a pool's. */
  for (i = 0; i < q->cfg->ne2b_templates; i++)
    if (strcmp(q->cfg->e2b_templates[i].name, tmpl) == 0) {
      tmpl = q->cfg->e2b_templates[i].pool;
      break;
    }
  /* The v1 create of one sandbox from pool <templateID>: the same checks,
   * tenant limits, policy, region (X-Client-Region) and spillover. */
  v1 = json_pack("{s:s,s:s}", "name", "e2b", "pool", tmpl);
  if (v1 == NULL) {
    json_decref(b);
    api_oom(q);
    return;
  }
  /* Private by default: with allowPublicTraffic its preview URLs need no
   * traffic token. */
  v = json_object_get(json_object_get(b, "network"), "allowPublicTraffic");
  if (json_is_true(v))
    json_object_set_new(v1, "public_ports", json_string("*"));
  /* Egress: allow_internet_access and network.allowOut / denyOut become
   * the v1 `network` object, checked there (a domain name is a 400). What
   * needs an egress proxy is not there to give. */
  n = json_object_get(b, "network");
  if (json_is_object(n) && ((v = json_object_get(n, "egressProxy")) != NULL && !json_is_null(v))) {
    json_decref(b);
    json_decref(v1);
    e2b__not_supported(q, "an egress proxy (network.egressProxy)");
    return;
  }
  if (json_is_object(n) && (v = json_object_get(n, "rules")) != NULL && !json_is_null(v) &&
      !(json_is_object(v) && json_object_size(v) == 0)) {
    json_decref(b);
    json_decref(v1);
    e2b__not_supported(q, "per-host egress rules (network.rules)");
    return;
  }
  net = json_object();
  if ((v = json_object_get(b, "allow_internet_access")) != NULL && !json_is_null(v))
    json_object_set(net, "allow_internet", v);
  if (json_is_object(n) && (v = json_object_get(n, "allowOut")) != NULL && !json_is_null(v))
    json_object_set(net, "allow_out", v);
  if (json_is_object(n) && (v = json_object_get(n, "denyOut")) != NULL && !json_is_null(v))
    json_object_set(net, "deny_out", v);
  if (net != NULL && json_object_size(net) > 0)
    json_object_set(v1, "network", net);
  json_decref(net);
  if ((v = json_object_get(b, "metadata")) != NULL && !json_is_null(v))
    json_object_set(v1, "labels", v);
  if ((v = json_object_get(b, "envVars")) != NULL && !json_is_null(v))
    json_object_set(v1, "env", v);
  if ((v = json_object_get(b, "timeout")) != NULL && !json_is_null(v))
    json_object_set(v1, "timeout_s", v);
  /* The E2B SDK has no field for a wait: the config says how long an E2B
   * create waits for room (queue.e2b_wait_s), below the SDK's own request
   * timeout. */
  if (q->cfg->queue_e2b_wait_s > 0)
    json_object_set_new(v1, "wait_s", json_integer(q->cfg->queue_e2b_wait_s));
  if (json_is_true(json_object_get(b, "autoPause"))) {
    v = json_object_get(json_object_get(b, "autoResume"), "enabled");
    json_object_set_new(v1, "workspace", json_pack("{s:s,s:s}", "path", E2B_WORKSPACE_PATH, "size",
                                                   E2B_WORKSPACE_SIZE));
    json_object_set_new(v1, "on_timeout", json_string("pause"));
    if (json_is_true(v))
      json_object_set_new(v1, "auto_resume", json_true());
  }
  json_decref(b);
  q->shape_kind = E2B_SHAPE_CREATE;
  create_sandboxes_from(q, v1, 0, 1);
}

/* The sandbox <id> of the request's tenant, or NULL after answering 404. */
static const struct fr_pod *find(struct api_req *q, const char *id, struct fr_adapter **a) {
  return api_find_sandbox(q, id, a);
}

struct op {
  struct api_req *q;
  char id[256];
  int answer_sandbox;           /* connect: the sandbox, else 204 */
  int64_t expires;              /* the expiry set (the cache may not show it yet) */
};

static void op_done(int status, const char *message, void *arg) {
  struct op *o = arg;
  struct api_req *q = o->q;
  struct fr_adapter *a;
  char cluster[64], canon[320];
  const char *pod;
  const struct fr_pod *p;

  if (status == 404) {
    api_fail(q, 404, "sandbox_not_found", "the sandbox no longer exists", NULL);
  } else if (status < 200 || status >= 300) {
    char msg[700];
    snprintf(msg, sizeof(msg), "the cluster refused the change (%d): %s", status, message);
    api_fail(q, status == 0 ? 503 : status == 422 ? 400 : 502, status == 0 ? "cluster_unavailable" : "cluster_error",
             msg, status == 0 ? "Retry-After: 5\r\n" : NULL);
  } else if (!o->answer_sandbox) {
    api_reply(q, 204, NULL, NULL);
  } else if (e2b__split_id(q->r, o->id, canon, sizeof(canon), cluster, sizeof(cluster), &pod) == 0 &&
             (a = api_adapter(q->r, cluster)) != NULL &&
             (p = fr_adapter_pod(a, pod)) != NULL) {
    json_t *j = e2b__sandbox_json(q->r, a, p, 1);
    if (j != NULL && o->expires > 0)
      json_object_set_new(j, "endAt", api_time_json(o->expires));
    api_reply(q, 200, j, NULL);
  } else {
    api_fail(q, 404, "sandbox_not_found", "the sandbox no longer exists", NULL);
  }
  free(o);
}

/* The body's "timeout" in seconds: 1..max_lifetime_s, or 0 when absent
 * and <optional>; -1 after answering. */
static int64_t body_timeout(struct api_req *q, int optional) {
  json_t *b = q->req->body_len > 0 ? json_loadb(q->req->body, q->req->body_len, 0, NULL) : NULL;
  json_t *t = json_object_get(b, "timeout");
  int64_t v = json_is_integer(t) ? json_integer_value(t) : -1;
  char msg[200];

  /* An empty body is "no timeout"; a body must be a JSON object. */
  if (q->req->body_len > 0 && !json_is_object(b)) {
    json_decref(b);
    api_fail(q, 400, "invalid_json", "the body must be a JSON object ({\"timeout\": seconds})", NULL);
    return -1;
  }
  if (t == NULL && optional) {
    json_decref(b);
    return 0;
  }
  json_decref(b);
  if (v < 1 || v > api_max_lifetime(q)) {
    snprintf(msg, sizeof(msg), "timeout must be an integer number of seconds from 1 to %" PRId64,
             api_max_lifetime(q));
    api_field_fail(q, "timeout", msg);
    return -1;
  }
  return v;
}

/* POST /sandboxes/{id}/timeout and /connect: a new expiry (connect: when
 * a timeout is given), then 204 or the sandbox. */
static void set_timeout(struct api_req *q, const char *id, int connect) {
  struct fr_adapter *a;
  const struct fr_pod *pod = find(q, id, &a);
  int64_t t;
  struct op *o;
  int rc;

  if (pod == NULL || (t = body_timeout(q, connect)) < 0)
    return;
  /* E2B's connect only ever lengthens a running sandbox's life. */
  if (t == 0 || (connect && pod->expires_s >= fr_wall_ms() / 1000 + t)) {
    api_reply(q, 200, e2b__sandbox_json(q->r, a, pod, 1), NULL);
    return;
  }
  if ((o = calloc(1, sizeof(*o))) == NULL) {
    api_oom(q);
    return;
  }
  o->q = q;
  o->answer_sandbox = connect;
  snprintf(o->id, sizeof(o->id), "%s", id);
  o->expires = fr_wall_ms() / 1000 + t;
  rc = fr_adapter_sandbox_set_expiry(a, pod->name, o->expires, q->rid, op_done, o);
  if (rc != 0) {
    free(o);
    api_fail(q, 503, "cluster_unavailable", "cannot send the change to the cluster", "Retry-After: 5\r\n");
    return;
  }
  api_defer(q);
}

static void kill_sandbox(struct api_req *q, const char *id) {
  struct fr_adapter *a;
  const struct fr_pod *pod = find(q, id, &a);
  struct op *o;

  if (pod == NULL)
    return;
  if ((o = calloc(1, sizeof(*o))) == NULL) {
    api_oom(q);
    return;
  }
  o->q = q;
  if (fr_adapter_sandbox_delete(a, pod->name, q->rid, op_done, o) != 0) {
    free(o);
    api_fail(q, 503, "cluster_unavailable", "cannot send the delete to the cluster", "Retry-After: 5\r\n");
    return;
  }
  api_defer(q);
}

/* list */

struct listed {
  char id[256];
  struct fr_adapter *a;
  const struct fr_pod *pod;     /* a running sandbox, or NULL: */
  json_t *paused;               /* a paused one, as listed */
};

static int listed_cmp(const void *x, const void *y) {
  return strcmp(((const struct listed *)x)->id, ((const struct listed *)y)->id);
}

static int hexval(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* In place: %XX and '+' of <s> decoded. */
static void unescape(char *s) {
  char *o = s;

  for (; *s != '\0'; s++) {
    if (*s == '%' && hexval(s[1]) >= 0 && hexval(s[2]) >= 0) {
      *o++ = (char)(hexval(s[1]) * 16 + hexval(s[2]));
      s += 2;
    } else {
      *o++ = *s == '+' ? ' ' : *s;
    }
  }
  *o = '\0';
}

/* The SDK's metadata query: "k=v&k2=v2" with each key and value encoded
 * once more inside. <keys>/<vals> point into <buf>; returns the count or
 * -1 when malformed or more than <cap>. */
static int parse_metadata(char *buf, char **keys, char **vals, int cap) {
  int n = 0;
  char *p = buf, *amp, *eq;

  while (*p != '\0') {
    amp = strchr(p, '&');
    if (amp != NULL)
      *amp = '\0';
    eq = strchr(p, '=');
    if (eq == NULL || eq == p || n == cap)
      return -1;
    *eq = '\0';
    unescape(p);
    unescape(eq + 1);
    keys[n] = p;
    vals[n++] = eq + 1;
    if (amp == NULL)
      break;
    p = amp + 1;
  }
  return n;
}

static void list(struct api_req *q) {
  char meta[2048], state[64], lim[16], next[256], hdr[300], tmpl[64], after[40];
  int want_running, want_paused;
  int64_t after_s = -1;
  char *keys[16], *vals[16];
  struct listed *all = NULL;
  size_t n = 0, cap = 0, i, start = 0;
  int64_t limit = LIST_DEFAULT;
  int nmeta = 0, k;
  json_t *arr;

  meta[0] = state[0] = next[0] = tmpl[0] = lim[0] = after[0] = '\0';
  if (fr_http_query_get(q->req->query, "metadata", meta, sizeof(meta)) == -ENOSPC ||
      (meta[0] != '\0' && (nmeta = parse_metadata(meta, keys, vals, 16)) < 0)) {
    api_field_fail(q, "metadata", "metadata must be at most 16 URL-encoded key=value pairs joined by '&'");
    return;
  }
  /* A value too long for its buffer is as wrong as a bad one. */
  if (fr_http_query_get(q->req->query, "limit", lim, sizeof(lim)) != -ENOENT &&
      fr_parse_int64(lim, 1, LIST_MAX, &limit) != 0) {
    api_field_fail(q, "limit", "limit must be an integer from 1 to 1000");
    return;
  }
  if (fr_http_query_get(q->req->query, "template", tmpl, sizeof(tmpl)) == -ENOSPC) {
    api_field_fail(q, "template", "template is a pool name (at most 63 characters)");
    return;
  }
  if (fr_http_query_get(q->req->query, "startedAfter", after, sizeof(after)) != -ENOENT &&
      fr_time_parse_rfc3339(after, &after_s) != 0) {
    api_field_fail(q, "startedAfter", "startedAfter must be an RFC 3339 UTC time (2026-01-02T03:04:05Z)");
    return;
  }
  if (fr_http_query_get(q->req->query, "nextToken", next, sizeof(next)) == -ENOSPC) {
    api_field_fail(q, "nextToken", "nextToken is not one this endpoint gave");
    return;
  }
  /* state=running, state=paused, both (repeated, or comma-separated), or
   * neither (both). */
  {
    const char *qs = q->req->query;
    int seen = 0;
    want_running = want_paused = 0;
    while (qs != NULL && *qs) {
      size_t l = strcspn(qs, "&");
      if (l > 6 && strncmp(qs, "state=", 6) == 0) {
        seen = 1;
        snprintf(state, sizeof(state), "%.*s", (int)(l - 6 < sizeof(state) - 1 ? l - 6 : sizeof(state) - 1),
                 qs + 6);
        want_running |= strstr(state, "running") != NULL;
        want_paused |= strstr(state, "paused") != NULL;
      }
      qs += l + (qs[l] == '&');
    }
    if (!seen)
      want_running = want_paused = 1;
  }
  for (i = 0; i < q->r->nadapters; i++) {
    struct fr_adapter *a = q->r->adapters[i];
    const struct fr_pod *pod;
    size_t cur = 0;
    struct fr_workspace w;
    void *wcur = NULL;
    while (want_paused && fr_adapter_workspace_next(a, &wcur, &w) == 0) {
      int ok = w.paused && w.tenant != NULL && strcmp(w.tenant, q->tenant) == 0 && !workspace_live_pod(a, w.pod) &&
               json_object_get(json_object_get(w.claim_json, "metadata"), "deletionTimestamp") == NULL &&
               (tmpl[0] == '\0' || (w.pool != NULL && strcmp(w.pool, tmpl) == 0)) &&
               (after_s < 0 || w.created_s >= after_s);
      for (k = 0; ok && k < nmeta; k++) {
        const char *v = workspace_spec_label(&w, keys[k]);
        ok = v != NULL && strcmp(v, vals[k]) == 0;
      }
      if (ok && n == cap) {
        size_t ncap = cap ? cap * 2 : 64;
        struct listed *m = realloc(all, ncap * sizeof(*m));
        if (m == NULL) {
          fr_workspace_clear(&w);
          free(all);
          api_oom(q);
          return;
        }
        all = m;
        cap = ncap;
      }
      if (ok) {
        snprintf(all[n].id, sizeof(all[n].id), "%s.%s", fr_adapter_name(a), w.pod);
        all[n].a = a;
        all[n].pod = NULL;
        all[n++].paused = e2b__paused_json(q->r, a, &w);
      }
      fr_workspace_clear(&w);
    }
    while (want_running && (pod = fr_adapter_pod_next(a, &cur)) != NULL) {
      if (!api_owned_by(pod, q->tenant) || fr_adapter_pod_leaving(a, pod))
        continue;
      if ((tmpl[0] != '\0' && (pod->pool == NULL || strcmp(pod->pool, tmpl) != 0)) ||
          (after_s >= 0 && (pod->created_s >= 0 ? pod->created_s : pod->creation_s) < after_s))
        continue;
      for (k = 0; k < nmeta; k++) {
        const char *v = fr_pod_label(pod, keys[k]);
        if (v == NULL || strcmp(v, vals[k]) != 0)
          break;
      }
      if (k < nmeta)
        continue;
      if (n == cap) {
        size_t ncap = cap ? cap * 2 : 64;
        struct listed *m = realloc(all, ncap * sizeof(*m));
        if (m == NULL) {
          free(all);
          api_oom(q);
          return;
        }
        all = m;
        cap = ncap;
      }
      snprintf(all[n].id, sizeof(all[n].id), "%s.%s", fr_adapter_name(a), pod->name);
      all[n].a = a;
      all[n].paused = NULL;
      all[n++].pod = pod;
    }
  }
  /* Pages in id order; the next token is the last id given, so any
   * replica continues a listing without remembering it. */
  if (n > 1)
    qsort(all, n, sizeof(*all), listed_cmp);
  if (next[0] != '\0')
    while (start < n && strcmp(all[start].id, next) <= 0)
      start++;
  arr = json_array();
  for (i = start; i < n && i < start + (size_t)limit; i++) {
    json_array_append_new(arr, all[i].pod != NULL ? e2b__sandbox_json(q->r, all[i].a, all[i].pod, 0)
                                                  : json_incref(all[i].paused));
  }
  hdr[0] = '\0';
  if (i < n)
    snprintf(hdr, sizeof(hdr), "X-Next-Token: %s\r\n", all[i - 1].id);
  for (i = 0; i < n; i++)
    json_decref(all[i].paused);
  free(all);
  api_reply(q, 200, arr, hdr[0] ? hdr : NULL);
}

/* ---------------------------------------------------------------------- */
/* dispatch                                                                */

/* The tenant of X-API-Key (NULL when absent), "local" for a router
 * without tenants; answers 401/403 and returns -1. */
static int authenticate(struct api_req *q, const char **tenant) {
  const char *key = fr_http_req_header(q->req, "X-API-Key");
  const struct fr_config_tenant *t;
  const struct fr_config_token *tok;
  const char *ip = q->req->peer_ip;
  char msg[300], when[21];

  *tenant = NULL;
  if (q->cfg->ntenants == 0) {
    if (strncmp(ip, "127.", 4) != 0 && strcmp(ip, "::1") != 0 && strncmp(ip, "::ffff:127.", 11) != 0) {
      api_fail(q, 403, "forbidden", "this router has no tenants configured and accepts loopback clients only", NULL);
      return -1;
    }
    *tenant = "local";
    return 0;
  }
  if (key == NULL || *key == '\0')
    return 0;
  if ((t = fr_config_tenant_by_token(q->cfg, key, &tok)) == NULL) {
    api_fail(q, 401, "unauthorized", "unknown API key: E2B_API_KEY must be a fedrouter tenant token", NULL);
    return -1;
  }
  router_note(q->req, "token", tok->name);
  if (fr_config_token_expired(tok, fr_wall_ms() / 1000)) {
    fr_time_rfc3339(tok->expires_at, when);
    snprintf(msg, sizeof(msg), "API key \"%s\" of tenant %s expired at %s; ask for its successor", tok->name,
             t->name, when);
    api_fail(q, 401, "token_expired", msg, NULL);
    return -1;
  }
  *tenant = t->name;
  return 0;
}

/* ---------------------------------------------------------------------- */
/* route handlers (routes.c)                                               */

int e2b_begin(struct api_req *q, const struct route *r) {
  const char *sid = fr_http_req_header(q->req, "E2b-Sandbox-Id"), *tenant;
  char what[300];

  q->shape_cb = e2b__shape;
  if (authenticate(q, &tenant) != 0)
    return -1;
  if (sid != NULL) {
    const char *port = fr_http_req_header(q->req, "E2b-Sandbox-Port");
    if (port != NULL && strcmp(port, E2B_ENVD_PORT) != 0) {
      e2b__port_relay(q, sid, tenant, port);
      return -1; /* answered, now or later */
    }
    /* A call into a sandbox: its access token decides (in_sandbox). */
    if (!(r->flags & RF_E2B_SANDBOX)) {
      snprintf(what, sizeof(what), "inside a sandbox, %.200s", q->req->path + 4);
      e2b__not_supported(q, what);
      return -1;
    }
    snprintf(q->tenant, sizeof(q->tenant), "%s", tenant != NULL ? tenant : "");
    return 0;
  }
  if (r->flags & RF_E2B_SANDBOX) {
    api_fail(q, 400, "sandbox_id_required",
             "calls into a sandbox need the E2b-Sandbox-Id header (pre-signed file URLs are not supported)", NULL);
    return -1;
  }
  if (tenant == NULL) {
    api_fail(q, 401, "unauthorized", "missing X-API-Key: set E2B_API_KEY to a fedrouter tenant token", NULL);
    return -1;
  }
  api_set_tenant(q, tenant);
  router_note(q->req, "tenant", tenant);
  return e2b__admitted(q) ? 0 : -1;
}

void e2b_create(struct api_req *q, const struct route_params *p) {
  (void)p;
  create(q);
}

void e2b_list(struct api_req *q, const struct route_params *p) {
  (void)p;
  list(q);
}

void e2b_get(struct api_req *q, const struct route_params *p) {
  struct fr_adapter *a;
  struct fr_workspace w;
  const struct fr_pod *pod;

  if (workspace_find_paused(q, p->id, &a, &w)) {
    api_reply(q, 200, e2b__paused_json(q->r, a, &w), NULL);
    fr_workspace_clear(&w);
    return;
  }
  if ((pod = find(q, p->id, &a)) != NULL)
    api_reply(q, 200, e2b__sandbox_json(q->r, a, pod, 1), NULL);
}

void e2b_kill(struct api_req *q, const struct route_params *p) {
  struct fr_adapter *a;
  struct fr_workspace w;

  if (workspace_find_paused(q, p->id, &a, &w)) {
    /* A paused sandbox is its workspace claim. */
    struct op *o = calloc(1, sizeof(*o));
    char pod[200];
    snprintf(pod, sizeof(pod), "%s", w.pod);
    fr_workspace_clear(&w);
    if (o == NULL) {
      api_oom(q);
      return;
    }
    o->q = q;
    if (fr_adapter_sandbox_delete(a, pod, q->rid, op_done, o) != 0) {
      free(o);
      api_fail(q, 503, "cluster_unavailable", "cannot send the delete to the cluster", "Retry-After: 5\r\n");
      return;
    }
    api_defer(q);
    return;
  }
  kill_sandbox(q, p->id);
}

void e2b_timeout(struct api_req *q, const struct route_params *p) {
  set_timeout(q, p->id, 0);
}

void e2b_connect(struct api_req *q, const struct route_params *p) {
  struct fr_adapter *a;
  struct fr_workspace w;

  if (workspace_find_paused(q, p->id, &a, &w)) {
    /* Connecting resumes a paused sandbox (201, as E2B answers it). */
    fr_workspace_clear(&w);
    q->shape_kind = E2B_SHAPE_CONNECT_RESUME;
    sandboxes_resume(q, p);
    return;
  }
  set_timeout(q, p->id, 1);
}

void e2b_pause(struct api_req *q, const struct route_params *p) {
  struct fr_adapter *a;
  struct fr_workspace w;
  const struct fr_pod *pod;

  if (workspace_find_paused(q, p->id, &a, &w)) {
    fr_workspace_clear(&w);
    api_fail(q, 409, "already_paused", "the sandbox is already paused", NULL);
    return;
  }
  if ((pod = find(q, p->id, &a)) == NULL)
    return;
  if (fr_pod_label(pod, FR_LABEL_WORKSPACE) == NULL) {
    /* Not 409: the SDK reads that as "already paused". */
    api_fail(q, 400, "no_workspace",
             "only a sandbox created with lifecycle.onTimeout 'pause' (a workspace at " E2B_WORKSPACE_PATH
             ") can be paused: fedrouter keeps its files, not its memory", NULL);
    return;
  }
  q->shape_kind = E2B_SHAPE_PAUSE;
  sandboxes_pause(q, p);
}

void e2b_resume(struct api_req *q, const struct route_params *p) {
  struct fr_adapter *a;
  struct fr_workspace w;

  if (!workspace_find_paused(q, p->id, &a, &w)) {
    const struct fr_pod *pod = find(q, p->id, &a);
    if (pod != NULL)
      api_fail(q, 409, "already_running", "the sandbox is already running", NULL);
    return;
  }
  fr_workspace_clear(&w);
  q->shape_kind = E2B_SHAPE_RESUME;
  sandboxes_resume(q, p);
}

void e2b_no_snapshots(struct api_req *q, const struct route_params *p) {
  (void)p;
  e2b__not_supported(q, "snapshots");
}

void e2b_no_templates(struct api_req *q, const struct route_params *p) {
  (void)p;
  e2b__not_supported(q, "templates (use fedrouter pools: POST /v1/pools)");
}

void e2b_no_volumes(struct api_req *q, const struct route_params *p) {
  (void)p;
  e2b__not_supported(q, "volumes");
}

void e2b_unsupported(struct api_req *q, const struct route_params *p) {
  char what[300];

  snprintf(what, sizeof(what), "%s /%.200s", q->req->method, p->tail != NULL ? p->tail : "");
  e2b__not_supported(q, what);
}

