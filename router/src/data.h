/* data.h - what the data-plane files of the router share (data.c,
 * stream.c, procs.c, files.c): private to router/src, every name data__. */
#ifndef FR_ROUTER_DATA_H
#define FR_ROUTER_DATA_H

#include <stdint.h>

#include <jansson.h>

struct api_req;
struct fr_adapter;
struct fr_agent_result;

/* Above this many unsent answer bytes the agent's stream pauses; it
 * resumes below the low mark. */
#define OUT_HIGH ((size_t)1 << 20)
#define OUT_LOW ((size_t)256 << 10)
/* Upload: above this many bytes not yet sent to the agent the client's
 * body pauses (resumed by the agent call's on_drain). */
#define UP_HIGH ((size_t)1 << 20)
/* Without follow, how long to wait for a process's end after its kept
 * output was replayed before saying it still runs. */
#define NOFOLLOW_GRACE_MS 150
#define MAX_PATH_BYTES 4096

/* The pod name of sandbox id <id> (after its first '.'; borrowed). */
const char *data__pod_of(const char *id);
/* The answer for a seam call that could not start (its negative errno). */
void data__start_failed(struct api_req *q, struct fr_adapter *a, int rc);
/* The answer for an agent call that failed (<res>) or that the agent
 * refused (<err>, its Connect or envd error JSON; may be NULL); <what>
 * ("process", "path") names the not_found. */
void data__agent_error(struct api_req *q, const struct fr_agent_result *res, json_t *err, const char *what);

/* A unary agent call whose answer becomes the request's. */
struct rpc {
  struct api_req *q;
  const char *what;             /* "process" or "path", for not_found */
  json_t *(*shape)(json_t *answer);  /* 2xx answer -> body (NULL: 204) */
  int status;                   /* of a success with a body */
  /* SendInput may need to go again as PTY input, then CloseStdin. */
  struct fr_adapter *a;
  char pod[256];
  int64_t pid;
  json_t *pty_retry;            /* the SendInput request to send as pty if refused as stdin */
  int close_after;
};

/* client gone: the agent's answer is dropped when it comes */
void data__rpc_gone(struct api_req *q, void *arg);
/* Starts unary agent call <method> with <req> (taken) into sandbox <id>
 * for <q> and answers it later: <shape> turns a 2xx answer into the body
 * (NULL: 204), sent with <status>. NULL after answering. */
struct rpc *data__rpc_start(struct api_req *q, struct fr_adapter *a, const char *id, const char *method, json_t *req,
                            const char *what, json_t *(*shape)(json_t *), int status);

#endif
