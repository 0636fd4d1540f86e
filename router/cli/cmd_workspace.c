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
