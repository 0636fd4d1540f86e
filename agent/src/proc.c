/* proc.c — processes the agent starts: spawn, output ring, streams, kill.
 *
 * Each process runs in its own session (setsid), so its process group is
 * its pid and a kill reaches every process of the group. Each also carries
 * FR_AGENT_PROC=<agent pid>-<nonce>-<id> in its environment, inherited by
 * everything it starts; a kill (timeout, SIGKILL, shutdown) also scans /proc
 * for processes carrying that value, which catches children that left the
 * group with setsid. The limit: a process that rewrites its environment
 * area or is exec'd with a fresh environment (env -i) escapes the scan.
 *
 * Output of stdout and stderr (or the pty) goes into one ring of chunks
 * with a byte offset over both streams. A stream (Start or Connect) holds a
 * cursor into it. The ring keeps at most max_buffer bytes per process (and
 * max_total over all): past that, the oldest chunk is dropped if no attached
 * stream still needs it, else the process's pipes stop being read until the
 * stream catches up (the writer then blocks on its full pipe: backpressure,
 * not memory). Dropped bytes are counted and reported on attach.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"

#define READ_CHUNK 65536
#define EVENT_MAX 32768          /* raw bytes per data event */
#define CHUNK_GROW_MAX 32768     /* merge small writes up to this size */
#define STDIN_MAX (8 * 1024 * 1024)
#define DONE_KEEP_MS (10 * 60 * 1000)
#define DONE_MAX 256

static void pipe_cb(struct agent *a, struct io *io, uint32_t events);
static void stdin_cb(struct agent *a, struct io *io, uint32_t events);
static void proc_free(struct proc *p);

static void set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0)
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void set_cloexec(int fd) {
  int fl = fcntl(fd, F_GETFD);
  if (fl >= 0)
    fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
}

static uint64_t ring_start(const struct proc *p) {
  return p->head ? p->head->off : p->out_end;
}

static bool over_bound(const struct proc *p) {
  return p->buffered >= p->a->max_buffer || p->a->buffered_total >= p->a->max_total;
}

/* True when an attached stream has not yet sent all of the oldest chunk. */
static bool lagging(const struct proc *p) {
  if (p->head == NULL)
    return false;
  for (struct sub *s = p->subs; s; s = s->next)
    if (!s->end_sent && s->cursor < p->head->off + p->head->len)
      return true;
  return false;
}

static void drop_head(struct proc *p) {
  struct chunk *ch = p->head;
  p->head = ch->next;
  if (p->head == NULL)
    p->tail = NULL;
  size_t sz = ch->cap + sizeof(*ch);
  p->buffered -= sz;
  p->a->buffered_total -= sz;
  p->dropped = ch->off + ch->len;
  free(ch);
}

static void trim(struct proc *p) {
  while (p->head && p->head != p->tail && over_bound(p) && !lagging(p))
    drop_head(p);
}

/* Chunks are at most a quarter of the bound (and CHUNK_GROW_MAX), so the
 * ring can drop in steps finer than the bound itself. */
static size_t chunk_max(const struct proc *p) {
  size_t m = p->a->max_buffer / 4 < CHUNK_GROW_MAX ? p->a->max_buffer / 4 : CHUNK_GROW_MAX;
  return m > 0 ? m : 1;
}

static int append_piece(struct proc *p, uint8_t kind, const char *d, size_t n, size_t grow_max) {
  struct chunk *t = p->tail;
  /* Small writes merge into the last chunk up to grow_max. */
  if (t && t->kind == kind && t->len + n <= t->cap) {
    memcpy(t->data + t->len, d, n);
    t->len += n;
  } else if (t && t->kind == kind && t->len + n <= grow_max) {
    size_t cap = t->cap * 2;
    if (cap < t->len + n)
      cap = t->len + n;
    if (cap > grow_max)
      cap = grow_max;
    struct chunk *nt = realloc(t, sizeof(*t) + cap);
    if (nt == NULL)
      return -ENOMEM;
    /* fix the link from the previous chunk */
    if (p->head == t) {
      p->head = nt;
    } else {
      struct chunk *q = p->head;
      while (q->next != t)
        q = q->next;
      q->next = nt;
    }
    p->buffered += cap - nt->cap;
    p->a->buffered_total += cap - nt->cap;
    nt->cap = cap;
    p->tail = t = nt;
    memcpy(t->data + t->len, d, n);
    t->len += n;
  } else {
    size_t cap = n < 256 ? 256 : n;
    struct chunk *ch = malloc(sizeof(*ch) + cap);
    if (ch == NULL)
      return -ENOMEM;
    ch->next = NULL;
    ch->off = p->out_end;
    ch->kind = kind;
    ch->len = n;
    ch->cap = cap;
    memcpy(ch->data, d, n);
    if (p->tail)
      p->tail->next = ch;
    else
      p->head = ch;
    p->tail = ch;
    p->buffered += cap + sizeof(*ch);
    p->a->buffered_total += cap + sizeof(*ch);
  }
  p->out_end += n;
  return 0;
}

/* Appends a read of <n> bytes as pieces of at most chunk_max(): one read
 * larger than the bound (a burst the pipe held while the agent was busy)
 * must not become one chunk the ring can only keep whole. */
static int append_output(struct proc *p, uint8_t kind, const char *d, size_t n) {
  size_t grow_max = chunk_max(p);
  int rc = 0;

  while (n > 0 && rc == 0) {
    size_t k = n < grow_max ? n : grow_max;
    rc = append_piece(p, kind, d, k, grow_max);
    d += k;
    n -= k;
    trim(p);
  }
  return rc;
}

static void notify_subs(struct proc *p) {
  struct sub *s = p->subs;
  while (s) {
    struct sub *next = s->next;
    conn_service(s->c); /* may detach s (peer gone): next is read first */
    s = next;
  }
}

static void pipe_close(struct agent *a, struct pipe_io *pi) {
  if (pi->io.fd < 0)
    return;
  io_stop(a, &pi->io);
  close(pi->io.fd);
  pi->io.fd = -1;
  pi->eof = true;
}

/* Reads once (or until EAGAIN when <drain>). Returns bytes read. */
static size_t pipe_read(struct proc *p, struct pipe_io *pi, bool drain) {
  char tmp[READ_CHUNK];
  size_t total = 0;
  while (pi->io.fd >= 0) {
    ssize_t n = read(pi->io.fd, tmp, sizeof(tmp));
    if (n > 0) {
      if (append_output(p, pi->kind, tmp, (size_t)n) != 0)
        log_msg("pid %d: out of memory, output dropped", (int)p->pid);
      total += (size_t)n;
      if (!drain)
        break;
      /* a grandchild holding the pipe may write forever: bound the drain */
      if (total > 4 * 1024 * 1024)
        break;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      break;
    pipe_close(p->a, pi); /* EOF, or EIO on a pty whose slave closed */
  }
  return total;
}

static void pause_reading(struct proc *p) {
  if (p->paused)
    return;
  p->paused = true;
  io_stop(p->a, &p->out.io);
  io_stop(p->a, &p->err.io);
}

static void maybe_resume(struct proc *p) {
  if (!p->paused || p->ended || (over_bound(p) && lagging(p)))
    return;
  p->paused = false;
  trim(p);
  if (p->out.io.fd >= 0)
    io_start(p->a, &p->out.io, EPOLLIN);
  if (p->err.io.fd >= 0)
    io_start(p->a, &p->err.io, EPOLLIN);
}

static void pipe_cb(struct agent *a, struct io *io, uint32_t events) {
  struct pipe_io *pi = container_of(io, struct pipe_io, io);
  struct proc *p = pi->p;
  (void)a;
  (void)events;
  if (over_bound(p) && lagging(p)) {
    pause_reading(p);
    return;
  }
  if (pipe_read(p, pi, false) > 0 || pi->eof)
    notify_subs(p);
}

/* ---- spawn ---- */

static const char *env_get(char **envp, const char *key) {
  size_t kl = strlen(key);
  for (char **e = envp; e && *e; e++)
    if (strncmp(*e, key, kl) == 0 && (*e)[kl] == '=')
      return *e + kl + 1;
  return NULL;
}

/* PATH search with the process's own PATH, done before fork. */
static int resolve(const char *cmd, char **envp, char *out, size_t cap) {
  if (strchr(cmd, '/')) {
    if ((size_t)snprintf(out, cap, "%s", cmd) >= cap)
      return -ENAMETOOLONG;
    return 0;
  }
  const char *path = env_get(envp, "PATH");
  if (path == NULL)
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  int err = -ENOENT;
  while (*path) {
    const char *colon = strchr(path, ':');
    size_t dl = colon ? (size_t)(colon - path) : strlen(path);
    if (dl > 0 && (size_t)snprintf(out, cap, "%.*s/%s", (int)dl, path, cmd) < cap) {
      struct stat st;
      if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) {
        if (access(out, X_OK) == 0)
          return 0;
        err = -EACCES;
      }
    }
    path += dl;
    if (*path == ':')
      path++;
  }
  return err;
}

int proc_start(struct agent *a, const struct start_opts *o, struct proc **out,
               char *errbuf, size_t errlen) {
  char exe[4096];
  int rc = resolve(o->cmd, o->envp, exe, sizeof(exe));
  if (rc != 0) {
    snprintf(errbuf, errlen, "%s: %s", o->cmd, strerror(-rc));
    return rc;
  }
  struct proc *p = calloc(1, sizeof(*p));
  if (p == NULL)
    return -ENOMEM;
  p->a = a;
  p->id = ++a->next_proc_id;
  p->out.io.fd = p->err.io.fd = p->in.fd = -1;
  p->out.p = p->err.p = p;
  p->out.kind = o->pty ? 3 : 1;
  p->err.kind = 2;
  p->pty = o->pty;
  snprintf(p->marker, sizeof(p->marker), "%d-%s-%llu", (int)getpid(), a->nonce,
           (unsigned long long)p->id);
  int in_fds[2] = {-1, -1}, out_fds[2] = {-1, -1}, err_fds[2] = {-1, -1};
  int errpipe[2] = {-1, -1};
  int master = -1, slave = -1;
  size_t nenv = 0;
  while (o->envp[nenv])
    nenv++;
  char **envp = calloc(nenv + 2, sizeof(char *));
  char markenv[96];
  if (envp == NULL) {
    free(p);
    return -ENOMEM;
  }
  memcpy(envp, o->envp, nenv * sizeof(char *));
  snprintf(markenv, sizeof(markenv), "FR_AGENT_PROC=%s", p->marker);
  envp[nenv] = markenv;

  if (o->pty) {
    struct winsize ws = {.ws_row = o->rows ? o->rows : 24, .ws_col = o->cols ? o->cols : 80};
    if (openpty(&master, &slave, NULL, NULL, &ws) != 0) {
      rc = -errno;
      goto fail;
    }
    set_cloexec(master);
    set_cloexec(slave);
  } else {
    if (pipe2(out_fds, O_CLOEXEC) != 0 || pipe2(err_fds, O_CLOEXEC) != 0 ||
        (o->stdin_open && pipe2(in_fds, O_CLOEXEC) != 0)) {
      rc = -errno;
      goto fail;
    }
  }
  if (pipe2(errpipe, O_CLOEXEC) != 0) {
    rc = -errno;
    goto fail;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    rc = -errno;
    goto fail;
  }
  if (pid == 0) {
    /* child: only async-signal-safe calls from here to exec */
    int e;
    setsid();
    /* If the agent is SIGKILLed (kubesim deleting a pod), its commands go
     * with it; their own children are caught by the marker scan of the
     * next agent's shutdown, or die with the pod's namespace. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
    if (o->pty) {
      ioctl(slave, TIOCSCTTY, 0);
      dup2(slave, 0);
      dup2(slave, 1);
      dup2(slave, 2);
    } else {
      if (o->stdin_open) {
        dup2(in_fds[0], 0);
      } else {
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0 && nul != 0) {
          dup2(nul, 0);
          close(nul);
        }
      }
      dup2(out_fds[1], 1);
      dup2(err_fds[1], 2);
    }
    if (o->cwd && chdir(o->cwd) != 0)
      goto child_fail;
    setrlimit(RLIMIT_NOFILE, &a->nofile);
    for (int s = 1; s < 32; s++)
      signal(s, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(exe, o->argv, envp);
  child_fail:
    e = errno;
    if (write(errpipe[1], &e, sizeof(e)) < 0)
      _exit(127);
    _exit(127);
  }
  close(errpipe[1]);
  errpipe[1] = -1;
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(errpipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  close(errpipe[0]);
  errpipe[0] = -1;
  if (n == (ssize_t)sizeof(child_errno)) {
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
      ;
    rc = -child_errno;
    /* the child reports a failed chdir and a failed exec the same way:
     * tell them apart for the message */
    struct stat cst;
    if (o->cwd && (stat(o->cwd, &cst) != 0 || !S_ISDIR(cst.st_mode)))
      snprintf(errbuf, errlen, "cwd %.300s: %s", o->cwd, strerror(child_errno));
    else
      snprintf(errbuf, errlen, "exec %.300s: %s", o->cmd, strerror(child_errno));
    goto fail;
  }
  free(envp);
  envp = NULL;
  p->pid = pid;
  if (o->pty) {
    close(slave);
    set_nonblock(master);
    p->out.io.fd = master;
    p->in.fd = dup(master); /* epoll keys on fds: a second fd for writes */
    if (p->in.fd >= 0)
      set_cloexec(p->in.fd);
  } else {
    close(out_fds[1]);
    close(err_fds[1]);
    set_nonblock(out_fds[0]);
    set_nonblock(err_fds[0]);
    p->out.io.fd = out_fds[0];
    p->err.io.fd = err_fds[0];
    if (o->stdin_open) {
      close(in_fds[0]);
      set_nonblock(in_fds[1]);
      p->in.fd = in_fds[1];
    }
  }
  p->out.io.cb = p->err.io.cb = pipe_cb;
  p->in.cb = stdin_cb;
  if (p->out.io.fd >= 0)
    io_start(a, &p->out.io, EPOLLIN);
  if (p->err.io.fd >= 0)
    io_start(a, &p->err.io, EPOLLIN);
  p->stdin_closed = p->in.fd < 0;
  p->tag = o->tag ? strdup(o->tag) : NULL;
  p->config = json_incref(o->config);
  /* A finished process with this pid is forgotten: pids are the key. */
  for (struct proc *q = a->procs; q;) {
    struct proc *next = q->next;
    if (q->ended && q->pid == pid && q->subs == NULL)
      proc_free(q);
    q = next;
  }
  p->next = a->procs;
  if (a->procs)
    a->procs->prev = p;
  a->procs = p;
  a->nprocs_running++;
  *out = p;
  return 0;

fail:
  free(envp);
  for (int i = 0; i < 2; i++) {
    if (in_fds[i] >= 0) close(in_fds[i]);
    if (out_fds[i] >= 0) close(out_fds[i]);
    if (err_fds[i] >= 0) close(err_fds[i]);
    if (errpipe[i] >= 0) close(errpipe[i]);
  }
  if (master >= 0) close(master);
  if (slave >= 0) close(slave);
  if (errbuf[0] == '\0')
    snprintf(errbuf, errlen, "start %s: %s", o->cmd, strerror(-rc));
  free(p);
  return rc;
}

struct proc *proc_find_pid(struct agent *a, pid_t pid) {
  struct proc *done = NULL;
  for (struct proc *p = a->procs; p; p = p->next) {
    if (p->pid != pid)
      continue;
    if (!p->ended)
      return p;
    if (done == NULL)
      done = p;
  }
  return done;
}

struct proc *proc_find_tag(struct agent *a, const char *tag) {
  struct proc *done = NULL;
  for (struct proc *p = a->procs; p; p = p->next) {
    if (p->tag == NULL || strcmp(p->tag, tag) != 0)
      continue;
    if (!p->ended)
      return p;
    if (done == NULL)
      done = p;
  }
  return done;
}

/* ---- streams ---- */

static int sub_pump(struct producer *pr);
static void sub_detach(struct producer *pr, bool peer_gone);
static void sub_free(struct producer *pr);
static const struct producer_ops sub_ops = {sub_pump, sub_detach, sub_free};

struct sub *proc_attach(struct proc *p, struct conn *c, uint64_t from, bool follow) {
  struct sub *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return NULL;
  s->p = p;
  s->c = c;
  s->until = follow ? UINT64_MAX : p->out_end;
  s->end_at_attach = p->ended;
  uint64_t start = ring_start(p);
  s->cursor = from == UINT64_MAX ? p->out_end : from < start ? start : from;
  if (s->cursor > p->out_end)
    s->cursor = p->out_end;
  s->next = p->subs;
  p->subs = s;
  conn_set_producer(c, &s->prod, &sub_ops);
  timer_stop(p->a, &p->expire);
  return s;
}

static void expire_cb(struct agent *a, struct timer *t) {
  struct proc *p = container_of(t, struct proc, expire);
  (void)a;
  if (p->subs == NULL)
    proc_free(p);
}

void proc_maybe_free(struct proc *p) {
  if (!p->ended || p->subs)
    return;
  timer_start(p->a, &p->expire, DONE_KEEP_MS, expire_cb);
}

/* The stream's connection is done with it (its response ended, or the
 * client left: killOnDisconnect). */
static void sub_detach(struct producer *pr, bool peer_gone) {
  struct sub *s = container_of(pr, struct sub, prod);
  struct proc *p = s->p;
  for (struct sub **pp = &p->subs; *pp; pp = &(*pp)->next) {
    if (*pp == s) {
      *pp = s->next;
      break;
    }
  }
  s->c = NULL;
  bool kill_it = peer_gone && s->kill_on_disconnect && !p->ended;
  if (kill_it) {
    snprintf(p->end_error, sizeof(p->end_error), "killed: client disconnected");
    proc_kill_all(p);
  }
  /* What only this stream still needed can go now, also when the output
   * all came in while it was attached (nothing appended later would trim). */
  trim(p);
  maybe_resume(p);
  proc_maybe_free(p);
}

static void sub_free(struct producer *pr) {
  free(container_of(pr, struct sub, prod));
}

static int emit_data(struct sub *s, uint8_t kind, const char *d, size_t n) {
  char *b64 = malloc(b64_encoded_len(n) + 1);
  if (b64 == NULL)
    return -ENOMEM;
  b64_encode((const unsigned char *)d, n, b64);
  const char *key = kind == 1 ? "stdout" : kind == 2 ? "stderr" : "pty";
  json_t *m = json_pack("{s:{s:{s:s}}}", "event", "data", key, b64);
  free(b64);
  return envelope_write(s->c, 0, m);
}

static void exit_desc(const struct proc *p, int *code, bool *exited, char *status,
                      size_t cap) {
  static const struct { int sig; const char *name; } names[] = {
      {SIGHUP, "hangup"}, {SIGINT, "interrupt"}, {SIGQUIT, "quit"},
      {SIGKILL, "killed"}, {SIGTERM, "terminated"}, {SIGPIPE, "broken pipe"},
      {SIGSEGV, "segmentation fault"}, {SIGABRT, "aborted"},
      {SIGUSR1, "user defined signal 1"}, {SIGUSR2, "user defined signal 2"},
      {SIGALRM, "alarm clock"}, {SIGBUS, "bus error"}, {SIGFPE, "floating point exception"},
  };
  if (WIFEXITED(p->status)) {
    *code = WEXITSTATUS(p->status);
    *exited = true;
    snprintf(status, cap, "exit status %d", *code);
    return;
  }
  /* As Go's os.ProcessState (what envd reports): -1 and "signal: <name>". */
  *code = -1;
  *exited = false;
  int sig = WIFSIGNALED(p->status) ? WTERMSIG(p->status) : 0;
  const char *name = NULL;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (names[i].sig == sig)
      name = names[i].name;
  if (name)
    snprintf(status, cap, "signal: %s", name);
  else
    snprintf(status, cap, "signal: %d", sig);
}

/* The process's end event, {"event":{"end":{...}}}. */
static void end_event(struct sub *s) {
  int code;
  bool exited;
  char status[64];
  exit_desc(s->p, &code, &exited, status, sizeof(status));
  json_t *end = json_pack("{s:i,s:b,s:s}", "exitCode", code, "exited", exited, "status", status);
  if (end && s->p->end_error[0])
    json_object_set_new(end, "error", json_string(s->p->end_error));
  envelope_write(s->c, 0, json_pack("{s:{s:o}}", "event", "end", end));
}

/* Sends what the stream may take now; 1 if anything was produced. */
static int sub_pump(struct producer *pr) {
  struct sub *s = container_of(pr, struct sub, prod);
  struct proc *p = s->p;
  struct conn *c = s->c;
  int produced = 0;
  if (s->end_sent || c->dead)
    return 0;
  while (buf_size(&c->out) < HTTP_LOW_WATER) {
    uint64_t end = s->until < p->out_end ? s->until : p->out_end;
    if (s->cursor < end) {
      uint64_t start = ring_start(p);
      if (s->cursor < start)
        s->cursor = start; /* dropped while we lagged (total bound) */
      struct chunk *ch = p->head;
      while (ch && ch->off + ch->len <= s->cursor)
        ch = ch->next;
      if (ch == NULL)
        break;
      size_t at = (size_t)(s->cursor - ch->off);
      size_t n = ch->len - at;
      if (n > EVENT_MAX)
        n = EVENT_MAX;
      if (n > end - s->cursor)
        n = (size_t)(end - s->cursor);
      if (emit_data(s, ch->kind, ch->data + at, n) != 0)
        break;
      s->cursor += n;
      produced = 1;
      continue;
    }
    if (s->until != UINT64_MAX && s->cursor >= end) {
      /* Without follow: what was kept at attach, and the end only if it
       * had ended then (a `yes` writing on meanwhile is not waited for). */
      if (s->end_at_attach)
        end_event(s);
      envelope_write(c, 2, json_object());
      http_stream_end(c);
      s->end_sent = true;
      produced = 1;
      break;
    }
    if (p->ended) {
      end_event(s);
      envelope_write(c, 2, json_object());
      http_stream_end(c);
      s->end_sent = true;
      produced = 1;
    }
    break;
  }
  /* What every stream has now sent may be over the bound: the ring drops
   * it here too, not only when more output comes (which may be never). */
  if (produced)
    trim(p);
  maybe_resume(p);
  return produced;
}

/* ---- signals and kills ---- */

/* Kills every process whose environment has FR_AGENT_PROC=<marker> (or,
 * with <prefix>, a value starting with <marker>). Returns how many. */
static int scan_marker(const char *marker, bool prefix) {
  char needle[96];
  int nl = snprintf(needle, sizeof(needle), "FR_AGENT_PROC=%s", marker);
  DIR *d = opendir("/proc");
  if (d == NULL)
    return 0;
  int killed = 0;
  const size_t envcap = 131072; /* an environ larger than this is cut */
  char *env = malloc(envcap);
  if (env == NULL) {
    closedir(d);
    return 0;
  }
  pid_t self = getpid();
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    char *end;
    long pid = strtol(de->d_name, &end, 10);
    if (*end != '\0' || pid <= 1 || pid == self)
      continue;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/environ", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      continue;
    ssize_t n = read(fd, env, envcap);
    close(fd);
    if (n <= 0)
      continue;
    /* match a whole NUL-terminated entry */
    for (ssize_t i = 0; i + nl <= n; i++) {
      if ((i == 0 || env[i - 1] == '\0') && memcmp(env + i, needle, (size_t)nl) == 0 &&
          (prefix || i + nl == n || env[i + nl] == '\0')) {
        if (kill((pid_t)pid, SIGKILL) == 0)
          killed++;
        break;
      }
      /* skip to the next entry */
      const char *z = memchr(env + i, '\0', (size_t)(n - i));
      if (z == NULL)
        break;
      i = z - env;
    }
  }
  closedir(d);
  free(env);
  return killed;
}

void proc_kill_all(struct proc *p) {
  if (!p->ended)
    kill(-p->pid, SIGKILL);
  /* Processes fork while we scan: repeat until a pass finds nothing. */
  for (int pass = 0; pass < 5; pass++)
    if (scan_marker(p->marker, false) == 0)
      break;
}

int proc_signal(struct proc *p, int sig) {
  if (p->ended)
    return -ESRCH;
  if (sig == SIGKILL) {
    proc_kill_all(p);
    return 0;
  }
  if (kill(-p->pid, sig) != 0 && kill(p->pid, sig) != 0)
    return -errno;
  return 0;
}

static void timeout_fire(struct agent *a, struct timer *t) {
  struct proc *p = container_of(t, struct proc, timeout);
  (void)a;
  /* The command ended in time, but what it left running in the
   * background ((sleep 300 &), daemons) dies at its timeout all the same;
   * its answer stays the command's own. */
  if (p->ended) {
    proc_kill_all(p);
    return;
  }
  p->timed_out = true;
  snprintf(p->end_error, sizeof(p->end_error), "%s",
           p->deadline_from_header ? "deadline exceeded: killed at the Connect-Timeout-Ms deadline"
                                   : "timed out: killed after the timeoutMs limit");
  proc_kill_all(p);
}

void proc_set_timeout(struct proc *p, uint64_t ms) {
  timer_start(p->a, &p->timeout, ms, timeout_fire);
}

/* ---- stdin ---- */

static void stdin_close_now(struct proc *p) {
  p->stdin_undelivered += buf_size(&p->in_buf); /* sent to us, never to the process */
  if (p->in.fd >= 0) {
    io_stop(p->a, &p->in);
    close(p->in.fd);
    p->in.fd = -1;
  }
  buf_free(&p->in_buf);
  p->stdin_closed = true;
  p->in_close_pending = false;
}

static int stdin_flush(struct proc *p) {
  while (buf_size(&p->in_buf) > 0) {
    ssize_t n = write(p->in.fd, p->in_buf.p + p->in_buf.off, buf_size(&p->in_buf));
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN)
        break;
      int e = -errno;
      stdin_close_now(p);
      return e;
    }
    buf_consume(&p->in_buf, (size_t)n);
  }
  if (buf_size(&p->in_buf) > 0) {
    io_start(p->a, &p->in, EPOLLOUT);
  } else {
    io_stop(p->a, &p->in);
    if (p->in_close_pending && !p->pty)
      stdin_close_now(p);
  }
  return 0;
}

static void stdin_cb(struct agent *a, struct io *io, uint32_t events) {
  struct proc *p = container_of(io, struct proc, in);
  (void)a;
  (void)events;
  stdin_flush(p);
}

int proc_write_stdin(struct proc *p, const void *data, size_t n) {
  if (p->ended)
    return -ESRCH;
  if (p->in.fd < 0 || p->in_close_pending)
    return -EPIPE;
  if (buf_size(&p->in_buf) + n > STDIN_MAX)
    return -ENOBUFS;
  if (buf_append(&p->in_buf, data, n) != 0)
    return -ENOMEM;
  int rc = stdin_flush(p);
  return rc == -EPIPE ? -ESHUTDOWN : rc; /* it closed its end while we wrote */
}

int proc_close_stdin(struct proc *p) {
  if (p->pty)
    return -ENOTTY;
  /* Closing the stdin of a process that has just exited is done when what
   * it was sent was delivered: a SendInput and CloseStdin racing the exit
   * did what they asked. The process is kept a while after its exit
   * (DONE_KEEP_MS) to answer that. */
  if (p->ended)
    return p->stdin_undelivered ? -ESRCH : 0;
  if (p->in.fd < 0)
    return 0;
  if (buf_size(&p->in_buf) > 0)
    p->in_close_pending = true;
  else
    stdin_close_now(p);
  return 0;
}

int proc_resize(struct proc *p, unsigned short cols, unsigned short rows) {
  if (p->ended)
    return -ESRCH;
  if (!p->pty || p->out.io.fd < 0)
    return -ENOTTY;
  struct winsize ws = {.ws_row = rows, .ws_col = cols};
  /* The kernel sends SIGWINCH to the terminal's foreground group. */
  if (ioctl(p->out.io.fd, TIOCSWINSZ, &ws) != 0)
    return -errno;
  return 0;
}

/* ---- exit and cleanup ---- */

static void proc_on_exit(struct proc *p, int status) {
  struct agent *a = p->a;
  p->status = status;
  /* Whatever the process wrote before it exited is in the pipes now: take
   * it, then stop listening. A backgrounded grandchild holding the pipe
   * does not hold the stream open. */
  pipe_read(p, &p->out, true);
  pipe_read(p, &p->err, true);
  pipe_close(a, &p->out);
  pipe_close(a, &p->err);
  stdin_close_now(p);
  p->paused = false;
  p->ended = true;
  p->ended_at = now_ms();
  /* The timeout stays armed for leftovers (timeout_fire). */
  a->nprocs_running--;
  a->nprocs_done++;
  notify_subs(p);
  proc_maybe_free(p);
  /* Keep a bounded number of finished processes for reattach. */
  while (a->nprocs_done > DONE_MAX) {
    struct proc *oldest = NULL;
    for (struct proc *q = a->procs; q; q = q->next)
      if (q->ended && q->subs == NULL && (oldest == NULL || q->ended_at < oldest->ended_at))
        oldest = q;
    if (oldest == NULL)
      break;
    proc_free(oldest);
  }
}

static void proc_free(struct proc *p) {
  struct agent *a = p->a;
  if (!p->ended)
    return;
  while (p->head)
    drop_head(p);
  timer_stop(a, &p->timeout);
  timer_stop(a, &p->expire);
  buf_free(&p->in_buf);
  free(p->tag);
  json_decref(p->config);
  if (p->prev)
    p->prev->next = p->next;
  else
    a->procs = p->next;
  if (p->next)
    p->next->prev = p->prev;
  a->nprocs_done--;
  free(p);
}

void proc_reap(struct agent *a) {
  for (;;) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid <= 0)
      return;
    if (pid == a->main_pid && !a->main_exited) {
      a->main_exited = true;
      a->main_status = st;
      continue;
    }
    for (struct proc *p = a->procs; p; p = p->next) {
      if (p->pid == pid && !p->ended) {
        proc_on_exit(p, st);
        break;
      }
    }
    /* anything else is an orphan we adopted as subreaper: reaped, done */
  }
}

void proc_shutdown_all(struct agent *a) {
  for (struct proc *p = a->procs; p; p = p->next)
    if (!p->ended)
      kill(-p->pid, SIGKILL);
  /* and everything any command of this agent left behind, also the
   * backgrounded children of commands that ended long ago */
  char prefix[64];
  snprintf(prefix, sizeof(prefix), "%d-%s-", (int)getpid(), a->nonce);
  for (int pass = 0; pass < 5; pass++)
    if (scan_marker(prefix, true) == 0)
      break;
}

void proc_free_all(struct agent *a) {
  while (a->procs) {
    struct proc *p = a->procs;
    while (p->subs)
      conn_close(p->subs->c); /* detaches the stream from <p> */
    if (!p->ended) {
      pipe_close(a, &p->out);
      pipe_close(a, &p->err);
      stdin_close_now(p);
      p->ended = true;
      a->nprocs_running--;
      a->nprocs_done++;
    }
    proc_free(p);
  }
}
