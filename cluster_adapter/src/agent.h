/* agent.h - reaching a sandbox's fedrouter-agent through the API server's
 * pod proxy (agent.c): which pods have one, their tokens, the proxy path,
 * /init, and the raw call every other use of the agent goes through.
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

struct cluster;
struct fr_kube_call;

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
 * a route outside the allow-list or a parameter it does not take. */
int agent__path(const struct cluster *cl, const char *pod, int port, const char *method, const char *route,
                char *out, size_t cap);

typedef void (*agent__done_cb)(int rc, const char *message, void *arg);
/* POST /init: sets the sandbox's token and its env (<env>, then
 * <secrets> over it: objects of strings or NULL, borrowed); with secrets
 * the request is FR_KUBE_SENSITIVE. <cb> gets 0 or -EIO with a message,
 * unless the call (*<out>, for fr_kube_cancel) is cancelled first. */
int agent__init(struct cluster *cl, const char *pod, int port, json_t *env, json_t *secrets,
                const char *request_id, agent__done_cb cb, void *arg, struct fr_kube_call **out);

/* fr_adapter_agent_call (fr/adapter.h). */
int agent__call(struct cluster *cl, const char *pod, const struct fr_agent_call_opts *o,
                struct fr_agent_call **out);

#endif
