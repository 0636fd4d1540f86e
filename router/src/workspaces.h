/* workspaces.h - sandboxes with a workspace (workspaces.c): pause,
 * resume, paused sandboxes in lists and lookups. */
#ifndef FR_ROUTER_WORKSPACES_H
#define FR_ROUTER_WORKSPACES_H

#include <stdint.h>

#include <jansson.h>

struct api_req;
struct router;
struct fr_adapter;
struct fr_workspace;
struct route_params;

/* The user's labels of a paused sandbox (fedrouter.io/ ones left out), a
 * new object; and one of its labels at create (fedrouter's too), or NULL. */
json_t *workspace_user_labels(const struct fr_workspace *w);
const char *workspace_spec_label(const struct fr_workspace *w, const char *key);
/* A paused sandbox as the API shows it (state "paused"). */
json_t *workspace_paused_json(struct fr_adapter *a, const struct fr_workspace *w);
/* 1 if <pod> is a visible sandbox pod of <a> (running, starting, evicted). */
int workspace_live_pod(struct fr_adapter *a, const char *pod);
/* Sandbox <id> is one of the tenant of <q>'s paused sandboxes (its claim
 * marked paused, no pod): 1 with <w> filled (fr_workspace_clear it) and
 * <a> set, else 0 (nothing answered; <a> set when the id names a cluster). */
int workspace_find_paused(struct api_req *q, const char *id, struct fr_adapter **a, struct fr_workspace *w);
/* A call into sandbox <id> (any form) when it is paused, was created with
 * auto_resume and is the caller's (the tenant of <q>, or for an E2B call
 * the holder of its access token): resumes it, or joins the resume
 * already running, and returns 1; <q> is then deferred and <rerun>(q)
 * runs it again once the sandbox is up (q->resumed set, so no second
 * resume), or it is answered with why the resume failed. 0: not such a
 * call, nothing done. */
int workspaces_auto_resume(struct api_req *q, const char *id, void (*rerun)(struct api_req *q));
/* The parts of it for callers with their own proof of the caller (a
 * port's traffic token): 1 if <pod> of <a> is a paused sandbox created
 * with auto_resume, or one this router is resuming, with <w> filled
 * (fr_workspace_clear it); then workspaces_resume_then() resumes it (or
 * joins) and reruns <q> as above. */
int workspace_auto_resumable(struct router *r, struct fr_adapter *a, const char *pod, struct fr_workspace *w);
void workspaces_resume_then(struct api_req *q, struct fr_adapter *a, const struct fr_workspace *w,
                            void (*rerun)(struct api_req *q));
/* The tenant's paused sandboxes and the bytes of all its workspaces. */
void workspace_tenant_usage(struct router *r, const char *tenant, int64_t *paused, int64_t *bytes);

#endif
