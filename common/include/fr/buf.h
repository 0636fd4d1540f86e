/* fr/buf.h - growable byte buffer.
 *
 * A buffer owns its memory. Every function that grows it returns 0 or
 * -ENOMEM and leaves the contents unchanged on failure, so a request path can
 * turn the failure into a 503 instead of aborting. The data is always kept
 * NUL-terminated (not counted in len) so text can be used as a C string.
 */
#ifndef FR_BUF_H
#define FR_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct fr_buf {
  char *data;   /* NULL until the first append */
  size_t len;
  size_t cap;
};

void fr_buf_init(struct fr_buf *b);
/* Frees the memory and re-initialises <b>; accepts NULL. */
void fr_buf_free(struct fr_buf *b);
/* Keeps the memory, forgets the contents. */
void fr_buf_reset(struct fr_buf *b);
/* Makes room for <extra> more bytes (plus the terminator). */
int fr_buf_reserve(struct fr_buf *b, size_t extra);
int fr_buf_append(struct fr_buf *b, const void *data, size_t len);
int fr_buf_puts(struct fr_buf *b, const char *s);
int fr_buf_putc(struct fr_buf *b, char c);
int fr_buf_printf(struct fr_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int fr_buf_vprintf(struct fr_buf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* Appends <s> as a JSON string literal, quotes included. Bytes that are not
 * valid UTF-8 are replaced by U+FFFD so the output is always valid JSON. */
int fr_buf_put_json_str(struct fr_buf *b, const char *s, size_t len);
/* The same without the quotes. */
int fr_buf_put_json_chars(struct fr_buf *b, const char *s, size_t len);
/* Bytes fr_buf_put_json_chars() appends for <s> when it is valid UTF-8:
 * control characters take 6 (\u00XX), the quote, the backslash and
 * \n \t \r \b \f take 2. */
size_t fr_json_escaped_len(const char *s, size_t len);

/* The well-formed UTF-8 character at <s> (no overlongs, surrogates or code
 * points past U+10FFFF: what a JSON string may carry): its length 1-4; 0
 * when malformed; -1 when the <avail> bytes are the start of one cut short. */
int fr_utf8_char(const unsigned char *s, size_t avail);
/* Drops the first <n> bytes. */
void fr_buf_consume(struct fr_buf *b, size_t n);
/* Hands the memory to the caller (free() it) and re-initialises <b>. Returns
 * an empty allocated string rather than NULL for an empty buffer; NULL only
 * on out-of-memory. */
char *fr_buf_detach(struct fr_buf *b, size_t *len_out);

#endif
