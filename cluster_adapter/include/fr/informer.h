/* fr/informer.h - a list+watch cache of one kind of Kubernetes object, like
 * client-go's reflector + store.
 *
 * Start-up lists in pages (limit=500, continue) and then watches from the
 * list's resourceVersion with bookmarks. A watch that ends is resumed from
 * the last resourceVersion seen; a 410 Expired (HTTP or ERROR event)
 * relists: listed objects are applied page by page (ADDED / MODIFIED for
 * what changed) and, once the list is complete, what it did not contain is
 * DELETED, so the owner never misses a change. Failures back off exponentially (100 ms doubling to 5 s, with
 * jitter) and are retried forever; fr_informer_healthy() says whether the
 * last attempt worked.
 *
 * The cache holds each object as a jansson object, keyed "namespace/name",
 * unless the owner keeps its own store (fr_informer_set_owner_store).
 */
#ifndef FR_INFORMER_H
#define FR_INFORMER_H

#include <jansson.h>
#include <stdint.h>

struct fr_kube_client;
struct fr_informer;

enum fr_informer_event {
  FR_INF_ADDED,
  FR_INF_MODIFIED,
  FR_INF_DELETED,
  FR_INF_SYNCED,      /* the first complete list is in the cache (obj NULL) */
};

/* <obj> is borrowed: valid during the call (for DELETED, the last state);
 * take a reference to keep it. For MODIFIED, <old> is the previous state. */
typedef void (*fr_informer_cb)(struct fr_informer *inf, enum fr_informer_event ev,
                               json_t *obj, json_t *old, void *arg);

/* <path> is the collection ("/api/v1/namespaces/sandboxes/pods");
 * <label_selector> may be NULL. Does not start anything. */
int fr_informer_new(struct fr_kube_client *client, const char *path,
                    const char *label_selector, fr_informer_cb cb, void *arg,
                    struct fr_informer **out);
/* Objects are reduced by <fn> before they are cached and delivered (as
 * client-go's TransformFunc): it gets a borrowed object and returns a new
 * reference (or NULL to drop the object). The result must keep
 * metadata.namespace, metadata.name and metadata.resourceVersion. Set it
 * before fr_informer_start(). */
typedef json_t *(*fr_informer_transform_fn)(json_t *obj, void *arg);
void fr_informer_set_transform(struct fr_informer *inf, fr_informer_transform_fn fn, void *arg);
/* The owner keeps the objects itself (a compact store, say) and the
 * informer caches nothing: it asks <rv> for the resourceVersion the owner
 * holds for an object (NULL: none) and, after every complete list, <each>
 * for all the objects the owner holds, to tell which are gone. The owner
 * applies each event to its store in the callback, which gets old = NULL
 * for MODIFIED; fr_informer_items() and fr_informer_get() return NULL.
 * Set before fr_informer_start(). */
typedef const char *(*fr_informer_rv_fn)(void *arg, const char *ns, const char *name);
typedef void (*fr_informer_each_fn)(void *arg,
                                    void (*fn)(const char *ns, const char *name, const char *rv, void *fn_arg),
                                    void *fn_arg);
void fr_informer_set_owner_store(struct fr_informer *inf, fr_informer_rv_fn rv, fr_informer_each_fn each,
                                 void *arg);
/* Which fields of the objects the owner reads: a tree of keys, each
 * keeping its value whole (sub NULL) or only the keys of <sub> in it ("*"
 * matches any key; an array's elements are filtered by the same keys),
 * ended by a NULL key. With it the informer builds trees of just those
 * fields from the raw list pages and watch events, skipping the rest
 * unparsed (a sandbox pod: ~40 of ~150 JSON values); metadata.name,
 * namespace and resourceVersion are always kept. Borrowed (static): set
 * before fr_informer_start(). Observed writes are not filtered. */
struct fr_informer_keep {
  const char *key;
  const struct fr_informer_keep *sub;
};
void fr_informer_set_keep(struct fr_informer *inf, const struct fr_informer_keep *keep);
/* Begins listing. Callbacks arrive from later loop turns. */
int fr_informer_start(struct fr_informer *inf);
/* Stops everything and frees; no callback after this returns. Accepts NULL.
 * Must not be called from inside this informer's own callback. */
void fr_informer_free(struct fr_informer *inf);

/* Read-your-own-writes, like client-go's MutationCache: <obj> (borrowed)
 * is what an API write just returned. It enters the cache, through the
 * transform and with the usual callback, unless the cache already holds
 * that resourceVersion or a newer one. So a lookup right after a write
 * sees it even while the watch lags (backing off after an outage, say).
 * Watch events and relists older than an observed write do not undo it;
 * the watch position is not moved, so no change is skipped. */
void fr_informer_observe(struct fr_informer *inf, json_t *obj);

int fr_informer_synced(const struct fr_informer *inf);
/* 1 while the last list or watch attempt succeeded. */
int fr_informer_healthy(const struct fr_informer *inf);
/* Milliseconds (uv_now) of the last successful contact: a list page, a
 * watch event or bookmark, or a clean watch end. 0 if never. */
uint64_t fr_informer_last_contact_ms(const struct fr_informer *inf);
/* Latest resourceVersion seen ("" before the first list). */
const char *fr_informer_rv(const struct fr_informer *inf);
/* The cache: "namespace/name" -> object. Borrowed; do not modify. */
json_t *fr_informer_items(const struct fr_informer *inf);
json_t *fr_informer_get(const struct fr_informer *inf, const char *ns, const char *name);

struct fr_informer_stats {
  uint64_t lists;       /* complete lists (1 + relists) */
  uint64_t watches;     /* watch requests started */
  uint64_t events;      /* watch events applied */
  uint64_t echoes;      /* of them, the version the cache holds or an older one: dropped unparsed */
  uint64_t expired;     /* 410s that forced a relist */
  uint64_t failures;    /* failed list/watch attempts */
};
void fr_informer_stats(const struct fr_informer *inf, struct fr_informer_stats *out);

#endif
