/* kinds.c - per-kind names and the meta.k8s.io Table rendering kubectl asks
 * for (Accept: application/json;as=Table;v=v1;g=meta.k8s.io). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "fr/buf.h"
#include "fr/util.h"
#include "sim.h"

static const struct {
  const char *kind, *list, *resource, *api_version;
  int namespaced;
} kinds[K_COUNT] = {
    [K_NAMESPACE] = {"Namespace", "NamespaceList", "namespaces", "v1", 0},
    [K_NODE] = {"Node", "NodeList", "nodes", "v1", 0},
    [K_POD] = {"Pod", "PodList", "pods", "v1", 1},
    [K_QUOTA] = {"ResourceQuota", "ResourceQuotaList", "resourcequotas", "v1", 1},
    [K_RS] = {"ReplicaSet", "ReplicaSetList", "replicasets", "apps/v1", 1},
};

const char *kind_name(enum sim_kind k) { return kinds[k].kind; }
const char *kind_list_name(enum sim_kind k) { return kinds[k].list; }
const char *kind_resource(enum sim_kind k) { return kinds[k].resource; }
const char *kind_api_version(enum sim_kind k) { return kinds[k].api_version; }
int kind_namespaced(enum sim_kind k) { return kinds[k].namespaced; }

struct column {
  const char *name, *type, *format, *desc;
  int priority;
};

static const struct column pod_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    {"Ready", "string", "", "The aggregate readiness state of this pod for accepting traffic.", 0},
    {"Status", "string", "", "The aggregate status of the containers in this pod.", 0},
    {"Restarts", "string", "", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.", 0},
    {"Age", "string", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0},
    {"IP", "string", "", "IP address allocated to the pod. Routable at least within the cluster.", 1},
    {"Node", "string", "", "NodeName is a request to schedule this pod onto a specific node.", 1},
    {"Nominated Node", "string", "", "nominatedNodeName is set only when this pod preempts other pods on the node.", 1},
    {"Readiness Gates", "string", "", "If specified, all readiness gates will be evaluated for pod readiness.", 1},
};
static const struct column node_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    {"Status", "string", "", "The status of the node", 0},
    {"Roles", "string", "", "The roles of the node", 0},
    {"Age", "string", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0},
    {"Version", "string", "", "Kubelet Version reported by the node.", 0},
    {"Internal-IP", "string", "", "List of addresses reachable to the node.", 1},
    {"External-IP", "string", "", "List of addresses reachable to the node.", 1},
    {"OS-Image", "string", "", "OS Image reported by the node from /etc/os-release.", 1},
    {"Kernel-Version", "string", "", "Kernel Version reported by the node.", 1},
    {"Container-Runtime", "string", "", "Container Runtime Version reported by the node.", 1},
};
static const struct column ns_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    {"Status", "string", "", "The status of the namespace", 0},
    {"Age", "string", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0},
};
static const struct column rs_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    {"Desired", "integer", "", "Number of desired pods.", 0},
    {"Current", "integer", "", "Number of actual replicas.", 0},
    {"Ready", "integer", "", "Number of ready replicas.", 0},
    {"Age", "string", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0},
};
static const struct column quota_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    {"Age", "string", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0},
    {"Request", "string", "", "Request represents a minimum amount of cpu/memory that a container may consume.", 0},
    {"Limit", "string", "", "Limits control the maximum amount of cpu/memory that a container can use independent of contention on the node.", 0},
};

/* Kubernetes' duration.HumanDuration, as kubectl shows AGE. */
static void human_age(int64_t created, char *out, size_t cap) {
  int64_t d = fr_wall_ms() / 1000 - created;

  if (d < 0)
    d = 0;
  if (d < 120)
    snprintf(out, cap, "%" PRId64 "s", d);
  else if (d < 600)
    snprintf(out, cap, "%" PRId64 "m%" PRId64 "s", d / 60, d % 60);
  else if (d < 3 * 3600)
    snprintf(out, cap, "%" PRId64 "m", d / 60);
  else if (d < 8 * 3600)
    snprintf(out, cap, "%" PRId64 "h%" PRId64 "m", d / 3600, (d % 3600) / 60);
  else if (d < 48 * 3600)
    snprintf(out, cap, "%" PRId64 "h", d / 3600);
  else if (d < 8 * 86400)
    snprintf(out, cap, "%" PRId64 "d%" PRId64 "h", d / 86400, (d % 86400) / 3600);
  else
    snprintf(out, cap, "%" PRId64 "d", d / 86400);
}

static json_t *age_cell(json_t *obj) {
  const char *ts = json_string_value(json_path(obj, "metadata.creationTimestamp"));
  int64_t t = 0;
  char age[32];

  if (ts == NULL || fr_time_parse_rfc3339(ts, &t) != 0)
    return json_string("<unknown>");
  human_age(t, age, sizeof(age));
  return json_string(age);
}

static json_t *str_or_none(json_t *v) {
  const char *s = json_string_value(v);

  return json_string(s && *s ? s : "<none>");
}

static const char *cond_status(json_t *conds, const char *type) {
  size_t i;
  json_t *c;

  json_array_foreach(conds, i, c) {
    if (strcmp(json_get_str(c, "type") ? json_get_str(c, "type") : "", type) == 0)
      return json_get_str(c, "status");
  }
  return NULL;
}

static void pod_cells(json_t *obj, json_t *cells) {
  json_t *st = json_object_get(obj, "status");
  json_t *cs = json_object_get(st, "containerStatuses");
  json_t *containers = json_path(obj, "spec.containers");
  size_t total = json_array_size(containers), ready = 0, i;
  int64_t restarts = 0;
  const char *status = json_get_str(st, "phase");
  json_t *c;
  char buf[32];

  json_array_foreach(cs, i, c) {
    json_t *waiting = json_path(c, "state.waiting");
    json_t *term = json_path(c, "state.terminated");
    if (json_is_true(json_object_get(c, "ready")))
      ready++;
    restarts += json_get_int(c, "restartCount", 0);
    if (json_get_str(waiting, "reason"))
      status = json_get_str(waiting, "reason");
    else if (term != NULL && json_get_str(term, "reason"))
      status = json_get_str(term, "reason");
  }
  if (json_get_str(st, "reason"))
    status = json_get_str(st, "reason");
  if (json_path(obj, "metadata.deletionTimestamp") != NULL)
    status = "Terminating";
  if (status == NULL)
    status = "Pending";
  snprintf(buf, sizeof(buf), "%zu/%zu", ready, total);
  json_array_append_new(cells, json_string(buf));
  json_array_append_new(cells, json_string(status));
  json_array_append_new(cells, json_integer(restarts));
  json_array_append_new(cells, age_cell(obj));
  json_array_append_new(cells, str_or_none(json_object_get(st, "podIP")));
  json_array_append_new(cells, str_or_none(json_path(obj, "spec.nodeName")));
  json_array_append_new(cells, str_or_none(json_object_get(st, "nominatedNodeName")));
  json_array_append_new(cells, json_string("<none>"));
}

static void node_cells(json_t *obj, json_t *cells) {
  const char *ready = cond_status(json_path(obj, "status.conditions"), "Ready");
  json_t *info = json_path(obj, "status.nodeInfo");
  json_t *addrs = json_path(obj, "status.addresses");
  const char *ip = "<none>";
  char status[64];
  size_t i;
  json_t *a;

  json_array_foreach(addrs, i, a) {
    if (json_get_str(a, "type") && strcmp(json_get_str(a, "type"), "InternalIP") == 0)
      ip = json_get_str(a, "address");
  }
  snprintf(status, sizeof(status), "%s%s", ready && strcmp(ready, "True") == 0 ? "Ready" : "NotReady",
           json_is_true(json_path(obj, "spec.unschedulable")) ? ",SchedulingDisabled" : "");
  json_array_append_new(cells, json_string(status));
  json_array_append_new(cells, json_string("<none>"));
  json_array_append_new(cells, age_cell(obj));
  json_array_append_new(cells, str_or_none(json_object_get(info, "kubeletVersion")));
  json_array_append_new(cells, json_string(ip ? ip : "<none>"));
  json_array_append_new(cells, json_string("<none>"));
  json_array_append_new(cells, str_or_none(json_object_get(info, "osImage")));
  json_array_append_new(cells, str_or_none(json_object_get(info, "kernelVersion")));
  json_array_append_new(cells, str_or_none(json_object_get(info, "containerRuntimeVersion")));
}

static void quota_cells(json_t *obj, json_t *cells) {
  struct fr_buf req, lim;
  json_t *hard = json_path(obj, "status.hard"), *used = json_path(obj, "status.used");
  const char *k;
  json_t *v;

  fr_buf_init(&req);
  fr_buf_init(&lim);
  json_array_append_new(cells, age_cell(obj));
  json_object_foreach(hard, k, v) {
    struct fr_buf *b = strncmp(k, "limits.", 7) == 0 ? &lim : &req;
    const char *u = json_get_str(used, k);
    fr_buf_printf(b, "%s%s: %s/%s", b->len ? ", " : "", k, u ? u : "0",
                  json_string_value(v) ? json_string_value(v) : "");
  }
  json_array_append_new(cells, json_string(req.data ? req.data : ""));
  json_array_append_new(cells, json_string(lim.data ? lim.data : ""));
  fr_buf_free(&req);
  fr_buf_free(&lim);
}

int table_render(struct sim *s, enum sim_kind k, struct objver **vs, size_t n, const char *rv,
                 const char *cont, int include_object, struct fr_buf *b) {
  const struct column *cols;
  size_t ncols, i;
  json_t *t = json_object(), *defs = json_array(), *rows = json_array(), *meta = json_object();
  char *out;
  int rc;

  (void)s;
  switch (k) {
  case K_POD: cols = pod_cols; ncols = FR_ARRAY_SIZE(pod_cols); break;
  case K_NODE: cols = node_cols; ncols = FR_ARRAY_SIZE(node_cols); break;
  case K_NAMESPACE: cols = ns_cols; ncols = FR_ARRAY_SIZE(ns_cols); break;
  case K_RS: cols = rs_cols; ncols = FR_ARRAY_SIZE(rs_cols); break;
  default: cols = quota_cols; ncols = FR_ARRAY_SIZE(quota_cols); break;
  }
  json_object_set_new(t, "kind", json_string("Table"));
  json_object_set_new(t, "apiVersion", json_string("meta.k8s.io/v1"));
  json_object_set_new(meta, "resourceVersion", json_string(rv));
  if (cont != NULL && *cont)
    json_object_set_new(meta, "continue", json_string(cont));
  json_object_set_new(t, "metadata", meta);
  for (i = 0; i < ncols; i++) {
    json_array_append_new(defs, json_pack("{s:s,s:s,s:s,s:s,s:i}", "name", cols[i].name, "type",
                                          cols[i].type, "format", cols[i].format, "description",
                                          cols[i].desc, "priority", cols[i].priority));
  }
  json_object_set_new(t, "columnDefinitions", defs);
  for (i = 0; i < n; i++) {
    json_t *obj = json_loadb(vs[i]->json, vs[i]->json_len, 0, NULL);
    json_t *cells = json_array(), *row = json_object();
    if (obj == NULL)
      continue;
    json_array_append_new(cells, json_string(vs[i]->fields[F_NAME] ? vs[i]->fields[F_NAME] : ""));
    switch (k) {
    case K_POD: pod_cells(obj, cells); break;
    case K_NODE: node_cells(obj, cells); break;
    case K_NAMESPACE:
      json_array_append_new(cells, str_or_none(json_path(obj, "status.phase")));
      json_array_append_new(cells, age_cell(obj));
      break;
    case K_RS:
      json_array_append_new(cells, json_integer(json_get_int(json_object_get(obj, "spec"), "replicas", 1)));
      json_array_append_new(cells, json_integer(json_get_int(json_object_get(obj, "status"), "replicas", 0)));
      json_array_append_new(cells, json_integer(json_get_int(json_object_get(obj, "status"), "readyReplicas", 0)));
      json_array_append_new(cells, age_cell(obj));
      break;
    default: quota_cells(obj, cells); break;
    }
    json_object_set_new(row, "cells", cells);
    if (include_object) {
      json_t *pom = json_object();
      json_object_set_new(pom, "kind", json_string("PartialObjectMetadata"));
      json_object_set_new(pom, "apiVersion", json_string("meta.k8s.io/v1"));
      json_object_set(pom, "metadata", json_object_get(obj, "metadata"));
      json_object_set_new(row, "object", pom);
    }
    json_array_append_new(rows, row);
    json_decref(obj);
  }
  json_object_set_new(t, "rows", rows);
  out = json_dumps(t, JSON_COMPACT);
  json_decref(t);
  if (out == NULL)
    return -1;
  rc = fr_buf_puts(b, out);
  free(out);
  return rc;
}
