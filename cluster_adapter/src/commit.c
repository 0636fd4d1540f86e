/* commit.c - batch commit markers: nothing a dying router started stays.
 *
 * The cluster is the only state. Every pod a create makes or claims carries
 * label fedrouter.io/batch=<id>; a batch that succeeds writes ConfigMap
 * fr-batch-<id> (label fedrouter.io/batch, data.state "committed") here
 * before the router answers. The reaper of every router (sandbox.c) asks
 * commit_due_at() when a pod of a batch with no committed marker is due:
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
 * Marker writes are tracked (commit_ops) so that shutdown can answer and
 * free them: the client drops the callbacks of cancelled calls.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapter_internal.h"
#include "fr/log.h"
#include "fr/util.h"
#include "upstream.h"

#define MARKER_PREFIX "fr-batch-"
/* Markers are looked over at most this often (a walk of the marker cache). */
#define MARKER_GC_EVERY_MS 10000

enum op_kind { OP_COMMIT, OP_RENEW, OP_DELETE };

struct commit_op {
  struct commit_op *prev, *next;
  struct fr_adapter *a;
  enum op_kind kind;
  int patched;                /* the POST met an existing marker: PATCH sent */
  int64_t expires_s;
  struct fr_kube_call *call;
  void (*cb)(int status, const char *message, void *arg);
  void *arg;
  char batch[64];
};

static int64_t timeout_s(const struct fr_adapter *a) {
  return a->commit_timeout_s > 0 ? a->commit_timeout_s : FR_BATCH_COMMIT_TIMEOUT_S;
}

static json_t *marker_of(struct fr_adapter *a, const char *batch) {
  char name[128];

  if (a->inf[INF_MARKERS] == NULL)
    return NULL;
  snprintf(name, sizeof(name), MARKER_PREFIX "%s", batch);
  return fr_informer_get(a->inf[INF_MARKERS], a->ns, name);
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

json_t *commit_slim_marker(json_t *obj, void *arg) {
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

int commit_markers_known(struct fr_adapter *a) {
  return fr_informer_synced(a->inf[INF_MARKERS]) && fr_informer_healthy(a->inf[INF_MARKERS]);
}

int64_t commit_due_at(struct fr_adapter *a, const struct fr_pod *pod) {
  const char *batch = fr_pod_label(pod, FR_LABEL_BATCH);
  int64_t base, progress;
  json_t *m;

  if (batch == NULL || pod->state == NULL || strcmp(pod->state, "claimed") != 0 || pod->terminating)
    return -1;
  m = marker_of(a, batch);
  if (marker_committed(m))
    return -1;
  base = pod->created_s >= 0 ? pod->created_s : pod->creation_s;
  if (base < 0)
    base = fr_wall_ms() / 1000;
  if ((progress = marker_time(m, "progress")) > base)
    base = progress;
  /* Held here: live, whatever the cache says; looked at again later. */
  if (strmap_get(&a->held, batch) != NULL && fr_wall_ms() / 1000 > base)
    base = fr_wall_ms() / 1000;
  return base + timeout_s(a);
}

static void count_batch(struct fr_adapter *a, const struct fr_pod *p, int delta) {
  const char *batch = p != NULL ? fr_pod_label(p, FR_LABEL_BATCH) : NULL;
  struct strmap_entry *e;

  if (batch == NULL)
    return;
  if (delta > 0) {
    if ((e = strmap_put(&a->batch_pods, batch, NULL)) != NULL)
      e->v.n[0]++;
  } else if ((e = strmap_get(&a->batch_pods, batch)) != NULL && --e->v.n[0] <= 0) {
    strmap_del(&a->batch_pods, batch);
  }
}

void commit_on_pod(struct fr_adapter *a, enum fr_informer_event ev, const struct fr_pod *p,
                   const struct fr_pod *old) {
  if (ev == FR_INF_DELETED) {
    count_batch(a, p, -1);
  } else {
    count_batch(a, old, -1);
    count_batch(a, p, 1);
  }
}

/* ---- marker writes ---- */

static void op_free(struct commit_op *op) {
  struct fr_adapter *a = op->a;

  if (op->prev)
    op->prev->next = op->next;
  else if (a->commit_ops == op)
    a->commit_ops = op->next;
  if (op->next)
    op->next->prev = op->prev;
  free(op);
}

static void op_finish(struct commit_op *op, int status, const char *message) {
  if (op->cb != NULL)
    op->cb(status, message, op->arg);
  op_free(op);
}

static struct commit_op *op_new(struct fr_adapter *a, enum op_kind kind, const char *batch) {
  struct commit_op *op;

  if (strlen(batch) >= sizeof(op->batch) || (op = calloc(1, sizeof(*op))) == NULL)
    return NULL;
  op->a = a;
  op->kind = kind;
  snprintf(op->batch, sizeof(op->batch), "%s", batch);
  op->next = a->commit_ops;
  if (a->commit_ops)
    a->commit_ops->prev = op;
  a->commit_ops = op;
  return op;
}

static void on_written(const struct fr_kube_response *r, void *arg);

/* Sends <method> of <body> for <op>'s marker (the collection for POST). */
static int op_send(struct commit_op *op, const char *method, json_t *body) {
  struct fr_adapter *a = op->a;
  char path[400], *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
  int rc;

  if (upstream_object_path(path, sizeof(path), "/api/v1", a->ns, "configmaps", strcmp(method, "POST") == 0 ? NULL : MARKER_PREFIX,
                           strcmp(method, "POST") == 0 ? NULL : op->batch) != 0)
    return -EINVAL;
  if (body != NULL && text == NULL)
    return -ENOMEM;
  /* A retried POST that had landed meets 409 and turns into the PATCH: safe. */
  rc = fr_kube_request(a->client, method, path,
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

  if (op->kind == OP_DELETE)
    return op_send(op, "DELETE", NULL);
  snprintf(name, sizeof(name), MARKER_PREFIX "%s", op->batch);
  body = json_pack("{s:s,s:s,s:{s:s,s:{s:s}},s:o}", "apiVersion", "v1", "kind", "ConfigMap", "metadata", "name",
                   name, "labels", FR_LABEL_BATCH, op->batch, "data", op_data(op, 0));
  rc = body != NULL ? op_send(op, "POST", body) : -ENOMEM;
  json_decref(body);
  return rc;
}

static void on_written(const struct fr_kube_response *r, void *arg) {
  struct commit_op *op = arg;
  struct fr_adapter *a = op->a;
  json_t *obj;
  char msg[300];

  op->call = NULL;
  if (r->status == 409 && !op->patched && op->kind != OP_DELETE) {
    json_t *patch = json_pack("{s:o}", "data", op_data(op, 1));
    op->patched = 1;
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
    fr_informer_observe(a->inf[INF_MARKERS], obj);
    json_decref(obj);
  }
  if (r->status >= 200 && r->status < 300)
    msg[0] = '\0';
  else
    snprintf(msg, sizeof(msg), "%s marker " MARKER_PREFIX "%s: %s %d", a->cc.name, op->batch,
             r->status ? "HTTP" : (r->error ? r->error : "no response"), r->status);
  if (op->kind == OP_COMMIT && msg[0] != '\0')
    FR_WARN("commit", "%s", msg);
  op_finish(op, r->status, msg);
}

int fr_adapter_batch_commit(struct fr_adapter *a, const char *batch, int64_t expires_s,
                            void (*cb)(int status, const char *message, void *arg), void *arg) {
  struct commit_op *op;
  int rc;

  if (a->stopping)
    return -ESHUTDOWN;
  if ((op = op_new(a, OP_COMMIT, batch)) == NULL)
    return -ENOMEM;
  op->expires_s = expires_s;
  op->cb = cb;
  op->arg = arg;
  if ((rc = op_start(op)) != 0)
    op_free(op);
  return rc;
}

static void send_op(struct fr_adapter *a, enum op_kind kind, const char *batch) {
  struct commit_op *op = op_new(a, kind, batch);

  if (op != NULL && op_start(op) != 0)
    op_free(op);
}

void fr_adapter_batch_hold(struct fr_adapter *a, const char *batch, int hold) {
  struct strmap_entry *e;

  if (batch == NULL)
    return;
  if (hold) {
    if ((e = strmap_put(&a->held, batch, NULL)) != NULL && e->v.n[0]++ == 0)
      e->v.n[1] = fr_wall_ms();
  } else if ((e = strmap_get(&a->held, batch)) != NULL && --e->v.n[0] <= 0) {
    strmap_del(&a->held, batch);
  }
}

/* ---- from the reaper ---- */

/* Renews the pending marker of a batch held longer than a third of the
 * timeout, every third of it: a batch done sooner never writes one. */
static int renew(struct strmap_entry *e, void *arg) {
  struct fr_adapter *a = arg;
  int64_t now = fr_wall_ms(), third = timeout_s(a) * 1000 / 3;

  if (now - e->v.n[1] >= third && now - e->v.n[2] >= third) {
    e->v.n[2] = now;
    send_op(a, OP_RENEW, e->key);
  }
  return 0;
}

/* Markers no longer needed: a timeout past their progress with no pod of
 * their batch left (a pending one whose pods were all reaped, a committed
 * one whose sandboxes all ended). */
static void markers_gc(struct fr_adapter *a) {
  int64_t now = fr_wall_ms() / 1000;
  const char *key;
  json_t *m;

  if (!fr_informer_synced(a->inf[INF_PODS]) || !fr_informer_healthy(a->inf[INF_PODS]))
    return;
  json_object_foreach(fr_informer_items(a->inf[INF_MARKERS]), key, m) {
    const char *batch = json_string_value(
        json_object_get(json_object_get(json_object_get(m, "metadata"), "labels"), FR_LABEL_BATCH));
    int64_t progress = marker_time(m, "progress");

    if (batch == NULL || json_object_get(json_object_get(m, "metadata"), "deletionTimestamp") != NULL ||
        strmap_get(&a->held, batch) != NULL || strmap_get(&a->batch_pods, batch) != NULL ||
        (progress >= 0 && progress + timeout_s(a) > now))
      continue;
    FR_DEBUG("commit", "%s: deleting the marker of batch %s (no sandbox of it left)", a->cc.name, batch);
    send_op(a, OP_DELETE, batch);
  }
}

void commit_sweep(struct fr_adapter *a) {
  strmap_sweep(&a->held, renew, a);
  if (fr_wall_ms() - a->markers_gc_ms >= MARKER_GC_EVERY_MS && commit_markers_known(a)) {
    a->markers_gc_ms = fr_wall_ms();
    markers_gc(a);
  }
}

void commit_stop(struct fr_adapter *a) {
  while (a->commit_ops != NULL) {
    fr_kube_cancel(a->commit_ops->call);
    op_finish(a->commit_ops, 0, "the router is shutting down");
  }
}
