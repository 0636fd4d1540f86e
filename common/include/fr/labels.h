/* fr/labels.h - Kubernetes label syntax and label/field selectors.
 *
 * Label selector grammar (comma = AND):
 *   k=v  k==v  k!=v  k in (a,b)  k notin (a,b)  k  !k
 * Field selectors use the same parser restricted to =, == and != and to a
 * caller-supplied list of known field names.
 *
 * Matching works on any object through a lookup callback, so the simulator
 * can match stored objects and the router its cached pods without copying.
 */
#ifndef FR_LABELS_H
#define FR_LABELS_H

#include <stddef.h>

struct fr_label {
  const char *key;
  const char *value;
};

/* Returns the value of <key> in the <n> pairs at <v>, or NULL. */
const char *fr_labels_get(const struct fr_label *v, size_t n, const char *key);

/* Label key: optional DNS-1123 subdomain prefix (<= 253) and '/', then a
 * name of 1-63 chars [A-Za-z0-9._-] starting and ending alphanumeric.
 * Returns 1 if valid. */
int fr_label_key_valid(const char *key);
/* Label value: empty, or <= 63 chars [A-Za-z0-9._-] starting and ending
 * alphanumeric. Returns 1 if valid. */
int fr_label_value_valid(const char *value);

/* Returns the value of <key> for the object behind <obj>, or NULL when the
 * object has no such label/field. */
typedef const char *(*fr_selector_lookup_cb)(const void *obj, const char *key);

struct fr_selector;

/* Parses a label selector. "" selects everything. On error returns -EINVAL
 * and writes a message like Kubernetes' into <err> (may be NULL). */
int fr_selector_parse_labels(const char *text, struct fr_selector **out,
                             char *err, size_t errlen);
/* Parses a field selector; only the names in <known> (NULL-terminated) are
 * allowed, others fail with "\"<f>\" is not a known field selector: only
 * \"a\", \"b\"". */
int fr_selector_parse_fields(const char *text, const char *const *known,
                             struct fr_selector **out, char *err, size_t errlen);
/* 1 if <obj> matches every requirement. A NULL selector matches all. */
int fr_selector_matches(const struct fr_selector *sel, fr_selector_lookup_cb lookup,
                        const void *obj);
/* 1 if the selector has no requirements. */
int fr_selector_empty(const struct fr_selector *sel);
/* If the selector pins <key> with "=" or "==", returns that value (borrowed).
 * Lets callers use an index for e.g. metadata.name. */
const char *fr_selector_exact(const struct fr_selector *sel, const char *key);
/* Accepts NULL. */
void fr_selector_free(struct fr_selector *sel);

#endif
