/* cmd_shell.c - `fedctl shell`: an interactive session in a sandbox
 * through its agent (docs/api.md "Inside a sandbox"); and `fedctl proc
 * attach`, the same session on a process that already runs.
 *
 * The session is a background process started on a PTY the size of the
 * local terminal, then three kinds of HTTP call driven by one curl multi
 * handle and one poll loop (curl_multi_poll with our own fds beside
 * curl's sockets; nothing spins):
 *   - its output, GET .../output?follow=1, written to stdout as it comes;
 *     the last line is the exit, and fedctl exits with that code;
 *   - keystrokes, read from stdin as they come and sent in order with
 *     POST .../stdin, one request at a time (what arrives meanwhile waits
 *     in <pending>, bounded: stdin is not read while it is full);
 *   - SIGWINCH, turned into POST .../resize.
 * Signals reach the loop through a self-pipe. The local terminal is in raw
 * mode while the session runs (Ctrl-C is a byte for the remote terminal);
 * every way out of fc_cmd_shell() after raw mode went on passes through
 * the one place that restores it (SIGPIPE is ignored meanwhile, so even a
 * closed stdout comes back as an error). A signal that ends fedctl (TERM,
 * HUP, and INT/QUIT when not in raw mode) or a lost output stream hangs
 * the remote session up (SIGHUP to its process group) on the way out.
 *
 * Without a local terminal (stdin a pipe or file) the process gets no PTY
 * by default: stdin is streamed to it and closed at EOF.
 *
 * `proc attach` differs where the process is not fedctl's own: it is never
 * hung up (a signal, Ctrl-] in raw mode or a lost stream detaches and
 * leaves it running), and the end of fedctl's stdin is not passed on
 * (`proc stdin --close` does that), so attaching from a script with
 * </dev/null only watches.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "fedctl.h"
#include "ndjson.h"

/* Bytes typed but not yet sent: past this, stdin is not read until a
 * request took some. */
#define SH_MAX_PENDING ((size_t)256 << 10)
/* One stdin request carries at most this much, well under the router's
 * smallest allowed limits.max_body_bytes. */
#define SH_MAX_SEND ((size_t)16 << 10)
/* How long fedctl waits for the hang-up call when it is told to quit. */
#define SH_HANGUP_TIMEOUT_S 5L
/* `proc attach -t`: the key that detaches (Ctrl-], telnet's escape). */
#define SH_DETACH_KEY 0x1d
/* session_loop()'s answer when that key was typed (above any signal). */
#define SH_DETACHED 256

static const char shell_usage[] =
    "usage: fedctl shell ID [-t | -T] [--env K=V]... [--workdir D] [-- COMMAND [ARG...]]\n"
    "\n"
    "Opens an interactive session in sandbox ID: COMMAND (default /bin/sh) on\n"
    "a pseudo-terminal the size of yours, your keystrokes sent as you type\n"
    "(Ctrl-C goes to the remote program), window size changes followed.\n"
    "Exits with the remote command's exit status when it ends. With stdin\n"
    "not a terminal, COMMAND reads stdin as a pipe (no PTY) until its end.\n"
    "The sandbox needs the fedrouter agent. When fedctl is killed (TERM, HUP,\n"
    "exit 128 + the signal) or loses the session's output, the remote\n"
    "command is hung up (SIGHUP).\n"
    "\n"
    "  -t, --tty          use a PTY even when stdin is not a terminal\n"
    "  -T, --no-tty       no PTY even when stdin is a terminal\n"
    "  --env K=V          environment variable (repeatable; TERM is passed on)\n"
    "  --workdir D        working directory inside the sandbox\n";

enum { S_TTY = 1, S_NO_TTY };

static const struct fc_opt shell_opts[] = {
    {"tty", 't', 0, S_TTY},            {"no-tty", 'T', 0, S_NO_TTY}, {"env", 0, 1, FC_OPT_ENV},
    {"workdir", 0, 1, FC_OPT_WORKDIR}, {NULL, 0, 0, 0},
};

/* One call of the session, on the multi handle while <busy>. */
struct call {
  CURL *easy;
  struct fc_resp r;
  int busy;
};

struct shell {
  struct fc_ctx *ctx;
  const char *id;
  int64_t pid;
  int attach;               /* proc attach: not our process (see above) */
  int pty;                  /* the remote process has a PTY */
  int raw;                  /* the local terminal is in raw mode */
  struct termios saved;     /* its mode before */
  int sig_pipe[2];
  CURLM *multi;
  /* output */
  struct call out;
  struct fc_sink out_sink;
  struct fc_nd nd;
  int out_ended;
  /* stdin */
  struct call in;
  struct fr_buf pending;
  int in_eof;               /* stdin ended */
  int eof_sent;             /* ... and the remote was told */
  int in_gone;              /* the remote takes no more input */
  int in_closing;           /* the call in flight on <in> is the end of input */
  /* window size */
  struct call rs;
  int rs_wanted;
  unsigned short rows, cols;
};

/* The write end of the session's signal pipe: a signal handler has no
 * other way to reach it. -1 outside a session. */
static volatile sig_atomic_t sig_fd = -1;

static void on_signal(int sig) {
  int saved = errno;
  unsigned char b = (unsigned char)sig;

  if (sig_fd >= 0 && write(sig_fd, &b, 1) < 0) {
    /* The pipe is full: a signal of each kind is already waiting. */
  }
  errno = saved;
}

static const int caught[] = {SIGWINCH, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP};

static void signals_set(int on) {
  struct sigaction sa;
  size_t i;

  memset(&sa, 0, sizeof(sa));
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on ? on_signal : SIG_DFL;
  sa.sa_flags = SA_RESTART;
  for (i = 0; i < sizeof(caught) / sizeof(caught[0]); i++)
    sigaction(caught[i], &sa, NULL);
  /* A closed stdout is an error of the output's write (EPIPE), which ends
   * the session through the path that restores the terminal. */
  sa.sa_handler = on ? SIG_IGN : SIG_DFL;
  sigaction(SIGPIPE, &sa, NULL);
}

/* A message while the session runs: in raw mode "\n" does not return the
 * carriage, so end the line with "\r\n". */
static void say(const struct shell *sh, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const struct shell *sh, const char *fmt, ...) {
  char msg[700];
  va_list ap;
  int n;

  va_start(ap, fmt);
  n = vsnprintf(msg, sizeof(msg) - 2, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n > sizeof(msg) - 3)
    n = (int)sizeof(msg) - 3;
  if (sh->raw)
    msg[n++] = '\r';
  msg[n++] = '\n';
  fc_write_all(STDERR_FILENO, msg, (size_t)n);
}

/* The API error of a finished call as one line, or the transport error. */
static void say_failed(const struct shell *sh, const char *what, const struct fc_resp *r) {
  const json_t *e = json_object_get(r->json, "error");

  if (r->status == 0)
    say(sh, "fedctl: %s: %s", what, r->err[0] ? r->err : "no answer");
  else if (json_is_object(e))
    say(sh, "fedctl: %s: %s: %s", what, fc_jstr(e, "code", "error"), fc_jstr(e, "message", ""));
  else
    say(sh, "fedctl: %s: HTTP %ld", what, r->status);
}

static void term_size(unsigned short *rows, unsigned short *cols) {
  struct winsize ws;

  *rows = 24;
  *cols = 80;
  if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
    /* The API takes 1..1000. */
    *rows = ws.ws_row > 1000 ? 1000 : ws.ws_row;
    *cols = ws.ws_col > 1000 ? 1000 : ws.ws_col;
  }
}

static int raw_on(struct shell *sh) {
  struct termios t;

  if (tcgetattr(STDIN_FILENO, &sh->saved) != 0)
    return -errno;
  t = sh->saved;
  /* Output processing goes too: the remote terminal already sends
   * "\r\n" (say() adds the '\r' to fedctl's own lines). */
  cfmakeraw(&t);
  if (tcsetattr(STDIN_FILENO, TCSANOW, &t) != 0)
    return -errno;
  sh->raw = 1;
  return 0;
}

static void raw_off(struct shell *sh) {
  if (!sh->raw)
    return;
  tcsetattr(STDIN_FILENO, TCSADRAIN, &sh->saved);
  sh->raw = 0;
}

/* ---------------------------------------------------------------------- */
/* calls                                                                   */

static int call_init(struct call *c) {
  fc_resp_init(&c->r);
  c->easy = curl_easy_init();
  return c->easy != NULL ? 0 : -ENOMEM;
}

static void call_close(struct shell *sh, struct call *c) {
  if (c->busy)
    curl_multi_remove_handle(sh->multi, c->easy);
  c->busy = 0;
  if (c->easy != NULL)
    curl_easy_cleanup(c->easy);
  c->easy = NULL;
  fc_resp_close(&c->r);
}

/* Sets up "<method> .../processes/<pid><suffix>" on <c>: raw <data> or the
 * JSON <body> (borrowed). */
static int call_setup(struct shell *sh, struct call *c, const char *method, const char *suffix, json_t *body,
                      const char *data, size_t len) {
  struct fr_buf path;
  int rc;

  fc_resp_close(&c->r);
  fc_resp_init(&c->r);
  fr_buf_init(&path);
  rc = fc_sandbox_path(&path, sh->id, "/processes/");
  if (rc == 0)
    rc = fr_buf_printf(&path, "%" PRId64 "%s", sh->pid, suffix);
  if (rc == 0 && body != NULL)
    rc = fc_easy_setup(sh->ctx, c->easy, method, path.data, body, FC_CALL_TIMEOUT_S, &c->r);
  else if (rc == 0)
    rc = fc_easy_setup_raw(sh->ctx, c->easy, method, path.data, data != NULL ? "application/octet-stream" : NULL,
                           data, len, data != NULL ? FC_CALL_TIMEOUT_S : 0, &c->r);
  fr_buf_free(&path);
  return rc;
}

static int call_start(struct shell *sh, struct call *c) {
  curl_easy_setopt(c->easy, CURLOPT_PRIVATE, c);
  if (curl_multi_add_handle(sh->multi, c->easy) != CURLM_OK)
    return -ENOMEM;
  c->busy = 1;
  return 0;
}

static int out_feed(const char *data, size_t len, void *arg) {
  return fc_nd_feed(arg, data, len);
}

static int out_write(int fd, const void *data, size_t len, void *arg) {
  (void)arg;
  return fc_write_all(fd, data, len);
}

/* Sends what is pending, the end of input, or a new window size, each
 * when its call is free. */
static int start_calls(struct shell *sh) {
  int rc = 0;

  if (!sh->in.busy && !sh->in_gone && sh->pending.len > 0) {
    size_t n = sh->pending.len < SH_MAX_SEND ? sh->pending.len : SH_MAX_SEND;
    if ((rc = call_setup(sh, &sh->in, "POST", "/stdin", NULL, sh->pending.data, n)) != 0 ||
        (rc = call_start(sh, &sh->in)) != 0)
      return rc;
    sh->in_closing = 0;
    fr_buf_consume(&sh->pending, n);
  } else if (!sh->in.busy && !sh->in_gone && sh->in_eof && !sh->eof_sent && !sh->attach) {
    /* A PTY has no stdin to close: EOT is what a terminal's Ctrl-D sends. */
    sh->eof_sent = 1;
    sh->in_closing = 1;
    if (sh->pty)
      rc = call_setup(sh, &sh->in, "POST", "/stdin", NULL, "\x04", 1);
    else
      rc = call_setup(sh, &sh->in, "POST", "/stdin?close=1", NULL, "", 0);
    if (rc != 0 || (rc = call_start(sh, &sh->in)) != 0)
      return rc;
  }
  if (!sh->rs.busy && sh->rs_wanted) {
    json_t *b = json_pack("{s:i,s:i}", "cols", (int)sh->cols, "rows", (int)sh->rows);
    sh->rs_wanted = 0;
    if (b == NULL)
      return -ENOMEM;
    rc = call_setup(sh, &sh->rs, "POST", "/resize", b, NULL, 0);
    json_decref(b);
    if (rc != 0 || (rc = call_start(sh, &sh->rs)) != 0)
      return rc;
  }
  return 0;
}

/* A call ended with <crc>. */
static void call_done(struct shell *sh, struct call *c, CURLcode crc) {
  const char *code;

  curl_multi_remove_handle(sh->multi, c->easy);
  c->busy = 0;
  if (c == &sh->out) {
    fc_sink_finish(&sh->out_sink, crc);
    sh->out_ended = 1;
    return;
  }
  fc_resp_finish(c->easy, crc, &c->r);
  if (c->r.status >= 200 && c->r.status <= 299)
    return;
  code = fc_jstr(json_object_get(c->r.json, "error"), "code", "");
  if (c == &sh->in && (strcmp(code, "process_not_found") == 0 || strcmp(code, "failed_precondition") == 0)) {
    /* It ended (its exit is on the way through the output) or closed
     * its input: nothing more to send. A process attached to may never
     * have had an input: say so once, since what is typed goes nowhere. */
    if (sh->attach && !sh->in_closing && strcmp(code, "failed_precondition") == 0)
      say(sh, "fedctl: the process's stdin is not open (start it with -i or --pty): input is not sent");
    sh->in_gone = 1;
    fr_buf_reset(&sh->pending);
    return;
  }
  /* A resize that finds the process gone is no news either. */
  if (strcmp(code, "process_not_found") != 0)
    say_failed(sh, c == &sh->in ? "sending input" : "resizing", &c->r);
}

static void drain_messages(struct shell *sh) {
  struct call *c;
  CURLMsg *m;
  int left;

  while ((m = curl_multi_info_read(sh->multi, &left)) != NULL) {
    if (m->msg != CURLMSG_DONE)
      continue;
    c = NULL;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
    if (c != NULL)
      call_done(sh, c, m->data.result);
  }
}

/* Reads what stdin has, up to the room in <pending>. */
static int read_stdin(struct shell *sh) {
  char buf[16384];
  size_t room = SH_MAX_PENDING - sh->pending.len;
  ssize_t n;

  n = read(STDIN_FILENO, buf, room < sizeof(buf) ? room : sizeof(buf));
  if (n < 0)
    return errno == EINTR || errno == EAGAIN ? 0 : -errno;
  if (n == 0) {
    sh->in_eof = 1;
    return 0;
  }
  if (sh->attach && sh->raw) {
    /* The detach key: what came before it still goes. */
    const char *key = memchr(buf, SH_DETACH_KEY, (size_t)n);
    if (key != NULL) {
      if (!sh->in_gone && key > buf && fr_buf_append(&sh->pending, buf, (size_t)(key - buf)) != 0)
        return -ENOMEM;
      return SH_DETACHED;
    }
  }
  if (sh->in_gone)
    return 0;
  return fr_buf_append(&sh->pending, buf, (size_t)n);
}

/* The local window's size changed: the remote's follows. */
static void follow_size(struct shell *sh) {
  unsigned short rows, cols;

  term_size(&rows, &cols);
  if (sh->pty && (rows != sh->rows || cols != sh->cols)) {
    sh->rows = rows;
    sh->cols = cols;
    sh->rs_wanted = 1;
  }
}

/* Returns 0, or the signal that tells fedctl to quit. */
static int read_signals(struct shell *sh) {
  unsigned char b[64];
  ssize_t n, i;
  int quit = 0;

  while ((n = read(sh->sig_pipe[0], b, sizeof(b))) > 0) {
    for (i = 0; i < n; i++) {
      if (b[i] == SIGWINCH) {
        follow_size(sh);
      } else if (b[i] == SIGTSTP) {
        /* Stopped from outside (in raw mode Ctrl-Z is the remote's):
         * give the terminal back while stopped, take it again after. */
        int was_raw = sh->raw;
        raw_off(sh);
        raise(SIGSTOP);
        if (was_raw && raw_on(sh) != 0 && quit == 0)
          quit = SIGTSTP;
        follow_size(sh);   /* the window may have changed meanwhile */
      } else if (quit == 0) {
        quit = b[i];
      }
    }
  }
  return quit;
}

/* The session loop: returns when the output ended (0), when a signal says
 * quit (that signal), when the detach key was typed (SH_DETACHED), or on a
 * local error (negative errno). */
static int session_loop(struct shell *sh) {
  struct curl_waitfd fds[2];
  unsigned nfds;
  int running, rc, quit;

  for (;;) {
    if (curl_multi_perform(sh->multi, &running) != CURLM_OK)
      return -ENOMEM;
    drain_messages(sh);
    if (sh->out_ended)
      return 0;
    if ((rc = start_calls(sh)) != 0)
      return rc;
    nfds = 0;
    fds[nfds++] = (struct curl_waitfd){.fd = sh->sig_pipe[0], .events = CURL_WAIT_POLLIN};
    if (!sh->in_eof && sh->pending.len < SH_MAX_PENDING)
      fds[nfds++] = (struct curl_waitfd){.fd = STDIN_FILENO, .events = CURL_WAIT_POLLIN};
    /* The timeout only bounds the wait if curl has nothing sooner. */
    if (curl_multi_poll(sh->multi, fds, nfds, 1000, NULL) != CURLM_OK)
      return -EIO;
    if (fds[0].revents != 0 && (quit = read_signals(sh)) != 0)
      return quit;
    if (nfds > 1 && fds[1].revents != 0 && (rc = read_stdin(sh)) != 0)
      return rc;
  }
}

/* Tells the remote session it lost its terminal; best effort, bounded.
 * When that fails, says how to end it by hand. */
static void hang_up(struct shell *sh) {
  struct fc_resp r;
  struct fr_buf path;
  json_t *b = json_pack("{s:s}", "signal", "SIGHUP");
  const char *code;

  fc_resp_init(&r);
  fr_buf_init(&path);
  if (b != NULL && fc_sandbox_path(&path, sh->id, "/processes/") == 0 &&
      fr_buf_printf(&path, "%" PRId64 "/signal", sh->pid) == 0)
    fc_request(sh->ctx, "POST", path.data, b, SH_HANGUP_TIMEOUT_S, &r);
  code = fc_jstr(json_object_get(r.json, "error"), "code", "");
  if ((r.status < 200 || r.status > 299) && strcmp(code, "process_not_found") != 0)
    fprintf(stderr, "fedctl: the process (pid %" PRId64 ") may still run: fedctl kill %s %" PRId64 "\n", sh->pid,
            sh->id, sh->pid);
  fr_buf_free(&path);
  fc_resp_close(&r);
  json_decref(b);
}

/* Starts the remote process; sets sh->pid. Returns an exit status. */
static int start_process(struct shell *sh, json_t *body) {
  struct fc_resp r;
  struct fr_buf path;
  int rc;

  fc_resp_init(&r);
  fr_buf_init(&path);
  if (fc_sandbox_path(&path, sh->id, "/processes") != 0) {
    rc = fc_oom();
    goto done;
  }
  if ((rc = fc_call(sh->ctx, "POST", path.data, body, FC_CALL_TIMEOUT_S, &r)) != FC_EXIT_OK)
    goto done;
  if (!json_is_integer(json_object_get(r.json, "pid")) || fc_jint(r.json, "pid", 0) <= 0) {
    rc = fc_bad_answer(&r);
    goto done;
  }
  sh->pid = fc_jint(r.json, "pid", 0);
done:
  fr_buf_free(&path);
  fc_resp_close(&r);
  return rc;
}

/* Everything the session needs, made before the remote process starts
 * (or is attached to) so that no failure can leave it without its
 * session. Returns an exit status, the error printed. */
static int session_open(struct shell *sh) {
  if (pipe(sh->sig_pipe) != 0 || fcntl(sh->sig_pipe[0], F_SETFL, O_NONBLOCK) != 0 ||
      fcntl(sh->sig_pipe[1], F_SETFL, O_NONBLOCK) != 0 || fcntl(sh->sig_pipe[0], F_SETFD, FD_CLOEXEC) != 0 ||
      fcntl(sh->sig_pipe[1], F_SETFD, FD_CLOEXEC) != 0) {
    fprintf(stderr, "fedctl: pipe: %s\n", strerror(errno));
    return FC_EXIT_FAIL;
  }
  if ((sh->multi = curl_multi_init()) == NULL || call_init(&sh->out) != 0 || call_init(&sh->in) != 0 ||
      call_init(&sh->rs) != 0)
    return fc_oom();
  sig_fd = sh->sig_pipe[1];
  signals_set(1);
  return FC_EXIT_OK;
}

/* Follows the output of sh->pid with stdin and window size sent along,
 * until it ends or fedctl is told to stop. Returns the exit status: the
 * process's, or 128 + a signal, or FC_EXIT_FAIL; the session's own
 * process is hung up on every way out but its end. */
static int session_run(struct shell *sh) {
  int rc, quit, err;

  if ((err = call_setup(sh, &sh->out, "GET", "/output?follow=1", NULL, NULL, 0)) != 0) {
    rc = fc_oom();
    goto lost;
  }
  fc_sink_attach(&sh->out_sink, sh->out.easy, &sh->out.r, out_feed, &sh->nd);
  /* An idle session sends nothing for hours: keep the connection alive. */
  curl_easy_setopt(sh->out.easy, CURLOPT_TCP_KEEPALIVE, 1L);
  if (call_start(sh, &sh->out) != 0) {
    rc = fc_oom();
    goto lost;
  }
  if (sh->pty && isatty(STDIN_FILENO)) {
    if ((err = raw_on(sh)) != 0) {
      fprintf(stderr, "fedctl: cannot put the terminal in raw mode: %s\n", strerror(-err));
      rc = FC_EXIT_FAIL;
      goto lost;
    }
    /* A process attached to has the size it was given: make it ours. */
    if (sh->attach) {
      term_size(&sh->rows, &sh->cols);
      sh->rs_wanted = 1;
    }
  }

  quit = session_loop(sh);
  raw_off(sh);
  if (quit > 0) {
    rc = quit == SH_DETACHED ? FC_EXIT_OK : 128 + quit;
    goto lost;
  }
  if (quit < 0) {
    fprintf(stderr, "fedctl: %s\n", strerror(-quit));
    rc = FC_EXIT_FAIL;
    goto lost;
  }
  /* The output ended: normally with the process's exit. Otherwise the
   * session is lost (fedctl's stdout closed, the router went away): hang
   * it up rather than leave it waiting for input. */
  if (!sh->out_sink.ok || sh->out_sink.err != 0 || sh->out.r.curl_rc != CURLE_OK) {
    rc = fc_sink_report(sh->ctx, &sh->out_sink, sh->out_sink.err == -EPROTO ? "the router's answer is not NDJSON"
                                                                            : "writing the session's output");
    goto lost;
  }
  if (sh->nd.failed || fc_nd_finish(&sh->nd) != 0 || !sh->nd.ended) {
    if (sh->nd.failed)
      fprintf(stderr, "fedctl: %s: %s\n", sh->nd.err_code, sh->nd.err_msg);
    else
      fprintf(stderr, "fedctl: the session's output ended before the process did\n");
    rc = FC_EXIT_FAIL;
    goto lost;
  }
  rc = sh->nd.timed_out ? FC_EXIT_TIMEDOUT : (int)(sh->nd.exit_code & 0xff);
  if (rc == 0 && sh->nd.exit_code != 0)
    rc = 1;
  return rc;

lost:
  raw_off(sh);
  if (!sh->attach) {
    hang_up(sh);
  } else {
    /* Not ours to end: say where it is, unless the router refused the
     * attach (no such process, no agent: nothing was attached to). */
    long status = 0;
    if (sh->out.easy != NULL)
      curl_easy_getinfo(sh->out.easy, CURLINFO_RESPONSE_CODE, &status);
    if (status == 0 || (status >= 200 && status <= 299))
      fprintf(stderr, "fedctl: detached; process %" PRId64 " still runs (fedctl proc attach %s %" PRId64
              ", fedctl kill %s %" PRId64 ")\n", sh->pid, sh->id, sh->pid, sh->id, sh->pid);
  }
  return rc;
}

static void session_close(struct shell *sh) {
  raw_off(sh);
  if (sig_fd >= 0) {
    signals_set(0);
    sig_fd = -1;
  }
  call_close(sh, &sh->out);
  call_close(sh, &sh->in);
  call_close(sh, &sh->rs);
  if (sh->multi != NULL)
    curl_multi_cleanup(sh->multi);
  if (sh->sig_pipe[0] >= 0)
    close(sh->sig_pipe[0]);
  if (sh->sig_pipe[1] >= 0)
    close(sh->sig_pipe[1]);
  fc_nd_close(&sh->nd);
  fr_buf_free(&sh->pending);
}

static void session_init(struct shell *sh, struct fc_ctx *ctx) {
  memset(sh, 0, sizeof(*sh));
  sh->ctx = ctx;
  sh->sig_pipe[0] = sh->sig_pipe[1] = -1;
  fr_buf_init(&sh->pending);
  fc_resp_init(&sh->out.r);
  fc_resp_init(&sh->in.r);
  fc_resp_init(&sh->rs.r);
  fc_nd_init(&sh->nd, out_write, NULL);
}

int fc_cmd_shell(struct fc_ctx *ctx, int argc, char **argv) {
  struct shell sh;
  struct fc_args a;
  struct fc_run run;
  json_t *v;
  const char *val, *term;
  int opt, rc = FC_EXIT_USAGE, want_pty = -1;

  session_init(&sh, ctx);
  if (fc_run_init(&run, "shell", shell_usage) != 0) {
    rc = fc_oom();
    goto done;
  }
  fc_args_init(&a, ctx, "shell", shell_opts, argc, argv);
  while ((opt = fc_run_next(&run, &a, &val)) > 0) {
    switch (opt) {
    case S_TTY:
      want_pty = 1;
      break;
    case S_NO_TTY:
      want_pty = 0;
      break;
    }
  }
  if (opt == FC_ARG_HELP || opt == FC_ARG_ERR) {
    rc = opt == FC_ARG_HELP ? FC_EXIT_OK : FC_EXIT_USAGE;
    goto done;
  }
  sh.pty = want_pty >= 0 ? want_pty : isatty(STDIN_FILENO);
  term = getenv("TERM");
  if (sh.pty && term != NULL && *term != '\0' && json_object_get(run.env, "TERM") == NULL &&
      (v = json_string(term)) != NULL)
    json_object_set_new(run.env, "TERM", v);
  if (fc_run_finish(&run, "/bin/sh") != FC_EXIT_OK)
    goto done;
  sh.id = run.id;
  json_object_set_new(run.body, "tag", json_string("shell"));
  if (sh.pty) {
    term_size(&sh.rows, &sh.cols);
    json_object_set_new(run.body, "pty", json_pack("{s:i,s:i}", "cols", (int)sh.cols, "rows", (int)sh.rows));
  } else {
    json_object_set_new(run.body, "stdin", json_true());
  }
  if ((rc = session_open(&sh)) != FC_EXIT_OK || (rc = start_process(&sh, run.body)) != FC_EXIT_OK)
    goto done;
  rc = session_run(&sh);
done:
  session_close(&sh);
  fc_run_close(&run);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* proc attach                                                             */

static const char attach_usage[] =
    "usage: fedctl proc attach ID PID [-t]\n"
    "\n"
    "Attaches to process PID of sandbox ID (started with `fedctl proc start`):\n"
    "writes its output as `proc logs -f` does (what the agent kept, then as it\n"
    "comes) and sends what you type to its stdin. Exits with its exit status\n"
    "when it ends. Leaving never stops it: Ctrl-C (or any signal that ends\n"
    "fedctl) detaches, exit 128 + the signal. The end of fedctl's stdin is not\n"
    "passed on: `fedctl proc stdin --close` closes the process's stdin.\n"
    "A process started without -i or --pty has no stdin: its output is still\n"
    "followed, and fedctl says so when you type.\n"
    "\n"
    "  -t, --tty          for a process on a PTY: put your terminal in raw mode,\n"
    "                     so every key (Ctrl-C too) goes to it, and give it your\n"
    "                     window size; Ctrl-] detaches (exit 0)\n";

enum { AT_TTY = 1 };

static const struct fc_opt attach_opts[] = {{"tty", 't', 0, AT_TTY}, {NULL, 0, 0, 0}};

int fc_proc_attach(struct fc_ctx *ctx, int argc, char **argv) {
  struct shell sh;
  struct fc_args a;
  const char *val, *pid_s = NULL;
  int opt, rc;

  session_init(&sh, ctx);
  sh.attach = 1;
  fc_args_init(&a, ctx, "proc attach", attach_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    switch (opt) {
    case FC_ARG_HELP:
      fputs(attach_usage, stdout);
      return FC_EXIT_OK;
    case FC_ARG_ERR:
      return FC_EXIT_USAGE;
    case AT_TTY:
      sh.pty = 1;
      break;
    case FC_ARG_POS:
      if (sh.id == NULL)
        sh.id = val;
      else if (pid_s == NULL)
        pid_s = val;
      else
        return fc_usage_error("proc attach", "unexpected argument '%s'", val);
      break;
    }
  }
  if (sh.id == NULL || pid_s == NULL)
    return fc_usage_error("proc attach", "give the sandbox ID and the PID (fedctl proc attach ID PID)");
  if (fc_check_id("proc attach", sh.id) != 0 || fc_parse_int("proc attach", "PID", pid_s, 1, INT32_MAX, &sh.pid) != 0)
    return FC_EXIT_USAGE;
  if (fc_ctx_init(ctx) != 0)
    return FC_EXIT_USAGE;
  if ((rc = session_open(&sh)) == FC_EXIT_OK)
    rc = session_run(&sh);
  session_close(&sh);
  return rc;
}
