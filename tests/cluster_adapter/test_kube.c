/* test_kube.c - the Kubernetes REST client (fr/kube.h: requests, watches,
 * retries, credentials, cancellation) against the real kubesim binary on
 * loopback, over TLS with a bearer token, through the kubeconfig kubesim
 * writes.
 *
 * One simulator serves the whole suite; each test gets a fresh loop and
 * client(s) and ends by freeing them and checking the loop closes cleanly.
 * Faults are switched through kubesim's plain-HTTP admin port, with a
 * second fr_kube client (so the plain http:// path is exercised too), and
 * reset before every test. Pod names are unique per test.
 */
#define _GNU_SOURCE /* prctl */
#include "fr/buf.h"
#include "fr/kube.h"
#include "fr/kubeconfig.h"
#include "fr/log.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "fr_test_loop.h"

#ifndef KUBESIM_PATH
#error "KUBESIM_PATH must name the kubesim binary"
#endif

#define TOKEN "kube-test-token"
#define PODS "/api/v1/namespaces/default/pods"

/* ------------------------------------------------------------ simulator */

static struct {
  pid_t pid;
  char dir[64];
  char kubeconfig[128];
  int admin_port;
} sim;

static void rm_rf(const char *path) {
  char cmd[256];

  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
  if (system(cmd) != 0)
    fprintf(stderr, "cannot remove %s\n", path);
}

static int read_int_file(const char *path) {
  FILE *f = fopen(path, "r");
  int v = -1;

  if (f == NULL)
    return -1;
  if (fscanf(f, "%d", &v) != 1)
    v = -1;
  fclose(f);
  return v;
}

static void sim_start(void) {
  char port_file[128], admin_file[128], workdir[128];
  struct timespec ts = {0, 20 * 1000 * 1000};
  int i;

  snprintf(sim.dir, sizeof(sim.dir), "/tmp/test_kube.XXXXXX");
  if (mkdtemp(sim.dir) == NULL)
    abort();
  snprintf(sim.kubeconfig, sizeof(sim.kubeconfig), "%s/kubeconfig", sim.dir);
  snprintf(port_file, sizeof(port_file), "%s/port", sim.dir);
  snprintf(admin_file, sizeof(admin_file), "%s/admin-port", sim.dir);
  snprintf(workdir, sizeof(workdir), "%s/work", sim.dir);
  sim.pid = fork();
  if (sim.pid < 0)
    abort();
  if (sim.pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* no simulator outlives a crashed test */
    execl(KUBESIM_PATH, "kubesim", "--tls", "--token", TOKEN, "--name", "kube-test",
          "--listen", "127.0.0.1:0", "--write-kubeconfig", sim.kubeconfig, "--port-file",
          port_file, "--admin-listen", "127.0.0.1:0", "--admin-port-file", admin_file,
          "--workdir", workdir, "--log-level", "error", (char *)NULL);
    _exit(127);
  }
  /* The port file is written last, once the simulator serves. */
  for (i = 0; i < 1000 && access(port_file, F_OK) != 0; i++)
    nanosleep(&ts, NULL);
  if (access(port_file, F_OK) != 0) {
    fprintf(stderr, "kubesim did not start\n");
    abort();
  }
  sim.admin_port = read_int_file(admin_file);
  if (sim.admin_port <= 0)
    abort();
}

static void sim_stop(void) {
  int status = 0;

  if (sim.pid <= 0)
    return;
  kill(sim.pid, SIGTERM);
  waitpid(sim.pid, &status, 0);
  sim.pid = 0;
  rm_rf(sim.dir);
}

/* ------------------------------------------------------------ per test */

static uv_loop_t loop;
static struct fr_kube_creds *creds;       /* from kubesim's kubeconfig */
static struct fr_kube_client *admin;      /* plain HTTP to the admin port */
static char tmpdir[96];                   /* per test, for plugins and token files */

/* Fast retries, so the fault tests take milliseconds. */
static const struct fr_kube_client_opts fast_opts = {
  .name = "fast",
  .max_retries = 2,
  .backoff_base_ms = 10,
  .backoff_cap_ms = 50,
  .connect_timeout_ms = 2000,
  .request_timeout_ms = 10000,
};

struct result {
  int done;
  int status;
  int attempts;
  int retry_after_s;
  char *error;         /* copy, or NULL */
  char *body;          /* copy */
  size_t body_len;
};

static void on_resp(const struct fr_kube_response *r, void *arg) {
  struct result *res = arg;

  res->done++;
  res->status = r->status;
  res->attempts = r->attempts;
  res->retry_after_s = r->retry_after_s;
  free(res->error);
  free(res->body);
  res->error = r->error != NULL ? strdup(r->error) : NULL;
  res->body = strndup(r->body, r->body_len);
  res->body_len = r->body_len;
  ck_assert_uint_eq(strlen(r->body), r->body_len);   /* NUL-terminated */
}

static void result_free(struct result *r) {
  free(r->error);
  free(r->body);
  memset(r, 0, sizeof(*r));
}

/* Runs the loop until *<flag> is non-zero. */
static void run_until(const int *flag) {
  ck_assert_msg(fr_test_run_until(&loop, flag) == 0, "loop ran dry");
}

static void on_freed(void *arg) {
  (*(int *)arg)++;
}

static void client_free_wait(struct fr_kube_client *c) {
  int freed = 0;

  fr_kube_client_free(c, on_freed, &freed);
  run_until(&freed);
  ck_assert_int_eq(freed, 1);
}

static struct fr_kube_client *client_new(const struct fr_kube_creds *cr,
                                         const struct fr_kube_client_opts *opts) {
  struct fr_kube_client *c = NULL;

  ck_assert_int_eq(fr_kube_client_new(&loop, cr, opts, &c), 0);
  ck_assert_ptr_nonnull(c);
  return c;
}

/* One call, run to completion. */
static void call(struct fr_kube_client *c, const char *method, const char *path, const char *body,
                 int idempotent, struct result *res) {
  memset(res, 0, sizeof(*res));
  ck_assert_int_eq(fr_kube_request(c, method, path, body ? "application/json" : NULL, body,
                                   body ? strlen(body) : 0, idempotent, "test-req-1", on_resp,
                                   res, NULL),
                   0);
  run_until(&res->done);
  ck_assert_int_eq(res->done, 1);
}

static void set_faults(const char *json) {
  struct result r;

  call(admin, "POST", "/_sim/faults", json, 0, &r);
  ck_assert_msg(r.status == 200, "faults %s: %d %s", json, r.status, r.body);
  result_free(&r);
}

static void create_pod(struct fr_kube_client *c, const char *name, size_t annotation_len) {
  struct result r;
  char *note = malloc(annotation_len + 1);
  json_t *pod;
  char *body;

  ck_assert_ptr_nonnull(note);
  memset(note, 'x', annotation_len);
  note[annotation_len] = '\0';
  pod = json_pack("{s:s,s:s,s:{s:s,s:{s:s}},s:{s:[{s:s,s:s}]}}", "apiVersion", "v1", "kind", "Pod",
                  "metadata", "name", name, "annotations", "test/note", note, "spec",
                  "containers", "name", "c", "image", "busybox");
  body = json_dumps(pod, JSON_COMPACT);
  call(c, "POST", PODS, body, 0, &r);
  ck_assert_msg(r.status == 201, "create %s: %d %s", name, r.status, r.body);
  result_free(&r);
  free(body);
  free(note);
  json_decref(pod);
}

static void setup(void) {
  struct fr_kube_creds *ac;
  char err[256], server[64];

  ck_assert_int_eq(uv_loop_init(&loop), 0);
  creds = NULL;
  ck_assert_msg(fr_kubeconfig_load(sim.kubeconfig, NULL, &creds, err, sizeof(err)) == 0, "%s", err);
  ac = fr_kube_creds_dup(creds);
  ck_assert_ptr_nonnull(ac);
  free(ac->server);
  snprintf(server, sizeof(server), "http://127.0.0.1:%d", sim.admin_port);
  ac->server = strdup(server);
  admin = client_new(ac, NULL);
  fr_kube_creds_free(ac);
  set_faults("{\"down\":false,\"latency_ms\":0,\"error_rate\":0,\"throttle_rate\":0}");
  snprintf(tmpdir, sizeof(tmpdir), "%s/tXXXXXX", sim.dir);
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

/* Every test ends here: clients freed, nothing left on the loop. */
static void finish_test(void) {
  client_free_wait(admin);
  admin = NULL;
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  fr_kube_creds_free(creds);
  creds = NULL;
}

/* ------------------------------------------------------------ REST */

START_TEST(get_version_over_tls_with_token_returns_200) {
  struct fr_kube_client *c;
  struct result r;

  ck_assert_ptr_nonnull(strstr(creds->server, "https://127.0.0.1:"));
  ck_assert_ptr_nonnull(creds->ca_pem);
  c = client_new(creds, NULL);
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 200);
  ck_assert_ptr_null(r.error);
  ck_assert_int_eq(r.attempts, 1);
  ck_assert_ptr_nonnull(strstr(r.body, "\"gitVersion\""));
  result_free(&r);
  /* A second call on the same client (pooled connection). */
  call(c, "GET", "/api", NULL, 1, &r);
  ck_assert_int_eq(r.status, 200);
  ck_assert_ptr_nonnull(strstr(r.body, "APIVersions"));
  result_free(&r);
  client_free_wait(c);
  finish_test();
}
END_TEST

START_TEST(get_wrong_token_reports_401) {
  struct fr_kube_creds *bad = fr_kube_creds_dup(creds);
  struct fr_kube_client *c;
  struct result r;

  free(bad->token);
  bad->token = strdup("not-the-token");
  c = client_new(bad, NULL);
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 401);
  ck_assert_int_eq(r.attempts, 1);   /* a static token cannot be refreshed */
  ck_assert_ptr_null(r.error);
  ck_assert_ptr_nonnull(strstr(r.body, "Unauthorized"));
  result_free(&r);
  client_free_wait(c);
  fr_kube_creds_free(bad);
  finish_test();
}
END_TEST

START_TEST(post_pod_then_get_returns_it) {
  struct fr_kube_client *c = client_new(creds, NULL);
  struct result r;
  json_t *j;

  create_pod(c, "rest-p1", 10);
  call(c, "GET", PODS "/rest-p1", NULL, 1, &r);
  ck_assert_int_eq(r.status, 200);
  j = json_loads(r.body, 0, NULL);
  ck_assert_ptr_nonnull(j);
  ck_assert_str_eq(json_string_value(json_object_get(j, "kind")), "Pod");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "metadata"), "name")),
                   "rest-p1");
  json_decref(j);
  result_free(&r);
  /* Creating it again: 409 AlreadyExists, not retried. */
  call(c, "POST", PODS, "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"rest-p1\"},"
                        "\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"busybox\"}]}}",
       0, &r);
  ck_assert_int_eq(r.status, 409);
  ck_assert_int_eq(r.attempts, 1);
  ck_assert_ptr_nonnull(strstr(r.body, "AlreadyExists"));
  result_free(&r);
  /* DELETE with a body (idempotent). */
  call(c, "DELETE", PODS "/rest-p1", "{\"gracePeriodSeconds\":0}", 1, &r);
  ck_assert_int_eq(r.status, 200);
  result_free(&r);
  call(c, "GET", PODS "/rest-p1", NULL, 1, &r);
  ck_assert_int_eq(r.status, 404);
  result_free(&r);
  client_free_wait(c);
  finish_test();
}
END_TEST

START_TEST(get_missing_pod_passes_404_status_body) {
  struct fr_kube_client *c = client_new(creds, NULL);
  struct result r;
  json_t *j;

  call(c, "GET", PODS "/no-such-pod", NULL, 1, &r);
  ck_assert_int_eq(r.status, 404);
  ck_assert_ptr_null(r.error);
  ck_assert_int_eq(r.attempts, 1);
  j = json_loads(r.body, 0, NULL);
  ck_assert_ptr_nonnull(j);
  ck_assert_str_eq(json_string_value(json_object_get(j, "kind")), "Status");
  ck_assert_str_eq(json_string_value(json_object_get(j, "reason")), "NotFound");
  ck_assert_int_eq(json_integer_value(json_object_get(j, "code")), 404);
  json_decref(j);
  result_free(&r);
  client_free_wait(c);
  finish_test();
}
END_TEST

START_TEST(request_bad_arguments_rejected_without_callback) {
  struct fr_kube_client *c = client_new(creds, NULL);
  struct result r;

  memset(&r, 0, sizeof(r));
  ck_assert_int_eq(fr_kube_request(c, "GET", "version", NULL, NULL, 0, 1, NULL, on_resp, &r, NULL),
                   -EINVAL);
  ck_assert_int_eq(fr_kube_request(c, "get", "/version", NULL, NULL, 0, 1, NULL, on_resp, &r, NULL),
                   -EINVAL);
  ck_assert_int_eq(fr_kube_request(c, "GET", "/a b", NULL, NULL, 0, 1, NULL, on_resp, &r, NULL),
                   -EINVAL);
  ck_assert_int_eq(fr_kube_request(c, "GET", "/version", NULL, NULL, 0, 1, "id\r\nX-Evil: 1",
                                   on_resp, &r, NULL),
                   -EINVAL);
  ck_assert_int_eq(fr_kube_request(c, "GET", "/version", NULL, NULL, 0, 1, NULL, NULL, &r, NULL),
                   -EINVAL);
  ck_assert_int_eq(fr_kube_request(NULL, "GET", "/version", NULL, NULL, 0, 1, NULL, on_resp, &r,
                                   NULL),
                   -EINVAL);
  ck_assert_int_eq(fr_kube_request(c, "GET", "/version", NULL, NULL, 0, 1 << 7, NULL, on_resp, &r,
                                   NULL),
                   -EINVAL);   /* an unknown flag */
  client_free_wait(c);
  ck_assert_int_eq(r.done, 0);
  finish_test();
}
END_TEST

/* ------------------------------------------------------------ watch */

struct watch {
  struct fr_kube_client *c;
  struct fr_kube_call *call;
  int lines, added, bad, done;
  int seen_w1, seen_big, seen_w3;
  size_t big_note_len;
  int created_w3;
  struct result w3, end;
  int cancel_at;            /* cancel the watch from its own on_line at this line */
  int free_at;              /* free the client from on_line at this line */
  int freed;
};

static void on_w3_created(const struct fr_kube_response *r, void *arg) {
  on_resp(r, arg);
}

static void on_watch_line(const char *line, size_t len, void *arg) {
  struct watch *w = arg;
  json_t *j, *obj;
  const char *type, *name;

  w->lines++;
  if (len == 0 || line[len - 1] == '\n' || line[len - 1] == '\r')
    w->bad++;
  j = json_loadb(line, len, 0, NULL);
  type = json_string_value(json_object_get(j, "type"));
  obj = json_object_get(j, "object");
  name = json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
  if (j == NULL || type == NULL || name == NULL) {
    w->bad++;
  } else if (strcmp(type, "ADDED") == 0) {
    w->added++;
    if (strcmp(name, "watch-w1") == 0)
      w->seen_w1++;
    if (strcmp(name, "watch-w3") == 0)
      w->seen_w3++;
    if (strcmp(name, "watch-big") == 0) {
      w->seen_big++;
      w->big_note_len = strlen(json_string_value(json_object_get(
          json_object_get(json_object_get(obj, "metadata"), "annotations"), "test/note")));
    }
  }
  json_decref(j);
  if (w->cancel_at == w->lines)
    fr_kube_cancel(w->call);
  if (w->free_at == w->lines)
    fr_kube_client_free(w->c, on_freed, &w->freed);
  /* A pod created while the watch runs must arrive as ADDED too. */
  if (!w->created_w3 && w->cancel_at == 0 && w->free_at == 0) {
    static const char body[] =
        "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"watch-w3\"},"
        "\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"busybox\"}]}}";
    w->created_w3 = 1;
    ck_assert_int_eq(fr_kube_request(w->c, "POST", PODS, "application/json", body,
                                     strlen(body), 0, NULL, on_w3_created, &w->w3, NULL),
                     0);
  }
}

static void on_watch_done(const struct fr_kube_response *r, void *arg) {
  struct watch *w = arg;

  on_resp(r, &w->end);
  w->done++;
}

START_TEST(watch_delivers_added_lines_then_done_after_timeout) {
  struct watch w;

  memset(&w, 0, sizeof(w));
  w.c = client_new(creds, NULL);
  create_pod(w.c, "watch-w1", 10);
  /* 200 KB of annotation: the event line spans many curl write chunks. */
  create_pod(w.c, "watch-big", 200000);
  ck_assert_int_eq(fr_kube_watch(w.c, PODS "?watch=true&timeoutSeconds=2", on_watch_line,
                                 on_watch_done, &w, &w.call),
                   0);
  ck_assert_ptr_nonnull(w.call);
  run_until(&w.done);
  ck_assert_int_eq(w.done, 1);
  ck_assert_int_eq(w.end.status, 200);
  ck_assert_ptr_null(w.end.error);
  ck_assert_int_eq(w.bad, 0);
  ck_assert_int_eq(w.seen_w1, 1);
  ck_assert_int_eq(w.seen_big, 1);
  ck_assert_uint_eq(w.big_note_len, 200000);
  ck_assert_int_eq(w.w3.status, 201);
  ck_assert_int_eq(w.seen_w3, 1);
  ck_assert_int_ge(w.added, 3);
  ck_assert_int_ge(w.lines, w.added);
  result_free(&w.w3);
  result_free(&w.end);
  client_free_wait(w.c);
  finish_test();
}
END_TEST

START_TEST(watch_bad_path_reports_status_and_body) {
  struct watch w;

  memset(&w, 0, sizeof(w));
  w.c = client_new(creds, NULL);
  w.created_w3 = 1;
  ck_assert_int_eq(fr_kube_watch(w.c, "/api/v1/namespaces/default/nosuchthings?watch=true",
                                 on_watch_line, on_watch_done, &w, NULL),
                   0);
  run_until(&w.done);
  ck_assert_int_eq(w.lines, 0);
  ck_assert_int_eq(w.end.status, 404);
  ck_assert_ptr_nonnull(strstr(w.end.body, "Status"));
  result_free(&w.end);
  client_free_wait(w.c);
  finish_test();
}
END_TEST

/* ------------------------------------------------------------ retries */

struct clear_timer {
  uv_timer_t t;
  struct result r;
};

static void on_clear_timer(uv_timer_t *t) {
  struct clear_timer *ct = (struct clear_timer *)t;   /* t is the first member */
  static const char body[] = "{\"throttle_rate\":0}";

  ck_assert_int_eq(fr_kube_request(admin, "POST", "/_sim/faults", "application/json", body,
                                   strlen(body), 0, NULL, on_resp, &ct->r, NULL),
                   0);
}

START_TEST(throttled_get_retried_until_success_post_not_retried) {
  struct fr_kube_client_opts o = fast_opts;
  struct fr_kube_client *c;
  struct clear_timer ct;
  struct result r;

  o.max_retries = 4;
  o.backoff_cap_ms = 5000;   /* also caps Retry-After */
  c = client_new(creds, &o);
  set_faults("{\"throttle_rate\":1,\"retry_after_s\":2}");

  /* Non-idempotent: the 429 comes back as is. */
  call(c, "POST", PODS, "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"thr-p\"},"
                        "\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"busybox\"}]}}",
       0, &r);
  ck_assert_int_eq(r.status, 429);
  ck_assert_int_eq(r.attempts, 1);
  ck_assert_int_eq(r.retry_after_s, 2);
  ck_assert_ptr_nonnull(strstr(r.body, "Too many requests"));
  result_free(&r);

  /* Idempotent: retried after Retry-After; the throttle is lifted a
   * second in, between the first attempt and its retry. */
  memset(&ct, 0, sizeof(ct));
  ck_assert_int_eq(uv_timer_init(&loop, &ct.t), 0);
  ck_assert_int_eq(uv_timer_start(&ct.t, on_clear_timer, 1000, 0), 0);
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(ct.r.status, 200);
  ck_assert_int_eq(r.status, 200);
  ck_assert_int_ge(r.attempts, 2);
  ck_assert_int_le(r.attempts, 5);
  ck_assert_int_eq(r.retry_after_s, 0);   /* the last answer had none */
  ck_assert_ptr_nonnull(strstr(r.body, "gitVersion"));
  result_free(&r);
  result_free(&ct.r);
  uv_close((uv_handle_t *)&ct.t, NULL);
  client_free_wait(c);
  finish_test();
}
END_TEST

START_TEST(error_503_get_retried_max_retries_then_503) {
  struct fr_kube_client *c = client_new(creds, &fast_opts);
  struct result r;

  set_faults("{\"error_rate\":1,\"error_code\":503}");
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 503);
  ck_assert_int_eq(r.attempts, 3);   /* 1 + max_retries */
  ck_assert_ptr_nonnull(strstr(r.body, "ServiceUnavailable"));
  result_free(&r);
  call(c, "POST", PODS, "{}", 0, &r);
  ck_assert_int_eq(r.status, 503);
  ck_assert_int_eq(r.attempts, 1);
  result_free(&r);
  set_faults("{\"error_rate\":0}");
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 200);
  ck_assert_int_eq(r.attempts, 1);
  result_free(&r);
  client_free_wait(c);
  finish_test();
}
END_TEST

START_TEST(server_down_reports_status_0_with_error) {
  struct fr_kube_client *c = client_new(creds, &fast_opts);
  struct result r;

  call(c, "GET", "/version", NULL, 1, &r);   /* leaves a pooled connection */
  ck_assert_int_eq(r.status, 200);
  result_free(&r);
  set_faults("{\"down\":true}");
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 0);
  ck_assert_ptr_nonnull(r.error);
  ck_assert_msg(strstr(r.error, "onnect") != NULL, "error: %s", r.error);
  ck_assert_int_eq(r.attempts, 3);
  ck_assert_uint_eq(r.body_len, 0);
  result_free(&r);
  call(c, "POST", PODS, "{}", 0, &r);
  ck_assert_int_eq(r.status, 0);
  ck_assert_ptr_nonnull(r.error);
  ck_assert_int_eq(r.attempts, 1);
  result_free(&r);
  set_faults("{\"down\":false}");
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 200);
  result_free(&r);
  client_free_wait(c);
  finish_test();
}
END_TEST

/* kubesim's count of open API connections. */
static int sim_connections(void) {
  struct result r;
  json_t *j;
  int n;

  call(admin, "GET", "/_sim/state", NULL, 1, &r);
  ck_assert_int_eq(r.status, 200);
  j = json_loads(r.body, 0, NULL);
  ck_assert_ptr_nonnull(j);
  ck_assert(json_is_integer(json_object_get(j, "connections")));
  n = (int)json_integer_value(json_object_get(j, "connections"));
  json_decref(j);
  result_free(&r);
  return n;
}

struct delay {
  uv_timer_t t;
  int fired;
};

static void on_delay(uv_timer_t *t) {
  struct delay *d = (struct delay *)t;   /* t is the first member */

  d->fired = 1;
}

/* Runs the loop for about <ms> (other work proceeds meanwhile). */
static void run_for(uint64_t ms) {
  struct delay d;

  d.fired = 0;
  ck_assert_int_eq(uv_timer_init(&loop, &d.t), 0);
  ck_assert_int_eq(uv_timer_start(&d.t, on_delay, ms, 0), 0);
  run_until(&d.fired);
  uv_close((uv_handle_t *)&d.t, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);   /* the close callback */
}

START_TEST(concurrent_calls_share_max_host_connections) {
  struct fr_kube_client_opts o = fast_opts;
  struct fr_kube_client *c;
  struct result rs[12], r;
  int before, during, i;

  o.max_host_connections = 2;
  c = client_new(creds, &o);
  before = sim_connections();
  /* Slow answers keep all twelve calls in flight at once. */
  set_faults("{\"latency_ms\":400}");
  memset(rs, 0, sizeof(rs));
  for (i = 0; i < 12; i++)
    ck_assert_int_eq(fr_kube_request(c, "GET", i % 2 ? "/version" : PODS, NULL, NULL, 0, 1, NULL,
                                     on_resp, &rs[i], NULL),
                     0);
  run_for(200);
  during = sim_connections() - before;
  for (i = 0; i < 12; i++) {
    run_until(&rs[i].done);
    ck_assert_int_eq(rs[i].status, 200);
    ck_assert_int_eq(rs[i].attempts, 1);
    result_free(&rs[i]);
  }
  set_faults("{\"latency_ms\":0}");
  /* Sequential calls reuse the pooled connections. */
  for (i = 0; i < 5; i++) {
    call(c, "GET", "/version", NULL, 1, &r);
    ck_assert_int_eq(r.status, 200);
    result_free(&r);
  }
  ck_assert_int_le(during, 2);
  ck_assert_int_le(sim_connections() - before, 2);
  ck_assert_int_ge(sim_connections() - before, 1);
  client_free_wait(c);
  finish_test();
}
END_TEST

START_TEST(slow_server_request_timeout_reports_status_0) {
  struct fr_kube_client_opts o = fast_opts;
  struct fr_kube_client *c;
  struct result r;

  o.request_timeout_ms = 300;
  o.max_retries = 1;
  c = client_new(creds, &o);
  set_faults("{\"latency_ms\":3000}");
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 0);
  ck_assert_msg(r.error != NULL && strstr(r.error, "timed out") != NULL, "error: %s", r.error);
  ck_assert_int_eq(r.attempts, 2);   /* a timeout is retried for idempotent calls */
  result_free(&r);
  call(c, "POST", PODS, "{}", 0, &r);
  ck_assert_int_eq(r.status, 0);
  ck_assert_int_eq(r.attempts, 1);
  result_free(&r);
  set_faults("{\"latency_ms\":0}");
  client_free_wait(c);
  finish_test();
}
END_TEST

/* fr_kube_request_opts: its timeout overrides the client's both ways, and
 * a header line that could end the request head is refused. */
START_TEST(request_opts_timeout_overrides_client_and_bad_header_refused) {
  struct fr_kube_client_opts o = fast_opts;
  struct fr_kube_request_opts ro;
  struct fr_kube_client *c;
  struct result r;

  o.request_timeout_ms = 300;
  o.max_retries = 0;
  c = client_new(creds, &o);
  set_faults("{\"latency_ms\":1000}");
  memset(&ro, 0, sizeof(ro));
  ro.timeout_ms = 5000; /* longer than the client's 300 ms: the slow answer arrives */
  ro.header = "X-Access-Token: abc";
  memset(&r, 0, sizeof(r));
  ck_assert_int_eq(fr_kube_request_opts(c, "GET", "/version", NULL, NULL, 0, &ro, on_resp, &r, NULL), 0);
  run_until(&r.done);
  ck_assert_int_eq(r.status, 200);
  result_free(&r);
  ro.timeout_ms = 100; /* shorter: times out */
  memset(&r, 0, sizeof(r));
  ck_assert_int_eq(fr_kube_request_opts(c, "GET", "/version", NULL, NULL, 0, &ro, on_resp, &r, NULL), 0);
  run_until(&r.done);
  ck_assert_int_eq(r.status, 0);
  ck_assert_msg(r.error != NULL && strstr(r.error, "timed out") != NULL, "error: %s", r.error);
  result_free(&r);
  set_faults("{\"latency_ms\":0}");
  ro.timeout_ms = 0;
  ro.header = "X-Evil: a\r\nX-Other: b";
  ck_assert_int_eq(fr_kube_request_opts(c, "GET", "/version", NULL, NULL, 0, &ro, on_resp, &r, NULL), -EINVAL);
  ro.header = "no colon here";
  ck_assert_int_eq(fr_kube_request_opts(c, "GET", "/version", NULL, NULL, 0, &ro, on_resp, &r, NULL), -EINVAL);
  ro.header = NULL;
  ro.flags = 1 << 7; /* unknown flag */
  ck_assert_int_eq(fr_kube_request_opts(c, "GET", "/version", NULL, NULL, 0, &ro, on_resp, &r, NULL), -EINVAL);
  client_free_wait(c);
  finish_test();
}
END_TEST

struct streamed {
  struct fr_buf got;
  int chunks;
  int stop_after;               /* stop after this many chunks; 0 = never */
};

static struct streamed *cur_stream;

static int on_stream_data(const char *data, size_t len, void *arg) {
  (void)arg;
  cur_stream->chunks++;
  ck_assert_int_eq(fr_buf_append(&cur_stream->got, data, len), 0);
  return cur_stream->stop_after > 0 && cur_stream->chunks >= cur_stream->stop_after;
}

/* on_data: a 2xx body handed over as it arrives, all of it, and <cb> gets
 * the status with an empty body; a reader that stops ends the call. */
START_TEST(request_opts_on_data_streams_body_and_can_stop) {
  struct fr_kube_client *c = client_new(creds, NULL);
  struct fr_kube_request_opts ro;
  struct streamed st;
  struct result r;
  json_t *j;
  int i;

  for (i = 0; i < 30; i++) {
    char name[32];
    snprintf(name, sizeof(name), "stream-p%d", i);
    create_pod(c, name, 2000);
  }
  memset(&st, 0, sizeof(st));
  fr_buf_init(&st.got);
  cur_stream = &st;
  memset(&ro, 0, sizeof(ro));
  ro.on_data = on_stream_data;
  memset(&r, 0, sizeof(r));
  ck_assert_int_eq(fr_kube_request_opts(c, "GET", PODS, NULL, NULL, 0, &ro, on_resp, &r, NULL), 0);
  run_until(&r.done);
  ck_assert_int_eq(r.status, 200);
  ck_assert_uint_eq(r.body_len, 0);
  ck_assert_int_gt(st.chunks, 0);
  j = json_loadb(st.got.data, st.got.len, 0, NULL);
  ck_assert_ptr_nonnull(j);
  ck_assert_uint_ge(json_array_size(json_object_get(j, "items")), 30);
  json_decref(j);
  result_free(&r);
  /* Stopped by its reader after the first chunk. */
  fr_buf_reset(&st.got);
  st.chunks = 0;
  st.stop_after = 1;
  ck_assert_int_eq(fr_kube_request_opts(c, "GET", PODS, NULL, NULL, 0, &ro, on_resp, &r, NULL), 0);
  run_until(&r.done);
  ck_assert_int_eq(r.status, 0);
  ck_assert_int_eq(st.chunks, 1);
  ck_assert_msg(r.error != NULL && strstr(r.error, "stopped by its reader") != NULL, "error: %s", r.error);
  result_free(&r);
  /* Streaming and retrying do not go together. */
  ro.flags = FR_KUBE_IDEMPOTENT;
  ck_assert_int_eq(fr_kube_request_opts(c, "GET", PODS, NULL, NULL, 0, &ro, on_resp, &r, NULL), -EINVAL);
  fr_buf_free(&st.got);
  client_free_wait(c);
  finish_test();
}
END_TEST

/* A streamed answer whose server keeps the socket readable must not be
 * read whole inside one curl_multi_socket_action(): libcurl 7.88 reads on
 * as long as data keeps coming, and a `yes` in a sandbox then held the
 * router's loop for seconds. What one loop turn hands on is bounded by the
 * turn budget (fr/turn.h: 128 units of 2 KiB), the stream pauses and
 * resumes from a later turn, and every byte still arrives. Without the
 * budget one turn carried the whole 7 MB. */
struct paced {
  size_t total, this_turn, max_turn;
  int turns_with_data;
  uv_check_t turn; /* after the poll phase: the next turn's timers and poll count as one */
};

static struct paced *cur_paced;

static int on_paced_data(const char *data, size_t len, void *arg) {
  (void)data, (void)arg;
  cur_paced->total += len;
  if (cur_paced->this_turn == 0)
    cur_paced->turns_with_data++;
  cur_paced->this_turn += len;
  if (cur_paced->this_turn > cur_paced->max_turn)
    cur_paced->max_turn = cur_paced->this_turn;
  return 0;
}

static void on_turn(uv_check_t *h) {
  struct paced *p = h->data;

  p->this_turn = 0;
}

START_TEST(stream_answer_paced_across_loop_turns) {
  struct fr_kube_client *c = client_new(creds, NULL);
  struct fr_kube_request_opts ro;
  struct paced pc;
  struct result r;
  int i;

  /* 8 pods of 900 KB each: a list of over 7 MB that kubesim, another
   * process, writes as fast as the socket takes it. */
  for (i = 0; i < 8; i++) {
    char name[32];
    snprintf(name, sizeof(name), "paced-p%d", i);
    create_pod(c, name, 900 * 1000);
  }
  memset(&pc, 0, sizeof(pc));
  cur_paced = &pc;
  ck_assert_int_eq(uv_check_init(&loop, &pc.turn), 0);
  pc.turn.data = &pc;
  ck_assert_int_eq(uv_check_start(&pc.turn, on_turn), 0);
  memset(&ro, 0, sizeof(ro));
  ro.flags = FR_KUBE_STREAM;
  ro.on_data = on_paced_data;
  memset(&r, 0, sizeof(r));
  ck_assert_int_eq(fr_kube_request_opts(c, "GET", PODS "?labelSelector=", NULL, NULL, 0, &ro, on_resp, &r, NULL),
                   0);
  run_until(&r.done);
  ck_assert_int_eq(r.status, 200);
  ck_assert_uint_ge(pc.total, (size_t)8 * 900 * 1000);
  /* At most the budget (256 KiB) per reading of the loop's clock, two
   * readings a turn, plus the piece that opened each. */
  ck_assert_msg(pc.max_turn <= 2 * (128 * 2048 + 16384), "%zu bytes handed on in one loop turn", pc.max_turn);
  ck_assert_int_ge(pc.turns_with_data, (int)(pc.total / (2 * (128 * 2048 + 16384))));
  result_free(&r);
  uv_check_stop(&pc.turn);
  uv_close((uv_handle_t *)&pc.turn, NULL);
  client_free_wait(c);
  finish_test();
}
END_TEST

/* ------------------------------------------------------------ queue */

/* Many calls at once, one slot each, sharing a context. */
struct burst {
  struct fr_kube_client *c;
  struct slot *slots;
  int n;
  int answered;             /* bulk callbacks so far */
  int probe_done;           /* priority call answered ... */
  int probe_status;
  int probe_after;          /* ... after this many bulk callbacks */
  int cancel_in_cb;         /* index of a queued call to cancel from the first callback, or -1 */
  int free_in_cb;           /* free the client from the callback that makes <answered> this */
  int freed;
  size_t max_in_curl;       /* highest in_curl - priority - watches seen by the sampler */
  uv_prepare_t sampler;
};

struct slot {
  struct burst *b;
  struct fr_kube_call *call;
  int done, status, attempts, expect;
  char *error;
};

/* The client's counters must add up whenever anything looks. */
static void stats_check(struct burst *b, struct fr_kube_client_stats *st) {
  size_t bulk;

  fr_kube_client_stats(b->c, st);
  ck_assert_uint_le(st->active, st->max_active);
  ck_assert_uint_le(st->active_peak, st->max_active);
  ck_assert_uint_le(st->in_curl, st->active + st->priority + st->watches);
  /* Bulk calls in curl: at least this many (a bypassing call counted but
   * not yet in curl makes it an underestimate). */
  bulk = st->in_curl > st->priority + st->watches ? st->in_curl - st->priority - st->watches : 0;
  if (bulk > b->max_in_curl)
    b->max_in_curl = bulk;
}

/* Samples the counters once per loop iteration, before polling. */
static void on_sample(uv_prepare_t *p) {
  struct burst *b = p->data;
  struct fr_kube_client_stats st;

  if (b->c != NULL && !b->freed)
    stats_check(b, &st);
}

static void on_slot(const struct fr_kube_response *r, void *arg) {
  struct slot *s = arg;
  struct burst *b = s->b;
  struct fr_kube_client_stats st;

  s->done++;
  s->status = r->status;
  s->attempts = r->attempts;
  free(s->error);
  s->error = r->error != NULL ? strdup(r->error) : NULL;
  b->answered++;
  stats_check(b, &st);
  if (b->cancel_in_cb >= 0) {
    fr_kube_cancel(b->slots[b->cancel_in_cb].call);
    b->slots[b->cancel_in_cb].call = NULL;
    b->cancel_in_cb = -1;
  }
  if (b->free_in_cb > 0 && b->answered == b->free_in_cb)
    fr_kube_client_free(b->c, on_freed, &b->freed);
}

static void on_probe(const struct fr_kube_response *r, void *arg) {
  struct burst *b = arg;

  b->probe_done++;
  b->probe_status = r->status;
  b->probe_after = b->answered;
}

static void burst_init(struct burst *b, struct fr_kube_client *c, int n) {
  memset(b, 0, sizeof(*b));
  b->c = c;
  b->n = n;
  b->cancel_in_cb = -1;
  b->slots = calloc((size_t)n, sizeof(*b->slots));
  ck_assert_ptr_nonnull(b->slots);
  ck_assert_int_eq(uv_prepare_init(&loop, &b->sampler), 0);
  b->sampler.data = b;
  ck_assert_int_eq(uv_prepare_start(&b->sampler, on_sample), 0);
}

struct answered_goal {
  const struct burst *b;
  int n;
};

static int answered_reached(void *arg) {
  const struct answered_goal *g = arg;

  return g->b->answered >= g->n;
}

/* Runs the loop until <b> has had <n> bulk callbacks. */
static void run_until_answered(const struct burst *b, int n) {
  struct answered_goal g = {b, n};

  ck_assert_msg(fr_test_run_until_cb(&loop, answered_reached, &g) == 0, "loop ran dry");
}

static void burst_free(struct burst *b) {
  int i;

  uv_close((uv_handle_t *)&b->sampler, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);   /* the close callback: <b> may be reused */
  for (i = 0; i < b->n; i++)
    free(b->slots[i].error);
  free(b->slots);
}

/* Starts call <i>: GET /version (200) for every third, else a GET or a
 * DELETE of a pod that does not exist (404). */
static void burst_start(struct burst *b, int i) {
  struct slot *s = &b->slots[i];
  char path[128];
  const char *method = i % 2 ? "DELETE" : "GET";

  s->b = b;
  if (i % 3 == 0) {
    snprintf(path, sizeof(path), "/version");
    method = "GET";
    s->expect = 200;
  } else {
    snprintf(path, sizeof(path), PODS "/burst-missing-%d", i);
    s->expect = 404;
  }
  ck_assert_int_eq(fr_kube_request(b->c, method, path, NULL, NULL, 0, FR_KUBE_IDEMPOTENT,
                                   "burst", on_slot, s, &s->call),
                   0);
  ck_assert_ptr_nonnull(s->call);
}

START_TEST(burst_beyond_max_active_queues_and_answers_each_once) {
  struct fr_kube_client_opts o = fast_opts;
  struct fr_kube_client *c;
  struct fr_kube_client_stats st;
  struct burst b;
  int i, n = 3000;

  o.max_host_connections = 8;   /* max_active defaults to twice that */
  c = client_new(creds, &o);
  burst_init(&b, c, n);
  for (i = 0; i < n; i++)
    burst_start(&b, i);
  /* The first max_active went to curl's side, the rest wait as records. */
  fr_kube_client_stats(c, &st);
  ck_assert_uint_eq(st.max_active, 16);
  ck_assert_uint_eq(st.active, 16);
  ck_assert_uint_eq(st.queued, (size_t)n - 16);
  ck_assert_uint_eq(st.in_curl, 0);   /* nothing is sent before a loop turn */

  /* A health probe issued behind the whole burst skips the queue. */
  ck_assert_int_eq(fr_kube_request(c, "GET", "/version", NULL, NULL, 0, FR_KUBE_PRIORITY, NULL,
                                   on_probe, &b, NULL),
                   0);
  fr_kube_client_stats(c, &st);
  ck_assert_uint_eq(st.priority, 1);
  ck_assert_uint_eq(st.queued, (size_t)n - 16);

  run_until_answered(&b, n);
  run_until(&b.probe_done);

  for (i = 0; i < n; i++) {
    ck_assert_msg(b.slots[i].done == 1, "call %d answered %d times", i, b.slots[i].done);
    ck_assert_msg(b.slots[i].status == b.slots[i].expect, "call %d: status %d (%s), expected %d",
                  i, b.slots[i].status, b.slots[i].error ? b.slots[i].error : "", b.slots[i].expect);
    ck_assert_int_eq(b.slots[i].attempts, 1);   /* no timeout and retry from waiting */
  }
  ck_assert_int_eq(b.probe_done, 1);
  ck_assert_int_eq(b.probe_status, 200);
  /* Behind at most the calls already handed to curl (one round of them,
   * plus the few curl lets in while it waits for a connection), never
   * behind the queue. */
  ck_assert_msg(b.probe_after <= 4 * 16, "the probe came after %d of %d calls", b.probe_after, n);

  fr_kube_client_stats(c, &st);
  ck_assert_uint_eq(st.active, 0);
  ck_assert_uint_eq(st.queued, 0);
  ck_assert_uint_eq(st.priority, 0);
  ck_assert_uint_eq(st.in_curl, 0);
  ck_assert_uint_eq(st.active_peak, 16);
  ck_assert_uint_eq(st.queued_peak, (size_t)n - 16);
  ck_assert_uint_eq(st.expired, 0);
  ck_assert_uint_le(b.max_in_curl, 16);
  ck_assert_uint_ge(b.max_in_curl, 8);   /* the connections were kept busy */
  burst_free(&b);
  client_free_wait(c);
  finish_test();
}
END_TEST

START_TEST(queued_calls_time_out_from_dispatch_not_from_queueing) {
  struct fr_kube_client_opts o = fast_opts;
  struct fr_kube_client *c;
  struct fr_kube_client_stats st;
  struct burst b;
  int i, n = 40;

  /* Two connections, 100 ms per answer: the last of 40 calls is answered
   * after ~2 s, twice the request timeout. Counted from when it was
   * queued, most would time out; counted from dispatch, none does. */
  o.max_host_connections = 2;
  o.request_timeout_ms = 1000;
  o.max_retries = -1;   /* a timeout would show as status 0 */
  c = client_new(creds, &o);
  set_faults("{\"latency_ms\":100}");
  burst_init(&b, c, n);
  for (i = 0; i < n; i++) {
    b.slots[i].b = &b;
    b.slots[i].expect = 200;
    ck_assert_int_eq(fr_kube_request(c, "GET", "/version", NULL, NULL, 0, FR_KUBE_IDEMPOTENT,
                                     NULL, on_slot, &b.slots[i], NULL),
                     0);
  }
  run_until_answered(&b, n);
  for (i = 0; i < n; i++) {
    ck_assert_int_eq(b.slots[i].done, 1);
    ck_assert_msg(b.slots[i].status == 200, "call %d: %d %s", i, b.slots[i].status,
                  b.slots[i].error ? b.slots[i].error : "");
    ck_assert_int_eq(b.slots[i].attempts, 1);
  }
  fr_kube_client_stats(c, &st);
  ck_assert_uint_eq(st.active_peak, 4);
  ck_assert_uint_eq(st.queued_peak, (size_t)n - 4);
  set_faults("{\"latency_ms\":0}");
  burst_free(&b);
  client_free_wait(c);
  finish_test();
}
END_TEST

START_TEST(queued_call_past_queue_timeout_fails_unsent) {
  struct fr_kube_client_opts o = fast_opts;
  struct fr_kube_client *c;
  struct fr_kube_client_stats st;
  struct burst b;
  int i, n = 10;

  /* One connection, 600 ms per answer, 200 ms allowed in the queue: the
   * two active calls are answered, the eight queued ones expire before a
   * slot frees. */
  o.max_host_connections = 1;
  o.queue_timeout_ms = 200;
  c = client_new(creds, &o);
  set_faults("{\"latency_ms\":600}");
  burst_init(&b, c, n);
  for (i = 0; i < n; i++) {
    b.slots[i].b = &b;
    ck_assert_int_eq(fr_kube_request(c, "GET", "/version", NULL, NULL, 0, FR_KUBE_IDEMPOTENT,
                                     NULL, on_slot, &b.slots[i], NULL),
                     0);
  }
  run_until_answered(&b, n);
  for (i = 0; i < n; i++) {
    ck_assert_int_eq(b.slots[i].done, 1);
    if (i < 2) {
      ck_assert_int_eq(b.slots[i].status, 200);
      ck_assert_int_eq(b.slots[i].attempts, 1);
    } else {
      ck_assert_int_eq(b.slots[i].status, 0);
      ck_assert_int_eq(b.slots[i].attempts, 0);   /* never sent */
      ck_assert_msg(b.slots[i].error != NULL && strstr(b.slots[i].error, "queue") != NULL,
                    "error: %s", b.slots[i].error ? b.slots[i].error : "(none)");
    }
  }
  fr_kube_client_stats(c, &st);
  ck_assert_uint_eq(st.expired, 8);
  ck_assert_uint_eq(st.queued, 0);
  ck_assert_uint_eq(st.active, 0);
  set_faults("{\"latency_ms\":0}");
  burst_free(&b);
  client_free_wait(c);
  finish_test();
}
END_TEST

START_TEST(cancel_queued_calls_removes_them_without_callback) {
  struct fr_kube_client_opts o = fast_opts;
  struct fr_kube_client *c;
  struct fr_kube_client_stats st;
  struct burst b;
  struct result r;
  int i, n = 200, cancelled = 0, expected = 0;

  o.max_host_connections = 2;   /* 4 active */
  c = client_new(creds, &o);
  burst_init(&b, c, n);
  for (i = 0; i < n; i++)
    burst_start(&b, i);
  /* Every second queued call, right away; the last one from the first
   * callback to run. */
  for (i = 4; i < n - 1; i += 2) {
    fr_kube_cancel(b.slots[i].call);
    b.slots[i].call = NULL;
    cancelled++;
  }
  fr_kube_client_stats(c, &st);
  ck_assert_uint_eq(st.queued, (size_t)(n - 4 - cancelled));
  b.cancel_in_cb = n - 1;
  run_until_answered(&b, n - cancelled - 1);
  /* Round trips give a late callback a chance to show up. */
  for (i = 0; i < 3; i++) {
    call(c, "GET", "/version", NULL, 1, &r);
    ck_assert_int_eq(r.status, 200);
    result_free(&r);
  }
  for (i = 0; i < n; i++) {
    if ((i >= 4 && i % 2 == 0 && i < n - 1) || i == n - 1) {
      ck_assert_msg(b.slots[i].done == 0, "cancelled call %d answered", i);
    } else {
      ck_assert_msg(b.slots[i].done == 1, "call %d answered %d times", i, b.slots[i].done);
      ck_assert_int_eq(b.slots[i].status, b.slots[i].expect);
      expected++;
    }
  }
  ck_assert_int_eq(b.answered, expected);
  fr_kube_client_stats(c, &st);
  ck_assert_uint_eq(st.queued, 0);
  ck_assert_uint_eq(st.active, 0);
  ck_assert_uint_eq(st.in_curl, 0);
  burst_free(&b);
  client_free_wait(c);
  finish_test();
}
END_TEST

START_TEST(client_free_with_queued_calls_calls_nothing) {
  struct fr_kube_client_opts o = fast_opts;
  struct fr_kube_client *c;
  struct fr_kube_client_stats st;
  struct burst b;
  int i, n = 3000, answered;

  o.max_host_connections = 4;
  /* Freed right after queueing: nothing sent, nothing answered. */
  c = client_new(creds, &o);
  burst_init(&b, c, n);
  for (i = 0; i < n; i++)
    burst_start(&b, i);
  fr_kube_client_free(c, on_freed, &b.freed);
  b.c = NULL;
  ck_assert_int_eq(b.freed, 0);   /* never from inside the call */
  run_until(&b.freed);
  ck_assert_int_eq(b.freed, 1);
  ck_assert_int_eq(b.answered, 0);
  burst_free(&b);

  /* Freed with calls on the wire and most still queued. */
  c = client_new(creds, &o);
  burst_init(&b, c, n);
  for (i = 0; i < n; i++)
    burst_start(&b, i);
  run_until_answered(&b, 50);
  fr_kube_client_stats(c, &st);
  ck_assert_uint_gt(st.queued, 0);
  answered = b.answered;
  fr_kube_client_free(c, on_freed, &b.freed);
  run_until(&b.freed);
  ck_assert_int_eq(b.answered, answered);
  b.c = NULL;
  burst_free(&b);

  /* Freed from inside a callback, with most still queued. */
  c = client_new(creds, &o);
  burst_init(&b, c, n);
  b.free_in_cb = 20;
  for (i = 0; i < n; i++)
    burst_start(&b, i);
  run_until(&b.freed);
  ck_assert_int_eq(b.answered, 20);
  b.c = NULL;
  burst_free(&b);
  finish_test();
}
END_TEST

/* ------------------------------------------------------------ cancel / free */

struct canceller {
  struct fr_kube_call *self, *victim;
  struct result r;
};

static void on_resp_cancel_other(const struct fr_kube_response *resp, void *arg) {
  struct canceller *k = arg;

  on_resp(resp, &k->r);
  fr_kube_cancel(k->self);     /* a no-op inside its own callback */
  fr_kube_cancel(k->victim);
}

START_TEST(cancel_inside_callbacks_stops_all_callbacks) {
  struct fr_kube_client *c = client_new(creds, NULL);
  struct watch w1, w2;
  struct canceller k;
  struct result r, never;

  create_pod(c, "cancel-a", 10);
  create_pod(c, "cancel-b", 10);

  /* A watch cancelled from its own on_line gets nothing more, though a
   * second ADDED line is in the same chunk or right behind. */
  memset(&w1, 0, sizeof(w1));
  w1.c = c;
  w1.cancel_at = 1;
  ck_assert_int_eq(fr_kube_watch(c, PODS "?watch=true&timeoutSeconds=30", on_watch_line,
                                 on_watch_done, &w1, &w1.call),
                   0);
  run_until(&w1.lines);

  /* A long watch cancelled from another call's callback. */
  memset(&w2, 0, sizeof(w2));
  w2.c = c;
  w2.created_w3 = 1;
  ck_assert_int_eq(fr_kube_watch(c, PODS "?watch=true&timeoutSeconds=30", on_watch_line,
                                 on_watch_done, &w2, &w2.call),
                   0);
  run_until(&w2.lines);
  memset(&k, 0, sizeof(k));
  k.victim = w2.call;
  ck_assert_int_eq(fr_kube_request(c, "GET", "/version", NULL, NULL, 0, 1, NULL,
                                   on_resp_cancel_other, &k, &k.self),
                   0);
  run_until(&k.r.done);

  /* A call cancelled right after it started. */
  memset(&never, 0, sizeof(never));
  {
    struct fr_kube_call *h = NULL;

    ck_assert_int_eq(fr_kube_request(c, "GET", "/version", NULL, NULL, 0, 1, NULL, on_resp,
                                     &never, &h),
                     0);
    fr_kube_cancel(h);
  }

  /* The client still works, and round trips give late callbacks a chance. */
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 200);
  result_free(&r);
  create_pod(c, "cancel-c", 10);
  call(c, "GET", PODS, NULL, 1, &r);
  ck_assert_int_eq(r.status, 200);
  result_free(&r);

  ck_assert_int_eq(w1.lines, 1);
  ck_assert_int_eq(w1.done, 0);
  ck_assert_int_eq(w2.done, 0);
  ck_assert_int_eq(k.r.status, 200);
  ck_assert_int_eq(never.done, 0);
  result_free(&k.r);
  client_free_wait(c);
  ck_assert_int_eq(w2.done, 0);
  finish_test();
}
END_TEST

START_TEST(client_free_with_calls_in_flight_calls_nothing) {
  struct fr_kube_client *c;
  struct result rs[4];
  struct watch w;
  int freed = 0, i;

  memset(rs, 0, sizeof(rs));
  memset(&w, 0, sizeof(w));
  set_faults("{\"latency_ms\":3000}");

  /* Freed right after starting: the calls are still waiting for credentials. */
  c = client_new(creds, NULL);
  for (i = 0; i < 2; i++)
    ck_assert_int_eq(fr_kube_request(c, "GET", "/version", NULL, NULL, 0, 1, NULL, on_resp,
                                     &rs[i], NULL),
                     0);
  fr_kube_client_free(c, on_freed, &freed);
  ck_assert_int_eq(freed, 0);   /* never from inside the call */
  run_until(&freed);

  /* Freed while requests and a watch are on the wire. */
  freed = 0;
  c = client_new(creds, NULL);
  w.c = c;
  w.created_w3 = 1;
  for (i = 2; i < 4; i++)
    ck_assert_int_eq(fr_kube_request(c, "GET", "/version", NULL, NULL, 0, 1, NULL, on_resp,
                                     &rs[i], NULL),
                     0);
  ck_assert_int_eq(fr_kube_watch(c, PODS "?watch=true", on_watch_line, on_watch_done, &w, NULL), 0);
  run_for(150);
  fr_kube_client_free(c, on_freed, &freed);
  run_until(&freed);

  for (i = 0; i < 4; i++)
    ck_assert_int_eq(rs[i].done, 0);
  ck_assert_int_eq(w.done, 0);
  ck_assert_int_eq(w.lines, 0);
  ck_assert_int_eq(freed, 1);
  set_faults("{\"latency_ms\":0}");
  finish_test();
}
END_TEST

struct freer {
  struct fr_kube_client *c;
  int freed;
  struct result r;
  struct result *other;
};

static void on_resp_free_client(const struct fr_kube_response *resp, void *arg) {
  struct freer *f = arg;

  on_resp(resp, &f->r);
  /* A call that is still waiting for credentials when the client goes. */
  ck_assert_int_eq(fr_kube_request(f->c, "GET", PODS, NULL, NULL, 0, 1, NULL, on_resp, f->other,
                                   NULL),
                   0);
  fr_kube_client_free(f->c, on_freed, &f->freed);
}

START_TEST(client_free_inside_callbacks_stops_everything) {
  struct fr_kube_client *c = client_new(creds, NULL);
  struct watch w, w2;
  struct freer f;
  struct result other;

  create_pod(c, "free-a", 10);
  create_pod(c, "free-b", 10);

  /* From a watch's on_line (inside curl's write callback). */
  memset(&w, 0, sizeof(w));
  w.c = c;
  w.free_at = 1;
  ck_assert_int_eq(fr_kube_watch(c, PODS "?watch=true&timeoutSeconds=30", on_watch_line,
                                 on_watch_done, &w, NULL),
                   0);
  run_until(&w.freed);
  ck_assert_int_eq(w.lines, 1);
  ck_assert_int_eq(w.done, 0);
  ck_assert_int_eq(w.freed, 1);

  /* From a response callback, with a watch streaming. */
  c = client_new(creds, NULL);
  memset(&w2, 0, sizeof(w2));
  memset(&f, 0, sizeof(f));
  memset(&other, 0, sizeof(other));
  w2.c = c;
  w2.created_w3 = 1;
  f.c = c;
  f.other = &other;
  ck_assert_int_eq(fr_kube_watch(c, PODS "?watch=true&timeoutSeconds=30", on_watch_line,
                                 on_watch_done, &w2, NULL),
                   0);
  run_until(&w2.lines);
  ck_assert_int_eq(fr_kube_request(c, "GET", "/version", NULL, NULL, 0, 1, NULL,
                                   on_resp_free_client, &f, NULL),
                   0);
  run_until(&f.freed);
  ck_assert_int_eq(f.r.status, 200);
  ck_assert_int_eq(other.done, 0);
  ck_assert_int_eq(w2.done, 0);
  result_free(&f.r);
  finish_test();
}
END_TEST

/* ------------------------------------------------------------ credentials */

static void write_file(const char *path, const char *text, int mode) {
  FILE *f = fopen(path, "w");

  ck_assert_ptr_nonnull(f);
  ck_assert_int_ge(fputs(text, f), 0);
  ck_assert_int_eq(fclose(f), 0);
  ck_assert_int_eq(chmod(path, (mode_t)mode), 0);
}

static int count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  int n = 0, ch;

  if (f == NULL)
    return 0;
  while ((ch = fgetc(f)) != EOF)
    n += ch == '\n';
  fclose(f);
  return n;
}

/* creds with <script> (its text) as exec plugin instead of the token. */
static struct fr_kube_creds *plugin_creds(const char *script) {
  struct fr_kube_creds *pc = fr_kube_creds_dup(creds);
  struct fr_kube_exec_plugin *ex = calloc(1, sizeof(*ex));
  char path[160], dirvar[160];

  ck_assert_ptr_nonnull(pc);
  ck_assert_ptr_nonnull(ex);
  snprintf(path, sizeof(path), "%s/plugin.sh", tmpdir);
  write_file(path, script, 0755);
  snprintf(dirvar, sizeof(dirvar), "PLUGIN_DIR=%s", tmpdir);
  free(pc->token);
  pc->token = NULL;
  ex->api_version = strdup("client.authentication.k8s.io/v1");
  ex->command = strdup(path);
  ex->args = calloc(2, sizeof(char *));
  ex->args[0] = strdup("--some-flag");
  ex->env = calloc(3, sizeof(char *));
  ex->env[0] = strdup("FOO=bar");
  ex->env[1] = strdup(dirvar);
  pc->exec = ex;
  return pc;
}

static int plugin_runs(void) {
  char path[160];

  snprintf(path, sizeof(path), "%s/runs", tmpdir);
  return count_lines(path);
}

START_TEST(exec_plugin_token_used_cached_and_queued) {
  static const char script[] =
      "#!/bin/sh\n"
      "echo run >> \"$PLUGIN_DIR/runs\"\n"
      "{ echo \"$FOO $1\"; echo \"$KUBERNETES_EXEC_INFO\"; } > \"$PLUGIN_DIR/env\"\n"
      "sleep 0.2\n"
      "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
      "\"status\":{\"token\":\"" TOKEN "\",\"expirationTimestamp\":\"2099-01-01T00:00:00Z\"}}'\n";
  struct fr_kube_creds *pc = plugin_creds(script);
  struct fr_kube_client *c = client_new(pc, NULL);
  struct result rs[3];
  char path[160], line[512];
  FILE *f;
  int i;

  /* Three requests queue behind one plugin run. */
  memset(rs, 0, sizeof(rs));
  for (i = 0; i < 3; i++)
    ck_assert_int_eq(fr_kube_request(c, "GET", "/version", NULL, NULL, 0, 1, NULL, on_resp,
                                     &rs[i], NULL),
                     0);
  for (i = 0; i < 3; i++) {
    run_until(&rs[i].done);
    ck_assert_int_eq(rs[i].status, 200);
    ck_assert_int_eq(rs[i].attempts, 1);
    result_free(&rs[i]);
  }
  ck_assert_int_eq(plugin_runs(), 1);
  /* Cached: no second run. */
  call(c, "GET", "/api", NULL, 1, &rs[0]);
  ck_assert_int_eq(rs[0].status, 200);
  result_free(&rs[0]);
  ck_assert_int_eq(plugin_runs(), 1);
  /* The plugin saw its args, its env and KUBERNETES_EXEC_INFO. */
  snprintf(path, sizeof(path), "%s/env", tmpdir);
  f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
  ck_assert_str_eq(line, "bar --some-flag\n");
  ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
  ck_assert_ptr_nonnull(strstr(line, "\"kind\":\"ExecCredential\""));
  ck_assert_ptr_nonnull(strstr(line, "client.authentication.k8s.io/v1"));
  fclose(f);
  client_free_wait(c);
  fr_kube_creds_free(pc);
  finish_test();
}
END_TEST

START_TEST(exec_plugin_rerun_on_401_and_near_expiry) {
  /* First run: a wrong token. Later runs: the right one, expiring within
   * the 30 s refresh window, so every new request runs it again. */
  char script[1024], stamp[32];
  time_t soon = time(NULL) + 10;
  struct tm tm;
  struct fr_kube_creds *pc;
  struct fr_kube_client *c;
  struct result r;

  gmtime_r(&soon, &tm);
  strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
  snprintf(script, sizeof(script),
           "#!/bin/sh\n"
           "if [ -e \"$PLUGIN_DIR/runs\" ]; then tok=" TOKEN "; else tok=wrong; fi\n"
           "echo run >> \"$PLUGIN_DIR/runs\"\n"
           "echo \"{\\\"kind\\\":\\\"ExecCredential\\\",\\\"apiVersion\\\":\\\"client.authentication"
           ".k8s.io/v1\\\",\\\"status\\\":{\\\"token\\\":\\\"$tok\\\",\\\"expirationTimestamp\\\":"
           "\\\"%s\\\"}}\"\n",
           stamp);
  pc = plugin_creds(script);
  c = client_new(pc, NULL);
  /* POST: non-idempotent, but a 401 is safe to retry once. */
  create_pod(c, "plugin-p1", 10);
  ck_assert_int_eq(plugin_runs(), 2);
  call(c, "GET", PODS "/plugin-p1", NULL, 1, &r);
  ck_assert_int_eq(r.status, 200);
  ck_assert_int_eq(r.attempts, 1);
  result_free(&r);
  ck_assert_int_eq(plugin_runs(), 3);
  client_free_wait(c);
  fr_kube_creds_free(pc);
  finish_test();
}
END_TEST

START_TEST(exec_plugin_garbage_or_failure_reports_clear_error) {
  static const char garbage[] = "#!/bin/sh\necho 'this is not json'\necho 'boom: no login' >&2\n";
  static const char failing[] = "#!/bin/sh\necho 'access denied for you' >&2\nexit 3\n";
  static const char notoken[] =
      "#!/bin/sh\necho '{\"kind\":\"ExecCredential\",\"status\":{}}'\n";
  struct fr_kube_creds *pc;
  struct fr_kube_client *c;
  struct result r;

  pc = plugin_creds(garbage);
  c = client_new(pc, NULL);
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 0);
  ck_assert_ptr_nonnull(r.error);
  ck_assert_msg(strstr(r.error, "exec plugin") && strstr(r.error, "ExecCredential") &&
                    strstr(r.error, "boom: no login"),
                "error: %s", r.error);
  result_free(&r);
  client_free_wait(c);
  fr_kube_creds_free(pc);

  pc = plugin_creds(failing);
  c = client_new(pc, NULL);
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 0);
  ck_assert_msg(strstr(r.error, "exit status 3") && strstr(r.error, "access denied for you"),
                "error: %s", r.error);
  result_free(&r);
  client_free_wait(c);
  fr_kube_creds_free(pc);

  pc = plugin_creds(notoken);
  c = client_new(pc, NULL);
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 0);
  ck_assert_msg(strstr(r.error, "status.token") != NULL, "error: %s", r.error);
  result_free(&r);
  client_free_wait(c);
  fr_kube_creds_free(pc);

  pc = plugin_creds(garbage);
  free(pc->exec->command);
  pc->exec->command = strdup("/nonexistent/kube-plugin");
  c = client_new(pc, NULL);
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 0);
  ck_assert_msg(strstr(r.error, "could not start") && strstr(r.error, "/nonexistent/kube-plugin"),
                "error: %s", r.error);
  result_free(&r);
  client_free_wait(c);
  fr_kube_creds_free(pc);
  finish_test();
}
END_TEST

START_TEST(client_free_while_plugin_runs_kills_and_reaps_it) {
  static const char script[] =
      "#!/bin/sh\n"
      "echo $$ > \"$PLUGIN_DIR/pid.tmp\"; mv \"$PLUGIN_DIR/pid.tmp\" \"$PLUGIN_DIR/pid\"\n"
      "exec sleep 20\n";
  struct fr_kube_creds *pc = plugin_creds(script);
  struct fr_kube_client *c = client_new(pc, NULL);
  struct result r;
  char path[160];
  int pid = -1, i;

  memset(&r, 0, sizeof(r));
  ck_assert_int_eq(fr_kube_request(c, "GET", "/version", NULL, NULL, 0, 1, NULL, on_resp, &r,
                                   NULL),
                   0);
  snprintf(path, sizeof(path), "%s/pid", tmpdir);
  for (i = 0; i < 500 && pid <= 0; i++) {
    run_for(10);
    pid = read_int_file(path);
  }
  ck_assert_int_gt(pid, 0);
  ck_assert_int_eq(kill(pid, 0), 0);   /* the plugin is running */
  client_free_wait(c);
  ck_assert_int_eq(r.done, 0);
  /* Killed and reaped (waited for), so not even a zombie is left. */
  ck_assert_int_eq(kill(pid, 0), -1);
  ck_assert_int_eq(errno, ESRCH);
  fr_kube_creds_free(pc);
  finish_test();
}
END_TEST

START_TEST(token_file_reread_on_401) {
  struct fr_kube_creds *tc = fr_kube_creds_dup(creds);
  struct fr_kube_client *c;
  struct result r;
  char path[160];

  snprintf(path, sizeof(path), "%s/token", tmpdir);
  write_file(path, TOKEN "\n", 0600);
  free(tc->token);
  tc->token = strdup("stale-token");
  tc->token_file = strdup(path);
  c = client_new(tc, NULL);
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 200);
  ck_assert_int_eq(r.attempts, 2);
  result_free(&r);
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 200);
  ck_assert_int_eq(r.attempts, 1);
  result_free(&r);
  /* Rotated to a token the server rejects: one re-read, then the 401. */
  write_file(path, "rotated-wrong\n", 0600);
  free(tc->token);
  tc->token = NULL;
  client_free_wait(c);
  c = client_new(tc, NULL);
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 401);
  ck_assert_int_eq(r.attempts, 2);
  result_free(&r);
  client_free_wait(c);
  fr_kube_creds_free(tc);
  finish_test();
}
END_TEST

static void set_tokens(const char *json) {
  struct result r;

  call(admin, "PUT", "/_sim/tokens", json, 0, &r);
  ck_assert_msg(r.status == 200, "tokens %s: %d %s", json, r.status, r.body);
  result_free(&r);
}

/* A projected service-account token rotates without the old one being
 * refused first: client-go reads the file again about every minute.
 * With token_reread_ms = 50 the new token is used (no 401 needed: the
 * old one is no longer accepted when the call is made, and it answers on
 * the first attempt); with the default minute the same sequence costs a
 * 401 and a second attempt. */
START_TEST(token_file_reread_periodically_without_a_401) {
  struct fr_kube_creds *tc = fr_kube_creds_dup(creds);
  struct fr_kube_client_opts o = fast_opts;
  struct fr_kube_client *c, *slow;
  struct result r;
  char path[160];

  snprintf(path, sizeof(path), "%s/token", tmpdir);
  write_file(path, TOKEN "\n", 0600);
  free(tc->token);
  tc->token = strdup(TOKEN);
  tc->token_file = strdup(path);
  o.token_reread_ms = 50;
  c = client_new(tc, &o);
  slow = client_new(tc, &fast_opts);
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 200);
  result_free(&r);
  call(slow, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 200);
  result_free(&r);
  /* The kubelet rotates the file; the API server accepts both for a
   * while, then only the new one. */
  set_tokens("{\"tokens\":[\"" TOKEN "\",\"rotated-token\"]}");
  write_file(path, "rotated-token\n", 0600);
  run_for(80);
  set_tokens("{\"tokens\":[\"rotated-token\"]}");
  call(c, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 200);
  ck_assert_int_eq(r.attempts, 1);
  result_free(&r);
  call(slow, "GET", "/version", NULL, 1, &r);
  ck_assert_int_eq(r.status, 200);
  ck_assert_int_eq(r.attempts, 2); /* the old token, a 401, the file again */
  result_free(&r);
  set_tokens("{\"tokens\":[\"" TOKEN "\"]}");
  client_free_wait(c);
  client_free_wait(slow);
  fr_kube_creds_free(tc);
  finish_test();
}
END_TEST

/* ------------------------------------------------------------ suite */

static Suite *kube_suite(void) {
  Suite *s = suite_create("kube");
  TCase *tc = tcase_create("client");

  tcase_add_unchecked_fixture(tc, sim_start, sim_stop);
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, get_version_over_tls_with_token_returns_200);
  tcase_add_test(tc, get_wrong_token_reports_401);
  tcase_add_test(tc, post_pod_then_get_returns_it);
  tcase_add_test(tc, get_missing_pod_passes_404_status_body);
  tcase_add_test(tc, request_bad_arguments_rejected_without_callback);
  tcase_add_test(tc, watch_delivers_added_lines_then_done_after_timeout);
  tcase_add_test(tc, watch_bad_path_reports_status_and_body);
  tcase_add_test(tc, throttled_get_retried_until_success_post_not_retried);
  tcase_add_test(tc, error_503_get_retried_max_retries_then_503);
  tcase_add_test(tc, server_down_reports_status_0_with_error);
  tcase_add_test(tc, concurrent_calls_share_max_host_connections);
  tcase_add_test(tc, slow_server_request_timeout_reports_status_0);
  tcase_add_test(tc, request_opts_timeout_overrides_client_and_bad_header_refused);
  tcase_add_test(tc, request_opts_on_data_streams_body_and_can_stop);
  tcase_add_test(tc, stream_answer_paced_across_loop_turns);
  tcase_add_test(tc, burst_beyond_max_active_queues_and_answers_each_once);
  tcase_add_test(tc, queued_calls_time_out_from_dispatch_not_from_queueing);
  tcase_add_test(tc, queued_call_past_queue_timeout_fails_unsent);
  tcase_add_test(tc, cancel_queued_calls_removes_them_without_callback);
  tcase_add_test(tc, client_free_with_queued_calls_calls_nothing);
  tcase_add_test(tc, cancel_inside_callbacks_stops_all_callbacks);
  tcase_add_test(tc, client_free_with_calls_in_flight_calls_nothing);
  tcase_add_test(tc, client_free_inside_callbacks_stops_everything);
  tcase_add_test(tc, exec_plugin_token_used_cached_and_queued);
  tcase_add_test(tc, exec_plugin_rerun_on_401_and_near_expiry);
  tcase_add_test(tc, exec_plugin_garbage_or_failure_reports_clear_error);
  tcase_add_test(tc, client_free_while_plugin_runs_kills_and_reaps_it);
  tcase_add_test(tc, token_file_reread_on_401);
  tcase_add_test(tc, token_file_reread_periodically_without_a_401);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(kube_suite());
  int failed;

  signal(SIGPIPE, SIG_IGN);
  if (getenv("DBG") != NULL)
    fr_log_set_level(FR_LOG_DEBUG);
  else
    fr_log_set_level(FR_LOG_ERROR);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
