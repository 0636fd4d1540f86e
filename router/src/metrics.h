/* metrics.h - Prometheus counters and histograms of the router, and the
 * text exposition of /metrics (names in docs/metrics.md).
 *
 * Counters and histograms are recorded as events happen; gauges (capacity,
 * health, pools, cost) are read from the adapters when /metrics is scraped.
 * Everything runs on the loop thread: no locking.
 */
#ifndef FR_ROUTER_METRICS_H
#define FR_ROUTER_METRICS_H

#include <stddef.h>

struct router;
struct fr_buf;
struct metrics;

struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);   /* accepts NULL */

/* Adds <by> to counter <family> with the label set <labels> (already
 * formatted, e.g. "cluster=\"a\",outcome=\"ok\"", or "" for none). */
void metrics_inc(struct metrics *m, const char *family, const char *labels, double by);
/* Records <seconds> in histogram <family> with <labels>. */
void metrics_observe(struct metrics *m, const char *family, const char *labels, double seconds);

/* The histograms' bucket upper bounds (seconds), <*n> of them, +Inf not
 * included. Static. */
const double *metrics_buckets(size_t *n);

/* Appends `name="value"` (with a leading comma when <b> is not empty) to a
 * label buffer, escaping the value as the exposition format requires. */
void metrics_label(struct fr_buf *b, const char *name, const char *value);

/* Renders every metric of <r> in the text exposition format into <out>.
 * <all_pools> 0 (anyone may read /metrics: no metrics token is set) leaves
 * out the series of pools a tenant owns, whose names are that tenant's
 * business; shared pools are always there. 0 or -ENOMEM. */
int metrics_render(struct router *r, struct fr_buf *out, int all_pools);


#endif
