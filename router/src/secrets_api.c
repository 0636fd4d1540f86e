/* secrets_api.c - /v1/secrets: a tenant's secrets in every member cluster.
 *
 *   PUT    /v1/secrets/{key}   the raw body is the value: sets the key in
 *                              the tenant's Secret of each cluster (made
 *                              when missing)
 *   GET    /v1/secrets         the keys' names, per cluster; never a value
 *   DELETE /v1/secrets/{key}   removes the key in each cluster
 *
 * `?clusters=a,b` narrows any of them to those clusters; else every
 * member cluster is written (or read). Each cluster answers on its own: the
 * answer lists every cluster with what happened there, and is 200 only
 * when every one of them succeeded (else 503 with Retry-After: writing the
 * same value again is harmless). The value is never logged, echoed or put
 * in an error; the request and Kubernetes bodies that carry it are
 * FR_KUBE_SENSITIVE (cluster_adapter/src/secret.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/config.h"
#include "fr/http.h"
#include "api.h"
#include "router.h"
#include "route_types.h"
#include "secrets.h"
#include "tenants.h"

enum sop { SOP_SET, SOP_UNSET, SOP_LIST };

struct sreq;

/* One cluster's part. */
struct spart {
  struct sreq *s;
  size_t cluster;                 /* adapter index */
  struct fr_secret_call *call;    /* NULL once answered */
  json_t *result;                 /* {"cluster", "status", ...} */
  json_t *keys;                   /* SOP_LIST: its key names */
  int ok;
};

struct sreq {
  struct api_req *q;
  enum sop op;
  char key[160];
  char secret[256];
  struct spart *parts;
  size_t nparts;
  int pending;
};

static const char *secret_name(struct api_req *q) {
  return q->ts != NULL && q->ts->secret != NULL ? q->ts->secret : FR_LOCAL_SECRET;
}

static void sreq_free(struct sreq *s) {
  size_t i;

  for (i = 0; i < s->nparts; i++) {
    fr_secret_call_cancel(s->parts[i].call);
    json_decref(s->parts[i].result);
    json_decref(s->parts[i].keys);
  }
  free(s->parts);
  free(s);
}

static void gone(struct api_req *q, void *arg) {
  (void)q;
  (void)arg;
  /* The calls finish on their own (a write half done is as good as a
   * write whose answer was lost); their answers go nowhere. */
}

static void finish(struct sreq *s) {
  struct api_req *q = s->q;
  json_t *clusters = json_array(), *body;
  size_t i, nok = 0;
  char msg[600];
  struct fr_buf failed;

  fr_buf_init(&failed);
  for (i = 0; i < s->nparts; i++) {
    json_array_append(clusters, s->parts[i].result);
    if (s->parts[i].ok)
      nok++;
    else
      fr_buf_printf(&failed, "%s%s", failed.len ? ", " : "", fr_adapter_name(q->r->adapters[s->parts[i].cluster]));
  }
  if (s->op == SOP_LIST) {
    /* key -> the clusters that have it; the others lack it. */
    json_t *keys = json_object(), *arr = json_array(), *k;
    const char *name;
    size_t j;
    for (i = 0; i < s->nparts; i++)
      json_array_foreach(s->parts[i].keys, j, k) {
        json_t *where = json_object_get(keys, json_string_value(k));
        if (where == NULL) {
          where = json_array();
          json_object_set_new(keys, json_string_value(k), where);
        }
        json_array_append_new(where, json_string(fr_adapter_name(q->r->adapters[s->parts[i].cluster])));
      }
    json_object_foreach(keys, name, k) {
      json_t *missing = json_array();
      for (i = 0; i < s->nparts; i++) {
        const char *cn = fr_adapter_name(q->r->adapters[s->parts[i].cluster]);
        size_t m;
        json_t *c;
        int has = 0;
        json_array_foreach(k, m, c) has |= strcmp(json_string_value(c), cn) == 0;
        if (!has)
          json_array_append_new(missing, json_string(cn));
      }
      json_array_append_new(arr, json_pack("{s:s,s:O,s:o}", "name", name, "clusters", k, "missing", missing));
    }
    json_decref(keys);
    body = json_pack("{s:s,s:o,s:o}", "secret", s->secret, "keys", arr, "clusters", clusters);
  } else {
    body = json_pack("{s:s,s:s,s:o}", "key", s->key, "secret", s->secret, "clusters", clusters);
  }
  if (nok == s->nparts || body == NULL) {
    api_reply(q, body != NULL ? 200 : 503, body, NULL);
  } else {
    snprintf(msg, sizeof(msg), "%s in %zu of %zu clusters; not in %s (see clusters; the same request again is "
             "safe)", s->op == SOP_SET ? "written" : s->op == SOP_UNSET ? "removed" : "read", nok, s->nparts,
             failed.data ? failed.data : "");
    json_t *err = api_err_body(s->op == SOP_LIST ? "secret_unreadable" : "secret_not_written", msg);
    json_object_set(json_object_get(err, "error"), "clusters", json_object_get(body, "clusters"));
    if (s->op == SOP_LIST)
      json_object_set(json_object_get(err, "error"), "keys", json_object_get(body, "keys"));
    json_decref(body);
    api_reply(q, 503, err, "Retry-After: 5\r\n");
  }
  fr_buf_free(&failed);
  sreq_free(s);
}

static void on_answer(const struct fr_secret_result *res, void *arg) {
  struct spart *p = arg;
  struct sreq *s = p->s;
  const char *cluster = fr_adapter_name(s->q->r->adapters[p->cluster]);

  p->call = NULL;
  if (res->err == FR_SECRET_OK) {
    p->ok = 1;
    p->result = json_pack("{s:s,s:s}", "cluster", cluster, "status",
                          s->op == SOP_SET ? (res->created ? "created" : "updated")
                                           : s->op == SOP_UNSET ? "removed" : "ok");
    if (s->op == SOP_LIST) {
      p->keys = json_incref(res->keys);
      json_object_set(p->result, "keys", res->keys);
    }
  } else if (res->err == FR_SECRET_NOT_FOUND && s->op != SOP_SET) {
    /* Nothing to remove, nothing to list: that is the state asked for. */
    p->ok = 1;
    p->result = json_pack("{s:s,s:s}", "cluster", cluster, "status", "no_secret");
    if (s->op == SOP_LIST)
      json_object_set_new(p->result, "keys", json_array());
  } else {
    p->result = json_pack("{s:s,s:s,s:s}", "cluster", cluster, "status", "failed", "message",
                          res->message ? res->message : "failed");
  }
  if (--s->pending == 0)
    finish(s);
}

/* The clusters of ?clusters=a,b (every one without it) into s->parts:
 * 0, or -1 after answering 400/404. */
static int pick_clusters(struct sreq *s) {
  struct api_req *q = s->q;
  struct router *r = q->r;
  char list[1024], msg[300];
  long n = fr_http_query_get(q->req->query, "clusters", list, sizeof(list));
  size_t i;

  s->parts = calloc(r->nadapters ? r->nadapters : 1, sizeof(*s->parts));
  if (s->parts == NULL) {
    api_oom(q);
    return -1;
  }
  if (n == -ERANGE || n == -EINVAL || (n >= 0 && list[0] == '\0')) {
    api_fail(q, 400, "invalid_query", "clusters must be a comma-separated list of cluster names", NULL);
    return -1;
  }
  if (n < 0) {
    for (i = 0; i < r->nadapters; i++)
      s->parts[s->nparts++].cluster = i;
    return 0;
  }
  for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    size_t k;
    for (i = 0; i < r->nadapters && strcmp(fr_adapter_name(r->adapters[i]), tok) != 0; i++)
      ;
    if (i == r->nadapters) {
      snprintf(msg, sizeof(msg), "no cluster named \"%.100s\"", tok);
      api_fail(q, 404, "cluster_not_found", msg, NULL);
      return -1;
    }
    for (k = 0; k < s->nparts && s->parts[k].cluster != i; k++)
      ;
    if (k == s->nparts)
      s->parts[s->nparts++].cluster = i;
  }
  if (s->nparts == 0) {
    api_fail(q, 400, "invalid_query", "clusters must name at least one cluster", NULL);
    return -1;
  }
  return 0;
}

/* 1 when the <len> bytes of <v> can be an env var value: UTF-8 text
 * without NUL (what a create's `secrets` accepts). */
static int value_ok(const char *v, size_t len) {
  size_t i = 0;
  int n;

  if (memchr(v, '\0', len) != NULL)
    return 0;
  while (i < len) {
    if ((unsigned char)v[i] < 0x80) {
      i++;
      continue;
    }
    n = fr_utf8_char((const unsigned char *)v + i, len - i);
    if (n <= 0)
      return 0;
    i += (size_t)n;
  }
  return 1;
}

static void run(struct api_req *q, enum sop op, const char *key) {
  struct sreq *s = calloc(1, sizeof(*s));
  char msg[300];
  size_t i;

  if (s == NULL) {
    api_oom(q);
    return;
  }
  s->q = q;
  s->op = op;
  snprintf(s->secret, sizeof(s->secret), "%s", secret_name(q));
  if (key != NULL) {
    if (!secrets_name_valid(key)) {
      api_fail(q, 400, "invalid_key", "a secret's key is an env var name: a letter or '_', then letters, digits or "
               "'_', at most 128 characters", NULL);
      sreq_free(s);
      return;
    }
    snprintf(s->key, sizeof(s->key), "%s", key);
  }
  if (op == SOP_SET) {
    if (q->req->body_len > SECRETS_MAX_BYTES) {
      snprintf(msg, sizeof(msg), "a secret's value is at most %d bytes (it reaches a sandbox as an env var)",
               SECRETS_MAX_BYTES);
      api_fail(q, 413, "value_too_large", msg, NULL);
      sreq_free(s);
      return;
    }
    if (!value_ok(q->req->body, q->req->body_len)) {
      api_fail(q, 400, "invalid_value", "a secret's value must be UTF-8 text without NUL bytes (it reaches a "
               "sandbox as an env var)", NULL);
      sreq_free(s);
      return;
    }
  }
  if (pick_clusters(s) != 0) {
    sreq_free(s);
    return;
  }
  api_defer(q);
  q->gone_cb = gone;
  q->gone_arg = s;
  s->pending = 1; /* a guard: answers cannot finish it early */
  for (i = 0; i < s->nparts; i++) {
    struct spart *p = &s->parts[i];
    struct fr_adapter *a = q->r->adapters[p->cluster];
    int rc;
    p->s = s;
    if (op == SOP_SET)
      rc = fr_adapter_secret_set(a, s->secret, s->key, q->req->body, q->req->body_len, q->tenant, q->rid,
                                 on_answer, p, &p->call);
    else if (op == SOP_UNSET)
      rc = fr_adapter_secret_unset(a, s->secret, s->key, q->rid, on_answer, p, &p->call);
    else
      rc = fr_adapter_secret_keys(a, s->secret, q->rid, on_answer, p, &p->call);
    if (rc != 0) {
      p->result = json_pack("{s:s,s:s,s:s}", "cluster", fr_adapter_name(a), "status", "failed", "message",
                            rc == -EHOSTDOWN ? "the cluster is unavailable" : "the request could not be sent");
      continue;
    }
    s->pending++;
  }
  if (--s->pending == 0)
    finish(s);
}

void secrets_put(struct api_req *q, const struct route_params *p) {
  run(q, SOP_SET, p->name);
}

void secrets_delete(struct api_req *q, const struct route_params *p) {
  run(q, SOP_UNSET, p->name);
}

void secrets_list(struct api_req *q, const struct route_params *p) {
  (void)p;
  run(q, SOP_LIST, NULL);
}
