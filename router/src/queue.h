/* queue.h - creates waiting for room, started in fair-share order.
 *
 * A create that does not fit now (capacity, or its tenant's quota) and
 * asked to wait (`wait_s`) waits here, in its tenant's line (first come,
 * first served within a tenant). Whenever room may have freed (every
 * QUEUE_TICK_MS while anything waits, after a batch ends, after a reload),
 * the queue goes over the tenants that have something waiting in the
 * order of their share of the federation: the dominant share of what the
 * tenant holds and is making (the larger of its cpu and memory, as
 * fractions of every cluster's allocatable) divided by its weight, the
 * smallest first (weighted max-min fairness, as Dominant Resource
 * Fairness does it). Each tenant's first entry is tried; one that starts
 * changes its tenant's share, and the order is worked out again.
 *
 * An entry that does not fit for lack of capacity holds back the tenants
 * after it in the order, so the one with the smallest share gets freed
 * room first: a tenant with 10,000 waiting cannot starve one with 10.
 * Only warm claims (which take a pool's ready pods, not free capacity)
 * may still start behind it: the queue starts warm claims first. An entry
 * held back by its own tenant's quota (max_sandboxes, max_cpus, ...)
 * holds back nobody else.
 *
 * Entries are the owner's (create.c embeds one in each create); the queue
 * calls their ops and never frees them. Nothing here blocks: a pass plans
 * against the adapters' views (memory only) and starts batches, which are
 * asynchronous. Loop thread only.
 */
#ifndef FR_ROUTER_QUEUE_H
#define FR_ROUTER_QUEUE_H

#include <stdint.h>

#include <jansson.h>

struct router;
struct tenant_state;
struct fr_buf;

/* How often the queue looks for freed room while something waits: a pod
 * deleted shows in the watch within milliseconds; 100 ms keeps the wait
 * for a freed slot short without planning for nothing too often. */
#define QUEUE_TICK_MS 100

/* What an entry's try did. */
enum queue_try {
  QT_STARTED,     /* all it wants is under way: it leaves the queue */
  QT_PARTIAL,     /* some started (partial_ok): it leaves the queue until that batch ends */
  QT_NO_ROOM,     /* the federation has no room for it now */
  QT_QUOTA,       /* its tenant's own limits hold it back */
  QT_ENDED,       /* it ended (answered) inside the try: it leaves the queue */
};

struct queue_entry;

struct queue_entry_ops {
  /* Tries to start the entry now (all of it, or with partial_ok what
   * fits); <warm_only>: only warm claims may start. */
  enum queue_try (*try_start)(struct queue_entry *e, int warm_only);
  /* The wait is over without a start (its deadline passed, or the router
   * is stopping, <why>): the owner answers and may free the entry. Called
   * after the entry left the queue. */
  void (*expire)(struct queue_entry *e, const char *why);
};

struct queue_entry {
  /* the owner's, before queue_add() */
  const struct queue_entry_ops *ops;
  struct tenant_state *ts;      /* borrowed: the owner holds a reference */
  int64_t want;                 /* sandboxes it still waits to start */
  uint64_t deadline_ms;         /* uv_now() time its wait ends; 0: no wait (tried once) */
  char why[200];                /* the owner's: why its last try did not start (GET /v1/queue) */
  /* the queue's verdict when it may not wait (queue_add): the owner's
   * expire answers with it */
  enum { QO_NONE, QO_TENANT, QO_FULL } overflow;
  /* the queue's */
  struct queue_entry *prev, *next;
  struct queue_line *line;      /* NULL while not queued */
  uint64_t since_ms;            /* when it first queued (kept across re-queues) */
};

int queue_init(struct router *r);
/* Expires every entry ("the router is shutting down") and stops. */
void queue_close(struct router *r);
void queue_free(struct router *r);

/* Puts <e> at the end of its tenant's line (<front>: at the front, where
 * an entry goes back to when its batch ended short) and, with <try_now>,
 * tries the queue at once: when it returns <e> may have started, ended
 * (and be freed), or still wait. An entry that waits for nothing
 * (deadline_ms 0) and did not start is expired before this returns; so
 * is one whose wait would pass its tenant's max_queued_sandboxes
 * (overflow QO_TENANT) or queue.max_sandboxes (QO_FULL): it has its one
 * try, and its expire answers 429 / 503.
 * 0, or -ENOMEM (not queued). */
int queue_add(struct router *r, struct queue_entry *e, int front, int try_now);
/* Takes <e> out (the client went away); a no-op when not queued. */
void queue_remove(struct router *r, struct queue_entry *e);
/* 1 while <e> waits in the queue. */
int queue_waiting(const struct queue_entry *e);
/* Room may have freed: the queue is tried from the next loop turn. */
void queue_kick(struct router *r);

/* Sandboxes waiting, of <t> (NULL: of every tenant). */
int64_t queue_sandboxes(struct router *r, const struct tenant_state *t);
/* <t>'s share of the federation now (see above), before its weight. */
double queue_share(struct router *r, const struct tenant_state *t);
/* GET /v1/queue: every tenant (<all>) or only <self>'s. A new reference. */
json_t *queue_json(struct router *r, const struct tenant_state *self, int all);
/* The queue's gauges for /metrics. */
void queue_metrics(struct router *r, struct fr_buf *b);

#endif
