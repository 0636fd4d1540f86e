/* cluster.c - one cluster's state: client, informers, the sandbox pod
 * cache, health, and the counts, sets and view built on them (cluster.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "fr/assert.h"
#include "fr/informer.h"
#include "fr/kube.h"
#include "fr/kubeconfig.h"
#include "fr/log.h"
#include "fr/quantity.h"
#include "podopts.h"
#include "upstream.h"

/* Health probe: GET /version every PROBE_MS feeds the latency EWMA and, with
 * the informers' contact times, the health flag. */
#define PROBE_MS 2000
/* Weight of a new latency sample in the EWMA. */
#define EWMA_ALPHA 0.3
/* A cluster not heard from for this long is unhealthy even if no request
 * has failed yet (a hung connection). */
#define STALE_MS 10000
/* Circuit breaker: this many consecutive failures open it; after
 * BREAKER_COOL_MS one probe is let through (half-open) and decides. */
#define BREAKER_FAILURES 2
#define BREAKER_COOL_MS 3000

/* Node usage tables: node name -> v.n [cpu_m, mem_b, pods]. */
static void usage_add(struct strmap *map, const char *node, int64_t cpu_m, int64_t mem_b, int sign) {
  struct strmap_entry *u;

  if (node == NULL || (u = strmap_put(map, node, NULL)) == NULL)
    return;
  u->v.n[0] += sign * cpu_m;
  u->v.n[1] += sign * mem_b;
  u->v.n[2] += sign;
}

/* Adds (<sign> 1) or removes (-1) <pod> in <pool>'s ready set. */
static void warm_ready_add(struct cluster *c, const char *pool, const char *pod, int sign) {
  struct strmap_entry *e = sign > 0 ? strmap_put(&c->warm_ready, pool, NULL) : strmap_get(&c->warm_ready, pool);

  if (e == NULL)
    return;
  if (e->v.map == NULL)
    e->v.map = calloc(1, sizeof(*e->v.map)); /* an all-zero table is empty */
  if (e->v.map != NULL) {
    if (sign > 0)
      strmap_put(e->v.map, pod, NULL);
    else
      strmap_del(e->v.map, pod);
    if (strmap_size(e->v.map) > 0)
      return;
    strmap_close(e->v.map);
    free(e->v.map);
  }
  strmap_del(&c->warm_ready, pool);
}

const struct strmap *cluster__warm_ready(const struct cluster *c, const char *pool) {
  const struct strmap_entry *e = pool != NULL ? strmap_get(&c->warm_ready, pool) : NULL;

  return e != NULL ? e->v.map : NULL;
}

static int64_t warm_ready_count(const struct cluster *c, const char *pool) {
  const struct strmap *set = cluster__warm_ready(c, pool);

  return set != NULL ? (int64_t)strmap_size(set) : 0;
}

static void warm_ready_free(struct cluster *c) {
  struct strmap_entry *e;
  size_t cur = 0;

  while ((e = strmap_next(&c->warm_ready, &cur)) != NULL) {
    strmap_close(e->v.map);
    free(e->v.map);
  }
  strmap_close(&c->warm_ready);
}

/* GPUs in use on <node>: column <col> 0 for fedrouter's pods, 1 for the others. */
static void gpu_usage_add(struct cluster *c, const char *node, int col, int64_t gpus, int sign) {
  struct strmap_entry *u;

  if (node == NULL || gpus == 0 || (u = strmap_put(&c->gpu_usage, node, NULL)) == NULL)
    return;
  u->v.n[col] += sign * gpus;
}

/* A pod of the cluster-wide watch (reduced by slim_any_pod). */
static void other_usage_add(struct cluster *c, json_t *slim, int sign) {
  const char *node = json_string_value(json_object_get(slim, "n"));

  usage_add(&c->node_usage, node, json_integer_value(json_object_get(slim, "c")),
            json_integer_value(json_object_get(slim, "m")), sign);
  gpu_usage_add(c, node, 1, json_integer_value(json_object_get(slim, "g")), sign);
}

static int64_t requests_of(json_t *pod, const char *res, int milli);
static const char *pod_label(json_t *obj, const char *key);
static int pod_condition_true(json_t *obj, const char *type);

/* Adds (<sign> 1) or removes (-1) a sandbox-cache pod from the counters:
 * a live sandbox (any state but warm) counts with its tenant and requests,
 * a ready warm pod joins its pool's ready set. */
static void pods_count(struct cluster *c, const struct fr_pod *p, int sign) {
  /* A sandbox holds its node's resources until it finishes, terminating
   * or not. */
  if (!fr_pod_finished(p)) {
    usage_add(&c->sb_node_usage, p->node, p->cpu_m, p->mem_b, sign);
    gpu_usage_add(c, p->node, 0, p->gpus, sign);
  }
  if (fr_pod_done(p))
    return;
  if (p->state != NULL && strcmp(p->state, "warm") == 0) {
    if (p->pool == NULL || !p->ready)
      return;
    c->n_warm += sign;
    FR_ASSERT(c->n_warm >= 0);
    warm_ready_add(c, p->pool, p->name, sign);
    return;
  }
  c->n_sandboxes += sign;
  c->sb_cpu_m += sign * p->cpu_m;
  c->sb_mem_b += sign * p->mem_b;
  /* Every -1 undoes the +1 of the same record, so nothing goes below 0. */
  FR_ASSERT(c->n_sandboxes >= 0 && c->sb_cpu_m >= 0 && c->sb_mem_b >= 0);
  if (p->tenant != NULL) {
    struct strmap_entry *n = strmap_put(&c->tenant_counts, p->tenant, NULL);
    if (n != NULL) {
      n->v.n[1] += sign * p->cpu_m;
      n->v.n[2] += sign * p->mem_b;
      FR_ASSERT(n->v.n[1] >= 0 && n->v.n[2] >= 0);
      if ((n->v.n[0] += sign) <= 0)
        strmap_del(&c->tenant_counts, p->tenant);
    }
    if (p->gpus > 0 && (n = strmap_put(&c->tenant_gpus, p->tenant, NULL)) != NULL && (n->v.n[0] += sign * p->gpus) <= 0)
      strmap_del(&c->tenant_gpus, p->tenant);
  }
}

/* A sandbox pod event: into the compact store and the counters, then to
 * the owner's hook (the creates waiting for their pods, the reaper's due
 * times, the per-batch counts). */
static void on_pod_event(struct cluster *c, enum fr_informer_event ev, json_t *obj) {
  const char *name = json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
  struct fr_pod *p, *old = NULL;

  if (name == NULL)
    return;
  if (ev == FR_INF_DELETED) {
    old = podstore_take(&c->pods, name);
    if (old != NULL) {
      pods_count(c, old, -1);
      if (c->hooks.on_pod != NULL)
        c->hooks.on_pod(ev, old, NULL, c->hooks.arg);
      podstore_release(&c->pods, old);
    }
    return;
  }
  p = podstore_parse(&c->pods, obj);
  if (p == NULL || podstore_put(&c->pods, p, &old) != 0) {
    FR_ERROR("adapter", "%s: cannot cache pod %s (out of memory or malformed)", c->cc.name, name);
    podstore_release(&c->pods, p);
    return;
  }
  if (old != NULL)
    pods_count(c, old, -1);
  pods_count(c, p, 1);
  if (c->hooks.on_pod != NULL)
    c->hooks.on_pod(old ? FR_INF_MODIFIED : FR_INF_ADDED, p, old, c->hooks.arg);
  podstore_release(&c->pods, old);
}

/* The fields of a sandbox pod podstore_parse() reads: the informer builds
 * just these from the raw events (fr_informer_set_keep), not the ~150
 * values of the whole pod (containers' env and commands, volumes, the
 * agent's init container, containerStatuses, managedFields...). */
static const struct fr_informer_keep keep_resources[] = {{"requests", NULL}, {"limits", NULL}, {NULL, NULL}};
static const struct fr_informer_keep keep_container[] = {{"resources", keep_resources}, {NULL, NULL}};
static const struct fr_informer_keep keep_meta[] = {
    {"name", NULL},        {"namespace", NULL},         {"resourceVersion", NULL},   {"labels", NULL},
    {"annotations", NULL}, {"creationTimestamp", NULL}, {"deletionTimestamp", NULL}, {NULL, NULL}};
static const struct fr_informer_keep keep_spec[] = {{"nodeName", NULL}, {"containers", keep_container}, {NULL, NULL}};
static const struct fr_informer_keep keep_status[] = {
    {"phase", NULL}, {"reason", NULL}, {"startTime", NULL}, {"conditions", NULL}, {NULL, NULL}};
static const struct fr_informer_keep keep_pod[] = {
    {"metadata", keep_meta}, {"spec", keep_spec}, {"status", keep_status}, {NULL, NULL}};

static const char *store_rv(void *arg, const char *ns, const char *name) {
  struct cluster *c = arg;
  struct fr_pod *p = podstore_get(&c->pods, name);

  (void)ns; /* one namespace per adapter */
  return p ? p->rv : NULL;
}

static void store_each(void *arg, void (*fn)(const char *ns, const char *name, const char *rv, void *fn_arg),
                       void *fn_arg) {
  struct cluster *c = arg;
  struct fr_pod *p;
  size_t cur = 0;

  while ((p = podstore_next(&c->pods, &cur)) != NULL)
    fn(c->ns, p->name, p->rv, fn_arg);
}

/* ---- pools: one typed record per pool ReplicaSet, parsed once per change ---- */

static struct fr_adapter_pool_view *pool_find(struct cluster *c, const char *name) {
  size_t i;

  for (i = 0; i < c->npools; i++)
    if (strcmp(c->pools[i].name, name) == 0)
      return &c->pools[i];
  return NULL;
}

static void pool_view_clear(struct fr_adapter_pool_view *p) {
  free((char *)p->name);
  free((char *)p->owner);
  free((char *)p->image);
  fr_podopts_unref(p->opts);
  memset(p, 0, sizeof(*p));
}

static void pools_free(struct cluster *c) {
  size_t i;

  for (i = 0; i < c->npools; i++)
    pool_view_clear(&c->pools[i]);
  free(c->pools);
  c->pools = NULL;
  c->npools = c->pools_cap = 0;
}

static void pool_forget(struct cluster *c, const char *name) {
  struct fr_adapter_pool_view *p = pool_find(c, name);

  if (p == NULL)
    return;
  pool_view_clear(p);
  *p = c->pools[--c->npools];
}

/* A pool ReplicaSet was added or changed: (re)parse its record. Its shape
 * comes from the fedrouter.io/pool-spec annotation fr_adapter_pool_create
 * writes; an unreadable one leaves the pool visible with an empty image. */
static void pool_update(struct cluster *c, json_t *rs) {
  const char *name = pod_label(rs, FR_LABEL_POOL);
  const char *ann = json_string_value(
      json_object_get(json_object_get(json_object_get(rs, "metadata"), "annotations"), FR_ANN_POOL_SPEC));
  json_t *spec = ann != NULL ? json_loads(ann, 0, NULL) : NULL;
  struct fr_adapter_pool_view nv, *p;

  if (name == NULL) {
    json_decref(spec);
    return;
  }
  memset(&nv, 0, sizeof(nv));
  nv.name = strdup(name);
  if (pod_label(rs, FR_LABEL_OWNER) != NULL && (nv.owner = strdup(pod_label(rs, FR_LABEL_OWNER))) == NULL)
    goto oom;
  nv.image = strdup(json_string_value(json_object_get(spec, "image")) ? json_string_value(json_object_get(spec, "image")) : "");
  nv.cpu_m = json_integer_value(json_object_get(spec, "cpu_millis"));
  nv.mem_b = json_integer_value(json_object_get(spec, "memory_bytes"));
  if (json_object_get(spec, "options") != NULL) {
    const char *field;
    char msg[200];
    int rc = fr_podopts_parse(json_object_get(spec, "options"), &nv.opts, &field, msg, sizeof(msg));
    if (rc == -ENOMEM) {
      json_decref(spec);
      goto oom;
    }
    if (rc != 0) {
      /* Not what fedrouter wrote: claims could hand out pods of an
       * unknown shape, so the pool is shown but never used. */
      FR_WARN("adapter", "%s: pool %s has unreadable options (%s): not used", c->cc.name, name, msg);
      if (nv.image != NULL)
        ((char *)nv.image)[0] = '\0';
    }
  }
  nv.target = json_integer_value(json_object_get(json_object_get(rs, "spec"), "replicas"));
  json_decref(spec);
  if (nv.name == NULL || nv.image == NULL)
    goto oom;
  p = pool_find(c, name);
  if (p != NULL)
    nv.reserved = p->reserved; /* planned claims outlive a change of the ReplicaSet */
  if (p == NULL) {
    if (c->npools == c->pools_cap) {
      size_t cap = c->pools_cap ? 2 * c->pools_cap : 8;
      struct fr_adapter_pool_view *np = realloc(c->pools, cap * sizeof(*np));
      if (np == NULL)
        goto oom;
      c->pools = np;
      c->pools_cap = cap;
    }
    p = &c->pools[c->npools++];
  } else {
    pool_view_clear(p);
  }
  *p = nv;
  return;
oom:
  FR_ERROR("adapter", "%s: cannot cache pool %s (out of memory)", c->cc.name, name);
  pool_view_clear(&nv);
}

static void on_informer(struct fr_informer *inf, enum fr_informer_event ev, json_t *obj, json_t *old,
                        void *arg) {
  struct cluster *c = arg;

  /* Node usage, counters and the sandbox store follow every pod
   * incrementally; sandbox pod changes also go to the owner's hook. */
  if (inf == c->inf[CLUSTER_INF_ALLPODS] && obj != NULL) {
    if (ev == FR_INF_MODIFIED)
      other_usage_add(c, old, -1);
    other_usage_add(c, obj, ev == FR_INF_DELETED ? -1 : 1);
  } else if (inf == c->inf[CLUSTER_INF_PODS] && obj != NULL) {
    on_pod_event(c, ev, obj);
  } else if (inf == c->inf[CLUSTER_INF_POOLS] && obj != NULL) {
    if (ev == FR_INF_DELETED) {
      const char *name = pod_label(obj, FR_LABEL_POOL);
      if (name != NULL)
        pool_forget(c, name);
    } else {
      pool_update(c, obj);
    }
  }
}

/* Every pod in the cluster, reduced to what node usage needs: ~150 bytes
 * a pod instead of a few KiB. Finished pods use nothing. */
static json_t *slim_any_pod(json_t *pod, void *arg) {
  struct cluster *c = arg;
  json_t *meta = json_object_get(pod, "metadata");
  const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
  const char *node = json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
  int done = phase != NULL && (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0);

  return json_pack("{s:{s:O,s:O,s:O},s:s?,s:I,s:I,s:I}", "metadata", "namespace",
                   json_object_get(meta, "namespace"), "name", json_object_get(meta, "name"),
                   "resourceVersion", json_object_get(meta, "resourceVersion"), "n",
                   done ? NULL : node, "c", (json_int_t)requests_of(pod, "cpu", 1), "m",
                   (json_int_t)requests_of(pod, "memory", 0), "g",
                   (json_int_t)pod_gpus(json_object_get(json_object_get(pod, "spec"), "containers"),
                                        c->cc.gpu_resource));
}

/* ---- requests ---- */

void cluster__status_message(const char *body, size_t len, char *out, size_t cap) {
  json_t *j = json_loadb(body, len, 0, NULL);
  const char *m = json_string_value(json_object_get(j, "message"));

  snprintf(out, cap, "%s", m ? m : (len ? body : "no response"));
  json_decref(j);
}

struct simple_call {
  struct fr_informer *observe;  /* the cache a 2xx answer's object enters at once, or NULL */
  void (*cb)(int status, const char *message, void *arg);
  void *arg;
};

static void on_simple(const struct fr_kube_response *r, void *arg) {
  struct simple_call *sc = arg;
  json_t *obj;
  char msg[600];

  /* Read-your-own-writes: a lookup right after this write (a resize
   * right after the pool's create, the expiry right after it moved) sees
   * it even while the watch lags. */
  if (sc->observe != NULL && r->status >= 200 && r->status < 300 &&
      (obj = json_loadb(r->body, r->body_len, 0, NULL)) != NULL) {
    fr_informer_observe(sc->observe, obj);
    json_decref(obj);
  }
  if (sc->cb != NULL) {
    if (r->status >= 200 && r->status < 300)
      msg[0] = '\0';
    else if (r->status == 0)
      snprintf(msg, sizeof(msg), "%s", r->error ? r->error : "no response");
    else
      cluster__status_message(r->body, r->body_len, msg, sizeof(msg));
    sc->cb(r->status, msg, sc->arg);
  }
  free(sc);
}

int cluster__request(struct cluster *c, const char *method, const char *path, const char *ctype, json_t *body,
                     int idempotent, struct fr_informer *observe, const char *request_id,
                     void (*cb)(int status, const char *message, void *arg), void *arg) {
  struct simple_call *sc = malloc(sizeof(*sc));
  char *b = body ? json_dumps(body, JSON_COMPACT) : NULL;
  int rc;

  if (sc == NULL || (body != NULL && b == NULL)) {
    free(sc);
    free(b);
    return -ENOMEM;
  }
  sc->observe = observe;
  sc->cb = cb;
  sc->arg = arg;
  rc = fr_kube_request(c->client, method, path, ctype, b, b ? strlen(b) : 0, idempotent ? FR_KUBE_IDEMPOTENT : 0,
                       request_id, on_simple, sc, NULL);
  free(b);
  if (rc != 0)
    free(sc);
  return rc;
}

static const char *const breaker_names[] = {"closed", "open", "half-open"};

/* The breaker's one transition function:
 *
 *   CLOSED --BREAKER_FAILURES failures in a row--> OPEN
 *   OPEN --BREAKER_COOL_MS, from the probe timer--> HALF_OPEN
 *   HALF_OPEN --one failure--> OPEN      any --a success--> CLOSED
 *   OPEN --a failure--> OPEN (cooling down starts again)
 *
 * Opening counts a failure and stamps the time the cool-down starts. */
static void breaker_set(struct cluster *c, enum cluster_breaker s) {
  enum cluster_breaker was = c->breaker;

  FR_ASSERT(s != CLUSTER_BR_HALF_OPEN || was == CLUSTER_BR_OPEN);
  FR_ASSERT(s != CLUSTER_BR_OPEN || c->failures > 0);
  FR_ASSERT(s != CLUSTER_BR_CLOSED || c->failures == 0);
  c->breaker = s;
  if (s == CLUSTER_BR_OPEN)
    c->opened_ms = uv_now(c->loop);
  if (was == s)
    return;
  if (s == CLUSTER_BR_HALF_OPEN)
    FR_INFO("adapter", "%s: circuit breaker open -> half-open", c->cc.name);
  else
    FR_WARN("adapter", "%s: circuit breaker %s -> %s", c->cc.name, breaker_names[was], breaker_names[s]);
}

void cluster__report(struct cluster *c, int ok) {
  enum cluster_breaker was = c->breaker;

  if (ok) {
    c->failures = 0;
    breaker_set(c, CLUSTER_BR_CLOSED);
  } else if (++c->failures >= BREAKER_FAILURES || c->breaker == CLUSTER_BR_HALF_OPEN) {
    breaker_set(c, CLUSTER_BR_OPEN);
  }
  if (was != CLUSTER_BR_OPEN && c->breaker == CLUSTER_BR_OPEN && c->hooks.on_down != NULL)
    c->hooks.on_down(c->hooks.arg);
}

int cluster__reachable(const struct cluster *c) {
  return c->breaker == CLUSTER_BR_CLOSED;
}

int cluster__answering(const struct cluster *c) {
  return c->breaker == CLUSTER_BR_CLOSED && c->probe_ok;
}

static void on_probe_done(const struct fr_kube_response *r, void *arg) {
  struct cluster *c = arg;

  c->probe_call = NULL;
  /* A 429 (priority and fairness shedding load) is a busy API server, not
   * a dead one: it answered, and the breaker stays closed. */
  c->probe_ok = r->status == 200 || r->status == 429;
  if (c->probe_ok) {
    c->last_probe_ok_ms = uv_now(c->loop);
    if (r->status == 200)
      c->latency_ewma = c->latency_ewma == 0 ? r->elapsed_ms
                                             : EWMA_ALPHA * r->elapsed_ms + (1 - EWMA_ALPHA) * c->latency_ewma;
  } else {
    FR_WARN("adapter", "%s: health probe failed (%d %s)", c->cc.name, r->status,
            r->error ? r->error : "");
  }
  cluster__report(c, c->probe_ok);
}

static uint64_t last_contact_ms(struct cluster *c) {
  uint64_t contact = c->last_probe_ok_ms;
  int i;

  for (i = 0; i < CLUSTER_INF_COUNT; i++)
    if (fr_informer_last_contact_ms(c->inf[i]) > contact)
      contact = fr_informer_last_contact_ms(c->inf[i]);
  return contact;
}

static void on_probe_timer(uv_timer_t *t) {
  struct cluster *c = t->data;
  uint64_t contact = last_contact_ms(c);

  /* Not heard from lately (a hung connection): that is a failure even
   * before a request fails. */
  if (c->breaker == CLUSTER_BR_CLOSED && contact != 0 && uv_now(c->loop) - contact >= STALE_MS)
    cluster__report(c, 0);

  /* An open breaker lets one probe through once it has cooled down. */
  if (c->breaker == CLUSTER_BR_OPEN && uv_now(c->loop) - c->opened_ms >= BREAKER_COOL_MS)
    breaker_set(c, CLUSTER_BR_HALF_OPEN);

  if (c->probe_call != NULL) {
    /* Still out after a whole period: a hung connection. Count it as a
     * failure and send a fresh one. */
    if (uv_now(c->loop) - c->probe_sent_ms < PROBE_MS)
      return;
    fr_kube_cancel(c->probe_call);
    c->probe_call = NULL;
    cluster__report(c, 0);
  }
  c->probe_sent_ms = uv_now(c->loop);
  /* Priority: past the client's queue, so a mass delete does not make the
   * cluster look dead. Not idempotent: a probe reports, it does not retry. */
  if (fr_kube_request(c->client, "GET", "/version", NULL, NULL, 0, FR_KUBE_PRIORITY, NULL,
                      on_probe_done, c, &c->probe_call) != 0)
    c->probe_ok = 0;
}

/* Frees what <c> owns but its client, informers and probe timer: the
 * one teardown of cluster__init's failure path and of on_client_freed,
 * whose callers have already dealt with those three. Safe on the zeroed
 * fields of a cluster that failed half-way. */
static void cluster_release(struct cluster *c) {
  pools_free(c);
  free(c->ns);
  free(c->server);
  strmap_close(&c->node_usage);
  strmap_close(&c->sb_node_usage);
  strmap_close(&c->gpu_usage);
  warm_ready_free(c);
  strmap_close(&c->tenant_counts);
  strmap_close(&c->tenant_gpus);
  podstore_free(&c->pods);
}

/* cluster__init's failure path closes a gateway it made without waiting. */
static void gw_dropped(void *arg) {
  (void)arg;
}

int cluster__init(struct cluster *c, uv_loop_t *loop, const struct fr_adapter_opts *cc, char *err,
                  size_t errlen) {
  struct fr_kube_creds *creds = NULL;
  struct fr_kube_client_opts opts;
  char path[512];
  int rc, i;

  /* The strmap tables start empty as zeroed. */
  memset(c, 0, sizeof(*c));
  c->loop = loop;
  c->cc = *cc;
  if (cc->in_cluster)
    rc = fr_kubeconfig_in_cluster(NULL, &creds, err, errlen);
  else
    rc = fr_kubeconfig_load(cc->kubeconfig, cc->context, &creds, err, errlen);
  if (rc != 0)
    goto fail;
  c->ns = strdup(cc->ns ? cc->ns : "default");
  c->server = strdup(creds->server);
  c->probe = malloc(sizeof(*c->probe));
  if (c->ns == NULL || c->server == NULL || c->probe == NULL) {
    rc = -ENOMEM;
    goto fail;
  }
  memset(&opts, 0, sizeof(opts));
  opts.name = cc->name;
  rc = fr_kube_client_new(loop, creds, &opts, &c->client);
  if (rc != 0) {
    snprintf(err, errlen, "%s: cannot create the API client", cc->name);
    goto fail;
  }
  if (cc->gateway != NULL && (rc = gwpath__new(loop, cc->name, cc->gateway, &c->gw, err, errlen)) != 0)
    goto fail;
  c->cc.gateway = NULL; /* borrowed for the call only: gwpath__new() copied what it needs */
  rc = upstream_object_path(path, sizeof(path), "/api/v1", c->ns, "pods", NULL, NULL);
  if (rc == 0)
    rc = fr_informer_new(c->client, path, FR_LABEL_SANDBOX "=true", on_informer, c, &c->inf[CLUSTER_INF_PODS]);
  if (rc == 0)
    rc = upstream_object_path(path, sizeof(path), "/apis/apps/v1", c->ns, "replicasets", NULL, NULL);
  if (rc == 0)
    rc = fr_informer_new(c->client, path, FR_LABEL_POOL, on_informer, c, &c->inf[CLUSTER_INF_POOLS]);
  if (rc == 0)
    rc = fr_informer_new(c->client, "/api/v1/nodes", NULL, on_informer, c, &c->inf[CLUSTER_INF_NODES]);
  /* The other pods: sandbox pods are counted from their own cache. */
  if (rc == 0)
    rc = fr_informer_new(c->client, "/api/v1/pods", FR_LABEL_SANDBOX "!=true", on_informer, c,
                         &c->inf[CLUSTER_INF_ALLPODS]);
  if (rc == 0)
    rc = upstream_object_path(path, sizeof(path), "/api/v1", c->ns, "resourcequotas", NULL, NULL);
  if (rc == 0)
    rc = fr_informer_new(c->client, path, NULL, on_informer, c, &c->inf[CLUSTER_INF_QUOTAS]);
  /* What pod options can ask for: a few small objects each. */
  if (rc == 0)
    rc = fr_informer_new(c->client, "/apis/node.k8s.io/v1/runtimeclasses", NULL, on_informer, c,
                         &c->inf[CLUSTER_INF_RUNTIMECLASSES]);
  if (rc == 0)
    rc = upstream_object_path(path, sizeof(path), "/api/v1", c->ns, "persistentvolumeclaims", NULL, NULL);
  if (rc == 0)
    rc = fr_informer_new(c->client, path, NULL, on_informer, c, &c->inf[CLUSTER_INF_PVCS]);
  if (rc == 0)
    rc = fr_informer_new(c->client, "/apis/storage.k8s.io/v1/storageclasses", NULL, on_informer, c,
                         &c->inf[CLUSTER_INF_STORAGECLASSES]);
  /* The commit markers: commit.c reads them (and sets their transform). */
  if (rc == 0)
    rc = upstream_object_path(path, sizeof(path), "/api/v1", c->ns, "configmaps", NULL, NULL);
  if (rc == 0)
    rc = fr_informer_new(c->client, path, FR_LABEL_BATCH, on_informer, c, &c->inf[CLUSTER_INF_MARKERS]);
  /* The sandboxes' egress policies (egress.c): a few small objects. */
  if (rc == 0)
    rc = upstream_netpol_path(path, sizeof(path), c->ns, NULL);
  if (rc == 0)
    rc = fr_informer_new(c->client, path, FR_LABEL_EGRESS, on_informer, c, &c->inf[CLUSTER_INF_NETPOLS]);
  if (rc == 0 && podstore_init(&c->pods) != 0)
    rc = -ENOMEM;
  if (rc != 0) {
    snprintf(err, errlen, "%s: out of memory", cc->name);
    goto fail;
  }
  fr_informer_set_owner_store(c->inf[CLUSTER_INF_PODS], store_rv, store_each, c);
  fr_informer_set_keep(c->inf[CLUSTER_INF_PODS], keep_pod);
  fr_informer_set_transform(c->inf[CLUSTER_INF_ALLPODS], slim_any_pod, c);
  c->pods.gpu_resource = c->cc.gpu_resource;
  uv_timer_init(loop, c->probe);
  c->probe->data = c;
  fr_kube_creds_free(creds);
  return 0;
fail:
  fr_kube_creds_free(creds);
  for (i = 0; i < CLUSTER_INF_COUNT; i++)
    fr_informer_free(c->inf[i]);
  fr_kube_client_free(c->client, NULL, NULL);
  if (c->gw != NULL)
    gwpath__close(c->gw, gw_dropped, NULL);
  free(c->probe); /* never initialised as a handle */
  cluster_release(c);
  memset(c, 0, sizeof(*c));
  return rc < 0 ? rc : -EINVAL;
}

void cluster__set_hooks(struct cluster *c, const struct cluster_hooks *h) {
  c->hooks = *h;
}

int cluster__start(struct cluster *c) {
  int i, rc;

  for (i = 0; i < CLUSTER_INF_COUNT; i++) {
    rc = fr_informer_start(c->inf[i]);
    if (rc != 0)
      return rc;
  }
  uv_timer_start(c->probe, on_probe_timer, 0, PROBE_MS);
  if (c->gw != NULL)
    gwpath__start(c->gw);
  return 0;
}

static void on_probe_closed(uv_handle_t *h) {
  free(h);
}

static void on_client_freed(void *arg) {
  struct cluster *c = arg;

  FR_ASSERT(c->clients_open > 0);
  if (--c->clients_open > 0)
    return; /* the other client's handles are still closing */
  cluster_release(c);
  c->closed_cb(c->closed_arg);
}

void cluster__close(struct cluster *c, void (*cb)(void *arg), void *arg) {
  int i;

  for (i = 0; i < CLUSTER_INF_COUNT; i++)
    fr_informer_free(c->inf[i]);
  uv_close((uv_handle_t *)c->probe, on_probe_closed);
  c->closed_cb = cb;
  c->closed_arg = arg;
  /* Cancels the probe too; each client calls back once its handles closed. */
  c->clients_open = c->gw != NULL ? 2 : 1;
  if (c->gw != NULL)
    gwpath__close(c->gw, on_client_freed, c);
  c->gw = NULL;
  fr_kube_client_free(c->client, on_client_freed, c);
}

struct fr_adapter_pool_view *cluster__pool(struct cluster *c, const char *name) {
  struct fr_adapter_pool_view *p = pool_find(c, name);

  if (p != NULL)
    p->ready = warm_ready_count(c, p->name);
  return p;
}

const struct fr_pod *cluster__pod(const struct cluster *c, const char *pod) {
  return podstore_get(&c->pods, pod);
}

const struct fr_pod *cluster__pod_next(const struct cluster *c, size_t *cursor) {
  return podstore_next(&c->pods, cursor);
}

int cluster__cache_current(const struct cluster *c, enum cluster_inf i) {
  return fr_informer_synced(c->inf[i]) && fr_informer_healthy(c->inf[i]);
}

int64_t cluster__sandboxes(const struct cluster *c) {
  return c->n_sandboxes;
}

void cluster__inflight_add(struct cluster *c, int64_t delta) {
  c->inflight += delta;
  FR_ASSERT(c->inflight >= 0);
}

int64_t cluster__inflight(const struct cluster *c) {
  return c->inflight;
}

/* ---------------------------------------------------------------------- */
/* view                                                                    */

static int64_t qty(json_t *map, const char *key, int milli) {
  const char *s = json_string_value(json_object_get(map, key));
  int64_t v = 0;

  if (s == NULL)
    return 0;
  if (milli ? fr_quantity_parse_milli(s, &v) != 0 : fr_quantity_parse_value(s, &v) != 0)
    return 0;
  return v;
}

static int pod_condition_true(json_t *obj, const char *type) {
  json_t *conds = json_object_get(json_object_get(obj, "status"), "conditions"), *c;
  size_t i;

  json_array_foreach(conds, i, c) {
    const char *t = json_string_value(json_object_get(c, "type"));
    const char *st = json_string_value(json_object_get(c, "status"));
    if (t != NULL && strcmp(t, type) == 0)
      return st != NULL && strcmp(st, "True") == 0;
  }
  return 0;
}

int64_t cluster__tenant_sandboxes(const struct cluster *c, const char *tenant) {
  const struct strmap_entry *n = strmap_get(&c->tenant_counts, tenant);

  return n != NULL ? n->v.n[0] : 0;
}

void cluster__tenant_usage(const struct cluster *c, const char *tenant, struct fr_tenant_usage *out) {
  const struct strmap_entry *n = strmap_get(&c->tenant_counts, tenant), *g = strmap_get(&c->tenant_gpus, tenant);

  memset(out, 0, sizeof(*out));
  if (n != NULL) {
    out->sandboxes = n->v.n[0];
    out->cpu_m = n->v.n[1];
    out->mem_b = n->v.n[2];
  }
  if (g != NULL)
    out->gpus = g->v.n[0];
}

static const char *pod_label(json_t *obj, const char *key) {
  return json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"), key));
}

static int64_t requests_of(json_t *pod, const char *res, int milli) {
  json_t *c;
  size_t i;
  int64_t sum = 0;

  json_array_foreach(json_object_get(json_object_get(pod, "spec"), "containers"), i, c)
    sum += qty(json_object_get(json_object_get(c, "resources"), "requests"), res, milli);
  return sum;
}

int cluster__node_unready(const struct cluster *c, const char *node) {
  json_t *n = node != NULL ? fr_informer_get(c->inf[CLUSTER_INF_NODES], "", node) : NULL;

  return n != NULL && !pod_condition_true(n, "Ready");
}

static int node_schedulable(json_t *node) {
  return pod_condition_true(node, "Ready") &&
         !json_is_true(json_object_get(json_object_get(node, "spec"), "unschedulable"));
}

/* What is in use on <node>: fedrouter's pods, plus every other pod when
 * the cluster-wide pod watch is available (synced, and allowed by RBAC). */
static void node_used(struct cluster *c, const char *node, int exact, int64_t used[3]) {
  const struct strmap_entry *s = node ? strmap_get(&c->sb_node_usage, node) : NULL;
  const struct strmap_entry *o = node && exact ? strmap_get(&c->node_usage, node) : NULL;
  int k;

  for (k = 0; k < 3; k++)
    used[k] = (s != NULL ? s->v.n[k] : 0) + (o != NULL ? o->v.n[k] : 0);
}

static int usage_exact(struct cluster *c) {
  return fr_informer_synced(c->inf[CLUSTER_INF_ALLPODS]) && fr_informer_healthy(c->inf[CLUSTER_INF_ALLPODS]);
}

/* Room left under the namespace's ResourceQuotas (status.hard - status.used),
 * per resource; -1 when no quota limits it. */
static void quota_room(struct cluster *c, int64_t *pods, int64_t *cpu_m, int64_t *mem_b) {
  json_t *q;
  const char *key;

  *pods = *cpu_m = *mem_b = -1;
  json_object_foreach(fr_informer_items(c->inf[CLUSTER_INF_QUOTAS]), key, q) {
    json_t *hard = json_object_get(json_object_get(q, "status"), "hard");
    json_t *used = json_object_get(json_object_get(q, "status"), "used");
    static const struct {
      const char *k;
      int milli;
      int which;
    } res[] = {{"pods", 0, 0},           {"count/pods", 0, 0}, {"requests.cpu", 1, 1},
               {"cpu", 1, 1},            {"requests.memory", 0, 2}, {"memory", 0, 2}};
    size_t i;

    for (i = 0; i < sizeof(res) / sizeof(res[0]); i++) {
      int64_t room, *dst = res[i].which == 0 ? pods : res[i].which == 1 ? cpu_m : mem_b;
      if (json_object_get(hard, res[i].k) == NULL)
        continue;
      room = qty(hard, res[i].k, res[i].milli) - qty(used, res[i].k, res[i].milli);
      if (room < 0)
        room = 0;
      if (*dst < 0 || room < *dst)
        *dst = room;
    }
  }
}

/* 1 if a StorageClass is marked the default (what a claim without a
 * class gets from the API server's admission). */
static int has_default_class(struct cluster *c) {
  const char *key;
  json_t *sc;

  json_object_foreach(fr_informer_items(c->inf[CLUSTER_INF_STORAGECLASSES]), key, sc) {
    const char *d = json_string_value(json_object_get(json_object_get(json_object_get(sc, "metadata"), "annotations"),
                                                      "storageclass.kubernetes.io/is-default-class"));
    if (d != NULL && strcmp(d, "true") == 0)
      return 1;
  }
  return 0;
}

/* What stops the cluster from hosting pods with <opts> at all (the
 * fr_adapter_fit_slots codes), or NULL. */
static const char *unfit_objects(struct cluster *c, const struct fr_podopts *opts, char *detail, size_t len) {
  const char *rc = podopts_runtime_class(opts), *k;
  json_t *v;

  if (rc != NULL && fr_informer_get(c->inf[CLUSTER_INF_RUNTIMECLASSES], "", rc) == NULL) {
    snprintf(detail, len, "RuntimeClass \"%.100s\" not found%s", rc,
             fr_informer_synced(c->inf[CLUSTER_INF_RUNTIMECLASSES]) ? "" : " (RuntimeClasses not listed yet)");
    return "no_runtime_class";
  }
  if ((v = podopts_field(opts, "workspace")) != NULL) {
    const char *sc = json_string_value(json_object_get(v, "storage_class"));
    if (sc != NULL ? fr_informer_get(c->inf[CLUSTER_INF_STORAGECLASSES], "", sc) == NULL : !has_default_class(c)) {
      if (sc != NULL)
        snprintf(detail, len, "StorageClass \"%.100s\" not found%s", sc,
                 fr_informer_synced(c->inf[CLUSTER_INF_STORAGECLASSES]) ? "" : " (StorageClasses not listed yet)");
      else
        snprintf(detail, len, "no default StorageClass for the workspace%s",
                 fr_informer_synced(c->inf[CLUSTER_INF_STORAGECLASSES]) ? "" : " (StorageClasses not listed yet)");
      return "no_storage_class";
    }
  }
  json_object_foreach(podopts_field(opts, "volumes"), k, v) {
    if (fr_informer_get(c->inf[CLUSTER_INF_PVCS], c->ns, json_string_value(v)) == NULL) {
      snprintf(detail, len, "PersistentVolumeClaim \"%.100s\" not found in namespace %s%s",
               json_string_value(v), c->ns,
               fr_informer_synced(c->inf[CLUSTER_INF_PVCS]) ? "" : " (claims not listed yet)");
      return "no_pvc";
    }
  }
  return NULL;
}

/* <free>: subtract usage, quotas and reservations; else the total the
 * ready nodes hold when empty. Only nodes that admit pods with <opts>
 * (may be NULL) and have its GPUs count; <admit> (may be NULL) gets how
 * many admit them (before GPUs) and <gpu_nodes> how many of those have
 * enough GPU allocatable. */
static int64_t slots(struct cluster *c, int64_t cpu_m, int64_t mem_b, const struct fr_podopts *opts,
                     int free_only, int64_t *admit, int64_t *gpu_nodes) {
  int exact = usage_exact(c);
  int64_t gpus = fr_podopts_gpus(opts), n = 0, qp, qc, qm, u[3] = {0, 0, 0}, na = 0, ng = 0;
  const char *res = c->cc.gpu_resource ? c->cc.gpu_resource : "nvidia.com/gpu";
  json_t *node;
  const char *key;

  json_object_foreach(fr_informer_items(c->inf[CLUSTER_INF_NODES]), key, node) {
    json_t *alloc = json_object_get(json_object_get(node, "status"), "allocatable");
    const char *name = json_string_value(json_object_get(json_object_get(node, "metadata"), "name"));
    int64_t fc, fm, fp, fg = 0, fit;

    if (!node_schedulable(node) || (opts != NULL && !podopts_node_admits(opts, node)))
      continue;
    na++;
    if (gpus > 0) {
      /* GPUs count per node like cpu: allocatable less what pods ask. */
      const struct strmap_entry *g = free_only && name ? strmap_get(&c->gpu_usage, name) : NULL;
      if ((fg = qty(alloc, res, 0)) < gpus)
        continue;
      ng++;
      if (g != NULL)
        fg -= g->v.n[0] + (exact ? g->v.n[1] : 0);
    }
    if (free_only)
      node_used(c, name, exact, u);
    fc = qty(alloc, "cpu", 1) - u[0];
    fm = qty(alloc, "memory", 0) - u[1];
    fp = qty(alloc, "pods", 0) - u[2];
    /* Per node, so a cluster with room spread thin over many nodes does not
     * count as having room for a shape no single node fits. */
    fit = fp;
    if (cpu_m > 0 && fc / cpu_m < fit)
      fit = fc / cpu_m;
    if (mem_b > 0 && fm / mem_b < fit)
      fit = fm / mem_b;
    if (gpus > 0 && fg / gpus < fit)
      fit = fg / gpus;
    if (fit > 0)
      n += fit;
  }
  if (admit != NULL)
    *admit = na;
  if (gpu_nodes != NULL)
    *gpu_nodes = ng;
  if (!free_only)
    return n;
  quota_room(c, &qp, &qc, &qm);
  if (qp >= 0 && qp < n)
    n = qp;
  if (qc >= 0 && cpu_m > 0 && qc / cpu_m < n)
    n = qc / cpu_m;
  if (qm >= 0 && mem_b > 0 && qm / mem_b < n)
    n = qm / mem_b;
  n -= c->inflight + c->reserved;
  return n > 0 ? n : 0;
}

void cluster__reserve(struct cluster *c, int64_t delta) {
  c->reserved += delta;
  if (c->reserved < 0)
    c->reserved = 0;
}

void cluster__reserve_warm(struct cluster *c, const char *pool, int64_t delta) {
  struct fr_adapter_pool_view *p = pool != NULL ? pool_find(c, pool) : NULL;

  if (p == NULL)
    return;
  p->reserved += delta;
  if (p->reserved < 0)
    p->reserved = 0;
}

int64_t cluster__free_slots(struct cluster *c, int64_t cpu_m, int64_t mem_b) {
  return slots(c, cpu_m, mem_b, NULL, 1, NULL, NULL);
}

int64_t cluster__fit_slots(struct cluster *c, int64_t cpu_m, int64_t mem_b, const struct fr_podopts *opts,
                           const char **unfit, char *detail, size_t detail_len) {
  char scratch[8];
  const char *why;
  int64_t n, admit, gpu_nodes;

  if (detail == NULL) {
    detail = scratch;
    detail_len = sizeof(scratch);
  }
  if (detail_len > 0)
    detail[0] = '\0';
  if (unfit != NULL)
    *unfit = NULL;
  if (opts == NULL)
    return slots(c, cpu_m, mem_b, NULL, 1, NULL, NULL);
  if ((why = unfit_objects(c, opts, detail, detail_len)) != NULL) {
    if (unfit != NULL)
      *unfit = why;
    return 0;
  }
  n = slots(c, cpu_m, mem_b, opts, 1, &admit, &gpu_nodes);
  why = admit == 0 ? "no_matching_node" : fr_podopts_gpus(opts) > 0 && gpu_nodes == 0 ? "no_gpu_node" : NULL;
  if (why != NULL && unfit != NULL)
    *unfit = why;
  if (admit == 0)
    snprintf(detail, detail_len, "no ready node matches the node selector and has only taints the "
             "tolerations tolerate");
  else if (why != NULL)
    snprintf(detail, detail_len, "no such node has %lld allocatable %s", (long long)fr_podopts_gpus(opts),
             c->cc.gpu_resource ? c->cc.gpu_resource : "nvidia.com/gpu");
  return why != NULL ? 0 : n;
}

int64_t cluster__total_slots(struct cluster *c, int64_t cpu_m, int64_t mem_b) {
  return slots(c, cpu_m, mem_b, NULL, 0, NULL, NULL);
}

void cluster__pool_slots(struct cluster *c, const struct fr_adapter_pool_view *pv, int64_t *free_slots,
                         int64_t *total_slots) {
  const char *unfit;

  *free_slots = cluster__fit_slots(c, pv->cpu_m, pv->mem_b, pv->opts, &unfit, NULL, 0);
  *total_slots = unfit != NULL ? 0 : slots(c, pv->cpu_m, pv->mem_b, pv->opts, 0, NULL, NULL);
}

void cluster__view(struct cluster *c, struct fr_adapter_view *v) {
  json_t *obj;
  const char *key;
  uint64_t now = uv_now(c->loop), contact = 0;
  int i;

  memset(v, 0, sizeof(*v));
  v->name = c->cc.name;
  v->region = c->cc.region;
  v->server = c->server;
  v->synced = 1;
  for (i = 0; i < CLUSTER_INF_COUNT; i++) {
    uint64_t t = fr_informer_last_contact_ms(c->inf[i]);
    if (i < CLUSTER_INF_REQUIRED)
      v->synced &= fr_informer_synced(c->inf[i]);
    if (t > contact)
      contact = t;
  }
  if (c->last_probe_ok_ms > contact)
    contact = c->last_probe_ok_ms;
  v->last_contact_age_ms = contact ? now - contact : UINT64_MAX;
  /* Reachable is the breaker's call; how fresh the caches are is
   * last_contact_age_ms, which placement bounds separately. */
  v->healthy = c->breaker == CLUSTER_BR_CLOSED && contact != 0;
  v->breaker = breaker_names[c->breaker];
  v->api_latency_ms = c->latency_ewma;
  v->usage_exact = usage_exact(c);
  v->inflight = c->inflight;
  v->reserved = c->reserved;
  quota_room(c, &v->quota_pods, &v->quota_cpu_m, &v->quota_mem_b);

  json_object_foreach(fr_informer_items(c->inf[CLUSTER_INF_NODES]), key, obj) {
    json_t *alloc = json_object_get(json_object_get(obj, "status"), "allocatable");
    const char *name = json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
    int64_t u[3];

    v->nodes++;
    if (!node_schedulable(obj))
      continue;
    v->nodes_ready++;
    v->alloc_cpu_m += qty(alloc, "cpu", 1);
    v->alloc_mem_b += qty(alloc, "memory", 0);
    v->alloc_pods += qty(alloc, "pods", 0);
    node_used(c, name, v->usage_exact, u);
    v->used_cpu_m += u[0];
    v->used_mem_b += u[1];
    v->used_pods += u[2];
  }

  v->pools = c->pools;
  v->npools = c->npools;
  for (i = 0; i < (int)v->npools; i++)
    v->pools[i].ready = warm_ready_count(c, v->pools[i].name);
  v->sandboxes = c->n_sandboxes;
  v->sandbox_cpu_m = c->sb_cpu_m;
  v->sandbox_mem_b = c->sb_mem_b;
  v->warm_pods = c->n_warm;
}
