/* secret.h - reading the keys a create asks for from a Secret of the
 * sandbox namespace (secret.c).
 *
 * Above cluster.c (client, breaker); adapter.c forwards
 * fr_adapter_secret_get here and stops it first when the adapter goes.
 */
#ifndef FR_SECRET_H
#define FR_SECRET_H

#include <stddef.h>

#include "fr/adapter.h"

struct cluster;
struct secrets;

/* NULL when out of memory. <cl> is borrowed and outlives it. */
struct secrets *secret__new(struct cluster *cl);
/* Fails every Secret read in flight (adapter going away): their callbacks
 * get FR_SECRET_UNAVAILABLE. */
void secret__stop(struct secrets *ss);
/* After secret__stop(). Accepts NULL. */
void secret__free(struct secrets *ss);

/* fr_adapter_secret_get (fr/adapter.h). */
int secret__get(struct secrets *ss, const char *secret, const char *const *keys, size_t nkeys,
                const char *request_id, fr_secret_cb cb, void *arg, struct fr_secret_call **out);

#endif
