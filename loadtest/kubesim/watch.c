/* watch.c - watch streams: chunked JSON lines, one event per line.
 *
 * A watcher filters by namespace, label and field selector. Like the
 * apiserver, an object that starts matching is sent as ADDED and one that
 * stops matching as DELETED, so a client watching "pool=x" sees a claimed pod
 * (relabelled) leave its set.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/buf.h"
#include "fr/log.h"
#include "sim.h"

/* A client that does not read its watch is cut off past this many queued
 * bytes, as the apiserver drops watchers whose buffers fill up. Large enough
 * for the synthetic ADDED burst of 50k pods. */
#define WATCH_MAX_PENDING (256u * 1024 * 1024)

struct sim_watcher {
  struct sim_watcher *prev, *next;
  struct sim *sim;
  struct fr_http_req *req;
  enum sim_kind kind;
  char *ns;
  struct fr_selector *lsel, *fsel;
  int table;
  int bookmarks;
  int done;
  uv_timer_t timeout;
  uv_timer_t bookmark;
  int open_handles;
};

static void watcher_handle_closed(uv_handle_t *h) {
  struct sim_watcher *w = h->data;

  if (--w->open_handles > 0)
    return;
  fr_selector_free(w->lsel);
  fr_selector_free(w->fsel);
  free(w->ns);
  free(w);
}

/* Unlinks and frees the watcher; <end> ends the stream cleanly, otherwise
 * the request is already gone or dropped by the caller. */
static void watcher_close(struct sim_watcher *w, int end) {
  struct sim *s = w->sim;

  if (w->done)
    return;
  w->done = 1;
  if (w->prev)
    w->prev->next = w->next;
  else
    s->watchers = w->next;
  if (w->next)
    w->next->prev = w->prev;
  s->nwatchers--;
  if (end == 1)
    fr_http_stream_end(w->req);
  else if (end == 2)
    fr_http_abort(w->req);
  w->req = NULL;
  uv_close((uv_handle_t *)&w->timeout, watcher_handle_closed);
  uv_close((uv_handle_t *)&w->bookmark, watcher_handle_closed);
}

static void on_req_abort(struct fr_http_req *req) {
  watcher_close(req->data, 0);
}

static int matches(const struct sim_watcher *w, const struct objver *v) {
  if (v == NULL)
    return 0;
  if (w->ns != NULL && (v->fields[F_NAMESPACE] == NULL || strcmp(w->ns, v->fields[F_NAMESPACE]) != 0))
    return 0;
  return fr_selector_matches(w->lsel, objver_label, v) &&
         fr_selector_matches(w->fsel, objver_field, v);
}

static void send_line(struct sim_watcher *w, struct fr_buf *b) {
  if (w->done)
    return;
  if (fr_http_stream_write(w->req, b->data, b->len) != 0) {
    w->req = NULL;
    watcher_close(w, 0);
    return;
  }
  if (fr_http_pending_bytes(w->req) > WATCH_MAX_PENDING) {
    FR_WARN("watch", "dropping a watch whose client does not read (%zu bytes queued)",
            fr_http_pending_bytes(w->req));
    watcher_close(w, 2);
  }
}

static const char *const ev_names[] = {"ADDED", "MODIFIED", "DELETED"};

static void send_event(struct sim_watcher *w, int type, struct objver *v) {
  struct fr_buf b;

  fr_buf_init(&b);
  fr_buf_printf(&b, "{\"type\":\"%s\",\"object\":", ev_names[type]);
  if (w->table) {
    char rvs[24];
    snprintf(rvs, sizeof(rvs), "%" PRIu64, v->rv);
    table_render(w->sim, w->kind, &v, 1, rvs, NULL, 1, &b);
  } else {
    fr_buf_append(&b, v->json, v->json_len);
  }
  fr_buf_puts(&b, "}\n");
  send_line(w, &b);
  fr_buf_free(&b);
}

static void deliver(const struct sim_event *ev, void *arg) {
  struct sim_watcher *w = arg;
  int was, is;

  if (w->done || ev->obj->kind != w->kind)
    return;
  was = matches(w, ev->prev);
  is = ev->type != EV_DELETED && matches(w, ev->obj);
  if (ev->type == EV_DELETED) {
    if (was)
      send_event(w, EV_DELETED, ev->obj);
  } else if (ev->type == EV_ADDED) {
    if (is)
      send_event(w, EV_ADDED, ev->obj);
  } else if (was && is) {
    send_event(w, EV_MODIFIED, ev->obj);
  } else if (is) {
    send_event(w, EV_ADDED, ev->obj);
  } else if (was) {
    send_event(w, EV_DELETED, ev->obj);
  }
}

void watch_notify(struct sim *s, const struct sim_event *ev) {
  struct sim_watcher *w, *nx;

  for (w = s->watchers; w != NULL; w = nx) {
    nx = w->next;
    deliver(ev, w);
  }
}

static void on_timeout(uv_timer_t *t) {
  watcher_close(t->data, 1);
}

static void on_bookmark(uv_timer_t *t) {
  struct sim_watcher *w = t->data;
  struct fr_buf b;

  fr_buf_init(&b);
  fr_buf_printf(&b,
                "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"%s\",\"apiVersion\":\"%s\","
                "\"metadata\":{\"resourceVersion\":\"%" PRIu64 "\"}}}\n",
                kind_name(w->kind), kind_api_version(w->kind), w->sim->rv);
  send_line(w, &b);
  fr_buf_free(&b);
}

void watch_drop_all(struct sim *s) {
  while (s->watchers != NULL)
    watcher_close(s->watchers, 2);
}

void watch_start(struct sim *s, struct fr_http_req *req, enum sim_kind k, const char *ns,
                 struct fr_selector *lsel, struct fr_selector *fsel, int table,
                 uint64_t from_rv, int have_rv, int bookmarks, uint64_t timeout_ms) {
  struct sim_watcher *w = calloc(1, sizeof(*w));
  struct sim_obj *o;

  if (w == NULL || (ns != NULL && (w->ns = strdup(ns)) == NULL)) {
    free(w);
    fr_selector_free(lsel);
    fr_selector_free(fsel);
    api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
    return;
  }
  w->sim = s;
  w->req = req;
  w->kind = k;
  w->lsel = lsel;
  w->fsel = fsel;
  w->table = table;
  w->bookmarks = bookmarks;
  uv_timer_init(s->loop, &w->timeout);
  uv_timer_init(s->loop, &w->bookmark);
  w->timeout.data = w;
  w->bookmark.data = w;
  w->open_handles = 2;
  w->next = s->watchers;
  if (s->watchers)
    s->watchers->prev = w;
  s->watchers = w;
  s->nwatchers++;
  req->data = w;
  req->abort_cb = on_req_abort;

  if (fr_http_stream_begin(req, 200, "application/json", NULL) != 0) {
    w->req = NULL;
    watcher_close(w, 0);
    return;
  }
  if (have_rv && from_rv > 0) {
    if (store_replay(s, from_rv, deliver, w) != 0) {
      struct fr_buf b;
      fr_buf_init(&b);
      fr_buf_printf(&b,
                    "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\","
                    "\"metadata\":{},\"status\":\"Failure\",\"message\":\"too old resource "
                    "version: %" PRIu64 " (%" PRIu64 ")\",\"reason\":\"Expired\",\"code\":410}}\n",
                    from_rv, store_oldest_rv(s) ? store_oldest_rv(s) - 1 : 0);
      send_line(w, &b);
      fr_buf_free(&b);
      watcher_close(w, 1);
      return;
    }
  } else {
    /* No resourceVersion (or "0"): the current state as synthetic ADDED. */
    for (o = store_first(s, k, ns); o != NULL && !w->done; o = store_next(s, o)) {
      if (ns != NULL && kind_namespaced(k) && strcmp(o->ns, ns) != 0)
        break;
      if (matches(w, o->cur))
        send_event(w, EV_ADDED, o->cur);
    }
  }
  if (w->done)
    return;
  if (timeout_ms > 0)
    uv_timer_start(&w->timeout, on_timeout, timeout_ms, 0);
  if (bookmarks && !table && s->opts.bookmark_ms > 0)
    uv_timer_start(&w->bookmark, on_bookmark, (uint64_t)s->opts.bookmark_ms,
                   (uint64_t)s->opts.bookmark_ms);
}
