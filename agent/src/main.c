/* main.c — fedrouter-agent: CLI, PID 1 duties, the loop.
 *
 *   fedrouter-agent [--listen ADDR:PORT] [--port-file PATH] [--max-buffer BYTES]
 *                   [--max-total BYTES] [--max-procs N] [--body-timeout MS]
 *                   [--allow-open-init] [-- COMMAND ARGS...]
 *
 * FR_AGENT_INIT_SHA256 in its environment (64 hex digits, put in the pod
 * spec by the router) is the SHA-256 of the token a /init must carry; it
 * is taken out of the environment the commands inherit.
 *
 * With a COMMAND the agent starts it as the container's main process and
 * exits with its status when it ends (as tini does: signals the agent gets
 * are forwarded to the command's process group). Without one it serves
 * until SIGTERM/SIGINT. Either way it is a child subreaper (and, as PID 1,
 * the init of the container): every orphan is reaped.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"

static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH};

static void usage(FILE *f) {
  fprintf(f,
          "usage: fedrouter-agent [--listen ADDR:PORT] [--port-file PATH]\n"
          "                       [--max-buffer BYTES] [--max-total BYTES] [--max-procs N]\n"
          "                       [--body-timeout MS] [--allow-open-init] [-- COMMAND ARGS...]\n"
          "  --listen      address to serve envd's protocol on (default 0.0.0.0:49983)\n"
          "  --port-file   write the bound port there (use with port 0)\n"
          "  --max-buffer  output kept per process for reattach (default 1048576)\n"
          "  --max-total   output kept over all processes (default 64 MiB)\n"
          "  --max-procs   processes running at once (default 1024)\n"
          "  --body-timeout  a request body that stalls this long (ms) is refused\n"
          "                (408) and a partial upload removed (default 60000)\n"
          "  --allow-open-init  without FR_AGENT_INIT_SHA256: the first /init needs no token\n"
          "                (agents of pods made by older routers; default: /init refused)\n");
}

static int parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (*s == '\0' || *s == '-' || errno != 0)
    return -EINVAL;
  if (*end == 'K' || *end == 'k')
    v <<= 10, end++;
  else if (*end == 'M' || *end == 'm')
    v <<= 20, end++;
  if (*end != '\0' || v < 4096 || v > (1ULL << 40))
    return -EINVAL;
  *out = (size_t)v;
  return 0;
}

static int parse_number(const char *s, uint64_t min, uint64_t max, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (*s < '0' || *s > '9' || *end != '\0' || errno != 0 || v < min || v > max)
    return -EINVAL;
  *out = v;
  return 0;
}

static int listen_on(const char *spec, int *port_out) {
  char host[64];
  const char *colon = strrchr(spec, ':');
  if (colon == NULL || (size_t)(colon - spec) >= sizeof(host))
    return -EINVAL;
  memcpy(host, spec, (size_t)(colon - spec));
  host[colon - spec] = '\0';
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end != '\0' || port < 0 || port > 65535 || colon[1] == '\0')
    return -EINVAL;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (host[0] == '\0')
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
  else if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
    return -EINVAL;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 128) != 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  socklen_t sl = sizeof(sa);
  getsockname(fd, (struct sockaddr *)&sa, &sl);
  *port_out = ntohs(sa.sin_port);
  return fd;
}

static int write_port_file(const char *path, int port) {
  char tmp[4096];
  if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
    return -ENAMETOOLONG;
  FILE *f = fopen(tmp, "we");
  if (f == NULL)
    return -errno;
  fprintf(f, "%d\n", port);
  if (fclose(f) != 0)
    return -errno;
  /* rename: a reader never sees a half-written file */
  if (rename(tmp, path) != 0)
    return -errno;
  return 0;
}

/* The home of the agent's user from /etc/passwd (no NSS in a static
 * binary), else $HOME, else "/". */
const char *agent_home(struct agent *a) {
  char *home = a->home;
  size_t cap = sizeof(a->home);
  if (home[0])
    return home;
  snprintf(home, cap, "/");
  const char *env = getenv("HOME");
  if (env && env[0] == '/')
    snprintf(home, cap, "%s", env);
  FILE *f = fopen_regular("/etc/passwd");
  if (f == NULL)
    return home;
  char line[1024];
  unsigned uid = (unsigned)getuid();
  while (fgets(line, sizeof(line), f)) {
    /* name:pw:uid:gid:gecos:home:shell */
    char *field[7] = {0};
    int n = 0;
    char *p = line;
    field[n++] = p;
    while (n < 7 && (p = strchr(p, ':')) != NULL) {
      *p++ = '\0';
      field[n++] = p;
    }
    if (n < 6)
      continue;
    char *end;
    unsigned long v = strtoul(field[2], &end, 10);
    if (*end == '\0' && v == uid && field[5][0] == '/') {
      snprintf(home, cap, "%s", field[5]);
      break;
    }
  }
  fclose(f);
  return home;
}

static void exit_code_from(struct agent *a, int st) {
  a->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
}

static void sig_cb(struct agent *a, struct io *io, uint32_t events) {
  (void)events;
  struct signalfd_siginfo si;
  while (read(io->fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
    int sig = (int)si.ssi_signo;
    if (sig == SIGCHLD) {
      proc_reap(a);
      if (a->main_pid > 0 && a->main_exited && !a->stop) {
        exit_code_from(a, a->main_status);
        a->stop = true;
      }
      continue;
    }
    if (a->main_pid > 0 && !a->main_exited) {
      kill(-a->main_pid, sig); /* tini-like forwarding */
      continue;
    }
    if (sig == SIGTERM || sig == SIGINT || sig == SIGQUIT) {
      log_msg("signal %d: stopping", sig);
      a->exit_code = 0;
      a->stop = true;
    }
  }
}

static pid_t start_main(char **argv, const sigset_t *mask, const struct rlimit *nofile) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL); /* an agent killed outright takes its command along */
  if (getppid() != parent)
    _exit(127);
  setrlimit(RLIMIT_NOFILE, nofile);
  for (int s = 1; s < 32; s++)
    signal(s, SIG_DFL);
  sigprocmask(SIG_UNBLOCK, mask, NULL);
  execvp(argv[0], argv);
  fprintf(stderr, "fedrouter-agent: exec %s: %s\n", argv[0], strerror(errno));
  _exit(127);
}

int main(int argc, char **argv) {
  const char *listen_spec = "0.0.0.0:49983";
  const char *port_file = NULL;
  struct agent a = {.epfd = -1, .max_buffer = 1 << 20, .max_total = 64u << 20, .body_timeout_ms = 60000,
                    .max_procs = 1024};
  char **cmd = NULL;
  uint64_t num;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--") == 0) {
      if (i + 1 < argc)
        cmd = argv + i + 1;
      break;
    }
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(arg, "--version") == 0) {
      printf("fedrouter-agent %s (envd %s)\n", AGENT_VERSION, AGENT_ENVD_VERSION);
      return 0;
    }
    if (strcmp(arg, "--allow-open-init") == 0) {
      a.open_init = true;
      continue;
    }
    if (i + 1 >= argc) {
      usage(stderr);
      return 2;
    }
    if (strcmp(arg, "--listen") == 0) {
      listen_spec = argv[++i];
    } else if (strcmp(arg, "--port-file") == 0) {
      port_file = argv[++i];
    } else if (strcmp(arg, "--max-buffer") == 0) {
      if (parse_size(argv[++i], &a.max_buffer) != 0) {
        fprintf(stderr, "fedrouter-agent: bad --max-buffer %s\n", argv[i]);
        return 2;
      }
    } else if (strcmp(arg, "--body-timeout") == 0) {
      if (parse_number(argv[++i], 100, 3600000, &num) != 0) {
        fprintf(stderr, "fedrouter-agent: bad --body-timeout %s (milliseconds, 100 to 3600000)\n", argv[i]);
        return 2;
      }
      a.body_timeout_ms = num;
    } else if (strcmp(arg, "--max-procs") == 0) {
      if (parse_number(argv[++i], 1, 65536, &num) != 0) {
        fprintf(stderr, "fedrouter-agent: bad --max-procs %s (1 to 65536)\n", argv[i]);
        return 2;
      }
      a.max_procs = (int)num;
    } else if (strcmp(arg, "--max-total") == 0) {
      if (parse_size(argv[++i], &a.max_total) != 0) {
        fprintf(stderr, "fedrouter-agent: bad --max-total %s\n", argv[i]);
        return 2;
      }
    } else {
      usage(stderr);
      return 2;
    }
  }

  const char *init_hash = getenv("FR_AGENT_INIT_SHA256");
  if (init_hash != NULL) {
    if (hex_decode(init_hash, a.init_sha256, sizeof(a.init_sha256)) != 0) {
      fprintf(stderr, "fedrouter-agent: FR_AGENT_INIT_SHA256 is not 64 hex digits\n");
      return 2;
    }
    a.init_hash_set = true;
    unsetenv("FR_AGENT_INIT_SHA256"); /* not the commands' business */
  }
  const char *trace = getenv("FR_AGENT_TRACE");
  a.trace = trace && strcmp(trace, "1") == 0;
  unsigned char rnd[8];
  if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
    memset(rnd, 0x5a, sizeof(rnd));
  for (int i = 0; i < 8; i++)
    snprintf(a.nonce + 2 * i, 3, "%02x", rnd[i]);

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
    sigaddset(&mask, forwarded[i]);
  sigprocmask(SIG_BLOCK, &mask, NULL);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGXFSZ, SIG_IGN); /* a file over RLIMIT_FSIZE: write(2) says EFBIG (413), no death */
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  /* 256 connections and 3 fds per process need more than the usual soft
   * limit of 1024; children get the original limit back. */
  getrlimit(RLIMIT_NOFILE, &a.nofile);
  struct rlimit raised = a.nofile;
  raised.rlim_cur = raised.rlim_max;
  setrlimit(RLIMIT_NOFILE, &raised);

  int port = 0;
  int lfd = listen_on(listen_spec, &port);
  if (lfd < 0) {
    fprintf(stderr, "fedrouter-agent: listen %s: %s\n", listen_spec, strerror(-lfd));
    return 1;
  }
  a.epfd = epoll_create1(EPOLL_CLOEXEC);
  int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (a.epfd < 0 || sfd < 0) {
    fprintf(stderr, "fedrouter-agent: epoll/signalfd: %s\n", strerror(errno));
    return 1;
  }
  a.listener = (struct io){.fd = lfd, .cb = http_accept};
  a.sigio = (struct io){.fd = sfd, .cb = sig_cb};
  io_start(&a, &a.listener, EPOLLIN);
  io_start(&a, &a.sigio, EPOLLIN);
  if (port_file && write_port_file(port_file, port) != 0) {
    fprintf(stderr, "fedrouter-agent: cannot write %s\n", port_file);
    return 1;
  }
  log_msg("serving on %s (port %d), envd %s; /init %s", listen_spec, port, AGENT_ENVD_VERSION,
          a.init_hash_set ? "by the init token of FR_AGENT_INIT_SHA256"
          : a.open_init   ? "open to the first caller (--allow-open-init)"
                          : "refused (no FR_AGENT_INIT_SHA256)");
  if (cmd) {
    a.main_pid = start_main(cmd, &mask, &a.nofile);
    if (a.main_pid < 0) {
      fprintf(stderr, "fedrouter-agent: fork: %s\n", strerror(errno));
      return 1;
    }
  }

  struct epoll_event evs[64];
  while (!a.stop) {
    int timeout = -1;
    uint64_t now = now_ms();
    for (struct timer *t = a.timers; t; t = t->next) {
      int64_t d = t->due > now ? (int64_t)(t->due - now) : 0;
      if (timeout < 0 || d < timeout)
        timeout = d > 3600000 ? 3600000 : (int)d;
    }
    for (struct conn *c = a.conns; c; c = c->next)
      if (c->want_parse)
        timeout = 0;
    int n = epoll_wait(a.epfd, evs, 64, timeout);
    if (n < 0 && errno != EINTR) {
      log_msg("epoll_wait: %s", strerror(errno));
      break;
    }
    for (int i = 0; i < n; i++) {
      struct io *io = evs[i].data.ptr;
      if (io->fd >= 0)
        io->cb(&a, io, evs[i].events);
    }
    /* Timers due now. A callback may stop or start others: restart the
     * scan after each one. */
    now = now_ms();
    for (int fired = 1; fired;) {
      fired = 0;
      for (struct timer *t = a.timers; t; t = t->next) {
        if (t->due <= now) {
          timer_stop(&a, t);
          t->cb(&a, t);
          fired = 1;
          break;
        }
      }
    }
    agent_collect(&a);
    watch_collect(&a);
  }

  /* Stop: everything the agent started dies with it. */
  proc_shutdown_all(&a);
  watch_close_all(&a);
  if (a.main_pid > 0 && !a.main_exited)
    kill(-a.main_pid, SIGKILL);
  while (a.conns)
    conn_close(a.conns);
  agent_collect(&a);
  watch_collect(&a);
  proc_free_all(&a);
  /* reap what we just killed, briefly: a zombie left to our parent is fine */
  for (int i = 0; i < 50; i++) {
    pid_t r = waitpid(-1, NULL, WNOHANG);
    if (r < 0)
      break;
    if (r == 0)
      usleep(10000);
  }
  close(lfd);
  close(sfd);
  close(a.epfd);
  for (size_t i = 0; i < a.init_env_n; i++)
    free(a.init_env[i]);
  free(a.init_env);
  json_decref(a.init_envs);
  free(a.token);
  free(a.default_workdir);
  free(a.default_user);
  return a.exit_code;
}
