/* api.c - the bottom of the handler files: the v1 request record, its
 * answers (replies, errors, streams), body checks and small lookups
 * (api.h says who owns what). It calls no handler file: a sandbox as the
 * API shows it is sandbox_view.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/assert.h"
#include "fr/buf.h"
#include "fr/config.h"
#include "fr/egress.h"
#include "fr/http.h"
#include "fr/util.h"
#include "api.h"
#include "router.h"
#include "tenants.h"

struct api_req *api_req_of(struct fr_http_req *req) {
  return req->data;
}

struct api_req *api_req_new(struct router *r, struct fr_http_req *req, const char *rid) {
  struct api_req *q = calloc(1, sizeof(*q));

  if (q == NULL)
    return NULL;
  q->r = r;
  q->req = req;
  q->refs = 1;
  q->cfg = fr_config_ref(r->cfg);
  snprintf(q->rid, sizeof(q->rid), "%s", rid);
  req->data = q;
  return q;
}

void api_req_unref(struct api_req *q) {
  if (q == NULL)
    return;
  FR_ASSERT(q->refs > 0);
  if (--q->refs == 0) {
    tenant_unref(q->ts);
    fr_config_unref(q->cfg);
    free(q);
  }
}

void api_set_tenant(struct api_req *q, const char *name) {
  FR_ASSERT(!q->deferred); /* the in-flight count goes with the record */
  snprintf(q->tenant, sizeof(q->tenant), "%s", name);
  tenant_unref(q->ts);
  q->ts = tenant_ref(router_tenant(q->r, name));
}

static void on_abort(struct fr_http_req *req) {
  struct api_req *q = req->data;

  q->req = NULL;
  if (q->gone_cb != NULL) {
    void (*cb)(struct api_req *, void *) = q->gone_cb;

    q->gone_cb = NULL;
    cb(q, q->gone_arg);
  }
}

/* A deferred request's operation is over: its reference goes. */
static void finish_deferred(struct api_req *q) {
  if (q->deferred) {
    q->deferred = 0;
    q->r->inflight--;
    if (q->ts != NULL)
      q->ts->inflight--;
    api_req_unref(q);
  }
}

int api_stream_begin(struct api_req *q, int status, const char *content_type, const char *extra, int64_t length) {
  struct fr_buf h;
  int rc;

  if (q->req == NULL)
    return -EPIPE;
  fr_buf_init(&h);
  if (fr_buf_printf(&h, "X-Request-Id: %s\r\nCache-Control: no-store\r\n%s", q->rid, extra ? extra : "") != 0) {
    fr_buf_free(&h);
    return -ENOMEM;
  }
  rc = fr_http_stream_begin_length(q->req, status, content_type, h.data, length);
  fr_buf_free(&h);
  q->streaming = 1;
  return rc < 0 ? -EPIPE : 0;
}

void api_stream_end(struct api_req *q, int ok) {
  struct fr_http_req *req = q->req;

  q->gone_cb = NULL;
  q->gone_arg = NULL;
  if (req != NULL) {
    req->abort_cb = NULL;
    q->req = NULL;
    if (ok)
      fr_http_stream_end(req);
    else
      fr_http_abort(req);
  }
  finish_deferred(q);
}

void api_undefer(struct api_req *q) {
  FR_ASSERT(q->deferred);
  q->gone_cb = NULL;
  q->gone_arg = NULL;
  if (q->req != NULL)
    q->req->abort_cb = NULL;
  q->deferred = 0;
  q->r->inflight--;
  if (q->ts != NULL)
    q->ts->inflight--;
}

void api_defer(struct api_req *q) {
  FR_ASSERT(!q->deferred); /* one operation answers a request, once */
  q->refs++;
  q->deferred = 1;
  q->r->inflight++;
  if (q->ts != NULL)
    q->ts->inflight++;
  if (q->req != NULL)
    q->req->abort_cb = on_abort;
}

void api_reply(struct api_req *q, int status, json_t *body, const char *extra) {
  static const char oom[] = "{\"error\":{\"code\":\"out_of_memory\",\"message\":\"the router is out of memory\"}}";
  struct fr_http_req *req = q->req;

  q->gone_cb = NULL;
  q->gone_arg = NULL;
  if (req != NULL && !q->streaming && q->shape_cb != NULL) {
    json_t *(*shape)(struct api_req *, int *, json_t *) = q->shape_cb;

    q->shape_cb = NULL;
    body = shape(q, &status, body);
  }
  if (req != NULL && q->streaming) {
    /* The head went out already: the only honest signal left is a cut. */
    req->abort_cb = NULL;
    q->req = NULL;
    fr_http_abort(req);
  } else if (req != NULL) {
    char *s = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
    struct fr_buf h;

    fr_buf_init(&h);
    fr_buf_printf(&h, "X-Request-Id: %s\r\nCache-Control: no-store\r\n%s", q->rid, extra ? extra : "");
    req->abort_cb = NULL;
    q->req = NULL;
    /* Out of memory while rendering: a fixed body, never a half-written one. */
    if (s == NULL && body != NULL)
      fr_http_respond(req, 503, "application/json", h.data, oom, sizeof(oom) - 1);
    else
      fr_http_respond(req, status, "application/json", h.data, s ? s : "", s ? strlen(s) : 0);
    free(s);
    fr_buf_free(&h);
  }
  json_decref(body);
  finish_deferred(q);
}

void api_reply_raw(struct api_req *q, int status, const char *content_type, const void *body, size_t len) {
  struct fr_http_req *req = q->req;
  struct fr_buf h;

  q->gone_cb = NULL;
  q->gone_arg = NULL;
  if (req != NULL && !q->streaming) {
    fr_buf_init(&h);
    fr_buf_printf(&h, "X-Request-Id: %s\r\nCache-Control: no-store\r\n", q->rid);
    req->abort_cb = NULL;
    q->req = NULL;
    fr_http_respond(req, status, content_type, h.data, body, len);
    fr_buf_free(&h);
  } else if (req != NULL) {
    req->abort_cb = NULL;
    q->req = NULL;
    fr_http_abort(req);
  }
  finish_deferred(q);
}

/* <msg> with every byte that is not printable ASCII as '?': a message that
 * quotes client input (an id, a query value, cut at a byte count) may not
 * be UTF-8, and jansson refuses such strings. */
static json_t *safe_string(const char *msg) {
  json_t *j = json_string(msg);
  char *copy;
  size_t i;

  if (j != NULL || (copy = strdup(msg)) == NULL)
    return j;
  for (i = 0; copy[i] != '\0'; i++)
    if ((unsigned char)copy[i] < 0x20 || (unsigned char)copy[i] > 0x7e)
      copy[i] = '?';
  j = json_string(copy);
  free(copy);
  return j;
}

void router_error(struct fr_http_req *req, int status, const char *code, const char *message,
                  const char *extra_headers) {
  api_fail(api_req_of(req), status, code, message, extra_headers);
}

json_t *api_err_body(const char *code, const char *msg) {
  return json_pack("{s:{s:s,s:o}}", "error", "code", code, "message", safe_string(msg));
}

json_t *api_limit_body(const char *msg, const char *limit) {
  json_t *b = api_err_body("tenant_limit", msg);

  json_object_set_new(json_object_get(b, "error"), "limit", json_string(limit));
  return b;
}

void api_fail(struct api_req *q, int status, const char *code, const char *msg, const char *extra) {
  api_reply(q, status, api_err_body(code, msg), extra);
}

void api_field_fail(struct api_req *q, const char *field, const char *msg) {
  json_t *b = api_err_body("invalid_field", msg);

  json_object_set_new(json_object_get(b, "error"), "field", json_string(field));
  api_reply(q, 400, b, NULL);
}

void api_oom(struct api_req *q) {
  api_fail(q, 503, "out_of_memory", "the router is out of memory", NULL);
}

json_t *api_body_object(struct api_req *q, const char *const *known, size_t flags) {
  json_error_t jerr;
  json_t *j = json_loadb(q->req->body, q->req->body_len, flags, &jerr), *v;
  const char *k;
  char msg[300];
  size_t i;

  if (!json_is_object(j)) {
    snprintf(msg, sizeof(msg), "the body must be a JSON object (%s)", j ? "got another JSON value" : jerr.text);
    api_fail(q, 400, "invalid_json", msg, NULL);
    json_decref(j);
    return NULL;
  }
  json_object_foreach(j, k, v) {
    for (i = 0; known[i] && strcmp(known[i], k) != 0; i++)
      ;
    if (known[i] == NULL) {
      snprintf(msg, sizeof(msg), "unknown field \"%.200s\"", k);
      api_field_fail(q, k, msg);
      json_decref(j);
      return NULL;
    }
  }
  return j;
}

int64_t api_max_lifetime(const struct api_req *q) {
  return q->ts != NULL && q->ts->max_lifetime_s > 0 ? q->ts->max_lifetime_s : q->cfg->max_lifetime_s;
}

struct fr_adapter *api_adapter(struct router *r, const char *name) {
  size_t i;

  for (i = 0; i < r->nadapters; i++)
    if (strcmp(fr_adapter_name(r->adapters[i]), name) == 0)
      return r->adapters[i];
  return NULL;
}

int api_owned_by(const struct fr_pod *pod, const char *tenant) {
  return pod->state && pod->tenant && strcmp(pod->state, "claimed") == 0 && strcmp(pod->tenant, tenant) == 0;
}

int api_pool_usable(const struct api_req *q, const struct fr_adapter_pool_view *pv) {
  return pv->owner == NULL || strcmp(pv->owner, q->tenant) == 0;
}

json_t *api_time_json(int64_t s) {
  char t[21];

  if (s < 0)
    return json_null();
  fr_time_rfc3339(s, t);
  return json_string(t);
}

json_t *api_labels_json(const struct fr_pod *pod) {
  json_t *labels = json_object();
  const char *k, *v;
  size_t off = 0;

  while (fr_pod_label_next(pod, &off, &k, &v)) {
    if (strncmp(k, FR_LABEL_PREFIX, strlen(FR_LABEL_PREFIX)) != 0)
      json_object_set_new(labels, k, json_string(v));
  }
  return labels;
}

int api_body_resources(struct api_req *q, json_t *j, int64_t *cpu_m, int64_t *mem_b) {
  json_t *v;
  double d;

  if ((v = json_object_get(j, "cpus")) != NULL) {
    d = json_is_number(v) ? json_number_value(v) : -1;
    if (!(d >= 0.001 && d <= 256)) { /* NaN-safe: fails the comparison */
      api_field_fail(q, "cpus", "cpus must be a number from 0.001 (one millicore) to 256");
      return -1;
    }
    *cpu_m = (int64_t)(d * 1000 + 0.5);
  }
  if ((v = json_object_get(j, "memory_gb")) != NULL) {
    d = json_is_number(v) ? json_number_value(v) : -1;
    if (!(d >= 1.0 / 1024 && d <= 4096)) {
      api_field_fail(q, "memory_gb", "memory_gb must be a number from 0.0009765625 (1 MiB) to 4096");
      return -1;
    }
    *mem_b = (int64_t)(d * 1073741824.0);
  }
  return 0;
}

int api_image_check(struct api_req *q, const char *image) {
  size_t n = image != NULL ? strlen(image) : 0;

  if (n == 0 || n > 512 ||
      strspn(image, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/:@-") != n ||
      strchr("._/:@-", image[0]) != NULL) {
    api_field_fail(q, "image",
                   "image must be a container image reference: 1-512 characters of letters, digits and . _ / : @ -");
    return -1;
  }
  return 0;
}

void api_pool_missing(struct api_req *q, const char *name) {
  char msg[300];
  size_t i;

  for (i = 0; i < q->r->nadapters; i++)
    if (!fr_adapter_pools_synced(q->r->adapters[i])) {
      snprintf(msg, sizeof(msg),
               "cluster %s has not listed its pools yet (this router started recently); retry shortly or on "
               "another replica",
               fr_adapter_name(q->r->adapters[i]));
      api_fail(q, 503, "not_synced", msg, "Retry-After: 1\r\n");
      return;
    }
  snprintf(msg, sizeof(msg), "no pool named \"%.100s\"", name);
  api_fail(q, 404, "pool_not_found", msg, NULL);
}

/* The clusters are the start-up snapshot's (a reload cannot change them),
 * so the strings returned live as long as the router. */
const char *api_cluster_code(struct router *r, const char *name) {
  size_t i;

  for (i = 0; i < r->boot->nclusters; i++)
    if (strcmp(r->boot->clusters[i].name, name) == 0)
      return r->boot->clusters[i].code;
  return NULL;
}

const char *api_cluster_of_code(struct router *r, const char *code) {
  size_t i;

  for (i = 0; i < r->boot->nclusters; i++)
    if (strcmp(r->boot->clusters[i].code, code) == 0)
      return r->boot->clusters[i].name;
  return NULL;
}

