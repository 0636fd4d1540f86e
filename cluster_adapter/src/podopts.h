/* podopts.h - pod options inside the adapter: what they add to a pod spec,
 * and their fields for the fit checks (cluster.c). */
#ifndef FR_PODOPTS_H
#define FR_PODOPTS_H

#include <jansson.h>

struct fr_podopts;

/* Where the agent's init container puts the binary; no volume may mount
 * there. */
#define PODOPTS_AGENT_DIR "/fr-agent"

/* Adds <o> (may be NULL: nothing) to pod spec <spec>, whose first
 * container already has its resources: runtimeClassName, nodeSelector,
 * tolerations, <gpu_resource> requests and limits, and each volume as a
 * persistentVolumeClaim volume with its mount, after the volumes already
 * there. 0 or -ENOMEM. */
int podopts_apply(const struct fr_podopts *o, const char *gpu_resource, json_t *spec);
/* GPUs of the extended resource <res> (NULL = "nvidia.com/gpu") the
 * containers of array <containers> request (their limits where requests
 * leave it out, as the API server defaults them), summed. */
int64_t pod_gpus(json_t *containers, const char *res);
/* 1 if pods with <o> (may be NULL) may go on node <node> (a Node object,
 * borrowed) at all: its labels match the node selector and the
 * tolerations tolerate its NoSchedule and NoExecute taints
 * (PreferNoSchedule only steers). Readiness and room are the caller's. */
int podopts_node_admits(const struct fr_podopts *o, json_t *node);
/* Its runtime_class, or NULL. */
const char *podopts_runtime_class(const struct fr_podopts *o);
/* Canonical field <name> ("node_selector", "tolerations", "volumes"), or
 * NULL; borrowed. */
json_t *podopts_field(const struct fr_podopts *o, const char *name);

#endif
