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
 *
 * This file is the request: the body checked, the create set up and handed
 * to the queue (or explained). Its tries are create_try.c's, its answers
 * create_answer.c's (create_answer.h, create_try.h).
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
  int auto_resume;         /* auto_resume: any call into it while paused resumes it (workspaces.c) */
};


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
  if (strlen(s->name) > CREATE_NAME_MAX || !fr_label_value_valid(s->name) ||
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

/* ---- the request ---- */

/* The client went away: a waiting create ends now; one that runs a batch
 * ends when the batch does (it rolls back), one reading Secrets when the
 * reads are done. */
static void create_gone(struct api_req *q, void *arg) {
  struct create *cr = arg;

  (void)q;
  if (queue_waiting(&cr->qe)) {
    queue_remove(q->r, &cr->qe);
    create__end_unwanted(cr);
  }
}

/* The explain answer for <cr> (its Secrets read, if it names any). */
static void explain(struct create *cr) {
  struct api_req *q = cr->q;
  struct fr_plan plan;
  struct fr_cluster_state *states = NULL;
  struct fr_policy *pol = NULL;
  json_t *out;

  if (create__make_plan(cr, cr->n, &plan, &states, &pol) != 0) {
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
  create__free(cr);
}

/* Ready to be placed: explained, or handed to the queue. */
static void go(struct create *cr) {
  struct router *r = cr->q->r;

  if (cr->explain) {
    explain(cr);
    return;
  }
  cr->t0_ms = uv_now(r->loop);
  cr->qe.ops = &create__queue_ops;
  cr->qe.ts = cr->ts;
  cr->qe.want = cr->npending;
  cr->qe.deadline_ms = cr->wait_s > 0 ? cr->t0_ms + (uint64_t)cr->wait_s : 0;
  if (cr->ts == NULL) {
    api_fail(cr->q, 503, "out_of_memory", "the request has no tenant record", NULL);
    create__free(cr);
    return;
  }
  /* Tried at once; <cr> may be answered and gone when this returns. */
  if (queue_add(r, &cr->qe, 0, 1) != 0) {
    api_oom(cr->q);
    create__free(cr);
  }
}

/* Every cluster's Secret has been read. */
static void on_secrets(int status, json_t *body, void *arg) {
  struct create *cr = arg;
  struct api_req *q = cr->q;

  if (q->req == NULL) {
    json_decref(body);
    api_reply(q, 499, NULL, NULL);
    create__free(cr);
    return;
  }
  if (status != 0) {
    api_reply(q, status, body, NULL);
    create__free(cr);
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

void sandboxes_fork(struct api_req *q, const struct route_params *p) {
  json_t *j;

  if (fork_prepare(q, p, &j) != 0)
    return;
  create_sandboxes_checked(q, j); /* takes <j>; answers itself unless it creates (then the copy) */
  restore_from_settle(q);
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
  q->refs++; /* <q> outlives its answer until create__free() (created_drop) */
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
    create__free(cr);
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
    create__free(cr);
  json_decref(j);
}
