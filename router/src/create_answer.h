/* create_answer.h - a create in progress (struct create) and its answers
 * (create_answer.c): what the files of a create share (create.c: the request;
 * create_try.c: its tries from the queue, the plan and the batch;
 * create_answer.c: its answers and its end). Private to router/src.
 *
 * Calls run one way: create.c -> create_try.c -> create_answer.c; the
 * answers call neither of the others.
 */
#ifndef FR_ROUTER_CREATE_ANSWER_H
#define FR_ROUTER_CREATE_ANSWER_H

#include <stdint.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "queue.h"

struct api_req;
struct router;
struct batch;
struct fr_egress;
struct fr_plan;
struct fr_cluster_state;
struct fr_policy;
struct fr_podopts;
struct secrets_fetch;
struct tenant_state;

#define CREATE_NAME_MAX 48

/* What the create made in one cluster, over all its batches. */
struct create_cl_total {
  int cand;                   /* it was a candidate of some batch */
  int created, warm;
  char reason[300];
};

/* A create in progress: owns its strings, its batch, its place in the
 * queue and the request's operation reference. */
struct create {
  struct queue_entry qe;      /* its place in the queue (queue.c) */
  struct api_req *q;
  struct tenant_state *ts;    /* a reference; NULL for no tenant record */
  int explain;
  char name[CREATE_NAME_MAX + 1];
  int n;
  int partial_ok;
  int64_t wait_s;
  char region[64];            /* the client region placement used */
  int region_known;           /* a cluster's region or one the policy names */
  char *pool, *image;
  int pool_private;           /* <pool> is a tenant's own: "_private" in metrics labels */
  json_t *env, *labels, *clusters; /* references; clusters: the request's restriction, or NULL */
  struct fr_podopts *opts;    /* the sandboxes' pod options; NULL = none */
  int64_t gpus;               /* per sandbox */
  struct fr_egress *egress;   /* where they may connect; NULL = the default (no policy) */
  char cold_reason[300];      /* why the named pool's warm pods cannot serve it, "" = they can */
  struct fr_sandbox_spec spec;/* the batches' spec (strings borrowed from here) */
  struct secrets_fetch *sf;   /* the values of `secrets`, read before it is placed */
  /* progress */
  int *pending;               /* the numbers of the items not made yet, ascending */
  int npending;
  json_t *made;               /* the sandboxes made (API JSON), a reference */
  struct create_cl_total *cl;        /* per adapter */
  struct batch *b;            /* the batch running, or NULL */
  json_t *failed_placement;   /* the last rolled back batch's placement, for its answer */
  char commit_error[400];
  int64_t counted, counted_cpu_m, counted_mem_b, counted_gpus; /* in the tenant's `creating` */
  json_t *refusal;            /* the answer of its last try that did not start */
  int refusal_status;
  int tried;                  /* it has been tried at least once */
  int waited;                 /* a try did not start it: it waited in the queue */
  uint64_t t0_ms;             /* when it was handed to the queue */
};

/* ---- create_answer.c: answers and the end of a create ---- */

/* Gives back what <cr> counted in its tenant's `creating`. */
void create__uncount(struct create *cr);
/* Frees <cr> and everything it holds (NULL-safe parts), dropping its
 * place in the queue and its reference on the request. */
void create__free(struct create *cr);
/* Counts <n> sandboxes of <q>'s create for <pool> as not made. */
void create__count_failed(struct api_req *q, const char *pool, int pool_private, int64_t n);
/* Answers what was made and ends <cr> (freed on return). */
void create__answer_made(struct create *cr);
/* The client left: what was made goes; ends <cr> (freed on return). */
void create__end_unwanted(struct create *cr);
/* Gives up (<why>: the router is stopping, else NULL); ends <cr>. */
void create__give_up(struct create *cr, const char *why);
/* 503 no_capacity with every cluster's reason (a new reference). */
json_t *create__no_room_body(struct router *r, const struct fr_plan *plan, const struct fr_cluster_state *states,
                            int ncands);
/* The answer should it give up now (<body> taken). */
void create__set_refusal(struct create *cr, int status, json_t *body);

#endif
