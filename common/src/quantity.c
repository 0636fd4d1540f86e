/* quantity.c - Kubernetes resource quantities as int64 milli-units.
 *
 * The value of a quantity is digits * 10^e10 * 2^e2, with e10 coming from
 * the fraction length, an SI suffix or an exponent, and e2 from a binary
 * suffix. We evaluate that exactly with 64-bit integers: the digits are
 * never converted to floating point, so "0.1" is exactly 100m and
 * "1.000000000000000000001" rounds up to 1001m the way Kubernetes' MilliValue
 * does (it rounds away from zero, so "-0.0001" is -1m).
 */
#include "fr/quantity.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

/* Exponents are clamped to this size while parsing: any larger one already
 * overflows int64 (or rounds to the smallest unit) for every non-zero
 * mantissa, and the clamp keeps the arithmetic below free of overflow. */
#define EXP_CLAMP 1000000

struct parsed {
  bool neg;
  const char *ip; /* integer digits */
  size_t ilen;
  const char *fp; /* fraction digits */
  size_t flen;
  int64_t e10; /* from the suffix or exponent, before the fraction shift */
  unsigned e2; /* 10 per binary step: Ki = 10 ... Ei = 60 */
};

struct suffix {
  const char *text;
  int e10;
  unsigned e2;
};

/* "n" and "u" are not in the header's list but Kubernetes accepts them and
 * metrics-server reports cpu in nanocores ("12345n"), so we take them too. */
static const struct suffix suffixes[] = {
    {"", 0, 0},    {"n", -9, 0},  {"u", -6, 0},  {"m", -3, 0},  {"k", 3, 0},
    {"M", 6, 0},   {"G", 9, 0},   {"T", 12, 0},  {"P", 15, 0},  {"E", 18, 0},
    {"Ki", 0, 10}, {"Mi", 0, 20}, {"Gi", 0, 30}, {"Ti", 0, 40}, {"Pi", 0, 50},
    {"Ei", 0, 60},
};

static bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

/* Parses "e<n>" / "E<n>" (the leading letter already skipped at <p>) into
 * <out>, clamped to +-EXP_CLAMP. */
static int parse_exponent(const char *p, int64_t *out) {
  bool neg = false;
  int64_t v = 0;

  if (*p == '+' || *p == '-')
    neg = *p++ == '-';
  if (!is_digit(*p))
    return -EINVAL;
  for (; is_digit(*p); p++) {
    if (v < EXP_CLAMP)
      v = v * 10 + (*p - '0');
  }
  if (*p != '\0')
    return -EINVAL;
  if (v > EXP_CLAMP)
    v = EXP_CLAMP;
  *out = neg ? -v : v;
  return 0;
}

/* Splits <s> per the grammar in quantity.h. Whitespace anywhere is an error,
 * as in Kubernetes. */
static int parse_syntax(const char *s, struct parsed *q) {
  const char *p = s;

  memset(q, 0, sizeof(*q));
  if (s == NULL)
    return -EINVAL;
  if (*p == '+' || *p == '-')
    q->neg = *p++ == '-';
  q->ip = p;
  while (is_digit(*p))
    p++;
  q->ilen = (size_t)(p - q->ip);
  q->fp = p;
  if (*p == '.') {
    q->fp = ++p;
    while (is_digit(*p))
      p++;
    q->flen = (size_t)(p - q->fp);
  }
  /* Kubernetes allows "5." and ".5" but a number needs at least one digit;
   * without this rule "Gi" alone would parse as zero. */
  if (q->ilen + q->flen == 0)
    return -EINVAL;
  for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
    if (strcmp(p, suffixes[i].text) == 0) {
      q->e10 = suffixes[i].e10;
      q->e2 = suffixes[i].e2;
      return 0;
    }
  }
  /* A lone "E" is exa (matched above); "E3" / "e-3" is an exponent. */
  if ((*p == 'e' || *p == 'E') && p[1] != '\0')
    return parse_exponent(p + 1, &q->e10);
  return -EINVAL;
}

static unsigned digit_at(const struct parsed *q, size_t i) {
  return (unsigned)(i < q->ilen ? q->ip[i] : q->fp[i - q->ilen]) - '0';
}

/* Computes |value| * 10^<scale>, rounded away from zero, into <out>.
 * Fails with -ERANGE above INT64_MAX. */
static int scaled_magnitude(const struct parsed *q, int scale, uint64_t *out) {
  const uint64_t max = (uint64_t)INT64_MAX;
  size_t n = q->ilen + q->flen;
  /* Value = D * 10^e * 2^e2 where D is the integer made of all n digits. */
  int64_t e = q->e10 + scale - (int64_t)q->flen;
  size_t nwhole; /* leading digits of D that land left of the point */
  size_t lead0 = 0; /* implicit zeros between the point and D's digits */
  uint64_t whole = 0, carry = 0, mult = (uint64_t)1 << q->e2;
  bool frac = false;

  if (e >= 0) {
    nwhole = n;
  } else if ((uint64_t)-e < n) {
    nwhole = n - (size_t)-e;
  } else {
    nwhole = 0;
    lead0 = (size_t)(-e - (int64_t)n);
  }

  for (size_t i = 0; i < nwhole; i++) {
    unsigned d = digit_at(q, i);
    if (whole > (max - d) / 10)
      return -ERANGE;
    whole = whole * 10 + d;
  }
  /* With a non-zero mantissa this loop overflows within 19 rounds, so a
   * clamped exponent of a million never runs long. */
  for (int64_t i = 0; whole != 0 && i < e; i++) {
    if (whole > max / 10)
      return -ERANGE;
    whole *= 10;
  }
  if (whole > (max >> q->e2))
    return -ERANGE;
  whole <<= q->e2;

  /* The fraction digits F (with lead0 zeros in front) contribute
   * floor(F * 2^e2 / 10^k). Multiplying right to left keeps every partial
   * value below 10 * 2^60 < 2^64, and any non-zero digit falling off the
   * right means the result must be rounded up. */
  for (size_t i = n; i > nwhole; i--) {
    uint64_t t = digit_at(q, i - 1) * mult + carry;
    if (t % 10 != 0)
      frac = true;
    carry = t / 10;
  }
  for (size_t i = 0; i < lead0 && carry != 0; i++) {
    if (carry % 10 != 0)
      frac = true;
    carry /= 10;
  }

  if (carry > max - whole)
    return -ERANGE;
  whole += carry;
  if (frac) {
    if (whole == max)
      return -ERANGE;
    whole++;
  }
  *out = whole;
  return 0;
}

static int parse_scaled(const char *s, int scale, int64_t *result) {
  struct parsed q;
  uint64_t mag;
  int rc;

  rc = parse_syntax(s, &q);
  if (rc == 0)
    rc = scaled_magnitude(&q, scale, &mag);
  if (rc != 0)
    return rc;
  if (result != NULL)
    *result = q.neg ? -(int64_t)mag : (int64_t)mag;
  return 0;
}

int fr_quantity_parse_milli(const char *s, int64_t *milli) {
  return parse_scaled(s, 3, milli);
}

int fr_quantity_parse_value(const char *s, int64_t *value) {
  return parse_scaled(s, 0, value);
}

/* Writes [-]<mag><tail> into <out>. Returns its length, or 0 with <out> set
 * to "" when it does not fit: a cut-off number would read as a different
 * quantity, so we never truncate. */
static size_t emit(bool neg, uint64_t mag, const char *tail, char *out, size_t cap) {
  char tmp[32]; /* "-" + 20 digits + "m" or a two-letter suffix + NUL */
  char *p = tmp + sizeof(tmp);
  size_t tail_len = strlen(tail), len;

  *--p = '\0';
  p -= tail_len;
  memcpy(p, tail, tail_len);
  do {
    *--p = (char)('0' + mag % 10);
    mag /= 10;
  } while (mag != 0);
  if (neg)
    *--p = '-';
  len = (size_t)(tmp + sizeof(tmp) - 1 - p);
  if (out == NULL || cap == 0)
    return 0;
  if (len >= cap) {
    out[0] = '\0';
    return 0;
  }
  memcpy(out, p, len + 1);
  return len;
}

/* Whole units: the largest binary suffix that divides exactly, else plain
 * digits (Kubernetes' BinarySI form; it too prints |v| < 1024 plainly). */
static size_t format_units(bool neg, uint64_t units, char *out, size_t cap) {
  static const char *const bin[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  unsigned i = 0;

  while (units != 0 && i + 1 < sizeof(bin) / sizeof(bin[0]) && units % 1024 == 0) {
    units /= 1024;
    i++;
  }
  return emit(neg, units, bin[i], out, cap);
}

/* |v| without overflow for INT64_MIN. */
static uint64_t magnitude(int64_t v) {
  return v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
}

size_t fr_quantity_format_milli(int64_t milli, char *out, size_t cap) {
  uint64_t mag = magnitude(milli);

  if (mag % 1000 != 0)
    return emit(milli < 0, mag, "m", out, cap);
  return format_units(milli < 0, mag / 1000, out, cap);
}

size_t fr_quantity_format_bytes(int64_t bytes, char *out, size_t cap) {
  return format_units(bytes < 0, magnitude(bytes), out, cap);
}
