/* queue.c - creates waiting for room, in fair-share order (queue.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "fr/adapter.h"
#include "fr/assert.h"
#include "fr/buf.h"
#include "fr/config.h"
#include "execwait.h"
#include "metrics.h"
#include "queue.h"
#include "router.h"
#include "tenants.h"

/* One tenant's line, oldest first. */
struct queue_line {
  struct tenant_state *ts;      /* a reference */
  struct queue_entry *head, *tail;
  int64_t n;                    /* entries */
  int64_t sandboxes;            /* their want, summed */
};

struct queue {
  struct router *r;
  struct queue_line **lines;
  size_t nlines, cap;
  uv_timer_t tick;
  uv_idle_t kick;
  int in_pass, again;
  int closing;
  int handles_open;             /* of tick and kick, after queue_free: the last close frees */
  int64_t sandboxes;            /* every line's, summed */
};

/* The federation's allocatable cpu and memory, the denominators of a
 * share. */
struct totals {
  double cpu_m, mem_b;
};

static void totals_get(struct router *r, struct totals *t) {
  struct fr_adapter_view v;
  size_t i;

  t->cpu_m = t->mem_b = 0;
  for (i = 0; i < r->nadapters; i++) {
    fr_adapter_view(r->adapters[i], &v);
    t->cpu_m += (double)v.alloc_cpu_m;
    t->mem_b += (double)v.alloc_mem_b;
  }
}

/* What <t> holds in every cluster and is making now. */
static void tenant_usage_sum(struct router *r, const struct tenant_state *t, struct fr_tenant_usage *u) {
  struct fr_tenant_usage one;
  size_t i;

  memset(u, 0, sizeof(*u));
  for (i = 0; i < r->nadapters; i++) {
    fr_adapter_tenant_usage(r->adapters[i], t->name, &one);
    u->sandboxes += one.sandboxes;
    u->cpu_m += one.cpu_m;
    u->mem_b += one.mem_b;
    u->gpus += one.gpus;
  }
  u->sandboxes += t->creating;
  u->cpu_m += t->creating_cpu_m;
  u->mem_b += t->creating_mem_b;
  u->gpus += t->creating_gpus;
}

static double share_of(struct router *r, const struct tenant_state *t, const struct totals *tot) {
  struct fr_tenant_usage u;
  double c, m;

  tenant_usage_sum(r, t, &u);
  c = tot->cpu_m > 0 ? (double)u.cpu_m / tot->cpu_m : 0;
  m = tot->mem_b > 0 ? (double)u.mem_b / tot->mem_b : 0;
  return c > m ? c : m;
}

double queue_share(struct router *r, const struct tenant_state *t) {
  struct totals tot;

  totals_get(r, &tot);
  return share_of(r, t, &tot);
}

static struct queue_line *line_of(struct queue *qu, struct tenant_state *ts, int add) {
  struct queue_line *l;
  size_t i;

  for (i = 0; i < qu->nlines; i++)
    if (qu->lines[i]->ts == ts)
      return qu->lines[i];
  if (!add)
    return NULL;
  if (qu->nlines == qu->cap) {
    size_t cap = qu->cap ? qu->cap * 2 : 8;
    struct queue_line **nl = realloc(qu->lines, cap * sizeof(*nl));
    if (nl == NULL)
      return NULL;
    qu->lines = nl;
    qu->cap = cap;
  }
  if ((l = calloc(1, sizeof(*l))) == NULL)
    return NULL;
  l->ts = tenant_ref(ts);
  qu->lines[qu->nlines++] = l;
  return l;
}

static void line_drop_if_empty(struct queue *qu, struct queue_line *l) {
  size_t i;

  if (l->n > 0)
    return;
  for (i = 0; i < qu->nlines && qu->lines[i] != l; i++)
    ;
  FR_ASSERT(i < qu->nlines);
  qu->lines[i] = qu->lines[--qu->nlines];
  tenant_unref(l->ts);
  free(l);
}

/* Into line <l>, at the back or the <front>. */
static void line_insert(struct queue *qu, struct queue_line *l, struct queue_entry *e, int front) {
  if (front) {
    e->prev = NULL;
    e->next = l->head;
    if (l->head != NULL)
      l->head->prev = e;
    else
      l->tail = e;
    l->head = e;
  } else {
    e->next = NULL;
    e->prev = l->tail;
    if (l->tail != NULL)
      l->tail->next = e;
    else
      l->head = e;
    l->tail = e;
  }
  e->line = l;
  l->n++;
  l->sandboxes += e->want;
  qu->sandboxes += e->want;
}

/* Out of its line; the line goes when empty unless <keep_line>. */
static void line_take(struct queue *qu, struct queue_entry *e, int keep_line) {
  struct queue_line *l = e->line;

  if (e->prev != NULL)
    e->prev->next = e->next;
  else
    l->head = e->next;
  if (e->next != NULL)
    e->next->prev = e->prev;
  else
    l->tail = e->prev;
  e->prev = e->next = NULL;
  e->line = NULL;
  l->n--;
  l->sandboxes -= e->want;
  qu->sandboxes -= e->want;
  if (!keep_line)
    line_drop_if_empty(qu, l);
}

static void observe_at(struct queue *qu, const char *tenant, uint64_t since_ms, const char *outcome) {
  struct fr_buf lb;

  fr_buf_init(&lb);
  metrics_label(&lb, "tenant", tenant);
  metrics_label(&lb, "outcome", outcome);
  metrics_observe(qu->r->metrics, "fedrouter_queue_wait_seconds", lb.data ? lb.data : "",
                  (double)(uv_now(qu->r->loop) - since_ms) / 1000.0);
  fr_buf_free(&lb);
}

static void observe(struct queue *qu, struct queue_entry *e, const char *outcome) {
  observe_at(qu, e->ts->name, e->since_ms, outcome);
}

static void arm(struct queue *qu) {
  if (qu->sandboxes > 0 || qu->nlines > 0) {
    if (!uv_is_active((uv_handle_t *)&qu->tick))
      uv_timer_start(&qu->tick, qu->tick.timer_cb, QUEUE_TICK_MS, QUEUE_TICK_MS);
  } else {
    uv_timer_stop(&qu->tick);
  }
}

/* Entries whose wait is over leave and are answered. */
static void expire_due(struct queue *qu) {
  uint64_t now = uv_now(qu->r->loop);
  size_t i;
  int again = 1;

  /* An expire may add or end other entries: start over after each. */
  while (again) {
    again = 0;
    for (i = 0; i < qu->nlines && !again; i++) {
      struct queue_entry *e;
      for (e = qu->lines[i]->head; e != NULL; e = e->next)
        if (e->deadline_ms != 0 && now >= e->deadline_ms) {
          line_take(qu, e, 0);
          observe(qu, e, "expired");
          e->ops->expire(e, NULL);
          again = 1;
          break;
        }
    }
  }
}

/* Entries that wait for nothing (deadline 0) leave, answered. */
static void expire_nowait(struct queue *qu) {
  size_t i;
  int again = 1;

  while (again) {
    again = 0;
    for (i = 0; i < qu->nlines && !again; i++) {
      struct queue_entry *e;
      for (e = qu->lines[i]->head; e != NULL; e = e->next)
        if (e->deadline_ms == 0) {
          line_take(qu, e, 0);
          e->ops->expire(e, NULL);
          again = 1;
          break;
        }
    }
  }
  arm(qu);
}

struct order {
  struct queue_line *l;
  double key;                   /* share / weight */
  uint64_t since;               /* its head's */
};

static int order_cmp(const void *a, const void *b) {
  const struct order *x = a, *y = b;

  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return x->since < y->since ? -1 : x->since > y->since;
}

/* One pass: starts what fits, in fair-share order, until nothing more
 * does. Re-entrant calls (a try that ends a batch at once, which adds an
 * entry back) just ask for another round. */
static void pass(struct queue *qu) {
  struct router *r = qu->r;
  struct order *ord = NULL;
  struct totals tot;
  size_t i, n;

  if (qu->in_pass) {
    qu->again = 1;
    return;
  }
  qu->in_pass = 1;
  do {
    qu->again = 0;
    expire_due(qu);
    for (;;) {
      int progress = 0, blocked = 0;
      if (qu->nlines == 0)
        break;
      free(ord);
      if ((ord = calloc(qu->nlines, sizeof(*ord))) == NULL)
        break; /* the next tick tries again */
      totals_get(r, &tot);
      for (i = n = 0; i < qu->nlines; i++) {
        struct queue_line *l = qu->lines[i];
        if (l->head == NULL)
          continue;
        ord[n].l = l;
        ord[n].key = share_of(r, l->ts, &tot) / (double)(l->ts->weight > 0 ? l->ts->weight : 1);
        ord[n].since = l->head->since_ms;
        n++;
      }
      qsort(ord, n, sizeof(*ord), order_cmp);
      for (i = 0; i < n && !progress; i++) {
        struct queue_line *l = ord[i].l;
        struct queue_entry *e = l->head;
        uint64_t since = e->since_ms;
        enum queue_try t;
        /* Out of the line while it tries: what it does may add it back.
         * A try that starts may end the entry at once (and free it). */
        line_take(qu, e, 1);
        t = e->ops->try_start(e, blocked);
        switch (t) {
        case QT_STARTED:
        case QT_PARTIAL:
          observe_at(qu, l->ts->name, since, "started");
          progress = 1;
          break;
        case QT_ENDED:
          progress = 1;
          break;
        case QT_NO_ROOM:
          blocked = 1;
          /* fall through */
        case QT_QUOTA:
          line_insert(qu, l, e, 1);
          break;
        }
        line_drop_if_empty(qu, l);
      }
      if (!progress)
        break;
    }
  } while (qu->again);
  free(ord);
  qu->in_pass = 0;
  arm(qu);
}

static void on_tick(uv_timer_t *t) {
  pass(t->data);
}

static void on_kick(uv_idle_t *h) {
  uv_idle_stop(h);
  pass(h->data);
}

int queue_init(struct router *r) {
  struct queue *qu = calloc(1, sizeof(*qu));

  if (qu == NULL)
    return -ENOMEM;
  qu->r = r;
  uv_timer_init(r->loop, &qu->tick);
  uv_idle_init(r->loop, &qu->kick);
  qu->tick.data = qu->kick.data = qu;
  qu->tick.timer_cb = on_tick;
  r->queue = qu;
  return 0;
}

void queue_close(struct router *r) {
  struct queue *qu = r->queue;
  struct queue_entry *e;

  if (qu == NULL || qu->closing)
    return;
  qu->closing = 1;
  uv_timer_stop(&qu->tick);
  uv_idle_stop(&qu->kick);
  while (qu->nlines > 0 && (e = qu->lines[0]->head) != NULL) {
    line_take(qu, e, 0);
    observe(qu, e, "expired");
    e->ops->expire(e, "the router is shutting down");
  }
}

static void qu_closed(uv_handle_t *h) {
  struct queue *qu = h->data;

  if (--qu->handles_open == 0)
    free(qu);
}

void queue_free(struct router *r) {
  struct queue *qu = r->queue;

  if (qu == NULL)
    return;
  r->queue = NULL;
  free(qu->lines);
  qu->handles_open = 2;
  uv_close((uv_handle_t *)&qu->tick, qu_closed);
  uv_close((uv_handle_t *)&qu->kick, qu_closed);
}

int queue_add(struct router *r, struct queue_entry *e, int front, int try_now) {
  struct queue *qu = r->queue;
  struct queue_line *l;

  FR_ASSERT(e->line == NULL && e->ts != NULL);
  if (qu == NULL || (l = line_of(qu, e->ts, 1)) == NULL)
    return -ENOMEM;
  if (e->since_ms == 0)
    e->since_ms = uv_now(r->loop);
  line_insert(qu, l, e, front);
  if (qu->closing) {
    line_take(qu, e, 0);
    e->ops->expire(e, "the router is shutting down");
    return 0;
  }
  if (!try_now) {
    arm(qu);
    return 0;
  }
  /* Bounded: an entry that would pass its tenant's or the router's bound
   * of waiting sandboxes gets one try and no wait. */
  if (e->deadline_ms != 0 && l->sandboxes > e->ts->max_queued_sandboxes) {
    e->overflow = QO_TENANT;
    e->deadline_ms = 0;
  } else if (e->deadline_ms != 0 && qu->sandboxes > r->cfg->queue_max_sandboxes) {
    e->overflow = QO_FULL;
    e->deadline_ms = 0;
  }
  pass(qu);
  /* <e> may be gone now (it started, and ended at once). Entries that
   * asked not to wait had their one try (or none: others of their tenant
   * wait before them, or the room is promised to a smaller share). */
  if (!qu->in_pass)
    expire_nowait(qu);
  return 0;
}

void queue_remove(struct router *r, struct queue_entry *e) {
  struct queue *qu = r->queue;

  if (qu == NULL || e->line == NULL)
    return;
  line_take(qu, e, 0);
  observe(qu, e, "gone");
  arm(qu);
}

int queue_waiting(const struct queue_entry *e) {
  return e->line != NULL;
}

void queue_kick(struct router *r) {
  struct queue *qu = r->queue;

  if (qu != NULL && !qu->closing && qu->nlines > 0)
    uv_idle_start(&qu->kick, on_kick);
}

int64_t queue_sandboxes(struct router *r, const struct tenant_state *t) {
  struct queue *qu = r->queue;
  size_t i;

  if (qu == NULL)
    return 0;
  if (t == NULL)
    return qu->sandboxes;
  for (i = 0; i < qu->nlines; i++)
    if (qu->lines[i]->ts == t)
      return qu->lines[i]->sandboxes;
  return 0;
}

/* <t>'s line (creates, sandboxes, the oldest's wait in seconds). */
static void line_stats(struct queue *qu, const struct tenant_state *t, int64_t *creates, int64_t *sandboxes,
                       double *oldest_s) {
  size_t i;

  *creates = *sandboxes = 0;
  *oldest_s = 0;
  for (i = 0; qu != NULL && i < qu->nlines; i++)
    if (qu->lines[i]->ts == t) {
      *creates = qu->lines[i]->n;
      *sandboxes = qu->lines[i]->sandboxes;
      if (qu->lines[i]->head != NULL)
        *oldest_s = (double)(uv_now(qu->r->loop) - qu->lines[i]->head->since_ms) / 1000.0;
    }
}

static json_t *tenant_json(struct router *r, struct tenant_state *t, const struct totals *tot) {
  struct fr_tenant_usage u;
  int64_t creates, sandboxes;
  double oldest, ewait;
  int64_t ewaiting = execwait_depth(r, t, &ewait);
  struct queue *qu = r->queue;
  json_t *j, *first = NULL;
  size_t i;

  line_stats(qu, t, &creates, &sandboxes, &oldest);
  tenant_usage_sum(r, t, &u);
  /* Its first waiting create: what it wants and why it waits. */
  for (i = 0; qu != NULL && i < qu->nlines; i++)
    if (qu->lines[i]->ts == t && qu->lines[i]->head != NULL) {
      const struct queue_entry *e = qu->lines[i]->head;
      first = json_pack("{s:I,s:f,s:s}", "sandboxes", (json_int_t)e->want, "waited_s",
                        (double)(uv_now(r->loop) - e->since_ms) / 1000.0, "why", e->why);
    }
  j = json_pack("{s:s,s:I,s:f,s:{s:I,s:I,s:f,s:I},s:{s:I,s:f,s:f,s:I},s:{s:I,s:I},s:{s:I,s:I,s:f}}", "tenant",
                   t->name, "weight", (json_int_t)t->weight, "share", share_of(r, t, tot), "queue", "creates",
                   (json_int_t)creates, "sandboxes", (json_int_t)sandboxes, "oldest_wait_s", oldest,
                   "max_sandboxes", (json_int_t)t->max_queued_sandboxes, "holds", "sandboxes",
                   (json_int_t)u.sandboxes, "cpus", (double)u.cpu_m / 1000.0, "memory_gb",
                   (double)u.mem_b / 1073741824.0, "gpus", (json_int_t)u.gpus, "creating", "sandboxes",
                   (json_int_t)t->creating, "execs", (json_int_t)t->execs, "exec_queue", "waiting",
                   (json_int_t)ewaiting, "max", (json_int_t)t->max_queued_execs, "oldest_wait_s", ewait);
  if (j != NULL)
    json_object_set_new(json_object_get(j, "queue"), "first", first != NULL ? first : json_null());
  else
    json_decref(first);
  return j;
}

json_t *queue_json(struct router *r, const struct tenant_state *self, int all) {
  struct queue *qu = r->queue;
  json_t *arr = json_array(), *j;
  struct totals tot;
  int64_t creates = 0;
  size_t i;

  totals_get(r, &tot);
  for (i = 0; i < r->ntenants; i++)
    if (all || r->tenants[i] == self)
      json_array_append_new(arr, tenant_json(r, r->tenants[i], &tot));
  for (i = 0; qu != NULL && i < qu->nlines; i++)
    creates += qu->lines[i]->n;
  j = json_pack("{s:o,s:{s:I,s:I,s:I,s:I}}", "tenants", arr, "total", "creates", (json_int_t)creates, "sandboxes",
                (json_int_t)(qu != NULL ? qu->sandboxes : 0), "max_sandboxes",
                (json_int_t)r->cfg->queue_max_sandboxes, "execs_waiting", (json_int_t)execwait_depth(r, NULL, NULL));
  return j;
}

void queue_metrics(struct router *r, struct fr_buf *b) {
  struct totals tot;
  size_t i;

  totals_get(r, &tot);
#define HEAD(name, help) fr_buf_puts(b, "# HELP " name " " help "\n# TYPE " name " gauge\n")
  /* Tenant names are [A-Za-z0-9._-] (config.c): nothing to escape. */
  HEAD("fedrouter_queue_creates", "Creates waiting for room, by tenant.");
  for (i = 0; i < r->ntenants; i++) {
    int64_t c, s;
    double o;
    line_stats(r->queue, r->tenants[i], &c, &s, &o);
    fr_buf_printf(b, "fedrouter_queue_creates{tenant=\"%s\"} %" PRId64 "\n", r->tenants[i]->name, c);
  }
  HEAD("fedrouter_queue_sandboxes", "Sandboxes of the creates waiting for room, by tenant.");
  for (i = 0; i < r->ntenants; i++)
    fr_buf_printf(b, "fedrouter_queue_sandboxes{tenant=\"%s\"} %" PRId64 "\n", r->tenants[i]->name,
                  queue_sandboxes(r, r->tenants[i]));
  HEAD("fedrouter_queue_oldest_wait_seconds", "How long the tenant's oldest waiting create has waited.");
  for (i = 0; i < r->ntenants; i++) {
    int64_t c, s;
    double o;
    line_stats(r->queue, r->tenants[i], &c, &s, &o);
    fr_buf_printf(b, "fedrouter_queue_oldest_wait_seconds{tenant=\"%s\"} %.3f\n", r->tenants[i]->name, o);
  }
  HEAD("fedrouter_tenant_share", "The tenant's dominant share of the federation's allocatable cpu and memory "
                                 "(what it holds and is making), before its weight.");
  for (i = 0; i < r->ntenants; i++)
    fr_buf_printf(b, "fedrouter_tenant_share{tenant=\"%s\"} %.6f\n", r->tenants[i]->name,
                  share_of(r, r->tenants[i], &tot));
  HEAD("fedrouter_tenant_weight", "The tenant's fair-share weight.");
  for (i = 0; i < r->ntenants; i++)
    fr_buf_printf(b, "fedrouter_tenant_weight{tenant=\"%s\"} %" PRId64 "\n", r->tenants[i]->name,
                  r->tenants[i]->weight);
  HEAD("fedrouter_exec_queue", "Execs waiting for one of the tenant's max_concurrent_execs slots.");
  for (i = 0; i < r->ntenants; i++)
    fr_buf_printf(b, "fedrouter_exec_queue{tenant=\"%s\"} %" PRId64 "\n", r->tenants[i]->name,
                  execwait_depth(r, r->tenants[i], NULL));
#undef HEAD
}
