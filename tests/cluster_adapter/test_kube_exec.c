/* test_kube_exec.c - pods/exec over the WebSocket channel protocol, against
 * the real kubesim binary on loopback (over TLS with a bearer token, and
 * over plain HTTP): output, exit codes, stdin, caps, timeouts, refused
 * upgrades, binary data, cancellation. */
#define _GNU_SOURCE /* prctl */
#include "fr/kube.h"
#include "fr/kubeconfig.h"
#include "fr/buf.h"
#include "fr/log.h"
#include "fr/turn.h"
#include "fr/ws.h"

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

#define TOKEN "exec-test-token"
#define ARGV(...) ((char *const[]){__VA_ARGS__, NULL})

/* ---- the simulator ---- */

struct sim {
  pid_t pid;
  char dir[64];
  char kubeconfig[128];
  int tls;
};

static struct sim sim_tls = {.tls = 1}, sim_plain = {.tls = 0};

static void rm_rf(const char *path) {
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
  if (system(cmd) != 0)
    fprintf(stderr, "cannot remove %s\n", path);
}

static void sim_start(struct sim *s) {
  char port_file[128], workdir[128];
  struct timespec ts = {0, 20 * 1000 * 1000};
  int i;

  snprintf(s->dir, sizeof(s->dir), "/tmp/test_kube_exec.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(s->dir));
  snprintf(s->kubeconfig, sizeof(s->kubeconfig), "%s/kubeconfig", s->dir);
  snprintf(port_file, sizeof(port_file), "%s/port", s->dir);
  snprintf(workdir, sizeof(workdir), "%s/work", s->dir);
  s->pid = fork();
  ck_assert_int_ge(s->pid, 0);
  if (s->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* no simulator outlives a crashed test */
    if (s->tls)
      execl(KUBESIM_PATH, "kubesim", "--tls", "--token", TOKEN, "--name", "exec-test",
            "--write-kubeconfig", s->kubeconfig, "--port-file", port_file, "--workdir",
            workdir, "--log-level", "warn", (char *)NULL);
    else
      execl(KUBESIM_PATH, "kubesim", "--token", TOKEN, "--name", "exec-test",
            "--write-kubeconfig", s->kubeconfig, "--port-file", port_file, "--workdir",
            workdir, "--log-level", "warn", (char *)NULL);
    _exit(127);
  }
  /* The port file is written last, once the simulator serves. */
  for (i = 0; i < 1000 && access(port_file, F_OK) != 0; i++)
    nanosleep(&ts, NULL);
  ck_assert_msg(access(port_file, F_OK) == 0, "kubesim did not start");
}

static void sim_stop(struct sim *s) {
  int status = 0;

  if (s->pid <= 0)
    return;
  kill(s->pid, SIGTERM);
  waitpid(s->pid, &status, 0);
  s->pid = 0;
  rm_rf(s->dir);
}

/* ---- a loop and a client per test ---- */

struct ctx {
  uv_loop_t loop;
  struct fr_kube_creds *creds;
  struct fr_kube_client *c;
};

static void ctx_open_creds(struct ctx *t, struct fr_kube_creds *creds) {
  ck_assert_int_eq(uv_loop_init(&t->loop), 0);
  t->creds = creds;
  ck_assert_int_eq(fr_kube_client_new(&t->loop, t->creds, NULL, &t->c), 0);
}

static struct fr_kube_creds *load_creds(const struct sim *s) {
  struct fr_kube_creds *creds = NULL;
  char err[256];

  ck_assert_msg(fr_kubeconfig_load(s->kubeconfig, NULL, &creds, err, sizeof(err)) == 0, "%s",
                err);
  return creds;
}

static void ctx_open(struct ctx *t, const struct sim *s) {
  ctx_open_creds(t, load_creds(s));
}

static void on_client_freed(void *arg) {
  (*(int *)arg)++;
}

/* Frees the client and checks that nothing is left on the loop. */
static void ctx_close(struct ctx *t) {
  int freed = 0;

  fr_kube_client_free(t->c, on_client_freed, &freed);
  uv_run(&t->loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(freed, 1);
  ck_assert_int_eq(uv_loop_close(&t->loop), 0);
  fr_kube_creds_free(t->creds);
}

/* ---- REST, to set the pods up ---- */

struct rest {
  int done, status;
  char *body;
};

static void on_rest(const struct fr_kube_response *resp, void *arg) {
  struct rest *r = arg;

  r->done = 1;
  r->status = resp->status;
  r->body = strdup(resp->body);
}

static int rest(struct ctx *t, const char *method, const char *path, const char *body,
                char **out) {
  struct rest r = {0, 0, NULL};

  ck_assert_int_eq(fr_kube_request(t->c, method, path, body ? "application/json" : NULL, body,
                                   body ? strlen(body) : 0, 0, NULL, on_rest, &r, NULL),
                   0);
  fr_test_run_until(&t->loop, &r.done);
  ck_assert_int_eq(r.done, 1);
  if (out != NULL)
    *out = r.body;
  else
    free(r.body);
  return r.status;
}

static const char *pod_phase(const char *body, char *out, size_t cap) {
  json_t *j = json_loads(body, 0, NULL);
  const char *p = json_string_value(json_object_get(json_object_get(j, "status"), "phase"));

  snprintf(out, cap, "%s", p ? p : "");
  json_decref(j);
  return out;
}

/* Creates pod <name> (with <node_selector> JSON or NULL) and, if
 * <wait_running>, waits until it is Running. */
static void create_pod(struct ctx *t, const char *name, const char *node_selector,
                       int wait_running) {
  char body[512], path[128], phase[32];
  struct timespec ts = {0, 20 * 1000 * 1000};
  int i;

  snprintf(body, sizeof(body),
           "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"%s\"},"
           "\"spec\":{%s%s\"containers\":[{\"name\":\"main\",\"image\":\"python:3\"}]}}",
           name, node_selector ? "\"nodeSelector\":" : "", node_selector ? node_selector : "");
  ck_assert_int_eq(rest(t, "POST", "/api/v1/namespaces/default/pods", body, NULL), 201);
  if (!wait_running)
    return;
  snprintf(path, sizeof(path), "/api/v1/namespaces/default/pods/%s", name);
  for (i = 0; i < 500; i++) {
    char *resp = NULL;
    ck_assert_int_eq(rest(t, "GET", path, NULL, &resp), 200);
    pod_phase(resp, phase, sizeof(phase));
    free(resp);
    if (strcmp(phase, "Running") == 0)
      return;
    nanosleep(&ts, NULL);
  }
  ck_abort_msg("pod %s never became Running (phase %s)", name, phase);
}

/* Starts both simulators and creates the pods every test uses. */
static void suite_setup(void) {
  struct sim *sims[2] = {&sim_tls, &sim_plain};

  for (int i = 0; i < 2; i++) {
    struct ctx t;
    sim_start(sims[i]);
    ctx_open(&t, sims[i]);
    create_pod(&t, "p1", NULL, 1);
    if (sims[i]->tls)
      create_pod(&t, "pending", "{\"no-such-label\":\"x\"},", 0);
    ctx_close(&t);
  }
}

static void suite_teardown(void) {
  sim_stop(&sim_tls);
  sim_stop(&sim_plain);
}

/* ---- exec ---- */

struct xres {
  int calls;
  int error, http_status, exit_code, timed_out, out_truncated, err_truncated;
  char *out, *err, *message;
  size_t out_len, err_len;
  char protocol[32];
  double duration_ms;
  /* what to do inside the callback */
  struct fr_kube_call *cancel_in_cb;
  struct fr_kube_client *free_in_cb;
  int freed;
};

static void on_exec(const struct fr_kube_exec_result *r, void *arg) {
  struct xres *x = arg;

  x->calls++;
  x->error = r->error;
  x->http_status = r->http_status;
  x->exit_code = r->exit_code;
  x->timed_out = r->timed_out;
  x->out_truncated = r->out_truncated;
  x->err_truncated = r->err_truncated;
  ck_assert_ptr_nonnull(r->out);
  ck_assert_ptr_nonnull(r->err);
  ck_assert_int_eq(r->out[r->out_len], '\0');
  ck_assert_int_eq(r->err[r->err_len], '\0');
  x->out = malloc(r->out_len + 1);
  memcpy(x->out, r->out, r->out_len + 1);
  x->out_len = r->out_len;
  x->err = malloc(r->err_len + 1);
  memcpy(x->err, r->err, r->err_len + 1);
  x->err_len = r->err_len;
  x->message = r->message ? strdup(r->message) : NULL;
  snprintf(x->protocol, sizeof(x->protocol), "%s", r->protocol ? r->protocol : "");
  x->duration_ms = r->duration_ms;
  if (x->cancel_in_cb != NULL)
    fr_kube_cancel(x->cancel_in_cb);
  if (x->free_in_cb != NULL)
    fr_kube_client_free(x->free_in_cb, on_client_freed, &x->freed);
}

static void xres_free(struct xres *x) {
  free(x->out);
  free(x->err);
  free(x->message);
}

static struct fr_kube_exec_opts opts_for(char *const *argv) {
  struct fr_kube_exec_opts o;

  memset(&o, 0, sizeof(o));
  o.argv = argv;
  o.max_stdout = 1 << 20;
  o.max_stderr = 1 << 20;
  o.timeout_ms = 20000;
  return o;
}

/* Runs one exec to completion. The callback must not have run by the time
 * fr_kube_exec() returns. */
static void run_exec(struct ctx *t, const char *pod, const struct fr_kube_exec_opts *o,
                     struct xres *x) {
  memset(x, 0, sizeof(*x));
  ck_assert_int_eq(fr_kube_exec(t->c, "default", pod, o, on_exec, x, NULL), 0);
  ck_assert_int_eq(x->calls, 0);
  fr_test_run_until(&t->loop, &x->calls);
  ck_assert_int_eq(x->calls, 1);
}

START_TEST(exec_python_print_returns_output_and_exit_0) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("python3", "-c", "print(2+2)"));

  ctx_open(&t, &sim_tls);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, 0);
  ck_assert_ptr_null(x.message);
  ck_assert_int_eq(x.http_status, 0);
  ck_assert_int_eq(x.exit_code, 0);
  ck_assert_int_eq(x.timed_out, 0);
  ck_assert_str_eq(x.out, "4\n");
  ck_assert_uint_eq(x.out_len, 2);
  ck_assert_uint_eq(x.err_len, 0);
  ck_assert_int_eq(x.out_truncated, 0);
  ck_assert_str_eq(x.protocol, "v5.channel.k8s.io");
  ck_assert(x.duration_ms > 0);
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_nonzero_exit_keeps_streams_apart) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o =
      opts_for(ARGV("sh", "-c", "echo out; echo err >&2; echo more; exit 3"));

  ctx_open(&t, &sim_tls);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, 0);
  ck_assert_ptr_null(x.message);
  ck_assert_int_eq(x.exit_code, 3);
  ck_assert_str_eq(x.out, "out\nmore\n");
  ck_assert_str_eq(x.err, "err\n");
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_argv_with_special_characters_arrives_intact) {
  struct ctx t;
  struct xres x;
  /* Every argument must be percent-encoded in the query. */
  struct fr_kube_exec_opts o = opts_for(
      ARGV("printf", "%s|", "a b&c=d", "100%", "caf\xc3\xa9", "+x/?#", ""));

  ctx_open(&t, &sim_tls);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.exit_code, 0);
  ck_assert_str_eq(x.out, "a b&c=d|100%|caf\xc3\xa9|+x/?#||");
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_stdin_reaches_cat) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("cat"));

  o.stdin_data = "hello";
  o.stdin_len = 5;
  ctx_open(&t, &sim_tls);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.exit_code, 0);
  ck_assert_str_eq(x.out, "hello");
  ck_assert_uint_eq(x.out_len, 5);
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_empty_stdin_is_closed_at_once) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("wc", "-c"));

  o.stdin_data = "";
  o.stdin_len = 0;
  ctx_open(&t, &sim_tls);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.exit_code, 0);
  ck_assert_str_eq(x.out, "0\n");
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

/* 3 MiB of every byte value through cat: several 1 MiB stdin frames, and
 * binary output that must come back exactly. */
START_TEST(exec_large_binary_stdin_round_trips) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("cat"));
  size_t n = 3 * 1024 * 1024 + 17;
  unsigned char *data = malloc(n);

  for (size_t i = 0; i < n; i++)
    data[i] = (unsigned char)((i * 7 + i / 256) & 0xff);
  o.stdin_data = data;
  o.stdin_len = n;
  o.max_stdout = 4 * 1024 * 1024;
  ctx_open(&t, &sim_tls);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.exit_code, 0);
  ck_assert_uint_eq(x.out_len, n);
  ck_assert_int_eq(x.out_truncated, 0);
  ck_assert(memcmp(x.out, data, n) == 0);
  free(data);
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_binary_output_is_preserved) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV(
      "python3", "-c",
      "import sys; sys.stdout.buffer.write(bytes(range(256))*4); "
      "sys.stderr.buffer.write(bytes(range(255,-1,-1)))"));
  unsigned char expect[256];

  ctx_open(&t, &sim_tls);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.exit_code, 0);
  ck_assert_uint_eq(x.out_len, 1024);
  for (size_t i = 0; i < 1024; i++)
    ck_assert_uint_eq((unsigned char)x.out[i], i % 256);
  for (int i = 0; i < 256; i++)
    expect[i] = (unsigned char)(255 - i);
  ck_assert_uint_eq(x.err_len, 256);
  ck_assert_mem_eq(x.err, expect, 256);
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_output_over_cap_is_truncated) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("head", "-c", "100000", "/dev/zero"));
  char zeros[1000];

  o.max_stdout = 1000;
  o.max_stderr = 10;
  ctx_open(&t, &sim_tls);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.exit_code, 0); /* the rest was read and dropped */
  ck_assert_uint_eq(x.out_len, 1000);
  ck_assert_int_eq(x.out_truncated, 1);
  ck_assert_int_eq(x.err_truncated, 0);
  memset(zeros, 0, sizeof(zeros));
  ck_assert_mem_eq(x.out, zeros, 1000);
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_stderr_over_cap_is_truncated) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("sh", "-c", "echo 0123456789 >&2; echo ok"));

  o.max_stderr = 4;
  ctx_open(&t, &sim_tls);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, 0);
  ck_assert_str_eq(x.err, "0123");
  ck_assert_int_eq(x.err_truncated, 1);
  ck_assert_str_eq(x.out, "ok\n");
  ck_assert_int_eq(x.out_truncated, 0);
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_past_timeout_is_timed_out) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("sh", "-c", "echo started; exec sleep 30"));

  o.timeout_ms = 500;
  ctx_open(&t, &sim_tls);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.timed_out, 1);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.exit_code, -1);
  ck_assert_ptr_nonnull(x.message);
  ck_assert_ptr_nonnull(strstr(x.message, "timed out"));
  ck_assert_str_eq(x.out, "started\n"); /* output so far is kept */
  /* Not the 30 s of the command (loose bound: sanitizers are slow). */
  ck_assert(x.duration_ms >= 450 && x.duration_ms < 10000);
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_missing_pod_is_404) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("true"));

  ctx_open(&t, &sim_tls);
  run_exec(&t, "no-such-pod", &o, &x);
  ck_assert_int_eq(x.error, -ENOENT);
  ck_assert_int_eq(x.http_status, 404);
  ck_assert_ptr_nonnull(x.message);
  ck_assert_ptr_nonnull(strstr(x.message, "not found"));
  ck_assert_int_eq(x.exit_code, -1);
  ck_assert_str_eq(x.protocol, "");
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_pending_pod_is_400) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("true"));

  ctx_open(&t, &sim_tls);
  run_exec(&t, "pending", &o, &x);
  ck_assert_int_eq(x.error, -EINVAL);
  ck_assert_int_eq(x.http_status, 400);
  ck_assert_ptr_nonnull(x.message);
  ck_assert_ptr_nonnull(strstr(x.message, "does not have a host assigned"));
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_bad_container_is_400) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("true"));

  o.container = "sidecar";
  ctx_open(&t, &sim_tls);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, -EINVAL);
  ck_assert_int_eq(x.http_status, 400);
  ck_assert_ptr_nonnull(strstr(x.message, "container sidecar is not valid"));
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_named_container_runs) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("sh", "-c", "echo $HOSTNAME"));

  o.container = "main";
  ctx_open(&t, &sim_tls);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, 0);
  ck_assert_str_eq(x.out, "p1\n");
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_missing_command_reports_the_failure) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("no-such-command", "x"));

  ctx_open(&t, &sim_tls);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, -EIO);
  ck_assert_int_eq(x.http_status, 0);
  ck_assert_int_eq(x.exit_code, -1);
  ck_assert_ptr_nonnull(x.message);
  ck_assert_ptr_nonnull(strstr(x.message, "\"no-such-command\": executable file not found"));
  ck_assert_str_eq(x.protocol, "v5.channel.k8s.io");
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_bad_token_is_401) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("true"));
  struct fr_kube_creds *creds = load_creds(&sim_tls);

  free(creds->token);
  creds->token = strdup("wrong-token");
  ctx_open_creds(&t, creds);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, -EACCES);
  ck_assert_int_eq(x.http_status, 401);
  ck_assert_ptr_nonnull(x.message);
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_untrusted_certificate_fails_to_connect) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("true"));
  struct fr_kube_creds *creds = load_creds(&sim_tls);

  /* The system roots do not know kubesim's self-signed certificate. */
  free(creds->ca_pem);
  creds->ca_pem = NULL;
  creds->ca_len = 0;
  ctx_open_creds(&t, creds);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, -ECONNREFUSED);
  ck_assert_int_eq(x.http_status, 0);
  ck_assert_ptr_nonnull(x.message);
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_closed_port_is_connection_refused) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("true"));
  struct fr_kube_creds *creds = load_creds(&sim_plain);
  uv_tcp_t probe;
  struct sockaddr_in sa;
  struct sockaddr_storage bound;
  int len = sizeof(bound);
  char server[64];

  /* A port that was just free: bind, read it back, close. */
  ck_assert_int_eq(uv_loop_init(&t.loop), 0);
  uv_tcp_init(&t.loop, &probe);
  uv_ip4_addr("127.0.0.1", 0, &sa);
  ck_assert_int_eq(uv_tcp_bind(&probe, (const struct sockaddr *)&sa, 0), 0);
  ck_assert_int_eq(uv_tcp_getsockname(&probe, (struct sockaddr *)&bound, &len), 0);
  snprintf(server, sizeof(server), "http://127.0.0.1:%d",
           ntohs(((struct sockaddr_in *)&bound)->sin_port));
  uv_close((uv_handle_t *)&probe, NULL);
  uv_run(&t.loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&t.loop), 0);

  free(creds->server);
  creds->server = strdup(server);
  ctx_open_creds(&t, creds);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, -ECONNREFUSED);
  ck_assert_int_eq(x.http_status, 0);
  ck_assert_ptr_nonnull(x.message);
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_over_plain_http_works) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("sh", "-c", "cat; echo err >&2; exit 7"));

  o.stdin_data = "plain";
  o.stdin_len = 5;
  ctx_open(&t, &sim_plain);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.exit_code, 7);
  ck_assert_str_eq(x.out, "plain");
  ck_assert_str_eq(x.err, "err\n");
  ck_assert_str_eq(x.protocol, "v5.channel.k8s.io");
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

/* A host name: curl resolves it (threaded resolver, its own socket) before
 * connecting; the certificate names localhost too. */
START_TEST(exec_by_host_name_resolves_and_verifies) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("echo", "named"));
  struct fr_kube_creds *creds = load_creds(&sim_tls);
  const char *port = strrchr(creds->server, ':');
  char server[64];

  ck_assert_ptr_nonnull(port);
  snprintf(server, sizeof(server), "https://localhost%s", port);
  free(creds->server);
  creds->server = strdup(server);
  ctx_open_creds(&t, creds);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, 0);
  ck_assert_str_eq(x.out, "named\n");
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_over_plain_http_missing_pod_is_404) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("true"));

  ctx_open(&t, &sim_plain);
  run_exec(&t, "nope", &o, &x);
  ck_assert_int_eq(x.error, -ENOENT);
  ck_assert_int_eq(x.http_status, 404);
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

START_TEST(exec_bad_arguments_fail_without_callback) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("true"));
  char *const empty[] = {NULL};

  memset(&x, 0, sizeof(x));
  ctx_open(&t, &sim_tls);
  ck_assert_int_eq(fr_kube_exec(t.c, "default", "", &o, on_exec, &x, NULL), -EINVAL);
  o.argv = empty;
  ck_assert_int_eq(fr_kube_exec(t.c, "default", "p1", &o, on_exec, &x, NULL), -EINVAL);
  uv_run(&t.loop, UV_RUN_NOWAIT);
  ck_assert_int_eq(x.calls, 0);
  ctx_close(&t);
}
END_TEST

/* ---- a scripted API server, for what kubesim never does ---- */

/* One connection on loopback: reads the upgrade request, answers with the
 * bytes of <mode>, then records the client's frames until EOF. */
struct fake {
  uv_tcp_t srv, conn;
  int port;
  const char *mode;
  struct fr_buf in;
  int responded;
  int waiting;          /* the script waits for the client's stdin */
  int open_handles;
  struct fr_ws_reader rd;
  /* what the client sent */
  char *head;
  struct fr_buf stdin_data;
  int stdin_frames, stdin_close, pongs, closes;
  char pong[16];
};

static void fake_frame(struct fr_buf *b, int fin, int opcode, int channel, const void *data,
                       size_t len) {
  uint8_t hdr[FR_WS_MAX_HEADER];
  size_t hl = fr_ws_write_header(hdr, fin, opcode, len + (channel >= 0 ? 1 : 0), NULL);

  fr_buf_append(b, hdr, hl);
  if (channel >= 0)
    fr_buf_putc(b, (char)channel);
  fr_buf_append(b, data, len);
}

static void fake_status(struct fr_buf *b, const char *json) {
  fake_frame(b, 1, FR_WS_OP_BINARY, 3, json, strlen(json));
}

static void fake_close_frame(struct fr_buf *b) {
  static const uint8_t normal[2] = {0x03, 0xe8};
  fake_frame(b, 1, FR_WS_OP_CLOSE, -1, normal, 2);
}

static void fake_on_close(uv_handle_t *h) {
  struct fake *f = h->data;
  f->open_handles--;
}

static void fake_on_written(uv_write_t *w, int status) {
  (void)status;
  free(w->data);
  free(w);
}

static void fake_write(struct fake *f, const struct fr_buf *b) {
  uv_write_t *w;
  char *copy;
  uv_buf_t buf;

  if (b->len == 0)
    return;
  w = malloc(sizeof(*w));
  copy = malloc(b->len);
  memcpy(copy, b->data, b->len);
  buf = uv_buf_init(copy, (unsigned)b->len);
  w->data = copy;
  ck_assert_int_eq(uv_write(w, (uv_stream_t *)&f->conn, &buf, 1, fake_on_written), 0);
}

static void fake_on_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  free(req);
}

static void fake_script(struct fake *f);

static int fake_on_client_frame(void *arg, int opcode, const uint8_t *data, size_t len) {
  struct fake *f = arg;

  if (opcode == FR_WS_OP_PONG) {
    f->pongs++;
    snprintf(f->pong, sizeof(f->pong), "%.*s", (int)len, (const char *)data);
  } else if (opcode == FR_WS_OP_CLOSE) {
    f->closes++;
  } else if (opcode == FR_WS_OP_BINARY && len >= 1 && data[0] == 0) {
    f->stdin_frames++;
    fr_buf_append(&f->stdin_data, data + 1, len - 1);
  } else if (opcode == FR_WS_OP_BINARY && len == 2 && data[0] == 0xff && data[1] == 0) {
    f->stdin_close++;
  }
  if (f->waiting && ((strcmp(f->mode, "v4") == 0 && f->stdin_data.len >= 3) || f->stdin_close)) {
    f->waiting = 0;
    fake_script(f);
  }
  return 0;
}

static void fake_respond(struct fake *f) {
  const char *key = strstr(f->head, "Sec-WebSocket-Key: ");
  char k[25], accept[29];
  struct fr_buf b;
  const char *proto = strcmp(f->mode, "v4") == 0 ? "v4.channel.k8s.io" : "v5.channel.k8s.io";

  ck_assert_ptr_nonnull(key);
  memcpy(k, key + 19, 24);
  k[24] = '\0';
  fr_ws_accept_key(k, accept);
  if (strcmp(f->mode, "badaccept") == 0)
    accept[0] = accept[0] == 'A' ? 'B' : 'A';
  fr_buf_init(&b);
  if (strcmp(f->mode, "status003") == 0) {
    fr_buf_puts(&b, "HTTP/1.1 003 Forbidden\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
    fake_write(f, &b);
    fr_buf_free(&b);
    return;
  }
  if (strcmp(f->mode, "chunked500") == 0) {
    static const char body[] =
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
        "\"message\":\"etcdserver: request timed out\",\"reason\":\"InternalError\",\"code\":500}";
    fr_buf_printf(&b, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n%zx\r\n%.20s\r\n%zx\r\n%s\r\n0\r\n\r\n",
                  (size_t)20, body, strlen(body) - 20, body + 20);
    fake_write(f, &b);
    fr_buf_free(&b);
    return;
  }
  fr_buf_printf(&b, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                    "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n", accept);
  if (strcmp(f->mode, "noproto") != 0)
    fr_buf_printf(&b, "Sec-WebSocket-Protocol: %s\r\n", proto);
  fr_buf_puts(&b, "\r\n");
  fake_write(f, &b);
  fr_buf_free(&b);
  /* "v4" and "v5stdin" answer once the client's stdin is complete. */
  f->waiting = strcmp(f->mode, "v4") == 0 || strcmp(f->mode, "v5stdin") == 0;
  if (!f->waiting)
    fake_script(f);
}

/* The frames of <mode> after the 101. */
static void fake_script(struct fake *f) {
  struct fr_buf b;

  fr_buf_init(&b);
  if (strcmp(f->mode, "v4") == 0) {
    fake_frame(&b, 1, FR_WS_OP_BINARY, 1, "v4 out", 6);
    fake_status(&b, "{\"metadata\":{},\"status\":\"Success\"}");
    fake_close_frame(&b);
  } else if (strcmp(f->mode, "fragments") == 0 || strcmp(f->mode, "v5stdin") == 0) {
    /* stdout in three fragments with a ping between them, an unknown
     * channel, and the Status split over two channel-3 messages. */
    static const char st[] =
        "{\"metadata\":{},\"status\":\"Failure\",\"message\":\"command terminated with non-zero "
        "exit code: exit status 42\",\"reason\":\"NonZeroExitCode\",\"details\":{\"causes\":"
        "[{\"reason\":\"ExitCode\",\"message\":\"42\"}]}}";
    uint8_t first[4] = {1, 'a', 'b', 'c'};
    fake_frame(&b, 0, FR_WS_OP_BINARY, -1, first, 4);
    fake_frame(&b, 1, FR_WS_OP_PING, -1, "hi", 2);
    fake_frame(&b, 0, FR_WS_OP_CONT, -1, "def", 3);
    fake_frame(&b, 1, FR_WS_OP_CONT, -1, "ghi", 3);
    fake_frame(&b, 1, FR_WS_OP_BINARY, 9, "ignored", 7);
    fake_frame(&b, 1, FR_WS_OP_BINARY, 3, st, 30);
    fake_frame(&b, 1, FR_WS_OP_BINARY, 3, st + 30, strlen(st) - 30);
    fake_close_frame(&b);
  } else if (strcmp(f->mode, "text") == 0) {
    fake_frame(&b, 1, FR_WS_OP_TEXT, -1, "hello", 5);
  } else if (strcmp(f->mode, "eof") == 0) {
    fake_frame(&b, 1, FR_WS_OP_BINARY, 1, "partial", 7);
  } else if (strcmp(f->mode, "noclose") == 0) {
    fake_status(&b, "{\"metadata\":{},\"status\":\"Success\"}");
  } else if (strcmp(f->mode, "badstatus") == 0) {
    fake_status(&b, "{\"metadata\":{},\"status\":\"Maybe\"}");
    fake_close_frame(&b);
  }
  fake_write(f, &b);
  fr_buf_free(&b);
  if (strcmp(f->mode, "eof") == 0) {
    uv_shutdown_t *sd = malloc(sizeof(*sd));
    ck_assert_int_eq(uv_shutdown(sd, (uv_stream_t *)&f->conn, fake_on_shutdown), 0);
  }
}

static void fake_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  (void)h;
  buf->base = malloc(hint);
  buf->len = hint;
}

static void fake_on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  struct fake *f = s->data;

  if (n < 0) {
    free(buf->base);
    uv_close((uv_handle_t *)&f->conn, fake_on_close);
    uv_close((uv_handle_t *)&f->srv, fake_on_close);
    return;
  }
  if (strcmp(f->mode, "silent") == 0) {
    /* Accepts and reads, never answers: a TLS handshake hangs. */
  } else if (!f->responded) {
    char *end;
    fr_buf_append(&f->in, buf->base, (size_t)n);
    end = strstr(f->in.data, "\r\n\r\n");
    if (end != NULL) {
      size_t hl = (size_t)(end - f->in.data) + 4;
      f->head = strndup(f->in.data, hl);
      f->responded = 1;
      fake_respond(f);
      fr_ws_reader_feed(&f->rd, (const uint8_t *)f->in.data + hl, f->in.len - hl,
                        fake_on_client_frame, f);
    }
  } else {
    fr_ws_reader_feed(&f->rd, (const uint8_t *)buf->base, (size_t)n, fake_on_client_frame, f);
  }
  free(buf->base);
}

static void fake_on_connection(uv_stream_t *srv, int status) {
  struct fake *f = srv->data;

  ck_assert_int_eq(status, 0);
  uv_tcp_init(srv->loop, &f->conn);
  f->conn.data = f;
  f->open_handles++;
  ck_assert_int_eq(uv_accept(srv, (uv_stream_t *)&f->conn), 0);
  uv_read_start((uv_stream_t *)&f->conn, fake_alloc, fake_on_read);
}

static void fake_start(struct fake *f, uv_loop_t *loop, const char *mode) {
  struct sockaddr_in sa;
  struct sockaddr_storage bound;
  int len = sizeof(bound);

  memset(f, 0, sizeof(*f));
  f->mode = mode;
  fr_buf_init(&f->in);
  fr_buf_init(&f->stdin_data);
  fr_ws_reader_init(&f->rd, 1, 0);
  uv_tcp_init(loop, &f->srv);
  f->srv.data = f;
  f->open_handles = 1;
  uv_ip4_addr("127.0.0.1", 0, &sa);
  ck_assert_int_eq(uv_tcp_bind(&f->srv, (const struct sockaddr *)&sa, 0), 0);
  ck_assert_int_eq(uv_listen((uv_stream_t *)&f->srv, 8, fake_on_connection), 0);
  ck_assert_int_eq(uv_tcp_getsockname(&f->srv, (struct sockaddr *)&bound, &len), 0);
  f->port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
}

static void fake_free(struct fake *f) {
  fr_buf_free(&f->in);
  fr_buf_free(&f->stdin_data);
  fr_ws_reader_free(&f->rd);
  free(f->head);
}

/* A client of <f>, with a bearer token; <scheme> "http" or "https". */
static void ctx_open_fake_opts(struct ctx *t, struct fake *f, const char *mode,
                               const char *scheme, const struct fr_kube_client_opts *opts) {
  struct fr_kube_creds *creds = calloc(1, sizeof(*creds));
  char server[64];

  ck_assert_int_eq(uv_loop_init(&t->loop), 0);
  fake_start(f, &t->loop, mode);
  snprintf(server, sizeof(server), "%s://127.0.0.1:%d", scheme, f->port);
  creds->server = strdup(server);
  creds->token = strdup("fake-token");
  t->creds = creds;
  ck_assert_int_eq(fr_kube_client_new(&t->loop, t->creds, opts, &t->c), 0);
}

static void ctx_open_fake(struct ctx *t, struct fake *f, const char *mode) {
  ctx_open_fake_opts(t, f, mode, "http", NULL);
}

static void ctx_close_fake(struct ctx *t, struct fake *f) {
  ctx_close(t);
  ck_assert_int_eq(f->open_handles, 0);
  fake_free(f);
}

START_TEST(exec_request_head_carries_upgrade_auth_and_escaped_argv) {
  struct ctx t;
  struct fake f;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("echo", "a b", "x&y=z"));
  static const char want[] =
      "GET /api/v1/namespaces/default/pods/p1/exec?command=echo&command=a%20b&"
      "command=x%26y%3Dz&container=c%201&stdin=true&stdout=true&stderr=true HTTP/1.1\r\n";
  char host[64];

  o.container = "c 1";
  o.request_id = "rid-42";
  o.stdin_data = "abc";
  o.stdin_len = 3;
  ctx_open_fake(&t, &f, "v4");
  run_exec(&t, "p1", &o, &x);
  ck_assert_ptr_nonnull(f.head);
  ck_assert_msg(strncmp(f.head, want, strlen(want)) == 0, "%s", f.head);
  snprintf(host, sizeof(host), "\r\nHost: 127.0.0.1:%d\r\n", f.port);
  ck_assert_ptr_nonnull(strstr(f.head, host));
  ck_assert_ptr_nonnull(strstr(f.head, "\r\nUpgrade: websocket\r\n"));
  ck_assert_ptr_nonnull(strstr(f.head, "\r\nConnection: Upgrade\r\n"));
  ck_assert_ptr_nonnull(strstr(f.head, "\r\nSec-WebSocket-Version: 13\r\n"));
  ck_assert_ptr_nonnull(
      strstr(f.head, "\r\nSec-WebSocket-Protocol: v5.channel.k8s.io, v4.channel.k8s.io\r\n"));
  ck_assert_ptr_nonnull(strstr(f.head, "\r\nAuthorization: Bearer fake-token\r\n"));
  ck_assert_ptr_nonnull(strstr(f.head, "\r\nX-Request-Id: rid-42\r\n"));
  /* v4 was chosen: output and Status as usual, stdin sent but no v5 close
   * signal (v4 has none). */
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.exit_code, 0);
  ck_assert_str_eq(x.protocol, "v4.channel.k8s.io");
  ck_assert_str_eq(x.out, "v4 out");
  ck_assert_int_eq(f.stdin_frames, 1);
  ck_assert_uint_eq(f.stdin_data.len, 3);
  ck_assert_mem_eq(f.stdin_data.data, "abc", 3);
  ck_assert_int_eq(f.stdin_close, 0);
  xres_free(&x);
  ctx_close_fake(&t, &f);
}
END_TEST

START_TEST(exec_fragments_pings_and_split_status_are_handled) {
  struct ctx t;
  struct fake f;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("x"));

  ctx_open_fake(&t, &f, "fragments");
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.exit_code, 42);
  ck_assert_str_eq(x.out, "abcdefghi");
  ck_assert_str_eq(x.protocol, "v5.channel.k8s.io");
  ck_assert_int_eq(f.stdin_frames, 0); /* no stdin asked for */
  /* Run the loop until the fake has seen the client go. */
  uv_run(&t.loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(f.pongs, 1);
  ck_assert_str_eq(f.pong, "hi");
  ck_assert_int_eq(f.closes, 1); /* the server's close was answered */
  ck_assert_ptr_null(strstr(f.head, "stdin="));
  xres_free(&x);
  ctx_close_fake(&t, &f);
}
END_TEST

START_TEST(exec_v5_sends_stdin_close_signal) {
  struct ctx t;
  struct fake f;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("cat"));

  o.stdin_data = "in";
  o.stdin_len = 2;
  ctx_open_fake(&t, &f, "v5stdin");
  run_exec(&t, "p1", &o, &x);
  uv_run(&t.loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.exit_code, 42);
  ck_assert_int_eq(f.stdin_frames, 1);
  ck_assert_uint_eq(f.stdin_data.len, 2);
  ck_assert_mem_eq(f.stdin_data.data, "in", 2);
  ck_assert_int_eq(f.stdin_close, 1);
  xres_free(&x);
  ctx_close_fake(&t, &f);
}
END_TEST

START_TEST(exec_refused_with_chunked_500_reports_status_message) {
  struct ctx t;
  struct fake f;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("x"));

  ctx_open_fake(&t, &f, "chunked500");
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, -EPROTO);
  ck_assert_int_eq(x.http_status, 500);
  ck_assert_ptr_nonnull(x.message);
  ck_assert_str_eq(x.message, "etcdserver: request timed out");
  xres_free(&x);
  ctx_close_fake(&t, &f);
}
END_TEST

/* Found by fuzz_kube: a status outside 100-599 was reported as a refusal
 * with that status (http_status 3). */
START_TEST(exec_status_code_outside_100_599_is_malformed) {
  struct ctx t;
  struct fake f;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("x"));

  ctx_open_fake(&t, &f, "status003");
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, -EPROTO);
  ck_assert_int_eq(x.http_status, 0);
  ck_assert_ptr_nonnull(x.message);
  ck_assert_ptr_nonnull(strstr(x.message, "malformed HTTP response"));
  xres_free(&x);
  ctx_close_fake(&t, &f);
}
END_TEST

START_TEST(exec_wrong_accept_key_is_protocol_error) {
  struct ctx t;
  struct fake f;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("x"));

  ctx_open_fake(&t, &f, "badaccept");
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, -EPROTO);
  ck_assert_ptr_nonnull(strstr(x.message, "Sec-WebSocket-Accept"));
  xres_free(&x);
  ctx_close_fake(&t, &f);
}
END_TEST

START_TEST(exec_no_subprotocol_is_protocol_error) {
  struct ctx t;
  struct fake f;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("x"));

  ctx_open_fake(&t, &f, "noproto");
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, -EPROTO);
  ck_assert_ptr_nonnull(strstr(x.message, "v5.channel.k8s.io"));
  xres_free(&x);
  ctx_close_fake(&t, &f);
}
END_TEST

START_TEST(exec_text_frame_is_protocol_error) {
  struct ctx t;
  struct fake f;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("x"));

  ctx_open_fake(&t, &f, "text");
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, -EPROTO);
  ck_assert_ptr_nonnull(strstr(x.message, "text frame"));
  xres_free(&x);
  ctx_close_fake(&t, &f);
}
END_TEST

START_TEST(exec_eof_before_status_is_connection_reset) {
  struct ctx t;
  struct fake f;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("x"));

  ctx_open_fake(&t, &f, "eof");
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, -ECONNRESET);
  ck_assert_str_eq(x.out, "partial"); /* what came is kept */
  ck_assert_int_eq(x.exit_code, -1);
  xres_free(&x);
  ctx_close_fake(&t, &f);
}
END_TEST

START_TEST(exec_status_without_close_frame_still_completes) {
  struct ctx t;
  struct fake f;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("x"));

  ctx_open_fake(&t, &f, "noclose");
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.timed_out, 0);
  ck_assert_int_eq(x.exit_code, 0);
  xres_free(&x);
  ctx_close_fake(&t, &f);
}
END_TEST

START_TEST(exec_unknown_status_is_protocol_error) {
  struct ctx t;
  struct fake f;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("x"));

  ctx_open_fake(&t, &f, "badstatus");
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, -EPROTO);
  xres_free(&x);
  ctx_close_fake(&t, &f);
}
END_TEST

START_TEST(exec_tls_handshake_past_connect_timeout_is_etimedout) {
  struct ctx t;
  struct fake f;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("x"));
  struct fr_kube_client_opts co;

  memset(&co, 0, sizeof(co));
  co.connect_timeout_ms = 300;
  ctx_open_fake_opts(&t, &f, "silent", "https", &co);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.error, -ETIMEDOUT);
  ck_assert_int_eq(x.timed_out, 0); /* the connect timed out, not the exec */
  ck_assert_int_eq(x.http_status, 0);
  ck_assert_ptr_nonnull(x.message);
  xres_free(&x);
  ctx_close_fake(&t, &f);
}
END_TEST

START_TEST(exec_timeout_while_connecting_is_timed_out) {
  struct ctx t;
  struct fake f;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("x"));

  o.timeout_ms = 300;
  ctx_open_fake_opts(&t, &f, "silent", "https", NULL);
  run_exec(&t, "p1", &o, &x);
  ck_assert_int_eq(x.timed_out, 1);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.exit_code, -1);
  ck_assert_str_eq(x.protocol, "");
  xres_free(&x);
  ctx_close_fake(&t, &f);
}
END_TEST

static void on_exec_never_fake(const struct fr_kube_exec_result *r, void *arg) {
  (void)r;
  (void)arg;
  ck_abort_msg("cancelled exec called back while connecting");
}

static void on_cancel_connecting(uv_timer_t *timer) {
  struct fr_kube_call *call = timer->data;

  fr_kube_cancel(call);
  uv_close((uv_handle_t *)timer, NULL);
}

START_TEST(exec_cancel_while_connecting_never_calls_back) {
  struct ctx t;
  struct fake f;
  struct fr_kube_call *call = NULL;
  uv_timer_t timer;
  struct fr_kube_exec_opts o = opts_for(ARGV("x"));

  ctx_open_fake_opts(&t, &f, "silent", "https", NULL);
  ck_assert_int_eq(fr_kube_exec(t.c, "default", "p1", &o, on_exec_never_fake, NULL, &call), 0);
  uv_timer_init(&t.loop, &timer);
  timer.data = call;
  uv_timer_start(&timer, on_cancel_connecting, 200, 0);
  uv_run(&t.loop, UV_RUN_DEFAULT); /* ends once the fake sees the client go */
  ck_assert_int_eq(f.open_handles, 0);
  ctx_close_fake(&t, &f);
}
END_TEST

/* ---- cancellation ---- */

static void on_exec_never(const struct fr_kube_exec_result *r, void *arg) {
  (void)r;
  ck_abort_msg("cancelled exec called back (%s)", (const char *)arg);
}

START_TEST(exec_cancel_right_after_start_never_calls_back) {
  struct ctx t;
  struct fr_kube_call *call = NULL;
  struct fr_kube_exec_opts o = opts_for(ARGV("true"));

  ctx_open(&t, &sim_tls);
  ck_assert_int_eq(fr_kube_exec(t.c, "default", "p1", &o, on_exec_never, "immediate", &call), 0);
  ck_assert_ptr_nonnull(call);
  fr_kube_cancel(call);
  uv_run(&t.loop, UV_RUN_DEFAULT); /* everything it opened closes */
  ctx_close(&t);
}
END_TEST

struct cancel_later {
  uv_timer_t timer;
  struct fr_kube_call *call;
  int fired;
};

static void on_cancel_timer(uv_timer_t *timer) {
  struct cancel_later *cl = timer->data;

  cl->fired = 1;
  fr_kube_cancel(cl->call);
  uv_close((uv_handle_t *)timer, NULL);
}

START_TEST(exec_cancel_while_streaming_never_calls_back) {
  struct ctx t;
  struct cancel_later cl;
  struct fr_kube_exec_opts o = opts_for(ARGV("sleep", "30"));

  o.stdin_data = "x"; /* stdin still open: v5 half-close sent, sleep ignores it */
  o.stdin_len = 1;
  memset(&cl, 0, sizeof(cl));
  ctx_open(&t, &sim_tls);
  ck_assert_int_eq(fr_kube_exec(t.c, "default", "p1", &o, on_exec_never, "streaming", &cl.call),
                   0);
  uv_timer_init(&t.loop, &cl.timer);
  cl.timer.data = &cl;
  uv_timer_start(&cl.timer, on_cancel_timer, 300, 0);
  uv_run(&t.loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(cl.fired, 1);
  ctx_close(&t);
}
END_TEST

/* One exec's callback cancels another exec that is still running. */
START_TEST(exec_cancel_from_another_callback) {
  struct ctx t;
  struct xres quick;
  struct fr_kube_call *slow = NULL;
  struct fr_kube_exec_opts o_slow = opts_for(ARGV("sleep", "30"));
  struct fr_kube_exec_opts o_quick = opts_for(ARGV("echo", "quick"));

  memset(&quick, 0, sizeof(quick));
  ctx_open(&t, &sim_tls);
  ck_assert_int_eq(fr_kube_exec(t.c, "default", "p1", &o_slow, on_exec_never, "slow", &slow),
                   0);
  quick.cancel_in_cb = slow;
  ck_assert_int_eq(fr_kube_exec(t.c, "default", "p1", &o_quick, on_exec, &quick, NULL), 0);
  uv_run(&t.loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(quick.calls, 1);
  ck_assert_int_eq(quick.error, 0);
  ck_assert_str_eq(quick.out, "quick\n");
  xres_free(&quick);
  ctx_close(&t);
}
END_TEST

static void on_stop_timer(uv_timer_t *timer) {
  uv_stop(timer->loop);
}

/* An exec may cancel itself from its own callback: nothing happens. */
START_TEST(exec_cancel_inside_own_callback_is_harmless) {
  struct ctx t;
  struct xres x;
  struct fr_kube_call *self = NULL;
  struct fr_kube_exec_opts o = opts_for(ARGV("echo", "self"));

  memset(&x, 0, sizeof(x));
  ctx_open(&t, &sim_tls);
  ck_assert_int_eq(fr_kube_exec(t.c, "default", "p1", &o, on_exec, &x, &self), 0);
  x.cancel_in_cb = self;
  uv_run(&t.loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(x.calls, 1);
  ck_assert_str_eq(x.out, "self\n");
  xres_free(&x);
  ctx_close(&t);
}
END_TEST

/* The callback may free the whole client (and another exec with it). */
START_TEST(exec_client_free_inside_callback_is_safe) {
  struct ctx t;
  struct xres x;
  struct fr_kube_exec_opts o = opts_for(ARGV("echo", "bye"));
  struct fr_kube_exec_opts o_slow = opts_for(ARGV("sleep", "30"));

  memset(&x, 0, sizeof(x));
  ctx_open(&t, &sim_tls);
  ck_assert_int_eq(fr_kube_exec(t.c, "default", "p1", &o_slow, on_exec_never, "freed", NULL), 0);
  ck_assert_int_eq(fr_kube_exec(t.c, "default", "p1", &o, on_exec, &x, NULL), 0);
  x.free_in_cb = t.c;
  uv_run(&t.loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(x.calls, 1);
  ck_assert_str_eq(x.out, "bye\n");
  ck_assert_int_eq(x.freed, 1);
  ck_assert_int_eq(uv_loop_close(&t.loop), 0);
  fr_kube_creds_free(t.creds);
  xres_free(&x);
}
END_TEST

/* Freeing the client cancels its execs: no callback, nothing left open. */
START_TEST(exec_client_free_cancels_running_exec) {
  struct ctx t;
  uv_timer_t timer;
  struct fr_kube_exec_opts o = opts_for(ARGV("sleep", "30"));

  ctx_open(&t, &sim_tls);
  ck_assert_int_eq(fr_kube_exec(t.c, "default", "p1", &o, on_exec_never, "client free", NULL),
                   0);
  /* Let it connect and start streaming, then free the client. */
  uv_timer_init(&t.loop, &timer);
  uv_timer_start(&timer, on_stop_timer, 300, 0);
  uv_run(&t.loop, UV_RUN_DEFAULT);
  uv_close((uv_handle_t *)&timer, NULL);
  ctx_close(&t);
}
END_TEST

/* Many at once on one client: each gets its own output. */
START_TEST(exec_concurrent_execs_stay_separate) {
  struct ctx t;
  enum { N = 8 };
  struct xres x[N];
  char arg[N][48];
  struct fr_kube_exec_opts o[N];

  ctx_open(&t, &sim_tls);
  for (int i = 0; i < N; i++) {
    snprintf(arg[i], sizeof(arg[i]), "echo n%d; exit %d", i, i);
    memset(&x[i], 0, sizeof(x[i]));
    o[i] = opts_for((char *const[]){"sh", "-c", arg[i], NULL});
    /* argv must stay valid only for the call */
    ck_assert_int_eq(fr_kube_exec(t.c, "default", "p1", &o[i], on_exec, &x[i], NULL), 0);
  }
  uv_run(&t.loop, UV_RUN_DEFAULT);
  for (int i = 0; i < N; i++) {
    char expect[16];
    snprintf(expect, sizeof(expect), "n%d\n", i);
    ck_assert_int_eq(x[i].calls, 1);
    ck_assert_int_eq(x[i].error, 0);
    ck_assert_int_eq(x[i].exit_code, i);
    ck_assert_str_eq(x[i].out, expect);
    xres_free(&x[i]);
  }
  ctx_close(&t);
}
END_TEST

/* ---- a large output is read a bounded piece per loop turn ---- */

struct turns {
  struct fr_exec_budget budget;
  size_t last, max_step;
  int stalled;
  struct xres x;
  char *taken;               /* the output, taken over in the callback */
  size_t taken_len;
};

/* Runs once per loop turn, after the poll: how much output the exec
 * buffered since the previous turn. The first time output shows up, the
 * loop stalls 300 ms so the simulator fills the socket and TLS buffers:
 * the reader must still take it a piece per turn. */
static void on_turn_check(uv_check_t *h) {
  struct turns *tn = h->data;
  size_t used = tn->budget.used;

  if (used > tn->last && used - tn->last > tn->max_step && tn->stalled)
    tn->max_step = used - tn->last;
  tn->last = used;
  if (used > 0 && !tn->stalled) {
    struct timespec ts = {0, 300 * 1000 * 1000};
    tn->stalled = 1;
    nanosleep(&ts, NULL);
  }
}

static void on_exec_take(const struct fr_kube_exec_result *r, void *arg) {
  struct turns *tn = arg;

  on_exec(r, &tn->x);
  ck_assert_ptr_nonnull(r->out_buf);
  ck_assert_ptr_eq(r->out_buf->data, r->out);
  tn->taken = fr_buf_detach(r->out_buf, &tn->taken_len);
}

START_TEST(exec_large_output_is_read_a_piece_per_turn) {
  struct ctx t;
  struct turns tn;
  uv_check_t check;
  struct fr_kube_exec_opts o = opts_for(ARGV("head", "-c", "8388608", "/dev/zero"));
  size_t i;

  memset(&tn, 0, sizeof(tn));
  tn.budget.max = 64u << 20;
  o.max_stdout = 16u << 20;
  o.budget = &tn.budget;
  ctx_open(&t, &sim_tls);
  uv_check_init(&t.loop, &check);
  check.data = &tn;
  uv_check_start(&check, on_turn_check);
  ck_assert_int_eq(fr_kube_exec(t.c, "default", "p1", &o, on_exec_take, &tn, NULL), 0);
  fr_test_run_until(&t.loop, &tn.x.calls);
  uv_close((uv_handle_t *)&check, NULL);
  ck_assert_int_eq(tn.x.error, 0);
  ck_assert_int_eq(tn.x.exit_code, 0);
  ck_assert_uint_eq(tn.x.out_len, 8u << 20);
  /* Taken over: the same bytes, now ours. */
  ck_assert_ptr_nonnull(tn.taken);
  ck_assert_uint_eq(tn.taken_len, 8u << 20);
  for (i = 0; i < tn.taken_len && tn.taken[i] == 0; i++)
    ;
  ck_assert_uint_eq(i, tn.taken_len);
  free(tn.taken);
  /* At most 16 reads of 16 KiB from the poll and 16 more from the resume
   * per turn (plus a frame in progress); reading all that was buffered
   * in one turn held the loop for hundreds of milliseconds. */
  ck_assert_msg(tn.max_step <= (576u << 10), "%zu bytes read in one loop turn", tn.max_step);
  xres_free(&tn.x);
  ctx_close(&t);
  /* The budget is given back once the exec is gone. */
  ck_assert_uint_eq(tn.budget.used, 0);
}
END_TEST

/* With a turn budget of one socket event per millisecond most of the
 * exec's readiness is put off to later turns (fr/turn.h): nothing is lost,
 * the answer is the same. */
static int drains;

/* After every poll phase, whatever budget the millisecond has left goes:
 * what becomes ready before the clock moves must wait for a later turn. */
static void on_drain_check(uv_check_t *h) {
  (void)h;
  while (fr_turn_take(h->loop))
    drains++;
}

START_TEST(exec_under_a_tight_turn_budget_answers_the_same) {
  struct ctx t;
  enum { N = 8 };
  struct xres x[N];
  char arg[N][96];
  struct fr_kube_exec_opts o[N];
  uv_check_t check;

  fr_turn_set_budget(1);
  ctx_open(&t, &sim_tls);
  uv_check_init(&t.loop, &check);
  uv_check_start(&check, on_drain_check);
  for (int i = 0; i < N; i++) {
    snprintf(arg[i], sizeof(arg[i]), "head -c 300000 /dev/zero | tr '\\0' a; echo e%d >&2; exit %d", i, i);
    memset(&x[i], 0, sizeof(x[i]));
    o[i] = opts_for((char *const[]){"sh", "-c", arg[i], NULL});
    ck_assert_int_eq(fr_kube_exec(t.c, "default", "p1", &o[i], on_exec, &x[i], NULL), 0);
  }
  for (int i = 0; i < N; i++)
    fr_test_run_until(&t.loop, &x[i].calls);
  uv_close((uv_handle_t *)&check, NULL);
  fr_turn_set_budget(0);
  for (int i = 0; i < N; i++) {
    char expect[16];
    snprintf(expect, sizeof(expect), "e%d\n", i);
    ck_assert_int_eq(x[i].calls, 1);
    ck_assert_int_eq(x[i].error, 0);
    ck_assert_int_eq(x[i].timed_out, 0);
    ck_assert_int_eq(x[i].exit_code, i);
    ck_assert_uint_eq(x[i].out_len, 300000);
    ck_assert_int_eq(x[i].out[299999], 'a');
    ck_assert_str_eq(x[i].err, expect);
    xres_free(&x[i]);
  }
  ctx_close(&t);
}
END_TEST

static Suite *kube_exec_suite(void) {
  Suite *s = suite_create("kube_exec");
  TCase *tc = tcase_create("exec");

  tcase_add_unchecked_fixture(tc, suite_setup, suite_teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, exec_python_print_returns_output_and_exit_0);
  tcase_add_test(tc, exec_nonzero_exit_keeps_streams_apart);
  tcase_add_test(tc, exec_argv_with_special_characters_arrives_intact);
  tcase_add_test(tc, exec_stdin_reaches_cat);
  tcase_add_test(tc, exec_empty_stdin_is_closed_at_once);
  tcase_add_test(tc, exec_large_binary_stdin_round_trips);
  tcase_add_test(tc, exec_binary_output_is_preserved);
  tcase_add_test(tc, exec_output_over_cap_is_truncated);
  tcase_add_test(tc, exec_stderr_over_cap_is_truncated);
  tcase_add_test(tc, exec_past_timeout_is_timed_out);
  tcase_add_test(tc, exec_missing_pod_is_404);
  tcase_add_test(tc, exec_pending_pod_is_400);
  tcase_add_test(tc, exec_bad_container_is_400);
  tcase_add_test(tc, exec_named_container_runs);
  tcase_add_test(tc, exec_missing_command_reports_the_failure);
  tcase_add_test(tc, exec_bad_token_is_401);
  tcase_add_test(tc, exec_untrusted_certificate_fails_to_connect);
  tcase_add_test(tc, exec_closed_port_is_connection_refused);
  tcase_add_test(tc, exec_over_plain_http_works);
  tcase_add_test(tc, exec_over_plain_http_missing_pod_is_404);
  tcase_add_test(tc, exec_by_host_name_resolves_and_verifies);
  tcase_add_test(tc, exec_bad_arguments_fail_without_callback);
  tcase_add_test(tc, exec_request_head_carries_upgrade_auth_and_escaped_argv);
  tcase_add_test(tc, exec_fragments_pings_and_split_status_are_handled);
  tcase_add_test(tc, exec_v5_sends_stdin_close_signal);
  tcase_add_test(tc, exec_refused_with_chunked_500_reports_status_message);
  tcase_add_test(tc, exec_status_code_outside_100_599_is_malformed);
  tcase_add_test(tc, exec_wrong_accept_key_is_protocol_error);
  tcase_add_test(tc, exec_no_subprotocol_is_protocol_error);
  tcase_add_test(tc, exec_text_frame_is_protocol_error);
  tcase_add_test(tc, exec_eof_before_status_is_connection_reset);
  tcase_add_test(tc, exec_status_without_close_frame_still_completes);
  tcase_add_test(tc, exec_unknown_status_is_protocol_error);
  tcase_add_test(tc, exec_tls_handshake_past_connect_timeout_is_etimedout);
  tcase_add_test(tc, exec_timeout_while_connecting_is_timed_out);
  tcase_add_test(tc, exec_cancel_while_connecting_never_calls_back);
  tcase_add_test(tc, exec_cancel_right_after_start_never_calls_back);
  tcase_add_test(tc, exec_cancel_while_streaming_never_calls_back);
  tcase_add_test(tc, exec_cancel_from_another_callback);
  tcase_add_test(tc, exec_client_free_cancels_running_exec);
  tcase_add_test(tc, exec_cancel_inside_own_callback_is_harmless);
  tcase_add_test(tc, exec_client_free_inside_callback_is_safe);
  tcase_add_test(tc, exec_concurrent_execs_stay_separate);
  tcase_add_test(tc, exec_large_output_is_read_a_piece_per_turn);
  tcase_add_test(tc, exec_under_a_tight_turn_budget_answers_the_same);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(kube_exec_suite());
  int failed;

  signal(SIGPIPE, SIG_IGN);
  /* KUBE_EXEC_TEST_DEBUG=1 traces every exec state transition. */
  if (getenv("KUBE_EXEC_TEST_DEBUG") != NULL)
    fr_log_set_level(FR_LOG_DEBUG);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
