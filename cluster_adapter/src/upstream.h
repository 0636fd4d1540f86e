/* upstream.h - the one place where the adapter builds the path of anything
 * it sends to a cluster: Kubernetes objects, and calls to a sandbox's agent
 * through the pod proxy or the cluster's gateway (docs/architecture.md,
 * "Upstream URLs").
 *
 * Nothing a client sent becomes part of a path unchecked: object names must
 * be DNS names, an agent call must be one of the routes of the allow-list
 * (method and exact path) with only the query parameters that route takes,
 * their values percent-encoded. kube.c then refuses any path that a
 * server's normalization could change (fr/urlsafe.h) and sends it as it is.
 * Pure functions of their arguments; no allocation.
 */
#ifndef FR_ADAPTER_UPSTREAM_H
#define FR_ADAPTER_UPSTREAM_H

#include <stddef.h>

/* "<api>/namespaces/<ns>/<resource>[/<name_prefix><name>]" into <out> of
 * <cap> bytes. <api> is a fixed API prefix ("/api/v1", "/apis/apps/v1"),
 * <resource> a fixed plural; <ns> must be a DNS label and <name_prefix>
 * <name> together a DNS subdomain (<name> NULL: the collection). 0,
 * -EINVAL (a name that is not one), -ENAMETOOLONG. */
int upstream_object_path(char *out, size_t cap, const char *api, const char *ns, const char *resource,
                         const char *name_prefix, const char *name);

/* The path of a sandbox egress NetworkPolicy (egress.c): the collection
 * (<hash> NULL) or the policy named "fr-egress-<hash>", <hash> being
 * FR_EGRESS_HASH_LEN lowercase hex characters (fr/egress.h):
 *   /apis/networking.k8s.io/v1/namespaces/<ns>/networkpolicies[/fr-egress-<hash>]
 * 0, -EINVAL, -ENAMETOOLONG. */
#define UPSTREAM_NETPOL_PREFIX "fr-egress-"
int upstream_netpol_path(char *out, size_t cap, const char *ns, const char *hash);

/* The pod proxy path of agent route <route> ("/files?path=%2Ftmp%2Fx",
 * "/process.Process/Start": the route, then optionally '?' and its query)
 * of pod <pod> (a DNS subdomain) in <ns> on <port> (1-65535), for a
 * request with <method>:
 *   /api/v1/namespaces/<ns>/pods/<pod>:<port>/proxy<route>[?<query>]
 * The route must be in the allow-list with <method> allowed; <internal>
 * also allows the routes only the adapter itself calls (/init); every query
 * parameter must be one the route takes, its value made of unreserved
 * characters and %XX escapes. 0, -EINVAL, -ENAMETOOLONG. */
int upstream_agent_path(char *out, size_t cap, const char *ns, const char *pod, int port, const char *method,
                        const char *route, int internal);

/* The pod proxy path of port <port> (1-65535) of <pod> in <ns> for
 * <path_query> (from '/': what the sandbox's server gets): the path must
 * pass fr_url_path_check() and the query fr_url_query_check().
 *   /api/v1/namespaces/<ns>/pods/<pod>:<port>/proxy<path>[?<query>]
 * 0, -EINVAL, -ENAMETOOLONG. */
int upstream_port_path(char *out, size_t cap, const char *ns, const char *pod, int port, const char *path_query);

/* The same two through the cluster's fedrouter-gateway (docs/gateway.md,
 * fr/gwproto.h), after the same checks:
 *   /v1/proxy/<ns>/<pod>/<port><route or path>[?<query>]
 * upstream_gw_agent_path() never allows /init, even <internal> (the
 * gateway refuses it: a router initializes agents through the pod proxy).
 * 0, -EINVAL, -ENAMETOOLONG. */
int upstream_gw_agent_path(char *out, size_t cap, const char *ns, const char *pod, int port, const char *method,
                           const char *route, int internal);
int upstream_gw_port_path(char *out, size_t cap, const char *ns, const char *pod, int port, const char *path_query);

#endif
