/* gwpath.h - a cluster's fedrouter-gateway as the router sees it
 * (docs/gateway.md, "The router's side"): one REST client per gateway URL,
 * each with a circuit breaker of its own, the probes that close them again,
 * and the signing key, re-read when its file changes.
 *
 * Separate from the cluster's breaker (cluster.c): a gateway that is down
 * costs the cluster its fast data path, never its creates or its health.
 * While every URL's breaker is open, agent.c sends new calls through the
 * API server's pod proxy; a call already sent is never sent again on the
 * other path unless it never left (fr_kube_response.not_sent).
 *
 * Owned by struct cluster (cluster.c makes and closes it); agent.c, exec.c
 * and porttunnel.c pick a URL and report how its calls ended. Loop thread
 * only; the key file is read on the thread pool.
 */
#ifndef FR_GWPATH_H
#define FR_GWPATH_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "fr/adapter.h"
#include "fr/kube.h"

struct gwpath;

/* What the path of a call is: a gateway URL's index (>= 0), or these. */
#define GWPATH_POD_PROXY (-1)  /* the API server's pod proxy */
#define GWPATH_PICK (-2)       /* (agent__send's input) the path a new call takes now */

/* How a call to a gateway URL ended, for its breaker. */
enum gwpath_outcome {
  GWPATH_NONE,    /* says nothing of its health (an answer cut once it had begun, a call never sent) */
  GWPATH_OK,      /* the gateway answered (whatever it said about the sandbox) */
  GWPATH_FAILED,  /* no answer, or its own 503: two in a row open the breaker */
  GWPATH_DOWN,    /* it is not there (connection refused) or said it is going (503 shutting_down): opens it */
};

/* Makes the clients (reads the CA file: start-up only) and copies the key.
 * <name> (borrowed, outlives it) names the cluster in logs. 0, or a
 * negative errno with <err>. */
int gwpath__new(uv_loop_t *loop, const char *name, const struct fr_adapter_gateway *g, struct gwpath **out,
                char *err, size_t errlen);
/* Starts the probe and key timer. */
void gwpath__start(struct gwpath *gw);
/* Cancels every call (their callbacks are not called) and closes every
 * handle; <cb> runs once all are closed and <gw> is freed. */
void gwpath__close(struct gwpath *gw, void (*cb)(void *arg), void *arg);

/* The URL a new call goes to: the next one round-robin whose breaker is
 * closed, else GWPATH_POD_PROXY. */
int gwpath__pick(struct gwpath *gw);
/* 1 while some URL's breaker is closed. */
int gwpath__healthy(const struct gwpath *gw);
struct fr_kube_client *gwpath__client(struct gwpath *gw, int i);
/* How a call to URL <i> ended (no-op for i < 0). */
void gwpath__report(struct gwpath *gw, int i, enum gwpath_outcome o);
/* The outcome of a call to the gateway from its response: a transport
 * failure before any answer byte (<answered> 0) or the gateway's own 503
 * (<gw_code>: its Fr-Gateway-Error, "" for none) fail it; a transport
 * failure once the answer had begun, or a call never sent, says nothing;
 * anything else is an answer. */
enum gwpath_outcome gwpath__outcome(const struct fr_kube_response *r, int answered, const char *gw_code);

/* The header lines of a request to the gateway for <pod>:<port> in
 * namespace <ns> of cluster <cluster>: a fresh Fr-Gateway-Auth, then
 * <caller>'s lines (may be NULL) but any Fr-Gateway-* of theirs. malloc'd;
 * NULL on failure. */
char *gwpath__headers(const struct gwpath *gw, const char *cluster, const char *ns, const char *pod, int port,
                      const char *caller);
/* Refusals of this router (401/403 of the gateway) are logged once until
 * a call gets through again: 1 if this one is to be logged. */
int gwpath__refused(struct gwpath *gw, int refused);

/* Reads of the key file done so far, failed ones included (tests wait on
 * it). */
uint64_t gwpath__key_reads(const struct gwpath *gw);

#endif
