/* podstore.h - the adapter's cache of sandbox and pool pods: one compact
 * record per pod (struct fr_pod, fr/adapter_types.h) in an open-addressing hash
 * table keyed by pod name.
 *
 * A pod as a jansson tree costs ~7.5 KB even slimmed (11 objects, 35
 * pairs, 21 strings, 104 allocations); the record is ~250 bytes with its
 * names, in one slot of the store's slab (slab.h: pages that go back to
 * the system when emptied, so a mass delete returns the memory), so
 * 1,000,000 sandboxes fit in a router of a few hundred MiB. Strings
 * that repeat across pods (tenant, pool, state, node, reason) are interned
 * once per cluster.
 */
#ifndef FR_PODSTORE_H
#define FR_PODSTORE_H

#include <jansson.h>
#include <stddef.h>

#include "fr/adapter_types.h"
#include "slab.h"
#include "strmap.h"

struct podstore {
  struct fr_pod **slots;    /* linear probing, NULL = empty; cap is a power of 2 */
  size_t cap, n;
  struct strmap strings;    /* interned string -> v.n[0] reference count */
  struct slab slab;         /* the records: pages that go back to the system when their last record
                               is released, so a mass delete gives the memory back (slab.h) */
  const char *gpu_resource; /* counted into fr_pod.gpus (borrowed); NULL = "nvidia.com/gpu" */
};

int podstore_init(struct podstore *s);
/* Frees every record. */
void podstore_free(struct podstore *s);

struct fr_pod *podstore_get(const struct podstore *s, const char *name);
/* Builds a record from a pod as the API serves it (NULL: not a pod, or out
 * of memory). The record is not in the store yet. */
struct fr_pod *podstore_parse(struct podstore *s, json_t *pod);
/* Puts <p> in; the record it replaces (same name) goes to *old (NULL if
 * none) for the caller to release. -ENOMEM: nothing changed. */
int podstore_put(struct podstore *s, struct fr_pod *p, struct fr_pod **old);
/* Takes the record of <name> out (the caller releases it) or NULL. */
struct fr_pod *podstore_take(struct podstore *s, const char *name);
void podstore_release(struct podstore *s, struct fr_pod *p);
/* Iteration: *cursor starts at 0; NULL at the end. The store must not
 * change during a walk. */
struct fr_pod *podstore_next(const struct podstore *s, size_t *cursor);

#endif
