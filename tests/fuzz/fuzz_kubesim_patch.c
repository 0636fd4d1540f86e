/* fuzz_kubesim_patch.c - kubesim's PATCH bodies (loadtest/kubesim/patch.c):
 * strategic merge patch with its merge keys and directives, JSON merge
 * patch and JSON patch, applied to a pod, a Deployment and a Service.
 *
 * Input: one byte choosing the format and the kind (its value modulo 9:
 * strategic, merge or JSON patch, times pod, Deployment, Service), then the
 * patch body as a client sends it. Properties checked beyond "no crash": a
 * strategic merge patch either gives an object with no directive ("$" key)
 * left anywhere in it, or is refused with the API server's 400, 422 or 500
 * and a message; a JSON patch either applies or says why.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "patch.h"
#include "sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The objects patched (one literal each: parentheses keep clang from
 * suspecting a missing comma). */
static const char *const targets[] = {
    ("{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"labels\":{\"a\":\"1\"},"
     "\"finalizers\":[\"f1\",\"f2\"],\"ownerReferences\":[{\"uid\":\"u1\",\"name\":\"rs\"}]},"
     "\"spec\":{\"containers\":[{\"name\":\"main\",\"image\":\"i\",\"env\":[{\"name\":\"A\",\"value\":\"1\"}],"
     "\"ports\":[{\"containerPort\":80}]},{\"name\":\"side\",\"image\":\"s\"}],\"volumes\":[{\"name\":\"v\"}],"
     "\"tolerations\":[{\"key\":\"t\"}]},\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"},"
     "{\"type\":\"PodScheduled\",\"status\":\"True\"}],\"podIPs\":[{\"ip\":\"10.0.0.1\"}]}}"),
    ("{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"metadata\":{\"name\":\"d\"},\"spec\":{\"replicas\":2,"
     "\"template\":{\"metadata\":{\"labels\":{\"app\":\"d\"}},\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"1\"}]}}},"
     "\"status\":{\"conditions\":[{\"type\":\"Available\"}]}}"),
    ("{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"s\"},\"spec\":{\"ports\":[{\"port\":80},"
     "{\"port\":443}],\"selector\":{\"a\":\"b\"}}}"),
};
static const enum sim_kind kinds[] = {K_POD, K_DEPLOYMENT, K_SERVICE};

static int has_directive(json_t *v) {
  const char *key;
  json_t *x;
  size_t i;

  if (json_is_object(v)) {
    json_object_foreach(v, key, x) {
      if (key[0] == '$' || has_directive(x))
        return 1;
    }
  } else if (json_is_array(v)) {
    json_array_foreach(v, i, x) {
      if (has_directive(x))
        return 1;
    }
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct smp_error e;
  json_t *doc, *patch, *out;
  unsigned which;
  char err[300];
  int rc;

  if (size < 1)
    return 0;
  which = data[0] % 9;
  patch = json_loadb((const char *)data + 1, size - 1, 0, NULL);
  if (patch == NULL)
    return 0;
  doc = json_loads(targets[which % 3], 0, NULL);
  if (doc == NULL)
    abort();
  switch (which / 3) {
  case 0:
    memset(&e, 0, sizeof(e));
    out = strategic_merge_patch(doc, patch, kinds[which % 3], &e);
    if (out == NULL) {
      if ((e.code != 400 && e.code != 422 && e.code != 500) || e.msg[0] == '\0')
        abort();
    } else if (!json_is_object(out) || has_directive(out)) {
      abort();
    }
    json_decref(out);
    break;
  case 1:
    json_decref(merge_patch(doc, patch));
    break;
  default:
    err[0] = '\0';
    rc = json_patch_apply(doc, patch, err, sizeof(err));
    if (rc != 0 && (rc != -EINVAL || err[0] == '\0'))
      abort();
    json_decref(doc);
    break;
  }
  json_decref(patch);
  return 0;
}
