/* test_fedctl_podargs.c - fedctl's pod option and secret flags
 * (router/cli/podargs.c): what each flag puts in the request body, and
 * every value the router would refuse refused here first, naming the flag.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "podargs.h"

typedef int (*add_fn)(json_t *body, const char *arg, char *err, size_t errlen);

/* <fn>(<arg>) into a fresh body: the body's member <key> as compact JSON
 * (caller frees), or NULL when refused (the message in <err>). */
static char *one(add_fn fn, const char *arg, const char *key, char *err, size_t errlen) {
  json_t *body = json_object();
  char *out = NULL;
  int rc;

  err[0] = '\0';
  rc = fn(body, arg, err, errlen);
  if (rc == 0)
    out = json_dumps(json_object_get(body, key), JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
  else
    ck_assert_int_eq(rc, -EINVAL);
  json_decref(body);
  return out;
}

static void want(add_fn fn, const char *arg, const char *key, const char *json) {
  char err[600];
  char *got = one(fn, arg, key, err, sizeof(err));

  ck_assert_msg(got != NULL, "'%s' refused: %s", arg, err);
  ck_assert_str_eq(got, json);
  free(got);
}

/* Refused, with a message that names the flag and holds <needle>. */
static void refused(add_fn fn, const char *flag, const char *arg, const char *needle) {
  char err[600];
  char *got = one(fn, arg, "-", err, sizeof(err));

  ck_assert_msg(got == NULL, "'%s' accepted as %s", arg, got ? got : "?");
  ck_assert_msg(strstr(err, flag) != NULL, "'%s': message does not name %s: %s", arg, flag, err);
  ck_assert_msg(strstr(err, needle) != NULL, "'%s': message lacks \"%s\": %s", arg, needle, err);
  free(got);
}

START_TEST(toleration_every_form_kubernetes_allows_becomes_its_object) {
  want(fc_pod_add_toleration, "k=v:NoSchedule", "tolerations",
       "[{\"effect\":\"NoSchedule\",\"key\":\"k\",\"operator\":\"Equal\",\"value\":\"v\"}]");
  want(fc_pod_add_toleration, "nvidia.com/gpu:NoSchedule", "tolerations",
       "[{\"effect\":\"NoSchedule\",\"key\":\"nvidia.com/gpu\",\"operator\":\"Exists\"}]");
  want(fc_pod_add_toleration, "dedicated=sandbox", "tolerations",
       "[{\"key\":\"dedicated\",\"operator\":\"Equal\",\"value\":\"sandbox\"}]");
  want(fc_pod_add_toleration, "k", "tolerations", "[{\"key\":\"k\",\"operator\":\"Exists\"}]");
  /* An empty value is a taint of its own ("k=" with Equal), not Exists. */
  want(fc_pod_add_toleration, "k=:PreferNoSchedule", "tolerations",
       "[{\"effect\":\"PreferNoSchedule\",\"key\":\"k\",\"operator\":\"Equal\",\"value\":\"\"}]");
  want(fc_pod_add_toleration, "*", "tolerations", "[{\"operator\":\"Exists\"}]");
  want(fc_pod_add_toleration, "*:NoExecute", "tolerations", "[{\"effect\":\"NoExecute\",\"operator\":\"Exists\"}]");
  want(fc_pod_add_toleration, "node.kubernetes.io/unreachable:NoExecute:30", "tolerations",
       "[{\"effect\":\"NoExecute\",\"key\":\"node.kubernetes.io/unreachable\",\"operator\":\"Exists\","
       "\"tolerationSeconds\":30}]");
  want(fc_pod_add_toleration, "k=v:NoExecute:0", "tolerations",
       "[{\"effect\":\"NoExecute\",\"key\":\"k\",\"operator\":\"Equal\",\"tolerationSeconds\":0,\"value\":\"v\"}]");
  want(fc_pod_add_toleration, "*:NoExecute:31536000", "tolerations",
       "[{\"effect\":\"NoExecute\",\"operator\":\"Exists\",\"tolerationSeconds\":31536000}]");
}
END_TEST

START_TEST(toleration_what_the_api_server_refuses_is_refused) {
  refused(fc_pod_add_toleration, "--toleration", "", "'*' for every taint");
  refused(fc_pod_add_toleration, "--toleration", ":NoSchedule", "'*' for every taint");
  refused(fc_pod_add_toleration, "--toleration", "=v", "a value needs a KEY");
  refused(fc_pod_add_toleration, "--toleration", "=v:NoSchedule", "a value needs a KEY");
  refused(fc_pod_add_toleration, "--toleration", "*=v", "takes no value");
  refused(fc_pod_add_toleration, "--toleration", "k:", "give an effect");
  refused(fc_pod_add_toleration, "--toleration", "k::30", "give an effect");
  refused(fc_pod_add_toleration, "--toleration", "k:noschedule", "'noschedule' is not");
  refused(fc_pod_add_toleration, "--toleration", "k:NoSchedule:30", "NoExecute only");
  refused(fc_pod_add_toleration, "--toleration", "k:PreferNoSchedule:30", "NoExecute only");
  refused(fc_pod_add_toleration, "--toleration", "k:NoExecute:", "seconds");
  refused(fc_pod_add_toleration, "--toleration", "k:NoExecute:-1", "seconds");
  refused(fc_pod_add_toleration, "--toleration", "k:NoExecute:1.5", "seconds");
  refused(fc_pod_add_toleration, "--toleration", "k:NoExecute:31536001", "seconds");
  refused(fc_pod_add_toleration, "--toleration", "k:NoExecute:30:1", "seconds");
  refused(fc_pod_add_toleration, "--toleration", "bad key", "not a valid taint key");
  refused(fc_pod_add_toleration, "--toleration", "-k", "not a valid taint key");
  refused(fc_pod_add_toleration, "--toleration", "Bad_Prefix/k", "not a valid taint key");
  refused(fc_pod_add_toleration, "--toleration", "k=v=w", "not a valid taint value");
  refused(fc_pod_add_toleration, "--toleration", "k=-v", "not a valid taint value");
  refused(fc_pod_add_toleration,
          "--toleration", "k=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "not a valid taint value");
}
END_TEST

START_TEST(toleration_at_most_sixteen) {
  json_t *body = json_object();
  char err[600];
  int i;

  for (i = 0; i < FC_POD_MAX_TOLERATIONS; i++)
    ck_assert_int_eq(fc_pod_add_toleration(body, "k", err, sizeof(err)), 0);
  ck_assert_int_eq(fc_pod_add_toleration(body, "k", err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "at most 16"));
  ck_assert_uint_eq(json_array_size(json_object_get(body, "tolerations")), 16);
  json_decref(body);
}
END_TEST

START_TEST(volume_splits_at_the_last_equals_and_checks_path_and_claim) {
  want(fc_pod_add_volume, "/data=shared-data", "volumes", "{\"/data\":\"shared-data\"}");
  /* '=' is allowed in a mount path, never in a claim name. */
  want(fc_pod_add_volume, "/a=b/c=claim.v1", "volumes", "{\"/a=b/c\":\"claim.v1\"}");
  refused(fc_pod_add_volume, "--volume", "data=claim", "must be absolute");
  refused(fc_pod_add_volume, "--volume", "/data", "want /MOUNT/PATH=CLAIM");
  refused(fc_pod_add_volume, "--volume", "/data=", "want /MOUNT/PATH=CLAIM");
  refused(fc_pod_add_volume, "--volume", "=claim", "want /MOUNT/PATH=CLAIM");
  refused(fc_pod_add_volume, "--volume", "/=claim", "must be absolute");
  refused(fc_pod_add_volume, "--volume", "/a/=claim", "must be absolute");
  refused(fc_pod_add_volume, "--volume", "/a//b=claim", "must be absolute");
  refused(fc_pod_add_volume, "--volume", "/a/./b=claim", "must be absolute");
  refused(fc_pod_add_volume, "--volume", "/a/../b=claim", "must be absolute");
  refused(fc_pod_add_volume, "--volume", "/a:b=claim", "must be absolute");
  refused(fc_pod_add_volume, "--volume", "/a b=claim", "must be absolute");
  refused(fc_pod_add_volume, "--volume", "/fr-agent=claim", "must be absolute");
  refused(fc_pod_add_volume, "--volume", "/fr-agent/x=claim", "must be absolute");
  refused(fc_pod_add_volume, "--volume", "/data=Data_1", "not a PersistentVolumeClaim name");
  refused(fc_pod_add_volume, "--volume", "/data=-x", "not a PersistentVolumeClaim name");
  want(fc_pod_add_volume, "/fr-agentx=claim", "volumes", "{\"/fr-agentx\":\"claim\"}");
}
END_TEST

START_TEST(volume_twice_the_same_path_and_more_than_eight_refused) {
  json_t *body = json_object();
  char err[600], arg[32];
  int i;

  ck_assert_int_eq(fc_pod_add_volume(body, "/a=x", err, sizeof(err)), 0);
  ck_assert_int_eq(fc_pod_add_volume(body, "/a=y", err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "given twice"));
  for (i = 1; i < FC_POD_MAX_VOLUMES; i++) {
    snprintf(arg, sizeof(arg), "/v%d=x", i);
    ck_assert_int_eq(fc_pod_add_volume(body, arg, err, sizeof(err)), 0);
  }
  ck_assert_int_eq(fc_pod_add_volume(body, "/v9=x", err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "at most 8"));
  json_decref(body);
}
END_TEST

START_TEST(node_selector_label_syntax_duplicates_and_bound) {
  json_t *body = json_object();
  char err[600], arg[32];
  int i;

  want(fc_pod_add_node_selector, "accel=a100", "node_selector", "{\"accel\":\"a100\"}");
  want(fc_pod_add_node_selector, "topology.kubernetes.io/zone=", "node_selector",
       "{\"topology.kubernetes.io/zone\":\"\"}");
  refused(fc_pod_add_node_selector, "--node-selector", "accel", "want KEY=VALUE");
  refused(fc_pod_add_node_selector, "--node-selector", "=a100", "want KEY=VALUE");
  refused(fc_pod_add_node_selector, "--node-selector", "bad key=x", "not a valid label key");
  refused(fc_pod_add_node_selector, "--node-selector", "k=a b", "not a valid label value");
  ck_assert_int_eq(fc_pod_add_node_selector(body, "a=1", err, sizeof(err)), 0);
  ck_assert_int_eq(fc_pod_add_node_selector(body, "a=2", err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "given twice"));
  for (i = 1; i < FC_POD_MAX_SELECTOR; i++) {
    snprintf(arg, sizeof(arg), "k%d=v", i);
    ck_assert_int_eq(fc_pod_add_node_selector(body, arg, err, sizeof(err)), 0);
  }
  ck_assert_int_eq(fc_pod_add_node_selector(body, "k99=v", err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "at most 16"));
  json_decref(body);
}
END_TEST

START_TEST(gpus_runtime_class_and_secrets) {
  json_t *body = json_object();
  char err[600], arg[32];
  int i;

  want(fc_pod_set_gpus, "0", "gpus", "0");
  want(fc_pod_set_gpus, "64", "gpus", "64");
  refused(fc_pod_set_gpus, "--gpus", "65", "0 to 64");
  refused(fc_pod_set_gpus, "--gpus", "-1", "0 to 64");
  refused(fc_pod_set_gpus, "--gpus", "1.5", "0 to 64");
  refused(fc_pod_set_gpus, "--gpus", "", "0 to 64");
  want(fc_pod_set_runtime_class, "gvisor", "runtime_class", "\"gvisor\"");
  want(fc_pod_set_runtime_class, "kata.v2", "runtime_class", "\"kata.v2\"");
  refused(fc_pod_set_runtime_class, "--runtime-class", "Not_A_Name", "RuntimeClass name");
  refused(fc_pod_set_runtime_class, "--runtime-class", "a..b", "RuntimeClass name");
  refused(fc_pod_set_runtime_class, "--runtime-class", "", "RuntimeClass name");
  want(fc_pod_add_secret, "HF_TOKEN", "secrets", "[\"HF_TOKEN\"]");
  want(fc_pod_add_secret, "_x1", "secrets", "[\"_x1\"]");
  refused(fc_pod_add_secret, "--secret", "1X", "env var name");
  refused(fc_pod_add_secret, "--secret", "A-B", "env var name");
  refused(fc_pod_add_secret, "--secret", "", "env var name");
  ck_assert_int_eq(fc_pod_add_secret(body, "A", err, sizeof(err)), 0);
  ck_assert_int_eq(fc_pod_add_secret(body, "A", err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "given twice"));
  for (i = 1; i < FC_POD_MAX_SECRETS; i++) {
    snprintf(arg, sizeof(arg), "S%d", i);
    ck_assert_int_eq(fc_pod_add_secret(body, arg, err, sizeof(err)), 0);
  }
  ck_assert_int_eq(fc_pod_add_secret(body, "LAST", err, sizeof(err)), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "at most 64"));
  json_decref(body);
}
END_TEST

int main(void) {
  Suite *s = suite_create("fedctl_podargs");
  TCase *tc = tcase_create("core");
  SRunner *sr;
  int failed;

  tcase_add_test(tc, toleration_every_form_kubernetes_allows_becomes_its_object);
  tcase_add_test(tc, toleration_what_the_api_server_refuses_is_refused);
  tcase_add_test(tc, toleration_at_most_sixteen);
  tcase_add_test(tc, volume_splits_at_the_last_equals_and_checks_path_and_claim);
  tcase_add_test(tc, volume_twice_the_same_path_and_more_than_eight_refused);
  tcase_add_test(tc, node_selector_label_syntax_duplicates_and_bound);
  tcase_add_test(tc, gpus_runtime_class_and_secrets);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
