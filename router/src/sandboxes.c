/* sandboxes.c - /v1/sandboxes: list, get, terminate (one or many), and
 * the dispatch of every /v1/sandboxes, /v1/pools and /v1/placement path to
 * its handler file:
 *
 *   create.c   POST /v1/sandboxes, POST /v1/placement/explain (batches: batch.c)
 *   exec.c     POST /v1/sandboxes/{id}/exec
 *   pools.c    /v1/pools, /v1/pools/{name}
 *
 * Every handler gets the request's record (api.h) and answers through it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/http.h"
#include "fr/labels.h"
#include "api.h"
#include "router.h"
#include "route_types.h"
#include "workspaces.h"

/* ---------------------------------------------------------------------- */
/* list filters                                                            */

struct filters {
  struct fr_selector *sel;
  char pool[64], cluster[64], prefix[128];
  char state[16];   /* "running" (pods only) or "paused" (paused only); "" = both */
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
  /* An empty value would match everything (name_prefix=) or nothing: a
   * filter that says nothing is refused, never read as "all". */
  if (value[0] == '\0') {
    p->bad = 1;
    snprintf(p->bad_key, sizeof(p->bad_key), "%.60s", key);
    return 1;
  }
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
  } else if (strcmp(key, "state") == 0 && (strcmp(value, "running") == 0 || strcmp(value, "paused") == 0)) {
    snprintf(p->f->state, sizeof(p->f->state), "%s", value);
  } else {
    p->bad = 1;
    snprintf(p->bad_key, sizeof(p->bad_key), "%.60s", key);
    return 1;
  }
  return 0;
}

static int parse_filters(struct api_req *q, const char *query, struct filters *f) {
  struct filter_parse p;
  char err[300], msg[400];

  memset(f, 0, sizeof(*f));
  memset(&p, 0, sizeof(p));
  fr_buf_init(&p.sel);
  p.f = f;
  fr_http_query_each(query, filter_kv, &p);
  if (p.bad) {
    fr_buf_free(&p.sel);
    snprintf(msg, sizeof(msg), "unknown, empty or malformed filter \"%s\": use label=k=v, pool, cluster, name_prefix (non-empty), state=running|paused", p.bad_key);
    api_field_fail(q, p.bad_key, msg);
    return -1;
  }
  if (fr_selector_parse_labels(p.sel.data ? p.sel.data : "", &f->sel, err, sizeof(err)) != 0) {
    fr_buf_free(&p.sel);
    api_field_fail(q, "label", err);
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

/* The clusters whose sandbox cache has not completed its first list, as a
 * JSON array, or NULL when there are none: a listing (or a terminate by
 * filter) cannot speak for them yet, and says so. */
static json_t *not_synced(struct router *r) {
  json_t *arr = NULL;
  size_t i;

  for (i = 0; i < r->nadapters; i++) {
    if (fr_adapter_pods_synced(r->adapters[i]))
      continue;
    if (arr == NULL && (arr = json_array()) == NULL)
      return NULL;
    json_array_append_new(arr, json_string(fr_adapter_name(r->adapters[i])));
  }
  return arr;
}

static const char *paused_label(const void *obj, const char *key) {
  return json_string_value(json_object_get(json_object_get(((const struct fr_workspace *)obj)->spec, "labels"), key));
}

static int paused_matches(struct filters *f, struct fr_adapter *a, const struct fr_workspace *w) {
  if (f->cluster[0] && strcmp(f->cluster, fr_adapter_name(a)) != 0)
    return 0;
  if (f->pool[0] && (w->pool == NULL || strcmp(w->pool, f->pool) != 0))
    return 0;
  if (f->prefix[0] && (w->name == NULL || strncmp(w->name, f->prefix, strlen(f->prefix)) != 0))
    return 0;
  return fr_selector_matches(f->sel, paused_label, w);
}

/* The tenant's paused sandboxes of <a> matching <f> into <arr>; with
 * <ids_only>, their ids (terminate by filter). */
static void paused_each(struct api_req *q, struct fr_adapter *a, struct filters *f, json_t *arr) {
  struct fr_workspace w;
  void *cur = NULL;

  while (fr_adapter_workspace_next(a, &cur, &w) == 0) {
    if (w.paused && w.tenant != NULL && strcmp(w.tenant, q->tenant) == 0 && !workspace_live_pod(a, w.pod) &&
        json_object_get(json_object_get(w.claim_json, "metadata"), "deletionTimestamp") == NULL &&
        paused_matches(f, a, &w))
      json_array_append_new(arr, workspace_paused_json(a, &w));
    fr_workspace_clear(&w);
  }
}

static void list_sandboxes(struct api_req *q) {
  struct filters f;
  json_t *arr = json_array(), *body, *ns;
  const struct fr_pod *pod;
  size_t i, cur;

  if (parse_filters(q, q->req->query, &f) != 0) {
    json_decref(arr);
    return;
  }
  for (i = 0; i < q->r->nadapters; i++) {
    struct fr_adapter *a = q->r->adapters[i];
    for (cur = 0; f.state[0] != 'p' && (pod = fr_adapter_pod_next(a, &cur)) != NULL;) {
      if (api_owned_by(pod, q->tenant) && matches(&f, a, pod) && api_sandbox_visible(a, pod))
        json_array_append_new(arr, api_sandbox_json(q->r, a, pod, 0));
    }
    /* Paused sandboxes are their workspace claims (workspaces.c). */
    if (f.state[0] != 'r')
      paused_each(q, a, &f, arr);
  }
  fr_selector_free(f.sel);
  body = json_pack("{s:o}", "sandboxes", arr);
  if (body != NULL && (ns = not_synced(q->r)) != NULL)
    json_object_set_new(body, "not_synced", ns);
  api_reply(q, 200, body, NULL);
}

/* ---------------------------------------------------------------------- */
/* terminate                                                               */

/* A terminate: one sandbox, or every sandbox a filter matches. A filter
 * may match a million: their pod names are collected first, packed, and
 * the deletes go out at most TERM_WINDOW per cluster at a time, the next
 * as each one is answered, so the calls queued in the clients, their
 * records here and the heap they churn stay bounded (a delete each at
 * once was ~600 bytes a sandbox in flight, 600 MB for a million, which
 * the heap then kept). 32: a cluster's API server takes deletes as fast
 * with 32 in flight as with more (20,010 over 20 kubesims: 5.1 s with 32,
 * 18.7 s with 256 a cluster; loadtest/bench.sh scale), and the client
 * then opens 32 connections, not 64 (~40 KB each with TLS). The
 * terminated ids are kept as the answer's JSON text (~20 bytes each)
 * rather than a tree. */
#define TERM_WINDOW 32

struct term_cluster {
  struct fr_adapter *a;
  struct fr_buf names;  /* its pod names to delete, NUL-separated */
  size_t next;          /* offset of the next one to start */
  int inflight;
};

struct term {
  struct api_req *q;
  json_t *not_synced;   /* terminate by filter: clusters it could not look in yet (NULL: none) */
  int pending;          /* deletes started and not answered, plus a guard */
  int single;           /* DELETE /v1/sandboxes/{id}: answer {"id","terminated"} */
  int64_t terminated;
  struct fr_buf ids;    /* "\"c1.sb-x\",\"c1.sb-y\"" */
  json_t *failed;
  struct term_cluster *cl; /* terminate by filter: one per adapter */
  size_t ncl;
};

struct term_one {
  struct term *t;
  struct term_cluster *tc; /* NULL for the single terminate */
  char id[];
};

static void term_free(struct term *t) {
  size_t i;

  for (i = 0; i < t->ncl; i++)
    fr_buf_free(&t->cl[i].names);
  free(t->cl);
  fr_buf_free(&t->ids);
  json_decref(t->failed);
  json_decref(t->not_synced);
  free(t);
}

static void term_done(struct term *t) {
  if (t->pending > 0)
    return;
  if (json_array_size(t->failed) > 0 && t->terminated == 0) {
    json_t *b = api_err_body("cluster_unavailable", "the owning cluster did not accept the delete");
    json_object_set(json_object_get(b, "error"), "failed", t->failed);
    api_reply(t->q, 503, b, NULL);
  } else if (t->single) {
    /* the one id, without its quotes */
    json_t *id = json_stringn(t->ids.data + 1, t->ids.len - 2);
    api_reply(t->q, 200, json_pack("{s:o,s:b}", "id", id, "terminated", 1), NULL);
  } else {
    /* Built as text: a million ids as a tree would be ~100 MB more. */
    struct fr_buf b;
    char *tail = NULL;
    json_t *extra = json_object();
    fr_buf_init(&b);
    if (json_array_size(t->failed) > 0)
      json_object_set(extra, "failed", t->failed);
    if (t->not_synced != NULL)
      json_object_set(extra, "not_synced", t->not_synced);
    tail = json_object_size(extra) > 0 ? json_dumps(extra, JSON_COMPACT) : NULL;
    fr_buf_printf(&b, "{\"terminated\":%lld,\"ids\":[", (long long)t->terminated);
    if (t->ids.len > 0)
      fr_buf_append(&b, t->ids.data, t->ids.len);
    fr_buf_puts(&b, "]");
    if (tail != NULL) {
      fr_buf_puts(&b, ",");
      fr_buf_puts(&b, tail + 1); /* its members, and its closing brace */
    } else {
      fr_buf_puts(&b, "}");
    }
    if (b.data == NULL || (json_object_size(extra) > 0 && tail == NULL))
      api_oom(t->q);
    else
      api_reply_raw(t->q, 200, "application/json", b.data, b.len);
    free(tail);
    json_decref(extra);
    fr_buf_free(&b);
  }
  term_free(t);
}

static void term_pump(struct term *t);

static void on_term(int status, const char *message, void *arg) {
  struct term_one *o = arg;
  struct term *t = o->t;

  /* 404: already gone, which is what was asked. */
  if (status == 200 || status == 202 || status == 404) {
    if (t->ids.len > 0)
      fr_buf_putc(&t->ids, ',');
    fr_buf_put_json_str(&t->ids, o->id, strlen(o->id));
    t->terminated++;
  } else {
    json_array_append_new(t->failed, json_pack("{s:s,s:i,s:s}", "id", o->id, "status", status, "message", message));
  }
  if (o->tc != NULL)
    o->tc->inflight--;
  free(o);
  t->pending--;
  term_pump(t);
  term_done(t);
}

static void term_start(struct term *t, struct term_cluster *tc, struct fr_adapter *a, const char *pod) {
  size_t n = strlen(fr_adapter_name(a)) + strlen(pod) + 2;
  struct term_one *o = malloc(sizeof(*o) + n);

  if (o == NULL) {
    json_array_append_new(t->failed, json_pack("{s:s,s:s,s:s}", "cluster", fr_adapter_name(a), "pod", pod,
                                               "message", "out of memory"));
    return;
  }
  o->t = t;
  o->tc = tc;
  snprintf(o->id, n, "%s.%s", fr_adapter_name(a), pod);
  t->pending++;
  if (tc != NULL)
    tc->inflight++;
  if (fr_adapter_sandbox_delete(a, pod, t->q->rid, on_term, o) != 0) {
    t->pending--;
    if (tc != NULL)
      tc->inflight--;
    json_array_append_new(t->failed, json_pack("{s:s,s:s}", "id", o->id, "message", "cannot send the delete"));
    free(o);
  }
}

/* Starts the next deletes of every cluster, up to TERM_WINDOW each. */
static void term_pump(struct term *t) {
  size_t i;

  for (i = 0; i < t->ncl; i++) {
    struct term_cluster *tc = &t->cl[i];
    while (tc->inflight < TERM_WINDOW && tc->next < tc->names.len) {
      const char *pod = tc->names.data + tc->next;
      tc->next += strlen(pod) + 1;
      term_start(t, tc, tc->a, pod);
    }
  }
}

/* NULL after answering out_of_memory. */
static struct term *term_new(struct api_req *q) {
  struct term *t = calloc(1, sizeof(*t));

  if (t == NULL || (t->failed = json_array()) == NULL) {
    free(t);
    api_oom(q);
    return NULL;
  }
  t->q = q;
  fr_buf_init(&t->ids);
  /* A guard count so deletes finishing early cannot complete the batch. */
  t->pending = 1;
  api_defer(q);
  return t;
}

static void terminate_one(struct api_req *q, const char *id) {
  struct fr_adapter *a;
  const struct fr_pod *pod;
  struct fr_workspace w;
  struct term *t;

  /* A paused sandbox is its workspace claim: deleting it is the end. */
  if (workspace_find_paused(q, id, &a, &w)) {
    char pod_name[200];
    snprintf(pod_name, sizeof(pod_name), "%s", w.pod);
    fr_workspace_clear(&w);
    if ((t = term_new(q)) == NULL)
      return;
    t->single = 1;
    term_start(t, NULL, a, pod_name);
    t->pending--;
    term_done(t);
    return;
  }
  pod = api_find_sandbox(q, id, &a);
  if (pod == NULL)
    return;
  if ((t = term_new(q)) == NULL)
    return;
  t->single = 1;
  term_start(t, NULL, a, pod->name);
  t->pending--;
  term_done(t);
}

static void terminate_many(struct api_req *q) {
  struct filters f;
  struct term *t;
  size_t i;
  int oom = 0;

  if (parse_filters(q, q->req->query, &f) != 0)
    return;
  if (!f.any) {
    fr_selector_free(f.sel);
    api_field_fail(q, "label", "terminating many sandboxes needs at least one filter (label=k=v, pool, cluster, name_prefix)");
    return;
  }
  if ((t = term_new(q)) == NULL) {
    fr_selector_free(f.sel);
    return;
  }
  t->cl = calloc(q->r->nadapters ? q->r->nadapters : 1, sizeof(*t->cl));
  oom = t->cl == NULL;
  for (i = 0; !oom && i < q->r->nadapters; i++) {
    struct term_cluster *tc = &t->cl[t->ncl++];
    const struct fr_pod *pod;
    size_t cur;
    tc->a = q->r->adapters[i];
    fr_buf_init(&tc->names);
    for (cur = 0; (pod = fr_adapter_pod_next(tc->a, &cur)) != NULL;) {
      /* What the listing shows, evicted sandboxes included. */
      if (api_owned_by(pod, q->tenant) && matches(&f, tc->a, pod) && api_sandbox_visible(tc->a, pod))
        oom |= fr_buf_append(&tc->names, pod->name, strlen(pod->name) + 1) != 0;
    }
    {
      json_t *paused = json_array(), *e;
      size_t k;
      /* Paused sandboxes (their workspace claims) go in the same window. */
      if (paused == NULL)
        oom = 1;
      else
        paused_each(q, tc->a, &f, paused);
      json_array_foreach(paused, k, e) {
        const char *id = json_string_value(json_object_get(e, "id")), *dot = id ? strchr(id, '.') : NULL;
        if (dot != NULL)
          oom |= fr_buf_append(&tc->names, dot + 1, strlen(dot + 1) + 1) != 0;
      }
      json_decref(paused);
    }
  }
  fr_selector_free(f.sel);
  if (oom) {
    /* nothing was deleted: say so rather than half of it */
    t->pending--;
    t->single = 0;
    api_oom(q);
    term_free(t);
    return;
  }
  t->not_synced = not_synced(q->r);
  term_pump(t);
  t->pending--;
  term_done(t);
}

/* ---------------------------------------------------------------------- */
/* route handlers (routes.c)                                               */

void sandboxes_explain(struct api_req *q, const struct route_params *p) {
  (void)p;
  create_sandboxes(q, 1);
}

void sandboxes_create(struct api_req *q, const struct route_params *p) {
  (void)p;
  create_sandboxes(q, 0);
}

void sandboxes_list(struct api_req *q, const struct route_params *p) {
  (void)p;
  list_sandboxes(q);
}

void sandboxes_terminate_many(struct api_req *q, const struct route_params *p) {
  (void)p;
  terminate_many(q);
}

void sandboxes_get(struct api_req *q, const struct route_params *p) {
  struct fr_adapter *a;
  struct fr_workspace w;
  const struct fr_pod *pod;

  if (workspace_find_paused(q, p->id, &a, &w)) {
    api_reply(q, 200, workspace_paused_json(a, &w), NULL);
    fr_workspace_clear(&w);
    return;
  }
  if ((pod = api_find_sandbox(q, p->id, &a)) != NULL)
    api_reply(q, 200, api_sandbox_json(q->r, a, pod, 1), NULL);
}

void sandboxes_terminate(struct api_req *q, const struct route_params *p) {
  terminate_one(q, p->id);
}
