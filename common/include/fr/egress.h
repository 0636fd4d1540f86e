/* fr/egress.h - a sandbox's egress policy: may it reach the internet, which
 * address ranges it may reach anyway (allow) and which not (deny), as the
 * API's `network` object and a tenant's default say (docs/api.md).
 *
 * Only IP addresses and CIDRs, IPv4 and IPv6: what a Kubernetes
 * NetworkPolicy's ipBlock can express. A domain name is refused with a
 * message that says so. Parsing is strict: no leading zeros, no zone, a
 * prefix length in range, no address bits set past the prefix.
 *
 * Pure functions over caller-owned structs: no allocation, no I/O.
 */
#ifndef FR_EGRESS_H
#define FR_EGRESS_H

#include <stddef.h>
#include <stdint.h>

/* At most this many entries in each of allow and deny. */
#define FR_EGRESS_MAX_CIDRS 64
/* The longest entry text accepted (an IPv6 address with a prefix fits). */
#define FR_CIDR_TEXT_MAX 64
/* Bytes of a CIDR's canonical text, NUL included. */
#define FR_CIDR_STRLEN 50
/* Hex characters of a policy's hash (fr_egress_hash). */
#define FR_EGRESS_HASH_LEN 16

struct fr_cidr {
  uint8_t family;           /* 4 or 6 */
  uint8_t prefix;           /* 0-32 or 0-128 */
  uint8_t addr[16];         /* network byte order; IPv4 in the first 4 bytes; no bits past prefix */
};

/* Parses <s>: "A.B.C.D", "A.B.C.D/N", an IPv6 address, or one with "/N"
 * (an address alone is /32 or /128). 0, or -EINVAL with why in <why>
 * (<cap> bytes; may be NULL). */
int fr_cidr_parse(const char *s, struct fr_cidr *out, char *why, size_t cap);
/* The canonical text ("10.0.0.0/8", "2001:db8::/32") into <out>, at least
 * FR_CIDR_STRLEN bytes. */
void fr_cidr_format(const struct fr_cidr *c, char *out);
/* 1 when <outer> contains every address of <inner> (same family). */
int fr_cidr_contains(const struct fr_cidr *outer, const struct fr_cidr *inner);
/* Orders by family, address, then prefix (qsort-style). */
int fr_cidr_cmp(const struct fr_cidr *a, const struct fr_cidr *b);

struct fr_egress {
  int allow_internet;       /* 1: everything but deny (allow wins over deny); 0: only allow */
  size_t nallow, ndeny;
  struct fr_cidr allow[FR_EGRESS_MAX_CIDRS];
  struct fr_cidr deny[FR_EGRESS_MAX_CIDRS];
};

/* The default: internet allowed, no lists. */
void fr_egress_init(struct fr_egress *e);
/* Parses <text> (fr_cidr_parse) and adds it to the deny list when <deny>,
 * else to the allow list. 0; -EINVAL with why in <why>; -E2BIG when the
 * list holds FR_EGRESS_MAX_CIDRS already. */
int fr_egress_add(struct fr_egress *e, int deny, const char *text, char *why, size_t cap);
/* Sorts both lists and drops duplicates; with the internet allowed and
 * nothing denied the allow list says nothing and is emptied, so two
 * policies that allow the same have the same canonical form. */
void fr_egress_normalize(struct fr_egress *e);
/* 1 when <e> (normalized) restricts nothing: the internet allowed and no
 * deny list. NULL counts as the default. */
int fr_egress_is_default(const struct fr_egress *e);
/* The canonical text of normalized <e>:
 * "internet=1;allow=10.0.0.0/8,2001:db8::/32;deny=". 0, or -ENOSPC when
 * <cap> is too small (FR_EGRESS_TEXT_MAX always suffices). */
#define FR_EGRESS_TEXT_MAX (32 + 2 * FR_EGRESS_MAX_CIDRS * FR_CIDR_STRLEN)
int fr_egress_text(const struct fr_egress *e, char *out, size_t cap);
/* Reads what fr_egress_text() wrote, normalized; 0 or -EINVAL. */
int fr_egress_parse_text(const char *text, struct fr_egress *out);
/* The first FR_EGRESS_HASH_LEN hex characters of SHA-256 of the canonical
 * text of normalized <e>, NUL-terminated into <out>: the name of the
 * policy's NetworkPolicy and of the label that selects its sandboxes. */
void fr_egress_hash(const struct fr_egress *e, char out[FR_EGRESS_HASH_LEN + 1]);
/* 1 when <s> is FR_EGRESS_HASH_LEN lowercase hex characters. */
int fr_egress_hash_valid(const char *s);

#endif
