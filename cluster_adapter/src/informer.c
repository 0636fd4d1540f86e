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
#include "strmap.h"

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
  void *transform_arg;
  enum inf_state state;
  struct fr_kube_call *call;
  uv_timer_t *timer;       /* heap-allocated so free() need not wait for it */
  json_t *items;           /* "ns/name" -> object; NULL when the owner keeps the objects */
  const struct fr_informer_keep *keep; /* fields to build from raw JSON; NULL: every one */
  fr_informer_rv_fn owner_rv;
  fr_informer_each_fn owner_each;
  void *owner_arg;
  struct strmap seen;      /* (re)list in progress: "ns/name" of every object listed so far */
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
static json_t *parse_doc(struct fr_informer *inf, const char *text, size_t len, const struct fr_informer_keep *top);

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

static int obj_id(json_t *obj, const char **ns, const char **name, char *key, size_t cap) {
  json_t *meta = json_object_get(obj, "metadata");

  *ns = json_string_value(json_object_get(meta, "namespace"));
  *name = json_string_value(json_object_get(meta, "name"));
  if (*name == NULL)
    return -EINVAL;
  if (*ns == NULL)
    *ns = "";
  if ((size_t)snprintf(key, cap, "%s/%s", *ns, *name) >= cap)
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

/* The resourceVersion cached for an object, or NULL when it is not. */
static const char *cached_rv(struct fr_informer *inf, const char *ns, const char *name, const char *key) {
  json_t *o;

  if (inf->items == NULL)
    return inf->owner_rv(inf->owner_arg, ns, name);
  o = json_object_get(inf->items, key);
  return o ? obj_rv(o) : NULL;
}

/* Applies one object (already transformed) to the cache and tells the
 * owner: from a watch event, an observed write, a list page (<listed>) or
 * the sweep after a list (<deleted>). A version older than the cached one
 * is a replay that an observed write superseded: ignored. */
static void apply(struct fr_informer *inf, json_t *obj, int deleted, int listed) {
  const char *ns, *name, *prev;
  json_t *old = NULL;
  char key[600];
  int existed;

  if (obj_id(obj, &ns, &name, key, sizeof(key)) != 0)
    return;
  if (listed)
    strmap_put(&inf->seen, key, NULL);
  prev = cached_rv(inf, ns, name, key);
  existed = prev != NULL;
  /* Older: a replay an observed write superseded. The same version (a
   * relist, or an observed write and its watch event): nothing new. A
   * delete carries the last version: it always goes through. */
  if (existed && (rv_older(obj_rv(obj), prev) || (!deleted && strcmp(prev, obj_rv(obj)) == 0)))
    return;
  if (inf->items != NULL && existed)
    old = json_incref(json_object_get(inf->items, key));
  if (deleted) {
    if (!existed)
      return;
    if (inf->items != NULL)
      json_object_del(inf->items, key);
    inf->cb(inf, FR_INF_DELETED, obj, NULL, inf->arg);
  } else {
    if (inf->items != NULL)
      json_object_set(inf->items, key, obj);
    inf->cb(inf, existed ? FR_INF_MODIFIED : FR_INF_ADDED, obj, old, inf->arg);
  }
  json_decref(old);
}

struct sweep {
  struct fr_informer *inf;
  json_t *gone;
};

static void sweep_one(const char *ns, const char *name, const char *rv, void *arg) {
  struct sweep *sw = arg;
  char key[600];

  if ((size_t)snprintf(key, sizeof(key), "%s/%s", ns, name) >= sizeof(key) ||
      strmap_get(&sw->inf->seen, key) != NULL)
    return;
  /* Newer than the list: an observed write the list could not show yet
   * (the watch from the list's resourceVersion brings it). */
  if (rv_older(sw->inf->list_rv, rv))
    return;
  /* The owner gets the last state it knows of: the cached object, or (its
   * own store) just the identity. */
  if (sw->inf->items != NULL)
    json_array_append(sw->gone, json_object_get(sw->inf->items, key));
  else
    json_array_append_new(sw->gone, json_pack("{s:{s:s,s:s,s:s}}", "metadata", "namespace", ns, "name", name,
                                              "resourceVersion", rv));
}

/* Every cached object's identity, for the sweep. */
static void items_each(struct fr_informer *inf,
                       void (*fn)(const char *ns, const char *name, const char *rv, void *fn_arg), void *fn_arg) {
  const char *key, *ns, *name;
  json_t *v;
  char k[600];

  json_object_foreach(inf->items, key, v) {
    if (obj_id(v, &ns, &name, k, sizeof(k)) == 0)
      fn(ns, name, obj_rv(v), fn_arg);
  }
}

/* After a complete list: what is cached but was not listed is gone. */
static void sweep(struct fr_informer *inf) {
  struct sweep sw = {inf, json_array()};
  json_t *v;
  size_t i;

  if (inf->items != NULL)
    items_each(inf, sweep_one, &sw);
  else
    inf->owner_each(inf->owner_arg, sweep_one, &sw);
  json_array_foreach(sw.gone, i, v) apply(inf, v, 1, 0);
  json_decref(sw.gone);
  strmap_close(&inf->seen);
}

static void on_list_page(const struct fr_kube_response *resp, void *arg) {
  struct fr_informer *inf = arg;
  json_t *doc, *items, *item;
  const char *cont, *rv;
  size_t i;
  char why[256];

  inf->call = NULL;
  if (resp->status != 200) {
    if (resp->status == 410)
      inf->cont[0] = '\0'; /* the continue token expired: start the list over */
    snprintf(why, sizeof(why), "list failed (%d %s)", resp->status,
             resp->error ? resp->error : "");
    backoff(inf, why);
    return;
  }
  {
    const struct fr_informer_keep top[] = {{"metadata", NULL}, {"items", inf->keep}, {NULL, NULL}};
    doc = parse_doc(inf, resp->body, resp->body_len, top);
  }
  items = json_object_get(doc, "items");
  if (!json_is_array(items)) {
    json_decref(doc);
    backoff(inf, "list response is not a list");
    return;
  }
  inf->last_contact_ms = uv_now(inf->loop);
  /* Page by page into the cache, so a relist never holds a second copy of
   * everything; what was not listed goes in the sweep at the end. */
  json_array_foreach(items, i, item) {
    json_t *t = inf->transform != NULL ? inf->transform(item, inf->transform_arg) : json_incref(item);
    if (t != NULL)
      apply(inf, t, 0, 1);
    json_decref(t);
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
  sweep(inf);
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
    strmap_close(&inf->seen); /* what an interrupted list had seen */
    inf->list_rv[0] = '\0';
  }
  fr_buf_init(&url);
  fr_buf_printf(&url, "%s?limit=%d%s", inf->path, LIST_PAGE, inf->selector_q);
  if (inf->cont[0] != '\0') {
    fr_buf_puts(&url, "&continue=");
    url_encode(&url, inf->cont);
  }
  /* A list never waits behind bulk calls (a mass terminate's deletes):
   * the cache must not go stale while they drain. */
  rc = url.data ? fr_kube_request(inf->client, "GET", url.data, NULL, NULL, 0,
                                  FR_KUBE_IDEMPOTENT | FR_KUBE_PRIORITY, NULL, on_list_page, inf, &inf->call)
                 : -ENOMEM;
  fr_buf_free(&url);
  if (rc != 0)
    backoff(inf, "cannot start a list");
}

/* ---------------------------------------------------------------------- */
/* echoes                                                                  */

/* Every object this router writes comes back to it twice: in the write's
 * answer (observed at once, fr_informer_observe) and as the watch event of
 * the same resourceVersion (or, after several writes in a row, older
 * ones). A resourceVersion names one state of one object, so the echo
 * holds nothing new; parsing it into a tree was a quarter of the router's
 * CPU per create. peek_event() reads just the
 * event's type and the object's namespace, name and resourceVersion from
 * the raw line, with a scanner that only skips values, and the echo is
 * dropped before any tree is built. Anything the scanner is not sure of
 * (an escape in those strings, a malformed line) goes the full way. */

static const char *skip_ws(const char *p, const char *e) {
  while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
    p++;
  return p;
}

/* <p> at '"': past the closing quote, or NULL. *<plain> (may be NULL) says
 * whether it held no escape. memchr() finds the quote; only a string with
 * a backslash before it is walked byte by byte. */
static const char *skip_string(const char *p, const char *e, int *plain) {
  const char *q = memchr(p + 1, '"', (size_t)(e - p - 1));

  if (plain != NULL)
    *plain = 1;
  if (q == NULL)
    return NULL;
  if (memchr(p + 1, '\\', (size_t)(q - p - 1)) == NULL)
    return q + 1;
  if (plain != NULL)
    *plain = 0;
  for (p++; p < e; p++) {
    if (*p == '"')
      return p + 1;
    if (*p == '\\')
      p++;
  }
  return NULL;
}

static const char *skip_value(const char *p, const char *e, int depth) {
  p = skip_ws(p, e);
  if (p >= e || depth > 64)
    return NULL;
  if (*p == '"')
    return skip_string(p, e, NULL);
  if (*p == '{' || *p == '[') {
    char close = *p == '{' ? '}' : ']';
    p = skip_ws(p + 1, e);
    if (p < e && *p == close)
      return p + 1;
    for (;;) {
      if (close == '}') {
        if (p >= e || *p != '"' || (p = skip_string(p, e, NULL)) == NULL)
          return NULL;
        p = skip_ws(p, e);
        if (p >= e || *p != ':')
          return NULL;
        p++;
      }
      if ((p = skip_value(p, e, depth + 1)) == NULL)
        return NULL;
      p = skip_ws(p, e);
      if (p < e && *p == ',') {
        p = skip_ws(p + 1, e);
        continue;
      }
      return p < e && *p == close ? p + 1 : NULL;
    }
  }
  while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n')
    p++; /* a number, true, false, null */
  return p;
}

struct peek_field {
  const char *key;
  char *out;              /* the plain string value, or NULL: an object to enter */
  size_t cap;
  struct peek_field *inner;
};

/* Walks the object at <p>, filling the fields of <f> (NULL-key ended), and
 * stops once each has been seen (the rest of a pod is not scanned).
 * 0, or -1 when the scan is not sure. */
static int peek_object(const char *p, const char *e, struct peek_field *f) {
  size_t nf = 0, seen = 0;

  while (f[nf].key != NULL)
    nf++;
  p = skip_ws(p, e);
  if (p >= e || *p != '{')
    return -1;
  p = skip_ws(p + 1, e);
  if (p < e && *p == '}')
    return 0;
  for (;;) {
    const char *k = p, *v;
    struct peek_field *hit = NULL;
    int plain;
    size_t i;
    if (p >= e || *p != '"' || (p = skip_string(p, e, &plain)) == NULL)
      return -1;
    for (i = 0; plain && f[i].key != NULL; i++)
      if ((size_t)(p - k - 2) == strlen(f[i].key) && memcmp(k + 1, f[i].key, (size_t)(p - k - 2)) == 0)
        hit = &f[i];
    p = skip_ws(p, e);
    if (p >= e || *p != ':')
      return -1;
    v = skip_ws(p + 1, e);
    if ((p = skip_value(v, e, 1)) == NULL)
      return -1;
    if (hit != NULL && hit->out != NULL) {
      if (*v != '"' || (skip_string(v, e, &plain), !plain) || (size_t)(p - v - 2) >= hit->cap)
        return -1;
      memcpy(hit->out, v + 1, (size_t)(p - v - 2));
      hit->out[p - v - 2] = '\0';
    } else if (hit != NULL && peek_object(v, p, hit->inner) != 0) {
      return -1;
    }
    if (hit != NULL && ++seen == nf)
      return 0; /* a field listed twice would be taken at its first */
    p = skip_ws(p, e);
    if (p < e && *p == ',') {
      p = skip_ws(p + 1, e);
      continue;
    }
    return p < e && *p == '}' ? 0 : -1;
  }
}

/* The type, namespace ("" when none), name and resourceVersion of a watch
 * event line: 0, or -1 (then parse it in full). */
static int peek_event(const char *line, size_t len, char type[16], char ns[256], char name[256], char rv[32]) {
  struct peek_field meta[] = {{"namespace", ns, 256, NULL}, {"name", name, 256, NULL},
                              {"resourceVersion", rv, 32, NULL}, {NULL, NULL, 0, NULL}};
  struct peek_field obj[] = {{"metadata", NULL, 0, meta}, {NULL, NULL, 0, NULL}};
  struct peek_field ev[] = {{"type", type, 16, NULL}, {"object", NULL, 0, obj}, {NULL, NULL, 0, NULL}};

  type[0] = ns[0] = name[0] = rv[0] = '\0';
  if (peek_object(line, line + len, ev) != 0 || type[0] == '\0' || name[0] == '\0' || rv[0] == '\0')
    return -1;
  return 0;
}


/* ---- building a tree of the kept fields only (fr_informer_set_keep) ---- */

/* The JSON value at [<p>, <e>) (already delimited by skip_value) as a tree:
 * jansson parses just that much. */
static json_t *parse_span(const char *p, const char *e) {
  return json_loadb(p, (size_t)(e - p), JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK, NULL);
}

/* The value at <p> filtered by <keep> (NULL: all of it), in one pass;
 * *<end> gets where it ended. NULL when the JSON is not what the scanner
 * expects (the caller parses it in full then). A plain string is made
 * directly; anything else kept whole goes through jansson. */
static json_t *scan_keep(const char *p, const char *e, const struct fr_informer_keep *keep, int depth,
                         const char **end) {
  json_t *out = NULL;
  const char *q, *after;
  int plain;

  p = skip_ws(p, e);
  if (depth > 64 || p >= e)
    return NULL;
  if (*p == '"') {
    if ((q = skip_string(p, e, &plain)) == NULL)
      return NULL;
    *end = q;
    return plain ? json_stringn(p + 1, (size_t)(q - p - 2)) : parse_span(p, q);
  }
  if (keep == NULL || (*p != '{' && *p != '[')) {
    if ((*end = skip_value(p, e, depth)) == NULL)
      return NULL;
    return parse_span(p, *end);
  }
  q = skip_ws(p + 1, e);
  if (*p == '[') {
    if ((out = json_array()) == NULL)
      return NULL;
    while (q < e && *q != ']') {
      json_t *v = scan_keep(q, e, keep, depth + 1, &after);
      if (v == NULL || json_array_append_new(out, v) != 0)
        goto bad;
      q = skip_ws(after, e);
      if (q < e && *q == ',')
        q = skip_ws(q + 1, e);
      else if (q >= e || *q != ']')
        goto bad;
    }
  } else {
    if ((out = json_object()) == NULL)
      return NULL;
    while (q < e && *q != '}') {
      const char *k = q, *ke;
      const struct fr_informer_keep *hit = NULL;
      size_t i, kl;
      json_t *v;
      if (*q != '"' || (ke = skip_string(k, e, &plain)) == NULL)
        goto bad;
      kl = (size_t)(ke - k - 2);
      for (i = 0; keep[i].key != NULL && hit == NULL; i++)
        if ((keep[i].key[0] == '*' && keep[i].key[1] == '\0') ||
            (plain && strlen(keep[i].key) == kl && memcmp(k + 1, keep[i].key, kl) == 0))
          hit = &keep[i];
      q = skip_ws(ke, e);
      if (q >= e || *q != ':')
        goto bad;
      if (hit == NULL) {
        if ((after = skip_value(q + 1, e, depth + 1)) == NULL)
          goto bad;
      } else {
        json_t *key = plain ? NULL : parse_span(k, ke); /* decodes the escapes */
        int rc;
        if ((v = scan_keep(q + 1, e, hit->sub, depth + 1, &after)) == NULL || (!plain && !json_is_string(key))) {
          json_decref(v);
          json_decref(key);
          goto bad;
        }
        rc = plain ? json_object_setn_new(out, k + 1, kl, v)
                   : json_object_setn_new(out, json_string_value(key), json_string_length(key), v);
        json_decref(key);
        if (rc != 0)
          goto bad;
      }
      q = skip_ws(after, e);
      if (q < e && *q == ',')
        q = skip_ws(q + 1, e);
      else if (q >= e || *q != '}')
        goto bad;
    }
  }
  if (q >= e)
    goto bad;
  *end = q + 1;
  return out;
bad:
  json_decref(out);
  return NULL;
}

/* The object of one watch event line (<type> out) or list page, parsed
 * with the informer's keep filter when it has one, in full otherwise. */
static json_t *parse_doc(struct fr_informer *inf, const char *text, size_t len, const struct fr_informer_keep *top) {
  const char *end;
  json_t *j;

  if (inf->keep != NULL && (j = scan_keep(text, text + len, top, 0, &end)) != NULL)
    return j;
  return json_loadb(text, len, 0, NULL);
}

/* ---------------------------------------------------------------------- */
/* watch                                                                   */

static void on_watch_line(const char *line, size_t len, void *arg) {
  struct fr_informer *inf = arg;
  json_t *ev, *obj;
  const char *type;
  char t[16], ns[256], name[256], rv[32], key[600];
  int peeked;

  if (inf->state != IS_WATCHING || len == 0)
    return;
  peeked = peek_event(line, len, t, ns, name, rv) == 0;
  if (peeked && (strcmp(t, "ADDED") == 0 || strcmp(t, "MODIFIED") == 0) &&
      (size_t)snprintf(key, sizeof(key), "%s/%s", ns, name) < sizeof(key)) {
    const char *prev = cached_rv(inf, ns, name, key);
    if (prev != NULL && (strcmp(prev, rv) == 0 || rv_older(rv, prev))) {
      /* An echo of what the cache holds, or of a state an observed write
       * already superseded (see "echoes" above). */
      inf->last_contact_ms = uv_now(inf->loop);
      inf->healthy = 1;
      inf->backoff_ms = 0;
      inf->stats.events++;
      inf->stats.echoes++;
      note_rv(inf, rv);
      return;
    }
  }
  if (peeked && strcmp(t, "ERROR") != 0) {
    /* an object event: only the fields the owner reads (an ERROR's
     * Status is read in full: its code says 410) */
    const struct fr_informer_keep top[] = {{"type", NULL}, {"object", inf->keep}, {NULL, NULL}};
    ev = parse_doc(inf, line, len, top);
  } else {
    ev = json_loadb(line, len, 0, NULL);
  }
  type = json_string_value(json_object_get(ev, "type"));
  obj = json_object_get(ev, "object");
  if (type == NULL || !json_is_object(obj)) {
    json_decref(ev);
    return;
  }
  inf->last_contact_ms = uv_now(inf->loop);
  if (strcmp(type, "ERROR") == 0) {
    /* 410 Expired: our RV left the server's history; relist. */
    if (json_integer_value(json_object_get(obj, "code")) == 410) {
      inf->stats.expired++;
      inf->rv[0] = '\0';
    }
  } else {
    /* A watch that delivers is working again after any earlier failure. */
    inf->healthy = 1;
    inf->backoff_ms = 0;
    inf->stats.events++;
    note_rv(inf, obj_rv(obj));
    if (strcmp(type, "BOOKMARK") != 0) {
      json_t *x = inf->transform ? inf->transform(obj, inf->transform_arg) : json_incref(obj);
      if (x != NULL)
        apply(inf, x, strcmp(type, "DELETED") == 0, 0);
      json_decref(x);
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

void fr_informer_set_transform(struct fr_informer *inf, fr_informer_transform_fn fn, void *arg) {
  inf->transform = fn;
  inf->transform_arg = arg;
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
  strmap_close(&inf->seen);
  free(inf->selector_q);
  free(inf->path);
  free(inf);
}

void fr_informer_observe(struct fr_informer *inf, json_t *obj) {
  const char *ns, *name, *prev;
  json_t *t;
  char key[600];

  if (obj == NULL || obj_id(obj, &ns, &name, key, sizeof(key)) != 0)
    return;
  prev = cached_rv(inf, ns, name, key);
  if (prev != NULL && !rv_older(prev, obj_rv(obj)))
    return;
  t = inf->transform ? inf->transform(obj, inf->transform_arg) : json_incref(obj);
  if (t != NULL)
    apply(inf, t, 0, 0);
  json_decref(t);
}

void fr_informer_set_keep(struct fr_informer *inf, const struct fr_informer_keep *keep) {
  inf->keep = keep;
}

void fr_informer_set_owner_store(struct fr_informer *inf, fr_informer_rv_fn rv, fr_informer_each_fn each,
                                 void *arg) {
  json_decref(inf->items);
  inf->items = NULL;
  inf->owner_rv = rv;
  inf->owner_each = each;
  inf->owner_arg = arg;
}
int fr_informer_synced(const struct fr_informer *inf) { return inf->synced; }
int fr_informer_healthy(const struct fr_informer *inf) { return inf->healthy; }
uint64_t fr_informer_last_contact_ms(const struct fr_informer *inf) { return inf->last_contact_ms; }
const char *fr_informer_rv(const struct fr_informer *inf) { return inf->rv; }
json_t *fr_informer_items(const struct fr_informer *inf) { return inf->items; }

json_t *fr_informer_get(const struct fr_informer *inf, const char *ns, const char *name) {
  char key[600];

  if (inf->items == NULL)
    return NULL;
  if ((size_t)snprintf(key, sizeof(key), "%s/%s", ns ? ns : "", name) >= sizeof(key))
    return NULL;
  return json_object_get(inf->items, key);
}

void fr_informer_stats(const struct fr_informer *inf, struct fr_informer_stats *out) {
  *out = inf->stats;
}
