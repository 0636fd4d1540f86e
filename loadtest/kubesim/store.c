/* store.c - versioned object store, resourceVersion and watch history. */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/log.h"
#include "fr/quantity.h"
#include "fr/util.h"
#include "sim.h"

static int obj_cmp(const struct sim_obj *a, const struct sim_obj *b) {
  int c = strcmp(a->ns, b->ns);

  return c != 0 ? c : strcmp(a->name, b->name);
}

RB_GENERATE_STATIC(obj_tree, sim_obj, link, obj_cmp)

static const char *const pod_fields[] = {
    "metadata.name",      "metadata.namespace",      "spec.nodeName",
    "status.phase",       "status.podIP",            "spec.restartPolicy",
    "spec.schedulerName", "spec.serviceAccountName", "status.nominatedNodeName",
    NULL};
static const char *const meta_fields[] = {"metadata.name", "metadata.namespace", NULL};
/* The event fields the API server's field selectors accept that kubectl
 * describe and kubectl events use, in the slots after name and namespace. */
static const char *const event_fields[] = {
    "metadata.name",           "metadata.namespace", "involvedObject.kind",
    "involvedObject.name",     "involvedObject.uid", "involvedObject.namespace",
    "reason",                  "type",               "source",
    "involvedObject.apiVersion", NULL};
_Static_assert(FR_ARRAY_SIZE(event_fields) - 1 <= F_COUNT, "an event field per objver slot");

const char *const *kind_field_names(enum sim_kind k) {
  return k == K_POD ? pod_fields : k == K_EVENT ? event_fields : meta_fields;
}

void store_init(struct sim *s) {
  int k;

  for (k = 0; k < K_COUNT; k++)
    RB_INIT(&s->objs[k]);
  s->hist_cap = s->opts.history > 0 ? (size_t)s->opts.history : 20000;
  s->hist = calloc(s->hist_cap, sizeof(*s->hist));
}

void objver_unref(struct objver *v) {
  size_t i;

  if (v == NULL || --v->refs > 0)
    return;
  for (i = 0; i < v->nlabels; i++) {
    free((char *)v->labels[i].key);
    free((char *)v->labels[i].value);
  }
  free(v->labels);
  for (i = 0; i < F_COUNT; i++)
    free(v->fields[i]);
  free(v->json);
  free(v);
}

static void hist_clear(struct sim *s) {
  size_t i;

  for (i = 0; i < s->hist_len; i++) {
    struct sim_event *e = &s->hist[(s->hist_start + i) % s->hist_cap];
    objver_unref(e->obj);
    objver_unref(e->prev);
  }
  s->hist_len = 0;
}

void store_free(struct sim *s) {
  int k;

  hist_clear(s);
  free(s->hist);
  s->hist = NULL;
  for (k = 0; k < K_COUNT; k++) {
    struct sim_obj *o, *nx;
    for (o = RB_MIN(obj_tree, &s->objs[k]); o != NULL; o = nx) {
      nx = RB_NEXT(obj_tree, &s->objs[k], o);
      RB_REMOVE(obj_tree, &s->objs[k], o);
      objver_unref(o->cur);
      free(o->ns);
      free(o->name);
      free(o);
    }
  }
}

struct sim_obj *store_get(struct sim *s, enum sim_kind k, const char *ns, const char *name) {
  struct sim_obj key;

  key.ns = (char *)(kind_namespaced(k) ? ns : "");
  key.name = (char *)name;
  return RB_FIND(obj_tree, &s->objs[k], &key);
}

struct sim_obj *store_first(struct sim *s, enum sim_kind k, const char *ns) {
  struct sim_obj key;

  if (ns == NULL || !kind_namespaced(k))
    return RB_MIN(obj_tree, &s->objs[k]);
  key.ns = (char *)ns;
  key.name = "";
  return RB_NFIND(obj_tree, &s->objs[k], &key);
}

struct sim_obj *store_next(struct sim *s, struct sim_obj *o) {
  return RB_NEXT(obj_tree, &s->objs[o->kind], o);
}

struct sim_obj *store_after(struct sim *s, enum sim_kind k, const char *ns, const char *name) {
  struct sim_obj key, *o;

  key.ns = (char *)ns;
  key.name = (char *)name;
  o = RB_NFIND(obj_tree, &s->objs[k], &key);
  if (o != NULL && obj_cmp(o, &key) == 0)
    o = RB_NEXT(obj_tree, &s->objs[k], o);
  return o;
}

uint64_t store_oldest_rv(const struct sim *s) {
  uint64_t oldest = s->compact_rv ? s->compact_rv + 1 : 0;

  /* A full ring has dropped everything before its first event. */
  if (s->hist_len == s->hist_cap && s->hist[s->hist_start].obj->rv > oldest)
    oldest = s->hist[s->hist_start].obj->rv;
  return oldest;
}

void store_compact(struct sim *s) {
  hist_clear(s);
  s->hist_start = 0;
  s->compact_rv = s->rv;
}

json_t *obj_json(const struct sim_obj *o) {
  return json_loadb(o->cur->json, o->cur->json_len, 0, NULL);
}

const char *objver_label(const void *v, const char *key) {
  const struct objver *ov = v;

  return fr_labels_get(ov->labels, ov->nlabels, key);
}

const char *objver_field(const void *v, const char *key) {
  const struct objver *ov = v;
  const char *const *names = kind_field_names(ov->kind);
  size_t i;

  for (i = 0; names[i] != NULL; i++)
    if (strcmp(names[i], key) == 0)
      return ov->fields[i] ? ov->fields[i] : "";
  return NULL;
}

int pod_json_ready(json_t *pod) {
  json_t *c;
  size_t i;

  json_array_foreach(json_path(pod, "status.conditions"), i, c) {
    const char *t = json_get_str(c, "type"), *st = json_get_str(c, "status");
    if (t != NULL && strcmp(t, "Ready") == 0)
      return st != NULL && strcmp(st, "True") == 0;
  }
  return 0;
}

static char *dup_str(json_t *j) {
  const char *v = json_string_value(j);

  return v ? strdup(v) : NULL;
}

/* Builds a version from <j> (borrowed). */
static struct objver *objver_new(enum sim_kind k, json_t *j, uint64_t rv) {
  struct objver *v = calloc(1, sizeof(*v));
  json_t *labels = json_path(j, "metadata.labels");
  const char *key;
  json_t *val;

  if (v == NULL)
    return NULL;
  v->refs = 1;
  v->kind = k;
  v->rv = rv;
  if (json_is_object(labels) && json_object_size(labels) > 0) {
    v->labels = calloc(json_object_size(labels), sizeof(*v->labels));
    if (v->labels == NULL)
      goto fail;
    json_object_foreach(labels, key, val) {
      if (!json_is_string(val))
        continue;
      v->labels[v->nlabels].key = strdup(key);
      v->labels[v->nlabels].value = strdup(json_string_value(val));
      v->nlabels++;
      if (!v->labels[v->nlabels - 1].key || !v->labels[v->nlabels - 1].value)
        goto fail;
    }
  }
  v->fields[F_NAME] = dup_str(json_path(j, "metadata.name"));
  v->fields[F_NAMESPACE] = dup_str(json_path(j, "metadata.namespace"));
  if (k == K_POD) {
    v->fields[F_NODE_NAME] = dup_str(json_path(j, "spec.nodeName"));
    v->fields[F_PHASE] = dup_str(json_path(j, "status.phase"));
    v->fields[F_POD_IP] = dup_str(json_path(j, "status.podIP"));
    v->fields[F_RESTART_POLICY] = dup_str(json_path(j, "spec.restartPolicy"));
    v->fields[F_SCHEDULER_NAME] = dup_str(json_path(j, "spec.schedulerName"));
    v->fields[F_SERVICE_ACCOUNT] = dup_str(json_path(j, "spec.serviceAccountName"));
    v->fields[F_NOMINATED_NODE] = dup_str(json_path(j, "status.nominatedNodeName"));
    v->ready = pod_json_ready(j);
  } else if (k == K_EVENT) {
    size_t i;
    /* event_fields[] names the slots; "source" is source.component. */
    for (i = 2; event_fields[i] != NULL; i++)
      v->fields[i] = dup_str(json_path(j, strcmp(event_fields[i], "source") == 0
                                              ? "source.component" : event_fields[i]));
  }
  v->deleting = json_path(j, "metadata.deletionTimestamp") != NULL;
  v->json = json_dumps(j, JSON_COMPACT);
  if (v->json == NULL)
    goto fail;
  v->json_len = strlen(v->json);
  return v;
fail:
  objver_unref(v);
  return NULL;
}

static void hist_push(struct sim *s, int type, struct objver *nv, struct objver *prev) {
  struct sim_event *e;

  if (s->hist_len == s->hist_cap) {
    e = &s->hist[s->hist_start];
    objver_unref(e->obj);
    objver_unref(e->prev);
    s->hist_start = (s->hist_start + 1) % s->hist_cap;
    s->hist_len--;
  }
  e = &s->hist[(s->hist_start + s->hist_len) % s->hist_cap];
  e->type = type;
  e->obj = nv;
  e->prev = prev;
  nv->refs++;
  if (prev)
    prev->refs++;
  s->hist_len++;
}

struct sim_obj *store_commit(struct sim *s, enum sim_kind k, struct sim_obj *o, json_t *j,
                             int event) {
  json_t *meta = json_obj(j, "metadata");
  struct objver *nv, *prev = o ? o->cur : NULL;
  struct sim_event ev;
  char rvs[24];
  uint64_t rv = s->rv + 1;

  if (meta == NULL) {
    json_decref(j);
    return NULL;
  }
  snprintf(rvs, sizeof(rvs), "%" PRIu64, rv);
  json_object_set_new(meta, "resourceVersion", json_string(rvs));
  if (o == NULL) {
    const char *ns = json_get_str(meta, "namespace");
    const char *name = json_get_str(meta, "name");
    o = calloc(1, sizeof(*o));
    if (o == NULL) {
      json_decref(j);
      return NULL;
    }
    o->kind = k;
    o->ns = strdup(kind_namespaced(k) && ns ? ns : "");
    o->name = strdup(name ? name : "");
    snprintf(o->uid, sizeof(o->uid), "%s", json_get_str(meta, "uid") ? json_get_str(meta, "uid") : "");
    if (o->ns == NULL || o->name == NULL) {
      free(o->ns);
      free(o->name);
      free(o);
      json_decref(j);
      return NULL;
    }
  }
  nv = objver_new(k, j, rv);
  json_decref(j);
  if (nv == NULL) {
    if (prev == NULL) {
      free(o->ns);
      free(o->name);
      free(o);
    }
    return NULL;
  }
  s->rv = rv;
  if (prev == NULL) {
    o->create_rv = rv;
    RB_INSERT(obj_tree, &s->objs[k], o);
    s->counts[k]++;
  }
  o->cur = nv;
  hist_push(s, event, nv, prev);
  ev.type = event;
  ev.obj = nv;
  ev.prev = prev;
  watch_notify(s, &ev);
  /* The disruption controller's informers: budgets count pods and their
   * ReplicaSets' scale. */
  if (k == K_POD || k == K_RS)
    pdb_mark_dirty(s, o->ns);
  /* Egress rules follow policies and pods' labels (a CNI's watch). */
  if (k == K_POD || k == K_NETWORKPOLICY)
    netpol_commit(s, k, o, event);
  if (event == EV_DELETED) {
    RB_REMOVE(obj_tree, &s->objs[k], o);
    s->counts[k]--;
    objver_unref(nv);
    objver_unref(prev);
    free(o->ns);
    free(o->name);
    free(o);
    return NULL;
  }
  objver_unref(prev);
  return o;
}

int store_replay(struct sim *s, uint64_t rv, void (*cb)(const struct sim_event *, void *),
                 void *arg) {
  size_t i;

  if (rv + 1 < store_oldest_rv(s))
    return -ESTALE;
  for (i = 0; i < s->hist_len; i++) {
    struct sim_event *e = &s->hist[(s->hist_start + i) % s->hist_cap];
    if (e->obj->rv > rv)
      cb(e, arg);
  }
  return 0;
}

/* ---- json helpers ---- */

int64_t json_get_int(json_t *o, const char *key, int64_t dflt) {
  json_t *v = json_object_get(o, key);

  return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

const char *json_get_str(json_t *o, const char *key) {
  return json_string_value(json_object_get(o, key));
}

json_t *json_path(json_t *root, const char *path) {
  char part[128];
  const char *p = path;

  while (root != NULL && *p != '\0') {
    const char *dot = strchr(p, '.');
    size_t n = dot ? (size_t)(dot - p) : strlen(p);
    if (n >= sizeof(part))
      return NULL;
    memcpy(part, p, n);
    part[n] = '\0';
    root = json_object_get(root, part);
    p = dot ? dot + 1 : p + n;
  }
  return root;
}

json_t *json_obj(json_t *parent, const char *key) {
  json_t *v = json_object_get(parent, key);

  if (json_is_object(v))
    return v;
  v = json_object();
  if (v == NULL || json_object_set_new(parent, key, v) != 0)
    return NULL;
  return v;
}

int quantities_normalize(json_t *map, const char **bad) {
  const char *key;
  json_t *v;
  char buf[64];

  json_object_foreach(map, key, v) {
    if (json_is_integer(v)) {
      snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
      json_object_set_new(map, key, json_string(buf));
    } else if (json_is_real(v)) {
      snprintf(buf, sizeof(buf), "%.17g", json_real_value(v));
      json_object_set_new(map, key, json_string(buf));
    } else if (!json_is_string(v)) {
      *bad = key;
      return -1;
    }
    {
      int64_t m;
      if (fr_quantity_parse_milli(json_string_value(json_object_get(map, key)), &m) != 0) {
        *bad = key;
        return -1;
      }
    }
  }
  return 0;
}

int sim_err_set(struct sim_err *e, int code, const char *reason, const char *fmt, ...) {
  va_list ap;

  e->code = code;
  snprintf(e->reason, sizeof(e->reason), "%s", reason);
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
  va_end(ap);
  return -1;
}

void uid_new(char out[40]) {
  unsigned char r[16];

  if (fr_random_bytes(r, sizeof(r)) != 0)
    memset(r, 0x5a, sizeof(r));
  r[6] = (unsigned char)((r[6] & 0x0f) | 0x40);
  r[8] = (unsigned char)((r[8] & 0x3f) | 0x80);
  snprintf(out, 40,
           "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", r[0],
           r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13],
           r[14], r[15]);
}

void now_rfc3339(char out[21]) {
  fr_time_rfc3339(fr_wall_ms() / 1000, out);
}
