/* strmap.c - string-keyed open-addressing table (see strmap.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "strmap.h"

#define MIN_CAP 8

size_t strmap_hash(const char *s) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */

  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ULL;
  }
  return (size_t)h;
}

/* Slot of <key>, or of the empty slot where it would go (cap > 0). */
static size_t find(const struct strmap *m, const char *key) {
  size_t i = strmap_hash(key) & (m->cap - 1);

  while (m->slots[i] != NULL && strcmp(m->slots[i]->key, key) != 0)
    i = (i + 1) & (m->cap - 1);
  return i;
}

static int grow(struct strmap *m, size_t cap) {
  struct strmap_entry **old = m->slots;
  size_t oldcap = m->cap, i;

  m->slots = calloc(cap, sizeof(*m->slots));
  if (m->slots == NULL) {
    m->slots = old;
    return -ENOMEM;
  }
  m->cap = cap;
  for (i = 0; i < oldcap; i++)
    if (old[i] != NULL)
      m->slots[find(m, old[i]->key)] = old[i];
  free(old);
  return 0;
}

void strmap_init(struct strmap *m) {
  memset(m, 0, sizeof(*m));
}

void strmap_close(struct strmap *m) {
  size_t i;

  for (i = 0; i < m->cap; i++)
    free(m->slots[i]);
  free(m->slots);
  memset(m, 0, sizeof(*m));
}

struct strmap_entry *strmap_get(const struct strmap *m, const char *key) {
  return m->n > 0 ? m->slots[find(m, key)] : NULL;
}

struct strmap_entry *strmap_put(struct strmap *m, const char *key, int *added) {
  struct strmap_entry *e;
  size_t i, len;

  if (added != NULL)
    *added = 0;
  if (m->cap > 0 && (e = m->slots[find(m, key)]) != NULL)
    return e;
  /* At most half full, so probe runs stay short. */
  if ((m->n + 1) * 2 > m->cap && grow(m, m->cap ? m->cap * 2 : MIN_CAP) != 0)
    return NULL;
  len = strlen(key);
  e = calloc(1, sizeof(*e) + len + 1);
  if (e == NULL)
    return NULL;
  memcpy(e->key, key, len + 1);
  i = find(m, key);
  m->slots[i] = e;
  m->n++;
  if (added != NULL)
    *added = 1;
  return e;
}

/* Frees the entry in slot <i>; backward-shift deletion then moves up every
 * later entry of the run that the hole would cut off from its home slot.
 * Entries only ever move to the hole or later, never before <i>. */
static void remove_at(struct strmap *m, size_t i) {
  size_t mask = m->cap - 1, j, home;

  free(m->slots[i]);
  m->slots[i] = NULL;
  m->n--;
  for (j = (i + 1) & mask; m->slots[j] != NULL; j = (j + 1) & mask) {
    home = strmap_hash(m->slots[j]->key) & mask;
    if (((j - home) & mask) >= ((j - i) & mask)) {
      m->slots[i] = m->slots[j];
      m->slots[j] = NULL;
      i = j;
    }
  }
}

/* A table that emptied out gives its slots back: a set that held every
 * sandbox of a mass delete (50,000 names: a 1 MiB slot array per cluster)
 * would keep the array for good otherwise. Shrinks to a quarter full at
 * most when under an eighth full, so a table that goes up and down around
 * one size does not rehash every time; an empty table frees its array (as
 * after strmap_init). Out of memory: it stays as it is. */
static void shrink(struct strmap *m) {
  size_t cap = m->cap;

  if (m->n == 0) {
    free(m->slots);
    m->slots = NULL;
    m->cap = 0;
    return;
  }
  /* the smallest power of 2 that is at most a quarter full */
  for (cap = MIN_CAP; cap < m->n * 4; cap *= 2)
    ;
  if (cap < m->cap)
    grow(m, cap);
}

int strmap_del(struct strmap *m, const char *key) {
  size_t i;

  if (m->n == 0)
    return 0;
  i = find(m, key);
  if (m->slots[i] == NULL)
    return 0;
  remove_at(m, i);
  if (m->n == 0 || (m->n * 8 < m->cap && m->cap > MIN_CAP))
    shrink(m);
  return 1;
}

struct strmap_entry *strmap_next(const struct strmap *m, size_t *cursor) {
  while (*cursor < m->cap) {
    struct strmap_entry *e = m->slots[(*cursor)++];
    if (e != NULL)
      return e;
  }
  return NULL;
}

size_t strmap_sweep(struct strmap *m, int (*drop)(struct strmap_entry *e, void *arg), void *arg) {
  size_t mask = m->cap - 1, start, k, i, gone = 0;

  if (m->n == 0)
    return 0;
  /* Walk from just past an empty slot (there is one: the table is at most
   * half full) round to it. No probe run crosses the start, so removing at
   * <i> only moves later entries down to <i> or past it: re-reading <i>
   * and walking on sees each entry once. */
  for (start = 0; m->slots[start] != NULL; start++)
    ;
  for (k = 1; k <= m->cap; k++) {
    i = (start + k) & mask;
    while (m->slots[i] != NULL && drop(m->slots[i], arg)) {
      remove_at(m, i);
      gone++;
    }
  }
  if (gone > 0 && (m->n == 0 || (m->n * 8 < m->cap && m->cap > MIN_CAP)))
    shrink(m);
  return gone;
}
