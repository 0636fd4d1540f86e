/* reload.c - the router config's reloads (reload.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uv.h>

#include "fr/buf.h"
#include "fr/config.h"
#include "fr/log.h"
#include "fr/util.h"
#include "execwait.h"
#include "queue.h"
#include "reload.h"
#include "router.h"
#include "tenants.h"

/* How often the files are looked at. The kubelet takes a minute or more
 * to update a mounted ConfigMap or Secret; a second is nothing next to it
 * and costs one read of a few KiB. */
#define RELOAD_POLL_MS 1000

struct reload {
  struct router *r;
  uv_timer_t timer;
  int refs;                     /* the timer handle's and a load's in flight */
  int busy;                     /* a look or load is on the thread pool */
  int again;                    /* SIGHUP during it: once more after */
  int closing;
  char failed_version[65];      /* the version last rejected: not loaded again until it changes */
  int64_t loaded_at;            /* unix seconds of the running config */
  uint64_t reloads, failures;
  char error[1100];             /* the last rejection, "" when the running config is the newest file */
  int64_t error_at;
};

struct reload_work {
  uv_work_t w;
  struct reload *rl;
  struct fr_config *running;    /* a reference */
  int forced;
  char failed_version[65];      /* a copy (the loop may change the original) */
  int looked;                   /* the version could be read */
  int loaded;                   /* a load was tried */
  int rc;
  struct fr_config *next;
  struct fr_config_error err;
  char version[65];
};

static void rl_unref(struct reload *rl) {
  if (--rl->refs == 0)
    free(rl);
}

static void on_timer_closed(uv_handle_t *h) {
  rl_unref(h->data);
}

/* The thread pool: has anything changed, and if so, load it. */
static void look(uv_work_t *w) {
  struct reload_work *rw = fr_container_of(w, struct reload_work, w);

  rw->looked = fr_config_version(rw->running->source, rw->version) == 0;
  if (!rw->forced && (!rw->looked || strcmp(rw->version, rw->running->version) == 0 ||
                      strcmp(rw->version, rw->failed_version) == 0))
    return;
  rw->loaded = 1;
  rw->rc = fr_config_load_next(rw->running->source, rw->running, &rw->next, &rw->err);
}

static void reload_start(struct reload *rl, int forced);

/* The new snapshot <next> (taken) goes live. */
static void apply(struct reload *rl, struct fr_config *next) {
  struct router *r = rl->r;
  struct fr_config *old = r->cfg;
  size_t added = 0, removed = 0, kept = 0;

  if (tenants_apply_cb(r, next, &added, &removed, &kept, execwait_tenant_removed) != 0) {
    snprintf(rl->error, sizeof(rl->error), "%s: out of memory while applying the reload", next->source);
    rl->error_at = fr_wall_ms() / 1000;
    rl->failures++;
    FR_ERROR("config", "reload rejected, keeping version %.12s: out of memory", old->version);
    fr_config_unref(next);
    return;
  }
  r->cfg = next;
  r->exec_budget.max = (size_t)next->exec_output_budget_bytes;
  rl->loaded_at = fr_wall_ms() / 1000;
  rl->reloads++;
  rl->error[0] = '\0';
  rl->failed_version[0] = '\0';
  FR_INFO("config", "reloaded %s: version %.12s (was %.12s); %zu tenant(s): %zu kept, %zu added, %zu removed",
          next->source, next->version, old->version, r->ntenants, kept, added, removed);
  fr_config_unref(old);
  queue_kick(r); /* weights and limits may have changed */
}

static void looked(uv_work_t *w, int status) {
  struct reload_work *rw = fr_container_of(w, struct reload_work, w);
  struct reload *rl = rw->rl;
  char msg[1100];

  rl->busy = 0;
  if (rl->closing || status != 0) {
    fr_config_unref(rw->next);
  } else if (!rw->loaded && rw->looked && strcmp(rw->version, rl->r->cfg->version) == 0) {
    /* The files are what runs (a rejected edit was undone): nothing is
     * wrong any more. */
    rl->error[0] = '\0';
    rl->failed_version[0] = '\0';
  } else if (rw->loaded && rw->rc != 0) {
    if (rw->err.line > 0)
      snprintf(msg, sizeof(msg), "%s:%d: %s", rw->err.file, rw->err.line, rw->err.msg);
    else
      snprintf(msg, sizeof(msg), "%s: %s", rw->err.file[0] ? rw->err.file : rw->running->source, rw->err.msg);
    snprintf(rl->error, sizeof(rl->error), "%s", msg);
    rl->error_at = fr_wall_ms() / 1000;
    rl->failures++;
    if (rw->looked)
      memcpy(rl->failed_version, rw->version, sizeof(rl->failed_version));
    FR_ERROR("config", "reload rejected, keeping version %.12s: %s", rl->r->cfg->version, msg);
  } else if (rw->loaded && strcmp(rw->next->version, rl->r->cfg->version) == 0) {
    /* Loaded, and the same as what runs (a SIGHUP without a change). */
    fr_config_unref(rw->next);
    rl->error[0] = '\0';
    rl->failed_version[0] = '\0';
  } else if (rw->loaded) {
    apply(rl, rw->next);
  }
  fr_config_unref(rw->running);
  free(rw);
  if (!rl->closing && rl->again) {
    rl->again = 0;
    reload_start(rl, 1);
  }
  rl_unref(rl);
}

static void reload_start(struct reload *rl, int forced) {
  struct reload_work *rw;

  if (rl->closing || rl->r->stopping)
    return;
  if (rl->busy) {
    rl->again |= forced;
    return;
  }
  if ((rw = calloc(1, sizeof(*rw))) == NULL)
    return;
  rw->rl = rl;
  rw->forced = forced;
  rw->running = fr_config_ref(rl->r->cfg);
  memcpy(rw->failed_version, rl->failed_version, sizeof(rw->failed_version));
  if (uv_queue_work(rl->r->loop, &rw->w, look, looked) != 0) {
    fr_config_unref(rw->running);
    free(rw);
    return;
  }
  rl->busy = 1;
  rl->refs++;
}

static void on_timer(uv_timer_t *t) {
  reload_start(t->data, 0);
}

int reload_init(struct router *r) {
  struct reload *rl = calloc(1, sizeof(*rl));

  if (rl == NULL)
    return -ENOMEM;
  rl->r = r;
  rl->refs = 1;
  rl->loaded_at = fr_wall_ms() / 1000;
  uv_timer_init(r->loop, &rl->timer);
  rl->timer.data = rl;
  uv_timer_start(&rl->timer, on_timer, RELOAD_POLL_MS, RELOAD_POLL_MS);
  uv_unref((uv_handle_t *)&rl->timer);
  r->reload = rl;
  return 0;
}

void reload_now(struct router *r) {
  if (r->reload != NULL)
    reload_start(r->reload, 1);
}

void reload_close(struct router *r) {
  struct reload *rl = r->reload;

  if (rl == NULL)
    return;
  r->reload = NULL;
  rl->closing = 1;
  uv_close((uv_handle_t *)&rl->timer, on_timer_closed);
}

json_t *reload_json(struct router *r) {
  struct reload *rl = r->reload;
  const struct fr_config *c = r->cfg;
  json_t *j, *files = json_array(), *tenants = json_array();
  char t[21];
  size_t i, k;
  int64_t now = fr_wall_ms() / 1000;

  for (i = 0; i < c->nfiles; i++)
    json_array_append_new(files, json_string(c->files[i]));
  for (i = 0; i < c->ntenants; i++) {
    const struct fr_config_tenant *ct = &c->tenants[i];
    json_t *toks = json_array();
    for (k = 0; k < ct->ntokens; k++) {
      json_t *e = json_pack("{s:s,s:b}", "name", ct->tokens[k].name, "expired",
                            fr_config_token_expired(&ct->tokens[k], now));
      if (ct->tokens[k].expires_at > 0) {
        fr_time_rfc3339(ct->tokens[k].expires_at, t);
        json_object_set_new(e, "expires_at", json_string(t));
      } else {
        json_object_set_new(e, "expires_at", json_null());
      }
      json_array_append_new(toks, e);
    }
    json_array_append_new(tenants, json_pack("{s:s,s:I,s:b,s:o}", "name", ct->name, "weight", (json_int_t)ct->weight,
                                             "admin", ct->admin, "tokens", toks));
  }
  fr_time_rfc3339(rl != NULL ? rl->loaded_at : 0, t);
  j = json_pack("{s:s,s:s,s:o,s:s,s:I,s:I,s:o}", "source", c->source, "version", c->version, "files", files,
                "loaded_at", t, "reloads", (json_int_t)(rl ? rl->reloads : 0), "reload_failures",
                (json_int_t)(rl ? rl->failures : 0), "tenants", tenants);
  if (j != NULL && rl != NULL && rl->error[0] != '\0') {
    fr_time_rfc3339(rl->error_at, t);
    json_object_set_new(j, "last_reload_error", json_pack("{s:s,s:s}", "at", t, "message", rl->error));
  } else if (j != NULL) {
    json_object_set_new(j, "last_reload_error", json_null());
  }
  return j;
}

void reload_metrics(struct router *r, struct fr_buf *b) {
  struct reload *rl = r->reload;
  const struct fr_config *c = r->cfg;
  size_t i, k;

  fr_buf_puts(b, "# HELP fedrouter_config_info The running router config; always 1.\n"
                 "# TYPE fedrouter_config_info gauge\n");
  fr_buf_printf(b, "fedrouter_config_info{version=\"%s\"} 1\n", c->version);
  fr_buf_puts(b, "# HELP fedrouter_config_reloads_total Router config reloads by result.\n"
                 "# TYPE fedrouter_config_reloads_total counter\n");
  fr_buf_printf(b, "fedrouter_config_reloads_total{result=\"ok\"} %" PRIu64 "\n", rl ? rl->reloads : 0);
  fr_buf_printf(b, "fedrouter_config_reloads_total{result=\"error\"} %" PRIu64 "\n", rl ? rl->failures : 0);
  fr_buf_puts(b, "# HELP fedrouter_token_expiry_timestamp_seconds When each tenant token expires (tokens "
                 "without an expiry are not listed).\n# TYPE fedrouter_token_expiry_timestamp_seconds gauge\n");
  for (i = 0; i < c->ntenants; i++)
    for (k = 0; k < c->tenants[i].ntokens; k++)
      if (c->tenants[i].tokens[k].expires_at > 0)
        /* Tenant and token names are [A-Za-z0-9._-]: nothing to escape. */
        fr_buf_printf(b, "fedrouter_token_expiry_timestamp_seconds{tenant=\"%s\",token=\"%s\"} %" PRId64 "\n",
                      c->tenants[i].name, c->tenants[i].tokens[k].name, c->tenants[i].tokens[k].expires_at);
}
