/* ndjson.c - incremental reader of the data plane's NDJSON answers (see
 * ndjson.h for the line shapes).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fr/util.h"
#include "ndjson.h"

void fc_nd_init(struct fc_nd *d, fc_nd_out_cb out, void *arg) {
  memset(d, 0, sizeof(*d));
  fr_buf_init(&d->line);
  d->out = out;
  d->out_arg = arg;
}

void fc_nd_close(struct fc_nd *d) {
  if (d == NULL)
    return;
  fr_buf_free(&d->line);
}

/* Member <key> of <o> as output on <fd>: text as is, "<key>_b64" decoded. */
static int put_output(struct fc_nd *d, const json_t *o, const char *key, int fd) {
  char k[16];
  const json_t *v = json_object_get(o, key);
  unsigned char *bytes;
  long n;
  int rc;

  if (v != NULL) {
    if (!json_is_string(v))
      return -EPROTO;
    return json_string_length(v) > 0 ? d->out(fd, json_string_value(v), json_string_length(v), d->out_arg) : 0;
  }
  snprintf(k, sizeof(k), "%s_b64", key);
  if ((v = json_object_get(o, k)) == NULL)
    return 0;
  if (!json_is_string(v))
    return -EPROTO;
  if ((bytes = malloc(json_string_length(v) / 4 * 3 + 3)) == NULL)
    return -ENOMEM;
  n = fr_base64_decode(json_string_value(v), json_string_length(v), bytes);
  rc = n < 0 ? -EPROTO : n > 0 ? d->out(fd, bytes, (size_t)n, d->out_arg) : 0;
  free(bytes);
  return rc;
}

/* One complete line (without its '\n'). */
static int on_line(struct fc_nd *d, const char *s, size_t len) {
  json_error_t jerr;
  json_t *o, *v, *e;
  int rc;

  if (len > 0 && s[len - 1] == '\r')
    len--;
  if (len == 0)
    return 0;
  if (d->ended || d->running || d->failed)
    return -EPROTO;   /* the end line is the last one */
  /* Output may hold NUL ("\u0000"). */
  o = json_loadb(s, len, JSON_ALLOW_NUL, &jerr);
  if (!json_is_object(o)) {
    json_decref(o);
    return -EPROTO;
  }
  if ((rc = put_output(d, o, "stdout", 1)) != 0 || (rc = put_output(d, o, "stderr", 2)) != 0)
    goto done;
  if ((v = json_object_get(o, "lost_bytes")) != NULL) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
      rc = -EPROTO;
      goto done;
    }
    d->lost_bytes += json_integer_value(v);
  }
  if (json_is_true(json_object_get(o, "running")))
    d->running = 1;
  if ((e = json_object_get(o, "error")) != NULL) {
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    d->failed = 1;
    snprintf(d->err_code, sizeof(d->err_code), "%s", code != NULL ? code : "error");
    snprintf(d->err_msg, sizeof(d->err_msg), "%s", msg != NULL ? msg : "(no message)");
  }
  if ((v = json_object_get(o, "exit_code")) != NULL) {
    d->timed_out = json_is_true(json_object_get(o, "timed_out"));
    if (json_is_integer(v))
      d->exit_code = json_integer_value(v);
    else if (json_is_null(v) && d->timed_out)
      d->exit_code = -1;
    else
      rc = -EPROTO;
    d->ended = rc == 0;
  }
done:
  json_decref(o);
  return rc;
}

int fc_nd_feed(struct fc_nd *d, const char *data, size_t len) {
  const char *nl;
  size_t n;
  int rc;

  while (len > 0) {
    nl = memchr(data, '\n', len);
    n = nl != NULL ? (size_t)(nl - data) : len;
    if (d->line.len + n > FC_ND_MAX_LINE)
      return -EPROTO;
    if (nl == NULL)
      return fr_buf_append(&d->line, data, n);
    if (d->line.len == 0) {
      /* The whole line is in <data>: no copy. */
      rc = on_line(d, data, n);
    } else {
      if (fr_buf_append(&d->line, data, n) != 0)
        return -ENOMEM;
      rc = on_line(d, d->line.data, d->line.len);
      fr_buf_reset(&d->line);
    }
    if (rc != 0)
      return rc;
    data += n + 1;
    len -= n + 1;
  }
  return 0;
}

int fc_nd_finish(const struct fc_nd *d) {
  return d->line.len > 0 ? -EPROTO : 0;
}
