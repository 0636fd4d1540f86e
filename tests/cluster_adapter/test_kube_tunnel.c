/* test_kube_tunnel.c - an HTTP/1.1 upgrade through the API server passed on
 * as raw bytes (fr_kube_tunnel_*), against a scripted server on loopback (a
 * thread with blocking sockets): the request head, the 101 and the bytes
 * after it in one packet, echo both ways, the caller's end, the server's
 * end, refusals (Content-Length and chunked), malformed and missing
 * answers, a refused connect, cancellation, bad arguments. */
#include "fr/kube.h"
#include "fr/kubeconfig.h"
#include "fr/buf.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

/* ---- the scripted server ---- */

enum after { AFTER_ECHO, AFTER_CLOSE, AFTER_HOLD };

struct server {
  int lfd, port;
  pthread_t th;
  const char *answer;   /* sent once the request head is in */
  enum after after;     /* then: echo until EOF, close, or keep the connection until EOF */
  char head[8192];      /* the request head received */
  size_t echoed;
};

static void *server_main(void *arg) {
  struct server *s = arg;
  char buf[65536];
  size_t n = 0;
  ssize_t r;
  int fd = accept(s->lfd, NULL, NULL);

  if (fd < 0)
    return NULL;
  while (n < sizeof(s->head) - 1 && (r = read(fd, s->head + n, 1)) == 1) {
    n++;
    if (n >= 4 && memcmp(s->head + n - 4, "\r\n\r\n", 4) == 0)
      break;
  }
  s->head[n] = '\0';
  if (s->answer != NULL && write(fd, s->answer, strlen(s->answer)) < 0)
    s->after = AFTER_CLOSE;
  if (s->after == AFTER_ECHO) {
    while ((r = read(fd, buf, sizeof(buf))) > 0) {
      if (write(fd, buf, (size_t)r) != r)
        break;
      s->echoed += (size_t)r;
    }
  } else if (s->after == AFTER_HOLD) {
    while (read(fd, buf, sizeof(buf)) > 0)
      ;
  }
  close(fd);
  return NULL;
}

static void server_start(struct server *s, const char *answer, enum after after) {
  struct sockaddr_in a;
  socklen_t al = sizeof(a);

  memset(s, 0, sizeof(*s));
  s->answer = answer;
  s->after = after;
  s->lfd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(s->lfd, 0);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(bind(s->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
  ck_assert_int_eq(listen(s->lfd, 4), 0);
  ck_assert_int_eq(getsockname(s->lfd, (struct sockaddr *)&a, &al), 0);
  s->port = ntohs(a.sin_port);
  ck_assert_int_eq(pthread_create(&s->th, NULL, server_main, s), 0);
}

static void server_join(struct server *s) {
  shutdown(s->lfd, SHUT_RDWR); /* an accept() nobody connected to returns */
  pthread_join(s->th, NULL);
  close(s->lfd);
}

/* ---- the client side ---- */

struct ctx {
  uv_loop_t loop;
  struct fr_kube_creds *creds;
  struct fr_kube_client *c;
  struct fr_kube_tunnel *t;
  int opened, done, error, status;
  char open_head[4096];
  struct fr_buf got, body;
  size_t want;          /* end our side once this much came back */
  int pause_once;       /* on_data: pause the first time, resume from a timer */
  uv_timer_t resume;
};

static void ctx_open(struct ctx *x, int port) {
  char server[64];

  memset(x, 0, sizeof(*x));
  ck_assert_int_eq(uv_loop_init(&x->loop), 0);
  x->creds = calloc(1, sizeof(*x->creds));
  snprintf(server, sizeof(server), "http://127.0.0.1:%d", port);
  x->creds->server = strdup(server);
  x->creds->token = strdup("fake-token");
  ck_assert_int_eq(fr_kube_client_new(&x->loop, x->creds, NULL, &x->c), 0);
  fr_buf_init(&x->got);
  fr_buf_init(&x->body);
}

static void on_freed(void *arg) {
  (*(int *)arg)++;
}

static void ctx_close(struct ctx *x) {
  int freed = 0;

  fr_kube_client_free(x->c, on_freed, &freed);
  uv_run(&x->loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(freed, 1);
  ck_assert_int_eq(uv_loop_close(&x->loop), 0);
  fr_kube_creds_free(x->creds);
  fr_buf_free(&x->got);
  fr_buf_free(&x->body);
}

static void on_open(const char *head, size_t len, void *arg) {
  struct ctx *x = arg;

  x->opened = 1;
  ck_assert_uint_lt(len, sizeof(x->open_head));
  memcpy(x->open_head, head, len);
  x->open_head[len] = '\0';
}

static void on_resume(uv_timer_t *h) {
  struct ctx *x = h->data;

  uv_close((uv_handle_t *)h, NULL);
  fr_kube_tunnel_pause(x->t, 0);
}

static int on_data(const char *data, size_t len, void *arg) {
  struct ctx *x = arg;

  fr_buf_append(&x->got, data, len);
  if (x->want > 0 && x->got.len >= x->want) {
    x->want = 0;
    ck_assert_int_eq(fr_kube_tunnel_end(x->t), 0);
    ck_assert_int_eq(fr_kube_tunnel_write(x->t, "x", 1), -EPIPE);
  }
  if (x->pause_once) {
    x->pause_once = 0;
    uv_timer_init(&x->loop, &x->resume);
    x->resume.data = x;
    uv_timer_start(&x->resume, on_resume, 20, 0);
    return FR_KUBE_TUNNEL_PAUSE;
  }
  return 0;
}

static void on_done(const struct fr_kube_tunnel_result *r, void *arg) {
  struct ctx *x = arg;

  x->done++;
  x->error = r->error;
  x->status = r->http_status;
  if (r->body != NULL)
    fr_buf_append(&x->body, r->body, r->body_len);
  x->t = NULL;
}

static int start(struct ctx *x, const char *target, const char *headers) {
  struct fr_kube_tunnel_opts o;

  memset(&o, 0, sizeof(o));
  o.method = "GET";
  o.target = target;
  o.headers = headers;
  o.request_id = "rid-1";
  o.on_open = on_open;
  o.on_data = on_data;
  o.on_done = on_done;
  o.arg = x;
  return fr_kube_tunnel_start(x->c, &o, &x->t);
}

/* ---- cases ---- */

START_TEST(open_echo_and_end) {
  struct server s;
  struct ctx x;
  static char big[300000];

  server_start(&s, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x-test\r\nConnection: Upgrade\r\n\r\nEARLY", AFTER_ECHO);
  ctx_open(&x, s.port);
  ck_assert_int_eq(start(&x, "/api/v1/namespaces/d/pods/p:8/proxy/ws?a=1", "Upgrade: x-test\nConnection: Upgrade"), 0);
  /* Queued before the answer: refused (only an open tunnel takes bytes). */
  ck_assert_int_eq(fr_kube_tunnel_write(x.t, "x", 1), -EPIPE);
  while (!x.opened && x.done == 0)
    uv_run(&x.loop, UV_RUN_ONCE);
  ck_assert_int_eq(x.opened, 1);
  ck_assert_msg(strncmp(x.open_head, "HTTP/1.1 101 ", 13) == 0 && strstr(x.open_head, "Upgrade: x-test\r\n") != NULL &&
                    strcmp(x.open_head + strlen(x.open_head) - 4, "\r\n\r\n") == 0,
                "%s", x.open_head);
  memset(big, 'b', sizeof(big));
  x.pause_once = 1;
  x.want = 5 + 4 + sizeof(big);
  ck_assert_int_eq(fr_kube_tunnel_write(x.t, "ping", 4), 0);
  ck_assert_int_eq(fr_kube_tunnel_write(x.t, big, sizeof(big)), 0);
  ck_assert_uint_eq(fr_kube_tunnel_pending(x.t), 4 + sizeof(big));
  while (x.done == 0)
    uv_run(&x.loop, UV_RUN_ONCE);
  ck_assert_int_eq(x.done, 1);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.status, 101);
  ck_assert_uint_eq(x.got.len, 5 + 4 + sizeof(big));
  ck_assert_int_eq(memcmp(x.got.data, "EARLYping", 9), 0);
  ck_assert_int_eq(memcmp(x.got.data + 9, big, sizeof(big)), 0);
  ctx_close(&x);
  server_join(&s);
  /* The request as it went: the target, Host, our headers, the token. */
  const char *want = "GET /api/v1/namespaces/d/pods/p:8/proxy/ws?a=1 HTTP/1.1\r\nHost: 127.0.0.1:";
  ck_assert_msg(strncmp(s.head, want, strlen(want)) == 0 &&
                    strstr(s.head, "\r\nUpgrade: x-test\r\nConnection: Upgrade\r\n") != NULL &&
                    strstr(s.head, "\r\nAuthorization: Bearer fake-token\r\n") != NULL &&
                    strstr(s.head, "\r\nX-Request-Id: rid-1\r\n") != NULL,
                "%s", s.head);
  ck_assert_uint_eq(s.echoed, 4 + sizeof(big));
}
END_TEST

START_TEST(server_ends_the_tunnel) {
  struct server s;
  struct ctx x;

  server_start(&s, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\nbye", AFTER_CLOSE);
  ctx_open(&x, s.port);
  ck_assert_int_eq(start(&x, "/p", "Upgrade: x\nConnection: Upgrade"), 0);
  while (x.done == 0)
    uv_run(&x.loop, UV_RUN_ONCE);
  ck_assert_int_eq(x.opened, 1);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.status, 101);
  ck_assert_uint_eq(x.got.len, 3);
  ctx_close(&x);
  server_join(&s);
}
END_TEST

START_TEST(refused_with_length) {
  struct server s;
  struct ctx x;

  /* The answer is whole at its length: no need to wait for the close. */
  server_start(&s, "HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nabcTRAILING", AFTER_HOLD);
  ctx_open(&x, s.port);
  ck_assert_int_eq(start(&x, "/p", "Upgrade: x\nConnection: Upgrade"), 0);
  while (x.done == 0)
    uv_run(&x.loop, UV_RUN_ONCE);
  ck_assert_int_eq(x.opened, 0);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.status, 404);
  ck_assert_uint_eq(x.body.len, 3);
  ck_assert_int_eq(memcmp(x.body.data, "abc", 3), 0);
  ctx_close(&x);
  server_join(&s);
}
END_TEST

START_TEST(refused_chunked_until_close) {
  struct server s;
  struct ctx x;

  server_start(&s, "HTTP/1.1 403 Forbidden\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", AFTER_CLOSE);
  ctx_open(&x, s.port);
  ck_assert_int_eq(start(&x, "/p", NULL), 0);
  while (x.done == 0)
    uv_run(&x.loop, UV_RUN_ONCE);
  ck_assert_int_eq(x.error, 0);
  ck_assert_int_eq(x.status, 403);
  ck_assert_uint_eq(x.body.len, 15);
  ck_assert_int_eq(memcmp(x.body.data, "5\r\nhello\r\n0\r\n\r\n", 15), 0);
  ctx_close(&x);
  server_join(&s);
}
END_TEST

START_TEST(no_answer_or_a_bad_one) {
  static const struct {
    const char *answer;
    int error;
  } cases[] = {
      {NULL, -ECONNRESET},                           /* closed without a word */
      {"HTTP/1.1 101 Swi", -ECONNRESET},             /* closed in the head */
      {"garbage\r\n\r\n", -EPROTO},                  /* not HTTP */
      {"HTTP/1.1 003 Odd\r\n\r\n", -EPROTO},         /* a status outside 100-599 */
  };

  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct server s;
    struct ctx x;

    server_start(&s, cases[i].answer, AFTER_CLOSE);
    ctx_open(&x, s.port);
    ck_assert_int_eq(start(&x, "/p", NULL), 0);
    while (x.done == 0)
      uv_run(&x.loop, UV_RUN_ONCE);
    ck_assert_msg(x.error == cases[i].error, "case %zu: error %d", i, x.error);
    ck_assert_int_eq(x.opened, 0);
    ctx_close(&x);
    server_join(&s);
  }
}
END_TEST

START_TEST(refused_connect) {
  struct server s;
  struct ctx x;
  int port;

  server_start(&s, NULL, AFTER_CLOSE);
  port = s.port;
  server_join(&s); /* nothing listens there any more */
  ctx_open(&x, port);
  ck_assert_int_eq(start(&x, "/p", NULL), 0);
  while (x.done == 0)
    uv_run(&x.loop, UV_RUN_ONCE);
  ck_assert_int_eq(x.error, -ECONNREFUSED);
  ck_assert_int_eq(x.status, 0);
  ctx_close(&x);
}
END_TEST

START_TEST(cancel_and_free) {
  struct server s;
  struct ctx x;

  server_start(&s, "HTTP/1.1 101 Switching Protocols\r\n\r\n", AFTER_HOLD);
  ctx_open(&x, s.port);
  /* Cancelled before it connected: no callback. */
  ck_assert_int_eq(start(&x, "/p", NULL), 0);
  fr_kube_tunnel_cancel(x.t);
  uv_run(&x.loop, UV_RUN_NOWAIT);
  ck_assert_int_eq(x.done, 0);
  /* Open, then the client goes: tracked tunnels end without a callback. */
  ck_assert_int_eq(start(&x, "/p", NULL), 0);
  while (!x.opened)
    uv_run(&x.loop, UV_RUN_ONCE);
  ctx_close(&x);
  ck_assert_int_eq(x.done, 0);
  server_join(&s);
}
END_TEST

START_TEST(bad_arguments) {
  struct ctx x;

  ctx_open(&x, 1);
  ck_assert_int_eq(start(&x, "p", NULL), -EINVAL);
  ck_assert_int_eq(start(&x, "/p q", NULL), -EINVAL);
  ck_assert_int_eq(start(&x, "/p\r\nX: y", NULL), -EINVAL);
  ck_assert_int_eq(start(&x, "/p", "Upgrade: x\r\nEvil: 1"), -EINVAL);
  ck_assert_int_eq(start(&x, "/p", "no colon"), -EINVAL);
  ck_assert_int_eq(start(&x, "/p", ": empty name"), -EINVAL);
  ck_assert_ptr_null(x.t);
  ck_assert_int_eq(fr_kube_tunnel_write(NULL, "x", 1), -EPIPE);
  ck_assert_int_eq(fr_kube_tunnel_end(NULL), -EPIPE);
  fr_kube_tunnel_cancel(NULL);
  ctx_close(&x);
}
END_TEST

static Suite *kube_tunnel_suite(void) {
  Suite *s = suite_create("kube_tunnel");
  TCase *tc = tcase_create("core");

  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, open_echo_and_end);
  tcase_add_test(tc, server_ends_the_tunnel);
  tcase_add_test(tc, refused_with_length);
  tcase_add_test(tc, refused_chunked_until_close);
  tcase_add_test(tc, no_answer_or_a_bad_one);
  tcase_add_test(tc, refused_connect);
  tcase_add_test(tc, cancel_and_free);
  tcase_add_test(tc, bad_arguments);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(kube_tunnel_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
