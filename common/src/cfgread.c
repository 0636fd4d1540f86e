/*
 * fedrouter — reading libconfig trees with errors users can act on.
 */
#include "fr/cfgread.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *fr_cfg_type_name(int type) {
  switch (type) {
  case CONFIG_TYPE_GROUP: return "a group { ... }";
  case CONFIG_TYPE_INT:
  case CONFIG_TYPE_INT64: return "an integer";
  case CONFIG_TYPE_FLOAT: return "a float";
  case CONFIG_TYPE_STRING: return "a string";
  case CONFIG_TYPE_BOOL: return "a boolean";
  case CONFIG_TYPE_ARRAY: return "an array [ ... ]";
  case CONFIG_TYPE_LIST: return "a list ( ... )";
  default: return "nothing";
  }
}

int fr_cfg_line(const config_setting_t *s) {
  return s != NULL ? (int)config_setting_source_line(s) : 0;
}

/* Appends the dotted path of <s> to <buf> at <*len>. */
static void path_append(const config_setting_t *s, char *buf, size_t size, size_t *len) {
  const config_setting_t *parent;
  int n;

  if (s == NULL || config_setting_is_root(s))
    return;
  parent = config_setting_parent(s);
  path_append(parent, buf, size, len);
  if (*len >= size)
    return;
  if (parent != NULL && !config_setting_is_root(parent))
    buf[(*len)++] = '.';
  if (*len >= size) {
    *len = size;
    return;
  }
  if (config_setting_name(s) != NULL)
    n = snprintf(buf + *len, size - *len, "%s", config_setting_name(s));
  else
    n = snprintf(buf + *len, size - *len, "[%d]", config_setting_index(s));
  *len = n < 0 ? size : (*len + (size_t)n > size ? size : *len + (size_t)n);
}

void fr_cfg_setting_path(const config_setting_t *s, const char *key, char *buf, size_t size) {
  size_t len = 0;

  buf[0] = '\0';
  path_append(s, buf, size - 1, &len);
  if (len >= size)
    len = size - 1;
  buf[len] = '\0';
  if (key != NULL)
    snprintf(buf + len, size - len, "%s%s", len > 0 ? "." : "", key);
}

/* libconfig names @include'd files as written in the directive, relative
 * to the include directory <c->dir>. */
void fr_cfg_set_error_file(struct fr_cfgread *c, const char *file) {
  if (file == NULL || strcmp(file, c->path) == 0 || file[0] == '/' || c->dir == NULL)
    snprintf(c->file, c->file_size, "%s", file != NULL ? file : c->path);
  else
    snprintf(c->file, c->file_size, "%s/%s", c->dir, file);
}

__attribute__((format(printf, 4, 0)))
static int vfail(struct fr_cfgread *c, const config_setting_t *s, const char *key,
                 const char *fmt, va_list ap) {
  char path[256], file[1024], msg[1024];
  struct fr_cfgread one = *c;
  size_t n = 0;

  /* Formatted apart, so that the record keeps the first error. */
  one.file = file;
  one.file_size = sizeof(file);
  fr_cfg_set_error_file(&one, s != NULL ? config_setting_source_file(s) : NULL);
  fr_cfg_setting_path(s, key, path, sizeof(path));
  msg[0] = '\0';
  if (path[0] != '\0') {
    int w = snprintf(msg, sizeof(msg), "%s: ", path);
    n = w > 0 ? (size_t)w : 0;
    if (n >= sizeof(msg))
      n = sizeof(msg) - 1;
  }
  vsnprintf(msg + n, sizeof(msg) - n, fmt, ap);
  if (c->count++ == 0) {
    snprintf(c->file, c->file_size, "%s", file);
    *c->line = fr_cfg_line(s);
    snprintf(c->msg, c->msg_size, "%s", msg);
  }
  if (c->on_error != NULL)
    c->on_error(c->on_error_arg, file, fr_cfg_line(s), msg);
  return -EINVAL;
}

int fr_cfg_bad(struct fr_cfgread *c, const config_setting_t *s, const char *fmt, ...) {
  va_list ap;
  int rc;

  va_start(ap, fmt);
  rc = vfail(c, s, NULL, fmt, ap);
  va_end(ap);
  return rc;
}

int fr_cfg_missing(struct fr_cfgread *c, const config_setting_t *group, const char *key,
                   const char *fmt, ...) {
  va_list ap;
  int rc;

  va_start(ap, fmt);
  rc = vfail(c, group, key, fmt, ap);
  va_end(ap);
  return rc;
}

int fr_cfg_oom(struct fr_cfgread *c) {
  snprintf(c->file, c->file_size, "%s", c->path);
  *c->line = 0;
  snprintf(c->msg, c->msg_size, "out of memory");
  return -ENOMEM;
}

int fr_cfg_get_group(struct fr_cfgread *c, const config_setting_t *parent, const char *key,
                     const config_setting_t **out) {
  config_setting_t *s = config_setting_get_member(parent, key);

  *out = NULL;
  if (s == NULL)
    return 0;
  if (!config_setting_is_group(s))
    return fr_cfg_bad(c, s, "expected a group { ... }, got %s",
                      fr_cfg_type_name(config_setting_type(s)));
  *out = s;
  return 0;
}

int fr_cfg_get_list(struct fr_cfgread *c, const config_setting_t *parent, const char *key,
                    const config_setting_t **out) {
  config_setting_t *s = config_setting_get_member(parent, key);
  int i, n;

  *out = NULL;
  if (s == NULL)
    return 0;
  if (!(config_setting_is_list(s) || (config_setting_is_array(s) && config_setting_length(s) == 0)))
    return fr_cfg_bad(c, s, "expected a list of groups ( { ... }, { ... } ), got %s",
                      fr_cfg_type_name(config_setting_type(s)));
  n = config_setting_length(s);
  for (i = 0; i < n; i++) {
    const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
    if (!config_setting_is_group(e))
      return fr_cfg_bad(c, e, "expected a group { ... }, got %s",
                        fr_cfg_type_name(config_setting_type(e)));
  }
  *out = s;
  return 0;
}

int fr_cfg_get_string(struct fr_cfgread *c, const config_setting_t *group, const char *key,
                      int required, const char *what, const char **out,
                      const config_setting_t **setting) {
  config_setting_t *s = config_setting_get_member(group, key);
  const char *v;

  *out = NULL;
  if (setting != NULL)
    *setting = s;
  if (s == NULL) {
    if (required)
      return fr_cfg_missing(c, group, key, "missing (%s)", what);
    return 0;
  }
  if (config_setting_type(s) != CONFIG_TYPE_STRING)
    return fr_cfg_bad(c, s, "expected a string, got %s (put the value in double quotes)",
                      fr_cfg_type_name(config_setting_type(s)));
  v = config_setting_get_string(s);
  if (v == NULL || v[0] == '\0')
    return fr_cfg_bad(c, s, "must not be empty (%s)", what);
  *out = v;
  return 0;
}

int fr_cfg_get_number(struct fr_cfgread *c, const config_setting_t *group, const char *key,
                      double *out, const config_setting_t **setting) {
  config_setting_t *s = config_setting_get_member(group, key);

  if (setting != NULL)
    *setting = s;
  if (s == NULL)
    return 0;
  switch (config_setting_type(s)) {
  case CONFIG_TYPE_INT:
  case CONFIG_TYPE_INT64:
    *out = (double)config_setting_get_int64(s);
    return 0;
  case CONFIG_TYPE_FLOAT:
    *out = config_setting_get_float(s);
    return 0;
  case CONFIG_TYPE_STRING:
    return fr_cfg_bad(c, s, "expected a number, got a string (\"%s\"); write numbers without quotes",
                      config_setting_get_string(s));
  default:
    return fr_cfg_bad(c, s, "expected a number, got %s", fr_cfg_type_name(config_setting_type(s)));
  }
}
