/* fuzz_http.c - the HTTP/1.1 server core (common/src/http.c: http-parser
 * callbacks, limits, pipelining, chunked bodies, keep-alive, WebSocket
 * upgrade and frames through common/src/ws.c) on arbitrary client bytes.
 *
 * The input is what one client sends on one connection (fuzz_conn.h); the
 * server is the real fr_http_server with small limits (2 KiB head, 4 KiB
 * body) so 431 and 413 are reachable. The handler checks what the server
 * promises every request (method, path and query set, the body
 * NUL-terminated at body_len) and then answers by path, so every way of
 * finishing a request is exercised, pipelined behind each other:
 *   /ws (a WebSocket upgrade)  accept; echo each message; "close" closes
 *   /stream...                 chunked: the body, then one more chunk
 *   /later...                  answered from a timer a loop turn later
 *                              (or dropped if the client goes first)
 *   /abort...                  fr_http_abort()
 *   /len...                    a Content-Length framed stream
 *                              (fr_http_stream_begin_length)
 *   /upload...                 a streamed body (opts.stream_body_cb): the
 *                              pieces are counted, delivery paused after
 *                              each piece and resumed a loop turn later,
 *                              answered at the end of the body;
 *                              /upload-early answers at once, before the
 *                              body has arrived
 *   anything else              200 with the body echoed
 * Query strings and headers go through fr_http_query_get/_each and
 * fr_http_req_header.
 */
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "fr/http.h"
#include "fr/log.h"
#include "fuzz_conn.h"

static uv_loop_t loop;
static struct fr_http_server *srv;
static int port;
static unsigned handled;
static uv_timer_t later_timer;
static struct fr_http_req *later;   /* a request answered from later_timer */

static void check(int cond) {
  if (!cond)
    abort();
}

static int count_pair(const char *key, const char *value, void *arg) {
  check(key != NULL && value != NULL);
  (*(int *)arg)++;
  return 0;
}

static void on_later_abort(struct fr_http_req *req) {
  check(req == later);
  later = NULL;
}

static void on_later(uv_timer_t *t) {
  struct fr_http_req *req = later;

  (void)t;
  if (req == NULL)
    return;
  later = NULL;
  req->abort_cb = NULL;
  fr_http_respond(req, 202, "text/plain", "X-Later: 1\r\n", req->body, req->body_len);
}

/* Streamed bodies: one at a time (one connection), paused after every
 * piece and resumed from a timer, the way a slow proxy consumer would. */
static uv_timer_t resume_timer;
static struct fr_http_req *uploading;
static size_t upload_bytes;

static void on_upload_abort(struct fr_http_req *req) {
  check(req == uploading);
  uploading = NULL;
}

static void on_resume(uv_timer_t *t) {
  (void)t;
  if (uploading != NULL)
    fr_http_body_pause(uploading, 0);
}

static void on_upload_body(struct fr_http_req *req, const char *data, size_t len) {
  char msg[32];

  check(req == uploading);
  if (data != NULL) {
    check(len > 0);
    upload_bytes += len;
    handled++;
    fr_http_body_pause(req, 1);
    uv_timer_start(&resume_timer, on_resume, 0, 0);
    return;
  }
  check(len == 0);
  uploading = NULL;
  req->abort_cb = NULL;
  snprintf(msg, sizeof(msg), "%zu", upload_bytes);
  fr_http_respond(req, 200, "text/plain", NULL, msg, strlen(msg));
}

static int want_stream_body(const struct fr_http_req *req, void *arg) {
  (void)arg;
  check(req->path != NULL);
  return strncmp(req->path, "/upload", 7) == 0 && uploading == NULL;
}

static void on_ws_message(struct fr_http_req *req, int opcode, const unsigned char *data, size_t len) {
  handled++;
  if (len >= 5 && memcmp(data, "close", 5) == 0) {
    fr_http_ws_close(req, 1000, "bye");
    return;
  }
  fr_http_ws_send(req, opcode, "!", 1, data, len);
}

static void on_ws_close(struct fr_http_req *req, int code) {
  (void)req;
  check(code >= 1000 && code < 5000);
}

static void handler(struct fr_http_req *req, void *arg) {
  char v[64];
  int pairs = 0;

  (void)arg;
  handled++;
  check(req->method != NULL && req->method[0] != '\0');
  check(req->url != NULL && req->path != NULL && req->query != NULL);
  check(req->body != NULL && req->body[req->body_len] == '\0');
  check(req->body_len <= 4096);
  for (size_t i = 0; i < req->nheaders; i++)
    check(req->headers[i].name != NULL && req->headers[i].value != NULL);
  (void)fr_http_req_header(req, "Host");
  (void)fr_http_req_header(req, "content-type");
  if (fr_http_query_get(req->query, "a", v, sizeof(v)) >= 0)
    check(memchr(v, '\0', sizeof(v)) != NULL);
  fr_http_query_each(req->query, count_pair, &pairs);

  if (req->body_streaming) {
    check(req->body_len == 0);
    if (strncmp(req->path, "/upload-early", 13) == 0) {
      fr_http_respond(req, 201, "text/plain", NULL, "early", 5);
    } else {
      uploading = req;
      upload_bytes = 0;
      req->abort_cb = on_upload_abort;
      req->body_cb = on_upload_body;
    }
  } else if (strcmp(req->path, "/ws") == 0 && req->websocket) {
    fr_http_ws_accept(req, fr_http_req_header(req, "Sec-WebSocket-Protocol") ? "fuzz" : NULL, on_ws_message,
                      on_ws_close);
  } else if (strncmp(req->path, "/stream", 7) == 0) {
    if (fr_http_stream_begin(req, 200, "text/plain", NULL) == 0) {
      fr_http_stream_write(req, req->body, req->body_len);
      fr_http_stream_write(req, "end\n", 4);
      fr_http_stream_end(req);
    }
  } else if (strncmp(req->path, "/later", 6) == 0 && later == NULL) {
    later = req;
    req->abort_cb = on_later_abort;
    uv_timer_start(&later_timer, on_later, 0, 0);
  } else if (strncmp(req->path, "/len", 4) == 0) {
    if (fr_http_stream_begin_length(req, 200, "text/plain", NULL, (int64_t)req->body_len + 3) == 0) {
      fr_http_stream_write(req, req->body, req->body_len);
      fr_http_stream_write(req, "end", 3);
      fr_http_stream_end(req);
    }
  } else if (strncmp(req->path, "/abort", 6) == 0) {
    fr_http_abort(req);
  } else {
    fr_http_respond(req, 200, "application/octet-stream", pairs > 0 ? "X-Pairs: yes\r\n" : NULL, req->body,
                    req->body_len);
  }
}

static void setup(void) {
  struct fr_http_server_opts o;

  signal(SIGPIPE, SIG_IGN);
  fr_log_set_level(FR_LOG_ERROR);
  check(uv_loop_init(&loop) == 0);
  uv_timer_init(&loop, &later_timer);
  uv_timer_init(&loop, &resume_timer);
  memset(&o, 0, sizeof(o));
  o.name = "fuzz";
  o.max_header_bytes = 2048;
  o.max_body_bytes = 4096;
  o.max_ws_message = 8192;
  o.stream_body_cb = want_stream_body;
  check(fr_http_server_new(&loop, &o, handler, NULL, &srv) == 0);
  check(fr_http_server_listen(srv, "127.0.0.1", 0) == 0);
  port = fr_http_server_port(srv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct fuzz_conn_stats st;

  if (srv == NULL)
    setup();
  fuzz_conn_feed(&loop, srv, port, data, size, &handled, &st);
  check(later == NULL && uploading == NULL);
  return 0;
}
