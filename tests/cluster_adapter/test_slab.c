/* test_slab.c - the allocator of podstore's records: every slot keeps its
 * bytes while others come and go, a mass free gives the pages back to the
 * system (resident memory measured with mincore, not only the counters),
 * a record coming and going does not map a page each time, and requests
 * past SLAB_MAX go to malloc. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "slab.h"

enum { N = 100000 };

/* Sizes like pod records' (struct fr_pod and its strings: 250-600 bytes). */
static size_t size_of(int i) {
  return 200 + (size_t)((i * 7919) % 400);
}

static void fill(unsigned char *p, size_t n, int i) {
  size_t k;

  for (k = 0; k < n; k++)
    p[k] = (unsigned char)(i + (int)k);
}

static int intact(const unsigned char *p, size_t n, int i) {
  size_t k;

  for (k = 0; k < n; k++)
    if (p[k] != (unsigned char)(i + (int)k))
      return 0;
  return 1;
}

/* A fixed permutation of 0..n-1 (deletes in no particular order, as a
 * terminate's watch events come). */
static int *shuffled(int n) {
  int *o = malloc((size_t)n * sizeof(*o)), i, j, t;
  uint32_t x = 12345;

  ck_assert_ptr_nonnull(o);
  for (i = 0; i < n; i++)
    o[i] = i;
  for (i = n - 1; i > 0; i--) {
    x = x * 1103515245u + 12345u;
    j = (int)((x >> 8) % (uint32_t)(i + 1));
    t = o[i], o[i] = o[j], o[j] = t;
  }
  return o;
}

START_TEST(mass_free_gives_the_pages_back) {
  struct slab s;
  unsigned char **p = calloc(N, sizeof(*p));
  int *order = shuffled(N), i;
  size_t full, bytes = 0;

  ck_assert_ptr_nonnull(p);
  slab_init(&s);
  for (i = 0; i < N; i++) {
    p[i] = slab_alloc(&s, size_of(i));
    ck_assert_ptr_nonnull(p[i]);
    ck_assert_uint_eq((uintptr_t)p[i] % 16, 0);
    fill(p[i], size_of(i), i);
    bytes += size_of(i);
  }
  full = slab_resident(&s);
  /* Resident: at least what was written, and not much more (slots round up
   * to 32 bytes, a page's tail may not fit one more slot). */
  ck_assert_uint_ge(full, bytes);
  ck_assert_uint_le(full, bytes + bytes / 4);
  ck_assert_uint_ge(s.bytes, bytes);
  /* All but 1,000, in shuffled order: every record left keeps its bytes. */
  for (i = 0; i < N - 1000; i++) {
    slab_free(&s, p[order[i]]);
    p[order[i]] = NULL;
  }
  for (i = 0; i < N; i++)
    if (p[i] != NULL)
      ck_assert(intact(p[i], size_of(i), i));
  for (i = N - 1000; i < N; i++) {
    slab_free(&s, p[order[i]]);
    p[order[i]] = NULL;
  }
  /* Everything back but the one page with room each used class keeps
   * (13 classes between 200 and 600 bytes); a region stays mapped only
   * for one of those (7 regions were mapped). */
  ck_assert_uint_eq(s.bytes, 0);
  ck_assert_uint_le(s.npages, 13);
  ck_assert_uint_le(s.nregions, 13);
  ck_assert_uint_le(slab_resident(&s), 13 * SLAB_PAGE);
  /* And it works on: the same load again fits where it was. */
  for (i = 0; i < N; i++) {
    p[i] = slab_alloc(&s, size_of(i));
    ck_assert_ptr_nonnull(p[i]);
    fill(p[i], size_of(i), i);
  }
  for (i = 0; i < N; i++) {
    ck_assert(intact(p[i], size_of(i), i));
    slab_free(&s, p[i]);
  }
  ck_assert_uint_le(s.npages, 13);
  slab_close(&s);
  ck_assert_uint_eq(s.nregions, 0);
  free(order);
  free(p);
}
END_TEST

START_TEST(freed_slots_are_used_again) {
  struct slab s;
  void *p[4000];
  size_t pages;
  int i, round;

  slab_init(&s);
  for (i = 0; i < 4000; i++)
    ck_assert_ptr_nonnull(p[i] = slab_alloc(&s, 100));
  pages = s.npages;
  ck_assert_uint_eq(pages, (4000 + SLAB_PAGE / 128 - 1) / (SLAB_PAGE / 128));
  /* Half of them come and go: no page more. */
  for (round = 0; round < 10; round++) {
    for (i = 0; i < 4000; i += 2)
      slab_free(&s, p[i]);
    for (i = 0; i < 4000; i += 2)
      ck_assert_ptr_nonnull(p[i] = slab_alloc(&s, 100));
    ck_assert_uint_eq(s.npages, pages);
  }
  for (i = 0; i < 4000; i++)
    slab_free(&s, p[i]);
  slab_close(&s);
}
END_TEST

/* Hysteresis: one record coming and going keeps its page, with no
 * madvise and page fault each time. */
START_TEST(one_record_churning_keeps_its_page) {
  struct slab s;
  int i;

  slab_init(&s);
  for (i = 0; i < 10000; i++) {
    void *p = slab_alloc(&s, 300);
    ck_assert_ptr_nonnull(p);
    memset(p, 1, 300);
    slab_free(&s, p);
    ck_assert_uint_eq(s.npages, 1);
  }
  ck_assert_uint_eq(s.nregions, 1);
  ck_assert_uint_eq(s.bytes, 0);
  slab_close(&s);
}
END_TEST

START_TEST(large_requests_go_to_malloc) {
  struct slab s;
  char *big, *small;

  slab_init(&s);
  big = slab_alloc(&s, SLAB_MAX + 1);
  small = slab_alloc(&s, SLAB_MAX);
  ck_assert_ptr_nonnull(big);
  ck_assert_ptr_nonnull(small);
  memset(big, 7, SLAB_MAX + 1);
  memset(small, 8, SLAB_MAX);
  ck_assert_uint_eq(s.bytes, SLAB_MAX);
  ck_assert_uint_eq(s.npages, 1);
  slab_free(&s, big);
  slab_free(&s, small);
  slab_free(&s, NULL);
  ck_assert_uint_eq(s.bytes, 0);
  slab_close(&s);
}
END_TEST

int main(void) {
  Suite *s = suite_create("slab");
  TCase *tc = tcase_create("core");
  SRunner *sr;
  int failed;

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, mass_free_gives_the_pages_back);
  tcase_add_test(tc, freed_slots_are_used_again);
  tcase_add_test(tc, one_record_churning_keeps_its_page);
  tcase_add_test(tc, large_requests_go_to_malloc);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
