/* loadgen - drives a running fedrouter (and, for comparison, a kubesim
 * directly) and reports latency percentiles and throughput as a table on
 * stdout and as JSON (--json-out). Benchmarks only: nothing here is a
 * pass/fail timing; the exit status says whether every request succeeded
 * and every figure was measured.
 *
 *   loadgen seed     N create -> first exec (echo hi) -> terminate cycles
 *   loadgen overhead the same exec through the router and straight against
 *                    the cluster's pods/exec, per concurrency level
 *   loadgen fanout   N sandboxes created in batches, one exec in each, all
 *                    concurrently, then terminated by label
 *   loadgen spillover  batches until the federation refuses, then more:
 *                    where each landed, placed == --capacity, clean 503s
 *   loadgen regions  US and APAC clients against a region-aware router and
 *                    a US-only one (--compare-url): the APAC exec tax
 *   loadgen failover steady cycles; the busiest cluster goes down (kubesim
 *                    admin API) and comes back: failed creates, clean 503s,
 *                    recovery time
 *   loadgen scale    create-rate curve over 1..k clusters, then -n sandboxes
 *                    in big batches: router RSS/CPU (/proc/<--router-pid>;
 *                    RSS also every 5% of -n while creating), capacity-view
 *                    freshness, exec in a sample, terminate
 *   loadgen soak     mixed create/exec/terminate for --duration; router RSS
 *                    and open fds sampled, growth bounded
 *
 * One uv_loop_t, created in main() and passed down in struct lg. Each
 * scenario is a sequence of phases; a phase starts its workers, then main
 * turns the loop (run_phase) until the last worker is done. Workers are
 * closed-loop: each issues its next request from the previous one's
 * callback, so <concurrency> requests are always in flight.
 *
 * Exit: 0 all good, 1 errors or missing figures, 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <uv.h>

#include "fr/buf.h"
#include "fr/kube.h"
#include "fr/kubeconfig.h"
#include "fr/log.h"
#include "fr/util.h"
#include "lg_http.h"

#define MAX_LEVELS 8
#define MAX_ERROR_KINDS 32
/* The exec timeout the router applies by default (api.md: timeout_s 60);
 * the direct side sends the same wrapped argv so the cluster does the same
 * work on both sides. */
#define EXEC_TIMEOUT_S "60"

enum scenario { SC_SEED, SC_OVERHEAD, SC_FANOUT, SC_SPILLOVER, SC_REGIONS, SC_FAILOVER, SC_SCALE, SC_SOAK };
#define MAX_SIMS 8

struct lg_opts {
  enum scenario scenario;
  const char *scenario_name;
  const char *url;
  const char *token;
  const char *pool;
  const char *image;
  const char *json_out;
  const char *direct_kubeconfig;
  const char *direct_context;
  const char *direct_namespace;
  long n;                 /* seed: cycles; overhead: execs per level and side; fanout: sandboxes */
  int n_set;
  int concurrency;
  int levels[MAX_LEVELS];
  int nlevels;
  double duration_s;      /* overhead: per level and side instead of n (0 = use n) */
  long warmup;            /* overhead: unmeasured execs per level and side (-1 = default) */
  int batch;
  int exec_concurrency;   /* fanout */
  long timeout_ms;
  long capacity;          /* spillover: the federation's capacity in sandboxes */
  long beyond;            /* spillover: creates past full */
  const char *compare_url;  /* regions: the US-only router */
  const char *us_cluster, *apac_cluster;
  double min_tax, max_aware;
  char *sim_name[MAX_SIMS];  /* failover: --sim-admin NAME=URL */
  const char *sim_url[MAX_SIMS];
  int nsims;
  const char *sim_token;
  double fault_at_s, down_s;
  long held;
  long router_pid;        /* scale, soak: the fedrouter process (/proc/<pid>) */
  int curve[MAX_LEVELS];  /* scale: cluster counts of the create-rate curve */
  int ncurve;
  long curve_per_cluster; /* scale: sandboxes per cluster at each curve point */
  long exec_sample;       /* scale: sandboxes to exec into */
  long fresh_samples;     /* scale: capacity-view freshness samples */
  long settle_s;          /* scale: seconds the router has to give memory back after terminating */
  long settle_slack_mib;  /* scale: how far above its idle RSS it may stay (0: max(32, 15% of growth)) */
  double sample_s;        /* soak: seconds between RSS/fd samples */
  double warmup_s;        /* soak: samples before this are not the baseline */
  long fd_slack;          /* soak: allowed fd growth */
};

/* Latencies in milliseconds. */
struct lat {
  double *v;
  size_t n, cap;
};

struct lg {
  uv_loop_t *loop;
  struct lg_opts o;
  struct lg_http *http;
  struct fr_kube_client *kube;
  char run_id[16];        /* label value loadgen=<run_id> on every sandbox made */
  long errors;
  json_t *error_kinds;    /* "op: status code" -> count */
  json_t *report;
  uv_timer_t pause;        /* wait_ms() */
  int phase_done;
  int kube_closed;
  const char *cur_region;  /* create_body(): "region" (NULL = none) */
  const char *cur_cluster; /* create_body(): "clusters":[...] (NULL = all) */
  const char *cur_clusters_json; /* create_body(): raw JSON array, wins over cur_cluster */
};

/* ------------------------------------------------------------ helpers */

static int lat_add(struct lat *l, double ms) {
  double *nv;
  size_t ncap;

  if (l->n == l->cap) {
    ncap = l->cap ? l->cap * 2 : 1024;
    if ((nv = realloc(l->v, ncap * sizeof(*nv))) == NULL)
      return -ENOMEM;
    l->v = nv;
    l->cap = ncap;
  }
  l->v[l->n++] = ms;
  return 0;
}

static void lat_free(struct lat *l) {
  free(l->v);
  memset(l, 0, sizeof(*l));
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted values. */
static double pct(const struct lat *l, double p) {
  size_t k;

  if (l->n == 0)
    return NAN;
  k = (size_t)ceil(p / 100.0 * (double)l->n);
  if (k < 1)
    k = 1;
  return l->v[k - 1];
}

static double round3(double x) {
  return round(x * 1000.0) / 1000.0;
}

/* Sorts <l> and returns {"n","p50","p90","p99","max","mean"} in ms (NULL
 * figures when empty: the caller's figure check then fails). */
static json_t *lat_json(struct lat *l) {
  double sum = 0;
  size_t i;

  if (l->n == 0)
    return json_pack("{s:i,s:n,s:n,s:n,s:n,s:n}", "n", 0, "p50", "p90", "p99", "max", "mean");
  qsort(l->v, l->n, sizeof(double), cmp_double);
  for (i = 0; i < l->n; i++)
    sum += l->v[i];
  return json_pack("{s:I,s:f,s:f,s:f,s:f,s:f}", "n", (json_int_t)l->n, "p50", round3(pct(l, 50)),
                   "p90", round3(pct(l, 90)), "p99", round3(pct(l, 99)), "max",
                   round3(l->v[l->n - 1]), "mean", round3(sum / (double)l->n));
}

static double ns_to_ms(uint64_t ns) {
  return (double)ns / 1e6;
}

/* Counts an error under "<op>: <status> <code>" (or the transport error). */
static void note_error(struct lg *g, const char *op, int status, const char *body, const char *err) {
  char key[256];
  const char *code = NULL;
  json_t *j = NULL, *v;

  g->errors++;
  if (status != 0 && body != NULL) {
    j = json_loads(body, 0, NULL);
    code = json_string_value(json_object_get(json_object_get(j, "error"), "code"));
  }
  if (status == 0)
    snprintf(key, sizeof(key), "%s: %s", op, err != NULL ? err : "no response");
  else
    snprintf(key, sizeof(key), "%s: %d %s", op, status, code != NULL ? code : "");
  json_decref(j);
  v = json_object_get(g->error_kinds, key);
  if (v != NULL)
    json_integer_set(v, json_integer_value(v) + 1);
  else if (json_object_size(g->error_kinds) < MAX_ERROR_KINDS)
    json_object_set_new(g->error_kinds, key, json_integer(1));
  if (g->errors <= 5)
    fprintf(stderr, "loadgen: error: %s%s%.200s\n", key, body != NULL && body[0] ? " " : "",
            body != NULL ? body : "");
}

/* Turns the loop until the current phase sets g->phase_done. */
static int run_phase(struct lg *g) {
  while (!g->phase_done) {
    if (uv_run(g->loop, UV_RUN_ONCE) == 0 && !g->phase_done) {
      fprintf(stderr, "loadgen: internal error: the loop ran dry before the phase ended\n");
      return -EIO;
    }
  }
  g->phase_done = 0;
  return 0;
}

static void on_pause(uv_timer_t *t) {
  struct lg *g = t->data;

  g->phase_done = 1;
}

/* Lets the loop run for <ms> (connections stay served meanwhile). */
static int wait_ms(struct lg *g, uint64_t ms) {
  g->pause.data = g;
  uv_timer_start(&g->pause, on_pause, ms, 0);
  return run_phase(g);
}

/* ------------------------------------------------------------ one request, waited for */

struct sync_ctx {
  struct lg *g;
  int status;
  json_t *body;
  char *raw;
  char err[256];
};

static void on_sync(const struct lg_response *r, void *arg) {
  struct sync_ctx *s = arg;

  s->status = r->status;
  if (r->error != NULL)
    snprintf(s->err, sizeof(s->err), "%s", r->error);
  s->body = json_loadb(r->body, r->body_len, 0, NULL);
  s->raw = strdup(r->body);
  s->g->phase_done = 1;
}

/* <method> <path> [<body>], waited for. The caller json_decref()s s->body
 * and free()s s->raw. Returns 0 (look at s->status) or a negative errno. */
static int sync_request(struct lg *g, const char *method, const char *path, const char *body,
                        struct sync_ctx *s) {
  int rc;

  memset(s, 0, sizeof(*s));
  s->g = g;
  if ((rc = lg_http_request(g->http, method, path, body, on_sync, s)) != 0)
    return rc;
  return run_phase(g);
}

static void sync_clear(struct sync_ctx *s) {
  json_decref(s->body);
  free(s->raw);
  s->body = NULL;
  s->raw = NULL;
}

/* The create request body: the pool, or the image; a batch of <num>. */
static int create_body(struct lg *g, int num, struct fr_buf *b) {
  fr_buf_reset(b);
  if (fr_buf_puts(b, "{\"name\":\"lg\",") != 0)
    return -ENOMEM;
  if (g->o.pool != NULL) {
    if (fr_buf_puts(b, "\"pool\":") != 0 || fr_buf_put_json_str(b, g->o.pool, strlen(g->o.pool)) != 0)
      return -ENOMEM;
  } else {
    if (fr_buf_puts(b, "\"image\":") != 0 || fr_buf_put_json_str(b, g->o.image, strlen(g->o.image)) != 0)
      return -ENOMEM;
  }
  if (g->cur_region != NULL &&
      (fr_buf_puts(b, ",\"region\":") != 0 || fr_buf_put_json_str(b, g->cur_region, strlen(g->cur_region)) != 0))
    return -ENOMEM;
  if (g->cur_clusters_json != NULL &&
      (fr_buf_puts(b, ",\"clusters\":") != 0 || fr_buf_puts(b, g->cur_clusters_json) != 0))
    return -ENOMEM;
  if (g->cur_clusters_json == NULL && g->cur_cluster != NULL &&
      (fr_buf_puts(b, ",\"clusters\":[") != 0 ||
       fr_buf_put_json_str(b, g->cur_cluster, strlen(g->cur_cluster)) != 0 || fr_buf_puts(b, "]") != 0))
    return -ENOMEM;
  return fr_buf_printf(b, ",\"num_sandboxes\":%d,\"labels\":{\"loadgen\":\"%s\"}}", num, g->run_id);
}

/* Is <r> a 200 exec answer with stdout "hi\n" and exit code 0? */
static int exec_ok(const struct lg_response *r) {
  json_t *j;
  int ok;

  if (r->status != 200)
    return 0;
  j = json_loadb(r->body, r->body_len, 0, NULL);
  ok = json_is_string(json_object_get(j, "stdout")) &&
       strcmp(json_string_value(json_object_get(j, "stdout")), "hi\n") == 0 &&
       json_integer_value(json_object_get(j, "exit_code")) == 0 &&
       json_is_integer(json_object_get(j, "exit_code"));
  json_decref(j);
  return ok;
}

static const char exec_body[] = "{\"argv\":[\"echo\",\"hi\"]}";

/* Sandboxes of this run the router still lists as not terminating, waiting
 * up to 10 s for its cache to catch up with our own terminations. Any left
 * are terminated by label and reported (as errors) in "leaked". */
static long check_leaks(struct lg *g) {
  struct sync_ctx s;
  char path[128];
  json_t *v;
  size_t i;
  long live = -1;
  int tries;

  snprintf(path, sizeof(path), "/v1/sandboxes?label=loadgen=%s", g->run_id);
  for (tries = 0; tries < 100; tries++) {
    if (sync_request(g, "GET", path, NULL, &s) != 0 || s.status != 200) {
      note_error(g, "list", s.status, s.raw, s.err);
      sync_clear(&s);
      return -1;
    }
    live = 0;
    json_array_foreach(json_object_get(s.body, "sandboxes"), i, v) {
      const char *st = json_string_value(json_object_get(v, "state"));
      if (st == NULL || strcmp(st, "terminating") != 0)
        live++;
    }
    sync_clear(&s);
    if (live == 0)
      return 0;
    if (wait_ms(g, 100) != 0)
      return -1;
  }
  if (sync_request(g, "DELETE", path, NULL, &s) == 0)
    sync_clear(&s);
  g->errors += live;
  fprintf(stderr, "loadgen: %ld sandbox(es) of this run still live after the run; terminated\n", live);
  return live;
}

/* ------------------------------------------------------------ seed */

struct seed {
  struct lg *g;
  struct lg_http *http;   /* the router this run talks to */
  long n;                 /* cycles */
  const char *expect_cluster; /* regions: every sandbox must land here (NULL = anywhere) */
  long misplaced;
  long started;
  int active;
  struct lat create, exec, total, term;
  struct fr_buf create_body;
};

struct seed_worker {
  struct seed *s;
  char *id;
  uint64_t t0;
};

static void seed_next(struct seed_worker *w);

static void seed_on_deleted(const struct lg_response *r, void *arg) {
  struct seed_worker *w = arg;

  if (r->status == 200)
    lat_add(&w->s->term, ns_to_ms(r->end_ns - r->start_ns));
  else
    note_error(w->s->g, "terminate", r->status, r->body, r->error);
  free(w->id);
  w->id = NULL;
  seed_next(w);
}

static void seed_delete(struct seed_worker *w) {
  char path[512];

  snprintf(path, sizeof(path), "/v1/sandboxes/%s", w->id);
  if (lg_http_request(w->s->http, "DELETE", path, NULL, seed_on_deleted, w) != 0) {
    note_error(w->s->g, "terminate", 0, NULL, "could not start the request");
    free(w->id);
    w->id = NULL;
    seed_next(w);
  }
}

static void seed_on_exec(const struct lg_response *r, void *arg) {
  struct seed_worker *w = arg;

  if (exec_ok(r)) {
    lat_add(&w->s->exec, ns_to_ms(r->end_ns - r->start_ns));
    lat_add(&w->s->total, ns_to_ms(r->end_ns - w->t0));
  } else {
    note_error(w->s->g, "exec", r->status, r->body, r->error != NULL ? r->error : "unexpected answer");
  }
  seed_delete(w);
}

static void seed_on_created(const struct lg_response *r, void *arg) {
  struct seed_worker *w = arg;
  char path[512];
  json_t *j;
  const char *id;

  if (r->status != 201) {
    note_error(w->s->g, "create", r->status, r->body, r->error);
    seed_next(w);
    return;
  }
  j = json_loadb(r->body, r->body_len, 0, NULL);
  id = json_string_value(json_object_get(json_array_get(json_object_get(j, "sandboxes"), 0), "id"));
  if (id == NULL || strlen(id) > 300 || (w->id = strdup(id)) == NULL) {
    json_decref(j);
    note_error(w->s->g, "create", r->status, r->body, NULL);
    seed_next(w);
    return;
  }
  if (w->s->expect_cluster != NULL) {
    const char *cl =
        json_string_value(json_object_get(json_array_get(json_object_get(j, "sandboxes"), 0), "cluster"));
    if (cl == NULL || strcmp(cl, w->s->expect_cluster) != 0) {
      w->s->misplaced++;
      w->s->g->errors++;
      fprintf(stderr, "loadgen: sandbox %s landed in %s, expected %s\n", w->id, cl ? cl : "?",
              w->s->expect_cluster);
    }
  }
  json_decref(j);
  lat_add(&w->s->create, ns_to_ms(r->end_ns - r->start_ns));
  snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", w->id);
  if (lg_http_request(w->s->http, "POST", path, exec_body, seed_on_exec, w) != 0) {
    note_error(w->s->g, "exec", 0, NULL, "could not start the request");
    seed_delete(w);
  }
}

static void seed_next(struct seed_worker *w) {
  struct seed *s = w->s;

  while (s->started < s->n) {
    s->started++;
    w->t0 = uv_hrtime();
    if (lg_http_request(s->http, "POST", "/v1/sandboxes", s->create_body.data, seed_on_created, w) == 0)
      return;
    note_error(s->g, "create", 0, NULL, "could not start the request");
  }
  if (--s->active == 0)
    s->g->phase_done = 1;
}

static int run_seed(struct lg *g, json_t *figures) {
  struct seed s;
  struct seed_worker *w;
  uint64_t t0, t1;
  long leaked;
  int i, c = g->o.concurrency, rc;

  memset(&s, 0, sizeof(s));
  s.g = g;
  s.http = g->http;
  s.n = g->o.n;
  fr_buf_init(&s.create_body);
  if (c > g->o.n)
    c = (int)g->o.n;
  if (create_body(g, 1, &s.create_body) != 0 || (w = calloc((size_t)c, sizeof(*w))) == NULL) {
    fr_buf_free(&s.create_body);
    return -ENOMEM;
  }
  t0 = uv_hrtime();
  s.active = c;
  for (i = 0; i < c; i++) {
    w[i].s = &s;
    seed_next(&w[i]);
  }
  rc = s.active > 0 ? run_phase(g) : 0;
  t1 = uv_hrtime();
  leaked = check_leaks(g);

  json_object_set_new(figures, "cycles", json_integer(g->o.n));
  json_object_set_new(figures, "completed", json_integer((json_int_t)s.total.n));
  json_object_set_new(figures, "wall_s", json_real(round3((double)(t1 - t0) / 1e9)));
  json_object_set_new(figures, "cycles_per_s", json_real(round3((double)s.total.n / ((double)(t1 - t0) / 1e9))));
  json_object_set_new(figures, "create_ms", lat_json(&s.create));
  json_object_set_new(figures, "first_exec_ms", lat_json(&s.exec));
  json_object_set_new(figures, "create_plus_first_exec_ms", lat_json(&s.total));
  json_object_set_new(figures, "terminate_ms", lat_json(&s.term));
  json_object_set_new(figures, "leaked", json_integer(leaked));

  printf("\nseed: %ld create -> first exec -> terminate cycles, concurrency %d, %s %s\n", g->o.n, c,
         g->o.pool ? "pool" : "image", g->o.pool ? g->o.pool : g->o.image);
  printf("  %-26s %8s %9s %9s %9s %9s\n", "ms", "n", "p50", "p90", "p99", "max");
  {
    const char *names[] = {"create", "first exec", "create + first exec", "terminate"};
    struct lat *ls[] = {&s.create, &s.exec, &s.total, &s.term};
    size_t k;
    for (k = 0; k < FR_ARRAY_SIZE(ls); k++)
      printf("  %-26s %8zu %9.1f %9.1f %9.1f %9.1f\n", names[k], ls[k]->n, pct(ls[k], 50),
             pct(ls[k], 90), pct(ls[k], 99), ls[k]->n ? ls[k]->v[ls[k]->n - 1] : NAN);
  }
  printf("  wall %.2f s, %.1f cycles/s, errors %ld, leaked %ld\n", (double)(t1 - t0) / 1e9,
         (double)s.total.n / ((double)(t1 - t0) / 1e9), g->errors, leaked);
  lat_free(&s.create);
  lat_free(&s.exec);
  lat_free(&s.total);
  lat_free(&s.term);
  fr_buf_free(&s.create_body);
  free(w);
  return rc;
}

/* ------------------------------------------------------------ exec runs (overhead, fanout) */

enum side { SIDE_ROUTER, SIDE_DIRECT };

/* <concurrency> closed-loop slots running one exec after another until
 * <target> have started or <deadline_ns> has passed. */
struct xrun {
  struct lg *g;
  enum side side;
  long target;
  uint64_t deadline_ns;   /* 0 = count only */
  long started, ok;
  int active;
  struct lat *lat;        /* NULL: warm-up, not recorded */
  char **paths;           /* router: exec paths, used round-robin */
  size_t npaths;
  const char *pod, *ns;   /* direct */
  char *const *argv;      /* direct */
  uint64_t t0, t1;
};

struct xslot {
  struct xrun *x;
  uint64_t t0;
};

static void xslot_next(struct xslot *s);

static void x_done(struct xslot *s, int ok, uint64_t end_ns) {
  struct xrun *x = s->x;

  if (ok) {
    x->ok++;
    if (x->lat != NULL)
      lat_add(x->lat, ns_to_ms(end_ns - s->t0));
  }
  xslot_next(s);
}

static void x_on_router(const struct lg_response *r, void *arg) {
  struct xslot *s = arg;
  int ok = exec_ok(r);

  if (!ok)
    note_error(s->x->g, "exec (router)", r->status, r->body, r->error != NULL ? r->error : "unexpected answer");
  x_done(s, ok, r->end_ns);
}

static void x_on_direct(const struct fr_kube_exec_result *res, void *arg) {
  struct xslot *s = arg;
  uint64_t end = uv_hrtime();
  int ok = res->error == 0 && !res->timed_out && res->exit_code == 0 && res->out_len == 3 &&
           memcmp(res->out, "hi\n", 3) == 0;

  if (!ok)
    note_error(s->x->g, "exec (direct)", res->http_status, NULL,
               res->message != NULL ? res->message : "unexpected answer");
  x_done(s, ok, end);
}

static void xslot_next(struct xslot *s) {
  struct xrun *x = s->x;
  struct fr_kube_exec_opts eo;
  int rc;

  for (;;) {
    if (x->deadline_ns != 0 ? uv_hrtime() >= x->deadline_ns : x->started >= x->target)
      break;
    x->started++;
    s->t0 = uv_hrtime();
    if (x->side == SIDE_ROUTER) {
      rc = lg_http_request(x->g->http, "POST", x->paths[(size_t)x->started % x->npaths], exec_body,
                           x_on_router, s);
    } else {
      memset(&eo, 0, sizeof(eo));
      eo.argv = x->argv;
      eo.max_stdout = eo.max_stderr = 65536;
      eo.timeout_ms = (uint64_t)x->g->o.timeout_ms;
      rc = fr_kube_exec(x->g->kube, x->ns, x->pod, &eo, x_on_direct, s, NULL);
    }
    if (rc == 0)
      return;
    note_error(x->g, x->side == SIDE_ROUTER ? "exec (router)" : "exec (direct)", 0, NULL,
               "could not start the request");
  }
  if (--x->active == 0) {
    x->t1 = uv_hrtime();
    x->g->phase_done = 1;
  }
}

/* Runs one exec phase; x is filled by the caller except the counters. */
static int xrun_run(struct xrun *x, int concurrency) {
  struct xslot *slots;
  int i, rc;

  if ((slots = calloc((size_t)concurrency, sizeof(*slots))) == NULL)
    return -ENOMEM;
  x->started = x->ok = 0;
  x->active = concurrency;
  x->t0 = uv_hrtime();
  if (x->deadline_ns != 0)
    x->deadline_ns += x->t0;
  for (i = 0; i < concurrency; i++) {
    slots[i].x = x;
    xslot_next(&slots[i]);
  }
  rc = x->active > 0 ? run_phase(x->g) : 0;
  if (x->t1 == 0)
    x->t1 = uv_hrtime();
  free(slots);
  return rc;
}

static json_t *side_json(const struct xrun *x, struct lat *l) {
  double wall = (double)(x->t1 - x->t0) / 1e9;

  return json_pack("{s:I,s:f,s:f,s:o}", "n", (json_int_t)x->ok, "wall_s", round3(wall), "exec_per_s",
                   round3((double)x->ok / wall), "latency_ms", lat_json(l));
}

/* ------------------------------------------------------------ overhead */

static void on_kube_closed(void *arg) {
  struct lg *g = arg;

  g->kube_closed = 1;
}

/* Creates one sandbox through the router (pool or image); returns its id
 * (free it) or NULL. */
static char *create_one(struct lg *g) {
  struct sync_ctx s;
  struct fr_buf b;
  char *id = NULL;
  const char *v;

  fr_buf_init(&b);
  if (create_body(g, 1, &b) != 0 || sync_request(g, "POST", "/v1/sandboxes", b.data, &s) != 0) {
    fr_buf_free(&b);
    return NULL;
  }
  v = json_string_value(json_object_get(json_array_get(json_object_get(s.body, "sandboxes"), 0), "id"));
  if (s.status != 201 || v == NULL)
    note_error(g, "create", s.status, s.raw, s.err);
  else
    id = strdup(v);
  sync_clear(&s);
  fr_buf_free(&b);
  return id;
}

static int run_overhead(struct lg *g, json_t *figures) {
  static char *const argv[] = {"timeout", "-s", "KILL", EXEC_TIMEOUT_S, "echo", "hi", NULL};
  struct fr_kube_client_opts ko;
  struct fr_kube_creds *creds = NULL;
  struct sync_ctx s;
  struct xrun x;
  struct lat lr, ld;
  char err[512], path[512], *id = NULL, *paths[1];
  const char *pod;
  json_t *levels = json_array(), *lv, *jr, *jd;
  int i, rc = -EIO;

  memset(&lr, 0, sizeof(lr));
  memset(&ld, 0, sizeof(ld));
  json_object_set_new(figures, "levels", levels);
  if (g->o.direct_kubeconfig == NULL) {
    fprintf(stderr, "loadgen: overhead needs --direct-kubeconfig FILE (the sandbox's cluster)\n");
    return -EINVAL;
  }
  if ((rc = fr_kubeconfig_load(g->o.direct_kubeconfig, g->o.direct_context, &creds, err, sizeof(err))) != 0) {
    fprintf(stderr, "loadgen: %s\n", err);
    return rc;
  }
  memset(&ko, 0, sizeof(ko));
  ko.name = "direct";
  ko.max_host_connections = 20000;
  ko.request_timeout_ms = (uint64_t)g->o.timeout_ms;
  rc = fr_kube_client_new(g->loop, creds, &ko, &g->kube);
  fr_kube_creds_free(creds);
  if (rc != 0) {
    fprintf(stderr, "loadgen: cannot create the direct client: %s\n", strerror(-rc));
    return rc;
  }
  if ((id = create_one(g)) == NULL || (pod = strchr(id, '.')) == NULL) {
    fprintf(stderr, "loadgen: could not create the sandbox to exec in\n");
    rc = -EIO;
    goto out;
  }
  pod++;
  json_object_set_new(figures, "sandbox", json_string(id));
  snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", id);
  paths[0] = path;

  printf("\noverhead: exec echo hi in %s, through the router vs straight to the cluster\n", id);
  printf("  %6s %-7s %8s %9s %9s %9s %10s\n", "conc", "side", "n", "p50 ms", "p99 ms", "max ms", "exec/s");
  for (i = 0; i < g->o.nlevels; i++) {
    int level = g->o.levels[i], side;
    long warm = g->o.warmup >= 0 ? g->o.warmup : (level > 100 ? level : 100);
    struct xrun xs[2];

    for (side = SIDE_ROUTER; side <= SIDE_DIRECT; side++) {
      struct lat *l = side == SIDE_ROUTER ? &lr : &ld;

      memset(&x, 0, sizeof(x));
      x.g = g;
      x.side = (enum side)side;
      x.paths = paths;
      x.npaths = 1;
      x.pod = pod;
      x.ns = g->o.direct_namespace;
      x.argv = argv;
      x.target = warm;
      if (warm > 0 && (rc = xrun_run(&x, level)) != 0)
        goto out;
      x.target = g->o.n;
      x.deadline_ns = g->o.duration_s > 0 ? (uint64_t)(g->o.duration_s * 1e9) : 0;
      x.t1 = 0;
      x.lat = l;
      if ((rc = xrun_run(&x, level)) != 0)
        goto out;
      xs[side] = x;
      json_decref(lat_json(l));   /* sorts */
      printf("  %6d %-7s %8ld %9.3f %9.3f %9.3f %10.0f\n", level, side == SIDE_ROUTER ? "router" : "direct",
             x.ok, pct(l, 50), pct(l, 99), l->n ? l->v[l->n - 1] : NAN,
             (double)x.ok / ((double)(x.t1 - x.t0) / 1e9));
    }
    jr = side_json(&xs[SIDE_ROUTER], &lr);
    jd = side_json(&xs[SIDE_DIRECT], &ld);
    lv = json_pack("{s:i,s:o,s:o}", "concurrency", level, "router", jr, "direct", jd);
    if (lr.n > 0 && ld.n > 0) {
      double tr = json_real_value(json_object_get(jr, "exec_per_s"));
      double td = json_real_value(json_object_get(jd, "exec_per_s"));
      json_object_set_new(lv, "added_p50_ms", json_real(round3(pct(&lr, 50) - pct(&ld, 50))));
      json_object_set_new(lv, "added_p99_ms", json_real(round3(pct(&lr, 99) - pct(&ld, 99))));
      json_object_set_new(lv, "throughput_ratio", json_real(td > 0 ? round3(tr / td) : 0));
      printf("  %6d added latency p50 %+.3f ms, p99 %+.3f ms; throughput router/direct %.3f\n", level,
             pct(&lr, 50) - pct(&ld, 50), pct(&lr, 99) - pct(&ld, 99), td > 0 ? tr / td : 0);
    } else {
      json_object_set_new(lv, "added_p50_ms", json_null());
      json_object_set_new(lv, "added_p99_ms", json_null());
      json_object_set_new(lv, "throughput_ratio", json_null());
    }
    json_array_append_new(levels, lv);
    lat_free(&lr);
    lat_free(&ld);
  }
  rc = 0;
out:
  lat_free(&lr);
  lat_free(&ld);
  if (id != NULL) {
    char dpath[512];
    snprintf(dpath, sizeof(dpath), "/v1/sandboxes/%s", id);
    if (sync_request(g, "DELETE", dpath, NULL, &s) == 0) {
      if (s.status != 200)
        note_error(g, "terminate", s.status, s.raw, s.err);
      sync_clear(&s);
    }
    free(id);
  }
  return rc;
}

/* ------------------------------------------------------------ fanout */

struct fanout {
  struct lg *g;
  long n;                 /* sandboxes to create */
  long requested;
  int active;
  struct lat batch_ms;
  char **paths;           /* exec path per created sandbox */
  size_t npaths, cap;
  struct fr_buf body;
  json_t *samples;        /* scale: [{sandboxes, rss_mib, t_s}] appended as batches land (NULL = none; borrowed) */
  size_t sample_every;    /* sandboxes between two samples */
  size_t sample_next;     /* npaths at which the next one is taken */
  uint64_t sample_t0;     /* t_s = 0 */
};

struct fbatch {
  struct fanout *f;
  int num;
};

static void fanout_next(struct fbatch *b);
static long proc_rss_kib(long pid);
static json_t *mib_json(long kib);

/* Appends one {sandboxes, rss_mib, t_s} sample of the router (--router-pid)
 * to f->samples: <sandboxes> is the number created so far (201 answers).
 * One read of /proc/<pid>/status, so cheap enough for every batch. */
static void fanout_sample(struct fanout *f, size_t sandboxes) {
  json_array_append_new(f->samples, json_pack("{s:I,s:o,s:f}", "sandboxes", (json_int_t)sandboxes, "rss_mib",
                                               mib_json(proc_rss_kib(f->g->o.router_pid)), "t_s",
                                               round3((double)(uv_hrtime() - f->sample_t0) / 1e9)));
}

static void fanout_on_created(const struct lg_response *r, void *arg) {
  struct fbatch *b = arg;
  struct fanout *f = b->f;
  json_t *j, *v;
  size_t i;
  char path[512], **np;

  if (r->status != 201) {
    note_error(f->g, "create batch", r->status, r->body, r->error);
    fanout_next(b);
    return;
  }
  lat_add(&f->batch_ms, ns_to_ms(r->end_ns - r->start_ns));
  j = json_loadb(r->body, r->body_len, 0, NULL);
  json_array_foreach(json_object_get(j, "sandboxes"), i, v) {
    const char *id = json_string_value(json_object_get(v, "id"));
    if (id == NULL)
      continue;
    if (f->npaths == f->cap) {
      size_t ncap = f->cap ? f->cap * 2 : 256;
      if ((np = realloc(f->paths, ncap * sizeof(*np))) == NULL)
        break;
      f->paths = np;
      f->cap = ncap;
    }
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", id);
    if ((f->paths[f->npaths] = strdup(path)) != NULL)
      f->npaths++;
  }
  json_decref(j);
  if (f->samples != NULL && f->npaths >= f->sample_next) {
    fanout_sample(f, f->npaths);
    while (f->sample_next <= f->npaths)
      f->sample_next += f->sample_every;
  }
  fanout_next(b);
}

static void fanout_next(struct fbatch *b) {
  struct fanout *f = b->f;
  long left;

  while ((left = f->n - f->requested) > 0) {
    b->num = left < f->g->o.batch ? (int)left : f->g->o.batch;
    f->requested += b->num;
    if (create_body(f->g, b->num, &f->body) == 0 &&
        lg_http_request(f->g->http, "POST", "/v1/sandboxes", f->body.data, fanout_on_created, b) == 0)
      return;
    note_error(f->g, "create batch", 0, NULL, "could not start the request");
  }
  if (--f->active == 0)
    f->g->phase_done = 1;
}

/* Creates <n> sandboxes in batches of --batch, -c batches in flight (the
 * number used goes to *inflight); f->paths gets one exec path per sandbox
 * created. The caller frees <f> with fanout_free(). */
static int fanout_create(struct lg *g, struct fanout *f, long n, int *inflight) {
  struct fbatch *b;
  int i, c, rc = 0;

  f->g = g;
  f->n = n;
  fr_buf_init(&f->body);
  c = g->o.concurrency;
  if ((long)c * g->o.batch > n)
    c = (int)((n + g->o.batch - 1) / g->o.batch);
  if (c < 1)
    c = 1;
  *inflight = c;
  if ((b = calloc((size_t)c, sizeof(*b))) == NULL)
    return -ENOMEM;
  f->active = c;
  for (i = 0; i < c; i++) {
    b[i].f = f;
    fanout_next(&b[i]);
  }
  if (f->active > 0)
    rc = run_phase(g);
  free(b);
  return rc;
}

static void fanout_free(struct fanout *f) {
  size_t k;

  for (k = 0; k < f->npaths; k++)
    free(f->paths[k]);
  free(f->paths);
  lat_free(&f->batch_ms);
  fr_buf_free(&f->body);
  memset(f, 0, sizeof(*f));
}

static int run_fanout(struct lg *g, json_t *figures) {
  struct fanout f;
  struct xrun x;
  struct lat el;
  struct sync_ctx s;
  char path[128];
  uint64_t c0, c1, d0, d1;
  long terminated = -1, leaked;
  int c, rc;

  memset(&f, 0, sizeof(f));
  memset(&el, 0, sizeof(el));
  c0 = uv_hrtime();
  if ((rc = fanout_create(g, &f, g->o.n, &c)) != 0)
    goto out;
  c1 = uv_hrtime();

  memset(&x, 0, sizeof(x));
  x.g = g;
  x.side = SIDE_ROUTER;
  x.paths = f.paths;
  x.npaths = f.npaths;
  x.target = (long)f.npaths;
  x.lat = &el;
  if (f.npaths > 0) {
    int ec = g->o.exec_concurrency < (int)f.npaths ? g->o.exec_concurrency : (int)f.npaths;
    if ((rc = xrun_run(&x, ec)) != 0)
      goto out;
  }

  snprintf(path, sizeof(path), "/v1/sandboxes?label=loadgen=%s", g->run_id);
  d0 = uv_hrtime();
  if ((rc = sync_request(g, "DELETE", path, NULL, &s)) != 0)
    goto out;
  d1 = uv_hrtime();
  if (s.status == 200)
    terminated = (long)json_integer_value(json_object_get(s.body, "terminated"));
  else
    note_error(g, "terminate by label", s.status, s.raw, s.err);
  sync_clear(&s);
  if (terminated >= 0 && terminated != (long)f.npaths) {
    fprintf(stderr, "loadgen: terminated %ld sandboxes by label, created %zu\n", terminated, f.npaths);
    g->errors++;
  }
  leaked = check_leaks(g);

  {
    double cw = (double)(c1 - c0) / 1e9, dw = (double)(d1 - d0) / 1e9;
    json_object_set_new(figures, "requested", json_integer(g->o.n));
    json_object_set_new(figures, "created", json_integer((json_int_t)f.npaths));
    json_object_set_new(figures, "create_wall_s", json_real(round3(cw)));
    json_object_set_new(figures, "creates_per_s", json_real(round3((double)f.npaths / cw)));
    json_object_set_new(figures, "batch_create_ms", lat_json(&f.batch_ms));
    json_object_set_new(figures, "exec", f.npaths > 0 ? side_json(&x, &el) : json_null());
    json_object_set_new(figures, "terminated", json_integer(terminated));
    json_object_set_new(figures, "terminate_s", json_real(round3(dw)));
    json_object_set_new(figures, "leaked", json_integer(leaked));
    printf("\nfanout: %ld sandboxes in batches of %d (%d batches in flight), one exec in each\n", g->o.n,
           g->o.batch, c);
    printf("  created %zu in %.2f s: %.1f creates/s (batch p50 %.0f ms, p99 %.0f ms)\n", f.npaths, cw,
           (double)f.npaths / cw, pct(&f.batch_ms, 50), pct(&f.batch_ms, 99));
    if (f.npaths > 0)
      printf("  exec in all, %d concurrent: %ld ok in %.2f s: %.0f execs/s (p50 %.2f ms, p99 %.2f ms)\n",
             g->o.exec_concurrency < (int)f.npaths ? g->o.exec_concurrency : (int)f.npaths, x.ok,
             (double)(x.t1 - x.t0) / 1e9, (double)x.ok / ((double)(x.t1 - x.t0) / 1e9), pct(&el, 50),
             pct(&el, 99));
    printf("  terminated %ld by label in %.2f s; errors %ld, leaked %ld\n", terminated, dw, g->errors, leaked);
  }
  rc = 0;
out:
  fanout_free(&f);
  lat_free(&el);
  return rc;
}

/* ------------------------------------------------------------ spillover */

/* Adds one 201 answer's placement.clusters[] to <per> ({cluster: count})
 * and the first-landing order to <order>; returns the number created. */
static long add_placement(json_t *body, json_t *per, json_t *order) {
  json_t *v, *c;
  size_t i, k;
  long n = 0;

  json_array_foreach(json_object_get(json_object_get(body, "placement"), "clusters"), i, v) {
    const char *name = json_string_value(json_object_get(v, "cluster"));
    json_int_t cr = json_integer_value(json_object_get(v, "created"));
    int seen = 0;
    if (name == NULL || cr <= 0)
      continue;
    c = json_object_get(per, name);
    if (c != NULL)
      json_integer_set(c, json_integer_value(c) + cr);
    else
      json_object_set_new(per, name, json_integer(cr));
    json_array_foreach(order, k, c) {
      if (strcmp(json_string_value(c), name) == 0)
        seen = 1;
    }
    if (!seen)
      json_array_append_new(order, json_string(name));
    n += (long)cr;
  }
  return n;
}

/* Is <s> a 503 no_capacity with a Retry-After header? */
static int clean_no_capacity(const struct sync_ctx *s, long retry_after) {
  const char *code = json_string_value(json_object_get(json_object_get(s->body, "error"), "code"));

  return s->status == 503 && code != NULL && strcmp(code, "no_capacity") == 0 && retry_after >= 0;
}

/* sync_request() that also returns the Retry-After header. */
struct sync_ra {
  struct sync_ctx s;
  long retry_after;
};

static void on_sync_ra(const struct lg_response *r, void *arg) {
  struct sync_ra *x = arg;

  x->retry_after = r->retry_after;
  on_sync(r, &x->s);
}

static int sync_request_ra(struct lg *g, struct lg_http *h, const char *method, const char *path,
                           const char *body, struct sync_ra *x) {
  int rc;

  memset(x, 0, sizeof(*x));
  x->s.g = g;
  x->retry_after = -1;
  if ((rc = lg_http_request(h, method, path, body, on_sync_ra, x)) != 0)
    return rc;
  return run_phase(g);
}

static int run_spillover(struct lg *g, json_t *figures) {
  struct sync_ra x;
  struct sync_ctx s;
  struct fr_buf b;
  json_t *per = json_object(), *order = json_array(), *rej = json_object();
  char path[128];
  long placed = 0, requests = 0, premature = 0, beyond_clean = 0, terminated = -1, leaked, k;
  long full_at_batch = -1;
  int batch = g->o.batch, rc = 0, done = 0;
  uint64_t t0, t1;

  fr_buf_init(&b);
  json_object_set_new(figures, "per_cluster", per);
  json_object_set_new(figures, "fill_order", order);
  t0 = uv_hrtime();
  /* Fill: batches until one is refused, then single sandboxes until one is
   * refused: the federation is then full (all-or-nothing batches). */
  while (!done && placed < g->o.n) {
    int num = batch;
    if ((rc = create_body(g, num, &b)) != 0 || (rc = sync_request_ra(g, g->http, "POST", "/v1/sandboxes", b.data, &x)) != 0)
      goto out;
    requests++;
    if (x.s.status == 201) {
      placed += add_placement(x.s.body, per, order);
    } else if (clean_no_capacity(&x.s, x.retry_after)) {
      if (batch > 1) {
        full_at_batch = placed;
        batch = 1;
      } else {
        done = 1;
      }
    } else {
      note_error(g, "create (filling)", x.s.status, x.s.raw, x.s.err);
      if (x.s.status == 503)
        premature++;
      if (g->errors > 20)
        done = 1;
    }
    sync_clear(&x.s);
  }
  t1 = uv_hrtime();
  if (!done) {
    fprintf(stderr, "loadgen: placed %ld sandboxes (-n) without the federation refusing one\n", placed);
    g->errors++;
  }
  if (placed != g->o.capacity) {
    fprintf(stderr, "loadgen: the federation took %ld sandboxes, its capacity is %ld\n", placed, g->o.capacity);
    g->errors++;
  }
  /* Past full: every create must be a clean 503 no_capacity + Retry-After. */
  for (k = 0; k < g->o.beyond; k++) {
    int num = (k % 2 == 0) ? 1 : g->o.batch;
    if ((rc = create_body(g, num, &b)) != 0 || (rc = sync_request_ra(g, g->http, "POST", "/v1/sandboxes", b.data, &x)) != 0)
      goto out;
    if (clean_no_capacity(&x.s, x.retry_after)) {
      json_t *c = json_object_get(rej, num == 1 ? "single" : "batch");
      beyond_clean++;
      if (c != NULL)
        json_integer_set(c, json_integer_value(c) + 1);
      else
        json_object_set_new(rej, num == 1 ? "single" : "batch", json_integer(1));
      if (k == 0) {
        json_object_set_new(figures, "retry_after_s", json_integer(x.retry_after));
        json_object_set_new(figures, "first_refusal", json_incref(json_object_get(x.s.body, "error")));
      }
    } else {
      if (x.s.status == 201)
        placed += add_placement(x.s.body, per, order);
      note_error(g, "create (past full)", x.s.status, x.s.raw,
                 x.s.status == 503 ? "no Retry-After" : x.s.err);
    }
    sync_clear(&x.s);
  }

  snprintf(path, sizeof(path), "/v1/sandboxes?label=loadgen=%s", g->run_id);
  if ((rc = sync_request(g, "DELETE", path, NULL, &s)) != 0)
    goto out;
  if (s.status == 200)
    terminated = (long)json_integer_value(json_object_get(s.body, "terminated"));
  else
    note_error(g, "terminate by label", s.status, s.raw, s.err);
  sync_clear(&s);
  if (terminated != placed) {
    fprintf(stderr, "loadgen: terminated %ld by label, placed %ld\n", terminated, placed);
    g->errors++;
  }
  leaked = check_leaks(g);

  json_object_set_new(figures, "capacity", json_integer(g->o.capacity));
  json_object_set_new(figures, "placed", json_integer(placed));
  json_object_set_new(figures, "create_requests_until_full", json_integer(requests));
  json_object_set_new(figures, "fill_s", json_real(round3((double)(t1 - t0) / 1e9)));
  json_object_set_new(figures, "first_batch_refused_at", json_integer(full_at_batch));
  json_object_set_new(figures, "failed_before_full", json_integer(premature));
  json_object_set_new(figures, "past_full_attempts", json_integer(g->o.beyond));
  json_object_set_new(figures, "past_full_clean_503", json_integer(beyond_clean));
  json_object_set_new(figures, "past_full_by_size", rej);
  rej = NULL;
  json_object_set_new(figures, "terminated", json_integer(terminated));
  json_object_set_new(figures, "leaked", json_integer(leaked));

  printf("\nspillover: batches of %d until the federation (capacity %ld) refuses, then %ld more creates\n",
         g->o.batch, g->o.capacity, g->o.beyond);
  {
    size_t i;
    json_t *v;
    json_array_foreach(order, i, v) {
      printf("  %-12s %6" JSON_INTEGER_FORMAT " sandboxes\n", json_string_value(v),
             json_integer_value(json_object_get(per, json_string_value(v))));
    }
  }
  printf("  placed %ld of capacity %ld in %.2f s (%ld requests; first batch refused at %ld); failed before full: %ld\n",
         placed, g->o.capacity, (double)(t1 - t0) / 1e9, requests, full_at_batch, premature);
  printf("  past full: %ld of %ld creates answered 503 no_capacity with Retry-After\n", beyond_clean, g->o.beyond);
  printf("  terminated %ld; errors %ld, leaked %ld\n", terminated, g->errors, leaked);
  rc = 0;
out:
  json_decref(rej);
  fr_buf_free(&b);
  return rc;
}

/* ------------------------------------------------------------ regions */

/* One seed-style run of n create -> exec -> terminate cycles against <h>
 * with client region <region>; every sandbox must land in <expect>. */
static json_t *region_run(struct lg *g, struct lg_http *h, const char *region, const char *expect,
                          double *create_p50, double *exec_p50, double *total_p50, double *total_p99) {
  struct seed s;
  struct seed_worker *w;
  json_t *j;
  int i, c = g->o.concurrency;

  memset(&s, 0, sizeof(s));
  s.g = g;
  s.http = h;
  s.n = g->o.n;
  s.expect_cluster = expect;
  fr_buf_init(&s.create_body);
  if (c > g->o.n)
    c = (int)g->o.n;
  g->cur_region = region;
  if (create_body(g, 1, &s.create_body) != 0 || (w = calloc((size_t)c, sizeof(*w))) == NULL) {
    g->cur_region = NULL;
    fr_buf_free(&s.create_body);
    return NULL;
  }
  g->cur_region = NULL;
  s.active = c;
  for (i = 0; i < c; i++) {
    w[i].s = &s;
    seed_next(&w[i]);
  }
  if (s.active > 0 && run_phase(g) != 0)
    g->errors++;
  j = json_pack("{s:s,s:s,s:I,s:o,s:o,s:o,s:o}", "client_region", region, "landed_in", expect, "misplaced",
                (json_int_t)s.misplaced, "create_ms", lat_json(&s.create), "exec_ms", lat_json(&s.exec),
                "create_plus_exec_ms", lat_json(&s.total), "terminate_ms", lat_json(&s.term));
  *create_p50 = pct(&s.create, 50);
  *exec_p50 = pct(&s.exec, 50);
  *total_p50 = pct(&s.total, 50);
  *total_p99 = pct(&s.total, 99);
  lat_free(&s.create);
  lat_free(&s.exec);
  lat_free(&s.total);
  lat_free(&s.term);
  fr_buf_free(&s.create_body);
  free(w);
  return j;
}

static int run_regions(struct lg *g, json_t *figures) {
  struct lg_http *hb = NULL, *ha = g->http;
  double cp[3], ep[3], tp[3], t99[3];
  json_t *r[3];
  long leaked;
  int i, rc;
  static const char *const names[] = {"aware_us_client", "aware_apac_client", "us_only_apac_client"};

  if (g->o.compare_url == NULL) {
    fprintf(stderr, "loadgen: regions needs --compare-url (the US-only router)\n");
    return -EINVAL;
  }
  if ((rc = lg_http_new(g->loop, g->o.compare_url, g->o.token, g->o.timeout_ms, &hb)) != 0)
    return rc;
  r[0] = region_run(g, ha, "us", g->o.us_cluster, &cp[0], &ep[0], &tp[0], &t99[0]);
  r[1] = region_run(g, ha, "apac", g->o.apac_cluster, &cp[1], &ep[1], &tp[1], &t99[1]);
  r[2] = region_run(g, hb, "apac", g->o.us_cluster, &cp[2], &ep[2], &tp[2], &t99[2]);
  for (i = 0; i < 3; i++)
    json_object_set_new(figures, names[i], r[i] != NULL ? r[i] : json_null());
  leaked = check_leaks(g);
  g->http = hb;
  leaked += check_leaks(g);
  g->http = ha;
  lg_http_free(hb);
  json_object_set_new(figures, "leaked", json_integer(leaked));
  if (r[0] == NULL || r[1] == NULL || r[2] == NULL)
    return -ENOMEM;
  {
    double tax_exec = ep[2] / ep[0], tax_total = tp[2] / tp[0], tax_create = cp[2] / cp[0];
    double aw_exec = ep[1] / ep[0], aw_total = tp[1] / tp[0];
    json_object_set_new(figures, "us_only_tax", json_pack("{s:f,s:f,s:f}", "exec_p50", round3(tax_exec),
                                                          "create_p50", round3(tax_create),
                                                          "create_plus_exec_p50", round3(tax_total)));
    json_object_set_new(figures, "region_aware_tax",
                        json_pack("{s:f,s:f}", "exec_p50", round3(aw_exec), "create_plus_exec_p50", round3(aw_total)));
    printf("\nregions: %ld create -> exec -> terminate cycles per client, concurrency %d\n", g->o.n,
           g->o.concurrency);
    printf("  %-34s %-10s %9s %9s %9s %9s\n", "ms (p50 unless noted)", "landed", "create", "exec",
           "total", "total p99");
    for (i = 0; i < 3; i++)
      printf("  %-34s %-10s %9.1f %9.1f %9.1f %9.1f\n",
             i == 0 ? "US client, region-aware" : i == 1 ? "APAC client, region-aware" : "APAC client, US-only",
             i == 1 ? g->o.apac_cluster : g->o.us_cluster, cp[i], ep[i], tp[i], t99[i]);
    printf("  APAC tax vs a US client: US-only exec %.2fx (create+exec %.2fx); region-aware exec %.2fx "
           "(create+exec %.2fx)\n", tax_exec, tax_total, aw_exec, aw_total);
    printf("  errors %ld, leaked %ld\n", g->errors, leaked);
    if (!(tax_exec >= g->o.min_tax)) {
      fprintf(stderr, "loadgen: US-only APAC exec tax %.2fx < %.2fx: the penalty was not reproduced\n", tax_exec,
              g->o.min_tax);
      g->errors++;
    }
    if (!(aw_exec <= g->o.max_aware)) {
      fprintf(stderr, "loadgen: region-aware APAC exec %.2fx a US client's > %.2fx: the tax is not gone\n",
              aw_exec, g->o.max_aware);
      g->errors++;
    }
  }
  return 0;
}

/* ------------------------------------------------------------ failover */

struct fo {
  struct lg *g;
  struct fr_buf body;
  const char *victim;     /* cluster taken down (NULL until chosen) */
  int down, stop, active;
  uint64_t down_ns;
  json_t *created_by_phase[3];  /* before, down, after: {cluster: n} */
  int phase;
  long creates_ok, creates_failed, cycles_ok, exec_lost_503, term_lost_503;
  char **orphans;         /* sandboxes whose terminate met the cluster down */
  size_t norphans, orphan_cap;
  struct lat create;
};

struct fo_worker {
  struct fo *f;
  char *id;
  char cluster[64];
};

static void fo_next(struct fo_worker *w);

static void count_in(json_t *o, const char *k) {
  json_t *c = json_object_get(o, k);

  if (c != NULL)
    json_integer_set(c, json_integer_value(c) + 1);
  else
    json_object_set_new(o, k, json_integer(1));
}

static int is_unavailable(const struct lg_response *r) {
  json_t *j;
  int ok = 0;

  if (r->status != 503)
    return 0;
  j = json_loadb(r->body, r->body_len, 0, NULL);
  ok = json_is_string(json_object_get(json_object_get(j, "error"), "code")) &&
       strcmp(json_string_value(json_object_get(json_object_get(j, "error"), "code")), "cluster_unavailable") == 0;
  json_decref(j);
  return ok;
}

static int on_victim(const struct fo_worker *w) {
  return w->f->victim != NULL && strcmp(w->cluster, w->f->victim) == 0;
}

static void fo_on_deleted(const struct lg_response *r, void *arg) {
  struct fo_worker *w = arg;
  struct fo *f = w->f;

  if (r->status == 200) {
    f->cycles_ok++;
  } else if (on_victim(w) && is_unavailable(r)) {
    f->term_lost_503++;
    if (f->norphans == f->orphan_cap) {
      size_t nc = f->orphan_cap ? f->orphan_cap * 2 : 64;
      char **no = realloc(f->orphans, nc * sizeof(*no));
      if (no != NULL) {
        f->orphans = no;
        f->orphan_cap = nc;
      }
    }
    if (f->norphans < f->orphan_cap) {
      f->orphans[f->norphans++] = w->id;
      w->id = NULL;
    }
  } else {
    note_error(f->g, "terminate", r->status, r->body, r->error);
  }
  free(w->id);
  w->id = NULL;
  fo_next(w);
}

static void fo_delete(struct fo_worker *w) {
  char path[512];

  snprintf(path, sizeof(path), "/v1/sandboxes/%s", w->id);
  if (lg_http_request(w->f->g->http, "DELETE", path, NULL, fo_on_deleted, w) != 0) {
    note_error(w->f->g, "terminate", 0, NULL, "could not start the request");
    free(w->id);
    w->id = NULL;
    fo_next(w);
  }
}

static void fo_on_exec(const struct lg_response *r, void *arg) {
  struct fo_worker *w = arg;

  if (exec_ok(r))
    ;
  else if (on_victim(w) && is_unavailable(r))
    w->f->exec_lost_503++;
  else
    note_error(w->f->g, "exec", r->status, r->body, r->error != NULL ? r->error : "unexpected answer");
  fo_delete(w);
}

static void fo_on_created(const struct lg_response *r, void *arg) {
  struct fo_worker *w = arg;
  struct fo *f = w->f;
  char path[512];
  json_t *j;
  const char *id, *cl;

  if (r->status != 201) {
    f->creates_failed++;
    note_error(f->g, "create", r->status, r->body, r->error);
    fo_next(w);
    return;
  }
  j = json_loadb(r->body, r->body_len, 0, NULL);
  id = json_string_value(json_object_get(json_array_get(json_object_get(j, "sandboxes"), 0), "id"));
  cl = json_string_value(json_object_get(json_array_get(json_object_get(j, "sandboxes"), 0), "cluster"));
  if (id == NULL || cl == NULL || strlen(id) > 300 || (w->id = strdup(id)) == NULL) {
    json_decref(j);
    f->creates_failed++;
    note_error(f->g, "create", r->status, r->body, NULL);
    fo_next(w);
    return;
  }
  snprintf(w->cluster, sizeof(w->cluster), "%s", cl);
  count_in(f->created_by_phase[f->phase], cl);
  json_decref(j);
  f->creates_ok++;
  lat_add(&f->create, ns_to_ms(r->end_ns - r->start_ns));
  snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", w->id);
  if (lg_http_request(f->g->http, "POST", path, exec_body, fo_on_exec, w) != 0) {
    note_error(f->g, "exec", 0, NULL, "could not start the request");
    fo_delete(w);
  }
}

static void fo_next(struct fo_worker *w) {
  struct fo *f = w->f;

  if (!f->stop &&
      lg_http_request(f->g->http, "POST", "/v1/sandboxes", f->body.data, fo_on_created, w) == 0)
    return;
  if (--f->active == 0)
    f->g->phase_done = 1;
}

/* POST /_sim/faults {"down":<down>} to the kubesim admin of <cluster>. */
static int sim_down(struct lg *g, struct lg_http *admin, int down) {
  struct sync_ctx s;
  int rc;

  memset(&s, 0, sizeof(s));
  s.g = g;
  if ((rc = lg_http_request(admin, "POST", "/_sim/faults", down ? "{\"down\":true}" : "{\"down\":false}", on_sync,
                            &s)) != 0 ||
      (rc = run_phase(g)) != 0)
    return rc;
  if (s.status != 200) {
    note_error(g, "kubesim admin", s.status, s.raw, s.err);
    rc = -EIO;
  }
  sync_clear(&s);
  return rc;
}

static int run_failover(struct lg *g, json_t *figures) {
  struct fo f;
  struct fo_worker *w = NULL;
  struct lg_http *admin = NULL;
  struct sync_ctx s;
  struct fr_buf b;
  char path[512], **held = NULL;
  const char *best = NULL;
  json_t *v;
  size_t i;
  long nheld = 0, held_503 = 0, held_other = 0, held_ok_after = 0, pinned_refused = 0, terminated = -1;
  long leaked, k;
  double first_503_ms = -1, recovery_s = -1, held_back_s = -1;
  uint64_t t_up, t;
  int c = g->o.concurrency, rc = 0, vi = -1, j;

  memset(&f, 0, sizeof(f));
  f.g = g;
  fr_buf_init(&f.body);
  fr_buf_init(&b);
  for (j = 0; j < 3; j++)
    f.created_by_phase[j] = json_object();
  if (create_body(g, 1, &f.body) != 0 || (w = calloc((size_t)c, sizeof(*w))) == NULL ||
      (held = calloc((size_t)g->o.held + 1, sizeof(*held))) == NULL) {
    rc = -ENOMEM;
    goto out;
  }
  /* 1. steady load */
  f.active = c;
  for (j = 0; j < c; j++) {
    w[j].f = &f;
    fo_next(&w[j]);
  }
  if ((rc = wait_ms(g, (uint64_t)(g->o.fault_at_s * 1000))) != 0)
    goto out;
  /* 2. the victim: the cluster the steady creates went to most */
  {
    json_int_t most = -1;
    const char *kname;
    json_object_foreach(f.created_by_phase[0], kname, v) {
      if (json_integer_value(v) > most) {
        most = json_integer_value(v);
        best = kname;
      }
    }
  }
  for (j = 0; best != NULL && j < g->o.nsims; j++)
    if (strcmp(g->o.sim_name[j], best) == 0)
      vi = j;
  if (vi < 0) {
    fprintf(stderr, "loadgen: no steady create landed in a cluster named by --sim-admin\n");
    g->errors++;
    goto stop;
  }
  f.victim = g->o.sim_name[vi];
  if ((rc = lg_http_new(g->loop, g->o.sim_url[vi], g->o.sim_token, 10000, &admin)) != 0)
    goto stop;
  /* sandboxes held in the victim, to exec into while it is down */
  g->cur_cluster = f.victim;
  for (k = 0; k < g->o.held; k++) {
    const char *id;
    if (create_body(g, 1, &b) != 0 || sync_request(g, "POST", "/v1/sandboxes", b.data, &s) != 0)
      break;
    id = json_string_value(json_object_get(json_array_get(json_object_get(s.body, "sandboxes"), 0), "id"));
    if (s.status == 201 && id != NULL)
      held[nheld++] = strdup(id);
    else
      note_error(g, "create (held)", s.status, s.raw, s.err);
    sync_clear(&s);
  }
  /* 3. down */
  if ((rc = sim_down(g, admin, 1)) != 0)
    goto stop;
  f.down = 1;
  f.phase = 1;
  f.down_ns = uv_hrtime();
  while ((t = uv_hrtime()) - f.down_ns < (uint64_t)(g->o.down_s * 1e9)) {
    for (k = 0; k < nheld; k++) {
      snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", held[k]);
      if (sync_request(g, "POST", path, exec_body, &s) != 0)
        break;
      {
        const char *code = json_string_value(json_object_get(json_object_get(s.body, "error"), "code"));
        if (s.status == 503 && code != NULL && strcmp(code, "cluster_unavailable") == 0) {
          held_503++;
          if (first_503_ms < 0)
            first_503_ms = ns_to_ms(uv_hrtime() - f.down_ns);
        } else {
          held_other++;
          note_error(g, "exec (held, cluster down)", s.status, s.raw, s.err);
        }
      }
      sync_clear(&s);
    }
    if ((rc = wait_ms(g, 200)) != 0)
      goto stop;
  }
  /* 4. up: time until a create pinned to the victim is placed there */
  if ((rc = sim_down(g, admin, 0)) != 0)
    goto stop;
  t_up = uv_hrtime();
  f.phase = 2;
  for (;;) {
    if (create_body(g, 1, &b) != 0 || sync_request(g, "POST", "/v1/sandboxes", b.data, &s) != 0)
      break;
    if (s.status == 201) {
      recovery_s = (double)(uv_hrtime() - t_up) / 1e9;
      sync_clear(&s);
      break;
    }
    if (s.status == 503)
      pinned_refused++;
    else
      note_error(g, "create (pinned, recovering)", s.status, s.raw, s.err);
    sync_clear(&s);
    if ((double)(uv_hrtime() - t_up) / 1e9 > 60) {
      fprintf(stderr, "loadgen: the router did not place in %s within 60 s of it coming back\n", f.victim);
      g->errors++;
      break;
    }
    if ((rc = wait_ms(g, 100)) != 0)
      goto stop;
  }
  g->cur_cluster = NULL;
  /* the held sandboxes answer again */
  for (k = 0; k < nheld; k++) {
    int tries;
    snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", held[k]);
    for (tries = 0; tries < 100; tries++) {
      int ok;
      if (sync_request(g, "POST", path, exec_body, &s) != 0)
        break;
      ok = s.status == 200;
      sync_clear(&s);
      if (ok) {
        held_ok_after++;
        break;
      }
      if (wait_ms(g, 100) != 0)
        break;
    }
  }
  held_back_s = (double)(uv_hrtime() - t_up) / 1e9;
  if (held_ok_after != nheld) {
    fprintf(stderr, "loadgen: %ld of %ld held sandboxes answer exec after recovery\n", held_ok_after, nheld);
    g->errors++;
  }
  if ((rc = wait_ms(g, (uint64_t)(g->o.fault_at_s * 500))) != 0)
    goto stop;
stop:
  g->cur_cluster = NULL;
  f.stop = 1;
  if (f.active > 0 && run_phase(g) != 0)
    g->errors++;
  for (i = 0; i < f.norphans; i++) {
    snprintf(path, sizeof(path), "/v1/sandboxes/%s", f.orphans[i]);
    if (sync_request(g, "DELETE", path, NULL, &s) == 0) {
      if (s.status != 200 && s.status != 404)
        note_error(g, "terminate (after recovery)", s.status, s.raw, s.err);
      sync_clear(&s);
    }
  }
  snprintf(path, sizeof(path), "/v1/sandboxes?label=loadgen=%s", g->run_id);
  if (sync_request(g, "DELETE", path, NULL, &s) == 0) {
    if (s.status == 200)
      terminated = (long)json_integer_value(json_object_get(s.body, "terminated"));
    else
      note_error(g, "terminate by label", s.status, s.raw, s.err);
    sync_clear(&s);
  }
  leaked = check_leaks(g);

  json_object_set_new(figures, "victim", f.victim ? json_string(f.victim) : json_null());
  json_object_set_new(figures, "creates_ok", json_integer(f.creates_ok));
  json_object_set_new(figures, "creates_failed", json_integer(f.creates_failed));
  json_object_set_new(figures, "create_ms", lat_json(&f.create));
  json_object_set_new(figures, "created_before_fault", json_incref(f.created_by_phase[0]));
  json_object_set_new(figures, "created_while_down", json_incref(f.created_by_phase[1]));
  json_object_set_new(figures, "created_after_up", json_incref(f.created_by_phase[2]));
  json_object_set_new(figures, "cycles_ok", json_integer(f.cycles_ok));
  json_object_set_new(figures, "steady_exec_503_lost_cluster", json_integer(f.exec_lost_503));
  json_object_set_new(figures, "steady_terminate_503_lost_cluster", json_integer(f.term_lost_503));
  json_object_set_new(figures, "held_sandboxes", json_integer(nheld));
  json_object_set_new(figures, "held_exec_503_cluster_unavailable", json_integer(held_503));
  json_object_set_new(figures, "held_exec_other_answers", json_integer(held_other));
  json_object_set_new(figures, "first_503_after_down_ms", first_503_ms >= 0 ? json_real(round3(first_503_ms)) : json_null());
  json_object_set_new(figures, "down_s", json_real(g->o.down_s));
  json_object_set_new(figures, "pinned_creates_refused_while_recovering", json_integer(pinned_refused));
  json_object_set_new(figures, "recovery_s", recovery_s >= 0 ? json_real(round3(recovery_s)) : json_null());
  json_object_set_new(figures, "held_exec_ok_after_up", json_integer(held_ok_after));
  json_object_set_new(figures, "held_exec_back_s", json_real(round3(held_back_s)));
  json_object_set_new(figures, "terminated_by_label", json_integer(terminated));
  json_object_set_new(figures, "leaked", json_integer(leaked));
  if (f.creates_ok == 0 || nheld != g->o.held || held_503 == 0) {
    fprintf(stderr, "loadgen: failover: nothing measured (creates %ld, held %ld, held 503s %ld)\n", f.creates_ok,
            nheld, held_503);
    g->errors++;
  }

  printf("\nfailover: %d concurrent create -> exec -> terminate cycles; %s down for %.1f s after %.1f s\n", c,
         f.victim ? f.victim : "?", g->o.down_s, g->o.fault_at_s);
  {
    static const char *const pn[] = {"before the fault", "while down", "after it came back"};
    for (j = 0; j < 3; j++) {
      char *d = json_dumps(f.created_by_phase[j], JSON_COMPACT | JSON_SORT_KEYS);
      printf("  creates %-20s %s\n", pn[j], d ? d : "?");
      free(d);
    }
  }
  printf("  creates ok %ld, failed %ld (p50 %.1f ms, p99 %.1f ms); cycles completed %ld\n", f.creates_ok,
         f.creates_failed, pct(&f.create, 50), pct(&f.create, 99), f.cycles_ok);
  printf("  steady cycles caught by the fault: exec 503 cluster_unavailable %ld, terminate 503 %ld (terminated after)\n",
         f.exec_lost_503, f.term_lost_503);
  printf("  exec into %ld held sandboxes while down: %ld x 503 cluster_unavailable (first after %.1f ms), %ld other\n",
         nheld, held_503, first_503_ms, held_other);
  printf("  back up: creates placed in %s again after %.2f s (%ld pinned creates refused meanwhile); held sandboxes "
         "answer exec after %.2f s\n", f.victim ? f.victim : "?", recovery_s, pinned_refused, held_back_s);
  printf("  terminated %ld by label; errors %ld, leaked %ld\n", terminated, g->errors, leaked);
  rc = 0;
out:
  if (admin != NULL)
    lg_http_free(admin);
  for (k = 0; held != NULL && k < nheld; k++)
    free(held[k]);
  free(held);
  for (i = 0; i < f.norphans; i++)
    free(f.orphans[i]);
  free(f.orphans);
  for (j = 0; j < 3; j++)
    json_decref(f.created_by_phase[j]);
  lat_free(&f.create);
  fr_buf_free(&f.body);
  fr_buf_free(&b);
  free(w);
  return rc;
}

/* ------------------------------------------------------------ the router process (scale, soak) */

/* VmRSS of <pid> in KiB, or -1. */
static long proc_rss_kib(long pid) {
  char path[64], line[256];
  long kib = -1;
  FILE *f;

  snprintf(path, sizeof(path), "/proc/%ld/status", pid);
  if ((f = fopen(path, "r")) == NULL)
    return -1;
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "VmRSS:", 6) == 0) {
      kib = strtol(line + 6, NULL, 10);
      break;
    }
  }
  fclose(f);
  return kib;
}

/* utime + stime of <pid> in seconds, or -1. */
static double proc_cpu_s(long pid) {
  char path[64], buf[1024], *p;
  unsigned long ut, st;
  size_t len;
  FILE *f;

  snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
  if ((f = fopen(path, "r")) == NULL)
    return -1;
  len = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[len] = '\0';
  /* Fields after the command name, which may hold anything up to its last
   * ')': state(3) ... utime(14) stime(15). */
  if ((p = strrchr(buf, ')')) == NULL ||
      sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
    return -1;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Open descriptors of <pid>, or -1. */
static long proc_fds(long pid) {
  char path[64];
  uv_fs_t req;
  uv_dirent_t ent;
  long n = 0;

  snprintf(path, sizeof(path), "/proc/%ld/fd", pid);
  if (uv_fs_scandir(NULL, &req, path, 0, NULL) < 0) {
    uv_fs_req_cleanup(&req);
    return -1;
  }
  while (uv_fs_scandir_next(&req, &ent) != UV_EOF)
    n++;
  uv_fs_req_cleanup(&req);
  return n;
}

/* Where the RSS of <pid> is, from /proc/<pid>/smaps: the main heap
 * ([heap], grown by brk), anonymous mappings (malloc's other arenas and
 * its mmap()ed chunks, thread stacks), files (the binary, libraries) and
 * the rest; KiB each, or all -1. */
struct mem_split {
  long heap, anon, file, other;
};

static void proc_mem_split(long pid, struct mem_split *m) {
  char path[64], line[512];
  int kind = 3; /* of the mapping whose fields follow */
  FILE *f;

  m->heap = m->anon = m->file = m->other = -1;
  snprintf(path, sizeof(path), "/proc/%ld/smaps", pid);
  if ((f = fopen(path, "r")) == NULL)
    return;
  m->heap = m->anon = m->file = m->other = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    unsigned long lo, hi;
    char perms[8], name[400];
    int n = 0;
    long kib;
    if (sscanf(line, "%lx-%lx %7s %*s %*s %*s%n", &lo, &hi, perms, &n) == 3) {
      name[0] = '\0';
      sscanf(line + n, " %399[^\n]", name);
      kind = strcmp(name, "[heap]") == 0 ? 0 : name[0] == '\0' ? 1 : name[0] == '/' ? 2 : 3;
      continue;
    }
    if (strncmp(line, "Rss:", 4) == 0 && (kib = strtol(line + 4, NULL, 10)) > 0) {
      long *slot[] = {&m->heap, &m->anon, &m->file, &m->other};
      *slot[kind] += kib;
    }
  }
  fclose(f);
}

static json_t *mib_json(long kib);

static json_t *mem_split_json(const struct mem_split *m) {
  return json_pack("{s:o,s:o,s:o,s:o}", "heap_mib", mib_json(m->heap), "anon_mib", mib_json(m->anon), "file_mib",
                   mib_json(m->file), "other_mib", mib_json(m->other));
}

static json_t *mib_json(long kib) {
  return kib < 0 ? json_null() : json_real(round3((double)kib / 1024.0));
}

/* Sum of "sandboxes" over GET /v1/clusters; names (optional) gets the
 * cluster names. Returns -1 on failure (counted as an error). */
static long clusters_sandboxes(struct lg *g, json_t **names) {
  struct sync_ctx s;
  json_t *v;
  size_t i;
  long sum = 0;

  if (sync_request(g, "GET", "/v1/clusters", NULL, &s) != 0 || s.status != 200) {
    note_error(g, "clusters", s.status, s.raw, s.err);
    sync_clear(&s);
    return -1;
  }
  if (names != NULL)
    *names = json_array();
  json_array_foreach(json_object_get(s.body, "clusters"), i, v) {
    sum += (long)json_integer_value(json_object_get(v, "sandboxes"));
    if (names != NULL)
      json_array_append(*names, json_object_get(v, "name"));
  }
  sync_clear(&s);
  return sum;
}

/* Terminates this run's sandboxes by label; returns the number terminated
 * (-1 on failure, counted) and the wall time in *secs. */
static long terminate_run(struct lg *g, double *secs) {
  struct sync_ctx s;
  char path[128];
  uint64_t t0;
  long n = -1;

  snprintf(path, sizeof(path), "/v1/sandboxes?label=loadgen=%s", g->run_id);
  t0 = uv_hrtime();
  if (sync_request(g, "DELETE", path, NULL, &s) != 0)
    return -1;
  *secs = (double)(uv_hrtime() - t0) / 1e9;
  if (s.status == 200)
    n = (long)json_integer_value(json_object_get(s.body, "terminated"));
  else
    note_error(g, "terminate by label", s.status, s.raw, s.err);
  sync_clear(&s);
  return n;
}

/* ------------------------------------------------------------ scale */

/* One freshness sample: create one sandbox; from its 201, poll GET
 * /v1/clusters until the summed "sandboxes" count includes it. ms or -1. */
static double fresh_sample(struct lg *g, struct fanout *f) {
  long before, now;
  uint64_t t201;
  int c, i;

  if ((before = clusters_sandboxes(g, NULL)) < 0)
    return -1;
  if (fanout_create(g, f, 1, &c) != 0 || f->npaths == 0)
    return -1;
  t201 = uv_hrtime();
  for (i = 0; i < 5000; i++) {
    if ((now = clusters_sandboxes(g, NULL)) < 0)
      return -1;
    if (now > before)
      return ns_to_ms(uv_hrtime() - t201);
    if (wait_ms(g, 2) != 0)
      return -1;
  }
  fprintf(stderr, "loadgen: GET /v1/clusters did not show a new sandbox within 10 s\n");
  g->errors++;
  return -1;
}

static int run_scale(struct lg *g, json_t *figures) {
  struct fanout f, ff;
  struct xrun x;
  struct lat el, fresh;
  json_t *names = NULL, *curve = json_array(), *samples = json_array(), *pt, *after = json_array();
  char **sample = NULL;
  long pid = g->o.router_pid, rss_idle, rss0, rss1, rss2, rss3, terminated, leaked, nsample, k;
  long settled = -1, settled_target = -1;
  double settled_s = 0;
  struct mem_split split_at_full, split_full, split_settled;
  double cpu0, cpu1, cpu2, cw, tw = 0, ms;
  uint64_t c0, c1;
  int c, i, rc = 0;
  size_t nclusters;

  memset(&f, 0, sizeof(f));
  memset(&ff, 0, sizeof(ff));
  memset(&el, 0, sizeof(el));
  memset(&fresh, 0, sizeof(fresh));
  if (clusters_sandboxes(g, &names) < 0) {
    json_decref(curve);
    json_decref(samples);
    json_decref(after);
    return -EIO;
  }
  nclusters = json_array_size(names);
  /* The baseline: before the curve's creates and terminates churn the heap
   * (the router gives that back only some seconds later). */
  rss_idle = proc_rss_kib(pid);

  /* The create-rate curve: the same per-cluster load pinned to the first k
   * clusters, k = each --curve point. */
  printf("\nscale: %zu clusters, router pid %ld\n", nclusters, pid);
  for (i = 0; i < g->o.ncurve; i++) {
    struct fr_buf list;
    int k2 = g->o.curve[i];
    long n = g->o.curve_per_cluster * k2;
    if ((size_t)k2 > nclusters) {
      fprintf(stderr, "loadgen: curve point %d > %zu clusters; skipped\n", k2, nclusters);
      continue;
    }
    fr_buf_init(&list);
    fr_buf_puts(&list, "[");
    for (k = 0; k < k2; k++) {
      const char *nm = json_string_value(json_array_get(names, (size_t)k));
      if (k > 0)
        fr_buf_puts(&list, ",");
      fr_buf_put_json_str(&list, nm, strlen(nm));
    }
    if (fr_buf_puts(&list, "]") != 0) {
      fr_buf_free(&list);
      rc = -ENOMEM;
      goto out;
    }
    g->cur_clusters_json = list.data;
    c0 = uv_hrtime();
    rc = fanout_create(g, &f, n, &c);
    c1 = uv_hrtime();
    g->cur_clusters_json = NULL;
    fr_buf_free(&list);
    if (rc != 0)
      goto out;
    cw = (double)(c1 - c0) / 1e9;
    terminated = terminate_run(g, &tw);
    leaked = check_leaks(g);
    pt = json_pack("{s:i,s:I,s:I,s:f,s:f,s:f,s:I}", "clusters", k2, "requested", (json_int_t)n, "created",
                   (json_int_t)f.npaths, "create_wall_s", round3(cw), "creates_per_s",
                   round3((double)f.npaths / cw), "creates_per_s_per_cluster",
                   round3((double)f.npaths / cw / k2), "leaked", (json_int_t)leaked);
    json_array_append_new(curve, pt);
    printf("  curve: %2d cluster(s), %6zu sandboxes in %6.2f s: %8.1f creates/s (%.1f per cluster); "
           "terminated %ld\n",
           k2, f.npaths, cw, (double)f.npaths / cw, (double)f.npaths / cw / k2, terminated);
    fanout_free(&f);
  }

  /* The big create, with the router's RSS sampled every 5% of -n (as a
   * batch lands past the mark), from 0 sandboxes to the settled end. */
  rss0 = proc_rss_kib(pid);
  cpu0 = proc_cpu_s(pid);
  c0 = uv_hrtime();
  f.samples = samples;
  f.sample_t0 = c0;
  f.sample_every = g->o.n >= 20 ? (size_t)g->o.n / 20 : 1;
  f.sample_next = f.sample_every;
  json_array_append_new(samples, json_pack("{s:i,s:o,s:f}", "sandboxes", 0, "rss_mib", mib_json(rss0), "t_s", 0.0));
  if ((rc = fanout_create(g, &f, g->o.n, &c)) != 0)
    goto out;
  c1 = uv_hrtime();
  cw = (double)(c1 - c0) / 1e9;
  cpu1 = proc_cpu_s(pid);
  if (wait_ms(g, 1000) != 0) /* let the watch caches settle */
    goto out;
  rss1 = proc_rss_kib(pid);
  proc_mem_split(pid, &split_at_full);
  json_array_append_new(samples, json_pack("{s:I,s:o,s:f}", "sandboxes", (json_int_t)f.npaths, "rss_mib",
                                           mib_json(rss1), "t_s", round3((double)(uv_hrtime() - c0) / 1e9)));
  if (f.batch_ms.n > 0) /* pct() wants them sorted; lat_json() sorts only later */
    qsort(f.batch_ms.v, f.batch_ms.n, sizeof(double), cmp_double);
  printf("  created %zu of %ld in %.2f s: %.1f creates/s (%d batches of %d in flight, batch p50 %.0f ms, "
         "p99 %.0f ms)\n",
         f.npaths, g->o.n, cw, (double)f.npaths / cw, c, g->o.batch, pct(&f.batch_ms, 50),
         pct(&f.batch_ms, 99));
  printf("  router RSS %.1f MiB idle (%.1f MiB just before the create), %.1f MiB with %zu sandboxes "
         "(%.0f bytes per sandbox over idle); CPU %.2f s for the create phase\n",
         (double)rss_idle / 1024, (double)rss0 / 1024, (double)rss1 / 1024, f.npaths,
         f.npaths ? (double)(rss1 - rss_idle) * 1024.0 / (double)f.npaths : 0.0, cpu1 - cpu0);
  printf("  router RSS sampled %zu times while creating (every %zu sandboxes, and 1 s after): \"samples\" in "
         "the JSON\n",
         json_array_size(samples), f.sample_every);

  /* Capacity-view freshness, with the federation full of sandboxes. */
  for (k = 0; k < g->o.fresh_samples; k++) {
    ms = fresh_sample(g, &ff);
    if (ms >= 0)
      lat_add(&fresh, ms);
    fanout_free(&ff);
  }
  if (fresh.n > 0)
    qsort(fresh.v, fresh.n, sizeof(double), cmp_double);
  printf("  capacity-view freshness (201 -> GET /v1/clusters counts it): n %zu, p50 %.1f ms, max %.1f ms\n",
         fresh.n, pct(&fresh, 50), pct(&fresh, 100));

  /* Exec into a sample spread over the whole run. */
  nsample = (long)f.npaths < g->o.exec_sample ? (long)f.npaths : g->o.exec_sample;
  memset(&x, 0, sizeof(x));
  if (nsample > 0) {
    if ((sample = calloc((size_t)nsample, sizeof(*sample))) == NULL) {
      rc = -ENOMEM;
      goto out;
    }
    for (k = 0; k < nsample; k++)
      sample[k] = f.paths[(size_t)k * f.npaths / (size_t)nsample];
    x.g = g;
    x.side = SIDE_ROUTER;
    x.paths = sample;
    x.npaths = (size_t)nsample;
    x.target = nsample;
    x.lat = &el;
    if ((rc = xrun_run(&x, nsample < 100 ? (int)nsample : 100)) != 0)
      goto out;
  }
  printf("  exec into %ld sampled sandboxes: %ld ok (p50 %.2f ms, p99 %.2f ms)\n", nsample, x.ok,
         pct(&el, 50), pct(&el, 99));

  cpu2 = proc_cpu_s(pid);
  terminated = terminate_run(g, &tw);
  if (terminated >= 0 && terminated != (long)(f.npaths + (size_t)fresh.n)) {
    fprintf(stderr, "loadgen: terminated %ld by label, created %zu\n", terminated, f.npaths + fresh.n);
    g->errors++;
  }
  leaked = check_leaks(g);
  rss2 = proc_rss_kib(pid);
  if (wait_ms(g, 1000) != 0)
    goto out;
  rss3 = proc_rss_kib(pid);
  printf("  terminated %ld by label in %.2f s; router RSS %.1f MiB after (%.1f MiB 1 s later); "
         "errors %ld, leaked %ld\n",
         terminated, tw, (double)rss2 / 1024, (double)rss3 / 1024, g->errors, leaked);
  proc_mem_split(pid, &split_full);
  /* Memory back: the router's RSS must come down to near where it was
   * idle, within --settle-s (its periodic trim runs every 10 s). 0: not
   * checked (a sanitizer build, whose allocator keeps what is freed). */
  if (g->o.settle_s == 0) {
    printf("  memory back: not checked (--settle-s 0)\n");
  } else {
    long slack = g->o.settle_slack_mib > 0 ? g->o.settle_slack_mib * 1024
                                           : (rss1 - rss_idle) * 15 / 100 > 32 * 1024 ? (rss1 - rss_idle) * 15 / 100
                                                                                    : 32 * 1024;
    uint64_t t0 = uv_hrtime();
    long now = rss3;
    settled_target = rss_idle + slack;
    json_array_append_new(after, json_pack("{s:f,s:o}", "t_s", 1.0, "rss_mib", mib_json(rss3)));
    while (now > settled_target && (double)(uv_hrtime() - t0) / 1e9 < (double)g->o.settle_s) {
      if (wait_ms(g, 1000) != 0)
        goto out;
      now = proc_rss_kib(pid);
      json_array_append_new(after, json_pack("{s:f,s:o}", "t_s", round3(1.0 + (double)(uv_hrtime() - t0) / 1e9),
                                             "rss_mib", mib_json(now)));
    }
    settled = now;
    settled_s = 1.0 + (double)(uv_hrtime() - t0) / 1e9;
    proc_mem_split(pid, &split_settled);
    printf("  memory back: router RSS %.1f MiB %.0f s after terminating (idle %.1f MiB + slack %.0f MiB = %.1f "
           "MiB allowed): %s; heap %.1f MiB, other anonymous %.1f MiB\n",
           (double)settled / 1024, settled_s, (double)rss_idle / 1024, (double)slack / 1024,
           (double)settled_target / 1024, settled <= settled_target ? "ok" : "NOT BACK",
           (double)split_settled.heap / 1024, (double)split_settled.anon / 1024);
    if (settled > settled_target) {
      fprintf(stderr, "loadgen: the router kept %.1f MiB after every sandbox was terminated (allowed %.1f MiB)\n",
              (double)settled / 1024, (double)settled_target / 1024);
      g->errors++;
    }
  }

  json_object_set_new(figures, "clusters", json_integer((json_int_t)nclusters));
  json_object_set_new(figures, "requested", json_integer(g->o.n));
  json_object_set_new(figures, "created", json_integer((json_int_t)f.npaths));
  json_object_set_new(figures, "create_wall_s", json_real(round3(cw)));
  json_object_set_new(figures, "creates_per_s", json_real(round3((double)f.npaths / cw)));
  json_object_set_new(figures, "batch_create_ms", lat_json(&f.batch_ms));
  json_object_set_new(figures, "router_rss_mib_idle", mib_json(rss_idle));
  json_object_set_new(figures, "router_rss_mib_before", mib_json(rss0));
  json_object_set_new(figures, "router_rss_mib_full", mib_json(rss1));
  json_object_set_new(figures, "router_rss_bytes_per_sandbox",
                      rss_idle >= 0 && rss1 >= 0 && f.npaths > 0
                          ? json_real(round3((double)(rss1 - rss_idle) * 1024.0 / (double)f.npaths))
                          : json_null());
  json_object_set_new(figures, "router_rss_mib_after_terminate", mib_json(rss3));
  if (g->o.settle_s > 0) { /* measured: --settle-s 0 leaves the figures out */
    json_object_set_new(figures, "router_rss_mib_settled", mib_json(settled));
    json_object_set_new(figures, "router_rss_mib_settled_allowed", mib_json(settled_target));
    json_object_set_new(figures, "router_settle_s", json_real(round3(settled_s)));
    json_object_set_new(figures, "router_rss_after_terminate", json_incref(after));
  }
  json_object_set_new(figures, "router_memory_full", mem_split_json(&split_at_full));
  json_object_set_new(figures, "router_memory_after_terminate", mem_split_json(&split_full));
  if (g->o.settle_s > 0)
    json_object_set_new(figures, "router_memory_settled", mem_split_json(&split_settled));
  json_object_set_new(figures, "router_cpu_s_create",
                      cpu0 >= 0 && cpu1 >= 0 ? json_real(round3(cpu1 - cpu0)) : json_null());
  json_object_set_new(figures, "router_cpu_s_total", cpu2 >= 0 ? json_real(round3(cpu2)) : json_null());
  json_object_set_new(figures, "router_cpu_ms_per_create",
                      cpu0 >= 0 && cpu1 >= 0 && f.npaths > 0
                          ? json_real(round3((cpu1 - cpu0) * 1000.0 / (double)f.npaths))
                          : json_null());
  json_object_set_new(figures, "capacity_view_freshness_ms", lat_json(&fresh));
  json_object_set_new(figures, "exec_sample", json_pack("{s:I,s:I,s:o}", "n", (json_int_t)nsample, "ok",
                                                        (json_int_t)x.ok, "ms", lat_json(&el)));
  json_object_set_new(figures, "terminated", json_integer(terminated));
  json_object_set_new(figures, "terminate_s", json_real(round3(tw)));
  json_object_set_new(figures, "leaked", json_integer(leaked));
  if (json_array_size(curve) > 0) /* --curve not given: no curve */
    json_object_set_new(figures, "create_rate_vs_clusters", json_incref(curve));
  json_object_set_new(figures, "samples", json_incref(samples));
  if (x.ok != nsample)
    g->errors++;
out:
  free(sample);
  fanout_free(&f);
  fanout_free(&ff);
  lat_free(&el);
  lat_free(&fresh);
  json_decref(names);
  json_decref(curve);
  json_decref(samples);
  json_decref(after);
  return rc;
}

/* ------------------------------------------------------------ soak */

struct soak {
  struct lg *g;
  uint64_t stop_ns;
  int active;
  long cycles, creates, execs, terms;
  struct fr_buf body;
  uv_timer_t sampler;
  uint64_t t0;
  json_t *samples;        /* [{t_s, rss_mib, fds}] */
};

struct soak_worker {
  struct soak *s;
  char *ids[64];
  int nids, at;           /* ids created; next to exec, then to delete */
  int deleting;
};

static void soak_next(struct soak_worker *w);
static void soak_step(struct soak_worker *w);

static void soak_on_deleted(const struct lg_response *r, void *arg) {
  struct soak_worker *w = arg;

  if (r->status == 200)
    w->s->terms++;
  else
    note_error(w->s->g, "terminate", r->status, r->body, r->error);
  soak_step(w);
}

static void soak_on_exec(const struct lg_response *r, void *arg) {
  struct soak_worker *w = arg;

  if (exec_ok(r))
    w->s->execs++;
  else
    note_error(w->s->g, "exec", r->status, r->body, r->error != NULL ? r->error : "unexpected answer");
  soak_step(w);
}

/* Execs into every sandbox of the batch, then terminates each one, then
 * the next cycle. */
static void soak_step(struct soak_worker *w) {
  char path[512];
  int i;

  while (w->at < w->nids) {
    i = w->at++;
    snprintf(path, sizeof(path), w->deleting ? "/v1/sandboxes/%s" : "/v1/sandboxes/%s/exec", w->ids[i]);
    if (lg_http_request(w->s->g->http, w->deleting ? "DELETE" : "POST", path, w->deleting ? NULL : exec_body,
                        w->deleting ? soak_on_deleted : soak_on_exec, w) == 0)
      return;
    note_error(w->s->g, w->deleting ? "terminate" : "exec", 0, NULL, "could not start the request");
  }
  if (!w->deleting) {
    w->deleting = 1;
    w->at = 0;
    soak_step(w);
    return;
  }
  for (i = 0; i < w->nids; i++)
    free(w->ids[i]);
  w->nids = w->at = w->deleting = 0;
  w->s->cycles++;
  soak_next(w);
}

static void soak_on_created(const struct lg_response *r, void *arg) {
  struct soak_worker *w = arg;
  json_t *j, *v;
  size_t i;

  if (r->status != 201) {
    note_error(w->s->g, "create", r->status, r->body, r->error);
    soak_next(w);
    return;
  }
  j = json_loadb(r->body, r->body_len, 0, NULL);
  json_array_foreach(json_object_get(j, "sandboxes"), i, v) {
    const char *id = json_string_value(json_object_get(v, "id"));
    if (id != NULL && strlen(id) < 300 && w->nids < (int)FR_ARRAY_SIZE(w->ids) &&
        (w->ids[w->nids] = strdup(id)) != NULL)
      w->nids++;
  }
  json_decref(j);
  w->s->creates += w->nids;
  soak_step(w);
}

static void soak_next(struct soak_worker *w) {
  struct soak *s = w->s;

  if (uv_hrtime() < s->stop_ns) {
    if (lg_http_request(s->g->http, "POST", "/v1/sandboxes", s->body.data, soak_on_created, w) == 0)
      return;
    note_error(s->g, "create", 0, NULL, "could not start the request");
  }
  if (--s->active == 0)
    s->g->phase_done = 1;
}

static void soak_sample(struct soak *s) {
  long pid = s->g->o.router_pid;
  double t = (double)(uv_hrtime() - s->t0) / 1e9;

  json_array_append_new(s->samples, json_pack("{s:f,s:o,s:I,s:f,s:I}", "t_s", round3(t), "rss_mib",
                                              mib_json(proc_rss_kib(pid)), "fds", (json_int_t)proc_fds(pid),
                                              "cpu_s", round3(proc_cpu_s(pid)), "cycles",
                                              (json_int_t)s->cycles));
}

static void on_soak_sample(uv_timer_t *t) {
  soak_sample(t->data);
}

static int run_soak(struct lg *g, json_t *figures) {
  struct soak s;
  struct soak_worker *w;
  json_t *v, *first = NULL, *last;
  double rss_first, rss_last, rss_max = 0, wall, rss_bound;
  long fd_first, fd_last, fd_max = 0, leaked, sandboxes;
  size_t i;
  int c = g->o.concurrency, rc, bounded = 1;

  memset(&s, 0, sizeof(s));
  s.g = g;
  s.samples = json_array();
  fr_buf_init(&s.body);
  if (create_body(g, g->o.batch > 64 ? 64 : g->o.batch, &s.body) != 0 ||
      (w = calloc((size_t)c, sizeof(*w))) == NULL) {
    fr_buf_free(&s.body);
    json_decref(s.samples);
    return -ENOMEM;
  }
  uv_timer_init(g->loop, &s.sampler);
  s.sampler.data = &s;
  s.t0 = uv_hrtime();
  s.stop_ns = s.t0 + (uint64_t)(g->o.duration_s * 1e9);
  soak_sample(&s);
  uv_timer_start(&s.sampler, on_soak_sample, (uint64_t)(g->o.sample_s * 1000), (uint64_t)(g->o.sample_s * 1000));
  s.active = c;
  for (i = 0; i < (size_t)c; i++) {
    w[i].s = &s;
    soak_next(&w[i]);
  }
  rc = s.active > 0 ? run_phase(g) : 0;
  uv_timer_stop(&s.sampler);
  wall = (double)(uv_hrtime() - s.t0) / 1e9;
  /* The last sample once idle: exec connections in flight come and go. */
  if (rc == 0)
    rc = wait_ms(g, 2000);
  soak_sample(&s);
  uv_close((uv_handle_t *)&s.sampler, NULL);
  leaked = check_leaks(g);
  sandboxes = clusters_sandboxes(g, NULL);

  /* The RSS baseline: the first sample at or after the warm-up. The fd
   * baseline: the most seen from then to half-way (under load, the count
   * swings with the exec connections in flight); the last sample is idle. */
  fd_first = 0;
  json_array_foreach(s.samples, i, v) {
    double t = json_real_value(json_object_get(v, "t_s"));
    double r = json_number_value(json_object_get(v, "rss_mib"));
    long fd = (long)json_integer_value(json_object_get(v, "fds"));
    if (first == NULL && t >= g->o.warmup_s)
      first = v;
    if (first != NULL && t <= (g->o.warmup_s + g->o.duration_s) / 2 && fd > fd_first)
      fd_first = fd;
    if (r > rss_max)
      rss_max = r;
    if (fd > fd_max)
      fd_max = fd;
  }
  last = json_array_get(s.samples, json_array_size(s.samples) - 1);
  if (first == NULL)
    first = last;
  if (fd_first == 0)
    fd_first = (long)json_integer_value(json_object_get(first, "fds"));
  rss_first = json_number_value(json_object_get(first, "rss_mib"));
  rss_last = json_number_value(json_object_get(last, "rss_mib"));
  fd_last = (long)json_integer_value(json_object_get(last, "fds"));
  rss_bound = rss_first * 1.5 + 20;
  if (!(rss_first > 0) || fd_first <= 0 || rss_last > rss_bound || fd_last > fd_first + g->o.fd_slack) {
    bounded = 0;
    g->errors++;
    fprintf(stderr, "loadgen: router RSS %.1f -> %.1f MiB (bound %.1f), fds %ld -> %ld (bound %ld)\n", rss_first,
            rss_last, rss_bound, fd_first, fd_last, fd_first + g->o.fd_slack);
  }

  json_object_set_new(figures, "duration_s", json_real(round3(wall)));
  json_object_set_new(figures, "cycles", json_integer(s.cycles));
  json_object_set_new(figures, "creates", json_integer(s.creates));
  json_object_set_new(figures, "execs", json_integer(s.execs));
  json_object_set_new(figures, "terminates", json_integer(s.terms));
  json_object_set_new(figures, "creates_per_s", json_real(round3((double)s.creates / wall)));
  json_object_set_new(figures, "rss_mib", json_pack("{s:f,s:f,s:f,s:f,s:f}", "first_after_warmup", rss_first,
                                                    "last", rss_last, "max", rss_max, "bound", round3(rss_bound),
                                                    "at_start", json_number_value(json_object_get(
                                                                    json_array_get(s.samples, 0), "rss_mib"))));
  json_object_set_new(figures, "fds", json_pack("{s:I,s:I,s:I,s:I}", "first_after_warmup", (json_int_t)fd_first,
                                                "last", (json_int_t)fd_last, "max", (json_int_t)fd_max, "bound",
                                                (json_int_t)(fd_first + g->o.fd_slack)));
  json_object_set_new(figures, "flat", json_boolean(bounded));
  json_object_set_new(figures, "router_cpu_s",
                      json_real(json_real_value(json_object_get(last, "cpu_s")) -
                                json_real_value(json_object_get(json_array_get(s.samples, 0), "cpu_s"))));
  json_object_set_new(figures, "sandboxes_left_in_capacity_view", json_integer(sandboxes));
  json_object_set_new(figures, "leaked", json_integer(leaked));
  json_object_set_new(figures, "samples", json_incref(s.samples));

  printf("\nsoak: %.1f s, %d workers, create batch of %d -> exec in each -> terminate each\n", wall, c,
         g->o.batch > 64 ? 64 : g->o.batch);
  printf("  %ld cycles: %ld creates (%.1f/s), %ld execs, %ld terminates\n", s.cycles, s.creates,
         (double)s.creates / wall, s.execs, s.terms);
  printf("  %8s %10s %6s %8s\n", "t s", "RSS MiB", "fds", "cycles");
  json_array_foreach(s.samples, i, v)
    printf("  %8.1f %10.1f %6" JSON_INTEGER_FORMAT " %8" JSON_INTEGER_FORMAT "\n",
           json_real_value(json_object_get(v, "t_s")), json_number_value(json_object_get(v, "rss_mib")),
           json_integer_value(json_object_get(v, "fds")), json_integer_value(json_object_get(v, "cycles")));
  printf("  RSS first (after %.0f s warm-up) %.1f MiB, last %.1f, max %.1f (bound %.1f); fds baseline (most "
         "up to half-way) %ld, last (idle) %ld, max %ld (bound %ld): %s\n",
         g->o.warmup_s, rss_first, rss_last, rss_max, rss_bound, fd_first, fd_last, fd_max, fd_first + g->o.fd_slack,
         bounded ? "flat" : "GROWING");
  printf("  errors %ld, leaked %ld\n", g->errors, leaked);

  for (i = 0; i < (size_t)c; i++) {
    int k;
    for (k = 0; k < w[i].nids; k++)
      free(w[i].ids[k]);
  }
  free(w);
  fr_buf_free(&s.body);
  json_decref(s.samples);
  return rc;
}

/* ------------------------------------------------------------ report */

/* Does every number the scenario promises exist? (null = not measured) */
static int figures_complete(const json_t *v) {
  const char *k;
  json_t *e;
  size_t i;

  if (json_is_null(v))
    return 0;
  if (json_is_object(v)) {
    json_object_foreach((json_t *)v, k, e) {
      if (!figures_complete(e))
        return 0;
    }
  } else if (json_is_array(v)) {
    if (json_array_size(v) == 0)
      return 0;
    json_array_foreach(v, i, e) {
      if (!figures_complete(e))
        return 0;
    }
  } else if (json_is_real(v) && !isfinite(json_real_value(v))) {
    return 0;
  }
  return 1;
}

static json_t *machine_json(void) {
  uv_utsname_t u;
  json_t *m = json_object();
  long n = sysconf(_SC_NPROCESSORS_ONLN);

  json_object_set_new(m, "nproc", json_integer(n));
  if (uv_os_uname(&u) == 0) {
    json_object_set_new(m, "sysname", json_string(u.sysname));
    json_object_set_new(m, "release", json_string(u.release));
    json_object_set_new(m, "machine", json_string(u.machine));
  }
  json_object_set_new(m, "total_memory_bytes", json_integer((json_int_t)uv_get_total_memory()));
  return m;
}

static json_t *params_json(const struct lg *g) {
  const struct lg_opts *o = &g->o;
  json_t *p = json_object(), *lv;
  int i;

  json_object_set_new(p, "url", json_string(o->url));
  json_object_set_new(p, "n", json_integer(o->n));
  if (o->pool != NULL)
    json_object_set_new(p, "pool", json_string(o->pool));
  else
    json_object_set_new(p, "image", json_string(o->image));
  json_object_set_new(p, "run_label", json_string(g->run_id));
  switch (o->scenario) {
  case SC_SEED:
    json_object_set_new(p, "concurrency", json_integer(o->concurrency));
    break;
  case SC_OVERHEAD:
    lv = json_array();
    for (i = 0; i < o->nlevels; i++)
      json_array_append_new(lv, json_integer(o->levels[i]));
    json_object_set_new(p, "levels", lv);
    json_object_set_new(p, "duration_s", o->duration_s > 0 ? json_real(o->duration_s) : json_null());
    if (o->duration_s > 0)
      json_object_del(p, "n");
    json_object_set_new(p, "warmup", o->warmup >= 0 ? json_integer(o->warmup) : json_string("max(100, level)"));
    json_object_set_new(p, "direct_kubeconfig", json_string(o->direct_kubeconfig));
    json_object_set_new(p, "direct_namespace", json_string(o->direct_namespace));
    json_object_set_new(p, "exec_argv_direct", json_pack("[s,s,s,s,s,s]", "timeout", "-s", "KILL",
                                                         EXEC_TIMEOUT_S, "echo", "hi"));
    break;
  case SC_FANOUT:
    json_object_set_new(p, "batch", json_integer(o->batch));
    json_object_set_new(p, "batches_in_flight", json_integer(o->concurrency));
    json_object_set_new(p, "exec_concurrency", json_integer(o->exec_concurrency));
    break;
  case SC_SPILLOVER:
    json_object_set_new(p, "capacity", json_integer(o->capacity));
    json_object_set_new(p, "batch", json_integer(o->batch));
    json_object_set_new(p, "beyond", json_integer(o->beyond));
    break;
  case SC_REGIONS:
    json_object_set_new(p, "concurrency", json_integer(o->concurrency));
    json_object_set_new(p, "compare_url", json_string(o->compare_url ? o->compare_url : ""));
    json_object_set_new(p, "us_cluster", json_string(o->us_cluster));
    json_object_set_new(p, "apac_cluster", json_string(o->apac_cluster));
    json_object_set_new(p, "min_tax", json_real(o->min_tax));
    json_object_set_new(p, "max_aware", json_real(o->max_aware));
    break;
  case SC_FAILOVER:
    json_object_set_new(p, "concurrency", json_integer(o->concurrency));
    json_object_set_new(p, "fault_at_s", json_real(o->fault_at_s));
    json_object_set_new(p, "down_s", json_real(o->down_s));
    json_object_set_new(p, "held", json_integer(o->held));
    json_object_del(p, "n");
    break;
  case SC_SCALE:
    lv = json_array();
    for (i = 0; i < o->ncurve; i++)
      json_array_append_new(lv, json_integer(o->curve[i]));
    json_object_set_new(p, "curve_clusters", lv);
    json_object_set_new(p, "curve_per_cluster", json_integer(o->curve_per_cluster));
    json_object_set_new(p, "batch", json_integer(o->batch));
    json_object_set_new(p, "batches_in_flight", json_integer(o->concurrency));
    json_object_set_new(p, "exec_sample", json_integer(o->exec_sample));
    json_object_set_new(p, "freshness_samples", json_integer(o->fresh_samples));
    json_object_set_new(p, "router_pid", json_integer(o->router_pid));
    break;
  case SC_SOAK:
    json_object_del(p, "n");
    json_object_set_new(p, "duration_s", json_real(o->duration_s));
    json_object_set_new(p, "workers", json_integer(o->concurrency));
    json_object_set_new(p, "batch", json_integer(o->batch));
    json_object_set_new(p, "sample_s", json_real(o->sample_s));
    json_object_set_new(p, "warmup_s", json_real(o->warmup_s));
    json_object_set_new(p, "fd_slack", json_integer(o->fd_slack));
    json_object_set_new(p, "router_pid", json_integer(o->router_pid));
    break;
  }
  return p;
}

/* ------------------------------------------------------------ main */

static void usage(FILE *f) {
  fprintf(f,
          "usage: loadgen seed|overhead|fanout|spillover|regions|failover|scale|soak --url URL [--token TOKEN]\n"
          "               [options]\n"
          "\n"
          "  --url URL              the running fedrouter (http://127.0.0.1:PORT)\n"
          "  --token TOKEN          bearer token (default $FEDROUTER_TOKEN)\n"
          "  --pool NAME            create from this warm pool (else --image)\n"
          "  --image IMAGE          image for cold creates (default python:3.12)\n"
          "  -n N                   seed: cycles (200); overhead: execs per level and side (2000);\n"
          "                         fanout: sandboxes (1000)\n"
          "  -c N                   seed: concurrent cycles (10); fanout: batch creates in flight (4)\n"
          "  --json-out FILE        write the report as JSON\n"
          "  --timeout-ms MS        per request (default 120000)\n"
          "overhead:\n"
          "  --direct-kubeconfig F  kubeconfig of the cluster the sandbox lands in (required)\n"
          "  --direct-context CTX   its context (default current-context)\n"
          "  --namespace NS         the router's namespace in that cluster (default \"default\")\n"
          "  --levels 1,1000        concurrency levels\n"
          "  --duration S           seconds per level and side instead of -n\n"
          "  --warmup N             unmeasured execs per level and side (default max(100, level))\n"
          "fanout:\n"
          "  --batch N              sandboxes per create request (100)\n"
          "  --exec-concurrency N   execs in flight (default 1000, at most N)\n"
          "spillover (sandboxes from --pool or --image; -n caps the attempt, default 100000):\n"
          "  --capacity N           the federation's capacity in sandboxes (required)\n"
          "  --batch N              sandboxes per create while filling (10)\n"
          "  --beyond N             creates past full, each must be 503 no_capacity + Retry-After (10)\n"
          "regions (-n cycles per client, 50; -c concurrent, 1):\n"
          "  --compare-url URL      the US-only router (--url is the region-aware one)\n"
          "  --us-cluster NAME      where US clients land, and the US-only router's cluster (us-east)\n"
          "  --apac-cluster NAME    where APAC clients land with region-aware routing (ap-tokyo)\n"
          "  --min-tax X            US-only APAC/US exec p50 must be >= X (2.0)\n"
          "  --max-aware X          region-aware APAC/US exec p50 must be <= X (1.5)\n"
          "failover (-c concurrent cycles, 8):\n"
          "  --sim-admin NAME=URL   kubesim admin URL per cluster (repeat); the victim is the\n"
          "                         cluster most steady creates land in\n"
          "  --sim-token TOKEN      kubesim's token\n"
          "  --fault-at S           seconds of steady load before the fault (3)\n"
          "  --down S               seconds the cluster stays down (6)\n"
          "  --held N               sandboxes pinned to the victim to exec into while down (5)\n"
          "scale (-n sandboxes, 100000; --batch per create, 1000; -c creates in flight, 4):\n"
          "  --router-pid PID       the fedrouter process: RSS, CPU from /proc (required)\n"
          "  --curve 1,5,20         create-rate curve: cluster counts (first k clusters, pinned)\n"
          "  --curve-per-cluster N  sandboxes per cluster at each curve point (1000)\n"
          "  --exec-sample N        sandboxes to exec into (100)\n"
          "  --fresh-samples N      capacity-view freshness samples (10)\n"
          "  --settle-s S           after terminating all, the router has S s to give its memory back (60):\n"
          "                         its RSS must come within the slack of its idle RSS, else the run fails\n"
          "                         (0: not checked)\n"
          "  --settle-slack-mib M   that slack (0: max(32 MiB, 15%% of what the create added))\n"
          "soak (-c workers, 8; --batch per create, 5):\n"
          "  --router-pid PID       the fedrouter process: RSS, fds from /proc (required)\n"
          "  --duration S           seconds of load (600)\n"
          "  --sample-s S           seconds between samples (5)\n"
          "  --warmup S             the first sample at or after S is the baseline (min(60, duration/4))\n"
          "                         RSS last <= first * 1.5 + 20 MiB; fds 2 s after the load (idle)\n"
          "                         <= the most seen from the warm-up to half-way + --fd-slack (20)\n"
          "\n"
          "Exit: 0 every request succeeded and every figure was measured; 1 otherwise; 2 usage.\n");
}

static int parse_long(const char *s, long min, long max, long *out) {
  int64_t v;

  if (fr_parse_int64(s, min, max, &v) != 0)
    return -EINVAL;
  *out = (long)v;
  return 0;
}

static int parse_levels(const char *s, struct lg_opts *o) {
  char buf[256], *p, *comma;
  long v;

  if (strlen(s) >= sizeof(buf))
    return -EINVAL;
  memcpy(buf, s, strlen(s) + 1);
  o->nlevels = 0;
  for (p = buf; p != NULL; p = comma) {
    if ((comma = strchr(p, ',')) != NULL)
      *comma++ = '\0';
    if (o->nlevels == MAX_LEVELS || parse_long(p, 1, 100000, &v) != 0)
      return -EINVAL;
    o->levels[o->nlevels++] = (int)v;
  }
  return 0;
}

enum { OPT_URL = 256, OPT_TOKEN, OPT_POOL, OPT_IMAGE, OPT_JSON, OPT_DKC, OPT_DCTX, OPT_NS, OPT_LEVELS,
       OPT_DURATION, OPT_WARMUP, OPT_BATCH, OPT_EXECC, OPT_TIMEOUT, OPT_CAPACITY, OPT_BEYOND, OPT_CMPURL,
       OPT_USC, OPT_APACC, OPT_MINTAX, OPT_MAXAWARE, OPT_SIMADMIN, OPT_SIMTOKEN, OPT_FAULTAT, OPT_DOWN,
       OPT_HELD, OPT_RPID, OPT_CURVE, OPT_CURVEPC, OPT_EXECSAMPLE, OPT_FRESH, OPT_SAMPLE, OPT_FDSLACK,
       OPT_SETTLE, OPT_SETTLESLACK };

static int parse_real(const char *s, double min, double max, double *out) {
  char *end;

  errno = 0;
  *out = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !(*out >= min && *out <= max))
    return -EINVAL;
  return 0;
}

static int parse_args(int argc, char **argv, struct lg_opts *o) {
  static const struct option lopts[] = {
      {"url", required_argument, NULL, OPT_URL},
      {"token", required_argument, NULL, OPT_TOKEN},
      {"pool", required_argument, NULL, OPT_POOL},
      {"image", required_argument, NULL, OPT_IMAGE},
      {"json-out", required_argument, NULL, OPT_JSON},
      {"direct-kubeconfig", required_argument, NULL, OPT_DKC},
      {"direct-context", required_argument, NULL, OPT_DCTX},
      {"namespace", required_argument, NULL, OPT_NS},
      {"levels", required_argument, NULL, OPT_LEVELS},
      {"duration", required_argument, NULL, OPT_DURATION},
      {"warmup", required_argument, NULL, OPT_WARMUP},
      {"batch", required_argument, NULL, OPT_BATCH},
      {"exec-concurrency", required_argument, NULL, OPT_EXECC},
      {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
      {"capacity", required_argument, NULL, OPT_CAPACITY},
      {"beyond", required_argument, NULL, OPT_BEYOND},
      {"compare-url", required_argument, NULL, OPT_CMPURL},
      {"us-cluster", required_argument, NULL, OPT_USC},
      {"apac-cluster", required_argument, NULL, OPT_APACC},
      {"min-tax", required_argument, NULL, OPT_MINTAX},
      {"max-aware", required_argument, NULL, OPT_MAXAWARE},
      {"sim-admin", required_argument, NULL, OPT_SIMADMIN},
      {"sim-token", required_argument, NULL, OPT_SIMTOKEN},
      {"fault-at", required_argument, NULL, OPT_FAULTAT},
      {"down", required_argument, NULL, OPT_DOWN},
      {"held", required_argument, NULL, OPT_HELD},
      {"router-pid", required_argument, NULL, OPT_RPID},
      {"curve", required_argument, NULL, OPT_CURVE},
      {"curve-per-cluster", required_argument, NULL, OPT_CURVEPC},
      {"exec-sample", required_argument, NULL, OPT_EXECSAMPLE},
      {"fresh-samples", required_argument, NULL, OPT_FRESH},
      {"settle-s", required_argument, NULL, OPT_SETTLE},
      {"settle-slack-mib", required_argument, NULL, OPT_SETTLESLACK},
      {"sample-s", required_argument, NULL, OPT_SAMPLE},
      {"fd-slack", required_argument, NULL, OPT_FDSLACK},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  long v;
  int ch, c_set = 0, batch_set = 0;
  char *end;

  memset(o, 0, sizeof(*o));
  o->image = "python:3.12";
  o->direct_namespace = "default";
  o->token = getenv("FEDROUTER_TOKEN");
  o->warmup = -1;
  o->batch = 100;
  o->exec_concurrency = 1000;
  o->timeout_ms = 120000;
  o->levels[0] = 1;
  o->levels[1] = 1000;
  o->beyond = 10;
  o->us_cluster = "us-east";
  o->apac_cluster = "ap-tokyo";
  o->min_tax = 2.0;
  o->max_aware = 1.5;
  o->fault_at_s = 3;
  o->down_s = 6;
  o->held = 5;
  o->sim_token = getenv("KUBESIM_TOKEN");
  o->nlevels = 2;
  o->curve_per_cluster = 1000;
  o->exec_sample = 100;
  o->fresh_samples = 10;
  o->settle_s = 60;
  o->sample_s = 5;
  o->fd_slack = 20;
  while ((ch = getopt_long(argc, argv, "n:c:h", lopts, NULL)) != -1) {
    switch (ch) {
    case 'n':
      if (parse_long(optarg, 1, 100000000, &o->n) != 0)
        goto bad;
      o->n_set = 1;
      break;
    case 'c':
      if (parse_long(optarg, 1, 100000, &v) != 0)
        goto bad;
      o->concurrency = (int)v;
      c_set = 1;
      break;
    case OPT_URL: o->url = optarg; break;
    case OPT_TOKEN: o->token = optarg; break;
    case OPT_POOL: o->pool = optarg; break;
    case OPT_IMAGE: o->image = optarg; break;
    case OPT_JSON: o->json_out = optarg; break;
    case OPT_DKC: o->direct_kubeconfig = optarg; break;
    case OPT_DCTX: o->direct_context = optarg; break;
    case OPT_NS: o->direct_namespace = optarg; break;
    case OPT_LEVELS:
      if (parse_levels(optarg, o) != 0)
        goto bad;
      break;
    case OPT_DURATION:
      errno = 0;
      o->duration_s = strtod(optarg, &end);
      if (errno != 0 || *end != '\0' || !(o->duration_s > 0 && o->duration_s <= 86400))
        goto bad;
      break;
    case OPT_WARMUP:
      if (parse_long(optarg, 0, 100000000, &o->warmup) != 0)
        goto bad;
      break;
    case OPT_BATCH:
      if (parse_long(optarg, 1, 100000, &v) != 0)
        goto bad;
      o->batch = (int)v;
      batch_set = 1;
      break;
    case OPT_EXECC:
      if (parse_long(optarg, 1, 100000, &v) != 0)
        goto bad;
      o->exec_concurrency = (int)v;
      break;
    case OPT_TIMEOUT:
      if (parse_long(optarg, 100, 3600000, &o->timeout_ms) != 0)
        goto bad;
      break;
    case OPT_CAPACITY:
      if (parse_long(optarg, 1, 100000000, &o->capacity) != 0)
        goto bad;
      break;
    case OPT_BEYOND:
      if (parse_long(optarg, 0, 100000, &o->beyond) != 0)
        goto bad;
      break;
    case OPT_CMPURL: o->compare_url = optarg; break;
    case OPT_USC: o->us_cluster = optarg; break;
    case OPT_APACC: o->apac_cluster = optarg; break;
    case OPT_MINTAX:
      if (parse_real(optarg, 0, 1000, &o->min_tax) != 0)
        goto bad;
      break;
    case OPT_MAXAWARE:
      if (parse_real(optarg, 0, 1000, &o->max_aware) != 0)
        goto bad;
      break;
    case OPT_SIMADMIN: {
      char *eq = strchr(optarg, '=');
      if (eq == NULL || eq == optarg || o->nsims == MAX_SIMS)
        goto bad;
      *eq = '\0';   /* argv is ours to modify */
      o->sim_name[o->nsims] = optarg;
      o->sim_url[o->nsims++] = eq + 1;
      break;
    }
    case OPT_SIMTOKEN: o->sim_token = optarg; break;
    case OPT_FAULTAT:
      if (parse_real(optarg, 0.1, 3600, &o->fault_at_s) != 0)
        goto bad;
      break;
    case OPT_DOWN:
      if (parse_real(optarg, 0.1, 3600, &o->down_s) != 0)
        goto bad;
      break;
    case OPT_HELD:
      if (parse_long(optarg, 1, 1000, &o->held) != 0)
        goto bad;
      break;
    case OPT_RPID:
      if (parse_long(optarg, 1, 1L << 30, &o->router_pid) != 0)
        goto bad;
      break;
    case OPT_CURVE: {
      struct lg_opts tmp;
      if (parse_levels(optarg, &tmp) != 0)
        goto bad;
      memcpy(o->curve, tmp.levels, sizeof(o->curve));
      o->ncurve = tmp.nlevels;
      break;
    }
    case OPT_CURVEPC:
      if (parse_long(optarg, 1, 10000000, &o->curve_per_cluster) != 0)
        goto bad;
      break;
    case OPT_EXECSAMPLE:
      if (parse_long(optarg, 0, 100000, &o->exec_sample) != 0)
        goto bad;
      break;
    case OPT_FRESH:
      if (parse_long(optarg, 0, 10000, &o->fresh_samples) != 0)
        goto bad;
      break;
    case OPT_SETTLE:
      if (parse_long(optarg, 0, 3600, &o->settle_s) != 0)
        goto bad;
      break;
    case OPT_SETTLESLACK:
      if (parse_long(optarg, 0, 1 << 20, &o->settle_slack_mib) != 0)
        goto bad;
      break;
    case OPT_FDSLACK:
      if (parse_long(optarg, 0, 1000000, &o->fd_slack) != 0)
        goto bad;
      break;
    case OPT_SAMPLE:
      if (parse_real(optarg, 0.1, 3600, &o->sample_s) != 0)
        goto bad;
      break;
    case 'h':
      usage(stdout);
      exit(0);
    default:
      usage(stderr);
      return -EINVAL;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, "loadgen: name one scenario: seed, overhead, fanout, spillover, regions, failover, scale or "
                    "soak\n");
    usage(stderr);
    return -EINVAL;
  }
  o->scenario_name = argv[optind];
  if (strcmp(o->scenario_name, "seed") == 0) {
    o->scenario = SC_SEED;
    if (!o->n_set)
      o->n = 200;
    if (!c_set)
      o->concurrency = 10;
  } else if (strcmp(o->scenario_name, "overhead") == 0) {
    o->scenario = SC_OVERHEAD;
    if (!o->n_set)
      o->n = 2000;
  } else if (strcmp(o->scenario_name, "fanout") == 0) {
    o->scenario = SC_FANOUT;
    if (!o->n_set)
      o->n = 1000;
    if (!c_set)
      o->concurrency = 4;
  } else if (strcmp(o->scenario_name, "spillover") == 0) {
    o->scenario = SC_SPILLOVER;
    if (!o->n_set)
      o->n = 100000;
    if (!batch_set)
      o->batch = 10;
    if (o->capacity <= 0) {
      fprintf(stderr, "loadgen: spillover needs --capacity N\n");
      return -EINVAL;
    }
  } else if (strcmp(o->scenario_name, "regions") == 0) {
    o->scenario = SC_REGIONS;
    if (!o->n_set)
      o->n = 50;
    if (!c_set)
      o->concurrency = 1;
  } else if (strcmp(o->scenario_name, "failover") == 0) {
    o->scenario = SC_FAILOVER;
    if (!c_set)
      o->concurrency = 8;
    if (o->nsims == 0) {
      fprintf(stderr, "loadgen: failover needs --sim-admin NAME=URL for the clusters\n");
      return -EINVAL;
    }
  } else if (strcmp(o->scenario_name, "scale") == 0 || strcmp(o->scenario_name, "soak") == 0) {
    int soak = o->scenario_name[1] == 'o';
    o->scenario = soak ? SC_SOAK : SC_SCALE;
    if (!o->n_set)
      o->n = 100000;
    if (!c_set)
      o->concurrency = soak ? 8 : 4;
    if (!batch_set)
      o->batch = soak ? 5 : 1000;
    if (o->duration_s <= 0)
      o->duration_s = 600;
    if (soak && o->batch > 64) {
      fprintf(stderr, "loadgen: soak: --batch is at most 64\n");
      return -EINVAL;
    }
    o->warmup_s = o->warmup >= 0 ? (double)o->warmup : (o->duration_s / 4 < 60 ? o->duration_s / 4 : 60);
    if (o->router_pid <= 0) {
      fprintf(stderr, "loadgen: %s needs --router-pid PID\n", o->scenario_name);
      return -EINVAL;
    }
  } else {
    fprintf(stderr, "loadgen: unknown scenario '%s' (seed, overhead, fanout, spillover, regions, failover, scale or "
                    "soak)\n",
            o->scenario_name);
    return -EINVAL;
  }
  if (o->url == NULL) {
    fprintf(stderr, "loadgen: --url is required\n");
    return -EINVAL;
  }
  return 0;
bad:
  fprintf(stderr, "loadgen: bad value for %s: '%s'\n", argv[optind - 1], optarg);
  return -EINVAL;
}

int main(int argc, char **argv) {
  struct lg g;
  uv_loop_t loop;
  json_t *figures;
  char started[21];
  int rc, ok;

  memset(&g, 0, sizeof(g));
  setvbuf(stdout, NULL, _IOLBF, 0); /* progress shows when piped (bench.sh | tee) */
  if (parse_args(argc, argv, &g.o) != 0)
    return 2;
  fr_log_set_level(FR_LOG_WARN);
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    fprintf(stderr, "loadgen: curl_global_init failed\n");
    return 1;
  }
  if (uv_loop_init(&loop) != 0) {
    curl_global_cleanup();
    return 1;
  }
  g.loop = &loop;
  uv_timer_init(&loop, &g.pause);
  memcpy(g.run_id, "lg-", 3);
  fr_random_name_suffix(g.run_id + 3, 8);
  g.error_kinds = json_object();
  figures = json_object();
  fr_time_rfc3339(fr_wall_ms() / 1000, started);

  rc = lg_http_new(&loop, g.o.url, g.o.token, g.o.timeout_ms, &g.http);
  if (rc != 0) {
    fprintf(stderr, "loadgen: bad --url '%s'\n", g.o.url);
  } else {
    switch (g.o.scenario) {
    case SC_SEED: rc = run_seed(&g, figures); break;
    case SC_OVERHEAD: rc = run_overhead(&g, figures); break;
    case SC_FANOUT: rc = run_fanout(&g, figures); break;
    case SC_SPILLOVER: rc = run_spillover(&g, figures); break;
    case SC_REGIONS: rc = run_regions(&g, figures); break;
    case SC_FAILOVER: rc = run_failover(&g, figures); break;
    case SC_SCALE: rc = run_scale(&g, figures); break;
    case SC_SOAK: rc = run_soak(&g, figures); break;
    }
  }

  g.report = json_pack("{s:s,s:s,s:o,s:o,s:o,s:{s:I,s:O}}", "scenario", g.o.scenario_name, "started_at",
                       started, "parameters", params_json(&g), "machine", machine_json(), "figures",
                       figures, "errors", "count", (json_int_t)g.errors, "by_kind", g.error_kinds);
  ok = rc == 0 && g.errors == 0 && figures_complete(figures);
  if (g.report != NULL)
    json_object_set_new(g.report, "ok", json_boolean(ok));
  if (g.errors > 0) {
    const char *k;
    json_t *v;
    printf("  errors by kind:\n");
    json_object_foreach(g.error_kinds, k, v)
      printf("    %6" JSON_INTEGER_FORMAT "  %s\n", json_integer_value(v), k);
  }
  if (rc == 0 && g.errors == 0 && !figures_complete(figures))
    fprintf(stderr, "loadgen: some figures were not measured (null in the JSON)\n");
  if (g.o.json_out != NULL && g.report != NULL &&
      json_dump_file(g.report, g.o.json_out, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) != 0) {
    fprintf(stderr, "loadgen: cannot write %s\n", g.o.json_out);
    ok = 0;
  }
  printf("loadgen %s: %s\n", g.o.scenario_name, ok ? "ok" : "FAILED");

  /* Tear down: every handle closed, the loop closes cleanly. */
  lg_http_free(g.http);
  uv_close((uv_handle_t *)&g.pause, NULL);
  if (g.kube != NULL) {
    fr_kube_client_free(g.kube, on_kube_closed, &g);
    while (!g.kube_closed && uv_run(&loop, UV_RUN_ONCE) != 0)
      ;
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&loop) != 0)
    fprintf(stderr, "loadgen: warning: handles left open at exit\n");
  json_decref(g.report);
  json_decref(g.error_kinds);
  curl_global_cleanup();
  return ok ? 0 : 1;
}
