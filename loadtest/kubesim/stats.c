/* stats.c - what reaches kubesim's API: requests counted by verb, group,
 * resource and subresource as they arrive, and again with their status
 * code as they complete (the API server's apiserver_request_total), so a
 * benchmark can show what one exec or one sandbox create costs the API
 * server. Served as JSON on GET /_sim/stats (DELETE resets) and as
 * Prometheus text on GET /metrics.
 *
 * Counters live in fixed arrays indexed by verb x kind x subresource (a few
 * thousand counters, allocated once); completions add the status code, in
 * a small table of the combinations seen.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/buf.h"
#include "fr/util.h"
#include "sim.h"

/* Completions are kept per (verb, kind, subresource, code); distinct
 * combinations are few (a handful of codes per request kind). Past this
 * many, further new combinations are counted in <dropped>. */
#define MAX_RESPONSE_KEYS 1024

static const char *const verb_names[] = {"GET", "LIST", "WATCH", "POST", "PUT", "PATCH",
                                         "DELETE", "DELETECOLLECTION", "CONNECT", "OTHER"};
static const char *const sub_names[] = {"", "status", "exec", "log", "proxy", "eviction", "scale",
                                        "attach", "portforward", "binding", "other"};

struct resp_key {
  unsigned char verb, sub;
  unsigned short kind;        /* K_COUNT: not a resource request */
  int code;
  uint64_t n;
};

struct sim_stats {
  uint64_t req[API_VERB_COUNT][K_COUNT + 1][API_SUB_COUNT];
  struct resp_key resp[MAX_RESPONSE_KEYS];
  size_t nresp;
  uint64_t dropped;
  uint64_t total;
  char since[21];             /* when counting (re)started */
};

const char *api_sub_name(int sub) {
  return sub >= 0 && sub < API_SUB_COUNT ? sub_names[sub] : "other";
}

int api_sub_of(const char *name) {
  int i;

  if (name == NULL || *name == '\0')
    return API_SUB_NONE;
  for (i = 1; i < API_SUB_OTHER; i++)
    if (strcmp(name, sub_names[i]) == 0)
      return i;
  return API_SUB_OTHER;
}

int stats_init(struct sim *s) {
  s->stats = calloc(1, sizeof(*s->stats));
  if (s->stats == NULL)
    return -ENOMEM;
  now_rfc3339(s->stats->since);
  return 0;
}

void stats_free(struct sim *s) {
  free(s->stats);
  s->stats = NULL;
}

void stats_reset(struct sim *s) {
  if (s->stats == NULL)
    return;
  memset(s->stats, 0, sizeof(*s->stats));
  now_rfc3339(s->stats->since);
}

void stats_request(struct sim *s, const struct api_class *c) {
  if (s->stats == NULL)
    return;
  s->stats->req[c->verb][c->kind][c->sub]++;
  s->stats->total++;
}

void stats_response(struct sim *s, const struct api_class *c, int code) {
  struct sim_stats *st = s->stats;
  size_t i;

  if (st == NULL)
    return;
  for (i = 0; i < st->nresp; i++) {
    struct resp_key *k = &st->resp[i];
    if (k->verb == c->verb && k->kind == c->kind && k->sub == c->sub && k->code == code) {
      k->n++;
      return;
    }
  }
  if (st->nresp == MAX_RESPONSE_KEYS) {
    st->dropped++;
    return;
  }
  st->resp[st->nresp++] = (struct resp_key){(unsigned char)c->verb, (unsigned char)c->sub,
                                            (unsigned short)c->kind, code, 1};
}

/* group, version and resource of <kind> ("" for non-resource requests). */
static void kind_labels(int kind, const char **group, const char **version, const char **resource) {
  const char *gv;

  if (kind >= K_COUNT) {
    *group = *version = *resource = "";
    return;
  }
  *group = kind_group((enum sim_kind)kind);
  gv = kind_api_version((enum sim_kind)kind);
  *version = strchr(gv, '/') ? strchr(gv, '/') + 1 : gv;
  *resource = kind_resource((enum sim_kind)kind);
}

static int resp_cmp(const void *a, const void *b) {
  const struct resp_key *x = a, *y = b;

  if (x->kind != y->kind)
    return x->kind < y->kind ? -1 : 1;
  if (x->sub != y->sub)
    return x->sub < y->sub ? -1 : 1;
  if (x->verb != y->verb)
    return x->verb < y->verb ? -1 : 1;
  return x->code < y->code ? -1 : x->code > y->code;
}

/* Completions in a stable order (resource, subresource, verb, code). */
static struct resp_key *sorted_responses(const struct sim_stats *st) {
  struct resp_key *v = malloc((st->nresp ? st->nresp : 1) * sizeof(*v));

  if (v == NULL)
    return NULL;
  memcpy(v, st->resp, st->nresp * sizeof(*v));
  qsort(v, st->nresp, sizeof(*v), resp_cmp);
  return v;
}

json_t *stats_json(struct sim *s) {
  struct sim_stats *st = s->stats;
  json_t *out, *reqs, *resps;
  struct resp_key *rs;
  const char *g, *v, *r;
  int verb, kind, sub;
  size_t i;

  if (st == NULL || (rs = sorted_responses(st)) == NULL)
    return NULL;
  reqs = json_array();
  resps = json_array();
  for (kind = 0; kind <= K_COUNT; kind++)
    for (sub = 0; sub < API_SUB_COUNT; sub++)
      for (verb = 0; verb < API_VERB_COUNT; verb++) {
        if (st->req[verb][kind][sub] == 0)
          continue;
        kind_labels(kind, &g, &v, &r);
        json_array_append_new(reqs, json_pack("{s:s,s:s,s:s,s:s,s:s,s:I}", "verb", verb_names[verb], "group", g,
                                              "version", v, "resource", r, "subresource", sub_names[sub], "count",
                                              (json_int_t)st->req[verb][kind][sub]));
      }
  for (i = 0; i < st->nresp; i++) {
    kind_labels(rs[i].kind, &g, &v, &r);
    json_array_append_new(resps, json_pack("{s:s,s:s,s:s,s:s,s:s,s:i,s:I}", "verb", verb_names[rs[i].verb],
                                            "group", g, "version", v, "resource", r, "subresource",
                                            sub_names[rs[i].sub], "code", rs[i].code, "count",
                                            (json_int_t)rs[i].n));
  }
  free(rs);
  out = json_pack("{s:s,s:I,s:o,s:o,s:I}", "since", st->since, "requests_total", (json_int_t)st->total,
                  "requests", reqs, "responses", resps, "responses_not_kept", (json_int_t)st->dropped);
  return out;
}

int stats_prometheus(struct sim *s, struct fr_buf *b) {
  struct sim_stats *st = s->stats;
  struct resp_key *rs;
  const char *g, *v, *r;
  int verb, kind, sub, rc = 0;
  size_t i;

  if (st == NULL || (rs = sorted_responses(st)) == NULL)
    return -ENOMEM;
  rc |= fr_buf_puts(b, "# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, "
                       "group, version, resource, subresource and HTTP response code (kubesim; 0: the client "
                       "went away first).\n# TYPE apiserver_request_total counter\n");
  for (i = 0; i < st->nresp; i++) {
    kind_labels(rs[i].kind, &g, &v, &r);
    rc |= fr_buf_printf(b, "apiserver_request_total{code=\"%d\",group=\"%s\",resource=\"%s\",subresource=\"%s\","
                           "verb=\"%s\",version=\"%s\"} %llu\n", rs[i].code, g, r, sub_names[rs[i].sub],
                        verb_names[rs[i].verb], v, (unsigned long long)rs[i].n);
  }
  rc |= fr_buf_puts(b, "# HELP kubesim_api_requests_received_total Requests that reached kubesim's API, "
                       "counted as they arrive (watches and exec streams too, before they end).\n"
                       "# TYPE kubesim_api_requests_received_total counter\n");
  for (kind = 0; kind <= K_COUNT; kind++)
    for (sub = 0; sub < API_SUB_COUNT; sub++)
      for (verb = 0; verb < API_VERB_COUNT; verb++) {
        if (st->req[verb][kind][sub] == 0)
          continue;
        kind_labels(kind, &g, &v, &r);
        rc |= fr_buf_printf(b, "kubesim_api_requests_received_total{group=\"%s\",resource=\"%s\","
                               "subresource=\"%s\",verb=\"%s\",version=\"%s\"} %llu\n", g, r, sub_names[sub],
                            verb_names[verb], v, (unsigned long long)st->req[verb][kind][sub]);
      }
  free(rs);
  return rc != 0 ? -ENOMEM : 0;
}
