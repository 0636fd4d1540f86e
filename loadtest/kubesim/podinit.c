/* podinit.c - the process side of a kubesim pod: kubesim re-run as
 * "kubesim __pod-init" (the pod's supervisor) and "kubesim __pod-enter" (a
 * command entering a running pod, for pods/exec). No libuv here: plain
 * fork/exec/wait in processes of their own. agent.c starts them; their
 * argv is built (podinit_argv(), podenter_argv()) and parsed here, in one
 * place.
 *
 * __pod-init, isolated (root, the default then): the supervisor unshares a
 * PID namespace and forks its init (PID 1), which makes a mount, a UTS and
 * (bridge mode, podnet.c) a network namespace of its own with a veth pair to
 * kubesim's bridge and the pod's address on eth0, builds the pod's root,
 * then runs the agent, if any, and reaps orphans:
 *   - the root is an overlay: lower layer the host's root filesystem
 *     (read-only through the overlay), upper and work directories in
 *     <poddir>/root (removed with the pod; a tmpfs there when the pod
 *     directory's filesystem cannot be an upper layer). Hidden paths (the
 *     --workdir root, /root, /home, /run, /tmp, /var/tmp and every --hide)
 *     are opaque directories (or whiteouts, for files) in the upper layer
 *     before the overlay is mounted: the host's content there is in no
 *     mount of the pod's tree, so no unmount can reveal it;
 *   - a fresh /proc for the PID namespace (its sensitive files masked or
 *     read-only, as container runtimes do), a read-only /sys, a /dev tmpfs
 *     with null, zero, full, random, urandom and tty bound from the host, a
 *     private devpts instance (ptmx) and /dev/shm;
 *   - <poddir>/run bound at POD_RUN_DIR (the agent's port file);
 *   - its PersistentVolumeClaims' directories bound at their mount paths
 *     (--mount, volumes.c; nosuid, nodev, read-only when asked);
 *   - the commands of the pod's image (podimage.c) in POD_IMAGE_BIN_DIR;
 *   - pivot_root into it with the old root detached; the pod's name as
 *     hostname.
 * Every command a pod runs (the agent, exec'd commands) then gets the pod's
 * credentials (pod_creds_apply()): the uid, gid and groups of its
 * securityContext, capability sets cut to POD_CAPS_DEFAULT (Docker's
 * default set, changed by the container's capabilities add and drop) and
 * no_new_privs. Without CAP_SYS_ADMIN it can neither unmount nor make a
 * mount namespace (an unprivileged user namespace can, but the mounts it
 * inherits are locked, and the hidden content is in no mount at all). init
 * stays root but not dumpable: no pod process can ptrace it or read its
 * /proc entries.
 *
 * __pod-init, not isolated (no root, or --no-pod-namespaces): no
 * namespaces; the supervisor is a child subreaper that kills its whole tree
 * on SIGTERM.
 *
 * __pod-enter: joins the namespaces of the pod's init (pid file), forks,
 * and in the child applies the pod's credentials, resolves the command the
 * way runc does (inside the pod, as the pod's user) and execs it. A command
 * that cannot be started is reported on fd 3 (--ctl) in runc's words,
 * which exec.c turns into the kubelet's Status; fd 3 closes on a
 * successful exec.
 *
 * The helpers end with _exit(): after unshare/setns of a PID namespace,
 * exit-time machinery that starts a helper task (LeakSanitizer's tracer in
 * the sanitizer build) would start it in the other namespace and wait for it
 * forever. They allocate nothing worth a leak check.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/capability.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "fr/buf.h"
#include "fr/util.h"
#include "netlink.h"
#include "sim.h"

#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

/* The size of the tmpfs that holds a pod's upper layer when its directory's
 * filesystem cannot (the writes a pod may keep in memory). */
#define UPPER_TMPFS_OPTS "mode=0700,size=1g"

/* ---------------------------------------------------------------------- */
/* helper arguments                                                        */

struct helper_opts {
  const char *poddir;         /* __pod-init */
  const char *pidfile;        /* __pod-enter */
  int64_t parent;             /* kubesim's pid: the supervisor dies with it */
  int isolate;
  int ctl;                    /* __pod-enter: report start errors on fd 3 */
  const char *hides[POD_MAX_HIDES];
  size_t nhides;
  struct pod_creds creds;
  const char *cwd;
  const char *hostname;
  const char *image[POD_MAX_IMAGE_ENTRIES]; /* "NAME=link|script|copy:VALUE" */
  const char *mounts[POD_MAX_MOUNTS];       /* "MODE\nDST\nSUBPATH\nSRC" (volumes.c) */
  size_t nmounts;
  size_t nimage;
  const char *net;            /* "IP/PREFIX@BRIDGE": a network namespace of its own */
  char **cmd;                 /* after "--"; NULL = none */
};

/* The capabilities by the names securityContext uses (CAP_ left out). */
static const char *const cap_names[] = {
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
};

/* Capabilities a pod never gets, whatever its spec adds: each one undoes
 * the isolation above (mounts, ptrace, raw devices and file handles,
 * kernel modules, the network configuration the pod must not change). */
#define CAPS_NEVER                                                                             \
  ((UINT64_C(1) << 2) | (UINT64_C(1) << 12) | (UINT64_C(1) << 16) | (UINT64_C(1) << 17) |     \
   (UINT64_C(1) << 19) | (UINT64_C(1) << 21) | (UINT64_C(1) << 22) | (UINT64_C(1) << 25) |    \
   (UINT64_C(1) << 33) | (UINT64_C(1) << 38) | (UINT64_C(1) << 39))

static int cap_bit(const char *name) {
  size_t i;

  if (strncasecmp(name, "CAP_", 4) == 0)
    name += 4;
  for (i = 0; i < FR_ARRAY_SIZE(cap_names); i++)
    if (strcasecmp(name, cap_names[i]) == 0)
      return (int)i;
  return -1;
}

static void creds_id(json_t *psc, json_t *csc, const char *key, uint32_t *out) {
  json_t *v = json_object_get(csc, key);

  if (!json_is_integer(v))
    v = json_object_get(psc, key);
  if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < UINT32_MAX)
    *out = (uint32_t)json_integer_value(v);
}

int pod_creds_from_json(json_t *pod, json_t *c, struct pod_creds *out, char *warn, size_t wcap) {
  json_t *psc = json_path(pod, "spec.securityContext"), *csc = json_object_get(c, "securityContext");
  json_t *caps = json_object_get(csc, "capabilities"), *v;
  size_t i;
  int bit;

  memset(out, 0, sizeof(*out));
  if (wcap > 0)
    warn[0] = '\0';
  out->caps = POD_CAPS_DEFAULT;
  /* The image's user is root here: kubesim's "images" have no USER. */
  creds_id(psc, csc, "runAsUser", &out->uid);
  creds_id(psc, csc, "runAsGroup", &out->gid);
  v = json_object_get(psc, "fsGroup");
  if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < UINT32_MAX)
    out->groups[out->ngroups++] = (uint32_t)json_integer_value(v);
  json_array_foreach(json_object_get(psc, "supplementalGroups"), i, v) {
    if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) < UINT32_MAX &&
        out->ngroups < POD_MAX_GROUPS)
      out->groups[out->ngroups++] = (uint32_t)json_integer_value(v);
  }
  json_array_foreach(json_object_get(caps, "drop"), i, v) {
    const char *n = json_string_value(v);
    if (n != NULL && strcasecmp(n, "ALL") == 0)
      out->caps = 0;
    else if (n != NULL && (bit = cap_bit(n)) >= 0)
      out->caps &= ~(UINT64_C(1) << bit);
  }
  json_array_foreach(json_object_get(caps, "add"), i, v) {
    const char *n = json_string_value(v);
    if (n == NULL || (bit = cap_bit(n)) < 0)
      continue;
    if (CAPS_NEVER & (UINT64_C(1) << bit)) {
      if (wcap > 0 && warn[0] == '\0')
        snprintf(warn, wcap, "capability %s is not given to pods (it would undo their isolation)", n);
      continue;
    }
    out->caps |= UINT64_C(1) << bit;
  }
  return 0;
}

/* argv built in one allocation: the pointer array, then the strings. */
struct argv_build {
  struct fr_buf strs;         /* NUL-terminated strings, back to back */
  size_t n;
  int oom;
};

static void ab_add(struct argv_build *b, const char *s) {
  if (!b->oom && fr_buf_append(&b->strs, s, strlen(s) + 1) != 0)
    b->oom = 1;
  b->n++;
}

static void ab_addf(struct argv_build *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void ab_addf(struct argv_build *b, const char *fmt, ...) {
  char tmp[64];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  ab_add(b, tmp);
}

static char **ab_finish(struct argv_build *b) {
  char **v, *p;
  size_t i;

  if (b->oom || (v = malloc((b->n + 1) * sizeof(*v) + b->strs.len)) == NULL) {
    fr_buf_free(&b->strs);
    return NULL;
  }
  p = (char *)(v + b->n + 1);
  memcpy(p, b->strs.data, b->strs.len);
  for (i = 0; i < b->n; i++) {
    v[i] = p;
    p += strlen(p) + 1;
  }
  v[b->n] = NULL;
  fr_buf_free(&b->strs);
  return v;
}

static void ab_creds(struct argv_build *b, const struct pod_creds *c, const char *cwd) {
  char groups[POD_MAX_GROUPS * 11 + 1] = "";
  size_t i, len = 0;

  for (i = 0; i < c->ngroups; i++)
    len += (size_t)snprintf(groups + len, sizeof(groups) - len, "%s%" PRIu32, i ? "," : "", c->groups[i]);
  ab_add(b, "--uid");
  ab_addf(b, "%" PRIu32, c->uid);
  ab_add(b, "--gid");
  ab_addf(b, "%" PRIu32, c->gid);
  ab_add(b, "--groups");
  ab_add(b, groups);
  ab_add(b, "--caps");
  ab_addf(b, "%" PRIx64, c->caps);
  ab_add(b, "--cwd");
  ab_add(b, cwd != NULL && cwd[0] == '/' ? cwd : "/");
}

char **podinit_argv(const struct pod_launch *l) {
  struct argv_build b;
  size_t i;

  memset(&b, 0, sizeof(b));
  fr_buf_init(&b.strs);
  ab_add(&b, l->self_exe);
  ab_add(&b, "__pod-init");
  ab_add(&b, "--dir");
  ab_add(&b, l->poddir);
  ab_add(&b, "--parent");
  ab_addf(&b, "%d", l->parent);
  if (l->isolate) {
    ab_add(&b, "--isolate");
    for (i = 0; i < l->nhides; i++) {
      ab_add(&b, "--hide");
      ab_add(&b, l->hides[i]);
    }
    if (l->hostname != NULL) {
      ab_add(&b, "--hostname");
      ab_add(&b, l->hostname);
    }
    for (i = 0; i < l->nimage; i++) {
      ab_add(&b, "--image-entry");
      ab_add(&b, l->image[i]);
    }
    if (l->net != NULL) {
      ab_add(&b, "--net");
      ab_add(&b, l->net);
    }
    for (i = 0; i < l->nmounts; i++) {
      ab_add(&b, "--mount");
      ab_add(&b, l->mounts[i]);
    }
    ab_creds(&b, l->creds, l->cwd);
  }
  ab_add(&b, "--");
  for (i = 0; l->cmd != NULL && l->cmd[i] != NULL; i++)
    ab_add(&b, l->cmd[i]);
  return ab_finish(&b);
}

char **podenter_argv(const char *self_exe, const char *pidfile, const struct pod_creds *creds,
                     const char *cwd) {
  struct argv_build b;

  memset(&b, 0, sizeof(b));
  fr_buf_init(&b.strs);
  ab_add(&b, self_exe);
  ab_add(&b, "__pod-enter");
  ab_add(&b, "--pidfile");
  ab_add(&b, pidfile);
  ab_add(&b, "--ctl");
  ab_add(&b, "--isolate");
  ab_creds(&b, creds, cwd);
  ab_add(&b, "--");
  return ab_finish(&b);
}

/* A small non-negative decimal, or -1. */
static int small_int(const char *s) {
  int64_t v;

  return fr_parse_int64(s, 0, 1 << 20, &v) == 0 ? (int)v : -1;
}

static int parse_u32(const char *s, uint32_t *out) {
  int64_t v;

  if (fr_parse_int64(s, 0, UINT32_MAX - 1, &v) != 0)
    return -1;
  *out = (uint32_t)v;
  return 0;
}

static int parse_groups(const char *s, struct pod_creds *c) {
  char buf[512], *p, *save = NULL;

  c->ngroups = 0;
  if (*s == '\0')
    return 0;
  if (strlen(s) >= sizeof(buf))
    return -1;
  memcpy(buf, s, strlen(s) + 1);
  for (p = strtok_r(buf, ",", &save); p != NULL; p = strtok_r(NULL, ",", &save)) {
    if (c->ngroups == POD_MAX_GROUPS || parse_u32(p, &c->groups[c->ngroups]) != 0)
      return -1;
    c->ngroups++;
  }
  return 0;
}

/* Parses "[OPTIONS] -- [CMD...]" from argv[2]; 0 or -1 (a bad invocation:
 * these come from kubesim itself). */
static int parse_helper(int argc, char **argv, struct helper_opts *o) {
  int i;

  memset(o, 0, sizeof(*o));
  o->creds.caps = POD_CAPS_DEFAULT;
  o->cwd = "/";
  for (i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--") == 0) {
      o->cmd = i + 1 < argc ? argv + i + 1 : NULL;
      return 0;
    }
    if (strcmp(a, "--isolate") == 0) {
      o->isolate = 1;
      continue;
    }
    if (strcmp(a, "--ctl") == 0) {
      o->ctl = 1;
      continue;
    }
    if (v == NULL)
      return -1;
    i++;
    if (strcmp(a, "--dir") == 0) {
      o->poddir = v;
    } else if (strcmp(a, "--pidfile") == 0) {
      o->pidfile = v;
    } else if (strcmp(a, "--parent") == 0) {
      if (fr_parse_int64(v, 1, INT_MAX, &o->parent) != 0)
        return -1;
    } else if (strcmp(a, "--hide") == 0) {
      if (o->nhides == POD_MAX_HIDES || v[0] != '/')
        return -1;
      o->hides[o->nhides++] = v;
    } else if (strcmp(a, "--uid") == 0) {
      if (parse_u32(v, &o->creds.uid) != 0)
        return -1;
    } else if (strcmp(a, "--gid") == 0) {
      if (parse_u32(v, &o->creds.gid) != 0)
        return -1;
    } else if (strcmp(a, "--groups") == 0) {
      if (parse_groups(v, &o->creds) != 0)
        return -1;
    } else if (strcmp(a, "--caps") == 0) {
      char *end;
      errno = 0;
      o->creds.caps = strtoull(v, &end, 16);
      if (errno != 0 || *end != '\0' || end == v)
        return -1;
    } else if (strcmp(a, "--cwd") == 0) {
      if (v[0] != '/')
        return -1;
      o->cwd = v;
    } else if (strcmp(a, "--hostname") == 0) {
      o->hostname = v;
    } else if (strcmp(a, "--net") == 0) {
      o->net = v;
    } else if (strcmp(a, "--mount") == 0) {
      if (o->nmounts == POD_MAX_MOUNTS)
        return -1;
      o->mounts[o->nmounts++] = v;
    } else if (strcmp(a, "--image-entry") == 0) {
      if (o->nimage == POD_MAX_IMAGE_ENTRIES)
        return -1;
      o->image[o->nimage++] = v;
    } else {
      return -1;
    }
  }
  return -1; /* no "--" */
}

/* ---------------------------------------------------------------------- */
/* small helpers                                                           */

static volatile sig_atomic_t got_term;

static void on_term(int sig) {
  (void)sig;
  got_term = 1;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

  nanosleep(&ts, NULL);
}

static void say(const struct helper_opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* One line on stderr (kubesim's log, or the agent's container log),
 * naming the pod's directory. */
static void say(const struct helper_opts *o, const char *fmt, ...) {
  char msg[1024];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "kubesim: pod %s: %s\n", o->poddir ? o->poddir : o->pidfile, msg);
}

static int mkdir_all(const char *path, mode_t mode) {
  char tmp[PATH_MAX];
  size_t i, len = strlen(path);

  if (len >= sizeof(tmp))
    return -1;
  memcpy(tmp, path, len + 1);
  for (i = 1; i <= len; i++) {
    if (tmp[i] == '/' || tmp[i] == '\0') {
      char c = tmp[i];
      tmp[i] = '\0';
      if (mkdir(tmp, mode) != 0 && errno != EEXIST)
        return -1;
      tmp[i] = c;
    }
  }
  return 0;
}

static int join(char *out, size_t cap, const char *a, const char *b) {
  int n = snprintf(out, cap, "%s%s", a, b);

  if (n < 0 || (size_t)n >= cap) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return 0;
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

/* ---------------------------------------------------------------------- */
/* credentials                                                             */

int pod_creds_apply(const struct pod_creds *c) {
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  gid_t groups[POD_MAX_GROUPS];
  uint64_t keep = c->uid == 0 ? c->caps : 0;
  size_t i;
  int cap;

  /* The bounding set first: dropping needs CAP_SETPCAP, which setuid()
   * below may take away. The loop ends at the first capability this
   * kernel does not know. */
  for (cap = 0; cap < 64; cap++) {
    if (keep & (UINT64_C(1) << cap))
      continue;
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      if (errno == EINVAL)
        break;
      return -1;
    }
  }
  for (i = 0; i < c->ngroups; i++)
    groups[i] = (gid_t)c->groups[i];
  if (setgroups(c->ngroups, groups) != 0 || setresgid(c->gid, c->gid, c->gid) != 0 ||
      setresuid(c->uid, c->uid, c->uid) != 0)
    return -1;
  /* For root what survives exec is the bounding set; for anyone else
   * setresuid() has already cleared every set. */
  memset(data, 0, sizeof(data));
  data[0].effective = data[0].permitted = (uint32_t)keep;
  data[1].effective = data[1].permitted = (uint32_t)(keep >> 32);
  if (syscall(SYS_capset, &hdr, data) != 0)
    return -1;
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

/* The home of <uid> in /etc/passwd into <out>; 0, or -1 when it has no
 * entry (or no absolute home). */
static int passwd_home(uint32_t uid, char *out, size_t cap) {
  char line[1024];
  FILE *f = fopen("/etc/passwd", "re");
  int rc = -1;

  while (f != NULL && rc != 0 && fgets(line, sizeof(line), f) != NULL) {
    /* name:pw:uid:gid:gecos:home:shell */
    char *field[7] = {0}, *p = line, *end;
    int n = 0;
    unsigned long v;
    field[n++] = p;
    while (n < 7 && (p = strchr(p, ':')) != NULL) {
      *p++ = '\0';
      field[n++] = p;
    }
    if (n < 6)
      continue;
    v = strtoul(field[2], &end, 10);
    if (*end == '\0' && v == uid && field[5][0] == '/' && strlen(field[5]) < cap) {
      snprintf(out, cap, "%s", field[5]);
      rc = 0;
    }
  }
  if (f != NULL)
    fclose(f);
  return rc;
}

/* HOME as a container runtime sets it when the pod's env does not: the
 * home of <uid> in the pod's /etc/passwd, else "/". */
static void set_home(uint32_t uid) {
  char home[PATH_MAX];

  if (getenv("HOME") != NULL)
    return;
  if (passwd_home(uid, home, sizeof(home)) != 0)
    snprintf(home, sizeof(home), "/");
  setenv("HOME", home, 1);
}

/* In a child about to run one of the pod's commands: the pod's working
 * directory, credentials and HOME. 0, or -1 with errno (and <what> naming
 * the step). */
static int enter_pod_process(const struct helper_opts *o, const char **what) {
  *what = "chdir";
  if (o->isolate && chdir(o->cwd) != 0)
    return -1;
  *what = "credentials";
  if (o->isolate && pod_creds_apply(&o->creds) != 0)
    return -1;
  if (o->isolate) {
    set_home(o->creds.uid);
    /* runc's default; init itself works with 0. */
    umask(022);
  }
  return 0;
}

/* ---------------------------------------------------------------------- */
/* the pod's root                                                          */

/* Copies the mode and owner of host path <from> onto <to> (a directory
 * just made in the upper layer), so the merged directory looks like the
 * host's. */
static int copy_attrs(const char *from, const char *to, const struct stat *st) {
  (void)from;
  if (chmod(to, st->st_mode & 07777) != 0 || lchown(to, st->st_uid, st->st_gid) != 0)
    return -1;
  return 0;
}

/* Makes <upper><path> hide the host's <path>: an opaque directory (or a
 * whiteout for anything else), its parents made in the upper layer with
 * the host's modes. A path the host does not have needs nothing. */
static int hide_path(const struct helper_opts *o, const char *upper, const char *path) {
  char host[PATH_MAX], up[PATH_MAX];
  struct stat st;
  size_t i, len = strlen(path);

  if (len >= sizeof(host) || lstat(path, &st) != 0)
    return 0;
  memcpy(host, path, len + 1);
  for (i = 1; i < len; i++) {
    struct stat pst;
    if (host[i] != '/')
      continue;
    host[i] = '\0';
    if (join(up, sizeof(up), upper, host) != 0 || lstat(host, &pst) != 0)
      return -1;
    if (mkdir(up, 0700) == 0) {
      if (copy_attrs(host, up, &pst) != 0)
        return -1;
    } else if (errno != EEXIST) {
      return -1;
    }
    host[i] = '/';
  }
  if (join(up, sizeof(up), upper, path) != 0)
    return -1;
  if (S_ISDIR(st.st_mode)) {
    if (mkdir(up, 0700) != 0 && errno != EEXIST)
      return -1;
    if (copy_attrs(path, up, &st) != 0 ||
        setxattr(up, "trusted.overlay.opaque", "y", 1, 0) != 0)
      return -1;
  } else if (mknod(up, S_IFCHR | 0000, makedev(0, 0)) != 0 && errno != EEXIST) {
    return -1;
  }
  (void)o;
  return 0;
}

/* Whether <path> lies under (or is) <dir>. */
static int path_under(const char *path, const char *dir) {
  size_t n = strlen(dir);

  if (strcmp(dir, "/") == 0)
    return 1;
  return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* The upper and work directories under <base> (made here) with every
 * hidden path prepared; 0 or -1. */
static int prepare_upper(const struct helper_opts *o, const char *base, char *upper, size_t ucap,
                         char *work, size_t wcap) {
  size_t i, k;

  if (join(upper, ucap, base, "/upper") != 0 || join(work, wcap, base, "/work") != 0)
    return -1;
  if ((mkdir(upper, 0755) != 0 && errno != EEXIST) || (mkdir(work, 0700) != 0 && errno != EEXIST))
    return -1;
  /* The upper layer's root is the merged root: the host's mode and owner. */
  {
    struct stat st;
    if (stat("/", &st) != 0 || copy_attrs("/", upper, &st) != 0)
      return -1;
  }
  for (i = 0; i < o->nhides; i++) {
    int covered = 0;
    /* Inside another hidden directory: already out of sight. */
    for (k = 0; k < o->nhides && !covered; k++)
      covered = k != i && strcmp(o->hides[k], o->hides[i]) != 0 && path_under(o->hides[i], o->hides[k]);
    if (!covered && hide_path(o, upper, o->hides[i]) != 0)
      return -1;
  }
  return 0;
}

static int mount_overlay(const char *upper, const char *work, const char *target) {
  char opts[3 * PATH_MAX];
  int n = snprintf(opts, sizeof(opts), "lowerdir=/,upperdir=%s,workdir=%s", upper, work);

  if (n < 0 || (size_t)n >= sizeof(opts)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  /* nodev: with CAP_MKNOD (Docker's set has it) a pod could otherwise make
   * a node for the host's disk anywhere it can write. */
  return mount("kubesim-root", target, "overlay", MS_NODEV, opts);
}

/* Binds host file <src> over the file <dst> (made empty first). */
static int bind_file(const char *src, const char *dst, unsigned long extra) {
  int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);

  if (fd < 0)
    return -1;
  close(fd);
  if (mount(src, dst, NULL, MS_BIND, NULL) != 0)
    return -1;
  if (extra != 0 && mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | extra, NULL) != 0)
    return -1;
  return 0;
}

/* /dev as a container runtime makes it: a tmpfs with the harmless nodes
 * (bound from the host: the tmpfs itself is nodev), a private devpts
 * instance for terminals, /dev/shm and the /proc/self/fd links. */
static int setup_dev(const char *root) {
  static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
  static const char *const links[][2] = {
      {"/proc/self/fd", "fd"},      {"/proc/self/fd/0", "stdin"},
      {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
      {"pts/ptmx", "ptmx"},
  };
  char dev[PATH_MAX], p[PATH_MAX], src[64];
  size_t i;

  if (join(dev, sizeof(dev), root, "/dev") != 0 || mkdir_all(dev, 0755) != 0 ||
      mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k") != 0)
    return -1;
  for (i = 0; i < FR_ARRAY_SIZE(nodes); i++) {
    snprintf(src, sizeof(src), "/dev/%s", nodes[i]);
    if (join(p, sizeof(p), dev, src + 4) != 0 || bind_file(src, p, 0) != 0)
      return -1;
  }
  for (i = 0; i < FR_ARRAY_SIZE(links); i++) {
    if (snprintf(p, sizeof(p), "%s/%s", dev, links[i][1]) >= (int)sizeof(p) ||
        symlink(links[i][0], p) != 0)
      return -1;
  }
  if (snprintf(p, sizeof(p), "%s/pts", dev) >= (int)sizeof(p) || mkdir(p, 0755) != 0 ||
      mount("devpts", p, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5") != 0)
    return -1;
  if (snprintf(p, sizeof(p), "%s/shm", dev) >= (int)sizeof(p) || mkdir(p, 01777) != 0 ||
      mount("shm", p, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=1777,size=64m") != 0)
    return -1;
  return 0;
}

/* A fresh /proc for the pod's PID namespace, with what Docker masks
 * (kernel memory, keys, timers: /dev/null bound over them) and what it
 * makes read-only (/proc/sys: host-wide tunables root could write). */
static int setup_proc(const char *root) {
  static const char *const masked[] = {"kcore", "keys", "timer_list", "sched_debug",
                                       "latency_stats", "timer_stats"};
  static const char *const readonly[] = {"sys", "sysrq-trigger", "irq", "bus", "fs",
                                         "asound", "acpi", "scsi"};
  const unsigned long ro = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
  char proc[PATH_MAX], p[PATH_MAX];
  struct stat st;
  size_t i;

  if (join(proc, sizeof(proc), root, "/proc") != 0 || mkdir_all(proc, 0555) != 0 ||
      mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
    return -1;
  for (i = 0; i < FR_ARRAY_SIZE(masked); i++) {
    if (snprintf(p, sizeof(p), "%s/%s", proc, masked[i]) >= (int)sizeof(p) || lstat(p, &st) != 0)
      continue;
    if (mount("/dev/null", p, NULL, MS_BIND, NULL) != 0)
      return -1;
  }
  for (i = 0; i < FR_ARRAY_SIZE(readonly); i++) {
    if (snprintf(p, sizeof(p), "%s/%s", proc, readonly[i]) >= (int)sizeof(p) || lstat(p, &st) != 0)
      continue;
    if (mount(p, p, NULL, MS_BIND | MS_REC, NULL) != 0 || mount(NULL, p, NULL, ro, NULL) != 0)
      return -1;
  }
  return 0;
}

/* Writes <len> bytes of <data> as the executable file <path>. */
static int write_exec(const char *path, const char *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0755);
  size_t off = 0;

  if (fd < 0)
    return -1;
  while (off < len) {
    ssize_t n = write(fd, data + off, len - off);
    if (n <= 0) {
      close(fd);
      return -1;
    }
    off += (size_t)n;
  }
  return close(fd);
}

/* The image's commands (podimage.c) in <merged>/usr/local/bin, in order (a
 * later entry of a name replaces an earlier one). The host's files are
 * still in sight here: the root has not been pivoted yet. */
static int make_image_commands(const struct helper_opts *o, const char *merged) {
  char dir[PATH_MAX], p[PATH_MAX];
  size_t i;

  if (o->nimage == 0)
    return 0;
  if (join(dir, sizeof(dir), merged, POD_IMAGE_BIN_DIR) != 0 || mkdir_all(dir, 0755) != 0)
    return -1;
  for (i = 0; i < o->nimage; i++) {
    const char *e = o->image[i], *eq = strchr(e, '='), *kind, *val;
    char name[NAME_MAX + 1];
    if (eq == NULL || eq == e || (size_t)(eq - e) > NAME_MAX || memchr(e, '/', (size_t)(eq - e)) != NULL)
      return -1;
    memcpy(name, e, (size_t)(eq - e));
    name[eq - e] = '\0';
    kind = eq + 1;
    val = strchr(kind, ':');
    if (val == NULL || snprintf(p, sizeof(p), "%s/%s", dir, name) >= (int)sizeof(p))
      return -1;
    val++;
    unlink(p);
    if (strncmp(kind, "link:", 5) == 0) {
      if (symlink(val, p) != 0)
        return -1;
    } else if (strncmp(kind, "script:", 7) == 0) {
      struct fr_buf b;
      int rc;
      fr_buf_init(&b);
      rc = fr_buf_printf(&b, "#!/bin/sh\n%s", val);
      rc = rc == 0 ? write_exec(p, b.data, b.len) : -1;
      fr_buf_free(&b);
      if (rc != 0)
        return -1;
    } else if (strncmp(kind, "copy:", 5) == 0) {
      /* A small file (kubesim checked it at start); read whole. */
      char buf[1 << 16];
      struct fr_buf b;
      ssize_t n;
      int fd = open(val, O_RDONLY | O_CLOEXEC), rc = 0;
      if (fd < 0)
        return -1;
      fr_buf_init(&b);
      while (rc == 0 && (n = read(fd, buf, sizeof(buf))) > 0)
        rc = fr_buf_append(&b, buf, (size_t)n);
      close(fd);
      rc = rc == 0 ? write_exec(p, b.data ? b.data : "", b.len) : -1;
      fr_buf_free(&b);
      if (rc != 0)
        return -1;
    } else {
      return -1;
    }
  }
  return 0;
}

/* The home of the pod's user, when the host's is hidden (under /home):
 * an empty directory of the user's own, as a fresh image would have. */
static int make_home(const struct helper_opts *o, const char *merged) {
  char home[PATH_MAX], p[PATH_MAX];
  struct stat st;
  size_t i;
  int hidden = 0;

  if (passwd_home(o->creds.uid, home, sizeof(home)) != 0 || strcmp(home, "/") == 0)
    return 0;
  for (i = 0; i < o->nhides && !hidden; i++)
    hidden = path_under(home, o->hides[i]);
  if (!hidden || join(p, sizeof(p), merged, home) != 0)
    return 0;
  if (lstat(p, &st) == 0)
    return 0; /* a hidden path itself (/root): already there */
  if (mkdir_all(p, 0755) != 0)
    return -1;
  return lchown(p, o->creds.uid, o->creds.gid);
}

/* Opens directory <rel> ("/"-separated, relative; "" is <at> itself)
 * beneath directory fd <at> one component at a time, never following a
 * symlink (one is ENOTDIR), making missing directories with <mode> when
 * <create>. An O_PATH descriptor, or -1 with errno. */
static int open_beneath(int at, const char *rel, int create, mode_t mode) {
  char buf[PATH_MAX], *comp, *save = NULL;
  int fd, nfd;

  if (strlen(rel) >= sizeof(buf)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, rel, strlen(rel) + 1);
  if ((fd = openat(at, ".", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
    return -1;
  for (comp = strtok_r(buf, "/", &save); comp != NULL; comp = strtok_r(NULL, "/", &save)) {
    if (strcmp(comp, ".") == 0 || strcmp(comp, "..") == 0) {
      close(fd);
      errno = EINVAL;
      return -1;
    }
    nfd = openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (nfd < 0 && errno == ENOENT && create) {
      if (mkdirat(fd, comp, mode) != 0 && errno != EEXIST) {
        close(fd);
        return -1;
      }
      nfd = openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    close(fd);
    if (nfd < 0)
      return -1;
    fd = nfd;
  }
  return fd;
}

/* Binds a claim's directory (or its subPath) at its mount path in the
 * pod's root <merged>: "MODE\nDST\nSUBPATH\nSRC" from volumes.c. Both ends
 * are walked without following symlinks (a link in the image, or one a pod
 * wrote into the volume, could otherwise aim the mount at this machine's
 * files); the mount is nosuid and nodev (the pod has CAP_MKNOD), read-only
 * for MODE "ro". 0, or -1 with errno. */
static int mount_volume(const char *merged, const char *spec) {
  char buf[PATH_MAX * 2], *mode, *dst, *sub, *src, *nl, a[64], b[64];
  int root = -1, vol = -1, from = -1, to = -1, again = -1, rc = -1;
  unsigned long ro;

  if (strlen(spec) >= sizeof(buf)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, spec, strlen(spec) + 1);
  mode = buf;
  if ((nl = strchr(mode, '\n')) == NULL)
    goto inval;
  *nl = '\0';
  dst = nl + 1;
  if ((nl = strchr(dst, '\n')) == NULL)
    goto inval;
  *nl = '\0';
  sub = nl + 1;
  if ((nl = strchr(sub, '\n')) == NULL)
    goto inval;
  *nl = '\0';
  src = nl + 1;
  if (dst[0] != '/' || src[0] != '/')
    goto inval;
  ro = strcmp(mode, "ro") == 0 ? MS_RDONLY : 0;
  if ((root = open(merged, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0 ||
      (vol = open(src, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
      (from = open_beneath(vol, sub, 1, 0777)) < 0 || (to = open_beneath(root, dst + 1, 1, 0755)) < 0)
    goto out;
  snprintf(a, sizeof(a), "/proc/self/fd/%d", from);
  snprintf(b, sizeof(b), "/proc/self/fd/%d", to);
  if (mount(a, b, NULL, MS_BIND, NULL) != 0)
    goto out;
  /* <to> is the directory under the mount; a new lookup finds the mount. */
  if ((again = open_beneath(root, dst + 1, 0, 0)) < 0)
    goto out;
  snprintf(b, sizeof(b), "/proc/self/fd/%d", again);
  if (mount(NULL, b, NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | ro, NULL) != 0)
    goto out;
  rc = 0;
out:
  {
    int err = errno;
    if (again >= 0)
      close(again);
    if (to >= 0)
      close(to);
    if (from >= 0)
      close(from);
    if (vol >= 0)
      close(vol);
    if (root >= 0)
      close(root);
    errno = err;
  }
  return rc;
inval:
  errno = EINVAL;
  return -1;
}

/* The pod's own view of the filesystem (its mount namespace is new): see
 * the file's comment. Ends inside the new root, in its working directory. */
static int setup_root(const struct helper_opts *o) {
  char base[PATH_MAX], merged[PATH_MAX], upper[PATH_MAX], work[PATH_MAX], p[PATH_MAX];
  const char *step = "";

  umask(0);
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
    step = "make / private";
    goto fail;
  }
  step = "prepare the upper layer";
  if (join(base, sizeof(base), o->poddir, "/root") != 0 || join(merged, sizeof(merged), base, "/merged") != 0 ||
      (mkdir(base, 0700) != 0 && errno != EEXIST) || (mkdir(merged, 0755) != 0 && errno != EEXIST))
    goto fail;
  if (prepare_upper(o, base, upper, sizeof(upper), work, sizeof(work)) != 0 ||
      mount_overlay(upper, work, merged) != 0) {
    int err = errno;
    /* The pod directory's filesystem cannot be an upper layer (itself an
     * overlay, say): keep the writes in a tmpfs of the pod's instead. */
    step = "mount the overlay (upper layer on a tmpfs)";
    if (mount("kubesim-upper", base, "tmpfs", MS_NOSUID | MS_NODEV, UPPER_TMPFS_OPTS) != 0 ||
        mkdir(merged, 0755) != 0 || prepare_upper(o, base, upper, sizeof(upper), work, sizeof(work)) != 0 ||
        mount_overlay(upper, work, merged) != 0)
      goto fail;
    say(o, "the pod directory cannot hold an overlay's upper layer (%s); its writes go to a tmpfs",
        strerror(err));
  }
  step = "mount /proc";
  if (setup_proc(merged) != 0)
    goto fail;
  step = "make /dev";
  if (setup_dev(merged) != 0)
    goto fail;
  /* Read-only; a sysfs of the pod's network namespace where it has one.
   * Nothing needs it badly: a failure leaves the empty directory. */
  if (join(p, sizeof(p), merged, "/sys") == 0 && mkdir_all(p, 0555) == 0)
    mount("sysfs", p, "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
  step = "bind the pod's run directory";
  {
    char run[PATH_MAX];
    if (join(run, sizeof(run), o->poddir, "/run") != 0 || join(p, sizeof(p), merged, POD_RUN_DIR) != 0 ||
        mkdir_all(p, 0755) != 0 || mount(run, p, NULL, MS_BIND, NULL) != 0 ||
        mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
      goto fail;
  }
  step = "make the image's commands";
  if (make_image_commands(o, merged) != 0)
    goto fail;
  step = "make the user's home";
  if (make_home(o, merged) != 0)
    goto fail;
  {
    size_t i;
    for (i = 0; i < o->nmounts; i++) {
      step = "mount a volume";
      if (mount_volume(merged, o->mounts[i]) != 0) {
        const char *d = strchr(o->mounts[i], '\n');
        say(o, "cannot mount the volume at %.*s: %s", d ? (int)strcspn(d + 1, "\n") : 0, d ? d + 1 : "",
            strerror(errno));
        goto fail;
      }
    }
  }
  step = "pivot_root";
  /* pivot_root(".", "."): the old root ends up on top of the new one and
   * is detached at once, so nothing of the host's mount tree is left. */
  if (chdir(merged) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 || umount2(".", MNT_DETACH) != 0 ||
      chdir("/") != 0)
    goto fail;
  if (o->hostname != NULL)
    sethostname(o->hostname, strlen(o->hostname));
  return 0;
fail:
  say(o, "cannot build the pod's root: %s: %s", step, strerror(errno));
  return -1;
}

/* ---------------------------------------------------------------------- */
/* the pod's network                                                       */

/* A network namespace of the pod's own with a veth pair to kubesim's
 * bridge: "ksv<address in hex>" on the host side (on the bridge, up),
 * eth0 with the pod's address in the pod (plus lo). No default route: the
 * range's own is all there is. <o->net> is "IP/PREFIX@BRIDGE". */
static int setup_net(const struct helper_opts *o) {
  char buf[64], veth[IF_NAMESIZE], *slash, *at;
  uint32_t ip;
  int prefix, host_ns = -1, pod_ns = -1, nl = -1, rc = -1, master, idx;
  struct in_addr a;

  if (strlen(o->net) >= sizeof(buf))
    return -1;
  memcpy(buf, o->net, strlen(o->net) + 1);
  slash = strchr(buf, '/');
  at = strchr(buf, '@');
  if (slash == NULL || at == NULL || at < slash)
    return -1;
  *slash = *at = '\0';
  if (inet_pton(AF_INET, buf, &a) != 1 || (prefix = small_int(slash + 1)) < 8 || prefix > 30)
    return -1;
  ip = ntohl(a.s_addr);
  snprintf(veth, sizeof(veth), "ksv%08x", ip);
  host_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (host_ns < 0 || unshare(CLONE_NEWNET) != 0)
    goto out;
  pod_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  /* The pair is made from the host's namespace, its peer straight in ours. */
  if (pod_ns < 0 || setns(host_ns, CLONE_NEWNET) != 0 || (nl = nl_open()) < 0)
    goto out;
  if ((master = nl_link_index(nl, at + 1)) < 0) {
    errno = -master;
    goto out;
  }
  rc = nl_veth_add(nl, veth, master, "eth0", pod_ns);
  if (rc == -EEXIST) {
    /* Left by a pod of this address whose namespace is still going. */
    nl_link_del(nl, veth);
    rc = nl_veth_add(nl, veth, master, "eth0", pod_ns);
  }
  if (rc == 0 && (idx = nl_link_index(nl, veth)) >= 0)
    rc = nl_link_up(nl, idx);
  close(nl);
  nl = -1;
  if (rc != 0 || setns(pod_ns, CLONE_NEWNET) != 0) {
    errno = rc != 0 ? -rc : errno;
    rc = -1;
    goto out;
  }
  rc = -1;
  if ((nl = nl_open()) < 0 || (idx = nl_link_index(nl, "lo")) < 0 || nl_link_up(nl, idx) != 0 ||
      (idx = nl_link_index(nl, "eth0")) < 0 || nl_addr_add(nl, idx, ip, prefix) != 0 ||
      nl_link_up(nl, idx) != 0) {
    errno = EIO;
    goto out;
  }
  rc = 0;
out:
  if (nl >= 0)
    close(nl);
  if (host_ns >= 0)
    close(host_ns);
  if (pod_ns >= 0)
    close(pod_ns);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* __pod-init                                                              */

/* Runs <cmd> (NULL: nothing) and reaps everything until it ends; then
 * returns its status as an exit code. <tree>: kill the tree on SIGTERM.
 * <exefd>: cmd[0] opened before the pod's mounts changed (-1: none), so the
 * agent binary runs though the host's directories are out of sight. */
static int init_loop(const struct helper_opts *o, int tree, int exefd) {
  char **cmd = o->cmd;
  pid_t main_pid = 0, w;
  int st, code = 0;

  if (cmd != NULL && cmd[0] != NULL) {
    main_pid = fork();
    if (main_pid < 0)
      return 126;
    if (main_pid == 0) {
      const char *what;
      child_signals_default();
      if (enter_pod_process(o, &what) != 0) {
        fprintf(stderr, "kubesim: %s: %s: %s\n", cmd[0], what, strerror(errno));
        _exit(128);
      }
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

  snprintf(path, sizeof(path), "%s/" POD_INIT_PID_FILE, poddir);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
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

static int pod_init_main(const struct helper_opts *o) {
  struct sigaction sa;
  int ready[2], st, exefd;
  pid_t child;
  char c;

  if (o->poddir == NULL || o->parent == 0)
    return 2;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_term;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  /* Die with kubesim, however it ends. */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != (pid_t)o->parent)
    return 1;
  if (!o->isolate) {
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    write_pid_file(o->poddir, getpid());
    return init_loop(o, 1, -1);
  }
  /* The PID namespace is the children's; init makes the others for
   * itself, so pivot_root moves nobody else's root. */
  if (unshare(CLONE_NEWPID) != 0) {
    say(o, "cannot make the pod's namespaces: %s", strerror(errno));
    return 1;
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
    /* Nothing of the pod may ptrace its init or read its /proc entries. */
    prctl(PR_SET_DUMPABLE, 0);
    /* Not O_CLOEXEC: fexecve of a script needs the fd alive past the exec. */
    exefd = o->cmd != NULL && o->cmd[0] != NULL && strchr(o->cmd[0], '/') != NULL
                ? open(o->cmd[0], O_RDONLY)
                : -1;
    if (unshare(CLONE_NEWNS | CLONE_NEWUTS) != 0) {
      say(o, "cannot make the pod's namespaces: %s", strerror(errno));
      _exit(1);
    }
    if (o->net != NULL && setup_net(o) != 0) {
      say(o, "cannot make the pod's network (%s): %s", o->net, strerror(errno));
      _exit(1);
    }
    if (setup_root(o) != 0)
      _exit(1);
    if (write(ready[1], "x", 1) != 1)
      _exit(1);
    close(ready[1]);
    _exit(init_loop(o, 0, exefd));
  }
  close(ready[1]);
  if (read(ready[0], &c, 1) == 1)
    write_pid_file(o->poddir, child);
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

/* ---------------------------------------------------------------------- */
/* __pod-enter                                                             */

/* Reports why the command could not start on fd 3 (when kubesim asked for
 * it), as runc words it; else on stderr. */
static void start_failed(const struct helper_opts *o, const char *text) {
  size_t n = strlen(text);

  if (o->ctl && write(3, text, n) == (ssize_t)n)
    return;
  fprintf(stderr, "%s\n", text);
}

/* Joins the namespaces of init <pid>; 0 or -1. */
static int join_pod(pid_t pid) {
  static const struct {
    const char *name;
    int type;
  } ns[] = {{"pid", CLONE_NEWPID}, {"net", CLONE_NEWNET}, {"uts", CLONE_NEWUTS}, {"mnt", CLONE_NEWNS}};
  char path[64];
  size_t i;

  for (i = 0; i < FR_ARRAY_SIZE(ns); i++) {
    int fd, rc;
    snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, ns[i].name);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return -1;
    rc = setns(fd, ns[i].type);
    close(fd);
    if (rc != 0)
      return -1;
  }
  return 0;
}

static int pod_enter_main(const struct helper_opts *o) {
  char buf[24] = "";
  int64_t init_pid = 0;
  int i, fd, st, ok = 0;
  ssize_t n;
  pid_t child;

  if (o->pidfile == NULL || o->cmd == NULL || o->cmd[0] == NULL)
    return 126;
  if (o->ctl && fcntl(3, F_SETFD, FD_CLOEXEC) != 0)
    return 126;
  /* The supervisor may have just been started by this very exec. */
  for (i = 0; i < 2000; i++) {
    fd = open(o->pidfile, O_RDONLY | O_CLOEXEC);
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
  if (!ok || join_pod((pid_t)init_pid) != 0) {
    /* The pod is going (its init is gone): nothing may run in it. */
    start_failed(o, "kubesim: cannot enter the pod's namespaces");
    return 126;
  }
  prctl(PR_SET_DUMPABLE, 0);
  child = fork();
  if (child < 0)
    return 126;
  if (child == 0) {
    struct fr_buf file, detail;
    const char *what, *path_env = getenv("PATH");
    char text[PATH_MAX + 256];
    int err;

    child_signals_default();
    if (enter_pod_process(o, &what) != 0) {
      snprintf(text, sizeof(text), "%s: %s", what, strerror(errno));
      start_failed(o, text);
      _exit(126);
    }
    fr_buf_init(&file);
    fr_buf_init(&detail);
    /* Found inside the pod, as its user: what runc does. */
    err = sim_exec_look_path(o->cmd[0], path_env ? path_env : "", NULL, &file, &detail);
    if (err != 0) {
      start_failed(o, err == -ENOENT && detail.data ? detail.data : "out of memory");
      _exit(127);
    }
    execv(file.data, o->cmd);
    err = errno;
    snprintf(text, sizeof(text), "exec %s: ", file.data);
    sim_exec_errno_text(err, text + strlen(text), sizeof(text) - strlen(text));
    start_failed(o, text);
    _exit(126);
  }
  /* Only the child reports; its exec closes fd 3. */
  if (o->ctl)
    close(3);
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

int pod_helper_main(int argc, char **argv) {
  struct helper_opts o;
  int rc = 2;

  if (parse_helper(argc, argv, &o) != 0)
    fprintf(stderr, "kubesim: %s: bad helper invocation\n", argv[1]);
  else if (strcmp(argv[1], "__pod-init") == 0)
    rc = pod_init_main(&o);
  else if (strcmp(argv[1], "__pod-enter") == 0)
    rc = pod_enter_main(&o);
  else
    fprintf(stderr, "kubesim: %s: bad helper invocation\n", argv[1]);
  fflush(stderr);
  _exit(rc);
}
