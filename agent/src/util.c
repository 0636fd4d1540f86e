/* util.c — byte buffers, base64, constant-time compare, small helpers. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

int buf_append(struct buf *b, const void *data, size_t n) {
  if (n == 0)
    return 0;
  if (b->off > 0 && b->off == b->len) {
    b->off = b->len = 0;
  }
  if (b->len + n > b->cap) {
    /* Reclaim the consumed prefix before growing, so a queue that keeps
     * being written and drained stays at its high-water size. */
    if (b->off > 0) {
      memmove(b->p, b->p + b->off, b->len - b->off);
      b->len -= b->off;
      b->off = 0;
    }
    if (b->len + n > b->cap) {
      size_t cap = b->cap ? b->cap : 256;
      while (cap < b->len + n)
        cap *= 2;
      char *p = realloc(b->p, cap);
      if (p == NULL)
        return -ENOMEM;
      b->p = p;
      b->cap = cap;
    }
  }
  memcpy(b->p + b->len, data, n);
  b->len += n;
  return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...) {
  char tmp[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n < 0)
    return -EINVAL;
  if ((size_t)n < sizeof(tmp))
    return buf_append(b, tmp, (size_t)n);
  char *big = malloc((size_t)n + 1);
  if (big == NULL)
    return -ENOMEM;
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  int rc = buf_append(b, big, (size_t)n);
  free(big);
  return rc;
}

size_t buf_size(const struct buf *b) { return b->len - b->off; }

void buf_consume(struct buf *b, size_t n) {
  b->off += n;
  if (b->off >= b->len)
    b->off = b->len = 0;
}

void buf_free(struct buf *b) {
  free(b->p);
  b->p = NULL;
  b->off = b->len = b->cap = 0;
}

static const char b64chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t b64_encoded_len(size_t n) { return (n + 2) / 3 * 4; }

void b64_encode(const unsigned char *in, size_t n, char *out) {
  size_t i = 0, o = 0;
  for (; i + 2 < n; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
    out[o++] = b64chars[v >> 18 & 63];
    out[o++] = b64chars[v >> 12 & 63];
    out[o++] = b64chars[v >> 6 & 63];
    out[o++] = b64chars[v & 63];
  }
  if (i < n) {
    uint32_t v = (uint32_t)in[i] << 16;
    if (i + 1 < n)
      v |= (uint32_t)in[i + 1] << 8;
    out[o++] = b64chars[v >> 18 & 63];
    out[o++] = b64chars[v >> 12 & 63];
    out[o++] = i + 1 < n ? b64chars[v >> 6 & 63] : '=';
    out[o++] = '=';
  }
  out[o] = '\0';
}

static int b64val(unsigned char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  if (c == '+' || c == '-')
    return 62;
  if (c == '/' || c == '_')
    return 63;
  return -1;
}

ssize_t b64_decode(const char *in, size_t n, unsigned char *out) {
  while (n > 0 && in[n - 1] == '=')
    n--;
  if (n % 4 == 1)
    return -EINVAL;
  size_t o = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    int v = b64val((unsigned char)in[i]);
    if (v < 0)
      return -EINVAL;
    acc = acc << 6 | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (unsigned char)(acc >> bits & 0xff);
    }
  }
  return (ssize_t)o;
}

uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Time depends on the length of <b> (the secret) only, never on where the
 * first difference is. */
bool token_equal(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  unsigned char diff = (unsigned char)(la != lb);
  for (size_t i = 0; i < lb; i++) {
    unsigned char ca = la ? (unsigned char)a[i % la] : 0;
    diff |= (unsigned char)(ca ^ (unsigned char)b[i]);
  }
  return diff == 0 && lb > 0;
}

/* ---- SHA-256 (FIPS 180-4): the agent links no crypto library ---- */

static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, int n) { return x >> n | x << (32 - n); }

static void sha256_block(uint32_t h[8], const unsigned char *p) {
  uint32_t w[64], a, b, c, d, e, f, g, k, t1, t2;
  int i;

  for (i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (i = 16; i < 64; i++)
    w[i] = w[i - 16] + (ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ w[i - 15] >> 3) + w[i - 7] +
           (ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ w[i - 2] >> 10);
  a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (i = 0; i < 64; i++) {
    t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + sha_k[i] + w[i];
    t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
  explicit_bzero(w, sizeof(w));
}

void sha256(const void *data, size_t n, unsigned char out[32]) {
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const unsigned char *p = data;
  unsigned char last[128];
  size_t rest = n % 64, tail;
  uint64_t bits = (uint64_t)n * 8;
  int i;

  for (; n >= 64; n -= 64, p += 64)
    sha256_block(h, p);
  memset(last, 0, sizeof(last));
  memcpy(last, p, rest);
  last[rest] = 0x80;
  tail = rest < 56 ? 64 : 128;
  for (i = 0; i < 8; i++)
    last[tail - 1 - i] = (unsigned char)(bits >> (8 * i));
  sha256_block(h, last);
  if (tail == 128)
    sha256_block(h, last + 64);
  for (i = 0; i < 8; i++) {
    out[4 * i] = (unsigned char)(h[i] >> 24);
    out[4 * i + 1] = (unsigned char)(h[i] >> 16);
    out[4 * i + 2] = (unsigned char)(h[i] >> 8);
    out[4 * i + 3] = (unsigned char)h[i];
  }
  explicit_bzero(last, sizeof(last));
}

bool bytes_equal(const void *a, const void *b, size_t n) {
  const unsigned char *x = a, *y = b;
  unsigned char d = 0;

  for (size_t i = 0; i < n; i++)
    d |= (unsigned char)(x[i] ^ y[i]);
  return d == 0;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

int hex_decode(const char *in, unsigned char *out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    int h = hexval(in[2 * i]), l = h < 0 ? -1 : hexval(in[2 * i + 1]);
    if (l < 0)
      return -EINVAL;
    out[i] = (unsigned char)(h << 4 | l);
  }
  return in[2 * n] == '\0' ? 0 : -EINVAL;
}

/* Query-string decoding ('+' is a space). A %00 decodes to a NUL byte:
 * the caller checks what the value may hold (path_valid). */
int percent_decode(const char *in, size_t n, char *out, size_t outcap) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    char ch = in[i];
    if (ch == '%') {
      if (i + 2 >= n)
        return -EINVAL;
      int h = hexval(in[i + 1]), l = hexval(in[i + 2]);
      if (h < 0 || l < 0)
        return -EINVAL;
      ch = (char)(h << 4 | l);
      i += 2;
    } else if (ch == '+') {
      ch = ' ';
    }
    if (o + 1 >= outcap)
      return -ENAMETOOLONG;
    out[o++] = ch;
  }
  out[o] = '\0';
  return (int)o;
}

/* Length of the UTF-8 sequence at <s> (at most <n> bytes), 0 if it is not
 * one: overlong forms, surrogates and code points past U+10FFFF are not. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  size_t len, i;
  uint32_t cp;

  if (s[0] < 0x80)
    return 1;
  if (s[0] >= 0xc2 && s[0] <= 0xdf)
    len = 2, cp = s[0] & 0x1f;
  else if (s[0] >= 0xe0 && s[0] <= 0xef)
    len = 3, cp = s[0] & 0x0f;
  else if (s[0] >= 0xf0 && s[0] <= 0xf4)
    len = 4, cp = s[0] & 0x07;
  else
    return 0;
  if (len > n)
    return 0;
  for (i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80)
      return 0;
    cp = cp << 6 | (s[i] & 0x3f);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return len;
}

bool path_valid(const char *p, size_t n) {
  const unsigned char *s = (const unsigned char *)p;

  for (size_t i = 0, k; i < n; i += k)
    if (s[i] == '\0' || (k = utf8_seq(s + i, n - i)) == 0)
      return false;
  return true;
}

void path_show(const char *p, size_t n, char *out, size_t cap) {
  const unsigned char *s = (const unsigned char *)p;
  size_t o = 0, i = 0, k;

  if (cap < 8) {
    if (cap > 0)
      out[0] = '\0';
    return;
  }
  /* each turn adds at most 4 bytes; "..." and the NUL still fit after */
  while (i < n && o + 7 < cap) {
    k = s[i] >= 0x20 && s[i] != 0x7f && s[i] != '%' ? utf8_seq(s + i, n - i) : 0;
    if (k == 0) { /* a byte that is not text (or a '%') shows as its %XX */
      snprintf(out + o, 4, "%%%02X", s[i]);
      o += 3;
      i++;
    } else {
      memcpy(out + o, s + i, k);
      o += k;
      i += k;
    }
  }
  if (i < n) {
    memcpy(out + o, "...", 3);
    o += 3;
  }
  out[o] = '\0';
}

void text_fix(char *s) {
  size_t n = strlen(s), k;

  for (size_t i = 0; i < n; i += k)
    if ((k = utf8_seq((unsigned char *)s + i, n - i)) == 0)
      s[i] = '?', k = 1;
}

FILE *fopen_regular(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  struct stat st;
  FILE *f;

  if (fd < 0)
    return NULL;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (f = fdopen(fd, "r")) == NULL) {
    close(fd);
    return NULL;
  }
  return f;
}

int mkdir_p(const char *path, mode_t mode) {
  char tmp[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof(tmp))
    return -ENAMETOOLONG;
  memcpy(tmp, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (tmp[i] == '/' || tmp[i] == '\0') {
      char saved = tmp[i];
      tmp[i] = '\0';
      if (mkdir(tmp, mode) != 0 && errno != EEXIST)
        return -errno;
      tmp[i] = saved;
    }
  }
  struct stat st;
  if (stat(path, &st) != 0)
    return -errno;
  return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* Logs go to stderr (the container log). Callers never pass env values or
 * tokens: secrets must not reach a log. */
void log_msg(const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n > sizeof(line) - 2)
    n = (int)sizeof(line) - 2;
  line[n++] = '\n';
  ssize_t w = write(2, "fedrouter-agent: ", 17);
  w = write(2, line, (size_t)n);
  (void)w;
}
