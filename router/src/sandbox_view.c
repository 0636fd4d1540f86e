/* sandbox_view.c - a sandbox as the v1 API shows it (api_sandbox_json:
 * its state, workspace, short id, tokens, public ports and egress) and as
 * a handler finds it (api_find_sandbox, api_find_reachable_sandbox).
 * Declared in api.h; apart from api.c, which answers and calls no handler
 * file, because these call the ports, workspace and network files.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/adapter.h"
#include "fr/buf.h"
#include "fr/config.h"
#include "fr/egress.h"
#include "fr/http.h"
#include "fr/util.h"
#include "api.h"
#include "router.h"

json_t *workspace_json(const struct fr_workspace *w) {
  json_t *j = json_pack("{s:s?,s:s?}", "path", w->path, "size", w->size);

  if (j != NULL && w->storage_class != NULL)
    json_object_set_new(j, "storage_class", json_string(w->storage_class));
  return j;
}

static const char *sandbox_state(struct fr_adapter *a, const struct fr_pod *pod) {
  if (fr_adapter_pod_evicted(a, pod))
    return "evicted";
  if (pod->terminating)
    return "terminating";
  if (fr_pod_finished(pod))
    return pod->phase == FR_POD_FAILED && pod->reason && strcmp(pod->reason, "DeadlineExceeded") == 0
               ? "expired"
               : "failed";
  if (pod->phase == FR_POD_RUNNING && pod->ready)
    return "running";
  /* Its node stopped reporting (the pod went unready with it, or never
   * started there): not "pending", which would say it is still starting. */
  if (fr_adapter_node_unready(a, pod->node))
    return "unreachable";
  return "pending";
}

int api_sandbox_visible(struct fr_adapter *a, const struct fr_pod *pod) {
  return !fr_adapter_pod_leaving(a, pod) || fr_adapter_pod_evicted(a, pod);
}

/* The names in annotation fedrouter.io/secrets ("A,B"), as a JSON array;
 * NULL when it has none. Anything that is not an env var name (the
 * annotation is editable in the cluster) is left out. */
static json_t *secret_names_json(const char *ann) {
  static const char first[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_";
  static const char rest[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789";
  json_t *out;
  const char *p = ann;
  char name[129];

  if (ann == NULL || *ann == '\0' || (out = json_array()) == NULL)
    return NULL;
  while (*p != '\0') {
    size_t len = strcspn(p, ",");
    if (len > 0 && len < sizeof(name) && strchr(first, p[0]) != NULL && strspn(p, rest) >= len) {
      memcpy(name, p, len);
      name[len] = '\0';
      json_array_append_new(out, json_string(name));
    }
    p += len;
    if (*p == ',')
      p++;
  }
  if (json_array_size(out) == 0) {
    json_decref(out);
    return NULL;
  }
  return out;
}

json_t *api_sandbox_json(struct router *r, struct fr_adapter *a, const struct fr_pod *pod, int detail) {
  struct fr_egress egress;
  char id[256], short_id[64], token[65];
  json_t *labels = api_labels_json(pod), *sb, *secrets;
  int64_t created = pod->created_s >= 0 ? pod->created_s : pod->creation_s;

  snprintf(id, sizeof(id), "%s.%s", fr_adapter_name(a), pod->name);
  /* A delete the cluster did not take yet (being retried): on its way out. */
  sb = json_pack("{s:s,s:s,s:s,s:s,s:o,s:b,s:s,s:o,s:o,s:o}", "id", id, "name",
                   pod->sbname ? pod->sbname : "", "cluster", fr_adapter_name(a), "region",
                   fr_adapter_region(a), "pool", pod->pool ? json_string(pod->pool) : json_null(), "warm",
                   pod->warm, "state",
                   fr_adapter_pod_delete_pending(a, pod) ? "terminating" : sandbox_state(a, pod), "labels", labels,
                   "created_at",
                   created >= 0 ? api_time_json(created) : json_string(""),
                   "expires_at", api_time_json(pod->expires_s));
  /* Its workspace, from its claim (workspace.c). */
  if (sb != NULL && fr_pod_label(pod, FR_LABEL_WORKSPACE) != NULL) {
    struct fr_workspace w;
    if (fr_adapter_workspace(a, pod->name, &w) == 0)
      json_object_set_new(sb, "workspace", workspace_json(&w));
    fr_workspace_clear(&w);
  }
  /* Which create-time secrets it was given (names, never values): only
   * when it has any. */
  secrets = secret_names_json(pod->secrets);
  if (sb == NULL) {
    json_decref(secrets);
    return NULL;
  }
  if (secrets != NULL)
    json_object_set_new(sb, "secrets", secrets);
  /* Its ports (docs/api.md "Ports"): the short id of its host names, and
   * for the owner's own look, the traffic token that opens them. */
  if (ports_short_id(r, fr_adapter_name(a), pod->name, short_id, sizeof(short_id)) == 0)
    json_object_set_new(sb, "short_id", json_string(short_id));
  if (detail) {
    const char *pub = fr_pod_label(pod, FR_LABEL_PUBLIC_PORTS);
    if (ports_traffic_token(r, id, token) == 0)
      json_object_set_new(sb, "traffic_token", json_string(token));
    /* How its exec, files and ports are reached: the cluster's gateway or
     * the API server's pod proxy (docs/gateway.md). */
    json_object_set_new(sb, "data_path", json_string(fr_adapter_data_path(a)));
    if (r->cfg->ports_domain != NULL)
      json_object_set_new(sb, "domain", json_string(r->cfg->ports_domain));
    if (pub != NULL)
      json_object_set_new(sb, "public_ports", ports_public_json(pub));
    /* Where it may connect: its egress policy, when this router knows it. */
    if (fr_adapter_egress_of(a, pod, &egress) == 0)
      json_object_set_new(sb, "network", network_json(&egress));
  }
  return sb;
}

const struct fr_pod *api_find_sandbox(struct api_req *q, const char *given, struct fr_adapter **out_a) {
  char canon[320];
  /* A short id (one DNS label) stands for its <cluster>.<pod>. */
  const char *id = strchr(given, '.') == NULL && api_canonical_id(q->r, given, canon, sizeof(canon)) == 0 ? canon
                                                                                                        : given;
  const char *dot = strchr(id, '.');
  char cluster[64], pod_name[200];
  struct fr_adapter *a;
  const struct fr_pod *pod;
  char msg[400];

  /* Cluster and pod names are DNS labels: anything else cannot be an id. */
  if (dot == NULL || dot == id || dot[1] == '\0' || (size_t)(dot - id) >= sizeof(cluster) ||
      strlen(dot + 1) >= sizeof(pod_name) ||
      strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789-.") != strlen(id)) {
    api_fail(q, 400, "invalid_id", "a sandbox id looks like <cluster>.<pod>", NULL);
    return NULL;
  }
  memcpy(cluster, id, (size_t)(dot - id));
  cluster[dot - id] = '\0';
  snprintf(pod_name, sizeof(pod_name), "%s", dot + 1);
  a = api_adapter(q->r, cluster);
  pod = a ? fr_adapter_pod(a, pod_name) : NULL;
  if (pod == NULL && a != NULL && !fr_adapter_pods_synced(a)) {
    snprintf(msg, sizeof(msg), "cluster %s is not synced yet (this router started recently); retry shortly or "
             "on another replica", cluster);
    api_fail(q, 503, "not_synced", msg, "Retry-After: 1\r\n");
    return NULL;
  }
  if (pod == NULL || !api_owned_by(pod, q->tenant) || !api_sandbox_visible(a, pod)) {
    snprintf(msg, sizeof(msg), "no sandbox %.200s for this tenant", id);
    api_fail(q, 404, "sandbox_not_found", msg, NULL);
    return NULL;
  }
  *out_a = a;
  return pod;
}

const struct fr_pod *api_find_reachable_sandbox(struct api_req *q, const char *id, struct fr_adapter **out_a) {
  const struct fr_pod *pod = api_find_sandbox(q, id, out_a);
  char msg[512];

  if (pod != NULL && fr_adapter_node_unready(*out_a, pod->node)) {
    snprintf(msg, sizeof(msg),
             "sandbox %.200s is unreachable: its node %.100s is not Ready; the cluster evicts it if the node does "
             "not come back within the sandbox's toleration (300 s by default)",
             id, pod->node);
    api_fail(q, 503, "sandbox_unreachable", msg, "Retry-After: 5\r\n");
    return NULL;
  }
  return pod;
}
