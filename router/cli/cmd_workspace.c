/* cmd_workspace.c - fedctl pause and fedctl resume: sandboxes with a
 * workspace (docs/api.md, "Workspaces, pause and resume"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/buf.h"
#include "fedctl.h"

static const char pause_usage[] =
    "usage: fedctl pause ID...\n"
    "\n"
    "Pauses sandboxes created with a workspace (create --workspace): each\n"
    "one's pod goes, its workspace stays (its memory and processes do not).\n"
    "It is listed as paused until resumed, terminated, or its tenant's\n"
    "max_paused_s passes. Exits 1 if any could not be paused.\n";

static const char resume_usage[] =
    "usage: fedctl resume ID...\n"
    "\n"
    "Resumes paused sandboxes: the same id and cluster, the env and secrets\n"
    "they were created with, their workspace as it was; returns once each is\n"
    "exec-ready. A running sandbox is left as it is. Exits 1 if any could not\n"
    "be resumed.\n";

static const struct fc_opt no_opts[] = {{NULL, 0, 0, 0}};

/* "pause" or "resume" of every id given, one after the other. */
static int run(struct fc_ctx *ctx, const char *cmd, const char *usage, const char *suffix, long timeout_s,
               int argc, char **argv) {
  struct fc_args a;
  struct fc_resp r;
  struct fr_buf path;
  const char **ids = NULL;
  const char *val;
  size_t nids = 0, i;
  int opt, rc = FC_EXIT_USAGE;

  fc_resp_init(&r);
  fr_buf_init(&path);
  if ((ids = calloc((size_t)argc + 1, sizeof(*ids))) == NULL) {
    rc = fc_oom();
    goto done;
  }
  fc_args_init(&a, ctx, cmd, no_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    if (opt == FC_ARG_HELP) {
      fputs(usage, stdout);
      rc = FC_EXIT_OK;
      goto done;
    }
    if (opt == FC_ARG_ERR)
      goto done;
    if (opt == FC_ARG_POS)
      ids[nids++] = val;
  }
  if (nids == 0) {
    fc_usage_error(cmd, "give one or more sandbox IDs");
    goto done;
  }
  for (i = 0; i < nids; i++)
    if (fc_check_id(cmd, ids[i]) != 0)
      goto done;
  if (fc_ctx_init(ctx) != 0)
    goto done;
  rc = FC_EXIT_OK;
  for (i = 0; i < nids; i++) {
    json_t *body = json_object();
    int one;
    fc_resp_close(&r);
    fc_resp_init(&r);
    fr_buf_reset(&path);
    if (body == NULL || fc_sandbox_path(&path, ids[i], suffix) != 0) {
      json_decref(body);
      rc = fc_oom();
      goto done;
    }
    one = fc_call(ctx, "POST", path.data, body, timeout_s, &r);
    json_decref(body);
    if (one != FC_EXIT_OK) {
      rc = FC_EXIT_FAIL;
      if (r.status == 0)
        break;
      continue;
    }
    if (ctx->json)
      fc_print_body(&r);
    else
      printf("%s %s (%s)\n", strcmp(cmd, "pause") == 0 ? "paused" : "resumed", fc_jstr(r.json, "id", ids[i]),
             fc_jstr(r.json, "state", "?"));
  }
done:
  fc_resp_close(&r);
  fr_buf_free(&path);
  free(ids);
  return rc;
}

int fc_cmd_pause(struct fc_ctx *ctx, int argc, char **argv) {
  return run(ctx, "pause", pause_usage, "/pause", FC_CALL_TIMEOUT_S, argc, argv);
}

int fc_cmd_resume(struct fc_ctx *ctx, int argc, char **argv) {
  /* A resume starts a pod: as long as a create may take. */
  return run(ctx, "resume", resume_usage, "/resume", FC_CALL_TIMEOUT_S * 10, argc, argv);
}

static const char fork_usage[] =
    "usage: fedctl fork ID [-n N] [--path /DIR]... [--name NAME] [--pool P | --image IMG] [--label k=v]...\n"
    "\n"
    "Makes N new sandboxes (default 1) and copies directories of sandbox ID\n"
    "into each (--path, repeatable; default /workspace), streamed agent to\n"
    "agent; all or nothing, and ID keeps running. The new sandboxes are the\n"
    "source's pool, or its image and shape, unless --pool or --image say.\n"
    "Prints the new sandboxes' ids.\n";

enum { K_NUM = 1, K_PATH, K_NAME, K_POOL, K_IMAGE, K_LABEL };

static const struct fc_opt fork_opts[] = {
    {"num", 'n', 1, K_NUM}, {"path", 0, 1, K_PATH},   {"name", 0, 1, K_NAME},
    {"pool", 0, 1, K_POOL}, {"image", 0, 1, K_IMAGE}, {"label", 0, 1, K_LABEL}, {NULL, 0, 0, 0},
};

int fc_cmd_fork(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  struct fc_resp r;
  struct fr_buf path;
  const char *val, *id = NULL, *eq;
  json_t *body = json_object(), *paths = json_array(), *labels = json_object(), *sb;
  int64_t n = 1;
  int opt, rc = FC_EXIT_USAGE;
  size_t i;

  fc_resp_init(&r);
  fr_buf_init(&path);
  if (body == NULL || paths == NULL || labels == NULL) {
    rc = fc_oom();
    goto done;
  }
  fc_args_init(&a, ctx, "fork", fork_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    switch (opt) {
    case FC_ARG_HELP:
      fputs(fork_usage, stdout);
      rc = FC_EXIT_OK;
      goto done;
    case FC_ARG_ERR:
      goto done;
    case FC_ARG_POS:
      if (id != NULL) {
        fc_usage_error("fork", "one sandbox ID");
        goto done;
      }
      id = val;
      break;
    case K_NUM:
      if (fc_parse_int("fork", "-n", val, 1, 100000, &n) != 0)
        goto done;
      break;
    case K_PATH:
      if (val[0] != '/') {
        fc_usage_error("fork", "--path '%s': an absolute directory", val);
        goto done;
      }
      json_array_append_new(paths, json_string(val));
      break;
    case K_NAME:
      json_object_set_new(body, "name", json_string(val));
      break;
    case K_POOL:
      json_object_set_new(body, "pool", json_string(val));
      break;
    case K_IMAGE:
      json_object_set_new(body, "image", json_string(val));
      break;
    case K_LABEL:
      if ((eq = strchr(val, '=')) == NULL || eq == val) {
        fc_usage_error("fork", "--label '%s': want k=v", val);
        goto done;
      }
      if (fc_obj_set_kv(labels, val, eq) != 0) {
        rc = fc_oom();
        goto done;
      }
      break;
    }
  }
  if (id == NULL) {
    fc_usage_error("fork", "give the source sandbox's ID");
    goto done;
  }
  if (fc_check_id("fork", id) != 0 || fc_ctx_init(ctx) != 0)
    goto done;
  if (json_array_size(paths) == 0)
    json_array_append_new(paths, json_string("/workspace"));
  json_object_set_new(body, "count", json_integer(n));
  json_object_set(body, "paths", paths);
  if (json_object_size(labels) > 0)
    json_object_set(body, "labels", labels);
  if (fc_sandbox_path(&path, id, "/fork") != 0) {
    rc = fc_oom();
    goto done;
  }
  rc = fc_call(ctx, "POST", path.data, body, FC_CALL_TIMEOUT_S * 10, &r);
  if (rc != FC_EXIT_OK)
    goto done;
  if (ctx->json) {
    fc_print_body(&r);
    goto done;
  }
  json_array_foreach(json_object_get(r.json, "sandboxes"), i, sb)
    printf("%s\n", fc_jstr(sb, "id", "?"));
done:
  fc_resp_close(&r);
  fr_buf_free(&path);
  json_decref(body);
  json_decref(paths);
  json_decref(labels);
  return rc;
}
