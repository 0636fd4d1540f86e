/* test_podopts.c - pod options: what validation accepts (and its canonical
 * form: defaults filled, gpus 0 dropped, same shape = same text), what it
 * refuses and which field it names, what the options add to a pod spec
 * (beside the agent's volume and mount, never in their place), and which
 * nodes they may go on (selector, NoSchedule/NoExecute taints against
 * tolerations, PreferNoSchedule ignored). */
#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/adapter.h"
#include "podopts.h"

static json_t *J(const char *text) {
  json_error_t err;
  json_t *j = json_loads(text, 0, &err);

  ck_assert_msg(j != NULL, "bad test JSON %s: %s", text, err.text);
  return j;
}

/* Parses <text>; returns the record (NULL when none) and asserts rc 0. */
static struct fr_podopts *parse_ok(const char *text) {
  json_t *j = J(text);
  struct fr_podopts *o = NULL;
  const char *field = NULL;
  char msg[300];
  int rc = fr_podopts_parse(j, &o, &field, msg, sizeof(msg));

  ck_assert_msg(rc == 0, "%s: rc %d field %s: %s", text, rc, field ? field : "-", msg);
  json_decref(j);
  return o;
}

static char *canon(const struct fr_podopts *o) {
  return json_dumps(fr_podopts_json(o), JSON_COMPACT | JSON_SORT_KEYS);
}

START_TEST(valid_options_are_kept_in_canonical_form) {
  struct fr_podopts *o = parse_ok("{\"image\":\"x\",\"runtime_class\":\"gvisor\",\"node_selector\":{\"accel\":\"a100\"},"
                                  "\"tolerations\":[{\"key\":\"nvidia.com/gpu\",\"effect\":\"NoSchedule\",\"value\":\"present\"},"
                                  "{\"operator\":\"Exists\"}],\"gpus\":2,\"volumes\":{\"/data\":\"shared-data\"}}");
  char *t = canon(o);

  ck_assert_str_eq(t, "{\"gpus\":2,\"node_selector\":{\"accel\":\"a100\"},\"runtime_class\":\"gvisor\","
                      "\"tolerations\":[{\"effect\":\"NoSchedule\",\"key\":\"nvidia.com/gpu\",\"operator\":\"Equal\","
                      "\"value\":\"present\"},{\"operator\":\"Exists\"}],\"volumes\":{\"/data\":\"shared-data\"}}");
  ck_assert_int_eq(fr_podopts_gpus(o), 2);
  ck_assert_str_eq(podopts_runtime_class(o), "gvisor");
  free(t);
  fr_podopts_unref(o);
}
END_TEST

START_TEST(no_options_or_zero_gpus_is_none) {
  ck_assert_ptr_null(parse_ok("{\"image\":\"x\"}"));
  ck_assert_ptr_null(parse_ok("{\"gpus\":0,\"node_selector\":{},\"tolerations\":[],\"volumes\":{}}"));
  ck_assert_int_eq(fr_podopts_gpus(NULL), 0);
  ck_assert_int_eq(fr_podopts_equal(NULL, NULL), 1);
}
END_TEST

START_TEST(equal_means_same_shape_whatever_the_spelling) {
  struct fr_podopts *a = parse_ok("{\"volumes\":{\"/a\":\"x\",\"/b\":\"y\"},\"tolerations\":[{\"key\":\"k\"}]}");
  struct fr_podopts *b = parse_ok("{\"tolerations\":[{\"operator\":\"Equal\",\"key\":\"k\"}],\"volumes\":{\"/b\":\"y\",\"/a\":\"x\"},\"gpus\":0}");
  struct fr_podopts *c = parse_ok("{\"volumes\":{\"/a\":\"x\"}}");

  ck_assert_int_eq(fr_podopts_equal(a, b), 1);
  ck_assert_int_eq(fr_podopts_equal(a, c), 0);
  ck_assert_int_eq(fr_podopts_equal(c, NULL), 0);
  ck_assert_ptr_eq(fr_podopts_ref(a), a);
  fr_podopts_unref(a);
  fr_podopts_unref(a);
  fr_podopts_unref(b);
  fr_podopts_unref(c);
  fr_podopts_unref(NULL);
}
END_TEST

static const struct {
  const char *body, *field;
} bad[] = {
    {"{\"runtime_class\":\"\"}", "runtime_class"},
    {"{\"runtime_class\":\"GVisor\"}", "runtime_class"},
    {"{\"runtime_class\":\"-x\"}", "runtime_class"},
    {"{\"runtime_class\":\"a..b\"}", "runtime_class"},
    {"{\"runtime_class\":true}", "runtime_class"},
    {"{\"node_selector\":\"a=b\"}", "node_selector"},
    {"{\"node_selector\":{\"a\":2}}", "node_selector"},
    {"{\"node_selector\":{\"-a\":\"b\"}}", "node_selector"},
    {"{\"node_selector\":{\"a\":\"b c\"}}", "node_selector"},
    {"{\"tolerations\":{}}", "tolerations"},
    {"{\"tolerations\":[1]}", "tolerations"},
    {"{\"tolerations\":[{\"key\":\"k\",\"operator\":\"In\"}]}", "tolerations"},
    {"{\"tolerations\":[{\"operator\":\"Equal\"}]}", "tolerations"},
    {"{\"tolerations\":[{\"key\":\"k\",\"operator\":\"Exists\",\"value\":\"v\"}]}", "tolerations"},
    {"{\"tolerations\":[{\"key\":\"k\",\"effect\":\"Never\"}]}", "tolerations"},
    {"{\"tolerations\":[{\"key\":\"k\",\"effect\":\"NoSchedule\",\"tolerationSeconds\":1}]}", "tolerations"},
    {"{\"tolerations\":[{\"key\":\"k\",\"effect\":\"NoExecute\",\"tolerationSeconds\":-1}]}", "tolerations"},
    {"{\"tolerations\":[{\"key\":\"k\",\"value\":3}]}", "tolerations"},
    {"{\"tolerations\":[{\"key\":\"k\",\"extra\":\"x\"}]}", "tolerations"},
    {"{\"gpus\":-1}", "gpus"},
    {"{\"gpus\":65}", "gpus"},
    {"{\"gpus\":1.0}", "gpus"},
    {"{\"gpus\":\"2\"}", "gpus"},
    {"{\"volumes\":[]}", "volumes"},
    {"{\"volumes\":{\"data\":\"x\"}}", "volumes"},
    {"{\"volumes\":{\"/\":\"x\"}}", "volumes"},
    {"{\"volumes\":{\"/a/\":\"x\"}}", "volumes"},
    {"{\"volumes\":{\"/a//b\":\"x\"}}", "volumes"},
    {"{\"volumes\":{\"/a/./b\":\"x\"}}", "volumes"},
    {"{\"volumes\":{\"/a/..\":\"x\"}}", "volumes"},
    {"{\"volumes\":{\"/a b\":\"x\"}}", "volumes"},
    {"{\"volumes\":{\"/a:b\":\"x\"}}", "volumes"},
    {"{\"volumes\":{\"/fr-agent\":\"x\"}}", "volumes"},
    {"{\"volumes\":{\"/fr-agent/sub\":\"x\"}}", "volumes"},
    {"{\"volumes\":{\"/d\":\"X\"}}", "volumes"},
    {"{\"volumes\":{\"/d\":\"\"}}", "volumes"},
    {"{\"volumes\":{\"/d\":null}}", "volumes"},
    {"{\"volumes\":{\"/1\":\"a\",\"/2\":\"a\",\"/3\":\"a\",\"/4\":\"a\",\"/5\":\"a\",\"/6\":\"a\",\"/7\":\"a\",\"/8\":\"a\","
     "\"/9\":\"a\"}}", "volumes"},
};

START_TEST(bad_option_is_refused_naming_its_field) {
  json_t *j = J(bad[_i].body);
  struct fr_podopts *o = (struct fr_podopts *)1;
  const char *field = NULL;
  char msg[300] = "";

  ck_assert_int_eq(fr_podopts_parse(j, &o, &field, msg, sizeof(msg)), -EINVAL);
  ck_assert_ptr_null(o);
  ck_assert_msg(field != NULL && strcmp(field, bad[_i].field) == 0, "%s: field %s", bad[_i].body,
                field ? field : "(null)");
  ck_assert_msg(strstr(msg, bad[_i].field) != NULL || strstr(msg, "volume") != NULL, "%s: message %s",
                bad[_i].body, msg);
  json_decref(j);
}
END_TEST

START_TEST(apply_adds_beside_the_agent_volume) {
  struct fr_podopts *o = parse_ok("{\"runtime_class\":\"gvisor\",\"gpus\":1,\"node_selector\":{\"a\":\"b\"},"
                                  "\"tolerations\":[{\"key\":\"k\",\"operator\":\"Exists\"}],"
                                  "\"volumes\":{\"/z\":\"zz\",\"/data\":\"dd\"}}");
  json_t *spec = J("{\"containers\":[{\"name\":\"sandbox\",\"resources\":{\"requests\":{\"cpu\":\"1\"},"
                   "\"limits\":{\"cpu\":\"1\"}},\"volumeMounts\":[{\"name\":\"fr-agent\",\"mountPath\":\"/fr-agent\"}]}],"
                   "\"volumes\":[{\"name\":\"fr-agent\",\"emptyDir\":{}}]}");
  json_t *want = J("{\"containers\":[{\"name\":\"sandbox\",\"resources\":{\"requests\":{\"cpu\":\"1\",\"example.com/gpu\":\"1\"},"
                   "\"limits\":{\"cpu\":\"1\",\"example.com/gpu\":\"1\"}},\"volumeMounts\":[{\"name\":\"fr-agent\","
                   "\"mountPath\":\"/fr-agent\"},{\"name\":\"fr-vol-0\",\"mountPath\":\"/data\"},{\"name\":\"fr-vol-1\","
                   "\"mountPath\":\"/z\"}]}],\"volumes\":[{\"name\":\"fr-agent\",\"emptyDir\":{}},{\"name\":\"fr-vol-0\","
                   "\"persistentVolumeClaim\":{\"claimName\":\"dd\"}},{\"name\":\"fr-vol-1\",\"persistentVolumeClaim\":"
                   "{\"claimName\":\"zz\"}}],\"runtimeClassName\":\"gvisor\",\"nodeSelector\":{\"a\":\"b\"},"
                   "\"tolerations\":[{\"key\":\"k\",\"operator\":\"Exists\"}]}");
  char *got;

  ck_assert_int_eq(podopts_apply(o, "example.com/gpu", spec), 0);
  got = json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS);
  ck_assert_msg(json_equal(spec, want), "got %s", got);
  free(got);
  /* Without options nothing changes. */
  ck_assert_int_eq(podopts_apply(NULL, "example.com/gpu", spec), 0);
  ck_assert(json_equal(spec, want));
  ck_assert_int_eq(pod_gpus(json_object_get(spec, "containers"), "example.com/gpu"), 1);
  ck_assert_int_eq(pod_gpus(json_object_get(spec, "containers"), NULL), 0);
  json_decref(spec);
  json_decref(want);
  fr_podopts_unref(o);
}
END_TEST

START_TEST(gpus_count_limits_where_requests_leave_them_out) {
  json_t *c = J("[{\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"2\"}}},"
                "{\"resources\":{\"requests\":{\"nvidia.com/gpu\":\"1\"},\"limits\":{\"nvidia.com/gpu\":\"1\"}}},"
                "{\"resources\":{}}]");

  ck_assert_int_eq(pod_gpus(c, NULL), 3);
  json_decref(c);
}
END_TEST

static const char *const NODE = "{\"metadata\":{\"labels\":{\"accel\":\"a100\",\"zone\":\"z1\"}},"
                                "\"spec\":{\"taints\":[{\"key\":\"nvidia.com/gpu\",\"value\":\"present\",\"effect\":\"NoSchedule\"},"
                                "{\"key\":\"soft\",\"effect\":\"PreferNoSchedule\"}]}}";

static const struct {
  const char *opts;
  int admits;
} admit_cases[] = {
    {"{\"gpus\":1}", 0},                                                                   /* taint */
    {"{\"tolerations\":[{\"key\":\"nvidia.com/gpu\",\"operator\":\"Exists\"}]}", 1},
    {"{\"tolerations\":[{\"key\":\"nvidia.com/gpu\",\"value\":\"present\"}]}", 1},
    {"{\"tolerations\":[{\"key\":\"nvidia.com/gpu\",\"value\":\"absent\"}]}", 0},
    {"{\"tolerations\":[{\"key\":\"nvidia.com/gpu\",\"operator\":\"Exists\",\"effect\":\"NoExecute\"}]}", 0},
    {"{\"tolerations\":[{\"key\":\"nvidia.com/gpu\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}]}", 1},
    {"{\"tolerations\":[{\"operator\":\"Exists\"}]}", 1},                                 /* everything */
    {"{\"tolerations\":[{\"operator\":\"Exists\"}],\"node_selector\":{\"accel\":\"a100\",\"zone\":\"z1\"}}", 1},
    {"{\"tolerations\":[{\"operator\":\"Exists\"}],\"node_selector\":{\"accel\":\"h100\"}}", 0},
    {"{\"tolerations\":[{\"operator\":\"Exists\"}],\"node_selector\":{\"missing\":\"x\"}}", 0},
};

START_TEST(node_admits_by_selector_and_taints) {
  json_t *node = J(NODE), *plain = J("{\"metadata\":{\"name\":\"n\"}}");
  struct fr_podopts *o = parse_ok(admit_cases[_i].opts);

  ck_assert_msg(podopts_node_admits(o, node) == admit_cases[_i].admits, "%s", admit_cases[_i].opts);
  /* An untainted node without labels admits anything but a selector. */
  ck_assert_int_eq(podopts_node_admits(o, plain), json_object_get(fr_podopts_json(o), "node_selector") == NULL);
  ck_assert_int_eq(podopts_node_admits(NULL, plain), 1);
  fr_podopts_unref(o);
  json_decref(node);
  json_decref(plain);
}
END_TEST

int main(void) {
  Suite *s = suite_create("podopts");
  TCase *tc = tcase_create("core");
  SRunner *sr;
  int failed;

  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, valid_options_are_kept_in_canonical_form);
  tcase_add_test(tc, no_options_or_zero_gpus_is_none);
  tcase_add_test(tc, equal_means_same_shape_whatever_the_spelling);
  tcase_add_loop_test(tc, bad_option_is_refused_naming_its_field, 0, (int)(sizeof(bad) / sizeof(bad[0])));
  tcase_add_test(tc, apply_adds_beside_the_agent_volume);
  tcase_add_test(tc, gpus_count_limits_where_requests_leave_them_out);
  tcase_add_loop_test(tc, node_admits_by_selector_and_taints, 0,
                      (int)(sizeof(admit_cases) / sizeof(admit_cases[0])));
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
