/* cmd_secret.c - `fedctl secret set|ls|rm` (/v1/secrets) and `fedctl
 * queue` (/v1/queue).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fedctl.h"
#include "fr/util.h"

static const char secret_usage[] =
    "usage: fedctl secret set KEY [VALUE | --from-file PATH | --stdin] [--cluster C]...\n"
    "       fedctl secret ls [--cluster C]...\n"
    "       fedctl secret rm KEY [--cluster C]...\n"
    "\n"
    "Your tenant's secrets, kept in its Kubernetes Secret in every member cluster\n"
    "(or only those named with --cluster). A create names them with --secret KEY\n"
    "and its sandboxes get them as environment variables. `ls` shows the keys'\n"
    "names and where each is set, never a value.\n"
    "\n"
    "  VALUE              the value (it lands in your shell's history: prefer\n"
    "                     --from-file or --stdin)\n"
    "  --from-file PATH   the value is the file's bytes, as they are\n"
    "  --stdin            the value is what stdin holds, as it is (printf %s, not\n"
    "                     echo, unless the newline is wanted)\n"
    "  --cluster C        only cluster C (repeatable)\n"
    "  --json             print the API response verbatim\n"
    "\n"
    "KEY is an environment variable name: a letter or '_', then letters, digits\n"
    "or '_'. A value is UTF-8 text without NUL bytes, at most 128 KiB.\n";

enum { S_FILE = 1, S_STDIN, S_CLUSTER };

static const struct fc_opt secret_opts[] = {
    {"from-file", 0, 1, S_FILE}, {"stdin", 0, 0, S_STDIN}, {"cluster", 0, 1, S_CLUSTER}, {NULL, 0, 0, 0},
};

/* The most a value may hold (the router's SECRETS_MAX_BYTES). */
#define VALUE_MAX (128 * 1024)

/* Reads all of <f> (at most VALUE_MAX + 1 bytes) into <b>: 0, or 1 after
 * printing why not. */
static int read_value(FILE *f, const char *what, struct fr_buf *b) {
  char chunk[8192];
  size_t n;

  while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
    if (fr_buf_append(b, chunk, n) != 0)
      return fc_oom();
    if (b->len > VALUE_MAX) {
      fprintf(stderr, "fedctl secret set: %s holds more than %d bytes, the most a secret's value may\n", what,
              VALUE_MAX);
      return FC_EXIT_USAGE;
    }
  }
  if (ferror(f)) {
    fprintf(stderr, "fedctl secret set: cannot read %s\n", what);
    return FC_EXIT_FAIL;
  }
  return 0;
}

/* "<base>?clusters=a,b" into <b>. */
static int secrets_path(struct fr_buf *b, const char *key, const struct fr_buf *clusters) {
  int rc = fr_buf_puts(b, "/v1/secrets");

  if (rc == 0 && key != NULL)
    rc = fr_buf_putc(b, '/') || fc_buf_put_escaped(b, key);
  if (rc == 0 && clusters->len > 0)
    rc = fc_add_query(b, "clusters", clusters->data);
  return rc != 0 ? -ENOMEM : 0;
}

/* One line per cluster of a write's answer. */
static void print_clusters(const json_t *body) {
  const json_t *c;
  size_t i;

  json_array_foreach(json_object_get(body, "clusters"), i, c)
    printf("  %-20s %s\n", fc_jstr(c, "cluster", "?"), fc_jstr(c, "status", "?"));
}

static int secret_write(struct fc_ctx *ctx, const char *method, const char *key, const struct fr_buf *value,
                        const struct fr_buf *clusters) {
  struct fc_resp r;
  struct fr_buf path;
  CURL *easy;
  CURLcode cc;
  int rc;

  fc_resp_init(&r);
  fr_buf_init(&path);
  if (secrets_path(&path, key, clusters) != 0) {
    rc = fc_oom();
    goto done;
  }
  if (value == NULL) {
    rc = fc_call(ctx, method, path.data, NULL, FC_CALL_TIMEOUT_S, &r);
  } else {
    if (fc_ctx_easy(ctx, &easy) != 0) {
      rc = FC_EXIT_USAGE;
      goto done;
    }
    if (fc_easy_setup_raw(ctx, easy, method, path.data, "application/octet-stream", value->data ? value->data : "",
                          value->len, FC_CALL_TIMEOUT_S, &r) != 0) {
      rc = fc_oom();
      goto done;
    }
    cc = curl_easy_perform(easy);
    fc_resp_finish(easy, cc, &r);
    rc = cc == CURLE_OK && r.status >= 200 && r.status < 300 ? FC_EXIT_OK : fc_report(ctx, &r);
  }
  if (rc != FC_EXIT_OK)
    goto done;
  if (ctx->json) {
    fc_print_body(&r);
  } else {
    printf("%s %s in Secret %s:\n", value != NULL ? "set" : "removed", key, fc_jstr(r.json, "secret", "?"));
    print_clusters(r.json);
  }
done:
  fr_buf_free(&path);
  fc_resp_close(&r);
  return rc;
}

static int secret_ls(struct fc_ctx *ctx, const struct fr_buf *clusters) {
  struct fc_resp r;
  struct fc_table t;
  struct fr_buf path, where, missing;
  const json_t *k, *c;
  size_t i, j;
  int rc;

  fc_resp_init(&r);
  fr_buf_init(&path);
  fc_table_init(&t, 3);
  if (secrets_path(&path, NULL, clusters) != 0) {
    rc = fc_oom();
    goto done;
  }
  rc = fc_call(ctx, "GET", path.data, NULL, FC_CALL_TIMEOUT_S, &r);
  if (rc != FC_EXIT_OK)
    goto done;
  if (ctx->json) {
    fc_print_body(&r);
    goto done;
  }
  if (!json_is_array(json_object_get(r.json, "keys"))) {
    rc = fc_bad_answer(&r);
    goto done;
  }
  if (json_array_size(json_object_get(r.json, "keys")) == 0) {
    fprintf(stderr, "No secrets in Secret %s.\n", fc_jstr(r.json, "secret", "?"));
    goto done;
  }
  fc_table_add(&t, "KEY");
  fc_table_add(&t, "CLUSTERS");
  fc_table_add(&t, "MISSING IN");
  json_array_foreach(json_object_get(r.json, "keys"), i, k) {
    fr_buf_init(&where);
    fr_buf_init(&missing);
    json_array_foreach(json_object_get(k, "clusters"), j, c)
      fr_buf_printf(&where, "%s%s", where.len ? "," : "", json_string_value(c));
    json_array_foreach(json_object_get(k, "missing"), j, c)
      fr_buf_printf(&missing, "%s%s", missing.len ? "," : "", json_string_value(c));
    fc_table_add(&t, fc_jstr(k, "name", "?"));
    fc_table_add(&t, where.len ? where.data : "-");
    fc_table_add(&t, missing.len ? missing.data : "-");
    fr_buf_free(&where);
    fr_buf_free(&missing);
  }
  fc_table_print(&t, stdout);
done:
  fc_table_close(&t);
  fr_buf_free(&path);
  fc_resp_close(&r);
  return rc;
}

int fc_cmd_secret(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  struct fr_buf clusters, value;
  const char *val, *sub = NULL, *key = NULL, *inline_value = NULL, *file = NULL;
  int opt, rc = FC_EXIT_USAGE, from_stdin = 0, npos = 0;

  fr_buf_init(&clusters);
  fr_buf_init(&value);
  fc_args_init(&a, ctx, "secret", secret_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    switch (opt) {
    case FC_ARG_HELP:
      fputs(secret_usage, stdout);
      rc = FC_EXIT_OK;
      goto done;
    case FC_ARG_ERR:
      goto done;
    case S_FILE:
      file = val;
      break;
    case S_STDIN:
      from_stdin = 1;
      break;
    case S_CLUSTER:
      if (val[0] == '\0' || strchr(val, ',') != NULL) {
        fc_usage_error("secret", "--cluster takes one cluster name");
        goto done;
      }
      fr_buf_printf(&clusters, "%s%s", clusters.len ? "," : "", val);
      break;
    case FC_ARG_POS:
      if (npos == 0)
        sub = val;
      else if (npos == 1)
        key = val;
      else if (npos == 2)
        inline_value = val;
      else {
        fc_usage_error("secret", "unexpected argument '%s'", val);
        goto done;
      }
      npos++;
      break;
    default:
      goto done;
    }
  }
  if (sub == NULL) {
    fc_usage_error("secret", "missing the subcommand (set, ls, rm)");
    goto done;
  }
  if (strcmp(sub, "ls") == 0 || strcmp(sub, "list") == 0) {
    if (key != NULL || file != NULL || from_stdin) {
      fc_usage_error("secret ls", "takes no KEY, VALUE, --from-file or --stdin");
      goto done;
    }
    if (fc_ctx_init(ctx) != 0)
      goto done;
    rc = secret_ls(ctx, &clusters);
    goto done;
  }
  if (strcmp(sub, "set") != 0 && strcmp(sub, "rm") != 0 && strcmp(sub, "delete") != 0) {
    fc_usage_error("secret", "unknown subcommand '%s' (set, ls, rm)", sub);
    goto done;
  }
  if (key == NULL) {
    fc_usage_error("secret", "missing the KEY");
    goto done;
  }
  if (strcmp(sub, "set") != 0) {
    if (inline_value != NULL || file != NULL || from_stdin) {
      fc_usage_error("secret rm", "takes only a KEY");
      goto done;
    }
    if (fc_ctx_init(ctx) != 0)
      goto done;
    rc = secret_write(ctx, "DELETE", key, NULL, &clusters);
    goto done;
  }
  if ((inline_value != NULL) + (file != NULL) + from_stdin != 1) {
    fc_usage_error("secret set", "give the value once: VALUE, --from-file PATH or --stdin");
    goto done;
  }
  if (inline_value != NULL) {
    if (fr_buf_puts(&value, inline_value) != 0) {
      rc = fc_oom();
      goto done;
    }
  } else if (file != NULL) {
    FILE *f = fopen(file, "rb");
    if (f == NULL) {
      fprintf(stderr, "fedctl secret set: cannot open %s: %s\n", file, strerror(errno));
      rc = FC_EXIT_FAIL;
      goto done;
    }
    rc = read_value(f, file, &value);
    fclose(f);
    if (rc != 0)
      goto done;
  } else if ((rc = read_value(stdin, "stdin", &value)) != 0) {
    goto done;
  }
  rc = FC_EXIT_USAGE;
  if (fc_ctx_init(ctx) != 0)
    goto done;
  rc = secret_write(ctx, "PUT", key, &value, &clusters);
done:
  /* The value is a secret: not left in freed memory. */
  if (value.data != NULL)
    explicit_bzero(value.data, value.len);
  fr_buf_free(&value);
  fr_buf_free(&clusters);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* queue                                                                   */

static const char queue_usage[] =
    "usage: fedctl queue\n"
    "\n"
    "The create queue and the fair share (GET /v1/queue): per tenant (only yours\n"
    "unless your token is an admin's) its weight, its share of the federation\n"
    "(the larger of its cpu and memory fractions), the creates and sandboxes\n"
    "waiting for room and the oldest wait, what it holds, and its execs running\n"
    "and waiting for a slot.\n";

static const struct fc_opt no_opts[] = {{NULL, 0, 0, 0}};

int fc_cmd_queue(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  struct fc_resp r;
  struct fc_table t;
  const json_t *arr, *e, *tot;
  const char *val;
  int opt, rc;
  size_t i;

  fc_args_init(&a, ctx, "queue", no_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    if (opt == FC_ARG_HELP) {
      fputs(queue_usage, stdout);
      return FC_EXIT_OK;
    }
    if (opt == FC_ARG_ERR)
      return FC_EXIT_USAGE;
    return fc_usage_error("queue", "unexpected argument '%s'", val);
  }
  if (fc_ctx_init(ctx) != 0)
    return FC_EXIT_USAGE;
  fc_resp_init(&r);
  fc_table_init(&t, 9);
  rc = fc_call(ctx, "GET", "/v1/queue", NULL, FC_CALL_TIMEOUT_S, &r);
  if (rc != FC_EXIT_OK)
    goto done;
  if (ctx->json) {
    fc_print_body(&r);
    goto done;
  }
  arr = json_object_get(r.json, "tenants");
  if (!json_is_array(arr)) {
    rc = fc_bad_answer(&r);
    goto done;
  }
  fc_table_add(&t, "TENANT");
  fc_table_add(&t, "WEIGHT");
  fc_table_add(&t, "SHARE");
  fc_table_add(&t, "WAITING");
  fc_table_add(&t, "SANDBOXES");
  fc_table_add(&t, "OLDEST");
  fc_table_add(&t, "HOLDS");
  fc_table_add(&t, "EXECS");
  fc_table_add(&t, "EXECS WAITING");
  json_array_foreach(arr, i, e) {
    const json_t *qj = json_object_get(e, "queue"), *h = json_object_get(e, "holds");
    const json_t *cj = json_object_get(e, "creating"), *x = json_object_get(e, "exec_queue");
    fc_table_add(&t, fc_jstr(e, "tenant", "?"));
    fc_table_addf(&t, "%" PRId64, fc_jint(e, "weight", 1));
    fc_table_addf(&t, "%.1f%%", 100.0 * fc_jnum(e, "share", 0));
    fc_table_addf(&t, "%" PRId64, fc_jint(qj, "creates", 0));
    fc_table_addf(&t, "%" PRId64, fc_jint(qj, "sandboxes", 0));
    fc_table_addf(&t, "%.1fs", fc_jnum(qj, "oldest_wait_s", 0));
    fc_table_addf(&t, "%" PRId64 " (+%" PRId64 ")", fc_jint(h, "sandboxes", 0), fc_jint(cj, "sandboxes", 0));
    fc_table_addf(&t, "%" PRId64, fc_jint(cj, "execs", 0));
    fc_table_addf(&t, "%" PRId64, fc_jint(x, "waiting", 0));
  }
  fc_table_print(&t, stdout);
  tot = json_object_get(r.json, "total");
  printf("\n%" PRId64 " creates of %" PRId64 " sandboxes waiting (at most %" PRId64 "), %" PRId64
         " execs waiting\n",
         fc_jint(tot, "creates", 0), fc_jint(tot, "sandboxes", 0), fc_jint(tot, "max_sandboxes", 0),
         fc_jint(tot, "execs_waiting", 0));
done:
  fc_table_close(&t);
  fc_resp_close(&r);
  return rc;
}
