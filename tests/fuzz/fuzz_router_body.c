/* fuzz_router_body.c - the router's request handling (router/src:
 * router_handle and the endpoint files behind it) on arbitrary JSON bodies
 * and query strings.
 *
 * A real router, set up the way router/src/main.c does it, from a config
 * written to a scratch directory: region "us", one admin tenant "fuzz"
 * (token "fuzz-token", max_sandboxes 5) and one cluster "us-east" whose
 * adapter is made but never started, so it never syncs and never talks to
 * anyone (its kubeconfig names 127.0.0.1:9). Most validation happens before
 * any cluster is asked; what gets further meets a cluster that is not
 * ready, which is a path to test too. Requests arrive through the real HTTP
 * server as one client connection (fuzz_conn.h); a request answered later
 * is dropped by the client resetting the connection, which exercises the
 * abort paths.
 *
 * Input: the first byte picks the request, the rest is its body or query:
 *   'S'  POST  /v1/sandboxes                     body
 *   'E'  POST  /v1/placement/explain             body
 *   'X'  POST  /v1/sandboxes/us-east.sb-fuzz/exec  body
 *   'P'  POST  /v1/pools                         body
 *   'U'  PATCH /v1/pools/default                 body
 *   'L'  GET   /v1/sandboxes?<rest>              query (percent-encoded
 *   'D'  DELETE /v1/sandboxes?<rest>              where the URL needs it)
 * and E2B's control API (router/src/e2b.c), authenticated by X-API-Key:
 *   'B'  POST  /e2b/sandboxes                    body
 *   'T'  POST  /e2b/sandboxes/us-east.sb-fuzz/timeout  body
 *   'C'  POST  /e2b/sandboxes/us-east.sb-fuzz/connect  body
 *   'M'  GET   /e2b/v2/sandboxes?<rest>          query (metadata, limit,
 *                                                 nextToken, ...)
 * Any other first byte picks one of these by its value modulo 11.
 *
 * Checked beyond "no crash": every request reaches the router's handler
 * (the head built here is well-formed and within the limits whenever the
 * whole request is under 8 KiB), and no exec stays counted against the
 * tenant once the client is gone.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/config.h"
#include "fr/http.h"
#include "fr/log.h"
#include "fr/util.h"
#include "fuzz_conn.h"
#include "fuzz_util.h"
#include "metrics.h"
#include "router.h"
#include "server.h"
#include "execwait.h"
#include "queue.h"
#include "tenants.h"

#define TOKEN "fuzz-token"

static struct router r;
static int port;
static unsigned handled;

static void check(int cond) {
  if (!cond)
    abort();
}

static void on_handle(struct fr_http_req *req, void *arg) {
  handled++;
  router_handle(req, arg);
}

/* The access log (one JSON line per request on stderr) would be most of
 * the run's output and time: keep the code running, drop its line. */
static void on_done(const struct fr_http_req *req, int status, size_t bytes, uint64_t ms, void *arg) {
  static int devnull = -1;
  int saved;

  if (devnull < 0)
    devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
  fflush(stderr);
  saved = dup(2);
  if (devnull >= 0)
    dup2(devnull, 2);
  router_request_done(req, status, bytes, ms, arg);
  fflush(stderr);
  if (saved >= 0) {
    dup2(saved, 2);
    close(saved);
  }
}

static void setup(void) {
  static const char kubeconfig[] =
      "apiVersion: v1\nkind: Config\ncurrent-context: us-east\n"
      "clusters:\n- name: us-east\n  cluster:\n    server: http://127.0.0.1:9\n"
      "users:\n- name: u\n  user:\n    token: t\n"
      "contexts:\n- name: us-east\n  context:\n    cluster: us-east\n    user: u\n";
  struct fr_config_error cerr;
  struct fr_http_server_opts hopts;
  struct fr_buf conf;
  char hash[65], err[768];
  const char *path;

  signal(SIGPIPE, SIG_IGN);
  fr_log_set_level(FR_LOG_ERROR);
  fuzz_write_file("kubeconfig", (const uint8_t *)kubeconfig, sizeof(kubeconfig) - 1);
  fr_sha256_hex(TOKEN, strlen(TOKEN), hash);
  fr_buf_init(&conf);
  fr_buf_printf(&conf,
                "listen = \"127.0.0.1:0\";\nregion = \"us\";\n"
                "tenants = ({ name = \"fuzz\"; token_sha256 = \"%s\"; max_sandboxes = 5; admin = true; });\n"
                "clusters = ({ name = \"us-east\"; region = \"us\"; kubeconfig = \"kubeconfig\"; });\n",
                hash);
  check(conf.data != NULL);
  path = fuzz_write_file("fedrouter.conf", (const uint8_t *)conf.data, conf.len);
  fr_buf_free(&conf);

  memset(&r, 0, sizeof(r));
  r.loop = malloc(sizeof(*r.loop));
  check(r.loop != NULL && uv_loop_init(r.loop) == 0);
  if (fr_config_load(path, &r.cfg, &cerr) != 0) {
    fprintf(stderr, "fuzz: %s:%d: %s\n", cerr.file, cerr.line, cerr.msg);
    abort();
  }
  r.boot = fr_config_ref(r.cfg);
  check(tenants_init(&r) == 0 && queue_init(&r) == 0 && execwait_init(&r) == 0);
  check(placement_init(&r) == 0);
  r.metrics = metrics_new();
  check(r.metrics != NULL);
  r.adapters = calloc(1, sizeof(*r.adapters));
  check(r.adapters != NULL);
  {
    const struct fr_config_cluster *cc = &r.cfg->clusters[0];
    struct fr_adapter_opts ao;

    /* Field by field: new options stay zero (off) without touching this. */
    memset(&ao, 0, sizeof(ao));
    ao.name = cc->name;
    ao.region = cc->region;
    ao.kubeconfig = cc->kubeconfig;
    ao.context = cc->context;
    ao.ns = cc->ns;
    if (fr_adapter_new(r.loop, &ao, &r.adapters[0], err, sizeof(err)) != 0) {
      fprintf(stderr, "fuzz: adapter: %s\n", err);
      abort();
    }
    r.nadapters = 1;
  }
  r.exec_budget.max = (size_t)r.cfg->exec_output_budget_bytes;
  memset(&hopts, 0, sizeof(hopts));
  hopts.name = "fedrouter";
  hopts.max_body_bytes = r.cfg->max_body_bytes;
  hopts.done_cb = on_done;
  hopts.done_arg = &r;
  check(fr_http_server_new(r.loop, &hopts, on_handle, &r, &r.http) == 0);
  check(fr_http_server_listen(r.http, "127.0.0.1", 0) == 0);
  port = fr_http_server_port(r.http);
}

/* Appends <rest> to <b> as a query string: bytes a request-target may not
 * hold raw are percent-encoded, the rest (including '&', '=' and '%')
 * pass as they are, so both encodings of a character are reachable. */
static void put_query(struct fr_buf *b, const uint8_t *rest, size_t n) {
  static const char ok[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/?%";
  size_t i;

  for (i = 0; i < n; i++) {
    if (rest[i] != '\0' && strchr(ok, rest[i]) != NULL)
      fr_buf_printf(b, "%c", rest[i]);
    else
      fr_buf_printf(b, "%%%02X", rest[i]);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* Query kinds after the body kinds: kind >= 5 && kind < 7 or kind == 10. */
  static const char kinds[] = "SEXPULDBTCM";
  static const char *const targets[] = {
      "POST /v1/sandboxes",
      "POST /v1/placement/explain",
      "POST /v1/sandboxes/us-east.sb-fuzz/exec",
      "POST /v1/pools",
      "PATCH /v1/pools/default",
      "GET /v1/sandboxes",
      "DELETE /v1/sandboxes",
      "POST /e2b/sandboxes",
      "POST /e2b/sandboxes/us-east.sb-fuzz/timeout",
      "POST /e2b/sandboxes/us-east.sb-fuzz/connect",
      "GET /e2b/v2/sandboxes",
  };
  const char *auth;
  int query;
  struct fuzz_conn_stats st;
  struct fr_buf b;
  const char *k;
  size_t kind, i;

  if (size == 0)
    return 0;
  if (r.http == NULL)
    setup();
  k = strchr(kinds, data[0]);
  kind = data[0] != '\0' && k != NULL ? (size_t)(k - kinds) : data[0] % 11u;
  query = kind == 5 || kind == 6 || kind == 10;
  auth = kind >= 7 ? "X-API-Key: " TOKEN : "Authorization: Bearer " TOKEN;

  fr_buf_init(&b);
  fr_buf_puts(&b, targets[kind]);
  if (query) {
    fr_buf_puts(&b, "?");
    put_query(&b, data + 1, size - 1);
    fr_buf_printf(&b, " HTTP/1.1\r\nHost: fuzz\r\n%s\r\n\r\n", auth);
  } else {
    fr_buf_printf(&b,
                  " HTTP/1.1\r\nHost: fuzz\r\n%s\r\n"
                  "Content-Type: application/json\r\nX-Client-Region: us\r\nContent-Length: %zu\r\n\r\n",
                  auth, size - 1);
    fr_buf_append(&b, data + 1, size - 1);
  }
  check(b.data != NULL);
  i = handled;
  fuzz_conn_feed(r.loop, r.http, port, (const uint8_t *)b.data, b.len, &handled, &st);
  /* The head is well-formed and the body within the limit: the router's
   * handler saw it, and it answered unless it answers later. */
  if (b.len < 8192)
    check(handled == i + 1);
  /* The client is gone: nothing of it may still count as in flight once
   * the loop has run the aborts. */
  uv_run(r.loop, UV_RUN_NOWAIT);
  check(r.tenants[0]->execs == 0);
  fr_buf_free(&b);
  return 0;
}
