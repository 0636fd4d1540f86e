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
 *
 * `kubectl create deployment|service|serviceaccount|role|rolebinding|
 * clusterrole|clusterrolebinding|quota|poddisruptionbudget` do too; those
 * messages are decoded from field tables (struct msgdesc below) that list
 * the fields those commands fill. The Go encoder also writes every
 * non-pointer field it leaves empty (a "" string, a 0, an empty nested
 * message such as status): a field missing from a table is accepted only
 * when it is empty in that sense, so a value kubesim does not know still
 * gets the 415 rather than a silently different object.
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

/* ---------------------------------------------------------------------- */
/* table-driven messages                                                   */

enum ftype {
  T_STR,      /* string, omitted when "" */
  T_STRS,     /* repeated string (an "" element is kept) */
  T_INT,      /* int32/int64 varint, omitted when 0 unless F_KEEP */
  T_BOOL,     /* omitted when false unless F_KEEP */
  T_MSG,      /* nested message (F_LIST: repeated, an array) */
  T_META,     /* ObjectMeta */
  T_MAP,      /* map<string,string> */
  T_QTYMAP,   /* map<string,Quantity> (Quantity {string (1)}) */
  T_INTSTR,   /* IntOrString {type (1), intVal (2), strVal (3)} */
};
#define F_KEEP 1  /* a pointer field: present even when zero */
#define F_LIST 2

struct msgdesc;
struct fdesc {
  uint32_t num;
  const char *name;
  enum ftype type;
  int flags;
  const struct msgdesc *sub;
};
struct msgdesc {
  const struct fdesc *f;
};

/* 1 if <d> parses as a message whose every field is zero or empty: what
 * the encoder writes for a struct nobody filled (a status, a strategy). */
static int all_empty(const unsigned char *d, size_t n, int depth) {
  struct pb b = {d, d + n};
  const unsigned char *x;
  size_t xn;
  uint32_t f;
  uint64_t v;
  int wt, r;

  if (depth > 8)
    return 0;
  while ((r = pb_next(&b, &f, &wt, &v, &x, &xn)) == 1) {
    if (f == 0 || (wt == 0 && v != 0) || (wt == 2 && xn > 0 && !all_empty(x, xn, depth + 1)))
      return 0;
  }
  return r == 0;
}

static int decode_msg(const struct msgdesc *md, json_t *obj, const unsigned char *d, size_t n,
                      int depth);

static int intstr(json_t *parent, const char *key, const unsigned char *d, size_t n) {
  struct pb b = {d, d + n};
  const unsigned char *x;
  size_t xn;
  uint32_t f;
  uint64_t v, type = 0, ival = 0;
  json_t *sval = NULL;
  int wt, r;

  while ((r = pb_next(&b, &f, &wt, &v, &x, &xn)) == 1) {
    if (f == 1 && wt == 0)
      type = v;
    else if (f == 2 && wt == 0)
      ival = v;
    else if (f == 3 && wt == 2) {
      json_decref(sval);
      sval = str_of(x, xn);
    } else {
      json_decref(sval);
      return -1;
    }
  }
  if (r < 0 || type > 1) {
    json_decref(sval);
    return -1;
  }
  if (type == 1)
    return json_object_set_new(parent, key, sval ? sval : json_string(""));
  json_decref(sval);
  return json_object_set_new(parent, key, json_integer((json_int_t)(int32_t)ival));
}

/* A map<string,Quantity> entry: the value is a message {string (1)}. */
static int qty_entry(json_t *obj, const unsigned char *d, size_t n) {
  struct pb b = {d, d + n}, q;
  const unsigned char *x, *y;
  size_t xn, yn;
  uint32_t f, g;
  uint64_t v, w;
  int wt, wt2, r, r2;
  json_t *key = NULL, *val = NULL;

  while ((r = pb_next(&b, &f, &wt, &v, &x, &xn)) == 1) {
    if (wt != 2 || (f != 1 && f != 2))
      goto bad;
    if (f == 1) {
      json_decref(key);
      key = str_of(x, xn);
      continue;
    }
    q.p = x;
    q.end = x + xn;
    while ((r2 = pb_next(&q, &g, &wt2, &w, &y, &yn)) == 1) {
      if (g != 1 || wt2 != 2)
        goto bad;
      json_decref(val);
      val = str_of(y, yn);
    }
    if (r2 < 0)
      goto bad;
  }
  if (r < 0 || key == NULL || val == NULL)
    goto bad;
  r = json_object_set_new(obj, json_string_value(key), val);
  json_decref(key);
  return r;
bad:
  json_decref(key);
  json_decref(val);
  return -1;
}

static int decode_field(const struct fdesc *fd, json_t *obj, int wt, uint64_t v,
                        const unsigned char *x, size_t xn, int depth) {
  json_t *sub;

  switch (fd->type) {
  case T_STR:
    if (wt != 2)
      return -1;
    return xn > 0 ? json_object_set_new(obj, fd->name, str_of(x, xn)) : 0;
  case T_STRS:
    if (wt != 2)
      return -1;
    if (json_object_get(obj, fd->name) == NULL)
      json_object_set_new(obj, fd->name, json_array());
    return json_array_append_new(json_object_get(obj, fd->name), str_of(x, xn));
  case T_INT:
    if (wt != 0)
      return -1;
    if (v == 0 && !(fd->flags & F_KEEP))
      return 0;
    return json_object_set_new(obj, fd->name, json_integer((json_int_t)(int64_t)v));
  case T_BOOL:
    if (wt != 0)
      return -1;
    if (v == 0 && !(fd->flags & F_KEEP))
      return 0;
    return json_object_set_new(obj, fd->name, json_boolean(v != 0));
  case T_META:
    return wt == 2 ? meta(obj_of(obj, fd->name), x, xn) : -1;
  case T_MAP:
    return wt == 2 ? map_entry(obj_of(obj, fd->name), x, xn, 0) : -1;
  case T_QTYMAP:
    return wt == 2 ? qty_entry(obj_of(obj, fd->name), x, xn) : -1;
  case T_INTSTR:
    return wt == 2 ? intstr(obj, fd->name, x, xn) : -1;
  case T_MSG:
    if (wt != 2)
      return -1;
    if (fd->flags & F_LIST) {
      json_t *arr = json_object_get(obj, fd->name);
      if (arr == NULL)
        json_object_set_new(obj, fd->name, arr = json_array());
      sub = json_object();
      if (json_array_append_new(arr, sub) != 0)
        return -1;
    } else {
      if (xn == 0 || all_empty(x, xn, 0))
        return 0; /* an empty struct: nothing set (as JSON's omitempty) */
      sub = obj_of(obj, fd->name);
    }
    return decode_msg(fd->sub, sub, x, xn, depth + 1);
  }
  return -1;
}

static int decode_msg(const struct msgdesc *md, json_t *obj, const unsigned char *d, size_t n,
                      int depth) {
  struct pb b = {d, d + n};
  const unsigned char *x = NULL;
  size_t xn = 0;
  uint32_t f;
  uint64_t v = 0;
  int wt, r;

  if (depth > 16 || obj == NULL)
    return -1;
  while ((r = pb_next(&b, &f, &wt, &v, &x, &xn)) == 1) {
    const struct fdesc *fd;
    for (fd = md->f; fd->name != NULL && fd->num != f; fd++)
      ;
    if (fd->name != NULL) {
      if (decode_field(fd, obj, wt, v, x, xn, depth) != 0)
        return -1;
    } else if (!((wt == 0 && v == 0) || (wt == 2 && (xn == 0 || all_empty(x, xn, 0))))) {
      return -1; /* a field set to a value kubesim does not decode */
    }
  }
  return r;
}

#define MSG(name, ...)                                                                        \
  static const struct fdesc name##_f[] = {__VA_ARGS__, {0, NULL, T_STR, 0, NULL}};           \
  static const struct msgdesc name = {name##_f}

/* k8s.io/apimachinery/pkg/apis/meta/v1 */
MSG(m_selreq, {1, "key", T_STR, 0, NULL}, {2, "operator", T_STR, 0, NULL},
    {3, "values", T_STRS, 0, NULL});
MSG(m_selector, {1, "matchLabels", T_MAP, 0, NULL},
    {2, "matchExpressions", T_MSG, F_LIST, &m_selreq});
/* k8s.io/api/core/v1 */
MSG(m_cport, {1, "name", T_STR, 0, NULL}, {2, "hostPort", T_INT, 0, NULL},
    {3, "containerPort", T_INT, F_KEEP, NULL}, {4, "protocol", T_STR, 0, NULL},
    {5, "hostIP", T_STR, 0, NULL});
MSG(m_env, {1, "name", T_STR, 0, NULL}, {2, "value", T_STR, 0, NULL});
MSG(m_resources, {1, "limits", T_QTYMAP, 0, NULL}, {2, "requests", T_QTYMAP, 0, NULL});
MSG(m_container, {1, "name", T_STR, 0, NULL}, {2, "image", T_STR, 0, NULL},
    {3, "command", T_STRS, 0, NULL}, {4, "args", T_STRS, 0, NULL},
    {5, "workingDir", T_STR, 0, NULL}, {6, "ports", T_MSG, F_LIST, &m_cport},
    {7, "env", T_MSG, F_LIST, &m_env}, {8, "resources", T_MSG, 0, &m_resources},
    {13, "terminationMessagePath", T_STR, 0, NULL}, {14, "imagePullPolicy", T_STR, 0, NULL},
    {16, "stdin", T_BOOL, 0, NULL}, {17, "stdinOnce", T_BOOL, 0, NULL},
    {18, "tty", T_BOOL, 0, NULL}, {20, "terminationMessagePolicy", T_STR, 0, NULL});
MSG(m_podspec, {2, "containers", T_MSG, F_LIST, &m_container},
    {3, "restartPolicy", T_STR, 0, NULL}, {4, "terminationGracePeriodSeconds", T_INT, F_KEEP, NULL},
    {5, "activeDeadlineSeconds", T_INT, F_KEEP, NULL}, {6, "dnsPolicy", T_STR, 0, NULL},
    {7, "nodeSelector", T_MAP, 0, NULL}, {8, "serviceAccountName", T_STR, 0, NULL},
    {10, "nodeName", T_STR, 0, NULL}, {19, "schedulerName", T_STR, 0, NULL},
    {20, "initContainers", T_MSG, F_LIST, &m_container});
MSG(m_template, {1, "metadata", T_META, 0, NULL}, {2, "spec", T_MSG, 0, &m_podspec});
MSG(m_objref, {1, "kind", T_STR, 0, NULL}, {2, "namespace", T_STR, 0, NULL},
    {3, "name", T_STR, 0, NULL});
MSG(m_localref, {1, "name", T_STR, 0, NULL});
MSG(m_sa, {1, "metadata", T_META, 0, NULL}, {2, "secrets", T_MSG, F_LIST, &m_objref},
    {3, "imagePullSecrets", T_MSG, F_LIST, &m_localref},
    {4, "automountServiceAccountToken", T_BOOL, F_KEEP, NULL});
MSG(m_quotaspec, {1, "hard", T_QTYMAP, 0, NULL}, {2, "scopes", T_STRS, 0, NULL});
MSG(m_quota, {1, "metadata", T_META, 0, NULL}, {2, "spec", T_MSG, 0, &m_quotaspec});
MSG(m_sport, {1, "name", T_STR, 0, NULL}, {2, "protocol", T_STR, 0, NULL},
    {3, "port", T_INT, F_KEEP, NULL}, {4, "targetPort", T_INTSTR, 0, NULL},
    {5, "nodePort", T_INT, 0, NULL}, {6, "appProtocol", T_STR, 0, NULL});
MSG(m_svcspec, {1, "ports", T_MSG, F_LIST, &m_sport}, {2, "selector", T_MAP, 0, NULL},
    {3, "clusterIP", T_STR, 0, NULL}, {4, "type", T_STR, 0, NULL},
    {5, "externalIPs", T_STRS, 0, NULL}, {7, "sessionAffinity", T_STR, 0, NULL},
    {11, "externalName", T_STR, 0, NULL}, {18, "clusterIPs", T_STRS, 0, NULL});
MSG(m_service, {1, "metadata", T_META, 0, NULL}, {2, "spec", T_MSG, 0, &m_svcspec});
/* k8s.io/api/rbac/v1 */
MSG(m_rule, {1, "verbs", T_STRS, 0, NULL}, {2, "apiGroups", T_STRS, 0, NULL},
    {3, "resources", T_STRS, 0, NULL}, {4, "resourceNames", T_STRS, 0, NULL},
    {5, "nonResourceURLs", T_STRS, 0, NULL});
MSG(m_role, {1, "metadata", T_META, 0, NULL}, {2, "rules", T_MSG, F_LIST, &m_rule});
MSG(m_subject, {1, "kind", T_STR, 0, NULL}, {2, "apiGroup", T_STR, 0, NULL},
    {3, "name", T_STR, 0, NULL}, {4, "namespace", T_STR, 0, NULL});
MSG(m_roleref, {1, "apiGroup", T_STR, 0, NULL}, {2, "kind", T_STR, 0, NULL},
    {3, "name", T_STR, 0, NULL});
MSG(m_binding, {1, "metadata", T_META, 0, NULL}, {2, "subjects", T_MSG, F_LIST, &m_subject},
    {3, "roleRef", T_MSG, 0, &m_roleref});
/* k8s.io/api/policy/v1 */
MSG(m_pdbspec, {1, "minAvailable", T_INTSTR, 0, NULL}, {2, "selector", T_MSG, 0, &m_selector},
    {3, "maxUnavailable", T_INTSTR, 0, NULL}, {4, "unhealthyPodEvictionPolicy", T_STR, 0, NULL});
MSG(m_pdb, {1, "metadata", T_META, 0, NULL}, {2, "spec", T_MSG, 0, &m_pdbspec});
/* k8s.io/api/apps/v1 */
MSG(m_rolling, {1, "maxUnavailable", T_INTSTR, 0, NULL}, {2, "maxSurge", T_INTSTR, 0, NULL});
MSG(m_strategy, {1, "type", T_STR, 0, NULL}, {2, "rollingUpdate", T_MSG, 0, &m_rolling});
MSG(m_deployspec, {1, "replicas", T_INT, F_KEEP, NULL}, {2, "selector", T_MSG, 0, &m_selector},
    {3, "template", T_MSG, 0, &m_template}, {4, "strategy", T_MSG, 0, &m_strategy},
    {5, "minReadySeconds", T_INT, 0, NULL}, {6, "revisionHistoryLimit", T_INT, F_KEEP, NULL},
    {7, "paused", T_BOOL, 0, NULL}, {9, "progressDeadlineSeconds", T_INT, F_KEEP, NULL});
MSG(m_deploy, {1, "metadata", T_META, 0, NULL}, {2, "spec", T_MSG, 0, &m_deployspec});

static const struct {
  const char *api_version, *kind;
  const struct msgdesc *md;
} typed_kinds[] = {
    {"apps/v1", "Deployment", &m_deploy},
    {"v1", "Service", &m_service},
    {"v1", "ServiceAccount", &m_sa},
    {"v1", "ResourceQuota", &m_quota},
    {"rbac.authorization.k8s.io/v1", "Role", &m_role},
    {"rbac.authorization.k8s.io/v1", "ClusterRole", &m_role},
    {"rbac.authorization.k8s.io/v1", "RoleBinding", &m_binding},
    {"rbac.authorization.k8s.io/v1", "ClusterRoleBinding", &m_binding},
    {"policy/v1", "PodDisruptionBudget", &m_pdb},
};

/* An object of a kind in typed_kinds[] as JSON, NULL if not one of those
 * or a field does not decode. */
static json_t *typed(const char *apiv, const char *kind, const unsigned char *d, size_t n) {
  size_t i;
  json_t *j;

  for (i = 0; i < FR_ARRAY_SIZE(typed_kinds); i++) {
    if (strcmp(typed_kinds[i].api_version, apiv) != 0 || strcmp(typed_kinds[i].kind, kind) != 0)
      continue;
    j = json_pack("{s:s,s:s,s:{}}", "apiVersion", apiv, "kind", kind, "metadata");
    if (j != NULL && decode_msg(typed_kinds[i].md, j, d, n, 0) != 0) {
      json_decref(j);
      return NULL;
    }
    return j;
  }
  return NULL;
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
  else if (strcmp(apiv, "v1") == 0 && (strcmp(kind, "Secret") == 0 || strcmp(kind, "ConfigMap") == 0 ||
                                       strcmp(kind, "Namespace") == 0))
    j = object(kind, raw, rawn);
  else
    j = typed(apiv, kind, raw, rawn);
  if (j == NULL) {
    snprintf(err, errlen, "kubesim decodes from protobuf only what kubectl create sends for v1 "
             "Secret, ConfigMap, Namespace, Service, ServiceAccount, ResourceQuota, apps/v1 "
             "Deployment, RBAC roles and bindings, policy/v1 PodDisruptionBudget and Eviction "
             "(got %s %s, or a field it does not know); send application/json", apiv, kind);
    return NULL;
  }
  return j;
}
