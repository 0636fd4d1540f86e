/* commit.c - batch commit markers: nothing a dying router started stays.
 *
 * The cluster is the only state. Every pod a create makes or claims carries
 * label fedrouter.io/batch=<id>; a batch that succeeds writes ConfigMap
 * fr-batch-<id> (label fedrouter.io/batch, data.state "committed") here
 * before the router answers. The reaper of every router (sandbox.c) asks
 * commit__due_at() when a pod of a batch with no committed marker is due:
 *
 *   due = max(the pod's created-at annotation (creation or claim),
 *             the marker's data.progress when it is "pending") + timeout
 *
 * A batch that runs longer than a third of the timeout renews a "pending"
 * marker (data.progress = now) every third of it from the router that runs
 * it (fr_adapter_batch_hold), so a slow but live batch is never reaped,
 * by this router or another; when the router dies the renewals stop and
 * every router deletes the batch's pods one timeout later. A router also
 * never reaps a batch it holds itself, whatever its marker cache says.
 *
 * Markers are deleted once no pod of their batch is left (counted from the
 * sandbox pod cache's events) and their progress is a timeout old. Never
 * while a pod of theirs is left, even past data.expires (the batch's
 * lifetime when it committed, for operators): a sandbox that outlives it
 * must not lose its marker. Every router does it; deletes are idempotent.
 *
 * Marker writes are tracked (struct commits, ops) so that shutdown can
 * answer and free them: the client drops the callbacks of cancelled calls.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commit.h"

#include "cluster.h"
#include "fr/assert.h"
#include "fr/kube.h"
#include "fr/log.h"
#include "fr/util.h"
#include "strmap.h"
#include "upstream.h"

#define MARKER_PREFIX "fr-batch-"
/* Markers are looked over at most this often (a walk of the marker cache). */
#define MARKER_GC_EVERY_MS 10000

enum op_kind { OP_COMMIT, OP_RENEW, OP_DELETE };

/* A marker write (op_set_state() asserts every transition):
 *
 *   NEW --commit, renew--> POSTING --409 (it exists)--> PATCHING --> DONE
 *    |                        +--answer--> DONE
 *    +--delete--> DELETING --answer--> DONE
 *
 * The marker's own states follow from it: a commit writes "committed"
 * (POST or PATCH); a renewal writes "pending" only when it creates the
 * marker and otherwise moves progress alone, so a renewal that lands
 * after the commit cannot take "committed" back (op_data asserts it). */
enum op_state { OPS_NEW, OPS_POSTING, OPS_PATCHING, OPS_DELETING, OPS_DONE };

struct commit_op;

/* This file's state: the batches this router holds, the pod count per
 * batch, and the marker writes in flight. */
struct commits {
  struct cluster *cl;
  int64_t timeout_s;             /* batch_commit_timeout_s */
  struct strmap held;            /* batch -> n[0] holds, n[1] held since, n[2] last pending
                                    marker write (wall ms) */
  struct strmap batch_pods;      /* batch -> n[0] cached sandbox pods carrying it (> 0) */
  struct commit_op *ops;         /* marker writes in flight */
  int64_t markers_gc_ms;         /* last sweep of the markers (wall ms) */
};

struct commit_op {
  struct commit_op *prev, *next;
  struct commits *cm;
  enum op_kind kind;
  enum op_state state;
  int64_t expires_s;
  struct fr_kube_call *call;
  void (*cb)(int status, const char *message, void *arg);
  void *arg;
  char batch[64];
};

static int64_t timeout_s(const struct commits *cm) {
  return cm->timeout_s > 0 ? cm->timeout_s : FR_BATCH_COMMIT_TIMEOUT_S;
}

static json_t *marker_of(const struct commits *cm, const char *batch) {
  char name[128];

  if (cm->cl->inf[CLUSTER_INF_MARKERS] == NULL)
    return NULL;
  snprintf(name, sizeof(name), MARKER_PREFIX "%s", batch);
  return fr_informer_get(cm->cl->inf[CLUSTER_INF_MARKERS], cm->cl->ns, name);
}

static const char *marker_data(json_t *m, const char *key) {
  return json_string_value(json_object_get(json_object_get(m, "data"), key));
}

/* A time field of marker <m> in unix seconds, or -1. */
static int64_t marker_time(json_t *m, const char *key) {
  const char *s = marker_data(m, key);
  int64_t t;

  return s != NULL && fr_time_parse_rfc3339(s, &t) == 0 ? t : -1;
}

static int marker_committed(json_t *m) {
  const char *st = marker_data(m, "state");

  return st != NULL && strcmp(st, "committed") == 0;
}

json_t *commit__slim_marker(json_t *obj, void *arg) {
  json_t *meta = json_object_get(obj, "metadata"), *data = json_object_get(obj, "data");
  json_t *out = json_pack("{s:{s:O*,s:O*,s:O*,s:{s:O*}},s:{}}", "metadata", "namespace",
                          json_object_get(meta, "namespace"), "name", json_object_get(meta, "name"),
                          "resourceVersion", json_object_get(meta, "resourceVersion"), "labels", FR_LABEL_BATCH,
                          json_object_get(json_object_get(meta, "labels"), FR_LABEL_BATCH), "data");
  const char *const keep[] = {"state", "progress", "expires"};
  size_t i;

  (void)arg;
  if (out == NULL)
    return NULL;
  if (json_object_get(meta, "deletionTimestamp") != NULL)
    json_object_set(json_object_get(out, "metadata"), "deletionTimestamp",
                    json_object_get(meta, "deletionTimestamp"));
  for (i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
    if (json_is_string(json_object_get(data, keep[i])))
      json_object_set(json_object_get(out, "data"), keep[i], json_object_get(data, keep[i]));
  return out;
}

int commit__markers_known(const struct commits *cm) {
  return cluster__cache_current(cm->cl, CLUSTER_INF_MARKERS);
}

int64_t commit__due_at(const struct commits *cm, const struct fr_pod *pod) {
  const char *batch = fr_pod_label(pod, FR_LABEL_BATCH);
  int64_t base, progress;
  json_t *m;

  if (batch == NULL || pod->state == NULL || strcmp(pod->state, "claimed") != 0 || pod->terminating)
    return -1;
  m = marker_of(cm, batch);
  if (marker_committed(m))
    return -1;
  base = pod->created_s >= 0 ? pod->created_s : pod->creation_s;
  if (base < 0)
    base = fr_wall_ms() / 1000;
  if ((progress = marker_time(m, "progress")) > base)
    base = progress;
  /* Held here: live, whatever the cache says; looked at again later. */
  if (strmap_get(&cm->held, batch) != NULL && fr_wall_ms() / 1000 > base)
    base = fr_wall_ms() / 1000;
  return base + timeout_s(cm);
}

static void count_batch(struct commits *cm, const struct fr_pod *p, int delta) {
  const char *batch = p != NULL ? fr_pod_label(p, FR_LABEL_BATCH) : NULL;
  struct strmap_entry *e;

  if (batch == NULL)
    return;
  if (delta > 0) {
    if ((e = strmap_put(&cm->batch_pods, batch, NULL)) != NULL)
      e->v.n[0]++;
  } else if ((e = strmap_get(&cm->batch_pods, batch)) != NULL && --e->v.n[0] <= 0) {
    strmap_del(&cm->batch_pods, batch);
  }
}

void commit__on_pod(struct commits *cm, enum fr_informer_event ev, const struct fr_pod *p,
                    const struct fr_pod *old) {
  if (ev == FR_INF_DELETED) {
    count_batch(cm, p, -1);
  } else {
    count_batch(cm, old, -1);
    count_batch(cm, p, 1);
  }
}

/* ---- marker writes ---- */

#define OPS_BIT(s) (1u << (s))
static const unsigned op_allowed[] = {
    [OPS_NEW] = OPS_BIT(OPS_POSTING) | OPS_BIT(OPS_DELETING),
    [OPS_POSTING] = OPS_BIT(OPS_PATCHING) | OPS_BIT(OPS_DONE),
    [OPS_PATCHING] = OPS_BIT(OPS_DONE),
    [OPS_DELETING] = OPS_BIT(OPS_DONE),
    [OPS_DONE] = 0,
};

static void op_set_state(struct commit_op *op, enum op_state s) {
  FR_ASSERT(op_allowed[op->state] & OPS_BIT(s));
  FR_ASSERT(s != OPS_POSTING || op->kind != OP_DELETE);
  FR_ASSERT(s != OPS_DELETING || op->kind == OP_DELETE);
  op->state = s;
}

static void op_free(struct commit_op *op) {
  struct commits *cm = op->cm;

  /* In the list of writes in flight, its call answered or never sent. */
  FR_ASSERT(op->prev != NULL ? op->prev->next == op : cm->ops == op);
  FR_ASSERT(op->call == NULL);

  if (op->prev)
    op->prev->next = op->next;
  else if (cm->ops == op)
    cm->ops = op->next;
  if (op->next)
    op->next->prev = op->prev;
  free(op);
}

static void op_finish(struct commit_op *op, int status, const char *message) {
  op_set_state(op, OPS_DONE);
  if (op->cb != NULL)
    op->cb(status, message, op->arg);
  op_free(op);
}

static struct commit_op *op_new(struct commits *cm, enum op_kind kind, const char *batch) {
  struct commit_op *op;

  if (strlen(batch) >= sizeof(op->batch) || (op = calloc(1, sizeof(*op))) == NULL)
    return NULL;
  op->cm = cm;
  op->kind = kind;
  snprintf(op->batch, sizeof(op->batch), "%s", batch);
  op->next = cm->ops;
  if (cm->ops)
    cm->ops->prev = op;
  cm->ops = op;
  return op;
}

static void on_written(const struct fr_kube_response *r, void *arg);

/* Sends <method> of <body> for <op>'s marker (the collection for POST). */
static int op_send(struct commit_op *op, const char *method, json_t *body) {
  struct commits *cm = op->cm;
  char path[400], *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
  int rc;

  if (upstream_object_path(path, sizeof(path), "/api/v1", cm->cl->ns, "configmaps", strcmp(method, "POST") == 0 ? NULL : MARKER_PREFIX,
                           strcmp(method, "POST") == 0 ? NULL : op->batch) != 0)
    return -EINVAL;
  if (body != NULL && text == NULL)
    return -ENOMEM;
  /* A retried POST that had landed meets 409 and turns into the PATCH: safe. */
  rc = fr_kube_request(cm->cl->client, method, path,
                       strcmp(method, "PATCH") == 0 ? "application/merge-patch+json" : "application/json", text,
                       text ? strlen(text) : 0, FR_KUBE_IDEMPOTENT, NULL, on_written, op, &op->call);
  free(text);
  return rc;
}

/* The marker's data for <op>: what a POST creates, or (<patch>) what a
 * PATCH changes. A renewal only moves progress, so one landing after the
 * commit cannot take "committed" back. */
static json_t *op_data(const struct commit_op *op, int patch) {
  char now[21], exp[21];
  json_t *d;

  fr_time_rfc3339(fr_wall_ms() / 1000, now);
  d = json_pack("{s:s}", "progress", now);
  if (op->kind == OP_COMMIT || !patch)
    json_object_set_new(d, "state", json_string(op->kind == OP_COMMIT ? "committed" : "pending"));
  /* Only a commit writes "committed"; a renewal's PATCH leaves state alone. */
  FR_ASSERT(op->kind == OP_COMMIT || (patch ? json_object_get(d, "state") == NULL : 1));
  if (op->kind == OP_COMMIT) {
    fr_time_rfc3339(op->expires_s, exp);
    json_object_set_new(d, "expires", json_string(exp));
  }
  return d;
}

static int op_start(struct commit_op *op) {
  char name[128];
  json_t *body;
  int rc;

  if (op->kind == OP_DELETE) {
    op_set_state(op, OPS_DELETING);
    return op_send(op, "DELETE", NULL);
  }
  op_set_state(op, OPS_POSTING);
  snprintf(name, sizeof(name), MARKER_PREFIX "%s", op->batch);
  body = json_pack("{s:s,s:s,s:{s:s,s:{s:s}},s:o}", "apiVersion", "v1", "kind", "ConfigMap", "metadata", "name",
                   name, "labels", FR_LABEL_BATCH, op->batch, "data", op_data(op, 0));
  rc = body != NULL ? op_send(op, "POST", body) : -ENOMEM;
  json_decref(body);
  return rc;
}

static void on_written(const struct fr_kube_response *r, void *arg) {
  struct commit_op *op = arg;
  struct commits *cm = op->cm;
  json_t *obj;
  char msg[300];

  op->call = NULL;
  if (r->status == 409 && op->state == OPS_POSTING) {
    json_t *patch = json_pack("{s:o}", "data", op_data(op, 1));
    op_set_state(op, OPS_PATCHING);
    if (patch != NULL && op_send(op, "PATCH", patch) == 0) {
      json_decref(patch);
      return;
    }
    json_decref(patch);
    op_finish(op, 0, "cannot send the marker's update");
    return;
  }
  if (r->status >= 200 && r->status < 300 && op->kind != OP_DELETE &&
      (obj = json_loadb(r->body, r->body_len, 0, NULL)) != NULL) {
    /* This router's reaper must see the commit now, not when the watch
     * catches up: the batch lets go of its hold right after. */
    fr_informer_observe(cm->cl->inf[CLUSTER_INF_MARKERS], obj);
    json_decref(obj);
  }
  if (r->status >= 200 && r->status < 300)
    msg[0] = '\0';
  else
    snprintf(msg, sizeof(msg), "%s marker " MARKER_PREFIX "%s: %s %d", cm->cl->cc.name, op->batch,
             r->status ? "HTTP" : (r->error ? r->error : "no response"), r->status);
  if (op->kind == OP_COMMIT && msg[0] != '\0')
    FR_WARN("commit", "%s", msg);
  op_finish(op, r->status, msg);
}

int commit__write(struct commits *cm, const char *batch, int64_t expires_s,
                  void (*cb)(int status, const char *message, void *arg), void *arg) {
  struct commit_op *op;
  int rc;

  if ((op = op_new(cm, OP_COMMIT, batch)) == NULL)
    return -ENOMEM;
  op->expires_s = expires_s;
  op->cb = cb;
  op->arg = arg;
  if ((rc = op_start(op)) != 0)
    op_free(op);
  return rc;
}

static void send_op(struct commits *cm, enum op_kind kind, const char *batch) {
  struct commit_op *op = op_new(cm, kind, batch);

  if (op != NULL && op_start(op) != 0)
    op_free(op);
}

void commit__hold(struct commits *cm, const char *batch, int hold) {
  struct strmap_entry *e;

  if (batch == NULL)
    return;
  if (hold) {
    if ((e = strmap_put(&cm->held, batch, NULL)) != NULL && e->v.n[0]++ == 0)
      e->v.n[1] = fr_wall_ms();
  } else if ((e = strmap_get(&cm->held, batch)) != NULL && --e->v.n[0] <= 0) {
    strmap_del(&cm->held, batch);
  }
}

/* ---- from the reaper ---- */

/* Renews the pending marker of a batch held longer than a third of the
 * timeout, every third of it: a batch done sooner never writes one. */
static int renew(struct strmap_entry *e, void *arg) {
  struct commits *cm = arg;
  int64_t now = fr_wall_ms(), third = timeout_s(cm) * 1000 / 3;

  if (now - e->v.n[1] >= third && now - e->v.n[2] >= third) {
    e->v.n[2] = now;
    send_op(cm, OP_RENEW, e->key);
  }
  return 0;
}

/* Markers no longer needed: a timeout past their progress with no pod of
 * their batch left (a pending one whose pods were all reaped, a committed
 * one whose sandboxes all ended). */
static void markers_gc(struct commits *cm) {
  int64_t now = fr_wall_ms() / 1000;
  const char *key;
  json_t *m;

  if (!cluster__cache_current(cm->cl, CLUSTER_INF_PODS))
    return;
  json_object_foreach(fr_informer_items(cm->cl->inf[CLUSTER_INF_MARKERS]), key, m) {
    const char *batch = json_string_value(
        json_object_get(json_object_get(json_object_get(m, "metadata"), "labels"), FR_LABEL_BATCH));
    int64_t progress = marker_time(m, "progress");

    if (batch == NULL || json_object_get(json_object_get(m, "metadata"), "deletionTimestamp") != NULL ||
        strmap_get(&cm->held, batch) != NULL || strmap_get(&cm->batch_pods, batch) != NULL ||
        (progress >= 0 && progress + timeout_s(cm) > now))
      continue;
    FR_DEBUG("commit", "%s: deleting the marker of batch %s (no sandbox of it left)", cm->cl->cc.name, batch);
    send_op(cm, OP_DELETE, batch);
  }
}

void commit__sweep(struct commits *cm) {
  strmap_sweep(&cm->held, renew, cm);
  if (fr_wall_ms() - cm->markers_gc_ms >= MARKER_GC_EVERY_MS && commit__markers_known(cm)) {
    cm->markers_gc_ms = fr_wall_ms();
    markers_gc(cm);
  }
}

void commit__stop(struct commits *cm) {
  while (cm->ops != NULL) {
    fr_kube_cancel(cm->ops->call);
    cm->ops->call = NULL;
    op_finish(cm->ops, 0, "the router is shutting down");
  }
}

struct commits *commit__new(struct cluster *cl, int64_t timeout_s) {
  struct commits *cm = calloc(1, sizeof(*cm));

  /* The strmap tables start empty as calloc left them. */
  if (cm == NULL)
    return NULL;
  cm->cl = cl;
  cm->timeout_s = timeout_s;
  return cm;
}

void commit__free(struct commits *cm) {
  if (cm == NULL)
    return;
  FR_ASSERT(cm->ops == NULL);
  strmap_close(&cm->held);
  strmap_close(&cm->batch_pods);
  free(cm);
}
