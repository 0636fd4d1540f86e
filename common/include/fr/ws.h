/* fr/ws.h - RFC 6455 WebSocket framing, for both ends of a connection.
 *
 * Pure functions and a push-style reader; no I/O. The server side (fr/http.h)
 * and the router's exec client both build on this.
 */
#ifndef FR_WS_H
#define FR_WS_H

#include <stddef.h>
#include <stdint.h>

enum {
  FR_WS_OP_CONT = 0x0,
  FR_WS_OP_TEXT = 0x1,
  FR_WS_OP_BINARY = 0x2,
  FR_WS_OP_CLOSE = 0x8,
  FR_WS_OP_PING = 0x9,
  FR_WS_OP_PONG = 0xA,
};

/* Close codes (RFC 6455 section 7.4.1). */
enum {
  FR_WS_CLOSE_NORMAL = 1000,
  FR_WS_CLOSE_GOING_AWAY = 1001,
  FR_WS_CLOSE_PROTOCOL = 1002,
  FR_WS_CLOSE_UNSUPPORTED = 1003,
  FR_WS_CLOSE_ABNORMAL = 1006, /* never sent on the wire */
  FR_WS_CLOSE_INVALID_DATA = 1007,
  FR_WS_CLOSE_TOO_BIG = 1009,
  FR_WS_CLOSE_INTERNAL = 1011,
};

#define FR_WS_MAX_HEADER 14

struct fr_ws_frame_hdr {
  int fin;
  int rsv;          /* RSV1-3 bits; must be 0 without extensions */
  int opcode;
  int masked;
  uint8_t mask[4];
  uint64_t payload_len;
  size_t header_len;
};

/* Parses a frame header at the start of <buf>. Returns the header length
 * (> 0), 0 if more bytes are needed, or -EPROTO for an invalid header
 * (reserved opcode, control frame fragmented or longer than 125, a 64-bit
 * length with the top bit set, non-minimal length encoding is accepted). */
int fr_ws_parse_header(const uint8_t *buf, size_t len, struct fr_ws_frame_hdr *h);

/* Writes a frame header into <out> (FR_WS_MAX_HEADER bytes) and returns its
 * length. <mask> NULL means unmasked (server to client); a client passes 4
 * random bytes and masks the payload with fr_ws_mask(). */
size_t fr_ws_write_header(uint8_t *out, int fin, int opcode, uint64_t payload_len,
                          const uint8_t *mask);

/* XORs <data> in place with <mask>, <offset> being the position of data[0]
 * within the frame payload (so a payload can be masked in pieces). */
void fr_ws_mask(uint8_t *data, size_t len, const uint8_t mask[4], uint64_t offset);

/* Sec-WebSocket-Accept for a client's Sec-WebSocket-Key: base64(SHA1(key +
 * GUID)). <out> gets 28 characters and a NUL. */
void fr_ws_accept_key(const char *client_key, char out[29]);
/* A fresh random Sec-WebSocket-Key (base64 of 16 random bytes) in <out>. */
void fr_ws_client_key(char out[25]);

/* Incremental reader: feed it bytes as they arrive, it calls back once per
 * complete message (data frames reassembled from fragments) and once per
 * control frame (ping, pong, close; interleaving with fragments allowed).
 *
 * <expect_masked>: 1 on a server (client frames must be masked), 0 on a client
 * (server frames must not be). Violations are protocol errors. */
typedef int (*fr_ws_message_cb)(void *arg, int opcode, const uint8_t *data,
                                size_t len);

struct fr_ws_reader {
  int expect_masked;
  size_t max_message;   /* larger messages fail with FR_WS_CLOSE_TOO_BIG */
  /* private */
  uint8_t *in;          /* unconsumed input */
  size_t in_len, in_cap;
  uint8_t *msg;         /* data message being reassembled */
  size_t msg_len, msg_cap;
  int msg_opcode;       /* 0 when no fragmented message is open */
  int close_code;       /* set when feed fails */
};

void fr_ws_reader_init(struct fr_ws_reader *r, int expect_masked, size_t max_message);
void fr_ws_reader_free(struct fr_ws_reader *r);
/* Consumes <len> bytes. Returns 0; the first non-zero value <cb> returned
 * (the reader then stops, keeping the rest of the input); or -EPROTO /
 * -EMSGSIZE / -ENOMEM with r->close_code set to the code to close with. */
int fr_ws_reader_feed(struct fr_ws_reader *r, const uint8_t *data, size_t len,
                      fr_ws_message_cb cb, void *arg);

/* Parses a close frame payload: code (1005 if empty) and reason (not
 * NUL-terminated). Returns 0 or -EPROTO for a 1-byte payload or a code that
 * may not be sent on the wire. */
int fr_ws_parse_close(const uint8_t *data, size_t len, int *code,
                      const char **reason, size_t *reason_len);

#endif
