/* stream.c - NDJSON answers fed by a process stream: the streaming exec
 * (POST .../exec with "stream":true) and a process's output (GET
 * .../processes/{pid}/output, with or without follow). Part of the data
 * plane (data.c). */
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
#include "execwait.h"
#include "router.h"
#include "tenants.h"
#include "route_types.h"

/* ---------------------------------------------------------------------- */
/* NDJSON answers fed by a process stream (streaming exec, output)          */

enum nd_kind { ND_EXEC, ND_OUTPUT };

struct nd {
  struct api_req *q;
  struct fr_adapter *a;
  struct fr_proc_stream *ps;
  enum nd_kind kind;
  struct tenant_state *ts;      /* ND_EXEC: a reference; holds one of its exec slots */
  struct router *r;
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
  if (n->ts != NULL) {
    tenant_exec_done(n->r, n->ts); /* <q> may be gone already */
    tenant_unref(n->ts);
  }
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
    /* Text when it is UTF-8 and escaping costs no more than base64 would
     * (4/3, with room for a short chunk's newline): a stream of NUL or
     * other control bytes, sixfold as JSON escapes, goes out as base64. */
    s = fr_json_escaped_len(b.data, whole) <= whole + whole / 3 + 16 ? json_stringn(b.data, whole) : NULL;
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
     * not start reads as a shell would say it, as the buffered exec does;
     * a sandbox at its process limit is 429 agent_busy (data__agent_error). */
    if (n->kind == ND_EXEC && code != NULL && res->err == FR_AGENT_OK && strcmp(code, "resource_exhausted") != 0) {
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
      data__agent_error(q, res, e, "process");
      json_decref(e);
    } else {
      data__agent_error(q, res, NULL, "process");
    }
    nd_free(n);
    return;
  }
  if (n->kind == ND_OUTPUT && !n->follow && code == NULL && res->err == FR_AGENT_OK) {
    /* Without follow the agent ends the stream after what it kept at
     * attach: the process still runs. */
    nd_flush(n);
    nd_line(n, json_pack("{s:b}", "running", 1));
    nd_finish(n, 1);
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
  struct nd *n;
  int rc;

  n = nd_new(q, a, ND_EXEC);
  if (n == NULL) {
    tenant_exec_done(q->r, q->ts);
    api_oom(q);
    return;
  }
  rc = fr_adapter_exec_stream(a, data__pod_of(id), spec, nd_event, nd_done, n, &n->ps);
  if (rc != 0) {
    free(n);
    tenant_exec_done(q->r, q->ts);
    data__start_failed(q, a, rc);
    return;
  }
  n->ts = tenant_ref(q->ts);
  n->r = q->r;
  nd_started(n);
  if (q->req != NULL)
    router_note(q->req, "cluster", fr_adapter_name(a));
}


/* GET /v1/sandboxes/{id}/processes/{pid}/output */
void procs_output(struct api_req *q, const struct route_params *p) {
  struct fr_adapter *a = p->a;
  const char *id = p->id;
  int64_t pid = p->pid, from;
  char v[24];
  struct nd *n;
  int rc;

  n = nd_new(q, a, ND_OUTPUT);
  if (n == NULL) {
    api_oom(q);
    return;
  }
  n->follow = fr_http_query_get(q->req->query, "follow", v, sizeof(v)) >= 0 &&
              (strcmp(v, "1") == 0 || strcmp(v, "true") == 0);
  /* ?from=N: resume at byte N of the output (what a reconnecting client
   * already has), from any replica; bytes the agent no longer keeps are
   * counted in a {"lost_bytes":N} line. */
  rc = fr_http_query_get(q->req->query, "from", v, sizeof(v));
  if (rc == -ENOENT) {
    from = 0;
  } else if (rc < 0 || fr_parse_int64(v, 0, INT64_MAX, &from) != 0) {
    free(n);
    api_fail(q, 400, "invalid_query", "from must be a byte offset of the output: an integer >= 0", NULL);
    return;
  }
  rc = fr_adapter_proc_attach(a, data__pod_of(id), pid, from, n->follow, q->rid, nd_event, nd_done, n, &n->ps);
  if (rc != 0) {
    free(n);
    data__start_failed(q, a, rc);
    return;
  }
  nd_started(n);
}

