/* http.c — a small HTTP/1.1 server: one request at a time per connection.
 *
 * Connection states:
 *   HEAD ──head parsed──▶ BODY ──body read──▶ HANDLING ──response written──▶ HEAD
 *                          (sunk as it comes for uploads)      (keep-alive)
 *   any ──peer gone / error / limit──▶ closed (freed by agent_collect)
 *
 * Limits never reach handlers: a head over HTTP_MAX_HEAD is 431, a buffered
 * body over its limit 413, a malformed message 400. Input is read at most
 * HTTP_IN_CAP bytes at a time and, for uploads, written out before the next
 * read, so a large body costs no memory. A response is produced only while
 * less than HTTP_LOW_WATER bytes wait for the socket: slow readers push back
 * on file reads and process output instead of growing a queue.
 *
 * What fills a streamed response (a producer) and what takes a request
 * body (a sink) are interfaces (agent.h): this file knows no service by
 * name. A producer is detached when its response ends or its connection
 * closes, and freed after the epoll batch (agent_collect), as connections
 * are: an event for its fd may still be pending in the same batch.
 */
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent.h"

#define HEAD_TIMEOUT_MS 30000
#define IDLE_TIMEOUT_MS 300000

#define WRITE_STALL_MS 600000

static void conn_io_cb(struct agent *a, struct io *io, uint32_t events);
static void conn_parse(struct conn *c);

/* Every state change goes through here; FR_AGENT_TRACE=1 logs them. */
static void set_state(struct conn *c, enum conn_state state) {
  static const char *names[] = {"HEAD", "BODY", "HANDLING"};
  if (c->state != state && c->a->trace)
    log_msg("conn %d: %s -> %s (%s %s)", c->io.fd, names[c->state], names[state],
            c->req.method, c->req.path);
  c->state = state;
}

static const char *reason(int status) {
  switch (status) {
  case 100: return "Continue";
  case 200: return "OK";
  case 204: return "No Content";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 411: return "Length Required";
  case 413: return "Content Too Large";
  case 415: return "Unsupported Media Type";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 499: return "Client Closed Request";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 507: return "Insufficient Storage";
  default: return "Unknown";
  }
}

static void timeout_cb(struct agent *a, struct timer *t) {
  struct conn *c = container_of(t, struct conn, timer);
  (void)a;
  if (c->state == C_HEAD && c->in_len == 0) {
    conn_close(c); /* idle keep-alive connection */
    return;
  }
  if (c->state == C_HEAD || c->state == C_BODY) {
    c->close_after = true;
    http_error(c, 408, "request not received in time");
    return;
  }
  /* HANDLING: the peer has read nothing of our response for that long */
  log_msg("conn %d: peer stopped reading for %d s: closed", c->io.fd, WRITE_STALL_MS / 1000);
  conn_close(c);
}

/* What the connection waits for: input (unless the client half-closed),
 * and room to write when <out>. With neither, it stays registered for
 * errors and hang-ups, which epoll always reports. */
static void conn_watch(struct conn *c, bool out) {
  uint32_t ev = (c->rd_shut ? 0 : EPOLLIN | EPOLLRDHUP) | (out ? EPOLLOUT : 0);
  io_start(c->a, &c->io, ev ? ev : EPOLLHUP);
}

static void accept_resume(struct agent *a, struct timer *t) {
  (void)t;
  io_start(a, &a->listener, EPOLLIN);
}

void http_accept(struct agent *a, struct io *io, uint32_t events) {
  (void)events;
  for (int i = 0; i < 64; i++) {
    int fd = accept4(io->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* The pending connection stays readable: without a pause the
         * level-triggered listener would spin. */
        io_stop(a, io);
        timer_start(a, &a->accept_timer, 100, accept_resume);
      }
      return;
    }
    if (a->nconns >= HTTP_MAX_CONNS) {
      static const char body[] = "{\"code\":503,\"message\":\"too many connections to agent\"}";
      char busy[256];
      int n = snprintf(busy, sizeof(busy),
                       "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                       "Retry-After: 1\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                       sizeof(body) - 1, body);
      ssize_t w = write(fd, busy, (size_t)n);
      (void)w;
      close(fd);
      continue;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (c == NULL) {
      close(fd);
      continue;
    }
    /* A stream's events are small writes one after another (the start
     * event, then data, then the end): without this each waits for the
     * peer's delayed ACK (40 ms) on a kept-alive connection, as the
     * gateway's to a pod is. */
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    c->a = a;
    c->io.fd = fd;
    c->io.cb = conn_io_cb;
    set_state(c, C_HEAD);
    if (io_start(a, &c->io, EPOLLIN | EPOLLRDHUP) != 0) {
      close(fd);
      free(c);
      continue;
    }
    c->next = a->conns;
    if (a->conns)
      a->conns->prev = c;
    a->conns = c;
    a->nconns++;
    timer_start(a, &c->timer, IDLE_TIMEOUT_MS, timeout_cb);
  }
}

/* The connection lets go of its producer: detached at once, freed after
 * the epoll batch. */
static void producer_drop(struct conn *c, bool peer_gone) {
  struct producer *p = c->prod;

  if (p == NULL)
    return;
  assert(p->c == c);
  c->prod = NULL;
  c->ka_msg = NULL;
  p->ops->detach(p, peer_gone);
  p->c = NULL;
  p->next = c->a->dead_producers;
  c->a->dead_producers = p;
}

/* The request is done with its body sink: freed after the batch too, so
 * that a sink whose own call ended the request (an error answered, the
 * connection closed with it) is never freed under its feet. */
static void sink_drop(struct conn *c) {
  struct body_sink *s = c->sink;

  if (s == NULL)
    return;
  c->sink = NULL;
  s->next = c->a->dead_sinks;
  c->a->dead_sinks = s;
}

void conn_set_producer(struct conn *c, struct producer *p, const struct producer_ops *ops) {
  assert(c->prod == NULL && !c->dead);
  p->ops = ops;
  p->c = c;
  p->next = NULL;
  c->prod = p;
}

void conn_drop_producer(struct conn *c) {
  producer_drop(c, false);
}

void conn_set_sink(struct conn *c, struct body_sink *s, const struct body_sink_ops *ops) {
  assert(c->sink == NULL && !c->dead);
  s->ops = ops;
  s->c = c;
  s->next = NULL;
  c->sink = s;
  c->body_mode = BODY_SINK;
}

void conn_close(struct conn *c) {
  if (c->dead)
    return;
  struct agent *a = c->a;
  c->dead = true;
  producer_drop(c, true);
  sink_drop(c);
  timer_stop(a, &c->timer);
  timer_stop(a, &c->ka_timer);
  timer_stop(a, &c->dl_timer);
  io_stop(a, &c->io);
  close(c->io.fd);
  c->io.fd = -1;
  if (c->prev)
    c->prev->next = c->next;
  else
    a->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  a->nconns--;
  c->prev = NULL;
  c->next = a->dead_conns;
  a->dead_conns = c;
}

void agent_collect(struct agent *a) {
  /* Pipelined input first: parsing may finish responses and close conns. */
  for (struct conn *c = a->conns; c != NULL;) {
    struct conn *next = c->next;
    if (c->want_parse && !c->dead) {
      c->want_parse = false;
      conn_parse(c);
    }
    c = next;
  }
  while (a->dead_producers) {
    struct producer *p = a->dead_producers;
    a->dead_producers = p->next;
    p->ops->free(p);
  }
  while (a->dead_sinks) {
    struct body_sink *s = a->dead_sinks;
    a->dead_sinks = s->next;
    s->ops->free(s);
  }
  while (a->dead_conns) {
    struct conn *c = a->dead_conns;
    a->dead_conns = c->next;
    assert(c->prod == NULL && c->sink == NULL);
    buf_free(&c->out);
    buf_free(&c->body);
    free(c);
  }
}

static void reset_for_next(struct conn *c) {
  struct agent *a = c->a;
  producer_drop(c, false);
  sink_drop(c);
  buf_free(&c->body);
  set_state(c, C_HEAD);
  memset(&c->req, 0, sizeof(c->req));
  c->streaming = false;
  c->raw_body = false;
  c->resp_done = false;
  c->chunk_state = 0;
  c->chunk_left = 0;
  c->chunk_line_len = 0;
  c->body_left = 0;
  timer_stop(a, &c->ka_timer);
  timer_stop(a, &c->dl_timer);
  timer_start(a, &c->timer, c->in_len ? HEAD_TIMEOUT_MS : IDLE_TIMEOUT_MS,
              timeout_cb);
  if (c->in_len > 0)
    c->want_parse = true;
  conn_watch(c, false);
}

/* Returns -1 when the connection was closed. */
static int flush(struct conn *c) {
  size_t before = buf_size(&c->out);
  while (buf_size(&c->out) > 0) {
    ssize_t n = send(c->io.fd, c->out.p + c->out.off, buf_size(&c->out),
                     MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        break;
      conn_close(c);
      return -1;
    }
    buf_consume(&c->out, (size_t)n);
  }
  if (c->state == C_HANDLING) {
    /* a response the peer stops reading is dropped after a long stall */
    if (buf_size(&c->out) == 0)
      timer_stop(c->a, &c->timer);
    else if (buf_size(&c->out) < before || !c->timer.active)
      timer_start(c->a, &c->timer, WRITE_STALL_MS, timeout_cb);
  }
  /* While a request is handled, input is read only to notice the peer
   * going away; a fresh request waits for the next state. */
  conn_watch(c, buf_size(&c->out) > 0);
  return 0;
}

void conn_service(struct conn *c) {
  int round = 0;
  for (; round < 64 && !c->dead; round++) {
    if (flush(c) < 0)
      return;
    if (c->resp_done || buf_size(&c->out) >= HTTP_LOW_WATER)
      break;
    if (c->prod == NULL || c->prod->ops->pump(c->prod) <= 0)
      break;
  }
  if (c->dead)
    return;
  if (round == 64) {
    /* Fairness cap hit with the producer not done: come back when the
     * socket is writable (at once, next loop turn) instead of stalling. */
    conn_watch(c, true);
  }
  if (c->resp_done && buf_size(&c->out) == 0) {
    if (c->close_after) {
      shutdown(c->io.fd, SHUT_WR);
      conn_close(c);
      return;
    }
    if (c->state == C_HANDLING)
      reset_for_next(c);
  }
}

static void queue_head(struct conn *c, int status, const char *ctype,
                       const char *extra, int64_t length) {
  if (c->req.http10 || !c->req.keep_alive)
    c->close_after = true;
  buf_printf(&c->out, "HTTP/1.1 %d %s\r\n", status, reason(status));
  if (ctype)
    buf_printf(&c->out, "Content-Type: %s\r\n", ctype);
  if (extra && *extra)
    buf_append(&c->out, extra, strlen(extra));
  if (length >= 0)
    buf_printf(&c->out, "Content-Length: %lld\r\n", (long long)length);
  else
    buf_printf(&c->out, "Transfer-Encoding: chunked\r\n");
  if (c->close_after)
    buf_printf(&c->out, "Connection: close\r\n\r\n");
  else
    buf_printf(&c->out, "\r\n");
}

/* A response sent before the whole body was read leaves the rest of the
 * body on the wire: the connection cannot carry another request. */
static void mark_body_unread(struct conn *c) {
  if ((c->state == C_HEAD || c->state == C_BODY) &&
      (c->req.chunked || c->body_left > 0))
    c->close_after = true;
  set_state(c, C_HANDLING);
  timer_stop(c->a, &c->timer);
}

void http_respond(struct conn *c, int status, const char *ctype,
                  const char *extra_headers, const void *body, size_t len) {
  if (c->dead || c->resp_done)
    return;
  mark_body_unread(c);
  queue_head(c, status, ctype, extra_headers, (int64_t)len);
  buf_append(&c->out, body, len);
  c->resp_done = true;
  conn_service(c);
}

void http_respond_json(struct conn *c, int status, json_t *j) {
  char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  if (s == NULL) {
    http_respond(c, 500, "application/json", NULL,
                 "{\"code\":500,\"message\":\"out of memory\"}", 38);
    return;
  }
  http_respond(c, status, "application/json", NULL, s, strlen(s));
  free(s);
}

void http_error(struct conn *c, int status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  text_fix(msg);
  http_respond_json(c, status, json_pack("{s:i,s:s}", "code", status, "message", msg));
}

int http_stream_begin(struct conn *c, int status, const char *ctype,
                      const char *extra_headers) {
  if (c->dead)
    return -EPIPE;
  mark_body_unread(c);
  if (c->req.http10) {
    /* No chunked encoding in HTTP/1.0: the end of the body is the close. */
    c->close_after = true;
    buf_printf(&c->out, "HTTP/1.0 %d %s\r\nContent-Type: %s\r\n%sConnection: close\r\n\r\n",
               status, reason(status), ctype, extra_headers ? extra_headers : "");
  } else {
    queue_head(c, status, ctype, extra_headers, -1);
  }
  c->streaming = true;
  return 0;
}

int http_body_begin(struct conn *c, int status, const char *ctype,
                    const char *extra_headers, uint64_t length) {
  if (c->dead)
    return -EPIPE;
  mark_body_unread(c);
  queue_head(c, status, ctype, extra_headers, (int64_t)length);
  c->streaming = true;
  c->raw_body = true;
  return 0;
}

int http_stream_write(struct conn *c, const void *data, size_t len) {
  if (c->dead || len == 0)
    return c->dead ? -EPIPE : 0;
  int rc = 0;
  if (c->raw_body)
    return buf_append(&c->out, data, len);
  if (!c->req.http10)
    rc = buf_printf(&c->out, "%zx\r\n", len);
  if (rc == 0)
    rc = buf_append(&c->out, data, len);
  if (rc == 0 && !c->req.http10)
    rc = buf_append(&c->out, "\r\n", 2);
  return rc;
}

void http_stream_end(struct conn *c) {
  if (c->dead || c->resp_done)
    return;
  if (!c->req.http10 && !c->raw_body)
    buf_append(&c->out, "0\r\n\r\n", 5);
  c->resp_done = true;
  c->streaming = false;
}

/* ---- request parsing ---- */

static bool header_is(const char *name, size_t nlen, const char *want) {
  return strlen(want) == nlen && strncasecmp(name, want, nlen) == 0;
}

static void copy_value(char *dst, size_t cap, const char *v, size_t n, bool *too_long) {
  if (n >= cap) {
    *too_long = true;
    n = cap - 1;
  }
  memcpy(dst, v, n);
  dst[n] = '\0';
}

static int parse_int64(const char *v, size_t n, int64_t *out) {
  if (n == 0 || n > 18)
    return -EINVAL;
  int64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (v[i] < '0' || v[i] > '9')
      return -EINVAL;
    x = x * 10 + (v[i] - '0');
  }
  *out = x;
  return 0;
}

/* Parses the head in c->in[0..end). Returns an HTTP status on error. */
static int parse_head(struct conn *c, size_t end) {
  struct req *r = &c->req;
  memset(r, 0, sizeof(*r));
  r->content_length = -1;
  r->query = "";
  const char *p = c->in, *lim = c->in + end;
  const char *eol = memmem(p, (size_t)(lim - p), "\r\n", 2);
  if (eol == NULL)
    return 400;
  /* request line */
  const char *sp1 = memchr(p, ' ', (size_t)(eol - p));
  if (sp1 == NULL || sp1 == p || (size_t)(sp1 - p) >= sizeof(r->method))
    return 400;
  memcpy(r->method, p, (size_t)(sp1 - p));
  const char *t = sp1 + 1;
  const char *sp2 = memchr(t, ' ', (size_t)(eol - t));
  if (sp2 == NULL || sp2 == t)
    return 400;
  if ((size_t)(sp2 - t) >= sizeof(r->target))
    return 431;
  memcpy(r->target, t, (size_t)(sp2 - t));
  const char *ver = sp2 + 1;
  size_t vlen = (size_t)(eol - ver);
  if (vlen == 8 && memcmp(ver, "HTTP/1.1", 8) == 0)
    r->keep_alive = true;
  else if (vlen == 8 && memcmp(ver, "HTTP/1.0", 8) == 0)
    r->http10 = true;
  else
    return 400;
  if (r->target[0] != '/')
    return 400;
  char *q = strchr(r->target, '?');
  size_t plen = q ? (size_t)(q - r->target) : strlen(r->target);
  if (plen >= sizeof(r->path))
    return 431;
  memcpy(r->path, r->target, plen);
  r->path[plen] = '\0';
  if (q)
    r->query = q + 1;
  bool too_long = false;
  bool te_seen = false;
  for (p = eol + 2; p < lim;) {
    eol = memmem(p, (size_t)(lim - p), "\r\n", 2);
    if (eol == NULL)
      eol = lim;
    if (eol == p)
      break;
    const char *colon = memchr(p, ':', (size_t)(eol - p));
    if (colon == NULL || colon == p || *p == ' ' || *p == '\t')
      return 400; /* no obs-fold, no nameless headers */
    size_t nlen = (size_t)(colon - p);
    for (size_t i = 0; i < nlen; i++)
      if (p[i] == ' ' || p[i] == '\t')
        return 400;
    const char *v = colon + 1;
    while (v < eol && (*v == ' ' || *v == '\t'))
      v++;
    const char *ve = eol;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
      ve--;
    size_t n = (size_t)(ve - v);
    for (size_t i = 0; i < n; i++)
      if (v[i] == '\0')
        return 400;
    if (header_is(p, nlen, "content-length")) {
      int64_t cl;
      if (parse_int64(v, n, &cl) != 0 || (r->content_length >= 0 && r->content_length != cl))
        return 400;
      r->content_length = cl;
    } else if (header_is(p, nlen, "transfer-encoding")) {
      if (te_seen || !(n == 7 && strncasecmp(v, "chunked", 7) == 0))
        return 400; /* only a single "chunked" is understood */
      te_seen = true;
      r->chunked = true;
    } else if (header_is(p, nlen, "content-type")) {
      copy_value(r->content_type, sizeof(r->content_type), v, n, &too_long);
    } else if (header_is(p, nlen, "content-encoding")) {
      copy_value(r->content_encoding, sizeof(r->content_encoding), v, n, &too_long);
    } else if (header_is(p, nlen, "x-access-token")) {
      copy_value(r->token, sizeof(r->token), v, n, &too_long);
      r->has_token = true;
    } else if (header_is(p, nlen, "authorization")) {
      if (n > 7 && strncasecmp(v, "Bearer ", 7) == 0) {
        copy_value(r->bearer, sizeof(r->bearer), v + 7, n - 7, &too_long);
        r->has_bearer = true;
      }
      /* "Basic user:" is the E2B SDK naming a user, not a credential. */
    } else if (header_is(p, nlen, "expect")) {
      if (n == 12 && strncasecmp(v, "100-continue", 12) == 0)
        r->expect_continue = true;
    } else if (header_is(p, nlen, "connection")) {
      if (n == 5 && strncasecmp(v, "close", 5) == 0)
        r->keep_alive = false;
      else if (n == 10 && strncasecmp(v, "keep-alive", 10) == 0)
        r->keep_alive = true;
    } else if (header_is(p, nlen, "keepalive-ping-interval")) {
      int64_t s;
      if (parse_int64(v, n, &s) == 0)
        r->keepalive_s = s < 1 ? 1 : s > 3600 ? 3600 : (int)s;
    } else if (header_is(p, nlen, "connect-timeout-ms")) {
      int64_t ms;
      if (parse_int64(v, n, &ms) == 0 && ms > 0)
        r->timeout_ms = ms;
    }
    p = eol + 2;
  }
  if (too_long)
    return 431;
  if (r->chunked && r->content_length >= 0)
    return 400; /* request smuggling shape: refuse */
  return 0;
}

static void body_done(struct conn *c) {
  set_state(c, C_HANDLING);
  timer_stop(c->a, &c->timer);
  if (c->body_mode == BODY_SINK)
    c->sink->ops->finish(c->sink);
  else
    route_body_done(c);
}

/* Hands body bytes to the sink; returns -1 when the conn was answered. */
static int body_bytes(struct conn *c, const char *d, size_t n) {
  if (n == 0)
    return 0;
  if (c->body_mode == BODY_SINK)
    return c->sink->ops->feed(c->sink, d, n);
  if (buf_size(&c->body) + n > c->body_limit) {
    http_error(c, 413, "request body over %zu bytes", c->body_limit);
    return -1;
  }
  if (buf_append(&c->body, d, n) != 0) {
    http_error(c, 503, "out of memory");
    return -1;
  }
  return 0;
}

/* Consumes body bytes from c->in; returns bytes used, or -1 when the
 * connection was answered or closed. */
static ssize_t take_body(struct conn *c, const char *d, size_t n) {
  size_t used = 0;
  if (!c->req.chunked) {
    size_t k = (uint64_t)c->body_left < n ? (size_t)c->body_left : n;
    if (body_bytes(c, d, k) < 0)
      return -1;
    c->body_left -= (int64_t)k;
    used = k;
    if (c->body_left == 0)
      body_done(c);
    return (ssize_t)used;
  }
  /* chunked: 0 size line, 1 data, 2 CRLF after data, 3 trailers */
  while (used < n && c->state == C_BODY) {
    if (c->chunk_state == 1) {
      size_t k = c->chunk_left < n - used ? (size_t)c->chunk_left : n - used;
      if (body_bytes(c, d + used, k) < 0)
        return -1;
      c->chunk_left -= k;
      used += k;
      if (c->chunk_left == 0)
        c->chunk_state = 2;
      continue;
    }
    /* line-oriented states */
    char ch = d[used++];
    if (c->chunk_line_len >= sizeof(c->chunk_line) - 1 && ch != '\n') {
      if (c->chunk_state != 3) {
        http_error(c, 400, "bad chunk framing");
        return -1;
      }
      c->chunk_line_len = 1; /* a long trailer line: only its end matters */
    }
    if (ch != '\n') {
      c->chunk_line[c->chunk_line_len++] = ch;
      continue;
    }
    size_t ll = c->chunk_line_len;
    if (ll > 0 && c->chunk_line[ll - 1] == '\r')
      ll--;
    c->chunk_line[ll] = '\0';
    c->chunk_line_len = 0;
    if (c->chunk_state == 2) {
      if (ll != 0) {
        http_error(c, 400, "bad chunk framing");
        return -1;
      }
      c->chunk_state = 0;
    } else if (c->chunk_state == 0) {
      uint64_t size = 0;
      size_t i = 0;
      for (; i < ll && c->chunk_line[i] != ';'; i++) {
        int h = c->chunk_line[i];
        int v = h >= '0' && h <= '9' ? h - '0'
                : h >= 'a' && h <= 'f' ? h - 'a' + 10
                : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (v < 0 || size > (UINT64_MAX >> 4)) {
          http_error(c, 400, "bad chunk size");
          return -1;
        }
        size = size << 4 | (uint64_t)v;
      }
      if (i == 0) {
        http_error(c, 400, "bad chunk size");
        return -1;
      }
      if (size == 0) {
        c->chunk_state = 3;
      } else {
        c->chunk_left = size;
        c->chunk_state = 1;
      }
    } else { /* trailers end with an empty line */
      if (ll == 0)
        body_done(c);
    }
  }
  return (ssize_t)used;
}

static void conn_parse(struct conn *c) {
  while (!c->dead && c->in_len > 0) {
    if (c->state == C_HEAD) {
      char *end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
      if (end == NULL) {
        if (c->in_len >= HTTP_MAX_HEAD) {
          c->close_after = true;
          http_error(c, 431, "request head over %d bytes", HTTP_MAX_HEAD);
        }
        return;
      }
      size_t hl = (size_t)(end - c->in) + 4;
      if (hl > HTTP_MAX_HEAD) {
        c->close_after = true;
        http_error(c, 431, "request head over %d bytes", HTTP_MAX_HEAD);
        return;
      }
      int st = parse_head(c, hl - 2);
      memmove(c->in, c->in + hl, c->in_len - hl);
      c->in_len -= hl;
      /* Heads carry tokens (/init's opens every pod of a pool): no copy
       * stays behind the input that moved over it. */
      explicit_bzero(c->in + c->in_len, hl);
      if (st != 0) {
        c->close_after = true;
        set_state(c, C_HANDLING);
        http_error(c, st, "malformed request");
        return;
      }
      set_state(c, C_BODY);
      c->body_mode = BODY_BUFFER;
      c->body_limit = 0;
      c->body_left = c->req.content_length > 0 ? c->req.content_length : 0;
      timer_start(c->a, &c->timer, c->a->body_timeout_ms, timeout_cb);
      route_head(c); /* may answer at once, or set body mode and limit */
      if (c->dead || c->state != C_BODY)
        return;
      if (c->body_mode == BODY_BUFFER && c->req.content_length > 0 &&
          (uint64_t)c->req.content_length > c->body_limit) {
        http_error(c, 413, "request body over %zu bytes", c->body_limit);
        return;
      }
      if (!c->req.chunked && c->body_left == 0) {
        body_done(c);
        return;
      }
      if (c->req.expect_continue && !c->req.http10) {
        buf_printf(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
        if (flush(c) < 0)
          return;
      }
      continue;
    }
    if (c->state == C_BODY) {
      ssize_t used = take_body(c, c->in, c->in_len);
      if (used < 0)
        return;
      memmove(c->in, c->in + used, c->in_len - (size_t)used);
      c->in_len -= (size_t)used;
      if (c->state == C_BODY)
        timer_start(c->a, &c->timer, c->a->body_timeout_ms, timeout_cb);
      continue;
    }
    return; /* HANDLING: the rest waits for the response to finish */
  }
}

static void conn_io_cb(struct agent *a, struct io *io, uint32_t events) {
  struct conn *c = container_of(io, struct conn, io);
  (void)a;
  if (c->dead)
    return;
  if (events & EPOLLOUT) {
    conn_service(c);
    if (c->dead)
      return;
  }
  if (c->rd_shut) {
    if (events & (EPOLLHUP | EPOLLERR))
      conn_close(c); /* gone altogether */
    return;
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    if (c->in_len >= sizeof(c->in)) {
      /* Buffer full while handling: stop reading until the response ends;
       * a hang-up still shows as EPOLLRDHUP/EPOLLHUP. */
      if (events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP))
        conn_close(c);
      else
        io_start(a, &c->io, buf_size(&c->out) ? EPOLLOUT | EPOLLRDHUP : EPOLLRDHUP);
      return;
    }
    ssize_t n = recv(c->io.fd, c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
    if (n == 0 && c->state == C_HANDLING && !c->req.keep_alive && !(events & (EPOLLHUP | EPOLLERR))) {
      /* A client that sent Connection: close and then shut down its side
       * after the whole request still reads the answer (curl, a shell's
       * nc). On a keep-alive connection the end of input means the client
       * left: a stream then detaches (killOnDisconnect kills). Once it is
       * gone altogether, a write fails and the connection closes. */
      c->rd_shut = true;
      conn_watch(c, buf_size(&c->out) > 0);
      return;
    }
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      conn_close(c); /* peer gone: streams detach, uploads are dropped */
      return;
    }
    if (n > 0) {
      c->in_len += (size_t)n;
      if (c->state != C_HANDLING)
        conn_parse(c);
    }
  }
}
