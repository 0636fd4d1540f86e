/* agent.c - reaching a sandbox's fedrouter-agent through the API server's
 * pod proxy: which pods have one, their tokens, the proxy path, /init.
 *
 * Every call goes through the cluster's REST client (kept-alive, pooled
 * connections: no per-call handshake) to
 *   /api/v1/namespaces/<ns>/pods/<pod>:<port>/proxy/<path>
 * with the sandbox's token in X-Access-Token. This file is the one seam a
 * per-cluster gateway (reached directly, past the API server) would replace.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapter_internal.h"
#include "fr/util.h"

/* /init is small and the agent answers it at once; a pod that does not
 * in this long is not usable. */
#define AGENT_INIT_TIMEOUT_MS 15000

int agent_port_of(const struct fr_adapter *a, const struct fr_pod *pod) {
  const char *v;
  int64_t port;

  if (a->cc.agent == NULL || pod == NULL || (v = fr_pod_label(pod, FR_LABEL_AGENT)) == NULL ||
      fr_parse_int64(v, 1, 65535, &port) != 0)
    return 0;
  return (int)port;
}

int agent_token(const struct fr_adapter *a, const char *pod, int previous, char out[65]) {
  const struct fr_adapter_agent *ag = a->cc.agent;
  char id[320];
  int n = snprintf(id, sizeof(id), "%s.%s", a->cc.name, pod);

  if (ag == NULL || n < 0 || (size_t)n >= sizeof(id) || (previous && ag->prev_key == NULL)) {
    out[0] = '\0';
    return -EINVAL;
  }
  return previous ? fr_hmac_sha256_hex(ag->prev_key, ag->prev_key_len, id, (size_t)n, out)
                  : fr_hmac_sha256_hex(ag->key, ag->key_len, id, (size_t)n, out);
}

int agent_path(const struct fr_adapter *a, const char *pod, int port, const char *rest, char *out,
               size_t cap) {
  int n = snprintf(out, cap, "/api/v1/namespaces/%s/pods/%s:%d/proxy/%s", a->ns, pod, port, rest);

  return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* ---- /init ---- */

struct init_call {
  agent_done_cb cb;
  void *arg;
};

static void on_init(const struct fr_kube_response *r, void *arg) {
  struct init_call *ic = arg;
  char msg[400];

  if (r->status == 204 || r->status == 200) {
    ic->cb(0, NULL, ic->arg);
  } else {
    snprintf(msg, sizeof(msg), "the sandbox's agent did not accept /init: %d %.200s", r->status,
             r->status == 0 ? (r->error ? r->error : "no answer") : (r->body_len ? r->body : ""));
    ic->cb(-EIO, msg, ic->arg);
  }
  free(ic);
}

int agent_init(struct fr_adapter *a, const char *pod, int port, json_t *env, const char *request_id,
               agent_done_cb cb, void *arg, struct fr_kube_call **out) {
  struct fr_kube_request_opts o;
  struct init_call *ic;
  char token[65], path[400], header[96];
  json_t *body;
  char *text;
  int rc;

  if (agent_token(a, pod, 0, token) != 0 || agent_path(a, pod, port, "init", path, sizeof(path)) != 0)
    return -EINVAL;
  /* The token (set by the first /init, then required) and the sandbox's
   * env, which every later process inherits: it never lands in the pod
   * spec or an annotation. */
  body = json_pack("{s:s,s:o}", "accessToken", token, "envVars", env != NULL ? json_incref(env) : json_object());
  text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  ic = malloc(sizeof(*ic));
  if (text == NULL || ic == NULL) {
    free(text);
    free(ic);
    return -ENOMEM;
  }
  ic->cb = cb;
  ic->arg = arg;
  snprintf(header, sizeof(header), "X-Access-Token: %s", token);
  memset(&o, 0, sizeof(o));
  o.request_id = request_id;
  o.timeout_ms = AGENT_INIT_TIMEOUT_MS;
  o.header = header;
  rc = fr_kube_request_opts(a->client, "POST", path, "application/json", text, strlen(text), &o, on_init, ic,
                            out);
  free(text);
  if (rc != 0)
    free(ic);
  return rc;
}

/* ---- raw calls (seam; being implemented) ---- */

int fr_adapter_agent_call(struct fr_adapter *a, const char *pod, const struct fr_agent_call_opts *o,
                          struct fr_agent_call **out) {
  (void)a; (void)pod; (void)o; (void)out;
  return -ENOTSUP;
}
int fr_agent_call_write(struct fr_agent_call *c, const void *data, size_t len) {
  (void)c; (void)data; (void)len;
  return -EPIPE;
}
size_t fr_agent_call_pending(const struct fr_agent_call *c) {
  (void)c;
  return 0;
}
int fr_agent_call_end(struct fr_agent_call *c) {
  (void)c;
  return -EPIPE;
}
void fr_agent_call_resume(struct fr_agent_call *c) {
  (void)c;
}
void fr_agent_call_cancel(struct fr_agent_call *c) {
  (void)c;
}
int fr_adapter_pod_has_agent(struct fr_adapter *a, const struct fr_pod *pod) {
  return agent_port_of(a, pod) != 0;
}
int fr_adapter_agent_token(struct fr_adapter *a, const char *pod, char out[65]) {
  return agent_token(a, pod, 0, out);
}
int fr_adapter_agent_token_ok(struct fr_adapter *a, const char *pod, const char *token) {
  (void)a; (void)pod; (void)token;
  return 0;
}
int fr_agent_header(const char *headers, const char *name, char *out, size_t cap) {
  (void)headers; (void)name; (void)out; (void)cap;
  return -ENOENT;
}
