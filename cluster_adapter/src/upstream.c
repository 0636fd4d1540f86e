/* upstream.c - paths to Kubernetes objects and to sandboxes' agents, built
 * from checked parts only (upstream.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fr/adapter.h"
#include "fr/egress.h"
#include "fr/gwproto.h"
#include "fr/urlsafe.h"
#include "fr/util.h"
#include "upstream.h"

enum { M_GET = 1, M_HEAD = 2, M_POST = 4, M_PUT = 8, M_DELETE = 16 };

struct agent_route {
  const char *path;
  unsigned methods;
  const char *const *params; /* query parameter names it takes, NULL-terminated; NULL: none */
  int internal;              /* the adapter's own (never on behalf of a client) */
};

static const char *const files_params[] = {"path", "username", NULL};
static const char *const tar_params[] = {"path", "gzip", "max_bytes", NULL};

/* Every route of fedrouter-agent a router calls (agent/README.md). Connect
 * RPCs are unary or streaming POSTs; /init only the adapter sends. */
static const struct agent_route routes[] = {
    {"/health", M_GET | M_HEAD, NULL, 0},
    {"/envs", M_GET, NULL, 0},
    {"/files", M_GET | M_POST | M_PUT, files_params, 0},
    {"/process.Process/Start", M_POST, NULL, 0},
    {"/process.Process/Connect", M_POST, NULL, 0},
    {"/process.Process/List", M_POST, NULL, 0},
    {"/process.Process/SendInput", M_POST, NULL, 0},
    {"/process.Process/StreamInput", M_POST, NULL, 0},
    {"/process.Process/SendSignal", M_POST, NULL, 0},
    {"/process.Process/Update", M_POST, NULL, 0},
    {"/process.Process/CloseStdin", M_POST, NULL, 0},
    {"/filesystem.Filesystem/Stat", M_POST, NULL, 0},
    {"/filesystem.Filesystem/MakeDir", M_POST, NULL, 0},
    {"/filesystem.Filesystem/Move", M_POST, NULL, 0},
    {"/filesystem.Filesystem/ListDir", M_POST, NULL, 0},
    {"/filesystem.Filesystem/Remove", M_POST, NULL, 0},
    {"/filesystem.Filesystem/WatchDir", M_POST, NULL, 0},
    {"/filesystem.Filesystem/CreateWatcher", M_POST, NULL, 0},
    {"/filesystem.Filesystem/GetWatcherEvents", M_POST, NULL, 0},
    {"/filesystem.Filesystem/RemoveWatcher", M_POST, NULL, 0},
    {"/init", M_POST, NULL, 1},
    /* Directory snapshots (tar both ways): only the router's snapshot,
     * restore and fork send them, with the tenant's byte bound; a client
     * relay (E2B) must not reach them with a bound of its own. */
    {"/tar", M_GET | M_POST, tar_params, 1},
};

static unsigned method_bit(const char *m) {
  static const struct {
    const char *name;
    unsigned bit;
  } ms[] = {{"GET", M_GET}, {"HEAD", M_HEAD}, {"POST", M_POST}, {"PUT", M_PUT}, {"DELETE", M_DELETE}};
  size_t i;

  for (i = 0; m != NULL && i < FR_ARRAY_SIZE(ms); i++)
    if (strcmp(m, ms[i].name) == 0)
      return ms[i].bit;
  return 0;
}

static const struct agent_route *route_find(const char *path, size_t len) {
  size_t i;

  for (i = 0; i < FR_ARRAY_SIZE(routes); i++)
    if (strlen(routes[i].path) == len && memcmp(routes[i].path, path, len) == 0)
      return &routes[i];
  return NULL;
}

int fr_agent_route_known(const char *method, const char *route) {
  const struct agent_route *r = route != NULL ? route_find(route, strlen(route)) : NULL;

  if (r == NULL || r->internal)
    return 0;
  return (r->methods & method_bit(method)) != 0 ? 1 : -1;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* A value made only of RFC 3986 unreserved characters and %XX escapes of
 * anything but a control byte. */
static int value_ok(const char *v, size_t n) {
  size_t i;
  int hi, lo;

  for (i = 0; i < n; i++) {
    char c = v[i];
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
        c == '_' || c == '~')
      continue;
    if (c != '%' || i + 2 >= n || (hi = hexval(v[i + 1])) < 0 || (lo = hexval(v[i + 2])) < 0 ||
        hi * 16 + lo < 0x20 || hi * 16 + lo == 0x7f)
      return 0;
    i += 2;
  }
  return 1;
}

/* Every "name=value" of <q> names a parameter of <r> and has a checked value. */
static int query_ok(const struct agent_route *r, const char *q) {
  while (*q != '\0') {
    size_t n = strcspn(q, "&"), k = strcspn(q, "=&"), i;
    int known = 0;
    if (n == 0 || k == n || r->params == NULL)
      return 0;
    for (i = 0; r->params[i] != NULL; i++)
      known |= strlen(r->params[i]) == k && memcmp(r->params[i], q, k) == 0;
    if (!known || !value_ok(q + k + 1, n - k - 1))
      return 0;
    q += n + (q[n] == '&');
  }
  return 1;
}

/* The checks of upstream_agent_path(). */
static int agent_route_ok(const char *ns, const char *pod, int port, const char *method, const char *route,
                          int internal) {
  const char *qm = strchr(route, '?');
  size_t rlen = qm != NULL ? (size_t)(qm - route) : strlen(route);
  const struct agent_route *r = route_find(route, rlen);

  return r != NULL && (!r->internal || internal) && (r->methods & method_bit(method)) != 0 && fr_dns_label(ns) &&
         fr_dns_subdomain(pod) && port >= 1 && port <= 65535 && (qm == NULL || query_ok(r, qm + 1));
}

int upstream_agent_path(char *out, size_t cap, const char *ns, const char *pod, int port, const char *method,
                        const char *route, int internal) {
  int n;

  if (!agent_route_ok(ns, pod, port, method, route, internal))
    return -EINVAL;
  n = snprintf(out, cap, "/api/v1/namespaces/%s/pods/%s:%d/proxy%s", ns, pod, port, route);
  return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int upstream_gw_agent_path(char *out, size_t cap, const char *ns, const char *pod, int port, const char *method,
                           const char *route, int internal) {
  /* /init never goes this way: the gateway refuses it (docs/gateway.md). */
  if (strncmp(route, "/init", 5) == 0 && (route[5] == '\0' || route[5] == '?'))
    return -EINVAL;
  if (!agent_route_ok(ns, pod, port, method, route, internal))
    return -EINVAL;
  return fr_gw_path(out, cap, ns, pod, port, route);
}

int upstream_object_path(char *out, size_t cap, const char *api, const char *ns, const char *resource,
                         const char *name_prefix, const char *name) {
  char full[254];
  int n;

  if (!fr_dns_label(ns))
    return -EINVAL;
  if (name == NULL) {
    n = snprintf(out, cap, "%s/namespaces/%s/%s", api, ns, resource);
  } else {
    n = snprintf(full, sizeof(full), "%s%s", name_prefix != NULL ? name_prefix : "", name);
    if (n < 0 || (size_t)n >= sizeof(full) || !fr_dns_subdomain(full))
      return -EINVAL;
    n = snprintf(out, cap, "%s/namespaces/%s/%s/%s", api, ns, resource, full);
  }
  return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int upstream_netpol_path(char *out, size_t cap, const char *ns, const char *hash) {
  if (hash != NULL && !fr_egress_hash_valid(hash))
    return -EINVAL;
  return upstream_object_path(out, cap, "/apis/networking.k8s.io/v1", ns, "networkpolicies",
                              hash != NULL ? UPSTREAM_NETPOL_PREFIX : NULL, hash);
}

/* The checks of upstream_port_path(). */
static int port_route_ok(const char *ns, const char *pod, int port, const char *path_query) {
  const char *qm = strchr(path_query, '?');
  size_t plen = qm != NULL ? (size_t)(qm - path_query) : strlen(path_query);

  return fr_dns_label(ns) && fr_dns_subdomain(pod) && port >= 1 && port <= 65535 &&
         fr_url_path_check(path_query, plen, NULL) == 0 &&
         (qm == NULL || fr_url_query_check(qm + 1, strlen(qm + 1), NULL) == 0);
}

int upstream_port_path(char *out, size_t cap, const char *ns, const char *pod, int port, const char *path_query) {
  int n;

  if (!port_route_ok(ns, pod, port, path_query))
    return -EINVAL;
  n = snprintf(out, cap, "/api/v1/namespaces/%s/pods/%s:%d/proxy%s", ns, pod, port, path_query);
  return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int upstream_gw_port_path(char *out, size_t cap, const char *ns, const char *pod, int port, const char *path_query) {
  if (!port_route_ok(ns, pod, port, path_query))
    return -EINVAL;
  return fr_gw_path(out, cap, ns, pod, port, path_query);
}
