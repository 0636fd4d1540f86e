/* fake_kube.h - a small scripted Kubernetes API server for unit tests of the
 * cluster adapter, on the test's own libuv loop (the project's HTTP core,
 * fr/http.h), plain HTTP on 127.0.0.1:0 with a bearer token.
 *
 * It serves what the adapter's informers and probe ask for: GET /version;
 * list and watch of the sandbox pods in namespace "default" (the only pods
 * it keeps; all of them count as fedrouter.io/sandbox=true), of the
 * cluster-wide pods (always empty), the ReplicaSets and ResourceQuotas
 * (empty), the ConfigMaps (fk_add_configmap; create, merge-patch and delete
 * too, never on a watch) and the nodes (one ready node with room). Pods can be created
 * (POST), merge-patched (PATCH, honouring a metadata.resourceVersion
 * precondition with 409) and deleted (DELETE); every change gets the next
 * resourceVersion and goes out on the pod watches as one JSON line.
 *
 * What a test scripts:
 *   - fk_script(): the next N requests of a method get a given status (with
 *     a Kubernetes Status body), or are held unanswered (FK_HOLD) until the
 *     test answers them with fk_answer_held();
 *   - fk_pause_watch(): changes are kept back from the pod watches (a lagging
 *     watch) until unpaused; fk_send_raw() pushes any event line regardless;
 *   - fk_set_down(): every new request gets 503 (an apiserver that lost
 *     etcd, or a broken load balancer); open watches stay open.
 * Every request is logged (method, path, query, body, status) for asserts.
 *
 * Loop thread only. Not a model of Kubernetes: no selectors beyond what the
 * adapter sends, no watch history limit, no deletion grace.
 */
#ifndef FAKE_KUBE_H
#define FAKE_KUBE_H

#include <jansson.h>
#include <stddef.h>
#include <uv.h>

#define FK_NS "default"
#define FK_TOKEN "fake-kube-token"
#define FK_PODS "/api/v1/namespaces/" FK_NS "/pods"
/* Scripted status: keep the request unanswered (see fk_answer_held). */
#define FK_HOLD 0

struct fake_kube;

/* One request as the fake saw it (strings owned by the fake). */
struct fk_request {
  char *method;
  char *path;       /* decoded, without the query */
  char *query;
  char *body;       /* "" when none */
  int status;       /* what it answered; 0 while held or if never answered */
};

/* Listens on 127.0.0.1:0 and writes <dir>/kubeconfig (server, token). */
int fk_new(uv_loop_t *loop, const char *dir, struct fake_kube **out);
/* Path of the kubeconfig fk_new wrote (borrowed). */
const char *fk_kubeconfig(const struct fake_kube *fk);
/* Drops every watch and held request and closes the server; <cb> runs once
 * everything is closed (from a later loop turn). Accepts NULL. */
void fk_free(struct fake_kube *fk, void (*cb)(void *arg), void *arg);

/* ---- objects ---- */

/* A ready warm pool pod (state=warm, pool=<pool>, Running, Ready, on node-1). */
json_t *fk_warm_pod(const char *name, const char *pool);
/* A running sandbox (state=claimed, tenant=<tenant>, name=<sbname>). */
json_t *fk_sandbox_pod(const char *name, const char *tenant, const char *sbname);
/* Stores <pod> (taken) with the next resourceVersion and publishes ADDED. */
void fk_add_pod(struct fake_kube *fk, json_t *pod);
/* The stored pod, or NULL (borrowed; valid until the next change). */
json_t *fk_pod(const struct fake_kube *fk, const char *name);
/* The stored pod's resourceVersion as text, or "" when there is none. */
const char *fk_pod_rv(const struct fake_kube *fk, const char *name);
/* Applies JSON merge patch <merge> (RFC 7386) to pod <name> and publishes
 * MODIFIED. Returns 0, or -1 when the pod or the patch is bad. */
int fk_pod_merge(struct fake_kube *fk, const char *name, const char *merge);

/* Removes pod <name> at once and publishes DELETED (someone else deleted
 * it). Returns 0, or -1 when there is no such pod. */
int fk_pod_delete(struct fake_kube *fk, const char *name);
/* Stores Secret <name> with <data> (key -> base64 value, borrowed), served
 * to GET .../secrets/<name>; other names get 404. */
void fk_add_secret(struct fake_kube *fk, const char *name, json_t *data);

/* Stores ConfigMap <cm> (taken) with the next resourceVersion; it is
 * listed, never sent on a watch. */
void fk_add_configmap(struct fake_kube *fk, json_t *cm);
/* The stored ConfigMap, or NULL (borrowed). */
json_t *fk_configmap(const struct fake_kube *fk, const char *name);

/* ---- watch control ---- */

/* While paused, changes are recorded but not sent; unpausing sends them. */
void fk_pause_watch(struct fake_kube *fk, int paused);
/* Sends {"type":<type>,"object":<obj>} to every pod watch now, paused or
 * not, without storing anything (<obj> borrowed): a replayed or stale event. */
void fk_send_raw(struct fake_kube *fk, const char *type, json_t *obj);
/* Number of pod watches open now. */
int fk_pod_watches(const struct fake_kube *fk);

/* ---- scripting ---- */

/* The next <count> requests with <method> (any path; count < 0: all from
 * now on) are answered <status> with a Status whose message is <message>
 * instead of the default behaviour, or held when <status> is FK_HOLD.
 * Scripts are consulted in the order they were added. */
void fk_script(struct fake_kube *fk, const char *method, int count, int status, const char *message);
/* The same for requests whose path starts with <path_prefix>. */
void fk_script_path(struct fake_kube *fk, const char *method, const char *path_prefix, int count, int status,
                    const char *message);
/* Forgets every script. */
void fk_script_clear(struct fake_kube *fk);
/* <down>: every new request is answered 503 (logged with that status). */
void fk_set_down(struct fake_kube *fk, int down);
/* Held requests (still connected), oldest first. */
size_t fk_held(const struct fake_kube *fk);
const struct fk_request *fk_held_request(const struct fake_kube *fk);
/* Answers the oldest held request <status> with a Status of <message>;
 * 0, or -1 when none is held. */
int fk_answer_held(struct fake_kube *fk, int status, const char *message);

/* ---- the request log ---- */

/* Requests with <method> whose path starts with <path_prefix> (NULL: any). */
int fk_count(const struct fake_kube *fk, const char *method, const char *path_prefix);
/* The <n>-th (0-based) of those, or NULL. */
const struct fk_request *fk_nth(const struct fake_kube *fk, const char *method, const char *path_prefix,
                                int n);

#endif
