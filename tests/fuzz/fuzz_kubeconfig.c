/* fuzz_kubeconfig.c - the kubeconfig loader (cluster_adapter/src/
 * kubeconfig.c, fr_kubeconfig_load: YAML through libyaml) on arbitrary file
 * contents.
 *
 * The input is written to kubeconfig in a scratch directory, next to a
 * token file, a CA file and a client certificate and key that it may name
 * by relative path (ca.crt, token, client.crt, client.key), and loaded for
 * the current context and for the context named "us-east". A failure must
 * say why; a success must have a server and be copyable
 * (fr_kube_creds_dup) and freed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fr/kubeconfig.h"
#include "fuzz_util.h"

static void check(int cond) {
  if (!cond)
    abort();
}

static void load(const char *path, const char *context) {
  struct fr_kube_creds *c = NULL, *d;
  char err[768];

  err[0] = '\0';
  if (fr_kubeconfig_load(path, context, &c, err, sizeof(err)) != 0) {
    check(err[0] != '\0');
    return;
  }
  check(c != NULL && c->server != NULL);
  d = fr_kube_creds_dup(c);
  if (d != NULL) {
    check(strcmp(d->server, c->server) == 0);
    check((d->token == NULL) == (c->token == NULL));
  }
  fr_kube_creds_free(d);
  fr_kube_creds_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int files_made;
  const char *path;

  if (!files_made) {
    static const char pem[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    static const char key[] = "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n";
    fuzz_write_file("ca.crt", (const uint8_t *)pem, sizeof(pem) - 1);
    fuzz_write_file("client.crt", (const uint8_t *)pem, sizeof(pem) - 1);
    fuzz_write_file("client.key", (const uint8_t *)key, sizeof(key) - 1);
    fuzz_write_file("token", (const uint8_t *)"file-token\n", 11);
    files_made = 1;
  }
  path = fuzz_write_file("kubeconfig", data, size);
  load(path, NULL);
  load(path, "us-east");
  return 0;
}
