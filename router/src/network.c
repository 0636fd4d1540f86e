/* network.c - the `network` object of a create (docs/api.md, "Egress"):
 * where a sandbox may connect, over its tenant's default. Validates and
 * normalizes it into a struct fr_egress (fr/egress.h), which the adapter
 * turns into a NetworkPolicy; and shows one back as JSON. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/egress.h"
#include "api.h"

/* 400 invalid_network naming <field> and, when there is one, the <value>
 * (borrowed) that is wrong. */
static void network_fail(struct api_req *q, const char *field, json_t *value, const char *msg) {
  json_t *b = api_err_body("invalid_network", msg), *e = json_object_get(b, "error");

  json_object_set_new(e, "field", json_string(field));
  if (value != NULL)
    json_object_set(e, "value", value);
  api_reply(q, 400, b, NULL);
}

/* The list <key> of <net> into <e>'s allow or deny list (replacing what
 * the tenant's default had there). */
static int read_list(struct api_req *q, json_t *net, const char *key, int deny, struct fr_egress *e) {
  json_t *v = json_object_get(net, key), *item;
  char field[64], why[400], msg[500];
  size_t i;
  int rc;

  if (v == NULL || json_is_null(v))
    return 0;
  snprintf(field, sizeof(field), "network.%s", key);
  if (!json_is_array(v)) {
    network_fail(q, field, v, "must be an array of IP addresses or CIDRs, e.g. [\"10.0.0.0/8\", \"2001:db8::1\"]");
    return -1;
  }
  if (json_array_size(v) > FR_EGRESS_MAX_CIDRS) {
    snprintf(msg, sizeof(msg), "%s has %zu entries; at most %d", field, json_array_size(v), FR_EGRESS_MAX_CIDRS);
    network_fail(q, field, NULL, msg);
    return -1;
  }
  if (deny)
    e->ndeny = 0;
  else
    e->nallow = 0;
  json_array_foreach(v, i, item) {
    snprintf(field, sizeof(field), "network.%s[%zu]", key, i);
    if (!json_is_string(item)) {
      network_fail(q, field, item, "must be a string: an IP address or CIDR");
      return -1;
    }
    if ((rc = fr_egress_add(e, deny, json_string_value(item), why, sizeof(why))) != 0) {
      snprintf(msg, sizeof(msg), "%s: %s", field, why);
      network_fail(q, field, item, msg);
      return -1;
    }
  }
  return 0;
}

int network_parse(struct api_req *q, json_t *net, const struct fr_egress *base, struct fr_egress **out) {
  static const char *const keys[] = {"allow_internet", "allow_out", "deny_out", NULL};
  struct fr_egress *e;
  const char *k;
  json_t *v;
  char msg[300];
  size_t i;

  *out = NULL;
  if (net != NULL && !json_is_null(net)) {
    if (!json_is_object(net)) {
      network_fail(q, "network", net, "network must be an object: {\"allow_internet\": bool, \"allow_out\": "
                                      "[CIDR, ...], \"deny_out\": [CIDR, ...]}");
      return -1;
    }
    json_object_foreach(net, k, v) {
      for (i = 0; keys[i] != NULL && strcmp(keys[i], k) != 0; i++)
        ;
      if (keys[i] == NULL) {
        snprintf(msg, sizeof(msg), "unknown field network.%.100s (known: allow_internet, allow_out, deny_out)", k);
        network_fail(q, "network", NULL, msg);
        return -1;
      }
    }
    v = json_object_get(net, "allow_internet");
    if (v != NULL && !json_is_null(v) && !json_is_boolean(v)) {
      network_fail(q, "network.allow_internet", v, "network.allow_internet must be true or false");
      return -1;
    }
  }
  if ((e = malloc(sizeof(*e))) == NULL) {
    api_oom(q);
    return -1;
  }
  /* Each field the request gives replaces the tenant's default one. */
  if (base != NULL)
    *e = *base;
  else
    fr_egress_init(e);
  v = json_object_get(net, "allow_internet");
  if (json_is_boolean(v))
    e->allow_internet = json_is_true(v);
  if (read_list(q, net, "allow_out", 0, e) != 0 || read_list(q, net, "deny_out", 1, e) != 0) {
    free(e);
    return -1;
  }
  fr_egress_normalize(e);
  if (fr_egress_is_default(e)) {
    free(e);
    return 0;
  }
  *out = e;
  return 0;
}

static json_t *cidrs_json(const struct fr_cidr *v, size_t n) {
  json_t *a = json_array();
  char t[FR_CIDR_STRLEN];
  size_t i;

  for (i = 0; a != NULL && i < n; i++) {
    fr_cidr_format(&v[i], t);
    json_array_append_new(a, json_string(t));
  }
  return a;
}

json_t *network_json(const struct fr_egress *e) {
  struct fr_egress none;

  if (e == NULL) {
    fr_egress_init(&none);
    e = &none;
  }
  return json_pack("{s:b,s:o,s:o}", "allow_internet", e->allow_internet, "allow_out",
                   cidrs_json(e->allow, e->nallow), "deny_out", cidrs_json(e->deny, e->ndeny));
}
