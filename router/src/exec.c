/* exec.c - POST /v1/sandboxes/{id}/exec: the HTTP side of exec.
 *
 * Validates the body, finds the tenant's sandbox and hands the command to
 * the owning cluster's adapter (fr_adapter_exec, cluster_adapter/src/exec.c,
 * which decides how it reaches the sandbox); turns the typed outcome into
 * the API's answer. Never retried: a command is not idempotent.
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
#include "fr/util.h"
#include "api.h"
#include "metrics.h"
#include "execwait.h"
#include "router.h"
#include "route_types.h"
#include "tenants.h"

struct exec_call {
  struct router *r;
  struct api_req *q;
  struct fr_adapter *a;
  struct tenant_state *ts;  /* a reference; holds one of its exec slots while this runs */
};

static void exec_call_free(struct exec_call *x) {
  if (x == NULL)
    return;
  if (x->ts != NULL) {
    tenant_exec_done(x->r, x->ts); /* <q> may be gone already */
    tenant_unref(x->ts);
  }
  free(x);
}

/* How much of <d> is well-formed UTF-8 (no overlongs, surrogates or code
 * points past U+10FFFF: what a JSON string may carry) up to a character
 * boundary: <len>, or less when a character is cut at the end (the rest
 * goes with the next piece); -1 at a malformed byte. */
static ssize_t utf8_scan(const unsigned char *d, size_t len) {
  size_t i = 0;
  int n;

  while (i < len) {
    if (d[i] < 0x80) {
      i++;
      continue;
    }
    n = fr_utf8_char(d + i, len - i);
    if (n < 0)
      return (ssize_t)i; /* cut at the end: the rest goes with the next piece */
    if (n == 0)
      return -1;
    i += (size_t)n;
  }
  return (ssize_t)i;
}

/* Output goes out as a JSON string when it is UTF-8 and escaping at most
 * doubles it (ordinary text, even all newlines); else as base64 with
 * "<stream>_encoding":"base64" saying so. Never corrupted silently, and
 * never more than twice the raw bytes in the answer: a stream of NUL or
 * other control bytes, sixfold as JSON, goes out as base64 (4/3).
 *
 * Small answers (the common case) are one jansson document. Larger ones are
 * written by hand in pieces: the output is first scanned for its encoding
 * (the exact Content-Length depends on it), ANSWER_SCAN bytes per loop
 * turn, then ANSWER_PIECE raw bytes are encoded per turn at most, and none
 * while the client has ANSWER_HIGH bytes unread, so tens
 * of MiB of output never hold the loop or sit encoded in memory; the raw
 * copy stays charged to the router-wide exec output budget until the
 * client has it. */
#define ANSWER_ONE_SHOT (64 * 1024)
#define ANSWER_PIECE (3 * 64 * 1024) /* a multiple of 3: base64 pieces join */
#define ANSWER_SCAN (256 * 1024)     /* bytes scanned for the encoding per turn */
#define ANSWER_HIGH (1024 * 1024)
#define ANSWER_LOW (256 * 1024)

static void put_output(json_t *body, const char *key, const char *enc_key, const char *data, size_t len) {
  json_t *s = fr_json_escaped_len(data, len) <= 2 * len ? json_stringn(data, len) : NULL;

  if (s != NULL) {
    json_object_set_new(body, key, s);
  } else {
    char *b64 = malloc(fr_base64_len(len));
    if (b64 != NULL) {
      fr_base64_encode(data, len, b64);
      json_object_set_new(body, key, json_string(b64));
      json_object_set_new(body, enc_key, json_string("base64"));
      free(b64);
    }
  }
}

struct answer {
  struct api_req *q;
  struct fr_exec_budget *budget;
  size_t charged;               /* of budget->used */
  char *raw[2];                 /* stdout, stderr (copies) */
  size_t len[2], enc_len[2];
  int b64[2];                   /* base64: not UTF-8, or escaping more than doubles it */
  struct fr_buf head[3];        /* before stdout, between, after stderr */
  char tail[256];               /* exit code and flags, closing the object */
  int part;                     /* -1: scanning; 0..4: head[0], stdout, head[1], stderr, head[2] */
  size_t off;                   /* in raw[] of the current stream (scanning or sending) */
  int scan_s;                   /* the stream being scanned */
  size_t u8;                    /* its UTF-8 checked up to this character boundary */
  uv_idle_t *turn;              /* the next piece's loop turn */
};

static void answer_turn_closed(uv_handle_t *h) {
  free(h);
}

static void answer_free(struct answer *w) {
  int i;

  if (w->budget != NULL)
    w->budget->used -= w->charged;
  for (i = 0; i < 3; i++)
    fr_buf_free(&w->head[i]);
  free(w->raw[0]);
  free(w->raw[1]);
  if (w->turn != NULL)
    uv_close((uv_handle_t *)w->turn, answer_turn_closed);
  free(w);
}

static void answer_pump(struct answer *w);

static void answer_on_turn(uv_idle_t *h) {
  uv_idle_stop(h);
  answer_pump(h->data);
}

static void answer_on_drain(struct fr_http_req *req) {
  struct api_req *q = api_req_of(req);

  if (q->gone_arg != NULL)
    answer_pump(q->gone_arg);
}

static void answer_gone(struct api_req *q, void *arg) {
  struct answer *w = arg;

  (void)q;
  api_stream_end(w->q, 0);
  answer_free(w);
}

/* Scans the next piece of output for its encoding; once all is scanned,
 * sends the head. 0, or -1 when the answer is over (failed). */
static int answer_scan(struct answer *w) {
  int s = w->scan_s, i, bad = 0;
  size_t n = w->len[s] - w->off < ANSWER_SCAN ? w->len[s] - w->off : ANSWER_SCAN;
  ssize_t ok;
  int64_t total;

  w->enc_len[s] += fr_json_escaped_len(w->raw[s] + w->off, n);
  if (!w->b64[s]) {
    /* from the last character boundary: a character may span pieces */
    ok = utf8_scan((const unsigned char *)w->raw[s] + w->u8, w->off + n - w->u8);
    if (ok < 0)
      w->b64[s] = 1;
    else
      w->u8 += (size_t)ok;
    if (w->off + n == w->len[s] && w->u8 != w->len[s])
      w->b64[s] = 1; /* cut at the very end */
  }
  w->off += n;
  if (w->off < w->len[s])
    return 0;
  w->off = 0;
  w->u8 = 0;
  if (++w->scan_s < 2)
    return 0;
  /* Both scanned: the encodings and so the exact length are known. */
  bad |= fr_buf_puts(&w->head[0], "{\"stdout\":\"");
  for (i = 0; i < 2; i++) {
    w->b64[i] |= w->enc_len[i] > 2 * w->len[i];
    if (w->b64[i])
      w->enc_len[i] = 4 * ((w->len[i] + 2) / 3);
    bad |= fr_buf_putc(&w->head[i + 1], '"');
    if (w->b64[i])
      bad |= fr_buf_printf(&w->head[i + 1], ",\"%s_encoding\":\"base64\"", i == 0 ? "stdout" : "stderr");
  }
  bad |= fr_buf_puts(&w->head[1], ",\"stderr\":\"");
  bad |= fr_buf_puts(&w->head[2], w->tail);
  total = (int64_t)(w->head[0].len + w->head[1].len + w->head[2].len + w->enc_len[0] + w->enc_len[1]);
  if (bad || api_stream_begin(w->q, 200, "application/json", NULL, total) != 0)
    return -1;
  w->part = 0;
  return 0;
}

/* Does the next step; then waits for the client or the next loop turn. */
static void answer_pump(struct answer *w) {
  struct fr_http_req *req = w->q->req;
  struct fr_buf b;
  size_t n;
  int s;

  if (req == NULL)
    return;
  if (w->part < 0) {
    if (answer_scan(w) != 0)
      goto fail;
  } else if (w->part % 2 == 0) {
    if (fr_http_stream_write(req, w->head[w->part / 2].data, w->head[w->part / 2].len) != 0)
      goto gone;
    w->part++;
  } else {
    s = w->part / 2;
    n = w->len[s] - w->off < ANSWER_PIECE ? w->len[s] - w->off : ANSWER_PIECE;
    /* Text is cut between characters (the stream is checked UTF-8). */
    while (!w->b64[s] && n > 0 && w->off + n < w->len[s] && ((unsigned char)w->raw[s][w->off + n] & 0xc0) == 0x80)
      n--;
    fr_buf_init(&b);
    if (n > 0 && fr_buf_reserve(&b, w->b64[s] ? fr_base64_len(n) : 6 * n) != 0)
      goto fail;
    if (n > 0 && w->b64[s])
      b.len = fr_base64_encode(w->raw[s] + w->off, n, b.data);
    else if (n > 0)
      fr_buf_put_json_chars(&b, w->raw[s] + w->off, n); /* room reserved: cannot fail */
    if (fr_http_stream_write(req, b.data, b.len) != 0) {
      fr_buf_free(&b);
      goto gone;
    }
    fr_buf_free(&b);
    w->off += n;
    if (w->off == w->len[s]) {
      w->part++;
      w->off = 0;
    }
  }
  if (w->part == 5) {
    api_stream_end(w->q, 1);
    answer_free(w);
    return;
  }
  if (w->part >= 0 && fr_http_pending_bytes(req) > ANSWER_HIGH &&
      fr_http_on_drain(req, answer_on_drain, ANSWER_LOW) == 0)
    return;
  /* An idle handle, not a 0 ms timer: libuv before 1.45 runs a timer
   * started from a timer callback again in the same turn. */
  uv_idle_start(w->turn, answer_on_turn);
  return;
gone:
  /* The write failed (the client went away): the connection is closing
   * and tells no abort_cb of it (fr_http_stream_write), so the request
   * must not be touched again. */
  w->q->req = NULL;
fail:
  api_stream_end(w->q, 0);
  answer_free(w);
}

/* Answers <res> (FR_EXEC_OK) in pieces from the next loop turn on; 0, or
 * -ENOMEM with nothing sent. */
static int answer_start(struct api_req *q, const struct fr_exec_result *res) {
  const char *data[2] = {res->out, res->errout};
  struct fr_buf *own[2] = {res->out_buf, res->err_buf};
  struct answer *w = calloc(1, sizeof(*w));
  int i, bad = 0;

  if (w == NULL)
    return -ENOMEM;
  w->q = q;
  w->part = -1;
  w->len[0] = res->out_len;
  w->len[1] = res->err_len;
  for (i = 0; i < 3; i++)
    fr_buf_init(&w->head[i]);
  for (i = 0; i < 2; i++) {
    /* Take the captured output over when offered: copying tens of MiB
     * into fresh pages held the loop for tens of milliseconds. */
    if (own[i] != NULL && own[i]->len == w->len[i] && own[i]->data == data[i]) {
      w->raw[i] = fr_buf_detach(own[i], NULL);
      bad |= w->raw[i] == NULL;
      continue;
    }
    bad |= (w->raw[i] = malloc(w->len[i] + 1)) == NULL;
    if (w->raw[i] != NULL && w->len[i] > 0)
      memcpy(w->raw[i], data[i], w->len[i]);
  }
  if (res->timed_out)
    snprintf(w->tail, sizeof(w->tail), ",\"exit_code\":null");
  else
    snprintf(w->tail, sizeof(w->tail), ",\"exit_code\":%d", res->exit_code);
  snprintf(w->tail + strlen(w->tail), sizeof(w->tail) - strlen(w->tail),
           ",\"timed_out\":%s,\"stdout_truncated\":%s,\"stderr_truncated\":%s,\"duration_ms\":%" PRId64 "}",
           res->timed_out ? "true" : "false", res->out_truncated ? "true" : "false",
           res->err_truncated ? "true" : "false", (int64_t)(res->duration_ms + 0.5));
  bad |= (w->turn = malloc(sizeof(*w->turn))) == NULL;
  if (bad) {
    free(w->turn); /* never initialised */
    w->turn = NULL;
    answer_free(w);
    return -ENOMEM;
  }
  uv_idle_init(q->r->loop, w->turn);
  w->turn->data = w;
  w->budget = &q->r->exec_budget;
  w->charged = w->len[0] + w->len[1];
  w->budget->used += w->charged;
  q->gone_cb = answer_gone;
  q->gone_arg = w;
  uv_idle_start(w->turn, answer_on_turn);
  return 0;
}

static void exec_metrics(struct exec_call *x, const char *outcome, double ms, int via_agent) {
  struct router *r = x->q->r;
  struct fr_buf l;

  fr_buf_init(&l);
  metrics_label(&l, "cluster", fr_adapter_name(x->a));
  metrics_label(&l, "outcome", outcome);
  metrics_label(&l, "via", via_agent ? "agent" : "pods_exec");
  metrics_inc(r->metrics, "fedrouter_execs_total", l.data ? l.data : "", 1);
  fr_buf_reset(&l);
  metrics_label(&l, "cluster", fr_adapter_name(x->a));
  metrics_observe(r->metrics, "fedrouter_exec_duration_seconds", l.data ? l.data : "", ms / 1000.0);
  fr_buf_free(&l);
  if (x->q->req != NULL)
    router_note(x->q->req, "cluster", fr_adapter_name(x->a));
}

static void on_exec(const struct fr_exec_result *res, void *arg) {
  struct exec_call *x = arg;
  struct api_req *q = x->q;
  json_t *body;

  switch (res->err) {
  case FR_EXEC_OK:
    exec_metrics(x, res->timed_out ? "timed_out" : res->exit_code == 0 ? "ok" : "nonzero", res->duration_ms,
                 res->via_agent);
    if (res->out_len + res->err_len > ANSWER_ONE_SHOT && answer_start(q, res) == 0)
      break;
    body = json_object();
    put_output(body, "stdout", "stdout_encoding", res->out, res->out_len);
    put_output(body, "stderr", "stderr_encoding", res->errout, res->err_len);
    json_object_set_new(body, "exit_code", res->timed_out ? json_null() : json_integer(res->exit_code));
    json_object_set_new(body, "timed_out", json_boolean(res->timed_out));
    json_object_set_new(body, "stdout_truncated", json_boolean(res->out_truncated));
    json_object_set_new(body, "stderr_truncated", json_boolean(res->err_truncated));
    json_object_set_new(body, "duration_ms", json_integer((json_int_t)(res->duration_ms + 0.5)));
    api_reply(q, 200, body, NULL);
    break;
  case FR_EXEC_NOT_FOUND:
    exec_metrics(x, "error", res->duration_ms, res->via_agent);
    api_fail(q, 404, "sandbox_not_found", res->message, NULL);
    break;
  case FR_EXEC_NOT_RUNNING:
    exec_metrics(x, "error", res->duration_ms, res->via_agent);
    api_fail(q, 409, "sandbox_not_running", res->message, NULL);
    break;
  case FR_EXEC_UNAVAILABLE:
    exec_metrics(x, "error", res->duration_ms, res->via_agent);
    api_fail(q, 503, "cluster_unavailable", res->message, "Retry-After: 5\r\n");
    break;
  case FR_EXEC_AGENT_UNAVAILABLE:
    exec_metrics(x, "error", res->duration_ms, 1);
    api_fail(q, 503, "agent_unavailable", res->message, "Retry-After: 1\r\n");
    break;
  case FR_EXEC_AGENT_DIED:
    exec_metrics(x, "error", res->duration_ms, 1);
    api_fail(q, 502, "agent_died", res->message, NULL);
    break;
  case FR_EXEC_BUSY:
    exec_metrics(x, "error", res->duration_ms, 1);
    api_fail(q, 429, "agent_busy", res->message, "Retry-After: 1\r\n");
    break;
  default:
    exec_metrics(x, "error", res->duration_ms, res->via_agent);
    api_fail(q, 502, "exec_failed", res->message, NULL);
    break;
  }
  exec_call_free(x);
}

/* The argv of the body as a NULL-terminated array borrowing its strings,
 * or NULL after answering invalid_argv / out_of_memory. */
char **api_body_argv(struct api_req *q, json_t *argv) {
  json_t *v;
  char **out;
  size_t i;

  if (!json_is_array(argv) || json_array_size(argv) == 0) {
    api_fail(q, 400, "invalid_argv", "argv must be a non-empty array of strings", NULL);
    return NULL;
  }
  json_array_foreach(argv, i, v) {
    if (!json_is_string(v) || (i == 0 && json_string_length(v) == 0) ||
        strlen(json_string_value(v)) != json_string_length(v)) {
      api_fail(q, 400, "invalid_argv", "argv must be strings without NUL bytes, the first non-empty", NULL);
      return NULL;
    }
  }
  out = calloc(json_array_size(argv) + 1, sizeof(*out));
  if (out == NULL) {
    api_oom(q);
    return NULL;
  }
  json_array_foreach(argv, i, v) out[i] = (char *)json_string_value(v);
  return out;
}

int api_body_env_workdir(struct api_req *q, json_t *j, json_t **env_out, const char **workdir_out) {
  json_t *v, *env, *e;
  const char *k;

  *env_out = NULL;
  *workdir_out = NULL;
  if ((v = json_object_get(j, "workdir")) != NULL) {
    if (!json_is_string(v) || json_string_value(v)[0] != '/') {
      api_field_fail(q, "workdir", "workdir must be an absolute path");
      return -1;
    }
    if (strlen(json_string_value(v)) != json_string_length(v)) {
      api_field_fail(q, "workdir", "workdir must not contain NUL");
      return -1;
    }
    *workdir_out = json_string_value(v);
  }
  if ((env = json_object_get(j, "env")) != NULL) {
    if (!json_is_object(env)) {
      api_field_fail(q, "env", "env must be an object of strings");
      return -1;
    }
    json_object_foreach(env, k, e) {
      if (!json_is_string(e) || *k == '\0' || strchr(k, '=') != NULL ||
          strlen(json_string_value(e)) != json_string_length(e)) {
        api_field_fail(q, "env", "env must map names (without '=') to strings without NUL");
        return -1;
      }
    }
    *env_out = env;
  }
  return 0;
}

/* An exec waiting for a slot (execwait.c): its body and sandbox id. */
struct exec_wait {
  json_t *j;
  char id[256];
};

static void exec_begin(struct api_req *q, json_t *j, const char *id, int slot);

static void exec_resume(struct api_req *q, void *arg) {
  struct exec_wait *w = arg;
  json_t *j = w->j;
  char id[256];

  snprintf(id, sizeof(id), "%s", w->id);
  free(w);
  exec_begin(q, j, id, 1);
}

static void exec_wait_drop(void *arg) {
  struct exec_wait *w = arg;

  json_decref(w->j);
  free(w);
}

static const char *const exec_fields[] = {"argv", "stdin", "env", "workdir", "timeout_s", "max_output_bytes",
                                          "stream", NULL};

void exec_sandbox(struct api_req *q, const struct route_params *p) {
  /* NUL is allowed in the JSON so a NUL inside argv gets invalid_argv
   * below rather than a vague parse error; stdin may carry it legitimately. */
  json_t *j = api_body_object(q, exec_fields, JSON_ALLOW_NUL);

  if (j != NULL)
    exec_begin(q, j, p->id, 0);
}

/* Runs the exec of body <j> (taken) in sandbox <id>. <slot>: one of the
 * tenant's exec slots is held for it already (it waited for one); else
 * it takes one, or waits (execwait.c), or is refused. */
static void exec_begin(struct api_req *q, json_t *j, const char *id, int slot) {
  const struct fr_config *cfg = q->cfg;
  struct fr_exec_spec spec;
  struct exec_call *x = NULL;
  struct exec_wait *w;
  struct fr_adapter *a;
  json_t *v, *env = NULL;
  char **argv = NULL, msg[300];
  const char *workdir = NULL;
  int64_t timeout = 60, maxout = cfg->max_exec_output_bytes;
  int rc;

  if ((argv = api_body_argv(q, json_object_get(j, "argv"))) == NULL)
    goto out;
  if ((v = json_object_get(j, "stream")) != NULL && !json_is_boolean(v)) {
    api_field_fail(q, "stream", "stream must be true or false");
    goto out;
  }
  if ((v = json_object_get(j, "timeout_s")) != NULL) {
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > cfg->max_exec_timeout_s) {
      snprintf(msg, sizeof(msg), "timeout_s must be an integer from 1 to %" PRId64, cfg->max_exec_timeout_s);
      api_field_fail(q, "timeout_s", msg);
      goto out;
    }
    timeout = json_integer_value(v);
  }
  if ((v = json_object_get(j, "max_output_bytes")) != NULL) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > cfg->max_exec_output_bytes) {
      snprintf(msg, sizeof(msg), "max_output_bytes must be an integer from 0 to %" PRId64, cfg->max_exec_output_bytes);
      api_field_fail(q, "max_output_bytes", msg);
      goto out;
    }
    maxout = json_integer_value(v);
  }
  if ((v = json_object_get(j, "stdin")) != NULL && !json_is_string(v)) {
    api_field_fail(q, "stdin", "stdin must be a string");
    goto out;
  }
  if (api_body_env_workdir(q, j, &env, &workdir) != 0)
    goto out;
  if (api_find_reachable_sandbox(q, id, &a) == NULL)
    goto out;
  if (!slot) {
    /* Past max_concurrent_execs the exec waits for a slot (or is refused
     * past the wait's bound): it runs again from here once it has one. */
    if (strlen(id) >= sizeof(w->id) || (w = calloc(1, sizeof(*w))) == NULL) {
      api_oom(q);
      goto out;
    }
    w->j = j;
    snprintf(w->id, sizeof(w->id), "%s", id);
    rc = execwait_take(q, exec_resume, exec_wait_drop, w);
    if (rc <= 0) {
      if (rc == 0)
        j = NULL; /* the wait holds it */
      else
        free(w);
      goto out;
    }
    free(w);
    slot = 1;
  }
  memset(&spec, 0, sizeof(spec));
  spec.argv = argv;
  spec.env = env;
  spec.workdir = workdir;
  if ((v = json_object_get(j, "stdin")) != NULL && json_string_length(v) > 0) {
    spec.stdin_data = json_string_value(v);
    spec.stdin_len = json_string_length(v);
  }
  spec.timeout_s = timeout;
  spec.max_output = (size_t)maxout;
  spec.budget = &q->r->exec_budget;
  spec.request_id = q->rid;
  if (json_is_true(json_object_get(j, "stream"))) {
    /* The stream takes the slot over (and gives it back when it ends, or
     * at once when it cannot start). */
    slot = 0;
    data_exec_stream(q, a, id, &spec);
    goto out;
  }
  x = calloc(1, sizeof(*x));
  if (x == NULL) {
    api_oom(q);
    goto out;
  }
  x->r = q->r;
  x->q = q;
  x->a = a;
  x->ts = tenant_ref(q->ts);
  slot = 0; /* x holds it */
  /* Deferred first: the answer on a failure to start is the finish too. */
  api_defer(q);
  rc = fr_adapter_exec(a, strchr(id, '.') + 1, &spec, on_exec, x);
  if (rc == 0) {
    x = NULL;
  } else if (rc == -EHOSTDOWN) {
    snprintf(msg, sizeof(msg), "cluster %s is unavailable", fr_adapter_name(a));
    api_fail(q, 503, "cluster_unavailable", msg, "Retry-After: 5\r\n");
  } else if (rc == -E2BIG) {
    snprintf(msg, sizeof(msg),
             "argv and env take more than %d bytes once URL-encoded, the most an exec through the "
             "cluster's pods/exec can carry; pass large input on stdin or in a file",
             FR_EXEC_MAX_ARGV_BYTES);
    api_fail(q, 400, "invalid_argv", msg, NULL);
  } else if (rc == -ENOENT) {
    api_fail(q, 404, "sandbox_not_found", "the sandbox no longer exists", NULL);
  } else {
    api_oom(q);
  }
out:
  /* A slot held for an exec that did not start goes to the next in line. */
  if (slot)
    tenant_exec_done(q->r, q->ts);
  exec_call_free(x);
  free(argv);
  json_decref(j);
}
