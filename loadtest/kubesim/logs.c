/* logs.c - container logs: the pods/log subresource (kubectl logs) and the
 * capture of agent output that feeds it.
 *
 * Capture (what a container runtime does). A pod whose agent kubesim runs
 * as a process (--agent-binary) gets its supervisor's stdout and stderr as
 * two pipes (agent.c, log_capture_init()); everything the agent and its
 * main command write there is stored in the CRI log format kubelet reads,
 * one record per line:
 *   2026-01-01T00:00:00.123456789Z stdout F a complete line
 *   2026-01-01T00:00:00.123456790Z stderr P a piece of a longer line
 * in <poddir>/.kubesim-<container>.log. Lines longer than LOG_LINE_MAX are
 * split into partial (P) records, as containerd splits them at 16 KiB; a
 * last line without a newline is a P record too. The file is rotated when it
 * passes LOG_MAX_BYTES: it becomes <file>.1 (replacing the previous one) and
 * a new file starts, so a pod keeps at most about 2 x LOG_MAX_BYTES on disk.
 * Like kubelet, pods/log reads only the current file. Writes go through the
 * thread pool (uv_fs_write), one at a time; while one is in flight the
 * pipes are not read, so a flood holds back the agent, not kubesim's memory.
 *
 * Serving (what the API server and kubelet do). Query parameters are
 * decoded and validated as the API server does (400 for a value that does
 * not parse, 422 Invalid for a negative tailLines and the like), then the
 * pod and container are checked, then the kubelet's view: an unscheduled
 * pod answers 204, a container still waiting 400 "... is waiting to start:
 * ContainerCreating", previous=true 400 (containers never restart here).
 * Otherwise 200 text/plain, chunked: the records read from the file in
 * pieces of LOG_READ_CHUNK (thread pool), filtered by sinceSeconds/
 * sinceTime, tailLines (found by scanning the file backwards), limitBytes,
 * with timestamps when asked. Reading pauses while more than
 * LOG_HIGH_WATER waits for the client. follow=true keeps the stream open:
 * a reader at the end of the file waits to be woken by the next write, a
 * rotation (it moves on to the new file) or the container's end (it
 * finishes). Pods whose container kubesim does not run have an empty log.
 *
 * Ownership: struct sim_log is reference-counted: one reference for the
 * pod (p->log, dropped by log_pod_free()), one for the capture while any of
 * its handles or file operations is alive, one per following reader.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fr/buf.h"
#include "fr/log.h"
#include "fr/util.h"
#include "sim.h"

#define LOG_COMP "kubesim.logs"
#define LOG_MAX_BYTES ((int64_t)4 << 20)  /* rotate the current file past this */
#define LOG_LINE_MAX ((size_t)16 << 10)   /* containerd's max_container_log_line_size */
#define LOG_PIPE_READ ((size_t)16 << 10)  /* one pipe read; bounds what one write formats */
#define LOG_READ_CHUNK ((size_t)64 << 10) /* one file read of a reader */
#define LOG_HIGH_WATER ((size_t)256 << 10)
#define LOG_LOW_WATER ((size_t)64 << 10)
/* A record longer than this (the pod can write its own log file) is
 * skipped rather than buffered. */
#define LOG_RECORD_MAX (LOG_LINE_MAX + 128)

struct log_reader;

struct sim_log {
  int refs;
  struct sim *sim;
  char *path;                  /* current file */
  char container[64];
  uint64_t seq;                /* bumped by every write, rotation and end */
  uint64_t gen;                /* rotations so far */
  int container_ended;         /* the container's processes are gone */
  int capture_done;            /* no capture, or all it read is in the file */
  struct log_reader *followers;

  /* capture */
  uv_pipe_t pipes[2];          /* the supervisor's stdout, stderr */
  int pipe_open[2];
  char *rbuf[2];               /* one read buffer per pipe, LOG_PIPE_READ each */
  int capturing;               /* holds a reference */
  uv_fs_t wreq;
  int wbusy;                   /* wreq in flight */
  int wstate;                  /* W_* */
  uv_file fd;
  int64_t size;
  struct fr_buf pending;       /* formatted records not yet written */
  struct fr_buf partial[2];    /* an unfinished line per stream */
  size_t wdone;                /* bytes of <pending> written by this write */
};

enum { W_OPENING, W_IDLE, W_WRITING, W_RENAMING, W_CLOSING_OLD, W_CLOSING, W_DONE };

static const char *const stream_names[2] = {"stdout", "stderr"};

static void log_ref(struct sim_log *l) {
  l->refs++;
}

static void log_unref(struct sim_log *l) {
  if (l == NULL || --l->refs > 0)
    return;
  free(l->rbuf[0]);
  free(l->rbuf[1]);
  fr_buf_free(&l->pending);
  fr_buf_free(&l->partial[0]);
  fr_buf_free(&l->partial[1]);
  free(l->path);
  free(l);
}

static void wake_followers(struct sim_log *l);

static const char *const wstate_names[] = {"opening", "idle",    "writing", "renaming",
                                           "closing-old", "closing", "done"};

/* Every capture transition goes through here (trace with --log-level debug). */
static void capture_set_state(struct sim_log *l, int st) {
  if (l->wstate != st)
    FR_DEBUG(LOG_COMP, "%s: capture %s -> %s", l->path ? l->path : "-", wstate_names[l->wstate],
             wstate_names[st]);
  l->wstate = st;
}

/* ---------------------------------------------------------------------- */
/* time                                                                    */

static int64_t now_ns(void) {
  struct timespec ts;

  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* RFC3339NanoFixed in UTC, what kubelet prefixes with timestamps=true. */
static size_t fmt_ts(int64_t ns, char out[40]) {
  time_t sec = (time_t)(ns / 1000000000);
  long frac = (long)(ns % 1000000000);
  struct tm tm;

  if (frac < 0) {
    frac += 1000000000;
    sec--;
  }
  gmtime_r(&sec, &tm);
  return (size_t)snprintf(out, 40, "%04d-%02d-%02dT%02d:%02d:%02d.%09ldZ", tm.tm_year + 1900,
                          tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

static int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  int64_t era, yoe, doy, doe;

  y -= m <= 2;
  era = (y >= 0 ? y : y - 399) / 400;
  yoe = y - era * 400;
  doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static int digits(const char *s, int n, int64_t *v) {
  int i;

  *v = 0;
  for (i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    *v = *v * 10 + (s[i] - '0');
  }
  return 0;
}

/* Parses RFC 3339 with optional fractional seconds ("Z" or "+hh:mm"), the
 * subset Go's time.Parse(RFC3339[Nano]) accepts, into ns since the epoch.
 * <len> bytes of <s>; 0 or -1. */
static int parse_rfc3339(const char *s, size_t len, int64_t *out) {
  int64_t y, mo, d, h, mi, sec, frac = 0, off = 0, t;
  size_t i = 19;
  int nd = 0;

  if (len < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') ||
      s[13] != ':' || s[16] != ':' || digits(s, 4, &y) || digits(s + 5, 2, &mo) ||
      digits(s + 8, 2, &d) || digits(s + 11, 2, &h) || digits(s + 14, 2, &mi) ||
      digits(s + 17, 2, &sec))
    return -1;
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 59)
    return -1;
  if (s[i] == '.' || s[i] == ',') {
    for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++, nd++) {
      if (nd < 9)
        frac = frac * 10 + (s[i] - '0');
    }
    if (nd == 0)
      return -1;
    for (; nd < 9; nd++)
      frac *= 10;
  }
  if (i == len - 1 && (s[i] == 'Z' || s[i] == 'z')) {
    off = 0;
  } else if (i + 6 == len && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':') {
    int64_t oh, om;
    if (digits(s + i + 1, 2, &oh) || digits(s + i + 4, 2, &om) || oh > 23 || om > 59)
      return -1;
    off = (oh * 60 + om) * 60 * (s[i] == '-' ? -1 : 1);
  } else {
    return -1;
  }
  t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - off;
  /* int64 nanoseconds reach years 1677..2262; clamp beyond. */
  if (t >= INT64_MAX / 1000000000)
    *out = INT64_MAX;
  else if (t <= INT64_MIN / 1000000000)
    *out = INT64_MIN;
  else
    *out = t * 1000000000 + frac;
  return 0;
}

/* ---------------------------------------------------------------------- */
/* capture                                                                 */

static void capture_step(struct sim_log *l);

static void on_wreq(uv_fs_t *r) {
  struct sim_log *l = r->data;
  ssize_t res = r->result;
  int st = l->wstate;

  uv_fs_req_cleanup(r);
  l->wbusy = 0;
  switch (st) {
  case W_OPENING:
    if (res < 0) {
      FR_WARN(LOG_COMP, "%s: cannot open: %s; the log stays empty", l->path,
              uv_strerror((int)res));
      l->fd = -1;
    } else {
      l->fd = (uv_file)res;
      l->size = 0;
      if (l->gen > 0) {
        /* Followers still on the old file move on. */
        l->seq++;
        wake_followers(l);
      }
    }
    capture_set_state(l, W_IDLE);
    break;
  case W_WRITING:
    if (res < 0) {
      FR_WARN(LOG_COMP, "%s: write failed: %s; output dropped", l->path, uv_strerror((int)res));
      fr_buf_reset(&l->pending);
    } else {
      l->size += res;
      fr_buf_consume(&l->pending, (size_t)res);
      l->seq++;
      wake_followers(l);
    }
    capture_set_state(l, W_IDLE);
    break;
  case W_RENAMING:
    /* Renamed or not (the pod directory may be gone), start a new file. */
    capture_set_state(l, W_CLOSING_OLD);
    break;
  case W_CLOSING_OLD:
    l->gen++;
    l->fd = -1;
    capture_set_state(l, W_OPENING);
    if (uv_fs_open(l->sim->loop, &l->wreq, l->path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
                   0640, on_wreq) == 0) {
      l->wbusy = 1;
      return;
    }
    capture_set_state(l, W_IDLE);
    break;
  case W_CLOSING:
    l->fd = -1;
    capture_set_state(l, W_DONE);
    break;
  default:
    break;
  }
  capture_step(l);
}

static void pipes_read(struct sim_log *l, int on);

static void on_pipe_closed(uv_handle_t *h) {
  struct sim_log *l = h->data;

  l->pipe_open[h == (uv_handle_t *)&l->pipes[0] ? 0 : 1] = 0;
  capture_step(l);
}

/* Decides the capture's next move after any event: write what is pending,
 * rotate, read the pipes again, or finish. */
static void capture_step(struct sim_log *l) {
  uv_loop_t *loop = l->sim->loop;

  if (l->wbusy)
    return;
  if (l->wstate == W_IDLE && l->fd >= 0 && l->pending.len > 0) {
    uv_buf_t b = uv_buf_init(l->pending.data, (unsigned int)l->pending.len);
    capture_set_state(l, W_WRITING);
    if (uv_fs_write(loop, &l->wreq, l->fd, &b, 1, -1, on_wreq) == 0) {
      l->wbusy = 1;
      pipes_read(l, 0);
      return;
    }
    capture_set_state(l, W_IDLE);
    fr_buf_reset(&l->pending);
  }
  if (l->wstate == W_IDLE && l->fd < 0)
    fr_buf_reset(&l->pending); /* nowhere to write */
  if (l->wstate == W_IDLE && l->fd >= 0 && l->size >= LOG_MAX_BYTES) {
    /* kubelet-style rotation: the file becomes .1, a new one starts. */
    size_t cap = strlen(l->path) + 3;
    char *old = malloc(cap);
    if (old != NULL) {
      snprintf(old, cap, "%s.1", l->path);
      capture_set_state(l, W_RENAMING);
      if (uv_fs_rename(loop, &l->wreq, l->path, old, on_wreq) == 0) {
        l->wbusy = 1;
        free(old);
        return;
      }
      free(old);
      capture_set_state(l, W_IDLE);
    }
  }
  if (l->wstate == W_CLOSING_OLD) {
    if (uv_fs_close(loop, &l->wreq, l->fd, on_wreq) == 0) {
      l->wbusy = 1;
      return;
    }
    l->fd = -1;
    capture_set_state(l, W_IDLE);
  }
  if (l->wstate == W_IDLE) {
    if (l->pipe_open[0] || l->pipe_open[1]) {
      pipes_read(l, 1);
      return;
    }
    /* Both pipes ended and everything is written. */
    capture_set_state(l, W_CLOSING);
    if (l->fd >= 0 && uv_fs_close(loop, &l->wreq, l->fd, on_wreq) == 0) {
      l->wbusy = 1;
      return;
    }
    capture_set_state(l, W_DONE);
  }
  if (l->wstate == W_DONE && l->capturing && !l->pipe_open[0] && !l->pipe_open[1]) {
    l->capturing = 0;
    l->capture_done = 1;
    l->seq++;
    wake_followers(l);
    log_unref(l);
  }
}

/* One CRI record of <stream> for <len> bytes of <data> ("F" or "P"). */
static void put_record(struct sim_log *l, int stream, int partial, const char *data, size_t len,
                       int64_t ts) {
  char t[40];
  size_t n = fmt_ts(ts, t);

  fr_buf_append(&l->pending, t, n);
  fr_buf_printf(&l->pending, " %s %c ", stream_names[stream], partial ? 'P' : 'F');
  fr_buf_append(&l->pending, data, len);
  fr_buf_putc(&l->pending, '\n');
}

static void flush_partial(struct sim_log *l, int i, int64_t ts) {
  if (l->partial[i].len > 0)
    put_record(l, i, 1, l->partial[i].data, l->partial[i].len, ts);
  fr_buf_reset(&l->partial[i]);
}

/* Each pipe reads into its own buffer: a read is formatted into
 * <pending> before the callback returns, so one buffer per pipe is enough. */
static void on_pipe_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  struct sim_log *l = h->data;

  (void)hint;
  buf->base = l->rbuf[h == (uv_handle_t *)&l->pipes[0] ? 0 : 1];
  buf->len = LOG_PIPE_READ;
}

static void on_pipe_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  struct sim_log *l = st->data;
  int i = st == (uv_stream_t *)&l->pipes[0] ? 0 : 1;
  int64_t ts = now_ns();

  if (n > 0) {
    const char *p = buf->base, *end = buf->base + n;
    while (p < end) {
      const char *nl = memchr(p, '\n', (size_t)(end - p));
      size_t take = nl ? (size_t)(nl - p) : (size_t)(end - p);
      size_t room = LOG_LINE_MAX - l->partial[i].len;
      if (take >= room) {
        /* The line passes the limit: a partial record, as containerd
         * splits long lines. */
        fr_buf_append(&l->partial[i], p, room);
        flush_partial(l, i, ts);
        p += room;
        continue;
      }
      if (nl == NULL) {
        fr_buf_append(&l->partial[i], p, take);
        break;
      }
      if (l->partial[i].len > 0) {
        fr_buf_append(&l->partial[i], p, take);
        put_record(l, i, 0, l->partial[i].data, l->partial[i].len, ts);
        fr_buf_reset(&l->partial[i]);
      } else {
        put_record(l, i, 0, p, take, ts);
      }
      p = nl + 1;
    }
  } else if (n < 0) {
    /* EOF or an error: what is left of a line is a partial record. */
    flush_partial(l, i, ts);
    uv_read_stop(st);
    if (!uv_is_closing((uv_handle_t *)st))
      uv_close((uv_handle_t *)st, on_pipe_closed);
  }
  capture_step(l);
}

static void pipes_read(struct sim_log *l, int on) {
  int i;

  for (i = 0; i < 2; i++) {
    uv_stream_t *st = (uv_stream_t *)&l->pipes[i];
    if (!l->pipe_open[i] || uv_is_closing((uv_handle_t *)st))
      continue;
    if (on)
      uv_read_start(st, on_pipe_alloc, on_pipe_read);
    else
      uv_read_stop(st);
  }
}

/* The pod's log, created on first use (p->workdir must exist for a
 * capture; without one the path is NULL and the log is empty). */
static struct sim_log *log_of(struct sim *s, struct sim_obj *o, const char *container) {
  struct sim_pod *p = o->u.pod;
  struct sim_log *l;

  if (p->log != NULL)
    return p->log;
  l = calloc(1, sizeof(*l));
  if (l == NULL)
    return NULL;
  l->refs = 1;
  l->sim = s;
  l->fd = -1;
  l->capture_done = 1;
  snprintf(l->container, sizeof(l->container), "%s", container);
  fr_buf_init(&l->pending);
  fr_buf_init(&l->partial[0]);
  fr_buf_init(&l->partial[1]);
  p->log = l;
  return l;
}

int log_capture_init(struct sim *s, struct sim_obj *o, uv_stdio_container_t *stdio) {
  json_t *j = obj_json(o);
  const char *cname = json_get_str(json_array_get(json_path(j, "spec.containers"), 0), "name");
  struct sim_pod *p = o->u.pod;
  struct sim_log *l;
  char path[4096];
  int i;

  if (j == NULL || cname == NULL || p->workdir == NULL || p->log != NULL) {
    json_decref(j);
    return -EINVAL;
  }
  l = log_of(s, o, cname);
  json_decref(j);
  if (l == NULL)
    return -ENOMEM;
  /* Container names are DNS labels (validated at create): safe in a path. */
  snprintf(path, sizeof(path), "%s/.kubesim-%s.log", p->workdir, l->container);
  l->path = strdup(path);
  l->rbuf[0] = malloc(LOG_PIPE_READ);
  l->rbuf[1] = malloc(LOG_PIPE_READ);
  if (l->path == NULL || l->rbuf[0] == NULL || l->rbuf[1] == NULL)
    return -ENOMEM;
  for (i = 0; i < 2; i++) {
    uv_pipe_init(s->loop, &l->pipes[i], 0);
    l->pipes[i].data = l;
    l->pipe_open[i] = 1;
    stdio[1 + i].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1 + i].data.stream = (uv_stream_t *)&l->pipes[i];
  }
  l->capturing = 1;
  l->capture_done = 0;
  log_ref(l);
  l->wreq.data = l;
  return 0;
}

void log_capture_start(struct sim_pod *p, int ok) {
  struct sim_log *l = p->log;
  int i;

  if (l == NULL || !l->capturing)
    return;
  if (!ok) {
    for (i = 0; i < 2; i++)
      if (!uv_is_closing((uv_handle_t *)&l->pipes[i]))
        uv_close((uv_handle_t *)&l->pipes[i], on_pipe_closed);
    capture_set_state(l, W_IDLE);
    return;
  }
  /* Reading starts once the file is open: the agent's first lines wait
   * in the pipes until then. */
  capture_set_state(l, W_OPENING);
  if (uv_fs_open(l->sim->loop, &l->wreq, l->path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
                 0640, on_wreq) == 0) {
    l->wbusy = 1;
    return;
  }
  capture_set_state(l, W_IDLE);
  capture_step(l);
}

void log_container_ended(struct sim_pod *p) {
  struct sim_log *l = p->log;

  if (l == NULL || l->container_ended)
    return;
  l->container_ended = 1;
  l->seq++;
  wake_followers(l);
}

void log_pod_free(struct sim_pod *p) {
  struct sim_log *l = p->log;

  if (l == NULL)
    return;
  log_container_ended(p);
  p->log = NULL;
  log_unref(l);
}

/* ---------------------------------------------------------------------- */
/* serving                                                                 */

enum { R_OPEN, R_STAT, R_TAIL, R_READ, R_WAIT, R_REOPEN, R_CLOSE, R_DONE };

struct log_reader {
  struct sim *sim;
  struct fr_http_req *req;     /* NULL once finished or gone */
  struct sim_log *log;         /* followed (ref), NULL when not following */
  struct log_reader *next, **pprev;
  char *path;                  /* NULL: no file (empty log) */
  uv_fs_t fs;
  int busy;                    /* <fs> in flight */
  int state;
  uv_file fd;
  int64_t off, size;
  uint64_t gen, seq_at_read;
  int follow, timestamps;
  int64_t tail, remain, since_ns, left;   /* left: records still to send (tail, not following) */
  int64_t scan_right, nl;
  int skipping;                /* inside an overlong record */
  int draining;                /* waiting for the client to read */
  int finish;                  /* stop after what is buffered */
  char *buf;
  size_t carry;                /* bytes of an unfinished record at buf[0] */
  struct fr_buf out;
};

static void reader_step(struct log_reader *r);

static const char *const rstate_names[] = {"open", "stat", "tail", "read", "wait",
                                           "reopen", "close", "done"};

/* Every reader transition goes through here (trace with --log-level debug). */
static void reader_set_state(struct log_reader *r, int st) {
  if (r->state != st)
    FR_DEBUG(LOG_COMP, "reader %p: %s -> %s", (void *)r, rstate_names[r->state], rstate_names[st]);
  r->state = st;
}

static void reader_unlink(struct log_reader *r) {
  if (r->pprev != NULL) {
    *r->pprev = r->next;
    if (r->next)
      r->next->pprev = r->pprev;
    r->next = NULL;
    r->pprev = NULL;
  }
  if (r->log != NULL) {
    log_unref(r->log);
    r->log = NULL;
  }
}

static void reader_free(struct log_reader *r) {
  reader_unlink(r);
  fr_buf_free(&r->out);
  free(r->buf);
  free(r->path);
  free(r);
}

static void wake_followers(struct sim_log *l) {
  struct log_reader *r, *nx;

  for (r = l->followers; r != NULL; r = nx) {
    nx = r->next;
    if (r->state == R_WAIT && !r->busy && !r->draining)
      reader_step(r);
  }
}

static void on_client_abort(struct fr_http_req *req) {
  struct log_reader *r = req->data;

  r->req = NULL;
  r->draining = 0;
  reader_unlink(r);
  reader_step(r);
}

static void on_client_drain(struct fr_http_req *req) {
  struct log_reader *r = req->data;

  r->draining = 0;
  reader_step(r);
}

/* Sends what r->out holds. A failed write has finished the request
 * (the server closed the connection without calling abort_cb). */
static void reader_flush(struct log_reader *r) {
  if (r->req != NULL && r->out.len > 0 && fr_http_stream_write(r->req, r->out.data, r->out.len) != 0)
    r->req = NULL;
  fr_buf_reset(&r->out);
}

/* Ends the response (if the client is still there). */
static void reader_end(struct log_reader *r) {
  reader_flush(r);
  if (r->req != NULL) {
    struct fr_http_req *req = r->req;
    req->abort_cb = NULL;
    req->data = NULL;
    r->req = NULL;
    fr_http_stream_end(req);
  }
  reader_unlink(r);
}

/* One record of the file: filter, format, append to r->out. Returns 1 when
 * the reader has sent all it may (limitBytes, tailLines). */
static int reader_record(struct log_reader *r, const char *rec, size_t len) {
  const char *sp1, *sp2, *sp3, *end = rec + len;
  int64_t ts;
  int partial;
  size_t n;

  /* "<ts> <stream> <tag> <content>"; malformed records are skipped as
   * kubelet skips them. */
  sp1 = memchr(rec, ' ', len);
  if (sp1 == NULL || parse_rfc3339(rec, (size_t)(sp1 - rec), &ts) != 0)
    return 0;
  sp2 = memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1));
  if (sp2 == NULL || !((sp2 - sp1 - 1 == 6 && memcmp(sp1 + 1, "stdout", 6) == 0) ||
                       (sp2 - sp1 - 1 == 6 && memcmp(sp1 + 1, "stderr", 6) == 0)))
    return 0;
  sp3 = memchr(sp2 + 1, ' ', (size_t)(end - sp2 - 1));
  if (sp3 == NULL)
    return 0;
  partial = sp2[1] == 'P';
  if (ts >= r->since_ns) {
    char t[40];
    size_t before = r->out.len;
    if (r->timestamps) {
      n = fmt_ts(ts, t);
      fr_buf_append(&r->out, t, n);
      fr_buf_putc(&r->out, ' ');
    }
    fr_buf_append(&r->out, sp3 + 1, (size_t)(end - sp3 - 1));
    if (!partial)
      fr_buf_putc(&r->out, '\n');
    n = r->out.len - before;
    if ((int64_t)n >= r->remain) {
      r->out.len = before + (size_t)r->remain;
      r->remain = 0;
      return 1;
    }
    r->remain -= (int64_t)n;
  }
  if (r->left > 0 && --r->left == 0)
    return 1;
  return 0;
}

/* Parses the complete records in buf[0..len); keeps an unfinished one. */
static void reader_parse(struct log_reader *r, size_t len, int at_eof) {
  size_t pos = 0;

  while (pos < len && !r->finish) {
    char *nl = memchr(r->buf + pos, '\n', len - pos);
    if (nl == NULL)
      break;
    if (!r->skipping && reader_record(r, r->buf + pos, (size_t)(nl - (r->buf + pos))))
      r->finish = 1;
    r->skipping = 0;
    pos = (size_t)(nl - r->buf) + 1;
  }
  if (r->finish) {
    r->carry = 0;
    return;
  }
  r->carry = len - pos;
  if (at_eof && r->carry > 0) {
    /* kubelet hands out an unfinished last line as it is. */
    if (!r->skipping && reader_record(r, r->buf + pos, r->carry))
      r->finish = 1;
    r->carry = 0;
    return;
  }
  if (r->carry >= LOG_RECORD_MAX) {
    r->skipping = 1;
    r->carry = 0;
    return;
  }
  memmove(r->buf, r->buf + pos, r->carry);
}

static void on_fs(uv_fs_t *f) {
  struct log_reader *r = f->data;
  ssize_t res = f->result;

  uv_fs_req_cleanup(f);
  r->busy = 0;
  switch (r->state) {
  case R_OPEN:
  case R_REOPEN:
    if (res < 0) {
      r->fd = -1;
      /* No file (yet): empty so far; a follower waits for one. */
      reader_set_state(r, r->follow ? R_WAIT : R_DONE);
      break;
    }
    r->fd = (uv_file)res;
    r->off = 0;
    r->carry = 0;
    reader_set_state(r, r->tail >= 0 && r->state == R_OPEN ? R_STAT : R_READ);
    break;
  case R_STAT:
    r->size = res == 0 ? (int64_t)f->statbuf.st_size : 0;
    r->scan_right = r->size;
    r->nl = 0;
    r->off = 0;
    reader_set_state(r, R_TAIL);
    break;
  case R_TAIL: {
    /* Scanning backwards for the start of the last <tail> records: the
     * byte after the (tail+1)-th newline from the end (kubelet's
     * tail.FindTailLineStartIndex). */
    int64_t left = r->scan_right - (int64_t)LOG_READ_CHUNK;
    ssize_t i;
    if (left < 0)
      left = 0;
    if (res <= 0) {
      r->off = 0;
      reader_set_state(r, R_READ);
      break;
    }
    for (i = res - 1; i >= 0; i--) {
      if (r->buf[i] == '\n' && ++r->nl > r->tail) {
        r->off = left + i + 1;
        reader_set_state(r, R_READ);
        break;
      }
    }
    if (r->state == R_TAIL) {
      r->scan_right = left;
      if (left == 0) {
        r->off = 0;
        reader_set_state(r, R_READ);
      }
    }
    break;
  }
  case R_READ:
    if (res < 0) {
      reader_set_state(r, R_DONE);
      break;
    }
    if (res > 0) {
      r->off += res;
      reader_parse(r, r->carry + (size_t)res, 0);
      if (r->finish)
        reader_set_state(r, R_DONE);
      break;
    }
    /* End of the file. */
    if (!r->follow) {
      reader_parse(r, r->carry, 1);
      reader_set_state(r, R_DONE);
      break;
    }
    reader_set_state(r, R_WAIT);
    break;
  case R_CLOSE:
    r->fd = -1;
    reader_set_state(r, R_REOPEN);
    break;
  default:
    break;
  }
  reader_step(r);
}

/* Decides the reader's next move after any event. */
static void reader_step(struct log_reader *r) {
  uv_loop_t *loop = r->sim->loop;
  struct sim_log *l = r->log;

  if (r->busy)
    return;
  if (r->req == NULL && r->state != R_DONE)
    reader_set_state(r, R_DONE); /* the client left */
  if (r->req != NULL && r->out.len > 0) {
    reader_flush(r);
    if (r->req == NULL)
      reader_set_state(r, R_DONE);
    if (r->req != NULL && r->state != R_DONE && fr_http_pending_bytes(r->req) > LOG_HIGH_WATER &&
        fr_http_on_drain(r->req, on_client_drain, LOG_LOW_WATER) == 0) {
      r->draining = 1;
      return;
    }
  }
  if (r->draining)
    return;
  r->fs.data = r;
  switch (r->state) {
  case R_OPEN:
  case R_REOPEN:
    if (r->path == NULL || uv_fs_open(loop, &r->fs, r->path, O_RDONLY | O_CLOEXEC, 0, on_fs) != 0) {
      reader_set_state(r, r->follow ? R_WAIT : R_DONE);
      reader_step(r);
      return;
    }
    /* The generation is taken when the open is issued: an open that races
     * a rotation may land on the new file while remembering the old
     * generation, and then reads that file again from its start (lines
     * shown twice, never lost). */
    if (l != NULL)
      r->gen = l->gen;
    r->busy = 1;
    return;
  case R_STAT:
    if (uv_fs_fstat(loop, &r->fs, r->fd, on_fs) == 0) {
      r->busy = 1;
      return;
    }
    reader_set_state(r, R_DONE);
    break;
  case R_TAIL: {
    int64_t left = r->scan_right - (int64_t)LOG_READ_CHUNK;
    uv_buf_t b;
    if (left < 0)
      left = 0;
    if (r->scan_right <= 0) {
      r->off = 0;
      reader_set_state(r, R_READ);
      reader_step(r);
      return;
    }
    b = uv_buf_init(r->buf, (unsigned int)(r->scan_right - left));
    if (uv_fs_read(loop, &r->fs, r->fd, &b, 1, left, on_fs) == 0) {
      r->busy = 1;
      return;
    }
    reader_set_state(r, R_DONE);
    break;
  }
  case R_READ: {
    uv_buf_t b = uv_buf_init(r->buf + r->carry, (unsigned int)(LOG_READ_CHUNK + LOG_RECORD_MAX - r->carry));
    if (l != NULL)
      r->seq_at_read = l->seq;
    if (uv_fs_read(loop, &r->fs, r->fd, &b, 1, r->off, on_fs) == 0) {
      r->busy = 1;
      return;
    }
    reader_set_state(r, R_DONE);
    break;
  }
  case R_WAIT:
    if (l == NULL) {
      reader_set_state(r, R_DONE);
      break;
    }
    if (r->fd >= 0 && l->gen != r->gen) {
      /* Rotated: the old file is complete (its last write finished before
       * the rename); read what is left of it, then go to the new one. */
      if (l->seq != r->seq_at_read) {
        reader_set_state(r, R_READ);
        reader_step(r);
        return;
      }
      reader_set_state(r, R_CLOSE);
      if (uv_fs_close(loop, &r->fs, r->fd, on_fs) == 0) {
        r->busy = 1;
        return;
      }
      r->fd = -1;
      reader_set_state(r, R_REOPEN);
      reader_step(r);
      return;
    }
    if (r->fd < 0) {
      if (l->seq != r->seq_at_read && r->path != NULL) {
        r->seq_at_read = l->seq;
        reader_set_state(r, R_REOPEN);
        reader_step(r);
        return;
      }
    } else if (l->seq != r->seq_at_read) {
      reader_set_state(r, R_READ);
      reader_step(r);
      return;
    }
    if (l->container_ended && l->capture_done) {
      /* Everything is in and read. */
      if (r->carry > 0)
        reader_parse(r, r->carry, 1);
      reader_set_state(r, R_DONE);
      break;
    }
    return; /* woken by the next write, rotation or end */
  case R_CLOSE:
    return;
  default:
    break;
  }
  if (r->state != R_DONE)
    return;
  /* Done: answer the end, close the file, then free. */
  reader_end(r);
  if (r->fd >= 0) {
    uv_file fd = r->fd;
    r->fd = -1;
    reader_set_state(r, R_DONE);
    if (uv_fs_close(loop, &r->fs, fd, on_fs) == 0) {
      r->busy = 1;
      return;
    }
  }
  reader_free(r);
}

/* Go's strconv.ParseInt(s, 10, 64) as the API server's query decoding
 * runs it; 0, or -1 with its error text in <msg>. */
static int go_parse_int(const char *key, const char *v, int64_t *out, char *msg, size_t cap) {
  const char *p = v;
  int neg = 0;
  uint64_t acc = 0;

  (void)key;
  if (*p == '+' || *p == '-')
    neg = *p++ == '-';
  if (*p == '\0')
    goto syntax;
  for (; *p; p++) {
    if (*p < '0' || *p > '9')
      goto syntax;
    if (acc > (UINT64_MAX - 9) / 10)
      goto range;
    acc = acc * 10 + (uint64_t)(*p - '0');
  }
  if ((!neg && acc > INT64_MAX) || (neg && acc > (uint64_t)INT64_MAX + 1))
    goto range;
  *out = neg ? (acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc) : (int64_t)acc;
  return 0;
syntax:
  snprintf(msg, cap, "strconv.ParseInt: parsing \"%.200s\": invalid syntax", v);
  return -1;
range:
  snprintf(msg, cap, "strconv.ParseInt: parsing \"%.200s\": value out of range", v);
  return -1;
}

struct log_opts {
  char container[256];
  int follow, previous, timestamps;
  int has_tail, has_limit, has_since_s, has_since_t;
  int64_t tail, limit, since_s, since_t_ns;
};

/* Query decoding as the API server's parameter codec does it: the first
 * value of each key, fields in PodLogOptions order; 0 or -1 after a 400. */
static int decode_opts(struct fr_http_req *req, struct log_opts *o) {
  char v[256], msg[512];
  long n;

  memset(o, 0, sizeof(*o));
  if (fr_http_query_get(req->query, "container", o->container, sizeof(o->container)) < 0)
    o->container[0] = '\0';
  o->follow = sim_query_bool(req->query, "follow");
  o->previous = sim_query_bool(req->query, "previous");
  o->timestamps = sim_query_bool(req->query, "timestamps");
  if ((n = fr_http_query_get(req->query, "sinceSeconds", v, sizeof(v))) != -ENOENT) {
    if (n < 0 || go_parse_int("sinceSeconds", v, &o->since_s, msg, sizeof(msg)) != 0)
      goto bad;
    o->has_since_s = 1;
  }
  if ((n = fr_http_query_get(req->query, "sinceTime", v, sizeof(v))) != -ENOENT) {
    /* metav1.Time: "" and "null" are the zero time, else time.RFC3339. */
    o->has_since_t = 1;
    if (n >= 0 && (v[0] == '\0' || strcmp(v, "null") == 0)) {
      o->since_t_ns = INT64_MIN;
    } else if (n < 0 || parse_rfc3339(v, (size_t)n, &o->since_t_ns) != 0) {
      snprintf(msg, sizeof(msg), "parsing time \"%.200s\" as \"2006-01-02T15:04:05Z07:00\": "
               "cannot parse \"%.200s\" as \"2006\"", n < 0 ? "" : v, n < 0 ? "" : v);
      goto bad;
    }
  }
  if ((n = fr_http_query_get(req->query, "tailLines", v, sizeof(v))) != -ENOENT) {
    if (n < 0 || go_parse_int("tailLines", v, &o->tail, msg, sizeof(msg)) != 0)
      goto bad;
    o->has_tail = 1;
  }
  if ((n = fr_http_query_get(req->query, "limitBytes", v, sizeof(v))) != -ENOENT) {
    if (n < 0 || go_parse_int("limitBytes", v, &o->limit, msg, sizeof(msg)) != 0)
      goto bad;
    o->has_limit = 1;
  }
  return 0;
bad:
  if (n < 0 && n != -ENOENT) /* longer than <v>: no number is that long */
    snprintf(msg, sizeof(msg), "strconv.ParseInt: parsing a value longer than %zu bytes: invalid syntax",
             sizeof(v) - 1);
  api_status(req, 400, "BadRequest", msg, NULL, NULL, NULL);
  return -1;
}

/* ValidatePodLogOptions: 422 Invalid with one cause per problem. */
static int validate_opts(struct fr_http_req *req, const char *name, const struct log_opts *o) {
  json_t *causes = json_array();
  struct fr_buf msg;
  char one[256];
  size_t n;

  fr_buf_init(&msg);
  if (o->has_tail && o->tail < 0) {
    snprintf(one, sizeof(one), "Invalid value: %" PRId64 ": must be greater than or equal to 0", o->tail);
    json_array_append_new(causes, json_pack("{s:s,s:s,s:s}", "reason", "FieldValueInvalid",
                                            "message", one, "field", "tailLines"));
  }
  if (o->has_limit && o->limit < 1) {
    snprintf(one, sizeof(one), "Invalid value: %" PRId64 ": must be greater than 0", o->limit);
    json_array_append_new(causes, json_pack("{s:s,s:s,s:s}", "reason", "FieldValueInvalid",
                                            "message", one, "field", "limitBytes"));
  }
  if (o->has_since_s && o->has_since_t) {
    json_array_append_new(causes, json_pack("{s:s,s:s,s:s}", "reason", "FieldValueForbidden",
                                            "message", "Forbidden: at most one of `sinceTime` or "
                                            "`sinceSeconds` may be specified", "field", ""));
  } else if (o->has_since_s && o->since_s < 1) {
    snprintf(one, sizeof(one), "Invalid value: %" PRId64 ": must be greater than 0", o->since_s);
    json_array_append_new(causes, json_pack("{s:s,s:s,s:s}", "reason", "FieldValueInvalid",
                                            "message", one, "field", "sinceSeconds"));
  }
  n = json_array_size(causes);
  if (n == 0) {
    json_decref(causes);
    return 0;
  }
  {
    size_t i;
    json_t *c;
    fr_buf_printf(&msg, "PodLogOptions \"%s\" is invalid: %s", name, n > 1 ? "[" : "");
    json_array_foreach(causes, i, c) {
      fr_buf_printf(&msg, "%s%s: %s", i ? ", " : "", json_get_str(c, "field"),
                    json_get_str(c, "message"));
    }
    if (n > 1)
      fr_buf_putc(&msg, ']');
  }
  api_status(req, 422, "Invalid", msg.data ? msg.data : "invalid", "PodLogOptions", name, causes);
  json_decref(causes);
  fr_buf_free(&msg);
  return -1;
}

/* Checks <container> against the pod's containers (init, regular and
 * ephemeral, in the API server's order); picks the only one when empty.
 * Returns the index among spec.containers (-1 for the others) or -2 after a
 * 400. */
static int pick_container(struct fr_http_req *req, json_t *j, const char *name, char *container,
                          size_t cap) {
  static const char *const lists[3] = {"spec.initContainers", "spec.containers",
                                       "spec.ephemeralContainers"};
  json_t *cs = json_path(j, "spec.containers"), *c;
  struct fr_buf names;
  char msg[1024];
  size_t k, i;

  if (container[0] == '\0') {
    if (json_array_size(cs) == 1) {
      snprintf(container, cap, "%s", json_get_str(json_array_get(cs, 0), "name"));
      return 0;
    }
    fr_buf_init(&names);
    for (k = 0; k < 3; k++) {
      json_array_foreach(json_path(j, lists[k]), i, c) {
        fr_buf_printf(&names, "%s%s", names.len ? " " : "", json_get_str(c, "name"));
      }
    }
    if (json_array_size(cs) == 0)
      snprintf(msg, sizeof(msg), "a container name must be specified for pod %s", name);
    else
      snprintf(msg, sizeof(msg), "a container name must be specified for pod %s, choose one of: "
               "[%.900s]", name, names.data ? names.data : "");
    fr_buf_free(&names);
    api_status(req, 400, "BadRequest", msg, NULL, NULL, NULL);
    return -2;
  }
  for (k = 0; k < 3; k++) {
    json_array_foreach(json_path(j, lists[k]), i, c) {
      const char *cn = json_get_str(c, "name");
      if (cn != NULL && strcmp(cn, container) == 0)
        return k == 1 ? (int)i : -1;
    }
  }
  snprintf(msg, sizeof(msg), "container %.253s is not valid for pod %s", container, name);
  api_status(req, 400, "BadRequest", msg, NULL, NULL, NULL);
  return -2;
}

void log_handle(struct sim *s, struct fr_http_req *req, const char *ns, const char *name) {
  struct log_opts o;
  struct sim_obj *obj;
  struct sim_pod *p;
  struct log_reader *r;
  json_t *j, *cst, *c;
  char msg[768];
  const char *waiting = NULL;
  size_t i;
  int idx;

  if (strcmp(req->method, "GET") != 0) {
    api_status(req, 405, "MethodNotAllowed", "the server does not allow this method on the "
               "requested resource", "pods", NULL, NULL);
    return;
  }
  if (decode_opts(req, &o) != 0 || validate_opts(req, name, &o) != 0)
    return;
  obj = store_get(s, K_POD, ns, name);
  if (obj == NULL || (p = obj->u.pod) == NULL) {
    snprintf(msg, sizeof(msg), "pods \"%s\" not found", name);
    api_status(req, 404, "NotFound", msg, "pods", name, NULL);
    return;
  }
  j = obj_json(obj);
  if (j == NULL) {
    api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
    return;
  }
  idx = pick_container(req, j, name, o.container, sizeof(o.container));
  if (idx == -2)
    goto out;
  if (json_get_str(json_obj(j, "spec"), "nodeName") == NULL) {
    /* No node, no kubelet to ask: the API server answers with no content. */
    fr_http_stream_begin_length(req, 204, NULL, NULL, FR_HTTP_NO_BODY);
    fr_http_stream_end(req);
    goto out;
  }
  if (node_kubelet_lost(s, json_get_str(json_obj(j, "spec"), "nodeName"))) {
    /* The API server asks the kubelet, which does not answer. */
    const char *hip = json_string_value(json_path(j, "status.hostIP"));
    snprintf(msg, sizeof(msg), "Get \"https://%s:10250/containerLogs/%s/%s/%s\": dial tcp %s:10250: connect: "
             "no route to host", hip ? hip : "", ns, name, o.container, hip ? hip : "");
    api_status(req, 500, "InternalError", msg, NULL, NULL, NULL);
    goto out;
  }
  /* The kubelet's checks (validateContainerLogStatus). */
  if (o.previous) {
    snprintf(msg, sizeof(msg), "previous terminated container \"%s\" in pod \"%s\" not found",
             o.container, name);
    api_status(req, 400, "BadRequest", msg, NULL, NULL, NULL);
    goto out;
  }
  cst = json_path(j, "status.containerStatuses");
  json_array_foreach(cst, i, c) {
    const char *cn = json_get_str(c, "name");
    if (cn != NULL && strcmp(cn, o.container) == 0 && json_path(c, "state.waiting") != NULL) {
      waiting = json_get_str(json_path(c, "state.waiting"), "reason");
      if (waiting == NULL)
        waiting = "";
    }
  }
  if (waiting != NULL || p->stage == PS_BOUND) {
    if (waiting != NULL && strcmp(waiting, "ErrImagePull") == 0)
      waiting = "image can't be pulled";
    else if (waiting != NULL && strcmp(waiting, "ImagePullBackOff") == 0)
      waiting = "trying and failing to pull image";
    snprintf(msg, sizeof(msg), "container \"%s\" in pod \"%s\" is waiting to start: %s", o.container,
             name, waiting ? waiting : "ContainerCreating");
    api_status(req, 400, "BadRequest", msg, NULL, NULL, NULL);
    goto out;
  }
  r = calloc(1, sizeof(*r));
  if (r == NULL || (r->buf = malloc(LOG_READ_CHUNK + LOG_RECORD_MAX)) == NULL) {
    free(r);
    api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
    goto out;
  }
  r->sim = s;
  r->fd = -1;
  r->follow = o.follow;
  r->timestamps = o.timestamps;
  r->tail = o.has_tail ? o.tail : -1;
  r->remain = o.has_limit ? o.limit : INT64_MAX;
  r->left = o.has_tail && !o.follow ? o.tail : -1;
  r->since_ns = INT64_MIN;
  if (o.has_since_s)
    r->since_ns = now_ns() - (o.since_s > INT64_MAX / 1000000000 ? INT64_MAX : o.since_s * 1000000000);
  if (o.has_since_t && o.since_t_ns > r->since_ns)
    r->since_ns = o.since_t_ns;
  fr_buf_init(&r->out);
  /* Only the captured container has a file. */
  if (p->log != NULL && p->log->path != NULL && idx >= 0 && strcmp(p->log->container, o.container) == 0)
    r->path = strdup(p->log->path);
  if (o.follow && (p->stage == PS_RUNNING || (p->log != NULL && strcmp(p->log->container, o.container) == 0))) {
    /* Followers of a container that is running (or whose output is still
     * coming in) are woken by the capture and by the container's end. */
    struct sim_log *l = log_of(s, obj, o.container);
    if (l != NULL) {
      if (p->stage != PS_RUNNING && p->stage != PS_BOUND)
        l->container_ended = 1;
      log_ref(l);
      r->log = l;
      r->next = l->followers;
      if (l->followers)
        l->followers->pprev = &r->next;
      l->followers = r;
      r->pprev = &l->followers;
    }
  }
  if (o.follow && r->log == NULL)
    r->follow = 0; /* nothing more will come: read what there is and end */
  reader_set_state(r, R_OPEN);
  if (fr_http_stream_begin(req, 200, "text/plain", NULL) == 0) {
    req->data = r;
    req->abort_cb = on_client_abort;
    r->req = req;
  }
  reader_step(r);
out:
  json_decref(j);
}
