/* reload.h - reloading the router config while it runs.
 *
 * On SIGHUP, and within about a second of the config file or any file it
 * @includes changing (every second a worker thread reads them and
 * compares their version, fr_config_version(): no inotify, which misses
 * the renames editors, config management and the kubelet's ConfigMap and
 * Secret updates do), the file is loaded on the thread pool with
 * fr_config_load_next(). A file that does not load, or that changes a key
 * only a restart applies, is rejected whole with its file:line error: the
 * log says why, GET /v1/config shows it, and the running config stays.
 * A good one is swapped in on the loop: tenants (tokens, limits, weights),
 * limits read per request, lifetimes, the queue's settings, prices and the
 * metrics token take effect for the requests that start from then on;
 * requests in flight keep the snapshot they started with (api_req.cfg).
 */
#ifndef FR_ROUTER_RELOAD_H
#define FR_ROUTER_RELOAD_H

#include <jansson.h>

struct router;
struct fr_buf;

/* Starts watching r->cfg's files: 0 or -ENOMEM. */
int reload_init(struct router *r);
/* SIGHUP: loads the config now, changed or not. */
void reload_now(struct router *r);
/* Stops watching (shutdown); a load in flight is dropped when it ends. */
void reload_close(struct router *r);
/* GET /v1/config's answer (a new reference; NULL: out of memory). */
json_t *reload_json(struct router *r);
/* The reload gauges for /metrics. */
void reload_metrics(struct router *r, struct fr_buf *b);

#endif
