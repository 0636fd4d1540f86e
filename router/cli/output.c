/* output.c - fedctl's human output: aligned tables, compact numbers and
 * kubectl-style durations, and safe getters for JSON members.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedctl.h"

int fc_table_init(struct fc_table *t, size_t ncols) {
  memset(t, 0, sizeof(*t));
  t->ncols = ncols;
  return 0;
}

void fc_table_close(struct fc_table *t) {
  size_t i;

  if (t == NULL)
    return;
  for (i = 0; i < t->ncells; i++)
    free(t->cells[i]);
  free(t->cells);
  memset(t, 0, sizeof(*t));
}

int fc_table_add(struct fc_table *t, const char *cell) {
  char *c;

  if (t->ncells == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    char **cells = realloc(t->cells, cap * sizeof(*cells));
    if (cells == NULL)
      return -ENOMEM;
    t->cells = cells;
    t->cap = cap;
  }
  if ((c = strdup(cell ? cell : "")) == NULL)
    return -ENOMEM;
  t->cells[t->ncells++] = c;
  return 0;
}

int fc_table_addf(struct fc_table *t, const char *fmt, ...) {
  struct fr_buf b;
  va_list ap;
  int rc;

  fr_buf_init(&b);
  va_start(ap, fmt);
  rc = fr_buf_vprintf(&b, fmt, ap);
  va_end(ap);
  if (rc == 0)
    rc = fc_table_add(t, b.data ? b.data : "");
  fr_buf_free(&b);
  return rc;
}

void fc_table_print(const struct fc_table *t, FILE *f) {
  size_t *w, i, c;

  if (t->ncols == 0 || t->ncells == 0)
    return;
  w = calloc(t->ncols, sizeof(*w));
  if (w == NULL) {
    /* Unaligned is better than nothing. */
    for (i = 0; i < t->ncells; i++)
      fprintf(f, "%s%s", t->cells[i], (i + 1) % t->ncols == 0 ? "\n" : "  ");
    return;
  }
  for (i = 0; i < t->ncells; i++) {
    size_t n = strlen(t->cells[i]);
    if (n > w[i % t->ncols])
      w[i % t->ncols] = n;
  }
  for (i = 0; i < t->ncells; i++) {
    c = i % t->ncols;
    if (c + 1 == t->ncols || i + 1 == t->ncells)
      fprintf(f, "%s\n", t->cells[i]); /* no trailing blanks */
    else
      fprintf(f, "%-*s  ", (int)w[c], t->cells[i]);
  }
  free(w);
}

const char *fc_jstr(const json_t *obj, const char *key, const char *dflt) {
  const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
  return json_is_string(v) ? json_string_value(v) : dflt;
}

int64_t fc_jint(const json_t *obj, const char *key, int64_t dflt) {
  const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;

  if (json_is_integer(v))
    return (int64_t)json_integer_value(v);
  if (json_is_real(v))
    return (int64_t)json_real_value(v);
  return dflt;
}

double fc_jnum(const json_t *obj, const char *key, double dflt) {
  const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
  return json_is_number(v) ? json_number_value(v) : dflt;
}

void fc_fmt_num(double v, char *out, size_t outlen) {
  /* %g with enough digits for "0.25" or "1.5", never "1e+00". */
  if (v == (double)(int64_t)v && v < 1e15 && v > -1e15)
    snprintf(out, outlen, "%" PRId64, (int64_t)v);
  else
    snprintf(out, outlen, "%.6g", v);
}

void fc_fmt_duration(int64_t s, char *out, size_t outlen) {
  if (s < 0)
    snprintf(out, outlen, "-");
  else if (s < 120)
    snprintf(out, outlen, "%" PRId64 "s", s);
  else if (s < 600)
    snprintf(out, outlen, "%" PRId64 "m%" PRId64 "s", s / 60, s % 60);
  else if (s < 3 * 3600)
    snprintf(out, outlen, "%" PRId64 "m", s / 60);
  else if (s < 2 * 86400)
    snprintf(out, outlen, "%" PRId64 "h%" PRId64 "m", s / 3600, (s % 3600) / 60);
  else
    snprintf(out, outlen, "%" PRId64 "d%" PRId64 "h", s / 86400, (s % 86400) / 3600);
}

void fc_print_pod_options(const json_t *obj, const char *indent) {
  static const char *const keys[] = {"gpus", "runtime_class", "node_selector", "tolerations", "volumes", "readiness"};
  size_t i;

  for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
    const json_t *v = json_is_object(obj) ? json_object_get(obj, keys[i]) : NULL;
    char *txt;
    if (v == NULL || json_is_null(v))
      continue;
    txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    printf("%s%s:%*s%s\n", indent, keys[i], (int)(strlen(keys[i]) < 8 ? 8 - strlen(keys[i]) : 1), "",
           txt != NULL ? txt : "?");
    free(txt);
  }
}
