/* agent.c - the in-sandbox agent of kubesim's pods and the per-pod process
 * supervisor that makes everything a pod started die with it.
 *
 * A pod whose first container's command[0] is named fedrouter-agent runs,
 * with --agent-binary PATH in process mode, the real agent once Running:
 *   PATH --listen 127.0.0.1:0 --port-file <poddir>/agent.port -- <rest>
 * (<rest>: what follows "--" in the container's command + args) in the
 * pod's working directory with the pod's env. The pod turns Ready when the
 * port file appears (polled); pod port 49983, or any port the container
 * declares, is then proxied to that loopback port. In inproc mode no
 * process runs: agent_inproc_serve() answers the subset loadgen needs.
 *
 * Pods of the code-interpreter image (image name containing
 * "code-interpreter") get that image's main command in place of the one
 * after "--" when kubesim has --code-interpreter PATH: the interpreter
 * server (deploy/code-interpreter/server.py), see image_main_command().
 * Their port 49999 is proxied to the server; with a readiness probe on
 * that port the pod turns Ready only once the server is up too.
 *
 * Supervisor. Every process of a pod (the agent and, when kubesim isolates
 * pods, every exec'd command that forks) lives under one supervisor, this
 * binary re-run as "kubesim __pod-init" (uv_spawn, own session):
 *   - as root (--pod-namespaces, the default for root): the supervisor
 *     unshares a PID and a mount namespace and forks the namespace's init
 *     (PID 1), which makes / private, gives the pod a private /tmp (a bind
 *     of <poddir>/tmp), hides the other pods' directories (a tmpfs over the
 *     --workdir root with only this pod's directory bound back), mounts a
 *     /proc for the new PID namespace, then runs the agent (if any) and
 *     reaps orphans. Exec'd commands enter those namespaces through
 *     "kubesim __pod-enter" (setns, then fork). Killing the supervisor
 *     (SIGKILL) kills init through PR_SET_PDEATHSIG, and the kernel kills
 *     every process of a PID namespace whose init dies: setsid'd
 *     grandchildren included;
 *   - otherwise: no namespaces; the supervisor is a child subreaper that
 *     kills its whole tree on SIGTERM, and kubesim also kills every
 *     process whose environment carries the pod's AGENT_POD_MARK (what
 *     escaped by setsid + reparenting to init), scanning /proc off the loop.
 * The supervisor dies with kubesim (PR_SET_PDEATHSIG), so nothing outlives a
 * killed kubesim either.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fr/buf.h"
#include "fr/log.h"
#include "fr/util.h"
#include "sim.h"

#define LOG_COMP "kubesim.agent"
#define AGENT_NAME "fedrouter-agent"
#define AGENT_PORT 49983
#define PORT_POLL_MS 10
/* The code-interpreter image: its server's port (the E2B SDKs' Jupyter
 * port) and how its image name is recognised. */
#define CI_IMAGE "code-interpreter"
#define CI_PORT 49999
/* Connect requests are small; bounds what the in-process agent buffers. */
#define INPROC_MAX_BODY ((size_t)1 << 20)

struct sim_agent {
  struct sim *sim;
  struct sim_pod *pod;       /* NULL once detached (the pod is going) */
  char uid[40];              /* the pod's, for the mark scan */
  uv_process_t proc;
  int proc_open;
  uv_timer_t poll;
  int poll_open;
  int runs_agent;            /* the supervisor runs the agent (vs. none) */
  int isolated;              /* namespaces */
  int local_port;            /* the agent's port once listening, 0 before */
  char *port_file;
  char *main_port_file;      /* the code interpreter's port file, or NULL */
  int main_port;             /* its port once up (/health answers), 0 before */
  int main_gates_ready;      /* a readiness probe on CI_PORT: Ready waits for it */
  int ready_set;             /* the pod was made Ready */
  char *pid_file;
  char *wrap[5];             /* self __pod-enter <pid_file> -- */
};

/* ---------------------------------------------------------------------- */
/* which pods                                                              */

int agent_pod_runs_agent(json_t *j) {
  json_t *c = json_array_get(json_path(j, "spec.containers"), 0);
  const char *cmd0 = json_string_value(json_array_get(json_object_get(c, "command"), 0));
  const char *base;

  if (cmd0 == NULL)
    return 0;
  base = strrchr(cmd0, '/');
  base = base ? base + 1 : cmd0;
  return strcmp(base, AGENT_NAME) == 0;
}

int agent_wanted(struct sim *s, json_t *j) {
  return s->opts.agent_mode == AGENT_MODE_PROCESS && agent_pod_runs_agent(j);
}

/* ---------------------------------------------------------------------- */
/* supervisor, kubesim side                                                */

static void agent_free(struct sim_agent *a) {
  free(a->main_port_file);
  free(a->port_file);
  free(a->pid_file);
  free(a);
}

static void maybe_free(struct sim_agent *a) {
  if (a->pod == NULL && !a->proc_open && !a->poll_open)
    agent_free(a);
}

static void on_proc_closed(uv_handle_t *h) {
  struct sim_agent *a = h->data;

  a->proc_open = 0;
  maybe_free(a);
}

static void on_poll_closed(uv_handle_t *h) {
  struct sim_agent *a = h->data;

  a->poll_open = 0;
  maybe_free(a);
}

static void stop_poll(struct sim_agent *a) {
  if (a->poll_open && !uv_is_closing((uv_handle_t *)&a->poll))
    uv_close((uv_handle_t *)&a->poll, on_poll_closed);
}

static void on_proc_exit(uv_process_t *proc, int64_t status, int sig) {
  struct sim_agent *a = proc->data;
  struct sim_pod *p = a->pod;
  int code = sig != 0 ? 128 + sig : (int)(status & 0xff);

  FR_DEBUG(LOG_COMP, "pod %s: supervisor %d exited, code %d", a->uid, proc->pid, code);
  uv_close((uv_handle_t *)proc, on_proc_closed);
  stop_poll(a);
  if (p != NULL) {
    /* The pod lost its main process (the agent ended, or the supervisor
     * died): detach, then tell the pod. */
    p->agent = NULL;
    a->pod = NULL;
    if (a->runs_agent && p->obj != NULL)
      pod_main_exited(a->sim, p->obj, code);
  }
}

/* Reads the agent's port file if it is there yet: the port, or 0. Small
 * local files; the stat and read do not wait on anything. */
static int read_port_file(const char *path) {
  char buf[32];
  int64_t v;
  ssize_t n;
  int fd = open(path, O_RDONLY | O_CLOEXEC);

  if (fd < 0)
    return 0;
  n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  buf[strcspn(buf, "\r\n ")] = '\0';
  return fr_parse_int64(buf, 1, 65535, &v) == 0 ? (int)v : 0;
}

static void on_poll(uv_timer_t *t) {
  struct sim_agent *a = t->data;

  if (a->pod == NULL) {
    stop_poll(a);
    return;
  }
  if (a->local_port == 0) {
    a->local_port = read_port_file(a->port_file);
    if (a->local_port == 0)
      return;
    FR_DEBUG(LOG_COMP, "pod %s: agent listens on 127.0.0.1:%d", a->uid, a->local_port);
  }
  if (a->main_port_file != NULL && a->main_port == 0) {
    /* The code interpreter writes its port file at the moment its /health
     * turns 200 (its default kernel is up): when its probe would pass. */
    a->main_port = read_port_file(a->main_port_file);
    if (a->main_port != 0)
      FR_DEBUG(LOG_COMP, "pod %s: code interpreter listens on 127.0.0.1:%d", a->uid, a->main_port);
    else if (a->main_gates_ready)
      return;
  }
  if (a->main_port_file == NULL || a->main_port != 0)
    stop_poll(a);
  if (!a->ready_set && a->pod->obj != NULL) {
    a->ready_set = 1;
    pod_set_ready(a->sim, a->pod->obj);
  }
}

/* Starts the pod's supervisor, running <cmd> (NULL: none). */
static int supervisor_start(struct sim *s, struct sim_obj *o, char **cmd) {
  struct sim_pod *p = o->u.pod;
  struct sim_agent *a;
  uv_process_options_t opts;
  uv_stdio_container_t stdio[3];
  char **argv = NULL, **env = NULL, kpid[24], path[4096];
  json_t *j = NULL;
  size_t n = 0, i;
  int rc;

  if (p->agent != NULL)
    return 0;
  rc = pod_workdir(s, o);
  if (rc != 0)
    return rc;
  a = calloc(1, sizeof(*a));
  if (a == NULL)
    return -ENOMEM;
  a->sim = s;
  snprintf(a->uid, sizeof(a->uid), "%s", o->uid);
  a->isolated = s->opts.pod_namespaces;
  a->runs_agent = cmd != NULL;
  snprintf(path, sizeof(path), "%s/agent.port", p->workdir);
  a->port_file = strdup(path);
  snprintf(path, sizeof(path), "%s/.kubesim-init.pid", p->workdir);
  a->pid_file = strdup(path);
  snprintf(path, sizeof(path), "%s/tmp", p->workdir);
  if (mkdir(path, 01777) == 0 || errno == EEXIST)
    chmod(path, 01777);
  while (cmd != NULL && cmd[n] != NULL)
    n++;
  argv = calloc(n + 8, sizeof(*argv));
  j = obj_json(o);
  env = j ? pod_env(o, json_array_get(json_path(j, "spec.containers"), 0)) : NULL;
  if (a->port_file == NULL || a->pid_file == NULL || argv == NULL || env == NULL) {
    rc = -ENOMEM;
    goto fail;
  }
  snprintf(kpid, sizeof(kpid), "%d", (int)getpid());
  argv[0] = s->self_exe;
  argv[1] = "__pod-init";
  argv[2] = p->workdir;
  argv[3] = (char *)s->opts.workdir;
  argv[4] = a->isolated ? "1" : "0";
  argv[5] = kpid;
  argv[6] = "--";
  for (i = 0; i < n; i++)
    argv[7 + i] = cmd[i];
  memset(stdio, 0, sizeof(stdio));
  stdio[0].flags = UV_IGNORE;
  /* The agent's output is the container's log (logs.c); a supervisor
   * without one writes where kubesim does. */
  stdio[1].flags = UV_INHERIT_FD;
  stdio[1].data.fd = 2;
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = 2;
  if (cmd != NULL && log_capture_init(s, o, stdio) != 0)
    FR_WARN(LOG_COMP, "pod %s/%s: agent output not captured; its log stays empty", o->ns, o->name);
  memset(&opts, 0, sizeof(opts));
  opts.file = s->self_exe;
  opts.args = argv;
  opts.env = env;
  opts.cwd = p->workdir;
  opts.flags = UV_PROCESS_DETACHED;
  opts.stdio_count = 3;
  opts.stdio = stdio;
  opts.exit_cb = on_proc_exit;
  a->proc.data = a;
  rc = uv_spawn(s->loop, &a->proc, &opts);
  a->proc_open = 1;
  if (cmd != NULL)
    log_capture_start(p, rc == 0);
  if (rc != 0) {
    FR_WARN(LOG_COMP, "pod %s/%s: cannot start %s: %s", o->ns, o->name, s->self_exe,
            uv_strerror(rc));
    uv_close((uv_handle_t *)&a->proc, on_proc_closed);
    a->pod = NULL; /* freed by the close callback */
    goto out;
  }
  FR_DEBUG(LOG_COMP, "pod %s/%s: supervisor pid %d%s%s", o->ns, o->name, a->proc.pid,
           a->isolated ? " (own PID and mount namespaces)" : "", cmd ? ", running the agent" : "");
  a->wrap[0] = s->self_exe;
  a->wrap[1] = "__pod-enter";
  a->wrap[2] = a->pid_file;
  a->wrap[3] = "--";
  a->wrap[4] = NULL;
  a->pod = p;
  p->agent = a;
  if (a->runs_agent) {
    uv_timer_init(s->loop, &a->poll);
    a->poll.data = a;
    a->poll_open = 1;
    uv_timer_start(&a->poll, on_poll, PORT_POLL_MS, PORT_POLL_MS);
  }
  goto out;
fail:
  agent_free(a);
out:
  free(argv);
  pod_env_free(env);
  json_decref(j);
  return rc;
}

/* The main command of a pod of the code-interpreter image, as that image's
 * CMD runs it, when kubesim has --code-interpreter PATH: appended to
 * <cmd> at <n> (room for 7 more), in place of what the pod spec put after
 * the agent's "--" (kubesim runs no images: the server is a host file).
 * Returns the new count, or 0 when <c> is no such container.
 *
 * The server listens on a loopback port of its own and writes it to
 * <port_file> once its /health answers 200; pod port CI_PORT is proxied
 * there (agent_target()). Pods that have their own network namespace would
 * run it as the image does, --listen 0.0.0.0:CI_PORT. */
static size_t image_main_command(struct sim *s, json_t *c, char **cmd, size_t n, const char *port_file) {
  const char *image = json_get_str(c, "image");

  if (s->opts.code_interpreter == NULL || image == NULL || strstr(image, CI_IMAGE) == NULL)
    return 0;
  cmd[n++] = "/usr/bin/python3";
  cmd[n++] = (char *)s->opts.code_interpreter;
  cmd[n++] = "--listen";
  cmd[n++] = "127.0.0.1:0";
  cmd[n++] = "--port-file";
  cmd[n++] = (char *)port_file;
  return n;
}

/* 1 when container <c> has a readinessProbe httpGet on <port>. */
static int probes_port(json_t *c, int port) {
  json_t *hg = json_path(json_object_get(c, "readinessProbe"), "httpGet");

  return hg != NULL && json_get_int(hg, "port", 0) == port;
}

int agent_start(struct sim *s, struct sim_obj *o) {
  json_t *j = obj_json(o), *c, *v;
  char **cmd = NULL, pf[4096], mpf[4096];
  size_t n = 0, i, k, main_n;
  int rc, after = 0;
  json_t *lists[2];

  if (j == NULL)
    return -ENOMEM;
  c = json_array_get(json_path(j, "spec.containers"), 0);
  lists[0] = json_object_get(c, "command");
  lists[1] = json_object_get(c, "args");
  cmd = calloc(json_array_size(lists[0]) + json_array_size(lists[1]) + 16, sizeof(*cmd));
  if (cmd == NULL) {
    json_decref(j);
    return -ENOMEM;
  }
  rc = pod_workdir(s, o);
  if (rc != 0)
    goto out;
  snprintf(pf, sizeof(pf), "%s/agent.port", o->u.pod->workdir);
  snprintf(mpf, sizeof(mpf), "%s/code-interpreter.port", o->u.pod->workdir);
  unlink(pf);
  unlink(mpf);
  cmd[n++] = (char *)s->opts.agent_binary;
  cmd[n++] = "--listen";
  cmd[n++] = "127.0.0.1:0";
  cmd[n++] = "--port-file";
  cmd[n++] = pf;
  cmd[n++] = "--";
  main_n = image_main_command(s, c, cmd, n, mpf);
  /* What follows the first "--" of command[1...] + args is the
   * container's own main process; the agent's options before it are
   * kubesim's to set. */
  for (k = 0; k < 2 && main_n == 0; k++) {
    json_array_foreach(lists[k], i, v) {
      const char *arg = json_string_value(v);
      if (k == 0 && i == 0)
        continue;
      if (arg == NULL)
        continue;
      if (!after) {
        after = strcmp(arg, "--") == 0;
        continue;
      }
      cmd[n++] = (char *)arg;
    }
  }
  if (main_n != 0)
    n = main_n;
  else if (!after)
    n--; /* no main command: drop the "--" */
  cmd[n] = NULL;
  rc = supervisor_start(s, o, cmd);
  if (rc == 0 && main_n != 0 && o->u.pod->agent != NULL) {
    struct sim_agent *a = o->u.pod->agent;

    a->main_port_file = strdup(mpf);
    a->main_gates_ready = probes_port(c, CI_PORT);
    if (a->main_port_file == NULL)
      rc = -ENOMEM;
  }
out:
  free(cmd);
  json_decref(j);
  return rc;
}

char **agent_exec_wrap(struct sim *s, struct sim_obj *o) {
  struct sim_pod *p = o->u.pod;

  if (!s->opts.pod_namespaces || p == NULL)
    return NULL;
  if (p->agent == NULL && supervisor_start(s, o, NULL) != 0)
    return NULL;
  return p->agent != NULL && p->agent->isolated ? p->agent->wrap : NULL;
}

struct mark_work {
  uv_work_t w;
  char mark[64];
};

/* Kills every process whose environment holds <mark> ("K=V"). */
static void mark_kill_cb(uv_work_t *w) {
  struct mark_work *mw = fr_container_of(w, struct mark_work, w);
  size_t ml = strlen(mw->mark);
  DIR *d = opendir("/proc");
  struct dirent *de;
  char path[64], buf[65536];

  if (d == NULL)
    return;
  while ((de = readdir(d)) != NULL) {
    int64_t pid;
    ssize_t n, i;
    int fd;

    if (fr_parse_int64(de->d_name, 1, INT_MAX, &pid) != 0 || pid == getpid())
      continue;
    snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      continue;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    for (i = 0; n > 0 && i < n; i += (ssize_t)strnlen(buf + i, (size_t)(n - i)) + 1) {
      if ((size_t)(n - i) >= ml && memcmp(buf + i, mw->mark, ml) == 0 &&
          (i + (ssize_t)ml == n || buf[i + ml] == '\0')) {
        kill((pid_t)pid, SIGKILL);
        break;
      }
    }
  }
  closedir(d);
}

static void mark_after_cb(uv_work_t *w, int status) {
  (void)status;
  free(fr_container_of(w, struct mark_work, w));
}

void agent_stop(struct sim_pod *p) {
  struct sim_agent *a = p->agent;
  struct mark_work *mw;

  /* The container ends here, whatever ended it: log followers finish. */
  log_container_ended(p);
  if (a != NULL) {
    p->agent = NULL;
    a->pod = NULL;
    stop_poll(a);
    if (a->proc_open && a->proc.pid > 0) {
      /* Isolated: init dies with the supervisor and takes the namespace
       * along. Not isolated: the supervisor kills its tree on SIGTERM. */
      kill(a->proc.pid, a->isolated ? SIGKILL : SIGTERM);
    }
    if (!a->isolated && p->sim != NULL && (mw = calloc(1, sizeof(*mw))) != NULL) {
      snprintf(mw->mark, sizeof(mw->mark), AGENT_POD_MARK "=%s", a->uid);
      if (uv_queue_work(p->sim->loop, &mw->w, mark_kill_cb, mark_after_cb) != 0)
        free(mw);
    }
    maybe_free(a);
    return;
  }
  /* No supervisor: exec'd commands may still have left setsid'd
   * processes behind, which only the mark finds. */
  if (p->sim != NULL && p->obj != NULL && p->execs.forked > 0 &&
      (mw = calloc(1, sizeof(*mw))) != NULL) {
    p->execs.forked = 0;
    snprintf(mw->mark, sizeof(mw->mark), AGENT_POD_MARK "=%s", p->obj->uid);
    if (uv_queue_work(p->sim->loop, &mw->w, mark_kill_cb, mark_after_cb) != 0)
      free(mw);
  }
}

int agent_target(struct sim *s, struct sim_obj *o, json_t *j, int port, int *local) {
  struct sim_pod *p = o->u.pod;
  json_t *c, *pt;
  size_t i, k;
  int declared = port == AGENT_PORT;

  if (p == NULL || p->stage != PS_RUNNING || s->opts.agent_mode == AGENT_MODE_NONE)
    return -ECONNREFUSED;
  json_array_foreach(json_path(j, "spec.containers"), i, c) {
    json_array_foreach(json_object_get(c, "ports"), k, pt) {
      if (json_get_int(pt, "containerPort", 0) == port)
        declared = 1;
    }
  }
  if (!declared || !agent_pod_runs_agent(j))
    return -ECONNREFUSED;
  if (s->opts.agent_mode == AGENT_MODE_INPROC)
    return 1;
  if (p->agent == NULL || p->agent->local_port == 0)
    return -ECONNREFUSED;
  if (port == CI_PORT && p->agent->main_port_file != NULL) {
    /* The code interpreter's own port (0 until it is up: refused). */
    if (p->agent->main_port == 0)
      return -ECONNREFUSED;
    *local = p->agent->main_port;
    return 0;
  }
  *local = p->agent->local_port;
  return 0;
}

/* ---------------------------------------------------------------------- */
/* in-process agent                                                        */

struct inproc {
  struct sim *sim;
  char path[256];
  struct fr_buf body;
  int too_big;
};

static void inproc_free(struct fr_http_req *req) {
  struct inproc *ip = req->data;

  req->data = NULL;
  req->body_cb = NULL;
  req->abort_cb = NULL;
  if (ip != NULL) {
    fr_buf_free(&ip->body);
    free(ip);
  }
}

static void on_inproc_abort(struct fr_http_req *req) {
  inproc_free(req);
}

/* One Connect envelope: flags, big-endian length, JSON. */
static int envelope(struct fr_buf *b, int flags, const char *json, size_t len) {
  unsigned char h[5] = {(unsigned char)flags, (unsigned char)(len >> 24),
                        (unsigned char)(len >> 16), (unsigned char)(len >> 8),
                        (unsigned char)len};
  int rc = fr_buf_append(b, (const char *)h, 5);

  return rc == 0 ? fr_buf_append(b, json, len) : rc;
}

/* process.Process/Start for the exec fast path's commands. The message
 * shapes are envd's protobuf JSON (e2b 2.x process.proto: StartRequest
 * {process:{cmd,args,envs,cwd}}, StartResponse{event:ProcessEvent}), one
 * envelope per event, then the end-of-stream envelope (flag 2). */
static void inproc_start(struct fr_http_req *req, struct inproc *ip) {
  static unsigned pid_seq = 1000;
  const unsigned char *raw = (const unsigned char *)ip->body.data;
  size_t len = ip->body.len, mlen;
  json_t *msg = NULL, *proc, *a;
  char **argv = NULL, *b64 = NULL;
  struct fr_buf out, resp, ev;
  size_t i, n;
  int code = 0, rc;

  fr_buf_init(&out);
  fr_buf_init(&resp);
  fr_buf_init(&ev);
  /* Server streaming: the request is one envelope (a bare JSON body, as a
   * unary-style client would send, is accepted too). */
  if (len >= 5 && raw[0] <= 1) {
    mlen = ((size_t)raw[1] << 24) | ((size_t)raw[2] << 16) | ((size_t)raw[3] << 8) | raw[4];
    if (mlen <= len - 5)
      msg = json_loadb((const char *)raw + 5, mlen, 0, NULL);
  }
  if (msg == NULL)
    msg = json_loadb(ip->body.data ? ip->body.data : "", len, 0, NULL);
  proc = json_object_get(msg, "process");
  n = json_array_size(json_object_get(proc, "args"));
  argv = calloc(n + 2, sizeof(*argv));
  if (argv != NULL && json_get_str(proc, "cmd") != NULL) {
    argv[0] = (char *)json_get_str(proc, "cmd");
    json_array_foreach(json_object_get(proc, "args"), i, a) argv[i + 1] =
        (char *)(json_string_value(a) ? json_string_value(a) : "");
  }
  fr_http_stream_begin(req, 200, "application/connect+json", NULL);
  if (argv == NULL || argv[0] == NULL || sim_exec_fast_output(argv, &out, &code) != 0) {
    static const char err[] =
        "{\"error\":{\"code\":\"unimplemented\",\"message\":\"kubesim's in-process agent runs only "
        "the exec fast path's commands (echo, true, false, sh -c 'exit N', sh -c 'echo ...'); "
        "run kubesim with --agent-mode=process for real processes\"}}";
    envelope(&resp, 2, err, sizeof(err) - 1);
    goto send;
  }
  pid_seq++;
  fr_buf_printf(&ev, "{\"event\":{\"start\":{\"pid\":%u}}}", pid_seq);
  envelope(&resp, 0, ev.data, ev.len);
  if (out.len > 0 && (b64 = malloc(fr_base64_len(out.len))) != NULL) {
    fr_base64_encode(out.data, out.len, b64);
    fr_buf_reset(&ev);
    fr_buf_printf(&ev, "{\"event\":{\"data\":{\"stdout\":\"%s\"}}}", b64);
    envelope(&resp, 0, ev.data, ev.len);
  }
  fr_buf_reset(&ev);
  fr_buf_printf(&ev, "{\"event\":{\"end\":{\"exitCode\":%d,\"exited\":true,\"status\":"
                "\"exit status %d\"}}}", code, code);
  envelope(&resp, 0, ev.data, ev.len);
  envelope(&resp, 2, "{}", 2);
send:
  rc = resp.data != NULL ? fr_http_stream_write(req, resp.data, resp.len) : -ENOMEM;
  if (rc == 0)
    fr_http_stream_end(req);
  else if (resp.data == NULL)
    fr_http_abort(req);
  free(b64);
  free(argv);
  json_decref(msg);
  fr_buf_free(&out);
  fr_buf_free(&resp);
  fr_buf_free(&ev);
}

static void inproc_dispatch(struct fr_http_req *req, struct inproc *ip) {
  const char *m = req->method;

  if (ip->too_big) {
    static const char body[] = "request body too large\n";
    fr_http_respond(req, 413, "text/plain; charset=utf-8", NULL, body, sizeof(body) - 1);
  } else if (strcmp(ip->path, "/health") == 0 && strcmp(m, "GET") == 0) {
    fr_http_stream_begin_length(req, 204, NULL, NULL, FR_HTTP_NO_BODY);
    fr_http_stream_end(req);
  } else if (strcmp(ip->path, "/init") == 0 && strcmp(m, "POST") == 0) {
    /* env vars and the access token are accepted and not kept: nothing
     * in-process reads them. */
    fr_http_stream_begin_length(req, 204, NULL, NULL, FR_HTTP_NO_BODY);
    fr_http_stream_end(req);
  } else if (strcmp(ip->path, "/process.Process/Start") == 0 && strcmp(m, "POST") == 0) {
    inproc_start(req, ip);
  } else {
    static const char body[] = "404 page not found\n";
    fr_http_respond(req, 404, "text/plain; charset=utf-8", NULL, body, sizeof(body) - 1);
  }
}

static void on_inproc_body(struct fr_http_req *req, const char *data, size_t len) {
  struct inproc *ip = req->data;

  if (ip == NULL)
    return;
  if (data != NULL) {
    if (ip->body.len + len > INPROC_MAX_BODY || fr_buf_append(&ip->body, data, len) != 0)
      ip->too_big = 1;
    if (ip->too_big)
      fr_buf_free(&ip->body);
    return;
  }
  /* Let go of <req> first: answering finishes it. */
  req->data = NULL;
  req->body_cb = NULL;
  req->abort_cb = NULL;
  inproc_dispatch(req, ip);
  fr_buf_free(&ip->body);
  free(ip);
}

void agent_inproc_serve(struct sim *s, struct sim_obj *o, struct fr_http_req *req,
                        const char *path) {
  struct inproc *ip = calloc(1, sizeof(*ip));
  const char *q;

  (void)o;
  if (ip == NULL) {
    api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
    return;
  }
  ip->sim = s;
  q = strchr(path, '?');
  snprintf(ip->path, sizeof(ip->path), "%.*s", (int)(q ? (size_t)(q - path) : strlen(path)), path);
  fr_buf_init(&ip->body);
  if (!req->body_streaming) {
    if (fr_buf_append(&ip->body, req->body, req->body_len) != 0)
      ip->too_big = 1;
    inproc_dispatch(req, ip);
    fr_buf_free(&ip->body);
    free(ip);
    return;
  }
  /* Answer once the whole (small) body is in, so the connection stays
   * usable for the next request. */
  req->data = ip;
  req->body_cb = on_inproc_body;
  req->abort_cb = on_inproc_abort;
  fr_http_body_pause(req, 0);
}

/* ---------------------------------------------------------------------- */
/* supervisor, process side (no libuv: a plain fork/wait loop)             */

static volatile sig_atomic_t got_term;

static void on_term(int sig) {
  (void)sig;
  got_term = 1;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

  nanosleep(&ts, NULL);
}

/* Kills every descendant (children, and orphans reparented to us as a
 * subreaper) until none is left. */
static void kill_tree(void) {
  int round;

  for (round = 0; round < 200; round++) {
    DIR *d = opendir("/proc");
    struct dirent *de;
    int found = 0;

    if (d == NULL)
      return;
    while ((de = readdir(d)) != NULL) {
      char path[64], buf[512], *rp;
      int64_t pid;
      long ppid;
      ssize_t n;
      int fd;

      if (fr_parse_int64(de->d_name, 1, INT_MAX, &pid) != 0)
        continue;
      snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
      fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0)
        continue;
      n = read(fd, buf, sizeof(buf) - 1);
      close(fd);
      if (n <= 0)
        continue;
      buf[n] = '\0';
      /* "pid (comm) state ppid ...": comm may hold anything but the last ')' */
      rp = strrchr(buf, ')');
      if (rp == NULL || sscanf(rp + 1, " %*c %ld", &ppid) != 1 || ppid != (long)getpid())
        continue;
      kill((pid_t)pid, SIGKILL);
      found = 1;
    }
    closedir(d);
    while (waitpid(-1, NULL, WNOHANG) > 0)
      ;
    if (!found)
      return;
    sleep_ms(5);
  }
}

static int mkdir_all(const char *path) {
  char tmp[PATH_MAX];
  size_t i, len = strlen(path);

  if (len >= sizeof(tmp))
    return -1;
  memcpy(tmp, path, len + 1);
  for (i = 1; i <= len; i++) {
    if (tmp[i] == '/' || tmp[i] == '\0') {
      char c = tmp[i];
      tmp[i] = '\0';
      if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return -1;
      tmp[i] = c;
    }
  }
  return 0;
}

static int bind_fd(int fd, const char *target) {
  char src[64];

  snprintf(src, sizeof(src), "/proc/self/fd/%d", fd);
  return mount(src, target, NULL, MS_BIND, NULL);
}

/* The pod's own view of the filesystem (mount namespace already new). */
static int setup_mounts(const char *poddir, const char *root) {
  char tmp[PATH_MAX];
  struct stat a, b;
  int podfd, tmpfd;

  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
    return -1;
  snprintf(tmp, sizeof(tmp), "%s/tmp", poddir);
  podfd = open(poddir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  tmpfd = open(tmp, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (podfd < 0 || tmpfd < 0)
    return -1;
  /* Other pods' directories: hidden under a tmpfs, ours bound back. */
  if (mount("kubesim-pods", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") == 0 &&
      (mkdir_all(poddir) != 0 || bind_fd(podfd, poddir) != 0))
    return -1;
  if (bind_fd(tmpfd, "/tmp") != 0)
    return -1;
  /* With --workdir under /tmp the pod's directory is now out of sight:
   * put it back at the same path inside the pod's /tmp. */
  if (stat(poddir, &a) != 0 || fstat(podfd, &b) != 0 || a.st_ino != b.st_ino ||
      a.st_dev != b.st_dev) {
    if (mkdir_all(poddir) != 0 || bind_fd(podfd, poddir) != 0)
      return -1;
  }
  close(podfd);
  close(tmpfd);
  /* ps and /proc/self inside the sandbox see the pod's PID namespace. */
  mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  return chdir(poddir);
}

static void child_signals_default(void) {
  sigset_t none;

  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  signal(SIGQUIT, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Runs <cmd> (NULL: nothing) and reaps everything until it ends; then
 * returns its status as an exit code. <tree>: kill the tree on SIGTERM. */
/* <exefd>: cmd[0] opened before the pod's mounts changed (-1: none), so a
 * binary under a hidden directory (a build tree in /tmp, under the pod's
 * private /tmp) still runs. */
static int init_loop(char **cmd, int tree, int exefd) {
  pid_t main_pid = 0, w;
  int st, code = 0;

  if (cmd != NULL && cmd[0] != NULL) {
    main_pid = fork();
    if (main_pid < 0)
      return 126;
    if (main_pid == 0) {
      child_signals_default();
      if (exefd >= 0)
        fexecve(exefd, cmd, environ);
      execvp(cmd[0], cmd);
      fprintf(stderr, "kubesim: %s: %s\n", cmd[0], strerror(errno));
      _exit(127);
    }
  }
  for (;;) {
    if (got_term) {
      if (tree)
        kill_tree();
      return 143;
    }
    w = waitpid(-1, &st, 0);
    if (w < 0 && errno == ECHILD) {
      if (main_pid != 0)
        return code;
      pause(); /* nothing to run: wait to be killed */
      continue;
    }
    if (w == main_pid && main_pid != 0) {
      code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      /* The container ends with its main process: whatever it left
       * running goes too. */
      if (tree)
        kill_tree();
      return code;
    }
  }
}

static int write_pid_file(const char *poddir, pid_t pid) {
  char path[PATH_MAX], tmp[PATH_MAX + 8], buf[24];
  int fd, n;

  snprintf(path, sizeof(path), "%s/.kubesim-init.pid", poddir);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -1;
  n = snprintf(buf, sizeof(buf), "%d\n", (int)pid);
  if (write(fd, buf, (size_t)n) != n) {
    close(fd);
    return -1;
  }
  close(fd);
  return rename(tmp, path);
}

/* kubesim __pod-init PODDIR ROOT ISOLATE KUBESIM_PID -- [CMD...] */
static int pod_init_main(int argc, char **argv) {
  const char *poddir = argv[2], *root = argv[3];
  int isolate = strcmp(argv[4], "1") == 0;
  int64_t kubesim = 0;
  char **cmd = argc > 7 ? argv + 7 : NULL;
  struct sigaction sa;
  int ready[2], st, exefd;
  pid_t child;
  char c;

  if (fr_parse_int64(argv[5], 1, INT_MAX, &kubesim) != 0)
    return 2;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  /* Die with kubesim, however it ends. */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != (pid_t)kubesim)
    return 1;
  if (isolate && unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) {
    fprintf(stderr, "kubesim: pod %s: no namespaces (%s); processes are tracked without\n",
            poddir, strerror(errno));
    isolate = 0;
  }
  if (!isolate) {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    write_pid_file(poddir, getpid());
    return init_loop(cmd, 1, -1);
  }
  if (pipe(ready) != 0)
    return 1;
  child = fork();
  if (child < 0)
    return 1;
  if (child == 0) {
    /* PID 1 of the pod: its death ends every process of the namespace. */
    close(ready[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* Not O_CLOEXEC: fexecve of a script needs the fd alive past the exec. */
    exefd = cmd != NULL && cmd[0] != NULL && strchr(cmd[0], '/') != NULL ? open(cmd[0], O_RDONLY) : -1;
    if (setup_mounts(poddir, root) != 0) {
      fprintf(stderr, "kubesim: pod %s: mount namespace setup failed: %s\n", poddir,
              strerror(errno));
      _exit(1);
    }
    if (write(ready[1], "x", 1) != 1)
      _exit(1);
    close(ready[1]);
    _exit(init_loop(cmd, 0, exefd));
  }
  close(ready[1]);
  if (read(ready[0], &c, 1) == 1)
    write_pid_file(poddir, child);
  close(ready[0]);
  for (;;) {
    if (got_term) {
      kill(child, SIGKILL);
      waitpid(child, &st, 0);
      return 143;
    }
    if (waitpid(child, &st, 0) == child)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
}

/* kubesim __pod-enter PIDFILE -- FILE ARGS...: runs FILE in the namespaces
 * of the pod init named in PIDFILE, from the current directory. */
static int pod_enter_main(int argc, char **argv) {
  const char *pid_file = argv[2];
  char cwd[PATH_MAX], path[64], buf[24] = "";
  int64_t init_pid = 0;
  int i, fd, st, ok = 0;
  ssize_t n;
  pid_t child;

  if (argc < 5 || getcwd(cwd, sizeof(cwd)) == NULL)
    return 126;
  /* The supervisor may have just been started by this very exec. */
  for (i = 0; i < 2000; i++) {
    fd = open(pid_file, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      n = read(fd, buf, sizeof(buf) - 1);
      close(fd);
      if (n > 0) {
        buf[n] = '\0';
        ok = 1;
        break;
      }
    }
    sleep_ms(5);
  }
  buf[strcspn(buf, "\n")] = '\0';
  if (ok && fr_parse_int64(buf, 1, INT_MAX, &init_pid) != 0)
    ok = 0;
  if (ok) {
    int pidfd, mntfd;
    snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)init_pid);
    pidfd = open(path, O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)init_pid);
    mntfd = open(path, O_RDONLY | O_CLOEXEC);
    ok = pidfd >= 0 && mntfd >= 0 && setns(pidfd, CLONE_NEWPID) == 0 &&
         setns(mntfd, CLONE_NEWNS) == 0;
    if (pidfd >= 0)
      close(pidfd);
    if (mntfd >= 0)
      close(mntfd);
  }
  if (!ok) {
    /* The pod is going (its init is gone): nothing may run in it. */
    fprintf(stderr, "kubesim: cannot enter the pod's namespaces\n");
    return 126;
  }
  if (chdir(cwd) != 0)
    return 126;
  child = fork();
  if (child < 0)
    return 126;
  if (child == 0) {
    child_signals_default();
    execv(argv[4], argv + 4);
    _exit(127);
  }
  /* Signals for the command reach it through the process group. */
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  while (waitpid(child, &st, 0) < 0)
    if (errno != EINTR)
      return 126;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int agent_helper_main(int argc, char **argv) {
  int rc = 2;

  if (strcmp(argv[1], "__pod-init") == 0 && argc >= 7 && strcmp(argv[6], "--") == 0)
    rc = pod_init_main(argc, argv);
  else if (strcmp(argv[1], "__pod-enter") == 0 && argc >= 4 && strcmp(argv[3], "--") == 0)
    rc = pod_enter_main(argc, argv);
  else
    fprintf(stderr, "kubesim: %s: bad helper invocation\n", argv[1]);
  /* _exit, not exit: after unshare/setns of a PID namespace, exit-time
   * machinery that starts a helper task (LeakSanitizer's tracer in the
   * sanitizer build) would start it in the other namespace and wait for
   * it forever. The helpers allocate nothing worth a leak check. */
  fflush(stderr);
  _exit(rc);
}
