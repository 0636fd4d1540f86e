/* main.c - kubesim: one process simulates one Kubernetes cluster.
 *
 * Flags, TLS material, the kubeconfig it writes for itself, the /_sim/
 * admin surface (faults and latency at run time) and orderly shutdown.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "fr/buf.h"
#include "fr/log.h"
#include "fr/quantity.h"
#include "fr/util.h"
#include "sim.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: kubesim [options]\n"
          "  --listen HOST:PORT        API address (default 127.0.0.1:0)\n"
          "  --port-file FILE          write the bound API port here\n"
          "  --admin-listen HOST:PORT  separate admin (/_sim/) address, survives 'down'\n"
          "  --admin-port-file FILE    write the admin port here\n"
          "  --name NAME               cluster and kubeconfig context name (default kubesim)\n"
          "  --region REGION           topology.kubernetes.io/region label on nodes\n"
          "  --nodes N                 nodes (default 4)\n"
          "  --node-cpu QTY            allocatable cpu per node (default 8)\n"
          "  --node-memory QTY         allocatable memory per node (default 32Gi)\n"
          "  --node-pods N             pods per node (default 110)\n"
          "  --gpu-nodes N             the first N nodes have GPUs (default 0)\n"
          "  --node-gpus N             GPUs on each of them (default 8)\n"
          "  --gpu-resource NAME       their extended resource name (default nvidia.com/gpu)\n"
          "  --node-label [I@]K=V      label every node (or node I only); repeatable\n"
          "  --node-taint [I@]K[=V]:EFFECT  taint every node (or node I only); repeatable\n"
          "  --node-monitor-grace-ms MS  a lost node's kubelet is silent this long before\n"
          "                            its node goes Unknown (default 1000)\n"
          "  --tls                     serve HTTPS with a generated self-signed certificate\n"
          "  --token TOKEN             require Authorization: Bearer TOKEN\n"
          "  --write-kubeconfig FILE   write a kubeconfig for this cluster\n"
          "  --write-serviceaccount DIR  write DIR/token, DIR/ca.crt and DIR/namespace (\"default\") as\n"
          "                            a pod's service account sees them (in-cluster clients)\n"
          "  --namespace-quota SPEC    ResourceQuota in every namespace: pods=N,requests.cpu=Q,requests.memory=Q\n"
          "  --schedule-ms MS          delay before a new pod is scheduled (default 0)\n"
          "  --image-pull-ms MS        image pull time, cached per node and image (default 0)\n"
          "  --start-ms MS             container start time (default 0)\n"
          "  --terminate-ms MS         time a deleted pod stays Terminating (default 0)\n"
          "  --api-latency-ms MS       latency added to every API request (default 0)\n"
          "  --scheduler-qps N         pods scheduled per second, 0 = unlimited (default 0)\n"
          "  --fast-exec               run trivial exec commands without forking\n"
          "  --workdir DIR             per-pod exec directories (default $TMPDIR/kubesim-PID)\n"
          "  --history N               watch history window in events (default 20000)\n"
          "  --event-limit N           Events kept, oldest dropped first; they also expire\n"
          "                            after an hour (default 10000, 0 = record none)\n"
          "  --bookmark-ms MS          watch bookmark interval (default 5000)\n"
          "  --min-request-timeout S   a watch without timeoutSeconds ends after S to 2S seconds\n"
          "                            (default 1800, as kube-apiserver; 0 = never)\n"
          "  --log-level LEVEL         debug, info, warn, error (default info)\n"
          "  --agent-binary PATH       run PATH as the agent of pods whose command is fedrouter-agent\n"
          "  --agent-mode MODE         process (default with --agent-binary) or inproc (no process)\n"
          "  --no-pod-namespaces       as root, do not give pods their own namespaces and root\n"
          "  --hide PATH               a host path no pod sees (with namespaces); repeatable\n"
          "  --image-command PATTERN=PATH  pods of images PATTERN (a repository name, or *)\n"
          "                            get a copy of PATH in /usr/local/bin; repeatable\n"
          "  --pod-cidr CIDR|auto      pod addresses (default auto: a free /16 of 10.128.0.0/9)\n"
          "  --code-interpreter PATH   the main command of agent pods of code-interpreter images:\n"
          "                            /usr/bin/python3 PATH (deploy/code-interpreter/server.py)\n"
          "  --default-storage-class NAME  the default StorageClass kubesim provisions claims of\n"
          "                            (default standard; \"\" = no class at start)\n");
}

/* ---------------------------------------------------------------------- */
/* TLS                                                                     */

/* A self-signed P-256 certificate that is its own CA (basicConstraints
 * CA:TRUE), valid for 127.0.0.1, ::1, localhost and <host>; kubectl and
 * libcurl trust it through the kubeconfig's certificate-authority-data. */
static int tls_setup(struct sim *s, const char *host) {
  EVP_PKEY *key = EVP_EC_gen("P-256");
  X509 *x = X509_new();
  X509_NAME *nm;
  X509V3_CTX ctx;
  X509_EXTENSION *ext;
  BIO *bio = NULL;
  char san[512], cn[128];
  unsigned char serial[16];
  BIGNUM *bn = NULL;
  long len;
  char *pem;
  int rc = -1;
  size_t i;
  static const char *const exts[][2] = {
      {"basicConstraints", "critical,CA:TRUE"},
      {"keyUsage", "critical,digitalSignature,keyEncipherment,keyCertSign"},
      {"extendedKeyUsage", "serverAuth"},
      {"subjectKeyIdentifier", "hash"},
  };

  if (key == NULL || x == NULL)
    goto out;
  X509_set_version(x, 2);
  fr_random_bytes(serial, sizeof(serial));
  serial[0] &= 0x7f;
  bn = BN_bin2bn(serial, sizeof(serial), NULL);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x));
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 365L * 86400);
  X509_set_pubkey(x, key);
  nm = X509_get_subject_name(x);
  snprintf(cn, sizeof(cn), "kubesim-%s", s->opts.name);
  X509_NAME_add_entry_by_txt(nm, "CN", MBSTRING_ASC, (unsigned char *)cn, -1, -1, 0);
  X509_set_issuer_name(x, nm);
  X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
  for (i = 0; i < FR_ARRAY_SIZE(exts); i++) {
    ext = X509V3_EXT_conf(NULL, &ctx, exts[i][0], exts[i][1]);
    if (ext == NULL)
      goto out;
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (strcmp(host, "127.0.0.1") == 0 || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0 ||
      strcmp(host, "localhost") == 0)
    snprintf(san, sizeof(san), "IP:127.0.0.1,IP:::1,DNS:localhost");
  else
    snprintf(san, sizeof(san), "IP:127.0.0.1,IP:::1,DNS:localhost,%s:%s",
             strchr(host, ':') || strspn(host, "0123456789.") == strlen(host) ? "IP" : "DNS", host);
  ext = X509V3_EXT_conf(NULL, &ctx, "subjectAltName", san);
  if (ext == NULL)
    goto out;
  X509_add_ext(x, ext, -1);
  X509_EXTENSION_free(ext);
  if (X509_sign(x, key, EVP_sha256()) == 0)
    goto out;
  s->ssl_ctx = SSL_CTX_new(TLS_server_method());
  if (s->ssl_ctx == NULL || SSL_CTX_use_certificate(s->ssl_ctx, x) != 1 ||
      SSL_CTX_use_PrivateKey(s->ssl_ctx, key) != 1)
    goto out;
  SSL_CTX_set_min_proto_version(s->ssl_ctx, TLS1_2_VERSION);
  bio = BIO_new(BIO_s_mem());
  if (bio == NULL || PEM_write_bio_X509(bio, x) != 1)
    goto out;
  len = BIO_get_mem_data(bio, &pem);
  s->ca_pem = malloc((size_t)len + 1);
  if (s->ca_pem == NULL)
    goto out;
  memcpy(s->ca_pem, pem, (size_t)len);
  s->ca_pem[len] = '\0';
  rc = 0;
out:
  if (rc != 0)
    ERR_print_errors_fp(stderr);
  BIO_free(bio);
  BN_free(bn);
  X509_free(x);
  EVP_PKEY_free(key);
  return rc;
}

static int write_file(const char *path, const char *data, size_t len, int mode) {
  char tmp[4096];
  FILE *f;
  int fd;

  /* Write then rename, so a reader polling for the file never sees half. */
  if (snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid()) >= (int)sizeof(tmp))
    return -ENAMETOOLONG;
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, mode);
  if (fd < 0)
    return -errno;
  f = fdopen(fd, "w");
  if (f == NULL) {
    close(fd);
    return -errno;
  }
  if (fwrite(data, 1, len, f) != len || fclose(f) != 0) {
    unlink(tmp);
    return -EIO;
  }
  if (rename(tmp, path) != 0) {
    unlink(tmp);
    return -errno;
  }
  return 0;
}

static int write_kubeconfig(struct sim *s, const char *host) {
  struct fr_buf b;
  char *ca = NULL;
  int rc;
  const char *h = strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0 ? "127.0.0.1" : host;

  fr_buf_init(&b);
  if (s->ca_pem != NULL) {
    ca = malloc(fr_base64_len(strlen(s->ca_pem)));
    if (ca == NULL)
      return -ENOMEM;
    fr_base64_encode(s->ca_pem, strlen(s->ca_pem), ca);
  }
  fr_buf_printf(&b,
                "apiVersion: v1\nkind: Config\nclusters:\n- name: %s\n  cluster:\n"
                "    server: %s://%s%s%s:%d\n",
                s->opts.name, s->ssl_ctx ? "https" : "http", strchr(h, ':') ? "[" : "", h,
                strchr(h, ':') ? "]" : "", fr_http_server_port(s->api));
  if (ca != NULL)
    fr_buf_printf(&b, "    certificate-authority-data: %s\n", ca);
  fr_buf_printf(&b,
                "contexts:\n- name: %s\n  context:\n    cluster: %s\n    user: %s\n"
                "    namespace: default\ncurrent-context: %s\nusers:\n- name: %s\n  user:\n",
                s->opts.name, s->opts.name, s->opts.name, s->opts.name, s->opts.name);
  if (s->opts.token != NULL)
    fr_buf_printf(&b, "    token: %s\n", s->opts.token);
  else
    fr_buf_puts(&b, "    {}\n");
  fr_buf_puts(&b, "preferences: {}\n");
  free(ca);
  rc = b.data ? write_file(s->opts.kubeconfig, b.data, b.len, 0600) : -ENOMEM;
  fr_buf_free(&b);
  return rc;
}

/* What a pod's projected service-account volume holds: the token (the
 * one --token set, or none), the API server's CA, the namespace. With
 * KUBERNETES_SERVICE_HOST=127.0.0.1 and KUBERNETES_SERVICE_PORT=<port>
 * an in-cluster client finds this cluster; PUT /_sim/tokens and a new
 * token file rotate the token as the kubelet would. */
static int write_serviceaccount(struct sim *s) {
  const char *dir = s->opts.serviceaccount_dir, *names[] = {"token", "ca.crt", "namespace"};
  const char *data[] = {s->opts.token ? s->opts.token : "", s->ca_pem ? s->ca_pem : "", "default"};
  char path[4096];
  size_t i;
  int rc;

  if (mkdir(dir, 0700) != 0 && errno != EEXIST)
    return -errno;
  for (i = 0; i < FR_ARRAY_SIZE(names); i++) {
    if (snprintf(path, sizeof(path), "%s/%s", dir, names[i]) >= (int)sizeof(path))
      return -ENAMETOOLONG;
    if ((rc = write_file(path, data[i], strlen(data[i]), 0600)) != 0)
      return rc;
  }
  return 0;
}

/* ---------------------------------------------------------------------- */
/* start-up                                                                */

static int split_hostport(const char *s, char *host, size_t cap, int *port) {
  const char *colon = strrchr(s, ':');
  int64_t p;
  size_t hl;

  if (colon == NULL)
    return -EINVAL;
  hl = (size_t)(colon - s);
  if (hl >= cap)
    return -EINVAL;
  if (hl >= 2 && s[0] == '[' && s[hl - 1] == ']') {
    memcpy(host, s + 1, hl - 2);
    host[hl - 2] = '\0';
  } else {
    memcpy(host, s, hl);
    host[hl] = '\0';
  }
  if (fr_parse_int64(colon + 1, 0, 65535, &p) != 0)
    return -EINVAL;
  *port = (int)p;
  return 0;
}

static int parse_quota(struct sim *s, const char *spec) {
  char buf[512], *p, *save = NULL;

  s->quota_pods = s->quota_cpu_m = s->quota_mem_m = -1;
  if (spec == NULL)
    return 0;
  if (strlen(spec) >= sizeof(buf))
    return -EINVAL;
  memcpy(buf, spec, strlen(spec) + 1);
  for (p = strtok_r(buf, ",", &save); p != NULL; p = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(p, '=');
    int64_t v;
    if (eq == NULL)
      return -EINVAL;
    *eq = '\0';
    if (strcmp(p, "pods") == 0 && fr_parse_int64(eq + 1, 0, INT64_MAX, &v) == 0)
      s->quota_pods = v;
    else if ((strcmp(p, "requests.cpu") == 0 || strcmp(p, "cpu") == 0) &&
             fr_quantity_parse_milli(eq + 1, &v) == 0 && v >= 0)
      s->quota_cpu_m = v;
    else if ((strcmp(p, "requests.memory") == 0 || strcmp(p, "memory") == 0) &&
             fr_quantity_parse_value(eq + 1, &v) == 0 && v >= 0)
      s->quota_mem_m = v;
    else
      return -EINVAL;
  }
  return 0;
}

static int write_port_file(const char *path, int port) {
  char buf[16];
  int n = snprintf(buf, sizeof(buf), "%d\n", port);

  return write_file(path, buf, (size_t)n, 0644);
}

static int create_namespace(struct sim *s, const char *name) {
  json_t *j = json_pack("{s:s,s:s,s:{s:s,s:{s:s}},s:{s:[s]},s:{s:s}}", "kind", "Namespace",
                        "apiVersion", "v1", "metadata", "name", name, "labels",
                        "kubernetes.io/metadata.name", name, "spec", "finalizers", "kubernetes",
                        "status", "phase", "Active");
  struct sim_err e;
  struct sim_obj *o;

  if (j == NULL || obj_prepare(s, K_NAMESPACE, "", j, &e) != 0) {
    json_decref(j);
    return -EINVAL;
  }
  o = store_commit(s, K_NAMESPACE, NULL, j, EV_ADDED);
  if (o == NULL)
    return -ENOMEM;
  o->u.nsstate = calloc(1, sizeof(struct sim_ns));
  if (o->u.nsstate == NULL)
    return -ENOMEM;
  quota_init_ns(s, name);
  return 0;
}

/* The host paths isolated pods do not see: what a container never sees of
 * its node (homes, /run's sockets, /tmp), the per-pod directories and the
 * --hide paths (key and token directories, the checkout). Canonical, so
 * the upper layer's whiteouts land on the real names; a --hide path must
 * exist. Creates the --workdir root. 0, or -1 after a message. */
static int hides_init(struct sim *s, const char *const *args, size_t nargs) {
  static const char *const always[] = {"/root", "/home", "/run", "/tmp", "/var/tmp"};
  char real[PATH_MAX];
  size_t i;

  if (strlen(s->opts.workdir) >= sizeof(real)) {
    fprintf(stderr, "kubesim: --workdir: too long\n");
    return -1;
  }
  /* mkdir -p */
  memcpy(real, s->opts.workdir, strlen(s->opts.workdir) + 1);
  for (char *c = real + 1;; c++) {
    char was = *c;
    if (was != '/' && was != '\0')
      continue;
    *c = '\0';
    if (mkdir(real, 0755) != 0 && errno != EEXIST) {
      fprintf(stderr, "kubesim: --workdir %s: %s\n", s->opts.workdir, strerror(errno));
      return -1;
    }
    *c = was;
    if (was == '\0')
      break;
  }
  for (i = 0; i < FR_ARRAY_SIZE(always) + 1 + nargs; i++) {
    const char *p = i < FR_ARRAY_SIZE(always) ? always[i]
                    : i == FR_ARRAY_SIZE(always) ? s->opts.workdir
                    : args[i - FR_ARRAY_SIZE(always) - 1];
    int user = i > FR_ARRAY_SIZE(always);
    if (realpath(p, real) == NULL) {
      if (!user)
        continue;
      fprintf(stderr, "kubesim: --hide %s: %s\n", p, strerror(errno));
      return -1;
    }
    if (strcmp(real, "/") == 0) {
      fprintf(stderr, "kubesim: --hide %s: cannot hide the root\n", p);
      return -1;
    }
    if ((s->opts.hides[s->opts.nhides] = strdup(real)) == NULL) {
      fprintf(stderr, "kubesim: out of memory\n");
      return -1;
    }
    s->opts.nhides++;
  }
  return 0;
}

static void pods_opts_free(struct sim *s) {
  size_t i;

  for (i = 0; i < s->opts.nhides; i++)
    free((char *)s->opts.hides[i]);
  s->opts.nhides = 0;
  images_free(s);
}

struct shutdown {
  uv_signal_t sigint, sigterm;
  uv_timer_t force;
  struct sim *sim;
};

static void walk_close(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h))
    uv_close(h, NULL);
}

static void on_force(uv_timer_t *t) {
  FR_WARN("kubesim", "shutdown did not finish in time; closing what is left");
  uv_walk(t->loop, walk_close, NULL);
}

/* Frees simulation state and closes every handle so the loop ends by
 * itself: killed processes are reaped, their exec streams finish, and pod
 * directories are removed by the thread pool before uv_run() returns. */
static void sim_teardown(struct sim *s) {
  struct sim_obj *o, *nx;

  s->stopping = 1;
  watch_drop_all(s);
  for (o = store_first(s, K_POD, NULL); o != NULL; o = nx) {
    nx = store_next(s, o);
    pod_free_state(s, o); /* kills its processes */
  }
  for (o = store_first(s, K_RS, NULL); o != NULL; o = store_next(s, o)) {
    if (o->u.rs) {
      fr_selector_free(o->u.rs->selector);
      free(o->u.rs);
      o->u.rs = NULL;
    }
  }
  for (o = store_first(s, K_DEPLOYMENT, NULL); o != NULL; o = store_next(s, o))
    deploy_free_state(o);
  for (o = store_first(s, K_NODE, NULL); o != NULL; o = store_next(s, o)) {
    size_t k;
    if (o->u.node == NULL)
      continue;
    for (k = 0; k < o->u.node->nimages; k++)
      free(o->u.node->images[k]);
    free(o->u.node->images);
    json_decref(o->u.node->taints);
    free(o->u.node);
    o->u.node = NULL;
  }
  for (o = store_first(s, K_NAMESPACE, NULL); o != NULL; o = store_next(s, o)) {
    free(o->u.nsstate);
    o->u.nsstate = NULL;
  }
  fr_http_server_free(s->api, NULL, NULL);
  s->api = NULL;
  fr_http_server_free(s->admin, NULL, NULL);
  s->admin = NULL;
  uv_close((uv_handle_t *)&s->sched_timer, NULL);
  uv_close((uv_handle_t *)&s->noexec_timer, NULL);
  uv_close((uv_handle_t *)&s->sync_timer, NULL);
  nodelife_close(s);
  netpol_close(s);
}

static void on_signal(uv_signal_t *h, int signum) {
  struct shutdown *sd = h->data;

  FR_INFO("kubesim", "%s: signal %d, shutting down", sd->sim->opts.name, signum);
  sim_teardown(sd->sim);
  uv_close((uv_handle_t *)&sd->sigint, NULL);
  uv_close((uv_handle_t *)&sd->sigterm, NULL);
  uv_timer_start(&sd->force, on_force, 5000, 0);
  uv_unref((uv_handle_t *)&sd->force);
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"listen", required_argument, NULL, 'l'},
      {"port-file", required_argument, NULL, 'p'},
      {"admin-listen", required_argument, NULL, 'L'},
      {"admin-port-file", required_argument, NULL, 'P'},
      {"name", required_argument, NULL, 'n'},
      {"region", required_argument, NULL, 'r'},
      {"nodes", required_argument, NULL, 'N'},
      {"node-cpu", required_argument, NULL, 'c'},
      {"node-memory", required_argument, NULL, 'm'},
      {"node-pods", required_argument, NULL, 'x'},
      {"tls", no_argument, NULL, 't'},
      {"token", required_argument, NULL, 'T'},
      {"write-kubeconfig", required_argument, NULL, 'k'},
      {"namespace-quota", required_argument, NULL, 'q'},
      {"schedule-ms", required_argument, NULL, 1},
      {"image-pull-ms", required_argument, NULL, 2},
      {"start-ms", required_argument, NULL, 3},
      {"terminate-ms", required_argument, NULL, 4},
      {"api-latency-ms", required_argument, NULL, 5},
      {"scheduler-qps", required_argument, NULL, 6},
      {"fast-exec", no_argument, NULL, 7},
      {"workdir", required_argument, NULL, 8},
      {"history", required_argument, NULL, 9},
      {"bookmark-ms", required_argument, NULL, 10},
      {"log-level", required_argument, NULL, 11},
      {"agent-binary", required_argument, NULL, 12},
      {"agent-mode", required_argument, NULL, 13},
      {"no-pod-namespaces", no_argument, NULL, 14},
      {"gpu-nodes", required_argument, NULL, 15},
      {"node-gpus", required_argument, NULL, 16},
      {"gpu-resource", required_argument, NULL, 17},
      {"node-label", required_argument, NULL, 18},
      {"node-taint", required_argument, NULL, 19},
      {"node-monitor-grace-ms", required_argument, NULL, 20},
      {"min-request-timeout", required_argument, NULL, 21},
      {"event-limit", required_argument, NULL, 22},
      {"hide", required_argument, NULL, 23},
      {"image-command", required_argument, NULL, 24},
      {"pod-cidr", required_argument, NULL, 25},
      {"write-serviceaccount", required_argument, NULL, 26},
      {"code-interpreter", required_argument, NULL, 27},
      {"default-storage-class", required_argument, NULL, 28},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  static char agent_abs[PATH_MAX], ci_abs[PATH_MAX];
  struct sim s;
  struct shutdown sd;
  char host[256], ahost[256], defdir[512];
  int port = 0, aport = 0, opt, i, rc;
  int64_t v;
  struct fr_http_server_opts hopts;
  enum fr_log_level lvl;
  const char *agent_mode = NULL;
  int no_pod_ns = 0;
  ssize_t sl;
  const char *hide_args[POD_MAX_HIDES - 8];
  size_t nhide_args = 0;
  const char *image_args[16];
  size_t nimage_args = 0;

  /* Re-run as a pod's process supervisor (agent.c), or to put egress
   * rules in a pod's network namespace (netpol.c). */
  if (argc > 1 && strcmp(argv[1], "__netpol-apply") == 0)
    return netpol_helper_main(argc, argv);
  if (argc > 1 && strncmp(argv[1], "__pod-", 6) == 0)
    return pod_helper_main(argc, argv);
  memset(&s, 0, sizeof(s));
  s.opts.listen = "127.0.0.1:0";
  s.opts.name = "kubesim";
  s.opts.nodes = 4;
  s.opts.node_cpu = "8";
  s.opts.node_memory = "32Gi";
  s.opts.node_pods = 110;
  s.opts.node_gpus = 8;
  s.opts.history = 20000;
  s.opts.event_limit = 10000;
  s.opts.bookmark_ms = 5000;
  s.opts.node_grace_ms = 1000;
  s.opts.min_request_timeout = 1800;
  s.opts.default_storage_class = "standard";
  while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    int *num = NULL;
    int64_t lo = 0, hi = 3600000;
    switch (opt) {
    case 'l': s.opts.listen = optarg; break;
    case 'p': s.opts.port_file = optarg; break;
    case 'L': s.opts.admin_listen = optarg; break;
    case 'P': s.opts.admin_port_file = optarg; break;
    case 'n': s.opts.name = optarg; break;
    case 'r': s.opts.region = optarg; break;
    case 'N': num = &s.opts.nodes; lo = 0; hi = 100000; break;
    case 'c': s.opts.node_cpu = optarg; break;
    case 'm': s.opts.node_memory = optarg; break;
    case 'x': num = &s.opts.node_pods; lo = 1; hi = 100000; break;
    case 't': s.opts.tls = 1; break;
    case 'T': s.opts.token = optarg; break;
    case 'k': s.opts.kubeconfig = optarg; break;
    case 'q': s.opts.quota = optarg; break;
    case 1: num = &s.opts.schedule_ms; break;
    case 2: num = &s.opts.image_pull_ms; break;
    case 3: num = &s.opts.start_ms; break;
    case 4: num = &s.opts.terminate_ms; break;
    case 5: num = &s.opts.api_latency_ms; break;
    case 6: num = &s.opts.scheduler_qps; hi = 1000000; break;
    case 7: s.opts.fast_exec = 1; break;
    case 8: s.opts.workdir = optarg; break;
    case 9: num = &s.opts.history; lo = 100; hi = 10000000; break;
    case 10: num = &s.opts.bookmark_ms; break;
    case 11: s.opts.log_level = optarg; break;
    /* Absolute: pods run in directories of their own. */
    case 12: s.opts.agent_binary = realpath(optarg, agent_abs) != NULL ? agent_abs : optarg; break;
    case 27: s.opts.code_interpreter = realpath(optarg, ci_abs) != NULL ? ci_abs : optarg; break;
    case 13: agent_mode = optarg; break;
    case 14: no_pod_ns = 1; break;
    case 15: num = &s.opts.gpu_nodes; hi = 100000; break;
    case 16: num = &s.opts.node_gpus; hi = 1024; break;
    case 17: s.opts.gpu_resource = optarg; break;
    case 22: num = &s.opts.event_limit; hi = 10000000; break;
    case 23:
      if (nhide_args == FR_ARRAY_SIZE(hide_args)) {
        fprintf(stderr, "kubesim: --hide: at most %zu\n", FR_ARRAY_SIZE(hide_args));
        return 2;
      }
      hide_args[nhide_args++] = optarg;
      break;
    case 24:
      if (nimage_args == FR_ARRAY_SIZE(image_args)) {
        fprintf(stderr, "kubesim: --image-command: at most %zu\n", FR_ARRAY_SIZE(image_args));
        return 2;
      }
      image_args[nimage_args++] = optarg;
      break;
    case 25: s.opts.pod_cidr = optarg; break;
    case 26: s.opts.serviceaccount_dir = optarg; break;
    case 28: s.opts.default_storage_class = optarg; break;
    case 18:
    case 19: {
      int taint = opt == 19, *n = taint ? &s.opts.nnode_taints : &s.opts.nnode_labels;
      if (*n == 16 || node_flag_valid(optarg, taint) != 0) {
        fprintf(stderr, "kubesim: --node-%s \"%s\": expected %s (at most 16)\n", taint ? "taint" : "label",
                optarg, taint ? "[INDEX@]KEY[=VALUE]:NoSchedule|PreferNoSchedule|NoExecute" : "[INDEX@]KEY=VALUE");
        return 2;
      }
      (taint ? s.opts.node_taints : s.opts.node_labels)[(*n)++] = optarg;
      break;
    }
    case 20: num = &s.opts.node_grace_ms; break;
    case 21: num = &s.opts.min_request_timeout; hi = 86400; break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
    if (num != NULL) {
      if (fr_parse_int64(optarg, lo, hi, &v) != 0) {
        fprintf(stderr, "kubesim: %s: expected an integer in [%" PRId64 ", %" PRId64 "], got \"%s\"\n",
                longopts[0].name ? argv[optind - 1] : "", lo, hi, optarg);
        return 2;
      }
      *num = (int)v;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "kubesim: unexpected argument \"%s\"\n", argv[optind]);
    return 2;
  }
  if (s.opts.log_level != NULL) {
    if (fr_log_parse_level(s.opts.log_level, &lvl) != 0) {
      fprintf(stderr, "kubesim: --log-level must be debug, info, warn or error\n");
      return 2;
    }
    fr_log_set_level(lvl);
  }
  if (split_hostport(s.opts.listen, host, sizeof(host), &port) != 0) {
    fprintf(stderr, "kubesim: --listen must be HOST:PORT, got \"%s\"\n", s.opts.listen);
    return 2;
  }
  if (s.opts.admin_listen && split_hostport(s.opts.admin_listen, ahost, sizeof(ahost), &aport) != 0) {
    fprintf(stderr, "kubesim: --admin-listen must be HOST:PORT\n");
    return 2;
  }
  if (parse_quota(&s, s.opts.quota) != 0) {
    fprintf(stderr, "kubesim: --namespace-quota: expected pods=N,requests.cpu=Q,requests.memory=Q, got \"%s\"\n",
            s.opts.quota);
    return 2;
  }
  if (fr_quantity_parse_milli(s.opts.node_cpu, &v) != 0 || v <= 0 ||
      fr_quantity_parse_value(s.opts.node_memory, &v) != 0 || v <= 0) {
    fprintf(stderr, "kubesim: --node-cpu and --node-memory must be positive Kubernetes quantities\n");
    return 2;
  }
  if (agent_mode == NULL || strcmp(agent_mode, "process") == 0) {
    s.opts.agent_mode = s.opts.agent_binary != NULL ? AGENT_MODE_PROCESS : AGENT_MODE_NONE;
    if (agent_mode != NULL && s.opts.agent_binary == NULL) {
      fprintf(stderr, "kubesim: --agent-mode=process needs --agent-binary PATH\n");
      return 2;
    }
  } else if (strcmp(agent_mode, "inproc") == 0) {
    s.opts.agent_mode = AGENT_MODE_INPROC;
  } else {
    fprintf(stderr, "kubesim: --agent-mode must be process or inproc, got \"%s\"\n", agent_mode);
    return 2;
  }
  if (s.opts.agent_binary != NULL && access(s.opts.agent_binary, X_OK) != 0) {
    fprintf(stderr, "kubesim: --agent-binary %s: %s\n", s.opts.agent_binary, strerror(errno));
    return 2;
  }
  if (s.opts.code_interpreter != NULL && access(s.opts.code_interpreter, R_OK) != 0) {
    fprintf(stderr, "kubesim: --code-interpreter %s: %s\n", s.opts.code_interpreter, strerror(errno));
    return 2;
  }
  /* Namespaces need root (CAP_SYS_ADMIN); without, processes are found by
   * their environment mark instead (docs/kubesim.md). */
  s.opts.pod_namespaces = !no_pod_ns && geteuid() == 0;
  sl = readlink("/proc/self/exe", s.self_exe, sizeof(s.self_exe) - 1);
  if (sl <= 0) {
    fprintf(stderr, "kubesim: cannot find its own binary: %s\n", strerror(errno));
    return 1;
  }
  s.self_exe[sl] = '\0';
  if (s.opts.workdir == NULL) {
    const char *tmp = getenv("TMPDIR");
    snprintf(defdir, sizeof(defdir), "%s/kubesim-%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    s.opts.workdir = defdir;
  }
  /* The pod network before anything else is made, so a range that is
   * taken ends the start cleanly. No pod is Running before the loop runs. */
  /* The code interpreter is a host file: isolated pods of its image get a
   * copy (what --image-command code-interpreter=PATH does). */
  if (s.opts.code_interpreter != NULL && s.opts.code_interpreter[0] == '/' &&
      nimage_args < FR_ARRAY_SIZE(image_args)) {
    static char ci_arg[4200];
    snprintf(ci_arg, sizeof(ci_arg), "code-interpreter=%s", s.opts.code_interpreter);
    image_args[nimage_args++] = ci_arg;
  }
  if (hides_init(&s, hide_args, nhide_args) != 0 || images_init(&s, image_args, nimage_args) != 0 ||
      podnet_init(&s, s.opts.pod_cidr) != 0) {
    podnet_free(&s);
    pods_opts_free(&s);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  s.loop = uv_default_loop();
  if (s.opts.tls && tls_setup(&s, host) != 0) {
    fprintf(stderr, "kubesim: cannot create the TLS certificate\n");
    goto fail;
  }
  store_init(&s);
  if (events_init(&s) != 0 || stats_init(&s) != 0) {
    fprintf(stderr, "kubesim: out of memory\n");
    goto fail;
  }
  sched_init(&s);
  sync_init(&s);
  nodelife_init(&s);
  if (netpol_init(&s) != 0) {
    fprintf(stderr, "kubesim: out of memory\n");
    goto fail;
  }
  s.faults.latency_ms = s.opts.api_latency_ms;
  memset(&hopts, 0, sizeof(hopts));
  hopts.ssl_ctx = s.ssl_ctx;
  hopts.name = "kubesim";
  /* Pod manifests and patches are small, but kubectl create -f of a List can
   * be large; the apiserver's own limit is 3 MiB. */
  hopts.max_body_bytes = 3 * 1024 * 1024;
  hopts.idle_timeout_ms = 90000;
  hopts.stream_body_cb = api_stream_body;
  hopts.done_cb = api_done;
  hopts.done_arg = &s;
  if (fr_http_server_new(s.loop, &hopts, api_handle, &s, &s.api) != 0)
    goto fail;
  hopts.stream_body_cb = NULL;
  hopts.done_cb = NULL;
  rc = fr_http_server_listen(s.api, host, port);
  if (rc != 0) {
    fprintf(stderr, "kubesim: cannot listen on %s: %s\n", s.opts.listen, uv_strerror(rc));
    goto fail;
  }
  if (s.opts.admin_listen) {
    hopts.ssl_ctx = NULL;
    hopts.name = "kubesim-admin";
    if (fr_http_server_new(s.loop, &hopts, admin_handle, &s, &s.admin) != 0 ||
        (rc = fr_http_server_listen(s.admin, ahost, aport)) != 0) {
      fprintf(stderr, "kubesim: cannot listen on %s\n", s.opts.admin_listen);
      goto fail;
    }
  }
  if (create_namespace(&s, "default") != 0 || create_namespace(&s, "kube-system") != 0 ||
      create_namespace(&s, "kube-public") != 0 || create_namespace(&s, "kube-node-lease") != 0) {
    fprintf(stderr, "kubesim: cannot create namespaces\n");
    goto fail;
  }
  if ((rc = volumes_init(&s)) != 0) {
    fprintf(stderr, "kubesim: cannot set up volumes under %s: %s\n", s.opts.workdir, strerror(-rc));
    goto fail;
  }
  for (i = 1; i <= s.opts.nodes; i++) {
    if (node_create(&s, i) != 0) {
      fprintf(stderr, "kubesim: cannot create node %d\n", i);
      goto fail;
    }
  }
  if (s.opts.kubeconfig && (rc = write_kubeconfig(&s, host)) != 0) {
    fprintf(stderr, "kubesim: cannot write %s: %s\n", s.opts.kubeconfig, strerror(-rc));
    goto fail;
  }
  if (s.opts.serviceaccount_dir && (rc = write_serviceaccount(&s)) != 0) {
    fprintf(stderr, "kubesim: cannot write %s: %s\n", s.opts.serviceaccount_dir, strerror(-rc));
    goto fail;
  }
  if (s.opts.admin_port_file && write_port_file(s.opts.admin_port_file, fr_http_server_port(s.admin)) != 0) {
    fprintf(stderr, "kubesim: cannot write %s\n", s.opts.admin_port_file);
    goto fail;
  }
  /* The port file comes last: once it exists the cluster is fully up. */
  if (s.opts.port_file && write_port_file(s.opts.port_file, fr_http_server_port(s.api)) != 0) {
    fprintf(stderr, "kubesim: cannot write %s\n", s.opts.port_file);
    goto fail;
  }
  FR_INFO("kubesim", "%s: serving the Kubernetes API on %s://%s:%d (%d nodes, %s cpu, %s memory, %d pods each)",
          s.opts.name, s.ssl_ctx ? "https" : "http", host, fr_http_server_port(s.api), s.opts.nodes,
          s.opts.node_cpu, s.opts.node_memory, s.opts.node_pods);

  sd.sim = &s;
  uv_signal_init(s.loop, &sd.sigint);
  uv_signal_init(s.loop, &sd.sigterm);
  sd.sigint.data = sd.sigterm.data = &sd;
  uv_signal_start(&sd.sigint, on_signal, SIGINT);
  uv_signal_start(&sd.sigterm, on_signal, SIGTERM);
  uv_timer_init(s.loop, &sd.force);
  uv_run(s.loop, UV_RUN_DEFAULT);
  uv_close((uv_handle_t *)&sd.force, NULL);
  uv_run(s.loop, UV_RUN_DEFAULT);
  sched_free(&s);
  store_free(&s);
  /* No pod runs any more: the claims' directories go with the cluster. */
  volumes_free(&s);
  netpol_free(&s);
  events_free(&s);
  stats_free(&s);
  /* Every pod's supervisor has exited (their veths went with their
   * namespaces): the bridge goes. */
  podnet_free(&s);
  if (uv_loop_close(s.loop) != 0)
    FR_WARN("kubesim", "loop did not close cleanly");
  SSL_CTX_free(s.ssl_ctx);
  free(s.ca_pem);
  pods_opts_free(&s);
  for (i = 0; i < (int)s.napi_tokens; i++)
    fr_secret_free(s.api_tokens[i]);
  {
    /* Remove the per-pod working directories' root if we created it. */
    if (s.opts.workdir == defdir)
      rmdir(defdir);
  }
  return 0;
fail:
  /* What would outlive this process on the host: the pod bridge. (The
   * rest of a failed start is left to the exit.) */
  podnet_free(&s);
  pods_opts_free(&s);
  return 1;
}
