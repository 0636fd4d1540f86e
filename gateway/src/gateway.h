/* gateway.h - fedrouter-gateway's state: one per process.
 *
 * Who owns what:
 *   main.c     flags, TLS, credentials, signals, the drain; owns struct gw
 *   server.c   the HTTP handler: health, metrics, URL -> target, auth,
 *              the pod cache lookup and every refusal; counts
 *   proxy.c    one struct gw_exchange per forwarded request: the upstream
 *              connection, both bodies, the tunnel after a 101
 *   target.c   pure checks and the upstream request head
 *   keys.c     the key ring, loaded and reloaded off the loop
 *
 * Re-entrancy rules (the HTTP core's and libuv's, kept here):
 *   - an exchange is freed only from the close callback of its last
 *     handle, never inside a callback of its own;
 *   - once the client request is finished (respond, stream_end, abort)
 *     or aborted (abort_cb), the exchange drops its pointer to it and
 *     never touches it again;
 *   - no user-visible answer is written from inside the call that began
 *     the exchange's step: failures of uv_tcp_connect arrive through its
 *     callback, a loop turn later.
 */
#ifndef GW_GATEWAY_H
#define GW_GATEWAY_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "fr/buf.h"
#include "fr/gwproto.h"
#include "fr/http.h"

struct fr_podcache;
struct fr_kube_client;
struct gw_exchange;
struct gw_pool;

/* Per-sandbox counts of open exchanges, for max_per_sandbox. */
struct gw_sbcount {
  char *key;     /* "ns/pod"; NULL = empty slot */
  size_t n;
};

/* Outcomes a request ends with, the label of fedrouter_gateway_requests_total. */
enum gw_outcome {
  GW_OUT_FORWARDED,       /* the sandbox answered (any status) */
  GW_OUT_TUNNEL,          /* upgraded: bytes both ways */
  GW_OUT_BAD_REQUEST,     /* 400, 405 */
  GW_OUT_UNAUTHENTICATED, /* 401 */
  GW_OUT_FORBIDDEN,       /* 403 */
  GW_OUT_NOT_FOUND,       /* 404 */
  GW_OUT_LIMITED,         /* 429 */
  GW_OUT_UNAVAILABLE,     /* 503: cache not synced, address conflict, out of memory */
  GW_OUT_UPSTREAM_ERROR,  /* 502/504 before an answer began */
  GW_OUT_CUT,             /* the exchange broke after the answer began */
  GW_OUT_CLIENT_GONE,     /* the router left before the answer ended */
  GW_OUT_COUNT
};

struct gw_metrics {
  uint64_t outcomes[GW_OUT_COUNT];
  uint64_t auth_failures[FR_GW_BAD_SIGNATURE + 1]; /* by enum fr_gw_verdict */
  uint64_t bytes_to_sandbox, bytes_from_sandbox;
  /* time from the request to the upstream's answer head */
  uint64_t ttfb_buckets[12];
  uint64_t ttfb_count;
  double ttfb_sum;
  uint64_t key_reloads, key_reload_errors;
};

struct gw_opts {
  const char *cluster;           /* the routers' name for this cluster (signatures) */
  const char *const *namespaces; /* watched sandbox namespaces */
  size_t nnamespaces;
  uint64_t idle_timeout_ms;      /* no byte either way on an exchange; router keep-alive */
  uint64_t connect_timeout_ms;   /* dialling a pod */
  size_t max_per_sandbox;        /* open exchanges per sandbox (429 beyond) */
  int64_t shutdown_delay_ms;     /* SIGTERM: /readyz fails this long before the drain */
  uint64_t drain_timeout_ms;     /* the drain waits this long for exchanges to end */
};

struct gw {
  uv_loop_t *loop;
  struct gw_opts opts;
  struct fr_kube_client *kube;
  struct fr_podcache **caches;   /* one per namespace, in opts order */
  struct fr_http_server *http, *health;
  struct fr_gw_keyring ring;     /* owned; swapped whole by keys.c */
  struct gw_sbcount *sb;         /* open addressing, cap a power of 2 */
  size_t sb_cap, sb_n;
  struct gw_exchange *exchanges; /* every live exchange */
  size_t nexchanges, ntunnels;
  struct gw_pool *pool;          /* idle connections to pods (proxy.c) */
  size_t nupconns, npooled;      /* connections to pods open; of them idle in the pool */
  uint64_t pool_hits, pool_retries; /* requests sent on a kept-alive connection; sent again */
  int keys_reloading;            /* keys.c: a reload runs on the thread pool */
  int shutting_down;             /* SIGTERM seen: /readyz fails */
  int draining;                  /* the HTTP server drains */
  struct gw_metrics m;
};

/* ---- server.c ---- */

/* The handler of both listeners (fr_http_handler_cb, <arg> the gw). */
void gw_handle(struct fr_http_req *req, void *arg);
/* The health listener's: /healthz, /readyz and /metrics only. */
void gw_handle_health(struct fr_http_req *req, void *arg);
/* fr_http_server_opts.stream_body_cb: every request to forward streams. */
int gw_stream_body(const struct fr_http_req *req, void *arg);
/* done_cb of the main listener: refusals are logged there. */
void gw_request_done(const struct fr_http_req *req, int status, size_t body_bytes, uint64_t duration_ms,
                     void *arg);
/* Answers <req> with the gateway's own error (JSON, Fr-Gateway-Error) and
 * counts <outcome>. */
void gw_refuse(struct gw *g, struct fr_http_req *req, enum gw_outcome outcome, int status, const char *code,
               const char *message);
/* 1 when every watched namespace is listed and the gateway is not
 * shutting down. */
int gw_ready(const struct gw *g);
void gw_count_done(struct gw *g, const char *key);
void gw_observe_ttfb(struct gw *g, double seconds);
/* Frees the per-sandbox table. */
void gw_server_free(struct gw *g);

/* ---- proxy.c ---- */

/* Forwards <req> to the pod at <addr>: <head> (taken, left empty) is the
 * request head gw_upstream_head() built, <body> the client's framing
 * (GW_BODY_*), <upgrade> 1 for an Upgrade request. <key> "ns/pod" is
 * counted against max_per_sandbox until the exchange ends (the caller
 * counted it already; the exchange calls gw_count_done() when it is
 * freed). Answers <req> itself, now or later; 0, or -ENOMEM before
 * anything started (the caller answers and uncounts). */
int gw_proxy_start(struct gw *g, struct fr_http_req *req, const struct sockaddr *addr, struct fr_buf *head,
                   int64_t body, int upgrade, const char *key);
/* Aborts every exchange (drain deadline, shutdown) and closes the pool. */
void gw_proxy_abort_all(struct gw *g);
/* Closes every idle connection to a pod and the pool. */
void gw_pool_close(struct gw *g);

/* ---- keys.c ---- */

/* Loads the key files <paths> (NULL-terminated, at most FR_GW_MAX_KEYS)
 * into <ring> (blocking: start-up). 0 or -EINVAL with <err>. */
int gw_keys_load(const char *const *paths, struct fr_gw_keyring *ring, char *err, size_t errlen);
/* Starts a reload of the same files on the thread pool; the ring is
 * replaced when all read well, else kept (and the error logged and
 * counted). At most one at a time. */
void gw_keys_reload(struct gw *g, const char *const *paths);
void gw_keys_free(struct fr_gw_keyring *ring);

#endif
