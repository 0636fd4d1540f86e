/* curluv.c - see fr/curluv.h. */
#include "fr/curluv.h"

#include <errno.h>
#include <stdlib.h>

#include "fr/turn.h"
#include "fr/util.h"

/* One socket curl asked us to watch. */
struct fr_curluv_sock {
  uv_poll_t poll;
  struct fr_curluv *cu;
  curl_socket_t fd;
  int events;        /* UV_READABLE/UV_WRITABLE curl asked for */
  int deferred;      /* over the turn budget: the poll waits for <rearm> */
  struct fr_curluv_sock *prev, *next;
};

static void teardown(struct fr_curluv *cu);

static void handle_closed(struct fr_curluv *cu) {
  cu->nopen--;
  if (cu->torn_down && cu->nopen == 0 && cu->close_cb != NULL)
    cu->close_cb(cu);
}

static void on_sock_closed(uv_handle_t *h) {
  struct fr_curluv_sock *s = fr_container_of((uv_poll_t *)h, struct fr_curluv_sock, poll);
  struct fr_curluv *cu = s->cu;

  free(s);
  handle_closed(cu);
}

static void on_timer_closed(uv_handle_t *h) {
  handle_closed(fr_container_of((uv_timer_t *)h, struct fr_curluv, timer));
}

static void on_rearm_closed(uv_handle_t *h) {
  handle_closed(fr_container_of((uv_idle_t *)h, struct fr_curluv, rearm));
}

/* Unlinks <s> and closes its poll; uv_close stops it at once (epoll
 * forgets the fd now), the memory goes in the close callback. */
static void sock_close(struct fr_curluv *cu, struct fr_curluv_sock *s) {
  if (s->prev != NULL)
    s->prev->next = s->next;
  else
    cu->socks = s->next;
  if (s->next != NULL)
    s->next->prev = s->prev;
  s->prev = s->next = NULL;
  uv_close((uv_handle_t *)&s->poll, on_sock_closed);
}

/* curl_multi_socket_action, then the finished transfers. A done_cb may
 * close <cu>; the multi goes only at the end, outside the drain. */
static void dispatch(struct fr_curluv *cu, curl_socket_t fd, int flags) {
  CURLMsg *msg;
  CURL *easy;
  CURLcode result;
  int running, left;

  if (cu->torn_down || cu->stopped)
    return;
  cu->dispatching++;
  cu->in_curl++;
  curl_multi_socket_action(cu->multi, fd, flags, &running);
  cu->in_curl--;
  if (cu->after_cb != NULL)
    cu->after_cb(cu);
  while (!cu->closing && !cu->stopped && (msg = curl_multi_info_read(cu->multi, &left)) != NULL) {
    if (msg->msg != CURLMSG_DONE)
      continue;
    /* <msg> dies with its easy handle, which the callback may remove. */
    easy = msg->easy_handle;
    result = msg->data.result;
    cu->done_cb(cu, easy, result);
  }
  cu->dispatching--;
  if (cu->closing && !cu->dispatching && !cu->torn_down)
    teardown(cu);
}

static void on_poll(uv_poll_t *h, int status, int events);

/* The next loop turn: the polls put off are armed again (curl's socket
 * state is untouched meanwhile: level-triggered, nothing is lost). */
static void on_rearm(uv_idle_t *h) {
  struct fr_curluv *cu = fr_container_of(h, struct fr_curluv, rearm);
  struct fr_curluv_sock *s;
  int timeout = cu->timeout_due;

  /* A put-off timer is curl's work itself: it waits for the budget. */
  if (timeout && !fr_turn_take(cu->loop))
    return;
  uv_idle_stop(h);
  cu->timeout_due = 0;
  if (cu->torn_down || cu->stopped)
    return;
  for (s = cu->socks; s != NULL; s = s->next) {
    if (s->deferred) {
      s->deferred = 0;
      uv_poll_start(&s->poll, s->events, on_poll);
    }
  }
  if (timeout)
    dispatch(cu, CURL_SOCKET_TIMEOUT, 0); /* last: it may close <cu> */
}

static void on_poll(uv_poll_t *h, int status, int events) {
  struct fr_curluv_sock *s = fr_container_of(h, struct fr_curluv_sock, poll);
  int flags = 0;

  if (!fr_turn_take(s->cu->loop)) {
    uv_poll_stop(h);
    s->deferred = 1;
    uv_idle_start(&s->cu->rearm, on_rearm);
    return;
  }
  /* On an error let curl find out by reading and writing (multi-uv.c). */
  if (status < 0)
    flags = CURL_CSELECT_IN | CURL_CSELECT_OUT;
  if (events & UV_READABLE)
    flags |= CURL_CSELECT_IN;
  if (events & UV_WRITABLE)
    flags |= CURL_CSELECT_OUT;
  dispatch(s->cu, s->fd, flags);
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
  struct fr_curluv *cu = userp;
  struct fr_curluv_sock *s = socketp;
  int events = 0;

  /* Stopped: the polls are closed (and <socketp> may be freed); whatever
   * curl still does with its sockets is no longer ours to watch. */
  if (cu->stopped)
    return 0;
  if (what == CURL_POLL_REMOVE) {
    if (s != NULL) {
      sock_close(cu, s);
      if (!cu->torn_down)
        curl_multi_assign(cu->multi, fd, NULL);
    }
    return 0;
  }
  /* curl_multi_cleanup only closes sockets: nothing new to watch. */
  if (cu->torn_down)
    return 0;
  if (s == NULL) {
    s = calloc(1, sizeof(*s));
    if (s == NULL)
      return -1;   /* curl fails the transfer */
    if (uv_poll_init_socket(cu->loop, &s->poll, fd) != 0) {
      free(s);
      return -1;
    }
    s->cu = cu;
    s->fd = fd;
    s->next = cu->socks;
    if (cu->socks != NULL)
      cu->socks->prev = s;
    cu->socks = s;
    cu->nopen++;
    curl_multi_assign(cu->multi, fd, s);
  }
  if (what & CURL_POLL_IN)
    events |= UV_READABLE;
  if (what & CURL_POLL_OUT)
    events |= UV_WRITABLE;
  s->events = events;
  if (!s->deferred)   /* else <rearm> starts it with these events */
    uv_poll_start(&s->poll, events, on_poll);
  return 0;
}

static void on_timeout(uv_timer_t *t) {
  struct fr_curluv *cu = fr_container_of(t, struct fr_curluv, timer);

  /* Thousands of transfers started together all come due at once (each
   * connect and TLS hello costs ~0.1 ms): past the budget, from a later
   * turn (not a 0 ms timer: libuv before 1.45 would run it in this one). */
  if (!fr_turn_take(cu->loop)) {
    cu->timeout_due = 1;
    uv_idle_start(&cu->rearm, on_rearm);
    return;
  }
  dispatch(cu, CURL_SOCKET_TIMEOUT, 0);
}

/* curl asks for one timer; 0 means "soon": a loop turn later, never a
 * socket_action from inside this callback (forbidden by curl). */
static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp) {
  struct fr_curluv *cu = userp;

  if (cu->torn_down || cu->stopped)
    return 0;
  if (timeout_ms < 0)
    uv_timer_stop(&cu->timer);
  else
    uv_timer_start(&cu->timer, on_timeout, (uint64_t)timeout_ms, 0);
  return 0;
}

int fr_curluv_init(uv_loop_t *loop, struct fr_curluv *cu, fr_curluv_done_cb done_cb,
                   fr_curluv_after_cb after_cb) {
  *cu = (struct fr_curluv){0};
  cu->multi = curl_multi_init();
  if (cu->multi == NULL)
    return -ENOMEM;
  cu->loop = loop;
  cu->done_cb = done_cb;
  cu->after_cb = after_cb;
  curl_multi_setopt(cu->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
  curl_multi_setopt(cu->multi, CURLMOPT_SOCKETDATA, cu);
  curl_multi_setopt(cu->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
  curl_multi_setopt(cu->multi, CURLMOPT_TIMERDATA, cu);
  uv_timer_init(loop, &cu->timer);
  uv_idle_init(loop, &cu->rearm);
  cu->nopen = 2;
  return 0;
}

int fr_curluv_in_curl(const struct fr_curluv *cu) {
  return cu->in_curl > 0;
}

void fr_curluv_stop(struct fr_curluv *cu) {
  if (cu->stopped || cu->torn_down)
    return;
  cu->stopped = 1;
  uv_timer_stop(&cu->timer);
  uv_idle_stop(&cu->rearm);
  while (cu->socks != NULL) {
    curl_multi_assign(cu->multi, cu->socks->fd, NULL);
    sock_close(cu, cu->socks);
  }
}

/* Runs outside every curl callback and drain loop. */
static void teardown(struct fr_curluv *cu) {
  struct fr_curluv_sock *s;

  cu->torn_down = 1;
  /* Stop polling before curl closes the sockets under the polls; the
   * cleanup reports them as CURL_POLL_REMOVE, closed in on_curl_socket. */
  for (s = cu->socks; s != NULL; s = s->next)
    uv_poll_stop(&s->poll);
  curl_multi_cleanup(cu->multi);
  cu->multi = NULL;
  while (cu->socks != NULL)
    sock_close(cu, cu->socks);
  uv_close((uv_handle_t *)&cu->timer, on_timer_closed);
  uv_close((uv_handle_t *)&cu->rearm, on_rearm_closed);
}

void fr_curluv_close(struct fr_curluv *cu, fr_curluv_close_cb cb) {
  if (cu->closing)
    return;
  cu->closing = 1;
  cu->close_cb = cb;
  if (!cu->dispatching)
    teardown(cu);
}
