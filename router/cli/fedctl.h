/* fedctl.h - internals shared by the fedctl source files (not a public
 * header: fedctl is a program, not a library).
 *
 * Conventions: helpers return 0 or a negative errno (STYLE.md). The
 * command functions (fc_cmd_*) are the exception: they return the process
 * exit status directly, because that is what they decide:
 *   0   success
 *   1   the API answered with an error, or the router could not be reached
 *   2   usage error (bad flag, bad number, missing argument, a malformed
 *       sandbox id): caught before anything is sent
 *   N   `exec`, `shell`, `proc attach` and `proc logs -f`: the remote
 *       command's exit code (124 when timed out); ended by signal S:
 *       128 + S
 */
#ifndef FEDCTL_H
#define FEDCTL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <curl/curl.h>
#include <jansson.h>

#include "fr/buf.h"

#define FC_EXIT_OK 0
#define FC_EXIT_FAIL 1
#define FC_EXIT_USAGE 2
#define FC_EXIT_TIMEDOUT 124

/* Bounds for flag values. The router enforces its own configured limits
 * (max_batch, max_lifetime_s, ...); these only catch nonsense early. */
#define FC_MAX_BATCH 1000000
#define FC_MAX_REPLICAS 100000
#define FC_MAX_CPUS 1024.0
#define FC_MAX_MEMORY_GB 16384.0
#define FC_MAX_SECONDS (366LL * 86400)
/* Overall limit for simple calls (list, get, delete, pools): generous, but
 * a hung router must not hang a script forever. */
#define FC_CALL_TIMEOUT_S 120L

/* ---------------------------------------------------------------- context */

/* Everything a command needs: the global options and the HTTP client. One
 * per process, owned by main(). */
struct fc_ctx {
  const char *url;        /* as given (--url / FEDROUTER_URL / default) */
  char *base;             /* <url> without trailing slashes (owned) */
  const char *token;      /* NULL: send no Authorization header */
  const char *region;     /* NULL: send no X-Client-Region header */
  int json;               /* --json: print API bodies verbatim */
  int stderr_tty;         /* progress bars only on a terminal */
  CURL *easy;             /* reused for keep-alive across blocking calls */
};

/* ---------------------------------------------------------------- options */

/* One option of a command. <name> is the long name without "--";
 * <short_name> is 0 or the single-letter form. */
struct fc_opt {
  const char *name;
  char short_name;
  int has_arg;
  int id;                 /* > 0; returned by fc_args_next() */
};

/* Iterator over a command's arguments. Global options (--url, --token,
 * --json, --region) are accepted anywhere and stored in <ctx>. */
struct fc_args {
  struct fc_ctx *ctx;
  const char *cmd;        /* "create", "pools create", ... for messages */
  const struct fc_opt *opts; /* terminated by an entry with name NULL */
  int argc;
  char **argv;
  int i;                  /* next index to look at */
  int pos_index;          /* index in argv of the last positional returned */
  int no_more_opts;       /* after "--" */
};

enum {
  FC_ARG_END = 0,         /* no more arguments */
  FC_ARG_POS = -1,        /* a positional argument in *val */
  FC_ARG_ERR = -2,        /* usage error already printed: exit 2 */
  FC_ARG_HELP = -3,       /* --help / -h */
  FC_ARG_VERSION = -4     /* --version (before the command only) */
};

void fc_args_init(struct fc_args *a, struct fc_ctx *ctx, const char *cmd,
                  const struct fc_opt *opts, int argc, char **argv);
/* Returns an option id (with its value in *<val> when it takes one), or one
 * of FC_ARG_*. */
int fc_args_next(struct fc_args *a, const char **val);

/* Prints "fedctl <cmd>: <message>" and a hint to use --help on stderr;
 * returns FC_EXIT_USAGE. */
int fc_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Strict number parsing for flags; on error print a usage error naming
 * <flag> and return -EINVAL. */
int fc_parse_int(const char *cmd, const char *flag, const char *s, int64_t min, int64_t max,
                 int64_t *out);
int fc_parse_double(const char *cmd, const char *flag, const char *s, double min, double max,
                    double *out);
/* Checks "<k>=<v>" for --label (Kubernetes label syntax) or --env (any
 * non-empty key without '='); on error prints a usage error and returns
 * -EINVAL. Sets *<eq> to the '=' inside <s>. */
int fc_check_label(const char *cmd, const char *s, const char **eq);
int fc_check_env(const char *cmd, const char *s, const char **eq);
/* Checks that <id> can be a sandbox id (<cluster>.<pod>, the router's
 * rule); on error prints a usage error and returns -EINVAL. */
int fc_check_id(const char *cmd, const char *id);
/* Adds "K=V" to the JSON object <obj> (borrowed); 0 or -ENOMEM. */
int fc_obj_set_kv(json_t *obj, const char *kv, const char *eq);

/* What exec and shell share: "ID [--] COMMAND [ARG...]", --env K=V and
 * --workdir D, gathered into the request body. Their option tables carry
 * {"env", 0, 1, FC_OPT_ENV} and {"workdir", 0, 1, FC_OPT_WORKDIR}. */
enum { FC_OPT_ENV = 900, FC_OPT_WORKDIR };

/* The pod option flags (podargs.h) that create, explain and pools create
 * share: put FC_POD_OPTS in the option table and pass every option id to
 * fc_pod_opt(). --secret (FC_OPT_SECRET) is for creates only. */
enum { FC_OPT_GPUS = 950, FC_OPT_RUNTIME_CLASS, FC_OPT_NODE_SELECTOR, FC_OPT_TOLERATION, FC_OPT_VOLUME,
       FC_OPT_SECRET, FC_OPT_READINESS, FC_OPT_PUBLIC_PORT };
#define FC_POD_OPTS                                                                                  \
  {"gpus", 0, 1, FC_OPT_GPUS}, {"runtime-class", 0, 1, FC_OPT_RUNTIME_CLASS},                       \
      {"node-selector", 0, 1, FC_OPT_NODE_SELECTOR}, {"toleration", 0, 1, FC_OPT_TOLERATION},        \
      {"volume", 0, 1, FC_OPT_VOLUME}, {"readiness", 0, 1, FC_OPT_READINESS}
/* Adds option <opt> with <val> to <body> when it is one of the above:
 * returns 0 (added), -1 (not one of them: nothing done), or an exit
 * status after printing why (FC_EXIT_USAGE for a bad value). */
int fc_pod_opt(const char *cmd, int opt, const char *val, json_t *body);

struct fc_run {
  const char *cmd;        /* "exec", "shell": for messages */
  const char *usage;
  const char *id;         /* the sandbox; NULL until given */
  char **argv;            /* the command, from the first word after the id */
  int argc;
  json_t *body;           /* the request body (owned) */
  json_t *env;            /* (owned) */
};

/* <usage> is the command's --help text. 0 or -ENOMEM (fc_run_close() is
 * still due). */
int fc_run_init(struct fc_run *r, const char *cmd, const char *usage);
void fc_run_close(struct fc_run *r);
/* fc_args_next() that takes the id, the command (its first word and all
 * after it), --env and --workdir itself. Returns the id of another option
 * of the command (> 0, its value in *<val>), FC_ARG_END when the
 * arguments are used up, FC_ARG_HELP after printing the usage, or
 * FC_ARG_ERR after printing a usage error. */
int fc_run_next(struct fc_run *r, struct fc_args *a, const char **val);
/* Puts "argv" (each word checked to be UTF-8; <dflt> when no command was
 * given, a usage error when <dflt> is NULL too) and "env" into the body.
 * Returns FC_EXIT_OK, or FC_EXIT_USAGE with the error printed. */
int fc_run_finish(struct fc_run *r, const char *dflt);

/* --------------------------------------------------------------- HTTP/API */

/* One API response. */
struct fc_resp {
  long status;            /* HTTP status, 0 when no response arrived */
  struct fr_buf body;
  json_t *json;           /* the body parsed, when it is JSON; else NULL */
  CURLcode curl_rc;
  char err[CURL_ERROR_SIZE]; /* transport error text when curl_rc != 0 */
  char retry_after[32];   /* Retry-After header value, "" when absent */
  struct curl_slist *headers; /* request headers (owned until fc_resp_close) */
};

int fc_ctx_init(struct fc_ctx *ctx);
void fc_ctx_close(struct fc_ctx *ctx);

void fc_resp_init(struct fc_resp *r);
/* Releases everything; accepts NULL; the struct can be reused after
 * fc_resp_init(). */
void fc_resp_close(struct fc_resp *r);

/* Configures <easy> for one request "<method> <base><path>" with <body>
 * (borrowed, may be NULL; serialised and copied) whose answer goes to <r>.
 * <timeout_s> 0 means no overall limit (connect is always bounded).
 * For the blocking path and for curl multi. Returns 0 or -ENOMEM. */
int fc_easy_setup(struct fc_ctx *ctx, CURL *easy, const char *method, const char *path,
                  json_t *body, long timeout_s, struct fc_resp *r);
/* The same with a body of <len> bytes at <data> (borrowed, copied; NULL:
 * no body) of type <content_type> (NULL: no Content-Type header). */
int fc_easy_setup_raw(struct fc_ctx *ctx, CURL *easy, const char *method, const char *path,
                      const char *content_type, const void *data, size_t len, long timeout_s,
                      struct fc_resp *r);
/* Fills <r>'s status and parsed body once the transfer on <easy> ended with
 * <rc>. */
void fc_resp_finish(CURL *easy, CURLcode rc, struct fc_resp *r);

/* The context's easy handle (created on first use) in *<easy>, after
 * checking the URL; 0, -EINVAL (usage error printed) or -ENOMEM. */
int fc_ctx_easy(struct fc_ctx *ctx, CURL **easy);

/* Blocking request. Returns 0 when an HTTP answer arrived (any status),
 * -EIO when the router could not be reached (text in r->err), -ENOMEM. */
int fc_request(struct fc_ctx *ctx, const char *method, const char *path, json_t *body,
               long timeout_s, struct fc_resp *r);

/* fc_request() plus error reporting: returns FC_EXIT_OK for a 2xx answer,
 * else prints the error (see fc_report) and returns FC_EXIT_FAIL. */
int fc_call(struct fc_ctx *ctx, const char *method, const char *path, json_t *body,
            long timeout_s, struct fc_resp *r);
/* Prints why <r> failed: "fedctl: <code>: <message>" (plus the fields that
 * help: field, per-cluster reasons, Retry-After) or the transport error
 * with the URL. With --json the error body also goes to stdout verbatim.
 * Returns FC_EXIT_FAIL. */
int fc_report(struct fc_ctx *ctx, const struct fc_resp *r);
/* Print "out of memory" / "unexpected answer (HTTP n, ...)" on stderr;
 * return FC_EXIT_FAIL. */
int fc_oom(void);
int fc_bad_answer(const struct fc_resp *r);
/* Writes the body verbatim to stdout (newline-terminated). */
void fc_print_body(const struct fc_resp *r);

/* A successful answer's body as it arrives, in pieces: 0, or a negative
 * errno that stops the transfer. */
typedef int (*fc_data_cb)(const char *data, size_t len, void *arg);

/* Routes the body of the transfer on <easy> (set up with fc_easy_setup*)
 * to <cb> when the status is 2xx, else (an API error) into <r>'s body,
 * bounded. Nothing of a failed answer reaches <cb>. */
struct fc_sink {
  CURL *easy;
  struct fc_resp *r;
  fc_data_cb cb;
  void *arg;
  int decided;            /* the status is known */
  int ok;                 /* ... and it is 2xx */
  int err;                /* what <cb> returned, when it failed */
};

void fc_sink_attach(struct fc_sink *k, CURL *easy, struct fc_resp *r, fc_data_cb cb, void *arg);
/* After the transfer ended with <rc>: fills <r> as fc_resp_finish() does
 * and decides ok for a body-less answer. */
void fc_sink_finish(struct fc_sink *k, CURLcode rc);
/* Prints why a sink transfer failed: <cb>'s error (prefixed by <what>), a
 * stream cut after it began, or the API error (fc_report). Returns
 * FC_EXIT_FAIL. */
int fc_sink_report(struct fc_ctx *ctx, const struct fc_sink *k, const char *what);

/* Writes all <len> bytes to <fd>, through EINTR and EAGAIN; 0 or -errno. */
int fc_write_all(int fd, const void *data, size_t len);

/* Appends <s> percent-encoded for a path segment or query value. */
int fc_buf_put_escaped(struct fr_buf *b, const char *s);
/* Appends "?<key>=<val>" or "&<key>=<val>" to <b>, <val> escaped. */
int fc_add_query(struct fr_buf *b, const char *key, const char *val);
/* Appends "/v1/sandboxes/<escaped id><suffix>" to <b>. */
int fc_sandbox_path(struct fr_buf *b, const char *id, const char *suffix);

/* --------------------------------------------------------------------- cp */

struct stat;

/* Appends "/v1/sandboxes/<id>/files?path=<path>[<tail>]" to <b>. */
int fc_files_path(struct fr_buf *b, const char *id, const char *path, const char *tail);
/* Uploads <fd> (open for reading, borrowed; <local> names it in messages,
 * <st> is its fstat: a regular file's size goes in Content-Length) to
 * <rpath> in sandbox <id>, streamed. The bytes sent in *<sent> (may be
 * NULL). Returns an exit status, the error printed. */
int fc_cp_put(struct fc_ctx *ctx, int fd, const char *local, const struct stat *st, const char *id,
              const char *rpath, int64_t *sent);
/* Downloads <rpath> of sandbox <id> into the file <local> (NULL: stdout),
 * streamed. The file is opened only once the answer is known good (a
 * failed copy never truncates it); one this call created is removed on
 * failure and is created with <mode> (the umask applies). The bytes
 * written in *<got> (may be NULL). Returns an exit status, the error
 * printed, and the HTTP status of a refused answer in *<status> (may be
 * NULL; left alone otherwise). */
int fc_cp_get(struct fc_ctx *ctx, const char *id, const char *rpath, const char *local, unsigned mode,
              int64_t *got, long *status);
/* 1 when <rpath> of sandbox <id> lists as a directory, 0 when not (or when
 * that cannot be told); prints nothing. */
int fc_cp_remote_is_dir(struct fc_ctx *ctx, const char *id, const char *rpath);
/* cp -r (cp_tree.c): the tree at <local> into <rpath> of sandbox <id>, or
 * the tree at <rpath> into <local>; the destination rules are cp -r's
 * (cp_usage in cmd_data.c). <verbose>: one line per file on stderr.
 * Return an exit status, the error printed, or -ENOTDIR (nothing printed)
 * when the source is no directory: then it is one file to copy. */
int fc_cp_tree_up(struct fc_ctx *ctx, const char *local, const char *id, const char *rpath, int verbose);
int fc_cp_tree_down(struct fc_ctx *ctx, const char *id, const char *rpath, const char *local, int verbose);

/* ----------------------------------------------------------------- output */

/* A text table: cells are copied; columns are left-aligned, two spaces
 * apart, like kubectl. */
struct fc_table {
  size_t ncols;
  size_t ncells;
  size_t cap;
  char **cells;
};

int fc_table_init(struct fc_table *t, size_t ncols);
void fc_table_close(struct fc_table *t);
/* Appends one cell; rows wrap every ncols cells. 0 or -ENOMEM. */
int fc_table_add(struct fc_table *t, const char *cell);
int fc_table_addf(struct fc_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fc_table_print(const struct fc_table *t, FILE *f);

/* String member <key> of <obj>, or <dflt> when absent or not a string. */
const char *fc_jstr(const json_t *obj, const char *key, const char *dflt);
/* Integer member (or real, truncated), or <dflt>. */
int64_t fc_jint(const json_t *obj, const char *key, int64_t dflt);
/* Number member as double, or <dflt>. */
double fc_jnum(const json_t *obj, const char *key, double dflt);
/* Prints a JSON number compactly ("1", "0.5", "2.25") into <out>. */
void fc_fmt_num(double v, char *out, size_t outlen);
/* Prints the pod options (gpus, runtime_class, node_selector, tolerations,
 * volumes) that the object <obj> has, one "<indent><name>: <compact JSON>"
 * line each, aligned like print_pool's fields. */
void fc_print_pod_options(const json_t *obj, const char *indent);
/* A duration in seconds the way kubectl shows ages: 45s, 2m30s, 15m,
 * 3h5m, 2d3h. Negative durations print as "-". */
void fc_fmt_duration(int64_t s, char *out, size_t outlen);

/* --------------------------------------------------------------- commands */

int fc_cmd_create(struct fc_ctx *ctx, int argc, char **argv);
int fc_cmd_exec(struct fc_ctx *ctx, int argc, char **argv);
int fc_cmd_terminate(struct fc_ctx *ctx, int argc, char **argv);
int fc_cmd_ls(struct fc_ctx *ctx, int argc, char **argv);
int fc_cmd_explain(struct fc_ctx *ctx, int argc, char **argv);
/* cmd_ports.c */
int fc_cmd_url(struct fc_ctx *ctx, int argc, char **argv);
int fc_cmd_run_code(struct fc_ctx *ctx, int argc, char **argv);
int fc_cmd_pools(struct fc_ctx *ctx, int argc, char **argv);
int fc_cmd_clusters(struct fc_ctx *ctx, int argc, char **argv);
int fc_cmd_cp(struct fc_ctx *ctx, int argc, char **argv);
int fc_cmd_ps(struct fc_ctx *ctx, int argc, char **argv);
int fc_cmd_kill(struct fc_ctx *ctx, int argc, char **argv);
int fc_cmd_shell(struct fc_ctx *ctx, int argc, char **argv);
int fc_cmd_proc(struct fc_ctx *ctx, int argc, char **argv);
int fc_cmd_events(struct fc_ctx *ctx, int argc, char **argv);
int fc_cmd_version(struct fc_ctx *ctx, int argc, char **argv);
/* `proc attach` (cmd_shell.c: the session of `shell` on a running
 * process). */
int fc_proc_attach(struct fc_ctx *ctx, int argc, char **argv);

#endif
