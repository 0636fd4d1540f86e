/* test_target.c - what fedrouter-gateway decides before anything goes
 * upstream: the gateway URL (fr/gwproto.h), signatures and the key ring,
 * the agent's internal routes, and the request head built for the pod
 * (gateway/src/target.c). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/buf.h"
#include "fr/gwproto.h"
#include "fr/http.h"
#include "target.h"

#define KEY "0123456789abcdef0123456789abcdef-current"
#define OLDKEY "fedcba9876543210fedcba9876543210-previous"
#define NOW 1800000000LL

static int parse_ok(const char *url, struct fr_gw_target *t, const char **route) {
  size_t off;
  int rc = fr_gw_parse(url, t, &off, NULL, NULL);

  if (rc == 0 && route != NULL)
    *route = url + off;
  return rc == 0;
}

static const char *parse_code(const char *url) {
  struct fr_gw_target t;
  const char *why = NULL, *code = NULL;
  size_t off;

  ck_assert_int_eq(fr_gw_parse(url, &t, &off, &why, &code), -EINVAL);
  ck_assert_ptr_nonnull(why);
  return code;
}

START_TEST(parse_valid_targets_yield_namespace_pod_port_and_route) {
  struct fr_gw_target t;
  const char *route;

  ck_assert(parse_ok("/v1/proxy/sandboxes/sb-abc12/49983/process.Process/Start", &t, &route));
  ck_assert_str_eq(t.ns, "sandboxes");
  ck_assert_str_eq(t.pod, "sb-abc12");
  ck_assert_int_eq(t.port, 49983);
  ck_assert_str_eq(route, "/process.Process/Start");
  ck_assert(parse_ok("/v1/proxy/ns/sb.x-1/8000", &t, &route));
  ck_assert_str_eq(route, "");
  ck_assert_int_eq(t.port, 8000);
  ck_assert(parse_ok("/v1/proxy/ns/p/1/?a=b%2Fc", &t, &route));
  ck_assert_str_eq(route, "/?a=b%2Fc");
  ck_assert(parse_ok("/v1/proxy/ns/p/65535?x=1", &t, &route));
  ck_assert_str_eq(route, "?x=1");
  ck_assert_int_eq(t.port, 65535);
  ck_assert(parse_ok("/v1/proxy/ns/p/80/caf%C3%A9/a.b/..x", &t, &route));
}
END_TEST

START_TEST(parse_paths_that_normalize_elsewhere_are_invalid_path) {
  static const char *const bad[] = {
      "/v1/proxy/ns/p/80/a/../b",       "/v1/proxy/ns/p/80/a/./b",       "/v1/proxy/ns/p/80/..",
      "/v1/proxy/ns/p/80/%2e%2e/x",     "/v1/proxy/ns/p/80/%2E%2e/x",    "/v1/proxy/ns/p/80/.%2e/x",
      "/v1/proxy/ns/p/80/%252e%252e/x", "/v1/proxy/ns/p/80/a%2fb",       "/v1/proxy/ns/p/80/a%2Fb",
      "/v1/proxy/ns/p/80/a%5cb",        "/v1/proxy/ns/p/80/a\\b",        "/v1/proxy/ns/p/80/a;b",
      "/v1/proxy/ns/p/80/a%3Bb",        "/v1/proxy/ns/p/80/a%00",        "/v1/proxy/ns/p/80/a%0a",
      "/v1/proxy/ns/p/80//a",           "/v1/proxy/ns/p/80/a b",         "/v1/proxy/ns/p/80/a\x01",
      "/v1/proxy/ns/p/80/\xc3\xa9",     "/v1/proxy/ns/p/80/a%zz",        "/v1/proxy/ns/p/80/a%",
      "/v1/proxy/../proxy/ns/p/80/",    "/v1/proxy/ns/p/80/a?x=%00",     "/v1/proxy/ns/p/80/a?x=\x7f",
      "/v1/proxy/ns/p/80/a?x y",
  };
  size_t i;

  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(strcmp(parse_code(bad[i]), "invalid_path") == 0, "%s", bad[i]);
}
END_TEST

START_TEST(parse_malformed_targets_are_invalid_target) {
  static const char *const bad[] = {
      "",
      "v1/proxy/ns/p/80/",
      "http://x/v1/proxy/ns/p/80/",
      "/v1/proxy/",
      "/v1/proxy/ns",
      "/v1/proxy/ns/p",
      "/v1/proxy/ns/p/",
      "/v1/proxy/NS/p/80/",
      "/v1/proxy/ns/P/80/",
      "/v1/proxy/-ns/p/80/",
      "/v1/proxy/ns/p-/80/",
      "/v1/proxy/ns/p/080/",
      "/v1/proxy/ns/p/0/",
      "/v1/proxy/ns/p/65536/",
      "/v1/proxy/ns/p/+80/",
      "/v1/proxy/ns/p/8o/",
      "/v1/proxy/ns/p/123456/",
      "/v1/proxy/ns/p:80/x/",
      "/v1/proxy/ns/p?x/80/",
      "/v2/proxy/ns/p/80/",
      "/api/v1/namespaces/ns/pods/p:80/proxy/",
      "/v1/proxy/a-namespace-name-that-is-longer-than-sixty-three-characters-0000000/p/80/",
  };
  size_t i;

  for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(strcmp(parse_code(bad[i]), "invalid_target") == 0 || strcmp(parse_code(bad[i]), "invalid_path") == 0,
                  "%s", bad[i]);
  ck_assert_str_eq(parse_code("/v1/proxy/ns/p/080/"), "invalid_target");
  ck_assert_str_eq(parse_code("/healthz"), "invalid_target");
}
END_TEST

START_TEST(path_builds_what_parse_reads) {
  char out[600];
  struct fr_gw_target t;
  const char *route;

  ck_assert_int_eq(fr_gw_path(out, sizeof(out), "sandboxes", "sb-1", 49983, "/files?path=%2Ftmp%2Fx"), 0);
  ck_assert_str_eq(out, "/v1/proxy/sandboxes/sb-1/49983/files?path=%2Ftmp%2Fx");
  ck_assert(parse_ok(out, &t, &route));
  ck_assert_str_eq(route, "/files?path=%2Ftmp%2Fx");
  ck_assert_int_eq(fr_gw_path(out, sizeof(out), "sandboxes", "sb-1", 8000, ""), 0);
  ck_assert_str_eq(out, "/v1/proxy/sandboxes/sb-1/8000");
  ck_assert_int_eq(fr_gw_path(out, sizeof(out), "sandboxes", "sb-1", 8000, "/a/../b"), -EINVAL);
  ck_assert_int_eq(fr_gw_path(out, sizeof(out), "Sandboxes", "sb-1", 8000, "/"), -EINVAL);
  ck_assert_int_eq(fr_gw_path(out, sizeof(out), "sandboxes", "sb_1", 8000, "/"), -EINVAL);
  ck_assert_int_eq(fr_gw_path(out, sizeof(out), "sandboxes", "sb-1", 0, "/"), -EINVAL);
  ck_assert_int_eq(fr_gw_path(out, sizeof(out), "sandboxes", "sb-1", 80, "x"), -EINVAL);
  ck_assert_int_eq(fr_gw_path(out, 20, "sandboxes", "sb-1", 80, "/"), -ENAMETOOLONG);
}
END_TEST

static struct fr_gw_keyring ring2(void) {
  struct fr_gw_keyring r;

  memset(&r, 0, sizeof(r));
  r.k[0].key = (unsigned char *)KEY;
  r.k[0].len = strlen(KEY);
  r.k[1].key = (unsigned char *)OLDKEY;
  r.k[1].len = strlen(OLDKEY);
  r.n = 2;
  return r;
}

START_TEST(signature_verifies_with_any_key_of_the_ring_for_its_target_only) {
  struct fr_gw_keyring r = ring2();
  struct fr_gw_target t = {"sandboxes", "sb-1", 49983}, o;
  char sig[FR_GW_AUTH_MAX], old[FR_GW_AUTH_MAX];
  size_t idx = 9;

  ck_assert_int_eq(fr_gw_sign(KEY, strlen(KEY), "us-east", "sandboxes", "sb-1", 49983, NOW + 60, sig), 0);
  ck_assert_int_eq(strncmp(sig, "v1.1800000060.", 14), 0);
  ck_assert_uint_eq(strlen(sig), 14 + 64);
  ck_assert_int_eq(fr_gw_verify(&r, sig, "us-east", &t, NOW, &idx), FR_GW_OK);
  ck_assert_uint_eq(idx, 0);
  ck_assert_int_eq(fr_gw_sign(OLDKEY, strlen(OLDKEY), "us-east", "sandboxes", "sb-1", 49983, NOW + 60, old), 0);
  ck_assert_int_eq(fr_gw_verify(&r, old, "us-east", &t, NOW, &idx), FR_GW_OK);
  ck_assert_uint_eq(idx, 1);
  /* Any other cluster, namespace, pod or port: not valid. */
  ck_assert_int_eq(fr_gw_verify(&r, sig, "us-west", &t, NOW, NULL), FR_GW_BAD_SIGNATURE);
  o = t;
  snprintf(o.ns, sizeof(o.ns), "other");
  ck_assert_int_eq(fr_gw_verify(&r, sig, "us-east", &o, NOW, NULL), FR_GW_BAD_SIGNATURE);
  o = t;
  snprintf(o.pod, sizeof(o.pod), "sb-2");
  ck_assert_int_eq(fr_gw_verify(&r, sig, "us-east", &o, NOW, NULL), FR_GW_BAD_SIGNATURE);
  o = t;
  o.port = 8000;
  ck_assert_int_eq(fr_gw_verify(&r, sig, "us-east", &o, NOW, NULL), FR_GW_BAD_SIGNATURE);
  /* A key removed from the ring no longer signs. */
  r.n = 1;
  ck_assert_int_eq(fr_gw_verify(&r, old, "us-east", &t, NOW, NULL), FR_GW_BAD_SIGNATURE);
  r.n = 0;
  ck_assert_int_eq(fr_gw_verify(&r, sig, "us-east", &t, NOW, NULL), FR_GW_BAD_SIGNATURE);
  /* A name boundary cannot be moved: "a\nb" pieces are not names anyway,
   * but "sb-1" in ns "x" vs pod "1" in ns "x\nsb"... */
  ck_assert_int_eq(fr_gw_sign(KEY, strlen(KEY), "us-east", "sandboxes", "sb-1", 0, NOW, sig), -EINVAL);
  ck_assert_int_eq(fr_gw_sign(KEY, 0, "us-east", "sandboxes", "sb-1", 80, NOW, sig), -EINVAL);
}
END_TEST

START_TEST(signature_expiry_bounds_and_skew) {
  struct fr_gw_keyring r = ring2();
  struct fr_gw_target t = {"sandboxes", "sb-1", 80};
  char sig[FR_GW_AUTH_MAX];

  /* Expired, within the skew: still good; past it: expired. */
  fr_gw_sign(KEY, strlen(KEY), "c", "sandboxes", "sb-1", 80, NOW - FR_GW_SKEW_S, sig);
  ck_assert_int_eq(fr_gw_verify(&r, sig, "c", &t, NOW, NULL), FR_GW_OK);
  fr_gw_sign(KEY, strlen(KEY), "c", "sandboxes", "sb-1", 80, NOW - FR_GW_SKEW_S - 1, sig);
  ck_assert_int_eq(fr_gw_verify(&r, sig, "c", &t, NOW, NULL), FR_GW_EXPIRED);
  /* Too far ahead: refused, so a leaked header cannot live for long. */
  fr_gw_sign(KEY, strlen(KEY), "c", "sandboxes", "sb-1", 80, NOW + FR_GW_MAX_TTL_S + FR_GW_SKEW_S, sig);
  ck_assert_int_eq(fr_gw_verify(&r, sig, "c", &t, NOW, NULL), FR_GW_OK);
  fr_gw_sign(KEY, strlen(KEY), "c", "sandboxes", "sb-1", 80, NOW + FR_GW_MAX_TTL_S + FR_GW_SKEW_S + 1, sig);
  ck_assert_int_eq(fr_gw_verify(&r, sig, "c", &t, NOW, NULL), FR_GW_TOO_LONG);
  ck_assert_str_eq(fr_gw_verdict_name(FR_GW_TOO_LONG), "expiry_too_far");
}
END_TEST

START_TEST(signature_malformed_headers_are_refused) {
  struct fr_gw_keyring r = ring2();
  struct fr_gw_target t = {"sandboxes", "sb-1", 80};
  char sig[FR_GW_AUTH_MAX], bad[FR_GW_AUTH_MAX + 8];
  static const char *const malformed[] = {
      "", "v1", "v1.", "v1..", "v2.1800000000." "0000000000000000000000000000000000000000000000000000000000000000",
      "v1.1800000000.000000000000000000000000000000000000000000000000000000000000000", /* 63 hex */
      "v1.1800000000.00000000000000000000000000000000000000000000000000000000000000000", /* 65 */
      "v1.1800000000.000000000000000000000000000000000000000000000000000000000000000G",
      "v1.1800000000.000000000000000000000000000000000000000000000000000000000000000A", /* upper case */
      "v1.01800000000.0000000000000000000000000000000000000000000000000000000000000000",
      "v1.-1.0000000000000000000000000000000000000000000000000000000000000000",
      "v1.1800000000000.0000000000000000000000000000000000000000000000000000000000000000",
      "v1. 1800000000.0000000000000000000000000000000000000000000000000000000000000000",
  };
  size_t i;

  ck_assert_int_eq(fr_gw_verify(&r, NULL, "c", &t, NOW, NULL), FR_GW_MISSING);
  for (i = 0; i < sizeof(malformed) / sizeof(malformed[0]); i++)
    ck_assert_msg(fr_gw_verify(&r, malformed[i], "c", &t, NOW, NULL) == FR_GW_MALFORMED, "%s", malformed[i]);
  /* A valid signature with anything appended is malformed. */
  fr_gw_sign(KEY, strlen(KEY), "c", "sandboxes", "sb-1", 80, NOW, sig);
  snprintf(bad, sizeof(bad), "%s ", sig);
  ck_assert_int_eq(fr_gw_verify(&r, bad, "c", &t, NOW, NULL), FR_GW_MALFORMED);
  /* One flipped hex digit: a bad signature. */
  snprintf(bad, sizeof(bad), "%s", sig);
  bad[strlen(bad) - 1] = bad[strlen(bad) - 1] == '0' ? '1' : '0';
  ck_assert_int_eq(fr_gw_verify(&r, bad, "c", &t, NOW, NULL), FR_GW_BAD_SIGNATURE);
}
END_TEST

static int allowed(const char *route, int agent) {
  struct gw_refusal why;

  memset(&why, 0, sizeof(why));
  if (gw_route_allowed(route, agent, &why) == 0)
    return 1;
  ck_assert_int_eq(why.status, 403);
  ck_assert_str_eq(why.code, "path_not_allowed");
  return 0;
}

START_TEST(route_agent_internal_paths_refused_on_the_agent_port_only) {
  static const char *const internal[] = {"/init", "/init/", "/init?x=1", "/INIT", "/Init", "/%69nit", "/%49NIT",
                                         "/_fr", "/_fr/", "/_fr/x/y", "/_FR/x", "/%5ffr/x", "/%5Ffr", "/_f%72/x"};
  static const char *const fine[] = {"", "/", "?x=1", "/health", "/files?path=%2Finit", "/initx", "/init.txt",
                                     "/x/init", "/_frx", "/process.Process/Start", "/_f"};
  size_t i;

  for (i = 0; i < sizeof(internal) / sizeof(internal[0]); i++) {
    ck_assert_msg(!allowed(internal[i], 1), "%s passed on the agent port", internal[i]);
    ck_assert_msg(allowed(internal[i], 0), "%s refused on a user port", internal[i]);
  }
  for (i = 0; i < sizeof(fine) / sizeof(fine[0]); i++)
    ck_assert_msg(allowed(fine[i], 1), "%s refused", fine[i]);
}
END_TEST

START_TEST(methods_allowed_are_the_usual_ones) {
  ck_assert(gw_method_allowed("GET"));
  ck_assert(gw_method_allowed("POST"));
  ck_assert(gw_method_allowed("OPTIONS"));
  ck_assert(!gw_method_allowed("CONNECT"));
  ck_assert(!gw_method_allowed("TRACE"));
  ck_assert(!gw_method_allowed("get"));
  ck_assert(!gw_method_allowed(NULL));
}
END_TEST

static struct fr_http_header H(const char *n, const char *v) {
  struct fr_http_header h;

  h.name = (char *)n;
  h.value = (char *)v;
  return h;
}

START_TEST(upstream_head_from_checked_parts_without_hop_by_hop_or_credentials) {
  struct fr_http_header hs[] = {
      H("Host", "gateway.example"), H("Fr-Gateway-Auth", "v1.1.x"), H("X-Access-Token", "tok"),
      H("Connection", "keep-alive, X-Private"), H("X-Private", "p"), H("Keep-Alive", "timeout=5"),
      H("Transfer-Encoding", "chunked"), H("Content-Length", "99"), H("TE", "trailers"), H("Expect", "100-continue"),
      H("Upgrade", "h2c"), H("Proxy-Authorization", "Basic x"), H("Content-Type", "application/json"),
      H("fr-gateway-other", "z"),
  };
  struct gw_refusal why;
  struct fr_buf b;

  fr_buf_init(&b);
  ck_assert_int_eq(gw_upstream_head(&b, "POST", "10.1.2.3", 49983, "/files?path=%2Ftmp", hs,
                                    sizeof(hs) / sizeof(hs[0]), 12, 0, "close", &why), 0);
  ck_assert_str_eq(b.data, "POST /files?path=%2Ftmp HTTP/1.1\r\n"
                           "Host: 10.1.2.3:49983\r\n"
                           "X-Access-Token: tok\r\n"
                           "Content-Type: application/json\r\n"
                           "Content-Length: 12\r\n"
                           "Connection: close\r\n\r\n");
  /* Empty route, chunked body, IPv6. */
  ck_assert_int_eq(gw_upstream_head(&b, "GET", "fd00::1", 8000, "", NULL, 0, GW_BODY_CHUNKED, 0, "keep-alive", &why), 0);
  ck_assert_str_eq(b.data, "GET / HTTP/1.1\r\nHost: [fd00::1]:8000\r\nTransfer-Encoding: chunked\r\n"
                           "Connection: keep-alive\r\n\r\n");
  ck_assert_int_eq(gw_upstream_head(&b, "GET", "10.0.0.1", 80, "?q=1", NULL, 0, GW_BODY_NONE, 0, "close", &why), 0);
  ck_assert_int_eq(strncmp(b.data, "GET /?q=1 HTTP/1.1\r\n", 20), 0);
  fr_buf_free(&b);
}
END_TEST

START_TEST(upstream_head_upgrade_keeps_its_upgrade_header) {
  struct fr_http_header hs[] = {H("Upgrade", "websocket"), H("Connection", "Upgrade"),
                                H("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                                H("Sec-WebSocket-Version", "13")};
  struct gw_refusal why;
  struct fr_buf b;

  fr_buf_init(&b);
  ck_assert_int_eq(gw_upstream_head(&b, "GET", "10.0.0.1", 8765, "/chat", hs, 4, GW_BODY_NONE, 1, "close", &why), 0);
  ck_assert_str_eq(b.data, "GET /chat HTTP/1.1\r\nHost: 10.0.0.1:8765\r\n"
                           "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
  ck_assert_int_eq(gw_upstream_head(&b, "GET", "10.0.0.1", 8765, "/chat", hs + 2, 2, GW_BODY_NONE, 1, "close", &why),
                   -EINVAL);
  fr_buf_free(&b);
}
END_TEST

START_TEST(upstream_head_refuses_bad_parts) {
  struct fr_http_header ctl[] = {H("X-A", "a\x01b")}, del[] = {H("X-A", "a\x7f")}, tab[] = {H("X-A", "a\tb")};
  struct gw_refusal why;
  struct fr_buf b;

  fr_buf_init(&b);
  ck_assert_int_eq(gw_upstream_head(&b, "GET", "10.0.0.1", 80, "/", ctl, 1, GW_BODY_NONE, 0, "close", &why), -EINVAL);
  ck_assert_str_eq(why.code, "invalid_header");
  ck_assert_int_eq(gw_upstream_head(&b, "GET", "10.0.0.1", 80, "/", del, 1, GW_BODY_NONE, 0, "close", &why), -EINVAL);
  ck_assert_int_eq(gw_upstream_head(&b, "GET", "10.0.0.1", 80, "/", tab, 1, GW_BODY_NONE, 0, "close", &why), 0);
  ck_assert_int_eq(gw_upstream_head(&b, "CONNECT", "10.0.0.1", 80, "/", NULL, 0, GW_BODY_NONE, 0, "close", &why),
                   -EINVAL);
  ck_assert_int_eq(why.status, 405);
  ck_assert_int_eq(gw_upstream_head(&b, "GET", "not-an-ip", 80, "/", NULL, 0, GW_BODY_NONE, 0, "close", &why), -EINVAL);
  ck_assert_int_eq(gw_upstream_head(&b, "GET", "10.0.0.1", 0, "/", NULL, 0, GW_BODY_NONE, 0, "close", &why), -EINVAL);
  ck_assert_int_eq(gw_upstream_head(&b, "GET", "10.0.0.1", 80, "x", NULL, 0, GW_BODY_NONE, 0, "close", &why), -EINVAL);
  fr_buf_free(&b);
}
END_TEST

START_TEST(response_headers_pass_end_to_end_only) {
  ck_assert(gw_response_header_passes("Content-Type", 0));
  ck_assert(gw_response_header_passes("Set-Cookie", 0));
  ck_assert(!gw_response_header_passes("Content-Length", 0));
  ck_assert(!gw_response_header_passes("Transfer-Encoding", 0));
  ck_assert(!gw_response_header_passes("connection", 0));
  ck_assert(!gw_response_header_passes("Keep-Alive", 0));
  ck_assert(!gw_response_header_passes("Fr-Gateway-Error", 0));
  ck_assert(!gw_response_header_passes("Upgrade", 0));
  ck_assert(gw_response_header_passes("Upgrade", 1));
  ck_assert(gw_response_header_passes("Connection", 1));
  ck_assert(gw_response_header_passes("Sec-WebSocket-Accept", 1));
}
END_TEST

START_TEST(body_framing_from_the_request_headers) {
  struct fr_http_req req;
  struct fr_http_header cl[] = {H("Content-Length", "1234")}, te[] = {H("Transfer-Encoding", "chunked")},
                        bad[] = {H("Content-Length", "12x")};

  memset(&req, 0, sizeof(req));
  ck_assert_int_eq(gw_body_framing(&req), GW_BODY_NONE);
  req.headers = cl;
  req.nheaders = 1;
  ck_assert_int_eq(gw_body_framing(&req), 1234);
  req.headers = te;
  ck_assert_int_eq(gw_body_framing(&req), GW_BODY_CHUNKED);
  req.headers = bad;
  ck_assert_int_eq(gw_body_framing(&req), -EINVAL);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("gateway_target");
  TCase *tc = tcase_create("target");

  tcase_add_test(tc, parse_valid_targets_yield_namespace_pod_port_and_route);
  tcase_add_test(tc, parse_paths_that_normalize_elsewhere_are_invalid_path);
  tcase_add_test(tc, parse_malformed_targets_are_invalid_target);
  tcase_add_test(tc, path_builds_what_parse_reads);
  tcase_add_test(tc, signature_verifies_with_any_key_of_the_ring_for_its_target_only);
  tcase_add_test(tc, signature_expiry_bounds_and_skew);
  tcase_add_test(tc, signature_malformed_headers_are_refused);
  tcase_add_test(tc, route_agent_internal_paths_refused_on_the_agent_port_only);
  tcase_add_test(tc, methods_allowed_are_the_usual_ones);
  tcase_add_test(tc, upstream_head_from_checked_parts_without_hop_by_hop_or_credentials);
  tcase_add_test(tc, upstream_head_upgrade_keeps_its_upgrade_header);
  tcase_add_test(tc, upstream_head_refuses_bad_parts);
  tcase_add_test(tc, response_headers_pass_end_to_end_only);
  tcase_add_test(tc, body_framing_from_the_request_headers);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
