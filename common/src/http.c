/* http.c - HTTP/1.1 server on libuv with http-parser, optional TLS through
 * OpenSSL memory BIOs, chunked streaming and WebSocket upgrades.
 *
 * Each connection is a small state machine (see conn_set_state()):
 *
 *   IDLE --first byte--> HEAD --headers--> BODY --message--> HANDLING
 *     ^                                                      |   |   |
 *     +------------ response finished (keep-alive) ----------+   |   |
 *                               STREAMING <--stream_begin--------+   |
 *                               WS        <--ws_accept---------------+
 *                               TUNNEL    <--tunnel_begin------------+
 *   any --error/close--> CLOSING ; --last write, no keep-alive--> LINGER
 *
 * TUNNEL is a raw byte stream both ways after a 101 (a reverse proxy's
 * Upgrade pass-through): no framing, half-close in each direction, and the
 * handler's own backpressure (fr_http_tunnel_pause(), fr_http_on_drain()).
 *
 * One timer per connection carries whichever deadline the state has (idle,
 * head, body, linger) or a zero-delay "resume" that parses pipelined input a
 * loop turn after a response finished, so a handler is never re-entered from
 * inside its own fr_http_respond() call.
 */
#include "fr/http.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "fr/assert.h"
#include "fr/buf.h"
#include "fr/log.h"
#include "fr/util.h"
#include "fr/ws.h"

#define MAX_HEADERS 100
#define LINGER_MS 2000
/* Stop reading from a client whose unparsed input grows past this while a
 * request is being handled (pipelining flood); resumed when it drains. */
#define MAX_BUFFERED_INPUT (256 * 1024)
/* Streamed request bodies are handed over in pieces of about this size, and
 * a paused one stops reading the socket once this much input waits. */
#define BODY_PIECE (64 * 1024)

enum conn_state {
  CS_IDLE,
  CS_HEAD,
  CS_BODY,
  CS_HANDLING,
  CS_STREAMING,
  CS_WS,
  CS_TUNNEL,
  CS_LINGER,
  CS_CLOSING,
};

static const char *const state_names[] = {
    "idle", "head", "body", "handling", "streaming", "ws", "tunnel", "linger", "closing",
};

enum timer_kind { TK_NONE, TK_IDLE, TK_HEAD, TK_BODY, TK_RESUME, TK_LINGER };

struct fr_http_server {
  uv_loop_t *loop;
  struct fr_http_server_opts opts;
  fr_http_handler_cb handler;
  void *arg;
  /* Allocated per listen() so listening again never waits for the old
   * handle's close callback (and its errors reach the caller). */
  uv_tcp_t *listener;      /* NULL when not listening */
  size_t listeners_closing;
  char host[64];
  int port;
  struct conn *conns;
  size_t nconns;           /* open connections, in <conns> */
  /* Connections between requests with nothing left to send, oldest first:
   * what the connection limits evict first. */
  struct conn *idle_head, *idle_tail;
  size_t nidle;
  struct ipcount *ips;     /* open connections per peer address */
  size_t ips_cap, ips_n;
  uint64_t evicted, refused;
  size_t nclosing;         /* connections whose handles are still closing */
  uv_idle_t defer;         /* accepts past ACCEPTS_PER_TURN resume from it on the next
                              loop turn; closed by _free() so the end is always async */
  uint64_t accept_ms;      /* the loop time of the accepts counted in <accepts> */
  unsigned accepts;
  int defer_closed;
  int freeing;
  int draining;            /* fr_http_server_drain(): every response closes its connection */
  fr_http_server_close_cb close_cb;
  void *close_arg;
};

struct conn {
  struct fr_http_server *srv;
  struct conn *prev, *next;
  struct conn *idle_prev, *idle_next;
  int in_idle;
  int ip_counted;
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_shutdown_t shutdown_req;
  int open_handles;
  enum conn_state state;
  enum timer_kind timer_kind;
  int reading;
  int keep_alive;
  int close_after_flush;
  int abort_notify;        /* call abort_cb / ws close_cb when closing */
  size_t pending_bytes;
  size_t idle_pending_mark;
  int resp_status;           /* for done_cb */
  size_t resp_bytes;
  int done_reported;  /* pending_bytes when the idle timer last fired */
  char peer_ip[64];
  int peer_port;

  /* Parsing. <in> holds plaintext not yet given to the parser. */
  http_parser parser;
  struct fr_buf in;
  size_t head_bytes;
  int reject_status;       /* set by a parser callback to stop with a status */
  int message_done;
  struct fr_buf url;
  struct fr_buf hname, hvalue;
  int in_value;
  struct fr_http_header *headers;
  size_t nheaders;
  struct fr_buf body;
  struct fr_buf path;

  /* Streamed request body (opts.stream_body_cb): dispatched at the head,
   * pieces parsed only while not paused and handed to req.body_cb. */
  int body_stream;
  int body_head_done;      /* head parsed, handler not yet called */
  int body_paused;
  int body_done;           /* the end was delivered */
  /* Response framing of a stream: 0 chunked, 1 Content-Length, 2 none. */
  int resp_framing;
  uint64_t resp_left;      /* Content-Length bytes still to write */
  fr_http_drain_cb drain_cb;
  size_t drain_low;

  struct fr_http_req req;

  /* TLS */
  SSL *ssl;
  BIO *rbio, *wbio;

  /* WebSocket */
  struct fr_ws_reader ws;
  fr_http_ws_message_cb ws_message;
  fr_http_ws_close_cb ws_close;
  int ws_close_sent;
  int ws_close_code;

  /* Tunnel (fr_http_tunnel_begin) */
  fr_http_tunnel_data_cb tun_data;
  fr_http_tunnel_end_cb tun_end;
  int tun_paused;          /* the handler holds the peer's bytes back */
  int tun_peer_eof;        /* the peer shut down its side (FIN or TLS close_notify) */
  int tun_eof_delivered;   /* ... and the handler heard it */
  int tun_shut;            /* fr_http_tunnel_shutdown() was called */
  int tun_shut_done;       /* ... and our FIN is out */
  int tun_err;             /* why the tunnel ended, for tun_end (0 = both sides closed cleanly) */
};

struct write_req {
  uv_write_t w;
  struct conn *c;
  size_t len;
  char data[];
};

static void conn_close(struct conn *c, int notify);
static void conn_linger(struct conn *c);
static void conn_process_input(struct conn *c);
static int conn_writev(struct conn *c, const uv_buf_t *bufs, unsigned int n);
static void conn_finish_request(struct conn *c);
static void report_done(struct conn *c, int status);
static void server_maybe_finish_free(struct fr_http_server *srv);

/* ---------------------------------------------------------------------- */
/* state and timers                                                        */

/* ---- connection limits: idle list and per-address counts ---- */

struct ipcount {
  char ip[64];              /* "" = empty slot */
  size_t n;
};

static uint64_t ip_hash(const char *s) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */

  for (; *s != '\0'; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static struct ipcount *ip_slot(struct fr_http_server *srv, const char *ip) {
  size_t i = (size_t)ip_hash(ip) & (srv->ips_cap - 1);

  while (srv->ips[i].ip[0] != '\0' && strcmp(srv->ips[i].ip, ip) != 0)
    i = (i + 1) & (srv->ips_cap - 1);
  return &srv->ips[i];
}

/* One more connection from <ip>: the new count, or 0 on out of memory
 * (then the address goes uncounted and unlimited for this connection). */
static size_t ip_inc(struct fr_http_server *srv, const char *ip) {
  struct ipcount *e;

  if (srv->ips_n + 1 > srv->ips_cap / 2) {
    size_t cap = srv->ips_cap ? srv->ips_cap * 2 : 64, i, ocap = srv->ips_cap;
    struct ipcount *old = srv->ips, *nt = calloc(cap, sizeof(*nt));
    if (nt == NULL)
      return 0;
    srv->ips = nt;
    srv->ips_cap = cap;
    for (i = 0; i < ocap; i++)
      if (old[i].ip[0] != '\0')
        *ip_slot(srv, old[i].ip) = old[i];
    free(old);
  }
  e = ip_slot(srv, ip);
  if (e->ip[0] == '\0') {
    snprintf(e->ip, sizeof(e->ip), "%s", ip);
    srv->ips_n++;
  }
  return ++e->n;
}

static size_t ip_count(struct fr_http_server *srv, const char *ip) {
  return srv->ips_cap ? ip_slot(srv, ip)->n : 0;
}

/* One connection from <ip> fewer; an address at 0 leaves the table
 * (backward-shift deletion keeps the probe chains whole). */
static void ip_dec(struct fr_http_server *srv, const char *ip) {
  struct ipcount *e = ip_slot(srv, ip);
  size_t i, j, home, mask = srv->ips_cap - 1;

  if (e->ip[0] == '\0' || --e->n > 0)
    return;
  i = (size_t)(e - srv->ips);
  for (j = (i + 1) & mask; srv->ips[j].ip[0] != '\0'; j = (j + 1) & mask) {
    home = (size_t)ip_hash(srv->ips[j].ip) & mask;
    /* Move j back to i when i lies cyclically in [home, j). */
    if (((j - home) & mask) >= ((j - i) & mask)) {
      srv->ips[i] = srv->ips[j];
      i = j;
    }
  }
  srv->ips[i].ip[0] = '\0';
  srv->ips[i].n = 0;
  srv->ips_n--;
}

static void idle_remove(struct conn *c) {
  struct fr_http_server *srv = c->srv;

  if (!c->in_idle)
    return;
  if (c->idle_prev)
    c->idle_prev->idle_next = c->idle_next;
  else
    srv->idle_head = c->idle_next;
  if (c->idle_next)
    c->idle_next->idle_prev = c->idle_prev;
  else
    srv->idle_tail = c->idle_prev;
  c->idle_prev = c->idle_next = NULL;
  c->in_idle = 0;
  srv->nidle--;
}

static void idle_append(struct conn *c) {
  struct fr_http_server *srv = c->srv;

  if (c->in_idle)
    return;
  c->idle_prev = srv->idle_tail;
  c->idle_next = NULL;
  if (srv->idle_tail)
    srv->idle_tail->idle_next = c;
  else
    srv->idle_head = c;
  srv->idle_tail = c;
  c->in_idle = 1;
  srv->nidle++;
}

static void conn_set_state(struct conn *c, enum conn_state s) {
  if (c->state == s)
    return;
  /* CLOSING is final; a lingering connection only closes. */
  FR_ASSERT(c->state != CS_CLOSING);
  FR_ASSERT(c->state != CS_LINGER || s == CS_CLOSING);
  FR_DEBUG(c->srv->opts.name, "conn %s:%d %s -> %s", c->peer_ip, c->peer_port,
           state_names[c->state], state_names[s]);
  if (c->state == CS_IDLE)
    idle_remove(c);
  c->state = s;
  if (s == CS_IDLE)
    idle_append(c);
}

static void on_timer(uv_timer_t *t);

static void conn_timer(struct conn *c, enum timer_kind kind, uint64_t ms) {
  c->timer_kind = kind;
  if (kind == TK_NONE || c->state == CS_CLOSING) {
    uv_timer_stop(&c->timer);
    return;
  }
  uv_timer_start(&c->timer, on_timer, ms, 0);
}

/* ---------------------------------------------------------------------- */
/* output                                                                  */

static void on_write(uv_write_t *w, int status) {
  struct write_req *wr = fr_container_of(w, struct write_req, w);
  struct conn *c = wr->c;

  c->pending_bytes -= wr->len;
  free(wr);
  if (c->state == CS_CLOSING)
    return;
  if (status < 0) {
    conn_close(c, 1);
    return;
  }
  if (c->close_after_flush && c->pending_bytes == 0) {
    /* A WebSocket close: on_close still has to run. An HTTP response that
     * ends the connection: linger like the unqueued case does. */
    if (c->state == CS_WS)
      conn_close(c, 1);
    else if (c->state != CS_LINGER)
      conn_linger(c);
    return;
  }
  if (c->drain_cb != NULL && c->pending_bytes <= c->drain_low &&
      (c->state == CS_HANDLING || c->state == CS_STREAMING || c->state == CS_TUNNEL)) {
    fr_http_drain_cb cb = c->drain_cb;
    c->drain_cb = NULL;
    cb(&c->req);
  }
}

/* Hands ciphertext or plaintext to the socket: what the kernel takes at
 * once is written directly, the rest is copied into one write request. */
static int sock_writev(struct conn *c, const uv_buf_t *bufs, unsigned int n) {
  struct write_req *wr;
  size_t total = 0, off = 0, skip;
  unsigned int i;
  int rc = 0;

  for (i = 0; i < n; i++)
    total += bufs[i].len;
  if (total == 0)
    return 0;
  if (c->pending_bytes == 0) {
    rc = uv_try_write((uv_stream_t *)&c->tcp, bufs, n);
    if (rc < 0 && rc != UV_EAGAIN)
      return rc;
    if (rc > 0 && (size_t)rc == total)
      return 0;
  }
  skip = rc > 0 ? (size_t)rc : 0;
  wr = malloc(sizeof(*wr) + total - skip);
  if (wr == NULL)
    return -ENOMEM;
  for (i = 0; i < n; i++) {
    size_t len = bufs[i].len;
    const char *p = bufs[i].base;
    if (skip >= len) {
      skip -= len;
      continue;
    }
    p += skip;
    len -= skip;
    skip = 0;
    memcpy(wr->data + off, p, len);
    off += len;
  }
  wr->c = c;
  wr->len = off;
  {
    uv_buf_t b = uv_buf_init(wr->data, (unsigned int)off);
    rc = uv_write(&wr->w, (uv_stream_t *)&c->tcp, &b, 1, on_write);
  }
  if (rc < 0) {
    free(wr);
    return rc;
  }
  c->pending_bytes += off;
  return 0;
}

/* Moves whatever OpenSSL produced into the socket. */
static int tls_flush(struct conn *c) {
  char tmp[16384];
  int n;

  while ((n = BIO_read(c->wbio, tmp, sizeof(tmp))) > 0) {
    uv_buf_t b = uv_buf_init(tmp, (unsigned int)n);
    int rc = sock_writev(c, &b, 1);
    if (rc < 0)
      return rc;
  }
  return 0;
}

static int conn_writev(struct conn *c, const uv_buf_t *bufs, unsigned int n) {
  unsigned int i;

  if (c->state == CS_CLOSING)
    return -ECONNRESET;
  if (c->ssl == NULL)
    return sock_writev(c, bufs, n);
  for (i = 0; i < n; i++) {
    if (bufs[i].len == 0)
      continue;
    /* With memory BIOs SSL_write never wants I/O: it only encrypts. */
    if (SSL_write(c->ssl, bufs[i].base, (int)bufs[i].len) <= 0)
      return -EPROTO;
  }
  return tls_flush(c);
}

static int conn_write(struct conn *c, const void *data, size_t len) {
  uv_buf_t b = uv_buf_init((char *)data, (unsigned int)len);
  return conn_writev(c, &b, 1);
}

/* ---------------------------------------------------------------------- */
/* request state                                                           */

static void req_reset(struct conn *c) {
  size_t i;

  for (i = 0; i < c->nheaders; i++) {
    free(c->headers[i].name);
    free(c->headers[i].value);
  }
  free(c->headers);
  c->headers = NULL;
  c->nheaders = 0;
  fr_buf_reset(&c->url);
  fr_buf_reset(&c->hname);
  fr_buf_reset(&c->hvalue);
  fr_buf_reset(&c->path);
  fr_buf_free(&c->body);
  c->in_value = 0;
  c->head_bytes = 0;
  c->reject_status = 0;
  c->message_done = 0;
  c->body_stream = 0;
  c->body_head_done = 0;
  c->body_paused = 0;
  c->body_done = 0;
  c->resp_framing = 0;
  c->resp_left = 0;
  c->drain_cb = NULL;
  memset(&c->req, 0, sizeof(c->req));
}

static int push_header(struct conn *c) {
  struct fr_http_header *h;

  if (c->nheaders >= MAX_HEADERS) {
    c->reject_status = 431;
    return -1;
  }
  h = realloc(c->headers, (c->nheaders + 1) * sizeof(*h));
  if (h == NULL) {
    c->reject_status = 503;
    return -1;
  }
  c->headers = h;
  h[c->nheaders].name = fr_buf_detach(&c->hname, NULL);
  h[c->nheaders].value = fr_buf_detach(&c->hvalue, NULL);
  if (h[c->nheaders].name == NULL || h[c->nheaders].value == NULL) {
    free(h[c->nheaders].name);
    free(h[c->nheaders].value);
    c->reject_status = 503;
    return -1;
  }
  c->nheaders++;
  c->in_value = 0;
  return 0;
}

static int head_account(struct conn *c, size_t len) {
  c->head_bytes += len;
  if (c->head_bytes > c->srv->opts.max_header_bytes) {
    c->reject_status = 431;
    return -1;
  }
  return 0;
}

static int on_message_begin(http_parser *p) {
  struct conn *c = p->data;

  req_reset(c);
  return 0;
}

static int on_url(http_parser *p, const char *at, size_t len) {
  struct conn *c = p->data;

  if (head_account(c, len) != 0)
    return -1;
  if (fr_buf_append(&c->url, at, len) != 0) {
    c->reject_status = 503;
    return -1;
  }
  return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len) {
  struct conn *c = p->data;

  if (head_account(c, len) != 0)
    return -1;
  if (c->in_value && push_header(c) != 0)
    return -1;
  if (fr_buf_append(&c->hname, at, len) != 0) {
    c->reject_status = 503;
    return -1;
  }
  return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
  struct conn *c = p->data;

  if (head_account(c, len) != 0)
    return -1;
  c->in_value = 1;
  /* An empty value still needs an allocated string. */
  if (fr_buf_reserve(&c->hvalue, len) != 0 || fr_buf_append(&c->hvalue, at, len) != 0) {
    c->reject_status = 503;
    return -1;
  }
  return 0;
}

static const char *find_header(struct conn *c, const char *name) {
  size_t i;

  for (i = 0; i < c->nheaders; i++)
    if (strcasecmp(c->headers[i].name, name) == 0)
      return c->headers[i].value;
  return NULL;
}

/* True if the comma-separated header value contains <token>. */
static int header_has_token(const char *v, const char *token) {
  size_t tl = strlen(token);

  while (v != NULL && *v != '\0') {
    while (*v == ' ' || *v == '\t' || *v == ',')
      v++;
    if (strncasecmp(v, token, tl) == 0 &&
        (v[tl] == '\0' || v[tl] == ',' || v[tl] == ' ' || v[tl] == '\t'))
      return 1;
    v = strchr(v, ',');
  }
  return 0;
}

static int req_fill_head(struct conn *c);

static int on_headers_complete(http_parser *p) {
  struct conn *c = p->data;
  const char *expect;

  if (c->in_value && push_header(c) != 0)
    return -1;
  if (c->url.len == 0) {
    c->reject_status = 400;
    return -1;
  }
  /* A path that does not decode is left to the buffered path's 400. */
  /* Only a request that has a body streams it: one without (no
   * Content-Length, or 0, and not chunked) is complete at its head, so it
   * is handled whole, and the connection stays reusable after the answer. */
  if (c->srv->opts.stream_body_cb != NULL && !p->upgrade &&
      ((p->flags & F_CHUNKED) ||
       ((p->flags & F_CONTENTLENGTH) && p->content_length != ULLONG_MAX && p->content_length > 0)) &&
      req_fill_head(c) == 0 && c->srv->opts.stream_body_cb(&c->req, c->srv->arg))
    c->body_stream = 1;
  if (!c->body_stream && (p->flags & F_CONTENTLENGTH) && p->content_length != ULLONG_MAX &&
      p->content_length > c->srv->opts.max_body_bytes) {
    c->reject_status = 413;
    return -1;
  }
  expect = find_header(c, "Expect");
  if (expect != NULL) {
    if (strcasecmp(expect, "100-continue") != 0) {
      c->reject_status = 417;
      return -1;
    }
    /* curl sends Expect: 100-continue for larger bodies and waits ~1 s for
     * this; answering at once keeps uploads fast. */
    if (conn_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25) != 0) {
      c->reject_status = 503;
      return -1;
    }
  }
  conn_set_state(c, CS_BODY);
  if (c->body_stream) {
    /* Stop here: the handler is called from conn_process_input(), outside
     * the parser, and the body is parsed only as fast as it is taken. */
    c->body_head_done = 1;
    http_parser_pause(p, 1);
    return 0;
  }
  conn_timer(c, TK_BODY, c->srv->opts.body_timeout_ms);
  return 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
  struct conn *c = p->data;

  if (c->body_stream) {
    /* Collected here, handed over after the parser returns. */
    if (fr_buf_append(&c->body, at, len) != 0) {
      c->reject_status = 503;
      return -1;
    }
    if (c->body.len >= BODY_PIECE)
      http_parser_pause(p, 1);
    return 0;
  }
  if (c->body.len + len > c->srv->opts.max_body_bytes) {
    c->reject_status = 413;
    return -1;
  }
  if (fr_buf_append(&c->body, at, len) != 0) {
    c->reject_status = 503;
    return -1;
  }
  return 0;
}

static int on_message_complete(http_parser *p) {
  struct conn *c = p->data;

  c->message_done = 1;
  /* One request at a time: stop here, pipelined bytes stay in <in>. */
  http_parser_pause(p, 1);
  return 0;
}

static const http_parser_settings parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9')
    return ch - '0';
  if (ch >= 'a' && ch <= 'f')
    return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F')
    return ch - 'A' + 10;
  return -1;
}

/* Percent-decodes <s>[0..len) into <out>; '+' is literal. Rejects bad
 * escapes and NUL bytes. */
static int pct_decode(const char *s, size_t len, struct fr_buf *out) {
  size_t i;

  fr_buf_reset(out);
  for (i = 0; i < len; i++) {
    int ch = (unsigned char)s[i];
    if (ch == '%') {
      int hi, lo;
      if (i + 2 >= len)
        return -EINVAL;
      hi = hexval((unsigned char)s[i + 1]);
      lo = hexval((unsigned char)s[i + 2]);
      if (hi < 0 || lo < 0)
        return -EINVAL;
      ch = hi * 16 + lo;
      i += 2;
    }
    if (ch == 0)
      return -EINVAL;
    if (fr_buf_putc(out, (char)ch) != 0)
      return -ENOMEM;
  }
  if (out->data == NULL && fr_buf_reserve(out, 0) != 0)
    return -ENOMEM;
  return 0;
}

static int is_websocket_upgrade(struct conn *c) {
  const char *up = find_header(c, "Upgrade");
  const char *conn_h = find_header(c, "Connection");
  const char *ver = find_header(c, "Sec-WebSocket-Version");
  const char *key = find_header(c, "Sec-WebSocket-Key");
  unsigned char raw[32];

  if (c->parser.method != HTTP_GET || up == NULL || !header_has_token(up, "websocket"))
    return 0;
  if (conn_h == NULL || !header_has_token(conn_h, "upgrade"))
    return 0;
  if (ver == NULL || strcmp(ver, "13") != 0 || key == NULL)
    return 0;
  /* The key must be base64 of 16 bytes (RFC 6455 section 4.2.1). */
  if (strlen(key) != 24 || fr_base64_decode(key, 24, raw) != 16)
    return 0;
  return 1;
}

/* An answer of the server's own, before or instead of a handler's, then
 * the close: {"error":{"code","message"}} with <extra> headers ("" or
 * lines ending in CRLF). */
static void send_error_and_close(struct conn *c, int status, const char *code, const char *message,
                                 const char *extra) {
  char body[160];
  char head[256];
  int blen, hlen;

  blen = snprintf(body, sizeof(body), "{\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}\n", code, message);
  hlen = snprintf(head, sizeof(head),
                  "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                  "Content-Length: %d\r\n%sConnection: close\r\n\r\n",
                  status, fr_http_status_text(status), blen, extra);
  c->keep_alive = 0;
  if (c->state != CS_HANDLING) {
    /* refused before any handler saw it */
    c->done_reported = 0;
    c->resp_bytes = (size_t)blen;
  }
  c->resp_status = status;
  if (conn_write(c, head, (size_t)hlen) != 0 || conn_write(c, body, (size_t)blen) != 0) {
    conn_close(c, 1);
    return;
  }
  c->close_after_flush = 1;
  conn_set_state(c, CS_HANDLING);
  conn_finish_request(c);
}

/* The status's own code and text: the parser's refusals and out of memory. */
static void send_simple_and_close(struct conn *c, int status) {
  send_error_and_close(c, status,
                       status == 431   ? "headers_too_large"
                       : status == 413 ? "body_too_large"
                       : status == 408 ? "request_timeout"
                       : status == 417 ? "expectation_failed"
                       : status == 503 ? "out_of_memory"
                                       : "bad_request",
                       fr_http_status_text(status), "");
}

/* Fills what a request head tells (method, url, path, query, headers, peer)
 * into c->req; 0, or -EINVAL for a path that does not decode. */
static int req_fill_head(struct conn *c) {
  struct fr_http_req *r = &c->req;
  const char *u = c->url.data;
  const char *q = strchr(u, '?');
  size_t plen = q ? (size_t)(q - u) : strlen(u);

  if (pct_decode(u, plen, &c->path) != 0 || c->path.data[0] != '/')
    return -EINVAL;
  r->method = http_method_str((enum http_method)c->parser.method);
  r->url = u;
  r->path = c->path.data;
  r->query = q ? q + 1 : "";
  r->headers = c->headers;
  r->nheaders = c->nheaders;
  r->peer_ip = c->peer_ip;
  r->peer_port = c->peer_port;
  r->loop = c->srv->loop;
  return 0;
}

static void conn_dispatch(struct conn *c) {
  struct fr_http_req *r = &c->req;

  if (c->body.data == NULL) {
    /* No body: fr/http.h promises req->body is "" then, a terminated
     * string handlers may read with strlen. */
    if (fr_buf_reserve(&c->body, 0) != 0) {
      send_simple_and_close(c, 503);
      return;
    }
    c->body.data[0] = '\0';
  }
  if (req_fill_head(c) != 0) {
    send_error_and_close(c, 400, "invalid_path", "the request path does not decode (a bad escape or a NUL byte)",
                         "");
    return;
  }
  r->body = c->body_stream ? "" : c->body.data;
  r->body_len = c->body_stream ? 0 : c->body.len;
  r->body_streaming = c->body_stream;
  r->websocket = c->parser.upgrade ? is_websocket_upgrade(c) : 0;
  r->start_ms = uv_now(c->srv->loop);
  c->keep_alive = http_should_keep_alive(&c->parser) && !c->parser.upgrade;
  c->done_reported = 0;
  c->resp_status = 0;
  c->resp_bytes = 0;
  conn_set_state(c, CS_HANDLING);
  conn_timer(c, TK_NONE, 0);
  c->abort_notify = 1;
  c->srv->handler(r, c->srv->arg);
}

/* ---------------------------------------------------------------------- */
/* input                                                                   */

static int ws_on_frame(void *arg, int opcode, const uint8_t *data, size_t len) {
  struct conn *c = arg;
  uint8_t hdr[FR_WS_MAX_HEADER];
  size_t hl;
  uv_buf_t bufs[2];
  int code;
  const char *reason;
  size_t rlen;

  switch (opcode) {
  case FR_WS_OP_PING:
    hl = fr_ws_write_header(hdr, 1, FR_WS_OP_PONG, len, NULL);
    bufs[0] = uv_buf_init((char *)hdr, (unsigned int)hl);
    bufs[1] = uv_buf_init((char *)data, (unsigned int)len);
    if (!c->ws_close_sent)
      conn_writev(c, bufs, 2);
    return 0;
  case FR_WS_OP_PONG:
    return 0;
  case FR_WS_OP_CLOSE:
    if (fr_ws_parse_close(data, len, &code, &reason, &rlen) != 0)
      code = FR_WS_CLOSE_PROTOCOL;
    if (!c->ws_close_sent) {
      /* Echo the close (RFC 6455 section 5.5.1), then end the connection. */
      uint8_t payload[2] = {(uint8_t)((code == 1005 ? 1000 : code) >> 8),
                            (uint8_t)((code == 1005 ? 1000 : code) & 0xff)};
      hl = fr_ws_write_header(hdr, 1, FR_WS_OP_CLOSE, 2, NULL);
      bufs[0] = uv_buf_init((char *)hdr, (unsigned int)hl);
      bufs[1] = uv_buf_init((char *)payload, 2);
      conn_writev(c, bufs, 2);
      c->ws_close_sent = 1;
      c->ws_close_code = code;
    }
    /* Else this answers our close: on_close keeps the code we sent. */
    c->close_after_flush = 1;
    if (c->pending_bytes == 0)
      conn_close(c, 1);
    return 1;
  default:
    if (c->ws_message != NULL)
      c->ws_message(&c->req, opcode, data, len);
    /* The callback may have closed the connection. */
    return c->state == CS_CLOSING ? 1 : 0;
  }
}

static void conn_feed_ws(struct conn *c) {
  int rc;
  size_t n = c->in.len;

  if (n == 0)
    return;
  /* The reader copies what it needs, so <in> can be emptied up front; the
   * callbacks may close the connection, which is checked after. */
  {
    struct fr_buf tmp = c->in;
    fr_buf_init(&c->in);
    rc = fr_ws_reader_feed(&c->ws, (const uint8_t *)tmp.data, tmp.len, ws_on_frame, c);
    fr_buf_free(&tmp);
  }
  if (rc < 0 && c->state != CS_CLOSING) {
    fr_http_ws_close(&c->req, c->ws.close_code, "protocol error");
  }
}

/* Parses a streamed body as far as the handler takes it and hands the
 * pieces (then the end) to req.body_cb, outside the parser. */
static void conn_stream_body(struct conn *c) {
  size_t n;
  enum http_errno err;

  while (c->body_stream && !c->body_done && !c->body_paused &&
         (c->state == CS_HANDLING || c->state == CS_STREAMING)) {
    if (c->in.len > 0 && !c->message_done) {
      n = http_parser_execute(&c->parser, &parser_settings, c->in.data, c->in.len);
      fr_buf_consume(&c->in, n);
      err = HTTP_PARSER_ERRNO(&c->parser);
      if (err == HPE_PAUSED) {
        http_parser_pause(&c->parser, 0);
      } else if (err != HPE_OK || c->reject_status != 0) {
        /* A broken body in the middle of a response: nothing sane can be
         * said any more; the handler hears it through abort_cb. */
        conn_close(c, 1);
        return;
      }
    }
    if (c->body.len > 0) {
      struct fr_buf piece = c->body;
      fr_buf_init(&c->body);
      if (c->req.body_cb != NULL)
        c->req.body_cb(&c->req, piece.data, piece.len);
      fr_buf_free(&piece);
      continue; /* the callback may have paused, answered or closed */
    }
    if (c->message_done) {
      c->body_done = 1;
      if (c->req.body_cb != NULL)
        c->req.body_cb(&c->req, NULL, 0);
      return;
    }
    if (c->in.len == 0)
      return;
  }
}

/* Hands a tunnel's buffered input to the handler while it is not paused,
 * then the peer's end of stream once, and closes the connection when both
 * directions are done. Runs from the read path or the resume timer only,
 * never from inside a call of the handler. */
static void conn_feed_tunnel(struct conn *c) {
  while (c->state == CS_TUNNEL && !c->tun_paused && c->in.len > 0) {
    struct fr_buf piece = c->in;
    fr_buf_init(&c->in);
    c->tun_data(&c->req, piece.data, piece.len);
    fr_buf_free(&piece);
  }
  if (c->state != CS_TUNNEL || c->tun_paused || c->in.len > 0 || !c->tun_peer_eof)
    return;
  if (!c->tun_eof_delivered) {
    c->tun_eof_delivered = 1;
    c->tun_data(&c->req, NULL, 0);
  }
  if (c->state == CS_TUNNEL && c->tun_shut_done) {
    c->tun_err = 0;
    conn_close(c, 1);
  }
}

static void conn_process_input(struct conn *c) {
  size_t n;

  for (;;) {
    if (c->state == CS_WS) {
      conn_feed_ws(c);
      return;
    }
    if (c->state == CS_TUNNEL) {
      conn_feed_tunnel(c);
      return;
    }
    if (c->state == CS_LINGER) {
      fr_buf_reset(&c->in);
      return;
    }
    if (c->body_stream && (c->state == CS_HANDLING || c->state == CS_STREAMING)) {
      conn_stream_body(c);
      /* Pipelined requests wait until the response is finished. */
      return;
    }
    if (c->state != CS_IDLE && c->state != CS_HEAD && c->state != CS_BODY)
      return;
    if (c->in.len == 0)
      return;
    if (c->state == CS_IDLE) {
      conn_set_state(c, CS_HEAD);
      conn_timer(c, TK_HEAD, c->srv->opts.header_timeout_ms);
    }
    n = http_parser_execute(&c->parser, &parser_settings, c->in.data, c->in.len);
    fr_buf_consume(&c->in, n);
    if (c->reject_status != 0) {
      send_simple_and_close(c, c->reject_status);
      return;
    }
    if (HTTP_PARSER_ERRNO(&c->parser) == HPE_PAUSED) {
      http_parser_pause(&c->parser, 0);
    } else if (HTTP_PARSER_ERRNO(&c->parser) != HPE_OK) {
      send_simple_and_close(c, HTTP_PARSER_ERRNO(&c->parser) == HPE_HEADER_OVERFLOW ? 431 : 400);
      return;
    }
    if (c->body_head_done) {
      /* Streamed body: the handler gets the request now, the body after. */
      c->body_head_done = 0;
      conn_dispatch(c);
      continue;
    }
    if (!c->message_done) {
      /* Need more bytes; bound what a slow request may buffer. */
      return;
    }
    c->message_done = 0;
    conn_dispatch(c);
  }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  buf->base = malloc(65536);
  buf->len = buf->base ? 65536 : 0;
}

static int tls_read(struct conn *c, const char *data, size_t len) {
  char tmp[16384];
  int n, err;

  if (BIO_write(c->rbio, data, (int)len) != (int)len)
    return -ENOMEM;
  if (!SSL_is_init_finished(c->ssl)) {
    n = SSL_do_handshake(c->ssl);
    if (n <= 0) {
      err = SSL_get_error(c->ssl, n);
      if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) {
        FR_DEBUG(c->srv->opts.name, "TLS handshake with %s failed", c->peer_ip);
        ERR_clear_error();
        tls_flush(c);
        return -EPROTO;
      }
    }
    if (tls_flush(c) != 0)
      return -EPIPE;
    if (!SSL_is_init_finished(c->ssl))
      return 0;
  }
  for (;;) {
    n = SSL_read(c->ssl, tmp, sizeof(tmp));
    if (n > 0) {
      if (fr_buf_append(&c->in, tmp, (size_t)n) != 0)
        return -ENOMEM;
      continue;
    }
    err = SSL_get_error(c->ssl, n);
    if (err == SSL_ERROR_WANT_READ)
      break;
    if (err == SSL_ERROR_ZERO_RETURN) {
      /* close_notify: the end of a tunnel's direction, else of the
       * connection. */
      if (c->state == CS_TUNNEL) {
        c->tun_peer_eof = 1;
        break;
      }
      return -ECONNRESET;
    }
    ERR_clear_error();
    return -EPROTO;
  }
  return tls_flush(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  struct conn *c = fr_container_of((uv_tcp_t *)s, struct conn, tcp);
  int rc = 0;

  if (nread == UV_EOF && c->state == CS_HANDLING && !c->keep_alive && !(c->body_stream && !c->body_done)) {
    /* The client asked to close after this request (Connection: close,
     * or HTTP/1.0) and half-closed once it was sent (shutdown(SHUT_WR),
     * nc -N): it still waits for the answer, so the request goes on and
     * the connection ends after it. On a keep-alive connection, or once a
     * streamed answer is under way (CS_STREAMING), the end of input is the
     * client leaving: abort_cb stops the work (a command is killed). */
    free(buf->base);
    if (c->reading) {
      uv_read_stop(s);
      c->reading = 0;
    }
    return;
  }
  if (nread < 0) {
    free(buf->base);
    if (nread == UV_EOF && c->state == CS_TUNNEL) {
      /* A half-close: the other direction lives on. */
      c->tun_peer_eof = 1;
      uv_read_stop(s);
      c->reading = 0;
      conn_process_input(c);
      return;
    }
    c->tun_err = (int)nread;
    conn_close(c, 1);
    return;
  }
  if (nread == 0 || c->state == CS_CLOSING) {
    free(buf->base);
    return;
  }
  if (c->state == CS_LINGER) {
    free(buf->base); /* discard until the peer closes or the timer fires */
    return;
  }
  if (c->ssl != NULL)
    rc = tls_read(c, buf->base, (size_t)nread);
  else if (fr_buf_append(&c->in, buf->base, (size_t)nread) != 0)
    rc = -ENOMEM;
  free(buf->base);
  if (rc < 0) {
    conn_close(c, 1);
    return;
  }
  if (((c->in.len > MAX_BUFFERED_INPUT + c->srv->opts.max_body_bytes &&
        c->state != CS_WS && c->state != CS_IDLE && c->state != CS_HEAD &&
        c->state != CS_BODY && c->state != CS_TUNNEL) ||
       (c->body_stream && c->body_paused && c->in.len > BODY_PIECE) ||
       (c->state == CS_TUNNEL && (c->tun_paused || c->tun_peer_eof) && c->in.len > 0)) &&
      c->reading) {
    uv_read_stop(s);
    c->reading = 0;
  }
  conn_process_input(c);
}

/* ---------------------------------------------------------------------- */
/* lifecycle                                                               */

static void conn_free(struct conn *c) {
  req_reset(c);
  fr_buf_free(&c->in);
  fr_buf_free(&c->url);
  fr_buf_free(&c->hname);
  fr_buf_free(&c->hvalue);
  fr_buf_free(&c->path);
  fr_buf_free(&c->body);
  fr_ws_reader_free(&c->ws);
  if (c->ssl != NULL)
    SSL_free(c->ssl); /* frees both BIOs */
  free(c);
}

static void on_conn_handle_closed(uv_handle_t *h) {
  struct conn *c = h->data;
  struct fr_http_server *srv = c->srv;

  if (--c->open_handles > 0)
    return;
  conn_free(c);
  srv->nclosing--;
  server_maybe_finish_free(srv);
}

static void conn_close(struct conn *c, int notify) {
  struct fr_http_server *srv = c->srv;
  enum conn_state was = c->state;

  if (c->state == CS_CLOSING)
    return;
  conn_set_state(c, CS_CLOSING);
  uv_timer_stop(&c->timer);
  if (c->prev)
    c->prev->next = c->next;
  else
    srv->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  srv->nconns--;
  if (c->ip_counted) {
    c->ip_counted = 0;
    ip_dec(srv, c->peer_ip);
  }
  srv->nclosing++;
  /* A request being answered when the connection goes: the client left
   * (0), or a stream ended by closing. */
  if ((was == CS_HANDLING || was == CS_STREAMING) && c->req.method != NULL)
    report_done(c, was == CS_STREAMING ? c->resp_status : 0);
  /* Tell the owner of an unfinished request that it is gone. The request
   * memory stays valid until the handles have closed. */
  if (notify && c->abort_notify) {
    c->abort_notify = 0;
    if (was == CS_WS) {
      if (c->ws_close != NULL)
        c->ws_close(&c->req, c->ws_close_code ? c->ws_close_code : FR_WS_CLOSE_ABNORMAL);
    } else if (was == CS_TUNNEL) {
      c->tun_end(&c->req, c->tun_err);
    } else if ((was == CS_HANDLING || was == CS_STREAMING) && c->req.abort_cb != NULL) {
      c->req.abort_cb(&c->req);
    }
  }
  uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
  uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  struct conn *c = req->data;

  if (c->state == CS_CLOSING)
    return;
  if (status < 0) {
    conn_close(c, 0);
    return;
  }
  conn_timer(c, TK_LINGER, LINGER_MS);
}

/* Closing right after the last write can make the kernel send RST if the
 * client is still sending (for example the rest of a rejected body), and the
 * client may then never see our response. Half-close and drain instead
 * (lingering close, as nginx and HAProxy do). */
static void conn_linger(struct conn *c) {
  conn_set_state(c, CS_LINGER);
  c->abort_notify = 0;
  /* Replaces a head/body deadline that would otherwise answer 408 after
   * the response, and bounds a peer that never reads our last bytes. */
  conn_timer(c, TK_LINGER, LINGER_MS);
  fr_buf_reset(&c->in);
  if (!c->reading) {
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    c->reading = 1;
  }
  c->shutdown_req.data = c;
  if (c->ssl != NULL) {
    SSL_shutdown(c->ssl);
    tls_flush(c);
  }
  if (uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_shutdown) != 0)
    conn_close(c, 0);
}

static void on_timer(uv_timer_t *t) {
  struct conn *c = fr_container_of(t, struct conn, timer);
  enum timer_kind k = c->timer_kind;

  c->timer_kind = TK_NONE;
  switch (k) {
  case TK_IDLE:
    /* A client still downloading a large response is not idle as long as
     * the queue keeps shrinking; one that stopped reading is. */
    if (c->pending_bytes > 0 && c->pending_bytes != c->idle_pending_mark) {
      c->idle_pending_mark = c->pending_bytes;
      conn_timer(c, TK_IDLE, c->srv->opts.idle_timeout_ms);
      break;
    }
    conn_close(c, 1);
    break;
  case TK_LINGER:
    conn_close(c, 1);
    break;
  case TK_HEAD:
  case TK_BODY:
    FR_DEBUG(c->srv->opts.name, "%s:%d too slow (%s)", c->peer_ip, c->peer_port,
             state_names[c->state]);
    send_simple_and_close(c, 408);
    break;
  case TK_RESUME:
    if (!c->reading && c->state != CS_CLOSING && !(c->state == CS_TUNNEL && (c->tun_peer_eof || c->tun_paused))) {
      uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
      c->reading = 1;
    }
    if (c->state == CS_IDLE)
      conn_timer(c, TK_IDLE, c->srv->opts.idle_timeout_ms);
    conn_process_input(c);
    break;
  case TK_NONE:
    break;
  }
}

/* The current request is complete on our side. */
/* done_cb, once per request. */
static void report_done(struct conn *c, int status) {
  struct fr_http_server *srv = c->srv;

  if (c->done_reported || srv->opts.done_cb == NULL)
    return;
  c->done_reported = 1;
  srv->opts.done_cb(&c->req, status, c->resp_bytes,
                    c->req.start_ms ? uv_now(srv->loop) - c->req.start_ms : 0, srv->opts.done_arg);
}

static void conn_finish_request(struct conn *c) {
  report_done(c, c->resp_status);
  c->abort_notify = 0;
  c->drain_cb = NULL;
  if (c->state == CS_CLOSING)
    return;
  if (c->body_stream && !c->body_done) {
    /* Answered before its body ended: the rest is not parsed, so this
     * connection cannot carry another request. */
    c->body_stream = 0;
    c->keep_alive = 0;
  }
  if (!c->keep_alive || c->close_after_flush) {
    c->close_after_flush = 1;
    if (c->pending_bytes == 0)
      conn_linger(c);
    else /* flushing: the idle bound a keep-alive response gets, not a stale 408 */
      conn_timer(c, TK_IDLE, c->srv->opts.idle_timeout_ms);
    return;
  }
  req_reset(c);
  conn_set_state(c, CS_IDLE);
  /* Parse pipelined input a loop turn later, never from inside respond(). */
  conn_timer(c, TK_RESUME, 0);
}

/* The longest-idle connection with nothing left to send, other than
 * <except>, from <ip> (NULL: any address). */
static struct conn *oldest_idle(struct fr_http_server *srv, const char *ip, const struct conn *except) {
  struct conn *c;

  for (c = srv->idle_head; c != NULL; c = c->idle_next)
    if (c != except && c->pending_bytes == 0 && (ip == NULL || strcmp(c->peer_ip, ip) == 0))
      return c;
  return NULL;
}

/* Keeps the connection limits after <c> was accepted: evicts an idle
 * connection to make room, or refuses <c> (503 on plain HTTP; a TLS client
 * gets the close, as nothing can be said before the handshake). */
static void conn_admit(struct conn *c) {
  struct fr_http_server *srv = c->srv;
  int over_ip = srv->opts.max_conns_per_ip > 0 && ip_count(srv, c->peer_ip) > srv->opts.max_conns_per_ip;
  int over_all = srv->opts.max_conns > 0 && srv->nconns > srv->opts.max_conns;
  struct conn *victim;

  if (!over_ip && !over_all)
    return;
  victim = oldest_idle(srv, over_ip ? c->peer_ip : NULL, c);
  if (victim != NULL) {
    srv->evicted++;
    FR_DEBUG(srv->opts.name, "connection limit: closing idle %s:%d for %s:%d", victim->peer_ip,
             victim->peer_port, c->peer_ip, c->peer_port);
    conn_close(victim, 1);
    return;
  }
  srv->refused++;
  FR_DEBUG(srv->opts.name, "connection limit: refusing %s:%d (%zu open)", c->peer_ip, c->peer_port, srv->nconns);
  if (c->ssl != NULL)
    conn_close(c, 0);
  else
    send_error_and_close(c, 503, "too_many_connections", "Too many connections", "Retry-After: 1\r\n");
}

/* libuv accepts every pending connection in one go: a flood of thousands
 * would hold the loop for seconds (measured: 2.3 s for 18,000), and every
 * request with it. Past ACCEPTS_PER_TURN in one loop turn the next one is
 * left pending (libuv stops polling the listener meanwhile) and taken from
 * the next turn on. */
#define ACCEPTS_PER_TURN 64
/* The kernel's queue of connections not yet accepted: what absorbs a burst
 * while the loop takes ACCEPTS_PER_TURN a turn. When it is full the kernel
 * drops the handshake and the client retries a second later (seen as 1 s
 * /healthz answers under an 18,000-connection flood with 1024); Linux caps
 * it at net.core.somaxconn (4096 by default since 5.4). */
#define LISTEN_BACKLOG 4096

static void on_connection(uv_stream_t *ls, int status);

static void on_accept_resume(uv_idle_t *h) {
  struct fr_http_server *srv = fr_container_of(h, struct fr_http_server, defer);

  uv_idle_stop(h);
  srv->accepts = 0;
  if (srv->listener != NULL)
    on_connection((uv_stream_t *)srv->listener, 0);
}

static void on_connection(uv_stream_t *ls, int status) {
  struct fr_http_server *srv = ls->data;
  struct sockaddr_storage ss;
  int sslen = sizeof(ss);
  struct conn *c;

  if (status < 0)
    return;
  if (uv_now(srv->loop) != srv->accept_ms) {
    srv->accept_ms = uv_now(srv->loop);
    srv->accepts = 0;
  }
  if (++srv->accepts > ACCEPTS_PER_TURN) {
    if (!srv->freeing)
      uv_idle_start(&srv->defer, on_accept_resume);
    return;
  }
  c = calloc(1, sizeof(*c));
  if (c == NULL)
    return;
  c->srv = srv;
  uv_tcp_init(srv->loop, &c->tcp);
  uv_timer_init(srv->loop, &c->timer);
  c->tcp.data = c;
  c->timer.data = c;
  c->open_handles = 2;
  c->next = srv->conns;
  if (srv->conns)
    srv->conns->prev = c;
  srv->conns = c;
  srv->nconns++;
  c->state = CS_HEAD; /* becomes idle below, once accepted */
  fr_buf_init(&c->in);
  http_parser_init(&c->parser, HTTP_REQUEST);
  c->parser.data = c;
  if (uv_accept(ls, (uv_stream_t *)&c->tcp) != 0) {
    conn_close(c, 0);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sslen) == 0) {
    if (ss.ss_family == AF_INET6) {
      struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
      uv_ip6_name(a6, c->peer_ip, sizeof(c->peer_ip));
      c->peer_port = ntohs(a6->sin6_port);
    } else {
      struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
      uv_ip4_name(a4, c->peer_ip, sizeof(c->peer_ip));
      c->peer_port = ntohs(a4->sin_port);
    }
  }
  if (srv->opts.ssl_ctx != NULL) {
    c->ssl = SSL_new(srv->opts.ssl_ctx);
    c->rbio = BIO_new(BIO_s_mem());
    c->wbio = BIO_new(BIO_s_mem());
    if (c->ssl == NULL || c->rbio == NULL || c->wbio == NULL) {
      BIO_free(c->rbio);
      BIO_free(c->wbio);
      conn_close(c, 0);
      return;
    }
    SSL_set_bio(c->ssl, c->rbio, c->wbio);
    SSL_set_accept_state(c->ssl);
  }
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
    conn_close(c, 0);
    return;
  }
  c->reading = 1;
  conn_set_state(c, CS_IDLE);
  conn_timer(c, TK_IDLE, srv->opts.idle_timeout_ms);
  c->ip_counted = ip_inc(srv, c->peer_ip) > 0;
  conn_admit(c);
}

/* ---------------------------------------------------------------------- */
/* public: server                                                          */

int fr_http_server_new(uv_loop_t *loop, const struct fr_http_server_opts *opts,
                       fr_http_handler_cb handler, void *arg,
                       struct fr_http_server **out) {
  struct fr_http_server *srv = calloc(1, sizeof(*srv));

  if (srv == NULL)
    return -ENOMEM;
  srv->loop = loop;
  if (opts != NULL)
    srv->opts = *opts;
  if (srv->opts.max_header_bytes == 0)
    srv->opts.max_header_bytes = 16 * 1024;
  if (srv->opts.max_body_bytes == 0)
    srv->opts.max_body_bytes = 1024 * 1024;
  if (srv->opts.header_timeout_ms == 0)
    srv->opts.header_timeout_ms = 10000;
  if (srv->opts.body_timeout_ms == 0)
    srv->opts.body_timeout_ms = 30000;
  if (srv->opts.idle_timeout_ms == 0)
    srv->opts.idle_timeout_ms = 60000;
  if (srv->opts.max_ws_message == 0)
    srv->opts.max_ws_message = 16 * 1024 * 1024;
  if (srv->opts.name == NULL)
    srv->opts.name = "http";
  srv->handler = handler;
  srv->arg = arg;
  uv_idle_init(loop, &srv->defer);
  *out = srv;
  return 0;
}

static void on_listener_closed(uv_handle_t *h) {
  struct fr_http_server *srv = h->data;

  free(h);
  srv->listeners_closing--;
  server_maybe_finish_free(srv);
}

static void listener_close(struct fr_http_server *srv, uv_tcp_t *l) {
  srv->listeners_closing++;
  uv_close((uv_handle_t *)l, on_listener_closed);
}

static int do_listen(struct fr_http_server *srv) {
  struct sockaddr_storage ss;
  int sslen = sizeof(ss);
  uv_tcp_t *l;
  int rc;

  if (strchr(srv->host, ':') != NULL)
    rc = uv_ip6_addr(srv->host, srv->port, (struct sockaddr_in6 *)&ss);
  else
    rc = uv_ip4_addr(srv->host, srv->port, (struct sockaddr_in *)&ss);
  if (rc != 0)
    return rc;
  l = malloc(sizeof(*l));
  if (l == NULL)
    return -ENOMEM;
  uv_tcp_init(srv->loop, l);
  l->data = srv;
  rc = uv_tcp_bind(l, (struct sockaddr *)&ss, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)l, LISTEN_BACKLOG, on_connection);
  if (rc != 0) {
    listener_close(srv, l);
    return rc;
  }
  srv->listener = l;
  if (uv_tcp_getsockname(l, (struct sockaddr *)&ss, &sslen) == 0)
    srv->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                              : ((struct sockaddr_in *)&ss)->sin_port);
  return 0;
}

int fr_http_server_listen(struct fr_http_server *srv, const char *host, int port) {
  if (srv->freeing)
    return -EINVAL;
  if (srv->listener != NULL)
    return -EALREADY;
  if (host != NULL) {
    if (strlen(host) >= sizeof(srv->host))
      return -EINVAL;
    memcpy(srv->host, host, strlen(host) + 1);
    srv->port = port;
  }
  return do_listen(srv);
}

int fr_http_server_set_ssl_ctx(struct fr_http_server *srv, SSL_CTX *ctx) {
  if (srv->opts.ssl_ctx == NULL || ctx == NULL)
    return -EINVAL;
  srv->opts.ssl_ctx = ctx;
  return 0;
}

int fr_http_server_port(const struct fr_http_server *srv) {
  return srv->port;
}

size_t fr_http_server_nconns(const struct fr_http_server *srv) {
  return srv->nconns;
}

void fr_http_server_stats(const struct fr_http_server *srv, struct fr_http_server_stats *out) {
  out->evicted = srv->evicted;
  out->refused = srv->refused;
  out->idle = srv->nidle;
}

void fr_http_server_unlisten(struct fr_http_server *srv, int drop_conns) {
  if (srv->listener != NULL) {
    listener_close(srv, srv->listener);
    srv->listener = NULL;
  }
  if (drop_conns) {
    while (srv->conns != NULL)
      conn_close(srv->conns, 1);
  }
}

size_t fr_http_server_nbusy(const struct fr_http_server *srv) {
  const struct conn *c;
  size_t n = 0;

  for (c = srv->conns; c != NULL; c = c->next)
    n += c->pending_bytes > 0 || (c->state == CS_IDLE ? c->in.len > 0 : c->state != CS_LINGER);
  return n;
}

void fr_http_server_drain(struct fr_http_server *srv) {
  struct conn *c, *next;

  fr_http_server_unlisten(srv, 0);
  srv->draining = 1;
  /* Idle connections with nothing received go now, with the lingering
   * close; one holding the start of its next request is left to answer it
   * (with Connection: close, like every response from now on). */
  for (c = srv->idle_head; c != NULL; c = next) {
    next = c->idle_next;
    if (c->pending_bytes == 0 && c->in.len == 0)
      conn_linger(c);
  }
}

static void server_maybe_finish_free(struct fr_http_server *srv) {
  fr_http_server_close_cb cb;
  void *arg;

  /* Connections unlinked but whose handles are still closing keep a
   * pointer to us; wait for them too. */
  if (!srv->freeing || srv->listener != NULL || srv->listeners_closing != 0 ||
      srv->conns != NULL || srv->nclosing != 0 ||
      !srv->defer_closed)
    return;
  cb = srv->close_cb;
  arg = srv->close_arg;
  free(srv->ips);
  free(srv);
  if (cb != NULL)
    cb(NULL, arg);
}

static void on_defer_closed(uv_handle_t *h) {
  struct fr_http_server *srv = fr_container_of((uv_idle_t *)h, struct fr_http_server, defer);

  srv->defer_closed = 1;
  server_maybe_finish_free(srv);
}

void fr_http_server_free(struct fr_http_server *srv, fr_http_server_close_cb cb, void *arg) {
  if (srv == NULL)
    return;
  srv->freeing = 1;
  srv->close_cb = cb;
  srv->close_arg = arg;
  fr_http_server_unlisten(srv, 1);
  /* Handles close asynchronously and the last one frees us, so <cb> never
   * runs from inside this call even when nothing else was open. */
  uv_close((uv_handle_t *)&srv->defer, on_defer_closed);
}

/* ---------------------------------------------------------------------- */
/* public: requests                                                        */

const char *fr_http_req_header(const struct fr_http_req *req, const char *name) {
  size_t i;

  for (i = 0; i < req->nheaders; i++)
    if (strcasecmp(req->headers[i].name, name) == 0)
      return req->headers[i].value;
  return NULL;
}

struct query_get_ctx {
  const char *key;
  char *out;
  size_t outlen;
  long result;
};

static int query_decode(const char *s, size_t len, char *out, size_t outlen) {
  size_t i, o = 0;

  for (i = 0; i < len; i++) {
    int ch = (unsigned char)s[i];
    if (ch == '+') {
      ch = ' ';
    } else if (ch == '%' && i + 2 < len) {
      int hi = hexval((unsigned char)s[i + 1]), lo = hexval((unsigned char)s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        ch = hi * 16 + lo;
        i += 2;
      }
    }
    /* A NUL would cut the value short unseen ("/etc/passwd%00.txt"). */
    if (ch == 0)
      return -EINVAL;
    if (o + 1 >= outlen)
      return -ENOSPC;
    out[o++] = (char)ch;
  }
  out[o] = '\0';
  return (int)o;
}

int fr_http_query_each(const char *query,
                       int (*cb)(const char *key, const char *value, void *arg),
                       void *arg) {
  const char *p = query;
  char *key, *value;
  size_t vcap;
  int rc = 0;

  if (query == NULL)
    return 0;
  /* Decoding never lengthens, so buffers the size of the query always fit
   * (fixed ones made every later key unreachable after one long pair). */
  vcap = strlen(query) + 1;
  key = malloc(2 * vcap);
  if (key == NULL)
    return -ENOMEM;
  value = key + vcap;
  while (*p != '\0') {
    const char *amp = strchr(p, '&');
    size_t len = amp ? (size_t)(amp - p) : strlen(p);
    const char *eq = memchr(p, '=', len);
    size_t klen = eq ? (size_t)(eq - p) : len;

    if (len > 0) {
      int rk = query_decode(p, klen, key, vcap);
      int rv = rk < 0 ? 0 : query_decode(eq ? eq + 1 : p + len, eq ? len - klen - 1 : 0, value, vcap);
      if (rk < 0 || rv < 0) {
        rc = rk < 0 ? rk : rv;
        break;
      }
      rc = cb(key, value, arg);
      if (rc != 0)
        break;
    }
    if (amp == NULL)
      break;
    p = amp + 1;
  }
  free(key);
  return rc;
}

static int query_get_cb(const char *key, const char *value, void *arg) {
  struct query_get_ctx *ctx = arg;
  size_t n = strlen(value);

  if (strcmp(key, ctx->key) != 0)
    return 0;
  if (n + 1 > ctx->outlen) {
    ctx->result = -ENOSPC;
    return 1;
  }
  memcpy(ctx->out, value, n + 1);
  ctx->result = (long)n;
  return 1;
}

long fr_http_query_get(const char *query, const char *key, char *out, size_t outlen) {
  struct query_get_ctx ctx = {key, out, outlen, -ENOENT};
  int rc = fr_http_query_each(query, query_get_cb, &ctx);

  if (rc < 0)
    return rc;
  return ctx.result;
}

const char *fr_http_status_text(int status) {
  switch (status) {
  case 100: return "Continue";
  case 101: return "Switching Protocols";
  case 200: return "OK";
  case 201: return "Created";
  case 202: return "Accepted";
  case 204: return "No Content";
  case 206: return "Partial Content";
  case 207: return "Multi-Status";
  case 301: return "Moved Permanently";
  case 302: return "Found";
  case 303: return "See Other";
  case 304: return "Not Modified";
  case 307: return "Temporary Redirect";
  case 308: return "Permanent Redirect";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 406: return "Not Acceptable";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 410: return "Gone";
  case 411: return "Length Required";
  case 412: return "Precondition Failed";
  case 413: return "Payload Too Large";
  case 415: return "Unsupported Media Type";
  case 416: return "Range Not Satisfiable";
  case 417: return "Expectation Failed";
  case 422: return "Unprocessable Entity";
  case 426: return "Upgrade Required";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  case 507: return "Insufficient Storage";
  default: return "Unknown";
  }
}

static struct conn *req_conn(struct fr_http_req *req) {
  return fr_container_of(req, struct conn, req);
}

static int write_head(struct conn *c, int status, const char *content_type,
                      const char *extra, const char *framing) {
  struct fr_buf h;
  int rc;

  fr_buf_init(&h);
  if (c->srv->draining)
    c->keep_alive = 0;
  rc = fr_buf_printf(&h, "HTTP/1.1 %d %s\r\n", status, fr_http_status_text(status));
  if (rc == 0 && content_type != NULL)
    rc = fr_buf_printf(&h, "Content-Type: %s\r\n", content_type);
  if (rc == 0 && extra != NULL)
    rc = fr_buf_puts(&h, extra);
  if (rc == 0)
    rc = fr_buf_puts(&h, framing);
  if (rc == 0 && !c->keep_alive)
    rc = fr_buf_puts(&h, "Connection: close\r\n");
  if (rc == 0)
    rc = fr_buf_puts(&h, "\r\n");
  if (rc == 0)
    rc = conn_write(c, h.data, h.len);
  fr_buf_free(&h);
  return rc;
}

int fr_http_respond(struct fr_http_req *req, int status, const char *content_type,
                    const char *extra_headers, const void *body, size_t len) {
  struct conn *c = req_conn(req);
  char framing[48];
  int rc;

  if (c->state != CS_HANDLING)
    return -EINVAL;
  if (c->body_stream && !c->body_done)
    c->keep_alive = 0; /* see conn_finish_request() */
  snprintf(framing, sizeof(framing), "Content-Length: %zu\r\n", len);
  c->resp_status = status;
  c->resp_bytes = len;
  rc = write_head(c, status, content_type, extra_headers, framing);
  if (rc == 0 && len > 0 && strcmp(req->method, "HEAD") != 0)
    rc = conn_write(c, body, len);
  if (rc != 0) {
    c->abort_notify = 0;
    conn_close(c, 0);
    return rc;
  }
  conn_finish_request(c);
  return 0;
}

int fr_http_stream_begin(struct fr_http_req *req, int status, const char *content_type,
                         const char *extra_headers) {
  return fr_http_stream_begin_length(req, status, content_type, extra_headers, FR_HTTP_CHUNKED);
}

int fr_http_stream_begin_length(struct fr_http_req *req, int status, const char *content_type,
                                const char *extra_headers, int64_t length) {
  struct conn *c = req_conn(req);
  char framing[48];
  int rc;

  if (c->state != CS_HANDLING || length < FR_HTTP_NO_BODY)
    return -EINVAL;
  c->resp_status = status;
  if (length >= 0) {
    snprintf(framing, sizeof(framing), "Content-Length: %lld\r\n", (long long)length);
    c->resp_framing = 1;
    c->resp_left = (uint64_t)length;
  } else if (length == FR_HTTP_NO_BODY) {
    framing[0] = '\0';
    c->resp_framing = 2;
  } else {
    snprintf(framing, sizeof(framing), "Transfer-Encoding: chunked\r\n");
    c->resp_framing = 0;
  }
  rc = write_head(c, status, content_type, extra_headers, framing);
  if (rc != 0) {
    c->abort_notify = 0;
    conn_close(c, 0);
    return rc;
  }
  conn_set_state(c, CS_STREAMING);
  return 0;
}

int fr_http_stream_write(struct fr_http_req *req, const void *data, size_t len) {
  struct conn *c = req_conn(req);
  char size_line[24];
  uv_buf_t bufs[3];
  int n, rc;

  if (c->state != CS_STREAMING)
    return -EINVAL;
  if (len == 0)
    return 0;
  if (c->resp_framing != 0) {
    if (c->resp_framing == 2 || strcmp(req->method, "HEAD") == 0)
      return 0;
    if (len > c->resp_left) {
      c->abort_notify = 0;
      conn_close(c, 0);
      return -EMSGSIZE;
    }
    c->resp_left -= len;
    c->resp_bytes += len;
    rc = conn_write(c, data, len);
    if (rc != 0) {
      c->abort_notify = 0;
      conn_close(c, 0);
    }
    return rc;
  }
  c->resp_bytes += len;
  n = snprintf(size_line, sizeof(size_line), "%zx\r\n", len);
  bufs[0] = uv_buf_init(size_line, (unsigned int)n);
  bufs[1] = uv_buf_init((char *)data, (unsigned int)len);
  bufs[2] = uv_buf_init("\r\n", 2);
  rc = conn_writev(c, bufs, 3);
  if (rc != 0) {
    /* The owner learns through the return value; no abort_cb. */
    c->abort_notify = 0;
    conn_close(c, 0);
  }
  return rc;
}

int fr_http_stream_end(struct fr_http_req *req) {
  struct conn *c = req_conn(req);
  int rc;

  if (c->state != CS_STREAMING)
    return -EINVAL;
  if (c->resp_framing == 1 && c->resp_left > 0 && strcmp(req->method, "HEAD") != 0) {
    /* Fewer bytes than announced: the client must not take it as whole. */
    c->abort_notify = 0;
    conn_close(c, 0);
    return -EPIPE;
  }
  rc = c->resp_framing == 0 ? conn_write(c, "0\r\n\r\n", 5) : 0;
  if (rc != 0) {
    c->abort_notify = 0;
    conn_close(c, 0);
    return rc;
  }
  conn_set_state(c, CS_HANDLING);
  conn_finish_request(c);
  return 0;
}

size_t fr_http_pending_bytes(const struct fr_http_req *req) {
  const struct conn *c = fr_container_of(req, const struct conn, req);

  return c->pending_bytes;
}

int fr_http_on_drain(struct fr_http_req *req, fr_http_drain_cb cb, size_t low_water) {
  struct conn *c = req_conn(req);

  if (c->pending_bytes <= low_water) {
    c->drain_cb = NULL;
    return 1;
  }
  c->drain_cb = cb;
  c->drain_low = low_water;
  return 0;
}

void fr_http_body_pause(struct fr_http_req *req, int pause) {
  struct conn *c = req_conn(req);

  if (!c->body_stream || c->state == CS_CLOSING)
    return;
  if (pause) {
    c->body_paused = 1;
    return;
  }
  if (!c->body_paused)
    return;
  c->body_paused = 0;
  /* Never re-enter the caller: read and deliver from the next loop turn. */
  conn_timer(c, TK_RESUME, 0);
}

void fr_http_abort(struct fr_http_req *req) {
  struct conn *c = req_conn(req);

  c->abort_notify = 0;
  conn_close(c, 0);
}

int fr_http_ws_accept(struct fr_http_req *req, const char *protocol,
                      fr_http_ws_message_cb on_message, fr_http_ws_close_cb on_close) {
  struct conn *c = req_conn(req);
  const char *key = fr_http_req_header(req, "Sec-WebSocket-Key");
  char accept[29];
  struct fr_buf h;
  int rc;

  if (c->state != CS_HANDLING || !req->websocket || key == NULL)
    return -EINVAL;
  fr_ws_accept_key(key, accept);
  fr_buf_init(&h);
  rc = fr_buf_printf(&h,
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n",
                     accept);
  if (rc == 0 && protocol != NULL)
    rc = fr_buf_printf(&h, "Sec-WebSocket-Protocol: %s\r\n", protocol);
  if (rc == 0)
    rc = fr_buf_puts(&h, "\r\n");
  if (rc == 0)
    rc = conn_write(c, h.data, h.len);
  fr_buf_free(&h);
  if (rc != 0)
    return rc;
  c->resp_status = 101;
  report_done(c, 101);
  fr_ws_reader_init(&c->ws, 1, c->srv->opts.max_ws_message);
  c->ws_message = on_message;
  c->ws_close = on_close;
  c->abort_notify = 1;
  conn_set_state(c, CS_WS);
  /* Frames that arrived with the upgrade request are parsed a loop turn
   * later, after the caller has finished setting up. */
  if (c->in.len > 0)
    conn_timer(c, TK_RESUME, 0);
  return 0;
}

int fr_http_ws_send(struct fr_http_req *req, int opcode, const void *prefix,
                    size_t prefix_len, const void *data, size_t len) {
  struct conn *c = req_conn(req);
  uint8_t hdr[FR_WS_MAX_HEADER];
  uv_buf_t bufs[3];
  size_t hl;

  if (c->state != CS_WS || c->ws_close_sent)
    return -EPIPE;
  hl = fr_ws_write_header(hdr, 1, opcode, prefix_len + len, NULL);
  bufs[0] = uv_buf_init((char *)hdr, (unsigned int)hl);
  bufs[1] = uv_buf_init((char *)prefix, (unsigned int)prefix_len);
  bufs[2] = uv_buf_init((char *)data, (unsigned int)len);
  return conn_writev(c, bufs, 3);
}

int fr_http_ws_close(struct fr_http_req *req, int code, const char *reason) {
  struct conn *c = req_conn(req);
  uint8_t payload[125];
  size_t rlen = reason ? strlen(reason) : 0;
  int rc;

  if (c->state != CS_WS)
    return -EINVAL;
  if (!c->ws_close_sent) {
    if (rlen > sizeof(payload) - 2)
      rlen = sizeof(payload) - 2;
    payload[0] = (uint8_t)(code >> 8);
    payload[1] = (uint8_t)(code & 0xff);
    if (rlen)
      memcpy(payload + 2, reason, rlen);
    rc = fr_http_ws_send(req, FR_WS_OP_CLOSE, NULL, 0, payload, rlen + 2);
    c->ws_close_sent = 1;
    if (rc != 0) {
      c->ws_close_code = code;
      conn_close(c, 1);
      return rc;
    }
  }
  c->ws_close_code = code;
  c->close_after_flush = 1;
  if (c->pending_bytes == 0)
    conn_close(c, 1);
  return 0;
}

/* ---------------------------------------------------------------------- */
/* public: tunnels                                                         */

int fr_http_tunnel_begin(struct fr_http_req *req, int status, const void *head, size_t len,
                         fr_http_tunnel_data_cb on_data, fr_http_tunnel_end_cb on_end) {
  struct conn *c = req_conn(req);
  int rc;

  if (c->state != CS_HANDLING || c->body_stream || on_data == NULL || on_end == NULL)
    return -EINVAL;
  rc = conn_write(c, head, len);
  if (rc != 0) {
    c->abort_notify = 0;
    conn_close(c, 0);
    return rc;
  }
  c->keep_alive = 0;
  c->resp_status = status;
  report_done(c, status);
  c->tun_data = on_data;
  c->tun_end = on_end;
  c->tun_err = -ECONNRESET; /* until both sides have closed cleanly */
  c->abort_notify = 1;
  conn_set_state(c, CS_TUNNEL);
  conn_timer(c, TK_NONE, 0);
  /* Bytes that came with the upgrade request go to the handler from the
   * next loop turn, once it has finished setting up. */
  if (c->in.len > 0 || !c->reading)
    conn_timer(c, TK_RESUME, 0);
  return 0;
}

int fr_http_tunnel_write(struct fr_http_req *req, const void *data, size_t len) {
  struct conn *c = req_conn(req);
  int rc;

  if (c->state != CS_TUNNEL || c->tun_shut)
    return -EPIPE;
  if (len == 0)
    return 0;
  c->resp_bytes += len;
  rc = conn_write(c, data, len);
  if (rc != 0) {
    c->abort_notify = 0; /* the caller learns through the return value */
    conn_close(c, 0);
  }
  return rc;
}

static void on_tunnel_shutdown(uv_shutdown_t *sr, int status) {
  struct conn *c = sr->data;

  if (c->state != CS_TUNNEL)
    return;
  if (status < 0) {
    c->tun_err = status;
    conn_close(c, 1);
    return;
  }
  c->tun_shut_done = 1;
  if (c->tun_eof_delivered) {
    c->tun_err = 0;
    conn_close(c, 1);
  }
}

int fr_http_tunnel_shutdown(struct fr_http_req *req) {
  struct conn *c = req_conn(req);
  int rc;

  if (c->state != CS_TUNNEL)
    return -EPIPE;
  if (c->tun_shut)
    return 0;
  c->tun_shut = 1;
  if (c->ssl != NULL) {
    SSL_shutdown(c->ssl); /* close_notify: the TLS form of our FIN */
    if (tls_flush(c) != 0) {
      c->abort_notify = 0;
      conn_close(c, 0);
      return -EPIPE;
    }
  }
  /* libuv sends the FIN once every queued write is out. */
  c->shutdown_req.data = c;
  rc = uv_shutdown(&c->shutdown_req, (uv_stream_t *)&c->tcp, on_tunnel_shutdown);
  if (rc != 0) {
    c->abort_notify = 0;
    conn_close(c, 0);
  }
  return rc;
}

void fr_http_tunnel_pause(struct fr_http_req *req, int pause) {
  struct conn *c = req_conn(req);

  if (c->state != CS_TUNNEL)
    return;
  if (pause) {
    c->tun_paused = 1;
    return;
  }
  if (!c->tun_paused)
    return;
  c->tun_paused = 0;
  /* Never re-enter the caller: read and deliver from the next loop turn. */
  conn_timer(c, TK_RESUME, 0);
}
