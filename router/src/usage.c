/* usage.c - GET /v1/usage?from=&to=&group_by=tenant|pool|region|cluster
 * [&tenant=]: what sandboxes used over a time range, from Prometheus
 * (docs/api.md). The counters it reads are the usage families of /metrics
 * (docs/metrics.md): computed by every replica from the clusters' state, so
 * the queries take the max across replicas before they sum. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/config.h"
#include "fr/http.h"
#include "fr/util.h"
#include "api.h"
#include "history.h"
#include "promq.h"
#include "router.h"
#include "tenants.h"

#define MAX_RANGE_S (366 * 86400)
/* How much a counter grew over the range, per series: the last value
 * less the first when it never went down (exact: no extrapolation to the
 * range's ends, so three creates are 3, not increase()'s 3.15), and
 * increase() for a series that reset (a router replica restarted). */
#define DELTA(sel, range)                                                                                         \
  "((max_over_time(" sel "[" range "]) - min_over_time(" sel "[" range "])) unless (resets(" sel "[" range "]) > 0) " \
  "or increase(" sel "[" range "]))"

static const char *const measures[] = {"sandbox_seconds", "cpu_core_seconds", "memory_gib_seconds", "gpu_seconds",
                                       "cost_dollars"};
#define NMEASURES 5
enum { UQ_CREATES = NMEASURES, UQ_FAILED, UQ_N };

struct usage_op {
  struct api_req *q;
  char group[16];
  int64_t from, to;
  struct promq_query qs[UQ_N];
  char exprs[UQ_N][1400];
};

/* A time: RFC 3339 ("2026-11-22T00:00:00Z") or unix seconds. */
static int parse_time(const char *s, int64_t *out) {
  if (fr_parse_int64(s, 0, INT64_C(253402300799), out) == 0)
    return 0;
  return fr_time_parse_rfc3339(s, out);
}

/* The row of <key> in <rows> (an object of rows by group value), made with
 * zeros when new. */
static json_t *row_of(struct usage_op *op, json_t *rows, const char *key) {
  json_t *row = json_object_get(rows, key);
  size_t i;

  if (row != NULL)
    return row;
  row = json_object();
  json_object_set_new(row, op->group, json_string(key));
  for (i = 0; i < NMEASURES; i++)
    json_object_set_new(row, measures[i], json_real(0));
  json_object_set_new(row, "creates", json_pack("{s:i,s:i,s:i,s:i}", "warm", 0, "cold", 0, "spilled", 0, "failed", 0));
  json_object_set_new(rows, key, row);
  return row;
}

static double value_of(json_t *e) {
  const char *s = json_string_value(json_array_get(json_object_get(e, "value"), 1));
  double v = s != NULL ? strtod(s, NULL) : NAN;

  return isfinite(v) ? v : 0;
}

static const char *group_of(const struct usage_op *op, json_t *e) {
  const char *g = json_string_value(json_object_get(json_object_get(e, "metric"), op->group));

  return g != NULL ? g : "";
}

static void on_usage(struct promq_query *qs, size_t n, void *arg) {
  struct usage_op *op = arg;
  struct api_req *q = op->q;
  json_t *rows = json_object(), *list = json_array(), *e, *row, *body;
  const char *k;
  char from[21], to[21], msg[600];
  size_t i, m;
  double unplaced = 0;
  int per_group_failures = strcmp(op->group, "tenant") == 0 || strcmp(op->group, "pool") == 0;

  for (i = 0; i < n; i++) {
    if (!qs[i].ok) {
      snprintf(msg, sizeof(msg), "Prometheus (metrics.prometheus_url) did not answer: %s", qs[i].error);
      api_fail(q, 502, "prometheus_unavailable", msg, NULL);
      goto out;
    }
  }
  for (m = 0; m < NMEASURES; m++)
    json_array_foreach(qs[m].result, i, e) {
      row = row_of(op, rows, group_of(op, e));
      json_object_set_new(row, measures[m], json_real(round(value_of(e) * 1e6) / 1e6));
    }
  json_array_foreach(qs[UQ_CREATES].result, i, e) {
    const char *o = json_string_value(json_object_get(json_object_get(e, "metric"), "outcome"));
    if (o == NULL || (strcmp(o, "warm") != 0 && strcmp(o, "cold") != 0 && strcmp(o, "spilled") != 0))
      continue;
    row = row_of(op, rows, group_of(op, e));
    /* increase() extrapolates to the range's ends: creates are whole. */
    json_object_set_new(json_object_get(row, "creates"), o, json_integer((json_int_t)llround(value_of(e))));
  }
  json_array_foreach(qs[UQ_FAILED].result, i, e) {
    if (per_group_failures) {
      row = row_of(op, rows, group_of(op, e));
      json_object_set_new(json_object_get(row, "creates"), "failed", json_integer((json_int_t)llround(value_of(e))));
    } else {
      unplaced += value_of(e);
    }
  }
  json_object_foreach(rows, k, row) json_array_append(list, row);
  fr_time_rfc3339(op->from, from);
  fr_time_rfc3339(op->to, to);
  body = json_pack("{s:s,s:s,s:s,s:s,s:o,s:s}", "from", from, "to", to, "group_by", op->group, "source",
                   "prometheus", "usage", list, "note",
                   "how much the usage counters grew over the range in Prometheus (max across router "
                   "replicas; Prometheus' increase() where a replica restarted)");
  list = NULL;
  if (body != NULL && !per_group_failures)
    json_object_set_new(body, "creates_failed", json_integer((json_int_t)llround(unplaced)));
  api_reply(q, body != NULL ? 200 : 503, body != NULL ? body : api_err_body("out_of_memory", "out of memory"), NULL);
out:
  json_decref(list);
  json_decref(rows);
  free(op);
}

void usage_get(struct api_req *q, const struct route_params *p) {
  static const char *const keys[] = {"from", "to", "group_by", "tenant", NULL};
  static const char *const groups[] = {"tenant", "pool", "region", "cluster", NULL};
  struct usage_op *op;
  char v[64], tf[160], msg[300], sel[240], rs[32];
  const char *tenant = NULL;
  int64_t range;
  size_t i;
  long n;

  (void)p;
  if (history_query_keys(q, keys) != 0)
    return;
  if (q->r->prom == NULL) {
    api_fail(q, 501, "prometheus_not_configured",
             "usage over time is read from Prometheus, and this router has none: set metrics.prometheus_url in "
             "its config (docs/operations.md). /metrics exports the usage counters; /v1/history answers from "
             "memory meanwhile",
             NULL);
    return;
  }
  if ((op = calloc(1, sizeof(*op))) == NULL) {
    api_oom(q);
    return;
  }
  op->q = q;
  op->to = fr_wall_ms() / 1000;
  if ((n = fr_http_query_get(q->req->query, "to", v, sizeof(v))) != -ENOENT &&
      (n < 0 || parse_time(v, &op->to) != 0)) {
    api_fail(q, 400, "invalid_time", "to is a time: RFC 3339 (2026-11-22T00:00:00Z) or unix seconds", NULL);
    goto fail;
  }
  op->from = op->to - 86400;
  if ((n = fr_http_query_get(q->req->query, "from", v, sizeof(v))) != -ENOENT &&
      (n < 0 || parse_time(v, &op->from) != 0)) {
    api_fail(q, 400, "invalid_time", "from is a time: RFC 3339 (2026-11-22T00:00:00Z) or unix seconds", NULL);
    goto fail;
  }
  range = op->to - op->from;
  if (range <= 0 || range > MAX_RANGE_S) {
    api_fail(q, 400, "invalid_range", "from must be before to, and the range at most 366 days", NULL);
    goto fail;
  }
  snprintf(op->group, sizeof(op->group), "tenant");
  if ((n = fr_http_query_get(q->req->query, "group_by", v, sizeof(v))) != -ENOENT) {
    for (i = 0; n >= 0 && groups[i] != NULL && strcmp(groups[i], v) != 0; i++)
      ;
    if (n < 0 || groups[i] == NULL) {
      api_fail(q, 400, "invalid_group_by", "group_by is tenant, pool, region or cluster", NULL);
      goto fail;
    }
    snprintf(op->group, sizeof(op->group), "%s", groups[i]);
  }
  /* A tenant sees itself; an admin everyone, or the one it names. */
  if ((n = fr_http_query_get(q->req->query, "tenant", v, sizeof(v))) != -ENOENT) {
    if (n < 0 || router_tenant(q->r, v) == NULL) {
      api_fail(q, 404, "tenant_not_found", "no tenant of that name in the router config", NULL);
      goto fail;
    }
    if (!(q->ts != NULL && q->ts->admin) && strcmp(v, q->tenant) != 0) {
      snprintf(msg, sizeof(msg), "tenant %s may see its own usage only", q->tenant);
      api_fail(q, 403, "forbidden", msg, NULL);
      goto fail;
    }
    tenant = router_tenant(q->r, v)->name;
  } else if (!(q->ts != NULL && q->ts->admin)) {
    tenant = q->ts != NULL ? q->ts->name : q->tenant;
  }
  if (tenant != NULL)
    snprintf(tf, sizeof(tf), "tenant=\"%s\"", tenant); /* config names: nothing to escape */
  else
    tf[0] = '\0';
  snprintf(rs, sizeof(rs), "%" PRId64 "s", range);
  for (i = 0; i < NMEASURES; i++) {
    snprintf(sel, sizeof(sel), "fedrouter_%s_total{%s}", measures[i], tf);
    snprintf(op->exprs[i], sizeof(op->exprs[i]), "sum by (%s) (max by (" HISTORY_USAGE_KEY ") (" DELTA("%s", "%s") "))",
             op->group, sel, rs, sel, rs, sel, rs, sel, rs);
  }
  snprintf(sel, sizeof(sel), "fedrouter_sandbox_creates_total{%s}", tf);
  snprintf(op->exprs[UQ_CREATES], sizeof(op->exprs[0]),
           "sum by (%s, outcome) (max by (" HISTORY_USAGE_KEY ", outcome) (" DELTA("%s", "%s") "))", op->group, sel, rs, sel,
           rs, sel, rs, sel, rs);
  /* Failures are counted by the replica that served the create: summed. A
   * failed create was never placed: no region, no cluster. */
  snprintf(sel, sizeof(sel), "fedrouter_sandbox_create_failures_total{%s}", tf);
  if (strcmp(op->group, "tenant") == 0 || strcmp(op->group, "pool") == 0)
    snprintf(op->exprs[UQ_FAILED], sizeof(op->exprs[0]), "sum by (%s) (" DELTA("%s", "%s") ")", op->group, sel, rs,
             sel, rs, sel, rs, sel, rs);
  else
    snprintf(op->exprs[UQ_FAILED], sizeof(op->exprs[0]), "sum(" DELTA("%s", "%s") ")", sel, rs, sel, rs, sel, rs,
             sel, rs);
  for (i = 0; i < UQ_N; i++) {
    op->qs[i].expr = op->exprs[i];
    op->qs[i].time = (double)op->to;
  }
  if (history_prom_run(q, op->qs, UQ_N, on_usage, op) != 0)
    free(op);
  return;
fail:
  free(op);
}
