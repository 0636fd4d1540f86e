/* fr/quantity.h - Kubernetes resource quantities ("500m", "2", "32Gi", "1e3").
 *
 * Values are held as int64 milli-units: cpu "250m" is 250, memory "1Gi" is
 * 1073741824000. That covers every realistic cpu and memory figure (up to
 * about 8 PiB) and fails with -ERANGE beyond, never silently wraps.
 */
#ifndef FR_QUANTITY_H
#define FR_QUANTITY_H

#include <stddef.h>
#include <stdint.h>

/* Parses the Kubernetes quantity grammar: optional sign, digits with an
 * optional fraction, then one of the suffixes m k M G T P E Ki Mi Gi Ti Pi Ei
 * or an exponent e<n>/E<n>. Fractions of a milli-unit round up (as
 * Kubernetes' MilliValue does). Returns 0, -EINVAL for bad syntax or
 * -ERANGE when the value does not fit. */
int fr_quantity_parse_milli(const char *s, int64_t *milli);
/* Same, in whole units rounded up ("1500m" -> 2, "1Gi" -> 1073741824). */
int fr_quantity_parse_value(const char *s, int64_t *value);

/* Formats milli-units canonically the way Kubernetes prints them: "500m",
 * "2", and binary suffixes when the value is an exact multiple
 * ("1Gi", "512Mi"). Returns the length written (NUL included in <cap>). */
size_t fr_quantity_format_milli(int64_t milli, char *out, size_t cap);
/* Formats whole bytes with binary suffixes when exact ("32Gi"), else plain. */
size_t fr_quantity_format_bytes(int64_t bytes, char *out, size_t cap);

#endif
