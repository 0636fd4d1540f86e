/* create_try.h - a create's tries (create_try.c): the plan, and the
 * operations the queue calls. Private to router/src.
 */
#ifndef FR_ROUTER_CREATE_TRY_H
#define FR_ROUTER_CREATE_TRY_H

#include <stdint.h>

#include "queue.h"

struct create;
struct fr_cluster_state;
struct fr_plan;
struct fr_policy;

/* The policy's plan for <count> sandboxes of <cr>; *<states> (freed by
 * the caller) and *<pol> (a reference the caller drops) set even on
 * failure. 0 or a negative errno. */
int create__make_plan(struct create *cr, int64_t count, struct fr_plan *plan, struct fr_cluster_state **states,
                     struct fr_policy **pol);
/* A create's operations in the queue (try, expire). */
extern const struct queue_entry_ops create__queue_ops;

#endif
