/* buf.c - growable byte buffer. */
#include "fr/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fr_buf_init(struct fr_buf *b) {
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
}

void fr_buf_free(struct fr_buf *b) {
  if (b == NULL)
    return;
  free(b->data);
  fr_buf_init(b);
}

void fr_buf_reset(struct fr_buf *b) {
  b->len = 0;
  if (b->data != NULL)
    b->data[0] = '\0';
}

int fr_buf_reserve(struct fr_buf *b, size_t extra) {
  size_t need, ncap;
  char *p;

  if (extra > SIZE_MAX - b->len - 1)
    return -ENOMEM;
  need = b->len + extra + 1;
  if (need <= b->cap)
    return 0;
  ncap = b->cap ? b->cap : 64;
  while (ncap < need)
    ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
  p = realloc(b->data, ncap);
  if (p == NULL)
    return -ENOMEM;
  b->data = p;
  b->cap = ncap;
  /* The promise of fr/buf.h: terminated from the first allocation on, so a
   * buffer reserved but never appended to reads as "" (not as whatever the
   * allocator left there). */
  b->data[b->len] = '\0';
  return 0;
}

int fr_buf_append(struct fr_buf *b, const void *data, size_t len) {
  if (fr_buf_reserve(b, len) != 0)
    return -ENOMEM;
  if (len > 0)
    memcpy(b->data + b->len, data, len);
  b->len += len;
  b->data[b->len] = '\0';
  return 0;
}

int fr_buf_puts(struct fr_buf *b, const char *s) {
  return fr_buf_append(b, s, strlen(s));
}

int fr_buf_putc(struct fr_buf *b, char c) {
  return fr_buf_append(b, &c, 1);
}

int fr_buf_vprintf(struct fr_buf *b, const char *fmt, va_list ap) {
  va_list ap2;
  int n;

  va_copy(ap2, ap);
  n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0)
    return -EINVAL;
  if (fr_buf_reserve(b, (size_t)n) != 0)
    return -ENOMEM;
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
  return 0;
}

int fr_buf_printf(struct fr_buf *b, const char *fmt, ...) {
  va_list ap;
  int rc;

  va_start(ap, fmt);
  rc = fr_buf_vprintf(b, fmt, ap);
  va_end(ap);
  return rc;
}

int fr_utf8_char(const unsigned char *s, size_t avail) {
  unsigned char c = s[0];
  size_t n, i;
  uint32_t cp;

  if (c < 0x80)
    return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (avail < n) {
    for (i = 1; i < avail; i++)
      if ((s[i] & 0xC0) != 0x80)
        return 0;
    return -1;
  }
  for (i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80)
      return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  /* Reject overlong forms, surrogates and values past U+10FFFF. */
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return (int)n;
}

size_t fr_json_escaped_len(const char *s, size_t len) {
  static unsigned char width[256];
  size_t i, n = 0;

  if (width['a'] == 0) {
    for (i = 0; i < 256; i++)
      width[i] = i < 0x20 ? 6 : 1;
    width['"'] = width['\\'] = width['\n'] = width['\t'] = width['\r'] = width['\b'] = width['\f'] = 2;
  }
  for (i = 0; i < len; i++)
    n += width[(unsigned char)s[i]];
  return n;
}

int fr_buf_put_json_str(struct fr_buf *b, const char *str, size_t len) {
  if (fr_buf_putc(b, '"') != 0 || fr_buf_put_json_chars(b, str, len) != 0)
    return -ENOMEM;
  return fr_buf_putc(b, '"');
}

int fr_buf_put_json_chars(struct fr_buf *b, const char *str, size_t len) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0, run = 0;
  int n;

  while (i < len) {
    unsigned char c = s[i];
    const char *esc = NULL;
    char u[7];

    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
      run++;
      i++;
      continue;
    }
    if (run && fr_buf_append(b, s + i - run, run) != 0)
      return -ENOMEM;
    run = 0;
    if (c >= 0x80) {
      n = fr_utf8_char(s + i, len - i);
      if (n <= 0) {
        esc = "\xEF\xBF\xBD"; /* U+FFFD */
        n = 1;
      }
      if (fr_buf_append(b, esc ? esc : (const char *)s + i, esc ? 3 : (size_t)n) != 0)
        return -ENOMEM;
      i += (size_t)n;
      continue;
    }
    switch (c) {
    case '"': esc = "\\\""; break;
    case '\\': esc = "\\\\"; break;
    case '\n': esc = "\\n"; break;
    case '\r': esc = "\\r"; break;
    case '\t': esc = "\\t"; break;
    case '\b': esc = "\\b"; break;
    case '\f': esc = "\\f"; break;
    default:
      u[0] = '\\'; u[1] = 'u'; u[2] = '0'; u[3] = '0';
      u[4] = hex[c >> 4]; u[5] = hex[c & 15]; u[6] = '\0';
      esc = u;
    }
    if (fr_buf_puts(b, esc) != 0)
      return -ENOMEM;
    i++;
  }
  if (run && fr_buf_append(b, s + i - run, run) != 0)
    return -ENOMEM;
  return 0;
}

void fr_buf_consume(struct fr_buf *b, size_t n) {
  if (n >= b->len) {
    fr_buf_reset(b);
    return;
  }
  memmove(b->data, b->data + n, b->len - n);
  b->len -= n;
  b->data[b->len] = '\0';
}

char *fr_buf_detach(struct fr_buf *b, size_t *len_out) {
  char *p;

  if (b->data == NULL && fr_buf_reserve(b, 0) != 0)
    return NULL;
  if (b->len == 0)
    b->data[0] = '\0';
  p = b->data;
  if (len_out != NULL)
    *len_out = b->len;
  fr_buf_init(b);
  return p;
}
