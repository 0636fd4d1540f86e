/* rs.c - the ReplicaSet controller and quota status, run a loop turn after
 * anything they depend on changed (coalesced, like a controller work queue).
 *
 * Ownership follows Kubernetes: a pod is owned through a controller
 * ownerReference; a pod whose labels stop matching its owner's selector is
 * released (orphaned) and a replacement is created; an orphan that matches a
 * selector is adopted; deleting a ReplicaSet deletes its pods (background
 * propagation) or orphans them (propagationPolicy Orphan).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/buf.h"
#include "fr/log.h"
#include "fr/quantity.h"
#include "fr/util.h"
#include "sim.h"

/* Creates per sync per ReplicaSet, like the controller's burst limit. */
#define RS_BURST 500
#define RS_RETRY_MS 1000

static void sync_arm_in(struct sim *s, uint64_t ms);

char *label_selector_text(json_t *sel) {
  struct fr_buf b;
  const char *k;
  json_t *v, *e;
  size_t i, x;

  fr_buf_init(&b);
  json_object_foreach(json_object_get(sel, "matchLabels"), k, v) {
    fr_buf_printf(&b, "%s%s=%s", b.len ? "," : "", k, json_is_string(v) ? json_string_value(v) : "");
  }
  json_array_foreach(json_object_get(sel, "matchExpressions"), i, e) {
    const char *key = json_get_str(e, "key"), *op = json_get_str(e, "operator");
    json_t *vals = json_object_get(e, "values"), *val;
    if (key == NULL || op == NULL)
      continue;
    if (b.len)
      fr_buf_putc(&b, ',');
    if (strcmp(op, "Exists") == 0) {
      fr_buf_puts(&b, key);
    } else if (strcmp(op, "DoesNotExist") == 0) {
      fr_buf_printf(&b, "!%s", key);
    } else {
      fr_buf_printf(&b, "%s %s (", key, strcmp(op, "NotIn") == 0 ? "notin" : "in");
      json_array_foreach(vals, x, val) fr_buf_printf(&b, "%s%s", x ? "," : "", json_string_value(val));
      fr_buf_putc(&b, ')');
    }
  }
  return fr_buf_detach(&b, NULL);
}

static int rs_invalid(struct sim_err *e, const char *name, const char *msg) {
  sim_err_set(e, 422, "Invalid", "ReplicaSet.apps \"%s\" is invalid: %s", name ? name : "", msg);
  return -1;
}

static const char *tmpl_label(const void *obj, const char *key) {
  return json_string_value(json_object_get((json_t *)obj, key));
}

int rs_validate(json_t *j, struct sim_err *e) {
  const char *name = json_string_value(json_path(j, "metadata.name"));
  json_t *sel = json_path(j, "spec.selector");
  struct fr_selector *fs = NULL;
  char *text;
  char err[256];
  int rc;

  memset(e, 0, sizeof(*e));
  if (json_get_int(json_object_get(j, "spec"), "replicas", 1) < 0)
    return rs_invalid(e, name, "spec.replicas: Invalid value: must be greater than or equal to 0");
  if (!json_is_object(sel))
    return rs_invalid(e, name, "spec.selector: Required value");
  text = label_selector_text(sel);
  if (text == NULL || *text == '\0') {
    free(text);
    return rs_invalid(e, name, "spec.selector: Invalid value: empty selector is invalid for deployment");
  }
  rc = fr_selector_parse_labels(text, &fs, err, sizeof(err));
  free(text);
  if (rc != 0)
    return rs_invalid(e, name, "spec.selector: Invalid value");
  if (!fr_selector_matches(fs, tmpl_label, json_path(j, "spec.template.metadata.labels"))) {
    fr_selector_free(fs);
    return rs_invalid(e, name, "spec.template.metadata.labels: Invalid value: `selector` does not match template `labels`");
  }
  fr_selector_free(fs);
  if (!json_is_array(json_path(j, "spec.template.spec.containers")) ||
      json_array_size(json_path(j, "spec.template.spec.containers")) == 0)
    return rs_invalid(e, name, "spec.template.spec.containers: Required value");
  return 0;
}

static void link_pod(struct sim_obj *rs, struct sim_pod *p) {
  struct sim_rs *r = rs->u.rs;

  p->owner = rs;
  p->own_prev = NULL;
  p->own_next = r->pods;
  if (r->pods)
    r->pods->own_prev = p;
  r->pods = p;
  r->npods++;
}

static void unlink_pod(struct sim_pod *p) {
  struct sim_rs *r;

  if (p->owner == NULL)
    return;
  r = p->owner->u.rs;
  if (p->own_prev)
    p->own_prev->own_next = p->own_next;
  else
    r->pods = p->own_next;
  if (p->own_next)
    p->own_next->own_prev = p->own_prev;
  r->npods--;
  p->owner = NULL;
  p->own_prev = p->own_next = NULL;
}

void rs_mark_dirty(struct sim *s, struct sim_obj *rs) {
  if (rs->u.rs == NULL)
    return;
  rs->u.rs->dirty = 1;
  sync_arm(s);
}

static struct sim_obj *rs_by_uid(struct sim *s, const char *ns, const char *uid) {
  struct sim_obj *o;

  for (o = store_first(s, K_RS, ns); o != NULL && strcmp(o->ns, ns) == 0; o = store_next(s, o))
    if (strcmp(o->uid, uid) == 0)
      return o;
  return NULL;
}

static const char *controller_ref_uid(json_t *j) {
  size_t i;
  json_t *r;

  json_array_foreach(json_path(j, "metadata.ownerReferences"), i, r) {
    if (json_is_true(json_object_get(r, "controller")))
      return json_get_str(r, "uid");
  }
  return NULL;
}

static json_t *owner_ref(struct sim_obj *rs) {
  return json_pack("{s:s,s:s,s:s,s:s,s:b,s:b}", "apiVersion", "apps/v1", "kind", "ReplicaSet",
                   "name", rs->name, "uid", rs->uid, "controller", 1, "blockOwnerDeletion", 1);
}

/* Removes <uid>'s ownerReference from pod <o> and commits. */
static void drop_owner_ref(struct sim *s, struct sim_obj *o, const char *uid) {
  json_t *j = obj_json(o), *refs, *r;
  size_t i;

  if (j == NULL)
    return;
  refs = json_path(j, "metadata.ownerReferences");
  json_array_foreach(refs, i, r) {
    if (json_get_str(r, "uid") && strcmp(json_get_str(r, "uid"), uid) == 0) {
      json_array_remove(refs, i);
      break;
    }
  }
  if (json_array_size(refs) == 0)
    json_object_del(json_object_get(j, "metadata"), "ownerReferences");
  store_commit(s, K_POD, o, j, EV_MODIFIED);
}

void rs_pod_event(struct sim *s, struct sim_obj *o) {
  struct sim_pod *p = o->u.pod;
  json_t *j;
  const char *uid;
  struct sim_obj *want = NULL;

  if (p == NULL)
    return;
  j = obj_json(o);
  if (j == NULL)
    return;
  uid = controller_ref_uid(j);
  if (uid != NULL) {
    want = rs_by_uid(s, o->ns, uid);
  } else if (p->stage != PS_TERMINATING && p->stage != PS_TERMINAL) {
    /* Adopt an orphan whose labels match a ReplicaSet's selector. */
    struct sim_obj *rs;
    for (rs = store_first(s, K_RS, o->ns); rs != NULL && strcmp(rs->ns, o->ns) == 0;
         rs = store_next(s, rs)) {
      if (rs->u.rs != NULL && fr_selector_matches(rs->u.rs->selector, objver_label, o->cur)) {
        json_t *refs = json_path(j, "metadata.ownerReferences");
        if (!json_is_array(refs)) {
          refs = json_array();
          json_object_set_new(json_obj(j, "metadata"), "ownerReferences", refs);
        }
        json_array_append_new(refs, owner_ref(rs));
        json_incref(j);
        if (store_commit(s, K_POD, o, j, EV_MODIFIED) != NULL)
          want = rs;
        break;
      }
    }
  }
  json_decref(j);
  if (p->owner != want) {
    if (p->owner != NULL)
      rs_mark_dirty(s, p->owner);
    unlink_pod(p);
    if (want != NULL && want->u.rs != NULL)
      link_pod(want, p);
  }
  if (p->owner != NULL)
    rs_mark_dirty(s, p->owner);
}

void rs_pod_gone(struct sim *s, struct sim_pod *p) {
  if (p->owner != NULL) {
    rs_mark_dirty(s, p->owner);
    unlink_pod(p);
  }
}

static void adopt_existing(struct sim *s, struct sim_obj *rs) {
  struct sim_obj *o, *nx;

  for (o = store_first(s, K_POD, rs->ns); o != NULL && strcmp(o->ns, rs->ns) == 0; o = nx) {
    nx = store_next(s, o);
    if (o->u.pod != NULL && o->u.pod->owner == NULL &&
        fr_selector_matches(rs->u.rs->selector, objver_label, o->cur))
      rs_pod_event(s, o);
  }
}

int rs_setup(struct sim *s, struct sim_obj *o) {
  struct sim_rs *r = calloc(1, sizeof(*r));
  json_t *j = obj_json(o);
  char *text = j ? label_selector_text(json_path(j, "spec.selector")) : NULL;

  json_decref(j);
  if (r == NULL || text == NULL || fr_selector_parse_labels(text, &r->selector, NULL, 0) != 0) {
    free(r);
    free(text);
    return -ENOMEM;
  }
  free(text);
  o->u.rs = r;
  adopt_existing(s, o);
  rs_mark_dirty(s, o);
  return 0;
}

void rs_deleted(struct sim *s, struct sim_obj *rs, int orphan) {
  struct sim_rs *r = rs->u.rs;

  if (r == NULL)
    return;
  while (r->pods != NULL) {
    struct sim_pod *p = r->pods;
    struct sim_obj *po = p->obj;
    unlink_pod(p);
    if (po == NULL)
      continue;
    if (orphan)
      drop_owner_ref(s, po, rs->uid);
    else
      pod_delete(s, po, -1);
  }
  fr_selector_free(r->selector);
  free(r);
  rs->u.rs = NULL;
}

static int pod_rank(const struct sim_pod *p) {
  /* Deletion preference of the ReplicaSet controller: unscheduled, then
   * pending, then not ready, then ready. */
  if (p->node == NULL)
    return 0;
  if (p->stage == PS_BOUND)
    return 1;
  return 2;
}

static void set_failure(json_t *status, const char *msg) {
  json_t *conds = json_array();
  char ts[21];

  now_rfc3339(ts);
  json_array_append_new(conds, json_pack("{s:s,s:s,s:s,s:s,s:s}", "type", "ReplicaFailure",
                                         "status", "True", "reason", "FailedCreate", "message", msg,
                                         "lastTransitionTime", ts));
  json_object_set_new(status, "conditions", conds);
}

static void rs_sync(struct sim *s, struct sim_obj *rs) {
  struct sim_rs *r = rs->u.rs;
  struct sim_pod *p, *nx;
  json_t *j = obj_json(rs), *st, *nst;
  int64_t want, active = 0, ready = 0, created = 0;
  const char *fail_msg = NULL;
  char fail_buf[512];

  r->dirty = 0;
  if (j == NULL)
    return;
  /* Release pods whose labels no longer match (a claimed warm pod). */
  for (p = r->pods; p != NULL; p = nx) {
    nx = p->own_next;
    if (p->obj != NULL && !fr_selector_matches(r->selector, objver_label, p->obj->cur)) {
      unlink_pod(p);
      drop_owner_ref(s, p->obj, rs->uid);
    }
  }
  for (p = r->pods; p != NULL; p = p->own_next) {
    if (p->obj == NULL || p->stage == PS_TERMINAL || p->stage == PS_TERMINATING)
      continue;
    active++;
  }
  want = json_get_int(json_object_get(j, "spec"), "replicas", 1);
  if (active < want && fr_wall_ms() >= r->next_create_ms) {
    json_t *tmpl = json_path(j, "spec.template");
    int64_t n = want - active;
    if (n > RS_BURST)
      n = RS_BURST;
    while (n-- > 0) {
      json_t *pod = json_object(), *meta = json_object();
      struct sim_err e;
      struct sim_obj *po;
      char gen[300];
      json_t *refs = json_array();

      snprintf(gen, sizeof(gen), "%s-", rs->name);
      json_object_set_new(meta, "generateName", json_string(gen));
      if (json_path(tmpl, "metadata.labels"))
        json_object_set(meta, "labels", json_path(tmpl, "metadata.labels"));
      if (json_path(tmpl, "metadata.annotations"))
        json_object_set(meta, "annotations", json_path(tmpl, "metadata.annotations"));
      json_array_append_new(refs, owner_ref(rs));
      json_object_set_new(meta, "ownerReferences", refs);
      json_object_set_new(pod, "metadata", meta);
      json_object_set_new(pod, "spec", json_deep_copy(json_object_get(tmpl, "spec")));
      /* obj_prepare() borrows <pod>; pod_create() takes it, even on failure. */
      if (obj_prepare(s, K_POD, rs->ns, pod, &e) == 0) {
        if (pod_create(s, rs->ns, pod, &po, &e) == 0) {
          created++;
          event_emit(s, rs, "Normal", "SuccessfulCreate", "replicaset-controller", NULL,
                     "Created pod: %s", po->name);
          continue;
        }
      } else {
        json_decref(pod);
        if (e.code == 409) { /* generated name collided: the next sync retries */
          json_decref(e.causes);
          rs_mark_dirty(s, rs);
          continue;
        }
      }
      snprintf(fail_buf, sizeof(fail_buf), "%s", e.msg);
      fail_msg = fail_buf;
      event_emit(s, rs, "Warning", "FailedCreate", "replicaset-controller", NULL,
                 "Error creating: %s", e.msg);
      json_decref(e.causes);
      /* back off like the controller's rate-limited queue */
      r->next_create_ms = fr_wall_ms() + RS_RETRY_MS;
      sync_arm_in(s, RS_RETRY_MS);
      break;
    }
    if (active + created < want && fail_msg == NULL)
      rs_mark_dirty(s, rs); /* more than one burst to go */
  } else if (active < want) {
    sync_arm_in(s, (uint64_t)(r->next_create_ms - fr_wall_ms()) + 1);
  } else if (active > want) {
    struct sim_pod **v = malloc((size_t)active * sizeof(*v));
    int64_t n = 0, i, k, extra = active - want;
    if (v != NULL) {
      for (p = r->pods; p != NULL; p = p->own_next)
        if (p->obj != NULL && p->stage != PS_TERMINAL && p->stage != PS_TERMINATING)
          v[n++] = p;
      /* Lowest rank first; the list is newest-first so ties favour the
       * newest pod, as the controller does. */
      for (k = 0; k < extra && k < n; k++) {
        int64_t best = -1;
        for (i = 0; i < n; i++)
          if (v[i] != NULL && (best < 0 || pod_rank(v[i]) < pod_rank(v[best])))
            best = i;
        if (best < 0)
          break;
        p = v[best];
        v[best] = NULL;
        event_emit(s, rs, "Normal", "SuccessfulDelete", "replicaset-controller", NULL,
                   "Deleted pod: %s", p->obj->name);
        pod_delete(s, p->obj, -1);
      }
      free(v);
    }
  }
  /* Status. */
  active = ready = 0;
  for (p = r->pods; p != NULL; p = p->own_next) {
    if (p->obj == NULL || p->stage == PS_TERMINAL || p->stage == PS_TERMINATING)
      continue;
    active++;
    if (p->stage == PS_RUNNING)
      ready++;
  }
  st = json_object_get(j, "status");
  nst = json_pack("{s:I,s:I,s:I,s:I,s:I}", "replicas", (json_int_t)active, "fullyLabeledReplicas",
                  (json_int_t)active, "readyReplicas", (json_int_t)ready, "availableReplicas",
                  (json_int_t)ready, "observedGeneration",
                  (json_int_t)json_get_int(json_object_get(j, "metadata"), "generation", 1));
  if (fail_msg != NULL)
    set_failure(nst, fail_msg);
  else if (json_object_get(st, "conditions") != NULL && active < want && fr_wall_ms() < r->next_create_ms)
    json_object_set(nst, "conditions", json_object_get(st, "conditions"));
  if (!json_equal(st, nst)) {
    json_object_set_new(j, "status", nst);
    if (store_commit(s, K_RS, rs, j, EV_MODIFIED) != NULL)
      deploy_rs_changed(s, rs);
    return;
  }
  json_decref(nst);
  json_decref(j);
}

static void quota_sync(struct sim *s, struct sim_obj *nso) {
  struct sim_ns *st = nso->u.nsstate;
  struct sim_obj *q;

  st->quota_dirty = 0;
  for (q = store_first(s, K_QUOTA, nso->name); q != NULL && strcmp(q->ns, nso->name) == 0;
       q = store_next(s, q)) {
    json_t *j = obj_json(q), *hard = json_path(j, "spec.hard"), *used = json_object(), *v;
    const char *key;

    json_object_foreach(hard, key, v) {
      char buf[32];
      int64_t val;
      if (strcmp(key, "pods") == 0 || strcmp(key, "count/pods") == 0) {
        snprintf(buf, sizeof(buf), "%" PRId64, st->pods);
      } else if (strcmp(key, "requests.cpu") == 0 || strcmp(key, "cpu") == 0 ||
                 strcmp(key, "limits.cpu") == 0) {
        val = strcmp(key, "limits.cpu") == 0 ? st->lim_cpu_m : st->cpu_m;
        fr_quantity_format_milli(val, buf, sizeof(buf));
      } else if (strcmp(key, "requests.memory") == 0 || strcmp(key, "memory") == 0 ||
                 strcmp(key, "limits.memory") == 0) {
        val = strcmp(key, "limits.memory") == 0 ? st->lim_mem_m : st->mem_m;
        fr_quantity_format_bytes(val, buf, sizeof(buf));
      } else {
        snprintf(buf, sizeof(buf), "0");
      }
      json_object_set_new(used, key, json_string(buf));
    }
    if (!json_equal(used, json_path(j, "status.used"))) {
      json_object_set_new(json_obj(j, "status"), "used", used);
      json_object_set(json_obj(j, "status"), "hard", hard);
      store_commit(s, K_QUOTA, q, j, EV_MODIFIED);
    } else {
      json_decref(used);
      json_decref(j);
    }
  }
}

static void on_sync(uv_timer_t *t) {
  struct sim *s = t->data;
  struct sim_obj *o, *nx;
  int rounds;

  s->sync_armed = 0;
  /* A sync can dirty other objects (a created pod dirties its owner); a few
   * rounds settle it, anything left runs next turn. */
  for (rounds = 0; rounds < 4; rounds++) {
    int any = 0;
    for (o = store_first(s, K_RS, NULL); o != NULL; o = nx) {
      nx = store_next(s, o);
      if (o->u.rs != NULL && o->u.rs->dirty) {
        rs_sync(s, o);
        any = 1;
      }
    }
    for (o = store_first(s, K_NAMESPACE, NULL); o != NULL; o = store_next(s, o)) {
      if (o->u.nsstate != NULL && o->u.nsstate->quota_dirty) {
        quota_sync(s, o);
        any = 1;
      }
    }
    if (deploy_sync_dirty(s))
      any = 1;
    /* Budgets last: they count what the ReplicaSets just did. Their
     * status commits dirty nothing. */
    for (o = store_first(s, K_NAMESPACE, NULL); o != NULL; o = store_next(s, o)) {
      if (o->u.nsstate != NULL && o->u.nsstate->pdb_dirty) {
        pdb_sync_ns(s, o);
        any = 1;
      }
    }
    if (!any)
      break;
  }
}

static void sync_arm_in(struct sim *s, uint64_t ms) {
  uint64_t due = uv_now(s->loop) + ms;

  if (s->stopping)
    return;
  if (s->sync_armed && uv_timer_get_due_in(&s->sync_timer) + uv_now(s->loop) <= due)
    return;
  s->sync_armed = 1;
  uv_timer_start(&s->sync_timer, on_sync, ms, 0);
}

void sync_arm(struct sim *s) {
  sync_arm_in(s, 0);
}

void sync_init(struct sim *s) {
  uv_timer_init(s->loop, &s->sync_timer);
  s->sync_timer.data = s;
}
