/* porttunnel.c - an upgrade to a port a sandbox serves (WebSocket and any
 * other HTTP/1.1 Upgrade), through the cluster's gateway while one of its
 * URLs is healthy, else its pod proxy, on a connection of its own (fr_kube_tunnel_start(),
 * kube_tunnel.c); the path is built by upstream.c as for every other port
 * request. No state of its own.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "porttunnel.h"

#include "agent.h"
#include "cluster.h"
#include "fr/kube.h"
#include "upstream.h"

int porttunnel__start(struct cluster *cl, const char *pod_name, int port, const struct fr_kube_tunnel_opts *o,
                      struct fr_kube_tunnel **out) {
  const struct fr_pod *pod;
  struct fr_kube_tunnel_opts ko;
  char path[4096];
  int agent, rc, gw;

  if (out != NULL)
    *out = NULL;
  if (cl == NULL || pod_name == NULL || o == NULL || o->target == NULL)
    return -EINVAL;
  if ((pod = cluster__pod(cl, pod_name)) == NULL)
    return -ENOENT;
  agent = agent__port_of(cl, pod);
  /* Never the agent's port: its routes and token are reached only as the
   * agent's. */
  if (port < 1 || port > 65535 || port == agent || port == FR_AGENT_DEFAULT_PORT)
    return -EINVAL;
  if (!cluster__reachable(cl))
    return -EHOSTDOWN;
  ko = *o;
  ko.target = path;
  if ((gw = gwpath__pick(cl->gw)) >= 0) {
    /* Through the cluster's gateway (a URL whose breaker is closed),
     * signed, none of the cluster's credentials (docs/gateway.md, "The
     * router's side"). A tunnel neither feeds the breaker nor is sent
     * again elsewhere: the calls around it do the first, and its caller
     * holds the tunnel it started. */
    char *headers;

    if (upstream_gw_port_path(path, sizeof(path), cl->ns, pod_name, port, o->target) != 0)
      return -EINVAL;
    if ((headers = agent__gateway_headers(cl, pod_name, port, o->headers)) == NULL)
      return -ENOMEM;
    ko.headers = headers;
    rc = fr_kube_tunnel_start(gwpath__client(cl->gw, gw), &ko, out);
    free(headers); /* the head is built from a copy */
    if (rc == 0)
      cl->path_calls[CLUSTER_PATH_GATEWAY]++;
    return rc;
  }
  if (upstream_port_path(path, sizeof(path), cl->ns, pod_name, port, o->target) != 0)
    return -EINVAL;
  if ((rc = fr_kube_tunnel_start(cl->client, &ko, out)) == 0)
    cl->path_calls[CLUSTER_PATH_POD_PROXY]++;
  return rc;
}
