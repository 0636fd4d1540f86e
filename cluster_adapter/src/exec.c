/* exec.c - running a command in a sandbox of this cluster.
 *
 * The one place that knows how a command reaches a sandbox. Two paths:
 *
 * - The sandbox's agent (pods with label fedrouter.io/agent, when this
 *   router speaks to agents): one process.Process/Start request through
 *   the pod proxy (agent.c), its Connect stream of start/data/end events
 *   read as it arrives, output capped as it comes in. The agent enforces
 *   the timeout (timeoutMs: the command's process group and everything it
 *   started, setsid escapees included) and kills the command if we go
 *   away (killOnDisconnect). If the agent cannot be reached before the
 *   command started, the pods/exec path runs it instead.
 * - The API server's pods/exec subresource (kube_exec.c), with the command
 *   wrapped so the sandbox itself enforces the timeout:
 *
 *     timeout -s KILL <t> [env [-C <workdir>] K=V...] argv...
 *
 *   (coreutils, present in every mainstream base image). The sandbox's
 *   create-time env (annotation fedrouter.io/env, pods without an agent)
 *   comes first, the call's env overrides it.
 *
 * Answers are mapped to the stable outcomes of enum fr_exec_err here, and
 * the circuit breaker is fed here, so the router never sees a Kubernetes
 * or agent shape.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"

#include "agent.h"
#include "cluster.h"
#include "fr/assert.h"
#include "fr/buf.h"
#include "fr/kube.h"
#include "fr/util.h"
#include "proc.h"

/* pods/exec carries argv in the URL's query (command=...&command=...):
 * API servers refuse request heads past ~16 KiB, kubesim at 16 KiB (431).
 * A command whose query would pass this is refused before it is sent. */
#define EXEC_MAX_QUERY_BYTES FR_EXEC_MAX_ARGV_BYTES

/* Bytes of the query "command=<arg>&" over <argv>, percent-encoded. */
static size_t query_bytes(char *const *argv) {
  size_t n = 0, i;
  const char *p;

  for (i = 0; argv[i] != NULL; i++) {
    n += sizeof("command=&") - 1;
    for (p = argv[i]; *p != '\0'; p++)
      n += (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                   *p == '-' || *p == '_' || *p == '.' || *p == '~'
               ? 1
               : 3;
  }
  return n;
}

/* The sandbox kills the command at its timeout; the answer gets this much
 * longer to arrive before the stream is given up. */
#define EXEC_ANSWER_GRACE_MS 5000
/* `timeout -s KILL` exits 137 when its timer fired; a 137 this close to the
 * timeout (or later) is read as the timeout, not as the command's own. */
#define EXEC_TIMEOUT_SLACK_MS 50


struct exec_op {
  struct cluster *cl;
  fr_exec_cb cb;
  void *arg;
  int64_t timeout_s;
  char **argv;              /* the wrapped argv (pods/exec), owned; NULL when too long for it */
  void *stdin_data;         /* owned copy */
  size_t stdin_len;
  size_t max_output;
  struct fr_exec_budget *budget;
  char *request_id;
  char pod[64];
  /* the agent path */
  char *agent_body;         /* the Start request's envelope, owned */
  size_t agent_body_len;
  struct fr_buf pending;    /* a partial envelope of the answer */
  struct fr_buf out, err;
  int out_truncated, err_truncated;
  size_t budgeted;          /* of budget->used, ours */
  int started, ended;       /* the agent reported the start / the end */
  int busy;                 /* it did not start: the sandbox's process limit (resource_exhausted) */
  int port;                 /* the agent's */
  int previous_key;         /* this attempt uses the previous key (a rotation) */
  int via;                  /* the path the Start went on: a gateway URL, GWPATH_POD_PROXY (agent__send) */
  int hops;                 /* sent again after a gateway connection that never opened */
  int needs_agent;          /* the sandbox's env or secrets came by /init: no pods/exec */
  int exit_code, timed_out;
  char end_message[300];    /* an error the stream ended with, if any */
  uint64_t start_ms;
};

static void exec_op_free(struct exec_op *op) {
  size_t i;

  for (i = 0; op->argv != NULL && op->argv[i] != NULL; i++)
    free(op->argv[i]);
  free(op->argv);
  free(op->stdin_data);
  free(op->request_id);
  free(op->agent_body);
  /* The output this exec holds is given back to the shared budget. */
  FR_ASSERT(op->budget == NULL ? op->budgeted == 0 : op->budget->used >= op->budgeted);
  if (op->budget != NULL)
    op->budget->used -= op->budgeted;
  fr_buf_free(&op->pending);
  fr_buf_free(&op->out);
  fr_buf_free(&op->err);
  free(op);
}

/* Errors that say the cluster (or the path to it) failed, not the command.
 * Local exhaustion (-EMFILE, -ENFILE, -ENOMEM) is the router's own
 * problem and never counts against the cluster. */
static int cluster_error(const struct fr_kube_exec_result *r) {
  return r->error == -ECONNREFUSED || r->error == -EHOSTUNREACH || r->error == -ETIMEDOUT ||
         r->error == -ECONNRESET || r->error == -EACCES || r->http_status == 429 || r->http_status >= 500;
}

static int local_error(int e) {
  return e == -EMFILE || e == -ENFILE || e == -ENOMEM;
}

static void on_kube_exec(const struct fr_kube_exec_result *res, void *arg) {
  struct exec_op *op = arg;
  struct fr_exec_result r;
  char msg[600];

  memset(&r, 0, sizeof(r));
  r.duration_ms = res->duration_ms;
  if (res->error != 0 && !res->timed_out) {
    /* A transport failure before any HTTP answer is the cluster's fault
     * (the breaker hears of it); a protocol error or a local shortage is
     * not. */
    if (res->http_status == 0 && res->error != -EIO && res->error != -EPROTO && !local_error(res->error))
      cluster__report(op->cl, 0);
    if (res->http_status == 404) {
      r.err = FR_EXEC_NOT_FOUND;
      r.message = "the sandbox no longer exists";
    } else if (res->http_status == 400) {
      snprintf(msg, sizeof(msg), "the sandbox is not running: %s", res->message ? res->message : "");
      r.err = FR_EXEC_NOT_RUNNING;
      r.message = msg;
    } else if (cluster_error(res) || local_error(res->error)) {
      snprintf(msg, sizeof(msg), "the cluster could not run the exec: %s", res->message ? res->message : "");
      r.err = FR_EXEC_UNAVAILABLE;
      r.message = msg;
    } else {
      snprintf(msg, sizeof(msg), "exec failed: %s", res->message ? res->message : "unknown error");
      r.err = FR_EXEC_FAILED;
      r.message = msg;
    }
  } else {
    r.err = FR_EXEC_OK;
    r.exit_code = res->exit_code;
    r.timed_out = res->timed_out;
    if (!r.timed_out && r.exit_code == 137 &&
        res->duration_ms >= (double)op->timeout_s * 1000.0 - EXEC_TIMEOUT_SLACK_MS)
      r.timed_out = 1;
    r.out = res->out ? res->out : "";
    r.errout = res->err ? res->err : "";
    r.out_buf = res->out_buf;
    r.err_buf = res->err_buf;
    r.out_len = res->out_len;
    r.err_len = res->err_len;
    r.out_truncated = res->out_truncated;
    r.err_truncated = res->err_truncated;
  }
  op->cb(&r, op->arg);
  exec_op_free(op);
}

/* Appends a strdup of <s> to <v> at *<n>; -ENOMEM leaves it unchanged. */
static int push(char **v, size_t *n, const char *s) {
  if ((v[*n] = strdup(s)) == NULL)
    return -ENOMEM;
  (*n)++;
  return 0;
}

static int push_env(char **v, size_t *n, struct fr_buf *kv, const char *k, const char *val) {
  fr_buf_reset(kv);
  if (fr_buf_printf(kv, "%s=%s", k, val) != 0)
    return -ENOMEM;
  return push(v, n, kv->data);
}

/* The wrapped argv for <spec> in <pod>; NULL on out of memory. */
static char **wrap_argv(const struct fr_pod *pod, const struct fr_exec_spec *spec) {
  json_t *ann = pod->env != NULL ? json_loads(pod->env, 0, NULL) : NULL, *v;
  size_t nargs = 0, n = 0, cap;
  struct fr_buf kv;
  const char *k;
  char tbuf[32], **out;
  int rc = 0;

  for (; spec->argv[nargs] != NULL; nargs++)
    ;
  cap = nargs + 8 + json_object_size(ann) + json_object_size(spec->env);
  out = calloc(cap + 1, sizeof(*out));
  if (out == NULL) {
    json_decref(ann);
    return NULL;
  }
  fr_buf_init(&kv);
  snprintf(tbuf, sizeof(tbuf), "%" PRId64, spec->timeout_s);
  rc |= push(out, &n, "timeout");
  rc |= push(out, &n, "-s");
  rc |= push(out, &n, "KILL");
  rc |= push(out, &n, tbuf);
  if (spec->workdir != NULL || json_object_size(ann) > 0 || json_object_size(spec->env) > 0) {
    rc |= push(out, &n, "env");
    if (spec->workdir != NULL) {
      rc |= push(out, &n, "-C");
      rc |= push(out, &n, spec->workdir);
    }
    json_object_foreach(ann, k, v) {
      if (json_is_string(v) && json_object_get(spec->env, k) == NULL)
        rc |= push_env(out, &n, &kv, k, json_string_value(v));
    }
    json_object_foreach(spec->env, k, v) {
      if (json_is_string(v))
        rc |= push_env(out, &n, &kv, k, json_string_value(v));
    }
  }
  for (size_t i = 0; i < nargs; i++)
    rc |= push(out, &n, spec->argv[i]);
  fr_buf_free(&kv);
  json_decref(ann);
  if (rc != 0) {
    for (size_t i = 0; i < n; i++)
      free(out[i]);
    free(out);
    return NULL;
  }
  return out;
}

/* ---- the pods/exec path ---- */

/* Starts <op> through pods/exec; 0, or nonzero when it could not start. */
static int kube_begin(struct exec_op *op) {
  struct fr_kube_exec_opts o;

  memset(&o, 0, sizeof(o));
  o.argv = op->argv;
  o.stdin_data = op->stdin_data;
  o.stdin_len = op->stdin_len;
  o.max_stdout = o.max_stderr = op->max_output;
  o.timeout_ms = (uint64_t)op->timeout_s * 1000 + EXEC_ANSWER_GRACE_MS;
  o.request_id = op->request_id;
  o.budget = op->budget;
  return fr_kube_exec(op->cl->client, op->cl->ns, op->pod, &o, on_kube_exec, op, NULL);
}

/* The agent path fell through (from its callback): pods/exec runs it. */
static void fall_back_to_kube(struct exec_op *op) {
  struct fr_exec_result r;

  memset(&r, 0, sizeof(r));
  if (op->needs_agent) {
    /* pods/exec would run it without them: refuse rather than mislead. */
    r.err = FR_EXEC_AGENT_UNAVAILABLE;
    r.message = "the sandbox's agent cannot be reached, and the sandbox's env and secrets reach "
                "commands only through it";
  } else if (op->argv == NULL) {
    r.err = FR_EXEC_FAILED;
    r.message = "the sandbox's agent is unreachable, and argv and env are too long for pods/exec";
  } else if (kube_begin(op) != 0) {
    r.err = FR_EXEC_UNAVAILABLE;
    r.message = "the cluster could not run the exec: cannot start pods/exec";
  } else {
    return;
  }
  op->cb(&r, op->arg);
  exec_op_free(op);
}

/* ---- the agent path ---- */

/* Appends decoded output to <b>, within the stream's cap and the shared
 * budget; what does not fit is dropped and flagged. */
static void agent_append(struct exec_op *op, struct fr_buf *b, int *trunc, const char *b64) {
  size_t n = strlen(b64), room = b->len < op->max_output ? op->max_output - b->len : 0;
  unsigned char *raw;
  long len;

  if (op->budget != NULL) {
    size_t left = op->budget->used < op->budget->max ? op->budget->max - op->budget->used : 0;
    if (left < room)
      room = left;
  }
  if (n == 0)
    return;
  raw = malloc(n * 3 / 4 + 3);
  len = raw != NULL ? fr_base64_decode(b64, n, raw) : -1;
  if (len < 0) {
    *trunc = 1; /* out of memory or not base64: say the output is incomplete */
    free(raw);
    return;
  }
  if ((size_t)len > room) {
    *trunc = 1;
    len = (long)room;
  }
  if (len > 0 && fr_buf_append(b, raw, (size_t)len) != 0) {
    *trunc = 1;
    len = 0;
  }
  free(raw);
  if (op->budget != NULL) {
    op->budget->used += (size_t)len;
    op->budgeted += (size_t)len;
  }
}

/* One message of the Start stream. Returns nonzero to stop reading. */
static int agent_message(struct exec_op *op, int flags, const char *data, size_t len) {
  json_t *j = json_loadb(data, len, 0, NULL), *ev, *x;
  int stop = 0;

  if (j == NULL)
    return 1;
  if (flags & 0x02) {
    /* End of stream: {} or {"error":{"code","message"}}. A command that
     * could not start reads as a shell would report it (127 not found,
     * 126 not executable, 125 bad working directory), so the two paths
     * keep one contract. */
    json_t *e = json_object_get(j, "error");
    if (e != NULL && !op->ended) {
      const char *code = json_string_value(json_object_get(e, "code"));
      const char *msg = json_string_value(json_object_get(e, "message"));
      snprintf(op->end_message, sizeof(op->end_message), "%s: %s", code ? code : "error", msg ? msg : "");
      if (!op->started && code != NULL && strcmp(code, "resource_exhausted") == 0) {
        op->busy = 1;
      } else if (!op->started) {
        op->ended = 1;
        op->exit_code = code != NULL && strcmp(code, "not_found") == 0           ? 127
                        : code != NULL && strcmp(code, "permission_denied") == 0 ? 126
                                                                                 : 125;
        (void)fr_buf_printf(&op->err, "%s\n", msg ? msg : "the command could not start");
      }
    }
    stop = 1;
  } else if ((ev = json_object_get(j, "event")) != NULL) {
    if (json_object_get(ev, "start") != NULL) {
      op->started = 1;
    } else if ((x = json_object_get(ev, "data")) != NULL) {
      const char *o = json_string_value(json_object_get(x, "stdout"));
      const char *e = json_string_value(json_object_get(x, "stderr"));
      const char *t = json_string_value(json_object_get(x, "pty"));
      if (o != NULL || t != NULL)
        agent_append(op, &op->out, &op->out_truncated, o != NULL ? o : t);
      if (e != NULL)
        agent_append(op, &op->err, &op->err_truncated, e);
    } else if ((x = json_object_get(ev, "end")) != NULL) {
      const char *status = json_string_value(json_object_get(x, "status"));
      const char *err = json_string_value(json_object_get(x, "error"));
      op->ended = 1;
      op->timed_out = err != NULL && strstr(err, "timed out") != NULL;
      op->exit_code = proc__exit_code(status, (int)json_integer_value(json_object_get(x, "exitCode")),
                                       json_is_true(json_object_get(x, "exited")));
    }
  }
  json_decref(j);
  return stop;
}

static int on_agent_msg(int flags, const char *data, size_t len, void *arg) {
  /* After the end-stream envelope nothing more is expected; the HTTP end
   * follows and completes the call. */
  (void)agent_message(arg, flags, data, len);
  return 0;
}

static int on_agent_data(const char *data, size_t len, void *arg) {
  struct exec_op *op = arg;

  return proc__feed(&op->pending, data, len, on_agent_msg, op) < 0 ? 1 : 0;
}

static int start_agent(struct exec_op *op, int port);

static void on_agent_done(const struct fr_kube_response *resp, void *arg) {
  struct exec_op *op = arg;
  struct fr_exec_result r;
  char msg[400], code[64];
  int via, next;

  memset(&r, 0, sizeof(r));
  r.duration_ms = (double)(uv_now(op->cl->loop) - op->start_ms);
  r.via_agent = 1;
  via = op->via;
  next = agent__gateway_done(op->cl, via, resp, op->started || op->ended || op->busy, &op->hops);
  if (next != AGENT_NO_RETRY) {
    /* The gateway URL refused the connection: not one byte left, nothing
     * ran. Once more, on another URL or the pod proxy. */
    op->via = next;
    fr_buf_reset(&op->pending);
    if (start_agent(op, op->port) == 0)
      return;
    op->via = via;
  }
  if (op->busy) {
    if (op->via < 0)
      cluster__report(op->cl, 1);
    r.err = FR_EXEC_BUSY;
    r.message = op->end_message;
  } else if (op->ended) {
    if (op->via < 0)
      cluster__report(op->cl, 1);
    r.err = FR_EXEC_OK;
    r.exit_code = op->exit_code;
    r.timed_out = op->timed_out;
    r.out = op->out.data != NULL ? op->out.data : "";
    r.errout = op->err.data != NULL ? op->err.data : "";
    r.out_buf = &op->out;
    r.err_buf = &op->err;
    r.out_len = op->out.len;
    r.err_len = op->err.len;
    r.out_truncated = op->out_truncated;
    r.err_truncated = op->err_truncated;
  } else if (op->started) {
    /* It ran, the answer was lost: not retried, a command is not idempotent.
     * The API server passed the stream on, so while the cluster answers
     * its probes the sandbox is what failed (its code killed the agent,
     * or the agent crashed), not the cluster: say so, and leave the
     * breaker alone. */
    int healthy = cluster__answering(op->cl);
    if (op->via >= 0 && resp->status == 0) {
      /* Through the gateway, whose connection broke: the gateway went
       * (killed, its node lost) or the agent did. Not replayed anywhere. */
      snprintf(msg, sizeof(msg), "the connection through the cluster's gateway broke while the command ran (%.200s); "
               "whether the command finished is unknown, and it was not run again",
               resp->error ? resp->error : op->end_message);
      r.err = FR_EXEC_AGENT_DIED;
    } else {
      snprintf(msg, sizeof(msg), "%s (%d %.200s); whether the command finished is unknown",
               healthy ? "the sandbox's agent stopped while the command ran (killed by code in the sandbox, or "
                         "crashed)"
                       : "the sandbox's agent stream ended before the exit status",
               resp->status, resp->error ? resp->error : op->end_message);
      r.err = healthy ? FR_EXEC_AGENT_DIED : FR_EXEC_UNAVAILABLE;
    }
    r.message = msg;
  } else if (op->via >= 0 && resp->status != 404 &&
             (resp->status == 0 || agent__gateway_error(op->via, resp, code, sizeof(code)))) {
    /* Through the cluster's gateway, which was not reached or refused the
     * call (its breaker heard of it above; the cluster's does not): not
     * replayed through pods/exec, as it may have run when the connection
     * broke after the request left; the caller may retry. */
    if (resp->status == 0)
      snprintf(msg, sizeof(msg), "cannot reach the cluster's gateway: %.300s", resp->error ? resp->error : "no answer");
    else
      snprintf(msg, sizeof(msg), "the cluster's gateway %s: %d %s: %.250s",
               resp->status == 401 || resp->status == 403 ? "refused this router" : "could not pass the exec on",
               resp->status, code, resp->body);
    /* The gateway reached, the agent not (502 upstream_*): the sandbox's
     * trouble; the rest is the way to the cluster. */
    r.err = resp->status == 502 ? FR_EXEC_AGENT_UNAVAILABLE : FR_EXEC_UNAVAILABLE;
    r.message = msg;
  } else if (resp->status == 404) {
    r.err = FR_EXEC_NOT_FOUND;
    r.message = "the sandbox no longer exists";
  } else if (resp->status == 401 && !op->previous_key && op->cl->cc.agent->prev_key != NULL) {
    /* Initialised before a key rotation: its token is from the old key. */
    op->previous_key = 1;
    if (start_agent(op, op->port) == 0)
      return;
    fall_back_to_kube(op);
    return;
  } else {
    /* Nothing started: the agent was not there (pod not running it, no
     * listener, an older pod, a token it does not know). pods/exec runs it. */
    fr_buf_reset(&op->out);
    fr_buf_reset(&op->err);
    fall_back_to_kube(op);
    return;
  }
  op->cb(&r, op->arg);
  exec_op_free(op);
}

/* The Start request: {"process":{"cmd","args","envs","cwd"},"timeoutMs",
 * "stdinData","killOnDisconnect"} in one Connect envelope. */
static int agent_request(struct exec_op *op, const struct fr_exec_spec *spec) {
  struct fr_proc_spec ps;
  json_t *req;
  int rc;

  proc__spec_from_exec(&ps, spec);
  req = proc__start_request(&ps);
  if (req == NULL)
    return -ENOMEM;
  rc = proc__envelope(req, &op->agent_body, &op->agent_body_len);
  json_decref(req);
  return rc;
}

static int start_agent(struct exec_op *op, int port) {
  struct fr_kube_request_opts o;
  char token[65], header[96];
  int rc;

  op->port = port;
  if (agent__token(op->cl, op->pod, op->previous_key, token) != 0)
    return -EINVAL;
  snprintf(header, sizeof(header), "X-Access-Token: %s", token);
  explicit_bzero(token, sizeof(token));
  memset(&o, 0, sizeof(o));
  o.request_id = op->request_id;
  o.timeout_ms = (uint64_t)op->timeout_s * 1000 + EXEC_ANSWER_GRACE_MS;
  o.flags = FR_KUBE_STREAM;   /* as long as the command: not on the REST calls' connections */
  o.header = header;
  o.on_data = on_agent_data;
  op->start_ms = uv_now(op->cl->loop);
  rc = agent__send(op->cl, op->pod, port, 0, "POST", "/process.Process/Start", 0, "application/connect+json",
                  op->agent_body, op->agent_body_len, &o, on_agent_done, op, NULL, &op->via);
  explicit_bzero(header, sizeof(header));
  return rc;
}

int exec__run(struct cluster *cl, const char *pod_name, const struct fr_exec_spec *spec, fr_exec_cb cb,
              void *arg) {
  const struct fr_pod *pod = cluster__pod(cl, pod_name);
  struct exec_op *op;
  int port, rc;

  if (spec == NULL || spec->argv == NULL || spec->argv[0] == NULL || spec->argv[0][0] == '\0' ||
      spec->timeout_s <= 0 || cb == NULL)
    return -EINVAL;
  if (pod == NULL)
    return -ENOENT;
  if (strlen(pod_name) >= sizeof(op->pod))
    return -EINVAL;
  /* Fail fast instead of waiting out a connect timeout. */
  if (!cluster__reachable(cl))
    return -EHOSTDOWN;
  op = calloc(1, sizeof(*op));
  if (op == NULL)
    return -ENOMEM;
  op->cl = cl;
  op->cb = cb;
  op->arg = arg;
  op->via = GWPATH_PICK;
  op->timeout_s = spec->timeout_s;
  op->max_output = spec->max_output;
  op->budget = spec->budget;
  snprintf(op->pod, sizeof(op->pod), "%s", pod_name);
  fr_buf_init(&op->pending);
  fr_buf_init(&op->out);
  fr_buf_init(&op->err);
  op->request_id = spec->request_id != NULL ? strdup(spec->request_id) : NULL;
  op->argv = wrap_argv(pod, spec);
  if (spec->stdin_data != NULL && spec->stdin_len > 0) {
    op->stdin_data = malloc(spec->stdin_len);
    if (op->stdin_data != NULL)
      memcpy(op->stdin_data, spec->stdin_data, spec->stdin_len);
    op->stdin_len = spec->stdin_len;
  }
  if (op->argv == NULL || (spec->stdin_len > 0 && spec->stdin_data != NULL && op->stdin_data == NULL) ||
      (spec->request_id != NULL && op->request_id == NULL)) {
    exec_op_free(op);
    return -ENOMEM;
  }
  port = agent__port_of(cl, pod);
  op->needs_agent = port > 0 && (pod->init_env || pod->secrets != NULL);
  if (query_bytes(op->argv) > EXEC_MAX_QUERY_BYTES) {
    size_t i;
    /* Too long for pods/exec: the agent has no such limit. */
    if (port == 0) {
      exec_op_free(op);
      return -E2BIG;
    }
    for (i = 0; op->argv[i] != NULL; i++)
      free(op->argv[i]);
    free(op->argv);
    op->argv = NULL;
  }
  if (port > 0) {
    rc = agent_request(op, spec);
    if (rc == 0)
      rc = start_agent(op, port);
    if (rc == 0)
      return 0;
    if (op->argv == NULL || op->needs_agent) {
      exec_op_free(op);
      return rc == -ENOMEM ? -ENOMEM : -EHOSTDOWN;
    }
  }
  if (kube_begin(op) != 0) {
    exec_op_free(op);
    return -EHOSTDOWN;
  }
  return 0;
}
