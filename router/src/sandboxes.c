/* sandboxes.c - /v1/sandboxes, exec and /v1/pools.
 *
 * A batch create is split over clusters by a plan (region first, then the
 * rest; healthy, synced and with room), run with a bounded number of
 * creates in flight per cluster, and moved to the next cluster when one
 * answers with an explicit no-room signal. All-or-nothing unless
 * partial_ok: a batch that cannot complete deletes what it created.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/config.h"
#include "fr/http.h"
#include "fr/kube.h"
#include "fr/labels.h"
#include "fr/log.h"
#include "fr/policy.h"
#include "fr/util.h"
#include "metrics.h"
#include "router.h"

/* Creates in flight per cluster for one batch: enough to keep a cluster's
 * create pipeline full without flooding its API server. */
#define PER_CLUSTER_INFLIGHT 32
#define NAME_MAX_LEN 48

/* ---------------------------------------------------------------------- */
/* request context                                                         */

/* Outlives the HTTP request if the client goes away mid-operation. */
struct ctx {
  struct router *r;
  struct fr_http_req *req;      /* NULL once the client is gone */
  char rid[129];
  char tenant[64];
  int deferred;
};

static void ctx_abort(struct fr_http_req *req) {
  struct ctx *c = req->data;

  c->req = NULL;
}

/* Deferred requests are counted so SIGTERM can wait for them (drain). */
static void ctx_done(struct ctx *c) {
  if (c->deferred) {
    c->deferred = 0;
    c->r->inflight--;
  }
}

static struct ctx *ctx_new(struct router *r, struct fr_http_req *req, const char *tenant) {
  struct ctx *c = calloc(1, sizeof(*c));

  if (c == NULL)
    return NULL;
  c->r = r;
  c->req = req;
  snprintf(c->rid, sizeof(c->rid), "%s", req->data ? (const char *)req->data : "");
  snprintf(c->tenant, sizeof(c->tenant), "%s", tenant);
  return c;
}

/* Takes the request over: from now on the response is sent later. */
static void ctx_defer(struct ctx *c) {
  c->req->data = c;
  c->req->abort_cb = ctx_abort;
  c->deferred = 1;
  c->r->inflight++;
}

static void reply(struct ctx *c, int status, json_t *body, const char *extra) {
  struct fr_buf h;
  char *s;

  ctx_done(c);
  if (c->req == NULL) {
    json_decref(body);
    return;
  }
  s = body ? json_dumps(body, JSON_COMPACT) : NULL;
  fr_buf_init(&h);
  fr_buf_printf(&h, "X-Request-Id: %s\r\nCache-Control: no-store\r\n%s", c->rid, extra ? extra : "");
  c->req->abort_cb = NULL;
  if (s == NULL) {
    static const char oom[] = "{\"error\":{\"code\":\"out_of_memory\",\"message\":\"the router is out of memory\"}}";
    fr_http_respond(c->req, 503, "application/json", h.data, oom, sizeof(oom) - 1);
  } else {
    fr_http_respond(c->req, status, "application/json", h.data, s, strlen(s));
  }
  c->req = NULL;
  free(s);
  fr_buf_free(&h);
  json_decref(body);
}

static json_t *err_body(const char *code, const char *msg) {
  return json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
}

static void reply_err(struct ctx *c, int status, const char *code, const char *msg, const char *extra) {
  reply(c, status, err_body(code, msg), extra);
}

static void field_err(struct ctx *c, const char *field, const char *msg) {
  json_t *b = err_body("invalid_field", msg);

  json_object_set_new(json_object_get(b, "error"), "field", json_string(field));
  reply(c, 400, b, NULL);
}

/* Parses the request body as a JSON object whose keys are all in <known>
 * (NULL-terminated). Returns it, or NULL after answering invalid_json /
 * invalid_field. */
static json_t *body_object(struct ctx *c, struct fr_http_req *req, const char *const *known, size_t flags) {
  json_error_t jerr;
  json_t *j = json_loadb(req->body, req->body_len, flags, &jerr), *v;
  const char *k;
  char msg[300];
  size_t i;

  if (!json_is_object(j)) {
    snprintf(msg, sizeof(msg), "the body must be a JSON object (%s)", j ? "got another JSON value" : jerr.text);
    reply_err(c, 400, "invalid_json", msg, NULL);
    json_decref(j);
    return NULL;
  }
  json_object_foreach(j, k, v) {
    for (i = 0; known[i] && strcmp(known[i], k) != 0; i++)
      ;
    if (known[i] == NULL) {
      snprintf(msg, sizeof(msg), "unknown field \"%s\"", k);
      field_err(c, k, msg);
      json_decref(j);
      return NULL;
    }
  }
  return j;
}

/* ---------------------------------------------------------------------- */
/* helpers                                                                 */

static struct fr_adapter *adapter_by_name(struct router *r, const char *name) {
  size_t i;

  for (i = 0; i < r->nadapters; i++)
    if (strcmp(fr_adapter_name(r->adapters[i]), name) == 0)
      return r->adapters[i];
  return NULL;
}

static const char *label_of(json_t *obj, const char *key) {
  return json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"), key));
}

static const char *ann_of(json_t *obj, const char *key) {
  return json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), "annotations"), key));
}

/* A claimed sandbox of <tenant>? Warm pool pods and other tenants' pods are
 * invisible. */
static int owned_by(const struct fr_pod *pod, const char *tenant) {
  return pod->state && pod->tenant && strcmp(pod->state, "claimed") == 0 && strcmp(pod->tenant, tenant) == 0;
}

static const char *sandbox_state(const struct fr_pod *pod) {
  if (pod->terminating)
    return "terminating";
  if (fr_pod_finished(pod))
    return pod->phase == FR_POD_FAILED && pod->reason && strcmp(pod->reason, "DeadlineExceeded") == 0
               ? "expired"
               : "failed";
  if (pod->phase == FR_POD_RUNNING && pod->ready)
    return "running";
  return "pending";
}

static json_t *time_or_null(int64_t s) {
  char t[21];

  if (s < 0)
    return json_null();
  fr_time_rfc3339(s, t);
  return json_string(t);
}

static json_t *sandbox_json(struct fr_adapter *a, const struct fr_pod *pod) {
  char id[256];
  json_t *labels = json_object();
  const char *k, *v;
  size_t off = 0;
  int64_t created = pod->created_s >= 0 ? pod->created_s : pod->creation_s;

  while (fr_pod_label_next(pod, &off, &k, &v)) {
    if (strncmp(k, FR_LABEL_PREFIX, strlen(FR_LABEL_PREFIX)) != 0)
      json_object_set_new(labels, k, json_string(v));
  }
  snprintf(id, sizeof(id), "%s.%s", fr_adapter_name(a), pod->name);
  return json_pack("{s:s,s:s,s:s,s:s,s:o,s:b,s:s,s:o,s:o,s:o}", "id", id, "name",
                   pod->sbname ? pod->sbname : "", "cluster", fr_adapter_name(a), "region",
                   fr_adapter_region(a), "pool", pod->pool ? json_string(pod->pool) : json_null(), "warm",
                   pod->warm, "state", sandbox_state(pod), "labels", labels, "created_at",
                   created >= 0 ? time_or_null(created) : json_string(""),
                   "expires_at", time_or_null(pod->expires_s));
}

/* "<cluster>.<pod>" -> adapter + pod (cached) owned by the tenant. Answers
 * the error itself and returns NULL when there is none. */
static const struct fr_pod *find_sandbox(struct ctx *c, const char *id, struct fr_adapter **out_a,
                                         char *pod_out, size_t cap) {
  const char *dot = strchr(id, '.');
  char cluster[64];
  struct fr_adapter *a;
  const struct fr_pod *pod;
  char msg[400];

  if (dot == NULL || dot == id || dot[1] == '\0' || (size_t)(dot - id) >= sizeof(cluster) ||
      strlen(dot + 1) >= cap || strchr(dot + 1, '/') != NULL) {
    reply_err(c, 400, "invalid_id", "a sandbox id looks like <cluster>.<pod>", NULL);
    return NULL;
  }
  memcpy(cluster, id, (size_t)(dot - id));
  cluster[dot - id] = '\0';
  snprintf(pod_out, cap, "%s", dot + 1);
  a = adapter_by_name(c->r, cluster);
  pod = a ? fr_adapter_pod(a, pod_out) : NULL;
  if (pod == NULL || !owned_by(pod, c->tenant) || fr_adapter_pod_leaving(a, pod)) {
    snprintf(msg, sizeof(msg), "no sandbox %.200s for this tenant", id);
    reply_err(c, 404, "sandbox_not_found", msg, NULL);
    return NULL;
  }
  *out_a = a;
  return pod;
}

/* ---------------------------------------------------------------------- */
/* list filters                                                            */

struct filters {
  struct fr_selector *sel;
  char pool[64], cluster[64], prefix[128];
  int any;
};

struct filter_parse {
  struct fr_buf sel;
  struct filters *f;
  int bad;
  char bad_key[64];
};

static int filter_kv(const char *key, const char *value, void *arg) {
  struct filter_parse *p = arg;

  p->f->any = 1;
  if (strcmp(key, "label") == 0) {
    if (strchr(value, '=') == NULL || value[0] == '=' ) {
      p->bad = 1;
      snprintf(p->bad_key, sizeof(p->bad_key), "label");
      return 1;
    }
    fr_buf_printf(&p->sel, "%s%s", p->sel.len ? "," : "", value);
  } else if (strcmp(key, "pool") == 0) {
    snprintf(p->f->pool, sizeof(p->f->pool), "%s", value);
  } else if (strcmp(key, "cluster") == 0) {
    snprintf(p->f->cluster, sizeof(p->f->cluster), "%s", value);
  } else if (strcmp(key, "name_prefix") == 0) {
    snprintf(p->f->prefix, sizeof(p->f->prefix), "%s", value);
  } else {
    p->bad = 1;
    snprintf(p->bad_key, sizeof(p->bad_key), "%s", key);
    return 1;
  }
  return 0;
}

static int parse_filters(struct ctx *c, const char *query, struct filters *f) {
  struct filter_parse p;
  char err[300], msg[400];

  memset(f, 0, sizeof(*f));
  memset(&p, 0, sizeof(p));
  fr_buf_init(&p.sel);
  p.f = f;
  fr_http_query_each(query, filter_kv, &p);
  if (p.bad) {
    fr_buf_free(&p.sel);
    snprintf(msg, sizeof(msg), "unknown or malformed filter \"%s\": use label=k=v, pool, cluster, name_prefix", p.bad_key);
    field_err(c, p.bad_key, msg);
    return -1;
  }
  if (fr_selector_parse_labels(p.sel.data ? p.sel.data : "", &f->sel, err, sizeof(err)) != 0) {
    fr_buf_free(&p.sel);
    field_err(c, "label", err);
    return -1;
  }
  fr_buf_free(&p.sel);
  return 0;
}

static const char *pod_label_lookup(const void *obj, const char *key) {
  return fr_pod_label(obj, key);
}

static int matches(struct filters *f, struct fr_adapter *a, const struct fr_pod *pod) {
  const char *name = pod->sbname, *pool = pod->pool;

  if (f->cluster[0] && strcmp(f->cluster, fr_adapter_name(a)) != 0)
    return 0;
  if (f->pool[0] && (pool == NULL || strcmp(pool, f->pool) != 0))
    return 0;
  if (f->prefix[0] && (name == NULL || strncmp(name, f->prefix, strlen(f->prefix)) != 0))
    return 0;
  return fr_selector_matches(f->sel, pod_label_lookup, pod);
}

static void list_sandboxes(struct ctx *c, const char *query) {
  struct filters f;
  json_t *arr = json_array();
  const struct fr_pod *pod;
  size_t i, cur;

  if (parse_filters(c, query, &f) != 0) {
    json_decref(arr);
    return;
  }
  for (i = 0; i < c->r->nadapters; i++) {
    struct fr_adapter *a = c->r->adapters[i];
    for (cur = 0; (pod = fr_adapter_pod_next(a, &cur)) != NULL;) {
      if (owned_by(pod, c->tenant) && matches(&f, a, pod) && !fr_adapter_pod_leaving(a, pod))
        json_array_append_new(arr, sandbox_json(a, pod));
    }
  }
  fr_selector_free(f.sel);
  reply(c, 200, json_pack("{s:o}", "sandboxes", arr), NULL);
}

/* ---------------------------------------------------------------------- */
/* terminate                                                               */

struct term {
  struct ctx *c;
  int pending;
  int single;           /* DELETE /v1/sandboxes/{id}: answer {"id","terminated"} */
  json_t *ids;
  json_t *failed;
};

static void term_done(struct term *t) {
  if (t->pending > 0)
    return;
  if (json_array_size(t->failed) > 0 && json_array_size(t->ids) == 0) {
    json_t *b = err_body("cluster_unavailable", "the owning cluster did not accept the delete");
    json_object_set(json_object_get(b, "error"), "failed", t->failed);
    reply(t->c, 503, b, NULL);
  } else if (t->single) {
    reply(t->c, 200, json_pack("{s:O,s:b}", "id", json_array_get(t->ids, 0), "terminated", 1), NULL);
  } else {
    json_t *b = json_pack("{s:I,s:O}", "terminated", (json_int_t)json_array_size(t->ids), "ids", t->ids);
    if (json_array_size(t->failed) > 0)
      json_object_set(b, "failed", t->failed);
    reply(t->c, 200, b, NULL);
  }
  json_decref(t->ids);
  json_decref(t->failed);
  free(t->c);
  free(t);
}

struct term_one {
  struct term *t;
  char id[256];
};

static void on_term(int status, const char *message, void *arg) {
  struct term_one *o = arg;

  /* 404: already gone, which is what was asked. */
  if (status == 200 || status == 202 || status == 404)
    json_array_append_new(o->t->ids, json_string(o->id));
  else
    json_array_append_new(o->t->failed, json_pack("{s:s,s:i,s:s}", "id", o->id, "status", status, "message", message));
  o->t->pending--;
  term_done(o->t);
  free(o);
}

static void term_start(struct term *t, struct fr_adapter *a, const char *pod) {
  struct term_one *o = calloc(1, sizeof(*o));

  if (o == NULL)
    return;
  o->t = t;
  snprintf(o->id, sizeof(o->id), "%s.%s", fr_adapter_name(a), pod);
  t->pending++;
  if (fr_adapter_sandbox_delete(a, pod, t->c->rid, on_term, o) != 0) {
    t->pending--;
    json_array_append_new(t->failed, json_pack("{s:s,s:s}", "id", o->id, "message", "cannot send the delete"));
    free(o);
  }
}

static struct term *term_new(struct ctx *c) {
  struct term *t = calloc(1, sizeof(*t));

  if (t == NULL)
    return NULL;
  t->c = c;
  t->ids = json_array();
  t->failed = json_array();
  /* A guard count so deletes finishing early cannot complete the batch. */
  t->pending = 1;
  ctx_defer(c);
  return t;
}

static void terminate_one(struct ctx *c, const char *id) {
  struct fr_adapter *a;
  char pod[200];
  struct term *t;

  if (find_sandbox(c, id, &a, pod, sizeof(pod)) == NULL) {
    free(c);
    return;
  }
  t = term_new(c);
  if (t == NULL) {
    reply_err(c, 503, "out_of_memory", "the router is out of memory", NULL);
    free(c);
    return;
  }
  t->single = 1;
  term_start(t, a, pod);
  t->pending--;
  term_done(t);
}

static void terminate_many(struct ctx *c, const char *query) {
  struct filters f;
  struct term *t;
  size_t i;

  if (parse_filters(c, query, &f) != 0) {
    free(c);
    return;
  }
  if (!f.any) {
    fr_selector_free(f.sel);
    field_err(c, "label", "terminating many sandboxes needs at least one filter (label=k=v, pool, cluster, name_prefix)");
    free(c);
    return;
  }
  t = term_new(c);
  if (t == NULL) {
    fr_selector_free(f.sel);
    reply_err(c, 503, "out_of_memory", "the router is out of memory", NULL);
    free(c);
    return;
  }
  for (i = 0; i < c->r->nadapters; i++) {
    struct fr_adapter *a = c->r->adapters[i];
    const struct fr_pod *pod;
    size_t cur;
    for (cur = 0; (pod = fr_adapter_pod_next(a, &cur)) != NULL;) {
      if (owned_by(pod, c->tenant) && matches(&f, a, pod) && !fr_adapter_pod_leaving(a, pod))
        term_start(t, a, pod->name);
    }
  }
  fr_selector_free(f.sel);
  t->pending--;
  term_done(t);
}

/* ---------------------------------------------------------------------- */
/* create                                                                  */

struct batch;

struct item {
  struct batch *b;
  int index;                  /* 1-based */
  int cluster;                /* index into b->cands, -1 = not placed */
  int done;
  int ok;
  int warm;
  json_t *sandbox;
};

struct cand {
  struct fr_adapter *a;
  int full;                   /* answered no-room / unavailable during this batch */
  int inflight;
  int64_t budget;             /* estimated room when the plan was made */
  int64_t reserved;           /* of the budget, still reserved on the adapter */
  int created, warm;
  char reason[300];
};

struct batch {
  struct ctx *c;
  struct fr_sandbox_spec spec;
  char name[NAME_MAX_LEN + 8];
  char *pool, *image;
  json_t *env, *labels;
  int n;
  int partial_ok;
  struct item *items;
  struct cand *cands;
  int ncands;
  int pending;                /* creates in flight */
  int next;                   /* next item to place */
  int failed;
  int rolling_back;
  int deletes_pending;
};

static void batch_pump(struct batch *b);

static void batch_free(struct batch *b) {
  int i;

  /* Whatever the plan reserved and never started goes back. */
  for (i = 0; i < b->ncands; i++)
    if (b->cands[i].reserved > 0)
      fr_adapter_reserve(b->cands[i].a, -b->cands[i].reserved);

  for (i = 0; i < b->n; i++)
    json_decref(b->items[i].sandbox);
  free(b->items);
  free(b->cands);
  free(b->pool);
  free(b->image);
  json_decref(b->env);
  json_decref(b->labels);
  free(b->c);
  free(b);
}

static json_t *placement_json(struct batch *b, int created) {
  json_t *cl = json_array();
  int i, warm = 0;

  for (i = 0; i < b->ncands; i++) {
    json_t *e = json_pack("{s:s,s:i,s:i}", "cluster", fr_adapter_name(b->cands[i].a), "created",
                          b->cands[i].created, "warm", b->cands[i].warm);
    if (b->cands[i].reason[0])
      json_object_set_new(e, "reason", json_string(b->cands[i].reason));
    warm += b->cands[i].warm;
    json_array_append_new(cl, e);
  }
  return json_pack("{s:i,s:i,s:i,s:i,s:i,s:o}", "requested", b->n, "created", created, "warm", warm,
                   "cold", created - warm, "shortfall", b->n - created, "clusters", cl);
}

static void on_rollback(int status, const char *message, void *arg) {
  struct batch *b = arg;
  int i, created = 0;

  (void)status;
  (void)message;
  if (--b->deletes_pending == 0) {
    json_t *body = err_body("no_capacity", "the federation cannot place the whole batch; what was created has been deleted");
    json_t *pl;
    for (i = 0; i < b->n; i++)
      created += b->items[i].ok;
    pl = placement_json(b, created);
    json_object_set_new(pl, "rolled_back", json_true());
    json_object_set_new(json_object_get(body, "error"), "placement", pl);
    json_object_set(json_object_get(body, "error"), "clusters", json_object_get(pl, "clusters"));
    reply(b->c, 503, body, "Retry-After: 5\r\n");
    batch_free(b);
  }
}

static void batch_finish(struct batch *b) {
  int i, created = 0;

  for (i = 0; i < b->n; i++)
    created += b->items[i].ok;
  /* A client that went away cannot learn the ids: keep nothing. */
  if (b->c->req != NULL && (created == b->n || (b->partial_ok && created > 0))) {
    json_t *arr = json_array();
    struct fr_buf pl;
    fr_buf_init(&pl);
    for (i = 0; i < b->ncands; i++)
      if (b->cands[i].created > 0)
        fr_buf_printf(&pl, "%s%s:%d", pl.len ? "," : "", fr_adapter_name(b->cands[i].a), b->cands[i].created);
    router_note(b->c->req, "placement", pl.data ? pl.data : "");
    fr_buf_free(&pl);
    for (i = 0; i < b->n; i++)
      if (b->items[i].ok)
        json_array_append(arr, b->items[i].sandbox);
    reply(b->c, 201, json_pack("{s:o,s:o}", "sandboxes", arr, "placement", placement_json(b, created)), NULL);
    batch_free(b);
    return;
  }
  /* All-or-nothing: delete everything this batch made, then answer. */
  b->rolling_back = 1;
  b->deletes_pending = 1;
  for (i = 0; i < b->n; i++) {
    struct item *it = &b->items[i];
    const char *id = it->ok ? json_string_value(json_object_get(it->sandbox, "id")) : NULL;
    const char *dot = id ? strchr(id, '.') : NULL;
    if (dot == NULL)
      continue;
    b->deletes_pending++;
    if (fr_adapter_sandbox_delete(b->cands[it->cluster].a, dot + 1, b->c->rid, on_rollback, b) != 0)
      b->deletes_pending--;
  }
  on_rollback(0, NULL, b);
}

static const char *sb_outcome(enum fr_sandbox_err e) {
  switch (e) {
  case FR_SB_OK: return "ok";
  case FR_SB_NO_ROOM: return "no_room";
  case FR_SB_UNAVAILABLE: return "unavailable";
  case FR_SB_TIMEOUT: return "timeout";
  default: return "failed";
  }
}

static void on_item(const struct fr_sandbox_result *res, void *arg) {
  struct item *it = arg;
  struct batch *b = it->b;
  struct cand *cd = &b->cands[it->cluster];
  struct router *r = b->c->r;
  struct fr_buf l;

  fr_buf_init(&l);
  metrics_label(&l, "cluster", fr_adapter_name(cd->a));
  metrics_label(&l, "outcome", sb_outcome(res->err));
  metrics_label(&l, "start", res->warm ? "warm" : "cold");
  metrics_inc(r->metrics, "fedrouter_creates_total", l.data ? l.data : "", 1);
  if (res->err == FR_SB_NO_ROOM || res->err == FR_SB_UNAVAILABLE || res->err == FR_SB_TIMEOUT) {
    /* The first no-room answer from a cluster moves the batch on: a spill. */
    if (!cd->full) {
      char why[300];
      fr_buf_reset(&l);
      metrics_label(&l, "cluster", fr_adapter_name(cd->a));
      metrics_label(&l, "reason", sb_outcome(res->err));
      metrics_inc(r->metrics, "fedrouter_spills_total", l.data ? l.data : "", 1);
      snprintf(why, sizeof(why), "%s: %s", sb_outcome(res->err), res->message ? res->message : "");
      router_event(r, fr_adapter_name(cd->a), why, b->c->rid);
    }
  }
  fr_buf_free(&l);
  b->pending--;
  cd->inflight--;
  if (res->err == FR_SB_OK) {
    it->done = it->ok = 1;
    it->warm = res->warm;
    it->sandbox = sandbox_json(cd->a, res->pod);
    cd->created++;
    cd->warm += res->warm;
  } else if (res->err == FR_SB_NO_ROOM || res->err == FR_SB_UNAVAILABLE || res->err == FR_SB_TIMEOUT) {
    /* An explicit signal: this cluster gets no more of the batch, and the
     * item goes back to be placed elsewhere. */
    cd->full = 1;
    snprintf(cd->reason, sizeof(cd->reason), "%s: %s",
             res->err == FR_SB_NO_ROOM ? "no room" : res->err == FR_SB_TIMEOUT ? "too slow" : "unavailable",
             res->message ? res->message : "");
    it->cluster = -1;
    if (it->index - 1 < b->next)
      b->next = it->index - 1;
  } else {
    it->done = 1;
    b->failed++;
    snprintf(cd->reason, sizeof(cd->reason), "failed: %s", res->message ? res->message : "");
  }
  batch_pump(b);
}

static int pick_cand(struct batch *b, int within_budget) {
  int k;

  for (k = 0; k < b->ncands; k++) {
    struct cand *cd = &b->cands[k];
    if (cd->full || cd->inflight >= PER_CLUSTER_INFLIGHT)
      continue;
    if (within_budget && cd->created + cd->inflight >= cd->budget)
      continue;
    return k;
  }
  return -1;
}

/* Places and starts as many items as the candidates can take now. */
static void batch_pump(struct batch *b) {
  int i, k, started = 1;

  while (started) {
    started = 0;
    for (i = b->next; i < b->n; i++) {
      struct item *it = &b->items[i];
      if (it->done || it->cluster >= 0)
        continue;
      /* In plan order: the first cluster under its room estimate with a free
       * slot; failing that, any cluster not yet full (the estimate is only
       * a preference: the cluster itself says when it is full). */
      k = pick_cand(b, 1);
      if (k < 0) {
        /* Follow the plan: while a cluster with planned budget left is
         * only busy (at its in-flight limit), wait for it rather than
         * spill early. Past every budget (the plan under-estimated), any
         * cluster not yet full may take more. */
        int busy_with_budget = 0;
        for (k = 0; k < b->ncands; k++)
          busy_with_budget |= !b->cands[k].full && b->cands[k].created + b->cands[k].inflight < b->cands[k].budget;
        if (busy_with_budget)
          break;
        k = pick_cand(b, 0);
      }
      if (k < 0) {
        int waiting = 0;
        for (k = 0; k < b->ncands; k++)
          waiting |= !b->cands[k].full && b->cands[k].inflight > 0;
        if (!waiting) {
          it->done = 1; /* nowhere left to go */
          continue;
        }
        break; /* a create in flight will free a slot or close a cluster */
      }
      {
        struct fr_sandbox_spec spec = b->spec;
        char name[NAME_MAX_LEN + 24];
        if (b->n > 1)
          snprintf(name, sizeof(name), "%s-%04d", b->name, it->index);
        else
          snprintf(name, sizeof(name), "%s", b->name);
        spec.name = name;
        it->cluster = k;
        if (fr_adapter_sandbox_create(b->cands[k].a, &spec, on_item, it) != 0) {
          it->cluster = -1;
          b->cands[k].full = 1;
          snprintf(b->cands[k].reason, sizeof(b->cands[k].reason), "unavailable: cannot start a create");
          started = 1;
          continue;
        }
        b->cands[k].inflight++;
        b->pending++;
        started = 1;
        /* The started create is counted in flight by the adapter now. */
        if (b->cands[k].reserved > 0) {
          b->cands[k].reserved--;
          fr_adapter_reserve(b->cands[k].a, -1);
        }
      }
    }
    while (b->next < b->n && (b->items[b->next].done || b->items[b->next].cluster >= 0))
      b->next++;
  }
  if (b->pending == 0) {
    for (i = 0; i < b->n; i++)
      if (!b->items[i].done)
        return; /* unreachable: every unplaced item was marked done above */
    batch_finish(b);
  }
}

static const char *const create_fields[] = {"name", "num_sandboxes", "pool", "image", "cpus", "memory_gb",
                                            "env", "secrets", "volumes", "labels", "region", "clusters",
                                            "timeout_s", "partial_ok", NULL};

struct body_spec {
  const char *name;
  int64_t n;
  const char *pool, *image;
  double cpus, memory_gb;
  json_t *env, *labels, *clusters;
  const char *region;
  int64_t timeout_s;
  int partial_ok;
};

/* Validates the create body; answers and returns -1 on error. */
static int parse_create(struct ctx *c, json_t *j, struct body_spec *s) {
  const struct fr_config *cfg = c->r->cfg;
  const char *k;
  json_t *v;
  size_t i;
  char msg[300];

  memset(s, 0, sizeof(*s));
  s->name = "sandbox";
  s->n = 1;
  s->timeout_s = cfg->default_lifetime_s;
  if (json_object_get(j, "secrets") || json_object_get(j, "volumes")) {
    field_err(c, json_object_get(j, "secrets") ? "secrets" : "volumes", "secrets and volumes are not supported yet");
    return -1;
  }
#define STR_FIELD(key, dst)                                                  \
  if ((v = json_object_get(j, key)) != NULL) {                               \
    if (!json_is_string(v) || json_string_length(v) == 0) {                  \
      field_err(c, key, key " must be a non-empty string");                  \
      return -1;                                                             \
    }                                                                        \
    dst = json_string_value(v);                                              \
  }
  STR_FIELD("name", s->name);
  STR_FIELD("pool", s->pool);
  STR_FIELD("image", s->image);
  STR_FIELD("region", s->region);
#undef STR_FIELD
  if (strlen(s->name) > NAME_MAX_LEN || !fr_label_value_valid(s->name) ||
      strspn(s->name, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(s->name)) {
    field_err(c, "name", "name must be 1-48 characters of a-z, 0-9 and '-', starting and ending alphanumeric");
    return -1;
  }
  if ((v = json_object_get(j, "num_sandboxes")) != NULL) {
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > cfg->max_batch) {
      snprintf(msg, sizeof(msg), "num_sandboxes must be an integer from 1 to %" PRId64, cfg->max_batch);
      field_err(c, "num_sandboxes", msg);
      return -1;
    }
    s->n = json_integer_value(v);
  }
  if ((v = json_object_get(j, "timeout_s")) != NULL) {
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > cfg->max_lifetime_s) {
      snprintf(msg, sizeof(msg), "timeout_s must be an integer from 1 to %" PRId64, cfg->max_lifetime_s);
      field_err(c, "timeout_s", msg);
      return -1;
    }
    s->timeout_s = json_integer_value(v);
  }
  if ((v = json_object_get(j, "cpus")) != NULL) {
    if (!json_is_number(v) || json_number_value(v) <= 0 || json_number_value(v) > 256) {
      field_err(c, "cpus", "cpus must be a number in (0, 256]");
      return -1;
    }
    s->cpus = json_number_value(v);
  }
  if ((v = json_object_get(j, "memory_gb")) != NULL) {
    if (!json_is_number(v) || json_number_value(v) <= 0 || json_number_value(v) > 4096) {
      field_err(c, "memory_gb", "memory_gb must be a number in (0, 4096]");
      return -1;
    }
    s->memory_gb = json_number_value(v);
  }
  if ((v = json_object_get(j, "partial_ok")) != NULL) {
    if (!json_is_boolean(v)) {
      field_err(c, "partial_ok", "partial_ok must be true or false");
      return -1;
    }
    s->partial_ok = json_is_true(v);
  }
  if ((v = json_object_get(j, "env")) != NULL) {
    json_t *e;
    if (!json_is_object(v)) {
      field_err(c, "env", "env must be an object of strings");
      return -1;
    }
    json_object_foreach(v, k, e) {
      if (!json_is_string(e) || *k == '\0' || strchr(k, '=') != NULL) {
        field_err(c, "env", "env must map names (without '=') to strings");
        return -1;
      }
    }
    s->env = v;
  }
  if ((v = json_object_get(j, "labels")) != NULL) {
    json_t *e;
    if (!json_is_object(v)) {
      field_err(c, "labels", "labels must be an object of strings");
      return -1;
    }
    json_object_foreach(v, k, e) {
      if (!json_is_string(e) || !fr_label_key_valid(k) || !fr_label_value_valid(json_string_value(e)) ||
          strncmp(k, FR_LABEL_PREFIX, strlen(FR_LABEL_PREFIX)) == 0) {
        snprintf(msg, sizeof(msg), "label \"%s\" is not a valid Kubernetes label (keys under %s are reserved)",
                 k, FR_LABEL_PREFIX);
        field_err(c, "labels", msg);
        return -1;
      }
    }
    s->labels = v;
  }
  if ((v = json_object_get(j, "clusters")) != NULL) {
    json_t *e;
    if (!json_is_array(v) || json_array_size(v) == 0) {
      field_err(c, "clusters", "clusters must be a non-empty array of cluster names");
      return -1;
    }
    json_array_foreach(v, i, e) {
      if (!json_is_string(e)) {
        field_err(c, "clusters", "clusters must be a non-empty array of cluster names");
        return -1;
      }
      if (adapter_by_name(c->r, json_string_value(e)) == NULL) {
        snprintf(msg, sizeof(msg), "no cluster named \"%s\"", json_string_value(e));
        reply_err(c, 404, "cluster_not_found", msg, NULL);
        return -1;
      }
    }
    s->clusters = v;
  }
  if (s->pool == NULL && s->image == NULL) {
    field_err(c, "image", "either pool or image is required");
    return -1;
  }
  return 0;
}

static int in_clusters(json_t *clusters, const char *name) {
  size_t i;
  json_t *e;

  if (clusters == NULL)
    return 1;
  json_array_foreach(clusters, i, e) {
    if (strcmp(json_string_value(e), name) == 0)
      return 1;
  }
  return 0;
}

/* The pool's shape from any cluster's ReplicaSet annotation. */
static int pool_shape(struct router *r, const char *pool, char *image, size_t cap, int64_t *cpu_m, int64_t *mem_b) {
  size_t i;

  for (i = 0; i < r->nadapters; i++) {
    json_t *rs, *spec;
    const char *key;
    json_object_foreach(fr_adapter_pool_sets(r->adapters[i]), key, rs) {
      const char *p = label_of(rs, FR_LABEL_POOL);
      if (p == NULL || strcmp(p, pool) != 0)
        continue;
      spec = json_loads(ann_of(rs, FR_ANN_POOL_SPEC) ? ann_of(rs, FR_ANN_POOL_SPEC) : "", 0, NULL);
      if (spec != NULL && json_string_value(json_object_get(spec, "image")) != NULL) {
        snprintf(image, cap, "%s", json_string_value(json_object_get(spec, "image")));
        *cpu_m = json_integer_value(json_object_get(spec, "cpu_millis"));
        *mem_b = json_integer_value(json_object_get(spec, "memory_bytes"));
        json_decref(spec);
        return 0;
      }
      json_decref(spec);
    }
  }
  return -ENOENT;
}

static int64_t tenant_count(struct router *r, const char *tenant) {
  int64_t n = 0;
  size_t i;

  for (i = 0; i < r->nadapters; i++)
    n += fr_adapter_tenant_sandboxes(r->adapters[i], tenant);
  return n;
}

/* The policy's plan for batch <b> (its spec must be filled) from a fresh
 * snapshot of the clusters. <pol> gets a reference the caller drops. */
static int make_plan(struct router *r, struct batch *b, const struct body_spec *s, const char *region,
                     struct fr_plan *plan, struct fr_cluster_state **states, struct fr_policy **pol) {
  const char **keys = NULL, **vals = NULL, **clusters = NULL;
  struct fr_placement_request preq;
  const char *k;
  json_t *v;
  size_t i = 0;
  int rc = -ENOMEM;

  memset(plan, 0, sizeof(*plan));
  *pol = fr_policy_ref(r->policy);
  *states = placement_states(r, &b->spec);
  keys = calloc(json_object_size(b->labels) + 1, sizeof(*keys));
  vals = calloc(json_object_size(b->labels) + 1, sizeof(*vals));
  clusters = calloc(json_array_size(s->clusters) + 1, sizeof(*clusters));
  if (*states == NULL || keys == NULL || vals == NULL || clusters == NULL)
    goto out;
  json_object_foreach(b->labels, k, v) {
    keys[i] = k;
    vals[i++] = json_string_value(v);
  }
  memset(&preq, 0, sizeof(preq));
  preq.tenant = b->spec.tenant;
  preq.pool = b->pool;
  preq.region = region;
  preq.label_keys = keys;
  preq.label_values = vals;
  preq.nlabels = i;
  json_array_foreach(s->clusters, i, v) clusters[i] = json_string_value(v);
  preq.clusters = s->clusters ? clusters : NULL;
  preq.nclusters = json_array_size(s->clusters);
  preq.count = b->n;
  rc = fr_policy_plan(*pol, *states, r->nadapters, &preq, plan);
out:
  free(keys);
  free(vals);
  free(clusters);
  return rc;
}

static void create_sandboxes(struct ctx *c, struct fr_http_req *req, int explain) {
  struct router *r = c->r;
  json_t *j = body_object(c, req, create_fields, 0);
  struct body_spec s;
  struct batch *b;
  const struct fr_config_tenant *t = NULL;
  const char *region;
  char image[256], msg[400];
  int64_t pool_cpu = 0, pool_mem = 0;
  struct fr_plan plan;
  struct fr_cluster_state *states = NULL;
  struct fr_policy *pol = NULL;
  size_t i;
  int k;

  if (j == NULL) {
    free(c);
    return;
  }
  if (parse_create(c, j, &s) != 0) {
    json_decref(j);
    free(c);
    return;
  }
  image[0] = '\0';
  if (s.pool != NULL && pool_shape(r, s.pool, image, sizeof(image), &pool_cpu, &pool_mem) != 0) {
    snprintf(msg, sizeof(msg), "no pool named \"%s\"", s.pool);
    reply_err(c, 404, "pool_not_found", msg, NULL);
    json_decref(j);
    free(c);
    return;
  }
  for (i = 0; i < r->cfg->ntenants; i++)
    if (strcmp(r->cfg->tenants[i].name, c->tenant) == 0)
      t = &r->cfg->tenants[i];
  if (t != NULL && t->max_sandboxes > 0 && tenant_count(r, c->tenant) + s.n > t->max_sandboxes) {
    snprintf(msg, sizeof(msg), "tenant %s may hold %" PRId64 " sandboxes; this request would exceed that",
             c->tenant, t->max_sandboxes);
    reply_err(c, 429, "tenant_limit", msg, "Retry-After: 10\r\n");
    json_decref(j);
    free(c);
    return;
  }
  b = calloc(1, sizeof(*b));
  if (b == NULL || (b->items = calloc((size_t)s.n, sizeof(*b->items))) == NULL ||
      (b->cands = calloc(r->nadapters ? r->nadapters : 1, sizeof(*b->cands))) == NULL) {
    if (b) {
      free(b->items);
      free(b);
    }
    reply_err(c, 503, "out_of_memory", "the router is out of memory", NULL);
    json_decref(j);
    free(c);
    return;
  }
  b->c = c;
  b->n = (int)s.n;
  b->partial_ok = s.partial_ok;
  snprintf(b->name, sizeof(b->name), "%s", s.name);
  b->pool = s.pool ? strdup(s.pool) : NULL;
  b->image = strdup(s.image ? s.image : image);
  b->env = s.env ? json_incref(s.env) : NULL;
  b->labels = s.labels ? json_incref(s.labels) : NULL;
  b->spec.tenant = c->tenant;
  b->spec.pool = b->pool;
  b->spec.image = b->image;
  /* A pool fixes the shape; otherwise the request's (default 1 cpu, 2 GiB). */
  b->spec.cpu_m = s.pool ? pool_cpu : (int64_t)((s.cpus > 0 ? s.cpus : 1.0) * 1000 + 0.5);
  b->spec.mem_b = s.pool ? pool_mem : (int64_t)((s.memory_gb > 0 ? s.memory_gb : 2.0) * 1073741824.0);
  b->spec.env = b->env;
  b->spec.labels = b->labels;
  b->spec.lifetime_s = s.timeout_s;
  b->spec.request_id = c->rid;
  for (i = 0; i < (size_t)b->n; i++) {
    b->items[i].b = b;
    b->items[i].index = (int)i + 1;
    b->items[i].cluster = -1;
  }
  /* The plan: the policy orders the clusters and splits the count; the
   * batch follows it, and moves items on when a cluster says it is full. */
  region = s.region ? s.region : fr_http_req_header(req, "X-Client-Region");
  if (region == NULL || *region == '\0')
    region = r->cfg->region;
  if (make_plan(r, b, &s, region, &plan, &states, &pol) != 0) {
    reply_err(c, 503, "out_of_memory", "the router is out of memory", NULL);
    goto plan_done;
  }
  if (explain) {
    json_t *out = json_pack("{s:{s:s,s:s},s:{s:s,s:s?,s:s,s:i},s:o}", "policy", "source", fr_policy_source(pol),
                            "version", fr_policy_version(pol), "request", "tenant", c->tenant, "pool", b->pool,
                            "region", region, "num_sandboxes", b->n, "plan", fr_plan_json(&plan, states));
    reply(c, 200, out, NULL);
    goto plan_done;
  }
  for (i = 0; i < plan.nentries; i++) {
    struct fr_plan_entry *e = &plan.entries[i];
    if (e->verdict != FR_PLAN_USE)
      continue;
    b->cands[b->ncands].a = r->adapters[e->cluster];
    b->cands[b->ncands].budget = e->count;
    /* Warm claims use pods that already hold their slots: only the cold
     * part of the plan needs reserving. */
    b->cands[b->ncands].reserved = e->count > e->warm ? e->count - e->warm : 0;
    b->ncands++;
  }
  if (b->ncands > 0 && !(plan.shortfall > 0 && !b->partial_ok)) {
    /* Reserve the plan at once, so a concurrent burst plans around it. */
    for (k = 0; k < b->ncands; k++)
      fr_adapter_reserve(b->cands[k].a, b->cands[k].reserved);
  } else {
    for (k = 0; k < b->ncands; k++)
      b->cands[k].reserved = 0; /* refused below: nothing was reserved */
  }
  if (b->ncands == 0 || (plan.shortfall > 0 && !b->partial_ok)) {
    /* Nothing to try, or the federation's free capacity cannot hold the
     * batch: say so at once, with every cluster's reason, rather than
     * create and roll back. */
    json_t *body = err_body("no_capacity", b->ncands == 0 ? "no cluster can take this request"
                                                           : "the federation does not have room for the whole batch");
    json_t *reasons = json_array();
    for (i = 0; i < plan.nentries; i++) {
      const struct fr_cluster_state *cs = &states[plan.entries[i].cluster];
      struct fr_adapter_view v;
      char why[400];
      /* Say what bounds the room when it is a quota, not the nodes. */
      fr_adapter_view(r->adapters[plan.entries[i].cluster], &v);
      if (v.quota_pods >= 0 && v.quota_pods <= cs->free_slots + v.inflight)
        snprintf(why, sizeof(why), "%s; the namespace's ResourceQuota allows %" PRId64 " more pods",
                 plan.entries[i].reason, v.quota_pods);
      else
        snprintf(why, sizeof(why), "%s", plan.entries[i].reason);
      json_array_append_new(reasons, json_pack("{s:s,s:I,s:I,s:s}", "cluster", cs->name, "free_slots",
                                               (json_int_t)cs->free_slots, "warm_ready",
                                               (json_int_t)cs->warm_ready, "reason", why));
    }
    json_object_set_new(json_object_get(body, "error"), "clusters", reasons);
    json_object_set_new(json_object_get(body, "error"), "shortfall", json_integer(plan.shortfall));
    reply(c, 503, body, "Retry-After: 5\r\n");
    goto plan_done;
  }
  fr_plan_free(&plan);
  free(states);
  fr_policy_unref(pol);
  json_decref(j); /* <region> and <s> borrowed from it until here */
  ctx_defer(c);
  batch_pump(b);
  return;
plan_done:
  fr_plan_free(&plan);
  free(states);
  fr_policy_unref(pol);
  json_decref(j);
  b->c = NULL;
  batch_free(b);
  free(c);
}


/* ---------------------------------------------------------------------- */
/* exec                                                                    */

struct exec_ctx {
  struct ctx *c;
  struct fr_adapter *a;
  int timeout_s;
  char **argv;
  char *stdin_data;
  size_t stdin_len;
};

static int utf8_valid(const char *s, size_t n) {
  json_t *j = json_stringn(s, n); /* jansson validates UTF-8 */
  int ok = j != NULL;

  json_decref(j);
  return ok;
}

static void put_output(json_t *body, const char *key, const char *enc_key, const char *data, size_t len) {
  if (utf8_valid(data, len)) {
    json_object_set_new(body, key, json_stringn(data, len));
  } else {
    char *b64 = malloc(fr_base64_len(len));
    if (b64 != NULL) {
      fr_base64_encode(data, len, b64);
      json_object_set_new(body, key, json_string(b64));
      json_object_set_new(body, enc_key, json_string("base64"));
      free(b64);
    }
  }
}

static void exec_free(struct exec_ctx *e) {
  size_t i;

  for (i = 0; e->argv && e->argv[i]; i++)
    free(e->argv[i]);
  free(e->argv);
  free(e->stdin_data);
  free(e->c);
  free(e);
}

static void exec_metrics(struct exec_ctx *e, const char *outcome, double ms) {
  struct router *r = e->c->r;
  struct fr_buf l;

  fr_buf_init(&l);
  metrics_label(&l, "cluster", fr_adapter_name(e->a));
  metrics_label(&l, "outcome", outcome);
  metrics_inc(r->metrics, "fedrouter_execs_total", l.data ? l.data : "", 1);
  fr_buf_reset(&l);
  metrics_label(&l, "cluster", fr_adapter_name(e->a));
  metrics_observe(r->metrics, "fedrouter_exec_duration_seconds", l.data ? l.data : "", ms / 1000.0);
  fr_buf_free(&l);
  if (e->c->req != NULL)
    router_note(e->c->req, "cluster", fr_adapter_name(e->a));
}

static void on_exec(const struct fr_kube_exec_result *res, void *arg) {
  struct exec_ctx *e = arg;
  json_t *body;
  int timed_out = res->timed_out;
  int exit_code = res->exit_code;

  if (res->error != 0 && !res->timed_out) {
    char msg[600];
    exec_metrics(e, "error", res->duration_ms);
    if (res->http_status == 0 && res->error != -EIO && res->error != -EPROTO)
      fr_adapter_report(e->a, 0);
    if (res->http_status == 404) {
      reply_err(e->c, 404, "sandbox_not_found", "the sandbox no longer exists", NULL);
    } else if (res->http_status == 400) {
      snprintf(msg, sizeof(msg), "the sandbox is not running: %s", res->message ? res->message : "");
      reply_err(e->c, 409, "sandbox_not_running", msg, NULL);
    } else if (res->error == -ECONNREFUSED || res->error == -EHOSTUNREACH || res->error == -ETIMEDOUT ||
               res->error == -ECONNRESET || res->error == -EACCES || res->http_status == 429 ||
               res->http_status >= 500) {
      /* The cluster, not the command: the exec did not run (or its result
       * was lost). Not retried: exec is not idempotent. */
      snprintf(msg, sizeof(msg), "the cluster could not run the exec: %s", res->message ? res->message : "");
      reply_err(e->c, 503, "cluster_unavailable", msg, "Retry-After: 5\r\n");
    } else {
      snprintf(msg, sizeof(msg), "exec failed: %s", res->message ? res->message : "unknown error");
      reply_err(e->c, 502, "exec_failed", msg, NULL);
    }
    exec_free(e);
    return;
  }
  /* The command runs under `timeout -s KILL`: SIGKILL (137) after at least
   * the timeout means the sandbox-side timer fired. */
  if (!timed_out && exit_code == 137 && res->duration_ms >= e->timeout_s * 1000.0 - 50)
    timed_out = 1;
  exec_metrics(e, timed_out ? "timed_out" : exit_code == 0 ? "ok" : "nonzero", res->duration_ms);
  body = json_object();
  put_output(body, "stdout", "stdout_encoding", res->out ? res->out : "", res->out_len);
  put_output(body, "stderr", "stderr_encoding", res->err ? res->err : "", res->err_len);
  json_object_set_new(body, "exit_code", timed_out ? json_null() : json_integer(exit_code));
  json_object_set_new(body, "timed_out", json_boolean(timed_out));
  json_object_set_new(body, "stdout_truncated", json_boolean(res->out_truncated));
  json_object_set_new(body, "stderr_truncated", json_boolean(res->err_truncated));
  json_object_set_new(body, "duration_ms", json_integer((json_int_t)(res->duration_ms + 0.5)));
  reply(e->c, 200, body, NULL);
  exec_free(e);
}

static void exec_sandbox(struct ctx *c, struct fr_http_req *req, const char *id) {
  static const char *const known[] = {"argv", "stdin", "env", "workdir", "timeout_s", "max_output_bytes", NULL};
  const struct fr_config *cfg = c->r->cfg;
  struct fr_adapter *a;
  struct exec_ctx *e;
  struct fr_kube_exec_opts o;
  json_t *j, *argv, *v, *env_ann = NULL;
  char pod_name[200], msg[300], tbuf[32];
  const char *k, *workdir = NULL;
  const struct fr_pod *pod;
  size_t i, n, nenv = 0, na = 0;
  int64_t timeout = 60, maxout = cfg->max_exec_output_bytes;

  /* NUL is allowed in the JSON so a NUL inside argv gets invalid_argv below
   * rather than a vague parse error; stdin may carry it legitimately. */
  j = body_object(c, req, known, JSON_ALLOW_NUL);
  if (j == NULL)
    goto fail;
  argv = json_object_get(j, "argv");
  if (!json_is_array(argv) || json_array_size(argv) == 0) {
    reply_err(c, 400, "invalid_argv", "argv must be a non-empty array of strings", NULL);
    goto fail;
  }
  json_array_foreach(argv, i, v) {
    if (!json_is_string(v) || (i == 0 && json_string_length(v) == 0) ||
        strlen(json_string_value(v)) != json_string_length(v)) {
      reply_err(c, 400, "invalid_argv", "argv must be strings without NUL bytes, the first non-empty", NULL);
      goto fail;
    }
  }
  if ((v = json_object_get(j, "timeout_s")) != NULL) {
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > cfg->max_exec_timeout_s) {
      snprintf(msg, sizeof(msg), "timeout_s must be an integer from 1 to %" PRId64, cfg->max_exec_timeout_s);
      field_err(c, "timeout_s", msg);
      goto fail;
    }
    timeout = json_integer_value(v);
  }
  if ((v = json_object_get(j, "max_output_bytes")) != NULL) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > cfg->max_exec_output_bytes) {
      snprintf(msg, sizeof(msg), "max_output_bytes must be an integer from 0 to %" PRId64, cfg->max_exec_output_bytes);
      field_err(c, "max_output_bytes", msg);
      goto fail;
    }
    maxout = json_integer_value(v);
  }
  if ((v = json_object_get(j, "stdin")) != NULL && !json_is_string(v)) {
    field_err(c, "stdin", "stdin must be a string");
    goto fail;
  }
  if ((v = json_object_get(j, "workdir")) != NULL) {
    if (!json_is_string(v) || json_string_value(v)[0] != '/') {
      field_err(c, "workdir", "workdir must be an absolute path");
      goto fail;
    }
    workdir = json_string_value(v);
  }
  if ((v = json_object_get(j, "env")) != NULL) {
    json_t *x;
    if (!json_is_object(v)) {
      field_err(c, "env", "env must be an object of strings");
      goto fail;
    }
    json_object_foreach(v, k, x) {
      if (!json_is_string(x) || *k == '\0' || strchr(k, '=') != NULL ||
          strlen(json_string_value(x)) != json_string_length(x)) {
        field_err(c, "env", "env must map names (without '=') to strings without NUL");
        goto fail;
      }
    }
  }
  if (workdir != NULL && strlen(workdir) != json_string_length(json_object_get(j, "workdir"))) {
    field_err(c, "workdir", "workdir must not contain NUL");
    goto fail;
  }
  pod = find_sandbox(c, id, &a, pod_name, sizeof(pod_name));
  if (pod == NULL)
    goto fail;
  {
    /* Fail fast instead of waiting out a connect timeout. */
    struct fr_adapter_view view;
    fr_adapter_view(a, &view);
    if (!view.healthy) {
      snprintf(msg, sizeof(msg), "cluster %s is unavailable", fr_adapter_name(a));
      reply_err(c, 503, "cluster_unavailable", msg, "Retry-After: 5\r\n");
      goto fail;
    }
  }
  /* Build: timeout -s KILL <t> [env [-C dir] K=V...] argv... — the timer
   * runs inside the sandbox, so the command dies even if nobody waits. */
  if (pod->env != NULL)
    env_ann = json_loads(pod->env, 0, NULL);
  n = json_array_size(argv) + 8 + json_object_size(json_object_get(j, "env")) + json_object_size(env_ann);
  e = calloc(1, sizeof(*e));
  if (e == NULL || (e->argv = calloc(n + 1, sizeof(char *))) == NULL) {
    free(e);
    json_decref(env_ann);
    reply_err(c, 503, "out_of_memory", "the router is out of memory", NULL);
    goto fail;
  }
  e->c = c;
  e->a = a;
  e->timeout_s = (int)timeout;
  snprintf(tbuf, sizeof(tbuf), "%" PRId64, timeout);
  e->argv[na++] = strdup("timeout");
  e->argv[na++] = strdup("-s");
  e->argv[na++] = strdup("KILL");
  e->argv[na++] = strdup(tbuf);
  if (workdir != NULL || json_object_size(json_object_get(j, "env")) > 0 || json_object_size(env_ann) > 0) {
    struct fr_buf kv;
    e->argv[na++] = strdup("env");
    if (workdir != NULL) {
      e->argv[na++] = strdup("-C");
      e->argv[na++] = strdup(workdir);
    }
    fr_buf_init(&kv);
    /* the sandbox's create-time env first, the call's env overrides it */
    json_object_foreach(env_ann, k, v) {
      if (!json_is_string(v) || json_object_get(json_object_get(j, "env"), k))
        continue;
      fr_buf_reset(&kv);
      fr_buf_printf(&kv, "%s=%s", k, json_string_value(v));
      e->argv[na++] = strdup(kv.data);
      nenv++;
    }
    json_object_foreach(json_object_get(j, "env"), k, v) {
      fr_buf_reset(&kv);
      fr_buf_printf(&kv, "%s=%s", k, json_string_value(v));
      e->argv[na++] = strdup(kv.data);
      nenv++;
    }
    fr_buf_free(&kv);
  }
  json_decref(env_ann);
  json_array_foreach(argv, i, v) e->argv[na++] = strdup(json_string_value(v));
  e->argv[na] = NULL;
  for (i = 0; i < na; i++) {
    if (e->argv[i] == NULL) {
      reply_err(c, 503, "out_of_memory", "the router is out of memory", NULL);
      e->c = NULL;
      exec_free(e);
      goto fail;
    }
  }
  if ((v = json_object_get(j, "stdin")) != NULL && json_string_length(v) > 0) {
    e->stdin_len = json_string_length(v);
    e->stdin_data = malloc(e->stdin_len);
    if (e->stdin_data)
      memcpy(e->stdin_data, json_string_value(v), e->stdin_len);
  }
  memset(&o, 0, sizeof(o));
  o.argv = e->argv;
  o.stdin_data = e->stdin_data;
  o.stdin_len = e->stdin_len;
  o.max_stdout = o.max_stderr = (size_t)maxout;
  /* The sandbox kills the command at timeout_s; give the answer a little
   * longer to arrive before giving up on the stream. */
  o.timeout_ms = (uint64_t)timeout * 1000 + 5000;
  o.request_id = c->rid;
  json_decref(j);
  ctx_defer(c);
  if (fr_kube_exec(fr_adapter_client(a), fr_adapter_namespace(a), pod_name, &o, on_exec, e, NULL) != 0) {
    reply_err(c, 503, "cluster_unavailable", "cannot start the exec", NULL);
    exec_free(e);
  }
  (void)nenv;
  return;
fail:
  json_decref(j);
  free(c);
}

/* ---------------------------------------------------------------------- */
/* pools                                                                   */

struct pool_op {
  struct ctx *c;
  int pending;
  int status;           /* worst HTTP status seen */
  json_t *results;
  char name[64];
  int creating;
};

static void pool_reply(struct pool_op *p);

static void on_pool_call(int status, const char *message, void *arg) {
  struct pool_op *p = arg;

  (void)message;
  if (status == 0 || status >= 300)
    p->status = p->status == 0 || status > p->status || status == 0 ? (status ? status : 503) : p->status;
  json_array_append_new(p->results, json_pack("{s:i,s:s}", "status", status, "message", message ? message : ""));
  if (--p->pending == 0)
    pool_reply(p);
}

static json_t *pool_json(struct router *r, const char *name) {
  json_t *clusters = json_array(), *out = NULL;
  size_t i;

  for (i = 0; i < r->nadapters; i++) {
    struct fr_adapter_view v;
    json_t *rs;
    const char *key;
    size_t k;
    json_object_foreach(fr_adapter_pool_sets(r->adapters[i]), key, rs) {
      const char *p = label_of(rs, FR_LABEL_POOL);
      json_t *spec;
      int64_t ready = 0;
      if (p == NULL || strcmp(p, name) != 0)
        continue;
      fr_adapter_view(r->adapters[i], &v);
      for (k = 0; k < v.npools; k++)
        if (strcmp(v.pools[k].name, name) == 0)
          ready = v.pools[k].ready;
      if (out == NULL) {
        spec = json_loads(ann_of(rs, FR_ANN_POOL_SPEC) ? ann_of(rs, FR_ANN_POOL_SPEC) : "{}", 0, NULL);
        out = json_pack("{s:s,s:s,s:f,s:f}", "name", name, "image",
                        json_string_value(json_object_get(spec, "image")) ? json_string_value(json_object_get(spec, "image")) : "",
                        "cpus", json_integer_value(json_object_get(spec, "cpu_millis")) / 1000.0, "memory_gb",
                        json_integer_value(json_object_get(spec, "memory_bytes")) / 1073741824.0);
        json_decref(spec);
      }
      json_array_append_new(clusters, json_pack("{s:s,s:I,s:I}", "cluster", fr_adapter_name(r->adapters[i]), "target",
                                                (json_int_t)json_integer_value(json_object_get(json_object_get(rs, "spec"), "replicas")),
                                                "ready", (json_int_t)ready));
    }
  }
  if (out == NULL) {
    json_decref(clusters);
    return NULL;
  }
  json_object_set_new(out, "clusters", clusters);
  return out;
}

static void pool_reply(struct pool_op *p) {
  struct ctx *c = p->c;

  if (p->status == 0) {
    json_t *pj = pool_json(c->r, p->name);
    if (pj == NULL) /* the caches have not seen it yet */
      pj = json_pack("{s:s}", "name", p->name);
    json_object_set(pj, "results", p->results);
    reply(c, p->creating ? 201 : 200, pj, NULL);
  } else {
    json_t *b = err_body(p->status == 409 ? "pool_exists" : p->status == 404 ? "pool_not_found" : "cluster_unavailable",
                         p->status == 409 ? "a pool with that name exists" : p->status == 404 ? "no such pool" : "a cluster did not accept the change");
    json_object_set(json_object_get(b, "error"), "results", p->results);
    reply(c, p->status == 409 || p->status == 404 ? p->status : 503, b, NULL);
  }
  json_decref(p->results);
  free(c);
  free(p);
}

static struct pool_op *pool_op_new(struct ctx *c, const char *name) {
  struct pool_op *p = calloc(1, sizeof(*p));

  if (p == NULL)
    return NULL;
  p->c = c;
  p->results = json_array();
  p->pending = 1; /* guard */
  snprintf(p->name, sizeof(p->name), "%s", name);
  ctx_defer(c);
  return p;
}

static int pool_name_valid(const char *n) {
  size_t len = strlen(n);

  return len > 0 && len <= 40 && strspn(n, "abcdefghijklmnopqrstuvwxyz0123456789-") == len && n[0] != '-' &&
         n[len - 1] != '-';
}

static void create_pool(struct ctx *c, struct fr_http_req *req) {
  static const char *const known[] = {"name", "image", "cpus", "memory_gb", "replicas", "clusters", NULL};
  json_t *j = body_object(c, req, known, 0), *v, *clusters;
  struct fr_pool_spec spec;
  struct pool_op *p;
  char msg[300];
  size_t i;

  if (j == NULL)
    goto fail;
  memset(&spec, 0, sizeof(spec));
  spec.name = json_string_value(json_object_get(j, "name"));
  spec.image = json_string_value(json_object_get(j, "image"));
  if (spec.name == NULL || !pool_name_valid(spec.name)) {
    field_err(c, "name", "name must be 1-40 characters of a-z, 0-9 and '-'");
    goto fail;
  }
  if (spec.image == NULL || *spec.image == '\0' || strpbrk(spec.image, "\"\\ ") != NULL) {
    field_err(c, "image", "image must be a container image reference");
    goto fail;
  }
  v = json_object_get(j, "cpus");
  if (v != NULL && (!json_is_number(v) || json_number_value(v) <= 0 || json_number_value(v) > 256)) {
    field_err(c, "cpus", "cpus must be a number in (0, 256]");
    goto fail;
  }
  spec.cpu_m = (int64_t)((v ? json_number_value(v) : 1.0) * 1000 + 0.5);
  v = json_object_get(j, "memory_gb");
  if (v != NULL && (!json_is_number(v) || json_number_value(v) <= 0 || json_number_value(v) > 4096)) {
    field_err(c, "memory_gb", "memory_gb must be a number in (0, 4096]");
    goto fail;
  }
  spec.mem_b = (int64_t)((v ? json_number_value(v) : 2.0) * 1073741824.0);
  v = json_object_get(j, "replicas");
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 100000) {
    field_err(c, "replicas", "replicas must be an integer from 0 to 100000 (per cluster)");
    goto fail;
  }
  spec.replicas = json_integer_value(v);
  clusters = json_object_get(j, "clusters");
  if (clusters != NULL) {
    json_array_foreach(clusters, i, v) {
      if (!json_is_string(v) || adapter_by_name(c->r, json_string_value(v)) == NULL) {
        snprintf(msg, sizeof(msg), "no cluster named \"%s\"", json_is_string(v) ? json_string_value(v) : "?");
        reply_err(c, 404, "cluster_not_found", msg, NULL);
        goto fail;
      }
    }
  }
  {
    json_t *existing = pool_json(c->r, spec.name);
    if (existing != NULL) {
      json_decref(existing);
      reply_err(c, 409, "pool_exists", "a pool with that name exists", NULL);
      goto fail;
    }
  }
  p = pool_op_new(c, spec.name);
  if (p == NULL) {
    reply_err(c, 503, "out_of_memory", "the router is out of memory", NULL);
    goto fail;
  }
  p->creating = 1;
  for (i = 0; i < c->r->nadapters; i++) {
    struct fr_adapter *a = c->r->adapters[i];
    if (clusters != NULL && !in_clusters(clusters, fr_adapter_name(a)))
      continue;
    p->pending++;
    if (fr_adapter_pool_create(a, &spec, on_pool_call, p) != 0)
      on_pool_call(0, "cannot send the create", p);
  }
  json_decref(j);
  on_pool_call(200, NULL, p); /* drop the guard */
  return;
fail:
  json_decref(j);
  free(c);
}

static int pool_in(struct fr_adapter *a, const char *name) {
  json_t *rs;
  const char *key;

  json_object_foreach(fr_adapter_pool_sets(a), key, rs) {
    const char *p = label_of(rs, FR_LABEL_POOL);
    if (p != NULL && strcmp(p, name) == 0)
      return 1;
  }
  return 0;
}

static void change_pool(struct ctx *c, struct fr_http_req *req, const char *name, int del) {
  struct pool_op *p;
  int64_t replicas = 0;
  size_t i;
  json_t *pj = pool_json(c->r, name);

  if (pj == NULL) {
    reply_err(c, 404, "pool_not_found", "no such pool", NULL);
    free(c);
    return;
  }
  json_decref(pj);
  if (!del) {
    json_t *j = json_loadb(req->body, req->body_len, 0, NULL), *v = json_object_get(j, "replicas");
    if (!json_is_object(j) || json_object_size(j) != 1 || !json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > 100000) {
      json_decref(j);
      reply_err(c, 400, json_is_object(j) ? "invalid_field" : "invalid_json",
                "the body must be {\"replicas\": N} with 0 <= N <= 100000", NULL);
      free(c);
      return;
    }
    replicas = json_integer_value(v);
    json_decref(j);
  }
  p = pool_op_new(c, name);
  if (p == NULL) {
    reply_err(c, 503, "out_of_memory", "the router is out of memory", NULL);
    free(c);
    return;
  }
  for (i = 0; i < c->r->nadapters; i++) {
    struct fr_adapter *a = c->r->adapters[i];
    int rc;
    if (!pool_in(a, name))
      continue;
    p->pending++;
    rc = del ? fr_adapter_pool_delete(a, name, on_pool_call, p) : fr_adapter_pool_resize(a, name, replicas, on_pool_call, p);
    if (rc != 0)
      on_pool_call(0, "cannot send the request", p);
  }
  on_pool_call(200, NULL, p);
}

static void list_pools(struct ctx *c) {
  json_t *names = json_object(), *arr = json_array(), *rs, *dummy;
  const char *key;
  size_t i;

  for (i = 0; i < c->r->nadapters; i++) {
    json_object_foreach(fr_adapter_pool_sets(c->r->adapters[i]), key, rs) {
      const char *p = label_of(rs, FR_LABEL_POOL);
      if (p != NULL)
        json_object_set_new(names, p, json_true());
    }
  }
  json_object_foreach(names, key, dummy) {
    json_t *pj = pool_json(c->r, key);
    if (pj != NULL)
      json_array_append_new(arr, pj);
  }
  json_decref(names);
  reply(c, 200, json_pack("{s:o}", "pools", arr), NULL);
  free(c);
}

/* ---------------------------------------------------------------------- */
/* dispatch                                                                */

static int method_is(struct fr_http_req *req, const char *m) {
  return strcmp(req->method, m) == 0;
}

static void not_allowed(struct ctx *c, const char *allow) {
  char h[64];

  snprintf(h, sizeof(h), "Allow: %s\r\n", allow);
  reply_err(c, 405, "method_not_allowed", "method not allowed here", h);
  free(c);
}

int router_sandboxes(struct router *r, struct fr_http_req *req, const char *tenant) {
  const char *p = req->path;
  struct ctx *c;

  if (strncmp(p, "/v1/sandboxes", 13) != 0 && strncmp(p, "/v1/pools", 9) != 0 &&
      strcmp(p, "/v1/placement/explain") != 0)
    return 0;
  c = ctx_new(r, req, tenant);
  if (c == NULL) {
    router_error(req, 503, "out_of_memory", "the router is out of memory", NULL);
    return 1;
  }
  if (strcmp(p, "/v1/placement/explain") == 0) {
    if (method_is(req, "POST"))
      create_sandboxes(c, req, 1);
    else
      not_allowed(c, "POST");
  } else if (strcmp(p, "/v1/sandboxes") == 0) {
    if (method_is(req, "POST"))
      create_sandboxes(c, req, 0);
    else if (method_is(req, "GET")) {
      list_sandboxes(c, req->query);
      free(c);
    } else if (method_is(req, "DELETE"))
      terminate_many(c, req->query);
    else
      not_allowed(c, "GET, POST, DELETE");
  } else if (strncmp(p, "/v1/sandboxes/", 14) == 0) {
    char id[300];
    const char *rest = p + 14, *slash = strchr(rest, '/');
    size_t idlen = slash ? (size_t)(slash - rest) : strlen(rest);
    if (idlen == 0 || idlen >= sizeof(id)) {
      reply_err(c, 400, "invalid_id", "a sandbox id looks like <cluster>.<pod>", NULL);
      free(c);
      return 1;
    }
    memcpy(id, rest, idlen);
    id[idlen] = '\0';
    if (slash != NULL && strcmp(slash, "/exec") == 0) {
      if (method_is(req, "POST"))
        exec_sandbox(c, req, id);
      else
        not_allowed(c, "POST");
    } else if (slash != NULL) {
      reply_err(c, 404, "not_found", "no such endpoint", NULL);
      free(c);
    } else if (method_is(req, "GET")) {
      struct fr_adapter *a;
      char pod[200];
      const struct fr_pod *obj = find_sandbox(c, id, &a, pod, sizeof(pod));
      if (obj != NULL)
        reply(c, 200, sandbox_json(a, obj), NULL);
      free(c);
    } else if (method_is(req, "DELETE")) {
      terminate_one(c, id);
    } else {
      not_allowed(c, "GET, DELETE");
    }
  } else if (strcmp(p, "/v1/pools") == 0) {
    if (method_is(req, "POST"))
      create_pool(c, req);
    else if (method_is(req, "GET"))
      list_pools(c);
    else
      not_allowed(c, "GET, POST");
  } else if (strncmp(p, "/v1/pools/", 10) == 0 && strchr(p + 10, '/') == NULL && p[10] != '\0') {
    const char *name = p + 10;
    if (method_is(req, "GET")) {
      json_t *pj = pool_json(r, name);
      if (pj != NULL)
        reply(c, 200, pj, NULL);
      else
        reply_err(c, 404, "pool_not_found", "no such pool", NULL);
      free(c);
    } else if (method_is(req, "PATCH")) {
      change_pool(c, req, name, 0);
    } else if (method_is(req, "DELETE")) {
      change_pool(c, req, name, 1);
    } else {
      not_allowed(c, "GET, PATCH, DELETE");
    }
  } else {
    reply_err(c, 404, "not_found", "no such endpoint", NULL);
    free(c);
  }
  return 1;
}
