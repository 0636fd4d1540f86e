/* execwait.h - execs past their tenant's max_concurrent_execs wait for a
 * slot instead of failing at once.
 *
 * Each tenant has a first-come, first-served line of waiting execs,
 * bounded by its max_queued_execs; each waits at most queue.exec_wait_s
 * (the config the request started with). A slot that frees (an exec ends:
 * tenant_exec_done) goes to the head of its tenant's line before anyone
 * new: it is taken for the waiter at once and its handler runs again from
 * the next loop turn. Past the bound, after the wait, or with no wait
 * configured, the answer is 429 tenant_limit (limit max_concurrent_execs)
 * with Retry-After, as before there was a line; a client that goes away
 * leaves the line.
 *
 * Loop thread only; nothing here blocks.
 */
#ifndef FR_ROUTER_EXECWAIT_H
#define FR_ROUTER_EXECWAIT_H

#include <stdint.h>

struct api_req;
struct router;
struct tenant_state;

/* Runs again, a slot of q->ts taken for it (it gives it back with
 * tenant_exec_done()), with <arg>; <q> is not deferred any more. */
typedef void (*execwait_resume_cb)(struct api_req *q, void *arg);
/* The wait ended without a slot (<q> has been answered, or the client
 * left): frees <arg>. */
typedef void (*execwait_drop_cb)(void *arg);

int execwait_init(struct router *r);
/* Answers every waiter 503 shutting_down (the drain) and stops. */
void execwait_close(struct router *r);
void execwait_free(struct router *r);

/* Takes one of q->ts's exec slots for <q>: 1 when one was free (the
 * caller gives it back with tenant_exec_done()); 0 when <q> now waits
 * (deferred: later <resume> or, after answering, <drop> runs with <arg>);
 * -1 after answering 429 (the line is full, or no wait is configured) or
 * 503 out_of_memory, <arg> untouched. A request without a tenant record
 * always gets 1. */
int execwait_take(struct api_req *q, execwait_resume_cb resume, execwait_drop_cb drop, void *arg);

/* An exec of <t> ended: one slot of max_concurrent_execs is free again,
 * and the first exec waiting for one gets it. Accepts NULL. */
void tenant_exec_done(struct router *r, struct tenant_state *t);
/* <t> left the config: its waiters are answered 401 now. */
void execwait_tenant_removed(struct router *r, struct tenant_state *t);

/* Execs waiting for <t> (NULL: every tenant), and the longest wait of
 * those now waiting in seconds. */
int64_t execwait_depth(struct router *r, const struct tenant_state *t, double *oldest_s);

#endif
