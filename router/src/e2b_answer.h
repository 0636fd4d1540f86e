/* e2b_answer.h - the E2B endpoint's answers (e2b_answer.c), which its
 * other files share (docs/e2b.md). Private to router/src. Calls run one way: e2b.c (the route handlers: the
 * control API, and e2b_begin before every /e2b route) -> e2b_relay.c (calls
 * into a sandbox: envd's services and its other ports) -> e2b_answer.c
 * (E2B's JSON shapes and the checks both use), which calls neither.
 */
#ifndef FR_ROUTER_E2B_ANSWER_H
#define FR_ROUTER_E2B_ANSWER_H

#include <stddef.h>

#include <jansson.h>

struct api_req;
struct fr_adapter;
struct fr_pod;
struct fr_workspace;
struct router;

/* envd's port, which the SDK names in E2b-Sandbox-Port for its own calls
 * (whatever port the agent listens on in the pod). */
#define E2B_ENVD_PORT "49983"

/* api_req.shape_kind of an /e2b request: what e2b__shape() makes of v1's answer. */
enum { E2B_SHAPE_PLAIN, E2B_SHAPE_CREATE, E2B_SHAPE_PAUSE, E2B_SHAPE_RESUME, E2B_SHAPE_CONNECT_RESUME };

/* ---- e2b_answer.c ---- */

/* <id> (either form, api_canonical_id) as "<cluster>.<pod>" into <canon>,
 * split: <cluster> copied, *<pod> into <canon>. 0 or -1. */
int e2b__split_id(struct router *r, const char *id, char *canon, size_t canon_cap, char *cluster, size_t ccap,
                 const char **pod);
/* A running sandbox as E2B's ListedSandbox (<detail>: SandboxDetail); a new reference or NULL. */
json_t *e2b__sandbox_json(struct router *r, struct fr_adapter *a, const struct fr_pod *pod, int detail);
/* A paused sandbox (its workspace claim) as E2B shows it; a new reference or NULL. */
json_t *e2b__paused_json(struct router *r, struct fr_adapter *a, const struct fr_workspace *w);
/* shape_cb of every /e2b request: v1's answer <body> (taken) in the SDK's shapes. */
json_t *e2b__shape(struct api_req *q, int *status, json_t *body);
/* The tenant of <q> (set) may start one more request: 1; else answers 429, 0. */
int e2b__admitted(struct api_req *q);
/* Answers 501 not_supported for <what>. */
void e2b__not_supported(struct api_req *q, const char *what);

#endif
