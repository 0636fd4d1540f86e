/* podargs.c - pod option and secret flags into a request body (see
 * podargs.h for the flags and the toleration grammar).
 *
 * The checks repeat the router's (cluster_adapter/src/podopts.c for pod
 * options, router/src/secrets.c for secret names) so that a bad flag is a
 * usage error (exit 2) caught here, not an API error (exit 1) after a round
 * trip; the router checks again, so nothing relies on these alone.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/labels.h"
#include "fr/util.h"
#include "podargs.h"

/* The agent's directory in every sandbox pod (cluster_adapter/src/podopts.h). */
#define AGENT_DIR "/fr-agent"

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -EINVAL;
}

int fc_dns_subdomain_valid(const char *s) {
  size_t len = strlen(s), i;

  if (len == 0 || len > 253)
    return 0;
  for (i = 0; i < len; i++) {
    char c = s[i];
    int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && c != '-' && c != '.')
      return 0;
    /* Each dot-separated part starts and ends alphanumeric. */
    if (!alnum && (i == 0 || i == len - 1 || s[i - 1] == '.' || (c == '.' && s[i - 1] == '-')))
      return 0;
  }
  return 1;
}

int fc_mount_path_valid(const char *p) {
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
  return strcmp(p, AGENT_DIR) != 0 && strncmp(p, AGENT_DIR "/", strlen(AGENT_DIR) + 1) != 0;
}

/* Member <key> of <body>: an object or array, made when missing. NULL when
 * it cannot be made. */
static json_t *member(json_t *body, const char *key, int array) {
  json_t *v = json_object_get(body, key);

  if (v != NULL)
    return v;
  v = array ? json_array() : json_object();
  if (v == NULL || json_object_set_new(body, key, v) != 0)
    return NULL;
  return v;
}

/* An env var name, as the router wants secret names. */
static int env_name_valid(const char *s) {
  size_t i;

  if (*s == '\0' || strlen(s) > FC_POD_MAX_SECRET_NAME || (*s >= '0' && *s <= '9'))
    return 0;
  for (i = 0; s[i] != '\0'; i++) {
    char c = s[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      return 0;
  }
  return 1;
}

int fc_pod_add_secret(json_t *body, const char *arg, char *err, size_t errlen) {
  json_t *arr, *v;
  size_t i;

  if (!env_name_valid(arg))
    return fail(err, errlen,
                "--secret '%s': want an env var name (a letter or '_', then letters, digits or '_', at most %d "
                "characters): the key of your Secret that becomes that variable",
                arg, FC_POD_MAX_SECRET_NAME);
  if ((arr = member(body, "secrets", 1)) == NULL)
    return -ENOMEM;
  json_array_foreach(arr, i, v)
    if (strcmp(json_string_value(v), arg) == 0)
      return fail(err, errlen, "--secret %s is given twice", arg);
  if (json_array_size(arr) >= FC_POD_MAX_SECRETS)
    return fail(err, errlen, "--secret: at most %d secrets", FC_POD_MAX_SECRETS);
  return json_array_append_new(arr, json_string(arg)) == 0 ? 0 : -ENOMEM;
}

int fc_pod_set_gpus(json_t *body, const char *arg, char *err, size_t errlen) {
  int64_t n;

  if (fr_parse_int64(arg, 0, FC_POD_MAX_GPUS, &n) != 0)
    return fail(err, errlen, "--gpus '%s': want a whole number from 0 to %d", arg, FC_POD_MAX_GPUS);
  return json_object_set_new(body, "gpus", json_integer(n)) == 0 ? 0 : -ENOMEM;
}

int fc_pod_set_runtime_class(json_t *body, const char *arg, char *err, size_t errlen) {
  if (!fc_dns_subdomain_valid(arg))
    return fail(err, errlen,
                "--runtime-class '%s': want a RuntimeClass name (a lowercase DNS subdomain: a-z, 0-9, '-' and "
                "'.', alphanumeric at both ends, at most 253 characters)",
                arg);
  return json_object_set_new(body, "runtime_class", json_string(arg)) == 0 ? 0 : -ENOMEM;
}

/* "KEY=VALUE" of --<flag> into <key> (at most <keylen> - 1 bytes) and
 * *<value> (inside <arg>), both checked as label syntax. */
static int label_pair(const char *flag, const char *arg, char *key, size_t keylen, const char **value, char *err,
                      size_t errlen) {
  const char *eq = strchr(arg, '=');
  size_t n;

  if (eq == NULL || eq == arg)
    return fail(err, errlen, "--%s '%s': want KEY=VALUE", flag, arg);
  n = (size_t)(eq - arg);
  if (n >= keylen)
    return fail(err, errlen, "--%s '%s': the key is too long", flag, arg);
  memcpy(key, arg, n);
  key[n] = '\0';
  if (!fr_label_key_valid(key))
    return fail(err, errlen,
                "--%s '%s': '%s' is not a valid label key (up to 63 of [A-Za-z0-9._-], alphanumeric at both "
                "ends, optional DNS prefix and '/')",
                flag, arg, key);
  if (!fr_label_value_valid(eq + 1))
    return fail(err, errlen,
                "--%s '%s': '%s' is not a valid label value (up to 63 of [A-Za-z0-9._-], alphanumeric at both "
                "ends, or empty)",
                flag, arg, eq + 1);
  *value = eq + 1;
  return 0;
}

int fc_pod_add_node_selector(json_t *body, const char *arg, char *err, size_t errlen) {
  char key[320];
  const char *value = NULL;
  json_t *sel;
  int rc;

  if ((rc = label_pair("node-selector", arg, key, sizeof(key), &value, err, errlen)) != 0)
    return rc;
  if ((sel = member(body, "node_selector", 0)) == NULL)
    return -ENOMEM;
  if (json_object_get(sel, key) != NULL)
    return fail(err, errlen, "--node-selector: the key %s is given twice", key);
  if (json_object_size(sel) >= FC_POD_MAX_SELECTOR)
    return fail(err, errlen, "--node-selector: at most %d keys", FC_POD_MAX_SELECTOR);
  return json_object_set_new(sel, key, json_string(value)) == 0 ? 0 : -ENOMEM;
}

int fc_pod_add_toleration(json_t *body, const char *arg, char *err, size_t errlen) {
  char kv[400], key[400], eff[32];
  const char *colon = strchr(arg, ':'), *effect = NULL, *secs_s = NULL, *eq, *value = NULL;
  size_t n = colon != NULL ? (size_t)(colon - arg) : strlen(arg);
  int64_t secs = -1;
  json_t *t, *arr;

  /* Label keys and values have no ':', so the first one ends KEY=VALUE
   * and a second one starts SECONDS. */
  if (n >= sizeof(kv))
    return fail(err, errlen, "--toleration '%s': the key is too long", arg);
  memcpy(kv, arg, n);
  kv[n] = '\0';
  if (colon != NULL) {
    const char *c2 = strchr(colon + 1, ':');
    size_t en = c2 != NULL ? (size_t)(c2 - colon - 1) : strlen(colon + 1);
    if (en == 0 || en >= sizeof(eff))
      return fail(err, errlen, "--toleration '%s': after ':' give an effect: NoSchedule, PreferNoSchedule or "
                  "NoExecute (leave out ':EFFECT' to tolerate every effect)", arg);
    memcpy(eff, colon + 1, en);
    eff[en] = '\0';
    effect = eff;
    if (strcmp(effect, "NoSchedule") != 0 && strcmp(effect, "PreferNoSchedule") != 0 &&
        strcmp(effect, "NoExecute") != 0)
      return fail(err, errlen, "--toleration '%s': the effect '%s' is not NoSchedule, PreferNoSchedule or "
                  "NoExecute", arg, effect);
    if (c2 != NULL) {
      secs_s = c2 + 1;
      if (strcmp(effect, "NoExecute") != 0)
        return fail(err, errlen, "--toleration '%s': seconds (tolerationSeconds) go with NoExecute only", arg);
      if (fr_parse_int64(secs_s, 0, FC_POD_MAX_TOLERATION_S, &secs) != 0)
        return fail(err, errlen, "--toleration '%s': '%s' is not a number of seconds from 0 to %d", arg, secs_s,
                    FC_POD_MAX_TOLERATION_S);
    }
  }
  if (kv[0] == '\0')
    return fail(err, errlen, "--toleration '%s': give a taint KEY, or '*' for every taint "
                "(KEY[=VALUE][:EFFECT[:SECONDS]])", arg);
  if ((eq = strchr(kv, '=')) != NULL) {
    n = (size_t)(eq - kv);
    memcpy(key, kv, n);
    key[n] = '\0';
    value = eq + 1;
  } else {
    snprintf(key, sizeof(key), "%s", kv);
  }
  if (strcmp(key, "*") == 0) {
    if (value != NULL)
      return fail(err, errlen, "--toleration '%s': '*' (every taint) takes no value", arg);
  } else if (key[0] == '\0') {
    return fail(err, errlen, "--toleration '%s': a value needs a KEY (KEY=VALUE)", arg);
  } else if (!fr_label_key_valid(key)) {
    return fail(err, errlen,
                "--toleration '%s': '%s' is not a valid taint key (up to 63 of [A-Za-z0-9._-], alphanumeric at "
                "both ends, optional DNS prefix and '/')",
                arg, key);
  } else if (value != NULL && !fr_label_value_valid(value)) {
    return fail(err, errlen,
                "--toleration '%s': '%s' is not a valid taint value (up to 63 of [A-Za-z0-9._-], alphanumeric "
                "at both ends, or empty)",
                arg, value);
  }
  if ((arr = member(body, "tolerations", 1)) == NULL)
    return -ENOMEM;
  if (json_array_size(arr) >= FC_POD_MAX_TOLERATIONS)
    return fail(err, errlen, "--toleration: at most %d tolerations", FC_POD_MAX_TOLERATIONS);
  /* Equal with an empty value is a toleration of its own (the taint
   * KEY= with no value); Exists never has one. */
  t = json_pack("{s:s}", "operator", value != NULL ? "Equal" : "Exists");
  if (t == NULL)
    return -ENOMEM;
  if (strcmp(key, "*") != 0)
    json_object_set_new(t, "key", json_string(key));
  if (value != NULL)
    json_object_set_new(t, "value", json_string(value));
  if (effect != NULL)
    json_object_set_new(t, "effect", json_string(effect));
  if (secs >= 0)
    json_object_set_new(t, "tolerationSeconds", json_integer(secs));
  return json_array_append_new(arr, t) == 0 ? 0 : -ENOMEM;
}

int fc_pod_add_volume(json_t *body, const char *arg, char *err, size_t errlen) {
  /* A mount path may hold '=', a claim name never: split at the last. */
  const char *eq = strrchr(arg, '=');
  char path[300];
  size_t n;
  json_t *vols;

  if (eq == NULL || eq == arg || eq[1] == '\0')
    return fail(err, errlen, "--volume '%s': want /MOUNT/PATH=CLAIM (a PersistentVolumeClaim in the sandbox "
                "namespace)", arg);
  n = (size_t)(eq - arg);
  if (n >= sizeof(path))
    return fail(err, errlen, "--volume '%s': the mount path is longer than 256 bytes", arg);
  memcpy(path, arg, n);
  path[n] = '\0';
  if (!fc_mount_path_valid(path))
    return fail(err, errlen,
                "--volume '%s': the mount path '%s' must be absolute and clean (no '.', '..', '//', trailing "
                "'/', ':' or blanks; not / or " AGENT_DIR ")",
                arg, path);
  if (!fc_dns_subdomain_valid(eq + 1))
    return fail(err, errlen,
                "--volume '%s': '%s' is not a PersistentVolumeClaim name (a lowercase DNS subdomain)", arg,
                eq + 1);
  if ((vols = member(body, "volumes", 0)) == NULL)
    return -ENOMEM;
  if (json_object_get(vols, path) != NULL)
    return fail(err, errlen, "--volume: the mount path %s is given twice", path);
  if (json_object_size(vols) >= FC_POD_MAX_VOLUMES)
    return fail(err, errlen, "--volume: at most %d volumes", FC_POD_MAX_VOLUMES);
  return json_object_set_new(vols, path, json_string(eq + 1)) == 0 ? 0 : -ENOMEM;
}

int fc_pod_set_readiness(json_t *body, const char *arg, char *err, size_t errlen) {
  const char *slash = strchr(arg, '/');
  char num[8];
  int64_t port;
  size_t n = slash != NULL ? (size_t)(slash - arg) : strlen(arg);

  if (n == 0 || n >= sizeof(num))
    return fail(err, errlen, "--readiness '%s': want PORT or PORT/PATH (49999/health)", arg);
  memcpy(num, arg, n);
  num[n] = '\0';
  if (fr_parse_int64(num, 1, 65535, &port) != 0)
    return fail(err, errlen, "--readiness '%s': the port must be a number from 1 to 65535", arg);
  if (slash != NULL && (strlen(slash) > 256 || strspn(slash, "/abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                             "0123456789-._~") != strlen(slash) ||
                        strstr(slash, "/.") != NULL))
    return fail(err, errlen, "--readiness '%s': the path must be a plain URL path of at most 256 characters", arg);
  return json_object_set_new(body, "readiness", json_pack("{s:I,s:s}", "port", (json_int_t)port, "path",
                                                          slash != NULL ? slash : "/")) == 0
             ? 0
             : -ENOMEM;
}

int fc_pod_add_public_port(json_t *body, const char *arg, char *err, size_t errlen) {
  json_t *cur = json_object_get(body, "public_ports");
  int64_t port;

  if (strcmp(arg, "*") == 0)
    return json_object_set_new(body, "public_ports", json_string("*")) == 0 ? 0 : -ENOMEM;
  if (fr_parse_int64(arg, 1, 65535, &port) != 0)
    return fail(err, errlen, "--public-port '%s': want a port from 1 to 65535, or * for every port", arg);
  if (json_is_string(cur))
    return 0; /* every port already */
  if (cur == NULL && json_object_set_new(body, "public_ports", cur = json_array()) != 0)
    return -ENOMEM;
  if (json_array_size(cur) >= FC_POD_MAX_PUBLIC_PORTS)
    return fail(err, errlen, "--public-port: at most %d ports (or *)", FC_POD_MAX_PUBLIC_PORTS);
  return json_array_append_new(cur, json_integer(port)) == 0 ? 0 : -ENOMEM;
}
