/* tenants.h - the router's record of each tenant: its limits, as the
 * current config snapshot gives them, and what it has going (requests in
 * flight, execs running, sandboxes being made) against them.
 *
 * Records are reference-counted and live apart from the config: a reload
 * (reload.c) updates the limits of the tenants it keeps in place, adds
 * the new ones and takes the removed ones out of the table. A request
 * holds a reference to its tenant's record for as long as it runs
 * (api_set_tenant), and so does every operation that counts itself in it
 * (an exec, a stream, a create); a removed tenant's record goes when the
 * last of them ends, so its counts are always settled on a live record.
 *
 * Loop thread only.
 */
#ifndef FR_ROUTER_TENANTS_H
#define FR_ROUTER_TENANTS_H

#include <stddef.h>
#include <stdint.h>

#include "fr/egress.h"

struct router;
struct fr_config;

struct tenant_state {
  int refs;
  int removed;                    /* gone from the config: new requests cannot name it */
  char name[64];
  /* Limits, from the config snapshot (the loopback-only router's "local"
   * tenant gets the defaults). 0 = unlimited where the config says so. */
  int64_t max_inflight, max_execs, max_sandboxes;
  int64_t max_cpu_m, max_mem_b, max_gpus;
  int64_t max_pool_replicas;      /* 0 = none */
  int64_t max_file_bytes;         /* largest upload into a sandbox */
  int64_t weight;                 /* fair share weight (1-1000) */
  int64_t max_queued_sandboxes, max_queued_execs;
  int64_t max_paused, max_paused_s, max_workspace_bytes; /* paused sandboxes and workspaces */
  int64_t max_lifetime_s;         /* its sandboxes' longest lifetime; 0: the config's (api_max_lifetime) */
  int admin;                      /* may create and change shared pools */
  char *secret;                   /* the Secret its creates' `secrets` read (own copy) */
  int has_network;                /* its creates' default egress: <network>; 0 = the default */
  struct fr_egress network;
  /* What it has going. */
  int64_t inflight;               /* requests answered later */
  int64_t execs;                  /* execs running */
  int64_t creating;               /* sandboxes of batches not finished yet */
  int64_t creating_cpu_m, creating_mem_b, creating_gpus; /* ... and what they ask for */
  int64_t port_requests;          /* requests to its sandboxes' ports in flight (ports.c) */
  int64_t port_tunnels;           /* upgraded connections to its sandboxes' ports (porttunnel.c) */
};

/* Builds the table from <r>->cfg at start-up: 0 or -ENOMEM. */
int tenants_init(struct router *r);
/* Brings the table to config <c> (the new snapshot of a reload): limits
 * of kept tenants change in place, new ones are added, removed ones are
 * marked and dropped from the table. 0, or -ENOMEM with the table as it
 * was. Fills <added>, <removed>, <kept> (may be NULL) with the counts. */
int tenants_apply(struct router *r, const struct fr_config *c, size_t *added, size_t *removed, size_t *kept);
/* ... and <on_removed> (may be NULL) hears of each record taken out. */
int tenants_apply_cb(struct router *r, const struct fr_config *c, size_t *added, size_t *removed, size_t *kept,
                     void (*on_removed)(struct router *r, struct tenant_state *t));
/* Drops the table (shutdown); records still referenced live on. */
void tenants_free(struct router *r);

/* The record of tenant <name> in the table, or NULL (borrowed: take a
 * reference to keep it). */
struct tenant_state *router_tenant(struct router *r, const char *name);
struct tenant_state *tenant_ref(struct tenant_state *t);
/* Accepts NULL. */
void tenant_unref(struct tenant_state *t);

/* The tenant label of <tenant> for usage metrics: itself when the config
 * knows it ("local" on a router without tenants), else "_other"
 * (FR_USAGE_OTHER): label values stay bounded by the config. Borrowed:
 * the record's name, valid until the next reload, or static. */
const char *tenant_label(struct router *r, const char *tenant);

#endif
