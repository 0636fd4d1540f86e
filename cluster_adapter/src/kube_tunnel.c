/* kube_tunnel.c - an HTTP/1.1 upgrade through the API server, passed on as
 * raw bytes (fr_kube_tunnel_start() in fr/kube.h): what a sandbox port's
 * WebSocket (or any other Upgrade) rides on through pods/proxy.
 *
 * Transport as in kube_exec.c: an easy handle with CURLOPT_CONNECT_ONLY
 * does DNS, TCP, the proxy tunnel and TLS with the client's settings,
 * driven without blocking through a private multi handle on the loop
 * (fr/curluv.h); then we write the request head ourselves and move bytes
 * with curl_easy_send/_recv from our own uv_poll on the socket (reads loop
 * until CURLE_AGAIN since TLS may hold decrypted bytes; a send that
 * returned CURLE_AGAIN is retried with the same bytes from a fixed staging
 * array).
 *
 *   CREDS -> CONNECTING -> REQUEST -> OPEN -> DONE
 *                                  \-> ANSWERED (not 101: its body, bounded)
 *   any state -> DONE (on_done delivered, or cancelled)
 *
 * Bounds: the response head (MAX_HEAD), a refused answer's body
 * (MAX_ANSWER_BODY); while open, nothing is buffered here beyond what the
 * caller queued (fr_kube_tunnel_pending(), which it keeps bounded) and one
 * read (READ_BUF) handed to on_data, which may pause reading.
 */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <uv.h>

#include "fr/buf.h"
#include "fr/curluv.h"
#include "fr/log.h"
#include "fr/turn.h"
#include "fr/util.h"
#include "fr/version.h"
#include "kube_internal.h"

#define LOG_COMP "kube-tunnel"

#define DEFAULT_USER_AGENT "fedrouter/" FR_VERSION
#define MAX_HEAD 16384           /* response head */
#define MAX_ANSWER_BODY 65536    /* a refused upgrade's body */
#define READ_BUF 16384
#define READS_PER_TURN 16
#define WQ_COMPACT ((size_t)256 << 10) /* sent bytes kept at the queue's front at most */

enum tunnel_state { ST_CREDS, ST_CONNECTING, ST_REQUEST, ST_ANSWERED, ST_OPEN, ST_DONE };

static const char *const state_names[] = {"CREDS", "CONNECTING", "REQUEST", "ANSWERED", "OPEN", "DONE"};

struct fr_kube_tunnel {
  struct fr_kube_call call;
  struct fr_kube_client *client;   /* not touched after DONE */
  uv_loop_t *loop;
  enum tunnel_state state;
  struct fr_kube_tunnel_opts o;    /* callbacks and arg only */

  char *url;                       /* scheme://authority/ */
  char *request_id;

  struct fr_curluv curl;
  int curl_init;
  CURL *easy;
  struct curl_slist *headers;
  char errbuf[CURL_ERROR_SIZE];
  uv_poll_t io;
  int io_open;
  uv_idle_t resume;
  unsigned handles;
  int creds_pending;
  int curl_ref;
  struct kube_share *share;

  struct fr_buf wq;                /* to the server: the request head, then the caller's bytes */
  size_t wq_off;
  char stage[16384];
  size_t stage_len, stage_off;
  int ending;                      /* fr_kube_tunnel_end(): close once written */
  int paused;                      /* the caller paused reading */
  int drain_wanted;                /* on_drain once the queue empties */

  struct fr_buf in;                /* the response head, then a refused answer */
  size_t head_len;
  int status;
  long long clen;                  /* a refused answer's Content-Length, -1 if none */
  int chunked;
  int error;
  char message[400];
};

static void on_poll(uv_poll_t *p, int status, int events);
static void on_creds(struct fr_kube_client *c, int status, void *arg);
static void io_update(struct fr_kube_tunnel *t);
static void io_step(struct fr_kube_tunnel *t, int readable, int writable);
static void on_resume_read(uv_idle_t *h);

static void set_state(struct fr_kube_tunnel *t, enum tunnel_state s) {
  FR_DEBUG(LOG_COMP, "tunnel %p: %s -> %s", (void *)t, state_names[t->state], state_names[s]);
  t->state = s;
}

static void destroy(struct fr_kube_tunnel *t) {
  kube_share_unref(t->share);
  curl_slist_free_all(t->headers);
  if (t->curl_ref)
    curl_global_cleanup();
  fr_buf_free(&t->wq);
  fr_buf_free(&t->in);
  free(t->url);
  free(t->request_id);
  free(t);
}

static void maybe_destroy(struct fr_kube_tunnel *t) {
  if (t->state == ST_DONE && t->handles == 0 && !t->creds_pending)
    destroy(t);
}

static void on_handle_close(uv_handle_t *h) {
  struct fr_kube_tunnel *t = h->data;

  t->handles--;
  maybe_destroy(t);
}

static void on_curl_closed(struct fr_curluv *cu) {
  struct fr_kube_tunnel *t = fr_container_of(cu, struct fr_kube_tunnel, curl);

  t->handles--;
  maybe_destroy(t);
}

static void curl_close(struct fr_kube_tunnel *t) {
  if (!t->curl_init)
    return;
  t->curl_init = 0;
  if (t->easy != NULL) {
    curl_multi_remove_handle(t->curl.multi, t->easy);
    curl_easy_cleanup(t->easy);
    t->easy = NULL;
  }
  fr_curluv_close(&t->curl, on_curl_closed);
}

/* Enters DONE, closes every handle and, if <deliver>, calls on_done (which
 * may do anything: nothing here touches the client afterwards). */
static void finish(struct fr_kube_tunnel *t, int deliver) {
  struct fr_kube_tunnel_result res;

  if (t->state == ST_DONE)
    return;
  set_state(t, ST_DONE);
  if (t->creds_pending) {
    kube_creds_unwait(t->client, on_creds, t);
    t->creds_pending = 0;
  }
  kube_call_untrack(&t->call);
  t->client = NULL;
  if (t->io_open) {
    t->io_open = 0;
    uv_close((uv_handle_t *)&t->io, on_handle_close);
  }
  curl_close(t);
  uv_close((uv_handle_t *)&t->resume, on_handle_close);
  if (!deliver)
    return;
  memset(&res, 0, sizeof(res));
  res.error = t->error;
  res.http_status = t->status;
  res.message = t->message[0] != '\0' ? t->message : NULL;
  if (t->head_len > 0 && t->in.len >= t->head_len && t->status != 101) {
    res.head = t->in.data;
    res.head_len = t->head_len;
    res.body = t->in.data + t->head_len;
    res.body_len = t->in.len - t->head_len;
  }
  t->o.on_done(&res, t->o.arg);
}

/* Ends with <error> and the message "<msg>[: <detail>]". */
static void fail(struct fr_kube_tunnel *t, int error, const char *msg, const char *detail) {
  if (t->error == 0) {
    t->error = error;
    snprintf(t->message, sizeof(t->message), "%s%s%s", msg, detail != NULL ? ": " : "", detail != NULL ? detail : "");
  }
  finish(t, 1);
}

static void tunnel_cancel(struct fr_kube_call *call) {
  finish(fr_container_of(call, struct fr_kube_tunnel, call), 0);
}

/* ---- writing ---- */

size_t fr_kube_tunnel_pending(const struct fr_kube_tunnel *t) {
  return t->wq.len - t->wq_off + t->stage_len - t->stage_off;
}

/* Sends what it can without blocking; a send error ends the tunnel. */
static void flush(struct fr_kube_tunnel *t) {
  while (t->state != ST_DONE) {
    CURLcode cc;
    size_t n = 0;

    if (t->stage_off == t->stage_len) {
      if (t->wq_off == t->wq.len) {
        fr_buf_reset(&t->wq);
        t->wq_off = 0;
        return;
      }
      n = t->wq.len - t->wq_off;
      if (n > sizeof(t->stage))
        n = sizeof(t->stage);
      memcpy(t->stage, t->wq.data + t->wq_off, n);
      t->wq_off += n;
      if (t->wq_off >= WQ_COMPACT) {
        /* A queue refilled before it empties: give the sent part back. */
        fr_buf_consume(&t->wq, t->wq_off);
        t->wq_off = 0;
      }
      t->stage_len = n;
      t->stage_off = 0;
    }
    cc = curl_easy_send(t->easy, t->stage + t->stage_off, t->stage_len - t->stage_off, &n);
    if (cc == CURLE_AGAIN)
      return;
    if (cc != CURLE_OK) {
      fail(t, -ECONNRESET, "the connection to the API server failed",
           curl_easy_strerror(cc));
      return;
    }
    t->stage_off += n;
  }
}

/* ---- reading ---- */

static void parse_head(struct fr_kube_tunnel *t) {
  const char *p = t->in.data, *end = t->in.data + t->head_len - 2, *eol;

  if (t->head_len < 12 || strncmp(p, "HTTP/1.", 7) != 0 || p[8] != ' ' || p[9] < '1' || p[9] > '5' ||
      !isdigit((unsigned char)p[10]) || !isdigit((unsigned char)p[11])) {
    fail(t, -EPROTO, "malformed HTTP response from the API server", NULL);
    return;
  }
  t->status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
  t->clen = -1;
  for (p = memchr(p, '\n', (size_t)(end - p)); p != NULL && p + 1 < end; p = eol) {
    const char *v, *ve;
    p++;
    eol = memchr(p, '\n', (size_t)(end - p) + 1);
    if (eol == NULL)
      break;
    ve = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
    if ((size_t)(ve - p) > 15 && strncasecmp(p, "Content-Length:", 15) == 0) {
      char num[24];
      int64_t v64;
      size_t l;
      for (v = p + 15; v < ve && (*v == ' ' || *v == '\t'); v++)
        ;
      l = (size_t)(ve - v);
      if (l < sizeof(num)) {
        memcpy(num, v, l);
        num[l] = '\0';
        if (fr_parse_int64(num, 0, INT64_MAX, &v64) == 0)
          t->clen = v64;
      }
    } else if ((size_t)(ve - p) > 18 && strncasecmp(p, "Transfer-Encoding:", 18) == 0) {
      t->chunked = 1;
    }
  }
}

/* A refused upgrade: done once its body is whole (Content-Length), at the
 * bound, or at EOF (chunked or unframed bodies: the server closes after a
 * refused upgrade). */
static void check_answered(struct fr_kube_tunnel *t) {
  size_t blen = t->in.len - t->head_len;

  if ((t->clen >= 0 && (long long)blen >= t->clen) || blen >= MAX_ANSWER_BODY) {
    if (t->clen >= 0 && (long long)blen > t->clen)
      t->in.len = t->head_len + (size_t)t->clen;
    finish(t, 1);
  }
}

static void on_bytes(struct fr_kube_tunnel *t, const char *data, size_t len) {
  size_t before = t->in.len, i;

  if (t->state == ST_OPEN) {
    int rc = t->o.on_data(data, len, t->o.arg);
    if (rc == FR_KUBE_TUNNEL_PAUSE && t->state == ST_OPEN)
      t->paused = 1;
    return;
  }
  if (fr_buf_append(&t->in, data, len) != 0) {
    fail(t, -ENOMEM, "out of memory", NULL);
    return;
  }
  if (t->state == ST_ANSWERED) {
    check_answered(t);
    return;
  }
  for (i = before > 3 ? before - 3 : 0; i + 4 <= t->in.len; i++)
    if (memcmp(t->in.data + i, "\r\n\r\n", 4) == 0)
      break;
  if (i + 4 > t->in.len) {
    if (t->in.len > MAX_HEAD)
      fail(t, -EPROTO, "oversized response head from the API server", NULL);
    return;
  }
  t->head_len = i + 4;
  parse_head(t);
  if (t->state == ST_DONE)
    return;
  if (t->status != 101) {
    set_state(t, ST_ANSWERED);
    check_answered(t);
    return;
  }
  /* Switched: the caller gets the head, then what came after it. */
  set_state(t, ST_OPEN);
  t->o.on_open(t->in.data, t->head_len, t->o.arg);
  if (t->state == ST_OPEN && t->in.len > t->head_len) {
    struct fr_buf rest = t->in;
    fr_buf_init(&t->in);
    on_bytes(t, rest.data + t->head_len, rest.len - t->head_len);
    fr_buf_free(&rest);
  } else {
    fr_buf_free(&t->in);
  }
}

static void on_eof(struct fr_kube_tunnel *t, const char *why) {
  switch (t->state) {
  case ST_REQUEST:
    fail(t, -ECONNRESET, "the API server closed the connection before answering the upgrade", why);
    break;
  case ST_ANSWERED:
  case ST_OPEN:
    finish(t, 1); /* the end of a refused answer, or of the tunnel */
    break;
  default:
    break;
  }
}

static void do_read(struct fr_kube_tunnel *t) {
  char buf[READ_BUF];

  for (int turn = 0; t->state != ST_DONE && !t->paused; turn++) {
    CURLcode cc;
    size_t n = 0;

    if (turn == READS_PER_TURN) {
      /* Let the loop breathe; TLS may hold more than the poll reports. */
      uv_idle_start(&t->resume, on_resume_read);
      return;
    }
    cc = curl_easy_recv(t->easy, buf, sizeof(buf), &n);
    if (cc == CURLE_AGAIN)
      return;
    if (cc != CURLE_OK) {
      on_eof(t, curl_easy_strerror(cc));
      return;
    }
    if (n == 0) {
      on_eof(t, "EOF");
      return;
    }
    on_bytes(t, buf, n);
  }
}

/* ---- the connection's poll ---- */

static void io_step(struct fr_kube_tunnel *t, int readable, int writable) {
  size_t before = t->state != ST_DONE ? fr_kube_tunnel_pending(t) : 0;

  if (writable && t->state != ST_DONE)
    flush(t);
  if (readable && t->state != ST_DONE)
    do_read(t);
  if (t->state != ST_DONE)
    flush(t);
  if (t->state == ST_DONE)
    return;
  if (t->ending && fr_kube_tunnel_pending(t) == 0) {
    finish(t, 1); /* our side is over and everything went out */
    return;
  }
  if (t->state == ST_OPEN && t->drain_wanted && fr_kube_tunnel_pending(t) == 0 && before > 0) {
    t->drain_wanted = 0;
    if (t->o.on_drain != NULL)
      t->o.on_drain(t->o.arg);
    if (t->state == ST_DONE)
      return;
  }
  io_update(t);
}

static void io_update(struct fr_kube_tunnel *t) {
  int events = 0;

  if (!t->io_open || t->state == ST_DONE)
    return;
  if (!t->paused)
    events |= UV_READABLE;
  if (fr_kube_tunnel_pending(t) > 0)
    events |= UV_WRITABLE;
  if (events == 0)
    uv_poll_stop(&t->io);
  else
    uv_poll_start(&t->io, events, on_poll);
}

static void on_resume_read(uv_idle_t *h) {
  struct fr_kube_tunnel *t = fr_container_of(h, struct fr_kube_tunnel, resume);

  if (!fr_turn_take(t->loop))
    return;
  uv_idle_stop(h);
  if (t->state != ST_DONE)
    io_step(t, 1, 0);
}

static void on_poll(uv_poll_t *p, int status, int events) {
  struct fr_kube_tunnel *t = fr_container_of(p, struct fr_kube_tunnel, io);

  if (t->state == ST_DONE)
    return;
  if (!fr_turn_take(t->loop)) {
    uv_poll_stop(p);
    if (!uv_is_active((uv_handle_t *)&t->resume))
      uv_idle_start(&t->resume, on_resume_read);
    return;
  }
  io_step(t, status < 0 || (events & UV_READABLE), status >= 0 && (events & UV_WRITABLE));
  if (status < 0 && t->state != ST_DONE)
    on_eof(t, uv_strerror(status));
}

/* ---- the caller's side ---- */

int fr_kube_tunnel_write(struct fr_kube_tunnel *t, const void *data, size_t len) {
  if (t == NULL || t->state != ST_OPEN || t->ending)
    return -EPIPE;
  if (len == 0)
    return 0;
  if (fr_buf_append(&t->wq, data, len) != 0)
    return -ENOMEM;
  t->drain_wanted = 1;
  /* Written from the poll (writable), not from inside the caller. */
  io_update(t);
  return 0;
}

void fr_kube_tunnel_pause(struct fr_kube_tunnel *t, int pause) {
  if (t == NULL || t->state != ST_OPEN || t->paused == (pause != 0))
    return;
  t->paused = pause != 0;
  io_update(t);
  /* TLS may hold decrypted bytes the poll will not report. */
  if (!t->paused && !uv_is_active((uv_handle_t *)&t->resume))
    uv_idle_start(&t->resume, on_resume_read);
}

int fr_kube_tunnel_end(struct fr_kube_tunnel *t) {
  if (t == NULL || t->state != ST_OPEN)
    return -EPIPE;
  t->ending = 1;
  io_update(t);
  if (!uv_is_active((uv_handle_t *)&t->resume))
    uv_idle_start(&t->resume, on_resume_read); /* finishes from the loop if nothing is queued */
  return 0;
}

void fr_kube_tunnel_cancel(struct fr_kube_tunnel *t) {
  if (t != NULL)
    finish(t, 0);
}

/* ---- connecting ---- */

static void on_curl_done(struct fr_curluv *cu, CURL *easy, CURLcode cc) {
  struct fr_kube_tunnel *t = fr_container_of(cu, struct fr_kube_tunnel, curl);
  curl_socket_t fd = CURL_SOCKET_BAD;

  (void)easy;
  if (t->state != ST_CONNECTING)
    return;
  fr_curluv_stop(&t->curl);
  if (cc != CURLE_OK) {
    snprintf(t->message, sizeof(t->message), "cannot connect to %s: %s", t->url,
             t->errbuf[0] != '\0' ? t->errbuf : curl_easy_strerror(cc));
    t->error = cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -ECONNREFUSED;
    finish(t, 1);
    return;
  }
  if (curl_easy_getinfo(t->easy, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK || fd == CURL_SOCKET_BAD) {
    fail(t, -ECONNRESET, "the connection was lost right after connecting", NULL);
    return;
  }
  if (uv_poll_init_socket(t->loop, &t->io, fd) != 0) {
    fail(t, -ENOMEM, "cannot watch the connection", NULL);
    return;
  }
  t->io.data = t;
  t->io_open = 1;
  t->handles++;
  set_state(t, ST_REQUEST);
  io_step(t, 1, 1);
}

static void on_creds(struct fr_kube_client *c, int status, void *arg) {
  struct fr_kube_tunnel *t = arg;
  const struct fr_kube_client_opts *ko;
  struct curl_slist *h;
  struct fr_buf extra;
  CURLMcode mc;
  int rc;

  t->creds_pending = 0;
  if (t->state != ST_CREDS) {
    maybe_destroy(t);
    return;
  }
  if (status < 0) {
    t->error = status;
    snprintf(t->message, sizeof(t->message), "no credentials for cluster %s: %s", kube_name(c),
             kube_creds_error(c));
    finish(t, 1);
    return;
  }
  if (fr_curluv_init(t->loop, &t->curl, on_curl_done, NULL) != 0) {
    fail(t, -ENOMEM, "out of memory", NULL);
    return;
  }
  t->curl_init = 1;
  t->handles++;
  if ((t->easy = curl_easy_init()) == NULL) {
    fail(t, -ENOMEM, "out of memory", NULL);
    return;
  }
  t->share = kube_share_ref(c);
  if (t->share != NULL)
    curl_easy_setopt(t->easy, CURLOPT_SHARE, kube_share_handle(t->share));
  if ((rc = kube_easy_setup(c, t->easy, &t->headers, t->request_id)) != 0) {
    fail(t, rc, "cannot set up the connection", NULL);
    return;
  }
  curl_easy_setopt(t->easy, CURLOPT_URL, t->url);
  curl_easy_setopt(t->easy, CURLOPT_CONNECT_ONLY, 1L);
  curl_easy_setopt(t->easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(t->easy, CURLOPT_HTTPPROXYTUNNEL, 1L);
  curl_easy_setopt(t->easy, CURLOPT_FRESH_CONNECT, 1L);
  curl_easy_setopt(t->easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(t->easy, CURLOPT_ERRORBUFFER, t->errbuf);
  /* The client's credentials (Authorization, ...) as kube_easy_setup put
   * them for curl, added to the head the caller built (wq). */
  ko = kube_opts(c);
  fr_buf_init(&extra);
  rc = fr_buf_printf(&extra, "User-Agent: %s\r\n",
                     ko != NULL && ko->user_agent != NULL ? ko->user_agent : DEFAULT_USER_AGENT);
  for (h = t->headers; h != NULL && rc == 0; h = h->next) {
    const char *colon = strchr(h->data, ':'), *v = colon != NULL ? colon + 1 : NULL;
    size_t nl = colon != NULL ? (size_t)(colon - h->data) : 0;
    while (v != NULL && (*v == ' ' || *v == '\t'))
      v++;
    if (v == NULL || *v == '\0' || strpbrk(h->data, "\r\n") != NULL ||
        (nl == 4 && strncasecmp(h->data, "Host", 4) == 0) || (nl == 10 && strncasecmp(h->data, "Connection", 10) == 0) ||
        (nl == 7 && strncasecmp(h->data, "Upgrade", 7) == 0) || (nl == 10 && strncasecmp(h->data, "User-Agent", 10) == 0) ||
        (nl == 6 && strncasecmp(h->data, "Expect", 6) == 0) || (nl == 14 && strncasecmp(h->data, "Content-Length", 14) == 0) ||
        (nl == 12 && strncasecmp(h->data, "Content-Type", 12) == 0) ||
        (nl == 17 && strncasecmp(h->data, "Transfer-Encoding", 17) == 0))
      continue;
    rc = fr_buf_printf(&extra, "%.*s: %s\r\n", (int)nl, h->data, v);
  }
  if (rc == 0)
    rc = fr_buf_puts(&extra, "\r\n");
  /* wq holds the head up to its last header line; ours end it. */
  if (rc == 0)
    rc = fr_buf_append(&t->wq, extra.data, extra.len);
  fr_buf_free(&extra);
  if (rc != 0) {
    fail(t, -ENOMEM, "out of memory", NULL);
    return;
  }
  set_state(t, ST_CONNECTING);
  if ((mc = curl_multi_add_handle(t->curl.multi, t->easy)) != CURLM_OK)
    fail(t, mc == CURLM_OUT_OF_MEMORY ? -ENOMEM : -EINVAL, "cannot start the connection", curl_multi_strerror(mc));
}

/* A header block of "Name: value" lines ('\n'-separated, no CR) whose
 * names and values are safe to put in a head. */
static int headers_ok(const char *h) {
  for (; h != NULL && *h != '\0';) {
    size_t n = strcspn(h, "\n"), k = strcspn(h, ":\n");
    if (k == 0 || k == n || memchr(h, '\r', n) != NULL)
      return 0;
    for (size_t i = 0; i < k; i++)
      if (!isgraph((unsigned char)h[i]))
        return 0;
    h += n + (h[n] == '\n');
  }
  return 1;
}

int fr_kube_tunnel_start(struct fr_kube_client *c, const struct fr_kube_tunnel_opts *o, struct fr_kube_tunnel **out) {
  struct fr_kube_tunnel *t;
  const char *server, *auth, *slash;
  size_t alen, plen;
  int rc;

  if (out != NULL)
    *out = NULL;
  if (c == NULL || o == NULL || o->method == NULL || o->target == NULL || o->target[0] != '/' ||
      strpbrk(o->method, " \r\n") != NULL || strpbrk(o->target, " \r\n\t") != NULL || !headers_ok(o->headers) ||
      o->on_open == NULL || o->on_data == NULL || o->on_done == NULL || (server = kube_server(c)) == NULL ||
      (auth = strstr(server, "://")) == NULL)
    return -EINVAL;
  auth += 3;
  slash = strchr(auth, '/');
  alen = slash != NULL ? (size_t)(slash - auth) : strlen(auth);
  plen = slash != NULL ? strlen(slash) : 0;
  while (plen > 0 && slash[plen - 1] == '/')
    plen--;
  if (alen == 0)
    return -EINVAL;
  if ((t = calloc(1, sizeof(*t))) == NULL)
    return -ENOMEM;
  t->client = c;
  t->loop = kube_loop(c);
  t->state = ST_CREDS;
  t->o.on_open = o->on_open;
  t->o.on_data = o->on_data;
  t->o.on_drain = o->on_drain;
  t->o.on_done = o->on_done;
  t->o.arg = o->arg;
  t->call.client = c;
  t->call.cancel = tunnel_cancel;
  fr_buf_init(&t->wq);
  fr_buf_init(&t->in);
  rc = (t->url = malloc((size_t)(auth - server) + alen + 2)) == NULL ? -ENOMEM : 0;
  if (rc == 0) {
    memcpy(t->url, server, (size_t)(auth - server) + alen);
    memcpy(t->url + (auth - server) + alen, "/", 2);
  }
  if (rc == 0 && o->request_id != NULL && (t->request_id = strdup(o->request_id)) == NULL)
    rc = -ENOMEM;
  /* The head up to its last line: the request line, Host, the caller's
   * headers (on_creds adds the credentials and the blank line). */
  if (rc == 0)
    rc = fr_buf_printf(&t->wq, "%s %.*s%s HTTP/1.1\r\nHost: %.*s\r\n", o->method, (int)plen,
                       slash != NULL ? slash : "", o->target, (int)alen, auth);
  for (const char *h = o->headers; rc == 0 && h != NULL && *h != '\0';) {
    size_t n = strcspn(h, "\n");
    rc = fr_buf_printf(&t->wq, "%.*s\r\n", (int)n, h);
    h += n + (h[n] == '\n');
  }
  if (rc == 0 && curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
    rc = -ENOMEM;
  if (rc != 0) {
    destroy(t);
    return rc;
  }
  t->curl_ref = 1;
  uv_idle_init(t->loop, &t->resume);
  t->resume.data = t;
  t->handles = 1;
  kube_call_track(c, &t->call);
  t->creds_pending = 1;
  if ((rc = kube_creds_wait(c, on_creds, t)) != 0) {
    t->creds_pending = 0;
    finish(t, 0);
    return rc;
  }
  if (out != NULL)
    *out = t;
  return 0;
}
