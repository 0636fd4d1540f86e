/* fr/config.h - the router configuration: a libconfig file parsed into a
 * validated, immutable, reference-counted snapshot.
 *
 * A reload builds a new snapshot and swaps it in; requests in flight keep
 * the one they started with (fr_config_ref/unref). Every error names the
 * file and line and says what is wrong (and, for misspelled keys, what was
 * probably meant); a load goes on after one where it can, so a check lists
 * them all (fr_config_check), and the first is the one returned.
 *
 * File format (see config/examples/fedrouter.conf for a commented example):
 *
 *   listen = "127.0.0.1:8080";            # HOST:PORT, required
 *   health_listen = "0.0.0.0:9090";       # optional: /healthz, /readyz, /metrics only
 *   tls = { cert = "x.pem"; key = "x.key"; };   # optional
 *   region = "us";                        # the router's own region, required
 *   shutdown_delay_ms = 2000;             # SIGTERM: /readyz fails this long, then drain
 *   policy = "policy.conf";               # optional, relative to this file
 *   sandbox = { default_lifetime_s = 3600; max_lifetime_s = 86400;
 *               batch_commit_timeout_s = 30; run_as_user = 1000; };
 *   limits = { max_batch = 5000; max_body_bytes = 1048576;
 *              max_exec_output_bytes = 16777216; max_exec_timeout_s = 3600;
 *              max_connections = 0; max_connections_per_ip = 4096;
 *              exec_output_budget_bytes = 268435456; };
 *   agent = { image = "registry/fedrouter-agent:0.1.0"; port = 49983; key_file = "agent.key"; };
 *   tenants = ( { name = "rl"; token_sha256 = "<64 hex>"; max_sandboxes = 20000;
 *                 max_requests_in_flight = 4096; max_concurrent_execs = 2048;
 *                 secret = "rl-sandbox-secrets"; } );  # the default for "rl"
 *   clusters = ( { name = "us-east"; region = "us";
 *                  kubeconfig = "us-east.kubeconfig"; context = "us-east";
 *                  namespace = "default";
 *                  cost = { per_core_hour = 0.0316; per_gib_hour = 0.0042; per_gpu_hour = 2.48; }; },
 *                { name = "home"; region = "us"; in_cluster = true; } );  # the router's own cluster
 *   hosted = { per_core_second = 0.00003942; per_gib_second = 0.00000672; };  # optional
 *   metrics = { prometheus_url = "http://prometheus:9090"; history_step_s = 10; };  # optional
 *
 * Relative paths are resolved against the directory of the config file.
 */
#ifndef FR_CONFIG_H
#define FR_CONFIG_H

#include <stddef.h>
#include <stdint.h>

struct fr_config_error {
  char file[512];
  int line;             /* 0 when the error is not tied to a line */
  char msg[512];        /* "clusters.[1].region: missing (every cluster needs a region)" */
};

/* A tenant's largest upload into a sandbox unless its max_file_bytes says. */
#define FR_DEFAULT_TENANT_FILE_BYTES ((int64_t)10 << 30)

struct fr_config_tenant {
  char *name;
  char token_sha256[65];   /* lowercase hex */
  int64_t max_sandboxes;   /* 0 = unlimited; creates in flight count */
  int64_t max_requests_in_flight; /* answered later at once (default 4096) */
  int64_t max_concurrent_execs;   /* execs running at once (default 2048) */
  int64_t max_pool_replicas;      /* warm pods over all its pools and clusters (default 1000; 0 = none) */
  int64_t max_file_bytes;         /* largest file upload into a sandbox (default 10 GiB) */
  int admin;                      /* may create and change shared pools */
  /* The Secret of the sandbox namespace its creates' `secrets` name keys
   * of: `secret`, else "<name>-sandbox-secrets" (name lowercased, other
   * characters than a-z0-9 made '-'). No two tenants share one. */
  char *secret;
};

/* What a default tenant Secret name ends with. */
#define FR_SECRET_SUFFIX "-sandbox-secrets"
/* The Secret of the loopback-only router (no tenants). */
#define FR_LOCAL_SECRET "fedrouter-sandbox-secrets"

struct fr_config_cost {
  double per_core_hour;    /* $ per vCPU-hour of requested cpu */
  double per_gib_hour;     /* $ per GiB-hour of requested memory */
  double per_gpu_hour;     /* $ per GPU-hour (with the per-resource prices; 0 = none) */
  double node_hour;        /* alternative: $ per node-hour ... */
  int64_t sandboxes_per_node; /* ... shared by this many sandboxes */
};

/* What a hosted sandbox vendor would charge, the reference the dashboard
 * and /metrics compare the fleet's cost with (fr/cost.h). Defaults: Modal's
 * published on-demand rates, $0.00003942 per core-second and $0.00000672 per
 * GiB-second. Both are >= 0. */
struct fr_config_hosted {
  double per_core_second;  /* $ per vCPU-second */
  double per_gib_second;   /* $ per GiB-second of memory */
};

struct fr_config_cluster {
  char *name;              /* [a-z0-9-], unique, <= 32 chars: it is part of sandbox ids */
  char code[5];            /* 4 of [0-9a-z] from SHA-256(name), unique: the end of E2B short ids */
  char *region;
  char *kubeconfig;        /* absolute path; NULL with in_cluster */
  char *context;           /* NULL = the kubeconfig's current-context */
  int in_cluster;          /* reached with the pod's service account (fr_kubeconfig_in_cluster) */
  char *ns;                /* namespace for sandboxes, default "default" */
  struct fr_config_cost cost;
};

struct fr_config {
  /* private */
  int refs;
  /* public, read-only */
  char *source;            /* absolute path of the file */
  char *listen_host;
  int listen_port;
  char *health_host;       /* health_listen: NULL when not set */
  int health_port;         /* -1 when not set */
  char *tls_cert, *tls_key; /* absolute paths or NULL */
  char *region;
  char *policy;            /* absolute path or NULL */
  int64_t default_lifetime_s, max_lifetime_s;
  char *gpu_resource;      /* sandbox.gpu_resource: what pod option gpus requests */
  int64_t batch_commit_timeout_s; /* pods of a batch not committed go this long after its last progress */
  int64_t run_as_user;     /* sandbox.run_as_user: > 0 runs sandbox pods as that uid under the
                              restricted Pod Security profile; 0 = the image's user */
  int64_t max_batch;
  size_t max_body_bytes;
  int64_t max_exec_output_bytes;
  int64_t max_exec_timeout_s;
  int64_t max_connections;        /* 0: the descriptor limit less a reserve (router main) */
  int64_t max_connections_per_ip; /* 0: none */
  int64_t exec_output_budget_bytes; /* all execs' buffered output together */
  int64_t shutdown_delay_ms;      /* SIGTERM: /readyz fails this long before the drain */
  struct fr_config_tenant *tenants;
  size_t ntenants;
  struct fr_config_cluster *clusters;
  size_t nclusters;
  struct fr_config_hosted hosted; /* the defaults when the file has no `hosted` */
  char metrics_token_sha256[65];  /* "" = /metrics is open to whoever reaches the port */
  /* `metrics` group: the Prometheus that scrapes the routers, which
   * /v1/usage and /v1/history query (NULL: none; then /v1/history answers
   * from memory); and the step of the in-memory history (seconds). */
  char *prometheus_url;           /* "http://host:port" or "https://..." with an optional path prefix, no
                                     trailing '/' */
  int64_t history_step_s;
  /* The sandbox agent (`agent` group); agent_image NULL = no agent. */
  char *agent_image;
  int agent_port;
  unsigned char *agent_key;       /* HMAC key of the sandbox tokens (a secret) */
  size_t agent_key_len;
  unsigned char *agent_prev_key;  /* the key before a rotation, or NULL */
  size_t agent_prev_key_len;
  /* A sandbox's own ports (`ports` group): the wildcard domain of
   * Host-routed preview URLs (<port>-<id>.<domain>; NULL = path routing
   * only) and the bounds on requests in flight to them. */
  char *ports_domain;
  int64_t max_port_requests_per_sandbox;
  int64_t max_port_requests_per_tenant;
  /* E2B template names that stand for pools (`e2b` group: templates). */
  struct fr_config_template {
    char *name, *pool;
  } *e2b_templates;
  size_t ne2b_templates;
};

/* Parses and validates <path>. Returns 0 and a snapshot with one reference
 * in <out>, or -EINVAL / -ENOENT / -ENOMEM with <err> filled. Blocking file
 * I/O: call at start-up or from a worker thread, never on the loop. */
int fr_config_load(const char *path, struct fr_config **out, struct fr_config_error *err);
/* `fedrouter config check`: loads <path> like fr_config_load() but goes on
 * after an error wherever the rest can still be checked (every unknown
 * key, every tenant and cluster, every section) and calls <cb> for each
 * error in the order found: its file, line (0: none) and message ("<path>:
 * <what>", as fr_config_error's). A syntax error stops
 * libconfig: it is the one error then. On success <*out> holds the
 * snapshot as fr_config_load() gives it. Blocking file I/O. */
int fr_config_check(const char *path, void (*cb)(void *arg, const char *file, int line, const char *msg),
                    void *arg, struct fr_config **out);
struct fr_config *fr_config_ref(struct fr_config *c);
/* Accepts NULL. */
void fr_config_unref(struct fr_config *c);

/* The tenant whose token hashes to <token>'s SHA-256, or NULL. Compares in
 * constant time. */
const struct fr_config_tenant *fr_config_tenant_by_token(const struct fr_config *c,
                                                         const char *token);
const struct fr_config_cluster *fr_config_cluster_by_name(const struct fr_config *c,
                                                          const char *name);

#endif
