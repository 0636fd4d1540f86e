/* placement.c - the routing policy inside the router: loading, hot reload
 * (SIGHUP and file change, loaded on the thread pool so the loop never
 * reads files), the cluster-state snapshot the pure planner needs, and
 * GET /v1/policy.
 *
 * A reload builds a new policy and swaps the pointer; requests already
 * placing keep the reference they took (fr_policy_ref), so a reload never
 * changes a request in flight. A policy that fails to load is rejected and
 * the old one keeps serving; /v1/policy, the log and the counters say why.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/config.h"
#include "fr/cost.h"
#include "fr/http.h"
#include "fr/log.h"
#include "fr/policy.h"
#include "fr/util.h"
#include "router.h"

/* How often the policy file's metadata is checked for changes. Polling
 * (uv_fs_poll) rather than inotify, because editors and config management
 * replace files by renaming, which an inotify watch on the old inode misses. */
#define POLICY_POLL_MS 1000

struct reload_work {
  uv_work_t w;
  struct router *r;
  struct fr_policy *policy;       /* result */
  struct fr_policy_error err;
  struct fr_policy_warning *warnings;
  size_t nwarnings;
  int rc;
};

static void load_in_pool(uv_work_t *w) {
  struct reload_work *rw = fr_container_of(w, struct reload_work, w);
  struct router *r = rw->r;

  rw->rc = fr_policy_load(r->boot->policy, (const char *const *)r->cluster_names,
                          (const char *const *)r->cluster_regions, &rw->policy, &rw->err,
                          &rw->warnings, &rw->nwarnings);
}

static void set_warnings(struct router *r, struct fr_policy_warning *w, size_t n) {
  size_t i;

  json_decref(r->policy_warnings);
  r->policy_warnings = json_array();
  for (i = 0; i < n; i++) {
    json_array_append_new(r->policy_warnings, json_pack("{s:i,s:s}", "line", w[i].line, "message", w[i].msg));
    FR_WARN("policy", "%s:%d: warning: %s", r->boot->policy, w[i].line, w[i].msg);
  }
}

static void loaded(uv_work_t *w, int status) {
  struct reload_work *rw = fr_container_of(w, struct reload_work, w);
  struct router *r = rw->r;
  char msg[1100];

  r->policy_reloading = 0;
  if (status != 0 || rw->rc != 0) {
    if (rw->err.line > 0)
      snprintf(msg, sizeof(msg), "%s:%d: %s", rw->err.file, rw->err.line, rw->err.msg);
    else
      snprintf(msg, sizeof(msg), "%s: %s", rw->err.file[0] ? rw->err.file : r->boot->policy,
               status != 0 ? "reload cancelled" : rw->err.msg);
    snprintf(r->policy_error, sizeof(r->policy_error), "%.*s", (int)sizeof(r->policy_error) - 1, msg);
    r->policy_error_at = fr_wall_ms() / 1000;
    r->policy_reload_failures++;
    FR_ERROR("policy", "reload rejected, keeping version %.12s: %s", fr_policy_version(r->policy), msg);
  } else if (strcmp(fr_policy_version(rw->policy), fr_policy_version(r->policy)) == 0) {
    /* Same content (the file was touched, not changed). */
    fr_policy_unref(rw->policy);
    r->policy_error[0] = '\0';
  } else {
    FR_INFO("policy", "loaded %s version %.12s (was %.12s)", fr_policy_source(rw->policy),
            fr_policy_version(rw->policy), fr_policy_version(r->policy));
    fr_policy_unref(r->policy);
    r->policy = rw->policy;
    r->policy_loaded_at = fr_wall_ms() / 1000;
    r->policy_reloads++;
    r->policy_error[0] = '\0';
    set_warnings(r, rw->warnings, rw->nwarnings);
  }
  free(rw->warnings);
  free(rw);
  if (r->policy_reload_again) {
    r->policy_reload_again = 0;
    placement_reload(r);
  }
}

void placement_reload(struct router *r) {
  struct reload_work *rw;

  if (r->boot->policy == NULL || r->stopping)
    return;
  if (r->policy_reloading) {
    r->policy_reload_again = 1; /* a change during a load: load once more after */
    return;
  }
  rw = calloc(1, sizeof(*rw));
  if (rw == NULL)
    return;
  rw->r = r;
  if (uv_queue_work(r->loop, &rw->w, load_in_pool, loaded) != 0) {
    free(rw);
    return;
  }
  r->policy_reloading = 1;
}

static void on_policy_file(uv_fs_poll_t *h, int status, const uv_stat_t *prev, const uv_stat_t *cur) {
  struct router *r = h->data;

  (void)prev;
  (void)cur;
  if (status == 0)
    placement_reload(r);
}

int placement_init(struct router *r) {
  struct fr_policy_error err;
  struct fr_policy_warning *w = NULL;
  size_t nw = 0, i;

  r->cluster_names = calloc(r->boot->nclusters + 1, sizeof(char *));
  r->cluster_regions = calloc(r->boot->nclusters + 1, sizeof(char *));
  r->policy_warnings = json_array();
  if (r->cluster_names == NULL || r->cluster_regions == NULL || r->policy_warnings == NULL)
    return -ENOMEM;
  for (i = 0; i < r->boot->nclusters; i++) {
    r->cluster_names[i] = r->boot->clusters[i].name;
    r->cluster_regions[i] = r->boot->clusters[i].region;
  }
  if (r->boot->policy == NULL) {
    r->policy = fr_policy_default();
    if (r->policy == NULL)
      return -ENOMEM;
  } else {
    /* At start-up, before the loop runs, a blocking read is fine; a bad
     * file stops the router rather than starting it with a guess. */
    if (fr_policy_load(r->boot->policy, (const char *const *)r->cluster_names,
                       (const char *const *)r->cluster_regions, &r->policy, &err, &w, &nw) != 0) {
      if (err.line > 0)
        fprintf(stderr, "%s:%d: %s\n", err.file, err.line, err.msg);
      else
        fprintf(stderr, "%s: %s\n", err.file[0] ? err.file : r->boot->policy, err.msg);
      free(w);
      return -EINVAL;
    }
    set_warnings(r, w, nw);
    free(w);
    r->policy_poll = malloc(sizeof(*r->policy_poll));
    if (r->policy_poll == NULL)
      return -ENOMEM;
    uv_fs_poll_init(r->loop, r->policy_poll);
    r->policy_poll->data = r;
    uv_fs_poll_start(r->policy_poll, on_policy_file, r->boot->policy, POLICY_POLL_MS);
  }
  r->policy_loaded_at = fr_wall_ms() / 1000;
  return 0;
}

static void poll_closed(uv_handle_t *h) {
  free(h);
}

void placement_close(struct router *r) {
  if (r->policy_poll != NULL) {
    uv_close((uv_handle_t *)r->policy_poll, poll_closed);
    r->policy_poll = NULL;
  }
}

void placement_free(struct router *r) {
  fr_policy_unref(r->policy);
  r->policy = NULL;
  json_decref(r->policy_warnings);
  free(r->cluster_names);
  free(r->cluster_regions);
}

/* Room after the states for each cluster's unfit detail. */
#define UNFIT_DETAIL_LEN 200

struct fr_cluster_state *placement_states(struct router *r, const struct fr_sandbox_spec *spec) {
  size_t n = r->nadapters ? r->nadapters : 1;
  struct fr_cluster_state *st = calloc(1, n * (sizeof(*st) + UNFIT_DETAIL_LEN));
  char *details = (char *)(st + n);
  size_t i, k;

  if (st == NULL)
    return NULL;
  for (i = 0; i < r->nadapters; i++) {
    struct fr_adapter *a = r->adapters[i];
    struct fr_adapter_view v;

    fr_adapter_view(a, &v);
    st[i].name = v.name;
    st[i].region = v.region;
    st[i].healthy = v.healthy;
    st[i].synced = v.synced;
    st[i].age_ms = v.last_contact_age_ms == UINT64_MAX ? 1e12 : (double)v.last_contact_age_ms;
    st[i].latency_ms = v.api_latency_ms;
    /* Pod options narrow the nodes that count, or rule the cluster out. */
    st[i].free_slots = fr_adapter_fit_slots(a, spec->cpu_m, spec->mem_b, spec->opts, &st[i].unfit,
                                            details + i * UNFIT_DETAIL_LEN, UNFIT_DETAIL_LEN);
    st[i].unfit_detail = details + i * UNFIT_DETAIL_LEN;
    /* Warm pods serve only a request with their pool's options. */
    for (k = 0; spec->pool != NULL && k < v.npools; k++)
      if (strcmp(v.pools[k].name, spec->pool) == 0 && fr_podopts_equal(v.pools[k].opts, spec->opts))
        /* What concurrent batches already plan to claim, or are claiming
         * now (creates in flight), is not there for this one. */
        st[i].warm_ready = v.pools[k].ready > v.pools[k].reserved ? v.pools[k].ready - v.pools[k].reserved : 0;
    /* What one sandbox of this shape costs here per hour, from the
     * cluster's price; 0 (unknown) where none is configured, which the
     * planner scores as neutral. */
    st[i].cost_per_hour = fr_cost_known(&r->cfg->clusters[i].cost)
                              ? fr_cost_sandbox_hour(&r->cfg->clusters[i].cost, spec->cpu_m, spec->mem_b)
                              : 0;
  }
  return st;
}

void placement_policy_json(struct router *r, struct fr_http_req *req, const char *rid) {
  char loaded[21], err_at[21], hdr[200];
  json_t *j;
  char *s;

  fr_time_rfc3339(r->policy_loaded_at, loaded);
  j = json_pack("{s:s,s:s,s:s,s:I,s:I,s:O}", "source", fr_policy_source(r->policy), "version",
                fr_policy_version(r->policy), "loaded_at", loaded, "reloads", (json_int_t)r->policy_reloads,
                "reload_failures", (json_int_t)r->policy_reload_failures, "warnings", r->policy_warnings);
  if (j != NULL && r->policy_error[0] != '\0') {
    fr_time_rfc3339(r->policy_error_at, err_at);
    json_object_set_new(j, "last_reload_error", json_pack("{s:s,s:s}", "at", err_at, "message", r->policy_error));
  } else if (j != NULL) {
    json_object_set_new(j, "last_reload_error", json_null());
  }
  s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  snprintf(hdr, sizeof(hdr), "X-Request-Id: %s\r\nCache-Control: no-store\r\n", rid);
  if (s == NULL)
    router_error(req, 503, "out_of_memory", "the router is out of memory", NULL);
  else
    fr_http_respond(req, 200, "application/json", hdr, s, strlen(s));
  free(s);
}
