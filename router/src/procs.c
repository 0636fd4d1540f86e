/* procs.c - background processes in a sandbox: start, list, stdin,
 * signals, PTY resize (the output is stream.c's). Part of the data plane
 * (data.c). */
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
#include "data.h"
#include "router.h"
#include "route_types.h"

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
    } else if (code != NULL && res->err == FR_AGENT_OK) {
      /* The sandbox's process limit: 429 agent_busy. */
      json_t *e = json_pack("{s:s,s:s}", "code", code, "message", message != NULL ? message : "");
      data__agent_error(b->q, res, e, "process");
      json_decref(e);
    } else {
      data__agent_error(b->q, res, NULL, "process");
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

void procs_start(struct api_req *q, const struct route_params *p) {
  struct fr_adapter *a = p->a;
  const char *id = p->id;
  static const char *const known[] = {"argv", "cmd", "env", "workdir", "stdin", "pty", "timeout_s", "tag", NULL};
  const struct fr_config *cfg = q->cfg;
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
  rc = fr_adapter_proc_start(a, data__pod_of(id), &ps, bg_event, bg_done, b, &b->ps);
  if (rc != 0) {
    free(b);
    data__start_failed(q, a, rc);
    goto out;
  }
  api_defer(q);
  q->gone_cb = bg_gone;
  q->gone_arg = b;
out:
  free(argv);
  json_decref(j);
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

void procs_stdin(struct api_req *q, const struct route_params *p) {
  struct fr_adapter *a = p->a;
  const char *id = p->id;
  int64_t pid = p->pid;
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
    data__rpc_start(q, a, id, "process.Process/CloseStdin", json_pack("{s:{s:I}}", "process", "pid", (json_int_t)pid),
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
  c = data__rpc_start(q, a, id, "process.Process/SendInput", in, "process", NULL, 204);
  if (c == NULL) {
    json_decref(pty);
    return;
  }
  c->pid = pid;
  c->pty_retry = pty;
  c->close_after = close_it;
}

void procs_signal(struct api_req *q, const struct route_params *p) {
  struct fr_adapter *a = p->a;
  const char *id = p->id;
  int64_t pid = p->pid;
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
  data__rpc_start(q, a, id, "process.Process/SendSignal",
            json_pack("{s:{s:I},s:o}", "process", "pid", (json_int_t)pid, "signal", sig), "process", NULL, 204);
  json_decref(j);
}

void procs_resize(struct api_req *q, const struct route_params *p) {
  struct fr_adapter *a = p->a;
  const char *id = p->id;
  int64_t pid = p->pid;
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
  data__rpc_start(q, a, id, "process.Process/Update",
            json_pack("{s:{s:I},s:{s:{s:I,s:I}}}", "process", "pid", (json_int_t)pid, "pty", "size", "cols", cols,
                      "rows", rows),
            "process", NULL, 204);
}


void procs_list(struct api_req *q, const struct route_params *p) {
  data__rpc_start(q, p->a, p->id, "process.Process/List", json_object(), "process", shape_processes, 200);
}
