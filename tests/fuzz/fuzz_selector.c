/* fuzz_selector.c - label and field selectors (common/src/labels.c).
 *
 * Input: the selector on the first line; the optional following lines are
 * "key=value" labels of the object it is matched against (when none are
 * given, a sandbox pod's usual labels). The first byte picks the grammar:
 * 'F' parses the rest of the first line as a field selector over the
 * fields the router and kubesim know, anything else as a label selector
 * (the whole line, that byte included). Every parsed selector is also
 * matched, asked for its exact values and freed; the text and each label
 * go through the key/value validators.
 *
 * Properties checked beyond "no crash": a parse error always leaves a
 * message and no selector; a selector that parses is matched
 * deterministically (same answer twice).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fr/labels.h"

#define MAX_LABELS 32

struct object {
  struct fr_label l[MAX_LABELS];
  size_t n;
};

static const char *lookup(const void *obj, const char *key) {
  const struct object *o = obj;

  return fr_labels_get(o->l, o->n, key);
}

static const char *const known_fields[] = {
    "metadata.name", "metadata.namespace", "status.phase", "spec.nodeName", NULL,
};

static const char *const probe_keys[] = {
    "fedrouter.io/sandbox", "fedrouter.io/tenant", "fedrouter.io/pool", "app", "metadata.name", "",
};

static void check(int cond) {
  if (!cond)
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1), *line, *nl, *eq;
  struct fr_selector *sel = NULL;
  struct object o;
  char err[256];
  size_t i;
  int rc, fields;

  if (text == NULL)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  memset(&o, 0, sizeof(o));

  /* Labels after the first line. */
  nl = strchr(text, '\n');
  if (nl != NULL) {
    *nl = '\0';
    for (line = nl + 1; line != NULL && *line != '\0' && o.n < MAX_LABELS; line = nl) {
      nl = strchr(line, '\n');
      if (nl != NULL)
        *nl++ = '\0';
      eq = strchr(line, '=');
      if (eq == NULL)
        continue;
      *eq = '\0';
      o.l[o.n].key = line;
      o.l[o.n].value = eq + 1;
      (void)fr_label_key_valid(line);
      (void)fr_label_value_valid(eq + 1);
      o.n++;
    }
  }
  if (o.n == 0) {
    static const struct fr_label def[] = {
        {"fedrouter.io/sandbox", "true"}, {"fedrouter.io/tenant", "rl"},
        {"fedrouter.io/state", "claimed"}, {"metadata.name", "sb-1"},
        {"status.phase", "Running"},
    };
    memcpy(o.l, def, sizeof(def));
    o.n = sizeof(def) / sizeof(def[0]);
  }

  (void)fr_label_key_valid(text);
  (void)fr_label_value_valid(text);

  fields = text[0] == 'F';
  err[0] = '\0';
  if (fields)
    rc = fr_selector_parse_fields(text + 1, known_fields, &sel, err, sizeof(err));
  else
    rc = fr_selector_parse_labels(text, &sel, err, sizeof(err));
  if (rc != 0) {
    check(err[0] != '\0');
  } else {
    int m = fr_selector_matches(sel, lookup, &o);
    check(m == fr_selector_matches(sel, lookup, &o));
    (void)fr_selector_empty(sel);
    for (i = 0; i < sizeof(probe_keys) / sizeof(probe_keys[0]); i++) {
      const char *v = fr_selector_exact(sel, probe_keys[i]);
      if (v != NULL)
        check(strlen(v) <= size);
    }
    for (i = 0; i < o.n; i++)
      (void)fr_selector_exact(sel, o.l[i].key);
  }
  fr_selector_free(sel);
  free(text);
  return 0;
}
