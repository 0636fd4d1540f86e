/* test_agent.c - the adapter's raw agent call (fr_adapter_agent_call)
 * when memory runs out half-way through copying the caller's strings.
 *
 * The call copies method, path, content type, headers and request id
 * (strdup each) into its record. When one copy fails, the record goes
 * through its own free, which frees the copies already made; freeing the
 * bare record instead leaked them.
 *
 * Out of memory is made deterministic without anything in the product:
 * this test links with -Wl,--wrap=strdup,--wrap=free (see CMakeLists.txt),
 * so the library's strdup() and free() calls land here. While armed,
 * __wrap_strdup fails the n-th copy and remembers every copy it made;
 * __wrap_free forgets a copy when it is freed. The case then asserts that
 * the call answered -ENOMEM and that no copy is left.
 *
 * Against the fake Kubernetes API server of test_sandbox (one sandbox pod
 * with the agent label, the adapter configured with an agent key).
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "fake_kube.h"
#include "fr/adapter.h"
#include "fr/log.h"
#include "fr_test_loop.h"

#define WAIT_MS 10000
#define POD "sb-agent-1"

/* ------------------------------------------------------------ the wraps */

char *__real_strdup(const char *s);
void __real_free(void *p);
char *__wrap_strdup(const char *s);
void __wrap_free(void *p);

#define MAX_COPIES 32

static struct {
  int armed;
  int fail_at;           /* 1-based: which strdup fails (0: none) */
  int calls;             /* strdups while armed */
  void *live[MAX_COPIES];/* copies made while armed and not freed yet */
  int nlive;
} wrap;

char *__wrap_strdup(const char *s) {
  char *d;

  if (!wrap.armed)
    return __real_strdup(s);
  if (++wrap.calls == wrap.fail_at)
    return NULL;
  d = __real_strdup(s);
  if (d != NULL && wrap.nlive < MAX_COPIES)
    wrap.live[wrap.nlive++] = d;
  return d;
}

void __wrap_free(void *p) {
  int i;

  for (i = 0; p != NULL && i < wrap.nlive; i++) {
    if (wrap.live[i] == p) {
      wrap.live[i] = wrap.live[--wrap.nlive];
      break;
    }
  }
  __real_free(p);
}

static void arm(int fail_at) {
  memset(&wrap, 0, sizeof(wrap));
  wrap.fail_at = fail_at;
  wrap.armed = 1;
}

static void disarm(void) {
  wrap.armed = 0;
}

/* ------------------------------------------------------------ fixture */

static uv_loop_t loop;
static char dir[64];
static struct fake_kube *fk;
static struct fr_adapter *ad;
static const struct fr_adapter_agent agent = {"agent:test", 49983, "test-key", 8, NULL, 0};

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

/* Runs the loop until <cond>(<arg>) holds; fails the test after WAIT_MS. */
static void wait_for(fr_test_done_cb cond, void *arg, const char *what) {
  struct waiter w = {cond, arg, 0};
  uv_timer_t deadline;
  int rc;

  uv_timer_init(&loop, &deadline);
  deadline.data = &w;
  uv_timer_start(&deadline, on_deadline, WAIT_MS, 0);
  rc = fr_test_run_until_cb(&loop, waiter_done, &w);
  uv_close((uv_handle_t *)&deadline, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
  ck_assert_msg(rc == 0 && !w.expired, "gave up waiting for %s", what);
}

static int pod_cached(void *arg) {
  (void)arg;
  return fr_adapter_pod(ad, POD) != NULL;
}

static int flag_set(void *arg) {
  return *(int *)arg != 0;
}

static void on_freed(void *arg) {
  (*(int *)arg)++;
}

/* The fake with one sandbox pod running an agent, and the adapter on it
 * with its caches synced. */
static void setup(void) {
  struct fr_adapter_opts opts;
  char err[256] = "";
  json_t *pod;

  ck_assert_int_eq(uv_loop_init(&loop), 0);
  snprintf(dir, sizeof(dir), "/tmp/test_agent.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  ck_assert_int_eq(fk_new(&loop, dir, &fk), 0);
  pod = fk_sandbox_pod(POD, "acme", "job-1");
  json_object_set_new(json_object_get(json_object_get(pod, "metadata"), "labels"), FR_LABEL_AGENT,
                      json_string("49983"));
  fk_add_pod(fk, pod);
  memset(&opts, 0, sizeof(opts));
  opts.name = "fake";
  opts.region = "test";
  opts.kubeconfig = fk_kubeconfig(fk);
  opts.ns = FK_NS;
  opts.agent = &agent;
  ck_assert_msg(fr_adapter_new(&loop, &opts, &ad, err, sizeof(err)) == 0, "fr_adapter_new: %s", err);
  ck_assert_int_eq(fr_adapter_start(ad), 0);
  wait_for(pod_cached, NULL, "the agent pod in the cache");
  ck_assert(fr_adapter_pod_has_agent(ad, fr_adapter_pod(ad, POD)));
}

static void teardown(void) {
  char path[128];
  int freed = 0;

  disarm();
  fr_adapter_free(ad, on_freed, &freed);
  ad = NULL;
  wait_for(flag_set, &freed, "the adapter's free");
  freed = 0;
  fk_free(fk, on_freed, &freed);
  fk = NULL;
  wait_for(flag_set, &freed, "the fake's free");
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  snprintf(path, sizeof(path), "%s/kubeconfig", dir);
  unlink(path);
  rmdir(dir);
}

/* ------------------------------------------------------------ cases */

static void on_done(const struct fr_agent_result *res, void *arg) {
  (void)res;
  (void)arg;
}

/* Every string the call copies is given. */
static struct fr_agent_call_opts call_opts(void) {
  struct fr_agent_call_opts o;

  memset(&o, 0, sizeof(o));
  o.method = "POST";
  o.path = "/process.Process/List";
  o.content_type = "application/json";
  o.headers = "Connect-Protocol-Version: 1";
  o.body = "{}";
  o.body_len = 2;
  o.request_id = "req-oom";
  o.on_done = on_done;
  return o;
}

/* The control: with nothing failing the call starts, and its first five
 * strdups are its own copies (the REST client's come after them), so the
 * case below fails each of those in turn. */
START_TEST(agent_call_with_memory_copies_its_strings_first) {
  struct fr_agent_call_opts o = call_opts();
  struct fr_agent_call *call = NULL;
  int rc;

  arm(0);
  rc = fr_adapter_agent_call(ad, POD, &o, &call);
  disarm();
  ck_assert_int_eq(rc, 0);
  ck_assert_ptr_nonnull(call);
  ck_assert_int_ge(wrap.calls, 5);
  ck_assert_str_eq(wrap.live[0], o.method);
  ck_assert_str_eq(wrap.live[1], o.path);
  ck_assert_str_eq(wrap.live[2], o.content_type);
  ck_assert_str_eq(wrap.live[3], o.headers);
  ck_assert_str_eq(wrap.live[4], o.request_id);
  wrap.nlive = 0;
  fr_agent_call_cancel(call);
}
END_TEST

/* Copy n fails: -ENOMEM, nothing started, and the n-1 copies made before
 * it (and any after it) are freed with the record. */
START_TEST(agent_call_copy_fails_frees_the_copies_made) {
  struct fr_agent_call_opts o = call_opts();
  struct fr_agent_call *call = (struct fr_agent_call *)&o; /* must be reset */
  int n = _i, rc;

  arm(n);
  rc = fr_adapter_agent_call(ad, POD, &o, &call);
  disarm();
  ck_assert_int_eq(rc, -ENOMEM);
  ck_assert_ptr_null(call);
  ck_assert_int_ge(wrap.calls, n);
  ck_assert_msg(wrap.nlive == 0, "copy %d failed: %d other copies were not freed", n, wrap.nlive);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("agent");
  TCase *tc = tcase_create("oom");

  tcase_set_timeout(tc, 30);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, agent_call_with_memory_copies_its_strings_first);
  tcase_add_loop_test(tc, agent_call_copy_fails_frees_the_copies_made, 1, 6);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  int failed;

  fr_log_set_level(FR_LOG_ERROR);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
