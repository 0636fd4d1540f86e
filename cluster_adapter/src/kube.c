/* kube.c - the Kubernetes API client core: libcurl multi driven by libuv,
 * REST calls with retries and streaming watches. The credentials they
 * carry (static token, token file, exec plugin) are kubecreds.c's; pods/exec
 * is kube_exec.c's.
 *
 * Shape: one CURLM per client, driven by the loop through fr/curluv.h
 * (one uv_poll per socket, one uv_timer, finished transfers drained after
 * every curl_multi_socket_action). Connections stay in the multi handle's
 * pool and are reused. At most max_active REST calls are dispatched (own a
 * struct rest_io and, while sending, an easy handle); the others wait in a
 * FIFO of bare struct rest_call records, moved by one timer per client
 * ("the queue" below). Watches and priority calls go straight through.
 *
 * Re-entrancy rules this file keeps:
 *   - libcurl forbids curl_multi_remove_handle() from inside its own
 *     callbacks. A watch's on_line runs inside the write callback, so a call
 *     cancelled there (or the whole client freed there) becomes a "zombie":
 *     its easy handle is removed right after curl_multi_socket_action
 *     returns (reap_zombies(), fr_curluv's after_cb).
 *   - A user callback run while the finished transfers are drained may free
 *     the client; fr_curluv_close() then cleans up the multi handle after
 *     the drain loop, never under it.
 *   - Memory is freed only in uv close callbacks; fr_kube_client_free's
 *     callback runs once every handle (and the token file read, if any) is
 *     gone.
 *   - No user callback runs inside the call that started the operation:
 *     every call begins by waiting for credentials, which always answers on
 *     a later loop turn (kubecreds.c's "kick" timer), or in the queue, which moves
 *     only from its own timer (so neither does a cancel or a finish start
 *     or fail another call from inside itself).
 */
#include "kube_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>
#include <openssl/ssl.h>

#include "fr/assert.h"
#include "fr/buf.h"
#include "fr/curluv.h"
#include "fr/kubeconfig.h"
#include "fr/log.h"
#include "fr/turn.h"
#include "fr/urlsafe.h"
#include "fr/util.h"
#include "fr/version.h"
#include "kubecreds.h"

/* A response body bigger than this fails the call. An unpaginated list of
 * 50,000 sandbox-shaped pods is ~95 MB (docs/kubesim.md), so this leaves
 * room for that and stops a runaway body from eating the router's memory. */
#define KUBE_MAX_BODY ((size_t)256 << 20)
/* One watch event: a single object, whose etcd limit is 1.5 MiB; 16 MiB is
 * far past anything legitimate. */
#define KUBE_MAX_LINE ((size_t)16 << 20)
/* A streamed answer's head. */
#define KUBE_MAX_HEAD ((size_t)64 << 10)
/* Default bound on active REST calls, as a multiple of max_host_connections.
 * Twice: when a call finishes, the next is already in curl waiting for the
 * connection, and calls waiting for credentials or backing off before a
 * retry (they hold a slot, not a connection) do not leave connections idle.
 * No more: a call beyond the connections waits for one inside curl, where
 * its request timeout already runs, and a priority call (the probe) may wait
 * there behind such calls; twice keeps either to about one request's
 * latency. */
#define KUBE_ACTIVE_PER_CONNECTION 2
/* Default queue_timeout_ms. The queue drains at max_active calls per
 * request latency: a healthy API server at ~20 ms per DELETE clears 50,000
 * through 64 connections in ~16 s, 500,000 in under 3 min. A stalled one
 * (every attempt running into request_timeout_ms, with retries) would hold
 * the tail of a large queue for hours; 5 min bounds what a caller waits. */
#define KUBE_QUEUE_TIMEOUT_MS 300000

#define LOGC "kube"

/* ------------------------------------------------------------------ types */

struct kube_share {
  CURLSH *sh;
  int refs;
};

struct fr_kube_client {
  struct kube_share *share;           /* exec connections' TLS sessions */
  uv_loop_t *loop;
  fr_kube_observer_cb observer;       /* metrics hook, may be NULL */
  void *observer_arg;
  struct fr_kube_creds *creds;        /* our copy */
  struct fr_kube_client_opts opts;    /* defaults filled in; strings below */
  char *name, *user_agent;
  struct fr_curluv curl;              /* the multi handle on the loop */
  struct fr_curluv scurl;             /* FR_KUBE_STREAM calls' multi: connections of their own */
  struct fr_kube_call *calls;         /* live calls, queued ones too, for free */
  struct rest_call *zombies;          /* cancelled inside a curl callback */

  /* The bound on active REST calls and the queue behind it (fr/kube.h). */
  uv_timer_t qtimer;                  /* dispatches into free slots; expires the head */
  struct rest_call *qhead, *qtail;    /* oldest first */
  size_t max_active;
  size_t nactive, npriority, nwatches, nstreams, nqueued, nin_curl;
  size_t active_peak, queued_peak;
  uint64_t nexpired;
  unsigned nopen;                     /* open uv handles (curl's: one; the credentials': one) */
  int closing, finalized;
  void (*free_cb)(void *arg);
  void *free_arg;

  struct kube_creds *cr;              /* kubecreds.c */
};

enum call_state {
  CALL_NEW,
  CALL_QUEUED,       /* waiting for one of the client's max_active slots */
  CALL_WAIT_CREDS,   /* dispatched, waiting for the credentials */
  CALL_RUNNING,      /* easy handle in the multi */
  CALL_BACKOFF,      /* waiting to retry */
  CALL_DONE,         /* callback called (or being called) */
  CALL_CANCELLED,
};

enum call_kind {
  KIND_BULK,         /* bounded by max_active, queued beyond it */
  KIND_PRIORITY,     /* FR_KUBE_PRIORITY: never queued, not counted */
  KIND_WATCH,        /* never queued, not counted */
  KIND_STREAM,       /* FR_KUBE_STREAM: its own multi, never queued, counted apart */
};

/* What a dispatched call needs, from dispatch to release. Kept out of
 * struct rest_call so that a queued call costs only what the caller asked
 * for: no timer, no buffers, no error buffer. */
struct rest_io {
  uv_timer_t timer;                   /* backoff; data: the call */
  CURL *easy;
  struct curl_slist *headers;
  struct fr_buf resp;                 /* REST body, or a watch's non-2xx body */
  struct fr_buf line;                 /* a watch's partial line */
  size_t scan_from;                   /* bytes of <line> known to hold no '\n' */
  long code;                          /* status of the running attempt, 0 until known */
  uint64_t gen;                       /* kube__creds_gen() the attempt used */
  double elapsed_ms;                  /* last attempt */
  const char *abort_why;              /* we aborted the transfer ourselves */
  struct rest_call *zombie_next;
  struct fr_curluv *cu;               /* the multi the easy handle is in */
  struct fr_buf hdrs;                 /* KIND_STREAM: the response's header lines */
  unsigned head_sent : 1;             /* on_head was called */
  unsigned paused_recv : 1;           /* on_data said FR_KUBE_PAUSE */
  unsigned paused_send : 1;           /* the read callback ran dry and paused */
  unsigned drain_due : 1, resume_due : 1; /* work for the io timer (next loop turn) */
  unsigned budget_wait : 1;           /* paused_recv because the loop turn's budget ran out */
  int retries, retry_after_s, refreshed, waiting, zombie;
  int not_sent;                       /* the last attempt's connection never opened (fr_kube_response) */
  char errbuf[CURL_ERROR_SIZE];       /* CURLOPT_ERRORBUFFER: must be this big */
};

/* A REST call or a watch: what the caller asked for, in one allocation
 * with its strings. */
struct rest_call {
  struct fr_kube_call base;
  struct fr_kube_client *c;
  struct rest_io *io;                 /* NULL until dispatched */
  struct rest_call *qprev, *qnext;    /* the client's queue, while CALL_QUEUED */
  fr_kube_response_cb cb;
  fr_kube_line_cb on_line;
  fr_kube_data_cb on_data;            /* fr_kube_request_opts: a 2xx body as it arrives */
  fr_kube_head_cb on_head;            /* and its head */
  void (*on_drain)(void *arg);        /* stream_body: written bytes mostly sent */
  struct fr_buf up;                   /* stream_body: bytes written, not yet read by curl */
  size_t up_off;                      /* of <up>, already read */
  int64_t body_size;                  /* stream_body: length or -1 */
  unsigned stream_body : 1, up_ended : 1;
  unsigned drain_armed : 1;           /* on_drain is due once <up> is low */
  void *arg;
  const char *url;                    /* server + path, in <strs> */
  const char *content_type, *request_id, *body;   /* in <strs>, or NULL */
  const char *header;                 /* one more request header line, in <strs>, or NULL */
  size_t body_len;
  uint64_t timeout_ms;                /* per attempt; 0 = the client's request_timeout_ms */
  uint64_t queued_ms;                 /* uv_now() when queued */
  enum call_state state;
  enum call_kind kind;
  int attempts;
  unsigned idempotent : 1;
  unsigned counted : 1;               /* in the client's nactive/npriority/nwatches */
  unsigned sensitive : 1;             /* FR_KUBE_SENSITIVE: bodies zeroed before they are freed */
  unsigned any_status : 1;            /* FR_KUBE_ANY_STATUS */
  char method[16];                    /* method_ok(): at most 15 letters */
  char strs[];                        /* url, content type, request id, body (NUL-ended) */
};

static void maybe_finalize(struct fr_kube_client *c);
static void call_uncount(struct rest_call *rc);
static void on_creds(struct fr_kube_client *c, int status, void *arg);
static void on_io_timer(uv_timer_t *t);

/* ------------------------------------------------------------ small helpers */

/* Header values must not smuggle a second header. */
static int header_safe(const char *s) {
  for (; s != NULL && *s != '\0'; s++)
    if (*s == '\r' || *s == '\n')
      return 0;
  return 1;
}

/* Trims trailing whitespace in place. */
static void rtrim(char *s) {
  size_t n = strlen(s);

  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
    s[--n] = '\0';
}

/* ------------------------------------------------------------ calls list */

void kube__call_track(struct fr_kube_client *c, struct fr_kube_call *call) {
  call->client = c;
  call->prev = NULL;
  call->next = c->calls;
  if (c->calls != NULL)
    c->calls->prev = call;
  c->calls = call;
}

/* Idempotent: an untracked call is left alone. */
void kube__call_untrack(struct fr_kube_call *call) {
  struct fr_kube_client *c = call->client;

  if (c == NULL)
    return;
  if (call->prev != NULL)
    call->prev->next = call->next;
  else if (c->calls == call)
    c->calls = call->next;
  else
    return;
  if (call->next != NULL)
    call->next->prev = call->prev;
  call->prev = call->next = NULL;
}

static void cancel_all(struct fr_kube_client *c) {
  struct fr_kube_call *call;

  while ((call = c->calls) != NULL) {
    kube__call_untrack(call);
    if (call->cancel != NULL)
      call->cancel(call);
  }
}

uv_loop_t *kube__loop(const struct fr_kube_client *c) {
  return c->loop;
}

const char *kube__name(const struct fr_kube_client *c) {
  return c->name;
}

const char *kube__server(const struct fr_kube_client *c) {
  return c->creds->server;
}

const struct fr_kube_client_opts *kube__opts(const struct fr_kube_client *c) {
  return &c->opts;
}

int kube__closing(const struct fr_kube_client *c) {
  return c->closing;
}

struct kube_creds *kube__creds(const struct fr_kube_client *c) {
  return c->cr;
}

/* ------------------------------------------------------------ easy setup */

/* A pooled connection idle this long is closed (curl checks the pool when
 * the next call starts: the health probe's every 2 s at the latest). A
 * burst opens up to max_host_connections TLS connections per cluster,
 * each ~60 KB with its own SSL_CTX (libcurl 7.88 builds one per
 * connection): 20 clusters x 64 of them held ~75 MiB after a mass
 * terminate until the process ended. Half a minute keeps them for a steady
 * load and for bursts close together. */
#define KUBE_IDLE_CONN_MAX_S 30L

/* CURLOPT_SSL_CTX_FUNCTION: an idle TLS connection lets go of its read
 * and write buffers (~34 KB) instead of keeping them for its next use. */
static CURLcode on_ssl_ctx(CURL *easy, void *ssl_ctx, void *arg) {
  (void)easy;
  (void)arg;
  SSL_CTX_set_mode((SSL_CTX *)ssl_ctx, SSL_MODE_RELEASE_BUFFERS);
  return CURLE_OK;
}

int kube__easy_setup(struct fr_kube_client *c, CURL *easy, struct curl_slist **headers,
                     const char *request_id) {
  const struct fr_kube_creds *cr = c->creds;
  struct curl_slist *h;
  struct fr_buf line;
  int rc;

  if (!header_safe(request_id))
    return -EINVAL;
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, (long)c->opts.connect_timeout_ms);
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, (long)c->opts.request_timeout_ms);
  curl_easy_setopt(easy, CURLOPT_USERAGENT, c->user_agent);
  /* Dead peers of idle pooled connections and of long watches. */
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPIDLE, 30L);
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPINTVL, 10L);
  curl_easy_setopt(easy, CURLOPT_MAXAGE_CONN, KUBE_IDLE_CONN_MAX_S);
  curl_easy_setopt(easy, CURLOPT_SSL_CTX_FUNCTION, on_ssl_ctx);
  if (cr->insecure) {
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 0L);
  } else {
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 2L);
    if (cr->ca_pem != NULL && cr->ca_len > 0) {
      /* COPY: a blob must outlive the transfer; ours are small. */
      struct curl_blob b = {.data = cr->ca_pem, .len = cr->ca_len, .flags = CURL_BLOB_COPY};
      if (curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, &b) != CURLE_OK)
        return -ENOMEM;
    }
  }
  /* tls-server-name is not supported: libcurl 7.88 cannot set the SNI and
   * verified name apart from the URL host (CURLOPT_CONNECT_TO with the URL
   * host rewritten would emulate it, at the cost of the Host header).
   * fr_kube_client_new() warns once when a kubeconfig sets it. */
  if (cr->proxy_url != NULL)
    curl_easy_setopt(easy, CURLOPT_PROXY, cr->proxy_url);
  /* The client certificate and the bearer token (kubecreds.c). */
  rc = kube__creds_apply(c->cr, easy, headers);
  if (rc != 0 || request_id == NULL || request_id[0] == '\0')
    return rc;
  fr_buf_init(&line);
  if (fr_buf_printf(&line, "X-Request-Id: %s", request_id) != 0 ||
      (h = curl_slist_append(*headers, line.data)) == NULL)
    rc = -ENOMEM;
  else
    *headers = h;
  fr_buf_free(&line);
  return rc;
}

/* ------------------------------------------------------------ REST calls */

static const char *state_name(enum call_state s) {
  switch (s) {
  case CALL_NEW: return "new";
  case CALL_QUEUED: return "queued";
  case CALL_WAIT_CREDS: return "wait_creds";
  case CALL_RUNNING: return "running";
  case CALL_BACKOFF: return "backoff";
  case CALL_DONE: return "done";
  case CALL_CANCELLED: return "cancelled";
  }
  return "?";
}

static const char *call_path(const struct rest_call *rc) {
  return rc->url + strlen(rc->c->creds->server);
}

/* A call's states: NEW, then QUEUED (bulk calls waiting for a slot) or
 * straight to WAIT_CREDS; RUNNING; BACKOFF and WAIT_CREDS again for a
 * retry. DONE (its callback) and CANCELLED are final: a call is answered
 * at most once and never after it was cancelled. */
static void set_state(struct rest_call *rc, enum call_state s) {
  FR_ASSERT(rc->state != CALL_DONE && rc->state != CALL_CANCELLED);
  FR_ASSERT(s != CALL_NEW);
  FR_DEBUG(LOGC, "%s: %s %s: %s -> %s (attempt %d)", rc->c->name, rc->method, call_path(rc),
           state_name(rc->state), state_name(s), rc->attempts);
  rc->state = s;
}

static void call_free(struct rest_call *rc) {
  if (rc->sensitive) {
    if (rc->io != NULL && rc->io->resp.data != NULL)
      explicit_bzero(rc->io->resp.data, rc->io->resp.cap);
    if (rc->body != NULL)
      explicit_bzero((char *)rc->body, rc->body_len);
  }
  if (rc->io != NULL) {
    fr_buf_free(&rc->io->resp);
    fr_buf_free(&rc->io->line);
    fr_buf_free(&rc->io->hdrs);
    free(rc->io);
  }
  fr_buf_free(&rc->up);
  free(rc);
}

static void on_call_closed(uv_handle_t *h) {
  struct rest_call *rc = h->data;
  struct fr_kube_client *c = rc->c;

  call_free(rc);
  c->nopen--;
  maybe_finalize(c);
}

/* The last step of every call. One never dispatched has no handle and goes
 * at once; a dispatched one once its timer has closed. Its easy handle must
 * be gone (or it is a zombie, released when reaped). */
static void call_release(struct rest_call *rc) {
  struct rest_io *io = rc->io;

  if (io == NULL) {
    call_free(rc);
    return;
  }
  if (io->zombie)
    return;
  if (io->waiting) {
    kube__creds_unwait(rc->c->cr, on_creds, rc);
    io->waiting = 0;
  }
  uv_close((uv_handle_t *)&io->timer, on_call_closed);
}

static void easy_free(struct rest_call *rc) {
  curl_easy_cleanup(rc->io->easy);
  curl_slist_free_all(rc->io->headers);
  rc->io->easy = NULL;
  rc->io->headers = NULL;
}

/* Takes the easy handle out of the multi, now or (inside a curl callback)
 * right after curl_multi_socket_action returns. */
static void detach_easy(struct rest_call *rc) {
  struct fr_kube_client *c = rc->c;
  struct rest_io *io = rc->io;

  if (io == NULL || io->easy == NULL || io->zombie)
    return;
  if (fr_curluv_in_curl(&c->curl) || fr_curluv_in_curl(&c->scurl)) {
    io->zombie = 1;
    io->zombie_next = c->zombies;
    c->zombies = rc;
    return;
  }
  curl_multi_remove_handle(io->cu->multi, io->easy);
  c->nin_curl--;
  easy_free(rc);
}

static void reap_zombies(struct fr_kube_client *c) {
  struct rest_call *rc;

  while ((rc = c->zombies) != NULL) {
    c->zombies = rc->io->zombie_next;
    curl_multi_remove_handle(rc->io->cu->multi, rc->io->easy);
    c->nin_curl--;
    easy_free(rc);
    rc->io->zombie = 0;
    call_uncount(rc);
    call_release(rc);
  }
}

/* ------------------------------------------------------------ the queue */

/* REST calls beyond max_active wait in a FIFO (oldest at the head) as bare
 * struct rest_call records. One timer per client moves it: at 0 when a slot
 * frees (dispatching on a later loop turn, so a cancel or a finish never
 * starts, or fails, another call from inside itself), else at the head's
 * queue_timeout_ms. Oldest first means the expired calls are at the head. */

static void on_queue_timer(uv_timer_t *t);

static void queue_arm(struct fr_kube_client *c) {
  uint64_t now, since;

  if (c->closing)
    return;
  if (c->qhead == NULL) {
    uv_timer_stop(&c->qtimer);
    return;
  }
  if (c->nactive < c->max_active) {
    uv_timer_start(&c->qtimer, on_queue_timer, 0, 0);
    return;
  }
  now = uv_now(c->loop);
  since = now - c->qhead->queued_ms;
  uv_timer_start(&c->qtimer, on_queue_timer,
                 since < c->opts.queue_timeout_ms ? c->opts.queue_timeout_ms - since : 0, 0);
}

static void queue_push(struct fr_kube_client *c, struct rest_call *rc) {
  rc->queued_ms = uv_now(c->loop);
  rc->qnext = NULL;
  rc->qprev = c->qtail;
  if (c->qtail != NULL)
    c->qtail->qnext = rc;
  else
    c->qhead = rc;
  c->qtail = rc;
  if (++c->nqueued > c->queued_peak)
    c->queued_peak = c->nqueued;
  set_state(rc, CALL_QUEUED);
  if (c->qhead == rc)
    queue_arm(c);   /* the head's deadline */
}

/* Takes <rc> off the queue; its state is the caller's to set. The timer may
 * stay armed for the old head: it finds nothing due and re-arms. */
static void queue_unlink(struct fr_kube_client *c, struct rest_call *rc) {
  if (rc->qprev != NULL)
    rc->qprev->qnext = rc->qnext;
  else
    c->qhead = rc->qnext;
  if (rc->qnext != NULL)
    rc->qnext->qprev = rc->qprev;
  else
    c->qtail = rc->qprev;
  rc->qprev = rc->qnext = NULL;
  c->nqueued--;
}

/* Counts a dispatched call in the client's load. */
static void call_count(struct rest_call *rc) {
  struct fr_kube_client *c = rc->c;

  switch (rc->kind) {
  case KIND_BULK:
    if (++c->nactive > c->active_peak)
      c->active_peak = c->nactive;
    break;
  case KIND_PRIORITY:
    c->npriority++;
    break;
  case KIND_WATCH:
    c->nwatches++;
    break;
  case KIND_STREAM:
    c->nstreams++;
    break;
  }
  rc->counted = 1;
}

/* Takes a finished or cancelled call out of the load (idempotent); a freed
 * slot lets the queue move on. A zombie keeps its slot until reaped: its
 * easy handle is still in the multi. */
static void call_uncount(struct rest_call *rc) {
  struct fr_kube_client *c = rc->c;

  if (!rc->counted || (rc->io != NULL && rc->io->zombie))
    return;
  rc->counted = 0;
  switch (rc->kind) {
  case KIND_BULK:
    c->nactive--;
    if (c->qhead != NULL)
      queue_arm(c);
    break;
  case KIND_PRIORITY:
    c->npriority--;
    break;
  case KIND_WATCH:
    c->nwatches--;
    break;
  case KIND_STREAM:
    c->nstreams--;
    break;
  }
}

void fr_kube_client_stats(const struct fr_kube_client *c, struct fr_kube_client_stats *out) {
  memset(out, 0, sizeof(*out));
  if (c == NULL)
    return;
  out->max_active = c->max_active;
  out->active = c->nactive;
  out->active_peak = c->active_peak;
  out->queued = c->nqueued;
  out->queued_peak = c->queued_peak;
  out->priority = c->npriority;
  out->watches = c->nwatches;
  out->streams = c->nstreams;
  out->in_curl = c->nin_curl;
  out->expired = c->nexpired;
}

/* ------------------------------------------------------------ running */

/* Delivers the result and releases the call. Never runs inside curl. */
static void finish(struct rest_call *rc, int status, const char *error) {
  struct fr_kube_client *c = rc->c;
  struct rest_io *io = rc->io;
  struct fr_kube_response resp;

  detach_easy(rc);
  call_uncount(rc);
  memset(&resp, 0, sizeof(resp));
  resp.status = status;
  resp.error = status == 0 ? (error != NULL ? error : "request failed") : NULL;
  resp.body = status != 0 && io != NULL && io->resp.data != NULL ? io->resp.data : "";
  resp.body_len = status != 0 && io != NULL ? io->resp.len : 0;
  resp.attempts = rc->attempts;
  resp.not_sent = status == 0 && (rc->attempts == 0 || (io != NULL && io->not_sent));
  resp.retry_after_s = io != NULL ? io->retry_after_s : 0;
  resp.elapsed_ms = io != NULL ? io->elapsed_ms : 0;
  resp.headers = status != 0 && io != NULL && io->hdrs.data != NULL ? io->hdrs.data : "";
  set_state(rc, CALL_DONE);
  kube__call_untrack(&rc->base);
  if (status == 0)
    FR_DEBUG(LOGC, "%s: %s %s failed: %s", c->name, rc->method, call_path(rc), resp.error);
  if (rc->kind != KIND_WATCH && c->observer != NULL)
    c->observer(c->observer_arg, rc->method, status, resp.elapsed_ms);
  rc->cb(&resp, rc->arg);
  call_release(rc);
}

/* All on the loop thread, so the share needs no lock callbacks. */
static struct kube_share *share_new(void) {
  struct kube_share *s = calloc(1, sizeof(*s));

  if (s == NULL || (s->sh = curl_share_init()) == NULL) {
    free(s);
    return NULL;
  }
  curl_share_setopt(s->sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  curl_share_setopt(s->sh, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  s->refs = 1;
  return s;
}

struct kube_share *kube__share_ref(struct fr_kube_client *c) {
  if (c->share != NULL)
    c->share->refs++;
  return c->share;
}

CURLSH *kube__share_handle(struct kube_share *s) {
  return s->sh;
}

void kube__share_unref(struct kube_share *s) {
  if (s == NULL || --s->refs > 0)
    return;
  curl_share_cleanup(s->sh);
  free(s);
}

void fr_kube_client_set_observer(struct fr_kube_client *c, fr_kube_observer_cb cb, void *arg) {
  c->observer = cb;
  c->observer_arg = arg;
}

/* The text lives on the stack: it is only needed during the callback, and
 * a buffer in every call would cost each queued one 1.5 KB. */
static void finish_error(struct rest_call *rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void finish_error(struct rest_call *rc, const char *fmt, ...) {
  char text[1536];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  finish(rc, 0, text);
}

static int start_attempt(struct rest_call *rc) {
  int r;

  rc->attempts++;
  set_state(rc, CALL_WAIT_CREDS);
  r = kube__creds_wait(rc->c->cr, on_creds, rc);
  if (r == 0)
    rc->io->waiting = 1;
  return r;
}

/* Gives <rc> what running needs (struct rest_io and its timer), counts it
 * in the client's load and starts its first attempt. 0, or a negative
 * error: the caller then fails or releases <rc>. */
static int dispatch(struct rest_call *rc) {
  struct fr_kube_client *c = rc->c;
  struct rest_io *io = calloc(1, sizeof(*io));

  if (io == NULL)
    return -ENOMEM;
  fr_buf_init(&io->resp);
  fr_buf_init(&io->line);
  fr_buf_init(&io->hdrs);
  io->cu = rc->kind == KIND_STREAM ? &c->scurl : &c->curl;
  uv_timer_init(c->loop, &io->timer);
  io->timer.data = rc;
  rc->io = io;
  c->nopen++;
  call_count(rc);
  return start_attempt(rc);
}

/* Dispatches into the free slots, after failing the calls queued longer
 * than queue_timeout_ms. Callbacks run here may cancel queued calls, queue
 * new ones or free the client: the head is read afresh every time. */
static void on_queue_timer(uv_timer_t *t) {
  struct fr_kube_client *c = fr_container_of(t, struct fr_kube_client, qtimer);
  uint64_t now = uv_now(c->loop);
  struct rest_call *rc;
  int r;

  while (!c->closing && (rc = c->qhead) != NULL &&
         now - rc->queued_ms >= c->opts.queue_timeout_ms) {
    queue_unlink(c, rc);
    c->nexpired++;
    finish_error(rc, "not sent: still queued after %" PRIu64 " ms behind %zu active calls to %s "
                     "(queue_timeout_ms)",
                 now - rc->queued_ms, c->nactive, c->name);
  }
  while (!c->closing && c->nactive < c->max_active && (rc = c->qhead) != NULL) {
    queue_unlink(c, rc);
    r = dispatch(rc);
    if (r < 0)
      finish_error(rc, "could not start the request: %s", strerror(-r));
  }
  queue_arm(c);
}

static size_t watch_feed(struct rest_call *rc, const char *ptr, size_t n) {
  struct rest_io *io = rc->io;
  size_t start = 0, end, len;
  char *data, *nl;

  if (fr_buf_append(&io->line, ptr, n) != 0) {
    io->abort_why = "out of memory buffering a watch event";
    return 0;
  }
  for (;;) {
    data = io->line.data;
    nl = memchr(data + io->scan_from, '\n', io->line.len - io->scan_from);
    if (nl == NULL) {
      io->scan_from = io->line.len;
      break;
    }
    end = (size_t)(nl - data);
    len = end - start;
    if (len > 0 && data[end - 1] == '\r')
      len--;
    if (len > KUBE_MAX_LINE) {
      io->abort_why = "watch event line longer than 16 MiB";
      return 0;
    }
    data[start + len] = '\0';   /* the line is NUL-terminated for the callback */
    if (len > 0)
      rc->on_line(data + start, len, rc->arg);
    if (rc->state != CALL_RUNNING)
      return 0;   /* cancelled, or the client freed, inside on_line */
    start = end + 1;
    io->scan_from = start;
  }
  fr_buf_consume(&io->line, start);
  io->scan_from -= start;
  if (io->line.len > KUBE_MAX_LINE) {
    io->abort_why = "watch event line longer than 16 MiB";
    return 0;
  }
  return n;
}

/* Is an answer of <code> handed on as it arrives (on_head, on_data), or
 * buffered for the callback? */
#define KUBE_MAX_STREAM_ERROR ((size_t)1 << 20)

static int status_streamed(const struct rest_call *rc, long code) {
  if (code >= 200 && code < 300)
    return 1;
  return rc->any_status && code >= 200 && code != 502 && code != 503 && code != 504;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *userdata) {
  struct rest_call *rc = userdata;
  struct rest_io *io = rc->io;
  size_t n = size * nmemb;

  if (rc->state != CALL_RUNNING)
    return 0;   /* cancelled: abort the transfer */
  if (io->code == 0)
    curl_easy_getinfo(io->easy, CURLINFO_RESPONSE_CODE, &io->code);
  if (rc->kind == KIND_WATCH && io->code >= 200 && io->code < 300)
    return watch_feed(rc, ptr, n);
  if (rc->on_data != NULL && status_streamed(rc, io->code)) {
    int r;

    if (rc->on_head != NULL && !io->head_sent) {
      io->head_sent = 1;   /* a head without an end line (HTTP/1.0 style): give it now */
      rc->on_head((int)io->code, io->hdrs.data != NULL ? io->hdrs.data : "", rc->arg);
      if (rc->state != CALL_RUNNING)
        return 0;
    }
    /* One fast stream (`yes` in a sandbox, a follower replaying a full
     * buffer) must not hold the loop: libcurl reads a socket that stays
     * readable without returning from curl_multi_socket_action(). Past
     * the loop turn's budget this piece waits (curl keeps it) and the
     * stream resumes from a later turn, after everything else ready. */
    if (rc->kind == KIND_STREAM && !fr_turn_take_bytes(rc->c->loop, n)) {
      io->paused_recv = 1;
      io->budget_wait = 1;
      io->resume_due = 1;
      uv_timer_start(&io->timer, on_io_timer, 1, 0);
      return CURL_WRITEFUNC_PAUSE;
    }
    r = rc->on_data(ptr, n, rc->arg);
    if (r == FR_KUBE_PAUSE && rc->kind == KIND_STREAM && rc->state == CALL_RUNNING) {
      /* curl keeps this piece and hands it over again on resume. */
      io->paused_recv = 1;
      return CURL_WRITEFUNC_PAUSE;
    }
    if (r != 0) {
      io->abort_why = "stopped by its reader";
      return 0;
    }
    return n;
  }
  if (io->resp.len + n > KUBE_MAX_BODY) {
    io->abort_why = "response body larger than 256 MiB";
    return 0;
  }
  /* A stream's answer that is not handed on (an error) is held whole:
   * 1 MiB of it is more than any error says. */
  if (rc->kind == KIND_STREAM && io->resp.len + n > KUBE_MAX_STREAM_ERROR) {
    io->abort_why = "error answer larger than 1 MiB";
    return 0;
  }
  if (fr_buf_append(&io->resp, ptr, n) != 0) {
    io->abort_why = "out of memory buffering the response";
    return 0;
  }
  return n;
}

/* KIND_STREAM: collects the response's header lines; at the blank line
 * that ends a final 2xx head, hands them to on_head. */
static size_t on_header(char *ptr, size_t size, size_t nmemb, void *userdata) {
  struct rest_call *rc = userdata;
  struct rest_io *io = rc->io;
  size_t n = size * nmemb;

  if (rc->state != CALL_RUNNING)
    return 0;
  if (n >= 5 && memcmp(ptr, "HTTP/", 5) == 0) {
    fr_buf_reset(&io->hdrs);   /* a new head (after a 1xx) */
    return n;
  }
  if (n <= 2 && (n == 0 || ptr[0] == '\r' || ptr[0] == '\n')) {
    long code = 0;

    curl_easy_getinfo(io->easy, CURLINFO_RESPONSE_CODE, &code);
    if (status_streamed(rc, code) && rc->on_head != NULL && !io->head_sent) {
      io->head_sent = 1;
      rc->on_head((int)code, io->hdrs.data != NULL ? io->hdrs.data : "", rc->arg);
      if (rc->state != CALL_RUNNING)
        return 0;
    }
    return n;
  }
  if (io->hdrs.len + n > KUBE_MAX_HEAD) {
    io->abort_why = "response head larger than 64 KiB";
    return 0;
  }
  if (fr_buf_append(&io->hdrs, ptr, n) != 0) {
    io->abort_why = "out of memory reading the response head";
    return 0;
  }
  return n;
}

/* Below this many unsent body bytes a writer waiting for on_drain is told
 * to write more. */
#define KUBE_DRAIN_LOW ((size_t)256 << 10)

/* stream_body: curl asks for the next piece of the body. */
static size_t on_read(char *buf, size_t size, size_t nitems, void *userdata) {
  struct rest_call *rc = userdata;
  struct rest_io *io = rc->io;
  size_t want = size * nitems, have, n;

  if (rc->state != CALL_RUNNING)
    return CURL_READFUNC_ABORT;
  have = rc->up.len - rc->up_off;
  if (have == 0) {
    if (rc->up_ended)
      return 0;
    io->paused_send = 1;
    return CURL_READFUNC_PAUSE;
  }
  n = have < want ? have : want;
  memcpy(buf, rc->up.data + rc->up_off, n);
  rc->up_off += n;
  if (rc->up_off == rc->up.len) {
    fr_buf_reset(&rc->up);
    rc->up_off = 0;
  } else if (rc->up_off >= ((size_t)1 << 20)) {
    fr_buf_consume(&rc->up, rc->up_off);
    rc->up_off = 0;
  }
  if (rc->drain_armed && rc->up.len - rc->up_off <= KUBE_DRAIN_LOW) {
    rc->drain_armed = 0;
    io->drain_due = 1;
    uv_timer_start(&io->timer, on_io_timer, 0, 0);
  }
  return n;
}

/* The pause state curl should have now. */
static void apply_pause(struct rest_call *rc) {
  struct rest_io *io = rc->io;

  curl_easy_pause(io->easy, (io->paused_recv ? CURLPAUSE_RECV : 0) | (io->paused_send ? CURLPAUSE_SEND : 0));
}

/* KIND_STREAM work kept out of curl's callbacks: a due on_drain, a resume
 * or body bytes asked for from inside one. A call's timer is free for this
 * while it runs (streams are never retried, so never back off). */
static void on_io_timer(uv_timer_t *t) {
  struct rest_call *rc = t->data;
  struct rest_io *io = rc->io;

  if (rc->state != CALL_RUNNING || io->easy == NULL)
    return;
  if (io->resume_due) {
    io->resume_due = 0;
    if (io->budget_wait) {
      /* paused for the loop's sake, not its reader's */
      io->budget_wait = 0;
      io->paused_recv = 0;
    }
    apply_pause(rc);
    if (rc->state != CALL_RUNNING || rc->io->easy == NULL)
      return;
  }
  if (io->drain_due) {
    io->drain_due = 0;
    if (rc->on_drain != NULL)
      rc->on_drain(rc->arg);
  }
}

static int attempt_begin(struct rest_call *rc) {
  struct fr_kube_client *c = rc->c;
  struct rest_io *io = rc->io;
  struct curl_slist *headers = NULL, *h;
  struct fr_buf ct;
  CURL *easy;
  int r;

  easy = curl_easy_init();
  if (easy == NULL)
    return -ENOMEM;
  r = kube__easy_setup(c, easy, &headers, rc->request_id);
  if (r < 0)
    goto fail;
  r = -ENOMEM;
  if ((h = curl_slist_append(headers, "Accept: application/json")) == NULL)
    goto fail;
  headers = h;
  /* curl would wait up to a second for "100 Continue" on larger bodies. */
  if ((h = curl_slist_append(headers, "Expect:")) == NULL)
    goto fail;
  headers = h;
  if (rc->header != NULL) {
    const char *line = rc->header, *nl;
    char one[1024];

    for (; *line != '\0'; line = *nl ? nl + 1 : nl) {
      nl = line + strcspn(line, "\n");
      if (nl == line)
        continue;
      if ((size_t)(nl - line) >= sizeof(one))
        goto fail;
      memcpy(one, line, (size_t)(nl - line));
      one[nl - line] = '\0';
      if ((h = curl_slist_append(headers, one)) == NULL)
        goto fail;
      headers = h;
    }
  }
  if (rc->stream_body && rc->body_size < 0) {
    if ((h = curl_slist_append(headers, "Transfer-Encoding: chunked")) == NULL)
      goto fail;
    headers = h;
  }
  if (rc->content_type != NULL) {
    fr_buf_init(&ct);
    if (fr_buf_printf(&ct, "Content-Type: %s", rc->content_type) != 0) {
      fr_buf_free(&ct);
      goto fail;
    }
    h = curl_slist_append(headers, ct.data);
    fr_buf_free(&ct);
    if (h == NULL)
      goto fail;
    headers = h;
  }
  curl_easy_setopt(easy, CURLOPT_URL, rc->url);
  /* path_ok() checked it; curl must not rewrite it (dot segments). */
  curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
  curl_easy_setopt(easy, CURLOPT_PRIVATE, rc);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, io->errbuf);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, rc);
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  if (rc->kind == KIND_STREAM) {
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, rc);
    if (rc->c->share != NULL)
      curl_easy_setopt(easy, CURLOPT_SHARE, kube__share_handle(rc->c->share));
  }
  if (rc->stream_body) {
    curl_easy_setopt(easy, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, rc->method);
    curl_easy_setopt(easy, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(easy, CURLOPT_READDATA, rc);
    curl_easy_setopt(easy, CURLOPT_INFILESIZE_LARGE, (curl_off_t)rc->body_size);
  } else if (strcmp(rc->method, "GET") == 0) {
    curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
  } else if (strcmp(rc->method, "HEAD") == 0) {
    curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
  } else {
    if (strcmp(rc->method, "POST") != 0)
      curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, rc->method);
    if (rc->body != NULL || strcmp(rc->method, "POST") == 0) {
      curl_easy_setopt(easy, CURLOPT_POSTFIELDS, rc->body != NULL ? rc->body : "");
      curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rc->body_len);
    }
  }
  /* A watch has no overall timeout (the server ends it after
   * timeoutSeconds) and no low-speed limit either: without bookmarks a
   * quiet watch is legitimately silent for minutes. TCP keepalive (set in
   * kube_easy_setup) notices a dead peer. */
  if (rc->kind == KIND_WATCH || (rc->kind == KIND_STREAM && rc->timeout_ms == 0))
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, 0L);
  else if (rc->timeout_ms > 0)
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, (long)rc->timeout_ms);

  fr_buf_reset(&io->resp);
  fr_buf_reset(&io->line);
  io->scan_from = 0;
  io->code = 0;
  io->abort_why = NULL;
  io->errbuf[0] = '\0';
  fr_buf_reset(&io->hdrs);
  io->head_sent = io->paused_recv = io->paused_send = 0;
  io->easy = easy;
  io->headers = headers;
  set_state(rc, CALL_RUNNING);
  /* request_timeout_ms counts from here: time spent queued is not part of
   * the attempt. */
  if (curl_multi_add_handle(io->cu->multi, easy) != CURLM_OK) {
    io->easy = NULL;
    io->headers = NULL;
    r = -ENOMEM;
    goto fail;
  }
  c->nin_curl++;
  return 0;

fail:
  curl_slist_free_all(headers);
  curl_easy_cleanup(easy);
  return r;
}

static void on_creds(struct fr_kube_client *c, int status, void *arg) {
  struct rest_call *rc = arg;
  int r;

  rc->io->waiting = 0;
  if (rc->state != CALL_WAIT_CREDS)
    return;
  if (status < 0) {
    finish_error(rc, "credentials: %s", kube__creds_error(c->cr));
    return;
  }
  rc->io->gen = kube__creds_gen(c->cr);
  r = attempt_begin(rc);
  if (r < 0)
    finish_error(rc, "could not start the request: %s", strerror(-r));
}

static void on_backoff(uv_timer_t *t) {
  struct rest_call *rc = t->data;
  int r;

  if (rc->state != CALL_BACKOFF)
    return;
  r = start_attempt(rc);
  if (r < 0)
    finish_error(rc, "could not retry: %s", strerror(-r));
}

/* Full jitter (AWS architecture blog, "Exponential Backoff And Jitter"):
 * a uniform delay in [0, min(cap, base * 2^n)], so retrying clients spread
 * out instead of arriving in waves. */
static uint64_t backoff_ms(const struct fr_kube_client *c, int n) {
  uint64_t top = c->opts.backoff_base_ms, r;

  while (n-- > 0 && top < c->opts.backoff_cap_ms)
    top *= 2;
  if (top > c->opts.backoff_cap_ms)
    top = c->opts.backoff_cap_ms;
  if (fr_random_bytes(&r, sizeof(r)) != 0)
    return top / 2;
  return r % (top + 1);
}

static int transport_retryable(CURLcode rc) {
  switch (rc) {
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY:
  case CURLE_COULDNT_CONNECT:
  case CURLE_OPERATION_TIMEDOUT:
  case CURLE_SEND_ERROR:
  case CURLE_RECV_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_PARTIAL_FILE:
  case CURLE_SSL_CONNECT_ERROR:   /* also a reset during the handshake */
    return 1;
  default:
    return 0;
  }
}

/* A transfer that failed with <rc> never had a connection to send on:
 * no name, no TCP connection, no TLS session (a handshake that failed, a
 * server certificate refused). Not one byte of the request left this
 * process. */
static int transport_not_sent(CURLcode rc) {
  return rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_RESOLVE_PROXY || rc == CURLE_COULDNT_CONNECT ||
         rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_PEER_FAILED_VERIFICATION;
}

/* The call keeps its slot while it backs off: a retry never queues again
 * behind calls that came after it. */
static void schedule_retry(struct rest_call *rc, const char *why) {
  struct fr_kube_client *c = rc->c;
  struct rest_io *io = rc->io;
  uint64_t delay;

  if (io->retry_after_s > 0) {
    delay = (uint64_t)io->retry_after_s * 1000;
    if (delay > c->opts.backoff_cap_ms)
      delay = c->opts.backoff_cap_ms;
  } else {
    delay = backoff_ms(c, io->retries);
  }
  io->retries++;
  FR_DEBUG(LOGC, "%s: %s %s: %s, retry %d/%d in %" PRIu64 " ms", c->name, rc->method,
           call_path(rc), why, io->retries, c->opts.max_retries, delay);
  set_state(rc, CALL_BACKOFF);
  uv_timer_start(&io->timer, on_backoff, delay, 0);
}

/* A transfer finished (from the drain loop, outside curl callbacks). */
static void on_transfer_done(struct rest_call *rc, CURLcode result) {
  struct fr_kube_client *c = rc->c;
  struct rest_io *io = rc->io;
  char text[CURL_ERROR_SIZE + 64];
  long code = 0;
  curl_off_t ra = 0, total_us = 0;
  int can_retry, r;

  curl_easy_getinfo(io->easy, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_getinfo(io->easy, CURLINFO_RETRY_AFTER, &ra);
  curl_easy_getinfo(io->easy, CURLINFO_TOTAL_TIME_T, &total_us);
  io->retry_after_s = ra > 0 ? (ra > 86400 ? 86400 : (int)ra) : 0;
  io->elapsed_ms = (double)total_us / 1000.0;
  detach_easy(rc);
  if (rc->state != CALL_RUNNING)
    return;
  can_retry = rc->kind != KIND_WATCH && rc->idempotent && io->retries < c->opts.max_retries;

  if (io->abort_why != NULL) {
    finish_error(rc, "%s", io->abort_why);
    return;
  }
  if (result != CURLE_OK) {
    /* curl's error buffer is the more precise text ("Failed to connect to
     * 127.0.0.1 port 6443 after 0 ms: Connection refused"). */
    snprintf(text, sizeof(text), "%s", io->errbuf[0] ? io->errbuf : curl_easy_strerror(result));
    rtrim(text);
    io->not_sent = transport_not_sent(result);
    if (can_retry && transport_retryable(result)) {
      io->retry_after_s = 0;
      schedule_retry(rc, text);
      return;
    }
    finish(rc, 0, text);
    return;
  }
  /* A 401 is decided before the body is processed, so even a
   * non-idempotent call may be sent again once, with fresh credentials. */
  if (code == 401 && kube__creds_refreshable(c->cr) && !io->refreshed && !rc->stream_body) {
    io->refreshed = 1;
    if (io->gen == kube__creds_gen(c->cr))
      kube__creds_invalidate(c->cr);
    FR_DEBUG(LOGC, "%s: %s %s: 401, refreshing credentials", c->name, rc->method, call_path(rc));
    r = start_attempt(rc);
    if (r < 0)
      finish_error(rc, "could not retry: %s", strerror(-r));
    return;
  }
  if (can_retry && (code == 429 || (code >= 500 && code <= 599))) {
    char why[32];

    snprintf(why, sizeof(why), "HTTP %ld", code);
    schedule_retry(rc, why);
    return;
  }
  if (rc->kind == KIND_WATCH && code >= 200 && code < 300 && io->line.len > 0) {
    /* The stream ended without a newline after the last event. */
    io->line.data[io->line.len] = '\0';
    rc->on_line(io->line.data, io->line.len, rc->arg);
    if (rc->state != CALL_RUNNING)
      return;
    fr_buf_reset(&io->line);
  }
  finish(rc, (int)code, NULL);
}

/* fr_curluv's done_cb: a finished transfer of one of our calls. A user
 * callback may free the client here; fr_curluv stops the drain then. */
static void on_curl_done(struct fr_curluv *cu, CURL *easy, CURLcode result) {
  void *p = NULL;

  curl_easy_getinfo(easy, CURLINFO_PRIVATE, &p);
  if (p != NULL)
    on_transfer_done(p, result);
}

/* fr_curluv's after_cb: right after curl_multi_socket_action, where the
 * easy handles of calls cancelled inside curl's callbacks may go. */
static void on_curl_action(struct fr_curluv *cu) {
  reap_zombies(fr_container_of(cu, struct fr_kube_client, curl));
}

static void on_scurl_action(struct fr_curluv *cu) {
  reap_zombies(fr_container_of(cu, struct fr_kube_client, scurl));
}

static void rest_cancel(struct fr_kube_call *base) {
  struct rest_call *rc = fr_container_of(base, struct rest_call, base);

  if (rc->state == CALL_DONE || rc->state == CALL_CANCELLED)
    return;
  if (rc->state == CALL_QUEUED)
    queue_unlink(rc->c, rc);
  set_state(rc, CALL_CANCELLED);
  kube__call_untrack(base);
  if (rc->io != NULL) {
    if (rc->io->waiting) {
      kube__creds_unwait(rc->c->cr, on_creds, rc);
      rc->io->waiting = 0;
    }
    uv_timer_stop(&rc->io->timer);
  }
  detach_easy(rc);
  call_uncount(rc);
  call_release(rc);
}

static int method_ok(const char *m) {
  size_t i;

  for (i = 0; m[i] != '\0'; i++)
    if (m[i] < 'A' || m[i] > 'Z')
      return 0;
  return i > 0 && i < 16;
}

/* The last gate before a path leaves for the API server: whatever built
 * it, nothing that a server's normalization could move outside the
 * resource it names (fr/urlsafe.h) is sent, and curl sends it as it is
 * (CURLOPT_PATH_AS_IS). */
static int path_ok(const char *p) {
  const char *q = strchr(p, '?');
  size_t plen = q != NULL ? (size_t)(q - p) : strlen(p);

  return fr_url_path_check(p, plen, NULL) == 0 && (q == NULL || fr_url_query_check(q + 1, strlen(q + 1), NULL) == 0);
}

/* Copies <len> bytes of <s> to *<p> with a NUL after them and moves *<p>
 * past it; returns where they went. */
static const char *put_str(char **p, const void *s, size_t len) {
  char *at = *p;

  memcpy(at, s, len);
  at[len] = '\0';
  *p += len + 1;
  return at;
}

/* Header lines "Name: value" a caller may add, '\n'-separated: each a
 * token-like name, a colon, nothing that could end the line. */
static int header_line_ok(const char *h) {
  size_t len, name;

  for (; h != NULL && *h != '\0'; h += len + (h[len] == '\n')) {
    len = strcspn(h, "\n");
    if (len == 0)
      continue;
    name = strcspn(h, " \t:\r\n");
    if (name == 0 || name >= len || h[name] != ':' || memchr(h, '\r', len) != NULL || len >= 1024)
      return 0;
  }
  return 1;
}

static int call_start(struct fr_kube_client *c, enum call_kind kind, const char *method,
                      const char *path, const char *content_type, const void *body, size_t len,
                      int idempotent, const char *request_id, const char *header, uint64_t timeout_ms,
                      fr_kube_line_cb on_line, fr_kube_response_cb cb, void *arg,
                      struct fr_kube_call **out) {
  struct rest_call *rc;
  size_t server_len, path_len, ct_len, id_len, h_len, size;
  char *p;
  int r;

  if (out != NULL)
    *out = NULL;
  if (c == NULL || method == NULL || path == NULL || cb == NULL ||
      (kind == KIND_WATCH && on_line == NULL) || (body == NULL && len > 0) || !method_ok(method) ||
      !path_ok(path) || !header_safe(request_id) || !header_safe(content_type) || !header_line_ok(header))
    return -EINVAL;
  if (c->closing)
    return -ECANCELED;
  /* One allocation: the record, then its URL, content type, request id,
   * extra header and body, each NUL-terminated. */
  server_len = strlen(c->creds->server);
  path_len = strlen(path);
  ct_len = content_type != NULL ? strlen(content_type) : 0;
  id_len = request_id != NULL ? strlen(request_id) : 0;
  h_len = header != NULL ? strlen(header) : 0;
  size = sizeof(*rc) + server_len + path_len + 1 + ct_len + 1 + id_len + 1 + h_len + 1;
  if (body != NULL && len > SIZE_MAX - size - 1)
    return -ENOMEM;
  size += body != NULL ? len + 1 : 0;
  rc = calloc(1, size);
  if (rc == NULL)
    return -ENOMEM;
  p = rc->strs;
  rc->url = p;
  memcpy(p, c->creds->server, server_len);
  p += server_len;
  put_str(&p, path, path_len);
  if (content_type != NULL)
    rc->content_type = put_str(&p, content_type, ct_len);
  if (request_id != NULL)
    rc->request_id = put_str(&p, request_id, id_len);
  if (header != NULL)
    rc->header = put_str(&p, header, h_len);
  rc->timeout_ms = timeout_ms;
  if (body != NULL) {
    rc->body = put_str(&p, body, len);
    rc->body_len = len;
  }
  memcpy(rc->method, method, strlen(method) + 1);
  rc->c = c;
  rc->kind = kind;
  rc->idempotent = idempotent != 0;
  rc->cb = cb;
  rc->on_line = on_line;
  rc->arg = arg;
  rc->base.cancel = rest_cancel;
  kube__call_track(c, &rc->base);
  /* First come, first served: behind the queue even when a slot is free
   * (it is about to be taken from the queue). */
  if (kind == KIND_STREAM && c->nstreams >= (size_t)c->opts.max_streams) {
    rc->state = CALL_CANCELLED;
    kube__call_untrack(&rc->base);
    call_release(rc);
    return -EAGAIN;
  }
  if (kind == KIND_BULK && (c->qhead != NULL || c->nactive >= c->max_active)) {
    queue_push(c, rc);
  } else {
    r = dispatch(rc);
    if (r < 0) {
      rc->state = CALL_CANCELLED;
      kube__call_untrack(&rc->base);
      call_uncount(rc);
      call_release(rc);
      return r;
    }
  }
  if (out != NULL)
    *out = &rc->base;
  return 0;
}

int fr_kube_request(struct fr_kube_client *c, const char *method, const char *path,
                    const char *content_type, const void *body, size_t len, int flags,
                    const char *request_id, fr_kube_response_cb cb, void *arg,
                    struct fr_kube_call **out) {
  if (out != NULL)
    *out = NULL;
  if ((flags & ~(FR_KUBE_IDEMPOTENT | FR_KUBE_PRIORITY)) != 0)
    return -EINVAL;
  return call_start(c, (flags & FR_KUBE_PRIORITY) ? KIND_PRIORITY : KIND_BULK, method, path,
                    content_type, body, len, flags & FR_KUBE_IDEMPOTENT, request_id, NULL, 0, NULL,
                    cb, arg, out);
}

int fr_kube_request_opts(struct fr_kube_client *c, const char *method, const char *path,
                         const char *content_type, const void *body, size_t len,
                         const struct fr_kube_request_opts *o, fr_kube_response_cb cb, void *arg,
                         struct fr_kube_call **out) {
  if (out != NULL)
    *out = NULL;
  struct rest_call *rc;
  int r;

  int stream = o != NULL && (o->flags & FR_KUBE_STREAM);

  /* A body handed out as it arrives cannot be taken back for a retry; a
   * streamed request body cannot be sent twice. */
  if (o == NULL ||
      (o->flags & ~(FR_KUBE_IDEMPOTENT | FR_KUBE_PRIORITY | FR_KUBE_STREAM | FR_KUBE_SENSITIVE | FR_KUBE_ANY_STATUS)) !=
          0 ||
      (o->on_data != NULL && (o->flags & FR_KUBE_IDEMPOTENT)) ||
      (stream && (o->flags & (FR_KUBE_IDEMPOTENT | FR_KUBE_PRIORITY))) ||
      (o->stream_body && (!stream || body != NULL || o->body_size < -1)) ||
      (o->on_head != NULL && o->on_data == NULL))
    return -EINVAL;
  r = call_start(c, stream ? KIND_STREAM : (o->flags & FR_KUBE_PRIORITY) ? KIND_PRIORITY : KIND_BULK,
                 method, path, content_type, body, len, o->flags & FR_KUBE_IDEMPOTENT, o->request_id,
                 o->header, o->timeout_ms, NULL, cb, arg, (struct fr_kube_call **)&rc);
  /* Set before the loop runs again: nothing is sent from inside call_start. */
  if (r == 0) {
    rc->sensitive = (o->flags & FR_KUBE_SENSITIVE) != 0;
    rc->any_status = stream && (o->flags & FR_KUBE_ANY_STATUS) != 0;
    rc->on_data = o->on_data;
    rc->on_head = o->on_head;
    rc->on_drain = o->on_drain;
    rc->stream_body = o->stream_body != 0;
    rc->body_size = o->body_size;
  }
  if (r == 0 && out != NULL)
    *out = &rc->base;
  return r;
}

int fr_kube_watch(struct fr_kube_client *c, const char *path, fr_kube_line_cb on_line,
                  fr_kube_response_cb on_done, void *arg, struct fr_kube_call **out) {
  return call_start(c, KIND_WATCH, "GET", path, NULL, NULL, 0, 1, NULL, NULL, 0, on_line, on_done,
                    arg, out);
}

void fr_kube_cancel(struct fr_kube_call *call) {
  if (call != NULL && call->cancel != NULL)
    call->cancel(call);
}

/* The REST call behind <call> when it is a FR_KUBE_STREAM one. */
static struct rest_call *stream_call(const struct fr_kube_call *call) {
  struct rest_call *rc;

  if (call == NULL || call->cancel != rest_cancel)
    return NULL;
  rc = fr_container_of(call, struct rest_call, base);
  return rc->kind == KIND_STREAM ? rc : NULL;
}

/* Body bytes arrived for a send side that ran dry: unpause it, now or
 * (inside curl's callbacks) on the next loop turn. */
static void wake_send(struct rest_call *rc) {
  struct rest_io *io = rc->io;

  if (rc->state != CALL_RUNNING || io == NULL || io->easy == NULL || !io->paused_send)
    return;
  io->paused_send = 0;
  if (fr_curluv_in_curl(io->cu)) {
    io->resume_due = 1;
    uv_timer_start(&io->timer, on_io_timer, 0, 0);
  } else {
    apply_pause(rc);
  }
}

int fr_kube_call_write(struct fr_kube_call *call, const void *data, size_t len) {
  struct rest_call *rc = stream_call(call);

  if (rc == NULL || !rc->stream_body)
    return -EINVAL;
  if (rc->up_ended || rc->state == CALL_DONE || rc->state == CALL_CANCELLED)
    return -EPIPE;
  if (len == 0)
    return 0;
  if (fr_buf_append(&rc->up, data, len) != 0)
    return -ENOMEM;
  if (rc->up.len - rc->up_off > KUBE_DRAIN_LOW)
    rc->drain_armed = 1;
  wake_send(rc);
  return 0;
}

int fr_kube_call_end(struct fr_kube_call *call) {
  struct rest_call *rc = stream_call(call);

  if (rc == NULL || !rc->stream_body)
    return -EINVAL;
  if (rc->up_ended || rc->state == CALL_DONE || rc->state == CALL_CANCELLED)
    return -EPIPE;
  rc->up_ended = 1;
  wake_send(rc);
  return 0;
}

size_t fr_kube_call_pending(const struct fr_kube_call *call) {
  const struct rest_call *rc = stream_call(call);

  return rc != NULL ? rc->up.len - rc->up_off : 0;
}

void fr_kube_call_resume(struct fr_kube_call *call) {
  struct rest_call *rc = stream_call(call);
  struct rest_io *io;

  if (rc == NULL || rc->state != CALL_RUNNING || (io = rc->io) == NULL || io->easy == NULL ||
      !io->paused_recv)
    return;
  io->paused_recv = 0;
  /* curl hands the kept piece over from inside curl_easy_pause(): never
   * from inside this call's own callbacks. */
  io->resume_due = 1;
  uv_timer_start(&io->timer, on_io_timer, 0, 0);
}


/* ------------------------------------------------------------ client */

static void on_curl_closed(struct fr_curluv *cu) {
  struct fr_kube_client *c = fr_container_of(cu, struct fr_kube_client, curl);

  c->nopen--;
  maybe_finalize(c);
}

static void on_scurl_closed(struct fr_curluv *cu) {
  struct fr_kube_client *c = fr_container_of(cu, struct fr_kube_client, scurl);

  c->nopen--;
  maybe_finalize(c);
}

/* The credentials close after the client asked fr_curluv to close its
 * handles: their waits still queued (kube_exec.c keeps its memory until its
 * wait answers) get -ECANCELED first, a loop turn after
 * fr_kube_client_free() and while the client is still allocated. */
static void on_creds_closed(void *arg) {
  struct fr_kube_client *c = arg;

  c->nopen--;
  maybe_finalize(c);
}

static void on_qtimer_closed(uv_handle_t *h) {
  struct fr_kube_client *c = h->data;

  c->nopen--;
  maybe_finalize(c);
}

static void client_destroy(struct fr_kube_client *c) {
  kube__creds_free(c->cr);
  fr_kube_creds_free(c->creds);
  free(c->name);
  free(c->user_agent);
  kube__share_unref(c->share);
  free(c);
  curl_global_cleanup();
}

static void maybe_finalize(struct fr_kube_client *c) {
  void (*cb)(void *);
  void *arg;

  if (!c->closing || c->nopen > 0 || c->finalized)
    return;
  c->finalized = 1;
  cb = c->free_cb;
  arg = c->free_arg;
  FR_DEBUG(LOGC, "%s: client closed", c->name);
  client_destroy(c);
  if (cb != NULL)
    cb(arg);
}

/* May run inside curl's write callback (a watch's on_line freeing the
 * client) or the drain of finished transfers: what is forbidden there waits
 * for the end of curl_multi_socket_action (zombies, reaped by
 * on_curl_action) and of the drain (fr_curluv_close cleans up the multi). */
static void teardown(struct fr_kube_client *c) {
  cancel_all(c);   /* queued calls too: they are tracked like the others */
  if (!fr_curluv_in_curl(&c->curl) && !fr_curluv_in_curl(&c->scurl))
    reap_zombies(c);
  fr_curluv_close(&c->curl, on_curl_closed);
  fr_curluv_close(&c->scurl, on_scurl_closed);
  uv_close((uv_handle_t *)&c->qtimer, on_qtimer_closed);
  kube__creds_close(c->cr, on_creds_closed, c);
  maybe_finalize(c);
}

void fr_kube_client_free(struct fr_kube_client *c, void (*cb)(void *arg), void *arg) {
  if (c == NULL || c->closing)
    return;
  FR_DEBUG(LOGC, "%s: freeing client", c->name);
  c->closing = 1;
  c->free_cb = cb;
  c->free_arg = arg;
  teardown(c);
}

int fr_kube_client_new(uv_loop_t *loop, const struct fr_kube_creds *creds,
                       const struct fr_kube_client_opts *opts, struct fr_kube_client **out) {
  struct fr_kube_client *c;
  struct fr_buf ua;
  const char *name;
  int r;

  if (out != NULL)
    *out = NULL;
  if (loop == NULL || creds == NULL || out == NULL || creds->server == NULL ||
      (strncmp(creds->server, "https://", 8) != 0 && strncmp(creds->server, "http://", 7) != 0))
    return -EINVAL;
  if (creds->exec != NULL && (creds->exec->command == NULL || creds->exec->command[0] == '\0'))
    return -EINVAL;
  c = calloc(1, sizeof(*c));
  if (c == NULL)
    return -ENOMEM;
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    free(c);
    return -EIO;
  }
  c->loop = loop;
  if (opts != NULL)
    c->opts = *opts;
  /* Zero means "the default"; a negative max_retries means none. */
  if (c->opts.max_retries == 0)
    c->opts.max_retries = 4;
  if (c->opts.max_retries < 0)
    c->opts.max_retries = 0;
  if (c->opts.backoff_base_ms == 0)
    c->opts.backoff_base_ms = 100;
  if (c->opts.backoff_cap_ms == 0)
    c->opts.backoff_cap_ms = 5000;
  if (c->opts.backoff_cap_ms < c->opts.backoff_base_ms)
    c->opts.backoff_cap_ms = c->opts.backoff_base_ms;
  if (c->opts.connect_timeout_ms == 0)
    c->opts.connect_timeout_ms = 3000;
  if (c->opts.request_timeout_ms == 0)
    c->opts.request_timeout_ms = 30000;
  if (c->opts.max_host_connections <= 0)
    c->opts.max_host_connections = 64;
  if (c->opts.max_active <= 0)
    c->opts.max_active = c->opts.max_host_connections > LONG_MAX / KUBE_ACTIVE_PER_CONNECTION
                             ? LONG_MAX
                             : c->opts.max_host_connections * KUBE_ACTIVE_PER_CONNECTION;
  c->max_active = (size_t)c->opts.max_active;
  if (c->opts.queue_timeout_ms == 0)
    c->opts.queue_timeout_ms = KUBE_QUEUE_TIMEOUT_MS;
  if (c->opts.max_stream_connections <= 0)
    c->opts.max_stream_connections = 1024;
  if (c->opts.max_streams <= 0)
    c->opts.max_streams = 8192;
  if (c->opts.token_reread_ms == 0)
    c->opts.token_reread_ms = 60000;
  name = c->opts.name != NULL ? c->opts.name : creds->context != NULL ? creds->context : "kube";
  c->name = strdup(name);
  fr_buf_init(&ua);
  if (c->opts.user_agent != NULL)
    c->user_agent = strdup(c->opts.user_agent);
  else if (fr_buf_puts(&ua, "fedrouter/" FR_VERSION) == 0)
    c->user_agent = fr_buf_detach(&ua, NULL);
  fr_buf_free(&ua);
  c->opts.name = c->name;
  c->opts.user_agent = c->user_agent;
  c->creds = fr_kube_creds_dup(creds);
  r = -ENOMEM;
  if (c->name == NULL || c->user_agent == NULL || c->creds == NULL)
    goto fail;
  r = kube__creds_new(c->creds, c->name, c->opts.token_reread_ms, &c->cr);
  if (r != 0)
    goto fail;
  /* The last step that can fail: from here on the client has handles. */
  r = fr_curluv_init(loop, &c->curl, on_curl_done, on_curl_action);
  if (r != 0)
    goto fail;
  r = fr_curluv_init(loop, &c->scurl, on_curl_done, on_scurl_action);
  if (r != 0) {
    /* The first multi has handles now: close it like a teardown would. */
    c->closing = 1;
    c->nopen = 1;
    fr_curluv_close(&c->curl, on_curl_closed);
    return r;
  }
  /* Without a share execs still work, each with a full handshake. */
  c->share = share_new();
  curl_multi_setopt(c->curl.multi, CURLMOPT_MAX_HOST_CONNECTIONS, c->opts.max_host_connections);
  /* Keep as many idle connections as we may open, for reuse. */
  curl_multi_setopt(c->curl.multi, CURLMOPT_MAXCONNECTS, c->opts.max_host_connections);
  curl_multi_setopt(c->scurl.multi, CURLMOPT_MAX_HOST_CONNECTIONS, c->opts.max_stream_connections);
  curl_multi_setopt(c->scurl.multi, CURLMOPT_MAXCONNECTS,
                    c->opts.max_stream_connections < 256 ? c->opts.max_stream_connections : 256L);
  kube__creds_start(c->cr, loop, c);
  uv_timer_init(loop, &c->qtimer);
  c->qtimer.data = c;
  c->nopen = 4;   /* the two multis' handles (one each), the credentials, qtimer */
  if (c->creds->tls_server_name != NULL)
    FR_WARN(LOGC, "%s: tls-server-name \"%s\" is not supported (libcurl 7.88 has no option for "
                  "it); the server certificate is checked against the server URL's host",
            c->name, c->creds->tls_server_name);
  *out = c;
  return 0;

fail:
  client_destroy(c);   /* nothing else to undo: no handle exists yet */
  return r;
}
