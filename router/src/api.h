/* api.h - the request record of the v1 API and the helpers every handler
 * file shares (sandboxes.c, create.c, exec.c, pools.c, data.c, e2b.c).
 *
 * Ownership: router_handle() makes one struct api_req per request, puts it
 * in req->data for the whole request, and holds one reference while the
 * handler runs. A handler that answers later calls api_defer(), which takes
 * a second reference for the operation; its one finish path is api_reply()
 * (or api_fail()), which answers the client if it is still there and drops
 * that reference. A handler that answers at once just calls api_reply()
 * before returning. So nobody frees a request record by hand.
 */
#ifndef FR_ROUTER_API_H
#define FR_ROUTER_API_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct router;
struct tenant_state;
struct fr_config;
struct fr_http_req;
struct fr_adapter;
struct fr_pod;
struct fr_workspace;

struct api_req {
  struct router *r;
  struct fr_http_req *req;      /* NULL once answered or the client is gone */
  char rid[129];                /* request id (X-Request-Id) */
  char tenant[64];              /* "" until authenticated */
  struct tenant_state *ts;      /* its limits and counts, a reference; NULL until authenticated */
  struct fr_config *cfg;        /* the config snapshot the request started with, a reference */
  int refs;
  int deferred;                 /* api_defer() was called and not finished yet */
  int streaming;                /* api_stream_begin() sent the head */
  int resumed;                  /* runs again after its paused sandbox was resumed (workspaces.c) */
  /* Runs the request again from the top (set by whoever dispatched it:
   * the route table, host routing), for a call that waited on a resume. */
  void (*rerun)(struct api_req *q);
  /* Called once if the client goes away before the finish (deferred
   * requests only): the operation stops and finishes itself. */
  void (*gone_cb)(struct api_req *q, void *arg);
  void *gone_arg;
  /* Set by an endpoint with its own wire shape (e2b.c): rewrites every
   * JSON answer before it goes out (it may change *<status>; it takes
   * <body> and returns the body to send, NULL for none). */
  json_t *(*shape_cb)(struct api_req *q, int *status, json_t *body);
  int shape_kind;               /* for shape_cb: what the request was */
  /* Set by fork.c before a create (a fork, a create's restore_from): the
   * create's 201 answer goes to it (taken) instead of the client, once;
   * NULL when the create failed after it was deferred (it answered). */
  void (*created_cb)(struct api_req *q, json_t *answer, void *arg);
  void *created_arg;
};

/* The record of <req> (req->data); every request of the router has one. */
struct api_req *api_req_of(struct fr_http_req *req);
/* Makes the record for <req> with request id <rid> (copied) and puts it in
 * req->data, holding one reference. NULL on out of memory. */
struct api_req *api_req_new(struct router *r, struct fr_http_req *req, const char *rid);
void api_req_unref(struct api_req *q);

/* The request belongs to tenant <name> from now on: q->tenant, and a
 * reference to its record in q->ts (NULL when the table has none). */
void api_set_tenant(struct api_req *q, const char *name);

/* The answer comes later: takes a reference for the operation, counts the
 * request in flight (the drain waits for it) and notices a client that
 * goes away. */
void api_defer(struct api_req *q);
/* Ends a deferral without answering (a wait that hands the request back
 * to its handler, which may defer it again): the request no longer counts
 * in flight and hears no more of a client going away, and the operation's
 * reference passes to the caller, who drops it with api_req_unref(). */
void api_undefer(struct api_req *q);
/* Answers <status> with <body> (taken; NULL = none) and <extra> headers
 * ("Name: value\r\n" lines or NULL) if the client is still there; for a
 * deferred request this is its finish: the operation's reference goes. */
void api_reply(struct api_req *q, int status, json_t *body, const char *extra);
/* A streamed answer: sends the head (<status>, <content_type>, <length>
 * as fr_http_stream_begin_length() takes it, <extra> header lines or NULL)
 * if the client is still there; 0, or -EPIPE when it is gone. */
int api_stream_begin(struct api_req *q, int status, const char *content_type, const char *extra, int64_t length);
/* The finish of a deferred, streamed request: ends the stream (<ok> 0:
 * drops the connection instead, so a cut answer never looks complete) and
 * drops the operation's reference. */
void api_stream_end(struct api_req *q, int ok);
/* Answers <status> with <len> bytes of <body> (borrowed) of <content_type>
 * as they are, past shape_cb: an answer relayed from a sandbox's agent. */
void api_reply_raw(struct api_req *q, int status, const char *content_type, const void *body, size_t len);
/* {"error":{"code":<code>,"message":<msg>}}. */
json_t *api_err_body(const char *code, const char *msg);
void api_fail(struct api_req *q, int status, const char *code, const char *msg, const char *extra);
/* 429 tenant_limit body naming the <limit> (a config key) that was hit. */
json_t *api_limit_body(const char *msg, const char *limit);
/* 400 invalid_field naming <field>. */
void api_field_fail(struct api_req *q, const char *field, const char *msg);
/* The longest lifetime the tenant of <q> may give a sandbox (its
 * max_lifetime_s, else the config's sandbox.max_lifetime_s). */
int64_t api_max_lifetime(const struct api_req *q);
/* 503 out_of_memory. */
void api_oom(struct api_req *q);

/* The request body as a JSON object whose keys are all in <known>
 * (NULL-terminated); NULL after answering invalid_json / invalid_field. */
json_t *api_body_object(struct api_req *q, const char *const *known, size_t flags);

/* Pool <name> was not found: answers 503 not_synced (Retry-After: 1) when
 * some cluster's pool cache has not finished its first list (a fresh
 * replica must not call an existing pool missing: the E2B SDK takes 404 as
 * final), else 404 pool_not_found. */
void api_pool_missing(struct api_req *q, const char *name);

/* The four characters [a-z0-9] that stand for cluster <name> in short
 * sandbox ids (ports.c): from the SHA-256 of the name, so every replica
 * agrees; NULL for a cluster the router does not have. */
const char *api_cluster_code(struct router *r, const char *name);
/* The cluster whose code is <code>, or NULL. */
const char *api_cluster_of_code(struct router *r, const char *code);
/* <id> ("<cluster>.<pod>", or its short form "<pod'>-<code>") as
 * "<cluster>.<pod>" into <out>; 0, or -1 when it is neither. */
int api_canonical_id(struct router *r, const char *id, char *out, size_t cap);

/* The adapter named <name>, or NULL. */
struct fr_adapter *api_adapter(struct router *r, const char *name);
/* A claimed sandbox of <tenant>? Warm pool pods and other tenants' pods are
 * invisible. */
int api_owned_by(const struct fr_pod *pod, const char *tenant);
/* May the tenant of <q> use pool record <pv> (its own, or shared)? */
struct fr_adapter_pool_view;
int api_pool_usable(const struct api_req *q, const struct fr_adapter_pool_view *pv);
/* The sandbox as the API shows it; <detail> (one sandbox, to its owner)
 * adds its traffic token, the ports domain and its public ports. */
json_t *api_sandbox_json(struct router *r, struct fr_adapter *a, const struct fr_pod *pod, int detail);
/* Is <pod> still a sandbox to show? Not once it is on its way out
 * (fr_adapter_pod_leaving), except while the cluster evicts it
 * (fr_adapter_pod_evicted): then it shows as "evicted" until it is gone. */
int api_sandbox_visible(struct fr_adapter *a, const struct fr_pod *pod);
/* network.c: the `network` object <net> of a create body (borrowed; NULL
 * or null: absent) over the tenant's default <base> (NULL: the default).
 * *<out> gets NULL when the result restricts nothing, else a new
 * normalized record (the caller frees it). Answers 400 invalid_network
 * (field, value) or 503 and returns -1 on bad input. */
struct fr_egress;
int network_parse(struct api_req *q, json_t *net, const struct fr_egress *base, struct fr_egress **out);
/* <e> (NULL: the default) as {"allow_internet", "allow_out", "deny_out"}. */
json_t *network_json(const struct fr_egress *e);
/* sandbox_view.c: {"path","size","storage_class"} of workspace <w>. */
json_t *workspace_json(const struct fr_workspace *w);

/* The user's labels of <pod> (fedrouter.io/ ones left out) as an object. */
json_t *api_labels_json(const struct fr_pod *pod);
/* RFC 3339 UTC time of <s> (unix seconds), null when < 0. */
json_t *api_time_json(int64_t s);
/* "<cluster>.<pod>" -> the adapter and the cached pod, owned by the
 * request's tenant and visible (api_sandbox_visible). Answers 400/404 itself and
 * returns NULL when there is none; 503 not_synced (Retry-After) when the
 * pod is not in the cache because the cluster's first list is not done. */
const struct fr_pod *api_find_sandbox(struct api_req *q, const char *id, struct fr_adapter **out_a);
/* api_find_sandbox for calls into the sandbox (exec, processes, files, the
 * E2B relay): also answers 503 sandbox_unreachable (Retry-After) and
 * returns NULL when the sandbox's node is not Ready, rather than sending the
 * call to a node that cannot answer. */
const struct fr_pod *api_find_reachable_sandbox(struct api_req *q, const char *id, struct fr_adapter **out_a);

/* Checks the optional "cpus" and "memory_gb" of <j> and puts them, in
 * millicores and bytes, into *<cpu_m> / *<mem_b> (untouched when absent).
 * An amount that rounds to nothing (under 1 millicore or 1 MiB: a pod
 * with requests "0" is unmetered) or past the bounds is refused: 0, or -1
 * after answering 400 invalid_field. */
int api_body_resources(struct api_req *q, json_t *j, int64_t *cpu_m, int64_t *mem_b);
/* A container image reference: 1-512 characters of [A-Za-z0-9._/:@-],
 * starting with a letter or digit; else answers 400 invalid_field "image"
 * and returns -1. */
int api_image_check(struct api_req *q, const char *image);

/* The body's "argv" as a NULL-terminated array borrowing its strings, or
 * NULL after answering invalid_argv / out_of_memory (exec.c). */
char **api_body_argv(struct api_req *q, json_t *argv);
/* The body's "env" (object of strings) and "workdir" (absolute), borrowed
 * from <j> (NULL when absent); -1 after answering invalid_field. */
int api_body_env_workdir(struct api_req *q, json_t *j, json_t **env, const char **workdir);

/* The handler files' entry points (each answers now or later). */
void create_sandboxes(struct api_req *q, int explain); /* create.c: POST /v1/sandboxes, explain */
/* The same for a body already parsed into <j> (taken, even on failure),
 * as another endpoint builds it (e2b.c): same checks, placement and answer.
 * <extendable>: the pods' deadline in the cluster is sandbox.max_lifetime_s
 * rather than the lifetime asked, so the expiry can later be moved up to
 * that (E2B's setTimeout) while routers enforce the one asked. */
void create_sandboxes_from(struct api_req *q, json_t *j, int explain, int extendable);
/* create_sandboxes_from for a body another endpoint built from a client's
 * fields (fork.c): its keys are checked as POST /v1/sandboxes checks them
 * (400 invalid_field). Takes <j>. */
void create_sandboxes_checked(struct api_req *q, json_t *j);
/* fork.c: POST /v1/sandboxes/{id}/fork; a create's restore_from: checked,
 * the source found (answers and returns -1 otherwise), the field removed
 * and q->created_cb set (0; also when there is none); after the create
 * call, restore_from_settle() lets go of it if the create answered at
 * once. */
int restore_from_prepare(struct api_req *q, json_t *j);
void restore_from_settle(struct api_req *q);
/* stream.c: a streaming exec (exec.c validated it and admitted it against
 * the tenant's max_concurrent_execs; the stream counts itself in the
 * tenant's execs while it runs). */
struct fr_exec_spec;
void data_exec_stream(struct api_req *q, struct fr_adapter *a, const char *id, const struct fr_exec_spec *spec);
/* files.c: the request <q> as it came (method, body, the header lines
 * <headers> as fr_agent_call_opts takes them) to <agent_path> (an agent
 * route and query) of the agent of sandbox <id>, and the agent's answer
 * back as it is (status, type, body), streamed both ways with
 * backpressure; a streamed body is bounded by the tenant's max_file_bytes. */
void data_proxy(struct api_req *q, struct fr_adapter *a, const char *id, const char *agent_path,
                const char *headers);
/* files.c: the request <q> as it came to port <port> of sandbox <id>
 * (<path_query>: what its server gets, checked as fr/urlsafe.h says;
 * <headers>: the request headers to pass, '\n'-separated), and the
 * server's answer back as it is: status, headers (not hop-by-hop), body,
 * streamed both ways with backpressure. Nothing listening: 502
 * port_not_open. <done>(<done_arg>) runs exactly once when the call is
 * over, also when it could not start (the request is answered then). */
void data_proxy_port(struct api_req *q, struct fr_adapter *a, const char *id, int port, const char *path_query,
                     const char *headers, void (*done)(void *arg), void *done_arg);

/* The route handlers of routes.c's table, by file. Each gets the parsed
 * path parameters (routes.h) and answers now or later. */
struct route_params;
struct route;
/* router.c */
void router_get_healthz(struct api_req *q, const struct route_params *p);
void router_get_readyz(struct api_req *q, const struct route_params *p);
void router_get_metrics(struct api_req *q, const struct route_params *p);
void router_get_dashboard(struct api_req *q, const struct route_params *p);
void router_get_clusters(struct api_req *q, const struct route_params *p);
void router_get_events(struct api_req *q, const struct route_params *p);
void router_get_policy(struct api_req *q, const struct route_params *p);
void router_get_config(struct api_req *q, const struct route_params *p);
void router_get_queue(struct api_req *q, const struct route_params *p);
/* secrets_api.c */
void secrets_list(struct api_req *q, const struct route_params *p);
void secrets_put(struct api_req *q, const struct route_params *p);
void secrets_delete(struct api_req *q, const struct route_params *p);
/* sandboxes.c */
void sandboxes_explain(struct api_req *q, const struct route_params *p);
void sandboxes_create(struct api_req *q, const struct route_params *p);
void sandboxes_list(struct api_req *q, const struct route_params *p);
void sandboxes_terminate_many(struct api_req *q, const struct route_params *p);
void sandboxes_get(struct api_req *q, const struct route_params *p);
void sandboxes_terminate(struct api_req *q, const struct route_params *p);
/* workspaces.c: pause and resume of sandboxes with a workspace */
void sandboxes_pause(struct api_req *q, const struct route_params *p);
void sandboxes_resume(struct api_req *q, const struct route_params *p);
/* workspaces.c: a sandbox's expiry moved later, within the tenant's max_lifetime_s */
void sandboxes_keepalive(struct api_req *q, const struct route_params *p);
/* create.c: N new sandboxes with directories of this one streamed in:
 * fork_prepare() (fork.c) checks the body and makes the create's, whose
 * end copies the directories in (q->created_cb); 0, or -1 after
 * answering. */
void sandboxes_fork(struct api_req *q, const struct route_params *p);
int fork_prepare(struct api_req *q, const struct route_params *p, json_t **out);
/* exec.c */
void exec_sandbox(struct api_req *q, const struct route_params *p);
/* procs.c, stream.c */
void procs_start(struct api_req *q, const struct route_params *p);
void procs_list(struct api_req *q, const struct route_params *p);
void procs_output(struct api_req *q, const struct route_params *p);
void procs_stdin(struct api_req *q, const struct route_params *p);
void procs_signal(struct api_req *q, const struct route_params *p);
void procs_resize(struct api_req *q, const struct route_params *p);
/* files.c */
void files_get(struct api_req *q, const struct route_params *p);
void files_put(struct api_req *q, const struct route_params *p);
void files_delete(struct api_req *q, const struct route_params *p);
/* GET .../snapshot and POST .../restore: a directory as tar, both ways */
void snapshot_get(struct api_req *q, const struct route_params *p);
void snapshot_restore(struct api_req *q, const struct route_params *p);
/* ports.c: a sandbox's own ports (preview URLs). */
void ports_path(struct api_req *q, const struct route_params *p);
/* Host: <port>-<short id>.<ports.domain>: 1 when the request is for a
 * sandbox's port (answered now or later), 0 when it is not (nothing
 * answered). */
int ports_host(struct api_req *q);
/* E2B's call to <port> (not envd's) of sandbox <id> (canonical; <a>,
 * <pod> found, its access token checked). */
void ports_e2b(struct api_req *q, struct fr_adapter *a, const struct fr_pod *pod, const char *id, int port);
/* The short id of <pod> of <cluster> (one DNS label of at most 57
 * characters) into <out>; 0, or -1 when it has none. */
int ports_short_id(struct router *r, const char *cluster, const char *pod, char *out, size_t cap);
/* The sandbox's traffic token (64 hex + NUL) for id <id> (canonical):
 * what E2B calls trafficAccessToken; -1 without an agent key. */
int ports_traffic_token(const struct router *r, const char *id, char out[65]);
/* The public-ports label value <v> ("all", "8000.8080") as the API shows
 * it: "*" or [8000, 8080]. */
json_t *ports_public_json(const char *v);
/* May <req> reach <port> of sandbox <id> (canonical) on <pod> without the
 * owner's credentials: the port is public on it, or the request carries
 * its traffic token (E2B-Traffic-Access-Token or X-Traffic-Token)? */
int ports_traffic_ok(const struct router *r, const struct fr_http_req *req, const char *id, const struct fr_pod *pod,
                     int port);
/* The same with the public ports given as label value <public> (NULL:
 * none), for a paused sandbox (its spec's labels). */
int ports_traffic_ok_label(const struct router *r, const struct fr_http_req *req, const char *id, const char *public,
                           int port);
/* pools.c */
void pools_create(struct api_req *q, const struct route_params *p);
void pools_list(struct api_req *q, const struct route_params *p);
void pools_get(struct api_req *q, const struct route_params *p);
void pools_patch(struct api_req *q, const struct route_params *p);
void pools_delete(struct api_req *q, const struct route_params *p);
/* history.c, usage.c: capacity, creates and spend over time (docs/api.md) */
void history_get(struct api_req *q, const struct route_params *p);
void usage_get(struct api_req *q, const struct route_params *p);
/* e2b.c: the E2B-compatible endpoint under /e2b (docs/e2b.md). e2b_begin
 * runs before any of its handlers: its answer shapes, X-API-Key, and for
 * calls into a sandbox (E2b-Sandbox-Id) the split from the control API;
 * 0, or -1 after answering. */
int e2b_begin(struct api_req *q, const struct route *r);
void e2b_create(struct api_req *q, const struct route_params *p);
void e2b_list(struct api_req *q, const struct route_params *p);
void e2b_get(struct api_req *q, const struct route_params *p);
void e2b_kill(struct api_req *q, const struct route_params *p);
void e2b_timeout(struct api_req *q, const struct route_params *p);
void e2b_connect(struct api_req *q, const struct route_params *p);
void e2b_pause(struct api_req *q, const struct route_params *p);
void e2b_resume(struct api_req *q, const struct route_params *p);
void e2b_no_snapshots(struct api_req *q, const struct route_params *p);
void e2b_no_templates(struct api_req *q, const struct route_params *p);
void e2b_no_volumes(struct api_req *q, const struct route_params *p);
void e2b_unsupported(struct api_req *q, const struct route_params *p);
void e2b_relay_process(struct api_req *q, const struct route_params *p);
void e2b_relay_filesystem(struct api_req *q, const struct route_params *p);
void e2b_relay_files(struct api_req *q, const struct route_params *p);
void e2b_relay_health(struct api_req *q, const struct route_params *p);
void e2b_relay_envs(struct api_req *q, const struct route_params *p);

#endif
