/* adapter_internal.h - the adapter's state, shared by adapter.c (caches,
 * health, view) and sandbox.c (claims, creates, pools, reaper). */
#ifndef FR_ADAPTER_INTERNAL_H
#define FR_ADAPTER_INTERNAL_H

#include <jansson.h>
#include <uv.h>

#include "fr/adapter.h"
#include "fr/informer.h"
#include "fr/kube.h"
#include "podstore.h"
#include "strmap.h"

/* PODS, POOLS and NODES gate readiness; ALLPODS (every pod in the cluster,
 * reduced to node and requests) and QUOTAS refine capacity when allowed;
 * RUNTIMECLASSES and PVCS (the sandbox namespace's claims) say which pod
 * options the cluster can serve; PVCS also holds the sandboxes' workspace
 * claims (workspace.c), the record of paused sandboxes. MARKERS holds the
 * batches' commit markers (commit.c). STORAGECLASSES says which workspaces
 * the cluster can provision. NETPOLS: the sandboxes' egress
 * NetworkPolicies (egress.c). */
enum {
  INF_PODS, INF_POOLS, INF_NODES, INF_ALLPODS, INF_QUOTAS, INF_RUNTIMECLASSES, INF_PVCS, INF_MARKERS,
  INF_STORAGECLASSES, INF_NETPOLS, INF_COUNT
};
#define INF_REQUIRED 3

enum breaker_state { BR_CLOSED, BR_OPEN, BR_HALF_OPEN };

struct create_op;
struct reap_due;

/* usage.c: one (tenant, pool) of the usage table (fr/adapter.h). */
struct usage_row {
  char *tenant, *pool;
  int64_t n, cpu_m, mem_b, gpus;   /* live sandboxes now and their requests */
  double sec, core_s, gib_s, gpu_s;
  uint64_t warm, cold, spilled;
  uint64_t last_ms;                /* uv_now of the last integration */
};

struct usage_table {
  struct usage_row *rows;
  size_t n, cap;
  struct strmap index;             /* "tenant\x1fpool" -> v.n[0] row index */
};
struct commit_op;
struct egress_op;
struct egress_known;

struct fr_adapter {
  uv_loop_t *loop;
  struct fr_adapter_opts cc;
  char *ns;
  char *server;
  struct fr_kube_client *client;
  struct fr_informer *inf[INF_COUNT];
  struct podstore pods;          /* the sandbox pod cache (INF_PODS keeps nothing itself) */
  uv_timer_t *probe;
  struct fr_kube_call *probe_call;
  uint64_t probe_sent_ms;
  int probe_ok;
  uint64_t last_probe_ok_ms;
  double latency_ewma;
  struct fr_adapter_pool_view *pools; /* one record per pool ReplicaSet (owned strings) */
  size_t npools, pools_cap;
  struct strmap node_usage;      /* node name -> v.n [cpu_m, mem_b, pods] of the other pods on it */
  struct strmap sb_node_usage;   /* the same for fedrouter's pods (sandboxes and pool pods) */
  struct strmap gpu_usage;       /* node name -> v.n [GPUs of fedrouter's pods, of the other pods] */
  /* Kept from the sandbox pod cache's events (adapter.c pods_count), so
   * views, claims, quotas and cost never walk the cache. */
  int64_t n_sandboxes, n_warm;   /* live sandboxes; ready warm pool pods */
  int64_t sb_cpu_m, sb_mem_b;    /* requests of the live sandboxes */
  struct strmap warm_ready;      /* pool -> v.map, the set of its ready, unclaimed pods
                                    (an entry only while its set is not empty) */
  struct strmap tenant_counts;   /* tenant -> v.n [live sandboxes, their cpu_m, their mem_b] (an entry only
                                    while it has sandboxes) */
  struct strmap tenant_gpus;     /* tenant -> v.n[0] GPUs of its live sandboxes (an entry only while > 0) */
  /* agent.c: the cluster's gateway (NULL: agent calls through the pod
   * proxy), its signing key, and agent calls sent by path. */
  struct fr_kube_client *gw_client;
  unsigned char *gw_key;
  size_t gw_key_len;
  int gw_refused;                /* its last answer was a refusal of this router (logged once) */
  uint64_t path_calls[2];        /* [PATH_GATEWAY], [PATH_POD_PROXY] */
  int clients_open;              /* fr_adapter_free: clients whose handles are still closing */
  struct usage_table usage;      /* usage.c: per (tenant, pool) over time */
  enum breaker_state breaker;
  int failures;                  /* consecutive */
  uint64_t opened_ms;
  void (*free_cb)(void *arg);
  void *free_arg;

  /* sandbox.c */
  struct create_op *creates;     /* in flight */
  int64_t inflight;
  int64_t reserved;              /* planned by batches, not started */
  /* Sets of pod names (the keys; the values are unused). */
  struct strmap claiming;        /* while a claim is out */
  struct strmap reaping;         /* once a reap delete was sent */
  struct strmap ws_reaping;      /* workspace claims whose sweep delete was sent (workspace.c) */
  struct strmap deleting;        /* from our DELETE until the watch says gone */
  struct strmap abandoned;       /* pods of creates given up while the cluster was down:
                                    deleted by the reaper once it answers again */
  uv_timer_t *reaper;
  struct reap_due *due;          /* min-heap by time: when each sandbox is due for reaping */
  size_t ndue, due_cap;
  int stopping;

  /* secret.c */
  struct fr_secret_call *secret_calls; /* Secret reads in flight */
  /* commit.c */
  int64_t commit_timeout_s;
  struct strmap held;            /* batch -> n[0] holds, n[1] held since, n[2] last pending
                                    marker write (wall ms) */
  struct strmap batch_pods;      /* batch -> n[0] cached sandbox pods carrying it (> 0) */
  struct commit_op *commit_ops;  /* marker writes in flight */
  int64_t markers_gc_ms;         /* last sweep of the markers (wall ms) */
  /* egress.c */
  struct strmap egress;          /* policy hash -> n[0] cached sandbox pods carrying it, n[1] creates in
                                    flight here using it, n[2] uv_now of this router's last write of it */
  struct strmap egress_idle;     /* policy name -> n[0] hash of the resourceVersion seen unused,
                                    n[1] uv_now since when, n[2] 1 while its delete is out */
  struct egress_op *egress_ops;  /* policy writes and deletes in flight (or waiting for a retry) */
  struct egress_known *egress_known; /* policies (hash, text) seen or written: what repairs re-create */
};

/* usage.c hooks, called by adapter.c */
/* Every change of the sandbox pod cache: <p> the new state (NULL when the
 * pod is gone), <old> the previous one (NULL when it is new). */
void usage_on_pod(struct fr_adapter *a, const struct fr_pod *p, const struct fr_pod *old);
void usage_free(struct fr_adapter *a);

/* sandbox.c hooks, called by adapter.c */
/* Every change of the sandbox pod cache: <p> the new state (for DELETED
 * the last one, already out of the cache), <old> the previous (MODIFIED). */
void sandbox_on_pod(struct fr_adapter *a, enum fr_informer_event ev, const struct fr_pod *p,
                    const struct fr_pod *old);
int sandbox_init(struct fr_adapter *a);
void sandbox_start(struct fr_adapter *a);
/* Fails every create in flight (adapter going away) and closes the reaper. */
void sandbox_stop(struct fr_adapter *a);
/* secret.c: fails every Secret read in flight (adapter going away). */
void secret_stop(struct fr_adapter *a);
/* The breaker opened: creates waiting for their pods give up now, so their
 * batches move on instead of waiting for the cluster to come back. */
void sandbox_cluster_down(struct fr_adapter *a);

/* commit.c hooks, called by sandbox.c */
/* When the commit rule makes <pod> due for reaping (unix seconds), or -1:
 * it carries no batch, its batch is committed, or it is not a sandbox. */
int64_t commit_due_at(struct fr_adapter *a, const struct fr_pod *pod);
/* The informer transform of the marker cache: a marker reduced to what
 * the rule reads (name, resourceVersion, batch label, deletion, data), so
 * one per live create stays small (a real API server adds managedFields). */
json_t *commit_slim_marker(json_t *obj, void *arg);
/* 1 when the marker cache is complete and current, so a missing marker
 * means the batch was never committed. */
int commit_markers_known(struct fr_adapter *a);
/* Keeps the per-batch pod counts from the sandbox pod cache's events. */
void commit_on_pod(struct fr_adapter *a, enum fr_informer_event ev, const struct fr_pod *p,
                   const struct fr_pod *old);
/* From the reaper's timer: renews the pending markers of held batches and
 * deletes markers no longer needed. */
void commit_sweep(struct fr_adapter *a);
/* Answers every marker write in flight with status 0. */
void commit_stop(struct fr_adapter *a);

/* egress.c hooks */
/* Someone waiting for an egress policy to be written (a create, in its
 * op); linked into the write while it waits. */
struct egress_wait {
  struct egress_wait *prev, *next;
  struct egress_op *op;          /* NULL when not waiting */
  void (*cb)(int status, const char *message, void *arg);
  void *arg;
};
/* Makes sure NetworkPolicy fr-egress-<hash of e> exists, as <e>
 * (normalized) says, and that no router deletes it for a while (a write
 * changes its resourceVersion: docs/architecture.md, "Sandbox egress").
 * 1: this router wrote it recently enough, nothing to wait for; 0: <w>
 * waits, and <cb> gets the HTTP status (2xx, or why not) from a later
 * loop turn unless egress_cancel(<w>) first; -ENOMEM, -ESHUTDOWN. */
int egress_ensure(struct fr_adapter *a, const struct fr_egress *e, struct egress_wait *w,
                  void (*cb)(int status, const char *message, void *arg), void *arg);
/* Stops <w> waiting (its callback will not run). Safe when not waiting. */
void egress_cancel(struct egress_wait *w);
/* A create using policy <hash> starts (<delta> 1) or ends (-1) here: its
 * policy is not garbage-collected meanwhile. */
void egress_hold(struct fr_adapter *a, const char *hash, int delta);
/* Keeps the per-policy pod counts from the sandbox pod cache's events. */
void egress_on_pod(struct fr_adapter *a, enum fr_informer_event ev, const struct fr_pod *p,
                   const struct fr_pod *old);
/* From the reaper's timer: deletes policies no sandbox uses any more and
 * re-creates policies that sandboxes use but the cluster lost. */
void egress_sweep(struct fr_adapter *a);
/* Answers every waiter with status 0 and frees the writes (adapter going away). */
void egress_stop(struct fr_adapter *a);
/* Frees what egress.c keeps (after egress_stop). */
void egress_free(struct fr_adapter *a);

/* The ready, unclaimed pods of <pool> (a set of pod names), or NULL for
 * none. Borrowed: valid until the next sandbox pod event. */
const struct strmap *warm_ready_pods(const struct fr_adapter *a, const char *pool);

struct fr_buf;
/* proc.c: Connect envelopes of the agent's streams. */
/* The largest Connect envelope the agent's stream may carry: its data
 * events are at most a ring chunk, base64-encoded. */
#define AGENT_MAX_ENVELOPE ((size_t)16 << 20)
/* A unary call to the agent answers at once or not at all. */
#define AGENT_RPC_TIMEOUT_MS 30000
/* <msg> as one envelope (flag 0) in *<out> (malloc'd). */
int connect_envelope(json_t *msg, char **out, size_t *outlen);
/* Appends <data> to <pending> and calls <on_msg> for every complete
 * envelope (flags, JSON text); a negative return of <on_msg> stops and is
 * returned. -E2BIG for an envelope over AGENT_MAX_ENVELOPE. */
int connect_feed(struct fr_buf *pending, const char *data, size_t len,
                 int (*on_msg)(int flags, const char *msg, size_t len, void *arg), void *arg);
/* The Start request of <spec> (NULL: invalid or out of memory). */
struct fr_proc_spec;
json_t *proc_start_request(const struct fr_proc_spec *spec);
/* The exit code a shell would report for Go's ProcessState text
 * ("exit status 3", "signal: killed"). */
int agent_exit_code(const char *status, int exit_code, int exited);

/* agent.c: the in-sandbox agent through the pod proxy. */
typedef void (*agent_done_cb)(int rc, const char *message, void *arg);
/* The agent port of <pod> when it has an agent and this router speaks to
 * agents (cc.agent set), else 0. */
int agent_port_of(const struct fr_adapter *a, const struct fr_pod *pod);
/* The sandbox token of <pod>: hex HMAC-SHA256(key, "<cluster>.<pod>"),
 * with the previous key when <previous> (-EINVAL when there is none). */
int agent_token(const struct fr_adapter *a, const char *pod, int previous, char out[65]);
/* The pod proxy path of agent route <route> (path and query, from '/')
 * for <method> on <pod>:<port>, through upstream_agent_path(): -EINVAL for
 * a route outside the allow-list or a parameter it does not take. */
int agent_path(const struct fr_adapter *a, const char *pod, int port, const char *method, const char *route,
               char *out, size_t cap);
enum { PATH_GATEWAY, PATH_POD_PROXY };
/* The cluster's gateway from <g>: its REST client (the gateway's URL and
 * CA, none of the cluster's credentials) and a copy of its key. Reads the
 * CA file: blocking, at start-up only. 0 or a negative errno with <err>. */
int agent_gateway_new(struct fr_adapter *a, const struct fr_adapter_gateway *g, char *err, size_t errlen);
/* Wipes and frees the key (the client is the caller's to free). */
void agent_gateway_release(struct fr_adapter *a);
/* Sends a call to <pod>'s agent (<user_port> 0: agent route <route> on
 * <port>, <internal> as upstream_agent_path()) or to its port <user_port>
 * (<route>: the path and query the sandbox's server gets), through the
 * cluster's gateway when it has one (signed; /init never), else the pod
 * proxy. <ko> as fr_kube_request_opts() (its header lines are the caller's:
 * the agent token). 0, -EINVAL (a path upstream.c refuses), or what
 * fr_kube_request_opts() returns. */
int agent_send(struct fr_adapter *a, const char *pod, int port, int user_port, const char *method, const char *route,
               int internal, const char *content_type, const void *body, size_t len,
               const struct fr_kube_request_opts *ko, fr_kube_response_cb cb, void *arg, struct fr_kube_call **out);
/* The header lines of a request to the gateway for <pod>:<port>: a fresh
 * Fr-Gateway-Auth, then <caller>'s lines (may be NULL) but any
 * Fr-Gateway-* of theirs. malloc'd; NULL on failure. */
char *agent_gateway_headers(const struct fr_adapter *a, const char *pod, int port, const char *caller);
/* 1 when <r> is an answer of the cluster's gateway itself (header
 * Fr-Gateway-Error), not of the sandbox: its code into <code>. */
int agent_gateway_error(const struct fr_adapter *a, const struct fr_kube_response *r, char *code, size_t cap);
/* What an agent's /init token is made for (FR_LABEL_AGENT_INIT). */
#define AGENT_INIT_POOL "pool"
#define AGENT_INIT_POD "pod"
/* The SHA-256 (hex) of the /init token of <kind> (AGENT_INIT_POOL or
 * AGENT_INIT_POD) <name> under the current key: what a pod made for it
 * carries in its env FR_AGENT_INIT_SHA256. 0 or -EINVAL. */
int agent_init_sha256(const struct fr_adapter *a, const char *kind, const char *name, char out[65]);
/* POST /init to the agent of <pod> (borrowed; its FR_LABEL_AGENT_INIT says
 * which init token opens it, tried with the previous key after a 401):
 * sets the sandbox's access token and its env (<env>, then <secrets> over
 * it: objects of strings or NULL, borrowed; the agent is told which names
 * are secrets). With secrets the request is FR_KUBE_SENSITIVE. <cb> gets 0
 * or -EIO with a message, unless *<out> is cancelled first
 * (agent_init_cancel). -EINVAL for a pod without the label. */
struct agent_init;
int agent_init(struct fr_adapter *a, const struct fr_pod *pod, int port, json_t *env, json_t *secrets,
               const char *request_id, agent_done_cb cb, void *arg, struct agent_init **out);
/* Stops an /init in flight: its callback is not called. Accepts NULL. */
void agent_init_cancel(struct agent_init *ai);

/* workspace.c: the sandboxes' own PersistentVolumeClaims. */
/* The claim of sandbox pod <pod>: "<pod>-ws" into <out>; 0 or -ENAMETOOLONG. */
int workspace_claim_name(const char *pod, char *out, size_t cap);
/* The POST of the workspace claim of <pod> for options <opts> (its
 * "workspace" field), labelled with <tenant>, <name>, <pool> (may be NULL)
 * and <batch> (may be NULL), annotated with <spec> (fedrouter.io/
 * sandbox-spec, borrowed: what a resume needs): its body (*<body>,
 * malloc'd) and path. 0, -EINVAL (no workspace) or -ENOMEM. */
int workspace_claim_request(struct fr_adapter *a, const char *pod, const struct fr_podopts *opts, const char *tenant,
                            const char *name, const char *pool, const char *batch, json_t *spec, char **body,
                            char *path, size_t cap);
/* 1 if the claim cache holds the workspace claim of <pod>. */
int workspace_claim_known(struct fr_adapter *a, const char *pod);
/* DELETEs the workspace claim of <pod> (a no-op answered 404 when there
 * is none in the cache). */
int workspace_claim_delete(struct fr_adapter *a, const char *pod, const char *request_id,
                           void (*cb)(int status, const char *message, void *arg), void *arg);
/* Adds the workspace volume and mount of <opts> to pod spec <spec>: the
 * claim <claim> (NULL: "<pod>-ws", a cold create's); 0 (nothing to add),
 * or -ENOMEM. */
int workspace_pod_apply(const struct fr_podopts *opts, const char *claim, const char *pod, json_t *spec);
/* A pool's pod template: the workspace of <opts> as a generic ephemeral
 * volume, whose claim "<pod>" WORKSPACE_POOL_SUFFIX the cluster makes with
 * each pod (owned by it until a claim adopts it). 0 or -ENOMEM. */
#define WORKSPACE_POOL_SUFFIX "-fr-workspace"
int workspace_pool_apply(const struct fr_podopts *opts, json_t *spec);
/* From the reaper: deletes workspace claims whose sandbox is gone and that
 * are not paused (made by a create that died, or left by a pod the cluster
 * removed), and paused ones past their expiry. */
void workspace_sweep(struct fr_adapter *a);
/* The simple request of sandbox.c (one API call, its status to <cb>). */
int adapter_simple_request(struct fr_adapter *a, const char *method, const char *path, const char *ctype,
                           json_t *body, int idempotent, struct fr_informer *observe, const char *request_id,
                           void (*cb)(int status, const char *message, void *arg), void *arg);
/* Deletes pod <pod> hiding it from lists at once (sandbox.c). */
int adapter_delete_pod(struct fr_adapter *a, const char *pod, const char *request_id,
                       void (*cb)(int status, const char *message, void *arg), void *arg);

/* Small JSON accessors shared by the adapter sources. */
const char *pod_label(json_t *obj, const char *key);
int pod_condition_true(json_t *obj, const char *type);

#endif
