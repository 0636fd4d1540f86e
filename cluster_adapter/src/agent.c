/* agent.c - reaching a sandbox's fedrouter-agent (and the ports it
 * serves): which pods have one, their tokens, the path, /init.
 *
 * Without a gateway every call goes through the cluster's REST client
 * (kept-alive, pooled connections: no per-call handshake) to the API
 * server's pod proxy
 *   /api/v1/namespaces/<ns>/pods/<pod>:<port>/proxy/<path>
 * With one (docs/gateway.md), through a client of its own to
 *   <gateway url>/v1/proxy/<ns>/<pod>/<port>/<path>
 * signed with Fr-Gateway-Auth and carrying none of the cluster's
 * credentials; /init still takes the pod proxy (the gateway refuses it).
 * Either way the sandbox's token goes in X-Access-Token and upstream.c
 * builds the path from its allow-list of agent routes. agent__send() is the
 * one place that picks the path.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "agent.h"

#include "cluster.h"
#include "fr/assert.h"
#include "fr/gwproto.h"
#include "fr/kube.h"
#include "fr/log.h"
#include "fr/util.h"
#include "upstream.h"

/* /init is small and the agent answers it at once; a pod that does not
 * in this long is not usable. */
#define AGENT_INIT_TIMEOUT_MS 15000

int agent__port_of(const struct cluster *cl, const struct fr_pod *pod) {
  const char *v;
  int64_t port;

  if (cl->cc.agent == NULL || pod == NULL || (v = fr_pod_label(pod, FR_LABEL_AGENT)) == NULL ||
      fr_parse_int64(v, 1, 65535, &port) != 0)
    return 0;
  return (int)port;
}

int agent__token(const struct cluster *cl, const char *pod, int previous, char out[65]) {
  const struct fr_adapter_agent *ag = cl->cc.agent;
  char id[320];
  int n = snprintf(id, sizeof(id), "%s.%s", cl->cc.name, pod);

  if (ag == NULL || n < 0 || (size_t)n >= sizeof(id) || (previous && ag->prev_key == NULL)) {
    out[0] = '\0';
    return -EINVAL;
  }
  return previous ? fr_hmac_sha256_hex(ag->prev_key, ag->prev_key_len, id, (size_t)n, out)
                  : fr_hmac_sha256_hex(ag->key, ag->key_len, id, (size_t)n, out);
}

int agent__path(const struct cluster *cl, const char *pod, int port, const char *method, const char *route,
                int internal, char *out, size_t cap) {
  return upstream_agent_path(out, cap, cl->ns, pod, port, method, route, internal);
}

/* ---- the data path: pod proxy or gateway ---- */

int agent__gateway_error(int via, const struct fr_kube_response *r, char *code, size_t cap) {
  return via >= 0 && r->status != 0 && r->headers != NULL &&
         fr_agent_header(r->headers, FR_GW_ERROR_HEADER, code, cap) == 0;
}

char *agent__gateway_headers(const struct cluster *cl, const char *pod, int port, const char *caller) {
  return gwpath__headers(cl->gw, cl->cc.name, cl->ns, pod, port, caller);
}

int agent__send(struct cluster *cl, const char *pod, int port, int user_port, const char *method, const char *route,
                int internal, const char *content_type, const void *body, size_t len,
                const struct fr_kube_request_opts *ko, fr_kube_response_cb cb, void *arg, struct fr_kube_call **out,
                int *via) {
  struct fr_kube_request_opts o = *ko;
  char path[2300];
  char *headers;
  int rc, gw = *via == GWPATH_PICK ? gwpath__pick(cl->gw) : *via;

  if (gw < 0 || gwpath__client(cl->gw, gw) == NULL) {
    rc = user_port != 0 ? upstream_port_path(path, sizeof(path), cl->ns, pod, user_port, route)
                        : upstream_agent_path(path, sizeof(path), cl->ns, pod, port, method, route, internal);
    if (rc != 0)
      return -EINVAL;
    rc = fr_kube_request_opts(cl->client, method, path, content_type, body, len, ko, cb, arg, out);
    if (rc == 0) {
      cl->path_calls[CLUSTER_PATH_POD_PROXY]++;
      *via = GWPATH_POD_PROXY;
    }
    return rc;
  }
  rc = user_port != 0 ? upstream_gw_port_path(path, sizeof(path), cl->ns, pod, user_port, route)
                      : upstream_gw_agent_path(path, sizeof(path), cl->ns, pod, port, method, route, internal);
  if (rc != 0)
    return -EINVAL;
  if ((headers = agent__gateway_headers(cl, pod, user_port != 0 ? user_port : port, ko->header)) == NULL)
    return -ENOMEM;
  o.header = headers;
  rc = fr_kube_request_opts(gwpath__client(cl->gw, gw), method, path, content_type, body, len, &o, cb, arg, out);
  free(headers);
  if (rc == 0) {
    cl->path_calls[CLUSTER_PATH_GATEWAY]++;
    *via = gw;
  }
  return rc;
}

int agent__gateway_done(struct cluster *cl, int via, const struct fr_kube_response *r, int answered, int *hops) {
  char code[64] = "";

  if (via < 0 || cl->gw == NULL)
    return AGENT_NO_RETRY;
  if (r->status != 0 && fr_agent_header(r->headers, FR_GW_ERROR_HEADER, code, sizeof(code)) != 0)
    code[0] = '\0';
  gwpath__report(cl->gw, via, gwpath__outcome(r, answered, code));
  if (r->status != 0 || answered || !r->not_sent || r->attempts == 0)
    return AGENT_NO_RETRY;
  /* Not one byte left: another URL whose breaker is closed, else the pod
   * proxy. <via>'s own breaker has just opened, so a call goes on down the
   * list and ends on the pod proxy, which is never left; <hops> bounds it
   * should the breakers flap meanwhile. */
  return ++*hops >= FR_ADAPTER_GATEWAY_URLS_MAX ? GWPATH_POD_PROXY : gwpath__pick(cl->gw);
}

/* ---- /init ---- */

/* An answer of the API server itself (its pod proxy could not reach the
 * agent, the pod is gone, RBAC) rather than of the agent: a Status. */
static int api_server_status(const struct fr_kube_response *r) {
  return r->body_len > 0 && strstr(r->body, "\"kind\":\"Status\"") != NULL;
}


/* Only a router initialises an agent. A pod is created carrying the
 * SHA-256 of its init token (env FR_AGENT_INIT_SHA256), which the sandbox
 * can read but not invert; the token itself is an HMAC under the agent key
 * that every router replica derives alike. A pool's pods come from one
 * ReplicaSet template, so their token is the pool's; a cold create's is
 * its pod's. The agent wipes the token once it checked it. */
static int init_token(const struct cluster *cl, const char *scope, int previous, char out[65]) {
  const struct fr_adapter_agent *ag = cl->cc.agent;
  char msg[512];
  int n = snprintf(msg, sizeof(msg), "init:%s/%s/%s", cl->cc.name, cl->ns, scope);

  out[0] = '\0';
  if (ag == NULL || n < 0 || (size_t)n >= sizeof(msg) || (previous && ag->prev_key == NULL))
    return -EINVAL;
  return previous ? fr_hmac_sha256_hex(ag->prev_key, ag->prev_key_len, msg, (size_t)n, out)
                  : fr_hmac_sha256_hex(ag->key, ag->key_len, msg, (size_t)n, out);
}

int agent__init_sha256(const struct cluster *cl, const char *kind, const char *name, char out[65]) {
  char scope[300], token[65];
  int n = snprintf(scope, sizeof(scope), "%s/%s", kind, name);

  out[0] = '\0';
  if (n < 0 || (size_t)n >= sizeof(scope) || init_token(cl, scope, 0, token) != 0)
    return -EINVAL;
  fr_sha256_hex(token, strlen(token), out);
  explicit_bzero(token, sizeof(token));
  return 0;
}

/* "pool/<pool>" or "pod/<pod>", as the pod's label says it was made. */
static int init_scope(const struct fr_pod *pod, char *out, size_t cap) {
  const char *kind = fr_pod_label(pod, FR_LABEL_AGENT_INIT);
  int n;

  if (kind != NULL && strcmp(kind, AGENT_INIT_POOL) == 0 && pod->pool != NULL)
    n = snprintf(out, cap, "%s/%s", AGENT_INIT_POOL, pod->pool);
  else if (kind != NULL && strcmp(kind, AGENT_INIT_POD) == 0)
    n = snprintf(out, cap, "%s/%s", AGENT_INIT_POD, pod->name);
  else
    return -EINVAL;
  return n < 0 || (size_t)n >= cap ? -EINVAL : 0;
}

struct agent__init {
  struct cluster *cl;
  agent__done_cb cb;
  void *arg;
  struct fr_kube_call *kc;
  char *body;         /* holds the env and secrets: wiped when freed */
  char *request_id;
  char path[400];
  char scope[300];
  int flags;
  int previous_key;   /* this attempt carries the previous key's init token */
};

static void init_free(struct agent__init *ai) {
  /* Its Kubernetes call answered, never sent, or cancelled first. */
  FR_ASSERT(ai->kc == NULL);
  fr_secret_free(ai->body);
  free(ai->request_id);
  free(ai);
}

void agent__init_cancel(struct agent__init *ai) {
  if (ai == NULL)
    return;
  fr_kube_cancel(ai->kc);
  ai->kc = NULL;
  init_free(ai);
}

static int init_send(struct agent__init *ai);

static void on_init(const struct fr_kube_response *r, void *arg) {
  struct agent__init *ai = arg;
  char msg[400];

  ai->kc = NULL;
  if (r->status == 401 && !ai->previous_key && ai->cl->cc.agent->prev_key != NULL && !api_server_status(r)) {
    /* Made before a key rotation: its init token is the old key's. */
    ai->previous_key = 1;
    if (init_send(ai) == 0)
      return;
  }
  if (r->status == 204 || r->status == 200) {
    ai->cb(0, NULL, ai->arg);
  } else {
    snprintf(msg, sizeof(msg), "the sandbox's agent did not accept /init: %d %.200s", r->status,
             r->status == 0 ? (r->error ? r->error : "no answer") : (r->body_len ? r->body : ""));
    ai->cb(-EIO, msg, ai->arg);
  }
  init_free(ai);
}

static int init_send(struct agent__init *ai) {
  struct fr_kube_request_opts o;
  char token[65], header[96];
  int rc;

  if (init_token(ai->cl, ai->scope, ai->previous_key, token) != 0)
    return -EINVAL;
  snprintf(header, sizeof(header), "X-Access-Token: %s", token);
  memset(&o, 0, sizeof(o));
  o.flags = ai->flags;
  o.request_id = ai->request_id;
  o.timeout_ms = AGENT_INIT_TIMEOUT_MS;
  o.header = header;
  rc = fr_kube_request_opts(ai->cl->client, "POST", ai->path, "application/json", ai->body, strlen(ai->body), &o,
                            on_init, ai, &ai->kc);
  if (rc == 0)
    ai->cl->path_calls[CLUSTER_PATH_POD_PROXY]++; /* the gateway refuses /init */
  explicit_bzero(token, sizeof(token));
  explicit_bzero(header, sizeof(header));
  return rc;
}

int agent__init(struct cluster *cl, const struct fr_pod *pod, int port, json_t *env, json_t *secrets,
               const char *request_id, agent__done_cb cb, void *arg, struct agent__init **out) {
  struct agent__init *ai;
  char token[65];
  json_t *body, *vars, *names;
  const char *k;
  json_t *v;
  int rc;

  *out = NULL;
  ai = calloc(1, sizeof(*ai));
  if (ai == NULL)
    return -ENOMEM;
  ai->cl = cl;
  ai->cb = cb;
  ai->arg = arg;
  ai->flags = secrets != NULL ? FR_KUBE_SENSITIVE : 0;
  if (init_scope(pod, ai->scope, sizeof(ai->scope)) != 0 || agent__token(cl, pod->name, 0, token) != 0 ||
      upstream_agent_path(ai->path, sizeof(ai->path), cl->ns, pod->name, port, "POST", "/init", 1) != 0) {
    free(ai);
    return -EINVAL;
  }
  /* The sandbox's access token and its env with its secrets over it,
   * which every later process inherits: it never lands in the pod spec or
   * an annotation. The agent replaces its env whole with it, and keeps
   * the secrets' names out of GET /envs. */
  vars = json_object();
  names = json_array();
  if (vars == NULL || names == NULL || (env != NULL && json_object_update(vars, env) != 0) ||
      (secrets != NULL && json_object_update(vars, secrets) != 0)) {
    json_decref(vars);
    json_decref(names);
    free(ai);
    return -ENOMEM;
  }
  json_object_foreach(secrets, k, v) json_array_append_new(names, json_string(k));
  body = json_pack("{s:s,s:o,s:o}", "accessToken", token, "envVars", vars, "secretNames", names);
  ai->body = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body); /* the values stay in <secrets>, whose owner wipes them */
  explicit_bzero(token, sizeof(token));
  ai->request_id = request_id != NULL ? strdup(request_id) : NULL;
  if (ai->body == NULL || (request_id != NULL && ai->request_id == NULL)) {
    init_free(ai);
    return -ENOMEM;
  }
  rc = init_send(ai);
  if (rc != 0) {
    init_free(ai);
    return rc;
  }
  *out = ai;
  return 0;
}

/* ---- raw calls ---- */

struct fr_agent_call {
  struct cluster *cl;
  struct fr_kube_call *kc;
  struct fr_agent_call_opts o;  /* the caller's, its strings pointing into <strs> */
  char *strs[5];                /* copies: method, path, content type, headers, request id */
  char pod[256];
  char *body;                   /* a whole body, kept for a retry with the previous key */
  size_t body_len;
  int port;
  int previous_key;             /* this attempt uses the previous key's token */
  int got_head;                 /* the agent's 2xx head arrived */
  int pause_next;               /* on_data asked to pause after the piece it took */
  int stopped;                  /* on_data asked to stop */
  int via;                      /* the path it was sent on: a gateway URL, GWPATH_POD_PROXY (GWPATH_PICK before) */
  int hops;                     /* sent again after a gateway connection that never opened */
  int gw_answer;                /* a port call: the gateway's own error came instead of the sandbox's head */
  char gw_message[200];         /* and the start of its body */
  size_t gw_message_len;
};

static int call_send(struct fr_agent_call *ac);

static void call_free(struct fr_agent_call *ac) {
  /* Its Kubernetes call answered, never sent, or cancelled first. */
  FR_ASSERT(ac->kc == NULL);
  free(ac->body);
  free(ac->strs[0]);
  free(ac->strs[1]);
  free(ac->strs[2]);
  free(ac->strs[3]);
  free(ac->strs[4]);
  free(ac);
}

static char *dup_or_null(const char *s, int *failed) {
  char *d = s != NULL ? strdup(s) : NULL;

  if (s != NULL && d == NULL)
    *failed = 1;
  return d;
}

static void on_call_head(int status, const char *headers, void *arg) {
  struct fr_agent_call *ac = arg;
  char ctype[200];

  if (ac->via >= 0 && fr_agent_header(headers, FR_GW_ERROR_HEADER, ctype, sizeof(ctype)) != -ENOENT) {
    /* A port call (any status is streamed): the gateway refused it. Its
     * answer is not the sandbox's, and never passed on as one. */
    ac->gw_answer = 1;
    return;
  }
  ac->got_head = 1;
  if (ac->o.on_head != NULL)
    ac->o.on_head(status, fr_agent_header(headers, "Content-Type", ctype, sizeof(ctype)) == 0 ? ctype : NULL,
                  headers, ac->o.arg);
}

static int on_call_data(const char *data, size_t len, void *arg) {
  struct fr_agent_call *ac = arg;
  int r;

  if (ac->gw_answer) {
    size_t n = len < sizeof(ac->gw_message) - 1 - ac->gw_message_len ? len
                                                                     : sizeof(ac->gw_message) - 1 - ac->gw_message_len;
    memcpy(ac->gw_message + ac->gw_message_len, data, n);
    ac->gw_message_len += n;
    ac->gw_message[ac->gw_message_len] = '\0';
    return 0;
  }
  if (ac->pause_next) {
    ac->pause_next = 0;
    return FR_KUBE_PAUSE;   /* curl keeps this piece until resumed */
  }
  r = ac->o.on_data != NULL ? ac->o.on_data(data, len, ac->o.arg) : 0;
  if (r == FR_AGENT_PAUSE)
    ac->pause_next = 1;
  else if (r != 0)
    ac->stopped = 1;
  return r == FR_AGENT_PAUSE ? 0 : r != 0 ? -1 : 0;
}

static void on_call_drain(void *arg) {
  struct fr_agent_call *ac = arg;

  if (ac->o.on_drain != NULL)
    ac->o.on_drain(ac->o.arg);
}

/* The gateway answered for itself (Fr-Gateway-Error: it refused the call,
 * or could not reach the pod): fills <res> with why and returns 1; else 0.
 * A refusal of this router (401 wrong or rotated key, 403) is logged once
 * until a call gets through again. (Its breaker heard of it already,
 * agent__gateway_done(); the cluster's breaker never does.) */
static int on_gateway_answer(struct fr_agent_call *ac, const struct fr_kube_response *resp, struct fr_agent_result *res,
                             char *msg, size_t cap) {
  struct cluster *cl = ac->cl;
  char code[64];
  const char *text;

  if (!ac->gw_answer && !agent__gateway_error(ac->via, resp, code, sizeof(code)))
    return 0;
  if (ac->gw_answer && fr_agent_header(resp->headers, FR_GW_ERROR_HEADER, code, sizeof(code)) != 0)
    snprintf(code, sizeof(code), "%s", "unknown");
  text = ac->gw_answer ? ac->gw_message : resp->body;
  res->err = FR_AGENT_UNAVAILABLE;
  res->status = resp->status;
  if (strcmp(code, "upstream_unreachable") == 0 && ac->o.port != 0)
    res->flags |= FR_AGENT_PORT_CLOSED;
  snprintf(msg, cap, "the cluster's gateway %s: %d %s: %.250s",
           resp->status == 401 || resp->status == 403 ? "refused this router" : "could not pass the call on",
           resp->status, code, text != NULL ? text : "");
  res->message = msg;
  if (gwpath__refused(cl->gw, resp->status == 401 || resp->status == 403))
    FR_WARN("adapter", "%s: %s", cl->cc.name, msg);
  return 1;
}

static void on_call_done(const struct fr_kube_response *resp, void *arg) {
  struct fr_agent_call *ac = arg;
  struct fr_agent_result res;
  char msg[400];
  int via, next;

  ac->kc = NULL;
  memset(&res, 0, sizeof(res));
  res.body = "";
  via = ac->via;
  next = agent__gateway_done(ac->cl, via, resp, ac->got_head || ac->gw_answer, &ac->hops);
  if (next != AGENT_NO_RETRY && !ac->o.stream_body && !ac->stopped) {
    /* The gateway URL refused the connection: nothing was sent. Once more
     * on another URL or the pod proxy (a streamed body is not held: those
     * fail). */
    ac->via = next;
    if (call_send(ac) == 0)
      return;
    ac->via = via;
  }
  if (on_gateway_answer(ac, resp, &res, msg, sizeof(msg))) {
    ac->o.on_done(&res, ac->o.arg);
    call_free(ac);
    return;
  }
  if (ac->o.port != 0 && resp->status >= 500 && api_server_status(resp)) {
    /* A port of the sandbox: the cluster's proxy could not reach it. The
     * sandbox's business, not the cluster's: no breaker. */
    res.err = FR_AGENT_UNAVAILABLE;
    res.status = resp->status;
    if (strstr(resp->body, "connection refused") != NULL || strstr(resp->body, "unknown port") != NULL)
      res.flags |= FR_AGENT_PORT_CLOSED;
    snprintf(msg, sizeof(msg), "cannot reach port %d of the sandbox: %d %.300s", ac->o.port, resp->status,
             resp->body);
    res.message = msg;
    ac->o.on_done(&res, ac->o.arg);
    call_free(ac);
    return;
  }
  if (resp->status == 401 && ac->o.port == 0 && !ac->got_head && !ac->previous_key && !ac->o.stream_body &&
      ac->cl->cc.agent->prev_key != NULL && !api_server_status(resp)) {
    /* (The gateway's own 401 was answered above.) */
    /* Initialised before a key rotation: its token is from the old key. */
    ac->previous_key = 1;
    if (call_send(ac) == 0)
      return;
  }
  if (ac->stopped) {
    res.err = FR_AGENT_CANCELED;
    res.message = "stopped by its reader";
  } else if (resp->status == 0) {
    /* Not reached at all: the cluster's fault, unless something started
     * or it was never sent (it waited out the router's own queue for the
     * cluster: busy, not down). A sandbox's own port never feeds the
     * breaker: what a sandbox's server does (hang up, stall) must not make
     * the cluster look down to every tenant. */
    if (!ac->got_head && ac->o.port == 0 && resp->attempts > 0 && ac->via < 0)
      cluster__report(ac->cl, 0);
    snprintf(msg, sizeof(msg), "%s%s: %.300s",
             ac->got_head ? "the agent's answer was cut" : "cannot reach the sandbox's agent",
             ac->via >= 0 ? (ac->got_head ? " (the connection to the cluster's gateway broke; not replayed)"
                                          : " (the cluster's gateway did not answer)")
                          : "",
             resp->error != NULL ? resp->error : "no answer");
    res.err = FR_AGENT_UNAVAILABLE;
    res.message = msg;
  } else if (resp->status >= 400 && api_server_status(resp)) {
    if (ac->via < 0)
      cluster__report(ac->cl, 1);
    snprintf(msg, sizeof(msg), "cannot reach the sandbox's agent: %d %.300s", resp->status, resp->body);
    res.err = FR_AGENT_UNAVAILABLE;
    res.status = resp->status;
    res.message = msg;
  } else {
    if (ac->via < 0)
      cluster__report(ac->cl, 1);
    else
      gwpath__refused(ac->cl->gw, 0);
    res.err = FR_AGENT_OK;
    res.status = resp->status;
    res.body = resp->body;
    res.body_len = resp->body_len;
  }
  ac->o.on_done(&res, ac->o.arg);
  call_free(ac);
}

/* Bytes of "X-Access-Token: <64 hex>\n" ahead of the caller's headers. */
#define TOKEN_HEADER_LEN (16 + 64 + 1)

static int call_send(struct fr_agent_call *ac) {
  struct fr_kube_request_opts ko;
  char token[65];
  char *headers;
  size_t extra = ac->o.headers != NULL ? strlen(ac->o.headers) : 0;
  int rc;

  ac->got_head = ac->pause_next = ac->stopped = ac->gw_answer = 0;
  ac->gw_message_len = 0;
  ac->gw_message[0] = '\0';
  memset(&ko, 0, sizeof(ko));
  ko.request_id = ac->o.request_id;
  ko.timeout_ms = ac->o.timeout_ms;
  ko.on_data = on_call_data;
  ko.on_head = on_call_head;
  ko.stream_body = ac->o.stream_body;
  ko.body_size = ac->o.stream_body ? ac->o.body_size : 0;
  ko.on_drain = on_call_drain;
  if (ac->o.port != 0) {
    /* A port the sandbox serves: its own path, no token (it is the
     * agent's, never a sandbox server's to see). */
    ko.flags = FR_KUBE_STREAM | FR_KUBE_ANY_STATUS;
    ko.header = ac->o.headers;
    return agent__send(ac->cl, ac->pod, 0, ac->o.port, ac->o.method, ac->o.path, 0, ac->o.content_type, ac->body,
                      ac->body_len, &ko, on_call_done, ac, &ac->kc, &ac->via);
  }
  if (agent__token(ac->cl, ac->pod, ac->previous_key, token) != 0)
    return -EINVAL;
  headers = malloc(TOKEN_HEADER_LEN + extra + 1);
  if (headers == NULL)
    return -ENOMEM;
  snprintf(headers, TOKEN_HEADER_LEN + extra + 1, "X-Access-Token: %s\n%s", token,
           ac->o.headers != NULL ? ac->o.headers : "");
  explicit_bzero(token, sizeof(token));
  ko.flags = FR_KUBE_STREAM;
  ko.header = headers;
  rc = agent__send(ac->cl, ac->pod, ac->port, 0, ac->o.method, ac->o.path, ac->o.internal_route, ac->o.content_type,
                  ac->body, ac->body_len, &ko, on_call_done, ac, &ac->kc, &ac->via);
  free(headers);
  return rc;
}

/* Headers a caller may not set: the transport's and the credentials. */
static int header_allowed(const char *h) {
  static const char *const no[] = {"host:", "content-length:", "transfer-encoding:", "x-access-token:",
                                   "authorization:", "connection:", "expect:", "upgrade:", NULL};
  const char *line, *nl;
  size_t i;

  for (line = h; line != NULL && *line != '\0'; line = *nl ? nl + 1 : nl) {
    nl = line + strcspn(line, "\n");
    for (i = 0; no[i] != NULL; i++)
      if ((size_t)(nl - line) >= strlen(no[i]) && strncasecmp(line, no[i], strlen(no[i])) == 0)
        return 0;
  }
  return 1;
}

int agent__call(struct cluster *cl, const char *pod_name, const struct fr_agent_call_opts *o,
                struct fr_agent_call **out) {
  const struct fr_pod *pod;
  struct fr_agent_call *ac;
  int port, rc;

  if (out != NULL)
    *out = NULL;
  if (cl == NULL || pod_name == NULL || o == NULL || o->method == NULL || o->path == NULL ||
      o->path[0] != '/' || o->on_done == NULL || strlen(pod_name) >= sizeof(ac->pod) ||
      (o->stream_body && o->body != NULL) || !header_allowed(o->headers))
    return -EINVAL;
  pod = cluster__pod(cl, pod_name);
  if (pod == NULL)
    return -ENOENT;
  port = agent__port_of(cl, pod);
  if (o->port != 0) {
    /* A port of the sandbox: never the agent's (its routes and its token
     * are reached only as the agent's), and only the methods a server
     * takes. */
    if (o->port < 1 || o->port > 65535 || o->port == port || o->port == FR_AGENT_DEFAULT_PORT ||
        strpbrk(o->method, " \r\n") != NULL || strcmp(o->method, "CONNECT") == 0 || strcmp(o->method, "TRACE") == 0)
      return -EINVAL;
  } else if (port == 0) {
    return -ENOTSUP;
  }
  if (!cluster__reachable(cl))
    return -EHOSTDOWN;
  ac = calloc(1, sizeof(*ac));
  if (ac == NULL)
    return -ENOMEM;
  ac->cl = cl;
  ac->via = GWPATH_PICK;
  ac->o = *o;
  ac->o.body = NULL;
  {
    int failed = 0;

    ac->o.method = ac->strs[0] = dup_or_null(o->method, &failed);
    ac->o.path = ac->strs[1] = dup_or_null(o->path, &failed);
    ac->o.content_type = ac->strs[2] = dup_or_null(o->content_type, &failed);
    ac->o.headers = ac->strs[3] = dup_or_null(o->headers, &failed);
    ac->o.request_id = ac->strs[4] = dup_or_null(o->request_id, &failed);
    if (failed) {
      call_free(ac);
      return -ENOMEM;
    }
  }
  ac->port = port;
  snprintf(ac->pod, sizeof(ac->pod), "%s", pod_name);
  if (o->body != NULL) {
    ac->body = malloc(o->body_len + 1);
    if (ac->body == NULL) {
      call_free(ac);
      return -ENOMEM;
    }
    memcpy(ac->body, o->body, o->body_len);
    ac->body_len = o->body_len;
  }
  rc = call_send(ac);
  if (rc != 0) {
    call_free(ac);
    return rc;
  }
  if (out != NULL)
    *out = ac;
  return 0;
}

int fr_agent_call_write(struct fr_agent_call *c, const void *data, size_t len) {
  return c != NULL && c->kc != NULL ? fr_kube_call_write(c->kc, data, len) : -EPIPE;
}

size_t fr_agent_call_pending(const struct fr_agent_call *c) {
  return c != NULL && c->kc != NULL ? fr_kube_call_pending(c->kc) : 0;
}

int fr_agent_call_end(struct fr_agent_call *c) {
  return c != NULL && c->kc != NULL ? fr_kube_call_end(c->kc) : -EPIPE;
}

void fr_agent_call_resume(struct fr_agent_call *c) {
  if (c == NULL || c->kc == NULL)
    return;
  if (c->pause_next) {
    c->pause_next = 0;   /* the pause had not taken effect yet */
    return;
  }
  fr_kube_call_resume(c->kc);
}

void fr_agent_call_cancel(struct fr_agent_call *c) {
  if (c == NULL)
    return;
  fr_kube_cancel(c->kc);
  c->kc = NULL;
  call_free(c);
}

int fr_agent_header(const char *headers, const char *name, char *out, size_t cap) {
  size_t nlen = strlen(name), len;
  const char *line, *v, *end;

  for (line = headers; line != NULL && *line != '\0'; line += len + (line[len] != '\0')) {
    len = strcspn(line, "\n");
    if (len > nlen && strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
      v = line + nlen + 1;
      end = line + len;
      while (v < end && (*v == ' ' || *v == '\t'))
        v++;
      while (end > v && (end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
      if ((size_t)(end - v) >= cap)
        return -ENOSPC;
      memcpy(out, v, (size_t)(end - v));
      out[end - v] = '\0';
      return 0;
    }
  }
  return -ENOENT;
}

static int token_eq(const char *a, const char *b) {
  unsigned char d = 0;
  size_t i;

  for (i = 0; i < 64; i++)
    d |= (unsigned char)(a[i] ^ b[i]);
  return d == 0;
}

int agent__token_ok(const struct cluster *cl, const char *pod, const char *token) {
  char want[65];
  int ok = 0;

  if (token == NULL || strlen(token) != 64)
    return 0;
  if (agent__token(cl, pod, 0, want) == 0 && token_eq(want, token))
    ok = 1;
  if (agent__token(cl, pod, 1, want) == 0 && token_eq(want, token))
    ok = 1;
  return ok;
}
