/* e2b_answer.c - the E2B endpoint's answers (e2b_answer.h, e2b_relay.h): sandboxes, running
 * and paused, in E2B's JSON shapes, e2b__shape() which turns every answer
 * of /e2b (errors included) into what the SDK reads, and the checks that
 * both the control API and the relays make. Calls no other E2B file.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/config.h"
#include "fr/egress.h"
#include "fr/http.h"
#include "fr/urlsafe.h"
#include "fr/util.h"
#include "api.h"
#include "e2b_answer.h"
#include "router.h"
#include "route_types.h"
#include "tenants.h"
#include "workspaces.h"

/* The envd version the control API reports for every sandbox: the one
 * fedrouter-agent implements (agent/README.md "Which envd version we
 * claim"). The SDK turns features on and off by it. */
#define ENVD_VERSION "0.5.7"

/* ---------------------------------------------------------------------- */
/* answers                                                                 */

/* <id> (either form, api_canonical_id) as "<cluster>.<pod>" into <canon>,
 * split: <cluster> copied, *<pod> into <canon>. 0 or -1. */
int e2b__split_id(struct router *r, const char *id, char *canon, size_t canon_cap, char *cluster, size_t ccap,
                    const char **pod) {
  const char *dot;

  if (api_canonical_id(r, id, canon, canon_cap) != 0 || (dot = strchr(canon, '.')) == NULL || dot == canon ||
      (size_t)(dot - canon) >= ccap)
    return -1;
  memcpy(cluster, canon, (size_t)(dot - canon));
  cluster[dot - canon] = '\0';
  *pod = dot + 1;
  return 0;
}

/* A sandbox as E2B's API shows it (ListedSandbox; <detail> adds what
 * SandboxDetail and Sandbox carry: the envd access token, the traffic
 * token and the domain of its preview URLs). Its id is the short one
 * (one DNS label: <port>-<id>.<domain> is a host name) when it has one. */
json_t *e2b__sandbox_json(struct router *r, struct fr_adapter *a, const struct fr_pod *pod, int detail) {
  struct fr_egress egress;
  char id[320], canon[320], token[65];
  json_t *net;
  int64_t started = pod->created_s >= 0 ? pod->created_s : pod->creation_s;
  int64_t cpus = (pod->cpu_m + 999) / 1000;
  json_t *j;

  snprintf(canon, sizeof(canon), "%s.%s", fr_adapter_name(a), pod->name);
  if (ports_short_id(r, fr_adapter_name(a), pod->name, id, sizeof(id)) != 0)
    snprintf(id, sizeof(id), "%s", canon);
  j = json_pack("{s:s,s:s,s:s,s:s,s:s,s:o,s:o,s:I,s:I,s:i,s:o,s:s,s:[]}", "templateID",
                pod->pool ? pod->pool : "", "alias", pod->pool ? pod->pool : "", "sandboxID", id, "clientID",
                fr_adapter_name(a), "envdVersion", ENVD_VERSION, "startedAt", api_time_json(started), "endAt",
                api_time_json(pod->expires_s), "cpuCount", (json_int_t)(cpus > 0 ? cpus : 1), "memoryMB",
                (json_int_t)(pod->mem_b >> 20), "diskSizeMB", 0, "metadata", api_labels_json(pod), "state",
                "running", "volumeMounts");
  if (j != NULL) {
    const char *ot = fr_pod_label(pod, FR_LABEL_ON_TIMEOUT), *ar = fr_pod_label(pod, FR_LABEL_AUTO_RESUME);
    json_object_set_new(j, "lifecycle", json_pack("{s:s,s:b}", "onTimeout",
                                                  ot != NULL && strcmp(ot, "pause") == 0 ? "pause" : "kill",
                                                  "autoResume", ar != NULL && strcmp(ar, "true") == 0));
  }
  if (j != NULL && detail) {
    if (fr_adapter_agent_token(a, pod->name, token) == 0)
      json_object_set_new(j, "envdAccessToken", json_string(token));
    if (ports_traffic_token(r, canon, token) == 0)
      json_object_set_new(j, "trafficAccessToken", json_string(token));
    json_object_set_new(j, "domain", r->cfg->ports_domain != NULL ? json_string(r->cfg->ports_domain) : json_null());
    /* Its egress, as E2B's SandboxDetail shows it. */
    if (fr_adapter_egress_of(a, pod, &egress) == 0 && (net = network_json(&egress)) != NULL) {
      json_object_set(j, "allowInternetAccess", json_object_get(net, "allow_internet"));
      json_object_set_new(j, "network", json_pack("{s:O,s:O}", "allowOut", json_object_get(net, "allow_out"),
                                                  "denyOut", json_object_get(net, "deny_out")));
      json_decref(net);
    }
  }
  return j;
}

/* A paused sandbox (its workspace claim) as E2B's ListedSandbox /
 * SandboxDetail: state "paused", endAt when it goes. */
json_t *e2b__paused_json(struct router *r, struct fr_adapter *a, const struct fr_workspace *w) {
  char id[320];
  int64_t cpu_m = json_integer_value(json_object_get(w->spec, "cpu_m"));
  int64_t mem_b = json_integer_value(json_object_get(w->spec, "mem_b"));
  const char *ar = workspace_spec_label(w, FR_LABEL_AUTO_RESUME), *ot = workspace_spec_label(w, FR_LABEL_ON_TIMEOUT);

  if (ports_short_id(r, fr_adapter_name(a), w->pod, id, sizeof(id)) != 0)
    snprintf(id, sizeof(id), "%s.%s", fr_adapter_name(a), w->pod);
  return json_pack("{s:s,s:s,s:s,s:s,s:s,s:o,s:o,s:I,s:I,s:i,s:o,s:s,s:[],s:{s:s,s:b}}", "templateID",
                   w->pool ? w->pool : "", "alias", w->pool ? w->pool : "", "sandboxID", id, "clientID",
                   fr_adapter_name(a), "envdVersion", ENVD_VERSION, "startedAt", api_time_json(w->created_s), "endAt",
                   api_time_json(w->expires_s), "cpuCount", (json_int_t)(cpu_m > 0 ? (cpu_m + 999) / 1000 : 1),
                   "memoryMB", (json_int_t)(mem_b >> 20), "diskSizeMB", (int)(w->bytes >> 20), "metadata",
                   workspace_user_labels(w), "state", "paused", "volumeMounts", "lifecycle", "onTimeout",
                   ot != NULL && strcmp(ot, "pause") == 0 ? "pause" : "kill", "autoResume",
                   ar != NULL && strcmp(ar, "true") == 0);
}

/* The create's v1 answer {"sandboxes":[{"id":...}]} as E2B's Sandbox. */
static json_t *created_json(struct api_req *q, json_t *body) {
  const char *id = json_string_value(json_object_get(json_array_get(json_object_get(body, "sandboxes"), 0), "id"));
  char cluster[64], canon[320];
  const char *pod;
  struct fr_adapter *a;
  const struct fr_pod *p;

  if (id == NULL || e2b__split_id(q->r, id, canon, sizeof(canon), cluster, sizeof(cluster), &pod) != 0 ||
      (a = api_adapter(q->r, cluster)) == NULL || (p = fr_adapter_pod(a, pod)) == NULL)
    return NULL;
  return e2b__sandbox_json(q->r, a, p, 1);
}

/* shape_cb: every answer of /e2b in the SDK's shapes. */
json_t *e2b__shape(struct api_req *q, int *status, json_t *body) {
  json_t *err = json_object_get(body, "error"), *out;

  if (*status >= 400 && json_is_object(err)) {
    /* A refused create names the E2B field the client sent. */
    static const char *const fields[][2] = {{"pool", "templateID"}, {"labels", "metadata"}, {"env", "envVars"},
                                            {"timeout_s", "timeout"}};
    /* ... and the network fields by prefix ("network.allow_out[2]"). */
    static const char *const prefixes[][2] = {{"network.allow_out", "network.allowOut"},
                                              {"network.deny_out", "network.denyOut"},
                                              {"network.allow_internet", "allow_internet_access"}};
    const char *f = json_string_value(json_object_get(err, "field"));
    char renamed[128];
    size_t i, n;
    for (i = 0; f != NULL && q->shape_kind == E2B_SHAPE_CREATE && i < FR_ARRAY_SIZE(fields); i++)
      if (strcmp(f, fields[i][0]) == 0) {
        json_object_set_new(err, "field", json_string(fields[i][1]));
        f = NULL;
        break;
      }
    for (i = 0; f != NULL && q->shape_kind == E2B_SHAPE_CREATE && i < FR_ARRAY_SIZE(prefixes); i++) {
      n = strlen(prefixes[i][0]);
      if (strncmp(f, prefixes[i][0], n) == 0 && (f[n] == '\0' || f[n] == '[')) {
        snprintf(renamed, sizeof(renamed), "%s%.60s", prefixes[i][1], f + n);
        json_object_set_new(err, "field", json_string(renamed));
        break;
      }
    }
    out = json_pack("{s:i,s:O,s:O}", "code", *status, "message", json_object_get(err, "message"), "error", err);
    json_decref(body);
    return out;
  }
  if (q->shape_kind == E2B_SHAPE_PAUSE && *status == 200) {
    /* E2B's pause answers 204. */
    json_decref(body);
    *status = 204;
    return NULL;
  }
  if ((q->shape_kind == E2B_SHAPE_RESUME || q->shape_kind == E2B_SHAPE_CONNECT_RESUME) && *status == 200 &&
      json_string_value(json_object_get(body, "id")) != NULL) {
    /* v1's resume answers the sandbox; E2B's connect of a paused one 201. */
    json_t *wrapped = json_pack("{s:[O]}", "sandboxes", body);
    out = wrapped ? created_json(q, wrapped) : NULL;
    json_decref(wrapped);
    json_decref(body);
    if (out == NULL) {
      *status = 502;
      return json_pack("{s:i,s:s,s:{s:s,s:s}}", "code", 502, "message", "the sandbox was resumed but is gone",
                       "error", "code", "sandbox_not_found", "message", "the sandbox was resumed but is gone");
    }
    *status = 201;
    return out;
  }
  if (q->shape_kind == E2B_SHAPE_CREATE && *status == 201) {
    out = created_json(q, body);
    json_decref(body);
    if (out == NULL) {
      *status = 502;
      return json_pack("{s:i,s:s,s:{s:s,s:s}}", "code", 502, "message", "the sandbox was created but is gone",
                       "error", "code", "sandbox_not_found", "message", "the sandbox was created but is gone");
    }
    return out;
  }
  return body;
}

/* The tenant of <q> (set) may start one more request; else answers 429. */
int e2b__admitted(struct api_req *q) {
  if (q->ts == NULL || q->ts->inflight < q->ts->max_inflight)
    return 1;
  api_reply(q, 429, api_limit_body("too many requests in flight (max_requests_in_flight)", "max_requests_in_flight"),
            "Retry-After: 1\r\n");
  return 0;
}

void e2b__not_supported(struct api_req *q, const char *what) {
  char msg[400];

  snprintf(msg, sizeof(msg), "fedrouter does not support %.200s through its E2B-compatible endpoint (docs/e2b.md)",
           what);
  api_fail(q, 501, "not_supported", msg, NULL);
}

