/* secrets.c - a create's `secrets` (secrets.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/config.h"
#include "api.h"
#include "batch.h"
#include "router.h"
#include "secrets.h"

#define NAME_MAX_LEN 128

/* One candidate cluster's read. */
struct secrets_read {
  struct secrets_fetch *f;
  int cand;
  struct fr_secret_call *call;  /* NULL once answered */
  json_t *values;               /* its answer, a reference (fr_secret_values_free) */
};

struct secrets_fetch {
  struct api_req *q;
  struct batch *b;
  json_t *names;                /* a copy */
  const char **keys;            /* borrowed from <names> */
  size_t nkeys;
  struct secrets_read *reads;   /* one per candidate */
  int nreads, pending;
  int status;                   /* the first refusal, 0 = none */
  json_t *body;                 /* its answer */
  secrets_done_cb done;
  void *arg;
};

static int env_name_valid(const char *s) {
  size_t i;

  if (!((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
    return 0;
  for (i = 1; s[i] != '\0'; i++)
    if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
          s[i] == '_'))
      return 0;
  return i <= NAME_MAX_LEN;
}

int secrets_parse(struct api_req *q, json_t *v, json_t *env, json_t **out) {
  char msg[400];
  json_t *e;
  size_t i, k;

  *out = NULL;
  if (v == NULL)
    return 0;
  if (!json_is_array(v) || json_array_size(v) > SECRETS_MAX) {
    snprintf(msg, sizeof(msg), "secrets must be an array of at most %d env var names (keys of the tenant's "
             "Secret)", SECRETS_MAX);
    api_field_fail(q, "secrets", msg);
    return -1;
  }
  json_array_foreach(v, i, e) {
    const char *name = json_string_value(e);
    if (name == NULL || !env_name_valid(name)) {
      api_field_fail(q, "secrets", "each secret must be an env var name: a letter or '_', then letters, "
                     "digits or '_', at most 128 characters");
      return -1;
    }
    for (k = 0; k < i; k++)
      if (strcmp(json_string_value(json_array_get(v, k)), name) == 0) {
        snprintf(msg, sizeof(msg), "secret %s is named twice", name);
        api_field_fail(q, "secrets", msg);
        return -1;
      }
    if (json_object_get(env, name) != NULL) {
      snprintf(msg, sizeof(msg), "%s is both in env and in secrets; give it once", name);
      api_field_fail(q, "secrets", msg);
      return -1;
    }
  }
  if (json_array_size(v) == 0)
    return 0;
  if (q->r->agent.image == NULL) {
    api_fail(q, 400, "agent_required",
             "secrets reach a sandbox only through its agent, and this router runs sandboxes without one "
             "(the config has no agent group); create without secrets, or ask the operator to enable the agent",
             NULL);
    return -1;
  }
  *out = v;
  return 0;
}

struct secrets_fetch *secrets_fetch_new(struct api_req *q, json_t *names) {
  struct secrets_fetch *f = calloc(1, sizeof(*f));
  json_t *e;
  size_t i;

  if (f == NULL)
    return NULL;
  f->q = q;
  f->names = json_deep_copy(names);
  f->keys = calloc(json_array_size(names) + 1, sizeof(*f->keys));
  if (f->names == NULL || f->keys == NULL) {
    secrets_fetch_free(f);
    return NULL;
  }
  json_array_foreach(f->names, i, e) f->keys[i] = json_string_value(e);
  f->nkeys = json_array_size(f->names);
  return f;
}

/* The first refusal wins; later ones are dropped. */
static void refuse(struct secrets_fetch *f, int status, const char *code, const char *msg, const char *key,
                   const char *cluster) {
  json_t *err;

  if (f->status != 0)
    return;
  f->status = status;
  f->body = api_err_body(code, msg);
  err = json_object_get(f->body, "error");
  if (key != NULL)
    json_object_set_new(err, "key", json_string(key));
  if (cluster != NULL)
    json_object_set_new(err, "cluster", json_string(cluster));
}

static void settle(struct secrets_fetch *f) {
  json_t *body;
  int status;

  if (f->status == 0 && f->body == NULL) {
    int k;
    for (k = 0; k < f->nreads; k++)
      f->b->cands[f->reads[k].cand].secrets = f->reads[k].values;
  }
  status = f->status;
  body = f->body;
  f->body = NULL;
  f->done(status, body, f->arg);
}

static void on_read(const struct fr_secret_result *res, void *arg) {
  struct secrets_read *rd = arg;
  struct secrets_fetch *f = rd->f;
  struct batch_cand *cd = &f->b->cands[rd->cand];
  const char *cluster = fr_adapter_name(cd->a);
  char msg[900];
  const char *k;
  json_t *v;
  size_t bytes = 0;

  rd->call = NULL;
  switch (res->err) {
  case FR_SECRET_OK:
    rd->values = json_incref(res->values);
    json_object_foreach(res->values, k, v) bytes += json_string_length(v);
    if (bytes > SECRETS_MAX_BYTES) {
      snprintf(msg, sizeof(msg), "the secrets asked for hold %zu bytes in cluster %s; at most %d go to a "
               "sandbox", bytes, cluster, SECRETS_MAX_BYTES);
      refuse(f, 400, "secret_too_large", msg, NULL, cluster);
    }
    break;
  case FR_SECRET_NOT_FOUND:
    snprintf(msg, sizeof(msg), "secret %s not found in cluster %s: %s", res->key ? res->key : f->keys[0],
             cluster, res->message);
    refuse(f, 400, "secret_not_found", msg, res->key ? res->key : f->keys[0], cluster);
    break;
  case FR_SECRET_INVALID:
    snprintf(msg, sizeof(msg), "secret %s in cluster %s: %s", res->key, cluster, res->message);
    refuse(f, 400, "secret_invalid", msg, res->key, cluster);
    break;
  default:
    /* Like any other failure of that cluster: the batch goes elsewhere. */
    batch_drop_cand(f->b, rd->cand, res->message);
    break;
  }
  if (--f->pending == 0)
    settle(f);
}

void secrets_fetch_start(struct secrets_fetch *f, struct batch *b, secrets_done_cb done, void *arg) {
  struct tenant_state *ts = f->q->ts;
  const char *secret = ts != NULL && ts->secret != NULL ? ts->secret : FR_LOCAL_SECRET;
  char msg[400];
  int k, rc;

  f->b = b;
  f->done = done;
  f->arg = arg;
  f->reads = calloc(b->ncands > 0 ? (size_t)b->ncands : 1, sizeof(*f->reads));
  if (f->reads == NULL) {
    refuse(f, 503, "out_of_memory", "the router is out of memory", NULL, NULL);
    settle(f);
    return;
  }
  f->pending = 1; /* a guard: reads answering early cannot settle it */
  for (k = 0; k < b->ncands; k++) {
    struct secrets_read *rd = &f->reads[f->nreads];
    rd->f = f;
    rd->cand = k;
    rc = fr_adapter_secret_get(b->cands[k].a, secret, f->keys, f->nkeys, f->q->rid, on_read, rd, &rd->call);
    if (rc != 0) {
      snprintf(msg, sizeof(msg), "cannot read Secret %s (%s)", secret,
               rc == -EHOSTDOWN ? "the cluster is unhealthy" : "the request could not be sent");
      batch_drop_cand(b, k, msg);
      continue;
    }
    f->nreads++;
    f->pending++;
  }
  if (--f->pending == 0)
    settle(f);
}

void secrets_fetch_free(struct secrets_fetch *f) {
  int k;

  if (f == NULL)
    return;
  for (k = 0; k < f->nreads; k++) {
    fr_secret_call_cancel(f->reads[k].call);
    if (f->b != NULL && f->b->cands[f->reads[k].cand].secrets == f->reads[k].values)
      f->b->cands[f->reads[k].cand].secrets = NULL;
    fr_secret_values_free(f->reads[k].values);
  }
  json_decref(f->body);
  json_decref(f->names);
  free(f->keys);
  free(f->reads);
  free(f);
}
