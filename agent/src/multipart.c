/* multipart.c — a streaming multipart/form-data parser (RFC 7578) for
 * /files uploads: the body is fed piece by piece as it arrives, and only a
 * delimiter's length of bytes is ever carried from one piece to the next
 * (a part's headers, up to MP_HEAD_MAX, are the exception). No I/O: the
 * caller's sink gets each part's filename, its bytes and its end.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "agent.h"

enum { MP_PRE, MP_AFTER, MP_HEAD, MP_BODY, MP_END };

int mp_init(struct mp_parser *p, const char *content_type) {
  const char *b = strcasestr(content_type, "boundary=");
  size_t bl;

  memset(p, 0, sizeof(*p));
  if (b == NULL)
    return -ENOENT;
  b += 9;
  if (*b == '"') {
    b++;
    const char *q = strchr(b, '"');
    bl = q ? (size_t)(q - b) : strlen(b);
  } else {
    bl = strcspn(b, "; \t");
  }
  if (bl == 0 || bl > 70) /* RFC 2046: 1 to 70 characters */
    return -EINVAL;
  p->dlen = (size_t)snprintf(p->delim, sizeof(p->delim), "\r\n--%.*s", (int)bl, b);
  /* the first delimiter has no CRLF before it: pretend there was one */
  memcpy(p->buf, "\r\n", 2);
  p->len = 2;
  p->state = MP_PRE;
  return 0;
}

bool mp_done(const struct mp_parser *p) {
  return p->state == MP_END;
}

static char *find(char *hay, size_t n, const char *needle, size_t nl) {
  return n >= nl ? memmem(hay, n, needle, nl) : NULL;
}

static void consume(struct mp_parser *p, size_t n) {
  memmove(p->buf, p->buf + n, p->len - n);
  p->len -= n;
}

/* Extracts filename="..." from a part's <n> bytes of headers at <h> into
 * <out> (<cap> bytes). 1 found, 0 none, -EINVAL malformed or too long. */
static int part_filename(const char *h, size_t n, char *out, size_t cap) {
  char hdr[MP_HEAD_MAX + 1];

  /* A NUL would end the name early ("/tmp/a\0b" is not "/tmp/a"). */
  if (n > MP_HEAD_MAX || memchr(h, '\0', n) != NULL)
    return -EINVAL;
  memcpy(hdr, h, n);
  hdr[n] = '\0';
  const char *f = strcasestr(hdr, "filename=");
  if (f == NULL)
    return 0;
  f += 9;
  size_t l;
  if (*f == '"') {
    /* The closing quote is on the same header line: a quote left open
     * must not take the next lines into the name. */
    f++;
    l = strcspn(f, "\"\r\n");
    if (f[l] != '"')
      return -EINVAL;
  } else {
    l = strcspn(f, ";\r\n");
  }
  if (l == 0 || l >= cap)
    return -EINVAL;
  memcpy(out, f, l);
  out[l] = '\0';
  return 1;
}

/* Parses what p->buf holds. 0 (needs more bytes), -1 (a sink call
 * failed), -EINVAL with *<err> set. */
static int run(struct mp_parser *p, const struct mp_sink *sink, void *arg, const char **err) {
  for (;;) {
    if (p->state == MP_PRE) {
      char *d = find(p->buf, p->len, p->delim, p->dlen);
      if (d == NULL) {
        if (p->len >= p->dlen)
          consume(p, p->len - (p->dlen - 1));
        return 0;
      }
      consume(p, (size_t)(d - p->buf) + p->dlen);
      p->state = MP_AFTER;
    } else if (p->state == MP_AFTER) {
      if (p->len < 2)
        return 0;
      if (memcmp(p->buf, "--", 2) == 0) {
        p->state = MP_END;
        p->len = 0;
        return 0;
      }
      /* transport padding (spaces) may precede the CRLF */
      size_t sp = 0;
      while (sp < p->len && (p->buf[sp] == ' ' || p->buf[sp] == '\t'))
        sp++;
      if (sp == p->len)
        return 0;
      consume(p, sp);
      if (p->len < 2)
        return 0;
      if (memcmp(p->buf, "\r\n", 2) != 0) {
        *err = "malformed multipart body";
        return -EINVAL;
      }
      p->state = MP_HEAD;
    } else if (p->state == MP_HEAD) {
      char *e = find(p->buf, p->len, "\r\n\r\n", 4);
      if (e == NULL) {
        if (p->len > MP_HEAD_MAX) {
          *err = "multipart part headers too large";
          return -EINVAL;
        }
        return 0;
      }
      size_t hl = (size_t)(e - p->buf);
      if (hl > MP_HEAD_MAX) {
        *err = "multipart part headers too large";
        return -EINVAL;
      }
      /* The headers follow the CRLF that ends the delimiter line. */
      char fname[MP_NAME_MAX];
      int has = part_filename(p->buf + 2 > e ? e : p->buf + 2, hl >= 2 ? hl - 2 : 0, fname, sizeof(fname));
      consume(p, hl + 4);
      if (has < 0) {
        *err = "bad filename in multipart part (an open quote, a NUL byte, or too long)";
        return -EINVAL;
      }
      p->state = MP_BODY;
      if (sink->part_begin(arg, has > 0 ? fname : NULL) != 0)
        return -1;
    } else if (p->state == MP_BODY) {
      char *d = find(p->buf, p->len, p->delim, p->dlen);
      if (d == NULL) {
        if (p->len >= p->dlen) {
          size_t k = p->len - (p->dlen - 1);
          if (sink->part_data(arg, p->buf, k) != 0)
            return -1;
          consume(p, k);
        }
        return 0;
      }
      size_t k = (size_t)(d - p->buf);
      if ((k > 0 && sink->part_data(arg, p->buf, k) != 0) || sink->part_end(arg) != 0)
        return -1;
      consume(p, k + p->dlen);
      p->state = MP_AFTER;
    } else {
      p->len = 0; /* epilogue: ignored */
      return 0;
    }
  }
}

int mp_feed(struct mp_parser *p, const char *data, size_t n, const struct mp_sink *sink, void *arg,
            const char **err) {
  while (n > 0) {
    size_t k = sizeof(p->buf) - p->len;
    if (k > n)
      k = n;
    memcpy(p->buf + p->len, data, k);
    p->len += k;
    data += k;
    n -= k;
    int rc = run(p, sink, arg, err);
    if (rc != 0)
      return rc;
    if (p->len == sizeof(p->buf)) {
      *err = "malformed multipart body";
      return -EINVAL;
    }
  }
  return 0;
}
