/* deploy.c - the Deployment controller, as kube-controller-manager's runs
 * it: one ReplicaSet per pod template, named <deployment>-<pod-template-hash>
 * and owned through a controller ownerReference; a template change rolls
 * out with RollingUpdate (maxSurge / maxUnavailable) or Recreate; old
 * ReplicaSets are scaled to 0 and kept per revisionHistoryLimit; the
 * deployment.kubernetes.io/revision annotation numbers the templates
 * (kubectl rollout history / undo read it); status and the Available and
 * Progressing conditions are what kubectl rollout status reads.
 *
 * A Deployment is synced a loop turn after it or one of its ReplicaSets
 * changed (deploy_mark_dirty(), run from rs.c's sync). Each sync takes one
 * step, as the real controller does: scale the new ReplicaSet up, or else
 * scale old ones down, then write status; the ReplicaSets' status changes
 * bring the next step.
 *
 * Not modelled: progressDeadlineSeconds (a stuck rollout never reports
 * ProgressDeadlineExceeded), minReadySeconds (a ready pod is available at
 * once), proportional scaling of a paused or mid-rollout Deployment (a
 * scale change during a rollout goes to the new ReplicaSet), and adoption
 * of ReplicaSets that match a selector but have no owner.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/buf.h"
#include "fr/log.h"
#include "fr/util.h"
#include "sim.h"

#define HASH_LABEL "pod-template-hash"
#define REV_ANN "deployment.kubernetes.io/revision"
#define DESIRED_ANN "deployment.kubernetes.io/desired-replicas"
#define MAX_ANN "deployment.kubernetes.io/max-replicas"
#define DEFAULT_HISTORY 10
#define COMPONENT "deployment-controller"

struct sim_deploy {
  int dirty;
};

/* ---------------------------------------------------------------------- */
/* pure parts                                                              */

/* Kubernetes' rand.SafeEncodeString alphabet: no vowels, no 0/1/3 that
 * could spell words or look alike. */
static const char safe_alnum[] = "bcdfghjklmnpqrstvwxz2456789";

/* Drops nulls and empty objects and arrays under <j>, recursively: the API
 * server decodes into Go structs, where `"resources": {}`, an absent field
 * and `"creationTimestamp": null` are the same template. Returns 1 if <j>
 * itself is now empty. */
static int prune(json_t *j) {
  const char *k;
  json_t *v;
  void *tmp;
  size_t i;

  if (json_is_object(j)) {
    json_object_foreach_safe(j, tmp, k, v) {
      if (json_is_null(v) || prune(v))
        json_object_del(j, k);
    }
    return json_object_size(j) == 0;
  }
  if (json_is_array(j)) {
    for (i = 0; i < json_array_size(j); i++)
      prune(json_array_get(j, i));
    return json_array_size(j) == 0;
  }
  return 0;
}

int deploy_template_hash(json_t *tmpl, int64_t collisions, char *out, size_t cap) {
  json_t *t = json_deep_copy(tmpl);
  char *text, num[16];
  uint32_t h = 2166136261u;
  size_t i, n;

  if (t == NULL && tmpl != NULL)
    return -ENOMEM;
  json_object_del(json_path(t, "metadata.labels"), HASH_LABEL);
  prune(t);
  /* Sorted keys: the hash depends on the template, not on the order its
   * fields arrived in. */
  text = t ? json_dumps(t, JSON_COMPACT | JSON_SORT_KEYS) : strdup("null");
  json_decref(t);
  if (text == NULL)
    return -ENOMEM;
  for (i = 0; text[i] != '\0'; i++) {
    h ^= (uint8_t)text[i];
    h *= 16777619u;
  }
  free(text);
  /* The controller adds the collision count to the hash so that a name
   * taken by a foreign ReplicaSet yields a new one. */
  if (collisions > 0) {
    for (i = 0; i < 8; i++) {
      h ^= (uint8_t)((uint64_t)collisions >> (8 * i));
      h *= 16777619u;
    }
  }
  snprintf(num, sizeof(num), "%" PRIu32, h);
  n = strlen(num);
  if (cap < n + 1)
    return -ENOSPC;
  for (i = 0; i < n; i++)
    out[i] = safe_alnum[(unsigned char)num[i] % (sizeof(safe_alnum) - 1)];
  out[n] = '\0';
  return 0;
}

/* An IntOrString of <replicas>: an integer, or "N%" rounded up or down. */
static int int_or_percent(json_t *v, int64_t replicas, int round_up, int64_t *out) {
  const char *s;
  int64_t pct;
  char num[16];
  size_t len;

  if (json_is_integer(v)) {
    *out = json_integer_value(v);
    return *out < 0 ? -EINVAL : 0;
  }
  s = json_string_value(v);
  if (s == NULL || (len = strlen(s)) < 2 || len > sizeof(num) || s[len - 1] != '%')
    return -EINVAL;
  memcpy(num, s, len - 1);
  num[len - 1] = '\0';
  if (fr_parse_int64(num, 0, 100000, &pct) != 0)
    return -EINVAL;
  *out = round_up ? (pct * replicas + 99) / 100 : pct * replicas / 100;
  return 0;
}

int deploy_fenceposts(json_t *surge, json_t *unavail, int64_t replicas, int64_t *max_surge,
                      int64_t *max_unavail) {
  json_t *dflt = json_string("25%");
  int rc;

  rc = int_or_percent(surge ? surge : dflt, replicas, 1, max_surge);
  if (rc == 0)
    rc = int_or_percent(unavail ? unavail : dflt, replicas, 0, max_unavail);
  json_decref(dflt);
  if (rc != 0)
    return rc;
  if (*max_unavail > replicas)
    *max_unavail = replicas;
  /* Both zero would never make progress: the controller allows one. */
  if (*max_surge == 0 && *max_unavail == 0)
    *max_unavail = 1;
  return 0;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

int deploy_rolling_step(int64_t replicas, int64_t max_surge, int64_t max_unavail,
                        struct deploy_rs_count *nw, struct deploy_rs_count *old, size_t nold) {
  int64_t old_spec = 0, all_spec, all_avail, min_avail, max_down, done, left;
  size_t i;

  for (i = 0; i < nold; i++)
    old_spec += old[i].spec;
  all_spec = old_spec + nw->spec;
  /* reconcileNewReplicaSet */
  if (old_spec == 0 || nw->spec > replicas) {
    if (nw->spec == replicas)
      return 0;
    nw->spec = replicas;
    return 1;
  }
  if (nw->spec < replicas && all_spec < replicas + max_surge) {
    nw->spec += min64(replicas + max_surge - all_spec, replicas - nw->spec);
    return 1;
  }
  /* reconcileOldReplicaSets: never below replicas - maxUnavailable
   * available pods; unhealthy old pods go first (they count for nothing). */
  min_avail = replicas - max_unavail;
  max_down = all_spec - min_avail - (nw->spec - nw->available);
  if (max_down <= 0)
    return 0;
  done = 0;
  for (i = 0; i < nold && done < max_down; i++) {
    int64_t unhealthy = old[i].spec - old[i].available, d;
    if (old[i].spec == 0 || unhealthy <= 0)
      continue;
    d = min64(max_down - done, unhealthy);
    old[i].spec -= d;
    done += d;
  }
  all_avail = nw->available;
  for (i = 0; i < nold; i++)
    all_avail += min64(old[i].available, old[i].spec);
  left = all_avail - min_avail;
  for (i = 0; i < nold && left > 0; i++) {
    int64_t d = min64(old[i].spec, left);
    old[i].spec -= d;
    left -= d;
    done += d;
  }
  return done > 0;
}

/* ---------------------------------------------------------------------- */
/* the controller                                                          */

struct owned {
  struct sim_obj *o;
  json_t *j;
  int64_t rev;
  struct deploy_rs_count c;
  int64_t orig_spec;
};

static int cmp_rev(const void *a, const void *b) {
  const struct owned *x = a, *y = b;

  return x->rev < y->rev ? -1 : x->rev > y->rev;
}

static int64_t revision_of(json_t *j) {
  /* json_path() splits at dots; the annotation key has some. */
  const char *v = json_get_str(json_path(j, "metadata.annotations"), REV_ANN);
  int64_t r = 0;

  if (v == NULL || fr_parse_int64(v, 0, INT64_MAX, &r) != 0)
    return 0;
  return r;
}

static const char *controller_uid(json_t *j, const char *kind) {
  size_t i;
  json_t *r;

  json_array_foreach(json_path(j, "metadata.ownerReferences"), i, r) {
    if (json_is_true(json_object_get(r, "controller")) && json_get_str(r, "kind") &&
        strcmp(json_get_str(r, "kind"), kind) == 0)
      return json_get_str(r, "uid");
  }
  return NULL;
}

/* Templates equal but for the pod-template-hash label (EqualIgnoreHash). */
static int same_template(json_t *a, json_t *b) {
  json_t *x = json_deep_copy(a), *y = json_deep_copy(b);
  int eq;

  json_object_del(json_path(x, "metadata.labels"), HASH_LABEL);
  json_object_del(json_path(y, "metadata.labels"), HASH_LABEL);
  prune(x);
  prune(y);
  eq = json_equal(x, y);
  json_decref(x);
  json_decref(y);
  return eq;
}

/* Annotations the controller does not copy from a Deployment to its
 * ReplicaSets (deployment_util.go skipCopyAnnotation). */
static int skip_annotation(const char *k) {
  return strcmp(k, "kubectl.kubernetes.io/last-applied-configuration") == 0 ||
         strcmp(k, REV_ANN) == 0 || strcmp(k, "deployment.kubernetes.io/revision-history") == 0 ||
         strcmp(k, DESIRED_ANN) == 0 || strcmp(k, MAX_ANN) == 0 ||
         strcmp(k, "deprecated.deployment.rollback.to") == 0;
}

static void set_int_ann(json_t *ann, const char *key, int64_t v) {
  char buf[24];

  snprintf(buf, sizeof(buf), "%" PRId64, v);
  json_object_set_new(ann, key, json_string(buf));
}

static json_t *owner_ref(struct sim_obj *d) {
  return json_pack("{s:s,s:s,s:s,s:s,s:b,s:b}", "apiVersion", "apps/v1", "kind", "Deployment",
                   "name", d->name, "uid", d->uid, "controller", 1, "blockOwnerDeletion", 1);
}

/* Creates the ReplicaSet for the Deployment's current template. */
static struct sim_obj *create_rs(struct sim *s, struct sim_obj *d, json_t *dj, const char *hash,
                                 int64_t replicas, int64_t rev, int64_t max_surge) {
  json_t *rs = json_object(), *meta = json_object(), *spec, *ann = json_object(), *v;
  json_t *dann = json_path(dj, "metadata.annotations");
  const char *k;
  char name[300];
  struct sim_err e;
  struct sim_obj *o;

  snprintf(name, sizeof(name), "%s-%s", d->name, hash);
  json_object_set_new(meta, "name", json_string(name));
  json_object_set_new(meta, "namespace", json_string(d->ns));
  json_object_set_new(meta, "labels", json_deep_copy(json_path(dj, "spec.template.metadata.labels")));
  json_object_set_new(json_obj(meta, "labels"), HASH_LABEL, json_string(hash));
  json_object_foreach(dann, k, v) {
    if (!skip_annotation(k))
      json_object_set(ann, k, v);
  }
  set_int_ann(ann, REV_ANN, rev);
  set_int_ann(ann, DESIRED_ANN, json_get_int(json_object_get(dj, "spec"), "replicas", 1));
  set_int_ann(ann, MAX_ANN, json_get_int(json_object_get(dj, "spec"), "replicas", 1) + max_surge);
  json_object_set_new(meta, "annotations", ann);
  json_object_set_new(meta, "ownerReferences", json_pack("[o]", owner_ref(d)));
  json_object_set_new(meta, "generation", json_integer(1));
  json_object_set_new(rs, "metadata", meta);
  spec = json_obj(rs, "spec");
  json_object_set_new(spec, "replicas", json_integer(replicas));
  json_object_set_new(spec, "selector", json_deep_copy(json_path(dj, "spec.selector")));
  json_object_set_new(json_obj(json_object_get(spec, "selector"), "matchLabels"), HASH_LABEL,
                      json_string(hash));
  json_object_set_new(spec, "template", json_deep_copy(json_path(dj, "spec.template")));
  json_object_set_new(json_obj(json_obj(json_object_get(spec, "template"), "metadata"), "labels"),
                      HASH_LABEL, json_string(hash));
  json_object_set_new(rs, "status", json_pack("{s:i,s:i}", "replicas", 0, "observedGeneration", 0));
  if (obj_prepare(s, K_RS, d->ns, rs, &e) != 0 || rs_validate(rs, &e) != 0) {
    FR_WARN("kubesim", "deployment %s/%s: cannot create ReplicaSet %s: %s", d->ns, d->name, name, e.msg);
    json_decref(e.causes);
    json_decref(rs);
    return NULL;
  }
  o = store_commit(s, K_RS, NULL, rs, EV_ADDED);
  if (o != NULL && rs_setup(s, o) != 0)
    return NULL;
  return o;
}

/* Sets <rs>'s replicas (and the controller's annotations) and commits. */
static void scale_rs(struct sim *s, struct sim_obj *d, struct owned *w, int64_t replicas,
                     int64_t desired, int64_t max_surge) {
  json_t *ann;
  char msg[600];

  ann = json_obj(json_obj(w->j, "metadata"), "annotations");
  set_int_ann(ann, DESIRED_ANN, desired);
  set_int_ann(ann, MAX_ANN, desired + max_surge);
  if (w->orig_spec != replicas) {
    json_object_set_new(json_obj(w->j, "spec"), "replicas", json_integer(replicas));
    json_object_set_new(json_obj(w->j, "metadata"), "generation",
                        json_integer(json_get_int(json_object_get(w->j, "metadata"), "generation", 1) + 1));
  }
  if (w->orig_spec != replicas) {
    snprintf(msg, sizeof(msg), "Scaled %s replica set %s from %" PRId64 " to %" PRId64,
             replicas > w->orig_spec ? "up" : "down", w->o->name, w->orig_spec, replicas);
    event_emit(s, d, "Normal", "ScalingReplicaSet", COMPONENT, NULL, "%s", msg);
  }
  w->o = store_commit(s, K_RS, w->o, json_incref(w->j), EV_MODIFIED);
  if (w->o != NULL)
    rs_mark_dirty(s, w->o);
  w->orig_spec = replicas;
}

static json_t *condition(json_t *old_conds, const char *type, const char *status,
                         const char *reason, const char *msg) {
  json_t *prev = NULL, *c;
  size_t i;
  char ts[21];

  json_array_foreach(old_conds, i, c) {
    if (json_get_str(c, "type") && strcmp(json_get_str(c, "type"), type) == 0)
      prev = c;
  }
  now_rfc3339(ts);
  c = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "type", type, "status", status, "lastUpdateTime", ts,
                "lastTransitionTime", ts, "reason", reason, "message", msg);
  if (prev != NULL) {
    const char *ps = json_get_str(prev, "status"), *pr = json_get_str(prev, "reason"),
               *pm = json_get_str(prev, "message");
    if (ps && strcmp(ps, status) == 0 && json_get_str(prev, "lastTransitionTime"))
      json_object_set(c, "lastTransitionTime", json_object_get(prev, "lastTransitionTime"));
    if (ps && pr && pm && strcmp(ps, status) == 0 && strcmp(pr, reason) == 0 &&
        strcmp(pm, msg) == 0 && json_get_str(prev, "lastUpdateTime"))
      json_object_set(c, "lastUpdateTime", json_object_get(prev, "lastUpdateTime"));
  }
  return c;
}

static void free_owned(struct owned *w, size_t n) {
  size_t i;

  for (i = 0; i < n; i++)
    json_decref(w[i].j);
  free(w);
}

/* Deletes old, empty ReplicaSets beyond revisionHistoryLimit (oldest first). */
static void cleanup_history(struct sim *s, struct owned *w, size_t n, struct sim_obj *newrs,
                            int64_t limit) {
  size_t i, empty = 0;

  for (i = 0; i < n; i++)
    if (w[i].o != newrs && w[i].c.spec == 0 && json_get_int(json_object_get(w[i].j, "status"), "replicas", 0) == 0)
      empty++;
  for (i = 0; i < n && (int64_t)empty > limit; i++) {
    if (w[i].o == newrs || w[i].c.spec != 0 ||
        json_get_int(json_object_get(w[i].j, "status"), "replicas", 0) != 0)
      continue;
    rs_deleted(s, w[i].o, 0);
    store_commit(s, K_RS, w[i].o, json_incref(w[i].j), EV_DELETED);
    w[i].o = NULL;
    empty--;
  }
}

static void deploy_sync(struct sim *s, struct sim_obj *d) {
  json_t *j = obj_json(d), *spec, *st, *nst, *conds;
  struct owned *w = NULL;
  size_t n = 0, cap = 0, i, nold;
  struct sim_obj *o, *newo = NULL;
  struct owned *nw = NULL;
  int64_t replicas, max_surge, max_unavail, maxrev = 0, limit, created_new = 0;
  int64_t sum_rep = 0, sum_ready = 0, sum_avail = 0, updated = 0;
  const char *strategy;
  int recreate, paused, changed = 0;
  char hash[16], msg[600];

  d->u.deploy->dirty = 0;
  if (j == NULL)
    return;
  spec = json_object_get(j, "spec");
  replicas = json_get_int(spec, "replicas", 1);
  strategy = json_get_str(json_object_get(spec, "strategy"), "type");
  recreate = strategy != NULL && strcmp(strategy, "Recreate") == 0;
  paused = json_is_true(json_object_get(spec, "paused"));
  limit = json_get_int(spec, "revisionHistoryLimit", DEFAULT_HISTORY);
  if (recreate) {
    max_surge = 0;
    max_unavail = replicas;
  } else if (deploy_fenceposts(json_path(j, "spec.strategy.rollingUpdate.maxSurge"),
                               json_path(j, "spec.strategy.rollingUpdate.maxUnavailable"),
                               replicas, &max_surge, &max_unavail) != 0) {
    json_decref(j);
    return; /* validation refuses these; nothing to do with a stored bad value */
  }
  if (deploy_template_hash(json_path(j, "spec.template"),
                           json_get_int(json_object_get(j, "status"), "collisionCount", 0), hash,
                           sizeof(hash)) != 0)
    goto out;

  /* The ReplicaSets this Deployment controls, oldest revision first. */
  for (o = store_first(s, K_RS, d->ns); o != NULL && strcmp(o->ns, d->ns) == 0; o = store_next(s, o)) {
    json_t *rj;
    const char *uid;
    if (o->u.rs == NULL)
      continue;
    rj = obj_json(o);
    uid = rj ? controller_uid(rj, "Deployment") : NULL;
    if (uid == NULL || strcmp(uid, d->uid) != 0) {
      json_decref(rj);
      continue;
    }
    if (n == cap) {
      struct owned *nwv = realloc(w, (cap ? cap * 2 : 8) * sizeof(*w));
      if (nwv == NULL) {
        json_decref(rj);
        goto out;
      }
      w = nwv;
      cap = cap ? cap * 2 : 8;
    }
    w[n].o = o;
    w[n].j = rj;
    w[n].rev = revision_of(rj);
    w[n].c.spec = w[n].orig_spec = json_get_int(json_object_get(rj, "spec"), "replicas", 1);
    w[n].c.available = json_get_int(json_object_get(rj, "status"), "availableReplicas", 0);
    n++;
  }
  if (n > 0)
    qsort(w, n, sizeof(*w), cmp_rev);
  for (i = 0; i < n; i++) {
    if (newo == NULL && same_template(json_path(w[i].j, "spec.template"), json_path(j, "spec.template")))
      newo = w[i].o;
  }
  for (i = 0; i < n; i++) {
    if (w[i].o != newo && w[i].rev > maxrev)
      maxrev = w[i].rev;
  }

  if (newo == NULL && !paused) {
    int64_t old_active = 0, initial;
    struct owned *grown;
    for (i = 0; i < n; i++)
      old_active += w[i].c.spec;
    if (recreate) {
      initial = 0;
    } else if (old_active == 0) {
      initial = replicas;
    } else {
      /* NewRSNewReplicas: up to maxSurge above the desired count. */
      initial = old_active < replicas + max_surge ? min64(replicas + max_surge - old_active, replicas) : 0;
    }
    /* Recreate with nothing old running can start at once. */
    if (recreate && old_active == 0) {
      int64_t pods = 0;
      for (i = 0; i < n; i++)
        pods += json_get_int(json_object_get(w[i].j, "status"), "replicas", 0);
      if (pods == 0)
        initial = replicas;
    }
    newo = create_rs(s, d, j, hash, initial, maxrev + 1, max_surge);
    if (newo == NULL)
      goto out;
    created_new = 1;
    if (initial > 0) {
      snprintf(msg, sizeof(msg), "Scaled up replica set %s from 0 to %" PRId64, newo->name, initial);
      event_emit(s, d, "Normal", "ScalingReplicaSet", COMPONENT, NULL, "%s", msg);
    }
    grown = realloc(w, (n + 1) * sizeof(*w));
    if (grown == NULL)
      goto out;
    w = grown;
    w[n].o = newo;
    w[n].j = obj_json(newo);
    w[n].rev = maxrev + 1;
    w[n].c.spec = w[n].orig_spec = initial;
    w[n].c.available = 0;
    n++;
    if (w[n - 1].j == NULL) {
      n--;
      goto out;
    }
  }
  for (i = 0; i < n; i++)
    if (w[i].o == newo)
      nw = &w[i];

  /* A template rolled back to an older ReplicaSet's makes it the newest
   * revision again. */
  if (nw != NULL && nw->rev <= maxrev) {
    set_int_ann(json_obj(json_obj(nw->j, "metadata"), "annotations"), REV_ANN, maxrev + 1);
    nw->rev = maxrev + 1;
    nw->o = store_commit(s, K_RS, nw->o, json_incref(nw->j), EV_MODIFIED);
    if (nw->o == NULL)
      goto out;
  }

  /* One step of the rollout. The old ReplicaSets go to the step function
   * oldest first; the new one is the last entry (highest revision). */
  if (nw != NULL && !paused) {
    struct deploy_rs_count *olds = calloc(n ? n : 1, sizeof(*olds));
    size_t k = 0;
    if (olds == NULL)
      goto out;
    for (i = 0; i < n; i++)
      if (&w[i] != nw)
        olds[k++] = w[i].c;
    nold = k;
    if (recreate) {
      int64_t old_active = 0, old_pods = 0;
      for (i = 0; i < n; i++) {
        if (&w[i] == nw)
          continue;
        old_active += w[i].c.spec;
        old_pods += json_get_int(json_object_get(w[i].j, "status"), "replicas", 0);
      }
      if (old_active > 0) {
        for (k = 0; k < nold; k++)
          olds[k].spec = 0;
      } else if (old_pods == 0) {
        nw->c.spec = replicas;
      }
    } else {
      deploy_rolling_step(replicas, max_surge, max_unavail, &nw->c, olds, nold);
    }
    for (i = 0, k = 0; i < n; i++) {
      int64_t want = &w[i] == nw ? nw->c.spec : olds[k++].spec;
      w[i].c.spec = want;
      if (want != w[i].orig_spec) {
        scale_rs(s, d, &w[i], want, replicas, max_surge);
        changed = 1;
      }
    }
    free(olds);
  }
  cleanup_history(s, w, n, newo, limit);

  /* Status. */
  for (i = 0; i < n; i++) {
    json_t *rst;
    if (w[i].o == NULL)
      continue;
    rst = json_object_get(w[i].j, "status");
    sum_rep += json_get_int(rst, "replicas", 0);
    sum_ready += json_get_int(rst, "readyReplicas", 0);
    sum_avail += json_get_int(rst, "availableReplicas", 0);
    if (&w[i] == nw)
      updated = json_get_int(rst, "replicas", 0);
  }
  st = json_object_get(j, "status");
  conds = json_object_get(st, "conditions");
  nst = json_pack("{s:I,s:I,s:I,s:I,s:I}", "observedGeneration",
                  (json_int_t)json_get_int(json_object_get(j, "metadata"), "generation", 1),
                  "replicas", (json_int_t)sum_rep, "updatedReplicas", (json_int_t)updated,
                  "readyReplicas", (json_int_t)sum_ready, "availableReplicas", (json_int_t)sum_avail);
  /* Zero counts are omitted on the wire (omitempty), as the API server does. */
  {
    static const char *const keys[] = {"replicas", "updatedReplicas", "readyReplicas", "availableReplicas"};
    for (i = 0; i < FR_ARRAY_SIZE(keys); i++)
      if (json_get_int(nst, keys[i], 0) == 0)
        json_object_del(nst, keys[i]);
  }
  if (replicas - sum_avail > 0)
    json_object_set_new(nst, "unavailableReplicas", json_integer(replicas - sum_avail));
  if (json_get_int(st, "collisionCount", 0) > 0)
    json_object_set(nst, "collisionCount", json_object_get(st, "collisionCount"));
  {
    json_t *nc = json_array();
    if (sum_avail >= replicas - max_unavail)
      json_array_append_new(nc, condition(conds, "Available", "True", "MinimumReplicasAvailable",
                                          "Deployment has minimum availability."));
    else
      json_array_append_new(nc, condition(conds, "Available", "False", "MinimumReplicasUnavailable",
                                          "Deployment does not have minimum availability."));
    if (paused) {
      json_array_append_new(nc, condition(conds, "Progressing", "Unknown", "DeploymentPaused",
                                          "Deployment is paused"));
    } else if (nw != NULL) {
      if (updated == replicas && sum_rep == replicas &&
          json_get_int(json_object_get(nw->j, "status"), "availableReplicas", 0) == replicas &&
          nw->c.spec == replicas && !changed)
        snprintf(msg, sizeof(msg), "ReplicaSet \"%s\" has successfully progressed.", nw->o->name);
      else if (created_new)
        snprintf(msg, sizeof(msg), "Created new replica set \"%s\"", nw->o->name);
      else
        snprintf(msg, sizeof(msg), "ReplicaSet \"%s\" is progressing.", nw->o->name);
      json_array_append_new(
          nc, condition(conds, "Progressing", "True",
                        strncmp(msg, "Created", 7) == 0 ? "NewReplicaSetCreated"
                        : strstr(msg, "successfully") ? "NewReplicaSetAvailable"
                                                      : "ReplicaSetUpdated",
                        msg));
    }
    json_object_set_new(nst, "conditions", nc);
  }
  /* The Deployment carries its newest revision too. */
  {
    json_t *ann = json_path(j, "metadata.annotations");
    char rev[24];
    int meta_changed = 0;
    if (nw != NULL) {
      snprintf(rev, sizeof(rev), "%" PRId64, nw->rev);
      if (json_get_str(ann, REV_ANN) == NULL || strcmp(json_get_str(ann, REV_ANN), rev) != 0) {
        json_object_set_new(json_obj(json_obj(j, "metadata"), "annotations"), REV_ANN, json_string(rev));
        meta_changed = 1;
      }
    }
    if (meta_changed || !json_equal(st, nst)) {
      json_object_set_new(j, "status", nst);
      store_commit(s, K_DEPLOYMENT, d, j, EV_MODIFIED);
      j = NULL;
    } else {
      json_decref(nst);
    }
  }
out:
  free_owned(w, n);
  json_decref(j);
}

/* ---------------------------------------------------------------------- */
/* hooks                                                                   */

void deploy_defaults(json_t *j) {
  json_t *spec = json_obj(j, "spec"), *strat;

  if (json_object_get(spec, "replicas") == NULL)
    json_object_set_new(spec, "replicas", json_integer(1));
  if (json_object_get(spec, "revisionHistoryLimit") == NULL)
    json_object_set_new(spec, "revisionHistoryLimit", json_integer(DEFAULT_HISTORY));
  if (json_object_get(spec, "progressDeadlineSeconds") == NULL)
    json_object_set_new(spec, "progressDeadlineSeconds", json_integer(600));
  strat = json_obj(spec, "strategy");
  if (json_get_str(strat, "type") == NULL)
    json_object_set_new(strat, "type", json_string("RollingUpdate"));
  if (strcmp(json_get_str(strat, "type"), "RollingUpdate") == 0) {
    json_t *ru = json_obj(strat, "rollingUpdate");
    if (json_object_get(ru, "maxSurge") == NULL)
      json_object_set_new(ru, "maxSurge", json_string("25%"));
    if (json_object_get(ru, "maxUnavailable") == NULL)
      json_object_set_new(ru, "maxUnavailable", json_string("25%"));
  }
}

int deploy_check(json_t *j, const char **field, char *msg, size_t cap) {
  int64_t a, b, r = json_get_int(json_object_get(j, "spec"), "replicas", 1);
  const char *t = json_get_str(json_path(j, "spec.strategy"), "type");

  if (t != NULL && strcmp(t, "RollingUpdate") != 0 && strcmp(t, "Recreate") != 0) {
    *field = "spec.strategy.type";
    snprintf(msg, cap, "Unsupported value: \"%s\": supported values: \"Recreate\", \"RollingUpdate\"", t);
    return -1;
  }
  if (t != NULL && strcmp(t, "Recreate") == 0 && json_path(j, "spec.strategy.rollingUpdate") != NULL) {
    *field = "spec.strategy.rollingUpdate";
    snprintf(msg, cap, "Forbidden: may not be specified when strategy `type` is 'Recreate'");
    return -1;
  }
  if (deploy_fenceposts(json_path(j, "spec.strategy.rollingUpdate.maxSurge"),
                        json_path(j, "spec.strategy.rollingUpdate.maxUnavailable"), r, &a, &b) != 0) {
    *field = "spec.strategy.rollingUpdate";
    snprintf(msg, cap, "Invalid value: maxSurge and maxUnavailable must be non-negative integers "
             "or percentages");
    return -1;
  }
  return 0;
}

int deploy_setup(struct sim *s, struct sim_obj *o) {
  o->u.deploy = calloc(1, sizeof(*o->u.deploy));
  if (o->u.deploy == NULL)
    return -ENOMEM;
  deploy_mark_dirty(s, o);
  return 0;
}

void deploy_mark_dirty(struct sim *s, struct sim_obj *d) {
  if (d == NULL || d->u.deploy == NULL)
    return;
  d->u.deploy->dirty = 1;
  sync_arm(s);
}

void deploy_rs_changed(struct sim *s, struct sim_obj *rs) {
  json_t *j = obj_json(rs), *r;
  size_t i;

  if (j == NULL)
    return;
  json_array_foreach(json_path(j, "metadata.ownerReferences"), i, r) {
    const char *kind = json_get_str(r, "kind"), *name = json_get_str(r, "name"),
               *uid = json_get_str(r, "uid");
    struct sim_obj *d;
    if (!json_is_true(json_object_get(r, "controller")) || kind == NULL || name == NULL ||
        uid == NULL || strcmp(kind, "Deployment") != 0)
      continue;
    d = store_get(s, K_DEPLOYMENT, rs->ns, name);
    if (d != NULL && strcmp(d->uid, uid) == 0)
      deploy_mark_dirty(s, d);
  }
  json_decref(j);
}

void deploy_free_state(struct sim_obj *d) {
  free(d->u.deploy);
  d->u.deploy = NULL;
}

void deploy_deleted(struct sim *s, struct sim_obj *d, int orphan) {
  struct sim_obj *o, *nx;

  deploy_free_state(d);
  for (o = store_first(s, K_RS, d->ns); o != NULL && strcmp(o->ns, d->ns) == 0; o = nx) {
    json_t *j = obj_json(o), *refs, *r;
    const char *uid;
    size_t i;
    nx = store_next(s, o);
    uid = j ? controller_uid(j, "Deployment") : NULL;
    if (uid == NULL || strcmp(uid, d->uid) != 0) {
      json_decref(j);
      continue;
    }
    if (!orphan) {
      rs_deleted(s, o, 0);
      store_commit(s, K_RS, o, j, EV_DELETED);
      continue;
    }
    refs = json_path(j, "metadata.ownerReferences");
    json_array_foreach(refs, i, r) {
      if (json_get_str(r, "uid") && strcmp(json_get_str(r, "uid"), d->uid) == 0) {
        json_array_remove(refs, i);
        break;
      }
    }
    if (json_array_size(refs) == 0)
      json_object_del(json_object_get(j, "metadata"), "ownerReferences");
    store_commit(s, K_RS, o, j, EV_MODIFIED);
  }
}

int deploy_sync_dirty(struct sim *s) {
  struct sim_obj *o, *nx;
  int any = 0;

  for (o = store_first(s, K_DEPLOYMENT, NULL); o != NULL; o = nx) {
    nx = store_next(s, o);
    if (o->u.deploy != NULL && o->u.deploy->dirty) {
      deploy_sync(s, o);
      any = 1;
    }
  }
  return any;
}
