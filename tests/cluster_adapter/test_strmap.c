/* test_strmap.c - the adapter's string-keyed table: values start at zero
 * and update in place, deletion under collisions and wrap-around keeps
 * every other key reachable (backward shift), growth keeps entries where
 * they are, a walk sees each entry once, a sweep removes exactly what it
 * is asked to, and an entry costs a fraction of a jansson object's pair. */
#include <check.h>
#include <jansson.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strmap.h"

/* Fills <out> with <n> keys whose home slot in a table of <cap> slots is
 * <home>: they all probe the same run. */
static void colliding_keys(size_t cap, size_t home, char out[][16], int n) {
  int found = 0, i;

  for (i = 0; found < n; i++) {
    snprintf(out[found], 16, "k%d", i);
    if ((strmap_hash(out[found]) & (cap - 1)) == home)
      found++;
  }
}

START_TEST(empty_zeroed_table_answers_without_allocating) {
  struct strmap m;
  size_t cur = 0;

  memset(&m, 0, sizeof(m));
  ck_assert_ptr_null(strmap_get(&m, "a"));
  ck_assert_int_eq(strmap_del(&m, "a"), 0);
  ck_assert_ptr_null(strmap_next(&m, &cur));
  ck_assert_uint_eq(strmap_size(&m), 0);
  ck_assert_ptr_null(m.slots);
  strmap_close(&m);
  strmap_close(&m); /* idempotent */
}
END_TEST

START_TEST(put_new_key_starts_at_zero_and_updates_in_place) {
  struct strmap m;
  struct strmap_entry *e, *again;
  int added = -1;

  strmap_init(&m);
  e = strmap_put(&m, "node-1", &added);
  ck_assert_ptr_nonnull(e);
  ck_assert_int_eq(added, 1);
  ck_assert_str_eq(e->key, "node-1");
  ck_assert_int_eq(e->v.n[0], 0);
  ck_assert_int_eq(e->v.n[1], 0);
  ck_assert_int_eq(e->v.n[2], 0);
  e->v.n[0] += 500;
  e->v.n[1] += 1 << 20;
  e->v.n[2]++;
  again = strmap_put(&m, "node-1", &added);
  ck_assert_ptr_eq(again, e);
  ck_assert_int_eq(added, 0);
  ck_assert_int_eq(strmap_get(&m, "node-1")->v.n[0], 500);
  ck_assert_int_eq(strmap_get(&m, "node-1")->v.n[1], 1 << 20);
  ck_assert_int_eq(strmap_get(&m, "node-1")->v.n[2], 1);
  ck_assert_ptr_null(strmap_get(&m, "node-2"));
  ck_assert_ptr_nonnull(strmap_put(&m, "", NULL)); /* the empty key is a key */
  ck_assert_uint_eq(strmap_size(&m), 2);
  ck_assert_int_eq(strmap_del(&m, "node-1"), 1);
  ck_assert_int_eq(strmap_del(&m, "node-1"), 0);
  ck_assert_ptr_null(strmap_get(&m, "node-1"));
  ck_assert_ptr_nonnull(strmap_get(&m, ""));
  ck_assert_uint_eq(strmap_size(&m), 1);
  strmap_close(&m);
  ck_assert_uint_eq(strmap_size(&m), 0);
}
END_TEST

/* Six keys share the last home slot of a 16-slot table, so their run wraps
 * to the front; two more live at slot 0, inside that run. Deleting each in
 * turn (front, middle, end of the run) leaves all others reachable. */
START_TEST(del_under_collisions_and_wraparound_keeps_the_rest_reachable) {
  char keys[8][16];
  static const int order[][8] = {{0, 1, 2, 3, 4, 5, 6, 7}, {7, 6, 5, 4, 3, 2, 1, 0},
                                 {3, 6, 0, 7, 1, 5, 2, 4}, {6, 2, 7, 3, 5, 0, 4, 1}};
  size_t o;
  int i, k;

  colliding_keys(16, 15, keys, 6);
  colliding_keys(16, 0, keys + 6, 2);
  for (o = 0; o < sizeof(order) / sizeof(order[0]); o++) {
    struct strmap m;

    strmap_init(&m);
    for (i = 0; i < 8; i++)
      strmap_put(&m, keys[i], NULL)->v.n[0] = i;
    ck_assert_uint_eq(m.cap, 16); /* half full: 8 keys fit without growing past 16 */
    for (k = 0; k < 8; k++) {
      int gone = order[o][k], j;
      ck_assert_int_eq(strmap_del(&m, keys[gone]), 1);
      for (j = k + 1; j < 8; j++) {
        struct strmap_entry *e = strmap_get(&m, keys[order[o][j]]);
        ck_assert_msg(e != NULL, "order %zu: %s lost after deleting %s", o, keys[order[o][j]], keys[gone]);
        ck_assert_int_eq(e->v.n[0], order[o][j]);
      }
      ck_assert_ptr_null(strmap_get(&m, keys[gone]));
      ck_assert_uint_eq(strmap_size(&m), (size_t)(7 - k));
    }
    strmap_close(&m);
  }
}
END_TEST

/* Deletion at 16 slots exactly: eight keys (the most a 16-slot table
 * holds) in one wrapped run, each deleted while the others stay. */
START_TEST(del_in_a_full_wrapped_run_at_fixed_size_keeps_the_rest) {
  char keys[8][16];
  int gone, i;

  colliding_keys(16, 13, keys, 8);
  for (gone = 0; gone < 8; gone++) {
    struct strmap m;
    strmap_init(&m);
    for (i = 0; i < 8; i++)
      strmap_put(&m, keys[i], NULL)->v.n[1] = 100 + i;
    ck_assert_uint_eq(m.cap, 16);
    ck_assert_int_eq(strmap_del(&m, keys[gone]), 1);
    for (i = 0; i < 8; i++) {
      if (i == gone)
        ck_assert_ptr_null(strmap_get(&m, keys[i]));
      else
        ck_assert_int_eq(strmap_get(&m, keys[i])->v.n[1], 100 + i);
    }
    /* Put back: it goes into the run again. */
    ck_assert_ptr_nonnull(strmap_put(&m, keys[gone], NULL));
    ck_assert_uint_eq(strmap_size(&m), 8);
    ck_assert_uint_eq(m.cap, 16);
    strmap_close(&m);
  }
}
END_TEST

/* Growth moves slots, not entries: an entry and its key keep their
 * addresses (podstore's interned strings rely on it). */
START_TEST(growth_keeps_entries_and_keys_in_place) {
  struct strmap m;
  struct strmap_entry *first;
  const char *key;
  char k[32];
  int i;

  strmap_init(&m);
  first = strmap_put(&m, "first", NULL);
  key = first->key;
  first->v.n[2] = 7;
  for (i = 0; i < 10000; i++) {
    snprintf(k, sizeof(k), "pod-%d", i);
    ck_assert_ptr_nonnull(strmap_put(&m, k, NULL));
  }
  ck_assert_uint_ge(m.cap, 2 * strmap_size(&m));
  ck_assert_ptr_eq(strmap_get(&m, "first"), first);
  ck_assert_ptr_eq(strmap_get(&m, "first")->key, key);
  ck_assert_int_eq(first->v.n[2], 7);
  strmap_close(&m);
}
END_TEST

/* Random puts, updates and deletes over 3,000 keys against a reference
 * jansson object: every lookup agrees, the count is right, and a walk
 * sees each entry once. */
START_TEST(table_matches_a_reference_under_churn) {
  struct strmap m;
  json_t *ref = json_object(), *v;
  unsigned seed = 7;
  const char *key;
  char k[32];
  int i;

  strmap_init(&m);
  for (i = 0; i < 100000; i++) {
    int n = (int)(rand_r(&seed) % 3000), op = (int)(rand_r(&seed) % 3);
    snprintf(k, sizeof(k), "tenant-%d", n);
    if (op < 2) {
      struct strmap_entry *e = strmap_put(&m, k, NULL);
      ck_assert_ptr_nonnull(e);
      e->v.n[0] += i;
      json_object_set_new(ref, k, json_integer(e->v.n[0]));
    } else {
      ck_assert_int_eq(strmap_del(&m, k), json_object_get(ref, k) != NULL);
      json_object_del(ref, k);
    }
    if (i % 4999 == 0) {
      json_object_foreach(ref, key, v) {
        struct strmap_entry *e = strmap_get(&m, key);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(e->v.n[0], json_integer_value(v));
      }
    }
  }
  ck_assert_uint_eq(strmap_size(&m), json_object_size(ref));
  {
    size_t cur = 0, seen = 0;
    struct strmap_entry *e;
    json_t *twice = json_object();
    while ((e = strmap_next(&m, &cur)) != NULL) {
      ck_assert_ptr_nonnull(json_object_get(ref, e->key));
      ck_assert_ptr_null(json_object_get(twice, e->key));
      json_object_set_new(twice, e->key, json_true());
      seen++;
    }
    ck_assert_uint_eq(seen, strmap_size(&m));
    json_decref(twice);
  }
  json_object_foreach(ref, key, v) ck_assert_int_eq(strmap_del(&m, key), 1);
  ck_assert_uint_eq(strmap_size(&m), 0);
  json_decref(ref);
  strmap_close(&m);
}
END_TEST

struct sweep_probe {
  json_t *seen;  /* key -> times visited */
  int modulo;    /* drop keys whose number is a multiple */
};

static int drop_multiples(struct strmap_entry *e, void *arg) {
  struct sweep_probe *p = arg;
  json_t *n = json_object_get(p->seen, e->key);

  json_object_set_new(p->seen, e->key, json_integer(json_integer_value(n) + 1));
  return e->v.n[0] % p->modulo == 0;
}

/* A sweep visits every entry once even as its removals shift later ones
 * back (including runs that wrap), removes exactly the ones it drops, and
 * leaves a table where every survivor is found. */
START_TEST(sweep_visits_each_once_and_removes_what_it_drops) {
  int sizes[] = {1, 7, 8, 100, 5000}, modulos[] = {1, 2, 3, 1000000};
  size_t si, mi;

  for (si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
    for (mi = 0; mi < sizeof(modulos) / sizeof(modulos[0]); mi++) {
      struct strmap m;
      struct sweep_probe p = {json_object(), modulos[mi]};
      const char *key;
      json_t *v;
      char k[32];
      size_t gone, want = 0;
      int i;

      strmap_init(&m);
      for (i = 0; i < sizes[si]; i++) {
        snprintf(k, sizeof(k), "pod-%d", i);
        strmap_put(&m, k, NULL)->v.n[0] = i;
        want += i % modulos[mi] == 0;
      }
      gone = strmap_sweep(&m, drop_multiples, &p);
      ck_assert_uint_eq(gone, want);
      ck_assert_uint_eq(json_object_size(p.seen), (size_t)sizes[si]);
      json_object_foreach(p.seen, key, v) ck_assert_int_eq(json_integer_value(v), 1);
      ck_assert_uint_eq(strmap_size(&m), (size_t)sizes[si] - want);
      for (i = 0; i < sizes[si]; i++) {
        snprintf(k, sizeof(k), "pod-%d", i);
        if (i % modulos[mi] == 0)
          ck_assert_ptr_null(strmap_get(&m, k));
        else
          ck_assert_int_eq(strmap_get(&m, k)->v.n[0], i);
      }
      json_decref(p.seen);
      strmap_close(&m);
    }
  }
}
END_TEST

/* The same with every key in one wrapped run: the sweep's start past an
 * empty slot is what keeps a wrapped run whole. */
START_TEST(sweep_over_a_wrapped_run_visits_each_once) {
  char keys[7][16];
  int keep;

  colliding_keys(16, 14, keys, 7);
  for (keep = 0; keep < 7; keep++) {
    struct strmap m;
    struct sweep_probe p = {json_object(), 2}; /* drops the even values */
    int i;

    strmap_init(&m);
    for (i = 0; i < 7; i++)
      strmap_put(&m, keys[i], NULL)->v.n[0] = i == keep ? 1 : 0;
    ck_assert_uint_eq(strmap_sweep(&m, drop_multiples, &p), 6);
    ck_assert_uint_eq(json_object_size(p.seen), 7);
    ck_assert_uint_eq(strmap_size(&m), 1);
    ck_assert_ptr_nonnull(strmap_get(&m, keys[keep]));
    json_decref(p.seen);
    strmap_close(&m);
  }
}
END_TEST

/* Nested tables (the adapter's ready warm pods per pool): the user owns
 * what v.map points to. */
START_TEST(nested_tables_hold_sets_per_key) {
  struct strmap pools;
  struct strmap_entry *e;
  size_t cur = 0;
  char k[32];
  int i;

  strmap_init(&pools);
  for (i = 0; i < 300; i++) {
    e = strmap_put(&pools, i % 3 == 0 ? "py" : i % 3 == 1 ? "node" : "go", NULL);
    ck_assert_ptr_nonnull(e);
    if (e->v.map == NULL)
      e->v.map = calloc(1, sizeof(*e->v.map));
    snprintf(k, sizeof(k), "fr-pool-%d", i);
    ck_assert_ptr_nonnull(strmap_put(e->v.map, k, NULL));
  }
  ck_assert_uint_eq(strmap_size(&pools), 3);
  ck_assert_uint_eq(strmap_size(strmap_get(&pools, "py")->v.map), 100);
  while ((e = strmap_next(&pools, &cur)) != NULL) {
    strmap_close(e->v.map);
    free(e->v.map);
  }
  strmap_close(&pools);
}
END_TEST

/* 200,000 keys in, all found, all out: ASan sees no leak or overrun. */
START_TEST(many_keys_in_and_out) {
  struct strmap m;
  char k[32];
  int i;

  strmap_init(&m);
  for (i = 0; i < 200000; i++) {
    snprintf(k, sizeof(k), "sb-%d", i);
    ck_assert_ptr_nonnull(strmap_put(&m, k, NULL));
  }
  ck_assert_uint_eq(strmap_size(&m), 200000);
  ck_assert_uint_ge(m.cap, 400000);
  for (i = 0; i < 200000; i++) {
    snprintf(k, sizeof(k), "sb-%d", i);
    ck_assert_ptr_nonnull(strmap_get(&m, k));
    ck_assert_int_eq(strmap_del(&m, k), 1);
    /* it shrinks as it empties: never under an eighth full for long */
    ck_assert(m.cap <= 16 || m.n * 8 >= m.cap);
  }
  ck_assert_uint_eq(strmap_size(&m), 0);
  /* empty: the slot array is gone, and the table works on */
  ck_assert_uint_eq(m.cap, 0);
  ck_assert_ptr_nonnull(strmap_put(&m, "again", NULL));
  ck_assert_ptr_nonnull(strmap_get(&m, "again"));
  strmap_close(&m);
}
END_TEST

/* Heap bytes per entry for what the adapter used jansson for: a node's
 * usage ([cpu_m, mem_b, pods] as a json array of integers) and a set
 * member (name -> true). Printed, and the typed table must stay under
 * half of jansson for counters and under 100 bytes for set members. */
START_TEST(an_entry_costs_less_than_a_jansson_pair) {
  enum { N = 50000 };
  struct mallinfo2 m0, m1, m2, m3, m4;
  struct strmap tm, ts;
  json_t *jm, *js;
  char k[32];
  double t_cnt, j_cnt, t_set, j_set;
  int i;

  strmap_init(&tm);
  strmap_init(&ts);
  m0 = mallinfo2();
  for (i = 0; i < N; i++) {
    struct strmap_entry *e;
    snprintf(k, sizeof(k), "node-%05d.zone-a", i);
    e = strmap_put(&tm, k, NULL);
    e->v.n[0] = 500, e->v.n[1] = 1 << 30, e->v.n[2] = 1;
  }
  m1 = mallinfo2();
  jm = json_object();
  for (i = 0; i < N; i++) {
    snprintf(k, sizeof(k), "node-%05d.zone-a", i);
    json_object_set_new(jm, k, json_pack("[I,I,I]", (json_int_t)500, (json_int_t)1 << 30, (json_int_t)1));
  }
  m2 = mallinfo2();
  for (i = 0; i < N; i++) {
    snprintf(k, sizeof(k), "fr-pool-py-7d9f8-%05d", i);
    strmap_put(&ts, k, NULL);
  }
  m3 = mallinfo2();
  js = json_object();
  for (i = 0; i < N; i++) {
    snprintf(k, sizeof(k), "fr-pool-py-7d9f8-%05d", i);
    json_object_set_new(js, k, json_true());
  }
  m4 = mallinfo2();
  if (m4.uordblks == m0.uordblks) {
    printf("strmap: heap statistics unavailable (sanitizer allocator); size not checked\n");
  } else {
    t_cnt = (double)(m1.uordblks - m0.uordblks) / N;
    j_cnt = (double)(m2.uordblks - m1.uordblks) / N;
    t_set = (double)(m3.uordblks - m2.uordblks) / N;
    j_set = (double)(m4.uordblks - m3.uordblks) / N;
    printf("strmap: node usage %.0f bytes per entry (jansson %.0f); set member %.0f (jansson %.0f)\n",
           t_cnt, j_cnt, t_set, j_set);
    ck_assert_msg(t_cnt * 2 < j_cnt, "counters: %.0f vs jansson %.0f", t_cnt, j_cnt);
    ck_assert_msg(t_set < 100, "set member: %.0f bytes", t_set);
  }
  json_decref(jm);
  json_decref(js);
  strmap_close(&tm);
  strmap_close(&ts);
}
END_TEST

int main(void) {
  Suite *s = suite_create("strmap");
  TCase *tc = tcase_create("core");
  SRunner *sr;
  int failed;

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, empty_zeroed_table_answers_without_allocating);
  tcase_add_test(tc, put_new_key_starts_at_zero_and_updates_in_place);
  tcase_add_test(tc, del_under_collisions_and_wraparound_keeps_the_rest_reachable);
  tcase_add_test(tc, del_in_a_full_wrapped_run_at_fixed_size_keeps_the_rest);
  tcase_add_test(tc, growth_keeps_entries_and_keys_in_place);
  tcase_add_test(tc, table_matches_a_reference_under_churn);
  tcase_add_test(tc, sweep_visits_each_once_and_removes_what_it_drops);
  tcase_add_test(tc, sweep_over_a_wrapped_run_visits_each_once);
  tcase_add_test(tc, nested_tables_hold_sets_per_key);
  tcase_add_test(tc, many_keys_in_and_out);
  tcase_add_test(tc, an_entry_costs_less_than_a_jansson_pair);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
