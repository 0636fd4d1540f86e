/* fuzz_kubesim_proto.c - kubesim's protobuf create bodies
 * (loadtest/kubesim/proto.c): the envelope kubectl create secret generic,
 * create configmap, create namespace, create deployment (and the other
 * create subcommands proto.c's field tables cover) send, and client-go's
 * policy/v1 Eviction (pods/eviction).
 *
 * Input: the request body as received. Properties checked beyond "no
 * crash": a decode either gives a JSON object whose kind is one of those
 * it knows, with a metadata object, or leaves a message and no object.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const kinds[] = {"Secret", "ConfigMap", "Namespace", "Eviction", "Deployment",
                                    "Service", "ServiceAccount", "ResourceQuota", "Role", "ClusterRole",
                                    "RoleBinding", "ClusterRoleBinding", "PodDisruptionBudget"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[512];
  json_t *j;
  const char *kind;
  size_t i;

  err[0] = '\0';
  j = proto_decode(data, size, err, sizeof(err));
  if (j == NULL) {
    if (err[0] == '\0')
      abort();
    return 0;
  }
  kind = json_string_value(json_object_get(j, "kind"));
  if (kind == NULL || !json_is_object(json_object_get(j, "metadata")))
    abort();
  for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]) && strcmp(kind, kinds[i]) != 0; i++)
    ;
  if (i == sizeof(kinds) / sizeof(kinds[0]))
    abort();
  json_decref(j);
  return 0;
}
