/* secrets.c - a create's `secrets` (secrets.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/config.h"
#include "api.h"
#include "router.h"
#include "tenants.h"
#include "secrets.h"

#define NAME_MAX_LEN 128

/* One cluster's read. */
struct secrets_read {
  struct secrets_fetch *f;
  size_t cluster;               /* adapter index */
  int asked;
  struct fr_secret_call *call;  /* NULL once answered */
  json_t *values;               /* its answer, a reference (fr_secret_values_free) */
  const char *code;             /* why it has no values: "no_secret", "secret_unreadable", "not_asked" */
  char detail[300];
};

struct secrets_fetch {
  struct api_req *q;
  json_t *names;                /* a copy */
  const char **keys;            /* borrowed from <names> */
  size_t nkeys;
  struct secrets_read *reads;   /* one per adapter */
  size_t nreads;
  int pending;
  int status;                   /* the first refusal, 0 = none */
  json_t *body;                 /* its answer */
  json_t *missing;              /* [{"cluster","key"}] where a key or the Secret is missing */
  secrets_done_cb done;
  void *arg;
};

int secrets_name_valid(const char *s) {
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
    if (name == NULL || !secrets_name_valid(name)) {
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
  f->missing = json_array();
  if (f->names == NULL || f->keys == NULL || f->missing == NULL) {
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
  size_t k, with = 0, unreadable = 0;
  int status;

  for (k = 0; k < f->nreads; k++) {
    with += f->reads[k].values != NULL;
    unreadable += f->reads[k].asked && f->reads[k].code != NULL && strcmp(f->reads[k].code, "secret_unreadable") == 0;
  }
  /* Every cluster that answered lacks a key, none failed to answer: the
   * keys exist nowhere, which no wait or retry mends. */
  if (f->status == 0 && with == 0 && unreadable == 0 && json_array_size(f->missing) > 0) {
    json_t *first = json_array_get(f->missing, 0);
    char msg[700];
    snprintf(msg, sizeof(msg), "secret %s not found in any cluster the create may use (first: %s in cluster %s); "
             "set it with PUT /v1/secrets/%s", json_string_value(json_object_get(first, "key")),
             json_string_value(json_object_get(first, "message")), json_string_value(json_object_get(first, "cluster")),
             json_string_value(json_object_get(first, "key")));
    refuse(f, 400, "secret_not_found", msg, json_string_value(json_object_get(first, "key")),
           json_string_value(json_object_get(first, "cluster")));
    json_object_set(json_object_get(f->body, "error"), "clusters", f->missing);
  }
  status = f->status;
  body = f->body;
  f->body = NULL;
  f->done(status, body, f->arg);
}

static void on_read(const struct fr_secret_result *res, void *arg) {
  struct secrets_read *rd = arg;
  struct secrets_fetch *f = rd->f;
  const char *cluster = fr_adapter_name(f->q->r->adapters[rd->cluster]);
  char msg[900];
  const char *k;
  json_t *v;
  size_t bytes = 0;

  rd->call = NULL;
  switch (res->err) {
  case FR_SECRET_OK:
    json_object_foreach(res->values, k, v) bytes += json_string_length(v);
    if (bytes > SECRETS_MAX_BYTES) {
      snprintf(msg, sizeof(msg), "the secrets asked for hold %zu bytes in cluster %s; at most %d go to a "
               "sandbox", bytes, cluster, SECRETS_MAX_BYTES);
      refuse(f, 400, "secret_too_large", msg, NULL, cluster);
      break;
    }
    rd->values = json_incref(res->values);
    break;
  case FR_SECRET_NOT_FOUND:
    /* This cluster cannot host the create; others may. */
    rd->code = "no_secret";
    snprintf(rd->detail, sizeof(rd->detail), "%s", res->message);
    json_array_append_new(f->missing, json_pack("{s:s,s:s,s:s}", "cluster", cluster, "key",
                                                res->key ? res->key : f->keys[0], "message", res->message));
    break;
  case FR_SECRET_INVALID:
    snprintf(msg, sizeof(msg), "secret %s in cluster %s: %s", res->key, cluster, res->message);
    refuse(f, 400, "secret_invalid", msg, res->key, cluster);
    break;
  default:
    /* Like any other failure of that cluster: the create goes elsewhere. */
    rd->code = "secret_unreadable";
    snprintf(rd->detail, sizeof(rd->detail), "%s", res->message ? res->message : "the Secret could not be read");
    break;
  }
  if (--f->pending == 0)
    settle(f);
}

void secrets_fetch_start(struct secrets_fetch *f, const int *use, secrets_done_cb done, void *arg) {
  struct tenant_state *ts = f->q->ts;
  struct router *r = f->q->r;
  const char *secret = ts != NULL && ts->secret != NULL ? ts->secret : FR_LOCAL_SECRET;
  size_t k;
  int rc;

  f->done = done;
  f->arg = arg;
  f->reads = calloc(r->nadapters ? r->nadapters : 1, sizeof(*f->reads));
  if (f->reads == NULL) {
    refuse(f, 503, "out_of_memory", "the router is out of memory", NULL, NULL);
    settle(f);
    return;
  }
  f->nreads = r->nadapters;
  f->pending = 1; /* a guard: reads answering early cannot settle it */
  for (k = 0; k < r->nadapters; k++) {
    struct secrets_read *rd = &f->reads[k];
    rd->f = f;
    rd->cluster = k;
    if (!use[k]) {
      rd->code = "not_asked";
      continue;
    }
    rd->asked = 1;
    rc = fr_adapter_secret_get(r->adapters[k], secret, f->keys, f->nkeys, f->q->rid, on_read, rd, &rd->call);
    if (rc != 0) {
      rd->code = "secret_unreadable";
      snprintf(rd->detail, sizeof(rd->detail), "cannot read Secret %s (%s)", secret,
               rc == -EHOSTDOWN ? "the cluster is unhealthy" : "the request could not be sent");
      continue;
    }
    f->pending++;
  }
  if (--f->pending == 0)
    settle(f);
}

json_t *secrets_values(struct secrets_fetch *f, size_t i, const char **code, const char **detail) {
  static const char none[] = "";

  *code = NULL;
  *detail = none;
  if (i >= f->nreads) {
    *code = "not_asked";
    return NULL;
  }
  if (f->reads[i].values == NULL) {
    *code = f->reads[i].code != NULL ? f->reads[i].code : "secret_unreadable";
    *detail = f->reads[i].detail;
  }
  return f->reads[i].values;
}

void secrets_fetch_free(struct secrets_fetch *f) {
  size_t k;

  if (f == NULL)
    return;
  for (k = 0; k < f->nreads; k++) {
    fr_secret_call_cancel(f->reads[k].call);
    fr_secret_values_free(f->reads[k].values);
  }
  json_decref(f->body);
  json_decref(f->names);
  json_decref(f->missing);
  free(f->keys);
  free(f->reads);
  free(f);
}
