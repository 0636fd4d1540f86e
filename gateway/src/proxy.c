/* proxy.c - one forwarded request: a connection to the pod (new or kept
 * alive from an earlier request), the request body up, the answer down,
 * and the tunnel after a 101.
 *
 * An exchange is a small state machine (ex_set_state()):
 *
 *   CONNECTING --connected--> REQUEST --answer head--> RESPONSE --end--> CLOSING
 *        |                       |  \--101 (upgrade)--> TUNNEL --both ends--> CLOSING
 *        +--refused, timeout-----+--error / client gone / idle---------------> CLOSING
 *
 * (a request on a pooled connection starts in REQUEST.)
 *
 * Both directions stream with backpressure, and neither holds more than
 * about HIGH_WATER plus one read: the client's body (or tunnel input) is
 * paused while more than HIGH_WATER bytes wait to be written to the pod
 * and resumed below LOW_WATER; the pod's answer stops being read while
 * more than HIGH_WATER bytes wait to be written to the client, and is read
 * again once they fell to LOW_WATER (fr_http_on_drain()). The answer's
 * framing is parsed with http-parser, so the client's connection is kept
 * alive after a whole answer whatever framing the pod used (length,
 * chunked, or until it closes).
 *
 * Connections to pods are kept alive too (struct gw_upconn): after an
 * answer that leaves the connection reusable (the pod said keep-alive, the
 * request was sent whole, the answer was framed) it goes to an idle pool
 * keyed by the pod's address, where it is read (a close or stray bytes
 * discard it) and expires after POOL_IDLE_MS. Without it every request
 * would cost a connect, and the gateway, closing first, would hold a
 * TIME_WAIT port per request: a few hundred requests a second to one pod
 * exhaust the ephemeral ports towards it. Only a request the gateway
 * holds whole (no body, or a small one the server read whole) takes a
 * pooled connection; one that streams its body dials a new connection.
 * If the pod closed a pooled connection just as it was taken (it fails
 * before any answer byte), an idempotent request (GET, HEAD, OPTIONS, or
 * one with an Idempotency-Key) goes again once on a new connection, as
 * Go's http.Transport does; any other gets 502 upstream_closed, never a
 * second run of a command. Such requests take only connections idle for
 * less than POOL_FRESH_MS, which no server's keep-alive timeout closes
 * (the agent's is 300 s, common servers' 5 s or more).
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
/* Idle connections to pods: how long one is kept (under the agent's own
 * 300 s and most servers' keep-alive), how many per pod address and in
 * all. 32 a pod covers the concurrency one sandbox sees from its routers;
 * the total bounds descriptors and memory (~1 KiB each). */
#define POOL_IDLE_MS 30000
#define POOL_FRESH_MS 2000
#define POOL_PER_ADDR 32
#define POOL_MAX 4096
#define POOL_BUCKETS 1024

#define LOGC "gateway"

enum ex_state { EX_CONNECTING, EX_REQUEST, EX_RESPONSE, EX_TUNNEL, EX_CLOSING };

static const char *const ex_state_names[] = {"connecting", "request", "response", "tunnel", "closing"};

/* A connection to a pod: owned by one exchange at a time, or idle in the
 * pool. Freed only from its handle's close callback. */
struct gw_upconn {
  struct gw *g;
  struct gw_exchange *ex;        /* the owner; NULL while pooled or closing */
  uv_tcp_t tcp;
  uv_connect_t connect;
  uv_shutdown_t shut;
  struct sockaddr_storage addr;
  size_t bucket;
  struct gw_upconn *bprev, *bnext; /* the pool bucket, while pooled */
  struct gw_upconn *lprev, *lnext; /* the pool's idle list, oldest first */
  uint64_t idle_since;
  size_t pending;                /* bytes queued to the pod */
  int pooled, reading, closing, reused;
};

struct gw_exchange {
  struct gw *g;
  struct gw_exchange *prev, *next;
  struct fr_http_req *req;       /* NULL once the client's request is finished or gone */
  struct gw_upconn *up;          /* the pod's connection, NULL once given back */
  enum ex_state state;
  uv_timer_t timer;              /* freed from its close callback */
  struct sockaddr_storage addr;
  http_parser parser;
  struct fr_buf head;            /* the request head (kept for a retry until the answer begins) */
  struct fr_buf rhead;           /* the answer's headers to pass on */
  struct fr_buf hname, hvalue;
  int in_value;
  size_t rhead_bytes;
  int status;
  int interim;                   /* the answer being parsed is a 1xx other than 101 */
  int to_tunnel;                 /* a 101 to an upgrade: switch after the parser returns */
  int answered;                  /* the answer's head went to the client */
  int complete;                  /* the whole answer was parsed */
  int got_bytes;                 /* the pod sent something on this exchange */
  int parse_error;               /* a callback stopped the parser */
  int64_t body;                  /* the client's body framing (GW_BODY_* or a length) */
  int upgrade, head_method;
  int replayable;                /* no body, or a whole one: held whole by the gateway */
  int idempotent;                /* and may be sent twice (GET, HEAD, OPTIONS, Idempotency-Key) */
  int retried;
  int client_body_done;
  int client_paused;             /* we hold the client's body or tunnel input back */
  int up_eof, up_shut, up_shut_done;
  int tunnel_ended;              /* the client's side of the tunnel is over */
  uint64_t start_ms, last_ms;    /* uv_now */
  char key[320];                 /* "ns/pod" for the per-sandbox count */
};

struct up_write {
  uv_write_t w;
  struct gw_upconn *up;
  size_t len;
  char data[];
};

/* The pool: buckets by address, and every idle connection oldest first. */
struct gw_pool {
  struct gw_upconn *buckets[POOL_BUCKETS];
  struct gw_upconn *lhead, *ltail;
  size_t n;
  uv_timer_t expire;
  int timer_on;
};

static void ex_close(struct gw_exchange *ex);
static void ex_read_start(struct gw_exchange *ex);
static void ex_connected(struct gw_exchange *ex);
static int ex_dial(struct gw_exchange *ex);
static void on_up_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

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

/* ------------------------------------------------------------ connections to pods */

static int addr_equal(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
  if (a->ss_family != b->ss_family)
    return 0;
  if (a->ss_family == AF_INET) {
    const struct sockaddr_in *x = (const struct sockaddr_in *)a, *y = (const struct sockaddr_in *)b;
    return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
  }
  {
    const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a, *y = (const struct sockaddr_in6 *)b;
    return x->sin6_port == y->sin6_port && memcmp(&x->sin6_addr, &y->sin6_addr, 16) == 0;
  }
}

static size_t addr_bucket(const struct sockaddr_storage *a) {
  const unsigned char *p;
  size_t n, i;
  uint64_t h = 1469598103934665603ULL;

  if (a->ss_family == AF_INET) {
    p = (const unsigned char *)&((const struct sockaddr_in *)a)->sin_addr;
    n = 4;
    h = (h ^ ((const struct sockaddr_in *)a)->sin_port) * 1099511628211ULL;
  } else {
    p = (const unsigned char *)&((const struct sockaddr_in6 *)a)->sin6_addr;
    n = 16;
    h = (h ^ ((const struct sockaddr_in6 *)a)->sin6_port) * 1099511628211ULL;
  }
  for (i = 0; i < n; i++)
    h = (h ^ p[i]) * 1099511628211ULL;
  return (size_t)(h % POOL_BUCKETS);
}

static struct gw_pool *pool_of(struct gw *g) {
  if (g->pool == NULL) {
    g->pool = calloc(1, sizeof(*g->pool));
    if (g->pool != NULL) {
      uv_timer_init(g->loop, &g->pool->expire);
      g->pool->expire.data = g;
      uv_unref((uv_handle_t *)&g->pool->expire);
    }
  }
  return g->pool;
}

static void pool_unlink(struct gw_pool *p, struct gw_upconn *up) {
  if (!up->pooled)
    return;
  if (up->bprev != NULL)
    up->bprev->bnext = up->bnext;
  else
    p->buckets[up->bucket] = up->bnext;
  if (up->bnext != NULL)
    up->bnext->bprev = up->bprev;
  if (up->lprev != NULL)
    up->lprev->lnext = up->lnext;
  else
    p->lhead = up->lnext;
  if (up->lnext != NULL)
    up->lnext->lprev = up->lprev;
  else
    p->ltail = up->lprev;
  up->bprev = up->bnext = up->lprev = up->lnext = NULL;
  up->pooled = 0;
  p->n--;
  up->g->npooled = p->n;
}

static void on_upconn_closed(uv_handle_t *h) {
  struct gw_upconn *up = h->data;

  up->g->nupconns--;
  free(up);
}

/* Closes a connection to a pod (pooled or not, owner detached first). */
static void upconn_close(struct gw_upconn *up) {
  if (up == NULL || up->closing)
    return;
  if (up->pooled)
    pool_unlink(up->g->pool, up);
  up->closing = 1;
  up->ex = NULL;
  uv_close((uv_handle_t *)&up->tcp, on_upconn_closed);
}

static struct gw_upconn *upconn_new(struct gw *g, const struct sockaddr_storage *addr) {
  struct gw_upconn *up = calloc(1, sizeof(*up));

  if (up == NULL)
    return NULL;
  up->g = g;
  up->addr = *addr;
  up->bucket = addr_bucket(addr);
  uv_tcp_init(g->loop, &up->tcp);
  up->tcp.data = up->connect.data = up->shut.data = up;
  g->nupconns++;
  return up;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char scratch[READ_SIZE];

  /* One read at a time on the loop thread, handed over before the next
   * read: one buffer serves every connection (the client side copies). */
  (void)h;
  (void)suggested;
  buf->base = scratch;
  buf->len = sizeof(scratch);
}

static void on_pool_expire(uv_timer_t *t) {
  struct gw *g = t->data;
  struct gw_pool *p = g->pool;
  uint64_t now = uv_now(g->loop);

  while (p->lhead != NULL && now - p->lhead->idle_since >= POOL_IDLE_MS)
    upconn_close(p->lhead);
  if (p->lhead != NULL)
    uv_timer_start(t, on_pool_expire, POOL_IDLE_MS - (now - p->lhead->idle_since), 0);
  else
    p->timer_on = 0;
}

/* Gives <up> back for a later request to the same address, or closes it
 * when the pool for it (or in all) is full. */
static void pool_put(struct gw *g, struct gw_upconn *up) {
  struct gw_pool *p = pool_of(g);
  struct gw_upconn *c;
  size_t same = 0;

  up->ex = NULL;
  if (p == NULL || g->draining) {
    upconn_close(up);
    return;
  }
  for (c = p->buckets[up->bucket]; c != NULL; c = c->bnext)
    same += addr_equal(&c->addr, &up->addr);
  if (same >= POOL_PER_ADDR)
    upconn_close(up);
  else if (p->n >= POOL_MAX && p->lhead != NULL)
    upconn_close(p->lhead); /* the oldest goes, this one stays */
  if (up->closing)
    return;
  /* Read while idle (on_up_read without an owner): a close or stray bytes
   * from the pod discard the connection. The same callback serves the
   * next owner, so taking it costs no epoll change. */
  if (!up->reading) {
    if (uv_read_start((uv_stream_t *)&up->tcp, on_alloc, on_up_read) != 0) {
      upconn_close(up);
      return;
    }
    up->reading = 1;
  }
  up->pooled = 1;
  up->reused = 1;
  up->idle_since = uv_now(g->loop);
  up->bnext = p->buckets[up->bucket];
  if (up->bnext != NULL)
    up->bnext->bprev = up;
  p->buckets[up->bucket] = up;
  up->lprev = p->ltail;
  if (p->ltail != NULL)
    p->ltail->lnext = up;
  else
    p->lhead = up;
  p->ltail = up;
  p->n++;
  g->npooled = p->n;
  if (!p->timer_on) {
    p->timer_on = 1;
    uv_timer_start(&p->expire, on_pool_expire, POOL_IDLE_MS, 0);
  }
}

/* The most recently pooled connection to <addr>, taken out, or NULL;
 * with <fresh_only>, only one idle for less than POOL_FRESH_MS. */
static struct gw_upconn *pool_take(struct gw *g, const struct sockaddr_storage *addr, int fresh_only) {
  struct gw_pool *p = g->pool;
  struct gw_upconn *c;
  uint64_t now = uv_now(g->loop);

  if (p == NULL)
    return NULL;
  for (c = p->buckets[addr_bucket(addr)]; c != NULL; c = c->bnext)
    if (addr_equal(&c->addr, addr) && (!fresh_only || now - c->idle_since < POOL_FRESH_MS))
      break;
  if (c == NULL)
    return NULL;
  pool_unlink(p, c);
  g->pool_hits++;
  return c;
}

static void on_pool_timer_closed(uv_handle_t *h) {
  free(fr_container_of((uv_timer_t *)h, struct gw_pool, expire));
}

void gw_pool_close(struct gw *g) {
  struct gw_pool *p = g->pool;

  if (p == NULL)
    return;
  while (p->lhead != NULL)
    upconn_close(p->lhead);
  g->pool = NULL;
  /* The pool memory goes with its timer's close callback. */
  uv_close((uv_handle_t *)&p->expire, on_pool_timer_closed);
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

/* The pod's connection failed (<why>; <code> for the client when nothing
 * was answered yet). An idempotent request on a reused connection that got
 * nothing back yet goes again on a new one, once: the pod closed an idle
 * connection just as it was taken. */
static void fail_code(struct gw_exchange *ex, const char *code, const char *why) {
  if (ex->answered || ex->state == EX_TUNNEL) {
    fail_answered(ex, why);
    return;
  }
  if (ex->up != NULL && ex->up->reused && ex->replayable && ex->idempotent && !ex->got_bytes && !ex->retried &&
      ex->req != NULL) {
    FR_DEBUG(LOGC, "%s: a kept-alive connection failed before any answer (%s); sending again", ex->key, why);
    ex->retried = 1;
    ex->g->pool_retries++;
    upconn_close(ex->up);
    ex->up = NULL;
    ex->up_eof = ex->got_bytes = ex->parse_error = 0;
    http_parser_init(&ex->parser, HTTP_RESPONSE);
    ex->parser.data = ex;
    ex_set_state(ex, EX_CONNECTING);
    if (ex_dial(ex) != 0)
      fail_unanswered(ex, 502, "upstream_unreachable", "cannot connect to the sandbox");
    return;
  }
  if (strcmp(code, "upstream_closed") == 0)
    fail_unanswered(ex, 502, code, "the sandbox closed the connection without answering");
  else
    fail_unanswered(ex, 502, code, "the sandbox's connection failed: %s", why);
}

static void fail(struct gw_exchange *ex, const char *why) {
  fail_code(ex, "upstream_failed", why);
}

static void on_timer_closed(uv_handle_t *h) {
  struct gw_exchange *ex = h->data;
  struct gw *g = ex->g;

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

/* The pod's connection can carry another request: the pod said
 * keep-alive, the whole answer was parsed without EOF framing, the whole
 * request went out, and nothing was upgraded. */
static int reusable(const struct gw_exchange *ex) {
  return ex->up != NULL && ex->complete && !ex->up_eof && !ex->upgrade && ex->client_body_done &&
         ex->up->pending == 0 && http_should_keep_alive(&ex->parser) && ex->parser.http_major == 1 &&
         ex->parser.http_minor == 1;
}

/* Ends the exchange: the pod's connection goes back to the pool or is
 * closed, the timer closes and frees the exchange. The client's request
 * must be finished or gone. */
static void ex_close(struct gw_exchange *ex) {
  struct gw_upconn *up = ex->up;

  if (ex->state == EX_CLOSING)
    return;
  if (ex->req != NULL) {
    /* A path that forgot to answer: never leave a client hanging. */
    struct fr_http_req *req = ex->req;
    FR_ERROR(LOGC, "%s: exchange closed with its request unanswered", ex->key);
    drop_req(ex);
    fr_http_abort(req);
  }
  if (up != NULL) {
    if (reusable(ex))
      pool_put(ex->g, up);
    else
      upconn_close(up);
    ex->up = NULL;
  }
  ex_set_state(ex, EX_CLOSING);
  uv_close((uv_handle_t *)&ex->timer, on_timer_closed);
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
  struct gw_upconn *up = uw->up;
  struct gw_exchange *ex = up->ex;

  up->pending -= uw->len;
  free(uw);
  if (up->closing || ex == NULL || ex->state == EX_CLOSING)
    return;
  if (status < 0) {
    fail(ex, uv_strerror(status));
    return;
  }
  touch(ex);
  if (up->pending <= LOW_WATER)
    resume_client(ex);
}

/* Queues <bufs> to the pod: what the socket takes at once goes directly,
 * the rest is copied into one write request. 0 or a negative error. */
static int up_writev(struct gw_exchange *ex, const uv_buf_t *bufs, unsigned int n) {
  struct gw_upconn *up = ex->up;
  struct up_write *uw;
  size_t total = 0, skip, off = 0;
  unsigned int i;
  int rc = 0;

  for (i = 0; i < n; i++)
    total += bufs[i].len;
  if (total == 0)
    return 0;
  if (up->pending == 0) {
    rc = uv_try_write((uv_stream_t *)&up->tcp, bufs, n);
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
  uw->up = up;
  uw->len = off;
  {
    uv_buf_t b = uv_buf_init(uw->data, (unsigned int)off);
    rc = uv_write(&uw->w, (uv_stream_t *)&up->tcp, &b, 1, on_up_write);
  }
  if (rc < 0) {
    free(uw);
    return rc;
  }
  up->pending += off;
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

  if (ex == NULL || ex->state == EX_CLOSING || ex->up == NULL)
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
  if (ex->up->pending > HIGH_WATER)
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
  struct gw_upconn *up = sr->data;
  struct gw_exchange *ex = up->ex;

  if (up->closing || ex == NULL || ex->state == EX_CLOSING)
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
      rc = uv_shutdown(&ex->up->shut, (uv_stream_t *)&ex->up->tcp, on_up_shutdown);
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
  if (ex->up->pending > HIGH_WATER)
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
  if (ex->req == NULL || ex->state == EX_CLOSING || ex->up == NULL || fr_http_pending_bytes(ex->req) <= HIGH_WATER)
    return;
  if (ex->up->reading) {
    uv_read_stop((uv_stream_t *)&ex->up->tcp);
    ex->up->reading = 0;
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
  if (rc != 0 || req == NULL) {
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
  fr_buf_free(&ex->head); /* no retry from here on */
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
  ex->complete = 1;
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
    /* The answer is complete (or, on EOF, ended by the close). Bytes after
     * it would be an answer to nothing: the connection is not reused. */
    if (n < len)
      ex->up_eof = 1;
    ex_close(ex);
    return;
  }
  if (err != HPE_OK) {
    if (ex->answered)
      fail_answered(ex, ex->req == NULL ? "the client left" : http_errno_description(err));
    else
      fail_unanswered(ex, 502, "upstream_bad_response", "the sandbox's answer is not HTTP/1.1 (%s)",
                      ex->parse_error ? "head too large or unexpected 101" : http_errno_name(err));
    return;
  }
  if (len == 0) {
    /* EOF before the answer was complete. */
    if (ex->answered)
      fail_answered(ex, "the sandbox closed the connection in the middle of the answer");
    else
      fail_code(ex, "upstream_closed", "closed before answering");
    return;
  }
  client_backpressure(ex);
}

static void on_up_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  struct gw_upconn *up = s->data;
  struct gw_exchange *ex = up->ex;

  if (up->closing || nread == 0)
    return;
  if (ex == NULL) {
    upconn_close(up); /* idle in the pool: the pod closed it, or sent what nobody asked for */
    return;
  }
  if (ex->state == EX_CLOSING)
    return;
  touch(ex);
  if (nread < 0) {
    if (nread != UV_EOF) {
      fail(ex, uv_strerror((int)nread));
      return;
    }
    ex->up_eof = 1;
    uv_read_stop(s);
    up->reading = 0;
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
  ex->got_bytes = 1;
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
  struct gw_upconn *up = ex->up;

  if (up == NULL || up->reading || ex->up_eof || ex->state == EX_CLOSING || ex->state == EX_CONNECTING)
    return;
  if (uv_read_start((uv_stream_t *)&up->tcp, on_alloc, on_up_read) == 0)
    up->reading = 1;
}

/* ------------------------------------------------------------ start */

/* The pod's connection is up (new or from the pool): send the request. */
static void ex_connected(struct gw_exchange *ex) {
  int rc;

  ex_set_state(ex, EX_REQUEST);
  touch(ex);
  uv_timer_start(&ex->timer, on_timer, ex->g->opts.idle_timeout_ms, 0);
  rc = up_write(ex, ex->head.data, ex->head.len);
  /* A body the server read whole (small, or an upgrade's) goes with it. */
  if (rc == 0 && ex->req != NULL && !ex->req->body_streaming && ex->req->body_len > 0)
    rc = up_write(ex, ex->req->body, ex->req->body_len);
  if (rc != 0) {
    fail(ex, uv_strerror(rc));
    return;
  }
  ex_read_start(ex);
  if (ex->req != NULL && ex->req->body_streaming) {
    ex->client_paused = 1; /* paused at the start */
    resume_client(ex);
  }
}

static void on_connect(uv_connect_t *cr, int status) {
  struct gw_upconn *up = cr->data;
  struct gw_exchange *ex = up->ex;

  if (up->closing || ex == NULL || ex->state == EX_CLOSING)
    return; /* cancelled */
  if (status < 0) {
    fail_unanswered(ex, 502, "upstream_unreachable", "cannot connect to the sandbox: %s", uv_strerror(status));
    return;
  }
  uv_tcp_nodelay(&up->tcp, 1);
  ex_connected(ex);
}

/* A new connection to the pod. 0, or a negative error (nothing to undo). */
static int ex_dial(struct gw_exchange *ex) {
  struct gw_upconn *up = upconn_new(ex->g, &ex->addr);
  int rc;

  if (up == NULL)
    return -ENOMEM;
  up->ex = ex;
  ex->up = up;
  uv_timer_start(&ex->timer, on_timer, ex->g->opts.connect_timeout_ms, 0);
  rc = uv_tcp_connect(&up->connect, &up->tcp, (const struct sockaddr *)&ex->addr, on_connect);
  if (rc != 0) {
    upconn_close(up);
    ex->up = NULL;
  }
  return rc;
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
  ex->replayable = !req->body_streaming && !upgrade;
  ex->idempotent = strcmp(req->method, "GET") == 0 || ex->head_method || strcmp(req->method, "OPTIONS") == 0 ||
                   fr_http_req_header(req, "Idempotency-Key") != NULL ||
                   fr_http_req_header(req, "X-Idempotency-Key") != NULL;
  ex->client_body_done = !req->body_streaming;
  ex->start_ms = ex->last_ms = uv_now(g->loop);
  memcpy(&ex->addr, addr, addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
  snprintf(ex->key, sizeof(ex->key), "%s", key);
  http_parser_init(&ex->parser, HTTP_RESPONSE);
  ex->parser.data = ex;
  uv_timer_init(g->loop, &ex->timer);
  ex->timer.data = ex;
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
  if (ex->replayable && (ex->up = pool_take(g, &ex->addr, !ex->idempotent)) != NULL) {
    ex->up->ex = ex;
    ex_connected(ex);
    return 0;
  }
  rc = ex_dial(ex);
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
  gw_pool_close(g);
}
