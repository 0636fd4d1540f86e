/* workspaces.c - sandboxes with a workspace: pause, resume, and paused
 * sandboxes in lists and lookups. A paused sandbox is only its workspace
 * claim in its cluster (fr/adapter.h, workspace.c), so every replica sees
 * the same ones and a restart loses none; nothing is kept here.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/config.h"
#include "fr/http.h"
#include "fr/util.h"
#include "api.h"
#include "router.h"
#include "route_types.h"
#include "secrets.h"
#include "tenants.h"
#include "workspaces.h"

json_t *workspace_user_labels(const struct fr_workspace *w) {
  json_t *out = json_object(), *v;
  const char *k;

  json_object_foreach(json_object_get(w->spec, "labels"), k, v) {
    if (strncmp(k, FR_LABEL_PREFIX, strlen(FR_LABEL_PREFIX)) != 0)
      json_object_set(out, k, v);
  }
  return out;
}

const char *workspace_spec_label(const struct fr_workspace *w, const char *key) {
  return json_string_value(json_object_get(json_object_get(w->spec, "labels"), key));
}

json_t *workspace_paused_json(struct fr_adapter *a, const struct fr_workspace *w) {
  char id[256];
  json_t *labels = workspace_user_labels(w);
  json_t *j;

  snprintf(id, sizeof(id), "%s.%s", fr_adapter_name(a), w->pod);
  j = json_pack("{s:s,s:s,s:s,s:s,s:o,s:b,s:s,s:o,s:o,s:o,s:o,s:o}", "id", id, "name", w->name ? w->name : "",
                "cluster", fr_adapter_name(a), "region", fr_adapter_region(a), "pool",
                w->pool ? json_string(w->pool) : json_null(), "warm", 0, "state", "paused", "labels", labels,
                "created_at", api_time_json(w->created_s), "paused_at", api_time_json(w->paused_s), "expires_at",
                api_time_json(w->expires_s), "workspace", workspace_json(w));
  return j;
}

int workspace_live_pod(struct fr_adapter *a, const char *pod) {
  const struct fr_pod *p = fr_adapter_pod(a, pod);

  return p != NULL && api_sandbox_visible(a, p);
}

/* "<cluster>.<pod>" (or its short form) into the adapter and pod name,
 * without answering: 0, or -1. */
static int parse_id(struct api_req *q, const char *given, struct fr_adapter **a, char *pod, size_t cap) {
  char canon[320];
  const char *id = strchr(given, '.') == NULL && api_canonical_id(q->r, given, canon, sizeof(canon)) == 0 ? canon
                                                                                                        : given;
  const char *dot = strchr(id, '.');
  char cluster[64];

  if (dot == NULL || dot == id || (size_t)(dot - id) >= sizeof(cluster) || strlen(dot + 1) >= cap ||
      strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789-.") != strlen(id))
    return -1;
  memcpy(cluster, id, (size_t)(dot - id));
  cluster[dot - id] = '\0';
  snprintf(pod, cap, "%s", dot + 1);
  *a = api_adapter(q->r, cluster);
  return *a != NULL ? 0 : -1;
}

int workspace_find_paused(struct api_req *q, const char *id, struct fr_adapter **a, struct fr_workspace *w) {
  char pod[200];

  memset(w, 0, sizeof(*w));
  if (parse_id(q, id, a, pod, sizeof(pod)) != 0 || workspace_live_pod(*a, pod) ||
      fr_adapter_workspace(*a, pod, w) != 0)
    return 0;
  if (!w->paused || w->tenant == NULL || strcmp(w->tenant, q->tenant) != 0 ||
      json_object_get(json_object_get(w->claim_json, "metadata"), "deletionTimestamp") != NULL) {
    fr_workspace_clear(w);
    return 0;
  }
  return 1;
}

void workspace_tenant_usage(struct router *r, const char *tenant, int64_t *paused, int64_t *bytes) {
  size_t i;

  *paused = *bytes = 0;
  for (i = 0; i < r->nadapters; i++) {
    struct fr_workspace w;
    void *cur = NULL;
    while (fr_adapter_workspace_next(r->adapters[i], &cur, &w) == 0) {
      if (w.tenant != NULL && strcmp(w.tenant, tenant) == 0 &&
          json_object_get(json_object_get(w.claim_json, "metadata"), "deletionTimestamp") == NULL) {
        *bytes += w.bytes;
        *paused += w.paused && !workspace_live_pod(r->adapters[i], w.pod);
      }
      fr_workspace_clear(&w);
    }
  }
}

/* ---- pause ---- */

struct pause_req {
  struct api_req *q;
  struct fr_adapter *a;
  char pod[200];
  int64_t expires_s;
};

static void on_paused(int status, const char *message, void *arg) {
  struct pause_req *p = arg;
  struct api_req *q = p->q;
  char id[256];

  snprintf(id, sizeof(id), "%s.%s", fr_adapter_name(p->a), p->pod);
  if (status >= 200 && status < 300) {
    api_reply(q, 200, json_pack("{s:s,s:s,s:o,s:o}", "id", id, "state", "paused", "paused_at",
                                api_time_json(fr_wall_ms() / 1000), "expires_at", api_time_json(p->expires_s)),
              NULL);
  } else {
    char msg[600];
    snprintf(msg, sizeof(msg), "the cluster did not take the pause (HTTP %d): %.400s", status,
             message ? message : "");
    api_fail(q, status == 0 || status >= 500 || status == 429 ? 503 : 502, "cluster_unavailable", msg,
             "Retry-After: 2\r\n");
  }
  free(p);
}

void sandboxes_pause(struct api_req *q, const struct route_params *rp) {
  struct fr_adapter *a;
  struct fr_workspace w;
  const struct fr_pod *pod;
  struct pause_req *p;
  int64_t paused, bytes, max_paused = q->ts ? q->ts->max_paused : FR_DEFAULT_TENANT_PAUSED;
  int64_t ttl = q->ts ? q->ts->max_paused_s : FR_DEFAULT_TENANT_PAUSED_S;
  char msg[300];
  int rc;

  if (workspace_find_paused(q, rp->id, &a, &w)) {
    /* Already paused: nothing to do. */
    api_reply(q, 200, workspace_paused_json(a, &w), NULL);
    fr_workspace_clear(&w);
    return;
  }
  if ((pod = api_find_sandbox(q, rp->id, &a)) == NULL)
    return;
  if (fr_pod_label(pod, FR_LABEL_WORKSPACE) == NULL) {
    api_fail(q, 409, "no_workspace",
             "only a sandbox created with a workspace can be paused (its memory and processes are not kept: "
             "the workspace is)", NULL);
    return;
  }
  workspace_tenant_usage(q->r, q->tenant, &paused, &bytes);
  if (paused + 1 > max_paused) {
    snprintf(msg, sizeof(msg), "tenant %s may keep %" PRId64 " paused sandboxes", q->tenant, max_paused);
    api_reply(q, 429, api_limit_body(msg, "max_paused"), "Retry-After: 60\r\n");
    return;
  }
  p = calloc(1, sizeof(*p));
  if (p == NULL) {
    api_oom(q);
    return;
  }
  p->q = q;
  p->a = a;
  snprintf(p->pod, sizeof(p->pod), "%s", pod->name);
  p->expires_s = fr_wall_ms() / 1000 + ttl;
  rc = fr_adapter_sandbox_pause(a, pod->name, p->expires_s, q->rid, on_paused, p);
  if (rc == -ENOENT) {
    free(p);
    api_fail(q, 503, "not_synced", "the sandbox's workspace claim is not in this router's cache yet; retry",
             "Retry-After: 1\r\n");
    return;
  }
  if (rc != 0) {
    free(p);
    api_oom(q);
    return;
  }
  api_defer(q);
}

/* ---- resume ----
 *
 * One resume per paused sandbox at a time in this router: calls that come
 * while it runs wait for it (a second pod of the same name cannot be
 * made). An explicit resume answers with the sandbox; a call into a paused
 * sandbox created with auto_resume waits, then runs as if it had just come
 * (its rerun). A client that goes away does not stop a resume: the sandbox
 * runs again and that client's answer goes nowhere. */

struct resume_waiter {
  struct api_req *q;
  void (*rerun)(struct api_req *q); /* NULL: answer 200 with the sandbox */
};

struct resume_req {
  struct resume_req *next;          /* in router.resuming */
  struct router *r;
  struct fr_adapter *a;
  char pod[200];
  struct fr_secret_call *call;
  const char **keys;
  size_t nkeys;
  char *names;
  struct resume_waiter *waiters;
  size_t nwaiters, cap;
};

static void resume_free(struct resume_req *r) {
  free(r->waiters);
  free(r->keys);
  free(r->names);
  free(r);
}

/* Takes <q> (deferred) as a waiter of <r>; -ENOMEM when it cannot. */
static int resume_add(struct resume_req *r, struct api_req *q, void (*rerun)(struct api_req *q)) {
  if (r->nwaiters == r->cap) {
    size_t cap = r->cap ? 2 * r->cap : 2;
    struct resume_waiter *w = realloc(r->waiters, cap * sizeof(*w));
    if (w == NULL)
      return -ENOMEM;
    r->waiters = w;
    r->cap = cap;
  }
  r->waiters[r->nwaiters].q = q;
  r->waiters[r->nwaiters].rerun = rerun;
  r->nwaiters++;
  api_defer(q);
  return 0;
}

/* The resume is over: <pod> up (NULL: failed with <status>, <code>,
 * <msg>); every waiter is answered or runs again. */
static void resume_end(struct resume_req *r, const struct fr_pod *pod, int status, const char *code,
                       const char *msg, const char *extra) {
  struct resume_req **pp;
  size_t i;

  for (pp = &r->r->resuming; *pp != NULL; pp = &(*pp)->next)
    if (*pp == r) {
      *pp = r->next;
      break;
    }
  for (i = 0; i < r->nwaiters; i++) {
    struct api_req *q = r->waiters[i].q;
    if (pod == NULL) {
      api_fail(q, status, code, msg, extra);
    } else if (r->waiters[i].rerun == NULL) {
      api_reply(q, 200, api_sandbox_json(q->r, r->a, pod, 1), NULL);
    } else {
      /* The deferral's reference is ours until the call has run. */
      api_undefer(q);
      q->resumed = 1;
      if (q->req != NULL && q->req->body_streaming)
        fr_http_body_pause(q->req, 0); /* the handler takes the body from the next turn */
      if (q->req != NULL)
        r->waiters[i].rerun(q);
      api_req_unref(q);
    }
  }
  resume_free(r);
}

static void on_resumed(const struct fr_sandbox_result *res, void *arg) {
  struct resume_req *r = arg;
  char msg[600];

  if (res->err == FR_SB_OK && res->pod != NULL) {
    resume_end(r, res->pod, 0, NULL, NULL, NULL);
    return;
  }
  snprintf(msg, sizeof(msg), "the sandbox could not be resumed in cluster %s: %.400s", fr_adapter_name(r->a),
           res->message ? res->message : "unknown");
  resume_end(r, NULL, res->err == FR_SB_NO_ROOM || res->err == FR_SB_UNAVAILABLE ? 503 : 502,
             res->err == FR_SB_NO_ROOM ? "no_capacity" : "resume_failed", msg, "Retry-After: 5\r\n");
}

static void start_resume(struct resume_req *r, json_t *secrets) {
  int rc = fr_adapter_sandbox_resume(r->a, r->pod, secrets, 0, r->waiters[0].q->rid, on_resumed, r);

  if (rc == 0)
    return;
  if (rc == -EBUSY)
    resume_end(r, NULL, 409, "sandbox_busy", "the sandbox's previous pod is still stopping; retry shortly",
               "Retry-After: 1\r\n");
  else if (rc == -ENOENT)
    resume_end(r, NULL, 404, "sandbox_not_found", "the paused sandbox is gone", NULL);
  else
    resume_end(r, NULL, 500, "resume_failed", "the paused sandbox's record cannot be read", NULL);
}

static void on_secrets(const struct fr_secret_result *res, void *arg) {
  struct resume_req *r = arg;
  char msg[400];

  r->call = NULL;
  if (res->err != FR_SECRET_OK) {
    snprintf(msg, sizeof(msg), "the sandbox's secrets cannot be read again: %.300s",
             res->message ? res->message : "unknown");
    resume_end(r, NULL, res->err == FR_SECRET_UNAVAILABLE ? 503 : 400,
               res->err == FR_SECRET_UNAVAILABLE ? "cluster_unavailable" : "secret_not_found", msg, NULL);
    return;
  }
  start_resume(r, res->values);
}

/* The resume of <pod> of <a> running in this router, or NULL. */
static struct resume_req *resume_running(struct router *rt, struct fr_adapter *a, const char *pod) {
  struct resume_req *r;

  for (r = rt->resuming; r != NULL; r = r->next)
    if (r->a == a && strcmp(r->pod, pod) == 0)
      return r;
  return NULL;
}

/* Resumes paused sandbox <w> of cluster <a> for <q> (the tenant's), or
 * joins the resume already running: <q> is answered, now or later. */
static void resume_join(struct api_req *q, struct fr_adapter *a, const struct fr_workspace *w,
                        void (*rerun)(struct api_req *q)) {
  struct resume_req *r;
  const char *names;
  char msg[300];
  size_t i;

  if ((r = resume_running(q->r, a, w->pod)) != NULL) {
    if (resume_add(r, q, rerun) != 0)
      api_oom(q);
    return;
  }
  /* A resumed sandbox counts toward max_sandboxes again. */
  if (q->ts != NULL && q->ts->max_sandboxes > 0) {
    int64_t n = q->ts->creating;
    for (i = 0; i < q->r->nadapters; i++)
      n += fr_adapter_tenant_sandboxes(q->r->adapters[i], q->tenant);
    if (n + 1 > q->ts->max_sandboxes) {
      snprintf(msg, sizeof(msg), "tenant %s may hold %" PRId64 " sandboxes; resuming would exceed that", q->tenant,
               q->ts->max_sandboxes);
      api_reply(q, 429, api_limit_body(msg, "max_sandboxes"), "Retry-After: 10\r\n");
      return;
    }
  }
  r = calloc(1, sizeof(*r));
  if (r == NULL || resume_add(r, q, rerun) != 0) {
    free(r);
    api_oom(q);
    return;
  }
  r->r = q->r;
  r->a = a;
  snprintf(r->pod, sizeof(r->pod), "%s", w->pod);
  r->next = q->r->resuming;
  q->r->resuming = r;
  names = json_string_value(json_object_get(w->spec, "secrets"));
  if (names != NULL && *names != '\0') {
    const char *secret = q->ts != NULL && q->ts->secret != NULL ? q->ts->secret : FR_LOCAL_SECRET;
    char *save = NULL, *k;
    r->names = strdup(names);
    r->keys = calloc(SECRETS_MAX, sizeof(*r->keys));
    if (r->names == NULL || r->keys == NULL) {
      resume_end(r, NULL, 500, "out_of_memory", "the router is out of memory", NULL);
      return;
    }
    for (k = strtok_r(r->names, ",", &save); k != NULL && r->nkeys < SECRETS_MAX; k = strtok_r(NULL, ",", &save))
      r->keys[r->nkeys++] = k;
    if (fr_adapter_secret_get(a, secret, r->keys, r->nkeys, q->rid, on_secrets, r, &r->call) != 0)
      resume_end(r, NULL, 503, "cluster_unavailable", "cannot read the sandbox's secrets again",
                 "Retry-After: 2\r\n");
    return;
  }
  start_resume(r, NULL);
}

void sandboxes_resume(struct api_req *q, const struct route_params *rp) {
  struct fr_adapter *a;
  struct fr_workspace w;
  char pod[200], msg[300];

  if (parse_id(q, rp->id, &a, pod, sizeof(pod)) == 0 && workspace_live_pod(a, pod)) {
    /* Running: nothing to do (api_find_sandbox answers for the tenant). */
    const struct fr_pod *p = api_find_sandbox(q, rp->id, &a);
    if (p != NULL)
      api_reply(q, 200, api_sandbox_json(q->r, a, p, 1), NULL);
    return;
  }
  if (!workspace_find_paused(q, rp->id, &a, &w)) {
    if (a != NULL && (!fr_adapter_workspaces_synced(a) || !fr_adapter_pods_synced(a))) {
      api_fail(q, 503, "not_synced", "this router has not listed that cluster yet; retry shortly",
               "Retry-After: 1\r\n");
      return;
    }
    snprintf(msg, sizeof(msg), "no sandbox %.200s for this tenant", rp->id);
    api_fail(q, 404, "sandbox_not_found", msg, NULL);
    return;
  }
  resume_join(q, a, &w, NULL);
  fr_workspace_clear(&w);
}

int workspace_auto_resumable(struct router *r, struct fr_adapter *a, const char *pod, struct fr_workspace *w) {
  /* While this router resumes it, its new pod is in the cache, not ready
   * yet: calls wait for the resume too. */
  int running = resume_running(r, a, pod) != NULL;
  const char *ar;

  memset(w, 0, sizeof(*w));
  if ((!running && workspace_live_pod(a, pod)) || fr_adapter_workspace(a, pod, w) != 0)
    return 0;
  ar = workspace_spec_label(w, FR_LABEL_AUTO_RESUME);
  if ((w->paused || running) && w->tenant != NULL && ar != NULL && strcmp(ar, "true") == 0 &&
      json_object_get(json_object_get(w->claim_json, "metadata"), "deletionTimestamp") == NULL)
    return 1;
  fr_workspace_clear(w);
  return 0;
}

void workspaces_resume_then(struct api_req *q, struct fr_adapter *a, const struct fr_workspace *w,
                            void (*rerun)(struct api_req *q)) {
  /* A streamed body waits in the socket while the sandbox starts. */
  if (q->req->body_streaming)
    fr_http_body_pause(q->req, 1);
  resume_join(q, a, w, rerun);
}

int workspaces_auto_resume(struct api_req *q, const char *id, void (*rerun)(struct api_req *q)) {
  struct fr_adapter *a;
  struct fr_workspace w;
  const char *token;
  char pod[200];
  int ok;

  if (q->resumed || id == NULL || parse_id(q, id, &a, pod, sizeof(pod)) != 0 ||
      !workspace_auto_resumable(q->r, a, pod, &w))
    return 0;
  if (q->tenant[0] != '\0') {
    ok = strcmp(w.tenant, q->tenant) == 0;
  } else {
    /* An E2B call with the sandbox's access token alone: the token is
     * the sandbox's (it names the pod, not a pod's incarnation). */
    token = fr_http_req_header(q->req, "X-Access-Token");
    ok = token != NULL && fr_adapter_agent_token_ok(a, pod, token);
    if (ok)
      api_set_tenant(q, w.tenant);
  }
  if (ok)
    workspaces_resume_then(q, a, &w, rerun);
  fr_workspace_clear(&w);
  return ok;
}

/* ---- keepalive: a long-lived sandbox's expiry moved later ---- */

struct keep_req {
  struct api_req *q;
  char id[256];
  int64_t expires_s;
  int capped;
};

static void on_kept(int status, const char *message, void *arg) {
  struct keep_req *k = arg;

  if (status >= 200 && status < 300)
    api_reply(k->q, 200, json_pack("{s:s,s:o,s:b}", "id", k->id, "expires_at", api_time_json(k->expires_s), "capped",
                                   k->capped), NULL);
  else if (status == 404)
    api_fail(k->q, 404, "sandbox_not_found", "the sandbox no longer exists", NULL);
  else {
    char msg[500];
    snprintf(msg, sizeof(msg), "the cluster did not take the new expiry (HTTP %d): %.300s", status,
             message ? message : "");
    api_fail(k->q, 503, "cluster_unavailable", msg, "Retry-After: 2\r\n");
  }
  free(k);
}

void sandboxes_keepalive(struct api_req *q, const struct route_params *rp) {
  static const char *const fields[] = {"timeout_s", NULL};
  json_t *j = q->req->body_len > 0 ? api_body_object(q, fields, 0) : json_object(), *v;
  struct fr_adapter *a;
  const struct fr_pod *pod;
  struct keep_req *k;
  int64_t now = fr_wall_ms() / 1000, max = api_max_lifetime(q), t = q->r->cfg->default_lifetime_s, start, cap;
  char msg[200];

  if (j == NULL)
    return;
  v = json_object_get(j, "timeout_s");
  if (v != NULL && (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max)) {
    json_decref(j);
    snprintf(msg, sizeof(msg), "timeout_s must be an integer from 1 to %" PRId64 " (the tenant's max_lifetime_s)",
             max);
    api_field_fail(q, "timeout_s", msg);
    return;
  }
  if (v != NULL)
    t = json_integer_value(v);
  json_decref(j);
  if ((pod = api_find_sandbox(q, rp->id, &a)) == NULL)
    return;
  /* Within the tenant's max_lifetime_s from the sandbox's start: the pod's
   * deadline in the cluster, which never moves later. */
  start = pod->created_s >= 0 ? pod->created_s : pod->creation_s >= 0 ? pod->creation_s : now;
  cap = start + max;
  if ((k = calloc(1, sizeof(*k))) == NULL) {
    api_oom(q);
    return;
  }
  k->q = q;
  snprintf(k->id, sizeof(k->id), "%s.%s", fr_adapter_name(a), pod->name);
  k->expires_s = now + t;
  if (k->expires_s > cap) {
    k->expires_s = cap;
    k->capped = 1;
  }
  if (fr_adapter_sandbox_set_expiry(a, pod->name, k->expires_s, q->rid, on_kept, k) != 0) {
    free(k);
    api_fail(q, 503, "cluster_unavailable", "cannot send the new expiry to the cluster", "Retry-After: 2\r\n");
    return;
  }
  api_defer(q);
}
