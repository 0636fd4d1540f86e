/* test_workloads.c - the pure parts of kubesim's workload controllers:
 * the Deployment controller's pod-template-hash and RollingUpdate
 * arithmetic, the event recorder's aggregation and bound, and the
 * protobuf Deployment that kubectl create deployment sends, and the
 * strategic merge patch kubectl set image sends. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "patch.h"
#include "sim.h"

static struct sim sim;

static void setup(void) {
  memset(&sim, 0, sizeof(sim));
  sim.loop = uv_default_loop();
  sim.opts.history = 100;
  sim.opts.event_limit = 3;
  store_init(&sim);
  ck_assert_int_eq(events_init(&sim), 0);
  ck_assert_ptr_nonnull(store_commit(&sim, K_NAMESPACE, NULL,
                                     json_pack("{s:{s:s}}", "metadata", "name", "default"), EV_ADDED));
}

static void teardown(void) {
  store_free(&sim);
  events_free(&sim);
}

static json_t *tmpl(const char *text) {
  json_t *j = json_loads(text, 0, NULL);

  ck_assert_ptr_nonnull(j);
  return j;
}

START_TEST(template_hash_ignores_key_order_and_its_own_label) {
  json_t *a = tmpl("{\"metadata\":{\"labels\":{\"app\":\"w\"}},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]}}");
  json_t *b = tmpl("{\"spec\":{\"containers\":[{\"image\":\"i\",\"name\":\"c\",\"resources\":{}}]},"
                   "\"metadata\":{\"creationTimestamp\":null,\"labels\":{\"pod-template-hash\":\"x\",\"app\":\"w\"}}}");
  char ha[16], hb[16];
  size_t i;

  ck_assert_int_eq(deploy_template_hash(a, 0, ha, sizeof(ha)), 0);
  ck_assert_int_eq(deploy_template_hash(b, 0, hb, sizeof(hb)), 0);
  ck_assert_str_eq(ha, hb);
  /* the controller's alphabet: no vowels, no 0, 1 or 3 */
  ck_assert_uint_ge(strlen(ha), 1);
  for (i = 0; ha[i]; i++)
    ck_assert_ptr_nonnull(strchr("bcdfghjklmnpqrstvwxz2456789", ha[i]));
  json_decref(a);
  json_decref(b);
}
END_TEST

START_TEST(template_hash_changes_with_template_and_collision_count) {
  json_t *a = tmpl("{\"metadata\":{\"labels\":{\"app\":\"w\"}},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i:1\"}]}}");
  json_t *b = tmpl("{\"metadata\":{\"labels\":{\"app\":\"w\"}},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"i:2\"}]}}");
  char ha[16], hb[16], hc[16], ha2[16];

  ck_assert_int_eq(deploy_template_hash(a, 0, ha, sizeof(ha)), 0);
  ck_assert_int_eq(deploy_template_hash(a, 0, ha2, sizeof(ha2)), 0);
  ck_assert_int_eq(deploy_template_hash(b, 0, hb, sizeof(hb)), 0);
  ck_assert_int_eq(deploy_template_hash(a, 1, hc, sizeof(hc)), 0);
  ck_assert_str_eq(ha, ha2);
  ck_assert_str_ne(ha, hb);
  ck_assert_str_ne(ha, hc);
  ck_assert_int_eq(deploy_template_hash(a, 0, ha, 3), -ENOSPC);
  json_decref(a);
  json_decref(b);
}
END_TEST

START_TEST(fenceposts_round_surge_up_and_unavailable_down) {
  json_t *pct = json_string("25%"), *zero = json_integer(0), *bad = json_string("25"), *two = json_integer(2);
  int64_t su, un;

  ck_assert_int_eq(deploy_fenceposts(NULL, NULL, 10, &su, &un), 0);
  ck_assert_int_eq(su, 3); /* 2.5 up */
  ck_assert_int_eq(un, 2); /* 2.5 down */
  ck_assert_int_eq(deploy_fenceposts(pct, pct, 1, &su, &un), 0);
  ck_assert_int_eq(su, 1);
  ck_assert_int_eq(un, 0);
  ck_assert_int_eq(deploy_fenceposts(zero, zero, 4, &su, &un), 0);
  ck_assert_int_eq(su, 0);
  ck_assert_int_eq(un, 1); /* both zero would never progress */
  ck_assert_int_eq(deploy_fenceposts(two, zero, 4, &su, &un), 0);
  ck_assert_int_eq(su, 2);
  ck_assert_int_eq(un, 0);
  ck_assert_int_eq(deploy_fenceposts(bad, NULL, 4, &su, &un), -EINVAL);
  json_decref(pct);
  json_decref(zero);
  json_decref(bad);
  json_decref(two);
}
END_TEST

/* Drives a whole rollout: pods become available as soon as they exist. */
static int rollout(int64_t replicas, int64_t surge, int64_t unavail, int64_t *peak, int64_t *low) {
  struct deploy_rs_count nw = {0, 0}, old[1] = {{replicas, replicas}};
  int steps = 0;

  *peak = replicas;
  *low = replicas;
  while (deploy_rolling_step(replicas, surge, unavail, &nw, old, 1) && steps < 100) {
    steps++;
    if (nw.spec + old[0].spec > *peak)
      *peak = nw.spec + old[0].spec;
    /* Availability counts only what survives the step. */
    if (nw.available + old[0].spec < *low)
      *low = nw.available + old[0].spec;
    nw.available = nw.spec;
    old[0].available = old[0].spec;
  }
  ck_assert_int_eq(nw.spec, replicas);
  ck_assert_int_eq(old[0].spec, 0);
  return steps;
}

START_TEST(rolling_step_keeps_within_surge_and_unavailable) {
  int64_t peak, low;

  /* maxSurge 1, maxUnavailable 0: one up, one down, four times. */
  ck_assert_int_eq(rollout(4, 1, 0, &peak, &low), 8);
  ck_assert_int_eq(peak, 5);
  ck_assert_int_eq(low, 4);
  /* maxSurge 0, maxUnavailable 1: down first, never above 4. */
  ck_assert_int_eq(rollout(4, 0, 1, &peak, &low), 8);
  ck_assert_int_eq(peak, 4);
  ck_assert_int_eq(low, 3);
  /* the defaults for 10 replicas: surge 3, unavailable 2 */
  rollout(10, 3, 2, &peak, &low);
  ck_assert_int_le(peak, 13);
  ck_assert_int_ge(low, 8);
}
END_TEST

START_TEST(rolling_step_waits_for_new_pods_and_drops_unhealthy_old_first) {
  struct deploy_rs_count nw = {1, 0}, old[2] = {{2, 0}, {3, 3}};

  /* 6 exist for 5 wanted (maxSurge 1): no scale-up. maxUnavailable 1
   * lets one go: an unhealthy old pod, not an available one. */
  ck_assert_int_eq(deploy_rolling_step(5, 1, 1, &nw, old, 2), 1);
  ck_assert_int_eq(nw.spec, 1);
  ck_assert_int_eq(old[0].spec, 1);
  ck_assert_int_eq(old[1].spec, 3);
  /* Room below replicas + maxSurge goes to the new ReplicaSet. */
  ck_assert_int_eq(deploy_rolling_step(5, 1, 1, &nw, old, 2), 1);
  ck_assert_int_eq(nw.spec, 2);
  ck_assert_int_eq(old[0].spec, 1);
  /* Two new pods not yet available: nothing more may go. */
  ck_assert_int_eq(deploy_rolling_step(5, 1, 1, &nw, old, 2), 0);
  ck_assert_int_eq(old[0].spec + old[1].spec, 4);
  /* No old replicas left: the new one takes the desired count. */
  old[1].spec = 0;
  ck_assert_int_eq(deploy_rolling_step(5, 1, 1, &nw, old, 2), 1);
  ck_assert_int_eq(nw.spec, 5);
}
END_TEST

static struct sim_obj *pod(const char *name) {
  json_t *j = json_pack("{s:s,s:s,s:{s:s,s:s,s:s}}", "kind", "Pod", "apiVersion", "v1", "metadata",
                        "name", name, "namespace", "default", "uid", name);
  struct sim_obj *o = store_commit(&sim, K_POD, NULL, j, EV_ADDED);

  ck_assert_ptr_nonnull(o);
  snprintf(o->uid, sizeof(o->uid), "uid-%s", name);
  return o;
}

static json_t *only_event(const char *about, size_t *n) {
  struct sim_obj *e;
  json_t *found = NULL;

  *n = 0;
  for (e = store_first(&sim, K_EVENT, "default"); e != NULL; e = store_next(&sim, e)) {
    json_t *j = obj_json(e);
    if (strcmp(json_string_value(json_path(j, "involvedObject.name")), about) == 0) {
      (*n)++;
      json_decref(found);
      found = j;
    } else {
      json_decref(j);
    }
  }
  return found;
}

START_TEST(event_repeat_counts_and_different_message_is_new) {
  struct sim_obj *p = pod("p1");
  json_t *j;
  size_t n;

  event_emit(&sim, p, "Warning", "FailedScheduling", "default-scheduler", NULL, "0/%d nodes", 2);
  event_emit(&sim, p, "Warning", "FailedScheduling", "default-scheduler", NULL, "0/%d nodes", 2);
  event_emit(&sim, p, "Warning", "FailedScheduling", "default-scheduler", NULL, "0/%d nodes", 2);
  j = only_event("p1", &n);
  ck_assert_uint_eq(n, 1);
  ck_assert_int_eq(json_get_int(j, "count", 0), 3);
  ck_assert_str_eq(json_get_str(j, "reason"), "FailedScheduling");
  ck_assert_str_eq(json_get_str(j, "type"), "Warning");
  ck_assert_str_eq(json_string_value(json_path(j, "involvedObject.kind")), "Pod");
  ck_assert_str_eq(json_string_value(json_path(j, "involvedObject.uid")), "uid-p1");
  ck_assert_str_eq(json_string_value(json_path(j, "source.component")), "default-scheduler");
  ck_assert_str_eq(objver_field(store_get(&sim, K_EVENT, "default",
                                          json_string_value(json_path(j, "metadata.name")))->cur,
                                "involvedObject.name"), "p1");
  json_decref(j);
  event_emit(&sim, p, "Warning", "FailedScheduling", "default-scheduler", NULL, "0/%d nodes", 3);
  json_decref(only_event("p1", &n));
  ck_assert_uint_eq(n, 2);
}
END_TEST

START_TEST(event_ring_drops_the_oldest_beyond_the_limit) {
  struct sim_obj *a = pod("a"), *b = pod("b"), *c = pod("c"), *d = pod("d");
  size_t n;

  event_emit(&sim, a, "Normal", "Scheduled", "default-scheduler", NULL, "to n1");
  event_emit(&sim, b, "Normal", "Scheduled", "default-scheduler", NULL, "to n1");
  event_emit(&sim, c, "Normal", "Scheduled", "default-scheduler", NULL, "to n1");
  ck_assert_uint_eq(sim.counts[K_EVENT], 3);
  /* a repeat takes no slot */
  event_emit(&sim, a, "Normal", "Scheduled", "default-scheduler", NULL, "to n1");
  ck_assert_uint_eq(sim.counts[K_EVENT], 3);
  event_emit(&sim, d, "Normal", "Scheduled", "default-scheduler", NULL, "to n1");
  ck_assert_uint_eq(sim.counts[K_EVENT], 3);
  json_decref(only_event("a", &n));
  ck_assert_uint_eq(n, 0);
  json_decref(only_event("d", &n));
  ck_assert_uint_eq(n, 1);
}
END_TEST

/* The aggregation index stays right while the ring turns over many times
 * (its deletions shift entries back), and names sort in time order. */
START_TEST(event_index_survives_the_ring_turning) {
  struct sim_obj *p = pod("p"), *e;
  char want[32];
  int i, k = 497;

  for (i = 0; i < 500; i++)
    event_emit(&sim, p, "Normal", "Tick", "kubelet", "n1", "tick %d", i);
  ck_assert_uint_eq(sim.counts[K_EVENT], 3);
  for (i = 499; i >= 497; i--)
    event_emit(&sim, p, "Normal", "Tick", "kubelet", "n1", "tick %d", i);
  ck_assert_uint_eq(sim.counts[K_EVENT], 3);
  for (e = store_first(&sim, K_EVENT, "default"); e != NULL; e = store_next(&sim, e)) {
    json_t *j = obj_json(e);
    ck_assert_int_eq(json_get_int(j, "count", 0), 2);
    ck_assert_int_eq(strncmp(e->name, "p.", 2), 0);
    /* listed (by name) in the order they were first recorded */
    snprintf(want, sizeof(want), "tick %d", k++);
    ck_assert_str_eq(json_get_str(j, "message"), want);
    json_decref(j);
  }
}
END_TEST

/* What kubectl v1.32 sends for
 *   kubectl create deployment pb3 --image=nginx:1 --replicas=2 --port=80 */
static const unsigned char deploy_pb[] = {
    0x6b, 0x38, 0x73, 0x00, 0x0a, 0x15, 0x0a, 0x07, 0x61, 0x70, 0x70, 0x73, 0x2f, 0x76, 0x31, 0x12,
    0x0a, 0x44, 0x65, 0x70, 0x6c, 0x6f, 0x79, 0x6d, 0x65, 0x6e, 0x74, 0x12, 0xba, 0x01, 0x0a, 0x1f,
    0x0a, 0x03, 0x70, 0x62, 0x33, 0x12, 0x00, 0x1a, 0x00, 0x22, 0x00, 0x2a, 0x00, 0x32, 0x00, 0x38,
    0x00, 0x42, 0x00, 0x5a, 0x0a, 0x0a, 0x03, 0x61, 0x70, 0x70, 0x12, 0x03, 0x70, 0x62, 0x33, 0x12,
    0x88, 0x01, 0x08, 0x02, 0x12, 0x0c, 0x0a, 0x0a, 0x0a, 0x03, 0x61, 0x70, 0x70, 0x12, 0x03, 0x70,
    0x62, 0x33, 0x1a, 0x6e, 0x0a, 0x1c, 0x0a, 0x00, 0x12, 0x00, 0x1a, 0x00, 0x22, 0x00, 0x2a, 0x00,
    0x32, 0x00, 0x38, 0x00, 0x42, 0x00, 0x5a, 0x0a, 0x0a, 0x03, 0x61, 0x70, 0x70, 0x12, 0x03, 0x70,
    0x62, 0x33, 0x12, 0x4e, 0x12, 0x30, 0x0a, 0x05, 0x6e, 0x67, 0x69, 0x6e, 0x78, 0x12, 0x07, 0x6e,
    0x67, 0x69, 0x6e, 0x78, 0x3a, 0x31, 0x2a, 0x00, 0x32, 0x0a, 0x0a, 0x00, 0x10, 0x00, 0x18, 0x50,
    0x22, 0x00, 0x2a, 0x00, 0x42, 0x00, 0x6a, 0x00, 0x72, 0x00, 0x80, 0x01, 0x00, 0x88, 0x01, 0x00,
    0x90, 0x01, 0x00, 0xa2, 0x01, 0x00, 0x1a, 0x00, 0x32, 0x00, 0x42, 0x00, 0x4a, 0x00, 0x52, 0x00,
    0x58, 0x00, 0x60, 0x00, 0x68, 0x00, 0x82, 0x01, 0x00, 0x8a, 0x01, 0x00, 0x9a, 0x01, 0x00, 0xc2,
    0x01, 0x00, 0x22, 0x02, 0x0a, 0x00, 0x28, 0x00, 0x38, 0x00, 0x1a, 0x0c, 0x08, 0x00, 0x10, 0x00,
    0x18, 0x00, 0x20, 0x00, 0x28, 0x00, 0x38, 0x00, 0x1a, 0x00, 0x22, 0x00,
};

START_TEST(proto_decodes_kubectl_create_deployment) {
  char err[400] = "", *text;
  json_t *j = proto_decode(deploy_pb, sizeof(deploy_pb), err, sizeof(err));

  ck_assert_msg(j != NULL, "%s", err);
  text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
  ck_assert_str_eq(text,
                   "{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"labels\":"
                   "{\"app\":\"pb3\"},\"name\":\"pb3\"},\"spec\":{\"replicas\":2,\"selector\":"
                   "{\"matchLabels\":{\"app\":\"pb3\"}},\"template\":{\"metadata\":{\"labels\":"
                   "{\"app\":\"pb3\"}},\"spec\":{\"containers\":[{\"image\":\"nginx:1\",\"name\":"
                   "\"nginx\",\"ports\":[{\"containerPort\":80}]}]}}}}");
  free(text);
  json_decref(j);
}
END_TEST

/* A field kubesim does not decode, set to a value (here status.
 * observedGeneration), is refused rather than dropped. */
START_TEST(proto_deployment_with_an_unknown_value_is_refused) {
  unsigned char b[sizeof(deploy_pb)];
  char err[400] = "";

  memcpy(b, deploy_pb, sizeof(b));
  ck_assert_uint_eq(b[0xcc], 0x08);
  b[0xcd] = 0x05;
  ck_assert_ptr_null(proto_decode(b, sizeof(b), err, sizeof(err)));
  ck_assert_ptr_nonnull(strstr(err, "apps/v1 Deployment"));
}
END_TEST

/* kubectl set image deploy/x c=img:2 */
START_TEST(strategic_merge_patch_merges_containers_by_name) {
  json_t *doc = json_loads("{\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"img:1\","
                           "\"ports\":[{\"containerPort\":80}]},{\"name\":\"side\",\"image\":\"s:1\"}],"
                           "\"tolerations\":[{\"key\":\"a\"}]}}", 0, NULL);
  json_t *patch = json_loads("{\"spec\":{\"$setElementOrder/containers\":[{\"name\":\"c\"},{\"name\":\"new\"}],"
                             "\"containers\":[{\"image\":\"img:2\",\"name\":\"c\"},"
                             "{\"name\":\"side\",\"$patch\":\"delete\"},{\"name\":\"new\",\"image\":\"n\"}],"
                             "\"tolerations\":[{\"key\":\"b\"}]}}", 0, NULL);
  struct smp_error e;
  char *text;

  ck_assert_ptr_nonnull(doc);
  ck_assert_ptr_nonnull(patch);
  doc = strategic_merge_patch(doc, patch, K_POD, &e);
  ck_assert_msg(doc != NULL, "refused: %d %s", e.code, e.msg);
  text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
  ck_assert_str_eq(text, "{\"spec\":{\"containers\":[{\"image\":\"img:2\",\"name\":\"c\",\"ports\":"
                         "[{\"containerPort\":80}]},{\"image\":\"n\",\"name\":\"new\"}],"
                         "\"tolerations\":[{\"key\":\"b\"}]}}");
  free(text);
  json_decref(doc);
  json_decref(patch);
}
END_TEST

int main(void) {
  Suite *s = suite_create("kubesim_workloads");
  TCase *tc = tcase_create("core");
  SRunner *sr;
  int failed;

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, template_hash_ignores_key_order_and_its_own_label);
  tcase_add_test(tc, template_hash_changes_with_template_and_collision_count);
  tcase_add_test(tc, fenceposts_round_surge_up_and_unavailable_down);
  tcase_add_test(tc, rolling_step_keeps_within_surge_and_unavailable);
  tcase_add_test(tc, rolling_step_waits_for_new_pods_and_drops_unhealthy_old_first);
  tcase_add_test(tc, event_repeat_counts_and_different_message_is_new);
  tcase_add_test(tc, event_ring_drops_the_oldest_beyond_the_limit);
  tcase_add_test(tc, event_index_survives_the_ring_turning);
  tcase_add_test(tc, proto_decodes_kubectl_create_deployment);
  tcase_add_test(tc, proto_deployment_with_an_unknown_value_is_refused);
  tcase_add_test(tc, strategic_merge_patch_merges_containers_by_name);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
