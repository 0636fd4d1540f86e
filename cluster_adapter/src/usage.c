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

#include "usage.h"

#include "cluster.h"
#include "strmap.h"

#define BYTES_PER_GIB 1073741824.0

/* One (tenant, pool) of the table (fr/adapter.h). */
struct usage_row {
  char *tenant, *pool;
  int64_t n, cpu_m, mem_b, gpus;   /* live sandboxes now and their requests */
  double sec, core_s, gib_s, gpu_s;
  uint64_t warm, cold, spilled;
  uint64_t last_ms;                /* uv_now of the last integration */
};

/* This file's state: the table. */
struct usage {
  struct cluster *cl;
  struct usage_row *rows;
  size_t n, cap;
  struct strmap index;             /* "tenant\x1fpool" -> v.n[0] row index */
};

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
static struct usage_row *row_of(struct usage *t, const char *tenant, const char *pool) {
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
    return row_of(t, FR_USAGE_OTHER, FR_USAGE_OTHER); /* the last row is the overflow's */
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
  r->last_ms = uv_now(t->cl->loop);
  t->n++;
  return r;
}

static void count(struct usage *u, const struct fr_pod *p, int sign, uint64_t now_ms) {
  struct usage_row *r = row_of(u, p->tenant, p->pool);

  if (r == NULL)
    return; /* out of memory: this pod goes uncounted, as it would unseen */
  integrate(r, now_ms);
  r->n += sign;
  r->cpu_m += sign * p->cpu_m;
  r->mem_b += sign * p->mem_b;
  r->gpus += sign * (int64_t)p->gpus;
}

void usage__on_pod(struct usage *u, const struct fr_pod *p, const struct fr_pod *old) {
  uint64_t now = uv_now(u->cl->loop);
  int was = live_sandbox(old), is = live_sandbox(p);
  struct usage_row *r;

  if (was)
    count(u, old, -1, now);
  if (!is)
    return;
  count(u, p, 1, now);
  /* A new sandbox, unless the first list is still coming in: those were
   * made before this replica was there to see them. */
  if (was || !fr_informer_synced(u->cl->inf[CLUSTER_INF_PODS]) || (r = row_of(u, p->tenant, p->pool)) == NULL)
    return;
  if (p->spilled)
    r->spilled++;
  else if (p->warm)
    r->warm++;
  else
    r->cold++;
}

size_t usage__rows(const struct usage *u) {
  return u->n;
}

int usage__row(struct usage *u, size_t i, struct fr_adapter_usage *out) {
  struct usage_row *r;

  if (i >= u->n)
    return -ENOENT;
  r = &u->rows[i];
  integrate(r, uv_now(u->cl->loop));
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

struct usage *usage__new(struct cluster *cl) {
  struct usage *u = calloc(1, sizeof(*u));

  /* The index starts empty as calloc left it. */
  if (u != NULL)
    u->cl = cl;
  return u;
}

void usage__free(struct usage *u) {
  size_t i;

  if (u == NULL)
    return;
  for (i = 0; i < u->n; i++) {
    free(u->rows[i].tenant);
    free(u->rows[i].pool);
  }
  free(u->rows);
  strmap_close(&u->index);
  free(u);
}
