/* pods.c - nodes, pods and their lifecycle: validation and defaulting,
 * ResourceQuota and DefaultTolerationSeconds admission, the scheduler,
 * kubelet-like status steps, activeDeadlineSeconds, graceful deletion, the
 * taint manager and pods/exec. A pod on a node whose kubelet is lost
 * (nodelife.c) neither starts nor finishes terminating until it is back.
 *
 * Lifecycle of a pod (each arrow is one committed version):
 *   create (Pending) --schedule-ms + scheduler--> bound (ContainerCreating,
 *   or Unschedulable and parked) --image-pull-ms (uncached) + start-ms-->
 *   Running+Ready --deadline--> Failed/DeadlineExceeded
 *   delete --> Terminating (if --terminate-ms) --> gone, processes killed.
 */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "fr/buf.h"
#include "fr/labels.h"
#include "fr/log.h"
#include "fr/quantity.h"
#include "fr/util.h"
#include "sim.h"

static void pod_timer_start(struct sim_pod *p, void (*cb)(uv_timer_t *), uint64_t ms);
static void kill_execs(struct sim_pod *p);
static void usage_release(struct sim *s, struct sim_obj *o);

/* ---------------------------------------------------------------------- */
/* nodes                                                                   */

static const char *gpu_resource(const struct sim *s) {
  return s->opts.gpu_resource != NULL ? s->opts.gpu_resource : "nvidia.com/gpu";
}

/* A --node-label / --node-taint flag: "[INDEX@]KEY=VALUE" or, for taints,
 * "[INDEX@]KEY[=VALUE]:EFFECT". Returns the part after any index prefix
 * when it applies to node <index> (any node for index 0), else NULL. */
static const char *node_flag_for(const char *spec, int index) {
  const char *at = strchr(spec, '@');
  int64_t n;
  char num[16];

  if (at == NULL)
    return spec;
  if ((size_t)(at - spec) >= sizeof(num))
    return NULL;
  memcpy(num, spec, (size_t)(at - spec));
  num[at - spec] = '\0';
  if (fr_parse_int64(num, 1, 100000, &n) != 0)
    return NULL;
  return index == 0 || n == index ? at + 1 : NULL;
}

/* Splits a taint "KEY[=VALUE]:EFFECT" into JSON; NULL when malformed. */
static json_t *taint_parse(const char *t) {
  const char *colon = strrchr(t, ':'), *eq = strchr(t, '=');
  char key[256], value[64];
  json_t *j;

  if (colon == NULL || (eq != NULL && eq > colon))
    eq = NULL;
  if (colon == NULL || colon == t || (size_t)(colon - t) >= sizeof(key) ||
      (eq != NULL && (size_t)(colon - eq - 1) >= sizeof(value)))
    return NULL;
  snprintf(key, sizeof(key), "%.*s", (int)((eq ? eq : colon) - t), t);
  snprintf(value, sizeof(value), "%.*s", eq ? (int)(colon - eq - 1) : 0, eq ? eq + 1 : "");
  if (!fr_label_key_valid(key) || !fr_label_value_valid(value) ||
      (strcmp(colon + 1, "NoSchedule") != 0 && strcmp(colon + 1, "PreferNoSchedule") != 0 &&
       strcmp(colon + 1, "NoExecute") != 0))
    return NULL;
  j = json_pack("{s:s,s:s}", "key", key, "effect", colon + 1);
  if (j != NULL && *value != '\0')
    json_object_set_new(j, "value", json_string(value));
  return j;
}

int node_flag_valid(const char *spec, int taint) {
  const char *f = node_flag_for(spec, 0), *eq;
  char key[256];
  json_t *t;

  if (f == NULL)
    return -EINVAL;
  if (taint) {
    t = taint_parse(f);
    json_decref(t);
    return t != NULL ? 0 : -EINVAL;
  }
  if ((eq = strchr(f, '=')) == NULL || (size_t)(eq - f) >= sizeof(key))
    return -EINVAL;
  snprintf(key, sizeof(key), "%.*s", (int)(eq - f), f);
  return fr_label_key_valid(key) && fr_label_value_valid(eq + 1) ? 0 : -EINVAL;
}

/* The labels, taints and GPUs the flags give node <index>. */
static void node_extras(struct sim *s, int index, json_t *labels, json_t *spec, json_t *alloc, json_t *cap) {
  json_t *taints = json_array();
  const char *f;
  int i;

  for (i = 0; i < s->opts.nnode_labels; i++) {
    const char *eq;
    char key[256];
    if ((f = node_flag_for(s->opts.node_labels[i], index)) == NULL || (eq = strchr(f, '=')) == NULL)
      continue;
    snprintf(key, sizeof(key), "%.*s", (int)(eq - f), f);
    json_object_set_new(labels, key, json_string(eq + 1));
  }
  for (i = 0; i < s->opts.nnode_taints; i++)
    if ((f = node_flag_for(s->opts.node_taints[i], index)) != NULL)
      json_array_append_new(taints, taint_parse(f));
  if (json_array_size(taints) > 0)
    json_object_set(spec, "taints", taints);
  json_decref(taints);
  if (index <= s->opts.gpu_nodes) {
    char n[24];
    snprintf(n, sizeof(n), "%d", s->opts.node_gpus);
    json_object_set_new(alloc, gpu_resource(s), json_string(n));
    json_object_set_new(cap, gpu_resource(s), json_string(n));
  }
}

static void noexec_check(struct sim *s, struct sim_obj *o);

void node_changed(struct sim *s, struct sim_obj *o) {
  json_t *cur = obj_json(o), *t;
  struct sim_obj *p;
  struct sim_node *nd = o->u.node;
  const char *q;
  int64_t v = 0;

  nd->unschedulable = json_is_true(json_path(cur, "spec.unschedulable"));
  t = json_path(cur, "spec.taints");
  json_decref(nd->taints);
  nd->taints = json_array_size(t) > 0 ? json_incref(t) : NULL;
  q = json_string_value(json_object_get(json_path(cur, "status.allocatable"), gpu_resource(s)));
  nd->alloc_gpu = q != NULL && fr_quantity_parse_value(q, &v) == 0 ? v : 0;
  json_decref(cur);
  sched_room_freed(s);
  /* The taint manager looks at every pod bound to the node again. A scan
   * of all pods: node updates are rare next to pod ones. */
  for (p = store_first(s, K_POD, NULL); p != NULL; p = store_next(s, p))
    if (p->cur->fields[F_NODE_NAME] != NULL && strcmp(p->cur->fields[F_NODE_NAME], o->name) == 0)
      noexec_check(s, p);
}

/* What every kubelet reports about its machine, and the official clients'
 * models require (V1NodeSystemInfo): /etc/machine-id (32 hex digits), the
 * DMI product UUID and the boot id in status.nodeInfo, and the kubelet's
 * port in status.daemonEndpoints. */
static void node_identity(json_t *node) {
  json_t *info = json_path(node, "status.nodeInfo");
  char id[40], machine[33];
  size_t i, n = 0;

  uid_new(id);
  for (i = 0; id[i] != '\0' && n < sizeof(machine) - 1; i++)
    if (id[i] != '-')
      machine[n++] = id[i];
  machine[n] = '\0';
  json_object_set_new(info, "machineID", json_string(machine));
  uid_new(id);
  json_object_set_new(info, "systemUUID", json_string(id));
  uid_new(id);
  json_object_set_new(info, "bootID", json_string(id));
  json_object_set_new(json_object_get(node, "status"), "daemonEndpoints",
                      json_pack("{s:{s:i}}", "kubeletEndpoint", "Port", 10250));
}

int node_create(struct sim *s, int index) {
  char name[128], ip[32], cpu[32], mem[32], pods[32], ts[21];
  int64_t cpu_m, mem_b;
  json_t *j, *labels;
  struct sim_obj *o;
  struct sim_node *n;

  if (fr_quantity_parse_milli(s->opts.node_cpu, &cpu_m) != 0 ||
      fr_quantity_parse_value(s->opts.node_memory, &mem_b) != 0)
    return -EINVAL;
  snprintf(name, sizeof(name), "%s-node-%d", s->opts.name, index);
  snprintf(ip, sizeof(ip), "10.1.%d.%d", index / 250, index % 250 + 1);
  fr_quantity_format_milli(cpu_m, cpu, sizeof(cpu));
  fr_quantity_format_bytes(mem_b, mem, sizeof(mem));
  snprintf(pods, sizeof(pods), "%d", s->opts.node_pods);
  now_rfc3339(ts);
  labels = json_pack("{s:s,s:s,s:s,s:s}", "kubernetes.io/hostname", name, "kubernetes.io/os",
                     "linux", "kubernetes.io/arch", "amd64", "node.kubernetes.io/instance-type",
                     "kubesim");
  if (s->opts.region != NULL)
    json_object_set_new(labels, "topology.kubernetes.io/region", json_string(s->opts.region));
  j = json_pack(
      "{s:s,s:s,s:{s:s,s:o},s:{},s:{s:{s:s,s:s,s:s,s:s},s:{s:s,s:s,s:s,s:s},"
      "s:[{s:s,s:s,s:s,s:s,s:s,s:s},{s:s,s:s,s:s,s:s,s:s,s:s},{s:s,s:s,s:s,s:s,s:s,s:s}],"
      "s:[{s:s,s:s},{s:s,s:s}],s:{s:s,s:s,s:s,s:s,s:s,s:s,s:s}}}",
      "kind", "Node", "apiVersion", "v1", "metadata", "name", name, "labels", labels, "spec",
      "status", "capacity", "cpu", cpu, "memory", mem, "pods", pods, "ephemeral-storage", "100Gi",
      "allocatable", "cpu", cpu, "memory", mem, "pods", pods, "ephemeral-storage", "100Gi",
      "conditions", "type", "Ready", "status", "True", "reason", "KubeletReady", "message",
      "kubelet is posting ready status", "lastHeartbeatTime", ts, "lastTransitionTime", ts,
      "type", "MemoryPressure", "status", "False", "reason", "KubeletHasSufficientMemory",
      "message", "kubelet has sufficient memory available", "lastHeartbeatTime", ts,
      "lastTransitionTime", ts, "type", "DiskPressure", "status", "False", "reason",
      "KubeletHasNoDiskPressure", "message", "kubelet has no disk pressure", "lastHeartbeatTime",
      ts, "lastTransitionTime", ts, "addresses", "type", "InternalIP", "address", ip, "type",
      "Hostname", "address", name, "nodeInfo", "kubeletVersion", "v1.32.0", "kubeProxyVersion",
      "v1.32.0", "osImage", "kubesim", "kernelVersion", "simulated", "containerRuntimeVersion",
      "kubesim://1.0", "operatingSystem", "linux", "architecture", "amd64");
  if (j == NULL)
    return -ENOMEM;
  node_extras(s, index, labels, json_object_get(j, "spec"), json_path(j, "status.allocatable"),
              json_path(j, "status.capacity"));
  node_identity(j);
  {
    char uid[40];
    uid_new(uid);
    json_object_set_new(json_object_get(j, "metadata"), "uid", json_string(uid));
    json_object_set_new(json_object_get(j, "metadata"), "creationTimestamp", json_string(ts));
  }
  n = calloc(1, sizeof(*n));
  if (n == NULL) {
    json_decref(j);
    return -ENOMEM;
  }
  n->taints = json_path(j, "spec.taints") ? json_incref(json_path(j, "spec.taints")) : NULL;
  o = store_commit(s, K_NODE, NULL, j, EV_ADDED);
  if (o == NULL) {
    json_decref(n->taints);
    free(n);
    return -ENOMEM;
  }
  n->index = index;
  n->alloc_cpu_m = cpu_m;
  n->alloc_mem_m = mem_b;
  n->alloc_pods = s->opts.node_pods;
  n->alloc_gpu = index <= s->opts.gpu_nodes ? s->opts.node_gpus : 0;
  n->kubelet = KUBELET_READY;
  n->ready = 'T';
  o->u.node = n;
  return 0;
}

static int node_has_image(struct sim_node *n, const char *image) {
  size_t i;

  for (i = 0; i < n->nimages; i++)
    if (strcmp(n->images[i], image) == 0)
      return 1;
  return 0;
}

static void node_add_image(struct sim_node *n, const char *image) {
  char **ni;

  if (node_has_image(n, image))
    return;
  ni = realloc(n->images, (n->nimages + 1) * sizeof(*ni));
  if (ni == NULL)
    return;
  n->images = ni;
  if ((ni[n->nimages] = strdup(image)) != NULL)
    n->nimages++;
}

/* ---------------------------------------------------------------------- */
/* namespaces and quota                                                    */

static struct sim_ns *ns_state(struct sim *s, const char *ns) {
  struct sim_obj *o = store_get(s, K_NAMESPACE, "", ns);

  return o ? o->u.nsstate : NULL;
}

void ns_usage_add(struct sim *s, const char *ns, struct sim_pod *p, int sign) {
  struct sim_ns *st = ns_state(s, ns);

  if (st == NULL)
    return;
  st->pods += sign;
  st->cpu_m += sign * p->req_cpu_m;
  st->mem_m += sign * p->req_mem_m;
  st->lim_cpu_m += sign * p->lim_cpu_m;
  st->lim_mem_m += sign * p->lim_mem_m;
  st->quota_dirty = 1;
  sync_arm(s);
}

void quota_init_ns(struct sim *s, const char *ns) {
  json_t *j, *hard;
  char uid[40], ts[21], q[32];

  if (s->quota_pods < 0 && s->quota_cpu_m < 0 && s->quota_mem_m < 0)
    return;
  hard = json_object();
  if (s->quota_pods >= 0) {
    snprintf(q, sizeof(q), "%" PRId64, s->quota_pods);
    json_object_set_new(hard, "pods", json_string(q));
  }
  if (s->quota_cpu_m >= 0) {
    fr_quantity_format_milli(s->quota_cpu_m, q, sizeof(q));
    json_object_set_new(hard, "requests.cpu", json_string(q));
  }
  if (s->quota_mem_m >= 0) {
    fr_quantity_format_bytes(s->quota_mem_m, q, sizeof(q));
    json_object_set_new(hard, "requests.memory", json_string(q));
  }
  uid_new(uid);
  now_rfc3339(ts);
  j = json_pack("{s:s,s:s,s:{s:s,s:s,s:s,s:s},s:{s:O},s:{s:O,s:{}}}", "kind", "ResourceQuota",
                "apiVersion", "v1", "metadata", "name", "kubesim-quota", "namespace", ns, "uid", uid,
                "creationTimestamp", ts, "spec", "hard", hard, "status", "hard", hard, "used");
  json_decref(hard);
  if (j != NULL)
    store_commit(s, K_QUOTA, NULL, j, EV_ADDED);
}

/* Usage of <key> from the namespace aggregate, in the quantity's units
 * (milli for cpu, bytes for memory, count for pods); -1 if not tracked. */
static int64_t ns_used(const struct sim_ns *st, const char *key, int *is_cpu) {
  *is_cpu = 0;
  if (strcmp(key, "pods") == 0 || strcmp(key, "count/pods") == 0)
    return st->pods;
  if (strcmp(key, "requests.cpu") == 0 || strcmp(key, "cpu") == 0) {
    *is_cpu = 1;
    return st->cpu_m;
  }
  if (strcmp(key, "requests.memory") == 0 || strcmp(key, "memory") == 0)
    return st->mem_m;
  if (strcmp(key, "limits.cpu") == 0) {
    *is_cpu = 1;
    return st->lim_cpu_m;
  }
  if (strcmp(key, "limits.memory") == 0)
    return st->lim_mem_m;
  return -1;
}

static void fmt_amount(int64_t v, int is_cpu, const char *key, char *out, size_t cap) {
  if (is_cpu)
    fr_quantity_format_milli(v, out, cap);
  else if (strstr(key, "memory") != NULL)
    fr_quantity_format_bytes(v, out, cap);
  else
    snprintf(out, cap, "%" PRId64, v);
}

int quota_check(struct sim *s, const char *ns, const char *pod_name, int64_t cpu_m, int64_t mem_m,
                int64_t lim_cpu_m, int64_t lim_mem_m, struct sim_err *err) {
  struct sim_ns *st = ns_state(s, ns);
  struct sim_obj *q;

  if (st == NULL)
    return 0;
  for (q = store_first(s, K_QUOTA, ns); q != NULL && strcmp(q->ns, ns) == 0; q = store_next(s, q)) {
    json_t *j = obj_json(q), *hard = json_path(j, "spec.hard"), *v;
    struct fr_buf rq, us, lim;
    const char *key;
    int exceeded = 0;

    fr_buf_init(&rq);
    fr_buf_init(&us);
    fr_buf_init(&lim);
    json_object_foreach(hard, key, v) {
      int is_cpu;
      int64_t used = ns_used(st, key, &is_cpu), want, limit, as_q;
      char a[32], b[32], c[32];
      if (used < 0 || !json_is_string(v))
        continue;
      if (strcmp(key, "pods") == 0 || strcmp(key, "count/pods") == 0)
        want = 1;
      else if (strcmp(key, "limits.cpu") == 0)
        want = lim_cpu_m;
      else if (strcmp(key, "limits.memory") == 0)
        want = lim_mem_m;
      else
        want = is_cpu ? cpu_m : mem_m;
      if (is_cpu ? fr_quantity_parse_milli(json_string_value(v), &as_q) != 0
                 : fr_quantity_parse_value(json_string_value(v), &as_q) != 0)
        continue;
      limit = as_q;
      if (used + want <= limit)
        continue;
      exceeded = 1;
      fmt_amount(want, is_cpu, key, a, sizeof(a));
      fmt_amount(used, is_cpu, key, b, sizeof(b));
      fmt_amount(limit, is_cpu, key, c, sizeof(c));
      fr_buf_printf(&rq, "%s%s=%s", rq.len ? "," : "", key, a);
      fr_buf_printf(&us, "%s%s=%s", us.len ? "," : "", key, b);
      fr_buf_printf(&lim, "%s%s=%s", lim.len ? "," : "", key, c);
    }
    if (exceeded) {
      sim_err_set(err, 403, "Forbidden", "pods \"%s\" is forbidden: exceeded quota: %s, requested: %s, used: %s, limited: %s",
               pod_name, q->name, rq.data, us.data, lim.data);
    }
    fr_buf_free(&rq);
    fr_buf_free(&us);
    fr_buf_free(&lim);
    json_decref(j);
    if (exceeded)
      return -1;
  }
  return 0;
}

/* ---------------------------------------------------------------------- */
/* pod helpers                                                             */

static struct sim_pod *pod_of(struct sim_obj *o) {
  return o->u.pod;
}

static void set_condition(json_t *status, const char *type, const char *st, const char *reason,
                          const char *message) {
  json_t *conds = json_object_get(status, "conditions"), *c = NULL;
  char ts[21];
  size_t i = 0;

  now_rfc3339(ts);
  if (!json_is_array(conds)) {
    conds = json_array();
    json_object_set_new(status, "conditions", conds);
  }
  json_array_foreach(conds, i, c) {
    if (json_get_str(c, "type") && strcmp(json_get_str(c, "type"), type) == 0)
      break;
  }
  if (c == NULL || i == json_array_size(conds)) {
    c = json_object();
    json_array_append_new(conds, c);
    json_object_set_new(c, "type", json_string(type));
  }
  if (json_get_str(c, "status") == NULL || strcmp(json_get_str(c, "status"), st) != 0)
    json_object_set_new(c, "lastTransitionTime", json_string(ts));
  json_object_set_new(c, "lastProbeTime", json_null());
  json_object_set_new(c, "status", json_string(st));
  if (reason)
    json_object_set_new(c, "reason", json_string(reason));
  else
    json_object_del(c, "reason");
  if (message)
    json_object_set_new(c, "message", json_string(message));
  else
    json_object_del(c, "message");
}

/* Sets every container's state to {<state>: <detail>} (taken). */
static void set_container_states(json_t *pod, const char *state, json_t *detail, int ready) {
  json_t *containers = json_path(pod, "spec.containers"), *cs = json_array(), *c;
  size_t i;

  json_array_foreach(containers, i, c) {
    json_t *st = json_object();
    json_object_set(st, state, detail);
    json_array_append_new(
        cs, json_pack("{s:s,s:o,s:b,s:i,s:s,s:s,s:b}", "name", json_get_str(c, "name"), "state", st,
                      "ready", ready, "restartCount", 0, "image", json_get_str(c, "image"),
                      "imageID", "", "started", strcmp(state, "running") == 0));
  }
  json_object_set_new(json_obj(pod, "status"), "containerStatuses", cs);
  json_decref(detail);
}

/* Commits <j> as the next version of pod <o>; returns the (same) object or
 * NULL on failure. */
static struct sim_obj *pod_commit(struct sim *s, struct sim_obj *o, json_t *j) {
  return store_commit(s, K_POD, o, j, EV_MODIFIED);
}

static void usage_release(struct sim *s, struct sim_obj *o) {
  struct sim_pod *p = pod_of(o);

  if (!p->counted)
    return;
  p->counted = 0;
  if (p->node != NULL) {
    struct sim_node *n = p->node->u.node;
    n->used_cpu_m -= p->req_cpu_m;
    n->used_mem_m -= p->req_mem_m;
    n->used_gpu -= p->req_gpu;
    n->used_pods--;
    p->node = NULL;
    sched_room_freed(s);
  }
  ns_usage_add(s, o->ns, p, -1);
}

/* ---------------------------------------------------------------------- */
/* scheduler                                                               */

static void q_unlink(struct sim *s, struct sim_pod *p) {
  if (p->queued) {
    if (p->q_prev)
      p->q_prev->q_next = p->q_next;
    else
      s->q_head = p->q_next;
    if (p->q_next)
      p->q_next->q_prev = p->q_prev;
    else
      s->q_tail = p->q_prev;
    p->q_prev = p->q_next = NULL;
    p->queued = 0;
  }
  if (p->unsched_idx >= 0) {
    size_t i = (size_t)p->unsched_idx;
    s->unsched[i] = s->unsched[--s->nunsched];
    s->unsched[i]->unsched_idx = (long)i;
    p->unsched_idx = -1;
  }
}

static void q_push(struct sim *s, struct sim_pod *p) {
  if (p->queued)
    return;
  p->q_prev = s->q_tail;
  p->q_next = NULL;
  if (s->q_tail)
    s->q_tail->q_next = p;
  else
    s->q_head = p;
  s->q_tail = p;
  p->queued = 1;
}

static void sched_kick(struct sim *s, uint64_t delay_ms);

/* The first of <tolerations> that tolerates <taint> (the scheduler's and
 * the taint manager's rule), or NULL. */
static json_t *toleration_for(json_t *tolerations, json_t *taint) {
  const char *k = json_get_str(taint, "key"), *v = json_get_str(taint, "value");
  const char *eff = json_get_str(taint, "effect");
  json_t *t;
  size_t i;

  json_array_foreach(tolerations, i, t) {
    const char *tk = json_get_str(t, "key"), *op = json_get_str(t, "operator");
    const char *tv = json_get_str(t, "value"), *te = json_get_str(t, "effect");
    int exists = op != NULL && strcmp(op, "Exists") == 0;
    if (te != NULL && *te != '\0' && (eff == NULL || strcmp(te, eff) != 0))
      continue;
    if (tk == NULL || *tk == '\0') {
      if (exists)
        return t;
      continue;
    }
    if (k == NULL || strcmp(tk, k) != 0)
      continue;
    if (exists || strcmp(tv ? tv : "", v ? v : "") == 0)
      return t;
  }
  return NULL;
}

static int tolerated(json_t *tolerations, json_t *taint) {
  return toleration_for(tolerations, taint) != NULL;
}

/* The first NoSchedule/NoExecute taint of <nd> <tolerations> leave
 * untolerated, or NULL. */
static json_t *untolerated(struct sim_node *nd, json_t *tolerations) {
  json_t *t;
  size_t i;

  json_array_foreach(nd->taints, i, t) {
    const char *eff = json_get_str(t, "effect");
    if (eff != NULL && strcmp(eff, "PreferNoSchedule") != 0 && !tolerated(tolerations, t))
      return t;
  }
  return NULL;
}

static struct sim_obj *pick_node(struct sim *s, struct sim_pod *p, json_t *node_selector,
                                 json_t *tolerations, int *why, char *taint, size_t taint_len) {
  struct sim_obj *n, *best = NULL;
  double best_score = -1;

  *why = 0;
  for (n = store_first(s, K_NODE, NULL); n != NULL; n = store_next(s, n)) {
    struct sim_node *nd = n->u.node;
    double score;
    const char *k;
    json_t *v;
    int ok = 1;

    if (nd->unschedulable)
      continue;
    json_object_foreach(node_selector, k, v) {
      const char *have = fr_labels_get(n->cur->labels, n->cur->nlabels, k);
      if (have == NULL || !json_is_string(v) || strcmp(have, json_string_value(v)) != 0)
        ok = 0;
    }
    if (!ok) {
      *why |= 8;
      continue;
    }
    {
      json_t *t = untolerated(nd, tolerations);
      if (t != NULL) {
        /* As the scheduler words it: {key: value}. */
        if (!(*why & 64))
          snprintf(taint, taint_len, "{%s: %s}", json_get_str(t, "key") ? json_get_str(t, "key") : "",
                   json_get_str(t, "value") ? json_get_str(t, "value") : "");
        *why |= 64;
        continue;
      }
    }
    if (p->req_gpu > 0 && nd->used_gpu + p->req_gpu > nd->alloc_gpu) {
      *why |= 32;
      continue;
    }
    if (nd->used_pods + 1 > nd->alloc_pods) {
      *why |= 4;
      continue;
    }
    if (nd->used_cpu_m + p->req_cpu_m > nd->alloc_cpu_m) {
      *why |= 1;
      continue;
    }
    if (nd->used_mem_m + p->req_mem_m > nd->alloc_mem_m) {
      *why |= 2;
      continue;
    }
    /* LeastAllocated, the default scheduler's scoring: spread load. */
    score = (double)(nd->alloc_cpu_m - nd->used_cpu_m - p->req_cpu_m) / (double)(nd->alloc_cpu_m + 1) +
            (double)(nd->alloc_mem_m - nd->used_mem_m - p->req_mem_m) / (double)(nd->alloc_mem_m + 1);
    if (score > best_score) {
      best_score = score;
      best = n;
    }
  }
  return best;
}

static void on_pod_started(uv_timer_t *t);

static void bind_pod(struct sim *s, struct sim_obj *o, struct sim_obj *node, json_t *j) {
  struct sim_pod *p = pod_of(o);
  struct sim_node *nd = node->u.node;
  json_t *st = json_obj(j, "status"), *hostips;
  const char *image = json_string_value(json_path(j, "spec.containers")
                                            ? json_object_get(json_array_get(json_path(j, "spec.containers"), 0), "image")
                                            : NULL);
  const char *hostip = NULL;
  char pull[512];
  uint64_t delay = (uint64_t)s->opts.start_ms;
  size_t i;
  json_t *a;
  char ts[21];

  {
    json_t *nj = obj_json(node);
    json_array_foreach(json_path(nj, "status.addresses"), i, a) {
      if (json_get_str(a, "type") && strcmp(json_get_str(a, "type"), "InternalIP") == 0) {
        hostip = json_get_str(a, "address");
        json_object_set_new(st, "hostIP", json_string(hostip));
        hostips = json_array();
        json_array_append_new(hostips, json_pack("{s:s}", "ip", hostip));
        json_object_set_new(st, "hostIPs", hostips);
      }
    }
    json_decref(nj);
  }
  now_rfc3339(ts);
  json_object_set_new(json_obj(j, "spec"), "nodeName", json_string(node->name));
  json_object_set_new(st, "startTime", json_string(ts));
  set_condition(st, "PodScheduled", "True", NULL, NULL);
  set_condition(st, "Initialized", "True", NULL, NULL);
  set_condition(st, "ContainersReady", "False", "ContainersNotReady", "containers with unready status");
  set_condition(st, "Ready", "False", "ContainersNotReady", "containers with unready status");
  set_container_states(j, "waiting", json_pack("{s:s}", "reason", "ContainerCreating"), 0);
  nd->used_cpu_m += p->req_cpu_m;
  nd->used_mem_m += p->req_mem_m;
  nd->used_gpu += p->req_gpu;
  nd->used_pods++;
  p->node = node;
  p->stage = PS_BOUND;
  p->start_ms = fr_wall_ms();
  /* Image pulls are cached per node, like a kubelet's image store. */
  p->pulling = 0;
  if (image != NULL && !node_has_image(nd, image)) {
    delay += (uint64_t)s->opts.image_pull_ms;
    node_add_image(nd, image);
    p->pulling = 1;
  }
  /* <image> lives in <j>, which the commit takes. */
  snprintf(pull, sizeof(pull), "%s", p->pulling ? image : "");
  if (pod_commit(s, o, j) == NULL)
    return;
  event_emit(s, o, "Normal", "Scheduled", "default-scheduler", NULL, "Successfully assigned %s/%s to %s",
             o->ns, o->name, node->name);
  if (p->pulling)
    event_emit(s, o, "Normal", "Pulling", "kubelet", node->name, "Pulling image \"%s\"", pull);
  pod_timer_start(p, on_pod_started, delay);
  noexec_check(s, o); /* a pod bound by spec.nodeName may land on a NoExecute taint */
}

/* <detail>: what the scheduler says instead of the per-node reasons (a
 * missing claim), or the untolerated taint with bit 64; may be NULL. */
static void report_unschedulable(struct sim *s, struct sim_obj *o, int why, const char *detail) {
  struct sim_pod *p = pod_of(o);
  json_t *j;
  char msg[512];
  struct fr_buf b;

  fr_buf_init(&b);
  if (why & 128)
    fr_buf_printf(&b, "%s", detail);
  if (why & 32)
    fr_buf_printf(&b, "%sInsufficient %s", b.len ? ", " : "", gpu_resource(s));
  if (why & 64)
    fr_buf_printf(&b, "%snode(s) had untolerated taint %s", b.len ? ", " : "", detail ? detail : "");
  if (why & 1)
    fr_buf_printf(&b, "%sInsufficient cpu", b.len ? ", " : "");
  if (why & 2)
    fr_buf_printf(&b, "%sInsufficient memory", b.len ? ", " : "");
  if (why & 4)
    fr_buf_printf(&b, "%sToo many pods", b.len ? ", " : "");
  if (why & 8)
    fr_buf_printf(&b, "%snode(s) didn't match Pod's node affinity/selector", b.len ? ", " : "");
  snprintf(msg, sizeof(msg), "0/%zu nodes are available: %s. preemption: not eligible.",
           s->counts[K_NODE], b.len ? b.data : "no nodes available to schedule pods");
  fr_buf_free(&b);
  /* Every failed attempt is an event (repeats count up on one); the
   * condition is written once. */
  event_emit(s, o, "Warning", "FailedScheduling", "default-scheduler", NULL, "%s", msg);
  if (p->unsched_reported)
    return;
  p->unsched_reported = 1;
  j = obj_json(o);
  if (j == NULL)
    return;
  set_condition(json_obj(j, "status"), "PodScheduled", "False", "Unschedulable", msg);
  pod_commit(s, o, j);
}

static void sched_run(struct sim *s) {
  uint64_t now = uv_now(s->loop);
  int64_t fail_cpu = INT64_MAX, fail_mem = INT64_MAX;
  int fail_known = 0, fail_why = 16;

  if (s->opts.scheduler_qps > 0) {
    s->sched_tokens += (double)(now - s->sched_last_ms) * s->opts.scheduler_qps / 1000.0;
    if (s->sched_tokens > s->opts.scheduler_qps)
      s->sched_tokens = s->opts.scheduler_qps;
  }
  s->sched_last_ms = now;
  while (s->q_head != NULL) {
    struct sim_pod *p = s->q_head;
    struct sim_obj *o = p->obj, *node;
    json_t *j, *sel;
    char detail[300];
    int why;

    if (s->opts.scheduler_qps > 0 && s->sched_tokens < 1.0) {
      sched_kick(s, (uint64_t)(1000 / s->opts.scheduler_qps) + 1);
      return;
    }
    q_unlink(s, p);
    if (o == NULL || p->stage != PS_PENDING)
      continue;
    /* Once a pod failed to fit, anything at least as large cannot fit
     * either until room frees; skip the node scan for it. */
    if (fail_known && p->req_cpu_m >= fail_cpu && p->req_mem_m >= fail_mem) {
      p->unsched_idx = -1;
      report_unschedulable(s, o, fail_why, NULL);
      goto park;
    }
    if (s->opts.scheduler_qps > 0)
      s->sched_tokens -= 1.0;
    j = obj_json(o);
    if (j == NULL)
      continue;
    sel = json_path(j, "spec.nodeSelector");
    if (pod_claims_schedulable(s, o, detail, sizeof(detail))) {
      json_decref(j);
      report_unschedulable(s, o, 128, detail);
      goto park;
    }
    node = pick_node(s, p, sel, json_path(j, "spec.tolerations"), &why, detail, sizeof(detail));
    if (node != NULL) {
      p->counted = 1;
      pod_claims_bind(s, o, node->name);
      bind_pod(s, o, node, j);
      continue;
    }
    json_decref(j);
    /* Only resource shortfalls say anything about the next pods. */
    if (!(why & (8 | 32 | 64))) {
      fail_known = 1;
      fail_why = why ? why : 16;
      if (p->req_cpu_m < fail_cpu || p->req_mem_m < fail_mem) {
        fail_cpu = p->req_cpu_m;
        fail_mem = p->req_mem_m;
      }
    }
    report_unschedulable(s, o, why ? why : 16, detail);
  park:
    if (s->nunsched == s->unsched_cap) {
      size_t ncap = s->unsched_cap ? s->unsched_cap * 2 : 256;
      struct sim_pod **nu = realloc(s->unsched, ncap * sizeof(*nu));
      if (nu == NULL)
        continue;
      s->unsched = nu;
      s->unsched_cap = ncap;
    }
    /* Parked pods stay PS_PENDING; unsched_idx marks them. */
    p->unsched_idx = (long)s->nunsched;
    s->unsched[s->nunsched++] = p;
  }
}

static void on_sched_timer(uv_timer_t *t) {
  struct sim *s = t->data;

  s->sched_armed = 0;
  sched_run(s);
}

static void sched_kick(struct sim *s, uint64_t delay_ms) {
  if (s->sched_armed || s->stopping)
    return;
  s->sched_armed = 1;
  uv_timer_start(&s->sched_timer, on_sched_timer, delay_ms, 0);
}

void sched_room_freed(struct sim *s) {
  size_t i;

  /* Parked pods go back to the queue in one go (coalesced per loop turn by
   * the scheduler timer). */
  for (i = 0; i < s->nunsched; i++) {
    struct sim_pod *p = s->unsched[i];
    p->unsched_idx = -1;
    q_push(s, p);
  }
  s->nunsched = 0;
  if (s->q_head != NULL)
    sched_kick(s, 0);
}

void sched_init(struct sim *s) {
  uv_timer_init(s->loop, &s->sched_timer);
  s->sched_timer.data = s;
  uv_timer_init(s->loop, &s->noexec_timer);
  s->noexec_timer.data = s;
  s->sched_last_ms = uv_now(s->loop);
  s->sched_tokens = s->opts.scheduler_qps;
}

void sched_free(struct sim *s) {
  free(s->unsched);
  s->unsched = NULL;
  s->nunsched = s->unsched_cap = 0;
  free(s->noexec);
  s->noexec = NULL;
  s->nnoexec = s->noexec_cap = 0;
}

/* ---------------------------------------------------------------------- */
/* taint manager: NoExecute taints evict                                   */

/* As the taint eviction controller (pkg/controller/tainteviction) does: a
 * pod on a node with NoExecute taints it does not tolerate is deleted at
 * once; one whose tolerations of them carry tolerationSeconds is deleted
 * that long after the taint was first seen (the smallest of them, counted
 * from when the eviction was first planned); one tolerating them without
 * tolerationSeconds stays. Evictions run from a timer, never inside the
 * request or scheduler call that noticed them: the pod may be the object a
 * caller still holds. */

/* How long <tolerations> let a pod stay on <nd>: -2 when the node has no
 * NoExecute taint, -1 forever, else milliseconds (0: evict now). */
static int64_t noexec_stay_ms(struct sim_node *nd, json_t *tolerations) {
  int64_t min = -1;
  json_t *t;
  size_t i;
  int any = 0;

  json_array_foreach(nd->taints, i, t) {
    const char *eff = json_get_str(t, "effect");
    json_t *tol, *secs;
    if (eff == NULL || strcmp(eff, "NoExecute") != 0)
      continue;
    any = 1;
    if ((tol = toleration_for(tolerations, t)) == NULL)
      return 0;
    secs = json_object_get(tol, "tolerationSeconds");
    if (json_is_integer(secs)) {
      /* <= 0: at once, as the controller reads it; a huge value: never. */
      json_int_t sec = json_integer_value(secs);
      int64_t ms = sec <= 0 ? 0 : sec > INT64_MAX / 2000 ? INT64_MAX / 2 : (int64_t)sec * 1000;
      if (min < 0 || ms < min)
        min = ms;
    }
  }
  return any ? min : -2;
}

static void noexec_unqueue(struct sim *s, struct sim_pod *p) {
  size_t i;

  if (p->noexec_idx < 0)
    return;
  i = (size_t)p->noexec_idx;
  s->noexec[i] = s->noexec[--s->nnoexec];
  s->noexec[i]->noexec_idx = (long)i;
  p->noexec_idx = -1;
}

static void on_noexec_timer(uv_timer_t *t);

static void noexec_arm(struct sim *s) {
  uint64_t now = uv_now(s->loop), due = UINT64_MAX;
  size_t i;

  for (i = 0; i < s->nnoexec; i++)
    if (s->noexec[i]->noexec_due_ms < due)
      due = s->noexec[i]->noexec_due_ms;
  if (due == UINT64_MAX || s->stopping)
    uv_timer_stop(&s->noexec_timer);
  else
    uv_timer_start(&s->noexec_timer, on_noexec_timer, due > now ? due - now : 0, 0);
}

/* (Re)plans the NoExecute eviction of pod <o> against its node's taints
 * as they are now: planned, moved, or cancelled (taint removed). */
static void noexec_check(struct sim *s, struct sim_obj *o) {
  struct sim_pod *p = pod_of(o);
  const char *nn = o->cur->fields[F_NODE_NAME];
  struct sim_obj *node = nn != NULL ? store_get(s, K_NODE, "", nn) : NULL;
  int64_t stay = -2;
  uint64_t now = uv_now(s->loop);
  json_t *j;

  if (p == NULL)
    return;
  if (node != NULL && node->u.node != NULL && node->u.node->taints != NULL && p->stage != PS_TERMINATING &&
      (j = obj_json(o)) != NULL) {
    stay = noexec_stay_ms(node->u.node, json_path(j, "spec.tolerations"));
    json_decref(j);
  }
  if (stay < 0) {
    noexec_unqueue(s, p);
    noexec_arm(s);
    return;
  }
  if (p->noexec_idx < 0) {
    if (s->nnoexec == s->noexec_cap) {
      size_t ncap = s->noexec_cap ? s->noexec_cap * 2 : 64;
      struct sim_pod **nq = realloc(s->noexec, ncap * sizeof(*nq));
      if (nq == NULL) {
        FR_WARN("taints", "out of memory planning the NoExecute eviction of %s/%s", o->ns, o->name);
        return;
      }
      s->noexec = nq;
      s->noexec_cap = ncap;
    }
    p->noexec_idx = (long)s->nnoexec;
    s->noexec[s->nnoexec++] = p;
    p->noexec_since_ms = now;
  }
  p->noexec_due_ms = p->noexec_since_ms + (uint64_t)stay;
  noexec_arm(s);
}

static void on_noexec_timer(uv_timer_t *t) {
  struct sim *s = t->data;
  uint64_t now = uv_now(s->loop);
  size_t i = 0;

  while (i < s->nnoexec) {
    struct sim_pod *p = s->noexec[i];
    struct sim_obj *o = p->obj;
    if (p->noexec_due_ms > now) {
      i++;
      continue;
    }
    /* Swapped out: the entry now at <i> is looked at next. An eviction
     * that frees other queued pods only shortens the array. */
    noexec_unqueue(s, p);
    if (o == NULL || p->stage == PS_TERMINATING)
      continue;
    FR_INFO("taints", "deleting pod %s/%s (NoExecute taint on %s)", o->ns, o->name,
                o->cur->fields[F_NODE_NAME] ? o->cur->fields[F_NODE_NAME] : "?");
    pod_set_disruption(s, o, "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint");
    event_emit(s, o, "Normal", "TaintManagerEviction", "taint-eviction-controller", NULL,
               "Marking for deletion Pod %s/%s", o->ns, o->name);
    pod_delete(s, o, -1);
  }
  noexec_arm(s);
}

int pod_set_disruption(struct sim *s, struct sim_obj *o, const char *reason, const char *message) {
  json_t *j = obj_json(o);

  if (j == NULL)
    return -ENOMEM;
  set_condition(json_obj(j, "status"), "DisruptionTarget", "True", reason, message);
  return pod_commit(s, o, j) != NULL ? 0 : -ENOMEM;
}

/* ---------------------------------------------------------------------- */
/* lifecycle                                                               */

static void on_pod_timer_closed(uv_handle_t *h) {
  struct sim_pod *p = h->data;

  pod_claims_free(p);
  free(p->workdir);
  free(p);
}

static void pod_timer_start(struct sim_pod *p, void (*cb)(uv_timer_t *), uint64_t ms) {
  uv_timer_start(&p->timer, cb, ms, 0);
}

static void pod_fail(struct sim *s, struct sim_obj *o, const char *reason, const char *message);
static void on_terminated(uv_timer_t *t);

static void on_deadline(uv_timer_t *t) {
  struct sim_pod *p = t->data;

  if (p->obj != NULL && (p->stage == PS_RUNNING || p->stage == PS_BOUND))
    pod_fail(p->sim, p->obj, "DeadlineExceeded",
             "Pod was active on the node longer than the specified deadline");
}

static void arm_deadline(struct sim_pod *p) {
  int64_t left;

  if (p->deadline_s <= 0 || (p->stage != PS_RUNNING && p->stage != PS_BOUND))
    return;
  left = p->deadline_s * 1000 - (fr_wall_ms() - p->start_ms);
  pod_timer_start(p, on_deadline, left > 0 ? (uint64_t)left : 0);
}

/* What the kubelet records as it starts pod <o>'s <containers> (borrowed):
 * the image (pulled once per node, for the first container), Created,
 * Started. */
static void kubelet_started_events(struct sim *s, struct sim_obj *o, json_t *containers) {
  struct sim_pod *p = o->u.pod;
  const char *host = p->node ? p->node->name : NULL;
  json_t *c;
  size_t i;

  json_array_foreach(containers, i, c) {
    const char *name = json_get_str(c, "name"), *image = json_get_str(c, "image");
    if (name == NULL || image == NULL)
      continue;
    if (i == 0 && p->pulling)
      event_emit(s, o, "Normal", "Pulled", "kubelet", host,
                 "Successfully pulled image \"%s\" in %dms (%dms including waiting)", image,
                 s->opts.image_pull_ms, s->opts.image_pull_ms);
    else
      event_emit(s, o, "Normal", "Pulled", "kubelet", host,
                 "Container image \"%s\" already present on machine", image);
    event_emit(s, o, "Normal", "Created", "kubelet", host, "Created container: %s", name);
    event_emit(s, o, "Normal", "Started", "kubelet", host, "Started container %s", name);
  }
  p->pulling = 0;
}

static void on_pod_started(uv_timer_t *t) {
  struct sim_pod *p = t->data;
  struct sim *s = p->sim;
  struct sim_obj *o = p->obj;
  json_t *j, *st, *ips, *containers;
  char ip[32], ts[21], cid[80];
  int ready;

  if (o == NULL || p->stage != PS_BOUND)
    return;
  /* No kubelet to start the containers: the pod waits for it (pod_kubelet_back()). */
  if (node_kubelet_lost(s, o->cur->fields[F_NODE_NAME])) {
    p->kubelet_pending = 1;
    return;
  }
  if (p->deadline_s > 0 && fr_wall_ms() - p->start_ms >= p->deadline_s * 1000) {
    on_deadline(t);
    return;
  }
  /* Its volumes attach and mount first; a kubelet retries until they do. */
  if (pod_claims_attach(s, o)) {
    pod_timer_start(p, on_pod_started, 1000);
    return;
  }
  /* The pod's address, from the range (podnet.c); with none left it waits,
   * as a kubelet whose CNI plugin fails retries the sandbox. */
  if (p->ip[0] == '\0' && podnet_alloc(s, p->ip, sizeof(p->ip)) != 0) {
    event_emit(s, o, "Warning", "FailedCreatePodSandBox", "kubelet", o->cur->fields[F_NODE_NAME],
               "Failed to create pod sandbox: failed to allocate for range 0: no IP addresses "
               "available in range set");
    pod_timer_start(p, on_pod_started, 1000);
    return;
  }
  j = obj_json(o);
  if (j == NULL)
    return;
  snprintf(ip, sizeof(ip), "%s", p->ip);
  now_rfc3339(ts);
  st = json_obj(j, "status");
  json_object_set_new(st, "phase", json_string("Running"));
  json_object_set_new(st, "podIP", json_string(ip));
  ips = json_array();
  json_array_append_new(ips, json_pack("{s:s}", "ip", ip));
  json_object_set_new(st, "podIPs", ips);
  /* A pod whose agent kubesim runs is Ready only once the agent listens
   * (pod_set_ready()), as a readiness probe on its /health would make it. */
  ready = !agent_wanted(s, j);
  set_condition(st, "ContainersReady", ready ? "True" : "False", ready ? NULL : "ContainersNotReady",
                ready ? NULL : "containers with unready status");
  set_condition(st, "Ready", ready ? "True" : "False", ready ? NULL : "ContainersNotReady",
                ready ? NULL : "containers with unready status");
  set_container_states(j, "running", json_pack("{s:s}", "startedAt", ts), ready);
  {
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(st, "containerStatuses"), i, c) {
      snprintf(cid, sizeof(cid), "kubesim://%s-%zu", o->uid, i);
      json_object_set_new(c, "containerID", json_string(cid));
    }
  }
  p->stage = PS_RUNNING;
  /* The commit takes <j>; the events need only its containers. */
  containers = json_incref(json_path(j, "spec.containers"));
  if (pod_commit(s, o, j) == NULL) {
    json_decref(containers);
    return;
  }
  kubelet_started_events(s, o, containers);
  json_decref(containers);
  rs_pod_event(s, o);
  arm_deadline(p);
  if (!ready && agent_start(s, o) != 0)
    pod_main_exited(s, o, 128);
}

void pod_set_ready(struct sim *s, struct sim_obj *o) {
  struct sim_pod *p = pod_of(o);
  json_t *j, *st, *c;
  size_t i;

  if (p == NULL || p->stage != PS_RUNNING || (j = obj_json(o)) == NULL)
    return;
  st = json_obj(j, "status");
  set_condition(st, "ContainersReady", "True", NULL, NULL);
  set_condition(st, "Ready", "True", NULL, NULL);
  json_array_foreach(json_object_get(st, "containerStatuses"), i, c)
    json_object_set_new(c, "ready", json_true());
  if (pod_commit(s, o, j) != NULL)
    rs_pod_event(s, o);
}

void pod_node_ready(struct sim *s, struct sim_obj *o, int ready) {
  struct sim_pod *p = pod_of(o);
  json_t *j, *st;

  if (p == NULL || (ready && !p->node_unready) || (j = obj_json(o)) == NULL)
    return;
  st = json_obj(j, "status");
  if (!ready) {
    /* MarkPodsNotReady: Ready goes False, nothing else (the kubelet that
     * would report the containers is not there). */
    if (!pod_json_ready(j)) {
      json_decref(j);
      return;
    }
    set_condition(st, "Ready", "False", NULL, NULL);
    p->node_unready = 1;
  } else {
    /* The kubelet reports the pod again: Ready as its containers are. */
    p->node_unready = 0;
    if (p->stage != PS_RUNNING || json_path(j, "metadata.deletionTimestamp") != NULL) {
      json_decref(j);
      return;
    }
    set_condition(st, "Ready", "True", NULL, NULL);
  }
  if (pod_commit(s, o, j) != NULL)
    rs_pod_event(s, o);
}

void pod_kubelet_back(struct sim *s, struct sim_obj *o) {
  struct sim_pod *p = pod_of(o);

  if (p == NULL || !p->kubelet_pending)
    return;
  p->kubelet_pending = 0;
  if (p->stage == PS_TERMINATING)
    pod_timer_start(p, on_terminated, 0);
  else if (p->stage == PS_BOUND)
    pod_timer_start(p, on_pod_started, (uint64_t)s->opts.start_ms);
}

void pod_main_exited(struct sim *s, struct sim_obj *o, int code) {
  struct sim_pod *p = pod_of(o);
  json_t *j, *st;
  char ts[21];

  if (p == NULL || p->stage != PS_RUNNING || (j = obj_json(o)) == NULL)
    return;
  /* The container's main process ended. Restarts are not modelled: the
   * pod ends, Succeeded for 0 and Failed otherwise. */
  kill_execs(p);
  usage_release(s, o);
  p->stage = PS_TERMINAL;
  now_rfc3339(ts);
  st = json_obj(j, "status");
  json_object_set_new(st, "phase", json_string(code == 0 ? "Succeeded" : "Failed"));
  set_condition(st, "ContainersReady", "False", code == 0 ? "PodCompleted" : "PodFailed", NULL);
  set_condition(st, "Ready", "False", code == 0 ? "PodCompleted" : "PodFailed", NULL);
  set_container_states(j, "terminated",
                       json_pack("{s:i,s:s,s:s,s:s}", "exitCode", code, "reason",
                                 code == 0 ? "Completed" : "Error", "startedAt", ts,
                                 "finishedAt", ts), 0);
  if (pod_commit(s, o, j) != NULL)
    rs_pod_event(s, o);
  volumes_pod_released(s, p);
}

static void kill_execs(struct sim_pod *p) {
  sim_exec_set_kill(&p->execs, SIGKILL);
  /* The agent and everything started in the pod's namespaces. */
  agent_stop(p);
}

static void pod_fail(struct sim *s, struct sim_obj *o, const char *reason, const char *message) {
  struct sim_pod *p = pod_of(o);
  json_t *j = obj_json(o), *st;
  char ts[21];

  if (j == NULL)
    return;
  kill_execs(p);
  usage_release(s, o);
  p->stage = PS_TERMINAL;
  now_rfc3339(ts);
  st = json_obj(j, "status");
  json_object_set_new(st, "phase", json_string("Failed"));
  json_object_set_new(st, "reason", json_string(reason));
  json_object_set_new(st, "message", json_string(message));
  set_condition(st, "ContainersReady", "False", "PodFailed", NULL);
  set_condition(st, "Ready", "False", "PodFailed", NULL);
  set_container_states(j, "terminated",
                       json_pack("{s:i,s:s,s:s,s:s}", "exitCode", 137, "reason", "Error",
                                 "startedAt", ts, "finishedAt", ts), 0);
  if (pod_commit(s, o, j) != NULL)
    rs_pod_event(s, o);
  volumes_pod_released(s, p);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

struct rm_work {
  uv_work_t w;
  char *path;
};

static void rm_work_cb(uv_work_t *w) {
  struct rm_work *rw = fr_container_of(w, struct rm_work, w);

  nftw(rw->path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void rm_after_cb(uv_work_t *w, int status) {
  struct rm_work *rw = fr_container_of(w, struct rm_work, w);

  (void)status;
  free(rw->path);
  free(rw);
}

void pod_dir_remove(struct sim *s, char *dir) {
  struct rm_work *rw;

  if (dir == NULL)
    return;
  rw = calloc(1, sizeof(*rw));
  if (rw == NULL) {
    free(dir);
    return;
  }
  rw->path = dir;
  if (uv_queue_work(s->loop, &rw->w, rm_work_cb, rm_after_cb) != 0) {
    free(rw->path);
    free(rw);
  }
}

/* Removes the pod's directory once nothing of the pod runs: the walk goes
 * by path, so a pod process still alive could swap a directory for a
 * symlink under it. */
static void remove_workdir(struct sim *s, struct sim_pod *p) {
  char *dir = p->workdir;

  p->workdir = NULL;
  agent_remove_dir(s, p, dir);
}

void pod_free_state(struct sim *s, struct sim_obj *o) {
  struct sim_pod *p = pod_of(o);

  if (p == NULL)
    return;
  /* Before kill_execs() lets go of the supervisor, which the removal
   * waits for. */
  remove_workdir(s, p);
  volumes_pod_gc(s, p);
  volumes_pod_released(s, p);
  podnet_release(s, p->ip);
  p->ip[0] = '\0';
  kill_execs(p);
  log_pod_free(p);
  usage_release(s, o);
  q_unlink(s, p);
  noexec_unqueue(s, p);
  rs_pod_gone(s, p);
  p->obj = NULL;
  o->u.pod = NULL;
  uv_timer_stop(&p->timer);
  uv_close((uv_handle_t *)&p->timer, on_pod_timer_closed);
}

static void pod_finalize(struct sim *s, struct sim_obj *o) {
  json_t *j = obj_json(o);

  pod_free_state(s, o);
  if (j != NULL)
    store_commit(s, K_POD, o, j, EV_DELETED);
}

static void on_terminated(uv_timer_t *t) {
  struct sim_pod *p = t->data;

  if (p->obj == NULL)
    return;
  /* Only the kubelet confirms that the containers stopped: on a node that
   * lost contact the pod stays Terminating until it is back (or a
   * deletion with gracePeriodSeconds=0 forces it). */
  if (node_kubelet_lost(p->sim, p->obj->cur->fields[F_NODE_NAME])) {
    p->kubelet_pending = 1;
    return;
  }
  pod_finalize(p->sim, p->obj);
}

void pod_delete(struct sim *s, struct sim_obj *o, int64_t grace_s) {
  struct sim_pod *p = pod_of(o);
  json_t *j, *meta;
  char ts[21];

  if (p == NULL)
    return;
  if (p->stage == PS_TERMINATING) {
    if (grace_s == 0)
      pod_finalize(s, o);
    return;
  }
  if (p->stage == PS_RUNNING && p->node != NULL) {
    /* The kubelet stops the containers it was running. */
    json_t *cur = obj_json(o), *c;
    size_t i;
    json_array_foreach(json_path(cur, "spec.containers"), i, c) {
      if (json_get_str(c, "name") != NULL)
        event_emit(s, o, "Normal", "Killing", "kubelet", p->node->name, "Stopping container %s",
                   json_get_str(c, "name"));
    }
    json_decref(cur);
  }
  /* A pod that never reached a node, or a zero grace period, goes at once;
   * otherwise it shows as Terminating for --terminate-ms. */
  if (grace_s == 0 || p->node == NULL ||
      (s->opts.terminate_ms <= 0 && !node_kubelet_lost(s, o->cur->fields[F_NODE_NAME]))) {
    pod_finalize(s, o);
    return;
  }
  kill_execs(p);
  usage_release(s, o);
  q_unlink(s, p);
  j = obj_json(o);
  if (j == NULL) {
    pod_finalize(s, o);
    return;
  }
  if (grace_s < 0)
    grace_s = json_get_int(json_object_get(j, "spec"), "terminationGracePeriodSeconds", 30);
  fr_time_rfc3339(fr_wall_ms() / 1000 + grace_s, ts);
  meta = json_obj(j, "metadata");
  json_object_set_new(meta, "deletionTimestamp", json_string(ts));
  json_object_set_new(meta, "deletionGracePeriodSeconds", json_integer(grace_s));
  p->stage = PS_TERMINATING;
  noexec_unqueue(s, p);
  if (pod_commit(s, o, j) == NULL)
    return;

  rs_pod_event(s, o);
  pod_timer_start(p, on_terminated, (uint64_t)s->opts.terminate_ms);
}

void pod_changed(struct sim *s, struct sim_obj *o) {
  struct sim_pod *p = pod_of(o);
  json_t *j;
  int64_t d;

  if (p == NULL)
    return;
  j = obj_json(o);
  d = json_get_int(json_object_get(j, "spec"), "activeDeadlineSeconds", 0);
  json_decref(j);
  if (d != p->deadline_s) {
    p->deadline_s = d;
    if (p->stage == PS_RUNNING)
      arm_deadline(p);
  }
  rs_pod_event(s, o);
}

static void on_schedule_due(uv_timer_t *t) {
  struct sim_pod *p = t->data;

  if (p->obj == NULL || p->stage != PS_PENDING)
    return;
  q_push(p->sim, p);
  sched_kick(p->sim, 0);
}

/* ---------------------------------------------------------------------- */
/* create                                                                  */

static int invalid(struct sim_err *e, const char *name, const char *field, const char *what) {
  sim_err_set(e, 422, "Invalid", "Pod \"%s\" is invalid: %s: %s", name, field, what);
  e->causes = json_pack("[{s:s,s:s,s:s}]", "reason", "FieldValueInvalid", "message", what, "field", field);
  return -1;
}

static int sum_resources(json_t *containers, const char *name, int64_t *cpu, int64_t *mem,
                         int64_t *lcpu, int64_t *lmem, struct sim_err *e) {
  size_t i;
  json_t *c;

  *cpu = *mem = *lcpu = *lmem = 0;
  json_array_foreach(containers, i, c) {
    json_t *req = json_path(c, "resources.requests"), *lim = json_path(c, "resources.limits");
    const char *rc, *rm, *lc, *lm, *bad = NULL;
    int64_t v;
    char field[96];

    if (quantities_normalize(req, &bad) != 0 || quantities_normalize(lim, &bad) != 0) {
      snprintf(field, sizeof(field), "spec.containers[%zu].resources[%s]", i, bad);
      return invalid(e, name, field, "Invalid value: must be a quantity");
    }
    rc = json_get_str(req, "cpu");
    rm = json_get_str(req, "memory");
    lc = json_get_str(lim, "cpu");
    lm = json_get_str(lim, "memory");

    /* Requests default to limits (Kubernetes defaulting). */
    if (rc == NULL)
      rc = lc;
    if (rm == NULL)
      rm = lm;
    snprintf(field, sizeof(field), "spec.containers[%zu].resources", i);
    if (rc && (fr_quantity_parse_milli(rc, &v) != 0 || v < 0))
      return invalid(e, name, field, "Invalid value: cpu quantity");
    *cpu += rc ? v : 0;
    if (rm && (fr_quantity_parse_value(rm, &v) != 0 || v < 0))
      return invalid(e, name, field, "Invalid value: memory quantity");
    *mem += rm ? v : 0;
    if (lc && (fr_quantity_parse_milli(lc, &v) != 0 || v < 0))
      return invalid(e, name, field, "Invalid value: cpu limit");
    *lcpu += lc ? v : 0;
    if (lm && (fr_quantity_parse_value(lm, &v) != 0 || v < 0))
      return invalid(e, name, field, "Invalid value: memory limit");
    *lmem += lm ? v : 0;
  }
  return 0;
}

static void default_pod(json_t *j, int64_t cpu, int64_t mem, int64_t lcpu, int64_t lmem) {
  json_t *spec = json_obj(j, "spec"), *c, *st;
  size_t i;
  const char *qos;

  if (json_get_str(spec, "restartPolicy") == NULL)
    json_object_set_new(spec, "restartPolicy", json_string("Always"));
  if (json_object_get(spec, "terminationGracePeriodSeconds") == NULL)
    json_object_set_new(spec, "terminationGracePeriodSeconds", json_integer(30));
  if (json_get_str(spec, "dnsPolicy") == NULL)
    json_object_set_new(spec, "dnsPolicy", json_string("ClusterFirst"));
  if (json_get_str(spec, "schedulerName") == NULL)
    json_object_set_new(spec, "schedulerName", json_string("default-scheduler"));
  if (json_get_str(spec, "serviceAccountName") == NULL)
    json_object_set_new(spec, "serviceAccountName", json_string("default"));
  if (json_object_get(spec, "securityContext") == NULL)
    json_object_set_new(spec, "securityContext", json_object());
  json_array_foreach(json_object_get(spec, "containers"), i, c) {
    const char *image = json_get_str(c, "image");
    const char *tag = image ? strrchr(image, ':') : NULL;
    if (json_get_str(c, "imagePullPolicy") == NULL)
      json_object_set_new(c, "imagePullPolicy",
                          json_string(tag == NULL || strcmp(tag, ":latest") == 0 || strchr(tag, '/')
                                          ? "Always" : "IfNotPresent"));
    if (json_get_str(c, "terminationMessagePath") == NULL)
      json_object_set_new(c, "terminationMessagePath", json_string("/dev/termination-log"));
    if (json_get_str(c, "terminationMessagePolicy") == NULL)
      json_object_set_new(c, "terminationMessagePolicy", json_string("File"));
    if (json_object_get(c, "resources") == NULL)
      json_object_set_new(c, "resources", json_object());
  }
  if (cpu == 0 && mem == 0 && lcpu == 0 && lmem == 0)
    qos = "BestEffort";
  else if (cpu == lcpu && mem == lmem)
    qos = "Guaranteed";
  else
    qos = "Burstable";
  st = json_object();
  json_object_set_new(st, "phase", json_string("Pending"));
  json_object_set_new(st, "qosClass", json_string(qos));
  json_object_set_new(j, "status", st);
}

/* The DefaultTolerationSeconds admission plugin: a pod that does not
 * tolerate the NoExecute taints the node lifecycle controller puts on a
 * not-ready or unreachable node gets tolerations of them for 300 s, so its
 * pods outlive a short blip of the node. */
static void default_tolerations(json_t *spec) {
  static const char *const keys[] = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"};
  json_t *tols = json_object_get(spec, "tolerations"), *t;
  size_t i, k;

  for (k = 0; k < FR_ARRAY_SIZE(keys); k++) {
    int covered = 0;
    json_array_foreach(tols, i, t) {
      const char *key = json_get_str(t, "key"), *eff = json_get_str(t, "effect");
      if ((key == NULL || *key == '\0' || strcmp(key, keys[k]) == 0) &&
          (eff == NULL || *eff == '\0' || strcmp(eff, "NoExecute") == 0))
        covered = 1;
    }
    if (covered)
      continue;
    if (!json_is_array(tols)) {
      tols = json_array();
      json_object_set_new(spec, "tolerations", tols);
    }
    json_array_append_new(tols, json_pack("{s:s,s:s,s:s,s:i}", "key", keys[k], "operator", "Exists", "effect",
                                          "NoExecute", "tolerationSeconds", 300));
  }
}

/* The --gpu-resource the containers ask for (requests, else limits). */
static int64_t gpus_of(struct sim *s, json_t *containers) {
  json_t *c;
  size_t i;
  int64_t n = 0, v;

  json_array_foreach(containers, i, c) {
    const char *q = json_string_value(json_object_get(json_path(c, "resources.requests"), gpu_resource(s)));
    if (q == NULL)
      q = json_string_value(json_object_get(json_path(c, "resources.limits"), gpu_resource(s)));
    if (q != NULL && fr_quantity_parse_value(q, &v) == 0 && v > 0)
      n += v;
  }
  return n;
}

static const char *controller_uid(json_t *j) {
  size_t i;
  json_t *r;

  json_array_foreach(json_path(j, "metadata.ownerReferences"), i, r) {
    if (json_is_true(json_object_get(r, "controller")) && json_get_str(r, "kind") &&
        strcmp(json_get_str(r, "kind"), "ReplicaSet") == 0)
      return json_get_str(r, "uid");
  }
  return NULL;
}

int pod_create(struct sim *s, const char *ns, json_t *j, struct sim_obj **out,
               struct sim_err *e) {
  const char *name = json_string_value(json_path(j, "metadata.name"));
  json_t *containers = json_path(j, "spec.containers"), *c;
  int64_t cpu, mem, lcpu, lmem, deadline, gpus;
  struct sim_pod *p;
  struct sim_obj *o;
  const char *node_name, *owner;
  size_t i, k;

  memset(e, 0, sizeof(*e));
  if (!json_is_array(containers) || json_array_size(containers) == 0) {
    invalid(e, name, "spec.containers", "Required value");
    goto fail;
  }
  json_array_foreach(containers, i, c) {
    char field[64];
    const char *cn = json_get_str(c, "name");
    snprintf(field, sizeof(field), "spec.containers[%zu].name", i);
    if (cn == NULL || *cn == '\0' || strlen(cn) > 63) {
      invalid(e, name, field, "Required value");
      goto fail;
    }
    for (k = 0; k < i; k++) {
      if (strcmp(json_get_str(json_array_get(containers, k), "name"), cn) == 0) {
        invalid(e, name, field, "Duplicate value");
        goto fail;
      }
    }
    if (json_get_str(c, "image") == NULL || *json_get_str(c, "image") == '\0') {
      snprintf(field, sizeof(field), "spec.containers[%zu].image", i);
      invalid(e, name, field, "Required value");
      goto fail;
    }
  }
  deadline = json_get_int(json_object_get(j, "spec"), "activeDeadlineSeconds", 0);
  if (json_object_get(json_object_get(j, "spec"), "activeDeadlineSeconds") != NULL && deadline <= 0) {
    invalid(e, name, "spec.activeDeadlineSeconds", "Invalid value: must be greater than or equal to 1");
    goto fail;
  }
  if (sum_resources(containers, name, &cpu, &mem, &lcpu, &lmem, e) != 0)
    goto fail;
  /* The RuntimeClass admission plugin: the class must exist. */
  {
    const char *rc = json_string_value(json_path(j, "spec.runtimeClassName"));
    if (rc != NULL && store_get(s, K_RUNTIMECLASS, "", rc) == NULL) {
      sim_err_set(e, 403, "Forbidden", "pod rejected: RuntimeClass \"%s\" not found", rc);
      goto fail;
    }
  }
  if (quota_check(s, ns, name, cpu, mem, lcpu, lmem, e) != 0)
    goto fail;
  default_pod(j, cpu, mem, lcpu, lmem);
  default_tolerations(json_obj(j, "spec"));
  gpus = gpus_of(s, containers);
  p = calloc(1, sizeof(*p));
  if (p == NULL) {
    sim_err_set(e, 503, "ServiceUnavailable", "out of memory");
    goto fail;
  }
  if (pod_claims_init(p, j, name, e) != 0) {
    free(p);
    goto fail;
  }
  owner = controller_uid(j);
  snprintf(p->owner_uid, sizeof(p->owner_uid), "%s", owner ? owner : "");
  node_name = json_string_value(json_path(j, "spec.nodeName"));
  o = store_commit(s, K_POD, NULL, j, EV_ADDED);
  if (o == NULL) {
    pod_claims_free(p);
    free(p);
    sim_err_set(e, 503, "ServiceUnavailable", "out of memory");
    return -1;
  }
  p->obj = o;
  p->sim = s;
  p->req_cpu_m = cpu;
  p->req_mem_m = mem;
  p->lim_cpu_m = lcpu;
  p->lim_mem_m = lmem;
  p->req_gpu = gpus;
  p->deadline_s = deadline;
  p->unsched_idx = -1;
  p->noexec_idx = -1;
  p->stage = PS_PENDING;
  uv_timer_init(s->loop, &p->timer);
  p->timer.data = p;
  o->u.pod = p;
  ns_usage_add(s, ns, p, 1);
  p->counted = 1;
  pod_ephemeral_create(s, o);
  (void)node_name;
  {
    /* spec.nodeName set by the client bypasses the scheduler. */
    json_t *cur = obj_json(o);
    const char *nn = json_string_value(json_path(cur, "spec.nodeName"));
    struct sim_obj *node = nn ? store_get(s, K_NODE, "", nn) : NULL;
    if (node != NULL)
      bind_pod(s, o, node, cur);
    else {
      json_decref(cur);
      pod_timer_start(p, on_schedule_due, (uint64_t)s->opts.schedule_ms);
    }
  }
  rs_pod_event(s, o);
  *out = o;
  return 0;
fail:
  json_decref(j);
  return -1;
}

/* ---------------------------------------------------------------------- */
/* exec                                                                    */

struct argv_ctx {
  char **argv;
  size_t n;
  int oom;
};

static int collect_command(const char *key, const char *value, void *arg) {
  struct argv_ctx *a = arg;
  char **nv;

  if (strcmp(key, "command") != 0)
    return 0;
  nv = realloc(a->argv, (a->n + 2) * sizeof(*nv));
  if (nv == NULL) {
    a->oom = 1;
    return 1;
  }
  a->argv = nv;
  a->argv[a->n] = strdup(value);
  if (a->argv[a->n] == NULL) {
    a->oom = 1;
    return 1;
  }
  a->n++;
  a->argv[a->n] = NULL;
  return 0;
}

static int mkdir_p(const char *path) {
  char tmp[4096];
  size_t i, len = strlen(path);

  if (len >= sizeof(tmp))
    return -ENAMETOOLONG;
  memcpy(tmp, path, len + 1);
  for (i = 1; i < len; i++) {
    if (tmp[i] == '/') {
      tmp[i] = '\0';
      if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return -errno;
      tmp[i] = '/';
    }
  }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
    return -errno;
  return 0;
}

void pod_exec(struct sim *s, struct fr_http_req *req, struct sim_obj *o) {
  struct sim_pod *p = pod_of(o);
  struct argv_ctx a = {NULL, 0, 0};
  struct sim_exec_params params;
  char container[256], msg[512];
  json_t *j = NULL, *c = NULL, *cs;
  const char *proto;
  char **env = NULL, **wrap = NULL;
  size_t i;
  int rc;

  if (p == NULL || p->stage == PS_TERMINATING) {
    api_status(req, 400, "BadRequest", "pod is being deleted", "pods", o->name, NULL);
    return;
  }
  if (p->node == NULL && p->stage != PS_TERMINAL) {
    snprintf(msg, sizeof(msg), "pod %s does not have a host assigned", o->name);
    api_status(req, 400, "BadRequest", msg, "pods", o->name, NULL);
    return;
  }
  if (node_kubelet_lost(s, o->cur->fields[F_NODE_NAME])) {
    /* The API server dials the node's kubelet, which is out of reach. */
    json_t *pj = obj_json(o);
    const char *hip = json_string_value(json_path(pj, "status.hostIP"));
    snprintf(msg, sizeof(msg), "error dialing backend: dial tcp %s:10250: connect: no route to host", hip ? hip : "");
    json_decref(pj);
    api_status(req, 500, "InternalError", msg, NULL, NULL, NULL);
    return;
  }
  if (p->stage != PS_RUNNING) {
    snprintf(msg, sizeof(msg), "unable to upgrade connection: container not found (\"%s\")", o->name);
    api_status(req, 400, "BadRequest", msg, "pods", o->name, NULL);
    return;
  }
  j = obj_json(o);
  cs = json_path(j, "spec.containers");
  if (fr_http_query_get(req->query, "container", container, sizeof(container)) > 0) {
    json_array_foreach(cs, i, c) {
      if (strcmp(json_get_str(c, "name"), container) == 0)
        break;
    }
    if (i == json_array_size(cs)) {
      snprintf(msg, sizeof(msg), "container %s is not valid for pod %s", container, o->name);
      api_status(req, 400, "BadRequest", msg, "pods", o->name, NULL);
      goto out;
    }
  } else {
    c = json_array_get(cs, 0);
  }
  fr_http_query_each(req->query, collect_command, &a);
  if (a.oom || a.n == 0) {
    api_status(req, 400, "BadRequest", "you must specify at least one command for the container",
               "pods", o->name, NULL);
    goto out;
  }
  if (!req->websocket) {
    api_status(req, 400, "BadRequest", "Upgrade request required", "pods", o->name, NULL);
    goto out;
  }
  proto = sim_exec_protocol(fr_http_req_header(req, "Sec-WebSocket-Protocol"));
  if (proto == NULL) {
    api_status(req, 400, "BadRequest", "unable to upgrade connection: requested protocols are "
               "not supported (kubesim speaks v5.channel.k8s.io, v4.channel.k8s.io, "
               "v4.base64.channel.k8s.io, channel.k8s.io and base64.channel.k8s.io)",
               "pods", o->name, NULL);
    goto out;
  }
  if (pod_workdir(s, o) != 0) {
    api_status(req, 500, "InternalError", "cannot create the pod's working directory", "pods",
               o->name, NULL);
    goto out;
  }
  env = pod_env(o, c);
  if (env == NULL)
    goto oom;
  memset(&params, 0, sizeof(params));
  params.argv = a.argv;
  params.env = env;
  params.cwd = p->workdir;
  params.in = sim_query_bool(req->query, "stdin");
  params.out = sim_query_bool(req->query, "stdout");
  params.tty = sim_query_bool(req->query, "tty");
  /* With a tty the kubelet bypasses stderr (the terminal is stdout). */
  params.err = sim_query_bool(req->query, "stderr") && !params.tty;
  params.fast_path = s->opts.fast_exec;
  params.protocol = proto;
  /* A command that forks runs inside the pod's namespaces and root (when
   * kubesim has them), so it sees the pod's files and dies with it. */
  if (!(params.fast_path && sim_exec_is_fast(a.argv))) {
    rc = agent_exec_wrap(s, o, c, &wrap);
    if (rc != 0) {
      snprintf(msg, sizeof(msg), "error executing command in container: the pod's namespaces "
               "are not available: %s", strerror(-rc));
      api_status(req, 500, "InternalError", msg, "pods", o->name, NULL);
      goto out;
    }
    params.wrap = wrap;
  }
  rc = sim_exec_start(s->loop, req, &params, &p->execs);
  if (rc != 0) {
    snprintf(msg, sizeof(msg), "exec failed: %s", uv_strerror(rc));
    api_status(req, 500, "InternalError", msg, "pods", o->name, NULL);
  } else {
    s->execs_started++;
  }
  goto out;
oom:
  api_status(req, 503, "ServiceUnavailable", "out of memory", NULL, NULL, NULL);
out:
  for (i = 0; i < a.n; i++)
    free(a.argv[i]);
  free(a.argv);
  free(wrap);
  pod_env_free(env);
  json_decref(j);
}

int pod_workdir(struct sim *s, struct sim_obj *o) {
  struct sim_pod *p = pod_of(o);
  char path[4096];
  int rc;

  if (p == NULL)
    return -ENOENT;
  if (p->workdir != NULL)
    return 0;
  snprintf(path, sizeof(path), "%s/%s_%s_%.8s", s->opts.workdir, o->ns, o->name, o->uid);
  rc = mkdir_p(path);
  if (rc == 0 && (p->workdir = strdup(path)) == NULL)
    rc = -ENOMEM;
  return rc;
}

char **pod_env(struct sim_obj *o, json_t *c) {
  struct sim_pod *p = pod_of(o);
  json_t *e;
  size_t n = json_array_size(json_object_get(c, "env")), nenv = 0, i;
  char **env = calloc(n + 5, sizeof(*env));
  struct fr_buf b;

  if (env == NULL)
    return NULL;
  fr_buf_init(&b);
  /* The container's env values, then what a container runtime always
   * provides, then the mark kubesim finds the pod's processes by when it
   * has no namespaces to kill them with (agent.c). */
  json_array_foreach(json_object_get(c, "env"), i, e) {
    const char *k = json_get_str(e, "name"), *v = json_get_str(e, "value");
    if (k == NULL)
      continue;
    fr_buf_reset(&b);
    if (fr_buf_printf(&b, "%s=%s", k, v ? v : "") != 0 || (env[nenv++] = strdup(b.data)) == NULL)
      goto oom;
  }
  fr_buf_reset(&b);
  if (fr_buf_printf(&b, "HOSTNAME=%s", o->name) != 0 || (env[nenv++] = strdup(b.data)) == NULL)
    goto oom;
  /* An isolated pod's HOME is its user's in the pod's /etc/passwd, set
   * inside (podinit.c); otherwise the pod's directory on this host. */
  fr_buf_reset(&b);
  if (!(p && p->sim && p->sim->opts.pod_namespaces) &&
      (fr_buf_printf(&b, "HOME=%s", p && p->workdir ? p->workdir : "/") != 0 ||
       (env[nenv++] = strdup(b.data)) == NULL))
    goto oom;
  if ((env[nenv++] = strdup("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")) == NULL)
    goto oom;
  fr_buf_reset(&b);
  if (fr_buf_printf(&b, AGENT_POD_MARK "=%s", o->uid) != 0 || (env[nenv++] = strdup(b.data)) == NULL)
    goto oom;
  fr_buf_free(&b);
  return env;
oom:
  fr_buf_free(&b);
  pod_env_free(env);
  return NULL;
}

void pod_env_free(char **env) {
  size_t i;

  for (i = 0; env != NULL && env[i] != NULL; i++)
    free(env[i]);
  free(env);
}
