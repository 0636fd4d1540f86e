/* patch.c - JSON merge patch (RFC 7386), the map subset of strategic merge
 * patch, and JSON patch (RFC 6902). */
#include <errno.h>
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

/* The patchMergeKey of the list fields whose elements strategic merge
 * patch matches by key (k8s.io/api struct tags); other lists are replaced.
 * "ports" is keyed by containerPort in a container and port in a Service. */
static const char *list_merge_key(const char *field, json_t *elem) {
  static const char *const keys[][2] = {
      {"containers", "name"},         {"initContainers", "name"}, {"ephemeralContainers", "name"},
      {"volumes", "name"},            {"env", "name"},            {"imagePullSecrets", "name"},
      {"volumeMounts", "mountPath"},  {"volumeDevices", "devicePath"},
      {"ownerReferences", "uid"},
  };
  size_t i;

  if (strcmp(field, "ports") == 0)
    return json_object_get(elem, "containerPort") != NULL ? "containerPort" : "port";
  for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
    if (strcmp(keys[i][0], field) == 0)
      return keys[i][1];
  return NULL;
}

/* Patch list <patch> (borrowed) onto <target> (taken, may be NULL) of
 * field <field>: elements with the same merge key merge, new ones are
 * appended, {"$patch":"delete", key} removes one. */
static json_t *merge_list(json_t *target, json_t *patch, const char *field) {
  size_t i, t;
  json_t *p;

  if (!json_is_array(target) || json_array_size(patch) == 0 ||
      list_merge_key(field, json_array_get(patch, 0)) == NULL) {
    json_decref(target);
    return json_deep_copy(patch);
  }
  json_array_foreach(patch, i, p) {
    const char *key = json_is_object(p) ? list_merge_key(field, p) : NULL;
    json_t *want = key ? json_object_get(p, key) : NULL, *cur;
    const char *directive = json_is_object(p) ? json_string_value(json_object_get(p, "$patch")) : NULL;
    size_t found = (size_t)-1;

    if (want == NULL) {
      /* not a keyed element: the list is replaced, as a plain merge would */
      json_decref(target);
      return json_deep_copy(patch);
    }
    json_array_foreach(target, t, cur) {
      if (json_is_object(cur) && json_equal(json_object_get(cur, key), want)) {
        found = t;
        break;
      }
    }
    if (directive != NULL && strcmp(directive, "delete") == 0) {
      if (found != (size_t)-1)
        json_array_remove(target, found);
      continue;
    }
    if (found != (size_t)-1) {
      cur = json_array_get(target, found);
      json_array_set_new(target, found, strategic_merge_patch(json_incref(cur), p));
    } else {
      json_array_append_new(target, strategic_merge_patch(NULL, p));
    }
  }
  return target;
}

json_t *strategic_merge_patch(json_t *target, json_t *patch) {
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
    /* $setElementOrder, $retainKeys, $deleteFromPrimitiveList and a map's
     * $patch are directives, not fields. */
    if (key[0] == '$')
      continue;
    if (json_is_null(v)) {
      json_object_del(target, key);
    } else {
      json_t *cur = json_object_get(target, key);
      json_t *merged = json_is_array(v) ? merge_list(cur ? json_incref(cur) : NULL, v, key)
                                        : strategic_merge_patch(cur ? json_incref(cur) : NULL, v);
      json_object_set_new(target, key, merged);
    }
  }
  return target;
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
