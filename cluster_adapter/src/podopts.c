/* podopts.c - pod options: validation, the canonical record, and the pod
 * spec fields they become.
 *
 * Every check mirrors what the API server would refuse (names, label
 * syntax, toleration rules), so a bad request is a 400 naming the field
 * here rather than a 422 from one cluster half-way through a batch. The
 * record keeps the validated options as one canonical JSON object (keys
 * sorted, operator defaulted, gpus 0 dropped): equality of shapes, the
 * pool-spec annotation and the API answers all come from it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/adapter.h"
#include "fr/labels.h"
#include "fr/quantity.h"
#include "fr/urlsafe.h"
#include "podopts.h"

struct fr_podopts {
  int refs;
  json_t *j;     /* canonical, immutable */
  char *text;    /* its compact, key-sorted dump */
  int64_t gpus;
};

/* A DNS-1123 subdomain (PVC and RuntimeClass names): <= 253 characters
 * of [a-z0-9.-], each dot-separated part starting and ending alphanumeric. */
static int subdomain_valid(const char *s) {
  size_t len = strlen(s), i;

  if (len == 0 || len > 253)
    return 0;
  for (i = 0; i < len; i++) {
    char c = s[i];
    int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && c != '-' && c != '.')
      return 0;
    if (!alnum && (i == 0 || i == len - 1 || s[i - 1] == '.' || (c == '.' && s[i - 1] == '-')))
      return 0;
  }
  return 1;
}

/* An absolute, clean mount path: "/a/b", no empty, "." or ".." parts, no
 * trailing '/', printable ASCII without ':' (Docker's volume separator),
 * not "/" and not the agent's directory. */
static int mount_path_valid(const char *p) {
  size_t len = strlen(p), i;
  const char *seg;

  if (len < 2 || len > 256 || p[0] != '/' || p[len - 1] == '/')
    return 0;
  for (i = 0; i < len; i++)
    if (p[i] < 0x21 || p[i] > 0x7e || p[i] == ':' || p[i] == '\\')
      return 0;
  for (seg = p; seg != NULL; seg = strchr(seg + 1, '/')) {
    const char *end = strchr(seg + 1, '/');
    size_t n = end ? (size_t)(end - seg - 1) : strlen(seg + 1);
    if (n == 0 || (n == 1 && seg[1] == '.') || (n == 2 && seg[1] == '.' && seg[2] == '.'))
      return 0;
  }
  return strcmp(p, PODOPTS_AGENT_DIR) != 0 && strncmp(p, PODOPTS_AGENT_DIR "/", strlen(PODOPTS_AGENT_DIR) + 1) != 0;
}

#define FAIL(f, ...)                          \
  do {                                        \
    *field = f;                               \
    snprintf(msg, msglen, __VA_ARGS__);       \
    goto fail;                                \
  } while (0)

static const char *const toleration_keys[] = {"key", "operator", "value", "effect", "tolerationSeconds", NULL};

static int known_key(const char *const *keys, const char *k) {
  for (; *keys != NULL; keys++)
    if (strcmp(*keys, k) == 0)
      return 1;
  return 0;
}

/* One toleration, checked as the API server does, and its canonical form. */
static json_t *toleration_parse(json_t *t, size_t i, const char **field, char *msg, size_t msglen) {
  const char *k, *key = "", *op = "Equal", *value = NULL, *effect = NULL;
  json_t *v, *out;
  json_int_t secs = -1;

  if (!json_is_object(t))
    FAIL("tolerations", "tolerations[%zu] must be an object", i);
  json_object_foreach(t, k, v) {
    if (!known_key(toleration_keys, k))
      FAIL("tolerations", "tolerations[%zu] has an unknown field \"%.60s\" (key, operator, value, effect, "
           "tolerationSeconds)", i, k);
    if (strcmp(k, "tolerationSeconds") == 0) {
      if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 31536000)
        FAIL("tolerations", "tolerations[%zu].tolerationSeconds must be an integer from 0 to 31536000", i);
      secs = json_integer_value(v);
    } else if (!json_is_string(v)) {
      FAIL("tolerations", "tolerations[%zu].%s must be a string", i, k);
    }
  }
  if ((v = json_object_get(t, "key")) != NULL)
    key = json_string_value(v);
  if ((v = json_object_get(t, "operator")) != NULL)
    op = json_string_value(v);
  if ((v = json_object_get(t, "value")) != NULL)
    value = json_string_value(v);
  if ((v = json_object_get(t, "effect")) != NULL)
    effect = json_string_value(v);
  if (*key != '\0' && !fr_label_key_valid(key))
    FAIL("tolerations", "tolerations[%zu].key \"%.100s\" is not a valid label key", i, key);
  if (strcmp(op, "Equal") != 0 && strcmp(op, "Exists") != 0)
    FAIL("tolerations", "tolerations[%zu].operator must be Equal or Exists", i);
  if (strcmp(op, "Exists") == 0 && value != NULL && *value != '\0')
    FAIL("tolerations", "tolerations[%zu]: operator Exists takes no value", i);
  if (strcmp(op, "Equal") == 0 && *key == '\0')
    FAIL("tolerations", "tolerations[%zu]: operator Equal needs a key (an empty key tolerates everything only "
         "with Exists)", i);
  if (value != NULL && !fr_label_value_valid(value))
    FAIL("tolerations", "tolerations[%zu].value \"%.100s\" is not a valid label value", i, value);
  if (effect != NULL && *effect != '\0' && strcmp(effect, "NoSchedule") != 0 &&
      strcmp(effect, "PreferNoSchedule") != 0 && strcmp(effect, "NoExecute") != 0)
    FAIL("tolerations", "tolerations[%zu].effect must be NoSchedule, PreferNoSchedule or NoExecute", i);
  if (secs >= 0 && (effect == NULL || strcmp(effect, "NoExecute") != 0))
    FAIL("tolerations", "tolerations[%zu].tolerationSeconds needs effect NoExecute", i);
  out = json_pack("{s:s}", "operator", op);
  if (out == NULL)
    return NULL;
  if (*key != '\0')
    json_object_set_new(out, "key", json_string(key));
  if (value != NULL && *value != '\0')
    json_object_set_new(out, "value", json_string(value));
  if (effect != NULL && *effect != '\0')
    json_object_set_new(out, "effect", json_string(effect));
  if (secs >= 0)
    json_object_set_new(out, "tolerationSeconds", json_integer(secs));
  return out;
fail:
  return NULL;
}

int fr_podopts_parse(json_t *obj, struct fr_podopts **out, const char **field, char *msg, size_t msglen) {
  struct fr_podopts *o = NULL;
  json_t *c = json_object(), *v, *e;
  const char *k;
  size_t i;

  *out = NULL;
  *field = NULL;
  if (c == NULL)
    return -ENOMEM;
  if ((v = json_object_get(obj, "runtime_class")) != NULL) {
    if (!json_is_string(v) || !subdomain_valid(json_string_value(v)))
      FAIL("runtime_class", "runtime_class must be a RuntimeClass name (a lowercase DNS subdomain, at most 253 "
           "characters)");
    json_object_set(c, "runtime_class", v);
  }
  if ((v = json_object_get(obj, "node_selector")) != NULL) {
    if (!json_is_object(v) || json_object_size(v) > FR_PODOPTS_MAX_SELECTOR)
      FAIL("node_selector", "node_selector must be an object of at most %d label keys to values",
           FR_PODOPTS_MAX_SELECTOR);
    json_object_foreach(v, k, e) {
      if (!json_is_string(e) || !fr_label_key_valid(k) || !fr_label_value_valid(json_string_value(e)))
        FAIL("node_selector", "node_selector \"%.100s\" is not a valid label key with a string label value", k);
    }
    if (json_object_size(v) > 0)
      json_object_set_new(c, "node_selector", json_deep_copy(v));
  }
  if ((v = json_object_get(obj, "tolerations")) != NULL) {
    json_t *arr;
    if (!json_is_array(v) || json_array_size(v) > FR_PODOPTS_MAX_TOLERATIONS)
      FAIL("tolerations", "tolerations must be an array of at most %d toleration objects",
           FR_PODOPTS_MAX_TOLERATIONS);
    if ((arr = json_array()) == NULL)
      goto oom;
    json_array_foreach(v, i, e) {
      json_t *t = toleration_parse(e, i, field, msg, msglen);
      if (t == NULL) {
        json_decref(arr);
        if (*field != NULL)
          goto fail;
        goto oom;
      }
      json_array_append_new(arr, t);
    }
    if (json_array_size(arr) > 0)
      json_object_set_new(c, "tolerations", arr);
    else
      json_decref(arr);
  }
  if ((v = json_object_get(obj, "gpus")) != NULL) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > FR_PODOPTS_MAX_GPUS)
      FAIL("gpus", "gpus must be an integer from 0 to %d", FR_PODOPTS_MAX_GPUS);
    if (json_integer_value(v) > 0)
      json_object_set(c, "gpus", v);
  }
  if ((v = json_object_get(obj, "volumes")) != NULL) {
    if (!json_is_object(v) || json_object_size(v) > FR_PODOPTS_MAX_VOLUMES)
      FAIL("volumes", "volumes must be an object of at most %d mount paths to PersistentVolumeClaim names",
           FR_PODOPTS_MAX_VOLUMES);
    json_object_foreach(v, k, e) {
      if (!mount_path_valid(k))
        FAIL("volumes", "volume mount path \"%.100s\" must be an absolute, clean path (no '.', '..', '//' or "
             "trailing '/'; not / or %s)", k, PODOPTS_AGENT_DIR);
      if (!json_is_string(e) || !subdomain_valid(json_string_value(e)))
        FAIL("volumes", "volume \"%.100s\" must name a PersistentVolumeClaim (a lowercase DNS subdomain)", k);
    }
    if (json_object_size(v) > 0)
      json_object_set_new(c, "volumes", json_deep_copy(v));
  }
  if ((v = json_object_get(obj, "readiness")) != NULL) {
    /* The pod is Ready when the server the image starts answers this
     * HTTP GET (the Code Interpreter's /health on 49999): a claim never
     * hands out a sandbox whose server is still starting. */
    json_t *port = json_object_get(v, "port"), *path = json_object_get(v, "path");
    const char *ps = path != NULL ? json_string_value(path) : "/", *why;
    if (!json_is_object(v) || json_object_size(v) != (size_t)(1 + (path != NULL)) || !json_is_integer(port) ||
        json_integer_value(port) < 1 || json_integer_value(port) > 65535)
      FAIL("readiness", "readiness must be {\"port\": 1-65535, \"path\": \"/...\"} (path defaults to /)");
    if (ps == NULL || ps[0] != '/' || strlen(ps) > 256 || fr_url_path_check(ps, strlen(ps), &why) != 0 ||
        strpbrk(ps, "?#") != NULL)
      FAIL("readiness", "readiness.path must be an absolute URL path of at most 256 characters, without a query");
    json_object_set_new(c, "readiness", json_pack("{s:O,s:s}", "port", port, "path", ps));
  }
  if (json_object_size(c) == 0) {
    json_decref(c);
    return 0;
  }
  o = calloc(1, sizeof(*o));
  if (o == NULL)
    goto oom;
  o->refs = 1;
  o->j = c;
  o->gpus = json_integer_value(json_object_get(c, "gpus"));
  o->text = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
  if (o->text == NULL) {
    fr_podopts_unref(o);
    return -ENOMEM;
  }
  *out = o;
  return 0;
oom:
  json_decref(c);
  return -ENOMEM;
fail:
  json_decref(c);
  return -EINVAL;
}

#undef FAIL

struct fr_podopts *fr_podopts_ref(struct fr_podopts *o) {
  if (o != NULL)
    o->refs++;
  return o;
}

void fr_podopts_unref(struct fr_podopts *o) {
  if (o == NULL || --o->refs > 0)
    return;
  json_decref(o->j);
  free(o->text);
  free(o);
}

int fr_podopts_equal(const struct fr_podopts *a, const struct fr_podopts *b) {
  if (a == NULL || b == NULL)
    return a == b;
  return strcmp(a->text, b->text) == 0;
}

json_t *fr_podopts_json(const struct fr_podopts *o) {
  return o != NULL ? o->j : NULL;
}

int64_t fr_podopts_gpus(const struct fr_podopts *o) {
  return o != NULL ? o->gpus : 0;
}

/* ---- what the options become in a pod spec ---- */

int podopts_apply(const struct fr_podopts *o, const char *gpu_resource, json_t *spec) {
  json_t *c = json_array_get(json_object_get(spec, "containers"), 0), *v, *e;
  const char *k;
  size_t i = 0;
  int rc = 0;

  if (o == NULL)
    return 0;
  if (c == NULL)
    return -EINVAL;
  if ((v = json_object_get(o->j, "runtime_class")) != NULL)
    rc |= json_object_set(spec, "runtimeClassName", v);
  if ((v = json_object_get(o->j, "node_selector")) != NULL)
    rc |= json_object_set_new(spec, "nodeSelector", json_deep_copy(v));
  if ((v = json_object_get(o->j, "tolerations")) != NULL)
    rc |= json_object_set_new(spec, "tolerations", json_deep_copy(v));
  if (o->gpus > 0) {
    /* Extended resources: requests must equal limits; both are set. */
    json_t *res = json_object_get(c, "resources");
    char n[24];
    snprintf(n, sizeof(n), "%lld", (long long)o->gpus);
    rc |= json_object_set_new(json_object_get(res, "requests"), gpu_resource, json_string(n));
    rc |= json_object_set_new(json_object_get(res, "limits"), gpu_resource, json_string(n));
  }
  if ((v = json_object_get(o->j, "volumes")) != NULL) {
    json_t *vols = json_object_get(spec, "volumes"), *mounts = json_object_get(c, "volumeMounts");
    const char **keys = calloc(json_object_size(v), sizeof(*keys));
    size_t n = 0, j;
    if (keys == NULL)
      return -ENOMEM;
    /* Added to the agent's volume and mount, never in their place; in
     * mount path order, so a pool's pods and a cold create's agree. */
    if (vols == NULL)
      json_object_set_new(spec, "volumes", vols = json_array());
    if (mounts == NULL)
      json_object_set_new(c, "volumeMounts", mounts = json_array());
    json_object_foreach(v, k, e) keys[n++] = k;
    for (i = 1; i < n; i++)
      for (j = i; j > 0 && strcmp(keys[j - 1], keys[j]) > 0; j--) {
        const char *t = keys[j];
        keys[j] = keys[j - 1];
        keys[j - 1] = t;
      }
    for (i = 0; i < n; i++) {
      char name[32];
      snprintf(name, sizeof(name), "fr-vol-%zu", i);
      rc |= json_array_append_new(vols, json_pack("{s:s,s:{s:s}}", "name", name, "persistentVolumeClaim",
                                                  "claimName", json_string_value(json_object_get(v, keys[i]))));
      rc |= json_array_append_new(mounts, json_pack("{s:s,s:s}", "name", name, "mountPath", keys[i]));
    }
    free(keys);
  }
  if ((v = json_object_get(o->j, "readiness")) != NULL) {
    /* In place of the agent's probe; the port is named so a Service or a
     * NetworkPolicy can refer to it. */
    json_t *ports = json_object_get(c, "ports");
    json_int_t port = json_integer_value(json_object_get(v, "port"));
    int have = 0;
    if (ports == NULL)
      json_object_set_new(c, "ports", ports = json_array());
    json_array_foreach(ports, i, e) have |= json_integer_value(json_object_get(e, "containerPort")) == port;
    if (!have)
      rc |= json_array_append_new(ports, json_pack("{s:s,s:I,s:s}", "name", "app", "containerPort", port,
                                                   "protocol", "TCP"));
    rc |= json_object_set_new(c, "readinessProbe",
                              json_pack("{s:{s:O,s:I},s:i,s:i}", "httpGet", "path", json_object_get(v, "path"),
                                        "port", port, "periodSeconds", 1, "failureThreshold", 3));
  }
  return rc != 0 ? -ENOMEM : 0;
}

const char *podopts_runtime_class(const struct fr_podopts *o) {
  return o != NULL ? json_string_value(json_object_get(o->j, "runtime_class")) : NULL;
}

json_t *podopts_field(const struct fr_podopts *o, const char *name) {
  return o != NULL ? json_object_get(o->j, name) : NULL;
}

int64_t pod_gpus(json_t *containers, const char *res) {
  json_t *c;
  size_t i;
  int64_t sum = 0, v;

  if (res == NULL)
    res = "nvidia.com/gpu";
  json_array_foreach(containers, i, c) {
    json_t *r = json_object_get(c, "resources");
    const char *q = json_string_value(json_object_get(json_object_get(r, "requests"), res));
    if (q == NULL)
      q = json_string_value(json_object_get(json_object_get(r, "limits"), res));
    if (q != NULL && fr_quantity_parse_value(q, &v) == 0 && v > 0)
      sum += v;
  }
  return sum;
}

/* 1 if toleration <t> tolerates taint <taint> (the scheduler's rule). */
static int tolerates(json_t *t, json_t *taint) {
  const char *tk = json_string_value(json_object_get(t, "key"));
  const char *op = json_string_value(json_object_get(t, "operator"));
  const char *te = json_string_value(json_object_get(t, "effect"));
  const char *k = json_string_value(json_object_get(taint, "key"));
  const char *v = json_string_value(json_object_get(taint, "value"));
  const char *tv = json_string_value(json_object_get(t, "value"));

  if (te != NULL && strcmp(te, json_string_value(json_object_get(taint, "effect"))) != 0)
    return 0;
  if (tk == NULL) /* operator Exists with no key: every taint */
    return 1;
  if (k == NULL || strcmp(tk, k) != 0)
    return 0;
  return (op != NULL && strcmp(op, "Exists") == 0) || strcmp(tv ? tv : "", v ? v : "") == 0;
}

int podopts_node_admits(const struct fr_podopts *opts, json_t *node) {
  json_t *labels = json_object_get(json_object_get(node, "metadata"), "labels"), *v, *taint, *t;
  json_t *tols = podopts_field(opts, "tolerations");
  const char *k;
  size_t i, j;

  json_object_foreach(podopts_field(opts, "node_selector"), k, v) {
    const char *have = json_string_value(json_object_get(labels, k));
    if (have == NULL || strcmp(have, json_string_value(v)) != 0)
      return 0;
  }
  json_array_foreach(json_object_get(json_object_get(node, "spec"), "taints"), i, taint) {
    const char *effect = json_string_value(json_object_get(taint, "effect"));
    int ok = 0;
    if (effect == NULL || (strcmp(effect, "NoSchedule") != 0 && strcmp(effect, "NoExecute") != 0))
      continue;
    json_array_foreach(tols, j, t) ok |= tolerates(t, taint);
    if (!ok)
      return 0;
  }
  return 1;
}
