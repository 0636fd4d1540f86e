/* volumes.c - storage.k8s.io/v1 StorageClasses, PersistentVolumeClaims and
 * the directories behind them: kubesim's own dynamic provisioner, the
 * persistent-volume controller's binding, the pvc-protection finalizer, the
 * scheduler's and the attach/detach controller's volume checks, and the
 * bind mounts a pod's init makes (podinit.c).
 *
 * What a real cluster does, and what is modelled:
 *   - admission: a claim without storageClassName gets the default class
 *     (annotation storageclass.kubernetes.io/is-default-class "true"; the
 *     newest wins when there are several), and the finalizer
 *     kubernetes.io/pvc-protection;
 *   - provisioning: a class whose provisioner is VOLUMES_PROVISIONER gets a
 *     directory <workdir>/volumes/<ns>_<name>_<uid> (mode 0777, as
 *     local-path-provisioner makes them); the claim becomes Bound to a
 *     volume "pvc-<uid>" with status.capacity the size asked for (not
 *     enforced, as with any hostPath-backed provisioner). A class of another
 *     provisioner leaves the claim Pending (ExternalProvisioning event: no
 *     such provisioner runs here); a class that does not exist, Pending
 *     with ProvisioningFailed (the controller retries when the class
 *     appears); storageClassName "" waits for a pre-made PersistentVolume,
 *     which kubesim has none of;
 *   - volumeBindingMode WaitForFirstConsumer: the claim stays Pending until
 *     a pod that uses it is scheduled, then is provisioned with the node in
 *     volume.kubernetes.io/selected-node;
 *   - scheduling: a pod whose claim is missing, being deleted or unbound
 *     (Immediate) is Unschedulable with the scheduler's words; a
 *     ReadWriteOncePod claim used by another pod makes it Unschedulable;
 *   - attaching: a ReadWriteOnce volume is attached to one node at a time.
 *     A pod on another node than the pod already using it stays
 *     ContainerCreating with the attach/detach controller's Warning
 *     FailedAttachVolume "Multi-Attach error ..." (repeated, counted up)
 *     until the other pod ends; pods on the same node share it;
 *   - deleting: a claim a pod still uses only gets its deletionTimestamp
 *     (Terminating); it goes, with its directory, when the last such pod
 *     ends or goes.
 * Generic ephemeral volumes (spec.volumes[].ephemeral.volumeClaimTemplate)
 * get their claim "<pod>-<volume>" made with the pod and owned by it; the
 * garbage collector's part, deleting it with the pod, is done when the pod
 * goes (a claim whose owner reference was taken off stays).
 *
 * The volume is reachable from every node (a network disk in one zone;
 * local-path-provisioner would pin it to its first node). There are no
 * PersistentVolume objects.
 *
 * Paths: a mount's destination is created inside the pod's root and its
 * subPath inside the volume, one component at a time without following
 * symlinks (podinit.c), so neither a symlink in the image nor one a pod
 * wrote into the volume can point a mount elsewhere on this machine.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fr/buf.h"
#include "fr/log.h"
#include "fr/util.h"
#include "sim.h"

#define LOG_COMP "volumes"
#define DEFAULT_CLASS_ANN "storageclass.kubernetes.io/is-default-class"
#define PROTECTION_FINALIZER "kubernetes.io/pvc-protection"

static int volumes_dir(struct sim *s, char *out, size_t cap) {
  int n = snprintf(out, cap, "%s/volumes", s->opts.workdir);

  return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* The directory of claim <o>. */
static int claim_dir(struct sim *s, struct sim_obj *o, char *out, size_t cap) {
  int n = snprintf(out, cap, "%s/volumes/%s_%s_%.36s", s->opts.workdir, o->ns, o->name, o->uid);

  return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int volumes_init(struct sim *s) {
  char dir[4096];
  json_t *j;
  struct sim_err e;

  if (volumes_dir(s, dir, sizeof(dir)) != 0)
    return -ENAMETOOLONG;
  if (mkdir(dir, 0711) != 0 && errno != EEXIST)
    return -errno;
  if (s->opts.default_storage_class == NULL || *s->opts.default_storage_class == '\0')
    return 0;
  j = json_pack("{s:s,s:s,s:{s:s,s:{s:s}},s:s,s:s,s:s,s:b}", "apiVersion", "storage.k8s.io/v1", "kind",
                "StorageClass", "metadata", "name", s->opts.default_storage_class, "annotations",
                DEFAULT_CLASS_ANN, "true", "provisioner", VOLUMES_PROVISIONER, "reclaimPolicy", "Delete",
                "volumeBindingMode", "Immediate", "allowVolumeExpansion", 0);
  memset(&e, 0, sizeof(e));
  if (j == NULL || obj_prepare(s, K_STORAGECLASS, "", j, &e) != 0) {
    json_decref(e.causes);
    json_decref(j);
    return -EINVAL;
  }
  return store_commit(s, K_STORAGECLASS, NULL, j, EV_ADDED) != NULL ? 0 : -ENOMEM;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

void volumes_free(struct sim *s) {
  char dir[4096];

  if (volumes_dir(s, dir, sizeof(dir)) == 0)
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---------------------------------------------------------------------- */
/* classes and claims                                                      */

static const char *default_class(struct sim *s) {
  struct sim_obj *o, *best = NULL;

  for (o = store_first(s, K_STORAGECLASS, ""); o != NULL; o = store_next(s, o)) {
    json_t *j = obj_json(o);
    const char *v = json_string_value(json_object_get(json_path(j, "metadata.annotations"), DEFAULT_CLASS_ANN));
    if (v != NULL && strcmp(v, "true") == 0 && (best == NULL || o->create_rv > best->create_rv))
      best = o;
    json_decref(j);
  }
  return best ? best->name : NULL;
}

void pvc_admit(struct sim *s, json_t *j) {
  json_t *spec = json_obj(j, "spec"), *meta = json_obj(j, "metadata"), *fin, *f;
  const char *def;
  size_t i;
  int have = 0;

  if (json_object_get(spec, "storageClassName") == NULL || json_is_null(json_object_get(spec, "storageClassName"))) {
    json_object_del(spec, "storageClassName");
    if ((def = default_class(s)) != NULL)
      json_object_set_new(spec, "storageClassName", json_string(def));
  }
  if (json_object_get(spec, "volumeMode") == NULL)
    json_object_set_new(spec, "volumeMode", json_string("Filesystem"));
  fin = json_object_get(meta, "finalizers");
  if (!json_is_array(fin)) {
    fin = json_array();
    json_object_set_new(meta, "finalizers", fin);
  }
  json_array_foreach(fin, i, f) {
    if (json_is_string(f) && strcmp(json_string_value(f), PROTECTION_FINALIZER) == 0)
      have = 1;
  }
  if (!have)
    json_array_append_new(fin, json_string(PROTECTION_FINALIZER));
  json_object_set_new(j, "status", json_pack("{s:s}", "phase", "Pending"));
}

/* How claim <j> binds: 1 when kubesim provisions it (<*wffc> set when
 * only once a pod is scheduled), 0 when it waits (after an event saying
 * why, unless <quiet>). */
static int provisionable(struct sim *s, struct sim_obj *o, json_t *j, int *wffc, int quiet) {
  json_t *sc = json_path(j, "spec.storageClassName");
  struct sim_obj *cls;
  json_t *cj;
  const char *prov;

  *wffc = 0;
  if (sc == NULL || (json_is_string(sc) && *json_string_value(sc) == '\0')) {
    if (!quiet)
      event_emit(s, o, "Normal", "FailedBinding", "persistentvolume-controller", NULL,
                 "no persistent volumes available for this claim and no storage class is set");
    return 0;
  }
  cls = store_get(s, K_STORAGECLASS, "", json_string_value(sc));
  if (cls == NULL) {
    if (!quiet)
      event_emit(s, o, "Warning", "ProvisioningFailed", "persistentvolume-controller", NULL,
                 "storageclass.storage.k8s.io \"%s\" not found", json_string_value(sc));
    return 0;
  }
  cj = obj_json(cls);
  prov = json_get_str(cj, "provisioner");
  if (prov == NULL || strcmp(prov, VOLUMES_PROVISIONER) != 0) {
    if (!quiet)
      event_emit(s, o, "Normal", "ExternalProvisioning", "persistentvolume-controller", NULL,
                 "Waiting for a volume to be created either by the external provisioner '%s' or manually "
                 "by the system administrator. If volume creation is delayed, please verify that the "
                 "provisioner is running and correctly registered.", prov ? prov : "");
    json_decref(cj);
    return 0;
  }
  *wffc = json_get_str(cj, "volumeBindingMode") != NULL &&
          strcmp(json_get_str(cj, "volumeBindingMode"), "WaitForFirstConsumer") == 0;
  json_decref(cj);
  return 1;
}

/* Provisions claim <o> (JSON <j>, taken) and binds it; <node> names the
 * selected node (WaitForFirstConsumer), NULL otherwise. */
static void provision(struct sim *s, struct sim_obj *o, json_t *j, const char *node) {
  char dir[4096], vol[48];
  json_t *ann = json_obj(json_obj(j, "metadata"), "annotations"), *st;
  int err = 0;

  if (claim_dir(s, o, dir, sizeof(dir)) != 0)
    err = ENAMETOOLONG;
  else if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    err = errno;
  else if (chmod(dir, 0777) != 0) /* past the umask, as local-path-provisioner */
    err = errno;
  if (err != 0) {
    event_emit(s, o, "Warning", "ProvisioningFailed", VOLUMES_PROVISIONER, NULL,
               "failed to provision volume with StorageClass \"%s\": %s",
               json_string_value(json_path(j, "spec.storageClassName")), strerror(err));
    json_decref(j);
    return;
  }
  event_emit(s, o, "Normal", "Provisioning", VOLUMES_PROVISIONER, NULL,
             "External provisioner is provisioning volume for claim \"%s/%s\"", o->ns, o->name);
  snprintf(vol, sizeof(vol), "pvc-%.36s", o->uid);
  json_object_set_new(ann, "pv.kubernetes.io/bind-completed", json_string("yes"));
  json_object_set_new(ann, "pv.kubernetes.io/bound-by-controller", json_string("yes"));
  json_object_set_new(ann, "volume.beta.kubernetes.io/storage-provisioner", json_string(VOLUMES_PROVISIONER));
  json_object_set_new(ann, "volume.kubernetes.io/storage-provisioner", json_string(VOLUMES_PROVISIONER));
  if (node != NULL)
    json_object_set_new(ann, "volume.kubernetes.io/selected-node", json_string(node));
  json_object_set_new(json_obj(j, "spec"), "volumeName", json_string(vol));
  st = json_obj(j, "status");
  json_object_set_new(st, "phase", json_string("Bound"));
  json_object_set(st, "accessModes", json_path(j, "spec.accessModes"));
  json_object_set_new(st, "capacity", json_pack("{s:O}", "storage", json_path(j, "spec.resources.requests.storage")));
  if (store_commit(s, K_PVC, o, j, EV_MODIFIED) == NULL)
    return;
  event_emit(s, o, "Normal", "ProvisioningSucceeded", VOLUMES_PROVISIONER, NULL,
             "Successfully provisioned volume %s", vol);
  FR_DEBUG(LOG_COMP, "claim %s/%s bound to %s (%s)", o->ns, o->name, vol, dir);
}

static int claim_bound(json_t *j) {
  const char *ph = json_string_value(json_path(j, "status.phase"));

  return ph != NULL && strcmp(ph, "Bound") == 0;
}

void pvc_sync(struct sim *s, struct sim_obj *o) {
  json_t *j = obj_json(o);
  int wffc;

  if (j == NULL || claim_bound(j) || o->cur->deleting) {
    json_decref(j);
    return;
  }
  if (!provisionable(s, o, j, &wffc, 0)) {
    json_decref(j);
    return;
  }
  if (wffc) {
    event_emit(s, o, "Normal", "WaitForFirstConsumer", "persistentvolume-controller", NULL,
               "waiting for first consumer to be created before binding");
    json_decref(j);
    return;
  }
  provision(s, o, j, NULL);
  sched_room_freed(s);
}

void volumes_class_added(struct sim *s) {
  struct sim_obj *o, *nx;

  for (o = store_first(s, K_PVC, NULL); o != NULL; o = nx) {
    nx = store_next(s, o);
    pvc_sync(s, o);
  }
}

/* ---------------------------------------------------------------------- */
/* pods' claims                                                            */

static int pod_uses(struct sim_pod *p, const char *claim) {
  size_t i;

  for (i = 0; p->claims != NULL && p->claims[i] != NULL; i++)
    if (strcmp(p->claims[i], claim) == 0)
      return 1;
  return 0;
}

/* Calls <cb> for every other pod of namespace <ns> that holds claim
 * <claim> (not ended); stops at the first non-zero answer, which it
 * returns. */
static int each_user(struct sim *s, const char *ns, const char *claim, struct sim_pod *except,
                     int (*cb)(struct sim_pod *, void *), void *arg) {
  struct sim_obj *o;
  int rc;

  for (o = store_first(s, K_POD, ns); o != NULL && strcmp(o->ns, ns) == 0; o = store_next(s, o)) {
    struct sim_pod *q = o->u.pod;
    if (q == NULL || q == except || q->claims == NULL || q->stage == PS_TERMINAL || !pod_uses(q, claim))
      continue;
    if ((rc = cb(q, arg)) != 0)
      return rc;
  }
  return 0;
}

static int any_cb(struct sim_pod *q, void *arg) {
  (void)q;
  (void)arg;
  return 1;
}

void pvc_finalize(struct sim *s, struct sim_obj *o) {
  char dir[4096];
  json_t *j = obj_json(o);

  if (claim_dir(s, o, dir, sizeof(dir)) == 0)
    pod_dir_remove(s, strdup(dir));
  if (j != NULL)
    store_commit(s, K_PVC, o, j, EV_DELETED);
}

void pvc_delete(struct sim *s, struct sim_obj *o) {
  json_t *j, *fin, *keep, *f;
  char ts[21];
  size_t i;

  if (each_user(s, o->ns, o->name, NULL, any_cb, NULL) == 0) {
    pvc_finalize(s, o);
    return;
  }
  if (o->cur->deleting || (j = obj_json(o)) == NULL)
    return;
  /* In use: Terminating until the pods let go. Other finalizers stay (a
   * client's own would hold the claim the same way). */
  now_rfc3339(ts);
  json_object_set_new(json_obj(j, "metadata"), "deletionTimestamp", json_string(ts));
  json_object_set_new(json_obj(j, "metadata"), "deletionGracePeriodSeconds", json_integer(0));
  fin = json_path(j, "metadata.finalizers");
  keep = json_array();
  json_array_foreach(fin, i, f) json_array_append(keep, f);
  json_object_set_new(json_obj(j, "metadata"), "finalizers", keep);
  store_commit(s, K_PVC, o, j, EV_MODIFIED);
}

void volumes_pod_released(struct sim *s, struct sim_pod *p) {
  size_t i;
  const char *ns;

  if (p->claims == NULL || p->obj == NULL)
    return;
  ns = p->obj->ns;
  p->attached = 0;
  for (i = 0; p->claims[i] != NULL; i++) {
    struct sim_obj *c = store_get(s, K_PVC, ns, p->claims[i]);
    json_t *j;
    int others;
    if (c == NULL || !c->cur->deleting)
      continue;
    others = each_user(s, ns, p->claims[i], p, any_cb, NULL);
    if (others)
      continue;
    /* The pvc-protection controller takes its finalizer off; with none
     * left the claim goes. */
    j = obj_json(c);
    if (j == NULL)
      continue;
    {
      json_t *fin = json_path(j, "metadata.finalizers"), *keep = json_array(), *f;
      size_t k;
      json_array_foreach(fin, k, f) {
        if (!(json_is_string(f) && strcmp(json_string_value(f), PROTECTION_FINALIZER) == 0))
          json_array_append(keep, f);
      }
      if (json_array_size(keep) == 0) {
        json_decref(keep);
        json_decref(j);
        pvc_finalize(s, c);
        continue;
      }
      json_object_set_new(json_obj(j, "metadata"), "finalizers", keep);
      store_commit(s, K_PVC, c, j, EV_MODIFIED);
    }
  }
  /* A ReadWriteOncePod claim may be free for a parked pod now. */
  sched_room_freed(s);
}

/* 1 if <path> is absolute, without "." or ".." components, "//" or ':'
 * (the API server refuses ':' in a mountPath). */
static int clean_abs(const char *path) {
  const char *c;

  if (path == NULL || path[0] != '/' || strchr(path, ':') != NULL || strchr(path, '\n') != NULL)
    return 0;
  for (c = path; *c; ) {
    const char *e;
    size_t n;
    c++;
    e = strchr(c, '/');
    n = e ? (size_t)(e - c) : strlen(c);
    if ((n == 0 && e != NULL) || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
      return 0;
    c += n;
  }
  return 1;
}

/* A subPath: relative, no ".." component (the API server's rule). */
static int clean_sub(const char *sub) {
  const char *c = sub;

  if (sub == NULL || *sub == '\0')
    return 1;
  if (sub[0] == '/' || strchr(sub, '\n') != NULL)
    return 0;
  while (*c) {
    size_t n = strcspn(c, "/");
    if (n == 2 && c[0] == '.' && c[1] == '.')
      return 0;
    c += n;
    if (*c == '/')
      c++;
  }
  return 1;
}

static int pod_invalid(struct sim_err *e, const char *name, const char *field, const char *what) {
  sim_err_set(e, 422, "Invalid", "Pod \"%s\" is invalid: %s: %s", name ? name : "", field, what);
  e->causes = json_pack("[{s:s,s:s,s:s}]", "reason", "FieldValueInvalid", "message", what, "field", field);
  return -1;
}

int pod_claims_init(struct sim_pod *p, json_t *j, const char *name, struct sim_err *e) {
  json_t *vols = json_path(j, "spec.volumes"), *v, *c, *m;
  size_t i, k, n = 0;
  char field[96];

  /* Every mount names a volume, at a clean absolute path, once. */
  json_array_foreach(json_path(j, "spec.containers"), i, c) {
    json_array_foreach(json_object_get(c, "volumeMounts"), k, m) {
      const char *vn = json_get_str(m, "name"), *mp = json_get_str(m, "mountPath");
      size_t x;
      json_t *w;
      int found = 0;
      json_array_foreach(vols, x, w) {
        if (vn != NULL && json_get_str(w, "name") != NULL && strcmp(json_get_str(w, "name"), vn) == 0)
          found = 1;
      }
      snprintf(field, sizeof(field), "spec.containers[%zu].volumeMounts[%zu].name", i, k);
      if (!found)
        return pod_invalid(e, name, field, vn ? "Not found" : "Required value");
      snprintf(field, sizeof(field), "spec.containers[%zu].volumeMounts[%zu].mountPath", i, k);
      if (mp == NULL || !clean_abs(mp) || strcmp(mp, "/") == 0)
        return pod_invalid(e, name, field, "Invalid value: must be an absolute path without ':', '.' or '..' "
                                            "components, and not /");
      snprintf(field, sizeof(field), "spec.containers[%zu].volumeMounts[%zu].subPath", i, k);
      if (!clean_sub(json_get_str(m, "subPath")))
        return pod_invalid(e, name, field, "Invalid value: must be a relative path without '..'");
    }
  }
  json_array_foreach(vols, i, v) {
    if (json_string_value(json_path(v, "persistentVolumeClaim.claimName")) != NULL ||
        json_path(v, "ephemeral.volumeClaimTemplate") != NULL)
      n++;
  }
  if (n == 0)
    return 0;
  p->claims = calloc(n + 1, sizeof(*p->claims));
  if (p->claims == NULL)
    return sim_err_set(e, 503, "ServiceUnavailable", "out of memory");
  n = 0;
  json_array_foreach(vols, i, v) {
    const char *cn = json_string_value(json_path(v, "persistentVolumeClaim.claimName"));
    char eph[320];
    if (cn == NULL && json_path(v, "ephemeral.volumeClaimTemplate") != NULL) {
      /* A generic ephemeral volume: the claim "<pod>-<volume>". */
      snprintf(eph, sizeof(eph), "%s-%s", name ? name : "", json_get_str(v, "name") ? json_get_str(v, "name") : "");
      cn = eph;
    }
    if (cn == NULL)
      continue;
    if ((p->claims[n++] = strdup(cn)) == NULL) {
      pod_claims_free(p);
      return sim_err_set(e, 503, "ServiceUnavailable", "out of memory");
    }
  }
  return 0;
}

/* 1 if claim <c> (JSON) is owned by the pod of uid <uid>. */
static int owned_by(json_t *c, const char *uid) {
  json_t *r;
  size_t i;

  json_array_foreach(json_path(c, "metadata.ownerReferences"), i, r) {
    if (json_get_str(r, "uid") != NULL && strcmp(json_get_str(r, "uid"), uid) == 0)
      return 1;
  }
  return 0;
}

void pod_ephemeral_create(struct sim *s, struct sim_obj *o) {
  json_t *pod = obj_json(o), *v;
  size_t i;

  json_array_foreach(json_path(pod, "spec.volumes"), i, v) {
    json_t *tmpl = json_path(v, "ephemeral.volumeClaimTemplate"), *c, *meta;
    const char *vn = json_get_str(v, "name");
    struct sim_obj *have;
    struct sim_err e;
    char name[320];
    if (tmpl == NULL || vn == NULL)
      continue;
    snprintf(name, sizeof(name), "%s-%s", o->name, vn);
    if ((have = store_get(s, K_PVC, o->ns, name)) != NULL) {
      json_t *hj = obj_json(have);
      if (!owned_by(hj, o->uid))
        event_emit(s, o, "Warning", "FailedMount", "kubelet", NULL,
                   "Unable to attach or mount volumes: PVC %s/%s was not created for pod %s/%s (pod is not owner)",
                   o->ns, name, o->ns, o->name);
      json_decref(hj);
      continue;
    }
    /* The ephemeral volume controller: the template's claim, owned by the
     * pod (the garbage collector deletes it with the pod). */
    c = json_pack("{s:s,s:s,s:{s:s,s:s,s:[{s:s,s:s,s:s,s:s,s:b,s:b}]},s:O}", "apiVersion", "v1", "kind",
                  "PersistentVolumeClaim", "metadata", "name", name, "namespace", o->ns, "ownerReferences",
                  "apiVersion", "v1", "kind", "Pod", "name", o->name, "uid", o->uid, "controller", 1,
                  "blockOwnerDeletion", 1, "spec", json_object_get(tmpl, "spec"));
    meta = json_object_get(c, "metadata");
    if (c != NULL && json_is_object(json_path(tmpl, "metadata.labels")))
      json_object_set(meta, "labels", json_path(tmpl, "metadata.labels"));
    if (c != NULL && json_is_object(json_path(tmpl, "metadata.annotations")))
      json_object_set(meta, "annotations", json_path(tmpl, "metadata.annotations"));
    memset(&e, 0, sizeof(e));
    if (c == NULL || obj_prepare(s, K_PVC, o->ns, c, &e) != 0 || kind_validate(K_PVC, NULL, c, &e) != 0) {
      event_emit(s, o, "Warning", "FailedCreate", "ephemeral_volume", NULL, "cannot create claim %s: %s", name,
                 e.msg[0] ? e.msg : "out of memory");
      json_decref(e.causes);
      json_decref(c);
      continue;
    }
    pvc_admit(s, c);
    if ((have = store_commit(s, K_PVC, NULL, c, EV_ADDED)) != NULL)
      pvc_sync(s, have);
  }
  json_decref(pod);
}

void volumes_pod_gc(struct sim *s, struct sim_pod *p) {
  size_t i;

  for (i = 0; p->claims != NULL && p->obj != NULL && p->claims[i] != NULL; i++) {
    struct sim_obj *c = store_get(s, K_PVC, p->obj->ns, p->claims[i]);
    json_t *cj = c ? obj_json(c) : NULL;
    int mine = cj != NULL && owned_by(cj, p->obj->uid);
    json_decref(cj);
    /* Terminating while this pod holds it; volumes_pod_released() then
     * lets it go. */
    if (mine && !c->cur->deleting)
      pvc_delete(s, c);
  }
}

void pod_claims_free(struct sim_pod *p) {
  size_t i;

  for (i = 0; p->claims != NULL && p->claims[i] != NULL; i++)
    free(p->claims[i]);
  free(p->claims);
  p->claims = NULL;
}

static int has_mode(json_t *j, const char *mode) {
  json_t *m;
  size_t i;

  json_array_foreach(json_path(j, "spec.accessModes"), i, m) {
    if (json_is_string(m) && strcmp(json_string_value(m), mode) == 0)
      return 1;
  }
  return 0;
}

/* Another pod placed on a node (bound, running or terminating). */
static int placed_cb(struct sim_pod *q, void *arg) {
  (void)arg;
  return q->node != NULL;
}

int pod_claims_schedulable(struct sim *s, struct sim_obj *o, char *msg, size_t cap) {
  struct sim_pod *p = o->u.pod;
  size_t i;

  for (i = 0; p->claims != NULL && p->claims[i] != NULL; i++) {
    struct sim_obj *c = store_get(s, K_PVC, o->ns, p->claims[i]);
    json_t *j;
    int wffc, ok = 1;
    if (c == NULL) {
      snprintf(msg, cap, "persistentvolumeclaim \"%s\" not found", p->claims[i]);
      return 1;
    }
    if (c->cur->deleting) {
      snprintf(msg, cap, "persistentvolumeclaim \"%s\" is being deleted", p->claims[i]);
      return 1;
    }
    if ((j = obj_json(c)) == NULL)
      return 1;
    if (!claim_bound(j) && !(provisionable(s, c, j, &wffc, 1) && wffc)) {
      snprintf(msg, cap, "pod has unbound immediate PersistentVolumeClaims");
      ok = 0;
    } else if (has_mode(j, "ReadWriteOncePod") && each_user(s, o->ns, p->claims[i], p, placed_cb, NULL)) {
      snprintf(msg, cap, "1 node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod "
               "access mode");
      ok = 0;
    }
    json_decref(j);
    if (!ok)
      return 1;
  }
  return 0;
}

void pod_claims_bind(struct sim *s, struct sim_obj *o, const char *node) {
  struct sim_pod *p = o->u.pod;
  size_t i;

  for (i = 0; p->claims != NULL && p->claims[i] != NULL; i++) {
    struct sim_obj *c = store_get(s, K_PVC, o->ns, p->claims[i]);
    json_t *j = c ? obj_json(c) : NULL;
    int wffc;
    if (j == NULL)
      continue;
    if (claim_bound(j) || !provisionable(s, c, j, &wffc, 1) || !wffc) {
      json_decref(j);
      continue;
    }
    provision(s, c, j, node);
  }
}

struct attach_ctx {
  const char *node;
  struct fr_buf users;
};

/* A pod that has the volume attached to another node. */
static int other_node_cb(struct sim_pod *q, void *arg) {
  struct attach_ctx *a = arg;

  if (q->attached && q->node != NULL && strcmp(q->node->name, a->node) != 0 && q->obj != NULL)
    fr_buf_printf(&a->users, "%s%s", a->users.len ? ", " : "", q->obj->name);
  return 0;
}

int pod_claims_attach(struct sim *s, struct sim_obj *o) {
  struct sim_pod *p = o->u.pod;
  const char *node = p->node ? p->node->name : "";
  struct fr_buf vols;
  size_t i;

  for (i = 0; p->claims != NULL && p->claims[i] != NULL; i++) {
    struct sim_obj *c = store_get(s, K_PVC, o->ns, p->claims[i]);
    json_t *j = c ? obj_json(c) : NULL;
    if (j == NULL || !claim_bound(j)) {
      /* Bound by spec.nodeName past the scheduler, or deleted since. */
      event_emit(s, o, "Warning", "FailedMount", "kubelet", node,
                 "Unable to attach or mount volumes: unmounted volumes=[%s], unattached volumes=[%s]: "
                 "error processing PVC %s/%s: %s", p->claims[i], p->claims[i], o->ns, p->claims[i],
                 j == NULL ? "PVC not found" : "PVC is not bound");
      json_decref(j);
      return 1;
    }
    if (has_mode(j, "ReadWriteOnce")) {
      struct attach_ctx a;
      a.node = node;
      fr_buf_init(&a.users);
      each_user(s, o->ns, p->claims[i], p, other_node_cb, &a);
      if (a.users.len > 0) {
        event_emit(s, o, "Warning", "FailedAttachVolume", "attachdetach-controller", NULL,
                   "Multi-Attach error for volume \"%s\" Volume is already used by pod(s) %s",
                   json_string_value(json_path(j, "spec.volumeName")), a.users.data);
        fr_buf_free(&a.users);
        json_decref(j);
        return 1;
      }
      fr_buf_free(&a.users);
    }
    json_decref(j);
  }
  if (p->claims == NULL || p->attached)
    return 0;
  p->attached = 1;
  fr_buf_init(&vols);
  for (i = 0; p->claims[i] != NULL; i++) {
    struct sim_obj *c = store_get(s, K_PVC, o->ns, p->claims[i]);
    json_t *j = c ? obj_json(c) : NULL;
    const char *v = json_string_value(json_path(j, "spec.volumeName"));
    if (v != NULL)
      fr_buf_printf(&vols, "%s\"%s\"", vols.len ? ", " : "", v);
    json_decref(j);
  }
  event_emit(s, o, "Normal", "SuccessfulAttachVolume", "attachdetach-controller", NULL,
             "AttachVolume.Attach succeeded for volume %s", vols.data ? vols.data : "");
  fr_buf_free(&vols);
  return 0;
}

int pod_volume_mounts(struct sim *s, struct sim_obj *o, json_t *j, json_t *c, char **out, size_t cap) {
  json_t *m, *vols = json_path(j, "spec.volumes");
  size_t i, n = 0;

  json_array_foreach(json_object_get(c, "volumeMounts"), i, m) {
    const char *vn = json_get_str(m, "name"), *mp = json_get_str(m, "mountPath"), *sub = json_get_str(m, "subPath");
    const char *claim = NULL;
    struct sim_obj *co;
    char dir[4096];
    size_t k;
    json_t *v;
    int len;
    char eph[320];
    json_array_foreach(vols, k, v) {
      if (vn == NULL || json_get_str(v, "name") == NULL || strcmp(json_get_str(v, "name"), vn) != 0)
        continue;
      claim = json_string_value(json_path(v, "persistentVolumeClaim.claimName"));
      if (claim == NULL && json_path(v, "ephemeral.volumeClaimTemplate") != NULL) {
        snprintf(eph, sizeof(eph), "%s-%s", o->name, vn);
        claim = eph;
      }
    }
    /* Only claims are volumes with content here (emptyDir, configMap,
     * secret volumes are not modelled). */
    if (claim == NULL || mp == NULL)
      continue;
    if (n == cap || (co = store_get(s, K_PVC, o->ns, claim)) == NULL || claim_dir(s, co, dir, sizeof(dir)) != 0 ||
        strchr(dir, '\n') != NULL)
      goto fail;
    len = snprintf(NULL, 0, "%s\n%s\n%s\n%s", json_is_true(json_object_get(m, "readOnly")) ? "ro" : "rw", mp,
                   sub ? sub : "", dir);
    if ((out[n] = malloc((size_t)len + 1)) == NULL)
      goto fail;
    snprintf(out[n], (size_t)len + 1, "%s\n%s\n%s\n%s", json_is_true(json_object_get(m, "readOnly")) ? "ro" : "rw",
             mp, sub ? sub : "", dir);
    n++;
  }
  return (int)n;
fail:
  while (n > 0)
    free(out[--n]);
  return -ENOMEM;
}
