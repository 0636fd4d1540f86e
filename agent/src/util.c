/* util.c — byte buffers, base64, constant-time compare, small helpers. */
#include <errno.h>
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

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* Query-string decoding ('+' is a space). Refuses NUL bytes. */
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
    if (ch == '\0')
      return -EINVAL;
    if (o + 1 >= outcap)
      return -ENAMETOOLONG;
    out[o++] = ch;
  }
  out[o] = '\0';
  return (int)o;
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
