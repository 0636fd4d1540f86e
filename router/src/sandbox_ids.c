/* sandbox_ids.c - a sandbox's names and the tokens made from them,
 * declared in api.h: short ids, the traffic token of its ports, and which
 * of its ports are public. Bottom of the router: the port handlers
 * (ports.c), the sandbox view (sandbox_view.c) and the workspaces
 * (workspaces.c) all use them, and they call none of those.
 *
 * Short ids: a sandbox's "<cluster>.<pod>" id has a dot, so cannot be one
 * DNS label; its short form is "<pod'>-<code>", <pod'> the pod name with
 * "fr-pool-" written "p-", <code> four characters of the cluster's name's
 * SHA-256 (api_cluster_code): reversible to the owning cluster by any
 * replica without state, and at most 57 characters, so that
 * "<5-digit port>-<short id>" fits a 63-character label.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/config.h"
#include "fr/http.h"
#include "fr/util.h"
#include "api.h"
#include "router.h"

/* The longest short id: "<5-digit port>-" in front still fits 63. */
#define SHORT_ID_MAX 57

/* ---------------------------------------------------------------------- */
/* ids and tokens                                                          */

int ports_short_id(struct router *r, const char *cluster, const char *pod, char *out, size_t cap) {
  const char *code = api_cluster_code(r, cluster);
  int n;

  if (code == NULL)
    return -1;
  if (strncmp(pod, "fr-pool-", 8) == 0)
    n = snprintf(out, cap, "p-%s-%s", pod + 8, code);
  else if (strncmp(pod, "sb-", 3) == 0)
    n = snprintf(out, cap, "%s-%s", pod, code);
  else
    return -1; /* not a name fedrouter made: no short form */
  return n < 0 || (size_t)n >= cap || n > SHORT_ID_MAX ? -1 : 0;
}

int api_canonical_id(struct router *r, const char *id, char *out, size_t cap) {
  const char *dash, *cluster;
  size_t n = strlen(id);
  int w;

  if (strchr(id, '.') != NULL) {
    w = snprintf(out, cap, "%s", id);
    return w < 0 || (size_t)w >= cap ? -1 : 0;
  }
  dash = strrchr(id, '-');
  if (n > SHORT_ID_MAX || dash == NULL || strlen(dash + 1) != 4 || dash == id ||
      (cluster = api_cluster_of_code(r, dash + 1)) == NULL)
    return -1;
  if (strncmp(id, "p-", 2) == 0)
    w = snprintf(out, cap, "%s.fr-pool-%.*s", cluster, (int)(dash - id - 2), id + 2);
  else if (strncmp(id, "sb-", 3) == 0)
    w = snprintf(out, cap, "%s.%.*s", cluster, (int)(dash - id), id);
  else
    return -1;
  return w < 0 || (size_t)w >= cap ? -1 : 0;
}

int ports_traffic_token(const struct router *r, const char *id, char out[65]) {
  char msg[320];
  int n = snprintf(msg, sizeof(msg), "fedrouter-traffic\n%s", id);

  out[0] = '\0';
  if (r->cfg->agent_key == NULL || n < 0 || (size_t)n >= sizeof(msg))
    return -1;
  return fr_hmac_sha256_hex(r->cfg->agent_key, r->cfg->agent_key_len, msg, (size_t)n, out);
}

/* Is <port> public on <pod> (label fedrouter.io/public-ports: "all", or
 * its ports joined by '.')? */
/* <port> is in public-ports label value <v> (NULL: none). */
static int port_public_in(const char *v, int port) {
  char want[8];
  size_t n;

  if (v == NULL)
    return 0;
  if (strcmp(v, "all") == 0)
    return 1;
  n = (size_t)snprintf(want, sizeof(want), "%d", port);
  for (; *v != '\0'; v += strcspn(v, ".") + (v[strcspn(v, ".")] == '.'))
    if (strncmp(v, want, n) == 0 && (v[n] == '.' || v[n] == '\0'))
      return 1;
  return 0;
}

json_t *ports_public_json(const char *v) {
  json_t *arr;

  if (strcmp(v, "all") == 0)
    return json_string("*");
  if ((arr = json_array()) == NULL)
    return NULL;
  while (*v != '\0') {
    json_array_append_new(arr, json_integer(strtol(v, NULL, 10)));
    v += strcspn(v, ".");
    v += *v == '.';
  }
  return arr;
}

int ports_traffic_ok_label(const struct router *r, const struct fr_http_req *req, const char *id, const char *public,
                           int port) {
  const char *token = fr_http_req_header(req, "E2B-Traffic-Access-Token");
  char want[65];

  if (port_public_in(public, port))
    return 1;
  if (token == NULL)
    token = fr_http_req_header(req, "X-Traffic-Token");
  return token != NULL && ports_traffic_token(r, id, want) == 0 && fr_secret_equal(token, want);
}

int ports_traffic_ok(const struct router *r, const struct fr_http_req *req, const char *id, const struct fr_pod *pod,
                     int port) {
  return ports_traffic_ok_label(r, req, id, fr_pod_label(pod, FR_LABEL_PUBLIC_PORTS), port);
}
