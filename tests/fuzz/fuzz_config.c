/* fuzz_config.c - the router config loader (config/src/config.c,
 * fr_config_load) on arbitrary file contents.
 *
 * The input is written to fedrouter.conf in a scratch directory and loaded.
 * A load that fails must say why (a message, and the file it names); one
 * that succeeds must hold what the loader promises (listen host, region, at
 * least one cluster with name, region and kubeconfig) and is then looked
 * up by token and by cluster name and released.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fr/config.h"
#include "fuzz_util.h"

static void check(int cond) {
  if (!cond)
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_write_file("fedrouter.conf", data, size);
  struct fr_config *cfg = NULL;
  struct fr_config_error err;
  size_t i;

  memset(&err, 0, sizeof(err));
  if (fr_config_load(path, &cfg, &err) != 0) {
    check(err.msg[0] != '\0');
    check(memchr(err.msg, '\0', sizeof(err.msg)) != NULL);
    check(memchr(err.file, '\0', sizeof(err.file)) != NULL);
    return 0;
  }
  check(cfg != NULL && cfg->listen_host != NULL && cfg->region != NULL);
  check(cfg->nclusters >= 1);
  for (i = 0; i < cfg->nclusters; i++) {
    check(cfg->clusters[i].name != NULL && cfg->clusters[i].region != NULL &&
          cfg->clusters[i].kubeconfig != NULL);
    check(fr_config_cluster_by_name(cfg, cfg->clusters[i].name) != NULL);
  }
  for (i = 0; i < cfg->ntenants; i++)
    check(cfg->tenants[i].name != NULL);
  (void)fr_config_tenant_by_token(cfg, "rl-team-token", NULL);
  (void)fr_config_tenant_by_token(cfg, "", NULL);
  fr_config_ref(cfg);
  fr_config_unref(cfg);
  fr_config_unref(cfg);
  return 0;
}
