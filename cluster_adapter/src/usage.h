/* usage.h - what a cluster's sandboxes use over time, per (tenant, pool)
 * (usage.c; fr/adapter.h, "usage").
 *
 * Above cluster.c (its loop and sandbox pod cache); adapter.c feeds it the
 * cluster's pod hook and forwards fr_adapter_usage_rows and _row here.
 */
#ifndef FR_USAGE_H
#define FR_USAGE_H

#include <stddef.h>

#include "fr/adapter.h"

struct cluster;
struct usage;

/* NULL when out of memory. <cl> is borrowed and outlives it. */
struct usage *usage__new(struct cluster *cl);
/* Accepts NULL. */
void usage__free(struct usage *u);

/* Every change of the sandbox pod cache: <p> the new state (NULL when the
 * pod is gone), <old> the previous one (NULL when it is new). */
void usage__on_pod(struct usage *u, const struct fr_pod *p, const struct fr_pod *old);
/* fr_adapter_usage_rows, fr_adapter_usage_row (fr/adapter.h). */
size_t usage__rows(const struct usage *u);
int usage__row(struct usage *u, size_t i, struct fr_adapter_usage *out);

#endif
