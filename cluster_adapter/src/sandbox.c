/* sandbox.c - sandboxes and warm pools in one cluster: claim, cold create,
 * wait for exec-readiness, delete, pool ReplicaSets, and the reaper.
 *
 * A create is a small state machine (set_state() logs transitions):
 *
 *   (EGRESS: a restricted egress policy's NetworkPolicy is written first,
 *    egress.c; then PICK, or done on an error)
 *   PICK --ready warm pod--> CLAIMING --200--> done (warm)
 *     |                          |409/404: next pod (3 conflicts: COLD)
 *     +--none ready-------> CREATING --201--> WAITING --Ready--> done (cold)
 *                                |403/Unschedulable: NO_ROOM   |timeout: TIMEOUT
 *
 * Waiting uses the pod informer (no polling): every pod event is matched
 * against the creates in flight.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapter_internal.h"
#include "fr/buf.h"
#include "fr/egress.h"
#include "fr/log.h"
#include "fr/quantity.h"
#include "fr/urlsafe.h"
#include "fr/util.h"
#include "podopts.h"
#include "upstream.h"

#define MAX_CLAIM_CONFLICTS 3
#define DEFAULT_READY_TIMEOUT_MS 120000
/* The reaper deletes expired or finished sandboxes; every router replica
 * runs it (deletes are idempotent). */
#define REAP_EVERY_MS 2000

enum cstate { CS_EGRESS, CS_PICK, CS_CLAIMING, CS_CREATING, CS_WAITING, CS_INIT, CS_DONE };
static const char *const cstate_names[] = {"egress", "pick", "claiming", "creating", "waiting", "init", "done"};

struct create_op {
  struct create_op *prev, *next;
  struct fr_adapter *a;
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
  struct egress_wait egress_wait; /* CS_EGRESS: waiting for its NetworkPolicy */
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
  struct agent_init *init;  /* CS_INIT: the agent's /init in flight */
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
  fr_adapter_reserve_warm(op->a, op->pool, -1);
}

static void set_state(struct create_op *op, enum cstate s) {
  FR_DEBUG("sandbox", "%s: %s %s -> %s", op->a->cc.name, op->name, cstate_names[op->state], cstate_names[s]);
  op->state = s;
  if (s != CS_EGRESS && s != CS_PICK && s != CS_CLAIMING)
    warm_release(op);
}

static int delete_pod(struct fr_adapter *a, const char *pod, const char *request_id, int hide,
                      void (*cb)(int status, const char *message, void *arg), void *arg);

/* The pod of a create that is given up: only the pod (a workspace claim
 * this create made goes in finish(); a resumed sandbox keeps its own). */
static void op_delete_pod(struct create_op *op) {
  delete_pod(op->a, op->pod, op->request_id, 1, NULL, NULL);
}

static void timer_closed(uv_handle_t *h) {
  free(h);
}

static void op_free(struct create_op *op) {
  struct fr_adapter *a = op->a;

  if (op->prev)
    op->prev->next = op->next;
  else if (a->creates == op)
    a->creates = op->next;
  if (op->next)
    op->next->prev = op->prev;
  a->inflight--;
  warm_release(op);
  egress_cancel(&op->egress_wait);
  if (op->egress_hash[0] != '\0')
    egress_hold(a, op->egress_hash, -1);
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
  agent_init_cancel(op->init);
  op->init = NULL;
  /* Whether the cluster answered at all feeds its circuit breaker; a busy
   * one (429, or a request that waited out the router's own queue for it)
   * is slow, not down: the batch spills, the breaker stays closed. */
  if (err == FR_SB_OK)
    fr_adapter_report(op->a, 1);
  else if (err == FR_SB_UNAVAILABLE && !op->a->stopping && !op->busy)
    fr_adapter_report(op->a, 0);
  /* A create that made a workspace and did not get its sandbox leaves
   * nothing (its pod, if any, was deleted on the way here). A resume
   * keeps the workspace: the sandbox stays paused. */
  if (err != FR_SB_OK && op->ws_made && !op->resume)
    workspace_claim_delete(op->a, op->pod, op->request_id, NULL, NULL);
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
  p = fr_adapter_pod(op->a, op->pod);
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
  int port = agent_port_of(op->a, pod);

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
  if (agent_init(op->a, pod, port, op->env, op->secrets, op->request_id, on_inited, op, &op->init) != 0) {
    op_delete_pod(op);
    finish(op, FR_SB_FAILED, "cannot send the agent's /init", NULL, 0);
  }
}

static void now_rfc3339(char out[21], int64_t plus_s) {
  fr_time_rfc3339(fr_wall_ms() / 1000 + plus_s, out);
}

/* Kubernetes Status message of an error body, or a fallback. */
static void status_message(const char *body, size_t len, char *out, size_t cap) {
  json_t *j = json_loadb(body, len, 0, NULL);
  const char *m = json_string_value(json_object_get(j, "message"));

  snprintf(out, cap, "%s", m ? m : (len ? body : "no response"));
  json_decref(j);
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

static void due_note(struct fr_adapter *a, const struct fr_pod *p, const struct fr_pod *old);

void sandbox_on_pod(struct fr_adapter *a, enum fr_informer_event ev, const struct fr_pod *p,
                    const struct fr_pod *old) {
  struct create_op *op, *nx;

  commit_on_pod(a, ev, p, old);
  egress_on_pod(a, ev, p, old);
  if (ev == FR_INF_DELETED)
    strmap_del(&a->deleting, p->name);
  else
    due_note(a, p, old);
  for (op = a->creates; op != NULL; op = nx) {
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
    fr_adapter_report(op->a, 1);
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
      uv_timer_init(op->a->loop, op->timer);
      op->timer->data = op;
      uv_timer_start(op->timer, on_ready_timeout, op->ready_timeout_ms, 0);
    }
    /* The watch may have delivered the pod before this response. */
    cached = fr_adapter_pod(op->a, op->pod);
    if (cached != NULL)
      check_pod(op, cached);
    return;
  }
  status_message(r->body, r->body_len, msg, sizeof(msg));
  if (r->status == 409 && op->resume) {
    finish(op, FR_SB_FAILED, "the sandbox's pod still exists: it is still stopping, retry shortly", NULL, 0);
  } else if (r->status == 409) {
    /* Our random name collided: pick another (a claim made for that name
     * goes first). */
    if (op->ws_made) {
      workspace_claim_delete(op->a, op->pod, op->request_id, NULL, NULL);
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
 * carry (agent_init_sha256), the one env var of the container. */
static json_t *container_json(const struct fr_adapter *a, const char *image, int64_t cpu_m, int64_t mem_b,
                              json_t *env, const char *init_sha256) {
  const struct fr_adapter_agent *ag = a->cc.agent;
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
static void add_agent(const struct fr_adapter *a, json_t *spec, json_t *labels, const char *init_kind) {
  const struct fr_adapter_agent *ag = a->cc.agent;
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
static int add_security(const struct fr_adapter *a, json_t *spec) {
  static const char *const lists[] = {"containers", "initContainers"};
  json_int_t uid = (json_int_t)a->cc.run_as_user;
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

static const char *gpu_resource(const struct fr_adapter *a) {
  return a->cc.gpu_resource != NULL ? a->cc.gpu_resource : "nvidia.com/gpu";
}

static void create_pod(struct create_op *op);

/* What a resume needs to make the sandbox again, kept on its workspace
 * claim (annotation fedrouter.io/sandbox-spec): never a secret's value. */
static json_t *resume_spec(struct create_op *op) {
  char *names = secret_names(op->secrets);
  json_t *j = json_pack("{s:s,s:I,s:I,s:I,s:I,s:b}", "image", op->image, "cpu_m", (json_int_t)op->cpu_m, "mem_b",
                        (json_int_t)op->mem_b, "lifetime_s", (json_int_t)op->lifetime_s, "deadline_s",
                        (json_int_t)op->deadline_s, "agent", op->a->cc.agent != NULL);

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
  status_message(r->body, r->body_len, msg, sizeof(msg));
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
  if (op->secrets != NULL && op->a->cc.agent == NULL) {
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
  rc = spec ? workspace_claim_request(op->a, op->pod, op->opts, op->tenant, op->name, op->pool, op->batch, spec,
                                      &body, path, sizeof(path))
            : -ENOMEM;
  json_decref(spec);
  if (rc == 0)
    rc = fr_kube_request(op->a->client, "POST", path, "application/json", body, strlen(body), 0, op->request_id,
                         on_ws_created, op, &op->call);
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
  if (op->a->cc.agent != NULL && agent_init_sha256(op->a, AGENT_INIT_POD, op->pod, init_sha256) != 0) {
    json_decref(labels);
    finish(op, FR_SB_FAILED, "cannot make the agent's init token", NULL, 0);
    return;
  }
  pod = json_pack("{s:s,s:s,s:{s:s,s:o,s:o},s:{s:[o],s:s,s:I,s:i,s:b}}", "apiVersion", "v1", "kind", "Pod",
                  "metadata", "name", op->pod, "labels", labels, "annotations", sandbox_annotations(op, 0, op->a->cc.agent != NULL),
                  "spec", "containers", container_json(op->a, op->image, op->cpu_m, op->mem_b, op->env, init_sha256),
                  "restartPolicy", "Never", "activeDeadlineSeconds", (json_int_t)op->deadline_s,
                  "terminationGracePeriodSeconds", 1, "automountServiceAccountToken", 0);
  add_agent(op->a, json_object_get(pod, "spec"), json_object_get(json_object_get(pod, "metadata"), "labels"),
            AGENT_INIT_POD);
  body = pod && podopts_apply(op->opts, gpu_resource(op->a), json_object_get(pod, "spec")) == 0 &&
                 workspace_pod_apply(op->opts, op->ws_claim[0] ? op->ws_claim : NULL, op->pod,
                                     json_object_get(pod, "spec")) == 0 &&
                 add_security(op->a, json_object_get(pod, "spec")) == 0
             ? json_dumps(pod, JSON_COMPACT)
             : NULL;
  json_decref(pod);
  rc = upstream_object_path(path, sizeof(path), "/api/v1", op->a->ns, "pods", NULL, NULL);
  rc = body && rc == 0 ? fr_kube_request(op->a->client, "POST", path, "application/json", body, strlen(body), 0,
                              op->request_id, on_created, op, &op->call)
            : -ENOMEM;
  free(body);
  if (rc != 0)
    finish(op, FR_SB_FAILED, "cannot send the create", NULL, 0);
}

/* ---------------------------------------------------------------------- */
/* warm claim                                                              */

static void pick(struct create_op *op);

static json_t *resume_spec(struct create_op *op);

static void on_adopted(const struct fr_kube_response *r, void *arg) {
  struct create_op *op = arg;
  const struct fr_pod *p;
  json_t *obj;
  char msg[600];

  op->call = NULL;
  p = fr_adapter_pod(op->a, op->pod);
  if (r->status == 200 && p != NULL) {
    if ((obj = json_loadb(r->body, r->body_len, 0, NULL)) != NULL) {
      fr_informer_observe(op->a->inf[INF_PVCS], obj);
      json_decref(obj);
    }
    succeed(op, p, 1);
    return;
  }
  /* Its workspace would go with the pod: no sandbox for this create. The
   * pod goes (and its claim with it, still owned by it). */
  status_message(r->body, r->body_len, msg, sizeof(msg));
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
  if (body != NULL && (rc = upstream_object_path(path, sizeof(path), "/api/v1", op->a->ns, "persistentvolumeclaims",
                                                 NULL, name)) == 0)
    rc = fr_kube_request(op->a->client, "PATCH", path, "application/merge-patch+json", body, strlen(body),
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
  strmap_del(&op->a->claiming, op->pod);
  if (r->status == 200) {
    pod = json_loadb(r->body, r->body_len, 0, NULL);
    /* The caller may exec into it at once: the cache must show it claimed
     * now, not when the watch catches up (it may be backing off). */
    fr_informer_observe(op->a->inf[INF_PODS], pod);
    json_decref(pod);
    p = fr_adapter_pod(op->a, op->pod);
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
  status_message(r->body, r->body_len, msg, sizeof(msg));
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
  strmap_put(&op->a->claiming, op->pod, NULL);
  /* Leaving the pool's selector (state=warm) makes the ReplicaSet release
   * the pod and start a replacement. The deadline counts from the pod's
   * start, so add the time it already waited. */
  labels = json_pack("{s:s,s:s,s:s}", FR_LABEL_STATE, "claimed", FR_LABEL_TENANT, op->tenant,
                     FR_LABEL_NAME, op->name);
  if (labels != NULL && podopts_field(op->opts, "workspace") != NULL)
    json_object_set_new(labels, FR_LABEL_WORKSPACE, json_string("true"));
  user_labels_plus(op, labels);
  patch = json_pack("{s:{s:s,s:o,s:o},s:{s:I}}", "metadata", "resourceVersion", rv ? rv : "", "labels",
                    labels, "annotations", sandbox_annotations(op, 1, agent_port_of(op->a, pod) > 0), "spec", "activeDeadlineSeconds",
                    (json_int_t)(started_s_ago(pod) + op->deadline_s));
  body = patch ? json_dumps(patch, JSON_COMPACT) : NULL;
  json_decref(patch);
  rc = upstream_object_path(path, sizeof(path), "/api/v1", op->a->ns, "pods", NULL, op->pod);
  /* A precondition makes the patch safe to retry. */
  rc = body && rc == 0 ? fr_kube_request(op->a->client, "PATCH", path, "application/merge-patch+json", body,
                              strlen(body), FR_KUBE_IDEMPOTENT, op->request_id, on_claimed, op, &op->call)
            : -ENOMEM;
  free(body);
  if (rc != 0) {
    strmap_del(&op->a->claiming, op->pod);
    finish(op, FR_SB_FAILED, "cannot send the claim", NULL, 0);
  }
}

static void pick(struct create_op *op) {
  /* The pool's ready, unclaimed pods, kept from the cache's events. */
  const struct strmap *ready = warm_ready_pods(op->a, op->pool);
  const struct fr_adapter_pool_view *pv = op->pool != NULL ? fr_adapter_pool(op->a, op->pool) : NULL;
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
    if (lost || strmap_get(&op->a->claiming, name) != NULL || strlen(name) >= sizeof(op->pod) ||
        (pod = fr_adapter_pod(op->a, name)) == NULL || fr_adapter_pod_leaving(op->a, pod))
      continue;
    /* A pool pod from before the agent was enabled cannot take secrets. */
    if (op->secrets != NULL && agent_port_of(op->a, pod) == 0)
      continue;
    /* One from before /init needed a token made by a router: its agent
     * takes no /init (or, an old agent, anyone's). */
    if (agent_port_of(op->a, pod) > 0 && fr_pod_label(pod, FR_LABEL_AGENT_INIT) == NULL)
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
  if (op->a->stopping) {
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
  rc = egress_ensure(op->a, op->egress, &op->egress_wait, on_egress, op);
  if (rc == 1)
    pick(op);
  else if (rc < 0)
    finish(op, FR_SB_FAILED, "cannot write the sandbox's egress NetworkPolicy", NULL, 0);
}

static char *dup_or_null(const char *s) {
  return s ? strdup(s) : NULL;
}

int fr_adapter_sandbox_create(struct fr_adapter *a, const struct fr_sandbox_spec *spec,
                              fr_sandbox_cb cb, void *arg) {
  const struct fr_adapter_pool_view *pv;
  struct create_op *op;

  if (a->stopping)
    return -ESHUTDOWN;
  op = calloc(1, sizeof(*op));
  if (op == NULL)
    return -ENOMEM;
  op->a = a;
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
    egress_hold(a, op->egress_hash, 1);
  }
  op->cb = cb;
  op->arg = arg;
  if (spec->resume_pod != NULL) {
    if (strlen(spec->resume_pod) >= sizeof(op->pod)) {
      fr_podopts_unref(op->opts);
      free(op->tenant);
      free(op->name);
      free(op->pool);
      free(op->image);
      free(op->request_id);
      free(op->batch);
      json_decref(op->env);
      json_decref(op->labels);
      fr_secret_values_free(op->secrets);
      free(op);
      return -EINVAL;
    }
    op->resume = 1;
    snprintf(op->pod, sizeof(op->pod), "%s", spec->resume_pod);
    snprintf(op->ws_claim, sizeof(op->ws_claim), "%s", spec->resume_claim ? spec->resume_claim : "");
  }
  op->timer = malloc(sizeof(*op->timer));
  op->next = a->creates;
  if (a->creates)
    a->creates->prev = op;
  a->creates = op;
  a->inflight++;
  if (op->tenant == NULL || op->name == NULL || op->timer == NULL ||
      (spec->pool && op->pool == NULL) || (spec->image && op->image == NULL) ||
      (spec->batch && op->batch == NULL) || (!fr_egress_is_default(spec->egress) && op->egress == NULL)) {
    free(op->timer);
    op->timer = NULL;
    op_free(op);
    return -ENOMEM;
  }
  pv = op->pool != NULL && !op->resume ? fr_adapter_pool(a, op->pool) : NULL;
  if (pv != NULL && fr_podopts_equal(pv->opts, op->opts)) {
    op->warm_held = 1;
    fr_adapter_reserve_warm(a, op->pool, 1);
  }
  /* Start from the next loop turn: the callback never runs inside this call. */
  uv_timer_init(a->loop, op->timer);
  op->timer->data = op;
  uv_timer_start(op->timer, on_start, 0, 0);
  return 0;
}

int64_t fr_adapter_inflight(const struct fr_adapter *a) {
  return a->inflight;
}

/* ---------------------------------------------------------------------- */
/* delete, pools                                                           */

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
      status_message(r->body, r->body_len, msg, sizeof(msg));
    sc->cb(r->status, msg, sc->arg);
  }
  free(sc);
}

static int simple_request(struct fr_adapter *a, const char *method, const char *path, const char *ctype,
                          json_t *body, int idempotent, struct fr_informer *observe, const char *request_id,
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
  rc = fr_kube_request(a->client, method, path, ctype, b, b ? strlen(b) : 0,
                       idempotent ? FR_KUBE_IDEMPOTENT : 0, request_id, on_simple, sc, NULL);
  free(b);
  if (rc != 0)
    free(sc);
  return rc;
}

/* A delete's outcome, before its caller hears it. */
struct delete_call {
  struct fr_adapter *a;
  void (*cb)(int status, const char *message, void *arg);
  void *arg;
  char pod[64];
};

static void on_deleted(int status, const char *message, void *arg) {
  struct delete_call *dc = arg;
  struct fr_adapter *a = dc->a;

  /* A delete the cluster did not take (unreachable, 5xx, 429): the pod
   * still runs, so it must not stay hidden. It shows again (as
   * "terminating", fr_adapter_pod_delete_pending) and the reaper retries
   * the delete every sweep until the cluster takes it or the pod is gone. */
  if (!(status >= 200 && status < 300) && status != 404 && !a->stopping) {
    strmap_del(&a->deleting, dc->pod);
    if (fr_adapter_pod(a, dc->pod) != NULL)
      strmap_put(&a->abandoned, dc->pod, NULL);
  }
  if (dc->cb != NULL)
    dc->cb(status, message, dc->arg);
  free(dc);
}

/* DELETE of <pod>; <hide>: leave lists at once (a caller's delete; the
 * reaper's retries do not flip a sandbox in and out of sight). */
static int delete_pod(struct fr_adapter *a, const char *pod, const char *request_id, int hide,
                      void (*cb)(int status, const char *message, void *arg), void *arg) {
  struct delete_call *dc;
  char path[300];
  int rc;

  if (strlen(pod) >= sizeof(dc->pod))
    return -EINVAL;
  dc = malloc(sizeof(*dc));
  if (dc == NULL)
    return -ENOMEM;
  dc->a = a;
  dc->cb = cb;
  dc->arg = arg;
  snprintf(dc->pod, sizeof(dc->pod), "%s", pod);
  rc = upstream_object_path(path, sizeof(path), "/api/v1", a->ns, "pods", NULL, pod);
  if (rc == 0)
    rc = simple_request(a, "DELETE", path, NULL, NULL, 1, NULL, request_id, on_deleted, dc);
  if (rc != 0) {
    free(dc);
    return rc;
  }
  /* Hide it from lists at once; the mark goes when the watch reports the
   * pod gone, or when the delete fails (on_deleted). */
  if (hide && fr_adapter_pod(a, pod) != NULL)
    strmap_put(&a->deleting, pod, NULL);
  return 0;
}

int fr_adapter_sandbox_delete(struct fr_adapter *a, const char *pod, const char *request_id,
                              void (*cb)(int status, const char *message, void *arg), void *arg) {
  const struct fr_pod *p = fr_adapter_pod(a, pod);
  int ws = workspace_claim_known(a, pod) || (p != NULL && fr_pod_label(p, FR_LABEL_WORKSPACE) != NULL);

  /* A sandbox's workspace goes with it; a paused one is only its claim. */
  if (p == NULL && ws)
    return workspace_claim_delete(a, pod, request_id, cb, arg);
  if (ws)
    workspace_claim_delete(a, pod, request_id, NULL, NULL);
  return delete_pod(a, pod, request_id, 1, cb, arg);
}

int adapter_simple_request(struct fr_adapter *a, const char *method, const char *path, const char *ctype,
                           json_t *body, int idempotent, struct fr_informer *observe, const char *request_id,
                           void (*cb)(int status, const char *message, void *arg), void *arg) {
  return simple_request(a, method, path, ctype, body, idempotent, observe, request_id, cb, arg);
}

int adapter_delete_pod(struct fr_adapter *a, const char *pod, const char *request_id,
                       void (*cb)(int status, const char *message, void *arg), void *arg) {
  return delete_pod(a, pod, request_id, 1, cb, arg);
}

int fr_adapter_sandbox_set_expiry(struct fr_adapter *a, const char *pod, int64_t expires_s, const char *request_id,
                                  void (*cb)(int status, const char *message, void *arg), void *arg) {
  const struct fr_pod *p = fr_adapter_pod(a, pod);
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
  rc = upstream_object_path(path, sizeof(path), "/api/v1", a->ns, "pods", NULL, pod);
  if (rc == 0)
    rc = simple_request(a, "PATCH", path, "application/merge-patch+json", patch, 1, a->inf[INF_PODS], request_id,
                        cb, arg);
  json_decref(patch);
  return rc;
}

int fr_adapter_pod_leaving(struct fr_adapter *a, const struct fr_pod *pod) {
  return pod->terminating || strmap_get(&a->deleting, pod->name) != NULL;
}

int fr_adapter_pod_evicted(struct fr_adapter *a, const struct fr_pod *pod) {
  return pod->terminating && pod->disruption != NULL && strmap_get(&a->deleting, pod->name) == NULL;
}

int fr_adapter_pod_delete_pending(struct fr_adapter *a, const struct fr_pod *pod) {
  return strmap_get(&a->abandoned, pod->name) != NULL;
}

int fr_adapter_pool_create(struct fr_adapter *a, const struct fr_pool_spec *spec,
                           void (*cb)(int status, const char *message, void *arg), void *arg) {
  char name[128], path[300], init_sha256[65] = "";
  json_t *rs, *tmpl_labels, *shape;
  char *spec_ann;
  int rc;

  snprintf(name, sizeof(name), "fr-pool-%s", spec->name);
  if (!fr_dns_subdomain(name) ||
      upstream_object_path(path, sizeof(path), "/apis/apps/v1", a->ns, "replicasets", NULL, NULL) != 0 ||
      (a->cc.agent != NULL && agent_init_sha256(a, AGENT_INIT_POOL, spec->name, init_sha256) != 0))
    return -EINVAL;
  /* The pool's shape, read back by every router's pool cache (adapter.c
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
                 "spec", "containers", container_json(a, spec->image, spec->cpu_m, spec->mem_b, NULL, init_sha256),
                 "restartPolicy", "Always", "terminationGracePeriodSeconds", 1,
                 "automountServiceAccountToken", 0);
  free(spec_ann);
  if (rs == NULL)
    return -ENOMEM;
  /* Pool pods get the agent too (labels on the template only: the
   * selector stays pool + state, so older pods without them still count),
   * all with the pool's init token. */
  add_agent(a, json_object_get(json_object_get(json_object_get(rs, "spec"), "template"), "spec"),
            json_object_get(json_object_get(json_object_get(json_object_get(rs, "spec"), "template"),
                                            "metadata"),
                            "labels"),
            AGENT_INIT_POOL);
  if (podopts_apply(spec->opts, gpu_resource(a),
                    json_object_get(json_object_get(json_object_get(rs, "spec"), "template"), "spec")) != 0 ||
      workspace_pool_apply(spec->opts, json_object_get(json_object_get(json_object_get(rs, "spec"), "template"),
                                                       "spec")) != 0 ||
      add_security(a, json_object_get(json_object_get(json_object_get(rs, "spec"), "template"), "spec")) != 0) {
    json_decref(rs);
    return -ENOMEM;
  }
  rc = simple_request(a, "POST", path, "application/json", rs, 0, a->inf[INF_POOLS], NULL, cb, arg);
  json_decref(rs);
  return rc;
}

int fr_adapter_pool_resize(struct fr_adapter *a, const char *pool, int64_t replicas,
                           void (*cb)(int status, const char *message, void *arg), void *arg) {
  char path[300];
  json_t *patch = json_pack("{s:{s:I}}", "spec", "replicas", (json_int_t)replicas);
  int rc;

  rc = upstream_object_path(path, sizeof(path), "/apis/apps/v1", a->ns, "replicasets", "fr-pool-", pool);
  if (rc == 0)
    rc = simple_request(a, "PATCH", path, "application/merge-patch+json", patch, 1, a->inf[INF_POOLS], NULL, cb, arg);
  json_decref(patch);
  return rc;
}

int fr_adapter_pool_delete(struct fr_adapter *a, const char *pool,
                           void (*cb)(int status, const char *message, void *arg), void *arg) {
  char path[300];
  json_t *opts = json_pack("{s:s}", "propagationPolicy", "Background");
  int rc;

  rc = upstream_object_path(path, sizeof(path), "/apis/apps/v1", a->ns, "replicasets", "fr-pool-", pool);
  if (rc == 0)
    rc = simple_request(a, "DELETE", path, "application/json", opts, 1, NULL, NULL, cb, arg);
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
static int64_t due_at(struct fr_adapter *a, const struct fr_pod *pod) {
  int64_t e = expiry_at(pod), c = commit_due_at(a, pod);

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

static void due_clear(struct fr_adapter *a) {
  while (a->ndue > 0)
    free(a->due[--a->ndue].pod);
}

/* Adds <pod> (taken: freed here when it cannot go in) due at <at>. */
static void due_insert(struct fr_adapter *a, char *pod, int64_t at) {
  size_t i;

  if (pod == NULL)
    return;
  if (a->ndue == a->due_cap) {
    size_t cap = a->due_cap ? a->due_cap * 2 : 256;
    struct reap_due *n = realloc(a->due, cap * sizeof(*n));
    if (n == NULL) {
      free(pod);
      return;
    }
    a->due = n;
    a->due_cap = cap;
  }
  a->due[a->ndue].pod = pod;
  a->due[a->ndue].at = at;
  for (i = a->ndue++; i > 0 && a->due[(i - 1) / 2].at > a->due[i].at; i = (i - 1) / 2)
    due_swap(a->due, i, (i - 1) / 2);
}

static void due_push(struct fr_adapter *a, const char *pod, int64_t at) {
  due_insert(a, strdup(pod), at);
}

/* Entries of sandboxes terminated early stay until they come due; when
 * they outnumber the live sandboxes, the queue is rebuilt from the cache
 * (amortised O(1) per event, and memory bounded by the live set rather
 * than by lifetime x churn). */
static void due_rebuild(struct fr_adapter *a) {
  const struct fr_pod *p;
  size_t cur = 0;

  due_clear(a);
  while ((p = fr_adapter_pod_next(a, &cur)) != NULL)
    if (due_at(a, p) >= 0)
      due_push(a, p->name, due_at(a, p));
}

/* A pod's entry goes in when its due time appears or changes; entries
 * are checked against the cache when they come up (stale ones are
 * dropped then), so nothing needs finding or removing early. */
static void due_note(struct fr_adapter *a, const struct fr_pod *pod, const struct fr_pod *old) {
  int64_t at = due_at(a, pod);

  if (at < 0 || (old != NULL && due_at(a, old) == at))
    return;
  if (a->ndue >= 1024 && a->ndue / 2 > (size_t)(a->n_sandboxes > 0 ? a->n_sandboxes : 0))
    due_rebuild(a); /* includes <pod>: it is in the cache already */
  else
    due_push(a, pod->name, at);
}

/* From the reaper's tick: once entries of sandboxes already gone (a mass
 * terminate) outnumber the live ones, rebuild the queue from the cache
 * (due_note does it on the next pod event, but after a mass terminate
 * there may be none for an hour), and give back an array much larger than
 * the queue: 16 bytes plus a name per entry, 1M entries after terminating
 * a million sandboxes. */
static void due_compact(struct fr_adapter *a) {
  size_t want;

  if (a->ndue >= 1024 && a->ndue / 2 > (size_t)(a->n_sandboxes > 0 ? a->n_sandboxes : 0))
    due_rebuild(a);
  want = a->ndue * 2 > 256 ? a->ndue * 2 : 256;
  if (a->due_cap > 4 * want) {
    struct reap_due *n = realloc(a->due, want * sizeof(*n));
    if (n != NULL) {
      a->due = n;
      a->due_cap = want;
    }
  }
}

/* Removes the earliest entry; the caller owns its pod name. */
static struct reap_due due_pop(struct fr_adapter *a) {
  struct reap_due top = a->due[0];
  size_t i = 0;

  a->due[0] = a->due[--a->ndue];
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < a->ndue && a->due[l].at < a->due[m].at)
      m = l;
    if (r < a->ndue && a->due[r].at < a->due[m].at)
      m = r;
    if (m == i)
      break;
    due_swap(a->due, i, m);
    i = m;
  }
  return top;
}

/* Sweeps of the reaper's pod-name sets (strmap_sweep): nonzero drops the
 * mark. */
static int abandoned_done(struct strmap_entry *e, void *arg) {
  struct fr_adapter *a = arg;
  const struct fr_pod *pod = fr_adapter_pod(a, e->key);

  if (pod == NULL)
    return fr_informer_synced(a->inf[INF_PODS]) && fr_informer_healthy(a->inf[INF_PODS]);
  if (!fr_adapter_pod_leaving(a, pod)) {
    FR_INFO("reaper", "%s: deleting %s (a create given up while the cluster was down, or a delete it "
            "did not take)", a->cc.name, e->key);
    delete_pod(a, e->key, NULL, 0, on_reaped, NULL);
  }
  return 0;
}

static int pod_gone(struct strmap_entry *e, void *arg) {
  return fr_adapter_pod(arg, e->key) == NULL;
}

/* A sandbox that pauses rather than ends at its expiry. */
static int pause_on_timeout(const struct fr_pod *pod) {
  const char *v = fr_pod_label(pod, FR_LABEL_ON_TIMEOUT);

  return v != NULL && strcmp(v, "pause") == 0 && fr_pod_label(pod, FR_LABEL_WORKSPACE) != NULL;
}

static void on_reap(uv_timer_t *t) {
  struct fr_adapter *a = t->data;
  const struct fr_pod *pod;
  int64_t now = fr_wall_ms() / 1000;

  /* Pods of creates given up while the cluster was down: delete them once
   * it answers again (the mark goes when the delete is accepted or the
   * pod is known gone). */
  if (a->breaker == BR_CLOSED)
    strmap_sweep(&a->abandoned, abandoned_done, a);
  /* Forget marks of pods that are gone. */
  strmap_sweep(&a->reaping, pod_gone, a);
  strmap_sweep(&a->deleting, pod_gone, a);
  due_compact(a);
  /* activeDeadlineSeconds already stopped expired sandboxes in the
   * cluster; the expiry annotation covers a cluster that did not. Only the
   * sandboxes due now are looked at, never the whole cache. */
  while (a->ndue > 0 && a->due[0].at <= now) {
    struct reap_due d = due_pop(a);
    int64_t at;
    int uncommitted;

    pod = fr_adapter_pod(a, d.pod);
    at = pod != NULL ? due_at(a, pod) : -1;
    if (at < 0 || strmap_get(&a->reaping, d.pod) != NULL) {
      free(d.pod);
      continue;
    }
    /* Not yet (a batch made progress since), or not known yet (a marker
     * this router has not seen may exist): looked at again then. The
     * entry moves, so the queue does not grow. */
    uncommitted = expiry_at(pod) < 0 || expiry_at(pod) > now;
    if (at > now || (uncommitted && !commit_markers_known(a))) {
      due_insert(a, d.pod, at > now ? at : now + REAP_EVERY_MS / 1000);
      continue;
    }
    if (!uncommitted && pause_on_timeout(pod)) {
      /* on_timeout "pause": the workspace stays, the pod goes. */
      const char *ttl_text = fr_pod_label(pod, FR_LABEL_PAUSED_TTL);
      int64_t ttl = 0;
      if (ttl_text == NULL || fr_parse_int64(ttl_text, 1, INT64_C(315360000), &ttl) != 0)
        ttl = 7 * 86400;
      FR_INFO("reaper", "%s: pausing %s (%s)", a->cc.name, d.pod, at > 0 ? "expired" : "finished");
      if (fr_adapter_sandbox_pause(a, d.pod, now + ttl, NULL, on_reaped, NULL) == 0)
        strmap_put(&a->reaping, d.pod, NULL);
      free(d.pod);
      continue;
    }
    FR_INFO("reaper", "%s: deleting %s (%s)", a->cc.name, d.pod,
            uncommitted ? "its batch was never committed" : at > 0 ? "expired" : "finished");
    if (fr_adapter_sandbox_delete(a, d.pod, NULL, on_reaped, NULL) == 0)
      strmap_put(&a->reaping, d.pod, NULL);
    free(d.pod);
  }
  commit_sweep(a);
  workspace_sweep(a);
  egress_sweep(a);
}

int sandbox_init(struct fr_adapter *a) {
  a->reaper = malloc(sizeof(*a->reaper));
  if (a->reaper == NULL)
    return -ENOMEM;
  a->reaper->data = NULL;
  return 0;
}

void sandbox_start(struct fr_adapter *a) {
  uv_timer_init(a->loop, a->reaper);
  a->reaper->data = a;
  uv_timer_start(a->reaper, on_reap, REAP_EVERY_MS, REAP_EVERY_MS);
}

void sandbox_cluster_down(struct fr_adapter *a) {
  struct create_op *op, *nx;

  for (op = a->creates; op != NULL; op = nx) {
    nx = op->next;
    /* Waiting for the pod, or its POST still out (the cluster may have
     * stored it and never answered): give up now instead of waiting out
     * the request timeout, and delete the pod when the cluster answers
     * again. Claims fail by themselves, quickly, and leave no pod. */
    if (op->state != CS_WAITING && op->state != CS_CREATING)
      continue;
    strmap_put(&a->abandoned, op->pod, NULL);
    finish(op, FR_SB_UNAVAILABLE, "the cluster became unreachable while the sandbox was starting", NULL, 0);
  }
}

void sandbox_stop(struct fr_adapter *a) {
  a->stopping = 1;
  while (a->creates != NULL)
    finish(a->creates, FR_SB_UNAVAILABLE, "the router is shutting down", NULL, 0);
  commit_stop(a);
  egress_stop(a);
  due_clear(a);
  free(a->due);
  a->due = NULL;
  a->due_cap = 0;
  if (a->reaper != NULL) {
    if (a->reaper->data != NULL)
      uv_close((uv_handle_t *)a->reaper, timer_closed);
    else
      free(a->reaper);
    a->reaper = NULL;
  }
}
