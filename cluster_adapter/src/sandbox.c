/* sandbox.c - sandboxes and warm pools in one cluster: claim, cold create,
 * wait for exec-readiness, delete, pool ReplicaSets, and the reaper.
 *
 * A create is a small state machine (set_state() logs every transition
 * and asserts it is one of these):
 *
 *   START --restricted egress--> EGRESS --its NetworkPolicy written--> PICK
 *     |                             (egress.c; an error: DONE)
 *     +--else--> PICK (a resume: CREATING)
 *
 *   PICK --ready warm pod--> CLAIMING --200--> [INIT] --> DONE (warm)
 *     |          ^               |409/404/422: PICK the next pod
 *     |          +---------------+  (after 3 conflicts: CREATING)
 *     +--none ready-------> CREATING --201--> WAITING --Ready--> [INIT] --> DONE (cold)
 *                             |409: CREATING      |403/Unschedulable: NO_ROOM
 *                                                 |timeout: TIMEOUT
 *   every state but DONE --> DONE (the answer: once, from finish())
 *
 * INIT (the agent's /init with the sandbox's token, env and secrets) is
 * skipped for a pod without an agent when there is nothing to hand it.
 *
 * With a workspace (workspace.c), CREATING first POSTs the sandbox's
 * claim, then its pod; CLAIMING adopts the claimed pool pod's claim (a
 * PATCH) before INIT. A resume (fr_adapter_sandbox_resume) starts in
 * CREATING with the paused sandbox's pod name and its claim, which exists.
 * Pausing marks the claim paused, then deletes the pod.
 *
 * Waiting uses the pod informer (no polling): every pod event is matched
 * against the creates in flight.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox.h"

#include "agent.h"
#include "cluster.h"
#include "commit.h"
#include "fr/assert.h"
#include "fr/buf.h"
#include "fr/egress.h"
#include "fr/kube.h"
#include "fr/log.h"
#include "fr/quantity.h"
#include "fr/urlsafe.h"
#include "fr/util.h"
#include "podopts.h"
#include "egress.h"
#include "slab.h"
#include "upstream.h"
#include "workspace.h"

#define MAX_CLAIM_CONFLICTS 3
#define DEFAULT_READY_TIMEOUT_MS 120000
/* The reaper deletes expired or finished sandboxes; every router replica
 * runs it (deletes are idempotent). */
#define REAP_EVERY_MS 2000

enum cstate { CS_START, CS_EGRESS, CS_PICK, CS_CLAIMING, CS_CREATING, CS_WAITING, CS_INIT, CS_DONE };
static const char *const cstate_names[] = {"start", "egress", "pick", "claiming", "creating", "waiting", "init", "done"};

struct create_op;
struct reap_due;

/* This file's state: the creates in flight, the reaper, and the marks it
 * keeps on pods by name (sets: the keys; the values are unused). */
struct sandboxes {
  struct cluster *cl;
  struct commits *cm;            /* the commit rule the reaper applies */
  struct workspaces *ws;         /* the sandboxes' own claims */
  struct egresses *eg;           /* the creates' egress policies */
  struct create_op *creates;     /* in flight */
  struct strmap claiming;        /* while a claim is out */
  struct strmap reaping;         /* once a reap delete was sent */
  struct strmap deleting;        /* from our DELETE until the watch says gone */
  struct strmap abandoned;       /* pods of creates given up while the cluster was down:
                                    deleted by the reaper once it answers again */
  uv_timer_t *reaper;
  struct reap_due *due;          /* min-heap by time: when each sandbox is due for reaping */
  size_t ndue, due_cap;
  struct slab due_names;         /* the entries' pod names (not malloc: slab.h says why) */
  int stopping;
};

struct create_op {
  struct create_op *prev, *next;
  struct sandboxes *sb;
  enum cstate state;
  /* spec, owned */
  char *tenant, *name, *pool, *image, *request_id, *batch;
  int64_t cpu_m, mem_b, lifetime_s;
  int64_t deadline_s;       /* activeDeadlineSeconds: >= lifetime_s */
  uint64_t ready_timeout_ms;
  int busy;                 /* the last answer was "busy", not "down": 429, or never sent (the router's own queue
                               for the cluster timed out); the breaker does not hear of it as a failure */
  json_t *secrets;          /* a reference: env only the agent gets, never the pod */
  json_t *env, *labels;
  struct fr_podopts *opts;  /* pod options of a cold create; NULL = none */
  struct fr_egress *egress; /* a restricted egress policy (owned), NULL = the default */
  char egress_hash[FR_EGRESS_HASH_LEN + 1]; /* its hash: label fedrouter.io/egress; "" = none */
  struct egress__wait egress_wait; /* CS_EGRESS: waiting for its NetworkPolicy */
  fr_sandbox_cb cb;
  void *arg;
  int conflicts;
  char conflicted[MAX_CLAIM_CONFLICTS][64]; /* pods whose claim this create lost: not again */
  int resume;               /* a paused sandbox again: fixed pod name, its workspace claim exists */
  char ws_claim[128];       /* resume: the workspace claim's name ("" = "<pod>-ws") */
  int ws_made;              /* this create made the workspace claim of op->pod */
  int init_warm;            /* CS_INIT: the pod came from the pool */
  int spilled;              /* annotation fedrouter.io/spilled */
  int warm_held;            /* holds one of the pool's ready pods reserved (warm_hold) */
  char pod[64];
  struct fr_kube_call *call;
  struct agent__init *init; /* CS_INIT: the agent's /init in flight */
  uv_timer_t *timer;
};

/* A create from a pool holds one of the pool's ready pods reserved on the
 * pool record (fr_adapter_reserve_warm) from its start until its claim is
 * settled: the cache shows the pod claimed, or the create went cold. The
 * batch hands its plan's warm reservation over to it when it starts the
 * create (as for cold slots and the in-flight count), so a concurrent plan
 * never counts on a pod a claim in flight is about to take. */
static void warm_release(struct create_op *op) {
  if (!op->warm_held)
    return;
  op->warm_held = 0;
  cluster__reserve_warm(op->sb->cl, op->pool, -1);
}

/* The transitions of the diagram above: allowed[from] has bit <to>. */
#define CS_BIT(s) (1u << (s))
static const unsigned allowed[] = {
    [CS_START] = CS_BIT(CS_EGRESS) | CS_BIT(CS_PICK) | CS_BIT(CS_CREATING) | CS_BIT(CS_DONE),
    [CS_EGRESS] = CS_BIT(CS_PICK) | CS_BIT(CS_DONE),
    [CS_PICK] = CS_BIT(CS_PICK) | CS_BIT(CS_CLAIMING) | CS_BIT(CS_CREATING) | CS_BIT(CS_DONE),
    [CS_CLAIMING] = CS_BIT(CS_PICK) | CS_BIT(CS_CREATING) | CS_BIT(CS_INIT) | CS_BIT(CS_DONE),
    [CS_CREATING] = CS_BIT(CS_CREATING) | CS_BIT(CS_WAITING) | CS_BIT(CS_DONE),
    [CS_WAITING] = CS_BIT(CS_INIT) | CS_BIT(CS_DONE),
    [CS_INIT] = CS_BIT(CS_DONE),
    [CS_DONE] = 0,
};

static void set_state(struct create_op *op, enum cstate s) {
  FR_ASSERT(allowed[op->state] & CS_BIT(s));
  FR_DEBUG("sandbox", "%s: %s %s -> %s", op->sb->cl->cc.name, op->name, cstate_names[op->state], cstate_names[s]);
  op->state = s;
  if (s != CS_EGRESS && s != CS_PICK && s != CS_CLAIMING)
    warm_release(op);
}

static int delete_pod(struct sandboxes *sb, const char *pod, const char *request_id, int hide,
                      void (*cb)(int status, const char *message, void *arg), void *arg);

/* The pod of a create that is given up: only the pod (a workspace claim
 * this create made goes in finish(); a resumed sandbox keeps its own). */
static void op_delete_pod(struct create_op *op) {
  delete_pod(op->sb, op->pod, op->request_id, 1, NULL, NULL);
}

static void timer_closed(uv_handle_t *h) {
  free(h);
}

static void op_free(struct create_op *op) {
  struct sandboxes *sb = op->sb;

  /* In the list of creates in flight, and no call of its own still out. */
  FR_ASSERT(op->prev != NULL ? op->prev->next == op : sb->creates == op);
  FR_ASSERT(op->call == NULL && op->init == NULL);

  if (op->prev)
    op->prev->next = op->next;
  else if (sb->creates == op)
    sb->creates = op->next;
  if (op->next)
    op->next->prev = op->prev;
  cluster__inflight_add(sb->cl, -1);
  warm_release(op);
  egress__cancel(&op->egress_wait);
  if (op->egress_hash[0] != '\0')
    egress__hold(sb->eg, op->egress_hash, -1);
  free(op->egress);
  if (op->timer != NULL)
    uv_close((uv_handle_t *)op->timer, timer_closed);
  free(op->tenant);
  free(op->name);
  free(op->pool);
  free(op->image);
  free(op->request_id);
  fr_secret_values_free(op->secrets);
  free(op->batch);
  json_decref(op->env);
  json_decref(op->labels);
  fr_podopts_unref(op->opts);
  free(op);
}

static void finish(struct create_op *op, enum fr_sandbox_err err, const char *message, const struct fr_pod *pod,
                   int warm) {
  struct fr_sandbox_result r;

  set_state(op, CS_DONE);
  if (op->call != NULL) {
    fr_kube_cancel(op->call);
    op->call = NULL;
  }
  agent__init_cancel(op->init);
  op->init = NULL;
  /* Whether the cluster answered at all feeds its circuit breaker; a busy
   * one (429, or a request that waited out the router's own queue for it)
   * is slow, not down: the batch spills, the breaker stays closed. */
  if (err == FR_SB_OK)
    cluster__report(op->sb->cl, 1);
  else if (err == FR_SB_UNAVAILABLE && !op->sb->stopping && !op->busy)
    cluster__report(op->sb->cl, 0);
  /* A create that made a workspace and did not get its sandbox leaves
   * nothing (its pod, if any, was deleted on the way here). A resume
   * keeps the workspace: the sandbox stays paused. */
  if (err != FR_SB_OK && op->ws_made && !op->resume)
    workspace__claim_delete(op->sb->ws, op->pod, op->request_id, NULL, NULL);
  memset(&r, 0, sizeof(r));
  r.err = err;
  r.message = message;
  r.pod = pod;
  r.warm = warm;
  op->cb(&r, op->arg);
  op_free(op);
}

/* ---- success, after the agent's /init where there is one ---- */

static void on_inited(int rc, const char *message, void *arg) {
  struct create_op *op = arg;
  const struct fr_pod *p;

  op->init = NULL;
  p = cluster__pod(op->sb->cl, op->pod);
  if (rc == 0 && p != NULL) {
    finish(op, FR_SB_OK, NULL, p, op->init_warm);
    return;
  }
  /* A sandbox whose agent refuses its token and env is not usable as asked:
   * it goes, and the caller places the sandbox elsewhere. */
  op_delete_pod(op);
  finish(op, FR_SB_UNAVAILABLE, rc == 0 ? "the sandbox went away during its agent's /init" : message, NULL, 0);
}

/* The sandbox <pod> is exec-ready: done, once its agent (if it runs one)
 * has the sandbox's token and env. */
static void succeed(struct create_op *op, const struct fr_pod *pod, int warm) {
  int port = agent__port_of(op->sb->cl, pod);

  if (port == 0 && op->secrets == NULL) {
    finish(op, FR_SB_OK, NULL, pod, warm);
    return;
  }
  if (port == 0) {
    /* Secrets reach a sandbox only through its agent (pick() never claims
     * a pod without one; this is a pod that lost its label). */
    op_delete_pod(op);
    finish(op, FR_SB_FAILED, "the sandbox has no agent to hand its secrets to", NULL, 0);
    return;
  }
  set_state(op, CS_INIT);
  op->init_warm = warm;
  if (agent__init(op->sb->cl, pod, port, op->env, op->secrets, op->request_id, on_inited, op, &op->init) != 0) {
    op_delete_pod(op);
    finish(op, FR_SB_FAILED, "cannot send the agent's /init", NULL, 0);
  }
}

static void now_rfc3339(char out[21], int64_t plus_s) {
  fr_time_rfc3339(fr_wall_ms() / 1000 + plus_s, out);
}

/* The user's labels, and the batch's (commit.c), added to <labels>. */
static json_t *user_labels_plus(struct create_op *op, json_t *labels) {
  const char *k;
  json_t *v;

  json_object_foreach(op->labels, k, v) json_object_set(labels, k, v);
  /* Selected by its egress policy's NetworkPolicy (written before). */
  if (op->egress_hash[0] != '\0')
    json_object_set_new(labels, FR_LABEL_EGRESS, json_string(op->egress_hash));
  if (op->batch != NULL)
    json_object_set_new(labels, FR_LABEL_BATCH, json_string(op->batch));
  return labels;
}

static int name_cmp(const void *x, const void *y) {
  return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* The names of the create's secrets, sorted and comma-separated (keys of
 * <secrets>; never a value), or NULL when there are none or on ENOMEM. */
static char *secret_names(json_t *secrets) {
  size_t n = json_object_size(secrets), i = 0;
  const char **names;
  struct fr_buf b;
  const char *k;
  json_t *v;
  char *out;
  int rc = 0;

  if (n == 0 || (names = malloc(n * sizeof(*names))) == NULL)
    return NULL;
  json_object_foreach(secrets, k, v) names[i++] = k;
  qsort(names, n, sizeof(*names), name_cmp);
  fr_buf_init(&b);
  for (i = 0; i < n; i++)
    rc |= (i > 0 ? fr_buf_putc(&b, ',') : 0) | fr_buf_puts(&b, names[i]);
  free(names);
  out = rc == 0 ? fr_buf_detach(&b, NULL) : NULL;
  fr_buf_free(&b);
  return out;
}

/* <agent>: the pod runs an agent, which gets the env by /init instead. */
static json_t *sandbox_annotations(struct create_op *op, int warm, int agent) {
  char created[21], expires[21];
  json_t *ann = json_object();
  /* With an agent the env goes to /init only: not into an annotation. */
  char *env = !agent && op->env && json_object_size(op->env)
                  ? json_dumps(op->env, JSON_COMPACT | JSON_SORT_KEYS)
                  : NULL;
  /* The secrets' names only, for GET: their values reach /init alone. */
  char *names = secret_names(op->secrets);
  /* With an agent, the env's names: that commands need the agent (exec.c). */
  char *env_names = agent ? secret_names(op->env) : NULL;

  if ((op->secrets != NULL && json_object_size(op->secrets) && names == NULL) ||
      (agent && op->env != NULL && json_object_size(op->env) && env_names == NULL)) {
    /* Out of memory: no pod or claim without the names (the caller fails). */
    json_decref(ann);
    free(env);
    free(names);
    free(env_names);
    return NULL;
  }

  now_rfc3339(created, 0);
  now_rfc3339(expires, op->lifetime_s);
  json_object_set_new(ann, FR_ANN_CREATED, json_string(created));
  json_object_set_new(ann, FR_ANN_EXPIRES, json_string(expires));
  json_object_set_new(ann, FR_ANN_WARM, json_string(warm ? "true" : "false"));
  if (op->spilled)
    json_object_set_new(ann, FR_ANN_SPILLED, json_string("true"));
  if (env != NULL)
    json_object_set_new(ann, FR_ANN_ENV, json_string(env));
  if (names != NULL)
    json_object_set_new(ann, FR_ANN_SECRETS, json_string(names));
  if (env_names != NULL)
    json_object_set_new(ann, FR_ANN_ENV_NAMES, json_string(env_names));
  free(env);
  free(names);
  free(env_names);
  return ann;
}

/* ---------------------------------------------------------------------- */
/* cold create                                                             */

static int pod_is_ready(const struct fr_pod *p) {
  return p->phase == FR_POD_RUNNING && p->ready;
}

static void on_ready_timeout(uv_timer_t *t) {
  struct create_op *op = t->data;
  char msg[200];

  snprintf(msg, sizeof(msg), "pod %s was not exec-ready within %" PRIu64 " ms", op->pod, op->ready_timeout_ms);
  op_delete_pod(op);
  finish(op, FR_SB_TIMEOUT, msg, NULL, 0);
}

/* The pod is in the cache: decide from its state. */
static void check_pod(struct create_op *op, const struct fr_pod *pod) {
  if (pod_is_ready(pod)) {
    succeed(op, pod, 0);
  } else if (pod->unschedulable != NULL) {
    char msg[600];
    snprintf(msg, sizeof(msg), "unschedulable: %s", pod->unschedulable);
    op_delete_pod(op);
    finish(op, FR_SB_NO_ROOM, msg, NULL, 0);
  } else if (fr_pod_finished(pod)) {
    op_delete_pod(op);
    finish(op, FR_SB_FAILED, "the pod stopped before it was ready", NULL, 0);
  }
}

static void due_note(struct sandboxes *sb, const struct fr_pod *p, const struct fr_pod *old);

void sandbox__on_pod(struct sandboxes *sb, enum fr_informer_event ev, const struct fr_pod *p,
                    const struct fr_pod *old) {
  struct create_op *op, *nx;

  if (ev == FR_INF_DELETED)
    strmap_del(&sb->deleting, p->name);
  else
    due_note(sb, p, old);
  for (op = sb->creates; op != NULL; op = nx) {
    nx = op->next;
    if (op->state != CS_WAITING || strcmp(op->pod, p->name) != 0)
      continue;
    if (ev == FR_INF_DELETED)
      finish(op, FR_SB_FAILED, "the pod was deleted before it was ready", NULL, 0);
    else
      check_pod(op, p);
  }
}

static void start_cold(struct create_op *op);

/* A 429 (the API server answered: alive, and busy) or a request that was
 * never sent (it waited out the router's own queue for this cluster): the
 * cluster is busy, not down. */
static void note_busy(struct create_op *op, const struct fr_kube_response *r) {
  op->busy = r->status == 429 || (r->status == 0 && r->attempts == 0);
  if (r->status == 429)
    cluster__report(op->sb->cl, 1);
}

static void on_created(const struct fr_kube_response *r, void *arg) {
  struct create_op *op = arg;
  char msg[600];
  const struct fr_pod *cached;

  op->call = NULL;
  if (r->status == 201) {
    set_state(op, CS_WAITING);
    op->timer = malloc(sizeof(*op->timer));
    if (op->timer != NULL) {
      uv_timer_init(op->sb->cl->loop, op->timer);
      op->timer->data = op;
      uv_timer_start(op->timer, on_ready_timeout, op->ready_timeout_ms, 0);
    }
    /* The watch may have delivered the pod before this response. */
    cached = cluster__pod(op->sb->cl, op->pod);
    if (cached != NULL)
      check_pod(op, cached);
    return;
  }
  cluster__status_message(r->body, r->body_len, msg, sizeof(msg));
  if (r->status == 409 && op->resume) {
    finish(op, FR_SB_FAILED, "the sandbox's pod still exists: it is still stopping, retry shortly", NULL, 0);
  } else if (r->status == 409) {
    /* Our random name collided: pick another (a claim made for that name
     * goes first). */
    if (op->ws_made) {
      workspace__claim_delete(op->sb->ws, op->pod, op->request_id, NULL, NULL);
      op->ws_made = 0;
    }
    start_cold(op);
  } else if (r->status == 403) {
    finish(op, FR_SB_NO_ROOM, msg, NULL, 0);
  } else if (r->status == 0 || r->status >= 500 || r->status == 429) {
    note_busy(op, r);
    finish(op, FR_SB_UNAVAILABLE, r->status ? msg : (r->error ? r->error : "no response"), NULL, 0);
  } else {
    finish(op, FR_SB_FAILED, msg, NULL, 0);
  }
}

/* Where the init container puts the agent, and the sandbox finds it. */
#define AGENT_DIR PODOPTS_AGENT_DIR
#define AGENT_VOLUME "fr-agent"

/* <init_sha256>: with an agent, the SHA-256 of the token its /init must
 * carry (agent__init_sha256), the one env var of the container. */
static json_t *container_json(const struct cluster *cl, const char *image, int64_t cpu_m, int64_t mem_b,
                              json_t *env, const char *init_sha256) {
  const struct fr_adapter_agent *ag = cl->cc.agent;
  char cpu[32], mem[32], listen[32];
  json_t *res, *c, *envs = json_array();
  const char *k;
  json_t *v;

  fr_quantity_format_milli(cpu_m, cpu, sizeof(cpu));
  fr_quantity_format_bytes(mem_b, mem, sizeof(mem));
  res = json_pack("{s:{s:s,s:s},s:{s:s,s:s}}", "requests", "cpu", cpu, "memory", mem, "limits", "cpu",
                  cpu, "memory", mem);
  if (ag != NULL) {
    /* The agent is PID 1 (it reaps orphans) and keeps the container up;
     * work arrives through it. Ready once it answers /health. */
    snprintf(listen, sizeof(listen), "0.0.0.0:%d", ag->port);
    c = json_pack("{s:s,s:s,s:[s,s,s,s,s,s],s:o,s:[{s:s,s:s,s:b}],s:[{s:s,s:i,s:s}],"
                  "s:{s:{s:s,s:i},s:i,s:i}}",
                  "name", "sandbox", "image", image, "command", AGENT_DIR "/fedrouter-agent", "--listen",
                  listen, "--", "sleep", "infinity", "resources", res, "volumeMounts", "name", AGENT_VOLUME,
                  "mountPath", AGENT_DIR, "readOnly", 1, "ports", "name", "agent", "containerPort", ag->port,
                  "protocol", "TCP", "readinessProbe", "httpGet", "path", "/health", "port", ag->port,
                  "periodSeconds", 1, "failureThreshold", 3);
    /* The env reaches the agent by /init, never the pod spec; what the
     * spec has is what lets the agent tell the router's /init from one
     * sent by code in another sandbox. */
    env = NULL;
    if (c != NULL && init_sha256 != NULL)
      json_object_set_new(c, "env", json_pack("[{s:s,s:s}]", "name", "FR_AGENT_INIT_SHA256", "value", init_sha256));
  } else {
    /* The sandbox container just stays alive; work arrives through exec. */
    c = json_pack("{s:s,s:s,s:[s,s],s:o}", "name", "sandbox", "image", image, "command", "sleep",
                  "infinity", "resources", res);
  }
  json_object_foreach(env, k, v) json_array_append_new(envs, json_pack("{s:s,s:O}", "name", k, "value", v));
  if (json_array_size(envs) && c != NULL)
    json_object_set_new(c, "env", envs);
  else
    json_decref(envs);
  return c;
}

/* Adds to pod spec <spec> (and <labels>) what an agent needs: the init
 * container that copies the static binary from the agent image into an
 * emptyDir, the volume, the label saying which port it serves and the one
 * saying what its init token was made for (<init_kind>, AGENT_INIT_*). */
static void add_agent(const struct cluster *cl, json_t *spec, json_t *labels, const char *init_kind) {
  const struct fr_adapter_agent *ag = cl->cc.agent;
  char port[16];

  if (ag == NULL || spec == NULL)
    return;
  snprintf(port, sizeof(port), "%d", ag->port);
  json_object_set_new(labels, FR_LABEL_AGENT, json_string(port));
  json_object_set_new(labels, FR_LABEL_AGENT_INIT, json_string(init_kind));
  json_object_set_new(spec, "initContainers",
                      json_pack("[{s:s,s:s,s:[s,s,s],s:[{s:s,s:s}],s:{s:{s:s,s:s},s:{s:s,s:s}}}]", "name",
                                "fr-agent-install", "image", ag->image, "command", "cp",
                                "/usr/local/bin/fedrouter-agent", AGENT_DIR "/fedrouter-agent",
                                "volumeMounts", "name", AGENT_VOLUME, "mountPath", AGENT_DIR, "resources",
                                "requests", "cpu", "10m", "memory", "16Mi", "limits", "cpu", "100m",
                                "memory", "32Mi"));
  json_object_set_new(spec, "volumes", json_pack("[{s:s,s:{s:s}}]", "name", AGENT_VOLUME, "emptyDir",
                                                 "sizeLimit", "64Mi"));
}

/* With sandbox.run_as_user, what Pod Security "restricted" asks of pod
 * spec <spec>: a non-root uid for the pod, and for every container and
 * init container no privilege escalation and no capabilities. */
static int add_security(const struct cluster *cl, json_t *spec) {
  static const char *const lists[] = {"containers", "initContainers"};
  json_int_t uid = (json_int_t)cl->cc.run_as_user;
  json_t *c;
  size_t i, k;

  if (uid <= 0 || spec == NULL)
    return 0;
  if (json_object_set_new(spec, "securityContext",
                          json_pack("{s:b,s:I,s:I,s:I,s:{s:s}}", "runAsNonRoot", 1, "runAsUser", uid, "runAsGroup",
                                    uid, "fsGroup", uid, "seccompProfile", "type", "RuntimeDefault")) != 0)
    return -1;
  for (k = 0; k < 2; k++)
    json_array_foreach(json_object_get(spec, lists[k]), i, c) {
      if (json_object_set_new(c, "securityContext",
                              json_pack("{s:b,s:{s:[s]}}", "allowPrivilegeEscalation", 0, "capabilities", "drop",
                                        "ALL")) != 0)
        return -1;
    }
  return 0;
}

static const char *gpu_resource(const struct cluster *cl) {
  return cl->cc.gpu_resource != NULL ? cl->cc.gpu_resource : "nvidia.com/gpu";
}

static void create_pod(struct create_op *op);

/* What a resume needs to make the sandbox again, kept on its workspace
 * claim (annotation fedrouter.io/sandbox-spec): never a secret's value. */
static json_t *resume_spec(struct create_op *op) {
  char *names = secret_names(op->secrets);
  json_t *j = json_pack("{s:s,s:I,s:I,s:I,s:I,s:b}", "image", op->image, "cpu_m", (json_int_t)op->cpu_m, "mem_b",
                        (json_int_t)op->mem_b, "lifetime_s", (json_int_t)op->lifetime_s, "deadline_s",
                        (json_int_t)op->deadline_s, "agent", op->sb->cl->cc.agent != NULL);

  if (j == NULL)
    goto out;
  if (op->pool != NULL)
    json_object_set_new(j, "pool", json_string(op->pool));
  if (op->env != NULL && json_object_size(op->env) > 0)
    json_object_set(j, "env", op->env);
  if (op->labels != NULL && json_object_size(op->labels) > 0)
    json_object_set(j, "labels", op->labels);
  if (names != NULL)
    json_object_set_new(j, "secrets", json_string(names));
  if (fr_podopts_json(op->opts) != NULL)
    json_object_set(j, "options", fr_podopts_json(op->opts));
out:
  free(names);
  return j;
}

static void on_ws_created(const struct fr_kube_response *r, void *arg) {
  struct create_op *op = arg;
  char msg[600];

  op->call = NULL;
  if (r->status == 201) {
    op->ws_made = 1;
    create_pod(op);
    return;
  }
  cluster__status_message(r->body, r->body_len, msg, sizeof(msg));
  if (r->status == 409) {
    start_cold(op); /* our random name collided: another */
  } else if (r->status == 403) {
    finish(op, FR_SB_NO_ROOM, msg, NULL, 0); /* a quota on claims or storage */
  } else if (r->status == 0 || r->status >= 500 || r->status == 429) {
    finish(op, FR_SB_UNAVAILABLE, r->status ? msg : (r->error ? r->error : "no response"), NULL, 0);
  } else {
    finish(op, FR_SB_FAILED, msg, NULL, 0);
  }
}

static void start_cold(struct create_op *op) {
  char suffix[11], path[300], *body = NULL;
  json_t *spec;
  int rc;

  if (op->image == NULL) {
    finish(op, FR_SB_NO_ROOM, "no ready warm pod and the pool's image is unknown here", NULL, 0);
    return;
  }
  if (op->secrets != NULL && op->sb->cl->cc.agent == NULL) {
    finish(op, FR_SB_FAILED, "secrets need the sandbox agent, which this router does not run", NULL, 0);
    return;
  }
  set_state(op, CS_CREATING);
  if (!op->resume) {
    fr_random_name_suffix(suffix, 10);
    snprintf(op->pod, sizeof(op->pod), "sb-%s", suffix);
  }
  if (op->resume || podopts_field(op->opts, "workspace") == NULL) {
    create_pod(op);
    return;
  }
  /* The workspace claim first: the pod mounts it. */
  spec = resume_spec(op);
  rc = spec ? workspace__claim_request(op->sb->ws, op->pod, op->opts, op->tenant, op->name, op->pool, op->batch,
                                       spec, &body, path, sizeof(path))
            : -ENOMEM;
  json_decref(spec);
  if (rc == 0)
    rc = fr_kube_request(op->sb->cl->client, "POST", path, "application/json", body, strlen(body), 0,
                         op->request_id, on_ws_created, op, &op->call);
  free(body);
  if (rc != 0)
    finish(op, FR_SB_FAILED, "cannot send the workspace's claim", NULL, 0);
}

static void create_pod(struct create_op *op) {
  json_t *pod, *labels;
  char *body;
  char path[300], init_sha256[65] = "";
  int rc;

  labels = json_pack("{s:s,s:s,s:s,s:s}", FR_LABEL_SANDBOX, "true", FR_LABEL_STATE, "claimed",
                     FR_LABEL_TENANT, op->tenant, FR_LABEL_NAME, op->name);
  if (podopts_field(op->opts, "workspace") != NULL)
    json_object_set_new(labels, FR_LABEL_WORKSPACE, json_string("true"));
  if (op->pool != NULL)
    json_object_set_new(labels, FR_LABEL_POOL, json_string(op->pool));
  user_labels_plus(op, labels);
  if (op->sb->cl->cc.agent != NULL && agent__init_sha256(op->sb->cl, AGENT_INIT_POD, op->pod, init_sha256) != 0) {
    json_decref(labels);
    finish(op, FR_SB_FAILED, "cannot make the agent's init token", NULL, 0);
    return;
  }
  pod = json_pack("{s:s,s:s,s:{s:s,s:o,s:o},s:{s:[o],s:s,s:I,s:i,s:b}}", "apiVersion", "v1", "kind", "Pod",
                  "metadata", "name", op->pod, "labels", labels, "annotations", sandbox_annotations(op, 0, op->sb->cl->cc.agent != NULL),
                  "spec", "containers", container_json(op->sb->cl, op->image, op->cpu_m, op->mem_b, op->env, init_sha256),
                  "restartPolicy", "Never", "activeDeadlineSeconds", (json_int_t)op->deadline_s,
                  "terminationGracePeriodSeconds", 1, "automountServiceAccountToken", 0);
  add_agent(op->sb->cl, json_object_get(pod, "spec"), json_object_get(json_object_get(pod, "metadata"), "labels"),
            AGENT_INIT_POD);
  body = pod && podopts_apply(op->opts, gpu_resource(op->sb->cl), json_object_get(pod, "spec")) == 0 &&
                 workspace__pod_apply(op->opts, op->ws_claim[0] ? op->ws_claim : NULL, op->pod,
                                      json_object_get(pod, "spec")) == 0 &&
                 add_security(op->sb->cl, json_object_get(pod, "spec")) == 0
             ? json_dumps(pod, JSON_COMPACT)
             : NULL;
  json_decref(pod);
  rc = upstream_object_path(path, sizeof(path), "/api/v1", op->sb->cl->ns, "pods", NULL, NULL);
  rc = body && rc == 0 ? fr_kube_request(op->sb->cl->client, "POST", path, "application/json", body, strlen(body), 0,
                              op->request_id, on_created, op, &op->call)
            : -ENOMEM;
  free(body);
  if (rc != 0)
    finish(op, FR_SB_FAILED, "cannot send the create", NULL, 0);
}

/* ---------------------------------------------------------------------- */
/* warm claim                                                              */

static void pick(struct create_op *op);

static void on_adopted(const struct fr_kube_response *r, void *arg) {
  struct create_op *op = arg;
  const struct fr_pod *p;
  json_t *obj;
  char msg[600];

  op->call = NULL;
  p = cluster__pod(op->sb->cl, op->pod);
  if (r->status == 200 && p != NULL) {
    if ((obj = json_loadb(r->body, r->body_len, 0, NULL)) != NULL) {
      fr_informer_observe(op->sb->cl->inf[CLUSTER_INF_PVCS], obj);
      json_decref(obj);
    }
    succeed(op, p, 1);
    return;
  }
  /* Its workspace would go with the pod: no sandbox for this create. The
   * pod goes (and its claim with it, still owned by it). */
  cluster__status_message(r->body, r->body_len, msg, sizeof(msg));
  op_delete_pod(op);
  finish(op, r->status == 0 || r->status >= 500 ? FR_SB_UNAVAILABLE : FR_SB_FAILED,
         r->status ? msg : "the workspace of the claimed pod could not be adopted", NULL, 1);
}

/* A pool pod claimed with a workspace: its generic ephemeral volume's
 * claim ("<pod>-fr-workspace", owned by the pod) becomes the sandbox's own:
 * the owner reference goes (so it outlives a pause), the workspace labels
 * and the resume spec come. */
static void adopt_workspace(struct create_op *op) {
  char name[160], path[300], *body = NULL;
  json_t *spec = resume_spec(op), *patch = NULL;
  char *text = spec ? json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  int rc = -ENOMEM;

  json_decref(spec);
  snprintf(name, sizeof(name), "%s" WORKSPACE_POOL_SUFFIX, op->pod);
  if (text != NULL)
    patch = json_pack("{s:{s:n,s:{s:s,s:s,s:s,s:s},s:{s:s}}}", "metadata", "ownerReferences", "labels",
                      FR_LABEL_WORKSPACE, op->pod, FR_LABEL_TENANT, op->tenant, FR_LABEL_NAME, op->name,
                      FR_LABEL_STATE, "running", "annotations", FR_ANN_SANDBOX_SPEC, text);
  if (patch != NULL && op->pool != NULL)
    json_object_set_new(json_object_get(json_object_get(patch, "metadata"), "labels"), FR_LABEL_POOL,
                        json_string(op->pool));
  free(text);
  body = patch ? json_dumps(patch, JSON_COMPACT) : NULL;
  json_decref(patch);
  if (body != NULL && (rc = upstream_object_path(path, sizeof(path), "/api/v1", op->sb->cl->ns,
                                                 "persistentvolumeclaims", NULL, name)) == 0)
    rc = fr_kube_request(op->sb->cl->client, "PATCH", path, "application/merge-patch+json", body, strlen(body),
                         FR_KUBE_IDEMPOTENT, op->request_id, on_adopted, op, &op->call);
  free(body);
  if (rc != 0) {
    op_delete_pod(op);
    finish(op, FR_SB_FAILED, "cannot send the workspace's adoption", NULL, 1);
  }
}

static void on_claimed(const struct fr_kube_response *r, void *arg) {
  struct create_op *op = arg;
  const struct fr_pod *p;
  json_t *pod;
  char msg[600];

  op->call = NULL;
  strmap_del(&op->sb->claiming, op->pod);
  if (r->status == 200) {
    pod = json_loadb(r->body, r->body_len, 0, NULL);
    /* The caller may exec into it at once: the cache must show it claimed
     * now, not when the watch catches up (it may be backing off). */
    fr_informer_observe(op->sb->cl->inf[CLUSTER_INF_PODS], pod);
    json_decref(pod);
    p = cluster__pod(op->sb->cl, op->pod);
    if (p != NULL && p->tenant != NULL && strcmp(p->tenant, op->tenant) == 0 && p->sbname != NULL &&
        strcmp(p->sbname, op->name) == 0 && podopts_field(op->opts, "workspace") != NULL)
      adopt_workspace(op);
    else if (p != NULL && p->tenant != NULL && strcmp(p->tenant, op->tenant) == 0 && p->sbname != NULL &&
             strcmp(p->sbname, op->name) == 0)
      succeed(op, p, 1);
    else
      finish(op, FR_SB_FAILED, "the claimed pod changed or went away at once", NULL, 1);
    return;
  }
  if (r->status == 409 || r->status == 404 || r->status == 422) {
    /* Someone else claimed it (or it went away): the next one. 422: the
     * pod could not take the deadline (it changed under us). */
    /* The cache may still show that pod ready (the watch lags): the next
     * pick must not send the same stale claim again. */
    snprintf(op->conflicted[op->conflicts % MAX_CLAIM_CONFLICTS], sizeof(op->conflicted[0]), "%s", op->pod);
    op->conflicts++;
    if (op->conflicts >= MAX_CLAIM_CONFLICTS)
      start_cold(op);
    else
      pick(op);
    return;
  }
  cluster__status_message(r->body, r->body_len, msg, sizeof(msg));
  note_busy(op, r);
  finish(op, FR_SB_UNAVAILABLE, r->status ? msg : (r->error ? r->error : "no response"), NULL, 0);
}

static int64_t started_s_ago(const struct fr_pod *pod) {
  int64_t t;

  if (pod->start_s < 0)
    return 0;
  t = fr_wall_ms() / 1000 - pod->start_s;
  return t > 0 ? t : 0;
}
static void claim(struct create_op *op, const struct fr_pod *pod) {
  json_t *patch, *labels;
  const char *rv = pod->rv;
  char path[300], *body;
  int rc;

  set_state(op, CS_CLAIMING);
  strmap_put(&op->sb->claiming, op->pod, NULL);
  /* Leaving the pool's selector (state=warm) makes the ReplicaSet release
   * the pod and start a replacement. The deadline counts from the pod's
   * start, so add the time it already waited. */
  labels = json_pack("{s:s,s:s,s:s}", FR_LABEL_STATE, "claimed", FR_LABEL_TENANT, op->tenant,
                     FR_LABEL_NAME, op->name);
  if (labels != NULL && podopts_field(op->opts, "workspace") != NULL)
    json_object_set_new(labels, FR_LABEL_WORKSPACE, json_string("true"));
  user_labels_plus(op, labels);
  patch = json_pack("{s:{s:s,s:o,s:o},s:{s:I}}", "metadata", "resourceVersion", rv ? rv : "", "labels",
                    labels, "annotations", sandbox_annotations(op, 1, agent__port_of(op->sb->cl, pod) > 0), "spec", "activeDeadlineSeconds",
                    (json_int_t)(started_s_ago(pod) + op->deadline_s));
  body = patch ? json_dumps(patch, JSON_COMPACT) : NULL;
  json_decref(patch);
  rc = upstream_object_path(path, sizeof(path), "/api/v1", op->sb->cl->ns, "pods", NULL, op->pod);
  /* A precondition makes the patch safe to retry. */
  rc = body && rc == 0 ? fr_kube_request(op->sb->cl->client, "PATCH", path, "application/merge-patch+json", body,
                              strlen(body), FR_KUBE_IDEMPOTENT, op->request_id, on_claimed, op, &op->call)
            : -ENOMEM;
  free(body);
  if (rc != 0) {
    strmap_del(&op->sb->claiming, op->pod);
    finish(op, FR_SB_FAILED, "cannot send the claim", NULL, 0);
  }
}

static void pick(struct create_op *op) {
  /* The pool's ready, unclaimed pods, kept from the cache's events. */
  const struct strmap *ready = cluster__warm_ready(op->sb->cl, op->pool);
  const struct fr_adapter_pool_view *pv = op->pool != NULL ? cluster__pool(op->sb->cl, op->pool) : NULL;
  const struct strmap_entry *e;
  const struct fr_pod *pod;
  size_t cur = 0;

  set_state(op, CS_PICK);
  /* A pool's pods carry its options (volumes mounted, node chosen): they
   * serve only a create that asks for the same. */
  if (pv != NULL && !fr_podopts_equal(pv->opts, op->opts))
    ready = NULL;
  while (ready != NULL && (e = strmap_next(ready, &cur)) != NULL) {
    const char *name = e->key;
    int lost = 0, k;
    for (k = 0; k < op->conflicts && k < MAX_CLAIM_CONFLICTS; k++)
      lost |= strcmp(op->conflicted[k], name) == 0;
    if (lost || strmap_get(&op->sb->claiming, name) != NULL || strlen(name) >= sizeof(op->pod) ||
        (pod = cluster__pod(op->sb->cl, name)) == NULL || sandbox__leaving(op->sb, pod))
      continue;
    /* A pool pod from before the agent was enabled cannot take secrets. */
    if (op->secrets != NULL && agent__port_of(op->sb->cl, pod) == 0)
      continue;
    /* One from before /init needed a token made by a router: its agent
     * takes no /init (or, an old agent, anyone's). */
    if (agent__port_of(op->sb->cl, pod) > 0 && fr_pod_label(pod, FR_LABEL_AGENT_INIT) == NULL)
      continue;
    snprintf(op->pod, sizeof(op->pod), "%s", name);
    claim(op, pod);
    return;
  }
  start_cold(op);
}

/* The NetworkPolicy of the create's egress policy is written (or not). */
static void on_egress(int status, const char *message, void *arg) {
  struct create_op *op = arg;

  if (status >= 200 && status < 300)
    pick(op);
  else
    finish(op, status == 0 || status == 429 || status >= 500 ? FR_SB_UNAVAILABLE : FR_SB_FAILED,
           message != NULL && *message ? message : "cannot write the sandbox's egress NetworkPolicy", NULL, 0);
}

static void on_start(uv_timer_t *t) {
  struct create_op *op = t->data;
  int rc;

  /* The timer is reused for the readiness timeout. */
  uv_close((uv_handle_t *)op->timer, timer_closed);
  op->timer = NULL;
  if (op->sb->stopping) {
    finish(op, FR_SB_UNAVAILABLE, "the router is shutting down", NULL, 0);
    return;
  }
  if (op->resume || op->egress == NULL) {
    if (op->resume)
      start_cold(op);
    else
      pick(op);
    return;
  }
  /* The policy's object exists before any pod carries its label, and no
   * router deletes it while this create runs (egress.c). */
  set_state(op, CS_EGRESS);
  rc = egress__ensure(op->sb->eg, op->egress, &op->egress_wait, on_egress, op);
  if (rc == 1)
    pick(op);
  else if (rc < 0)
    finish(op, FR_SB_FAILED, "cannot write the sandbox's egress NetworkPolicy", NULL, 0);
}

static char *dup_or_null(const char *s) {
  return s ? strdup(s) : NULL;
}

int sandbox__create(struct sandboxes *sb, const struct fr_sandbox_spec *spec, fr_sandbox_cb cb, void *arg) {
  const struct fr_adapter_pool_view *pv;
  struct create_op *op;

  if (sb->stopping)
    return -ESHUTDOWN;
  if (spec->resume_pod != NULL && strlen(spec->resume_pod) >= sizeof(op->pod))
    return -EINVAL;
  op = calloc(1, sizeof(*op));
  if (op == NULL)
    return -ENOMEM;
  op->sb = sb;
  op->tenant = dup_or_null(spec->tenant);
  op->name = dup_or_null(spec->name);
  op->pool = dup_or_null(spec->pool);
  op->image = dup_or_null(spec->image);
  op->request_id = dup_or_null(spec->request_id);
  op->batch = dup_or_null(spec->batch);
  op->cpu_m = spec->cpu_m;
  op->mem_b = spec->mem_b;
  op->lifetime_s = spec->lifetime_s;
  op->spilled = spec->spilled;
  op->deadline_s = spec->deadline_s > spec->lifetime_s ? spec->deadline_s : spec->lifetime_s;
  op->ready_timeout_ms = spec->ready_timeout_ms ? spec->ready_timeout_ms : DEFAULT_READY_TIMEOUT_MS;
  op->secrets = spec->secrets && json_object_size(spec->secrets) ? json_incref(spec->secrets) : NULL;
  op->env = spec->env ? json_incref(spec->env) : NULL;
  op->labels = spec->labels ? json_incref(spec->labels) : NULL;
  op->opts = fr_podopts_ref(spec->opts);
  if (!fr_egress_is_default(spec->egress) && (op->egress = malloc(sizeof(*op->egress))) != NULL) {
    *op->egress = *spec->egress;
    fr_egress_hash(op->egress, op->egress_hash);
    egress__hold(sb->eg, op->egress_hash, 1);
  }
  op->cb = cb;
  op->arg = arg;
  if (spec->resume_pod != NULL) {
    op->resume = 1;
    snprintf(op->pod, sizeof(op->pod), "%s", spec->resume_pod);
    snprintf(op->ws_claim, sizeof(op->ws_claim), "%s", spec->resume_claim ? spec->resume_claim : "");
  }
  op->timer = malloc(sizeof(*op->timer));
  op->next = sb->creates;
  if (sb->creates)
    sb->creates->prev = op;
  sb->creates = op;
  cluster__inflight_add(sb->cl, 1);
  if (op->tenant == NULL || op->name == NULL || op->timer == NULL ||
      (spec->pool && op->pool == NULL) || (spec->image && op->image == NULL) ||
      (spec->batch && op->batch == NULL) || (!fr_egress_is_default(spec->egress) && op->egress == NULL)) {
    free(op->timer);
    op->timer = NULL;
    op_free(op);
    return -ENOMEM;
  }
  pv = op->pool != NULL && !op->resume ? cluster__pool(sb->cl, op->pool) : NULL;
  if (pv != NULL && fr_podopts_equal(pv->opts, op->opts)) {
    op->warm_held = 1;
    cluster__reserve_warm(sb->cl, op->pool, 1);
  }
  /* Start from the next loop turn: the callback never runs inside this call. */
  uv_timer_init(sb->cl->loop, op->timer);
  op->timer->data = op;
  uv_timer_start(op->timer, on_start, 0, 0);
  return 0;
}

/* ---------------------------------------------------------------------- */
/* delete, pools                                                           */

/* A delete's outcome, before its caller hears it. */
struct delete_call {
  struct sandboxes *sb;
  void (*cb)(int status, const char *message, void *arg);
  void *arg;
  char pod[64];
};

static void on_deleted(int status, const char *message, void *arg) {
  struct delete_call *dc = arg;
  struct sandboxes *sb = dc->sb;

  /* A delete the cluster did not take (unreachable, 5xx, 429): the pod
   * still runs, so it must not stay hidden. It shows again (as
   * "terminating", fr_adapter_pod_delete_pending) and the reaper retries
   * the delete every sweep until the cluster takes it or the pod is gone. */
  if (!(status >= 200 && status < 300) && status != 404 && !sb->stopping) {
    strmap_del(&sb->deleting, dc->pod);
    if (cluster__pod(sb->cl, dc->pod) != NULL)
      strmap_put(&sb->abandoned, dc->pod, NULL);
  }
  if (dc->cb != NULL)
    dc->cb(status, message, dc->arg);
  free(dc);
}

/* DELETE of <pod>; <hide>: leave lists at once (a caller's delete; the
 * reaper's retries do not flip a sandbox in and out of sight). */
static int delete_pod(struct sandboxes *sb, const char *pod, const char *request_id, int hide,
                      void (*cb)(int status, const char *message, void *arg), void *arg) {
  struct delete_call *dc;
  char path[300];
  int rc;

  if (strlen(pod) >= sizeof(dc->pod))
    return -EINVAL;
  dc = malloc(sizeof(*dc));
  if (dc == NULL)
    return -ENOMEM;
  dc->sb = sb;
  dc->cb = cb;
  dc->arg = arg;
  snprintf(dc->pod, sizeof(dc->pod), "%s", pod);
  rc = upstream_object_path(path, sizeof(path), "/api/v1", sb->cl->ns, "pods", NULL, pod);
  if (rc == 0)
    rc = cluster__request(sb->cl, "DELETE", path, NULL, NULL, 1, NULL, request_id, on_deleted, dc);
  if (rc != 0) {
    free(dc);
    return rc;
  }
  /* Hide it from lists at once; the mark goes when the watch reports the
   * pod gone, or when the delete fails (on_deleted). */
  if (hide && cluster__pod(sb->cl, pod) != NULL)
    strmap_put(&sb->deleting, pod, NULL);
  return 0;
}

int sandbox__delete(struct sandboxes *sb, const char *pod, const char *request_id,
                    void (*cb)(int status, const char *message, void *arg), void *arg) {
  const struct fr_pod *p = cluster__pod(sb->cl, pod);
  int ws = workspace__known(sb->ws, pod) || (p != NULL && fr_pod_label(p, FR_LABEL_WORKSPACE) != NULL);

  /* A sandbox's workspace goes with it; a paused one is only its claim. */
  if (p == NULL && ws)
    return workspace__claim_delete(sb->ws, pod, request_id, cb, arg);
  if (ws)
    workspace__claim_delete(sb->ws, pod, request_id, NULL, NULL);
  return delete_pod(sb, pod, request_id, 1, cb, arg);
}

/* ---------------------------------------------------------------------- */
/* pause and resume                                                        */

struct pause_op {
  struct sandboxes *sb;
  char pod[64];
  char *request_id;
  void (*cb)(int status, const char *message, void *arg);
  void *arg;
};

static void pause_done(int status, const char *message, void *arg) {
  struct pause_op *p = arg;

  if (p->cb != NULL)
    p->cb(status == 404 ? 200 : status, message, p->arg); /* the pod already gone: paused all the same */
  free(p->request_id);
  free(p);
}

static void on_marked(int status, const char *message, void *arg) {
  struct pause_op *p = arg;

  if (!(status >= 200 && status < 300) || cluster__pod(p->sb->cl, p->pod) == NULL) {
    if (p->cb != NULL)
      p->cb(status >= 200 && status < 300 ? 200 : status, message, p->arg);
    free(p->request_id);
    free(p);
    return;
  }
  /* Marked paused first: a router that dies now leaves a paused sandbox
   * whose pod still runs until the next pause or its expiry, never a
   * claim the sweep would take for an orphan. */
  if (delete_pod(p->sb, p->pod, p->request_id, 1, pause_done, p) != 0)
    pause_done(503, "cannot send the pod's delete", p);
}

int sandbox__pause(struct sandboxes *sb, const char *pod, int64_t expires_s, const char *request_id,
                   void (*cb)(int status, const char *message, void *arg), void *arg) {
  struct pause_op *p;
  int rc;

  if (!workspace__known(sb->ws, pod))
    return -ENOENT;
  if (strlen(pod) >= sizeof(p->pod))
    return -EINVAL;
  p = calloc(1, sizeof(*p));
  if (p == NULL)
    return -ENOMEM;
  p->sb = sb;
  snprintf(p->pod, sizeof(p->pod), "%s", pod);
  p->request_id = request_id ? strdup(request_id) : NULL;
  p->cb = cb;
  p->arg = arg;
  rc = workspace__mark_paused(sb->ws, pod, expires_s, request_id, on_marked, p);
  if (rc != 0) {
    free(p->request_id);
    free(p);
  }
  return rc;
}

struct resume_op {
  struct sandboxes *sb;
  fr_sandbox_cb cb;
  void *arg;
  struct fr_podopts *opts;
};

static void on_resumed(const struct fr_sandbox_result *res, void *arg) {
  struct resume_op *r = arg;

  /* Running again: the claim says so (the sweep, lists and the next pause
   * read it). */
  if (res->err == FR_SB_OK && res->pod != NULL)
    workspace__mark_running(r->sb->ws, res->pod->name);
  r->cb(res, r->arg);
  fr_podopts_unref(r->opts);
  free(r);
}

int sandbox__resume(struct sandboxes *sb, const char *pod, json_t *secrets, int64_t lifetime_s,
                    const char *request_id, fr_sandbox_cb cb, void *arg) {
  struct fr_workspace w;
  struct fr_sandbox_spec spec;
  struct resume_op *r;
  const char *field;
  char msg[200];
  json_t *s;
  int rc;

  if (workspace__get(sb->ws, pod, &w) != 0)
    return -ENOENT;
  if (cluster__pod(sb->cl, pod) != NULL) {
    fr_workspace_clear(&w);
    return -EBUSY;
  }
  s = w.spec;
  r = calloc(1, sizeof(*r));
  if (r == NULL) {
    fr_workspace_clear(&w);
    return -ENOMEM;
  }
  r->sb = sb;
  r->cb = cb;
  r->arg = arg;
  if (s == NULL || json_string_value(json_object_get(s, "image")) == NULL ||
      !json_is_object(json_object_get(s, "options")) ||
      fr_podopts_parse(json_object_get(s, "options"), &r->opts, &field, msg, sizeof(msg)) != 0 ||
      podopts_field(r->opts, "workspace") == NULL) {
    fr_podopts_unref(r->opts);
    free(r);
    fr_workspace_clear(&w);
    return -EINVAL;
  }
  memset(&spec, 0, sizeof(spec));
  spec.tenant = w.tenant;
  spec.name = w.name ? w.name : "sandbox";
  spec.pool = json_string_value(json_object_get(s, "pool"));
  spec.image = json_string_value(json_object_get(s, "image"));
  spec.cpu_m = json_integer_value(json_object_get(s, "cpu_m"));
  spec.mem_b = json_integer_value(json_object_get(s, "mem_b"));
  spec.opts = r->opts;
  spec.env = json_object_get(s, "env");
  spec.labels = json_object_get(s, "labels");
  spec.secrets = secrets;
  spec.lifetime_s = lifetime_s > 0 ? lifetime_s : json_integer_value(json_object_get(s, "lifetime_s"));
  spec.deadline_s = json_integer_value(json_object_get(s, "deadline_s"));
  if (spec.deadline_s < spec.lifetime_s)
    spec.deadline_s = spec.lifetime_s;
  spec.request_id = request_id;
  spec.resume_pod = pod;
  spec.resume_claim = w.claim;
  rc = spec.cpu_m > 0 && spec.mem_b > 0 && spec.lifetime_s > 0 ? sandbox__create(sb, &spec, on_resumed, r) : -EINVAL;
  fr_workspace_clear(&w);
  if (rc != 0) {
    fr_podopts_unref(r->opts);
    free(r);
  }
  return rc;
}

int sandbox__set_expiry(struct sandboxes *sb, const char *pod, int64_t expires_s, const char *request_id,
                        void (*cb)(int status, const char *message, void *arg), void *arg) {
  const struct fr_pod *p = cluster__pod(sb->cl, pod);
  char when[21], path[300];
  json_t *patch;
  int rc;

  if (p == NULL)
    return -ENOENT;
  fr_time_rfc3339(expires_s, when);
  patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations", FR_ANN_EXPIRES, when);
  if (patch == NULL)
    return -ENOMEM;
  /* The deadline counts from the pod's start and only ever goes down; a
   * pod not started yet keeps the one it was created with. */
  if (p->start_s >= 0 && expires_s > p->start_s && (p->expires_s < 0 || expires_s < p->expires_s))
    json_object_set_new(patch, "spec", json_pack("{s:I}", "activeDeadlineSeconds", (json_int_t)(expires_s - p->start_s)));
  rc = upstream_object_path(path, sizeof(path), "/api/v1", sb->cl->ns, "pods", NULL, pod);
  if (rc == 0)
    rc = cluster__request(sb->cl, "PATCH", path, "application/merge-patch+json", patch, 1, sb->cl->inf[CLUSTER_INF_PODS], request_id,
                        cb, arg);
  json_decref(patch);
  return rc;
}

int sandbox__leaving(const struct sandboxes *sb, const struct fr_pod *pod) {
  return pod->terminating || strmap_get(&sb->deleting, pod->name) != NULL;
}

int sandbox__evicted(const struct sandboxes *sb, const struct fr_pod *pod) {
  return pod->terminating && pod->disruption != NULL && strmap_get(&sb->deleting, pod->name) == NULL;
}

int sandbox__delete_pending(const struct sandboxes *sb, const struct fr_pod *pod) {
  return strmap_get(&sb->abandoned, pod->name) != NULL;
}

int sandbox__pool_create(struct sandboxes *sb, const struct fr_pool_spec *spec,
                         void (*cb)(int status, const char *message, void *arg), void *arg) {
  char name[128], path[300], init_sha256[65] = "";
  json_t *rs, *tmpl_labels, *shape;
  char *spec_ann;
  int rc;

  snprintf(name, sizeof(name), "fr-pool-%s", spec->name);
  if (!fr_dns_subdomain(name) ||
      upstream_object_path(path, sizeof(path), "/apis/apps/v1", sb->cl->ns, "replicasets", NULL, NULL) != 0 ||
      (sb->cl->cc.agent != NULL && agent__init_sha256(sb->cl, AGENT_INIT_POOL, spec->name, init_sha256) != 0))
    return -EINVAL;
  /* The pool's shape, read back by every router's pool cache (cluster.c
   * pool_update): written by jansson so any image reference is escaped. */
  shape = json_pack("{s:s,s:I,s:I}", "image", spec->image, "cpu_millis", (json_int_t)spec->cpu_m,
                    "memory_bytes", (json_int_t)spec->mem_b);
  if (shape != NULL && spec->opts != NULL)
    json_object_set(shape, "options", fr_podopts_json(spec->opts));
  spec_ann = shape != NULL ? json_dumps(shape, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(shape);
  if (spec_ann == NULL)
    return -ENOMEM;
  tmpl_labels = json_pack("{s:s,s:s,s:s}", FR_LABEL_SANDBOX, "true", FR_LABEL_POOL, spec->name,
                          FR_LABEL_STATE, "warm");
  /* The owner goes on the ReplicaSet only: on a pod, fedrouter.io/tenant
   * means "claimed by", which a warm pod is not. */
  rs = json_pack("{s:s,s:s,s:{s:s,s:{s:s,s:s*},s:{s:s}},s:{s:I,s:{s:{s:s,s:s}},s:{s:{s:o},s:{s:[o],s:s,s:i,s:b}}}}",
                 "apiVersion", "apps/v1", "kind", "ReplicaSet", "metadata", "name", name, "labels",
                 FR_LABEL_POOL, spec->name, FR_LABEL_OWNER, spec->owner, "annotations", FR_ANN_POOL_SPEC, spec_ann, "spec",
                 "replicas", (json_int_t)spec->replicas, "selector", "matchLabels", FR_LABEL_POOL,
                 spec->name, FR_LABEL_STATE, "warm", "template", "metadata", "labels", tmpl_labels,
                 "spec", "containers", container_json(sb->cl, spec->image, spec->cpu_m, spec->mem_b, NULL, init_sha256),
                 "restartPolicy", "Always", "terminationGracePeriodSeconds", 1,
                 "automountServiceAccountToken", 0);
  free(spec_ann);
  if (rs == NULL)
    return -ENOMEM;
  /* Pool pods get the agent too (labels on the template only: the
   * selector stays pool + state, so older pods without them still count),
   * all with the pool's init token. */
  add_agent(sb->cl, json_object_get(json_object_get(json_object_get(rs, "spec"), "template"), "spec"),
            json_object_get(json_object_get(json_object_get(json_object_get(rs, "spec"), "template"),
                                            "metadata"),
                            "labels"),
            AGENT_INIT_POOL);
  if (podopts_apply(spec->opts, gpu_resource(sb->cl),
                    json_object_get(json_object_get(json_object_get(rs, "spec"), "template"), "spec")) != 0 ||
      workspace__pool_apply(spec->opts, json_object_get(json_object_get(json_object_get(rs, "spec"), "template"),
                                                        "spec")) != 0 ||
      add_security(sb->cl, json_object_get(json_object_get(json_object_get(rs, "spec"), "template"), "spec")) != 0) {
    json_decref(rs);
    return -ENOMEM;
  }
  rc = cluster__request(sb->cl, "POST", path, "application/json", rs, 0, sb->cl->inf[CLUSTER_INF_POOLS], NULL, cb, arg);
  json_decref(rs);
  return rc;
}

int sandbox__pool_resize(struct sandboxes *sb, const char *pool, int64_t replicas,
                         void (*cb)(int status, const char *message, void *arg), void *arg) {
  char path[300];
  json_t *patch = json_pack("{s:{s:I}}", "spec", "replicas", (json_int_t)replicas);
  int rc;

  rc = upstream_object_path(path, sizeof(path), "/apis/apps/v1", sb->cl->ns, "replicasets", "fr-pool-", pool);
  if (rc == 0)
    rc = cluster__request(sb->cl, "PATCH", path, "application/merge-patch+json", patch, 1, sb->cl->inf[CLUSTER_INF_POOLS], NULL, cb, arg);
  json_decref(patch);
  return rc;
}

int sandbox__pool_delete(struct sandboxes *sb, const char *pool,
                         void (*cb)(int status, const char *message, void *arg), void *arg) {
  char path[300];
  json_t *opts = json_pack("{s:s}", "propagationPolicy", "Background");
  int rc;

  rc = upstream_object_path(path, sizeof(path), "/apis/apps/v1", sb->cl->ns, "replicasets", "fr-pool-", pool);
  if (rc == 0)
    rc = cluster__request(sb->cl, "DELETE", path, "application/json", opts, 1, NULL, NULL, cb, arg);
  json_decref(opts);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* reaper                                                                  */

static void on_reaped(int status, const char *message, void *arg) {
  (void)status;
  (void)message;
  (void)arg;
}

/* When a sandbox pod expires, in wall-clock seconds: 0 at once (it
 * finished: DeadlineExceeded, or its command exited), else its expiry
 * annotation; -1 for pods the reaper leaves alone (warm pool pods, pods
 * already terminating, no expiry). */
static int64_t expiry_at(const struct fr_pod *pod) {
  if (pod->state == NULL || strcmp(pod->state, "claimed") != 0 || pod->terminating)
    return -1;
  return fr_pod_finished(pod) ? 0 : pod->expires_s;
}

/* When a sandbox pod is due for reaping: it expires, or its batch was
 * never committed (commit.c); -1 when neither applies. */
static int64_t due_at(struct sandboxes *sb, const struct fr_pod *pod) {
  int64_t e = expiry_at(pod), c = commit__due_at(sb->cm, pod);

  return e < 0 || (c >= 0 && c < e) ? c : e;
}

struct reap_due {
  int64_t at;
  char *pod;
};

static void due_swap(struct reap_due *h, size_t i, size_t j) {
  struct reap_due t = h[i];

  h[i] = h[j];
  h[j] = t;
}

/* An entry's pod name: one per sandbox, made while the sandboxes are
 * created and all freed when they are terminated, so from pages of their
 * own, which then go back to the system; on malloc's heap they would leave
 * it in holes (the names a rebuild makes after a terminate land in those
 * holes and keep their pages resident). */
static char *name_dup(struct sandboxes *sb, const char *name) {
  size_t n = strlen(name) + 1;
  char *d = slab_alloc(&sb->due_names, n);

  if (d != NULL)
    memcpy(d, name, n);
  return d;
}

static void name_free(struct sandboxes *sb, char *name) {
  slab_free(&sb->due_names, name);
}

static void due_clear(struct sandboxes *sb) {
  while (sb->ndue > 0)
    name_free(sb, sb->due[--sb->ndue].pod);
}

/* Adds <pod> (taken: freed here when it cannot go in) due at <at>. */
static void due_insert(struct sandboxes *sb, char *pod, int64_t at) {
  size_t i;

  if (pod == NULL)
    return;
  if (sb->ndue == sb->due_cap) {
    size_t cap = sb->due_cap ? sb->due_cap * 2 : 256;
    struct reap_due *n = realloc(sb->due, cap * sizeof(*n));
    if (n == NULL) {
      name_free(sb, pod);
      return;
    }
    sb->due = n;
    sb->due_cap = cap;
  }
  sb->due[sb->ndue].pod = pod;
  sb->due[sb->ndue].at = at;
  for (i = sb->ndue++; i > 0 && sb->due[(i - 1) / 2].at > sb->due[i].at; i = (i - 1) / 2)
    due_swap(sb->due, i, (i - 1) / 2);
}

static void due_push(struct sandboxes *sb, const char *pod, int64_t at) {
  due_insert(sb, name_dup(sb, pod), at);
}

/* Entries of sandboxes terminated early stay until they come due; when
 * they outnumber the live sandboxes, the queue is rebuilt from the cache
 * (amortised O(1) per event, and memory bounded by the live set rather
 * than by lifetime x churn). */
static void due_rebuild(struct sandboxes *sb) {
  const struct fr_pod *p;
  size_t cur = 0;

  due_clear(sb);
  while ((p = cluster__pod_next(sb->cl, &cur)) != NULL)
    if (due_at(sb, p) >= 0)
      due_push(sb, p->name, due_at(sb, p));
}

/* A pod's entry goes in when its due time appears or changes; entries
 * are checked against the cache when they come up (stale ones are
 * dropped then), so nothing needs finding or removing early. */
static void due_note(struct sandboxes *sb, const struct fr_pod *pod, const struct fr_pod *old) {
  int64_t at = due_at(sb, pod);

  if (at < 0 || (old != NULL && due_at(sb, old) == at))
    return;
  if (sb->ndue >= 1024 && sb->ndue / 2 > (size_t)(cluster__sandboxes(sb->cl) > 0 ? cluster__sandboxes(sb->cl) : 0))
    due_rebuild(sb); /* includes <pod>: it is in the cache already */
  else
    due_push(sb, pod->name, at);
}

/* From the reaper's tick: once entries of sandboxes already gone (a mass
 * terminate) outnumber the live ones, rebuild the queue from the cache
 * (due_note does it on the next pod event, but after a mass terminate
 * there may be none for an hour), and give back an array much larger than
 * the queue: 16 bytes plus a name per entry, 1M entries after terminating
 * a million sandboxes. */
static void due_compact(struct sandboxes *sb) {
  int64_t live = cluster__sandboxes(sb->cl);
  size_t want;

  if (sb->ndue >= 1024 && sb->ndue / 2 > (size_t)(live > 0 ? live : 0))
    due_rebuild(sb);
  want = sb->ndue * 2 > 256 ? sb->ndue * 2 : 256;
  if (sb->due_cap > 4 * want) {
    struct reap_due *n = realloc(sb->due, want * sizeof(*n));
    if (n != NULL) {
      sb->due = n;
      sb->due_cap = want;
    }
  }
}

/* Removes the earliest entry; the caller owns its pod name. */
static struct reap_due due_pop(struct sandboxes *sb) {
  struct reap_due top = sb->due[0];
  size_t i = 0;

  sb->due[0] = sb->due[--sb->ndue];
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < sb->ndue && sb->due[l].at < sb->due[m].at)
      m = l;
    if (r < sb->ndue && sb->due[r].at < sb->due[m].at)
      m = r;
    if (m == i)
      break;
    due_swap(sb->due, i, m);
    i = m;
  }
  return top;
}

/* Sweeps of the reaper's pod-name sets (strmap_sweep): nonzero drops the
 * mark. */
static int abandoned_done(struct strmap_entry *e, void *arg) {
  struct sandboxes *sb = arg;
  const struct fr_pod *pod = cluster__pod(sb->cl, e->key);

  if (pod == NULL)
    return cluster__cache_current(sb->cl, CLUSTER_INF_PODS);
  if (!sandbox__leaving(sb, pod)) {
    FR_INFO("reaper", "%s: deleting %s (a create given up while the cluster was down, or a delete it "
            "did not take)", sb->cl->cc.name, e->key);
    delete_pod(sb, e->key, NULL, 0, on_reaped, NULL);
  }
  return 0;
}

static int pod_gone(struct strmap_entry *e, void *arg) {
  struct sandboxes *sb = arg;

  return cluster__pod(sb->cl, e->key) == NULL;
}

/* A sandbox that pauses rather than ends at its expiry. */
static int pause_on_timeout(const struct fr_pod *pod) {
  const char *v = fr_pod_label(pod, FR_LABEL_ON_TIMEOUT);

  return v != NULL && strcmp(v, "pause") == 0 && fr_pod_label(pod, FR_LABEL_WORKSPACE) != NULL;
}

static void on_reap(uv_timer_t *t) {
  struct sandboxes *sb = t->data;
  const struct fr_pod *pod;
  int64_t now = fr_wall_ms() / 1000;

  /* Pods of creates given up while the cluster was down: delete them once
   * it answers again (the mark goes when the delete is accepted or the
   * pod is known gone). */
  if (cluster__reachable(sb->cl))
    strmap_sweep(&sb->abandoned, abandoned_done, sb);
  /* Forget marks of pods that are gone. */
  strmap_sweep(&sb->reaping, pod_gone, sb);
  strmap_sweep(&sb->deleting, pod_gone, sb);
  due_compact(sb);
  /* activeDeadlineSeconds already stopped expired sandboxes in the
   * cluster; the expiry annotation covers a cluster that did not. Only the
   * sandboxes due now are looked at, never the whole cache. */
  while (sb->ndue > 0 && sb->due[0].at <= now) {
    struct reap_due d = due_pop(sb);
    int64_t at;
    int uncommitted;

    pod = cluster__pod(sb->cl, d.pod);
    at = pod != NULL ? due_at(sb, pod) : -1;
    if (at < 0 || strmap_get(&sb->reaping, d.pod) != NULL) {
      name_free(sb, d.pod);
      continue;
    }
    /* Not yet (a batch made progress since), or not known yet (a marker
     * this router has not seen may exist): looked at again then. The
     * entry moves, so the queue does not grow. */
    uncommitted = expiry_at(pod) < 0 || expiry_at(pod) > now;
    if (at > now || (uncommitted && !commit__markers_known(sb->cm))) {
      due_insert(sb, d.pod, at > now ? at : now + REAP_EVERY_MS / 1000);
      continue;
    }
    if (!uncommitted && pause_on_timeout(pod)) {
      /* on_timeout "pause": the workspace stays, the pod goes. */
      const char *ttl_text = fr_pod_label(pod, FR_LABEL_PAUSED_TTL);
      int64_t ttl = 0;
      if (ttl_text == NULL || fr_parse_int64(ttl_text, 1, INT64_C(315360000), &ttl) != 0)
        ttl = 7 * 86400;
      FR_INFO("reaper", "%s: pausing %s (%s)", sb->cl->cc.name, d.pod, at > 0 ? "expired" : "finished");
      if (sandbox__pause(sb, d.pod, now + ttl, NULL, on_reaped, NULL) == 0)
        strmap_put(&sb->reaping, d.pod, NULL);
      name_free(sb, d.pod);
      continue;
    }
    FR_INFO("reaper", "%s: deleting %s (%s)", sb->cl->cc.name, d.pod,
            uncommitted ? "its batch was never committed" : at > 0 ? "expired" : "finished");
    if (sandbox__delete(sb, d.pod, NULL, on_reaped, NULL) == 0)
      strmap_put(&sb->reaping, d.pod, NULL);
    name_free(sb, d.pod);
  }
  commit__sweep(sb->cm);
  workspace__sweep(sb->ws);
  egress__sweep(sb->eg);
}

struct sandboxes *sandbox__new(struct cluster *cl, struct commits *cm, struct workspaces *ws,
                              struct egresses *eg) {
  struct sandboxes *sb = calloc(1, sizeof(*sb));

  /* The strmap sets start empty as calloc left them. */
  if (sb == NULL || (sb->reaper = malloc(sizeof(*sb->reaper))) == NULL) {
    free(sb);
    return NULL;
  }
  sb->cl = cl;
  sb->cm = cm;
  sb->ws = ws;
  sb->eg = eg;
  sb->reaper->data = NULL;
  return sb;
}

void sandbox__start(struct sandboxes *sb) {
  uv_timer_init(sb->cl->loop, sb->reaper);
  sb->reaper->data = sb;
  uv_timer_start(sb->reaper, on_reap, REAP_EVERY_MS, REAP_EVERY_MS);
}

void sandbox__cluster_down(struct sandboxes *sb) {
  struct create_op *op, *nx;

  for (op = sb->creates; op != NULL; op = nx) {
    nx = op->next;
    /* Waiting for the pod, or its POST still out (the cluster may have
     * stored it and never answered): give up now instead of waiting out
     * the request timeout, and delete the pod when the cluster answers
     * again. Claims fail by themselves, quickly, and leave no pod. */
    if (op->state != CS_WAITING && op->state != CS_CREATING)
      continue;
    strmap_put(&sb->abandoned, op->pod, NULL);
    finish(op, FR_SB_UNAVAILABLE, "the cluster became unreachable while the sandbox was starting", NULL, 0);
  }
}

void sandbox__stop(struct sandboxes *sb) {
  sb->stopping = 1;
  while (sb->creates != NULL)
    finish(sb->creates, FR_SB_UNAVAILABLE, "the router is shutting down", NULL, 0);
  due_clear(sb);
  free(sb->due);
  sb->due = NULL;
  sb->due_cap = 0;
  if (sb->reaper != NULL) {
    if (sb->reaper->data != NULL)
      uv_close((uv_handle_t *)sb->reaper, timer_closed);
    else
      free(sb->reaper);
    sb->reaper = NULL;
  }
}

void sandbox__due_stats(const struct sandboxes *sb, size_t *entries, size_t *name_bytes) {
  *entries = sb->ndue;
  *name_bytes = sb->due_names.npages * SLAB_PAGE;
}

void sandbox__free(struct sandboxes *sb) {
  if (sb == NULL)
    return;
  FR_ASSERT(sb->creates == NULL && sb->ndue == 0);
  strmap_close(&sb->claiming);
  strmap_close(&sb->reaping);
  strmap_close(&sb->deleting);
  strmap_close(&sb->abandoned);
  free(sb->due);
  slab_close(&sb->due_names);
  free(sb->reaper); /* NULL once sandbox__stop() closed it */
  free(sb);
}
