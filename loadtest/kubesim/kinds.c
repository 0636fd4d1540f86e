/* kinds.c - per-kind names, the discovery and OpenAPI documents generated
 * from them, the checks of the stored kinds (RBAC, Secrets, NetworkPolicy,
 * ...), and the meta.k8s.io Table rendering kubectl asks for (Accept:
 * application/json;as=Table;v=v1;g=meta.k8s.io). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/buf.h"
#include "fr/labels.h"
#include "fr/quantity.h"
#include "fr/util.h"
#include "sim.h"

static const struct {
  const char *kind, *list, *resource, *singular, *group, *version, *api_version, *short_name;
  int namespaced;
} kinds[K_COUNT] = {
    [K_NAMESPACE] = {"Namespace", "NamespaceList", "namespaces", "namespace", "", "v1", "v1", "ns", 0},
    [K_NODE] = {"Node", "NodeList", "nodes", "node", "", "v1", "v1", "no", 0},
    [K_POD] = {"Pod", "PodList", "pods", "pod", "", "v1", "v1", "po", 1},
    [K_QUOTA] = {"ResourceQuota", "ResourceQuotaList", "resourcequotas", "resourcequota", "", "v1", "v1", "quota", 1},
    [K_RS] = {"ReplicaSet", "ReplicaSetList", "replicasets", "replicaset", "apps", "v1", "apps/v1", "rs", 1},
    [K_SERVICEACCOUNT] = {"ServiceAccount", "ServiceAccountList", "serviceaccounts", "serviceaccount", "", "v1", "v1", "sa", 1},
    [K_SECRET] = {"Secret", "SecretList", "secrets", "secret", "", "v1", "v1", NULL, 1},
    [K_CONFIGMAP] = {"ConfigMap", "ConfigMapList", "configmaps", "configmap", "", "v1", "v1", "cm", 1},
    [K_LIMITRANGE] = {"LimitRange", "LimitRangeList", "limitranges", "limitrange", "", "v1", "v1", "limits", 1},
    [K_SERVICE] = {"Service", "ServiceList", "services", "service", "", "v1", "v1", "svc", 1},
    [K_ROLE] = {"Role", "RoleList", "roles", "role", "rbac.authorization.k8s.io", "v1",
                "rbac.authorization.k8s.io/v1", NULL, 1},
    [K_ROLEBINDING] = {"RoleBinding", "RoleBindingList", "rolebindings", "rolebinding",
                       "rbac.authorization.k8s.io", "v1", "rbac.authorization.k8s.io/v1", NULL, 1},
    [K_CLUSTERROLE] = {"ClusterRole", "ClusterRoleList", "clusterroles", "clusterrole",
                       "rbac.authorization.k8s.io", "v1", "rbac.authorization.k8s.io/v1", NULL, 0},
    [K_CLUSTERROLEBINDING] = {"ClusterRoleBinding", "ClusterRoleBindingList", "clusterrolebindings",
                              "clusterrolebinding", "rbac.authorization.k8s.io", "v1",
                              "rbac.authorization.k8s.io/v1", NULL, 0},
    [K_NETWORKPOLICY] = {"NetworkPolicy", "NetworkPolicyList", "networkpolicies", "networkpolicy",
                         "networking.k8s.io", "v1", "networking.k8s.io/v1", "netpol", 1},
    [K_RUNTIMECLASS] = {"RuntimeClass", "RuntimeClassList", "runtimeclasses", "runtimeclass",
                        "node.k8s.io", "v1", "node.k8s.io/v1", NULL, 0},
    [K_DEPLOYMENT] = {"Deployment", "DeploymentList", "deployments", "deployment", "apps", "v1",
                      "apps/v1", "deploy", 1},
    [K_PDB] = {"PodDisruptionBudget", "PodDisruptionBudgetList", "poddisruptionbudgets",
               "poddisruptionbudget", "policy", "v1", "policy/v1", "pdb", 1},
    [K_HPA] = {"HorizontalPodAutoscaler", "HorizontalPodAutoscalerList", "horizontalpodautoscalers",
               "horizontalpodautoscaler", "autoscaling", "v2", "autoscaling/v2", "hpa", 1},
    [K_PVC] = {"PersistentVolumeClaim", "PersistentVolumeClaimList", "persistentvolumeclaims",
               "persistentvolumeclaim", "", "v1", "v1", "pvc", 1},
    [K_STORAGECLASS] = {"StorageClass", "StorageClassList", "storageclasses", "storageclass",
                         "storage.k8s.io", "v1", "storage.k8s.io/v1", "sc", 0},
    [K_EVENT] = {"Event", "EventList", "events", "event", "", "v1", "v1", "ev", 1},
};

const char *kind_name(enum sim_kind k) { return kinds[k].kind; }
const char *kind_list_name(enum sim_kind k) { return kinds[k].list; }
const char *kind_resource(enum sim_kind k) { return kinds[k].resource; }
const char *kind_api_version(enum sim_kind k) { return kinds[k].api_version; }
const char *kind_group(enum sim_kind k) { return kinds[k].group; }
int kind_namespaced(enum sim_kind k) { return kinds[k].namespaced; }

int kind_has_generation(enum sim_kind k) {
  return k == K_RS || k == K_DEPLOYMENT || k == K_PDB || k == K_NETWORKPOLICY;
}

int kind_lookup(const char *group, const char *version, const char *resource, enum sim_kind *k) {
  int i;

  for (i = 0; i < K_COUNT; i++) {
    if (strcmp(kinds[i].group, group) == 0 && strcmp(kinds[i].version, version) == 0 &&
        strcmp(kinds[i].resource, resource) == 0) {
      *k = (enum sim_kind)i;
      return 0;
    }
  }
  return -ENOENT;
}

int kind_group_known(const char *group, const char *version) {
  int i;

  for (i = 0; i < K_COUNT; i++)
    if (*kinds[i].group && strcmp(kinds[i].group, group) == 0 && strcmp(kinds[i].version, version) == 0)
      return 1;
  return 0;
}

/* ---------------------------------------------------------------------- */
/* discovery and OpenAPI                                                   */

/* The first kind of each group, in table order (one version per group). */
static int group_first(int i) {
  int j;

  for (j = 0; j < i; j++)
    if (strcmp(kinds[j].group, kinds[i].group) == 0)
      return 0;
  return 1;
}

static json_t *api_group(int i) {
  return json_pack("{s:s,s:[{s:s,s:s}],s:{s:s,s:s}}", "name", kinds[i].group, "versions",
                   "groupVersion", kinds[i].api_version, "version", kinds[i].version,
                   "preferredVersion", "groupVersion", kinds[i].api_version, "version",
                   kinds[i].version);
}

static json_t *api_resource(int i) {
  json_t *r = json_pack("{s:s,s:s,s:b,s:s,s:[s,s,s,s,s,s,s,s]}", "name", kinds[i].resource,
                        "singularName", kinds[i].singular, "namespaced", kinds[i].namespaced,
                        "kind", kinds[i].kind, "verbs", "create", "delete", "deletecollection",
                        "get", "list", "patch", "update", "watch");

  if (r != NULL && kinds[i].short_name != NULL)
    json_object_set_new(r, "shortNames", json_pack("[s]", kinds[i].short_name));
  return r;
}

void kinds_resource_list(struct fr_http_req *req, const char *group, const char *version,
                         const char *base) {
  json_t *doc = base ? json_loads(base, 0, NULL) : NULL, *res, *r;
  char gv[128];
  size_t j;
  int i;

  snprintf(gv, sizeof(gv), "%s%s%s", group, *group ? "/" : "", version);
  if (doc == NULL)
    doc = json_pack("{s:s,s:s,s:s,s:[]}", "kind", "APIResourceList", "apiVersion", "v1",
                    "groupVersion", gv, "resources");
  res = json_object_get(doc, "resources");
  for (i = K_FIRST_STORED; i < K_COUNT && res != NULL; i++) {
    int have = 0;
    if (strcmp(kinds[i].group, group) != 0 || strcmp(kinds[i].version, version) != 0)
      continue;
    json_array_foreach(res, j, r) {
      if (strcmp(json_get_str(r, "name") ? json_get_str(r, "name") : "", kinds[i].resource) == 0)
        have = 1;
    }
    if (!have)
      json_array_append_new(res, api_resource(i));
    /* A budget's status is the disruption controller's, written through
     * its own subresource in a real cluster. */
    if (!have && i == K_PDB)
      json_array_append_new(res, json_pack("{s:s,s:s,s:b,s:s,s:[s,s,s]}", "name", "poddisruptionbudgets/status",
                                           "singularName", "", "namespaced", 1, "kind", "PodDisruptionBudget",
                                           "verbs", "get", "patch", "update"));
  }
  api_json(req, 200, doc);
}

/* kubectl create/apply (default validation) looks for the object's GVK on a
 * PATCH operation that accepts fieldValidation; that tells it the server
 * validates fields itself. One such path per kind of the group version. */
static void openapi_doc(struct fr_http_req *req, const char *group, const char *version) {
  json_t *doc = json_pack("{s:s,s:{s:s,s:s},s:{}}", "openapi", "3.0.0", "info", "title",
                          "Kubernetes", "version", "v1.32.0", "paths");
  json_t *paths = json_object_get(doc, "paths");
  char path[256];
  int i;

  for (i = 0; i < K_COUNT; i++) {
    if (strcmp(kinds[i].group, group) != 0 || strcmp(kinds[i].version, version) != 0)
      continue;
    /* "/api/v1/namespaces/{namespace}/pods/{name}", "/apis/node.k8s.io/v1/runtimeclasses/{name}" */
    snprintf(path, sizeof(path), "/%s%s/%s%s/{name}", *group ? "apis/" : "api/",
             kinds[i].api_version, kinds[i].namespaced ? "namespaces/{namespace}/" : "",
             kinds[i].resource);
    json_object_set_new(
        paths, path,
        json_pack("{s:{s:s,s:[{s:s,s:s,s:{s:s},s:s}],s:{s:s,s:s,s:s},s:{s:{s:s}}}}", "patch",
                  "x-kubernetes-action", "patch", "parameters", "name", "fieldValidation", "in",
                  "query", "schema", "type", "string", "description",
                  "fieldValidation instructs the server on how to handle objects in the "
                  "request containing unknown or duplicate fields.",
                  "x-kubernetes-group-version-kind", "group", group, "version", version, "kind",
                  kinds[i].kind, "responses", "200", "description", "OK"));
  }
  api_json(req, 200, doc);
}

int kinds_discovery(struct sim *s, struct fr_http_req *req, const char *p) {
  char g[128], v[32], extra;
  json_t *doc;
  int i;

  (void)s;
  if (strcmp(p, "/apis") == 0) {
    doc = json_pack("{s:s,s:s,s:[]}", "kind", "APIGroupList", "apiVersion", "v1", "groups");
    for (i = 0; i < K_COUNT; i++)
      if (*kinds[i].group && group_first(i))
        json_array_append_new(json_object_get(doc, "groups"), api_group(i));
    api_json(req, 200, doc);
    return 1;
  }
  if (strcmp(p, "/openapi/v3") == 0) {
    char url[256];
    doc = json_pack("{s:{s:{s:s}}}", "paths", "api/v1", "serverRelativeURL",
                    "/openapi/v3/api/v1?hash=kubesim2");
    for (i = 0; i < K_COUNT; i++) {
      char key[160];
      if (!*kinds[i].group || !group_first(i))
        continue;
      snprintf(key, sizeof(key), "apis/%s", kinds[i].api_version);
      snprintf(url, sizeof(url), "/openapi/v3/apis/%s?hash=kubesim2", kinds[i].api_version);
      json_object_set_new(json_object_get(doc, "paths"), key, json_pack("{s:s}", "serverRelativeURL", url));
    }
    api_json(req, 200, doc);
    return 1;
  }
  if (strcmp(p, "/openapi/v3/api/v1") == 0) {
    openapi_doc(req, "", "v1");
    return 1;
  }
  if (sscanf(p, "/openapi/v3/apis/%127[^/]/%31[^/]%c", g, v, &extra) == 2 && kind_group_known(g, v)) {
    openapi_doc(req, g, v);
    return 1;
  }
  if (sscanf(p, "/apis/%127[^/]%c", g, &extra) == 1) {
    for (i = 0; i < K_COUNT; i++) {
      if (*kinds[i].group && strcmp(kinds[i].group, g) == 0) {
        doc = api_group(i);
        json_object_set_new(doc, "kind", json_string("APIGroup"));
        json_object_set_new(doc, "apiVersion", json_string("v1"));
        api_json(req, 200, doc);
        return 1;
      }
    }
    return 0;
  }
  /* /apis/apps/v1 is answered by api.c (ReplicaSet subresources). */
  if (sscanf(p, "/apis/%127[^/]/%31[^/]%c", g, v, &extra) == 2 && kind_group_known(g, v) &&
      strcmp(g, "apps") != 0) {
    kinds_resource_list(req, g, v, NULL);
    return 1;
  }
  return 0;
}

/* ---------------------------------------------------------------------- */
/* checks of the stored kinds                                              */

/* 422 Invalid as the API server words it:
 * `Role.rbac.authorization.k8s.io "x" is invalid: rules[0].verbs: Required value`. */
static int invalid(struct sim_err *e, enum sim_kind k, json_t *j, const char *field,
                   const char *reason, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static int invalid(struct sim_err *e, enum sim_kind k, json_t *j, const char *field,
                   const char *reason, const char *fmt, ...) {
  const char *name = json_string_value(json_path(j, "metadata.name"));
  char detail[256];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(detail, sizeof(detail), fmt, ap);
  va_end(ap);
  sim_err_set(e, 422, "Invalid", "%s%s%s \"%s\" is invalid: %s: %s", kinds[k].kind,
              *kinds[k].group ? "." : "", kinds[k].group, name ? name : "", field, detail);
  e->causes = json_pack("[{s:s,s:s,s:s}]", "reason", reason, "message", detail, "field", field);
  return -1;
}

static int dns_label(const char *v) {
  size_t i, n = v ? strlen(v) : 0;

  if (n == 0 || n > 63 || v[0] == '-' || v[n - 1] == '-')
    return 0;
  for (i = 0; i < n; i++)
    if (!((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= '0' && v[i] <= '9') || v[i] == '-'))
      return 0;
  return 1;
}

static int nonempty_str(json_t *v) {
  return json_is_string(v) && *json_string_value(v) != '\0';
}

static int string_list(json_t *v) {
  size_t i;
  json_t *x;

  if (!json_is_array(v))
    return 0;
  json_array_foreach(v, i, x) {
    if (!json_is_string(x))
      return 0;
  }
  return 1;
}

static int check_rules(enum sim_kind k, json_t *j, struct sim_err *e) {
  json_t *rules = json_object_get(j, "rules"), *r;
  char f[64];
  size_t i;

  if (rules != NULL && !json_is_array(rules))
    return invalid(e, k, j, "rules", "FieldValueInvalid", "Invalid value: must be a list");
  json_array_foreach(rules, i, r) {
    json_t *verbs = json_object_get(r, "verbs");
    int urls = json_array_size(json_object_get(r, "nonResourceURLs")) > 0;
    int res = json_array_size(json_object_get(r, "resources")) > 0;
    snprintf(f, sizeof(f), "rules[%zu].verbs", i);
    if (!string_list(verbs) || json_array_size(verbs) == 0)
      return invalid(e, k, j, f, "FieldValueRequired", "Required value: verbs must contain at least one value");
    snprintf(f, sizeof(f), "rules[%zu].nonResourceURLs", i);
    if (urls && k == K_ROLE)
      return invalid(e, k, j, f, "FieldValueInvalid",
                     "Invalid value: namespaced rules cannot apply to non-resource URLs");
    if (urls && res)
      return invalid(e, k, j, f, "FieldValueInvalid",
                     "Invalid value: rules cannot apply to both regular resources and non-resource URLs");
    snprintf(f, sizeof(f), "rules[%zu].apiGroups", i);
    if (!urls && (!string_list(json_object_get(r, "apiGroups")) ||
                  json_array_size(json_object_get(r, "apiGroups")) == 0))
      return invalid(e, k, j, f, "FieldValueRequired",
                     "Required value: resource rules must supply at least one api group");
    snprintf(f, sizeof(f), "rules[%zu].resources", i);
    if (!urls && !res)
      return invalid(e, k, j, f, "FieldValueRequired",
                     "Required value: resource rules must supply at least one resource");
  }
  return 0;
}

static int check_binding(enum sim_kind k, json_t *old, json_t *j, struct sim_err *e) {
  json_t *ref = json_object_get(j, "roleRef"), *subs = json_object_get(j, "subjects"), *sub;
  const char *rk = json_get_str(ref, "kind");
  char f[64];
  size_t i;

  if (!json_is_object(ref) || !nonempty_str(json_object_get(ref, "name")))
    return invalid(e, k, j, "roleRef.name", "FieldValueRequired", "Required value");
  if (json_get_str(ref, "apiGroup") == NULL || strcmp(json_get_str(ref, "apiGroup"), "rbac.authorization.k8s.io") != 0)
    return invalid(e, k, j, "roleRef.apiGroup", "FieldValueNotSupported",
                   "Unsupported value: \"%s\": supported values: \"rbac.authorization.k8s.io\"",
                   json_get_str(ref, "apiGroup") ? json_get_str(ref, "apiGroup") : "");
  if (rk == NULL || (strcmp(rk, "ClusterRole") != 0 && (k == K_CLUSTERROLEBINDING || strcmp(rk, "Role") != 0)))
    return invalid(e, k, j, "roleRef.kind", "FieldValueNotSupported",
                   "Unsupported value: \"%s\": supported values: %s", rk ? rk : "",
                   k == K_ROLEBINDING ? "\"Role\", \"ClusterRole\"" : "\"ClusterRole\"");
  if (old != NULL && !json_equal(json_object_get(old, "roleRef"), ref))
    return invalid(e, k, j, "roleRef", "FieldValueInvalid", "Invalid value: cannot change roleRef");
  json_array_foreach(subs, i, sub) {
    const char *sk = json_get_str(sub, "kind");
    snprintf(f, sizeof(f), "subjects[%zu].name", i);
    if (!nonempty_str(json_object_get(sub, "name")))
      return invalid(e, k, j, f, "FieldValueRequired", "Required value");
    snprintf(f, sizeof(f), "subjects[%zu].kind", i);
    if (sk == NULL || (strcmp(sk, "ServiceAccount") != 0 && strcmp(sk, "User") != 0 && strcmp(sk, "Group") != 0))
      return invalid(e, k, j, f, "FieldValueNotSupported",
                     "Unsupported value: \"%s\": supported values: \"ServiceAccount\", \"User\", \"Group\"",
                     sk ? sk : "");
    snprintf(f, sizeof(f), "subjects[%zu].namespace", i);
    if (strcmp(sk, "ServiceAccount") == 0 && k == K_CLUSTERROLEBINDING &&
        !nonempty_str(json_object_get(sub, "namespace")))
      return invalid(e, k, j, f, "FieldValueRequired", "Required value");
  }
  return 0;
}

/* data values are base64; stringData is folded into data, as the API
 * server does on write. */
static int check_secret(json_t *j, struct sim_err *e) {
  json_t *data = json_object_get(j, "data"), *sd = json_object_get(j, "stringData"), *v;
  const char *key, *type = json_get_str(j, "type");
  char f[300];

  if (type == NULL)
    json_object_set_new(j, "type", json_string("Opaque"));
  else if (strcmp(type, "kubernetes.io/service-account-token") == 0 &&
           !json_is_string(json_object_get(json_path(j, "metadata.annotations"),
                                           "kubernetes.io/service-account.name")))
    return invalid(e, K_SECRET, j, "metadata.annotations[kubernetes.io/service-account.name]",
                   "FieldValueRequired", "Required value");
  json_object_foreach(data, key, v) {
    const char *b64 = json_string_value(v);
    unsigned char *raw;
    long n;
    snprintf(f, sizeof(f), "data[%s]", key);
    if (b64 == NULL)
      return invalid(e, K_SECRET, j, f, "FieldValueInvalid", "Invalid value: must be a base64 string");
    raw = malloc(strlen(b64) + 1);
    n = raw ? fr_base64_decode(b64, strlen(b64), raw) : -1;
    free(raw);
    if (n < 0)
      return invalid(e, K_SECRET, j, f, "FieldValueInvalid", "Invalid value: illegal base64 data");
  }
  json_object_foreach(sd, key, v) {
    const char *plain = json_string_value(v);
    char *enc;
    snprintf(f, sizeof(f), "stringData[%s]", key);
    if (plain == NULL)
      return invalid(e, K_SECRET, j, f, "FieldValueInvalid", "Invalid value: must be a string");
    enc = malloc(fr_base64_len(strlen(plain)));
    if (enc == NULL)
      return sim_err_set(e, 503, "ServiceUnavailable", "out of memory");
    fr_base64_encode(plain, strlen(plain), enc);
    json_object_set_new(json_obj(j, "data"), key, json_string(enc));
    free(enc);
  }
  json_object_del(j, "stringData");
  return 0;
}

static int check_limitrange(json_t *j, struct sim_err *e) {
  static const char *const maps[] = {"max", "min", "default", "defaultRequest", "maxLimitRequestRatio"};
  json_t *limits = json_path(j, "spec.limits"), *l;
  const char *type, *bad = NULL;
  char f[96];
  size_t i, m;

  if (!json_is_array(limits))
    return invalid(e, K_LIMITRANGE, j, "spec.limits", "FieldValueRequired", "Required value");
  json_array_foreach(limits, i, l) {
    type = json_get_str(l, "type");
    snprintf(f, sizeof(f), "spec.limits[%zu].type", i);
    if (type == NULL || (strcmp(type, "Container") != 0 && strcmp(type, "Pod") != 0 &&
                         strcmp(type, "PersistentVolumeClaim") != 0))
      return invalid(e, K_LIMITRANGE, j, f, "FieldValueNotSupported",
                     "Unsupported value: \"%s\": supported values: \"Container\", \"Pod\", "
                     "\"PersistentVolumeClaim\"", type ? type : "");
    for (m = 0; m < FR_ARRAY_SIZE(maps); m++) {
      json_t *q = json_object_get(l, maps[m]);
      if (q == NULL)
        continue;
      if (!json_is_object(q) || quantities_normalize(q, &bad) != 0) {
        snprintf(f, sizeof(f), "spec.limits[%zu].%s[%s]", i, maps[m], bad ? bad : "");
        return invalid(e, K_LIMITRANGE, j, f, "FieldValueInvalid",
                       "Invalid value: must be a valid quantity");
      }
    }
  }
  return 0;
}

static int check_port(json_t *p) {
  json_t *port = json_object_get(p, "port");
  const char *proto = json_get_str(p, "protocol");

  if (port != NULL && !(json_is_integer(port) && json_integer_value(port) >= 1 &&
                        json_integer_value(port) <= 65535) &&
      !(json_is_string(port) && dns_label(json_string_value(port))))
    return 0;
  return proto == NULL || strcmp(proto, "TCP") == 0 || strcmp(proto, "UDP") == 0 ||
         strcmp(proto, "SCTP") == 0;
}

static int check_peers(json_t *j, json_t *rules, const char *dir, const char *peers,
                       struct sim_err *e) {
  json_t *r, *p;
  char f[96];
  size_t i, n;

  if (rules != NULL && !json_is_array(rules))
    return invalid(e, K_NETWORKPOLICY, j, dir, "FieldValueInvalid", "Invalid value: must be a list");
  json_array_foreach(rules, i, r) {
    json_array_foreach(json_object_get(r, "ports"), n, p) {
      snprintf(f, sizeof(f), "%s[%zu].ports[%zu]", dir, i, n);
      if (!check_port(p))
        return invalid(e, K_NETWORKPOLICY, j, f, "FieldValueInvalid", "Invalid value: bad port or protocol");
      /* SetDefaults_NetworkPolicyPort. */
      if (json_object_get(p, "protocol") == NULL)
        json_object_set_new(p, "protocol", json_string("TCP"));
    }
    json_array_foreach(json_object_get(r, peers), n, p) {
      int set = (json_object_get(p, "podSelector") != NULL) + (json_object_get(p, "namespaceSelector") != NULL);
      json_t *block = json_object_get(p, "ipBlock"), *x;
      const char *cidr = json_get_str(block, "cidr");
      size_t k;
      snprintf(f, sizeof(f), "%s[%zu].%s[%zu]", dir, i, peers, n);
      if (block != NULL ? set != 0 || !nonempty_str(json_object_get(block, "cidr")) : set == 0)
        return invalid(e, K_NETWORKPOLICY, j, f, "FieldValueRequired",
                       "Required value: must specify a peer (podSelector and/or namespaceSelector, "
                       "or ipBlock with a cidr)");
      if (block == NULL)
        continue;
      /* ValidateIPBlock: cidr a CIDR, each except one and a strict subset of it. */
      snprintf(f, sizeof(f), "%s[%zu].%s[%zu].ipBlock.cidr", dir, i, peers, n);
      if (netpol_cidr_check(cidr, NULL) != 0)
        return invalid(e, K_NETWORKPOLICY, j, f, "FieldValueInvalid",
                       "Invalid value: \"%.100s\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or "
                       "2001:db8::/64)", cidr);
      json_array_foreach(json_object_get(block, "except"), k, x) {
        const char *xs = json_string_value(x);
        int rc = netpol_cidr_check(xs, cidr);
        snprintf(f, sizeof(f), "%s[%zu].%s[%zu].ipBlock.except[%zu]", dir, i, peers, n, k);
        if (rc != 0)
          return invalid(e, K_NETWORKPOLICY, j, f, "FieldValueInvalid",
                         rc < 0 ? "Invalid value: \"%.100s\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or "
                                  "2001:db8::/64)"
                                : "Invalid value: \"%.100s\": must be a strict subset of `cidr`",
                         xs != NULL ? xs : "");
      }
    }
  }
  return 0;
}

static int check_netpol(json_t *j, struct sim_err *e) {
  json_t *types = json_path(j, "spec.policyTypes"), *t;
  size_t i;

  if (!json_is_object(json_path(j, "spec.podSelector")))
    return invalid(e, K_NETWORKPOLICY, j, "spec.podSelector", "FieldValueRequired", "Required value");
  /* SetDefaults_NetworkPolicySpec: Ingress always, Egress when there are
   * egress rules. */
  if (types == NULL || json_array_size(types) == 0) {
    types = json_pack("[s]", "Ingress");
    if (json_array_size(json_path(j, "spec.egress")) > 0)
      json_array_append_new(types, json_string("Egress"));
    json_object_set_new(json_object_get(j, "spec"), "policyTypes", types);
  }
  json_array_foreach(types, i, t) {
    const char *v = json_string_value(t);
    if (v == NULL || (strcmp(v, "Ingress") != 0 && strcmp(v, "Egress") != 0))
      return invalid(e, K_NETWORKPOLICY, j, "spec.policyTypes", "FieldValueNotSupported",
                     "Unsupported value: \"%s\": supported values: \"Ingress\", \"Egress\"", v ? v : "");
  }
  if (check_peers(j, json_path(j, "spec.ingress"), "spec.ingress", "from", e) != 0 ||
      check_peers(j, json_path(j, "spec.egress"), "spec.egress", "to", e) != 0)
    return -1;
  return 0;
}

static int check_service(json_t *j, struct sim_err *e) {
  json_t *spec = json_obj(j, "spec"), *ports = json_object_get(spec, "ports"), *p;
  const char *type = json_get_str(spec, "type"), *cip = json_get_str(spec, "clusterIP");
  char f[64];
  size_t i;

  if (type == NULL)
    json_object_set_new(spec, "type", json_string(type = "ClusterIP"));
  if (strcmp(type, "ClusterIP") != 0 && strcmp(type, "NodePort") != 0 &&
      strcmp(type, "LoadBalancer") != 0 && strcmp(type, "ExternalName") != 0)
    return invalid(e, K_SERVICE, j, "spec.type", "FieldValueNotSupported", "Unsupported value: \"%s\"", type);
  if (json_array_size(ports) == 0 && strcmp(type, "ExternalName") != 0 &&
      (cip == NULL || strcmp(cip, "None") != 0))
    return invalid(e, K_SERVICE, j, "spec.ports", "FieldValueRequired", "Required value");
  json_array_foreach(ports, i, p) {
    snprintf(f, sizeof(f), "spec.ports[%zu].port", i);
    if (!json_is_integer(json_object_get(p, "port")) || !check_port(p))
      return invalid(e, K_SERVICE, j, f, "FieldValueInvalid", "Invalid value: must be between 1 and 65535");
    if (json_object_get(p, "protocol") == NULL)
      json_object_set_new(p, "protocol", json_string("TCP"));
    if (json_object_get(p, "targetPort") == NULL)
      json_object_set(p, "targetPort", json_object_get(p, "port"));
  }
  return 0;
}

static int check_pdb(json_t *j, struct sim_err *e) {
  json_t *spec = json_object_get(j, "spec");
  int min = json_object_get(spec, "minAvailable") != NULL, max = json_object_get(spec, "maxUnavailable") != NULL;

  if (min && max)
    return invalid(e, K_PDB, j, "spec", "FieldValueInvalid",
                   "Invalid value: minAvailable and maxUnavailable cannot be both set");
  if (!json_is_object(json_object_get(spec, "selector")))
    return invalid(e, K_PDB, j, "spec.selector", "FieldValueRequired", "Required value");
  return 0;
}

static int check_hpa(json_t *j, struct sim_err *e) {
  json_t *spec = json_object_get(j, "spec"), *ref = json_object_get(spec, "scaleTargetRef");
  int64_t max = json_get_int(spec, "maxReplicas", 0), min = json_get_int(spec, "minReplicas", 1);

  if (!nonempty_str(json_object_get(ref, "kind")) || !nonempty_str(json_object_get(ref, "name")))
    return invalid(e, K_HPA, j, "spec.scaleTargetRef", "FieldValueRequired", "Required value: kind and name");
  if (max < 1)
    return invalid(e, K_HPA, j, "spec.maxReplicas", "FieldValueInvalid",
                   "Invalid value: %" PRId64 ": must be greater than or equal to 1", max);
  if (min < 1 || min > max)
    return invalid(e, K_HPA, j, "spec.minReplicas", "FieldValueInvalid",
                   "Invalid value: %" PRId64 ": must be between 1 and maxReplicas", min);
  return 0;
}

static int one_of(const char *v, const char *const *set, size_t n) {
  size_t i;

  for (i = 0; v != NULL && i < n; i++)
    if (strcmp(v, set[i]) == 0)
      return 1;
  return 0;
}

/* storage.k8s.io/v1 StorageClass: the provisioner is required; reclaim
 * policy and binding mode are defaulted (Delete, Immediate); the four are
 * immutable, as the API server's validation has them. */
static int check_storageclass(json_t *old, json_t *j, struct sim_err *e) {
  static const char *const reclaim[] = {"Delete", "Retain"};
  static const char *const modes[] = {"Immediate", "WaitForFirstConsumer"};
  static const char *const fixed[] = {"provisioner", "parameters", "reclaimPolicy", "volumeBindingMode"};
  const char *prov = json_get_str(j, "provisioner");
  size_t i;

  if (prov == NULL || *prov == '\0')
    return invalid(e, K_STORAGECLASS, j, "provisioner", "FieldValueRequired", "Required value");
  if (json_object_get(j, "reclaimPolicy") == NULL)
    json_object_set_new(j, "reclaimPolicy", json_string("Delete"));
  if (json_object_get(j, "volumeBindingMode") == NULL)
    json_object_set_new(j, "volumeBindingMode", json_string("Immediate"));
  if (!one_of(json_get_str(j, "reclaimPolicy"), reclaim, FR_ARRAY_SIZE(reclaim)))
    return invalid(e, K_STORAGECLASS, j, "reclaimPolicy", "FieldValueNotSupported",
                   "Unsupported value: \"%s\": supported values: \"Delete\", \"Retain\"",
                   json_get_str(j, "reclaimPolicy") ? json_get_str(j, "reclaimPolicy") : "");
  if (!one_of(json_get_str(j, "volumeBindingMode"), modes, FR_ARRAY_SIZE(modes)))
    return invalid(e, K_STORAGECLASS, j, "volumeBindingMode", "FieldValueNotSupported",
                   "Unsupported value: \"%s\": supported values: \"Immediate\", \"WaitForFirstConsumer\"",
                   json_get_str(j, "volumeBindingMode") ? json_get_str(j, "volumeBindingMode") : "");
  for (i = 0; old != NULL && i < FR_ARRAY_SIZE(fixed); i++) {
    if (!json_equal(json_object_get(old, fixed[i]), json_object_get(j, fixed[i])) &&
        !(json_object_get(old, fixed[i]) == NULL && json_object_get(j, fixed[i]) == NULL))
      return invalid(e, K_STORAGECLASS, j, fixed[i], "FieldValueForbidden",
                     "Forbidden: updates to %s are forbidden.", fixed[i]);
  }
  return 0;
}

/* v1 PersistentVolumeClaim: access modes and a storage request are
 * required; after creation the spec is immutable but for the storage
 * request (and the volume name the controller sets once). */
static int check_pvc(json_t *old, json_t *j, struct sim_err *e) {
  static const char *const modes[] = {"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"};
  json_t *am = json_path(j, "spec.accessModes"), *m, *req = json_path(j, "spec.resources.requests");
  const char *bad = NULL, *sc;
  size_t i;

  if (!json_is_array(am) || json_array_size(am) == 0)
    return invalid(e, K_PVC, j, "spec.accessModes", "FieldValueRequired", "Required value");
  json_array_foreach(am, i, m) {
    char f[48];
    snprintf(f, sizeof(f), "spec.accessModes[%zu]", i);
    if (!one_of(json_string_value(m), modes, FR_ARRAY_SIZE(modes)))
      return invalid(e, K_PVC, j, f, "FieldValueNotSupported",
                     "Unsupported value: \"%s\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", "
                     "\"ReadWriteOnce\", \"ReadWriteOncePod\"",
                     json_is_string(m) ? json_string_value(m) : "");
  }
  if (!json_is_object(req) || json_object_get(req, "storage") == NULL)
    return invalid(e, K_PVC, j, "spec.resources[storage]", "FieldValueRequired", "Required value");
  if (quantities_normalize(req, &bad) != 0)
    return invalid(e, K_PVC, j, "spec.resources.requests[storage]", "FieldValueInvalid",
                   "Invalid value: must be a valid quantity");
  {
    int64_t v = 0;
    if (fr_quantity_parse_value(json_get_str(req, "storage"), &v) != 0 || v <= 0)
      return invalid(e, K_PVC, j, "spec.resources[storage]", "FieldValueInvalid",
                     "Invalid value: \"%s\": must be greater than zero", json_get_str(req, "storage"));
  }
  sc = json_string_value(json_path(j, "spec.storageClassName"));
  if (json_path(j, "spec.storageClassName") != NULL && !json_is_null(json_path(j, "spec.storageClassName")) &&
      sc == NULL)
    return invalid(e, K_PVC, j, "spec.storageClassName", "FieldValueInvalid", "Invalid value: must be a string");
  if (old != NULL) {
    json_t *a = json_deep_copy(json_object_get(old, "spec")), *b = json_deep_copy(json_object_get(j, "spec"));
    int same;
    json_object_del(json_object_get(a, "resources"), "requests");
    json_object_del(json_object_get(b, "resources"), "requests");
    if (json_object_get(b, "volumeName") == NULL)
      json_object_del(a, "volumeName");
    same = json_equal(a, b);
    json_decref(a);
    json_decref(b);
    if (!same)
      return invalid(e, K_PVC, j, "spec", "FieldValueForbidden",
                     "Forbidden: spec is immutable after creation except resources.requests and "
                     "volumeAttributesClassName for bound claims");
  }
  return 0;
}

int kind_validate(enum sim_kind k, json_t *old, json_t *j, struct sim_err *e) {
  switch (k) {
  case K_STORAGECLASS: return check_storageclass(old, j, e);
  case K_PVC: return check_pvc(old, j, e);
  case K_SECRET: return check_secret(j, e);
  case K_CONFIGMAP: {
    json_t *v;
    const char *key;
    json_object_foreach(json_object_get(j, "data"), key, v) {
      if (!json_is_string(v))
        return invalid(e, k, j, "data", "FieldValueInvalid", "Invalid value: values must be strings");
    }
    return 0;
  }
  case K_LIMITRANGE: return check_limitrange(j, e);
  case K_SERVICE: return check_service(j, e);
  case K_ROLE:
  case K_CLUSTERROLE: return check_rules(k, j, e);
  case K_ROLEBINDING:
  case K_CLUSTERROLEBINDING: return check_binding(k, old, j, e);
  case K_NETWORKPOLICY: return check_netpol(j, e);
  case K_RUNTIMECLASS:
    if (!dns_label(json_get_str(j, "handler")))
      return invalid(e, k, j, "handler", "FieldValueInvalid",
                     "Invalid value: a lowercase RFC 1123 label is required");
    if (old != NULL && !json_equal(json_object_get(old, "handler"), json_object_get(j, "handler")))
      return invalid(e, k, j, "handler", "FieldValueInvalid", "Invalid value: field is immutable");
    return 0;
  case K_DEPLOYMENT:
    if (old != NULL && !json_equal(json_path(old, "spec.selector"), json_path(j, "spec.selector")))
      return invalid(e, k, j, "spec.selector", "FieldValueInvalid", "Invalid value: field is immutable");
    {
      const char *field;
      char msg[200];
      if (deploy_check(j, &field, msg, sizeof(msg)) != 0)
        return invalid(e, k, j, field, strncmp(msg, "Unsupported", 11) == 0 ? "FieldValueNotSupported"
                                       : strncmp(msg, "Forbidden", 9) == 0 ? "FieldValueForbidden"
                                                                            : "FieldValueInvalid",
                       "%s", msg);
    }
    if (rs_validate(j, e) != 0) {
      /* The same checks as a ReplicaSet's; name the right kind. */
      char msg[sizeof(e->msg)];
      if (strncmp(e->msg, "ReplicaSet", 10) == 0) {
        snprintf(msg, sizeof(msg), "Deployment%s", e->msg + 10);
        snprintf(e->msg, sizeof(e->msg), "%s", msg);
      }
      return -1;
    }
    return 0;
  case K_PDB: return check_pdb(j, e);
  case K_HPA: return check_hpa(j, e);
  default: return 0;
  }
}

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
static const struct column deploy_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    {"Ready", "string", "", "Number of the pod with ready state", 0},
    {"Up-to-date", "integer", "", "Total number of non-terminated pods targeted by this deployment that have the desired template spec.", 0},
    {"Available", "integer", "", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.", 0},
    {"Age", "string", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0},
    {"Containers", "string", "", "Names of each container in the template.", 1},
    {"Images", "string", "", "Images referenced by each container in the template.", 1},
    {"Selector", "string", "", "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.", 1},
};
/* The API server's Event table: no leading name column. */
static const struct column event_cols[] = {
    {"Last Seen", "string", "", "The time at which the most recent occurrence of this event was recorded.", 0},
    {"Type", "string", "", "Type of this event (Normal, Warning), new types could be added in the future.", 0},
    {"Reason", "string", "", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.", 0},
    {"Object", "string", "", "The object that this event is about.", 0},
    {"Subobject", "string", "", "The subobject (such as a container) this event is about.", 1},
    {"Source", "string", "", "The component reporting this event. Should be a short machine understandable string.", 1},
    {"Message", "string", "", "A human-readable description of the status of this operation.", 0},
    {"First Seen", "string", "", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)", 1},
    {"Count", "string", "", "The number of times this event has occurred.", 1},
    {"Name", "string", "name", "Name must be unique within a namespace.", 1},
};
static const struct column meta_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    {"Age", "string", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0},
};
static const struct column pdb_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    {"Min Available", "string", "", "The minimum number of pods that must be available.", 0},
    {"Max Unavailable", "string", "", "The maximum number of pods that may be unavailable.", 0},
    {"Allowed Disruptions", "integer", "", "Calculated number of pods that may be disrupted at this time.", 0},
    {"Age", "string", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0},
};
static const struct column netpol_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    {"Pod-Selector", "string", "", "Selects the pods to which this NetworkPolicy object applies.", 0},
    {"Age", "string", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0},
};
static const struct column quota_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    {"Age", "string", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0},
    {"Request", "string", "", "Request represents a minimum amount of cpu/memory that a container may consume.", 0},
    {"Limit", "string", "", "Limits control the maximum amount of cpu/memory that a container can use independent of contention on the node.", 0},
};

static const struct column pvc_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    {"Status", "string", "", "Phase represents the current phase of PersistentVolumeClaim.", 0},
    {"Volume", "string", "", "VolumeName is the binding reference to the PersistentVolume backing this claim.", 0},
    {"Capacity", "string", "", "Capacity represents the actual resources of the underlying volume.", 0},
    {"Access Modes", "string", "", "AccessModes contains the actual access modes the volume backing the PVC has.", 0},
    {"StorageClass", "string", "", "StorageClassName is the name of the StorageClass required by the claim.", 0},
    {"VolumeAttributesClass", "string", "", "VolumeAttributesClassName may be used to set the VolumeAttributesClass used by this claim.", 0},
    {"Age", "string", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0},
    {"VolumeMode", "string", "", "volumeMode defines what type of volume is required by the claim.", 1},
};

static const struct column sc_cols[] = {
    {"Name", "string", "name", "Name must be unique within a namespace.", 0},
    {"Provisioner", "string", "", "provisioner indicates the type of the provisioner.", 0},
    {"ReclaimPolicy", "string", "", "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class.", 0},
    {"VolumeBindingMode", "string", "", "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.", 0},
    {"AllowVolumeExpansion", "string", "", "allowVolumeExpansion shows whether the storage class allow volume expand.", 0},
    {"Age", "string", "", "CreationTimestamp is a timestamp representing the server time when this object was created.", 0},
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

/* An intOrString as kubectl's printer shows it: its value, or N/A. */
static json_t *int_or_string_cell(json_t *v) {
  char buf[32];

  if (json_is_integer(v)) {
    snprintf(buf, sizeof(buf), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    return json_string(buf);
  }
  return json_string(json_is_string(v) ? json_string_value(v) : "N/A");
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

static json_t *since_cell(json_t *ts) {
  int64_t t = 0;
  char age[32];

  if (!json_is_string(ts) || fr_time_parse_rfc3339(json_string_value(ts), &t) != 0)
    return json_string("<unknown>");
  human_age(t, age, sizeof(age));
  return json_string(age);
}

static void event_cells(json_t *obj, json_t *cells) {
  json_t *io = json_object_get(obj, "involvedObject");
  const char *kind = json_get_str(io, "kind");
  char what[600], lower[64];
  size_t i;

  for (i = 0; kind != NULL && kind[i] != '\0' && i + 1 < sizeof(lower); i++)
    lower[i] = (char)(kind[i] >= 'A' && kind[i] <= 'Z' ? kind[i] + 32 : kind[i]);
  lower[i] = '\0';
  snprintf(what, sizeof(what), "%s/%s", lower, json_get_str(io, "name") ? json_get_str(io, "name") : "");
  json_array_append_new(cells, since_cell(json_object_get(obj, "lastTimestamp")));
  json_array_append_new(cells, str_or_none(json_object_get(obj, "type")));
  json_array_append_new(cells, str_or_none(json_object_get(obj, "reason")));
  json_array_append_new(cells, json_string(what));
  json_array_append_new(cells, json_string(json_get_str(io, "fieldPath") ? json_get_str(io, "fieldPath") : ""));
  snprintf(what, sizeof(what), "%s%s%s", json_string_value(json_path(obj, "source.component")) ?
           json_string_value(json_path(obj, "source.component")) : "",
           json_string_value(json_path(obj, "source.host")) ? ", " : "",
           json_string_value(json_path(obj, "source.host")) ? json_string_value(json_path(obj, "source.host")) : "");
  json_array_append_new(cells, json_string(what));
  json_array_append_new(cells, json_string(json_get_str(obj, "message") ? json_get_str(obj, "message") : ""));
  json_array_append_new(cells, since_cell(json_object_get(obj, "firstTimestamp")));
  snprintf(what, sizeof(what), "%" PRId64, json_get_int(obj, "count", 1));
  json_array_append_new(cells, json_string(what));
  json_array_append_new(cells, str_or_none(json_path(obj, "metadata.name")));
}

static void deploy_cells(json_t *obj, json_t *cells) {
  json_t *st = json_object_get(obj, "status"), *c;
  struct fr_buf names, images;
  char buf[48], *sel;
  size_t i;

  fr_buf_init(&names);
  fr_buf_init(&images);
  snprintf(buf, sizeof(buf), "%" PRId64 "/%" PRId64, json_get_int(st, "readyReplicas", 0),
           json_get_int(json_object_get(obj, "spec"), "replicas", 1));
  json_array_append_new(cells, json_string(buf));
  json_array_append_new(cells, json_integer(json_get_int(st, "updatedReplicas", 0)));
  json_array_append_new(cells, json_integer(json_get_int(st, "availableReplicas", 0)));
  json_array_append_new(cells, age_cell(obj));
  json_array_foreach(json_path(obj, "spec.template.spec.containers"), i, c) {
    fr_buf_printf(&names, "%s%s", i ? "," : "", json_get_str(c, "name") ? json_get_str(c, "name") : "");
    fr_buf_printf(&images, "%s%s", i ? "," : "", json_get_str(c, "image") ? json_get_str(c, "image") : "");
  }
  json_array_append_new(cells, json_string(names.data ? names.data : ""));
  json_array_append_new(cells, json_string(images.data ? images.data : ""));
  sel = label_selector_text(json_path(obj, "spec.selector"));
  json_array_append_new(cells, json_string(sel ? sel : ""));
  free(sel);
  fr_buf_free(&names);
  fr_buf_free(&images);
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
  case K_QUOTA: cols = quota_cols; ncols = FR_ARRAY_SIZE(quota_cols); break;
  case K_PVC: cols = pvc_cols; ncols = FR_ARRAY_SIZE(pvc_cols); break;
  case K_STORAGECLASS: cols = sc_cols; ncols = FR_ARRAY_SIZE(sc_cols); break;
  case K_PDB: cols = pdb_cols; ncols = FR_ARRAY_SIZE(pdb_cols); break;
  case K_DEPLOYMENT: cols = deploy_cols; ncols = FR_ARRAY_SIZE(deploy_cols); break;
  case K_EVENT: cols = event_cols; ncols = FR_ARRAY_SIZE(event_cols); break;
  case K_NETWORKPOLICY: cols = netpol_cols; ncols = FR_ARRAY_SIZE(netpol_cols); break;
  default: cols = meta_cols; ncols = FR_ARRAY_SIZE(meta_cols); break;
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
    if (k == K_STORAGECLASS) {
      /* kubectl's printer marks the default class in the name column. */
      const char *def = json_string_value(
          json_object_get(json_path(obj, "metadata.annotations"), "storageclass.kubernetes.io/is-default-class"));
      char nm[300];
      snprintf(nm, sizeof(nm), "%s%s", vs[i]->fields[F_NAME] ? vs[i]->fields[F_NAME] : "",
               def != NULL && strcmp(def, "true") == 0 ? " (default)" : "");
      json_array_append_new(cells, json_string(nm));
    } else if (k != K_EVENT) {
      json_array_append_new(cells, json_string(vs[i]->fields[F_NAME] ? vs[i]->fields[F_NAME] : ""));
    }
    switch (k) {
    case K_EVENT: event_cells(obj, cells); break;
    case K_DEPLOYMENT: deploy_cells(obj, cells); break;
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
    case K_QUOTA: quota_cells(obj, cells); break;
    case K_NETWORKPOLICY: {
      /* kubectl's printer: the selector as text, <none> when it is empty. */
      char *sel = label_selector_text(json_path(obj, "spec.podSelector"));
      json_array_append_new(cells, json_string(sel != NULL && *sel ? sel : "<none>"));
      free(sel);
      json_array_append_new(cells, age_cell(obj));
      break;
    }
    case K_PDB:
      json_array_append_new(cells, int_or_string_cell(json_path(obj, "spec.minAvailable")));
      json_array_append_new(cells, int_or_string_cell(json_path(obj, "spec.maxUnavailable")));
      json_array_append_new(cells, json_integer(json_get_int(json_object_get(obj, "status"), "disruptionsAllowed", 0)));
      json_array_append_new(cells, age_cell(obj));
      break;
    case K_PVC: {
      /* No PersistentVolumes here: a claim shows the storage it asked for. */
      static const char *const modes[][2] = {{"ReadWriteOnce", "RWO"}, {"ReadOnlyMany", "ROX"},
                                              {"ReadWriteMany", "RWX"}, {"ReadWriteOncePod", "RWOP"}};
      struct fr_buf m;
      json_t *am;
      size_t ai, mi;
      fr_buf_init(&m);
      json_array_foreach(json_path(obj, "status.accessModes"), ai, am) {
        for (mi = 0; mi < FR_ARRAY_SIZE(modes); mi++)
          if (json_is_string(am) && strcmp(json_string_value(am), modes[mi][0]) == 0)
            fr_buf_printf(&m, "%s%s", m.len ? "," : "", modes[mi][1]);
      }
      /* As the API server's printer: the bound volume, its capacity and
       * access modes (empty while Pending), the class as asked for. */
      json_array_append_new(cells, json_string(json_path(obj, "metadata.deletionTimestamp") ? "Terminating"
                                               : json_string_value(json_path(obj, "status.phase"))
                                               ? json_string_value(json_path(obj, "status.phase")) : ""));
      json_array_append_new(cells, json_string(json_string_value(json_path(obj, "spec.volumeName"))
                                               ? json_string_value(json_path(obj, "spec.volumeName")) : ""));
      json_array_append_new(cells, json_string(json_string_value(json_path(obj, "status.capacity.storage"))
                                               ? json_string_value(json_path(obj, "status.capacity.storage")) : ""));
      json_array_append_new(cells, json_string(m.data ? m.data : ""));
      json_array_append_new(cells, str_or_none(json_path(obj, "spec.storageClassName")));
      json_array_append_new(cells, json_string("<unset>"));
      json_array_append_new(cells, age_cell(obj));
      json_array_append_new(cells, json_string(json_string_value(json_path(obj, "spec.volumeMode"))
                                               ? json_string_value(json_path(obj, "spec.volumeMode")) : "Filesystem"));
      fr_buf_free(&m);
      break;
    }
    case K_STORAGECLASS:
      json_array_append_new(cells, str_or_none(json_object_get(obj, "provisioner")));
      json_array_append_new(cells, str_or_none(json_object_get(obj, "reclaimPolicy")));
      json_array_append_new(cells, str_or_none(json_object_get(obj, "volumeBindingMode")));
      json_array_append_new(cells, json_string(json_is_true(json_object_get(obj, "allowVolumeExpansion")) ? "true" : "false"));
      json_array_append_new(cells, age_cell(obj));
      break;
    default: json_array_append_new(cells, age_cell(obj)); break;
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
