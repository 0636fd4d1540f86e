/* adapter.c - one cluster as the router sees it (fr/adapter.h): the top of
 * the adapter, and only its lifecycle.
 *
 * The layers below, each owning its state, each calling only downwards:
 *
 *   adapter.c   new / start / free, the hooks' dispatch, the public calls
 *      |
 *      +-- sandbox.c  creates, deletes, pause, resume,  --> commit.c, agent.c,
 *      |              pools, reaper                         workspace.c, egress.c
 *      +-- exec.c     buffered exec                     --> proc.c, agent.c
 *      +-- proc.c     agent processes, unary calls      --> agent.c
 *      +-- porttunnel.c  upgrades to a sandbox's ports   --> agent.c
 *      +-- secret.c   Secrets: reads for creates, /v1/secrets
 *      +-- usage.c    usage per (tenant, pool) over time
 *      +-- workspace.c  the sandboxes' own claims, their marks and sweep
 *      +-- egress.c   egress NetworkPolicies, their sweep
 *      +-- commit.c   commit markers and their rule
 *      +-- agent.c    the agent through the pod proxy
 *      v
 *   cluster.c   client, informers, pod cache, health and breaker, pools,
 *               counts, warm sets, capacity and reservations
 *      v
 *   kube.c, kube_exec.c, kubecreds.c, informer.c, podstore.c, slab.c,
 *   strmap.c, podopts.c, upstream.c
 *
 * What cluster.c must tell the layers above (a sandbox pod changed, the
 * breaker opened) reaches them through the hooks this file sets, never
 * by a call up. Each public fr_adapter_* call below hands over to the file
 * that owns it; the one state kept here is whether the adapter is being
 * freed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "fr/adapter.h"
#include "fr/kube.h"
#include "agent.h"
#include "cluster.h"
#include "commit.h"
#include "egress.h"
#include "exec.h"
#include "porttunnel.h"
#include "proc.h"
#include "sandbox.h"
#include "secret.h"
#include "usage.h"
#include "workspace.h"

struct fr_adapter {
  struct cluster cl;             /* the bottom layer: every module below holds &cl */
  struct commits *cm;
  struct secrets *sec;
  struct usage *use;
  struct workspaces *ws;
  struct egresses *eg;
  struct sandboxes *sb;
  int stopping;                  /* fr_adapter_free() has begun: no new creates or commits */
  void (*free_cb)(void *arg);
  void *free_arg;
};

/* ---- the cluster's hooks ---- */

static void on_pod(enum fr_informer_event ev, const struct fr_pod *p, const struct fr_pod *old, void *arg) {
  struct fr_adapter *a = arg;

  if (ev == FR_INF_DELETED)
    usage__on_pod(a->use, NULL, p);
  else
    usage__on_pod(a->use, p, old);
  /* The batch counts first: the reaper's due times read the commit rule. */
  commit__on_pod(a->cm, ev, p, old);
  egress__on_pod(a->eg, ev, p, old);
  sandbox__on_pod(a->sb, ev, p, old);
}

static void on_down(void *arg) {
  struct fr_adapter *a = arg;

  sandbox__cluster_down(a->sb);
}

/* ---- lifecycle ---- */

/* The modules' state and <a> itself; their callers have stopped them
 * (or never started them). */
static void adapter_release(struct fr_adapter *a) {
  sandbox__free(a->sb);
  egress__free(a->eg);
  workspace__free(a->ws);
  usage__free(a->use);
  secret__free(a->sec);
  commit__free(a->cm);
  free(a);
}

int fr_adapter_new(uv_loop_t *loop, const struct fr_adapter_opts *opts, struct fr_adapter **out, char *err,
                   size_t errlen) {
  struct fr_adapter *a = calloc(1, sizeof(*a));
  struct cluster_hooks hooks;
  int64_t grace_s;
  int rc;

  if (a == NULL)
    return -ENOMEM;
  /* The modules only keep &a->cl until they are started. */
  grace_s = opts->batch_commit_timeout_s > 0 ? opts->batch_commit_timeout_s : FR_BATCH_COMMIT_TIMEOUT_S;
  a->cm = commit__new(&a->cl, grace_s);
  a->sec = secret__new(&a->cl);
  a->use = usage__new(&a->cl);
  a->ws = workspace__new(&a->cl);
  a->eg = egress__new(&a->cl, grace_s);
  a->sb = a->cm != NULL && a->ws != NULL && a->eg != NULL ? sandbox__new(&a->cl, a->cm, a->ws, a->eg) : NULL;
  if (a->cm == NULL || a->sec == NULL || a->use == NULL || a->ws == NULL || a->eg == NULL || a->sb == NULL) {
    snprintf(err, errlen, "%s: out of memory", opts->name);
    adapter_release(a);
    return -ENOMEM;
  }
  rc = cluster__init(&a->cl, loop, opts, err, errlen);
  if (rc != 0) {
    adapter_release(a);
    return rc;
  }
  fr_informer_set_transform(a->cl.inf[CLUSTER_INF_MARKERS], commit__slim_marker, NULL);
  hooks.on_pod = on_pod;
  hooks.on_down = on_down;
  hooks.arg = a;
  cluster__set_hooks(&a->cl, &hooks);
  *out = a;
  return 0;
}

int fr_adapter_start(struct fr_adapter *a) {
  int rc = cluster__start(&a->cl);

  if (rc != 0)
    return rc;
  sandbox__start(a->sb);
  return 0;
}

static void on_cluster_closed(void *arg) {
  struct fr_adapter *a = arg;
  void (*cb)(void *) = a->free_cb;
  void *cb_arg = a->free_arg;

  adapter_release(a);
  if (cb != NULL)
    cb(cb_arg);
}

void fr_adapter_free(struct fr_adapter *a, void (*cb)(void *arg), void *arg) {
  if (a == NULL)
    return;
  /* From the top down: what waits on the cluster is answered first (its
   * callbacks may still call in, and get -ESHUTDOWN), then the cluster
   * closes. */
  a->stopping = 1;
  sandbox__stop(a->sb);
  commit__stop(a->cm);
  egress__stop(a->eg);
  secret__stop(a->sec);
  a->free_cb = cb;
  a->free_arg = arg;
  cluster__close(&a->cl, on_cluster_closed, a);
}

/* ---- the cluster (cluster.c) ---- */

const char *fr_adapter_data_path(const struct fr_adapter *a) {
  return gwpath__healthy(a->cl.gw) ? "gateway" : "pod-proxy";
}

void fr_adapter_data_path_calls(const struct fr_adapter *a, uint64_t *gateway, uint64_t *pod_proxy) {
  *gateway = a->cl.path_calls[CLUSTER_PATH_GATEWAY];
  *pod_proxy = a->cl.path_calls[CLUSTER_PATH_POD_PROXY];
}

void fr_adapter_cache_stats(const struct fr_adapter *a, struct fr_adapter_cache_stats *out) {
  size_t names;

  out->pods = a->cl.pods.n;
  out->table_slots = a->cl.pods.cap;
  out->reaper_entries = names = 0;
  if (a->sb != NULL)
    sandbox__due_stats(a->sb, &out->reaper_entries, &names);
  out->record_bytes = a->cl.pods.slab.npages * SLAB_PAGE + names;
}

void fr_adapter_set_api_observer(struct fr_adapter *a, fr_adapter_api_observer_cb cb, void *arg) {
  fr_kube_client_set_observer(a->cl.client, cb, arg);
}

const char *fr_adapter_name(const struct fr_adapter *a) {
  return a->cl.cc.name;
}

const char *fr_adapter_region(const struct fr_adapter *a) {
  return a->cl.cc.region;
}

void fr_adapter_report(struct fr_adapter *a, int ok) {
  cluster__report(&a->cl, ok);
}

void fr_adapter_view(struct fr_adapter *a, struct fr_adapter_view *v) {
  cluster__view(&a->cl, v);
}

int64_t fr_adapter_free_slots(struct fr_adapter *a, int64_t cpu_m, int64_t mem_b) {
  return cluster__free_slots(&a->cl, cpu_m, mem_b);
}

int64_t fr_adapter_fit_slots(struct fr_adapter *a, int64_t cpu_m, int64_t mem_b, const struct fr_podopts *opts,
                             const char **unfit, char *detail, size_t detail_len) {
  return cluster__fit_slots(&a->cl, cpu_m, mem_b, opts, unfit, detail, detail_len);
}

void fr_adapter_pool_slots(struct fr_adapter *a, const struct fr_adapter_pool_view *pv, int64_t *free_slots,
                           int64_t *total_slots) {
  cluster__pool_slots(&a->cl, pv, free_slots, total_slots);
}

int64_t fr_adapter_total_slots(struct fr_adapter *a, int64_t cpu_m, int64_t mem_b) {
  return cluster__total_slots(&a->cl, cpu_m, mem_b);
}

int64_t fr_adapter_tenant_sandboxes(struct fr_adapter *a, const char *tenant) {
  return cluster__tenant_sandboxes(&a->cl, tenant);
}

void fr_adapter_tenant_usage(struct fr_adapter *a, const char *tenant, struct fr_tenant_usage *out) {
  cluster__tenant_usage(&a->cl, tenant, out);
}

/* ---- usage over time (usage.c) ---- */

size_t fr_adapter_usage_rows(const struct fr_adapter *a) {
  return usage__rows(a->use);
}

int fr_adapter_usage_row(struct fr_adapter *a, size_t i, struct fr_adapter_usage *out) {
  return usage__row(a->use, i, out);
}

const struct fr_adapter_pool_view *fr_adapter_pool(struct fr_adapter *a, const char *name) {
  return cluster__pool(&a->cl, name);
}

const struct fr_pod *fr_adapter_pod(struct fr_adapter *a, const char *pod) {
  return cluster__pod(&a->cl, pod);
}

const struct fr_pod *fr_adapter_pod_next(struct fr_adapter *a, size_t *cursor) {
  return cluster__pod_next(&a->cl, cursor);
}

int fr_adapter_pods_synced(const struct fr_adapter *a) {
  return fr_informer_synced(a->cl.inf[CLUSTER_INF_PODS]);
}

int fr_adapter_pools_synced(const struct fr_adapter *a) {
  return fr_informer_synced(a->cl.inf[CLUSTER_INF_POOLS]);
}

int fr_adapter_node_unready(struct fr_adapter *a, const char *node) {
  return cluster__node_unready(&a->cl, node);
}

void fr_adapter_reserve(struct fr_adapter *a, int64_t delta) {
  cluster__reserve(&a->cl, delta);
}

void fr_adapter_reserve_warm(struct fr_adapter *a, const char *pool, int64_t delta) {
  cluster__reserve_warm(&a->cl, pool, delta);
}

int64_t fr_adapter_inflight(const struct fr_adapter *a) {
  return cluster__inflight(&a->cl);
}

/* ---- sandboxes and pools (sandbox.c) ---- */

int fr_adapter_sandbox_create(struct fr_adapter *a, const struct fr_sandbox_spec *spec, fr_sandbox_cb cb,
                              void *arg) {
  if (a->stopping)
    return -ESHUTDOWN;
  return sandbox__create(a->sb, spec, cb, arg);
}

int fr_adapter_sandbox_delete(struct fr_adapter *a, const char *pod, const char *request_id,
                              void (*cb)(int status, const char *message, void *arg), void *arg) {
  return sandbox__delete(a->sb, pod, request_id, cb, arg);
}

int fr_adapter_egress_of(struct fr_adapter *a, const struct fr_pod *pod, struct fr_egress *out) {
  return egress__of(a->eg, pod, out);
}

int fr_adapter_sandbox_pause(struct fr_adapter *a, const char *pod, int64_t expires_s, const char *request_id,
                             void (*cb)(int status, const char *message, void *arg), void *arg) {
  return sandbox__pause(a->sb, pod, expires_s, request_id, cb, arg);
}

int fr_adapter_sandbox_resume(struct fr_adapter *a, const char *pod, json_t *secrets, int64_t lifetime_s,
                              const char *request_id, fr_sandbox_cb cb, void *arg) {
  if (a->stopping)
    return -ESHUTDOWN;
  return sandbox__resume(a->sb, pod, secrets, lifetime_s, request_id, cb, arg);
}

int fr_adapter_sandbox_set_expiry(struct fr_adapter *a, const char *pod, int64_t expires_s, const char *request_id,
                                  void (*cb)(int status, const char *message, void *arg), void *arg) {
  return sandbox__set_expiry(a->sb, pod, expires_s, request_id, cb, arg);
}

int fr_adapter_pod_leaving(struct fr_adapter *a, const struct fr_pod *pod) {
  return sandbox__leaving(a->sb, pod);
}

int fr_adapter_pod_delete_pending(struct fr_adapter *a, const struct fr_pod *pod) {
  return sandbox__delete_pending(a->sb, pod);
}

int fr_adapter_pod_evicted(struct fr_adapter *a, const struct fr_pod *pod) {
  return sandbox__evicted(a->sb, pod);
}

int fr_adapter_pool_create(struct fr_adapter *a, const struct fr_pool_spec *spec,
                           void (*cb)(int status, const char *message, void *arg), void *arg) {
  return sandbox__pool_create(a->sb, spec, cb, arg);
}

int fr_adapter_pool_resize(struct fr_adapter *a, const char *pool, int64_t replicas,
                           void (*cb)(int status, const char *message, void *arg), void *arg) {
  return sandbox__pool_resize(a->sb, pool, replicas, cb, arg);
}

int fr_adapter_pool_delete(struct fr_adapter *a, const char *pool,
                           void (*cb)(int status, const char *message, void *arg), void *arg) {
  return sandbox__pool_delete(a->sb, pool, cb, arg);
}

/* ---- workspaces (workspace.c) ---- */

int fr_adapter_workspace(struct fr_adapter *a, const char *pod, struct fr_workspace *out) {
  return workspace__get(a->ws, pod, out);
}

int fr_adapter_workspace_next(struct fr_adapter *a, void **cursor, struct fr_workspace *out) {
  return workspace__next(a->ws, cursor, out);
}

int fr_adapter_workspaces_synced(const struct fr_adapter *a) {
  return workspace__synced(a->ws);
}

/* ---- commit markers (commit.c) and Secrets (secret.c) ---- */

void fr_adapter_batch_hold(struct fr_adapter *a, const char *batch, int hold) {
  commit__hold(a->cm, batch, hold);
}

int fr_adapter_batch_commit(struct fr_adapter *a, const char *batch, int64_t expires_s,
                            void (*cb)(int status, const char *message, void *arg), void *arg) {
  if (a->stopping)
    return -ESHUTDOWN;
  return commit__write(a->cm, batch, expires_s, cb, arg);
}

int fr_adapter_secret_get(struct fr_adapter *a, const char *secret, const char *const *keys, size_t nkeys,
                          const char *request_id, fr_secret_cb cb, void *arg, struct fr_secret_call **out) {
  if (out != NULL)
    *out = NULL;
  if (a == NULL)
    return -EINVAL;
  return secret__get(a->sec, secret, keys, nkeys, request_id, cb, arg, out);
}

int fr_adapter_secret_keys(struct fr_adapter *a, const char *secret, const char *request_id, fr_secret_cb cb,
                           void *arg, struct fr_secret_call **out) {
  if (out != NULL)
    *out = NULL;
  if (a == NULL)
    return -EINVAL;
  return secret__keys(a->sec, secret, request_id, cb, arg, out);
}

int fr_adapter_secret_set(struct fr_adapter *a, const char *secret, const char *key, const void *value, size_t len,
                          const char *tenant, const char *request_id, fr_secret_cb cb, void *arg,
                          struct fr_secret_call **out) {
  if (out != NULL)
    *out = NULL;
  if (a == NULL)
    return -EINVAL;
  return secret__set(a->sec, secret, key, value, len, tenant, request_id, cb, arg, out);
}

int fr_adapter_secret_unset(struct fr_adapter *a, const char *secret, const char *key, const char *request_id,
                            fr_secret_cb cb, void *arg, struct fr_secret_call **out) {
  if (out != NULL)
    *out = NULL;
  if (a == NULL)
    return -EINVAL;
  return secret__unset(a->sec, secret, key, request_id, cb, arg, out);
}

/* ---- the data plane (exec.c, agent.c, proc.c) ---- */

int fr_adapter_exec(struct fr_adapter *a, const char *pod, const struct fr_exec_spec *spec, fr_exec_cb cb,
                    void *arg) {
  return exec__run(&a->cl, pod, spec, cb, arg);
}

int fr_adapter_agent_call(struct fr_adapter *a, const char *pod, const struct fr_agent_call_opts *o,
                          struct fr_agent_call **out) {
  if (out != NULL)
    *out = NULL;
  if (a == NULL)
    return -EINVAL;
  return agent__call(&a->cl, pod, o, out);
}

int fr_adapter_pod_has_agent(struct fr_adapter *a, const struct fr_pod *pod) {
  return agent__port_of(&a->cl, pod) != 0;
}

int fr_adapter_agent_token(struct fr_adapter *a, const char *pod, char out[65]) {
  return agent__token(&a->cl, pod, 0, out);
}

int fr_adapter_agent_token_ok(struct fr_adapter *a, const char *pod, const char *token) {
  return agent__token_ok(&a->cl, pod, token);
}

int fr_adapter_port_tunnel(struct fr_adapter *a, const char *pod, int port, const struct fr_kube_tunnel_opts *o,
                           struct fr_kube_tunnel **out) {
  if (out != NULL)
    *out = NULL;
  if (a == NULL)
    return -EINVAL;
  return porttunnel__start(&a->cl, pod, port, o, out);
}

int fr_adapter_proc_start(struct fr_adapter *a, const char *pod, const struct fr_proc_spec *spec,
                          fr_proc_event_cb on_event, fr_proc_done_cb on_done, void *arg,
                          struct fr_proc_stream **out) {
  return proc__start(&a->cl, pod, spec, on_event, on_done, arg, out);
}

int fr_adapter_exec_stream(struct fr_adapter *a, const char *pod, const struct fr_exec_spec *spec,
                           fr_proc_event_cb on_event, fr_proc_done_cb on_done, void *arg,
                           struct fr_proc_stream **out) {
  return proc__exec_stream(&a->cl, pod, spec, on_event, on_done, arg, out);
}

int fr_adapter_proc_attach(struct fr_adapter *a, const char *pod, int64_t pid, int64_t replay_from, int follow,
                           const char *request_id, fr_proc_event_cb on_event, fr_proc_done_cb on_done,
                           void *arg, struct fr_proc_stream **out) {
  return proc__attach(&a->cl, pod, pid, replay_from, follow, request_id, on_event, on_done, arg, out);
}

int fr_adapter_agent_rpc(struct fr_adapter *a, const char *pod, const char *method, json_t *req,
                         const char *request_id, fr_agent_rpc_cb cb, void *arg) {
  return proc__rpc(&a->cl, pod, method, req, request_id, cb, arg);
}
