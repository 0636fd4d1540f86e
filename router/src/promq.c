/* promq.c - PromQL over HTTP on the loop (promq.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "fr/buf.h"
#include "fr/curluv.h"
#include "fr/log.h"
#include "fr/util.h"
#include "promq.h"

#define QUERY_TIMEOUT_MS 10000L
#define CONNECT_TIMEOUT_MS 3000L
#define MAX_ANSWER ((size_t)16 << 20)

struct promq_call {
  struct promq_batch *b;
  struct promq_query *q;
  CURL *easy;
  struct fr_buf body;
  int too_big;
  struct promq_call *prev, *next;   /* the client's calls in flight */
};

struct promq_batch {
  struct promq_query *qs;
  size_t n, pending;
  promq_done_cb cb;
  void *arg;
  json_t *held[];    /* the results, freed after the callback (which may free <qs>) */
};

struct promq_client {
  struct fr_curluv curl;
  char *base;
  struct promq_call *calls;
  size_t nbatches;
  int closing;
  char errbuf[CURL_ERROR_SIZE];
};

static void on_curl_closed(struct fr_curluv *cu) {
  struct promq_client *c = fr_container_of(cu, struct promq_client, curl);

  free(c->base);
  free(c);
}

/* One query of a batch is answered: when it was the last, the batch's
 * callback runs and the batch goes. */
static void batch_step(struct promq_client *c, struct promq_batch *b) {
  size_t i;

  if (--b->pending > 0)
    return;
  c->nbatches--;
  for (i = 0; i < b->n; i++)
    b->held[i] = b->qs[i].result;
  b->cb(b->qs, b->n, b->arg); /* <qs> may be gone after it */
  for (i = 0; i < b->n; i++)
    json_decref(b->held[i]);
  free(b);
}

static void call_unlink_free(struct promq_client *c, struct promq_call *k) {
  if (k->prev != NULL)
    k->prev->next = k->next;
  else
    c->calls = k->next;
  if (k->next != NULL)
    k->next->prev = k->prev;
  if (k->easy != NULL) {
    if (c->curl.multi != NULL)
      curl_multi_remove_handle(c->curl.multi, k->easy);
    curl_easy_cleanup(k->easy);
  }
  fr_buf_free(&k->body);
  free(k);
}

/* The answer of <q>: {"status":"success","data":{"resultType":..,"result":[...]}}
 * or {"status":"error","errorType":..,"error":..}. */
static void parse_answer(struct promq_query *q, long status, const struct fr_buf *body) {
  json_error_t jerr;
  json_t *doc = body->len > 0 ? json_loadb(body->data, body->len, 0, &jerr) : NULL;
  const char *st = json_string_value(json_object_get(doc, "status"));
  json_t *res = json_object_get(json_object_get(doc, "data"), "result");

  if (st != NULL && strcmp(st, "success") == 0 && json_is_array(res)) {
    q->ok = 1;
    q->result = json_incref(res);
  } else if (st != NULL && strcmp(st, "error") == 0) {
    snprintf(q->error, sizeof(q->error), "%s: %s",
             json_string_value(json_object_get(doc, "errorType")) ? json_string_value(json_object_get(doc, "errorType"))
                                                                   : "error",
             json_string_value(json_object_get(doc, "error")) ? json_string_value(json_object_get(doc, "error")) : "");
  } else {
    snprintf(q->error, sizeof(q->error), "HTTP %ld and an answer that is not the Prometheus API's", status);
  }
  json_decref(doc);
}

static void on_curl_done(struct fr_curluv *cu, CURL *easy, CURLcode result) {
  struct promq_client *c = fr_container_of(cu, struct promq_client, curl);
  struct promq_call *k;
  struct promq_batch *b;
  void *p = NULL;
  long status = 0;

  curl_easy_getinfo(easy, CURLINFO_PRIVATE, &p);
  k = p;
  b = k->b;
  if (result == CURLE_OK) {
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    parse_answer(k->q, status, &k->body);
  } else if (k->too_big) {
    snprintf(k->q->error, sizeof(k->q->error), "the answer is over %zu MiB", MAX_ANSWER >> 20);
  } else {
    snprintf(k->q->error, sizeof(k->q->error), "%s", curl_easy_strerror(result));
  }
  call_unlink_free(c, k);
  batch_step(c, b);
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *arg) {
  struct promq_call *k = arg;
  size_t len = size * nmemb;

  if (k->body.len + len > MAX_ANSWER) {
    k->too_big = 1;
    return 0; /* CURLE_WRITE_ERROR */
  }
  return fr_buf_append(&k->body, data, len) == 0 ? len : 0;
}

struct promq_client *promq_new(uv_loop_t *loop, const char *base_url) {
  struct promq_client *c = calloc(1, sizeof(*c));

  if (c == NULL || (c->base = strdup(base_url)) == NULL || fr_curluv_init(loop, &c->curl, on_curl_done, NULL) != 0) {
    if (c != NULL)
      free(c->base);
    free(c);
    return NULL;
  }
  return c;
}

/* The URL of <q> into <u>. */
static int query_url(struct promq_client *c, CURL *easy, const struct promq_query *q, struct fr_buf *u) {
  char *e = curl_easy_escape(easy, q->expr, 0);
  int rc;

  if (e == NULL)
    return -ENOMEM;
  if (q->range)
    rc = fr_buf_printf(u, "%s/api/v1/query_range?query=%s&start=%.3f&end=%.3f&step=%.3f", c->base, e, q->start,
                       q->end, q->step);
  else
    rc = fr_buf_printf(u, "%s/api/v1/query?query=%s&time=%.3f", c->base, e, q->time);
  curl_free(e);
  return rc;
}

static int start_call(struct promq_client *c, struct promq_batch *b, struct promq_query *q) {
  struct promq_call *k = calloc(1, sizeof(*k));
  struct fr_buf url;
  int rc = -ENOMEM;

  fr_buf_init(&url);
  if (k == NULL || (k->easy = curl_easy_init()) == NULL || query_url(c, k->easy, q, &url) != 0)
    goto fail;
  k->b = b;
  k->q = q;
  fr_buf_init(&k->body);
  curl_easy_setopt(k->easy, CURLOPT_URL, url.data);
  curl_easy_setopt(k->easy, CURLOPT_PRIVATE, k);
  curl_easy_setopt(k->easy, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(k->easy, CURLOPT_WRITEDATA, k);
  curl_easy_setopt(k->easy, CURLOPT_TIMEOUT_MS, QUERY_TIMEOUT_MS);
  curl_easy_setopt(k->easy, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
  curl_easy_setopt(k->easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(k->easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(k->easy, CURLOPT_ACCEPT_ENCODING, "");
  if (curl_multi_add_handle(c->curl.multi, k->easy) != CURLM_OK)
    goto fail;
  fr_buf_free(&url);
  k->next = c->calls;
  if (c->calls != NULL)
    c->calls->prev = k;
  c->calls = k;
  return 0;
fail:
  fr_buf_free(&url);
  if (k != NULL && k->easy != NULL)
    curl_easy_cleanup(k->easy);
  free(k);
  return rc;
}

int promq_run(struct promq_client *c, struct promq_query *qs, size_t n, promq_done_cb cb, void *arg) {
  struct promq_batch *b;
  size_t i, started = 0;

  if (c == NULL || c->closing || n == 0)
    return -EINVAL;
  if (c->nbatches >= PROMQ_MAX_BATCHES)
    return -EBUSY;
  if ((b = calloc(1, sizeof(*b) + n * sizeof(b->held[0]))) == NULL)
    return -ENOMEM;
  b->qs = qs;
  b->n = n;
  b->cb = cb;
  b->arg = arg;
  /* A guard count, so that no answer can end the batch while it starts. */
  b->pending = n + 1;
  for (i = 0; i < n; i++) {
    qs[i].ok = 0;
    qs[i].result = NULL;
    qs[i].error[0] = '\0';
    if (start_call(c, b, &qs[i]) == 0) {
      started++;
    } else {
      snprintf(qs[i].error, sizeof(qs[i].error), "out of memory");
      b->pending--;
    }
  }
  if (started == 0) {
    free(b);
    return -ENOMEM;
  }
  c->nbatches++;
  b->pending--; /* answers come from later loop turns: the guard can go */
  return 0;
}

void promq_close(struct promq_client *c) {
  if (c == NULL || c->closing)
    return;
  c->closing = 1;
  while (c->calls != NULL) {
    struct promq_call *k = c->calls;
    struct promq_batch *b = k->b;
    snprintf(k->q->error, sizeof(k->q->error), "router shutting down");
    call_unlink_free(c, k);
    batch_step(c, b);
  }
  fr_curluv_close(&c->curl, on_curl_closed);
}
