/* log.c - leveled logging to stderr. */
#include "fr/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

/* Process-wide by design: set once before the loop starts. */
static enum fr_log_level min_level = FR_LOG_INFO;

void fr_log_set_level(enum fr_log_level level) {
  min_level = level;
}

int fr_log_parse_level(const char *s, enum fr_log_level *out) {
  static const char *const names[] = {"debug", "info", "warn", "error"};
  size_t i;

  for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    if (strcmp(s, names[i]) == 0) {
      *out = (enum fr_log_level)i;
      return 0;
    }
  }
  return -EINVAL;
}

int fr_log_enabled(enum fr_log_level level) {
  return level >= min_level;
}

void fr_log(enum fr_log_level level, const char *component, const char *fmt, ...) {
  static const char *const tags[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  char line[2048];
  struct timeval tv;
  struct tm tm;
  size_t n;
  va_list ap;
  int w;

  if (!fr_log_enabled(level))
    return;
  gettimeofday(&tv, NULL);
  gmtime_r(&tv.tv_sec, &tm);
  n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
  w = snprintf(line + n, sizeof(line) - n, ".%03ldZ %s %s: ", (long)tv.tv_usec / 1000,
               tags[level], component);
  if (w > 0 && (size_t)w < sizeof(line) - n)
    n += (size_t)w;
  va_start(ap, fmt);
  w = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
  va_end(ap);
  if (w < 0)
    w = 0;
  n = (size_t)w < sizeof(line) - n ? n + (size_t)w : sizeof(line) - 1;
  if (n >= sizeof(line) - 1)
    n = sizeof(line) - 2;
  line[n++] = '\n';
  /* One write per line keeps lines whole when several processes share stderr. */
  fwrite(line, 1, n, stderr);
}
