/* pdb.c - the disruption controller: PodDisruptionBudget status, and the
 * budget check of the eviction subresource that reads it.
 *
 * As pkg/controller/disruption does, a loop turn after a pod, ReplicaSet or
 * budget of a namespace changed (pdb_mark_dirty(), coalesced with the other
 * controllers' sync), every budget there gets
 *
 *   expectedPods    minAvailable as a number: the matching pods (all of
 *                   them, terminating and finished ones too); otherwise the
 *                   sum of the scale of the pods' controllers (ReplicaSets'
 *                   spec.replicas; pods without a controller are left out)
 *   desiredHealthy  minAvailable, or expectedPods - maxUnavailable
 *                   (percentages of expectedPods, rounded up; >= 0)
 *   currentHealthy  matching pods that are Ready, not terminating and not
 *                   in disruptedPods (an eviction's pod, for 2 minutes)
 *   disruptionsAllowed  currentHealthy - desiredHealthy, 0 when that or
 *                   expectedPods is not positive
 *   observedGeneration, and the condition DisruptionAllowed (True,
 *   SufficientPods / False, InsufficientPods; False, SyncFailed when a
 *   pod's controller cannot be found, with disruptionsAllowed 0).
 *
 * The status is written only when it changes, so a watch sees one MODIFIED
 * per real change. The eviction subresource brings the one budget it
 * consults up to date first (the controller is never behind here), then
 * decides as pkg/registry/core/pod/storage/eviction.go does and, for an
 * eviction it lets through, records the pod in disruptedPods with one
 * disruption fewer allowed, as the API server does.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/labels.h"
#include "fr/log.h"
#include "fr/util.h"
#include "sim.h"

/* How long an evicted pod is expected to go away in (the controller's
 * DeletionTimeout): until then it counts as disrupted, not healthy. */
#define PDB_DELETION_TIMEOUT_S 120

void pdb_mark_dirty(struct sim *s, const char *ns) {
  struct sim_obj *nso;

  if (s->counts[K_PDB] == 0 || s->stopping)
    return;
  nso = store_get(s, K_NAMESPACE, "", ns);
  if (nso == NULL || nso->u.nsstate == NULL)
    return;
  nso->u.nsstate->pdb_dirty = 1;
  sync_arm(s);
}

/* The budget's pod selector, as the controller reads it: an empty one
 * selects every pod of the namespace (policy/v1). 0, or -EINVAL. */
static int pdb_selector(json_t *pdb, struct fr_selector **out) {
  json_t *sel = json_path(pdb, "spec.selector");
  char *text;
  int rc;

  *out = NULL;
  if (!json_is_object(sel))
    return -EINVAL;
  text = label_selector_text(sel);
  if (text == NULL)
    return -ENOMEM;
  rc = fr_selector_parse_labels(text, out, NULL, 0);
  free(text);
  return rc;
}

/* An intOrString budget field of <pdb>: 0 (set in <v>) or -ENOENT; <pct>
 * says whether it was a percentage (then of <expected>, rounded up). */
static int budget_value(json_t *pdb, const char *field, int64_t expected, int64_t *v, int *pct) {
  json_t *f = json_object_get(json_object_get(pdb, "spec"), field);
  const char *str = json_string_value(f);
  int64_t p;
  char num[24];
  size_t n;

  *pct = 0;
  if (json_is_integer(f)) {
    *v = json_integer_value(f);
    return 0;
  }
  if (str == NULL || (n = strlen(str)) < 2 || n > sizeof(num) || str[n - 1] != '%')
    return -ENOENT;
  snprintf(num, sizeof(num), "%.*s", (int)(n - 1), str);
  if (fr_parse_int64(num, 0, 100000, &p) != 0)
    return -ENOENT;
  *pct = 1;
  *v = (p * expected + 99) / 100;
  return 0;
}

static int is_percent(json_t *pdb, const char *field) {
  const char *str = json_string_value(json_object_get(json_object_get(pdb, "spec"), field));

  return str != NULL && *str != '\0' && str[strlen(str) - 1] == '%';
}

/* 1 if pod <q> names a controller in its ownerReferences. */
static int has_controller(struct sim_obj *q) {
  json_t *j = obj_json(q), *r;
  int found = 0;
  size_t i;

  json_array_foreach(json_path(j, "metadata.ownerReferences"), i, r) {
    if (json_is_true(json_object_get(r, "controller")))
      found = 1;
  }
  json_decref(j);
  return found;
}

struct pdb_count {
  int64_t pods, healthy, expected_scale;
  json_t *disrupted;            /* new disruptedPods map */
  char failed[300];             /* why the expected scale could not be found ("" = it could) */
};

/* Sets condition DisruptionAllowed on <st> (edited in place), keeping its
 * lastTransitionTime while its status stays (apimeta.SetStatusCondition). */
static void set_allowed_condition(json_t *st, json_t *old_conds, int64_t gen, const char *status,
                                  const char *reason, const char *message) {
  json_t *c, *conds = json_array(), *prev = NULL;
  const char *ts = NULL;
  char now[21];
  size_t i;

  json_array_foreach(old_conds, i, c) {
    const char *t = json_get_str(c, "type");
    if (t != NULL && strcmp(t, "DisruptionAllowed") == 0)
      prev = c;
    else
      json_array_append(conds, c);
  }
  if (prev != NULL && json_get_str(prev, "status") != NULL && strcmp(json_get_str(prev, "status"), status) == 0)
    ts = json_get_str(prev, "lastTransitionTime");
  if (ts == NULL) {
    now_rfc3339(now);
    ts = now;
  }
  json_array_append_new(conds, json_pack("{s:s,s:s,s:I,s:s,s:s,s:s}", "type", "DisruptionAllowed", "status", status,
                                         "observedGeneration", (json_int_t)gen, "lastTransitionTime", ts,
                                         "reason", reason, "message", message));
  json_object_set_new(st, "conditions", conds);
}

/* Counts the pods budget <pdb> (its JSON) selects in <ns>. */
static void count_pods(struct sim *s, const char *ns, json_t *pdb, struct fr_selector *sel,
                       int want_scale, struct pdb_count *c) {
  json_t *old = json_path(pdb, "status.disruptedPods");
  int64_t now = fr_wall_ms() / 1000;
  struct sim_obj *q, **seen = NULL;
  size_t nseen = 0, cap = 0, i;

  memset(c, 0, sizeof(*c));
  c->disrupted = json_object();
  for (q = store_first(s, K_POD, ns); q != NULL && strcmp(q->ns, ns) == 0; q = store_next(s, q)) {
    int disrupted = 0;
    if (!fr_selector_matches(sel, objver_label, q->cur))
      continue;
    c->pods++;
    if (!q->cur->deleting) {
      const char *at = json_string_value(json_object_get(old, q->name));
      int64_t t;
      if (at != NULL && fr_time_parse_rfc3339(at, &t) == 0 && t + PDB_DELETION_TIMEOUT_S > now) {
        json_object_set_new(c->disrupted, q->name, json_string(at));
        disrupted = 1;
      }
      if (!disrupted && q->cur->ready)
        c->healthy++;
    }
    if (!want_scale || c->failed[0] != '\0')
      continue;
    /* The sum of the scale of the pods' controllers, each counted once. */
    if (q->u.pod != NULL && q->u.pod->owner != NULL) {
      struct sim_obj *rs = q->u.pod->owner;
      json_t *rj;
      for (i = 0; i < nseen && seen[i] != rs; i++)
        ;
      if (i < nseen)
        continue;
      if (nseen == cap) {
        size_t ncap = cap ? cap * 2 : 8;
        struct sim_obj **ns2 = realloc(seen, ncap * sizeof(*ns2));
        if (ns2 == NULL) {
          snprintf(c->failed, sizeof(c->failed), "out of memory");
          continue;
        }
        seen = ns2;
        cap = ncap;
      }
      seen[nseen++] = rs;
      rj = obj_json(rs);
      c->expected_scale += json_get_int(json_object_get(rj, "spec"), "replicas", 1);
      json_decref(rj);
    } else if ((q->u.pod != NULL && q->u.pod->owner_uid[0] != '\0') || has_controller(q)) {
      /* A controller kubesim does not run (or a ReplicaSet since gone):
       * the controller's finders come back empty. */
      snprintf(c->failed, sizeof(c->failed), "found no controllers for pod \"%s\"", q->name);
    }
    /* else: an unmanaged pod, left out of the expected count */
  }
  free(seen);
}

/* Works out budget <b>'s status now and commits it when it changed.
 * Returns the object (its version may be new), NULL when out of memory. */
static struct sim_obj *pdb_sync(struct sim *s, struct sim_obj *b) {
  json_t *j = obj_json(b), *st, *old_st;
  struct fr_selector *sel = NULL;
  struct pdb_count c;
  int64_t gen, expected = 0, desired = 0, allowed, v;
  int pct, rc, want_scale;

  if (j == NULL)
    return NULL;
  gen = json_get_int(json_object_get(j, "metadata"), "generation", 1);
  old_st = json_object_get(j, "status");
  want_scale = json_path(j, "spec.maxUnavailable") != NULL || is_percent(j, "minAvailable");
  rc = pdb_selector(j, &sel);
  memset(&c, 0, sizeof(c));
  if (rc == 0) {
    count_pods(s, b->ns, j, sel, want_scale, &c);
  } else {
    c.disrupted = json_object();
    snprintf(c.failed, sizeof(c.failed), "invalid label selector");
  }
  fr_selector_free(sel);
  st = json_object();
  if (c.failed[0] != '\0') {
    /* failSafe(): no disruptions until the controller can count again;
     * the other figures stay as they were. */
    json_object_update(st, old_st);
    json_object_set_new(st, "disruptionsAllowed", json_integer(0));
    set_allowed_condition(st, json_object_get(old_st, "conditions"), json_get_int(old_st, "observedGeneration", 0),
                          "False", "SyncFailed", c.failed);
  } else {
    if (json_path(j, "spec.maxUnavailable") != NULL) {
      expected = c.expected_scale;
      if (budget_value(j, "maxUnavailable", expected, &v, &pct) == 0)
        desired = expected - v > 0 ? expected - v : 0;
    } else if (json_path(j, "spec.minAvailable") != NULL && budget_value(j, "minAvailable", 0, &v, &pct) == 0) {
      if (pct) {
        expected = c.expected_scale;
        budget_value(j, "minAvailable", expected, &desired, &pct);
      } else {
        expected = c.pods;
        desired = v;
      }
    }
    allowed = c.healthy - desired;
    if (expected <= 0 || allowed <= 0)
      allowed = 0;
    /* PodDisruptionBudgetStatus in its wire order. */
    json_object_set_new(st, "observedGeneration", json_integer(gen));
    if (json_object_size(c.disrupted) > 0)
      json_object_set(st, "disruptedPods", c.disrupted);
    json_object_set_new(st, "disruptionsAllowed", json_integer(allowed));
    json_object_set_new(st, "currentHealthy", json_integer(c.healthy));
    json_object_set_new(st, "desiredHealthy", json_integer(desired));
    json_object_set_new(st, "expectedPods", json_integer(expected));
    set_allowed_condition(st, json_object_get(old_st, "conditions"), gen, allowed > 0 ? "True" : "False",
                          allowed > 0 ? "SufficientPods" : "InsufficientPods", "");
  }
  json_decref(c.disrupted);
  if (json_equal(st, old_st)) {
    json_decref(st);
    json_decref(j);
    return b;
  }
  json_object_set_new(j, "status", st);
  return store_commit(s, K_PDB, b, j, EV_MODIFIED);
}

void pdb_sync_ns(struct sim *s, struct sim_obj *nso) {
  struct sim_obj *b, *nx;

  nso->u.nsstate->pdb_dirty = 0;
  for (b = store_first(s, K_PDB, nso->name); b != NULL && strcmp(b->ns, nso->name) == 0; b = nx) {
    nx = store_next(s, b);
    if (pdb_sync(s, b) == NULL)
      FR_WARN("disruption", "out of memory writing the status of budget %s/%s", nso->name, b->name);
  }
}

void pdb_init_status(json_t *j) {
  json_object_set_new(json_obj(j, "metadata"), "generation", json_integer(1));
  json_object_set_new(j, "status", json_pack("{s:i,s:i,s:i,s:i}", "disruptionsAllowed", 0, "currentHealthy", 0,
                                             "desiredHealthy", 0, "expectedPods", 0));
}

static const char *pod_label(const void *obj, const char *key) {
  return json_string_value(json_object_get((json_t *)obj, key));
}

int pdb_eviction(struct sim *s, struct sim_obj *o, json_t *pod, int dry, struct sim_err *e) {
  struct sim_obj *b, *found = NULL;
  json_t *j, *st;
  int64_t allowed, healthy, desired;
  const char *policy;
  char ts[21];

  memset(e, 0, sizeof(*e));
  for (b = store_first(s, K_PDB, o->ns); b != NULL && strcmp(b->ns, o->ns) == 0; b = store_next(s, b)) {
    json_t *bj = obj_json(b);
    struct fr_selector *sel = NULL;
    /* An empty or unparsable selector matches nothing here (eviction.go),
     * unlike in the controller. */
    int match = bj != NULL && pdb_selector(bj, &sel) == 0 && !fr_selector_empty(sel) &&
                fr_selector_matches(sel, pod_label, json_path(pod, "metadata.labels"));
    fr_selector_free(sel);
    json_decref(bj);
    if (!match)
      continue;
    if (found != NULL)
      return sim_err_set(e, 500, "InternalError", "This pod has more than one PodDisruptionBudget, which the "
                         "eviction subresource does not support.");
    found = b;
  }
  if (found == NULL)
    return 0;
  if ((b = pdb_sync(s, found)) == NULL || (j = obj_json(b)) == NULL)
    return sim_err_set(e, 503, "ServiceUnavailable", "out of memory");
  st = json_obj(j, "status");
  allowed = json_get_int(st, "disruptionsAllowed", 0);
  healthy = json_get_int(st, "currentHealthy", 0);
  desired = json_get_int(st, "desiredHealthy", 0);
  policy = json_string_value(json_path(j, "spec.unhealthyPodEvictionPolicy"));
  if (!o->cur->ready) {
    /* An unready pod costs no healthy one: AlwaysAllow lets it go; the
     * default IfHealthyBudget when the budget is met. */
    if ((policy != NULL && strcmp(policy, "AlwaysAllow") == 0) || (healthy >= desired && desired > 0)) {
      json_decref(j);
      return 0;
    }
  }
  if (allowed <= 0) {
    char msg[600];
    snprintf(msg, sizeof(msg), "The disruption budget %s needs %" PRId64 " healthy pods and has %" PRId64
             " currently", b->name, desired, healthy);
    e->causes = json_pack("[{s:s,s:s}]", "reason", "DisruptionBudget", "message", msg);
    json_decref(j);
    return sim_err_set(e, 429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.");
  }
  if (dry) {
    json_decref(j);
    return 0;
  }
  /* checkAndDecrement(): one disruption fewer, and the pod noted as about
   * to go so the controller does not count it healthy meanwhile. */
  json_object_set_new(st, "disruptionsAllowed", json_integer(allowed - 1));
  if (allowed - 1 == 0)
    set_allowed_condition(st, json_object_get(st, "conditions"), json_get_int(st, "observedGeneration", 0), "False",
                          "InsufficientPods", "");
  now_rfc3339(ts);
  json_object_set_new(json_obj(st, "disruptedPods"), o->name, json_string(ts));
  if (store_commit(s, K_PDB, b, j, EV_MODIFIED) == NULL)
    return sim_err_set(e, 503, "ServiceUnavailable", "out of memory");
  return 0;
}
