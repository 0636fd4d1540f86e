/* sandbox.h - sandboxes and warm pools in one cluster (sandbox.c): claims,
 * cold creates, deletes, expiry, pool ReplicaSets and the reaper.
 *
 * Above cluster.c (the caches, the breaker, the capacity counts), commit.c
 * (the reaper's commit rule), workspace.c (the sandboxes' own claims),
 * egress.c (a create's egress policy) and agent.c (/init); called by
 * adapter.c, which forwards the public fr_adapter_sandbox_* (create,
 * delete, pause, resume, expiry), fr_adapter_pod_* and fr_adapter_pool_*
 * calls here and feeds it the cluster's hooks.
 */
#ifndef FR_SANDBOX_H
#define FR_SANDBOX_H

#include <jansson.h>
#include <stdint.h>

#include "fr/adapter.h"
#include "fr/informer.h"

struct cluster;
struct commits;
struct egresses;
struct sandboxes;
struct workspaces;

/* NULL when out of memory. <cl>, <cm>, <ws> and <eg> are borrowed and
 * outlive it. */
struct sandboxes *sandbox__new(struct cluster *cl, struct commits *cm, struct workspaces *ws,
                              struct egresses *eg);
/* Starts the reaper. */
void sandbox__start(struct sandboxes *sb);
/* Fails every create in flight (adapter going away) and closes the
 * reaper; calls that are not answered yet go on, without consequences
 * (a failed delete is not retried). */
void sandbox__stop(struct sandboxes *sb);
/* After sandbox__stop() and once no call of the cluster's client can
 * answer any more (the client is freed). Accepts NULL. */
void sandbox__free(struct sandboxes *sb);
/* The reaper's queue: its entries, and the bytes of the pages holding
 * their pod names (fr_adapter_cache_stats). */
void sandbox__due_stats(const struct sandboxes *sb, size_t *entries, size_t *name_bytes);

/* The cluster's hooks. Every change of the sandbox pod cache (cluster.h,
 * struct cluster_hooks): wakes the creates waiting for their pods, moves
 * the reaper's due times. */
void sandbox__on_pod(struct sandboxes *sb, enum fr_informer_event ev, const struct fr_pod *p,
                     const struct fr_pod *old);
/* The breaker opened: creates waiting for their pods give up now, so their
 * batches move on instead of waiting for the cluster to come back. */
void sandbox__cluster_down(struct sandboxes *sb);

/* fr_adapter_sandbox_create, _delete (with its workspace), _set_expiry; fr_adapter_pod_leaving,
 * _delete_pending, _evicted; fr_adapter_pool_create, _resize, _delete
 * (fr/adapter.h says what they do). */
int sandbox__create(struct sandboxes *sb, const struct fr_sandbox_spec *spec, fr_sandbox_cb cb, void *arg);
int sandbox__delete(struct sandboxes *sb, const char *pod, const char *request_id,
                    void (*cb)(int status, const char *message, void *arg), void *arg);
/* fr_adapter_sandbox_pause, fr_adapter_sandbox_resume. */
int sandbox__pause(struct sandboxes *sb, const char *pod, int64_t expires_s, const char *request_id,
                   void (*cb)(int status, const char *message, void *arg), void *arg);
int sandbox__resume(struct sandboxes *sb, const char *pod, json_t *secrets, int64_t lifetime_s,
                    const char *request_id, fr_sandbox_cb cb, void *arg);
int sandbox__set_expiry(struct sandboxes *sb, const char *pod, int64_t expires_s, const char *request_id,
                        void (*cb)(int status, const char *message, void *arg), void *arg);
int sandbox__leaving(const struct sandboxes *sb, const struct fr_pod *pod);
int sandbox__delete_pending(const struct sandboxes *sb, const struct fr_pod *pod);
int sandbox__evicted(const struct sandboxes *sb, const struct fr_pod *pod);
int sandbox__pool_create(struct sandboxes *sb, const struct fr_pool_spec *spec,
                         void (*cb)(int status, const char *message, void *arg), void *arg);
int sandbox__pool_resize(struct sandboxes *sb, const char *pool, int64_t replicas,
                         void (*cb)(int status, const char *message, void *arg), void *arg);
int sandbox__pool_delete(struct sandboxes *sb, const char *pool,
                         void (*cb)(int status, const char *message, void *arg), void *arg);

#endif
