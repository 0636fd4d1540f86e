/* secret.c - reading the keys a create asks for from a Secret of the
 * sandbox namespace (GET /api/v1/namespaces/<ns>/secrets/<name>).
 *
 * Values are secrets: the request and its answer are FR_KUBE_SENSITIVE
 * (zeroed before they are freed), the decoded values are zeroed when their
 * last reference goes (fr_secret_values_free), and no message built here
 * ever quotes one. Nothing is cached: every create reads the Secret again,
 * so a changed value is seen by the next create.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapter_internal.h"
#include "fr/util.h"
#include "upstream.h"

/* A Secret read is one small GET: a cluster that has not answered in this
 * long is treated as down for the create, which then spills. */
#define SECRET_TIMEOUT_MS 5000

struct fr_secret_call {
  struct fr_secret_call *prev, *next; /* the adapter's reads in flight */
  struct fr_adapter *a;
  struct fr_kube_call *kc;
  fr_secret_cb cb;
  void *arg;
  size_t nkeys;
  char secret[256];
  char *keys[];
};

/* Takes <sc> out of its adapter's list (again: a no-op). */
static void call_unlink(struct fr_secret_call *sc) {
  if (sc->prev != NULL)
    sc->prev->next = sc->next;
  else if (sc->a->secret_calls == sc)
    sc->a->secret_calls = sc->next;
  if (sc->next != NULL)
    sc->next->prev = sc->prev;
  sc->prev = sc->next = NULL;
}

static void call_free(struct fr_secret_call *sc) {
  size_t i;

  call_unlink(sc);
  for (i = 0; i < sc->nkeys; i++)
    free(sc->keys[i]);
  free(sc);
}

/* Zeroes the string values of object <o> in place (jansson's own copies). */
static void wipe_strings(json_t *o) {
  const char *k;
  json_t *v;

  json_object_foreach(o, k, v) if (json_is_string(v))
    explicit_bzero((char *)json_string_value(v), json_string_length(v));
}

void fr_secret_values_free(json_t *values) {
  if (values == NULL)
    return;
  /* Only the last holder wipes: the others still need the values. The
   * loop is single-threaded, so the count cannot change meanwhile. */
  if (values->refcount == 1)
    wipe_strings(values);
  json_decref(values);
}

/* Takes <raw> (<len> bytes, NUL-terminated) as the value of <key> in
 * <values>, if it can be an env var value: UTF-8 text (the agent's /init is
 * JSON) without a NUL (a C string). 0 or -EINVAL; <raw> is wiped either way. */
static int put_value(json_t *values, const char *key, char *raw, size_t len) {
  json_t *s = memchr(raw, '\0', len) == NULL ? json_stringn(raw, len) : NULL;
  int rc = s != NULL ? json_object_set_new(values, key, s) : -EINVAL;

  explicit_bzero(raw, len);
  return rc != 0 ? -EINVAL : 0;
}

static void on_got(const struct fr_kube_response *r, void *arg) {
  struct fr_secret_call *sc = arg;
  struct fr_adapter *a = sc->a;
  struct fr_secret_result res;
  json_t *obj = NULL, *data, *values = NULL;
  char msg[600];
  size_t i;

  sc->kc = NULL;
  /* Out of the adapter's list before the callback, which may cancel
   * other reads or stop the adapter. */
  call_unlink(sc);
  memset(&res, 0, sizeof(res));
  if (r->status == 200) {
    fr_adapter_report(a, 1);
    obj = json_loadb(r->body, r->body_len, 0, NULL);
    data = json_object_get(obj, "data");
    values = json_object();
    res.err = values != NULL ? FR_SECRET_OK : FR_SECRET_UNAVAILABLE;
    res.message = values != NULL ? NULL : "out of memory";
    for (i = 0; i < sc->nkeys && res.err == FR_SECRET_OK; i++) {
      const char *b64 = json_string_value(json_object_get(data, sc->keys[i]));
      size_t n = b64 != NULL ? strlen(b64) : 0;
      char *raw = b64 != NULL ? malloc(n + 1) : NULL;
      long len = raw != NULL ? fr_base64_decode(b64, n, (unsigned char *)raw) : -1;

      res.key = sc->keys[i];
      if (b64 == NULL) {
        res.err = FR_SECRET_NOT_FOUND;
        snprintf(msg, sizeof(msg), "Secret %s in namespace %s has no key %s", sc->secret, a->ns, sc->keys[i]);
      } else if (raw == NULL) {
        res.err = FR_SECRET_UNAVAILABLE;
        snprintf(msg, sizeof(msg), "out of memory");
      } else if (len < 0 || put_value(values, sc->keys[i], raw, (size_t)len) != 0) {
        res.err = FR_SECRET_INVALID;
        snprintf(msg, sizeof(msg), "the value of key %s in Secret %s is not UTF-8 text without NUL bytes "
                 "(an env var cannot hold it)", sc->keys[i], sc->secret);
      }
      if (raw != NULL) {
        explicit_bzero(raw, n + 1);
        free(raw);
      }
      if (res.err != FR_SECRET_OK)
        res.message = msg;
    }
    if (res.err == FR_SECRET_OK)
      res.key = NULL;
    /* The parsed answer holds every value of the Secret in base64. */
    wipe_strings(data);
  } else if (r->status == 404) {
    fr_adapter_report(a, 1);
    res.err = FR_SECRET_NOT_FOUND;
    snprintf(msg, sizeof(msg), "no Secret %s in namespace %s", sc->secret, a->ns);
    res.message = msg;
  } else {
    /* An answer that is not the Secret's says nothing secret, but it is
     * not quoted all the same: a Status is enough. */
    if (r->status == 0 || r->status >= 500)
      fr_adapter_report(a, 0);
    res.err = FR_SECRET_UNAVAILABLE;
    if (r->status == 0)
      snprintf(msg, sizeof(msg), "cannot read Secret %s: %s", sc->secret, r->error ? r->error : "no answer");
    else if (r->status == 403)
      snprintf(msg, sizeof(msg), "cannot read Secret %s in namespace %s: forbidden (the router needs get on "
               "secrets there: deploy/rbac.yaml)", sc->secret, a->ns);
    else
      snprintf(msg, sizeof(msg), "cannot read Secret %s: HTTP %d", sc->secret, r->status);
    res.message = msg;
  }
  res.values = res.err == FR_SECRET_OK ? values : NULL;
  sc->cb(&res, sc->arg);
  fr_secret_values_free(values);
  json_decref(obj);
  call_free(sc);
}

int fr_adapter_secret_get(struct fr_adapter *a, const char *secret, const char *const *keys, size_t nkeys,
                          const char *request_id, fr_secret_cb cb, void *arg, struct fr_secret_call **out) {
  struct fr_kube_request_opts o;
  struct fr_secret_call *sc;
  char path[400];
  size_t i;
  int rc;

  if (out != NULL)
    *out = NULL;
  if (a == NULL || secret == NULL || cb == NULL || strlen(secret) >= sizeof(sc->secret))
    return -EINVAL;
  if (a->breaker != BR_CLOSED)
    return -EHOSTDOWN;
  if (upstream_object_path(path, sizeof(path), "/api/v1", a->ns, "secrets", NULL, secret) != 0)
    return -EINVAL;
  sc = calloc(1, sizeof(*sc) + nkeys * sizeof(sc->keys[0]));
  if (sc == NULL)
    return -ENOMEM;
  sc->a = a;
  sc->cb = cb;
  sc->arg = arg;
  snprintf(sc->secret, sizeof(sc->secret), "%s", secret);
  for (i = 0; i < nkeys; i++) {
    if ((sc->keys[i] = strdup(keys[i])) == NULL) {
      call_free(sc);
      return -ENOMEM;
    }
    sc->nkeys++;
  }
  memset(&o, 0, sizeof(o));
  o.flags = FR_KUBE_SENSITIVE;
  o.request_id = request_id;
  o.timeout_ms = SECRET_TIMEOUT_MS;
  rc = fr_kube_request_opts(a->client, "GET", path, NULL, NULL, 0, &o, on_got, sc, &sc->kc);
  if (rc != 0) {
    call_free(sc);
    return rc;
  }
  sc->next = a->secret_calls;
  if (a->secret_calls != NULL)
    a->secret_calls->prev = sc;
  a->secret_calls = sc;
  if (out != NULL)
    *out = sc;
  return 0;
}

void secret_stop(struct fr_adapter *a) {
  struct fr_secret_call *sc;
  struct fr_secret_result res;

  memset(&res, 0, sizeof(res));
  res.err = FR_SECRET_UNAVAILABLE;
  res.message = "the router is shutting down";
  /* The head each time: a callback may cancel other reads. */
  while ((sc = a->secret_calls) != NULL) {
    fr_kube_cancel(sc->kc);
    sc->kc = NULL;
    call_unlink(sc);
    sc->cb(&res, sc->arg);
    call_free(sc);
  }
}

void fr_secret_call_cancel(struct fr_secret_call *c) {
  if (c == NULL)
    return;
  fr_kube_cancel(c->kc);
  call_free(c);
}
