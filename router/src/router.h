/* router.h - fedrouter internals shared by main.c and router.c. */
#ifndef FR_ROUTER_H
#define FR_ROUTER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "fr/adapter.h" /* struct fr_adapter_agent, struct fr_exec_budget */

struct fr_config;
struct fr_adapter;
struct fr_adapter_view;
struct metrics;
struct history;
struct promq_client;
struct fr_policy;
struct fr_cluster_state;
struct fr_sandbox_spec;
struct fr_http_server;
struct resume_req;
struct fr_http_req;

struct tenant_state;
struct reload;
struct queue;
struct execwait;

#define PORTS_INFLIGHT_BUCKETS 256
struct port_inflight;

struct router {
  uv_loop_t *loop;
  struct fr_config *cfg;          /* the current snapshot, one reference held; a reload swaps it
                                     (requests keep the one they started with: api_req.cfg) */
  struct fr_config *boot;         /* the snapshot the router started with, kept for what is wired
                                     in at start (listeners, adapters, the agent key, cluster and
                                     policy names); a reload changes none of that */
  struct fr_http_server *http;
  struct fr_http_server *health;  /* health_listen's server, or NULL */
  struct fr_adapter **adapters;   /* one per configured cluster, same order */
  size_t nadapters;
  struct resume_req *resuming;    /* paused sandboxes being resumed, with their waiting calls (workspaces.c) */
  int shutting_down;              /* got SIGTERM/SIGINT: /readyz answers 503 from now on */
  int stopping;                   /* draining: no new connections, each closes after its answer */
  size_t inflight;                /* requests answered later (creates, execs, ...) */
  struct fr_exec_budget exec_budget; /* all execs' buffered output (limits.exec_output_budget_bytes) */
  struct fr_adapter_agent agent;  /* the config's agent group, for the adapters (image NULL: none) */
  struct tenant_state **tenants;  /* tenants.c: one per configured tenant, or one "local" */
  size_t ntenants;
  struct reload *reload;          /* reload.c: the config's reloads */
  struct queue *queue;            /* queue.c: creates waiting for room */
  struct execwait *execwait;      /* execwait.c: execs waiting for a slot */
  /* Requests in flight to sandboxes' ports, by id (ports.c). */
  struct port_inflight *port_inflight[PORTS_INFLIGHT_BUCKETS];
  int64_t port_tunnels;           /* upgraded connections to them open (porttunnel.c) */

  struct metrics *metrics;
  struct history *history;        /* history.c: the in-memory history (NULL only when out of memory) */
  struct promq_client *prom;      /* promq.c: metrics.prometheus_url's client, or NULL */
  /* Recent spillover events for the dashboard (ring, newest at next-1). */
  struct router_event {
    int64_t t_ms;
    char cluster[64];
    char reason[240];
    char request_id[64];
    char tenant[64];              /* whose request it was: /v1/events shows a tenant its own */
  } events[64];
  size_t nevents, next_event;

  /* placement.c */
  struct fr_policy *policy;       /* current; requests take their own reference */
  int64_t policy_loaded_at;
  char policy_error[1100];        /* last rejected reload, "" if none since */
  int64_t policy_error_at;
  uint64_t policy_reloads, policy_reload_failures;
  json_t *policy_warnings;
  int policy_reloading, policy_reload_again;
  uv_fs_poll_t *policy_poll;
  char **cluster_names, **cluster_regions; /* NULL-terminated, borrowed from cfg */
};

/* Cost of a cluster in dollars per hour (docs/metrics.md): its running
 * sandboxes now, every default-shape slot filled, and the hosted price of
 * the running sandboxes, from the cluster's current view <v>. Zeros where
 * no price is configured. */
struct router_cost {
  double now, capacity, hosted;
  int known;                      /* the cluster has a price */
};
void router_cluster_cost(struct router *r, size_t i, const struct fr_adapter_view *v, struct router_cost *out);
/* Records a spillover event (a cluster answered no room and the batch moved
 * on) of <tenant>'s request <request_id>. */
void router_event(struct router *r, const char *cluster, const char *reason, const char *request_id,
                  const char *tenant);
/* Appends ,"key":"value" (JSON-escaped) to req->note for the access log. */
void router_note(struct fr_http_req *req, const char *key, const char *value);
/* The tenant whose token is the bearer token of <req>, or NULL (no
 * answer is made). */
const char *router_tenant_of_bearer(struct router *r, const struct fr_http_req *req);


/* Loads the policy named by the config (or the built-in one) at start-up
 * and watches the file. 0, or -EINVAL after printing the file:line error. */
int placement_init(struct router *r);
/* Reloads the policy file on the thread pool; the swap happens on the loop. */
void placement_reload(struct router *r);
/* Stops watching the file (shutdown), then frees the policy state. */
void placement_close(struct router *r);
void placement_free(struct router *r);
/* Snapshot of every cluster for a request of <spec>'s shape and pool, in
 * adapter order; caller frees. NULL on out-of-memory. */
struct fr_cluster_state *placement_states(struct router *r, const struct fr_sandbox_spec *spec);
/* Answers GET /v1/policy. */
void placement_policy_json(struct router *r, struct fr_http_req *req, const char *rid);

/* api.c: answers {"error":{"code":<code>,"message":<message>}} with <status>;
 * <extra_headers> is NULL or "Name: value\r\n" lines. */
void router_error(struct fr_http_req *req, int status, const char *code, const char *message,
                  const char *extra_headers);

#endif
