/* workspace.c - the sandboxes' own PersistentVolumeClaims: the claim a
 * create with option "workspace" makes, its volume in the pod, the marks
 * pause and resume put on it (sandbox.c pauses and resumes), the listing
 * of paused sandboxes from the claim cache, and the sweep of claims
 * nothing holds any more (fr/adapter.h tells the labels).
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

#include "workspace.h"

#include "cluster.h"
#include "fr/log.h"
#include "fr/quantity.h"
#include "fr/util.h"
#include "podopts.h"
#include "strmap.h"
#include "upstream.h"

#define WS_SUFFIX "-ws"
#define WS_VOLUME "fr-workspace"
/* A claim whose sandbox pod is not in the cache is left this long (a
 * create between its claim and its pod, a watch that lags) before the
 * sweep deletes it. */
#define ORPHAN_GRACE_S 120

/* This file's state: the claims whose sweep delete was sent (a set of
 * claim names; a name goes once its claim left the cache). */
struct workspaces {
  struct cluster *cl;
  struct strmap reaping;
};

struct workspaces *workspace__new(struct cluster *cl) {
  struct workspaces *ws = calloc(1, sizeof(*ws));

  if (ws != NULL)
    ws->cl = cl;
  return ws;
}

void workspace__free(struct workspaces *ws) {
  if (ws == NULL)
    return;
  strmap_close(&ws->reaping);
  free(ws);
}

int workspace__claim_name(const char *pod, char *out, size_t cap) {
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
static json_t *claim_of(struct workspaces *ws, const char *pod) {
  struct cluster *cl = ws->cl;
  char name[160];
  json_t *c;

  if (workspace__claim_name(pod, name, sizeof(name)) == 0 &&
      (c = fr_informer_get(cl->inf[CLUSTER_INF_PVCS], cl->ns, name)) != NULL)
    return c;
  snprintf(name, sizeof(name), "%s" WORKSPACE_POOL_SUFFIX, pod);
  c = fr_informer_get(cl->inf[CLUSTER_INF_PVCS], cl->ns, name);
  return c != NULL && meta_str(c, "labels", FR_LABEL_WORKSPACE) != NULL ? c : NULL;
}

int workspace__get(struct workspaces *ws, const char *pod, struct fr_workspace *out) {
  json_t *c;

  memset(out, 0, sizeof(*out));
  if ((c = claim_of(ws, pod)) == NULL)
    return -ENOENT;
  if (fill(c, out) != 0 || strcmp(out->pod, pod) != 0) {
    fr_workspace_clear(out);
    return -ENOENT;
  }
  return 0;
}

int workspace__next(struct workspaces *ws, void **cursor, struct fr_workspace *out) {
  json_t *items = fr_informer_items(ws->cl->inf[CLUSTER_INF_PVCS]);
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

int workspace__synced(const struct workspaces *ws) {
  return fr_informer_synced(ws->cl->inf[CLUSTER_INF_PVCS]);
}

int workspace__known(struct workspaces *ws, const char *pod) {
  struct fr_workspace w;
  int rc = workspace__get(ws, pod, &w);

  fr_workspace_clear(&w);
  return rc == 0;
}

int workspace__claim_request(struct workspaces *ws, const char *pod, const struct fr_podopts *opts,
                             const char *tenant, const char *name, const char *pool, const char *batch, json_t *spec,
                             char **body, char *path, size_t cap) {
  json_t *w = podopts_field(opts, "workspace"), *claim, *labels;
  const char *sc = json_string_value(json_object_get(w, "storage_class"));
  char cname[128], *text;

  *body = NULL;
  if (w == NULL)
    return -EINVAL;
  if (workspace__claim_name(pod, cname, sizeof(cname)) != 0 ||
      upstream_object_path(path, cap, "/api/v1", ws->cl->ns, "persistentvolumeclaims", NULL, NULL) != 0)
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
                          "requests", "storage", json_object_get(w, "size"));
  if (claim == NULL)
    json_decref(labels);
  if (claim != NULL && sc != NULL)
    json_object_set_new(json_object_get(claim, "spec"), "storageClassName", json_string(sc));
  free(text);
  *body = claim ? json_dumps(claim, JSON_COMPACT) : NULL;
  json_decref(claim);
  return *body ? 0 : -ENOMEM;
}

int workspace__claim_delete(struct workspaces *ws, const char *pod, const char *request_id,
                            void (*cb)(int status, const char *message, void *arg), void *arg) {
  char name[160], path[300];
  json_t *c = claim_of(ws, pod);
  const char *have = c != NULL ? json_string_value(json_object_get(json_object_get(c, "metadata"), "name")) : NULL;
  int rc;

  if (have != NULL)
    snprintf(name, sizeof(name), "%s", have);
  else if (workspace__claim_name(pod, name, sizeof(name)) != 0)
    return -EINVAL;
  rc = upstream_object_path(path, sizeof(path), "/api/v1", ws->cl->ns, "persistentvolumeclaims", NULL, name);
  if (rc == 0)
    rc = cluster__request(ws->cl, "DELETE", path, NULL, NULL, 1, NULL, request_id, cb, arg);
  return rc;
}

int workspace__pool_apply(const struct fr_podopts *opts, json_t *spec) {
  json_t *w = podopts_field(opts, "workspace"), *c, *vols, *mounts, *cspec;
  const char *sc = json_string_value(json_object_get(w, "storage_class"));
  int rc = 0;

  if (w == NULL)
    return 0;
  if ((c = json_array_get(json_object_get(spec, "containers"), 0)) == NULL)
    return -EINVAL;
  if ((vols = json_object_get(spec, "volumes")) == NULL)
    json_object_set_new(spec, "volumes", vols = json_array());
  if ((mounts = json_object_get(c, "volumeMounts")) == NULL)
    json_object_set_new(c, "volumeMounts", mounts = json_array());
  cspec = json_pack("{s:[s],s:{s:{s:O}}}", "accessModes", "ReadWriteOnce", "resources", "requests", "storage",
                    json_object_get(w, "size"));
  if (cspec != NULL && sc != NULL)
    json_object_set_new(cspec, "storageClassName", json_string(sc));
  /* The volume's name makes the claim's: "<pod>-fr-workspace". */
  rc |= json_array_append_new(vols, json_pack("{s:s,s:{s:{s:o}}}", "name", &WORKSPACE_POOL_SUFFIX[1], "ephemeral",
                                              "volumeClaimTemplate", "spec", cspec));
  rc |= json_array_append_new(mounts, json_pack("{s:s,s:O}", "name", &WORKSPACE_POOL_SUFFIX[1], "mountPath",
                                                json_object_get(w, "path")));
  return rc != 0 ? -ENOMEM : 0;
}

int workspace__pod_apply(const struct fr_podopts *opts, const char *claim, const char *pod, json_t *spec) {
  json_t *w = podopts_field(opts, "workspace"), *c, *vols, *mounts;
  char name[160];
  int rc = 0;

  if (w == NULL)
    return 0;
  if (claim != NULL)
    snprintf(name, sizeof(name), "%s", claim);
  else if (workspace__claim_name(pod, name, sizeof(name)) != 0)
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
                                                json_object_get(w, "path")));
  return rc != 0 ? -ENOMEM : 0;
}

/* ---- the marks of pause and resume ---- */

int workspace__mark_paused(struct workspaces *ws, const char *pod, int64_t expires_s, const char *request_id,
                           void (*cb)(int status, const char *message, void *arg), void *arg) {
  struct fr_workspace w;
  char now[21], until[21], path[300];
  json_t *patch;
  int rc;

  if (workspace__get(ws, pod, &w) != 0)
    return -ENOENT;
  rc = upstream_object_path(path, sizeof(path), "/api/v1", ws->cl->ns, "persistentvolumeclaims", NULL, w.claim);
  fr_workspace_clear(&w);
  if (rc != 0)
    return -EINVAL;
  fr_time_rfc3339(fr_wall_ms() / 1000, now);
  fr_time_rfc3339(expires_s, until);
  patch = json_pack("{s:{s:{s:s},s:{s:s,s:s}}}", "metadata", "labels", FR_LABEL_STATE, "paused", "annotations",
                    FR_ANN_PAUSED_AT, now, FR_ANN_EXPIRES, until);
  rc = patch ? cluster__request(ws->cl, "PATCH", path, "application/merge-patch+json", patch, 1,
                                ws->cl->inf[CLUSTER_INF_PVCS], request_id, cb, arg)
             : -ENOMEM;
  json_decref(patch);
  return rc;
}

void workspace__mark_running(struct workspaces *ws, const char *pod) {
  char name[160], path[300];
  json_t *patch = json_pack("{s:{s:{s:s},s:{s:n,s:n}}}", "metadata", "labels", FR_LABEL_STATE, "running",
                            "annotations", FR_ANN_PAUSED_AT, FR_ANN_EXPIRES);
  json_t *c = claim_of(ws, pod);
  const char *cn = c != NULL ? json_string_value(json_object_get(json_object_get(c, "metadata"), "name")) : NULL;

  if (cn != NULL)
    snprintf(name, sizeof(name), "%s", cn);
  else if (workspace__claim_name(pod, name, sizeof(name)) != 0)
    name[0] = '\0';
  if (patch != NULL && name[0] != '\0' &&
      upstream_object_path(path, sizeof(path), "/api/v1", ws->cl->ns, "persistentvolumeclaims", NULL, name) == 0)
    cluster__request(ws->cl, "PATCH", path, "application/merge-patch+json", patch, 1, ws->cl->inf[CLUSTER_INF_PVCS],
                     NULL, NULL, NULL);
  json_decref(patch);
}

/* ---- the sweep ---- */

static void on_swept(int status, const char *message, void *arg) {
  (void)status;
  (void)message;
  (void)arg;
}

/* A mark goes once its claim has left the cache. */
static int claim_gone(struct strmap_entry *e, void *arg) {
  struct cluster *cl = arg;

  return fr_informer_get(cl->inf[CLUSTER_INF_PVCS], cl->ns, e->key) == NULL;
}

void workspace__sweep(struct workspaces *ws) {
  struct cluster *cl = ws->cl;
  int64_t now = fr_wall_ms() / 1000;
  void *cur = NULL;
  struct fr_workspace w;

  /* Only a complete, current view of both caches may call a claim an
   * orphan: a fresh replica must not delete what it has not listed. */
  if (!cluster__cache_current(cl, CLUSTER_INF_PVCS) || !cluster__cache_current(cl, CLUSTER_INF_PODS) ||
      !cluster__reachable(cl))
    return;
  strmap_sweep(&ws->reaping, claim_gone, cl);
  while (workspace__next(ws, &cur, &w) == 0) {
    const char *why = NULL;
    const struct fr_pod *p = cluster__pod(cl, w.pod);
    if (json_object_get(json_object_get(w.claim_json, "metadata"), "deletionTimestamp") != NULL) {
      /* already going */
    } else if (w.paused && w.expires_s >= 0 && w.expires_s <= now && p == NULL) {
      why = "a paused sandbox past its expiry";
    } else if (!w.paused && p == NULL && w.created_s >= 0 && now - w.created_s > ORPHAN_GRACE_S) {
      why = "its sandbox is gone";
    }
    if (why != NULL && strmap_get(&ws->reaping, w.claim) == NULL) {
      FR_INFO("reaper", "%s: deleting workspace %s (%s)", cl->cc.name, w.claim, why);
      if (workspace__claim_delete(ws, w.pod, NULL, on_swept, NULL) == 0)
        strmap_put(&ws->reaping, w.claim, NULL);
    }
    fr_workspace_clear(&w);
  }
}
