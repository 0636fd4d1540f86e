/* fuzz_ws.c - the WebSocket frame reader (common/src/ws.c: fr_ws_reader,
 * fr_ws_parse_header, fr_ws_parse_close) on arbitrary bytes, as the HTTP
 * server gets them from a client (masked frames) and the exec client from
 * a cluster's API server (unmasked frames).
 *
 * Input: the first byte sets up the readers, the rest is the byte stream.
 *   bit 0      expect_masked (1: a server's reader, 0: a client's)
 *   bits 1-2   max_message: none, 16, 125 or 4096 bytes
 *   bits 3-7   how the second reader gets the stream: in pieces of
 *              1..32 bytes (cycling through a pattern derived from them)
 *
 * Checked beyond "no crash":
 *   - one reader fed the whole stream at once and one fed it in small
 *     pieces hand over the same messages (opcode and bytes, in order) and
 *     end in the same state (the same error and close code, or none);
 *   - every message is what the reader promises: a data message is text or
 *     binary and within max_message, a control frame is close, ping or pong
 *     with at most 125 bytes; a close payload fr_ws_parse_close() accepts
 *     has a code that may be sent on the wire;
 *   - the messages, framed again with fr_ws_write_header() (and masked
 *     with fr_ws_mask() in pieces when the reader expects masking), read
 *     back as the same messages: writer and reader agree.
 * The reader's callback stops it (returns 1) at every close frame, as the
 * exec client does; the harness then resumes it with an empty feed, so
 * the "keep the rest of the input" path runs too.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fr/buf.h"
#include "fr/ws.h"

static void check(int cond) {
  if (!cond)
    abort();
}

struct run {
  struct fr_ws_reader rd;
  struct fr_buf log; /* per message: opcode, 8-byte length, the bytes */
  size_t nmsgs;
};

static int on_message(void *arg, int opcode, const uint8_t *data, size_t len) {
  struct run *r = arg;
  uint64_t l = len;

  check(data != NULL);
  if (opcode == FR_WS_OP_CLOSE || opcode == FR_WS_OP_PING || opcode == FR_WS_OP_PONG) {
    check(len <= 125);
  } else {
    check(opcode == FR_WS_OP_TEXT || opcode == FR_WS_OP_BINARY);
    check(r->rd.max_message == 0 || len <= r->rd.max_message);
  }
  if (opcode == FR_WS_OP_CLOSE) {
    int code = -1;
    const char *reason = NULL;
    size_t rlen = 99999;
    if (fr_ws_parse_close(data, len, &code, &reason, &rlen) == 0) {
      check(reason != NULL);
      if (len == 0)
        check(code == 1005 && rlen == 0);
      else
        check(code >= 1000 && code <= 4999 && code != 1004 && code != 1005 && code != 1006 && code != 1015 &&
              rlen == len - 2 && reason == (const char *)data + 2);
    } else {
      check(len == 1 || len >= 2);
    }
  }
  check(fr_buf_putc(&r->log, (char)opcode) == 0);
  check(fr_buf_append(&r->log, &l, sizeof(l)) == 0);
  check(fr_buf_append(&r->log, data, len) == 0);
  r->nmsgs++;
  return opcode == FR_WS_OP_CLOSE ? 1 : 0;
}

/* Feeds <len> bytes, resuming the reader (empty feeds) after every stop.
 * Returns 0 or the reader's negative error. */
static int feed(struct run *r, const uint8_t *data, size_t len) {
  int rc = fr_ws_reader_feed(&r->rd, data, len, on_message, r);

  while (rc > 0) {
    size_t before = r->rd.in_len;
    rc = fr_ws_reader_feed(&r->rd, NULL, 0, on_message, r);
    /* A resumed reader either takes a frame or waits for more bytes. */
    check(rc != 1 || r->rd.in_len < before);
  }
  if (rc < 0) {
    check(rc == -EPROTO || rc == -EMSGSIZE);
    check(r->rd.close_code == (rc == -EMSGSIZE ? FR_WS_CLOSE_TOO_BIG : FR_WS_CLOSE_PROTOCOL));
    /* A failed reader stays failed. */
    check(fr_ws_reader_feed(&r->rd, (const uint8_t *)"\x82\x00", 2, on_message, r) == rc);
  }
  return rc;
}

static void run_init(struct run *r, int masked, size_t max) {
  fr_ws_reader_init(&r->rd, masked, max);
  fr_buf_init(&r->log);
  r->nmsgs = 0;
}

static void run_free(struct run *r) {
  fr_ws_reader_free(&r->rd);
  fr_buf_free(&r->log);
}

/* The messages in <log> framed again: one frame each (data messages
 * unfragmented), masked with a key that changes per frame when <masked>. */
static void reframe(const struct fr_buf *log, int masked, struct fr_buf *out) {
  size_t off = 0;
  unsigned n = 0;

  while (off < log->len) {
    int opcode = (unsigned char)log->data[off];
    uint64_t len;
    uint8_t hdr[FR_WS_MAX_HEADER], mask[4] = {0x37, 0xfa, (uint8_t)n, (uint8_t)(n >> 8)};
    size_t hl, start;

    memcpy(&len, log->data + off + 1, sizeof(len));
    hl = fr_ws_write_header(hdr, 1, opcode, len, masked ? mask : NULL);
    check(hl >= 2 && hl <= FR_WS_MAX_HEADER);
    check(fr_buf_append(out, hdr, hl) == 0);
    start = out->len;
    check(fr_buf_append(out, log->data + off + 1 + sizeof(len), (size_t)len) == 0);
    if (masked && len > 0) {
      /* In two pieces, so the offset rotation of fr_ws_mask() is used. */
      size_t half = (size_t)len / 2;
      fr_ws_mask((uint8_t *)out->data + start, half, mask, 0);
      fr_ws_mask((uint8_t *)out->data + start + half, (size_t)len - half, mask, half);
    }
    off += 1 + sizeof(len) + (size_t)len;
    n++;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const size_t maxes[] = {0, 16, 125, 4096};
  struct run whole, pieces, again;
  struct fr_buf framed;
  int masked, rc_whole, rc_pieces, rc_again;
  size_t max, off, step, n;

  if (size == 0)
    return 0;
  masked = data[0] & 1;
  max = maxes[(data[0] >> 1) & 3];
  step = (size_t)(data[0] >> 3) + 1;
  data++;
  size--;

  run_init(&whole, masked, max);
  rc_whole = feed(&whole, data, size);

  run_init(&pieces, masked, max);
  rc_pieces = 0;
  for (off = 0, n = 0; off < size && rc_pieces == 0; n++) {
    /* Piece sizes cycle through 1..step, so header and payload
     * boundaries land everywhere. */
    size_t k = 1 + (n % step);
    if (k > size - off)
      k = size - off;
    rc_pieces = feed(&pieces, data + off, k);
    off += k;
  }
  check(rc_whole == rc_pieces);
  check(whole.rd.close_code == pieces.rd.close_code);
  check(whole.nmsgs == pieces.nmsgs && whole.log.len == pieces.log.len);
  check(whole.log.len == 0 || memcmp(whole.log.data, pieces.log.data, whole.log.len) == 0);
  if (rc_whole == 0)
    check(whole.rd.in_len == pieces.rd.in_len);

  /* Writer and reader agree. */
  fr_buf_init(&framed);
  reframe(&whole.log, masked, &framed);
  run_init(&again, masked, max);
  rc_again = feed(&again, (const uint8_t *)framed.data, framed.len);
  check(rc_again == 0 && again.rd.in_len == 0);
  check(again.nmsgs == whole.nmsgs && again.log.len == whole.log.len);
  check(whole.log.len == 0 || memcmp(again.log.data, whole.log.data, whole.log.len) == 0);

  fr_buf_free(&framed);
  run_free(&again);
  run_free(&pieces);
  run_free(&whole);
  return 0;
}
