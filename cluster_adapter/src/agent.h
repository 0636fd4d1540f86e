/* agent.h - reaching a sandbox's fedrouter-agent (and its ports) through
 * the API server's pod proxy or the cluster's gateway (agent.c): which
 * pods have one, their tokens, the path, /init, the signed send, and the
 * raw call every other use of the agent goes through.
 *
 * Above cluster.c (client, pod cache, breaker, the agent options);
 * used by sandbox.c (/init), exec.c and proc.c (the agent's protocol over
 * agent__call); adapter.c forwards fr_adapter_agent_call,
 * fr_adapter_pod_has_agent and the token calls here.
 */
#ifndef FR_AGENT_H
#define FR_AGENT_H

#include <jansson.h>
#include <stddef.h>

#include "fr/adapter.h"
#include "fr/kube.h"

struct cluster;

/* The agent port of <pod> when it has an agent and this router speaks to
 * agents (cc.agent set), else 0. */
int agent__port_of(const struct cluster *cl, const struct fr_pod *pod);
/* The sandbox token of <pod>: hex HMAC-SHA256(key, "<cluster>.<pod>"),
 * with the previous key when <previous> (-EINVAL when there is none). */
int agent__token(const struct cluster *cl, const char *pod, int previous, char out[65]);
/* 1 if <token> is the access token of <pod> under the current or the
 * previous agent key (constant time): fr_adapter_agent_token_ok. */
int agent__token_ok(const struct cluster *cl, const char *pod, const char *token);
/* The pod proxy path of agent route <route> (path and query, from '/')
 * for <method> on <pod>:<port>, through upstream_agent_path(): -EINVAL for
 * a route outside the allow-list or a parameter it does not take. <internal>
 * 1 also allows the adapter's own routes (/init, /tar: never on a
 * client's behalf). */
int agent__path(const struct cluster *cl, const char *pod, int port, const char *method, const char *route,
                int internal, char *out, size_t cap);

/* Sends a call to <pod>'s agent (<user_port> 0: agent route <route> on
 * <port>, <internal> as upstream_agent_path()) or to its port <user_port>
 * (<route>: the path and query the sandbox's server gets) on the path
 * *<via> says: GWPATH_PICK, the one a new call takes now (a gateway URL
 * whose breaker is closed, round-robin, else the pod proxy; gwpath.h);
 * a gateway URL's index; or GWPATH_POD_PROXY. Through the gateway it is
 * signed (/init never goes there). Counted in cl->path_calls; *<via> is
 * set to the path taken. <ko> as fr_kube_request_opts() (its header
 * lines are the caller's: the agent token). 0, -EINVAL (a path upstream.c
 * refuses), or what fr_kube_request_opts() returns. */
int agent__send(struct cluster *cl, const char *pod, int port, int user_port, const char *method, const char *route,
                int internal, const char *content_type, const void *body, size_t len,
                const struct fr_kube_request_opts *ko, fr_kube_response_cb cb, void *arg, struct fr_kube_call **out,
                int *via);
/* A call sent on <via> ended with <r> (<answered>: its head had come):
 * feeds that gateway URL's breaker (nothing for the pod proxy). Returns
 * the path to send it again on (agent__send's <via>) when it may be: it
 * went to a gateway URL whose connection never opened (not one byte left:
 * fr_kube_response.not_sent); that URL's breaker is open now, so the next
 * is another URL whose breaker is closed, else the pod proxy (never left
 * in turn; after FR_ADAPTER_GATEWAY_URLS_MAX such tries, counted in the
 * caller's *<hops> (0 at first), the pod proxy whatever the breakers say).
 * Else AGENT_NO_RETRY. The caller also needs the whole body in hand. */
#define AGENT_NO_RETRY (-3)
int agent__gateway_done(struct cluster *cl, int via, const struct fr_kube_response *r, int answered, int *hops);
/* The header lines of a request to the gateway for <pod>:<port>: a fresh
 * Fr-Gateway-Auth, then <caller>'s lines (may be NULL) but any
 * Fr-Gateway-* of theirs. malloc'd; NULL on failure. */
char *agent__gateway_headers(const struct cluster *cl, const char *pod, int port, const char *caller);
/* 1 when <r>, answering a call sent on <via>, is an answer of the
 * cluster's gateway itself (header Fr-Gateway-Error), not of the sandbox:
 * its code into <code>. Never for the pod proxy (a sandbox's header). */
int agent__gateway_error(int via, const struct fr_kube_response *r, char *code, size_t cap);

typedef void (*agent__done_cb)(int rc, const char *message, void *arg);
/* What an agent's /init token is made for (FR_LABEL_AGENT_INIT). */
#define AGENT_INIT_POOL "pool"
#define AGENT_INIT_POD "pod"
/* The SHA-256 (hex) of the /init token of <kind> (AGENT_INIT_POOL or
 * AGENT_INIT_POD) <name> under the current key: what a pod made for it
 * carries in its env FR_AGENT_INIT_SHA256. 0 or -EINVAL. */
int agent__init_sha256(const struct cluster *cl, const char *kind, const char *name, char out[65]);
/* POST /init to the agent of <pod> (borrowed; its FR_LABEL_AGENT_INIT says
 * which init token opens it, tried with the previous key after a 401):
 * sets the sandbox's access token and its env (<env>, then <secrets> over
 * it: objects of strings or NULL, borrowed; the agent is told which names
 * are secrets). With secrets the request is FR_KUBE_SENSITIVE. <cb> gets 0
 * or -EIO with a message, unless *<out> is cancelled first
 * (agent__init_cancel). -EINVAL for a pod without the label. */
struct agent__init;
int agent__init(struct cluster *cl, const struct fr_pod *pod, int port, json_t *env, json_t *secrets,
                const char *request_id, agent__done_cb cb, void *arg, struct agent__init **out);
/* Stops an /init in flight: its callback is not called. Accepts NULL. */
void agent__init_cancel(struct agent__init *ai);

/* fr_adapter_agent_call (fr/adapter.h). */
int agent__call(struct cluster *cl, const char *pod, const struct fr_agent_call_opts *o,
                struct fr_agent_call **out);

#endif
