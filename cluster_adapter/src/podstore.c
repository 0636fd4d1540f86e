/* podstore.c - compact pod records in a hash table (see podstore.h). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

static char *dup_or_null(const char *s) {
  return s ? strdup(s) : NULL;
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

static void conditions(struct podstore *s, struct fr_pod *p, json_t *conds, int *oom) {
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
               strcmp(why, "Unschedulable") == 0 && p->unschedulable == NULL) {
      const char *m = json_string_value(json_object_get(c, "message"));
      p->unschedulable = strdup(m ? m : "Unschedulable");
      *oom |= p->unschedulable == NULL;
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

static int labels(struct podstore *s, struct fr_pod *p, json_t *labels) {
  struct fr_buf other;
  const char *k;
  json_t *v;

  fr_buf_init(&other);
  json_object_foreach(labels, k, v) {
    const char *val = json_string_value(v);
    /* An empty key (the API never serves one; a hostile or broken server
     * might) would read as the end of the packed pairs and hide every
     * label after it. */
    if (val == NULL || k[0] == '\0' || strcmp(k, FR_LABEL_SANDBOX) == 0)
      continue;
    if (strcmp(k, FR_LABEL_POOL) == 0) {
      p->pool = intern(s, val);
    } else if (strcmp(k, FR_LABEL_TENANT) == 0) {
      p->tenant = intern(s, val);
    } else if (strcmp(k, FR_LABEL_STATE) == 0) {
      p->state = intern(s, val);
    } else if (strcmp(k, FR_LABEL_NAME) == 0) {
      p->sbname = strdup(val);
    } else {
      fr_buf_append(&other, k, strlen(k) + 1);
      fr_buf_append(&other, val, strlen(val) + 1);
    }
  }
  if (other.len > 0) {
    fr_buf_putc(&other, '\0');
    p->labels = fr_buf_detach(&other, NULL);
    if (p->labels == NULL)
      return -ENOMEM;
  }
  fr_buf_free(&other);
  return 0;
}

struct fr_pod *podstore_parse(struct podstore *s, json_t *pod) {
  json_t *meta = json_object_get(pod, "metadata"), *status = json_object_get(pod, "status");
  json_t *ann = json_object_get(meta, "annotations");
  const char *name = json_string_value(json_object_get(meta, "name"));
  const char *rv = json_string_value(json_object_get(meta, "resourceVersion"));
  const char *warm = json_string_value(json_object_get(ann, FR_ANN_WARM));
  const char *spilled = json_string_value(json_object_get(ann, FR_ANN_SPILLED));
  struct fr_pod *p;
  int oom = 0;

  if (name == NULL || rv == NULL || strlen(rv) >= sizeof(p->rv) || (p = calloc(1, sizeof(*p))) == NULL)
    return NULL;
  memcpy(p->rv, rv, strlen(rv) + 1);
  p->name = strdup(name);
  oom |= p->name == NULL;
  oom |= labels(s, p, json_object_get(meta, "labels")) != 0;
  p->node = intern(s, str_at(pod, "spec", "nodeName"));
  p->reason = intern(s, json_string_value(json_object_get(status, "reason")));
  p->env = dup_or_null(json_string_value(json_object_get(ann, FR_ANN_ENV)));
  oom |= json_object_get(ann, FR_ANN_ENV) != NULL && p->env == NULL;
  p->secrets = dup_or_null(json_string_value(json_object_get(ann, FR_ANN_SECRETS)));
  p->init_env = json_string_value(json_object_get(ann, FR_ANN_ENV_NAMES)) != NULL;
  oom |= json_string_value(json_object_get(ann, FR_ANN_SECRETS)) != NULL && p->secrets == NULL;
  requests(s, p, json_object_get(json_object_get(pod, "spec"), "containers"));
  p->created_s = time_or_none(json_string_value(json_object_get(ann, FR_ANN_CREATED)));
  p->expires_s = time_or_none(json_string_value(json_object_get(ann, FR_ANN_EXPIRES)));
  p->creation_s = time_or_none(json_string_value(json_object_get(meta, "creationTimestamp")));
  p->start_s = time_or_none(json_string_value(json_object_get(status, "startTime")));
  p->phase = phase_of(json_string_value(json_object_get(status, "phase")));
  p->terminating = json_object_get(meta, "deletionTimestamp") != NULL;
  p->warm = warm != NULL && strcmp(warm, "true") == 0;
  p->spilled = spilled != NULL && strcmp(spilled, "true") == 0;
  conditions(s, p, json_object_get(status, "conditions"), &oom);
  if (oom) {
    podstore_release(s, p);
    return NULL;
  }
  return p;
}

void podstore_release(struct podstore *s, struct fr_pod *p) {
  if (p == NULL)
    return;
  unintern(s, p->pool);
  unintern(s, p->tenant);
  unintern(s, p->state);
  unintern(s, p->node);
  unintern(s, p->reason);
  unintern(s, p->disruption);
  free(p->name);
  free(p->sbname);
  free(p->labels);
  free(p->env);
  free(p->secrets);
  free(p->unschedulable);
  free(p);
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
  size_t i;

  for (i = 0; i < s->cap; i++)
    podstore_release(s, s->slots[i]);
  free(s->slots);
  strmap_close(&s->strings);
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
