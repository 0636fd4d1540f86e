/* egress.c - egress policies: strict CIDR parsing, canonical form, hash
 * (fr/egress.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fr/egress.h"
#include "fr/util.h"

static void say(char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void say(char *why, size_t cap, const char *fmt, ...) {
  va_list ap;

  if (why == NULL || cap == 0)
    return;
  va_start(ap, fmt);
  vsnprintf(why, cap, fmt, ap);
  va_end(ap);
}

/* Letters other than hex digits, dots and dashes: what an address never has. */
static int looks_like_name(const char *s) {
  size_t i;

  if (strchr(s, ':') != NULL)
    return 0;
  for (i = 0; s[i] != '\0' && s[i] != '/'; i++)
    if ((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || s[i] == '-' || s[i] == '_')
      return 1;
  return 0;
}

/* Zeroes the bits of <c>'s address past its prefix. */
static void clear_host_bits(struct fr_cidr *c) {
  int i, bits = c->prefix;

  for (i = 0; i < 16; i++, bits -= 8)
    c->addr[i] &= (uint8_t)(bits >= 8 ? 0xff : bits <= 0 ? 0 : 0xff << (8 - bits));
}

int fr_cidr_parse(const char *s, struct fr_cidr *out, char *why, size_t cap) {
  struct fr_cidr fixed;
  char addr[FR_CIDR_TEXT_MAX + 1], canon[FR_CIDR_STRLEN];
  const char *slash;
  size_t alen, plen, i;
  int max, prefix = -1, v6;

  memset(out, 0, sizeof(*out));
  if (s == NULL || *s == '\0') {
    say(why, cap, "an empty string is not an IP address or CIDR");
    return -EINVAL;
  }
  if (strlen(s) > FR_CIDR_TEXT_MAX) {
    say(why, cap, "\"%.40s...\" is too long for an IP address or CIDR", s);
    return -EINVAL;
  }
  if (looks_like_name(s)) {
    say(why, cap,
        "\"%s\" is a domain name, not an IP address or CIDR: a Kubernetes NetworkPolicy cannot express "
        "names (docs/operations.md, \"Sandbox egress\")",
        s);
    return -EINVAL;
  }
  slash = strchr(s, '/');
  alen = slash != NULL ? (size_t)(slash - s) : strlen(s);
  memcpy(addr, s, alen);
  addr[alen] = '\0';
  v6 = strchr(addr, ':') != NULL;
  max = v6 ? 128 : 32;
  if (inet_pton(v6 ? AF_INET6 : AF_INET, addr, out->addr) != 1) {
    say(why, cap, "\"%s\" is not an IP address or CIDR (e.g. 10.0.0.0/8, 203.0.113.7 or 2001:db8::/32)", s);
    return -EINVAL;
  }
  out->family = v6 ? 6 : 4;
  if (slash != NULL) {
    plen = strlen(slash + 1);
    /* 1-3 digits, no sign, no leading zero (except "0" itself). */
    for (i = 0, prefix = 0; i < plen && i < 3; i++) {
      if (slash[1 + i] < '0' || slash[1 + i] > '9')
        break;
      prefix = prefix * 10 + (slash[1 + i] - '0');
    }
    if (plen == 0 || plen > 3 || i != plen || (plen > 1 && slash[1] == '0') || prefix > max) {
      say(why, cap, "\"%s\": the prefix length must be a number from 0 to %d", s, max);
      return -EINVAL;
    }
  } else {
    prefix = max;
  }
  out->prefix = (uint8_t)prefix;
  fixed = *out;
  clear_host_bits(&fixed);
  if (memcmp(fixed.addr, out->addr, sizeof(out->addr)) != 0) {
    fr_cidr_format(&fixed, canon);
    say(why, cap, "\"%s\" has address bits set past its prefix length (did you mean %s?)", s, canon);
    return -EINVAL;
  }
  return 0;
}

void fr_cidr_format(const struct fr_cidr *c, char *out) {
  char a[INET6_ADDRSTRLEN];

  if (inet_ntop(c->family == 6 ? AF_INET6 : AF_INET, c->addr, a, sizeof(a)) == NULL)
    snprintf(a, sizeof(a), "?");
  snprintf(out, FR_CIDR_STRLEN, "%s/%u", a, (unsigned)c->prefix);
}

int fr_cidr_contains(const struct fr_cidr *outer, const struct fr_cidr *inner) {
  int i, bits = outer->prefix;

  if (outer->family != inner->family || inner->prefix < outer->prefix)
    return 0;
  for (i = 0; bits > 0; i++, bits -= 8) {
    uint8_t mask = (uint8_t)(bits >= 8 ? 0xff : 0xff << (8 - bits));
    if ((outer->addr[i] & mask) != (inner->addr[i] & mask))
      return 0;
  }
  return 1;
}

int fr_cidr_cmp(const struct fr_cidr *a, const struct fr_cidr *b) {
  int c;

  if (a->family != b->family)
    return a->family < b->family ? -1 : 1;
  if ((c = memcmp(a->addr, b->addr, sizeof(a->addr))) != 0)
    return c;
  return a->prefix < b->prefix ? -1 : a->prefix > b->prefix;
}

static int cmp_void(const void *x, const void *y) {
  return fr_cidr_cmp(x, y);
}

void fr_egress_init(struct fr_egress *e) {
  memset(e, 0, sizeof(*e));
  e->allow_internet = 1;
}

int fr_egress_add(struct fr_egress *e, int deny, const char *text, char *why, size_t cap) {
  size_t *n = deny ? &e->ndeny : &e->nallow;
  struct fr_cidr c;
  int rc;

  if ((rc = fr_cidr_parse(text, &c, why, cap)) != 0)
    return rc;
  if (*n >= FR_EGRESS_MAX_CIDRS) {
    say(why, cap, "at most %d entries", FR_EGRESS_MAX_CIDRS);
    return -E2BIG;
  }
  (deny ? e->deny : e->allow)[(*n)++] = c;
  return 0;
}

static size_t sort_unique(struct fr_cidr *v, size_t n) {
  size_t i, o = 0;

  qsort(v, n, sizeof(*v), cmp_void);
  for (i = 0; i < n; i++)
    if (o == 0 || fr_cidr_cmp(&v[o - 1], &v[i]) != 0)
      v[o++] = v[i];
  return o;
}

void fr_egress_normalize(struct fr_egress *e) {
  e->allow_internet = e->allow_internet != 0;
  e->nallow = sort_unique(e->allow, e->nallow);
  e->ndeny = sort_unique(e->deny, e->ndeny);
  if (e->allow_internet && e->ndeny == 0)
    e->nallow = 0;
}

int fr_egress_is_default(const struct fr_egress *e) {
  return e == NULL || (e->allow_internet && e->ndeny == 0);
}

static int put_list(char *out, size_t cap, size_t *at, const struct fr_cidr *v, size_t n) {
  char t[FR_CIDR_STRLEN];
  size_t i;
  int w;

  for (i = 0; i < n; i++) {
    fr_cidr_format(&v[i], t);
    w = snprintf(out + *at, cap - *at, "%s%s", i ? "," : "", t);
    if (w < 0 || (size_t)w >= cap - *at)
      return -ENOSPC;
    *at += (size_t)w;
  }
  return 0;
}

int fr_egress_text(const struct fr_egress *e, char *out, size_t cap) {
  size_t at;
  int w = snprintf(out, cap, "internet=%d;allow=", e->allow_internet ? 1 : 0);

  if (w < 0 || (size_t)w >= cap)
    return -ENOSPC;
  at = (size_t)w;
  if (put_list(out, cap, &at, e->allow, e->nallow) != 0 || at + 6 >= cap)
    return -ENOSPC;
  memcpy(out + at, ";deny=", 7);
  at += 6;
  return put_list(out, cap, &at, e->deny, e->ndeny);
}

/* Adds the comma-separated entries of <s> (<n> bytes) to <e>'s list. */
static int parse_list(struct fr_egress *e, int deny, const char *s, size_t n) {
  char item[FR_CIDR_TEXT_MAX + 1];
  size_t i = 0, k;

  while (i < n) {
    for (k = i; k < n && s[k] != ','; k++)
      ;
    if (k == i || k - i > FR_CIDR_TEXT_MAX)
      return -EINVAL;
    memcpy(item, s + i, k - i);
    item[k - i] = '\0';
    if (fr_egress_add(e, deny, item, NULL, 0) != 0)
      return -EINVAL;
    i = k + 1;
    if (k + 1 == n && s[k] == ',')
      return -EINVAL; /* a trailing comma */
  }
  return 0;
}

int fr_egress_parse_text(const char *text, struct fr_egress *out) {
  const char *allow, *deny;

  fr_egress_init(out);
  if (text == NULL)
    return -EINVAL;
  if (strncmp(text, "internet=0;allow=", 17) == 0)
    out->allow_internet = 0;
  else if (strncmp(text, "internet=1;allow=", 17) != 0)
    return -EINVAL;
  allow = text + 17;
  deny = strstr(allow, ";deny=");
  if (deny == NULL || parse_list(out, 0, allow, (size_t)(deny - allow)) != 0 ||
      parse_list(out, 1, deny + 6, strlen(deny + 6)) != 0)
    return -EINVAL;
  fr_egress_normalize(out);
  return 0;
}

void fr_egress_hash(const struct fr_egress *e, char out[FR_EGRESS_HASH_LEN + 1]) {
  char text[FR_EGRESS_TEXT_MAX], hex[65];

  /* FR_EGRESS_TEXT_MAX always suffices: no error to handle. */
  if (fr_egress_text(e, text, sizeof(text)) != 0)
    text[0] = '\0';
  fr_sha256_hex(text, strlen(text), hex);
  memcpy(out, hex, FR_EGRESS_HASH_LEN);
  out[FR_EGRESS_HASH_LEN] = '\0';
}

int fr_egress_hash_valid(const char *s) {
  size_t i;

  for (i = 0; i < FR_EGRESS_HASH_LEN; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return 0;
  return s[i] == '\0';
}
