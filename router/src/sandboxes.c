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
#include "routes.h"
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

struct term {
  struct api_req *q;
  json_t *not_synced;   /* terminate by filter: clusters it could not look in yet (NULL: none) */
  int pending;
  int single;           /* DELETE /v1/sandboxes/{id}: answer {"id","terminated"} */
  json_t *ids;
  json_t *failed;
};

static void term_done(struct term *t) {
  if (t->pending > 0)
    return;
  if (json_array_size(t->failed) > 0 && json_array_size(t->ids) == 0) {
    json_t *b = api_err_body("cluster_unavailable", "the owning cluster did not accept the delete");
    json_object_set(json_object_get(b, "error"), "failed", t->failed);
    api_reply(t->q, 503, b, NULL);
  } else if (t->single) {
    api_reply(t->q, 200, json_pack("{s:O,s:b}", "id", json_array_get(t->ids, 0), "terminated", 1), NULL);
  } else {
    json_t *b = json_pack("{s:I,s:O}", "terminated", (json_int_t)json_array_size(t->ids), "ids", t->ids);
    if (json_array_size(t->failed) > 0)
      json_object_set(b, "failed", t->failed);
    if (b != NULL && t->not_synced != NULL)
      json_object_set(b, "not_synced", t->not_synced);
    api_reply(t->q, 200, b, NULL);
  }
  json_decref(t->ids);
  json_decref(t->failed);
  json_decref(t->not_synced);
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
  if (fr_adapter_sandbox_delete(a, pod, t->q->rid, on_term, o) != 0) {
    t->pending--;
    json_array_append_new(t->failed, json_pack("{s:s,s:s}", "id", o->id, "message", "cannot send the delete"));
    free(o);
  }
}

/* NULL after answering out_of_memory. */
static struct term *term_new(struct api_req *q) {
  struct term *t = calloc(1, sizeof(*t));

  if (t == NULL || (t->ids = json_array()) == NULL || (t->failed = json_array()) == NULL) {
    if (t != NULL)
      json_decref(t->ids);
    free(t);
    api_oom(q);
    return NULL;
  }
  t->q = q;
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
    term_start(t, a, pod_name);
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
  term_start(t, a, pod->name);
  t->pending--;
  term_done(t);
}

static void terminate_many(struct api_req *q) {
  struct filters f;
  struct term *t;
  size_t i;

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
  for (i = 0; i < q->r->nadapters; i++) {
    struct fr_adapter *a = q->r->adapters[i];
    const struct fr_pod *pod;
    size_t cur;
    for (cur = 0; (pod = fr_adapter_pod_next(a, &cur)) != NULL;) {
      /* What the listing shows, evicted sandboxes included. */
      if (api_owned_by(pod, q->tenant) && matches(&f, a, pod) && api_sandbox_visible(a, pod))
        term_start(t, a, pod->name);
    }
    {
      json_t *paused = json_array(), *e;
      size_t k;
      if (paused != NULL)
        paused_each(q, a, &f, paused);
      json_array_foreach(paused, k, e) {
        const char *id = json_string_value(json_object_get(e, "id")), *dot = id ? strchr(id, '.') : NULL;
        if (dot != NULL)
          term_start(t, a, dot + 1);
      }
      json_decref(paused);
    }
  }
  fr_selector_free(f.sel);
  t->not_synced = not_synced(q->r);
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
