/* loop.c — the epoll registrations and a small timer list.
 *
 * The timer list is unsorted: an agent holds at most a few hundred timers
 * (connections, processes, streams), and one pass per loop turn over them
 * costs less than keeping a heap. */
#include <errno.h>
#include <sys/epoll.h>

#include "agent.h"

int io_start(struct agent *a, struct io *io, uint32_t events) {
  struct epoll_event ev = {.events = events, .data.ptr = io};
  int op = io->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
  if (io->events == events)
    return 0;
  if (events == 0) {
    io_stop(a, io);
    return 0;
  }
  if (epoll_ctl(a->epfd, op, io->fd, &ev) != 0)
    return -errno;
  io->events = events;
  return 0;
}

void io_stop(struct agent *a, struct io *io) {
  if (io->events && io->fd >= 0)
    epoll_ctl(a->epfd, EPOLL_CTL_DEL, io->fd, NULL);
  io->events = 0;
}

void timer_start(struct agent *a, struct timer *t, uint64_t delay_ms, timer_cb cb) {
  timer_stop(a, t);
  t->due = now_ms() + delay_ms;
  t->cb = cb;
  t->prev = NULL;
  t->next = a->timers;
  if (a->timers)
    a->timers->prev = t;
  a->timers = t;
  t->active = true;
}

void timer_stop(struct agent *a, struct timer *t) {
  if (!t->active)
    return;
  if (t->prev)
    t->prev->next = t->next;
  else
    a->timers = t->next;
  if (t->next)
    t->next->prev = t->prev;
  t->prev = t->next = NULL;
  t->active = false;
}
