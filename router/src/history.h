/* history.h - capacity, creates and spend over time: GET /v1/history,
 * GET /v1/usage, and the in-memory history behind the first when no
 * Prometheus is configured.
 *
 * The in-memory history samples the router's own view every
 * metrics.history_step_s (10 s) into three rings of HISTORY_POINTS points
 * each: every step (1 h at 10 s), every 24 steps (24 h at 4 min) and every
 * 168 steps (7 d at 28 min). A point holds, per cluster, its live
 * sandboxes, its default-shape slots (total) and its spend so far; per
 * tenant, its spend and creates by outcome so far; and the cold and warm
 * create durations seen so far as histogram buckets. Counts are cumulative,
 * so any two points give the rate between them. Memory is fixed when the
 * router starts: 3 x HISTORY_POINTS points of (4 x clusters + 6 x tenants +
 * 2 x 16) doubles (~1.4 MiB for 20 clusters and 8 tenants), never more.
 * It starts empty with every router start: answers say so ("source":
 * "memory", "since").
 *
 * Loop thread only.
 */
#ifndef FR_ROUTER_HISTORY_H
#define FR_ROUTER_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "promq.h"

struct router;
struct history;
struct api_req;

#define HISTORY_POINTS 360

/* The history of <r> (its config, tenants and adapters must be set up);
 * its timer starts with history_start(). NULL when out of memory. */
struct history *history_new(struct router *r);
void history_start(struct history *h);
/* Stops the timer (shutdown); the memory stays until history_free(). */
void history_stop(struct history *h);
void history_free(struct history *h);   /* accepts NULL */

/* A sandbox of <tenant>'s create became exec-ready after <seconds>
 * (<warm>: a warm claim). */
void history_create_done(struct history *h, int warm, double seconds);
/* <n> sandboxes of a create of <tenant> were not made (no room, rolled
 * back, not committed). */
void history_create_failed(struct history *h, const char *tenant, int64_t n);

/* Answers 400 invalid_query and returns -1 when the query of <q> has a
 * parameter not in <known> (NULL-terminated, at most 4), else 0. */
int history_query_keys(struct api_req *q, const char *const *known);

/* The labels that make one usage series (a replica exports its own copy of
 * each): what /v1/history and /v1/usage take the max over before summing,
 * so replicas are not counted twice. */
#define HISTORY_USAGE_KEY "tenant, pool, cluster, region"

/* Runs the <n> Prometheus queries <qs> (borrowed until <cb>) for <q>,
 * deferring its answer: 0, and <cb> gets them; or answers 503 (busy, out
 * of memory) and returns -1, and the caller frees what it made for <cb>. */
int history_prom_run(struct api_req *q, struct promq_query *qs, size_t n, promq_done_cb cb, void *arg);

#endif
