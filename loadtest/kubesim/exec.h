/* exec.h - pods/exec for kubesim: the Kubernetes exec WebSocket protocols
 * on top of fr/http.h, running argv as a real local process, or through a
 * no-fork fast path for trivial commands.
 *
 * Channel protocol (KUBE_PROTOCOL.md section 1): every message is a binary
 * frame whose first byte is the channel: 0 stdin, 1 stdout, 2 stderr,
 * 3 status (JSON Status), 4 resize, 255 close (v5 only: "FF <ch>" half-closes
 * that stream; "FF 00" is stdin EOF). At the end the server sends remaining
 * output, then the channel-3 Status, then a close frame 1000, then closes.
 * Served as a real cluster serves them: v5.channel.k8s.io (kubectl),
 * v4.channel.k8s.io (the official Python client, client-go before v5), the
 * older channel.k8s.io (channel 3 carries only a failure's message) and the
 * base64 variants v4.base64.channel.k8s.io and base64.channel.k8s.io (text
 * frames: the channel as an ASCII digit, the payload in base64). Clients may
 * send text frames in the binary protocols too (the Python client sends
 * stdin given as a str so); they are read like binary ones.
 *
 * Processes belong to a pod's exec set. Closing the WebSocket does NOT kill a
 * process (as on a real node, non-tty); deleting the pod does
 * (sim_exec_set_kill()).
 */
#ifndef KUBESIM_EXEC_H
#define KUBESIM_EXEC_H

#include <stddef.h>
#include <uv.h>

struct fr_http_req;
struct sim_exec;

/* The processes of one pod; embedded in the pod, zero-initialised is valid. */
struct sim_exec_set {
  struct sim_exec *head;   /* intrusive list of live execs */
  size_t nprocs;           /* processes still running */
  /* Process groups of every command started in the pod, kept after the
   * exec ends: a command may leave background processes behind (`cmd &`),
   * and a pod's deletion must stop those too, as a container runtime
   * does. Groups found empty are pruned when the array fills. */
  int *groups;
  size_t ngroups, groups_cap;
  size_t forked;           /* commands ever started as processes (kept by _kill) */
};

struct sim_exec_params {
  char **argv;            /* NULL-terminated, borrowed for the call */
  char **env;             /* NULL-terminated "K=V", borrowed for the call */
  const char *cwd;        /* per-pod working directory; must exist */
  int in, out, err, tty;  /* the stdin/stdout/stderr/tty query flags */
  int fast_path;          /* allow the no-fork path for trivial commands */
  const char *protocol;   /* negotiated subprotocol (sim_exec_protocol()); "" = none */
  /* NULL, or a NULL-terminated argv prefix the command is run through: the
   * pod's namespace entry helper, which finds argv[0] itself (argv follows
   * the prefix as given) and reports a command it cannot start, in runc's
   * words, on its fd 3 (a pipe kubesim reads to EOF). Borrowed for the
   * call. */
  char **wrap;
};

/* Picks the subprotocol to answer an upgrade whose Sec-WebSocket-Protocol
 * header is <offered> (NULL when absent) with, as a 1.30+ API server and the
 * kubelet behind it do: v5.channel.k8s.io if it is offered anywhere, else the
 * first offered one this server speaks; "" (the kubelet's binary pre-v4
 * default, answered without the header) when the header is absent or blank.
 * Returns a static string, or NULL when nothing offered is spoken here. */
const char *sim_exec_protocol(const char *offered);

/* Takes over <req> (a WebSocket upgrade already validated by the caller: pod
 * exists and is running): accepts the upgrade with p->protocol, starts the
 * command (or runs the fast path), and streams until the command ends.
 * A command that cannot be started (not found, not executable) is reported
 * the way a kubelet does: Status Failure on channel 3, message
 * "... executable file not found in $PATH", then close.
 * Returns 0 or a negative error, in which case the caller still owns <req>
 * and should answer it. */
int sim_exec_start(uv_loop_t *loop, struct fr_http_req *req,
                   const struct sim_exec_params *p, struct sim_exec_set *set);

/* Sends <signum> to every process group ever started in the set (live
 * execs and what finished execs left running) and detaches the live ones:
 * their WebSockets finish as the processes die, and the memory is released
 * when they are reaped. Frees the group list. Safe with an empty set. After
 * this the set may be discarded. */
void sim_exec_set_kill(struct sim_exec_set *set, int signum);

/* Returns 1 if argv is handled by the fast path (echo, true, false,
 * sh -c 'exit N', sh -c 'echo ...'), producing exactly what the real command
 * would. Exposed for tests. */
int sim_exec_is_fast(char *const *argv);

struct fr_buf;

/* Resolves <name> the way runc does (Go exec.LookPath with the process
 * environment's PATH <path_env>, "" meaning unset), so a missing command
 * gives the message a node gives. On success <file> holds the path to exec
 * (relative ones are relative to <cwd>, NULL = the current directory) and 0
 * is returned; on failure <detail> holds the runc error text and -ENOENT is
 * returned; -ENOMEM otherwise. Both buffers borrowed. No loop needed: the
 * pod's namespace entry helper calls it too. */
int sim_exec_look_path(const char *name, const char *path_env, const char *cwd,
                       struct fr_buf *file, struct fr_buf *detail);

/* Go's syscall error text for errno <err> (strerror with a lower-case first
 * letter) into <out> of <n> bytes. */
void sim_exec_errno_text(int err, char *out, size_t n);

/* The fast path's model of a command, without running anything: appends to
 * <out> what <argv> would write on stdout and stores its exit code in
 * <*exit_code> (these commands never write on stderr). Pure: no I/O, no loop,
 * no logging, so tests can compare it with the real programs.
 * Returns 0, -EINVAL if <argv> is not a fast-path command (exactly when
 * sim_exec_is_fast() returns 0), or -ENOMEM (<out> may then hold part of the
 * output). <out> is borrowed. */
int sim_exec_fast_output(char *const *argv, struct fr_buf *out, int *exit_code);

#endif
