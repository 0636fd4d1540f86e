/* create.c - POST /v1/sandboxes and POST /v1/placement/explain.
 *
 * Validates the body, finds the pool's shape, reads the tenant's Secret
 * where the create names `secrets` (secrets.c: a cluster that lacks a key
 * cannot host it), and either explains the plan or hands the create to
 * the queue (queue.c), which tries it at once and, when it asked to wait
 * (`wait_s`) and does not fit, again whenever room may have freed, in
 * fair-share order. Each try asks the policy for a plan over a fresh
 * snapshot of the clusters and runs it as a batch (batch.c):
 *
 *   all or nothing: one batch of every item once the whole create fits;
 *     a batch that rolls back for lack of room waits again while it may;
 *   partial_ok: a batch of what fits now; the rest waits (at the front of
 *     its tenant's line) until it fits or the wait is over, then the
 *     answer holds what was made and the shortfall.
 *
 * Items keep their numbers (<name>-0001, ...) across batches. The create
 * answers once: 201 with every sandbox made, or the refusal of its last
 * try (503 no_capacity, 429 tenant_limit) once its wait is over.
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
#include "history.h"
#include "metrics.h"
#include "queue.h"
#include "router.h"
#include "secrets.h"
#include "tenants.h"
#include "workspaces.h"

#define NAME_MAX_LEN 48

static const char *const create_fields[] = {"name", "num_sandboxes", "pool", "image", "cpus", "memory_gb",
                                            "env", "secrets", "volumes", "labels", "region", "clusters",
                                            "timeout_s", "partial_ok", "runtime_class", "node_selector",
                                            "tolerations", "gpus", "public_ports", "readiness", "wait_s", "workspace",
                                            "on_timeout", "auto_resume", "restore_from", "network", NULL};

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
  int64_t wait_s;
  int partial_ok;
  char public_ports[128];  /* label fedrouter.io/public-ports: "all", "8000.8080"; "" = private */
  int pause_on_timeout;    /* on_timeout "pause": paused at its expiry, not terminated */
  int auto_resume;         /* auto_resume: recorded for the E2B lifecycle (connect resumes) */
};

/* What the create made in one cluster, over all its batches. */
struct cl_total {
  int cand;                   /* it was a candidate of some batch */
  int created, warm;
  char reason[300];
};

/* A create in progress: owns its strings, its batch, its place in the
 * queue and the request's operation reference. */
struct create {
  struct queue_entry qe;      /* its place in the queue (queue.c) */
  struct api_req *q;
  struct tenant_state *ts;    /* a reference; NULL for no tenant record */
  int explain;
  char name[NAME_MAX_LEN + 1];
  int n;
  int partial_ok;
  int64_t wait_s;
  char region[64];            /* the client region placement used */
  int region_known;           /* a cluster's region or one the policy names */
  char *pool, *image;
  int pool_private;           /* <pool> is a tenant's own: "_private" in metrics labels */
  json_t *env, *labels, *clusters; /* references; clusters: the request's restriction, or NULL */
  struct fr_podopts *opts;    /* the sandboxes' pod options; NULL = none */
  int64_t gpus;               /* per sandbox */
  struct fr_egress *egress;   /* where they may connect; NULL = the default (no policy) */
  char cold_reason[300];      /* why the named pool's warm pods cannot serve it, "" = they can */
  struct fr_sandbox_spec spec;/* the batches' spec (strings borrowed from here) */
  struct secrets_fetch *sf;   /* the values of `secrets`, read before it is placed */
  /* progress */
  int *pending;               /* the numbers of the items not made yet, ascending */
  int npending;
  json_t *made;               /* the sandboxes made (API JSON), a reference */
  struct cl_total *cl;        /* per adapter */
  struct batch *b;            /* the batch running, or NULL */
  json_t *failed_placement;   /* the last rolled back batch's placement, for its answer */
  char commit_error[400];
  int64_t counted, counted_cpu_m, counted_mem_b, counted_gpus; /* in the tenant's `creating` */
  json_t *refusal;            /* the answer of its last try that did not start */
  int refusal_status;
  int tried;                  /* it has been tried at least once */
  int waited;                 /* a try did not start it: it waited in the queue */
  uint64_t t0_ms;             /* when it was handed to the queue */
};

static void uncount(struct create *cr) {
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

static void create_free(struct create *cr) {
  /* Any end but answer_made(): a fork's or restore_from's copy (waiting
   * on q->created_cb) will not happen. */
  created_drop(cr->q);
  uncount(cr);
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

/* Validates the create body; answers and returns -1 on error. */
static int parse_create(struct api_req *q, json_t *j, struct body_spec *s) {
  const struct fr_config *cfg = q->cfg;
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
    int64_t max = api_max_lifetime(q);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max) {
      snprintf(msg, sizeof(msg), "timeout_s must be an integer from 1 to %" PRId64 " (the tenant's max_lifetime_s)",
               max);
      api_field_fail(q, "timeout_s", msg);
      return -1;
    }
    s->timeout_s = json_integer_value(v);
  }
  if ((v = json_object_get(j, "wait_s")) != NULL) {
    if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > (double)cfg->queue_max_wait_s) {
      snprintf(msg, sizeof(msg), "wait_s must be a number of seconds from 0 to %" PRId64 " (queue.max_wait_s)",
               cfg->queue_max_wait_s);
      api_field_fail(q, "wait_s", msg);
      return -1;
    }
    s->wait_s = (int64_t)(json_number_value(v) * 1000 + 0.5); /* in ms from here on */
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
  if ((v = json_object_get(j, "on_timeout")) != NULL) {
    if (!json_is_string(v) ||
        (strcmp(json_string_value(v), "pause") != 0 && strcmp(json_string_value(v), "terminate") != 0)) {
      api_field_fail(q, "on_timeout", "on_timeout is \"terminate\" (the default) or \"pause\" (needs a workspace)");
      return -1;
    }
    s->pause_on_timeout = strcmp(json_string_value(v), "pause") == 0;
    if (s->pause_on_timeout && json_object_get(j, "workspace") == NULL) {
      api_field_fail(q, "on_timeout", "on_timeout \"pause\" needs a workspace: what a paused sandbox keeps");
      return -1;
    }
  }
  if ((v = json_object_get(j, "auto_resume")) != NULL) {
    if (!json_is_boolean(v) || (json_is_true(v) && !s->pause_on_timeout)) {
      api_field_fail(q, "auto_resume", "auto_resume is a boolean, true only with on_timeout \"pause\"");
      return -1;
    }
    s->auto_resume = json_is_true(v);
  }
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

/* The policy's plan for <count> sandboxes of <cr> from a fresh snapshot of
 * the clusters; a cluster whose Secret lacks a key it asks for cannot
 * host it. <pol> gets a reference the caller drops. */
static int make_plan(struct create *cr, int64_t count, struct fr_plan *plan, struct fr_cluster_state **states,
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

/* ---- answers ---- */

static json_t *placement_json(const struct create *cr) {
  struct router *r = cr->q->r;
  json_t *cl = json_array(), *pl;
  int warm = 0, created = (int)json_array_size(cr->made);
  size_t i;

  for (i = 0; i < r->nadapters; i++) {
    const struct cl_total *t = &cr->cl[i];
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
static void answer_made(struct create *cr) {
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
  count_failed(q, cr->pool, cr->pool_private, cr->n - (int64_t)json_array_size(cr->made));
  ans = json_pack("{s:O,s:o}", "sandboxes", cr->made, "placement", placement_json(cr));
  if (q->created_cb != NULL && ans != NULL) {
    /* A fork's or restore_from's copy runs first; it answers. */
    void (*cb)(struct api_req *, json_t *, void *) = q->created_cb;
    q->created_cb = NULL;
    cb(q, ans, q->created_arg);
  } else {
    api_reply(q, 201, ans, NULL);
  }
  create_free(cr);
}

/* Nothing to answer (the client left): what was made and committed goes,
 * since nobody can learn its ids. */
static void end_unwanted(struct create *cr) {
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
  create_free(cr);
}

/* Gives up: with partial_ok and something made, that; else the refusal
 * of its last try (<why>: the router is stopping). */
static void give_up(struct create *cr, const char *why) {
  struct api_req *q = cr->q;
  json_t *body;
  char msg[400];

  if (q->req == NULL) {
    end_unwanted(cr);
    return;
  }
  if (cr->partial_ok && json_array_size(cr->made) > 0) {
    answer_made(cr);
    return;
  }
  if (why != NULL) {
    api_fail(q, 503, "shutting_down", why, "Retry-After: 1\r\n");
    create_free(cr);
    return;
  }
  /* It may not wait: the queue holds as much as it may. */
  if (cr->qe.overflow == QO_TENANT) {
    snprintf(msg, sizeof(msg), "tenant %s has %" PRId64 " sandboxes waiting for room already "
             "(max_queued_sandboxes %" PRId64 "); this create does not fit now and may not wait", q->tenant,
             queue_sandboxes(q->r, cr->ts), cr->ts->max_queued_sandboxes);
    api_reply(q, 429, api_limit_body(msg, "max_queued_sandboxes"), "Retry-After: 10\r\n");
    create_free(cr);
    return;
  }
  if (cr->qe.overflow == QO_FULL) {
    snprintf(msg, sizeof(msg), "the router's queue holds %" PRId64 " sandboxes waiting for room (queue.max_sandboxes "
             "%" PRId64 "); this create does not fit now and may not wait", queue_sandboxes(q->r, NULL),
             q->cfg->queue_max_sandboxes);
    api_fail(q, 503, "queue_full", msg, "Retry-After: 10\r\n");
    create_free(cr);
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
    count_failed(q, cr->pool, cr->pool_private, cr->n);
  api_reply(q, cr->refusal_status, body, cr->refusal_status == 429 ? "Retry-After: 10\r\n" : "Retry-After: 5\r\n");
  create_free(cr);
}

/* 503 no_capacity with every cluster's reason: the federation's free
 * capacity cannot hold what the create asks now. */
static json_t *no_room_body(struct router *r, const struct fr_plan *plan, const struct fr_cluster_state *states,
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
static void set_refusal(struct create *cr, int status, json_t *body) {
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

/* The create can never fit its tenant's limits, however long it waits:
 * answers 429 and returns 1. */
static int never_fits(struct api_req *q, struct create *cr) {
  struct tenant_state *ts = cr->ts;
  const char *limit = NULL;
  char msg[400];

  if (ts == NULL || cr->partial_ok)
    return 0;
  if (ts->max_sandboxes > 0 && cr->n > ts->max_sandboxes)
    limit = "max_sandboxes";
  else if (ts->max_cpu_m > 0 && cr->n * cr->spec.cpu_m > ts->max_cpu_m)
    limit = "max_cpus";
  else if (ts->max_mem_b > 0 && cr->n * cr->spec.mem_b > ts->max_mem_b)
    limit = "max_memory_gb";
  else if (ts->max_gpus > 0 && cr->n * cr->gpus > ts->max_gpus)
    limit = "max_gpus";
  if (limit == NULL)
    return 0;
  snprintf(msg, sizeof(msg), "tenant %s may hold at most what %s allows; %d sandboxes of this shape never fit it",
           q->tenant, limit, cr->n);
  api_reply(q, 429, api_limit_body(msg, limit), "Retry-After: 10\r\n");
  return 1;
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

  uncount(cr);
  /* What it made joins the create's total, its numbers leave the pending. */
  for (k = 0; k < b->ncands; k++) {
    struct cl_total *t = &cr->cl[adapter_index(r, b->cands[k].a)];
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
    end_unwanted(cr);
    return;
  }
  if (cr->npending == 0) {
    answer_made(cr);
    return;
  }
  if (cr->commit_error[0] == '\0' && wait_again(cr))
    return;
  if (cr->partial_ok && json_array_size(cr->made) > 0) {
    answer_made(cr);
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
    count_failed(q, cr->pool, cr->pool_private, cr->n);
    api_reply(q, 503, body, "Retry-After: 5\r\n");
    create_free(cr);
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
    end_unwanted(cr);
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
    set_refusal(cr, 429, api_limit_body(msg, limit));
    return QT_QUOTA;
  }
  count = cr->partial_ok && room < want ? room : want;
  if (make_plan(cr, count, &plan, &states, &pol) != 0) {
    set_refusal(cr, 503, api_err_body("out_of_memory", "the router is out of memory"));
    goto out;
  }
  for (i = 0; i < plan.nentries; i++)
    if (plan.entries[i].verdict == FR_PLAN_USE) {
      ncands++;
      planned += plan.entries[i].count;
      cold += plan.entries[i].count - (cr->pool != NULL ? plan.entries[i].warm : 0);
    }
  if (ncands == 0 || planned == 0 || (!cr->partial_ok && plan.shortfall > 0)) {
    set_refusal(cr, 503, no_room_body(r, &plan, states, ncands));
    goto out;
  }
  /* Behind a create held back for lack of room, only warm claims go (they
   * take a pool's ready pods, not the room it waits for). */
  if (warm_only && cold > 0) {
    if (!cr->partial_ok || planned - cold <= 0) {
      set_refusal(cr, 503, api_err_body("no_capacity", "no room now: the room that frees goes first to creates "
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
    set_refusal(cr, 503, api_err_body("out_of_memory", "the router is out of memory"));
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
  give_up(fr_container_of(e, struct create, qe), why);
}

static const struct queue_entry_ops create_ops = {try_start, expire};

/* ---- the request ---- */

/* The client went away: a waiting create ends now; one that runs a batch
 * ends when the batch does (it rolls back), one reading Secrets when the
 * reads are done. */
static void create_gone(struct api_req *q, void *arg) {
  struct create *cr = arg;

  (void)q;
  if (queue_waiting(&cr->qe)) {
    queue_remove(q->r, &cr->qe);
    end_unwanted(cr);
  }
}

/* The explain answer for <cr> (its Secrets read, if it names any). */
static void explain(struct create *cr) {
  struct api_req *q = cr->q;
  struct fr_plan plan;
  struct fr_cluster_state *states = NULL;
  struct fr_policy *pol = NULL;
  json_t *out;

  if (make_plan(cr, cr->n, &plan, &states, &pol) != 0) {
    api_oom(q);
  } else {
    out = json_pack("{s:{s:s,s:s},s:{s:s,s:s?,s:s,s:b,s:i},s:o}", "policy", "source", fr_policy_source(pol),
                    "version", fr_policy_version(pol), "request", "tenant", q->tenant, "pool", cr->pool, "region",
                    cr->region, "region_known", cr->region_known, "num_sandboxes", cr->n, "plan",
                    fr_plan_json(&plan, states));
    if (out != NULL && cr->opts != NULL)
      json_object_set(json_object_get(out, "request"), "pod_options", fr_podopts_json(cr->opts));
    if (out != NULL)
      json_object_set_new(json_object_get(out, "request"), "network", network_json(cr->egress));
    if (out != NULL && cr->cold_reason[0] != '\0')
      json_object_set_new(out, "cold_reason", json_string(cr->cold_reason));
    api_reply(q, 200, out, NULL);
  }
  fr_plan_free(&plan);
  free(states);
  fr_policy_unref(pol);
  create_free(cr);
}

/* Ready to be placed: explained, or handed to the queue. */
static void go(struct create *cr) {
  struct router *r = cr->q->r;

  if (cr->explain) {
    explain(cr);
    return;
  }
  cr->t0_ms = uv_now(r->loop);
  cr->qe.ops = &create_ops;
  cr->qe.ts = cr->ts;
  cr->qe.want = cr->npending;
  cr->qe.deadline_ms = cr->wait_s > 0 ? cr->t0_ms + (uint64_t)cr->wait_s : 0;
  if (cr->ts == NULL) {
    api_fail(cr->q, 503, "out_of_memory", "the request has no tenant record", NULL);
    create_free(cr);
    return;
  }
  /* Tried at once; <cr> may be answered and gone when this returns. */
  if (queue_add(r, &cr->qe, 0, 1) != 0) {
    api_oom(cr->q);
    create_free(cr);
  }
}

/* Every cluster's Secret has been read. */
static void on_secrets(int status, json_t *body, void *arg) {
  struct create *cr = arg;
  struct api_req *q = cr->q;

  if (q->req == NULL) {
    json_decref(body);
    api_reply(q, 499, NULL, NULL);
    create_free(cr);
    return;
  }
  if (status != 0) {
    api_reply(q, status, body, NULL);
    create_free(cr);
    return;
  }
  go(cr);
}

void create_sandboxes(struct api_req *q, int explain_only) {
  json_t *j = api_body_object(q, create_fields, 0);

  if (j == NULL)
    return;
  if (explain_only) {
    json_object_del(j, "restore_from"); /* what a create copies is no placement matter */
  } else if (restore_from_prepare(q, j) != 0) {
    json_decref(j);
    return;
  }
  create_sandboxes_from(q, j, explain_only, 0);
  restore_from_settle(q);
}

void create_sandboxes_checked(struct api_req *q, json_t *j) {
  const char *k;
  json_t *v;
  size_t i;
  char msg[200];

  json_object_foreach(j, k, v) {
    for (i = 0; create_fields[i] != NULL && strcmp(create_fields[i], k) != 0; i++)
      ;
    if (create_fields[i] == NULL || strcmp(k, "restore_from") == 0 || strcmp(k, "num_sandboxes") == 0) {
      if (strcmp(k, "num_sandboxes") == 0)
        continue; /* set by the caller */
      snprintf(msg, sizeof(msg), "unknown field \"%.100s\"", k);
      api_field_fail(q, k, msg);
      json_decref(j);
      return;
    }
  }
  create_sandboxes_from(q, j, 0, 0);
}

void create_sandboxes_from(struct api_req *q, json_t *j, int explain_only, int extendable) {
  struct router *r = q->r;
  const struct fr_adapter_pool_view *pv = NULL;
  struct create *cr = NULL;
  struct body_spec s;
  const char *region;
  size_t i;
  int k, *use = NULL;

  if (j == NULL || parse_create(q, j, &s) != 0)
    goto out;
  if (s.pool != NULL && (pv = pool_shape(q, s.pool)) == NULL) {
    api_pool_missing(q, s.pool);
    goto out;
  }
  cr = calloc(1, sizeof(*cr));
  if (cr == NULL)
    goto oom;
  cr->q = q;
  q->refs++; /* <q> outlives its answer until create_free() (created_drop) */
  cr->ts = tenant_ref(q->ts);
  cr->explain = explain_only;
  snprintf(cr->name, sizeof(cr->name), "%s", s.name);
  cr->n = (int)s.n;
  cr->partial_ok = s.partial_ok;
  cr->wait_s = s.wait_s;
  cr->pool = s.pool ? strdup(s.pool) : NULL;
  cr->pool_private = pv != NULL && pv->owner != NULL;
  cr->image = strdup(s.image ? s.image : pv->image);
  cr->env = s.env ? json_incref(s.env) : NULL;
  cr->labels = s.labels ? json_incref(s.labels) : NULL;
  if (s.public_ports[0] != '\0' || s.pause_on_timeout) {
    /* The user's labels and fedrouter's: a copy, the body's stays as sent. */
    json_t *l = s.labels ? json_copy(s.labels) : json_object();
    char ttl[24];
    json_decref(cr->labels);
    cr->labels = l;
    if (l == NULL || (s.public_ports[0] != '\0' &&
                      json_object_set_new(l, FR_LABEL_PUBLIC_PORTS, json_string(s.public_ports)) != 0))
      goto oom;
    /* The reaper of any replica pauses it at its expiry, for the tenant's
     * max_paused_s (the adapter knows no tenant). */
    snprintf(ttl, sizeof(ttl), "%" PRId64, q->ts != NULL ? q->ts->max_paused_s : FR_DEFAULT_TENANT_PAUSED_S);
    if (s.pause_on_timeout && (json_object_set_new(l, FR_LABEL_ON_TIMEOUT, json_string("pause")) != 0 ||
                               json_object_set_new(l, FR_LABEL_PAUSED_TTL, json_string(ttl)) != 0 ||
                               (s.auto_resume && json_object_set_new(l, FR_LABEL_AUTO_RESUME, json_string("true")) != 0)))
      goto oom;
  }
  cr->clusters = s.clusters ? json_incref(s.clusters) : NULL;
  cr->made = json_array();
  cr->cl = calloc(r->nadapters ? r->nadapters : 1, sizeof(*cr->cl));
  cr->pending = calloc((size_t)s.n, sizeof(*cr->pending));
  if (cr->image == NULL || (s.pool != NULL && cr->pool == NULL) || cr->made == NULL || cr->cl == NULL ||
      cr->pending == NULL)
    goto oom;
  for (k = 0; k < cr->n; k++)
    cr->pending[k] = k + 1;
  cr->npending = cr->n;
  if (create_podopts(q, j, pv, cr) != 0 ||
      network_parse(q, json_object_get(j, "network"), q->ts != NULL && q->ts->has_network ? &q->ts->network : NULL,
                    &cr->egress) != 0)
    goto out;
  if (fr_podopts_workspace_bytes(cr->opts) > 0) {
    /* Every workspace of the tenant counts, running or paused. */
    int64_t paused, bytes, max = q->ts != NULL ? q->ts->max_workspace_bytes : FR_DEFAULT_TENANT_WORKSPACE_BYTES;
    workspace_tenant_usage(r, q->tenant, &paused, &bytes);
    if (max > 0 && bytes + s.n * fr_podopts_workspace_bytes(cr->opts) > max) {
      char msg[300];
      snprintf(msg, sizeof(msg), "tenant %s may hold %" PRId64 " bytes of workspaces (%" PRId64
               " held); this request would exceed that", q->tenant, max, bytes);
      api_reply(q, 429, api_limit_body(msg, "max_workspace_bytes"), "Retry-After: 60\r\n");
      goto out;
    }
  }
  cr->gpus = fr_podopts_gpus(cr->opts);
  cr->spec.tenant = q->tenant;
  cr->spec.pool = cr->pool;
  cr->spec.image = cr->image;
  /* A pool fixes the shape; otherwise the request's (default 1 cpu, 2 GiB). */
  cr->spec.cpu_m = pv ? pv->cpu_m : s.cpu_m > 0 ? s.cpu_m : 1000;
  cr->spec.mem_b = pv ? pv->mem_b : s.mem_b > 0 ? s.mem_b : (int64_t)2 << 30;
  cr->spec.opts = cr->opts;
  cr->spec.egress = cr->egress;
  cr->spec.env = cr->env;
  cr->spec.labels = cr->labels;
  cr->spec.lifetime_s = s.timeout_s;
  /* The pod's deadline in the cluster (what holds when no router is left)
   * is the tenant's longest lifetime, so keepalive and E2B's setTimeout can
   * move the expiry that every router's reaper enforces up to it. */
  (void)extendable;
  cr->spec.deadline_s = api_max_lifetime(q);
  cr->spec.request_id = q->rid;
  /* More than the tenant's limits could ever hold: no wait helps. */
  if (!explain_only && never_fits(q, cr))
    goto out;
  /* The plan: the policy orders the clusters and splits the count; the
   * batch follows it, and moves items on when a cluster says it is full. */
  region = s.region ? s.region : fr_http_req_header(q->req, "X-Client-Region");
  if (region == NULL || *region == '\0')
    region = q->cfg->region;
  /* A region no cluster is in and the policy does not name ("eu" for
   * "europe", or a client region this deployment does not serve) gives no
   * preference: every cluster is equally far. Placed all the same, but
   * the answer says so (client_region_known), never silently. */
  cr->region_known = region_known(r, region);
  snprintf(cr->region, sizeof(cr->region), "%s", region);
  if (s.secrets != NULL && (cr->sf = secrets_fetch_new(q, s.secrets)) == NULL)
    goto oom;
  json_decref(j); /* <s> borrowed from it until here */
  j = NULL;
  api_defer(q);
  q->gone_cb = create_gone;
  q->gone_arg = cr;
  if (cr->sf == NULL) {
    go(cr);
    return;
  }
  /* The tenant's Secret in every cluster the create may use (the ones it
   * names, else all): one without a key it names cannot host it. */
  if ((use = calloc(r->nadapters ? r->nadapters : 1, sizeof(*use))) == NULL) {
    api_oom(q);
    create_free(cr);
    return;
  }
  for (i = 0; i < r->nadapters; i++) {
    size_t c;
    json_t *e;
    use[i] = cr->clusters == NULL;
    json_array_foreach(cr->clusters, c, e) use[i] |= strcmp(json_string_value(e), fr_adapter_name(r->adapters[i])) == 0;
  }
  secrets_fetch_start(cr->sf, use, on_secrets, cr); /* then go(), or a refusal */
  free(use);
  return;
oom:
  api_oom(q);
out:
  if (cr != NULL)
    create_free(cr);
  json_decref(j);
}
