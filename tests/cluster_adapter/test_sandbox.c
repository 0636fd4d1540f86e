/* test_sandbox.c - the adapter's sandbox paths (claim a warm pod, cold
 * create, wait for readiness, delete) driven through the public adapter API
 * against a scripted fake Kubernetes API server (tests/support/fake_kube.h)
 * on the same loop, plain HTTP on 127.0.0.1:0 with a bearer token.
 *
 * Each test gets a fresh loop, fake server and adapter, puts its pods in
 * the fake before the adapter starts (so they arrive with the first list),
 * scripts the answers it needs, and ends by freeing the adapter and the
 * fake and checking that the loop closes cleanly.
 *
 * Three cases began as failing tests of bugs this suite found (a 409
 * retrying the same pod, a hung POST not given up when the breaker opens,
 * a failed delete hiding a running sandbox); they run by default now.
 * -DFR_TEST_KNOWN_BUGS builds any further known-bug cases (none today).
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "fake_kube.h"
#include "fr/adapter.h"
#include "fr/log.h"
#include "fr/quantity.h"
#include "fr/util.h"
#include "fr_test_loop.h"

/* Bounds on waits, so that a test that hangs fails instead; generous
 * (ASan, a loaded machine), never a pass/fail criterion on speed. The
 * circuit breaker needs two failed probes (2 s apart) to open and a 3 s
 * cool-down plus a probe to close again, hence the longer one. */
#define WAIT_MS 10000
#define WAIT_BREAKER_MS 20000

#define CONFLICT_MSG                                                                                     \
  "Operation cannot be fulfilled on pods: the object has been modified; please apply your changes to " \
  "the latest version and try again"

static uv_loop_t loop;
static char dir[64];
static struct fake_kube *fk;
static struct fr_adapter *ad;
static int in_create; /* set while fr_adapter_sandbox_create runs */
static int64_t commit_timeout_s; /* the adapter's batch_commit_timeout_s (0: default) */
static int64_t run_as_user;      /* the adapter's run_as_user (0: the image's) */
/* Set by the teardown of a failed test: the records its callbacks would
 * write live in the dead test's stack frame, so they are ignored. */
static int abandoned;

/* ------------------------------------------------------------ waiting */

struct waiter {
  fr_test_done_cb cond;
  void *arg;
  int expired;
};

static int waiter_done(void *p) {
  struct waiter *w = p;

  return w->expired || w->cond(w->arg);
}

static void on_deadline(uv_timer_t *t) {
  ((struct waiter *)t->data)->expired = 1;
}

/* Runs the loop until <cond>(<arg>) holds; fails the test after <limit_ms>. */
static void wait_for(fr_test_done_cb cond, void *arg, uint64_t limit_ms, const char *what) {
  struct waiter w = {cond, arg, 0};
  uv_timer_t deadline;
  int rc;

  uv_timer_init(&loop, &deadline);
  deadline.data = &w;
  uv_timer_start(&deadline, on_deadline, limit_ms, 0);
  rc = fr_test_run_until_cb(&loop, waiter_done, &w);
  uv_close((uv_handle_t *)&deadline, NULL);
  uv_run(&loop, UV_RUN_NOWAIT); /* its close */
  ck_assert_msg(rc == 0 && !w.expired, "gave up waiting for %s", what);
}

static int flag_set(void *arg) {
  return *(int *)arg != 0;
}

/* ------------------------------------------------------------ outcomes */

struct outcome {
  int calls;
  int calls_in_create;
  enum fr_sandbox_err err;
  char message[600];
  char pod[64];
  char tenant[64];
  char state[16];
  char sbname[64];
  int warm;
};

static void on_sandbox(const struct fr_sandbox_result *r, void *arg) {
  struct outcome *o = arg;

  if (abandoned)
    return;
  o->calls++;
  o->calls_in_create += in_create;
  o->err = r->err;
  o->warm = r->warm;
  snprintf(o->message, sizeof(o->message), "%s", r->message ? r->message : "");
  if (r->pod != NULL) {
    snprintf(o->pod, sizeof(o->pod), "%s", r->pod->name);
    snprintf(o->tenant, sizeof(o->tenant), "%s", r->pod->tenant ? r->pod->tenant : "");
    snprintf(o->state, sizeof(o->state), "%s", r->pod->state ? r->pod->state : "");
    snprintf(o->sbname, sizeof(o->sbname), "%s", r->pod->sbname ? r->pod->sbname : "");
  }
}

static int outcome_done(void *arg) {
  return ((struct outcome *)arg)->calls > 0;
}

static json_t *spec_labels, *spec_env;

/* tenant acme, sandbox job-1, pool <pool> (NULL: cold only), python:3.12,
 * 500m / 256Mi, label team=ml, env A=1, 10 minutes. */
static struct fr_sandbox_spec spec_of(const char *pool) {
  struct fr_sandbox_spec s;

  memset(&s, 0, sizeof(s));
  s.tenant = "acme";
  s.name = "job-1";
  s.pool = pool;
  s.image = "python:3.12";
  s.cpu_m = 500;
  s.mem_b = 256LL << 20;
  s.env = spec_env;
  s.labels = spec_labels;
  s.lifetime_s = 600;
  s.ready_timeout_ms = 60000; /* far beyond every wait: a timeout is never the answer here */
  s.request_id = "req-test";
  return s;
}

/* Starts a create; its callback must not run inside the call. */
static void create(const struct fr_sandbox_spec *s, struct outcome *o) {
  int rc;

  memset(o, 0, sizeof(*o));
  in_create = 1;
  rc = fr_adapter_sandbox_create(ad, s, on_sandbox, o);
  in_create = 0;
  ck_assert_int_eq(rc, 0);
  ck_assert_int_eq(o->calls, 0);
}

static void create_and_wait(const struct fr_sandbox_spec *s, struct outcome *o) {
  create(s, o);
  wait_for(outcome_done, o, WAIT_MS, "the create's callback");
  ck_assert_int_eq(o->calls, 1);
  ck_assert_int_eq(o->calls_in_create, 0);
}

/* ------------------------------------------------------------ fixture */

static int adapter_ready(void *arg) {
  struct fr_adapter_view v;

  (void)arg;
  fr_adapter_view(ad, &v);
  return v.synced && v.healthy && fk_pod_watches(fk) > 0;
}

static void setup(void) {
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  snprintf(dir, sizeof(dir), "/tmp/test_sandbox.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_int_eq(fk_new(&loop, dir, &fk), 0);
  spec_labels = json_pack("{s:s}", "team", "ml");
  spec_env = json_pack("{s:s}", "A", "1");
  ad = NULL;
}

/* The adapter on the fake, started, with its caches synced and the pod
 * watch open. */
static void start_adapter(void) {
  struct fr_adapter_opts opts;
  char err[256] = "";

  memset(&opts, 0, sizeof(opts));
  opts.name = "fake";
  opts.region = "test";
  opts.kubeconfig = fk_kubeconfig(fk);
  opts.ns = FK_NS;
  opts.batch_commit_timeout_s = commit_timeout_s;
  opts.run_as_user = run_as_user;
  ck_assert_msg(fr_adapter_new(&loop, &opts, &ad, err, sizeof(err)) == 0, "fr_adapter_new: %s", err);
  ck_assert_int_eq(fr_adapter_start(ad), 0);
  wait_for(adapter_ready, NULL, WAIT_MS, "the adapter's first sync");
}

static void remove_dir(void) {
  char path[128];

  snprintf(path, sizeof(path), "%s/kubeconfig", dir);
  unlink(path);
  rmdir(dir);
}

static void on_freed(void *arg) {
  (*(int *)arg)++;
}

/* Every test ends here: adapter and fake freed, nothing left on the loop. */
static void finish_test(void) {
  int freed = 0;

  if (ad != NULL) {
    fr_adapter_free(ad, on_freed, &freed);
    ad = NULL;
    wait_for(flag_set, &freed, WAIT_MS, "the adapter's free");
  }
  freed = 0;
  fk_free(fk, on_freed, &freed);
  fk = NULL;
  wait_for(flag_set, &freed, WAIT_MS, "the fake's free");
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  json_decref(spec_labels);
  json_decref(spec_env);
  spec_labels = spec_env = NULL;
  remove_dir();
  abandoned = 0;
  commit_timeout_s = 0;
  run_as_user = 0;
}

/* Checked teardown: after a test that finished (finish_test) there is
 * nothing to do. After a failed one, release what it left on the loop so
 * the tests after it start clean (the suite runs without fork); bounded,
 * and without asserts of its own. */
static void teardown(void) {
  int i;

  if (fk == NULL)
    return;
  abandoned = 1;
  if (ad != NULL)
    fr_adapter_free(ad, NULL, NULL);
  ad = NULL;
  fk_free(fk, NULL, NULL);
  fk = NULL;
  for (i = 0; i < 2000 && uv_run(&loop, UV_RUN_NOWAIT) != 0; i++)
    usleep(1000);
  (void)uv_loop_close(&loop);
  json_decref(spec_labels);
  json_decref(spec_env);
  spec_labels = spec_env = NULL;
  remove_dir();
  abandoned = 0;
  commit_timeout_s = 0;
}

/* ------------------------------------------------------------ helpers */

/* The pod name at the end of a request's path. */
static const char *path_pod(const struct fk_request *r) {
  const char *s = strrchr(r->path, '/');

  return s ? s + 1 : "";
}

static json_t *body_of(const struct fk_request *r) {
  json_t *j = json_loads(r->body, 0, NULL);

  ck_assert_msg(j != NULL, "body is not JSON: %s", r->body);
  return j;
}

static const char *jstr(json_t *obj, const char *path) {
  char key[128], *dot, *p = key;
  json_t *cur = obj;

  snprintf(key, sizeof(key), "%s", path);
  while ((dot = strchr(p, '.')) != NULL) {
    *dot = '\0';
    cur = json_object_get(cur, p);
    p = dot + 1;
  }
  return json_string_value(json_object_get(cur, p));
}

static const char *label_of(json_t *obj, const char *key) {
  return json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"), "labels"), key));
}

struct count_arg {
  const char *method, *prefix;
  int want;
};

static int count_reached(void *arg) {
  struct count_arg *c = arg;

  return fk_count(fk, c->method, c->prefix) >= c->want;
}

/* Waits until the fake has seen <want> requests <method> under <prefix>. */
static void wait_requests(const char *method, const char *prefix, int want) {
  struct count_arg c = {method, prefix, want};
  char what[160];

  snprintf(what, sizeof(what), "%d %s %s", want, method, prefix ? prefix : "");
  wait_for(count_reached, &c, WAIT_MS, what);
}

static int held_at_least(void *arg) {
  return fk_held(fk) >= *(size_t *)arg;
}

static void wait_held(size_t want) {
  wait_for(held_at_least, &want, WAIT_MS, "a held request");
}

static int pod_cached(void *arg) {
  return fr_adapter_pod(ad, arg) != NULL;
}

static int pod_gone(void *arg) {
  return fr_adapter_pod(ad, arg) == NULL;
}

struct label_arg {
  const char *pod, *key, *value;
};

static int pod_label_is(void *arg) {
  struct label_arg *l = arg;
  const struct fr_pod *p = fr_adapter_pod(ad, l->pod);
  const char *v = p ? fr_pod_label(p, l->key) : NULL;

  return v != NULL && strcmp(v, l->value) == 0;
}

/* Name of the pod the last cold-create POST asked for. */
static void posted_pod(int nth, char *out, size_t cap) {
  const struct fk_request *r = fk_nth(fk, "POST", FK_PODS, nth);
  json_t *j;

  ck_assert_ptr_nonnull(r);
  j = body_of(r);
  ck_assert_ptr_nonnull(jstr(j, "metadata.name"));
  snprintf(out, cap, "%s", jstr(j, "metadata.name"));
  json_decref(j);
}

static void make_ready(const char *pod) {
  ck_assert_int_eq(fk_pod_merge(fk, pod,
                                "{\"spec\":{\"nodeName\":\"node-1\"},\"status\":{\"phase\":\"Running\","
                                "\"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"True\"},"
                                "{\"type\":\"Ready\",\"status\":\"True\"}]}}"),
                   0);
}

static int64_t warm_pods(void) {
  struct fr_adapter_view v;

  fr_adapter_view(ad, &v);
  return v.warm_pods;
}

/* ------------------------------------------------------------ claims */

static int done_or_posted(void *arg) {
  return ((struct outcome *)arg)->calls > 0 || fk_count(fk, "POST", FK_PODS) > 0;
}

/* A 409 on a claim means another router took that pod (or it changed);
 * the create moves on to the next ready warm pod (adapter.h: "on conflict
 * the next ready pod"), even while the watch has not reported the change
 * and the cache still shows the lost pod ready (pick() once started over
 * from it, claiming it again with the same stale resourceVersion: three
 * 409s, then a cold start, although another warm pod was ready).
 * Here the other router's claim is real (the fake applies it, so a stale
 * precondition fails again) and the watch lags behind the 409. */
START_TEST(claim_conflict_409_moves_to_next_warm_pod) {
  struct fr_sandbox_spec s = spec_of("py");
  const struct fk_request *second;
  char first_pod[32], other_pod[32], other_rv[24];
  struct outcome o;
  json_t *body;

  fk_add_pod(fk, fk_warm_pod("warm-a", "py"));
  fk_add_pod(fk, fk_warm_pod("warm-b", "py"));
  start_adapter();
  ck_assert_int_eq(warm_pods(), 2);
  fk_script(fk, "PATCH", 1, FK_HOLD, NULL);
  create(&s, &o);
  wait_held(1);
  snprintf(first_pod, sizeof(first_pod), "%s", path_pod(fk_held_request(fk)));
  snprintf(other_pod, sizeof(other_pod), "%s", strcmp(first_pod, "warm-a") == 0 ? "warm-b" : "warm-a");
  snprintf(other_rv, sizeof(other_rv), "%s", fk_pod_rv(fk, other_pod));

  /* Another router claims the first pod; our watch does not show it yet. */
  fk_pause_watch(fk, 1);
  ck_assert_int_eq(fk_pod_merge(fk, first_pod,
                                "{\"metadata\":{\"labels\":{\"fedrouter.io/state\":\"claimed\","
                                "\"fedrouter.io/tenant\":\"other\"}}}"),
                   0);
  ck_assert_int_eq(fk_answer_held(fk, 409, CONFLICT_MSG), 0);

  wait_for(done_or_posted, &o, WAIT_MS, "the create's callback or a cold create");
  ck_assert_msg(fk_count(fk, "POST", FK_PODS) == 0,
                "cold-started after %d claims (the last on %s) while %s was ready",
                fk_count(fk, "PATCH", FK_PODS), path_pod(fk_nth(fk, "PATCH", FK_PODS, 1)), other_pod);
  ck_assert_int_eq(o.calls, 1);
  ck_assert_int_eq(o.err, FR_SB_OK);
  ck_assert_int_eq(o.warm, 1);
  ck_assert_str_eq(o.pod, other_pod);
  ck_assert_int_eq(fk_count(fk, "PATCH", FK_PODS), 2);
  second = fk_nth(fk, "PATCH", FK_PODS, 1);
  ck_assert_str_eq(path_pod(second), other_pod);
  /* The second claim is conditional on the version the cache had. */
  body = body_of(second);
  ck_assert_str_eq(jstr(body, "metadata.resourceVersion"), other_rv);
  json_decref(body);
  ck_assert_str_eq(label_of(fk_pod(fk, other_pod), "fedrouter.io/tenant"), "acme");
  ck_assert_str_eq(label_of(fk_pod(fk, first_pod), "fedrouter.io/tenant"), "other");
  finish_test();
}
END_TEST

/* Two ready warm pods; the first claim gets a 409 because another router
 * claimed that pod, and the watch shows that claim before the 409 arrives:
 * the pod has left the ready set, so the next claim goes to the other pod,
 * with that pod's resourceVersion as precondition. (The same conflict with
 * the watch lagging is the known bug above.) */
START_TEST(claim_conflict_409_after_watch_update_moves_to_next_warm_pod) {
  struct fr_sandbox_spec s = spec_of("py");
  struct label_arg taken;
  const struct fk_request *second;
  char first_pod[32], other_pod[32], other_rv[24];
  struct outcome o;
  json_t *body;

  fk_add_pod(fk, fk_warm_pod("warm-a", "py"));
  fk_add_pod(fk, fk_warm_pod("warm-b", "py"));
  start_adapter();
  fk_script(fk, "PATCH", 1, FK_HOLD, NULL);
  create(&s, &o);
  wait_held(1);
  snprintf(first_pod, sizeof(first_pod), "%s", path_pod(fk_held_request(fk)));
  snprintf(other_pod, sizeof(other_pod), "%s", strcmp(first_pod, "warm-a") == 0 ? "warm-b" : "warm-a");
  snprintf(other_rv, sizeof(other_rv), "%s", fk_pod_rv(fk, other_pod));

  /* Another router claims it; our cache learns of it; then our 409. */
  ck_assert_int_eq(fk_pod_merge(fk, first_pod,
                                "{\"metadata\":{\"labels\":{\"fedrouter.io/state\":\"claimed\","
                                "\"fedrouter.io/tenant\":\"other\"}}}"),
                   0);
  taken.pod = first_pod;
  taken.key = FR_LABEL_TENANT;
  taken.value = "other";
  wait_for(pod_label_is, &taken, WAIT_MS, "the other claim in the cache");
  ck_assert_int_eq(o.calls, 0);
  ck_assert_int_eq(fk_answer_held(fk, 409, CONFLICT_MSG), 0);

  wait_for(outcome_done, &o, WAIT_MS, "the create's callback");
  ck_assert_int_eq(o.calls, 1);
  ck_assert_int_eq(o.err, FR_SB_OK);
  ck_assert_int_eq(o.warm, 1);
  ck_assert_str_eq(o.pod, other_pod);
  ck_assert_int_eq(fk_count(fk, "PATCH", FK_PODS), 2);
  second = fk_nth(fk, "PATCH", FK_PODS, 1);
  ck_assert_str_eq(path_pod(second), other_pod);
  body = body_of(second);
  ck_assert_str_eq(jstr(body, "metadata.resourceVersion"), other_rv);
  json_decref(body);
  ck_assert_str_eq(label_of(fk_pod(fk, first_pod), "fedrouter.io/tenant"), "other");
  ck_assert_int_eq(fk_count(fk, "POST", FK_PODS), 0);
  finish_test();
}
END_TEST

/* Every claim conflicts: after MAX_CLAIM_CONFLICTS (3) the create gives up
 * on the pool and creates a pod of the spec's shape, and answers once the
 * pod is Running and Ready. Four warm pods, so the bound (not running out
 * of pods) is what stops the claims. */
START_TEST(claim_conflicts_exhausted_cold_starts) {
  struct fr_sandbox_spec s = spec_of("py");
  char pod[64];
  struct outcome o;
  json_t *body, *c, *env;
  int64_t v;
  int i;

  for (i = 0; i < 4; i++) {
    char n[16];
    snprintf(n, sizeof(n), "warm-%d", i);
    fk_add_pod(fk, fk_warm_pod(n, "py"));
  }
  start_adapter();
  ck_assert_int_eq(warm_pods(), 4);
  fk_script(fk, "PATCH", -1, 409, CONFLICT_MSG);

  create(&s, &o);
  wait_requests("POST", FK_PODS, 1);
  ck_assert_int_eq(fk_count(fk, "PATCH", FK_PODS), 3);
  for (i = 0; i < 3; i++) {
    body = body_of(fk_nth(fk, "PATCH", FK_PODS, i));
    ck_assert_ptr_nonnull(jstr(body, "metadata.resourceVersion"));
    json_decref(body);
  }

  /* The pod asked for: the spec's image, requests = limits, labels, tenant. */
  body = body_of(fk_nth(fk, "POST", FK_PODS, 0));
  c = json_array_get(json_object_get(json_object_get(body, "spec"), "containers"), 0);
  ck_assert_str_eq(jstr(c, "image"), "python:3.12");
  ck_assert_int_eq(fr_quantity_parse_milli(jstr(c, "resources.requests.cpu"), &v), 0);
  ck_assert_int_eq(v, 500);
  ck_assert_int_eq(fr_quantity_parse_value(jstr(c, "resources.requests.memory"), &v), 0);
  ck_assert_int_eq(v, 256LL << 20);
  ck_assert_int_eq(fr_quantity_parse_milli(jstr(c, "resources.limits.cpu"), &v), 0);
  ck_assert_int_eq(v, 500);
  ck_assert_int_eq(fr_quantity_parse_value(jstr(c, "resources.limits.memory"), &v), 0);
  ck_assert_int_eq(v, 256LL << 20);
  env = json_array_get(json_object_get(c, "env"), 0);
  ck_assert_str_eq(jstr(env, "name"), "A");
  ck_assert_str_eq(jstr(env, "value"), "1");
  ck_assert_str_eq(label_of(body, "fedrouter.io/sandbox"), "true");
  ck_assert_str_eq(label_of(body, "fedrouter.io/state"), "claimed");
  ck_assert_str_eq(label_of(body, "fedrouter.io/tenant"), "acme");
  ck_assert_str_eq(label_of(body, "fedrouter.io/name"), "job-1");
  ck_assert_str_eq(label_of(body, "fedrouter.io/pool"), "py");
  ck_assert_str_eq(label_of(body, "team"), "ml");
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(body, "spec"), "activeDeadlineSeconds")),
                   600);
  json_decref(body);

  /* Not done before the pod is ready. */
  posted_pod(0, pod, sizeof(pod));
  wait_for(pod_cached, pod, WAIT_MS, "the created pod in the cache");
  ck_assert_int_eq(o.calls, 0);
  make_ready(pod);
  wait_for(outcome_done, &o, WAIT_MS, "the create's callback");
  ck_assert_int_eq(o.calls, 1);
  ck_assert_int_eq(o.err, FR_SB_OK);
  ck_assert_int_eq(o.warm, 0);
  ck_assert_str_eq(o.pod, pod);
  ck_assert_str_eq(o.tenant, "acme");
  ck_assert_str_eq(o.sbname, "job-1");
  ck_assert_int_eq(fk_count(fk, "POST", FK_PODS), 1);
  ck_assert_int_eq(fr_adapter_inflight(ad), 0);
  finish_test();
}
END_TEST

/* The claim's answer goes into the cache at once (read-your-own-writes):
 * with the watch lagging, fr_adapter_pod() already shows the pod claimed
 * by the tenant when the callback runs, and neither a stale replay of the
 * warm pod nor the late watch event undoes it. */
START_TEST(claim_answered_before_watch_is_visible) {
  struct fr_sandbox_spec s = spec_of("py");
  struct label_arg marker = {"marker", "seen", "yes"};
  const struct fr_pod *p;
  json_t *stale;
  struct outcome o;

  fk_add_pod(fk, fk_warm_pod("warm-a", "py"));
  fk_add_pod(fk, fk_sandbox_pod("marker", "other", "m"));
  stale = json_deep_copy(fk_pod(fk, "warm-a"));
  start_adapter();
  ck_assert_int_eq(warm_pods(), 1);

  fk_pause_watch(fk, 1);
  create_and_wait(&s, &o);
  ck_assert_int_eq(o.err, FR_SB_OK);
  ck_assert_int_eq(o.warm, 1);
  ck_assert_str_eq(o.pod, "warm-a");
  ck_assert_str_eq(o.tenant, "acme");
  ck_assert_str_eq(o.state, "claimed");
  ck_assert_str_eq(o.sbname, "job-1");
  /* The fake has it claimed, but its watch has not said so. */
  ck_assert_str_eq(label_of(fk_pod(fk, "warm-a"), "fedrouter.io/tenant"), "acme");
  p = fr_adapter_pod(ad, "warm-a");
  ck_assert_ptr_nonnull(p);
  ck_assert_str_eq(p->tenant, "acme");
  ck_assert_str_eq(p->state, "claimed");
  ck_assert_str_eq(p->sbname, "job-1");
  ck_assert_str_eq(p->rv, fk_pod_rv(fk, "warm-a"));
  ck_assert_int_eq(fr_adapter_pod_leaving(ad, p), 0);
  ck_assert_int_eq(warm_pods(), 0);
  ck_assert_int_eq(fr_adapter_tenant_sandboxes(ad, "acme"), 1);

  /* A replay of the older, warm version, then the real events; the marker
   * change comes last on the same stream, so once it is in, so are they. */
  fk_send_raw(fk, "MODIFIED", stale);
  json_decref(stale);
  fk_pause_watch(fk, 0);
  ck_assert_int_eq(fk_pod_merge(fk, "marker", "{\"metadata\":{\"labels\":{\"seen\":\"yes\"}}}"), 0);
  wait_for(pod_label_is, &marker, WAIT_MS, "the marker event");
  p = fr_adapter_pod(ad, "warm-a");
  ck_assert_ptr_nonnull(p);
  ck_assert_str_eq(p->tenant, "acme");
  ck_assert_str_eq(p->state, "claimed");
  ck_assert_int_eq(warm_pods(), 0);
  ck_assert_int_eq(fr_adapter_tenant_sandboxes(ad, "acme"), 1);
  finish_test();
}
END_TEST

/* ------------------------------------------------------------ cold creates */

/* A ResourceQuota refuses the cold create's POST (403 "exceeded quota"):
 * FR_SB_NO_ROOM with the API's message, so the router spills to the next
 * cluster; there is nothing to delete. */
START_TEST(create_quota_403_reports_no_room) {
  struct fr_sandbox_spec s = spec_of(NULL);
  struct outcome o;

  start_adapter();
  fk_script(fk, "POST", 1, 403,
            "pods \"sb-x\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=3, limited: pods=3");
  create_and_wait(&s, &o);
  ck_assert_int_eq(o.err, FR_SB_NO_ROOM);
  ck_assert_msg(strstr(o.message, "exceeded quota") != NULL, "message: %s", o.message);
  ck_assert_int_eq(fk_count(fk, "POST", FK_PODS), 1); /* not retried here: the caller spills */
  ck_assert_int_eq(fk_count(fk, "PATCH", NULL), 0);
  ck_assert_int_eq(fk_count(fk, "DELETE", NULL), 0);
  ck_assert_int_eq(fr_adapter_inflight(ad), 0);
  finish_test();
}
END_TEST

/* The created pod cannot be scheduled (PodScheduled=False/Unschedulable,
 * seen over the watch): FR_SB_NO_ROOM, and the adapter deletes the pod it
 * made. */
START_TEST(create_unschedulable_reports_no_room) {
  struct fr_sandbox_spec s = spec_of(NULL);
  char pod[64], path[128];
  struct outcome o;

  start_adapter();
  create(&s, &o);
  wait_requests("POST", FK_PODS, 1);
  posted_pod(0, pod, sizeof(pod));
  wait_for(pod_cached, pod, WAIT_MS, "the created pod in the cache");
  ck_assert_int_eq(o.calls, 0);
  ck_assert_int_eq(fk_pod_merge(fk, pod,
                                "{\"status\":{\"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"False\","
                                "\"reason\":\"Unschedulable\",\"message\":\"0/1 nodes are available: 1 "
                                "Insufficient cpu.\"}]}}"),
                   0);
  wait_for(outcome_done, &o, WAIT_MS, "the create's callback");
  ck_assert_int_eq(o.calls, 1);
  ck_assert_int_eq(o.err, FR_SB_NO_ROOM);
  ck_assert_msg(strstr(o.message, "Insufficient cpu") != NULL, "message: %s", o.message);
  /* The pod it made goes: nothing Pending is left behind. */
  snprintf(path, sizeof(path), FK_PODS "/%s", pod);
  wait_requests("DELETE", path, 1);
  ck_assert_ptr_null(fk_pod(fk, pod));
  ck_assert_int_eq(fr_adapter_inflight(ad), 0);
  finish_test();
}
END_TEST

/* Pod options: the cold create's pod carries them (GPUs as requests =
 * limits of the configured resource, the claim as a volume and mount). */
START_TEST(create_with_pod_options_posts_them) {
  struct fr_sandbox_spec s = spec_of(NULL);
  json_t *in = json_pack("{s:s,s:i,s:{s:s},s:[{s:s,s:s}]}", "runtime_class", "gvisor", "gpus", 2, "volumes",
                         "/data", "shared", "tolerations", "key", "gpu", "operator", "Exists");
  const char *field;
  char msg[200];
  const struct fk_request *r;
  json_t *body, *c;
  struct outcome o;

  ck_assert_int_eq(fr_podopts_parse(in, &s.opts, &field, msg, sizeof(msg)), 0);
  json_decref(in);
  start_adapter();
  create(&s, &o);
  fr_podopts_unref(s.opts); /* the create holds its own reference */
  wait_requests("POST", FK_PODS, 1);
  r = fk_nth(fk, "POST", FK_PODS, 0);
  ck_assert_ptr_nonnull(r);
  body = body_of(r);
  c = json_array_get(json_object_get(json_object_get(body, "spec"), "containers"), 0);
  ck_assert_str_eq(jstr(body, "spec.runtimeClassName"), "gvisor");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(c, "resources"), "limits"),
                                                     "nvidia.com/gpu")), "2");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(c, "resources"), "requests"),
                                                     "nvidia.com/gpu")), "2");
  ck_assert_str_eq(jstr(json_array_get(json_object_get(json_object_get(body, "spec"), "volumes"), 0),
                        "persistentVolumeClaim.claimName"), "shared");
  ck_assert_str_eq(jstr(json_array_get(json_object_get(c, "volumeMounts"), 0), "mountPath"), "/data");
  ck_assert_str_eq(jstr(json_array_get(json_object_get(json_object_get(body, "spec"), "tolerations"), 0), "key"),
                   "gpu");
  json_decref(body);
  finish_test();
}
END_TEST

/* What the fake cluster lacks for pod options (no GPUs, no RuntimeClasses
 * or claims it can list, node-1 without labels): each has its code, and
 * no options count as free_slots does. */
START_TEST(fit_slots_names_what_the_cluster_lacks) {
  static const struct {
    const char *opts, *unfit;
  } cases[] = {
      {"{\"runtime_class\":\"gvisor\"}", "no_runtime_class"},
      {"{\"volumes\":{\"/d\":\"data\"}}", "no_pvc"},
      {"{\"node_selector\":{\"accel\":\"a100\"}}", "no_matching_node"},
      {"{\"gpus\":1}", "no_gpu_node"},
  };
  const char *field, *unfit;
  char msg[200], detail[200];
  size_t i;

  start_adapter();
  ck_assert_int_gt(fr_adapter_free_slots(ad, 500, 256LL << 20), 0);
  ck_assert_int_eq(fr_adapter_fit_slots(ad, 500, 256LL << 20, NULL, &unfit, detail, sizeof(detail)),
                   fr_adapter_free_slots(ad, 500, 256LL << 20));
  ck_assert_ptr_null(unfit);
  for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    json_t *j = json_loads(cases[i].opts, 0, NULL);
    struct fr_podopts *o = NULL;
    ck_assert_int_eq(fr_podopts_parse(j, &o, &field, msg, sizeof(msg)), 0);
    ck_assert_int_eq(fr_adapter_fit_slots(ad, 500, 256LL << 20, o, &unfit, detail, sizeof(detail)), 0);
    ck_assert_msg(unfit != NULL && strcmp(unfit, cases[i].unfit) == 0, "%s: %s", cases[i].opts,
                  unfit ? unfit : "(fits)");
    ck_assert_msg(detail[0] != '\0', "%s: no detail", cases[i].opts);
    fr_podopts_unref(o);
    json_decref(j);
  }
  finish_test();
}
END_TEST

/* Our random pod name collided (409 AlreadyExists on the POST): the
 * create tries again under another name. */
START_TEST(create_name_collision_409_retries_with_new_name) {
  struct fr_sandbox_spec s = spec_of(NULL);
  char first[64], second[64];
  struct outcome o;

  start_adapter();
  fk_script(fk, "POST", 1, 409, "pods \"sb-x\" already exists");
  create(&s, &o);
  wait_requests("POST", FK_PODS, 2);
  posted_pod(0, first, sizeof(first));
  posted_pod(1, second, sizeof(second));
  ck_assert_str_ne(first, second);
  wait_for(pod_cached, second, WAIT_MS, "the created pod in the cache");
  make_ready(second);
  wait_for(outcome_done, &o, WAIT_MS, "the create's callback");
  ck_assert_int_eq(o.calls, 1);
  ck_assert_int_eq(o.err, FR_SB_OK);
  ck_assert_str_eq(o.pod, second);
  finish_test();
}
END_TEST

/* A pod that never becomes ready: FR_SB_TIMEOUT after the spec's
 * ready_timeout_ms, and the pod is deleted. */
START_TEST(create_not_ready_in_time_times_out_and_deletes) {
  struct fr_sandbox_spec s = spec_of(NULL);
  char pod[64], path[128];
  struct outcome o;

  s.ready_timeout_ms = 200;
  start_adapter();
  create(&s, &o);
  wait_for(outcome_done, &o, WAIT_MS, "the create's callback");
  ck_assert_int_eq(o.calls, 1);
  ck_assert_int_eq(o.err, FR_SB_TIMEOUT);
  ck_assert_msg(strstr(o.message, "not exec-ready") != NULL, "message: %s", o.message);
  posted_pod(0, pod, sizeof(pod));
  snprintf(path, sizeof(path), FK_PODS "/%s", pod);
  wait_requests("DELETE", path, 1);
  ck_assert_ptr_null(fk_pod(fk, pod));
  ck_assert_int_eq(fr_adapter_inflight(ad), 0);
  finish_test();
}
END_TEST

/* The pod fails before it is ready (image pull, command exits):
 * FR_SB_FAILED, and the pod is deleted. */
START_TEST(create_pod_failed_before_ready_reports_failed_and_deletes) {
  struct fr_sandbox_spec s = spec_of(NULL);
  char pod[64], path[128];
  struct outcome o;

  start_adapter();
  create(&s, &o);
  wait_requests("POST", FK_PODS, 1);
  posted_pod(0, pod, sizeof(pod));
  wait_for(pod_cached, pod, WAIT_MS, "the created pod in the cache");
  ck_assert_int_eq(fk_pod_merge(fk, pod, "{\"status\":{\"phase\":\"Failed\",\"reason\":\"Error\"}}"), 0);
  wait_for(outcome_done, &o, WAIT_MS, "the create's callback");
  ck_assert_int_eq(o.calls, 1);
  ck_assert_int_eq(o.err, FR_SB_FAILED);
  snprintf(path, sizeof(path), FK_PODS "/%s", pod);
  wait_requests("DELETE", path, 1);
  ck_assert_ptr_null(fk_pod(fk, pod));
  finish_test();
}
END_TEST

/* Someone deletes the pod while the create waits: FR_SB_FAILED at once. */
START_TEST(create_pod_deleted_while_waiting_reports_failed) {
  struct fr_sandbox_spec s = spec_of(NULL);
  char pod[64];
  struct outcome o;

  start_adapter();
  create(&s, &o);
  wait_requests("POST", FK_PODS, 1);
  posted_pod(0, pod, sizeof(pod));
  wait_for(pod_cached, pod, WAIT_MS, "the created pod in the cache");
  ck_assert_int_eq(fk_pod_delete(fk, pod), 0);
  wait_for(outcome_done, &o, WAIT_MS, "the create's callback");
  ck_assert_int_eq(o.calls, 1);
  ck_assert_int_eq(o.err, FR_SB_FAILED);
  ck_assert_msg(strstr(o.message, "deleted") != NULL, "message: %s", o.message);
  ck_assert_int_eq(fr_adapter_inflight(ad), 0);
  finish_test();
}
END_TEST

/* The claim PATCH keeps failing with 500 (the client may retry it: it is
 * conditional): FR_SB_UNAVAILABLE, no cold start, and the pod is not left
 * marked as being claimed: the next create claims it. */
START_TEST(claim_server_error_reports_unavailable_and_frees_pod) {
  struct fr_sandbox_spec s = spec_of("py");
  struct outcome o;
  int patches;

  fk_add_pod(fk, fk_warm_pod("warm-a", "py"));
  start_adapter();
  fk_script(fk, "PATCH", -1, 500, "etcdserver: leader changed");
  create_and_wait(&s, &o);
  ck_assert_int_eq(o.err, FR_SB_UNAVAILABLE);
  ck_assert_msg(strstr(o.message, "leader changed") != NULL, "message: %s", o.message);
  patches = fk_count(fk, "PATCH", FK_PODS "/warm-a");
  ck_assert_int_ge(patches, 1);
  ck_assert_int_eq(fk_count(fk, "PATCH", NULL), patches);
  ck_assert_int_eq(fk_count(fk, "POST", NULL), 0);
  ck_assert_str_eq(label_of(fk_pod(fk, "warm-a"), "fedrouter.io/state"), "warm");

  fk_script_clear(fk);
  create_and_wait(&s, &o);
  ck_assert_int_eq(o.err, FR_SB_OK);
  ck_assert_int_eq(o.warm, 1);
  ck_assert_str_eq(o.pod, "warm-a");
  finish_test();
}
END_TEST

static int breaker_closed(void *arg) {
  struct fr_adapter_view v;

  (void)arg;
  fr_adapter_view(ad, &v);
  return v.healthy;
}

/* The cluster stops answering while a cold create waits for its pod: the
 * create gives up as soon as the breaker opens (not after the ready
 * timeout, a minute here), and the pod it may have left is deleted once
 * the cluster answers again. */
START_TEST(cluster_down_while_waiting_gives_up) {
  struct fr_sandbox_spec s = spec_of(NULL);
  char pod[64], path[128];
  struct fr_adapter_view v;
  struct outcome o;

  start_adapter();
  create(&s, &o);
  wait_requests("POST", FK_PODS, 1);
  posted_pod(0, pod, sizeof(pod));
  wait_for(pod_cached, pod, WAIT_MS, "the created pod in the cache");
  ck_assert_int_eq(o.calls, 0);

  fk_set_down(fk, 1);
  wait_for(outcome_done, &o, WAIT_BREAKER_MS, "the create's callback");
  ck_assert_int_eq(o.calls, 1);
  ck_assert_int_eq(o.err, FR_SB_UNAVAILABLE);
  ck_assert_msg(strstr(o.message, "unreachable") != NULL, "message: %s", o.message);
  fr_adapter_view(ad, &v);
  ck_assert_int_eq(v.healthy, 0);
  ck_assert_str_eq(v.breaker, "open");
  ck_assert_int_eq(fr_adapter_inflight(ad), 0);
  ck_assert_int_eq(fk_count(fk, "DELETE", NULL), 0);
  ck_assert_ptr_nonnull(fk_pod(fk, pod));

  fk_set_down(fk, 0);
  wait_for(breaker_closed, NULL, WAIT_BREAKER_MS, "the breaker to close");
  snprintf(path, sizeof(path), FK_PODS "/%s", pod);
  wait_requests("DELETE", path, 1);
  ck_assert_ptr_null(fk_pod(fk, pod));
  ck_assert_int_eq(o.calls, 1);
  finish_test();
}
END_TEST

static int breaker_open(void *arg) {
  struct fr_adapter_view v;

  (void)arg;
  fr_adapter_view(ad, &v);
  return strcmp(v.breaker, "open") == 0;
}

/* The cluster hangs while the create's POST is out (accepted, never
 * answered; the apiserver may or may not have stored the pod). When the
 * breaker opens the create gives up at once, as one waiting for readiness
 * does, and its pod is deleted when the cluster answers again (it once
 * waited out the client's request timeout, 30 s, so the
 * batch waits that long instead of spilling; and when it fails, the pod
 * name is not recorded as abandoned, so a pod the cluster did store runs
 * unclaimed until its lifetime ends. Correct: a create in CREATING is given
 * up when the breaker opens, like one in WAITING, and its pod name goes to
 * the abandoned set (deleted if it shows up once the cluster answers). */
START_TEST(cluster_down_while_creating_gives_up_and_cleans_up) {
  struct fr_sandbox_spec s = spec_of(NULL);
  char pod[64], path[128];
  struct outcome o;
  json_t *stored;

  start_adapter();
  fk_script(fk, "POST", 1, FK_HOLD, NULL);
  create(&s, &o);
  wait_held(1);
  stored = body_of(fk_held_request(fk));
  snprintf(pod, sizeof(pod), "%s", jstr(stored, "metadata.name"));
  fk_add_pod(fk, stored); /* the apiserver stored it, then stopped answering */

  fk_set_down(fk, 1);
  wait_for(breaker_open, NULL, WAIT_BREAKER_MS, "the breaker to open");
  uv_run(&loop, UV_RUN_NOWAIT);
  ck_assert_msg(o.calls == 1, "the create is still waiting for its hung POST after the breaker opened");
  ck_assert_int_eq(o.err, FR_SB_UNAVAILABLE);

  fk_set_down(fk, 0);
  snprintf(path, sizeof(path), FK_PODS "/%s", pod);
  wait_requests("DELETE", path, 1);
  ck_assert_ptr_null(fk_pod(fk, pod));
  finish_test();
}
END_TEST

/* ------------------------------------------------------------ delete */

struct deleted {
  int calls;
  int status;
  char message[600];
};

static void on_deleted(int status, const char *message, void *arg) {
  struct deleted *d = arg;

  if (abandoned)
    return;
  d->calls++;
  d->status = status;
  snprintf(d->message, sizeof(d->message), "%s", message ? message : "");
}

/* Issue 15 item 7: a DELETE that fails (500 here, after the client's
 * retries) leaves the pod running in the cluster; the sandbox must not be
 * hidden as leaving (the router once answered 404 for it until its
 * lifetime ended). It stays visible, marked as a pending delete, and the
 * reaper retries the delete until the cluster takes it. */
static int second_delete(void *arg) {
  (void)arg;
  return fk_count(fk, "DELETE", NULL) >= 2;
}

START_TEST(delete_failure_keeps_pod_visible) {
  const struct fr_pod *p;
  struct deleted d;

  memset(&d, 0, sizeof(d));
  fk_add_pod(fk, fk_sandbox_pod("sb-keep", "acme", "job-1"));
  start_adapter();
  fk_script(fk, "DELETE", -1, 500, "etcdserver: request timed out");
  ck_assert_int_eq(fr_adapter_sandbox_delete(ad, "sb-keep", "req-del", on_deleted, &d), 0);
  ck_assert_int_eq(d.calls, 0);
  wait_for(flag_set, &d.calls, WAIT_MS, "the delete's callback");
  ck_assert_int_eq(d.calls, 1);
  ck_assert_int_eq(d.status, 500);
  ck_assert_msg(strstr(d.message, "request timed out") != NULL, "message: %s", d.message);
  ck_assert_ptr_nonnull(fk_pod(fk, "sb-keep")); /* still running in the cluster */
  p = fr_adapter_pod(ad, "sb-keep");
  ck_assert_ptr_nonnull(p);
  ck_assert_msg(fr_adapter_pod_leaving(ad, p) == 0,
                "a sandbox whose delete failed is hidden as leaving while it still runs");
  ck_assert_int_eq(fr_adapter_pod_delete_pending(ad, p), 1);
  /* The reaper (every 2 s) sends it again; this time the cluster takes it. */
  fk_script(fk, "DELETE", -1, 200, NULL);
  wait_for(second_delete, NULL, 10000, "the reaper's retry of the delete");
  finish_test();
}
END_TEST

/* A delete that works: the API's answer reaches the callback, and the pod
 * is hidden (leaving) from the request until the watch reports it gone. */
START_TEST(delete_accepted_hides_pod_until_gone) {
  struct deleted d;
  const struct fr_pod *p;

  memset(&d, 0, sizeof(d));
  fk_add_pod(fk, fk_sandbox_pod("sb-gone", "acme", "job-1"));
  start_adapter();
  fk_pause_watch(fk, 1);
  ck_assert_int_eq(fr_adapter_sandbox_delete(ad, "sb-gone", "req-del", on_deleted, &d), 0);
  p = fr_adapter_pod(ad, "sb-gone");
  ck_assert_ptr_nonnull(p);
  ck_assert_int_eq(fr_adapter_pod_leaving(ad, p), 1);
  wait_for(flag_set, &d.calls, WAIT_MS, "the delete's callback");
  ck_assert_int_eq(d.calls, 1);
  ck_assert_int_eq(d.status, 200);
  ck_assert_str_eq(d.message, "");
  ck_assert_str_eq(path_pod(fk_nth(fk, "DELETE", FK_PODS, 0)), "sb-gone");
  ck_assert_ptr_null(fk_pod(fk, "sb-gone"));
  fk_pause_watch(fk, 0);
  wait_for(pod_gone, "sb-gone", WAIT_MS, "the pod to leave the cache");
  finish_test();
}
END_TEST

/* ------------------------------------------------------------ expiry */

struct expiry_arg {
  const char *pod;
  int64_t want;
};

static int pod_expires_at(void *arg) {
  struct expiry_arg *e = arg;
  const struct fr_pod *p = fr_adapter_pod(ad, e->pod);

  return p != NULL && p->expires_s == e->want;
}

/* An extendable sandbox: its pod's deadline is deadline_s (what the
 * cluster enforces), its expiry annotation the lifetime asked (what the
 * routers enforce), so the expiry can later move up to that deadline. */
START_TEST(deadline_beyond_lifetime_goes_to_the_pod_not_the_expiry) {
  struct fr_sandbox_spec s = spec_of(NULL);
  struct outcome o;
  json_t *body;
  int64_t expires;

  start_adapter();
  s.deadline_s = 3600;
  create(&s, &o);
  wait_requests("POST", FK_PODS, 1);
  body = body_of(fk_nth(fk, "POST", FK_PODS, 0));
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(body, "spec"), "activeDeadlineSeconds")),
                   3600);
  ck_assert_int_eq(fr_time_parse_rfc3339(json_string_value(json_object_get(json_object_get(
                                             json_object_get(body, "metadata"), "annotations"), FR_ANN_EXPIRES)),
                                         &expires), 0);
  ck_assert_int_le(llabs(expires - (fr_wall_ms() / 1000 + 600)), 5);
  ck_assert_ptr_null(json_object_get(json_object_get(body, "spec"), "securityContext"));
  json_decref(body);
  finish_test();
}
END_TEST

static void check_restricted(json_t *spec) {
  json_t *c;
  size_t i;

  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(spec, "securityContext"), "runAsUser")), 1000);
  ck_assert(json_is_true(json_object_get(json_object_get(spec, "securityContext"), "runAsNonRoot")));
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(spec, "securityContext"),
                                                                     "seccompProfile"), "type")),
                   "RuntimeDefault");
  json_array_foreach(json_object_get(spec, "containers"), i, c) {
    ck_assert(json_is_false(json_object_get(json_object_get(c, "securityContext"), "allowPrivilegeEscalation")));
    ck_assert_str_eq(json_string_value(json_array_get(
                         json_object_get(json_object_get(json_object_get(c, "securityContext"), "capabilities"),
                                         "drop"), 0)),
                     "ALL");
  }
}

/* sandbox.run_as_user: cold pods and pool templates carry what Pod
 * Security "restricted" admits. And a pool is known from its create's
 * answer (read-your-own-writes). */
START_TEST(run_as_user_gives_pods_the_restricted_security_context) {
  struct fr_sandbox_spec s = spec_of(NULL);
  struct fr_pool_spec ps;
  struct outcome o;
  struct deleted d;
  json_t *body;

  run_as_user = 1000;
  start_adapter();
  create(&s, &o);
  wait_requests("POST", FK_PODS, 1);
  body = body_of(fk_nth(fk, "POST", FK_PODS, 0));
  check_restricted(json_object_get(body, "spec"));
  json_decref(body);
  memset(&ps, 0, sizeof(ps));
  memset(&d, 0, sizeof(d));
  ps.name = "py";
  ps.image = "python:3.12";
  ps.cpu_m = 500;
  ps.mem_b = 256LL << 20;
  ps.replicas = 1;
  ck_assert_int_eq(fr_adapter_pool_create(ad, &ps, on_deleted, &d), 0);
  wait_for(flag_set, &d.calls, WAIT_MS, "the pool create's answer");
  body = body_of(fk_nth(fk, "POST", "/apis/apps/v1/namespaces/" FK_NS "/replicasets", 0));
  check_restricted(json_object_get(json_object_get(json_object_get(body, "spec"), "template"), "spec"));
  json_decref(body);
  /* The pool is known from the create's answer, before any watch event
   * (this fake's never sends one): a resize right after finds it. */
  ck_assert_int_eq(d.status, 201);
  ck_assert_ptr_nonnull(fr_adapter_pool(ad, "py"));
  finish_test();
}
END_TEST

/* The pool's record as the planner reads it: ready pods and, of them,
 * those reserved (planned by batches, or held by creates in flight). */
static void assert_pool(int64_t ready, int64_t reserved) {
  const struct fr_adapter_pool_view *pv = fr_adapter_pool(ad, "py");

  ck_assert_ptr_nonnull(pv);
  ck_assert_int_eq(pv->ready, ready);
  ck_assert_int_eq(pv->reserved, reserved);
}

/* A create from a pool holds one ready pod reserved on the pool record
 * from its start until its claim is settled (issue 15 item 8: the batch
 * gave its plan's warm reservation back when it started the create, but
 * the ready count drops only when the claim is answered, so plans made
 * while claims were in flight counted the same pods again and their
 * creates went cold in the far cluster they had picked for its warm pods).
 * A lost claim moves on still holding it; a settled claim gives it back as
 * the pod leaves the ready count; a create that goes cold holds nothing
 * while its pod is made. */
START_TEST(claim_in_flight_holds_its_warm_pod_reserved) {
  struct fr_sandbox_spec s = spec_of("py");
  struct fr_pool_spec ps;
  struct outcome o[3];
  struct deleted d;

  fk_add_pod(fk, fk_warm_pod("warm-a", "py"));
  fk_add_pod(fk, fk_warm_pod("warm-b", "py"));
  start_adapter();
  memset(&ps, 0, sizeof(ps));
  memset(&d, 0, sizeof(d));
  ps.name = "py";
  ps.image = "python:3.12";
  ps.cpu_m = 500;
  ps.mem_b = 256LL << 20;
  ps.replicas = 2;
  ck_assert_int_eq(fr_adapter_pool_create(ad, &ps, on_deleted, &d), 0);
  wait_for(flag_set, &d.calls, WAIT_MS, "the pool create's answer");
  ck_assert_int_eq(d.status, 201);
  assert_pool(2, 0);

  /* Held from the start, before the create's first loop turn... */
  fk_script(fk, "PATCH", 1, FK_HOLD, NULL);
  create(&s, &o[0]);
  assert_pool(2, 1);
  /* ...and while its claim is in flight (the pod still counts ready). */
  wait_held(1);
  assert_pool(2, 1);
  /* Lost: the create claims the other pod, still holding one. */
  ck_assert_int_eq(fk_answer_held(fk, 409, CONFLICT_MSG), 0);
  wait_for(outcome_done, &o[0], WAIT_MS, "the create's callback");
  ck_assert_int_eq(o[0].err, FR_SB_OK);
  ck_assert_int_eq(o[0].warm, 1);
  ck_assert_int_eq(fk_count(fk, "PATCH", FK_PODS), 2);
  /* Claimed: out of the ready count and out of the reservation at once
   * (the 409 was scripted, so the first pod is still warm). */
  assert_pool(1, 0);
  create_and_wait(&s, &o[1]);
  ck_assert_int_eq(o[1].warm, 1);
  ck_assert_str_ne(o[1].pod, o[0].pod);
  assert_pool(0, 0);

  /* No ready pod: the create goes cold and gives its hold back. */
  fk_script_path(fk, "POST", FK_PODS, 1, FK_HOLD, NULL);
  create(&s, &o[2]);
  assert_pool(0, 1);
  wait_held(1);
  assert_pool(0, 0);
  ck_assert_int_eq(fk_answer_held(fk, 403, "pods \"sb-x\" is forbidden: exceeded quota: q"), 0);
  wait_for(outcome_done, &o[2], WAIT_MS, "the cold create's callback");
  ck_assert_int_eq(o[2].err, FR_SB_NO_ROOM);
  assert_pool(0, 0);
  ck_assert_int_eq(fr_adapter_inflight(ad), 0);
  finish_test();
}
END_TEST

/* A new expiry is one merge patch: the annotation every router's reaper
 * reads and, when it comes earlier, activeDeadlineSeconds counted from the
 * pod's start, which the cluster enforces; the cache then shows it. */
START_TEST(set_expiry_patches_annotation_and_deadline) {
  struct deleted d;
  struct expiry_arg e;
  const struct fr_pod *p;
  char when[21];
  json_t *j;
  int64_t expires;

  memset(&d, 0, sizeof(d));
  fk_add_pod(fk, fk_sandbox_pod("sb-time", "acme", "job-1"));
  start_adapter();
  ck_assert_int_eq(fr_adapter_sandbox_set_expiry(ad, "sb-none", 1, NULL, on_deleted, &d), -ENOENT);
  p = fr_adapter_pod(ad, "sb-time");
  ck_assert_ptr_nonnull(p);
  ck_assert_int_ge(p->start_s, 0);
  expires = p->start_s + 4000;
  ck_assert_int_eq(fr_adapter_sandbox_set_expiry(ad, "sb-time", expires, "req-t", on_deleted, &d), 0);
  ck_assert_int_eq(d.calls, 0);
  wait_for(flag_set, &d.calls, WAIT_MS, "the patch's callback");
  ck_assert_int_eq(d.status, 200);
  ck_assert_str_eq(path_pod(fk_nth(fk, "PATCH", FK_PODS, 0)), "sb-time");
  j = body_of(fk_nth(fk, "PATCH", FK_PODS, 0));
  fr_time_rfc3339(expires, when);
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(j, "metadata"), "annotations"),
                                                     FR_ANN_EXPIRES)),
                   when);
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "spec"), "activeDeadlineSeconds")), 4000);
  ck_assert_ptr_null(json_object_get(json_object_get(j, "metadata"), "labels"));
  json_decref(j);
  e.pod = "sb-time";
  e.want = expires;
  wait_for(pod_expires_at, &e, WAIT_MS, "the new expiry in the cache");
  /* Later: the annotation only (an API server never raises a deadline). */
  d.calls = 0;
  ck_assert_int_eq(fr_adapter_sandbox_set_expiry(ad, "sb-time", expires + 2000, "req-t", on_deleted, &d), 0);
  wait_for(flag_set, &d.calls, WAIT_MS, "the second patch's callback");
  j = body_of(fk_nth(fk, "PATCH", FK_PODS, 1));
  ck_assert_ptr_null(json_object_get(j, "spec"));
  json_decref(j);
  e.want = expires + 2000;
  wait_for(pod_expires_at, &e, WAIT_MS, "the later expiry in the cache");
  /* Earlier again: the deadline goes down with it. */
  d.calls = 0;
  ck_assert_int_eq(fr_adapter_sandbox_set_expiry(ad, "sb-time", expires - 1000, "req-t", on_deleted, &d), 0);
  wait_for(flag_set, &d.calls, WAIT_MS, "the third patch's callback");
  j = body_of(fk_nth(fk, "PATCH", FK_PODS, 2));
  ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "spec"), "activeDeadlineSeconds")), 3000);
  json_decref(j);
  finish_test();
}
END_TEST

/* ------------------------------------------------------------ callbacks */

/* Claims, a cold create and an immediate failure started back to back:
 * no callback inside fr_adapter_sandbox_create, each exactly once. */
START_TEST(create_callbacks_deferred_and_run_once) {
  struct fr_sandbox_spec warm = spec_of("py"), cold = spec_of(NULL), noimage = spec_of(NULL);
  struct outcome o[4];
  char pod[64];
  int i;

  noimage.image = NULL;
  fk_add_pod(fk, fk_warm_pod("warm-a", "py"));
  fk_add_pod(fk, fk_warm_pod("warm-b", "py"));
  start_adapter();
  create(&warm, &o[0]);
  create(&warm, &o[1]);
  create(&noimage, &o[2]);
  create(&cold, &o[3]);
  ck_assert_int_eq(fr_adapter_inflight(ad), 4);
  wait_for(outcome_done, &o[0], WAIT_MS, "claim 1");
  wait_for(outcome_done, &o[1], WAIT_MS, "claim 2");
  wait_for(outcome_done, &o[2], WAIT_MS, "the failure");
  wait_requests("POST", FK_PODS, 1);
  posted_pod(0, pod, sizeof(pod));
  make_ready(pod);
  wait_for(outcome_done, &o[3], WAIT_MS, "the cold create");

  for (i = 0; i < 4; i++) {
    ck_assert_int_eq(o[i].calls, 1);
    ck_assert_int_eq(o[i].calls_in_create, 0);
  }
  ck_assert_int_eq(o[0].err, FR_SB_OK);
  ck_assert_int_eq(o[1].err, FR_SB_OK);
  ck_assert_int_eq(o[0].warm + o[1].warm, 2);
  ck_assert_str_ne(o[0].pod, o[1].pod); /* one pod, one claim */
  ck_assert_int_eq(o[2].err, FR_SB_NO_ROOM);
  ck_assert_int_eq(o[3].err, FR_SB_OK);
  ck_assert_int_eq(o[3].warm, 0);
  ck_assert_str_eq(o[3].pod, pod);
  ck_assert_int_eq(fk_count(fk, "PATCH", FK_PODS), 2);
  ck_assert_int_eq(fr_adapter_inflight(ad), 0);
  finish_test();
  /* Nothing more came while everything was torn down. */
  for (i = 0; i < 4; i++)
    ck_assert_int_eq(o[i].calls, 1);
}
END_TEST

/* The adapter freed with creates in every state (about to start, claim
 * PATCH out, create POST out, waiting for readiness): each callback runs
 * exactly once, with FR_SB_UNAVAILABLE, before fr_adapter_free returns,
 * and nothing runs after; the loop closes and ASan finds no leak. */
START_TEST(adapter_free_with_creates_in_flight_calls_each_once) {
  struct fr_sandbox_spec warm = spec_of("py"), cold = spec_of(NULL);
  struct outcome waiting, posting, claiming, starting;
  struct outcome *all[4] = {&waiting, &posting, &claiming, &starting};
  char pod[64];
  int freed = 0, i;

  fk_add_pod(fk, fk_warm_pod("warm-a", "py"));
  start_adapter();
  create(&cold, &waiting);
  wait_requests("POST", FK_PODS, 1);
  posted_pod(0, pod, sizeof(pod));
  wait_for(pod_cached, pod, WAIT_MS, "the created pod in the cache");
  fk_script(fk, "POST", 1, FK_HOLD, NULL);
  create(&cold, &posting);
  wait_held(1);
  fk_script(fk, "PATCH", 1, FK_HOLD, NULL);
  create(&warm, &claiming);
  wait_held(2);
  create(&cold, &starting);
  ck_assert_int_eq(fr_adapter_inflight(ad), 4);
  for (i = 0; i < 4; i++)
    ck_assert_int_eq(all[i]->calls, 0);

  fr_adapter_free(ad, on_freed, &freed);
  ad = NULL;
  ck_assert_int_eq(freed, 0);
  for (i = 0; i < 4; i++) {
    ck_assert_int_eq(all[i]->calls, 1);
    ck_assert_int_eq(all[i]->err, FR_SB_UNAVAILABLE);
  }
  wait_for(flag_set, &freed, WAIT_MS, "the adapter's free");
  ck_assert_int_eq(freed, 1);
  finish_test();
  for (i = 0; i < 4; i++)
    ck_assert_int_eq(all[i]->calls, 1);
}
END_TEST

/* ------------------------------------------------------------ Secrets */

#define SECRET_PATH "/api/v1/namespaces/" FK_NS "/secrets/"

struct secret_outcome {
  int calls, calls_in_get;
  enum fr_secret_err err;
  char key[64];
  char message[600];
  char *values;             /* the values, as compact sorted JSON */
};

static void on_secret(const struct fr_secret_result *r, void *arg) {
  struct secret_outcome *o = arg;

  if (abandoned)
    return;
  o->calls++;
  o->calls_in_get += in_create;
  o->err = r->err;
  snprintf(o->key, sizeof(o->key), "%s", r->key ? r->key : "");
  snprintf(o->message, sizeof(o->message), "%s", r->message ? r->message : "");
  free(o->values);
  o->values = r->values ? json_dumps(r->values, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
}

static int secret_done(void *arg) {
  return ((struct secret_outcome *)arg)->calls > 0;
}

/* Reads <keys> of Secret <name>; its callback must not run inside the call. */
static void secret_get(const char *name, const char *const *keys, size_t n, struct secret_outcome *o) {
  int rc;

  memset(o, 0, sizeof(*o));
  in_create = 1;
  rc = fr_adapter_secret_get(ad, name, keys, n, "req-test", on_secret, o, NULL);
  in_create = 0;
  ck_assert_int_eq(rc, 0);
  ck_assert_int_eq(o->calls, 0);
}

static void secret_get_and_wait(const char *name, const char *const *keys, size_t n, struct secret_outcome *o) {
  secret_get(name, keys, n, o);
  wait_for(secret_done, o, WAIT_MS, "the Secret read's callback");
  ck_assert_int_eq(o->calls, 1);
  ck_assert_int_eq(o->calls_in_get, 0);
}

/* data: "HF_TOKEN" = "hf-1", "OTHER" = "x", "NUL" = "a\0b", "LATIN1" = "\xff". */
static void add_team_secret(void) {
  json_t *data = json_pack("{s:s,s:s,s:s,s:s}", "HF_TOKEN", "aGYtMQ==", "OTHER", "eA==", "NUL", "YQBi",
                           "LATIN1", "/w==");

  fk_add_secret(fk, "team-sec", data);
  json_decref(data);
}

/* Only the keys asked for come back, decoded; one GET of that Secret. */
START_TEST(secret_get_returns_the_keys_asked_decoded) {
  static const char *const keys[] = {"HF_TOKEN"};
  struct secret_outcome o;

  add_team_secret();
  start_adapter();
  secret_get_and_wait("team-sec", keys, 1, &o);
  ck_assert_int_eq(o.err, FR_SECRET_OK);
  ck_assert_str_eq(o.values, "{\"HF_TOKEN\":\"hf-1\"}");
  ck_assert_str_eq(o.key, "");
  ck_assert_int_eq(fk_count(fk, "GET", SECRET_PATH "team-sec"), 1);
  free(o.values);
  finish_test();
}
END_TEST

/* A missing key or Secret is NOT_FOUND naming it; a value no env var can
 * hold is INVALID; no message quotes a value. */
START_TEST(secret_get_missing_or_unusable_is_named_never_quoted) {
  static const char *const missing[] = {"HF_TOKEN", "NOPE"}, *const nul[] = {"NUL"}, *const latin[] = {"LATIN1"};
  struct secret_outcome o;

  add_team_secret();
  start_adapter();
  secret_get_and_wait("team-sec", missing, 2, &o);
  ck_assert_int_eq(o.err, FR_SECRET_NOT_FOUND);
  ck_assert_str_eq(o.key, "NOPE");
  ck_assert_ptr_nonnull(strstr(o.message, "NOPE"));
  ck_assert_ptr_null(strstr(o.message, "hf-1"));
  ck_assert_ptr_null(o.values);
  secret_get_and_wait("no-such-secret", missing, 1, &o);
  ck_assert_int_eq(o.err, FR_SECRET_NOT_FOUND);
  ck_assert_str_eq(o.key, "");
  ck_assert_ptr_nonnull(strstr(o.message, "no Secret no-such-secret"));
  secret_get_and_wait("team-sec", nul, 1, &o);
  ck_assert_int_eq(o.err, FR_SECRET_INVALID);
  ck_assert_str_eq(o.key, "NUL");
  secret_get_and_wait("team-sec", latin, 1, &o);
  ck_assert_int_eq(o.err, FR_SECRET_INVALID);
  ck_assert_str_eq(o.key, "LATIN1");
  finish_test();
}
END_TEST

/* 403 (RBAC) and 503 are UNAVAILABLE, saying which; no retry. */
START_TEST(secret_get_forbidden_or_5xx_is_unavailable) {
  static const char *const keys[] = {"HF_TOKEN"};
  struct secret_outcome o;

  add_team_secret();
  start_adapter();
  fk_script_path(fk, "GET", SECRET_PATH, 1, 403, "secrets is forbidden");
  secret_get_and_wait("team-sec", keys, 1, &o);
  ck_assert_int_eq(o.err, FR_SECRET_UNAVAILABLE);
  ck_assert_ptr_nonnull(strstr(o.message, "forbidden"));
  fk_script_path(fk, "GET", SECRET_PATH, 1, 503, "etcd is gone");
  secret_get_and_wait("team-sec", keys, 1, &o);
  ck_assert_int_eq(o.err, FR_SECRET_UNAVAILABLE);
  ck_assert_ptr_nonnull(strstr(o.message, "503"));
  ck_assert_int_eq(fk_count(fk, "GET", SECRET_PATH), 2);
  finish_test();
}
END_TEST

/* The adapter freed with a read out: its callback runs once, UNAVAILABLE,
 * before fr_adapter_free returns; a cancelled read never calls back. */
START_TEST(adapter_free_with_secret_read_in_flight_calls_it_once) {
  static const char *const keys[] = {"HF_TOKEN"};
  struct secret_outcome held, cancelled;
  struct fr_secret_call *call = NULL;
  int freed = 0;

  add_team_secret();
  start_adapter();
  fk_script_path(fk, "GET", SECRET_PATH, 2, FK_HOLD, NULL);
  secret_get("team-sec", keys, 1, &held);
  memset(&cancelled, 0, sizeof(cancelled));
  ck_assert_int_eq(fr_adapter_secret_get(ad, "team-sec", keys, 1, NULL, on_secret, &cancelled, &call), 0);
  wait_held(2);
  fr_secret_call_cancel(call);
  fr_adapter_free(ad, on_freed, &freed);
  ad = NULL;
  ck_assert_int_eq(held.calls, 1);
  ck_assert_int_eq(held.err, FR_SECRET_UNAVAILABLE);
  ck_assert_int_eq(cancelled.calls, 0);
  wait_for(flag_set, &freed, WAIT_MS, "the adapter's free");
  finish_test();
  ck_assert_int_eq(held.calls, 1);
  ck_assert_int_eq(cancelled.calls, 0);
}
END_TEST

/* ------------------------------------------------------------ suite */

/* ------------------------------------------------------------ commit markers */

/* A running sandbox of batch <batch> created or claimed <age_s> ago. */
static json_t *batch_pod(const char *name, const char *batch, int64_t age_s) {
  json_t *pod = fk_sandbox_pod(name, "acme", name);
  json_t *meta = json_object_get(pod, "metadata");
  char at[21], exp[21];

  fr_time_rfc3339(fr_wall_ms() / 1000 - age_s, at);
  fr_time_rfc3339(fr_wall_ms() / 1000 + 3600, exp);
  if (batch != NULL)
    json_object_set_new(json_object_get(meta, "labels"), FR_LABEL_BATCH, json_string(batch));
  json_object_set_new(meta, "annotations", json_pack("{s:s,s:s}", FR_ANN_CREATED, at, FR_ANN_EXPIRES, exp));
  return pod;
}

/* Marker of <batch> in <state> whose progress was <age_s> ago. */
static json_t *marker(const char *batch, const char *state, int64_t age_s) {
  char name[64], at[21], exp[21];

  snprintf(name, sizeof(name), "fr-batch-%s", batch);
  fr_time_rfc3339(fr_wall_ms() / 1000 - age_s, at);
  fr_time_rfc3339(fr_wall_ms() / 1000 + 3600, exp);
  return json_pack("{s:s,s:s,s:{s:s,s:s,s:{s:s}},s:{s:s,s:s,s:s}}", "apiVersion", "v1", "kind", "ConfigMap",
                   "metadata", "name", name, "namespace", FK_NS, "labels", FR_LABEL_BATCH, batch, "data",
                   "state", state, "progress", at, "expires", exp);
}

static int deleted_pod(const char *pod) {
  int i, n = fk_count(fk, "DELETE", NULL);

  for (i = 0; i < n; i++)
    if (strcmp(path_pod(fk_nth(fk, "DELETE", NULL, i)), pod) == 0)
      return 1;
  return 0;
}

static int lost_deleted(void *arg) {
  return deleted_pod(arg);
}

/* The reaper's rule: a pod of a batch with no commit marker goes once the
 * timeout has passed since its creation or claim; a committed marker, a
 * pending marker with fresh progress, a young pod, and a pod with no
 * batch (made before markers existed) all stay. All are due in the same
 * sweep, so once the lost one is deleted the others were looked at. */
START_TEST(reaper_uncommitted_batch_deleted_after_timeout_others_kept) {
  fk_add_pod(fk, batch_pod("sb-lost", "lost0000", 100));
  fk_add_pod(fk, batch_pod("sb-committed", "done0000", 100));
  fk_add_configmap(fk, marker("done0000", "committed", 100));
  fk_add_pod(fk, batch_pod("sb-slow", "slow0000", 100));
  fk_add_configmap(fk, marker("slow0000", "pending", 1));
  fk_add_pod(fk, batch_pod("sb-young", "young000", 1));
  fk_add_pod(fk, batch_pod("sb-legacy", NULL, 100));
  start_adapter();
  wait_for(lost_deleted, "sb-lost", WAIT_MS, "the reaper's delete of the uncommitted pod");
  ck_assert_int_eq(fk_count(fk, "DELETE", FK_PODS), 1);
  ck_assert_ptr_nonnull(fk_pod(fk, "sb-committed"));
  ck_assert_ptr_nonnull(fk_pod(fk, "sb-slow"));
  ck_assert_ptr_nonnull(fk_pod(fk, "sb-young"));
  ck_assert_ptr_nonnull(fk_pod(fk, "sb-legacy"));
  finish_test();
}
END_TEST

/* A stale pending marker (its router died) protects nothing: the pod
 * goes a timeout after the marker's last progress. And a marker whose
 * pods are gone is deleted. */
START_TEST(reaper_stale_pending_marker_pod_deleted_then_marker) {
  fk_add_pod(fk, batch_pod("sb-dead", "dead0000", 100));
  fk_add_configmap(fk, marker("dead0000", "pending", 40));
  fk_add_configmap(fk, marker("gone0000", "committed", 100));
  start_adapter();
  wait_for(lost_deleted, "sb-dead", WAIT_MS, "the reaper's delete of the stale batch's pod");
  wait_for(lost_deleted, "fr-batch-gone0000", WAIT_MS, "the delete of the marker with no pods");
  finish_test();
}
END_TEST

/* A held batch is never reaped here, and its pending marker is written
 * (then renewed) once it has been held a third of the timeout. */
static int marker_written(void *arg) {
  return fk_configmap(fk, arg) != NULL;
}

START_TEST(batch_held_renews_pending_marker_and_is_not_reaped) {
  json_t *m;

  commit_timeout_s = 3;
  fk_add_pod(fk, batch_pod("sb-held", "held0000", 100));
  start_adapter();
  fr_adapter_batch_hold(ad, "held0000", 1);
  wait_for(marker_written, "fr-batch-held0000", WAIT_MS, "the pending marker");
  m = fk_configmap(fk, "fr-batch-held0000");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(m, "data"), "state")), "pending");
  ck_assert_str_eq(json_string_value(json_object_get(
                       json_object_get(json_object_get(m, "metadata"), "labels"), FR_LABEL_BATCH)),
                   "held0000");
  ck_assert_int_eq(fk_count(fk, "DELETE", FK_PODS), 0);
  ck_assert_ptr_nonnull(fk_pod(fk, "sb-held"));
  fr_adapter_batch_hold(ad, "held0000", 0);
  finish_test();
}
END_TEST

struct committed {
  int calls, status;
};

static void on_committed(int status, const char *message, void *arg) {
  struct committed *c = arg;

  (void)message;
  if (abandoned)
    return;
  c->calls++;
  c->status = status;
}

/* The commit marker: created when absent; over a pending one (409), a
 * merge patch makes it committed; the callback comes later, once. */
START_TEST(batch_commit_writes_marker_over_pending) {
  struct committed c1 = {0, 0}, c2 = {0, 0};
  json_t *m;

  fk_add_configmap(fk, marker("pend0000", "pending", 1));
  start_adapter();
  ck_assert_int_eq(fr_adapter_batch_commit(ad, "new00000", fr_wall_ms() / 1000 + 60, on_committed, &c1), 0);
  ck_assert_int_eq(fr_adapter_batch_commit(ad, "pend0000", fr_wall_ms() / 1000 + 60, on_committed, &c2), 0);
  ck_assert_int_eq(c1.calls + c2.calls, 0);
  wait_for(flag_set, &c1.calls, WAIT_MS, "the first commit");
  wait_for(flag_set, &c2.calls, WAIT_MS, "the second commit");
  ck_assert_int_eq(c1.status, 201);
  ck_assert_int_eq(c2.status, 200);
  m = fk_configmap(fk, "fr-batch-new00000");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(m, "data"), "state")), "committed");
  m = fk_configmap(fk, "fr-batch-pend0000");
  ck_assert_str_eq(json_string_value(json_object_get(json_object_get(m, "data"), "state")), "committed");
  ck_assert_int_eq(fk_count(fk, "PATCH", "/api/v1/namespaces/" FK_NS "/configmaps/fr-batch-pend0000"), 1);
  finish_test();
}
END_TEST

/* A claimed warm pod carries the batch id too; with no commit marker it
 * is deleted a timeout after the claim (it holds the env of a user it
 * was never handed to). */
START_TEST(claim_carries_batch_label_and_uncommitted_claim_is_reaped) {
  struct fr_sandbox_spec sp = spec_of("py");
  struct outcome o;

  commit_timeout_s = 3;
  sp.batch = "warm0000";
  fk_add_pod(fk, fk_warm_pod("warm-a", "py"));
  start_adapter();
  create_and_wait(&sp, &o);
  ck_assert_int_eq(o.err, FR_SB_OK);
  ck_assert_int_eq(o.warm, 1);
  ck_assert_str_eq(label_of(fk_pod(fk, "warm-a"), FR_LABEL_BATCH), "warm0000");
  ck_assert_int_eq(fk_count(fk, "DELETE", FK_PODS), 0);
  wait_for(lost_deleted, "warm-a", WAIT_MS, "the reaper's delete of the uncommitted claim");
  finish_test();
}
END_TEST

/* Creates carry the batch id as a label. */
START_TEST(create_carries_batch_label) {
  struct fr_sandbox_spec sp;
  struct outcome o;
  json_t *body;

  start_adapter();
  memset(&sp, 0, sizeof(sp));
  sp.tenant = "acme";
  sp.name = "job";
  sp.image = "img";
  sp.cpu_m = 100;
  sp.mem_b = 1 << 20;
  sp.lifetime_s = 60;
  sp.ready_timeout_ms = 200;
  sp.batch = "lbl00000";
  create(&sp, &o);
  wait_for(outcome_done, &o, WAIT_MS, "the create's callback");
  body = body_of(fk_nth(fk, "POST", FK_PODS, 0));
  ck_assert_str_eq(json_string_value(json_object_get(
                       json_object_get(json_object_get(body, "metadata"), "labels"), FR_LABEL_BATCH)),
                   "lbl00000");
  json_decref(body);
  finish_test();
}
END_TEST

static Suite *sandbox_suite(void) {
  Suite *s = suite_create("sandbox");
  TCase *tc = tcase_create("adapter");

  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, claim_conflict_409_after_watch_update_moves_to_next_warm_pod);
  tcase_add_test(tc, claim_conflicts_exhausted_cold_starts);
  tcase_add_test(tc, claim_answered_before_watch_is_visible);
  tcase_add_test(tc, claim_in_flight_holds_its_warm_pod_reserved);
  tcase_add_test(tc, create_quota_403_reports_no_room);
  tcase_add_test(tc, create_unschedulable_reports_no_room);
  tcase_add_test(tc, create_name_collision_409_retries_with_new_name);
  tcase_add_test(tc, create_with_pod_options_posts_them);
  tcase_add_test(tc, fit_slots_names_what_the_cluster_lacks);
  tcase_add_test(tc, create_not_ready_in_time_times_out_and_deletes);
  tcase_add_test(tc, create_pod_failed_before_ready_reports_failed_and_deletes);
  tcase_add_test(tc, create_pod_deleted_while_waiting_reports_failed);
  tcase_add_test(tc, claim_server_error_reports_unavailable_and_frees_pod);
  tcase_add_test(tc, cluster_down_while_waiting_gives_up);
  tcase_add_test(tc, delete_accepted_hides_pod_until_gone);
  tcase_add_test(tc, set_expiry_patches_annotation_and_deadline);
  tcase_add_test(tc, deadline_beyond_lifetime_goes_to_the_pod_not_the_expiry);
  tcase_add_test(tc, run_as_user_gives_pods_the_restricted_security_context);
  tcase_add_test(tc, create_callbacks_deferred_and_run_once);
  tcase_add_test(tc, adapter_free_with_creates_in_flight_calls_each_once);
  tcase_add_test(tc, secret_get_returns_the_keys_asked_decoded);
  tcase_add_test(tc, secret_get_missing_or_unusable_is_named_never_quoted);
  tcase_add_test(tc, secret_get_forbidden_or_5xx_is_unavailable);
  tcase_add_test(tc, adapter_free_with_secret_read_in_flight_calls_it_once);
  tcase_add_test(tc, reaper_uncommitted_batch_deleted_after_timeout_others_kept);
  tcase_add_test(tc, reaper_stale_pending_marker_pod_deleted_then_marker);
  tcase_add_test(tc, batch_held_renews_pending_marker_and_is_not_reaped);
  tcase_add_test(tc, batch_commit_writes_marker_over_pending);
  tcase_add_test(tc, create_carries_batch_label);
  tcase_add_test(tc, claim_carries_batch_label_and_uncommitted_claim_is_reaped);
  suite_add_tcase(s, tc);
  {
    /* Bugs the suite found, fixed; slower cases (breaker cool-down). */
    TCase *fixed = tcase_create("fixed_bugs");
    tcase_add_checked_fixture(fixed, setup, teardown);
    tcase_set_timeout(fixed, 60);
    tcase_add_test(fixed, claim_conflict_409_moves_to_next_warm_pod);
    tcase_add_test(fixed, delete_failure_keeps_pod_visible);
    tcase_add_test(fixed, cluster_down_while_creating_gives_up_and_cleans_up);
    suite_add_tcase(s, fixed);
  }
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(sandbox_suite());
  int failed;

  signal(SIGPIPE, SIG_IGN);
  fr_log_set_level(getenv("DBG") != NULL ? FR_LOG_DEBUG : FR_LOG_ERROR);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
