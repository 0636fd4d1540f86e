/* policy_util.c - glob matching, name lookups, per-cluster facts and the
 * snapshot's life cycle (ref/unref/free). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy_int.h"

int policy_is_glob(const char *pat) {
  return strpbrk(pat, "*?") != NULL;
}

/* Iterative matcher with one backtrack point (the last '*'): linear for the
 * patterns we see, never exponential. */
int policy_glob_match(const char *pat, const char *s) {
  const char *star = NULL, *resume = NULL;

  while (*s != '\0') {
    if (*pat == '*') {
      star = pat++;
      resume = s;
    } else if (*pat == '?' || *pat == *s) {
      pat++;
      s++;
    } else if (star != NULL) {
      pat = star + 1;
      s = ++resume;
    } else {
      return 0;
    }
  }
  while (*pat == '*')
    pat++;
  return *pat == '\0';
}

int policy_patlist_match(const struct patlist *pl, const char *s) {
  size_t i;

  for (i = 0; i < pl->n; i++)
    if (policy_glob_match(pl->pats[i], s))
      return 1;
  return 0;
}


/* FNV-1a, 64 bits. */
uint64_t policy_hash(const char *s) {
  uint64_t h = UINT64_C(14695981039346656037);

  while (*s != '\0') {
    h ^= (unsigned char)*s++;
    h *= UINT64_C(1099511628211);
  }
  return h;
}

const struct known_cluster *policy_find_known(const struct fr_policy *p, const char *name) {
  size_t i;

  if (p->hash == NULL || name == NULL)
    return NULL;
  for (i = (size_t)policy_hash(name) & p->hash_mask; p->hash[i] != 0; i = (i + 1) & p->hash_mask) {
    const struct known_cluster *k = &p->known[p->hash[i] - 1];
    if (strcmp(k->name, name) == 0)
      return k;
  }
  return NULL;
}

long policy_region_id(const struct fr_policy *p, const char *name) {
  size_t i;

  if (name == NULL)
    return -1;
  for (i = 0; i < p->nregions; i++)
    if (strcmp(p->regions[i], name) == 0)
      return (long)i;
  return -1;
}

int fr_policy_knows_region(const struct fr_policy *p, const char *name) {
  size_t i;

  if (p == NULL || name == NULL)
    return 0;
  if (policy_region_id(p, name) >= 0)
    return 1;
  for (i = 0; i < p->ngroups; i++)
    if (strcmp(p->groups[i].name, name) == 0)
      return 1;
  return 0;
}

void policy_compute_facts(const struct fr_policy *p, const char *name, struct facts *f,
                          uint8_t *bits) {
  size_t i;

  f->tier = (int)p->ntiers;
  for (i = 0; i < p->ntiers; i++)
    if (policy_patlist_match(&p->tiers[i].clusters, name)) {
      f->tier = (int)i;
      break;
    }
  f->cold_start_ms = p->cold_start_ms;
  f->ceiling_ms = p->ceiling_ms;
  /* Every matching override applies in file order: later ones win. */
  for (i = 0; i < p->noverrides; i++) {
    const struct override *o = &p->overrides[i];
    if (!policy_glob_match(o->pattern, name))
      continue;
    if (o->has_cold_start)
      f->cold_start_ms = o->cold_start_ms;
    if (o->has_ceiling)
      f->ceiling_ms = o->ceiling_ms;
  }
  for (i = 0; i < p->nrules; i++) {
    const struct rule *r = &p->rules[i];
    uint8_t b = 0;
    if (r->has_pin && policy_patlist_match(&r->pin, name))
      b |= RULE_PIN;
    if (r->has_allow && policy_patlist_match(&r->allow, name))
      b |= RULE_ALLOW;
    if (r->has_deny && policy_patlist_match(&r->deny, name))
      b |= RULE_DENY;
    bits[i] = b;
  }
  f->rule_bits = bits;
}

static void patlist_free(struct patlist *pl) {
  size_t i;

  for (i = 0; i < pl->n; i++)
    free(pl->pats[i]);
  free(pl->pats);
  free(pl->lines);
}

void policy_free(struct fr_policy *p) {
  size_t i, j;

  if (p == NULL)
    return;
  free(p->source);
  for (i = 0; i < p->nregions; i++)
    free(p->regions[i]);
  free(p->regions);
  free(p->region_group);
  for (i = 0; i < p->ngroups; i++) {
    free(p->groups[i].name);
    free(p->groups[i].regions);
  }
  free(p->groups);
  free(p->near_rank);
  for (i = 0; i < p->ntiers; i++) {
    free(p->tiers[i].name);
    patlist_free(&p->tiers[i].clusters);
  }
  free(p->tiers);
  for (i = 0; i < p->noverrides; i++)
    free(p->overrides[i].pattern);
  free(p->overrides);
  for (i = 0; i < p->nrules; i++) {
    struct rule *r = &p->rules[i];
    free(r->name);
    patlist_free(&r->tenants);
    patlist_free(&r->pools);
    for (j = 0; j < r->nlabels; j++) {
      free(r->labels[j].key);
      free(r->labels[j].value);
    }
    free(r->labels);
    patlist_free(&r->pin);
    patlist_free(&r->allow);
    patlist_free(&r->deny);
    free(r->region_ok);
  }
  free(p->rules);
  for (i = 0; i < p->nknown; i++)
    free(p->known[i].name);
  free(p->known);
  free(p->known_bits);
  free(p->hash);
  free(p);
}

/* The count may be dropped from a worker thread (a reload) while the loop
 * holds its own reference, so it is atomic; the snapshot itself is
 * immutable and needs no lock. */
struct fr_policy *fr_policy_ref(struct fr_policy *p) {
  if (p != NULL)
    __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
  return p;
}

void fr_policy_unref(struct fr_policy *p) {
  if (p != NULL && __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) == 0)
    policy_free(p);
}

const char *fr_policy_source(const struct fr_policy *p) {
  return p != NULL ? p->source : NULL;
}

const char *fr_policy_version(const struct fr_policy *p) {
  return p != NULL ? p->version : NULL;
}
