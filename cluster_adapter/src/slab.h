/* slab.h - an allocator for many small records of one owner that may all
 * go at once: podstore's pod records.
 *
 * Why not malloc: a cache of a million pod records grows malloc's heap by
 * ~400 MiB, and when the sandboxes are terminated the heap is left full of
 * holes around whatever small, long-lived allocations landed between the
 * records meanwhile (a watch buffer, a reaper queue, a TLS session, a
 * metrics series). glibc can give back only whole free pages, and each
 * free chunk keeps the page with its header, so ~15,000 such survivors kept
 * ~40 MiB of a 100,000-sandbox heap resident after the terminate (measured
 * with heaptrack attached to the router and malloc_info: the heap's live
 * bytes were back at idle, its resident pages were not), ~100 MiB at a
 * million.
 *
 * Here the records live in pages of SLAB_PAGE bytes, each holding slots of
 * one size class (multiples of SLAB_GRAIN up to SLAB_MAX; larger requests
 * go to malloc), carved out of regions mapped with mmap. Nothing else
 * shares those pages, so a page whose last slot is freed goes back to the
 * system at once (madvise MADV_DONTNEED), and a region whose last page did
 * is unmapped: after a mass delete the memory is back however the
 * deletes were ordered. Hysteresis: the last page with room of a size
 * class stays even when empty, so one record coming and going does not
 * map and unmap a page each time.
 *
 * Loop thread only (no locking); one slab per owner, no globals.
 */
#ifndef FR_SLAB_H
#define FR_SLAB_H

#include <stddef.h>
#include <stdint.h>

#define SLAB_PAGE ((size_t)16 << 10)   /* 40 pod records of ~400 bytes */
#define SLAB_REGION ((size_t)4 << 20)  /* mapped at once, aligned to its size */
#define SLAB_GRAIN 32
#define SLAB_MAX 1024
#define SLAB_CLASSES (SLAB_MAX / SLAB_GRAIN)

struct slab_region;

struct slab_page {
  struct slab_page *prev, *next; /* in its class's list of pages with room, or the slab's empty list */
  struct slab_region *region;
  void *free;                    /* freed slots, linked through their first word */
  uint16_t cls;                  /* size class + 1; 0 = holds no slots (empty) */
  uint16_t used;                 /* slots handed out */
  uint16_t fresh;                /* slots from this index on were never handed out */
  uint16_t nslots;
};

struct slab {
  struct slab_region *regions;           /* mapped, newest first */
  struct slab_page *avail[SLAB_CLASSES]; /* pages with a free slot, per class */
  struct slab_page *empty;               /* pages given back, ready to be used again */
  size_t nregions;
  size_t npages;                         /* pages holding slots (resident) */
  size_t bytes;                          /* handed out, in slot sizes (malloc'd ones not counted) */
};

/* An empty slab; an all-zero struct slab is one too. */
void slab_init(struct slab *s);
/* Unmaps everything; every slot is invalid after. <s> is empty again. */
void slab_close(struct slab *s);
/* <size> bytes (> 0), aligned for any record of up to 16-byte alignment
 * (slot sizes are multiples of 32), or NULL when out of memory. */
void *slab_alloc(struct slab *s, size_t size);
/* Frees <p> (from slab_alloc of <s>; NULL is accepted). */
void slab_free(struct slab *s, void *p);
/* Bytes of <s>'s regions resident in memory, as the kernel counts them
 * (mincore: one system call per region). For tests and reports. */
size_t slab_resident(const struct slab *s);

#endif
