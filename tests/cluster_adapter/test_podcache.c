/* test_podcache.c - the pure parts of fedrouter-gateway's pod cache
 * (fr/podcache.h): a pod's address as the API serves it (status.podIP in
 * binary, spec.hostNetwork), its text, and the agent port label. The
 * cache itself (informer, index of addresses) runs in the gateway's
 * black-box suite against kubesim. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/podcache.h"

static json_t *pod(const char *ip, int host_network) {
  json_t *j = json_pack("{s:{s:s},s:{},s:{}}", "metadata", "name", "sb-1", "spec", "status");

  if (ip != NULL)
    json_object_set_new(json_object_get(j, "status"), "podIP", json_string(ip));
  if (host_network)
    json_object_set_new(json_object_get(j, "spec"), "hostNetwork", json_true());
  return j;
}

START_TEST(addr_parse_ipv4_ipv6_none_and_host_network) {
  struct fr_pod_addr a;
  char text[46];
  json_t *j;

  j = pod("10.4.2.17", 0);
  fr_pod_addr_parse(j, &a);
  ck_assert_int_eq(a.family, 4);
  ck_assert_int_eq(a.host_network, 0);
  ck_assert_int_eq(fr_pod_addr_text(&a, text), 0);
  ck_assert_str_eq(text, "10.4.2.17");
  json_decref(j);

  j = pod("fd00:10:244::2a", 1);
  fr_pod_addr_parse(j, &a);
  ck_assert_int_eq(a.family, 6);
  ck_assert_int_eq(a.host_network, 1);
  ck_assert_int_eq(fr_pod_addr_text(&a, text), 0);
  ck_assert_str_eq(text, "fd00:10:244::2a");
  json_decref(j);

  /* No address yet (Pending), or one that is not an address: none. */
  j = pod(NULL, 0);
  fr_pod_addr_parse(j, &a);
  ck_assert_int_eq(a.family, 0);
  ck_assert_int_eq(fr_pod_addr_text(&a, text), -ENOENT);
  ck_assert_str_eq(text, "");
  json_decref(j);
  j = pod("10.4.2.300", 0);
  fr_pod_addr_parse(j, &a);
  ck_assert_int_eq(a.family, 0);
  json_decref(j);
  j = pod("10.4.2.3:80", 0);
  fr_pod_addr_parse(j, &a);
  ck_assert_int_eq(a.family, 0);
  json_decref(j);
}
END_TEST

static int port_of(const char *label) {
  struct fr_pod p;
  char labels[64];
  size_t n = 0;

  memset(&p, 0, sizeof(p));
  if (label != NULL) {
    n = (size_t)snprintf(labels, sizeof(labels), "%s", FR_LABEL_AGENT) + 1;
    n += (size_t)snprintf(labels + n, sizeof(labels) - n, "%s", label) + 1;
    labels[n] = '\0';
    p.labels = labels;
  }
  return fr_pod_agent_port(&p);
}

START_TEST(agent_port_from_the_label_only_when_a_port) {
  ck_assert_int_eq(port_of("49983"), 49983);
  ck_assert_int_eq(port_of("1"), 1);
  ck_assert_int_eq(port_of(NULL), 0);
  ck_assert_int_eq(port_of("0"), 0);
  ck_assert_int_eq(port_of("65536"), 0);
  ck_assert_int_eq(port_of("49983x"), 0);
  ck_assert_int_eq(port_of("true"), 0);
  ck_assert_int_eq(fr_pod_agent_port(NULL), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("podcache");
  TCase *tc = tcase_create("pure");
  SRunner *sr;
  int failed;

  tcase_add_test(tc, addr_parse_ipv4_ipv6_none_and_host_network);
  tcase_add_test(tc, agent_port_from_the_label_only_when_a_port);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
