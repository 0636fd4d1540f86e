/* egress.h - sandbox egress policies as NetworkPolicies in the sandbox
 * namespace (egress.c; docs/architecture.md, "Sandbox egress").
 *
 * Above cluster.c (client, the NetworkPolicy cache, the sandbox pod
 * cache); called by sandbox.c (a create's policy is written before its pod
 * carries the label; the reaper's sweep) and adapter.c (the pod hook,
 * fr_adapter_egress_of, stop and free).
 */
#ifndef FR_EGRESS_PRIV_H
#define FR_EGRESS_PRIV_H

#include <stdint.h>

#include "fr/adapter.h"
#include "fr/informer.h"

struct cluster;
struct egresses;
struct egress_op;
struct fr_egress;

/* Someone waiting for an egress policy to be written (a create, in its
 * op); linked into the write while it waits. Zeroed: not waiting. */
struct egress__wait {
  struct egress__wait *prev, *next;
  struct egress_op *op;          /* NULL when not waiting */
  void (*cb)(int status, const char *message, void *arg);
  void *arg;
};

/* NULL when out of memory. <cl> is borrowed and outlives it; <grace_s>:
 * how long a policy nobody uses is kept (the batch commit timeout). */
struct egresses *egress__new(struct cluster *cl, int64_t grace_s);
/* Answers every waiter with status 0 and frees the writes (adapter going
 * away); no write starts afterwards. */
void egress__stop(struct egresses *eg);
/* After egress__stop(). Accepts NULL. */
void egress__free(struct egresses *eg);

/* Makes sure NetworkPolicy fr-egress-<hash of e> exists, as <e>
 * (normalized) says, and that no router deletes it for a while (a write
 * changes its resourceVersion). 1: this router wrote it recently enough,
 * nothing to wait for; 0: <w> waits, and <cb> gets the HTTP status (2xx,
 * or why not) from a later loop turn unless egress__cancel(<w>) first;
 * -ENOMEM, -ESHUTDOWN. */
int egress__ensure(struct egresses *eg, const struct fr_egress *e, struct egress__wait *w,
                   void (*cb)(int status, const char *message, void *arg), void *arg);
/* Stops <w> waiting (its callback will not run). Safe when not waiting. */
void egress__cancel(struct egress__wait *w);
/* A create using policy <hash> starts (<delta> 1) or ends (-1) here: its
 * policy is not garbage-collected meanwhile. */
void egress__hold(struct egresses *eg, const char *hash, int delta);
/* The cluster's hook: keeps the per-policy pod counts from the sandbox pod
 * cache's events (cluster.h, struct cluster_hooks). */
void egress__on_pod(struct egresses *eg, enum fr_informer_event ev, const struct fr_pod *p,
                    const struct fr_pod *old);
/* From the reaper's timer: deletes policies no sandbox uses any more and
 * re-creates policies that sandboxes use but the cluster lost. */
void egress__sweep(struct egresses *eg);
/* fr_adapter_egress_of (fr/adapter.h). */
int egress__of(struct egresses *eg, const struct fr_pod *pod, struct fr_egress *out);

#endif
