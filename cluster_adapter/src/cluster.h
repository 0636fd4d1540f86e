/* cluster.h - the bottom of the adapter: one cluster's state.
 *
 * struct cluster holds what every other part of the adapter reads: the
 * cluster's API client, its informers (list+watch caches) and the compact
 * sandbox pod cache, and what is kept from them so that nothing on a
 * request's path walks a cache: health (probe, latency, circuit breaker),
 * the pool records, node usage, live sandbox counts per tenant, the sets
 * of ready warm pods per pool, and the capacity reservations (creates in
 * flight, planned creates, planned warm claims).
 *
 * It calls nothing above it. What its owner must hear of (a sandbox pod
 * changed, the breaker opened) goes through the hooks the owner sets
 * (cluster__set_hooks); sandbox.c, commit.c, secret.c, agent.c, exec.c and
 * proc.c call down into it, never the other way.
 *
 * The first block of fields is set by cluster__init() and never changes
 * afterwards: every file of the adapter reads it. The rest is cluster.c's
 * own and changes only through the functions below.
 */
#ifndef FR_CLUSTER_H
#define FR_CLUSTER_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <uv.h>

#include "fr/adapter.h"
#include "fr/informer.h"
#include "gwpath.h"
#include "podstore.h"
#include "strmap.h"

/* The cluster's caches. PODS, POOLS and NODES gate readiness; ALLPODS
 * (every pod in the cluster, reduced to node and requests) and QUOTAS
 * refine capacity when allowed; RUNTIMECLASSES and PVCS (the sandbox
 * namespace's claims) say which pod options the cluster can serve; PVCS
 * also holds the sandboxes' workspace claims (workspace.c reads them), the
 * record of paused sandboxes. MARKERS holds the batches' commit markers
 * (commit.c reads them). STORAGECLASSES says which workspaces the cluster
 * can provision. NETPOLS: the sandboxes' egress NetworkPolicies (egress.c
 * reads them). */
enum cluster_inf {
  CLUSTER_INF_PODS,
  CLUSTER_INF_POOLS,
  CLUSTER_INF_NODES,
  CLUSTER_INF_ALLPODS,
  CLUSTER_INF_QUOTAS,
  CLUSTER_INF_RUNTIMECLASSES,
  CLUSTER_INF_PVCS,
  CLUSTER_INF_MARKERS,
  CLUSTER_INF_STORAGECLASSES,
  CLUSTER_INF_NETPOLS,
  CLUSTER_INF_COUNT
};
#define CLUSTER_INF_REQUIRED 3

enum cluster_breaker { CLUSTER_BR_CLOSED, CLUSTER_BR_OPEN, CLUSTER_BR_HALF_OPEN };

/* What the cluster tells its owner, from its own callbacks (informer
 * events, the probe's answer, a report). Set once by the owner. */
struct cluster_hooks {
  /* Every change of the sandbox pod cache, after the counters followed
   * it: <p> the new state (for DELETED the last one, already out of the
   * cache), <old> the previous one (MODIFIED). Both valid during the call. */
  void (*on_pod)(enum fr_informer_event ev, const struct fr_pod *p, const struct fr_pod *old, void *arg);
  /* The circuit breaker has just opened. */
  void (*on_down)(void *arg);
  void *arg;
};

enum { CLUSTER_PATH_GATEWAY, CLUSTER_PATH_POD_PROXY };

struct cluster {
  /* Set by cluster__init(), read by every file of the adapter. */
  uv_loop_t *loop;
  struct fr_adapter_opts cc;     /* the owner's options (strings borrowed) */
  char *ns;                      /* the sandbox namespace */
  char *server;
  struct fr_kube_client *client;
  struct fr_informer *inf[CLUSTER_INF_COUNT];
  /* The cluster's gateway (NULL: agent calls through the pod proxy):
   * a client per URL (its URL and CA, none of the cluster's credentials),
   * each URL's breaker, the signing key (gwpath.h); agent.c signs and
   * sends. */
  struct gwpath *gw;
  uint64_t path_calls[2];        /* agent.c: calls sent by [CLUSTER_PATH_GATEWAY], [CLUSTER_PATH_POD_PROXY] */

  /* cluster.c's own. */
  struct cluster_hooks hooks;
  struct podstore pods;          /* the sandbox pod cache (CLUSTER_INF_PODS keeps nothing itself) */
  uv_timer_t *probe;
  struct fr_kube_call *probe_call;
  uint64_t probe_sent_ms;
  int probe_ok;
  uint64_t last_probe_ok_ms;
  double latency_ewma;
  enum cluster_breaker breaker;
  int failures;                  /* consecutive */
  uint64_t opened_ms;
  struct fr_adapter_pool_view *pools; /* one record per pool ReplicaSet (owned strings) */
  size_t npools, pools_cap;
  struct strmap node_usage;      /* node name -> v.n [cpu_m, mem_b, pods] of the other pods on it */
  struct strmap sb_node_usage;   /* the same for fedrouter's pods (sandboxes and pool pods) */
  struct strmap gpu_usage;       /* node name -> v.n [GPUs of fedrouter's pods, of the other pods] */
  /* Kept from the sandbox pod cache's events (pods_count), so views,
   * claims, quotas and cost never walk the cache. */
  int64_t n_sandboxes, n_warm;   /* live sandboxes; ready warm pool pods */
  int64_t sb_cpu_m, sb_mem_b;    /* requests of the live sandboxes */
  struct strmap warm_ready;      /* pool -> v.map, the set of its ready, unclaimed pods
                                    (an entry only while its set is not empty) */
  struct strmap tenant_counts;   /* tenant -> v.n [live sandboxes, their cpu_m, their mem_b] (an entry only
                                    while it has sandboxes) */
  struct strmap tenant_gpus;     /* tenant -> v.n[0] GPUs of its live sandboxes (an entry only while > 0) */
  int64_t inflight;              /* creates in flight (sandbox.c counts them here) */
  int64_t reserved;              /* planned by batches, not started */
  int clients_open;              /* cluster__close: clients whose handles are still closing */
  void (*closed_cb)(void *arg);
  void *closed_arg;
};

/* ---- lifecycle (called by adapter.c) ---- */

/* Loads the kubeconfig of <opts> (blocking file I/O: start-up only),
 * creates the client, the informers and the probe; nothing starts yet.
 * <c> is zeroed here. On failure everything made is released and <err>
 * says why. */
int cluster__init(struct cluster *c, uv_loop_t *loop, const struct fr_adapter_opts *opts, char *err,
                  size_t errlen);
/* Set before cluster__start(); <h> is copied. */
void cluster__set_hooks(struct cluster *c, const struct cluster_hooks *h);
int cluster__start(struct cluster *c);
/* Stops the informers and the probe and frees the client (its calls are
 * dropped without their callbacks); <cb> runs once every handle has closed
 * and the cluster's state is released. */
void cluster__close(struct cluster *c, void (*cb)(void *arg), void *arg);

/* ---- health ---- */

/* Feeds the circuit breaker: a call that reached the cluster (<ok> 1) or
 * could not (0). The hooks hear when it opens. */
void cluster__report(struct cluster *c, int ok);
/* 1 while the breaker is closed: calls may go out. */
int cluster__reachable(const struct cluster *c);
/* 1 while the breaker is closed and the last probe was answered. */
int cluster__answering(const struct cluster *c);

/* ---- requests ---- */

/* The Kubernetes Status message of an error body <body> (<len> bytes),
 * else the body, else "no response", into <out>. */
void cluster__status_message(const char *body, size_t len, char *out, size_t cap);
/* One API call whose status is all its caller needs: <cb> (may be NULL)
 * gets the status and a message ("" for a 2xx; the Status message or the
 * transport's error otherwise). <body> (may be NULL) is sent as compact
 * JSON; <observe> (may be NULL): the cache a 2xx answer's object enters at
 * once (read-your-own-writes while the watch lags). 0 or a negative errno
 * (no callback then). */
int cluster__request(struct cluster *c, const char *method, const char *path, const char *ctype, json_t *body,
                     int idempotent, struct fr_informer *observe, const char *request_id,
                     void (*cb)(int status, const char *message, void *arg), void *arg);

/* ---- caches ---- */

/* 1 when cache <i> is synced and its last list or watch worked, so a
 * missing object is missing from the cluster. */
int cluster__cache_current(const struct cluster *c, enum cluster_inf i);
/* The sandbox pod cache: a pod by name (NULL: none) and a walk (*cursor
 * starts at 0; the cache must not change during it). Borrowed: valid
 * until the next sandbox pod event. */
const struct fr_pod *cluster__pod(const struct cluster *c, const char *name);
const struct fr_pod *cluster__pod_next(const struct cluster *c, size_t *cursor);
/* Live sandboxes in the cache (fr_adapter_view's sandboxes). */
int64_t cluster__sandboxes(const struct cluster *c);
/* Live sandboxes of <tenant>. */
int64_t cluster__tenant_sandboxes(const struct cluster *c, const char *tenant);
/* fr_adapter_tenant_usage: <tenant>'s live sandboxes and their requests. */
void cluster__tenant_usage(const struct cluster *c, const char *tenant, struct fr_tenant_usage *out);
/* The ready, unclaimed pods of <pool> (a set of pod names), or NULL for
 * none. Borrowed: valid until the next sandbox pod event. */
const struct strmap *cluster__warm_ready(const struct cluster *c, const char *pool);
/* Pool <name>'s record with its ready count brought up to date, or NULL. */
struct fr_adapter_pool_view *cluster__pool(struct cluster *c, const char *name);
/* fr_adapter_node_unready. */
int cluster__node_unready(const struct cluster *c, const char *node);

/* ---- capacity ---- */

/* Creates in flight, counted by sandbox.c (+1 at the start of a create,
 * -1 when it is settled). */
void cluster__inflight_add(struct cluster *c, int64_t delta);
int64_t cluster__inflight(const struct cluster *c);
/* fr_adapter_reserve and fr_adapter_reserve_warm. */
void cluster__reserve(struct cluster *c, int64_t delta);
void cluster__reserve_warm(struct cluster *c, const char *pool, int64_t delta);
/* fr_adapter_view, fr_adapter_free_slots, fr_adapter_fit_slots,
 * fr_adapter_total_slots and fr_adapter_pool_slots. */
void cluster__view(struct cluster *c, struct fr_adapter_view *v);
int64_t cluster__free_slots(struct cluster *c, int64_t cpu_m, int64_t mem_b);
int64_t cluster__fit_slots(struct cluster *c, int64_t cpu_m, int64_t mem_b, const struct fr_podopts *opts,
                           const char **unfit, char *detail, size_t detail_len);
int64_t cluster__total_slots(struct cluster *c, int64_t cpu_m, int64_t mem_b);
void cluster__pool_slots(struct cluster *c, const struct fr_adapter_pool_view *pv, int64_t *free_slots,
                         int64_t *total_slots);

#endif
