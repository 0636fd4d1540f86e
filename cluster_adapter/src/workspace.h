/* workspace.h - the sandboxes' own PersistentVolumeClaims (workspace.c):
 * the claim a create with option "workspace" makes, its volume in a pod or
 * a pool's template, the claim marked paused or running, the listing of
 * workspaces from the claim cache, and the sweep of claims nothing holds.
 *
 * Above cluster.c (client, claim cache, sandbox pod cache, breaker);
 * called by sandbox.c (creates, deletes, pause, resume, the reaper's sweep)
 * and adapter.c (fr_adapter_workspace, _next, _workspaces_synced).
 */
#ifndef FR_WORKSPACE_H
#define FR_WORKSPACE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "fr/adapter.h"

struct cluster;
struct workspaces;

/* A pool's workspace claim is "<pod>" WORKSPACE_POOL_SUFFIX, made by the
 * cluster with each pod (a generic ephemeral volume, owned by the pod until
 * a claim adopts it). */
#define WORKSPACE_POOL_SUFFIX "-fr-workspace"

/* NULL when out of memory. <cl> is borrowed and outlives it. */
struct workspaces *workspace__new(struct cluster *cl);
/* Accepts NULL. The calls it sent answer into nothing of it. */
void workspace__free(struct workspaces *ws);

/* The claim of a cold create's sandbox pod <pod>: "<pod>-ws" into <out>;
 * 0 or -ENAMETOOLONG. */
int workspace__claim_name(const char *pod, char *out, size_t cap);
/* fr_adapter_workspace, fr_adapter_workspace_next,
 * fr_adapter_workspaces_synced (fr/adapter.h). */
int workspace__get(struct workspaces *ws, const char *pod, struct fr_workspace *out);
int workspace__next(struct workspaces *ws, void **cursor, struct fr_workspace *out);
int workspace__synced(const struct workspaces *ws);
/* 1 if the claim cache holds the workspace claim of <pod>. */
int workspace__known(struct workspaces *ws, const char *pod);
/* The POST of the workspace claim of <pod> for options <opts> (its
 * "workspace" field), labelled with <tenant>, <name>, <pool> (may be NULL)
 * and <batch> (may be NULL), annotated with <spec> (fedrouter.io/
 * sandbox-spec, borrowed: what a resume needs): its body (*<body>,
 * malloc'd) and path. 0, -EINVAL (no workspace) or -ENOMEM. */
int workspace__claim_request(struct workspaces *ws, const char *pod, const struct fr_podopts *opts,
                             const char *tenant, const char *name, const char *pool, const char *batch, json_t *spec,
                             char **body, char *path, size_t cap);
/* DELETEs the workspace claim of <pod> (by the name the cache knows, else
 * "<pod>-ws"). As cluster__request otherwise. */
int workspace__claim_delete(struct workspaces *ws, const char *pod, const char *request_id,
                            void (*cb)(int status, const char *message, void *arg), void *arg);
/* Marks the workspace claim of <pod> paused until <expires_s> (unix
 * seconds): label fedrouter.io/state=paused, annotations paused-at and
 * expires-at. <cb> as for cluster__request. -ENOENT (no workspace claim),
 * -EINVAL, -ENOMEM. */
int workspace__mark_paused(struct workspaces *ws, const char *pod, int64_t expires_s, const char *request_id,
                           void (*cb)(int status, const char *message, void *arg), void *arg);
/* Marks the workspace claim of <pod> running again (nobody hears the
 * answer: a claim left marked paused while its pod runs lists as
 * running, the pod wins). */
void workspace__mark_running(struct workspaces *ws, const char *pod);
/* Adds the workspace volume and mount of <opts> to pod spec <spec>: the
 * claim <claim> (NULL: "<pod>-ws", a cold create's); 0 (also when there
 * is nothing to add), -EINVAL or -ENOMEM. */
int workspace__pod_apply(const struct fr_podopts *opts, const char *claim, const char *pod, json_t *spec);
/* A pool's pod template: the workspace of <opts> as a generic ephemeral
 * volume (WORKSPACE_POOL_SUFFIX). 0, -EINVAL or -ENOMEM. */
int workspace__pool_apply(const struct fr_podopts *opts, json_t *spec);
/* From the reaper: deletes workspace claims whose sandbox is gone and that
 * are not paused (made by a create that died, or left by a pod the cluster
 * removed), and paused ones past their expiry. Only with a complete,
 * current view of both caches and a closed breaker. */
void workspace__sweep(struct workspaces *ws);

#endif
