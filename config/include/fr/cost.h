/* fr/cost.h - what sandboxes cost per hour: on a cluster, priced by its
 * config's `cost` group, and at a hosted vendor, priced by the `hosted`
 * group (docs/metrics.md, "Cost model").
 *
 * Pure arithmetic: no I/O, no allocation, no state; every function may be
 * called from any thread and from inside callbacks. Pointer arguments are
 * borrowed for the duration of the call only. Amounts are US dollars per
 * hour; a sandbox is described by what it requests: cpu in millicores
 * (Kubernetes "2" = 2000) and memory in bytes (4 GiB = 4294967296).
 * Negative requests count as 0.
 */
#ifndef FR_COST_H
#define FR_COST_H

#include <stdint.h>

#include "fr/config.h"

/* Dollars per hour that one sandbox requesting <cpu_m> millicores and
 * <mem_b> bytes costs on a cluster priced by <c> (borrowed; NULL = no
 * price):
 *   - node model (sandboxes_per_node or node_hour set): node_hour /
 *     sandboxes_per_node, whatever the sandbox's shape (a sandboxes_per_node
 *     below 1, which the config loader never produces, counts as 1);
 *   - otherwise per resource: cores * per_core_hour + GiB * per_gib_hour,
 *     with cores = <cpu_m> / 1000 and GiB = <mem_b> / 2^30 (GPUs are priced
 *     by fr_cost_gpu_hour on top).
 * Returns 0 when no cost is configured (see fr_cost_known). */
double fr_cost_sandbox_hour(const struct fr_config_cost *c, int64_t cpu_m, int64_t mem_b);

/* Dollars per hour of <gpus> GPUs on a cluster priced by <c> per resource
 * (per_gpu_hour; 0 in the node model, whose node price covers them). */
double fr_cost_gpu_hour(const struct fr_config_cost *c, int64_t gpus);

/* The same for <n> sandboxes whose requests sum to <cpu_m> and <mem_b>:
 * both models are linear, so the router keeps three running sums per
 * cluster instead of pricing every sandbox on every scrape. */
double fr_cost_fleet_hour(const struct fr_config_cost *c, int64_t n, int64_t cpu_m, int64_t mem_b);

/* Dollars per hour a hosted vendor priced by <h> (borrowed; NULL = 0)
 * would charge for one sandbox of <cpu_m> millicores and <mem_b> bytes:
 * cores * per_core_second * 3600 + GiB * per_gib_second * 3600. With the
 * default (Modal) rates a 2-core / 4 GiB sandbox is $0.380592 per hour. */
double fr_cost_hosted_hour(const struct fr_config_hosted *h, int64_t cpu_m, int64_t mem_b);

/* Dollars that usage of <sandbox_s> sandbox-seconds, <core_s> core-seconds,
 * <gib_s> GiB-seconds and <gpu_s> GPU-seconds costs on a cluster priced by
 * <c> (NULL = 0): node model: sandbox_s * node_hour / sandboxes_per_node /
 * 3600; per resource: (core_s * per_core_hour + gib_s * per_gib_hour +
 * gpu_s * per_gpu_hour) / 3600. Both models are linear, so the router
 * integrates the four quantities and prices them when asked. */
double fr_cost_usage_dollars(const struct fr_config_cost *c, double sandbox_s, double core_s, double gib_s,
                             double gpu_s);

/* 1 when <c> (borrowed; NULL = 0) prices sandboxes, else 0: the node model
 * is configured (sandboxes_per_node >= 1 or node_hour > 0, so free nodes,
 * node_hour = 0, are a known price of 0), or per_core_hour or per_gib_hour
 * is above 0. The snapshot does not record whether keys were present, so a
 * per-resource price of 0 for both reads as unknown. Callers show "unknown"
 * rather than $0 and leave such clusters out of savings. */
int fr_cost_known(const struct fr_config_cost *c);

#endif
