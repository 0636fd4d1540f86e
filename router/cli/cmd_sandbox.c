/* cmd_sandbox.c - the sandbox commands: create (with a live progress bar
 * for batches), exec (streamed, or buffered), terminate and ls.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fedctl.h"
#include "fr/util.h"
#include "ndjson.h"

/* How often a batch create polls the list for progress (the brief: 250 ms). */
#define FC_POLL_MS 250

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------------- */
/* create                                                                  */

static const char create_usage[] =
    "usage: fedctl create [-n N] [--name NAME] [--pool P] [--image IMG] [--cpus C]\n"
    "                     [--memory-gb G] [--region R] [--cluster C]... [--label k=v]...\n"
    "                     [--env K=V]... [--secret NAME]... [--timeout S] [--partial-ok]\n"
    "                     [--gpus N] [--runtime-class NAME] [--node-selector k=v]...\n"
    "                     [--toleration KEY[=VALUE][:EFFECT[:SECONDS]]]...\n"
    "                     [--volume /PATH=CLAIM]... [--readiness PORT[/PATH]]\n"
    "                     [--public-port PORT|*]...\n"
    "\n"
    "Creates one sandbox or a batch (POST /v1/sandboxes) and returns when every\n"
    "sandbox is exec-ready. Prints one line per sandbox and where they went.\n"
    "\n"
    "  -n, --num N        number of sandboxes (batch names are NAME-0001, ...)\n"
    "  --name NAME        base name (router default: sandbox)\n"
    "  --pool P           claim warm pods from pool P (its image and shape apply)\n"
    "  --image IMG        image for cold starts (required without --pool)\n"
    "  --cpus C           cpus per sandbox (e.g. 0.5, 2)\n"
    "  --memory-gb G      memory per sandbox in GB\n"
    "  --region R         preferred region (also sent as X-Client-Region); one the\n"
    "                     router does not know is placed with no preference, and\n"
    "                     fedctl warns\n"
    "  --cluster C        restrict placement to cluster C (repeatable)\n"
    "  --label k=v        label the sandboxes (repeatable)\n"
    "  --env K=V          environment variable (repeatable)\n"
    "  --secret NAME      environment variable NAME with the value of key NAME of\n"
    "                     your tenant's Kubernetes Secret (repeatable; needs the\n"
    "                     agent; the value is never shown)\n"
    "  --timeout S        lifetime in seconds (enforced in the cluster)\n"
    "  --partial-ok       keep what could be created instead of rolling back\n"
    "  --public-port PORT this port of the sandbox takes no token (repeatable, up\n"
    "                     to 16; * for every port); see `fedctl url`\n"
    "  --json             print the API response verbatim\n"
    "\n"
    "Pod options (placement uses only clusters that can host such pods; a pool's\n"
    "warm pods serve only creates with the pool's own options):\n"
    "  --gpus N           GPUs per sandbox, 0 to 64\n"
    "  --runtime-class NAME\n"
    "                     the pod's RuntimeClass (e.g. gvisor)\n"
    "  --node-selector k=v\n"
    "                     only nodes with this label (repeatable, up to 16)\n"
    "  --toleration T     tolerate node taints (repeatable, up to 16):\n"
    "                       KEY=VALUE   a taint KEY=VALUE (VALUE may be empty)\n"
    "                       KEY         a taint KEY with any value\n"
    "                       *           every taint\n"
    "                     each optionally :EFFECT (NoSchedule, PreferNoSchedule,\n"
    "                     NoExecute; without it every effect), and after\n"
    "                     :NoExecute optionally :SECONDS (how long the pod stays\n"
    "                     on a node that gets the taint, 0 to 31536000)\n"
    "  --volume /PATH=CLAIM\n"
    "                     mount PersistentVolumeClaim CLAIM of the sandbox\n"
    "                     namespace at /PATH (repeatable, up to 8)\n"
    "  --readiness PORT[/PATH]\n"
    "                     the pod is Ready once HTTP GET /PATH (default /) on PORT\n"
    "                     answers, e.g. 49999/health for the Code Interpreter\n"
    "\n"
    "For a batch, a progress bar on stderr (when it is a terminal) counts the\n"
    "sandboxes of the batch that are already running.\n";

enum { C_NUM = 1, C_NAME, C_POOL, C_IMAGE, C_CPUS, C_MEM, C_CLUSTER, C_LABEL, C_ENV, C_TIMEOUT,
       C_PARTIAL };

static const struct fc_opt create_opts[] = {
    {"num", 'n', 1, C_NUM},         {"name", 0, 1, C_NAME},           {"pool", 0, 1, C_POOL},
    {"image", 0, 1, C_IMAGE},       {"cpus", 0, 1, C_CPUS},           {"memory-gb", 0, 1, C_MEM},
    {"cluster", 0, 1, C_CLUSTER},   {"label", 0, 1, C_LABEL},         {"env", 0, 1, C_ENV},
    {"timeout", 0, 1, C_TIMEOUT},   {"partial-ok", 0, 0, C_PARTIAL},  {"secret", 0, 1, FC_OPT_SECRET},
    {"public-port", 0, 1, FC_OPT_PUBLIC_PORT}, FC_POD_OPTS,           {NULL, 0, 0, 0},
};

/* Progress of a batch create, measured by listing the batch's sandboxes
 * while the create request is in flight. */
struct progress {
  int64_t total;
  int64_t start_ms;
  int64_t last_draw_ms;
  char *path;          /* GET /v1/sandboxes?name_prefix=<name>- */
  char **baseline;     /* sorted ids that matched before the create began */
  size_t nbaseline;
  int enabled;         /* 0 once the list endpoint said it cannot help */
  int64_t running, pending;
};

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void progress_close(struct progress *p) {
  size_t i;
  for (i = 0; i < p->nbaseline; i++)
    free(p->baseline[i]);
  free(p->baseline);
  free(p->path);
}

static int in_baseline(const struct progress *p, const char *id) {
  return p->nbaseline > 0 &&
         bsearch(&id, p->baseline, p->nbaseline, sizeof(char *), cmp_str) != NULL;
}

/* Takes a list answer: either records it as the baseline, or counts the
 * batch's running and pending sandboxes. */
static void progress_take(struct progress *p, const struct fc_resp *r, int baseline) {
  const json_t *arr, *sb;
  size_t i;
  int64_t running = 0, pending = 0;

  if (r->status >= 400 && r->status < 500) {
    /* The list endpoint is missing or refuses us: no signal to show. */
    p->enabled = 0;
    return;
  }
  arr = r->status == 200 && r->json ? json_object_get(r->json, "sandboxes") : NULL;
  if (!json_is_array(arr))
    return; /* transient (5xx, timeout): try again next tick */
  if (baseline) {
    p->baseline = calloc(json_array_size(arr) + 1, sizeof(char *));
    if (p->baseline == NULL)
      return;
    json_array_foreach(arr, i, sb) {
      const char *id = fc_jstr(sb, "id", NULL);
      if (id != NULL && (p->baseline[p->nbaseline] = strdup(id)) != NULL)
        p->nbaseline++;
    }
    qsort(p->baseline, p->nbaseline, sizeof(char *), cmp_str);
    return;
  }
  json_array_foreach(arr, i, sb) {
    const char *id = fc_jstr(sb, "id", NULL), *state = fc_jstr(sb, "state", "");
    if (id == NULL || in_baseline(p, id))
      continue;
    if (strcmp(state, "running") == 0)
      running++;
    else if (strcmp(state, "pending") == 0)
      pending++;
  }
  p->running = running;
  p->pending = pending;
}

static void progress_draw(struct progress *p, int64_t now, int final) {
  enum { WIDTH = 30 };
  char bar[WIDTH + 1];
  int64_t filled = p->total > 0 ? p->running * WIDTH / p->total : 0, i;
  double secs = (double)(now - p->start_ms) / 1000.0;

  if (filled > WIDTH)
    filled = WIDTH;
  for (i = 0; i < WIDTH; i++)
    bar[i] = i < filled ? '#' : '.';
  bar[WIDTH] = '\0';
  if (p->enabled)
    fprintf(stderr, "\r[%s] %" PRId64 "/%" PRId64 " running, %" PRId64 " pending  %.1fs\033[K", bar,
            p->running, p->total, p->pending, secs);
  else
    fprintf(stderr, "\r[%s] creating %" PRId64 " sandboxes (no progress: list unavailable)  %.1fs\033[K",
            bar, p->total, secs);
  if (final)
    fputc('\n', stderr);
  fflush(stderr);
  p->last_draw_ms = now;
}

/* Runs the create request <body> while polling the list every FC_POLL_MS.
 * Returns 0 with the create's answer in <cr>, or -ENOMEM. */
static int create_with_progress(struct fc_ctx *ctx, json_t *body, struct progress *p,
                                struct fc_resp *cr) {
  CURLM *m = NULL;
  CURL *ce = NULL, *pe = NULL;
  struct fc_resp pr;
  int poll_active = 0, done = 0, added_ce = 0, rc = -ENOMEM;
  int64_t next_poll;

  fc_resp_init(&pr);
  if ((m = curl_multi_init()) == NULL || (ce = curl_easy_init()) == NULL ||
      (pe = curl_easy_init()) == NULL)
    goto fail;
  /* No overall timeout: the router answers when every sandbox is ready
   * (or the batch failed), which for cold starts can take minutes. */
  if (fc_easy_setup(ctx, ce, "POST", "/v1/sandboxes", body, 0, cr) != 0)
    goto fail;
  if (curl_multi_add_handle(m, ce) != CURLM_OK)
    goto fail;
  added_ce = 1;
  next_poll = mono_ms() + FC_POLL_MS;

  while (!done) {
    CURLMsg *msg;
    int still, left, wait_ms;
    int64_t now;

    if (curl_multi_perform(m, &still) != CURLM_OK)
      goto fail;
    while ((msg = curl_multi_info_read(m, &left)) != NULL) {
      if (msg->msg != CURLMSG_DONE)
        continue;
      if (msg->easy_handle == ce) {
        fc_resp_finish(ce, msg->data.result, cr);
        done = 1;
      } else if (msg->easy_handle == pe) {
        fc_resp_finish(pe, msg->data.result, &pr);
        progress_take(p, &pr, 0);
        curl_multi_remove_handle(m, pe);
        fc_resp_close(&pr);
        fc_resp_init(&pr);
        poll_active = 0;
        next_poll = mono_ms() + FC_POLL_MS;
      }
    }
    if (done)
      break;
    now = mono_ms();
    if (p->enabled && !poll_active && now >= next_poll) {
      /* A poll that cannot start is skipped, not fatal. */
      if (fc_easy_setup(ctx, pe, "GET", p->path, NULL, 10, &pr) == 0 &&
          curl_multi_add_handle(m, pe) == CURLM_OK)
        poll_active = 1;
      else
        next_poll = now + FC_POLL_MS;
    }
    if (ctx->stderr_tty && now - p->last_draw_ms >= 100)
      progress_draw(p, now, 0);
    wait_ms = poll_active || !p->enabled ? 100 : (int)(next_poll - now);
    if (wait_ms < 0)
      wait_ms = 0;
    if (wait_ms > 100)
      wait_ms = 100; /* also keeps the elapsed time ticking */
    if (curl_multi_poll(m, NULL, 0, wait_ms, NULL) != CURLM_OK)
      goto fail;
  }
  rc = 0;
fail:
  if (poll_active)
    curl_multi_remove_handle(m, pe);
  if (added_ce)
    curl_multi_remove_handle(m, ce);
  curl_easy_cleanup(pe);
  curl_easy_cleanup(ce);
  curl_multi_cleanup(m);
  fc_resp_close(&pr);
  return rc;
}

static void print_placement(const json_t *pl, int64_t n, double secs) {
  const json_t *cl, *c;
  size_t i;
  int64_t created = fc_jint(pl, "created", -1), warm = fc_jint(pl, "warm", -1),
          cold = fc_jint(pl, "cold", -1), req = fc_jint(pl, "requested", n),
          shortfall = fc_jint(pl, "shortfall", 0);

  if (created < 0)
    created = n;
  printf("created %" PRId64 " of %" PRId64 " sandbox%s", created, req, req == 1 ? "" : "es");
  if (warm >= 0 && cold >= 0)
    printf(" (%" PRId64 " warm, %" PRId64 " cold)", warm, cold);
  else if (warm >= 0)
    printf(" (%" PRId64 " warm)", warm);
  printf(" in %.1fs\n", secs);
  if (shortfall > 0)
    printf("shortfall: %" PRId64 " could not be placed\n", shortfall);
  if (fc_jstr(pl, "cold_reason", NULL) != NULL)
    printf("cold: %s\n", fc_jstr(pl, "cold_reason", ""));
  cl = json_object_get(pl, "clusters");
  json_array_foreach(cl, i, c) {
    const char *name = fc_jstr(c, "cluster", fc_jstr(c, "name", "?"));
    const char *why = fc_jstr(c, "reason", fc_jstr(c, "message", NULL));
    int64_t cc = fc_jint(c, "created", -1), cw = fc_jint(c, "warm", -1);
    if (cc == 0 && why == NULL)
      continue; /* a cluster that got nothing and says nothing */
    printf("  %s:", name);
    if (cc >= 0)
      printf(" %" PRId64 " created", cc);
    if (cw >= 0)
      printf(" (%" PRId64 " warm)", cw);
    if (why != NULL)
      printf("%s%s", cc >= 0 ? "; " : " ", why);
    printf("\n");
  }
}

/* A create's answer (or its error) whose placement says the router does
 * not know the client's region: say so on stderr, since the sandboxes
 * were placed with no regional preference. */
static void warn_unknown_region(const json_t *answer) {
  const json_t *pl = json_object_get(answer, "placement");

  if (pl == NULL)
    pl = json_object_get(json_object_get(answer, "error"), "placement");
  if (!json_is_false(json_object_get(pl, "client_region_known")))
    return;
  fprintf(stderr,
          "fedctl: warning: region '%s' is not one this router knows (no cluster is in it and the policy does "
          "not name it): placed with no regional preference\n",
          fc_jstr(pl, "client_region", "?"));
}

static const char explain_usage[] =
    "usage: fedctl explain [-n N] [--pool P] [--image IMG] [--cpus C] [--memory-gb G]\n"
    "                      [--region R] [--cluster C]... [--label k=v]... [--secret NAME]...\n"
    "                      [--gpus N] [--runtime-class NAME] [--node-selector k=v]...\n"
    "                      [--toleration T]... [--volume /PATH=CLAIM]...\n"
    "\n"
    "Shows where `fedctl create` with the same flags would place the sandboxes\n"
    "(POST /v1/placement/explain) and why: every cluster with its verdict, count,\n"
    "tier, score and reason; the pod options it placed with; and whether the\n"
    "router knows the client's region. Creates nothing (secrets are checked by\n"
    "name only). `fedctl create --help` describes the flags.\n";

/* The ranked plan of POST /v1/placement/explain, readably. */
static int print_explain(struct fc_ctx *ctx, struct fc_resp *r) {
  json_t *plan = json_object_get(r->json, "plan"), *pol = json_object_get(r->json, "policy");
  json_t *req = json_object_get(r->json, "request"), *clusters = json_object_get(plan, "clusters"), *e;
  struct fc_table t;
  size_t i;

  if (!json_is_array(clusters))
    return fc_bad_answer(r);
  printf("policy %s (version %.12s)\n", fc_jstr(pol, "source", "?"), fc_jstr(pol, "version", "?"));
  printf("request: %" JSON_INTEGER_FORMAT " sandbox(es), tenant %s, region %s%s%s%s, split %s\n",
         json_integer_value(json_object_get(req, "num_sandboxes")), fc_jstr(req, "tenant", "?"),
         fc_jstr(req, "region", "?"), json_is_false(json_object_get(req, "region_known")) ? " (unknown)" : "",
         json_is_string(json_object_get(req, "pool")) ? ", pool " : "",
         json_is_string(json_object_get(req, "pool")) ? json_string_value(json_object_get(req, "pool")) : "",
         fc_jstr(plan, "split", "?"));
  if (json_is_false(json_object_get(req, "region_known")))
    printf("region %s is not one this router knows (no cluster is in it and the policy does not name it):\n"
           "  placed with no regional preference\n",
           fc_jstr(req, "region", "?"));
  if (json_object_size(json_object_get(req, "pod_options")) > 0) {
    char *txt = json_dumps(json_object_get(req, "pod_options"), JSON_COMPACT);
    printf("pod options: %s\n", txt != NULL ? txt : "?");
    free(txt);
  }
  if (fc_jstr(r->json, "cold_reason", NULL) != NULL)
    printf("cold: %s\n", fc_jstr(r->json, "cold_reason", ""));
  fc_table_init(&t, 7);
  fc_table_add(&t, "CLUSTER");
  fc_table_add(&t, "VERDICT");
  fc_table_add(&t, "COUNT");
  fc_table_add(&t, "WARM");
  fc_table_add(&t, "TIER");
  fc_table_add(&t, "SCORE");
  fc_table_add(&t, "REASON");
  json_array_foreach(clusters, i, e) {
    fc_table_add(&t, fc_jstr(e, "cluster", "?"));
    fc_table_add(&t, fc_jstr(e, "verdict", "?"));
    fc_table_addf(&t, "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(e, "count")));
    fc_table_addf(&t, "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(e, "warm")));
    fc_table_addf(&t, "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(e, "tier")));
    fc_table_addf(&t, "%.3f", json_number_value(json_object_get(e, "score")));
    fc_table_add(&t, fc_jstr(e, "reason", ""));
  }
  fc_table_print(&t, stdout);
  fc_table_close(&t);
  printf("planned %" JSON_INTEGER_FORMAT ", shortfall %" JSON_INTEGER_FORMAT "\n",
         json_integer_value(json_object_get(plan, "planned")), json_integer_value(json_object_get(plan, "shortfall")));
  json_array_foreach(json_object_get(plan, "rules"), i, e) {
    char *txt = json_is_string(e) ? NULL : json_dumps(e, JSON_COMPACT);
    printf("rule matched: %s\n", json_is_string(e) ? json_string_value(e) : (txt ? txt : "?"));
    free(txt);
  }
  return FC_EXIT_OK;
}

static int create_or_explain(struct fc_ctx *ctx, int argc, char **argv, int explain);

int fc_cmd_create(struct fc_ctx *ctx, int argc, char **argv) {
  return create_or_explain(ctx, argc, argv, 0);
}

int fc_cmd_explain(struct fc_ctx *ctx, int argc, char **argv) {
  return create_or_explain(ctx, argc, argv, 1);
}

static int create_or_explain(struct fc_ctx *ctx, int argc, char **argv, int explain) {
  struct fc_args a;
  struct fc_resp r;
  struct progress p;
  struct fc_table t;
  json_t *body = json_object(), *labels = json_object(), *env = json_object(),
         *clusters = json_array(), *arr, *sb;
  const char *val, *eq, *name = NULL, *pool = NULL, *image = NULL;
  int64_t n = 1;
  int opt, rc = FC_EXIT_USAGE, have_n = 0, err;
  size_t i;
  double secs;
  int64_t t0;

  fc_resp_init(&r);
  memset(&p, 0, sizeof(p));
  fc_table_init(&t, 4);
  if (body == NULL || labels == NULL || env == NULL || clusters == NULL) {
    rc = fc_oom();
    goto done;
  }
  fc_args_init(&a, ctx, explain ? "explain" : "create", create_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    int64_t iv;
    double dv;
    switch (opt) {
    case FC_ARG_HELP:
      fputs(explain ? explain_usage : create_usage, stdout);
      rc = FC_EXIT_OK;
      goto done;
    case FC_ARG_ERR:
      goto done;
    case FC_ARG_POS:
      fc_usage_error(a.cmd, "unexpected argument '%s'", val);
      goto done;
    case C_NUM:
      if (fc_parse_int(a.cmd, "-n", val, 1, FC_MAX_BATCH, &n) != 0)
        goto done;
      have_n = 1;
      break;
    case C_NAME:
      if (*val == '\0') {
        fc_usage_error(a.cmd, "--name must not be empty");
        goto done;
      }
      name = val;
      break;
    case C_POOL:
      pool = val;
      break;
    case C_IMAGE:
      image = val;
      break;
    case C_CPUS:
      if (fc_parse_double(a.cmd, "--cpus", val, 0, FC_MAX_CPUS, &dv) != 0)
        goto done;
      json_object_set_new(body, "cpus", json_real(dv));
      break;
    case C_MEM:
      if (fc_parse_double(a.cmd, "--memory-gb", val, 0, FC_MAX_MEMORY_GB, &dv) != 0)
        goto done;
      json_object_set_new(body, "memory_gb", json_real(dv));
      break;
    case C_CLUSTER:
      json_array_append_new(clusters, json_string(val));
      break;
    case C_LABEL:
      if (fc_check_label(a.cmd, val, &eq) != 0)
        goto done;
      fc_obj_set_kv(labels, val, eq);
      break;
    case C_ENV:
      if (fc_check_env(a.cmd, val, &eq) != 0)
        goto done;
      fc_obj_set_kv(env, val, eq);
      break;
    case C_TIMEOUT:
      if (fc_parse_int(a.cmd, "--timeout", val, 1, FC_MAX_SECONDS, &iv) != 0)
        goto done;
      json_object_set_new(body, "timeout_s", json_integer(iv));
      break;
    case C_PARTIAL:
      json_object_set_new(body, "partial_ok", json_true());
      break;
    default:
      if ((err = fc_pod_opt(a.cmd, opt, val, body)) != 0) {
        rc = err;
        goto done;
      }
    }
  }
  if (pool == NULL && image == NULL) {
    fc_usage_error(a.cmd, "give --pool or --image (a cold start needs an image)");
    goto done;
  }
  json_array_foreach(json_object_get(body, "secrets"), i, sb) {
    if (json_object_get(env, json_string_value(sb)) != NULL) {
      fc_usage_error(a.cmd, "%s is both --env and --secret: give it once", json_string_value(sb));
      goto done;
    }
  }
  if (fc_ctx_init(ctx) != 0)
    goto done;
  /* Only what was asked for goes in the body: the router's defaults apply
   * to the rest. Integers stay integers ("cpus":1, not 1.0). */
  if (name != NULL)
    json_object_set_new(body, "name", json_string(name));
  if (have_n)
    json_object_set_new(body, "num_sandboxes", json_integer(n));
  if (pool != NULL)
    json_object_set_new(body, "pool", json_string(pool));
  if (image != NULL)
    json_object_set_new(body, "image", json_string(image));
  for (i = 0; i < 2; i++) {
    const char *k = i == 0 ? "cpus" : "memory_gb";
    json_t *v = json_object_get(body, k);
    if (v != NULL && json_real_value(v) == (double)(int64_t)json_real_value(v))
      json_object_set_new(body, k, json_integer((json_int_t)json_real_value(v)));
  }
  if (json_object_size(labels) > 0)
    json_object_set(body, "labels", labels);
  if (json_object_size(env) > 0)
    json_object_set(body, "env", env);
  if (json_array_size(clusters) > 0)
    json_object_set(body, "clusters", clusters);
  if (ctx->region != NULL)
    json_object_set_new(body, "region", json_string(ctx->region));

  if (explain) {
    if (fc_request(ctx, "POST", "/v1/placement/explain", body, 0, &r) == -ENOMEM)
      rc = fc_oom();
    else if (r.status < 200 || r.status > 299)
      rc = fc_report(ctx, &r);
    else if (ctx->json) {
      fc_print_body(&r);
      rc = FC_EXIT_OK;
    } else
      rc = print_explain(ctx, &r);
    goto done;
  }
  t0 = mono_ms();
  if (n > 1) {
    struct fr_buf path;
    struct fc_resp br;
    fr_buf_init(&path);
    p.total = n;
    p.start_ms = t0;
    p.enabled = 1;
    if (fr_buf_puts(&path, "/v1/sandboxes") != 0 || fr_buf_puts(&path, "?name_prefix=") != 0 ||
        fc_buf_put_escaped(&path, name ? name : "sandbox") != 0 || fr_buf_puts(&path, "-") != 0 ||
        (p.path = fr_buf_detach(&path, NULL)) == NULL) {
      fr_buf_free(&path);
      rc = fc_oom();
      goto done;
    }
    /* Baseline: sandboxes that already match the prefix (an earlier
     * batch with the same name) must not count as progress. */
    fc_resp_init(&br);
    if (fc_request(ctx, "GET", p.path, NULL, 30, &br) == 0)
      progress_take(&p, &br, 1);
    fc_resp_close(&br);
    if (create_with_progress(ctx, body, &p, &r) != 0) {
      rc = fc_oom();
      goto done;
    }
  } else if (fc_request(ctx, "POST", "/v1/sandboxes", body, 0, &r) == -ENOMEM) {
    rc = fc_oom();
    goto done;
  }
  secs = (double)(mono_ms() - t0) / 1000.0;

  arr = r.json ? json_object_get(r.json, "sandboxes") : NULL;
  if (n > 1) {
    int ok = r.status >= 200 && r.status < 300;
    if (ok && json_is_array(arr)) {
      /* The answer is authoritative: every sandbox in it is exec-ready. */
      p.running = (int64_t)json_array_size(arr);
      p.pending = 0;
    }
    if (ctx->stderr_tty)
      progress_draw(&p, mono_ms(), 1);
    else if (ok)
      fprintf(stderr, "create: %" PRId64 "/%" PRId64 " sandboxes running after %.1fs\n", p.running,
              p.total, secs);
    else
      fprintf(stderr, "create: failed after %.1fs (%" PRId64 "/%" PRId64 " were running at the last poll)\n",
              secs, p.running, p.total);
  }
  warn_unknown_region(r.json);
  if (r.status < 200 || r.status > 299) {
    rc = fc_report(ctx, &r);
    goto done;
  }
  if (ctx->json) {
    fc_print_body(&r);
    rc = FC_EXIT_OK;
    goto done;
  }
  if (!json_is_array(arr)) {
    rc = fc_bad_answer(&r);
    goto done;
  }
  fc_table_add(&t, "ID");
  fc_table_add(&t, "NAME");
  fc_table_add(&t, "CLUSTER");
  fc_table_add(&t, "START");
  json_array_foreach(arr, i, sb) {
    fc_table_add(&t, fc_jstr(sb, "id", "?"));
    fc_table_add(&t, fc_jstr(sb, "name", "-"));
    fc_table_add(&t, fc_jstr(sb, "cluster", "-"));
    fc_table_add(&t, json_is_true(json_object_get(sb, "warm")) ? "warm" : "cold");
  }
  fc_table_print(&t, stdout);
  print_placement(json_object_get(r.json, "placement"), (int64_t)json_array_size(arr), secs);
  rc = FC_EXIT_OK;
done:
  fc_table_close(&t);
  progress_close(&p);
  fc_resp_close(&r);
  json_decref(clusters);
  json_decref(env);
  json_decref(labels);
  json_decref(body);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* exec                                                                    */

static const char exec_usage[] =
    "usage: fedctl exec ID [--timeout S] [--stdin-file F | -i] [--env K=V]...\n"
    "                   [--workdir D] [--] COMMAND [ARG...]\n"
    "\n"
    "Runs COMMAND (argv as given, no shell) in sandbox ID and writes its stdout\n"
    "and stderr to fedctl's stdout and stderr, byte for byte, as it runs\n"
    "(through the sandbox's agent; a sandbox without one answers when the\n"
    "command ended). Exits with the command's exit status (124 when it timed\n"
    "out and was killed; 1 with a message when the API call itself failed).\n"
    "Stopping fedctl stops a streamed command. Options must come before the\n"
    "command; use `--` when the command's first word starts with '-'.\n"
    "\n"
    "  --timeout S        kill the command after S seconds (router default 60)\n"
    "  -i, --stdin        send fedctl's stdin to the command\n"
    "  --stdin-file F     send the contents of file F as stdin\n"
    "  --env K=V          environment variable (repeatable)\n"
    "  --workdir D        working directory inside the sandbox\n"
    "  --json             print the buffered API response verbatim (no streaming;\n"
    "                     exit status as above)\n";

enum { E_TIMEOUT = 1, E_STDIN, E_STDIN_FILE };

static const struct fc_opt exec_opts[] = {
    {"timeout", 0, 1, E_TIMEOUT},     {"stdin", 'i', 0, E_STDIN},          {"stdin-file", 0, 1, E_STDIN_FILE},
    {"env", 0, 1, FC_OPT_ENV},        {"workdir", 0, 1, FC_OPT_WORKDIR}, {NULL, 0, 0, 0},
};

/* Reads all of <f> into <b>; 0, -EIO or -ENOMEM. */
static int read_all(FILE *f, struct fr_buf *b) {
  char chunk[65536];
  size_t n;

  while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
    if (fr_buf_append(b, chunk, n) != 0)
      return -ENOMEM;
  return ferror(f) ? -EIO : 0;
}

/* Writes member <key> of the exec answer to <f>, decoding base64 when
 * <key>_encoding says so. 0 or -EINVAL (bad base64) / -ENOMEM / -EIO. */
static int write_stream(const json_t *res, const char *key, FILE *f) {
  char enc_key[32];
  const json_t *v = json_object_get(res, key);
  const char *enc, *s;
  size_t n;

  if (v == NULL || json_is_null(v))
    return 0;
  if (!json_is_string(v))
    return -EINVAL;
  s = json_string_value(v);
  n = json_string_length(v);
  snprintf(enc_key, sizeof(enc_key), "%s_encoding", key);
  enc = fc_jstr(res, enc_key, NULL);
  if (enc != NULL && strcmp(enc, "base64") == 0) {
    unsigned char *out = malloc(n / 4 * 3 + 3);
    long dn;
    if (out == NULL)
      return -ENOMEM;
    dn = fr_base64_decode(s, n, out);
    if (dn < 0) {
      free(out);
      return -EINVAL;
    }
    if (dn > 0 && fwrite(out, 1, (size_t)dn, f) != (size_t)dn) {
      free(out);
      return -EIO;
    }
    free(out);
  } else if (enc != NULL && strcmp(enc, "utf-8") != 0 && strcmp(enc, "utf8") != 0) {
    return -EINVAL;
  } else if (n > 0 && fwrite(s, 1, n, f) != n) {
    return -EIO;
  }
  return fflush(f) == 0 ? 0 : -EIO;
}

/* The exit status for the command's end: its code (like a shell, 8 bits,
 * never turning a failure into 0), or FC_EXIT_TIMEDOUT with a warning
 * naming <timeout_s> (0: the router's default). */
static int exit_status(int timed_out, int64_t code, int64_t timeout_s) {
  int rc;

  if (timed_out) {
    if (timeout_s > 0)
      fprintf(stderr, "fedctl: warning: the command timed out after %" PRId64 "s and was killed\n",
              timeout_s);
    else
      fprintf(stderr, "fedctl: warning: the command timed out and was killed\n");
    return FC_EXIT_TIMEDOUT;
  }
  rc = (int)(code & 0xff);
  return rc == 0 && code != 0 ? 1 : rc;
}

static int out_to_fd(int fd, const void *data, size_t len, void *arg) {
  (void)arg;
  return fc_write_all(fd, data, len);
}

static int feed_nd(const char *data, size_t len, void *arg) {
  return fc_nd_feed(arg, data, len);
}

/* Runs the exec <body> (borrowed, with "stream":true) on <path>: output is
 * written to fds 1 and 2 as it arrives. Returns the exit status, or
 * -ENOTSUP when the sandbox has no agent (the buffered exec still works
 * there). */
static int exec_streamed(struct fc_ctx *ctx, const char *path, json_t *body, long call_timeout_s,
                         int64_t timeout_s) {
  struct fc_resp r;
  struct fc_sink k;
  struct fc_nd nd;
  CURL *easy;
  CURLcode crc;
  int rc;

  fc_resp_init(&r);
  fc_nd_init(&nd, out_to_fd, NULL);
  if ((rc = fc_ctx_easy(ctx, &easy)) != 0 ||
      (rc = fc_easy_setup(ctx, easy, "POST", path, body, call_timeout_s, &r)) != 0) {
    rc = rc == -EINVAL ? FC_EXIT_USAGE : fc_oom();
    goto done;
  }
  fc_sink_attach(&k, easy, &r, feed_nd, &nd);
  crc = curl_easy_perform(easy);
  fc_sink_finish(&k, crc);
  if (!k.ok || k.err != 0 || crc != CURLE_OK) {
    if (r.status == 501 && strcmp(fc_jstr(json_object_get(r.json, "error"), "code", ""), "agent_required") == 0)
      rc = -ENOTSUP;
    else
      rc = fc_sink_report(ctx, &k, k.err == -EPROTO ? "the router's answer is not the NDJSON of an exec"
                                                      : "writing the command's output");
    goto done;
  }
  if (nd.failed) {
    fprintf(stderr, "fedctl: %s: %s\n", nd.err_code, nd.err_msg);
    rc = FC_EXIT_FAIL;
  } else if (fc_nd_finish(&nd) != 0 || !nd.ended) {
    fprintf(stderr, "fedctl: the exec stream ended before the command did\n");
    rc = FC_EXIT_FAIL;
  } else {
    rc = exit_status(nd.timed_out, nd.exit_code, timeout_s);
  }
done:
  fc_nd_close(&nd);
  fc_resp_close(&r);
  return rc;
}

int fc_cmd_exec(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  struct fc_resp r;
  struct fc_run run;
  struct fr_buf in, path;
  json_t *body, *v;
  const char *val, *stdin_file = NULL;
  int opt, rc = FC_EXIT_USAGE, use_stdin = 0, err;
  int64_t timeout_s = 0, code;

  fc_resp_init(&r);
  fr_buf_init(&in);
  fr_buf_init(&path);
  if (fc_run_init(&run, "exec", exec_usage) != 0) {
    rc = fc_oom();
    goto done;
  }
  body = run.body;
  fc_args_init(&a, ctx, "exec", exec_opts, argc, argv);
  while ((opt = fc_run_next(&run, &a, &val)) > 0) {
    switch (opt) {
    case E_TIMEOUT:
      if (fc_parse_int("exec", "--timeout", val, 1, FC_MAX_SECONDS, &timeout_s) != 0)
        goto done;
      break;
    case E_STDIN:
      use_stdin = 1;
      break;
    case E_STDIN_FILE:
      stdin_file = val;
      break;
    }
  }
  if (opt == FC_ARG_HELP || opt == FC_ARG_ERR) {
    rc = opt == FC_ARG_HELP ? FC_EXIT_OK : FC_EXIT_USAGE;
    goto done;
  }
  if (fc_run_finish(&run, NULL) != FC_EXIT_OK)
    goto done;
  if (use_stdin && stdin_file != NULL) {
    fc_usage_error("exec", "use either -i or --stdin-file, not both");
    goto done;
  }
  if (timeout_s > 0)
    json_object_set_new(body, "timeout_s", json_integer(timeout_s));
  if (use_stdin || stdin_file != NULL) {
    FILE *f = use_stdin ? stdin : fopen(stdin_file, "rb");
    if (f == NULL) {
      fprintf(stderr, "fedctl: --stdin-file %s: %s\n", stdin_file, strerror(errno));
      rc = FC_EXIT_USAGE;
      goto done;
    }
    err = read_all(f, &in);
    if (f != stdin)
      fclose(f);
    if (err != 0) {
      fprintf(stderr, "fedctl: reading stdin: %s\n", strerror(-err));
      rc = FC_EXIT_FAIL;
      goto done;
    }
    /* The API carries stdin as a JSON string: text only. */
    if ((v = json_stringn(in.data ? in.data : "", in.len)) == NULL) {
      fprintf(stderr, "fedctl: stdin is not valid UTF-8; the exec API accepts text stdin only\n");
      rc = FC_EXIT_USAGE;
      goto done;
    }
    json_object_set_new(body, "stdin", v);
  }
  if (fc_sandbox_path(&path, run.id, "/exec") != 0) {
    rc = fc_oom();
    goto done;
  }
  /* Output as it comes, through the sandbox's agent; --json wants the one
   * buffered answer, and a sandbox without an agent only has that. */
  if (!ctx->json) {
    json_object_set_new(body, "stream", json_true());
    rc = exec_streamed(ctx, path.data, body, (long)(timeout_s > 0 ? timeout_s : 60) + 120, timeout_s);
    if (rc != -ENOTSUP)
      goto done;
    json_object_del(body, "stream");
  }
  /* The router kills the command at timeout_s (default 60); allow time on
   * top for start-up and for moving up to 2 x 16 MiB of output. */
  rc = fc_call(ctx, "POST", path.data, body, (long)(timeout_s > 0 ? timeout_s : 60) + 120, &r);
  if (rc != FC_EXIT_OK)
    goto done;
  if (!json_is_object(r.json)) {
    rc = fc_bad_answer(&r);
    goto done;
  }
  if (ctx->json) {
    fc_print_body(&r);
  } else {
    if ((err = write_stream(r.json, "stdout", stdout)) != 0 ||
        (err = write_stream(r.json, "stderr", stderr)) != 0) {
      if (err == -EIO)
        fprintf(stderr, "fedctl: writing the command's output: %s\n", strerror(errno));
      else if (err == -ENOMEM)
        fc_oom();
      else
        fprintf(stderr, "fedctl: the router sent output fedctl cannot decode\n");
      rc = FC_EXIT_FAIL;
      goto done;
    }
  }
  if (json_is_true(json_object_get(r.json, "stdout_truncated")))
    fprintf(stderr, "fedctl: warning: stdout was truncated (output cap reached)\n");
  if (json_is_true(json_object_get(r.json, "stderr_truncated")))
    fprintf(stderr, "fedctl: warning: stderr was truncated (output cap reached)\n");
  code = fc_jint(r.json, "exit_code", -1000);
  if (!json_is_true(json_object_get(r.json, "timed_out")) &&
      (code == -1000 || !json_is_integer(json_object_get(r.json, "exit_code")))) {
    rc = fc_bad_answer(&r);
    goto done;
  }
  rc = exit_status(json_is_true(json_object_get(r.json, "timed_out")), code, timeout_s);
done:
  fr_buf_free(&path);
  fr_buf_free(&in);
  fc_resp_close(&r);
  fc_run_close(&run);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* terminate, ls: shared filters                                           */

enum { F_LABEL = 1, F_POOL, F_CLUSTER, F_PREFIX };

static const struct fc_opt filter_opts[] = {
    {"label", 0, 1, F_LABEL},     {"pool", 0, 1, F_POOL},       {"cluster", 0, 1, F_CLUSTER},
    {"name-prefix", 0, 1, F_PREFIX}, {NULL, 0, 0, 0},
};

/* Adds the filter <opt> with <val> to the query in <q>. Returns 0, or
 * FC_EXIT_USAGE / FC_EXIT_FAIL after printing why. */
static int add_filter(const char *cmd, struct fr_buf *q, int opt, const char *val) {
  const char *eq;
  static const char *const keys[] = {"", "label", "pool", "cluster", "name_prefix"};

  if (opt == F_LABEL && fc_check_label(cmd, val, &eq) != 0)
    return FC_EXIT_USAGE;
  if (opt != F_LABEL && *val == '\0')
    return fc_usage_error(cmd, "--%s must not be empty", filter_opts[opt - 1].name);
  if (fc_add_query(q, keys[opt], val) != 0)
    return fc_oom();
  return 0;
}

/* ---------------------------------------------------------------------- */
/* terminate                                                               */

static const char terminate_usage[] =
    "usage: fedctl terminate ID...\n"
    "       fedctl terminate [--label k=v]... [--pool P] [--cluster C] [--name-prefix X]\n"
    "\n"
    "Terminates the given sandboxes, or every one of yours matching all the\n"
    "filters (at least one filter). Exits 1 if any could not be terminated.\n";

int fc_cmd_terminate(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  struct fc_resp r;
  struct fr_buf q, path;
  const char **ids = NULL;
  const char *val;
  size_t nids = 0, i;
  int opt, rc = FC_EXIT_USAGE, err, nfilters = 0;
  json_t *all = NULL;

  fc_resp_init(&r);
  fr_buf_init(&q);
  fr_buf_init(&path);
  if ((ids = calloc((size_t)argc + 1, sizeof(*ids))) == NULL || fr_buf_puts(&q, "/v1/sandboxes") != 0) {
    rc = fc_oom();
    goto done;
  }
  fc_args_init(&a, ctx, "terminate", filter_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    switch (opt) {
    case FC_ARG_HELP:
      fputs(terminate_usage, stdout);
      rc = FC_EXIT_OK;
      goto done;
    case FC_ARG_ERR:
      goto done;
    case FC_ARG_POS:
      ids[nids++] = val;
      break;
    default:
      if ((err = add_filter("terminate", &q, opt, val)) != 0) {
        rc = err;
        goto done;
      }
      nfilters++;
    }
  }
  if (nids > 0 && nfilters > 0) {
    fc_usage_error("terminate", "give sandbox IDs or filters, not both");
    goto done;
  }
  if (nids == 0 && nfilters == 0) {
    fc_usage_error("terminate", "give sandbox IDs, or filters such as --label k=v");
    goto done;
  }
  /* Every id is checked before the first is terminated. */
  for (i = 0; i < nids; i++)
    if (fc_check_id("terminate", ids[i]) != 0)
      goto done;
  if (fc_ctx_init(ctx) != 0)
    goto done;

  if (nfilters > 0) {
    const json_t *arr, *v;
    rc = fc_call(ctx, "DELETE", q.data, NULL, FC_CALL_TIMEOUT_S * 5, &r);
    if (rc != FC_EXIT_OK)
      goto done;
    if (ctx->json) {
      fc_print_body(&r);
      goto done;
    }
    if (!json_is_object(r.json)) {
      rc = fc_bad_answer(&r);
      goto done;
    }
    arr = json_object_get(r.json, "ids");
    json_array_foreach(arr, i, v)
      if (json_is_string(v))
        printf("terminated %s\n", json_string_value(v));
    printf("terminated %" PRId64 " sandbox%s\n", fc_jint(r.json, "terminated", (int64_t)json_array_size(arr)),
           fc_jint(r.json, "terminated", (int64_t)json_array_size(arr)) == 1 ? "" : "es");
    goto done;
  }

  /* By id: every id is tried; the exit status says whether all went. With
   * --json and several ids the answers are gathered into one array so
   * the output stays a single JSON document. */
  if (ctx->json && nids > 1 && (all = json_array()) == NULL) {
    rc = fc_oom();
    goto done;
  }
  rc = FC_EXIT_OK;
  for (i = 0; i < nids; i++) {
    int one, saved_json = ctx->json;
    fc_resp_close(&r);
    fc_resp_init(&r);
    fr_buf_reset(&path);
    if (fc_sandbox_path(&path, ids[i], "") != 0) {
      rc = fc_oom();
      goto done;
    }
    if (all != NULL)
      ctx->json = 0; /* errors to stderr only; bodies go in <all> */
    one = fc_call(ctx, "DELETE", path.data, NULL, FC_CALL_TIMEOUT_S, &r);
    ctx->json = saved_json;
    if (all != NULL && r.json != NULL)
      json_array_append(all, r.json);
    if (one != FC_EXIT_OK) {
      rc = FC_EXIT_FAIL;
      if (r.status == 0)
        break; /* the router is gone: the next ids would fail the same way */
      continue;
    }
    if (ctx->json && all == NULL)
      fc_print_body(&r);
    else if (!ctx->json)
      printf("terminated %s\n", fc_jstr(r.json, "id", ids[i]));
  }
  if (all != NULL) {
    char *s = json_dumps(all, JSON_COMPACT);
    if (s != NULL)
      printf("%s\n", s);
    free(s);
  }
done:
  json_decref(all);
  fr_buf_free(&path);
  fr_buf_free(&q);
  fc_resp_close(&r);
  free(ids);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* ls                                                                      */

static const char ls_usage[] =
    "usage: fedctl ls [--label k=v]... [--pool P] [--cluster C] [--name-prefix X]\n"
    "\n"
    "Lists your sandboxes (all filters must match): ID NAME CLUSTER POOL WARM\n"
    "STATE AGE/EXPIRES (time since creation / time left).\n";

int fc_cmd_ls(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  struct fc_resp r;
  struct fc_table t;
  struct fr_buf q;
  const json_t *arr, *sb;
  const char *val;
  int opt, rc = FC_EXIT_USAGE, err;
  size_t i;
  int64_t now = fr_wall_ms() / 1000;

  fc_resp_init(&r);
  fc_table_init(&t, 7);
  fr_buf_init(&q);
  if (fr_buf_puts(&q, "/v1/sandboxes") != 0) {
    rc = fc_oom();
    goto done;
  }
  fc_args_init(&a, ctx, "ls", filter_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    switch (opt) {
    case FC_ARG_HELP:
      fputs(ls_usage, stdout);
      rc = FC_EXIT_OK;
      goto done;
    case FC_ARG_ERR:
      goto done;
    case FC_ARG_POS:
      fc_usage_error("ls", "unexpected argument '%s'", val);
      goto done;
    default:
      if ((err = add_filter("ls", &q, opt, val)) != 0) {
        rc = err;
        goto done;
      }
    }
  }
  if (fc_ctx_init(ctx) != 0)
    goto done;
  rc = fc_call(ctx, "GET", q.data, NULL, FC_CALL_TIMEOUT_S, &r);
  if (rc != FC_EXIT_OK)
    goto done;
  if (ctx->json) {
    fc_print_body(&r);
    goto done;
  }
  arr = r.json ? json_object_get(r.json, "sandboxes") : NULL;
  if (!json_is_array(arr)) {
    rc = fc_bad_answer(&r);
    goto done;
  }
  if (json_array_size(arr) == 0) {
    fprintf(stderr, "No sandboxes found.\n");
    goto done;
  }
  fc_table_add(&t, "ID");
  fc_table_add(&t, "NAME");
  fc_table_add(&t, "CLUSTER");
  fc_table_add(&t, "POOL");
  fc_table_add(&t, "WARM");
  fc_table_add(&t, "STATE");
  fc_table_add(&t, "AGE/EXPIRES");
  json_array_foreach(arr, i, sb) {
    int64_t created, expires;
    char age[32] = "-", left[32] = "-";
    if (fr_time_parse_rfc3339(fc_jstr(sb, "created_at", ""), &created) == 0)
      fc_fmt_duration(now - created, age, sizeof(age));
    if (fr_time_parse_rfc3339(fc_jstr(sb, "expires_at", ""), &expires) == 0) {
      if (expires <= now)
        snprintf(left, sizeof(left), "expired");
      else
        fc_fmt_duration(expires - now, left, sizeof(left));
    }
    fc_table_add(&t, fc_jstr(sb, "id", "?"));
    fc_table_add(&t, fc_jstr(sb, "name", "-"));
    fc_table_add(&t, fc_jstr(sb, "cluster", "-"));
    fc_table_add(&t, fc_jstr(sb, "pool", "-"));
    fc_table_add(&t, json_is_true(json_object_get(sb, "warm")) ? "yes" : "no");
    fc_table_add(&t, fc_jstr(sb, "state", "-"));
    fc_table_addf(&t, "%s/%s", age, left);
  }
  fc_table_print(&t, stdout);
done:
  fr_buf_free(&q);
  fc_table_close(&t);
  fc_resp_close(&r);
  return rc;
}
