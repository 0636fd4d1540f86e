/* exec.c - running a command in a sandbox of this cluster.
 *
 * The one place that knows how a command reaches a sandbox: today through
 * the API server's pods/exec subresource (kube_exec.c), with the command
 * wrapped so the sandbox itself enforces the timeout:
 *
 *   timeout -s KILL <t> [env [-C <workdir>] K=V...] argv...
 *
 * (coreutils, present in every mainstream base image; the timer runs
 * inside the sandbox, so the command dies even if nobody waits for it).
 * The sandbox's create-time env (annotation fedrouter.io/env) comes first,
 * the call's env overrides it. Kubernetes answers are mapped to the
 * stable outcomes of enum fr_exec_err here, and the circuit breaker is fed
 * here, so the router never sees a Kubernetes shape.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapter_internal.h"
#include "fr/buf.h"

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
  struct fr_adapter *a;
  fr_exec_cb cb;
  void *arg;
  int64_t timeout_s;
  char **argv;              /* the wrapped argv, owned */
  void *stdin_data;         /* owned copy */
};

static void exec_op_free(struct exec_op *op) {
  size_t i;

  for (i = 0; op->argv != NULL && op->argv[i] != NULL; i++)
    free(op->argv[i]);
  free(op->argv);
  free(op->stdin_data);
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
      fr_adapter_report(op->a, 0);
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

int fr_adapter_exec(struct fr_adapter *a, const char *pod_name, const struct fr_exec_spec *spec,
                    fr_exec_cb cb, void *arg) {
  const struct fr_pod *pod = podstore_get(&a->pods, pod_name);
  struct fr_kube_exec_opts o;
  struct exec_op *op;

  if (spec == NULL || spec->argv == NULL || spec->argv[0] == NULL || spec->argv[0][0] == '\0' ||
      spec->timeout_s <= 0 || cb == NULL)
    return -EINVAL;
  if (pod == NULL)
    return -ENOENT;
  /* Fail fast instead of waiting out a connect timeout. */
  if (a->breaker != BR_CLOSED)
    return -EHOSTDOWN;
  op = calloc(1, sizeof(*op));
  if (op == NULL)
    return -ENOMEM;
  op->a = a;
  op->cb = cb;
  op->arg = arg;
  op->timeout_s = spec->timeout_s;
  op->argv = wrap_argv(pod, spec);
  if (spec->stdin_data != NULL && spec->stdin_len > 0) {
    op->stdin_data = malloc(spec->stdin_len);
    if (op->stdin_data != NULL)
      memcpy(op->stdin_data, spec->stdin_data, spec->stdin_len);
  }
  if (op->argv == NULL || (spec->stdin_len > 0 && spec->stdin_data != NULL && op->stdin_data == NULL)) {
    exec_op_free(op);
    return -ENOMEM;
  }
  if (query_bytes(op->argv) > EXEC_MAX_QUERY_BYTES) {
    exec_op_free(op);
    return -E2BIG;
  }
  memset(&o, 0, sizeof(o));
  o.argv = op->argv;
  o.stdin_data = op->stdin_data;
  o.stdin_len = op->stdin_data != NULL ? spec->stdin_len : 0;
  o.max_stdout = o.max_stderr = spec->max_output;
  o.timeout_ms = (uint64_t)spec->timeout_s * 1000 + EXEC_ANSWER_GRACE_MS;
  o.request_id = spec->request_id;
  o.budget = spec->budget;
  if (fr_kube_exec(a->client, a->ns, pod_name, &o, on_kube_exec, op, NULL) != 0) {
    exec_op_free(op);
    return -EHOSTDOWN;
  }
  return 0;
}
