/* lg_http.h - the load generator's HTTP/1.1 client: libcurl multi driven by
 * libuv (fr/curluv.h), keep-alive connections reused, no limit on
 * connections per host (a level of 1,000 concurrent requests opens 1,000
 * connections).
 *
 * Callbacks run from the loop, never from inside lg_http_request().
 */
#ifndef LG_HTTP_H
#define LG_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct lg_http;

struct lg_response {
  int status;          /* HTTP status, 0 when there was no response */
  const char *error;   /* transport error text when status == 0, else NULL */
  const char *body;    /* NUL-terminated, valid during the callback */
  size_t body_len;
  uint64_t start_ns;   /* uv_hrtime() when the request was started */
  uint64_t end_ns;     /* uv_hrtime() when the response was complete */
  long retry_after;    /* Retry-After in seconds; -1 when the header was absent */
};

typedef void (*lg_response_cb)(const struct lg_response *r, void *arg);

/* Creates a client for <base_url> ("http://127.0.0.1:8080", copied) sending
 * "Authorization: Bearer <token>" (copied; NULL = no header). Every request
 * is bounded by <timeout_ms>. Returns 0 or -ENOMEM/-EINVAL. */
int lg_http_new(uv_loop_t *loop, const char *base_url, const char *token, long timeout_ms,
                struct lg_http **out);

/* Starts <method> <path> with an optional JSON <body> (copied; NULL = none).
 * <cb> runs once, from the loop. Returns 0 or a negative errno (then <cb>
 * is never called). */
int lg_http_request(struct lg_http *h, const char *method, const char *path, const char *body,
                    lg_response_cb cb, void *arg);

/* Requests still running. */
size_t lg_http_pending(const struct lg_http *h);

/* Drops every connection and frees the client once its handles are closed
 * (run the loop afterwards). Requests still running are abandoned without
 * their callbacks. Accepts NULL. */
void lg_http_free(struct lg_http *h);

#endif
