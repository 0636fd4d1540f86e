/* informer.c - list+watch cache (see fr/informer.h).
 *
 * States (one call in flight at most):
 *   LISTING  --last page--> WATCHING --clean end--> WATCHING (resume at RV)
 *      ^                       |  410 / ERROR 410
 *      +-----------------------+
 *   any failure --> BACKOFF --timer--> WATCHING if an RV is known, else LISTING
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/buf.h"
#include "fr/informer.h"
#include "fr/kube.h"
#include "fr/log.h"
#include "fr/util.h"
#include "kube_internal.h"

#define LIST_PAGE 500
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
/* Watches are re-established every 4-6 minutes, as client-go does (5-10),
 * so a silently dead connection cannot hide changes for long. */
#define WATCH_TIMEOUT_MIN_S 240
#define WATCH_TIMEOUT_SPAN_S 120

enum inf_state { IS_IDLE, IS_LISTING, IS_WATCHING, IS_BACKOFF };

static const char *const state_names[] = {"idle", "listing", "watching", "backoff"};

struct fr_informer {
  struct fr_kube_client *client;
  uv_loop_t *loop;
  char *path;
  char *selector_q;        /* "&labelSelector=..." (encoded) or "" */
  fr_informer_cb cb;
  void *arg;
  fr_informer_transform_fn transform;
  enum inf_state state;
  struct fr_kube_call *call;
  uv_timer_t *timer;       /* heap-allocated so free() need not wait for it */
  json_t *items;           /* "ns/name" -> object */
  json_t *fresh;           /* relist in progress */
  char rv[32];
  char list_rv[32];
  char cont[1024];
  int synced;
  int healthy;
  uint64_t backoff_ms;
  uint64_t last_contact_ms;
  struct fr_informer_stats stats;
};

static void start_list(struct fr_informer *inf);
static void start_watch(struct fr_informer *inf);

static void set_state(struct fr_informer *inf, enum inf_state s) {
  if (inf->state != s)
    FR_DEBUG("informer", "%s %s: %s -> %s", kube_name(inf->client), inf->path, state_names[inf->state],
             state_names[s]);
  inf->state = s;
}

static void url_encode(struct fr_buf *b, const char *s) {
  static const char hex[] = "0123456789ABCDEF";

  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
        ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      fr_buf_putc(b, (char)ch);
    } else {
      char e[3] = {'%', hex[ch >> 4], hex[ch & 15]};
      fr_buf_append(b, e, 3);
    }
  }
}

static int obj_key(json_t *obj, char *out, size_t cap) {
  json_t *meta = json_object_get(obj, "metadata");
  const char *ns = json_string_value(json_object_get(meta, "namespace"));
  const char *name = json_string_value(json_object_get(meta, "name"));

  if (name == NULL)
    return -EINVAL;
  if ((size_t)snprintf(out, cap, "%s/%s", ns ? ns : "", name) >= cap)
    return -ENAMETOOLONG;
  return 0;
}

static const char *obj_rv(json_t *obj) {
  const char *rv = json_string_value(json_object_get(json_object_get(obj, "metadata"), "resourceVersion"));

  return rv ? rv : "";
}

/* 1 if resourceVersion <a> is older than <b>. resourceVersions are opaque
 * to clients in general, but every apiserver (and kubesim) hands out etcd
 * revisions: decimal integers that grow with every write. Anything else
 * compares as "not older", so the watch stays authoritative. */
static int rv_older(const char *a, const char *b) {
  int64_t x, y;

  return fr_parse_int64(a, 0, INT64_MAX, &x) == 0 && fr_parse_int64(b, 0, INT64_MAX, &y) == 0 && x < y;
}

static void note_rv(struct fr_informer *inf, const char *rv) {
  if (rv != NULL && *rv != '\0')
    snprintf(inf->rv, sizeof(inf->rv), "%s", rv);
}

static void on_timer(uv_timer_t *t) {
  struct fr_informer *inf = t->data;

  if (inf->state != IS_BACKOFF)
    return;
  if (inf->rv[0] != '\0' && inf->synced)
    start_watch(inf);
  else
    start_list(inf);
}

static void backoff(struct fr_informer *inf, const char *why) {
  uint32_t r = 0;
  uint64_t ms;

  inf->healthy = 0;
  inf->stats.failures++;
  inf->backoff_ms = inf->backoff_ms ? inf->backoff_ms * 2 : BACKOFF_MIN_MS;
  if (inf->backoff_ms > BACKOFF_MAX_MS)
    inf->backoff_ms = BACKOFF_MAX_MS;
  fr_random_bytes(&r, sizeof(r));
  /* Equal jitter: half fixed, half random, so many routers do not retry a
   * recovering apiserver in lockstep. */
  ms = inf->backoff_ms / 2 + r % (inf->backoff_ms / 2 + 1);
  FR_WARN("informer", "%s %s: %s; retrying in %" PRIu64 " ms", kube_name(inf->client), inf->path, why, ms);
  set_state(inf, IS_BACKOFF);
  uv_timer_start(inf->timer, on_timer, ms, 0);
}

/* ---------------------------------------------------------------------- */
/* list                                                                    */

static void deliver_diff(struct fr_informer *inf) {
  json_t *old = inf->items, *fresh = inf->fresh, *v, *prev;
  const char *key;
  void *tmp;

  /* A write observed after the list was served (fr_informer_observe) is
   * newer than what the list says: keep it; the watch from the list's
   * resourceVersion brings the same change or a later one. */
  json_object_foreach(old, key, v) {
    if (rv_older(inf->list_rv, obj_rv(v)) &&
        ((prev = json_object_get(fresh, key)) == NULL || rv_older(obj_rv(prev), obj_rv(v))))
      json_object_set(fresh, key, v);
  }
  inf->items = fresh;
  inf->fresh = NULL;
  /* Changes and additions first, then what disappeared. */
  json_object_foreach(fresh, key, v) {
    prev = json_object_get(old, key);
    if (prev == NULL)
      inf->cb(inf, FR_INF_ADDED, v, NULL, inf->arg);
    else if (strcmp(obj_rv(prev), obj_rv(v)) != 0)
      inf->cb(inf, FR_INF_MODIFIED, v, prev, inf->arg);
  }
  json_object_foreach_safe(old, tmp, key, v) {
    if (json_object_get(fresh, key) == NULL)
      inf->cb(inf, FR_INF_DELETED, v, NULL, inf->arg);
  }
  json_decref(old);
}

static void on_list_page(const struct fr_kube_response *resp, void *arg) {
  struct fr_informer *inf = arg;
  json_t *doc, *items, *item;
  const char *cont, *rv;
  size_t i;
  char key[600], why[256];

  inf->call = NULL;
  if (resp->status != 200) {
    if (resp->status == 410) {
      /* the continue token expired: start the list over */
      inf->cont[0] = '\0';
      json_decref(inf->fresh);
      inf->fresh = NULL;
    }
    snprintf(why, sizeof(why), "list failed (%d %s)", resp->status,
             resp->error ? resp->error : "");
    backoff(inf, why);
    return;
  }
  doc = json_loadb(resp->body, resp->body_len, 0, NULL);
  items = json_object_get(doc, "items");
  if (!json_is_array(items)) {
    json_decref(doc);
    backoff(inf, "list response is not a list");
    return;
  }
  inf->last_contact_ms = uv_now(inf->loop);
  json_array_foreach(items, i, item) {
    if (obj_key(item, key, sizeof(key)) != 0)
      continue;
    if (inf->transform != NULL) {
      json_t *t = inf->transform(item);
      if (t != NULL)
        json_object_set_new(inf->fresh, key, t);
    } else {
      json_object_set(inf->fresh, key, item);
    }
  }
  rv = json_string_value(json_object_get(json_object_get(doc, "metadata"), "resourceVersion"));
  cont = json_string_value(json_object_get(json_object_get(doc, "metadata"), "continue"));
  if (inf->list_rv[0] == '\0' && rv != NULL)
    snprintf(inf->list_rv, sizeof(inf->list_rv), "%s", rv);
  if (cont != NULL && *cont != '\0' && strlen(cont) < sizeof(inf->cont)) {
    snprintf(inf->cont, sizeof(inf->cont), "%s", cont);
    json_decref(doc);
    start_list(inf);
    return;
  }
  json_decref(doc);
  inf->cont[0] = '\0';
  snprintf(inf->rv, sizeof(inf->rv), "%s", inf->list_rv);
  inf->stats.lists++;
  inf->healthy = 1;
  inf->backoff_ms = 0;
  deliver_diff(inf);
  if (!inf->synced) {
    inf->synced = 1;
    inf->cb(inf, FR_INF_SYNCED, NULL, NULL, inf->arg);
  }
  start_watch(inf);
}

static void start_list(struct fr_informer *inf) {
  struct fr_buf url;
  int rc;

  set_state(inf, IS_LISTING);
  if (inf->cont[0] == '\0') {
    json_decref(inf->fresh);
    inf->fresh = json_object();
    inf->list_rv[0] = '\0';
  }
  fr_buf_init(&url);
  fr_buf_printf(&url, "%s?limit=%d%s", inf->path, LIST_PAGE, inf->selector_q);
  if (inf->cont[0] != '\0') {
    fr_buf_puts(&url, "&continue=");
    url_encode(&url, inf->cont);
  }
  rc = url.data && inf->fresh ? fr_kube_request(inf->client, "GET", url.data, NULL, NULL, 0,
                                                FR_KUBE_IDEMPOTENT, NULL, on_list_page, inf,
                                                &inf->call)
                              : -ENOMEM;
  fr_buf_free(&url);
  if (rc != 0)
    backoff(inf, "cannot start a list");
}

/* ---------------------------------------------------------------------- */
/* watch                                                                   */

static void apply_event(struct fr_informer *inf, const char *type, json_t *obj) {
  char key[600];
  json_t *old;

  if (obj_key(obj, key, sizeof(key)) != 0)
    return;
  old = json_object_get(inf->items, key);
  /* Older than what the cache holds: a replay of a change that an
   * observed write already superseded. */
  if (old != NULL && rv_older(obj_rv(obj), obj_rv(old)))
    return;
  if (old != NULL)
    json_incref(old);
  if (strcmp(type, "DELETED") == 0) {
    if (old != NULL) {
      json_object_del(inf->items, key);
      inf->cb(inf, FR_INF_DELETED, obj, NULL, inf->arg);
    }
  } else {
    json_object_set(inf->items, key, obj);
    if (old == NULL)
      inf->cb(inf, FR_INF_ADDED, obj, NULL, inf->arg);
    else
      inf->cb(inf, FR_INF_MODIFIED, obj, old, inf->arg);
  }
  json_decref(old);
}

static void on_watch_line(const char *line, size_t len, void *arg) {
  struct fr_informer *inf = arg;
  json_t *ev, *obj;
  const char *type;

  if (inf->state != IS_WATCHING || len == 0)
    return;
  ev = json_loadb(line, len, 0, NULL);
  type = json_string_value(json_object_get(ev, "type"));
  obj = json_object_get(ev, "object");
  if (type == NULL || !json_is_object(obj)) {
    json_decref(ev);
    return;
  }
  inf->last_contact_ms = uv_now(inf->loop);
  if (strcmp(type, "ERROR") != 0) {
    /* A watch that delivers is working again after any earlier failure. */
    inf->healthy = 1;
    inf->backoff_ms = 0;
  }
  if (strcmp(type, "ERROR") == 0) {
    /* 410 Expired: our RV left the server's history; relist. */
    if (json_integer_value(json_object_get(obj, "code")) == 410) {
      inf->stats.expired++;
      inf->rv[0] = '\0';
    }
  } else {
    inf->stats.events++;
    note_rv(inf, obj_rv(obj));
    if (strcmp(type, "BOOKMARK") != 0) {
      json_t *t = inf->transform ? inf->transform(obj) : json_incref(obj);
      if (t != NULL)
        apply_event(inf, type, t);
      json_decref(t);
    }
  }
  json_decref(ev);
}

static void on_watch_done(const struct fr_kube_response *resp, void *arg) {
  struct fr_informer *inf = arg;
  char why[256];

  inf->call = NULL;
  if (resp->status == 410 || (resp->status == 200 && inf->rv[0] == '\0')) {
    if (resp->status == 410)
      inf->stats.expired++;
    inf->rv[0] = '\0';
    start_list(inf);
    return;
  }
  if (resp->status == 200) {
    inf->last_contact_ms = uv_now(inf->loop);
    inf->healthy = 1;
    inf->backoff_ms = 0;
    start_watch(inf);
    return;
  }
  snprintf(why, sizeof(why), "watch failed (%d %s)", resp->status, resp->error ? resp->error : "");
  backoff(inf, why);
}

static void start_watch(struct fr_informer *inf) {
  struct fr_buf url;
  uint32_t r = 0;
  int rc;

  set_state(inf, IS_WATCHING);
  fr_random_bytes(&r, sizeof(r));
  fr_buf_init(&url);
  fr_buf_printf(&url, "%s?watch=true&allowWatchBookmarks=true&resourceVersion=%s&timeoutSeconds=%u%s",
                inf->path, inf->rv, WATCH_TIMEOUT_MIN_S + r % WATCH_TIMEOUT_SPAN_S, inf->selector_q);
  inf->stats.watches++;
  rc = url.data ? fr_kube_watch(inf->client, url.data, on_watch_line, on_watch_done, inf, &inf->call)
                : -ENOMEM;
  fr_buf_free(&url);
  if (rc != 0)
    backoff(inf, "cannot start a watch");
}

/* ---------------------------------------------------------------------- */
/* public                                                                  */

int fr_informer_new(struct fr_kube_client *client, const char *path, const char *label_selector,
                    fr_informer_cb cb, void *arg, struct fr_informer **out) {
  struct fr_informer *inf = calloc(1, sizeof(*inf));
  struct fr_buf q;

  if (inf == NULL)
    return -ENOMEM;
  fr_buf_init(&q);
  if (label_selector != NULL && *label_selector != '\0') {
    fr_buf_puts(&q, "&labelSelector=");
    url_encode(&q, label_selector);
  }
  inf->selector_q = fr_buf_detach(&q, NULL);
  inf->path = strdup(path);
  inf->items = json_object();
  inf->timer = malloc(sizeof(*inf->timer));
  if (inf->selector_q == NULL || inf->path == NULL || inf->items == NULL || inf->timer == NULL) {
    free(inf->selector_q);
    free(inf->path);
    json_decref(inf->items);
    free(inf->timer);
    free(inf);
    return -ENOMEM;
  }
  inf->client = client;
  inf->loop = kube_loop(client);
  uv_timer_init(inf->loop, inf->timer);
  inf->timer->data = inf;
  inf->cb = cb;
  inf->arg = arg;
  *out = inf;
  return 0;
}

void fr_informer_set_transform(struct fr_informer *inf, fr_informer_transform_fn fn) {
  inf->transform = fn;
}

int fr_informer_start(struct fr_informer *inf) {
  if (inf->state != IS_IDLE)
    return -EALREADY;
  /* Through the backoff timer with no delay, so the first callback comes
   * from a later loop turn even if the request fails at once. */
  set_state(inf, IS_BACKOFF);
  uv_timer_start(inf->timer, on_timer, 0, 0);
  return 0;
}

static void on_timer_closed(uv_handle_t *h) {
  free(h);
}

void fr_informer_free(struct fr_informer *inf) {
  if (inf == NULL)
    return;
  if (inf->call != NULL)
    fr_kube_cancel(inf->call);
  uv_close((uv_handle_t *)inf->timer, on_timer_closed);
  json_decref(inf->items);
  json_decref(inf->fresh);
  free(inf->selector_q);
  free(inf->path);
  free(inf);
}

void fr_informer_observe(struct fr_informer *inf, json_t *obj) {
  json_t *t, *cached;
  char key[600];

  if (obj == NULL || obj_key(obj, key, sizeof(key)) != 0)
    return;
  cached = json_object_get(inf->items, key);
  if (cached != NULL && !rv_older(obj_rv(cached), obj_rv(obj)))
    return;
  t = inf->transform ? inf->transform(obj) : json_incref(obj);
  if (t != NULL)
    apply_event(inf, "MODIFIED", t);
  json_decref(t);
}

int fr_informer_synced(const struct fr_informer *inf) { return inf->synced; }
int fr_informer_healthy(const struct fr_informer *inf) { return inf->healthy; }
uint64_t fr_informer_last_contact_ms(const struct fr_informer *inf) { return inf->last_contact_ms; }
const char *fr_informer_rv(const struct fr_informer *inf) { return inf->rv; }
json_t *fr_informer_items(const struct fr_informer *inf) { return inf->items; }

json_t *fr_informer_get(const struct fr_informer *inf, const char *ns, const char *name) {
  char key[600];

  if ((size_t)snprintf(key, sizeof(key), "%s/%s", ns ? ns : "", name) >= sizeof(key))
    return NULL;
  return json_object_get(inf->items, key);
}

void fr_informer_stats(const struct fr_informer *inf, struct fr_informer_stats *out) {
  *out = inf->stats;
}
