/* create.c - POST /v1/sandboxes and POST /v1/placement/explain.
 *
 * Validates the body, finds the pool's shape, checks the tenant's limit,
 * asks the policy for a plan over a fresh snapshot of the clusters, and
 * either explains it, refuses at once (the federation lacks room), or runs
 * it as a batch (batch.c) and answers with what the batch made.
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
#include "api.h"
#include "batch.h"
#include "history.h"
#include "metrics.h"
#include "router.h"
#include "secrets.h"

#define NAME_MAX_LEN 48

static const char *const create_fields[] = {"name", "num_sandboxes", "pool", "image", "cpus", "memory_gb",
                                            "env", "secrets", "volumes", "labels", "region", "clusters",
                                            "timeout_s", "partial_ok", "runtime_class", "node_selector",
                                            "tolerations", "gpus", "public_ports", "readiness", NULL};

/* "public_ports": "*" (every port) or an array of up to 16 ports (not the
 * agent's) anyone may reach through the sandbox's preview URLs, as label
 * fedrouter.io/public-ports ("all" or "8000.8080"); 0 or -1 answered. */
static int parse_public_ports(struct api_req *q, json_t *v, char *out, size_t cap) {
  size_t i, at = 0;
  json_t *e;

  out[0] = '\0';
  if (json_is_string(v) && strcmp(json_string_value(v), "*") == 0) {
    snprintf(out, cap, "all");
    return 0;
  }
  if (!json_is_array(v) || json_array_size(v) > 16)
    goto bad;
  json_array_foreach(v, i, e) {
    json_int_t port = json_is_integer(e) ? json_integer_value(e) : 0;
    int n;
    if (port < 1 || port > 65535 || port == FR_AGENT_DEFAULT_PORT)
      goto bad;
    n = snprintf(out + at, cap - at, "%s%d", at ? "." : "", (int)port);
    if (n < 0 || (size_t)n >= cap - at)
      goto bad;
    at += (size_t)n;
  }
  return 0;
bad:
  api_field_fail(q, "public_ports",
                 "public_ports is \"*\" or an array of up to 16 ports (1-65535, not the agent's 49983)");
  return -1;
}

/* The create body, validated; strings borrowed from its JSON. */
struct body_spec {
  const char *name;
  int64_t n;
  const char *pool, *image;
  int64_t cpu_m, mem_b; /* 0: not asked (the pool's, else 1 cpu and 2 GiB) */
  json_t *env, *labels, *clusters, *secrets;
  const char *region;
  int64_t timeout_s;
  int partial_ok;
  char public_ports[128];  /* label fedrouter.io/public-ports: "all", "8000.8080"; "" = private */
};

/* A create in progress: owns its strings, the batch and the request's
 * operation reference. */
struct create {
  struct api_req *q;
  struct batch *b;
  int64_t counted;            /* sandboxes counted in the tenant's `creating` */
  char name[NAME_MAX_LEN + 1];
  char region[64];            /* the client region placement used */
  int region_known;           /* a cluster's region or one the policy names */
  char *pool, *image;
  int pool_private;           /* <pool> is a tenant's own: "_private" in metrics labels */
  json_t *env, *labels;
  struct fr_podopts *opts;    /* the sandboxes' pod options; NULL = none */
  char cold_reason[300];      /* why the named pool's warm pods cannot serve it, "" = they can */
  struct secrets_fetch *sf;   /* the values of `secrets`, read before the batch starts */
};

static void create_free(struct create *cr) {
  if (cr->counted != 0 && cr->q->ts != NULL)
    cr->q->ts->creating -= cr->counted;
  secrets_fetch_free(cr->sf); /* first: it unhooks its values from the batch */
  batch_free(cr->b);
  free(cr->pool);
  free(cr->image);
  json_decref(cr->env);
  json_decref(cr->labels);
  fr_podopts_unref(cr->opts);
  free(cr);
}

/* Validates the create body; answers and returns -1 on error. */
static int parse_create(struct api_req *q, json_t *j, struct body_spec *s) {
  const struct fr_config *cfg = q->r->cfg;
  const char *k;
  json_t *v;
  size_t i;
  char msg[300];

  memset(s, 0, sizeof(*s));
  s->name = "sandbox";
  s->n = 1;
  s->timeout_s = cfg->default_lifetime_s;
#define STR_FIELD(key, dst)                                                  \
  if ((v = json_object_get(j, key)) != NULL) {                               \
    if (!json_is_string(v) || json_string_length(v) == 0) {                  \
      api_field_fail(q, key, key " must be a non-empty string");             \
      return -1;                                                             \
    }                                                                        \
    dst = json_string_value(v);                                              \
  }
  STR_FIELD("name", s->name);
  STR_FIELD("pool", s->pool);
  STR_FIELD("image", s->image);
  STR_FIELD("region", s->region);
#undef STR_FIELD
  if (strlen(s->name) > NAME_MAX_LEN || !fr_label_value_valid(s->name) ||
      strspn(s->name, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(s->name)) {
    api_field_fail(q, "name", "name must be 1-48 characters of a-z, 0-9 and '-', starting and ending alphanumeric");
    return -1;
  }
  if ((v = json_object_get(j, "num_sandboxes")) != NULL) {
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > cfg->max_batch) {
      snprintf(msg, sizeof(msg), "num_sandboxes must be an integer from 1 to %" PRId64, cfg->max_batch);
      api_field_fail(q, "num_sandboxes", msg);
      return -1;
    }
    s->n = json_integer_value(v);
  }
  if ((v = json_object_get(j, "timeout_s")) != NULL) {
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > cfg->max_lifetime_s) {
      snprintf(msg, sizeof(msg), "timeout_s must be an integer from 1 to %" PRId64, cfg->max_lifetime_s);
      api_field_fail(q, "timeout_s", msg);
      return -1;
    }
    s->timeout_s = json_integer_value(v);
  }
  if (api_body_resources(q, j, &s->cpu_m, &s->mem_b) != 0)
    return -1;
  if (s->image != NULL && api_image_check(q, s->image) != 0)
    return -1;
  if ((v = json_object_get(j, "partial_ok")) != NULL) {
    if (!json_is_boolean(v)) {
      api_field_fail(q, "partial_ok", "partial_ok must be true or false");
      return -1;
    }
    s->partial_ok = json_is_true(v);
  }
  if ((v = json_object_get(j, "env")) != NULL) {
    json_t *e;
    if (!json_is_object(v)) {
      api_field_fail(q, "env", "env must be an object of strings");
      return -1;
    }
    json_object_foreach(v, k, e) {
      if (!json_is_string(e) || *k == '\0' || strchr(k, '=') != NULL) {
        api_field_fail(q, "env", "env must map names (without '=') to strings");
        return -1;
      }
    }
    s->env = v;
  }
  if (secrets_parse(q, json_object_get(j, "secrets"), s->env, &s->secrets) != 0)
    return -1;
  if ((v = json_object_get(j, "labels")) != NULL) {
    json_t *e;
    if (!json_is_object(v)) {
      api_field_fail(q, "labels", "labels must be an object of strings");
      return -1;
    }
    json_object_foreach(v, k, e) {
      if (!json_is_string(e) || !fr_label_key_valid(k) || !fr_label_value_valid(json_string_value(e)) ||
          strncmp(k, FR_LABEL_PREFIX, strlen(FR_LABEL_PREFIX)) == 0) {
        snprintf(msg, sizeof(msg), "label \"%.100s\" is not a valid Kubernetes label (keys under %s are reserved)",
                 k, FR_LABEL_PREFIX);
        api_field_fail(q, "labels", msg);
        return -1;
      }
    }
    s->labels = v;
  }
  if ((v = json_object_get(j, "public_ports")) != NULL && parse_public_ports(q, v, s->public_ports,
                                                                            sizeof(s->public_ports)) != 0)
    return -1;
  if ((v = json_object_get(j, "clusters")) != NULL) {
    json_t *e;
    if (!json_is_array(v) || json_array_size(v) == 0) {
      api_field_fail(q, "clusters", "clusters must be a non-empty array of cluster names");
      return -1;
    }
    json_array_foreach(v, i, e) {
      if (!json_is_string(e)) {
        api_field_fail(q, "clusters", "clusters must be a non-empty array of cluster names");
        return -1;
      }
      if (api_adapter(q->r, json_string_value(e)) == NULL) {
        snprintf(msg, sizeof(msg), "no cluster named \"%.100s\"", json_string_value(e));
        api_fail(q, 404, "cluster_not_found", msg, NULL);
        return -1;
      }
    }
    s->clusters = v;
  }
  if (s->pool == NULL && s->image == NULL) {
    api_field_fail(q, "image", "either pool or image is required");
    return -1;
  }
  return 0;
}

/* The pod options of create body <j> into cr->opts: the request's own, or
 * the pool's when it asks for none (a pool fixes the shape). Options that
 * differ from the pool's make the create cold, and cr->cold_reason says
 * why. Answers and returns -1 on a bad option. */
static int create_podopts(struct api_req *q, json_t *j, const struct fr_adapter_pool_view *pv,
                          struct create *cr) {
  const char *field;
  char msg[300], *have;
  int rc = fr_podopts_parse(j, &cr->opts, &field, msg, sizeof(msg));

  if (rc == -EINVAL) {
    api_field_fail(q, field, msg);
    return -1;
  }
  if (rc != 0) {
    api_oom(q);
    return -1;
  }
  if (pv == NULL)
    return 0;
  if (cr->opts == NULL) {
    cr->opts = fr_podopts_ref(pv->opts);
  } else if (!fr_podopts_equal(cr->opts, pv->opts)) {
    have = pv->opts ? json_dumps(fr_podopts_json(pv->opts), JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    snprintf(cr->cold_reason, sizeof(cr->cold_reason),
             "pool %s has other pod options (%.200s): its warm pods cannot serve this request", pv->name,
             have ? have : "none");
    free(have);
  }
  return 0;
}

/* The shape of pool <pool> from any cluster that has it, if the tenant of
 * <q> may use it (its own or a shared one); NULL otherwise. */
static const struct fr_adapter_pool_view *pool_shape(struct api_req *q, const char *pool) {
  const struct fr_adapter_pool_view *pv;
  size_t i;

  for (i = 0; i < q->r->nadapters; i++)
    if ((pv = fr_adapter_pool(q->r->adapters[i], pool)) != NULL && pv->image[0] != '\0' && api_pool_usable(q, pv))
      return pv;
  return NULL;
}

/* A region some cluster is in, or one the policy knows (groups too). */
static int region_known(struct router *r, const char *region) {
  size_t i;

  for (i = 0; i < r->cfg->nclusters; i++)
    if (strcmp(r->cfg->clusters[i].region, region) == 0)
      return 1;
  return fr_policy_knows_region(r->policy, region) || strcmp(r->cfg->region, region) == 0;
}

static int64_t tenant_count(struct router *r, const char *tenant) {
  int64_t n = 0;
  size_t i;

  for (i = 0; i < r->nadapters; i++)
    n += fr_adapter_tenant_sandboxes(r->adapters[i], tenant);
  return n;
}

/* The policy's plan for <cr> (its batch spec filled) from a fresh snapshot
 * of the clusters. <pol> gets a reference the caller drops. */
static int make_plan(struct router *r, const struct create *cr, const struct body_spec *s, const char *region,
                     struct fr_plan *plan, struct fr_cluster_state **states, struct fr_policy **pol) {
  const char **keys = NULL, **vals = NULL, **clusters = NULL;
  struct fr_placement_request preq;
  const char *k;
  json_t *v;
  size_t i = 0;
  int rc = -ENOMEM;

  memset(plan, 0, sizeof(*plan));
  *pol = fr_policy_ref(r->policy);
  *states = placement_states(r, &cr->b->spec);
  keys = calloc(json_object_size(cr->labels) + 1, sizeof(*keys));
  vals = calloc(json_object_size(cr->labels) + 1, sizeof(*vals));
  clusters = calloc(json_array_size(s->clusters) + 1, sizeof(*clusters));
  if (*states == NULL || keys == NULL || vals == NULL || clusters == NULL)
    goto out;
  json_object_foreach(cr->labels, k, v) {
    keys[i] = k;
    vals[i++] = json_string_value(v);
  }
  memset(&preq, 0, sizeof(preq));
  preq.tenant = cr->q->tenant;
  preq.pool = cr->pool;
  preq.region = region;
  preq.label_keys = keys;
  preq.label_values = vals;
  preq.nlabels = i;
  json_array_foreach(s->clusters, i, v) clusters[i] = json_string_value(v);
  preq.clusters = s->clusters ? clusters : NULL;
  preq.nclusters = json_array_size(s->clusters);
  preq.count = cr->b->n;
  rc = fr_policy_plan(*pol, *states, r->nadapters, &preq, plan);
out:
  free(keys);
  free(vals);
  free(clusters);
  return rc;
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
  metrics_label(&l, "tenant", history_tenant_label(r, cr->q->tenant));
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

/* <n> sandboxes of the create of <q> for <pool> were not made. A
 * tenant's own pool counts as "_private": /metrics may be open, and the
 * name is that tenant's business. */
static void count_failed(struct api_req *q, const char *pool, int pool_private, int64_t n) {
  struct fr_buf l;

  if (n <= 0)
    return;
  fr_buf_init(&l);
  metrics_label(&l, "tenant", history_tenant_label(q->r, q->tenant));
  metrics_label(&l, "pool", pool == NULL ? "" : pool_private ? "_private" : pool);
  metrics_inc(q->r->metrics, "fedrouter_sandbox_create_failures_total", l.data ? l.data : "", (double)n);
  fr_buf_free(&l);
  history_create_failed(q->r->history, q->tenant, n);
}

static int on_wanted(void *arg) {
  struct create *cr = arg;

  /* A client that went away cannot learn the ids: keep nothing. */
  return cr->q->req != NULL;
}

static json_t *placement_json(const struct batch *b) {
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

/* Where the client was taken to be, for the answer. */
static void set_client_region(json_t *placement, const struct create *cr) {
  json_object_set_new(placement, "client_region", json_string(cr->region));
  json_object_set_new(placement, "client_region_known", json_boolean(cr->region_known));
}

static void on_batch_done(struct batch *b, void *arg) {
  struct create *cr = arg;
  struct api_req *q = cr->q;
  int i;

  /* api_reply() drops the request's operation reference, which can free q:
   * settle the tenant's count of sandboxes being made first, so that
   * create_free() below does not reach q. */
  if (q->ts != NULL)
    q->ts->creating -= cr->counted;
  cr->counted = 0;
  count_failed(q, cr->pool, cr->pool_private, b->state == BATCH_COMMITTED ? b->n - batch_created(b) : b->n);

  if (b->state == BATCH_COMMITTED) {
    json_t *arr = json_array(), *placement = placement_json(b);
    struct fr_buf note;

    fr_buf_init(&note);
    for (i = 0; i < b->ncands; i++)
      if (b->cands[i].created > 0)
        fr_buf_printf(&note, "%s%s:%d", note.len ? "," : "", fr_adapter_name(b->cands[i].a), b->cands[i].created);
    if (q->req != NULL)
      router_note(q->req, "placement", note.data ? note.data : "");
    fr_buf_free(&note);
    for (i = 0; i < b->n; i++)
      if (b->items[i].ok && b->items[i].user != NULL)
        json_array_append(arr, b->items[i].user);
    set_client_region(placement, cr);
    if (cr->cold_reason[0] != '\0')
      json_object_set_new(placement, "cold_reason", json_string(cr->cold_reason));
    api_reply(q, 201, json_pack("{s:o,s:o}", "sandboxes", arr, "placement", placement), NULL);
  } else {
    char why[600];
    json_t *body;
    /* Made, but a cluster did not take the commit marker: nothing kept. */
    snprintf(why, sizeof(why), "the batch could not be committed (%s); what was created has been deleted",
             b->commit_error);
    body = b->commit_error[0] ? api_err_body("commit_failed", why)
                              : api_err_body("no_capacity", "the federation cannot place the whole batch; "
                                                            "what was created has been deleted");
    json_t *pl = placement_json(b);
    json_object_set_new(pl, "rolled_back", json_true());
    json_object_set(json_object_get(body, "error"), "clusters", json_object_get(pl, "clusters"));
    json_object_set_new(json_object_get(body, "error"), "placement", pl);
    api_reply(q, 503, body, "Retry-After: 5\r\n");
  }
  create_free(cr);
}

static void item_json_free(void *user) {
  json_decref(user);
}

static const struct batch_hooks create_hooks = {on_item_done, on_wanted, on_batch_done, item_json_free};

/* Every planned cluster's Secret is read: start the batch, or refuse
 * with nothing created. */
static void on_secrets(int status, json_t *body, void *arg) {
  struct create *cr = arg;
  struct api_req *q = cr->q;

  if (status == 0 && q->req != NULL) {
    batch_start(cr->b);
    return;
  }
  create_free(cr); /* settles the tenant's count while <q> is alive */
  api_reply(q, status ? status : 499, body, NULL);
}

/* ---- the handler ---- */

/* 503 no_capacity at once, with every cluster's reason: the federation's
 * free capacity cannot hold the batch, so nothing is created and rolled
 * back. */
static void refuse_no_room(struct api_req *q, const struct fr_plan *plan, const struct fr_cluster_state *states,
                           int ncands, const struct create *cr) {
  struct router *r = q->r;
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
  count_failed(q, cr->pool, cr->pool_private, cr->b->n);
  api_reply(q, 503, body, "Retry-After: 5\r\n");
}

void create_sandboxes(struct api_req *q, int explain) {
  json_t *j = api_body_object(q, create_fields, 0);

  if (j != NULL)
    create_sandboxes_from(q, j, explain, 0);
}

void create_sandboxes_from(struct api_req *q, json_t *j, int explain, int extendable) {
  struct router *r = q->r;
  const struct fr_adapter_pool_view *pv = NULL;
  struct tenant_state *ts = q->ts;
  struct fr_sandbox_spec spec;
  struct body_spec s;
  struct create *cr = NULL;
  const char *region;
  char msg[400];
  struct fr_plan plan;
  struct fr_cluster_state *states = NULL;
  struct fr_policy *pol = NULL;
  size_t i;
  int ncands = 0;

  memset(&plan, 0, sizeof(plan));
  if (j == NULL || parse_create(q, j, &s) != 0)
    goto out;
  if (s.pool != NULL && (pv = pool_shape(q, s.pool)) == NULL) {
    api_pool_missing(q, s.pool);
    goto out;
  }
  /* Sandboxes the tenant holds, plus those its other batches are still
   * making: concurrent creates cannot all slip under the limit. */
  if (ts != NULL && ts->max_sandboxes > 0 &&
      tenant_count(r, q->tenant) + ts->creating + s.n > ts->max_sandboxes) {
    snprintf(msg, sizeof(msg), "tenant %s may hold %" PRId64 " sandboxes; this request would exceed that",
             q->tenant, ts->max_sandboxes);
    api_reply(q, 429, api_limit_body(msg, "max_sandboxes"), "Retry-After: 10\r\n");
    goto out;
  }
  cr = calloc(1, sizeof(*cr));
  if (cr == NULL)
    goto oom;
  cr->q = q;
  snprintf(cr->name, sizeof(cr->name), "%s", s.name);
  cr->pool = s.pool ? strdup(s.pool) : NULL;
  cr->pool_private = pv != NULL && pv->owner != NULL;
  cr->image = strdup(s.image ? s.image : pv->image);
  cr->env = s.env ? json_incref(s.env) : NULL;
  cr->labels = s.labels ? json_incref(s.labels) : NULL;
  if (s.public_ports[0] != '\0') {
    /* The user's labels and fedrouter's: a copy, the body's stays as sent. */
    json_t *l = s.labels ? json_copy(s.labels) : json_object();
    json_decref(cr->labels);
    cr->labels = l;
    if (l == NULL || json_object_set_new(l, FR_LABEL_PUBLIC_PORTS, json_string(s.public_ports)) != 0)
      goto oom;
  }
  if (cr->image == NULL || (s.pool != NULL && cr->pool == NULL))
    goto oom;
  if (create_podopts(q, j, pv, cr) != 0)
    goto out;
  memset(&spec, 0, sizeof(spec));
  spec.tenant = q->tenant;
  spec.pool = cr->pool;
  spec.image = cr->image;
  /* A pool fixes the shape; otherwise the request's (default 1 cpu, 2 GiB). */
  spec.cpu_m = pv ? pv->cpu_m : s.cpu_m > 0 ? s.cpu_m : 1000;
  spec.mem_b = pv ? pv->mem_b : s.mem_b > 0 ? s.mem_b : (int64_t)2 << 30;
  spec.opts = cr->opts;
  spec.env = cr->env;
  spec.labels = cr->labels;
  spec.lifetime_s = s.timeout_s;
  spec.deadline_s = extendable ? r->cfg->max_lifetime_s : 0;
  spec.request_id = q->rid;
  cr->b = batch_new(&spec, cr->name, (int)s.n, s.partial_ok, (int)r->nadapters, &create_hooks, cr);
  if (cr->b == NULL)
    goto oom;
  /* The plan: the policy orders the clusters and splits the count; the
   * batch follows it, and moves items on when a cluster says it is full. */
  region = s.region ? s.region : fr_http_req_header(q->req, "X-Client-Region");
  if (region == NULL || *region == '\0')
    region = r->cfg->region;
  /* A region no cluster is in and the policy does not name ("eu" for
   * "europe", or a client region this deployment does not serve) gives no
   * preference: every cluster is equally far. Placed all the same, but
   * the answer says so (client_region_known), never silently. */
  cr->region_known = region_known(r, region);
  snprintf(cr->region, sizeof(cr->region), "%s", region);
  if (make_plan(r, cr, &s, region, &plan, &states, &pol) != 0)
    goto oom;
  if (explain) {
    json_t *out = json_pack("{s:{s:s,s:s},s:{s:s,s:s?,s:s,s:b,s:i},s:o}", "policy", "source",
                            fr_policy_source(pol), "version", fr_policy_version(pol), "request", "tenant",
                            q->tenant, "pool", cr->pool, "region", region, "region_known", cr->region_known,
                            "num_sandboxes", cr->b->n, "plan", fr_plan_json(&plan, states));
    if (out != NULL && cr->opts != NULL)
      json_object_set(json_object_get(out, "request"), "pod_options", fr_podopts_json(cr->opts));
    if (out != NULL && cr->cold_reason[0] != '\0')
      json_object_set_new(out, "cold_reason", json_string(cr->cold_reason));
    api_reply(q, 200, out, NULL);
    goto out;
  }
  for (i = 0; i < plan.nentries; i++)
    ncands += plan.entries[i].verdict == FR_PLAN_USE;
  if (ncands == 0 || (plan.shortfall > 0 && !s.partial_ok)) {
    refuse_no_room(q, &plan, states, ncands, cr);
    goto out;
  }
  for (i = 0; i < plan.nentries; i++) {
    const struct fr_plan_entry *e = &plan.entries[i];
    /* Warm claims use pods that already hold their slots: the cold part
     * reserves slots, the warm part reserves the pool's ready pods. */
    if (e->verdict == FR_PLAN_USE) {
      batch_add_cand(cr->b, r->adapters[e->cluster], e->count, e->warm);
      cr->b->cands[cr->b->ncands - 1].not_first = !e->first_choice;
    }
  }
  if (s.secrets != NULL && (cr->sf = secrets_fetch_new(q, s.secrets)) == NULL)
    goto oom;
  fr_plan_free(&plan);
  free(states);
  fr_policy_unref(pol);
  json_decref(j); /* <region> and <s> borrowed from it until here */
  cr->counted = s.n;
  if (ts != NULL)
    ts->creating += cr->counted;
  api_defer(q);
  if (cr->sf != NULL)
    secrets_fetch_start(cr->sf, cr->b, on_secrets, cr); /* then the batch, or a refusal */
  else
    batch_start(cr->b); /* the batch's done hook answers and frees cr */
  return;
oom:
  api_oom(q);
out:
  if (cr != NULL)
    create_free(cr);
  fr_plan_free(&plan);
  free(states);
  fr_policy_unref(pol);
  json_decref(j);
}
