/* usage.c - what a cluster's sandboxes use over time, per (tenant, pool),
 * kept from the sandbox pod cache's events (fr/adapter.h, "usage").
 *
 * Each row holds the live sandboxes of one (tenant, pool) and their summed
 * requests, and the integrals of those over time. An event first brings the
 * row's integrals up to now (count and requests were constant since the
 * row's last change), then applies the change: exact, O(1) per event, and
 * nothing walks the cache. Reading a row brings it up to now the same way.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/adapter.h"
#include "adapter_internal.h"

#define BYTES_PER_GIB 1073741824.0

/* A sandbox the view counts: claimed or created, not finished, not
 * terminating (pods_count's rule). */
static int live_sandbox(const struct fr_pod *p) {
  return p != NULL && !fr_pod_done(p) && !(p->state != NULL && strcmp(p->state, "warm") == 0);
}

static void integrate(struct usage_row *r, uint64_t now_ms) {
  double dt;

  if (now_ms > r->last_ms && r->n != 0) {
    dt = (double)(now_ms - r->last_ms) / 1000.0;
    r->sec += (double)r->n * dt;
    r->core_s += (double)r->cpu_m / 1000.0 * dt;
    r->gib_s += (double)r->mem_b / BYTES_PER_GIB * dt;
    r->gpu_s += (double)r->gpus * dt;
  }
  r->last_ms = now_ms;
}

/* The row of <tenant>/<pool> (NULL: ""), made when new; the shared
 * overflow row once the table is full. NULL only when out of memory. */
static struct usage_row *row_of(struct fr_adapter *a, const char *tenant, const char *pool) {
  struct usage_table *t = &a->usage;
  struct strmap_entry *e;
  struct usage_row *r;
  char key[512];
  int added = 0;

  tenant = tenant != NULL ? tenant : "";
  pool = pool != NULL ? pool : "";
  snprintf(key, sizeof(key), "%s\x1f%s", tenant, pool);
  if ((e = strmap_get(&t->index, key)) != NULL)
    return &t->rows[e->v.n[0]];
  if (t->n >= FR_USAGE_MAX_ROWS - 1 && strcmp(tenant, FR_USAGE_OTHER) != 0)
    return row_of(a, FR_USAGE_OTHER, FR_USAGE_OTHER); /* the last row is the overflow's */
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 16;
    struct usage_row *nr = realloc(t->rows, cap * sizeof(*nr));
    if (nr == NULL)
      return NULL;
    t->rows = nr;
    t->cap = cap;
  }
  r = &t->rows[t->n];
  memset(r, 0, sizeof(*r));
  r->tenant = strdup(tenant);
  r->pool = strdup(pool);
  e = r->tenant != NULL && r->pool != NULL ? strmap_put(&t->index, key, &added) : NULL;
  if (e == NULL) {
    free(r->tenant);
    free(r->pool);
    return NULL;
  }
  e->v.n[0] = (int64_t)t->n;
  r->last_ms = uv_now(a->loop);
  t->n++;
  return r;
}

static void count(struct fr_adapter *a, const struct fr_pod *p, int sign, uint64_t now_ms) {
  struct usage_row *r = row_of(a, p->tenant, p->pool);

  if (r == NULL)
    return; /* out of memory: this pod goes uncounted, as it would unseen */
  integrate(r, now_ms);
  r->n += sign;
  r->cpu_m += sign * p->cpu_m;
  r->mem_b += sign * p->mem_b;
  r->gpus += sign * (int64_t)p->gpus;
}

void usage_on_pod(struct fr_adapter *a, const struct fr_pod *p, const struct fr_pod *old) {
  uint64_t now = uv_now(a->loop);
  int was = live_sandbox(old), is = live_sandbox(p);
  struct usage_row *r;

  if (was)
    count(a, old, -1, now);
  if (!is)
    return;
  count(a, p, 1, now);
  /* A new sandbox, unless the first list is still coming in: those were
   * made before this replica was there to see them. */
  if (was || !fr_adapter_pods_synced(a) || (r = row_of(a, p->tenant, p->pool)) == NULL)
    return;
  if (p->spilled)
    r->spilled++;
  else if (p->warm)
    r->warm++;
  else
    r->cold++;
}

size_t fr_adapter_usage_rows(const struct fr_adapter *a) {
  return a->usage.n;
}

int fr_adapter_usage_row(struct fr_adapter *a, size_t i, struct fr_adapter_usage *out) {
  struct usage_row *r;

  if (i >= a->usage.n)
    return -ENOENT;
  r = &a->usage.rows[i];
  integrate(r, uv_now(a->loop));
  out->tenant = r->tenant;
  out->pool = r->pool;
  out->sandboxes = r->n;
  out->cpu_m = r->cpu_m;
  out->mem_b = r->mem_b;
  out->gpus = r->gpus;
  out->sandbox_seconds = r->sec;
  out->cpu_core_seconds = r->core_s;
  out->memory_gib_seconds = r->gib_s;
  out->gpu_seconds = r->gpu_s;
  out->created_warm = r->warm;
  out->created_cold = r->cold;
  out->created_spilled = r->spilled;
  return 0;
}

void usage_free(struct fr_adapter *a) {
  size_t i;

  for (i = 0; i < a->usage.n; i++) {
    free(a->usage.rows[i].tenant);
    free(a->usage.rows[i].pool);
  }
  free(a->usage.rows);
  strmap_close(&a->usage.index);
  memset(&a->usage, 0, sizeof(a->usage));
}
