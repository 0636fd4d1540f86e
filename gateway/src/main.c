/* main.c - fedrouter-gateway: flags, TLS, the cluster's credentials, the
 * pod caches, signals and the drain (docs/gateway.md). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "fr/http.h"
#include "fr/kube.h"
#include "fr/kubeconfig.h"
#include "fr/log.h"
#include "fr/podcache.h"
#include "fr/urlsafe.h"
#include "fr/util.h"
#include "fr/version.h"
#include "gateway.h"

#define MAX_NAMESPACES 16

static void usage(FILE *f) {
  fprintf(f,
          "usage: fedrouter-gateway --cluster NAME --namespace NS [--namespace NS ...]\n"
          "                         --key-file FILE [--key-file FILE ...]\n"
          "                         (--tls-cert FILE --tls-key FILE [--client-ca FILE] | --insecure-plaintext)\n"
          "                         [options]\n"
          "       fedrouter-gateway --version\n"
          "\n"
          "  --cluster NAME            the routers' name for this cluster (part of every signature)\n"
          "  --namespace NS            a sandbox namespace to watch and serve (repeatable, at most 16)\n"
          "  --key-file FILE           a signature key (repeatable, at most 4: current and previous);\n"
          "                            an empty file is no key; re-read every --reload-s and on SIGHUP\n"
          "  --listen HOST:PORT        where routers connect (default 0.0.0.0:8443)\n"
          "  --port-file FILE          write the bound port there (for port 0)\n"
          "  --health-listen HOST:PORT plain HTTP for /healthz, /readyz and /metrics (probes, Prometheus)\n"
          "  --health-port-file FILE   write that port there\n"
          "  --tls-cert FILE           PEM certificate chain served to routers\n"
          "  --tls-key FILE            its private key (both re-read every --reload-s and on SIGHUP)\n"
          "  --client-ca FILE          also require a client certificate from this CA (mutual TLS)\n"
          "  --insecure-plaintext      serve plain HTTP (tests, or behind a TLS-terminating proxy)\n"
          "  --kubeconfig FILE         reach the API server with this kubeconfig instead of the\n"
          "                            pod's service account (in-cluster, the default)\n"
          "  --context NAME            the kubeconfig's context (default: its current-context)\n"
          "  --serviceaccount-dir DIR  in-cluster token, ca.crt and namespace (default $FR_SERVICEACCOUNT_DIR,\n"
          "                            else " FR_SERVICEACCOUNT_DIR_DEFAULT ")\n"
          "  --idle-timeout-s N        a forwarded request or tunnel with no byte either way this long is\n"
          "                            cut; also the routers' idle keep-alive (default 900)\n"
          "  --connect-timeout-ms N    dialling a pod (default 5000)\n"
          "  --max-per-sandbox N       open requests and tunnels per sandbox, 429 beyond (default 256)\n"
          "  --max-connections N       router connections (default: the descriptor limit less 1024)\n"
          "  --shutdown-delay-ms N     SIGTERM: /readyz fails this long before the drain (default 5000)\n"
          "  --drain-timeout-s N       the drain waits this long for requests in flight (default 60)\n"
          "  --reload-s N              re-read keys and certificate every N s (default 30)\n"
          "  --log-level LEVEL         debug, info, warn or error (default info)\n");
}

struct main_opts {
  const char *listen, *port_file, *health_listen, *health_port_file;
  const char *tls_cert, *tls_key, *client_ca;
  int plaintext;
  const char *kubeconfig, *context, *sa_dir;
  const char *key_files[FR_GW_MAX_KEYS + 1];
  size_t nkeys;
  const char *namespaces[MAX_NAMESPACES];
  int64_t reload_s;
};

struct runtime {
  struct gw g;
  struct main_opts mo;
  SSL_CTX *ssl;
  uv_signal_t sigint, sigterm, sighup;
  uv_timer_t delay, drain, reload;
  uv_work_t tls_work;
  SSL_CTX *tls_new;              /* built by the reload worker */
  char tls_err[300];
  int tls_reloading;
  uint64_t deadline;
  int stopped;
};

/* ------------------------------------------------------------ TLS */

/* A server context for <cert>/<key> (and client certificates from <ca>
 * when not NULL); NULL with <err> filled. Blocking file reads: start-up
 * or the thread pool. */
static SSL_CTX *tls_context(const char *cert, const char *key, const char *ca, char *err, size_t errlen) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  unsigned long e;

  if (ctx == NULL || SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1 ||
      (ca != NULL && SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1))
    goto fail;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  if (ca != NULL)
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
  return ctx;
fail:
  e = ERR_get_error();
  snprintf(err, errlen, "cannot load TLS certificate %s / key %s%s%s: %s", cert, key, ca ? " / client CA " : "",
           ca ? ca : "", e ? ERR_reason_error_string(e) : "unknown error");
  ERR_clear_error();
  SSL_CTX_free(ctx);
  return NULL;
}

static void tls_work(uv_work_t *w) {
  struct runtime *rt = fr_container_of(w, struct runtime, tls_work);

  rt->tls_new = tls_context(rt->mo.tls_cert, rt->mo.tls_key, rt->mo.client_ca, rt->tls_err, sizeof(rt->tls_err));
}

static void tls_done(uv_work_t *w, int status) {
  struct runtime *rt = fr_container_of(w, struct runtime, tls_work);

  rt->tls_reloading = 0;
  if (status != 0 || rt->tls_new == NULL) {
    FR_WARN("gateway", "TLS certificate not reloaded, the previous one stays: %s",
            status != 0 ? uv_strerror(status) : rt->tls_err);
    SSL_CTX_free(rt->tls_new);
    rt->tls_new = NULL;
    return;
  }
  if (rt->stopped || rt->g.http == NULL || fr_http_server_set_ssl_ctx(rt->g.http, rt->tls_new) != 0) {
    SSL_CTX_free(rt->tls_new);
  } else {
    /* Open connections hold references to the old context. */
    SSL_CTX_free(rt->ssl);
    rt->ssl = rt->tls_new;
  }
  rt->tls_new = NULL;
}

static void reload(struct runtime *rt) {
  gw_keys_reload(&rt->g, rt->mo.key_files);
  if (rt->ssl != NULL && !rt->tls_reloading && uv_queue_work(rt->g.loop, &rt->tls_work, tls_work, tls_done) == 0)
    rt->tls_reloading = 1;
}

static void on_reload_timer(uv_timer_t *t) {
  reload(t->data);
}

/* ------------------------------------------------------------ shutdown */

static void on_kube_freed(void *arg) {
  (void)arg;
}

static void finish(struct runtime *rt) {
  struct gw *g = &rt->g;
  size_t i;

  if (rt->stopped)
    return;
  rt->stopped = 1;
  g->draining = 1; /* no connection goes back to the pool from here on */
  gw_proxy_abort_all(g);
  fr_http_server_free(g->http, NULL, NULL);
  g->http = NULL;
  fr_http_server_free(g->health, NULL, NULL);
  g->health = NULL;
  for (i = 0; i < g->opts.nnamespaces; i++)
    fr_podcache_free(g->caches[i]);
  g->opts.nnamespaces = 0;
  fr_kube_client_free(g->kube, on_kube_freed, NULL);
  g->kube = NULL;
  uv_close((uv_handle_t *)&rt->sigint, NULL);
  uv_close((uv_handle_t *)&rt->sigterm, NULL);
  uv_close((uv_handle_t *)&rt->sighup, NULL);
  uv_close((uv_handle_t *)&rt->delay, NULL);
  uv_close((uv_handle_t *)&rt->drain, NULL);
  uv_close((uv_handle_t *)&rt->reload, NULL);
}

static void on_drain_tick(uv_timer_t *t) {
  struct runtime *rt = t->data;
  struct gw *g = &rt->g;
  size_t busy = fr_http_server_nbusy(g->http);

  if ((g->nexchanges > 0 || busy > 0) && uv_now(t->loop) < rt->deadline)
    return;
  if (g->nexchanges > 0 || busy > 0)
    FR_WARN("gateway", "drain timed out with %zu request(s) in flight, %zu connection(s) busy", g->nexchanges, busy);
  else
    FR_INFO("gateway", "drained; exiting");
  uv_timer_stop(t);
  finish(rt);
}

/* Requests on their way are answered, their connections end after them;
 * exits once no exchange is left or the drain timeout passed. */
static void start_drain(struct runtime *rt) {
  struct gw *g = &rt->g;

  FR_INFO("gateway", "draining %zu request(s) in flight, then exiting", g->nexchanges);
  g->draining = 1;
  fr_http_server_drain(g->http);
  if (g->health != NULL)
    fr_http_server_unlisten(g->health, 0);
  rt->deadline = uv_now(g->loop) + g->opts.drain_timeout_ms;
  uv_timer_start(&rt->drain, on_drain_tick, 0, 50);
}

static void on_delay(uv_timer_t *t) {
  start_drain(t->data);
}

/* As the router (docs/operations.md, Signals): SIGTERM fails /readyz for
 * shutdown_delay_ms while everything is still served, so the Service's
 * endpoints drop this replica before it stops listening; then the drain;
 * then exit. SIGINT skips the delay; a second signal stops at once. */
static void on_signal(uv_signal_t *h, int signum) {
  struct runtime *rt = h->data;
  struct gw *g = &rt->g;

  if (g->shutting_down) {
    FR_WARN("gateway", "signal %d again: stopping now", signum);
    uv_timer_stop(&rt->delay);
    uv_timer_stop(&rt->drain);
    finish(rt);
    return;
  }
  g->shutting_down = 1;
  if (signum == SIGINT || g->opts.shutdown_delay_ms == 0) {
    FR_INFO("gateway", "signal %d: stopping", signum);
    start_drain(rt);
    return;
  }
  FR_INFO("gateway", "signal %d: /readyz fails for %" PRId64 " ms, then the drain", signum,
          g->opts.shutdown_delay_ms);
  uv_timer_start(&rt->delay, on_delay, (uint64_t)g->opts.shutdown_delay_ms, 0);
}

static void on_sighup(uv_signal_t *h, int signum) {
  FR_INFO("gateway", "signal %d: reloading keys and certificate", signum);
  reload(h->data);
}

/* ------------------------------------------------------------ start-up */

static int split_hostport(const char *s, char *host, size_t cap, int *port) {
  const char *colon = strrchr(s, ':');
  int64_t p;
  size_t hl;

  if (colon == NULL)
    return -EINVAL;
  hl = (size_t)(colon - s);
  if (hl >= 2 && s[0] == '[' && s[hl - 1] == ']') {
    s++;
    hl -= 2;
  }
  if (hl == 0 || hl >= cap || fr_parse_int64(colon + 1, 0, 65535, &p) != 0)
    return -EINVAL;
  memcpy(host, s, hl);
  host[hl] = '\0';
  *port = (int)p;
  return 0;
}

static int write_port_file(const char *path, int port) {
  char tmp[4096];
  FILE *f;

  if (snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid()) >= (int)sizeof(tmp))
    return -ENAMETOOLONG;
  f = fopen(tmp, "w");
  if (f == NULL)
    return -errno;
  fprintf(f, "%d\n", port);
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    unlink(tmp);
    return -EIO;
  }
  return 0;
}

static int listen_on(struct gw *g, const struct fr_http_server_opts *o, fr_http_handler_cb h, const char *what,
                     const char *spec, const char *port_file, struct fr_http_server **out) {
  char host[256];
  int port, rc;

  if (split_hostport(spec, host, sizeof(host), &port) != 0) {
    fprintf(stderr, "fedrouter-gateway: %s must be HOST:PORT, got \"%s\"\n", what, spec);
    return -1;
  }
  if (fr_http_server_new(g->loop, o, h, g, out) != 0)
    return -1;
  rc = fr_http_server_listen(*out, host, port);
  if (rc != 0) {
    fprintf(stderr, "fedrouter-gateway: cannot listen on %s (%s): %s\n", spec, what, uv_strerror(rc));
    return -1;
  }
  if (port_file != NULL && write_port_file(port_file, fr_http_server_port(*out)) != 0) {
    fprintf(stderr, "fedrouter-gateway: cannot write %s\n", port_file);
    return -1;
  }
  return 0;
}

/* Router connections may use the descriptor limit less a reserve for
 * the pods' connections (one per exchange), the API server and logs. */
static size_t auto_max_connections(void) {
  struct rlimit rl;

  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return 512;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 1048576 ? 1048576 : rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
    (void)getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 1048576)
    return 1048576 / 2;
  /* Half for routers, half for the pods each of their requests opens. */
  return rl.rlim_cur > 2048 ? (size_t)(rl.rlim_cur - 1024) / 2 : 256;
}

static int parse_num(const char *flag, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  if (fr_parse_int64(v, lo, hi, out) != 0) {
    fprintf(stderr, "fedrouter-gateway: %s: expected an integer in [%" PRId64 ", %" PRId64 "], got \"%s\"\n", flag,
            lo, hi, v);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"cluster", required_argument, NULL, 'c'},
      {"namespace", required_argument, NULL, 'n'},
      {"key-file", required_argument, NULL, 'k'},
      {"listen", required_argument, NULL, 'l'},
      {"port-file", required_argument, NULL, 'p'},
      {"health-listen", required_argument, NULL, 'L'},
      {"health-port-file", required_argument, NULL, 'P'},
      {"tls-cert", required_argument, NULL, 1},
      {"tls-key", required_argument, NULL, 2},
      {"client-ca", required_argument, NULL, 3},
      {"insecure-plaintext", no_argument, NULL, 4},
      {"kubeconfig", required_argument, NULL, 5},
      {"context", required_argument, NULL, 6},
      {"serviceaccount-dir", required_argument, NULL, 7},
      {"idle-timeout-s", required_argument, NULL, 8},
      {"connect-timeout-ms", required_argument, NULL, 9},
      {"max-per-sandbox", required_argument, NULL, 10},
      {"max-connections", required_argument, NULL, 11},
      {"shutdown-delay-ms", required_argument, NULL, 12},
      {"drain-timeout-s", required_argument, NULL, 13},
      {"reload-s", required_argument, NULL, 14},
      {"log-level", required_argument, NULL, 15},
      {"version", no_argument, NULL, 'V'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  static struct runtime rt; /* big (the key paths, the gw): not on the stack */
  struct gw *g = &rt.g;
  struct fr_http_server_opts ho;
  struct fr_kube_creds *creds = NULL;
  struct fr_kube_client_opts ko;
  enum fr_log_level lvl;
  int64_t idle_s = 900, connect_ms = 5000, per_sb = 256, max_conns = 0, delay_ms = 5000, drain_s = 60, v;
  char err[1024];
  size_t i, nns = 0;
  int opt, rc;

  rt.mo.listen = "0.0.0.0:8443";
  rt.mo.reload_s = 30;
  while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (opt) {
    case 'c': g->opts.cluster = optarg; break;
    case 'n':
      if (nns == MAX_NAMESPACES || !fr_dns_label(optarg)) {
        fprintf(stderr, "fedrouter-gateway: --namespace \"%s\": a DNS label, at most %d namespaces\n", optarg,
                MAX_NAMESPACES);
        return 2;
      }
      for (i = 0; i < nns; i++)
        if (strcmp(rt.mo.namespaces[i], optarg) == 0)
          break;
      if (i == nns)
        rt.mo.namespaces[nns++] = optarg;
      break;
    case 'k':
      if (rt.mo.nkeys == FR_GW_MAX_KEYS) {
        fprintf(stderr, "fedrouter-gateway: at most %d --key-file\n", FR_GW_MAX_KEYS);
        return 2;
      }
      rt.mo.key_files[rt.mo.nkeys++] = optarg;
      break;
    case 'l': rt.mo.listen = optarg; break;
    case 'p': rt.mo.port_file = optarg; break;
    case 'L': rt.mo.health_listen = optarg; break;
    case 'P': rt.mo.health_port_file = optarg; break;
    case 1: rt.mo.tls_cert = optarg; break;
    case 2: rt.mo.tls_key = optarg; break;
    case 3: rt.mo.client_ca = optarg; break;
    case 4: rt.mo.plaintext = 1; break;
    case 5: rt.mo.kubeconfig = optarg; break;
    case 6: rt.mo.context = optarg; break;
    case 7: rt.mo.sa_dir = optarg; break;
    case 8: if (parse_num("--idle-timeout-s", optarg, 1, 86400, &idle_s) != 0) return 2; break;
    case 9: if (parse_num("--connect-timeout-ms", optarg, 1, 600000, &connect_ms) != 0) return 2; break;
    case 10: if (parse_num("--max-per-sandbox", optarg, 1, 1000000, &per_sb) != 0) return 2; break;
    case 11: if (parse_num("--max-connections", optarg, 1, 1048576, &max_conns) != 0) return 2; break;
    case 12: if (parse_num("--shutdown-delay-ms", optarg, 0, 600000, &delay_ms) != 0) return 2; break;
    case 13: if (parse_num("--drain-timeout-s", optarg, 1, 86400, &drain_s) != 0) return 2; break;
    case 14: if (parse_num("--reload-s", optarg, 1, 86400, &v) != 0) return 2; rt.mo.reload_s = v; break;
    case 15:
      if (fr_log_parse_level(optarg, &lvl) != 0) {
        fprintf(stderr, "fedrouter-gateway: --log-level must be debug, info, warn or error\n");
        return 2;
      }
      fr_log_set_level(lvl);
      break;
    case 'V': printf("fedrouter-gateway %s\n", FR_VERSION); return 0;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "fedrouter-gateway: unexpected argument \"%s\"\n", argv[optind]);
    return 2;
  }
  if (g->opts.cluster == NULL || !fr_dns_label(g->opts.cluster) || strlen(g->opts.cluster) > 32) {
    fprintf(stderr, "fedrouter-gateway: --cluster NAME is required: the routers' name for this cluster "
            "([a-z0-9-], at most 32 characters)\n");
    return 2;
  }
  if (nns == 0 || rt.mo.nkeys == 0) {
    fprintf(stderr, "fedrouter-gateway: at least one --namespace and one --key-file are required\n");
    return 2;
  }
  if (rt.mo.plaintext == (rt.mo.tls_cert != NULL) || (rt.mo.tls_cert == NULL) != (rt.mo.tls_key == NULL) ||
      (rt.mo.client_ca != NULL && rt.mo.plaintext)) {
    fprintf(stderr, "fedrouter-gateway: give --tls-cert and --tls-key (routers reach the gateway across "
            "networks), or --insecure-plaintext\n");
    return 2;
  }
  if (rt.mo.context != NULL && rt.mo.kubeconfig == NULL) {
    fprintf(stderr, "fedrouter-gateway: --context needs --kubeconfig\n");
    return 2;
  }
  g->opts.namespaces = rt.mo.namespaces;
  g->opts.nnamespaces = nns;
  g->opts.idle_timeout_ms = (uint64_t)idle_s * 1000;
  g->opts.connect_timeout_ms = (uint64_t)connect_ms;
  g->opts.max_per_sandbox = (size_t)per_sb;
  g->opts.shutdown_delay_ms = delay_ms;
  g->opts.drain_timeout_ms = (uint64_t)drain_s * 1000;
  signal(SIGPIPE, SIG_IGN);
  g->loop = uv_default_loop();

  if (gw_keys_load(rt.mo.key_files, &g->ring, err, sizeof(err)) != 0) {
    fprintf(stderr, "fedrouter-gateway: %s\n", err);
    return 1;
  }
  if (rt.mo.tls_cert != NULL &&
      (rt.ssl = tls_context(rt.mo.tls_cert, rt.mo.tls_key, rt.mo.client_ca, err, sizeof(err))) == NULL) {
    fprintf(stderr, "fedrouter-gateway: %s\n", err);
    return 1;
  }
  if (rt.mo.kubeconfig != NULL) {
    rc = fr_kubeconfig_load(rt.mo.kubeconfig, rt.mo.context, &creds, err, sizeof(err));
  } else {
    struct fr_in_cluster_opts io = {rt.mo.sa_dir, NULL, NULL};
    rc = fr_kubeconfig_in_cluster(&io, &creds, err, sizeof(err));
  }
  if (rc != 0) {
    fprintf(stderr, "fedrouter-gateway: %s\n", err);
    return 1;
  }
  memset(&ko, 0, sizeof(ko));
  ko.name = g->opts.cluster;
  ko.user_agent = "fedrouter-gateway/" FR_VERSION;
  rc = fr_kube_client_new(g->loop, creds, &ko, &g->kube);
  fr_kube_creds_free(creds);
  if (rc != 0) {
    fprintf(stderr, "fedrouter-gateway: cannot create the API client: %s\n", strerror(-rc));
    return 1;
  }
  g->caches = calloc(nns, sizeof(*g->caches));
  if (g->caches == NULL)
    return 1;
  for (i = 0; i < nns; i++) {
    if (fr_podcache_new(g->kube, rt.mo.namespaces[i], &g->caches[i]) != 0 ||
        fr_podcache_start(g->caches[i]) != 0) {
      fprintf(stderr, "fedrouter-gateway: cannot watch namespace %s\n", rt.mo.namespaces[i]);
      return 1;
    }
  }

  memset(&ho, 0, sizeof(ho));
  ho.name = "gateway";
  ho.ssl_ctx = rt.ssl;
  ho.max_header_bytes = 64 * 1024;
  ho.idle_timeout_ms = g->opts.idle_timeout_ms;
  ho.max_conns = max_conns > 0 ? (size_t)max_conns : auto_max_connections();
  ho.stream_body_cb = gw_stream_body;
  ho.done_cb = gw_request_done;
  ho.done_arg = g;
  if (listen_on(g, &ho, gw_handle, "--listen", rt.mo.listen, rt.mo.port_file, &g->http) != 0)
    return 1;
  if (rt.mo.health_listen != NULL) {
    memset(&ho, 0, sizeof(ho));
    ho.name = "gateway-health";
    ho.max_conns = 256;
    ho.max_conns_per_ip = 64;
    if (listen_on(g, &ho, gw_handle_health, "--health-listen", rt.mo.health_listen, rt.mo.health_port_file,
                  &g->health) != 0)
      return 1;
  }
  FR_INFO("gateway", "cluster %s: serving %zu namespace(s) on %s (%s, port %d), %zu key(s)", g->opts.cluster,
          nns, rt.mo.listen, rt.ssl ? "TLS" : "plain HTTP", fr_http_server_port(g->http), g->ring.n);
  if (rt.mo.plaintext)
    FR_WARN("gateway", "serving plain HTTP (--insecure-plaintext): signatures travel unencrypted");
  {
    char host[256];
    int port;
    split_hostport(rt.mo.listen, host, sizeof(host), &port);
    printf("fedrouter-gateway listening on %s://%s%s%s:%d\n", rt.ssl ? "https" : "http", strchr(host, ':') ? "[" : "",
           host, strchr(host, ':') ? "]" : "", fr_http_server_port(g->http));
  }
  fflush(stdout);

  uv_signal_init(g->loop, &rt.sigint);
  uv_signal_init(g->loop, &rt.sigterm);
  uv_signal_init(g->loop, &rt.sighup);
  uv_timer_init(g->loop, &rt.delay);
  uv_timer_init(g->loop, &rt.drain);
  uv_timer_init(g->loop, &rt.reload);
  rt.sigint.data = rt.sigterm.data = rt.sighup.data = rt.delay.data = rt.drain.data = rt.reload.data = &rt;
  uv_signal_start(&rt.sigint, on_signal, SIGINT);
  uv_signal_start(&rt.sigterm, on_signal, SIGTERM);
  uv_signal_start(&rt.sighup, on_sighup, SIGHUP);
  uv_timer_start(&rt.reload, on_reload_timer, (uint64_t)rt.mo.reload_s * 1000, (uint64_t)rt.mo.reload_s * 1000);
  uv_unref((uv_handle_t *)&rt.reload);
  uv_run(g->loop, UV_RUN_DEFAULT);
  rc = uv_loop_close(g->loop);
  if (rc != 0)
    FR_WARN("gateway", "loop closed with handles still open");
  free(g->caches);
  gw_server_free(g);
  gw_keys_free(&g->ring);
  SSL_CTX_free(rt.ssl);
  return 0;
}
