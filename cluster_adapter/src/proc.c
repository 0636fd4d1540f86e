/* proc.c - the agent's process service as events, and its unary calls.
 *
 * A Start or Connect request is one Connect envelope (flag byte, 4-byte
 * big-endian length, JSON); the answer is a stream of such envelopes, the
 * last one flagged end-of-stream. connect_feed() cuts them out of the
 * bytes as they arrive; proc_message() turns each into an fr_proc_event
 * with its output base64-decoded. Everything goes through the raw agent
 * call of agent.c, so the transport stays behind one seam.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapter_internal.h"
#include "fr/buf.h"
#include "fr/util.h"

/* ---- Connect envelopes ---- */

int connect_envelope(json_t *msg, char **out, size_t *outlen) {
  char *text = json_dumps(msg, JSON_COMPACT), *env;
  size_t n;

  if (text == NULL)
    return -ENOMEM;
  n = strlen(text);
  env = malloc(n + 5);
  if (env == NULL) {
    free(text);
    return -ENOMEM;
  }
  env[0] = 0;
  env[1] = (char)(n >> 24);
  env[2] = (char)(n >> 16);
  env[3] = (char)(n >> 8);
  env[4] = (char)n;
  memcpy(env + 5, text, n);
  free(text);
  *out = env;
  *outlen = n + 5;
  return 0;
}

int connect_feed(struct fr_buf *pending, const char *data, size_t len,
                 int (*on_msg)(int flags, const char *msg, size_t len, void *arg), void *arg) {
  const unsigned char *b;
  size_t n, off = 0;
  int r = 0;

  if (fr_buf_append(pending, data, len) != 0)
    return -ENOMEM;
  while (pending->len - off >= 5) {
    b = (const unsigned char *)pending->data + off;
    n = (size_t)b[1] << 24 | (size_t)b[2] << 16 | (size_t)b[3] << 8 | (size_t)b[4];
    if (n > AGENT_MAX_ENVELOPE) {
      r = -E2BIG;
      break;
    }
    if (pending->len - off < 5 + n)
      break;
    r = on_msg(b[0], pending->data + off + 5, n, arg);
    off += 5 + n;
    if (r < 0)
      break;
  }
  fr_buf_consume(pending, off);
  return r;
}

int agent_exit_code(const char *status, int exit_code, int exited) {
  static const struct {
    const char *name;
    int sig;
  } sigs[] = {{"hangup", 1}, {"interrupt", 2}, {"quit", 3}, {"aborted", 6}, {"killed", 9},
              {"segmentation fault", 11}, {"broken pipe", 13}, {"terminated", 15}};
  size_t i;

  if (exited || status == NULL || strncmp(status, "signal: ", 8) != 0)
    return exit_code;
  for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
    if (strcmp(status + 8, sigs[i].name) == 0)
      return 128 + sigs[i].sig;
  return 128 + 9;
}

/* ---- process streams ---- */

struct fr_proc_stream {
  struct fr_agent_call *call;
  fr_proc_event_cb on_event;
  fr_proc_done_cb on_done;
  void *arg;
  struct fr_buf pending;        /* a partial envelope */
  char code[64];                /* the end-of-stream error, if any */
  char message[512];
  int has_error;
  int pause;                    /* the consumer asked to pause after this piece */
  int stop;                     /* ... or to stop */
};

static void stream_free(struct fr_proc_stream *s) {
  fr_buf_free(&s->pending);
  free(s);
}

static int emit(struct fr_proc_stream *s, struct fr_proc_event *ev) {
  int r;

  if (s->stop)
    return -1;
  r = s->on_event(ev, s->arg);
  if (r == FR_AGENT_PAUSE)
    s->pause = 1;
  else if (r != 0)
    s->stop = 1;
  return s->stop ? -1 : 0;
}

static int emit_data(struct fr_proc_stream *s, enum fr_proc_event_kind kind, const char *b64) {
  struct fr_proc_event ev;
  size_t n = strlen(b64);
  unsigned char *raw;
  long len;
  int r;

  if (n == 0)
    return 0;
  raw = malloc(n / 4 * 3 + 4);
  len = raw != NULL ? fr_base64_decode(b64, n, raw) : -1;
  if (len < 0) {
    free(raw);
    return -1;
  }
  memset(&ev, 0, sizeof(ev));
  ev.kind = kind;
  ev.data = (const char *)raw;
  ev.len = (size_t)len;
  r = emit(s, &ev);
  free(raw);
  return r;
}

static int proc_message(int flags, const char *data, size_t len, void *arg) {
  struct fr_proc_stream *s = arg;
  json_t *j = json_loadb(data, len, 0, NULL), *ev, *x;
  struct fr_proc_event e;
  int r = 0;

  if (j == NULL)
    return -1;
  memset(&e, 0, sizeof(e));
  if (flags & 0x02) {
    json_t *err = json_object_get(j, "error");
    if (err != NULL) {
      const char *code = json_string_value(json_object_get(err, "code"));
      const char *msg = json_string_value(json_object_get(err, "message"));
      snprintf(s->code, sizeof(s->code), "%s", code != NULL ? code : "unknown");
      snprintf(s->message, sizeof(s->message), "%s", msg != NULL ? msg : "");
      s->has_error = 1;
    }
  } else if ((ev = json_object_get(j, "event")) != NULL) {
    if ((x = json_object_get(ev, "start")) != NULL) {
      e.kind = FR_PROC_START;
      e.pid = json_integer_value(json_object_get(x, "pid"));
      r = emit(s, &e);
    } else if ((x = json_object_get(ev, "data")) != NULL) {
      const char *o = json_string_value(json_object_get(x, "stdout"));
      const char *er = json_string_value(json_object_get(x, "stderr"));
      const char *t = json_string_value(json_object_get(x, "pty"));
      if (o != NULL)
        r = emit_data(s, FR_PROC_STDOUT, o);
      if (r == 0 && er != NULL)
        r = emit_data(s, FR_PROC_STDERR, er);
      if (r == 0 && t != NULL)
        r = emit_data(s, FR_PROC_PTY, t);
    } else if ((x = json_object_get(ev, "end")) != NULL) {
      e.kind = FR_PROC_END;
      e.error = json_string_value(json_object_get(x, "error"));
      e.timed_out = e.error != NULL && strstr(e.error, "timed out") != NULL;
      e.exit_code = agent_exit_code(json_string_value(json_object_get(x, "status")),
                                    (int)json_integer_value(json_object_get(x, "exitCode")),
                                    json_is_true(json_object_get(x, "exited")));
      r = emit(s, &e);
    }
    /* keepalive events carry nothing */
  }
  json_decref(j);
  return r;
}

static void on_stream_head(int status, const char *content_type, const char *headers, void *arg) {
  struct fr_proc_stream *s = arg;
  struct fr_proc_event e;
  char v[32];
  int64_t n;

  (void)status;
  (void)content_type;
  /* Only a reattach's answer carries the offsets. */
  if (fr_agent_header(headers, "Fr-Output-End", v, sizeof(v)) != 0)
    return;
  memset(&e, 0, sizeof(e));
  e.kind = FR_PROC_ATTACHED;
  e.out_end = fr_parse_int64(v, 0, INT64_MAX, &n) == 0 ? n : -1;
  e.out_start = fr_agent_header(headers, "Fr-Output-Start", v, sizeof(v)) == 0 &&
                        fr_parse_int64(v, 0, INT64_MAX, &n) == 0
                    ? n
                    : -1;
  e.dropped = fr_agent_header(headers, "Fr-Output-Dropped", v, sizeof(v)) == 0 &&
                      fr_parse_int64(v, 0, INT64_MAX, &n) == 0
                  ? n
                  : -1;
  (void)emit(s, &e);
}

static int on_stream_data(const char *data, size_t len, void *arg) {
  struct fr_proc_stream *s = arg;
  int r;

  if (s->stop)
    return -1;
  r = connect_feed(&s->pending, data, len, proc_message, s);
  if (r < 0 || s->stop) {
    s->stop = 1;
    return -1;
  }
  if (s->pause) {
    s->pause = 0;
    return FR_AGENT_PAUSE;
  }
  return 0;
}

static void on_stream_done(const struct fr_agent_result *res, void *arg) {
  struct fr_proc_stream *s = arg;
  struct fr_agent_result copy = *res;
  char msg[300];

  /* A non-2xx answer of the agent is an error in Connect's unary shape. */
  if (res->err == FR_AGENT_OK && res->status >= 300 && !s->has_error) {
    json_t *j = json_loadb(res->body, res->body_len, 0, NULL);
    const char *code = json_string_value(json_object_get(j, "code"));
    const char *m = json_string_value(json_object_get(j, "message"));
    snprintf(s->code, sizeof(s->code), "%s", code != NULL ? code : "unknown");
    snprintf(s->message, sizeof(s->message), "%s", m != NULL ? m : "the agent refused the request");
    s->has_error = 1;
    json_decref(j);
  }
  if (res->err == FR_AGENT_CANCELED && !s->has_error) {
    snprintf(msg, sizeof(msg), "the agent's stream could not be read");
    copy.err = FR_AGENT_UNAVAILABLE;
    copy.message = msg;
  }
  s->call = NULL;
  s->on_done(&copy, s->has_error ? s->code : NULL, s->has_error ? s->message : NULL, s->arg);
  stream_free(s);
}

static int stream_open(struct fr_adapter *a, const char *pod, const char *method, json_t *req,
                       const char *request_id, fr_proc_event_cb on_event, fr_proc_done_cb on_done,
                       void *arg, struct fr_proc_stream **out) {
  struct fr_agent_call_opts o;
  struct fr_proc_stream *s;
  char *body = NULL, path[64];
  size_t len = 0;
  int rc;

  if (out != NULL)
    *out = NULL;
  if (on_event == NULL || on_done == NULL)
    return -EINVAL;
  if (connect_envelope(req, &body, &len) != 0)
    return -ENOMEM;
  s = calloc(1, sizeof(*s));
  if (s == NULL) {
    free(body);
    return -ENOMEM;
  }
  fr_buf_init(&s->pending);
  s->on_event = on_event;
  s->on_done = on_done;
  s->arg = arg;
  snprintf(path, sizeof(path), "/process.Process/%s", method);
  memset(&o, 0, sizeof(o));
  o.method = "POST";
  o.path = path;
  o.content_type = "application/connect+json";
  /* Keepalives keep a quiet stream visibly alive for every hop. */
  o.headers = "Connect-Protocol-Version: 1\nKeepalive-Ping-Interval: 30";
  o.body = body;
  o.body_len = len;
  o.request_id = request_id;
  o.on_head = on_stream_head;
  o.on_data = on_stream_data;
  o.on_done = on_stream_done;
  o.arg = s;
  rc = fr_adapter_agent_call(a, pod, &o, &s->call);
  free(body);
  if (rc != 0) {
    stream_free(s);
    return rc;
  }
  if (out != NULL)
    *out = s;
  return 0;
}

json_t *proc_start_request(const struct fr_proc_spec *spec) {
  json_t *proc, *args, *req;
  size_t i;

  if (spec == NULL || (spec->argv == NULL) == (spec->cmd == NULL) ||
      (spec->argv != NULL && (spec->argv[0] == NULL || spec->argv[0][0] == '\0')) ||
      (spec->stdin_data != NULL && spec->pty_cols > 0))
    return NULL;
  args = json_array();
  if (spec->argv != NULL) {
    for (i = 1; spec->argv[i] != NULL; i++)
      json_array_append_new(args, json_string(spec->argv[i]));
    proc = json_pack("{s:s,s:o}", "cmd", spec->argv[0], "args", args);
  } else {
    json_array_append_new(args, json_string("-c"));
    json_array_append_new(args, json_string(spec->cmd));
    proc = json_pack("{s:s,s:o}", "cmd", "/bin/sh", "args", args);
  }
  if (proc != NULL && spec->env != NULL)
    json_object_set(proc, "envs", spec->env);
  if (proc != NULL && spec->workdir != NULL)
    json_object_set_new(proc, "cwd", json_string(spec->workdir));
  req = json_pack("{s:o}", "process", proc);
  if (req == NULL)
    return NULL;
  if (spec->stdin_open)
    json_object_set_new(req, "stdin", json_true());
  if (spec->tag != NULL)
    json_object_set_new(req, "tag", json_string(spec->tag));
  if (spec->pty_cols > 0 && spec->pty_rows > 0)
    json_object_set_new(req, "pty", json_pack("{s:{s:i,s:i}}", "size", "cols", spec->pty_cols, "rows",
                                              spec->pty_rows));
  if (spec->timeout_ms > 0)
    json_object_set_new(req, "timeoutMs", json_integer(spec->timeout_ms));
  if (spec->kill_on_disconnect)
    json_object_set_new(req, "killOnDisconnect", json_true());
  if (spec->stdin_data != NULL && spec->stdin_len > 0) {
    char *b64 = malloc(fr_base64_len(spec->stdin_len));
    if (b64 == NULL) {
      json_decref(req);
      return NULL;
    }
    fr_base64_encode(spec->stdin_data, spec->stdin_len, b64);
    json_object_set_new(req, "stdinData", json_string(b64));
    free(b64);
  }
  return req;
}

int fr_adapter_proc_start(struct fr_adapter *a, const char *pod, const struct fr_proc_spec *spec,
                          fr_proc_event_cb on_event, fr_proc_done_cb on_done, void *arg,
                          struct fr_proc_stream **out) {
  json_t *req;
  int rc;

  if (spec == NULL || (spec->argv == NULL) == (spec->cmd == NULL) ||
      (spec->stdin_data != NULL && spec->pty_cols > 0))
    return -EINVAL;
  req = proc_start_request(spec);
  if (req == NULL)
    return -ENOMEM;
  rc = stream_open(a, pod, "Start", req, spec->request_id, on_event, on_done, arg, out);
  json_decref(req);
  return rc;
}

int fr_adapter_proc_attach(struct fr_adapter *a, const char *pod, int64_t pid, int64_t replay_from, int follow,
                           const char *request_id, fr_proc_event_cb on_event, fr_proc_done_cb on_done,
                           void *arg, struct fr_proc_stream **out) {
  json_t *req;
  int rc;

  if (pid <= 0 || replay_from < 0)
    return -EINVAL;
  req = json_pack("{s:{s:I}}", "process", "pid", (json_int_t)pid);
  if (req != NULL && replay_from > 0)
    json_object_set_new(req, "replayFrom", json_integer(replay_from));
  /* Without follow the agent ends the stream after what it kept at
   * attach (an agent that predates "follow" streams on; the caller cuts). */
  if (req != NULL && !follow)
    json_object_set_new(req, "follow", json_false());
  if (req == NULL)
    return -ENOMEM;
  rc = stream_open(a, pod, "Connect", req, request_id, on_event, on_done, arg, out);
  json_decref(req);
  return rc;
}

void fr_proc_stream_resume(struct fr_proc_stream *s) {
  if (s != NULL && s->call != NULL)
    fr_agent_call_resume(s->call);
}

void fr_proc_stream_cancel(struct fr_proc_stream *s) {
  if (s == NULL)
    return;
  fr_agent_call_cancel(s->call);
  stream_free(s);
}

/* ---- unary calls ---- */

struct rpc_call {
  fr_agent_rpc_cb cb;
  void *arg;
  struct fr_buf body;
};

static int on_rpc_data(const char *data, size_t len, void *arg) {
  struct rpc_call *rc = arg;

  if (rc->body.len + len > AGENT_MAX_ENVELOPE)
    return -1;
  return fr_buf_append(&rc->body, data, len) != 0 ? -1 : 0;
}

static void on_rpc_done(const struct fr_agent_result *res, void *arg) {
  struct rpc_call *rc = arg;
  json_t *answer = NULL;

  if (res->err == FR_AGENT_OK) {
    if (res->status >= 200 && res->status < 300)
      answer = json_loadb(rc->body.data != NULL ? rc->body.data : "", rc->body.len, 0, NULL);
    else
      answer = json_loadb(res->body, res->body_len, 0, NULL);
  }
  rc->cb(res, answer, rc->arg);
  json_decref(answer);
  fr_buf_free(&rc->body);
  free(rc);
}

int fr_adapter_agent_rpc(struct fr_adapter *a, const char *pod, const char *method, json_t *req,
                         const char *request_id, fr_agent_rpc_cb cb, void *arg) {
  struct fr_agent_call_opts o;
  struct rpc_call *rc;
  char path[128], *text;
  int r;

  if (method == NULL || cb == NULL || strlen(method) > 100 || strchr(method, '/') == NULL)
    return -EINVAL;
  text = json_dumps(req, JSON_COMPACT);
  rc = calloc(1, sizeof(*rc));
  if (text == NULL || rc == NULL) {
    free(text);
    free(rc);
    return -ENOMEM;
  }
  rc->cb = cb;
  rc->arg = arg;
  fr_buf_init(&rc->body);
  snprintf(path, sizeof(path), "/%s", method);
  memset(&o, 0, sizeof(o));
  o.method = "POST";
  o.path = path;
  o.content_type = "application/json";
  o.headers = "Connect-Protocol-Version: 1";
  o.body = text;
  o.body_len = strlen(text);
  o.timeout_ms = AGENT_RPC_TIMEOUT_MS;
  o.request_id = request_id;
  o.on_data = on_rpc_data;
  o.on_done = on_rpc_done;
  o.arg = rc;
  r = fr_adapter_agent_call(a, pod, &o, NULL);
  free(text);
  if (r != 0) {
    fr_buf_free(&rc->body);
    free(rc);
  }
  return r;
}
