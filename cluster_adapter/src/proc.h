/* proc.h - the agent's process service as events, and its unary calls
 * (proc.c), with the Connect envelope codec they and exec.c share.
 *
 * Above agent.c (every request is an agent__call) and cluster.c; used by
 * exec.c (a buffered exec's Start request and answer) and adapter.c
 * (fr_adapter_proc_start, _attach, fr_adapter_exec_stream,
 * fr_adapter_agent_rpc).
 */
#ifndef FR_PROC_H
#define FR_PROC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "fr/adapter.h"

struct cluster;
struct fr_buf;

/* ---- Connect envelopes ---- */

/* <msg> as one envelope (flag 0) in *<out> (malloc'd). 0 or -ENOMEM. */
int proc__envelope(json_t *msg, char **out, size_t *outlen);
/* Appends <data> to <pending> and calls <on_msg> for every complete
 * envelope (flags, JSON text); a negative return of <on_msg> stops and is
 * returned. -E2BIG for an envelope over 16 MiB (a ring chunk of output,
 * base64-encoded, is far less), -ENOMEM. */
int proc__feed(struct fr_buf *pending, const char *data, size_t len,
               int (*on_msg)(int flags, const char *msg, size_t len, void *arg), void *arg);
/* The exit code a shell would report for Go's ProcessState text
 * ("exit status 3", "signal: killed"). */
int proc__exit_code(const char *status, int exit_code, int exited);

/* ---- the process a Start request asks for ---- */

/* The Start request of <spec> (NULL: invalid or out of memory). */
json_t *proc__start_request(const struct fr_proc_spec *spec);
/* Fills <ps> with the process an exec of <spec> runs (borrowing its
 * strings): argv, env, workdir, stdin, timeout, killed on disconnect. The
 * one place an exec spec becomes a process spec. */
void proc__spec_from_exec(struct fr_proc_spec *ps, const struct fr_exec_spec *spec);

/* ---- streams and unary calls (fr/adapter.h says what they do) ---- */

int proc__start(struct cluster *cl, const char *pod, const struct fr_proc_spec *spec, fr_proc_event_cb on_event,
                fr_proc_done_cb on_done, void *arg, struct fr_proc_stream **out);
int proc__exec_stream(struct cluster *cl, const char *pod, const struct fr_exec_spec *spec,
                      fr_proc_event_cb on_event, fr_proc_done_cb on_done, void *arg, struct fr_proc_stream **out);
int proc__attach(struct cluster *cl, const char *pod, int64_t pid, int64_t replay_from, int follow,
                 const char *request_id, fr_proc_event_cb on_event, fr_proc_done_cb on_done, void *arg,
                 struct fr_proc_stream **out);
int proc__rpc(struct cluster *cl, const char *pod, const char *method, json_t *req, const char *request_id,
              fr_agent_rpc_cb cb, void *arg);

#endif
