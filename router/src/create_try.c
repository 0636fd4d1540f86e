/* create_try.c - a create's tries (create_answer.h, create_try.h): the queue (queue.c) calls
 * try_start() at once and again whenever room may have freed; a try checks
 * the tenant's limits, asks the policy for a plan over a fresh snapshot of
 * the clusters and runs it as a batch (batch.c), whose hooks count, record
 * and, when it is done, answer (create_answer.c) or wait again.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/config.h"
#include "fr/http.h"
#include "fr/labels.h"
#include "fr/policy.h"
#include "fr/util.h"
#include "api.h"
#include "batch.h"
#include "create_answer.h"
#include "create_try.h"
#include "history.h"
#include "metrics.h"
#include "queue.h"
#include "router.h"
#include "secrets.h"
#include "tenants.h"
#include "workspaces.h"

/* The policy's plan for <count> sandboxes of <cr> from a fresh snapshot of
 * the clusters; a cluster whose Secret lacks a key it asks for cannot
 * host it. <pol> gets a reference the caller drops. */
int create__make_plan(struct create *cr, int64_t count, struct fr_plan *plan, struct fr_cluster_state **states,
                     struct fr_policy **pol) {
  struct router *r = cr->q->r;
  const char **keys = NULL, **vals = NULL, **clusters = NULL;
  struct fr_placement_request preq;
  const char *k;
  json_t *v;
  size_t i = 0;
  int rc = -ENOMEM;

  memset(plan, 0, sizeof(*plan));
  *pol = fr_policy_ref(r->policy);
  *states = placement_states(r, &cr->spec);
  keys = calloc(json_object_size(cr->labels) + 1, sizeof(*keys));
  vals = calloc(json_object_size(cr->labels) + 1, sizeof(*vals));
  clusters = calloc(json_array_size(cr->clusters) + 1, sizeof(*clusters));
  if (*states == NULL || keys == NULL || vals == NULL || clusters == NULL)
    goto out;
  if (cr->sf != NULL)
    for (i = 0; i < r->nadapters; i++) {
      const char *code, *detail;
      if ((*states)[i].unfit == NULL && secrets_values(cr->sf, i, &code, &detail) == NULL &&
          strcmp(code, "not_asked") != 0) {
        (*states)[i].unfit = code;
        (*states)[i].unfit_detail = detail;
      }
    }
  i = 0;
  json_object_foreach(cr->labels, k, v) {
    keys[i] = k;
    vals[i++] = json_string_value(v);
  }
  memset(&preq, 0, sizeof(preq));
  preq.tenant = cr->q->tenant;
  preq.pool = cr->pool;
  preq.region = cr->region;
  preq.label_keys = keys;
  preq.label_values = vals;
  preq.nlabels = i;
  json_array_foreach(cr->clusters, i, v) clusters[i] = json_string_value(v);
  preq.clusters = cr->clusters ? clusters : NULL;
  preq.nclusters = json_array_size(cr->clusters);
  preq.count = count;
  rc = fr_policy_plan(*pol, *states, r->nadapters, &preq, plan);
out:
  free(keys);
  free(vals);
  free(clusters);
  return rc;
}

/* ---- quotas ---- */

/* How many more sandboxes of the create's shape its tenant may hold now
 * (max_sandboxes, max_cpus, max_memory_gb, max_gpus; those being made
 * count), INT64_MAX without limits; *<limit> names the one that binds. */
static int64_t quota_room(struct create *cr, const char **limit) {
  struct tenant_state *ts = cr->ts;
  struct router *r = cr->q->r;
  struct fr_tenant_usage u, one;
  int64_t room = INT64_MAX, k;
  size_t i;

  *limit = NULL;
  if (ts == NULL)
    return room;
  memset(&u, 0, sizeof(u));
  for (i = 0; i < r->nadapters; i++) {
    fr_adapter_tenant_usage(r->adapters[i], ts->name, &one);
    u.sandboxes += one.sandboxes;
    u.cpu_m += one.cpu_m;
    u.mem_b += one.mem_b;
    u.gpus += one.gpus;
  }
#define BOUND(max, used, per, name)                    \
  if ((max) > 0) {                                     \
    k = (max) - (used);                                \
    k = k <= 0 ? 0 : (per) > 0 ? k / (per) : INT64_MAX; \
    if (k < room) {                                    \
      room = k;                                        \
      *limit = name;                                   \
    }                                                  \
  }
  BOUND(ts->max_sandboxes, u.sandboxes + ts->creating, 1, "max_sandboxes");
  BOUND(ts->max_cpu_m, u.cpu_m + ts->creating_cpu_m, cr->spec.cpu_m, "max_cpus");
  BOUND(ts->max_mem_b, u.mem_b + ts->creating_mem_b, cr->spec.mem_b, "max_memory_gb");
  BOUND(ts->max_gpus, u.gpus + ts->creating_gpus, cr->gpus, "max_gpus");
#undef BOUND
  return room;
}

/* ---- the batch's hooks ---- */

static const char *sb_outcome(enum fr_sandbox_err e) {
  switch (e) {
  case FR_SB_OK: return "ok";
  case FR_SB_NO_ROOM: return "no_room";
  case FR_SB_UNAVAILABLE: return "unavailable";
  case FR_SB_TIMEOUT: return "timeout";
  default: return "failed";
  }
}

static void on_item_done(struct batch *b, struct batch_item *it, struct batch_cand *cd,
                         const struct fr_sandbox_result *res, void *arg) {
  struct create *cr = arg;
  struct router *r = cr->q->r;
  struct fr_buf l;

  (void)b;
  fr_buf_init(&l);
  metrics_label(&l, "cluster", fr_adapter_name(cd->a));
  metrics_label(&l, "tenant", tenant_label(r, cr->q->tenant));
  metrics_label(&l, "outcome", sb_outcome(res->err));
  metrics_label(&l, "start", res->warm ? "warm" : "cold");
  metrics_inc(r->metrics, "fedrouter_creates_total", l.data ? l.data : "", 1);
  if (res->err == FR_SB_OK) {
    double s = (double)(uv_hrtime() - it->started_ns) / 1e9;
    fr_buf_reset(&l);
    metrics_label(&l, "cluster", fr_adapter_name(cd->a));
    metrics_label(&l, "start", res->warm ? "warm" : "cold");
    metrics_observe(r->metrics, "fedrouter_create_duration_seconds", l.data ? l.data : "", s);
    history_create_done(r->history, res->warm, s);
  }
  /* The first no-room answer from a cluster moves the batch on: a spill. */
  if ((res->err == FR_SB_NO_ROOM || res->err == FR_SB_UNAVAILABLE || res->err == FR_SB_TIMEOUT) && !cd->full) {
    char why[300];
    fr_buf_reset(&l);
    metrics_label(&l, "cluster", fr_adapter_name(cd->a));
    metrics_label(&l, "reason", sb_outcome(res->err));
    metrics_inc(r->metrics, "fedrouter_spills_total", l.data ? l.data : "", 1);
    snprintf(why, sizeof(why), "%s: %s", sb_outcome(res->err), res->message ? res->message : "");
    router_event(r, fr_adapter_name(cd->a), why, cr->q->rid, cr->q->tenant);
  }
  fr_buf_free(&l);
  if (res->err == FR_SB_OK && res->pod != NULL)
    it->user = api_sandbox_json(r, cd->a, res->pod, 1);
}


static int on_wanted(void *arg) {
  struct create *cr = arg;

  /* A client that went away cannot learn the ids: keep nothing. */
  return cr->q->req != NULL;
}

/* The index of adapter <a>. */
static size_t adapter_index(struct router *r, const struct fr_adapter *a) {
  size_t i;

  for (i = 0; i < r->nadapters && r->adapters[i] != a; i++)
    ;
  return i;
}

/* A batch's placement (its candidates only), for a rollback's answer. */
static json_t *batch_placement_json(const struct batch *b) {
  json_t *cl = json_array();
  int i, warm = 0, created = batch_created(b);

  for (i = 0; i < b->ncands; i++) {
    json_t *e = json_pack("{s:s,s:i,s:i}", "cluster", fr_adapter_name(b->cands[i].a), "created",
                          b->cands[i].created, "warm", b->cands[i].warm);
    if (b->cands[i].reason[0])
      json_object_set_new(e, "reason", json_string(b->cands[i].reason));
    warm += b->cands[i].warm;
    json_array_append_new(cl, e);
  }
  return json_pack("{s:i,s:i,s:i,s:i,s:i,s:o}", "requested", b->n, "created", created, "warm", warm,
                   "cold", created - warm, "shortfall", b->n - created, "clusters", cl);
}

/* Waits again (at the front of its tenant's line) while its wait lasts:
 * 1, or 0 when it is over. */
static int wait_again(struct create *cr) {
  struct router *r = cr->q->r;

  if (cr->qe.deadline_ms == 0 || uv_now(r->loop) >= cr->qe.deadline_ms || r->stopping)
    return 0;
  cr->qe.want = cr->npending;
  /* The next loop turn tries the queue: not from inside this batch's
   * last callback. */
  if (queue_add(r, &cr->qe, 1, 0) != 0)
    return 0;
  queue_kick(r);
  return 1;
}

static void on_batch_done(struct batch *b, void *arg) {
  struct create *cr = arg;
  struct api_req *q = cr->q;
  struct router *r = q->r;
  int i, k, p;

  create__uncount(cr);
  /* What it made joins the create's total, its numbers leave the pending. */
  for (k = 0; k < b->ncands; k++) {
    struct create_cl_total *t = &cr->cl[adapter_index(r, b->cands[k].a)];
    t->cand = 1;
    if (b->state == BATCH_COMMITTED) {
      t->created += b->cands[k].created;
      t->warm += b->cands[k].warm;
    }
    if (b->cands[k].reason[0] != '\0')
      snprintf(t->reason, sizeof(t->reason), "%s", b->cands[k].reason);
  }
  if (b->state == BATCH_COMMITTED) {
    for (i = 0; i < b->n; i++) {
      if (!b->items[i].ok || b->items[i].user == NULL)
        continue;
      json_array_append(cr->made, b->items[i].user);
      for (p = 0; p < cr->npending && cr->pending[p] != b->items[i].index; p++)
        ;
      if (p < cr->npending) {
        memmove(&cr->pending[p], &cr->pending[p + 1], (size_t)(cr->npending - p - 1) * sizeof(*cr->pending));
        cr->npending--;
      }
    }
  } else {
    json_decref(cr->failed_placement);
    cr->failed_placement = batch_placement_json(b);
    snprintf(cr->commit_error, sizeof(cr->commit_error), "%s", b->commit_error);
  }
  cr->b = NULL;
  batch_free(b);
  queue_kick(r); /* its reservations went back: room for others, maybe */

  if (q->req == NULL) {
    create__end_unwanted(cr);
    return;
  }
  if (cr->npending == 0) {
    create__answer_made(cr);
    return;
  }
  if (cr->commit_error[0] == '\0' && wait_again(cr))
    return;
  if (cr->partial_ok && json_array_size(cr->made) > 0) {
    create__answer_made(cr);
    return;
  }
  {
    char why[600];
    json_t *body, *pl = cr->failed_placement;
    /* Made, but a cluster did not take the commit marker: nothing kept. */
    snprintf(why, sizeof(why), "the batch could not be committed (%s); what was created has been deleted",
             cr->commit_error);
    body = cr->commit_error[0] ? api_err_body("commit_failed", why)
                               : api_err_body("no_capacity", "the federation cannot place the whole batch; "
                                                             "what was created has been deleted");
    if (pl != NULL) {
      json_object_set_new(pl, "rolled_back", json_true());
      json_object_set(json_object_get(body, "error"), "clusters", json_object_get(pl, "clusters"));
      json_object_set(json_object_get(body, "error"), "placement", pl);
    }
    create__count_failed(q, cr->pool, cr->pool_private, cr->n);
    api_reply(q, 503, body, "Retry-After: 5\r\n");
    create__free(cr);
  }
}

static void item_json_free(void *user) {
  json_decref(user);
}

static const struct batch_hooks create_hooks = {on_item_done, on_wanted, on_batch_done, item_json_free};

/* ---- the queue's ops ---- */

static enum queue_try try_start(struct queue_entry *e, int warm_only) {
  struct create *cr = fr_container_of(e, struct create, qe);
  struct api_req *q = cr->q;
  struct router *r = q->r;
  struct fr_plan plan;
  struct fr_cluster_state *states = NULL;
  struct fr_policy *pol = NULL;
  const char *limit;
  int64_t want = cr->npending, room, count, planned = 0, cold = 0;
  enum queue_try out = QT_NO_ROOM;
  char msg[400];
  size_t i;
  int ncands = 0, k;

  memset(&plan, 0, sizeof(plan));
  cr->tried = 1;
  if (q->req == NULL) {
    create__end_unwanted(cr);
    return QT_ENDED;
  }
  /* The tenant's own limits first: they hold back nobody else. */
  room = quota_room(cr, &limit);
  if (room <= 0 || (!cr->partial_ok && room < want)) {
    if (strcmp(limit, "max_sandboxes") == 0)
      snprintf(msg, sizeof(msg), "tenant %s may hold %" PRId64 " sandboxes; this request would exceed that",
               q->tenant, cr->ts->max_sandboxes);
    else
      snprintf(msg, sizeof(msg), "tenant %s may hold what %s allows; this request would exceed that", q->tenant,
               limit);
    create__set_refusal(cr, 429, api_limit_body(msg, limit));
    return QT_QUOTA;
  }
  count = cr->partial_ok && room < want ? room : want;
  if (create__make_plan(cr, count, &plan, &states, &pol) != 0) {
    create__set_refusal(cr, 503, api_err_body("out_of_memory", "the router is out of memory"));
    goto out;
  }
  for (i = 0; i < plan.nentries; i++)
    if (plan.entries[i].verdict == FR_PLAN_USE) {
      ncands++;
      planned += plan.entries[i].count;
      cold += plan.entries[i].count - (cr->pool != NULL ? plan.entries[i].warm : 0);
    }
  if (ncands == 0 || planned == 0 || (!cr->partial_ok && plan.shortfall > 0)) {
    create__set_refusal(cr, 503, create__no_room_body(r, &plan, states, ncands));
    goto out;
  }
  /* Behind a create held back for lack of room, only warm claims go (they
   * take a pool's ready pods, not the room it waits for). */
  if (warm_only && cold > 0) {
    if (!cr->partial_ok || planned - cold <= 0) {
      create__set_refusal(cr, 503, api_err_body("no_capacity", "no room now: the room that frees goes first to creates "
                                                       "of tenants with a smaller share, waiting before this one"));
      goto out;
    }
    planned -= cold;
  }
  /* A partial_ok create that waits starts what the plan says fits and
   * waits for the rest; one that does not wait tries every item it may
   * (the clusters' answers say what fits: the view may be stale). */
  if (cr->partial_ok && cr->qe.deadline_ms == 0 && !warm_only)
    planned = count;
  cr->b = batch_new(&cr->spec, cr->name, (int)planned, cr->partial_ok, (int)r->nadapters, &create_hooks, cr);
  if (cr->b == NULL) {
    create__set_refusal(cr, 503, api_err_body("out_of_memory", "the router is out of memory"));
    goto out;
  }
  for (k = 0; k < (int)planned; k++)
    batch_set_number(cr->b, k, cr->pending[k], cr->n > 1);
  {
    int64_t left = planned;
    /* Every usable cluster is a candidate in the plan's order, those it
     * gave nothing too: the batch moves items on to them when the ones
     * before say they are full (the view may be stale). */
    for (i = 0; i < plan.nentries; i++) {
      const struct fr_plan_entry *pe = &plan.entries[i];
      int64_t c = pe->count, w = cr->pool != NULL ? pe->warm : 0;
      const char *code, *detail;
      if (pe->verdict != FR_PLAN_USE)
        continue;
      if (warm_only)
        c = w < c ? w : c;
      if (c > left)
        c = left;
      if (w > c)
        w = c;
      /* Warm claims use pods that already hold their slots: the cold part
       * reserves slots, the warm part reserves the pool's ready pods. */
      batch_add_cand(cr->b, r->adapters[pe->cluster], c, w);
      /* Not the plan's first choice: what it makes is spilled. */
      cr->b->cands[cr->b->ncands - 1].not_first = !pe->first_choice;
      if (cr->sf != NULL)
        cr->b->cands[cr->b->ncands - 1].secrets = secrets_values(cr->sf, pe->cluster, &code, &detail);
      left -= c;
    }
  }
  cr->counted = planned;
  cr->counted_cpu_m = planned * cr->spec.cpu_m;
  cr->counted_mem_b = planned * cr->spec.mem_b;
  cr->counted_gpus = planned * cr->gpus;
  if (cr->ts != NULL) {
    cr->ts->creating += cr->counted;
    cr->ts->creating_cpu_m += cr->counted_cpu_m;
    cr->ts->creating_mem_b += cr->counted_mem_b;
    cr->ts->creating_gpus += cr->counted_gpus;
  }
  if (cr->waited) {
    struct fr_buf l;
    fr_buf_init(&l);
    metrics_label(&l, "tenant", q->tenant);
    metrics_inc(r->metrics, "fedrouter_queue_started_sandboxes_total", l.data ? l.data : "", (double)planned);
    fr_buf_free(&l);
  }
  out = planned == want ? QT_STARTED : QT_PARTIAL;
  fr_plan_free(&plan);
  free(states);
  fr_policy_unref(pol);
  /* The batch's done hook answers (or waits again); <cr> may be gone when
   * this returns. */
  batch_start(cr->b);
  return out;
out:
  fr_plan_free(&plan);
  free(states);
  fr_policy_unref(pol);
  return out;
}

static void expire(struct queue_entry *e, const char *why) {
  create__give_up(fr_container_of(e, struct create, qe), why);
}

const struct queue_entry_ops create__queue_ops = {try_start, expire};

