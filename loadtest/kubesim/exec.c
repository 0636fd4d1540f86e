/* exec.c - pods/exec for kubesim: channel protocol over fr/http.h WebSockets,
 * commands run as real local processes (libuv) or through the no-fork fast
 * path.
 *
 * One struct sim_exec per exec request. It has two independent lifecycles:
 *   - the command: the process handle and up to three pipes (and a timer used
 *     for output backpressure). `done` is set once the process has exited
 *     and stdout and stderr have both reached EOF; that is the single place
 *     where the channel-3 Status is sent and the WebSocket closed;
 *   - the WebSocket: WS_OPEN -> WS_GONE, either when on_ws_close runs (the
 *     client went away) or when we close it (ws_finish()). In the second case
 *     we let go of the req *before* fr_http_ws_close() (req->data = NULL), so
 *     whether and when the server then calls on_ws_close does not matter:
 *     callbacks that find req->data NULL return at once.
 * The struct is freed when the command is done, every libuv handle has been
 * closed (close callbacks) and the WebSocket is gone, and no callback of ours
 * is on the stack (`hold`): every entry point brackets its work with
 * enter()/leave() and only leave() may free, so nothing called from inside a
 * callback (fr_http_*, uv_*) can pull the struct from under it.
 */
#include "exec.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "fr/buf.h"
#include "fr/http.h"
#include "fr/log.h"
#include "fr/util.h"
#include "fr/ws.h"

#define LOG_COMP "kubesim.exec"

/* Channels of the channel protocols (KUBE_PROTOCOL.md section 1). */
enum {
  CH_STDIN = 0,
  CH_STDOUT = 1,
  CH_STDERR = 2,
  CH_STATUS = 3,
  CH_RESIZE = 4,
  CH_CLOSE = 255,
};

/* What sets the exec subprotocols apart. */
enum {
  PROTO_CLOSE = 1,   /* v5: "FF <ch>" half-closes a stream */
  PROTO_STATUS = 2,  /* v4, v5: channel 3 carries a JSON Status; before v4 only
                      * a failure's message text, and nothing on success */
  PROTO_BASE64 = 4,  /* text frames: the channel as an ASCII digit, then the
                      * payload in base64, both ways */
};

/* The kubelet's streaming server accepts these (its wsstream table, binary
 * and base64 codecs); v5 is served by the API server itself since 1.30. */
static const struct {
  const char *name;
  unsigned flags;
} protocols[] = {
    {"v5.channel.k8s.io", PROTO_CLOSE | PROTO_STATUS},
    {"v4.channel.k8s.io", PROTO_STATUS},
    {"v4.base64.channel.k8s.io", PROTO_STATUS | PROTO_BASE64},
    {"channel.k8s.io", 0},
    {"base64.channel.k8s.io", PROTO_BASE64},
};

/* One read from the child's stdout/stderr (socketpairs, as libuv creates
 * them) becomes one frame of at most this size. The buffer is allocated per
 * read so that thousands of idle execs (sleep in a sandbox) hold no read
 * memory. */
#define READ_CHUNK ((size_t)64 * 1024)
/* Backpressure towards a slow client: stop reading the child's output above
 * PAUSE_HIGH bytes queued on the connection, resume below PAUSE_LOW. The
 * child then blocks on its full output, as it would behind a slow kubelet. */
#define PAUSE_HIGH ((size_t)4 << 20)
#define PAUSE_LOW ((size_t)1 << 20)
/* fr/http.h has no "drained" callback, so while paused we poll
 * fr_http_pending_bytes() on a timer. 10 ms keeps a paused stream within a
 * few percent of full speed while costing nothing when nothing is paused. */
#define PAUSE_POLL_MS 10
/* We cannot stop reading the WebSocket (no API for it), so stdin a child does
 * not read piles up here. Past this bound the exec is closed with 1011
 * rather than letting one client grow the simulator without limit. */
#define STDIN_MAX_PENDING ((size_t)64 << 20)

/* What containerd adds when an image defines no PATH (oci.WithDefaultPathEnv). */
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define DEFAULT_PATH_ENV "PATH=" DEFAULT_PATH

enum ws_state { WS_OPEN, WS_GONE };

struct sim_exec {
  uv_loop_t *loop;
  struct fr_http_req *req;  /* NULL once the WebSocket is gone */
  enum ws_state ws;
  unsigned proto;           /* PROTO_* of the negotiated subprotocol */

  struct sim_exec_set *set; /* NULL when detached (done or set killed) */
  struct sim_exec *prev, *next;

  uv_process_t proc;
  uv_pipe_t in, out, err;
  uv_pipe_t ctl;            /* wrapped commands: why it could not start (fd 3) */
  uv_timer_t timer;
  uv_shutdown_t shutdown;
  unsigned handles;         /* initialised handles whose close cb is pending */
  unsigned hold;            /* our callbacks on the stack */
  int timer_init;
  int pid;                  /* 0 for the fast path and failed spawns */

  int in_open;              /* stdin accepts writes (no EOF/error yet) */
  int out_open, err_open;   /* stdout/stderr pipes still being read */
  int ctl_open;             /* the start-error pipe still being read */
  char ctl_text[512];       /* what came on it (runc's words), NUL-terminated */
  size_t ctl_len;
  int merge_stderr;         /* tty: the child's stderr goes to channel 1 */
  int paused;               /* reading stopped for backpressure */
  size_t stdin_pending;     /* bytes queued in uv_write requests */

  int exited;               /* the command has ended (or failed to start) */
  int exit_code;            /* 0-255, 128+signal when killed */
  char *start_error;        /* why it could not start; NULL if it ran */
  int done;                 /* Status sent or no longer sendable */
};

struct stdin_write {
  uv_write_t req;
  struct sim_exec *e;
  size_t len;
  char data[];
};

static void check_done(struct sim_exec *e);
static void ws_finish(struct sim_exec *e, int code, const char *reason);
static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* ---- lifetime ---- */

static void exec_free(struct sim_exec *e) {
  free(e->start_error);
  free(e);
}

static void enter(struct sim_exec *e) {
  e->hold++;
}

/* Ends a callback; frees <e> when nothing refers to it any more. <e> must
 * not be touched after this returns. */
static void leave(struct sim_exec *e) {
  e->hold--;
  if (e->hold == 0 && e->done && e->handles == 0 && e->ws == WS_GONE)
    exec_free(e);
}

static void on_handle_close(uv_handle_t *h) {
  struct sim_exec *e = h->data;

  enter(e);
  e->handles--;
  leave(e);
}

static void close_handle(void *handle) {
  uv_handle_t *h = handle;

  if (!uv_is_closing(h))
    uv_close(h, on_handle_close);
}

/* ---- the pod's set ---- */

static void set_link(struct sim_exec *e, struct sim_exec_set *set) {
  e->set = set;
  e->prev = NULL;
  e->next = set->head;
  if (set->head != NULL)
    set->head->prev = e;
  set->head = e;
  set->nprocs++;
}

static void set_unlink(struct sim_exec *e) {
  struct sim_exec_set *set = e->set;

  if (set == NULL)
    return;
  if (e->prev != NULL)
    e->prev->next = e->next;
  else
    set->head = e->next;
  if (e->next != NULL)
    e->next->prev = e->prev;
  set->nprocs--;
  e->set = NULL;
  e->prev = e->next = NULL;
}

void sim_exec_set_kill(struct sim_exec_set *set, int signum) {
  struct sim_exec *e, *next;

  if (set == NULL)
    return;
  for (e = set->head; e != NULL; e = next) {
    next = e->next;
    /* An exec stays in its set until its output is closed too, so this also
     * reaches what the command left running in its process group after the
     * leader exited (UV_PROCESS_DETACHED made pid the group id). */
    if (e->pid > 0 && kill(-e->pid, signum) != 0 && errno != ESRCH)
      FR_WARN(LOG_COMP, "kill(-%d, %d): %s", e->pid, signum, strerror(errno));
    e->set = NULL;
    e->prev = e->next = NULL;
  }
  set->head = NULL;
  set->nprocs = 0;
  for (size_t i = 0; i < set->ngroups; i++) {
    if (kill(-set->groups[i], signum) != 0 && errno != ESRCH)
      FR_WARN(LOG_COMP, "kill(-%d, %d): %s", set->groups[i], signum, strerror(errno));
  }
  free(set->groups);
  set->groups = NULL;
  set->ngroups = set->groups_cap = 0;
}

static void set_forget_group(struct sim_exec_set *set, int pgid) {
  size_t i;

  for (i = 0; i < set->ngroups; i++) {
    if (set->groups[i] == pgid) {
      set->groups[i] = set->groups[--set->ngroups];
      return;
    }
  }
}

/* Remembers <pgid> for the pod's deletion. When the array is full, groups
 * with no process left are dropped first (kill(-g, 0) fails with ESRCH),
 * so a pod that ran a million short commands keeps only the live ones. */
static void set_remember_group(struct sim_exec_set *set, int pgid) {
  size_t i, kept = 0;

  if (set->ngroups == set->groups_cap) {
    for (i = 0; i < set->ngroups; i++)
      if (kill(-set->groups[i], 0) == 0 || errno != ESRCH)
        set->groups[kept++] = set->groups[i];
    set->ngroups = kept;
  }
  if (set->ngroups == set->groups_cap) {
    size_t ncap = set->groups_cap ? set->groups_cap * 2 : 8;
    int *ng = realloc(set->groups, ncap * sizeof(*ng));
    if (ng == NULL)
      return; /* out of memory: the live exec is still tracked */
    set->groups = ng;
    set->groups_cap = ncap;
  }
  set->groups[set->ngroups++] = pgid;
}

/* ---- output towards the client ---- */

static void resume_reading(struct sim_exec *e) {
  if (!e->paused)
    return;
  e->paused = 0;
  uv_timer_stop(&e->timer);
  if (e->out_open)
    uv_read_start((uv_stream_t *)&e->out, on_alloc, on_read);
  if (e->err_open)
    uv_read_start((uv_stream_t *)&e->err, on_alloc, on_read);
}

static void on_pause_timer(uv_timer_t *t) {
  struct sim_exec *e = t->data;

  enter(e);
  if (e->ws != WS_OPEN || fr_http_pending_bytes(e->req) < PAUSE_LOW)
    resume_reading(e);
  leave(e);
}

static void pause_reading(struct sim_exec *e) {
  if (e->paused || !e->timer_init)
    return;
  e->paused = 1;
  FR_DEBUG(LOG_COMP, "pid %d: output paused, client %zu bytes behind", e->pid,
           e->ws == WS_OPEN ? fr_http_pending_bytes(e->req) : 0);
  if (e->out_open)
    uv_read_stop((uv_stream_t *)&e->out);
  if (e->err_open)
    uv_read_stop((uv_stream_t *)&e->err);
  uv_timer_start(&e->timer, on_pause_timer, PAUSE_POLL_MS, PAUSE_POLL_MS);
}

/* Sends one message on <channel> in the negotiated codec; 0, or non-zero
 * when the connection is gone (on_ws_close tells us) or out of memory. */
static int send_frame(struct sim_exec *e, unsigned char channel, const void *data, size_t len) {
  char digit, *enc;
  int rc;

  if (!(e->proto & PROTO_BASE64))
    return fr_http_ws_send(e->req, FR_WS_OP_BINARY, &channel, 1, data, len);
  /* wsstream's base64 codec: '0' + channel, then standard base64. */
  digit = (char)('0' + channel);
  if ((enc = malloc(fr_base64_len(len))) == NULL)
    return -ENOMEM;
  rc = fr_http_ws_send(e->req, FR_WS_OP_TEXT, &digit, 1, enc, fr_base64_encode(data, len, enc));
  free(enc);
  return rc;
}

/* Sends <len> bytes of output on <channel>, or drops them when the client is
 * gone (the command keeps running, as on a node). May end the WebSocket. */
static void send_output(struct sim_exec *e, unsigned char channel,
                        const void *data, size_t len) {
  if (e->ws != WS_OPEN || len == 0)
    return;
  if (send_frame(e, channel, data, len) != 0)
    return; /* the connection is gone (on_ws_close tells us) or out of memory */
  if (e->ws == WS_OPEN && fr_http_pending_bytes(e->req) > PAUSE_HIGH)
    pause_reading(e);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  buf->base = malloc(READ_CHUNK);
  buf->len = buf->base != NULL ? READ_CHUNK : 0;
}

static void set_start_error(struct sim_exec *e, const char *detail);

/* The wrapper's start-error pipe: a few hundred bytes at most, then EOF
 * (at the command's exec, or the wrapper's exit). */
static void on_ctl_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  struct sim_exec *e = s->data;

  enter(e);
  if (nread > 0) {
    size_t n = (size_t)nread;
    if (n > sizeof(e->ctl_text) - 1 - e->ctl_len)
      n = sizeof(e->ctl_text) - 1 - e->ctl_len;
    memcpy(e->ctl_text + e->ctl_len, buf->base, n);
    e->ctl_len += n;
    e->ctl_text[e->ctl_len] = '\0';
  } else if (nread < 0 && nread != UV_ENOBUFS) {
    uv_read_stop(s);
    close_handle(s);
    e->ctl_open = 0;
    if (e->ctl_len > 0)
      set_start_error(e, e->ctl_text);
    check_done(e);
  }
  free(buf->base);
  leave(e);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  struct sim_exec *e = s->data;
  int is_out = s == (uv_stream_t *)&e->out;

  enter(e);
  if (nread > 0) {
    send_output(e, is_out || e->merge_stderr ? CH_STDOUT : CH_STDERR,
                buf->base, (size_t)nread);
  } else if (nread == UV_ENOBUFS) {
    /* Out of memory for the read buffer: retry from the pause timer rather
     * than spinning on a readable pipe. */
    pause_reading(e);
  } else if (nread < 0) {
    if (nread != UV_EOF)
      FR_DEBUG(LOG_COMP, "pid %d: read %s: %s", e->pid,
               is_out ? "stdout" : "stderr", uv_strerror((int)nread));
    uv_read_stop(s);
    close_handle(s);
    if (is_out)
      e->out_open = 0;
    else
      e->err_open = 0;
    check_done(e);
  }
  free(buf->base);
  leave(e);
}

/* ---- stdin ---- */

static void on_stdin_shutdown(uv_shutdown_t *req, int status) {
  struct sim_exec *e = req->handle->data;

  enter(e);
  close_handle(req->handle);
  leave(e);
}

/* EOF on the child's stdin once what is queued has been written. */
static void stdin_eof(struct sim_exec *e) {
  if (!e->in_open)
    return;
  e->in_open = 0;
  e->shutdown.data = e;
  if (uv_shutdown(&e->shutdown, (uv_stream_t *)&e->in, on_stdin_shutdown) != 0)
    close_handle(&e->in);
}

/* The child stopped reading (EPIPE) or the pipe failed: drop stdin. */
static void stdin_broken(struct sim_exec *e, int err) {
  FR_DEBUG(LOG_COMP, "pid %d: stdin: %s", e->pid, uv_strerror(err));
  e->in_open = 0;
  close_handle(&e->in);
}

static void on_stdin_written(uv_write_t *req, int status) {
  struct stdin_write *w = fr_container_of(req, struct stdin_write, req);
  struct sim_exec *e = w->e;

  enter(e);
  e->stdin_pending -= w->len;
  free(w);
  if (status < 0 && status != UV_ECANCELED && e->in_open)
    stdin_broken(e, status);
  leave(e);
}

static void stdin_write(struct sim_exec *e, const unsigned char *data, size_t len) {
  struct stdin_write *w;
  uv_buf_t b;
  int n;

  if (!e->in_open || len == 0)
    return;
  /* Nothing queued: try to hand the bytes to the pipe right away, which
   * saves a copy for the usual small interactive writes. libuv keeps queued
   * writes in order, and we only try when the queue is empty, so order is
   * preserved either way. */
  if (e->stdin_pending == 0) {
    b = uv_buf_init((char *)data, (unsigned)len);
    n = uv_try_write((uv_stream_t *)&e->in, &b, 1);
    if (n >= 0) {
      data += n;
      len -= (size_t)n;
      if (len == 0)
        return;
    } else if (n != UV_EAGAIN) {
      stdin_broken(e, n);
      return;
    }
  }
  if (e->stdin_pending + len > STDIN_MAX_PENDING) {
    FR_WARN(LOG_COMP, "pid %d: over %zu bytes of stdin not read by the command; "
            "closing the exec stream", e->pid, STDIN_MAX_PENDING);
    ws_finish(e, FR_WS_CLOSE_INTERNAL, "stdin buffer limit exceeded");
    return;
  }
  w = malloc(sizeof(*w) + len);
  if (w == NULL) {
    stdin_broken(e, UV_ENOMEM);
    return;
  }
  w->e = e;
  w->len = len;
  memcpy(w->data, data, len);
  b = uv_buf_init(w->data, (unsigned)len);
  n = uv_write(&w->req, (uv_stream_t *)&e->in, &b, 1, on_stdin_written);
  if (n != 0) {
    free(w);
    stdin_broken(e, n);
    return;
  }
  e->stdin_pending += len;
}

/* ---- WebSocket callbacks ---- */

/* Writes a base64 stdin message's payload <data> to the command; a payload
 * that does not decode is dropped, as wsstream drops it. */
static void stdin_write_base64(struct sim_exec *e, const unsigned char *data, size_t len) {
  unsigned char *raw = malloc(len * 3 / 4 + 3);
  long n;

  if (raw == NULL) {
    stdin_broken(e, UV_ENOMEM);
    return;
  }
  n = fr_base64_decode((const char *)data, len, raw);
  if (n > 0)
    stdin_write(e, raw, (size_t)n);
  free(raw);
}

static void on_ws_message(struct fr_http_req *req, int opcode,
                          const unsigned char *data, size_t len) {
  struct sim_exec *e = req->data;
  unsigned channel;

  if (e == NULL)
    return; /* we already closed this WebSocket */
  enter(e);
  /* wsstream reads text and binary messages alike (x/net/websocket's
   * Message codec into a []byte): clients such as the official Python one
   * send stdin given as a string in text frames. */
  if ((opcode != FR_WS_OP_BINARY && opcode != FR_WS_OP_TEXT) || len == 0)
    goto out;
  channel = data[0];
  if (e->proto & PROTO_BASE64)
    channel = (unsigned char)(channel - '0');
  switch (channel) {
  case CH_STDIN:
    if (e->proto & PROTO_BASE64)
      stdin_write_base64(e, data + 1, len - 1);
    else
      stdin_write(e, data + 1, len - 1);
    break;
  case CH_CLOSE:
    /* v5 only; "FF 00" is stdin EOF. Before v5 there is no channel 255:
     * ignored. */
    if ((e->proto & PROTO_CLOSE) && len >= 2 && data[1] == CH_STDIN)
      stdin_eof(e);
    break;
  case CH_RESIZE: /* no terminal to resize */
  default:        /* unknown channels are ignored, as by the kubelet */
    break;
  }
out:
  leave(e);
}

/* Lets go of the WebSocket. When the command is still running it goes on
 * (a non-tty exec on a node is not killed when its stream ends): its stdin
 * sees EOF and its output is read and discarded. */
static void ws_detach(struct sim_exec *e) {
  if (e->ws != WS_OPEN)
    return;
  e->req->data = NULL;
  e->req = NULL;
  e->ws = WS_GONE;
  if (!e->done) {
    stdin_eof(e);
    resume_reading(e);
  }
}

/* Closes the WebSocket from our side with <code>. */
static void ws_finish(struct sim_exec *e, int code, const char *reason) {
  struct fr_http_req *req = e->req;

  if (e->ws != WS_OPEN)
    return;
  if (!e->done)
    FR_DEBUG(LOG_COMP, "pid %d: closing the stream (%d %s), command keeps running",
             e->pid, code, reason);
  ws_detach(e);
  fr_http_ws_close(req, code, reason);
}

static void on_ws_close(struct fr_http_req *req, int code) {
  struct sim_exec *e = req->data;

  if (e == NULL)
    return; /* we closed it; already detached */
  enter(e);
  if (!e->done)
    FR_DEBUG(LOG_COMP, "pid %d: client closed the stream (%d), command keeps "
             "running", e->pid, code);
  ws_detach(e);
  leave(e);
}

/* ---- completion ---- */

/* The message of a failed command's Status (what Go's status.Error()
 * prints) into <b>: 0 or -ENOMEM. */
static int status_message(const struct sim_exec *e, struct fr_buf *b) {
  if (e->start_error == NULL)
    return fr_buf_printf(b, "command terminated with non-zero exit code: exit status %d",
                         e->exit_code);
  /* apierrors.NewInternalError(err): kubectl prints the message, exits 1. */
  return fr_buf_printf(b, "Internal error occurred: %s", e->start_error);
}

/* Writes the channel-3 Status of a finished command into <b>: exactly what
 * the kubelet's streaming server writes (metav1.Status without TypeMeta, in
 * Go field order). Returns 0 or -ENOMEM. */
static int build_status(const struct sim_exec *e, struct fr_buf *b) {
  struct fr_buf msg;
  int rc;

  if (e->start_error == NULL && e->exit_code == 0)
    return fr_buf_puts(b, "{\"metadata\":{},\"status\":\"Success\"}");
  fr_buf_init(&msg);
  rc = status_message(e, &msg);
  if (rc == 0)
    rc = fr_buf_puts(b, "{\"metadata\":{},\"status\":\"Failure\",\"message\":");
  if (rc == 0)
    rc = fr_buf_put_json_str(b, msg.data, msg.len);
  if (rc == 0 && e->start_error == NULL) {
    rc = fr_buf_printf(b, ",\"reason\":\"NonZeroExitCode\",\"details\":{\"causes\":"
                       "[{\"reason\":\"ExitCode\",\"message\":\"%d\"}]}}", e->exit_code);
  } else if (rc == 0) {
    rc = fr_buf_puts(b, ",\"reason\":\"InternalError\",\"details\":{\"causes\":[{\"message\":");
    if (rc == 0)
      rc = fr_buf_put_json_str(b, e->start_error, strlen(e->start_error));
    if (rc == 0)
      rc = fr_buf_puts(b, "}]},\"code\":500}");
  }
  fr_buf_free(&msg);
  return rc;
}

static void send_status(struct sim_exec *e) {
  static const char oom_json[] =
      "{\"metadata\":{},\"status\":\"Failure\",\"message\":\"Internal error "
      "occurred: out of memory\",\"reason\":\"InternalError\",\"code\":500}";
  static const char oom_text[] = "Internal error occurred: out of memory";
  int json = (e->proto & PROTO_STATUS) != 0;
  struct fr_buf b;

  /* Before v4 the kubelet writes status.Error() alone, and nothing for a
   * success. */
  if (!json && e->start_error == NULL && e->exit_code == 0)
    return;
  fr_buf_init(&b);
  if ((json ? build_status(e, &b) : status_message(e, &b)) == 0)
    send_frame(e, CH_STATUS, b.data, b.len);
  else if (json)
    send_frame(e, CH_STATUS, oom_json, sizeof(oom_json) - 1);
  else
    send_frame(e, CH_STATUS, oom_text, sizeof(oom_text) - 1);
  fr_buf_free(&b);
}

/* The one place where an exec ends: once the command has ended and both
 * output pipes are at EOF, send the Status and close the WebSocket. */
static void check_done(struct sim_exec *e) {
  struct sim_exec_set *set = e->set;

  if (e->done || !e->exited || e->out_open || e->err_open || e->ctl_open)
    return;
  e->done = 1;
  /* A group whose processes are all gone may soon name an unrelated group
   * (the kernel reuses the id once nothing refers to it): forget it now,
   * and keep only groups something still runs in. */
  if (set != NULL && e->pid > 0 && kill(-e->pid, 0) != 0 && errno == ESRCH)
    set_forget_group(set, e->pid);
  set_unlink(e);
  if (e->timer_init)
    close_handle(&e->timer);
  if (e->in_open || e->stdin_pending > 0) {
    /* Nobody we track reads stdin any more. */
    e->in_open = 0;
    close_handle(&e->in);
  }
  FR_DEBUG(LOG_COMP, "pid %d: done, exit code %d%s", e->pid, e->exit_code,
           e->ws == WS_OPEN ? "" : " (client gone)");
  if (e->ws != WS_OPEN)
    return;
  send_status(e);
  ws_finish(e, FR_WS_CLOSE_NORMAL, "");
}

static void on_exit_cb(uv_process_t *proc, int64_t exit_status, int term_signal) {
  struct sim_exec *e = proc->data;

  enter(e);
  e->exited = 1;
  /* A container runtime reports death by signal as 128 + signal. */
  e->exit_code = term_signal != 0 ? 128 + term_signal : (int)(exit_status & 0xff);
  FR_DEBUG(LOG_COMP, "pid %d: exited, code %d", e->pid, e->exit_code);
  close_handle(proc);
  check_done(e);
  leave(e);
}

/* ---- starting a command ---- */

void sim_exec_errno_text(int err, char *out, size_t n) {
  if (strerror_r(err, out, n) != 0)
    snprintf(out, n, "errno %d", err);
  if (out[0] >= 'A' && out[0] <= 'Z')
    out[0] = (char)(out[0] - 'A' + 'a');
}

/* Go's exec findExecutable(): a non-directory with any execute bit.
 * Returns 0, or a positive errno (EACCES for a directory or no x bit). */
static int find_executable(const char *path) {
  struct stat st;

  if (stat(path, &st) != 0)
    return errno;
  if (!S_ISDIR(st.st_mode) && (st.st_mode & 0111) != 0)
    return 0;
  return EACCES;
}

/* <cwd>/<path> for a relative <path>, to stat what the child (which starts
 * in <cwd>) will see. */
static int path_in(const char *cwd, const char *path, struct fr_buf *out) {
  fr_buf_reset(out);
  if (path[0] != '/' && cwd != NULL && fr_buf_printf(out, "%s/", cwd) != 0)
    return -ENOMEM;
  return fr_buf_puts(out, path);
}

int sim_exec_look_path(const char *name, const char *path_env, const char *cwd,
                       struct fr_buf *file, struct fr_buf *detail) {
  struct fr_buf probe;
  const char *dir, *end;
  char text[128];
  int err, rc = -ENOENT;

  fr_buf_init(&probe);
  fr_buf_reset(file);
  fr_buf_reset(detail);
  if (strchr(name, '/') != NULL) {
    if (path_in(cwd, name, &probe) != 0) {
      rc = -ENOMEM;
      goto out;
    }
    err = find_executable(probe.data);
    if (err == 0) {
      rc = fr_buf_puts(file, name);
    } else {
      sim_exec_errno_text(err, text, sizeof(text));
      if (err == EACCES)
        rc = fr_buf_printf(detail, "exec: \"%s\": %s", name, text);
      else
        rc = fr_buf_printf(detail, "exec: \"%s\": stat %s: %s", name, name, text);
      if (rc == 0)
        rc = -ENOENT;
    }
    goto out;
  }
  for (dir = path_env; *name != '\0'; dir = end + 1) {
    end = strchr(dir, ':');
    if (end == NULL)
      end = dir + strlen(dir);
    fr_buf_reset(file);
    /* An empty PATH element means the current directory. */
    if (end == dir)
      rc = fr_buf_puts(file, ".");
    else
      rc = fr_buf_append(file, dir, (size_t)(end - dir));
    if (rc == 0)
      rc = fr_buf_printf(file, "/%s", name);
    if (rc == 0)
      rc = path_in(cwd, file->data, &probe);
    if (rc != 0) {
      rc = -ENOMEM;
      goto out;
    }
    if (find_executable(probe.data) == 0)
      goto out; /* rc == 0 */
    if (*end == '\0')
      break;
  }
  fr_buf_reset(file);
  rc = fr_buf_printf(detail, "exec: \"%s\": executable file not found in $PATH", name);
  if (rc == 0)
    rc = -ENOENT;
out:
  fr_buf_free(&probe);
  return rc;
}

/* Records why the command could not start, with the message a containerd
 * node gives (kubelet -> CRI streaming server -> runc), e.g.
 * `... exec: "nosuch": executable file not found in $PATH: unknown`. */
static void set_start_error(struct sim_exec *e, const char *detail) {
  unsigned char raw[32];
  char id[65];
  struct fr_buf b;
  size_t i;

  free(e->start_error);
  e->start_error = NULL;
  /* containerd names an exec with 32 random bytes in hex. */
  if (fr_random_bytes(raw, sizeof(raw)) != 0)
    memset(raw, 0, sizeof(raw));
  for (i = 0; i < sizeof(raw); i++)
    snprintf(id + 2 * i, 3, "%02x", raw[i]);
  fr_buf_init(&b);
  if (fr_buf_printf(&b, "error executing command in container: failed to exec "
                    "in container: failed to start exec \"%s\": OCI runtime exec "
                    "failed: exec failed: unable to start container process: "
                    "%s: unknown", id, detail) == 0)
    e->start_error = fr_buf_detach(&b, NULL);
  fr_buf_free(&b);
  if (e->start_error == NULL)
    e->start_error = strdup("out of memory");
  if (e->start_error == NULL)
    e->exit_code = 126; /* still reported, as a plain non-zero exit */
}

/* The command could not start: nothing runs. */
static void fail_start(struct sim_exec *e, const char *detail) {
  set_start_error(e, detail);
  e->exited = 1;
}

static void init_pipe(struct sim_exec *e, uv_pipe_t *pipe) {
  uv_pipe_init(e->loop, pipe, 0);
  pipe->data = e;
  e->handles++;
}

/* Starts <p>'s command as a process in its own process group, or records
 * why it could not start. Returns 0, or -ENOMEM before anything started. */
static int spawn_command(struct sim_exec *e, const struct sim_exec_params *p) {
  uv_process_options_t opts;
  uv_stdio_container_t stdio[4];
  struct fr_buf file, detail;
  const char *path_env = NULL;
  char **env = NULL, **args = NULL;
  size_t nenv = 0, i, nwrap = 0, nargs = 0;
  char text[128];
  int rc;

  fr_buf_init(&file);
  fr_buf_init(&detail);
  for (nenv = 0; p->env != NULL && p->env[nenv] != NULL; nenv++)
    if (strncmp(p->env[nenv], "PATH=", 5) == 0)
      path_env = p->env[nenv] + 5;
  /* The child gets exactly the pod's env (never ours), plus containerd's
   * default PATH when the pod has none. Strings are borrowed for the call. */
  env = calloc(nenv + 2, sizeof(*env));
  if (env == NULL) {
    rc = -ENOMEM;
    goto out;
  }
  for (i = 0; i < nenv; i++)
    env[i] = p->env[i];
  if (path_env == NULL) {
    env[nenv] = DEFAULT_PATH_ENV;
    path_env = DEFAULT_PATH;
  }

  if (p->wrap != NULL) {
    /* wrap... argv...: the wrapper finds the command inside the pod and
     * reports on fd 3 when it cannot start it. */
    while (p->wrap[nwrap] != NULL)
      nwrap++;
    while (p->argv[nargs] != NULL)
      nargs++;
    args = calloc(nwrap + nargs + 1, sizeof(*args));
    if (args == NULL) {
      rc = -ENOMEM;
      goto out;
    }
    for (i = 0; i < nwrap; i++)
      args[i] = p->wrap[i];
    for (i = 0; i < nargs; i++)
      args[nwrap + i] = p->argv[i];
  } else {
    rc = sim_exec_look_path(p->argv[0], path_env, p->cwd, &file, &detail);
    if (rc == -ENOENT) {
      fail_start(e, detail.data);
      rc = 0;
      goto out;
    }
    if (rc != 0)
      goto out;
  }

  memset(stdio, 0, sizeof(stdio));
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_IGNORE;
  stdio[2].flags = UV_IGNORE;
  if (p->in) {
    init_pipe(e, &e->in);
    stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
    stdio[0].data.stream = (uv_stream_t *)&e->in;
  }
  if (p->out) {
    init_pipe(e, &e->out);
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&e->out;
  }
  /* With a tty the command's stderr is the terminal, which is stdout. */
  e->merge_stderr = p->tty && !p->err;
  if (p->err || (e->merge_stderr && p->out)) {
    init_pipe(e, &e->err);
    stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[2].data.stream = (uv_stream_t *)&e->err;
  }
  if (p->wrap != NULL) {
    init_pipe(e, &e->ctl);
    stdio[3].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[3].data.stream = (uv_stream_t *)&e->ctl;
  }
  uv_timer_init(e->loop, &e->timer);
  e->timer.data = e;
  e->timer_init = 1;
  e->handles++;

  memset(&opts, 0, sizeof(opts));
  opts.exit_cb = on_exit_cb;
  opts.file = file.data;
  opts.args = p->argv;
  if (args != NULL) {
    opts.file = p->wrap[0];
    opts.args = args;
  }
  opts.env = env;
  opts.cwd = p->cwd;
  /* Own session and process group, so the pod's deletion can kill
   * everything the command started with one kill(-pid). */
  opts.flags = UV_PROCESS_DETACHED;
  opts.stdio_count = p->wrap != NULL ? 4 : 3;
  opts.stdio = stdio;
  e->proc.data = e;
  rc = uv_spawn(e->loop, &e->proc, &opts);
  e->handles++; /* uv_spawn initialises the handle even when it fails */
  if (rc != 0) {
    close_handle(&e->proc);
    if (p->in)
      close_handle(&e->in);
    if (p->out)
      close_handle(&e->out);
    if (stdio[2].flags != UV_IGNORE)
      close_handle(&e->err);
    if (p->wrap != NULL)
      close_handle(&e->ctl);
    sim_exec_errno_text(-rc, text, sizeof(text));
    fr_buf_reset(&detail);
    if (fr_buf_printf(&detail, "exec %s: %s", opts.file, text) != 0) {
      rc = -ENOMEM;
      goto out;
    }
    fail_start(e, detail.data);
    rc = 0;
    goto out;
  }
  e->pid = e->proc.pid;
  e->in_open = p->in;
  if (p->out) {
    e->out_open = 1;
    uv_read_start((uv_stream_t *)&e->out, on_alloc, on_read);
  }
  if (stdio[2].flags != UV_IGNORE) {
    e->err_open = 1;
    uv_read_start((uv_stream_t *)&e->err, on_alloc, on_read);
  }
  if (p->wrap != NULL) {
    e->ctl_open = 1;
    uv_read_start((uv_stream_t *)&e->ctl, on_alloc, on_ctl_read);
  }
out:
  free(env);
  free(args);
  fr_buf_free(&file);
  fr_buf_free(&detail);
  return rc;
}

const char *sim_exec_protocol(const char *offered) {
  const char *tok, *end;
  const char *first = NULL;
  size_t i, n;

  if (offered == NULL || offered[strspn(offered, " \t")] == '\0')
    return "";
  for (tok = offered; *tok != '\0'; tok = *end ? end + 1 : end) {
    end = strchr(tok, ',');
    if (end == NULL)
      end = tok + strlen(tok);
    tok += strspn(tok, " \t");
    for (n = (size_t)(end - tok); n > 0 && (tok[n - 1] == ' ' || tok[n - 1] == '\t'); n--)
      ;
    for (i = 0; i < FR_ARRAY_SIZE(protocols); i++) {
      if (strlen(protocols[i].name) != n || strncmp(tok, protocols[i].name, n) != 0)
        continue;
      /* The API server answers any request offering v5 itself. */
      if (protocols[i].flags & PROTO_CLOSE)
        return protocols[i].name;
      if (first == NULL)
        first = protocols[i].name;
    }
  }
  return first;
}

int sim_exec_start(uv_loop_t *loop, struct fr_http_req *req,
                   const struct sim_exec_params *p, struct sim_exec_set *set) {
  struct sim_exec *e;
  struct fr_buf out;
  void *old_data;
  size_t i;
  int rc, code;

  if (p->argv == NULL || p->argv[0] == NULL)
    return -EINVAL;
  e = calloc(1, sizeof(*e));
  if (e == NULL)
    return -ENOMEM;
  e->loop = loop;
  e->req = req;
  for (i = 0; i < FR_ARRAY_SIZE(protocols); i++)
    if (p->protocol != NULL && strcmp(p->protocol, protocols[i].name) == 0)
      e->proto = protocols[i].flags;

  old_data = req->data;
  req->data = e;
  /* No protocol offered: the kubelet's binary pre-v4 default, and no
   * Sec-WebSocket-Protocol in the answer. */
  rc = fr_http_ws_accept(req, p->protocol != NULL && *p->protocol != '\0' ? p->protocol : NULL,
                         on_ws_message, on_ws_close);
  if (rc != 0) {
    req->data = old_data;
    free(e);
    return rc;
  }

  /* From here on the WebSocket is ours and every failure is reported on it. */
  enter(e);
  fr_buf_init(&out);
  if (p->fast_path && sim_exec_fast_output(p->argv, &out, &code) == 0) {
    FR_DEBUG(LOG_COMP, "fast path: %s, exit code %d", p->argv[0], code);
    if (p->out)
      send_output(e, CH_STDOUT, out.data, out.len);
    e->exit_code = code;
    e->exited = 1;
  } else {
    rc = spawn_command(e, p);
    if (rc != 0)
      fail_start(e, "out of memory");
    if (e->pid > 0) {
      FR_DEBUG(LOG_COMP, "pid %d: started %s", e->pid, p->argv[0]);
      if (set != NULL) {
        set_link(e, set);
        set_remember_group(set, e->pid);
        set->forked++;
      }
    } else {
      FR_DEBUG(LOG_COMP, "%s: %s", p->argv[0],
               e->start_error != NULL ? e->start_error : "cannot start");
    }
  }
  fr_buf_free(&out);
  check_done(e);
  leave(e);
  return 0;
}

/* ---- fast path: the commands' behaviour, modelled ---- */

/* "X", "/bin/X" or "/usr/bin/X" -> "X"; anything else -> NULL. A bare name
 * is assumed to resolve to the Debian binary in /bin or /usr/bin. */
static const char *tool_name(const char *arg0) {
  if (strncmp(arg0, "/usr/bin/", 9) == 0)
    return arg0 + 9;
  if (strncmp(arg0, "/bin/", 5) == 0)
    return arg0 + 5;
  return strchr(arg0, '/') == NULL ? arg0 : NULL;
}

static size_t count_args(char *const *argv) {
  size_t n = 0;

  while (argv[n] != NULL)
    n++;
  return n;
}

/* coreutils' --help/--version are honoured only as the sole argument. */
static int is_gnu_info_option(char *const *args, size_t nargs) {
  return nargs == 1 && (strcmp(args[0], "--help") == 0 ||
                        strcmp(args[0], "--version") == 0);
}

/* coreutils echo (/bin/echo): leading words made only of the letters e, E
 * and n are options; without -e nothing is interpreted. With -e, arguments
 * containing a backslash would need escape processing: not modelled. */
static int echo_coreutils(char *const *args, size_t nargs, struct fr_buf *out) {
  size_t i, j;
  int newline = 1, escapes = 0, rc;

  if (is_gnu_info_option(args, nargs))
    return -EINVAL;
  for (i = 0; i < nargs && args[i][0] == '-' && args[i][1] != '\0'; i++) {
    const char *opt = args[i] + 1;

    if (opt[strspn(opt, "eEn")] != '\0')
      break; /* not an option word: printed as it is, and so is the rest */
    for (; *opt != '\0'; opt++) {
      if (*opt == 'e')
        escapes = 1;
      else if (*opt == 'E')
        escapes = 0;
      else
        newline = 0;
    }
  }
  if (escapes)
    for (j = i; j < nargs; j++)
      if (strchr(args[j], '\\') != NULL)
        return -EINVAL;
  if (out == NULL)
    return 0;
  for (j = i; j < nargs; j++) {
    if (j > i && (rc = fr_buf_putc(out, ' ')) != 0)
      return rc;
    if ((rc = fr_buf_puts(out, args[j])) != 0)
      return rc;
  }
  return newline ? fr_buf_putc(out, '\n') : 0;
}

/* Characters that make a `sh -c` script more than plain words: quoting,
 * expansions, redirections, control operators, globs, comments, and any
 * control character but tab. */
static int sh_plain_char(unsigned char c) {
  if (c == '\t')
    return 1;
  if (c < 0x20 || c == 0x7f)
    return 0;
  return strchr("'\"$`\\;|&<>*?(){}[]~#", c) == NULL;
}

#define SH_MAX_WORDS 64

/* Splits a plain script into words at blanks. Returns the number of words,
 * or -EINVAL if the script is not plain or has too many words. The words
 * point into <buf>, a copy of the script. */
static int sh_words(const char *script, char *buf, size_t bufsz,
                    const char **words) {
  size_t len = strlen(script), i;
  int n = 0;

  if (len >= bufsz)
    return -EINVAL;
  for (i = 0; i < len; i++)
    if (!sh_plain_char((unsigned char)script[i]))
      return -EINVAL;
  memcpy(buf, script, len + 1);
  for (i = 0; i < len;) {
    while (i < len && (buf[i] == ' ' || buf[i] == '\t'))
      buf[i++] = '\0';
    if (i == len)
      break;
    if (n == SH_MAX_WORDS)
      return -EINVAL;
    words[n++] = buf + i;
    while (i < len && buf[i] != ' ' && buf[i] != '\t')
      i++;
  }
  return n;
}

/* `sh -c 'exit [N]'` and `sh -c 'echo WORDS'` with a plain script. /bin/sh
 * is dash on Debian, but to stay right with bash too the echo words may not
 * look like options, except a leading "-n" (same meaning in both). */
static int sh_script(const char *script, struct fr_buf *out, int *code) {
  char buf[1024];
  const char *w[SH_MAX_WORDS];
  int n, i, start = 1, newline = 1, rc;
  int64_t v;

  n = sh_words(script, buf, sizeof(buf), w);
  if (n < 1)
    return -EINVAL;
  if (strcmp(w[0], "exit") == 0) {
    if (n == 1) {
      *code = 0; /* status of the last command: none ran */
      return 0;
    }
    /* Decimal without leading zeros, 0-255; anything else is not modelled. */
    if (n != 2 || strlen(w[1]) > 3 || (w[1][0] == '0' && w[1][1] != '\0') ||
        fr_parse_int64(w[1], 0, 255, &v) != 0)
      return -EINVAL;
    *code = (int)v;
    return 0;
  }
  if (strcmp(w[0], "echo") != 0)
    return -EINVAL;
  if (n > 1 && strcmp(w[1], "-n") == 0) {
    newline = 0;
    start = 2;
  }
  for (i = start; i < n; i++)
    if (w[i][0] == '-')
      return -EINVAL;
  *code = 0;
  if (out == NULL)
    return 0;
  for (i = start; i < n; i++) {
    if (i > start && (rc = fr_buf_putc(out, ' ')) != 0)
      return rc;
    if ((rc = fr_buf_puts(out, w[i])) != 0)
      return rc;
  }
  return newline ? fr_buf_putc(out, '\n') : 0;
}

/* Wrappers a client puts around a command that change nothing for the
 * commands the fast path runs: `timeout [-s SIG|--signal=SIG] N` (a fast
 * command ends long before any timeout) and `env NAME=VALUE...` (fast
 * commands read no environment; options such as -C or -i are not
 * stripped, they could change the outcome). Returns the inner argv. */
static char *const *strip_wrappers(char *const *argv) {
  for (;;) {
    const char *tool = argv[0] ? tool_name(argv[0]) : NULL;
    size_t i = 1;

    if (tool != NULL && strcmp(tool, "timeout") == 0) {
      if (argv[i] && strcmp(argv[i], "-s") == 0 && argv[i + 1])
        i += 2;
      else if (argv[i] && strncmp(argv[i], "--signal=", 9) == 0)
        i++;
      if (argv[i] == NULL || argv[i][0] == '\0' || strspn(argv[i], "0123456789") != strlen(argv[i]) ||
          strspn(argv[i], "0") == strlen(argv[i]) || argv[i + 1] == NULL)
        return argv;
      argv += i + 1;
    } else if (tool != NULL && strcmp(tool, "env") == 0) {
      while (argv[i] && argv[i][0] != '-' && argv[i][0] != '=' && strchr(argv[i], '=') != NULL)
        i++;
      if (argv[i] == NULL || argv[i][0] == '-')
        return argv;
      argv += i;
    } else {
      return argv;
    }
  }
}

/* Classifies (<out> NULL) or evaluates (<out> set) a fast-path command. */
static int fast_eval(char *const *argv, struct fr_buf *out, int *code) {
  const char *tool;
  size_t nargs;

  if (argv == NULL || argv[0] == NULL)
    return -EINVAL;
  argv = strip_wrappers(argv);
  if ((tool = tool_name(argv[0])) == NULL)
    return -EINVAL;
  nargs = count_args(argv) - 1;
  if (strcmp(tool, "echo") == 0) {
    *code = 0;
    return echo_coreutils(argv + 1, nargs, out);
  }
  if (strcmp(tool, "true") == 0 || strcmp(tool, "false") == 0) {
    if (is_gnu_info_option(argv + 1, nargs))
      return -EINVAL;
    *code = tool[0] == 't' ? 0 : 1;
    return 0;
  }
  /* sh -c SCRIPT [NAME [ARGS...]]: NAME and ARGS only set $0, $1...,
   * which a plain script cannot reference. */
  if (strcmp(tool, "sh") == 0 && nargs >= 2 && strcmp(argv[1], "-c") == 0)
    return sh_script(argv[2], out, code);
  return -EINVAL;
}

int sim_exec_is_fast(char *const *argv) {
  int code;

  return fast_eval(argv, NULL, &code) == 0;
}

int sim_exec_fast_output(char *const *argv, struct fr_buf *out, int *exit_code) {
  int code = 0, rc;

  if (out == NULL || exit_code == NULL)
    return -EINVAL;
  /* Classify first so that a rejected command leaves <out> untouched. */
  rc = fast_eval(argv, NULL, &code);
  if (rc == 0)
    rc = fast_eval(argv, out, &code);
  if (rc == 0)
    *exit_code = code;
  return rc;
}
