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
 * Callbacks are never called from inside the call that started the
 * operation (errors are delivered on a later loop turn).
 */
#ifndef FR_KUBE_H
#define FR_KUBE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

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
  const char *user_agent;       /* default "fedrouter/<version>" */
};

struct fr_kube_response {
  int status;                   /* HTTP status; 0 when no response (transport error) */
  const char *error;            /* transport error text when status == 0, else NULL */
  const char *body;             /* NUL-terminated ("" when none); valid during the callback */
  size_t body_len;
  int attempts;                 /* 1 + retries done */
  int retry_after_s;            /* from the last response, 0 if absent */
  double elapsed_ms;            /* last attempt, request to last byte */
};

typedef void (*fr_kube_response_cb)(const struct fr_kube_response *resp, void *arg);
/* One line of a streamed body (without the newline). */
typedef void (*fr_kube_line_cb)(const char *line, size_t len, void *arg);

/* Creates a client for <creds> (copied). <opts> may be NULL. */
int fr_kube_client_new(uv_loop_t *loop, const struct fr_kube_creds *creds,
                       const struct fr_kube_client_opts *opts, struct fr_kube_client **out);
/* Cancels every call (their callbacks are not called), closes every handle;
 * <cb> runs once everything is closed. Accepts NULL. */
void fr_kube_client_free(struct fr_kube_client *c, void (*cb)(void *arg), void *arg);

/* Starts a REST call. <path> is the path and query ("/api/v1/namespaces/
 * default/pods?limit=500"). <body> may be NULL. <idempotent> allows retries
 * (GET and DELETE are idempotent; a PATCH with a resourceVersion
 * precondition is too). <request_id> (may be NULL) is sent as X-Request-Id.
 * <out> (may be NULL) receives a handle for fr_kube_cancel(), valid until
 * <cb> runs. */
int fr_kube_request(struct fr_kube_client *c, const char *method, const char *path,
                    const char *content_type, const void *body, size_t len, int idempotent,
                    const char *request_id, fr_kube_response_cb cb, void *arg,
                    struct fr_kube_call **out);

/* Starts a streaming GET (a watch). <on_line> gets each line as it arrives;
 * <on_done> gets the end (status and, for non-2xx, the body). Not retried:
 * the caller relists/rewatches. */
int fr_kube_watch(struct fr_kube_client *c, const char *path, fr_kube_line_cb on_line,
                  fr_kube_response_cb on_done, void *arg, struct fr_kube_call **out);

/* Called once per finished REST call (not watches, not exec) with its
 * method, final status (0: no response) and the last attempt's duration;
 * for metrics. <cb> NULL removes it. */
typedef void (*fr_kube_observer_cb)(void *arg, const char *method, int status, double elapsed_ms);
void fr_kube_client_set_observer(struct fr_kube_client *c, fr_kube_observer_cb cb, void *arg);

/* Stops a call; its callbacks are not called afterwards. */
void fr_kube_cancel(struct fr_kube_call *call);

struct fr_kube_exec_opts {
  char *const *argv;            /* NULL-terminated, at least one element */
  const char *container;        /* NULL = the pod's first container */
  const void *stdin_data;       /* sent then half-closed (v5); NULL = no stdin */
  size_t stdin_len;
  size_t max_stdout, max_stderr;/* caps; beyond them output is dropped and flagged */
  uint64_t timeout_ms;          /* 0 = none; on expiry the stream is closed and timed_out set */
  const char *request_id;
};

struct fr_kube_exec_result {
  int error;                    /* 0, or negative errno-style: the exec did not run to completion */
  int http_status;              /* when the upgrade was refused (e.g. 404, 400), else 0 */
  const char *message;          /* error text (Status message or transport error), or NULL */
  int exit_code;                /* valid when error == 0 and !timed_out */
  int timed_out;
  const char *out, *err;        /* captured output, NUL-terminated, valid during the callback */
  size_t out_len, err_len;
  int out_truncated, err_truncated;
  const char *protocol;         /* negotiated subprotocol */
  double duration_ms;
};

typedef void (*fr_kube_exec_cb)(const struct fr_kube_exec_result *res, void *arg);

/* Runs argv in <ns>/<pod> through pods/exec. Never retried. */
int fr_kube_exec(struct fr_kube_client *c, const char *ns, const char *pod,
                 const struct fr_kube_exec_opts *opts, fr_kube_exec_cb cb, void *arg,
                 struct fr_kube_call **out);

#endif
