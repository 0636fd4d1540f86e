/* router.c - the bottom of the router's request handling: helpers on
 * struct router (router.h) that every layer above may call and that call
 * no handler: the access log's notes, the spillover events, a cluster's
 * cost, and the tenant of a bearer token. The HTTP server's side (request
 * records, dispatch, the access log) is server.c's; the routes, routes.c's.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/config.h"
#include "fr/cost.h"
#include "fr/http.h"
#include "fr/util.h"
#include "router.h"

void router_note(struct fr_http_req *req, const char *key, const char *value) {
  struct fr_buf b;
  size_t used = strlen(req->note);

  fr_buf_init(&b);
  fr_buf_printf(&b, ",\"%s\":", key);
  fr_buf_put_json_str(&b, value ? value : "", value ? strlen(value) : 0);
  /* A note that does not fit is dropped whole rather than cut mid-JSON. */
  if (b.data != NULL && used + b.len < sizeof(req->note))
    memcpy(req->note + used, b.data, b.len + 1);
  fr_buf_free(&b);
}

void router_event(struct router *r, const char *cluster, const char *reason, const char *request_id,
                  const char *tenant) {
  struct router_event *e = &r->events[r->next_event];

  snprintf(e->tenant, sizeof(e->tenant), "%s", tenant ? tenant : "");

  e->t_ms = fr_wall_ms();
  snprintf(e->cluster, sizeof(e->cluster), "%s", cluster);
  snprintf(e->reason, sizeof(e->reason), "%s", reason);
  snprintf(e->request_id, sizeof(e->request_id), "%s", request_id ? request_id : "");
  r->next_event = (r->next_event + 1) % FR_ARRAY_SIZE(r->events);
  if (r->nevents < FR_ARRAY_SIZE(r->events))
    r->nevents++;
}

void router_cluster_cost(struct router *r, size_t i, const struct fr_adapter_view *v, struct router_cost *out) {
  const struct fr_config_cluster *cc = &r->cfg->clusters[i];

  memset(out, 0, sizeof(*out));
  out->known = fr_cost_known(&cc->cost);
  /* Both prices are linear, so the view's running sums are enough. */
  out->now = fr_cost_fleet_hour(&cc->cost, v->sandboxes, v->sandbox_cpu_m, v->sandbox_mem_b);
  out->hosted = fr_cost_hosted_hour(&r->cfg->hosted, v->sandbox_cpu_m, v->sandbox_mem_b);
  out->capacity = (double)fr_adapter_total_slots(r->adapters[i], 1000, 2147483648LL) *
                  fr_cost_sandbox_hour(&cc->cost, 1000, 2147483648LL);
}

const char *router_tenant_of_bearer(struct router *r, const struct fr_http_req *req) {
  const char *h = fr_http_req_header(req, "Authorization");
  const struct fr_config_token *tok;
  const struct fr_config_tenant *t;

  if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0 || h[7] == '\0' ||
      (t = fr_config_tenant_by_token(r->cfg, h + 7, &tok)) == NULL ||
      fr_config_token_expired(tok, fr_wall_ms() / 1000))
    return NULL;
  return t->name;
}
