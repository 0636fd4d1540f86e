/* assert.c - the failure path of FR_ASSERT (fr/assert.h). */
#include <stdio.h>
#include <stdlib.h>

#include "fr/assert.h"

void fr_assert_fail(const char *cond, const char *file, int line, const char *func) {
  fprintf(stderr, "%s:%d: %s: assertion failed: %s\n", file, line, func, cond);
  fflush(stderr);
  abort();
}
