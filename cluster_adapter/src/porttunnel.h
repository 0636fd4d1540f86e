/* porttunnel.h - an upgrade to a port a sandbox serves (porttunnel.c).
 *
 * Above cluster.c (pod cache, breaker, client) and agent.c (which port is
 * the agent's); adapter.c forwards fr_adapter_port_tunnel here.
 */
#ifndef FR_PORTTUNNEL_H
#define FR_PORTTUNNEL_H

#include "fr/adapter.h"

struct cluster;
struct fr_kube_tunnel;
struct fr_kube_tunnel_opts;

/* fr_adapter_port_tunnel (fr/adapter.h). */
int porttunnel__start(struct cluster *cl, const char *pod_name, int port, const struct fr_kube_tunnel_opts *o,
                      struct fr_kube_tunnel **out);

#endif
