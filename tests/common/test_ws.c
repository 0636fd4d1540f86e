/* test_ws.c - RFC 6455 framing: headers, masking, keys, the reader. */
#include "fr/ws.h"

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

/* The masking key used in the examples of RFC 6455 section 5.7. */
static const uint8_t rfc_mask[4] = {0x37, 0xfa, 0x21, 0x3d};

/* ---- helpers ---- */

#define MAX_EVENTS 16

struct event {
  int opcode;
  uint8_t *data;
  size_t len;
};

struct recorder {
  struct event ev[MAX_EVENTS];
  int n;
  int ret; /* what the callback returns */
};

static int record_cb(void *arg, int opcode, const uint8_t *data, size_t len) {
  struct recorder *rec = arg;
  struct event *e;

  ck_assert_int_lt(rec->n, MAX_EVENTS);
  ck_assert_ptr_nonnull(data);
  e = &rec->ev[rec->n++];
  e->opcode = opcode;
  e->len = len;
  e->data = malloc(len > 0 ? len : 1);
  ck_assert_ptr_nonnull(e->data);
  if (len > 0)
    memcpy(e->data, data, len);
  return rec->ret;
}

static void recorder_free(struct recorder *rec) {
  for (int i = 0; i < rec->n; i++)
    free(rec->ev[i].data);
  rec->n = 0;
}

static void assert_event(const struct recorder *rec, int i, int opcode,
                         const void *data, size_t len) {
  ck_assert_int_gt(rec->n, i);
  ck_assert_int_eq(rec->ev[i].opcode, opcode);
  ck_assert_uint_eq(rec->ev[i].len, len);
  ck_assert_mem_eq(rec->ev[i].data, data, len);
}

/* Writes one frame into <out>; masked frames use rfc_mask. Returns its size. */
static size_t put_frame(uint8_t *out, int fin, int opcode, const void *payload,
                        size_t len, int masked) {
  size_t n = fr_ws_write_header(out, fin, opcode, len, masked ? rfc_mask : NULL);

  if (len > 0)
    memcpy(out + n, payload, len);
  if (masked)
    fr_ws_mask(out + n, len, rfc_mask, 0);
  return n + len;
}

/* ---- headers ---- */

START_TEST(header_7bit_length_roundtrips_in_two_bytes) {
  uint8_t buf[FR_WS_MAX_HEADER];
  struct fr_ws_frame_hdr h;
  size_t n = fr_ws_write_header(buf, 1, FR_WS_OP_TEXT, 125, NULL);

  ck_assert_uint_eq(n, 2);
  ck_assert_uint_eq(buf[0], 0x81);
  ck_assert_uint_eq(buf[1], 125);
  ck_assert_int_eq(fr_ws_parse_header(buf, n, &h), 2);
  ck_assert_int_eq(h.fin, 1);
  ck_assert_int_eq(h.rsv, 0);
  ck_assert_int_eq(h.opcode, FR_WS_OP_TEXT);
  ck_assert_int_eq(h.masked, 0);
  ck_assert_uint_eq(h.payload_len, 125);
  ck_assert_uint_eq(h.header_len, 2);
}
END_TEST

START_TEST(header_rfc_masked_hello_matches_wire_bytes) {
  /* RFC 6455 section 5.7: a single-frame masked text message "Hello". */
  static const uint8_t wire[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f,
                                 0x9f, 0x4d, 0x51, 0x58};
  uint8_t buf[32];
  struct fr_ws_frame_hdr h;
  size_t n = put_frame(buf, 1, FR_WS_OP_TEXT, "Hello", 5, 1);

  ck_assert_uint_eq(n, sizeof(wire));
  ck_assert_mem_eq(buf, wire, sizeof(wire));
  ck_assert_int_eq(fr_ws_parse_header(wire, sizeof(wire), &h), 6);
  ck_assert_int_eq(h.masked, 1);
  ck_assert_mem_eq(h.mask, rfc_mask, 4);
  ck_assert_uint_eq(h.payload_len, 5);
}
END_TEST

START_TEST(header_16bit_length_roundtrips_in_four_bytes) {
  uint8_t buf[FR_WS_MAX_HEADER];
  struct fr_ws_frame_hdr h;
  size_t n = fr_ws_write_header(buf, 1, FR_WS_OP_BINARY, 256, NULL);

  /* RFC 6455 section 5.7: 256 bytes binary in a single unmasked frame. */
  ck_assert_uint_eq(n, 4);
  ck_assert_uint_eq(buf[0], 0x82);
  ck_assert_uint_eq(buf[1], 0x7E);
  ck_assert_uint_eq(buf[2], 0x01);
  ck_assert_uint_eq(buf[3], 0x00);
  ck_assert_int_eq(fr_ws_parse_header(buf, n, &h), 4);
  ck_assert_uint_eq(h.payload_len, 256);

  n = fr_ws_write_header(buf, 0, FR_WS_OP_BINARY, 65535, rfc_mask);
  ck_assert_uint_eq(n, 8);
  ck_assert_uint_eq(buf[0], 0x02);
  ck_assert_uint_eq(buf[1], 0x80 | 126);
  ck_assert_int_eq(fr_ws_parse_header(buf, n, &h), 8);
  ck_assert_int_eq(h.fin, 0);
  ck_assert_int_eq(h.masked, 1);
  ck_assert_mem_eq(h.mask, rfc_mask, 4);
  ck_assert_uint_eq(h.payload_len, 65535);
}
END_TEST

START_TEST(header_64bit_length_roundtrips_in_ten_bytes) {
  static const uint8_t wire64k[] = {0x82, 0x7F, 0, 0, 0, 0, 0, 0x01, 0x00, 0x00};
  uint8_t buf[FR_WS_MAX_HEADER];
  struct fr_ws_frame_hdr h;
  size_t n = fr_ws_write_header(buf, 1, FR_WS_OP_BINARY, 65536, NULL);

  /* RFC 6455 section 5.7: 64KiB binary in a single unmasked frame. */
  ck_assert_uint_eq(n, 10);
  ck_assert_mem_eq(buf, wire64k, sizeof(wire64k));
  ck_assert_int_eq(fr_ws_parse_header(buf, n, &h), 10);
  ck_assert_uint_eq(h.payload_len, 65536);

  n = fr_ws_write_header(buf, 1, FR_WS_OP_BINARY, 0x0123456789ABCDEFull, rfc_mask);
  ck_assert_uint_eq(n, FR_WS_MAX_HEADER);
  ck_assert_int_eq(fr_ws_parse_header(buf, n, &h), FR_WS_MAX_HEADER);
  ck_assert_uint_eq(h.payload_len, 0x0123456789ABCDEFull);
  ck_assert_mem_eq(h.mask, rfc_mask, 4);
}
END_TEST

START_TEST(header_incomplete_needs_more_bytes) {
  uint8_t buf[FR_WS_MAX_HEADER];
  struct fr_ws_frame_hdr h;
  size_t n = fr_ws_write_header(buf, 1, FR_WS_OP_BINARY, 70000, rfc_mask);

  for (size_t i = 0; i < n; i++)
    ck_assert_int_eq(fr_ws_parse_header(buf, i, &h), 0);
  ck_assert_int_eq(fr_ws_parse_header(buf, n, &h), (int)n);
}
END_TEST

START_TEST(header_nonminimal_length_accepted) {
  static const uint8_t wire[] = {0x82, 0x7E, 0x00, 0x05};
  struct fr_ws_frame_hdr h;

  ck_assert_int_eq(fr_ws_parse_header(wire, sizeof(wire), &h), 4);
  ck_assert_uint_eq(h.payload_len, 5);
}
END_TEST

START_TEST(header_invalid_returns_eproto) {
  static const uint8_t reserved_data[] = {0x83, 0x00};
  static const uint8_t reserved_ctrl[] = {0x8B, 0x00};
  static const uint8_t fragmented_ping[] = {0x09, 0x00};
  static const uint8_t long_ping[] = {0x89, 0x7E, 0x00, 0x7E};
  static const uint8_t top_bit[] = {0x82, 0x7F, 0x80, 0, 0, 0, 0, 0, 0, 0x01};
  struct fr_ws_frame_hdr h;

  ck_assert_int_eq(fr_ws_parse_header(reserved_data, 2, &h), -EPROTO);
  ck_assert_int_eq(fr_ws_parse_header(reserved_ctrl, 2, &h), -EPROTO);
  ck_assert_int_eq(fr_ws_parse_header(fragmented_ping, 2, &h), -EPROTO);
  /* Rejected on the first two bytes, without waiting for the length. */
  ck_assert_int_eq(fr_ws_parse_header(long_ping, 2, &h), -EPROTO);
  ck_assert_int_eq(fr_ws_parse_header(top_bit, sizeof(top_bit), &h), -EPROTO);
}
END_TEST

START_TEST(header_rsv_bits_reported) {
  static const uint8_t wire[] = {0xC2, 0x00}; /* FIN + RSV1, binary */
  struct fr_ws_frame_hdr h;

  ck_assert_int_eq(fr_ws_parse_header(wire, 2, &h), 2);
  ck_assert_int_eq(h.rsv, 4);
}
END_TEST

/* ---- masking ---- */

START_TEST(mask_twice_restores_data) {
  uint8_t data[37], orig[37];

  for (size_t i = 0; i < sizeof(data); i++)
    data[i] = orig[i] = (uint8_t)(i * 7 + 3);
  fr_ws_mask(data, sizeof(data), rfc_mask, 0);
  ck_assert_uint_eq(data[0], orig[0] ^ 0x37);
  ck_assert_uint_eq(data[5], orig[5] ^ 0xfa);
  ck_assert_mem_ne(data, orig, sizeof(data));
  fr_ws_mask(data, sizeof(data), rfc_mask, 0);
  ck_assert_mem_eq(data, orig, sizeof(data));
}
END_TEST

START_TEST(mask_in_pieces_with_offsets_matches_whole) {
  uint8_t whole[100], pieces[100];
  static const size_t cuts[] = {0, 1, 3, 4, 9, 10, 50, 51, 100};

  for (size_t i = 0; i < sizeof(whole); i++)
    whole[i] = pieces[i] = (uint8_t)(255 - i);
  fr_ws_mask(whole, sizeof(whole), rfc_mask, 0);
  for (size_t c = 0; c + 1 < sizeof(cuts) / sizeof(cuts[0]); c++)
    fr_ws_mask(pieces + cuts[c], cuts[c + 1] - cuts[c], rfc_mask, cuts[c]);
  ck_assert_mem_eq(pieces, whole, sizeof(whole));
}
END_TEST

/* ---- handshake keys ---- */

START_TEST(accept_key_rfc_example_matches) {
  char out[29];

  memset(out, 'x', sizeof(out));
  /* RFC 6455 section 1.3. */
  fr_ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", out);
  ck_assert_str_eq(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}
END_TEST

START_TEST(client_key_is_base64_of_16_fresh_bytes) {
  char a[25], b[25];
  unsigned char raw[32];

  fr_ws_client_key(a);
  fr_ws_client_key(b);
  ck_assert_uint_eq(strlen(a), 24);
  ck_assert_str_ne(a, b);
  /* EVP_DecodeBlock counts the "==" padding, hence 18 for 16 bytes. */
  ck_assert_int_eq(EVP_DecodeBlock(raw, (const unsigned char *)a, 24), 18);
  ck_assert_str_eq(a + 22, "==");
}
END_TEST

/* ---- reader ---- */

START_TEST(reader_fed_bytewise_delivers_each_message) {
  uint8_t wire[512];
  size_t n = 0;
  struct fr_ws_reader r;
  struct recorder rec = {0};
  uint8_t big[300];

  memset(big, 0xAB, sizeof(big));
  n += put_frame(wire + n, 1, FR_WS_OP_TEXT, "Hello", 5, 1);
  n += put_frame(wire + n, 1, FR_WS_OP_PING, "", 0, 1);
  n += put_frame(wire + n, 1, FR_WS_OP_BINARY, big, sizeof(big), 1);
  n += put_frame(wire + n, 1, FR_WS_OP_CLOSE, "\x03\xe8", 2, 1);

  fr_ws_reader_init(&r, 1, 1024);
  for (size_t i = 0; i < n; i++)
    ck_assert_int_eq(fr_ws_reader_feed(&r, wire + i, 1, record_cb, &rec), 0);
  ck_assert_int_eq(rec.n, 4);
  assert_event(&rec, 0, FR_WS_OP_TEXT, "Hello", 5);
  assert_event(&rec, 1, FR_WS_OP_PING, "", 0);
  assert_event(&rec, 2, FR_WS_OP_BINARY, big, sizeof(big));
  assert_event(&rec, 3, FR_WS_OP_CLOSE, "\x03\xe8", 2);
  ck_assert_int_eq(r.close_code, 0);
  ck_assert_uint_eq(r.in_len, 0);
  fr_ws_reader_free(&r);
  recorder_free(&rec);
}
END_TEST

START_TEST(reader_fragments_with_ping_reassemble_after_ping) {
  /* RFC 6455 section 5.7: "Hel" + "lo" unmasked, with a ping between. */
  static const uint8_t wire[] = {0x01, 0x03, 'H', 'e', 'l',
                                 0x89, 0x02, 'h', 'i',
                                 0x00, 0x01, 'l',
                                 0x80, 0x01, 'o'};
  struct fr_ws_reader r;
  struct recorder rec = {0};

  fr_ws_reader_init(&r, 0, 1024);
  ck_assert_int_eq(fr_ws_reader_feed(&r, wire, 6, record_cb, &rec), 0);
  ck_assert_int_eq(rec.n, 0);
  ck_assert_int_eq(fr_ws_reader_feed(&r, wire + 6, sizeof(wire) - 6, record_cb, &rec), 0);
  ck_assert_int_eq(rec.n, 2);
  assert_event(&rec, 0, FR_WS_OP_PING, "hi", 2);
  assert_event(&rec, 1, FR_WS_OP_TEXT, "Hello", 5);
  ck_assert_int_eq(r.msg_opcode, 0);
  fr_ws_reader_free(&r);
  recorder_free(&rec);
}
END_TEST

START_TEST(reader_masked_fragments_reassemble_bytewise) {
  uint8_t wire[128];
  size_t n = 0;
  struct fr_ws_reader r;
  struct recorder rec = {0};

  n += put_frame(wire + n, 0, FR_WS_OP_BINARY, "\x01" "abc", 4, 1);
  n += put_frame(wire + n, 1, FR_WS_OP_PONG, "p", 1, 1);
  n += put_frame(wire + n, 0, FR_WS_OP_CONT, "", 0, 1);
  n += put_frame(wire + n, 1, FR_WS_OP_CONT, "defgh", 5, 1);

  fr_ws_reader_init(&r, 1, 9);
  for (size_t i = 0; i < n; i++)
    ck_assert_int_eq(fr_ws_reader_feed(&r, wire + i, 1, record_cb, &rec), 0);
  ck_assert_int_eq(rec.n, 2);
  assert_event(&rec, 0, FR_WS_OP_PONG, "p", 1);
  assert_event(&rec, 1, FR_WS_OP_BINARY, "\x01" "abcdefgh", 9);
  fr_ws_reader_free(&r);
  recorder_free(&rec);
}
END_TEST

START_TEST(reader_large_message_in_chunks_intact) {
  size_t plen = 70000, n;
  uint8_t *payload = malloc(plen), *wire = malloc(plen + FR_WS_MAX_HEADER);
  struct fr_ws_reader r;
  struct recorder rec = {0};

  ck_assert_ptr_nonnull(payload);
  ck_assert_ptr_nonnull(wire);
  for (size_t i = 0; i < plen; i++)
    payload[i] = (uint8_t)(i * 31 + (i >> 8));
  n = put_frame(wire, 1, FR_WS_OP_BINARY, payload, plen, 1);
  ck_assert_uint_eq(n, plen + FR_WS_MAX_HEADER);

  fr_ws_reader_init(&r, 1, plen);
  for (size_t off = 0; off < n; off += 4093) {
    size_t chunk = n - off < 4093 ? n - off : 4093;
    ck_assert_int_eq(fr_ws_reader_feed(&r, wire + off, chunk, record_cb, &rec), 0);
  }
  ck_assert_int_eq(rec.n, 1);
  assert_event(&rec, 0, FR_WS_OP_BINARY, payload, plen);
  fr_ws_reader_free(&r);
  recorder_free(&rec);
  free(payload);
  free(wire);
}
END_TEST

START_TEST(reader_empty_message_delivered) {
  static const uint8_t wire[] = {0x82, 0x00};
  struct fr_ws_reader r;
  struct recorder rec = {0};

  fr_ws_reader_init(&r, 0, 16);
  ck_assert_int_eq(fr_ws_reader_feed(&r, wire, sizeof(wire), record_cb, &rec), 0);
  ck_assert_int_eq(rec.n, 1);
  assert_event(&rec, 0, FR_WS_OP_BINARY, "", 0);
  fr_ws_reader_free(&r);
  recorder_free(&rec);
}
END_TEST

START_TEST(reader_callback_nonzero_stops_and_keeps_rest) {
  uint8_t wire[64];
  size_t n = 0;
  struct fr_ws_reader r;
  struct recorder rec = {0};

  n += put_frame(wire + n, 1, FR_WS_OP_BINARY, "one", 3, 0);
  n += put_frame(wire + n, 1, FR_WS_OP_BINARY, "two", 3, 0);
  n += put_frame(wire + n, 1, FR_WS_OP_BINARY, "three", 5, 0);

  fr_ws_reader_init(&r, 0, 16);
  rec.ret = 7;
  ck_assert_int_eq(fr_ws_reader_feed(&r, wire, n, record_cb, &rec), 7);
  ck_assert_int_eq(rec.n, 1);
  assert_event(&rec, 0, FR_WS_OP_BINARY, "one", 3);
  ck_assert_int_eq(r.close_code, 0);
  ck_assert_uint_eq(r.in_len, n - 5);

  /* Resuming with no new bytes delivers what was kept. */
  rec.ret = 0;
  ck_assert_int_eq(fr_ws_reader_feed(&r, NULL, 0, record_cb, &rec), 0);
  ck_assert_int_eq(rec.n, 3);
  assert_event(&rec, 1, FR_WS_OP_BINARY, "two", 3);
  assert_event(&rec, 2, FR_WS_OP_BINARY, "three", 5);
  ck_assert_uint_eq(r.in_len, 0);
  fr_ws_reader_free(&r);
  recorder_free(&rec);
}
END_TEST

START_TEST(reader_server_unmasked_frame_fails_1002) {
  uint8_t wire[16];
  size_t n = put_frame(wire, 1, FR_WS_OP_BINARY, "x", 1, 0);
  struct fr_ws_reader r;
  struct recorder rec = {0};

  fr_ws_reader_init(&r, 1, 16);
  ck_assert_int_eq(fr_ws_reader_feed(&r, wire, n, record_cb, &rec), -EPROTO);
  ck_assert_int_eq(r.close_code, FR_WS_CLOSE_PROTOCOL);
  ck_assert_int_eq(rec.n, 0);
  /* A failed reader stays failed. */
  n = put_frame(wire, 1, FR_WS_OP_BINARY, "x", 1, 1);
  ck_assert_int_eq(fr_ws_reader_feed(&r, wire, n, record_cb, &rec), -EPROTO);
  ck_assert_int_eq(rec.n, 0);
  fr_ws_reader_free(&r);
}
END_TEST

START_TEST(reader_client_masked_frame_fails_1002) {
  uint8_t wire[16];
  size_t n = put_frame(wire, 1, FR_WS_OP_TEXT, "x", 1, 1);
  struct fr_ws_reader r;
  struct recorder rec = {0};

  fr_ws_reader_init(&r, 0, 16);
  ck_assert_int_eq(fr_ws_reader_feed(&r, wire, n, record_cb, &rec), -EPROTO);
  ck_assert_int_eq(r.close_code, FR_WS_CLOSE_PROTOCOL);
  ck_assert_int_eq(rec.n, 0);
  fr_ws_reader_free(&r);
}
END_TEST

START_TEST(reader_oversized_frame_fails_1009_on_header) {
  uint8_t hdr[FR_WS_MAX_HEADER];
  size_t n = fr_ws_write_header(hdr, 1, FR_WS_OP_BINARY, 1025, rfc_mask);
  struct fr_ws_reader r;
  struct recorder rec = {0};

  fr_ws_reader_init(&r, 1, 1024);
  /* The header alone is enough: the payload is never buffered. */
  ck_assert_int_eq(fr_ws_reader_feed(&r, hdr, n, record_cb, &rec), -EMSGSIZE);
  ck_assert_int_eq(r.close_code, FR_WS_CLOSE_TOO_BIG);
  ck_assert_int_eq(rec.n, 0);
  fr_ws_reader_free(&r);
}
END_TEST

START_TEST(reader_oversized_fragments_fail_1009) {
  uint8_t wire[64];
  size_t n = 0;
  struct fr_ws_reader r;
  struct recorder rec = {0};

  n += put_frame(wire + n, 0, FR_WS_OP_BINARY, "12345", 5, 0);
  n += put_frame(wire + n, 0, FR_WS_OP_CONT, "678", 3, 0);
  n += put_frame(wire + n, 1, FR_WS_OP_CONT, "9", 1, 0);

  fr_ws_reader_init(&r, 0, 8);
  ck_assert_int_eq(fr_ws_reader_feed(&r, wire, n, record_cb, &rec), -EMSGSIZE);
  ck_assert_int_eq(r.close_code, FR_WS_CLOSE_TOO_BIG);
  ck_assert_int_eq(rec.n, 0);
  fr_ws_reader_free(&r);
}
END_TEST

START_TEST(reader_message_at_limit_accepted) {
  uint8_t wire[64];
  size_t n = 0;
  struct fr_ws_reader r;
  struct recorder rec = {0};

  n += put_frame(wire + n, 0, FR_WS_OP_BINARY, "12345", 5, 0);
  n += put_frame(wire + n, 1, FR_WS_OP_CONT, "678", 3, 0);

  fr_ws_reader_init(&r, 0, 8);
  ck_assert_int_eq(fr_ws_reader_feed(&r, wire, n, record_cb, &rec), 0);
  ck_assert_int_eq(rec.n, 1);
  assert_event(&rec, 0, FR_WS_OP_BINARY, "12345678", 8);
  fr_ws_reader_free(&r);
  recorder_free(&rec);
}
END_TEST

START_TEST(reader_control_over_125_fails_1002) {
  static const uint8_t wire[] = {0x89, 0x7E, 0x00, 0x7E};
  struct fr_ws_reader r;
  struct recorder rec = {0};

  fr_ws_reader_init(&r, 0, 1024);
  ck_assert_int_eq(fr_ws_reader_feed(&r, wire, sizeof(wire), record_cb, &rec), -EPROTO);
  ck_assert_int_eq(r.close_code, FR_WS_CLOSE_PROTOCOL);
  ck_assert_int_eq(rec.n, 0);
  fr_ws_reader_free(&r);
}
END_TEST

START_TEST(reader_fragmented_control_fails_1002) {
  static const uint8_t wire[] = {0x08, 0x00}; /* close without FIN */
  struct fr_ws_reader r;
  struct recorder rec = {0};

  fr_ws_reader_init(&r, 0, 1024);
  ck_assert_int_eq(fr_ws_reader_feed(&r, wire, sizeof(wire), record_cb, &rec), -EPROTO);
  ck_assert_int_eq(r.close_code, FR_WS_CLOSE_PROTOCOL);
  fr_ws_reader_free(&r);
}
END_TEST

START_TEST(reader_reserved_opcode_fails_1002) {
  static const uint8_t wire[] = {0x83, 0x00};
  struct fr_ws_reader r;
  struct recorder rec = {0};

  fr_ws_reader_init(&r, 0, 1024);
  ck_assert_int_eq(fr_ws_reader_feed(&r, wire, sizeof(wire), record_cb, &rec), -EPROTO);
  ck_assert_int_eq(r.close_code, FR_WS_CLOSE_PROTOCOL);
  fr_ws_reader_free(&r);
}
END_TEST

START_TEST(reader_rsv_bits_fail_1002) {
  static const uint8_t wire[] = {0x92, 0x01, 'x'}; /* FIN + RSV3, binary */
  struct fr_ws_reader r;
  struct recorder rec = {0};

  fr_ws_reader_init(&r, 0, 1024);
  ck_assert_int_eq(fr_ws_reader_feed(&r, wire, sizeof(wire), record_cb, &rec), -EPROTO);
  ck_assert_int_eq(r.close_code, FR_WS_CLOSE_PROTOCOL);
  ck_assert_int_eq(rec.n, 0);
  fr_ws_reader_free(&r);
}
END_TEST

START_TEST(reader_continuation_without_start_fails_1002) {
  static const uint8_t wire[] = {0x80, 0x01, 'x'};
  struct fr_ws_reader r;
  struct recorder rec = {0};

  fr_ws_reader_init(&r, 0, 1024);
  ck_assert_int_eq(fr_ws_reader_feed(&r, wire, sizeof(wire), record_cb, &rec), -EPROTO);
  ck_assert_int_eq(r.close_code, FR_WS_CLOSE_PROTOCOL);
  ck_assert_int_eq(rec.n, 0);
  fr_ws_reader_free(&r);
}
END_TEST

START_TEST(reader_data_frame_inside_fragmented_message_fails_1002) {
  static const uint8_t wire[] = {0x02, 0x01, 'a', 0x82, 0x01, 'b'};
  struct fr_ws_reader r;
  struct recorder rec = {0};

  fr_ws_reader_init(&r, 0, 1024);
  ck_assert_int_eq(fr_ws_reader_feed(&r, wire, sizeof(wire), record_cb, &rec), -EPROTO);
  ck_assert_int_eq(r.close_code, FR_WS_CLOSE_PROTOCOL);
  ck_assert_int_eq(rec.n, 0);
  fr_ws_reader_free(&r);
}
END_TEST

/* ---- close payload ---- */

START_TEST(parse_close_empty_gives_1005) {
  int code = 0;
  const char *reason = NULL;
  size_t reason_len = 99;

  ck_assert_int_eq(fr_ws_parse_close(NULL, 0, &code, &reason, &reason_len), 0);
  ck_assert_int_eq(code, 1005);
  ck_assert_uint_eq(reason_len, 0);
}
END_TEST

START_TEST(parse_close_one_byte_eproto) {
  static const uint8_t p[] = {0x03};
  int code = 0;
  const char *reason;
  size_t reason_len;

  ck_assert_int_eq(fr_ws_parse_close(p, 1, &code, &reason, &reason_len), -EPROTO);
}
END_TEST

START_TEST(parse_close_code_and_reason_returned) {
  static const uint8_t p[] = {0x03, 0xE9, 'b', 'y', 'e'}; /* 1001 "bye" */
  int code = 0;
  const char *reason = NULL;
  size_t reason_len = 0;

  ck_assert_int_eq(fr_ws_parse_close(p, sizeof(p), &code, &reason, &reason_len), 0);
  ck_assert_int_eq(code, FR_WS_CLOSE_GOING_AWAY);
  ck_assert_uint_eq(reason_len, 3);
  ck_assert_mem_eq(reason, "bye", 3);
  ck_assert_ptr_eq(reason, (const char *)p + 2);
}
END_TEST

START_TEST(parse_close_wire_forbidden_codes_eproto) {
  static const int bad[] = {0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535};
  static const int good[] = {1000, 1002, 1003, 1007, 1009, 1011, 1014, 3000, 4999};
  uint8_t p[2];
  int code;
  const char *reason;
  size_t reason_len;

  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    p[0] = (uint8_t)(bad[i] >> 8);
    p[1] = (uint8_t)bad[i];
    ck_assert_int_eq(fr_ws_parse_close(p, 2, &code, &reason, &reason_len), -EPROTO);
  }
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    p[0] = (uint8_t)(good[i] >> 8);
    p[1] = (uint8_t)good[i];
    code = 0;
    ck_assert_int_eq(fr_ws_parse_close(p, 2, &code, &reason, &reason_len), 0);
    ck_assert_int_eq(code, good[i]);
    ck_assert_uint_eq(reason_len, 0);
  }
}
END_TEST

static Suite *ws_suite(void) {
  Suite *s = suite_create("ws");
  TCase *tc;

  tc = tcase_create("header");
  tcase_add_test(tc, header_7bit_length_roundtrips_in_two_bytes);
  tcase_add_test(tc, header_rfc_masked_hello_matches_wire_bytes);
  tcase_add_test(tc, header_16bit_length_roundtrips_in_four_bytes);
  tcase_add_test(tc, header_64bit_length_roundtrips_in_ten_bytes);
  tcase_add_test(tc, header_incomplete_needs_more_bytes);
  tcase_add_test(tc, header_nonminimal_length_accepted);
  tcase_add_test(tc, header_invalid_returns_eproto);
  tcase_add_test(tc, header_rsv_bits_reported);
  suite_add_tcase(s, tc);

  tc = tcase_create("mask");
  tcase_add_test(tc, mask_twice_restores_data);
  tcase_add_test(tc, mask_in_pieces_with_offsets_matches_whole);
  suite_add_tcase(s, tc);

  tc = tcase_create("keys");
  tcase_add_test(tc, accept_key_rfc_example_matches);
  tcase_add_test(tc, client_key_is_base64_of_16_fresh_bytes);
  suite_add_tcase(s, tc);

  tc = tcase_create("reader");
  tcase_add_test(tc, reader_fed_bytewise_delivers_each_message);
  tcase_add_test(tc, reader_fragments_with_ping_reassemble_after_ping);
  tcase_add_test(tc, reader_masked_fragments_reassemble_bytewise);
  tcase_add_test(tc, reader_large_message_in_chunks_intact);
  tcase_add_test(tc, reader_empty_message_delivered);
  tcase_add_test(tc, reader_callback_nonzero_stops_and_keeps_rest);
  tcase_add_test(tc, reader_server_unmasked_frame_fails_1002);
  tcase_add_test(tc, reader_client_masked_frame_fails_1002);
  tcase_add_test(tc, reader_oversized_frame_fails_1009_on_header);
  tcase_add_test(tc, reader_oversized_fragments_fail_1009);
  tcase_add_test(tc, reader_message_at_limit_accepted);
  tcase_add_test(tc, reader_control_over_125_fails_1002);
  tcase_add_test(tc, reader_fragmented_control_fails_1002);
  tcase_add_test(tc, reader_reserved_opcode_fails_1002);
  tcase_add_test(tc, reader_rsv_bits_fail_1002);
  tcase_add_test(tc, reader_continuation_without_start_fails_1002);
  tcase_add_test(tc, reader_data_frame_inside_fragmented_message_fails_1002);
  suite_add_tcase(s, tc);

  tc = tcase_create("close");
  tcase_add_test(tc, parse_close_empty_gives_1005);
  tcase_add_test(tc, parse_close_one_byte_eproto);
  tcase_add_test(tc, parse_close_code_and_reason_returned);
  tcase_add_test(tc, parse_close_wire_forbidden_codes_eproto);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(ws_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
