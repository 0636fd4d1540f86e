/* ndjson.h - fedctl's incremental reader of the data plane's NDJSON
 * answers (docs/api.md "Inside a sandbox"): a streaming exec and a
 * process's output.
 *
 * Bytes go in as the network delivers them, cut anywhere (inside a line,
 * inside a UTF-8 character, inside a base64 group); each complete line is
 * decoded on its own:
 *   {"stdout":"..."} {"stderr":"..."}            text, written as is
 *   {"stdout_b64":"..."} {"stderr_b64":"..."}    bytes, base64 decoded
 *   {"exit_code":N|null,"timed_out":bool,...}    the end
 *   {"error":{"code":..,"message":..}}           the stream broke
 *   {"running":true}                             (output without follow)
 *   {"lost_bytes":N}                             output dropped before attach
 * Unknown members are ignored, so the API can add some. No I/O and no
 * libcurl here: output goes to a callback, which keeps this unit-testable.
 */
#ifndef FEDCTL_NDJSON_H
#define FEDCTL_NDJSON_H

#include <stddef.h>
#include <stdint.h>

#include "fr/buf.h"

/* The longest line accepted. The router cuts output into agent-sized
 * pieces (well under 1 MiB, base64 included); a longer line means the
 * peer is not the router. */
#define FC_ND_MAX_LINE ((size_t)8 << 20)

/* Output of the remote command: <fd> is 1 (stdout) or 2 (stderr). Returns
 * 0, or a negative errno that stops the feed and is returned from
 * fc_nd_feed(). */
typedef int (*fc_nd_out_cb)(int fd, const void *data, size_t len, void *arg);

struct fc_nd {
  struct fr_buf line;       /* bytes of the line not yet complete */
  fc_nd_out_cb out;
  void *out_arg;
  /* What the stream said so far. */
  int ended;                /* the exit line arrived */
  int64_t exit_code;        /* -1 when the line said null (timed out) */
  int timed_out;
  int running;              /* {"running":true}: ended without an exit */
  int64_t lost_bytes;       /* sum of {"lost_bytes":N} */
  int failed;               /* an {"error":...} line arrived */
  char err_code[64];
  char err_msg[512];
};

/* <out> (not NULL) receives the command's output; <arg> is passed to it. */
void fc_nd_init(struct fc_nd *d, fc_nd_out_cb out, void *arg);
/* Releases the line buffer; accepts NULL. */
void fc_nd_close(struct fc_nd *d);
/* Feeds <len> bytes of <data> (borrowed). Returns 0; -EPROTO for a line
 * that is not JSON of the shapes above, longer than FC_ND_MAX_LINE, or
 * after the end line; -ENOMEM; or the output callback's error. */
int fc_nd_feed(struct fc_nd *d, const char *data, size_t len);
/* The answer ended: -EPROTO when it stopped inside a line, else 0. */
int fc_nd_finish(const struct fc_nd *d);

#endif
