/* router.h - fedrouter internals shared by main.c and router.c. */
#ifndef FR_ROUTER_H
#define FR_ROUTER_H

#include <stddef.h>
#include <uv.h>

struct fr_config;
struct fr_adapter;
struct fr_http_server;
struct fr_http_req;

struct router {
  uv_loop_t *loop;
  struct fr_config *cfg;          /* one reference held */
  struct fr_http_server *http;
  struct fr_adapter **adapters;   /* one per configured cluster, same order */
  size_t nadapters;
  int stopping;                   /* draining: new requests get 503 */
  size_t inflight;                /* requests answered later (creates, execs, ...) */
};

/* The HTTP handler (fr_http_handler_cb) with <arg> = struct router. */
void router_handle(struct fr_http_req *req, void *arg);
/* Answers {"error":{"code":<code>,"message":<message>}} with <status>;
 * <extra_headers> is NULL or "Name: value\r\n" lines. */
void router_error(struct fr_http_req *req, int status, const char *code, const char *message,
                  const char *extra_headers);
/* Serves /v1/sandboxes... and /v1/pools... for <tenant>; returns 0 when the
 * path is not one of them (nothing answered), 1 when it took the request
 * (answered now or later). */
int router_sandboxes(struct router *r, struct fr_http_req *req, const char *tenant);

#endif
