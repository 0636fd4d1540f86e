/* fr/adapter_types.h - the plain values of the cluster adapter: the labels
 * and annotations fedrouter puts on cluster objects, a cached pod (struct
 * fr_pod) and the exec output budget. No functions but the pod's
 * accessors, nothing of a cluster, a loop or a client: the pod cache
 * (podstore) and the REST client's exec (fr/kube.h) include this alone,
 * fr/adapter.h includes it for its users.
 */
#ifndef FR_ADAPTER_TYPES_H
#define FR_ADAPTER_TYPES_H

#include <stddef.h>
#include <stdint.h>

#define FR_LABEL_SANDBOX "fedrouter.io/sandbox"
#define FR_LABEL_POOL "fedrouter.io/pool"
#define FR_LABEL_STATE "fedrouter.io/state"
#define FR_LABEL_TENANT "fedrouter.io/tenant"
#define FR_LABEL_NAME "fedrouter.io/name"
#define FR_LABEL_OWNER "fedrouter.io/owner"
/* On a sandbox or pool pod: it runs fedrouter-agent on this port. */
#define FR_LABEL_AGENT "fedrouter.io/agent"
/* On a sandbox or pool pod with an agent: what its /init token was made
 * for, "pool" (every pod of the pool named by fedrouter.io/pool: a
 * ReplicaSet's pods share one template) or "pod" (this pod alone, a cold
 * create). The pod's env FR_AGENT_INIT_SHA256 holds the token's SHA-256;
 * the token is HMAC-SHA256(agent key, "init:<cluster>/<namespace>/<scope>/
 * <pool or pod>") in hex, which only routers can make (agent.c). */
#define FR_LABEL_AGENT_INIT "fedrouter.io/agent-init"
/* On every pod a create makes or claims: the batch it belongs to. */
#define FR_LABEL_BATCH "fedrouter.io/batch"
/* Ports of the sandbox anyone may reach by its preview URL: "all", or the
 * port numbers joined by '.' ("8000.8080"); absent = none (private). */
#define FR_LABEL_PUBLIC_PORTS "fedrouter.io/public-ports"
/* On a sandbox pod with a workspace ("true"), and on its workspace claim
 * ("<pod>-ws"): the pod's name, the sandbox's id once paused. */
#define FR_LABEL_WORKSPACE "fedrouter.io/workspace"
/* A workspace claim: the sandbox's spec (JSON) a resume makes it from. */
#define FR_ANN_SANDBOX_SPEC "fedrouter.io/sandbox-spec"
/* On a sandbox pod: "pause" makes the reaper pause it at its expiry (or
 * when its deadline ended it) instead of terminating it, for
 * fedrouter.io/paused-ttl seconds. */
#define FR_LABEL_ON_TIMEOUT "fedrouter.io/on-timeout"
#define FR_LABEL_PAUSED_TTL "fedrouter.io/paused-ttl"
/* On a sandbox pod: "true" when E2B's lifecycle asked autoResume. */
#define FR_LABEL_AUTO_RESUME "fedrouter.io/auto-resume"
/* A paused sandbox's claim: when it was paused (RFC 3339). */
#define FR_ANN_PAUSED_AT "fedrouter.io/paused-at"
/* On a sandbox whose egress is restricted: the hash of its policy
 * (fr_egress_hash), which NetworkPolicy fr-egress-<hash> selects. */
#define FR_LABEL_EGRESS "fedrouter.io/egress"
/* On that NetworkPolicy: the policy's canonical text (fr_egress_text), and
 * a value every router's write of it changes (docs/architecture.md,
 * "Sandbox egress"). */
#define FR_ANN_NETWORK "fedrouter.io/network"
#define FR_ANN_TOUCHED "fedrouter.io/touched"
#define FR_ANN_CREATED "fedrouter.io/created-at"
#define FR_ANN_EXPIRES "fedrouter.io/expires-at"
#define FR_ANN_WARM "fedrouter.io/warm"
/* "true" on a sandbox placed in a cluster other than its plan's first
 * choice (fr_sandbox_spec.spilled): usage counts it as spilled. */
#define FR_ANN_SPILLED "fedrouter.io/spilled"
#define FR_ANN_ENV "fedrouter.io/env"
#define FR_ANN_POOL_SPEC "fedrouter.io/pool-spec"
/* The names (never the values) of the create-time secrets, comma-separated
 * and sorted: what GET shows as "secrets". */
#define FR_ANN_SECRETS "fedrouter.io/secrets"
/* The names of the env a sandbox with an agent got by /init ("A,B"; the
 * values are nowhere in the pod). */
#define FR_ANN_ENV_NAMES "fedrouter.io/env-names"
/* Label keys under this prefix belong to fedrouter; user labels may not use it. */
#define FR_LABEL_PREFIX "fedrouter.io/"

/* A sandbox or pool pod as the adapter caches it: what listing, claims,
 * readiness, reaping and exec need, in ~250 bytes instead of a JSON tree.
 * Read only; valid until the loop runs again. */
enum fr_pod_phase { FR_POD_PENDING, FR_POD_RUNNING, FR_POD_SUCCEEDED, FR_POD_FAILED, FR_POD_UNKNOWN };

struct fr_pod {
  char *name;
  char rv[24];              /* metadata.resourceVersion */
  /* Labels fedrouter sets (interned; NULL when absent). */
  const char *pool, *tenant, *state;
  char *sbname;             /* label fedrouter.io/name */
  char *labels;             /* every other label: "key\0value\0...\0" (NULL: none) */
  const char *node;         /* spec.nodeName (interned) */
  const char *reason;       /* status.reason (interned) */
  const char *disruption;   /* reason of condition DisruptionTarget=True (interned): the cluster is
                             * evicting it (taint manager, eviction API, ...); NULL = not */
  char *env;                /* annotation fedrouter.io/env: JSON text */
  char *secrets;            /* annotation fedrouter.io/secrets: "A,B" (names only) */
  char *unschedulable;      /* message of PodScheduled=False/Unschedulable */
  int64_t cpu_m, mem_b;     /* requests, summed over containers */
  int64_t created_s, expires_s; /* annotations fedrouter.io/created-at, expires-at; -1 absent */
  int64_t creation_s, start_s;  /* metadata.creationTimestamp, status.startTime; -1 absent */
  uint16_t gpus;            /* GPUs (the configured resource) requested, summed */
  unsigned phase : 3;       /* enum fr_pod_phase */
  unsigned ready : 1;       /* condition Ready is True */
  unsigned terminating : 1; /* metadata.deletionTimestamp is set */
  unsigned warm : 1;        /* annotation fedrouter.io/warm is "true" */
  unsigned init_env : 1;    /* annotation fedrouter.io/env-names is set */
  unsigned spilled : 1;     /* annotation fedrouter.io/spilled is "true" */
};

/* Value of label <key> of <p> (fedrouter's or a user's), or NULL. */
const char *fr_pod_label(const struct fr_pod *p, const char *key);
/* The other labels one by one: *off starts at 0; returns 0 at the end. */
int fr_pod_label_next(const struct fr_pod *p, size_t *off, const char **key, const char **value);
/* 1 when its containers finished: phase Failed or Succeeded. */
int fr_pod_finished(const struct fr_pod *p);
/* 1 when it finished or is terminating. */
int fr_pod_done(const struct fr_pod *p);

/* Output buffered by every exec that shares it, bounded as a whole: past
 * <max> bytes, further output of any of them is dropped and flagged
 * truncated, as past a per-stream cap. The router keeps one for all its
 * execs (limits.exec_output_budget_bytes); the pods/exec reader
 * (fr_kube_exec), the agent path (fr_adapter_exec) and the router's kept
 * copies charge <used> and give it back. Loop thread only. */
struct fr_exec_budget {
  size_t used, max;
};

#endif
