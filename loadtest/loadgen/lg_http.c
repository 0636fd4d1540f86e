/* lg_http.c - see lg_http.h. The shape is curl's docs/examples/multi-uv.c
 * (as in cluster_adapter/src/kube.c), with the state in the client instead
 * of globals. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "fr/buf.h"
#include "fr/util.h"
#include "lg_http.h"

struct lg_sock {
  uv_poll_t poll;
  struct lg_http *h;
  curl_socket_t fd;
  struct lg_sock *prev, *next;
};

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
  uv_loop_t *loop;
  CURLM *multi;
  uv_timer_t timer;
  char *base;
  struct curl_slist *headers;
  long timeout_ms;
  struct lg_sock *socks;
  struct lg_req *reqs;
  size_t pending;
  int nopen;          /* handles not yet closed: the timer and the polls */
  int dying;
  char errbuf[CURL_ERROR_SIZE];
};

static void maybe_free(struct lg_http *h) {
  if (!h->dying || h->nopen > 0)
    return;
  curl_slist_free_all(h->headers);
  free(h->base);
  free(h);
}

static void on_handle_closed(uv_handle_t *handle) {
  struct lg_http *h = handle->data;

  if (handle->type == UV_POLL)
    free(fr_container_of((uv_poll_t *)handle, struct lg_sock, poll));
  h->nopen--;
  maybe_free(h);
}

static void sock_close(struct lg_http *h, struct lg_sock *s) {
  if (s->prev != NULL)
    s->prev->next = s->next;
  else
    h->socks = s->next;
  if (s->next != NULL)
    s->next->prev = s->prev;
  uv_close((uv_handle_t *)&s->poll, on_handle_closed);
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
  curl_multi_remove_handle(h->multi, r->easy);
  curl_easy_cleanup(r->easy);
  fr_buf_free(&r->body);
  free(r);
}

static void dispatch(struct lg_http *h, curl_socket_t fd, int flags) {
  struct lg_response resp;
  struct lg_req *r;
  CURLMsg *msg;
  void *p;
  long code;
  int running, left;

  if (h->dying)
    return;
  curl_multi_socket_action(h->multi, fd, flags, &running);
  while ((msg = curl_multi_info_read(h->multi, &left)) != NULL) {
    if (msg->msg != CURLMSG_DONE)
      continue;
    p = NULL;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &p);
    r = p;
    memset(&resp, 0, sizeof(resp));
    resp.start_ns = r->start_ns;
    resp.end_ns = uv_hrtime();
    resp.retry_after = r->retry_after;
    if (msg->data.result == CURLE_OK) {
      code = 0;
      curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
      resp.status = (int)code;
    } else {
      resp.error = curl_easy_strerror(msg->data.result);
    }
    resp.body = r->body.data != NULL ? r->body.data : "";
    resp.body_len = r->body.len;
    /* The callback may start requests (curl allows adding handles here). */
    r->cb(&resp, r->arg);
    req_unlink_free(r);
  }
}

static void on_poll(uv_poll_t *handle, int status, int events) {
  struct lg_sock *s = fr_container_of(handle, struct lg_sock, poll);
  int flags = 0;

  if (status < 0)
    flags = CURL_CSELECT_IN | CURL_CSELECT_OUT;
  if (events & UV_READABLE)
    flags |= CURL_CSELECT_IN;
  if (events & UV_WRITABLE)
    flags |= CURL_CSELECT_OUT;
  dispatch(s->h, s->fd, flags);
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
  struct lg_http *h = userp;
  struct lg_sock *s = socketp;
  int events = 0;

  if (what == CURL_POLL_REMOVE) {
    if (s != NULL) {
      sock_close(h, s);
      if (!h->dying)
        curl_multi_assign(h->multi, fd, NULL);
    }
    return 0;
  }
  if (s == NULL) {
    if (h->dying)
      return 0;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
      return -1;
    if (uv_poll_init_socket(h->loop, &s->poll, fd) != 0) {
      free(s);
      return -1;
    }
    s->poll.data = h;
    s->h = h;
    s->fd = fd;
    s->next = h->socks;
    if (h->socks != NULL)
      h->socks->prev = s;
    h->socks = s;
    h->nopen++;
    curl_multi_assign(h->multi, fd, s);
  }
  if (what & CURL_POLL_IN)
    events |= UV_READABLE;
  if (what & CURL_POLL_OUT)
    events |= UV_WRITABLE;
  uv_poll_start(&s->poll, events, on_poll);
  return 0;
}

static void on_timeout(uv_timer_t *t) {
  struct lg_http *h = fr_container_of(t, struct lg_http, timer);

  dispatch(h, CURL_SOCKET_TIMEOUT, 0);
}

/* 0 means "soon": a loop turn later, never socket_action from in here. */
static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp) {
  struct lg_http *h = userp;

  if (h->dying)
    return 0;
  if (timeout_ms < 0)
    uv_timer_stop(&h->timer);
  else
    uv_timer_start(&h->timer, on_timeout, (uint64_t)timeout_ms, 0);
  return 0;
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
  h->loop = loop;
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
  if ((h->multi = curl_multi_init()) == NULL)
    goto fail;
  curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
  curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h);
  curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
  curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h);
  curl_multi_setopt(h->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
  /* Keep every connection of the highest level (1,000+) for reuse. */
  curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, 20000L);
  uv_timer_init(loop, &h->timer);
  h->timer.data = h;
  h->nopen = 1;
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
  if (curl_multi_add_handle(h->multi, r->easy) != CURLM_OK) {
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
  /* Closes the cached connections; their sockets come back as
   * CURL_POLL_REMOVE and are closed by on_curl_socket. */
  curl_multi_cleanup(h->multi);
  h->multi = NULL;
  while (h->socks != NULL)
    sock_close(h, h->socks);
  uv_close((uv_handle_t *)&h->timer, on_handle_closed);
}
