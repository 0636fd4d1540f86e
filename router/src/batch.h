/* batch.h - a batch create run over the clusters a plan chose.
 *
 * The engine behind POST /v1/sandboxes: given the plan's candidate clusters
 * (in order, each with the count the plan gave it) it starts creates with a
 * bounded number in flight per cluster, moves items to the next cluster
 * when one answers with an explicit no-room signal, and ends either
 * committed (every sandbox made, or some with partial_ok) or rolled back
 * (everything it made is deleted). It talks to the clusters only through
 * the adapter API (fr/adapter.h) and knows nothing of HTTP or JSON, so it
 * is unit-tested against a fake adapter (tests/router/test_batch.c).
 *
 * States (batch_set_state() traces every transition at debug level):
 *
 *   PLANNED --batch_start--> RUNNING --all placed, enough made--> COMMITTING --markers written--> COMMITTED
 *                             ^ |                                     |
 *                             | |        a cluster's marker failed: --+ (its items go back to be placed
 *                             +-|----------------------------------- -+  elsewhere, its pods are deleted)
 *                               |                                     |
 *                               |                              the client left
 *                               |                                     v
 *                               +--short (or the client left)--> ROLLING_BACK --deletes answered--> ROLLED_BACK
 *
 * Every pod the batch makes carries its random id (spec.batch, label
 * fedrouter.io/batch). The batch holds its id on every cluster it starts
 * a create on (fr_adapter_batch_hold: a live batch is never reaped) and,
 * before it commits, writes the commit marker on every cluster that got
 * pods (fr_adapter_batch_commit). Should the router die before, every
 * router's reaper deletes the pods of the batch a timeout later
 * (cluster_adapter/src/commit.c has the rule).
 *
 * COMMITTED and ROLLED_BACK are final: the owner's done callback runs once,
 * from the callback of the last create or delete, or from inside
 * batch_start() when not one create could be started; the owner calls
 * batch_free() from it (or later) and must not touch the batch after
 * batch_start() returns.
 */
#ifndef FR_BATCH_H
#define FR_BATCH_H

#include <stdint.h>

#include "fr/adapter.h"

/* Creates in flight per cluster for one batch: enough to keep a cluster's
 * create pipeline full without flooding its API server. */
#define BATCH_PER_CLUSTER_INFLIGHT 32

enum batch_state {
  BATCH_PLANNED,
  BATCH_RUNNING,
  BATCH_COMMITTING,
  BATCH_ROLLING_BACK,
  BATCH_COMMITTED,
  BATCH_ROLLED_BACK
};

/* Characters of a batch id: [a-z0-9], random (fr_random_name_suffix). */
#define BATCH_ID_LEN 16

struct batch;

struct batch_item {
  int index;                  /* its number in its create (1-based; batch_set_number) */
  int cand;                   /* index into the candidates, -1 = not placed */
  int done;                   /* settled: made, failed, or nowhere left to go */
  int ok;                     /* made */
  int warm;
  int spilled;                /* a cluster answered no room for it and it moved on */
  uint64_t started_ns;        /* uv_hrtime() when its current create started */
  char pod[64];               /* the pod made, when ok */
  void *user;                 /* the owner's (freed by the owner's item_free) */
};

struct batch_cand {
  struct fr_adapter *a;
  int full;                   /* answered no room / unavailable during this batch */
  int not_first;              /* not the plan's first choice (fr_plan_entry.first_choice): what it
                                 makes is spilled (fr_sandbox_spec.spilled); set after batch_add_cand */
  int inflight;
  int64_t budget;             /* the plan's count for it */
  int64_t reserved;           /* of the budget, cold slots still reserved on the adapter */
  int64_t reserved_warm;      /* of the budget, warm pods still reserved on the adapter */
  int created, warm;
  int held;                   /* the batch's id is held on the adapter */
  int committed;              /* its commit marker is written */
  int commit_failed;          /* its commit marker could not be written (this round) */
  char reason[300];           /* the last no-room or failure message */
  json_t *secrets;            /* secret values for this cluster's sandboxes (spec.secrets), borrowed
                                 from the owner; NULL: none */
};

struct batch_hooks {
  /* Every create's outcome, before the engine acts on it (metrics, events,
   * and on success the owner's record of the sandbox in it->user). <pod>
   * is borrowed for the call. */
  void (*item_done)(struct batch *b, struct batch_item *it, struct batch_cand *cd,
                    const struct fr_sandbox_result *res, void *arg);
  /* Whether the result is still wanted (the client is still there); a
   * batch nobody waits for rolls back whatever it made. */
  int (*wanted)(void *arg);
  /* The batch reached COMMITTED or ROLLED_BACK. */
  void (*done)(struct batch *b, void *arg);
  /* Frees an item's <user> (may be NULL). */
  void (*item_free)(void *user);
};

struct batch {
  enum batch_state state;
  struct fr_sandbox_spec spec;  /* the create spec (name set per item); strings borrowed from the owner */
  const char *name;             /* batch name: items are <name>-0001, ... when n > 1 */
  int n;
  int numbered;                 /* item names end in -NNNN (its number): default n > 1 */
  int partial_ok;
  struct batch_item *items;
  struct batch_cand *cands;
  int ncands;
  int pending;                  /* creates in flight */
  int next;                     /* first item that may still need placing */
  int failed;                   /* items that failed for good */
  int deletes_pending;
  int commits_pending;
  char commit_error[400];       /* why the commit failed ("" when it did not) */
  char id[BATCH_ID_LEN + 1];    /* the batch id its pods carry */
  const struct batch_hooks *hooks;
  void *arg;
};

/* A batch of <n> items over up to <max_cands> candidates (add them with
 * batch_add_cand), with a fresh random id (its spec.batch). <spec> is copied; the strings it points to and <name>
 * are borrowed and must outlive the batch. NULL on out of memory. */
struct batch *batch_new(const struct fr_sandbox_spec *spec, const char *name, int n, int partial_ok,
                        int max_cands, const struct batch_hooks *hooks, void *arg);
/* Adds the plan's next cluster with its <budget>: <warm> of it expected
 * from the pool's ready pods, the rest cold. Both are reserved on the
 * adapter at once (cold slots, and the pool's warm pods), so a concurrent
 * plan sees them taken; each started create takes one over (warm first,
 * as the adapter claims before it creates), and the batch gives back
 * whatever it does not use. */
void batch_add_cand(struct batch *b, struct fr_adapter *a, int64_t budget, int64_t warm);
/* Before batch_start: candidate <k> takes no part (the owner could not
 * prepare it, e.g. read its Secret): it is closed with <reason> as if it
 * had answered unavailable, and its reservations go back. */
void batch_drop_cand(struct batch *b, int k, const char *reason);
/* Before batch_start: item <i> (0-based) is number <number> of its
 * create, in its name's -NNNN (by default i + 1), and <numbered> says
 * whether names carry it at all: a create of many whose items run in
 * several batches (the queue) keeps its numbering across them. */
void batch_set_number(struct batch *b, int i, int number, int numbered);
/* PLANNED -> RUNNING: starts the first creates. */
void batch_start(struct batch *b);
/* Sandboxes made so far. */
int batch_created(const struct batch *b);
/* Frees the batch (in PLANNED or a final state), giving back any
 * reservation left. Accepts NULL. */
void batch_free(struct batch *b);
const char *batch_state_name(enum batch_state s);

#endif
