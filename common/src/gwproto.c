/* gwproto.c - gateway URLs and signatures (fr/gwproto.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fr/gwproto.h"
#include "fr/urlsafe.h"
#include "fr/util.h"

#define SIG_CONTEXT "fedrouter-gateway/v1"

static int fail(const char **why, const char **code, const char *reason, const char *c) {
  if (why != NULL)
    *why = reason;
  if (code != NULL)
    *code = c;
  return -EINVAL;
}

/* A port in plain decimal: 1-65535, no sign, no leading zero. */
static int parse_port(const char *s, size_t n) {
  int v = 0;
  size_t i;

  if (n == 0 || n > 5 || s[0] == '0')
    return -1;
  for (i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v >= 1 && v <= 65535 ? v : -1;
}

int fr_gw_parse(const char *url, struct fr_gw_target *t, size_t *route, const char **why, const char **code) {
  size_t plen, n, at;
  const char *q, *seg, *w = NULL;

  memset(t, 0, sizeof(*t));
  *route = 0;
  if (url == NULL || url[0] != '/')
    return fail(why, code, "the request target is not a path (origin form)", "invalid_target");
  q = strchr(url, '?');
  plen = q != NULL ? (size_t)(q - url) : strlen(url);
  /* The whole raw path first: whatever follows the prefix is sent on, and
   * no part of it may change meaning under normalization. */
  if (fr_url_path_check(url, plen, &w) != 0)
    return fail(why, code, w, "invalid_path");
  if (q != NULL && fr_url_query_check(q + 1, strlen(q + 1), &w) != 0)
    return fail(why, code, w, "invalid_path");
  if (plen < sizeof(FR_GW_PREFIX) - 1 || memcmp(url, FR_GW_PREFIX, sizeof(FR_GW_PREFIX) - 1) != 0)
    return fail(why, code, "not a gateway path (" FR_GW_PREFIX "<namespace>/<pod>/<port>/...)", "invalid_target");
  at = sizeof(FR_GW_PREFIX) - 1;
  /* namespace */
  seg = url + at;
  n = strcspn(seg, "/?");
  if (n == 0 || n >= sizeof(t->ns) || seg[n] != '/')
    return fail(why, code, "no namespace, pod and port", "invalid_target");
  memcpy(t->ns, seg, n);
  if (!fr_dns_label(t->ns))
    return fail(why, code, "the namespace is not a DNS label", "invalid_target");
  at += n + 1;
  /* pod */
  seg = url + at;
  n = strcspn(seg, "/?");
  if (n == 0 || n >= sizeof(t->pod) || seg[n] != '/')
    return fail(why, code, "no pod and port", "invalid_target");
  memcpy(t->pod, seg, n);
  if (!fr_dns_subdomain(t->pod))
    return fail(why, code, "the pod name is not a DNS subdomain", "invalid_target");
  at += n + 1;
  /* port, then the route (its path may be empty: "/") */
  seg = url + at;
  n = strcspn(seg, "/?");
  if ((t->port = parse_port(seg, n)) < 0) {
    t->port = 0;
    return fail(why, code, "the port is not a number from 1 to 65535", "invalid_target");
  }
  *route = at + n;
  return 0;
}

int fr_gw_path(char *out, size_t cap, const char *ns, const char *pod, int port, const char *route) {
  const char *q = route != NULL ? strchr(route, '?') : NULL;
  size_t rlen = route != NULL ? (q != NULL ? (size_t)(q - route) : strlen(route)) : 0;
  int n;

  if (route == NULL || !fr_dns_label(ns) || !fr_dns_subdomain(pod) || port < 1 || port > 65535)
    return -EINVAL;
  if ((rlen > 0 && fr_url_path_check(route, rlen, NULL) != 0) ||
      (q != NULL && fr_url_query_check(q + 1, strlen(q + 1), NULL) != 0))
    return -EINVAL;
  n = snprintf(out, cap, FR_GW_PREFIX "%s/%s/%d%s", ns, pod, port, route);
  return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* The signed text of <cluster>/<t> at <exp> into <buf>; its length or -1. */
static int sig_text(char *buf, size_t cap, const char *cluster, const char *ns, const char *pod, int port,
                    int64_t exp) {
  int n = snprintf(buf, cap, SIG_CONTEXT "\n%s\n%s\n%s\n%d\n%lld", cluster, ns, pod, port, (long long)exp);

  return n < 0 || (size_t)n >= cap ? -1 : n;
}

int fr_gw_sign(const void *key, size_t key_len, const char *cluster, const char *ns, const char *pod, int port,
               int64_t exp, char out[FR_GW_AUTH_MAX]) {
  char text[512], sig[65];
  int n;

  out[0] = '\0';
  if (key == NULL || key_len == 0 || cluster == NULL || ns == NULL || pod == NULL || port < 1 || port > 65535 ||
      exp < 0 || exp > 999999999999LL)
    return -EINVAL;
  n = sig_text(text, sizeof(text), cluster, ns, pod, port, exp);
  if (n < 0)
    return -EINVAL;
  if (fr_hmac_sha256_hex(key, key_len, text, (size_t)n, sig) != 0)
    return -EIO;
  snprintf(out, FR_GW_AUTH_MAX, "v1.%lld.%s", (long long)exp, sig);
  return 0;
}

/* Equal 64-byte strings, in time independent of where they differ. */
static int sig_equal(const char *a, const char *b) {
  unsigned char d = 0;
  size_t i;

  for (i = 0; i < 64; i++)
    d |= (unsigned char)(a[i] ^ b[i]);
  return d == 0;
}

enum fr_gw_verdict fr_gw_verify(const struct fr_gw_keyring *ring, const char *value, const char *cluster,
                                const struct fr_gw_target *t, int64_t now_s, size_t *key_index) {
  char text[512], want[65];
  const char *p, *sig;
  int64_t exp = 0;
  size_t i, digits = 0;
  int n, ok = 0;

  if (value == NULL)
    return FR_GW_MISSING;
  if (strncmp(value, "v1.", 3) != 0)
    return FR_GW_MALFORMED;
  for (p = value + 3; *p >= '0' && *p <= '9' && digits < 12; p++, digits++)
    exp = exp * 10 + (*p - '0');
  if (digits == 0 || *p != '.' || (digits > 1 && value[3] == '0'))
    return FR_GW_MALFORMED;
  sig = p + 1;
  for (i = 0; i < 64; i++)
    if (!((sig[i] >= '0' && sig[i] <= '9') || (sig[i] >= 'a' && sig[i] <= 'f')))
      return FR_GW_MALFORMED;
  if (sig[64] != '\0')
    return FR_GW_MALFORMED;
  if (exp + FR_GW_SKEW_S < now_s)
    return FR_GW_EXPIRED;
  if (exp > now_s + FR_GW_MAX_TTL_S + FR_GW_SKEW_S)
    return FR_GW_TOO_LONG;
  n = sig_text(text, sizeof(text), cluster, t->ns, t->pod, t->port, exp);
  if (n < 0)
    return FR_GW_BAD_SIGNATURE;
  /* Every key is tried, so the time taken says nothing about which one
   * (or whether one) matched. */
  for (i = 0; ring != NULL && i < ring->n; i++) {
    if (fr_hmac_sha256_hex(ring->k[i].key, ring->k[i].len, text, (size_t)n, want) != 0)
      continue;
    if (sig_equal(want, sig) && !ok) {
      ok = 1;
      if (key_index != NULL)
        *key_index = i;
    }
  }
  return ok ? FR_GW_OK : FR_GW_BAD_SIGNATURE;
}

const char *fr_gw_verdict_name(enum fr_gw_verdict v) {
  switch (v) {
  case FR_GW_OK: return "ok";
  case FR_GW_MISSING: return "missing";
  case FR_GW_MALFORMED: return "malformed";
  case FR_GW_EXPIRED: return "expired";
  case FR_GW_TOO_LONG: return "expiry_too_far";
  case FR_GW_BAD_SIGNATURE: return "bad_signature";
  }
  return "unknown";
}
