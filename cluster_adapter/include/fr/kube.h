/* fr/kube.h - Kubernetes API client for one cluster, on libcurl multi driven
 * by libuv (curl's socket callback -> one uv_poll per socket, its timer
 * callback -> one uv_timer; curl_multi_info_read drained after every
 * socket_action). Connections are reused. Nothing blocks the loop: exec
 * credential plugins run as child processes through uv_spawn.
 *
 * Three kinds of call:
 *   fr_kube_request()  one REST call, with retries for idempotent calls on
 *                      429/5xx/connection errors honouring Retry-After,
 *                      exponential backoff with jitter, capped;
 *   fr_kube_watch()    a streaming GET delivered line by line (watches);
 *   fr_kube_exec()     pods/exec over the Kubernetes WebSocket protocol
 *                      (offers v5.channel.k8s.io then v4), never retried.
 *
 * Bounded: at most max_active REST calls per client (default twice
 * max_host_connections) are handed to curl at once. The others wait in a
 * FIFO queue as small records (~170 bytes plus their strings; no curl
 * handle, no buffers) and are sent, oldest first, as active calls finish.
 * Watches and FR_KUBE_PRIORITY requests (the health probe) skip the queue
 * and do not count against the bound; exec uses connections of its own.
 *
 * Callbacks are never called from inside the call that started the
 * operation (errors are delivered on a later loop turn).
 */
#ifndef FR_KUBE_H
#define FR_KUBE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "fr/adapter_types.h" /* struct fr_exec_budget */

struct fr_buf;

struct fr_kube_creds;
struct fr_kube_client;
struct fr_kube_call;

struct fr_kube_client_opts {
  const char *name;             /* cluster name, for logs */
  int max_retries;              /* idempotent calls; default 4 */
  uint64_t backoff_base_ms;     /* default 100 */
  uint64_t backoff_cap_ms;      /* default 5000; also caps Retry-After */
  uint64_t connect_timeout_ms;  /* default 3000 */
  uint64_t request_timeout_ms;  /* whole call, per attempt; default 30000 (not for watches) */
  long max_host_connections;    /* default 64 */
  long max_active;              /* REST calls handed to curl at once, the rest queue;
                                   default 2 * max_host_connections */
  uint64_t queue_timeout_ms;    /* a call still queued this long fails unsent; default 300000 */
  long max_stream_connections;  /* FR_KUBE_STREAM calls' connections; default 1024 */
  long max_streams;             /* FR_KUBE_STREAM calls at once (more get -EAGAIN); default 8192 */
  const char *user_agent;       /* default "fedrouter/<version>" */
  uint64_t token_reread_ms;     /* a token file (tokenFile, in-cluster) is read again when a
                                   call needs credentials this long after the last read, as
                                   client-go does (projected tokens rotate); default 60000.
                                   A 401 re-reads it at once either way. */
};

struct fr_kube_response {
  int status;                   /* HTTP status; 0 when no response (transport error) */
  const char *error;            /* transport error text when status == 0, else NULL */
  const char *body;             /* NUL-terminated ("" when none); valid during the callback */
  size_t body_len;
  int attempts;                 /* 1 + retries done; 0: never sent (expired in the queue) */
  int not_sent;                 /* status 0 and not one byte of the request left this process:
                                   never sent, or the last attempt found no connection (name not
                                   resolved, TCP connect refused or failed, TLS handshake failed or
                                   the server's certificate refused) */
  int retry_after_s;            /* from the last response, 0 if absent */
  double elapsed_ms;            /* last attempt, request to last byte */
  const char *headers;          /* FR_KUBE_STREAM calls: the final answer's header lines
                                   ("Name: value\r\n" each); "" otherwise */
};

typedef void (*fr_kube_response_cb)(const struct fr_kube_response *resp, void *arg);
/* One line of a streamed body (without the newline). */
typedef void (*fr_kube_line_cb)(const char *line, size_t len, void *arg);

/* Creates a client for <creds> (copied). <opts> may be NULL. */
int fr_kube_client_new(uv_loop_t *loop, const struct fr_kube_creds *creds,
                       const struct fr_kube_client_opts *opts, struct fr_kube_client **out);
/* Cancels every call, queued ones included (their callbacks are not
 * called), closes every handle; <cb> runs once everything is closed.
 * Accepts NULL. */
void fr_kube_client_free(struct fr_kube_client *c, void (*cb)(void *arg), void *arg);

/* <flags> of fr_kube_request(), OR-ed together. */
enum fr_kube_flags {
  /* May be retried: GET and DELETE are idempotent; a PATCH with a
   * resourceVersion precondition is too. Equal to 1, so a boolean
   * "idempotent" (what this argument was before flags) still means it. */
  FR_KUBE_IDEMPOTENT = 1 << 0,
  /* Never queued, and not counted against max_active: for a few small
   * calls that must not wait behind bulk work (the health probe). It may
   * still wait inside curl for a free connection behind the calls already
   * handed to it (at most max_active; about one request's latency). */
  FR_KUBE_PRIORITY = 1 << 1,
  /* A long call whose body streams (fr_kube_request_opts() with on_data):
   * it runs on connections of its own (max_stream_connections), never
   * queued and not counted against max_active, so streams that last as
   * long as the processes they follow never hold up the REST calls and
   * watches the cluster's state depends on. Never retried. */
  FR_KUBE_STREAM = 1 << 2,
  /* The request or response body holds secrets (a Secret read, an agent's
   * /init): both are zeroed before their memory is freed. Copies libcurl
   * or a growing buffer made on the way are not reached. */
  FR_KUBE_SENSITIVE = 1 << 3,
  /* FR_KUBE_STREAM only: on_head and on_data get the answer whatever its
   * status (a reverse proxy's), not only a 2xx; but 502, 503 and 504,
   * which may be the API server's own Status (its proxy could not reach
   * the pod), stay buffered for the callback to tell apart. */
  FR_KUBE_ANY_STATUS = 1 << 4,
};

/* Starts a REST call. <path> is the path and query ("/api/v1/namespaces/
 * default/pods?limit=500"). <content_type>, <body> and <request_id> may be
 * NULL and are copied; <request_id> is sent as X-Request-Id. <flags>: see
 * enum fr_kube_flags. <out> (may be NULL) receives a handle for
 * fr_kube_cancel(), valid until <cb> runs.
 *
 * With max_active calls already active (sent, waiting for credentials or
 * backing off before a retry), the call waits in the client's FIFO queue.
 * Its request timeout (request_timeout_ms, per attempt) starts when it is
 * sent, not when it was queued; a call still queued after queue_timeout_ms
 * fails, unsent, with status 0 and attempts 0, so a stalled cluster cannot
 * hold callers forever.
 *
 * Returns 0, -EINVAL (bad argument or unknown flag), -ECANCELED (the client
 * is being freed) or -ENOMEM; <cb> is called exactly once after 0 unless
 * the call is cancelled or the client freed. */
int fr_kube_request(struct fr_kube_client *c, const char *method, const char *path,
                    const char *content_type, const void *body, size_t len, int flags,
                    const char *request_id, fr_kube_response_cb cb, void *arg,
                    struct fr_kube_call **out);

/* A 2xx response body as it arrives (fr_kube_request_opts.on_data), from
 * inside curl's write callback: it must not cancel the call or free the
 * client. FR_KUBE_PAUSE stops reading until fr_kube_call_resume(); any
 * other nonzero value stops the transfer (the call then ends with status
 * 0). */
typedef int (*fr_kube_data_cb)(const char *data, size_t len, void *arg);
#define FR_KUBE_PAUSE 2
/* A 2xx response's head (fr_kube_request_opts.on_head), once, before its
 * body: <headers> are the header lines as received ("Name: value\r\n"
 * each, NUL-terminated). Same rules as fr_kube_data_cb. */
typedef void (*fr_kube_head_cb)(int status, const char *headers, void *arg);

/* What fr_kube_request_opts() takes beyond fr_kube_request()'s arguments.
 * Strings are copied. */
struct fr_kube_request_opts {
  int flags;                    /* enum fr_kube_flags */
  const char *request_id;       /* sent as X-Request-Id; may be NULL */
  uint64_t timeout_ms;          /* per attempt; 0 = the client's request_timeout_ms
                                   (FR_KUBE_STREAM: 0 = none) */
  const char *header;           /* more header lines "Name: value", separated by '\n' (no CR);
                                   may be NULL */
  fr_kube_data_cb on_data;      /* NULL: buffer the body for <cb>; else hand a 2xx body over
                                   as it arrives (<cb> then gets an empty body); not with
                                   FR_KUBE_IDEMPOTENT */
  fr_kube_head_cb on_head;      /* with on_data: the 2xx head first; may be NULL */
  /* FR_KUBE_STREAM only: the body comes through fr_kube_call_write() and
   * fr_kube_call_end() (<body> must be NULL); <body_size> is its length or
   * -1 (sent chunked). on_drain (may be NULL) runs, on a later loop turn,
   * once what was written has mostly been sent. */
  int stream_body;
  int64_t body_size;
  void (*on_drain)(void *arg);
};

/* fr_kube_request() with a per-call timeout and one extra header (e.g. a
 * pod proxy call carrying the in-sandbox agent's token, or running as long
 * as the command it starts). Same contract otherwise. */
int fr_kube_request_opts(struct fr_kube_client *c, const char *method, const char *path,
                         const char *content_type, const void *body, size_t len,
                         const struct fr_kube_request_opts *o, fr_kube_response_cb cb, void *arg,
                         struct fr_kube_call **out);

/* Starts a streaming GET (a watch). <on_line> gets each line as it arrives;
 * <on_done> gets the end (status and, for non-2xx, the body). Not retried:
 * the caller relists/rewatches. Never queued, and not counted against
 * max_active (watches are few and long-lived; counted, a handful of them
 * could hold the bound). */
int fr_kube_watch(struct fr_kube_client *c, const char *path, fr_kube_line_cb on_line,
                  fr_kube_response_cb on_done, void *arg, struct fr_kube_call **out);

/* Called once per finished REST call (not watches, not exec) with its
 * method, final status (0: no response) and the last attempt's duration;
 * for metrics. <cb> NULL removes it. */
typedef void (*fr_kube_observer_cb)(void *arg, const char *method, int status, double elapsed_ms);
void fr_kube_client_set_observer(struct fr_kube_client *c, fr_kube_observer_cb cb, void *arg);

/* Stops a call, queued or running; its callbacks are not called
 * afterwards. A queued call leaves the queue at once. Accepts NULL. */
void fr_kube_cancel(struct fr_kube_call *call);

/* A FR_KUBE_STREAM call started with stream_body: queues <len> bytes of
 * the body (copied; the caller keeps fr_kube_call_pending() bounded and
 * waits for on_drain when it is high). -EPIPE after fr_kube_call_end() or
 * once the call is over; -ENOMEM. */
int fr_kube_call_write(struct fr_kube_call *call, const void *data, size_t len);
/* The body is complete. */
int fr_kube_call_end(struct fr_kube_call *call);
/* Body bytes written but not yet handed to the connection. */
size_t fr_kube_call_pending(const struct fr_kube_call *call);
/* Reading resumes after on_data returned FR_KUBE_PAUSE. Not from inside
 * that call's own callbacks. */
void fr_kube_call_resume(struct fr_kube_call *call);

/* A client's load, for metrics and tests. */
struct fr_kube_client_stats {
  size_t max_active;            /* the bound (opts.max_active after defaults) */
  size_t active;                /* REST calls holding a slot: in curl, waiting for
                                   credentials, or backing off before a retry */
  size_t active_peak;           /* the most <active> at once since the client was created */
  size_t queued;                /* REST calls waiting for a slot (no curl handle yet) */
  size_t queued_peak;
  size_t priority;              /* FR_KUBE_PRIORITY calls in flight, outside the bound */
  size_t watches;               /* watches in flight, outside the bound */
  size_t streams;               /* FR_KUBE_STREAM calls in flight, outside the bound */
  size_t in_curl;               /* easy handles in the multi now (every kind; not exec);
                                   never more than active + priority + watches */
  uint64_t expired;             /* calls failed unsent after queue_timeout_ms */
};

/* Fills <out> with <c>'s counters (all zero when <c> is NULL). Cheap; may
 * be called from any callback. */
void fr_kube_client_stats(const struct fr_kube_client *c, struct fr_kube_client_stats *out);

struct fr_kube_exec_opts {
  char *const *argv;            /* NULL-terminated, at least one element */
  const char *container;        /* NULL = the pod's first container */
  const void *stdin_data;       /* sent then half-closed (v5); NULL = no stdin */
  size_t stdin_len;
  size_t max_stdout, max_stderr;/* caps; beyond them output is dropped and flagged */
  uint64_t timeout_ms;          /* 0 = none; on expiry the stream is closed and timed_out set */
  const char *request_id;
  struct fr_exec_budget *budget; /* shared output bound (fr/adapter_types.h); NULL = none;
                                   borrowed, must outlive the exec */
};

struct fr_kube_exec_result {
  int error;                    /* 0, or negative errno-style: the exec did not run to completion */
  int http_status;              /* when the upgrade was refused (e.g. 404, 400), else 0 */
  const char *message;          /* error text (Status message or transport error), or NULL */
  int exit_code;                /* valid when error == 0 and !timed_out */
  int timed_out;
  const char *out, *err;        /* captured output, NUL-terminated, valid during the callback */
  size_t out_len, err_len;
  struct fr_buf *out_buf, *err_buf; /* hold out and err: the callback may take their memory
                                       (fr_buf_detach()) instead of copying it */
  int out_truncated, err_truncated;
  const char *protocol;         /* negotiated subprotocol */
  double duration_ms;
};

typedef void (*fr_kube_exec_cb)(const struct fr_kube_exec_result *res, void *arg);

/* Runs argv in <ns>/<pod> through pods/exec. Never retried. */
int fr_kube_exec(struct fr_kube_client *c, const char *ns, const char *pod,
                 const struct fr_kube_exec_opts *opts, fr_kube_exec_cb cb, void *arg,
                 struct fr_kube_call **out);

/* ---- an HTTP/1.1 upgrade, passed on as raw bytes (kube_tunnel.c) ----
 *
 * One request through the API server on a connection of its own (the
 * client's TLS settings and credentials, connected without blocking the
 * loop), for what answers 101 Switching Protocols (pods/proxy to a
 * sandbox's WebSocket server): the caller builds the request's own headers
 * (Upgrade, Connection, Sec-WebSocket-*, ...), gets the 101 head on
 * on_open, then bytes both ways, unmodified, until either side ends. Any
 * other answer comes to on_done with its head and (bounded) body. Never
 * retried. */
struct fr_kube_tunnel;

/* Returned by on_data: hand nothing more over until fr_kube_tunnel_pause(t, 0). */
#define FR_KUBE_TUNNEL_PAUSE 1

struct fr_kube_tunnel_result {
  int error;                /* 0: the server answered (not 101), or the open tunnel ended (the
                               server's EOF or fr_kube_tunnel_end()); negative errno else:
                               -ECONNREFUSED/-ETIMEDOUT (no connection), -ECONNRESET (lost),
                               -EPROTO (a malformed answer), -ENOMEM, credentials' errors */
  int http_status;          /* the answer's status (101 once it opened), 0 if none came */
  const char *head, *body;  /* a non-101 answer: its head ("HTTP/1.1 ...\r\n...\r\n\r\n") and
                               raw body (at most 64 KiB, chunked as sent); NULL otherwise */
  size_t head_len, body_len;
  const char *message;      /* why, for errors; NULL otherwise */
};

struct fr_kube_tunnel_opts {
  const char *method;       /* "GET" for a WebSocket */
  const char *target;       /* path and query from '/', after the server URL's own path */
  const char *headers;      /* "Name: value" lines separated by '\n' (no CR); never Host,
                               Authorization, Content-Length; may be NULL */
  const char *request_id;   /* may be NULL */
  /* The 101's head, once, with everything up to its blank line. */
  void (*on_open)(const char *head, size_t len, void *arg);
  /* The server's bytes after the head. 0 or FR_KUBE_TUNNEL_PAUSE. */
  int (*on_data)(const char *data, size_t len, void *arg);
  /* Everything written has gone to the connection (after a write). May be NULL. */
  void (*on_drain)(void *arg);
  /* Exactly once, from a loop callback, unless cancelled. */
  void (*on_done)(const struct fr_kube_tunnel_result *res, void *arg);
  void *arg;
};

/* Starts the request. 0 with the tunnel in <*out> (valid until on_done
 * returns or it is cancelled), or -EINVAL / -ENOMEM / a credentials error
 * without a callback. */
int fr_kube_tunnel_start(struct fr_kube_client *c, const struct fr_kube_tunnel_opts *o,
                         struct fr_kube_tunnel **out);
/* Queues <len> bytes (copied) to the server; only once open. Callers keep
 * fr_kube_tunnel_pending() bounded (write while it is low, else wait for
 * on_drain). -EPIPE when not open or after _end(), -ENOMEM. */
int fr_kube_tunnel_write(struct fr_kube_tunnel *t, const void *data, size_t len);
size_t fr_kube_tunnel_pending(const struct fr_kube_tunnel *t);
/* 1 stops reading the server; 0 resumes. */
void fr_kube_tunnel_pause(struct fr_kube_tunnel *t, int pause);
/* Our side is over: the connection closes once everything queued is
 * written, and on_done follows (error 0). -EPIPE when not open. */
int fr_kube_tunnel_end(struct fr_kube_tunnel *t);
/* Stops at once; no callback runs afterwards. Accepts NULL. */
void fr_kube_tunnel_cancel(struct fr_kube_tunnel *t);

#endif
