/* fr/gwproto.h - the wire contract between fedrouter routers and a member
 * cluster's fedrouter-gateway (docs/gateway.md): the URL that names a
 * sandbox port, and the signature that says a router sent it.
 *
 * URL: a router asks the gateway for
 *
 *   /v1/proxy/<namespace>/<pod>/<port><path>[?<query>]
 *
 * and the gateway forwards "<path>[?<query>]" (or "/" when <path> is
 * empty) to <pod's IP>:<port>. <namespace> is a DNS label, <pod> a DNS
 * subdomain, <port> 1-65535 in plain decimal; the whole path passes
 * fr_url_path_check() and the query fr_url_query_check() (fr/urlsafe.h),
 * so no server on the way can normalize it into something else.
 *
 * Signature: header Fr-Gateway-Auth: v1.<exp>.<sig>, where <exp> is a
 * Unix time in seconds (decimal) after which it is refused and <sig> the
 * lowercase hex of HMAC-SHA256(key, "fedrouter-gateway/v1\n<cluster>\n
 * <namespace>\n<pod>\n<port>\n<exp>"). <cluster> is the name the routers
 * give the gateway's cluster (the first part of sandbox ids), so a
 * signature for one cluster is worthless at another even with a shared
 * key. The gateway holds a key ring (current and previous keys) and
 * accepts a signature made with any of them; <exp> may lie at most
 * FR_GW_MAX_TTL_S in the future, and FR_GW_SKEW_S of clock difference is
 * forgiven both ways.
 *
 * Pure functions, no allocation; safe anywhere.
 */
#ifndef FR_GWPROTO_H
#define FR_GWPROTO_H

#include <stddef.h>
#include <stdint.h>

#define FR_GW_PREFIX "/v1/proxy/"
#define FR_GW_AUTH_HEADER "Fr-Gateway-Auth"
/* Errors the gateway itself answers carry this header with their code, so
 * a router can tell them from the answers of what runs in the sandbox. */
#define FR_GW_ERROR_HEADER "Fr-Gateway-Error"
/* "v1." + up to 12 digits + "." + 64 hex digits + NUL. */
#define FR_GW_AUTH_MAX 96
/* How far in the future a signature's expiry may lie: a leaked header
 * opens one sandbox port for at most this long. */
#define FR_GW_MAX_TTL_S 300
/* Clock difference between router and gateway hosts that is forgiven. */
#define FR_GW_SKEW_S 30
/* Keys in a ring: the current one, the one being rotated out, and room
 * for a rotation that overlaps another. */
#define FR_GW_MAX_KEYS 4
/* A key is the bytes of its file less trailing white space, 32 to 4096
 * of them (the same rule as the agent key). */
#define FR_GW_KEY_MIN 32
#define FR_GW_KEY_MAX 4096

/* What a request names. */
struct fr_gw_target {
  char ns[64];
  char pod[254];
  int port;
};

/* Builds the gateway path of <route> ("/files?path=%2Ftmp", "/", "" for
 * "/") on <port> of <pod> in <ns> into <out> of <cap> bytes. <route> must
 * pass the checks the gateway applies (fr_url_path_check on its path,
 * fr_url_query_check on its query). 0, -EINVAL, -ENAMETOOLONG. */
int fr_gw_path(char *out, size_t cap, const char *ns, const char *pod, int port, const char *route);

/* Parses the raw request target <url> (path and query, still
 * percent-encoded) of a gateway request into <t> and the offset in <url>
 * of the route to forward (*<route>: its path starts there; "" means "/").
 * 0, or -EINVAL with a short reason in *<why> and, in *<code>, the error
 * code the gateway answers with: "invalid_path" (the path or query could
 * be normalized into another; 400), "invalid_target" (not a gateway path
 * or a malformed namespace, pod or port; 400). <why>, <code> may be NULL. */
int fr_gw_parse(const char *url, struct fr_gw_target *t, size_t *route, const char **why, const char **code);

/* Writes the Fr-Gateway-Auth value for <cluster>/<ns>/<pod>:<port>
 * expiring at <exp> (Unix seconds) with <key> into <out>. 0, or -EINVAL
 * (a name too long, a port out of range, an empty key), -EIO. */
int fr_gw_sign(const void *key, size_t key_len, const char *cluster, const char *ns, const char *pod, int port,
               int64_t exp, char out[FR_GW_AUTH_MAX]);

struct fr_gw_keyring {
  struct {
    unsigned char *key;   /* owned by whoever fills the ring */
    size_t len;
  } k[FR_GW_MAX_KEYS];
  size_t n;
};

enum fr_gw_verdict {
  FR_GW_OK = 0,
  FR_GW_MISSING,          /* no header */
  FR_GW_MALFORMED,        /* not v1.<exp>.<64 hex> */
  FR_GW_EXPIRED,          /* <exp> more than FR_GW_SKEW_S in the past */
  FR_GW_TOO_LONG,         /* <exp> further ahead than FR_GW_MAX_TTL_S + FR_GW_SKEW_S */
  FR_GW_BAD_SIGNATURE,    /* no key of the ring made it (for this target) */
};

/* Checks header value <value> (NULL: absent) for target <t> of <cluster>
 * at time <now_s> against every key of <ring>; *<key_index> (may be
 * NULL) gets the index of the key that matched. Comparisons take the
 * same time whatever the signature. */
enum fr_gw_verdict fr_gw_verify(const struct fr_gw_keyring *ring, const char *value, const char *cluster,
                                const struct fr_gw_target *t, int64_t now_s, size_t *key_index);
/* A stable snake_case name of <v> ("expired", "bad_signature", ...). */
const char *fr_gw_verdict_name(enum fr_gw_verdict v);

#endif
