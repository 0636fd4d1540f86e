/* sim.h - kubesim internals: one process simulates one Kubernetes cluster.
 *
 * Objects are stored as immutable, reference-counted versions (struct
 * objver) holding the compact JSON the API serves plus the few fields that
 * selectors and the controllers need. A list concatenates stored JSON, a
 * watch event shares the version the store holds, and a mutation parses the
 * current JSON, edits it with jansson and commits a new version with the
 * next resourceVersion (store_commit()). That keeps a pod at about 2 KiB.
 *
 * Simulation state that never goes on the wire (scheduler queues, timers,
 * processes) lives in per-kind structs hanging off struct sim_obj.
 */
#ifndef KUBESIM_SIM_H
#define KUBESIM_SIM_H

#include <stddef.h>
#include <stdint.h>

/* libbsd's tree.h marks generated static functions __unused, which only its
 * own cdefs.h (the "overlay") defines. */
#ifndef __unused
#define __unused __attribute__((__unused__))
#endif
#include <bsd/sys/tree.h>
#include <jansson.h>
#include <uv.h>

#include "exec.h"
#include "fr/http.h"
#define POD_MAX_HIDES 40          /* hidden paths (--hide and kubesim's own) */
#include "fr/labels.h"

/* The first five kinds are simulated (scheduler, lifecycle, quota, the
 * ReplicaSet controller, the node lifecycle controller). The rest are
 * stored kinds: validated, defaulted, listed, watched, patched and deleted
 * like the API server does (kubectl apply of a deploy/ bundle); of those,
 * Deployments and PodDisruptionBudgets have a controller (deploy.c; their
 * status, pdb.c) and Events are written by the simulated components
 * (events.c). */
enum sim_kind {
  K_NAMESPACE,
  K_NODE,
  K_POD,
  K_QUOTA,
  K_RS,
  K_SERVICEACCOUNT,
  K_SECRET,
  K_CONFIGMAP,
  K_LIMITRANGE,
  K_SERVICE,
  K_ROLE,
  K_ROLEBINDING,
  K_CLUSTERROLE,
  K_CLUSTERROLEBINDING,
  K_NETWORKPOLICY,
  K_RUNTIMECLASS,
  K_DEPLOYMENT,
  K_PDB,
  K_HPA,
  K_PVC,
  K_STORAGECLASS,
  K_EVENT,
  K_COUNT
};
#define K_FIRST_STORED K_SERVICEACCOUNT

/* Fields usable in field selectors (pods use all, others the first two;
 * events name their own in the same slots, see kind_field_names()). */
enum sim_field {
  F_NAME,
  F_NAMESPACE,
  F_NODE_NAME,
  F_PHASE,
  F_POD_IP,
  F_RESTART_POLICY,
  F_SCHEDULER_NAME,
  F_SERVICE_ACCOUNT,
  F_NOMINATED_NODE,
  F_EXTRA,          /* unused by pods: events need one slot more */
  F_COUNT
};

struct objver {
  int refs;
  enum sim_kind kind;
  uint64_t rv;
  struct fr_label *labels;
  size_t nlabels;
  char *fields[F_COUNT];      /* NULL when the object has no such field */
  unsigned char ready;        /* pods: condition Ready is True (the disruption controller's "healthy") */
  unsigned char deleting;     /* metadata.deletionTimestamp is set */
  size_t json_len;
  char *json;                 /* compact JSON, NUL-terminated */
};

struct sim;
struct sim_obj;

/* What the simulated kubelet of a node does (POST /_sim/nodes/NAME). */
enum node_kubelet {
  KUBELET_READY,     /* posts Ready=True */
  KUBELET_NOT_READY, /* posts Ready=False (reason KubeletNotReady) */
  KUBELET_LOST,      /* posts nothing: the node lost contact */
};

struct sim_node {
  int index;
  int64_t alloc_cpu_m, alloc_mem_m, alloc_pods;  /* allocatable */
  int64_t used_cpu_m, used_mem_m, used_pods;     /* requests of bound, non-terminal pods */
  int64_t alloc_gpu, used_gpu;                   /* the --gpu-resource extended resource */
  json_t *taints;                                /* spec.taints (owned copy), NULL = none */
  char **images;                                 /* pulled images (cache) */
  size_t nimages;
  int unschedulable;
  enum node_kubelet kubelet;
  uint64_t lost_ms;                              /* loop time the kubelet stopped posting */
  char ready;                                    /* Ready condition as stored: 'T', 'F' or 'U' */
};

enum pod_stage {
  PS_PENDING,       /* waiting for the scheduler */
  PS_UNSCHEDULABLE, /* parked until room frees */
  PS_BOUND,         /* on a node, pulling / creating */
  PS_RUNNING,
  PS_TERMINAL,      /* Succeeded or Failed */
  PS_TERMINATING,   /* deletionTimestamp set, waiting to be removed */
};

struct sim_pod {
  struct sim_obj *obj;         /* NULL once the object is gone */
  struct sim *sim;
  uv_timer_t timer;            /* lifecycle step / deadline */
  int timer_open;
  enum pod_stage stage;
  struct sim_obj *node;        /* bound node */
  int64_t req_cpu_m, req_mem_m, lim_cpu_m, lim_mem_m;
  int64_t req_gpu;             /* of the --gpu-resource extended resource */
  int64_t deadline_s;          /* activeDeadlineSeconds, 0 = none */
  int64_t start_ms;            /* when Running (wall clock) */
  char *workdir;               /* per-pod exec directory, created lazily */
  struct sim_exec_set execs;
  struct sim_agent *agent;     /* agent / namespace supervisor, NULL = none (agent.c) */
  struct sim_log *log;         /* captured output and log followers, NULL = none (logs.c) */
  char owner_uid[40];          /* controller ReplicaSet uid, "" = none */
  struct sim_pod *q_prev, *q_next; /* scheduler FIFO links */
  int queued;
  long unsched_idx;            /* index in sim->unsched, -1 when not parked */
  int unsched_reported;        /* Unschedulable condition already written */
  struct sim_obj *owner;       /* controlling ReplicaSet object, NULL = none */
  struct sim_pod *own_prev, *own_next; /* owner's list of pods */
  int counted;                 /* usage counted in node and namespace */
  int pulling;                 /* bound with an image pull ahead (its events) */
  long noexec_idx;             /* index in sim->noexec, -1 when no eviction is due */
  uint64_t noexec_since_ms;    /* loop time the pending NoExecute eviction was first planned */
  uint64_t noexec_due_ms;      /* loop time it is due */
  int node_unready;            /* Ready=False set by the node lifecycle controller */
  int kubelet_pending;         /* its node's kubelet is lost: start or removal waits for it */
  char ip[16];                 /* status.podIP, from podnet_alloc() ("" = none yet) */
  char **claims;               /* PersistentVolumeClaims its volumes name (volumes.c), NULL-ended */
  int attached;                /* its claims' volumes are attached to its node (volumes.c) */
};

struct sim_rs {
  int dirty;
  struct sim_pod *pods;        /* owned pods (intrusive list) */
  size_t npods;
  struct fr_selector *selector;
  int64_t next_create_ms;      /* backoff after a failed create */
};

struct sim_ns {
  int64_t pods, cpu_m, mem_m, lim_cpu_m, lim_mem_m; /* non-terminal pods' usage */
  int quota_dirty;
  int pdb_dirty;               /* a pod or budget changed: disruption budgets' status to redo */
};

struct sim_obj {
  RB_ENTRY(sim_obj) link;
  enum sim_kind kind;
  char *ns;                    /* "" for cluster-scoped kinds */
  char *name;
  char uid[40];
  uint64_t create_rv;          /* resourceVersion of the ADDED event */
  struct objver *cur;
  union {
    struct sim_node *node;
    struct sim_pod *pod;
    struct sim_rs *rs;
    struct sim_deploy *deploy;
    struct sim_ns *nsstate;
    void *any;
  } u;
};

RB_HEAD(obj_tree, sim_obj);

/* One event in the watch history. */
struct sim_event {
  int type;                    /* EV_ADDED, ... */
  struct objver *obj;          /* the new version (for DELETED: the last one, new rv) */
  struct objver *prev;         /* the version before, NULL for ADDED */
};

enum { EV_ADDED, EV_MODIFIED, EV_DELETED };

struct sim_watcher;

struct sim_faults {
  int down;
  int latency_ms;
  struct {
    char ip[64];
    int ms;
  } client_latency[16];
  int nclient_latency;
  double error_rate;
  int error_code;
  double throttle_rate;
  int retry_after_s;
  int reject_watches;          /* new watches get 429 (other requests pass) */
};

struct sim_opts {
  const char *listen;
  const char *port_file;
  const char *admin_listen;
  const char *admin_port_file;
  const char *name;
  const char *region;
  int nodes;
  const char *node_cpu;
  const char *node_memory;
  int node_pods;
  int tls;
  const char *token;
  const char *kubeconfig;
  const char *serviceaccount_dir; /* --write-serviceaccount: token, ca.crt, namespace as a pod sees them */
  const char *quota;
  int schedule_ms, image_pull_ms, start_ms, terminate_ms, api_latency_ms;
  int scheduler_qps;
  int fast_exec;
  const char *workdir;
  int history;
  int bookmark_ms;
  int min_request_timeout;     /* s; a watch without timeoutSeconds ends in [t, 2t) */
  const char *log_level;
  const char *agent_binary;    /* --agent-binary */
  const char *code_interpreter; /* --code-interpreter: server.py of the code-interpreter image */
  int agent_mode;              /* AGENT_MODE_* */
  int pod_namespaces;          /* per-pod namespaces and private root (root only) */
  /* Host paths no pod sees (isolated pods): the --workdir root, /root,
   * /home, /run, /tmp, /var/tmp and every --hide, canonical. */
  const char *hides[POD_MAX_HIDES];
  size_t nhides;
  int gpu_nodes, node_gpus;    /* the first gpu_nodes nodes have node_gpus GPUs each */
  const char *gpu_resource;    /* their resource name (default nvidia.com/gpu) */
  const char *node_labels[16]; /* --node-label [INDEX@]KEY=VALUE */
  int nnode_labels;
  const char *node_taints[16]; /* --node-taint [INDEX@]KEY[=VALUE]:EFFECT */
  int nnode_taints;
  int node_grace_ms;           /* --node-monitor-grace-ms */
  int event_limit;             /* --event-limit: events kept (0 = none recorded) */
  const char *pod_cidr;        /* --pod-cidr: NULL or "auto" picks a free /16 */
  const char *default_storage_class; /* --default-storage-class ("" = none) */
};

enum { AGENT_MODE_NONE, AGENT_MODE_PROCESS, AGENT_MODE_INPROC };

struct sim {
  uv_loop_t *loop;
  struct sim_opts opts;
  struct fr_http_server *api;
  struct fr_http_server *admin;
  SSL_CTX *ssl_ctx;
  char *ca_pem;
  uint64_t rv;
  struct obj_tree objs[K_COUNT];
  size_t counts[K_COUNT];
  int node_seq;

  /* watch history ring */
  struct sim_event *hist;
  size_t hist_cap, hist_start, hist_len;
  uint64_t compact_rv;         /* history before this was compacted away */

  struct sim_watcher *watchers;
  size_t nwatchers;

  /* scheduler */
  struct sim_pod *q_head, *q_tail;  /* ready to schedule, FIFO */
  struct sim_pod **unsched;         /* parked */
  size_t nunsched, unsched_cap;
  uv_timer_t sched_timer;
  int sched_armed;

  /* the taint manager: pods a NoExecute taint will evict (pods.c) */
  struct sim_pod **noexec;
  size_t nnoexec, noexec_cap;
  uv_timer_t noexec_timer;
  double sched_tokens;
  uint64_t sched_last_ms;

  /* the node lifecycle controller: nodes whose kubelet went quiet (nodelife.c) */
  uv_timer_t node_timer;

  struct sim_events *events;   /* the event ring (events.c) */

  /* controllers: Deployments, ReplicaSets, quota and disruption budget
   * status, synced a loop turn after a change */
  uv_timer_t sync_timer;
  int sync_armed;

  struct sim_net *net;         /* pod addresses and network (podnet.c) */
  struct sim_netpol *netpol;   /* NetworkPolicy egress of the pods (netpol.c) */
  int64_t quota_pods, quota_cpu_m, quota_mem_m; /* --namespace-quota, -1 = none */
  struct sim_faults faults;
  size_t execs_started;
  /* The last SIM_REQLOG requests of the API surface, "METHOD raw-target"
   * (cut at SIM_REQLOG_LINE): GET /_sim/requests shows them, so a test can
   * assert what a client did and did not send. */
#define SIM_REQLOG 512
#define SIM_REQLOG_LINE 200
  char reqlog[SIM_REQLOG][SIM_REQLOG_LINE];
  size_t reqlog_next, reqlog_n;
  /* Bearer tokens the API accepts: --token, or what PUT /_sim/tokens set
   * (a token rotation; api_tokens NULL = just --token). 401s answered. */
#define SIM_MAX_TOKENS 8
  char *api_tokens[SIM_MAX_TOKENS];
  size_t napi_tokens;
  size_t unauthorized;
  int stopping;
  char self_exe[4096];         /* this binary, re-run as the pod supervisor */
  struct sim_images *images;   /* what the modelled images hold (podimage.c) */
  struct sim_stats *stats;     /* API requests by verb and resource (stats.c) */
};

struct sim_err {
  int code;
  char reason[32];
  char msg[512];
  json_t *causes;
};

/* Fills <e> with an HTTP status, a Status reason and a formatted message;
 * returns -1 so callers can "return sim_err_set(...)". */
int sim_err_set(struct sim_err *e, int code, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- store.c ---- */
void store_init(struct sim *s);
void store_free(struct sim *s);
struct sim_obj *store_get(struct sim *s, enum sim_kind k, const char *ns, const char *name);
struct sim_obj *store_first(struct sim *s, enum sim_kind k, const char *ns);
struct sim_obj *store_next(struct sim *s, struct sim_obj *o);
/* Finds the first object with key > (ns, name) (for continue tokens). */
struct sim_obj *store_after(struct sim *s, enum sim_kind k, const char *ns, const char *name);
/* Commits <j> (taken) as the new version of <o> (NULL = create, returns the
 * new object): assigns the next resourceVersion, fills metadata, records the
 * event and notifies watchers. For EV_DELETED the object is unlinked and
 * freed (its per-kind state must already be detached). Returns the object or
 * NULL on out-of-memory. */
struct sim_obj *store_commit(struct sim *s, enum sim_kind k, struct sim_obj *o, json_t *j,
                             int event);
/* Parses the current version into a new json_t (caller owns). */
json_t *obj_json(const struct sim_obj *o);
/* 1 if pod <pod> (borrowed) has condition Ready=True. */
int pod_json_ready(json_t *pod);
void objver_unref(struct objver *v);
/* Label/field lookup for selectors over a version. */
const char *objver_label(const void *v, const char *key);
const char *objver_field(const void *v, const char *key);
const char *const *kind_field_names(enum sim_kind k);
/* Calls <cb> for every history event after <rv>, oldest first. Returns
 * -ESTALE (nothing delivered) when events after <rv> have already left the
 * window, which a watch answers with 410 Expired. */
int store_replay(struct sim *s, uint64_t rv, void (*cb)(const struct sim_event *, void *),
                 void *arg);
/* Oldest resourceVersion still answerable from history. */
uint64_t store_oldest_rv(const struct sim *s);
/* Drops the whole history, as an etcd compaction at the current revision
 * does: watches and continue tokens from older versions get 410. */
void store_compact(struct sim *s);

/* ---- watch.c ---- */
/* Streams the events of <k> (in <ns>, NULL for all) matching <lsel> and
 * <fsel> (both taken) on <req>: from <from_rv> when <have_rv>, else the
 * current state as ADDED first. The stream ends cleanly after <timeout_ms>
 * (0: never). */
void watch_start(struct sim *s, struct fr_http_req *req, enum sim_kind k, const char *ns,
                 struct fr_selector *lsel, struct fr_selector *fsel, int table,
                 uint64_t from_rv, int have_rv, int bookmarks, uint64_t timeout_ms);
void watch_notify(struct sim *s, const struct sim_event *ev);
void watch_drop_all(struct sim *s);

/* ---- proto.c ---- */
/* A create body in the Kubernetes protobuf encoding (what kubectl create
 * secret/configmap/namespace/deployment/service/serviceaccount/role/
 * rolebinding/clusterrole/clusterrolebinding/quota/poddisruptionbudget
 * and kubectl drain's Eviction send) as JSON; NULL with <err> filled when
 * it is malformed, not one of those kinds or sets a field not decoded. */
json_t *proto_decode(const void *body, size_t len, char *err, size_t errlen);

/* ---- kinds.c: names, API paths, tables ---- */
const char *kind_name(enum sim_kind k);          /* "Pod" */
const char *kind_list_name(enum sim_kind k);     /* "PodList" */
const char *kind_resource(enum sim_kind k);      /* "pods" */
const char *kind_api_version(enum sim_kind k);   /* "v1" / "apps/v1" */
/* Whether the API server keeps metadata.generation for <k> (1 at create,
 * +1 for each change of the spec). */
int kind_has_generation(enum sim_kind k);
const char *kind_group(enum sim_kind k);         /* "" / "apps" */
int kind_namespaced(enum sim_kind k);
/* Finds the kind served as <resource> in <group> ("" = core) / <version>;
 * 0 or -ENOENT. */
int kind_lookup(const char *group, const char *version, const char *resource, enum sim_kind *k);
/* 1 if /apis/<group>/<version> is served (any group but the core one). */
int kind_group_known(const char *group, const char *version);
/* Checks and defaults a stored kind's object <j> (borrowed, edited in
 * place) as the API server's validation would: <old> is the stored version
 * on an update (immutable fields), NULL on a create. 0, or -1 with <e> set
 * (422 Invalid with causes). Simulated kinds are checked elsewhere: 0. */
int kind_validate(enum sim_kind k, json_t *old, json_t *j, struct sim_err *e);
/* Answers the discovery and OpenAPI documents generated from the kinds
 * table (/apis, /apis/G, /apis/G/V, /openapi/v3, /openapi/v3/apis/G/V,
 * /openapi/v3/api/v1) except /api/v1 and /apis/apps/v1, whose resource
 * lists (with their subresources) live in api.c; <path> is the request's
 * path without a trailing slash. Returns 1 if it answered. */
int kinds_discovery(struct sim *s, struct fr_http_req *req, const char *path);
/* Answers the APIResourceList <base> (JSON text, borrowed) for <group>/
 * <version> plus every stored kind of that group version it lacks. */
void kinds_resource_list(struct fr_http_req *req, const char *group, const char *version,
                         const char *base);
/* Appends a meta.k8s.io Table with one row per version (NULL-terminated
 * array or a single one) to <b>. */
struct fr_buf;
int table_render(struct sim *s, enum sim_kind k, struct objver **vs, size_t n,
                 const char *rv, const char *cont, int include_object, struct fr_buf *b);

/* ---- api.c ---- */
void api_handle(struct fr_http_req *req, void *arg);
/* fr_http_server_opts.stream_body_cb of the API server: pod proxy bodies
 * are streamed, everything else is buffered. */
int api_stream_body(const struct fr_http_req *req, void *arg);
void admin_handle(struct fr_http_req *req, void *arg);
/* Sends a Kubernetes Status error. */
void api_status(struct fr_http_req *req, int code, const char *reason, const char *message,
                const char *kind, const char *name, json_t *causes);
void api_json(struct fr_http_req *req, int code, json_t *j);
/* Validates and fills the metadata of a new object of kind <k> in <ns>
 * (names, generateName, labels, uid, timestamps); 0 or -1 with <e> set. */
int obj_prepare(struct sim *s, enum sim_kind k, const char *ns, json_t *j, struct sim_err *e);
void api_raw(struct fr_http_req *req, int code, const char *json, size_t len);
/* A boolean query parameter read as the API server reads it: absent, "0"
 * or "false" (any case) is 0, any other value (even "") is 1. */
int sim_query_bool(const char *query, const char *key);

/* How the API server's metrics name a request: verb (LIST and WATCH apart
 * from GET, CONNECT for exec, attach, portforward and proxy), the resource
 * (a kind; K_COUNT for non-resource requests: discovery, /version,
 * /healthz, /metrics, unknown paths) and the subresource. */
enum api_verb {
  API_VERB_GET, API_VERB_LIST, API_VERB_WATCH, API_VERB_POST, API_VERB_PUT, API_VERB_PATCH,
  API_VERB_DELETE, API_VERB_DELETECOLLECTION, API_VERB_CONNECT, API_VERB_OTHER, API_VERB_COUNT
};
enum api_sub {
  API_SUB_NONE, API_SUB_STATUS, API_SUB_EXEC, API_SUB_LOG, API_SUB_PROXY, API_SUB_EVICTION,
  API_SUB_SCALE, API_SUB_ATTACH, API_SUB_PORTFORWARD, API_SUB_BINDING, API_SUB_OTHER, API_SUB_COUNT
};
struct api_class {
  int verb;                    /* enum api_verb */
  int kind;                    /* enum sim_kind, or K_COUNT */
  int sub;                     /* enum api_sub */
};
/* Classifies request <method> <path>?<query> (all borrowed) into <c>. */
void api_classify(const char *method, const char *path, const char *query, struct api_class *c);
/* fr_http_server_opts.done_cb of the API server (<arg>: the sim): counts
 * completed API requests by their status code. */
void api_done(const struct fr_http_req *req, int status, size_t body_bytes, uint64_t duration_ms,
              void *arg);

/* ---- stats.c: what reaches the API ---- */
struct sim_stats;
/* Sets up s->stats (all zero); 0 or -ENOMEM. */
int stats_init(struct sim *s);
void stats_free(struct sim *s);
/* Zeroes every counter (DELETE /_sim/stats). */
void stats_reset(struct sim *s);
/* A request of class <c> arrived. */
void stats_request(struct sim *s, const struct api_class *c);
/* A request of class <c> completed with HTTP status <code> (0: the client
 * went away first). */
void stats_response(struct sim *s, const struct api_class *c, int code);
/* GET /_sim/stats: {"since","requests_total","requests":[{verb, group,
 * version, resource, subresource, count}],"responses":[... code ...],
 * "responses_not_kept"}; NULL when out of memory. */
json_t *stats_json(struct sim *s);
/* GET /metrics: apiserver_request_total and
 * kubesim_api_requests_received_total in Prometheus text, appended to <b>;
 * 0 or -ENOMEM. */
int stats_prometheus(struct sim *s, struct fr_buf *b);
/* The subresource's name ("" for none) and back (API_SUB_OTHER for one
 * not in the table). */
const char *api_sub_name(int sub);
int api_sub_of(const char *name);

/* ---- pods.c ---- */
/* Validates and defaults a new pod; on success commits it and returns 0.
 * On failure returns the HTTP status and fills <reason>/<msg>. Takes <j>. */
int pod_create(struct sim *s, const char *ns, json_t *j, struct sim_obj **out,
               struct sim_err *err);
/* Starts deletion of a pod: graceful (deletionTimestamp, then removal after
 * --terminate-ms) unless <grace_s> is 0 or the pod never started. */
void pod_delete(struct sim *s, struct sim_obj *o, int64_t grace_s);
/* Marks pod <o> as about to be disrupted, as the eviction API and the taint
 * manager do before they delete it: commits a status condition
 * DisruptionTarget=True with <reason> and <message>. 0, or -ENOMEM. */
int pod_set_disruption(struct sim *s, struct sim_obj *o, const char *reason, const char *message);
/* Called after a committed pod update changed labels/owner/phase. */
void pod_changed(struct sim *s, struct sim_obj *o);
void sched_init(struct sim *s);
void sched_free(struct sim *s);
void sched_room_freed(struct sim *s);
/* Node <o> changed (kubectl taint, cordon): the scheduler's copy follows. */
void node_changed(struct sim *s, struct sim_obj *o);
/* 0 if <spec> (node labels or taints flag) is well formed. */
int node_flag_valid(const char *spec, int taint);
void pod_exec(struct sim *s, struct fr_http_req *req, struct sim_obj *o);
int node_create(struct sim *s, int index);
void quota_init_ns(struct sim *s, const char *ns);
int quota_check(struct sim *s, const char *ns, const char *pod_name,
                int64_t cpu_m, int64_t mem_m, int64_t lim_cpu_m, int64_t lim_mem_m,
                struct sim_err *err);
void ns_usage_add(struct sim *s, const char *ns, struct sim_pod *p, int sign);
void pod_free_state(struct sim *s, struct sim_obj *o);
/* Creates the pod's working directory once (p->workdir); 0 or -errno. */
int pod_workdir(struct sim *s, struct sim_obj *o);
/* Removes directory <dir> (taken; NULL is fine) and everything in it, off
 * the loop. */
void pod_dir_remove(struct sim *s, char *dir);
/* The environment of container <c> of pod <o>: NULL-terminated "K=V"
 * strings (free with pod_env_free()), NULL when out of memory. */
char **pod_env(struct sim_obj *o, json_t *c);
void pod_env_free(char **env);
/* A Running pod whose readiness waited on its agent becomes Ready. */
void pod_set_ready(struct sim *s, struct sim_obj *o);
/* The node lifecycle controller marks pod <o> not Ready (<ready> 0: its
 * node is NotReady or unreachable); <ready> 1 undoes that once the node's
 * kubelet reports again. */
void pod_node_ready(struct sim *s, struct sim_obj *o, int ready);
/* The kubelet of pod <o>'s node is back: a start or a removal that waited
 * for it goes ahead. */
void pod_kubelet_back(struct sim *s, struct sim_obj *o);
/* The pod's main process (its agent) ended with <code>: the pod ends,
 * Succeeded for 0, Failed otherwise (restarts are not modelled). */
void pod_main_exited(struct sim *s, struct sim_obj *o, int code);

/* ---- agent.c: the in-sandbox agent and the pod's process supervisor ---- */
struct sim_agent;
/* Environment variable every process kubesim starts for a pod carries
 * (value: the pod uid); without namespaces, that is how they are found. */
#define AGENT_POD_MARK "KUBESIM_POD_UID"
/* 1 if pod <j> (borrowed) runs fedrouter-agent and kubesim starts it as a
 * process (--agent-binary, process mode): its readiness waits on it. */
int agent_wanted(struct sim *s, json_t *j);
/* 1 if pod <j>'s first container's command[0] is named fedrouter-agent. */
int agent_pod_runs_agent(json_t *j);
/* Starts the agent of a Running pod (see agent_wanted()); 0 or -errno. */
int agent_start(struct sim *s, struct sim_obj *o);
/* Kills the pod's agent or supervisor and everything started in the
 * pod's namespaces; detaches it from <p>. Safe when there is none. */
void agent_stop(struct sim_pod *p);
/* Removes pod <p>'s directory <dir> (taken; NULL is fine) with
 * pod_dir_remove() once nothing of the pod runs any more: at once when it
 * has no supervisor, else when the supervisor has exited (it waits for the
 * pod's init, which outlives every process of the pod). Call before
 * agent_stop(). */
void agent_remove_dir(struct sim *s, struct sim_pod *p, char *dir);
/* Sets <*wrap> to the argv prefix that runs a command exec'd into container
 * <c> (borrowed) of pod <o> inside the pod's namespaces, with its
 * credentials (starting the pod's supervisor if needed): the command's argv
 * follows it, unresolved, and the prefix reports a command that cannot
 * start on fd 3 (exec.c's sim_exec_params.wrap); the caller frees it with
 * free(). 0 with <*wrap> NULL when kubesim does not isolate pods; -errno
 * when the pod's namespaces cannot be had (the command must not run). */
int agent_exec_wrap(struct sim *s, struct sim_obj *o, json_t *c, char ***wrap);
/* The pid file of the init of pod <p> when the pod has a network namespace
 * of its own (bridge mode, isolated, its supervisor running), else NULL.
 * Borrowed. */
const char *agent_net_pidfile(struct sim *s, struct sim_pod *p);
/* Whether pod port <port> of <o> (whose current JSON is <j>, borrowed) is
 * served: 0 when the pod proxy should dial its address (status.podIP),
 * 1 when kubesim answers in-process (agent_inproc_serve()), -ECONNREFUSED
 * when nothing can listen there (the pod runs no process, is not
 * Running). */
int agent_target(struct sim *s, struct sim_obj *o, json_t *j, int port);
/* Serves one proxied request for an agent pod in --agent-mode=inproc:
 * GET /health, POST /init, POST /process.Process/Start for the exec fast
 * path's commands. <path> is the path after /proxy (raw). */
void agent_inproc_serve(struct sim *s, struct sim_obj *o, struct fr_http_req *req,
                        const char *path);

/* ---- podnet.c: pod addresses and the pod network ---- */
struct sim_net;
enum { PODNET_BRIDGE, PODNET_LOOPBACK };
/* "A.B.C.D/N" (N in 12..28, no host bits) into <net> (host order) and
 * <prefix>; 0 or -EINVAL. */
int podnet_parse_cidr(const char *s, uint32_t *net, int *prefix);
/* Takes a pod range (<cidr>, NULL or "auto": the first free /16 of the
 * pool) and, as root with pod namespaces, makes its bridge; otherwise (or
 * when the kernel refuses) loopback addresses, logged once. Blocking: call
 * at start. 0, or -errno after a message on stderr (the range is taken).
 * Sets s->net; podnet_free() deletes the bridge. */
int podnet_init(struct sim *s, const char *cidr);
void podnet_free(struct sim *s);
/* The next free pod address, as text into <out>; 0 or -ENOSPC. */
int podnet_alloc(struct sim *s, char *out, size_t cap);
/* Gives pod address <ip> back (NULL, "" or not ours: nothing). */
void podnet_release(struct sim *s, const char *ip);
/* PODNET_BRIDGE or PODNET_LOOPBACK. */
int podnet_mode(const struct sim *s);
/* The --net argument of podinit for a pod with address <ip> in bridge mode
 * ("IP/PREFIX@BRIDGE"); -ENOENT in loopback mode. */
int podnet_pod_arg(const struct sim *s, const char *ip, char *out, size_t cap);
/* {"mode","cidr","bridge","gateway","addresses_used"} for /_sim/state. */
json_t *podnet_json(const struct sim *s);

/* ---- netpol.c: NetworkPolicy egress in the pods' own namespaces ---- */
struct sim_netpol;
/* Sets up s->netpol (s->loop set); 0 or -ENOMEM. */
int netpol_init(struct sim *s);
/* Closes its timer (shutdown); helpers still running finish by themselves. */
void netpol_close(struct sim *s);
/* Frees what is left (after the loop ended). Accepts s->netpol NULL. */
void netpol_free(struct sim *s);
/* store_commit() of object <o> of kind <k> (<event>: EV_*; for EV_DELETED
 * before <o> is freed): a NetworkPolicy's namespace, or the pod, is worked
 * out again a loop turn later. No-op without s->netpol. */
void netpol_commit(struct sim *s, enum sim_kind k, struct sim_obj *o, int event);
/* Pod <o> may have gained a network namespace (its supervisor started). */
void netpol_pod_dirty(struct sim *s, struct sim_obj *o);
/* GET /_sim/netpol: {"enforcing": bool, "pods": [{namespace, name,
 * policies (names in force), restricted, pending, applies, error}]}. */
json_t *netpol_json(struct sim *s);
/* The API server's ipBlock checks: -1 when <text> is not a CIDR (bits past
 * the prefix are allowed, as ParseCIDRSloppy does), 1 when <within> (NULL:
 * no check) is given and <text> is not a strict subset of it, else 0. */
int netpol_cidr_check(const char *text, const char *within);
/* "kubesim __netpol-apply PIDFILE RULESET", run from main(); never returns. */
int netpol_helper_main(int argc, char **argv);

/* ---- podimage.c: what kubesim's images hold ---- */
struct sim_images;
/* Where an isolated pod's image commands are. */
#define POD_IMAGE_BIN_DIR "/usr/local/bin"
#define POD_MAX_IMAGE_ENTRIES 32
/* Resolves the modelled images' commands against this host and checks the
 * --image-command PATTERN=PATH flags <user> (<nuser>); 0, or -1 after a
 * message on stderr. Sets s->images (free with images_free()). */
int images_init(struct sim *s, const char *const *user, size_t nuser);
void images_free(struct sim *s);
/* The repository name of <image> ("python" for
 * "docker.io/library/python:3.12@sha256:..."), into <out>; 0 or -EINVAL. */
int image_repo(const char *image, char *out, size_t cap);
/* The commands a pod of <image> gets, as podinit's "--image-entry" values
 * (static storage, valid while kubesim runs), at most <cap> into <out>;
 * returns how many. */
size_t image_entries(struct sim *s, const char *image, const char **out, size_t cap);

/* ---- volumes.c: StorageClasses, PersistentVolumeClaims, their directories ---- */
/* The provisioner kubesim runs: claims of a class that names it get a
 * directory of their own on this machine. */
#define VOLUMES_PROVISIONER "kubesim.io/hostpath"
/* Makes <workdir>/volumes and, unless --default-storage-class is "", the
 * default StorageClass. Blocking: call at start. 0 or -errno. */
int volumes_init(struct sim *s);
/* At exit: removes <workdir>/volumes and everything in it (blocking). */
void volumes_free(struct sim *s);
/* A new claim <j> (borrowed, edited) as the API server's admission stores
 * it: the default class when it names none, the pvc-protection finalizer,
 * volumeMode Filesystem, status Pending. */
void pvc_admit(struct sim *s, json_t *j);
/* The persistent-volume controller looks at claim <o> again: binds it
 * (a directory, status Bound with its capacity) when its class is ours and
 * binds at once, else records why it waits (events). May be called from a
 * request. */
void pvc_sync(struct sim *s, struct sim_obj *o);
/* Removes claim <o> now: its directory (off the loop) and the object
 * (DELETED). <o> is freed. */
void pvc_finalize(struct sim *s, struct sim_obj *o);
/* A StorageClass appeared: claims that waited for it are synced. */
void volumes_class_added(struct sim *s);
/* DELETE of claim <o>: while a pod uses it, it only gets its
 * deletionTimestamp (Terminating, kept by kubernetes.io/pvc-protection);
 * else it goes with its directory. <o> may be freed. */
void pvc_delete(struct sim *s, struct sim_obj *o);
/* Pod <p> (stage changed to terminal, or its state is going) no longer
 * holds its claims: Terminating claims nobody uses any more go, and pods
 * waiting to attach them are retried by their own timers. */
void volumes_pod_released(struct sim *s, struct sim_pod *p);
/* Records in <p>->claims the claims pod <j> (borrowed) mounts; 0 or
 * -ENOMEM. Checks the volumes and mounts first: -1 with <e> (422) when a
 * mount names no volume or a path is bad. */
int pod_claims_init(struct sim_pod *p, json_t *j, const char *name, struct sim_err *e);
/* The ephemeral volume controller, once pod <o> is stored: a claim
 * "<pod>-<volume>" owned by it for each generic ephemeral volume. */
void pod_ephemeral_create(struct sim *s, struct sim_obj *o);
/* The garbage collector for pod <p>, going: the claims it owns go too. */
void volumes_pod_gc(struct sim *s, struct sim_pod *p);
/* Frees <p>->claims. */
void pod_claims_free(struct sim_pod *p);
/* The scheduler's volume checks for pod <o>: 0 when it may be placed
 * (claims that bind on the first consumer are bound once <node> is known:
 * pod_claims_bind()), 1 with the scheduler's words in <msg> when not
 * (a missing, deleting or unbound claim; a ReadWriteOncePod claim in use). */
int pod_claims_schedulable(struct sim *s, struct sim_obj *o, char *msg, size_t cap);
/* Binds the WaitForFirstConsumer claims of pod <o>, now placed on <node>. */
void pod_claims_bind(struct sim *s, struct sim_obj *o, const char *node);
/* The attach/detach controller and kubelet before pod <o>'s containers
 * start: 0 when every claim is Bound and attachable to its node (marks the
 * pod attached), else 1 after a Warning event (FailedMount, or
 * FailedAttachVolume's Multi-Attach error for a ReadWriteOnce volume in
 * use on another node): the caller retries. */
int pod_claims_attach(struct sim *s, struct sim_obj *o);
/* The --mount values of podinit for container <c> of pod <o> (JSON <j>,
 * both borrowed): "MODE\nDST\nSUBPATH\nSRC", at most <cap> into <out>,
 * each malloc'd (the caller frees them). Returns how many, or -errno. */
int pod_volume_mounts(struct sim *s, struct sim_obj *o, json_t *j, json_t *c, char **out, size_t cap);
#define POD_MAX_MOUNTS 16

/* ---- podinit.c: the process side of a pod ---- */
#define POD_MAX_GROUPS 16
/* Docker's default capabilities: CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL,
 * SETGID, SETUID, SETPCAP, NET_BIND_SERVICE, NET_RAW, SYS_CHROOT, MKNOD,
 * AUDIT_WRITE, SETFCAP (CapEff 00000000a80425fb in /proc/PID/status). */
#define POD_CAPS_DEFAULT UINT64_C(0xa80425fb)
/* Where <poddir>/run (the agent's port file) is inside an isolated pod. */
#define POD_RUN_DIR "/run/kubesim"
/* In <poddir>: the pid of the pod's init (its namespaces), for exec. */
#define POD_INIT_PID_FILE ".kubesim-init.pid"

/* What a pod's processes run as. */
struct pod_creds {
  uint32_t uid, gid;
  uint32_t groups[POD_MAX_GROUPS];
  size_t ngroups;
  uint64_t caps;                  /* capabilities kept (for uid 0) */
};

/* The credentials of container <c> of pod <pod> (both borrowed) from the
 * securityContexts as the kubelet reads them: runAsUser and runAsGroup
 * (the container's over the pod's; 0 when unset: kubesim's images run as
 * root), fsGroup and supplementalGroups, POD_CAPS_DEFAULT with the
 * container's capabilities drop (or "ALL") and add applied. An added
 * capability that would undo the isolation (SYS_ADMIN, SYS_PTRACE, ...) is
 * left out and named in <warn> (cap bytes; "" when none). Returns 0. */
int pod_creds_from_json(json_t *pod, json_t *c, struct pod_creds *out, char *warn, size_t wcap);

/* How to start a pod's supervisor; every pointer borrowed for the call. */
struct pod_launch {
  const char *self_exe;
  const char *poddir;
  int parent;                     /* kubesim's pid */
  int isolate;                    /* namespaces and the private root */
  const char *const *hides;       /* absolute, canonical host paths */
  size_t nhides;
  const struct pod_creds *creds;  /* isolate only */
  const char *cwd;                /* the container's workingDir, NULL = "/" */
  const char *hostname;           /* the pod's name */
  const char *const *image;       /* image_entries() of the pod's image */
  size_t nimage;
  const char *net;                /* podnet_pod_arg(), NULL = the host's network */
  char *const *mounts;            /* pod_volume_mounts() */
  size_t nmounts;
  char **cmd;                     /* the agent's argv, NULL = none */
};

/* The argv of "kubesim __pod-init" for <l>, as one allocation (free());
 * NULL when out of memory. */
char **podinit_argv(const struct pod_launch *l);
/* The argv prefix of "kubesim __pod-enter" (ending in "--") that runs a
 * command in the pod whose init's pid is in <pidfile>, as <creds> in <cwd>
 * (NULL = "/"), reporting start failures on fd 3. One allocation (free());
 * NULL when out of memory. */
char **podenter_argv(const char *self_exe, const char *pidfile, const struct pod_creds *creds,
                     const char *cwd);
/* In a child about to exec one of the pod's commands: drops to <c> (groups,
 * gid, uid; capability bounding, permitted and effective sets; ambient
 * cleared) and sets no_new_privs. 0, or -1 with errno. */
int pod_creds_apply(const struct pod_creds *c);
/* "kubesim __pod-init ..." and "kubesim __pod-enter ...", run from main();
 * never returns. */
int pod_helper_main(int argc, char **argv);

/* ---- logs.c: container logs (pods/log) ---- */
struct sim_log;
/* Serves GET /api/v1/namespaces/<ns>/pods/<name>/log (auth and faults
 * already applied): validates the query, answers the errors the API server
 * and kubelet give, else streams the container's log (text/plain). */
void log_handle(struct sim *s, struct fr_http_req *req, const char *ns, const char *name);
/* Before uv_spawn of the agent's supervisor: sets up capture of its stdout
 * and stderr (<stdio>[1] and [2]) into the pod's log file; 0 or -errno
 * (then <stdio> is untouched). Pair with log_capture_start(). */
int log_capture_init(struct sim *s, struct sim_obj *o, uv_stdio_container_t *stdio);
/* After the spawn: <ok> 1 starts capturing, 0 abandons the pipes. */
void log_capture_start(struct sim_pod *p, int ok);
/* The pod's containers ended (agent exit, failure, deletion): followers
 * finish once the capture has written everything. Safe without a log. */
void log_container_ended(struct sim_pod *p);
/* The pod's state is going away: drops its reference to the log. */
void log_pod_free(struct sim_pod *p);

/* ---- proxy.c ---- */
/* 1 if <path> is /api/v1/namespaces/NS/pods/NAME/proxy[/...]. */
int proxy_is_proxy_path(const char *path);
/* Serves a pods/proxy request (auth and faults already applied). */
void proxy_handle(struct sim *s, struct fr_http_req *req);

/* ---- rs.c ---- */
/* A LabelSelector object <sel> (borrowed; NULL gives "") as selector text
 * for fr_selector_parse_labels(); malloc'd, NULL on out-of-memory. */
char *label_selector_text(json_t *sel);
/* Checks a new ReplicaSet (selector present and valid, template labels
 * match it, replicas >= 0) before it is stored. */
int rs_validate(json_t *j, struct sim_err *err);
/* Attaches controller state to a stored ReplicaSet; 0 or -ENOMEM. */
int rs_setup(struct sim *s, struct sim_obj *o);
void rs_mark_dirty(struct sim *s, struct sim_obj *rs);
/* A pod was created or changed (labels, owner, stage): keep ownership and
 * the owner's counts right, adopting orphans that match a selector. */
void rs_pod_event(struct sim *s, struct sim_obj *pod);
/* A pod's state is going away: unlink it from its owner. */
void rs_pod_gone(struct sim *s, struct sim_pod *p);
void rs_deleted(struct sim *s, struct sim_obj *rs, int orphan);
void sync_arm(struct sim *s);
void sync_init(struct sim *s);

/* ---- pdb.c: the disruption controller ---- */
/* A pod or ReplicaSet of namespace <ns> changed: its budgets' status is
 * worked out again a loop turn later. Cheap when there are no budgets. */
void pdb_mark_dirty(struct sim *s, const char *ns);
/* Writes the status of every budget of namespace <nso> that changed. */
void pdb_sync_ns(struct sim *s, struct sim_obj *nso);
/* A new budget <j> (borrowed, edited): generation 1 and an empty status,
 * as the API server stores it. */
void pdb_init_status(json_t *j);
/* The budget check of evicting pod <o> (<pod>: its JSON, borrowed): 0 when
 * it may go (unless <dry>, a budget that allowed it now has one
 * disruption fewer and names the pod in disruptedPods), else -1 with <e>
 * set: 429 (budget exhausted, with the DisruptionBudget cause; <e>->causes
 * is the caller's to free), 500 (more than one budget), 503. */
int pdb_eviction(struct sim *s, struct sim_obj *o, json_t *pod, int dry, struct sim_err *e);

/* ---- nodelife.c: the node lifecycle controller ---- */
/* Initialises its grace-period timer (s->node_timer) on s->loop. */
void nodelife_init(struct sim *s);
/* Closes that timer (shutdown). */
void nodelife_close(struct sim *s);
/* "ready", "not-ready" or "lost" (static storage). */
const char *node_kubelet_name(enum node_kubelet k);
/* 0 and <*k> for "ready", "not-ready" or "lost"; -EINVAL otherwise. */
int node_kubelet_parse(const char *name, enum node_kubelet *k);
/* Makes node <o>'s kubelet post Ready (KUBELET_READY), post NotReady, or go
 * quiet (KUBELET_LOST: after --node-monitor-grace-ms the controller marks
 * the node Unknown). Conditions, taints and the pods on the node follow as
 * in a real cluster; may be called from a request. 0 or -ENOMEM. */
int node_set_kubelet(struct sim *s, struct sim_obj *o, enum node_kubelet k);
/* 1 if the kubelet of node <name> (NULL: none) is lost. */
int node_kubelet_lost(struct sim *s, const char *name);

/* ---- deploy.c: the Deployment controller ---- */
struct sim_deploy;
/* Replica counts of one ReplicaSet as the rollout arithmetic sees them. */
struct deploy_rs_count {
  int64_t spec;       /* spec.replicas */
  int64_t available;  /* status.availableReplicas */
};
/* The pod-template-hash of template <tmpl> (borrowed; its own
 * pod-template-hash label is ignored, key order does not matter) with
 * status.collisionCount <collisions>: FNV-32a of the canonical JSON,
 * written with the controller's consonant-and-digit alphabet into <out>.
 * 0, -ENOMEM or -ENOSPC. */
int deploy_template_hash(json_t *tmpl, int64_t collisions, char *out, size_t cap);
/* maxSurge <surge> and maxUnavailable <unavail> (integers or "N%"; NULL
 * means "25%") as pod counts for <replicas>: surge rounds up, unavailable
 * down, both 0 becomes unavailable 1. 0, or -EINVAL on a bad value. */
int deploy_fenceposts(json_t *surge, json_t *unavail, int64_t replicas, int64_t *max_surge,
                      int64_t *max_unavail);
/* One RollingUpdate step as the controller takes it: scale the new
 * ReplicaSet <nw> up within maxSurge, or else scale the old ones <old>
 * (oldest first) down, unhealthy pods first, keeping replicas -
 * maxUnavailable available. Edits the .spec fields; 1 if any changed. */
int deploy_rolling_step(int64_t replicas, int64_t max_surge, int64_t max_unavail,
                        struct deploy_rs_count *nw, struct deploy_rs_count *old, size_t nold);
/* Defaults of a new Deployment <j> (replicas, strategy, history limit). */
void deploy_defaults(json_t *j);
/* Checks a Deployment's strategy; 0, or -1 with the offending <field>
 * and the API server's wording of the problem in <msg>. */
int deploy_check(json_t *j, const char **field, char *msg, size_t cap);
/* Attaches controller state to a stored Deployment; 0 or -ENOMEM. */
int deploy_setup(struct sim *s, struct sim_obj *o);
void deploy_mark_dirty(struct sim *s, struct sim_obj *d);
/* ReplicaSet <rs> changed: its controlling Deployment, if any, resyncs. */
void deploy_rs_changed(struct sim *s, struct sim_obj *rs);
/* Deployment <d> is being deleted: its ReplicaSets (and their pods) are
 * deleted, or released when <orphan>. Frees its controller state. */
void deploy_deleted(struct sim *s, struct sim_obj *d, int orphan);
void deploy_free_state(struct sim_obj *d);
/* Syncs every Deployment marked dirty; 1 if there was one (rs.c). */
int deploy_sync_dirty(struct sim *s);

/* ---- events.c: core/v1 Events the simulated components record ---- */
/* Sets up the event ring (--event-limit entries); 0 or -ENOMEM. */
int events_init(struct sim *s);
void events_free(struct sim *s);
/* Records an event about <about> (a stored object, borrowed) as
 * <component> (on node <host>, NULL = none) would: <type> "Normal" or
 * "Warning", a CamelCase <reason> and a printf message. An identical event
 * (same object, reason, message, type, source) within the hour increments
 * the stored one's count and lastTimestamp instead, as the client-go
 * recorder does. Never fails visibly: without memory the event is lost. */
void event_emit(struct sim *s, struct sim_obj *about, const char *type, const char *reason,
                const char *component, const char *host, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* ---- misc ---- */
/* Quantities may arrive as JSON numbers (YAML "cpu: 2"); Kubernetes
 * serialises them back as strings. Rewrites every value of the object
 * <map> (e.g. resources.requests) as a canonical string; returns -1 and
 * names the bad key in <bad> if a value is not a valid quantity. */
int quantities_normalize(json_t *map, const char **bad);
void uid_new(char out[40]);
void now_rfc3339(char out[21]);
int64_t json_get_int(json_t *o, const char *key, int64_t dflt);
const char *json_get_str(json_t *o, const char *key);
/* Walks a dotted path of objects ("metadata.labels"); NULL if missing. */
json_t *json_path(json_t *root, const char *path);
/* Gets or creates an object member. */
json_t *json_obj(json_t *parent, const char *key);

#endif
