/* commit.h - batch commit markers (commit.c): writing, renewing and
 * deleting them, and the rule every reaper applies to the pods of a batch
 * with no committed marker.
 *
 * Above cluster.c (it reads the marker cache, CLUSTER_INF_MARKERS, and the
 * sandbox pod cache's health); below sandbox.c, whose reaper asks it when
 * a pod is due and lets it renew and sweep. adapter.c forwards
 * fr_adapter_batch_hold and fr_adapter_batch_commit here and feeds it the
 * sandbox pod cache's events.
 */
#ifndef FR_COMMIT_H
#define FR_COMMIT_H

#include <jansson.h>
#include <stdint.h>

#include "fr/adapter.h"
#include "fr/informer.h"

struct cluster;
struct commits;

/* <timeout_s>: batch_commit_timeout_s (0 = FR_BATCH_COMMIT_TIMEOUT_S).
 * NULL when out of memory. <cl> is borrowed and outlives it. */
struct commits *commit__new(struct cluster *cl, int64_t timeout_s);
/* Answers every marker write in flight with status 0. */
void commit__stop(struct commits *cm);
/* After commit__stop(). Accepts NULL. */
void commit__free(struct commits *cm);

/* The informer transform of the marker cache (set by adapter.c): a marker
 * reduced to what the rule reads (name, resourceVersion, batch label,
 * deletion, data), so one per live create stays small (a real API server
 * adds managedFields). */
json_t *commit__slim_marker(json_t *obj, void *arg);

/* Keeps the per-batch pod counts from the sandbox pod cache's events
 * (the cluster's on_pod hook). */
void commit__on_pod(struct commits *cm, enum fr_informer_event ev, const struct fr_pod *p,
                    const struct fr_pod *old);

/* For sandbox.c's reaper. When the commit rule makes <pod> due for
 * reaping (unix seconds), or -1: it carries no batch, its batch is
 * committed, or it is not a sandbox. */
int64_t commit__due_at(const struct commits *cm, const struct fr_pod *pod);
/* 1 when the marker cache is complete and current, so a missing marker
 * means the batch was never committed. */
int commit__markers_known(const struct commits *cm);
/* From the reaper's timer: renews the pending markers of held batches and
 * deletes markers no longer needed. */
void commit__sweep(struct commits *cm);

/* fr_adapter_batch_hold and fr_adapter_batch_commit (fr/adapter.h). */
void commit__hold(struct commits *cm, const char *batch, int hold);
int commit__write(struct commits *cm, const char *batch, int64_t expires_s,
                  void (*cb)(int status, const char *message, void *arg), void *arg);

#endif
