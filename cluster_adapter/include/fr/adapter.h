/* fr/adapter.h - one Kubernetes cluster as the router sees it.
 *
 * An adapter owns the cluster's API client and three informers (list+watch
 * caches): the sandbox pods (label fedrouter.io/sandbox=true) in the
 * configured namespace, the warm-pool ReplicaSets (label fedrouter.io/pool)
 * and the nodes. From them it keeps a live view: health, API latency,
 * node capacity, sandbox count and pool depth. The cluster stays the source
 * of truth; the view is rebuilt from a relist after any restart.
 *
 * Labels and annotations fedrouter puts on cluster objects:
 *   fedrouter.io/sandbox=true     every sandbox pod and pool pod
 *   fedrouter.io/pool=<name>      pool pods and the pool's ReplicaSet
 *   fedrouter.io/state=warm|claimed
 *   fedrouter.io/tenant=<tenant>  claimed or created sandboxes
 *   fedrouter.io/owner=<tenant>   a pool's ReplicaSet: the tenant it belongs to
 *                                 (absent: a shared pool, usable by every tenant)
 */
#ifndef FR_ADAPTER_H
#define FR_ADAPTER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "fr/adapter_types.h"

struct fr_buf;
struct fr_egress;

struct fr_kube_client;
struct fr_adapter;

/* What an adapter needs to know about its cluster. Every string is
 * borrowed and must outlive the adapter (the router passes its config
 * snapshot's strings). */
/* The in-sandbox agent (fedrouter-agent, agent/README.md): new sandbox
 * pods get an init container from <image> that copies the static binary
 * into an emptyDir, and their command wrapped to run it on <port>; the
 * adapter then reaches it through the API server's pod proxy. Requests
 * carry the sandbox's token, HMAC-SHA256(<key>, "<cluster>.<pod>") in hex,
 * which every router replica derives alike. Borrowed; must outlive the
 * adapter. */
struct fr_adapter_agent {
  const char *image;
  int port;
  const void *key;
  size_t key_len;
  const void *prev_key;     /* during a key rotation: the old key (NULL: none); sandboxes
                               initialised with it are still reached with it */
  size_t prev_key_len;
};

/* The cluster's fedrouter-gateway (docs/gateway.md): every call to a
 * sandbox's agent or ports but /init goes to it instead of the API
 * server's pod proxy while one of its URLs is healthy, signed with <key>
 * (Fr-Gateway-Auth) and without the cluster's credentials. */
#define FR_ADAPTER_GATEWAY_URLS_MAX 8
struct fr_adapter_gateway {
  const char *const *urls;  /* 1 to FR_ADAPTER_GATEWAY_URLS_MAX of "https://host[:port]" (or "http://"
                               on loopback), no path: tried round-robin, each with its own breaker */
  size_t nurls;
  const char *ca_file;      /* PEM of the CA of the gateway's certificate; NULL: system roots */
  const void *key;          /* the signing key (the first of the gateway's ring) */
  size_t key_len;
  const char *key_file;     /* where <key> came from, re-read when it changes; NULL: never */
};

struct fr_adapter_opts {
  const char *name;
  const char *region;
  const char *kubeconfig;   /* path; NULL with in_cluster */
  const char *context;      /* NULL = current-context */
  const char *ns;           /* namespace for sandboxes; NULL = "default" */
  const struct fr_adapter_agent *agent; /* NULL: sandboxes without an agent (pods/exec only) */
  const char *gpu_resource; /* the extended resource pod option gpus asks for; NULL = "nvidia.com/gpu" */
  /* A batch's pods with no commit marker are deleted once this long has
   * passed without progress (0 = FR_BATCH_COMMIT_TIMEOUT_S); see
   * fr_adapter_batch_commit(). */
  int64_t batch_commit_timeout_s;
  /* > 0: sandbox and pool pods run as this uid (and gid) with the
   * restricted Pod Security profile's securityContext (non-root, no
   * privilege escalation, every capability dropped, RuntimeDefault
   * seccomp); 0: as the image says. */
  int64_t run_as_user;
  /* 1: reach the cluster with the pod's own service account (the router
   * runs in it; fr_kubeconfig_in_cluster) instead of <kubeconfig>. */
  int in_cluster;
  const struct fr_adapter_gateway *gateway; /* NULL: agent calls through the pod proxy */
};

#define FR_BATCH_COMMIT_TIMEOUT_S 30

/* ---- pod options (podopts.c) ----
 *
 * What a pool or a cold create may ask of its pods beyond image and size:
 * runtime_class (spec.runtimeClassName), node_selector, tolerations, gpus
 * (requests = limits of the configured GPU resource), volumes (mount
 * path -> PersistentVolumeClaim in the sandbox namespace) and workspace
 * (a PersistentVolumeClaim of the sandbox's own, made with it). Parsed and
 * validated once into an immutable, reference-counted record; two records
 * are the same shape when their canonical JSON texts are equal. */
struct fr_podopts;

#define FR_PODOPTS_MAX_SELECTOR 16
#define FR_PODOPTS_MAX_TOLERATIONS 16
#define FR_PODOPTS_MAX_VOLUMES 8
#define FR_PODOPTS_MAX_GPUS 64

/* Reads the option fields of <obj> (a create or pool body, or a pool-spec
 * "options" object; borrowed; other keys are ignored). *<out> gets a new
 * record, or NULL when <obj> asks for none (gpus 0 counts as none). On a
 * bad value: -EINVAL, <field> names it ("tolerations", ...) and <msg>
 * says why. -ENOMEM when out of memory. */
int fr_podopts_parse(json_t *obj, struct fr_podopts **out, const char **field, char *msg, size_t msglen);
struct fr_podopts *fr_podopts_ref(struct fr_podopts *o);
/* Accepts NULL. */
void fr_podopts_unref(struct fr_podopts *o);
/* 1 when <a> and <b> ask for the same (NULL is "no options"). */
int fr_podopts_equal(const struct fr_podopts *a, const struct fr_podopts *b);
/* The options as the API shows them: {"runtime_class", "node_selector",
 * "tolerations", "gpus", "volumes"}, only the fields set; borrowed, valid
 * while <o> is (NULL for NULL). */
json_t *fr_podopts_json(const struct fr_podopts *o);
int64_t fr_podopts_gpus(const struct fr_podopts *o);
/* The size asked for by option "workspace" ({"path", "size",
 * "storage_class"}: the sandbox's own PersistentVolumeClaim, mounted at
 * path; workspace.c), in bytes; 0 when it has none. */
int64_t fr_podopts_workspace_bytes(const struct fr_podopts *o);
#define FR_PODOPTS_MIN_WORKSPACE ((int64_t)1 << 20)
#define FR_PODOPTS_MAX_WORKSPACE ((int64_t)64 << 40)

/* A warm pool in one cluster: its ReplicaSet, parsed once per change. */
struct fr_adapter_pool_view {
  const char *name;
  const char *owner;        /* the tenant it belongs to; NULL = shared */
  const char *image;        /* "" when the pool's spec annotation is unreadable */
  int64_t cpu_m, mem_b;     /* each pod's requests (= limits) */
  struct fr_podopts *opts;  /* its pods' options (volumes pre-mounted, ...); NULL = none */
  int64_t target;           /* spec.replicas */
  int64_t ready;            /* ready, unclaimed pool pods */
  int64_t reserved;         /* of them, planned by batches not yet started (fr_adapter_reserve_warm)
                             * or held by creates in flight until their claim is settled */
};

struct fr_adapter_view {
  const char *name;
  const char *region;
  const char *server;
  int synced;               /* the sandbox, pool and node caches have completed their first list */
  int healthy;              /* circuit breaker closed */
  const char *breaker;      /* "closed", "open" or "half-open" */
  int usage_exact;          /* node usage counts every pod (cluster-wide pod watch); else fedrouter's only */
  double api_latency_ms;    /* EWMA of list/watch round trips; 0 before the first */
  uint64_t last_contact_age_ms; /* since the last successful contact (UINT64_MAX: never) */
  int64_t nodes, nodes_ready;
  int64_t alloc_cpu_m, alloc_mem_b, alloc_pods;   /* ready, schedulable nodes */
  int64_t used_cpu_m, used_mem_b, used_pods;      /* requests of sandbox pods on nodes */
  int64_t quota_pods, quota_cpu_m, quota_mem_b; /* room left under ResourceQuotas; -1 = unbounded */
  int64_t inflight;         /* creates in flight */
  int64_t reserved;         /* planned by batches, not started yet */
  int64_t sandboxes;        /* live sandbox pods (claimed or created; not finished, not terminating) */
  int64_t sandbox_cpu_m, sandbox_mem_b; /* their requests, summed */
  int64_t warm_pods;        /* ready pool pods */
  struct fr_adapter_pool_view *pools;
  size_t npools;
};

/* Loads the cluster's kubeconfig (blocking file I/O: call at start-up) and
 * creates its client and informers; nothing starts yet. <opts> is copied
 * (its strings are borrowed, see above). On failure <err> says why. */
int fr_adapter_new(uv_loop_t *loop, const struct fr_adapter_opts *opts,
                   struct fr_adapter **out, char *err, size_t errlen);
int fr_adapter_start(struct fr_adapter *a);
/* Stops the informers and the client; <cb> runs once every handle has
 * closed. Accepts NULL. */
void fr_adapter_free(struct fr_adapter *a, void (*cb)(void *arg), void *arg);

/* Fills <v> with the current view. Strings and the pools array are
 * borrowed: valid until the loop runs again. */
void fr_adapter_view(struct fr_adapter *a, struct fr_adapter_view *v);
/* Sandboxes of <cpu_m>/<mem_b> that fit now: per ready, schedulable node
 * min(free cpu / cpu, free memory / memory, free pod slots) summed over
 * nodes (so fragmentation counts), bounded by the namespace's
 * ResourceQuotas, minus creates in flight and planned (reserved). */
int64_t fr_adapter_free_slots(struct fr_adapter *a, int64_t cpu_m, int64_t mem_b);
/* fr_adapter_free_slots for pods with options <opts> (may be NULL): only
 * nodes whose labels match the node selector, whose NoSchedule/NoExecute
 * taints the tolerations tolerate and that have the GPUs free count. When
 * the cluster cannot host such pods at all, *<unfit> (may be NULL) gets
 * why, a stable code: "no_runtime_class", "no_pvc" (a volume's claim is
 * not in the sandbox namespace), "no_storage_class" (the workspace's
 * StorageClass, or a default one, is missing), "no_gpu_node",
 * "no_matching_node"; and
 * <detail> (may be NULL) a message. NULL when it can. */
int64_t fr_adapter_fit_slots(struct fr_adapter *a, int64_t cpu_m, int64_t mem_b, const struct fr_podopts *opts,
                             const char **unfit, char *detail, size_t detail_len);
/* Free and total slots of pool <pv>'s pods here: its size and pod options
 * (both 0 where the cluster cannot host those). */
void fr_adapter_pool_slots(struct fr_adapter *a, const struct fr_adapter_pool_view *pv, int64_t *free_slots,
                           int64_t *total_slots);
/* The same count for empty nodes: what the cluster holds in all. */
int64_t fr_adapter_total_slots(struct fr_adapter *a, int64_t cpu_m, int64_t mem_b);
/* Live sandboxes of <tenant> here (same rule as the view's sandboxes). */
int64_t fr_adapter_tenant_sandboxes(struct fr_adapter *a, const char *tenant);
/* What <tenant>'s live sandboxes here hold: their count and their requests. */
struct fr_tenant_usage {
  int64_t sandboxes, cpu_m, mem_b, gpus;
};
void fr_adapter_tenant_usage(struct fr_adapter *a, const char *tenant, struct fr_tenant_usage *out);
/* Feeds the circuit breaker from outside (a create or exec that could not
 * reach the cluster: ok = 0; one that did: ok = 1). */
void fr_adapter_report(struct fr_adapter *a, int ok);

/* Calls <cb>(<arg>, method, status, elapsed_ms) after every API call this
 * adapter's client makes (metrics). <cb> may be NULL to stop. */
typedef void (*fr_adapter_api_observer_cb)(void *arg, const char *method, int status, double elapsed_ms);
void fr_adapter_set_api_observer(struct fr_adapter *a, fr_adapter_api_observer_cb cb, void *arg);

const char *fr_adapter_name(const struct fr_adapter *a);
const char *fr_adapter_region(const struct fr_adapter *a);

/* Pool <name> in this cluster, or NULL when it has none (borrowed; valid
 * until the loop runs again). */
const struct fr_adapter_pool_view *fr_adapter_pool(struct fr_adapter *a, const char *name);
/* The sandbox and pool pod cache: one pod by name, or NULL; and a walk
 * (*cursor starts at 0, NULL at the end; do not start creates or let the
 * loop run during a walk). */
const struct fr_pod *fr_adapter_pod(struct fr_adapter *a, const char *pod);
const struct fr_pod *fr_adapter_pod_next(struct fr_adapter *a, size_t *cursor);
/* 1 once that cache has completed its first list, so a pod missing from it
 * is missing from the cluster (as of the last watch event); 0 before, when
 * a miss says nothing (a freshly started replica must not call live
 * sandboxes missing). */
int fr_adapter_pods_synced(const struct fr_adapter *a);
/* The same for the pool cache (the pools' ReplicaSets): before it, a pool
 * missing from fr_adapter_pool() may well exist. */
int fr_adapter_pools_synced(const struct fr_adapter *a);

/* ---- usage (usage.c) ----
 *
 * What the cluster's sandboxes use, per (tenant, pool), integrated over
 * time from the sandbox pod cache's events: each change of a live sandbox
 * (claimed or created, not finished, not terminating: the view's rule)
 * first adds the row's current count and requests times the time since
 * its last change, then applies the change. So every router replica
 * watching the same cluster arrives at the same figures, whichever replica
 * made the sandboxes, and a restarted replica starts again from zero
 * (docs/metrics.md: read them with max across replicas, as counters that
 * reset). A sandbox counts as created when it first shows up live after
 * the cache's first list: its pod created (cold), or a warm pod claimed
 * (annotation fedrouter.io/warm), or either one placed away from its
 * plan's first choice (fedrouter.io/spilled). Rows are never removed;
 * past FR_USAGE_MAX_ROWS distinct (tenant, pool) pairs the rest share
 * the row ("_other", "_other"), so a cluster with arbitrary labels cannot
 * grow the table without bound. */
#define FR_USAGE_MAX_ROWS 1024
#define FR_USAGE_OTHER "_other"

struct fr_adapter_usage {
  const char *tenant;       /* label fedrouter.io/tenant, "" when absent (borrowed) */
  const char *pool;         /* label fedrouter.io/pool, "" for none (borrowed) */
  int64_t sandboxes;        /* live now */
  int64_t cpu_m, mem_b, gpus; /* their requests, summed */
  double sandbox_seconds;   /* integrals since the row was made */
  double cpu_core_seconds;
  double memory_gib_seconds;
  double gpu_seconds;
  uint64_t created_warm, created_cold, created_spilled; /* spilled ones are in neither of the others */
};

/* The number of usage rows (they only ever grow). */
size_t fr_adapter_usage_rows(const struct fr_adapter *a);
/* Row <i> into *<out>, its integrals brought up to now; its strings are
 * borrowed, valid while the adapter lives. 0, or -ENOENT past the end. */
int fr_adapter_usage_row(struct fr_adapter *a, size_t i, struct fr_adapter_usage *out);

/* ---- sandboxes (sandbox.c) ---- */

struct fr_sandbox_spec {
  const char *tenant;
  const char *name;         /* the sandbox's name (label fedrouter.io/name) */
  const char *pool;         /* claim from this pool first; NULL = cold only */
  const char *image;        /* for cold starts */
  int64_t cpu_m, mem_b;     /* requests = limits */
  struct fr_podopts *opts;  /* cold creates' pod options, NULL = none (a reference is taken); a
                               warm claim needs spec->pool's options to be the same */
  json_t *env;              /* object of strings or NULL (borrowed) */
  json_t *labels;           /* user labels or NULL (borrowed) */
  /* Secret values (object of strings) or NULL (borrowed; a reference is
   * kept while the create runs, dropped with fr_secret_values_free): env
   * that only the sandbox's agent gets, by /init, never the pod spec or an
   * annotation. Only pods with an agent are claimed for it. */
  json_t *secrets;
  int64_t lifetime_s;
  /* The pod's activeDeadlineSeconds (counted from its start), what the
   * cluster enforces when no router is left: 0 = lifetime_s. More lets
   * fr_adapter_sandbox_set_expiry() move the expiry later, up to it: a
   * real API server never raises a pod's deadline. */
  int64_t deadline_s;
  uint64_t ready_timeout_ms;/* give up on a cold start after this; 0 = 120 s */
  const char *request_id;
  const char *batch;        /* batch id (label fedrouter.io/batch), or NULL for none */
  /* A resume (fr_adapter_sandbox_resume): the pod gets this name and
   * mounts the workspace claim that exists; no warm claim. NULL: a new
   * sandbox. */
  const char *resume_pod;
  const char *resume_claim; /* with resume_pod: its workspace claim's name (NULL: "<pod>-ws") */
  /* Where the sandbox may connect (normalized, fr/egress.h; copied), or
   * NULL for the default (internet allowed, nothing denied: no policy).
   * Otherwise NetworkPolicy fr-egress-<hash> is made sure to exist before
   * the pod is claimed or created with label fedrouter.io/egress=<hash>,
   * so a warm pod serves any policy. */
  const struct fr_egress *egress;
  int spilled;              /* not the plan's first choice: annotation fedrouter.io/spilled */
};

enum fr_sandbox_err {
  FR_SB_OK = 0,
  FR_SB_NO_ROOM,            /* quota exceeded or Unschedulable: try elsewhere */
  FR_SB_UNAVAILABLE,        /* the cluster did not answer usefully */
  FR_SB_TIMEOUT,            /* not exec-ready in time */
  FR_SB_FAILED,             /* anything else (message says) */
};

struct fr_sandbox_result {
  enum fr_sandbox_err err;
  const char *message;      /* why, for errors */
  const struct fr_pod *pod; /* on success, the pod (borrowed during the callback) */
  int warm;
};

typedef void (*fr_sandbox_cb)(const struct fr_sandbox_result *res, void *arg);

/* Gets an exec-ready sandbox: claims a ready warm pod of spec->pool (label
 * patch with a resourceVersion precondition; on conflict the next ready pod;
 * after 3 conflicts or with none ready, a cold create) or creates one and
 * waits until it is Running and Ready. <spec> is copied. <cb> runs once,
 * from a later loop turn. */
int fr_adapter_sandbox_create(struct fr_adapter *a, const struct fr_sandbox_spec *spec,
                              fr_sandbox_cb cb, void *arg);
/* Deletes pod <pod>; <request_id> (may be NULL) goes out as X-Request-Id.
 * <cb> (may be NULL) gets the API response. */
int fr_adapter_sandbox_delete(struct fr_adapter *a, const char *pod, const char *request_id,
                              void (*cb)(int status, const char *message, void *arg), void *arg);
/* The egress policy of sandbox <pod> into <out>: the default when it
 * carries no fedrouter.io/egress label, else its NetworkPolicy's. 0, or
 * -ENOENT when that policy is not known here (not in the cache). */
int fr_adapter_egress_of(struct fr_adapter *a, const struct fr_pod *pod, struct fr_egress *out);
/* Moves the expiry of sandbox pod <pod> to <expires_s> (unix seconds,
 * in the future): annotation fedrouter.io/expires-at, which the reapers of
 * every router enforce. An earlier expiry lowers the pod's
 * activeDeadlineSeconds too, which the cluster enforces; a later one
 * leaves it (a real API server refuses to raise it), so a sandbox lives
 * past its create-time deadline (fr_sandbox_spec.deadline_s) only while a
 * router is there to reap it — never past that deadline. <cb> (may be
 * NULL) gets the API's status and message. -ENOENT when <pod> is not in
 * the cache, -ENOMEM. */
int fr_adapter_sandbox_set_expiry(struct fr_adapter *a, const char *pod, int64_t expires_s, const char *request_id,
                                  void (*cb)(int status, const char *message, void *arg), void *arg);
/* 1 if <pod> is on its way out: it has a deletionTimestamp, or this router
 * has sent its delete and the watch has not yet reported it gone. Lists
 * and lookups treat such pods as gone. */
int fr_adapter_pod_leaving(struct fr_adapter *a, const struct fr_pod *pod);
/* 1 if a delete of <pod> failed (the cluster did not take it) and the
 * reaper is retrying it: the sandbox still runs and shows as terminating. */
int fr_adapter_pod_delete_pending(struct fr_adapter *a, const struct fr_pod *pod);
/* 1 if the cluster, not a router, is deleting <pod>: it is terminating with
 * a DisruptionTarget condition (evicted by the taint manager when its node
 * was lost, drained, preempted) and this router has sent no delete of it.
 * Such a sandbox stays visible (state "evicted") until the pod is gone. */
int fr_adapter_pod_evicted(struct fr_adapter *a, const struct fr_pod *pod);
/* 1 if node <node> (NULL: none) is known and its Ready condition is not
 * True (NotReady, or Unknown once its kubelet stopped reporting); 0 if it
 * is Ready or not known (yet). */
int fr_adapter_node_unready(struct fr_adapter *a, const char *node);
/* Reserves (<delta> > 0) or releases (< 0) slots for creates a batch has
 * planned here but not started yet, so a concurrent plan sees them as
 * taken at once. */
void fr_adapter_reserve(struct fr_adapter *a, int64_t delta);
/* The same for warm pods of <pool> a batch plans to claim here, so a
 * concurrent plan does not count on the same ready pods (no-op for a pool
 * this cluster does not have). A started create from <pool> holds one
 * itself until its claim is settled (claimed, or gone cold), so the batch
 * gives its reservation back when it starts the create. */
void fr_adapter_reserve_warm(struct fr_adapter *a, const char *pool, int64_t delta);
/* Creates in flight on this adapter (reserved against its capacity). */
int64_t fr_adapter_inflight(const struct fr_adapter *a);

/* ---- workspaces and paused sandboxes (workspace.c) ----
 *
 * A sandbox created with option "workspace" gets its own
 * PersistentVolumeClaim "<pod>-ws" (label fedrouter.io/workspace=<pod>,
 * its tenant, name and pool; annotation fedrouter.io/sandbox-spec: what
 * makes the sandbox again), mounted at the workspace's path, deleted with
 * the sandbox. Pausing deletes the pod and keeps the claim, labelled
 * fedrouter.io/state=paused with fedrouter.io/paused-at and
 * fedrouter.io/expires-at: the claim is the paused sandbox's only record,
 * in the cluster, so every router replica lists it alike. Resuming makes
 * the pod again under the same name, mounting the same claim. */
struct fr_workspace {
  const char *pod;          /* the sandbox's pod name (the id is "<cluster>.<pod>") */
  const char *claim;        /* the claim's name */
  const char *tenant, *name, *pool; /* pool may be NULL */
  const char *path, *size, *storage_class; /* storage_class: the claim's (NULL: none yet) */
  const char *phase;        /* the claim's status.phase ("Bound", "Pending", ...) */
  int64_t bytes;            /* size asked for */
  int paused;               /* label fedrouter.io/state=paused */
  int64_t created_s, paused_s, expires_s; /* -1 when absent; expires_s: a paused sandbox's end */
  json_t *spec;             /* annotation fedrouter.io/sandbox-spec parsed; NULL when unreadable */
  json_t *claim_json;       /* the claim as cached */
};
/* The workspace of sandbox pod <pod>: 0 and *<out> filled (pointers
 * borrowed from the cache: valid until the loop runs again; release with
 * fr_workspace_clear), -ENOENT. */
int fr_adapter_workspace(struct fr_adapter *a, const char *pod, struct fr_workspace *out);
/* The workspaces one by one: *<cursor> starts NULL; 0 and *<out>, or
 * -ENOENT at the end. Do not let the loop run during a walk. */
int fr_adapter_workspace_next(struct fr_adapter *a, void **cursor, struct fr_workspace *out);
void fr_workspace_clear(struct fr_workspace *w);
/* 1 once the claim cache completed its first list. */
int fr_adapter_workspaces_synced(const struct fr_adapter *a);
/* Pauses sandbox <pod>: its claim marked paused until <expires_s> (unix
 * seconds), then the pod deleted. <cb> gets the first failing API status,
 * or the pod delete's (200). -ENOENT: no workspace claim; -ENOMEM. */
int fr_adapter_sandbox_pause(struct fr_adapter *a, const char *pod, int64_t expires_s, const char *request_id,
                             void (*cb)(int status, const char *message, void *arg), void *arg);
/* Resumes paused sandbox <pod>: a pod of the same name from the claim's
 * spec (env as it was, <secrets> values read again by the caller: an
 * object or NULL, borrowed), a lifetime of <lifetime_s> (0: the spec's),
 * mounting the claim; once it is exec-ready the claim is marked running
 * again. <cb> as for fr_adapter_sandbox_create. -ENOENT (no claim),
 * -EBUSY (its old pod is still there), -EINVAL (unreadable spec),
 * -ENOMEM. */
int fr_adapter_sandbox_resume(struct fr_adapter *a, const char *pod, json_t *secrets, int64_t lifetime_s,
                              const char *request_id, fr_sandbox_cb cb, void *arg);

/* ---- Secrets of the sandbox namespace (secret.c) ---- */

struct fr_secret_call;

enum fr_secret_err {
  FR_SECRET_OK = 0,
  FR_SECRET_NOT_FOUND,      /* no such Secret, or it lacks a key (<key> says which) */
  FR_SECRET_INVALID,        /* a value is not usable as an env var (not UTF-8, a NUL) */
  FR_SECRET_UNAVAILABLE,    /* the cluster did not answer usefully (403 included) */
};

struct fr_secret_result {
  enum fr_secret_err err;
  const char *key;          /* NOT_FOUND (NULL: the Secret itself) and INVALID: which key */
  const char *message;      /* why, for errors; never holds a value */
  /* FR_SECRET_OK: key -> decoded value for every key asked, borrowed for
   * the callback (json_incref to keep it, and let go of it with
   * fr_secret_values_free). */
  json_t *values;
  /* fr_adapter_secret_keys, FR_SECRET_OK: the names of its keys (array,
   * borrowed for the callback); never a value. */
  json_t *keys;
  int created;              /* fr_adapter_secret_set, FR_SECRET_OK: the Secret was made for it */
};

typedef void (*fr_secret_cb)(const struct fr_secret_result *res, void *arg);

/* Reads keys <keys> (<nkeys>, borrowed for the call) of Secret <secret> in
 * the sandbox namespace: one GET, not retried, at most 5 s, nothing cached,
 * so a changed value is what the next read gets. Bodies are
 * FR_KUBE_SENSITIVE. <cb> runs once, from a later loop turn, unless the
 * call is cancelled. Returns 0, -EHOSTDOWN (the breaker is open), -EINVAL,
 * -ENOMEM. <out> (may be NULL) gets the call for fr_secret_call_cancel. */
int fr_adapter_secret_get(struct fr_adapter *a, const char *secret, const char *const *keys, size_t nkeys,
                          const char *request_id, fr_secret_cb cb, void *arg, struct fr_secret_call **out);
/* The names of the keys of Secret <secret> (res->keys; NOT_FOUND: no such
 * Secret). The Secret's values pass through the router's memory on the
 * way (a GET has no "names only"): they are wiped, never kept. As
 * fr_adapter_secret_get otherwise. */
int fr_adapter_secret_keys(struct fr_adapter *a, const char *secret, const char *request_id, fr_secret_cb cb,
                           void *arg, struct fr_secret_call **out);
/* Sets key <key> of Secret <secret> to the <len> bytes of <value>
 * (borrowed for the call): a JSON merge patch of its data, and when the
 * Secret does not exist yet, a create of it (type Opaque, labels
 * app.kubernetes.io/managed-by=fedrouter and fedrouter.io/tenant=<tenant>)
 * holding the key (res->created); a create that loses to another writer
 * (409) patches after all. Bodies are FR_KUBE_SENSITIVE and wiped. As
 * fr_adapter_secret_get otherwise. */
int fr_adapter_secret_set(struct fr_adapter *a, const char *secret, const char *key, const void *value, size_t len,
                          const char *tenant, const char *request_id, fr_secret_cb cb, void *arg,
                          struct fr_secret_call **out);
/* Removes key <key> of Secret <secret> (a merge patch; a key it lacks is
 * no error, a missing Secret is NOT_FOUND). */
int fr_adapter_secret_unset(struct fr_adapter *a, const char *secret, const char *key, const char *request_id,
                            fr_secret_cb cb, void *arg, struct fr_secret_call **out);
/* No callback runs afterwards. Accepts NULL. */
void fr_secret_call_cancel(struct fr_secret_call *c);
/* Drops a reference to an object of secret values; the last one zeroes
 * the values before jansson frees them. Accepts NULL. */
void fr_secret_values_free(json_t *values);
/* ---- batch commit markers (commit.c) ----
 *
 * Every pod a create makes or claims carries label fedrouter.io/batch. A
 * batch that succeeds writes a commit marker (ConfigMap fr-batch-<id>,
 * data.state "committed") in every cluster that got pods, and answers only
 * then. Every router's reaper deletes a batch's pods once no marker says
 * "committed" and batch_commit_timeout_s has passed since the batch's last
 * progress: the later of the pod's creation or claim and the marker's
 * data.progress, which a running batch renews (state "pending") every
 * third of the timeout. A router that dies mid-batch so leaves nothing
 * behind: any router on the same clusters cleans up. Markers go once no
 * pod of theirs remains. */

/* Holds batch <batch> (<hold> 1) or lets it go (0); holds nest. While held
 * here its pods are never reaped by this router, and its pending marker is
 * renewed so other routers leave them too. Call with 1 before the first
 * create of the batch on this cluster, with 0 when the batch ended. */
void fr_adapter_batch_hold(struct fr_adapter *a, const char *batch, int hold);
/* Writes batch <batch>'s commit marker, expiring at <expires_s> (unix
 * seconds). <cb> gets the API status (2xx: committed) from a later loop
 * turn; on shutdown it gets 0. Returns 0 or a negative errno (then <cb> is
 * not called). */
int fr_adapter_batch_commit(struct fr_adapter *a, const char *batch, int64_t expires_s,
                            void (*cb)(int status, const char *message, void *arg), void *arg);

/* ---- exec (exec.c) ---- */

/* A command to run in a sandbox. Every pointer is borrowed for the call. */
struct fr_exec_spec {
  char *const *argv;        /* NULL-terminated, argv[0] non-empty, no NUL inside */
  json_t *env;              /* object of strings or NULL; over the sandbox's create-time env */
  const char *workdir;      /* absolute path or NULL (the image's) */
  const void *stdin_data;   /* NULL = no stdin */
  size_t stdin_len;
  int64_t timeout_s;        /* > 0: the command and its process group are killed then */
  size_t max_output;        /* cap per stream; beyond it output is dropped and flagged */
  struct fr_exec_budget *budget; /* shared bound on all execs' buffered output (fr/adapter_types.h);
                                    NULL = none; must outlive the exec */
  const char *request_id;   /* sent to the cluster; may be NULL */
};

enum fr_exec_err {
  FR_EXEC_OK = 0,           /* the command ran: see exit_code / timed_out */
  FR_EXEC_NOT_FOUND,        /* the pod is gone */
  FR_EXEC_NOT_RUNNING,      /* the pod exists but cannot run commands (not running) */
  FR_EXEC_UNAVAILABLE,      /* the cluster did not run it, or its answer was lost */
  FR_EXEC_FAILED,           /* the cluster could not start the command (message says) */
  FR_EXEC_AGENT_UNAVAILABLE, /* the sandbox's agent cannot be reached, and the command
                                needs it (the sandbox's env or secrets came by /init) */
  FR_EXEC_AGENT_DIED,       /* the command started, then its agent's stream broke while the
                               cluster stayed healthy: the sandbox's agent stopped (killed by
                               the sandbox's own code, or crashed); the outcome is unknown */
  FR_EXEC_BUSY,             /* the sandbox is at its limit of running processes: nothing ran */
};

struct fr_exec_result {
  enum fr_exec_err err;
  const char *message;      /* why, for errors */
  int exit_code;            /* FR_EXEC_OK and !timed_out */
  int timed_out;
  const char *out, *errout; /* captured stdout/stderr, valid during the callback */
  size_t out_len, err_len;
  struct fr_buf *out_buf, *err_buf; /* when not NULL, hold out and errout: the callback may
                                       take their memory (fr_buf_detach()) instead of copying */
  int out_truncated, err_truncated;
  double duration_ms;
  int via_agent;            /* ran through the sandbox's agent (else pods/exec) */
};

typedef void (*fr_exec_cb)(const struct fr_exec_result *res, void *arg);

/* Runs <spec> in sandbox pod <pod> and calls <cb> once, from a later loop
 * turn, with the outcome; the cluster's circuit breaker is fed from it.
 * A pod with an agent (label fedrouter.io/agent) runs it through the agent
 * (one pod-proxy request on a kept-alive connection; the agent kills the
 * command's whole process group and everything it started at the
 * timeout); if the agent cannot be reached before the command started,
 * through pods/exec as for any other pod.
 * Never retried (a command is not idempotent). Returns 0, or without
 * calling <cb>: -ENOENT (no such pod in the cache), -EHOSTDOWN (the
 * cluster's breaker is open: fail fast), -E2BIG (argv and env too long for
 * the transport: FR_EXEC_MAX_ARGV_BYTES), -EINVAL (bad spec), -ENOMEM. */
#define FR_EXEC_MAX_ARGV_BYTES 14336  /* argv and env, percent-encoded, through pods/exec */
int fr_adapter_exec(struct fr_adapter *a, const char *pod, const struct fr_exec_spec *spec,
                    fr_exec_cb cb, void *arg);

/* ---- the sandbox's agent, raw (agent.c) ----
 *
 * One HTTP request to the fedrouter-agent of a sandbox pod, through the
 * cluster's pod proxy (kept-alive connections, the sandbox's access token
 * added), streaming both ways: the seam the v1 data plane (processes,
 * files, streaming exec) and the E2B endpoint's in-sandbox proxy share,
 * and the one a per-cluster gateway would replace. */
struct fr_agent_call;

enum fr_agent_err {
  FR_AGENT_OK = 0,          /* the agent answered: see status */
  FR_AGENT_UNAVAILABLE,     /* the agent or the cluster was not reached, or the answer was lost */
  FR_AGENT_CANCELED,        /* on_data asked to stop (returned -1) */
};

/* The agent's port in every pod fedrouter makes (envd's); a port call to
 * it is refused even on a pod whose agent listens elsewhere. */
#define FR_AGENT_DEFAULT_PORT 49983

/* fr_agent_result.flags */
#define FR_AGENT_PORT_CLOSED 1  /* a port call: nothing listens on the port */

struct fr_agent_result {
  enum fr_agent_err err;
  int flags;                /* FR_AGENT_PORT_CLOSED */
  int status;               /* the agent's HTTP status (FR_AGENT_OK) */
  const char *body;         /* a non-2xx answer's body (the agent's error JSON), "" else */
  size_t body_len;
  const char *message;      /* why, for errors */
};

/* Returned by on_data to stop reading until fr_agent_call_resume(). */
#define FR_AGENT_PAUSE 1

/* Is <route> (a path from '/', no query) one of the agent routes a client
 * may reach through the router (the allow-list in upstream.c: /health,
 * /envs, /files and the process and filesystem Connect methods; never
 * /init)? 1 yes, -1 yes but not with <method>, 0 no. */
int fr_agent_route_known(const char *method, const char *route);

struct fr_agent_call_opts {
  int port;                 /* 0: the sandbox's agent (its routes, its token). Else a port the
                               sandbox serves (1-65535, not the agent's): <path> is any path and
                               query (checked as fr/urlsafe.h says), no token is sent, and any
                               answer but 502/503/504 is handed on (on_head/on_data) as it comes;
                               one the cluster gives because nothing listens comes to on_done as
                               FR_AGENT_UNAVAILABLE with FR_AGENT_PORT_CLOSED set */
  const char *method;       /* GET, HEAD, POST, PUT, DELETE (a port: PATCH, OPTIONS too) */
  const char *path;         /* an agent route and its query, from '/': "/files?path=%2Ftmp%2Fx";
                               the route must be in the allow-list for <method>, each query
                               parameter one the route takes with a percent-encoded value
                               (fr_adapter_agent_call answers -EINVAL otherwise) */
  int internal_route;       /* 1: <path> may be one of the adapter's own routes (/tar: the router's
                               snapshots, restores and forks), never set on a client's behalf */
  const char *content_type; /* of the body; may be NULL */
  const char *headers;      /* more request headers, "Name: value" lines separated by '\n'
                               (no CR); may be NULL. Never Host, Content-Length,
                               Transfer-Encoding, X-Access-Token or Authorization. */
  const void *body;         /* the whole body (copied), or NULL */
  size_t body_len;
  int stream_body;          /* 1: the body comes through fr_agent_call_write()/_end() */
  int64_t body_size;        /* with stream_body: its length, -1 = unknown (sent chunked) */
  uint64_t timeout_ms;      /* the whole call; 0 = none (streams that last as long as a process) */
  const char *request_id;   /* may be NULL */
  /* A 2xx answer: its head, once, before any data. <content_type> may be
   * NULL; <headers> are the answer's header lines as received ("Name:
   * value\r\n" each; read one with fr_agent_header()). May be NULL. */
  void (*on_head)(int status, const char *content_type, const char *headers, void *arg);
  /* A 2xx answer's body as it arrives. 0: go on; FR_AGENT_PAUSE: nothing
   * more until fr_agent_call_resume(); -1: stop (on_done gets
   * FR_AGENT_CANCELED). Must not cancel the call or free the adapter. */
  int (*on_data)(const char *data, size_t len, void *arg);
  /* stream_body: everything written so far has been handed to the
   * connection; write more. May be NULL. */
  void (*on_drain)(void *arg);
  /* Exactly once, from a later loop turn, unless cancelled. */
  void (*on_done)(const struct fr_agent_result *res, void *arg);
  void *arg;
};

/* Starts <o> against the agent of sandbox pod <pod>. Returns 0, or without
 * calling anything: -ENOENT (no such pod in the cache), -ENOTSUP (the pod
 * has no agent, or this router has no agent key), -EHOSTDOWN (the cluster's
 * breaker is open), -EINVAL, -ENOMEM. <out> (may be NULL) gets the call,
 * valid until on_done runs or it is cancelled. */
int fr_adapter_agent_call(struct fr_adapter *a, const char *pod, const struct fr_agent_call_opts *o,
                          struct fr_agent_call **out);
/* stream_body: queues <len> bytes (copied) of the body. Callers keep
 * fr_agent_call_pending() bounded (write while it is low, else wait for
 * on_drain). -EPIPE after _end() or once the call has finished. */
int fr_agent_call_write(struct fr_agent_call *c, const void *data, size_t len);
size_t fr_agent_call_pending(const struct fr_agent_call *c);
/* stream_body: the body is complete. */
int fr_agent_call_end(struct fr_agent_call *c);
/* Reading resumes after on_data returned FR_AGENT_PAUSE. */
void fr_agent_call_resume(struct fr_agent_call *c);
/* Stops the call; no callback runs afterwards. Accepts NULL. */
void fr_agent_call_cancel(struct fr_agent_call *c);

/* Header <name> (case-insensitive) of an on_head <headers> block, copied
 * trimmed into <out>; 0, or -ENOENT / -ENOSPC. */
int fr_agent_header(const char *headers, const char *name, char *out, size_t cap);
/* 1 if sandbox pod <pod> has an agent this router can reach. */
/* The data path new agent calls of the cluster take now: "gateway" when
 * it has one with a healthy URL, else "pod-proxy" (no gateway, or every
 * URL's breaker open: docs/gateway.md, "When the gateway is down"). */
const char *fr_adapter_data_path(const struct fr_adapter *a);
/* Agent and sandbox port calls sent so far through the gateway and through
 * the API server's pod proxy (/init included). */
void fr_adapter_data_path_calls(const struct fr_adapter *a, uint64_t *gateway, uint64_t *pod_proxy);
/* What the cluster's sandbox pod cache holds (metrics: after a mass
 * terminate every figure comes back down). */
struct fr_adapter_cache_stats {
  size_t pods;           /* records in the cache (sandboxes and pool pods, terminating ones too) */
  size_t table_slots;    /* slots of its hash table (8 bytes each) */
  size_t record_bytes;   /* pages holding the records and the reaper's pod names */
  size_t reaper_entries; /* the reaper's due-time queue */
};
void fr_adapter_cache_stats(const struct fr_adapter *a, struct fr_adapter_cache_stats *out);
int fr_adapter_pod_has_agent(struct fr_adapter *a, const struct fr_pod *pod);
/* The access token of sandbox pod <pod> (64 hex + NUL): what the agent
 * checks, and what E2B clients get as envdAccessToken. -EINVAL without an
 * agent key. */
int fr_adapter_agent_token(struct fr_adapter *a, const char *pod, char out[65]);
/* 1 if <token> is the access token of <pod> under the current or the
 * previous agent key (constant time). */
int fr_adapter_agent_token_ok(struct fr_adapter *a, const char *pod, const char *token);

/* ---- an upgrade to a port the sandbox serves (porttunnel.c) ----
 *
 * A WebSocket (or any other HTTP/1.1 Upgrade) to port <port> of sandbox pod
 * <pod>, through the cluster's pod proxy on a connection of its own:
 * fr_kube_tunnel_start() (fr/kube.h) with <o->target> the path and query
 * the sandbox's server gets (checked as fr/urlsafe.h says). Never the
 * agent's port. 0, or without a callback: -ENOENT (no such pod in the
 * cache), -EINVAL, -EHOSTDOWN (the cluster's breaker is open), -ENOMEM.
 * What a sandbox's server does never feeds the breaker. */
struct fr_kube_tunnel;
struct fr_kube_tunnel_opts;
int fr_adapter_port_tunnel(struct fr_adapter *a, const char *pod, int port, const struct fr_kube_tunnel_opts *o,
                           struct fr_kube_tunnel **out);

/* ---- processes through the agent (proc.c) ----
 *
 * The agent's process service as events, on top of fr_adapter_agent_call:
 * the router never sees a Connect envelope. */
struct fr_proc_stream;

enum fr_proc_event_kind {
  FR_PROC_ATTACHED,         /* attach only, first: where the replay starts and what was lost */
  FR_PROC_START,            /* the process runs: pid */
  FR_PROC_STDOUT,           /* output bytes: data, len */
  FR_PROC_STDERR,
  FR_PROC_PTY,              /* a PTY process's output */
  FR_PROC_END,              /* it ended: exit_code, timed_out, error */
};

struct fr_proc_event {
  enum fr_proc_event_kind kind;
  int64_t pid;              /* FR_PROC_START */
  const char *data;         /* output, decoded; valid during the callback */
  size_t len;
  int exit_code;            /* FR_PROC_END: as a shell reports it (128+N for signal N) */
  int timed_out;            /* FR_PROC_END: the agent killed it at its timeout */
  const char *error;        /* FR_PROC_END: why the agent ended it, or NULL */
  int64_t out_start, out_end; /* FR_PROC_ATTACHED: output offsets replayed from / produced so far */
  int64_t dropped;          /* FR_PROC_ATTACHED: bytes this attach will never see (-1 unknown) */
};

/* A process to start. Strings and <env> are borrowed for the call. */
struct fr_proc_spec {
  char *const *argv;        /* NULL-terminated; or <cmd> */
  const char *cmd;          /* a shell command line: /bin/sh -c <cmd> */
  json_t *env;              /* object of strings or NULL */
  const char *workdir;      /* absolute or NULL */
  int stdin_open;           /* keep stdin open for fr_adapter_agent_rpc SendInput */
  const void *stdin_data;   /* the whole stdin, then closed (not with a pty) */
  size_t stdin_len;
  int pty_cols, pty_rows;   /* > 0: on a pseudo-terminal of that size */
  const char *tag;          /* may be NULL */
  int64_t timeout_ms;       /* > 0: killed then, with everything it started */
  int kill_on_disconnect;   /* the stream's end before the process's kills it */
  const char *request_id;
};

/* 0 go on; FR_AGENT_PAUSE: taken, deliver nothing more until
 * fr_proc_stream_resume(); -1: stop (the stream is cancelled). */
typedef int (*fr_proc_event_cb)(const struct fr_proc_event *ev, void *arg);
/* The stream ended (once, unless cancelled). <code> and <message> are the
 * agent's error that ended it ("not_found" for an unknown pid, ...), NULL
 * when it ended cleanly. */
typedef void (*fr_proc_done_cb)(const struct fr_agent_result *res, const char *code, const char *message,
                                void *arg);

/* Starts <spec> in sandbox pod <pod> and streams its events. Same returns
 * as fr_adapter_agent_call. */
int fr_adapter_proc_start(struct fr_adapter *a, const char *pod, const struct fr_proc_spec *spec,
                          fr_proc_event_cb on_event, fr_proc_done_cb on_done, void *arg,
                          struct fr_proc_stream **out);
/* Reattaches to process <pid>: FR_PROC_ATTACHED, FR_PROC_START, the output
 * the agent kept from offset <replay_from> (0: its oldest byte), then with
 * <follow> live output and FR_PROC_END; without, the stream ends after
 * what the agent kept at attach (FR_PROC_END only if the process had
 * ended). Leaving never kills the process. */
int fr_adapter_proc_attach(struct fr_adapter *a, const char *pod, int64_t pid, int64_t replay_from, int follow,
                           const char *request_id, fr_proc_event_cb on_event, fr_proc_done_cb on_done,
                           void *arg, struct fr_proc_stream **out);
/* A buffered exec's <spec> as a streamed process: its argv, env, workdir,
 * stdin and timeout_s (killed then, with everything it started; and when
 * the stream ends first), events as for fr_adapter_proc_start; max_output
 * and budget do not apply (the caller bounds what it holds). The one
 * place an exec spec becomes a process spec, so a streaming exec and a
 * buffered one through the agent start the same process. Same returns as
 * fr_adapter_proc_start. */
int fr_adapter_exec_stream(struct fr_adapter *a, const char *pod, const struct fr_exec_spec *spec,
                           fr_proc_event_cb on_event, fr_proc_done_cb on_done, void *arg,
                           struct fr_proc_stream **out);
void fr_proc_stream_resume(struct fr_proc_stream *s);
/* No callback runs afterwards. Accepts NULL. */
void fr_proc_stream_cancel(struct fr_proc_stream *s);

/* One unary call of the agent's Connect services ("process.Process/List",
 * "filesystem.Filesystem/Stat", ...) with JSON <req> (borrowed). <answer>
 * is the parsed JSON answer of a 2xx, or the agent's error object
 * {"code","message"} of a non-2xx (NULL when unreadable or unreached). */
typedef void (*fr_agent_rpc_cb)(const struct fr_agent_result *res, json_t *answer, void *arg);
int fr_adapter_agent_rpc(struct fr_adapter *a, const char *pod, const char *method, json_t *req,
                         const char *request_id, fr_agent_rpc_cb cb, void *arg);

/* ---- pools (sandbox.c) ---- */
struct fr_pool_spec {
  const char *name;
  const char *owner;        /* tenant the pool belongs to; NULL = shared by all */
  const char *image;
  int64_t cpu_m, mem_b;
  struct fr_podopts *opts;  /* NULL = none; borrowed for the call */
  int64_t replicas;
};
/* Creates the pool's ReplicaSet; <cb> gets the HTTP status (201 created,
 * 409 exists, 0 unreachable) and the API's message. */
int fr_adapter_pool_create(struct fr_adapter *a, const struct fr_pool_spec *spec,
                           void (*cb)(int status, const char *message, void *arg), void *arg);
int fr_adapter_pool_resize(struct fr_adapter *a, const char *pool, int64_t replicas,
                           void (*cb)(int status, const char *message, void *arg), void *arg);
int fr_adapter_pool_delete(struct fr_adapter *a, const char *pool,
                           void (*cb)(int status, const char *message, void *arg), void *arg);

#endif
