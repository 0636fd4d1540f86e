/* create_answer.c - the answers of a create (POST /v1/sandboxes) and its
 * end: 201 with what was made, the refusal of its last try, 499 when the
 * client left (what was made goes), and the create's free. Calls no other
 * file of the create (create_answer.h, create_try.h).
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
#include "history.h"
#include "metrics.h"
#include "queue.h"
#include "router.h"
#include "secrets.h"
#include "tenants.h"
#include "workspaces.h"

void create__uncount(struct create *cr) {
  if (cr->ts != NULL) {
    cr->ts->creating -= cr->counted;
    cr->ts->creating_cpu_m -= cr->counted_cpu_m;
    cr->ts->creating_mem_b -= cr->counted_mem_b;
    cr->ts->creating_gpus -= cr->counted_gpus;
  }
  cr->counted = cr->counted_cpu_m = cr->counted_mem_b = cr->counted_gpus = 0;
}

/* A create that will not give its answer to q->created_cb tells it so. */
static void created_drop(struct api_req *q) {
  void (*cb)(struct api_req *, json_t *, void *) = q->created_cb;

  q->created_cb = NULL;
  if (cb != NULL)
    cb(q, NULL, q->created_arg);
}

void create__free(struct create *cr) {
  /* Any end but create__answer_made(): a fork's or restore_from's copy (waiting
   * on q->created_cb) will not happen. */
  created_drop(cr->q);
  create__uncount(cr);
  if (queue_waiting(&cr->qe))
    queue_remove(cr->q->r, &cr->qe);
  secrets_fetch_free(cr->sf); /* its values go before the batch that borrows them... */
  if (cr->b != NULL)
    for (int k = 0; k < cr->b->ncands; k++)
      cr->b->cands[k].secrets = NULL; /* ...which must not hand them on */
  batch_free(cr->b);
  tenant_unref(cr->ts);
  free(cr->pool);
  free(cr->image);
  free(cr->pending);
  free(cr->cl);
  json_decref(cr->env);
  json_decref(cr->labels);
  json_decref(cr->clusters);
  json_decref(cr->made);
  json_decref(cr->failed_placement);
  json_decref(cr->refusal);
  fr_podopts_unref(cr->opts);
  free(cr->egress);
  api_req_unref(cr->q);
  free(cr);
}

/* <n> sandboxes of the create of <q> for <pool> were not made. A
 * tenant's own pool counts as "_private": /metrics may be open, and the
 * name is that tenant's business. */
void create__count_failed(struct api_req *q, const char *pool, int pool_private, int64_t n) {
  struct fr_buf l;

  if (n <= 0)
    return;
  fr_buf_init(&l);
  metrics_label(&l, "tenant", tenant_label(q->r, q->tenant));
  metrics_label(&l, "pool", pool == NULL ? "" : pool_private ? "_private" : pool);
  metrics_inc(q->r->metrics, "fedrouter_sandbox_create_failures_total", l.data ? l.data : "", (double)n);
  fr_buf_free(&l);
  history_create_failed(q->r->history, q->tenant, n);
}

/* ---- answers ---- */

static json_t *placement_json(const struct create *cr) {
  struct router *r = cr->q->r;
  json_t *cl = json_array(), *pl;
  int warm = 0, created = (int)json_array_size(cr->made);
  size_t i;

  for (i = 0; i < r->nadapters; i++) {
    const struct create_cl_total *t = &cr->cl[i];
    json_t *e;
    if (!t->cand)
      continue;
    e = json_pack("{s:s,s:i,s:i}", "cluster", fr_adapter_name(r->adapters[i]), "created", t->created, "warm",
                  t->warm);
    if (t->reason[0])
      json_object_set_new(e, "reason", json_string(t->reason));
    warm += t->warm;
    json_array_append_new(cl, e);
  }
  pl = json_pack("{s:i,s:i,s:i,s:i,s:i,s:o}", "requested", cr->n, "created", created, "warm", warm, "cold",
                 created - warm, "shortfall", cr->n - created, "clusters", cl);
  if (pl != NULL) {
    json_object_set_new(pl, "client_region", json_string(cr->region));
    json_object_set_new(pl, "client_region_known", json_boolean(cr->region_known));
    if (cr->cold_reason[0] != '\0')
      json_object_set_new(pl, "cold_reason", json_string(cr->cold_reason));
    if (cr->qe.since_ms != 0 && cr->qe.deadline_ms != 0)
      json_object_set_new(pl, "waited_s", json_real((double)(uv_now(r->loop) - cr->t0_ms) / 1000.0));
  }
  return pl;
}

/* The answer with what was made (all of it, or with partial_ok what could
 * be), and the end of the create. */
void create__answer_made(struct create *cr) {
  struct api_req *q = cr->q;
  json_t *ans;
  struct fr_buf note;
  size_t i;

  fr_buf_init(&note);
  for (i = 0; i < q->r->nadapters; i++)
    if (cr->cl[i].created > 0)
      fr_buf_printf(&note, "%s%s:%d", note.len ? "," : "", fr_adapter_name(q->r->adapters[i]), cr->cl[i].created);
  if (q->req != NULL)
    router_note(q->req, "placement", note.data ? note.data : "");
  fr_buf_free(&note);
  create__count_failed(q, cr->pool, cr->pool_private, cr->n - (int64_t)json_array_size(cr->made));
  ans = json_pack("{s:O,s:o}", "sandboxes", cr->made, "placement", placement_json(cr));
  if (q->created_cb != NULL && ans != NULL) {
    /* A fork's or restore_from's copy runs first; it answers. */
    void (*cb)(struct api_req *, json_t *, void *) = q->created_cb;
    q->created_cb = NULL;
    cb(q, ans, q->created_arg);
  } else {
    api_reply(q, 201, ans, NULL);
  }
  create__free(cr);
}

/* Nothing to answer (the client left): what was made and committed goes,
 * since nobody can learn its ids. */
void create__end_unwanted(struct create *cr) {
  struct router *r = cr->q->r;
  json_t *sb;
  size_t i;

  json_array_foreach(cr->made, i, sb) {
    const char *id = json_string_value(json_object_get(sb, "id")), *dot = id ? strchr(id, '.') : NULL;
    char cluster[64];
    struct fr_adapter *a;
    if (dot == NULL || (size_t)(dot - id) >= sizeof(cluster))
      continue;
    snprintf(cluster, sizeof(cluster), "%.*s", (int)(dot - id), id);
    if ((a = api_adapter(r, cluster)) != NULL)
      fr_adapter_sandbox_delete(a, dot + 1, cr->q->rid, NULL, NULL);
  }
  api_reply(cr->q, 499, NULL, NULL);
  create__free(cr);
}

/* Gives up: with partial_ok and something made, that; else the refusal
 * of its last try (<why>: the router is stopping). */
void create__give_up(struct create *cr, const char *why) {
  struct api_req *q = cr->q;
  json_t *body;
  char msg[400];

  if (q->req == NULL) {
    create__end_unwanted(cr);
    return;
  }
  if (cr->partial_ok && json_array_size(cr->made) > 0) {
    create__answer_made(cr);
    return;
  }
  if (why != NULL) {
    api_fail(q, 503, "shutting_down", why, "Retry-After: 1\r\n");
    create__free(cr);
    return;
  }
  /* It may not wait: the queue holds as much as it may. */
  if (cr->qe.overflow == QO_TENANT) {
    snprintf(msg, sizeof(msg), "tenant %s has %" PRId64 " sandboxes waiting for room already "
             "(max_queued_sandboxes %" PRId64 "); this create does not fit now and may not wait", q->tenant,
             queue_sandboxes(q->r, cr->ts), cr->ts->max_queued_sandboxes);
    api_reply(q, 429, api_limit_body(msg, "max_queued_sandboxes"), "Retry-After: 10\r\n");
    create__free(cr);
    return;
  }
  if (cr->qe.overflow == QO_FULL) {
    snprintf(msg, sizeof(msg), "the router's queue holds %" PRId64 " sandboxes waiting for room (queue.max_sandboxes "
             "%" PRId64 "); this create does not fit now and may not wait", queue_sandboxes(q->r, NULL),
             q->cfg->queue_max_sandboxes);
    api_fail(q, 503, "queue_full", msg, "Retry-After: 10\r\n");
    create__free(cr);
    return;
  }
  if (cr->refusal == NULL) {
    /* Never tried: others of its tenant wait before it, or the room that
     * frees is promised to a tenant with a smaller share. */
    snprintf(msg, sizeof(msg), "no room now: the room that frees goes first to creates waiting before this one "
             "(wait_s lets a create wait its turn)");
    cr->refusal = api_err_body("no_capacity", msg);
    cr->refusal_status = 503;
  }
  body = cr->refusal;
  cr->refusal = NULL;
  if (cr->qe.deadline_ms != 0)
    json_object_set_new(json_object_get(body, "error"), "waited_s",
                        json_real((double)(uv_now(q->r->loop) - cr->t0_ms) / 1000.0));
  if (cr->refusal_status == 503)
    create__count_failed(q, cr->pool, cr->pool_private, cr->n);
  api_reply(q, cr->refusal_status, body, cr->refusal_status == 429 ? "Retry-After: 10\r\n" : "Retry-After: 5\r\n");
  create__free(cr);
}

/* 503 no_capacity with every cluster's reason: the federation's free
 * capacity cannot hold what the create asks now. */
json_t *create__no_room_body(struct router *r, const struct fr_plan *plan, const struct fr_cluster_state *states,
                            int ncands) {
  json_t *body = api_err_body("no_capacity", ncands == 0 ? "no cluster can take this request"
                                                         : "the federation does not have room for the whole batch");
  json_t *reasons = json_array();
  size_t i;

  for (i = 0; i < plan->nentries; i++) {
    const struct fr_cluster_state *cs = &states[plan->entries[i].cluster];
    struct fr_adapter_view v;
    char why[400];
    /* Say what bounds the room when it is a quota, not the nodes. */
    fr_adapter_view(r->adapters[plan->entries[i].cluster], &v);
    if (v.quota_pods >= 0 && v.quota_pods <= cs->free_slots + v.inflight)
      snprintf(why, sizeof(why), "%s; the namespace's ResourceQuota allows %" PRId64 " more pods",
               plan->entries[i].reason, v.quota_pods);
    else
      snprintf(why, sizeof(why), "%s", plan->entries[i].reason);
    json_array_append_new(reasons, json_pack("{s:s,s:I,s:I,s:s}", "cluster", cs->name, "free_slots",
                                             (json_int_t)cs->free_slots, "warm_ready",
                                             (json_int_t)cs->warm_ready, "reason", why));
  }
  json_object_set_new(json_object_get(body, "error"), "clusters", reasons);
  json_object_set_new(json_object_get(body, "error"), "shortfall", json_integer(plan->shortfall));
  return body;
}

/* The answer should it give up now; its code and message (and the
 * shortfall) say in GET /v1/queue why it waits. */
void create__set_refusal(struct create *cr, int status, json_t *body) {
  json_t *err = json_object_get(body, "error");
  json_t *sf = json_object_get(err, "shortfall"), *limit = json_object_get(err, "limit");

  cr->waited = cr->qe.deadline_ms != 0; /* not started: it waits (if it may) */
  json_decref(cr->refusal);
  cr->refusal = body;
  cr->refusal_status = status;
  if (sf != NULL)
    snprintf(cr->qe.why, sizeof(cr->qe.why), "%s: shortfall %" JSON_INTEGER_FORMAT " of %d",
             json_string_value(json_object_get(err, "code")), json_integer_value(sf), cr->npending);
  else if (limit != NULL)
    snprintf(cr->qe.why, sizeof(cr->qe.why), "%s: %s", json_string_value(json_object_get(err, "code")),
             json_string_value(limit));
  else
    snprintf(cr->qe.why, sizeof(cr->qe.why), "%s: %.150s", json_string_value(json_object_get(err, "code")),
             json_string_value(json_object_get(err, "message")));
}

