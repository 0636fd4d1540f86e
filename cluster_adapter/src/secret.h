/* secret.h - Secrets of the sandbox namespace (secret.c): the keys a
 * create asks for, and the key listings and writes of /v1/secrets.
 *
 * Above cluster.c (client, breaker); adapter.c forwards
 * fr_adapter_secret_get, _keys, _set and _unset here and stops it first
 * when the adapter goes.
 */
#ifndef FR_SECRET_H
#define FR_SECRET_H

#include <stddef.h>

#include "fr/adapter.h"

struct cluster;
struct secrets;

/* NULL when out of memory. <cl> is borrowed and outlives it. */
struct secrets *secret__new(struct cluster *cl);
/* Fails every Secret call in flight (adapter going away): their callbacks
 * get FR_SECRET_UNAVAILABLE. */
void secret__stop(struct secrets *ss);
/* After secret__stop(). Accepts NULL. */
void secret__free(struct secrets *ss);

/* fr_adapter_secret_get (fr/adapter.h). */
int secret__get(struct secrets *ss, const char *secret, const char *const *keys, size_t nkeys,
                const char *request_id, fr_secret_cb cb, void *arg, struct fr_secret_call **out);
/* fr_adapter_secret_keys, fr_adapter_secret_set, fr_adapter_secret_unset. */
int secret__keys(struct secrets *ss, const char *secret, const char *request_id, fr_secret_cb cb, void *arg,
                 struct fr_secret_call **out);
int secret__set(struct secrets *ss, const char *secret, const char *key, const void *value, size_t len,
                const char *tenant, const char *request_id, fr_secret_cb cb, void *arg, struct fr_secret_call **out);
int secret__unset(struct secrets *ss, const char *secret, const char *key, const char *request_id,
                  fr_secret_cb cb, void *arg, struct fr_secret_call **out);

#endif
