/* proxy.c - the pods/proxy subresource, as the API server serves it:
 * /api/v1/namespaces/{ns}/pods/{name}[:{port}]/proxy/{path...} forwarded to
 * whatever listens on status.podIP:port (any process of the pod: its agent,
 * a server a sandbox started; podnet.c gives the address) or answered
 * in-process (--agent-mode=inproc, the agent's port).
 *
 * One struct proxy per request, one upstream TCP connection per request
 * (connects on this machine are cheap next to a pod proxy hop; the client's
 * own connection stays kept alive). Both directions stream with bounded memory:
 *   client body  -> upstream: fr/http.h hands the body over in pieces; above
 *                   UP_HIGH bytes queued towards the upstream the client body
 *                   is paused, below UP_LOW resumed (write callbacks);
 *   upstream body -> client: parsed with http-parser and written as it comes
 *                   (chunked when the upstream is chunked or ends by close,
 *                   Content-Length when it has one); above DOWN_HIGH bytes
 *                   queued on the client connection the upstream is no
 *                   longer read until fr_http_on_drain() says DOWN_LOW.
 *
 * States (set_state()): CONNECTING -> FORWARDING (head sent, body streaming,
 * response being read) -> DONE. The struct is freed once DONE, the upstream
 * handle is closed and we let go of the client request; every entry point
 * brackets its work with enter()/leave() and only leave() frees (exec.c does
 * the same).
 *
 * Errors before the response head went out are Status objects as the API
 * server's proxy gives them: 503 ServiceUnavailable "error trying to reach
 * service: dial tcp IP:PORT: connect: connection refused" when nothing
 * listens, 502 when the upstream answers garbage or hangs up early. After
 * the head went out the only honest signal is dropping the connection.
 *
 * Upgrades (WebSocket or any other protocol) pass through as the API
 * server's proxy passes them: the client's Upgrade and Connection go to the
 * pod; if it answers 101, the client gets that head (with its Upgrade and
 * Connection) and from then on the connection is a tunnel (fr/http.h):
 * bytes both ways, unmodified, with the same bounds (UP_HIGH towards the
 * pod pauses the client, DOWN_HIGH towards the client stops reading the
 * pod), each side's end passed on as a half-close (FIN).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>

#include "fr/buf.h"
#include "fr/log.h"
#include "fr/util.h"
#include "sim.h"

#define LOG_COMP "kubesim.proxy"

#define UP_HIGH ((size_t)1 << 20)
#define UP_LOW ((size_t)256 << 10)
#define DOWN_HIGH ((size_t)1 << 20)
#define DOWN_LOW ((size_t)256 << 10)
#define READ_CHUNK ((size_t)64 << 10)
/* Bounds an upstream's response head (the API server's proxy has no small
 * limit; 64 KiB is far beyond what an agent sends). */
#define MAX_RESP_HEAD ((size_t)64 << 10)

enum proxy_state { P_CONNECTING, P_FORWARDING, P_DONE };

static const char *const state_names[] = {"connecting", "forwarding", "done"};

struct proxy {
  struct sim *sim;
  struct fr_http_req *req;   /* NULL once we let go of it */
  enum proxy_state state;
  unsigned hold;
  int tcp_open;              /* handle initialised, close cb pending */
  uv_tcp_t tcp;
  uv_connect_t connect;
  char target[96];           /* "IP:PORT" as the pod is addressed, for messages */
  int head_req;              /* HEAD: the response has no body */

  /* client -> upstream */
  int chunked_up;            /* re-chunk the client's chunked body */
  size_t up_pending;
  int body_paused;
  int body_ended;

  /* upstream -> client */
  http_parser parser;
  struct fr_buf hname, hvalue, head;
  int in_value;
  size_t head_bytes;
  int resp_started;
  int resp_ended;
  int reading;
  int read_paused;

  /* upgrades */
  int upgrade;               /* the client asked for one (Upgrade + Connection: upgrade) */
  struct fr_buf uphead;      /* the answer's Upgrade and Connection lines */
  int tunnel;                /* the pod answered 101: raw bytes both ways */
  int up_shut;               /* the client's FIN went on to the pod */
  uv_shutdown_t shut;
};

static void set_state(struct proxy *p, enum proxy_state s) {
  if (p->state == s)
    return;
  FR_DEBUG(LOG_COMP, "%s: %s -> %s", p->target, state_names[p->state], state_names[s]);
  p->state = s;
}

static void enter(struct proxy *p) {
  p->hold++;
}

static void leave(struct proxy *p) {
  p->hold--;
  if (p->hold == 0 && p->state == P_DONE && !p->tcp_open && p->req == NULL) {
    fr_buf_free(&p->hname);
    fr_buf_free(&p->hvalue);
    fr_buf_free(&p->head);
    fr_buf_free(&p->uphead);
    free(p);
  }
}

static void on_tcp_closed(uv_handle_t *h) {
  struct proxy *p = h->data;

  enter(p);
  p->tcp_open = 0;
  leave(p);
}

/* Lets go of the client request: no callback of ours runs for it again. */
static void release_req(struct proxy *p) {
  if (p->req == NULL)
    return;
  p->req->data = NULL;
  p->req->abort_cb = NULL;
  p->req->body_cb = NULL;
  p->req = NULL;
}

/* Ends the exchange: the upstream connection is closed (never reused) and,
 * if <drop_client>, the client connection too (a response cut short). */
static void finish(struct proxy *p, int drop_client) {
  struct fr_http_req *req = p->req;

  set_state(p, P_DONE);
  if (p->tcp_open && !uv_is_closing((uv_handle_t *)&p->tcp))
    uv_close((uv_handle_t *)&p->tcp, on_tcp_closed);
  release_req(p);
  if (drop_client && req != NULL)
    fr_http_abort(req);
}

/* Answers with a Status (before the response head went out) and ends. */
static void fail_status(struct proxy *p, int code, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void fail_status(struct proxy *p, int code, const char *reason, const char *fmt, ...) {
  struct fr_http_req *req = p->req;
  char msg[512];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (req == NULL || p->resp_started) {
    finish(p, 1);
    return;
  }
  release_req(p);
  finish(p, 0);
  api_status(req, code, reason, msg, NULL, NULL, NULL);
}

/* ---------------------------------------------------------------------- */
/* headers                                                                 */

/* Hop-by-hop headers (RFC 9110 section 7.6.1) are the two connections'
 * business, not the endpoints'; Go's reverse proxy drops the same set. */
static int hop_by_hop(const char *name) {
  static const char *const names[] = {
      "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
      "Proxy-Connection", "TE", "Trailer", "Transfer-Encoding", "Upgrade",
  };
  size_t i;

  for (i = 0; i < FR_ARRAY_SIZE(names); i++)
    if (strcasecmp(name, names[i]) == 0)
      return 1;
  return 0;
}

/* True if the Connection header value <conn> names <name> (those are
 * hop-by-hop too). */
static int named_in_connection(const char *conn, const char *name) {
  size_t nl = strlen(name);

  while (conn != NULL && *conn != '\0') {
    while (*conn == ' ' || *conn == '\t' || *conn == ',')
      conn++;
    if (strncasecmp(conn, name, nl) == 0 &&
        (conn[nl] == '\0' || conn[nl] == ',' || conn[nl] == ' ' || conn[nl] == '\t'))
      return 1;
    conn = strchr(conn, ',');
  }
  return 0;
}

/* ---------------------------------------------------------------------- */
/* upstream -> client                                                      */

static void on_up_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void on_up_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  (void)h;
  (void)hint;
  buf->base = malloc(READ_CHUNK);
  buf->len = buf->base != NULL ? READ_CHUNK : 0;
}

static void read_resume(struct proxy *p) {
  if (p->state == P_DONE || !p->read_paused)
    return;
  p->read_paused = 0;
  uv_read_start((uv_stream_t *)&p->tcp, on_up_alloc, on_up_read);
}

static void on_client_drain(struct fr_http_req *req) {
  struct proxy *p = req->data;

  if (p == NULL)
    return;
  enter(p);
  read_resume(p);
  leave(p);
}

static int flush_header(struct proxy *p) {
  int rc = 0;

  if (!p->in_value)
    return 0;
  p->in_value = 0;
  if (p->hname.data == NULL || p->hvalue.data == NULL)
    return 0;
  /* Framing headers are set again by our server for the client side. */
  if (!hop_by_hop(p->hname.data) && strcasecmp(p->hname.data, "Content-Length") != 0) {
    rc = fr_buf_printf(&p->head, "%s: %s\r\n", p->hname.data, p->hvalue.data);
  } else if (p->upgrade && (strcasecmp(p->hname.data, "Upgrade") == 0 ||
                            strcasecmp(p->hname.data, "Connection") == 0)) {
    /* A 101's own: passed on with it (and only with it). */
    rc = fr_buf_printf(&p->uphead, "%s: %s\r\n", p->hname.data, p->hvalue.data);
  }
  fr_buf_reset(&p->hname);
  fr_buf_reset(&p->hvalue);
  return rc;
}

static int on_resp_header_field(http_parser *hp, const char *at, size_t len) {
  struct proxy *p = hp->data;

  p->head_bytes += len;
  if (p->head_bytes > MAX_RESP_HEAD || flush_header(p) != 0 ||
      fr_buf_append(&p->hname, at, len) != 0)
    return -1;
  return 0;
}

static int on_resp_header_value(http_parser *hp, const char *at, size_t len) {
  struct proxy *p = hp->data;

  p->head_bytes += len;
  p->in_value = 1;
  if (p->head_bytes > MAX_RESP_HEAD || fr_buf_reserve(&p->hvalue, len) != 0 ||
      fr_buf_append(&p->hvalue, at, len) != 0)
    return -1;
  return 0;
}

static int on_resp_headers_complete(http_parser *hp) {
  struct proxy *p = hp->data;
  int64_t length;
  int status = hp->status_code;

  if (flush_header(p) != 0 || fr_buf_reserve(&p->head, 0) != 0)
    return -1;
  if (status == 101 && p->upgrade && hp->upgrade) {
    /* Switched: the tunnel starts once the parser returns (it stops
     * after this head by itself). */
    p->tunnel = 1;
    return 0;
  }
  if (status < 200) {
    /* 1xx interim answers (we never send Expect) are not passed on. */
    fr_buf_reset(&p->head);
    p->head_bytes = 0;
    return 0;
  }
  if (hp->flags & F_CHUNKED)
    length = FR_HTTP_CHUNKED;
  else if ((hp->flags & F_CONTENTLENGTH) && hp->content_length != ULLONG_MAX)
    length = (int64_t)hp->content_length;
  else if (status == 204 || status == 304)
    length = FR_HTTP_NO_BODY;
  else
    length = p->head_req ? 0 : FR_HTTP_CHUNKED; /* body ends with the connection */
  if (p->req == NULL)
    return -1;
  p->resp_started = 1;
  if (fr_http_stream_begin_length(p->req, status, NULL, p->head.data, length) != 0) {
    release_req(p); /* the server already dropped the connection */
    return -1;
  }
  fr_buf_free(&p->head);
  /* A response to HEAD has no body whatever its headers say. */
  return p->head_req ? 1 : 0;
}

static int on_resp_body(http_parser *hp, const char *at, size_t len) {
  struct proxy *p = hp->data;

  if (p->req == NULL)
    return -1;
  if (fr_http_stream_write(p->req, at, len) != 0) {
    release_req(p);
    return -1;
  }
  if (!p->read_paused && fr_http_pending_bytes(p->req) > DOWN_HIGH &&
      fr_http_on_drain(p->req, on_client_drain, DOWN_LOW) == 0) {
    /* The rest of this read is still parsed and written (at most one
     * READ_CHUNK); the next waits for the client. */
    p->read_paused = 1;
    uv_read_stop((uv_stream_t *)&p->tcp);
  }
  return 0;
}

static int on_resp_message_complete(http_parser *hp) {
  struct proxy *p = hp->data;

  if (hp->status_code < 200 || p->tunnel)
    return 0; /* an interim answer (the real one follows), or a 101 */
  p->resp_ended = 1;
  http_parser_pause(hp, 1);
  return 0;
}

static const http_parser_settings resp_settings = {
    .on_header_field = on_resp_header_field,
    .on_header_value = on_resp_header_value,
    .on_headers_complete = on_resp_headers_complete,
    .on_body = on_resp_body,
    .on_message_complete = on_resp_message_complete,
};

/* ---------------------------------------------------------------------- */
/* the tunnel after a 101                                                  */

static int up_write(struct proxy *p, const uv_buf_t *bufs, unsigned n);

/* Bytes from the pod to the client; stops reading the pod while the
 * client lags. */
static void tunnel_down(struct proxy *p, const char *data, size_t len) {
  if (p->req == NULL || len == 0)
    return;
  if (fr_http_tunnel_write(p->req, data, len) != 0) {
    release_req(p); /* the server closed it, no callback */
    finish(p, 0);
    return;
  }
  if (!p->read_paused && fr_http_pending_bytes(p->req) > DOWN_HIGH &&
      fr_http_on_drain(p->req, on_client_drain, DOWN_LOW) == 0) {
    p->read_paused = 1;
    uv_read_stop((uv_stream_t *)&p->tcp);
  }
}

static void on_up_shutdown(uv_shutdown_t *sr, int status) {
  struct proxy *p = sr->data;

  (void)status; /* a failed FIN shows up as a read error */
  enter(p);
  leave(p);
}

static void on_tunnel_data(struct fr_http_req *req, const char *data, size_t len) {
  struct proxy *p = req->data;
  uv_buf_t b;

  if (p == NULL)
    return;
  enter(p);
  if (p->state != P_FORWARDING)
    goto out;
  if (data == NULL) {
    /* The client's half-close becomes the pod's, after its bytes. */
    if (!p->up_shut) {
      p->up_shut = 1;
      p->shut.data = p;
      if (uv_shutdown(&p->shut, (uv_stream_t *)&p->tcp, on_up_shutdown) != 0)
        finish(p, 1);
    }
    goto out;
  }
  b = uv_buf_init((char *)data, (unsigned)len);
  if (up_write(p, &b, 1) != 0) {
    finish(p, 1);
    goto out;
  }
  if (!p->body_paused && p->up_pending > UP_HIGH && p->req != NULL) {
    p->body_paused = 1;
    fr_http_tunnel_pause(p->req, 1);
  }
out:
  leave(p);
}

static void on_tunnel_end(struct fr_http_req *req, int err) {
  struct proxy *p = req->data;

  if (p == NULL)
    return;
  enter(p);
  FR_DEBUG(LOG_COMP, "%s: tunnel over (%d)", p->target, err);
  release_req(p); /* freed by the server when we return */
  finish(p, 0);
  leave(p);
}

/* The pod said 101: the client gets its head, then <rest> and every byte
 * after. */
static void begin_tunnel(struct proxy *p, const char *rest, size_t len) {
  struct fr_buf h;
  int rc;

  fr_buf_init(&h);
  rc = fr_buf_puts(&h, "HTTP/1.1 101 Switching Protocols\r\n");
  if (rc == 0 && p->head.len > 0)
    rc = fr_buf_append(&h, p->head.data, p->head.len);
  if (rc == 0 && p->uphead.len > 0)
    rc = fr_buf_append(&h, p->uphead.data, p->uphead.len);
  if (rc == 0)
    rc = fr_buf_puts(&h, "\r\n");
  if (rc != 0) {
    fr_buf_free(&h);
    finish(p, 1);
    return;
  }
  p->resp_started = 1;
  rc = fr_http_tunnel_begin(p->req, 101, h.data, h.len, on_tunnel_data, on_tunnel_end);
  fr_buf_free(&h);
  fr_buf_free(&p->head);
  fr_buf_free(&p->uphead);
  if (rc != 0) {
    release_req(p);
    finish(p, 0);
    return;
  }
  p->req->abort_cb = NULL;
  p->req->body_cb = NULL;
  tunnel_down(p, rest, len);
}

static void response_complete(struct proxy *p) {
  struct fr_http_req *req = p->req;

  release_req(p);
  finish(p, 0);
  if (req != NULL)
    fr_http_stream_end(req);
}

static void on_up_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  struct proxy *p = s->data;
  size_t n;

  enter(p);
  if (p->state == P_DONE) {
    free(buf->base);
    leave(p);
    return;
  }
  if (nread == 0 || nread == UV_ENOBUFS) {
    free(buf->base);
    leave(p);
    return;
  }
  if (p->tunnel && p->req != NULL && p->resp_started) {
    if (nread < 0) {
      /* The pod's FIN (or error) goes on to the client after its bytes. */
      free(buf->base);
      if (nread != UV_EOF || fr_http_tunnel_shutdown(p->req) != 0)
        finish(p, 1);
      else
        uv_read_stop(s);
      leave(p);
      return;
    }
    tunnel_down(p, buf->base, (size_t)nread);
    free(buf->base);
    leave(p);
    return;
  }
  if (nread < 0) {
    free(buf->base);
    /* End of a read-until-close body, or an upstream that hung up. */
    http_parser_execute(&p->parser, &resp_settings, NULL, 0);
    if (p->resp_ended)
      response_complete(p);
    else if (!p->resp_started)
      fail_status(p, 502, "BadGateway", "error trying to reach service: EOF");
    else
      finish(p, 1);
    leave(p);
    return;
  }
  n = http_parser_execute(&p->parser, &resp_settings, buf->base, (size_t)nread);
  if (p->tunnel && p->req != NULL && HTTP_PARSER_ERRNO(&p->parser) == HPE_OK) {
    begin_tunnel(p, buf->base + n, (size_t)nread - n);
    free(buf->base);
    leave(p);
    return;
  }
  free(buf->base);
  if (p->resp_ended) {
    response_complete(p);
  } else if (HTTP_PARSER_ERRNO(&p->parser) != HPE_OK || n != (size_t)nread) {
    if (p->req == NULL)
      finish(p, 0);
    else
      fail_status(p, 502, "BadGateway", "error trying to reach service: malformed HTTP response "
                  "from %s", p->target);
  }
  leave(p);
}

/* ---------------------------------------------------------------------- */
/* client -> upstream                                                      */

struct up_write {
  uv_write_t w;
  struct proxy *p;
  size_t len;
  char data[];
};

static void on_up_written(uv_write_t *w, int status) {
  struct up_write *uw = fr_container_of(w, struct up_write, w);
  struct proxy *p = uw->p;

  enter(p);
  p->up_pending -= uw->len;
  free(uw);
  if (status < 0 && p->state != P_DONE) {
    /* The upstream stopped reading (it may still answer: a 413, say);
     * nothing more is sent, the response is read on. */
    FR_DEBUG(LOG_COMP, "%s: write: %s", p->target, uv_strerror(status));
  } else if (p->body_paused && p->up_pending <= UP_LOW && p->req != NULL) {
    p->body_paused = 0;
    if (p->tunnel)
      fr_http_tunnel_pause(p->req, 0);
    else
      fr_http_body_pause(p->req, 0);
  }
  leave(p);
}

/* Queues <len> bytes (from up to three pieces) towards the upstream. */
static int up_write(struct proxy *p, const uv_buf_t *bufs, unsigned n) {
  struct up_write *uw;
  size_t total = 0, off = 0;
  unsigned i;
  uv_buf_t b;
  int rc;

  for (i = 0; i < n; i++)
    total += bufs[i].len;
  uw = malloc(sizeof(*uw) + total);
  if (uw == NULL)
    return -ENOMEM;
  for (i = 0; i < n; i++) {
    memcpy(uw->data + off, bufs[i].base, bufs[i].len);
    off += bufs[i].len;
  }
  uw->p = p;
  uw->len = total;
  b = uv_buf_init(uw->data, (unsigned)total);
  rc = uv_write(&uw->w, (uv_stream_t *)&p->tcp, &b, 1, on_up_written);
  if (rc != 0) {
    free(uw);
    return rc;
  }
  p->up_pending += total;
  return 0;
}

static void on_client_body(struct fr_http_req *req, const char *data, size_t len) {
  struct proxy *p = req->data;
  char line[24];
  uv_buf_t bufs[3];
  int n;

  if (p == NULL)
    return;
  enter(p);
  if (p->state != P_FORWARDING || p->body_ended)
    goto out;
  if (data == NULL) {
    p->body_ended = 1;
    if (p->chunked_up) {
      bufs[0] = uv_buf_init("0\r\n\r\n", 5);
      up_write(p, bufs, 1);
    }
    goto out;
  }
  if (p->chunked_up) {
    n = snprintf(line, sizeof(line), "%zx\r\n", len);
    bufs[0] = uv_buf_init(line, (unsigned)n);
    bufs[1] = uv_buf_init((char *)data, (unsigned)len);
    bufs[2] = uv_buf_init("\r\n", 2);
    n = up_write(p, bufs, 3);
  } else {
    bufs[0] = uv_buf_init((char *)data, (unsigned)len);
    n = up_write(p, bufs, 1);
  }
  if (n != 0) {
    FR_DEBUG(LOG_COMP, "%s: cannot forward the body: %s", p->target, uv_strerror(n));
    goto out; /* the response (or the read error) tells the client */
  }
  if (!p->body_paused && p->up_pending > UP_HIGH && p->req != NULL) {
    p->body_paused = 1;
    fr_http_body_pause(p->req, 1);
  }
out:
  leave(p);
}

static void on_client_abort(struct fr_http_req *req) {
  struct proxy *p = req->data;

  if (p == NULL)
    return;
  enter(p);
  FR_DEBUG(LOG_COMP, "%s: client went away", p->target);
  p->req = NULL; /* already gone: nothing to release */
  finish(p, 0);
  leave(p);
}

/* The request head for the upstream: method, the path after /proxy with the
 * query, the client's end-to-end headers minus its credentials. */
static int build_head(struct proxy *p, const struct fr_http_req *req, const char *path,
                      struct fr_buf *b) {
  const char *conn = fr_http_req_header(req, "Connection");
  const char *cl = fr_http_req_header(req, "Content-Length");
  const char *te = fr_http_req_header(req, "Transfer-Encoding");
  size_t i;
  int rc;

  rc = fr_buf_printf(b, "%s %s%s%s HTTP/1.1\r\nHost: %s\r\n", req->method, path,
                     *req->query ? "?" : "", req->query, p->target);
  for (i = 0; rc == 0 && i < req->nheaders; i++) {
    const char *n = req->headers[i].name;
    /* The API server never hands the caller's credentials to the pod. */
    if (hop_by_hop(n) || named_in_connection(conn, n) || strcasecmp(n, "Host") == 0 ||
        strcasecmp(n, "Authorization") == 0 || strcasecmp(n, "Content-Length") == 0 ||
        strcasecmp(n, "Expect") == 0 || strcasecmp(n, "X-Forwarded-For") == 0)
      continue;
    rc = fr_buf_printf(b, "%s: %s\r\n", n, req->headers[i].value);
  }
  if (rc == 0 && p->upgrade)
    rc = fr_buf_printf(b, "Connection: Upgrade\r\nUpgrade: %s\r\n", fr_http_req_header(req, "Upgrade"));
  /* As Go's httputil.ReverseProxy does. */
  if (rc == 0) {
    const char *xff = fr_http_req_header(req, "X-Forwarded-For");
    rc = fr_buf_printf(b, "X-Forwarded-For: %s%s%s\r\n", xff ? xff : "", xff ? ", " : "",
                       req->peer_ip);
  }
  if (rc == 0 && te != NULL && named_in_connection(te, "chunked")) {
    p->chunked_up = 1;
    rc = fr_buf_puts(b, "Transfer-Encoding: chunked\r\n");
  } else if (rc == 0 && cl != NULL) {
    rc = fr_buf_printf(b, "Content-Length: %s\r\n", cl);
  }
  if (rc == 0)
    rc = fr_buf_puts(b, "\r\n");
  return rc;
}

struct connect_ctx {
  char *path;
};

static void on_connect(uv_connect_t *c, int status) {
  struct proxy *p = c->data;
  struct connect_ctx *ctx = (struct connect_ctx *)(p + 1);
  struct fr_buf head;
  uv_buf_t b;

  (void)ctx;
  enter(p);
  if (p->state == P_DONE)
    goto out;
  if (status < 0) {
    char text[96];
    /* What the Go dialer says, lower-case ("connection refused"). */
    snprintf(text, sizeof(text), "%s", uv_strerror(status));
    if (text[0] >= 'A' && text[0] <= 'Z')
      text[0] = (char)(text[0] - 'A' + 'a');
    fail_status(p, 503, "ServiceUnavailable", "error trying to reach service: dial tcp %s: "
                "connect: %s", p->target, text);
    goto out;
  }
  set_state(p, P_FORWARDING);
  fr_buf_init(&head);
  if (p->req == NULL || build_head(p, p->req, ctx->path, &head) != 0) {
    fr_buf_free(&head);
    if (p->req != NULL)
      fail_status(p, 503, "ServiceUnavailable", "out of memory");
    else
      finish(p, 0);
    goto out;
  }
  b = uv_buf_init(head.data, (unsigned)head.len);
  if (up_write(p, &b, 1) != 0) {
    fr_buf_free(&head);
    fail_status(p, 503, "ServiceUnavailable", "error trying to reach service: write failed");
    goto out;
  }
  fr_buf_free(&head);
  http_parser_init(&p->parser, HTTP_RESPONSE);
  p->parser.data = p;
  uv_read_start((uv_stream_t *)&p->tcp, on_up_alloc, on_up_read);
  p->reading = 1;
  if (p->req->body_streaming) {
    p->body_paused = 0;
    fr_http_body_pause(p->req, 0);
  } else {
    /* A buffered body (never for proxy paths, but keep it right). */
    if (p->req->body_len > 0)
      on_client_body(p->req, p->req->body, p->req->body_len);
    on_client_body(p->req, NULL, 0);
  }
out:
  free(ctx->path);
  ctx->path = NULL;
  leave(p);
}

/* ---------------------------------------------------------------------- */
/* entry                                                                   */

int proxy_is_proxy_path(const char *path) {
  /* /api/v1/namespaces/NS/pods/NAME/proxy[/...] */
  char buf[1024];
  char *seg[8];
  size_t n = 0, len = strlen(path);
  char *q;

  if (len >= sizeof(buf) || strncmp(path, "/api/v1/namespaces/", 19) != 0)
    return 0;
  memcpy(buf, path + 1, len);
  for (q = buf; n < FR_ARRAY_SIZE(seg);) {
    char *slash = strchr(q, '/');
    seg[n++] = q;
    if (slash == NULL)
      break;
    *slash = '\0';
    q = slash + 1;
  }
  return n >= 7 && strcmp(seg[4], "pods") == 0 && strcmp(seg[6], "proxy") == 0 &&
         *seg[3] != '\0' && *seg[5] != '\0';
}

/* Resolves <port_s> (number, container port name, or "" for the first
 * declared port, else 80) against the pod's containers. */
static int pod_port(json_t *pod, const char *port_s, int *port) {
  json_t *c, *pt;
  size_t i, k;
  int64_t v;

  if (*port_s != '\0' && fr_parse_int64(port_s, 1, 65535, &v) == 0) {
    *port = (int)v;
    return 0;
  }
  json_array_foreach(json_path(pod, "spec.containers"), i, c) {
    json_array_foreach(json_object_get(c, "ports"), k, pt) {
      const char *name = json_get_str(pt, "name");
      if (*port_s == '\0' || (name != NULL && strcmp(name, port_s) == 0)) {
        *port = (int)json_get_int(pt, "containerPort", 0);
        return *port > 0 ? 0 : -EINVAL;
      }
    }
  }
  if (*port_s == '\0') {
    *port = 80;
    return 0;
  }
  return -ENOENT;
}

void proxy_handle(struct sim *s, struct fr_http_req *req) {
  char buf[1024], name_buf[300], msg[600];
  char *seg[8], *scheme = NULL, *name, *port_s = "", *c1, *c2;
  const char *raw, *path;
  size_t n = 0, i;
  struct sim_obj *o;
  struct proxy *p;
  struct connect_ctx *ctx;
  json_t *pj;
  struct sockaddr_in addr;
  int port, rc;
  const char *ip;

  /* Split the decoded path for routing ... */
  snprintf(buf, sizeof(buf), "%s", req->path + 1);
  for (c1 = buf; n < FR_ARRAY_SIZE(seg);) {
    char *slash = strchr(c1, '/');
    seg[n++] = c1;
    if (slash == NULL)
      break;
    *slash = '\0';
    c1 = slash + 1;
  }
  /* ... and find the raw (still encoded) path after ".../proxy" in the
   * request target, which goes to the pod as it came. */
  raw = req->url;
  if (strncmp(raw, "http://", 7) == 0 || strncmp(raw, "https://", 8) == 0)
    raw = strchr(strchr(raw, ':') + 3, '/');
  {
    /* Only the path counts: the query may hold slashes too. */
    const char *qm = raw != NULL ? strchr(raw, '?') : NULL;
    for (i = 0; raw != NULL && i < 7; i++) {
      raw = strchr(raw + 1, '/');
      if (raw != NULL && qm != NULL && raw > qm)
        raw = NULL;
    }
  }
  path = raw != NULL ? raw : "";
  {
    const char *qm = strchr(path, '?');
    size_t plen = qm ? (size_t)(qm - path) : strlen(path);
    if (plen >= sizeof(msg))
      plen = sizeof(msg) - 1;
    memcpy(msg, path, plen);
    msg[plen] = '\0';
  }
  snprintf(name_buf, sizeof(name_buf), "%s", seg[5]);
  /* name, name:port or scheme:name:port */
  name = name_buf;
  c1 = strchr(name_buf, ':');
  c2 = c1 ? strchr(c1 + 1, ':') : NULL;
  if (c2 != NULL) {
    *c1 = *c2 = '\0';
    scheme = name_buf;
    name = c1 + 1;
    port_s = c2 + 1;
  } else if (c1 != NULL) {
    *c1 = '\0';
    port_s = c1 + 1;
  }
  o = store_get(s, K_POD, seg[3], name);
  if (o == NULL) {
    char m[400];
    snprintf(m, sizeof(m), "pods \"%s\" not found", name);
    api_status(req, 404, "NotFound", m, "pods", name, NULL);
    return;
  }
  if (msg[0] == '\0' && (strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0)) {
    /* The API server's hack for kubernetes issue 4958: an empty path is
     * redirected to one ending in '/'. */
    struct fr_buf loc;
    fr_buf_init(&loc);
    fr_buf_printf(&loc, "Location: %s/%s%s\r\n", req->path, *req->query ? "?" : "", req->query);
    fr_http_respond(req, 301, NULL, loc.data, NULL, 0);
    fr_buf_free(&loc);
    return;
  }
  pj = obj_json(o);
  ip = json_string_value(json_path(pj, "status.podIP"));
  if (ip == NULL || *ip == '\0') {
    /* What ResourceLocation answers for a pod without an address. */
    json_decref(pj);
    api_status(req, 400, "BadRequest", "address not allowed", NULL, NULL, NULL);
    return;
  }
  if (scheme != NULL && strcmp(scheme, "http") != 0) {
    json_decref(pj);
    snprintf(msg, sizeof(msg), "error trying to reach service: %s is not served by kubesim "
             "(only http)", scheme);
    api_status(req, 503, "ServiceUnavailable", msg, NULL, NULL, NULL);
    return;
  }
  rc = pod_port(pj, port_s, &port);
  if (rc != 0) {
    char m[600];
    snprintf(m, sizeof(m), "error trying to reach service: dial tcp: lookup tcp/%s: unknown port",
             port_s);
    json_decref(pj);
    api_status(req, 503, "ServiceUnavailable", m, NULL, NULL, NULL);
    return;
  }
  if (node_kubelet_lost(s, o->cur->fields[F_NODE_NAME])) {
    /* A node out of reach takes its pods' addresses along. */
    char m[600];
    snprintf(m, sizeof(m), "error trying to reach service: dial tcp %s:%d: connect: no route to host", ip, port);
    json_decref(pj);
    api_status(req, 503, "ServiceUnavailable", m, NULL, NULL, NULL);
    return;
  }
  p = calloc(1, sizeof(*p) + sizeof(*ctx));
  if (p == NULL) {
    json_decref(pj);
    api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
    return;
  }
  ctx = (struct connect_ctx *)(p + 1);
  snprintf(p->target, sizeof(p->target), "%s:%d", ip, port);
  rc = agent_target(s, o, pj, port);
  json_decref(pj);
  if (rc == 1) {
    free(p);
    agent_inproc_serve(s, o, req, msg[0] ? msg : "/");
    return;
  }
  p->sim = s;
  p->req = req;
  p->head_req = strcmp(req->method, "HEAD") == 0;
  p->upgrade = fr_http_req_header(req, "Upgrade") != NULL &&
               named_in_connection(fr_http_req_header(req, "Connection"), "upgrade") &&
               strpbrk(fr_http_req_header(req, "Upgrade"), "\r\n") == NULL;
  ctx->path = strdup(msg[0] ? path : "/");
  if (ctx->path == NULL) {
    free(p);
    api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
    return;
  }
  /* <path> includes the raw query; the head is built from the raw path
   * without it and req->query. */
  {
    char *qm = strchr(ctx->path, '?');
    if (qm != NULL)
      *qm = '\0';
  }
  req->data = p;
  req->abort_cb = on_client_abort;
  req->body_cb = on_client_body;
  if (req->body_streaming) {
    p->body_paused = 1;
    fr_http_body_pause(req, 1); /* until connected */
  }
  enter(p);
  if (rc != 0) {
    /* Nothing listens for that pod port: what a refused dial gives. */
    fail_status(p, 503, "ServiceUnavailable", "error trying to reach service: dial tcp %s: "
                "connect: connection refused", p->target);
    free(ctx->path);
    ctx->path = NULL;
    leave(p);
    return;
  }
  uv_tcp_init(s->loop, &p->tcp);
  p->tcp.data = p;
  p->tcp_open = 1;
  uv_tcp_nodelay(&p->tcp, 1);
  /* The pod's own address (podnet.c): a network namespace of its own
   * behind kubesim's bridge, or a loopback address of its own. */
  rc = uv_ip4_addr(o->u.pod != NULL && o->u.pod->ip[0] ? o->u.pod->ip : "0.0.0.0", port, &addr);
  p->connect.data = p;
  rc = uv_tcp_connect(&p->connect, &p->tcp, (const struct sockaddr *)&addr, on_connect);
  if (rc != 0) {
    fail_status(p, 503, "ServiceUnavailable", "error trying to reach service: dial tcp %s: %s",
                p->target, uv_strerror(rc));
    free(ctx->path);
    ctx->path = NULL;
  }
  leave(p);
}
