/* data.c - inside a sandbox, through its agent (docs/api.md "Inside a
 * sandbox"): streaming exec, background processes (start, list, output
 * with reattach, stdin, signals, PTY resize) and files (upload, download,
 * list, remove).
 *
 * The adapter speaks the agent's protocol (fr_adapter_proc_*,
 * fr_adapter_agent_rpc, fr_adapter_agent_call); this file is the HTTP side:
 * validation, tenant rules, NDJSON, streaming with backpressure both ways.
 * Nothing here buffers more than a bounded window: a slow client pauses the
 * agent's stream (FR_AGENT_PAUSE until the connection drains), a slow
 * agent pauses the client's upload (fr_http_body_pause).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/config.h"
#include "fr/http.h"
#include "fr/urlsafe.h"
#include "fr/util.h"
#include "api.h"
#include "router.h"

/* Above this many unsent answer bytes the agent's stream pauses; it
 * resumes below the low mark. */
#define OUT_HIGH ((size_t)1 << 20)
#define OUT_LOW ((size_t)256 << 10)
/* Upload: above this many bytes not yet sent to the agent the client's
 * body pauses (resumed by the agent call's on_drain). */
#define UP_HIGH ((size_t)1 << 20)
/* Without follow, how long to wait for a process's end after its kept
 * output was replayed before saying it still runs. */
#define NOFOLLOW_GRACE_MS 150
#define MAX_PATH_BYTES 4096

static const char *pod_of(const char *id) {
  return strchr(id, '.') + 1;
}

/* The answer for a seam call that could not start. */
static void start_failed(struct api_req *q, struct fr_adapter *a, int rc) {
  char msg[300];

  switch (rc) {
  case -ENOENT:
    api_fail(q, 404, "sandbox_not_found", "the sandbox no longer exists", NULL);
    break;
  case -ENOTSUP:
    api_fail(q, 501, "agent_required",
             "this sandbox has no fedrouter agent (created without one, or the router has no agent "
             "config): only the buffered exec works in it",
             NULL);
    break;
  case -EHOSTDOWN:
    snprintf(msg, sizeof(msg), "cluster %s is unavailable", fr_adapter_name(a));
    api_fail(q, 503, "cluster_unavailable", msg, "Retry-After: 5\r\n");
    break;
  case -EAGAIN:
    snprintf(msg, sizeof(msg), "cluster %s has too many streams open", fr_adapter_name(a));
    api_fail(q, 503, "agent_unavailable", msg, "Retry-After: 1\r\n");
    break;
  case -EINVAL:
    api_fail(q, 400, "invalid_request", "the request cannot be sent to the agent", NULL);
    break;
  default:
    api_oom(q);
    break;
  }
}

/* An agent error ({"code","message"} of Connect, or envd's {"code":404,...}
 * of /files) as the v1 answer; <what> names the object ("process",
 * "path") for not_found. */
static void agent_error(struct api_req *q, const struct fr_agent_result *res, json_t *err, const char *what) {
  const char *code = json_string_value(json_object_get(err, "code"));
  const char *msg = json_string_value(json_object_get(err, "message"));
  int status = res->status;
  char text[400];

  if (res->err != FR_AGENT_OK || status == 401) {
    /* 401: the agent does not know this router's key (rotated without
     * previous_key_file): the same code as an exec that cannot use it. */
    api_fail(q, 503, "agent_unavailable",
             res->err != FR_AGENT_OK ? (res->message != NULL ? res->message : "the agent was not reached")
                                     : "the sandbox's agent refuses this router's key (was the agent key rotated "
                                       "without previous_key_file?)",
             "Retry-After: 1\r\n");
    return;
  }
  if (code == NULL) {
    /* envd's HTTP shape: the status is the code */
    code = status == 404 ? "not_found" : status == 403 ? "permission_denied" : status == 400 ? "invalid_argument"
         : status == 507 ? "disk_full" : status == 409 ? "already_exists" : "unknown";
  }
  if (msg == NULL)
    msg = "the sandbox's agent refused the request";
  snprintf(text, sizeof(text), "%s", msg);
  if (strcmp(code, "not_found") == 0) {
    snprintf(text, sizeof(text), "%s", msg);
    api_fail(q, 404, strcmp(what, "process") == 0 ? "process_not_found" : "path_not_found", text, NULL);
  } else if (strcmp(code, "permission_denied") == 0) {
    api_fail(q, 403, "permission_denied", text, NULL);
  } else if (strcmp(code, "invalid_argument") == 0) {
    api_fail(q, 400, strcmp(what, "path") == 0 ? "invalid_path" : "invalid_request", text, NULL);
  } else if (strcmp(code, "failed_precondition") == 0 || strcmp(code, "already_exists") == 0) {
    api_fail(q, 409, code, text, NULL);
  } else if (strcmp(code, "disk_full") == 0 ||
             (strcmp(code, "resource_exhausted") == 0 && strcmp(what, "path") == 0)) {
    api_fail(q, 507, "disk_full", text, NULL); /* resource_exhausted: the agent's word for ENOSPC */
  } else if (strcmp(code, "resource_exhausted") == 0) {
    api_fail(q, 429, "agent_busy", text, "Retry-After: 1\r\n");
  } else if (strcmp(code, "out_of_range") == 0) {
    api_fail(q, 400, "listing_too_large", text, NULL);
  } else {
    api_fail(q, 502, "agent_error", text, NULL);
  }
}

/* ---------------------------------------------------------------------- */
/* NDJSON answers fed by a process stream (streaming exec, output)          */

enum nd_kind { ND_EXEC, ND_OUTPUT };

struct nd {
  struct api_req *q;
  struct fr_adapter *a;
  struct fr_proc_stream *ps;
  enum nd_kind kind;
  struct tenant_state *ts;      /* ND_EXEC: counted in its execs */
  int follow;                   /* ND_OUTPUT */
  int64_t until;                /* ND_OUTPUT without follow: the offset produced at attach (-1: none) */
  int64_t at;                   /* offset of the next output byte */
  uint64_t start_ms;
  uv_timer_t *grace;            /* ND_OUTPUT without follow: waiting for an end after the replay */
  char carry[2][4];             /* an incomplete UTF-8 sequence per stream, for the next piece */
  size_t ncarry[2];
  unsigned begun : 1, ended : 1, started : 1;
};

static void on_grace_closed(uv_handle_t *h) {
  free(h);
}

static void nd_free(struct nd *n) {
  if (n->ts != NULL)
    n->ts->execs--;
  if (n->grace != NULL)
    uv_close((uv_handle_t *)n->grace, on_grace_closed);
  free(n);
}

/* Ends the answer (the stream already went, or never was) and frees. */
static void nd_finish(struct nd *n, int ok) {
  struct api_req *q = n->q;

  n->ps = NULL;
  api_stream_end(q, ok);
  nd_free(n);
}

static int nd_begin(struct nd *n) {
  if (n->begun)
    return 0;
  n->begun = 1;
  return api_stream_begin(n->q, 200, "application/x-ndjson", "X-Accel-Buffering: no\r\n", FR_HTTP_CHUNKED);
}

static void nd_line(struct nd *n, json_t *obj) {
  char *s = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;

  json_decref(obj);
  if (s == NULL || n->q->req == NULL) {
    free(s);
    return;
  }
  fr_http_stream_write(n->q->req, s, strlen(s));
  fr_http_stream_write(n->q->req, "\n", 1);
  free(s);
}

/* Length of <d> without a trailing character cut short. */
static size_t utf8_whole(const char *d, size_t len) {
  size_t back;

  for (back = 1; back <= 3 && back <= len; back++) {
    const unsigned char *c = (const unsigned char *)d + len - back;
    if ((*c & 0xC0) == 0x80)
      continue; /* a continuation byte: look further back */
    return fr_utf8_char(c, back) < 0 ? len - back : len;
  }
  return len;
}

/* One output piece as a line: {"stdout":"..."} when it is UTF-8, else
 * {"stdout_b64":"..."}; a multi-byte character cut at the piece's end
 * waits for the next piece. <flush> sends what is carried too. */
static void nd_output(struct nd *n, int err, const char *data, size_t len, int flush) {
  const char *key = err ? "stderr" : "stdout";
  struct fr_buf b;
  size_t whole;
  json_t *s;
  char k[16];

  fr_buf_init(&b);
  if (fr_buf_append(&b, n->carry[err], n->ncarry[err]) != 0 || (len > 0 && fr_buf_append(&b, data, len) != 0)) {
    fr_buf_free(&b);
    return;
  }
  n->ncarry[err] = 0;
  whole = flush ? b.len : utf8_whole(b.data, b.len);
  if (whole < b.len) {
    memcpy(n->carry[err], b.data + whole, b.len - whole);
    n->ncarry[err] = b.len - whole;
  }
  if (whole > 0) {
    s = json_stringn(b.data, whole);
    if (s != NULL) {
      nd_line(n, json_pack("{s:o}", key, s));
    } else {
      char *b64 = malloc(fr_base64_len(whole));
      if (b64 != NULL) {
        fr_base64_encode(b.data, whole, b64);
        snprintf(k, sizeof(k), "%s_b64", key);
        nd_line(n, json_pack("{s:s}", k, b64));
        free(b64);
      }
    }
  }
  fr_buf_free(&b);
}

static void nd_flush(struct nd *n) {
  if (n->ncarry[0] > 0)
    nd_output(n, 0, NULL, 0, 1);
  if (n->ncarry[1] > 0)
    nd_output(n, 1, NULL, 0, 1);
}

static void nd_on_drain(struct fr_http_req *req) {
  struct api_req *q = api_req_of(req);
  struct nd *n = q->gone_arg;

  if (n != NULL && n->ps != NULL)
    fr_proc_stream_resume(n->ps);
}

/* Without follow: the replay is complete and no end came; the process
 * still runs. */
static void on_grace(uv_timer_t *t) {
  struct nd *n = t->data;

  if (n->ended)
    return;
  n->ended = 1;
  nd_flush(n);
  nd_line(n, json_pack("{s:b}", "running", 1));
  fr_proc_stream_cancel(n->ps);
  nd_finish(n, 1);
}

static void nd_replayed(struct nd *n) {
  if (n->follow || n->until < 0 || n->at < n->until || n->grace != NULL)
    return;
  n->grace = malloc(sizeof(*n->grace));
  if (n->grace == NULL)
    return;
  uv_timer_init(n->q->r->loop, n->grace);
  n->grace->data = n;
  uv_timer_start(n->grace, on_grace, NOFOLLOW_GRACE_MS, 0);
}

static int nd_event(const struct fr_proc_event *ev, void *arg) {
  struct nd *n = arg;

  if (n->ended)
    return -1;
  switch (ev->kind) {
  case FR_PROC_ATTACHED:
    nd_begin(n);
    n->at = ev->out_start >= 0 ? ev->out_start : 0;
    n->until = ev->out_end;
    if (ev->dropped > 0)
      nd_line(n, json_pack("{s:I}", "lost_bytes", (json_int_t)ev->dropped));
    nd_replayed(n);
    break;
  case FR_PROC_START:
    n->started = 1;
    nd_begin(n);
    break;
  case FR_PROC_STDOUT:
  case FR_PROC_PTY:
  case FR_PROC_STDERR: {
    size_t len = ev->len;
    /* Without follow the answer is what was kept at attach: output the
     * process writes meanwhile (a `yes` makes tens of MB a second while
     * the end is awaited) is not part of it. */
    if (!n->follow && n->until >= 0)
      len = n->at >= n->until ? 0 : (size_t)(n->until - n->at) < len ? (size_t)(n->until - n->at) : len;
    nd_begin(n);
    if (len > 0)
      nd_output(n, ev->kind == FR_PROC_STDERR, ev->data, len, 0);
    n->at += (int64_t)ev->len;
    nd_replayed(n);
    break;
  }
  case FR_PROC_END:
    nd_begin(n);
    nd_flush(n);
    n->ended = 1;
    {
      json_t *o = json_pack("{s:o,s:b,s:I}", "exit_code", ev->timed_out ? json_null() : json_integer(ev->exit_code),
                            "timed_out", ev->timed_out, "duration_ms",
                            (json_int_t)(uv_now(n->q->r->loop) - n->start_ms));
      if (o != NULL && n->kind == ND_OUTPUT)
        json_object_del(o, "duration_ms");   /* the attach's, not the process's: meaningless */
      nd_line(n, o);
    }
    return 0;
  }
  if (n->q->req == NULL)
    return -1;
  if (fr_http_pending_bytes(n->q->req) > OUT_HIGH && fr_http_on_drain(n->q->req, nd_on_drain, OUT_LOW) == 0)
    return FR_AGENT_PAUSE;
  return 0;
}

static void nd_done(const struct fr_agent_result *res, const char *code, const char *message, void *arg) {
  struct nd *n = arg;
  struct api_req *q = n->q;

  n->ps = NULL;
  if (n->ended) {
    nd_finish(n, 1);
    return;
  }
  if (!n->begun) {
    /* Nothing streamed yet: an ordinary error answer. A command that could
     * not start reads as a shell would say it, as the buffered exec does. */
    if (n->kind == ND_EXEC && code != NULL && res->err == FR_AGENT_OK) {
      int exit_code = strcmp(code, "not_found") == 0 ? 127 : strcmp(code, "permission_denied") == 0 ? 126 : 125;
      nd_begin(n);
      nd_line(n, json_pack("{s:s+}", "stderr", message != NULL ? message : "the command could not start", "\n"));
      nd_line(n, json_pack("{s:i,s:b,s:I}", "exit_code", exit_code, "timed_out", 0, "duration_ms",
                           (json_int_t)(uv_now(q->r->loop) - n->start_ms)));
      nd_finish(n, 1);
      return;
    }
    if (code != NULL && res->err == FR_AGENT_OK) {
      json_t *e = json_pack("{s:s,s:s}", "code", code, "message", message != NULL ? message : "");
      agent_error(q, res, e, "process");
      json_decref(e);
    } else {
      agent_error(q, res, NULL, "process");
    }
    nd_free(n);
    return;
  }
  /* Cut after it began: say so on the last line, then end. */
  nd_flush(n);
  nd_line(n, json_pack("{s:{s:s,s:s}}", "error", "code", code != NULL ? "agent_error" : "agent_unavailable",
                       "message", message != NULL ? message : res->message != NULL ? res->message : "the stream broke"));
  nd_finish(n, 1);
}

static void nd_gone(struct api_req *q, void *arg) {
  struct nd *n = arg;

  (void)q;
  /* A foreground exec's command dies with its stream (killOnDisconnect);
   * a reattach just leaves. */
  fr_proc_stream_cancel(n->ps);
  n->ended = 1;
  nd_finish(n, 0);
}

static struct nd *nd_new(struct api_req *q, struct fr_adapter *a, enum nd_kind kind) {
  struct nd *n = calloc(1, sizeof(*n));

  if (n == NULL)
    return NULL;
  n->q = q;
  n->a = a;
  n->kind = kind;
  n->until = -1;
  n->start_ms = uv_now(q->r->loop);
  return n;
}

/* The stream has started (0 from the adapter): the request waits for it. */
static void nd_started(struct nd *n) {
  api_defer(n->q);
  n->q->gone_cb = nd_gone;
  n->q->gone_arg = n;
}

void data_exec_stream(struct api_req *q, struct fr_adapter *a, const char *id, const struct fr_exec_spec *spec) {
  struct fr_proc_spec ps;
  struct nd *n;
  char msg[200];
  int rc;

  if (q->ts != NULL && q->ts->execs >= q->ts->max_execs) {
    snprintf(msg, sizeof(msg), "tenant %s has %" PRId64 " execs running (max_concurrent_execs)", q->tenant,
             q->ts->execs);
    api_reply(q, 429, api_limit_body(msg, "max_concurrent_execs"), "Retry-After: 1\r\n");
    return;
  }
  n = nd_new(q, a, ND_EXEC);
  if (n == NULL) {
    api_oom(q);
    return;
  }
  memset(&ps, 0, sizeof(ps));
  ps.argv = spec->argv;
  ps.env = spec->env;
  ps.workdir = spec->workdir;
  ps.stdin_data = spec->stdin_data;
  ps.stdin_len = spec->stdin_len;
  ps.timeout_ms = spec->timeout_s * 1000;
  ps.kill_on_disconnect = 1;
  ps.request_id = q->rid;
  rc = fr_adapter_proc_start(a, pod_of(id), &ps, nd_event, nd_done, n, &n->ps);
  if (rc != 0) {
    free(n);
    start_failed(q, a, rc);
    return;
  }
  n->ts = q->ts;
  if (n->ts != NULL)
    n->ts->execs++;
  nd_started(n);
  if (q->req != NULL)
    router_note(q->req, "cluster", fr_adapter_name(a));
}

/* ---------------------------------------------------------------------- */
/* processes                                                               */

/* POST .../processes: the answer is the start event's pid; the process
 * then runs on without us (the agent never kills on a plain disconnect). */
struct bg_start {
  struct api_req *q;
  struct fr_proc_stream *ps;
  int answered;
};

static int bg_event(const struct fr_proc_event *ev, void *arg) {
  struct bg_start *b = arg;

  if (ev->kind == FR_PROC_START && !b->answered) {
    b->answered = 1;
    api_reply(b->q, 201, json_pack("{s:I}", "pid", (json_int_t)ev->pid), NULL);
    return -1;   /* leave: stops the stream, not the process */
  }
  return b->answered ? -1 : 0;
}

static void bg_done(const struct fr_agent_result *res, const char *code, const char *message, void *arg) {
  struct bg_start *b = arg;

  if (!b->answered) {
    if (code != NULL && res->err == FR_AGENT_OK && strcmp(code, "resource_exhausted") != 0) {
      char msg[600];
      snprintf(msg, sizeof(msg), "the process could not start: %s", message != NULL ? message : code);
      api_fail(b->q, strcmp(code, "not_found") == 0 || strcmp(code, "invalid_argument") == 0 ? 400 : 502,
               "start_failed", msg, NULL);
    } else {
      agent_error(b->q, res, NULL, "process");
    }
  }
  free(b);
}

static void bg_gone(struct api_req *q, void *arg) {
  struct bg_start *b = arg;

  fr_proc_stream_cancel(b->ps);
  free(b);
  api_reply(q, 499, NULL, NULL);
}

static void process_start(struct api_req *q, struct fr_adapter *a, const char *id) {
  static const char *const known[] = {"argv", "cmd", "env", "workdir", "stdin", "pty", "timeout_s", "tag", NULL};
  const struct fr_config *cfg = q->r->cfg;
  struct fr_proc_spec ps;
  struct bg_start *b;
  json_t *j, *v, *pty;
  char **argv = NULL, msg[200];
  int rc;

  j = api_body_object(q, known, 0);
  if (j == NULL)
    return;
  memset(&ps, 0, sizeof(ps));
  if ((json_object_get(j, "argv") != NULL) == (json_object_get(j, "cmd") != NULL)) {
    api_fail(q, 400, "invalid_argv", "give argv (an array) or cmd (a shell command line), not both", NULL);
    goto out;
  }
  if (json_object_get(j, "argv") != NULL) {
    if ((argv = api_body_argv(q, json_object_get(j, "argv"))) == NULL)
      goto out;
    ps.argv = argv;
  } else {
    v = json_object_get(j, "cmd");
    if (!json_is_string(v) || json_string_length(v) == 0 || strlen(json_string_value(v)) != json_string_length(v)) {
      api_field_fail(q, "cmd", "cmd must be a non-empty string without NUL");
      goto out;
    }
    ps.cmd = json_string_value(v);
  }
  if (api_body_env_workdir(q, j, &ps.env, &ps.workdir) != 0)
    goto out;
  if ((v = json_object_get(j, "stdin")) != NULL) {
    if (!json_is_boolean(v)) {
      api_field_fail(q, "stdin", "stdin must be true or false");
      goto out;
    }
    ps.stdin_open = json_is_true(v);
  }
  if ((pty = json_object_get(j, "pty")) != NULL && !json_is_null(pty)) {
    json_int_t cols = json_integer_value(json_object_get(pty, "cols"));
    json_int_t rows = json_integer_value(json_object_get(pty, "rows"));
    if (!json_is_object(pty) || json_object_size(pty) != 2 || cols < 1 || cols > 1000 || rows < 1 || rows > 1000) {
      api_field_fail(q, "pty", "pty must be {\"cols\":1..1000,\"rows\":1..1000}");
      goto out;
    }
    ps.pty_cols = (int)cols;
    ps.pty_rows = (int)rows;
  }
  if ((v = json_object_get(j, "timeout_s")) != NULL) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > cfg->max_lifetime_s) {
      snprintf(msg, sizeof(msg), "timeout_s must be an integer from 0 (none) to %" PRId64, cfg->max_lifetime_s);
      api_field_fail(q, "timeout_s", msg);
      goto out;
    }
    ps.timeout_ms = json_integer_value(v) * 1000;
  }
  if ((v = json_object_get(j, "tag")) != NULL) {
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 128 ||
        strlen(json_string_value(v)) != json_string_length(v)) {
      api_field_fail(q, "tag", "tag must be a string of 1 to 128 bytes");
      goto out;
    }
    ps.tag = json_string_value(v);
  }
  ps.request_id = q->rid;
  b = calloc(1, sizeof(*b));
  if (b == NULL) {
    api_oom(q);
    goto out;
  }
  b->q = q;
  rc = fr_adapter_proc_start(a, pod_of(id), &ps, bg_event, bg_done, b, &b->ps);
  if (rc != 0) {
    free(b);
    start_failed(q, a, rc);
    goto out;
  }
  api_defer(q);
  q->gone_cb = bg_gone;
  q->gone_arg = b;
out:
  free(argv);
  json_decref(j);
}

/* A unary agent call whose answer becomes the request's. */
struct rpc {
  struct api_req *q;
  const char *what;             /* "process" or "path", for not_found */
  json_t *(*shape)(json_t *answer);  /* 2xx answer -> body (NULL: 204) */
  int status;                   /* of a success with a body */
  /* SendInput may need to go again as PTY input, then CloseStdin. */
  struct fr_adapter *a;
  char pod[256];
  int64_t pid;
  json_t *pty_retry;            /* the SendInput request to send as pty if refused as stdin */
  int close_after;
};

static void rpc_gone(struct api_req *q, void *arg) {
  struct rpc *c = arg;

  c->q = NULL;   /* the agent's answer is dropped when it comes */
  api_reply(q, 499, NULL, NULL);
}

static void rpc_finish(struct rpc *c) {
  json_decref(c->pty_retry);
  free(c);
}

static int rpc_send(struct rpc *c, const char *method, json_t *req);

static void on_rpc(const struct fr_agent_result *res, json_t *answer, void *arg) {
  struct rpc *c = arg;
  struct api_req *q = c->q;

  if (q == NULL) {
    rpc_finish(c);
    return;
  }
  q->gone_cb = NULL;
  if (res->err == FR_AGENT_OK && res->status >= 200 && res->status < 300) {
    if (c->close_after) {
      json_t *req = json_pack("{s:{s:I}}", "process", "pid", (json_int_t)c->pid);
      c->close_after = 0;
      json_decref(c->pty_retry);
      c->pty_retry = NULL;
      if (req != NULL && rpc_send(c, "process.Process/CloseStdin", req) == 0) {
        json_decref(req);
        q->gone_cb = rpc_gone;
        return;
      }
      json_decref(req);
      api_fail(q, 502, "agent_error", "could not close stdin", NULL);
    } else if (c->shape != NULL) {
      json_t *body = c->shape(answer);
      if (body != NULL)
        api_reply(q, c->status, body, NULL);
      else
        api_fail(q, 502, "agent_error", "the agent's answer could not be read", NULL);
    } else {
      api_reply(q, 204, NULL, NULL);
    }
  } else if (c->pty_retry != NULL && res->err == FR_AGENT_OK && answer != NULL &&
             strcmp(json_string_value(json_object_get(answer, "code")) ?: "", "failed_precondition") == 0 &&
             strstr(json_string_value(json_object_get(answer, "message")) ?: "", "has a pty") != NULL) {
    /* A PTY process takes its input as "pty". */
    json_t *req = c->pty_retry;
    c->pty_retry = NULL;
    if (rpc_send(c, "process.Process/SendInput", req) == 0) {
      json_decref(req);
      q->gone_cb = rpc_gone;
      return;
    }
    json_decref(req);
    api_fail(q, 502, "agent_error", "could not send the input", NULL);
  } else {
    agent_error(q, res, answer, c->what);
  }
  rpc_finish(c);
}

static int rpc_send(struct rpc *c, const char *method, json_t *req) {
  return fr_adapter_agent_rpc(c->a, c->pod, method, req, c->q->rid, on_rpc, c);
}

/* Starts <method> with <req> (taken) for <q>; answers it later. */
static struct rpc *rpc_start(struct api_req *q, struct fr_adapter *a, const char *id, const char *method,
                             json_t *req, const char *what, json_t *(*shape)(json_t *), int status) {
  struct rpc *c = calloc(1, sizeof(*c));
  int rc;

  if (c == NULL || req == NULL) {
    free(c);
    json_decref(req);
    api_oom(q);
    return NULL;
  }
  c->q = q;
  c->a = a;
  c->what = what;
  c->shape = shape;
  c->status = status;
  snprintf(c->pod, sizeof(c->pod), "%s", pod_of(id));
  rc = rpc_send(c, method, req);
  json_decref(req);
  if (rc != 0) {
    free(c);
    start_failed(q, a, rc);
    return NULL;
  }
  api_defer(q);
  q->gone_cb = rpc_gone;
  q->gone_arg = c;
  return c;
}

static json_t *shape_processes(json_t *answer) {
  json_t *list = json_array(), *p;
  size_t i;

  json_array_foreach(json_object_get(answer, "processes"), i, p) {
    json_t *cfg = json_object_get(p, "config"), *argv = json_array(), *a;
    size_t k;
    json_array_append(argv, json_object_get(cfg, "cmd"));
    json_array_foreach(json_object_get(cfg, "args"), k, a) json_array_append(argv, a);
    json_t *o = json_pack("{s:O,s:o}", "pid", json_object_get(p, "pid"), "argv", argv);
    if (o == NULL)
      continue;
    if (json_is_string(json_object_get(p, "tag")))
      json_object_set(o, "tag", json_object_get(p, "tag"));
    if (json_is_string(json_object_get(cfg, "cwd")))
      json_object_set(o, "workdir", json_object_get(cfg, "cwd"));
    json_array_append_new(list, o);
  }
  return json_pack("{s:o}", "processes", list);
}

static int parse_pid(struct api_req *q, const char *s, int64_t *pid) {
  if (fr_parse_int64(s, 1, INT32_MAX, pid) != 0) {
    api_fail(q, 400, "invalid_pid", "a pid is a positive integer", NULL);
    return -1;
  }
  return 0;
}

static void process_output(struct api_req *q, struct fr_adapter *a, const char *id, int64_t pid) {
  char v[16];
  struct nd *n;
  int rc;

  n = nd_new(q, a, ND_OUTPUT);
  if (n == NULL) {
    api_oom(q);
    return;
  }
  n->follow = fr_http_query_get(q->req->query, "follow", v, sizeof(v)) >= 0 &&
              (strcmp(v, "1") == 0 || strcmp(v, "true") == 0);
  rc = fr_adapter_proc_attach(a, pod_of(id), pid, 0, q->rid, nd_event, nd_done, n, &n->ps);
  if (rc != 0) {
    free(n);
    start_failed(q, a, rc);
    return;
  }
  nd_started(n);
}

static void process_stdin(struct api_req *q, struct fr_adapter *a, const char *id, int64_t pid) {
  const struct fr_http_req *req = q->req;
  char v[16], *b64;
  int close_it = fr_http_query_get(req->query, "close", v, sizeof(v)) >= 0 &&
                 (strcmp(v, "1") == 0 || strcmp(v, "true") == 0);
  struct rpc *c;
  json_t *in, *pty;

  if (req->body_len == 0) {
    if (!close_it) {
      api_reply(q, 204, NULL, NULL);
      return;
    }
    rpc_start(q, a, id, "process.Process/CloseStdin", json_pack("{s:{s:I}}", "process", "pid", (json_int_t)pid),
              "process", NULL, 204);
    return;
  }
  b64 = malloc(fr_base64_len(req->body_len));
  if (b64 == NULL) {
    api_oom(q);
    return;
  }
  fr_base64_encode(req->body, req->body_len, b64);
  in = json_pack("{s:{s:I},s:{s:s}}", "process", "pid", (json_int_t)pid, "input", "stdin", b64);
  pty = json_pack("{s:{s:I},s:{s:s}}", "process", "pid", (json_int_t)pid, "input", "pty", b64);
  free(b64);
  if (pty == NULL) {
    json_decref(in);
    api_oom(q);
    return;
  }
  c = rpc_start(q, a, id, "process.Process/SendInput", in, "process", NULL, 204);
  if (c == NULL) {
    json_decref(pty);
    return;
  }
  c->pid = pid;
  c->pty_retry = pty;
  c->close_after = close_it;
}

static void process_signal(struct api_req *q, struct fr_adapter *a, const char *id, int64_t pid) {
  static const char *const known[] = {"signal", NULL};
  static const char *const names[] = {"SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", "SIGQUIT",
                                      "SIGUSR1", "SIGUSR2", "SIGSTOP", "SIGCONT", NULL};
  json_t *j = api_body_object(q, known, 0), *v, *sig = NULL;
  char name[32];
  size_t i;

  if (j == NULL)
    return;
  v = json_object_get(j, "signal");
  if (json_is_integer(v) && json_integer_value(v) >= 1 && json_integer_value(v) <= 64) {
    sig = json_integer(json_integer_value(v));
  } else if (json_is_string(v)) {
    const char *s = json_string_value(v);
    snprintf(name, sizeof(name), "%s%.24s", strncmp(s, "SIG", 3) == 0 ? "" : "SIG", s);
    for (i = 0; names[i] != NULL && strcmp(names[i], name) != 0; i++)
      ;
    if (names[i] != NULL) {
      char full[40];
      snprintf(full, sizeof(full), "SIGNAL_%s", name);
      sig = json_string(full);
    }
  }
  if (sig == NULL) {
    api_field_fail(q, "signal", "signal must be SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, "
                                "SIGSTOP, SIGCONT or a number from 1 to 64");
    json_decref(j);
    return;
  }
  rpc_start(q, a, id, "process.Process/SendSignal",
            json_pack("{s:{s:I},s:o}", "process", "pid", (json_int_t)pid, "signal", sig), "process", NULL, 204);
  json_decref(j);
}

static void process_resize(struct api_req *q, struct fr_adapter *a, const char *id, int64_t pid) {
  static const char *const known[] = {"cols", "rows", NULL};
  json_t *j = api_body_object(q, known, 0);
  json_int_t cols, rows;

  if (j == NULL)
    return;
  cols = json_integer_value(json_object_get(j, "cols"));
  rows = json_integer_value(json_object_get(j, "rows"));
  json_decref(j);
  if (cols < 1 || cols > 1000 || rows < 1 || rows > 1000) {
    api_field_fail(q, "cols", "cols and rows must be integers from 1 to 1000");
    return;
  }
  rpc_start(q, a, id, "process.Process/Update",
            json_pack("{s:{s:I},s:{s:{s:I,s:I}}}", "process", "pid", (json_int_t)pid, "pty", "size", "cols", cols,
                      "rows", rows),
            "process", NULL, 204);
}

/* ---------------------------------------------------------------------- */
/* files                                                                   */

/* The path query parameter: absolute, no NUL, bounded; answers and
 * returns -1 otherwise. */
static int query_path(struct api_req *q, char *out, size_t cap) {
  long n = fr_http_query_get(q->req->query, "path", out, cap);
  size_t i;
  int k;

  if (n == -EINVAL) {
    api_fail(q, 400, "invalid_path", "the path holds a NUL byte (%00)", NULL);
    return -1;
  }
  if (n < 0 || out[0] == '\0') {
    api_fail(q, 400, "invalid_path", "give the file's absolute path: ?path=/abs/path", NULL);
    return -1;
  }
  if ((size_t)n >= cap || (size_t)n > MAX_PATH_BYTES || out[0] != '/') {
    api_fail(q, 400, "invalid_path", "the path must be absolute and at most 4096 bytes", NULL);
    return -1;
  }
  /* A sandbox's paths are text: the agent answers in JSON, which holds
   * UTF-8 only, and the E2B SDKs send nothing else. */
  for (i = 0; i < (size_t)n; i += (size_t)k)
    if ((k = fr_utf8_char((const unsigned char *)out + i, (size_t)n - i)) <= 0) {
      char msg[200];
      snprintf(msg, sizeof(msg), "the path is not UTF-8 text (at byte %zu, after \"%.*s\")", i,
               (int)(i < 100 ? i : 100), out);
      api_fail(q, 400, "invalid_path", msg, NULL);
      return -1;
    }
  return 0;
}

/* "/files?path=<percent-encoded path>" (the agent route and its one
 * parameter, as upstream.c's allow-list takes them). */
static int files_path(const char *path, char *out, size_t cap) {
  size_t at = (size_t)snprintf(out, cap, "/files?path=");

  return fr_url_query_escape(out, cap, &at, path) == 0 ? 0 : -1;
}

/* A download or an upload through fr_adapter_agent_call. */
struct xfer {
  struct api_req *q;
  struct fr_adapter *a;
  struct fr_agent_call *call;
  struct fr_buf err;            /* the agent's error answer */
  char path[MAX_PATH_BYTES + 2];
  int64_t limit, received;      /* upload: the tenant's bound, bytes so far */
  int body_paused, body_done, answered;
  int raw;                      /* data_proxy: the agent's status, type and errors go back as they are */
};

static void xfer_free(struct xfer *x) {
  fr_buf_free(&x->err);
  free(x);
}

static void xfer_gone(struct api_req *q, void *arg) {
  struct xfer *x = arg;

  (void)q;
  fr_agent_call_cancel(x->call);
  x->call = NULL;
  api_stream_end(x->q, 0);
  xfer_free(x);
}

/* <x>'s agent call has finished: nothing more comes from it or from the
 * client's body. Returns the request, still to be answered. */
static struct api_req *xfer_call_over(struct xfer *x) {
  struct api_req *q = x->q;

  x->call = NULL;
  q->gone_cb = NULL;
  if (q->req != NULL)
    q->req->body_cb = NULL;
  return q;
}

/* Starts <x>'s agent call; the request then waits for it. On failure
 * answers, frees <x> and returns -1. */
static int xfer_start(struct xfer *x, const char *id, struct fr_agent_call_opts *o) {
  struct api_req *q = x->q;
  int rc = fr_adapter_agent_call(x->a, pod_of(id), o, &x->call);

  if (rc != 0) {
    start_failed(q, x->a, rc);
    xfer_free(x);
    return -1;
  }
  api_defer(q);
  q->gone_cb = xfer_gone;
  q->gone_arg = x;
  return 0;
}

/* download */

static void dl_on_drain(struct fr_http_req *req) {
  struct xfer *x = api_req_of(req)->gone_arg;

  if (x != NULL && x->call != NULL)
    fr_agent_call_resume(x->call);
}

static void dl_head(int status, const char *content_type, const char *headers, void *arg) {
  struct xfer *x = arg;
  char v[32];
  int64_t len = FR_HTTP_CHUNKED, n;

  if (fr_agent_header(headers, "Content-Length", v, sizeof(v)) == 0 && fr_parse_int64(v, 0, INT64_MAX, &n) == 0)
    len = n;
  if (x->raw)
    api_stream_begin(x->q, status, content_type != NULL ? content_type : "application/octet-stream", NULL, len);
  else
    api_stream_begin(x->q, 200, "application/octet-stream", NULL, len);
}

static int dl_data(const char *data, size_t len, void *arg) {
  struct xfer *x = arg;
  struct fr_http_req *req = x->q->req;

  if (req == NULL)
    return -1;
  fr_http_stream_write(req, data, len);
  if (fr_http_pending_bytes(req) > OUT_HIGH && fr_http_on_drain(req, dl_on_drain, OUT_LOW) == 0)
    return FR_AGENT_PAUSE;
  return 0;
}

static void xfer_error(struct xfer *x, const struct fr_agent_result *res) {
  json_t *e = res->err == FR_AGENT_OK ? json_loadb(res->body, res->body_len, 0, NULL) : NULL;

  agent_error(x->q, res, e, "path");
  json_decref(e);
}

static void dl_done(const struct fr_agent_result *res, void *arg) {
  struct xfer *x = arg;
  struct api_req *q = x->q;

  x->call = NULL;
  q->gone_cb = NULL;
  if (q->streaming)
    api_stream_end(q, res->err == FR_AGENT_OK);
  else
    xfer_error(x, res);
  xfer_free(x);
}

static struct xfer *xfer_new(struct api_req *q, struct fr_adapter *a) {
  struct xfer *x = calloc(1, sizeof(*x));

  if (x == NULL) {
    api_oom(q);
    return NULL;
  }
  x->q = q;
  x->a = a;
  fr_buf_init(&x->err);
  return x;
}

static void file_download(struct api_req *q, struct fr_adapter *a, const char *id, const char *path) {
  struct fr_agent_call_opts o;
  struct xfer *x;
  char url[3 * MAX_PATH_BYTES + 32];

  if (files_path(path, url, sizeof(url)) != 0) {
    api_fail(q, 400, "invalid_path", "the path is too long", NULL);
    return;
  }
  if ((x = xfer_new(q, a)) == NULL)
    return;
  memset(&o, 0, sizeof(o));
  o.method = "GET";
  o.path = url;
  o.request_id = q->rid;
  o.on_head = dl_head;
  o.on_data = dl_data;
  o.on_done = dl_done;
  o.arg = x;
  if (xfer_start(x, id, &o) != 0)
    return;
}

static json_t *shape_entries(json_t *answer) {
  json_t *list = json_array(), *e;
  size_t i;

  json_array_foreach(json_object_get(answer, "entries"), i, e) {
    const char *t = json_string_value(json_object_get(e, "type"));
    const char *size = json_string_value(json_object_get(e, "size"));
    int64_t sz = 0;
    char mode[8];
    json_t *o;

    snprintf(mode, sizeof(mode), "%04o", (unsigned)(json_integer_value(json_object_get(e, "mode")) & 07777));
    if (size != NULL)
      (void)fr_parse_int64(size, 0, INT64_MAX, &sz);
    o = json_pack("{s:O,s:O,s:s,s:I,s:s}", "name", json_object_get(e, "name"), "path", json_object_get(e, "path"),
                  "type", t == NULL ? "other" : strcmp(t, "FILE_TYPE_FILE") == 0 ? "file"
                          : strcmp(t, "FILE_TYPE_DIRECTORY") == 0              ? "dir"
                          : strcmp(t, "FILE_TYPE_SYMLINK") == 0                ? "symlink"
                                                                               : "other",
                  "size", (json_int_t)sz, "mode", mode);
    if (o == NULL)
      continue;
    if (json_is_string(json_object_get(e, "modifiedTime")))
      json_object_set(o, "modified_at", json_object_get(e, "modifiedTime"));
    json_array_append_new(list, o);
  }
  return json_pack("{s:o}", "entries", list);
}

/* upload */

static void up_drain(void *arg) {
  struct xfer *x = arg;

  if (x->body_paused && x->q->req != NULL) {
    x->body_paused = 0;
    fr_http_body_pause(x->q->req, 0);
  }
}

static void up_done(const struct fr_agent_result *res, void *arg) {
  struct xfer *x = arg;
  struct api_req *q = xfer_call_over(x);

  if (x->answered) {
    ;
  } else if (res->err == FR_AGENT_OK && res->status >= 200 && res->status < 300 && x->body_done) {
    api_reply(q, 201, json_pack("{s:s,s:I}", "path", x->path, "size", (json_int_t)x->received), NULL);
  } else if (res->err == FR_AGENT_OK && res->status >= 200 && res->status < 300) {
    api_fail(q, 502, "agent_error", "the agent answered before the whole file arrived", NULL);
  } else {
    xfer_error(x, res);
  }
  xfer_free(x);
}

static void up_too_large(struct xfer *x) {
  char msg[200];

  snprintf(msg, sizeof(msg), "the file is larger than the tenant's max_file_bytes (%" PRId64 ")", x->limit);
  x->answered = 1;
  fr_agent_call_cancel(x->call);
  x->call = NULL;
  x->q->gone_cb = NULL;
  x->q->req->body_cb = NULL;
  api_fail(x->q, 413, "file_too_large", msg, "Connection: close\r\n");
  xfer_free(x);
}

static void up_body(struct fr_http_req *req, const char *data, size_t len) {
  struct xfer *x = api_req_of(req)->gone_arg;

  if (x == NULL || x->call == NULL || x->answered)
    return;
  if (data == NULL) {
    x->body_done = 1;
    fr_agent_call_end(x->call);
    return;
  }
  x->received += (int64_t)len;
  if (x->received > x->limit) {
    up_too_large(x);
    return;
  }
  if (fr_agent_call_write(x->call, data, len) != 0)
    return;   /* the call is ending; up_done answers */
  if (fr_agent_call_pending(x->call) > UP_HIGH && !x->body_paused) {
    x->body_paused = 1;
    fr_http_body_pause(req, 1);
  }
}

/* Starts the upload call <o> of <x> and feeds it the request's body. */
static void up_start(struct xfer *x, const char *id, struct fr_agent_call_opts *o) {
  struct api_req *q = x->q;

  if (xfer_start(x, id, o) != 0)
    return;
  if (q->req->body_streaming) {
    q->req->body_cb = up_body;
  } else {
    /* A buffered body (a router without streamed uploads): all at once. */
    up_body(q->req, q->req->body, q->req->body_len);
    if (q->req != NULL)
      up_body(q->req, NULL, 0);
  }
}

static void file_upload(struct api_req *q, struct fr_adapter *a, const char *id, const char *path) {
  struct fr_agent_call_opts o;
  struct xfer *x;
  const char *cl = fr_http_req_header(q->req, "Content-Length");
  char url[3 * MAX_PATH_BYTES + 32], msg[200];
  int64_t size = -1;

  if (files_path(path, url, sizeof(url)) != 0) {
    api_fail(q, 400, "invalid_path", "the path is too long", NULL);
    return;
  }
  if (cl != NULL && fr_parse_int64(cl, 0, INT64_MAX, &size) != 0)
    size = -1;
  if (q->ts != NULL && size > q->ts->max_file_bytes) {
    snprintf(msg, sizeof(msg), "the file is larger than the tenant's max_file_bytes (%" PRId64 ")",
             q->ts->max_file_bytes);
    api_fail(q, 413, "file_too_large", msg, "Connection: close\r\n");
    return;
  }
  if ((x = xfer_new(q, a)) == NULL)
    return;
  snprintf(x->path, sizeof(x->path), "%s", path);
  x->limit = q->ts != NULL ? q->ts->max_file_bytes : FR_DEFAULT_TENANT_FILE_BYTES;
  memset(&o, 0, sizeof(o));
  o.method = "POST";
  o.path = url;
  o.content_type = "application/octet-stream";
  o.stream_body = 1;
  o.body_size = size;
  o.request_id = q->rid;
  o.on_drain = up_drain;
  o.on_done = up_done;
  o.arg = x;
  up_start(x, id, &o);
}

static void files(struct api_req *q, struct fr_adapter *a, const char *id) {
  char path[MAX_PATH_BYTES + 2], v[8];
  const char *m = q->req->method;

  if (query_path(q, path, sizeof(path)) != 0)
    return;
  if (strcmp(m, "PUT") == 0 || strcmp(m, "POST") == 0) {
    file_upload(q, a, id, path);
  } else if (strcmp(m, "GET") == 0) {
    if (fr_http_query_get(q->req->query, "list", v, sizeof(v)) >= 0 && (strcmp(v, "1") == 0 || strcmp(v, "true") == 0))
      rpc_start(q, a, id, "filesystem.Filesystem/ListDir", json_pack("{s:s,s:i}", "path", path, "depth", 1), "path",
                shape_entries, 200);
    else
      file_download(q, a, id, path);
  } else if (strcmp(m, "DELETE") == 0) {
    rpc_start(q, a, id, "filesystem.Filesystem/Remove", json_pack("{s:s}", "path", path), "path", NULL, 204);
  } else {
    api_fail(q, 405, "method_not_allowed", "method not allowed here", "Allow: GET, PUT, DELETE\r\n");
  }
}

/* ---------------------------------------------------------------------- */
/* a request relayed as it is                                              */

static void raw_done(const struct fr_agent_result *res, void *arg) {
  struct xfer *x = arg;
  struct api_req *q = xfer_call_over(x);

  if (x->answered)
    ;
  else if (q->streaming)
    api_stream_end(q, res->err == FR_AGENT_OK);
  else if (res->err == FR_AGENT_OK)
    /* The agent's own error answer (Connect's {"code":"not_found",...} or
     * envd's {"code":404,...}): the client's SDK reads exactly that. */
    api_reply_raw(q, res->status, "application/json", res->body, res->body_len);
  else
    agent_error(q, res, NULL, "path");
  xfer_free(x);
}

void data_proxy(struct api_req *q, struct fr_adapter *a, const char *id, const char *agent_path,
                const char *headers) {
  struct fr_agent_call_opts o;
  struct xfer *x;

  if ((x = xfer_new(q, a)) == NULL)
    return;
  x->raw = 1;
  x->limit = q->ts != NULL ? q->ts->max_file_bytes : FR_DEFAULT_TENANT_FILE_BYTES;
  memset(&o, 0, sizeof(o));
  o.method = q->req->method;
  o.path = agent_path;
  o.content_type = fr_http_req_header(q->req, "Content-Type");
  o.headers = headers;
  o.request_id = q->rid;
  o.on_head = dl_head;
  o.on_data = dl_data;
  o.on_done = raw_done;
  o.arg = x;
  if (q->req->body_streaming) {
    const char *cl = fr_http_req_header(q->req, "Content-Length");
    o.stream_body = 1;
    if (cl == NULL || fr_parse_int64(cl, 0, INT64_MAX, &o.body_size) != 0)
      o.body_size = -1;
    o.on_drain = up_drain;
    up_start(x, id, &o);
    return;
  }
  o.body = q->req->body_len > 0 ? q->req->body : NULL;
  o.body_len = q->req->body_len;
  xfer_start(x, id, &o);
}

/* ---------------------------------------------------------------------- */

int data_streams_body(const struct fr_http_req *req) {
  const char *p = req->path, *files;

  if (strncmp(p, "/v1/sandboxes/", 14) != 0 || (strcmp(req->method, "PUT") != 0 && strcmp(req->method, "POST") != 0))
    return 0;
  files = strstr(p + 14, "/files");
  return files != NULL && files[6] == '\0' && memchr(p + 14, '/', (size_t)(files - p - 14)) == NULL;
}

static int method_is(struct api_req *q, const char *m, const char *allow) {
  char h[80];

  if (strcmp(q->req->method, m) == 0)
    return 1;
  snprintf(h, sizeof(h), "Allow: %s\r\n", allow);
  api_fail(q, 405, "method_not_allowed", "method not allowed here", h);
  return 0;
}

int data_route(struct api_req *q, const char *id, const char *rest) {
  struct fr_adapter *a;
  const char *sub;
  int64_t pid;
  char pidtext[24];
  size_t n;

  if (strcmp(rest, "/files") != 0 && strcmp(rest, "/processes") != 0 && strncmp(rest, "/processes/", 11) != 0)
    return 0;
  if (api_find_reachable_sandbox(q, id, &a) == NULL)
    return 1;
  if (strcmp(rest, "/files") == 0) {
    files(q, a, id);
    return 1;
  }
  if (strcmp(rest, "/processes") == 0) {
    if (strcmp(q->req->method, "POST") == 0)
      process_start(q, a, id);
    else if (method_is(q, "GET", "GET, POST"))
      rpc_start(q, a, id, "process.Process/List", json_object(), "process", shape_processes, 200);
    return 1;
  }
  /* /processes/{pid}/{output,stdin,signal,resize} */
  rest += 11;
  n = strcspn(rest, "/");
  if (n == 0 || n >= sizeof(pidtext)) {
    api_fail(q, 400, "invalid_pid", "a pid is a positive integer", NULL);
    return 1;
  }
  memcpy(pidtext, rest, n);
  pidtext[n] = '\0';
  if (parse_pid(q, pidtext, &pid) != 0)
    return 1;
  sub = rest + n;
  if (strcmp(sub, "/output") == 0) {
    if (method_is(q, "GET", "GET"))
      process_output(q, a, id, pid);
  } else if (strcmp(sub, "/stdin") == 0) {
    if (method_is(q, "POST", "POST"))
      process_stdin(q, a, id, pid);
  } else if (strcmp(sub, "/signal") == 0) {
    if (method_is(q, "POST", "POST"))
      process_signal(q, a, id, pid);
  } else if (strcmp(sub, "/resize") == 0) {
    if (method_is(q, "POST", "POST"))
      process_resize(q, a, id, pid);
  } else {
    api_fail(q, 404, "not_found", "no such endpoint", NULL);
  }
  return 1;
}
