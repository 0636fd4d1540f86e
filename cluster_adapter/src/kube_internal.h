/* kube_internal.h - what kube.c (client core, REST, watches, credentials)
 * shares with kube_exec.c (pods/exec over WebSocket). Private to
 * cluster_adapter. */
#ifndef FR_KUBE_INTERNAL_H
#define FR_KUBE_INTERNAL_H

#include <curl/curl.h>
#include <uv.h>

#include "fr/kube.h"

/* Every call (REST, watch, exec) starts with this, so the client can cancel
 * them all on free and fr_kube_cancel() can dispatch. */
struct fr_kube_call {
  struct fr_kube_call *prev, *next;   /* the client's list of live calls */
  struct fr_kube_client *client;
  /* Stops the call without calling its callback and releases it (possibly
   * later, after handles close). Called by fr_kube_cancel() and on free. */
  void (*cancel)(struct fr_kube_call *call);
};

void kube_call_track(struct fr_kube_client *c, struct fr_kube_call *call);
void kube_call_untrack(struct fr_kube_call *call);

uv_loop_t *kube_loop(const struct fr_kube_client *c);
const char *kube_name(const struct fr_kube_client *c);
const char *kube_server(const struct fr_kube_client *c);     /* "https://host:port" */
const struct fr_kube_client_opts *kube_opts(const struct fr_kube_client *c);

/* Credentials may need an exec plugin to run first (or again, after expiry
 * or a 401). <cb> runs on a later loop turn with 0 once kube_easy_setup()
 * can be used, or a negative error (plugin failed; kube_creds_error() has
 * the text). Once queued, <cb> is always called exactly once unless
 * withdrawn with kube_creds_unwait(): if the client is freed meanwhile it
 * gets -ECANCELED, a loop turn after fr_kube_client_free() and before the
 * free callback. Returns 0, -EINVAL, -ECANCELED (client being freed: <cb>
 * never called) or -ENOMEM. */
typedef void (*kube_creds_cb)(struct fr_kube_client *c, int status, void *arg);
int kube_creds_wait(struct fr_kube_client *c, kube_creds_cb cb, void *arg);
/* Added with kube.c: withdraws every queued wait with this <cb> and <arg>
 * (their <cb> is then never called). Safe from any callback. */
void kube_creds_unwait(struct fr_kube_client *c, kube_creds_cb cb, void *arg);
/* Added with kube.c: the text of the last credentials failure, e.g.
 * "exec plugin \"gke-auth\" failed with exit status 1; stderr: ...";
 * valid during a kube_creds_cb called with a negative status. Never NULL. */
const char *kube_creds_error(const struct fr_kube_client *c);
/* Marks the current credentials as rejected (a 401): the next wait re-reads
 * the token file or re-runs the plugin. No effect for static credentials. */
void kube_creds_invalidate(struct fr_kube_client *c);

/* Applies server TLS settings (CA blob, insecure, proxy), client
 * certificate and key blobs, user agent, timeouts, and appends the
 * "Authorization: Bearer" header (and X-Request-Id if <request_id>) to
 * <*headers> (caller frees with curl_slist_free_all after the transfer).
 * Does not set the URL or method, nor CURLOPT_HTTPHEADER.
 * Timeouts set: CURLOPT_CONNECTTIMEOUT_MS (connect_timeout_ms) and
 * CURLOPT_TIMEOUT_MS (request_timeout_ms); a streaming caller sets
 * CURLOPT_TIMEOUT_MS back to 0. Also sets HTTP/1.1, NOSIGNAL and TCP
 * keepalive. 0, -ENOMEM, or -EINVAL (<request_id> or the token holds CR/LF). */
int kube_easy_setup(struct fr_kube_client *c, CURL *easy, struct curl_slist **headers,
                    const char *request_id);

/* TLS sessions (and DNS answers) shared by a client's exec connections, so
 * every exec after the first resumes a session instead of a full handshake.
 * Reference-counted because exec handles may outlive their client; the
 * last unref cleans it up (before its holder's curl_global_cleanup()). */
struct kube_share;
struct kube_share *kube_share_ref(struct fr_kube_client *c);   /* NULL if unavailable */
CURLSH *kube_share_handle(struct kube_share *s);
void kube_share_unref(struct kube_share *s);                    /* accepts NULL */

/* Implemented in kube_exec.c; fr_kube_exec() in kube.c forwards here. */
int kube_exec_start(struct fr_kube_client *c, const char *ns, const char *pod,
                    const struct fr_kube_exec_opts *opts, fr_kube_exec_cb cb, void *arg,
                    struct fr_kube_call **out);

#endif
