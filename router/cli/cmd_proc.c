/* cmd_proc.c - `fedctl proc`: background processes in a sandbox, through
 * its agent (docs/api.md "Inside a sandbox"): start one (its pid on
 * stdout), read or follow its output from any router replica, send it
 * stdin. `proc attach` is the session of `shell` on a running process
 * (cmd_shell.c); `proc ps` and `proc kill` are `ps` and `kill`.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "fedctl.h"
#include "fr/util.h"
#include "ndjson.h"

/* One stdin request carries at most this much; halved (down to
 * MIN_SEND) when the router's limits.max_body_bytes is smaller. */
#define MAX_SEND ((size_t)256 << 10)
#define MIN_SEND ((size_t)512)
/* A 429 agent_busy without Retry-After: try again after this long. */
#define BUSY_RETRY_S 1

static const char proc_usage[] =
    "usage: fedctl proc start ID [-i] [--pty] [--env K=V]... [--workdir D] [--timeout S]\n"
    "                        [--tag T] [--] COMMAND [ARG...]\n"
    "       fedctl proc logs ID PID [-f]\n"
    "       fedctl proc attach ID PID [-t]\n"
    "       fedctl proc stdin ID PID [--close]\n"
    "       fedctl proc ps ID                  (the same as fedctl ps)\n"
    "       fedctl proc kill ID PID [-s SIG]   (the same as fedctl kill)\n"
    "\n"
    "Background processes in sandbox ID, through its fedrouter agent. A process\n"
    "runs until it exits, is signalled, times out or the sandbox ends, whoever\n"
    "watches it; any router replica serves its output. `fedctl proc COMMAND\n"
    "--help` has the details of each.\n";

static const char start_usage[] =
    "usage: fedctl proc start ID [-i] [--pty] [--env K=V]... [--workdir D] [--timeout S]\n"
    "                        [--tag T] [--] COMMAND [ARG...]\n"
    "\n"
    "Starts COMMAND (argv as given, no shell) in the background in sandbox ID\n"
    "and prints its pid once it runs. Its output is kept by the agent (up to its\n"
    "buffer) until read: `fedctl proc logs ID PID [-f]` or `proc attach`.\n"
    "Options must come before the command; `--` when its first word starts with '-'.\n"
    "\n"
    "  -i, --stdin        keep the process's stdin open for `fedctl proc stdin`\n"
    "                     and `proc attach` (without it, it reads end of file)\n"
    "  --pty              run it on a pseudo-terminal (the size of yours, else\n"
    "                     80x24); stdout then carries the terminal's output and\n"
    "                     input is typed into it\n"
    "  --env K=V          environment variable (repeatable)\n"
    "  --workdir D        working directory inside the sandbox\n"
    "  --timeout S        kill it (and what it started) after S seconds\n"
    "                     (default: no limit but the sandbox's lifetime)\n"
    "  --tag T            a label shown by `fedctl ps` (1-128 bytes)\n"
    "  --json             print the API response ({\"pid\":N}) verbatim\n";

static const char logs_usage[] =
    "usage: fedctl proc logs ID PID [-f]\n"
    "\n"
    "Writes the output of process PID of sandbox ID: stdout to stdout, stderr\n"
    "to stderr, byte for byte. First what the agent kept while nobody read\n"
    "(a warning says how much was dropped when its buffer overflowed), then,\n"
    "with -f, the output as it comes until the process ends. Exits 0 without\n"
    "-f; with -f, with the process's exit status (124 when it timed out).\n"
    "Stopping fedctl never stops the process.\n"
    "\n"
    "  -f, --follow       follow the output until the process ends\n"
    "  --json             write the API's NDJSON lines verbatim instead\n";

static const char stdin_usage[] =
    "usage: fedctl proc stdin ID PID [--close]\n"
    "\n"
    "Sends fedctl's stdin, as it comes, to the stdin of process PID of sandbox\n"
    "ID (a process started with -i, or on a PTY, where it is typed into the\n"
    "terminal), in order, until fedctl's stdin ends. While the agent holds more\n"
    "than it can (the process does not read), fedctl waits and retries.\n"
    "\n"
    "  --close            then close the process's stdin (it reads end of file);\n"
    "                     with nothing on fedctl's stdin (</dev/null), only that\n";

/* ---------------------------------------------------------------------- */
/* shared                                                                  */

/* "ID PID" of <cmd>: the two positionals, the id checked and the pid
 * parsed. <opts> are the command's own; each of their ids is passed to
 * <on_opt> (may be NULL when there are none). Returns 0, or an exit
 * status (FC_EXIT_OK after --help). */
static int id_and_pid(struct fc_ctx *ctx, const char *cmd, const char *usage, const struct fc_opt *opts, int argc,
                      char **argv, const char **id, int64_t *pid, void (*on_opt)(int opt, void *arg), void *arg) {
  struct fc_args a;
  const char *val, *pid_s = NULL;
  int opt;

  *id = NULL;
  fc_args_init(&a, ctx, cmd, opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    switch (opt) {
    case FC_ARG_HELP:
      fputs(usage, stdout);
      return FC_EXIT_OK;
    case FC_ARG_ERR:
      return FC_EXIT_USAGE;
    case FC_ARG_POS:
      if (*id == NULL)
        *id = val;
      else if (pid_s == NULL)
        pid_s = val;
      else
        return fc_usage_error(cmd, "unexpected argument '%s'", val);
      break;
    default:
      on_opt(opt, arg);
    }
  }
  if (*id == NULL || pid_s == NULL)
    return fc_usage_error(cmd, "give the sandbox ID and the PID (fedctl %s ID PID)", cmd);
  if (fc_check_id(cmd, *id) != 0 || fc_parse_int(cmd, "PID", pid_s, 1, INT32_MAX, pid) != 0)
    return FC_EXIT_USAGE;
  if (fc_ctx_init(ctx) != 0)
    return FC_EXIT_USAGE;
  return 0;
}

/* "/v1/sandboxes/<id>/processes/<pid><suffix>" into <b>. */
static int proc_path(struct fr_buf *b, const char *id, int64_t pid, const char *suffix) {
  int rc = fc_sandbox_path(b, id, "/processes/");
  return rc ? rc : fr_buf_printf(b, "%" PRId64 "%s", pid, suffix);
}

/* ---------------------------------------------------------------------- */
/* start                                                                   */

enum { PS_STDIN = 1, PS_PTY, PS_TIMEOUT, PS_TAG };

static const struct fc_opt start_opts[] = {
    {"stdin", 'i', 0, PS_STDIN},      {"pty", 0, 0, PS_PTY}, {"timeout", 0, 1, PS_TIMEOUT},
    {"tag", 0, 1, PS_TAG},            {"env", 0, 1, FC_OPT_ENV},
    {"workdir", 0, 1, FC_OPT_WORKDIR}, {NULL, 0, 0, 0},
};

static int proc_start(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  struct fc_run run;
  struct fc_resp r;
  struct fr_buf path;
  const char *val;
  int opt, rc = FC_EXIT_USAGE, pty = 0;
  int64_t timeout_s;

  fc_resp_init(&r);
  fr_buf_init(&path);
  if (fc_run_init(&run, "proc start", start_usage) != 0) {
    rc = fc_oom();
    goto done;
  }
  fc_args_init(&a, ctx, "proc start", start_opts, argc, argv);
  while ((opt = fc_run_next(&run, &a, &val)) > 0) {
    switch (opt) {
    case PS_STDIN:
      json_object_set_new(run.body, "stdin", json_true());
      break;
    case PS_PTY:
      pty = 1;
      break;
    case PS_TIMEOUT:
      if (fc_parse_int("proc start", "--timeout", val, 1, FC_MAX_SECONDS, &timeout_s) != 0)
        goto done;
      json_object_set_new(run.body, "timeout_s", json_integer(timeout_s));
      break;
    case PS_TAG:
      if (*val == '\0' || strlen(val) > 128) {
        fc_usage_error("proc start", "--tag must be 1 to 128 bytes");
        goto done;
      }
      json_object_set_new(run.body, "tag", json_string(val));
      break;
    }
  }
  if (opt == FC_ARG_HELP || opt == FC_ARG_ERR) {
    rc = opt == FC_ARG_HELP ? FC_EXIT_OK : FC_EXIT_USAGE;
    goto done;
  }
  if (fc_run_finish(&run, NULL) != FC_EXIT_OK)
    goto done;
  if (pty) {
    struct winsize ws;
    int rows = 24, cols = 80;
    if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
      rows = ws.ws_row > 1000 ? 1000 : ws.ws_row;
      cols = ws.ws_col > 1000 ? 1000 : ws.ws_col;
    }
    json_object_set_new(run.body, "pty", json_pack("{s:i,s:i}", "cols", cols, "rows", rows));
  }
  if (fc_ctx_init(ctx) != 0)
    goto done;
  if (fc_sandbox_path(&path, run.id, "/processes") != 0) {
    rc = fc_oom();
    goto done;
  }
  if ((rc = fc_call(ctx, "POST", path.data, run.body, FC_CALL_TIMEOUT_S, &r)) != FC_EXIT_OK)
    goto done;
  if (!json_is_integer(json_object_get(r.json, "pid")) || fc_jint(r.json, "pid", 0) <= 0) {
    rc = fc_bad_answer(&r);
    goto done;
  }
  if (ctx->json)
    fc_print_body(&r);
  else
    printf("%" PRId64 "\n", fc_jint(r.json, "pid", 0));
done:
  fr_buf_free(&path);
  fc_resp_close(&r);
  fc_run_close(&run);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* logs                                                                    */

enum { PL_FOLLOW = 1 };

static const struct fc_opt logs_opts[] = {{"follow", 'f', 0, PL_FOLLOW}, {NULL, 0, 0, 0}};

static void set_flag(int opt, void *arg) {
  (void)opt;
  *(int *)arg = 1;
}

/* Output lines are written as they come; with --json every byte of the
 * answer goes to stdout as well and the reader only watches for the end. */
struct logs_sink {
  struct fc_nd nd;
  int raw;
};

static int logs_out(int fd, const void *data, size_t len, void *arg) {
  struct logs_sink *s = arg;
  return s->raw ? 0 : fc_write_all(fd, data, len);
}

static int logs_feed(const char *data, size_t len, void *arg) {
  struct logs_sink *s = arg;
  int rc;

  if (s->raw && (rc = fc_write_all(STDOUT_FILENO, data, len)) != 0)
    return rc;
  return fc_nd_feed(&s->nd, data, len);
}

static int proc_logs(struct fc_ctx *ctx, int argc, char **argv) {
  struct logs_sink s;
  struct fc_resp r;
  struct fc_sink k;
  struct fr_buf path;
  const char *id;
  int64_t pid;
  int follow = 0, rc;
  CURL *easy;
  CURLcode crc;

  if ((rc = id_and_pid(ctx, "proc logs", logs_usage, logs_opts, argc, argv, &id, &pid, set_flag, &follow)) != 0 ||
      id == NULL)
    return rc;
  fc_resp_init(&r);
  fr_buf_init(&path);
  memset(&s, 0, sizeof(s));
  s.raw = ctx->json;
  fc_nd_init(&s.nd, logs_out, &s);
  if (proc_path(&path, id, pid, follow ? "/output?follow=1" : "/output") != 0 || fc_ctx_easy(ctx, &easy) != 0 ||
      fc_easy_setup(ctx, easy, "GET", path.data, NULL, follow ? 0 : FC_CALL_TIMEOUT_S, &r) != 0) {
    rc = fc_oom();
    goto done;
  }
  /* A quiet process sends nothing for hours: keep the connection alive. */
  curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
  fc_sink_attach(&k, easy, &r, logs_feed, &s);
  crc = curl_easy_perform(easy);
  fc_sink_finish(&k, crc);
  if (!k.ok || k.err != 0 || crc != CURLE_OK) {
    rc = fc_sink_report(ctx, &k, k.err == -EPROTO ? "the router's answer is not the NDJSON of a process's output"
                                                    : "writing the output");
    goto done;
  }
  if (s.nd.lost_bytes > 0)
    fprintf(stderr, "fedctl: warning: %" PRId64 " bytes of output were dropped before this (the agent's buffer "
            "was full while nobody read)\n", s.nd.lost_bytes);
  if (s.nd.failed) {
    fprintf(stderr, "fedctl: %s: %s\n", s.nd.err_code, s.nd.err_msg);
    rc = FC_EXIT_FAIL;
  } else if (fc_nd_finish(&s.nd) != 0 || (!s.nd.ended && !s.nd.running)) {
    fprintf(stderr, "fedctl: the output ended before the process did\n");
    rc = FC_EXIT_FAIL;
  } else if (!follow) {
    rc = FC_EXIT_OK;
  } else if (s.nd.timed_out) {
    rc = FC_EXIT_TIMEDOUT;
  } else {
    /* Like a shell: 8 bits, never turning a failure into 0. */
    rc = (int)(s.nd.exit_code & 0xff);
    if (rc == 0 && s.nd.exit_code != 0)
      rc = 1;
  }
done:
  fc_nd_close(&s.nd);
  fr_buf_free(&path);
  fc_resp_close(&r);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* stdin                                                                   */

enum { PI_CLOSE = 1 };

static const struct fc_opt stdin_opts[] = {{"close", 0, 0, PI_CLOSE}, {NULL, 0, 0, 0}};

/* Posts <len> bytes of <data> (and the close when <close>) to <path>'s
 * stdin, waiting out agent_busy and shrinking *<chunk> when the router
 * finds the body too large. Sends everything or fails: returns an exit
 * status, the error printed. */
static int send_stdin(struct fc_ctx *ctx, const char *id, int64_t pid, const char *data, size_t len, int close_it,
                      size_t *chunk) {
  struct fr_buf path;
  struct fc_resp r;
  CURL *easy;
  CURLcode crc;
  int rc = FC_EXIT_OK;

  fr_buf_init(&path);
  fc_resp_init(&r);
  while (rc == FC_EXIT_OK && (len > 0 || close_it)) {
    size_t n = len < *chunk ? len : *chunk;
    int last = n == len && close_it;
    const char *code;

    fr_buf_reset(&path);
    fc_resp_close(&r);
    fc_resp_init(&r);
    if (proc_path(&path, id, pid, last ? "/stdin?close=1" : "/stdin") != 0 || fc_ctx_easy(ctx, &easy) != 0 ||
        fc_easy_setup_raw(ctx, easy, "POST", path.data, "application/octet-stream", n > 0 ? data : "", n,
                          FC_CALL_TIMEOUT_S, &r) != 0) {
      rc = fc_oom();
      break;
    }
    crc = curl_easy_perform(easy);
    fc_resp_finish(easy, crc, &r);
    code = fc_jstr(json_object_get(r.json, "error"), "code", "");
    if (r.status >= 200 && r.status <= 299) {
      data += n;
      len -= n;
      if (last)
        close_it = 0;
    } else if (r.status == 429 && strcmp(code, "agent_busy") == 0) {
      /* The process is not reading: wait as the router asks. */
      int64_t s = BUSY_RETRY_S;
      if (fr_parse_int64(r.retry_after, 1, 60, &s) != 0)
        s = BUSY_RETRY_S;
      sleep((unsigned)s);
    } else if (r.status == 413 && *chunk / 2 >= MIN_SEND) {
      *chunk /= 2;
    } else if (r.status == 409 && strcmp(code, "failed_precondition") == 0) {
      fc_report(ctx, &r);
      fprintf(stderr, "fedctl: hint: a process has a stdin to send to when started with `fedctl proc start -i` "
              "(or --pty), until it is closed\n");
      rc = FC_EXIT_FAIL;
    } else {
      rc = fc_report(ctx, &r);
    }
  }
  fc_resp_close(&r);
  fr_buf_free(&path);
  return rc;
}

static int proc_stdin(struct fc_ctx *ctx, int argc, char **argv) {
  const char *id;
  int64_t pid;
  int close_it = 0, rc = FC_EXIT_OK;
  size_t chunk = MAX_SEND;
  char *buf;

  if ((rc = id_and_pid(ctx, "proc stdin", stdin_usage, stdin_opts, argc, argv, &id, &pid, set_flag, &close_it)) !=
          0 ||
      id == NULL)
    return rc;
  if ((buf = malloc(MAX_SEND)) == NULL)
    return fc_oom();
  /* What read() returns goes at once: a pipe that trickles (a tail -f)
   * reaches the process line by line, not a buffer at a time. */
  for (;;) {
    ssize_t n = read(STDIN_FILENO, buf, chunk);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      fprintf(stderr, "fedctl: reading stdin: %s\n", strerror(errno));
      rc = FC_EXIT_FAIL;
      break;
    }
    if (n == 0) {
      if (close_it)
        rc = send_stdin(ctx, id, pid, buf, 0, 1, &chunk);
      break;
    }
    if ((rc = send_stdin(ctx, id, pid, buf, (size_t)n, 0, &chunk)) != FC_EXIT_OK)
      break;
  }
  free(buf);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* dispatch                                                                */

static const struct fc_opt no_opts[] = {{NULL, 0, 0, 0}};

int fc_cmd_proc(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  const char *val, *sub = NULL;
  int opt, rest;

  /* Global options may come before the subcommand; find it. */
  fc_args_init(&a, ctx, "proc", no_opts, argc, argv);
  while (sub == NULL && (opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    if (opt == FC_ARG_HELP) {
      fputs(proc_usage, stdout);
      return FC_EXIT_OK;
    }
    if (opt == FC_ARG_ERR)
      return FC_EXIT_USAGE;
    sub = val;
  }
  if (sub == NULL)
    return fc_usage_error("proc", "missing the subcommand (start, logs, attach, stdin, ps, kill)");
  rest = a.i;
  argc -= rest;
  argv += rest;
  if (strcmp(sub, "start") == 0)
    return proc_start(ctx, argc, argv);
  if (strcmp(sub, "logs") == 0)
    return proc_logs(ctx, argc, argv);
  if (strcmp(sub, "attach") == 0)
    return fc_proc_attach(ctx, argc, argv);
  if (strcmp(sub, "stdin") == 0)
    return proc_stdin(ctx, argc, argv);
  if (strcmp(sub, "ps") == 0 || strcmp(sub, "list") == 0 || strcmp(sub, "ls") == 0)
    return fc_cmd_ps(ctx, argc, argv);
  if (strcmp(sub, "kill") == 0)
    return fc_cmd_kill(ctx, argc, argv);
  return fc_usage_error("proc", "unknown subcommand '%s' (start, logs, attach, stdin, ps, kill)", sub);
}
