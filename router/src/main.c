/* main.c - fedrouter: flags, `config check`, start-up and shutdown. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "fr/adapter.h"
#include "fr/config.h"
#include "fr/buf.h"
#include "fr/http.h"
#include "fr/kubeconfig.h"
#include "fr/log.h"
#include "fr/policy.h"
#include "fr/version.h"
#include "execwait.h"
#include "queue.h"
#include "reload.h"
#include "history.h"
#include "metrics.h"
#include "promq.h"
#include "router.h"
#include "server.h"
#include "tenants.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: fedrouter --config FILE [--log-level LEVEL]\n"
          "       fedrouter config check FILE\n"
          "       fedrouter policy check FILE [--config ROUTER_CONF]\n"
          "       fedrouter --version\n"
          "\n"
          "  --config FILE      router configuration (libconfig; see config/examples/)\n"
          "  --log-level LEVEL  debug, info, warn or error (default info)\n"
          "  config check FILE  validate FILE and every cluster's kubeconfig offline;\n"
          "                     exit 0 if valid, 1 with file:line errors if not\n");
}

static void print_config_error(const struct fr_config_error *e) {
  if (e->line > 0)
    fprintf(stderr, "%s:%d: %s\n", e->file, e->line, e->msg);
  else
    fprintf(stderr, "%s: %s\n", e->file, e->msg);
}

/* The errors of a check, printed in file and line order once all are in. */
struct check_errors {
  struct fr_config_error *v;   /* the same fields as fr_policy_error */
  size_t n, cap;
  int oom;
};

/* An fr_cfg_error_cb. */
static void check_error_add(void *arg, const char *file, int line, const char *msg) {
  struct check_errors *ce = arg;

  if (ce->n == ce->cap) {
    size_t cap = ce->cap ? ce->cap * 2 : 16;
    struct fr_config_error *v = realloc(ce->v, cap * sizeof(*v));
    if (v == NULL) {
      ce->oom = 1;
      return;
    }
    ce->v = v;
    ce->cap = cap;
  }
  snprintf(ce->v[ce->n].file, sizeof(ce->v[0].file), "%s", file);
  ce->v[ce->n].line = line;
  snprintf(ce->v[ce->n].msg, sizeof(ce->v[0].msg), "%s", msg);
  ce->n++;
}



/* Prints and frees the errors in file and line order (equal places in
 * the order found: an insertion sort, stable, and a check has few);
 * <file> names errors that carry none. */
static void check_errors_print(struct check_errors *ce, const char *file) {
  size_t i, j;

  for (i = 1; i < ce->n; i++) {
    struct fr_config_error t = ce->v[i];
    for (j = i; j > 0; j--) {
      int c = strcmp(ce->v[j - 1].file, t.file);
      if (c < 0 || (c == 0 && ce->v[j - 1].line <= t.line))
        break;
      ce->v[j] = ce->v[j - 1];
    }
    ce->v[j] = t;
  }
  for (i = 0; i < ce->n; i++) {
    if (ce->v[i].line > 0)
      fprintf(stderr, "%s:%d: %s\n", ce->v[i].file[0] ? ce->v[i].file : file, ce->v[i].line, ce->v[i].msg);
    else
      fprintf(stderr, "%s: %s\n", ce->v[i].file[0] ? ce->v[i].file : file, ce->v[i].msg);
  }
  if (ce->oom)
    fprintf(stderr, "%s: out of memory: not every error is listed\n", file);
  free(ce->v);
  memset(ce, 0, sizeof(*ce));
}

/* `fedrouter config check FILE`: every error of the config, then every
 * kubeconfig it names, without contacting any cluster. */
static int config_check(const char *path) {
  struct fr_config *cfg;
  struct check_errors ce = {NULL, 0, 0, 0};
  size_t i;
  int bad = 0;

  if (fr_config_check(path, check_error_add, &ce, &cfg) != 0) {
    check_errors_print(&ce, path);
    return 1;
  }
  for (i = 0; i < cfg->nclusters; i++) {
    struct fr_kube_creds *creds;
    char kerr[768];
    int rc;
    if (cfg->clusters[i].in_cluster) {
      /* The pod's service account: checkable only inside the pod. */
      rc = fr_kubeconfig_in_cluster(NULL, &creds, kerr, sizeof(kerr));
      if (rc == -ENOENT) {
        printf("%s: cluster \"%s\": in_cluster: not checked here (%s)\n", cfg->source, cfg->clusters[i].name,
               kerr);
        continue;
      }
    } else {
      rc = fr_kubeconfig_load(cfg->clusters[i].kubeconfig, cfg->clusters[i].context, &creds, kerr, sizeof(kerr));
    }
    if (rc != 0) {
      fprintf(stderr, "%s: cluster \"%s\": %s\n", cfg->source, cfg->clusters[i].name, kerr);
      bad = 1;
      continue;
    }
    fr_kube_creds_free(creds);
  }
  if (!bad)
    printf("%s: OK (%zu cluster%s, %zu tenant%s, region %s)\n", cfg->source, cfg->nclusters,
           cfg->nclusters == 1 ? "" : "s", cfg->ntenants, cfg->ntenants == 1 ? "" : "s",
           cfg->region);
  fr_config_unref(cfg);
  return bad;
}

/* `fedrouter policy check FILE [--config ROUTER_CONF]`: every error of the
 * file, each as file:line: message; with the router config, cluster and
 * region names are checked against it too. */
static int policy_check(int argc, char **argv) {
  const char *file = NULL, *conf = NULL;
  struct fr_config *cfg = NULL;
  struct fr_config_error cerr;
  struct fr_policy *p = NULL;
  struct check_errors ce = {NULL, 0, 0, 0};
  struct fr_policy_warning *w = NULL;
  size_t nw = 0, i;
  const char **names = NULL, **regions = NULL;
  int rc = 1;

  for (i = 3; i < (size_t)argc; i++) {
    if (strcmp(argv[i], "--config") == 0 && i + 1 < (size_t)argc)
      conf = argv[++i];
    else if (file == NULL && argv[i][0] != '-')
      file = argv[i];
    else
      file = NULL, i = (size_t)argc;
  }
  if (file == NULL) {
    fprintf(stderr, "usage: fedrouter policy check FILE [--config ROUTER_CONF]\n");
    return 2;
  }
  if (conf != NULL) {
    if (fr_config_load(conf, &cfg, &cerr) != 0) {
      print_config_error(&cerr);
      return 1;
    }
    names = calloc(cfg->nclusters + 1, sizeof(*names));
    regions = calloc(cfg->nclusters + 1, sizeof(*regions));
    if (names == NULL || regions == NULL)
      goto out;
    for (i = 0; i < cfg->nclusters; i++) {
      names[i] = cfg->clusters[i].name;
      regions[i] = cfg->clusters[i].region;
    }
  }
  /* Without the router config there are no names to check against. */
  if (fr_policy_check(file, names, regions, check_error_add, &ce, &w, &nw) != 0) {
    check_errors_print(&ce, file);
    goto out;
  }
  for (i = 0; i < nw; i++)
    fprintf(stderr, "%s:%d: warning: %s\n", file, w[i].line, w[i].msg);
  /* The version of what was checked, as the router would load it. */
  if (fr_policy_load(file, names, regions, &p, NULL, NULL, NULL) != 0)
    goto out;
  printf("%s: OK (version %.12s%s%s)\n", file, fr_policy_version(p), conf ? ", checked against " : "",
         conf ? conf : "");
  rc = 0;
out:
  free(w);
  free(names);
  free(regions);
  fr_policy_unref(p);
  fr_config_unref(cfg);
  return rc;
}

/* What each cluster's API-call observer needs: the router's metrics and
 * the cluster's name. */
struct api_obs {
  struct router *r;
  struct fr_adapter *a;
};

static void on_api_call(void *arg, const char *method, int status, double elapsed_ms) {
  struct api_obs *o = arg;
  struct fr_buf l;

  (void)method;
  (void)status;
  fr_buf_init(&l);
  metrics_label(&l, "cluster", fr_adapter_name(o->a));
  metrics_observe(o->r->metrics, "fedrouter_cluster_api_latency_seconds", l.data ? l.data : "",
                  elapsed_ms / 1000.0);
  fr_buf_free(&l);
}

struct shutdown {
  uv_signal_t sigint, sigterm, sighup;
  uv_timer_t delay;               /* SIGTERM: shutdown_delay_ms of failing /readyz */
  uv_timer_t drain;
  uv_timer_t trim;
  uint64_t deadline;
  struct router *r;
};

/* How long the drain waits for requests in flight (creates wait for pods
 * to become ready, execs for commands) before closing anyway. */
#define DRAIN_MS 30000

static void on_adapter_freed(void *arg) {
  (void)arg;
}

static void finish_shutdown(struct shutdown *sd) {
  struct router *r = sd->r;
  size_t i;

  fr_http_server_free(r->http, NULL, NULL);
  r->http = NULL;
  fr_http_server_free(r->health, NULL, NULL);
  r->health = NULL;
  history_stop(r->history);
  promq_close(r->prom);
  r->prom = NULL;
  placement_close(r);
  reload_close(r);
  queue_close(r);
  execwait_close(r);
  queue_free(r);
  execwait_free(r);
  for (i = 0; i < r->nadapters; i++)
    fr_adapter_free(r->adapters[i], on_adapter_freed, NULL);
  r->nadapters = 0;
  uv_close((uv_handle_t *)&sd->sigint, NULL);
  uv_close((uv_handle_t *)&sd->sigterm, NULL);
  uv_close((uv_handle_t *)&sd->sighup, NULL);
  uv_close((uv_handle_t *)&sd->delay, NULL);
  uv_close((uv_handle_t *)&sd->drain, NULL);
  uv_close((uv_handle_t *)&sd->trim, NULL);
}

/* After a burst (a mass terminate, a relist, a big listing) glibc keeps the
 * freed memory in the heap, which it can only shrink from the top. Every
 * TRIM_EVERY_MS, when more than TRIM_FREE_BYTES lie free, malloc_trim()
 * hands the free pages back, wherever they are in the heap (measured:
 * 1.3-1.7 GB down to ~0.2 GB after terminating 50k sandboxes). 16 MiB: at
 * 100,000 sandboxes the heap's free space after a terminate is tens of
 * MiB, which the earlier 64 MiB bound left in the process for good. A trim
 * that finds little to give back costs a walk of the free lists (about a
 * millisecond at a million sandboxes). */
#define TRIM_EVERY_MS 10000
#define TRIM_FREE_BYTES ((size_t)16 << 20)

static void on_trim(uv_timer_t *t) {
#ifdef __GLIBC__
  struct mallinfo2 mi = mallinfo2();
  uint64_t t0;

  if (mi.fordblks < TRIM_FREE_BYTES)
    return;
  t0 = uv_hrtime();
  if (malloc_trim(0))
    FR_DEBUG("fedrouter", "returned free heap memory to the system (%zu MiB free in the heap, %zu MiB in use; "
             "%.1f ms)", mi.fordblks >> 20, mi.uordblks >> 20, (double)(uv_hrtime() - t0) / 1e6);
#endif
  (void)t;
}

static void on_drain(uv_timer_t *t) {
  struct shutdown *sd = t->data;
  size_t busy = fr_http_server_nbusy(sd->r->http);

  /* Requests answered later, and answers still being written (a large
   * listing to a slow client): closing under them would cut them. */
  if ((sd->r->inflight > 0 || busy > 0) && uv_now(t->loop) < sd->deadline)
    return;
  if (sd->r->inflight > 0 || busy > 0)
    FR_WARN("fedrouter", "drain timed out with %zu request(s) in flight, %zu connection(s) busy", sd->r->inflight,
            busy);
  uv_timer_stop(t);
  finish_shutdown(sd);
}

/* SIGHUP reloads the router config (reload.c: what only a restart
 * changes must stay as it is) and the policy file. */
static void on_sighup(uv_signal_t *h, int signum) {
  struct shutdown *sd = h->data;

  FR_INFO("fedrouter", "signal %d: reloading the config and the policy", signum);
  reload_now(sd->r);
  placement_reload(sd->r);
}

/* The drain: stop accepting, close idle keep-alive connections, answer
 * what is already on its way with Connection: close, and exit once no
 * request is in flight and every answer is written (or DRAIN_MS has
 * passed). */
static void start_drain(struct shutdown *sd) {
  struct router *r = sd->r;

  FR_INFO("fedrouter", "draining %zu request(s) in flight, then exiting", r->inflight);
  r->stopping = 1;
  /* Creates and execs waiting for room would outwait the drain: they are
   * answered 503 now and retry on another replica. */
  queue_close(r);
  execwait_close(r);
  fr_http_server_drain(r->http);
  sd->deadline = uv_now(r->loop) + DRAIN_MS;
  uv_timer_start(&sd->drain, on_drain, 0, 50);
}

static void on_delay(uv_timer_t *t) {
  start_drain(t->data);
}

/* Shutdown, in three steps (docs/operations.md, Signals):
 *   1. SIGTERM: /readyz answers 503 shutting_down for shutdown_delay_ms
 *      while everything else is served as before, so a load balancer that
 *      health-checks /readyz takes the replica out of rotation while it is
 *      still listening (closing first would fail the requests the balancer
 *      sends until its next check);
 *   2. the drain (start_drain);
 *   3. exit.
 * SIGINT (an operator at a terminal) skips step 1; a second signal skips
 * what is left. */
static void on_signal(uv_signal_t *h, int signum) {
  struct shutdown *sd = h->data;
  struct router *r = sd->r;

  if (r->shutting_down) {
    FR_WARN("fedrouter", "signal %d again: stopping now", signum);
    uv_timer_stop(&sd->delay);
    uv_timer_stop(&sd->drain);
    finish_shutdown(sd);
    return;
  }
  r->shutting_down = 1;
  if (signum == SIGINT || r->cfg->shutdown_delay_ms == 0) {
    FR_INFO("fedrouter", "signal %d: stopping", signum);
    start_drain(sd);
    return;
  }
  FR_INFO("fedrouter", "signal %d: /readyz fails for %" PRId64 " ms (shutdown_delay_ms), then the drain",
          signum, r->cfg->shutdown_delay_ms);
  uv_timer_start(&sd->delay, on_delay, (uint64_t)r->cfg->shutdown_delay_ms, 0);
}

static SSL_CTX *tls_context(const struct fr_config *cfg) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

  if (ctx == NULL || SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_cert) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, cfg->tls_key, SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    ERR_print_errors_fp(stderr);
    SSL_CTX_free(ctx);
    return NULL;
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  return ctx;
}

/* The listen host may be a name ("localhost"); resolve it once, at
 * start-up, before the loop runs. */
static int resolve_host(uv_loop_t *loop, const char *host, char *out, size_t cap) {
  uv_getaddrinfo_t gai;
  struct addrinfo hints;
  int rc;

  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  rc = uv_getaddrinfo(loop, &gai, NULL, host, NULL, &hints);
  if (rc != 0)
    return rc;
  if (gai.addrinfo->ai_family == AF_INET6)
    uv_ip6_name((struct sockaddr_in6 *)gai.addrinfo->ai_addr, out, cap);
  else
    uv_ip4_name((struct sockaddr_in *)gai.addrinfo->ai_addr, out, cap);
  uv_freeaddrinfo(gai.addrinfo);
  return 0;
}

/* Creates an HTTP server for <r> and listens on <cfg_host>:<port> (a host
 * name is resolved once, into <resolved>, 64 bytes); 0, or says on stderr
 * why not, naming the config key <what>. */
static int serve(struct router *r, const struct fr_http_server_opts *opts, fr_http_handler_cb handler,
                 const char *what, const char *cfg_host, int port, char resolved[64],
                 struct fr_http_server **out) {
  int rc = fr_http_server_new(r->loop, opts, handler, r, out) != 0 ? UV_ENOMEM : 0;

  if (rc == 0)
    rc = resolve_host(r->loop, cfg_host, resolved, 64);
  if (rc == 0)
    rc = fr_http_server_listen(*out, resolved, port);
  if (rc != 0)
    fprintf(stderr, "fedrouter: cannot listen on %s:%d (%s): %s\n", cfg_host, port, what, uv_strerror(rc));
  return rc;
}

/* Descriptors kept out of the client connection limit: every cluster's
 * API connections, watches and exec streams, the policy file, logs. */
#define FD_RESERVE 1024

/* Raises the soft descriptor limit to the hard one (a server wants every
 * descriptor it is allowed) and returns what client connections may use:
 * the limit less FD_RESERVE, at least 64. So idle clients can never take
 * the descriptors the clusters need. */
static size_t auto_max_connections(void) {
  struct rlimit rl;

  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 1048576 ? 1048576 : rl.rlim_max;
    if (want > rl.rlim_cur) {
      rl.rlim_cur = want;
      (void)setrlimit(RLIMIT_NOFILE, &rl);
      (void)getrlimit(RLIMIT_NOFILE, &rl);
    }
  }
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 1048576)
    return 1048576 - FD_RESERVE;
  return rl.rlim_cur > FD_RESERVE + 64 ? (size_t)(rl.rlim_cur - FD_RESERVE) : 64;
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"config", required_argument, NULL, 'c'},
      {"log-level", required_argument, NULL, 'l'},
      {"version", no_argument, NULL, 'V'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  const char *config_path = NULL;
  struct fr_config_error cerr;
  struct fr_http_server_opts hopts;
  struct router r;
  struct shutdown sd;
  enum fr_log_level lvl;
  SSL_CTX *ssl = NULL;
  struct api_obs *obs = NULL;
  char host[64];
  size_t i;
  int opt, rc;

  if (argc >= 3 && strcmp(argv[1], "policy") == 0 && strcmp(argv[2], "check") == 0)
    return policy_check(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "config") == 0) {
    if (argc != 4 || strcmp(argv[2], "check") != 0) {
      fprintf(stderr, "usage: fedrouter config check FILE\n");
      return 2;
    }
    return config_check(argv[3]);
  }
  while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (opt) {
    case 'c': config_path = optarg; break;
    case 'l':
      if (fr_log_parse_level(optarg, &lvl) != 0) {
        fprintf(stderr, "fedrouter: --log-level must be debug, info, warn or error\n");
        return 2;
      }
      fr_log_set_level(lvl);
      break;
    case 'V': printf("fedrouter %s\n", FR_VERSION); return 0;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (config_path == NULL || optind < argc) {
    usage(stderr);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
#ifdef __GLIBC__
  /* Blocks of 256 KiB and more (list pages, the pod tables of a 50,000-
   * sandbox cluster, the ids of a mass terminate, answers being built) come
   * from mmap and go back to the system when freed. glibc otherwise raises
   * the threshold after the first such free (up to 32 MiB) and serves them
   * from the heap, where each one freed between long-lived records leaves
   * a hole the heap cannot give back: after terminating 100,000 sandboxes
   * the router stayed ~35 MiB above its live memory. Fixing the
   * threshold also fixes the top-of-heap trim at 4 MiB. */
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  mallopt(M_TRIM_THRESHOLD, 4 * 1024 * 1024);
#endif
  memset(&r, 0, sizeof(r));
  r.loop = uv_default_loop();
  if (fr_config_load(config_path, &r.cfg, &cerr) != 0) {
    print_config_error(&cerr);
    return 1;
  }
  r.boot = fr_config_ref(r.cfg);
  if (tenants_init(&r) != 0 || queue_init(&r) != 0 || execwait_init(&r) != 0 || reload_init(&r) != 0)
    return 1;
  r.agent.image = r.cfg->agent_image;
  r.agent.port = r.cfg->agent_port;
  r.agent.key = r.cfg->agent_key;
  r.agent.key_len = r.cfg->agent_key_len;
  r.agent.prev_key = r.cfg->agent_prev_key;
  r.agent.prev_key_len = r.cfg->agent_prev_key_len;
  if (placement_init(&r) != 0)
    return 1;
  r.metrics = metrics_new();
  if (r.metrics == NULL)
    return 1;

  r.adapters = calloc(r.cfg->nclusters, sizeof(*r.adapters));
  if (r.adapters == NULL)
    return 1;
  for (i = 0; i < r.cfg->nclusters; i++) {
    const struct fr_config_cluster *cc = &r.cfg->clusters[i];
    struct fr_adapter_gateway gw = {(const char *const *)cc->gateway_urls, cc->gateway_nurls, cc->gateway_ca_file,
                                    cc->gateway_key, cc->gateway_key_len, cc->gateway_key_file};
    struct fr_adapter_opts ao = {cc->name, cc->region, cc->kubeconfig, cc->context, cc->ns,
                                 r.cfg->agent_image != NULL ? &r.agent : NULL, r.cfg->gpu_resource,
                                 r.cfg->batch_commit_timeout_s, r.cfg->run_as_user, cc->in_cluster,
                                 cc->gateway_nurls > 0 ? &gw : NULL};
    char err[768];
    if (fr_adapter_new(r.loop, &ao, &r.adapters[i], err, sizeof(err)) != 0) {
      fprintf(stderr, "fedrouter: cluster \"%s\": %s\n", r.cfg->clusters[i].name, err);
      return 1;
    }
    r.nadapters++;
  }
  if (r.cfg->tls_cert != NULL && (ssl = tls_context(r.cfg)) == NULL) {
    fprintf(stderr, "fedrouter: cannot load TLS certificate %s / key %s\n", r.cfg->tls_cert,
            r.cfg->tls_key);
    return 1;
  }
  memset(&hopts, 0, sizeof(hopts));
  hopts.name = "fedrouter";
  hopts.ssl_ctx = ssl;
  hopts.max_body_bytes = r.cfg->max_body_bytes;
  hopts.max_conns = (size_t)r.cfg->max_connections;
  if (hopts.max_conns == 0)
    hopts.max_conns = auto_max_connections();
  hopts.max_conns_per_ip = (size_t)r.cfg->max_connections_per_ip;
  r.exec_budget.max = (size_t)r.cfg->exec_output_budget_bytes;
  hopts.stream_body_cb = router_streams_body;
  hopts.done_cb = router_request_done;
  hopts.done_arg = &r;
  if (serve(&r, &hopts, router_handle, "listen", r.cfg->listen_host, r.cfg->listen_port, host, &r.http) != 0)
    return 1;
  if (r.cfg->health_host != NULL) {
    struct fr_http_server_opts ho;
    char hhost[64];

    memset(&ho, 0, sizeof(ho));
    ho.name = "fedrouter-health";
    ho.max_conns = 256;            /* probes and scrapers, not clients */
    ho.max_conns_per_ip = 64;
    ho.done_cb = router_request_done;
    ho.done_arg = &r;
    if (serve(&r, &ho, router_handle_health, "health_listen", r.cfg->health_host, r.cfg->health_port, hhost,
              &r.health) != 0)
      return 1;
    FR_INFO("fedrouter", "health listener on http://%s:%d", hhost, fr_http_server_port(r.health));
  }
  obs = calloc(r.nadapters ? r.nadapters : 1, sizeof(*obs));
  if (obs == NULL)
    return 1;
  for (i = 0; i < r.nadapters; i++) {
    obs[i].r = &r;
    obs[i].a = r.adapters[i];
    fr_adapter_set_api_observer(r.adapters[i], on_api_call, &obs[i]);
    fr_adapter_start(r.adapters[i]);
  }
  /* After the adapters: their clients hold curl's global state. */
  if (r.cfg->prometheus_url != NULL && (r.prom = promq_new(r.loop, r.cfg->prometheus_url)) == NULL)
    return 1;
  if ((r.history = history_new(&r)) == NULL)
    return 1;
  history_start(r.history);
  FR_INFO("fedrouter", "listening on %s://%s:%d, region %s, %zu cluster(s)", ssl ? "https" : "http",
          host, fr_http_server_port(r.http), r.cfg->region, r.nadapters);
  printf("fedrouter listening on %s://%s:%d\n", ssl ? "https" : "http", host,
         fr_http_server_port(r.http));
  if (r.health != NULL) /* the second line: its port when health_listen asked for port 0 */
    printf("fedrouter health on http://%s:%d\n", r.cfg->health_host, fr_http_server_port(r.health));
  fflush(stdout);
  sd.r = &r;
  uv_signal_init(r.loop, &sd.sigint);
  uv_signal_init(r.loop, &sd.sigterm);
  uv_signal_init(r.loop, &sd.sighup);
  uv_timer_init(r.loop, &sd.delay);
  uv_timer_init(r.loop, &sd.drain);
  uv_timer_init(r.loop, &sd.trim);
  sd.sigint.data = sd.sigterm.data = sd.sighup.data = sd.delay.data = sd.drain.data = &sd;
  uv_timer_start(&sd.trim, on_trim, TRIM_EVERY_MS, TRIM_EVERY_MS);
  uv_unref((uv_handle_t *)&sd.trim);
  uv_signal_start(&sd.sighup, on_sighup, SIGHUP);
  uv_signal_start(&sd.sigint, on_signal, SIGINT);
  uv_signal_start(&sd.sigterm, on_signal, SIGTERM);
  uv_run(r.loop, UV_RUN_DEFAULT);
  rc = uv_loop_close(r.loop);
  if (rc != 0)
    FR_WARN("fedrouter", "loop closed with handles still open");
  free(r.adapters);
  tenants_free(&r);
  free(obs);
  placement_free(&r);
  history_free(r.history);
  metrics_free(r.metrics);
  fr_config_unref(r.cfg);
  fr_config_unref(r.boot);
  SSL_CTX_free(ssl);
  return 0;
}
