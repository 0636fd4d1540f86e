/* fr_test_loop.h - run a test's libuv loop until a condition holds.
 *
 * `while (!done) uv_run(loop, UV_RUN_ONCE);` is not enough with libuv 1.44
 * (Debian 12): a ONCE iteration runs the due timers *before* it polls, and it
 * still blocks in the poll afterwards, even when one of those timers just
 * made the condition true. The test then sleeps until the next unrelated
 * event (an exec plugin's 60 s timeout, a process exiting 20 s later). A
 * timer is due at the top of an iteration whenever the code between two
 * uv_run() calls took longer than the timer's delay, which is common under
 * ASan (a fork of a sanitized test process alone takes tens of ms).
 *
 * fr_test_run_until() checks the condition in a prepare handle, which runs
 * after the timers and before the poll, and stops the loop there, so the poll
 * does not block once the condition holds. The prepare handle is unreferenced:
 * a loop with nothing else alive still "runs dry" and is reported.
 *
 * Header-only, for the Check suites.
 */
#ifndef FR_TEST_LOOP_H
#define FR_TEST_LOOP_H

#include <uv.h>

typedef int (*fr_test_done_cb)(void *arg);

struct fr_test_wait {
  uv_prepare_t prep;
  fr_test_done_cb done;
  void *arg;
};

static void fr_test_wait_check(uv_prepare_t *p) {
  struct fr_test_wait *w = p->data;

  if (w->done(w->arg))
    uv_stop(p->loop);
}

/* Runs <loop> until <done>(<arg>) returns non-zero. Returns 0 then, or -1
 * when the loop ran out of work first. May run other callbacks one more loop
 * iteration (the one that closes its own handle). */
static inline int fr_test_run_until_cb(uv_loop_t *loop, fr_test_done_cb done, void *arg) {
  struct fr_test_wait w;
  int rc = 0;

  w.done = done;
  w.arg = arg;
  uv_prepare_init(loop, &w.prep);
  w.prep.data = &w;
  uv_prepare_start(&w.prep, fr_test_wait_check);
  uv_unref((uv_handle_t *)&w.prep);
  while (!done(arg)) {
    if (uv_run(loop, UV_RUN_ONCE) == 0 && !done(arg)) {
      rc = -1;
      break;
    }
  }
  uv_close((uv_handle_t *)&w.prep, NULL);
  uv_run(loop, UV_RUN_NOWAIT);   /* its close */
  return rc;
}

static int fr_test_flag_set(void *arg) {
  return *(const int *)arg != 0;
}

/* Runs <loop> until *<flag> is non-zero; 0, or -1 when the loop ran dry. */
static inline int fr_test_run_until(uv_loop_t *loop, const int *flag) {
  return fr_test_run_until_cb(loop, fr_test_flag_set, (void *)flag);
}

#endif
