/* test_podconf.c - the pure parts of kubesim's pods that run processes:
 * which image a name is, pod ranges, the credentials a securityContext
 * gives, the helpers' argv, and how a request is named in the API
 * counters. */
#include <check.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

START_TEST(image_repo_takes_the_last_component_without_tag_or_digest) {
  static const char *const cases[][2] = {
      {"python:3.12", "python"},
      {"python", "python"},
      {"docker.io/library/python:3.12-slim@sha256:0123456789abcdef", "python"},
      {"nvcr.io/nvidia/pytorch:24.05-py3", "pytorch"},
      {"localhost:5000/team/node:20", "node"},
      {"busybox@sha256:abc", "busybox"},
  };
  char out[64];
  size_t i;

  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    ck_assert_int_eq(image_repo(cases[i][0], out, sizeof(out)), 0);
    ck_assert_str_eq(out, cases[i][1]);
  }
  ck_assert_int_eq(image_repo("", out, sizeof(out)), -EINVAL);
  ck_assert_int_eq(image_repo(NULL, out, sizeof(out)), -EINVAL);
  ck_assert_int_eq(image_repo("registry/:tag", out, sizeof(out)), -EINVAL);
  ck_assert_int_eq(image_repo("averyveryverylongname:1", out, 8), -EINVAL);
}
END_TEST

START_TEST(pod_cidr_parses_networks_and_refuses_host_bits_and_odd_sizes) {
  uint32_t net = 0;
  int prefix = 0;

  ck_assert_int_eq(podnet_parse_cidr("10.244.0.0/16", &net, &prefix), 0);
  ck_assert_uint_eq(net, 0x0af40000u);
  ck_assert_int_eq(prefix, 16);
  ck_assert_int_eq(podnet_parse_cidr("192.168.7.0/24", &net, &prefix), 0);
  ck_assert_uint_eq(net, 0xc0a80700u);
  ck_assert_int_eq(podnet_parse_cidr("10.244.0.1/16", &net, &prefix), -EINVAL);  /* host bits */
  ck_assert_int_eq(podnet_parse_cidr("10.0.0.0/8", &net, &prefix), -EINVAL);     /* too big */
  ck_assert_int_eq(podnet_parse_cidr("10.0.0.0/30", &net, &prefix), -EINVAL);    /* too small */
  ck_assert_int_eq(podnet_parse_cidr("10.244.0.0", &net, &prefix), -EINVAL);
  ck_assert_int_eq(podnet_parse_cidr("10.244.0.0/x", &net, &prefix), -EINVAL);
  ck_assert_int_eq(podnet_parse_cidr("fd00::/64", &net, &prefix), -EINVAL);
  ck_assert_int_eq(podnet_parse_cidr("auto", &net, &prefix), -EINVAL);
}
END_TEST

static void creds_of(const char *pod_sc, const char *c_sc, struct pod_creds *out, char *warn, size_t cap) {
  char text[1024];
  json_t *pod, *c;

  snprintf(text, sizeof(text), "{\"spec\":{%s%s%s\"containers\":[{\"name\":\"c\"%s%s%s}]}}", pod_sc ? "\"securityContext\":" : "",
           pod_sc ? pod_sc : "", pod_sc ? "," : "", c_sc ? ",\"securityContext\":" : "", c_sc ? c_sc : "", "");
  pod = json_loads(text, 0, NULL);
  ck_assert_ptr_nonnull(pod);
  c = json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0);
  ck_assert_int_eq(pod_creds_from_json(pod, c, out, warn, cap), 0);
  json_decref(pod);
}

START_TEST(creds_default_to_root_with_dockers_capabilities) {
  struct pod_creds c;
  char warn[160];

  creds_of(NULL, NULL, &c, warn, sizeof(warn));
  ck_assert_uint_eq(c.uid, 0);
  ck_assert_uint_eq(c.gid, 0);
  ck_assert_uint_eq(c.ngroups, 0);
  ck_assert_uint_eq(c.caps, 0xa80425fbu);
  ck_assert_str_eq(warn, "");
}
END_TEST

START_TEST(creds_take_the_containers_ids_over_the_pods_and_the_groups) {
  struct pod_creds c;
  char warn[160];

  creds_of("{\"runAsUser\":1000,\"runAsGroup\":1001,\"fsGroup\":2000,\"supplementalGroups\":[3000,3001]}",
           "{\"runAsUser\":1500}", &c, warn, sizeof(warn));
  ck_assert_uint_eq(c.uid, 1500);
  ck_assert_uint_eq(c.gid, 1001);
  ck_assert_uint_eq(c.ngroups, 3);
  ck_assert_uint_eq(c.groups[0], 2000);
  ck_assert_uint_eq(c.groups[1], 3000);
  ck_assert_uint_eq(c.groups[2], 3001);
  /* Negative and absurd ids are ignored, as the API server refuses them. */
  creds_of("{\"runAsUser\":-1}", NULL, &c, warn, sizeof(warn));
  ck_assert_uint_eq(c.uid, 0);
}
END_TEST

START_TEST(creds_drop_and_add_capabilities_but_never_those_that_undo_isolation) {
  struct pod_creds c;
  char warn[160];

  creds_of(NULL, "{\"capabilities\":{\"drop\":[\"ALL\"]}}", &c, warn, sizeof(warn));
  ck_assert_uint_eq(c.caps, 0);
  creds_of(NULL, "{\"capabilities\":{\"drop\":[\"NET_RAW\",\"CAP_MKNOD\",\"NO_SUCH\"]}}", &c, warn, sizeof(warn));
  ck_assert_uint_eq(c.caps, 0xa80425fbu & ~((1u << 13) | (1u << 27)));
  creds_of(NULL, "{\"capabilities\":{\"add\":[\"SYS_NICE\",\"sys_admin\",\"NET_ADMIN\"]}}", &c, warn, sizeof(warn));
  ck_assert_uint_eq(c.caps, 0xa80425fbu | (1u << 23));
  ck_assert_str_eq(warn, "capability sys_admin is not given to pods (it would undo their isolation)");
  creds_of(NULL, "{\"capabilities\":{\"drop\":[\"ALL\"],\"add\":[\"NET_BIND_SERVICE\"]}}", &c, warn, sizeof(warn));
  ck_assert_uint_eq(c.caps, 1u << 10);
}
END_TEST

START_TEST(helper_argv_carries_the_pods_settings_and_ends_before_the_command) {
  struct pod_creds c = {.uid = 1000, .gid = 1001, .groups = {2000, 3000}, .ngroups = 2, .caps = 0};
  const char *hides[] = {"/root", "/tmp/x"};
  const char *image[] = {"python=link:/usr/bin/python3"};
  char *cmd[] = {"/bin/agent", "--listen", "10.244.0.2:49983", NULL};
  struct pod_launch l = {.self_exe = "/k", .poddir = "/w/p", .parent = 42, .isolate = 1, .hides = hides,
                         .nhides = 2, .creds = &c, .cwd = NULL, .hostname = "p", .image = image, .nimage = 1,
                         .net = "10.244.0.2/16@ksim0af4000016", .cmd = cmd};
  static const char *const want[] = {"/k", "__pod-init", "--dir", "/w/p", "--parent", "42", "--isolate",
                                     "--hide", "/root", "--hide", "/tmp/x", "--hostname", "p",
                                     "--image-entry", "python=link:/usr/bin/python3", "--net",
                                     "10.244.0.2/16@ksim0af4000016", "--uid", "1000", "--gid", "1001",
                                     "--groups", "2000,3000", "--caps", "0", "--cwd", "/", "--",
                                     "/bin/agent", "--listen", "10.244.0.2:49983", NULL};
  static const char *const enter[] = {"/k", "__pod-enter", "--pidfile", "/w/p/pid", "--ctl", "--isolate",
                                      "--uid", "0", "--gid", "0", "--groups", "", "--caps", "a80425fb",
                                      "--cwd", "/work", "--", NULL};
  struct pod_creds root = {.caps = POD_CAPS_DEFAULT};
  char **v = podinit_argv(&l);
  size_t i;

  ck_assert_ptr_nonnull(v);
  for (i = 0; want[i] != NULL; i++) {
    ck_assert_ptr_nonnull(v[i]);
    ck_assert_str_eq(v[i], want[i]);
  }
  ck_assert_ptr_null(v[i]);
  free(v);
  /* Not isolated: nothing of the pod's settings. */
  l.isolate = 0;
  v = podinit_argv(&l);
  ck_assert_str_eq(v[6], "--");
  ck_assert_str_eq(v[7], "/bin/agent");
  free(v);
  v = podenter_argv("/k", "/w/p/pid", &root, "/work");
  for (i = 0; enter[i] != NULL; i++)
    ck_assert_str_eq(v[i], enter[i]);
  ck_assert_ptr_null(v[i]);
  free(v);
}
END_TEST

START_TEST(requests_are_named_as_the_api_servers_metrics_name_them) {
  static const struct {
    const char *method, *path, *query;
    int verb, kind, sub;
  } cases[] = {
      {"GET", "/api/v1/namespaces/default/pods", "", API_VERB_LIST, K_POD, API_SUB_NONE},
      {"GET", "/api/v1/pods", "watch=1", API_VERB_WATCH, K_POD, API_SUB_NONE},
      {"GET", "/api/v1/namespaces/default/pods/p", "", API_VERB_GET, K_POD, API_SUB_NONE},
      {"GET", "/api/v1/namespaces/default/pods/p", "watch=false", API_VERB_GET, K_POD, API_SUB_NONE},
      {"POST", "/api/v1/namespaces/default/pods", "", API_VERB_POST, K_POD, API_SUB_NONE},
      {"GET", "/api/v1/namespaces/default/pods/p/exec", "command=ls", API_VERB_CONNECT, K_POD, API_SUB_EXEC},
      {"POST", "/api/v1/namespaces/default/pods/p/exec", "", API_VERB_CONNECT, K_POD, API_SUB_EXEC},
      {"PUT", "/api/v1/namespaces/default/pods/p:49983/proxy/x/y", "", API_VERB_CONNECT, K_POD, API_SUB_PROXY},
      {"GET", "/api/v1/namespaces/default/pods/p/log", "", API_VERB_GET, K_POD, API_SUB_LOG},
      {"PATCH", "/apis/apps/v1/namespaces/d/deployments/x/status", "", API_VERB_PATCH, K_DEPLOYMENT, API_SUB_STATUS},
      {"PUT", "/apis/apps/v1/namespaces/d/replicasets/x/scale", "", API_VERB_PUT, K_RS, API_SUB_SCALE},
      {"DELETE", "/api/v1/namespaces/default/pods", "", API_VERB_DELETECOLLECTION, K_POD, API_SUB_NONE},
      {"DELETE", "/api/v1/namespaces/default/pods/p", "", API_VERB_DELETE, K_POD, API_SUB_NONE},
      {"POST", "/api/v1/namespaces/default/pods/p/eviction", "", API_VERB_POST, K_POD, API_SUB_EVICTION},
      {"GET", "/api/v1/nodes", "", API_VERB_LIST, K_NODE, API_SUB_NONE},
      {"GET", "/api/v1/namespaces", "", API_VERB_LIST, K_NAMESPACE, API_SUB_NONE},
      {"GET", "/version", "", API_VERB_GET, K_COUNT, API_SUB_NONE},
      {"GET", "/apis", "", API_VERB_GET, K_COUNT, API_SUB_NONE},
      {"GET", "/no/such/thing", "", API_VERB_GET, K_COUNT, API_SUB_NONE},
      {"OPTIONS", "/api/v1/pods", "", API_VERB_OTHER, K_POD, API_SUB_NONE},
  };
  struct api_class c;
  size_t i;

  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    api_classify(cases[i].method, cases[i].path, cases[i].query, &c);
    ck_assert_msg(c.verb == cases[i].verb && c.kind == cases[i].kind && c.sub == cases[i].sub,
                  "%s %s?%s: verb %d kind %d sub %d", cases[i].method, cases[i].path, cases[i].query, c.verb,
                  c.kind, c.sub);
  }
  ck_assert_str_eq(api_sub_name(API_SUB_EXEC), "exec");
  ck_assert_int_eq(api_sub_of("status"), API_SUB_STATUS);
  ck_assert_int_eq(api_sub_of("nonsense"), API_SUB_OTHER);
  ck_assert_int_eq(api_sub_of(NULL), API_SUB_NONE);
}
END_TEST

int main(void) {
  Suite *s = suite_create("podconf");
  TCase *tc = tcase_create("pure");
  SRunner *sr;
  int failed;

  tcase_add_test(tc, image_repo_takes_the_last_component_without_tag_or_digest);
  tcase_add_test(tc, pod_cidr_parses_networks_and_refuses_host_bits_and_odd_sizes);
  tcase_add_test(tc, creds_default_to_root_with_dockers_capabilities);
  tcase_add_test(tc, creds_take_the_containers_ids_over_the_pods_and_the_groups);
  tcase_add_test(tc, creds_drop_and_add_capabilities_but_never_those_that_undo_isolation);
  tcase_add_test(tc, helper_argv_carries_the_pods_settings_and_ends_before_the_command);
  tcase_add_test(tc, requests_are_named_as_the_api_servers_metrics_name_them);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
