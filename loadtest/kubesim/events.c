/* events.c - core/v1 Events, written by the components kubesim simulates
 * (scheduler, kubelet, ReplicaSet and Deployment controllers, taint
 * manager) and served as a stored kind (list, watch, field selectors on
 * involvedObject.*, reason, type and source).
 *
 * Bounds: a real cluster keeps events for an hour (the API server's
 * --event-ttl). Here every new event also takes a slot in one ring of
 * --event-limit entries (default 10000) shared by all namespaces; the
 * oldest event leaves when the ring is full or when it is an hour old
 * (checked whenever an event is recorded), and its removal is a DELETED
 * watch event as an etcd TTL expiry would be. Repeats do not take slots:
 * an identical event (same object, reason, message, type and source) is
 * found through a hash index of the ring (FNV-64 of those fields -> ring
 * position) and gets its count and lastTimestamp bumped, like the
 * client-go recorder's EventLogger. Names are the recorder's
 * "<object>.<UnixNano in hex>", so a list is in time order per object.
 * A 50,000-pod simulator thus holds at most --event-limit events.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/util.h"
#include "sim.h"

#define EVENT_TTL_MS (3600 * 1000)
/* The recorder truncates messages to this many bytes. */
#define EVENT_MSG_MAX 1024

struct ring_slot {
  char *ns, *name;
  uint64_t ms;
  uint64_t key;                /* aggregation key hash */
};

/* Open addressing, linear probing: aggregation key -> ring sequence. */
struct idx_entry {
  uint64_t key;
  uint64_t seq1;               /* sequence + 1; 0 = empty */
};

struct sim_events {
  struct ring_slot *slot;
  size_t cap, start, len;
  uint64_t first_seq;          /* sequence number of slot[start] */
  struct idx_entry *idx;
  size_t idx_mask;
  uint64_t last_ns;            /* names stay unique within a nanosecond */
};

static uint64_t idx_find(const struct sim_events *ev, uint64_t key, size_t *pos) {
  size_t i = (size_t)key & ev->idx_mask;

  for (; ev->idx[i].seq1 != 0; i = (i + 1) & ev->idx_mask) {
    if (ev->idx[i].key == key) {
      *pos = i;
      return ev->idx[i].seq1;
    }
  }
  *pos = i;
  return 0;
}

static void idx_put(struct sim_events *ev, uint64_t key, uint64_t seq) {
  size_t i;

  idx_find(ev, key, &i);
  ev->idx[i].key = key;
  ev->idx[i].seq1 = seq + 1;
}

/* Removes <key> if it still points at <seq> (backward-shift deletion keeps
 * every other key reachable without tombstones). */
static void idx_del(struct sim_events *ev, uint64_t key, uint64_t seq) {
  size_t i, j, home;

  if (idx_find(ev, key, &i) != seq + 1)
    return;
  for (j = i;;) {
    j = (j + 1) & ev->idx_mask;
    if (ev->idx[j].seq1 == 0)
      break;
    home = (size_t)ev->idx[j].key & ev->idx_mask;
    /* Stays if its home lies cyclically in (i, j]. */
    if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
      continue;
    ev->idx[i] = ev->idx[j];
    i = j;
  }
  ev->idx[i].seq1 = 0;
}

int events_init(struct sim *s) {
  struct sim_events *ev;

  if (s->opts.event_limit <= 0)
    return 0;
  ev = calloc(1, sizeof(*ev));
  if (ev == NULL)
    return -ENOMEM;
  ev->cap = (size_t)s->opts.event_limit;
  ev->slot = calloc(ev->cap, sizeof(*ev->slot));
  /* At most half full, so probes stay short. */
  for (ev->idx_mask = 15; ev->idx_mask < ev->cap * 2; ev->idx_mask = ev->idx_mask * 2 + 1)
    ;
  ev->idx = calloc(ev->idx_mask + 1, sizeof(*ev->idx));
  if (ev->slot == NULL || ev->idx == NULL) {
    free(ev->slot);
    free(ev->idx);
    free(ev);
    return -ENOMEM;
  }
  s->events = ev;
  return 0;
}

void events_free(struct sim *s) {
  struct sim_events *ev = s->events;
  size_t i;

  if (ev == NULL)
    return;
  for (i = 0; i < ev->len; i++) {
    struct ring_slot *r = &ev->slot[(ev->start + i) % ev->cap];
    free(r->ns);
    free(r->name);
  }
  free(ev->slot);
  free(ev->idx);
  free(ev);
  s->events = NULL;
}

static void fnv64(uint64_t *h, const char *str) {
  for (; str != NULL && *str; str++) {
    *h ^= (uint8_t)*str;
    *h *= 1099511628211ull;
  }
  /* a separator, so ("ab","c") and ("a","bc") differ */
  *h ^= 0xff;
  *h *= 1099511628211ull;
}

static uint64_t event_key(const char *ns, const char *uid, const char *type, const char *reason,
                          const char *component, const char *host, const char *msg) {
  uint64_t h = 14695981039346656037ull;

  fnv64(&h, ns);
  fnv64(&h, uid);
  fnv64(&h, type);
  fnv64(&h, reason);
  fnv64(&h, component);
  fnv64(&h, host);
  fnv64(&h, msg);
  return h;
}

/* Drops the oldest slot and the event it names (if still stored). */
static void ring_pop(struct sim *s) {
  struct sim_events *ev = s->events;
  struct ring_slot *r = &ev->slot[ev->start];
  struct sim_obj *o = store_get(s, K_EVENT, r->ns, r->name);

  if (o != NULL) {
    json_t *j = obj_json(o);
    if (j != NULL)
      store_commit(s, K_EVENT, o, j, EV_DELETED);
  }
  idx_del(ev, r->key, ev->first_seq);
  free(r->ns);
  free(r->name);
  r->ns = r->name = NULL;
  ev->start = (ev->start + 1) % ev->cap;
  ev->first_seq++;
  ev->len--;
}

static void ring_expire(struct sim *s) {
  struct sim_events *ev = s->events;
  uint64_t now = uv_now(s->loop);

  while (ev->len > 0 && (ev->len == ev->cap || ev->slot[ev->start].ms + EVENT_TTL_MS < now))
    ring_pop(s);
}

static void ring_push(struct sim *s, const char *ns, const char *name, uint64_t key) {
  struct sim_events *ev = s->events;
  struct ring_slot *r = &ev->slot[(ev->start + ev->len) % ev->cap];

  r->ns = strdup(ns);
  r->name = strdup(name);
  r->ms = uv_now(s->loop);
  r->key = key;
  idx_put(ev, key, ev->first_seq + ev->len);
  ev->len++;
}

/* The stored event an identical one would repeat, or NULL. */
static struct sim_obj *ring_lookup(struct sim *s, uint64_t key) {
  struct sim_events *ev = s->events;
  size_t pos;
  uint64_t seq1 = idx_find(ev, key, &pos);
  struct ring_slot *r;

  if (seq1 == 0 || seq1 - 1 < ev->first_seq || seq1 - 1 >= ev->first_seq + ev->len)
    return NULL;
  r = &ev->slot[(ev->start + (seq1 - 1 - ev->first_seq)) % ev->cap];
  return r->ns && r->name ? store_get(s, K_EVENT, r->ns, r->name) : NULL;
}

void event_emit(struct sim *s, struct sim_obj *about, const char *type, const char *reason,
                const char *component, const char *host, const char *fmt, ...) {
  char msg[EVENT_MSG_MAX + 1], name[320], ts[21];
  const char *ns;
  struct sim_obj *o;
  json_t *j, *src;
  struct sim_err e;
  uint64_t key, ns_now;
  va_list ap;

  if (s->events == NULL || about == NULL || s->stopping)
    return;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  /* Events about cluster-scoped objects (nodes) live in "default". */
  ns = kind_namespaced(about->kind) ? about->ns : "default";
  key = event_key(ns, about->uid, type, reason, component, host, msg);
  now_rfc3339(ts);
  o = ring_lookup(s, key);
  if (o != NULL) {
    j = obj_json(o);
    if (j == NULL)
      return;
    json_object_set_new(j, "count", json_integer(json_get_int(j, "count", 1) + 1));
    json_object_set_new(j, "lastTimestamp", json_string(ts));
    store_commit(s, K_EVENT, o, j, EV_MODIFIED);
    return;
  }
  /* Room first: the expiry must not drop the event it is about to add. */
  ring_expire(s);
  ns_now = (uint64_t)fr_wall_ms() * 1000000u;
  if (ns_now <= s->events->last_ns)
    ns_now = s->events->last_ns + 1;
  s->events->last_ns = ns_now;
  snprintf(name, sizeof(name), "%s.%" PRIx64, about->name, ns_now);
  src = json_pack("{s:s}", "component", component);
  if (src != NULL && host != NULL)
    json_object_set_new(src, "host", json_string(host));
  j = json_pack("{s:{s:s,s:s},s:{s:s,s:s,s:s,s:s,s:s},s:s,s:s,s:o,s:s,s:s,s:i,s:s,s:n,s:s,s:s}",
                "metadata", "name", name, "namespace", ns, "involvedObject", "kind",
                kind_name(about->kind), "namespace", about->ns, "name", about->name, "uid", about->uid,
                "apiVersion", kind_api_version(about->kind), "reason", reason, "message", msg,
                "source", src, "firstTimestamp", ts, "lastTimestamp", ts, "count", 1, "type", type,
                "eventTime", "reportingComponent", component, "reportingInstance", host ? host : "");
  if (j == NULL)
    return;
  if (!kind_namespaced(about->kind))
    json_object_del(json_object_get(j, "involvedObject"), "namespace");
  if (obj_prepare(s, K_EVENT, ns, j, &e) != 0) {
    json_decref(e.causes);
    json_decref(j);
    return;
  }
  if (store_commit(s, K_EVENT, NULL, j, EV_ADDED) != NULL)
    ring_push(s, ns, name, key);
}
