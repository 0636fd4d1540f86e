/* util.c - small shared helpers. */
#include "fr/util.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

int64_t fr_wall_ms(void) {
  struct timeval tv;

  gettimeofday(&tv, NULL);
  return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

void fr_time_rfc3339(int64_t unix_s, char out[21]) {
  time_t t = (time_t)unix_s;
  struct tm tm;

  gmtime_r(&t, &tm);
  strftime(out, 21, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int fr_time_parse_rfc3339(const char *s, int64_t *unix_s) {
  struct tm tm;
  const char *end;

  memset(&tm, 0, sizeof(tm));
  end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == NULL)
    return -EINVAL;
  if (*end == '.') { /* fractional seconds are allowed and ignored */
    end++;
    while (*end >= '0' && *end <= '9')
      end++;
  }
  if (strcmp(end, "Z") != 0)
    return -EINVAL;
  *unix_s = (int64_t)timegm(&tm);
  return 0;
}

size_t fr_base64_len(size_t n) {
  return (n + 2) / 3 * 4 + 1;
}

size_t fr_base64_encode(const void *in, size_t n, char *out) {
  return (size_t)EVP_EncodeBlock((unsigned char *)out, in, (int)n);
}

/* Standard and URL-safe alphabets; pure function, so the decoder is safe
 * from any thread (it may run on a worker thread). */
static int b64_value(unsigned char ch) {
  if (ch >= 'A' && ch <= 'Z')
    return ch - 'A';
  if (ch >= 'a' && ch <= 'z')
    return ch - 'a' + 26;
  if (ch >= '0' && ch <= '9')
    return ch - '0' + 52;
  if (ch == '+' || ch == '-')
    return 62;
  if (ch == '/' || ch == '_')
    return 63;
  return -1;
}

long fr_base64_decode(const char *in, size_t n, unsigned char *out) {
  uint32_t acc = 0;
  size_t i;
  long o = 0;
  int bits = 0;

  while (n > 0 && in[n - 1] == '=')
    n--;
  if (n % 4 == 1)
    return -EINVAL;
  for (i = 0; i < n; i++) {
    int v = b64_value((unsigned char)in[i]);
    if (v < 0)
      return -EINVAL;
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (unsigned char)(acc >> bits);
    }
  }
  return o;
}

int fr_random_bytes(void *out, size_t n) {
  return RAND_bytes(out, (int)n) == 1 ? 0 : -EIO;
}

void fr_random_name_suffix(char *out, size_t n) {
  /* Kubernetes' utilrand alphabet: no vowels, no ambiguous characters. */
  static const char alphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  unsigned char r[64];
  size_t i;

  if (n > sizeof(r))
    n = sizeof(r);
  if (fr_random_bytes(r, n) != 0)
    memset(r, 0, n);
  for (i = 0; i < n; i++)
    out[i] = alphabet[r[i] % (sizeof(alphabet) - 1)];
  out[n] = '\0';
}

void fr_sha256_hex(const void *data, size_t n, char out[65]) {
  static const char hex[] = "0123456789abcdef";
  unsigned char md[SHA256_DIGEST_LENGTH];
  size_t i;

  SHA256(data, n, md);
  for (i = 0; i < SHA256_DIGEST_LENGTH; i++) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 15];
  }
  out[64] = '\0';
}

int fr_hmac_sha256_hex(const void *key, size_t key_len, const void *msg, size_t n, char out[65]) {
  static const char hex[] = "0123456789abcdef";
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0, i;

  if (HMAC(EVP_sha256(), key, (int)key_len, msg, n, md, &len) == NULL || len != SHA256_DIGEST_LENGTH) {
    out[0] = '\0';
    return -EIO;
  }
  for (i = 0; i < len; i++) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 15];
  }
  out[64] = '\0';
  return 0;
}

int fr_parse_int64(const char *s, int64_t min, int64_t max, int64_t *out) {
  char *end;
  long long v;

  if (s == NULL || *s == '\0' || (*s != '-' && (*s < '0' || *s > '9')))
    return -EINVAL;
  errno = 0;
  v = strtoll(s, &end, 10);
  if (*end != '\0')
    return -EINVAL;
  if (errno == ERANGE || v < min || v > max)
    return -ERANGE;
  *out = (int64_t)v;
  return 0;
}

size_t fr_edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b), i, j;
  size_t prev[64], cur[64];

  if (la >= 64 || lb >= 64)
    return SIZE_MAX;
  for (j = 0; j <= lb; j++)
    prev[j] = j;
  for (i = 1; i <= la; i++) {
    cur[0] = i;
    for (j = 1; j <= lb; j++) {
      size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
      size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
      size_t m = del < ins ? del : ins;
      cur[j] = m < sub ? m : sub;
    }
    memcpy(prev, cur, (lb + 1) * sizeof(prev[0]));
  }
  return prev[lb];
}

int fr_secret_equal(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b), i;
  unsigned char diff = (unsigned char)(la != lb);

  for (i = 0; i < la && i < lb; i++)
    diff |= (unsigned char)(a[i] ^ b[i]);
  return diff == 0;
}

void fr_secret_free(char *s) {
  if (s == NULL)
    return;
  explicit_bzero(s, strlen(s));
  free(s);
}

#ifndef NDEBUG
#include "fr/assert.h"

void fr_assert_fail(const char *file, int line, const char *expr) {
  fprintf(stderr, "%s:%d: assertion failed: %s\n", file, line, expr);
  fflush(stderr);
  abort();
}
#endif
