/* cmd_infra.c - the federation commands: pools (list, get, create, resize,
 * delete), clusters, events; and version.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedctl.h"
#include "fr/util.h"
#include "fr/version.h"


/* "/v1/pools/<escaped name>" into <b>. */
static int pool_path(struct fr_buf *b, const char *name) {
  int rc = fr_buf_puts(b, "/v1/pools/");
  return rc ? rc : fc_buf_put_escaped(b, name);
}

/* ---------------------------------------------------------------------- */
/* pools                                                                   */

static const char pools_usage[] =
    "usage: fedctl pools [list]\n"
    "       fedctl pools get NAME\n"
    "       fedctl pools create NAME --image IMG --replicas N [--cpus C] [--memory-gb G]\n"
    "                           [--cluster C]... [POD OPTIONS]\n"
    "       fedctl pools resize NAME N\n"
    "       fedctl pools delete NAME\n"
    "\n"
    "Warm pools keep Ready pods waiting in each cluster so a create can claim\n"
    "one at once. `replicas` is per cluster; `create` uses every cluster unless\n"
    "--cluster names some. The list shows ready/target per cluster.\n"
    "\n"
    "  --image IMG        image of the pool's pods (create)\n"
    "  --replicas N       warm pods per cluster (create)\n"
    "  --cpus C           cpus per pod (create)\n"
    "  --memory-gb G      memory per pod in GB (create)\n"
    "  --cluster C        create the pool in cluster C only (repeatable)\n"
    "  --json             print the API response verbatim\n"
    "\n"
    "Pod options (create; on every pod of the pool, so claims stay warm; clusters\n"
    "that cannot host them are left out): --gpus N, --runtime-class NAME,\n"
    "--node-selector KEY=VALUE, --toleration KEY[=VALUE][:EFFECT[:SECONDS]],\n"
    "--volume /PATH=CLAIM, --readiness PORT[/PATH], as `fedctl create --help`\n"
    "describes them.\n";

/* Prints one pool as a short description and a per-cluster table. */
static void print_pool(const json_t *p) {
  struct fc_table t;
  const json_t *cl, *c;
  char num[32];
  size_t i;

  printf("name:    %s\n", fc_jstr(p, "name", "?"));
  printf("image:   %s\n", fc_jstr(p, "image", "-"));
  fc_fmt_num(fc_jnum(p, "cpus", 0), num, sizeof(num));
  printf("cpus:    %s\n", num);
  fc_fmt_num(fc_jnum(p, "memory_gb", 0), num, sizeof(num));
  printf("memory:  %s GB\n", num);
  fc_print_pod_options(p, "");
  cl = json_object_get(p, "clusters");
  if (json_array_size(cl) == 0)
    return;
  fc_table_init(&t, 3);
  fc_table_add(&t, "CLUSTER");
  fc_table_add(&t, "READY");
  fc_table_add(&t, "TARGET");
  json_array_foreach(cl, i, c) {
    fc_table_add(&t, fc_jstr(c, "cluster", fc_jstr(c, "name", "?")));
    fc_table_addf(&t, "%" PRId64, fc_jint(c, "ready", 0));
    fc_table_addf(&t, "%" PRId64, fc_jint(c, "target", 0));
  }
  fc_table_print(&t, stdout);
  fc_table_close(&t);
}

static int pools_list(struct fc_ctx *ctx) {
  struct fc_resp r;
  struct fc_table t;
  const json_t *arr, *p, *cl, *c;
  const char **names = NULL;
  size_t nnames = 0, cap = 0, i, j, k;
  int rc;

  fc_resp_init(&r);
  rc = fc_call(ctx, "GET", "/v1/pools", NULL, FC_CALL_TIMEOUT_S, &r);
  if (rc != FC_EXIT_OK)
    goto done;
  if (ctx->json) {
    fc_print_body(&r);
    goto done;
  }
  arr = r.json ? json_object_get(r.json, "pools") : NULL;
  if (!json_is_array(arr)) {
    rc = fc_bad_answer(&r);
    goto done;
  }
  if (json_array_size(arr) == 0) {
    fprintf(stderr, "No pools.\n");
    goto done;
  }
  /* One column per cluster that has any pool, in order of appearance. */
  json_array_foreach(arr, i, p) {
    cl = json_object_get(p, "clusters");
    json_array_foreach(cl, j, c) {
      const char *cn = fc_jstr(c, "cluster", fc_jstr(c, "name", NULL));
      if (cn == NULL)
        continue;
      for (k = 0; k < nnames && strcmp(names[k], cn) != 0; k++)
        ;
      if (k < nnames)
        continue;
      if (nnames == cap) {
        const char **nn = realloc(names, (cap = cap ? cap * 2 : 8) * sizeof(*names));
        if (nn == NULL) {
          rc = fc_oom();
          goto done;
        }
        names = nn;
      }
      names[nnames++] = cn;
    }
  }
  fc_table_init(&t, 4 + nnames);
  fc_table_add(&t, "NAME");
  fc_table_add(&t, "IMAGE");
  fc_table_add(&t, "CPUS");
  fc_table_add(&t, "MEM");
  for (k = 0; k < nnames; k++)
    fc_table_add(&t, names[k]);
  json_array_foreach(arr, i, p) {
    char num[32];
    fc_table_add(&t, fc_jstr(p, "name", "?"));
    fc_table_add(&t, fc_jstr(p, "image", "-"));
    fc_fmt_num(fc_jnum(p, "cpus", 0), num, sizeof(num));
    fc_table_add(&t, num);
    fc_fmt_num(fc_jnum(p, "memory_gb", 0), num, sizeof(num));
    fc_table_addf(&t, "%sG", num);
    cl = json_object_get(p, "clusters");
    for (k = 0; k < nnames; k++) {
      const json_t *found = NULL;
      json_array_foreach(cl, j, c)
        if (strcmp(fc_jstr(c, "cluster", fc_jstr(c, "name", "")), names[k]) == 0)
          found = c;
      if (found != NULL)
        fc_table_addf(&t, "%" PRId64 "/%" PRId64, fc_jint(found, "ready", 0),
                      fc_jint(found, "target", 0));
      else
        fc_table_add(&t, "-");
    }
  }
  fc_table_print(&t, stdout);
  fc_table_close(&t);
done:
  free(names);
  fc_resp_close(&r);
  return rc;
}

enum { P_IMAGE = 1, P_REPLICAS, P_CPUS, P_MEM, P_CLUSTER };

static const struct fc_opt pools_create_opts[] = {
    {"image", 0, 1, P_IMAGE}, {"replicas", 0, 1, P_REPLICAS}, {"cpus", 0, 1, P_CPUS},
    {"memory-gb", 0, 1, P_MEM}, {"cluster", 0, 1, P_CLUSTER}, FC_POD_OPTS, {NULL, 0, 0, 0},
};

static const struct fc_opt no_opts[] = {{NULL, 0, 0, 0}};

/* Collects exactly <want> positionals of "pools <sub>" into <pos>; no
 * options besides the global ones. Returns 0 or an exit status. */
static int sub_positionals(struct fc_ctx *ctx, const char *cmd, int argc, char **argv,
                           const char **pos, int want, const char *what) {
  struct fc_args a;
  const char *val;
  int opt, n = 0;

  fc_args_init(&a, ctx, cmd, no_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    if (opt == FC_ARG_HELP) {
      fputs(pools_usage, stdout);
      return -1;
    }
    if (opt == FC_ARG_ERR)
      return FC_EXIT_USAGE;
    if (n == want)
      return fc_usage_error(cmd, "unexpected argument '%s'", val);
    pos[n++] = val;
  }
  if (n < want)
    return fc_usage_error(cmd, "missing %s", what);
  return 0;
}

static int pools_create(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  struct fc_resp r;
  json_t *body = json_object(), *clusters = json_array();
  const char *val, *name = NULL;
  int opt, rc = FC_EXIT_USAGE, have_image = 0, have_replicas = 0, err;
  int64_t iv;
  double dv;

  fc_resp_init(&r);
  if (body == NULL || clusters == NULL) {
    rc = fc_oom();
    goto done;
  }
  fc_args_init(&a, ctx, "pools create", pools_create_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    switch (opt) {
    case FC_ARG_HELP:
      fputs(pools_usage, stdout);
      rc = FC_EXIT_OK;
      goto done;
    case FC_ARG_ERR:
      goto done;
    case FC_ARG_POS:
      if (name != NULL) {
        fc_usage_error("pools create", "unexpected argument '%s'", val);
        goto done;
      }
      name = val;
      break;
    case P_IMAGE:
      if (*val == '\0') {
        fc_usage_error("pools create", "--image must not be empty");
        goto done;
      }
      json_object_set_new(body, "image", json_string(val));
      have_image = 1;
      break;
    case P_REPLICAS:
      if (fc_parse_int("pools create", "--replicas", val, 0, FC_MAX_REPLICAS, &iv) != 0)
        goto done;
      json_object_set_new(body, "replicas", json_integer(iv));
      have_replicas = 1;
      break;
    case P_CPUS:
    case P_MEM:
      if (fc_parse_double("pools create", opt == P_CPUS ? "--cpus" : "--memory-gb", val, 0,
                          opt == P_CPUS ? FC_MAX_CPUS : FC_MAX_MEMORY_GB, &dv) != 0)
        goto done;
      /* Whole numbers go as JSON integers, like the API examples. */
      json_object_set_new(body, opt == P_CPUS ? "cpus" : "memory_gb",
                          dv == (double)(int64_t)dv ? json_integer((json_int_t)dv) : json_real(dv));
      break;
    case P_CLUSTER:
      json_array_append_new(clusters, json_string(val));
      break;
    default:
      if ((err = fc_pod_opt("pools create", opt, val, body)) != 0) {
        rc = err;
        goto done;
      }
    }
  }
  if (name == NULL || *name == '\0') {
    fc_usage_error("pools create", "missing the pool NAME");
    goto done;
  }
  if (!have_image || !have_replicas) {
    fc_usage_error("pools create", "--image and --replicas are required");
    goto done;
  }
  json_object_set_new(body, "name", json_string(name));
  if (json_array_size(clusters) > 0)
    json_object_set(body, "clusters", clusters);
  rc = fc_call(ctx, "POST", "/v1/pools", body, FC_CALL_TIMEOUT_S, &r);
  if (rc != FC_EXIT_OK)
    goto done;
  if (ctx->json) {
    fc_print_body(&r);
    goto done;
  }
  printf("pool %s created\n", name);
  if (json_is_object(r.json) && json_object_get(r.json, "name") != NULL)
    print_pool(r.json);
done:
  fc_resp_close(&r);
  json_decref(clusters);
  json_decref(body);
  return rc;
}

static int pools_get(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_resp r;
  struct fr_buf path;
  const char *name;
  int rc;

  if ((rc = sub_positionals(ctx, "pools get", argc, argv, &name, 1, "the pool NAME")) != 0)
    return rc < 0 ? FC_EXIT_OK : rc;
  fc_resp_init(&r);
  fr_buf_init(&path);
  if (pool_path(&path, name) != 0) {
    rc = fc_oom();
    goto done;
  }
  rc = fc_call(ctx, "GET", path.data, NULL, FC_CALL_TIMEOUT_S, &r);
  if (rc != FC_EXIT_OK)
    goto done;
  if (ctx->json)
    fc_print_body(&r);
  else if (json_is_object(r.json))
    print_pool(r.json);
  else
    rc = fc_bad_answer(&r);
done:
  fr_buf_free(&path);
  fc_resp_close(&r);
  return rc;
}

static int pools_resize(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_resp r;
  struct fr_buf path;
  const char *pos[2];
  json_t *body = NULL;
  int64_t n;
  int rc;

  if ((rc = sub_positionals(ctx, "pools resize", argc, argv, pos, 2, "NAME and REPLICAS")) != 0)
    return rc < 0 ? FC_EXIT_OK : rc;
  if (fc_parse_int("pools resize", "REPLICAS", pos[1], 0, FC_MAX_REPLICAS, &n) != 0)
    return FC_EXIT_USAGE;
  fc_resp_init(&r);
  fr_buf_init(&path);
  if (pool_path(&path, pos[0]) != 0 || (body = json_pack("{s:I}", "replicas", (json_int_t)n)) == NULL) {
    rc = fc_oom();
    goto done;
  }
  rc = fc_call(ctx, "PATCH", path.data, body, FC_CALL_TIMEOUT_S, &r);
  if (rc != FC_EXIT_OK)
    goto done;
  if (ctx->json) {
    fc_print_body(&r);
  } else {
    printf("pool %s resized to %" PRId64 " per cluster\n", pos[0], n);
    if (json_is_object(r.json) && json_object_get(r.json, "name") != NULL)
      print_pool(r.json);
  }
done:
  json_decref(body);
  fr_buf_free(&path);
  fc_resp_close(&r);
  return rc;
}

static int pools_delete(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_resp r;
  struct fr_buf path;
  const char *name;
  int rc;

  if ((rc = sub_positionals(ctx, "pools delete", argc, argv, &name, 1, "the pool NAME")) != 0)
    return rc < 0 ? FC_EXIT_OK : rc;
  fc_resp_init(&r);
  fr_buf_init(&path);
  if (pool_path(&path, name) != 0) {
    rc = fc_oom();
    goto done;
  }
  rc = fc_call(ctx, "DELETE", path.data, NULL, FC_CALL_TIMEOUT_S, &r);
  if (rc != FC_EXIT_OK)
    goto done;
  if (ctx->json)
    fc_print_body(&r);
  else
    printf("pool %s deleted\n", name);
done:
  fr_buf_free(&path);
  fc_resp_close(&r);
  return rc;
}

int fc_cmd_pools(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  const char *val, *sub = NULL;
  int opt, rest;

  /* Global options may come before the subcommand; find it. */
  fc_args_init(&a, ctx, "pools", no_opts, argc, argv);
  while (sub == NULL && (opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    if (opt == FC_ARG_HELP) {
      fputs(pools_usage, stdout);
      return FC_EXIT_OK;
    }
    if (opt == FC_ARG_ERR)
      return FC_EXIT_USAGE;
    sub = val;
  }
  rest = a.i;
  if (sub == NULL || strcmp(sub, "list") == 0 || strcmp(sub, "ls") == 0) {
    if (sub != NULL && rest < argc &&
        sub_positionals(ctx, "pools list", argc - rest, argv + rest, NULL, 0, "") != 0)
      return FC_EXIT_USAGE;
    if (fc_ctx_init(ctx) != 0)
      return FC_EXIT_USAGE;
    return pools_list(ctx);
  }
  if (strcmp(sub, "get") == 0)
    return pools_get(ctx, argc - rest, argv + rest);
  if (strcmp(sub, "create") == 0)
    return pools_create(ctx, argc - rest, argv + rest);
  if (strcmp(sub, "resize") == 0)
    return pools_resize(ctx, argc - rest, argv + rest);
  if (strcmp(sub, "delete") == 0)
    return pools_delete(ctx, argc - rest, argv + rest);
  return fc_usage_error("pools", "unknown subcommand '%s' (list, get, create, resize, delete)", sub);
}

/* ---------------------------------------------------------------------- */
/* clusters                                                                */

static const char clusters_usage[] =
    "usage: fedctl clusters\n"
    "\n"
    "Shows every cluster behind the router: region, health (\"syncing\" until\n"
    "the first list completed), Kubernetes API latency, ready/total nodes,\n"
    "cpu requested by sandboxes / allocatable (cores), sandboxes, warm pods,\n"
    "and each pool's ready/target.\n";

int fc_cmd_clusters(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  struct fc_resp r;
  struct fc_table t;
  const json_t *arr, *c;
  const char *val;
  int opt, rc;
  size_t i, j;

  fc_args_init(&a, ctx, "clusters", no_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    if (opt == FC_ARG_HELP) {
      fputs(clusters_usage, stdout);
      return FC_EXIT_OK;
    }
    if (opt == FC_ARG_ERR)
      return FC_EXIT_USAGE;
    return fc_usage_error("clusters", "unexpected argument '%s'", val);
  }
  if (fc_ctx_init(ctx) != 0)
    return FC_EXIT_USAGE;
  fc_resp_init(&r);
  fc_table_init(&t, 9);
  rc = fc_call(ctx, "GET", "/v1/clusters", NULL, FC_CALL_TIMEOUT_S, &r);
  if (rc != FC_EXIT_OK)
    goto done;
  if (ctx->json) {
    fc_print_body(&r);
    goto done;
  }
  arr = r.json ? json_object_get(r.json, "clusters") : NULL;
  if (!json_is_array(arr)) {
    rc = fc_bad_answer(&r);
    goto done;
  }
  fc_table_add(&t, "NAME");
  fc_table_add(&t, "REGION");
  fc_table_add(&t, "HEALTHY");
  fc_table_add(&t, "LATENCY");
  fc_table_add(&t, "NODES");
  fc_table_add(&t, "CPU(req/alloc)");
  fc_table_add(&t, "SANDBOXES");
  fc_table_add(&t, "WARM");
  fc_table_add(&t, "POOLS");
  json_array_foreach(arr, i, c) {
    const json_t *nodes = json_object_get(c, "nodes");
    const json_t *cpu = json_object_get(json_object_get(c, "capacity"), "cpu_millis");
    const json_t *pools = json_object_get(c, "pools"), *p;
    const json_t *lat = json_object_get(c, "api_latency_ms");
    struct fr_buf pb;
    char req[32], alloc[32];

    fc_table_add(&t, fc_jstr(c, "name", "?"));
    fc_table_add(&t, fc_jstr(c, "region", "-"));
    if (!json_is_true(json_object_get(c, "healthy")))
      fc_table_add(&t, "no");
    else if (json_is_false(json_object_get(c, "synced")))
      fc_table_add(&t, "syncing");
    else
      fc_table_add(&t, "yes");
    if (json_is_number(lat))
      fc_table_addf(&t, "%.1fms", json_number_value(lat));
    else
      fc_table_add(&t, "-");
    if (json_is_object(nodes))
      fc_table_addf(&t, "%" PRId64 "/%" PRId64, fc_jint(nodes, "ready", 0), fc_jint(nodes, "total", 0));
    else
      fc_table_add(&t, "-");
    if (json_is_object(cpu)) {
      fc_fmt_num((double)fc_jint(cpu, "requested", 0) / 1000.0, req, sizeof(req));
      fc_fmt_num((double)fc_jint(cpu, "allocatable", 0) / 1000.0, alloc, sizeof(alloc));
      fc_table_addf(&t, "%s/%s", req, alloc);
    } else {
      fc_table_add(&t, "-");
    }
    fc_table_addf(&t, "%" PRId64, fc_jint(c, "sandboxes", 0));
    fc_table_addf(&t, "%" PRId64, fc_jint(c, "warm_pods", 0));
    fr_buf_init(&pb);
    json_array_foreach(pools, j, p)
      fr_buf_printf(&pb, "%s%s %" PRId64 "/%" PRId64, j ? "," : "", fc_jstr(p, "name", "?"),
                    fc_jint(p, "ready", 0), fc_jint(p, "target", 0));
    fc_table_add(&t, pb.len ? pb.data : "-");
    fr_buf_free(&pb);
  }
  fc_table_print(&t, stdout);
done:
  fc_table_close(&t);
  fc_resp_close(&r);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* events                                                                  */

static const char events_usage[] =
    "usage: fedctl events\n"
    "\n"
    "Shows the recent spillover events of your own creates (GET /v1/events,\n"
    "newest first): a cluster answered with no room, was unavailable or timed\n"
    "out, and the rest of the batch moved on. AGE, CLUSTER, the create's\n"
    "REQUEST id (its X-Request-Id) and the REASON, which starts with\n"
    "no_room:, unavailable: or timeout:. The router keeps the last 64 events\n"
    "of all tenants and shows you yours.\n"
    "\n"
    "  --json             print the API response verbatim\n";

int fc_cmd_events(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  struct fc_resp r;
  struct fc_table t;
  const json_t *arr, *e;
  const char *val;
  int opt, rc;
  size_t i;
  int64_t now = fr_wall_ms() / 1000;

  fc_args_init(&a, ctx, "events", no_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    if (opt == FC_ARG_HELP) {
      fputs(events_usage, stdout);
      return FC_EXIT_OK;
    }
    if (opt == FC_ARG_ERR)
      return FC_EXIT_USAGE;
    return fc_usage_error("events", "unexpected argument '%s'", val);
  }
  if (fc_ctx_init(ctx) != 0)
    return FC_EXIT_USAGE;
  fc_resp_init(&r);
  fc_table_init(&t, 4);
  rc = fc_call(ctx, "GET", "/v1/events", NULL, FC_CALL_TIMEOUT_S, &r);
  if (rc != FC_EXIT_OK)
    goto done;
  if (ctx->json) {
    fc_print_body(&r);
    goto done;
  }
  arr = r.json ? json_object_get(r.json, "events") : NULL;
  if (!json_is_array(arr)) {
    rc = fc_bad_answer(&r);
    goto done;
  }
  if (json_array_size(arr) == 0) {
    fprintf(stderr, "No events.\n");
    goto done;
  }
  fc_table_add(&t, "AGE");
  fc_table_add(&t, "CLUSTER");
  fc_table_add(&t, "REQUEST");
  fc_table_add(&t, "REASON");
  json_array_foreach(arr, i, e) {
    int64_t at;
    char age[32] = "-";
    if (fr_time_parse_rfc3339(fc_jstr(e, "time", ""), &at) == 0)
      fc_fmt_duration(now - at < 0 ? 0 : now - at, age, sizeof(age));
    fc_table_add(&t, age);
    fc_table_add(&t, fc_jstr(e, "cluster", "-"));
    fc_table_add(&t, fc_jstr(e, "request_id", "-"));
    fc_table_add(&t, fc_jstr(e, "reason", "-"));
  }
  fc_table_print(&t, stdout);
done:
  fc_table_close(&t);
  fc_resp_close(&r);
  return rc;
}

/* ---------------------------------------------------------------------- */
/* version                                                                 */

static const char version_usage[] =
    "usage: fedctl version\n"
    "       fedctl --version\n"
    "\n"
    "Prints fedctl's version (`fedctl X.Y.Z`; with --json, {\"fedctl\":\"X.Y.Z\"}).\n"
    "Contacts nothing. A router's version is the version label of its\n"
    "fedrouter_build_info metric (GET /metrics).\n";

int fc_cmd_version(struct fc_ctx *ctx, int argc, char **argv) {
  struct fc_args a;
  const char *val;
  int opt;

  fc_args_init(&a, ctx, "version", no_opts, argc, argv);
  while ((opt = fc_args_next(&a, &val)) != FC_ARG_END) {
    if (opt == FC_ARG_HELP) {
      fputs(version_usage, stdout);
      return FC_EXIT_OK;
    }
    if (opt == FC_ARG_ERR)
      return FC_EXIT_USAGE;
    return fc_usage_error("version", "unexpected argument '%s'", val);
  }
  if (ctx->json)
    printf("{\"fedctl\":\"%s\"}\n", FR_VERSION);
  else
    printf("fedctl %s\n", FR_VERSION);
  return FC_EXIT_OK;
}
