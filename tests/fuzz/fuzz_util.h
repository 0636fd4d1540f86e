/* fuzz_util.h - what the file-loader harnesses share: the input written to
 * a file, since the loaders under test (fr_config_load, fr_policy_load,
 * fr_kubeconfig_load) take a path.
 *
 * One private directory per process (mkdtemp), removed at exit; the file is
 * rewritten for every input. Header-only, for tests/fuzz only.
 */
#ifndef FR_FUZZ_UTIL_H
#define FR_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir[64];

static void fuzz_dir_remove(void) {
  char cmd[128];

  /* The loaders may have been pointed at other names in the directory
   * (kubeconfig file references resolve against it), so remove it whole. */
  if (fuzz_dir[0] != '\0') {
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fuzz_dir);
    if (system(cmd) != 0)
      fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir);
  }
}

/* The process's scratch directory, made on first use; aborts if it cannot
 * be made (a harness without it would test nothing). */
static const char *fuzz_scratch_dir(void) {
  if (fuzz_dir[0] == '\0') {
    const char *tmp = getenv("TMPDIR");
    snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/frfuzz.XXXXXX", tmp != NULL && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(fuzz_dir) == NULL) {
      perror("fuzz: mkdtemp");
      abort();
    }
    atexit(fuzz_dir_remove);
  }
  return fuzz_dir;
}

/* Writes <len> bytes of <data> to <name> in the scratch directory and
 * returns its path (a static buffer, valid until the next call). */
static const char *fuzz_write_file(const char *name, const uint8_t *data, size_t len) {
  static char path[256];
  FILE *f;

  snprintf(path, sizeof(path), "%s/%s", fuzz_scratch_dir(), name);
  f = fopen(path, "wb");
  if (f == NULL || (len > 0 && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
    perror("fuzz: writing the input file");
    abort();
  }
  return path;
}

#endif
