/* kubecreds.h - the credentials of one Kubernetes client (kubecreds.c):
 * static token or client certificate, a token file, an exec plugin.
 *
 * Below kube.c, which owns one struct kube_creds per client and closes it
 * with the client, and kube_exec.c, which waits for it before each exec;
 * it calls neither. Private to cluster_adapter.
 */
#ifndef FR_KUBECREDS_H
#define FR_KUBECREDS_H

#include <stdint.h>

#include <curl/curl.h>
#include <uv.h>

struct fr_kube_client;
struct fr_kube_creds;
struct kube_creds;

/* ---- lifecycle (kube.c) ---- */

/* Credentials from <creds> (borrowed: the client's copy, which outlives
 * them); <name> (borrowed) names the client in messages; a token file is
 * read again when credentials are needed <reread_ms> after the last read.
 * No handle yet. 0, -ENOMEM, or -EINVAL (a static token spanning lines). */
int kube__creds_new(const struct fr_kube_creds *creds, const char *name, uint64_t reread_ms,
                    struct kube_creds **out);
/* Creates the handles on <loop>; <owner> is what waiters' callbacks get. */
void kube__creds_start(struct kube_creds *cr, uv_loop_t *loop, struct fr_kube_client *owner);
/* Stops a plugin run or a token read, answers the waits still queued with
 * -ECANCELED from a later loop turn, and calls <cb> once every handle has
 * closed. After kube__creds_start() only, once. */
void kube__creds_close(struct kube_creds *cr, void (*cb)(void *arg), void *arg);
/* Never started, or after kube__creds_close()'s callback. Accepts NULL. */
void kube__creds_free(struct kube_creds *cr);

/* ---- waiting for usable credentials (kube.c, kube_exec.c) ---- */

/* Credentials may need an exec plugin to run first (or again, after expiry
 * or a 401). <cb> runs on a later loop turn with 0 once kube__creds_apply()
 * can be used, or a negative error (plugin failed; kube__creds_error() has
 * the text). Once queued, <cb> is always called exactly once unless
 * withdrawn with kube__creds_unwait(): if the credentials are closed
 * meanwhile it gets -ECANCELED, a loop turn after kube__creds_close() and
 * before its callback. Returns 0, -EINVAL, -ECANCELED (closing: <cb> never
 * called) or -ENOMEM. */
typedef void (*kube__creds_cb)(struct fr_kube_client *c, int status, void *arg);
int kube__creds_wait(struct kube_creds *cr, kube__creds_cb cb, void *arg);
/* Withdraws every queued wait with this <cb> and <arg> (their <cb> is then
 * never called). Safe from any callback. */
void kube__creds_unwait(struct kube_creds *cr, kube__creds_cb cb, void *arg);
/* The text of the last credentials failure, e.g. "exec plugin \"gke-auth\"
 * failed with exit status 1; stderr: ..."; valid during a kube__creds_cb
 * called with a negative status. Never NULL. */
const char *kube__creds_error(const struct kube_creds *cr);
/* Marks the current credentials as rejected (a 401): the next wait re-reads
 * the token file or re-runs the plugin. No effect for static credentials. */
void kube__creds_invalidate(struct kube_creds *cr);
/* 1 when they can change (a token file or an exec plugin). */
int kube__creds_refreshable(const struct kube_creds *cr);
/* Bumped on every successful load: a 401 answers the credentials of the
 * generation its request carried, not newer ones. */
uint64_t kube__creds_gen(const struct kube_creds *cr);

/* ---- a request ---- */

/* Adds the client certificate and key (a plugin's, else the kubeconfig's)
 * to <easy> and appends "Authorization: Bearer" to <*headers> when there is
 * a token. Call once a wait answered 0. 0, -ENOMEM, or -EINVAL (the token
 * spans lines). */
int kube__creds_apply(const struct kube_creds *cr, CURL *easy, struct curl_slist **headers);

#endif
