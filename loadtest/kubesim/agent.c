/* agent.c - the in-sandbox agent of kubesim's pods and, kubesim's side of
 * it, the per-pod process supervisor that makes everything a pod started die
 * with it (the supervisor's own side is podinit.c).
 *
 * A pod whose first container's command[0] is named fedrouter-agent runs,
 * with --agent-binary PATH in process mode, the real agent once Running:
 *   PATH --listen <podIP>:49983 --port-file <run>/agent.port -- <rest>
 * (<rest>: what follows "--" in the container's command + args; <run>:
 * <poddir>/run, which an isolated pod sees as POD_RUN_DIR) with the pod's
 * env. The pod turns Ready when the port file appears (polled); the pod
 * proxy dials podIP:port (podnet.c: the pod's own network namespace, or its
 * own loopback address). In inproc mode no process runs:
 * agent_inproc_serve() answers the subset loadgen needs.
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
 *   - as root (--pod-namespaces, the default for root) the pod gets its own
 *     PID, mount, UTS and network namespaces, a private root and its
 *     securityContext's credentials (podinit.c); exec'd commands enter
 *     them through "kubesim __pod-enter". agent_stop() SIGTERMs the
 *     supervisor, which kills the pod's init and waits for it: the kernel
 *     ends every process of a PID namespace before its init is gone,
 *     setsid'd grandchildren included (a supervisor killed outright takes
 *     init along through PR_SET_PDEATHSIG). Only then is the pod's
 *     directory removed (agent_remove_dir());
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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
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
  int exited;                /* the supervisor has exited */
  int isolated;              /* namespaces */
  int local_port;            /* the agent's port once listening, 0 before */
  char *port_file;
  char *main_port_file;      /* the code interpreter's port file, or NULL */
  int main_port;             /* its port once up (/health answers), 0 before */
  int main_gates_ready;      /* a readiness probe on CI_PORT: Ready waits for it */
  int ready_set;             /* the pod was made Ready */
  char *pid_file;
  char *rm_dir;              /* the pod's directory, removed once we exited */
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
  /* Never exited (the spawn failed): nothing of the pod ran. */
  if (a->rm_dir != NULL)
    pod_dir_remove(a->sim, a->rm_dir);
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
  a->exited = 1;
  if (a->rm_dir != NULL) {
    pod_dir_remove(a->sim, a->rm_dir);
    a->rm_dir = NULL;
  }
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
 * local files; the stat and read do not wait on anything. The pod can
 * write that directory: no symlink is followed and a FIFO does not block. */
static int read_port_file(const char *path) {
  char buf[32];
  int64_t v;
  ssize_t n;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

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
    FR_DEBUG(LOG_COMP, "pod %s: agent listens on port %d", a->uid, a->local_port);
  }
  if (a->main_port_file != NULL && a->main_port == 0) {
    /* The code interpreter writes its port file at the moment its /health
     * turns 200 (its default kernel is up): when its probe would pass. */
    a->main_port = read_port_file(a->main_port_file);
    if (a->main_port != 0)
      FR_DEBUG(LOG_COMP, "pod %s: code interpreter listens on port %d", a->uid, a->main_port);
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

/* The credentials and working directory of container <c> of pod <j>
 * (both borrowed) for <o>'s processes; logs what the pod does not get. */
static void container_creds(struct sim_obj *o, json_t *j, json_t *c, struct pod_creds *creds,
                            const char **cwd) {
  char warn[160];
  const char *wd = json_get_str(c, "workingDir");

  pod_creds_from_json(j, c, creds, warn, sizeof(warn));
  if (warn[0] != '\0')
    FR_WARN(LOG_COMP, "pod %s/%s: %s", o->ns, o->name, warn);
  *cwd = wd != NULL && wd[0] == '/' ? wd : "/";
}

/* Makes <poddir>/run, the directory the pod shares with kubesim (the
 * agent's port file), owned by the pod's user so a non-root agent can
 * write there. 0 or -errno. */
static int make_run_dir(const char *poddir, const struct pod_creds *creds, int isolated) {
  char path[4096];

  snprintf(path, sizeof(path), "%s/run", poddir);
  if (mkdir(path, 0755) != 0 && errno != EEXIST)
    return -errno;
  if (isolated && chown(path, creds->uid, creds->gid) != 0)
    return -errno;
  return 0;
}

/* Starts the pod's supervisor, running <cmd> (NULL: none). */
static int supervisor_start(struct sim *s, struct sim_obj *o, char **cmd) {
  struct sim_pod *p = o->u.pod;
  struct sim_agent *a;
  uv_process_options_t opts;
  uv_stdio_container_t stdio[3];
  struct pod_launch launch;
  struct pod_creds creds;
  const char *image[POD_MAX_IMAGE_ENTRIES];
  char net[64];
  char **argv = NULL, **env = NULL, path[4096];
  char *mounts[POD_MAX_MOUNTS];
  int nmounts = 0;
  json_t *j = NULL, *c;
  int rc;

  if (p->agent != NULL)
    return 0;
  rc = pod_workdir(s, o);
  if (rc != 0)
    return rc;
  a = calloc(1, sizeof(*a));
  j = obj_json(o);
  if (a == NULL || j == NULL) {
    free(a);
    json_decref(j);
    return -ENOMEM;
  }
  a->sim = s;
  snprintf(a->uid, sizeof(a->uid), "%s", o->uid);
  a->isolated = s->opts.pod_namespaces;
  a->runs_agent = cmd != NULL;
  snprintf(path, sizeof(path), "%s/run/agent.port", p->workdir);
  a->port_file = strdup(path);
  snprintf(path, sizeof(path), "%s/" POD_INIT_PID_FILE, p->workdir);
  a->pid_file = strdup(path);
  c = json_array_get(json_path(j, "spec.containers"), 0);
  memset(&launch, 0, sizeof(launch));
  container_creds(o, j, c, &creds, &launch.cwd);
  rc = make_run_dir(p->workdir, &creds, a->isolated);
  if (rc != 0) {
    FR_WARN(LOG_COMP, "pod %s/%s: %s/run: %s", o->ns, o->name, p->workdir, strerror(-rc));
    goto fail;
  }
  launch.self_exe = s->self_exe;
  launch.poddir = p->workdir;
  launch.parent = (int)getpid();
  launch.isolate = a->isolated;
  launch.hides = s->opts.hides;
  launch.nhides = s->opts.nhides;
  launch.creds = &creds;
  launch.hostname = o->name;
  launch.image = image;
  launch.nimage = image_entries(s, json_get_str(c, "image"), image, FR_ARRAY_SIZE(image));
  if (a->isolated && podnet_pod_arg(s, p->ip, net, sizeof(net)) == 0)
    launch.net = net;
  launch.cmd = cmd;
  /* Its claims' directories, mounted by the pod's init; a pod without its
   * own root has nowhere to mount them (docs/kubesim.md). */
  nmounts = pod_volume_mounts(s, o, j, c, mounts, FR_ARRAY_SIZE(mounts));
  if (nmounts < 0) {
    rc = nmounts;
    nmounts = 0;
    goto fail;
  }
  if (nmounts > 0 && !a->isolated)
    FR_WARN(LOG_COMP, "pod %s/%s: no namespaces of its own: its volumes are not mounted", o->ns, o->name);
  launch.mounts = mounts;
  launch.nmounts = a->isolated ? (size_t)nmounts : 0;
  argv = podinit_argv(&launch);
  env = pod_env(o, c);
  if (a->port_file == NULL || a->pid_file == NULL || argv == NULL || env == NULL) {
    rc = -ENOMEM;
    goto fail;
  }
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
           a->isolated ? " (own namespaces and root)" : "", cmd ? ", running the agent" : "");
  a->pod = p;
  p->agent = a;
  netpol_pod_dirty(s, o); /* its network namespace may need egress rules */
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
  while (nmounts > 0)
    free(mounts[--nmounts]);
  free(argv);
  pod_env_free(env);
  json_decref(j);
  return rc;
}

/* The main command of a pod of the code-interpreter image, as that image's
 * CMD runs it, when kubesim has --code-interpreter PATH: appended to
 * <cmd> at <n> (room for 7 more), in place of what the pod spec put after
 * the agent's "--" (kubesim runs no images: the server is a host file;
 * an isolated pod gets a copy in its /usr/local/bin, images_init()).
 * Returns the new count, or 0 when <c> is no such container.
 *
 * The server listens on the pod's address at CI_PORT, as the image runs
 * it, and writes <port_file> (as the pod sees it) once its /health answers
 * 200: Ready waits for that when the pod probes the port. */
static size_t image_main_command(struct sim *s, json_t *c, char **cmd, size_t n, const char *port_file,
                                 const char *listen) {
  const char *image = json_get_str(c, "image");
  static char copy[256];

  if (s->opts.code_interpreter == NULL || image == NULL || strstr(image, CI_IMAGE) == NULL)
    return 0;
  snprintf(copy, sizeof(copy), POD_IMAGE_BIN_DIR "/%s", strrchr(s->opts.code_interpreter, '/') + 1);
  cmd[n++] = "/usr/bin/python3";
  cmd[n++] = s->opts.pod_namespaces ? copy : (char *)s->opts.code_interpreter;
  cmd[n++] = "--listen";
  cmd[n++] = (char *)listen;
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
  char **cmd = NULL, pf[4096], mpf[4096], mpf_pod[4096], listen[32], ci_listen[32];
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
  /* The port files as the pod's processes see them; kubesim reads
   * <poddir>/run. */
  if (s->opts.pod_namespaces) {
    snprintf(pf, sizeof(pf), POD_RUN_DIR "/agent.port");
    snprintf(mpf_pod, sizeof(mpf_pod), POD_RUN_DIR "/code-interpreter.port");
  } else {
    snprintf(pf, sizeof(pf), "%s/run/agent.port", o->u.pod->workdir);
    snprintf(mpf_pod, sizeof(mpf_pod), "%s/run/code-interpreter.port", o->u.pod->workdir);
  }
  snprintf(mpf, sizeof(mpf), "%s/run/code-interpreter.port", o->u.pod->workdir);
  unlink(mpf);
  /* On the pod's address, at envd's port: in its own network namespace, or
   * its own loopback address; the code interpreter likewise at its port. */
  snprintf(listen, sizeof(listen), "%s:%d", o->u.pod->ip[0] ? o->u.pod->ip : "127.0.0.1", AGENT_PORT);
  snprintf(ci_listen, sizeof(ci_listen), "%s:%d", o->u.pod->ip[0] ? o->u.pod->ip : "127.0.0.1", CI_PORT);
  cmd[n++] = (char *)s->opts.agent_binary;
  cmd[n++] = "--listen";
  cmd[n++] = listen;
  cmd[n++] = "--port-file";
  cmd[n++] = pf;
  cmd[n++] = "--";
  main_n = image_main_command(s, c, cmd, n, mpf_pod, ci_listen);
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
  {
    char port_file[4096];
    snprintf(port_file, sizeof(port_file), "%s/run/agent.port", o->u.pod->workdir);
    unlink(port_file);
  }
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

void agent_remove_dir(struct sim *s, struct sim_pod *p, char *dir) {
  struct sim_agent *a = p->agent;

  if (a == NULL || !a->proc_open || a->exited) {
    pod_dir_remove(s, dir);
    return;
  }
  free(a->rm_dir);
  a->rm_dir = dir;
}

const char *agent_net_pidfile(struct sim *s, struct sim_pod *p) {
  struct sim_agent *a = p != NULL ? p->agent : NULL;

  if (a == NULL || !a->isolated || !a->proc_open || a->exited || podnet_mode(s) != PODNET_BRIDGE ||
      p->ip[0] == '\0')
    return NULL;
  return a->pid_file;
}

int agent_exec_wrap(struct sim *s, struct sim_obj *o, json_t *c, char ***wrap) {
  struct sim_pod *p = o->u.pod;
  struct pod_creds creds;
  const char *cwd;
  json_t *j;
  int rc;

  *wrap = NULL;
  if (!s->opts.pod_namespaces || p == NULL)
    return 0;
  if (p->agent == NULL && (rc = supervisor_start(s, o, NULL)) != 0)
    return rc;
  /* The supervisor could not even be spawned: nothing may run. */
  if (p->agent == NULL)
    return -ESRCH;
  if ((j = obj_json(o)) == NULL)
    return -ENOMEM;
  container_creds(o, j, c, &creds, &cwd);
  *wrap = podenter_argv(s->self_exe, p->agent->pid_file, &creds, cwd);
  json_decref(j);
  return *wrap != NULL ? 0 : -ENOMEM;
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
    if (a->proc_open && !a->exited && a->proc.pid > 0) {
      /* Isolated: the supervisor kills the pod's init and waits for it,
       * and the kernel ends every process of the PID namespace before its
       * init is gone. Not isolated: the supervisor kills its tree. */
      kill(a->proc.pid, SIGTERM);
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

int agent_target(struct sim *s, struct sim_obj *o, json_t *j, int port) {
  struct sim_pod *p = o->u.pod;

  if (p == NULL || p->stage != PS_RUNNING || p->ip[0] == '\0')
    return -ECONNREFUSED;
  if (s->opts.agent_mode == AGENT_MODE_INPROC && port == AGENT_PORT && agent_pod_runs_agent(j))
    return 1;
  /* Nothing of the pod runs: nothing can listen, and a bridge-mode address
   * without a namespace behind it would only time out. */
  if (p->agent == NULL && podnet_mode(s) == PODNET_BRIDGE)
    return -ECONNREFUSED;
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
