/* secret.c - Secrets of the sandbox namespace: reading the keys a create
 * asks for (GET /api/v1/namespaces/<ns>/secrets/<name>), and for
 * /v1/secrets listing a Secret's key names, setting a key (merge patch, or
 * a create of the Secret) and removing one.
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

#include "secret.h"

#include "cluster.h"
#include "fr/assert.h"
#include "fr/kube.h"
#include "fr/util.h"
#include "upstream.h"

/* A Secret read is one small GET: a cluster that has not answered in this
 * long is treated as down for the create, which then spills. */
#define SECRET_TIMEOUT_MS 5000

/* This file's state: the calls in flight. */
struct secrets {
  struct cluster *cl;
  struct fr_secret_call *calls;
};

/* What a call does. */
enum secret_op {
  SO_GET,                       /* read keys' values (fr_adapter_secret_get) */
  SO_KEYS,                      /* the names of the keys (fr_adapter_secret_keys) */
  SO_SET,                       /* set a key: PATCH, else POST the Secret (fr_adapter_secret_set) */
  SO_UNSET,                     /* remove a key: PATCH (fr_adapter_secret_unset) */
};

struct fr_secret_call {
  struct fr_secret_call *prev, *next; /* the calls in flight (struct secrets) */
  struct secrets *ss;
  struct fr_kube_call *kc;
  fr_secret_cb cb;
  void *arg;
  enum secret_op op;
  int created;                  /* SO_SET: the Secret was POSTed */
  int conflicts;                /* SO_SET: 409s of the POST (another writer made it) */
  char *request_id;
  char *patch, *create;         /* SO_SET/UNSET: the bodies (secrets: wiped before free) */
  size_t patch_len, create_len;
  size_t nkeys;
  char secret[256];
  char *keys[];
};

/* Takes <sc> out of the list of calls in flight (again: a no-op). */
static void call_unlink(struct fr_secret_call *sc) {
  if (sc->prev != NULL)
    sc->prev->next = sc->next;
  else if (sc->ss->calls == sc)
    sc->ss->calls = sc->next;
  if (sc->next != NULL)
    sc->next->prev = sc->prev;
  sc->prev = sc->next = NULL;
}

static void wipe_free(char *p, size_t n) {
  if (p != NULL)
    explicit_bzero(p, n);
  free(p);
}

static void call_free(struct fr_secret_call *sc) {
  size_t i;

  /* Its Kubernetes call answered, never sent, or cancelled first. */
  FR_ASSERT(sc->kc == NULL);
  call_unlink(sc);
  wipe_free(sc->patch, sc->patch_len);
  wipe_free(sc->create, sc->create_len);
  free(sc->request_id);
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
  struct cluster *cl = sc->ss->cl;
  struct fr_secret_result res;
  json_t *obj = NULL, *data, *values = NULL;
  char msg[600];
  size_t i;

  sc->kc = NULL;
  /* Out of the list before the callback, which may cancel
   * other reads or stop the adapter. */
  call_unlink(sc);
  memset(&res, 0, sizeof(res));
  if (r->status == 200) {
    cluster__report(cl, 1);
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
        snprintf(msg, sizeof(msg), "Secret %s in namespace %s has no key %s", sc->secret, cl->ns, sc->keys[i]);
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
    cluster__report(cl, 1);
    res.err = FR_SECRET_NOT_FOUND;
    snprintf(msg, sizeof(msg), "no Secret %s in namespace %s", sc->secret, cl->ns);
    res.message = msg;
  } else {
    /* An answer that is not the Secret's says nothing secret, but it is
     * not quoted all the same: a Status is enough. */
    if (r->status == 0 || r->status >= 500)
      cluster__report(cl, 0);
    res.err = FR_SECRET_UNAVAILABLE;
    if (r->status == 0)
      snprintf(msg, sizeof(msg), "cannot read Secret %s: %s", sc->secret, r->error ? r->error : "no answer");
    else if (r->status == 403)
      snprintf(msg, sizeof(msg), "cannot read Secret %s in namespace %s: forbidden (the router needs get on "
               "secrets there: deploy/rbac.yaml)", sc->secret, cl->ns);
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

int secret__get(struct secrets *ss, const char *secret, const char *const *keys, size_t nkeys,
                const char *request_id, fr_secret_cb cb, void *arg, struct fr_secret_call **out) {
  struct cluster *cl = ss != NULL ? ss->cl : NULL;
  struct fr_kube_request_opts o;
  struct fr_secret_call *sc;
  char path[400];
  size_t i;
  int rc;

  if (out != NULL)
    *out = NULL;
  if (ss == NULL || secret == NULL || cb == NULL || strlen(secret) >= sizeof(sc->secret))
    return -EINVAL;
  if (!cluster__reachable(cl))
    return -EHOSTDOWN;
  if (upstream_object_path(path, sizeof(path), "/api/v1", cl->ns, "secrets", NULL, secret) != 0)
    return -EINVAL;
  sc = calloc(1, sizeof(*sc) + nkeys * sizeof(sc->keys[0]));
  if (sc == NULL)
    return -ENOMEM;
  sc->ss = ss;
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
  rc = fr_kube_request_opts(cl->client, "GET", path, NULL, NULL, 0, &o, on_got, sc, &sc->kc);
  if (rc != 0) {
    call_free(sc);
    return rc;
  }
  sc->next = ss->calls;
  if (ss->calls != NULL)
    ss->calls->prev = sc;
  ss->calls = sc;
  if (out != NULL)
    *out = sc;
  return 0;
}

/* ---- writes and key listings (PUT/GET/DELETE /v1/secrets) ---- */

static int send_call(struct fr_secret_call *sc, const char *method, const char *path, const char *ctype,
                     const char *body, size_t len);

/* The object path of the call's Secret, or of the collection (<item> 0). */
static int secret_path(struct fr_secret_call *sc, char *out, size_t cap, int item) {
  return upstream_object_path(out, cap, "/api/v1", sc->ss->cl->ns, "secrets", NULL, item ? sc->secret : NULL);
}

/* The answer of a listing: the names of the keys, never a value. */
static void keys_answer(const struct fr_kube_response *r, struct fr_secret_result *res, char *msg, size_t cap) {
  json_t *obj = json_loadb(r->body, r->body_len, 0, NULL), *data = json_object_get(obj, "data"), *v;
  const char *k;

  res->keys = json_array();
  if (res->keys == NULL) {
    res->err = FR_SECRET_UNAVAILABLE;
    snprintf(msg, cap, "out of memory");
    res->message = msg;
  } else {
    json_object_foreach(data, k, v) json_array_append_new(res->keys, json_string(k));
  }
  wipe_strings(data);
  json_decref(obj);
}

static void on_written(const struct fr_kube_response *r, void *arg) {
  struct fr_secret_call *sc = arg;
  struct cluster *cl = sc->ss->cl;
  struct fr_secret_result res;
  char msg[600], path[400];

  sc->kc = NULL;
  memset(&res, 0, sizeof(res));
  if (sc->op == SO_SET && r->status == 404 && !sc->created && sc->create != NULL) {
    /* No Secret yet: make it, with the key. */
    cluster__report(cl, 1);
    sc->created = 1;
    if (secret_path(sc, path, sizeof(path), 0) == 0 &&
        send_call(sc, "POST", path, "application/json", sc->create, sc->create_len) == 0)
      return;
    res.err = FR_SECRET_UNAVAILABLE;
    res.message = "cannot send the create of the Secret";
  } else if (sc->op == SO_SET && sc->created && r->status == 409 && sc->conflicts++ < 2) {
    /* Another router made it meanwhile: patch it after all. */
    cluster__report(cl, 1);
    sc->created = 0;
    if (secret_path(sc, path, sizeof(path), 1) == 0 &&
        send_call(sc, "PATCH", path, "application/merge-patch+json", sc->patch, sc->patch_len) == 0)
      return;
    res.err = FR_SECRET_UNAVAILABLE;
    res.message = "cannot send the patch of the Secret";
  } else if (r->status >= 200 && r->status < 300) {
    cluster__report(cl, 1);
    res.err = FR_SECRET_OK;
    res.created = sc->created;
    if (sc->op == SO_KEYS)
      keys_answer(r, &res, msg, sizeof(msg));
  } else if (r->status == 404) {
    cluster__report(cl, 1);
    res.err = FR_SECRET_NOT_FOUND;
    snprintf(msg, sizeof(msg), "no Secret %s in namespace %s", sc->secret, cl->ns);
    res.message = msg;
  } else {
    /* A 429 is a busy API server, not a dead one: it answered. */
    if (r->status == 0 ? r->attempts > 0 : r->status >= 500)
      cluster__report(cl, 0);
    else
      cluster__report(cl, 1);
    res.err = FR_SECRET_UNAVAILABLE;
    if (r->status == 0)
      snprintf(msg, sizeof(msg), "cannot write Secret %s: %s", sc->secret, r->error ? r->error : "no answer");
    else if (r->status == 403)
      snprintf(msg, sizeof(msg), "Secret %s in namespace %s: forbidden (the router needs %s on secrets there: "
               "deploy/rbac.yaml)", sc->secret, cl->ns,
               sc->op == SO_KEYS ? "get" : sc->created ? "create" : "patch");
    else
      snprintf(msg, sizeof(msg), "Secret %s: HTTP %d", sc->secret, r->status);
    res.message = msg;
  }
  /* A follow-up that could not be sent left no call behind. */
  sc->kc = NULL;
  call_unlink(sc);
  sc->cb(&res, sc->arg);
  json_decref(res.keys);
  call_free(sc);
}

static int send_call(struct fr_secret_call *sc, const char *method, const char *path, const char *ctype,
                     const char *body, size_t len) {
  struct fr_kube_request_opts o;

  memset(&o, 0, sizeof(o));
  o.flags = FR_KUBE_SENSITIVE;
  o.request_id = sc->request_id;
  o.timeout_ms = SECRET_TIMEOUT_MS;
  return fr_kube_request_opts(sc->ss->cl->client, method, path, ctype, body, len, &o, on_written, sc, &sc->kc);
}

static struct fr_secret_call *call_new(struct secrets *ss, enum secret_op op, const char *secret,
                                       const char *request_id, fr_secret_cb cb, void *arg) {
  struct fr_secret_call *sc;

  if (ss == NULL || secret == NULL || cb == NULL || strlen(secret) >= sizeof(sc->secret))
    return NULL;
  if ((sc = calloc(1, sizeof(*sc))) == NULL)
    return NULL;
  sc->ss = ss;
  sc->op = op;
  sc->cb = cb;
  sc->arg = arg;
  snprintf(sc->secret, sizeof(sc->secret), "%s", secret);
  if (request_id != NULL && (sc->request_id = strdup(request_id)) == NULL) {
    free(sc);
    return NULL;
  }
  return sc;
}

static void call_link(struct fr_secret_call *sc) {
  struct secrets *ss = sc->ss;

  sc->next = ss->calls;
  if (ss->calls != NULL)
    ss->calls->prev = sc;
  ss->calls = sc;
}

/* Starts <sc>'s first request; 0 or a negative errno (<sc> freed). */
static int call_start(struct fr_secret_call *sc, struct fr_secret_call **out, const char *method, int item,
                      const char *ctype, const char *body, size_t len) {
  char path[400];
  int rc;

  if (out != NULL)
    *out = NULL;
  if (!cluster__reachable(sc->ss->cl)) {
    call_free(sc);
    return -EHOSTDOWN;
  }
  if (secret_path(sc, path, sizeof(path), item) != 0) {
    call_free(sc);
    return -EINVAL;
  }
  if ((rc = send_call(sc, method, path, ctype, body, len)) != 0) {
    sc->kc = NULL;
    call_free(sc);
    return rc;
  }
  call_link(sc);
  if (out != NULL)
    *out = sc;
  return 0;
}

int secret__keys(struct secrets *ss, const char *secret, const char *request_id, fr_secret_cb cb, void *arg,
                 struct fr_secret_call **out) {
  struct fr_secret_call *sc = call_new(ss, SO_KEYS, secret, request_id, cb, arg);

  if (out != NULL)
    *out = NULL;
  if (sc == NULL)
    return -ENOMEM;
  return call_start(sc, out, "GET", 1, NULL, NULL, 0);
}

/* {"data":{<key>:<b64 or null>}}, and for a set the whole Secret too. */
static int write_bodies(struct fr_secret_call *sc, const char *key, const void *value, size_t len,
                        const char *tenant) {
  json_t *p = NULL, *c = NULL;
  char *b64 = NULL;
  int rc = -ENOMEM;

  if (value != NULL) {
    if ((b64 = malloc(fr_base64_len(len))) == NULL)
      goto out;
    fr_base64_encode(value, len, b64);
  }
  p = json_pack("{s:{s:o}}", "data", key, b64 != NULL ? json_string(b64) : json_null());
  if (p == NULL || (sc->patch = json_dumps(p, JSON_COMPACT)) == NULL)
    goto out;
  sc->patch_len = strlen(sc->patch);
  if (value != NULL) {
    c = json_pack("{s:s,s:s,s:{s:s,s:{s:s,s:s}},s:s,s:{s:s}}", "apiVersion", "v1", "kind", "Secret", "metadata",
                  "name", sc->secret, "labels", "app.kubernetes.io/managed-by", "fedrouter", FR_LABEL_TENANT,
                  tenant != NULL ? tenant : "local", "type", "Opaque", "data", key, b64);
    if (c == NULL || (sc->create = json_dumps(c, JSON_COMPACT)) == NULL)
      goto out;
    sc->create_len = strlen(sc->create);
  }
  rc = 0;
out:
  /* The encoded value is in jansson's strings too: wipe them. */
  if (p != NULL)
    wipe_strings(json_object_get(p, "data"));
  if (c != NULL)
    wipe_strings(json_object_get(c, "data"));
  json_decref(p);
  json_decref(c);
  if (b64 != NULL)
    wipe_free(b64, fr_base64_len(len));
  return rc;
}

int secret__set(struct secrets *ss, const char *secret, const char *key, const void *value, size_t len,
                const char *tenant, const char *request_id, fr_secret_cb cb, void *arg, struct fr_secret_call **out) {
  struct fr_secret_call *sc;

  if (out != NULL)
    *out = NULL;
  if (key == NULL || value == NULL)
    return -EINVAL;
  if ((sc = call_new(ss, SO_SET, secret, request_id, cb, arg)) == NULL)
    return -ENOMEM;
  if (write_bodies(sc, key, value, len, tenant) != 0) {
    call_free(sc);
    return -ENOMEM;
  }
  return call_start(sc, out, "PATCH", 1, "application/merge-patch+json", sc->patch, sc->patch_len);
}

int secret__unset(struct secrets *ss, const char *secret, const char *key, const char *request_id,
                  fr_secret_cb cb, void *arg, struct fr_secret_call **out) {
  struct fr_secret_call *sc;

  if (out != NULL)
    *out = NULL;
  if (key == NULL)
    return -EINVAL;
  if ((sc = call_new(ss, SO_UNSET, secret, request_id, cb, arg)) == NULL)
    return -ENOMEM;
  if (write_bodies(sc, key, NULL, 0, NULL) != 0) {
    call_free(sc);
    return -ENOMEM;
  }
  return call_start(sc, out, "PATCH", 1, "application/merge-patch+json", sc->patch, sc->patch_len);
}

struct secrets *secret__new(struct cluster *cl) {
  struct secrets *ss = calloc(1, sizeof(*ss));

  if (ss != NULL)
    ss->cl = cl;
  return ss;
}

void secret__stop(struct secrets *ss) {
  struct fr_secret_call *sc;
  struct fr_secret_result res;

  memset(&res, 0, sizeof(res));
  res.err = FR_SECRET_UNAVAILABLE;
  res.message = "the router is shutting down";
  /* The head each time: a callback may cancel other calls. */
  while ((sc = ss->calls) != NULL) {
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
  c->kc = NULL;
  call_free(c);
}

void secret__free(struct secrets *ss) {
  if (ss == NULL)
    return;
  FR_ASSERT(ss->calls == NULL);
  free(ss);
}
