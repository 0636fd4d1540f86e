/* urlsafe.c - path, query and name checks for everything that reaches an
 * upstream (fr/urlsafe.h says why). */
#include <errno.h>
#include <string.h>

#include "fr/urlsafe.h"

static int hexval(int c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

static int refuse(const char **why, const char *reason) {
  if (why != NULL)
    *why = reason;
  return -EINVAL;
}

/* The escape at <p> (p[0] == '%') of at most <left> bytes: its byte, or -1
 * when it is not '%' and two hex digits. */
static int escape_at(const char *p, size_t left) {
  int hi, lo;

  if (left < 3 || (hi = hexval((unsigned char)p[1])) < 0 || (lo = hexval((unsigned char)p[2])) < 0)
    return -1;
  return hi * 16 + lo;
}

int fr_url_path_check(const char *p, size_t len, const char **why) {
  size_t i, seg = 1; /* start of the current segment */

  if (p == NULL || len == 0 || p[0] != '/')
    return refuse(why, "a path starts with /");
  for (i = 1; i <= len; i++) {
    int c = i < len ? (unsigned char)p[i] : '/';
    if (c == '/') {
      size_t n = i - seg;
      if (n == 0 && i < len)
        return refuse(why, "an empty path segment (//)");
      if ((n == 1 && p[seg] == '.') || (n == 2 && p[seg] == '.' && p[seg + 1] == '.'))
        return refuse(why, "a dot segment (. or ..)");
      seg = i + 1;
      continue;
    }
    if (c < 0x20 || c == 0x7f || c >= 0x80)
      return refuse(why, "a control or non-ASCII byte");
    if (c == ' ' || c == '\\' || c == ';' || c == '#' || c == '?')
      return refuse(why, "a space, backslash, ';', '#' or '?'");
    if (c == '%') {
      int e = escape_at(p + i, len - i);
      if (e < 0)
        return refuse(why, "a '%' not followed by two hex digits");
      if (e == '.' || e == '/' || e == '\\' || e == '%' || e == ';' || e < 0x20 || e == 0x7f)
        return refuse(why, "an encoded '.', '/', '\\', '%', ';' or control byte");
      i += 2;
    }
  }
  return 0;
}

int fr_url_query_check(const char *q, size_t len, const char **why) {
  size_t i;

  for (i = 0; q != NULL && i < len; i++) {
    int c = (unsigned char)q[i];
    if (c <= 0x20 || c >= 0x7f || c == '#')
      return refuse(why, "a control, space, '#' or non-ASCII byte in the query");
    if (c == '%') {
      int e = escape_at(q + i, len - i);
      if (e < 0)
        return refuse(why, "a '%' not followed by two hex digits in the query");
      if (e < 0x20 || e == 0x7f)
        return refuse(why, "an encoded control byte in the query");
      i += 2;
    }
  }
  return 0;
}

/* A label of <n> bytes at <s>: [a-z0-9-], alphanumeric at both ends. */
static int label_ok(const char *s, size_t n) {
  size_t i;

  if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
    return 0;
  for (i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
      return 0;
  return 1;
}

int fr_dns_label(const char *s) {
  return s != NULL && label_ok(s, strlen(s));
}

int fr_dns_subdomain(const char *s) {
  size_t len, n;

  if (s == NULL || (len = strlen(s)) == 0 || len > 253)
    return 0;
  for (;;) {
    n = strcspn(s, ".");
    if (!label_ok(s, n))
      return 0;
    if (s[n] == '\0')
      return 1;
    s += n + 1;
  }
}

int fr_url_query_escape(char *out, size_t cap, size_t *pos, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  size_t at = *pos;

  for (; *s != '\0'; s++) {
    unsigned char c = (unsigned char)*s;
    int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                c == '.' || c == '_' || c == '~';
    if (at + (plain ? 1 : 3) >= cap) {
      if (*pos < cap)
        out[*pos] = '\0';
      return -ENAMETOOLONG;
    }
    if (plain) {
      out[at++] = (char)c;
    } else {
      out[at++] = '%';
      out[at++] = hex[c >> 4];
      out[at++] = hex[c & 15];
    }
  }
  if (at >= cap)
    return -ENAMETOOLONG;
  out[at] = '\0';
  *pos = at;
  return 0;
}
