/* files.c - files in a sandbox: streamed upload and download, listing,
 * removal (/v1/sandboxes/{id}/files), and the E2B relay of a request as it
 * is (data_proxy), which streams the same way. Part of the data plane
 * (data.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/config.h"
#include "fr/http.h"
#include "fr/urlsafe.h"
#include "fr/util.h"
#include "api.h"
#include "data.h"
#include "router.h"
#include "tenants.h"
#include "route_types.h"

/* ---------------------------------------------------------------------- */
/* files                                                                   */

/* The path query parameter: absolute, no NUL, bounded; answers and
 * returns -1 otherwise. */
static int query_path(struct api_req *q, char *out, size_t cap) {
  long n = fr_http_query_get(q->req->query, "path", out, cap);
  size_t i;
  int k;

  if (n == -EINVAL) {
    api_fail(q, 400, "invalid_path", "the path holds a NUL byte (%00)", NULL);
    return -1;
  }
  if (n < 0 || out[0] == '\0') {
    api_fail(q, 400, "invalid_path", "give the file's absolute path: ?path=/abs/path", NULL);
    return -1;
  }
  if ((size_t)n >= cap || (size_t)n > MAX_PATH_BYTES || out[0] != '/') {
    api_fail(q, 400, "invalid_path", "the path must be absolute and at most 4096 bytes", NULL);
    return -1;
  }
  /* A sandbox's paths are text: the agent answers in JSON, which holds
   * UTF-8 only, and the E2B SDKs send nothing else. */
  for (i = 0; i < (size_t)n; i += (size_t)k)
    if ((k = fr_utf8_char((const unsigned char *)out + i, (size_t)n - i)) <= 0) {
      char msg[200];
      snprintf(msg, sizeof(msg), "the path is not UTF-8 text (at byte %zu, after \"%.*s\")", i,
               (int)(i < 100 ? i : 100), out);
      api_fail(q, 400, "invalid_path", msg, NULL);
      return -1;
    }
  return 0;
}

/* "/files?path=<percent-encoded path>" (the agent route and its one
 * parameter, as upstream.c's allow-list takes them). */
static int files_path(const char *path, char *out, size_t cap) {
  size_t at = (size_t)snprintf(out, cap, "/files?path=");

  return fr_url_query_escape(out, cap, &at, path) == 0 ? 0 : -1;
}

/* A download or an upload through fr_adapter_agent_call. */
struct xfer {
  struct api_req *q;
  struct fr_adapter *a;
  struct fr_agent_call *call;
  struct fr_buf err;            /* the agent's error answer */
  char path[MAX_PATH_BYTES + 2];
  int64_t limit, received;      /* upload: the tenant's bound, bytes so far */
  int body_paused, body_done, answered;
  int raw;                      /* data_proxy: the agent's status, type and errors go back as they are */
  int port;                     /* data_proxy_port: the sandbox's port (its headers go back too) */
  void (*done)(void *arg);      /* data_proxy_port: called once when the call is over */
  void *done_arg;
  const char *ctype;            /* a download's content type; NULL: application/octet-stream */
  int restore;                  /* POST .../restore: its own answers */
};

static void xfer_free(struct xfer *x) {
  if (x->done != NULL)
    x->done(x->done_arg);
  fr_buf_free(&x->err);
  free(x);
}

static void xfer_gone(struct api_req *q, void *arg) {
  struct xfer *x = arg;

  (void)q;
  fr_agent_call_cancel(x->call);
  x->call = NULL;
  api_stream_end(x->q, 0);
  xfer_free(x);
}

/* <x>'s agent call has finished: nothing more comes from it or from the
 * client's body. Returns the request, still to be answered. */
static struct api_req *xfer_call_over(struct xfer *x) {
  struct api_req *q = x->q;

  x->call = NULL;
  q->gone_cb = NULL;
  if (q->req != NULL)
    q->req->body_cb = NULL;
  return q;
}

/* Starts <x>'s agent call; the request then waits for it. On failure
 * answers, frees <x> and returns -1. */
static int xfer_start(struct xfer *x, const char *id, struct fr_agent_call_opts *o) {
  struct api_req *q = x->q;
  int rc = fr_adapter_agent_call(x->a, data__pod_of(id), o, &x->call);

  if (rc != 0) {
    data__start_failed(q, x->a, rc);
    xfer_free(x);
    return -1;
  }
  api_defer(q);
  q->gone_cb = xfer_gone;
  q->gone_arg = x;
  return 0;
}

/* download */

static void dl_on_drain(struct fr_http_req *req) {
  struct xfer *x = api_req_of(req)->gone_arg;

  if (x != NULL && x->call != NULL)
    fr_agent_call_resume(x->call);
}

/* A response header of a sandbox's server that goes back to the client:
 * not hop-by-hop, not the framing or the type (set again), not ours. */
static int passes_back(const char *line, size_t n) {
  static const char *const drop[] = {"connection:", "keep-alive:", "proxy-", "te:", "trailer:",
                                     "transfer-encoding:", "upgrade:", "content-length:", "content-type:",
                                     "date:", "x-request-id:", "server:", "audit-id:", NULL};
  size_t i;

  for (i = 0; drop[i] != NULL; i++)
    if (n >= strlen(drop[i]) && strncasecmp(line, drop[i], strlen(drop[i])) == 0)
      return 0;
  return memchr(line, ':', n) != NULL;
}

static void port_head(struct xfer *x, int status, const char *content_type, const char *headers, int64_t len) {
  struct fr_buf h;
  const char *line, *end;

  fr_buf_init(&h);
  fr_buf_printf(&h, "X-Request-Id: %s\r\n", x->q->rid);
  for (line = headers; line != NULL && *line != '\0'; line = *end ? end + 1 : end) {
    size_t n;
    end = line + strcspn(line, "\n");
    n = (size_t)(end - line);
    if (n > 0 && line[n - 1] == '\r')
      n--;
    if (n > 0 && passes_back(line, n))
      fr_buf_printf(&h, "%.*s\r\n", (int)n, line);
  }
  if (h.data != NULL && x->q->req != NULL) {
    fr_http_stream_begin_length(x->q->req, status, content_type, h.data, len);
    x->q->streaming = 1;
  }
  fr_buf_free(&h);
}

static void dl_head(int status, const char *content_type, const char *headers, void *arg) {
  struct xfer *x = arg;
  char v[32];
  int64_t len = FR_HTTP_CHUNKED, n;

  if (fr_agent_header(headers, "Content-Length", v, sizeof(v)) == 0 && fr_parse_int64(v, 0, INT64_MAX, &n) == 0)
    len = n;
  if (x->port != 0)
    port_head(x, status, content_type, headers, status == 204 || status == 304 ? FR_HTTP_NO_BODY : len);
  else if (x->raw)
    api_stream_begin(x->q, status, content_type != NULL ? content_type : "application/octet-stream", NULL, len);
  else
    api_stream_begin(x->q, 200, x->ctype != NULL ? x->ctype : "application/octet-stream", NULL, len);
}

static int dl_data(const char *data, size_t len, void *arg) {
  struct xfer *x = arg;
  struct fr_http_req *req = x->q->req;

  if (req == NULL)
    return -1;
  fr_http_stream_write(req, data, len);
  if (fr_http_pending_bytes(req) > OUT_HIGH && fr_http_on_drain(req, dl_on_drain, OUT_LOW) == 0)
    return FR_AGENT_PAUSE;
  return 0;
}

static void xfer_error(struct xfer *x, const struct fr_agent_result *res) {
  json_t *e = res->err == FR_AGENT_OK ? json_loadb(res->body, res->body_len, 0, NULL) : NULL;

  data__agent_error(x->q, res, e, "path");
  json_decref(e);
}

static void dl_done(const struct fr_agent_result *res, void *arg) {
  struct xfer *x = arg;
  struct api_req *q = x->q;

  x->call = NULL;
  q->gone_cb = NULL;
  if (q->streaming)
    api_stream_end(q, res->err == FR_AGENT_OK);
  else
    xfer_error(x, res);
  xfer_free(x);
}

static struct xfer *xfer_new(struct api_req *q, struct fr_adapter *a) {
  struct xfer *x = calloc(1, sizeof(*x));

  if (x == NULL) {
    api_oom(q);
    return NULL;
  }
  x->q = q;
  x->a = a;
  fr_buf_init(&x->err);
  return x;
}

static void file_download(struct api_req *q, struct fr_adapter *a, const char *id, const char *path) {
  struct fr_agent_call_opts o;
  struct xfer *x;
  char url[3 * MAX_PATH_BYTES + 32];

  if (files_path(path, url, sizeof(url)) != 0) {
    api_fail(q, 400, "invalid_path", "the path is too long", NULL);
    return;
  }
  if ((x = xfer_new(q, a)) == NULL)
    return;
  memset(&o, 0, sizeof(o));
  o.method = "GET";
  o.path = url;
  o.request_id = q->rid;
  o.on_head = dl_head;
  o.on_data = dl_data;
  o.on_done = dl_done;
  o.arg = x;
  if (xfer_start(x, id, &o) != 0)
    return;
}

static json_t *shape_entries(json_t *answer) {
  json_t *list = json_array(), *e;
  size_t i;

  json_array_foreach(json_object_get(answer, "entries"), i, e) {
    const char *t = json_string_value(json_object_get(e, "type"));
    const char *size = json_string_value(json_object_get(e, "size"));
    int64_t sz = 0;
    char mode[8];
    json_t *o;

    snprintf(mode, sizeof(mode), "%04o", (unsigned)(json_integer_value(json_object_get(e, "mode")) & 07777));
    if (size != NULL)
      (void)fr_parse_int64(size, 0, INT64_MAX, &sz);
    o = json_pack("{s:O,s:O,s:s,s:I,s:s}", "name", json_object_get(e, "name"), "path", json_object_get(e, "path"),
                  "type", t == NULL ? "other" : strcmp(t, "FILE_TYPE_FILE") == 0 ? "file"
                          : strcmp(t, "FILE_TYPE_DIRECTORY") == 0              ? "dir"
                          : strcmp(t, "FILE_TYPE_SYMLINK") == 0                ? "symlink"
                                                                               : "other",
                  "size", (json_int_t)sz, "mode", mode);
    if (o == NULL)
      continue;
    if (json_is_string(json_object_get(e, "modifiedTime")))
      json_object_set(o, "modified_at", json_object_get(e, "modifiedTime"));
    json_array_append_new(list, o);
  }
  return json_pack("{s:o}", "entries", list);
}

/* upload */

static void up_drain(void *arg) {
  struct xfer *x = arg;

  if (x->body_paused && x->q->req != NULL) {
    x->body_paused = 0;
    fr_http_body_pause(x->q->req, 0);
  }
}

static void up_done(const struct fr_agent_result *res, void *arg) {
  struct xfer *x = arg;
  struct api_req *q = xfer_call_over(x);

  if (x->answered) {
    ;
  } else if (x->restore && res->err == FR_AGENT_OK && res->status >= 200 && res->status < 300 && x->body_done) {
    api_reply(q, 200, json_pack("{s:s,s:b,s:I}", "path", x->path, "restored", 1, "archive_bytes",
                                (json_int_t)x->received), NULL);
  } else if (x->restore && res->err == FR_AGENT_OK && (res->status == 400 || res->status == 413)) {
    /* The agent names the entry or the bound; nothing was written. */
    json_t *e = json_loadb(res->body, res->body_len, 0, NULL);
    const char *m = json_string_value(json_object_get(e, "message"));
    char msg[600];
    snprintf(msg, sizeof(msg), "%s%.500s", res->status == 413 ? "the archive holds more than the tenant's "
                                                                "max_file_bytes: " : "",
             m != NULL ? m : "the archive was refused");
    api_fail(q, res->status, res->status == 413 ? "file_too_large" : "invalid_archive", msg, NULL);
    json_decref(e);
  } else if (res->err == FR_AGENT_OK && res->status >= 200 && res->status < 300 && x->body_done) {
    api_reply(q, 201, json_pack("{s:s,s:I}", "path", x->path, "size", (json_int_t)x->received), NULL);
  } else if (res->err == FR_AGENT_OK && res->status >= 200 && res->status < 300) {
    api_fail(q, 502, "agent_error", "the agent answered before the whole file arrived", NULL);
  } else {
    xfer_error(x, res);
  }
  xfer_free(x);
}

static void up_too_large(struct xfer *x) {
  char msg[200];

  snprintf(msg, sizeof(msg), "the file is larger than the tenant's max_file_bytes (%" PRId64 ")", x->limit);
  x->answered = 1;
  fr_agent_call_cancel(x->call);
  x->call = NULL;
  x->q->gone_cb = NULL;
  x->q->req->body_cb = NULL;
  api_fail(x->q, 413, "file_too_large", msg, "Connection: close\r\n");
  xfer_free(x);
}

static void up_body(struct fr_http_req *req, const char *data, size_t len) {
  struct xfer *x = api_req_of(req)->gone_arg;

  if (x == NULL || x->call == NULL || x->answered)
    return;
  if (data == NULL) {
    x->body_done = 1;
    fr_agent_call_end(x->call);
    return;
  }
  x->received += (int64_t)len;
  if (x->received > x->limit) {
    up_too_large(x);
    return;
  }
  if (fr_agent_call_write(x->call, data, len) != 0)
    return;   /* the call is ending; up_done answers */
  if (fr_agent_call_pending(x->call) > UP_HIGH && !x->body_paused) {
    x->body_paused = 1;
    fr_http_body_pause(req, 1);
  }
}

/* Starts the upload call <o> of <x> and feeds it the request's body. */
static void up_start(struct xfer *x, const char *id, struct fr_agent_call_opts *o) {
  struct api_req *q = x->q;

  if (xfer_start(x, id, o) != 0)
    return;
  if (q->req->body_streaming) {
    q->req->body_cb = up_body;
  } else {
    /* A buffered body (a router without streamed uploads): all at once. */
    up_body(q->req, q->req->body, q->req->body_len);
    if (q->req != NULL)
      up_body(q->req, NULL, 0);
  }
}

static void file_upload(struct api_req *q, struct fr_adapter *a, const char *id, const char *path) {
  struct fr_agent_call_opts o;
  struct xfer *x;
  const char *cl = fr_http_req_header(q->req, "Content-Length");
  char url[3 * MAX_PATH_BYTES + 32], msg[200];
  int64_t size = -1;

  if (files_path(path, url, sizeof(url)) != 0) {
    api_fail(q, 400, "invalid_path", "the path is too long", NULL);
    return;
  }
  if (cl != NULL && fr_parse_int64(cl, 0, INT64_MAX, &size) != 0)
    size = -1;
  if (q->ts != NULL && size > q->ts->max_file_bytes) {
    snprintf(msg, sizeof(msg), "the file is larger than the tenant's max_file_bytes (%" PRId64 ")",
             q->ts->max_file_bytes);
    api_fail(q, 413, "file_too_large", msg, "Connection: close\r\n");
    return;
  }
  if ((x = xfer_new(q, a)) == NULL)
    return;
  snprintf(x->path, sizeof(x->path), "%s", path);
  x->limit = q->ts != NULL ? q->ts->max_file_bytes : FR_DEFAULT_TENANT_FILE_BYTES;
  memset(&o, 0, sizeof(o));
  o.method = "POST";
  o.path = url;
  o.content_type = "application/octet-stream";
  o.stream_body = 1;
  o.body_size = size;
  o.request_id = q->rid;
  o.on_drain = up_drain;
  o.on_done = up_done;
  o.arg = x;
  up_start(x, id, &o);
}

/* ---------------------------------------------------------------------- */
/* directory snapshots: the agent's /tar, both ways                        */

/* "/tar?path=<escaped>[&gzip=1][&max_bytes=N]" (upstream.c's /tar). */
static int tar_path(const char *path, int gz, int64_t max_bytes, char *out, size_t cap) {
  size_t at = (size_t)snprintf(out, cap, "/tar?path=");
  int n;

  if (fr_url_query_escape(out, cap, &at, path) != 0)
    return -1;
  n = snprintf(out + at, cap - at, "%s", gz ? "&gzip=1" : "");
  if (n < 0 || (size_t)n >= cap - at)
    return -1;
  at += (size_t)n;
  if (max_bytes > 0) {
    n = snprintf(out + at, cap - at, "&max_bytes=%" PRId64, max_bytes);
    if (n < 0 || (size_t)n >= cap - at)
      return -1;
  }
  return 0;
}

/* ?gzip=1|true: 1; absent, 0 or false: 0; else -1 after answering. */
static int query_gzip(struct api_req *q) {
  char v[8];

  if (fr_http_query_get(q->req->query, "gzip", v, sizeof(v)) < 0)
    return 0;
  if (strcmp(v, "1") == 0 || strcmp(v, "true") == 0)
    return 1;
  if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0)
    return 0;
  api_field_fail(q, "gzip", "gzip is 1 or 0");
  return -1;
}

/* GET .../snapshot?path=/dir[&gzip=1]: the directory as a tar stream. */
void snapshot_get(struct api_req *q, const struct route_params *p) {
  struct fr_agent_call_opts o;
  struct xfer *x;
  char path[MAX_PATH_BYTES + 2], url[3 * MAX_PATH_BYTES + 64];
  int gz;

  if (query_path(q, path, sizeof(path)) != 0 || (gz = query_gzip(q)) < 0)
    return;
  if (tar_path(path, gz, 0, url, sizeof(url)) != 0) {
    api_fail(q, 400, "invalid_path", "the path is too long", NULL);
    return;
  }
  if ((x = xfer_new(q, p->a)) == NULL)
    return;
  x->ctype = gz ? "application/gzip" : "application/x-tar";
  memset(&o, 0, sizeof(o));
  o.method = "GET";
  o.path = url;
  o.internal_route = 1;
  o.request_id = q->rid;
  o.on_head = dl_head;
  o.on_data = dl_data;
  o.on_done = dl_done;
  o.arg = x;
  xfer_start(x, p->id, &o);
}

/* POST .../restore?path=/dir: the body (tar, or gzip'd tar) replaces the
 * directory's content; at most the tenant's max_file_bytes, both as sent
 * and as unpacked (the agent's bound), nothing half-written. */
void snapshot_restore(struct api_req *q, const struct route_params *p) {
  struct fr_agent_call_opts o;
  struct xfer *x;
  const char *cl = fr_http_req_header(q->req, "Content-Length");
  char path[MAX_PATH_BYTES + 2], url[3 * MAX_PATH_BYTES + 96], msg[200];
  int64_t size = -1, limit = q->ts != NULL ? q->ts->max_file_bytes : FR_DEFAULT_TENANT_FILE_BYTES;

  if (query_path(q, path, sizeof(path)) != 0)
    return;
  if (strcmp(path, "/") == 0) {
    api_fail(q, 400, "invalid_path", "a restore replaces a directory's content: not /", NULL);
    return;
  }
  if (tar_path(path, 0, limit, url, sizeof(url)) != 0) {
    api_fail(q, 400, "invalid_path", "the path is too long", NULL);
    return;
  }
  if (cl != NULL && fr_parse_int64(cl, 0, INT64_MAX, &size) != 0)
    size = -1;
  if (size > limit) {
    snprintf(msg, sizeof(msg), "the archive is larger than the tenant's max_file_bytes (%" PRId64 ")", limit);
    api_fail(q, 413, "file_too_large", msg, "Connection: close\r\n");
    return;
  }
  if ((x = xfer_new(q, p->a)) == NULL)
    return;
  snprintf(x->path, sizeof(x->path), "%s", path);
  x->limit = limit;
  x->restore = 1;
  memset(&o, 0, sizeof(o));
  o.method = "POST";
  o.path = url;
  o.internal_route = 1;
  o.content_type = "application/x-tar";
  o.stream_body = 1;
  o.body_size = size;
  o.request_id = q->rid;
  o.on_drain = up_drain;
  o.on_done = up_done;
  o.arg = x;
  up_start(x, p->id, &o);
}

/* GET: a download, or with ?list=1 the directory's entries. */
void files_get(struct api_req *q, const struct route_params *p) {
  char path[MAX_PATH_BYTES + 2], v[8];

  if (query_path(q, path, sizeof(path)) != 0)
    return;
  if (fr_http_query_get(q->req->query, "list", v, sizeof(v)) >= 0 && (strcmp(v, "1") == 0 || strcmp(v, "true") == 0))
    data__rpc_start(q, p->a, p->id, "filesystem.Filesystem/ListDir", json_pack("{s:s,s:i}", "path", path, "depth", 1),
                    "path", shape_entries, 200);
  else
    file_download(q, p->a, p->id, path);
}

/* PUT or POST: the body, streamed, becomes the file. */
void files_put(struct api_req *q, const struct route_params *p) {
  char path[MAX_PATH_BYTES + 2];

  if (query_path(q, path, sizeof(path)) == 0)
    file_upload(q, p->a, p->id, path);
}

void files_delete(struct api_req *q, const struct route_params *p) {
  char path[MAX_PATH_BYTES + 2];

  if (query_path(q, path, sizeof(path)) == 0)
    data__rpc_start(q, p->a, p->id, "filesystem.Filesystem/Remove", json_pack("{s:s}", "path", path), "path", NULL,
                    204);
}

/* ---------------------------------------------------------------------- */
/* a request relayed as it is                                              */

static void raw_done(const struct fr_agent_result *res, void *arg) {
  struct xfer *x = arg;
  struct api_req *q = xfer_call_over(x);

  if (x->answered)
    ;
  else if (q->streaming)
    api_stream_end(q, res->err == FR_AGENT_OK);
  else if (res->err == FR_AGENT_OK)
    /* The agent's own error answer (Connect's {"code":"not_found",...} or
     * envd's {"code":404,...}): the client's SDK reads exactly that. */
    api_reply_raw(q, res->status, "application/json", res->body, res->body_len);
  else
    data__agent_error(q, res, NULL, "path");
  xfer_free(x);
}

void data_proxy(struct api_req *q, struct fr_adapter *a, const char *id, const char *agent_path,
                const char *headers) {
  struct fr_agent_call_opts o;
  struct xfer *x;

  if ((x = xfer_new(q, a)) == NULL)
    return;
  x->raw = 1;
  x->limit = q->ts != NULL ? q->ts->max_file_bytes : FR_DEFAULT_TENANT_FILE_BYTES;
  memset(&o, 0, sizeof(o));
  o.method = q->req->method;
  o.path = agent_path;
  o.content_type = fr_http_req_header(q->req, "Content-Type");
  o.headers = headers;
  o.request_id = q->rid;
  o.on_head = dl_head;
  o.on_data = dl_data;
  o.on_done = raw_done;
  o.arg = x;
  if (q->req->body_streaming) {
    const char *cl = fr_http_req_header(q->req, "Content-Length");
    o.stream_body = 1;
    if (cl == NULL || fr_parse_int64(cl, 0, INT64_MAX, &o.body_size) != 0)
      o.body_size = -1;
    o.on_drain = up_drain;
    up_start(x, id, &o);
    return;
  }
  o.body = q->req->body_len > 0 ? q->req->body : NULL;
  o.body_len = q->req->body_len;
  xfer_start(x, id, &o);
}


/* ---------------------------------------------------------------------- */
/* a port the sandbox serves                                               */

static void port_done(const struct fr_agent_result *res, void *arg) {
  struct xfer *x = arg;
  struct api_req *q = xfer_call_over(x);
  char msg[500];

  if (x->answered)
    ;
  else if (q->streaming)
    api_stream_end(q, res->err == FR_AGENT_OK);
  else if (res->err == FR_AGENT_OK)
    /* The server's own 502/503/504 (held whole, up to 1 MiB). */
    api_reply_raw(q, res->status, "text/plain; charset=utf-8", res->body, res->body_len);
  else if (res->flags & FR_AGENT_PORT_CLOSED) {
    snprintf(msg, sizeof(msg), "nothing listens on port %d of the sandbox", x->port);
    api_fail(q, 502, "port_not_open", msg, NULL);
  } else {
    snprintf(msg, sizeof(msg), "port %d of the sandbox could not be reached: %.300s", x->port,
             res->message != NULL ? res->message : "no answer");
    api_fail(q, 502, "port_unreachable", msg, NULL);
  }
  xfer_free(x);
}

void data_proxy_port(struct api_req *q, struct fr_adapter *a, const char *id, int port, const char *path_query,
                     const char *headers, void (*done)(void *arg), void *done_arg) {
  struct fr_agent_call_opts o;
  struct xfer *x;

  if ((x = xfer_new(q, a)) == NULL) {
    done(done_arg);
    return;
  }
  /* From here xfer_free() runs <done>, whatever becomes of the call. */
  x->done = done;
  x->done_arg = done_arg;
  x->raw = 1;
  x->port = port;
  x->limit = q->ts != NULL ? q->ts->max_file_bytes : FR_DEFAULT_TENANT_FILE_BYTES;
  memset(&o, 0, sizeof(o));
  o.port = port;
  o.method = q->req->method;
  o.path = path_query;
  o.content_type = fr_http_req_header(q->req, "Content-Type");
  o.headers = headers;
  o.request_id = q->rid;
  o.on_head = dl_head;
  o.on_data = dl_data;
  o.on_done = port_done;
  o.arg = x;
  if (q->req->body_streaming) {
    const char *cl = fr_http_req_header(q->req, "Content-Length");
    o.stream_body = 1;
    if (cl == NULL || fr_parse_int64(cl, 0, INT64_MAX, &o.body_size) != 0)
      o.body_size = -1;
    o.on_drain = up_drain;
    up_start(x, id, &o);
    return;
  }
  o.body = q->req->body_len > 0 ? q->req->body : NULL;
  o.body_len = q->req->body_len;
  xfer_start(x, id, &o);
}
