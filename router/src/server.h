/* server.h - what the HTTP server (fr/http.h) calls in the router
 * (server.c): the top of its request handling. main.c and the fuzzers use
 * it; no file under it calls back up.
 */
#ifndef FR_ROUTER_SERVER_H
#define FR_ROUTER_SERVER_H

#include <stddef.h>
#include <stdint.h>

struct fr_http_req;

/* The HTTP handler (fr_http_handler_cb) with <arg> = struct router. */
void router_handle(struct fr_http_req *req, void *arg);
/* The health listener's handler: router_handle() for /healthz, /readyz and
 * /metrics, 404 for anything else. */
void router_handle_health(struct fr_http_req *req, void *arg);
/* The HTTP core's stream_body_cb: 1 for requests whose body is streamed to
 * a sandbox (uploads) instead of buffered up to max_body_bytes. */
int router_streams_body(const struct fr_http_req *req, void *arg);
/* The HTTP server's done callback: access log line and request metrics. */
void router_request_done(const struct fr_http_req *req, int status, size_t bytes, uint64_t ms, void *arg);

#endif
