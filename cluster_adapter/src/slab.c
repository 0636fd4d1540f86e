/* slab.c - pages of same-size slots in mmap'd regions (see slab.h). */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fr/assert.h"
#include "slab.h"

#if defined(__SANITIZE_ADDRESS__)
#define SLAB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLAB_ASAN 1
#endif
#endif
#ifdef SLAB_ASAN
/* A freed slot is poisoned, so the sanitizer build still catches a record
 * read after podstore_release() as it would with malloc. */
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define REGION_PAGES (SLAB_REGION / SLAB_PAGE)

struct slab_region {
  struct slab_region *prev, *next;
  char *base;                    /* SLAB_REGION bytes, aligned to SLAB_REGION */
  size_t nfresh;                 /* pages from this index on were never used */
  size_t nused;                  /* pages holding slots */
  struct slab_page pages[REGION_PAGES];
};

static size_t class_size(unsigned cls) {
  return ((size_t)cls + 1) * SLAB_GRAIN;
}

static char *page_base(const struct slab_page *pg) {
  return pg->region->base + (size_t)(pg - pg->region->pages) * SLAB_PAGE;
}

/* Doubly linked lists of pages (avail[] and empty). */
static void list_push(struct slab_page **head, struct slab_page *pg) {
  pg->prev = NULL;
  pg->next = *head;
  if (*head != NULL)
    (*head)->prev = pg;
  *head = pg;
}

static void list_remove(struct slab_page **head, struct slab_page *pg) {
  if (pg->prev != NULL)
    pg->prev->next = pg->next;
  else
    *head = pg->next;
  if (pg->next != NULL)
    pg->next->prev = pg->prev;
  pg->prev = pg->next = NULL;
}

void slab_init(struct slab *s) {
  memset(s, 0, sizeof(*s));
}

static void region_unmap(struct slab_region *r) {
  UNPOISON(r->base, SLAB_REGION);
  munmap(r->base, SLAB_REGION);
  free(r);
}

void slab_close(struct slab *s) {
  struct slab_region *r, *next;

  for (r = s->regions; r != NULL; r = next) {
    next = r->next;
    region_unmap(r);
  }
  memset(s, 0, sizeof(*s));
}

/* A new region, aligned to its size so that a slot's region is found from
 * its address: twice the size is mapped and the ends cut off. */
static struct slab_region *region_new(struct slab *s) {
  struct slab_region *r = calloc(1, sizeof(*r));
  char *m, *base;
  size_t head;

  if (r == NULL)
    return NULL;
  m = mmap(NULL, 2 * SLAB_REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    free(r);
    return NULL;
  }
  base = (char *)(((uintptr_t)m + SLAB_REGION - 1) & ~(uintptr_t)(SLAB_REGION - 1));
  head = (size_t)(base - m);
  if (head > 0)
    munmap(m, head);
  munmap(base + SLAB_REGION, SLAB_REGION - head);
  r->base = base;
  POISON(base, SLAB_REGION);
  r->next = s->regions;
  if (s->regions != NULL)
    s->regions->prev = r;
  s->regions = r;
  s->nregions++;
  return r;
}

/* A page to hold slots: one given back earlier, else a never used one,
 * else one of a new region. */
static struct slab_page *page_get(struct slab *s) {
  struct slab_page *pg = s->empty;
  struct slab_region *r;

  if (pg != NULL) {
    list_remove(&s->empty, pg);
    return pg;
  }
  for (r = s->regions; r != NULL; r = r->next)
    if (r->nfresh < REGION_PAGES)
      break;
  if (r == NULL && (r = region_new(s)) == NULL)
    return NULL;
  pg = &r->pages[r->nfresh++];
  pg->region = r;
  return pg;
}

void *slab_alloc(struct slab *s, size_t size) {
  struct slab_page *pg;
  unsigned cls;
  size_t csize;
  void *p;

  if (size == 0 || size > SLAB_MAX)
    return malloc(size > 0 ? size : 1);
  cls = (unsigned)((size + SLAB_GRAIN - 1) / SLAB_GRAIN - 1);
  csize = class_size(cls);
  if ((pg = s->avail[cls]) == NULL) {
    if ((pg = page_get(s)) == NULL)
      return NULL;
    pg->cls = (uint16_t)(cls + 1);
    pg->used = pg->fresh = 0;
    pg->nslots = (uint16_t)(SLAB_PAGE / csize);
    pg->free = NULL;
    pg->region->nused++;
    s->npages++;
    list_push(&s->avail[cls], pg);
  }
  if (pg->free != NULL) {
    p = pg->free;
    UNPOISON(p, csize);
    pg->free = *(void **)p;
  } else {
    FR_ASSERT(pg->fresh < pg->nslots);
    p = page_base(pg) + (size_t)pg->fresh++ * csize;
    UNPOISON(p, csize);
  }
  if (++pg->used == pg->nslots)
    list_remove(&s->avail[cls], pg);
  s->bytes += csize;
  return p;
}

/* The region holding <p>, or NULL (then malloc made it). A walk of the
 * regions: a 50,000-pod cluster's records fill about four. */
static struct slab_region *region_of(const struct slab *s, const void *p) {
  uintptr_t base = (uintptr_t)p & ~(uintptr_t)(SLAB_REGION - 1);
  struct slab_region *r;

  for (r = s->regions; r != NULL; r = r->next)
    if ((uintptr_t)r->base == base)
      return r;
  return NULL;
}

/* <pg> holds no slot any more: its memory goes back to the system, the
 * page to the empty list, and the region, once it was the last, too. */
static void page_release(struct slab *s, struct slab_page *pg) {
  struct slab_region *r = pg->region;
  size_t i;

  pg->cls = 0;
  pg->free = NULL;
  s->npages--;
  madvise(page_base(pg), SLAB_PAGE, MADV_DONTNEED);
  if (--r->nused > 0) {
    list_push(&s->empty, pg);
    return;
  }
  /* Every used page of the region is on the empty list: off it, then the
   * region goes. */
  for (i = 0; i < r->nfresh; i++)
    if (&r->pages[i] != pg)
      list_remove(&s->empty, &r->pages[i]);
  if (r->prev != NULL)
    r->prev->next = r->next;
  else
    s->regions = r->next;
  if (r->next != NULL)
    r->next->prev = r->prev;
  s->nregions--;
  region_unmap(r);
}

void slab_free(struct slab *s, void *p) {
  struct slab_region *r;
  struct slab_page *pg;
  unsigned cls;
  size_t csize;

  if (p == NULL)
    return;
  if ((r = region_of(s, p)) == NULL) {
    free(p);
    return;
  }
  pg = &r->pages[((size_t)((char *)p - r->base)) / SLAB_PAGE];
  FR_ASSERT(pg->cls != 0 && pg->used > 0);
  cls = pg->cls - 1u;
  csize = class_size(cls);
  FR_ASSERT(((size_t)((char *)p - page_base(pg))) % csize == 0);
  s->bytes -= csize;
  if (pg->used-- == pg->nslots)
    list_push(&s->avail[cls], pg); /* had no room: has now */
  *(void **)p = pg->free;
  pg->free = p;
  POISON(p, csize);
  if (pg->used > 0)
    return;
  /* Empty. The class's only page with room stays, so a record coming and
   * going does not map a page each time; any other goes back. */
  if (s->avail[cls] == pg && pg->next == NULL)
    return;
  list_remove(&s->avail[cls], pg);
  page_release(s, pg);
}

size_t slab_resident(const struct slab *s) {
  unsigned char vec[SLAB_REGION / 4096]; /* 1 KiB */
  long psz = sysconf(_SC_PAGESIZE);
  const struct slab_region *r;
  size_t n = 0, i, np;

  if (psz <= 0 || (size_t)psz < 4096)
    return 0;
  np = SLAB_REGION / (size_t)psz;
  for (r = s->regions; r != NULL; r = r->next) {
    if (mincore(r->base, SLAB_REGION, vec) != 0)
      continue;
    for (i = 0; i < np; i++)
      n += vec[i] & 1;
  }
  return n * (size_t)psz;
}
