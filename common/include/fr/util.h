/* fr/util.h - small helpers shared by every module. */
#ifndef FR_UTIL_H
#define FR_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define FR_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define fr_container_of(ptr, type, member) \
  ((type *)((char *)(ptr) - offsetof(type, member)))

/* Wall-clock time in milliseconds since the epoch. */
int64_t fr_wall_ms(void);
/* Formats <unix_s> as RFC 3339 UTC ("2026-11-21T23:21:16Z") into <out>
 * (at least 21 bytes). */
void fr_time_rfc3339(int64_t unix_s, char out[21]);
/* Parses the format above; returns 0 or -EINVAL. */
int fr_time_parse_rfc3339(const char *s, int64_t *unix_s);

/* Standard base64 (with padding). <out> must hold fr_base64_len(n) bytes;
 * the result is NUL-terminated. Returns the encoded length. */
size_t fr_base64_len(size_t n);
size_t fr_base64_encode(const void *in, size_t n, char *out);
/* Decodes standard or URL-safe base64, padding optional. Returns the decoded
 * length or -EINVAL. <out> must hold n*3/4+3 bytes. */
long fr_base64_decode(const char *in, size_t n, unsigned char *out);

/* Fills <out> with <n> cryptographically random bytes; 0 or -EIO. */
int fr_random_bytes(void *out, size_t n);
/* <n> random characters from [a-z0-9] (no vowels, like Kubernetes'
 * generateName suffixes), NUL-terminated. */
void fr_random_name_suffix(char *out, size_t n);

/* Lowercase hex of SHA-256(<data>) into <out> (65 bytes). */
void fr_sha256_hex(const void *data, size_t n, char out[65]);

/* Lowercase hex of HMAC-SHA256(<key>, <msg>) into <out> (65 bytes);
 * 0, or -EIO (then <out> is ""). */
int fr_hmac_sha256_hex(const void *key, size_t key_len, const void *msg, size_t n, char out[65]);

/* Strict decimal parse of a whole string into [min, max]; 0 or -EINVAL/-ERANGE. */
int fr_parse_int64(const char *s, int64_t min, int64_t max, int64_t *out);

/* Levenshtein distance between <a> and <b>, for "did you mean" hints.
 * Strings of 64 bytes or more count as far apart (SIZE_MAX). */
size_t fr_edit_distance(const char *a, const char *b);

/* Constant-time comparison of two NUL-terminated secrets. Returns 1 if equal. */
int fr_secret_equal(const char *a, const char *b);
/* Zeroes the NUL-terminated string <s> (a secret) and frees it. Accepts NULL. */
void fr_secret_free(char *s);

#endif
