/* fr/log.h - leveled logging to stderr.
 *
 * One line per message: "<RFC3339 time> <level> <component>: <message>".
 * The level is process-wide (set once at start-up, before the loop runs).
 */
#ifndef FR_LOG_H
#define FR_LOG_H

enum fr_log_level { FR_LOG_DEBUG = 0, FR_LOG_INFO, FR_LOG_WARN, FR_LOG_ERROR };

void fr_log_set_level(enum fr_log_level level);
/* Parses "debug", "info", "warn" or "error"; returns 0 or -EINVAL. */
int fr_log_parse_level(const char *s, enum fr_log_level *out);
int fr_log_enabled(enum fr_log_level level);
void fr_log(enum fr_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define FR_DEBUG(c, ...) do { if (fr_log_enabled(FR_LOG_DEBUG)) fr_log(FR_LOG_DEBUG, c, __VA_ARGS__); } while (0)
#define FR_INFO(c, ...) fr_log(FR_LOG_INFO, c, __VA_ARGS__)
#define FR_WARN(c, ...) fr_log(FR_LOG_WARN, c, __VA_ARGS__)
#define FR_ERROR(c, ...) fr_log(FR_LOG_ERROR, c, __VA_ARGS__)

#endif
