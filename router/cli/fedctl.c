/* fedctl.c - the fedrouter command-line client: global options, argument
 * parsing, flag validation and command dispatch.
 *
 * The commands live in cmd_sandbox.c (create, explain, exec, terminate,
 * ls), cmd_data.c (cp, ps, kill), cmd_proc.c (proc start, logs, stdin),
 * cmd_shell.c (shell, proc attach), cmd_ports.c (url, run-code) and
 * cmd_infra.c (pools, clusters, events, version); pod option flags in podargs.c; HTTP in client.c;
 * NDJSON answers in ndjson.c; tables in output.c.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fedctl.h"
#include "fr/labels.h"
#include "fr/util.h"
#include "fr/version.h"
#include "podargs.h"

#define FC_DEFAULT_URL "http://127.0.0.1:8080"

static const char usage_text[] =
    "usage: fedctl [GLOBAL OPTIONS] COMMAND [ARGS]\n"
    "\n"
    "Talks to a fedrouter: one endpoint in front of many Kubernetes clusters\n"
    "running code-execution sandboxes.\n"
    "\n"
    "Commands:\n"
    "  create      create one sandbox or a batch (-n N)\n"
    "  exec        run a command in a sandbox, its output streamed as it runs\n"
    "  shell       an interactive terminal session in a sandbox\n"
    "  cp          copy a file into or out of a sandbox (streamed, any size)\n"
    "  proc        background processes: start, logs, attach, stdin (and ps, kill)\n"
    "  ps          list the processes started in a sandbox\n"
    "  kill        signal a process in a sandbox\n"
    "  terminate   terminate sandboxes by id or by label\n"
    "  ls          list sandboxes\n"
    "  pools       list, create, resize, get and delete warm pools\n"
    "  clusters    show the clusters behind the router\n"
    "  explain     show where a create would go, and why (creates nothing)\n"
    "  events      recent spillover events of your creates\n"
    "  url         the URL of a port of a sandbox (preview URLs)\n"
    "  run-code    run Python from stdin in a code-interpreter sandbox\n"
    "  version     fedctl's version\n"
    "\n"
    "Global options (accepted before or after the command):\n"
    "  --url URL       router endpoint (env FEDROUTER_URL, default " FC_DEFAULT_URL ")\n"
    "  --token TOKEN   bearer token (env FEDROUTER_TOKEN)\n"
    "  --region R      preferred region (sent as X-Client-Region)\n"
    "  --json          print the API's JSON responses verbatim\n"
    "  --version       fedctl's version\n"
    "  -h, --help      this help; `fedctl COMMAND --help` for a command\n"
    "\n"
    "shell, cp, proc, ps and kill need the sandbox's fedrouter agent.\n"
    "\n"
    "Exit status:\n"
    "  0    success\n"
    "  1    the API answered with an error (its code and message on stderr),\n"
    "       or the router could not be reached\n"
    "  2    usage error: an unknown option, a bad value, a missing argument or a\n"
    "       malformed sandbox id, caught before anything is sent\n"
    "  N    exec, shell, proc attach and proc logs -f: the remote command's own\n"
    "       exit status (124 when it timed out and was killed; 128+S when fedctl\n"
    "       was ended by signal S)\n";

static void usage(FILE *f) {
  fputs(usage_text, f);
}

/* ---------------------------------------------------------------------- */
/* argument iteration                                                      */

enum { GOPT_URL = 1000, GOPT_TOKEN, GOPT_REGION, GOPT_JSON, GOPT_HELP, GOPT_VERSION };

static const struct fc_opt global_opts[] = {
    {"url", 0, 1, GOPT_URL},   {"token", 0, 1, GOPT_TOKEN}, {"region", 0, 1, GOPT_REGION},
    {"json", 0, 0, GOPT_JSON}, {"help", 'h', 0, GOPT_HELP}, {"version", 0, 0, GOPT_VERSION},
    {NULL, 0, 0, 0},
};

void fc_args_init(struct fc_args *a, struct fc_ctx *ctx, const char *cmd,
                  const struct fc_opt *opts, int argc, char **argv) {
  memset(a, 0, sizeof(*a));
  a->ctx = ctx;
  a->cmd = cmd;
  a->opts = opts;
  a->argc = argc;
  a->argv = argv;
}

int fc_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;

  fprintf(stderr, "fedctl%s%s: ", cmd ? " " : "", cmd ? cmd : "");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nRun 'fedctl%s%s --help' for usage.\n", cmd ? " " : "", cmd ? cmd : "");
  return FC_EXIT_USAGE;
}

/* Looks <name> (length <n>) or the short letter <c> up in <opts>. */
static const struct fc_opt *find_opt(const struct fc_opt *opts, const char *name, size_t n,
                                     char c) {
  if (opts == NULL)
    return NULL;
  for (; opts->name != NULL; opts++) {
    if (name != NULL && strlen(opts->name) == n && strncmp(opts->name, name, n) == 0)
      return opts;
    if (name == NULL && c != 0 && opts->short_name == c)
      return opts;
  }
  return NULL;
}

static int utf8_valid(const char *s) {
  json_t *j = json_string(s);
  int ok = j != NULL;
  json_decref(j);
  return ok;
}

static int apply_global(struct fc_args *a, const struct fc_opt *o, const char *val) {
  switch (o->id) {
  case GOPT_URL:
    a->ctx->url = val;
    break;
  case GOPT_TOKEN:
    a->ctx->token = val;
    break;
  case GOPT_REGION:
    if (*val == '\0')
      return fc_usage_error(a->cmd, "--region needs a non-empty value"), FC_ARG_ERR;
    a->ctx->region = val;
    break;
  case GOPT_JSON:
    a->ctx->json = 1;
    break;
  case GOPT_HELP:
    return FC_ARG_HELP;
  case GOPT_VERSION:
    /* main() reads the options before the command (cmd NULL) itself. */
    if (a->cmd != NULL)
      return fc_usage_error(a->cmd, "--version goes before the command (or run `fedctl version`)"), FC_ARG_ERR;
    return FC_ARG_VERSION;
  }
  return 0;
}

int fc_args_next(struct fc_args *a, const char **val) {
  for (;;) {
    const char *arg, *name, *eq;
    const struct fc_opt *o;
    size_t n;
    int global = 0;

    *val = NULL;
    if (a->i >= a->argc)
      return FC_ARG_END;
    arg = a->argv[a->i++];
    if (a->no_more_opts || arg[0] != '-' || arg[1] == '\0') {
      /* "-" alone is a positional (conventionally stdin). */
      a->pos_index = a->i - 1;
      *val = arg;
      return FC_ARG_POS;
    }
    if (strcmp(arg, "--") == 0) {
      a->no_more_opts = 1;
      continue;
    }
    if (arg[1] == '-') {
      name = arg + 2;
      eq = strchr(name, '=');
      n = eq ? (size_t)(eq - name) : strlen(name);
      o = find_opt(a->opts, name, n, 0);
      if (o == NULL && (o = find_opt(global_opts, name, n, 0)) != NULL)
        global = 1;
      if (o == NULL) {
        fc_usage_error(a->cmd, "unknown option --%.*s", (int)n, name);
        return FC_ARG_ERR;
      }
      if (o->has_arg) {
        if (eq != NULL) {
          *val = eq + 1;
        } else if (a->i < a->argc) {
          *val = a->argv[a->i++];
        } else {
          fc_usage_error(a->cmd, "option --%s needs a value", o->name);
          return FC_ARG_ERR;
        }
      } else if (eq != NULL) {
        fc_usage_error(a->cmd, "option --%s takes no value", o->name);
        return FC_ARG_ERR;
      }
    } else {
      /* "-x" or "-xVALUE"; no bundling of flags. */
      o = find_opt(a->opts, NULL, 0, arg[1]);
      if (o == NULL && (o = find_opt(global_opts, NULL, 0, arg[1])) != NULL)
        global = 1;
      if (o == NULL) {
        fc_usage_error(a->cmd, "unknown option %s", arg);
        return FC_ARG_ERR;
      }
      if (o->has_arg) {
        if (arg[2] != '\0') {
          *val = arg + 2;
        } else if (a->i < a->argc) {
          *val = a->argv[a->i++];
        } else {
          fc_usage_error(a->cmd, "option -%c needs a value", arg[1]);
          return FC_ARG_ERR;
        }
      } else if (arg[2] != '\0') {
        fc_usage_error(a->cmd, "unknown option %s", arg);
        return FC_ARG_ERR;
      }
    }
    /* Every value ends up in a JSON string or a URL: it must be text. */
    if (*val != NULL && !utf8_valid(*val)) {
      fc_usage_error(a->cmd, "the value of --%s is not valid UTF-8", o->name);
      return FC_ARG_ERR;
    }
    if (global) {
      int rc = apply_global(a, o, *val);
      if (rc != 0)
        return rc;
      continue;
    }
    return o->id;
  }
}

/* ---------------------------------------------------------------------- */
/* flag validation                                                         */

int fc_parse_int(const char *cmd, const char *flag, const char *s, int64_t min, int64_t max,
                 int64_t *out) {
  int rc = fr_parse_int64(s, min, max, out);

  if (rc == -ERANGE) {
    fc_usage_error(cmd, "%s: %s is out of range (%lld..%lld)", flag, s, (long long)min,
                   (long long)max);
    return -EINVAL;
  }
  if (rc != 0) {
    fc_usage_error(cmd, "%s: '%s' is not a whole number", flag, s);
    return -EINVAL;
  }
  return 0;
}

int fc_parse_double(const char *cmd, const char *flag, const char *s, double min, double max,
                    double *out) {
  char *end;
  double v;

  /* strtod alone accepts "inf", "nan", hex floats and leading spaces;
   * a flag value is plain decimal. */
  if (*s == '-') {
    fc_usage_error(cmd, "%s: %s is out of range (must be > 0)", flag, s);
    return -EINVAL;
  }
  if (*s == '\0' || strspn(s, "0123456789.") != strlen(s) || strchr(s, '.') != strrchr(s, '.')) {
    fc_usage_error(cmd, "%s: '%s' is not a number", flag, s);
    return -EINVAL;
  }
  errno = 0;
  v = strtod(s, &end);
  if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v)) {
    fc_usage_error(cmd, "%s: '%s' is not a number", flag, s);
    return -EINVAL;
  }
  if (v < min || v > max || (min == 0 && v == 0)) {
    fc_usage_error(cmd, "%s: %s is out of range (must be > 0 and <= %g)", flag, s, max);
    return -EINVAL;
  }
  *out = v;
  return 0;
}

int fc_check_label(const char *cmd, const char *s, const char **eq) {
  char key[320];
  const char *e = strchr(s, '=');
  size_t n;

  if (e == NULL || e == s) {
    fc_usage_error(cmd, "--label '%s': want KEY=VALUE", s);
    return -EINVAL;
  }
  n = (size_t)(e - s);
  if (n >= sizeof(key)) {
    fc_usage_error(cmd, "--label '%s': key too long", s);
    return -EINVAL;
  }
  memcpy(key, s, n);
  key[n] = '\0';
  if (!fr_label_key_valid(key)) {
    fc_usage_error(cmd,
                   "--label '%s': '%s' is not a valid label key (up to 63 of [A-Za-z0-9._-], "
                   "alphanumeric at both ends, optional DNS prefix and '/')",
                   s, key);
    return -EINVAL;
  }
  if (!fr_label_value_valid(e + 1)) {
    fc_usage_error(cmd,
                   "--label '%s': '%s' is not a valid label value (up to 63 of [A-Za-z0-9._-], "
                   "alphanumeric at both ends)",
                   s, e + 1);
    return -EINVAL;
  }
  *eq = e;
  return 0;
}

int fc_check_env(const char *cmd, const char *s, const char **eq) {
  const char *e = strchr(s, '=');

  if (e == NULL || e == s) {
    fc_usage_error(cmd, "--env '%s': want NAME=VALUE", s);
    return -EINVAL;
  }
  *eq = e;
  return 0;
}

/* The short form E2B shows (one DNS label of at most 57 characters
 * ending in "-" and the cluster's four-character code, docs/e2b.md). */
static int short_id_ok(const char *id) {
  size_t n = strlen(id);

  return n >= 6 && n <= 57 && strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789-") == n && id[0] != '-' &&
         id[n - 5] == '-' && strspn(id + n - 4, "abcdefghijklmnopqrstuvwxyz0123456789") == 4;
}

int fc_check_id(const char *cmd, const char *id) {
  const char *dot = strchr(id, '.');

  /* The router's rule (router/src/api.c): cluster and pod names are DNS
   * labels joined by the first '.'; anything else is 400 invalid_id. */
  if (dot == NULL && short_id_ok(id))
    return 0;
  if (dot == NULL || dot == id || dot[1] == '\0' || (size_t)(dot - id) > 63 || strlen(dot + 1) > 199 ||
      strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789-.") != strlen(id)) {
    fc_usage_error(cmd,
                   "'%s' is not a sandbox id: ids are <cluster>.<pod> (lowercase letters, digits, '-' and "
                   "'.'), as `fedctl ls` shows them, or their short form (<pod>-<code>, as E2B shows them)",
                   id);
    return -EINVAL;
  }
  return 0;
}

int fc_pod_opt(const char *cmd, int opt, const char *val, json_t *body) {
  char err[600];
  int rc;

  switch (opt) {
  case FC_OPT_GPUS:
    rc = fc_pod_set_gpus(body, val, err, sizeof(err));
    break;
  case FC_OPT_RUNTIME_CLASS:
    rc = fc_pod_set_runtime_class(body, val, err, sizeof(err));
    break;
  case FC_OPT_NODE_SELECTOR:
    rc = fc_pod_add_node_selector(body, val, err, sizeof(err));
    break;
  case FC_OPT_TOLERATION:
    rc = fc_pod_add_toleration(body, val, err, sizeof(err));
    break;
  case FC_OPT_VOLUME:
    rc = fc_pod_add_volume(body, val, err, sizeof(err));
    break;
  case FC_OPT_SECRET:
    rc = fc_pod_add_secret(body, val, err, sizeof(err));
    break;
  case FC_OPT_READINESS:
    rc = fc_pod_set_readiness(body, val, err, sizeof(err));
    break;
  case FC_OPT_PUBLIC_PORT:
    rc = fc_pod_add_public_port(body, val, err, sizeof(err));
    break;
  default:
    return -1;
  }
  if (rc == -ENOMEM)
    return fc_oom();
  if (rc != 0)
    return fc_usage_error(cmd, "%s", err);
  return 0;
}

int fc_obj_set_kv(json_t *obj, const char *kv, const char *eq) {
  char *key = strndup(kv, (size_t)(eq - kv));
  json_t *v = json_string(eq + 1);
  int rc;

  if (key == NULL || v == NULL) {
    free(key);
    json_decref(v);
    return -ENOMEM;
  }
  rc = json_object_set_new(obj, key, v);
  free(key);
  return rc == 0 ? 0 : -ENOMEM;
}

/* ---------------------------------------------------------------------- */
/* a command to run (exec, shell)                                          */

int fc_run_init(struct fc_run *r, const char *cmd, const char *usage) {
  memset(r, 0, sizeof(*r));
  r->cmd = cmd;
  r->usage = usage;
  r->body = json_object();
  r->env = json_object();
  return r->body != NULL && r->env != NULL ? 0 : -ENOMEM;
}

void fc_run_close(struct fc_run *r) {
  json_decref(r->env);
  json_decref(r->body);
  r->env = r->body = NULL;
}

int fc_run_next(struct fc_run *r, struct fc_args *a, const char **val) {
  const char *eq;
  int opt;

  while (r->argv == NULL && (opt = fc_args_next(a, val)) != FC_ARG_END) {
    switch (opt) {
    case FC_ARG_HELP:
      fputs(r->usage, stdout);
      return FC_ARG_HELP;
    case FC_ARG_POS:
      if (r->id == NULL) {
        r->id = *val;
      } else {
        /* The first word after the id starts the command: everything
         * from here on is its argv, options included. */
        r->argv = a->argv + a->pos_index;
        r->argc = a->argc - a->pos_index;
      }
      break;
    case FC_OPT_ENV:
      if (fc_check_env(r->cmd, *val, &eq) != 0)
        return FC_ARG_ERR;
      if (fc_obj_set_kv(r->env, *val, eq) != 0)
        return fc_oom(), FC_ARG_ERR;
      break;
    case FC_OPT_WORKDIR:
      if (**val == '\0')
        return fc_usage_error(r->cmd, "--workdir must not be empty"), FC_ARG_ERR;
      if (json_object_set_new(r->body, "workdir", json_string(*val)) != 0)
        return fc_usage_error(r->cmd, "--workdir is not valid UTF-8"), FC_ARG_ERR;
      break;
    default:
      return opt;   /* the command's own, or FC_ARG_ERR */
    }
  }
  return FC_ARG_END;
}

int fc_run_finish(struct fc_run *r, const char *dflt) {
  json_t *args = json_array(), *v;
  int i;

  if (r->id == NULL) {
    json_decref(args);
    return fc_usage_error(r->cmd, "missing sandbox ID");
  }
  if (fc_check_id(r->cmd, r->id) != 0) {
    json_decref(args);
    return FC_EXIT_USAGE;
  }
  if (r->argc == 0 && dflt == NULL) {
    json_decref(args);
    return fc_usage_error(r->cmd, "missing the command to run (fedctl %s ID -- COMMAND [ARG...])", r->cmd);
  }
  if (args == NULL)
    return fc_oom(), FC_EXIT_USAGE;
  for (i = 0; i < r->argc; i++) {
    if ((v = json_string(r->argv[i])) == NULL) {
      json_decref(args);
      return fc_usage_error(r->cmd, "argument %d is not valid UTF-8", i + 1);
    }
    json_array_append_new(args, v);
  }
  if (r->argc == 0)
    json_array_append_new(args, json_string(dflt));
  json_object_set_new(r->body, "argv", args);
  if (json_object_size(r->env) > 0)
    json_object_set(r->body, "env", r->env);
  return FC_EXIT_OK;
}

/* ---------------------------------------------------------------------- */
/* main                                                                    */

struct command {
  const char *name;
  int (*run)(struct fc_ctx *ctx, int argc, char **argv);
};

static const struct command commands[] = {
    {"create", fc_cmd_create},   {"exec", fc_cmd_exec},   {"terminate", fc_cmd_terminate},
    {"ls", fc_cmd_ls},           {"pools", fc_cmd_pools}, {"clusters", fc_cmd_clusters},
    {"explain", fc_cmd_explain}, {"cp", fc_cmd_cp},       {"ps", fc_cmd_ps},
    {"kill", fc_cmd_kill},       {"shell", fc_cmd_shell}, {"proc", fc_cmd_proc},
    {"events", fc_cmd_events},   {"version", fc_cmd_version}, {"url", fc_cmd_url},
    {"run-code", fc_cmd_run_code},
};

int main(int argc, char **argv) {
  struct fc_ctx ctx;
  struct fc_args a;
  const struct command *cmd = NULL;
  const char *val;
  int rc, first = -1;
  size_t i;

  memset(&ctx, 0, sizeof(ctx));
  ctx.url = getenv("FEDROUTER_URL");
  if (ctx.url == NULL || *ctx.url == '\0')
    ctx.url = FC_DEFAULT_URL;
  ctx.token = getenv("FEDROUTER_TOKEN");
  if (ctx.token != NULL && *ctx.token == '\0')
    ctx.token = NULL;
  ctx.stderr_tty = isatty(STDERR_FILENO);

  /* Global options before the command; the command gets the rest. */
  fc_args_init(&a, &ctx, NULL, NULL, argc - 1, argv + 1);
  for (;;) {
    rc = fc_args_next(&a, &val);
    if (rc == FC_ARG_POS) {
      first = a.pos_index;
      break;
    }
    if (rc == FC_ARG_HELP) {
      usage(stdout);
      return FC_EXIT_OK;
    }
    if (rc == FC_ARG_VERSION)
      return fc_cmd_version(&ctx, 0, NULL);
    if (rc == FC_ARG_ERR)
      return FC_EXIT_USAGE;
    if (rc == FC_ARG_END)
      break;
  }
  if (first < 0) {
    usage(stderr);
    return FC_EXIT_USAGE;
  }
  if (strcmp(argv[first + 1], "help") == 0) {
    usage(stdout);
    return FC_EXIT_OK;
  }
  for (i = 0; i < FR_ARRAY_SIZE(commands); i++)
    if (strcmp(commands[i].name, argv[first + 1]) == 0)
      cmd = &commands[i];
  if (cmd == NULL) {
    fprintf(stderr, "fedctl: unknown command '%s'\n\n", argv[first + 1]);
    usage(stderr);
    return FC_EXIT_USAGE;
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    fprintf(stderr, "fedctl: cannot initialise libcurl\n");
    return FC_EXIT_FAIL;
  }
  /* Commands see argv after their own name. */
  rc = cmd->run(&ctx, argc - first - 2, argv + first + 2);
  fc_ctx_close(&ctx);
  curl_global_cleanup();
  if (fflush(stdout) != 0 && rc == FC_EXIT_OK) {
    fprintf(stderr, "fedctl: writing output: %s\n", strerror(errno));
    rc = FC_EXIT_FAIL;
  }
  return rc;
}
