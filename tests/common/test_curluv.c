/* test_curluv.c - a libcurl multi driven by libuv (fr/curluv.h) against the
 * HTTP server core (fr/http.h) on 127.0.0.1, both on the test's loop.
 *
 * Callbacks only record what they saw; the tests assert once the loop has
 * run dry, and every test ends with every handle closed and the loop
 * closing cleanly. A watchdog timer turns a hang into a failure.
 */
#include "fr/curluv.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "fr_test_loop.h"

#include "fr/http.h"
#include "fr/turn.h"
#include "fr/util.h"

#define WATCHDOG_MS 10000

struct xfer {
  CURL *easy;
  char body[256];
  size_t body_len;
  int done;              /* done_cb calls */
  CURLcode result;
  long status;
  int in_curl_in_write;  /* fr_curluv_in_curl() inside the write callback */
  int give_up;           /* abandoned inside curl: removed in after_cb */
  int removed;
};

struct fx {
  uv_loop_t loop;
  uv_timer_t watchdog;
  int timed_out;
  struct fr_http_server *srv;
  int port;
  int srv_freed;
  struct fr_http_req *held;   /* a request left unanswered */
  struct fr_curluv cu;
  int cu_open;
  int closed;                 /* close_cb calls */
  int closed_inside_close;    /* close_cb ran inside fr_curluv_close() */
  int multi_after_close;      /* cu.multi still there right after it */
  int after_calls, after_in_curl;
  int ndone, want_done;
  struct xfer x[4];
  int nx;
  /* knobs */
  int close_in_done;          /* close from the first done_cb */
  int close_in_write;         /* close from inside curl's write callback */
  int stop_in_done;           /* take the connection over (CONNECT_ONLY) */
  /* CONNECT_ONLY take-over */
  uv_poll_t io;
  int io_init_rc;
  int send_rc;
  char resp[512];
  size_t resp_len;
};

static struct fx fx;

/* ------------------------------------------------------------ server */

static void on_held_abort(struct fr_http_req *req) {
  fx.held = NULL;
}

static void handler(struct fr_http_req *req, void *arg) {
  if (strcmp(req->path, "/hold") == 0) {
    req->abort_cb = on_held_abort;
    fx.held = req;
  } else if (strcmp(req->path, "/stream") == 0) {
    req->abort_cb = on_held_abort;
    fx.held = req;
    fr_http_stream_begin(req, 200, "text/plain", NULL);
    fr_http_stream_write(req, "abc", 3);
  } else {
    fr_http_respond(req, 200, "text/plain", NULL, "hello", 5);
  }
}

static void on_server_freed(struct fr_http_server *srv, void *arg) {
  fx.srv_freed++;
}

/* ------------------------------------------------------------ client side */

static void on_closed(struct fr_curluv *cu) {
  fx.closed++;
}

static void close_cu(void) {
  int before = fx.closed;

  if (!fx.cu_open)
    return;
  fx.cu_open = 0;
  fr_curluv_close(&fx.cu, on_closed);
  fx.closed_inside_close = fx.closed != before;
  fx.multi_after_close = fx.cu.multi != NULL;
}

/* Ends the test's loop: everything left is closed. */
static void end_all(void) {
  close_cu();
  if (fx.srv != NULL) {
    fr_http_server_free(fx.srv, on_server_freed, NULL);
    fx.srv = NULL;
  }
  uv_close((uv_handle_t *)&fx.watchdog, NULL);
}

static void on_watchdog(uv_timer_t *t) {
  fx.timed_out = 1;
  end_all();
}

static struct xfer *xfer_of(CURL *easy) {
  void *p = NULL;

  curl_easy_getinfo(easy, CURLINFO_PRIVATE, &p);
  return p;
}

static void on_done(struct fr_curluv *cu, CURL *easy, CURLcode result) {
  struct xfer *x = xfer_of(easy);

  x->done++;
  x->result = result;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &x->status);
  fx.ndone++;
  if (fx.stop_in_done) {
    curl_socket_t fd = CURL_SOCKET_BAD;

    fr_curluv_stop(cu);
    curl_easy_getinfo(easy, CURLINFO_ACTIVESOCKET, &fd);
    /* libuv refuses a second poll on a watched fd: curl's must be gone. */
    fx.io_init_rc = uv_poll_init_socket(&fx.loop, &fx.io, fd);
    return;
  }
  curl_multi_remove_handle(cu->multi, easy);
  x->removed = 1;
  if (fx.close_in_done) {
    end_all();
    return;
  }
  if (fx.ndone == fx.want_done)
    end_all();
}

/* The kube.c pattern: handles given up inside curl go here. */
static void on_after(struct fr_curluv *cu) {
  int i;

  fx.after_calls++;
  fx.after_in_curl += fr_curluv_in_curl(cu);
  for (i = 0; i < fx.nx; i++) {
    if (fx.x[i].give_up && !fx.x[i].removed) {
      curl_multi_remove_handle(cu->multi, fx.x[i].easy);
      fx.x[i].removed = 1;
      end_all();
    }
  }
}

static size_t on_write(char *data, size_t size, size_t n, void *arg) {
  struct xfer *x = arg;
  size_t len = size * n;

  if (x->body_len + len < sizeof(x->body)) {
    memcpy(x->body + x->body_len, data, len);
    x->body_len += len;
  }
  x->in_curl_in_write = fr_curluv_in_curl(&fx.cu);
  if (fx.close_in_write && !x->give_up) {
    x->give_up = 1;
    close_cu();
  }
  return len;
}

static struct xfer *add(const char *path, int port, int connect_only) {
  struct xfer *x = &fx.x[fx.nx++];
  char url[128];

  snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
  x->easy = curl_easy_init();
  ck_assert_ptr_nonnull(x->easy);
  curl_easy_setopt(x->easy, CURLOPT_URL, url);
  curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
  curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
  curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
  if (connect_only)
    curl_easy_setopt(x->easy, CURLOPT_CONNECT_ONLY, 1L);
  ck_assert_int_eq(curl_multi_add_handle(fx.cu.multi, x->easy), CURLM_OK);
  return x;
}

static void fx_start(void) {
  memset(&fx, 0, sizeof(fx));
  ck_assert_int_eq(uv_loop_init(&fx.loop), 0);
  ck_assert_int_eq(fr_http_server_new(&fx.loop, NULL, handler, NULL, &fx.srv), 0);
  ck_assert_int_eq(fr_http_server_listen(fx.srv, "127.0.0.1", 0), 0);
  fx.port = fr_http_server_port(fx.srv);
  ck_assert_int_gt(fx.port, 0);
  ck_assert_int_eq(fr_curluv_init(&fx.loop, &fx.cu, on_done, on_after), 0);
  fx.cu_open = 1;
  uv_timer_init(&fx.loop, &fx.watchdog);
  uv_timer_start(&fx.watchdog, on_watchdog, WATCHDOG_MS, 0);
}

/* Runs the loop dry, then checks that everything closed exactly once. */
static void fx_run(void) {
  int i;

  uv_run(&fx.loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(fx.timed_out, 0);
  ck_assert_int_eq(fx.closed, 1);
  ck_assert_int_eq(fx.closed_inside_close, 0);   /* always a later turn */
  ck_assert_ptr_null(fx.cu.multi);
  ck_assert_int_eq(fx.srv_freed, 1);
  ck_assert_int_eq(uv_loop_close(&fx.loop), 0);
  for (i = 0; i < fx.nx; i++)
    curl_easy_cleanup(fx.x[i].easy);
}

/* A port nothing listens on (bound, then released). */
static int free_port(void) {
  struct sockaddr_in sa;
  socklen_t len = sizeof(sa);
  int fd = socket(AF_INET, SOCK_STREAM, 0), port;

  ck_assert_int_ge(fd, 0);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  port = ntohs(sa.sin_port);
  close(fd);
  return port;
}

/* ------------------------------------------------------------ tests */

START_TEST(transfers_each_finished_one_handed_to_done_cb_once) {
  int i;

  fx_start();
  for (i = 0; i < 3; i++)
    add("/hello", fx.port, 0);
  fx.want_done = 3;
  fx_run();
  for (i = 0; i < 3; i++) {
    ck_assert_int_eq(fx.x[i].done, 1);
    ck_assert_int_eq(fx.x[i].result, CURLE_OK);
    ck_assert_int_eq(fx.x[i].status, 200);
    ck_assert_int_eq(fx.x[i].body_len, 5);
    ck_assert_int_eq(memcmp(fx.x[i].body, "hello", 5), 0);
    ck_assert_int_eq(fx.x[i].in_curl_in_write, 1);
  }
  ck_assert_int_ge(fx.after_calls, 1);
  ck_assert_int_eq(fx.after_in_curl, 0);
}
END_TEST

START_TEST(turn_budget_is_per_millisecond_of_loop_time) {
  uv_loop_t loop;
  int i;

  ck_assert_int_eq(uv_loop_init(&loop), 0);
  uv_update_time(&loop);
  for (i = 0; i < FR_TURN_BUDGET && fr_turn_take(&loop); i++)
    ;
  /* uv_now() stands still until the loop updates it: exactly the budget. */
  ck_assert_int_eq(i, FR_TURN_BUDGET);
  while (fr_turn_take(&loop))
    uv_update_time(&loop);      /* spin until a take fails in one ms */
  ck_assert_int_eq(fr_turn_take(&loop), 0);
  usleep(2000);
  uv_update_time(&loop);        /* the loop's clock moved: a new budget */
  ck_assert_int_eq(fr_turn_take(&loop), 1);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

/* Transfers whose sockets come ready after the turn's budget is spent
 * are served from later turns, none lost and none twice. */
START_TEST(transfers_past_the_turn_budget_still_finish_once) {
  int i;

  fx_start();
  fr_turn_set_budget(1);     /* one socket event per millisecond: most wait */
  for (i = 0; i < 4; i++)
    add("/hello", fx.port, 0);
  fx.want_done = 4;
  fx_run();
  fr_turn_set_budget(0);
  for (i = 0; i < 4; i++) {
    ck_assert_int_eq(fx.x[i].done, 1);
    ck_assert_int_eq(fx.x[i].result, CURLE_OK);
    ck_assert_int_eq(fx.x[i].status, 200);
    ck_assert_int_eq(fx.x[i].body_len, 5);
  }
}
END_TEST

START_TEST(connect_refused_reported_to_done_cb) {
  fx_start();
  add("/hello", free_port(), 0);
  fx.want_done = 1;
  fx_run();
  ck_assert_int_eq(fx.x[0].done, 1);
  ck_assert_int_eq(fx.x[0].result, CURLE_COULDNT_CONNECT);
}
END_TEST

START_TEST(close_inside_done_cb_defers_cleanup_and_stops_delivery) {
  fx_start();
  add("/hello", fx.port, 0);
  add("/hold", fx.port, 0);
  fx.close_in_done = 1;
  fx_run();
  ck_assert_int_eq(fx.x[0].done, 1);
  ck_assert_int_eq(fx.x[0].status, 200);
  ck_assert_int_eq(fx.x[1].done, 0);
  /* The multi outlived the call: cleaned up after the drain, not under it. */
  ck_assert_int_eq(fx.multi_after_close, 1);
}
END_TEST

START_TEST(close_inside_write_cb_waits_for_socket_action_to_return) {
  fx_start();
  add("/stream", fx.port, 0);
  fx.close_in_write = 1;
  fx_run();
  ck_assert_int_eq(fx.x[0].in_curl_in_write, 1);
  ck_assert_int_eq(fx.x[0].give_up, 1);
  ck_assert_int_eq(fx.multi_after_close, 1);
  /* after_cb ran outside curl, removed the handle, and nothing was done. */
  ck_assert_int_eq(fx.x[0].removed, 1);
  ck_assert_int_eq(fx.after_in_curl, 0);
  ck_assert_int_eq(fx.x[0].done, 0);
}
END_TEST

static void on_io(uv_poll_t *p, int status, int events) {
  struct xfer *x = &fx.x[0];
  size_t n = 0;
  CURLcode cc;

  for (;;) {
    cc = curl_easy_recv(x->easy, fx.resp + fx.resp_len, sizeof(fx.resp) - 1 - fx.resp_len, &n);
    if (cc != CURLE_OK || n == 0)
      break;
    fx.resp_len += n;
    fx.resp[fx.resp_len] = '\0';
  }
  if (cc == CURLE_AGAIN && strstr(fx.resp, "\r\n\r\nhello") == NULL)
    return;
  uv_close((uv_handle_t *)p, NULL);
  curl_multi_remove_handle(fx.cu.multi, x->easy);
  x->removed = 1;
  end_all();
}

static int connect_done_or_timed_out(void *arg) {
  (void)arg;
  return fx.ndone != 0 || fx.timed_out;
}

START_TEST(stop_hands_a_connect_only_connection_to_the_owner) {
  static const char req[] = "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";
  size_t sent = 0;

  fx_start();
  add("/", fx.port, 1);
  fx.stop_in_done = 1;
  /* Until the connect is done; then the connection is ours. */
  fr_test_run_until_cb(&fx.loop, connect_done_or_timed_out, NULL);
  ck_assert_int_eq(fx.x[0].result, CURLE_OK);
  ck_assert_int_eq(fx.io_init_rc, 0);
  ck_assert_ptr_nonnull(fx.cu.multi);   /* stopped, not closed */
  fx.send_rc = curl_easy_send(fx.x[0].easy, req, sizeof(req) - 1, &sent);
  ck_assert_int_eq(fx.send_rc, CURLE_OK);
  ck_assert_int_eq(sent, sizeof(req) - 1);
  uv_poll_start(&fx.io, UV_READABLE, on_io);
  fx_run();
  ck_assert_int_eq(fx.ndone, 1);
  ck_assert_msg(strncmp(fx.resp, "HTTP/1.1 200", 12) == 0, "response: %s", fx.resp);
  ck_assert_ptr_nonnull(strstr(fx.resp, "\r\n\r\nhello"));
}
END_TEST

int main(void) {
  Suite *s = suite_create("curluv");
  TCase *tc = tcase_create("core");
  SRunner *sr;
  int failed;

  curl_global_init(CURL_GLOBAL_DEFAULT);
  tcase_add_test(tc, transfers_each_finished_one_handed_to_done_cb_once);
  tcase_add_test(tc, connect_refused_reported_to_done_cb);
  tcase_add_test(tc, turn_budget_is_per_millisecond_of_loop_time);
  tcase_add_test(tc, transfers_past_the_turn_budget_still_finish_once);
  tcase_add_test(tc, close_inside_done_cb_defers_cleanup_and_stops_delivery);
  tcase_add_test(tc, close_inside_write_cb_waits_for_socket_action_to_return);
  tcase_add_test(tc, stop_hands_a_connect_only_connection_to_the_owner);
  suite_add_tcase(s, tc);
  sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  curl_global_cleanup();
  return failed == 0 ? 0 : 1;
}
