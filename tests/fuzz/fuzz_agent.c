/* fuzz_agent.c - fedrouter-agent's request parsing (agent/src/http.c: the
 * request head, Content-Length and chunked bodies, pipelining, keep-alive;
 * agent/src/rpc.c: routing, auth, /init, Connect envelopes and the JSON
 * of every process.Process request; agent/src/multipart.c: upload bodies)
 * on arbitrary bytes, as the router or code inside the sandbox could send
 * them.
 *
 * The agent is the real one minus what would touch the machine: this file
 * stands in for the entry points rpc.c calls in proc.c, files.c and
 * watch.c (no process is started, no file opened, no directory watched).
 * The transport (http.c) reaches those services only through the producer
 * and body sink interfaces (agent.h), so nothing of theirs is stubbed at
 * link time beyond what rpc.c calls by name. The stand-ins check what they
 * are handed and answer the way the real ones answer a failure:
 *   proc_start          checks the start options rpc.c built (argv, envp,
 *                       cwd) and refuses with not_found
 *   proc_find_*         find nothing (so every selector is "not found")
 *   files_get, fs_rpc,  answer 404 / not_found
 *   watch_*, tar_get,
 *   untar_begin
 *   upload_begin        makes a body sink that counts the bytes (so
 *                       streamed bodies, chunked or not, go through
 *                       http.c's sink path), runs a multipart body through
 *                       the real parser (multipart.c) into a sink that
 *                       checks its calls, and answers 200 with the counts
 *                       at the end
 *
 * One agent per process, set up as main.c does (epoll, a loopback
 * listener), with the access token "fuzz-token" set before every input
 * (an /init in the input may change it; the harness puts it back, with
 * the rest of what /init sets). The init token is "fuzz-token" too (the
 * agent holds its SHA-256, as from FR_AGENT_INIT_SHA256).
 *
 * Input: the bytes of one client connection. The harness writes them,
 * turns the agent's loop (epoll without waiting; the agent's timers are
 * 30 s and more, so none fires) and reads what comes back until nothing
 * moves, then resets the connection.
 *
 * Checked beyond "no crash": the agent answers in HTTP/1.x; an upload
 * that is not chunked gets exactly Content-Length bytes (none without
 * one); the multipart parser opens and ends parts in turn, names a part
 * by a filename from one header line (no CR or LF), hands over no more
 * bytes than the body brought and ends the last part at the closing
 * delimiter; a reset connection is closed and freed with all its timers.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent.h"

#define TOKEN "fuzz-token"
#define QUIET_TURNS 4
#define MAX_TURNS 100000

static struct agent ag;
static int port;

static void check(int cond) {
  if (!cond)
    abort();
}

/* ---- stand-ins for proc.c ---- */

int proc_start(struct agent *a, const struct start_opts *o, struct proc **out, char *err, size_t errlen) {
  size_t i;

  (void)a;
  check(o->cmd != NULL && o->cmd[0] != '\0');
  check(o->argv != NULL && o->argv[0] != NULL && strcmp(o->argv[0], o->cmd) == 0);
  for (i = 1; o->argv[i] != NULL; i++)
    ;
  check(o->envp != NULL);
  for (i = 0; o->envp[i] != NULL; i++)
    check(strchr(o->envp[i], '=') != NULL && o->envp[i][0] != '=');
  check(o->cwd != NULL);
  check(o->config != NULL && json_is_object(o->config));
  *out = NULL;
  snprintf(err, errlen, "%s: not started by the fuzz harness", o->cmd);
  return -ENOENT;
}

struct proc *proc_find_pid(struct agent *a, pid_t pid) {
  (void)a;
  (void)pid;
  return NULL;
}

struct proc *proc_find_tag(struct agent *a, const char *tag) {
  (void)a;
  check(tag != NULL);
  return NULL;
}

/* Never reached: nothing is found or started. */
struct sub *proc_attach(struct proc *p, struct conn *c, uint64_t from, bool follow) {
  (void)p;
  (void)c;
  (void)from;
  (void)follow;
  abort();
}

int proc_signal(struct proc *p, int sig) {
  (void)p;
  (void)sig;
  abort();
}

int proc_write_stdin(struct proc *p, const void *data, size_t n) {
  (void)p;
  (void)data;
  (void)n;
  abort();
}

int proc_close_stdin(struct proc *p) {
  (void)p;
  abort();
}

int proc_resize(struct proc *p, unsigned short cols, unsigned short rows) {
  (void)p;
  (void)cols;
  (void)rows;
  abort();
}

void proc_set_timeout(struct proc *p, uint64_t ms) {
  (void)p;
  (void)ms;
  abort();
}

/* ---- stand-ins for files.c ---- */

struct upload {
  struct body_sink sink;
  uint64_t bytes;     /* body bytes fed */
  bool multipart;
  struct mp_parser mp;
  int in_part;        /* a part is open */
  uint64_t part_bytes;/* bytes handed over in parts */
  unsigned parts;
  bool failed;        /* answered: nothing more may be fed */
};

static int part_begin(void *arg, const char *filename) {
  struct upload *up = arg;

  check(!up->in_part);
  if (filename != NULL)
    check(filename[0] != '\0' && strlen(filename) < MP_NAME_MAX && strpbrk(filename, "\r\n") == NULL);
  up->in_part = 1;
  up->parts++;
  return 0;
}

static int part_data(void *arg, const char *data, size_t n) {
  struct upload *up = arg;

  check(up->in_part && data != NULL && n > 0);
  up->part_bytes += n;
  return 0;
}

static int part_end(void *arg) {
  struct upload *up = arg;

  check(up->in_part);
  up->in_part = 0;
  return 0;
}

static const struct mp_sink sink = {part_begin, part_data, part_end};

void files_get(struct conn *c, const char *path) {
  check(path != NULL);
  http_error(c, 404, "path not found: %s", path);
}

/* Directory archives: the path is what rpc.c checked (absolute, no NUL);
 * answered as the real ones answer a directory that is not there. */
void tar_get(struct conn *c, const char *path, bool gz) {
  (void)gz;
  check(path != NULL && path[0] == '/' && strlen(path) > 0);
  http_error(c, 404, "no such directory: %s", path);
}

int untar_begin(struct conn *c, const char *path, uint64_t max_bytes) {
  (void)max_bytes;
  check(path != NULL && path[0] == '/');
  http_error(c, 400, "not a directory: %s", path);
  return -ENOTDIR;
}

static int upload_feed(struct body_sink *s, const char *data, size_t n);
static void upload_finish(struct body_sink *s);
static void upload_free(struct body_sink *s);
static const struct body_sink_ops upload_ops = {upload_feed, upload_finish, upload_free};

/* As files.c: a multipart body goes through the real parser (multipart.c)
 * into a sink that checks the calls; any other body is counted. */
int upload_begin(struct conn *c, const char *path) {
  struct upload *up = calloc(1, sizeof(*up));

  (void)path;
  check(up != NULL);
  if (strncasecmp(c->req.content_type, "multipart/form-data", 19) == 0) {
    int rc = mp_init(&up->mp, c->req.content_type);
    if (rc != 0) {
      check(rc == -ENOENT || rc == -EINVAL);
      free(up);
      http_error(c, 400, "bad multipart boundary");
      return -EINVAL;
    }
    check(up->mp.dlen >= 5 && up->mp.dlen <= 74 && up->mp.dlen == strlen(up->mp.delim));
    up->multipart = true;
  }
  conn_set_sink(c, &up->sink, &upload_ops);
  check(c->sink == &up->sink && c->body_mode == BODY_SINK);
  return 0;
}

static int upload_feed(struct body_sink *s, const char *data, size_t n) {
  struct upload *up = container_of(s, struct upload, sink);
  const char *err = NULL;
  int rc;

  check(s->c != NULL && s->c->sink == s && data != NULL && n > 0);
  check(!up->failed); /* nothing is fed after the sink answered */
  up->bytes += n;
  if (!up->multipart)
    return 0;
  rc = mp_feed(&up->mp, data, n, &sink, up, &err);
  check(rc == 0 || (rc == -EINVAL && err != NULL));
  /* A part never holds more than the body brought. */
  check(up->part_bytes <= up->bytes);
  check(up->mp.len <= sizeof(up->mp.buf));
  if (rc != 0) {
    up->failed = true;
    http_error(s->c, 400, "%s", err);
    return -1;
  }
  return 0;
}

static void upload_finish(struct body_sink *s) {
  struct upload *up = container_of(s, struct upload, sink);
  struct conn *c = s->c;
  char msg[64];

  check(c->sink == s && !up->failed);
  /* Without a Content-Length (and not chunked) the body is empty. */
  if (!c->req.chunked)
    check(up->bytes == (uint64_t)(c->req.content_length > 0 ? c->req.content_length : 0));
  if (up->multipart && !mp_done(&up->mp)) {
    up->failed = true;
    http_error(c, 400, "multipart body ended before its closing delimiter");
    return;
  }
  /* The closing delimiter ends the last part. */
  check(!up->in_part);
  snprintf(msg, sizeof(msg), "%llu %u", (unsigned long long)up->bytes, up->parts);
  http_respond(c, 200, "text/plain", NULL, msg, strlen(msg));
}

/* From agent_collect(), after the sink's request ended: never while the
 * connection still holds it. */
static void upload_free(struct body_sink *s) {
  check(s->c == NULL || s->c->sink != s);
  free(container_of(s, struct upload, sink));
}

void fs_rpc(struct conn *c, const char *method, json_t *req) {
  check(method != NULL && json_is_object(req));
  rpc_error(c, false, "not_found", "%s: nothing here", method);
}

/* ---- stand-ins for watch.c ---- */

int watch_stream_start(struct conn *c, json_t *req) {
  check(json_is_object(req));
  rpc_error(c, true, "not_found", "no such directory");
  return -1;
}

void watch_rpc(struct conn *c, const char *method, json_t *req) {
  check(method != NULL && json_is_object(req));
  rpc_error(c, false, "not_found", "no such watcher");
}

void watch_held(const struct agent *a, size_t *paused, size_t *kernel_bytes) {
  (void)a;
  *paused = *kernel_bytes = 0;
}

/* ---- main.c's part ---- */

const char *agent_home(struct agent *a) {
  (void)a;
  return "/";
}

static void setup(void) {
  struct sockaddr_in sa;
  socklen_t sl = sizeof(sa);
  int fd, one = 1;

  signal(SIGPIPE, SIG_IGN);
  memset(&ag, 0, sizeof(ag));
  ag.max_buffer = 1 << 20;
  ag.max_total = 64u << 20;
  ag.body_timeout_ms = 60000;
  ag.max_procs = 1024;
  memcpy(ag.nonce, "0123456789abcdef", 17);
  sha256(TOKEN, strlen(TOKEN), ag.init_sha256);
  ag.init_hash_set = true;
  ag.epfd = epoll_create1(EPOLL_CLOEXEC);
  check(ag.epfd >= 0);
  fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  check(fd >= 0);
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  check(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 16) == 0);
  check(getsockname(fd, (struct sockaddr *)&sa, &sl) == 0);
  port = ntohs(sa.sin_port);
  ag.listener = (struct io){.fd = fd, .cb = http_accept};
  check(io_start(&ag, &ag.listener, EPOLLIN) == 0);
}

/* What /init may have changed goes back to a fresh agent's state with
 * the harness's token. */
static void reset_agent(void) {
  for (size_t i = 0; i < ag.init_env_n; i++)
    free(ag.init_env[i]);
  free(ag.init_env);
  ag.init_env = NULL;
  ag.init_env_n = 0;
  json_decref(ag.init_envs);
  ag.init_envs = NULL;
  free(ag.default_workdir);
  ag.default_workdir = NULL;
  free(ag.default_user);
  ag.default_user = NULL;
  free(ag.token);
  ag.token = strdup(TOKEN);
  check(ag.token != NULL);
}

/* One turn of main.c's loop, without waiting and without timers (none is
 * due within a run). Returns the number of events handled. */
static int turn(void) {
  struct epoll_event evs[64];
  int n = epoll_wait(ag.epfd, evs, 64, 0);

  for (int i = 0; i < n; i++) {
    struct io *io = evs[i].data.ptr;
    if (io->fd >= 0)
      io->cb(&ag, io, evs[i].events);
  }
  agent_collect(&ag);
  return n > 0 ? n : 0;
}

static int want_parse(void) {
  for (struct conn *c = ag.conns; c != NULL; c = c->next)
    if (c->want_parse)
      return 1;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char buf[65536];
  static int ready;
  char head[8];
  struct sockaddr_in sa;
  struct linger lg = {1, 0};
  size_t sent = 0, received = 0;
  int fd, quiet = 0, turns = 0, closed = 0, seen = 0;

  if (!ready) {
    setup();
    ready = 1;
  }
  reset_agent();

  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  check(fd >= 0);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    struct pollfd pfd = {fd, POLLOUT, 0};
    check(errno == EINPROGRESS || errno == EINTR);
    while (poll(&pfd, 1, 10000) < 0 && errno == EINTR)
      ;
    check(pfd.revents & POLLOUT);
  }

  for (;;) {
    int moved = turn() > 0;
    ssize_t n;

    if (ag.nconns > 0)
      seen = 1;
    if (sent < size) {
      n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += (size_t)n;
        moved = 1;
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        closed = 1;
      }
    }
    for (;;) {
      n = recv(fd, buf, sizeof(buf), 0);
      if (n > 0) {
        /* Every answer starts with a status line. */
        if (received < sizeof(head)) {
          size_t k = sizeof(head) - received < (size_t)n ? sizeof(head) - received : (size_t)n;
          memcpy(head + received, buf, k);
          if (received + k == sizeof(head))
            check(memcmp(head, "HTTP/1.", 7) == 0);
        }
        received += (size_t)n;
        moved = 1;
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      if (n == 0 || errno != EAGAIN)
        closed = 1;
      break;
    }
    if (closed || ++turns > MAX_TURNS)
      break;
    if (moved || !seen || sent < size || want_parse())
      quiet = 0;
    else if (++quiet >= QUIET_TURNS)
      break;
  }

  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  close(fd);
  for (turns = 0; ag.nconns > 0 || ag.dead_conns != NULL; turns++) {
    turn();
    check(turns < MAX_TURNS); /* the agent kept a reset connection */
  }
  /* Nothing of the connection is left: no timer of it is armed. */
  check(ag.conns == NULL && ag.timers == NULL);
  return 0;
}
