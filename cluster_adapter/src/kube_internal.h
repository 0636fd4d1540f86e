/* kube_internal.h - what kube.c (the client core: REST calls, watches, the
 * queue) shares with kube_exec.c (pods/exec over WebSocket) and informer.c.
 * The credentials are kubecreds.c's (kubecreds.h). Private to
 * cluster_adapter.
 */
#ifndef FR_KUBE_INTERNAL_H
#define FR_KUBE_INTERNAL_H

#include <curl/curl.h>
#include <uv.h>

#include "fr/kube.h"

struct kube_creds;

/* Every call (REST, watch, exec) starts with this, so the client can cancel
 * them all on free and fr_kube_cancel() can dispatch. */
struct fr_kube_call {
  struct fr_kube_call *prev, *next;   /* the client's list of live calls */
  struct fr_kube_client *client;
  /* Stops the call without calling its callback and releases it (possibly
   * later, after handles close). Called by fr_kube_cancel() and on free. */
  void (*cancel)(struct fr_kube_call *call);
};

void kube__call_track(struct fr_kube_client *c, struct fr_kube_call *call);
void kube__call_untrack(struct fr_kube_call *call);

uv_loop_t *kube__loop(const struct fr_kube_client *c);
const char *kube__name(const struct fr_kube_client *c);
const char *kube__server(const struct fr_kube_client *c);     /* "https://host:port" */
const struct fr_kube_client_opts *kube__opts(const struct fr_kube_client *c);
/* 1 once fr_kube_client_free() has begun: no new call may start. */
int kube__closing(const struct fr_kube_client *c);
/* The client's credentials (kubecreds.h): wait for them before a request. */
struct kube_creds *kube__creds(const struct fr_kube_client *c);

/* Applies server TLS settings (CA blob, insecure, proxy), the credentials
 * (kube__creds_apply: client certificate and key, "Authorization: Bearer"),
 * user agent, timeouts, and appends X-Request-Id if <request_id> to
 * <*headers> (caller frees with curl_slist_free_all after the transfer).
 * Does not set the URL or method, nor CURLOPT_HTTPHEADER.
 * Timeouts set: CURLOPT_CONNECTTIMEOUT_MS (connect_timeout_ms) and
 * CURLOPT_TIMEOUT_MS (request_timeout_ms); a streaming caller sets
 * CURLOPT_TIMEOUT_MS back to 0. Also sets HTTP/1.1, NOSIGNAL and TCP
 * keepalive. 0, -ENOMEM, or -EINVAL (<request_id> or the token holds CR/LF). */
int kube__easy_setup(struct fr_kube_client *c, CURL *easy, struct curl_slist **headers,
                     const char *request_id);

/* TLS sessions (and DNS answers) shared by a client's exec connections, so
 * every exec after the first resumes a session instead of a full handshake.
 * Reference-counted because exec handles may outlive their client; the
 * last unref cleans it up (before its holder's curl_global_cleanup()). */
struct kube_share;
struct kube_share *kube__share_ref(struct fr_kube_client *c);   /* NULL if unavailable */
CURLSH *kube__share_handle(struct kube_share *s);
void kube__share_unref(struct kube_share *s);                    /* accepts NULL */

#endif
