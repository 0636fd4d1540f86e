/* test_store.c - kubesim's versioned store: resourceVersion, history
 * window and replay, selector fields, and the patch formats. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "patch.h"
#include "sim.h"

static struct sim sim;

static void setup(void) {
  memset(&sim, 0, sizeof(sim));
  sim.loop = uv_default_loop();
  sim.opts.history = 100; /* the minimum the flag allows */
  store_init(&sim);
}

static void teardown(void) {
  store_free(&sim);
}

static struct sim_obj *put_pod(const char *name, const char *labels_json) {
  json_t *j = json_pack("{s:s,s:s,s:{s:s,s:s,s:o},s:{s:s},s:{s:s}}", "kind", "Pod", "apiVersion",
                        "v1", "metadata", "name", name, "namespace", "default", "labels",
                        json_loads(labels_json, 0, NULL), "spec", "nodeName", "n1", "status",
                        "phase", "Running");
  return store_commit(&sim, K_POD, NULL, j, EV_ADDED);
}

START_TEST(commit_assigns_increasing_resource_versions) {
  struct sim_obj *a = put_pod("a", "{}"), *b = put_pod("b", "{}");
  json_t *j;

  ck_assert_ptr_nonnull(a);
  ck_assert_uint_eq(a->cur->rv, 1);
  ck_assert_uint_eq(b->cur->rv, 2);
  ck_assert_uint_eq(a->create_rv, 1);
  j = obj_json(a);
  ck_assert_str_eq(json_string_value(json_path(j, "metadata.resourceVersion")), "1");
  json_object_set_new(json_obj(j, "metadata"), "labels", json_pack("{s:s}", "x", "y"));
  a = store_commit(&sim, K_POD, a, j, EV_MODIFIED);
  ck_assert_uint_eq(a->cur->rv, 3);
  ck_assert_uint_eq(a->create_rv, 1);
  ck_assert_uint_eq(sim.rv, 3);
  ck_assert_str_eq(objver_label(a->cur, "x"), "y");
  ck_assert_uint_eq(sim.counts[K_POD], 2);
}
END_TEST

START_TEST(store_get_and_ordered_iteration) {
  struct sim_obj *o;
  const char *want[] = {"a", "b", "c"};
  int i = 0;

  put_pod("c", "{}");
  put_pod("a", "{}");
  put_pod("b", "{}");
  ck_assert_ptr_nonnull(store_get(&sim, K_POD, "default", "b"));
  ck_assert_ptr_null(store_get(&sim, K_POD, "default", "zz"));
  ck_assert_ptr_null(store_get(&sim, K_POD, "other", "b"));
  for (o = store_first(&sim, K_POD, "default"); o != NULL; o = store_next(&sim, o))
    ck_assert_str_eq(o->name, want[i++]);
  ck_assert_int_eq(i, 3);
  o = store_after(&sim, K_POD, "default", "a");
  ck_assert_str_eq(o->name, "b");
  o = store_after(&sim, K_POD, "default", "aa"); /* key need not exist */
  ck_assert_str_eq(o->name, "b");
}
END_TEST

struct seen {
  int n;
  uint64_t rvs[256];
  int types[256];
};

static void collect(const struct sim_event *ev, void *arg) {
  struct seen *s = arg;

  s->rvs[s->n] = ev->obj->rv;
  s->types[s->n++] = ev->type;
}

START_TEST(replay_delivers_events_after_rv_in_order) {
  struct sim_obj *a = put_pod("a", "{}");
  struct seen seen = {0};

  put_pod("b", "{}");
  store_commit(&sim, K_POD, a, obj_json(a), EV_DELETED);
  ck_assert_uint_eq(sim.counts[K_POD], 1);
  ck_assert_ptr_null(store_get(&sim, K_POD, "default", "a"));
  ck_assert_int_eq(store_replay(&sim, 1, collect, &seen), 0);
  ck_assert_int_eq(seen.n, 2);
  ck_assert_uint_eq(seen.rvs[0], 2);
  ck_assert_int_eq(seen.types[0], EV_ADDED);
  ck_assert_uint_eq(seen.rvs[1], 3); /* a deletion gets its own RV */
  ck_assert_int_eq(seen.types[1], EV_DELETED);
}
END_TEST

START_TEST(replay_of_expired_rv_is_estale) {
  struct seen seen = {0};
  char name[16];
  int i;

  for (i = 0; i < 150; i++) {
    snprintf(name, sizeof(name), "p%03d", i);
    put_pod(name, "{}");
  }
  /* 150 events in a 100-event window: 51..150 remain. */
  ck_assert_uint_eq(store_oldest_rv(&sim), 51);
  ck_assert_int_eq(store_replay(&sim, 10, collect, &seen), -ESTALE);
  ck_assert_int_eq(seen.n, 0);
  ck_assert_int_eq(store_replay(&sim, 50, collect, &seen), 0);
  ck_assert_int_eq(seen.n, 100);
  ck_assert_uint_eq(seen.rvs[0], 51);
  seen.n = 0;
  ck_assert_int_eq(store_replay(&sim, 149, collect, &seen), 0);
  ck_assert_int_eq(seen.n, 1);
}
END_TEST

START_TEST(compaction_expires_older_versions_only) {
  struct seen seen = {0};

  put_pod("a", "{}");
  put_pod("b", "{}");
  store_compact(&sim); /* at rv 2 */
  put_pod("c", "{}");
  ck_assert_uint_eq(store_oldest_rv(&sim), 3);
  ck_assert_int_eq(store_replay(&sim, 1, collect, &seen), -ESTALE);
  ck_assert_int_eq(store_replay(&sim, 2, collect, &seen), 0);
  ck_assert_int_eq(seen.n, 1);
  ck_assert_uint_eq(seen.rvs[0], 3);
}
END_TEST

START_TEST(objver_exposes_selector_fields) {
  struct sim_obj *a = put_pod("a", "{\"pool\":\"warm\"}");
  struct fr_selector *ls, *fs;

  ck_assert_str_eq(objver_field(a->cur, "metadata.name"), "a");
  ck_assert_str_eq(objver_field(a->cur, "spec.nodeName"), "n1");
  ck_assert_str_eq(objver_field(a->cur, "status.phase"), "Running");
  ck_assert_str_eq(objver_field(a->cur, "status.podIP"), ""); /* absent reads as empty */
  ck_assert_int_eq(fr_selector_parse_labels("pool in (warm,hot)", &ls, NULL, 0), 0);
  ck_assert_int_eq(fr_selector_parse_fields("status.phase=Running,spec.nodeName!=n2",
                                            kind_field_names(K_POD), &fs, NULL, 0), 0);
  ck_assert_int_eq(fr_selector_matches(ls, objver_label, a->cur), 1);
  ck_assert_int_eq(fr_selector_matches(fs, objver_field, a->cur), 1);
  fr_selector_free(ls);
  fr_selector_free(fs);
  ck_assert_int_ne(fr_selector_parse_fields("spec.image=x", kind_field_names(K_POD), &fs, NULL, 0), 0);
}
END_TEST

START_TEST(merge_patch_sets_and_removes_keys) {
  json_t *doc = json_loads("{\"metadata\":{\"labels\":{\"a\":\"1\",\"b\":\"2\"}},\"spec\":{\"x\":1}}", 0, NULL);
  json_t *patch = json_loads("{\"metadata\":{\"labels\":{\"a\":null,\"c\":\"3\"}},\"$patch\":\"merge\"}", 0, NULL);
  json_t *want = json_loads("{\"metadata\":{\"labels\":{\"b\":\"2\",\"c\":\"3\"}},\"spec\":{\"x\":1}}", 0, NULL);

  doc = merge_patch(doc, patch);
  ck_assert_int_eq(json_equal(doc, want), 1);
  json_decref(doc);
  json_decref(patch);
  json_decref(want);
}
END_TEST

/* strategic_merge_patch() of <patch> on <doc> (a pod, or a Deployment when
 * it has a template) must give <want> (JSON texts). */
static void smp_doc_case(const char *doc, const char *patch, const char *want) {
  json_t *d = json_loads(doc, 0, NULL), *p = json_loads(patch, 0, NULL), *w = json_loads(want, 0, NULL);
  struct smp_error e;
  char *got;

  ck_assert_ptr_nonnull(d);
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_nonnull(w);
  d = strategic_merge_patch(d, p, strstr(doc, "template") != NULL ? K_DEPLOYMENT : K_POD, &e);
  ck_assert_msg(d != NULL, "patch %s failed: %d %s", patch, e.code, e.msg);
  got = json_dumps(d, JSON_COMPACT | JSON_SORT_KEYS);
  ck_assert_msg(json_equal(d, w), "patch %s: got %s, want %s", patch, got, want);
  free(got);
  json_decref(d);
  json_decref(p);
  json_decref(w);
}

START_TEST(strategic_merge_lists_by_key) {
  /* containers by name (also under a template), env by name, ports by
   * containerPort; the other fields of a matched element stay. */
  smp_doc_case("{\"spec\":{\"containers\":[{\"name\":\"a\",\"image\":\"x\",\"command\":[\"sleep\"]},"
           "{\"name\":\"b\",\"image\":\"y\"}]}}",
           "{\"spec\":{\"containers\":[{\"name\":\"b\",\"image\":\"z\"}]}}",
           "{\"spec\":{\"containers\":[{\"name\":\"a\",\"image\":\"x\",\"command\":[\"sleep\"]},"
           "{\"name\":\"b\",\"image\":\"z\"}]}}");
  smp_doc_case("{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"a\",\"env\":"
           "[{\"name\":\"E\",\"value\":\"1\"},{\"name\":\"F\",\"value\":\"2\"}],"
           "\"ports\":[{\"containerPort\":80,\"name\":\"http\"}]}]}}}}",
           "{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"a\",\"env\":"
           "[{\"name\":\"F\",\"value\":\"3\"}],\"ports\":[{\"containerPort\":80,\"protocol\":\"TCP\"}]}]}}}}",
           "{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"a\",\"env\":"
           "[{\"name\":\"E\",\"value\":\"1\"},{\"name\":\"F\",\"value\":\"3\"}],"
           "\"ports\":[{\"containerPort\":80,\"name\":\"http\",\"protocol\":\"TCP\"}]}]}}}}");
  /* A list without a merge strategy is replaced. */
  smp_doc_case("{\"spec\":{\"tolerations\":[{\"key\":\"a\"}],\"containers\":[{\"name\":\"c\",\"args\":[\"1\",\"2\"]}]}}",
           "{\"spec\":{\"tolerations\":[{\"key\":\"b\"}],\"containers\":[{\"name\":\"c\",\"args\":[\"3\"]}]}}",
           "{\"spec\":{\"tolerations\":[{\"key\":\"b\"}],\"containers\":[{\"name\":\"c\",\"args\":[\"3\"]}]}}");
}
END_TEST

START_TEST(strategic_merge_order_and_directives) {
  /* New elements come before the target's remaining ones (the server's
   * normalizeElementOrder); finalizers merge as a set. */
  smp_doc_case("{\"status\":{\"conditions\":[{\"type\":\"A\"},{\"type\":\"B\"}]}}",
           "{\"status\":{\"conditions\":[{\"type\":\"N\"},{\"type\":\"B\",\"status\":\"True\"}]}}",
           "{\"status\":{\"conditions\":[{\"type\":\"N\"},{\"type\":\"A\"},{\"type\":\"B\",\"status\":\"True\"}]}}");
  smp_doc_case("{\"status\":{\"conditions\":[{\"type\":\"A\"},{\"type\":\"B\"},{\"type\":\"C\"}]}}",
           "{\"status\":{\"conditions\":[{\"type\":\"C\",\"s\":1},{\"type\":\"A\",\"s\":2}]}}",
           "{\"status\":{\"conditions\":[{\"type\":\"B\"},{\"type\":\"C\",\"s\":1},{\"type\":\"A\",\"s\":2}]}}");
  smp_doc_case("{\"metadata\":{\"finalizers\":[\"a\",\"b\"]}}", "{\"metadata\":{\"finalizers\":[\"c\",\"a\"]}}",
           "{\"metadata\":{\"finalizers\":[\"c\",\"a\",\"b\"]}}");
  smp_doc_case("{\"metadata\":{\"finalizers\":[\"a\",\"b\"]}}",
           "{\"metadata\":{\"$deleteFromPrimitiveList/finalizers\":[\"a\"]}}",
           "{\"metadata\":{\"finalizers\":[\"b\"]}}");
  /* $patch: delete removes by key, $patch: replace replaces a list or a map. */
  smp_doc_case("{\"spec\":{\"containers\":[{\"name\":\"a\"},{\"name\":\"b\"}]}}",
           "{\"spec\":{\"containers\":[{\"name\":\"a\",\"$patch\":\"delete\"}]}}",
           "{\"spec\":{\"containers\":[{\"name\":\"b\"}]}}");
  smp_doc_case("{\"spec\":{\"containers\":[{\"name\":\"a\"},{\"name\":\"b\"}]}}",
           "{\"spec\":{\"containers\":[{\"name\":\"c\"},{\"$patch\":\"replace\"}]}}",
           "{\"spec\":{\"containers\":[{\"name\":\"c\"}]}}");
  smp_doc_case("{\"metadata\":{\"labels\":{\"a\":\"1\",\"b\":\"2\"}}}",
           "{\"metadata\":{\"labels\":{\"$patch\":\"replace\",\"c\":\"3\"}}}",
           "{\"metadata\":{\"labels\":{\"c\":\"3\"}}}");
  /* null removes; what a new element carries loses its nulls. */
  smp_doc_case("{\"a\":1,\"b\":{\"c\":2}}", "{\"a\":null,\"b\":{\"d\":{\"e\":null,\"f\":1}}}",
           "{\"b\":{\"c\":2,\"d\":{\"f\":1}}}");
}
END_TEST

START_TEST(strategic_merge_missing_merge_key_fails) {
  json_t *d = json_loads("{\"spec\":{\"containers\":[{\"name\":\"a\"}]}}", 0, NULL);
  json_t *p = json_loads("{\"spec\":{\"containers\":[{\"image\":\"x\"}]}}", 0, NULL);
  json_t *arr = json_loads("[1]", 0, NULL);
  struct smp_error e;

  ck_assert_ptr_null(strategic_merge_patch(d, p, K_POD, &e));
  ck_assert_int_eq(e.code, 500);
  ck_assert_str_eq(e.msg, "map: {\"image\":\"x\"} does not contain declared merge key: name");
  ck_assert_ptr_null(strategic_merge_patch(json_object(), arr, K_POD, &e));
  json_decref(p);
  json_decref(arr);
}
END_TEST

START_TEST(json_patch_ops_and_failed_test) {
  json_t *doc = json_loads("{\"metadata\":{\"labels\":{\"a/b\":\"1\"}},\"l\":[1,2]}", 0, NULL);
  json_t *ops = json_loads("[{\"op\":\"test\",\"path\":\"/metadata/labels/a~1b\",\"value\":\"1\"},"
                           "{\"op\":\"replace\",\"path\":\"/metadata/labels/a~1b\",\"value\":\"2\"},"
                           "{\"op\":\"add\",\"path\":\"/l/-\",\"value\":3},"
                           "{\"op\":\"remove\",\"path\":\"/l/0\"}]", 0, NULL);
  json_t *bad = json_loads("[{\"op\":\"test\",\"path\":\"/l/0\",\"value\":99}]", 0, NULL);
  char err[128];

  ck_assert_int_eq(json_patch_apply(doc, ops, err, sizeof(err)), 0);
  ck_assert_str_eq(json_string_value(json_object_get(json_path(doc, "metadata.labels"), "a/b")), "2");
  ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(doc, "l"), 0)), 2);
  ck_assert_int_eq(json_array_size(json_object_get(doc, "l")), 2);
  ck_assert_int_eq(json_patch_apply(doc, bad, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "testing value"));
  json_decref(doc);
  json_decref(ops);
  json_decref(bad);
}
END_TEST

START_TEST(json_patch_move_and_copy) {
  json_t *doc = json_loads("{\"a\":{\"x\":1},\"l\":[\"p\",\"q\"]}", 0, NULL);
  json_t *ops = json_loads("[{\"op\":\"copy\",\"from\":\"/a\",\"path\":\"/b\"},"
                           "{\"op\":\"move\",\"from\":\"/a/x\",\"path\":\"/l/0\"}]", 0, NULL);
  json_t *want = json_loads("{\"a\":{},\"b\":{\"x\":1},\"l\":[1,\"p\",\"q\"]}", 0, NULL);
  json_t *bad = json_loads("[{\"op\":\"move\",\"from\":\"/nope\",\"path\":\"/c\"}]", 0, NULL);
  char err[128];

  ck_assert_int_eq(json_patch_apply(doc, ops, err, sizeof(err)), 0);
  ck_assert_int_eq(json_equal(doc, want), 1);
  ck_assert_int_eq(json_patch_apply(doc, bad, err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "missing from path"));
  json_decref(doc);
  json_decref(ops);
  json_decref(want);
  json_decref(bad);
}
END_TEST

/* <patch> applied to <doc> for kind <k> must give <want>. */
static void smp_case(const char *doc, const char *patch, enum sim_kind k, const char *want) {
  json_t *d = json_loads(doc, 0, NULL), *p = json_loads(patch, 0, NULL), *w = json_loads(want, 0, NULL);
  struct smp_error e;
  json_t *got;
  char *text;

  ck_assert_ptr_nonnull(d);
  ck_assert_ptr_nonnull(p);
  ck_assert_ptr_nonnull(w);
  got = strategic_merge_patch(d, p, k, &e);
  ck_assert_msg(got != NULL, "patch %s refused: %d %s", patch, e.code, e.msg);
  text = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);
  ck_assert_msg(json_equal(got, w), "patch %s gave %s", patch, text);
  free(text);
  json_decref(got);
  json_decref(p);
  json_decref(w);
}

START_TEST(strategic_merge_patch_merges_lists_by_key) {
  const char *pod = "{\"metadata\":{\"finalizers\":[\"a\"],\"labels\":{\"x\":\"1\"}},"
                    "\"spec\":{\"containers\":[{\"name\":\"main\",\"image\":\"i:1\",\"env\":[{\"name\":\"A\",\"value\":\"1\"}]},"
                    "{\"name\":\"side\",\"image\":\"s:1\"}],\"tolerations\":[{\"key\":\"t\"}]}}";

  /* kubectl set image: only the named container's image changes. */
  smp_case(pod, "{\"spec\":{\"containers\":[{\"name\":\"side\",\"image\":\"s:2\"}]}}", K_POD,
           "{\"metadata\":{\"finalizers\":[\"a\"],\"labels\":{\"x\":\"1\"}},"
           "\"spec\":{\"containers\":[{\"name\":\"main\",\"image\":\"i:1\",\"env\":[{\"name\":\"A\",\"value\":\"1\"}]},"
           "{\"name\":\"side\",\"image\":\"s:2\"}],\"tolerations\":[{\"key\":\"t\"}]}}");
  /* Nested: env merges by name inside the container; tolerations (no
   * strategy) are replaced; finalizers merge as a set; null removes. */
  smp_case(pod, "{\"metadata\":{\"finalizers\":[\"b\",\"a\"],\"labels\":{\"x\":null}},"
                "\"spec\":{\"containers\":[{\"name\":\"main\",\"env\":[{\"name\":\"B\",\"value\":\"2\"}]}],"
                "\"tolerations\":[{\"key\":\"u\"}]}}", K_POD,
           "{\"metadata\":{\"finalizers\":[\"b\",\"a\"],\"labels\":{}},"
           "\"spec\":{\"containers\":[{\"name\":\"main\",\"image\":\"i:1\",\"env\":[{\"name\":\"B\",\"value\":\"2\"},"
           "{\"name\":\"A\",\"value\":\"1\"}]},{\"name\":\"side\",\"image\":\"s:1\"}],\"tolerations\":[{\"key\":\"u\"}]}}");
  /* $patch: delete removes by key; $patch: replace makes the list. */
  smp_case(pod, "{\"spec\":{\"containers\":[{\"name\":\"main\",\"$patch\":\"delete\"}]}}", K_POD,
           "{\"metadata\":{\"finalizers\":[\"a\"],\"labels\":{\"x\":\"1\"}},"
           "\"spec\":{\"containers\":[{\"name\":\"side\",\"image\":\"s:1\"}],\"tolerations\":[{\"key\":\"t\"}]}}");
  smp_case(pod, "{\"spec\":{\"containers\":[{\"name\":\"only\",\"image\":\"o\"},{\"$patch\":\"replace\"}]}}", K_POD,
           "{\"metadata\":{\"finalizers\":[\"a\"],\"labels\":{\"x\":\"1\"}},"
           "\"spec\":{\"containers\":[{\"name\":\"only\",\"image\":\"o\"}],\"tolerations\":[{\"key\":\"t\"}]}}");
  /* $deleteFromPrimitiveList, $setElementOrder, a map's $patch: replace. */
  smp_case(pod, "{\"metadata\":{\"$deleteFromPrimitiveList/finalizers\":[\"a\"],\"labels\":{\"$patch\":\"replace\",\"y\":\"2\"}},"
                "\"spec\":{\"$setElementOrder/containers\":[{\"name\":\"side\"},{\"name\":\"main\"}]}}", K_POD,
           "{\"metadata\":{\"finalizers\":[],\"labels\":{\"y\":\"2\"}},"
           "\"spec\":{\"containers\":[{\"name\":\"side\",\"image\":\"s:1\"},{\"name\":\"main\",\"image\":\"i:1\","
           "\"env\":[{\"name\":\"A\",\"value\":\"1\"}]}],\"tolerations\":[{\"key\":\"t\"}]}}");
  /* A Deployment's template is a pod spec; a Service's ports merge by port;
   * other kinds' lists are replaced. */
  smp_case("{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"1\"},{\"name\":\"d\",\"image\":\"1\"}]}}}}",
           "{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"d\",\"image\":\"2\"}]}}}}", K_DEPLOYMENT,
           "{\"spec\":{\"template\":{\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"1\"},{\"name\":\"d\",\"image\":\"2\"}]}}}}");
  smp_case("{\"spec\":{\"ports\":[{\"port\":80,\"name\":\"http\"},{\"port\":443}]}}",
           "{\"spec\":{\"ports\":[{\"port\":443,\"name\":\"https\"}]}}", K_SERVICE,
           "{\"spec\":{\"ports\":[{\"port\":80,\"name\":\"http\"},{\"port\":443,\"name\":\"https\"}]}}");
  smp_case("{\"rules\":[{\"verbs\":[\"get\"]}]}", "{\"rules\":[{\"verbs\":[\"list\"]}]}", K_ROLE,
           "{\"rules\":[{\"verbs\":[\"list\"]}]}");
}
END_TEST

START_TEST(strategic_merge_patch_orders_new_elements_first) {
  /* strategicpatch's mergeSortedSlice: an element the live list lacks goes
   * before the live ones (a status condition added by a patch). */
  smp_case("{\"status\":{\"conditions\":[{\"type\":\"A\"},{\"type\":\"B\",\"status\":\"False\"}]}}",
           "{\"status\":{\"conditions\":[{\"type\":\"B\",\"status\":\"True\"},{\"type\":\"C\"}]}}", K_POD,
           "{\"status\":{\"conditions\":[{\"type\":\"A\"},{\"type\":\"B\",\"status\":\"True\"},{\"type\":\"C\"}]}}");
  smp_case("{\"status\":{\"conditions\":[{\"type\":\"A\"}]}}",
           "{\"status\":{\"conditions\":[{\"type\":\"Z\"}]}}", K_POD,
           "{\"status\":{\"conditions\":[{\"type\":\"Z\"},{\"type\":\"A\"}]}}");
}
END_TEST

START_TEST(strategic_merge_patch_errors_as_the_api_server) {
  json_t *pod = json_loads("{\"spec\":{\"containers\":[{\"name\":\"c\"}]}}", 0, NULL);
  json_t *no_key = json_loads("{\"spec\":{\"containers\":[{\"image\":\"x\"}]}}", 0, NULL);
  json_t *retain = json_loads("{\"spec\":{\"$retainKeys\":\"x\"}}", 0, NULL);
  json_t *list = json_array();
  struct smp_error e;

  ck_assert_ptr_null(strategic_merge_patch(json_deep_copy(pod), no_key, K_POD, &e));
  ck_assert_int_eq(e.code, 500);
  ck_assert_ptr_nonnull(strstr(e.msg, "does not contain declared merge key: name"));
  ck_assert_ptr_null(strategic_merge_patch(json_deep_copy(pod), retain, K_POD, &e));
  ck_assert_int_eq(e.code, 400);
  ck_assert_ptr_null(strategic_merge_patch(json_deep_copy(pod), list, K_POD, &e));
  ck_assert_int_eq(e.code, 400);
  json_decref(list);
  json_decref(pod);
  json_decref(no_key);
  json_decref(retain);
}
END_TEST

START_TEST(quantities_normalize_numbers_to_strings) {
  json_t *m = json_loads("{\"cpu\":64,\"memory\":\"1Gi\",\"x\":0.5}", 0, NULL);
  const char *bad = NULL;

  ck_assert_int_eq(quantities_normalize(m, &bad), 0);
  ck_assert_str_eq(json_string_value(json_object_get(m, "cpu")), "64");
  ck_assert_str_eq(json_string_value(json_object_get(m, "x")), "0.5");
  json_object_set_new(m, "memory", json_string("lots"));
  ck_assert_int_eq(quantities_normalize(m, &bad), -1);
  ck_assert_str_eq(bad, "memory");
  json_decref(m);
}
END_TEST

/* Booleans as apimachinery's Convert_Slice_string_To_bool reads them. */
START_TEST(query_bool_reads_like_the_api_server) {
  static const struct {
    const char *query;
    int want;
  } cases[] = {
      {"", 0},           {"watch=true", 1},  {"watch=True", 1},  {"watch=TRUE", 1},
      {"watch=1", 1},    {"watch=", 1},      {"watch", 1},       {"watch=yes", 1},
      {"watch=0", 0},    {"watch=false", 0}, {"watch=False", 0}, {"watch=FALSE", 0},
      {"a=1&watch=0", 0}, {"watch=a-long-value-beyond-the-buffer", 1}, {"watchx=1", 0},
  };
  size_t i;

  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    ck_assert_msg(sim_query_bool(cases[i].query, "watch") == cases[i].want, "query \"%s\"",
                  cases[i].query);
}
END_TEST

/* kubectl v1.32's body for `kubectl create secret generic s --from-literal=K=V -n sbx`. */
static const unsigned char secret_pb[] = {
    0x6b, 0x38, 0x73, 0x00, 0x0a, 0x0c, 0x0a, 0x02, 0x76, 0x31, 0x12, 0x06, 0x53, 0x65, 0x63, 0x72,
    0x65, 0x74, 0x12, 0x20, 0x0a, 0x14, 0x0a, 0x01, 0x73, 0x12, 0x00, 0x1a, 0x03, 0x73, 0x62, 0x78,
    0x22, 0x00, 0x2a, 0x00, 0x32, 0x00, 0x38, 0x00, 0x42, 0x00, 0x12, 0x06, 0x0a, 0x01, 0x4b, 0x12,
    0x01, 0x56, 0x1a, 0x00, 0x1a, 0x00, 0x22, 0x00};

START_TEST(proto_decodes_kubectl_create_secret_generic) {
  char err[300] = "";
  json_t *j = proto_decode(secret_pb, sizeof(secret_pb), err, sizeof(err));
  char *text;

  ck_assert_msg(j != NULL, "%s", err);
  text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
  ck_assert_str_eq(text, "{\"apiVersion\":\"v1\",\"data\":{\"K\":\"Vg==\"},\"kind\":\"Secret\","
                         "\"metadata\":{\"name\":\"s\",\"namespace\":\"sbx\"}}");
  free(text);
  json_decref(j);
}
END_TEST

/* A map key that is not UTF-8 is refused (it once freed the value twice). */
START_TEST(proto_map_key_not_utf8_is_refused) {
  unsigned char b[sizeof(secret_pb)];
  char err[300] = "";

  memcpy(b, secret_pb, sizeof(b));
  b[46] = 0x95; /* the data key "K" */
  ck_assert_ptr_null(proto_decode(b, sizeof(b), err, sizeof(err)));
  ck_assert_ptr_nonnull(strstr(err, "Secret"));
  ck_assert_ptr_null(proto_decode("k8s", 3, err, sizeof(err)));
  ck_assert_ptr_nonnull(strstr(err, "envelope"));
}
END_TEST

int main(void) {
Suite *s = suite_create("kubesim_store");
  TCase *tc = tcase_create("store");
  SRunner *sr;
  int failed;

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, commit_assigns_increasing_resource_versions);
  tcase_add_test(tc, store_get_and_ordered_iteration);
  tcase_add_test(tc, replay_delivers_events_after_rv_in_order);
  tcase_add_test(tc, replay_of_expired_rv_is_estale);
  tcase_add_test(tc, compaction_expires_older_versions_only);
  tcase_add_test(tc, objver_exposes_selector_fields);
  tcase_add_test(tc, merge_patch_sets_and_removes_keys);
  tcase_add_test(tc, strategic_merge_lists_by_key);
  tcase_add_test(tc, strategic_merge_order_and_directives);
  tcase_add_test(tc, strategic_merge_missing_merge_key_fails);
  tcase_add_test(tc, json_patch_ops_and_failed_test);
  tcase_add_test(tc, json_patch_move_and_copy);
  tcase_add_test(tc, strategic_merge_patch_merges_lists_by_key);
  tcase_add_test(tc, strategic_merge_patch_orders_new_elements_first);
  tcase_add_test(tc, strategic_merge_patch_errors_as_the_api_server);
  tcase_add_test(tc, quantities_normalize_numbers_to_strings);
  tcase_add_test(tc, query_bool_reads_like_the_api_server);
  tcase_add_test(tc, proto_decodes_kubectl_create_secret_generic);
  tcase_add_test(tc, proto_map_key_not_utf8_is_refused);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
