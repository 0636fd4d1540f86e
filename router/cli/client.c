/* client.c - fedctl's HTTP side: libcurl requests to the router, JSON
 * bodies, and turning API errors into one clear line.
 *
 * Blocking calls reuse one easy handle (keep-alive across the requests of
 * a command); the batch create in cmd_sandbox.c drives two easy handles
 * with curl multi through the same fc_easy_setup()/fc_resp_finish().
 */
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "fedctl.h"
#include "fr/version.h"

/* Connecting to a router is loopback or LAN: 10 s is long enough to mean
 * "not there". */
#define FC_CONNECT_TIMEOUT_S 10L

int fc_ctx_init(struct fc_ctx *ctx) {
  size_t n;

  if (ctx->base != NULL)
    return 0;
  if (strncmp(ctx->url, "http://", 7) != 0 && strncmp(ctx->url, "https://", 8) != 0) {
    fc_usage_error(NULL, "router URL '%s' must start with http:// or https:// (--url or FEDROUTER_URL)",
                   ctx->url);
    return -EINVAL;
  }
  ctx->base = strdup(ctx->url);
  if (ctx->base == NULL)
    return -ENOMEM;
  n = strlen(ctx->base);
  while (n > 0 && ctx->base[n - 1] == '/')
    ctx->base[--n] = '\0';
  return 0;
}

void fc_ctx_close(struct fc_ctx *ctx) {
  if (ctx == NULL)
    return;
  if (ctx->easy != NULL)
    curl_easy_cleanup(ctx->easy);
  ctx->easy = NULL;
  free(ctx->base);
  ctx->base = NULL;
}

void fc_resp_init(struct fc_resp *r) {
  memset(r, 0, sizeof(*r));
  fr_buf_init(&r->body);
}

void fc_resp_close(struct fc_resp *r) {
  if (r == NULL)
    return;
  fr_buf_free(&r->body);
  json_decref(r->json);
  r->json = NULL;
  curl_slist_free_all(r->headers);
  r->headers = NULL;
}

int fc_buf_put_escaped(struct fr_buf *b, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  int rc = 0;

  for (; *s != '\0' && rc == 0; s++) {
    unsigned char c = (unsigned char)*s;
    /* RFC 3986 unreserved characters stay; so do '=' and '/', which are
     * legal in a query and keep `label=k=v` readable in logs. */
    if (isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '=' || c == '/')
      rc = fr_buf_putc(b, (char)c);
    else
      rc = fr_buf_printf(b, "%%%c%c", hex[c >> 4], hex[c & 15]);
  }
  return rc;
}

int fc_add_query(struct fr_buf *b, const char *key, const char *val) {
  int rc = fr_buf_printf(b, "%c%s=", strchr(b->data ? b->data : "", '?') ? '&' : '?', key);
  return rc ? rc : fc_buf_put_escaped(b, val);
}

int fc_sandbox_path(struct fr_buf *b, const char *id, const char *suffix) {
  int rc = fr_buf_puts(b, "/v1/sandboxes/");
  if (rc == 0)
    rc = fc_buf_put_escaped(b, id);
  if (rc == 0)
    rc = fr_buf_puts(b, suffix);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* curl callbacks                                                          */

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg) {
  struct fc_resp *r = arg;
  size_t n = size * nmemb;

  /* Returning less than n makes curl fail the transfer (CURLE_WRITE_ERROR). */
  return fr_buf_append(&r->body, data, n) == 0 ? n : 0;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *arg) {
  struct fc_resp *r = arg;
  size_t n = size * nmemb, len;
  static const char name[] = "retry-after:";

  if (n > sizeof(name) - 1 && strncasecmp(data, name, sizeof(name) - 1) == 0) {
    const char *v = data + sizeof(name) - 1;
    const char *end = data + n;
    while (v < end && (*v == ' ' || *v == '\t'))
      v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
      end--;
    len = (size_t)(end - v);
    if (len >= sizeof(r->retry_after))
      len = sizeof(r->retry_after) - 1;
    memcpy(r->retry_after, v, len);
    r->retry_after[len] = '\0';
  }
  return n;
}

/* ---------------------------------------------------------------------- */
/* requests                                                                */

int fc_easy_setup(struct fc_ctx *ctx, CURL *easy, const char *method, const char *path,
                  json_t *body, long timeout_s, struct fc_resp *r) {
  char *text = NULL;
  int rc;

  if (body != NULL && (text = json_dumps(body, JSON_COMPACT)) == NULL)
    return -ENOMEM;
  rc = fc_easy_setup_raw(ctx, easy, method, path, text != NULL ? "application/json" : NULL, text,
                         text != NULL ? strlen(text) : 0, timeout_s, r);
  free(text);
  return rc;
}

int fc_easy_setup_raw(struct fc_ctx *ctx, CURL *easy, const char *method, const char *path,
                      const char *content_type, const void *data, size_t len, long timeout_s,
                      struct fc_resp *r) {
  struct fr_buf url, h;
  struct curl_slist *hl = NULL, *t;
  int rc = -ENOMEM;

  fr_buf_init(&url);
  fr_buf_init(&h);
  if (fr_buf_printf(&url, "%s%s", ctx->base, path) != 0)
    goto fail;

  /* Request headers: built per request, freed with <r>. */
  if ((t = curl_slist_append(hl, "Accept: application/json")) == NULL)
    goto fail;
  hl = t;
  /* No "Expect: 100-continue" round trip for big bodies. */
  if ((t = curl_slist_append(hl, "Expect:")) == NULL)
    goto fail;
  hl = t;
  if (content_type != NULL) {
    if (fr_buf_printf(&h, "Content-Type: %s", content_type) != 0 ||
        (t = curl_slist_append(hl, h.data)) == NULL)
      goto fail;
    hl = t;
  }
  if (ctx->token != NULL) {
    fr_buf_reset(&h);
    if (fr_buf_printf(&h, "Authorization: Bearer %s", ctx->token) != 0 ||
        (t = curl_slist_append(hl, h.data)) == NULL)
      goto fail;
    hl = t;
  }
  if (ctx->region != NULL) {
    fr_buf_reset(&h);
    if (fr_buf_printf(&h, "X-Client-Region: %s", ctx->region) != 0 ||
        (t = curl_slist_append(hl, h.data)) == NULL)
      goto fail;
    hl = t;
  }

  curl_easy_reset(easy);
  curl_easy_setopt(easy, CURLOPT_URL, url.data);
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_USERAGENT, "fedctl/" FR_VERSION);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT, FC_CONNECT_TIMEOUT_S);
  curl_easy_setopt(easy, CURLOPT_TIMEOUT, timeout_s);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, r->err);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, hl);
  if (data != NULL) {
    /* COPYPOSTFIELDS after the size: curl keeps its own copy of <len>
     * bytes (NULs included), so <data> can go now. */
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(easy, CURLOPT_COPYPOSTFIELDS, len > 0 ? data : "");
  }
  if (strcmp(method, "GET") != 0 && !(strcmp(method, "POST") == 0 && data != NULL))
    curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method);
  r->err[0] = '\0';
  r->headers = hl;
  hl = NULL;
  rc = 0;
fail:
  curl_slist_free_all(hl);
  fr_buf_free(&h);
  fr_buf_free(&url);
  return rc;
}

void fc_resp_finish(CURL *easy, CURLcode rc, struct fc_resp *r) {
  json_error_t jerr;

  r->curl_rc = rc;
  if (rc != CURLE_OK) {
    if (r->err[0] == '\0')
      snprintf(r->err, sizeof(r->err), "%s", curl_easy_strerror(rc));
    r->status = 0;
    return;
  }
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &r->status);
  /* Exec output may contain NUL bytes (JSON "\u0000"): allow them. */
  if (r->body.len > 0)
    r->json = json_loadb(r->body.data, r->body.len, JSON_ALLOW_NUL, &jerr);
}

int fc_ctx_easy(struct fc_ctx *ctx, CURL **easy) {
  int err;

  if ((err = fc_ctx_init(ctx)) != 0)
    return err;
  if (ctx->easy == NULL && (ctx->easy = curl_easy_init()) == NULL)
    return -ENOMEM;
  *easy = ctx->easy;
  return 0;
}

int fc_request(struct fc_ctx *ctx, const char *method, const char *path, json_t *body,
               long timeout_s, struct fc_resp *r) {
  CURLcode rc;
  CURL *easy;
  int err;

  if ((err = fc_ctx_easy(ctx, &easy)) != 0)
    return err;
  if ((err = fc_easy_setup(ctx, ctx->easy, method, path, body, timeout_s, r)) != 0)
    return err;
  rc = curl_easy_perform(ctx->easy);
  fc_resp_finish(ctx->easy, rc, r);
  if (rc == CURLE_OUT_OF_MEMORY || (rc == CURLE_WRITE_ERROR && r->body.len > 0))
    return -ENOMEM;
  return rc == CURLE_OK ? 0 : -EIO;
}

int fc_oom(void) {
  fprintf(stderr, "fedctl: out of memory\n");
  return FC_EXIT_FAIL;
}

int fc_bad_answer(const struct fc_resp *r) {
  fprintf(stderr, "fedctl: unexpected answer from the router (HTTP %ld, %s)\n", r->status,
          r->json ? "JSON of the wrong shape" : "not JSON");
  return FC_EXIT_FAIL;
}

void fc_print_body(const struct fc_resp *r) {
  if (r->body.len == 0)
    return;
  fwrite(r->body.data, 1, r->body.len, stdout);
  if (r->body.data[r->body.len - 1] != '\n')
    fputc('\n', stdout);
}

/* Prints the per-cluster reasons of a no_capacity error (or a partial
 * create's placement): an array of objects or strings, or an object of
 * cluster -> reason. The exact shape is not fixed by the API doc, so show
 * what is there. */
static void print_cluster_reasons(const json_t *clusters) {
  size_t i;
  const char *key;
  json_t *v;

  if (json_is_array(clusters)) {
    json_array_foreach(clusters, i, v) {
      if (json_is_string(v)) {
        fprintf(stderr, "  %s\n", json_string_value(v));
      } else if (json_is_object(v)) {
        const char *name = fc_jstr(v, "cluster", fc_jstr(v, "name", "?"));
        const char *why = fc_jstr(v, "reason", fc_jstr(v, "message", NULL));
        if (why != NULL) {
          fprintf(stderr, "  %s: %s\n", name, why);
        } else {
          char *s = json_dumps(v, JSON_COMPACT);
          fprintf(stderr, "  %s: %s\n", name, s ? s : "?");
          free(s);
        }
      }
    }
  } else if (json_is_object(clusters)) {
    json_object_foreach((json_t *)clusters, key, v) {
      if (json_is_string(v)) {
        fprintf(stderr, "  %s: %s\n", key, json_string_value(v));
      } else {
        char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        fprintf(stderr, "  %s: %s\n", key, s ? s : "?");
        free(s);
      }
    }
  }
}

int fc_report(struct fc_ctx *ctx, const struct fc_resp *r) {
  const json_t *e;

  if (r->status == 0) {
    fprintf(stderr, "fedctl: cannot reach fedrouter at %s: %s\n", ctx->base ? ctx->base : ctx->url,
            r->err[0] ? r->err : "no response");
    if (r->curl_rc == CURLE_COULDNT_CONNECT || r->curl_rc == CURLE_COULDNT_RESOLVE_HOST)
      fprintf(stderr, "fedctl: is the router running? Set the endpoint with --url or FEDROUTER_URL.\n");
    return FC_EXIT_FAIL;
  }
  if (ctx->json)
    fc_print_body(r);
  e = r->json ? json_object_get(r->json, "error") : NULL;
  if (json_is_object(e)) {
    const char *field = fc_jstr(e, "field", NULL);
    fprintf(stderr, "fedctl: %s: %s\n", fc_jstr(e, "code", "error"), fc_jstr(e, "message", "(no message)"));
    if (field != NULL)
      fprintf(stderr, "  field: %s\n", field);
    /* Per-cluster reasons: docs/api.md puts them in error.clusters; the
     * router also sends the whole placement (error.placement.clusters). */
    if (json_object_get(e, "clusters") != NULL)
      print_cluster_reasons(json_object_get(e, "clusters"));
    else if (json_is_object(json_object_get(e, "placement")))
      print_cluster_reasons(json_object_get(json_object_get(e, "placement"), "clusters"));
  } else {
    /* Not our JSON: a proxy or the wrong port. Show the start of it. */
    int n = (int)(r->body.len > 200 ? 200 : r->body.len);
    const char *nl = r->body.data ? memchr(r->body.data, '\n', (size_t)n) : NULL;
    if (nl != NULL)
      n = (int)(nl - r->body.data);
    fprintf(stderr, "fedctl: HTTP %ld from %s%s%.*s\n", r->status, ctx->base, n > 0 ? ": " : "", n,
            r->body.data ? r->body.data : "");
  }
  if (r->retry_after[0] != '\0')
    fprintf(stderr, "  retry after %s s\n", r->retry_after);
  return FC_EXIT_FAIL;
}

int fc_call(struct fc_ctx *ctx, const char *method, const char *path, json_t *body,
            long timeout_s, struct fc_resp *r) {
  int rc = fc_request(ctx, method, path, body, timeout_s, r);

  if (rc == -EINVAL)
    return FC_EXIT_USAGE;
  if (rc == -ENOMEM)
    return fc_oom();
  if (rc != 0 || r->status < 200 || r->status > 299)
    return fc_report(ctx, r);
  return FC_EXIT_OK;
}

/* ---------------------------------------------------------------------- */
/* answers read as they arrive                                             */

/* An error answer is a small JSON body; more than this is not ours. */
#define FC_MAX_ERROR_BODY ((size_t)1 << 20)

static size_t on_sink_body(char *data, size_t size, size_t nmemb, void *arg) {
  struct fc_sink *k = arg;
  size_t n = size * nmemb;
  long status = 0;

  if (!k->decided) {
    /* Called only once the head is complete: the status is final. */
    curl_easy_getinfo(k->easy, CURLINFO_RESPONSE_CODE, &status);
    k->ok = status >= 200 && status <= 299;
    k->decided = 1;
  }
  if (!k->ok) {
    if (k->r->body.len + n <= FC_MAX_ERROR_BODY && fr_buf_append(&k->r->body, data, n) != 0)
      return 0;
    return n;
  }
  if ((k->err = k->cb(data, n, k->arg)) != 0)
    return 0;   /* stops the transfer */
  return n;
}

void fc_sink_attach(struct fc_sink *k, CURL *easy, struct fc_resp *r, fc_data_cb cb, void *arg) {
  memset(k, 0, sizeof(*k));
  k->easy = easy;
  k->r = r;
  k->cb = cb;
  k->arg = arg;
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_sink_body);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, k);
}

void fc_sink_finish(struct fc_sink *k, CURLcode rc) {
  long status = 0;

  fc_resp_finish(k->easy, rc, k->r);
  if (!k->decided && rc == CURLE_OK) {
    /* A body-less answer never reached on_sink_body. */
    curl_easy_getinfo(k->easy, CURLINFO_RESPONSE_CODE, &status);
    k->ok = status >= 200 && status <= 299;
    k->decided = 1;
  }
}

int fc_sink_report(struct fc_ctx *ctx, const struct fc_sink *k, const char *what) {
  if (k->err == -ENOMEM)
    return fc_oom();
  if (k->err != 0) {
    fprintf(stderr, "fedctl: %s: %s\n", what, strerror(-k->err));
    return FC_EXIT_FAIL;
  }
  if (k->decided && k->ok && k->r->curl_rc != CURLE_OK) {
    /* It began, then the connection failed. */
    fprintf(stderr, "fedctl: the answer from %s broke off: %s\n", ctx->base, k->r->err);
    return FC_EXIT_FAIL;
  }
  return fc_report(ctx, k->r);
}

int fc_write_all(int fd, const void *data, size_t len) {
  const char *p = data;
  ssize_t n;

  while (len > 0) {
    n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        /* A non-blocking terminal or pipe (shared with another program):
         * wait until it takes more. */
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
          return -errno;
        continue;
      }
      return -errno;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}
