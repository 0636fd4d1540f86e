/* watch.c — envd's directory watchers on inotify: the server-streaming
 * filesystem.Filesystem/WatchDir and the polling trio CreateWatcher /
 * GetWatcherEvents / RemoveWatcher.
 *
 * Every watcher owns one inotify instance (its fd is a struct io on the
 * agent's epoll loop; reads never block) holding one watch per directory:
 * the watched one and, when recursive, every directory below it, added as
 * they appear. Events are mapped as envd's fsnotify maps them:
 *   IN_CREATE, IN_MOVED_TO      -> EVENT_TYPE_CREATE
 *   IN_MOVED_FROM, IN_MOVE_SELF -> EVENT_TYPE_RENAME
 *   IN_ATTRIB                   -> EVENT_TYPE_CHMOD
 *   IN_MODIFY                   -> EVENT_TYPE_WRITE
 *   IN_DELETE, IN_DELETE_SELF   -> EVENT_TYPE_REMOVE
 * with the name relative to the watched directory ("sub/f"; "." for the
 * watched directory itself). The *_SELF events of a subdirectory are not
 * reported: its parent already reported the same change by name.
 *
 * Bounds (what a client can make the agent hold):
 *  - WATCH_MAX watchers per agent, streams and polling ones together;
 *    beyond: resource_exhausted.
 *  - WATCH_MAX_DIRS directories per watcher; a tree that has more when the
 *    watch starts is refused (resource_exhausted), one that grows past it
 *    ends the watcher with resource_exhausted.
 *  - A stream's events go into the connection's output queue; while
 *    HTTP_LOW_WATER bytes wait for a slow client the inotify fd is not read
 *    (the kernel keeps up to fs.inotify.max_queued_events). When the kernel
 *    queue overflows, events were lost: the watcher ends with an error
 *    (internal, as envd reports fsnotify's overflow).
 *  - A polling watcher keeps at most WATCH_MAX_QUEUED events between two
 *    GetWatcherEvents (WATCH_MAX_QUEUED_TOTAL over all); one more and it fails (resource_exhausted, every
 *    later GetWatcherEvents says so, as envd's watcher error does) and its
 *    inotify instance is released. One not polled for WATCH_IDLE_MS is
 *    removed (a client that forgot RemoveWatcher).
 *  - A directory moved in holding more than WATCH_MAX_REPORTED entries
 *    (reported as created) ends the watcher: resource_exhausted.
 *
 * Lifetime: a stream's watcher is its connection's producer (agent.h):
 * detached when its response ends or its connection closes (client gone,
 * stop(), deadline), freed by the transport after the epoll batch. A
 * polling one ends by RemoveWatcher, idle expiry or agent shutdown:
 * watch_close() releases the fd at once; the struct is freed by
 * watch_collect() after the epoll batch, as connections are, because an
 * event for its fd may still be pending in the same batch.
 */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"

#define WATCH_MAX 64
#define WATCH_MAX_DIRS 4096
#define WATCH_MAX_QUEUED 10000
#define WATCH_MAX_QUEUED_TOTAL 50000 /* over all polling watchers of the agent */
#define WATCH_MAX_REPORTED 10000     /* entries reported for one directory moved in */
#define WATCH_IDLE_MS 600000
#define WATCH_MAX_DEPTH 128
#define WATCH_READS_PER_TURN 8

#define DIR_MASK                                                                        \
  (IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_MODIFY | IN_ATTRIB | IN_DELETE |       \
   IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

struct wdir {
  int wd;
  char *rel; /* "" for the watched directory */
};

struct watch {
  struct producer prod; /* a stream's: its connection is prod.c (= c) */
  struct io io; /* the inotify fd, -1 once released */
  struct agent *a;
  struct watch *prev, *next;
  struct conn *c; /* the WatchDir stream, NULL for a polling watcher */
  char id[40];
  char *root; /* absolute, no trailing slash (except "/") */
  bool recursive;
  bool include_entry;
  bool paused; /* stream: not reading while the client lags */
  unsigned reported; /* entries reported by the walk of a new directory */
  uint32_t from_cookie; /* of the last directory moved away, to tell a move within */
  uint32_t upload_cookie; /* of the last upload's temporary file renamed into place */
  bool upload_replaces;   /* ... over an existing file */
  bool dead;
  struct wdir *dirs;
  size_t ndirs, capdirs;
  json_t *queue;       /* polling: FilesystemEvent objects not yet fetched */
  char err_code[32];   /* polling: the watcher failed, "" while it works */
  char err_msg[256];
  struct timer idle;   /* polling: removed when not polled for long */
};

static void watch_io_cb(struct agent *a, struct io *io, uint32_t events);
static void watch_fail(struct watch *w, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- the directory table ---- */

static char *join_rel(const char *dir, const char *name) {
  size_t dl = strlen(dir), nl = strlen(name);
  char *s = malloc(dl + nl + 2);
  if (s == NULL)
    return NULL;
  if (dl == 0) {
    memcpy(s, name, nl + 1);
  } else {
    memcpy(s, dir, dl);
    s[dl] = '/';
    memcpy(s + dl + 1, name, nl + 1);
  }
  return s;
}

/* root + "/" + rel, or NULL when it would be longer than PATH_MAX. */
static char *full_path(const struct watch *w, const char *rel) {
  char *s;
  if (rel[0] == '\0')
    return strdup(w->root);
  if (asprintf(&s, "%s%s%s", w->root, strcmp(w->root, "/") == 0 ? "" : "/", rel) < 0) {
    errno = ENOMEM;
    return NULL;
  }
  if (strlen(s) >= 4096) {
    free(s);
    errno = ENAMETOOLONG;
    return NULL;
  }
  return s;
}

static struct wdir *dir_find(struct watch *w, int wd) {
  for (size_t i = 0; i < w->ndirs; i++)
    if (w->dirs[i].wd == wd)
      return &w->dirs[i];
  return NULL;
}

static void dir_drop(struct watch *w, struct wdir *d) {
  free(d->rel);
  *d = w->dirs[--w->ndirs];
}

/* Adds a watch on <rel> (the caller checked it is a directory). -E2BIG past
 * WATCH_MAX_DIRS; a directory gone or unreadable meanwhile is not an error
 * (1 is returned: not added). */
static int dir_add(struct watch *w, const char *rel, uint32_t extra) {
  if (w->ndirs >= WATCH_MAX_DIRS)
    return -E2BIG;
  char *path = full_path(w, rel);
  if (path == NULL)
    return errno == ENOMEM ? -ENOMEM : 1;
  int wd = inotify_add_watch(w->io.fd, path, DIR_MASK | extra);
  int err = errno;
  free(path);
  if (wd < 0) {
    if (rel[0] != '\0' && (err == ENOENT || err == EACCES || err == ENOTDIR || err == ELOOP))
      return 1;
    return -err;
  }
  struct wdir *old = dir_find(w, wd);
  if (old != NULL) { /* the same directory again (a bind mount, a move back) */
    char *r = strdup(rel);
    if (r == NULL)
      return -ENOMEM;
    free(old->rel);
    old->rel = r;
    return 0;
  }
  if (w->ndirs == w->capdirs) {
    size_t cap = w->capdirs ? w->capdirs * 2 : 8;
    struct wdir *nd = realloc(w->dirs, cap * sizeof(*nd));
    if (nd == NULL) {
      inotify_rm_watch(w->io.fd, wd);
      return -ENOMEM;
    }
    w->dirs = nd;
    w->capdirs = cap;
  }
  char *r = strdup(rel);
  if (r == NULL) {
    inotify_rm_watch(w->io.fd, wd);
    return -ENOMEM;
  }
  w->dirs[w->ndirs].wd = wd;
  w->dirs[w->ndirs].rel = r;
  w->ndirs++;
  return 0;
}

/* Forgets <rel> and every directory below it (moved away). */
static void dir_drop_tree(struct watch *w, const char *rel) {
  size_t rl = strlen(rel);
  for (size_t i = 0; i < w->ndirs;) {
    const char *r = w->dirs[i].rel;
    if (strncmp(r, rel, rl) == 0 && (r[rl] == '\0' || r[rl] == '/')) {
      inotify_rm_watch(w->io.fd, w->dirs[i].wd);
      dir_drop(w, &w->dirs[i]);
      continue;
    }
    i++;
  }
}

static int emit(struct watch *w, const char *name, const char *type, const char *rel);

/* Watches every directory below <rel> (already watched itself). With
 * <report>, each entry found is reported as created: the directory is new,
 * so what is in it was made before its watch could see it. */
static int walk(struct watch *w, const char *rel, unsigned depth, bool report) {
  if (depth >= WATCH_MAX_DEPTH)
    return 0;
  char *path = full_path(w, rel);
  if (path == NULL)
    return errno == ENOMEM ? -ENOMEM : 0;
  DIR *d = opendir(path);
  if (d == NULL) {
    int err = errno;
    free(path);
    return err == ENOENT || err == EACCES || err == ENOTDIR ? 0 : -err;
  }
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    char *sub = join_rel(rel, de->d_name);
    if (sub == NULL) {
      rc = -ENOMEM;
      break;
    }
    bool is_dir = de->d_type == DT_DIR;
    if (de->d_type == DT_UNKNOWN) {
      struct stat st;
      char *fp = full_path(w, sub);
      is_dir = fp && lstat(fp, &st) == 0 && S_ISDIR(st.st_mode);
      free(fp);
    }
    if (report && ++w->reported > WATCH_MAX_REPORTED)
      rc = -EOVERFLOW;
    else if (report)
      rc = emit(w, sub, "EVENT_TYPE_CREATE", sub);
    if (rc == 0 && is_dir) {
      int r = dir_add(w, sub, IN_DONT_FOLLOW);
      if (r < 0)
        rc = r;
      else if (r == 0)
        rc = walk(w, sub, depth + 1, report);
    }
    free(sub);
  }
  closedir(d);
  free(path);
  return rc;
}

/* ---- lifetime ---- */

static void release(struct watch *w) {
  if (w->io.fd >= 0) {
    io_stop(w->a, &w->io);
    close(w->io.fd);
    w->io.fd = -1;
  }
  for (size_t i = 0; i < w->ndirs; i++)
    free(w->dirs[i].rel);
  free(w->dirs);
  w->dirs = NULL;
  w->ndirs = w->capdirs = 0;
}

/* Stops watching and leaves the agent's list of watchers. */
static void watch_end(struct watch *w) {
  struct agent *a = w->a;
  if (w->dead)
    return;
  w->dead = true;
  release(w);
  a->watch_queued -= json_array_size(w->queue);
  json_array_clear(w->queue);
  timer_stop(a, &w->idle);
  if (w->prev)
    w->prev->next = w->next;
  else
    a->watches = w->next;
  if (w->next)
    w->next->prev = w->prev;
  a->nwatches--;
  w->prev = w->next = NULL;
}

static void watch_free(struct watch *w) {
  json_decref(w->queue);
  free(w->root);
  free(w);
}

/* A polling watcher goes: freed by watch_collect(). */
static void watch_close(struct watch *w) {
  assert(w->c == NULL);
  if (w->dead)
    return;
  watch_end(w);
  w->next = w->a->dead_watches;
  w->a->dead_watches = w;
}

/* ---- a WatchDir stream as its connection's producer ---- */

/* The connection has room again: resume reading events. */
static int stream_pump(struct producer *p) {
  struct watch *w = container_of(p, struct watch, prod);
  if (w->paused && !w->dead && w->io.fd >= 0) {
    w->paused = false;
    if (io_start(w->a, &w->io, EPOLLIN) != 0)
      watch_fail(w, "internal", "watcher error: epoll: %s", strerror(errno));
  }
  return 0;
}

static void stream_detach(struct producer *p, bool peer_gone) {
  struct watch *w = container_of(p, struct watch, prod);
  (void)peer_gone;
  watch_end(w);
  w->c = NULL;
}

static void stream_free(struct producer *p) {
  watch_free(container_of(p, struct watch, prod));
}

static const struct producer_ops stream_ops = {stream_pump, stream_detach, stream_free};

void watch_held(const struct agent *a, size_t *paused, size_t *kernel_bytes) {
  const struct watch *w;
  int n;

  *paused = *kernel_bytes = 0;
  for (w = a->watches; w != NULL; w = w->next) {
    *paused += w->c != NULL && w->paused;
    if (w->io.fd >= 0 && ioctl(w->io.fd, FIONREAD, &n) == 0 && n > 0)
      *kernel_bytes += (size_t)n;
  }
}

void watch_collect(struct agent *a) {
  while (a->dead_watches) {
    struct watch *w = a->dead_watches;
    a->dead_watches = w->next;
    watch_free(w);
  }
}

void watch_close_all(struct agent *a) {
  while (a->watches) {
    if (a->watches->c != NULL)
      conn_close(a->watches->c); /* detaches its watcher */
    else
      watch_close(a->watches);
  }
}

/* The watcher cannot go on: a stream ends with the error, a polling
 * watcher keeps it for GetWatcherEvents and lets go of its inotify fd. */
static void watch_fail(struct watch *w, const char *code, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  text_fix(msg);
  log_msg("watcher %s on %s: %s", w->id, w->root, msg);
  if (w->c != NULL) {
    /* The stream ends with the error; its connection detaches the
     * watcher when the answer is out. */
    struct conn *c = w->c;
    release(w);
    envelope_write(c, 2, json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg));
    http_stream_end(c);
    conn_service(c);
    return;
  }
  release(w);
  w->a->watch_queued -= json_array_size(w->queue);
  json_array_clear(w->queue);
  snprintf(w->err_code, sizeof(w->err_code), "%s", code);
  snprintf(w->err_msg, sizeof(w->err_msg), "%s", msg);
}

/* ---- events ---- */

/* One FilesystemEvent. Returns -1 when the watcher failed. A name that is
 * not UTF-8 cannot be a protobuf string: such an event is skipped. */
static int emit(struct watch *w, const char *name, const char *type, const char *rel) {
  json_t *jn = json_string(name);
  if (jn == NULL)
    return 0;
  json_t *ev = json_pack("{s:o,s:s}", "name", jn, "type", type);
  if (ev == NULL)
    return 0;
  if (w->include_entry && rel != NULL) {
    char *fp = full_path(w, rel);
    int err;
    json_t *e = fp ? fs_entry_json(fp, &err) : NULL;
    free(fp);
    if (e != NULL) /* gone already (a remove): no entry, as envd */
      json_object_set_new(ev, "entry", e);
  }
  if (w->c != NULL) {
    if (w->io.fd >= 0) /* else the stream has ended */
      envelope_write(w->c, 0, json_pack("{s:o}", "filesystem", ev));
    else
      json_decref(ev);
    return 0;
  }
  if (json_array_size(w->queue) >= WATCH_MAX_QUEUED ||
      w->a->watch_queued >= WATCH_MAX_QUEUED_TOTAL) {
    json_decref(ev);
    watch_fail(w, "resource_exhausted",
               "more than %d events waited for GetWatcherEvents (%d over all watchers): events "
               "were lost; remove this watcher and create a new one, polling more often",
               WATCH_MAX_QUEUED, WATCH_MAX_QUEUED_TOTAL);
    return -1;
  }
  if (json_array_append_new(w->queue, ev) == 0)
    w->a->watch_queued++;
  return 0;
}

/* Handles one inotify event; -1 when the watcher ended. */
static int on_event(struct watch *w, const struct inotify_event *ev) {
  if (ev->mask & IN_Q_OVERFLOW) {
    watch_fail(w, "internal",
               "watcher error: the kernel's inotify queue overflowed (fs.inotify.max_queued_events): "
               "events were lost");
    return -1;
  }
  struct wdir *d = dir_find(w, ev->wd);
  if (d == NULL)
    return 0; /* a watch we dropped; its IN_IGNORED */
  bool is_root = d->rel[0] == '\0';
  if (ev->mask & IN_IGNORED) {
    if (!is_root) {
      dir_drop(w, d);
      return 0;
    }
    /* The watched directory is gone (removed, or its filesystem
     * unmounted): nothing more can come. A stream ends normally. */
    if (w->c != NULL) {
      struct conn *c = w->c;
      release(w);
      envelope_write(c, 2, json_object());
      http_stream_end(c);
      conn_service(c);
      return -1;
    }
    release(w);
    return -1;
  }
  bool self = ev->len == 0 || ev->name[0] == '\0';
  if (self && !is_root)
    return 0; /* the parent reported it by name */
  bool replaces;
  if (!self && upload_temp_name(w->a, ev->name, &replaces)) {
    /* The agent's own upload in the making: nobody else's business. */
    if (ev->mask & IN_MOVED_FROM) {
      w->upload_cookie = ev->cookie;
      w->upload_replaces = replaces;
    }
    return 0;
  }
  char *rel = self ? strdup("") : join_rel(d->rel, ev->name);
  if (rel == NULL)
    return 0;
  const char *name = rel[0] ? rel : ".";
  if ((ev->mask & IN_MOVED_TO) && ev->cookie != 0 && ev->cookie == w->upload_cookie) {
    /* An upload renamed into place, reported as envd's in-place write
     * shows: a new file is created, then written (unless empty); an
     * existing one is written. */
    char *fp = full_path(w, rel);
    struct stat st;
    int rc = 0;
    w->upload_cookie = 0;
    if (!w->upload_replaces)
      rc = emit(w, name, "EVENT_TYPE_CREATE", rel);
    if (rc == 0 && (w->upload_replaces || (fp && stat(fp, &st) == 0 && st.st_size > 0)))
      rc = emit(w, name, "EVENT_TYPE_WRITE", rel);
    free(fp);
    free(rel);
    return rc;
  }
  static const struct {
    uint32_t mask;
    const char *type;
  } map[] = {
      {IN_CREATE | IN_MOVED_TO, "EVENT_TYPE_CREATE"},
      {IN_MOVED_FROM | IN_MOVE_SELF, "EVENT_TYPE_RENAME"},
      {IN_ATTRIB, "EVENT_TYPE_CHMOD"},
      {IN_MODIFY, "EVENT_TYPE_WRITE"},
      {IN_DELETE | IN_DELETE_SELF, "EVENT_TYPE_REMOVE"},
  };
  int rc = 0;
  for (size_t i = 0; i < sizeof(map) / sizeof(map[0]) && rc == 0; i++)
    if (ev->mask & map[i].mask)
      rc = emit(w, name, map[i].type, rel);
  if (rc == 0 && w->recursive && !self && (ev->mask & IN_ISDIR)) {
    if (ev->mask & IN_MOVED_FROM) {
      dir_drop_tree(w, rel);
      w->from_cookie = ev->cookie;
    } else if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
      /* A directory moved within the watched tree brings nothing new: its
       * entries were reported where they were made. */
      bool within = (ev->mask & IN_MOVED_TO) && ev->cookie != 0 && ev->cookie == w->from_cookie;
      w->reported = 0;
      int r = dir_add(w, rel, IN_DONT_FOLLOW);
      if (r == 0)
        r = walk(w, rel, 1, !within);
      if (r < 0)
        rc = -1;
      if (r < 0 && !w->dead && w->io.fd >= 0) { /* else the walk's emit() failed it */
        if (r == -E2BIG)
          watch_fail(w, "resource_exhausted", "more than %d directories to watch under %s",
                     WATCH_MAX_DIRS, w->root);
        else if (r == -EOVERFLOW)
          watch_fail(w, "resource_exhausted",
                     "%s appeared holding more than %d entries: events were lost", name,
                     WATCH_MAX_REPORTED);
        else
          watch_fail(w, "internal", "watcher error: watch %s: %s", name, strerror(-r));
      }
    }
  }
  free(rel);
  return rc;
}

/* Reads what the kernel queued, at most <rounds> buffers (the fd is
 * level-triggered: the rest comes next turn); rounds 0: until it is empty
 * (bounded: the kernel's queue is, and so is a polling watcher's). */
static void drain(struct watch *w, int rounds) {
  char buf[16 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (int round = 0; (rounds == 0 || round < rounds) && !w->dead && w->io.fd >= 0 && !w->paused;
       round++) {
    ssize_t n = read(w->io.fd, buf, sizeof(buf));
    if (n <= 0) {
      if (n < 0 && errno != EAGAIN && errno != EINTR)
        watch_fail(w, "internal", "watcher error: read: %s", strerror(errno));
      return;
    }
    for (char *p = buf; p < buf + n;) {
      const struct inotify_event *ev = (const struct inotify_event *)p;
      p += sizeof(*ev) + ev->len;
      if (on_event(w, ev) < 0)
        return;
    }
    if (w->c != NULL) {
      struct conn *c = w->c;
      conn_service(c);
      if (w->dead || c->dead)
        return;
      if (buf_size(&c->out) >= HTTP_LOW_WATER) {
        /* The client lags: leave the events in the kernel's queue. */
        io_stop(w->a, &w->io);
        w->paused = true;
        return;
      }
    }
  }
}

static void watch_io_cb(struct agent *a, struct io *io, uint32_t events) {
  (void)a;
  (void)events;
  drain(container_of(io, struct watch, io), WATCH_READS_PER_TURN);
}

static void idle_cb(struct agent *a, struct timer *t) {
  struct watch *w = container_of(t, struct watch, idle);
  (void)a;
  log_msg("watcher %s on %s: not polled for %d s: removed", w->id, w->root, WATCH_IDLE_MS / 1000);
  watch_close(w);
}

/* ---- requests ---- */

struct watch_req {
  const char *path;
  bool recursive, include_entry;
};

static bool opt_bool(json_t *req, const char *key, bool *out) {
  json_t *j = json_object_get(req, key);
  if (j == NULL || json_is_null(j)) {
    *out = false;
    return true;
  }
  if (!json_is_boolean(j))
    return false;
  *out = json_is_true(j);
  return true;
}

/* Validates a WatchDirRequest / CreateWatcherRequest and makes the watcher
 * (not yet in a list). Answers the error itself and returns NULL. */
static struct watch *watch_new(struct conn *c, json_t *req, bool streaming) {
  struct agent *a = c->a;
  const char *path;
  bool rec, inc, net;
  path = rpc_path(c, req, "path", streaming);
  if (path == NULL)
    return NULL;
  if (!opt_bool(req, "recursive", &rec) || !opt_bool(req, "includeEntry", &inc) ||
      !opt_bool(req, "allowNetworkMounts", &net)) {
    rpc_error(c, streaming, "invalid_argument",
              "recursive, includeEntry and allowNetworkMounts must be booleans");
    return NULL;
  }
  struct stat st;
  if (stat(path, &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      rpc_error(c, streaming, "not_found", "path %s not found", path);
    else if (errno == EACCES)
      rpc_error(c, streaming, "permission_denied", "error statting path %s: %s", path, strerror(errno));
    else
      rpc_error(c, streaming, "internal", "error statting path %s: %s", path, strerror(errno));
    return NULL;
  }
  if (!S_ISDIR(st.st_mode)) {
    rpc_error(c, streaming, "invalid_argument", "path %s not a directory", path);
    return NULL;
  }
  if (a->nwatches >= WATCH_MAX) {
    rpc_error(c, streaming, "resource_exhausted",
              "too many watchers in this sandbox (%d): stop or remove one first", WATCH_MAX);
    return NULL;
  }
  struct watch *w = calloc(1, sizeof(*w));
  if (w == NULL || (w->root = strdup(path)) == NULL) {
    free(w);
    rpc_error(c, streaming, "resource_exhausted", "out of memory");
    return NULL;
  }
  size_t rl = strlen(w->root);
  while (rl > 1 && w->root[rl - 1] == '/')
    w->root[--rl] = '\0';
  w->a = a;
  w->recursive = rec;
  w->include_entry = inc;
  w->io.cb = watch_io_cb;
  snprintf(w->id, sizeof(w->id), "w%s%llu", a->nonce, (unsigned long long)++a->next_watch_id);
  w->io.fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  int rc = w->io.fd < 0 ? -errno : dir_add(w, "", 0);
  if (rc == 0 && rec)
    rc = walk(w, "", 1, false);
  if (rc == 0)
    rc = io_start(a, &w->io, EPOLLIN);
  if (rc != 0) {
    if (rc == -E2BIG)
      rpc_error(c, streaming, "resource_exhausted", "more than %d directories to watch under %s",
                WATCH_MAX_DIRS, w->root);
    else if (rc == -EMFILE || rc == -ENFILE)
      rpc_error(c, streaming, "resource_exhausted",
                "error creating watcher: %s (fs.inotify.max_user_instances)", strerror(-rc));
    else if (rc == -ENOSPC)
      rpc_error(c, streaming, "resource_exhausted",
                "error adding path %s to watcher: the inotify watch limit is reached "
                "(fs.inotify.max_user_watches)", w->root);
    else if (rc == -ENOTDIR)
      rpc_error(c, streaming, "invalid_argument", "path %s not a directory", path);
    else if (rc == -ENOENT)
      rpc_error(c, streaming, "not_found", "path %s not found", path);
    else
      rpc_error(c, streaming, rc == -EACCES ? "permission_denied" : "internal",
                "error adding path %s to watcher: %s", w->root, strerror(-rc));
    release(w);
    free(w->root);
    free(w);
    return NULL;
  }
  w->next = a->watches;
  if (a->watches)
    a->watches->prev = w;
  a->watches = w;
  a->nwatches++;
  return w;
}

int watch_stream_start(struct conn *c, json_t *req) {
  struct watch *w = watch_new(c, req, true);
  if (w == NULL)
    return -1;
  w->c = c;
  conn_set_producer(c, &w->prod, &stream_ops);
  http_stream_begin(c, 200, "application/connect+json", NULL);
  envelope_write(c, 0, json_pack("{s:{}}", "start"));
  log_msg("watcher %s: streaming %s%s", w->id, w->root, w->recursive ? " (recursive)" : "");
  return 0;
}

static struct watch *find_polled(struct conn *c, json_t *req) {
  json_t *j = json_object_get(req, "watcherId");
  const char *id = json_string_value(j);
  if (id == NULL || strlen(id) != json_string_length(j) || strlen(id) > 200) {
    rpc_error(c, false, "invalid_argument", "watcherId must be a string");
    return NULL;
  }
  for (struct watch *w = c->a->watches; w; w = w->next)
    if (w->c == NULL && strcmp(w->id, id) == 0)
      return w;
  rpc_error(c, false, "not_found", "watcher with id %s not found", id);
  return NULL;
}

void watch_rpc(struct conn *c, const char *method, json_t *req) {
  if (strcmp(method, "CreateWatcher") == 0) {
    struct watch *w = watch_new(c, req, false);
    if (w == NULL)
      return;
    w->queue = json_array();
    if (w->queue == NULL) {
      watch_close(w);
      rpc_error(c, false, "resource_exhausted", "out of memory");
      return;
    }
    timer_start(c->a, &w->idle, WATCH_IDLE_MS, idle_cb);
    log_msg("watcher %s: polling %s%s", w->id, w->root, w->recursive ? " (recursive)" : "");
    http_respond_json(c, 200, json_pack("{s:s}", "watcherId", w->id));
  } else if (strcmp(method, "GetWatcherEvents") == 0) {
    struct watch *w = find_polled(c, req);
    if (w == NULL)
      return;
    /* What the kernel has queued so far belongs to this answer: a client
     * that changed a file and then polls sees the change. */
    drain(w, 0);
    if (w->err_code[0]) {
      rpc_error(c, false, w->err_code, "%s", w->err_msg);
      return;
    }
    timer_start(c->a, &w->idle, WATCH_IDLE_MS, idle_cb);
    json_t *fresh = json_array();
    if (fresh == NULL) {
      rpc_error(c, false, "resource_exhausted", "out of memory");
      return;
    }
    json_t *events = w->queue;
    w->queue = fresh;
    c->a->watch_queued -= json_array_size(events);
    http_respond_json(c, 200, json_pack("{s:o}", "events", events));
  } else if (strcmp(method, "RemoveWatcher") == 0) {
    struct watch *w = find_polled(c, req);
    if (w == NULL)
      return;
    watch_close(w);
    http_respond_json(c, 200, json_object());
  } else {
    rpc_error(c, false, "unimplemented", "filesystem.Filesystem/%s is not implemented", method);
  }
}
