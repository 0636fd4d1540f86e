/* pools.c - /v1/pools and /v1/pools/{name}: warm pools across clusters.
 *
 * A pool is one ReplicaSet per cluster; each adapter keeps a typed record
 * of its pools (fr_adapter_pool), so nothing here reads Kubernetes
 * objects. A change (create, resize, delete) goes to every cluster that has
 * the pool (or is named) and answers once all of them have.
 *
 * A pool belongs to the tenant that made it (label fedrouter.io/owner on
 * its ReplicaSets): only that tenant sees, uses and changes it, and its
 * warm pods count against the tenant's max_pool_replicas. An admin tenant
 * may make a pool shared (no owner): every tenant sees and uses it, only
 * admins change it. Another tenant's pool is "not found", as a sandbox is.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/http.h"
#include "api.h"
#include "router.h"
#include "tenants.h"
#include "route_types.h"

#define MAX_POOL_REPLICAS 100000

struct pool_op {
  struct api_req *q;
  int pending;
  int status;           /* worst HTTP status seen; 0 = all fine */
  json_t *results;
  json_t *skipped;      /* clusters that cannot host the pool's pod options, or NULL */
  char name[64];
  int creating;
  int shared;           /* a shared pool (for the answer before the caches see it) */
};

/* Pool <name> in any cluster, whoever owns it (names are one namespace:
 * the ReplicaSet is fr-pool-<name> in every cluster). */
static int pool_exists(struct router *r, const char *name) {
  size_t i;

  for (i = 0; i < r->nadapters; i++)
    if (fr_adapter_pool(r->adapters[i], name) != NULL)
      return 1;
  return 0;
}

/* The pool across clusters as the API shows it to the tenant of <q>, or
 * NULL if no cluster has one it may use. */
static json_t *pool_json(struct api_req *q, const char *name) {
  struct router *r = q->r;
  json_t *clusters = json_array(), *out = NULL;
  size_t i;

  for (i = 0; i < r->nadapters; i++) {
    const struct fr_adapter_pool_view *pv = fr_adapter_pool(r->adapters[i], name);
    if (pv == NULL || !api_pool_usable(q, pv))
      continue;
    if (out == NULL) {
      out = json_pack("{s:s,s:s,s:f,s:f,s:b}", "name", name, "image", pv->image, "cpus", pv->cpu_m / 1000.0,
                      "memory_gb", pv->mem_b / 1073741824.0, "shared", pv->owner == NULL);
      if (out != NULL && pv->opts != NULL)
        json_object_update(out, fr_podopts_json(pv->opts));
    }
    json_array_append_new(clusters, json_pack("{s:s,s:I,s:I}", "cluster", fr_adapter_name(r->adapters[i]),
                                              "target", (json_int_t)pv->target, "ready", (json_int_t)pv->ready));
  }
  if (out == NULL) {
    json_decref(clusters);
    return NULL;
  }
  json_object_set_new(out, "clusters", clusters);
  return out;
}

static void pool_reply(struct pool_op *p) {
  struct api_req *q = p->q;

  if (p->status == 0) {
    json_t *pj = pool_json(q, p->name);
    if (pj == NULL) /* the caches have not seen it yet */
      pj = json_pack("{s:s,s:b}", "name", p->name, "shared", p->shared);
    json_object_set(pj, "results", p->results);
    if (p->skipped != NULL)
      json_object_set(pj, "skipped", p->skipped);
    api_reply(q, p->creating ? 201 : 200, pj, NULL);
  } else {
    json_t *b = api_err_body(p->status == 409 ? "pool_exists" : p->status == 404 ? "pool_not_found" : "cluster_unavailable",
                             p->status == 409 ? "a pool with that name exists"
                             : p->status == 404 ? "no such pool"
                                                : "a cluster did not accept the change");
    json_object_set(json_object_get(b, "error"), "results", p->results);
    api_reply(q, p->status == 409 || p->status == 404 ? p->status : 503, b, NULL);
  }
  json_decref(p->results);
  json_decref(p->skipped);
  free(p);
}

static void on_pool_call(int status, const char *message, void *arg) {
  struct pool_op *p = arg;

  if (status == 0 || status >= 300)
    p->status = p->status == 0 || status > p->status || status == 0 ? (status ? status : 503) : p->status;
  json_array_append_new(p->results, json_pack("{s:i,s:s}", "status", status, "message", message ? message : ""));
  if (--p->pending == 0)
    pool_reply(p);
}

/* A change fanned out to clusters; answers once every call has (the
 * caller drops the guard with pool_op_start_done). NULL after answering
 * out_of_memory. */
static struct pool_op *pool_op_new(struct api_req *q, const char *name) {
  struct pool_op *p = calloc(1, sizeof(*p));

  if (p == NULL || (p->results = json_array()) == NULL) {
    free(p);
    api_oom(q);
    return NULL;
  }
  p->q = q;
  p->pending = 1; /* a guard, so calls answering early cannot finish it */
  snprintf(p->name, sizeof(p->name), "%s", name);
  api_defer(q);
  return p;
}

static void pool_op_start_done(struct pool_op *p) {
  on_pool_call(200, NULL, p);
}

/* Warm pods the pools <q>'s tenant owns ask for, over every cluster,
 * leaving out pool <except> (NULL: none). */
static int64_t owned_replicas(struct api_req *q, const char *except) {
  int64_t n = 0;
  size_t i, k;

  for (i = 0; i < q->r->nadapters; i++) {
    struct fr_adapter_view v;
    fr_adapter_view(q->r->adapters[i], &v);
    for (k = 0; k < v.npools; k++)
      if (v.pools[k].owner != NULL && strcmp(v.pools[k].owner, q->tenant) == 0 &&
          (except == NULL || strcmp(v.pools[k].name, except) != 0))
        n += v.pools[k].target;
  }
  return n;
}

/* 429 when <want> more warm pods would take <q>'s tenant past its
 * max_pool_replicas; 0 when they fit. */
static int pool_quota_exceeded(struct api_req *q, int64_t have, int64_t want) {
  char msg[300];

  if (q->ts == NULL || q->ts->max_pool_replicas == 0 || have + want <= q->ts->max_pool_replicas)
    return 0;
  snprintf(msg, sizeof(msg),
           "tenant %s may keep %" PRId64 " warm pods over all its pools and clusters; it has %" PRId64
           " and this asks for %" PRId64,
           q->tenant, q->ts->max_pool_replicas, have, want);
  api_reply(q, 429, api_limit_body(msg, "max_pool_replicas"), "Retry-After: 10\r\n");
  return 1;
}

static int pool_name_valid(const char *n) {
  size_t len = strlen(n);

  return len > 0 && len <= 40 && strspn(n, "abcdefghijklmnopqrstuvwxyz0123456789-") == len && n[0] != '-' &&
         n[len - 1] != '-';
}

static int in_list(json_t *names, const char *name) {
  size_t i;
  json_t *e;

  json_array_foreach(names, i, e) {
    if (strcmp(json_string_value(e), name) == 0)
      return 1;
  }
  return 0;
}

/* The clusters (of <names>, or all) that cannot host pods of <spec>'s
 * options: [{"cluster", "reason"}], the pool is not made there. NULL when
 * out of memory. */
static json_t *unfit_clusters(struct router *r, const struct fr_pool_spec *spec, json_t *names) {
  json_t *out = json_array();
  size_t i;

  for (i = 0; out != NULL && i < r->nadapters; i++) {
    const char *unfit;
    char detail[200], why[300];
    if (names != NULL && !in_list(names, fr_adapter_name(r->adapters[i])))
      continue;
    fr_adapter_fit_slots(r->adapters[i], spec->cpu_m, spec->mem_b, spec->opts, &unfit, detail, sizeof(detail));
    if (unfit == NULL)
      continue;
    snprintf(why, sizeof(why), "%s (%s)", unfit, detail);
    json_array_append_new(out, json_pack("{s:s,s:s}", "cluster", fr_adapter_name(r->adapters[i]), "reason", why));
  }
  return out;
}

static int skipped_has(json_t *skipped, const char *cluster) {
  size_t i;
  json_t *e;

  json_array_foreach(skipped, i, e) {
    if (strcmp(json_string_value(json_object_get(e, "cluster")), cluster) == 0)
      return 1;
  }
  return 0;
}

static void create_pool(struct api_req *q) {
  static const char *const known[] = {"name",         "image",         "cpus",        "memory_gb", "replicas",
                                      "clusters",     "shared",        "runtime_class", "node_selector",
                                      "tolerations",  "gpus",          "volumes",     "readiness", "workspace", NULL};
  json_t *j = api_body_object(q, known, 0), *v, *clusters, *skipped = NULL;
  struct fr_pool_spec spec;
  struct pool_op *p;
  const char *field;
  char msg[300];
  size_t i, ncl;
  int shared = 0, rc;

  if (j == NULL)
    return;
  memset(&spec, 0, sizeof(spec));
  spec.name = json_string_value(json_object_get(j, "name"));
  spec.image = json_string_value(json_object_get(j, "image"));
  if (spec.name == NULL || !pool_name_valid(spec.name)) {
    api_field_fail(q, "name", "name must be 1-40 characters of a-z, 0-9 and '-'");
    goto out;
  }
  if (api_image_check(q, spec.image) != 0)
    goto out;
  spec.cpu_m = 1000;
  spec.mem_b = (int64_t)2 << 30;
  if (api_body_resources(q, j, &spec.cpu_m, &spec.mem_b) != 0)
    goto out;
  v = json_object_get(j, "replicas");
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > MAX_POOL_REPLICAS) {
    api_field_fail(q, "replicas", "replicas must be an integer from 0 to 100000 (per cluster)");
    goto out;
  }
  spec.replicas = json_integer_value(v);
  /* Pod options (volumes pre-mounted, GPUs, ...): claims from the pool
   * serve creates that ask for exactly these. */
  if ((rc = fr_podopts_parse(j, &spec.opts, &field, msg, sizeof(msg))) != 0) {
    if (rc == -EINVAL)
      api_field_fail(q, field, msg);
    else
      api_oom(q);
    goto out;
  }
  clusters = json_object_get(j, "clusters");
  if (clusters != NULL && (!json_is_array(clusters) || json_array_size(clusters) == 0)) {
    api_field_fail(q, "clusters", "clusters must be a non-empty array of cluster names (omit it for all)");
    goto out;
  }
  if (clusters != NULL) {
    json_array_foreach(clusters, i, v) {
      if (!json_is_string(v) || api_adapter(q->r, json_string_value(v)) == NULL) {
        snprintf(msg, sizeof(msg), "no cluster named \"%.100s\"", json_is_string(v) ? json_string_value(v) : "?");
        api_fail(q, 404, "cluster_not_found", msg, NULL);
        goto out;
      }
    }
  }
  if ((v = json_object_get(j, "shared")) != NULL) {
    if (!json_is_boolean(v)) {
      api_field_fail(q, "shared", "shared must be true or false");
      goto out;
    }
    shared = json_is_true(v);
    if (shared && (q->ts == NULL || !q->ts->admin)) {
      api_fail(q, 403, "forbidden", "only an admin token may create a shared pool", NULL);
      goto out;
    }
  }
  if (pool_exists(q->r, spec.name)) {
    api_fail(q, 409, "pool_exists", "a pool with that name exists", NULL);
    goto out;
  }
  ncl = clusters != NULL ? json_array_size(clusters) : q->r->nadapters;
  if (!shared && pool_quota_exceeded(q, owned_replicas(q, NULL), spec.replicas * (int64_t)ncl))
    goto out;
  spec.owner = shared ? NULL : q->tenant;
  if (spec.opts != NULL && (skipped = unfit_clusters(q->r, &spec, clusters)) == NULL)
    goto oom;
  if (skipped != NULL && json_array_size(skipped) == ncl) {
    json_t *b = api_err_body("no_cluster_fits", "no cluster can host pods with these options");
    json_object_set(json_object_get(b, "error"), "clusters", skipped);
    api_reply(q, 409, b, NULL);
    goto out;
  }
  if ((p = pool_op_new(q, spec.name)) == NULL)
    goto out;
  p->creating = 1;
  p->shared = shared;
  p->skipped = json_incref(skipped);
  for (i = 0; i < q->r->nadapters; i++) {
    struct fr_adapter *a = q->r->adapters[i];
    if (clusters != NULL && !in_list(clusters, fr_adapter_name(a)))
      continue;
    if (skipped_has(skipped, fr_adapter_name(a)))
      continue;
    p->pending++;
    if (fr_adapter_pool_create(a, &spec, on_pool_call, p) != 0)
      on_pool_call(0, "cannot send the create", p);
  }
  pool_op_start_done(p);
  goto out;
oom:
  api_oom(q);
out:
  json_decref(skipped);
  fr_podopts_unref(spec.opts);
  json_decref(j);
}

/* The first key of object <j> other than <want>, else <want>: the field a
 * body of just {"<want>": ...} got wrong. */
static const char *other_key(json_t *j, const char *want) {
  const char *k;
  json_t *v;

  json_object_foreach(j, k, v) {
    (void)v;
    if (strcmp(k, want) != 0)
      return k;
  }
  return want;
}

static void change_pool(struct api_req *q, const char *name, int del) {
  struct pool_op *p;
  int64_t replicas = 0;
  json_t *pj = pool_json(q, name);
  int shared = 0;
  size_t i, ncl = 0;

  if (pj == NULL) {
    api_pool_missing(q, name);
    return;
  }
  shared = json_is_true(json_object_get(pj, "shared"));
  ncl = json_array_size(json_object_get(pj, "clusters"));
  json_decref(pj);
  if (shared && (q->ts == NULL || !q->ts->admin)) {
    api_fail(q, 403, "forbidden", "a shared pool is changed by an admin token only", NULL);
    return;
  }
  if (!del) {
    json_t *j = json_loadb(q->req->body, q->req->body_len, 0, NULL), *v = json_object_get(j, "replicas");
    int ok = json_is_object(j) && json_object_size(j) == 1 && json_is_integer(v) && json_integer_value(v) >= 0 &&
             json_integer_value(v) <= MAX_POOL_REPLICAS;

    if (ok)
      replicas = json_integer_value(v);
    else if (!json_is_object(j))
      api_fail(q, 400, "invalid_json", "the body must be {\"replicas\": N} with 0 <= N <= 100000", NULL);
    else
      api_field_fail(q, other_key(j, "replicas"), "the body must be {\"replicas\": N} with 0 <= N <= 100000");
    json_decref(j);
    if (!ok)
      return;
    if (!shared && pool_quota_exceeded(q, owned_replicas(q, name), replicas * (int64_t)ncl))
      return;
  }
  if ((p = pool_op_new(q, name)) == NULL)
    return;
  for (i = 0; i < q->r->nadapters; i++) {
    struct fr_adapter *a = q->r->adapters[i];
    int rc;
    const struct fr_adapter_pool_view *pv = fr_adapter_pool(a, name);
    if (pv == NULL || !api_pool_usable(q, pv))
      continue;
    p->pending++;
    rc = del ? fr_adapter_pool_delete(a, name, on_pool_call, p) : fr_adapter_pool_resize(a, name, replicas, on_pool_call, p);
    if (rc != 0)
      on_pool_call(0, "cannot send the request", p);
  }
  pool_op_start_done(p);
}

static void list_pools(struct api_req *q) {
  json_t *names = json_object(), *arr = json_array(), *dummy;
  const char *key;
  size_t i, k;

  for (i = 0; i < q->r->nadapters; i++) {
    struct fr_adapter_view v;
    fr_adapter_view(q->r->adapters[i], &v);
    for (k = 0; k < v.npools; k++)
      if (api_pool_usable(q, &v.pools[k]))
        json_object_set_new(names, v.pools[k].name, json_true());
  }
  json_object_foreach(names, key, dummy) {
    json_t *pj = pool_json(q, key);
    if (pj != NULL)
      json_array_append_new(arr, pj);
  }
  json_decref(names);
  api_reply(q, 200, json_pack("{s:o}", "pools", arr), NULL);
}

/* ---------------------------------------------------------------------- */
/* route handlers (routes.c)                                               */

void pools_create(struct api_req *q, const struct route_params *p) {
  (void)p;
  create_pool(q);
}

void pools_list(struct api_req *q, const struct route_params *p) {
  (void)p;
  list_pools(q);
}

void pools_get(struct api_req *q, const struct route_params *p) {
  json_t *pj = pool_json(q, p->name);

  if (pj != NULL)
    api_reply(q, 200, pj, NULL);
  else
    api_pool_missing(q, p->name);
}

void pools_patch(struct api_req *q, const struct route_params *p) {
  change_pool(q, p->name, 0);
}

void pools_delete(struct api_req *q, const struct route_params *p) {
  change_pool(q, p->name, 1);
}
