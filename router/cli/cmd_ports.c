/* cmd_ports.c - a sandbox's own ports: `fedctl url` (the address of a
 * port, docs/api.md "Ports") and `fedctl run-code` (a cell for the Code
 * Interpreter on port 49999 of a code-interpreter sandbox, docs/e2b.md).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fedctl.h"

/* The Code Interpreter's port in a code-interpreter sandbox. */
#define CODE_PORT 49999
/* The longest cell read from stdin; the server takes 4 MiB bodies. */
#define MAX_CODE_BYTES ((size_t)4 << 20)
/* The longest NDJSON line of the server's answer (a PNG result is a few
 * hundred KiB of base64; its output bound is 16 MiB). */
#define MAX_LINE_BYTES ((size_t)32 << 20)

static const char url_usage[] =
    "usage: fedctl url ID PORT\n"
    "\n"
    "Prints the URL of PORT (1-65535) of sandbox ID: with the router's ports\n"
    "domain, http(s)://PORT-<short id>.<domain>/ (a preview URL a browser can\n"
    "open; a domain without a port takes the router URL's); without one, the\n"
    "path form <router>/v1/sandboxes/ID/ports/PORT/.\n"
    "A private port takes the sandbox's traffic token (header\n"
    "E2B-Traffic-Access-Token, shown with --json) or your bearer token; one\n"
    "made public at create (--public-port) takes nothing.\n";

static const char run_code_usage[] =
    "usage: fedctl run-code ID [--context CTX] < code.py\n"
    "\n"
    "Runs the Python code read from stdin as one cell in the Code Interpreter\n"
    "of sandbox ID (a sandbox of the code-interpreter image, port 49999), in\n"
    "its default context or in context CTX. The cell's stdout and stderr\n"
    "stream as it runs; its main result's text is printed last. With --json\n"
    "the server's NDJSON lines are printed as they come.\n"
    "\n"
    "Exit status: 0 when the cell ran without error, 1 when it raised (the\n"
    "error's traceback on stderr) or the call failed.\n";

static const struct fc_opt no_opts[] = {{NULL, 0, 0, 0}};

enum { OPT_CONTEXT = 1 };
static const struct fc_opt run_code_opts[] = {{"context", 0, 1, OPT_CONTEXT}, {NULL, 0, 0, 0}};

/* The scheme of the router's URL <base>: "https" or "http". */
static const char *scheme_of(const char *base) {
  return strncmp(base, "https://", 8) == 0 ? "https" : "http";
}

/* The explicit port of the router's URL <base> (":8080"), or "": preview
 * URLs are served by the router's own listener, so a ports domain given
 * without a port is reached on the port the router is. */
static const char *port_of(const char *base) {
  const char *host = strstr(base, "://"), *end, *colon;

  if (host == NULL)
    return "";
  host += 3;
  end = host + strcspn(host, "/?#");
  if (*host == '[') /* [v6]:port */
    host = memchr(host, ']', (size_t)(end - host)) != NULL ? (const char *)memchr(host, ']', (size_t)(end - host))
                                                           : end;
  colon = memchr(host, ':', (size_t)(end - host));
  return colon != NULL && colon + 1 < end ? colon : "";
}

int fc_cmd_url(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  struct fc_resp r;
  struct fr_buf path;
  const char *val, *id = NULL, *port_s = NULL, *domain, *short_id;
  int64_t port;
  int opt, rc;

  fc_args_init(&a, ctx, "url", no_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    if (opt == FC_ARG_HELP) {
      fputs(url_usage, stdout);
      return FC_EXIT_OK;
    }
    if (opt == FC_ARG_ERR)
      return FC_EXIT_USAGE;
    if (id == NULL)
      id = val;
    else if (port_s == NULL)
      port_s = val;
    else
      return fc_usage_error("url", "unexpected argument '%s'", val);
  }
  if (id == NULL || port_s == NULL)
    return fc_usage_error("url", "needs a sandbox ID and a PORT");
  if (fc_check_id("url", id) != 0 || fc_parse_int("url", "PORT", port_s, 1, 65535, &port) != 0)
    return FC_EXIT_USAGE;
  fc_resp_init(&r);
  fr_buf_init(&path);
  if (fc_sandbox_path(&path, id, "") != 0) {
    rc = fc_oom();
    goto out;
  }
  if ((rc = fc_call(ctx, "GET", path.data, NULL, FC_CALL_TIMEOUT_S, &r)) != FC_EXIT_OK)
    goto out;
  domain = fc_jstr(r.json, "domain", NULL);
  short_id = fc_jstr(r.json, "short_id", NULL);
  fr_buf_reset(&path);
  if (domain != NULL && short_id != NULL) {
    const char *lp = strchr(domain, ':') != NULL ? "" : port_of(ctx->base);
    fr_buf_printf(&path, "%s://%" PRId64 "-%s.%s%.*s/", scheme_of(ctx->base), port, short_id, domain,
                  (int)strcspn(lp, "/?#"), lp);
  } else {
    /* No wildcard domain: the path form, on the router itself. */
    fr_buf_printf(&path, "%s", ctx->base);
    fc_sandbox_path(&path, fc_jstr(r.json, "id", id), "");
    fr_buf_printf(&path, "/ports/%" PRId64 "/", port);
  }
  if (path.data == NULL) {
    rc = fc_oom();
    goto out;
  }
  if (ctx->json) {
    json_t *o = json_pack("{s:s,s:I,s:s?}", "url", path.data, "port", (json_int_t)port, "traffic_token",
                          fc_jstr(r.json, "traffic_token", NULL));
    char *text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    if (text == NULL) {
      json_decref(o);
      rc = fc_oom();
      goto out;
    }
    printf("%s\n", text);
    free(text);
    json_decref(o);
  } else {
    printf("%s\n", path.data);
  }
  rc = FC_EXIT_OK;
out:
  fr_buf_free(&path);
  fc_resp_close(&r);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* run-code                                                                */

struct cell {
  struct fc_ctx *ctx;
  struct fr_buf line;        /* the line not yet complete */
  json_t *main_result;       /* the main result's line (owned) */
  int errored;               /* an "error" line came */
  int ended;                 /* "end_of_execution" came */
};

/* One complete line of the server's NDJSON (docs/e2b.md). */
static int cell_line(struct cell *c, const char *p, size_t n) {
  json_error_t jerr;
  json_t *j;
  const char *type;

  if (n == 0)
    return 0;
  if (c->ctx->json) {
    if (fc_write_all(STDOUT_FILENO, p, n) != 0 || fc_write_all(STDOUT_FILENO, "\n", 1) != 0)
      return -EIO;
  }
  j = json_loadb(p, n, 0, &jerr);
  if (!json_is_object(j)) {
    json_decref(j);
    return -EPROTO;
  }
  type = fc_jstr(j, "type", "");
  if (!c->ctx->json) {
    const char *text = fc_jstr(j, "text", "");
    if (strcmp(type, "stdout") == 0 && fc_write_all(STDOUT_FILENO, text, strlen(text)) != 0) {
      json_decref(j);
      return -EIO;
    }
    if (strcmp(type, "stderr") == 0)
      (void)fc_write_all(STDERR_FILENO, text, strlen(text));
    if (strcmp(type, "error") == 0)
      fprintf(stderr, "%s\n%s: %s\n", fc_jstr(j, "traceback", ""), fc_jstr(j, "name", "Error"),
              fc_jstr(j, "value", ""));
  }
  if (strcmp(type, "error") == 0)
    c->errored = 1;
  if (strcmp(type, "end_of_execution") == 0)
    c->ended = 1;
  if (strcmp(type, "result") == 0 && json_is_true(json_object_get(j, "is_main_result"))) {
    json_decref(c->main_result);
    c->main_result = json_incref(j);
  }
  json_decref(j);
  return 0;
}

static int cell_feed(const char *data, size_t len, void *arg) {
  struct cell *c = arg;
  const char *nl;
  int rc;

  while (len > 0) {
    if ((nl = memchr(data, '\n', len)) == NULL) {
      if (c->line.len + len > MAX_LINE_BYTES)
        return -EPROTO;
      return fr_buf_append(&c->line, data, len);
    }
    if (c->line.len > 0) {
      if (fr_buf_append(&c->line, data, (size_t)(nl - data)) != 0)
        return -ENOMEM;
      rc = cell_line(c, c->line.data, c->line.len);
      fr_buf_reset(&c->line);
    } else {
      rc = cell_line(c, data, (size_t)(nl - data));
    }
    if (rc != 0)
      return rc;
    len -= (size_t)(nl - data) + 1;
    data = nl + 1;
  }
  return 0;
}

/* All of stdin (at most MAX_CODE_BYTES) into <b>; 0, -EFBIG or -errno. */
static int read_code(struct fr_buf *b) {
  char chunk[65536];
  ssize_t n;

  while ((n = read(STDIN_FILENO, chunk, sizeof(chunk))) != 0) {
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    if (b->len + (size_t)n > MAX_CODE_BYTES)
      return -EFBIG;
    if (fr_buf_append(b, chunk, (size_t)n) != 0)
      return -ENOMEM;
  }
  return 0;
}

int fc_cmd_run_code(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  struct fc_resp r;
  struct fc_sink k;
  struct fr_buf path, code;
  struct cell c;
  const char *val, *id = NULL, *context = NULL;
  json_t *body = NULL;
  char *text = NULL;
  CURL *easy;
  CURLcode crc;
  int opt, rc;

  fc_args_init(&a, ctx, "run-code", run_code_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    if (opt == FC_ARG_HELP) {
      fputs(run_code_usage, stdout);
      return FC_EXIT_OK;
    }
    if (opt == FC_ARG_ERR)
      return FC_EXIT_USAGE;
    if (opt == OPT_CONTEXT)
      context = val;
    else if (id == NULL)
      id = val;
    else
      return fc_usage_error("run-code", "unexpected argument '%s' (the code comes from stdin)", val);
  }
  if (id == NULL)
    return fc_usage_error("run-code", "needs a sandbox ID");
  if (fc_check_id("run-code", id) != 0)
    return FC_EXIT_USAGE;
  if (context != NULL && (*context == '\0' || strlen(context) > 128 ||
                          strspn(context, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") !=
                              strlen(context)))
    return fc_usage_error("run-code", "--context '%s' is not a context id", context);
  memset(&c, 0, sizeof(c));
  c.ctx = ctx;
  fr_buf_init(&c.line);
  fr_buf_init(&path);
  fr_buf_init(&code);
  fc_resp_init(&r);
  if ((rc = read_code(&code)) != 0) {
    fprintf(stderr, "fedctl run-code: reading the code from stdin: %s\n",
            rc == -EFBIG ? "longer than 4 MiB" : strerror(-rc));
    rc = rc == -EFBIG ? FC_EXIT_USAGE : FC_EXIT_FAIL;
    goto out;
  }
  body = json_pack("{s:s%,s:s?}", "code", code.data != NULL ? code.data : "", code.len, "context_id", context);
  if (body == NULL) {
    fprintf(stderr, "fedctl run-code: the code is not UTF-8 text\n");
    rc = FC_EXIT_USAGE;
    goto out;
  }
  if (fc_sandbox_path(&path, id, "") != 0 || fr_buf_printf(&path, "/ports/%d/execute", CODE_PORT) != 0 ||
      (text = json_dumps(body, JSON_COMPACT)) == NULL || fc_ctx_easy(ctx, &easy) != 0 ||
      fc_easy_setup_raw(ctx, easy, "POST", path.data, "application/json", text, strlen(text), 0, &r) != 0) {
    rc = fc_oom();
    goto out;
  }
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  fc_sink_attach(&k, easy, &r, cell_feed, &c);
  crc = curl_easy_perform(easy);
  fc_sink_finish(&k, crc);
  if (!k.ok || k.err != 0 || crc != CURLE_OK) {
    rc = fc_sink_report(ctx, &k, k.err == -EPROTO ? "the answer is not the Code Interpreter's NDJSON"
                                                  : "writing the output");
    goto out;
  }
  if (c.line.len > 0 && (rc = cell_line(&c, c.line.data, c.line.len)) != 0) {
    fprintf(stderr, "fedctl run-code: the answer is not the Code Interpreter's NDJSON\n");
    rc = FC_EXIT_FAIL;
    goto out;
  }
  if (!c.ended) {
    fprintf(stderr, "fedctl run-code: the answer ended before the cell did\n");
    rc = FC_EXIT_FAIL;
    goto out;
  }
  if (c.main_result != NULL && !ctx->json) {
    const char *t = fc_jstr(c.main_result, "text", NULL);
    if (t != NULL)
      printf("%s\n", t);
  }
  rc = c.errored ? FC_EXIT_FAIL : FC_EXIT_OK;
out:
  free(text);
  json_decref(body);
  json_decref(c.main_result);
  fr_buf_free(&c.line);
  fr_buf_free(&path);
  fr_buf_free(&code);
  fc_resp_close(&r);
  return rc;
}
