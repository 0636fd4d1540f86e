/* promq.h - PromQL over HTTP to the Prometheus of the router config
 * (metrics.prometheus_url), for /v1/usage and /v1/history.
 *
 * A batch of queries runs at once, each one GET of /api/v1/query (an
 * instant vector at <time>) or /api/v1/query_range (<start>..<end> by
 * <step>), on a libcurl multi handle driven by the router's loop
 * (fr/curluv.h): nothing blocks. The batch's callback runs once, from a
 * later loop turn, when every query has its answer or its error; each
 * query then holds its `data.result` array or why it has none.
 *
 * Bounds: 10 s per query (connect 3 s), 16 MiB per answer, at most
 * PROMQ_MAX_BATCHES batches in flight (beyond: -EBUSY, the caller answers
 * 503). Loop thread only.
 */
#ifndef FR_ROUTER_PROMQ_H
#define FR_ROUTER_PROMQ_H

#include <stddef.h>

#include <jansson.h>
#include <uv.h>

#define PROMQ_MAX_BATCHES 64

struct promq_client;
struct promq_batch;

struct promq_query {
  /* in (the caller's, borrowed until the callback) */
  const char *expr;
  int range;                /* 0: instant at <time>; 1: range <start>..<end> by <step> */
  double time, start, end, step; /* unix seconds */
  /* out, valid during the callback */
  int ok;                   /* Prometheus answered "success" */
  json_t *result;           /* ok: data.result (borrowed: the batch frees it after the callback,
                               which may free the array of queries) */
  char error[300];          /* !ok: why ("connection refused", "bad_data: parse error ...") */
};

/* The batch's end: <qs> are the caller's array with the answers filled. */
typedef void (*promq_done_cb)(struct promq_query *qs, size_t n, void *arg);

/* A client of <base_url> ("http://host:port[/prefix]", no trailing '/';
 * copied) on <loop>. NULL when out of memory. */
struct promq_client *promq_new(uv_loop_t *loop, const char *base_url);
/* Runs the <n> queries of <qs> (borrowed: they and their strings must
 * stay until <cb>). 0 and <cb> from a later loop turn, or -EBUSY (too many
 * batches in flight), -ENOMEM, -EINVAL (n == 0, or the client is closing)
 * and no callback. */
int promq_run(struct promq_client *c, struct promq_query *qs, size_t n, promq_done_cb cb, void *arg);
/* Shutdown: every batch in flight gets its callback now, each unfinished
 * query with the error "router shutting down"; then the client closes and
 * frees itself on later loop turns. Accepts NULL. */
void promq_close(struct promq_client *c);

#endif
