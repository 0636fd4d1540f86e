/* cost.c - sandbox cost per hour on a cluster and at a hosted vendor (see
 * fr/cost.h and docs/metrics.md). */
#include "fr/cost.h"

#define MILLICORES_PER_CORE 1000.0
#define BYTES_PER_GIB 1073741824.0 /* 2^30: Kubernetes "Gi" */
#define SECONDS_PER_HOUR 3600.0

static double cores(int64_t cpu_m) {
  return cpu_m > 0 ? (double)cpu_m / MILLICORES_PER_CORE : 0.0;
}

static double gib(int64_t mem_b) {
  return mem_b > 0 ? (double)mem_b / BYTES_PER_GIB : 0.0;
}

static int node_model(const struct fr_config_cost *c) {
  return c->sandboxes_per_node > 0 || c->node_hour > 0;
}

double fr_cost_sandbox_hour(const struct fr_config_cost *c, int64_t cpu_m, int64_t mem_b) {
  if (c == NULL)
    return 0.0;
  if (node_model(c))
    return c->node_hour / (double)(c->sandboxes_per_node > 1 ? c->sandboxes_per_node : 1);
  return cores(cpu_m) * c->per_core_hour + gib(mem_b) * c->per_gib_hour;
}

double fr_cost_fleet_hour(const struct fr_config_cost *c, int64_t n, int64_t cpu_m, int64_t mem_b) {
  if (c == NULL || n <= 0)
    return 0.0;
  if (node_model(c))
    return (double)n * fr_cost_sandbox_hour(c, 0, 0);
  return fr_cost_sandbox_hour(c, cpu_m, mem_b);
}

double fr_cost_hosted_hour(const struct fr_config_hosted *h, int64_t cpu_m, int64_t mem_b) {
  if (h == NULL)
    return 0.0;
  return (cores(cpu_m) * h->per_core_second + gib(mem_b) * h->per_gib_second) *
         SECONDS_PER_HOUR;
}

double fr_cost_gpu_hour(const struct fr_config_cost *c, int64_t gpus) {
  if (c == NULL || node_model(c) || gpus <= 0)
    return 0.0;
  return (double)gpus * c->per_gpu_hour;
}

double fr_cost_usage_dollars(const struct fr_config_cost *c, double sandbox_s, double core_s, double gib_s,
                             double gpu_s) {
  if (c == NULL)
    return 0.0;
  if (node_model(c))
    return sandbox_s * fr_cost_sandbox_hour(c, 0, 0) / SECONDS_PER_HOUR;
  return (core_s * c->per_core_hour + gib_s * c->per_gib_hour + gpu_s * c->per_gpu_hour) / SECONDS_PER_HOUR;
}

int fr_cost_known(const struct fr_config_cost *c) {
  if (c == NULL)
    return 0;
  return node_model(c) || c->per_core_hour > 0 || c->per_gib_hour > 0 || c->per_gpu_hour > 0;
}
