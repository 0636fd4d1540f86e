/* podstore.c - compact pod records in a hash table (see podstore.h). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fr/assert.h"
#include "fr/buf.h"
#include "fr/quantity.h"
#include "fr/util.h"
#include "podopts.h"
#include "podstore.h"

#define MIN_CAP 64

/* ---------------------------------------------------------------------- */
/* interned strings                                                        */

/* The returned pointer is the table's own copy of the key: stable while the
 * entry lives (a strmap entry never moves). v.n[0] counts the records
 * that use it. */
static const char *intern(struct podstore *s, const char *str) {
  struct strmap_entry *e;

  if (str == NULL || (e = strmap_put(&s->strings, str, NULL)) == NULL)
    return NULL;
  e->v.n[0]++;
  return e->key;
}

static void unintern(struct podstore *s, const char *str) {
  struct strmap_entry *e;

  if (str == NULL || (e = strmap_get(&s->strings, str)) == NULL)
    return;
  if (--e->v.n[0] <= 0)
    strmap_del(&s->strings, str); /* frees the key <str> points to */
}

/* ---------------------------------------------------------------------- */
/* records                                                                 */

static const char *str_at(json_t *obj, const char *k1, const char *k2) {
  return json_string_value(json_object_get(json_object_get(obj, k1), k2));
}

static int64_t time_or_none(const char *s) {
  int64_t t;

  return s != NULL && fr_time_parse_rfc3339(s, &t) == 0 ? t : -1;
}

static enum fr_pod_phase phase_of(const char *s) {
  if (s == NULL || strcmp(s, "Pending") == 0)
    return FR_POD_PENDING;
  if (strcmp(s, "Running") == 0)
    return FR_POD_RUNNING;
  if (strcmp(s, "Succeeded") == 0)
    return FR_POD_SUCCEEDED;
  if (strcmp(s, "Failed") == 0)
    return FR_POD_FAILED;
  return FR_POD_UNKNOWN;
}

/* Ready, DisruptionTarget and the Unschedulable message, which goes to
 * *<unsched> (borrowed from <conds>; NULL when none). */
static void conditions(struct podstore *s, struct fr_pod *p, json_t *conds, const char **unsched, int *oom) {
  json_t *c;
  size_t i;

  json_array_foreach(conds, i, c) {
    const char *t = json_string_value(json_object_get(c, "type"));
    const char *st = json_string_value(json_object_get(c, "status"));
    const char *why = json_string_value(json_object_get(c, "reason"));
    if (t == NULL || st == NULL)
      continue;
    if (strcmp(t, "Ready") == 0) {
      p->ready = strcmp(st, "True") == 0;
    } else if (strcmp(t, "DisruptionTarget") == 0 && strcmp(st, "True") == 0 && p->disruption == NULL) {
      p->disruption = intern(s, why != NULL && *why != '\0' ? why : "DisruptionTarget");
      *oom |= p->disruption == NULL;
    } else if (strcmp(t, "PodScheduled") == 0 && strcmp(st, "False") == 0 && why != NULL &&
               strcmp(why, "Unschedulable") == 0 && *unsched == NULL) {
      const char *m = json_string_value(json_object_get(c, "message"));
      *unsched = m != NULL ? m : "Unschedulable";
    }
  }
}

static void requests(const struct podstore *s, struct fr_pod *p, json_t *containers) {
  json_t *c;
  size_t i;
  int64_t gpus = 0;

  json_array_foreach(containers, i, c) {
    json_t *req = json_object_get(json_object_get(c, "resources"), "requests");
    const char *cpu = json_string_value(json_object_get(req, "cpu"));
    const char *mem = json_string_value(json_object_get(req, "memory"));
    int64_t v;
    if (cpu != NULL && fr_quantity_parse_milli(cpu, &v) == 0)
      p->cpu_m += v;
    if (mem != NULL && fr_quantity_parse_value(mem, &v) == 0)
      p->mem_b += v;
  }
  gpus = pod_gpus(containers, s->gpu_resource);
  p->gpus = gpus > UINT16_MAX ? UINT16_MAX : (uint16_t)gpus;
}

/* fedrouter's labels into <p> (interned), its name label into *<sbname>
 * (borrowed from <labels>), every other label packed into <other>. */
static int labels(struct podstore *s, struct fr_pod *p, json_t *labels, const char **sbname, struct fr_buf *other) {
  const char *k;
  json_t *v;
  int oom = 0;

  json_object_foreach(labels, k, v) {
    const char *val = json_string_value(v);
    /* An empty key (the API never serves one; a hostile or broken server
     * might) would read as the end of the packed pairs and hide every
     * label after it. */
    if (val == NULL || k[0] == '\0' || strcmp(k, FR_LABEL_SANDBOX) == 0)
      continue;
    if (strcmp(k, FR_LABEL_POOL) == 0) {
      oom |= (p->pool = intern(s, val)) == NULL;
    } else if (strcmp(k, FR_LABEL_TENANT) == 0) {
      oom |= (p->tenant = intern(s, val)) == NULL;
    } else if (strcmp(k, FR_LABEL_STATE) == 0) {
      oom |= (p->state = intern(s, val)) == NULL;
    } else if (strcmp(k, FR_LABEL_NAME) == 0) {
      *sbname = val;
    } else {
      fr_buf_append(other, k, strlen(k) + 1);
      fr_buf_append(other, val, strlen(val) + 1);
    }
  }
  if (other->len > 0)
    fr_buf_putc(other, '\0');
  return oom || (other->len > 0 && other->data == NULL) ? -ENOMEM : 0;
}

static void podstore_release_strings(struct podstore *s, struct fr_pod *p);

/* The bytes of <str> (with its NUL) after <at>, as *<dst>; NULL stays NULL. */
static char *put_str(char *at, char **dst, const char *str, size_t len) {
  if (str == NULL)
    return at;
  memcpy(at, str, len);
  *dst = at;
  return at + len;
}

/* One allocation per record (from the store's slab: slab.h says why not
 * malloc): the struct, then its strings (name, name
 * label, other labels, env, secrets, unschedulable message). Four
 * allocations of their own cost ~90 bytes more a pod in malloc headers and
 * rounding (1M sandboxes: ~90 MB), and four more malloc/free pairs on
 * every watch event. */
struct fr_pod *podstore_parse(struct podstore *s, json_t *pod) {
  json_t *meta = json_object_get(pod, "metadata"), *status = json_object_get(pod, "status");
  json_t *ann = json_object_get(meta, "annotations");
  const char *name = json_string_value(json_object_get(meta, "name"));
  const char *rv = json_string_value(json_object_get(meta, "resourceVersion"));
  const char *warm = json_string_value(json_object_get(ann, FR_ANN_WARM));
  const char *spilled = json_string_value(json_object_get(ann, FR_ANN_SPILLED));
  const char *env = json_string_value(json_object_get(ann, FR_ANN_ENV));
  const char *secrets = json_string_value(json_object_get(ann, FR_ANN_SECRETS));
  const char *sbname = NULL, *unsched = NULL;
  size_t lname, lsb, lenv, lsec, luns;
  struct fr_pod tmp, *p;
  struct fr_buf other;
  char *at;
  int oom = 0;

  if (name == NULL || rv == NULL || strlen(rv) >= sizeof(tmp.rv))
    return NULL;
  /* Parsed into <tmp> (interned strings counted), then moved into the block. */
  memset(&tmp, 0, sizeof(tmp));
  fr_buf_init(&other);
  memcpy(tmp.rv, rv, strlen(rv) + 1);
  oom |= labels(s, &tmp, json_object_get(meta, "labels"), &sbname, &other) != 0;
  tmp.node = intern(s, str_at(pod, "spec", "nodeName"));
  oom |= str_at(pod, "spec", "nodeName") != NULL && tmp.node == NULL;
  tmp.reason = intern(s, json_string_value(json_object_get(status, "reason")));
  oom |= json_string_value(json_object_get(status, "reason")) != NULL && tmp.reason == NULL;
  tmp.init_env = json_string_value(json_object_get(ann, FR_ANN_ENV_NAMES)) != NULL;
  requests(s, &tmp, json_object_get(json_object_get(pod, "spec"), "containers"));
  tmp.created_s = time_or_none(json_string_value(json_object_get(ann, FR_ANN_CREATED)));
  tmp.expires_s = time_or_none(json_string_value(json_object_get(ann, FR_ANN_EXPIRES)));
  tmp.creation_s = time_or_none(json_string_value(json_object_get(meta, "creationTimestamp")));
  tmp.start_s = time_or_none(json_string_value(json_object_get(status, "startTime")));
  tmp.phase = phase_of(json_string_value(json_object_get(status, "phase")));
  tmp.terminating = json_object_get(meta, "deletionTimestamp") != NULL;
  tmp.warm = warm != NULL && strcmp(warm, "true") == 0;
  tmp.spilled = spilled != NULL && strcmp(spilled, "true") == 0;
  conditions(s, &tmp, json_object_get(status, "conditions"), &unsched, &oom);
  lname = strlen(name) + 1;
  lsb = sbname != NULL ? strlen(sbname) + 1 : 0;
  lenv = env != NULL ? strlen(env) + 1 : 0;
  lsec = secrets != NULL ? strlen(secrets) + 1 : 0;
  luns = unsched != NULL ? strlen(unsched) + 1 : 0;
  p = oom ? NULL : slab_alloc(&s->slab, sizeof(*p) + lname + lsb + other.len + lenv + lsec + luns);
  if (p == NULL) {
    tmp.name = NULL; /* nothing of the block to free */
    podstore_release_strings(s, &tmp);
    fr_buf_free(&other);
    return NULL;
  }
  *p = tmp;
  at = (char *)(p + 1);
  at = put_str(at, &p->name, name, lname);
  at = put_str(at, &p->sbname, sbname, lsb);
  at = put_str(at, &p->labels, other.len > 0 ? other.data : NULL, other.len);
  at = put_str(at, &p->env, env, lenv);
  at = put_str(at, &p->secrets, secrets, lsec);
  put_str(at, &p->unschedulable, unsched, luns);
  fr_buf_free(&other);
  return p;
}

/* The interned strings of <p> (a record, or a parse given up). */
static void podstore_release_strings(struct podstore *s, struct fr_pod *p) {
  unintern(s, p->pool);
  unintern(s, p->tenant);
  unintern(s, p->state);
  unintern(s, p->node);
  unintern(s, p->reason);
  unintern(s, p->disruption);
}

void podstore_release(struct podstore *s, struct fr_pod *p) {
  if (p == NULL)
    return;
  /* Only a record the store no longer holds (taken, replaced, or never
   * put): one still in it would be freed under the cache. */
  FR_ASSERT(s->cap == 0 || podstore_get(s, p->name) != p);
  podstore_release_strings(s, p);
  slab_free(&s->slab, p); /* its strings are in the same block */
}

const char *fr_pod_label(const struct fr_pod *p, const char *key) {
  size_t off = 0;
  const char *k, *v;

  if (strcmp(key, FR_LABEL_SANDBOX) == 0)
    return "true"; /* the cache holds only pods with it */
  if (strcmp(key, FR_LABEL_POOL) == 0)
    return p->pool;
  if (strcmp(key, FR_LABEL_TENANT) == 0)
    return p->tenant;
  if (strcmp(key, FR_LABEL_STATE) == 0)
    return p->state;
  if (strcmp(key, FR_LABEL_NAME) == 0)
    return p->sbname;
  while (fr_pod_label_next(p, &off, &k, &v))
    if (strcmp(k, key) == 0)
      return v;
  return NULL;
}

int fr_pod_label_next(const struct fr_pod *p, size_t *off, const char **key, const char **value) {
  const char *at;

  if (p->labels == NULL || p->labels[*off] == '\0')
    return 0;
  at = p->labels + *off;
  *key = at;
  at += strlen(at) + 1;
  *value = at;
  at += strlen(at) + 1;
  *off = (size_t)(at - p->labels);
  return 1;
}

int fr_pod_finished(const struct fr_pod *p) {
  return p->phase == FR_POD_FAILED || p->phase == FR_POD_SUCCEEDED;
}

int fr_pod_done(const struct fr_pod *p) {
  return p->terminating || fr_pod_finished(p);
}

/* ---------------------------------------------------------------------- */
/* table                                                                   */

/* The same linear probing and backward-shift deletion as strmap.c, over
 * records that carry their own key: a strmap entry would copy each pod's
 * name once more and add an allocation (~64 bytes a pod, 32 MB at
 * 500,000 sandboxes). */

/* Slot of <name>, or of the empty slot where it would go. */
static size_t find(const struct podstore *s, const char *name) {
  size_t i = strmap_hash(name) & (s->cap - 1);

  while (s->slots[i] != NULL && strcmp(s->slots[i]->name, name) != 0)
    i = (i + 1) & (s->cap - 1);
  return i;
}

static int grow(struct podstore *s, size_t cap) {
  struct fr_pod **old = s->slots;
  size_t oldcap = s->cap, i;

  s->slots = calloc(cap, sizeof(*s->slots));
  if (s->slots == NULL) {
    s->slots = old;
    return -ENOMEM;
  }
  s->cap = cap;
  for (i = 0; i < oldcap; i++)
    if (old[i] != NULL)
      s->slots[find(s, old[i]->name)] = old[i];
  free(old);
  return 0;
}

int podstore_init(struct podstore *s) {
  memset(s, 0, sizeof(*s));
  s->slots = calloc(MIN_CAP, sizeof(*s->slots));
  if (s->slots == NULL)
    return -ENOMEM;
  s->cap = MIN_CAP;
  return 0;
}

void podstore_free(struct podstore *s) {
  struct fr_pod *p;
  size_t i;

  for (i = 0; i < s->cap; i++) {
    p = s->slots[i];
    s->slots[i] = NULL; /* out of the store first: podstore_release checks */
    podstore_release(s, p);
  }
  free(s->slots);
  strmap_close(&s->strings);
  slab_close(&s->slab);
  memset(s, 0, sizeof(*s));
}

struct fr_pod *podstore_get(const struct podstore *s, const char *name) {
  return s->cap ? s->slots[find(s, name)] : NULL;
}

int podstore_put(struct podstore *s, struct fr_pod *p, struct fr_pod **old) {
  size_t i;

  /* At most half full, so probe runs stay short. */
  if ((s->n + 1) * 2 > s->cap && grow(s, s->cap * 2) != 0)
    return -ENOMEM;
  i = find(s, p->name);
  *old = s->slots[i];
  /* Taken: a record goes in once (else the caller would release it as
   * the old one while the store still holds it). */
  FR_ASSERT(*old != p);
  s->slots[i] = p;
  if (*old == NULL)
    s->n++;
  return 0;
}

struct fr_pod *podstore_take(struct podstore *s, const char *name) {
  size_t i = find(s, name), j, home;
  struct fr_pod *p = s->slots[i];

  if (p == NULL)
    return NULL;
  s->slots[i] = NULL;
  s->n--;
  /* Backward-shift deletion: move up every later entry of the run that
   * the hole would cut off from its home slot. */
  for (j = (i + 1) & (s->cap - 1); s->slots[j] != NULL; j = (j + 1) & (s->cap - 1)) {
    home = strmap_hash(s->slots[j]->name) & (s->cap - 1);
    if (((j - home) & (s->cap - 1)) >= ((j - i) & (s->cap - 1))) {
      s->slots[i] = s->slots[j];
      s->slots[j] = NULL;
      i = j;
    }
  }
  /* After a mass delete the table gives its slots back (8 bytes a slot,
   * 2-4 slots a pod: 1 MiB per 50,000-sandbox cluster): under an eighth
   * full it halves, staying at most a quarter full. */
  if (s->cap > MIN_CAP && s->n * 8 < s->cap)
    grow(s, s->cap / 2); /* n * 8 < cap: at most a quarter full after */
  return p;
}

struct fr_pod *podstore_next(const struct podstore *s, size_t *cursor) {
  while (*cursor < s->cap) {
    struct fr_pod *p = s->slots[(*cursor)++];
    if (p != NULL)
      return p;
  }
  return NULL;
}
