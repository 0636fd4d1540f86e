/* fr/curluv.h - a libcurl multi handle driven by a libuv loop.
 *
 * The shape of curl's docs/examples/multi-uv.c without its globals: curl's
 * socket callback keeps one uv_poll per socket (allocated here, freed in
 * its close callback), its timer callback drives one uv_timer, and after
 * every curl_multi_socket_action the finished transfers are drained with
 * curl_multi_info_read and handed to the owner one by one. Connections stay
 * in the multi handle's pool and are reused.
 *
 * The owner embeds a struct fr_curluv, adds its easy handles to <multi>
 * and gets each finished one back through done_cb; it recovers itself with
 * fr_container_of. Users: the Kubernetes REST client and its exec
 * connections (cluster_adapter), the load generator's HTTP client.
 *
 * Re-entrancy rules the owner must keep (libcurl's, made visible here):
 *   - curl_multi_remove_handle() is forbidden inside curl's own callbacks
 *     (write, header, ...). fr_curluv_in_curl() says whether we are there;
 *     a handle given up there can be removed in after_cb, which runs right
 *     after curl_multi_socket_action returns.
 *   - done_cb may do anything, including fr_curluv_close() and freeing its
 *     owner's state (not the struct fr_curluv itself: that waits for the
 *     close callback). The multi handle is cleaned up only once the drain
 *     has unwound, never under it.
 *
 * Everything runs on the loop's thread. The caller owns curl's global state
 * (curl_global_init before fr_curluv_init, curl_global_cleanup after the
 * close callback).
 */
#ifndef FR_CURLUV_H
#define FR_CURLUV_H

#include <curl/curl.h>
#include <uv.h>

struct fr_curluv;
struct fr_curluv_sock;

/* A transfer is finished (CURLMSG_DONE): <easy> is still in the multi; the
 * callback decides what to do with it (remove it, add it again, keep it). */
typedef void (*fr_curluv_done_cb)(struct fr_curluv *cu, CURL *easy, CURLcode result);
/* Runs after every curl_multi_socket_action, before the finished transfers
 * are handed out, and even when closing: the first point where handles
 * given up inside curl's callbacks may be removed. */
typedef void (*fr_curluv_after_cb)(struct fr_curluv *cu);
/* Every handle is closed and the multi is gone; the memory holding <cu>
 * may be freed. */
typedef void (*fr_curluv_close_cb)(struct fr_curluv *cu);

struct fr_curluv {
  /* Public, read-only: for curl_multi_add_handle/remove_handle/setopt.
   * NULL once fr_curluv_close() has cleaned it up. */
  CURLM *multi;

  /* Private. */
  uv_loop_t *loop;
  uv_timer_t timer;                  /* curl's timer callback */
  uv_idle_t rearm;                   /* what fr_turn_take() put off: polls, the timer */
  int timeout_due;                   /* curl's timer fired over the budget */
  struct fr_curluv_sock *socks;      /* live polls */
  fr_curluv_done_cb done_cb;
  fr_curluv_after_cb after_cb;
  fr_curluv_close_cb close_cb;
  unsigned nopen;                    /* uv handles not yet closed */
  int in_curl;                       /* inside curl_multi_socket_action */
  int dispatching;                   /* inside socket_action + drain */
  int stopped;                       /* fr_curluv_stop(): no more polling */
  int closing;                       /* fr_curluv_close() was called */
  int torn_down;                     /* the multi is being (or was) cleaned up */
};

/* Creates the multi handle of <cu> (caller-allocated, uninitialised) on
 * <loop> and installs the socket and timer callbacks. <done_cb> (required)
 * gets every finished transfer; <after_cb> may be NULL. Returns 0, or
 * -ENOMEM with nothing to close. After 0, <cu> must be closed with
 * fr_curluv_close() and its memory kept until the close callback. */
int fr_curluv_init(uv_loop_t *loop, struct fr_curluv *cu, fr_curluv_done_cb done_cb,
                   fr_curluv_after_cb after_cb);

/* Nonzero inside curl_multi_socket_action, i.e. inside curl's callbacks,
 * where curl_multi_remove_handle() and curl_multi_cleanup() are forbidden. */
int fr_curluv_in_curl(const struct fr_curluv *cu);

/* Stops driving the multi: closes the polls and stops the timer; no more
 * done_cb (the current drain ends after the running one). The multi and
 * its easy handles stay until fr_curluv_close(): for a CONNECT_ONLY
 * transfer whose connection the owner now drives itself (removing the
 * handle would close it). The owner may watch a socket curl used with its
 * own uv_poll once this returns. Safe from done_cb; idempotent. */
void fr_curluv_stop(struct fr_curluv *cu);

/* Closes <cu>: no more done_cb from now on. As soon as no dispatch is
 * running (at once, or when the current socket_action and drain return)
 * the polls stop, curl_multi_cleanup() closes the pooled connections and
 * every uv handle is closed; <cb> (may be NULL) runs once the last one is,
 * always on a later loop turn. Remove the easy handles first where curl
 * allows it (outside fr_curluv_in_curl(), or in after_cb); any left are
 * orphaned by the cleanup and stay the owner's to free. Safe from any
 * callback, curl's included; a second call does nothing. */
void fr_curluv_close(struct fr_curluv *cu, fr_curluv_close_cb cb);

#endif
