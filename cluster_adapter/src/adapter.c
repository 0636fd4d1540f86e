/* adapter.c - one cluster: client, informers, and the view built on them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/informer.h"
#include "fr/kube.h"
#include "fr/kubeconfig.h"
#include "fr/log.h"
#include "fr/quantity.h"
#include "fr/util.h"
#include "adapter_internal.h"

/* Health probe: GET /version every PROBE_MS feeds the latency EWMA and, with
 * the informers' contact times, the health flag. */
#define PROBE_MS 2000
/* Weight of a new latency sample in the EWMA. */
#define EWMA_ALPHA 0.3
/* A cluster not heard from for this long is unhealthy even if no request
 * has failed yet (a hung connection). */
#define STALE_MS 10000

static void on_informer(struct fr_informer *inf, enum fr_informer_event ev, json_t *obj, json_t *old,
                        void *arg) {
  struct fr_adapter *a = arg;

  (void)old;
  /* The view is computed on demand from the caches; pod changes also wake
   * the creates waiting for their pods. */
  if (inf == a->inf[INF_PODS] && obj != NULL)
    sandbox_on_pod(a, ev, obj);
}

static void on_probe_done(const struct fr_kube_response *r, void *arg) {
  struct fr_adapter *a = arg;

  a->probe_call = NULL;
  a->probe_ok = r->status == 200;
  if (a->probe_ok) {
    a->last_probe_ok_ms = uv_now(a->loop);
    a->latency_ewma = a->latency_ewma == 0 ? r->elapsed_ms
                                           : EWMA_ALPHA * r->elapsed_ms + (1 - EWMA_ALPHA) * a->latency_ewma;
  } else {
    FR_WARN("adapter", "%s: health probe failed (%d %s)", a->cc.name, r->status,
            r->error ? r->error : "");
  }
}

static void on_probe_timer(uv_timer_t *t) {
  struct fr_adapter *a = t->data;

  if (a->probe_call != NULL)
    return; /* the previous probe is still out: it will count as a failure when it ends */
  if (fr_kube_request(a->client, "GET", "/version", NULL, NULL, 0, 0, NULL, on_probe_done, a,
                      &a->probe_call) != 0)
    a->probe_ok = 0;
}

int fr_adapter_new(uv_loop_t *loop, const struct fr_adapter_opts *cc, struct fr_adapter **out,
                   char *err, size_t errlen) {
  struct fr_adapter *a = calloc(1, sizeof(*a));
  struct fr_kube_creds *creds = NULL;
  struct fr_kube_client_opts opts;
  char path[512];
  int rc, i;

  if (a == NULL)
    return -ENOMEM;
  a->loop = loop;
  a->cc = *cc;
  rc = fr_kubeconfig_load(cc->kubeconfig, cc->context, &creds, err, errlen);
  if (rc != 0)
    goto fail;
  a->ns = strdup(cc->ns ? cc->ns : "default");
  a->server = strdup(creds->server);
  a->probe = malloc(sizeof(*a->probe));
  if (a->ns == NULL || a->server == NULL || a->probe == NULL) {
    rc = -ENOMEM;
    goto fail;
  }
  memset(&opts, 0, sizeof(opts));
  opts.name = cc->name;
  rc = fr_kube_client_new(loop, creds, &opts, &a->client);
  if (rc != 0) {
    snprintf(err, errlen, "%s: cannot create the API client", cc->name);
    goto fail;
  }
  snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", a->ns);
  rc = fr_informer_new(a->client, path, FR_LABEL_SANDBOX "=true", on_informer, a, &a->inf[INF_PODS]);
  snprintf(path, sizeof(path), "/apis/apps/v1/namespaces/%s/replicasets", a->ns);
  if (rc == 0)
    rc = fr_informer_new(a->client, path, FR_LABEL_POOL, on_informer, a, &a->inf[INF_POOLS]);
  if (rc == 0)
    rc = fr_informer_new(a->client, "/api/v1/nodes", NULL, on_informer, a, &a->inf[INF_NODES]);
  if (rc != 0) {
    snprintf(err, errlen, "%s: out of memory", cc->name);
    goto fail;
  }
  if (sandbox_init(a) != 0) {
    rc = -ENOMEM;
    snprintf(err, errlen, "%s: out of memory", cc->name);
    goto fail;
  }
  uv_timer_init(loop, a->probe);
  a->probe->data = a;
  fr_kube_creds_free(creds);
  *out = a;
  return 0;
fail:
  fr_kube_creds_free(creds);
  json_decref(a->claiming);
  json_decref(a->reaping);
  free(a->reaper);
  for (i = 0; i < INF_COUNT; i++)
    fr_informer_free(a->inf[i]);
  fr_kube_client_free(a->client, NULL, NULL);
  free(a->probe);
  free(a->ns);
  free(a->server);
  free(a);
  return rc < 0 ? rc : -EINVAL;
}

int fr_adapter_start(struct fr_adapter *a) {
  int i, rc;

  for (i = 0; i < INF_COUNT; i++) {
    rc = fr_informer_start(a->inf[i]);
    if (rc != 0)
      return rc;
  }
  uv_timer_start(a->probe, on_probe_timer, 0, PROBE_MS);
  sandbox_start(a);
  return 0;
}

static void on_probe_closed(uv_handle_t *h) {
  free(h);
}

static void on_client_freed(void *arg) {
  struct fr_adapter *a = arg;
  void (*cb)(void *) = a->free_cb;
  void *cb_arg = a->free_arg;

  free(a->pools);
  free(a->ns);
  free(a->server);
  json_decref(a->claiming);
  json_decref(a->reaping);
  free(a);
  if (cb != NULL)
    cb(cb_arg);
}

void fr_adapter_free(struct fr_adapter *a, void (*cb)(void *arg), void *arg) {
  int i;

  if (a == NULL)
    return;
  sandbox_stop(a);
  for (i = 0; i < INF_COUNT; i++)
    fr_informer_free(a->inf[i]);
  uv_close((uv_handle_t *)a->probe, on_probe_closed);
  a->free_cb = cb;
  a->free_arg = arg;
  /* Cancels the probe too; the client calls back once its handles closed. */
  fr_kube_client_free(a->client, on_client_freed, a);
}

struct fr_kube_client *fr_adapter_client(struct fr_adapter *a) {
  return a->client;
}

const char *fr_adapter_namespace(const struct fr_adapter *a) {
  return a->ns;
}

const char *fr_adapter_name(const struct fr_adapter *a) {
  return a->cc.name;
}

const char *fr_adapter_region(const struct fr_adapter *a) {
  return a->cc.region;
}

json_t *fr_adapter_pods(struct fr_adapter *a) {
  return fr_informer_items(a->inf[INF_PODS]);
}

json_t *fr_adapter_pool_sets(struct fr_adapter *a) {
  return fr_informer_items(a->inf[INF_POOLS]);
}

json_t *fr_adapter_pod(struct fr_adapter *a, const char *pod) {
  return fr_informer_get(a->inf[INF_PODS], a->ns, pod);
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

int pod_condition_true(json_t *obj, const char *type) {
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

const char *pod_label(json_t *obj, const char *key) {
  return json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"), key));
}

const char *pod_annotation(json_t *obj, const char *key) {
  return json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), "annotations"), key));
}

static struct fr_adapter_pool_view *pool_find(struct fr_adapter_view *v, const char *name) {
  size_t i;

  for (i = 0; i < v->npools; i++)
    if (strcmp(v->pools[i].name, name) == 0)
      return &v->pools[i];
  return NULL;
}

void fr_adapter_view(struct fr_adapter *a, struct fr_adapter_view *v) {
  json_t *items, *obj;
  const char *key;
  uint64_t now = uv_now(a->loop), contact = 0;
  int i;

  memset(v, 0, sizeof(*v));
  v->name = a->cc.name;
  v->region = a->cc.region;
  v->server = a->server;
  v->synced = 1;
  for (i = 0; i < INF_COUNT; i++) {
    uint64_t c = fr_informer_last_contact_ms(a->inf[i]);
    v->synced &= fr_informer_synced(a->inf[i]);
    if (c > contact)
      contact = c;
  }
  if (a->last_probe_ok_ms > contact)
    contact = a->last_probe_ok_ms;
  v->last_contact_age_ms = contact ? now - contact : UINT64_MAX;
  v->healthy = a->probe_ok && fr_informer_healthy(a->inf[INF_PODS]) && contact != 0 &&
               now - contact < STALE_MS;
  v->api_latency_ms = a->latency_ewma;

  json_object_foreach(fr_informer_items(a->inf[INF_NODES]), key, obj) {
    json_t *alloc = json_object_get(json_object_get(obj, "status"), "allocatable");
    v->nodes++;
    if (!pod_condition_true(obj, "Ready") ||
        json_is_true(json_object_get(json_object_get(obj, "spec"), "unschedulable")))
      continue;
    v->nodes_ready++;
    v->alloc_cpu_m += qty(alloc, "cpu", 1);
    v->alloc_mem_b += qty(alloc, "memory", 0);
    v->alloc_pods += qty(alloc, "pods", 0);
  }

  /* Pools first, so pod counting can find them. */
  items = fr_informer_items(a->inf[INF_POOLS]);
  if (json_object_size(items) > a->pools_cap) {
    struct fr_adapter_pool_view *np = realloc(a->pools, json_object_size(items) * sizeof(*np));
    if (np != NULL) {
      a->pools = np;
      a->pools_cap = json_object_size(items);
    }
  }
  v->pools = a->pools;
  json_object_foreach(items, key, obj) {
    const char *name = pod_label(obj, FR_LABEL_POOL);
    if (name == NULL || v->npools == a->pools_cap)
      continue;
    v->pools[v->npools].name = name;
    v->pools[v->npools].target = json_integer_value(json_object_get(json_object_get(obj, "spec"), "replicas"));
    v->pools[v->npools].ready = 0;
    v->npools++;
  }

  json_object_foreach(fr_informer_items(a->inf[INF_PODS]), key, obj) {
    json_t *spec = json_object_get(obj, "spec"), *c;
    const char *phase = json_string_value(json_object_get(json_object_get(obj, "status"), "phase"));
    const char *state = pod_label(obj, FR_LABEL_STATE);
    size_t k;

    if (json_object_get(json_object_get(obj, "metadata"), "deletionTimestamp") != NULL)
      continue;
    if (phase != NULL && (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0))
      continue;
    if (json_string_value(json_object_get(spec, "nodeName")) != NULL) {
      v->used_pods++;
      json_array_foreach(json_object_get(spec, "containers"), k, c) {
        json_t *req = json_object_get(json_object_get(c, "resources"), "requests");
        v->used_cpu_m += qty(req, "cpu", 1);
        v->used_mem_b += qty(req, "memory", 0);
      }
    }
    if (state != NULL && strcmp(state, "warm") == 0) {
      if (pod_condition_true(obj, "Ready")) {
        struct fr_adapter_pool_view *p = pod_label(obj, FR_LABEL_POOL) ? pool_find(v, pod_label(obj, FR_LABEL_POOL)) : NULL;
        v->warm_pods++;
        if (p != NULL)
          p->ready++;
      }
    } else {
      v->sandboxes++;
    }
  }
}
