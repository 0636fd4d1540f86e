/* workspace.c - the sandboxes' own PersistentVolumeClaims: the claim a
 * create with option "workspace" makes, its volume in the pod, pause and
 * resume, the listing of paused sandboxes from the claim cache, and the
 * sweep of claims nothing holds any more (fr/adapter.h tells the labels).
 *
 * The claim is the only record of a paused sandbox. Everything a resume
 * needs but a secret's value is on it (annotation fedrouter.io/
 * sandbox-spec); the secrets' names are, and their values are read again
 * from the tenant's Secret by the router that resumes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapter_internal.h"
#include "fr/log.h"
#include "fr/quantity.h"
#include "fr/util.h"
#include "podopts.h"
#include "upstream.h"

#define WS_SUFFIX "-ws"
#define WS_VOLUME "fr-workspace"
/* A claim whose sandbox pod is not in the cache is left this long (a
 * create between its claim and its pod, a watch that lags) before the
 * sweep deletes it. */
#define ORPHAN_GRACE_S 120

int workspace_claim_name(const char *pod, char *out, size_t cap) {
  int n = snprintf(out, cap, "%s" WS_SUFFIX, pod);

  return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

static const char *meta_str(json_t *obj, const char *map, const char *key) {
  return json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), map), key));
}

static int64_t time_of(const char *s) {
  int64_t t;

  return s != NULL && fr_time_parse_rfc3339(s, &t) == 0 ? t : -1;
}

void fr_workspace_clear(struct fr_workspace *w) {
  if (w == NULL)
    return;
  json_decref(w->spec);
  memset(w, 0, sizeof(*w));
}

/* Fills <w> from claim <c> of the cache; -ENOENT when it is not a
 * workspace claim. */
static int fill(json_t *c, struct fr_workspace *w) {
  const char *pod = meta_str(c, "labels", FR_LABEL_WORKSPACE), *spec = meta_str(c, "annotations", FR_ANN_SANDBOX_SPEC);
  const char *state = meta_str(c, "labels", FR_LABEL_STATE);
  json_t *ws;

  memset(w, 0, sizeof(*w));
  if (pod == NULL || meta_str(c, "labels", FR_LABEL_TENANT) == NULL)
    return -ENOENT;
  w->claim_json = c;
  w->pod = pod;
  w->claim = json_string_value(json_object_get(json_object_get(c, "metadata"), "name"));
  w->tenant = meta_str(c, "labels", FR_LABEL_TENANT);
  w->name = meta_str(c, "labels", FR_LABEL_NAME);
  w->pool = meta_str(c, "labels", FR_LABEL_POOL);
  w->paused = state != NULL && strcmp(state, "paused") == 0;
  w->created_s = time_of(json_string_value(json_object_get(json_object_get(c, "metadata"), "creationTimestamp")));
  w->paused_s = time_of(meta_str(c, "annotations", FR_ANN_PAUSED_AT));
  w->expires_s = w->paused ? time_of(meta_str(c, "annotations", FR_ANN_EXPIRES)) : -1;
  w->storage_class = json_string_value(json_object_get(json_object_get(c, "spec"), "storageClassName"));
  w->phase = json_string_value(json_object_get(json_object_get(c, "status"), "phase"));
  w->spec = spec != NULL ? json_loads(spec, 0, NULL) : NULL;
  ws = json_object_get(json_object_get(w->spec, "options"), "workspace");
  w->path = json_string_value(json_object_get(ws, "path"));
  w->size = json_string_value(json_object_get(ws, "size"));
  if (w->size == NULL || fr_quantity_parse_value(w->size, &w->bytes) != 0)
    w->bytes = 0;
  return 0;
}

/* The cached workspace claim of <pod>: "<pod>-ws" (a cold create's), or
 * "<pod>-fr-workspace" (a pool pod's, once adopted), or NULL. */
static json_t *claim_of(struct fr_adapter *a, const char *pod) {
  char name[160];
  json_t *c;

  if (workspace_claim_name(pod, name, sizeof(name)) == 0 && (c = fr_informer_get(a->inf[INF_PVCS], a->ns, name)) != NULL)
    return c;
  snprintf(name, sizeof(name), "%s" WORKSPACE_POOL_SUFFIX, pod);
  c = fr_informer_get(a->inf[INF_PVCS], a->ns, name);
  return c != NULL && meta_str(c, "labels", FR_LABEL_WORKSPACE) != NULL ? c : NULL;
}

int fr_adapter_workspace(struct fr_adapter *a, const char *pod, struct fr_workspace *out) {
  json_t *c;

  memset(out, 0, sizeof(*out));
  if ((c = claim_of(a, pod)) == NULL)
    return -ENOENT;
  if (fill(c, out) != 0 || strcmp(out->pod, pod) != 0) {
    fr_workspace_clear(out);
    return -ENOENT;
  }
  return 0;
}

int fr_adapter_workspace_next(struct fr_adapter *a, void **cursor, struct fr_workspace *out) {
  json_t *items = fr_informer_items(a->inf[INF_PVCS]);
  void *it = *cursor == NULL ? json_object_iter(items) : json_object_iter_next(items, *cursor);

  memset(out, 0, sizeof(*out));
  for (; it != NULL; it = json_object_iter_next(items, it)) {
    if (fill(json_object_iter_value(it), out) == 0) {
      *cursor = it;
      return 0;
    }
  }
  *cursor = NULL;
  return -ENOENT;
}

int fr_adapter_workspaces_synced(const struct fr_adapter *a) {
  return fr_informer_synced(a->inf[INF_PVCS]);
}

int workspace_claim_known(struct fr_adapter *a, const char *pod) {
  struct fr_workspace w;
  int rc = fr_adapter_workspace(a, pod, &w);

  fr_workspace_clear(&w);
  return rc == 0;
}

int workspace_claim_request(struct fr_adapter *a, const char *pod, const struct fr_podopts *opts, const char *tenant,
                            const char *name, const char *pool, const char *batch, json_t *spec, char **body,
                            char *path, size_t cap) {
  json_t *ws = podopts_field(opts, "workspace"), *claim, *labels;
  const char *sc = json_string_value(json_object_get(ws, "storage_class"));
  char cname[128], *text;

  *body = NULL;
  if (ws == NULL)
    return -EINVAL;
  if (workspace_claim_name(pod, cname, sizeof(cname)) != 0 ||
      upstream_object_path(path, cap, "/api/v1", a->ns, "persistentvolumeclaims", NULL, NULL) != 0)
    return -EINVAL;
  text = json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS);
  labels = json_pack("{s:s,s:s,s:s,s:s}", FR_LABEL_WORKSPACE, pod, FR_LABEL_TENANT, tenant, FR_LABEL_NAME, name,
                     FR_LABEL_STATE, "running");
  if (labels != NULL && pool != NULL)
    json_object_set_new(labels, FR_LABEL_POOL, json_string(pool));
  if (labels != NULL && batch != NULL)
    json_object_set_new(labels, FR_LABEL_BATCH, json_string(batch));
  /* ReadWriteOnce: one node at a time, what every cloud disk offers. */
  claim = text == NULL || labels == NULL
              ? NULL
              : json_pack("{s:s,s:s,s:{s:s,s:o,s:{s:s}},s:{s:[s],s:{s:{s:O}}}}", "apiVersion", "v1", "kind",
                          "PersistentVolumeClaim", "metadata", "name", cname, "labels", labels, "annotations",
                          FR_ANN_SANDBOX_SPEC, text, "spec", "accessModes", "ReadWriteOnce", "resources",
                          "requests", "storage", json_object_get(ws, "size"));
  if (claim == NULL)
    json_decref(labels);
  if (claim != NULL && sc != NULL)
    json_object_set_new(json_object_get(claim, "spec"), "storageClassName", json_string(sc));
  free(text);
  *body = claim ? json_dumps(claim, JSON_COMPACT) : NULL;
  json_decref(claim);
  return *body ? 0 : -ENOMEM;
}

int workspace_claim_delete(struct fr_adapter *a, const char *pod, const char *request_id,
                           void (*cb)(int status, const char *message, void *arg), void *arg) {
  char name[160], path[300];
  json_t *c = claim_of(a, pod);
  const char *have = c != NULL ? json_string_value(json_object_get(json_object_get(c, "metadata"), "name")) : NULL;
  int rc;

  if (have != NULL)
    snprintf(name, sizeof(name), "%s", have);
  else if (workspace_claim_name(pod, name, sizeof(name)) != 0)
    return -EINVAL;
  rc = upstream_object_path(path, sizeof(path), "/api/v1", a->ns, "persistentvolumeclaims", NULL, name);
  if (rc == 0)
    rc = adapter_simple_request(a, "DELETE", path, NULL, NULL, 1, NULL, request_id, cb, arg);
  return rc;
}

int workspace_pool_apply(const struct fr_podopts *opts, json_t *spec) {
  json_t *ws = podopts_field(opts, "workspace"), *c, *vols, *mounts, *cspec;
  const char *sc = json_string_value(json_object_get(ws, "storage_class"));
  int rc = 0;

  if (ws == NULL)
    return 0;
  if ((c = json_array_get(json_object_get(spec, "containers"), 0)) == NULL)
    return -EINVAL;
  if ((vols = json_object_get(spec, "volumes")) == NULL)
    json_object_set_new(spec, "volumes", vols = json_array());
  if ((mounts = json_object_get(c, "volumeMounts")) == NULL)
    json_object_set_new(c, "volumeMounts", mounts = json_array());
  cspec = json_pack("{s:[s],s:{s:{s:O}}}", "accessModes", "ReadWriteOnce", "resources", "requests", "storage",
                    json_object_get(ws, "size"));
  if (cspec != NULL && sc != NULL)
    json_object_set_new(cspec, "storageClassName", json_string(sc));
  /* The volume's name makes the claim's: "<pod>-fr-workspace". */
  rc |= json_array_append_new(vols, json_pack("{s:s,s:{s:{s:o}}}", "name", &WORKSPACE_POOL_SUFFIX[1], "ephemeral",
                                              "volumeClaimTemplate", "spec", cspec));
  rc |= json_array_append_new(mounts, json_pack("{s:s,s:O}", "name", &WORKSPACE_POOL_SUFFIX[1], "mountPath",
                                                json_object_get(ws, "path")));
  return rc != 0 ? -ENOMEM : 0;
}

int workspace_pod_apply(const struct fr_podopts *opts, const char *claim, const char *pod, json_t *spec) {
  json_t *ws = podopts_field(opts, "workspace"), *c, *vols, *mounts;
  char name[160];
  int rc = 0;

  if (ws == NULL)
    return 0;
  if (claim != NULL)
    snprintf(name, sizeof(name), "%s", claim);
  else if (workspace_claim_name(pod, name, sizeof(name)) != 0)
    return -EINVAL;
  if ((c = json_array_get(json_object_get(spec, "containers"), 0)) == NULL)
    return -EINVAL;
  if ((vols = json_object_get(spec, "volumes")) == NULL)
    json_object_set_new(spec, "volumes", vols = json_array());
  if ((mounts = json_object_get(c, "volumeMounts")) == NULL)
    json_object_set_new(c, "volumeMounts", mounts = json_array());
  rc |= json_array_append_new(vols, json_pack("{s:s,s:{s:s}}", "name", WS_VOLUME, "persistentVolumeClaim",
                                              "claimName", name));
  rc |= json_array_append_new(mounts, json_pack("{s:s,s:O}", "name", WS_VOLUME, "mountPath",
                                                json_object_get(ws, "path")));
  return rc != 0 ? -ENOMEM : 0;
}

/* ---- pause ---- */

struct pause_op {
  struct fr_adapter *a;
  char pod[64];
  char *request_id;
  void (*cb)(int status, const char *message, void *arg);
  void *arg;
};

static void pause_done(int status, const char *message, void *arg) {
  struct pause_op *p = arg;

  if (p->cb != NULL)
    p->cb(status == 404 ? 200 : status, message, p->arg); /* the pod already gone: paused all the same */
  free(p->request_id);
  free(p);
}

static void on_marked(int status, const char *message, void *arg) {
  struct pause_op *p = arg;

  if (!(status >= 200 && status < 300) || fr_adapter_pod(p->a, p->pod) == NULL) {
    if (p->cb != NULL)
      p->cb(status >= 200 && status < 300 ? 200 : status, message, p->arg);
    free(p->request_id);
    free(p);
    return;
  }
  /* Marked paused first: a router that dies now leaves a paused sandbox
   * whose pod still runs until the next pause or its expiry, never a
   * claim the sweep would take for an orphan. */
  if (adapter_delete_pod(p->a, p->pod, p->request_id, pause_done, p) != 0)
    pause_done(503, "cannot send the pod's delete", p);
}

int fr_adapter_sandbox_pause(struct fr_adapter *a, const char *pod, int64_t expires_s, const char *request_id,
                             void (*cb)(int status, const char *message, void *arg), void *arg) {
  struct fr_workspace w;
  struct pause_op *p;
  char now[21], until[21], path[300];
  json_t *patch;
  int rc;

  if (fr_adapter_workspace(a, pod, &w) != 0)
    return -ENOENT;
  rc = upstream_object_path(path, sizeof(path), "/api/v1", a->ns, "persistentvolumeclaims", NULL, w.claim);
  fr_workspace_clear(&w);
  if (rc != 0 || strlen(pod) >= sizeof(p->pod))
    return -EINVAL;
  p = calloc(1, sizeof(*p));
  if (p == NULL)
    return -ENOMEM;
  p->a = a;
  snprintf(p->pod, sizeof(p->pod), "%s", pod);
  p->request_id = request_id ? strdup(request_id) : NULL;
  p->cb = cb;
  p->arg = arg;
  fr_time_rfc3339(fr_wall_ms() / 1000, now);
  fr_time_rfc3339(expires_s, until);
  patch = json_pack("{s:{s:{s:s},s:{s:s,s:s}}}", "metadata", "labels", FR_LABEL_STATE, "paused", "annotations",
                    FR_ANN_PAUSED_AT, now, FR_ANN_EXPIRES, until);
  rc = patch ? adapter_simple_request(a, "PATCH", path, "application/merge-patch+json", patch, 1, a->inf[INF_PVCS],
                                      request_id, on_marked, p)
             : -ENOMEM;
  json_decref(patch);
  if (rc != 0) {
    free(p->request_id);
    free(p);
  }
  return rc;
}

/* ---- resume ---- */

struct resume_op {
  struct fr_adapter *a;
  fr_sandbox_cb cb;
  void *arg;
  struct fr_podopts *opts;
};

static void on_resumed(const struct fr_sandbox_result *res, void *arg) {
  struct resume_op *r = arg;

  if (res->err == FR_SB_OK && res->pod != NULL) {
    /* Running again: the claim says so (the sweep, lists and the next
     * pause read it). A failure here leaves it marked paused while its pod
     * runs, which lists show as running (the pod wins). */
    char name[160], path[300];
    json_t *patch = json_pack("{s:{s:{s:s},s:{s:n,s:n}}}", "metadata", "labels", FR_LABEL_STATE, "running",
                              "annotations", FR_ANN_PAUSED_AT, FR_ANN_EXPIRES);
    json_t *c = claim_of(r->a, res->pod->name);
    const char *cn = c != NULL ? json_string_value(json_object_get(json_object_get(c, "metadata"), "name")) : NULL;
    if (cn != NULL)
      snprintf(name, sizeof(name), "%s", cn);
    else
      workspace_claim_name(res->pod->name, name, sizeof(name));
    if (patch != NULL &&
        upstream_object_path(path, sizeof(path), "/api/v1", r->a->ns, "persistentvolumeclaims", NULL, name) == 0)
      adapter_simple_request(r->a, "PATCH", path, "application/merge-patch+json", patch, 1, r->a->inf[INF_PVCS],
                             NULL, NULL, NULL);
    json_decref(patch);
  }
  r->cb(res, r->arg);
  fr_podopts_unref(r->opts);
  free(r);
}

int fr_adapter_sandbox_resume(struct fr_adapter *a, const char *pod, json_t *secrets, int64_t lifetime_s,
                              const char *request_id, fr_sandbox_cb cb, void *arg) {
  struct fr_workspace w;
  struct fr_sandbox_spec spec;
  struct resume_op *r;
  const char *field;
  char msg[200];
  json_t *s;
  int rc;

  if (fr_adapter_workspace(a, pod, &w) != 0)
    return -ENOENT;
  if (fr_adapter_pod(a, pod) != NULL) {
    fr_workspace_clear(&w);
    return -EBUSY;
  }
  s = w.spec;
  r = calloc(1, sizeof(*r));
  if (r == NULL) {
    fr_workspace_clear(&w);
    return -ENOMEM;
  }
  r->a = a;
  r->cb = cb;
  r->arg = arg;
  if (s == NULL || json_string_value(json_object_get(s, "image")) == NULL ||
      !json_is_object(json_object_get(s, "options")) ||
      fr_podopts_parse(json_object_get(s, "options"), &r->opts, &field, msg, sizeof(msg)) != 0 ||
      podopts_field(r->opts, "workspace") == NULL) {
    fr_podopts_unref(r->opts);
    free(r);
    fr_workspace_clear(&w);
    return -EINVAL;
  }
  memset(&spec, 0, sizeof(spec));
  spec.tenant = w.tenant;
  spec.name = w.name ? w.name : "sandbox";
  spec.pool = json_string_value(json_object_get(s, "pool"));
  spec.image = json_string_value(json_object_get(s, "image"));
  spec.cpu_m = json_integer_value(json_object_get(s, "cpu_m"));
  spec.mem_b = json_integer_value(json_object_get(s, "mem_b"));
  spec.opts = r->opts;
  spec.env = json_object_get(s, "env");
  spec.labels = json_object_get(s, "labels");
  spec.secrets = secrets;
  spec.lifetime_s = lifetime_s > 0 ? lifetime_s : json_integer_value(json_object_get(s, "lifetime_s"));
  spec.deadline_s = json_integer_value(json_object_get(s, "deadline_s"));
  if (spec.deadline_s < spec.lifetime_s)
    spec.deadline_s = spec.lifetime_s;
  spec.request_id = request_id;
  spec.resume_pod = pod;
  spec.resume_claim = w.claim;
  rc = spec.cpu_m > 0 && spec.mem_b > 0 && spec.lifetime_s > 0 ? fr_adapter_sandbox_create(a, &spec, on_resumed, r)
                                                               : -EINVAL;
  fr_workspace_clear(&w);
  if (rc != 0) {
    fr_podopts_unref(r->opts);
    free(r);
  }
  return rc;
}

/* ---- the sweep ---- */

static void on_swept(int status, const char *message, void *arg) {
  (void)status;
  (void)message;
  (void)arg;
}

/* A mark goes once its claim has left the cache. */
static int claim_gone(struct strmap_entry *e, void *arg) {
  struct fr_adapter *a = arg;

  return fr_informer_get(a->inf[INF_PVCS], a->ns, e->key) == NULL;
}

void workspace_sweep(struct fr_adapter *a) {
  int64_t now = fr_wall_ms() / 1000;
  void *cur = NULL;
  struct fr_workspace w;

  /* Only a complete, current view of both caches may call a claim an
   * orphan: a fresh replica must not delete what it has not listed. */
  if (!fr_informer_synced(a->inf[INF_PVCS]) || !fr_informer_healthy(a->inf[INF_PVCS]) ||
      !fr_informer_synced(a->inf[INF_PODS]) || !fr_informer_healthy(a->inf[INF_PODS]) || a->breaker != BR_CLOSED)
    return;
  strmap_sweep(&a->ws_reaping, claim_gone, a);
  while (fr_adapter_workspace_next(a, &cur, &w) == 0) {
    const char *why = NULL;
    const struct fr_pod *p = fr_adapter_pod(a, w.pod);
    if (json_object_get(json_object_get(w.claim_json, "metadata"), "deletionTimestamp") != NULL) {
      /* already going */
    } else if (w.paused && w.expires_s >= 0 && w.expires_s <= now && p == NULL) {
      why = "a paused sandbox past its expiry";
    } else if (!w.paused && p == NULL && w.created_s >= 0 && now - w.created_s > ORPHAN_GRACE_S) {
      why = "its sandbox is gone";
    }
    if (why != NULL && strmap_get(&a->ws_reaping, w.claim) == NULL) {
      FR_INFO("reaper", "%s: deleting workspace %s (%s)", a->cc.name, w.claim, why);
      if (workspace_claim_delete(a, w.pod, NULL, on_swept, NULL) == 0)
        strmap_put(&a->ws_reaping, w.claim, NULL);
    }
    fr_workspace_clear(&w);
  }
}
