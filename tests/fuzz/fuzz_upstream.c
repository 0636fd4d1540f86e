/* fuzz_upstream.c - the property that keeps tenants apart: whatever a
 * client sends on a route into a sandbox, what the router sends upstream
 * stays inside that sandbox.
 *
 * A real router (set up as router/src/main.c does, with an `agent` group)
 * in front of one cluster "us-east" whose API server is a fake one on the
 * same loop: it lists two sandbox pods with agents, "sb-fuzz" of tenant
 * "fuzz" (the caller) and "sb-other" of tenant "other", keeps watches
 * open, answers every pod proxy call 200 {} and records every request
 * target it is sent.
 *
 * Input: byte 0 picks the surface, byte 1 the method (GET POST PUT DELETE
 * PATCH), the rest is appended raw to the surface's prefix as the request
 * target (bytes a request line cannot carry - controls, space, DEL, >= 0x80
 * - are percent-encoded; '%', '.', '/', '\', ';', '?' pass as they are):
 *   'e'  /e2b<rest>                       with E2b-Sandbox-Id: us-east.sb-fuzz
 *                                         and that sandbox's access token
 *   'v'  /v1/sandboxes/us-east.sb-fuzz<rest>  with the tenant's bearer token
 *   any other: /<rest> with both sets of headers
 * 'E', 'V' and 't' are 'e', 'v' and any other, the rest read as tokens:
 * each byte picks one (tokens[] below: "..", "%2e", "/", "init", ...).
 *
 * Checked after every input, on every target the fake API server received
 * (RFC 3986 section 5.2.4 dot-segment removal applied first, as a server
 * would): a pod proxy call is under
 *   /api/v1/namespaces/default/pods/sb-fuzz:49983/proxy/
 * and is the same path before and after normalization; every other call is
 * a GET of a collection the adapter lists and watches, or touches only the
 * caller's own sandbox pod (terminate, expiry), a new pod of its own or a
 * batch commit marker. A violation aborts with the target.
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
#define SANDBOX "us-east.sb-fuzz"
#define PROXY_PREFIX "/api/v1/namespaces/default/pods/sb-fuzz:49983/proxy/"

static struct router r;
static struct fr_http_server *api;
static int port;
static unsigned progress;
static char agent_token[65];

static void check(int cond, const char *what, const char *target) {
  if (!cond) {
    fprintf(stderr, "fuzz_upstream: %s: %s\n", what, target);
    abort();
  }
}

/* ---- the fake API server ---- */

static const char pod_list[] =
    "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"10\"},\"items\":["
    "{\"metadata\":{\"name\":\"sb-fuzz\",\"namespace\":\"default\",\"uid\":\"u1\",\"resourceVersion\":\"5\","
    "\"creationTimestamp\":\"2026-01-01T00:00:00Z\",\"labels\":{\"fedrouter.io/sandbox\":\"true\","
    "\"fedrouter.io/state\":\"claimed\",\"fedrouter.io/tenant\":\"fuzz\",\"fedrouter.io/agent\":\"49983\"}},"
    "\"spec\":{\"nodeName\":\"n1\",\"containers\":[{\"name\":\"sandbox\",\"image\":\"python:3.12\"}]},"
    "\"status\":{\"phase\":\"Running\",\"podIP\":\"10.0.0.1\",\"conditions\":[{\"type\":\"Ready\","
    "\"status\":\"True\"}]}},"
    "{\"metadata\":{\"name\":\"sb-other\",\"namespace\":\"default\",\"uid\":\"u2\",\"resourceVersion\":\"6\","
    "\"creationTimestamp\":\"2026-01-01T00:00:00Z\",\"labels\":{\"fedrouter.io/sandbox\":\"true\","
    "\"fedrouter.io/state\":\"claimed\",\"fedrouter.io/tenant\":\"other\",\"fedrouter.io/agent\":\"49983\"}},"
    "\"spec\":{\"nodeName\":\"n1\",\"containers\":[{\"name\":\"sandbox\",\"image\":\"python:3.12\"}]},"
    "\"status\":{\"phase\":\"Running\",\"podIP\":\"10.0.0.2\",\"conditions\":[{\"type\":\"Ready\","
    "\"status\":\"True\"}]}}]}";

static int has_query_flag(const char *q, const char *flag) {
  return strstr(q, flag) != NULL;
}

/* Drops the last segment and its '/' from <out> (RFC 3986 5.2.4 C). */
static void drop_last(char *out, size_t *o) {
  while (*o > 0 && out[*o - 1] != '/')
    (*o)--;
  if (*o > 0)
    (*o)--;
  out[*o] = '\0';
}

/* RFC 3986 5.2.4 remove_dot_segments of the path of <in> (up to '?') into
 * <out>. Encoded dots, slashes and backslashes are decoded first, and a
 * backslash counts as a slash, as servers that decode before normalizing
 * (or normalize Windows-style) would. */
static void normalize(const char *in, char *out, size_t cap) {
  char buf[4200], *p = buf;
  size_t n = 0, o = 0;

  for (; *in != '\0' && *in != '?' && n + 1 < sizeof(buf); in++) {
    char c = *in;
    if (c == '%' && in[1] != '\0' && in[2] != '\0') {
      char h[3] = {in[1], in[2], 0};
      long v = strtol(h, NULL, 16);
      if (v == '.' || v == '/' || v == '\\') {
        c = (char)v;
        in += 2;
      }
    }
    buf[n++] = c == '\\' ? '/' : c;
  }
  buf[n] = '\0';
  out[0] = '\0';
  while (*p != '\0') {
    if (strncmp(p, "../", 3) == 0) {
      p += 3;
    } else if (strncmp(p, "./", 2) == 0) {
      p += 2;
    } else if (strncmp(p, "/./", 3) == 0) {
      p += 2;
    } else if (strcmp(p, "/.") == 0) {
      p[1] = '\0';
    } else if (strncmp(p, "/../", 4) == 0) {
      p += 3;
      drop_last(out, &o);
    } else if (strcmp(p, "/..") == 0) {
      p += 2;
      p[0] = '/';
      p[1] = '\0';
      drop_last(out, &o);
    } else if (strcmp(p, ".") == 0 || strcmp(p, "..") == 0) {
      break;
    } else {
      size_t k = (*p == '/') + strcspn(p + (*p == '/'), "/");
      if (o + k + 1 >= cap)
        break;
      memcpy(out + o, p, k);
      o += k;
      out[o] = '\0';
      p += k;
    }
  }
}

/* The collections the adapter lists and watches (adapter.c). */
static int bookkeeping(const char *method, const char *target) {
  static const char *const lists[] = {
      "/api/v1/namespaces/default/pods?",      "/api/v1/namespaces/default/pods",
      "/apis/apps/v1/namespaces/default/replicasets", "/api/v1/nodes",
      "/api/v1/pods?",                          "/api/v1/namespaces/default/resourcequotas",
      "/apis/node.k8s.io/v1/runtimeclasses",    "/api/v1/namespaces/default/persistentvolumeclaims",
      "/api/v1/namespaces/default/configmaps",  "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies",
      "/apis/storage.k8s.io/v1/storageclasses", "/version",
      "/api",                                   "/readyz",
      "/livez",                                 "/healthz",
  };
  size_t i, n;

  /* The caller's own sandbox (terminate, a new expiry) and its workspace
   * claim (pause, resume), a create of its own, a batch's commit marker,
   * and an egress policy's NetworkPolicy. */
  if (strcmp(target, "/api/v1/namespaces/default/pods/sb-fuzz") == 0 ||
      strncmp(target, "/api/v1/namespaces/default/persistentvolumeclaims/sb-fuzz-", 58) == 0 ||
      (strcmp(method, "POST") == 0 && strncmp(target, "/api/v1/namespaces/default/pods?", 32) == 0) ||
      (strcmp(method, "POST") == 0 && strcmp(target, "/api/v1/namespaces/default/pods") == 0) ||
      strncmp(target, "/api/v1/namespaces/default/configmaps/fr-batch-", 47) == 0 ||
      (strcmp(method, "POST") == 0 && strcmp(target, "/api/v1/namespaces/default/configmaps") == 0) ||
      strncmp(target, "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/fr-egress-", 72) == 0 ||
      (strcmp(method, "POST") == 0 &&
       strcmp(target, "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies") == 0))
    return 1;
  if (strcmp(method, "GET") != 0)
    return 0;
  for (i = 0; i < FR_ARRAY_SIZE(lists); i++) {
    n = strlen(lists[i]);
    if (strncmp(target, lists[i], n) == 0 && (target[n] == '\0' || target[n] == '?' || lists[i][n - 1] == '?'))
      return 1;
  }
  return 0;
}

static void fake_api(struct fr_http_req *req, void *arg) {
  char norm[4096];
  (void)arg;

  progress++;
  if (getenv("FR_FUZZ_TRACE") != NULL) /* what went upstream, for a reader of a finding */
    fprintf(stderr, "upstream: %s %s\n", req->method, req->url);
  if (strstr(req->url, "/proxy") != NULL) {
    normalize(req->url, norm, sizeof(norm));
    check(strncmp(norm, PROXY_PREFIX, strlen(PROXY_PREFIX)) == 0, "a proxy call outside the sandbox", req->url);
    check(strncmp(req->url, norm, strlen(norm)) == 0 && (req->url[strlen(norm)] == '\0' ||
                                                         req->url[strlen(norm)] == '?'),
          "a proxy path that changes under normalization", req->url);
    check(strstr(norm, "/proxy/init") == NULL, "/init reached", req->url);
    fr_http_respond(req, 200, "application/json", NULL, "{}", 2);
    return;
  }
  check(bookkeeping(req->method, req->url), "a request that is not the adapter's own bookkeeping", req->url);
  if (has_query_flag(req->query, "watch=true") || has_query_flag(req->query, "watch=1")) {
    /* Held open: the informer keeps its cache. */
    fr_http_stream_begin(req, 200, "application/json", NULL);
    return;
  }
  if (strncmp(req->path, "/api/v1/namespaces/default/pods", 31) == 0)
    fr_http_respond(req, 200, "application/json", NULL, pod_list, sizeof(pod_list) - 1);
  else if (strcmp(req->path, "/api/v1/nodes") == 0)
    fr_http_respond(req, 200, "application/json", NULL,
                    "{\"kind\":\"NodeList\",\"metadata\":{\"resourceVersion\":\"10\"},\"items\":[{\"metadata\":"
                    "{\"name\":\"n1\"},\"status\":{\"allocatable\":{\"cpu\":\"8\",\"memory\":\"32Gi\",\"pods\":"
                    "\"110\"},\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}]}",
                    strlen("{\"kind\":\"NodeList\",\"metadata\":{\"resourceVersion\":\"10\"},\"items\":[{\"metadata\":"
                           "{\"name\":\"n1\"},\"status\":{\"allocatable\":{\"cpu\":\"8\",\"memory\":\"32Gi\",\"pods\":"
                           "\"110\"},\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}]}"));
  else if (strcmp(req->path, "/version") == 0)
    fr_http_respond(req, 200, "application/json", NULL, "{\"major\":\"1\",\"minor\":\"32\"}", 27);
  else
    fr_http_respond(req, 200, "application/json", NULL,
                    "{\"kind\":\"List\",\"metadata\":{\"resourceVersion\":\"10\"},\"items\":[]}",
                    strlen("{\"kind\":\"List\",\"metadata\":{\"resourceVersion\":\"10\"},\"items\":[]}"));
}

/* ---- the router ---- */

static void on_handle(struct fr_http_req *req, void *arg) {
  progress++;
  router_handle(req, arg);
}

static void on_done(const struct fr_http_req *req, int status, size_t bytes, uint64_t ms, void *arg) {
  (void)req, (void)status, (void)bytes, (void)ms, (void)arg; /* no access log: it would be most of the time */
}

static void setup(void) {
  struct fr_config_error cerr;
  struct fr_http_server_opts hopts;
  struct fr_buf conf, kc;
  char hash[65], err[768];
  const char *path;
  int i;

  signal(SIGPIPE, SIG_IGN);
  fr_log_set_level(FR_LOG_ERROR);
  memset(&r, 0, sizeof(r));
  r.loop = malloc(sizeof(*r.loop));
  if (r.loop == NULL || uv_loop_init(r.loop) != 0)
    abort();
  if (fr_http_server_new(r.loop, NULL, fake_api, NULL, &api) != 0 || fr_http_server_listen(api, "127.0.0.1", 0) != 0)
    abort();
  fr_buf_init(&kc);
  fr_buf_printf(&kc,
                "apiVersion: v1\nkind: Config\ncurrent-context: us-east\n"
                "clusters:\n- name: us-east\n  cluster:\n    server: http://127.0.0.1:%d\n"
                "users:\n- name: u\n  user:\n    token: t\n"
                "contexts:\n- name: us-east\n  context:\n    cluster: us-east\n    user: u\n",
                fr_http_server_port(api));
  fuzz_write_file("kubeconfig", (const uint8_t *)kc.data, kc.len);
  fr_buf_free(&kc);
  fuzz_write_file("agent.key", (const uint8_t *)"0123456789abcdef0123456789abcdef\n", 33);
  fr_sha256_hex(TOKEN, strlen(TOKEN), hash);
  fr_buf_init(&conf);
  fr_buf_printf(&conf,
                "listen = \"127.0.0.1:0\";\nregion = \"us\";\n"
                "tenants = ({ name = \"fuzz\"; token_sha256 = \"%s\"; },\n"
                "           { name = \"other\"; token_sha256 = \"%s0\"; });\n"
                "agent = { image = \"fuzz/agent:1\"; port = 49983; key_file = \"agent.key\"; };\n"
                "clusters = ({ name = \"us-east\"; region = \"us\"; kubeconfig = \"kubeconfig\"; });\n",
                hash, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde");
  path = fuzz_write_file("fedrouter.conf", (const uint8_t *)conf.data, conf.len);
  fr_buf_free(&conf);
  if (fr_config_load(path, &r.cfg, &cerr) != 0) {
    fprintf(stderr, "fuzz: %s:%d: %s\n", cerr.file, cerr.line, cerr.msg);
    abort();
  }
  r.boot = fr_config_ref(r.cfg);
  if (tenants_init(&r) != 0 || queue_init(&r) != 0 || execwait_init(&r) != 0 || placement_init(&r) != 0 || (r.metrics = metrics_new()) == NULL)
    abort();
  r.agent.image = r.cfg->agent_image;
  r.agent.port = r.cfg->agent_port;
  r.agent.key = r.cfg->agent_key;
  r.agent.key_len = r.cfg->agent_key_len;
  r.adapters = calloc(1, sizeof(*r.adapters));
  if (r.adapters == NULL)
    abort();
  {
    const struct fr_config_cluster *cc = &r.cfg->clusters[0];
    struct fr_adapter_opts ao;

    memset(&ao, 0, sizeof(ao));
    ao.name = cc->name;
    ao.region = cc->region;
    ao.kubeconfig = cc->kubeconfig;
    ao.context = cc->context;
    ao.ns = cc->ns;
    ao.agent = &r.agent;
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
  hopts.stream_body_cb = router_streams_body;
  hopts.done_cb = on_done;
  hopts.done_arg = &r;
  if (fr_http_server_new(r.loop, &hopts, on_handle, &r, &r.http) != 0 ||
      fr_http_server_listen(r.http, "127.0.0.1", 0) != 0)
    abort();
  port = fr_http_server_port(r.http);
  fr_adapter_start(r.adapters[0]);
  for (i = 0; i < 200000 && !fr_adapter_pods_synced(r.adapters[0]); i++)
    uv_run(r.loop, UV_RUN_NOWAIT);
  if (!fr_adapter_pods_synced(r.adapters[0]) || fr_adapter_agent_token(r.adapters[0], "sb-fuzz", agent_token) != 0) {
    fprintf(stderr, "fuzz: the adapter did not sync with the fake API server\n");
    abort();
  }
}

/* Appends <rest> to <b> as request-target bytes: what a request line cannot
 * carry is percent-encoded, everything else passes as it is. */
static void put_target(struct fr_buf *b, const uint8_t *rest, size_t n) {
  size_t i;

  for (i = 0; i < n; i++) {
    if (rest[i] <= 0x20 || rest[i] >= 0x7f)
      fr_buf_printf(b, "%%%02X", rest[i]);
    else
      fr_buf_printf(b, "%c", rest[i]);
  }
}

/* Mode 't': each byte picks one of these, so a few bytes make the shapes
 * that matter (a byte-level mutation needs luck to spell "/../.."). */
static const char *const tokens[] = {
    "/",       "..",     ".",       "%2e",      "%2E%2e",   "%2f",     "%2F",    "%5c",       "\\",
    "%25",     ";",      "%00",     "?",        "&",        "=",       "path=",  "username=", "init",
    "files",   "health", "envs",    "_fr",      "held",     "process.Process", "filesystem.Filesystem",
    "Start",   "List",   "Connect", "Stat",     "processes", "exec",   "output", "12",        "api",
    "v1",      "namespaces",        "default",  "secrets",  "pods",    "sb-other", "us-east.sb-other",
    "e2b",     "sandboxes",         "us-east.sb-fuzz",      "proxy",   ":49983", "%2e%2e%2f", "x",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const methods[] = {"GET", "POST", "PUT", "DELETE", "PATCH"};
  struct fuzz_conn_stats st;
  struct fr_buf b;
  int i;

  if (size < 2 || size > 2048)
    return 0;
  if (r.http == NULL)
    setup();
  fr_buf_init(&b);
  fr_buf_printf(&b, "%s ", methods[data[1] % FR_ARRAY_SIZE(methods)]);
  if (data[0] == 'e' || data[0] == 'E')
    fr_buf_puts(&b, "/e2b");
  else if (data[0] == 'v' || data[0] == 'V')
    fr_buf_puts(&b, "/v1/sandboxes/" SANDBOX);
  else
    fr_buf_puts(&b, "/");
  if (data[0] == 'E' || data[0] == 'V' || data[0] == 't') {
    size_t t;
    for (t = 2; t < size; t++)
      fr_buf_puts(&b, tokens[data[t] % FR_ARRAY_SIZE(tokens)]);
  } else {
    put_target(&b, data + 2, size - 2);
  }
  fr_buf_printf(&b,
                " HTTP/1.1\r\nHost: fuzz\r\nAuthorization: Bearer " TOKEN "\r\nX-API-Key: " TOKEN
                "\r\nE2b-Sandbox-Id: " SANDBOX "\r\nX-Access-Token: %s\r\nContent-Type: application/json\r\n"
                "Content-Length: 2\r\n\r\n{}",
                agent_token);
  if (b.data == NULL)
    abort();
  fuzz_conn_feed(r.loop, r.http, port, (const uint8_t *)b.data, b.len, &progress, &st);
  /* Whatever the router started upstream gets the turns to arrive. */
  for (i = 0; i < 64; i++)
    uv_run(r.loop, UV_RUN_NOWAIT);
  fr_buf_free(&b);
  return 0;
}
