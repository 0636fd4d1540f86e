/* porttunnel.c - an upgrade to a port a sandbox serves (WebSocket and any
 * other HTTP/1.1 Upgrade), through the cluster's pod proxy on a connection
 * of its own (fr_kube_tunnel_start(), kube_tunnel.c); the path is built
 * by upstream.c as for every other port request. No state of its own.
 */
#include <errno.h>
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
  int agent;

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
  if (upstream_port_path(path, sizeof(path), cl->ns, pod_name, port, o->target) != 0)
    return -EINVAL;
  ko = *o;
  ko.target = path;
  return fr_kube_tunnel_start(cl->client, &ko, out);
}
