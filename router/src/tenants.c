/* tenants.c - the router's tenant records (tenants.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/assert.h"
#include "fr/adapter.h"
#include "fr/config.h"
#include "router.h"
#include "tenants.h"

struct tenant_state *tenant_ref(struct tenant_state *t) {
  if (t != NULL)
    t->refs++;
  return t;
}

void tenant_unref(struct tenant_state *t) {
  if (t == NULL)
    return;
  FR_ASSERT(t->refs > 0);
  if (--t->refs > 0)
    return;
  /* The last reference: everything counted in it has been settled. */
  FR_ASSERT(t->inflight == 0 && t->execs == 0 && t->creating == 0);
  free(t->secret);
  free(t);
}

/* Copies the limits of config tenant <ct> (NULL: the loopback-only
 * router's "local" tenant) into <t>, with <secret> (taken) its Secret's
 * name. */
static void set_limits(struct tenant_state *t, const struct fr_config_tenant *ct, char *secret) {
  free(t->secret);
  t->secret = secret;
  if (ct == NULL) {
    t->max_inflight = FR_DEFAULT_TENANT_REQUESTS_IN_FLIGHT;
    t->max_execs = FR_DEFAULT_TENANT_CONCURRENT_EXECS;
    t->max_sandboxes = t->max_cpu_m = t->max_mem_b = t->max_gpus = 0;
    t->max_pool_replicas = 0;
    t->max_file_bytes = FR_DEFAULT_TENANT_FILE_BYTES;
    t->weight = 1;
    t->max_queued_sandboxes = FR_DEFAULT_TENANT_QUEUED_SANDBOXES;
    t->max_queued_execs = FR_DEFAULT_TENANT_QUEUED_EXECS;
    t->max_paused = FR_DEFAULT_TENANT_PAUSED;
    t->max_paused_s = FR_DEFAULT_TENANT_PAUSED_S;
    t->max_workspace_bytes = FR_DEFAULT_TENANT_WORKSPACE_BYTES;
    t->max_lifetime_s = 0;
    t->has_network = 0;
    t->admin = 1;
    return;
  }
  t->max_inflight = ct->max_requests_in_flight;
  t->max_execs = ct->max_concurrent_execs;
  t->max_sandboxes = ct->max_sandboxes;
  t->max_cpu_m = ct->max_cpu_m;
  t->max_mem_b = ct->max_mem_b;
  t->max_gpus = ct->max_gpus;
  t->max_pool_replicas = ct->max_pool_replicas;
  t->max_file_bytes = ct->max_file_bytes;
  t->weight = ct->weight;
  t->max_queued_sandboxes = ct->max_queued_sandboxes;
  t->max_queued_execs = ct->max_queued_execs;
  t->max_paused = ct->max_paused;
  t->max_paused_s = ct->max_paused_s;
  t->max_workspace_bytes = ct->max_workspace_bytes;
  t->max_lifetime_s = ct->max_lifetime_s;
  t->has_network = ct->network != NULL;
  if (ct->network != NULL)
    t->network = *ct->network;
  t->admin = ct->admin;
}

static struct tenant_state *tenant_new(const char *name) {
  struct tenant_state *t = calloc(1, sizeof(*t));

  if (t == NULL)
    return NULL;
  t->refs = 1; /* the table's */
  snprintf(t->name, sizeof(t->name), "%s", name);
  return t;
}

struct tenant_state *router_tenant(struct router *r, const char *name) {
  size_t i;

  for (i = 0; i < r->ntenants; i++)
    if (strcmp(r->tenants[i]->name, name) == 0)
      return r->tenants[i];
  return NULL;
}

int tenants_init(struct router *r) {
  return tenants_apply(r, r->cfg, NULL, NULL, NULL);
}

int tenants_apply(struct router *r, const struct fr_config *c, size_t *added, size_t *removed, size_t *kept) {
  return tenants_apply_cb(r, c, added, removed, kept, NULL);
}

int tenants_apply_cb(struct router *r, const struct fr_config *c, size_t *added, size_t *removed, size_t *kept,
                     void (*on_removed)(struct router *r, struct tenant_state *t)) {
  size_t n = c->ntenants ? c->ntenants : 1, i, k, nadd = 0, nkeep = 0, nrm = 0;
  struct tenant_state **tab = calloc(n, sizeof(*tab)), **fresh = calloc(n, sizeof(*fresh));
  char **secrets = calloc(n, sizeof(*secrets));

  if (tab == NULL || fresh == NULL || secrets == NULL)
    goto oom;
  /* Everything that can fail first (new records, the Secret names' copies),
   * so a failure leaves the table as it was. */
  for (i = 0; i < n; i++) {
    const struct fr_config_tenant *ct = c->ntenants ? &c->tenants[i] : NULL;
    const char *name = ct != NULL ? ct->name : "local";
    if ((secrets[i] = strdup(ct != NULL ? ct->secret : FR_LOCAL_SECRET)) == NULL)
      goto oom;
    if ((tab[i] = router_tenant(r, name)) == NULL && (tab[i] = fresh[i] = tenant_new(name)) == NULL)
      goto oom;
  }
  for (i = 0; i < n; i++) {
    /* A kept record keeps its counts; its limits follow the config. */
    set_limits(tab[i], c->ntenants ? &c->tenants[i] : NULL, secrets[i]);
    secrets[i] = NULL;
    if (fresh[i] != NULL) {
      nadd++;
      continue;
    }
    tab[i]->removed = 0;
    nkeep++;
  }
  /* The records the new table does not hold: out, and gone once their
   * last request ends. */
  for (k = 0; k < r->ntenants; k++) {
    for (i = 0; i < n && tab[i] != r->tenants[k]; i++)
      ;
    if (i < n)
      continue;
    r->tenants[k]->removed = 1;
    if (on_removed != NULL)
      on_removed(r, r->tenants[k]);
    tenant_unref(r->tenants[k]);
    nrm++;
  }
  free(r->tenants);
  r->tenants = tab;
  r->ntenants = n;
  free(fresh);
  free(secrets);
  if (added != NULL)
    *added = nadd;
  if (removed != NULL)
    *removed = nrm;
  if (kept != NULL)
    *kept = nkeep;
  return 0;
oom:
  for (i = 0; fresh != NULL && i < n; i++)
    tenant_unref(fresh[i]);
  for (i = 0; secrets != NULL && i < n; i++)
    free(secrets[i]);
  free(tab);
  free(fresh);
  free(secrets);
  return -ENOMEM;
}

void tenants_free(struct router *r) {
  size_t i;

  for (i = 0; i < r->ntenants; i++)
    tenant_unref(r->tenants[i]);
  free(r->tenants);
  r->tenants = NULL;
  r->ntenants = 0;
}

const char *tenant_label(struct router *r, const char *tenant) {
  size_t i;

  for (i = 0; tenant != NULL && i < r->ntenants; i++)
    if (strcmp(r->tenants[i]->name, tenant) == 0)
      return r->tenants[i]->name;
  return FR_USAGE_OTHER;
}
