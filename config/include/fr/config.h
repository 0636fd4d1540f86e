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
 *   queue = { max_wait_s = 600; max_sandboxes = 100000; exec_wait_s = 30; e2b_wait_s = 0; };
 *   tenants = ( { name = "rl"; max_sandboxes = 20000;
 *                 tokens = ( { name = "ci"; sha256 = "<64 hex>"; expires = "2026-07-01T00:00:00Z"; } );
 *                 max_requests_in_flight = 4096; max_concurrent_execs = 2048;
 *                 max_cpus = 4000; max_memory_gb = 16000; max_gpus = 64; weight = 2;
 *                 secret = "rl-sandbox-secrets";           # the default for "rl"
 *                 network = { allow_internet = false; allow_out = ["10.0.0.0/8"];
 *                             deny_out = []; }; } );       # its creates' default egress
 *   clusters = ( { name = "us-east"; region = "us";
 *                  kubeconfig = "us-east.kubeconfig"; context = "us-east";
 *                  namespace = "default";
 *                  cost = { per_core_hour = 0.0316; per_gib_hour = 0.0042; per_gpu_hour = 2.48; }; },
 *                { name = "home"; region = "us"; in_cluster = true;   # the router's own cluster
 *                  gateway = { urls = ["https://gw-a.example:443", "https://gw-b.example:443"]; # or url = "..."
 *                              ca_file = "gw-ca.pem"; key_file = "gw.key"; }; } );
 *   hosted = { per_core_second = 0.00003942; per_gib_second = 0.00000672; };  # optional
 *   metrics = { prometheus_url = "http://prometheus:9090"; history_step_s = 10; };  # optional
 *
 * Relative paths are resolved against the directory of the config file.
 */
#ifndef FR_CONFIG_H
#define FR_CONFIG_H

#include <stddef.h>
#include <stdint.h>

struct fr_egress;

struct fr_config_error {
  char file[512];
  int line;             /* 0 when the error is not tied to a line */
  char msg[512];        /* "clusters.[1].region: missing (every cluster needs a region)" */
};

/* Defaults of a tenant's paused sandboxes and workspaces. */
#define FR_DEFAULT_TENANT_PAUSED 100
#define FR_DEFAULT_TENANT_PAUSED_S ((int64_t)7 * 86400)
#define FR_DEFAULT_TENANT_WORKSPACE_BYTES ((int64_t)1 << 40)
/* A tenant's largest upload into a sandbox unless its max_file_bytes says. */
#define FR_DEFAULT_TENANT_FILE_BYTES ((int64_t)10 << 30)
/* What a tenant's limits are unless its config says (the loopback-only
 * router's "local" tenant has these too). */
#define FR_DEFAULT_TENANT_REQUESTS_IN_FLIGHT 4096
#define FR_DEFAULT_TENANT_CONCURRENT_EXECS 2048
#define FR_DEFAULT_TENANT_QUEUED_SANDBOXES 20000
#define FR_DEFAULT_TENANT_QUEUED_EXECS 1024

/* One bearer token of a tenant. A tenant has one or more: a token is
 * rotated by adding the new one, moving the clients over and removing the
 * old one, each step a config reload. */
struct fr_config_token {
  char *name;              /* unique within the tenant ("default" for token_sha256) */
  char sha256[65];         /* lowercase hex of the token's SHA-256; unique over all tenants */
  int64_t expires_at;      /* unix seconds from which it is refused; 0 = never */
};

struct fr_config_tenant {
  char *name;
  struct fr_config_token *tokens; /* at least one */
  size_t ntokens;
  int64_t max_sandboxes;   /* 0 = unlimited; creates in flight count */
  int64_t max_cpu_m;       /* max_cpus, in millicores, of its sandboxes together; 0 = unlimited */
  int64_t max_mem_b;       /* max_memory_gb, in bytes; 0 = unlimited */
  int64_t max_gpus;        /* 0 = unlimited */
  int64_t weight;          /* its share of a full federation against the other tenants' (1-1000, default 1) */
  int64_t max_queued_sandboxes; /* sandboxes its creates may have waiting for room (wait_s) at once */
  int64_t max_queued_execs;     /* execs that may wait for one of its max_concurrent_execs at once */
  int64_t max_requests_in_flight; /* answered later at once (default 4096) */
  int64_t max_concurrent_execs;   /* execs running at once (default 2048) */
  int64_t max_pool_replicas;      /* warm pods over all its pools and clusters (default 1000; 0 = none) */
  int64_t max_file_bytes;         /* largest file upload into a sandbox (default 10 GiB) */
  int64_t max_paused;             /* paused sandboxes it may keep (default 100; 0 = none) */
  int64_t max_paused_s;           /* a paused sandbox goes after this long (default 7 days) */
  int64_t max_workspace_bytes;    /* its workspaces' sizes summed, running and paused (default 1 TiB) */
  int64_t max_lifetime_s;         /* its sandboxes' longest lifetime (0: sandbox.max_lifetime_s) */
  int admin;                      /* may create and change shared pools */
  /* The Secret of the sandbox namespace its creates' `secrets` name keys
   * of: `secret`, else "<name>-sandbox-secrets" (name lowercased, other
   * characters than a-z0-9 made '-'). No two tenants share one. */
  char *secret;
  /* `network`: the egress of its sandboxes when a create's own `network`
   * leaves a field out (fr/egress.h, normalized); NULL = the default
   * (internet allowed, no lists). */
  struct fr_egress *network;
};

/* What a default tenant Secret name ends with. */
#define FR_SECRET_SUFFIX "-sandbox-secrets"
/* A cluster's gateway group names at most this many URLs (replicas or
 * load balancers of the one gateway Deployment). */
#define FR_CONFIG_GATEWAY_URLS_MAX 8
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
  /* `gateway` group: the cluster's fedrouter-gateway (docs/gateway.md),
   * which every agent call but /init then goes to while one of its URLs is
   * healthy. gateway_nurls 0: none, the API server's pod proxy. */
  char *gateway_urls[FR_CONFIG_GATEWAY_URLS_MAX]; /* "https://host[:port]" ("http://" only for a
                                                     loopback host), no path; distinct */
  size_t gateway_nurls;    /* `url` (one) or `urls` (1 to FR_CONFIG_GATEWAY_URLS_MAX) */
  char *gateway_ca_file;   /* absolute path of a PEM bundle, or NULL (system roots) */
  char *gateway_key_file;  /* absolute path of the key file (re-read by the adapter when it changes) */
  unsigned char *gateway_key; /* the signing key at load time (a secret) */
  size_t gateway_key_len;
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
  /* The create queue and the exec wait (`queue` group). */
  int64_t queue_max_wait_s;       /* the largest wait_s a create may ask for */
  int64_t queue_max_sandboxes;    /* sandboxes waiting at once, every tenant together */
  int64_t queue_exec_wait_s;      /* how long an exec past max_concurrent_execs waits; 0 = it does not */
  int64_t queue_e2b_wait_s;       /* the wait of an E2B create */
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
  /* What was read: the file and every file it @includes (absolute
   * paths), and a SHA-256 over their bytes in that order. */
  char **files;
  size_t nfiles;
  char version[65];
  /* A sandbox's own ports (`ports` group): the wildcard domain of
   * Host-routed preview URLs (<port>-<id>.<domain>; NULL = path routing
   * only) and the bounds on requests in flight to them. */
  char *ports_domain;
  int64_t max_port_requests_per_sandbox;
  int64_t max_port_requests_per_tenant;
  /* Upgraded connections (WebSockets) to sandboxes' ports open at once:
   * all of this router's, one tenant's; and how long one may sit idle. */
  int64_t max_port_tunnels;
  int64_t max_port_tunnels_per_tenant;
  int64_t port_tunnel_idle_s;
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
/* The version fr_config_load() would give <path> now (its bytes and its
 * @include files', as fr_config.version), without parsing it: a cheap look
 * for changes. 0, or a negative errno (the file cannot be read). Blocking
 * file I/O. */
int fr_config_version(const char *path, char out[65]);
/* A reload: fr_config_load() of <path>, and then every key that takes
 * effect only on a restart (listen, health_listen, tls, agent, policy,
 * the clusters, sandbox.gpu_resource, sandbox.batch_commit_timeout_s,
 * sandbox.run_as_user, limits.max_body_bytes, limits.max_connections,
 * limits.max_connections_per_ip) must hold what <running> holds, or the
 * load fails with -EINVAL and an <err> at the line of the first that
 * differs: a reload is all or nothing. Blocking file I/O: call it off
 * the loop. */
int fr_config_load_next(const char *path, const struct fr_config *running, struct fr_config **out,
                        struct fr_config_error *err);
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

/* The tenant whose token hashes to <token>'s SHA-256, or NULL; <*tok>
 * (optional) gets the token's entry. Compares against every token in
 * constant time. Expiry is the caller's to check (the config knows no
 * clock): fr_config_token_expired(). */
const struct fr_config_tenant *fr_config_tenant_by_token(const struct fr_config *c, const char *token,
                                                         const struct fr_config_token **tok);
/* 1 when <t> is refused at unix time <now_s>. */
int fr_config_token_expired(const struct fr_config_token *t, int64_t now_s);
const struct fr_config_tenant *fr_config_tenant_by_name(const struct fr_config *c, const char *name);
const struct fr_config_cluster *fr_config_cluster_by_name(const struct fr_config *c,
                                                          const char *name);

#endif
