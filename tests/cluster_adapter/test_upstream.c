/* test_upstream.c - the paths the adapter sends into sandboxes, through
 * the API server's pod proxy and through the cluster's fedrouter-gateway
 * (upstream.c): both from the same allow-list and checks, the gateway's
 * parsed back by the gateway's own parser to what was meant, /init never
 * to the gateway, and nothing a server could normalize into another path. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fr/gwproto.h"
#include "upstream.h"

START_TEST(gw_agent_path_is_the_gateway_url_of_the_route) {
  char out[512];
  struct fr_gw_target t;
  size_t route;

  ck_assert_int_eq(upstream_gw_agent_path(out, sizeof(out), "sandboxes", "fr-pool-a-x7k2p", 49983, "GET",
                                          "/files?path=%2Ftmp%2Fa.txt&username=user", 0), 0);
  ck_assert_str_eq(out, "/v1/proxy/sandboxes/fr-pool-a-x7k2p/49983/files?path=%2Ftmp%2Fa.txt&username=user");
  /* What the gateway reads back is what was meant. */
  ck_assert_int_eq(fr_gw_parse(out, &t, &route, NULL, NULL), 0);
  ck_assert_str_eq(t.ns, "sandboxes");
  ck_assert_str_eq(t.pod, "fr-pool-a-x7k2p");
  ck_assert_int_eq(t.port, 49983);
  ck_assert_str_eq(out + route, "/files?path=%2Ftmp%2Fa.txt&username=user");
  ck_assert_int_eq(upstream_gw_agent_path(out, sizeof(out), "sandboxes", "sb-1", 49983, "POST",
                                          "/process.Process/Start", 0), 0);
  ck_assert_str_eq(out, "/v1/proxy/sandboxes/sb-1/49983/process.Process/Start");
  /* The pod proxy's path of the same call. */
  ck_assert_int_eq(upstream_agent_path(out, sizeof(out), "sandboxes", "sb-1", 49983, "POST",
                                       "/process.Process/Start", 0), 0);
  ck_assert_str_eq(out, "/api/v1/namespaces/sandboxes/pods/sb-1:49983/proxy/process.Process/Start");
}
END_TEST

START_TEST(gw_agent_path_refuses_what_the_pod_proxy_refuses_and_init) {
  char out[512];
  static const struct {
    const char *method, *route;
    int internal;
  } bad[] = {
      {"GET", "/init", 1},                      /* never to the gateway, even for the adapter */
      {"POST", "/init", 1},
      {"POST", "/init?x=1", 1},
      {"GET", "/tar?path=%2Ftmp", 0},           /* internal: only the router's own snapshot */
      {"DELETE", "/files?path=%2Ftmp", 0},      /* not a method of the route */
      {"GET", "/files?path=%2Ftmp&evil=1", 0},  /* a parameter the route does not take */
      {"GET", "/files?path=/tmp", 0},           /* a value not percent-encoded */
      {"GET", "/files/../init", 0},             /* not a route */
      {"GET", "/health/", 0},
      {"GET", "/", 0},
  };
  size_t i;

  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(upstream_gw_agent_path(out, sizeof(out), "sandboxes", "sb-1", 49983, bad[i].method, bad[i].route,
                                         bad[i].internal) == -EINVAL,
                  "%s %s accepted", bad[i].method, bad[i].route);
  /* /init stays on the pod proxy (the adapter's own call). */
  ck_assert_int_eq(upstream_agent_path(out, sizeof(out), "sandboxes", "sb-1", 49983, "POST", "/init", 1), 0);
  /* /tar is the adapter's through either. */
  ck_assert_int_eq(upstream_gw_agent_path(out, sizeof(out), "sandboxes", "sb-1", 49983, "GET",
                                          "/tar?path=%2Ftmp", 1), 0);
  ck_assert_str_eq(out, "/v1/proxy/sandboxes/sb-1/49983/tar?path=%2Ftmp");
  /* Names and ports are checked too. */
  ck_assert_int_eq(upstream_gw_agent_path(out, sizeof(out), "Sandboxes", "sb-1", 49983, "GET", "/health", 0), -EINVAL);
  ck_assert_int_eq(upstream_gw_agent_path(out, sizeof(out), "sandboxes", "sb_1", 49983, "GET", "/health", 0), -EINVAL);
  ck_assert_int_eq(upstream_gw_agent_path(out, sizeof(out), "sandboxes", "sb-1", 0, "GET", "/health", 0), -EINVAL);
  ck_assert_int_eq(upstream_gw_agent_path(out, sizeof(out), "sandboxes", "sb-1", 65536, "GET", "/health", 0), -EINVAL);
  ck_assert_int_eq(upstream_gw_agent_path(out, 20, "sandboxes", "sb-1", 49983, "GET", "/health", 0), -ENAMETOOLONG);
}
END_TEST

START_TEST(gw_port_path_passes_checked_paths_only) {
  char out[512];
  struct fr_gw_target t;
  size_t route;
  static const char *const bad[] = {"/a/../b", "/a/%2e%2e/b", "/a%2fb", "/a//b", "/a;b", "/a\\b", "/a b",
                                    "/x?%00", "/x?a=%0a"};
  size_t i;

  ck_assert_int_eq(upstream_gw_port_path(out, sizeof(out), "sandboxes", "sb-1", 8000, "/static/app.js?v=3"), 0);
  ck_assert_str_eq(out, "/v1/proxy/sandboxes/sb-1/8000/static/app.js?v=3");
  ck_assert_int_eq(fr_gw_parse(out, &t, &route, NULL, NULL), 0);
  ck_assert_int_eq(t.port, 8000);
  ck_assert_str_eq(out + route, "/static/app.js?v=3");
  ck_assert_int_eq(upstream_gw_port_path(out, sizeof(out), "sandboxes", "sb-1", 8000, "/"), 0);
  ck_assert_str_eq(out, "/v1/proxy/sandboxes/sb-1/8000/");
  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ck_assert_msg(upstream_gw_port_path(out, sizeof(out), "sandboxes", "sb-1", 8000, bad[i]) == -EINVAL,
                  "gateway: %s accepted", bad[i]);
    ck_assert_msg(upstream_port_path(out, sizeof(out), "sandboxes", "sb-1", 8000, bad[i]) == -EINVAL,
                  "pod proxy: %s accepted", bad[i]);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("upstream");
  TCase *tc = tcase_create("paths");
  SRunner *sr;
  int failed;

  tcase_add_test(tc, gw_agent_path_is_the_gateway_url_of_the_route);
  tcase_add_test(tc, gw_agent_path_refuses_what_the_pod_proxy_refuses_and_init);
  tcase_add_test(tc, gw_port_path_passes_checked_paths_only);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
