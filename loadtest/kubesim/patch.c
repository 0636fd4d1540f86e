/* patch.c - JSON merge patch (RFC 7386), strategic merge patch as the API
 * server applies it to the built-in kinds, and JSON patch (RFC 6902). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/util.h"
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

/* The lists the Kubernetes types mark patchStrategy "merge", by the path of
 * field names that leads to them (list positions left out), matched as a
 * suffix on whole names: "spec.containers" is also a Deployment's
 * "spec.template.spec.containers". <key> is the patchMergeKey; NULL marks a
 * list of scalars merged as a set (metadata.finalizers). Every other list
 * is replaced by the patch's, as the API server does. */
static const struct {
  const char *path, *key;
} merge_lists[] = {
    {"metadata.ownerReferences", "uid"},
    {"metadata.finalizers", NULL},
    {"spec.containers", "name"},
    {"spec.initContainers", "name"},
    {"spec.ephemeralContainers", "name"},
    {"containers.env", "name"},
    {"initContainers.env", "name"},
    {"ephemeralContainers.env", "name"},
    {"containers.ports", "containerPort"},
    {"initContainers.ports", "containerPort"},
    {"ephemeralContainers.ports", "containerPort"},
    {"containers.volumeMounts", "mountPath"},
    {"initContainers.volumeMounts", "mountPath"},
    {"ephemeralContainers.volumeMounts", "mountPath"},
    {"containers.volumeDevices", "devicePath"},
    {"initContainers.volumeDevices", "devicePath"},
    {"ephemeralContainers.volumeDevices", "devicePath"},
    {"spec.volumes", "name"},
    {"spec.imagePullSecrets", "name"},
    {"spec.hostAliases", "ip"},
    {"spec.ports", "port"},       /* a Service's */
    {"status.conditions", "type"},
    {"status.podIPs", "ip"},
    {"status.hostIPs", "ip"},
    {"status.addresses", "type"}, /* a Node's */
};

struct smp {
  char path[512];  /* field names from the root, '.'-joined */
  size_t len;      /* strlen(path), or sizeof(path) once too deep: no rules */
  char *err;
  size_t errlen;
};

/* The merge rule of the list at s->path: 1 with <key> set (NULL: a set of
 * scalars), or 0 when the list is replaced. */
static int merge_rule(const struct smp *s, const char **key) {
  size_t i, n;

  for (i = 0; i < FR_ARRAY_SIZE(merge_lists) && s->len < sizeof(s->path); i++) {
    n = strlen(merge_lists[i].path);
    if (n <= s->len && strcmp(s->path + s->len - n, merge_lists[i].path) == 0 &&
        (n == s->len || s->path[s->len - n - 1] == '.')) {
      *key = merge_lists[i].key;
      return 1;
    }
  }
  return 0;
}

static json_t *smp_value(json_t *target, json_t *patch, struct smp *s);

/* What identifies list element <e>: its <key> member, or itself in a set. */
static json_t *elem_id(json_t *e, const char *key) {
  return key != NULL ? json_object_get(e, key) : e;
}

/* Index of the element of <list> identified by <id>, or -1. <skip_special>
 * leaves out "$patch" elements (a patch's directives). */
static long find_elem(json_t *list, const char *key, json_t *id, int skip_special) {
  size_t i;
  json_t *e;

  json_array_foreach(list, i, e) {
    if (skip_special && key != NULL && json_object_get(e, "$patch") != NULL)
      continue;
    if (id != NULL && json_equal(elem_id(e, key), id))
      return (long)i;
  }
  return -1;
}

/* mergepatch.ErrNoMergeKey, with the element as JSON. */
static void no_merge_key(struct smp *s, json_t *elem, const char *key) {
  char *text = json_dumps(elem, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);

  snprintf(s->err, s->errlen, "map: %s does not contain declared merge key: %s",
           text ? text : "?", key);
  free(text);
}

/* Merges the list <patch> (borrowed) into the list <target> (taken) by
 * <key>, as the API server's mergeSlice does: "$patch: delete" elements
 * remove the ones they name and "$patch: replace" starts from an empty
 * list; an element whose key is known merges into that one, a new one is
 * added. The order is normalizeElementOrder's: the patch's elements in the
 * patch's order, each of the other ones put back before the first patch
 * element that follows it in the target; a new element has no place in the
 * target, so it goes before the target's remaining ones. NULL with s->err
 * set for a malformed patch. */
static json_t *smp_list(json_t *target, json_t *patch, const char *key, struct smp *s) {
  json_t *merged = json_array(), *mine = json_array(), *theirs = json_array(), *out = NULL, *e;
  size_t i, j;

  if (!json_is_array(target)) {
    json_decref(target);
    target = json_array();
  }
  if (merged == NULL || mine == NULL || theirs == NULL || target == NULL)
    goto done;
  /* Directives first (mergeSliceWithSpecialElements). */
  json_array_foreach(patch, i, e) {
    const char *directive;
    long at;
    if (key == NULL)
      break;
    if (!json_is_object(e)) {
      snprintf(s->err, s->errlen, "a list merged by %s holds an element that is not an object", key);
      goto done;
    }
    if ((directive = json_string_value(json_object_get(e, "$patch"))) == NULL)
      continue;
    if (strcmp(directive, "replace") == 0) {
      json_array_clear(target);
    } else if (strcmp(directive, "delete") == 0 && json_object_get(e, key) != NULL) {
      while ((at = find_elem(target, key, json_object_get(e, key), 0)) >= 0)
        json_array_remove(target, (size_t)at);
    } else if (strcmp(directive, "delete") == 0) {
      no_merge_key(s, e, key);
      goto done;
    } else {
      snprintf(s->err, s->errlen, "Unknown patch type: %s in map", directive);
      goto done;
    }
  }
  /* Merge or add (mergeSliceWithoutSpecialElements); <target> stays as
   * the order of reference. */
  json_array_extend(merged, target);
  json_array_foreach(patch, i, e) {
    json_t *m;
    long at;
    if (key != NULL && json_object_get(e, "$patch") != NULL)
      continue;
    if (elem_id(e, key) == NULL) {
      no_merge_key(s, e, key);
      goto done;
    }
    at = find_elem(merged, key, elem_id(e, key), 0);
    if (at >= 0 && key == NULL)
      continue; /* a set: there already */
    m = smp_value(at >= 0 ? json_incref(json_array_get(merged, (size_t)at)) : NULL, e, s);
    if (m == NULL)
      goto done;
    if (at >= 0)
      json_array_set_new(merged, (size_t)at, m);
    else
      json_array_append_new(merged, m);
  }
  /* The patch's elements in patch order, the others in target order. */
  json_array_foreach(patch, i, e) {
    long at = key != NULL && json_object_get(e, "$patch") != NULL
                  ? -1 : find_elem(merged, key, elem_id(e, key), 0);
    if (at >= 0 && find_elem(mine, key, elem_id(e, key), 0) < 0)
      json_array_append(mine, json_array_get(merged, (size_t)at));
  }
  json_array_foreach(merged, i, e) {
    if (find_elem(patch, key, elem_id(e, key), 1) < 0)
      json_array_append(theirs, e);
  }
  if ((out = json_array()) == NULL)
    goto done;
  for (i = 0, j = 0; i < json_array_size(theirs) || j < json_array_size(mine);) {
    json_t *l = json_array_get(theirs, i), *r = json_array_get(mine, j);
    long li = l ? find_elem(target, key, elem_id(l, key), 0) : -1;
    long ri = r ? find_elem(target, key, elem_id(r, key), 0) : -1;
    if (r == NULL || (l != NULL && li >= 0 && ri >= 0 && li < ri)) {
      json_array_append(out, l);
      i++;
    } else {
      json_array_append(out, r);
      j++;
    }
  }
done:
  json_decref(target);
  json_decref(merged);
  json_decref(mine);
  json_decref(theirs);
  return out;
}

/* Merges the object <patch> (borrowed) into <target> (taken), mergeMap:
 * null removes a member, "$patch: replace" starts from an empty object,
 * "$patch: delete" leaves an empty one, $retainKeys drops the members it
 * does not name, "$deleteFromPrimitiveList/F" removes values from the list
 * F; $setElementOrder is not modelled (the order stays the merge's). */
static json_t *smp_map(json_t *target, json_t *patch, struct smp *s) {
  const char *directive = json_string_value(json_object_get(patch, "$patch"));
  json_t *retain = json_object_get(patch, "$retainKeys"), *v;
  const char *k;
  void *tmp;

  if (directive != NULL && strcmp(directive, "delete") == 0) {
    json_decref(target);
    return json_object();
  }
  if (directive != NULL && strcmp(directive, "replace") != 0) {
    snprintf(s->err, s->errlen, "Unknown patch type: %s in map", directive);
    json_decref(target);
    return NULL;
  }
  if (!json_is_object(target) || directive != NULL) {
    json_decref(target);
    if ((target = json_object()) == NULL)
      return NULL;
  }
  if (json_is_array(retain)) {
    json_object_foreach_safe(target, tmp, k, v) {
      size_t i;
      json_t *name;
      int keep = 0;
      json_array_foreach(retain, i, name) {
        if (json_is_string(name) && strcmp(json_string_value(name), k) == 0)
          keep = 1;
      }
      if (!keep)
        json_object_del(target, k);
    }
  }
  json_object_foreach(patch, k, v) {
    size_t len = s->len, n = strlen(k);
    json_t *m;
    if (strncmp(k, "$deleteFromPrimitiveList/", 25) == 0) {
      json_t *list = json_object_get(target, k + 25), *gone;
      size_t i;
      long at;
      json_array_foreach(v, i, gone) {
        while (json_is_array(list) && (at = find_elem(list, NULL, gone, 0)) >= 0)
          json_array_remove(list, (size_t)at);
      }
      continue;
    }
    if (k[0] == '$')
      continue; /* $patch, $retainKeys, $setElementOrder/... */
    if (json_is_null(v)) {
      json_object_del(target, k);
      continue;
    }
    if (s->len < sizeof(s->path) && s->len + 1 + n < sizeof(s->path)) {
      snprintf(s->path + s->len, sizeof(s->path) - s->len, "%s%s", s->len ? "." : "", k);
      s->len += (s->len ? 1 : 0) + n;
    } else {
      s->len = sizeof(s->path);
    }
    m = smp_value(json_incref(json_object_get(target, k)), v, s);
    s->len = len;
    if (len < sizeof(s->path))
      s->path[len] = '\0';
    if (m == NULL) {
      json_decref(target);
      return NULL;
    }
    json_object_set_new(target, k, m);
  }
  return target;
}

/* <patch> (borrowed) applied to <target> (taken, may be NULL) at s->path. */
static json_t *smp_value(json_t *target, json_t *patch, struct smp *s) {
  const char *key;

  if (json_is_object(patch))
    return smp_map(target, patch, s);
  if (json_is_array(patch) && merge_rule(s, &key))
    return smp_list(target, patch, key, s);
  json_decref(target);
  if (json_is_array(patch)) {
    /* Replaced; what a new value carries is cleaned like the rest (no
     * nulls, no directives). */
    json_t *out = json_array(), *e, *m;
    size_t i;
    json_array_foreach(patch, i, e) {
      if ((m = smp_value(NULL, e, s)) == NULL) {
        json_decref(out);
        return NULL;
      }
      json_array_append_new(out, m);
    }
    return out;
  }
  return json_deep_copy(patch);
}

json_t *strategic_merge_patch(json_t *target, json_t *patch, char *err, size_t errlen) {
  struct smp s;

  if (!json_is_object(patch)) {
    json_decref(target);
    snprintf(err, errlen, "a strategic merge patch must be a JSON object");
    return NULL;
  }
  memset(&s, 0, sizeof(s));
  s.err = err;
  s.errlen = errlen;
  snprintf(err, errlen, "out of memory");
  return smp_map(target, patch, &s);
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

int json_patch_apply(json_t *doc, json_t *ops, char *err, size_t errlen) {
  size_t i;
  json_t *op;

  if (!json_is_array(ops)) {
    snprintf(err, errlen, "json patch must be an array of operations");
    return -EINVAL;
  }
  json_array_foreach(ops, i, op) {
    const char *name = json_get_str(op, "op"), *path = json_get_str(op, "path");
    json_t *value = json_object_get(op, "value"), *parent;
    char *last = NULL;
    long idx;
    int rc = 0;

    if (name == NULL || path == NULL) {
      snprintf(err, errlen, "operation %zu lacks op or path", i);
      return -EINVAL;
    }
    parent = ptr_parent(doc, path, &last);
    if (parent == NULL) {
      snprintf(err, errlen, "path %s does not exist", path);
      free(last);
      return -EINVAL;
    }
    idx = json_is_array(parent) ? array_index(last) : 0;
    if (idx < 0 && !(strcmp(last, "-") == 0 && strcmp(name, "add") == 0)) {
      snprintf(err, errlen, "invalid array index in %s", path);
      free(last);
      return -EINVAL;
    }
    if (strcmp(name, "test") == 0) {
      json_t *cur = json_is_object(parent) ? json_object_get(parent, last)
                                           : json_array_get(parent, (size_t)idx);
      if (cur == NULL || !json_equal(cur, value)) {
        snprintf(err, errlen, "testing value %s failed", path);
        rc = -EINVAL;
      }
    } else if (strcmp(name, "remove") == 0) {
      if (json_is_object(parent))
        rc = json_object_del(parent, last) == 0 ? 0 : -EINVAL;
      else
        rc = json_array_remove(parent, (size_t)idx) == 0 ? 0 : -EINVAL;
      if (rc)
        snprintf(err, errlen, "unable to remove nonexistent key: %s", path);
    } else if ((strcmp(name, "add") == 0 || strcmp(name, "replace") == 0) && value != NULL) {
      if (json_is_object(parent)) {
        if (strcmp(name, "replace") == 0 && json_object_get(parent, last) == NULL) {
          snprintf(err, errlen, "replace operation does not apply: doc is missing key: %s", path);
          rc = -EINVAL;
        } else {
          json_object_set(parent, last, value);
        }
      } else if (json_is_array(parent)) {
        if (strcmp(last, "-") == 0)
          json_array_append(parent, value);
        else if (strcmp(name, "add") == 0)
          rc = json_array_insert(parent, (size_t)idx, value) == 0 ? 0 : -EINVAL;
        else
          rc = json_array_set(parent, (size_t)idx, value) == 0 ? 0 : -EINVAL;
        if (rc)
          snprintf(err, errlen, "array index out of range: %s", path);
      } else {
        snprintf(err, errlen, "path %s does not name an object or array member", path);
        rc = -EINVAL;
      }
    } else {
      snprintf(err, errlen, "unsupported json patch operation %s", name);
      rc = -EINVAL;
    }
    free(last);
    if (rc)
      return rc;
  }
  return 0;
}
