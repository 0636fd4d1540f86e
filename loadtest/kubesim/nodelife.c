/* nodelife.c - the node lifecycle controller (pkg/controller/nodelifecycle)
 * over simulated kubelets that an admin request can stop.
 *
 * Each node has a kubelet that posts Ready (the default), posts NotReady,
 * or is lost (POST /_sim/nodes/NAME, admin.c). What a real cluster then
 * does, this does:
 *
 *   kubelet lost    nothing for --node-monitor-grace-ms (the controller
 *                   has not noticed yet), then every node condition goes
 *                   Unknown (NodeStatusUnknown, "Kubelet stopped posting
 *                   node status."), the node gets the taints
 *                   node.kubernetes.io/unreachable NoSchedule and NoExecute
 *                   (timeAdded), and its pods Ready=False
 *   NotReady        at once: Ready False (KubeletNotReady), the taints
 *                   node.kubernetes.io/not-ready, pods Ready=False
 *   Ready again     conditions as the kubelet posts them, those taints
 *                   gone, pods Ready as their containers are
 *
 * The rest follows from the taints: the scheduler places no new pod there
 * (NoSchedule), and the taint manager (pods.c) evicts the pods after their
 * tolerationSeconds (the 300 s DefaultTolerationSeconds adds to every pod,
 * unless it says otherwise). While the kubelet is lost nothing on the node
 * progresses: a pod bound there does not start, and a deleted pod stays
 * Terminating until the kubelet is back to confirm it (pods.c).
 *
 * The grace period runs on one timer, from the loop; kubelet changes from
 * a request take effect in that call (the request is the kubelet posting).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/log.h"
#include "fr/util.h"
#include "sim.h"

#define TAINT_UNREACHABLE "node.kubernetes.io/unreachable"
#define TAINT_NOT_READY "node.kubernetes.io/not-ready"

static const char *const kubelet_names[] = {
    [KUBELET_READY] = "ready",
    [KUBELET_NOT_READY] = "not-ready",
    [KUBELET_LOST] = "lost",
};

const char *node_kubelet_name(enum node_kubelet k) {
  return kubelet_names[k];
}

int node_kubelet_parse(const char *name, enum node_kubelet *k) {
  size_t i;

  for (i = 0; name != NULL && i < FR_ARRAY_SIZE(kubelet_names); i++) {
    if (strcmp(name, kubelet_names[i]) == 0) {
      *k = (enum node_kubelet)i;
      return 0;
    }
  }
  return -EINVAL;
}

int node_kubelet_lost(struct sim *s, const char *name) {
  struct sim_obj *o = name != NULL ? store_get(s, K_NODE, "", name) : NULL;

  return o != NULL && o->u.node != NULL && o->u.node->kubelet == KUBELET_LOST;
}

/* Sets condition <c> (a node condition object, edited) to <status>; the
 * transition time moves only when the status does. <heartbeat>: the
 * kubelet posted it (lastHeartbeatTime now). */
static void set_cond(json_t *c, const char *status, const char *reason, const char *message, int heartbeat,
                     const char *now) {
  const char *old = json_get_str(c, "status");

  if (old == NULL || strcmp(old, status) != 0)
    json_object_set_new(c, "lastTransitionTime", json_string(now));
  if (heartbeat)
    json_object_set_new(c, "lastHeartbeatTime", json_string(now));
  json_object_set_new(c, "status", json_string(status));
  json_object_set_new(c, "reason", json_string(reason));
  json_object_set_new(c, "message", json_string(message));
}

/* The conditions of node <j> for Ready state <ready> ('T', 'F', 'U'). */
static void set_conditions(json_t *j, char ready, const char *now) {
  json_t *c;
  size_t i;

  json_array_foreach(json_path(j, "status.conditions"), i, c) {
    const char *type = json_get_str(c, "type");
    if (type == NULL)
      continue;
    if (ready == 'U') {
      /* The controller speaks for the silent kubelet: every condition. */
      set_cond(c, "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.", 0, now);
    } else if (strcmp(type, "Ready") == 0) {
      if (ready == 'T')
        set_cond(c, "True", "KubeletReady", "kubelet is posting ready status", 1, now);
      else
        set_cond(c, "False", "KubeletNotReady",
                 "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
                 "message:Network plugin returns error: cni plugin not initialized", 1, now);
    } else if (strcmp(type, "MemoryPressure") == 0) {
      set_cond(c, "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available", 1, now);
    } else if (strcmp(type, "DiskPressure") == 0) {
      set_cond(c, "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure", 1, now);
    }
  }
}

/* The controller's taints of node <j> for Ready state <ready>: the
 * unreachable or not-ready pair, or none; other taints stay as they are. */
static void set_taints(json_t *j, char ready, const char *now) {
  json_t *spec = json_obj(j, "spec"), *old = json_object_get(spec, "taints"), *nt = json_array(), *t;
  const char *key = ready == 'U' ? TAINT_UNREACHABLE : ready == 'F' ? TAINT_NOT_READY : NULL;
  size_t i;

  json_array_foreach(old, i, t) {
    const char *k = json_get_str(t, "key");
    if (k != NULL && (strcmp(k, TAINT_UNREACHABLE) == 0 || strcmp(k, TAINT_NOT_READY) == 0))
      continue;
    json_array_append(nt, t);
  }
  if (key != NULL) {
    json_array_append_new(nt, json_pack("{s:s,s:s}", "key", key, "effect", "NoSchedule"));
    json_array_append_new(nt, json_pack("{s:s,s:s,s:s}", "key", key, "effect", "NoExecute", "timeAdded", now));
  }
  if (json_array_size(nt) > 0)
    json_object_set_new(spec, "taints", nt);
  else {
    json_object_del(spec, "taints");
    json_decref(nt);
  }
}

/* Brings node <o> to Ready state <ready> and its pods along. */
static int node_apply(struct sim *s, struct sim_obj *o, char ready) {
  struct sim_node *nd = o->u.node;
  struct sim_obj *p, *nx;
  char now[21];
  json_t *j;

  if (nd->ready != ready) {
    if ((j = obj_json(o)) == NULL)
      return -ENOMEM;
    now_rfc3339(now);
    set_conditions(j, ready, now);
    set_taints(j, ready, now);
    FR_WARN("nodes", "%s: Ready %s%s", o->name, ready == 'T' ? "True" : ready == 'F' ? "False" : "Unknown",
            ready == 'U' ? " (kubelet stopped posting node status)" : "");
    if ((o = store_commit(s, K_NODE, o, j, EV_MODIFIED)) == NULL)
      return -ENOMEM;
    nd->ready = ready;
    node_changed(s, o);
  }
  /* The pods on it: a scan of all pods, node changes being rare. */
  for (p = store_first(s, K_POD, NULL); p != NULL; p = nx) {
    nx = store_next(s, p);
    if (p->cur->fields[F_NODE_NAME] == NULL || strcmp(p->cur->fields[F_NODE_NAME], o->name) != 0)
      continue;
    if (nd->kubelet != KUBELET_LOST)
      pod_kubelet_back(s, p);
    pod_node_ready(s, p, ready == 'T');
  }
  return 0;
}

static void on_node_timer(uv_timer_t *t);

/* Marks Unknown the lost nodes whose grace period is over; re-arms for the
 * next one. */
static void node_monitor(struct sim *s) {
  uint64_t now = uv_now(s->loop), next = UINT64_MAX, grace = (uint64_t)s->opts.node_grace_ms;
  struct sim_obj *o;

  for (o = store_first(s, K_NODE, NULL); o != NULL; o = store_next(s, o)) {
    struct sim_node *nd = o->u.node;
    if (nd == NULL || nd->kubelet != KUBELET_LOST || nd->ready == 'U')
      continue;
    if (nd->lost_ms + grace <= now) {
      if (node_apply(s, o, 'U') != 0)
        FR_WARN("nodes", "%s: out of memory marking the node Unknown", o->name);
    } else if (nd->lost_ms + grace < next) {
      next = nd->lost_ms + grace;
    }
  }
  if (next == UINT64_MAX || s->stopping)
    uv_timer_stop(&s->node_timer);
  else
    uv_timer_start(&s->node_timer, on_node_timer, next - now, 0);
}

static void on_node_timer(uv_timer_t *t) {
  node_monitor(t->data);
}

int node_set_kubelet(struct sim *s, struct sim_obj *o, enum node_kubelet k) {
  struct sim_node *nd = o->u.node;
  enum node_kubelet was = nd->kubelet;

  nd->kubelet = k;
  if (k == KUBELET_LOST) {
    if (was != KUBELET_LOST) {
      FR_WARN("nodes", "%s: kubelet stopped posting node status (fault injected)", o->name);
      nd->lost_ms = uv_now(s->loop);
      /* The controller notices from its own timer, never inside this call. */
      if (!s->stopping)
        uv_timer_start(&s->node_timer, on_node_timer, 0, 0);
    }
    return 0;
  }
  return node_apply(s, o, k == KUBELET_READY ? 'T' : 'F');
}

void nodelife_init(struct sim *s) {
  uv_timer_init(s->loop, &s->node_timer);
  s->node_timer.data = s;
}

void nodelife_close(struct sim *s) {
  uv_close((uv_handle_t *)&s->node_timer, NULL);
}
