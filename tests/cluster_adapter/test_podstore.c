/* test_podstore.c - the adapter's compact pod cache: records parsed from
 * pods as the API serves them, the hash table under insert / replace /
 * delete churn (checked against a reference map), interned strings
 * released, and the memory a record costs. */
#include <check.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "podstore.h"

static json_t *pod_json(const char *name, const char *rv, const char *tenant, const char *node) {
  return json_pack(
      "{s:{s:s,s:s,s:s,s:s,s:{s:s,s:s,s:s,s:s,s:s,s:s,s:s},s:{s:s,s:s,s:s,s:s}},"
      "s:{s:s,s:[{s:s,s:{s:{s:s,s:s}}},{s:s,s:{s:{s:s,s:s}}}]},"
      "s:{s:s,s:s,s:[{s:s,s:s},{s:s,s:s}]}}",
      "metadata", "name", name, "namespace", "sandboxes", "resourceVersion", rv, "creationTimestamp",
      "2026-11-22T02:00:00Z", "labels", FR_LABEL_SANDBOX, "true", FR_LABEL_POOL, "py", FR_LABEL_STATE,
      "claimed", FR_LABEL_TENANT, tenant, FR_LABEL_NAME, "job-1", "team", "rl", "fedrouter.io/extra", "x",
      "annotations", FR_ANN_CREATED, "2026-11-22T02:00:05Z", FR_ANN_EXPIRES, "2026-11-22T03:00:05Z",
      FR_ANN_WARM, "true", FR_ANN_ENV, "{\"A\":\"1\"}", "spec", "nodeName", node, "containers", "name", "a",
      "resources", "requests", "cpu", "500m", "memory", "1Gi", "name", "b", "resources", "requests", "cpu",
      "1", "memory", "512Mi", "status", "phase", "Running", "startTime", "2026-11-22T02:00:01Z",
      "conditions", "type", "Ready", "status", "True", "type", "PodScheduled", "status", "True");
}

START_TEST(parse_keeps_what_the_router_needs) {
  struct podstore s;
  json_t *j = pod_json("fr-pool-py-abcde", "12345", "acme", "node-7");
  struct fr_pod *p;
  const char *k, *v;
  size_t off = 0;
  int n = 0;

  /* The names of its create-time secrets (a sandbox with an agent). */
  json_object_set_new(json_object_get(json_object_get(j, "metadata"), "annotations"), FR_ANN_SECRETS,
                      json_string("HF_TOKEN,ONLY_A"));
  ck_assert_int_eq(podstore_init(&s), 0);
  p = podstore_parse(&s, j);
  ck_assert_ptr_nonnull(p);
  ck_assert_str_eq(p->name, "fr-pool-py-abcde");
  ck_assert_str_eq(p->rv, "12345");
  ck_assert_str_eq(p->pool, "py");
  ck_assert_str_eq(p->tenant, "acme");
  ck_assert_str_eq(p->state, "claimed");
  ck_assert_str_eq(p->sbname, "job-1");
  ck_assert_str_eq(p->node, "node-7");
  ck_assert_str_eq(p->env, "{\"A\":\"1\"}");
  ck_assert_str_eq(p->secrets, "HF_TOKEN,ONLY_A");
  ck_assert_int_eq(p->cpu_m, 1500);
  ck_assert_int_eq(p->mem_b, 1610612736);
  ck_assert_int_eq(p->phase, FR_POD_RUNNING);
  ck_assert_int_eq(p->ready, 1);
  ck_assert_int_eq(p->terminating, 0);
  ck_assert_int_eq(p->warm, 1);
  ck_assert_ptr_null(p->unschedulable);
  ck_assert_ptr_null(p->disruption);
  ck_assert_int_eq(p->expires_s - p->created_s, 3600);
  ck_assert_int_eq(p->created_s - p->creation_s, 5);
  ck_assert_int_eq(p->start_s - p->creation_s, 1);
  ck_assert_str_eq(fr_pod_label(p, "team"), "rl");
  ck_assert_str_eq(fr_pod_label(p, FR_LABEL_TENANT), "acme");
  ck_assert_str_eq(fr_pod_label(p, FR_LABEL_SANDBOX), "true");
  ck_assert_ptr_null(fr_pod_label(p, "nope"));
  while (fr_pod_label_next(p, &off, &k, &v)) {
    ck_assert(strcmp(k, "team") == 0 || strcmp(k, "fedrouter.io/extra") == 0);
    n++;
  }
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(fr_pod_done(p), 0);
  podstore_release(&s, p);
  ck_assert_int_eq(strmap_size(&s.strings), 0);

  /* Evicted by the cluster: the DisruptionTarget condition's reason. */
  json_array_append_new(json_object_get(json_object_get(j, "status"), "conditions"),
                        json_pack("{s:s,s:s,s:s}", "type", "DisruptionTarget", "status", "True", "reason",
                                  "DeletionByTaintManager"));
  p = podstore_parse(&s, j);
  ck_assert_ptr_nonnull(p);
  ck_assert_str_eq(p->disruption, "DeletionByTaintManager");
  podstore_release(&s, p);
  ck_assert_int_eq(strmap_size(&s.strings), 0);

  /* Unschedulable, terminating, no annotations; a resourceVersion too long
   * for the record and a nameless object are refused. */
  json_decref(j);
  j = json_pack("{s:{s:s,s:s,s:s},s:{s:s,s:[{s:s,s:s,s:s,s:s}]}}", "metadata", "name", "sb-1",
                "resourceVersion", "7", "deletionTimestamp", "2026-11-22T02:00:00Z", "status", "phase",
                "Pending", "conditions", "type", "PodScheduled", "status", "False", "reason", "Unschedulable",
                "message", "0/3 nodes are available");
  p = podstore_parse(&s, j);
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_null(p->disruption);
  ck_assert_str_eq(p->unschedulable, "0/3 nodes are available");
  ck_assert_int_eq(p->terminating, 1);
  ck_assert_ptr_null(p->env);
  ck_assert_ptr_null(p->secrets);
  ck_assert_int_eq(fr_pod_done(p), 1);
  ck_assert_int_eq(p->expires_s, -1);
  ck_assert_ptr_null(p->tenant);
  ck_assert_ptr_null(p->labels);
  podstore_release(&s, p);
  json_object_set_new(json_object_get(j, "metadata"), "resourceVersion", json_string("123456789012345678901234"));
  ck_assert_ptr_null(podstore_parse(&s, j));
  json_object_del(json_object_get(j, "metadata"), "name");
  ck_assert_ptr_null(podstore_parse(&s, j));
  json_decref(j);
  podstore_free(&s);
}
END_TEST

/* Random inserts, replacements and deletes against a reference map: every
 * lookup agrees, the count is right, and a walk sees each record once.
 * Deletions exercise the backward shift of linear probing. */
/* Labels are packed as key NUL value NUL pairs, ended by an empty key: a
 * pod with an empty label key hid every label after it. */
START_TEST(parse_skips_an_empty_label_key) {
  struct podstore s;
  json_t *j = json_pack("{s:{s:s,s:s,s:{s:s,s:s,s:s}}}", "metadata", "name", "sb-e", "resourceVersion", "5",
                        "labels", "", "x", "team", "ml", "z", "");
  struct fr_pod *p;
  const char *k, *v;
  size_t off = 0;
  int n = 0;

  ck_assert_int_eq(podstore_init(&s), 0);
  p = podstore_parse(&s, j);
  ck_assert_ptr_nonnull(p);
  ck_assert_str_eq(fr_pod_label(p, "team"), "ml");
  ck_assert_str_eq(fr_pod_label(p, "z"), "");
  ck_assert_ptr_null(fr_pod_label(p, ""));
  while (fr_pod_label_next(p, &off, &k, &v)) {
    ck_assert(k[0] != '\0');
    n++;
  }
  ck_assert_int_eq(n, 2);
  podstore_release(&s, p);
  podstore_free(&s);
  json_decref(j);
}
END_TEST

START_TEST(table_matches_a_reference_under_churn) {
  struct podstore s;
  json_t *ref = json_object(), *v;
  unsigned seed = 42;
  char name[32], rv[16];
  const char *key;
  int i;

  ck_assert_int_eq(podstore_init(&s), 0);
  for (i = 0; i < 60000; i++) {
    int k = (int)(rand_r(&seed) % 5000), op = (int)(rand_r(&seed) % 3);
    struct fr_pod *p, *old = NULL;
    snprintf(name, sizeof(name), "sb-%d", k);
    if (op < 2) {
      json_t *j;
      snprintf(rv, sizeof(rv), "%d", i);
      j = pod_json(name, rv, k % 2 ? "a" : "b", k % 3 ? "n1" : "n2");
      p = podstore_parse(&s, j);
      json_decref(j);
      ck_assert_ptr_nonnull(p);
      ck_assert_int_eq(podstore_put(&s, p, &old), 0);
      ck_assert((old != NULL) == (json_object_get(ref, name) != NULL));
      podstore_release(&s, old);
      json_object_set_new(ref, name, json_string(rv));
    } else {
      p = podstore_take(&s, name);
      ck_assert((p != NULL) == (json_object_get(ref, name) != NULL));
      podstore_release(&s, p);
      json_object_del(ref, name);
    }
    if (i % 997 == 0) {
      json_object_foreach(ref, key, v) {
        struct fr_pod *got = podstore_get(&s, key);
        ck_assert_ptr_nonnull(got);
        ck_assert_str_eq(got->rv, json_string_value(v));
      }
    }
  }
  ck_assert_uint_eq(s.n, json_object_size(ref));
  {
    size_t cur = 0, seen = 0;
    struct fr_pod *p;
    while ((p = podstore_next(&s, &cur)) != NULL) {
      ck_assert_ptr_nonnull(json_object_get(ref, p->name));
      seen++;
    }
    ck_assert_uint_eq(seen, s.n);
  }
  /* Interned strings are shared: tenants a/b, state, pool, nodes n1/n2. */
  ck_assert_int_le(strmap_size(&s.strings), 6);
  json_object_foreach(ref, key, v) podstore_release(&s, podstore_take(&s, key));
  ck_assert_uint_eq(s.n, 0);
  ck_assert_int_eq(strmap_size(&s.strings), 0);
  json_decref(ref);
  podstore_free(&s);
}
END_TEST

/* What 100,000 cached sandboxes cost (the router's 1M / 512 MiB budget
 * leaves ~500 bytes per sandbox for everything; the record and its
 * strings are one slot of the store's slab, 288 bytes here), and that a
 * mass delete gives it back: the table its slots, the slab its pages
 * (resident memory as the kernel counts it). */
START_TEST(a_record_is_small) {
  struct podstore s;
  struct mallinfo2 before, after;
  char name[32], rv[16];
  double per;
  size_t full;
  int i;

  ck_assert_int_eq(podstore_init(&s), 0);
  before = mallinfo2();
  for (i = 0; i < 100000; i++) {
    struct fr_pod *p, *old = NULL;
    json_t *j;
    snprintf(name, sizeof(name), "fr-pool-py-%05d", i);
    snprintf(rv, sizeof(rv), "%d", 1000000 + i);
    j = pod_json(name, rv, "acme", "node-7");
    p = podstore_parse(&s, j);
    json_decref(j);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(podstore_put(&s, p, &old), 0);
  }
  after = mallinfo2();
  full = slab_resident(&s.slab);
  per = (double)(after.uordblks - before.uordblks + full) / 100000.0;
  ck_assert_uint_ge(full, (size_t)100000 * sizeof(struct fr_pod));
  /* Taken out again, all but 100: the table gives its slots back (at most
   * a quarter full, never below its first size), the slab its pages but
   * the two or three the last 100 records fill and the one it keeps with
   * room, and the interned strings go with the last record of each. */
  ck_assert_uint_ge(s.cap, 200000);
  for (i = 100; i < 100000; i++) {
    snprintf(name, sizeof(name), "fr-pool-py-%05d", i);
    podstore_release(&s, podstore_take(&s, name));
  }
  ck_assert_uint_eq(s.n, 100);
  ck_assert_uint_le(s.cap, 100 * 8);
  ck_assert_uint_le(s.slab.npages, 4);
  ck_assert_uint_le(slab_resident(&s.slab), 4 * SLAB_PAGE);
  for (i = 0; i < 100; i++) {
    snprintf(name, sizeof(name), "fr-pool-py-%05d", i);
    ck_assert_ptr_nonnull(podstore_get(&s, name));
    ck_assert_str_eq(podstore_get(&s, name)->tenant, "acme");
  }
  if (after.uordblks == before.uordblks) {
    printf("podstore: heap statistics unavailable (sanitizer allocator); size not checked\n");
  } else {
    printf("podstore: %.0f bytes per cached pod (%.0f in the slab)\n", per, (double)full / 100000.0);
    ck_assert_msg(per < 320, "%.0f bytes per cached pod", per);
  }
  podstore_free(&s);
}
END_TEST

int main(void) {
  Suite *s = suite_create("podstore");
  TCase *tc = tcase_create("core");
  SRunner *sr;
  int failed;

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, parse_keeps_what_the_router_needs);
  tcase_add_test(tc, parse_skips_an_empty_label_key);
  tcase_add_test(tc, table_matches_a_reference_under_churn);
  tcase_add_test(tc, a_record_is_small);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
