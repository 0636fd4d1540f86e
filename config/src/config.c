/* config.c - the router configuration: libconfig text -> validated,
 * immutable, reference-counted snapshot (see fr/config.h for the format).
 *
 * Loading is one pass over the libconfig tree. Each group first has its keys
 * checked against the keys known at that level (so a misspelled key is
 * reported as "did you mean" rather than as a missing key), then each value
 * is type- and range-checked and copied into the snapshot. The first error
 * stops the load; it carries the file and line of the offending setting, or
 * of the enclosing group when a key is missing (0 for the top level, which
 * has no line of its own).
 *
 * Known limitation: libconfig 1.5 silently wraps integers that do not fit in
 * 32 bits unless they carry an `L` suffix. Every integer we accept is below
 * 2^31, so this only matters for absurd values, which may wrap into range.
 */
#include "fr/config.h"
#include "fr/labels.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <libconfig.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fr/buf.h"
#include "fr/cfgread.h"
#include "fr/egress.h"
#include "fr/util.h"

/* Defaults (documented in config/examples/fedrouter.conf). */
#define DEFAULT_LIFETIME_S 3600
#define DEFAULT_MAX_LIFETIME_S 86400
#define DEFAULT_BATCH_COMMIT_TIMEOUT_S 30
#define DEFAULT_MAX_BATCH 5000
#define DEFAULT_MAX_BODY_BYTES (1024 * 1024)
#define DEFAULT_MAX_EXEC_OUTPUT_BYTES (16 * 1024 * 1024)
#define DEFAULT_MAX_EXEC_TIMEOUT_S 3600
/* Open connections from one client address before the oldest idle one is
 * closed for a new one (or, with none idle, the new one refused): far above
 * what one well-behaved client keeps (loadgen's 1,000 concurrent execs),
 * far below the descriptors an attacker would need to starve the rest. */
#define DEFAULT_MAX_CONNECTIONS_PER_IP 4096
/* SIGTERM: how long /readyz fails before the listener closes. A load
 * balancer checking every 500 ms and taking a replica out after one failed
 * check (deploy/haproxy/haproxy.cfg) has stopped sending to it well within
 * 2 s; past 10 s a stop would mostly be waiting. */
#define DEFAULT_SHUTDOWN_DELAY_MS 2000
#define MAX_SHUTDOWN_DELAY_MS 10000
/* Bound of both connection keys; 0 = none (max_connections: derived from
 * the descriptor limit at start-up). */
#define MAX_CONNECTIONS INT64_C(1048576)
/* Per tenant: requests answered later (creates, execs, pool changes,
 * terminates) and execs running at once. Far above one RL run's needs
 * (loadgen drives 1,000 concurrent execs), low enough that one tenant
 * cannot take every descriptor and connection of the router. */
/* (FR_DEFAULT_TENANT_REQUESTS_IN_FLIGHT, FR_DEFAULT_TENANT_CONCURRENT_EXECS
 * in fr/config.h: the loopback-only router's tenant has them too.) */
/* Fair-share weights: a tenant of weight 1000 next to one of weight 1 is
 * as lopsided as a share gets and still leaves the small one a slot. */
#define MAX_WEIGHT 1000
/* The create queue (`queue` group). A create waits at most 10 minutes by
 * default: longer than any warm pool takes to refill or a batch of
 * thousands to finish, short enough that a client still holds its
 * connection. 100,000 sandboxes waiting hold about 1 KiB each (the create
 * body and its place in line): ~100 MiB at the bound. An exec waits 30 s
 * for a slot: the time a typical command of an RL step takes. */
#define DEFAULT_QUEUE_MAX_WAIT_S 600
#define MAX_QUEUE_WAIT_S 86400
#define DEFAULT_QUEUE_MAX_SANDBOXES 100000
#define MAX_QUEUE_SANDBOXES 10000000
#define DEFAULT_QUEUE_EXEC_WAIT_S 30
/* Warm pods a tenant's pools may ask for, summed over its pools and
 * clusters: warm pods hold cluster capacity for everyone, so one tenant's
 * pools must not fill a cluster. */
#define DEFAULT_TENANT_POOL_REPLICAS 1000
#define DEFAULT_TENANT_FILE_BYTES FR_DEFAULT_TENANT_FILE_BYTES
/* Exec output the router holds at once, all execs together (raw bytes; the
 * answer's JSON adds at most a third, see router/src/exec.c): 16 execs at
 * the default 16 MiB per stream, or thousands of ordinary ones. */
#define DEFAULT_EXEC_OUTPUT_BUDGET_BYTES (INT64_C(256) << 20)
#define DEFAULT_NAMESPACE "default"
/* Modal's published on-demand rates (docs/metrics.md, "Cost model"). */
#define DEFAULT_HOSTED_PER_CORE_SECOND 0.00003942
#define DEFAULT_HOSTED_PER_GIB_SECOND 0.00000672

/* Bounds. Lifetimes and timeouts are capped at ten years so that
 * now + lifetime can never overflow anywhere downstream; the byte limits at
 * 1 GiB because bodies and exec output are held in memory. A body limit
 * below 1 KiB could not hold an ordinary create request. */
#define MAX_SECONDS INT64_C(315360000)
#define MAX_BATCH_LIMIT 100000
#define MIN_BODY_BYTES 1024
#define MAX_BYTES (INT64_C(1) << 30)
#define MAX_TENANT_SANDBOXES INT64_C(1000000000)
#define MAX_SANDBOXES_PER_NODE 1000000

#define CLUSTER_NAME_MAX 32 /* cluster names are embedded in sandbox ids */
#define LABEL_VALUE_MAX 63  /* tenant names end up in Kubernetes labels */
#define SUGGEST_MAX_DISTANCE 2

/* State of one load. */
struct loader {
  struct fr_cfgread cfg;       /* errors go to <err> through it */
  const char *path;            /* as given by the caller: used in messages */
  char *dir;                   /* realpath of the directory of <path> */
  struct fr_config_error *err;
  char *nul_file;              /* the first file read holding a NUL byte (libconfig's scanner exits on one) */
};

/* ---- errors ---- */

/* The shared libconfig readers (fr/cfgread.h), on this loader. */
#define type_name fr_cfg_type_name
#define bad(l, ...) fr_cfg_bad(&(l)->cfg, __VA_ARGS__)
#define missing(l, ...) fr_cfg_missing(&(l)->cfg, __VA_ARGS__)
#define oom(l) fr_cfg_oom(&(l)->cfg)
#define get_group(l, ...) fr_cfg_get_group(&(l)->cfg, __VA_ARGS__)
#define get_list(l, ...) fr_cfg_get_list(&(l)->cfg, __VA_ARGS__)
#define get_string(l, ...) fr_cfg_get_string(&(l)->cfg, __VA_ARGS__)

/* ---- unknown keys ---- */


/* Rejects any member of <group> not in <known> (NULL-terminated), suggesting
 * the closest known key when it is within SUGGEST_MAX_DISTANCE edits, as
 * HAProxy does for its keywords. */
static int check_keys(struct loader *l, const config_setting_t *group, const char *const *known) {
  int i, n = config_setting_length(group), rc = 0;

  for (i = 0; i < n; i++) {
    const config_setting_t *m = config_setting_get_elem(group, (unsigned)i);
    const char *name = config_setting_name(m);
    const char *best = NULL;
    size_t best_d = SIZE_MAX, k;
    char list[256];
    size_t len = 0;

    for (k = 0; known[k] != NULL; k++) {
      size_t d;

      if (strcmp(name, known[k]) == 0)
        break;
      d = fr_edit_distance(name, known[k]);
      if (d < best_d) {
        best_d = d;
        best = known[k];
      }
    }
    if (known[k] != NULL)
      continue;
    /* Every unknown key is reported (a check lists them all). */
    if (best != NULL && best_d <= SUGGEST_MAX_DISTANCE) {
      rc = fr_cfg_first(rc, bad(l, m, "unknown key (did you mean \"%s\"?)", best));
      continue;
    }
    list[0] = '\0';
    for (k = 0; known[k] != NULL && len < sizeof(list); k++) {
      int w = snprintf(list + len, sizeof(list) - len, "%s%s", k > 0 ? ", " : "", known[k]);
      if (w < 0)
        break;
      len += (size_t)w;
    }
    rc = fr_cfg_first(rc, bad(l, m, "unknown key (known keys here: %s)", list));
  }
  return rc;
}

/* ---- typed getters ---- */

/* The integer <key> of <group> in [min, max]; <*out> keeps its value (the
 * default) when the key is absent. <*present> (optional) tells which. */
static int get_int(struct loader *l, const config_setting_t *group, const char *key,
                   int64_t min, int64_t max, int64_t *out, int *present) {
  config_setting_t *s = config_setting_get_member(group, key);
  int64_t v;

  if (present != NULL)
    *present = s != NULL;
  if (s == NULL)
    return 0;
  switch (config_setting_type(s)) {
  case CONFIG_TYPE_INT:
  case CONFIG_TYPE_INT64:
    break;
  case CONFIG_TYPE_STRING:
    return bad(l, s, "expected an integer, got a string (\"%s\"); write numbers without quotes",
               config_setting_get_string(s));
  default:
    return bad(l, s, "expected an integer, got %s", type_name(config_setting_type(s)));
  }
  v = (int64_t)config_setting_get_int64(s);
  if (v < min || v > max)
    return bad(l, s, "%lld is out of range (%lld-%lld)", (long long)v, (long long)min,
               (long long)max);
  *out = v;
  return 0;
}

/* The boolean <key> of <group>; <*out> keeps its value when absent. */
static int get_bool(struct loader *l, const config_setting_t *group, const char *key, int *out) {
  config_setting_t *s = config_setting_get_member(group, key);

  if (s == NULL)
    return 0;
  if (config_setting_type(s) != CONFIG_TYPE_BOOL)
    return bad(l, s, "expected true or false, got %s", type_name(config_setting_type(s)));
  *out = config_setting_get_bool(s);
  return 0;
}

/* The non-negative number <key> of <group> (an integer is fine); <*out>
 * keeps its value when absent. */
static int get_amount(struct loader *l, const config_setting_t *group, const char *key,
                      double *out, int *present) {
  const config_setting_t *s;
  double v = 0;
  int rc = fr_cfg_get_number(&l->cfg, group, key, &v, &s);

  *present = s != NULL;
  if (rc < 0 || s == NULL)
    return rc;
  if (!isfinite(v) || v < 0)
    return bad(l, s, "must be a number >= 0, got %g", v);
  *out = v;
  return 0;
}

/* ---- paths ---- */

/* <rel> resolved against the directory <dir> (already a realpath), as a new
 * string. "." segments and repeated slashes go; ".." segments are folded
 * only while they lead the path, where they can only climb <dir> (which has
 * no symlinks left); a ".." after a named segment stays, since that segment
 * may be a symlink. */
static char *resolve_path(const char *dir, const char *rel) {
  size_t cap = strlen(dir) + strlen(rel) + 3, len = 0;
  char *out = malloc(cap);
  const char *p = rel;
  int leading = 1;

  if (out == NULL)
    return NULL;
  if (rel[0] != '/') {
    len = strlen(dir);
    memcpy(out, dir, len);
  }
  if (len == 1 && out[0] == '/')
    len = 0; /* dir is "/": segments add their own slash */
  while (*p != '\0') {
    const char *seg;
    size_t n;

    while (*p == '/')
      p++;
    seg = p;
    while (*p != '\0' && *p != '/')
      p++;
    n = (size_t)(p - seg);
    if (n == 0 || (n == 1 && seg[0] == '.'))
      continue;
    if (n == 2 && seg[0] == '.' && seg[1] == '.' && leading) {
      while (len > 0 && out[len - 1] != '/')
        len--;
      if (len > 0)
        len--; /* the slash itself */
      continue;
    }
    leading = 0;
    out[len++] = '/';
    memcpy(out + len, seg, n);
    len += n;
  }
  if (len == 0)
    out[len++] = '/';
  out[len] = '\0';
  return out;
}

/* Resolves the path string <key> of <group> into <*out> (a new string). */
static int get_path(struct loader *l, const config_setting_t *group, const char *key,
                    int required, const char *what, char **out,
                    const config_setting_t **setting) {
  const char *v;
  int rc = get_string(l, group, key, required, what, &v, setting);

  *out = NULL;
  if (rc < 0 || v == NULL)
    return rc;
  *out = resolve_path(l->dir, v);
  return *out == NULL ? oom(l) : 0;
}

/* ---- value checks ---- */

static int is_lower_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static int is_alnum(char c) {
  return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

/* Regions (a router's, a cluster's) are short tokens clients also send in
 * X-Client-Region: [A-Za-z0-9._-]{1,63}. */
static int check_region(struct loader *l, const config_setting_t *s, const char *v) {
  size_t i, n = strlen(v);

  for (i = 0; i < n; i++)
    if (!is_alnum(v[i]) && v[i] != '-' && v[i] != '_' && v[i] != '.')
      return bad(l, s, "\"%s\" is not a valid region (letters, digits, '-', '_', '.')", v);
  if (n > LABEL_VALUE_MAX)
    return bad(l, s, "region is %zu characters long (at most %d)", n, LABEL_VALUE_MAX);
  return 0;
}

/* The listen address: "HOST:PORT" with an IPv4 address or host name, or
 * "[IPV6]:PORT". The host is stored without brackets. Port 0 (an ephemeral
 * port, for tests) is allowed. */
static int parse_listen(struct loader *l, const config_setting_t *s, const char *v,
                        char **host_out, int *port_out) {
  const char *host, *port, *colon;
  size_t hlen, i;
  int64_t p;
  int rc;
  char buf[INET6_ADDRSTRLEN + 64];

  if (v[0] == '[') {
    const char *close = strchr(v, ']');
    if (close == NULL)
      return bad(l, s, "\"%s\": missing ']' after the IPv6 address", v);
    host = v + 1;
    hlen = (size_t)(close - host);
    if (close[1] != ':')
      return bad(l, s, "\"%s\": expected \":PORT\" after ']' (e.g. \"[::1]:8080\")", v);
    port = close + 2;
    if (hlen == 0 || hlen >= sizeof(buf))
      return bad(l, s, "\"%s\": not a valid IPv6 address", v);
    memcpy(buf, host, hlen);
    buf[hlen] = '\0';
    {
      struct in6_addr a6;
      char *zone = strchr(buf, '%'); /* link-local zone, "fe80::1%eth0" */
      if (zone != NULL)
        *zone = '\0';
      if (inet_pton(AF_INET6, buf, &a6) != 1 || (zone != NULL && zone[1] == '\0'))
        return bad(l, s, "\"%s\": not a valid IPv6 address", v);
    }
  } else {
    colon = strrchr(v, ':');
    if (colon == NULL)
      return bad(l, s, "\"%s\": missing \":PORT\" (expected HOST:PORT, e.g. \"127.0.0.1:8080\")", v);
    host = v;
    hlen = (size_t)(colon - v);
    port = colon + 1;
    if (memchr(host, ':', hlen) != NULL)
      return bad(l, s, "\"%s\": put an IPv6 address in brackets, e.g. \"[::1]:8080\"", v);
    if (hlen == 0)
      return bad(l, s, "\"%s\": missing host (use \"0.0.0.0:PORT\" for every IPv4 interface, "
                 "\"[::]:PORT\" for IPv6)", v);
    if (hlen > 253)
      return bad(l, s, "host name is longer than 253 characters");
    {
      int numeric = 1;
      for (i = 0; i < hlen; i++) {
        char c = host[i];
        if (!is_alnum(c) && c != '-' && c != '.')
          return bad(l, s, "\"%s\": \"%.*s\" is not a valid IPv4 address or host name", v,
                     (int)hlen, host);
        if (!(c == '.' || (c >= '0' && c <= '9')))
          numeric = 0;
      }
      if (numeric) {
        struct in_addr a4;
        /* Digits and dots only: an IPv4 address, which fits in
         * INET_ADDRSTRLEN; a longer one is not valid (and must not be
         * copied into buf). */
        if (hlen < INET_ADDRSTRLEN) {
          memcpy(buf, host, hlen);
          buf[hlen] = '\0';
        }
        if (hlen >= INET_ADDRSTRLEN || inet_pton(AF_INET, buf, &a4) != 1)
          return bad(l, s, "\"%s\": \"%.*s\" is not a valid IPv4 address", v, (int)hlen, host);
      }
    }
  }
  rc = fr_parse_int64(port, 0, 65535, &p);
  if (rc == -ERANGE)
    return bad(l, s, "\"%s\": port %s is out of range (0-65535)", v, port);
  if (rc < 0)
    return bad(l, s, "\"%s\": port \"%s\" is not a number (expected HOST:PORT)", v, port);
  *host_out = strndup(host, hlen);
  if (*host_out == NULL)
    return oom(l);
  *port_out = (int)p;
  return 0;
}

/* ---- sections ---- */

static const char *const root_keys[] = {"listen", "health_listen", "tls", "region", "policy", "sandbox",
                                        "limits", "tenants", "clusters", "hosted",
                                        "metrics_token_sha256", "agent", "shutdown_delay_ms", "queue", "ports",
                                        "e2b", "metrics", NULL};
static const char *const metrics_keys[] = {"prometheus_url", "history_step_s", NULL};
static const char *const ports_keys[] = {"domain", "max_requests_per_sandbox", "max_requests_per_tenant",
                                         "max_tunnels", "max_tunnels_per_tenant", "tunnel_idle_timeout_s", NULL};
static const char *const e2b_keys[] = {"templates", NULL};
static const char *const template_keys[] = {"name", "pool", NULL};
static const char *const agent_keys[] = {"image", "port", "key_file", "previous_key_file", NULL};
static const char *const tls_keys[] = {"cert", "key", NULL};
static const char *const sandbox_keys[] = {"default_lifetime_s", "max_lifetime_s", "gpu_resource",
                                           "batch_commit_timeout_s", "run_as_user", NULL};
static const char *const limits_keys[] = {"max_batch", "max_body_bytes", "max_exec_output_bytes",
                                          "max_exec_timeout_s", "max_connections",
                                          "max_connections_per_ip", "exec_output_budget_bytes", NULL};
static const char *const tenant_keys[] = {"name", "token_sha256", "tokens", "max_sandboxes", "max_requests_in_flight",
                                          "max_concurrent_execs", "max_pool_replicas", "max_file_bytes", "admin",
                                          "secret", "max_cpus", "max_memory_gb", "max_gpus", "weight",
                                          "max_queued_sandboxes", "max_queued_execs", "max_paused", "max_paused_s",
                                          "max_workspace_bytes", "max_lifetime_s", "network", NULL};
static const char *const token_keys[] = {"name", "sha256", "expires", NULL};
static const char *const queue_keys[] = {"max_wait_s", "max_sandboxes", "exec_wait_s", "e2b_wait_s", NULL};
static const char *const network_keys[] = {"allow_internet", "allow_out", "deny_out", NULL};
static const char *const cluster_keys[] = {"name", "region", "kubeconfig", "context", "in_cluster",
                                           "namespace", "cost", "gateway", NULL};
static const char *const gateway_keys[] = {"url", "urls", "ca_file", "key_file", NULL};
static const char *const cost_keys[] = {"per_core_hour", "per_gib_hour", "per_gpu_hour", "node_hour",
                                        "sandboxes_per_node", NULL};
static const char *const hosted_keys[] = {"per_core_second", "per_gib_second", NULL};

static int check_readable(struct loader *l, const config_setting_t *s, const char *path) {
  struct stat st;

  if (stat(path, &st) != 0 || access(path, R_OK) != 0)
    return bad(l, s, "cannot read \"%s\": %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return bad(l, s, "\"%s\" is not a regular file", path);
  return 0;
}

static int load_tls(struct loader *l, const config_setting_t *root, struct fr_config *c) {
  const config_setting_t *g, *s;
  int rc;

  if ((rc = get_group(l, root, "tls", &g)) < 0 || g == NULL)
    return rc;
  if ((rc = check_keys(l, g, tls_keys)) < 0)
    return rc;
  if ((rc = get_path(l, g, "cert", 1, "the PEM certificate chain to serve", &c->tls_cert, &s)) < 0)
    return rc;
  if ((rc = check_readable(l, s, c->tls_cert)) < 0)
    return rc;
  if ((rc = get_path(l, g, "key", 1, "the PEM private key of the certificate", &c->tls_key, &s)) < 0)
    return rc;
  return check_readable(l, s, c->tls_key);
}

/* The sandbox agent's HMAC key: the file's bytes less trailing white
 * space, at least AGENT_KEY_MIN of them (a token is only as strong as it). */
#define AGENT_KEY_MIN 32
#define AGENT_KEY_MAX 4096

static int read_key(struct loader *l, const config_setting_t *s, const char *path, const char *what,
                    unsigned char **key, size_t *key_len) {
  FILE *f = fopen(path, "rb");
  unsigned char buf[AGENT_KEY_MAX + 1];
  size_t n;

  if (f == NULL)
    return bad(l, s, "cannot read %s: %s", path, strerror(errno));
  n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
    n--;
  if (n < AGENT_KEY_MIN || n > AGENT_KEY_MAX)
    return bad(l, s, "%s holds %zu bytes; %s needs %d to %d (make one with: "
               "head -c 32 /dev/urandom | base64 > FILE)", path, n, what, AGENT_KEY_MIN, AGENT_KEY_MAX);
  *key = malloc(n);
  if (*key == NULL) {
    explicit_bzero(buf, sizeof(buf));
    return oom(l);
  }
  memcpy(*key, buf, n);
  *key_len = n;
  explicit_bzero(buf, sizeof(buf));
  return 0;
}

static int read_agent_key(struct loader *l, const config_setting_t *s, const char *path, unsigned char **key,
                          size_t *key_len) {
  return read_key(l, s, path, "the agent key", key, key_len);
}

/* A cluster's gateway URL: "https://HOST[:PORT]", or "http://" for a
 * loopback HOST (a test, or a TLS-terminating hop on the same machine:
 * the signature is a bearer credential for a minute). HOST a DNS name, an
 * IPv4 address or a bracketed IPv6 one; no user, path, query or fragment:
 * the router builds every path itself (upstream.c). */
static int check_gateway_url(struct loader *l, const config_setting_t *s, const char *url) {
  const char *host, *end, *p;
  size_t hlen;
  int plain = strncmp(url, "http://", 7) == 0;
  int64_t port;

  if (!plain && strncmp(url, "https://", 8) != 0)
    return bad(l, s, "\"%s\" is not an https:// URL (e.g. \"https://fedrouter-gateway.fedrouter.svc:443\")", url);
  host = url + (plain ? 7 : 8);
  if (*host == '[') {
    end = strchr(host, ']');
    if (end == NULL || end == host + 1)
      return bad(l, s, "\"%s\": an IPv6 address needs its closing ']'", url);
    for (p = host + 1; p < end; p++)
      if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.')
        return bad(l, s, "\"%s\": \"%.*s\" is not an IPv6 address", url, (int)(end - host - 1), host + 1);
    end++;
  } else {
    for (end = host; *end != '\0' && *end != ':' && *end != '/'; end++)
      if (!isalnum((unsigned char)*end) && *end != '-' && *end != '.')
        return bad(l, s, "\"%s\": the host may only hold letters, digits, '-' and '.' (no user@, query or "
                   "fragment)", url);
    if (end == host || host[0] == '.' || host[0] == '-' || end[-1] == '.' || end - host > 253)
      return bad(l, s, "\"%s\": not a host name or address", url);
  }
  hlen = (size_t)(end - host);
  if (*end == ':') {
    char digits[8];
    size_t n = strspn(end + 1, "0123456789");
    if (n == 0 || n > 5 || end[1] == '0' || (end[1 + n] != '\0' && end[1 + n] != '/'))
      return bad(l, s, "\"%s\": the port must be 1-65535 in plain decimal", url);
    memcpy(digits, end + 1, n);
    digits[n] = '\0';
    if (fr_parse_int64(digits, 1, 65535, &port) != 0)
      return bad(l, s, "\"%s\": the port must be 1-65535 in plain decimal", url);
    end += 1 + n;
  }
  if (*end != '\0')
    return bad(l, s, "\"%s\": give the gateway's scheme, host and port only, no path (the router adds "
               "/v1/proxy/...)", url);
  if (plain && !((hlen == 9 && strncasecmp(host, "localhost", 9) == 0) || (hlen == 5 && memcmp(host, "[::1]", 5) == 0) ||
                 (hlen >= 9 && strncmp(host, "127.", 4) == 0 && strspn(host, "0123456789.") == hlen)))
    return bad(l, s, "\"%s\": plain http:// is only for a gateway on this machine (127.0.0.0/8, [::1], localhost); "
               "use https:// with its CA in ca_file", url);
  return 0;
}

/* One URL of a cluster's `gateway` group, checked, added to <cl>. */
static int add_gateway_url(struct loader *l, const config_setting_t *s, const char *url,
                           struct fr_config_cluster *cl) {
  size_t i;
  int rc;

  if ((rc = check_gateway_url(l, s, url)) < 0)
    return rc;
  for (i = 0; i < cl->gateway_nurls; i++)
    if (strcmp(cl->gateway_urls[i], url) == 0)
      return bad(l, s, "\"%s\" is listed twice: each URL once (the router keeps the health of each)", url);
  if ((cl->gateway_urls[cl->gateway_nurls] = strdup(url)) == NULL)
    return oom(l);
  cl->gateway_nurls++;
  return 0;
}

/* A cluster's `gateway` group: `url` (one) or `urls` (a list). */
static int load_gateway(struct loader *l, const config_setting_t *cluster, struct fr_config_cluster *cl) {
  const config_setting_t *g, *s, *list;
  const char *url;
  char *path = NULL;
  size_t i;
  int rc, n;

  if ((rc = get_group(l, cluster, "gateway", &g)) < 0 || g == NULL)
    return rc;
  if ((rc = check_keys(l, g, gateway_keys)) < 0)
    return rc;
  list = config_setting_get_member(g, "urls");
  if (list != NULL && config_setting_get_member(g, "url") != NULL)
    return bad(l, list, "give either url (one gateway URL) or urls (a list of them), not both");
  if (list != NULL) {
    if (!config_setting_is_array(list) && !config_setting_is_list(list))
      return bad(l, list, "expected a list of the gateway's https:// URLs ([\"https://gw-a:443\", "
                 "\"https://gw-b:443\"]), got %s", type_name(config_setting_type(list)));
    n = config_setting_length(list);
    if (n < 1 || n > FR_CONFIG_GATEWAY_URLS_MAX)
      return bad(l, list, "%d URLs; give 1 to %d", n, FR_CONFIG_GATEWAY_URLS_MAX);
    for (i = 0; i < (size_t)n; i++) {
      s = config_setting_get_elem(list, (unsigned)i);
      if ((url = config_setting_get_string(s)) == NULL)
        return bad(l, s, "expected a string (a gateway URL, e.g. \"https://fedrouter-gateway.fedrouter.svc:443\"), "
                   "got %s", type_name(config_setting_type(s)));
      if ((rc = add_gateway_url(l, s, url, cl)) < 0)
        return rc;
    }
  } else if ((rc = get_string(l, g, "url", 1, "the gateway's https:// URL, e.g. "
                              "\"https://fedrouter-gateway.fedrouter.svc:443\" (or urls = [...] for several)",
                              &url, &s)) < 0 ||
             (rc = add_gateway_url(l, s, url, cl)) < 0) {
    return rc;
  }
  if ((rc = get_path(l, g, "ca_file", 0, NULL, &cl->gateway_ca_file, &s)) < 0)
    return rc;
  if (cl->gateway_ca_file != NULL) {
    FILE *f;
    char buf[4096];
    size_t nb;
    for (i = 0; i < cl->gateway_nurls; i++)
      if (strncmp(cl->gateway_urls[i], "http://", 7) == 0)
        return bad(l, s, "ca_file verifies an https:// gateway; \"%s\" is plain http", cl->gateway_urls[i]);
    if ((rc = check_readable(l, s, cl->gateway_ca_file)) < 0)
      return rc;
    f = fopen(cl->gateway_ca_file, "rb");
    nb = f != NULL ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f != NULL)
      fclose(f);
    buf[nb] = '\0';
    if (strstr(buf, "-----BEGIN CERTIFICATE-----") == NULL)
      return bad(l, s, "%s holds no PEM certificate (-----BEGIN CERTIFICATE-----): the CA of the gateway's "
                 "certificate", cl->gateway_ca_file);
  }
  if ((rc = get_path(l, g, "key_file", 1, "the file of the key the gateway checks Fr-Gateway-Auth signatures "
                     "with (the first of its --key-file ring)", &path, &s)) < 0)
    return rc;
  rc = read_key(l, s, path, "the gateway key", &cl->gateway_key, &cl->gateway_key_len);
  cl->gateway_key_file = path;
  return rc;
}

static int load_agent(struct loader *l, const config_setting_t *root, struct fr_config *c) {
  const config_setting_t *g, *s;
  const char *v;
  int64_t port = 49983;
  char *key_path = NULL;
  int rc;

  if ((rc = get_group(l, root, "agent", &g)) < 0 || g == NULL)
    return rc;
  if ((rc = check_keys(l, g, agent_keys)) < 0 ||
      (rc = get_string(l, g, "image", 1, "the agent image its init container copies fedrouter-agent from",
                       &v, &s)) < 0)
    return rc;
  if ((c->agent_image = strdup(v)) == NULL)
    return oom(l);
  if ((rc = get_int(l, g, "port", 1, 65535, &port, NULL)) < 0)
    return rc;
  c->agent_port = (int)port;
  if ((rc = get_path(l, g, "key_file", 1, "the file of the HMAC key sandbox tokens are derived with", &key_path,
                     &s)) < 0)
    return rc;
  rc = read_agent_key(l, s, key_path, &c->agent_key, &c->agent_key_len);
  free(key_path);
  if (rc < 0)
    return rc;
  /* During a key rotation: sandboxes initialised with the old key. */
  if ((rc = get_path(l, g, "previous_key_file", 0, NULL, &key_path, &s)) < 0 || key_path == NULL)
    return rc;
  rc = read_agent_key(l, s, key_path, &c->agent_prev_key, &c->agent_prev_key_len);
  free(key_path);
  return rc;
}

/* A DNS name of labels (the wildcard domain of preview URLs). */
static int domain_ok(const char *d) {
  size_t n = strlen(d), i, lab = 0;

  if (n == 0 || n > 200 || d[0] == '.' || d[n - 1] == '.')
    return 0;
  for (i = 0; i < n; i++) {
    char ch = d[i];
    if (ch == '.') {
      if (lab == 0 || d[i - 1] == '-')
        return 0;
      lab = 0;
    } else if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || (ch == '-' && lab > 0)) {
      if (++lab > 63)
        return 0;
    } else {
      return 0;
    }
  }
  return d[n - 1] != '-';
}

static int load_ports(struct loader *l, const config_setting_t *root, struct fr_config *c) {
  const config_setting_t *g, *s;
  const char *v;
  int rc;

  c->max_port_requests_per_sandbox = 64;
  c->max_port_requests_per_tenant = 1024;
  c->max_port_tunnels = 4096;
  c->max_port_tunnels_per_tenant = 256;
  c->port_tunnel_idle_s = 3600; /* well above ten minutes: a quiet terminal or notebook socket stays up */
  if ((rc = get_group(l, root, "ports", &g)) < 0 || g == NULL)
    return rc;
  rc = check_keys(l, g, ports_keys);
  rc = fr_cfg_first(rc, get_int(l, g, "max_requests_per_sandbox", 1, 100000, &c->max_port_requests_per_sandbox,
                                NULL));
  rc = fr_cfg_first(rc, get_int(l, g, "max_requests_per_tenant", 1, 1000000, &c->max_port_requests_per_tenant,
                                NULL));
  rc = fr_cfg_first(rc, get_int(l, g, "max_tunnels", 1, 1000000, &c->max_port_tunnels, NULL));
  rc = fr_cfg_first(rc, get_int(l, g, "max_tunnels_per_tenant", 1, 1000000, &c->max_port_tunnels_per_tenant, NULL));
  rc = fr_cfg_first(rc, get_int(l, g, "tunnel_idle_timeout_s", 1, 7 * 86400, &c->port_tunnel_idle_s, NULL));
  if (rc < 0)
    return rc;
  if ((rc = get_string(l, g, "domain", 0, NULL, &v, &s)) < 0 || v == NULL)
    return rc;
  /* A port may follow (what clients dial: "sandbox.localhost:8080"). */
  {
    char host[256];
    const char *colon = strchr(v, ':');
    int64_t port;
    size_t hn = colon != NULL ? (size_t)(colon - v) : strlen(v);
    if (hn >= sizeof(host))
      return bad(l, s, "\"%s\" is too long for a domain", v);
    memcpy(host, v, hn);
    host[hn] = '\0';
    if (!domain_ok(host) || (colon != NULL && fr_parse_int64(colon + 1, 1, 65535, &port) != 0))
      return bad(l, s, "\"%s\" is not a domain name with an optional :port (lower-case labels: preview URLs are "
                       "<port>-<id>.<domain>)", v);
  }
  if ((c->ports_domain = strdup(v)) == NULL)
    return oom(l);
  return 0;
}

/* metrics = { prometheus_url = "http://prometheus:9090"; history_step_s = 10; } */
static int load_metrics(struct loader *l, const config_setting_t *root, struct fr_config *c) {
  const config_setting_t *g, *s;
  const char *v, *host;
  size_t n;
  int rc;

  c->history_step_s = 10;
  if ((rc = get_group(l, root, "metrics", &g)) < 0 || g == NULL)
    return rc;
  rc = check_keys(l, g, metrics_keys);
  rc = fr_cfg_first(rc, get_int(l, g, "history_step_s", 1, 3600, &c->history_step_s, NULL));
  if (rc < 0)
    return rc;
  if ((rc = get_string(l, g, "prometheus_url", 0, NULL, &v, &s)) < 0 || v == NULL)
    return rc;
  host = strncmp(v, "http://", 7) == 0 ? v + 7 : strncmp(v, "https://", 8) == 0 ? v + 8 : NULL;
  n = strlen(v);
  if (host == NULL || *host == '\0' || *host == '/' || n > 512 || strpbrk(v, " \t\r\n?#\"\\") != NULL)
    return bad(l, s, "\"%s\" is not an http:// or https:// URL of a Prometheus server "
                     "(\"http://prometheus:9090\", no query)", v);
  while (n > 0 && v[n - 1] == '/')
    n--; /* the API paths are appended: /api/v1/query */
  if ((c->prometheus_url = strndup(v, n)) == NULL)
    return oom(l);
  return 0;
}

static int load_e2b(struct loader *l, const config_setting_t *root, struct fr_config *c) {
  const config_setting_t *g, *list, *s;
  const char *name, *pool;
  int rc, i, n;

  if ((rc = get_group(l, root, "e2b", &g)) < 0 || g == NULL)
    return rc;
  if ((rc = check_keys(l, g, e2b_keys)) < 0 || (rc = get_list(l, g, "templates", &list)) < 0 || list == NULL)
    return rc;
  n = config_setting_length(list);
  c->e2b_templates = calloc(n > 0 ? (size_t)n : 1, sizeof(*c->e2b_templates));
  if (c->e2b_templates == NULL)
    return oom(l);
  for (i = 0; i < n; i++) {
    const config_setting_t *t = config_setting_get_elem(list, (unsigned)i);
    if (!config_setting_is_group(t))
      return bad(l, t, "a template is a group { name = \"code-interpreter-v1\"; pool = \"code-interpreter\"; }");
    if ((rc = check_keys(l, t, template_keys)) < 0 ||
        (rc = get_string(l, t, "name", 1, "the E2B template name the SDKs send", &name, &s)) < 0 ||
        (rc = get_string(l, t, "pool", 1, "the fedrouter pool that template stands for", &pool, &s)) < 0)
      return rc;
    if (!fr_label_value_valid(name) || *name == '\0')
      return bad(l, t, "\"%s\" is not a template name (up to 63 of [A-Za-z0-9._-])", name);
    if ((c->e2b_templates[i].name = strdup(name)) == NULL || (c->e2b_templates[i].pool = strdup(pool)) == NULL)
      return oom(l);
    c->ne2b_templates++;
  }
  return 0;
}

static int load_sandbox(struct loader *l, const config_setting_t *root, struct fr_config *c) {
  const config_setting_t *g, *s;
  const char *v;
  int rc, has_default, has_max;

  if ((rc = get_group(l, root, "sandbox", &g)) < 0 || g == NULL)
    return rc;
  /* Each key is checked (a check reports them all); the two lifetimes
   * are compared only when both are valid. */
  rc = check_keys(l, g, sandbox_keys);
  rc = fr_cfg_first(rc, get_int(l, g, "default_lifetime_s", 1, MAX_SECONDS, &c->default_lifetime_s,
                                &has_default));
  rc = fr_cfg_first(rc, get_int(l, g, "max_lifetime_s", 1, MAX_SECONDS, &c->max_lifetime_s, &has_max));
  /* Below 10 s a batch's renewals (every third of it) would come as often
   * as the reaper looks; above an hour a dead router's pods outlive most
   * sandboxes anyway. */
  rc = fr_cfg_first(rc, get_int(l, g, "batch_commit_timeout_s", 10, 3600, &c->batch_commit_timeout_s, NULL));
  /* 0 is the image's own user; Kubernetes takes any uid up to 2^31 - 1. */
  rc = fr_cfg_first(rc, get_int(l, g, "run_as_user", 0, 2147483647, &c->run_as_user, NULL));
  if (rc < 0)
    return rc;
  if ((rc = get_string(l, g, "gpu_resource", 0, NULL, &v, &s)) < 0)
    return rc;
  /* An extended resource name: a domain prefix, '/', a name ("nvidia.com/gpu",
   * "amd.com/gpu"); Kubernetes refuses unprefixed ones outside its own. */
  if (v != NULL) {
    if (strchr(v, '/') == NULL || !fr_label_key_valid(v) || strncmp(v, "kubernetes.io/", 14) == 0)
      return bad(l, s, "\"%s\" is not an extended resource name such as \"nvidia.com/gpu\"", v);
    free(c->gpu_resource);
    if ((c->gpu_resource = strdup(v)) == NULL)
      return oom(l);
  }
  if (c->default_lifetime_s > c->max_lifetime_s) {
    if (has_default)
      return bad(l, config_setting_get_member(g, "default_lifetime_s"),
                 "%lld is above max_lifetime_s (%lld%s)", (long long)c->default_lifetime_s,
                 (long long)c->max_lifetime_s, has_max ? "" : ", the default");
    return bad(l, config_setting_get_member(g, "max_lifetime_s"),
               "%lld is below default_lifetime_s (%lld, the default); lower default_lifetime_s too",
               (long long)c->max_lifetime_s, (long long)c->default_lifetime_s);
  }
  return 0;
}

static int load_limits(struct loader *l, const config_setting_t *root, struct fr_config *c) {
  const config_setting_t *g;
  int64_t body = (int64_t)c->max_body_bytes;
  int rc;

  if ((rc = get_group(l, root, "limits", &g)) < 0 || g == NULL)
    return rc;
  /* Each key is checked (a check reports them all). */
  rc = check_keys(l, g, limits_keys);
  rc = fr_cfg_first(rc, get_int(l, g, "max_batch", 1, MAX_BATCH_LIMIT, &c->max_batch, NULL));
  rc = fr_cfg_first(rc, get_int(l, g, "max_body_bytes", MIN_BODY_BYTES, MAX_BYTES, &body, NULL));
  rc = fr_cfg_first(rc, get_int(l, g, "max_exec_output_bytes", 1, MAX_BYTES, &c->max_exec_output_bytes, NULL));
  rc = fr_cfg_first(rc, get_int(l, g, "max_exec_timeout_s", 1, MAX_SECONDS, &c->max_exec_timeout_s, NULL));
  rc = fr_cfg_first(rc, get_int(l, g, "max_connections", 0, MAX_CONNECTIONS, &c->max_connections, NULL));
  rc = fr_cfg_first(rc, get_int(l, g, "max_connections_per_ip", 0, MAX_CONNECTIONS, &c->max_connections_per_ip,
                                NULL));
  rc = fr_cfg_first(rc, get_int(l, g, "exec_output_budget_bytes", MIN_BODY_BYTES, MAX_BYTES,
                                &c->exec_output_budget_bytes, NULL));
  if (rc < 0)
    return rc;
  c->max_body_bytes = (size_t)body;
  return 0;
}

/* Tenant names are stored as Kubernetes label values on the sandboxes:
 * [A-Za-z0-9._-]{1,63}, beginning and ending with a letter or digit. */
static int check_tenant_name(struct loader *l, const config_setting_t *s, const char *v) {
  size_t i, n = strlen(v);

  if (n > LABEL_VALUE_MAX)
    return bad(l, s, "\"%s\" is %zu characters long (at most %d: it becomes a Kubernetes label "
               "value)", v, n, LABEL_VALUE_MAX);
  for (i = 0; i < n; i++)
    if (!is_alnum(v[i]) && v[i] != '-' && v[i] != '_' && v[i] != '.')
      return bad(l, s, "\"%s\" may only hold letters, digits, '-', '_' and '.' (it becomes a "
                 "Kubernetes label value)", v);
  if (!is_alnum(v[0]) || !is_alnum(v[n - 1]))
    return bad(l, s, "\"%s\" must begin and end with a letter or digit (it becomes a Kubernetes "
               "label value)", v);
  return 0;
}

static int check_token_hash(struct loader *l, const config_setting_t *s, const char *v) {
  size_t i, n = strlen(v);
  int upper = 0;

  for (i = 0; i < n; i++) {
    char ch = v[i];
    if (ch >= 'A' && ch <= 'F')
      upper = 1;
    else if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
      break;
  }
  if (n != 64 || i != n)
    return bad(l, s, "expected the SHA-256 of the token as 64 hex characters, got %zu characters%s "
               "(make one with: printf %%s \"$TOKEN\" | sha256sum)", n,
               i != n ? " with non-hex ones" : "");
  if (upper)
    return bad(l, s, "write the hex digits in lowercase");
  return 0;
}

/* A Secret name is a DNS-1123 subdomain: at most 253 of [a-z0-9-.], dot-
 * separated labels that begin and end with a letter or digit. */
static int secret_name_valid(const char *v) {
  size_t i, n = strlen(v);

  if (n == 0 || n > 253)
    return 0;
  for (i = 0; i < n; i++) {
    int alnum = (v[i] >= 'a' && v[i] <= 'z') || (v[i] >= '0' && v[i] <= '9');
    int edge = i == 0 || i == n - 1 || v[i - 1] == '.' || v[i + 1] == '.';
    if (!alnum && (edge || (v[i] != '-' && v[i] != '.')))
      return 0;
  }
  return 1;
}

/* The tenant's Secret: its `secret` key, else "<tenant>-sandbox-secrets"
 * with the name lowercased and every character but a-z0-9 made '-'. */
static int tenant_secret(struct loader *l, const config_setting_t *g, struct fr_config_tenant *t) {
  const config_setting_t *s;
  const char *v;
  size_t i;
  int rc;

  if ((rc = get_string(l, g, "secret", 0, NULL, &v, &s)) < 0)
    return rc;
  if (v != NULL && !secret_name_valid(v))
    return bad(l, s, "\"%s\" is not a Kubernetes Secret name (at most 253 of a-z, 0-9, '-' and '.', "
               "beginning and ending with a letter or digit)", v);
  if (v != NULL) {
    t->secret = strdup(v);
    return t->secret != NULL ? 0 : oom(l);
  }
  if ((t->secret = malloc(strlen(t->name) + sizeof(FR_SECRET_SUFFIX))) == NULL)
    return oom(l);
  for (i = 0; t->name[i] != '\0'; i++) {
    char ch = t->name[i] >= 'A' && t->name[i] <= 'Z' ? (char)(t->name[i] - 'A' + 'a') : t->name[i];
    t->secret[i] = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ? ch : '-';
  }
  memcpy(t->secret + i, FR_SECRET_SUFFIX, sizeof(FR_SECRET_SUFFIX));
  return 0;
}

/* A token's name: [A-Za-z0-9._-], 1-63 (it shows in the access log and
 * in metrics labels). */
static int check_token_name(struct loader *l, const config_setting_t *s, const char *v) {
  size_t i, n = strlen(v);

  for (i = 0; i < n; i++)
    if (!is_alnum(v[i]) && v[i] != '-' && v[i] != '_' && v[i] != '.')
      return bad(l, s, "\"%s\": a token name is letters, digits, '-', '_' and '.'", v);
  if (n > LABEL_VALUE_MAX)
    return bad(l, s, "token name is %zu characters long (at most %d)", n, LABEL_VALUE_MAX);
  return 0;
}

/* Where token <hash> was first seen, for the "same token" error. */
struct token_seen {
  const char *hash;
  const char *tenant;
  const config_setting_t *s;
};

/* Adds token <sha> (named <name>, expiring <expires>) to <t>, unless it is
 * a duplicate of a token seen before (<seen>, <*nseen> of them, over every
 * tenant) or of a name of <t>'s. */
static int add_token(struct loader *l, struct fr_config_tenant *t, const config_setting_t *s, const char *name,
                     const char *sha, int64_t expires, struct token_seen *seen, size_t *nseen) {
  struct fr_config_token *k;
  size_t i;

  for (i = 0; i < *nseen; i++)
    if (strcmp(seen[i].hash, sha) == 0)
      return bad(l, s, "same token as %s\"%s\" (line %d); every token belongs to one tenant, once",
                 strcmp(seen[i].tenant, t->name) == 0 ? "another token of tenant " : "tenant ", seen[i].tenant,
                 fr_cfg_line(seen[i].s));
  for (i = 0; i < t->ntokens; i++)
    if (strcmp(t->tokens[i].name, name) == 0)
      return bad(l, s, "tenant %s has two tokens named \"%s\"; give each its own name", t->name, name);
  k = &t->tokens[t->ntokens];
  if ((k->name = strdup(name)) == NULL)
    return oom(l);
  memcpy(k->sha256, sha, 65);
  k->expires_at = expires;
  t->ntokens++;
  seen[*nseen].hash = k->sha256;
  seen[*nseen].tenant = t->name;
  seen[*nseen].s = s;
  (*nseen)++;
  return 0;
}

/* The tenant's tokens: `token_sha256` (the token "default", no expiry)
 * and/or the list `tokens` of { name; sha256; expires; }. At least one. */
static int load_tokens(struct loader *l, const config_setting_t *g, struct fr_config_tenant *t,
                       struct token_seen *seen, size_t *nseen) {
  const config_setting_t *list, *tok_s;
  const char *tok;
  int rc, i, n, first = 0;

  if ((rc = get_string(l, g, "token_sha256", 0, NULL, &tok, &tok_s)) < 0 ||
      (rc = get_list(l, g, "tokens", &list)) < 0)
    return rc;
  n = list != NULL ? config_setting_length(list) : 0;
  if (tok == NULL && n == 0)
    return missing(l, g, "token_sha256", "missing (every tenant needs a token: the SHA-256 hex of its bearer "
                   "token as token_sha256, or a list `tokens`)");
  if ((t->tokens = calloc((size_t)n + 1, sizeof(*t->tokens))) == NULL)
    return oom(l);
  if (tok != NULL && ((rc = check_token_hash(l, tok_s, tok)) < 0 ||
                      (rc = add_token(l, t, tok_s, "default", tok, 0, seen, nseen)) < 0)) {
    if (rc == -ENOMEM)
      return rc;
    first = rc;
  }
  for (i = 0; i < n; i++) {
    const config_setting_t *e = config_setting_get_elem(list, (unsigned)i), *name_s, *sha_s, *exp_s;
    const char *name, *sha, *exp;
    int64_t expires = 0;

    if ((rc = check_keys(l, e, token_keys)) < 0 ||
        (rc = get_string(l, e, "name", 1, "every token needs a name (it shows in the access log)", &name,
                         &name_s)) < 0 ||
        (rc = check_token_name(l, name_s, name)) < 0 ||
        (rc = get_string(l, e, "sha256", 1, "the SHA-256 hex of the bearer token", &sha, &sha_s)) < 0 ||
        (rc = check_token_hash(l, sha_s, sha)) < 0 ||
        (rc = get_string(l, e, "expires", 0, NULL, &exp, &exp_s)) < 0) {
      first = fr_cfg_first(first, rc);
      continue;
    }
    if (exp != NULL && (fr_time_parse_rfc3339(exp, &expires) != 0 || expires <= 0)) {
      first = fr_cfg_first(first, bad(l, exp_s, "\"%s\" is not a UTC time such as \"2026-07-01T00:00:00Z\"", exp));
      continue;
    }
    if ((rc = add_token(l, t, name_s, name, sha, expires, seen, nseen)) < 0) {
      if (rc == -ENOMEM)
        return rc;
      first = fr_cfg_first(first, rc);
    }
  }
  return first;
}

/* A tenant's number of cores or GiB (max_cpus, max_memory_gb), > 0, into
 * millicores or bytes (<unit> each). */
static int get_quota(struct loader *l, const config_setting_t *g, const char *key, double unit, int64_t *out) {
  const config_setting_t *s;
  double v = 0;
  int rc = fr_cfg_get_number(&l->cfg, g, key, &v, &s);

  if (rc < 0 || s == NULL)
    return rc;
  if (!isfinite(v) || v <= 0 || v * unit > 1e15)
    return bad(l, s, "must be a number above 0 (absent: no limit), got %g", v);
  *out = (int64_t)(v * unit + 0.5);
  if (*out < 1)
    *out = 1;
  return 0;
}

/* One of the tenant's `network` lists (<key>: allow_out, deny_out) into <e>. */
static int network_list(struct loader *l, const config_setting_t *g, const char *key, int deny,
                        struct fr_egress *e) {
  const config_setting_t *list = config_setting_get_member(g, key);
  char why[300];
  int i, n, rc;

  if (list == NULL)
    return 0;
  if (!config_setting_is_array(list) && !config_setting_is_list(list))
    return bad(l, list, "expected an array of IP addresses or CIDRs ([\"10.0.0.0/8\", ...]), got %s",
               type_name(config_setting_type(list)));
  n = config_setting_length(list);
  if (n > FR_EGRESS_MAX_CIDRS)
    return bad(l, list, "%d entries; at most %d", n, FR_EGRESS_MAX_CIDRS);
  for (i = 0; i < n; i++) {
    const config_setting_t *s = config_setting_get_elem(list, (unsigned)i);
    const char *v = config_setting_get_string(s);
    if (v == NULL)
      return bad(l, s, "expected a string (an IP address or CIDR), got %s", type_name(config_setting_type(s)));
    if ((rc = fr_egress_add(e, deny, v, why, sizeof(why))) != 0)
      return bad(l, s, "%s", why);
  }
  return 0;
}

/* The tenant's `network` group: the default egress of its sandboxes. */
static int tenant_network(struct loader *l, const config_setting_t *tenant, struct fr_config_tenant *t) {
  const config_setting_t *g;
  struct fr_egress *e;
  int rc;

  if ((rc = get_group(l, tenant, "network", &g)) < 0 || g == NULL)
    return rc;
  if ((rc = check_keys(l, g, network_keys)) < 0)
    return rc;
  if ((e = malloc(sizeof(*e))) == NULL)
    return oom(l);
  fr_egress_init(e);
  if ((rc = get_bool(l, g, "allow_internet", &e->allow_internet)) < 0 ||
      (rc = network_list(l, g, "allow_out", 0, e)) < 0 || (rc = network_list(l, g, "deny_out", 1, e)) < 0) {
    free(e);
    return rc;
  }
  fr_egress_normalize(e);
  t->network = e;
  return 0;
}

static int load_tenants(struct loader *l, const config_setting_t *root, struct fr_config *c) {
  const config_setting_t *list;
  struct token_seen *seen = NULL;
  size_t nseen = 0, cap = 0;
  int rc, i, n, first = 0;

  if ((rc = get_list(l, root, "tenants", &list)) < 0 || list == NULL)
    return rc;
  n = config_setting_length(list);
  if (n == 0)
    return 0;
  c->tenants = calloc((size_t)n, sizeof(*c->tenants));
  if (c->tenants == NULL)
    return oom(l);
  c->ntenants = (size_t)n; /* zeroed entries free cleanly on any error below */
  /* Room for every token of every tenant, to find duplicates across them. */
  for (i = 0; i < n; i++) {
    const config_setting_t *tl = config_setting_get_member(config_setting_get_elem(list, (unsigned)i), "tokens");
    cap += 1 + (tl != NULL && config_setting_is_list(tl) ? (size_t)config_setting_length(tl) : 0);
  }
  if ((seen = calloc(cap, sizeof(*seen))) == NULL)
    return oom(l);
  for (i = 0; i < n; i++) {
    const config_setting_t *g = config_setting_get_elem(list, (unsigned)i);
    const config_setting_t *name_s;
    struct fr_config_tenant *t = &c->tenants[i];
    const char *name;
    int j;

    t->max_requests_in_flight = FR_DEFAULT_TENANT_REQUESTS_IN_FLIGHT;
    t->max_concurrent_execs = FR_DEFAULT_TENANT_CONCURRENT_EXECS;
    t->max_pool_replicas = DEFAULT_TENANT_POOL_REPLICAS;
    t->max_file_bytes = DEFAULT_TENANT_FILE_BYTES;
    t->max_queued_sandboxes = FR_DEFAULT_TENANT_QUEUED_SANDBOXES;
    t->max_queued_execs = FR_DEFAULT_TENANT_QUEUED_EXECS;
    t->weight = 1;
    t->max_paused = FR_DEFAULT_TENANT_PAUSED;
    t->max_paused_s = FR_DEFAULT_TENANT_PAUSED_S;
    t->max_workspace_bytes = FR_DEFAULT_TENANT_WORKSPACE_BYTES;

    first = fr_cfg_first(first, check_keys(l, g, tenant_keys));
    if ((rc = get_string(l, g, "name", 1, "every tenant needs a name", &name, &name_s)) < 0 ||
        (rc = check_tenant_name(l, name_s, name)) < 0 ||
        (rc = get_int(l, g, "max_sandboxes", 0, MAX_TENANT_SANDBOXES, &t->max_sandboxes,
                      NULL)) < 0 ||
        (rc = get_int(l, g, "max_requests_in_flight", 1, MAX_TENANT_SANDBOXES, &t->max_requests_in_flight,
                      NULL)) < 0 ||
        (rc = get_int(l, g, "max_concurrent_execs", 1, MAX_TENANT_SANDBOXES, &t->max_concurrent_execs,
                      NULL)) < 0 ||
        (rc = get_int(l, g, "max_pool_replicas", 0, MAX_TENANT_SANDBOXES, &t->max_pool_replicas,
                      NULL)) < 0 ||
        (rc = get_int(l, g, "max_file_bytes", 1, INT64_MAX, &t->max_file_bytes, NULL)) < 0 ||
        (rc = get_quota(l, g, "max_cpus", 1000.0, &t->max_cpu_m)) < 0 ||
        (rc = get_quota(l, g, "max_memory_gb", 1073741824.0, &t->max_mem_b)) < 0 ||
        (rc = get_int(l, g, "max_gpus", 0, MAX_TENANT_SANDBOXES, &t->max_gpus, NULL)) < 0 ||
        (rc = get_int(l, g, "weight", 1, MAX_WEIGHT, &t->weight, NULL)) < 0 ||
        (rc = get_int(l, g, "max_queued_sandboxes", 0, MAX_TENANT_SANDBOXES, &t->max_queued_sandboxes,
                      NULL)) < 0 ||
        (rc = get_int(l, g, "max_queued_execs", 0, MAX_TENANT_SANDBOXES, &t->max_queued_execs, NULL)) < 0 ||
        (rc = get_int(l, g, "max_paused", 0, MAX_TENANT_SANDBOXES, &t->max_paused, NULL)) < 0 ||
        (rc = get_int(l, g, "max_paused_s", 1, MAX_SECONDS, &t->max_paused_s, NULL)) < 0 ||
        (rc = get_int(l, g, "max_workspace_bytes", 0, INT64_MAX, &t->max_workspace_bytes, NULL)) < 0 ||
        (rc = get_int(l, g, "max_lifetime_s", 1, MAX_SECONDS, &t->max_lifetime_s, NULL)) < 0 ||
        (rc = get_bool(l, g, "admin", &t->admin)) < 0) {
      first = fr_cfg_first(first, rc); /* and on to the next tenant */
      continue;
    }
    for (j = 0, rc = 0; j < i && rc == 0; j++) {
      const config_setting_t *prev = config_setting_get_elem(list, (unsigned)j);
      if (c->tenants[j].name == NULL) /* it had an error */
        continue;
      if (strcmp(c->tenants[j].name, name) == 0)
        rc = bad(l, name_s, "duplicate tenant name \"%s\" (first defined at line %u)", name,
                 config_setting_source_line(config_setting_get_member(prev, "name")));
    }
    if (rc < 0) {
      first = fr_cfg_first(first, rc);
      continue;
    }
    t->name = strdup(name);
    if (t->name == NULL) {
      free(seen);
      return oom(l);
    }
    if ((rc = load_tokens(l, g, t, seen, &nseen)) < 0) {
      if (rc == -ENOMEM) {
        free(seen);
        return rc;
      }
      first = fr_cfg_first(first, rc);
    }
    if ((rc = tenant_secret(l, g, t)) < 0 || (rc = tenant_network(l, g, t)) < 0) {
      if (rc == -ENOMEM) {
        free(seen);
        return rc;
      }
      first = fr_cfg_first(first, rc);
      continue;
    }
    /* Each tenant reads its own Secret: one naming another's (or two
     * names that map to the same default) would share it. */
    for (j = 0; j < i; j++)
      if (c->tenants[j].secret != NULL && strcmp(c->tenants[j].secret, t->secret) == 0) {
        first = fr_cfg_first(first, bad(l, config_setting_get_member(g, "secret") ? config_setting_get_member(g, "secret")
                                                                                 : name_s,
                                        "tenants \"%s\" and \"%s\" would both read Secret \"%s\"; every tenant "
                                        "needs its own (set `secret` on one of them)",
                                        c->tenants[j].name, t->name, t->secret));
        break;
      }
  }
  free(seen);
  return first;
}

static int load_cost(struct loader *l, const config_setting_t *cluster,
                     struct fr_config_cost *cost) {
  const config_setting_t *g;
  int64_t per_node = 0;
  int rc, has_core, has_gib, has_gpu, has_node, has_per_node;

  if ((rc = get_group(l, cluster, "cost", &g)) < 0 || g == NULL)
    return rc;
  if ((rc = check_keys(l, g, cost_keys)) < 0 ||
      (rc = get_amount(l, g, "per_core_hour", &cost->per_core_hour, &has_core)) < 0 ||
      (rc = get_amount(l, g, "per_gib_hour", &cost->per_gib_hour, &has_gib)) < 0 ||
      (rc = get_amount(l, g, "per_gpu_hour", &cost->per_gpu_hour, &has_gpu)) < 0 ||
      (rc = get_amount(l, g, "node_hour", &cost->node_hour, &has_node)) < 0 ||
      (rc = get_int(l, g, "sandboxes_per_node", 1, MAX_SANDBOXES_PER_NODE, &per_node,
                    &has_per_node)) < 0)
    return rc;
  if ((has_core || has_gib || has_gpu) && (has_node || has_per_node))
    return bad(l, config_setting_get_member(g, has_node ? "node_hour" : "sandboxes_per_node"),
               "give either per_core_hour/per_gib_hour/per_gpu_hour or node_hour + sandboxes_per_node, "
               "not both");
  if (has_node && !has_per_node)
    return missing(l, g, "sandboxes_per_node",
                   "missing (node_hour is shared by this many sandboxes)");
  if (has_per_node && !has_node)
    return missing(l, g, "node_hour", "missing (sandboxes_per_node divides this cost)");
  cost->sandboxes_per_node = per_node;
  return 0;
}

/* The hosted reference prices; each key absent keeps its default. */
static int load_hosted(struct loader *l, const config_setting_t *root, struct fr_config *c) {
  const config_setting_t *g;
  int rc, present;

  if ((rc = get_group(l, root, "hosted", &g)) < 0 || g == NULL)
    return rc;
  if ((rc = check_keys(l, g, hosted_keys)) < 0 ||
      (rc = get_amount(l, g, "per_core_second", &c->hosted.per_core_second, &present)) < 0 ||
      (rc = get_amount(l, g, "per_gib_second", &c->hosted.per_gib_second, &present)) < 0)
    return rc;
  return 0;
}

/* <name>'s code: the first four bytes of its SHA-256, each as a base-36
 * digit (mod 36). */
static void cluster_code(const char *name, char out[5]) {
  static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  char hex[65];
  int k;

  fr_sha256_hex(name, strlen(name), hex);
  for (k = 0; k < 4; k++) {
    char byte[3] = {hex[2 * k], hex[2 * k + 1], '\0'};
    out[k] = digits[strtoul(byte, NULL, 16) % 36];
  }
  out[4] = '\0';
}

/* Cluster names are part of sandbox ids: [a-z0-9-]{1,32}. */
static int check_cluster_name(struct loader *l, const config_setting_t *s, const char *v) {
  size_t i, n = strlen(v);

  if (n > CLUSTER_NAME_MAX)
    return bad(l, s, "\"%s\" is %zu characters long (at most %d: it is part of sandbox ids)", v,
               n, CLUSTER_NAME_MAX);
  for (i = 0; i < n; i++)
    if (!is_lower_alnum(v[i]) && v[i] != '-')
      return bad(l, s, "\"%s\" may only hold lowercase letters, digits and '-' (it is part of "
                 "sandbox ids)", v);
  return 0;
}

/* Namespaces are DNS-1123 labels: [a-z0-9-]{1,63}, alphanumeric at both ends. */
static int check_namespace(struct loader *l, const config_setting_t *s, const char *v) {
  size_t i, n = strlen(v);

  for (i = 0; i < n; i++)
    if (!is_lower_alnum(v[i]) && v[i] != '-')
      break;
  if (i != n || n > 63 || !is_lower_alnum(v[0]) || !is_lower_alnum(v[n - 1]))
    return bad(l, s, "\"%s\" is not a valid Kubernetes namespace (lowercase letters, digits and "
               "'-', at most 63, alphanumeric at both ends)", v);
  return 0;
}

static int load_clusters(struct loader *l, const config_setting_t *root, struct fr_config *c) {
  const config_setting_t *list;
  int rc, i, n, first = 0;

  if ((rc = get_list(l, root, "clusters", &list)) < 0)
    return rc;
  if (list == NULL)
    return missing(l, root, "clusters", "missing (at least one cluster is required)");
  n = config_setting_length(list);
  if (n == 0)
    return bad(l, list, "empty (at least one cluster is required)");
  c->clusters = calloc((size_t)n, sizeof(*c->clusters));
  if (c->clusters == NULL)
    return oom(l);
  c->nclusters = (size_t)n;
  for (i = 0; i < n; i++) {
    const config_setting_t *g = config_setting_get_elem(list, (unsigned)i);
    const config_setting_t *name_s, *region_s, *ns_s;
    struct fr_config_cluster *cl = &c->clusters[i];
    const char *name, *region, *context, *ns;
    int j;

    first = fr_cfg_first(first, check_keys(l, g, cluster_keys));
    if ((rc = get_string(l, g, "name", 1, "every cluster needs a name", &name, &name_s)) < 0 ||
        (rc = check_cluster_name(l, name_s, name)) < 0)
      goto next;
    for (j = 0; j < i && rc == 0; j++)
      if (c->clusters[j].name != NULL && strcmp(c->clusters[j].name, name) == 0)
        rc = bad(l, name_s, "duplicate cluster name \"%s\" (first defined at line %u)", name,
                   config_setting_source_line(config_setting_get_member(
                       config_setting_get_elem(list, (unsigned)j), "name")));
    if (rc < 0)
      goto next;
    /* Short sandbox ids (E2B, preview URLs) end in this code and lead back
     * to the cluster by it: two clusters may not share one. */
    cluster_code(name, cl->code);
    for (j = 0; j < i && rc == 0; j++)
      if (strcmp(c->clusters[j].code, cl->code) == 0)
        rc = bad(l, name_s, "cluster names \"%s\" and \"%s\" have the same short-id code \"%s\" (from their "
                 "SHA-256): rename one", c->clusters[j].name, name, cl->code);
    if (rc < 0)
      goto next;
    if ((cl->name = strdup(name)) == NULL)
      return oom(l);
    if ((rc = get_string(l, g, "region", 1, "every cluster needs a region", &region,
                         &region_s)) < 0 ||
        (rc = check_region(l, region_s, region)) < 0)
      goto next;
    if ((cl->region = strdup(region)) == NULL)
      return oom(l);
    /* The cluster the router runs in may be reached with the pod's own
     * service account (client-go's in-cluster config) instead of a
     * kubeconfig: one cluster at most, as there is only one pod. */
    if ((rc = get_bool(l, g, "in_cluster", &cl->in_cluster)) < 0)
      goto next;
    if (cl->in_cluster) {
      const config_setting_t *ic = config_setting_get_member(g, "in_cluster");
      for (j = 0; j < i && rc == 0; j++)
        if (c->clusters[j].in_cluster)
          rc = bad(l, ic, "cluster \"%s\" is in_cluster already: the router's pod is in one cluster only",
                   c->clusters[j].name);
      if (rc == 0 && (config_setting_get_member(g, "kubeconfig") != NULL ||
                      config_setting_get_member(g, "context") != NULL))
        rc = bad(l, ic, "in_cluster = true reaches the cluster with the pod's service account: "
                 "drop kubeconfig and context");
      if (rc < 0)
        goto next;
    } else {
      if ((rc = get_path(l, g, "kubeconfig", 1, "the kubeconfig file to reach this cluster with (or "
                         "in_cluster = true for the cluster the router runs in)", &cl->kubeconfig, NULL)) < 0 ||
          (rc = get_string(l, g, "context", 0, "a context of the kubeconfig", &context, NULL)) < 0)
        goto next;
      if (context != NULL && (cl->context = strdup(context)) == NULL)
        return oom(l);
    }
    if ((rc = get_string(l, g, "namespace", 0, "the namespace for sandboxes", &ns, &ns_s)) < 0 ||
        (ns != NULL && (rc = check_namespace(l, ns_s, ns)) < 0))
      goto next;
    if ((cl->ns = strdup(ns != NULL ? ns : DEFAULT_NAMESPACE)) == NULL)
      return oom(l);
    rc = load_cost(l, g, &cl->cost);
    rc = fr_cfg_first(rc, load_gateway(l, g, cl));
  next:
    first = fr_cfg_first(first, rc); /* and on to the next cluster */
  }
  return first;
}

/* The create queue and the exec wait. */
static int load_queue(struct loader *l, const config_setting_t *root, struct fr_config *c) {
  const config_setting_t *g;
  int rc;

  if ((rc = get_group(l, root, "queue", &g)) < 0 || g == NULL)
    return rc;
  rc = check_keys(l, g, queue_keys);
  rc = fr_cfg_first(rc, get_int(l, g, "max_wait_s", 0, MAX_QUEUE_WAIT_S, &c->queue_max_wait_s, NULL));
  rc = fr_cfg_first(rc, get_int(l, g, "max_sandboxes", 0, MAX_QUEUE_SANDBOXES, &c->queue_max_sandboxes, NULL));
  rc = fr_cfg_first(rc, get_int(l, g, "exec_wait_s", 0, MAX_QUEUE_WAIT_S, &c->queue_exec_wait_s, NULL));
  rc = fr_cfg_first(rc, get_int(l, g, "e2b_wait_s", 0, MAX_QUEUE_WAIT_S, &c->queue_e2b_wait_s, NULL));
  if (rc == 0 && c->queue_e2b_wait_s > c->queue_max_wait_s)
    rc = bad(l, config_setting_get_member(g, "e2b_wait_s"), "%lld is above max_wait_s (%lld)",
             (long long)c->queue_e2b_wait_s, (long long)c->queue_max_wait_s);
  return rc;
}

static int load_root(struct loader *l, const config_setting_t *root, struct fr_config *c) {
  const config_setting_t *s;
  const char *v;
  int rc;

  /* Every part is checked even after an error in another, so that a check
   * reports them all; the first error is the one returned. */
  int first = check_keys(l, root, root_keys);

  if ((rc = get_string(l, root, "listen", 1, "HOST:PORT to serve on, e.g. \"127.0.0.1:8080\"",
                       &v, &s)) < 0 ||
      (rc = parse_listen(l, s, v, &c->listen_host, &c->listen_port)) < 0)
    first = fr_cfg_first(first, rc);
  c->health_port = -1;
  if ((rc = get_string(l, root, "health_listen", 0, "HOST:PORT for /healthz, /readyz and /metrics alone, "
                       "e.g. \"0.0.0.0:9090\"", &v, &s)) < 0 ||
      (v != NULL && (rc = parse_listen(l, s, v, &c->health_host, &c->health_port)) < 0))
    first = fr_cfg_first(first, rc);
  else if (v != NULL && c->health_port > 0 && c->health_port == c->listen_port && c->listen_host != NULL &&
           strcmp(c->health_host, c->listen_host) == 0)
    first = fr_cfg_first(first, bad(l, s, "\"%s\" is the listen address too: give the health listener a port of "
                                           "its own", v));
  first = fr_cfg_first(first, load_tls(l, root, c));
  first = fr_cfg_first(first, load_agent(l, root, c));
  if ((rc = get_string(l, root, "region", 1, "the region this router runs in, e.g. \"us\"", &v,
                       &s)) < 0 ||
      (rc = check_region(l, s, v)) < 0)
    first = fr_cfg_first(first, rc);
  else if ((c->region = strdup(v)) == NULL)
    return oom(l);
  /* Optional: /metrics then wants this token (Prometheus' bearer_token). */
  if ((rc = get_string(l, root, "metrics_token_sha256", 0, NULL, &v, &s)) < 0 ||
      (s != NULL && (rc = check_token_hash(l, s, v)) < 0))
    first = fr_cfg_first(first, rc);
  else if (s != NULL)
    snprintf(c->metrics_token_sha256, sizeof(c->metrics_token_sha256), "%s", v);
  first = fr_cfg_first(first, get_int(l, root, "shutdown_delay_ms", 0, MAX_SHUTDOWN_DELAY_MS, &c->shutdown_delay_ms, NULL));
  first = fr_cfg_first(first, get_path(l, root, "policy", 0, "the placement policy file", &c->policy, NULL));
  first = fr_cfg_first(first, load_sandbox(l, root, c));
  first = fr_cfg_first(first, load_limits(l, root, c));
  first = fr_cfg_first(first, load_queue(l, root, c));
  first = fr_cfg_first(first, load_tenants(l, root, c));
  first = fr_cfg_first(first, load_clusters(l, root, c));
  first = fr_cfg_first(first, load_hosted(l, root, c));
  first = fr_cfg_first(first, load_ports(l, root, c));
  first = fr_cfg_first(first, load_metrics(l, root, c));
  first = fr_cfg_first(first, load_e2b(l, root, c));
  return first;
}

/* ---- the file ---- */

/* Checks that <path> is a readable regular file, and fills <l->dir> (the
 * realpath of its directory) and <*source> (that + the file's name). */
static int locate(struct loader *l, const char *path, char **source) {
  const char *slash = strrchr(path, '/');
  const char *base = slash != NULL ? slash + 1 : path;
  char *dir = NULL;
  struct stat st;
  FILE *f;
  size_t dlen, blen;
  int rc;

  f = fopen(path, "r");
  if (f == NULL) {
    if (errno == ENOMEM)
      return oom(l);
    rc = errno != 0 ? -errno : -EIO;
    snprintf(l->err->msg, sizeof(l->err->msg), "cannot open the config file: %s", strerror(-rc));
    return rc;
  }
  rc = fstat(fileno(f), &st);
  fclose(f);
  if (rc != 0 || !S_ISREG(st.st_mode)) {
    snprintf(l->err->msg, sizeof(l->err->msg), "not a regular file");
    return -EINVAL;
  }
  if (slash == NULL)
    dir = strdup(".");
  else if (slash == path)
    dir = strdup("/");
  else
    dir = strndup(path, (size_t)(slash - path));
  if (dir == NULL)
    return oom(l);
  l->dir = realpath(dir, NULL);
  l->cfg.dir = l->dir;
  if (l->dir == NULL) {
    rc = errno == ENOMEM || errno == 0 ? oom(l) : -errno;
    if (rc != -ENOMEM)
      snprintf(l->err->msg, sizeof(l->err->msg), "cannot resolve the directory \"%s\": %s", dir,
               strerror(-rc));
    free(dir);
    return rc;
  }
  free(dir);
  dlen = strlen(l->dir);
  blen = strlen(base);
  *source = malloc(dlen + blen + 2);
  if (*source == NULL)
    return oom(l);
  memcpy(*source, l->dir, dlen);
  if (dlen > 0 && l->dir[dlen - 1] == '/')
    dlen--;
  (*source)[dlen] = '/';
  memcpy(*source + dlen + 1, base, blen + 1);
  return 0;
}

/* ---- what was read ---- */

/* libconfig's own bound on nested @include files. */
#define INCLUDE_DEPTH_MAX 10

/* Reads <path> whole into a new buffer (*<len> bytes); NULL when it cannot. */
static char *read_whole(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  size_t cap = 0, n = 0, got;

  if (f == NULL)
    return NULL;
  do {
    if (n == cap) {
      char *nb = realloc(buf, cap ? cap * 2 : 4096);
      if (nb == NULL) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = nb;
      cap = cap ? cap * 2 : 4096;
    }
    got = fread(buf + n, 1, cap - n, f);
    n += got;
  } while (got > 0);
  fclose(f);
  *len = n;
  return buf;
}

/* Adds <path> (taken) and the files it @includes to c->files, and each
 * file's SHA-256 to <hashes>. A file that cannot be read is left out:
 * libconfig reports it. */
static int collect_file(struct loader *l, struct fr_config *c, char *path, struct fr_buf *hashes, int depth) {
  size_t len = 0, i;
  char *text, **nf, hash[65];
  int rc = 0;

  for (i = 0; i < c->nfiles; i++)
    if (strcmp(c->files[i], path) == 0) {
      free(path);
      return 0;
    }
  if ((nf = realloc(c->files, (c->nfiles + 1) * sizeof(*nf))) == NULL) {
    free(path);
    return -ENOMEM;
  }
  c->files = nf;
  c->files[c->nfiles++] = path;
  if ((text = read_whole(path, &len)) == NULL)
    return 0;
  fr_sha256_hex(text, len, hash);
  if (fr_buf_puts(hashes, hash) != 0)
    rc = -ENOMEM;
  /* A config is text: libconfig's scanner would exit the process on a NUL. */
  if (l->nul_file == NULL && memchr(text, '\0', len) != NULL && (l->nul_file = strdup(path)) == NULL)
    rc = -ENOMEM;
  /* Lines `@include "FILE"` (leading blanks allowed), as libconfig reads them. */
  for (i = 0; rc == 0 && depth < INCLUDE_DEPTH_MAX && i < len;) {
    size_t e = i, q;
    while (e < len && text[e] != '\n')
      e++;
    q = i;
    while (q < e && (text[q] == ' ' || text[q] == '\t'))
      q++;
    if (e - q > 8 && memcmp(text + q, "@include", 8) == 0) {
      char *open = memchr(text + q + 8, '"', e - q - 8), *close;
      if (open != NULL && (close = memchr(open + 1, '"', (size_t)(text + e - open - 1))) != NULL) {
        char *rel = strndup(open + 1, (size_t)(close - open - 1)), *abs;
        abs = rel != NULL ? resolve_path(l->dir, rel) : NULL;
        free(rel);
        rc = abs != NULL ? collect_file(l, c, abs, hashes, depth + 1) : -ENOMEM;
      }
    }
    i = e + 1;
  }
  free(text);
  return rc;
}

/* c->files and c->version, read before libconfig parses the files: should
 * a file change in between, the version is the older one and the next
 * look at the files loads again. */
static int collect_files(struct loader *l, struct fr_config *c) {
  struct fr_buf hashes;
  char *main_path = strdup(c->source);
  int rc;

  if (main_path == NULL)
    return oom(l);
  fr_buf_init(&hashes);
  rc = collect_file(l, c, main_path, &hashes, 0);
  if (rc == 0)
    fr_sha256_hex(hashes.data != NULL ? hashes.data : "", hashes.len, c->version);
  fr_buf_free(&hashes);
  return rc == 0 ? 0 : oom(l);
}

/* ---- a reload: what only a restart changes ---- */

static int str_same(const char *a, const char *b) {
  return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static int bytes_same(const unsigned char *a, size_t alen, const unsigned char *b, size_t blen) {
  return alen == blen && (alen == 0 || (a != NULL && b != NULL && memcmp(a, b, alen) == 0));
}

/* Refuses the reload for the restart-only setting <path> (a libconfig
 * path, "limits.max_body_bytes"): at its line in the new file, else at its
 * group's, else the top. */
static int restart_only(struct loader *l, const config_setting_t *root, const char *path, const char *what) {
  char group[128];
  const config_setting_t *s = config_setting_lookup((config_setting_t *)root, path), *at = s;
  const char *dot = strrchr(path, '.');

  if (at == NULL && dot != NULL) {
    snprintf(group, sizeof(group), "%.*s", (int)(dot - path), path);
    at = config_setting_lookup((config_setting_t *)root, group);
  }
  if (s != NULL)
    return bad(l, s, "%s changed, and it takes effect only on a restart: the reload is refused and nothing "
               "changed (put it back, or restart the router)", what);
  return bad(l, at != NULL ? at : root, "%s (%s) changed, and it takes effect only on a restart: the reload is "
             "refused and nothing changed (put it back, or restart the router)", path, what);
}

static int check_restart_only(struct loader *l, const config_setting_t *root, const struct fr_config *c,
                              const struct fr_config *o) {
  size_t i;
  int first = 0;

#define RESTART_IF(cond, path, what) \
  if (cond)                          \
    first = fr_cfg_first(first, restart_only(l, root, path, what));
  RESTART_IF(!str_same(c->listen_host, o->listen_host) || c->listen_port != o->listen_port, "listen",
             "the listen address");
  RESTART_IF(!str_same(c->health_host, o->health_host) || c->health_port != o->health_port, "health_listen",
             "the health listener");
  RESTART_IF(!str_same(c->tls_cert, o->tls_cert) || !str_same(c->tls_key, o->tls_key), "tls", "tls");
  RESTART_IF(!str_same(c->agent_image, o->agent_image) || c->agent_port != o->agent_port ||
                 !bytes_same(c->agent_key, c->agent_key_len, o->agent_key, o->agent_key_len) ||
                 !bytes_same(c->agent_prev_key, c->agent_prev_key_len, o->agent_prev_key, o->agent_prev_key_len),
             "agent", "the agent group (image, port or a key)");
  RESTART_IF(!str_same(c->policy, o->policy), "policy", "the policy file's path (its content reloads by itself)");
  RESTART_IF(!str_same(c->gpu_resource, o->gpu_resource), "sandbox.gpu_resource", "the GPU resource name");
  RESTART_IF(c->batch_commit_timeout_s != o->batch_commit_timeout_s, "sandbox.batch_commit_timeout_s",
             "the batch commit timeout");
  RESTART_IF(c->run_as_user != o->run_as_user, "sandbox.run_as_user", "the sandboxes' uid");
  RESTART_IF(c->max_body_bytes != o->max_body_bytes, "limits.max_body_bytes", "the body limit");
  RESTART_IF(c->max_connections != o->max_connections, "limits.max_connections", "the connection limit");
  RESTART_IF(c->max_connections_per_ip != o->max_connections_per_ip, "limits.max_connections_per_ip",
             "the per-address connection limit");
  if (c->nclusters != o->nclusters) {
    first = fr_cfg_first(first, restart_only(l, root, "clusters", "the list of clusters"));
  } else {
    for (i = 0; i < c->nclusters; i++) {
      const struct fr_config_cluster *a = &c->clusters[i], *b = &o->clusters[i];
      char path[64];
      snprintf(path, sizeof(path), "clusters.[%zu]", i);
      RESTART_IF(!str_same(a->name, b->name) || !str_same(a->region, b->region) ||
                     !str_same(a->kubeconfig, b->kubeconfig) || !str_same(a->context, b->context) ||
                     a->in_cluster != b->in_cluster || !str_same(a->ns, b->ns),
                 path, "a cluster's name, region, kubeconfig, context, in_cluster or namespace (its cost reloads)");
      snprintf(path, sizeof(path), "clusters.[%zu].gateway", i);
      {
        /* The key file's content is not compared: the adapter re-reads it
         * itself when it changes (docs/gateway.md, "Rotating the key"). */
        int same = a->gateway_nurls == b->gateway_nurls && str_same(a->gateway_ca_file, b->gateway_ca_file) &&
                   str_same(a->gateway_key_file, b->gateway_key_file);
        size_t u;
        for (u = 0; same && u < a->gateway_nurls; u++)
          same = str_same(a->gateway_urls[u], b->gateway_urls[u]);
        RESTART_IF(!same, path, "a cluster's gateway (url or urls, ca_file or key_file's path)");
      }
    }
  }
#undef RESTART_IF
  return first;
}

static void config_free(struct fr_config *c) {
  size_t i;

  if (c == NULL)
    return;
  for (i = 0; i < c->ntenants; i++) {
    size_t k;
    for (k = 0; k < c->tenants[i].ntokens; k++)
      free(c->tenants[i].tokens[k].name);
    free(c->tenants[i].tokens);
    free(c->tenants[i].name);
    free(c->tenants[i].secret);
    free(c->tenants[i].network);
  }
  for (i = 0; i < c->nfiles; i++)
    free(c->files[i]);
  free(c->files);
  free(c->tenants);
  for (i = 0; i < c->nclusters; i++) {
    size_t k;
    free(c->clusters[i].name);
    free(c->clusters[i].region);
    free(c->clusters[i].kubeconfig);
    free(c->clusters[i].context);
    free(c->clusters[i].ns);
    for (k = 0; k < c->clusters[i].gateway_nurls; k++)
      free(c->clusters[i].gateway_urls[k]);
    free(c->clusters[i].gateway_ca_file);
    free(c->clusters[i].gateway_key_file);
    if (c->clusters[i].gateway_key != NULL)
      explicit_bzero(c->clusters[i].gateway_key, c->clusters[i].gateway_key_len);
    free(c->clusters[i].gateway_key);
  }
  free(c->clusters);
  free(c->source);
  free(c->listen_host);
  free(c->health_host);
  free(c->tls_cert);
  free(c->tls_key);
  free(c->region);
  free(c->policy);
  free(c->agent_image);
  free(c->gpu_resource);
  free(c->ports_domain);
  free(c->prometheus_url);
  for (size_t t = 0; t < c->ne2b_templates; t++) {
    free(c->e2b_templates[t].name);
    free(c->e2b_templates[t].pool);
  }
  free(c->e2b_templates);
  if (c->agent_key != NULL)
    memset(c->agent_key, 0, c->agent_key_len); /* a secret: not left in freed memory */
  free(c->agent_key);
  if (c->agent_prev_key != NULL)
    memset(c->agent_prev_key, 0, c->agent_prev_key_len);
  free(c->agent_prev_key);
  free(c);
}

static int load(const char *path, const struct fr_config *running, struct fr_config **out,
                struct fr_config_error *err, fr_cfg_error_cb on_error, void *arg) {
  struct fr_config_error scratch;
  struct loader l = {0};
  struct fr_config *c = NULL;
  config_t cf;
  int cf_inited = 0;
  int rc;

  if (err == NULL)
    err = &scratch;
  memset(err, 0, sizeof(*err));
  l.err = err;
  l.path = path != NULL ? path : "";
  l.cfg = FR_CFGREAD_FOR(err, l.path);
  l.cfg.on_error = on_error;
  l.cfg.on_error_arg = arg;
  snprintf(err->file, sizeof(err->file), "%s", l.path);
  if (out == NULL || path == NULL || path[0] == '\0') {
    snprintf(err->msg, sizeof(err->msg), "no config file given");
    rc = -EINVAL;
    goto fail;
  }
  *out = NULL;

  c = calloc(1, sizeof(*c));
  if (c == NULL) {
    rc = oom(&l);
    goto fail;
  }
  c->refs = 1;
  c->default_lifetime_s = DEFAULT_LIFETIME_S;
  c->max_lifetime_s = DEFAULT_MAX_LIFETIME_S;
  if ((c->gpu_resource = strdup("nvidia.com/gpu")) == NULL) {
    rc = oom(&l);
    goto fail;
  }
  c->batch_commit_timeout_s = DEFAULT_BATCH_COMMIT_TIMEOUT_S;
  c->max_batch = DEFAULT_MAX_BATCH;
  c->max_body_bytes = DEFAULT_MAX_BODY_BYTES;
  c->max_exec_output_bytes = DEFAULT_MAX_EXEC_OUTPUT_BYTES;
  c->max_exec_timeout_s = DEFAULT_MAX_EXEC_TIMEOUT_S;
  c->max_connections_per_ip = DEFAULT_MAX_CONNECTIONS_PER_IP;
  c->shutdown_delay_ms = DEFAULT_SHUTDOWN_DELAY_MS;
  c->exec_output_budget_bytes = DEFAULT_EXEC_OUTPUT_BUDGET_BYTES;
  c->queue_max_wait_s = DEFAULT_QUEUE_MAX_WAIT_S;
  c->queue_max_sandboxes = DEFAULT_QUEUE_MAX_SANDBOXES;
  c->queue_exec_wait_s = DEFAULT_QUEUE_EXEC_WAIT_S;
  c->hosted.per_core_second = DEFAULT_HOSTED_PER_CORE_SECOND;
  c->hosted.per_gib_second = DEFAULT_HOSTED_PER_GIB_SECOND;

  if ((rc = locate(&l, path, &c->source)) < 0 || (rc = collect_files(&l, c)) < 0)
    goto fail;
  if (l.nul_file != NULL) {
    fr_cfg_set_error_file(&l.cfg, l.nul_file);
    err->line = 0;
    snprintf(err->msg, sizeof(err->msg), "parse error: the file holds a NUL byte (a config file is text)");
    rc = -EINVAL;
    goto fail;
  }

  config_init(&cf);
  cf_inited = 1;
  /* "@include" directives resolve against the config's directory too. */
  config_set_include_dir(&cf, l.dir);
  if (config_read_file(&cf, path) != CONFIG_TRUE) {
    fr_cfg_set_error_file(&l.cfg, config_error_file(&cf));
    err->line = config_error_line(&cf);
    snprintf(err->msg, sizeof(err->msg), "%s%s",
             config_error_type(&cf) == CONFIG_ERR_FILE_IO ? "cannot read: " : "parse error: ",
             config_error_text(&cf) != NULL ? config_error_text(&cf) : "unknown");
    rc = config_error_type(&cf) == CONFIG_ERR_FILE_IO ? -EIO : -EINVAL;
    goto fail;
  }
  if ((rc = load_root(&l, config_root_setting(&cf), c)) < 0 ||
      (running != NULL && (rc = check_restart_only(&l, config_root_setting(&cf), c, running)) < 0))
    goto fail;

  config_destroy(&cf);
  free(l.dir);
  free(l.nul_file);
  *out = c;
  return 0;

fail:
  /* Errors before the tree (an unreadable file, a syntax error: libconfig
   * stops there) and out of memory never went through the reader. */
  if (on_error != NULL && l.cfg.count == 0)
    on_error(arg, err->file, err->line, err->msg);
  if (cf_inited)
    config_destroy(&cf);
  free(l.dir);
  free(l.nul_file);
  config_free(c);
  return rc;
}

int fr_config_load(const char *path, struct fr_config **out, struct fr_config_error *err) {
  return load(path, NULL, out, err, NULL, NULL);
}

int fr_config_version(const char *path, char out[65]) {
  struct fr_config_error err;
  struct loader l = {0};
  struct fr_config *c = calloc(1, sizeof(*c));
  int rc;

  out[0] = '\0';
  if (c == NULL)
    return -ENOMEM;
  memset(&err, 0, sizeof(err));
  l.err = &err;
  l.path = path;
  l.cfg = FR_CFGREAD_FOR(&err, l.path);
  c->refs = 1;
  if ((rc = locate(&l, path, &c->source)) == 0 && (rc = collect_files(&l, c)) == 0)
    memcpy(out, c->version, 65);
  free(l.dir);
  config_free(c);
  return rc;
}

int fr_config_load_next(const char *path, const struct fr_config *running, struct fr_config **out,
                        struct fr_config_error *err) {
  return load(path, running, out, err, NULL, NULL);
}

int fr_config_check(const char *path, void (*cb)(void *arg, const char *file, int line, const char *msg),
                    void *arg, struct fr_config **out) {
  return load(path, NULL, out, NULL, cb, arg);
}

/* The count may be dropped from a worker thread (a reload) while the loop
 * holds its own reference, so it is atomic; the snapshot itself is
 * immutable and needs no lock. */
struct fr_config *fr_config_ref(struct fr_config *c) {
  if (c != NULL)
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
  return c;
}

void fr_config_unref(struct fr_config *c) {
  if (c != NULL && __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
    config_free(c);
}

const struct fr_config_tenant *fr_config_tenant_by_token(const struct fr_config *c, const char *token,
                                                         const struct fr_config_token **tok) {
  const struct fr_config_tenant *found = NULL;
  const struct fr_config_token *found_tok = NULL;
  char hash[65];
  size_t i, k;

  if (tok != NULL)
    *tok = NULL;
  /* An empty bearer token never authenticates, whatever the config says. */
  if (c == NULL || token == NULL || token[0] == '\0')
    return NULL;
  fr_sha256_hex(token, strlen(token), hash);
  /* Compare against every token, not stopping at a match, so the time
   * taken does not tell which position (if any) matched. Tokens are unique,
   * so at most one matches. */
  for (i = 0; i < c->ntenants; i++)
    for (k = 0; k < c->tenants[i].ntokens; k++) {
      uintptr_t mask = (uintptr_t)0 - (uintptr_t)fr_secret_equal(hash, c->tenants[i].tokens[k].sha256);
      found = (const struct fr_config_tenant *)(((uintptr_t)&c->tenants[i] & mask) | ((uintptr_t)found & ~mask));
      found_tok = (const struct fr_config_token *)(((uintptr_t)&c->tenants[i].tokens[k] & mask) |
                                                   ((uintptr_t)found_tok & ~mask));
    }
  if (tok != NULL)
    *tok = found_tok;
  return found;
}

int fr_config_token_expired(const struct fr_config_token *t, int64_t now_s) {
  return t != NULL && t->expires_at > 0 && now_s >= t->expires_at;
}

const struct fr_config_tenant *fr_config_tenant_by_name(const struct fr_config *c, const char *name) {
  size_t i;

  if (c == NULL || name == NULL)
    return NULL;
  for (i = 0; i < c->ntenants; i++)
    if (c->tenants[i].name != NULL && strcmp(c->tenants[i].name, name) == 0)
      return &c->tenants[i];
  return NULL;
}

const struct fr_config_cluster *fr_config_cluster_by_name(const struct fr_config *c,
                                                          const char *name) {
  size_t i;

  if (c == NULL || name == NULL)
    return NULL;
  for (i = 0; i < c->nclusters; i++)
    if (strcmp(c->clusters[i].name, name) == 0)
      return &c->clusters[i];
  return NULL;
}
