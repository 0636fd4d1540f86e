/* proto.c - the Kubernetes protobuf encoding of the few objects kubectl's
 * imperative commands send that way, as the JSON the store keeps.
 *
 * kubectl v1.32 posts `create secret generic`, `create configmap` and
 * `create namespace` as Content-Type application/vnd.kubernetes.protobuf:
 * the 4 bytes "k8s\0", then a runtime.Unknown {typeMeta (1) {apiVersion
 * (1), kind (2)}, raw (2)} whose raw is the object's message
 * (k8s.io/api/core/v1/generated.proto). Only the fields those commands set
 * are decoded; any other field is refused rather than silently dropped.
 *
 * `kubectl drain` posts its policy/v1 Eviction (pods/eviction) the same
 * way: {metadata (1), deleteOptions (2)} (k8s.io/api/policy/v1 and
 * apimachinery's meta/v1 generated.proto).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/util.h"
#include "sim.h"

struct pb {
  const unsigned char *p, *end;
};

/* One field: its number, wire type, and either <v> (varint) or the bytes
 * <d>/<n> (length-delimited). 1 read, 0 at the end, -1 malformed. */
static int pb_next(struct pb *b, uint32_t *field, int *wt, uint64_t *v, const unsigned char **d, size_t *n) {
  uint64_t key = 0, x = 0;
  int shift;

  if (b->p >= b->end)
    return 0;
  for (shift = 0; shift < 64 && b->p < b->end; shift += 7) {
    key |= (uint64_t)(*b->p & 0x7f) << shift;
    if ((*b->p++ & 0x80) == 0)
      break;
  }
  *field = (uint32_t)(key >> 3);
  *wt = (int)(key & 7);
  if (*wt == 0 || *wt == 2) {
    for (shift = 0; shift < 64; shift += 7) {
      if (b->p >= b->end)
        return -1;
      x |= (uint64_t)(*b->p & 0x7f) << shift;
      if ((*b->p++ & 0x80) == 0)
        break;
    }
    if (*wt == 0) {
      *v = x;
      return 1;
    }
    if (x > (uint64_t)(b->end - b->p))
      return -1;
    *d = b->p;
    *n = (size_t)x;
    b->p += x;
    return 1;
  }
  return -1; /* fixed32/64 and groups: none of the decoded messages has one */
}

static json_t *str_of(const unsigned char *d, size_t n) {
  return json_stringn((const char *)d, n);
}

static json_t *b64_of(const unsigned char *d, size_t n) {
  char *enc = malloc(fr_base64_len(n));
  json_t *s;

  if (enc == NULL)
    return NULL;
  fr_base64_encode(d, n, enc);
  s = json_string(enc);
  free(enc);
  return s;
}

/* A map entry {key (1), value (2)} into <obj>; <bytes>: base64 the value. */
static int map_entry(json_t *obj, const unsigned char *d, size_t n, int bytes) {
  struct pb b = {d, d + n};
  const unsigned char *kd = NULL, *vd = (const unsigned char *)"", *x;
  size_t kn = 0, vn = 0, xn;
  uint32_t f;
  uint64_t v;
  int wt, r;
  char *key;
  json_t *val;

  while ((r = pb_next(&b, &f, &wt, &v, &x, &xn)) == 1) {
    if (wt != 2 || (f != 1 && f != 2))
      return -1;
    if (f == 1) {
      kd = x;
      kn = xn;
    } else {
      vd = x;
      vn = xn;
    }
  }
  if (r < 0 || kd == NULL || (key = strndup((const char *)kd, kn)) == NULL)
    return -1;
  val = bytes ? b64_of(vd, vn) : str_of(vd, vn);
  if (val == NULL || strlen(key) != kn) {
    json_decref(val);
    r = -1;
  } else {
    r = json_object_set_new(obj, key, val); /* takes <val>, even when it fails (a key not UTF-8) */
  }
  free(key);
  return r;
}

static json_t *obj_of(json_t *parent, const char *key) {
  json_t *o = json_object_get(parent, key);

  if (o == NULL) {
    o = json_object();
    json_object_set_new(parent, key, o);
  }
  return o;
}

/* ObjectMeta: name, generateName, namespace, labels, annotations. */
static int meta(json_t *m, const unsigned char *d, size_t n) {
  static const char *const strs[] = {NULL, "name", "generateName", "namespace"};
  struct pb b = {d, d + n};
  const unsigned char *x;
  size_t xn;
  uint32_t f;
  uint64_t v;
  int wt, r;

  while ((r = pb_next(&b, &f, &wt, &v, &x, &xn)) == 1) {
    if (wt == 2 && f >= 1 && f <= 3 && xn > 0)
      json_object_set_new(m, strs[f], str_of(x, xn));
    else if (wt == 2 && (f == 11 || f == 12)) {
      if (map_entry(obj_of(m, f == 11 ? "labels" : "annotations"), x, xn, 0) != 0)
        return -1;
    } else if ((wt == 2 && xn == 0) || (wt == 0 && v == 0)) {
      /* Empty fields are encoded all the same (selfLink, uid,
       * resourceVersion, generation, creationTimestamp): the server's. */
    } else {
      return -1;
    }
  }
  return r;
}

/* The object message <d> of <kind> as JSON; NULL when it is not one this
 * file decodes or is malformed. */
static json_t *object(const char *kind, const unsigned char *d, size_t n) {
  int secret = strcmp(kind, "Secret") == 0, cm = strcmp(kind, "ConfigMap") == 0;
  struct pb b = {d, d + n};
  const unsigned char *x;
  json_t *j;
  size_t xn;
  uint32_t f;
  uint64_t v;
  int wt, r = 0;

  if (!secret && !cm && strcmp(kind, "Namespace") != 0)
    return NULL;
  j = json_pack("{s:s,s:s,s:{}}", "apiVersion", "v1", "kind", kind, "metadata");
  while (j != NULL && (r = pb_next(&b, &f, &wt, &v, &x, &xn)) == 1) {
    if (f == 1 && wt == 2)
      r = meta(json_object_get(j, "metadata"), x, xn);
    else if ((secret || cm) && f == 2 && wt == 2)
      r = map_entry(obj_of(j, "data"), x, xn, secret);
    else if (secret && f == 3 && wt == 2)
      r = xn > 0 ? json_object_set_new(j, "type", str_of(x, xn)) : 0; /* "": Opaque */
    else if (secret && f == 4 && wt == 2)
      r = map_entry(obj_of(j, "stringData"), x, xn, 0);
    else if (cm && f == 3 && wt == 2)
      r = map_entry(obj_of(j, "binaryData"), x, xn, 1);
    else if (((secret && f == 5) || (cm && f == 4)) && wt == 0)
      r = json_object_set_new(j, "immutable", json_boolean(v != 0));
    else if (!secret && !cm && (f == 2 || f == 3) && wt == 2)
      r = 0; /* a Namespace's spec and status: nothing kubectl create sets */
    else
      r = -1;
    if (r != 0) {
      json_decref(j);
      return NULL;
    }
  }
  if (r < 0) { /* a malformed field after the last good one */
    json_decref(j);
    return NULL;
  }
  return j;
}

/* meta/v1 DeleteOptions {gracePeriodSeconds (1), preconditions (2) {uid
 * (1), resourceVersion (2)}, orphanDependents (3), propagationPolicy (4),
 * dryRun (5, repeated), ignoreStoreReadErrorWithClusterBreakingPotential
 * (6)} into <o>. */
static int delete_options(json_t *o, const unsigned char *d, size_t n) {
  struct pb b = {d, d + n}, pb2;
  const unsigned char *x, *y;
  size_t xn, yn;
  uint32_t f, f2;
  uint64_t v, v2;
  int wt, wt2, r, r2;

  while ((r = pb_next(&b, &f, &wt, &v, &x, &xn)) == 1) {
    if (f == 1 && wt == 0) {
      json_object_set_new(o, "gracePeriodSeconds", json_integer((json_int_t)(int64_t)v));
    } else if (f == 2 && wt == 2) {
      json_t *pre = obj_of(o, "preconditions");
      pb2.p = x;
      pb2.end = x + xn;
      while ((r2 = pb_next(&pb2, &f2, &wt2, &v2, &y, &yn)) == 1) {
        if (wt2 != 2 || (f2 != 1 && f2 != 2))
          return -1;
        json_object_set_new(pre, f2 == 1 ? "uid" : "resourceVersion", str_of(y, yn));
      }
      if (r2 < 0)
        return -1;
    } else if (f == 3 && wt == 0) {
      json_object_set_new(o, "orphanDependents", json_boolean(v != 0));
    } else if (f == 4 && wt == 2) {
      json_object_set_new(o, "propagationPolicy", str_of(x, xn));
    } else if (f == 5 && wt == 2) {
      json_t *dr = json_object_get(o, "dryRun");
      if (dr == NULL)
        json_object_set_new(o, "dryRun", dr = json_array());
      json_array_append_new(dr, str_of(x, xn));
    } else if (f == 6 && wt == 0) {
      json_object_set_new(o, "ignoreStoreReadErrorWithClusterBreakingPotential", json_boolean(v != 0));
    } else {
      return -1;
    }
  }
  return r;
}

/* A policy/v1 Eviction {metadata (1), deleteOptions (2)} as JSON, or NULL. */
static json_t *eviction(const unsigned char *d, size_t n) {
  struct pb b = {d, d + n};
  const unsigned char *x;
  json_t *j;
  size_t xn;
  uint32_t f;
  uint64_t v;
  int wt, r = 0;

  j = json_pack("{s:s,s:s,s:{}}", "apiVersion", "policy/v1", "kind", "Eviction", "metadata");
  while (j != NULL && (r = pb_next(&b, &f, &wt, &v, &x, &xn)) == 1) {
    if (f == 1 && wt == 2)
      r = meta(json_object_get(j, "metadata"), x, xn);
    else if (f == 2 && wt == 2)
      r = delete_options(obj_of(j, "deleteOptions"), x, xn);
    else
      r = -1;
    if (r != 0) {
      json_decref(j);
      return NULL;
    }
  }
  if (r < 0) { /* a malformed field after the last good one */
    json_decref(j);
    return NULL;
  }
  return j;
}

json_t *proto_decode(const void *body, size_t len, char *err, size_t errlen) {
  struct pb b = {body, (const unsigned char *)body + len}, tb;
  const unsigned char *x, *raw = NULL;
  char apiv[64] = "", kind[64] = "";
  size_t xn, rawn = 0;
  uint32_t f;
  uint64_t v;
  int wt, r;
  json_t *j;

  if (len < 4 || memcmp(body, "k8s\0", 4) != 0) {
    snprintf(err, errlen, "not the Kubernetes protobuf envelope (no k8s\\0 magic)");
    return NULL;
  }
  b.p += 4;
  while ((r = pb_next(&b, &f, &wt, &v, &x, &xn)) == 1) {
    if (f == 1 && wt == 2) {
      tb.p = x;
      tb.end = x + xn;
      while ((r = pb_next(&tb, &f, &wt, &v, &x, &xn)) == 1)
        if (wt == 2 && (f == 1 || f == 2))
          snprintf(f == 1 ? apiv : kind, sizeof(kind), "%.*s", (int)(xn < 63 ? xn : 63), (const char *)x);
    } else if (f == 2 && wt == 2) {
      raw = x;
      rawn = xn;
    }
    if (r < 0)
      break;
  }
  if (r < 0 || raw == NULL) {
    snprintf(err, errlen, "malformed protobuf envelope");
    return NULL;
  }
  if (strcmp(apiv, "policy/v1") == 0 && strcmp(kind, "Eviction") == 0)
    j = eviction(raw, rawn);
  else
    j = strcmp(apiv, "v1") == 0 ? object(kind, raw, rawn) : NULL;
  if (j == NULL) {
    snprintf(err, errlen, "kubesim decodes only v1 Secret, ConfigMap and Namespace and policy/v1 "
             "Eviction from protobuf (got %s %s, or a field it does not know); send application/json",
             apiv, kind);
    return NULL;
  }
  return j;
}
