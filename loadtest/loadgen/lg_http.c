/* lg_http.c - see lg_http.h. The multi handle runs on the loop through
 * fr/curluv.h, as the Kubernetes client's does. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "fr/buf.h"
#include "fr/curluv.h"
#include "fr/util.h"
#include "lg_http.h"

struct lg_req {
  struct lg_http *h;
  CURL *easy;
  struct fr_buf body;
  lg_response_cb cb;
  void *arg;
  uint64_t start_ns;
  long retry_after;   /* Retry-After seconds, -1 when absent */
  struct lg_req *prev, *next;
};

struct lg_http {
  struct fr_curluv curl;
  char *base;
  struct curl_slist *headers;
  long timeout_ms;
  struct lg_req *reqs;
  size_t pending;
  int dying;
  char errbuf[CURL_ERROR_SIZE];
};

static void on_curl_closed(struct fr_curluv *cu) {
  struct lg_http *h = fr_container_of(cu, struct lg_http, curl);

  curl_slist_free_all(h->headers);
  free(h->base);
  free(h);
}

static void req_unlink_free(struct lg_req *r) {
  struct lg_http *h = r->h;

  if (r->prev != NULL)
    r->prev->next = r->next;
  else
    h->reqs = r->next;
  if (r->next != NULL)
    r->next->prev = r->prev;
  h->pending--;
  curl_multi_remove_handle(h->curl.multi, r->easy);
  curl_easy_cleanup(r->easy);
  fr_buf_free(&r->body);
  free(r);
}

/* fr_curluv's done_cb: one request finished. */
static void on_curl_done(struct fr_curluv *cu, CURL *easy, CURLcode result) {
  struct lg_response resp;
  struct lg_req *r;
  void *p = NULL;
  long code;

  curl_easy_getinfo(easy, CURLINFO_PRIVATE, &p);
  r = p;
  memset(&resp, 0, sizeof(resp));
  resp.start_ns = r->start_ns;
  resp.end_ns = uv_hrtime();
  resp.retry_after = r->retry_after;
  if (result == CURLE_OK) {
    code = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
    resp.status = (int)code;
  } else {
    resp.error = curl_easy_strerror(result);
  }
  resp.body = r->body.data != NULL ? r->body.data : "";
  resp.body_len = r->body.len;
  /* The callback may start requests (curl allows adding handles here). */
  r->cb(&resp, r->arg);
  req_unlink_free(r);
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *arg) {
  struct lg_req *r = arg;

  if (fr_buf_append(&r->body, data, size * nmemb) != 0)
    return 0;   /* curl reports CURLE_WRITE_ERROR */
  return size * nmemb;
}

int lg_http_new(uv_loop_t *loop, const char *base_url, const char *token, long timeout_ms,
                struct lg_http **out) {
  struct lg_http *h;
  struct curl_slist *l;
  struct fr_buf line;
  int rc = -ENOMEM;

  *out = NULL;
  if (base_url == NULL || strncmp(base_url, "http", 4) != 0)
    return -EINVAL;
  h = calloc(1, sizeof(*h));
  fr_buf_init(&line);
  if (h == NULL)
    return -ENOMEM;
  h->timeout_ms = timeout_ms;
  if ((h->base = strdup(base_url)) == NULL)
    goto fail;
  while (h->base[0] != '\0' && h->base[strlen(h->base) - 1] == '/')
    h->base[strlen(h->base) - 1] = '\0';
  /* "Expect:" off: no 100-continue round trip for bodies. */
  if ((l = curl_slist_append(NULL, "Content-Type: application/json")) == NULL)
    goto fail;
  h->headers = l;
  if ((l = curl_slist_append(h->headers, "Expect:")) == NULL)
    goto fail;
  h->headers = l;
  if (token != NULL) {
    if (fr_buf_printf(&line, "Authorization: Bearer %s", token) != 0 ||
        (l = curl_slist_append(h->headers, line.data)) == NULL)
      goto fail;
    h->headers = l;
  }
  if (fr_curluv_init(loop, &h->curl, on_curl_done, NULL) != 0)
    goto fail;
  curl_multi_setopt(h->curl.multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
  /* Keep every connection of the highest level (1,000+) for reuse. */
  curl_multi_setopt(h->curl.multi, CURLMOPT_MAXCONNECTS, 20000L);
  fr_buf_free(&line);
  *out = h;
  return 0;
fail:
  fr_buf_free(&line);
  curl_slist_free_all(h->headers);
  free(h->base);
  free(h);
  return rc;
}

/* Keeps the value of a Retry-After header (seconds form); a new status
 * line (e.g. after 100 Continue) resets it. */
static size_t on_header(char *data, size_t size, size_t n, void *arg) {
  struct lg_req *r = arg;
  size_t len = size * n;
  char val[32];
  size_t i = sizeof("retry-after:") - 1, k = 0;

  if (len >= 5 && strncmp(data, "HTTP/", 5) == 0)
    r->retry_after = -1;
  if (len > i && strncasecmp(data, "retry-after:", i) == 0) {
    while (i < len && (data[i] == ' ' || data[i] == '\t'))
      i++;
    while (i < len && k < sizeof(val) - 1 && data[i] >= '0' && data[i] <= '9')
      val[k++] = data[i++];
    val[k] = '\0';
    r->retry_after = k > 0 ? strtol(val, NULL, 10) : 0;
  }
  return len;
}

int lg_http_request(struct lg_http *h, const char *method, const char *path, const char *body,
                    lg_response_cb cb, void *arg) {
  struct lg_req *r;
  struct fr_buf url;
  int rc = -ENOMEM;

  if (h->dying)
    return -ECANCELED;
  r = calloc(1, sizeof(*r));
  fr_buf_init(&url);
  if (r == NULL)
    return -ENOMEM;
  fr_buf_init(&r->body);
  r->h = h;
  r->cb = cb;
  r->arg = arg;
  r->retry_after = -1;
  if (fr_buf_printf(&url, "%s%s", h->base, path) != 0 || (r->easy = curl_easy_init()) == NULL)
    goto fail;
  curl_easy_setopt(r->easy, CURLOPT_URL, url.data);
  curl_easy_setopt(r->easy, CURLOPT_PRIVATE, r);
  curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, h->headers);
  curl_easy_setopt(r->easy, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(r->easy, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(r->easy, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(r->easy, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, h->timeout_ms);
  curl_easy_setopt(r->easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(r->easy, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(r->easy, CURLOPT_ERRORBUFFER, h->errbuf);
  if (body != NULL) {
    curl_easy_setopt(r->easy, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(r->easy, CURLOPT_COPYPOSTFIELDS, body);
  }
  if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
    curl_easy_setopt(r->easy, CURLOPT_CUSTOMREQUEST, method);
  else if (strcmp(method, "POST") == 0 && body == NULL)
    curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, "");
  r->start_ns = uv_hrtime();
  if (curl_multi_add_handle(h->curl.multi, r->easy) != CURLM_OK) {
    rc = -EIO;
    goto fail;
  }
  r->next = h->reqs;
  if (h->reqs != NULL)
    h->reqs->prev = r;
  h->reqs = r;
  h->pending++;
  fr_buf_free(&url);
  return 0;
fail:
  fr_buf_free(&url);
  if (r->easy != NULL)
    curl_easy_cleanup(r->easy);
  free(r);
  return rc;
}

size_t lg_http_pending(const struct lg_http *h) {
  return h->pending;
}

void lg_http_free(struct lg_http *h) {
  if (h == NULL || h->dying)
    return;
  while (h->reqs != NULL)
    req_unlink_free(h->reqs);
  h->dying = 1;
  /* Closes the cached connections and the handles; <h> goes once they
   * are closed. */
  fr_curluv_close(&h->curl, on_curl_closed);
}
