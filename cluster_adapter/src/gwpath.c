/* gwpath.c - a cluster's gateway URLs, their breakers and probes, and the
 * signing key (gwpath.h).
 *
 * Each URL's breaker: closed (calls go to it), open (none do; after
 * GW_RETRY_MS the timer sends GET /readyz to it, off the loop through its
 * own client), half-open (that probe is out). A 200 closes it; anything
 * else opens it again for another GW_RETRY_MS. Calls close it too (an
 * answer) and open it: a refused connection or a 503 shutting_down at
 * once, other failures after GW_FAILURES in a row. A closed URL is asked
 * /readyz every GW_CHECK_MS as well, so a replica that died or drains
 * (its /readyz fails from SIGTERM on) is left before a call finds out,
 * whatever the traffic (Upgrade tunnels do not feed the breakers).
 *
 * The key file is read every GW_KEY_POLL_MS on the thread pool; a content
 * that differs and holds a valid key (32 to 4096 bytes less trailing white
 * space, the config's rule) replaces the key for the next signature. A
 * file that does not read or holds no valid key keeps the old one (logged
 * once per failure streak).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "gwpath.h"

#include "fr/assert.h"
#include "fr/gwproto.h"
#include "fr/kube.h"
#include "fr/kubeconfig.h"
#include "fr/log.h"
#include "fr/util.h"

#define GW_TIMER_MS 250         /* the timer's tick: probes and key reads are paced below */
#define GW_RETRY_MS 1000        /* an open URL is probed this long after it opened */
#define GW_CHECK_MS 2000        /* a closed one this often: a replica gone or draining is seen without traffic */
#define GW_PROBE_TIMEOUT_MS 2000
#define GW_FAILURES 2           /* failures in a row that open a URL's breaker */
#define GW_KEY_POLL_MS 1000
#define GW_KEY_MIN 32
#define GW_KEY_MAX 4096
#define GW_CA_MAX ((size_t)1 << 20)
/* How long a signature is good for: short, as a leaked header opens one
 * sandbox port until then (the gateway takes up to FR_GW_MAX_TTL_S), and
 * long enough for a clock a little behind. */
#define GW_SIGNATURE_TTL_S 60
#define GW_HEADER_PREFIX "Fr-Gateway-"

enum gw_state { GW_CLOSED, GW_OPEN, GW_HALF_OPEN };
static const char *const gw_state_names[] = {"closed", "open", "half-open"};

struct gw_url {
  struct gwpath *gw;
  char *url;
  struct fr_kube_client *client;
  enum gw_state state;
  int failures;                 /* in a row */
  uint64_t opened_ms;
  uint64_t checked_ms;          /* the last probe sent */
  struct fr_kube_call *probe;
};

struct key_read {
  uv_work_t w;
  struct gwpath *gw;
  char *path;                   /* a copy */
  unsigned char buf[GW_KEY_MAX + 1];
  size_t len;
  int err;                      /* 0, a negative errno, or -EINVAL for a length out of range */
};

struct gwpath {
  uv_loop_t *loop;
  const char *name;
  struct gw_url u[FR_ADAPTER_GATEWAY_URLS_MAX];
  size_t n, next;
  unsigned char *key;
  size_t key_len;
  char *key_file;
  uv_timer_t *timer;
  uint64_t last_key_ms;
  struct key_read *reading;     /* a read on the thread pool */
  int key_failing;              /* the last read failed (logged once) */
  uint64_t key_reads;           /* reads done, failed ones included */
  int refused;
  int closing, pending;         /* handles and work still to finish once closing */
  void (*closed_cb)(void *arg);
  void *closed_arg;
};

static void key_free(unsigned char *k, size_t len) {
  if (k != NULL)
    explicit_bzero(k, len);
  free(k);
}

static void gw_release(struct gwpath *gw) {
  size_t i;

  for (i = 0; i < gw->n; i++)
    free(gw->u[i].url);
  key_free(gw->key, gw->key_len);
  free(gw->key_file);
  free(gw);
}

static int read_small_file(const char *path, size_t max, char **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *buf;
  size_t n;

  *out = NULL;
  if (f == NULL)
    return -errno;
  buf = malloc(max + 1);
  if (buf == NULL) {
    fclose(f);
    return -ENOMEM;
  }
  n = fread(buf, 1, max + 1, f);
  fclose(f);
  if (n > max) {
    free(buf);
    return -EFBIG;
  }
  buf[n] = '\0';
  *out = buf;
  *len = n;
  return 0;
}

int gwpath__new(uv_loop_t *loop, const char *name, const struct fr_adapter_gateway *g, struct gwpath **out,
                char *err, size_t errlen) {
  struct fr_kube_creds *creds = NULL;
  struct fr_kube_client_opts opts;
  struct gwpath *gw;
  char *ca = NULL;
  size_t ca_len = 0, i;
  int rc = -ENOMEM;

  *out = NULL;
  if (g->nurls < 1 || g->nurls > FR_ADAPTER_GATEWAY_URLS_MAX || g->key_len < 1) {
    snprintf(err, errlen, "%s: gateway: %zu URLs and a key of %zu bytes", name, g->nurls, g->key_len);
    return -EINVAL;
  }
  if ((gw = calloc(1, sizeof(*gw))) == NULL || (gw->key = malloc(g->key_len)) == NULL ||
      (g->key_file != NULL && (gw->key_file = strdup(g->key_file)) == NULL) ||
      (gw->timer = malloc(sizeof(*gw->timer))) == NULL) {
    snprintf(err, errlen, "%s: out of memory", name);
    if (gw != NULL) {
      free(gw->timer);
      gw_release(gw);
    }
    return -ENOMEM;
  }
  gw->loop = loop;
  gw->name = name;
  memcpy(gw->key, g->key, g->key_len);
  gw->key_len = g->key_len;
  if (g->ca_file != NULL && (rc = read_small_file(g->ca_file, GW_CA_MAX, &ca, &ca_len)) != 0) {
    snprintf(err, errlen, "%s: gateway: cannot read the CA file %s: %s", name, g->ca_file,
             rc == -EFBIG ? "larger than 1 MiB" : strerror(-rc));
    goto fail;
  }
  for (i = 0; i < g->nurls; i++) {
    struct gw_url *u = &gw->u[i];

    u->gw = gw;
    if ((u->url = strdup(g->urls[i])) != NULL)
      gw->n++; /* from here on released by gw_release() */
    if (u->url == NULL || (creds = calloc(1, sizeof(*creds))) == NULL ||
        (creds->server = strdup(g->urls[i])) == NULL ||
        (ca != NULL && (creds->ca_pem = malloc(ca_len + 1)) == NULL)) {
      snprintf(err, errlen, "%s: out of memory", name);
      rc = -ENOMEM;
      goto fail;
    }
    if (ca != NULL) {
      memcpy(creds->ca_pem, ca, ca_len + 1);
      creds->ca_len = ca_len;
    }
    /* No token, no client certificate, no exec plugin: the cluster's
     * credentials never reach the gateway; the signature is the credential. */
    memset(&opts, 0, sizeof(opts));
    opts.name = name;
    rc = fr_kube_client_new(loop, creds, &opts, &u->client);
    fr_kube_creds_free(creds);
    creds = NULL;
    if (rc != 0) {
      snprintf(err, errlen, "%s: gateway: cannot create its client (%s)", name, g->urls[i]);
      goto fail;
    }
  }
  free(ca);
  uv_timer_init(loop, gw->timer);
  gw->timer->data = gw;
  *out = gw;
  return 0;
fail:
  fr_kube_creds_free(creds);
  free(ca);
  for (i = 0; i < gw->n; i++)
    fr_kube_client_free(gw->u[i].client, NULL, NULL);
  free(gw->timer); /* never initialised as a handle */
  gw_release(gw);
  return rc < 0 ? rc : -EINVAL;
}

/* ---- breakers ---- */

static void state_set(struct gw_url *u, enum gw_state s) {
  enum gw_state was = u->state;

  if (was == s)
    return;
  u->state = s;
  if (s == GW_OPEN)
    u->opened_ms = uv_now(u->gw->loop);
  if (s == GW_HALF_OPEN)
    FR_DEBUG("adapter", "%s: gateway %s: open -> half-open (probing /readyz)", u->gw->name, u->url);
  else if (s == GW_OPEN && was == GW_HALF_OPEN)
    FR_DEBUG("adapter", "%s: gateway %s: still not ready", u->gw->name, u->url);
  else if (s == GW_OPEN)
    FR_WARN("adapter", "%s: gateway %s: breaker closed -> open: new calls take %s", u->gw->name, u->url,
            gwpath__healthy(u->gw) ? "the other gateway URLs" : "the API server's pod proxy");
  else
    FR_INFO("adapter", "%s: gateway %s: breaker %s -> closed: calls go to it again", u->gw->name, u->url,
            gw_state_names[was]);
}

void gwpath__report(struct gwpath *gw, int i, enum gwpath_outcome o) {
  struct gw_url *u;

  if (gw == NULL || i < 0 || (size_t)i >= gw->n || o == GWPATH_NONE)
    return;
  u = &gw->u[i];
  if (o == GWPATH_OK) {
    u->failures = 0;
    if (u->state == GW_OPEN)
      state_set(u, GW_CLOSED); /* a call that was out before it opened got through: it answers */
    return;
  }
  u->failures++;
  if (u->state == GW_CLOSED && (o == GWPATH_DOWN || u->failures >= GW_FAILURES))
    state_set(u, GW_OPEN);
}

enum gwpath_outcome gwpath__outcome(const struct fr_kube_response *r, int answered, const char *gw_code) {
  if (r->status == 0) {
    if (answered || r->attempts == 0)
      return GWPATH_NONE;
    return r->not_sent ? GWPATH_DOWN : GWPATH_FAILED;
  }
  if (r->status == 503 && gw_code != NULL && gw_code[0] != '\0')
    return strcmp(gw_code, "shutting_down") == 0 ? GWPATH_DOWN : GWPATH_FAILED;
  return GWPATH_OK;
}

int gwpath__pick(struct gwpath *gw) {
  size_t k, i;

  if (gw == NULL)
    return GWPATH_POD_PROXY;
  for (k = 0; k < gw->n; k++) {
    i = (gw->next + k) % gw->n;
    if (gw->u[i].state == GW_CLOSED) {
      gw->next = i + 1;
      return (int)i;
    }
  }
  return GWPATH_POD_PROXY;
}

int gwpath__healthy(const struct gwpath *gw) {
  size_t i;

  for (i = 0; gw != NULL && i < gw->n; i++)
    if (gw->u[i].state == GW_CLOSED)
      return 1;
  return 0;
}

struct fr_kube_client *gwpath__client(struct gwpath *gw, int i) {
  return gw != NULL && i >= 0 && (size_t)i < gw->n ? gw->u[i].client : NULL;
}

int gwpath__refused(struct gwpath *gw, int refused) {
  int log = refused && !gw->refused;

  gw->refused = refused;
  return log;
}

/* ---- probes ---- */

static void on_probe(const struct fr_kube_response *r, void *arg) {
  struct gw_url *u = arg;

  u->probe = NULL;
  if (u->state == GW_CLOSED) {
    /* The check of a URL in use: one that is not ready (draining, not
     * listed yet) or not there opens at once; no answer counts as a
     * failure. */
    gwpath__report(u->gw, (int)(u - u->gw->u),
                   r->status == 200 ? GWPATH_OK : r->status != 0 || r->not_sent ? GWPATH_DOWN : GWPATH_FAILED);
    return;
  }
  if (u->state != GW_HALF_OPEN)
    return;
  if (r->status == 200) {
    u->failures = 0;
    state_set(u, GW_CLOSED);
  } else {
    state_set(u, GW_OPEN);
  }
}

/* GET /readyz on <u>: past the client's queue; not idempotent, so not
 * retried (a probe reports; the next one comes). An open URL goes
 * half-open for it. */
static void probe(struct gw_url *u) {
  struct fr_kube_request_opts o;

  memset(&o, 0, sizeof(o));
  o.flags = FR_KUBE_PRIORITY;
  o.timeout_ms = GW_PROBE_TIMEOUT_MS;
  u->checked_ms = uv_now(u->gw->loop);
  if (u->state == GW_OPEN)
    state_set(u, GW_HALF_OPEN);
  if (fr_kube_request_opts(u->client, "GET", "/readyz", NULL, NULL, 0, &o, on_probe, u, &u->probe) != 0) {
    u->probe = NULL;
    if (u->state == GW_HALF_OPEN)
      state_set(u, GW_OPEN);
  }
}

/* ---- the key file ---- */

static void key_read_work(uv_work_t *w) {
  struct key_read *kr = fr_container_of(w, struct key_read, w);
  FILE *f = fopen(kr->path, "rb");

  if (f == NULL) {
    kr->err = -errno;
    return;
  }
  kr->len = fread(kr->buf, 1, sizeof(kr->buf), f);
  fclose(f);
  while (kr->len > 0 && (kr->buf[kr->len - 1] == '\n' || kr->buf[kr->len - 1] == '\r' ||
                         kr->buf[kr->len - 1] == ' ' || kr->buf[kr->len - 1] == '\t'))
    kr->len--;
  if (kr->len < GW_KEY_MIN || kr->len > GW_KEY_MAX)
    kr->err = -EINVAL;
}

static void pending_done(struct gwpath *gw) {
  FR_ASSERT(gw->pending > 0);
  if (--gw->pending == 0) {
    void (*cb)(void *) = gw->closed_cb;
    void *arg = gw->closed_arg;

    gw_release(gw);
    cb(arg);
  }
}

static void key_read_done(uv_work_t *w, int status) {
  struct key_read *kr = fr_container_of(w, struct key_read, w);
  struct gwpath *gw = kr->gw;
  unsigned char *k;

  gw->reading = NULL;
  gw->key_reads++;
  if (gw->closing) {
    /* nothing to take */
  } else if (status != 0 || kr->err != 0) {
    if (!gw->key_failing)
      FR_WARN("adapter", "%s: gateway key file %s: %s; signing with the key read before", gw->name, kr->path,
              status != 0 ? "not read" : kr->err == -EINVAL ? "no key of 32 to 4096 bytes in it" : strerror(-kr->err));
    gw->key_failing = 1;
  } else {
    if (gw->key_failing)
      FR_INFO("adapter", "%s: gateway key file %s reads again", gw->name, kr->path);
    gw->key_failing = 0;
    if ((kr->len != gw->key_len || memcmp(kr->buf, gw->key, kr->len) != 0) && (k = malloc(kr->len)) != NULL) {
      memcpy(k, kr->buf, kr->len);
      key_free(gw->key, gw->key_len);
      gw->key = k;
      gw->key_len = kr->len;
      FR_INFO("adapter", "%s: gateway key file %s changed: signing with the new key", gw->name, kr->path);
    }
  }
  explicit_bzero(kr->buf, sizeof(kr->buf));
  free(kr->path);
  free(kr);
  if (gw->closing)
    pending_done(gw);
}

static void key_read_start(struct gwpath *gw) {
  struct key_read *kr;

  if (gw->key_file == NULL || gw->reading != NULL || (kr = calloc(1, sizeof(*kr))) == NULL)
    return;
  if ((kr->path = strdup(gw->key_file)) == NULL) {
    free(kr);
    return;
  }
  kr->gw = gw;
  if (uv_queue_work(gw->loop, &kr->w, key_read_work, key_read_done) != 0) {
    free(kr->path);
    free(kr);
    return;
  }
  gw->reading = kr;
}

static void on_timer(uv_timer_t *t) {
  struct gwpath *gw = t->data;
  uint64_t now = uv_now(gw->loop);
  size_t i;

  for (i = 0; i < gw->n; i++) {
    struct gw_url *u = &gw->u[i];

    if (u->probe != NULL)
      continue;
    if ((u->state == GW_OPEN && now - u->opened_ms >= GW_RETRY_MS) ||
        (u->state == GW_CLOSED && now - u->checked_ms >= GW_CHECK_MS))
      probe(u);
  }
  if (now - gw->last_key_ms >= GW_KEY_POLL_MS) {
    gw->last_key_ms = now;
    key_read_start(gw);
  }
}

void gwpath__start(struct gwpath *gw) {
  gw->last_key_ms = uv_now(gw->loop);
  uv_timer_start(gw->timer, on_timer, GW_TIMER_MS, GW_TIMER_MS);
}

/* ---- signing ---- */

char *gwpath__headers(const struct gwpath *gw, const char *cluster, const char *ns, const char *pod, int port,
                      const char *caller) {
  size_t extra = caller != NULL ? strlen(caller) : 0, cap = sizeof(FR_GW_AUTH_HEADER ": \n") + FR_GW_AUTH_MAX + extra + 1;
  char sig[FR_GW_AUTH_MAX];
  const char *line;
  char *headers;
  size_t n, ll;

  if (fr_gw_sign(gw->key, gw->key_len, cluster, ns, pod, port, (int64_t)time(NULL) + GW_SIGNATURE_TTL_S, sig) != 0 ||
      (headers = malloc(cap)) == NULL)
    return NULL;
  n = (size_t)snprintf(headers, cap, FR_GW_AUTH_HEADER ": %s\n", sig);
  /* The caller's lines (a client's, for a sandbox's port) but any
   * Fr-Gateway-* of theirs: the signature is the router's alone. */
  for (line = caller; line != NULL && *line != '\0'; line += ll + (line[ll] != '\0')) {
    ll = strcspn(line, "\n");
    if (ll >= sizeof(GW_HEADER_PREFIX) - 1 && strncasecmp(line, GW_HEADER_PREFIX, sizeof(GW_HEADER_PREFIX) - 1) == 0)
      continue;
    memcpy(headers + n, line, ll);
    n += ll;
    headers[n++] = '\n';
  }
  headers[n] = '\0';
  return headers;
}

uint64_t gwpath__key_reads(const struct gwpath *gw) {
  return gw->key_reads;
}

/* ---- teardown ---- */

static void on_closed_part(void *arg) {
  pending_done(arg);
}

static void on_timer_closed(uv_handle_t *h) {
  struct gwpath *gw = h->data;

  free(h);
  pending_done(gw);
}

void gwpath__close(struct gwpath *gw, void (*cb)(void *arg), void *arg) {
  size_t i;

  gw->closing = 1;
  gw->closed_cb = cb;
  gw->closed_arg = arg;
  /* The clients (their probes dropped), the timer, a key read running. */
  gw->pending = (int)gw->n + 1 + (gw->reading != NULL);
  uv_close((uv_handle_t *)gw->timer, on_timer_closed);
  for (i = 0; i < gw->n; i++) {
    gw->u[i].probe = NULL;
    fr_kube_client_free(gw->u[i].client, on_closed_part, gw);
  }
}
