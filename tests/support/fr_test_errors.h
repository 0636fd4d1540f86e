/* fr_test_errors.h - records what a config or policy check reports
 * (fr_config_check, fr_policy_check), for the suites to assert on. Needs
 * check.h included first. */
#ifndef FR_TEST_ERRORS_H
#define FR_TEST_ERRORS_H

#include <stdio.h>

struct fr_test_heard {
  int n;
  int lines[16];
  char files[16][512];
  char msgs[16][512];
};

/* The check's error callback: appends to the fr_test_heard at <arg>. */
static void fr_test_hear(void *arg, const char *file, int line, const char *msg) {
  struct fr_test_heard *h = arg;

  ck_assert_int_lt(h->n, 16);
  snprintf(h->files[h->n], sizeof(h->files[0]), "%s", file);
  h->lines[h->n] = line;
  snprintf(h->msgs[h->n++], sizeof(h->msgs[0]), "%s", msg);
}

#endif
