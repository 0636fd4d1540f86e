/* strmap.h - a small string-keyed hash table with a typed value: the
 * adapter's maps, sets and counters (node usage, ready warm pods per
 * pool, sandboxes per tenant, pod-name marks) and podstore's interned
 * strings.
 *
 * Open addressing with linear probing over a power-of-two array of entry
 * pointers, kept at most half full; deleting shifts the rest of the probe
 * run back instead of leaving tombstones, so a table that churns (pods
 * come and go all day) keeps short probes. Each entry is one allocation
 * holding its value and a copy of its key: an entry, and so its key,
 * stays at the same address while it is in the table, through growth
 * (podstore hands out interned strings that way).
 *
 * A jansson object used the same way costs more per entry (a node's
 * [cpu, mem, pods] as a json array: 320 bytes vs 64; a set member: 96 vs
 * 64, test_strmap measures both) and makes every counter update a chain
 * of untyped lookups.
 */
#ifndef FR_STRMAP_H
#define FR_STRMAP_H

#include <stddef.h>
#include <stdint.h>

struct strmap;

struct strmap_entry {
  union {
    int64_t n[3];       /* counters: what each one means is the user's */
    struct strmap *map; /* or a nested table the user allocates and frees */
  } v;                  /* zero when the entry is added */
  char key[];           /* the table's own copy */
};

struct strmap {
  struct strmap_entry **slots; /* NULL = empty; cap is a power of 2, or 0 until the first put */
  size_t cap, n;
};

/* An empty table. An all-zero struct strmap is one too, so a table inside
 * a calloc'ed owner needs no init and no failure path. */
void strmap_init(struct strmap *m);
/* Frees every entry and the array (not what a nested v.map points to: the
 * user frees those first); <m> is then empty and may be used again. */
void strmap_close(struct strmap *m);

static inline size_t strmap_size(const struct strmap *m) {
  return m->n;
}

/* The entry of <key>, or NULL. */
struct strmap_entry *strmap_get(const struct strmap *m, const char *key);
/* The entry of <key>, added with a zero value when absent (*<added>, if
 * given, says which). NULL: out of memory, nothing changed. */
struct strmap_entry *strmap_put(struct strmap *m, const char *key, int *added);
/* Removes <key> (freeing its entry): 1 if it was there, else 0. Not during
 * a strmap_next() walk of <m>: strmap_sweep() removes while it walks. A
 * table under an eighth full shrinks (entries keep their addresses). */
int strmap_del(struct strmap *m, const char *key);

/* Iteration: *<cursor> starts at 0; NULL at the end. <m> must not change
 * during the walk (other tables may). */
struct strmap_entry *strmap_next(const struct strmap *m, size_t *cursor);

/* Visits every entry exactly once and removes those for which <drop>
 * returns nonzero; returns how many went. <drop> may change any table but
 * <m>. */
size_t strmap_sweep(struct strmap *m, int (*drop)(struct strmap_entry *e, void *arg), void *arg);

/* FNV-1a of <s> (podstore's table uses it too). */
size_t strmap_hash(const char *s);

#endif
