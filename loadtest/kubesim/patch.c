/* patch.c - JSON merge patch (RFC 7386), strategic merge patch (the
 * Kubernetes API types' patch strategies) and JSON patch (RFC 6902). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "patch.h"
#include "sim.h"

json_t *merge_patch(json_t *target, json_t *patch) {
  const char *key;
  json_t *v;

  if (!json_is_object(patch)) {
    json_decref(target);
    return json_deep_copy(patch);
  }
  if (!json_is_object(target)) {
    json_decref(target);
    target = json_object();
  }
  json_object_foreach(patch, key, v) {
    /* Strategic-merge directives ($patch, $retainKeys, ...) are not
     * supported; they are ignored rather than stored. */
    if (key[0] == '$')
      continue;
    if (json_is_null(v)) {
      json_object_del(target, key);
    } else {
      json_t *cur = json_object_get(target, key);
      json_t *merged = merge_patch(cur ? json_incref(cur) : NULL, v);
      json_object_set_new(target, key, merged);
    }
  }
  return target;
}

/* ---------------------------------------------------------------------- */
/* strategic merge patch                                                   */

/* Where a map sits in an object, as far as its lists' patch strategies go:
 * the API types' x-kubernetes-patch-strategy / -merge-key, reduced to the
 * fields of the kinds kubesim stores. */
enum smp_type {
  /* roots, by kind */
  SMP_PLAIN, SMP_POD, SMP_WORKLOAD, SMP_NODE, SMP_SERVICE, SMP_SERVICEACCOUNT, SMP_CONDITIONED,
  /* inside them */
  SMP_META, SMP_POD_SPEC, SMP_CONTAINER, SMP_WORKLOAD_SPEC, SMP_TEMPLATE, SMP_POD_STATUS,
  SMP_NODE_SPEC, SMP_NODE_STATUS, SMP_SERVICE_SPEC, SMP_STATUS,
};
#define SMP_FIRST_INNER SMP_META

struct smp_field {
  enum smp_type in;   /* the map holding the field */
  const char *name;
  enum smp_type type; /* the field's map, or its elements' */
  const char *key;    /* merge list: the merge key, "" for a set of scalars */
};

static const struct smp_field smp_fields[] = {
    {SMP_POD, "spec", SMP_POD_SPEC, NULL},
    {SMP_POD, "status", SMP_POD_STATUS, NULL},
    {SMP_WORKLOAD, "spec", SMP_WORKLOAD_SPEC, NULL},
    {SMP_WORKLOAD, "status", SMP_STATUS, NULL},
    {SMP_WORKLOAD_SPEC, "template", SMP_TEMPLATE, NULL},
    {SMP_TEMPLATE, "metadata", SMP_META, NULL},
    {SMP_TEMPLATE, "spec", SMP_POD_SPEC, NULL},
    {SMP_NODE, "spec", SMP_NODE_SPEC, NULL},
    {SMP_NODE, "status", SMP_NODE_STATUS, NULL},
    {SMP_SERVICE, "spec", SMP_SERVICE_SPEC, NULL},
    {SMP_CONDITIONED, "status", SMP_STATUS, NULL},
    {SMP_META, "finalizers", SMP_PLAIN, ""},
    {SMP_META, "ownerReferences", SMP_PLAIN, "uid"},
    {SMP_POD_SPEC, "containers", SMP_CONTAINER, "name"},
    {SMP_POD_SPEC, "initContainers", SMP_CONTAINER, "name"},
    {SMP_POD_SPEC, "ephemeralContainers", SMP_CONTAINER, "name"},
    {SMP_POD_SPEC, "volumes", SMP_PLAIN, "name"},
    {SMP_POD_SPEC, "imagePullSecrets", SMP_PLAIN, "name"},
    {SMP_POD_SPEC, "hostAliases", SMP_PLAIN, "ip"},
    {SMP_POD_SPEC, "topologySpreadConstraints", SMP_PLAIN, "topologyKey"},
    {SMP_POD_SPEC, "resourceClaims", SMP_PLAIN, "name"},
    {SMP_POD_SPEC, "schedulingGates", SMP_PLAIN, "name"},
    {SMP_CONTAINER, "ports", SMP_PLAIN, "containerPort"},
    {SMP_CONTAINER, "env", SMP_PLAIN, "name"},
    {SMP_CONTAINER, "volumeMounts", SMP_PLAIN, "mountPath"},
    {SMP_CONTAINER, "volumeDevices", SMP_PLAIN, "devicePath"},
    {SMP_POD_STATUS, "conditions", SMP_PLAIN, "type"},
    {SMP_POD_STATUS, "podIPs", SMP_PLAIN, "ip"},
    {SMP_POD_STATUS, "hostIPs", SMP_PLAIN, "ip"},
    {SMP_NODE_SPEC, "podCIDRs", SMP_PLAIN, ""},
    {SMP_NODE_STATUS, "conditions", SMP_PLAIN, "type"},
    {SMP_NODE_STATUS, "addresses", SMP_PLAIN, "type"},
    {SMP_SERVICE_SPEC, "ports", SMP_PLAIN, "port"},
    {SMP_SERVICEACCOUNT, "secrets", SMP_PLAIN, "name"},
    {SMP_STATUS, "conditions", SMP_PLAIN, "type"},
};

static const struct smp_field *smp_field(enum smp_type in, const char *name) {
  static const struct smp_field meta = {SMP_PLAIN, "metadata", SMP_META, NULL};
  size_t i;

  if (in < SMP_FIRST_INNER && strcmp(name, "metadata") == 0)
    return &meta;
  for (i = 0; i < sizeof(smp_fields) / sizeof(smp_fields[0]); i++)
    if (smp_fields[i].in == in && strcmp(smp_fields[i].name, name) == 0)
      return &smp_fields[i];
  return NULL;
}

static enum smp_type smp_root(enum sim_kind k) {
  switch (k) {
  case K_POD: return SMP_POD;
  case K_RS:
  case K_DEPLOYMENT: return SMP_WORKLOAD;
  case K_NODE: return SMP_NODE;
  case K_SERVICE: return SMP_SERVICE;
  case K_SERVICEACCOUNT: return SMP_SERVICEACCOUNT;
  case K_NAMESPACE:
  case K_PVC:
  case K_PDB:
  case K_HPA: return SMP_CONDITIONED;
  default: return SMP_PLAIN;
  }
}

static json_t *smp_fail(struct smp_error *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static json_t *smp_fail(struct smp_error *e, int code, const char *fmt, ...) {
  va_list ap;

  e->code = code;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
  va_end(ap);
  return NULL;
}

/* apimachinery's ErrNoMergeKey, with the map as JSON. */
static json_t *no_merge_key(struct smp_error *e, json_t *m, const char *key) {
  char *text = json_dumps(m, JSON_COMPACT);
  json_t *r = smp_fail(e, 500, "map: %.400s does not contain declared merge key: %s",
                       text ? text : "?", key);

  free(text);
  return r;
}

/* A copy of <v> without the directives ("$..." keys) a patch may carry:
 * what decoding the result into the API type leaves of them. With
 * <drop_nulls>, also without null map values (the API server merges with
 * IgnoreUnmatchedNulls: a value new to the object loses its nulls). */
static json_t *strip_patch(json_t *v, int drop_nulls) {
  json_t *out, *x;
  const char *key;
  size_t i;

  if (json_is_object(v)) {
    out = json_object();
    json_object_foreach(v, key, x) {
      if (key[0] != '$' && !(drop_nulls && json_is_null(x)))
        json_object_set_new(out, key, strip_patch(x, drop_nulls));
    }
    return out;
  }
  if (json_is_array(v)) {
    out = json_array();
    json_array_foreach(v, i, x) json_array_append_new(out, strip_patch(x, drop_nulls));
    return out;
  }
  return json_incref(v);
}

static json_t *strip_directives(json_t *v) {
  return strip_patch(v, 0);
}

/* Go's JSON decoding gives a list element one of these types; a list mixes
 * none of them. */
static int value_class(json_t *v) {
  switch (json_typeof(v)) {
  case JSON_INTEGER:
  case JSON_REAL: return JSON_REAL;
  case JSON_TRUE:
  case JSON_FALSE: return JSON_TRUE;
  default: return (int)json_typeof(v);
  }
}

/* What identifies <item> in a merge list: its merge key's value, or the item
 * itself in a list of scalars. NULL when a map lacks the key. */
static json_t *merge_id(json_t *item, const char *key) {
  return *key ? json_object_get(item, key) : item;
}

/* Go's index(): the position of the first element of <list> with <item>'s
 * identity, or -1. */
static long list_index(json_t *list, json_t *item, const char *key) {
  json_t *id = merge_id(item, key), *x;
  size_t i;

  json_array_foreach(list, i, x) {
    json_t *xid = merge_id(x, key);
    if ((id == NULL && xid == NULL) || (id != NULL && xid != NULL && json_equal(id, xid)))
      return (long)i;
  }
  return -1;
}

/* Sorts <list> (in place, stably) by the position of each element in
 * <order>; every element is in it. */
static void sort_by(json_t *list, json_t *order, const char *key) {
  size_t n = json_array_size(list), i, j;

  for (i = 1; i < n; i++) {
    json_t *cur = json_incref(json_array_get(list, i));
    long ci = list_index(order, cur, key);
    for (j = i; j > 0 && ci < list_index(order, json_array_get(list, j - 1), key); j--)
      json_array_set(list, j, json_array_get(list, j - 1));
    json_array_set_new(list, j, cur);
  }
}

/* strategicpatch's normalizeElementOrder(): the elements of <merged> named
 * in <patch_order> in that order, the others (server-only) in the order of
 * <server_order>, interleaved as mergeSortedSlice() does. Returns a new
 * list. */
static json_t *normalize_order(json_t *merged, json_t *patch_order, json_t *server_order,
                               const char *key) {
  json_t *patch_items = json_array(), *server_only = json_array(), *out = json_array(), *x;
  size_t i, li = 0, ri = 0, nl, nr;

  json_array_foreach(merged, i, x) {
    json_array_append(list_index(patch_order, x, key) >= 0 ? patch_items : server_only, x);
  }
  sort_by(patch_items, patch_order, key);
  sort_by(server_only, server_order, key);
  nl = json_array_size(server_only);
  nr = json_array_size(patch_items);
  while (li < nl || ri < nr) {
    json_t *l = json_array_get(server_only, li), *r = json_array_get(patch_items, ri);
    long lpos, rpos;
    if (ri == nr) {
      json_array_append(out, l);
      li++;
      continue;
    }
    if (li == nl) {
      json_array_append(out, r);
      ri++;
      continue;
    }
    /* A server-only element goes first only when both are in the live
     * list and it comes earlier there. */
    lpos = list_index(server_order, l, key);
    rpos = list_index(server_order, r, key);
    if (lpos >= 0 && rpos >= 0 && lpos < rpos) {
      json_array_append(out, l);
      li++;
    } else {
      json_array_append(out, r);
      ri++;
    }
  }
  json_decref(patch_items);
  json_decref(server_only);
  return out;
}

static json_t *smp_map(json_t *orig, json_t *patch, enum smp_type type, struct smp_error *e);

/* mergeSlice(): <patch> into <orig> (both borrowed lists) for the merge list
 * <f>; <delete_list> for a $deleteFromPrimitiveList. Returns a new list. */
static json_t *smp_list(json_t *orig, json_t *patch, const struct smp_field *f, int delete_list,
                        struct smp_error *e) {
  json_t *base = NULL, *rest = NULL, *merged = NULL, *out = NULL, *x;
  int cls = -1, replace = 0;
  size_t i, j;

  if (json_array_size(orig) == 0 && json_array_size(patch) == 0)
    return json_array();
  for (j = 0; j < 2; j++) {
    json_array_foreach(j ? patch : orig, i, x) {
      if (json_is_array(x))
        return smp_fail(e, 422, "lists of lists are not supported");
      if (cls != -1 && value_class(x) != cls)
        return smp_fail(e, 500, "list element types are not identical");
      cls = value_class(x);
    }
  }
  if (cls != JSON_OBJECT) {
    /* A set of scalars: union, or the parallel list's deletions. */
    out = json_array();
    if (delete_list) {
      json_array_foreach(orig, i, x) {
        if (list_index(patch, x, "") < 0)
          json_array_append(out, x);
      }
      return out;
    }
    for (j = 0; j < 2; j++) {
      json_array_foreach(j ? patch : orig, i, x) {
        if (list_index(out, x, "") < 0)
          json_array_append(out, x);
      }
    }
    merged = normalize_order(out, patch, orig, "");
    json_decref(out);
    return merged;
  }
  if (*f->key == '\0')
    return smp_fail(e, 500, "cannot merge lists without merge key for type map");

  /* Elements with $patch: delete removes the live ones with their key,
   * replace makes the rest of the patch the whole list. */
  base = json_copy(orig);
  rest = json_array();
  json_array_foreach(patch, i, x) {
    const char *directive = json_string_value(json_object_get(x, "$patch"));
    json_t *id;
    if (json_object_get(x, "$patch") == NULL) {
      json_array_append(rest, x);
    } else if (directive != NULL && strcmp(directive, "delete") == 0) {
      if ((id = json_object_get(x, f->key)) == NULL) {
        no_merge_key(e, x, f->key);
        goto out;
      }
      for (j = 0; j < json_array_size(base);) {
        json_t *bid = json_object_get(json_array_get(base, j), f->key);
        if (bid != NULL && json_equal(bid, id))
          json_array_remove(base, j);
        else
          j++;
      }
    } else if (directive != NULL && strcmp(directive, "replace") == 0) {
      replace = 1;
    } else if (directive != NULL && strcmp(directive, "merge") == 0) {
      smp_fail(e, 500, "merging lists cannot yet be specified in the patch");
      goto out;
    } else {
      smp_fail(e, 500, "Unknown patch type: %s", directive ? directive : "(not a string)");
      goto out;
    }
  }
  if (replace) {
    json_decref(base);
    base = strip_directives(rest);
    json_array_clear(rest);
  }
  /* The others merge into the live element with their key, or are added. */
  merged = json_copy(base);
  json_array_foreach(rest, i, x) {
    json_t *id = json_object_get(x, f->key), *m;
    long at;
    if (!json_is_object(x) || id == NULL) {
      no_merge_key(e, x, f->key);
      goto out;
    }
    at = list_index(merged, x, f->key);
    if (at < 0) {
      json_array_append_new(merged, strip_directives(x));
      continue;
    }
    m = smp_map(json_incref(json_array_get(merged, (size_t)at)), x, f->type, e);
    if (m == NULL)
      goto out;
    json_array_set_new(merged, (size_t)at, m);
  }
  out = normalize_order(merged, rest, base, f->key);
out:
  json_decref(base);
  json_decref(rest);
  json_decref(merged);
  return out;
}

/* A list field <name> of a map of <type>: the live <orig> and the patch's
 * <pv> (both borrowed lists) merged by its strategy, or replaced. */
static json_t *smp_list_field(enum smp_type type, const char *name, json_t *orig, json_t *pv,
                              int delete_list, struct smp_error *e) {
  const struct smp_field *f = smp_field(type, name);

  if (f != NULL && f->key != NULL)
    return smp_list(orig, pv, f, delete_list, e);
  return strip_directives(pv);
}

/* $setElementOrder/<list>: <name>'s merged list put in the order <order>
 * gives (elements it does not name keep their live order). */
static int set_element_order(json_t *orig, json_t *patch, enum smp_type type, const char *name,
                             json_t *order, struct smp_error *e) {
  const struct smp_field *f = smp_field(type, name);
  const char *key = f != NULL && f->key != NULL ? f->key : "";
  json_t *live = json_object_get(orig, name), *pv = json_object_get(patch, name), *merged, *out;

  if (!json_is_array(order)) {
    smp_fail(e, 400, "invalid patch format of setElementOrder list");
    return -1;
  }
  if ((live != NULL && !json_is_array(live)) || (pv != NULL && !json_is_array(pv))) {
    smp_fail(e, 500, "%s: not a list", name);
    return -1;
  }
  if (live == NULL && pv == NULL)
    return 0;
  if (pv == NULL)
    merged = json_incref(live);
  else if (live == NULL)
    merged = strip_directives(pv);
  else if ((merged = smp_list_field(type, name, live, pv, 0, e)) == NULL)
    return -1;
  out = normalize_order(merged, order, live ? live : merged, key);
  json_decref(merged);
  json_object_set_new(orig, name, out);
  return 0;
}

/* mergeMap(): <patch> (borrowed) into <orig> (taken; NULL for none), a map
 * of <type>. Returns the merged map, NULL on error. */
static json_t *smp_map(json_t *orig, json_t *patch, enum smp_type type, struct smp_error *e) {
  json_t *directive = json_object_get(patch, "$patch"), *retain, *pv, *cur, *merged;
  const char *key, *name;
  void *tmp;
  int delete_list;

  if (directive != NULL) {
    json_decref(orig);
    if (json_is_string(directive) && strcmp(json_string_value(directive), "replace") == 0)
      return strip_directives(patch);
    if (json_is_string(directive) && strcmp(json_string_value(directive), "delete") == 0)
      return json_object();
    return smp_fail(e, 500, "Unknown patch type: %s in map",
                    json_is_string(directive) ? json_string_value(directive) : "(not a string)");
  }
  if (!json_is_object(orig)) {
    json_decref(orig);
    orig = json_object();
  }
  /* $retainKeys: the live keys it does not list go; the patch may not set
   * one it does not list. */
  if ((retain = json_object_get(patch, "$retainKeys")) != NULL) {
    size_t i;
    json_t *x;
    int listed;
    if (!json_is_array(retain))
      goto bad_retain;
    json_object_foreach(patch, key, pv) {
      if (json_is_null(pv) || key[0] == '$')
        continue;
      listed = 0;
      json_array_foreach(retain, i, x) listed |= json_is_string(x) && strcmp(json_string_value(x), key) == 0;
      if (!listed)
        goto bad_retain;
    }
    json_object_foreach_safe(orig, tmp, key, cur) {
      listed = 0;
      json_array_foreach(retain, i, x) listed |= json_is_string(x) && strcmp(json_string_value(x), key) == 0;
      if (!listed)
        json_object_del(orig, key);
    }
  }
  json_object_foreach(patch, key, pv) {
    if (strncmp(key, "$setElementOrder/", 17) == 0 &&
        set_element_order(orig, patch, type, key + 17, pv, e) != 0)
      goto fail;
  }
  json_object_foreach(patch, key, pv) {
    name = key;
    delete_list = 0;
    if (strncmp(key, "$deleteFromPrimitiveList/", 25) == 0) {
      name = key + 25;
      delete_list = 1;
    } else if (key[0] == '$') {
      continue; /* handled above, or not a field of any API type */
    }
    /* Lists $setElementOrder put together are done. */
    if (!delete_list && json_is_array(pv)) {
      char order[300];
      snprintf(order, sizeof(order), "$setElementOrder/%s", name);
      if (json_object_get(patch, order) != NULL)
        continue;
    }
    if (json_is_null(pv)) {
      json_object_del(orig, name);
      continue;
    }
    cur = json_object_get(orig, name);
    if (cur == NULL) {
      if (!delete_list)
        json_object_set_new(orig, name, strip_patch(pv, 1));
      continue;
    }
    if (value_class(cur) != value_class(pv)) {
      json_object_set_new(orig, name, strip_directives(pv));
    } else if (json_is_object(cur)) {
      const struct smp_field *f = smp_field(type, name);
      merged = smp_map(json_incref(cur), pv, f != NULL ? f->type : SMP_PLAIN, e);
      if (merged == NULL)
        goto fail;
      json_object_set_new(orig, name, merged);
    } else if (json_is_array(cur)) {
      merged = smp_list_field(type, name, cur, pv, delete_list, e);
      if (merged == NULL)
        goto fail;
      json_object_set_new(orig, name, merged);
    } else {
      json_object_set(orig, name, pv);
    }
  }
  return orig;
bad_retain:
  smp_fail(e, 400, "invalid patch format of retainKeys");
fail:
  json_decref(orig);
  return NULL;
}

json_t *strategic_merge_patch(json_t *target, json_t *patch, enum sim_kind k,
                              struct smp_error *err) {
  memset(err, 0, sizeof(*err));
  if (!json_is_object(patch)) {
    json_decref(target);
    return smp_fail(err, 400, "json: cannot unmarshal %s into Go value of type map[string]interface {}",
                    json_is_array(patch) ? "array" : "value");
  }
  return smp_map(target, patch, k == K_COUNT ? SMP_PLAIN : smp_root(k), err);
}

/* Unescapes one JSON pointer token (~1 -> /, ~0 -> ~) in place. */
static void ptr_unescape(char *t) {
  char *r = t, *w = t;

  while (*r) {
    if (r[0] == '~' && r[1] == '1') {
      *w++ = '/';
      r += 2;
    } else if (r[0] == '~' && r[1] == '0') {
      *w++ = '~';
      r += 2;
    } else {
      *w++ = *r++;
    }
  }
  *w = '\0';
}

/* Resolves all but the last token of <path>; returns the parent and puts the
 * last token in <last> (caller frees). */
static json_t *ptr_parent(json_t *root, const char *path, char **last) {
  char *copy, *p, *slash;
  json_t *cur = root;

  if (path[0] != '/')
    return NULL;
  copy = strdup(path + 1);
  if (copy == NULL)
    return NULL;
  p = copy;
  while ((slash = strchr(p, '/')) != NULL) {
    *slash = '\0';
    ptr_unescape(p);
    if (json_is_object(cur)) {
      cur = json_object_get(cur, p);
    } else if (json_is_array(cur)) {
      char *end;
      long i = strtol(p, &end, 10);
      cur = (*end == '\0' && i >= 0) ? json_array_get(cur, (size_t)i) : NULL;
    } else {
      cur = NULL;
    }
    if (cur == NULL) {
      free(copy);
      return NULL;
    }
    p = slash + 1;
  }
  ptr_unescape(p);
  *last = strdup(p);
  free(copy);
  return *last ? cur : NULL;
}

/* A JSON pointer array index: decimal digits only, no sign or leading
 * zero (RFC 6901 section 4). Returns -1 when <t> is not one. */
static long array_index(const char *t) {
  long v = 0;

  if (*t == '\0' || (t[0] == '0' && t[1] != '\0'))
    return -1;
  for (; *t; t++) {
    if (*t < '0' || *t > '9' || v > 100000000)
      return -1;
    v = v * 10 + (*t - '0');
  }
  return v;
}

/* The value <path> names in <doc> (borrowed), or NULL. "" is the whole
 * document. */
static json_t *ptr_get(json_t *doc, const char *path) {
  char *last = NULL;
  json_t *parent, *v = NULL;
  long idx;

  if (*path == '\0')
    return doc;
  if ((parent = ptr_parent(doc, path, &last)) != NULL) {
    if (json_is_object(parent))
      v = json_object_get(parent, last);
    else if (json_is_array(parent) && (idx = array_index(last)) >= 0)
      v = json_array_get(parent, (size_t)idx);
  }
  free(last);
  return v;
}

/* RFC 6902 add (or, with <replace>, replace) of <value> (borrowed) at
 * <path>. */
static int op_add(json_t *doc, const char *path, json_t *value, int replace, char *err, size_t errlen) {
  char *last = NULL;
  json_t *parent = ptr_parent(doc, path, &last);
  long idx;
  int rc = 0;

  if (parent == NULL) {
    snprintf(err, errlen, "path %s does not exist", path);
    rc = -EINVAL;
  } else if (json_is_object(parent)) {
    if (replace && json_object_get(parent, last) == NULL) {
      snprintf(err, errlen, "replace operation does not apply: doc is missing key: %s", path);
      rc = -EINVAL;
    } else {
      json_object_set(parent, last, value);
    }
  } else if (json_is_array(parent)) {
    idx = array_index(last);
    if (!replace && strcmp(last, "-") == 0)
      json_array_append(parent, value);
    else if (idx < 0)
      rc = -EINVAL;
    else if (replace)
      rc = json_array_set(parent, (size_t)idx, value) == 0 ? 0 : -EINVAL;
    else
      rc = json_array_insert(parent, (size_t)idx, value) == 0 ? 0 : -EINVAL;
    if (rc)
      snprintf(err, errlen, "%s: %s", idx < 0 && strcmp(last, "-") != 0 ? "invalid array index"
               : "array index out of range", path);
  } else {
    snprintf(err, errlen, "path %s does not name an object or array member", path);
    rc = -EINVAL;
  }
  free(last);
  return rc;
}

/* RFC 6902 remove of <path>. */
static int op_remove(json_t *doc, const char *path, char *err, size_t errlen) {
  char *last = NULL;
  json_t *parent = ptr_parent(doc, path, &last);
  long idx;
  int rc = -EINVAL;

  if (json_is_object(parent))
    rc = json_object_del(parent, last) == 0 ? 0 : -EINVAL;
  else if (json_is_array(parent) && (idx = array_index(last)) >= 0)
    rc = json_array_remove(parent, (size_t)idx) == 0 ? 0 : -EINVAL;
  if (rc)
    snprintf(err, errlen, "unable to remove nonexistent key: %s", path);
  free(last);
  return rc;
}

int json_patch_apply(json_t *doc, json_t *ops, char *err, size_t errlen) {
  size_t i;
  json_t *op;

  if (!json_is_array(ops)) {
    snprintf(err, errlen, "json patch must be an array of operations");
    return -EINVAL;
  }
  json_array_foreach(ops, i, op) {
    const char *name = json_get_str(op, "op"), *path = json_get_str(op, "path");
    const char *from = json_get_str(op, "from");
    json_t *value = json_object_get(op, "value"), *cur;
    int rc;

    if (name == NULL || path == NULL) {
      snprintf(err, errlen, "operation %zu lacks op or path", i);
      return -EINVAL;
    }
    if (strcmp(name, "test") == 0) {
      cur = ptr_get(doc, path);
      rc = cur != NULL && value != NULL && json_equal(cur, value) ? 0 : -EINVAL;
      if (rc)
        snprintf(err, errlen, "testing value %s failed", path);
    } else if (strcmp(name, "remove") == 0) {
      rc = op_remove(doc, path, err, errlen);
    } else if ((strcmp(name, "add") == 0 || strcmp(name, "replace") == 0) && value != NULL) {
      rc = op_add(doc, path, value, name[0] == 'r', err, errlen);
    } else if ((strcmp(name, "copy") == 0 || strcmp(name, "move") == 0) && from != NULL) {
      /* The value at <from>, added at <path>; move removes it first. */
      cur = ptr_get(doc, from);
      if (cur == NULL) {
        snprintf(err, errlen, "%s operation does not apply: doc is missing from path: %s", name, from);
        return -EINVAL;
      }
      cur = json_deep_copy(cur);
      rc = name[0] == 'm' ? op_remove(doc, from, err, errlen) : 0;
      if (rc == 0)
        rc = op_add(doc, path, cur, 0, err, errlen);
      json_decref(cur);
    } else {
      snprintf(err, errlen, "unsupported json patch operation %s", name);
      rc = -EINVAL;
    }
    if (rc)
      return rc;
  }
  return 0;
}
