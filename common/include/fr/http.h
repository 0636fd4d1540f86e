/* fr/http.h - HTTP/1.1 server on libuv, shared by kubesim and the router.
 *
 * One listener, many connections. Requests are parsed with http-parser;
 * each connection serves one request at a time (pipelined requests wait in
 * the input buffer until the current response is finished). Plain TCP or TLS
 * (OpenSSL with memory BIOs, so libuv still owns the socket).
 *
 * A handler gets a struct fr_http_req and must eventually finish it in one of
 * four ways:
 *   - fr_http_respond()                     a whole response;
 *   - fr_http_stream_begin()/_write()/_end() a chunked stream (watches);
 *   - fr_http_ws_accept()                   switch to WebSocket (upgrades only);
 *   - fr_http_abort()                       drop the connection.
 * A reverse proxy has a fifth: fr_http_tunnel_begin() after its upstream
 * answered 101, which turns the connection into raw bytes both ways.
 * It may do so inside the handler callback or later from any loop callback.
 * If the peer goes away first, the server calls req->abort_cb (if set) once;
 * after that, or after the request is finished, <req> must not be touched.
 *
 * Limits produce the right status without reaching the handler: a head larger
 * than max_header_bytes gets 431, a body larger than max_body_bytes gets 413,
 * malformed requests get 400, and a head or body that trickles in slower than
 * the timeouts allow gets 408; each then closes the connection.
 *
 * Bodies of any size (proxies, uploads): a server whose opts.stream_body_cb
 * says yes for a request head dispatches that request as soon as its head is
 * complete, with req->body_streaming set and an empty req->body; the body
 * then arrives piece by piece on req->body_cb (set it in the handler), which
 * fr_http_body_pause() can hold back so a slow consumer is not flooded (the
 * server stops reading the socket). Neither max_body_bytes nor
 * body_timeout_ms applies to such a body. A response may start or finish
 * before the body has all arrived; if it finishes first the connection is
 * closed after it (the rest of the body is drained, not parsed).
 */
#ifndef FR_HTTP_H
#define FR_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct fr_http_server;
struct fr_http_req;
typedef struct ssl_ctx_st SSL_CTX;

struct fr_http_req;
/* Called once per request when its response is complete on our side
 * (whole response queued, stream ended, WebSocket accepted) or when the
 * connection went away first (<status> 0). Also for requests the server
 * itself refused (400/408/413/431), where method and path may be NULL.
 * For access logs and metrics; must not touch the response. */
typedef void (*fr_http_done_cb)(const struct fr_http_req *req, int status, size_t body_bytes,
                                uint64_t duration_ms, void *arg);

struct fr_http_server_opts {
  size_t max_header_bytes;    /* request line + headers; default 16 KiB */
  size_t max_body_bytes;      /* default 1 MiB */
  uint64_t header_timeout_ms; /* first byte to end of head; default 10 s */
  uint64_t body_timeout_ms;   /* end of head to end of body; default 30 s */
  uint64_t idle_timeout_ms;   /* keep-alive between requests; default 60 s */
  size_t max_ws_message;      /* largest WebSocket message accepted; default 16 MiB */
  SSL_CTX *ssl_ctx;           /* borrowed, must outlive the server; NULL = plain */
  /* Connection limits (0 = none). Past one, a new connection first evicts
   * the longest-idle keep-alive connection (of its own address for the
   * per-address limit, of anyone for the global one), so idle connections
   * can never lock out new clients; when none is idle it is refused with
   * 503 and closed at once. */
  size_t max_conns;
  size_t max_conns_per_ip;
  const char *name;           /* for logs; default "http" */
  fr_http_done_cb done_cb;    /* optional */
  void *done_arg;
  /* Optional: called when a request head is complete (method, url, path,
   * query and headers are set, the body is not) with the handler's <arg>.
   * Return 1 to stream this request's body (see the top of this file), 0
   * for the usual buffered body. Never called for upgrade requests. Must not
   * answer the request. */
  int (*stream_body_cb)(const struct fr_http_req *req, void *arg);
};

struct fr_http_header {
  char *name;   /* as received; compare case-insensitively */
  char *value;
};

typedef void (*fr_http_handler_cb)(struct fr_http_req *req, void *arg);
typedef void (*fr_http_abort_cb)(struct fr_http_req *req);
/* A piece of a streamed request body (<data>, <len> > 0, valid for the call
 * only), or its end (<data> NULL, <len> 0), delivered once. Called from the
 * server's read path, never from inside an fr_http_* call of the handler; it
 * may answer or abort the request. */
typedef void (*fr_http_body_cb)(struct fr_http_req *req, const char *data, size_t len);
/* The connection's queue of unsent response bytes fell to the low-water
 * mark given to fr_http_on_drain(). One-shot. */
typedef void (*fr_http_drain_cb)(struct fr_http_req *req);
/* A WebSocket message (reassembled from fragments; pings are answered by
 * the server itself and never reach the callback). */
typedef void (*fr_http_ws_message_cb)(struct fr_http_req *req, int opcode,
                                      const unsigned char *data, size_t len);
/* The WebSocket is gone: peer close (code from its close frame, or 1006 for
 * an abrupt end), protocol error or fr_http_abort(). <req> is freed when this
 * returns. */
typedef void (*fr_http_ws_close_cb)(struct fr_http_req *req, int code);
/* The server is gone; <srv> is always NULL (the memory is already freed),
 * only <arg> identifies it. */
typedef void (*fr_http_server_close_cb)(struct fr_http_server *srv, void *arg);

struct fr_http_req {
  /* Filled by the server; read-only for handlers. */
  const char *method;       /* "GET", "POST", ... */
  const char *url;          /* raw request-target */
  const char *path;         /* percent-decoded path, no query */
  const char *query;        /* raw query string without '?', "" when none */
  struct fr_http_header *headers;
  size_t nheaders;
  const char *body;         /* NUL-terminated; "" when none */
  size_t body_len;
  int websocket;            /* a valid WebSocket upgrade request */
  int body_streaming;       /* the body arrives on body_cb (stream_body_cb said so) */
  const char *peer_ip;      /* client address as text */
  int peer_port;
  uint64_t start_ms;        /* uv_now() when the head was complete */
  uv_loop_t *loop;

  /* Owned by the handler. */
  void *data;
  fr_http_abort_cb abort_cb;
  fr_http_body_cb body_cb;  /* streamed bodies only; NULL drops the pieces */
  /* Free-form notes the handler leaves for done_cb (access log fields),
   * NUL-terminated; zeroed for every request. */
  char note[512];
};

/* Allocates a server on <loop>; <opts> may be NULL for the defaults.
 * <handler> is called with <arg> for every complete request. */
int fr_http_server_new(uv_loop_t *loop, const struct fr_http_server_opts *opts,
                       fr_http_handler_cb handler, void *arg,
                       struct fr_http_server **out);
/* Binds and listens on <host>:<port> (port 0 picks one; see _port()).
 * May be called again after fr_http_server_unlisten(). */
int fr_http_server_listen(struct fr_http_server *srv, const char *host, int port);
int fr_http_server_port(const struct fr_http_server *srv);
/* Connections accepted from now on use <ctx> (borrowed, like
 * opts.ssl_ctx: it must outlive them or be reference-counted by them;
 * OpenSSL's SSL_new takes a reference, so the caller may free the old
 * context once this returns). For certificates renewed while serving.
 * A plain server stays plain: -EINVAL. */
int fr_http_server_set_ssl_ctx(struct fr_http_server *srv, SSL_CTX *ctx);
/* Stops accepting (new connections are refused by the kernel) and, if
 * <drop_conns>, closes every open connection (their requests are aborted). */
void fr_http_server_unlisten(struct fr_http_server *srv, int drop_conns);
/* Graceful stop: stops accepting like fr_http_server_unlisten(srv, 0),
 * closes the keep-alive connections that sit idle with nothing received,
 * and from now on ends every connection after the response it is giving
 * or about to give ("Connection: close"), so requests already on their way
 * are still answered while the open connections run out. There is no way
 * back: free the server when nconns reaches zero or the caller's bound
 * runs out. */
void fr_http_server_drain(struct fr_http_server *srv);
/* Connections with a request being received or answered, response bytes
 * not yet handed to the kernel, or the start of a next request waiting:
 * what a drain waits for (idle and lingering ones are not). Walks every
 * connection. */
size_t fr_http_server_nbusy(const struct fr_http_server *srv);
/* Number of open connections. */
size_t fr_http_server_nconns(const struct fr_http_server *srv);
/* Connections closed to make room (idle ones evicted) and refused (no room
 * and nothing idle) under the connection limits, since the start. */
struct fr_http_server_stats {
  uint64_t evicted, refused;
  size_t idle;                /* keep-alive connections between requests now */
};
void fr_http_server_stats(const struct fr_http_server *srv, struct fr_http_server_stats *out);
/* Closes the listener and every connection; <cb> runs once everything is
 * closed, after which the server memory is gone. Accepts NULL srv. */
void fr_http_server_free(struct fr_http_server *srv, fr_http_server_close_cb cb,
                         void *arg);

/* Case-insensitive header lookup; NULL when absent. */
const char *fr_http_req_header(const struct fr_http_req *req, const char *name);
/* Looks <key> up in a raw query string and percent-decodes its first value
 * into <out> (NUL-terminated). Returns the decoded length, -ENOENT when
 * absent, -ENOSPC when it does not fit, -EINVAL when a key or value before
 * it (or it) decodes to a NUL byte. */
long fr_http_query_get(const char *query, const char *key, char *out, size_t outlen);
/* Calls <cb> for every key=value pair of <query> in order, both decoded.
 * Stops and returns the first non-zero value <cb> returns; -EINVAL for a
 * pair that decodes to a NUL byte (%00), which no key or value may hold. */
int fr_http_query_each(const char *query,
                       int (*cb)(const char *key, const char *value, void *arg),
                       void *arg);
/* Reason phrase of a status code ("OK", "Not Found", ...). */
const char *fr_http_status_text(int status);

/* Sends a whole response and finishes <req>. <extra_headers> is NULL or a
 * block of "Name: value\r\n" lines. Content-Length and keep-alive handling are
 * added by the server. Returns 0, or a negative error if the connection is
 * already gone (then <req> is finished anyway). */
int fr_http_respond(struct fr_http_req *req, int status, const char *content_type,
                    const char *extra_headers, const void *body, size_t len);

/* Chunked streaming. Begin sends the head; each write sends one chunk
 * (empty writes are ignored); end sends the last chunk and finishes <req>. */
int fr_http_stream_begin(struct fr_http_req *req, int status,
                         const char *content_type, const char *extra_headers);
int fr_http_stream_write(struct fr_http_req *req, const void *data, size_t len);
int fr_http_stream_end(struct fr_http_req *req);
/* Bytes accepted but not yet handed to the kernel (for backpressure). */
size_t fr_http_pending_bytes(const struct fr_http_req *req);

/* Framing values for fr_http_stream_begin_length(). */
#define FR_HTTP_CHUNKED (-1)
#define FR_HTTP_NO_BODY (-2)
/* Like fr_http_stream_begin() with the body framed by <length>: >= 0 sends
 * "Content-Length: <length>" and each write then sends its bytes as they are
 * (the caller must write exactly <length> in all, else end aborts the
 * connection); FR_HTTP_CHUNKED is fr_http_stream_begin(); FR_HTTP_NO_BODY
 * sends neither header and no body (204, 304). For a HEAD request the
 * writes are dropped whatever the framing. <extra_headers> must not carry
 * Content-Length or Transfer-Encoding. */
int fr_http_stream_begin_length(struct fr_http_req *req, int status, const char *content_type,
                                const char *extra_headers, int64_t length);
/* Calls <cb> once, from a write completion, when the response bytes still
 * queued fall to <low_water> or below. Returns 0, or 1 without registering
 * when they already are (call again later, or just write). One callback at
 * a time: a second registration replaces the first. Dropped when the
 * request finishes or the connection goes. */
int fr_http_on_drain(struct fr_http_req *req, fr_http_drain_cb cb, size_t low_water);
/* Streamed request bodies: <pause> 1 stops delivering body pieces (and,
 * once a little is buffered, reading the socket); 0 resumes from the next
 * loop turn. No effect on other requests. */
void fr_http_body_pause(struct fr_http_req *req, int pause);

/* Drops the connection without (more of) a response; <req> is finished and
 * abort_cb is NOT called (the caller knows). For WebSockets the close_cb is
 * not called either. */
void fr_http_abort(struct fr_http_req *req);

/* Completes a WebSocket upgrade (req->websocket must be set): sends 101 with
 * Sec-WebSocket-Accept and, if <protocol> is non-NULL, Sec-WebSocket-Protocol.
 * From then on messages arrive on <on_message> and the end on <on_close>;
 * abort_cb is no longer used. */
int fr_http_ws_accept(struct fr_http_req *req, const char *protocol,
                      fr_http_ws_message_cb on_message,
                      fr_http_ws_close_cb on_close);
/* ---- tunnels: raw bytes both ways after an upgrade (reverse proxies) ----
 *
 * A tunnel is what an HTTP/1.1 proxy does after the upstream answered
 * 101 Switching Protocols (WebSocket or any other Upgrade): no framing,
 * bytes as they come, each direction ending on its own (half-close: a
 * FIN, or TLS close_notify). The handler applies backpressure itself:
 * fr_http_tunnel_pause() stops reading the peer, fr_http_pending_bytes()
 * and fr_http_on_drain() say when the peer reads what it is sent. */

/* The peer's bytes (<data>, <len> > 0, valid for the call only), or the
 * end of its direction (<data> NULL, <len> 0), delivered once and after
 * every byte before it. Called from the server's read path, never from
 * inside an fr_http_* call of the handler; it may write, pause, shut down
 * or abort. */
typedef void (*fr_http_tunnel_data_cb)(struct fr_http_req *req, const char *data, size_t len);
/* The tunnel is over: both directions ended (<err> 0: the peer's end was
 * delivered and fr_http_tunnel_shutdown()'s FIN is out), or the
 * connection failed or the peer reset it (<err> < 0). <req> is freed when
 * this returns. Not called after fr_http_abort() or a failed
 * fr_http_tunnel_* call (the caller knows). */
typedef void (*fr_http_tunnel_end_cb)(struct fr_http_req *req, int err);
/* Writes <head> (<len> bytes: a whole response head, "HTTP/1.1 101
 * ...\r\n\r\n", sent as it is) and switches the connection to a tunnel;
 * <status> is what done_cb reports. Only for a request being handled
 * whose body is not streamed (upgrade requests never are). Bytes the peer
 * sent after the request come to <on_data> from the next loop turn. 0, or
 * a negative error (the connection is then closed, no callback). */
int fr_http_tunnel_begin(struct fr_http_req *req, int status, const void *head, size_t len,
                         fr_http_tunnel_data_cb on_data, fr_http_tunnel_end_cb on_end);
/* Queues <len> bytes to the peer. 0, or -EPIPE after a shutdown or on a
 * connection that is not a tunnel, or another negative error (then the
 * connection is closed without on_end). */
int fr_http_tunnel_write(struct fr_http_req *req, const void *data, size_t len);
/* Ends our direction once everything queued is written (the peer reads
 * EOF); the peer's direction goes on. 0 or a negative error (connection
 * closed without on_end). */
int fr_http_tunnel_shutdown(struct fr_http_req *req);
/* <pause> 1 stops handing the peer's bytes over (and reading the socket
 * once a little is buffered); 0 resumes from the next loop turn. */
void fr_http_tunnel_pause(struct fr_http_req *req, int pause);

/* Sends one unfragmented, unmasked frame whose payload is <prefix> (if
 * <prefix_len> > 0) followed by <data>. The prefix form exists for channel
 * protocols that put one byte in front of every message. */
int fr_http_ws_send(struct fr_http_req *req, int opcode, const void *prefix,
                    size_t prefix_len, const void *data, size_t len);
/* Sends a close frame with <code> and closes the connection once everything
 * queued has been written; on_close then runs with <code>. */
int fr_http_ws_close(struct fr_http_req *req, int code, const char *reason);

#endif
