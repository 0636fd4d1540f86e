/* porttunnel.c - WebSocket and other HTTP/1.1 upgrades to a sandbox's own
 * ports (docs/api.md "Ports"): the client's upgrade request goes through
 * the cluster's pod proxy on a connection of its own
 * (fr_adapter_port_tunnel), the sandbox's 101 comes back as it was sent,
 * then bytes flow both ways unmodified (fr_http_tunnel_* towards the
 * client) until either side ends.
 *
 *   CONNECTING (deferred request) -> OPEN (tunnel) -> freed
 *              \-> answered (not 101, an error, the client left)
 *
 * Bounds: open tunnels per tenant and per router (ports.max_tunnels_per_
 * tenant, ports.max_tunnels: 429 past them), counted from admission to the
 * end; each direction holds at most HIGH_WATER plus one read before it
 * stops reading its source (a client that does not read does not grow the
 * router's memory, nor does a sandbox that does not); an idle tunnel (no
 * byte either way for ports.tunnel_idle_timeout_s) is closed, and an
 * upgrade the sandbox does not answer within as long gets 504.
 *
 * Ends: the sandbox's end (EOF) becomes a FIN to the client once every
 * byte before it is out; the client's FIN ends the upstream connection
 * once every byte before it is written (TLS to the API server has no
 * half-close). The tunnel is freed when both are over, or at once on an
 * error either side.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/config.h"
#include "fr/http.h"
#include "fr/kube.h"
#include "fr/log.h"
#include "fr/util.h"
#include "api.h"
#include "router.h"
#include "tenants.h"
#include "porttunnel.h"

#define LOGC "ports"
/* Bytes queued one way before its source is no longer read. */
#define HIGH_WATER ((size_t)1 << 20)
#define LOW_WATER ((size_t)256 << 10)

struct ptun {
  struct router *r;
  struct api_req *q;             /* while connecting: the deferred request (a reference) */
  struct fr_http_req *req;       /* once open: the client's connection (NULL once it ended) */
  struct fr_kube_tunnel *t;      /* the upstream (NULL once it ended) */
  struct tenant_state *ts;       /* whose count this is (a reference) */
  void (*done)(void *arg);       /* the caller's "call over", once at the free */
  void *done_arg;
  int port;
  uv_timer_t idle;
  uint64_t idle_ms, last_ms;
  int client_paused;             /* we hold the client's bytes back (upstream queue full) */
  int up_paused;                 /* we stopped reading the upstream (client queue full) */
  int closing;
  uint64_t up_bytes, down_bytes;
};

static void on_idle_closed(uv_handle_t *h) {
  struct ptun *p = h->data;

  p->r->port_tunnels--;
  if (p->ts != NULL)
    p->ts->port_tunnels--;
  tenant_unref(p->ts);
  if (p->done != NULL)
    p->done(p->done_arg);
  free(p);
}

/* Frees <p> once nothing of it is in use: both sides over. */
static void maybe_free(struct ptun *p) {
  if (p->closing || p->t != NULL || p->req != NULL || p->q != NULL)
    return;
  p->closing = 1;
  FR_DEBUG(LOGC, "tunnel to port %d over: %" PRIu64 " bytes up, %" PRIu64 " down", p->port, p->up_bytes,
           p->down_bytes);
  uv_close((uv_handle_t *)&p->idle, on_idle_closed);
}

/* Ends everything at once (an error, the idle timeout). */
static void drop(struct ptun *p) {
  struct fr_http_req *req = p->req;

  p->req = NULL;
  if (req != NULL) {
    req->data = NULL;
    fr_http_abort(req);
  }
  if (p->t != NULL) {
    fr_kube_tunnel_cancel(p->t);
    p->t = NULL;
  }
  maybe_free(p);
}

static void touch(struct ptun *p) {
  p->last_ms = uv_now(p->r->loop);
}

static void on_idle(uv_timer_t *h) {
  struct ptun *p = h->data;
  uint64_t now = uv_now(p->r->loop);

  if (p->closing)
    return;
  if (now - p->last_ms < p->idle_ms) {
    uv_timer_start(&p->idle, on_idle, p->idle_ms - (now - p->last_ms), 0);
    return;
  }
  if (p->q != NULL) {
    /* The sandbox took the connection but never answered the upgrade. */
    struct api_req *q = p->q;
    char msg[200];
    p->q = NULL;
    fr_kube_tunnel_cancel(p->t);
    p->t = NULL;
    snprintf(msg, sizeof(msg), "port %d of the sandbox did not answer the upgrade within %" PRIu64 " s", p->port,
             p->idle_ms / 1000);
    api_fail(q, 504, "port_timeout", msg, NULL);
    maybe_free(p);
    return;
  }
  FR_INFO(LOGC, "tunnel to port %d idle for %" PRIu64 " ms: closed", p->port, p->idle_ms);
  drop(p);
}

/* ---------------------------------------------------------------------- */
/* client -> sandbox                                                       */

static void on_client_data(struct fr_http_req *req, const char *data, size_t len) {
  struct ptun *p = req->data;

  if (p == NULL)
    return;
  touch(p);
  if (data == NULL) {
    /* The client is done sending: the upstream closes once written. */
    if (p->t != NULL && fr_kube_tunnel_end(p->t) != 0)
      drop(p);
    return;
  }
  if (p->t == NULL)
    return; /* the sandbox ended: its FIN is on its way to the client */
  if (fr_kube_tunnel_write(p->t, data, len) != 0) {
    drop(p);
    return;
  }
  p->up_bytes += len;
  if (!p->client_paused && fr_kube_tunnel_pending(p->t) > HIGH_WATER) {
    p->client_paused = 1;
    fr_http_tunnel_pause(req, 1);
  }
}

static void on_up_drain(void *arg) {
  struct ptun *p = arg;

  if (p->client_paused && p->req != NULL) {
    p->client_paused = 0;
    fr_http_tunnel_pause(p->req, 0);
  }
}

static void on_client_end(struct fr_http_req *req, int err) {
  struct ptun *p = req->data;

  if (p == NULL)
    return;
  p->req = NULL; /* freed by the server when we return */
  (void)err;     /* a clean end comes after the upstream's; either way it is of no more use */
  if (p->t != NULL) {
    fr_kube_tunnel_cancel(p->t);
    p->t = NULL;
  }
  maybe_free(p);
}

/* ---------------------------------------------------------------------- */
/* sandbox -> client                                                       */

static void on_client_drain(struct fr_http_req *req) {
  struct ptun *p = req->data;

  if (p == NULL || !p->up_paused)
    return;
  p->up_paused = 0;
  if (p->t != NULL)
    fr_kube_tunnel_pause(p->t, 0);
}

static int on_up_data(const char *data, size_t len, void *arg) {
  struct ptun *p = arg;

  touch(p);
  if (p->req == NULL)
    return FR_KUBE_TUNNEL_PAUSE; /* nobody to give them to; the end follows */
  if (fr_http_tunnel_write(p->req, data, len) != 0) {
    p->req = NULL; /* closed by the server, no callback */
    if (p->t != NULL) {
      fr_kube_tunnel_cancel(p->t);
      p->t = NULL;
    }
    maybe_free(p);
    return FR_KUBE_TUNNEL_PAUSE;
  }
  p->down_bytes += len;
  if (fr_http_pending_bytes(p->req) > HIGH_WATER && fr_http_on_drain(p->req, on_client_drain, LOW_WATER) == 0) {
    p->up_paused = 1;
    return FR_KUBE_TUNNEL_PAUSE;
  }
  return 0;
}

/* The sandbox's 101: the client gets it as it came, and the tunnel opens. */
static void on_up_open(const char *head, size_t len, void *arg) {
  struct ptun *p = arg;
  struct api_req *q = p->q;
  struct fr_http_req *req = q->req;

  p->q = NULL;
  q->gone_cb = NULL;
  q->req = NULL;
  api_undefer(q);
  api_req_unref(q);
  if (req == NULL) {
    fr_kube_tunnel_cancel(p->t);
    p->t = NULL;
    maybe_free(p);
    return;
  }
  req->abort_cb = NULL;
  req->data = p;
  router_note(req, "tunnel", "1");
  if (fr_http_tunnel_begin(req, 101, head, len, on_client_data, on_client_end) != 0) {
    fr_kube_tunnel_cancel(p->t); /* the server closed the connection, no callback */
    p->t = NULL;
    maybe_free(p);
    return;
  }
  p->req = req;
  touch(p);
}

/* A non-101 answer's header <name> in <head> (trimmed) into <out>. */
static int head_header(const char *head, size_t len, const char *name, char *out, size_t cap) {
  const char *p = memchr(head, '\n', len), *end = head + len;
  size_t nl = strlen(name);

  while (p != NULL && ++p < end) {
    const char *eol = memchr(p, '\n', (size_t)(end - p)), *v, *ve;
    if (eol == NULL)
      break;
    if ((size_t)(eol - p) > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
      for (v = p + nl + 1; v < eol && (*v == ' ' || *v == '\t'); v++)
        ;
      for (ve = eol; ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'); ve--)
        ;
      if ((size_t)(ve - v) >= cap)
        return -1;
      memcpy(out, v, (size_t)(ve - v));
      out[ve - v] = '\0';
      return 0;
    }
    p = eol;
  }
  return -1;
}

/* Decodes a chunked <raw> body into <out> as far as it goes. */
static void dechunk(const char *raw, size_t len, struct fr_buf *out) {
  size_t i = 0;

  while (i < len) {
    char *endp;
    unsigned long n = strtoul(raw + i, &endp, 16);
    const char *eol = memchr(raw + i, '\n', len - i);
    if (eol == NULL || endp == raw + i || n == 0)
      return;
    i = (size_t)(eol - raw) + 1;
    if (n > len - i)
      n = len - i;
    fr_buf_append(out, raw + i, n);
    i += n + 2;
  }
}

/* Does <len> bytes at <s> hold <needle>? */
static int has(const char *s, size_t len, const char *needle) {
  size_t n = strlen(needle);

  for (size_t i = 0; s != NULL && i + n <= len; i++)
    if (memcmp(s + i, needle, n) == 0)
      return 1;
  return 0;
}

static void on_up_done(const struct fr_kube_tunnel_result *res, void *arg) {
  struct ptun *p = arg;
  struct api_req *q = p->q;
  char msg[500], ctype[128];

  p->t = NULL;
  if (q == NULL) {
    /* The open tunnel's upstream ended: the client gets a FIN after
     * every byte before it (then its own end frees us), or, after an
     * error, the connection drops. */
    if (p->req != NULL && (res->error != 0 || fr_http_tunnel_shutdown(p->req) != 0)) {
      struct fr_http_req *req = p->req;
      p->req = NULL;
      req->data = NULL;
      if (res->error != 0)
        fr_http_abort(req);
    }
    maybe_free(p);
    return;
  }
  p->q = NULL;
  if (res->error != 0 || res->http_status == 0) {
    snprintf(msg, sizeof(msg), "port %d of the sandbox could not be reached: %.300s", p->port,
             res->message != NULL ? res->message : "no answer");
    api_fail(q, 502, "port_unreachable", msg, NULL);
  } else if (res->http_status >= 500 && has(res->body, res->body_len, "\"Status\"") &&
             (has(res->body, res->body_len, "connection refused") || has(res->body, res->body_len, "unknown port"))) {
    /* The cluster's proxy found nothing listening (a Status object). */
    snprintf(msg, sizeof(msg), "nothing listens on port %d of the sandbox", p->port);
    api_fail(q, 502, "port_not_open", msg, NULL);
  } else {
    /* The sandbox's own answer to the upgrade (a 400, a 404, ...). */
    struct fr_buf body;
    fr_buf_init(&body);
    if (head_header(res->head, res->head_len, "Transfer-Encoding", ctype, sizeof(ctype)) == 0)
      dechunk(res->body, res->body_len, &body);
    else if (res->body_len > 0)
      fr_buf_append(&body, res->body, res->body_len);
    if (head_header(res->head, res->head_len, "Content-Type", ctype, sizeof(ctype)) != 0 ||
        strpbrk(ctype, "\r\n") != NULL)
      snprintf(ctype, sizeof(ctype), "application/octet-stream");
    api_reply_raw(q, res->http_status, ctype, body.data != NULL ? body.data : "", body.len);
    fr_buf_free(&body);
  }
  maybe_free(p);
}

/* The client left before the sandbox answered. */
static void on_gone(struct api_req *q, void *arg) {
  struct ptun *p = arg;

  p->q = NULL;
  if (p->t != NULL) {
    fr_kube_tunnel_cancel(p->t);
    p->t = NULL;
  }
  api_stream_end(q, 0); /* ends the deferral */
  maybe_free(p);
}

/* ---------------------------------------------------------------------- */
/* entry                                                                   */

int port_tunnel_wanted(const struct fr_http_req *req) {
  const char *up = fr_http_req_header(req, "Upgrade"), *conn = fr_http_req_header(req, "Connection");

  if (up == NULL || conn == NULL)
    return 0;
  for (const char *c = conn; *c != '\0';) {
    size_t n;
    while (*c == ' ' || *c == '\t' || *c == ',')
      c++;
    n = strcspn(c, ",");
    while (n > 0 && (c[n - 1] == ' ' || c[n - 1] == '\t'))
      n--;
    if (n == 7 && strncasecmp(c, "upgrade", 7) == 0)
      return 1;
    c += strcspn(c, ",");
  }
  return 0;
}

void port_tunnel_start(struct api_req *q, struct fr_adapter *a, const char *id, int port, const char *path_query,
                       const char *headers, void (*done)(void *arg), void *done_arg) {
  const struct fr_config *cfg = q->cfg;
  const char *up = fr_http_req_header(q->req, "Upgrade"), *pod = strchr(id, '.');
  struct fr_kube_tunnel_opts o;
  struct fr_buf h;
  struct ptun *p;
  char msg[300];
  int rc;

  if (q->r->port_tunnels >= cfg->max_port_tunnels) {
    snprintf(msg, sizeof(msg), "the router has %" PRId64 " upgraded connections to sandbox ports open "
             "(ports.max_tunnels)", q->r->port_tunnels);
    api_reply(q, 429, api_limit_body(msg, "ports.max_tunnels"), "Retry-After: 1\r\n");
    done(done_arg);
    return;
  }
  if (q->ts != NULL && q->ts->port_tunnels >= cfg->max_port_tunnels_per_tenant) {
    snprintf(msg, sizeof(msg), "tenant %s has %" PRId64 " upgraded connections to sandbox ports open "
             "(ports.max_tunnels_per_tenant)", q->tenant, q->ts->port_tunnels);
    api_reply(q, 429, api_limit_body(msg, "ports.max_tunnels_per_tenant"), "Retry-After: 1\r\n");
    done(done_arg);
    return;
  }
  if (up == NULL || strpbrk(up, "\r\n") != NULL || pod == NULL) {
    api_fail(q, 400, "invalid_upgrade", "the Upgrade header is not one to pass on", NULL);
    done(done_arg);
    return;
  }
  if ((p = calloc(1, sizeof(*p))) == NULL) {
    api_oom(q);
    done(done_arg);
    return;
  }
  p->r = q->r;
  p->port = port;
  p->done = done;
  p->done_arg = done_arg;
  p->idle_ms = (uint64_t)cfg->port_tunnel_idle_s * 1000;
  p->ts = tenant_ref(q->ts);
  uv_timer_init(q->r->loop, &p->idle);
  p->idle.data = p;
  q->r->port_tunnels++;
  if (p->ts != NULL)
    p->ts->port_tunnels++;

  fr_buf_init(&h);
  fr_buf_printf(&h, "%sConnection: Upgrade\nUpgrade: %s", headers, up);
  memset(&o, 0, sizeof(o));
  o.method = q->req->method;
  o.target = path_query;
  o.headers = h.data;
  o.request_id = q->rid;
  o.on_open = on_up_open;
  o.on_data = on_up_data;
  o.on_drain = on_up_drain;
  o.on_done = on_up_done;
  o.arg = p;
  rc = h.data != NULL ? fr_adapter_port_tunnel(a, pod + 1, port, &o, &p->t) : -ENOMEM;
  fr_buf_free(&h);
  if (rc != 0) {
    if (rc == -EHOSTDOWN)
      api_fail(q, 503, "cluster_unavailable", "the sandbox's cluster is not answering", "Retry-After: 5\r\n");
    else if (rc == -ENOENT)
      api_fail(q, 404, "sandbox_not_found", "no such sandbox port", NULL);
    else if (rc == -ENOMEM)
      api_oom(q);
    else
      api_fail(q, 400, "invalid_path", "the path or headers cannot be passed to the sandbox", NULL);
    maybe_free(p);
    return;
  }
  api_defer(q);
  p->q = q;
  q->gone_cb = on_gone;
  q->gone_arg = p;
  /* Waiting for the answer is bounded like an open tunnel's silence. */
  touch(p);
  uv_timer_start(&p->idle, on_idle, p->idle_ms, 0);
}
