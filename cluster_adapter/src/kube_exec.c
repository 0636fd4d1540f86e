/* kube_exec.c - pods/exec over the Kubernetes WebSocket channel protocol
 * (KUBE_PROTOCOL.md section 1), client side, never retried.
 *
 * Transport. libcurl 7.88 has no ws:// support, so curl only connects: an
 * easy handle with CURLOPT_CONNECT_ONLY does DNS, TCP, the proxy tunnel and
 * TLS with the client's settings (kube__easy_setup), driven without blocking
 * through a private multi handle on the loop (fr/curluv.h). Once the multi
 * reports the transfer done, fr_curluv_stop() ends curl's polling, the
 * connection stays attached to the easy handle (which must stay in the
 * multi: removing it closes a connect-only connection) and we speak
 * HTTP/1.1 and RFC 6455 ourselves with curl_easy_send/_recv (CURLE_AGAIN =
 * would block), from our own uv_poll on CURLINFO_ACTIVESOCKET.
 * Two TLS details shape the I/O code:
 *   - reads loop until CURLE_AGAIN, because OpenSSL may hold decrypted bytes
 *     while the socket itself is not readable;
 *   - a send that returned CURLE_AGAIN is retried with the same pointer and
 *     length (OpenSSL's "bad write retry" rule), so bytes go out through a
 *     fixed staging array that is refilled only once it has fully gone.
 *
 * One state machine per exec (set_state() traces every transition):
 *
 *   CREDS -> CONNECTING -> UPGRADING -> STREAMING -> DRAINING -> DONE
 *                                   \-> REJECTED (non-101: read the body)
 *   any state -> DONE  (result delivered, cancelled, or failed to start)
 *
 * DONE closes every handle (and withdraws a pending credentials wait); the
 * memory goes once the last close callback has run.
 *
 * Result codes (fr_kube_exec_result.error):
 *   0              the command ran to completion: exit_code is its status
 *                  (0 for Status Success, N for NonZeroExitCode), or the
 *                  exec timed out (timed_out = 1, exit_code = -1);
 *   -ENOENT        404 (pod or namespace not found), http_status = 404;
 *   -EINVAL        400 (pod not running, bad container, ...), http_status = 400;
 *   -EACCES        401 / 403 (a 401 also invalidates the credentials);
 *   -EPROTO        any other non-101 status (http_status set), a malformed
 *                  response, a bad Sec-WebSocket-Accept, no supported
 *                  subprotocol, a text frame, an invalid frame or Status;
 *   -EIO           the channel-3 Status is a Failure other than
 *                  NonZeroExitCode (e.g. InternalError "executable file not
 *                  found in $PATH"): exit_code = -1, message = its message;
 *   -ECONNREFUSED  could not connect (refused, TLS handshake or certificate
 *                  verification failed, proxy refused the tunnel);
 *   -EHOSTUNREACH  name resolution failed or host/network unreachable;
 *   -ETIMEDOUT     the connect phase timed out (curl's connect timeout);
 *   -ECONNRESET    the connection ended before the exit status arrived;
 *   -ENOMEM        out of memory;
 *   other negative errno: the credentials could not be obtained.
 * message carries the detail for every non-zero error and for a timeout.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>
#include <uv.h>

#include "fr/assert.h"
#include "fr/buf.h"
#include "fr/curluv.h"
#include "fr/log.h"
#include "fr/turn.h"
#include "fr/urlsafe.h"
#include "fr/util.h"
#include "fr/version.h"
#include "fr/ws.h"
#include "kube_internal.h"
#include "kubecreds.h"

#define LOG_COMP "kube-exec"

#define DEFAULT_USER_AGENT "fedrouter/" FR_VERSION

/* Bounds, and where the numbers come from. */
#define STDIN_FRAME_MAX (1024 * 1024)   /* stdin data per channel-0 message */
#define MAX_HEAD 16384                  /* response head; apiservers send < 1 KiB */
#define MAX_REJECT_BODY 65536           /* Status body of a refused upgrade */
#define MAX_STATUS 65536                /* channel-3 Status JSON */
/* A server message: kubelets send output in pieces of at most 32 KiB; this
 * leaves room without letting a bad server make us buffer without bound. */
#define MAX_MESSAGE (8 * 1024 * 1024)
#define READ_BUF 16384
/* Reads (of READ_BUF) per poll callback before yielding to the loop (resumed
 * on the next turn, since TLS may hold bytes the poll will not report). */
#define READS_PER_TURN 16
/* After the Status, how long to wait for the server's close frame. */
#define DRAIN_GRACE_MS 2000

enum exec_state {
  ST_CREDS,       /* waiting for kube__creds_wait() */
  ST_CONNECTING,  /* curl: DNS, TCP, proxy, TLS */
  ST_UPGRADING,   /* upgrade request going out, reading the response head */
  ST_REJECTED,    /* non-101 response: reading its body */
  ST_STREAMING,   /* WebSocket open */
  ST_DRAINING,    /* Status received: waiting for the close frame or EOF */
  ST_DONE,        /* finished; handles closing */
};

static const char *const state_names[] = {
    "CREDS", "CONNECTING", "UPGRADING", "REJECTED", "STREAMING", "DRAINING", "DONE",
};

struct kube_exec {
  struct fr_kube_call call;
  struct fr_kube_client *client;   /* not touched after DONE */
  uv_loop_t *loop;
  enum exec_state state;
  fr_kube_exec_cb cb;
  void *arg;
  uint64_t start_ns;

  /* request */
  char *url;                       /* for curl: scheme://authority/ */
  char *host;                      /* Host header */
  char *target;                    /* request-target: path and query */
  char *request_id;
  char key[25];                    /* Sec-WebSocket-Key */
  uint8_t *stdin_copy;             /* our copy of opts->stdin_data */
  size_t stdin_len, stdin_off;
  int has_stdin, stdin_eof_sent;
  size_t max_out, max_err;
  struct fr_exec_budget *budget;
  size_t budgeted;                 /* of budget->used, ours (given back on free) */
  uint64_t timeout_ms;

  /* curl */
  struct fr_curluv curl;           /* the connect phase (from on_creds) */
  int curl_init;                   /* <curl> initialised, not yet closing */
  CURL *easy;
  struct curl_slist *headers;
  char errbuf[CURL_ERROR_SIZE];
  uv_poll_t io;                    /* the connection once connected */
  int io_open;                     /* <io> initialised, not yet closing */
  uv_idle_t resume;                /* "resume reading" (see do_read) */
  uv_timer_t deadline;             /* timeout_ms; later the drain grace */
  unsigned handles;                /* uv handles (curl's: one) not yet closed */
  int creds_pending;               /* kube__creds_wait() will still call back */
  int curl_ref;                    /* we hold a curl_global_init() reference */
  struct kube_share *share;        /* the client's TLS sessions, referenced */

  /* output: frames queued, then staged in fixed chunks (see top) */
  struct fr_buf wq;
  size_t wq_off;
  uint8_t stage[16384];
  size_t stage_len, stage_off;
  int write_failed;                /* peer stopped reading; keep reading */

  /* input */
  struct fr_buf head;              /* response head, then a refused body */
  size_t head_len;                 /* length of the head once complete */
  int resp_chunked;
  long long resp_clen;             /* -1 when absent */
  struct fr_ws_reader rd;
  int rd_init;
  int v5;
  const char *protocol;

  /* result */
  struct fr_buf out, err, status;
  int out_trunc, err_trunc;
  int http_status;
  int error;
  int exit_code;
  int timed_out;
  char *message;
};

static void on_poll(uv_poll_t *p, int status, int events);
static void on_creds(struct fr_kube_client *c, int status, void *arg);
static void finish(struct kube_exec *e, int deliver);
static void io_update(struct kube_exec *e);
static void on_resume_read(uv_idle_t *h);
static void on_deadline(uv_timer_t *t);

/* ---- small helpers ---- */

/* The diagram at the top: allowed[from] has bit <to>. */
#define ST_BIT(s) (1u << (s))
static const unsigned allowed[] = {
    [ST_CREDS] = ST_BIT(ST_CONNECTING) | ST_BIT(ST_DONE),
    [ST_CONNECTING] = ST_BIT(ST_UPGRADING) | ST_BIT(ST_DONE),
    [ST_UPGRADING] = ST_BIT(ST_STREAMING) | ST_BIT(ST_REJECTED) | ST_BIT(ST_DONE),
    [ST_REJECTED] = ST_BIT(ST_DONE),
    [ST_STREAMING] = ST_BIT(ST_DRAINING) | ST_BIT(ST_DONE),
    [ST_DRAINING] = ST_BIT(ST_DONE),
    [ST_DONE] = 0,
};

static void set_state(struct kube_exec *e, enum exec_state s) {
  FR_ASSERT(allowed[e->state] & ST_BIT(s));
  FR_DEBUG(LOG_COMP, "exec %p: %s -> %s", (void *)e, state_names[e->state], state_names[s]);
  e->state = s;
}

/* Records the outcome unless one is already recorded; takes a copy of
 * <msg> (may be NULL). */
static void set_error(struct kube_exec *e, int error, const char *msg) {
  if (e->error != 0)
    return;
  e->error = error;
  free(e->message);
  e->message = msg != NULL ? strdup(msg) : NULL;
}

static void set_errorf(struct kube_exec *e, int error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_errorf(struct kube_exec *e, int error, const char *fmt, ...) {
  char msg[512];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  set_error(e, error, msg);
}

static void fail(struct kube_exec *e, int error, const char *msg) {
  set_error(e, error, msg);
  finish(e, 1);
}

/* Percent-encodes everything but RFC 3986 unreserved characters. */
static int put_escaped(struct fr_buf *b, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  int rc = 0;

  for (; *s != '\0' && rc == 0; s++) {
    unsigned char ch = (unsigned char)*s;
    if (isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~') {
      rc = fr_buf_putc(b, (char)ch);
    } else {
      char enc[3] = {'%', hex[ch >> 4], hex[ch & 15]};
      rc = fr_buf_append(b, enc, 3);
    }
  }
  return rc;
}

static int ascii_casecmp_n(const char *a, const char *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int ca = tolower((unsigned char)a[i]), cb = tolower((unsigned char)b[i]);
    if (ca != cb)
      return ca - cb;
    if (ca == 0)
      return 0;
  }
  return 0;
}

/* 1 if the comma-separated <list> (length <len>) holds <token>, any case. */
static int has_token(const char *list, size_t len, const char *token) {
  size_t tl = strlen(token), i = 0;

  while (i < len) {
    size_t s, end;
    while (i < len && (list[i] == ' ' || list[i] == '\t' || list[i] == ','))
      i++;
    s = i;
    while (i < len && list[i] != ',')
      i++;
    end = i;
    while (end > s && (list[end - 1] == ' ' || list[end - 1] == '\t'))
      end--;
    if (end - s == tl && ascii_casecmp_n(list + s, token, tl) == 0)
      return 1;
  }
  return 0;
}

/* ---- handles ---- */

static void destroy(struct kube_exec *e) {
  kube__share_unref(e->share); /* after the easy handle that used it (finish) */
  e->share = NULL;
  curl_slist_free_all(e->headers);
  /* Our handles may outlive the client (its free cancels us, but our
   * close callbacks can run after its last one), so we hold our own
   * reference on curl's global state. */
  if (e->curl_ref)
    curl_global_cleanup();
  if (e->rd_init)
    fr_ws_reader_free(&e->rd);
  fr_buf_free(&e->wq);
  fr_buf_free(&e->head);
  /* The output this exec held is given back to the shared budget. */
  FR_ASSERT(e->budget == NULL ? e->budgeted == 0 : e->budget->used >= e->budgeted);
  if (e->budget != NULL)
    e->budget->used -= e->budgeted;
  fr_buf_free(&e->out);
  fr_buf_free(&e->err);
  fr_buf_free(&e->status);
  free(e->url);
  free(e->host);
  free(e->target);
  free(e->request_id);
  free(e->stdin_copy);
  free(e->message);
  free(e);
}

static void maybe_destroy(struct kube_exec *e) {
  if (e->state == ST_DONE && e->handles == 0 && !e->creds_pending)
    destroy(e);
}

static void on_handle_close(uv_handle_t *h) {
  struct kube_exec *e = h->data;

  e->handles--;
  maybe_destroy(e);
}

static void on_curl_closed(struct fr_curluv *cu) {
  struct kube_exec *e = fr_container_of(cu, struct kube_exec, curl);

  e->handles--;
  maybe_destroy(e);
}

/* Removes and frees the easy handle, then closes the multi. Removing a
 * connect-only handle marks its connection for closing; the multi cleanup
 * then closes it (our poll on it is closed by then). Never inside curl:
 * nothing of ours runs there. */
static void curl_close(struct kube_exec *e) {
  if (!e->curl_init)
    return;
  e->curl_init = 0;
  if (e->easy != NULL) {
    curl_multi_remove_handle(e->curl.multi, e->easy);
    curl_easy_cleanup(e->easy);
    e->easy = NULL;
  }
  fr_curluv_close(&e->curl, on_curl_closed);
}

/* ---- completion ---- */

static double elapsed_ms(const struct kube_exec *e) {
  return (double)(uv_hrtime() - e->start_ns) / 1e6;
}

/* Enters DONE: untracks the call, closes every handle and, if <deliver>,
 * calls the user's callback (which may do anything, including freeing the
 * client: nothing here touches the client afterwards). The memory goes
 * later, in the close callbacks. */
static void finish(struct kube_exec *e, int deliver) {
  struct fr_kube_exec_result res;

  if (e->state == ST_DONE)
    return;
  set_state(e, ST_DONE);
  if (e->creds_pending) {
    kube__creds_unwait(kube__creds(e->client), on_creds, e);
    e->creds_pending = 0;
  }
  kube__call_untrack(&e->call);
  e->client = NULL;
  if (e->io_open) {
    /* uv_close stops it at once (epoll forgets the fd now), before curl
     * closes the socket. */
    e->io_open = 0;
    uv_close((uv_handle_t *)&e->io, on_handle_close);
  }
  curl_close(e);
  uv_close((uv_handle_t *)&e->resume, on_handle_close);
  uv_close((uv_handle_t *)&e->deadline, on_handle_close);
  if (!deliver)
    return;

  memset(&res, 0, sizeof(res));
  res.error = e->error;
  res.http_status = e->http_status;
  res.message = e->message;
  res.exit_code = (e->error == 0 && !e->timed_out) ? e->exit_code : -1;
  res.timed_out = e->timed_out;
  res.out = e->out.data != NULL ? e->out.data : "";
  res.out_buf = &e->out;
  res.err_buf = &e->err;
  res.out_len = e->out.len;
  res.err = e->err.data != NULL ? e->err.data : "";
  res.err_len = e->err.len;
  res.out_truncated = e->out_trunc;
  res.err_truncated = e->err_trunc;
  res.protocol = e->protocol;
  res.duration_ms = elapsed_ms(e);
  FR_DEBUG(LOG_COMP, "exec %p: error %d http %d exit %d timed_out %d out %zu err %zu",
           (void *)e, res.error, res.http_status, res.exit_code, res.timed_out,
           res.out_len, res.err_len);
  e->cb(&res, e->arg);
}

static void exec_cancel(struct fr_kube_call *call) {
  struct kube_exec *e = fr_container_of(call, struct kube_exec, call);

  finish(e, 0);
}

/* ---- output ---- */

/* Appends one masked client frame to the write queue. <prefix> (0 or 1
 * byte, the channel) goes before <data>. */
static int queue_frame(struct kube_exec *e, int opcode, const uint8_t *prefix, size_t plen,
                       const void *data, size_t len) {
  uint8_t hdr[FR_WS_MAX_HEADER], mask[4];
  size_t hl, start;
  int rc;

  if (e->write_failed)
    return 0;
  if (fr_random_bytes(mask, sizeof(mask)) != 0)
    return -EIO;
  hl = fr_ws_write_header(hdr, 1, opcode, plen + len, mask);
  if ((rc = fr_buf_reserve(&e->wq, hl + plen + len)) != 0)
    return rc;
  fr_buf_append(&e->wq, hdr, hl);
  start = e->wq.len;
  if (plen > 0)
    fr_buf_append(&e->wq, prefix, plen);
  if (len > 0)
    fr_buf_append(&e->wq, data, len);
  fr_ws_mask((uint8_t *)e->wq.data + start, plen + len, mask, 0);
  return 0;
}

/* Frames the next piece of stdin (or the v5 stdin close signal) once the
 * queue is empty, so at most one piece is buffered at a time. */
static int produce_stdin(struct kube_exec *e) {
  static const uint8_t ch_stdin = 0;
  static const uint8_t close_stdin[2] = {0xff, 0x00};
  size_t n;
  int rc;

  if (!e->has_stdin || e->stdin_eof_sent || e->wq_off < e->wq.len)
    return 0;
  if (e->state != ST_STREAMING)
    return 0; /* not yet upgraded, or the command has already ended */
  if (e->stdin_off < e->stdin_len) {
    n = e->stdin_len - e->stdin_off;
    if (n > STDIN_FRAME_MAX)
      n = STDIN_FRAME_MAX;
    if ((rc = queue_frame(e, FR_WS_OP_BINARY, &ch_stdin, 1, e->stdin_copy + e->stdin_off, n)) != 0)
      return rc;
    e->stdin_off += n;
    return 0;
  }
  /* v4 has no way to say "stdin ended": the command sees EOF only when the
   * connection closes. */
  e->stdin_eof_sent = 1;
  if (e->v5)
    return queue_frame(e, FR_WS_OP_BINARY, close_stdin, 2, NULL, 0);
  return 0;
}

static int want_write(const struct kube_exec *e) {
  if (e->write_failed)
    return 0;
  if (e->stage_off < e->stage_len || e->wq_off < e->wq.len)
    return 1;
  return e->has_stdin && !e->stdin_eof_sent && e->state == ST_STREAMING;
}

/* Sends what it can without blocking. Returns 0 or -ENOMEM. A send error
 * is not fatal by itself: the server may have finished and closed while
 * stdin was still going out, with the Status waiting to be read, so we
 * stop writing and let the read side decide. */
static int flush(struct kube_exec *e) {
  for (;;) {
    CURLcode cc;
    size_t n = 0;
    int rc;

    if (e->write_failed)
      return 0;
    if (e->stage_off == e->stage_len) {
      if (e->wq_off == e->wq.len) {
        fr_buf_reset(&e->wq);
        e->wq_off = 0;
        if ((rc = produce_stdin(e)) != 0)
          return rc;
        if (e->wq.len == 0)
          return 0;
      }
      n = e->wq.len - e->wq_off;
      if (n > sizeof(e->stage))
        n = sizeof(e->stage);
      memcpy(e->stage, e->wq.data + e->wq_off, n);
      e->wq_off += n;
      e->stage_len = n;
      e->stage_off = 0;
    }
    cc = curl_easy_send(e->easy, e->stage + e->stage_off, e->stage_len - e->stage_off, &n);
    if (cc == CURLE_AGAIN)
      return 0;
    if (cc != CURLE_OK) {
      FR_DEBUG(LOG_COMP, "exec %p: send failed: %s", (void *)e, curl_easy_strerror(cc));
      e->write_failed = 1;
      return 0;
    }
    e->stage_off += n;
  }
}

/* ---- the refused upgrade ---- */

/* Decodes a chunked body in <raw>. Returns 1 when complete (decoded into
 * <out>), 0 if more is needed, -1 if malformed. */
static int dechunk(const char *raw, size_t len, struct fr_buf *out) {
  size_t i = 0;

  fr_buf_reset(out);
  for (;;) {
    size_t size = 0, eol;
    int digits = 0;

    for (eol = i; eol + 1 < len && !(raw[eol] == '\r' && raw[eol + 1] == '\n'); eol++)
      ;
    if (eol + 1 >= len)
      return 0;
    for (; i < eol && isxdigit((unsigned char)raw[i]); i++, digits++) {
      int d = isdigit((unsigned char)raw[i]) ? raw[i] - '0'
                                             : tolower((unsigned char)raw[i]) - 'a' + 10;
      if (size > (SIZE_MAX >> 4))
        return -1;
      size = size * 16 + (size_t)d;
    }
    if (digits == 0)
      return -1;
    i = eol + 2; /* chunk extensions ignored */
    if (size == 0)
      return 1; /* trailers are not needed */
    if (size > len - i || len - i - size < 2)
      return 0;
    if (fr_buf_append(out, raw + i, size) != 0)
      return -1;
    i += size + 2;
  }
}

/* The non-101 response is complete (or the connection ended): report its
 * status and the Status message. */
static void finish_rejected(struct kube_exec *e) {
  const char *body = e->head.data + e->head_len;
  size_t blen = e->head.len - e->head_len;
  struct fr_buf dec;
  const char *msg = NULL;
  json_t *j = NULL;
  char text[512];
  int error;

  fr_buf_init(&dec);
  if (e->resp_chunked && dechunk(body, blen, &dec) >= 0 && dec.data != NULL) {
    body = dec.data;
    blen = dec.len;
  }
  if (blen > 0)
    j = json_loadb(body, blen, 0, NULL);
  if (json_is_object(j) && json_is_string(json_object_get(j, "message")))
    msg = json_string_value(json_object_get(j, "message"));
  if (msg == NULL && blen > 0 && j == NULL) {
    /* Not JSON (a proxy's page, a plain-text 429): the first line. */
    size_t n = 0;
    while (n < blen && n < sizeof(text) - 1 && body[n] != '\r' && body[n] != '\n')
      n++;
    memcpy(text, body, n);
    text[n] = '\0';
    if (n > 0)
      msg = text;
  }
  if (msg == NULL) {
    snprintf(text, sizeof(text), "exec upgrade refused: HTTP %d", e->http_status);
    msg = text;
  }

  switch (e->http_status) {
  case 404:
    error = -ENOENT;
    break;
  case 400:
    error = -EINVAL;
    break;
  case 401:
    /* The token may have expired or been rotated: next call re-reads it. */
    if (e->client != NULL)
      kube__creds_invalidate(kube__creds(e->client));
    error = -EACCES;
    break;
  case 403:
    error = -EACCES;
    break;
  default:
    error = -EPROTO;
    break;
  }
  set_error(e, error, msg);
  json_decref(j);
  fr_buf_free(&dec);
  finish(e, 1);
}

/* Checks whether the refused response's body is complete. */
static void check_rejected(struct kube_exec *e) {
  size_t blen = e->head.len - e->head_len;

  if (e->resp_chunked) {
    struct fr_buf tmp;
    int rc;
    fr_buf_init(&tmp);
    rc = dechunk(e->head.data + e->head_len, blen, &tmp);
    fr_buf_free(&tmp);
    if (rc != 0 || blen >= MAX_REJECT_BODY)
      finish_rejected(e);
    return;
  }
  if (e->resp_clen >= 0 && (long long)blen >= e->resp_clen) {
    e->head.len = e->head_len + (size_t)e->resp_clen; /* ignore anything after */
    finish_rejected(e);
    return;
  }
  if (blen >= MAX_REJECT_BODY)
    finish_rejected(e);
  /* else: more to come, or the body runs until EOF */
}

/* ---- the upgrade response ---- */

static void on_ws_bytes(struct kube_exec *e, const uint8_t *data, size_t len);

/* Parses the complete head in e->head (e->head_len bytes, "\r\n\r\n"
 * included); leftover bytes after it are already in the buffer. */
static void parse_head(struct kube_exec *e) {
  const char *p = e->head.data, *end = e->head.data + e->head_len - 2;
  const char *eol = memchr(p, '\n', (size_t)(end - p));
  const char *accept = NULL, *proto = NULL;
  size_t accept_len = 0, proto_len = 0;
  int upgrade_ok = 0, connection_ok = 0, status = 0;
  char expect[29];

  /* Status line: HTTP/1.x NNN reason, NNN from 100 to 599 (RFC 9110
   * section 15): anything else is not an answer whose status a caller
   * could act on (it would read "003" as a refusal with status 3). */
  if (eol == NULL || e->head_len < 12 || strncmp(p, "HTTP/1.", 7) != 0 || p[8] != ' ' ||
      p[9] < '1' || p[9] > '5' || !isdigit((unsigned char)p[10]) ||
      !isdigit((unsigned char)p[11])) {
    fail(e, -EPROTO, "exec: malformed HTTP response from the API server");
    return;
  }
  status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
  e->resp_clen = -1;

  for (p = eol + 1; p < end; p = eol + 1) {
    const char *colon, *v, *ve;
    eol = memchr(p, '\n', (size_t)(end - p) + 1);
    if (eol == NULL)
      break;
    ve = eol;
    if (ve > p && ve[-1] == '\r')
      ve--;
    colon = memchr(p, ':', (size_t)(ve - p));
    if (colon == NULL)
      continue;
    for (v = colon + 1; v < ve && (*v == ' ' || *v == '\t'); v++)
      ;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
      ve--;
#define IS(name) ((size_t)(colon - p) == sizeof(name) - 1 && \
                  ascii_casecmp_n(p, name, sizeof(name) - 1) == 0)
    if (IS("Upgrade")) {
      upgrade_ok = has_token(v, (size_t)(ve - v), "websocket");
    } else if (IS("Connection")) {
      connection_ok = has_token(v, (size_t)(ve - v), "upgrade");
    } else if (IS("Sec-WebSocket-Accept")) {
      accept = v;
      accept_len = (size_t)(ve - v);
    } else if (IS("Sec-WebSocket-Protocol")) {
      proto = v;
      proto_len = (size_t)(ve - v);
    } else if (IS("Content-Length")) {
      char num[24];
      int64_t n;
      size_t l = (size_t)(ve - v);
      if (l < sizeof(num)) {
        memcpy(num, v, l);
        num[l] = '\0';
        if (fr_parse_int64(num, 0, INT64_MAX, &n) == 0)
          e->resp_clen = n;
      }
    } else if (IS("Transfer-Encoding")) {
      e->resp_chunked = has_token(v, (size_t)(ve - v), "chunked");
    }
#undef IS
  }

  if (status != 101) {
    e->http_status = status;
    set_state(e, ST_REJECTED);
    check_rejected(e);
    return;
  }
  if (!upgrade_ok || !connection_ok) {
    fail(e, -EPROTO, "exec: 101 response without Upgrade: websocket / Connection: Upgrade");
    return;
  }
  fr_ws_accept_key(e->key, expect);
  if (accept == NULL || accept_len != 28 || memcmp(accept, expect, 28) != 0) {
    fail(e, -EPROTO, "exec: wrong Sec-WebSocket-Accept in the upgrade response");
    return;
  }
  if (proto_len == 17 && memcmp(proto, "v5.channel.k8s.io", 17) == 0) {
    e->protocol = "v5.channel.k8s.io";
    e->v5 = 1;
  } else if (proto_len == 17 && memcmp(proto, "v4.channel.k8s.io", 17) == 0) {
    e->protocol = "v4.channel.k8s.io";
  } else {
    fail(e, -EPROTO, "exec: the API server did not agree to v5.channel.k8s.io or "
                     "v4.channel.k8s.io");
    return;
  }
  set_state(e, ST_STREAMING);
  fr_ws_reader_init(&e->rd, 0, MAX_MESSAGE);
  e->rd_init = 1;
  if (e->head.len > e->head_len) {
    /* Frames that arrived with the head. */
    struct fr_buf rest;
    fr_buf_init(&rest);
    if (fr_buf_append(&rest, e->head.data + e->head_len, e->head.len - e->head_len) != 0) {
      fail(e, -ENOMEM, "out of memory");
      return;
    }
    fr_buf_free(&e->head);
    on_ws_bytes(e, (const uint8_t *)rest.data, rest.len);
    fr_buf_free(&rest);
  } else {
    fr_buf_free(&e->head);
  }
}

/* ---- the WebSocket ---- */

static void append_capped(struct fr_buf *b, size_t cap, int *trunc, const uint8_t *d,
                          size_t n, struct kube_exec *e) {
  size_t room = b->len < cap ? cap - b->len : 0;

  /* The shared budget bounds all execs' buffers together. */
  if (e->budget != NULL) {
    size_t left = e->budget->used < e->budget->max ? e->budget->max - e->budget->used : 0;
    if (left < room)
      room = left;
  }
  if (n > room) {
    *trunc = 1;
    n = room;
  }
  if (n > 0 && fr_buf_append(b, d, n) != 0) {
    *trunc = 1; /* out of memory: keep what we have, say it is incomplete */
    FR_WARN(LOG_COMP, "exec %p: out of memory buffering output", (void *)e);
    return;
  }
  if (e->budget != NULL) {
    e->budget->used += n;
    e->budgeted += n;
  }
}

/* Interprets the channel-3 Status (client-go's errorDecoder: everything on
 * the channel, decoded once the stream ends). */
static void finish_with_status(struct kube_exec *e) {
  json_t *j, *causes, *cause;
  const char *st, *reason, *msg;
  size_t i;

  if (e->status.len == 0) {
    fail(e, -ECONNRESET, "exec: the stream ended before the command's exit status");
    return;
  }
  j = json_loadb(e->status.data, e->status.len, 0, NULL);
  st = json_string_value(json_object_get(j, "status"));
  reason = json_string_value(json_object_get(j, "reason"));
  msg = json_string_value(json_object_get(j, "message"));
  if (st != NULL && strcmp(st, "Success") == 0) {
    e->exit_code = 0;
  } else if (st != NULL && strcmp(st, "Failure") == 0) {
    int found = 0;
    if (reason != NULL && strcmp(reason, "NonZeroExitCode") == 0) {
      causes = json_object_get(json_object_get(j, "details"), "causes");
      json_array_foreach(causes, i, cause) {
        const char *cr = json_string_value(json_object_get(cause, "reason"));
        const char *cm = json_string_value(json_object_get(cause, "message"));
        int64_t code;
        if (cr != NULL && strcmp(cr, "ExitCode") == 0 && cm != NULL &&
            fr_parse_int64(cm, 0, INT_MAX, &code) == 0) {
          e->exit_code = (int)code;
          found = 1;
          break;
        }
      }
    }
    if (!found)
      set_error(e, -EIO, msg != NULL ? msg : "exec failed (Status Failure without a message)");
  } else {
    set_error(e, -EPROTO, "exec: malformed Status on the error channel");
  }
  json_decref(j);
  finish(e, 1);
}

static int on_ws_message(void *arg, int opcode, const uint8_t *data, size_t len) {
  struct kube_exec *e = arg;

  switch (opcode) {
  case FR_WS_OP_PING:
    if (queue_frame(e, FR_WS_OP_PONG, NULL, 0, data, len) != 0) {
      fail(e, -ENOMEM, "out of memory");
      return 1;
    }
    return 0;
  case FR_WS_OP_PONG:
    return 0;
  case FR_WS_OP_CLOSE: {
    int code = 1005;
    const char *reason = "";
    size_t rlen = 0;
    uint8_t echo[2];

    fr_ws_parse_close(data, len, &code, &reason, &rlen);
    /* Answer the close (best effort: we are about to drop the connection). */
    echo[0] = (uint8_t)(FR_WS_CLOSE_NORMAL >> 8);
    echo[1] = (uint8_t)(FR_WS_CLOSE_NORMAL & 0xff);
    if (queue_frame(e, FR_WS_OP_CLOSE, NULL, 0, echo, 2) == 0)
      flush(e);
    if (e->status.len == 0) {
      set_errorf(e, -ECONNRESET, "exec: the server closed the stream (%d%s%.*s) before the "
                 "command's exit status", code, rlen > 0 ? ": " : "",
                 (int)(rlen > 200 ? 200 : rlen), reason);
      finish(e, 1);
    } else {
      finish_with_status(e);
    }
    return 1;
  }
  case FR_WS_OP_TEXT:
    /* The channel protocols are binary only; kubectl aborts too. */
    fail(e, -EPROTO, "exec: unexpected text frame from the API server");
    return 1;
  default:
    break;
  }
  if (len == 0)
    return 0;
  switch (data[0]) {
  case 1:
    append_capped(&e->out, e->max_out, &e->out_trunc, data + 1, len - 1, e);
    break;
  case 2:
    append_capped(&e->err, e->max_err, &e->err_trunc, data + 1, len - 1, e);
    break;
  case 3:
    if (e->status.len + len - 1 > MAX_STATUS || fr_buf_append(&e->status, data + 1, len - 1) != 0) {
      fail(e, -EPROTO, "exec: oversized Status on the error channel");
      return 1;
    }
    if (e->state == ST_STREAMING) {
      /* The Status is the last message; give the close frame a moment
       * (this replaces the exec timeout: the command has ended). */
      set_state(e, ST_DRAINING);
      uv_timer_start(&e->deadline, on_deadline, DRAIN_GRACE_MS, 0);
    }
    break;
  default:
    break; /* resize echoes, v5 close signals, unknown channels: ignored */
  }
  return 0;
}

static void on_ws_bytes(struct kube_exec *e, const uint8_t *data, size_t len) {
  int rc = fr_ws_reader_feed(&e->rd, data, len, on_ws_message, e);

  if (rc < 0 && e->state != ST_DONE)
    fail(e, rc == -ENOMEM ? -ENOMEM : -EPROTO,
         rc == -ENOMEM ? "out of memory" : "exec: invalid WebSocket frame from the API server");
}

/* ---- reading ---- */

static void on_bytes(struct kube_exec *e, const uint8_t *data, size_t len) {
  if (e->state == ST_UPGRADING || e->state == ST_REJECTED) {
    size_t before = e->head.len, from;
    const char *hit;

    if (fr_buf_append(&e->head, data, len) != 0) {
      fail(e, -ENOMEM, "out of memory");
      return;
    }
    if (e->state == ST_REJECTED) {
      check_rejected(e);
      return;
    }
    from = before > 3 ? before - 3 : 0;
    hit = NULL;
    for (size_t i = from; i + 4 <= e->head.len; i++) {
      if (memcmp(e->head.data + i, "\r\n\r\n", 4) == 0) {
        hit = e->head.data + i;
        break;
      }
    }
    if (hit == NULL) {
      if (e->head.len > MAX_HEAD)
        fail(e, -EPROTO, "exec: oversized response head from the API server");
      return;
    }
    e->head_len = (size_t)(hit - e->head.data) + 4;
    parse_head(e);
    return;
  }
  if (e->state == ST_STREAMING || e->state == ST_DRAINING)
    on_ws_bytes(e, data, len);
}

/* The connection ended (EOF or a receive error: the same to us). */
static void on_eof(struct kube_exec *e) {
  switch (e->state) {
  case ST_UPGRADING:
    fail(e, -ECONNRESET, "exec: the API server closed the connection before answering the upgrade");
    break;
  case ST_REJECTED:
    finish_rejected(e);
    break;
  case ST_STREAMING:
  case ST_DRAINING:
    finish_with_status(e);
    break;
  default:
    break;
  }
}

static void do_read(struct kube_exec *e) {
  uint8_t buf[READ_BUF];

  for (int turn = 0; e->state != ST_DONE; turn++) {
    CURLcode cc;
    size_t n = 0;

    if (turn == READS_PER_TURN) {
      /* Let the loop breathe; TLS may hold more than the poll will report,
       * so resume on the next loop turn rather than waiting for
       * readability (an idle handle: a 0 ms timer started from a timer
       * callback runs again in the same turn before libuv 1.45). */
      uv_idle_start(&e->resume, on_resume_read);
      return;
    }
    cc = curl_easy_recv(e->easy, buf, sizeof(buf), &n);
    if (cc == CURLE_AGAIN)
      return;
    if (cc != CURLE_OK) {
      FR_DEBUG(LOG_COMP, "exec %p: recv failed: %s", (void *)e, curl_easy_strerror(cc));
      on_eof(e);
      return;
    }
    if (n == 0) {
      on_eof(e);
      return;
    }
    on_bytes(e, buf, n);
  }
}

/* ---- the connection's poll ---- */

static void io_step(struct kube_exec *e, int readable, int writable) {
  int rc;

  if (writable && e->state != ST_DONE && (rc = flush(e)) != 0) {
    fail(e, rc, "out of memory");
    return;
  }
  if (readable && e->state != ST_DONE)
    do_read(e);
  /* Reading may have queued pongs, a close, or started stdin. */
  if (e->state != ST_DONE && (rc = flush(e)) != 0) {
    fail(e, rc, "out of memory");
    return;
  }
  if (e->state != ST_DONE)
    io_update(e);
}

/* Re-arms the poll and the helper timers for the current state. */
static void io_update(struct kube_exec *e) {
  int events = UV_READABLE;

  if (!e->io_open)
    return;
  if (want_write(e))
    events |= UV_WRITABLE;
  uv_poll_start(&e->io, events, on_poll);
}

/* The next loop turn: the reading left off (READS_PER_TURN), or a
 * readiness put off by the turn budget (on_poll). Over the budget again,
 * it stays for the turn after. */
static void on_resume_read(uv_idle_t *h) {
  struct kube_exec *e = fr_container_of(h, struct kube_exec, resume);

  if (!fr_turn_take(e->loop))
    return;
  uv_idle_stop(h);
  io_step(e, 1, 0);
}

static void on_poll(uv_poll_t *p, int status, int events) {
  struct kube_exec *e = fr_container_of(p, struct kube_exec, io);

  if (e->state == ST_DONE)
    return;
  if (!fr_turn_take(e->loop)) {
    /* Over this turn's budget (fr/turn.h): read from a later turn; the
     * poll waits, so the ready socket does not come back meanwhile. */
    uv_poll_stop(p);
    if (!uv_is_active((uv_handle_t *)&e->resume))
      uv_idle_start(&e->resume, on_resume_read);
    return;
  }
  /* An error on the socket normally shows up as a failing read. */
  io_step(e, status < 0 || (events & UV_READABLE), status >= 0 && (events & UV_WRITABLE));
  if (status < 0 && e->state != ST_DONE) {
    /* libuv has stopped the poll; do not spin on a broken socket. */
    if (e->state == ST_STREAMING || e->state == ST_DRAINING || e->state == ST_REJECTED)
      on_eof(e);
    else
      fail(e, -ECONNRESET, "exec: connection error");
  }
}

/* ---- connecting ---- */

/* Maps a failed connect to the codes listed at the top. */
static int connect_error(struct kube_exec *e, CURLcode cc) {
  long os_errno = 0;

  switch (cc) {
  case CURLE_OUT_OF_MEMORY:
    return -ENOMEM;
  case CURLE_OPERATION_TIMEDOUT:
    return -ETIMEDOUT;
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY:
    return -EHOSTUNREACH;
  case CURLE_COULDNT_CONNECT:
    curl_easy_getinfo(e->easy, CURLINFO_OS_ERRNO, &os_errno);
    if (os_errno == EHOSTUNREACH || os_errno == ENETUNREACH)
      return -EHOSTUNREACH;
    if (os_errno == ETIMEDOUT)
      return -ETIMEDOUT;
    return -ECONNREFUSED;
  default:
    return -ECONNREFUSED;
  }
}

static void connected(struct kube_exec *e, CURLcode cc) {
  curl_socket_t fd = CURL_SOCKET_BAD;
  int rc;

  fr_curluv_stop(&e->curl);
  if (cc != CURLE_OK) {
    set_errorf(e, connect_error(e, cc), "exec: cannot connect to %s: %s", e->url,
               e->errbuf[0] != '\0' ? e->errbuf : curl_easy_strerror(cc));
    finish(e, 1);
    return;
  }
  if (curl_easy_getinfo(e->easy, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK ||
      fd == CURL_SOCKET_BAD) {
    fail(e, -ECONNRESET, "exec: the connection was lost right after connecting");
    return;
  }
  /* curl's polls are closed (fr_curluv_stop), so the fd is free for ours. */
  if (uv_poll_init_socket(e->loop, &e->io, fd) != 0) {
    fail(e, -ENOMEM, "exec: cannot watch the connection");
    return;
  }
  e->io.data = e;
  e->io_open = 1;
  e->handles++;
  set_state(e, ST_UPGRADING);
  /* The request head goes out through the write queue. */
  rc = fr_buf_append(&e->wq, e->head.data, e->head.len);
  fr_buf_reset(&e->head);
  if (rc != 0) {
    fail(e, -ENOMEM, "out of memory");
    return;
  }
  io_step(e, 1, 1);
}

/* fr_curluv's done_cb: the connect-only transfer is over. */
static void on_curl_done(struct fr_curluv *cu, CURL *easy, CURLcode result) {
  struct kube_exec *e = fr_container_of(cu, struct kube_exec, curl);

  if (e->state == ST_CONNECTING)
    connected(e, result);
}

/* ---- start ---- */

static void on_deadline(uv_timer_t *t) {
  struct kube_exec *e = fr_container_of(t, struct kube_exec, deadline);
  static const uint8_t going_away[2] = {FR_WS_CLOSE_GOING_AWAY >> 8, FR_WS_CLOSE_GOING_AWAY & 0xff};

  if (e->state == ST_DONE)
    return;
  if (e->state == ST_DRAINING) {
    /* The Status came but no close frame: done anyway. */
    finish_with_status(e);
    return;
  }
  /* The exec took too long. Say goodbye if nothing is half-sent, then drop
   * the connection. This does not stop the command on a real node. */
  e->timed_out = 1;
  if (e->state == ST_STREAMING && e->stage_off == e->stage_len) {
    fr_buf_reset(&e->wq);
    e->wq_off = 0;
    e->has_stdin = 0;
    if (queue_frame(e, FR_WS_OP_CLOSE, NULL, 0, going_away, 2) == 0)
      flush(e);
  }
  /* error stays 0: timed_out says what happened (fr/kube.h). */
  free(e->message);
  e->message = NULL;
  {
    char msg[64];
    snprintf(msg, sizeof(msg), "exec timed out after %llu ms", (unsigned long long)e->timeout_ms);
    e->message = strdup(msg);
  }
  finish(e, 1);
}

static void on_creds(struct fr_kube_client *c, int status, void *arg) {
  struct kube_exec *e = arg;
  CURLMcode mc;
  int rc;

  e->creds_pending = 0;
  if (e->state != ST_CREDS) {
    maybe_destroy(e); /* not expected: finish() withdraws the wait */
    return;
  }
  if (status < 0) {
    set_errorf(e, status, "exec: no credentials for cluster %s: %s", kube__name(c),
               kube__creds_error(kube__creds(c)));
    finish(e, 1);
    return;
  }
  if (fr_curluv_init(e->loop, &e->curl, on_curl_done, NULL) != 0) {
    fail(e, -ENOMEM, "out of memory");
    return;
  }
  e->curl_init = 1;
  e->handles++;
  e->easy = curl_easy_init();
  if (e->easy == NULL) {
    fail(e, -ENOMEM, "out of memory");
    return;
  }
  /* Resume the client's TLS session rather than a full handshake. */
  e->share = kube__share_ref(c);
  if (e->share != NULL)
    curl_easy_setopt(e->easy, CURLOPT_SHARE, kube__share_handle(e->share));
  if ((rc = kube__easy_setup(c, e->easy, &e->headers, e->request_id)) != 0) {
    fail(e, rc, "exec: cannot set up the connection");
    return;
  }
  curl_easy_setopt(e->easy, CURLOPT_URL, e->url);
  curl_easy_setopt(e->easy, CURLOPT_CONNECT_ONLY, 1L);
  /* We speak HTTP/1.1 on the connection, so TLS ALPN must not offer h2 (a
   * Go apiserver would pick it). kube__easy_setup() sets this too. */
  curl_easy_setopt(e->easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  /* Through a proxy, tunnel even for http:// so we speak to the server. */
  curl_easy_setopt(e->easy, CURLOPT_HTTPPROXYTUNNEL, 1L);
  /* Never take over a pooled REST connection (curl never hands out a
   * connect-only one). Not FORBID_REUSE: that closes the connection as soon
   * as the connect "transfer" is done. */
  curl_easy_setopt(e->easy, CURLOPT_FRESH_CONNECT, 1L);
  curl_easy_setopt(e->easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e->easy, CURLOPT_ERRORBUFFER, e->errbuf);

  /* The upgrade request, written by us once connected. Headers from
   * kube__easy_setup (Authorization, X-Request-Id, ...) are copied; the
   * ones the upgrade owns are not. */
  {
    const struct fr_kube_client_opts *o = kube__opts(c);
    const char *ua = o != NULL && o->user_agent != NULL ? o->user_agent : DEFAULT_USER_AGENT;
    struct curl_slist *h;

    fr_ws_client_key(e->key);
    rc = fr_buf_printf(&e->head,
                       "GET %s HTTP/1.1\r\n"
                       "Host: %s\r\n"
                       "User-Agent: %s\r\n"
                       "Upgrade: websocket\r\n"
                       "Connection: Upgrade\r\n"
                       "Sec-WebSocket-Version: 13\r\n"
                       "Sec-WebSocket-Key: %s\r\n"
                       "Sec-WebSocket-Protocol: v5.channel.k8s.io, v4.channel.k8s.io\r\n",
                       e->target, e->host, ua, e->key);
    for (h = e->headers; h != NULL && rc == 0; h = h->next) {
      const char *colon = strchr(h->data, ':');
      const char *v = colon != NULL ? colon + 1 : NULL;
      size_t nl = colon != NULL ? (size_t)(colon - h->data) : 0;
      while (v != NULL && (*v == ' ' || *v == '\t'))
        v++;
      if (v == NULL || *v == '\0' || strpbrk(h->data, "\r\n") != NULL)
        continue; /* curl's "Name:" (remove) and "Name;" forms, or unsafe */
      if ((nl == 4 && ascii_casecmp_n(h->data, "Host", 4) == 0) ||
          (nl == 7 && ascii_casecmp_n(h->data, "Upgrade", 7) == 0) ||
          (nl == 10 && ascii_casecmp_n(h->data, "Connection", 10) == 0) ||
          (nl == 10 && ascii_casecmp_n(h->data, "User-Agent", 10) == 0) ||
          (nl == 6 && ascii_casecmp_n(h->data, "Expect", 6) == 0) ||
          (nl == 14 && ascii_casecmp_n(h->data, "Content-Length", 14) == 0) ||
          (nl == 12 && ascii_casecmp_n(h->data, "Content-Type", 12) == 0) ||
          (nl == 17 && ascii_casecmp_n(h->data, "Transfer-Encoding", 17) == 0) ||
          (nl >= 14 && ascii_casecmp_n(h->data, "Sec-WebSocket-", 14) == 0))
        continue;
      rc = fr_buf_printf(&e->head, "%.*s: %s\r\n", (int)nl, h->data, v);
    }
    if (rc == 0)
      rc = fr_buf_puts(&e->head, "\r\n");
    if (rc != 0) {
      fail(e, -ENOMEM, "out of memory");
      return;
    }
  }

  set_state(e, ST_CONNECTING);
  /* Adding calls the timer callback with 0: the connect starts from the
   * timer, on a later loop iteration. */
  if ((mc = curl_multi_add_handle(e->curl.multi, e->easy)) != CURLM_OK) {
    fail(e, mc == CURLM_OUT_OF_MEMORY ? -ENOMEM : -EINVAL, curl_multi_strerror(mc));
    return;
  }
}

/* Splits <server> ("https://host:port[/prefix]") into the URL curl
 * connects to, the Host header and the path prefix. */
static int split_server(const char *server, char **url, char **host, const char **prefix,
                        size_t *prefix_len) {
  const char *auth = strstr(server, "://"), *slash;
  size_t alen;

  if (auth == NULL)
    return -EINVAL;
  auth += 3;
  slash = strchr(auth, '/');
  alen = slash != NULL ? (size_t)(slash - auth) : strlen(auth);
  if (alen == 0)
    return -EINVAL;
  *prefix = slash != NULL ? slash : "";
  *prefix_len = strlen(*prefix);
  while (*prefix_len > 0 && (*prefix)[*prefix_len - 1] == '/')
    (*prefix_len)--;
  *url = malloc((size_t)(auth - server) + alen + 2);
  *host = malloc(alen + 1);
  if (*url == NULL || *host == NULL)
    return -ENOMEM;
  memcpy(*url, server, (size_t)(auth - server) + alen);
  memcpy(*url + (auth - server) + alen, "/", 2);
  memcpy(*host, auth, alen);
  (*host)[alen] = '\0';
  return 0;
}

/* Starts an exec (fr/kube.h and the codes at the top). <ns>, <pod>,
 * <opts> and everything they point to are copied (stdin included), so they
 * need not outlive the call. Returns 0 with the call in <*out> (may be
 * NULL) and <cb> called exactly once later unless cancelled; or -EINVAL
 * (bad arguments, unusable server URL) / -ECANCELED (the client is being
 * freed) / -ENOMEM / kube__creds_wait()'s error, with <cb> never called. */
int fr_kube_exec(struct fr_kube_client *c, const char *ns, const char *pod, const struct fr_kube_exec_opts *opts,
                 fr_kube_exec_cb cb, void *arg, struct fr_kube_call **out) {
  struct kube_exec *e;
  struct fr_buf t;
  const char *prefix;
  size_t prefix_len;
  int rc;

  if (c == NULL)
    return -EINVAL;
  if (kube__closing(c))
    return -ECANCELED;
  /* Names only: a namespace is a DNS label, a pod name a DNS subdomain
   * (never "..", which a server would normalize away). */
  if (c == NULL || !fr_dns_label(ns) || !fr_dns_subdomain(pod) || opts == NULL ||
      opts->argv == NULL || opts->argv[0] == NULL || cb == NULL ||
      (opts->stdin_data == NULL && opts->stdin_len != 0))
    return -EINVAL;

  e = calloc(1, sizeof(*e));
  if (e == NULL)
    return -ENOMEM;
  e->client = c;
  e->loop = kube__loop(c);
  e->state = ST_CREDS;
  e->cb = cb;
  e->arg = arg;
  e->start_ns = uv_hrtime();
  e->max_out = opts->max_stdout;
  e->budget = opts->budget;
  e->max_err = opts->max_stderr;
  e->timeout_ms = opts->timeout_ms;
  e->call.client = c;
  e->call.cancel = exec_cancel;
  fr_buf_init(&e->wq);
  fr_buf_init(&e->head);
  fr_buf_init(&e->out);
  fr_buf_init(&e->err);
  fr_buf_init(&e->status);
  fr_buf_init(&t);

  if (kube__server(c) == NULL) {
    rc = -EINVAL;
    goto fail;
  }
  rc = split_server(kube__server(c), &e->url, &e->host, &prefix, &prefix_len);
  if (rc != 0)
    goto fail;
  rc = fr_buf_append(&t, prefix, prefix_len);
  if (rc == 0)
    rc = fr_buf_puts(&t, "/api/v1/namespaces/");
  if (rc == 0)
    rc = put_escaped(&t, ns);
  if (rc == 0)
    rc = fr_buf_puts(&t, "/pods/");
  if (rc == 0)
    rc = put_escaped(&t, pod);
  if (rc == 0)
    rc = fr_buf_puts(&t, "/exec?");
  for (size_t i = 0; rc == 0 && opts->argv[i] != NULL; i++) {
    rc = fr_buf_puts(&t, i == 0 ? "command=" : "&command=");
    if (rc == 0)
      rc = put_escaped(&t, opts->argv[i]);
  }
  if (rc == 0 && opts->container != NULL) {
    rc = fr_buf_puts(&t, "&container=");
    if (rc == 0)
      rc = put_escaped(&t, opts->container);
  }
  if (rc == 0 && opts->stdin_data != NULL)
    rc = fr_buf_puts(&t, "&stdin=true");
  if (rc == 0)
    rc = fr_buf_puts(&t, "&stdout=true&stderr=true");
  if (rc != 0)
    goto fail;
  e->target = fr_buf_detach(&t, NULL);
  if (e->target == NULL) {
    rc = -ENOMEM;
    goto fail;
  }
  if (opts->request_id != NULL && (e->request_id = strdup(opts->request_id)) == NULL) {
    rc = -ENOMEM;
    goto fail;
  }
  if (opts->stdin_data != NULL) {
    e->has_stdin = 1;
    e->stdin_len = opts->stdin_len;
    if (opts->stdin_len > 0) {
      if ((e->stdin_copy = malloc(opts->stdin_len)) == NULL) {
        rc = -ENOMEM;
        goto fail;
      }
      memcpy(e->stdin_copy, opts->stdin_data, opts->stdin_len);
    }
  }

  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    rc = -ENOMEM;
    goto fail;
  }
  e->curl_ref = 1;

  /* From here the handles exist: failures go through finish(e, 0). */
  uv_idle_init(e->loop, &e->resume);
  uv_timer_init(e->loop, &e->deadline);
  e->resume.data = e;
  e->deadline.data = e;
  e->handles = 2;
  kube__call_track(c, &e->call);
  if (e->timeout_ms > 0)
    uv_timer_start(&e->deadline, on_deadline, e->timeout_ms, 0);
  e->creds_pending = 1;
  rc = kube__creds_wait(kube__creds(c), on_creds, e);
  if (rc != 0) {
    e->creds_pending = 0;
    finish(e, 0);
    return rc;
  }
  if (out != NULL)
    *out = &e->call;
  return 0;

fail:
  fr_buf_free(&t);
  destroy(e);
  return rc;
}
