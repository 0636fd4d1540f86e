/* proxy.c - one forwarded request: the connection to the pod, the
 * request body up, the answer down, and the tunnel after a 101.
 *
 * An exchange is a small state machine (ex_set_state()):
 *
 *   CONNECTING --connected--> REQUEST --answer head--> RESPONSE --end--> CLOSING
 *        |                       |  \--101 (upgrade)--> TUNNEL --both ends--> CLOSING
 *        +--refused, timeout-----+--error / client gone / idle---------------> CLOSING
 *
 * Both directions stream with backpressure, and neither holds more than
 * about HIGH_WATER plus one read: the client's body (or tunnel input) is
 * paused while more than HIGH_WATER bytes wait to be written to the pod
 * and resumed below LOW_WATER; the pod's answer stops being read while
 * more than HIGH_WATER bytes wait to be written to the client, and is read
 * again once they fell to LOW_WATER (fr_http_on_drain()). The answer's
 * framing is parsed with http-parser, so the client's connection is kept
 * alive after a whole answer whatever framing the pod used (length,
 * chunked, or until it closes). The connection to the pod is closed after
 * every exchange (Connection: close): a connection on a pod network costs
 * one round trip, the router-facing one (TLS) is what is kept.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>

#include "fr/buf.h"
#include "fr/log.h"
#include "fr/util.h"
#include "gateway.h"
#include "target.h"

/* Queued bytes towards either side above which the other side is no
 * longer read, and below which it is read again. 256 KiB keeps a 10 Gb/s
 * path busy at a 0.2 ms round trip while bounding what a slow reader can
 * make the gateway hold: ~HIGH_WATER + one 64 KiB read per direction. */
#define HIGH_WATER ((size_t)256 << 10)
#define LOW_WATER ((size_t)64 << 10)
/* The pod's answer head: status line and headers. */
#define MAX_RESPONSE_HEAD ((size_t)64 << 10)
#define READ_SIZE 65536

#define LOGC "gateway"

enum ex_state { EX_CONNECTING, EX_REQUEST, EX_RESPONSE, EX_TUNNEL, EX_CLOSING };

static const char *const ex_state_names[] = {"connecting", "request", "response", "tunnel", "closing"};

struct gw_exchange {
  struct gw *g;
  struct gw_exchange *prev, *next;
  struct fr_http_req *req;       /* NULL once the client's request is finished or gone */
  enum ex_state state;
  uv_tcp_t tcp;
  uv_connect_t connect;
  uv_shutdown_t shut;
  uv_timer_t timer;
  int nhandles;                  /* open handles: tcp, timer */
  http_parser parser;
  struct fr_buf head;            /* the request head, until written */
  struct fr_buf rhead;           /* the answer's headers to pass on */
  struct fr_buf hname, hvalue;
  int in_value;
  size_t rhead_bytes;
  int status;
  int interim;                   /* the answer being parsed is a 1xx other than 101 */
  int to_tunnel;                 /* a 101 to an upgrade: switch after the parser returns */
  int answered;                  /* the answer's head went to the client */
  int parse_error;               /* a callback stopped the parser */
  int64_t body;                  /* the client's body framing (GW_BODY_* or a length) */
  int upgrade, head_method;
  int client_body_done;
  int client_paused;             /* we hold the client's body or tunnel input back */
  int up_reading, up_eof, up_shut, up_shut_done;
  int tunnel_ended;              /* the client's side of the tunnel is over */
  size_t up_pending;             /* bytes queued towards the pod */
  uint64_t start_ms, last_ms;    /* uv_now */
  char key[320];                 /* "ns/pod" for the per-sandbox count */
};

struct up_write {
  uv_write_t w;
  struct gw_exchange *ex;
  size_t len;
  char data[];
};

static void ex_close(struct gw_exchange *ex);
static void ex_read_start(struct gw_exchange *ex);

static void ex_set_state(struct gw_exchange *ex, enum ex_state s) {
  if (ex->state == s)
    return;
  FR_DEBUG(LOGC, "exchange %s: %s -> %s", ex->key, ex_state_names[ex->state], ex_state_names[s]);
  if (ex->state == EX_TUNNEL)
    ex->g->ntunnels--;
  if (s == EX_TUNNEL)
    ex->g->ntunnels++;
  ex->state = s;
}

static void touch(struct gw_exchange *ex) {
  ex->last_ms = uv_now(ex->g->loop);
}

/* ------------------------------------------------------------ endings */

/* The client's request was finished or is gone: never touch it again. */
static void drop_req(struct gw_exchange *ex) {
  if (ex->req != NULL) {
    ex->req->data = NULL;
    ex->req->abort_cb = NULL;
    ex->req->body_cb = NULL;
  }
  ex->req = NULL;
}

/* Something failed before the answer began: the client gets the
 * gateway's error (<status>, <code>). */
static void fail_unanswered(struct gw_exchange *ex, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail_unanswered(struct gw_exchange *ex, int status, const char *code, const char *fmt, ...) {
  char msg[300];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  FR_INFO(LOGC, "%s: %s (%s)", ex->key, msg, code);
  if (ex->req != NULL) {
    struct fr_http_req *req = ex->req;
    drop_req(ex);
    gw_refuse(ex->g, req, GW_OUT_UPSTREAM_ERROR, status, code, msg);
  }
  ex_close(ex);
}

/* Something failed after the answer began: all the client can be told is
 * that the connection breaks (an unfinished chunked body or length). */
static void fail_answered(struct gw_exchange *ex, const char *why) {
  FR_INFO(LOGC, "%s: cut after the answer began: %s", ex->key, why);
  if (ex->req != NULL) {
    struct fr_http_req *req = ex->req;
    drop_req(ex);
    ex->g->m.outcomes[GW_OUT_CUT]++;
    fr_http_abort(req);
  }
  ex_close(ex);
}

static void fail(struct gw_exchange *ex, const char *why) {
  if (ex->answered || ex->state == EX_TUNNEL)
    fail_answered(ex, why);
  else
    fail_unanswered(ex, 502, "upstream_failed", "the sandbox's connection failed: %s", why);
}

static void on_closed(uv_handle_t *h) {
  struct gw_exchange *ex = h->data;
  struct gw *g = ex->g;

  if (--ex->nhandles > 0)
    return;
  if (ex->prev != NULL)
    ex->prev->next = ex->next;
  else
    g->exchanges = ex->next;
  if (ex->next != NULL)
    ex->next->prev = ex->prev;
  g->nexchanges--;
  gw_count_done(g, ex->key);
  fr_buf_free(&ex->head);
  fr_buf_free(&ex->rhead);
  fr_buf_free(&ex->hname);
  fr_buf_free(&ex->hvalue);
  free(ex);
}

/* Closes the pod's connection and the timer; the exchange is freed by the
 * last close callback. The client's request must be finished or gone. */
static void ex_close(struct gw_exchange *ex) {
  if (ex->state == EX_CLOSING)
    return;
  if (ex->req != NULL) {
    /* A path that forgot to answer: never leave a client hanging. */
    struct fr_http_req *req = ex->req;
    FR_ERROR(LOGC, "%s: exchange closed with its request unanswered", ex->key);
    drop_req(ex);
    fr_http_abort(req);
  }
  ex_set_state(ex, EX_CLOSING);
  uv_close((uv_handle_t *)&ex->tcp, on_closed);
  uv_close((uv_handle_t *)&ex->timer, on_closed);
}

/* ------------------------------------------------------------ timer */

static void on_timer(uv_timer_t *t) {
  struct gw_exchange *ex = t->data;
  uint64_t now = uv_now(ex->g->loop), idle = ex->g->opts.idle_timeout_ms;

  if (ex->state == EX_CONNECTING) {
    fail_unanswered(ex, 504, "upstream_timeout", "no connection to the sandbox within %llu ms",
                    (unsigned long long)ex->g->opts.connect_timeout_ms);
    return;
  }
  if (now - ex->last_ms < idle) {
    uv_timer_start(&ex->timer, on_timer, idle - (now - ex->last_ms), 0);
    return;
  }
  if (ex->answered || ex->state == EX_TUNNEL)
    fail_answered(ex, "idle timeout");
  else
    fail_unanswered(ex, 504, "upstream_timeout", "the sandbox did not answer within %llu ms",
                    (unsigned long long)idle);
}

/* ------------------------------------------------------------ towards the pod */

static void resume_client(struct gw_exchange *ex) {
  if (!ex->client_paused || ex->req == NULL)
    return;
  ex->client_paused = 0;
  if (ex->state == EX_TUNNEL)
    fr_http_tunnel_pause(ex->req, 0);
  else
    fr_http_body_pause(ex->req, 0);
}

static void pause_client(struct gw_exchange *ex) {
  if (ex->client_paused || ex->req == NULL)
    return;
  ex->client_paused = 1;
  if (ex->state == EX_TUNNEL)
    fr_http_tunnel_pause(ex->req, 1);
  else
    fr_http_body_pause(ex->req, 1);
}

static void on_up_write(uv_write_t *w, int status) {
  struct up_write *uw = fr_container_of(w, struct up_write, w);
  struct gw_exchange *ex = uw->ex;

  ex->up_pending -= uw->len;
  free(uw);
  if (ex->state == EX_CLOSING)
    return;
  if (status < 0) {
    fail(ex, uv_strerror(status));
    return;
  }
  touch(ex);
  if (ex->up_pending <= LOW_WATER)
    resume_client(ex);
}

/* Queues <bufs> to the pod: what the socket takes at once goes directly,
 * the rest is copied into one write request. 0 or a negative error. */
static int up_writev(struct gw_exchange *ex, const uv_buf_t *bufs, unsigned int n) {
  struct up_write *uw;
  size_t total = 0, skip, off = 0;
  unsigned int i;
  int rc = 0;

  for (i = 0; i < n; i++)
    total += bufs[i].len;
  if (total == 0)
    return 0;
  if (ex->up_pending == 0) {
    rc = uv_try_write((uv_stream_t *)&ex->tcp, bufs, n);
    if (rc < 0 && rc != UV_EAGAIN)
      return rc;
    if (rc > 0 && (size_t)rc == total)
      return 0;
  }
  skip = rc > 0 ? (size_t)rc : 0;
  uw = malloc(sizeof(*uw) + total - skip);
  if (uw == NULL)
    return -ENOMEM;
  for (i = 0; i < n; i++) {
    size_t len = bufs[i].len;
    const char *p = bufs[i].base;
    if (skip >= len) {
      skip -= len;
      continue;
    }
    memcpy(uw->data + off, p + skip, len - skip);
    off += len - skip;
    skip = 0;
  }
  uw->ex = ex;
  uw->len = off;
  {
    uv_buf_t b = uv_buf_init(uw->data, (unsigned int)off);
    rc = uv_write(&uw->w, (uv_stream_t *)&ex->tcp, &b, 1, on_up_write);
  }
  if (rc < 0) {
    free(uw);
    return rc;
  }
  ex->up_pending += off;
  return 0;
}

static int up_write(struct gw_exchange *ex, const void *data, size_t len) {
  uv_buf_t b = uv_buf_init((char *)data, (unsigned int)len);

  return up_writev(ex, &b, 1);
}

/* A piece of the client's streamed body, or its end (<data> NULL). */
static void on_client_body(struct fr_http_req *req, const char *data, size_t len) {
  struct gw_exchange *ex = req->data;
  char line[24];
  uv_buf_t b[3];
  int rc;

  if (ex == NULL || ex->state == EX_CLOSING)
    return;
  touch(ex);
  if (data == NULL) {
    ex->client_body_done = 1;
    rc = ex->body == GW_BODY_CHUNKED ? up_write(ex, "0\r\n\r\n", 5) : 0;
  } else if (ex->body == GW_BODY_CHUNKED) {
    b[0] = uv_buf_init(line, (unsigned int)snprintf(line, sizeof(line), "%zx\r\n", len));
    b[1] = uv_buf_init((char *)data, (unsigned int)len);
    b[2] = uv_buf_init("\r\n", 2);
    rc = up_writev(ex, b, 3);
  } else {
    rc = up_write(ex, data, len);
  }
  if (rc != 0) {
    fail(ex, uv_strerror(rc));
    return;
  }
  ex->g->m.bytes_to_sandbox += len;
  if (ex->up_pending > HIGH_WATER)
    pause_client(ex);
}

static void on_client_abort(struct fr_http_req *req) {
  struct gw_exchange *ex = req->data;

  if (ex == NULL)
    return;
  ex->req = NULL; /* the server frees it */
  ex->g->m.outcomes[GW_OUT_CLIENT_GONE]++;
  FR_DEBUG(LOGC, "%s: the client left", ex->key);
  ex_close(ex);
}

/* ------------------------------------------------------------ the tunnel */

/* Our FIN to the pod is out, after every byte before it. */
static void on_up_shutdown(uv_shutdown_t *sr, int status) {
  struct gw_exchange *ex = sr->data;

  if (ex->state == EX_CLOSING)
    return;
  ex->up_shut_done = 1;
  if (status < 0)
    fail(ex, uv_strerror(status));
  else if (ex->tunnel_ended)
    ex_close(ex);
}

static void on_tunnel_data(struct fr_http_req *req, const char *data, size_t len) {
  struct gw_exchange *ex = req->data;
  int rc;

  if (ex == NULL || ex->state != EX_TUNNEL)
    return;
  touch(ex);
  if (data == NULL) {
    /* The client's half-close becomes the pod's: a FIN once everything
     * queued is out (libuv orders the shutdown after the writes). */
    if (!ex->up_shut) {
      ex->up_shut = 1;
      rc = uv_shutdown(&ex->shut, (uv_stream_t *)&ex->tcp, on_up_shutdown);
      if (rc != 0)
        fail(ex, uv_strerror(rc));
    }
    return;
  }
  rc = up_write(ex, data, len);
  if (rc != 0) {
    fail(ex, uv_strerror(rc));
    return;
  }
  ex->g->m.bytes_to_sandbox += len;
  if (ex->up_pending > HIGH_WATER)
    pause_client(ex);
}

static void on_tunnel_end(struct fr_http_req *req, int err) {
  struct gw_exchange *ex = req->data;

  if (ex == NULL)
    return;
  ex->req = NULL; /* freed by the server when we return */
  ex->tunnel_ended = 1;
  FR_DEBUG(LOGC, "%s: tunnel ended (%s)", ex->key, err == 0 ? "both sides closed" : uv_strerror(err));
  /* A clean end: the client's last bytes and FIN may still be on their
   * way to the pod; the connection closes once they are out. */
  if (err != 0 || !ex->up_shut || ex->up_shut_done)
    ex_close(ex);
}

static void on_client_drain(struct fr_http_req *req) {
  struct gw_exchange *ex = req->data;

  if (ex == NULL || ex->state == EX_CLOSING)
    return;
  touch(ex);
  ex_read_start(ex);
}

/* After a write to the client: stop reading the pod while the client
 * lags, until fr_http_on_drain() says it caught up. */
static void client_backpressure(struct gw_exchange *ex) {
  if (ex->req == NULL || ex->state == EX_CLOSING || fr_http_pending_bytes(ex->req) <= HIGH_WATER)
    return;
  if (ex->up_reading) {
    uv_read_stop((uv_stream_t *)&ex->tcp);
    ex->up_reading = 0;
  }
  if (fr_http_on_drain(ex->req, on_client_drain, LOW_WATER) == 1)
    ex_read_start(ex);
}

/* The pod answered 101 to an upgrade: the client gets the same head and
 * from then on the bytes both ways; <rest> came after the head. */
static void begin_tunnel(struct gw_exchange *ex, const char *rest, size_t len) {
  struct fr_http_req *req = ex->req;
  struct fr_buf h;
  int rc;

  fr_buf_init(&h);
  rc = fr_buf_puts(&h, "HTTP/1.1 101 Switching Protocols\r\n");
  rc |= fr_buf_append(&h, ex->rhead.data ? ex->rhead.data : "", ex->rhead.len);
  rc |= fr_buf_puts(&h, "\r\n");
  if (rc != 0) {
    fr_buf_free(&h);
    fail_unanswered(ex, 503, "out_of_memory", "out of memory");
    return;
  }
  ex->answered = 1;
  rc = fr_http_tunnel_begin(req, 101, h.data, h.len, on_tunnel_data, on_tunnel_end);
  fr_buf_free(&h);
  if (rc != 0) {
    drop_req(ex); /* closed by the server, no callback */
    ex_close(ex);
    return;
  }
  ex->g->m.outcomes[GW_OUT_TUNNEL]++;
  ex_set_state(ex, EX_TUNNEL);
  if (len > 0) {
    if (fr_http_tunnel_write(req, rest, len) != 0) {
      drop_req(ex);
      ex_close(ex);
      return;
    }
    ex->g->m.bytes_from_sandbox += len;
    client_backpressure(ex);
  }
}

/* ------------------------------------------------------------ the answer */

static int push_header(struct gw_exchange *ex) {
  int rc = 0;

  if (ex->hname.len > 0 && gw_response_header_passes(ex->hname.data, ex->status == 101)) {
    rc |= fr_buf_append(&ex->rhead, ex->hname.data, ex->hname.len);
    rc |= fr_buf_puts(&ex->rhead, ": ");
    rc |= fr_buf_append(&ex->rhead, ex->hvalue.data ? ex->hvalue.data : "", ex->hvalue.len);
    rc |= fr_buf_puts(&ex->rhead, "\r\n");
  }
  fr_buf_reset(&ex->hname);
  fr_buf_reset(&ex->hvalue);
  ex->in_value = 0;
  return rc;
}

static int head_bytes(struct gw_exchange *ex, size_t len) {
  ex->rhead_bytes += len;
  return ex->rhead_bytes > MAX_RESPONSE_HEAD ? -1 : 0;
}

static int on_message_begin(http_parser *p) {
  struct gw_exchange *ex = p->data;

  fr_buf_reset(&ex->rhead);
  fr_buf_reset(&ex->hname);
  fr_buf_reset(&ex->hvalue);
  ex->in_value = 0;
  ex->rhead_bytes = 0;
  ex->interim = 0;
  return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len) {
  struct gw_exchange *ex = p->data;

  if (ex->answered)
    return 0; /* trailers of a chunked body: not passed on */
  /* The status is known once the first header starts (101 changes
   * which headers pass). */
  ex->status = p->status_code;
  if (head_bytes(ex, len) != 0 || (ex->in_value && push_header(ex) != 0) ||
      fr_buf_append(&ex->hname, at, len) != 0) {
    ex->parse_error = 1;
    return -1;
  }
  return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
  struct gw_exchange *ex = p->data;

  if (ex->answered)
    return 0;
  ex->in_value = 1;
  if (head_bytes(ex, len) != 0 || fr_buf_append(&ex->hvalue, at, len) != 0) {
    ex->parse_error = 1;
    return -1;
  }
  return 0;
}

static int on_headers_complete(http_parser *p) {
  struct gw_exchange *ex = p->data;
  struct gw *g = ex->g;
  int64_t framing;
  int rc;

  ex->status = p->status_code;
  if (ex->in_value && push_header(ex) != 0) {
    ex->parse_error = 1;
    return -1;
  }
  if (ex->status >= 100 && ex->status < 200 && ex->status != 101) {
    ex->interim = 1; /* 100 Continue, 103 Early Hints: the real answer follows */
    return 0;
  }
  if (ex->status == 101) {
    if (!ex->upgrade) {
      ex->parse_error = 1;
      return -1;
    }
    ex->to_tunnel = 1;
    return 0;
  }
  gw_observe_ttfb(g, (double)(uv_now(g->loop) - ex->start_ms) / 1000.0);
  if (ex->head_method || ex->status == 204 || ex->status == 304)
    framing = (p->flags & F_CONTENTLENGTH) && ex->head_method ? (int64_t)p->content_length : FR_HTTP_NO_BODY;
  else if (p->flags & F_CONTENTLENGTH)
    framing = (int64_t)p->content_length;
  else
    framing = FR_HTTP_CHUNKED; /* chunked, or until the pod closes */
  ex->answered = 1;
  ex_set_state(ex, EX_RESPONSE);
  if (ex->req == NULL)
    return -1;
  rc = fr_http_stream_begin_length(ex->req, ex->status, NULL, ex->rhead.data, framing);
  if (rc != 0) {
    drop_req(ex); /* the connection is gone; no callback */
    return -1;
  }
  /* A HEAD's answer has no body whatever its headers say. */
  return ex->head_method ? 1 : 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
  struct gw_exchange *ex = p->data;

  if (ex->req == NULL)
    return -1;
  ex->g->m.bytes_from_sandbox += len;
  if (fr_http_stream_write(ex->req, at, len) != 0) {
    drop_req(ex);
    return -1;
  }
  return 0;
}

static int on_message_complete(http_parser *p) {
  struct gw_exchange *ex = p->data;
  struct fr_http_req *req = ex->req;

  if (ex->interim)
    return 0;
  if (ex->to_tunnel)
    return 0; /* http-parser stops after an upgrade's head by itself */
  http_parser_pause(p, 1); /* nothing after the answer is parsed */
  if (req == NULL)
    return 0;
  drop_req(ex);
  ex->g->m.outcomes[GW_OUT_FORWARDED]++;
  if (fr_http_stream_end(req) != 0)
    FR_DEBUG(LOGC, "%s: the client left as the answer ended", ex->key);
  return 0;
}

static const http_parser_settings settings = {
    .on_message_begin = on_message_begin,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* The pod's bytes, parsed as an HTTP answer. */
static void feed_answer(struct gw_exchange *ex, const char *data, size_t len) {
  size_t n = http_parser_execute(&ex->parser, &settings, data, len);
  enum http_errno err = HTTP_PARSER_ERRNO(&ex->parser);

  if (ex->state == EX_CLOSING)
    return;
  if (ex->to_tunnel) {
    begin_tunnel(ex, data + n, len - n);
    return;
  }
  if (err == HPE_PAUSED) {
    /* The answer is complete (or, on EOF, ended by the close). */
    ex_close(ex);
    return;
  }
  if (err != HPE_OK) {
    if (ex->answered)
      fail_answered(ex, ex->req == NULL ? "the client left" : http_errno_description(err));
    else
      fail_unanswered(ex, 502, "upstream_bad_response", "the sandbox's answer is not HTTP/1.1 (%s%s)",
                      ex->parse_error ? "head too large or unexpected 101" : http_errno_name(err), "");
    return;
  }
  if (len == 0) {
    /* EOF before the answer was complete. */
    if (ex->answered)
      fail_answered(ex, "the sandbox closed the connection in the middle of the answer");
    else
      fail_unanswered(ex, 502, "upstream_closed", "the sandbox closed the connection without answering");
    return;
  }
  client_backpressure(ex);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  struct gw_exchange *ex = h->data;
  static char scratch[READ_SIZE];

  /* One read at a time on the loop thread, handed over before the next
   * read: one buffer serves every exchange (the client side copies). */
  (void)ex;
  (void)suggested;
  buf->base = scratch;
  buf->len = sizeof(scratch);
}

static void on_up_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  struct gw_exchange *ex = s->data;

  if (ex->state == EX_CLOSING || nread == 0)
    return;
  touch(ex);
  if (nread < 0) {
    if (nread != UV_EOF) {
      fail(ex, uv_strerror((int)nread));
      return;
    }
    ex->up_eof = 1;
    uv_read_stop(s);
    ex->up_reading = 0;
    if (ex->state == EX_TUNNEL) {
      if (ex->req != NULL && fr_http_tunnel_shutdown(ex->req) != 0) {
        drop_req(ex);
        ex_close(ex);
      }
      return;
    }
    feed_answer(ex, NULL, 0); /* ends an answer framed by the close */
    return;
  }
  if (ex->state == EX_TUNNEL) {
    if (ex->req == NULL || fr_http_tunnel_write(ex->req, buf->base, (size_t)nread) != 0) {
      drop_req(ex);
      ex_close(ex);
      return;
    }
    ex->g->m.bytes_from_sandbox += (uint64_t)nread;
    client_backpressure(ex);
    return;
  }
  feed_answer(ex, buf->base, (size_t)nread);
}

static void ex_read_start(struct gw_exchange *ex) {
  if (ex->up_reading || ex->up_eof || ex->state == EX_CLOSING || ex->state == EX_CONNECTING)
    return;
  if (uv_read_start((uv_stream_t *)&ex->tcp, on_alloc, on_up_read) == 0)
    ex->up_reading = 1;
}

/* ------------------------------------------------------------ start */

static void on_connect(uv_connect_t *cr, int status) {
  struct gw_exchange *ex = cr->data;
  int rc;

  if (ex->state == EX_CLOSING)
    return; /* cancelled by ex_close */
  if (status < 0) {
    fail_unanswered(ex, 502, "upstream_unreachable", "cannot connect to the sandbox: %s", uv_strerror(status));
    return;
  }
  ex_set_state(ex, EX_REQUEST);
  touch(ex);
  uv_tcp_nodelay(&ex->tcp, 1);
  uv_timer_start(&ex->timer, on_timer, ex->g->opts.idle_timeout_ms, 0);
  rc = up_write(ex, ex->head.data, ex->head.len);
  /* An upgrade's body (rare) came buffered with its head. */
  if (rc == 0 && ex->req != NULL && !ex->req->body_streaming && ex->req->body_len > 0)
    rc = up_write(ex, ex->req->body, ex->req->body_len);
  fr_buf_free(&ex->head);
  if (rc != 0) {
    fail_unanswered(ex, 502, "upstream_failed", "cannot write to the sandbox: %s", uv_strerror(rc));
    return;
  }
  ex_read_start(ex);
  if (ex->req != NULL && ex->req->body_streaming) {
    ex->client_paused = 1; /* paused at the start */
    resume_client(ex);
  }
}

int gw_proxy_start(struct gw *g, struct fr_http_req *req, const struct sockaddr *addr, struct fr_buf *head,
                   int64_t body, int upgrade, const char *key) {
  struct gw_exchange *ex = calloc(1, sizeof(*ex));
  int rc;

  if (ex == NULL)
    return -ENOMEM;
  ex->g = g;
  ex->req = req;
  ex->head = *head; /* taken */
  fr_buf_init(head);
  ex->body = body;
  ex->upgrade = upgrade;
  ex->head_method = strcmp(req->method, "HEAD") == 0;
  ex->start_ms = ex->last_ms = uv_now(g->loop);
  snprintf(ex->key, sizeof(ex->key), "%s", key);
  http_parser_init(&ex->parser, HTTP_RESPONSE);
  ex->parser.data = ex;
  uv_tcp_init(g->loop, &ex->tcp);
  uv_timer_init(g->loop, &ex->timer);
  ex->tcp.data = ex->timer.data = ex->connect.data = ex->shut.data = ex;
  ex->nhandles = 2;
  ex->next = g->exchanges;
  if (g->exchanges != NULL)
    g->exchanges->prev = ex;
  g->exchanges = ex;
  g->nexchanges++;
  req->data = ex;
  req->abort_cb = on_client_abort;
  if (req->body_streaming) {
    req->body_cb = on_client_body;
    fr_http_body_pause(req, 1); /* until the pod's connection is up */
  }
  uv_timer_start(&ex->timer, on_timer, g->opts.connect_timeout_ms, 0);
  rc = uv_tcp_connect(&ex->connect, &ex->tcp, addr, on_connect);
  if (rc != 0)
    fail_unanswered(ex, 502, "upstream_unreachable", "cannot connect to the sandbox: %s", uv_strerror(rc));
  return 0;
}

void gw_proxy_abort_all(struct gw *g) {
  struct gw_exchange *ex;

  for (ex = g->exchanges; ex != NULL; ex = ex->next) {
    if (ex->state == EX_CLOSING)
      continue;
    if (ex->answered || ex->state == EX_TUNNEL)
      fail_answered(ex, "the gateway is stopping");
    else
      fail_unanswered(ex, 503, "shutting_down", "the gateway is stopping");
  }
}
