/* fr/urlsafe.h - what a URL path or name must look like before any part of
 * it reaches an upstream (a Kubernetes API server, a gateway, an agent).
 *
 * A server that normalizes a path (RFC 3986 remove_dot_segments, decoding
 * %2F, cutting at ';' or NUL) can be steered outside the prefix a caller
 * built: "/proxy/../../secrets" reaches "/secrets". So fedrouter never
 * sends a path whose meaning could change under normalization: every path
 * that enters (the router's and the gateway's requests) and every path that
 * leaves (the Kubernetes client) passes fr_url_path_check(), and every name
 * put into one passes fr_dns_label() / fr_dns_subdomain(). Pure functions,
 * no allocation; safe anywhere.
 */
#ifndef FR_URLSAFE_H
#define FR_URLSAFE_H

#include <stddef.h>

/* Checks the raw (still percent-encoded) path <p> of <len> bytes, without
 * its query. Refused: not starting with '/'; a "." or ".." segment; an
 * empty segment ("//"; a trailing '/' is fine); control bytes, space, '\',
 * ';', '#', '?' or bytes >= 0x80 sent raw; a '%' not followed by two hex
 * digits; an encoded '.', '/', '\', '%', ';' or control byte (%2e %2f %5c
 * %25 %3b %00-%1f %7f, any case). Returns 0, or -EINVAL with a short
 * reason in *<why> (may be NULL) naming what was refused. */
int fr_url_path_check(const char *p, size_t len, const char **why);

/* Checks a query string <q> (without '?') of <len> bytes: printable ASCII
 * only, no space or '#', every '%' followed by two hex digits, and no
 * encoded control byte (%00-%1f, %7f). 0 or -EINVAL with *<why>. */
int fr_url_query_check(const char *q, size_t len, const char **why);

/* 1 if <s> is a DNS-1123 label: 1-63 of [a-z0-9-], starting and ending
 * alphanumeric (namespaces, cluster names, pool names). */
int fr_dns_label(const char *s);
/* 1 if <s> is a DNS-1123 subdomain: 1-253 characters, dot-separated
 * labels of [a-z0-9-] each starting and ending alphanumeric (pod, Secret,
 * ConfigMap names). */
int fr_dns_subdomain(const char *s);

/* Appends <s> percent-encoded as a query value (everything but RFC 3986
 * unreserved characters escaped) to <out> of <cap> bytes at *<pos>,
 * keeping it NUL-terminated. 0, or -ENAMETOOLONG (nothing changes). */
int fr_url_query_escape(char *out, size_t cap, size_t *pos, const char *s);

#endif
