/* fr/podcache.h - a read-only cache of the sandbox pods of one namespace:
 * what fedrouter-gateway needs to know where a sandbox port is.
 *
 * The same pieces as the adapter's sandbox cache: an informer (list+watch
 * of the pods labelled fedrouter.io/sandbox=true, relists, backoff;
 * fr/informer.h) whose objects go into the compact pod store (one
 * struct fr_pod of ~350 bytes a pod, podstore.h) instead of jansson trees.
 * What only the gateway needs lives beside it, so the router's records do
 * not grow: each pod's address (status.podIP in binary, spec.hostNetwork)
 * and an index of addresses, so a lookup can tell a pod whose address
 * another cached pod also claims (a stale entry while an IP is reused).
 * Lookups are O(1); nothing walks the cache on a request.
 *
 * Loop thread only. Callbacks: none (readers poll synced()/get()).
 */
#ifndef FR_PODCACHE_H
#define FR_PODCACHE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/informer.h"

struct fr_kube_client;
struct fr_podcache;

/* A cache of namespace <ns> (a DNS label) through <client> (borrowed: it
 * must outlive the cache). Does not start anything. 0, -EINVAL, -ENOMEM. */
int fr_podcache_new(struct fr_kube_client *client, const char *ns, struct fr_podcache **out);
/* Begins listing; pods arrive from later loop turns. */
int fr_podcache_start(struct fr_podcache *pc);
/* Stops the informer and frees everything. Accepts NULL. */
void fr_podcache_free(struct fr_podcache *pc);

const char *fr_podcache_ns(const struct fr_podcache *pc);
/* The first complete list is in. */
int fr_podcache_synced(const struct fr_podcache *pc);
/* The last list or watch attempt worked. */
int fr_podcache_healthy(const struct fr_podcache *pc);
size_t fr_podcache_size(const struct fr_podcache *pc);
void fr_podcache_stats(const struct fr_podcache *pc, struct fr_informer_stats *out);

/* The cached pod <name> (borrowed: valid until the loop runs again), or
 * NULL. */
const struct fr_pod *fr_podcache_get(const struct fr_podcache *pc, const char *name);

/* Where a pod can be reached. */
struct fr_pod_addr {
  uint8_t ip[16];         /* status.podIP: 4 bytes (family 4) or 16 (family 6) */
  int family;             /* 0: no address (yet) */
  int host_network;       /* spec.hostNetwork: the address is its node's */
};
/* The address of cached pod <name> into <out> (all zero when it has none
 * or is not cached). */
void fr_podcache_addr(const struct fr_podcache *pc, const char *name, struct fr_pod_addr *out);
/* How many cached pods have address <a> (1 when only one; 0 for none). */
size_t fr_podcache_ip_holders(const struct fr_podcache *pc, const struct fr_pod_addr *a);
/* <a> as text into <out>; 0, or -ENOENT when it has no address. */
int fr_pod_addr_text(const struct fr_pod_addr *a, char out[46]);
/* The address of pod object <pod> (as the API serves it); pure. */
void fr_pod_addr_parse(json_t *pod, struct fr_pod_addr *out);
/* The port of the pod's agent (label fedrouter.io/agent), 0 when it has none. */
int fr_pod_agent_port(const struct fr_pod *p);

#endif
