/* execwait.c - execs waiting for one of their tenant's slots (execwait.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "fr/assert.h"
#include "fr/buf.h"
#include "fr/config.h"
#include "fr/http.h"
#include "api.h"
#include "execwait.h"
#include "metrics.h"
#include "router.h"
#include "tenants.h"

struct line;

struct waiter {
  struct waiter *prev, *next;   /* in its line, or in the ready list once granted */
  struct line *line;
  struct api_req *q;
  execwait_resume_cb resume;
  execwait_drop_cb drop;
  void *arg;
  uint64_t since_ms, deadline_ms;
  int granted;                  /* a slot is taken for it: it runs next turn */
};

/* One tenant's line, oldest first. */
struct line {
  struct tenant_state *ts;      /* a reference */
  struct waiter *head, *tail;
  int64_t n;
};

struct execwait {
  struct router *r;
  struct line **lines;
  size_t nlines, cap;
  struct waiter *ready_head, *ready_tail; /* granted, resumed on the next turn */
  uv_timer_t timer;             /* the earliest deadline */
  uv_idle_t turn;               /* the granted waiters' turn */
  int closing;
  int handles_open;             /* of timer and turn, after execwait_free: the last close frees */
};

static void list_push(struct waiter **head, struct waiter **tail, struct waiter *w) {
  w->prev = *tail;
  w->next = NULL;
  if (*tail != NULL)
    (*tail)->next = w;
  else
    *head = w;
  *tail = w;
}

static void list_unlink(struct waiter **head, struct waiter **tail, struct waiter *w) {
  if (w->prev != NULL)
    w->prev->next = w->next;
  else
    *head = w->next;
  if (w->next != NULL)
    w->next->prev = w->prev;
  else
    *tail = w->prev;
  w->prev = w->next = NULL;
}

static struct line *line_of(struct execwait *ew, struct tenant_state *ts, int add) {
  struct line *l;
  size_t i;

  for (i = 0; i < ew->nlines; i++)
    if (ew->lines[i]->ts == ts)
      return ew->lines[i];
  if (!add)
    return NULL;
  if (ew->nlines == ew->cap) {
    size_t cap = ew->cap ? ew->cap * 2 : 8;
    struct line **nl = realloc(ew->lines, cap * sizeof(*nl));
    if (nl == NULL)
      return NULL;
    ew->lines = nl;
    ew->cap = cap;
  }
  if ((l = calloc(1, sizeof(*l))) == NULL)
    return NULL;
  l->ts = tenant_ref(ts);
  ew->lines[ew->nlines++] = l;
  return l;
}

/* Drops an empty line (its tenant's record may go with it). */
static void line_drop_if_empty(struct execwait *ew, struct line *l) {
  size_t i;

  if (l->n > 0)
    return;
  for (i = 0; i < ew->nlines && ew->lines[i] != l; i++)
    ;
  FR_ASSERT(i < ew->nlines);
  ew->lines[i] = ew->lines[--ew->nlines];
  tenant_unref(l->ts);
  free(l);
}

static void observe(struct execwait *ew, struct waiter *w, const char *outcome) {
  struct fr_buf lb;

  fr_buf_init(&lb);
  metrics_label(&lb, "tenant", w->line != NULL ? w->line->ts->name : w->q->tenant);
  metrics_label(&lb, "outcome", outcome);
  metrics_observe(ew->r->metrics, "fedrouter_exec_wait_seconds", lb.data ? lb.data : "",
                  (double)(uv_now(ew->r->loop) - w->since_ms) / 1000.0);
  fr_buf_free(&lb);
}

static void arm(struct execwait *ew);
static void on_deadline(uv_timer_t *t);

/* Takes <w> out of its line (not granted yet). */
static void leave_line(struct execwait *ew, struct waiter *w) {
  struct line *l = w->line;

  list_unlink(&l->head, &l->tail, w);
  l->n--;
  w->line = NULL;
  line_drop_if_empty(ew, l);
}

/* Ends <w> without a slot: answers <status> (0: the client is gone, no
 * answer) and frees it. */
static void end_waiter(struct execwait *ew, struct waiter *w, int status, const char *code, const char *msg,
                       const char *limit, const char *extra, const char *outcome) {
  struct api_req *q = w->q;

  observe(ew, w, outcome);
  if (w->line != NULL)
    leave_line(ew, w);
  q->gone_cb = NULL;
  if (status != 0 && limit != NULL)
    api_reply(q, status, api_limit_body(msg, limit), extra);
  else if (status != 0)
    api_fail(q, status, code, msg, extra);
  else
    api_reply(q, 499, NULL, NULL); /* the client left: only the deferral ends */
  w->drop(w->arg);
  free(w);
}

static void waiter_gone(struct api_req *q, void *arg) {
  struct waiter *w = arg;
  struct execwait *ew = q->r->execwait;

  if (w->granted) {
    /* Its slot was taken: give it back to the next in line (after the
     * reply, which may free <q>: hold its tenant). */
    struct tenant_state *ts = tenant_ref(q->ts);
    list_unlink(&ew->ready_head, &ew->ready_tail, w);
    observe(ew, w, "gone");
    api_reply(q, 499, NULL, NULL);
    w->drop(w->arg);
    free(w);
    tenant_exec_done(ew->r, ts);
    tenant_unref(ts);
    return;
  }
  end_waiter(ew, w, 0, NULL, NULL, NULL, NULL, "gone");
}

static void on_turn(uv_idle_t *h) {
  struct execwait *ew = h->data;
  struct waiter *w;

  uv_idle_stop(h);
  /* The head each time: a resume may grant or end other waiters. */
  while ((w = ew->ready_head) != NULL) {
    struct api_req *q = w->q;
    list_unlink(&ew->ready_head, &ew->ready_tail, w);
    observe(ew, w, "started");
    /* The deferral's reference is ours until the handler has run. */
    api_undefer(q);
    w->resume(q, w->arg);
    api_req_unref(q);
    free(w);
  }
}

/* The earliest deadline of every line's head (lines are oldest first). */
static void arm(struct execwait *ew) {
  uint64_t first = UINT64_MAX, now = uv_now(ew->r->loop);
  size_t i;

  for (i = 0; i < ew->nlines; i++)
    if (ew->lines[i]->head != NULL && ew->lines[i]->head->deadline_ms < first)
      first = ew->lines[i]->head->deadline_ms;
  if (first == UINT64_MAX)
    uv_timer_stop(&ew->timer);
  else
    uv_timer_start(&ew->timer, on_deadline, first > now ? first - now : 0, 0);
}

static void on_deadline(uv_timer_t *t) {
  struct execwait *ew = t->data;
  uint64_t now = uv_now(ew->r->loop);
  char msg[300];
  size_t i;

  for (i = 0; i < ew->nlines;) {
    struct line *l = ew->lines[i];
    struct waiter *w = l->head;
    int64_t n = l->n;
    if (w == NULL || w->deadline_ms > now) {
      i++;
      continue;
    }
    snprintf(msg, sizeof(msg), "tenant %s waited %.1f s for one of its %" PRId64 " exec slots "
             "(max_concurrent_execs; queue.exec_wait_s); %" PRId64 " more wait", l->ts->name,
             (double)(now - w->since_ms) / 1000.0, l->ts->max_execs, n - 1);
    /* May drop the line (its last waiter): look at index i again. */
    end_waiter(ew, w, 429, NULL, msg, "max_concurrent_execs", "Retry-After: 1\r\n", "expired");
  }
  arm(ew);
}

int execwait_init(struct router *r) {
  struct execwait *ew = calloc(1, sizeof(*ew));

  if (ew == NULL)
    return -ENOMEM;
  ew->r = r;
  uv_timer_init(r->loop, &ew->timer);
  uv_idle_init(r->loop, &ew->turn);
  ew->timer.data = ew->turn.data = ew;
  r->execwait = ew;
  return 0;
}

static void ew_closed(uv_handle_t *h) {
  struct execwait *ew = h->data;

  if (--ew->handles_open == 0)
    free(ew);
}

void execwait_close(struct router *r) {
  struct execwait *ew = r->execwait;
  struct waiter *w;

  if (ew == NULL || ew->closing)
    return;
  ew->closing = 1;
  /* A line lives while it has a waiter: each end takes one, the last
   * takes the line. */
  while (ew->nlines > 0 && (w = ew->lines[0]->head) != NULL)
    end_waiter(ew, w, 503, "shutting_down", "the router is shutting down", NULL, "Retry-After: 1\r\n", "expired");
  /* Granted ones still run: they hold a slot, their exec may start. */
  on_turn(&ew->turn);
  uv_timer_stop(&ew->timer);
}

void execwait_free(struct router *r) {
  struct execwait *ew = r->execwait;

  if (ew == NULL)
    return;
  r->execwait = NULL;
  free(ew->lines);
  ew->handles_open = 2;
  uv_close((uv_handle_t *)&ew->timer, ew_closed);
  uv_close((uv_handle_t *)&ew->turn, ew_closed);
}

int execwait_take(struct api_req *q, execwait_resume_cb resume, execwait_drop_cb drop, void *arg) {
  struct execwait *ew = q->r->execwait;
  struct tenant_state *ts = q->ts;
  struct line *l;
  struct waiter *w;
  char msg[300];

  if (ts == NULL)
    return 1;
  l = ew != NULL ? line_of(ew, ts, 0) : NULL;
  /* A free slot, and nobody of this tenant waiting before this one. */
  if (ts->execs < ts->max_execs && (l == NULL || l->n == 0)) {
    ts->execs++;
    return 1;
  }
  if (ew == NULL || ew->closing || q->cfg->queue_exec_wait_s == 0 || (l != NULL && l->n >= ts->max_queued_execs) ||
      (l == NULL && ts->max_queued_execs == 0)) {
    if (q->cfg->queue_exec_wait_s > 0 && ts->max_queued_execs > 0)
      snprintf(msg, sizeof(msg), "tenant %s has %" PRId64 " execs running (max_concurrent_execs) and %" PRId64
               " waiting for a slot (max_queued_execs)", q->tenant, ts->execs, l != NULL ? l->n : 0);
    else
      snprintf(msg, sizeof(msg), "tenant %s has %" PRId64 " execs running (max_concurrent_execs)", q->tenant,
               ts->execs);
    api_reply(q, 429, api_limit_body(msg, "max_concurrent_execs"), "Retry-After: 1\r\n");
    return -1;
  }
  if ((w = calloc(1, sizeof(*w))) == NULL || (l == NULL && (l = line_of(ew, ts, 1)) == NULL)) {
    free(w);
    api_oom(q);
    return -1;
  }
  w->q = q;
  w->resume = resume;
  w->drop = drop;
  w->arg = arg;
  w->line = l;
  w->since_ms = uv_now(q->r->loop);
  w->deadline_ms = w->since_ms + (uint64_t)q->cfg->queue_exec_wait_s * 1000;
  list_push(&l->head, &l->tail, w);
  l->n++;
  api_defer(q);
  q->gone_cb = waiter_gone;
  q->gone_arg = w;
  if (l->n == 1)
    arm(ew);
  if (q->req != NULL)
    router_note(q->req, "exec_wait", "queued");
  return 0;
}

static void slot_free(struct router *r, struct tenant_state *t) {
  struct execwait *ew = r->execwait;
  struct line *l;
  struct waiter *w;

  if (ew == NULL || (l = line_of(ew, t, 0)) == NULL || t->execs >= t->max_execs || (w = l->head) == NULL)
    return;
  /* The slot is the head's now: nobody new takes it before it runs. */
  t->execs++;
  leave_line(ew, w);
  w->granted = 1;
  list_push(&ew->ready_head, &ew->ready_tail, w);
  uv_idle_start(&ew->turn, on_turn);
  arm(ew);
}

void tenant_exec_done(struct router *r, struct tenant_state *t) {
  if (t == NULL)
    return;
  FR_ASSERT(t->execs > 0);
  t->execs--;
  slot_free(r, t);
}

void execwait_tenant_removed(struct router *r, struct tenant_state *t) {
  struct execwait *ew = r->execwait;
  struct line *l;

  if (ew == NULL)
    return;
  while ((l = line_of(ew, t, 0)) != NULL && l->head != NULL)
    end_waiter(ew, l->head, 401, "unauthorized", "the tenant's token is no longer valid (the config changed)", NULL,
               NULL, "expired");
  arm(ew);
}

int64_t execwait_depth(struct router *r, const struct tenant_state *t, double *oldest_s) {
  struct execwait *ew = r->execwait;
  uint64_t now, oldest = UINT64_MAX;
  int64_t n = 0;
  size_t i;

  if (oldest_s != NULL)
    *oldest_s = 0;
  if (ew == NULL)
    return 0;
  now = uv_now(r->loop);
  for (i = 0; i < ew->nlines; i++) {
    if (t != NULL && ew->lines[i]->ts != t)
      continue;
    n += ew->lines[i]->n;
    if (ew->lines[i]->head != NULL && ew->lines[i]->head->since_ms < oldest)
      oldest = ew->lines[i]->head->since_ms;
  }
  if (oldest_s != NULL && oldest != UINT64_MAX)
    *oldest_s = (double)(now - oldest) / 1000.0;
  return n;
}
