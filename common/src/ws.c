/* ws.c - RFC 6455 WebSocket framing (see fr/ws.h).
 *
 * No I/O and no event loop: the HTTP server and the exec client push bytes in
 * and get whole messages out. Text frames are not checked for UTF-8 because
 * the Kubernetes channel protocols only use binary frames.
 */
#include "fr/ws.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

/* RFC 6455 section 1.3. */
static const char ws_guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/* Buffers larger than this are released once empty, so one big message does
 * not pin megabytes on a connection that then idles for hours. */
#define WS_KEEP_CAP (64 * 1024)

/* Callbacks always get a valid pointer, even for an empty payload. */
static const uint8_t ws_empty[1];

static int is_control(int opcode) {
  return (opcode & 0x8) != 0;
}

static int is_known_opcode(int opcode) {
  switch (opcode) {
  case FR_WS_OP_CONT:
  case FR_WS_OP_TEXT:
  case FR_WS_OP_BINARY:
  case FR_WS_OP_CLOSE:
  case FR_WS_OP_PING:
  case FR_WS_OP_PONG:
    return 1;
  default:
    return 0;
  }
}

int fr_ws_parse_header(const uint8_t *buf, size_t len, struct fr_ws_frame_hdr *h) {
  size_t need = 2;
  uint64_t plen;
  int fin, opcode, masked;
  unsigned len7;

  if (len < 2)
    return 0;
  fin = (buf[0] >> 7) & 1;
  opcode = buf[0] & 0x0F;
  masked = (buf[1] >> 7) & 1;
  len7 = buf[1] & 0x7F;

  /* Decide what we can from the first two bytes, so a bad frame is rejected
   * without waiting for bytes that may never come. */
  if (!is_known_opcode(opcode))
    return -EPROTO;
  if (is_control(opcode) && (!fin || len7 > 125))
    return -EPROTO; /* section 5.5 */

  if (len7 == 126)
    need += 2;
  else if (len7 == 127)
    need += 8;
  if (masked)
    need += 4;
  if (len < need)
    return 0;

  if (len7 == 126) {
    plen = ((uint64_t)buf[2] << 8) | buf[3];
  } else if (len7 == 127) {
    plen = 0;
    for (int i = 0; i < 8; i++)
      plen = (plen << 8) | buf[2 + i];
    if (plen >> 63)
      return -EPROTO; /* section 5.2: the most significant bit MUST be 0 */
  } else {
    plen = len7;
  }

  h->fin = fin;
  h->rsv = (buf[0] >> 4) & 0x7;
  h->opcode = opcode;
  h->masked = masked;
  if (masked)
    memcpy(h->mask, buf + need - 4, 4);
  else
    memset(h->mask, 0, sizeof(h->mask));
  h->payload_len = plen;
  h->header_len = need;
  return (int)need;
}

size_t fr_ws_write_header(uint8_t *out, int fin, int opcode, uint64_t payload_len,
                          const uint8_t *mask) {
  size_t n = 2;

  out[0] = (uint8_t)((fin ? 0x80 : 0) | (opcode & 0x0F));
  if (payload_len < 126) {
    out[1] = (uint8_t)payload_len;
  } else if (payload_len <= 0xFFFF) {
    out[1] = 126;
    out[2] = (uint8_t)(payload_len >> 8);
    out[3] = (uint8_t)payload_len;
    n = 4;
  } else {
    out[1] = 127;
    for (int i = 0; i < 8; i++)
      out[2 + i] = (uint8_t)(payload_len >> (56 - 8 * i));
    n = 10;
  }
  if (mask) {
    out[1] |= 0x80;
    memcpy(out + n, mask, 4);
    n += 4;
  }
  return n;
}

void fr_ws_mask(uint8_t *data, size_t len, const uint8_t mask[4], uint64_t offset) {
  uint8_t m[4];

  /* Rotate the key once so the loop indexes it by i alone; that keeps the
   * loop simple enough for the compiler to vectorize. */
  for (int i = 0; i < 4; i++)
    m[i] = mask[(offset + (uint64_t)i) & 3];
  for (size_t i = 0; i < len; i++)
    data[i] ^= m[i & 3];
}

void fr_ws_accept_key(const char *client_key, char out[29]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  int ok = ctx != NULL &&
           EVP_DigestInit_ex(ctx, EVP_sha1(), NULL) == 1 &&
           EVP_DigestUpdate(ctx, client_key, strlen(client_key)) == 1 &&
           EVP_DigestUpdate(ctx, ws_guid, sizeof(ws_guid) - 1) == 1 &&
           EVP_DigestFinal_ex(ctx, md, &md_len) == 1 && md_len == 20;

  EVP_MD_CTX_free(ctx);
  if (!ok) {
    /* Only out of memory gets here. An empty accept value makes the client
     * fail the handshake, which is the honest outcome. */
    out[0] = '\0';
    return;
  }
  EVP_EncodeBlock((unsigned char *)out, md, 20); /* 28 chars and a NUL */
}

/* splitmix64: spreads a weak seed over all 64 bits. */
static uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void fr_ws_client_key(char out[25]) {
  uint8_t raw[16];

  if (RAND_bytes(raw, sizeof(raw)) != 1) {
    /* The key only proves that the server speaks WebSocket (section 4.1);
     * it protects nothing, so a clock-derived nonce is an acceptable
     * fallback to failing the connection when the CSPRNG is unavailable. */
    struct timespec rt = {0}, mt = {0};
    uint64_t a, b;

    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mt);
    a = mix64(((uint64_t)rt.tv_sec << 30) ^ (uint64_t)rt.tv_nsec ^ (uint64_t)(uintptr_t)out);
    b = mix64(a ^ ((uint64_t)mt.tv_sec << 30) ^ (uint64_t)mt.tv_nsec);
    for (int i = 0; i < 8; i++) {
      raw[i] = (uint8_t)(a >> (8 * i));
      raw[8 + i] = (uint8_t)(b >> (8 * i));
    }
  }
  EVP_EncodeBlock((unsigned char *)out, raw, sizeof(raw)); /* 24 chars and a NUL */
}

/* ---- reader ---- */

void fr_ws_reader_init(struct fr_ws_reader *r, int expect_masked, size_t max_message) {
  memset(r, 0, sizeof(*r));
  r->expect_masked = expect_masked ? 1 : 0;
  r->max_message = max_message;
}

void fr_ws_reader_free(struct fr_ws_reader *r) {
  if (r == NULL)
    return;
  free(r->in);
  free(r->msg);
  r->in = NULL;
  r->in_len = r->in_cap = 0;
  r->msg = NULL;
  r->msg_len = r->msg_cap = 0;
  r->msg_opcode = 0;
}

/* Grows *<buf> to hold at least <need> bytes. Returns 0 or -ENOMEM. */
static int reserve(uint8_t **buf, size_t *cap, size_t need) {
  size_t ncap;
  uint8_t *nbuf;

  if (need <= *cap)
    return 0;
  ncap = *cap ? *cap : 256;
  while (ncap < need)
    ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
  nbuf = realloc(*buf, ncap);
  if (nbuf == NULL)
    return -ENOMEM;
  *buf = nbuf;
  *cap = ncap;
  return 0;
}

static void trim(uint8_t **buf, size_t *cap, size_t len) {
  if (len == 0 && *cap > WS_KEEP_CAP) {
    free(*buf);
    *buf = NULL;
    *cap = 0;
  }
}

/* Marks the reader failed. The buffered input is dropped: nothing after a
 * protocol error can be trusted, and the connection is about to close. */
static int fail(struct fr_ws_reader *r, int err, int close_code) {
  r->close_code = close_code;
  r->in_len = 0;
  return err;
}

/* A failed reader keeps failing with the same error; only close_code is
 * stored, so map it back. */
static int failed_error(const struct fr_ws_reader *r) {
  switch (r->close_code) {
  case FR_WS_CLOSE_TOO_BIG:
    return -EMSGSIZE;
  case FR_WS_CLOSE_INTERNAL:
    return -ENOMEM;
  default:
    return -EPROTO;
  }
}

/* Checks a parsed header against the reader's state before its payload is
 * buffered, so an oversized message is refused on its header alone. */
static int check_frame(struct fr_ws_reader *r, const struct fr_ws_frame_hdr *h) {
  size_t have = 0;

  if (h->rsv != 0)
    return fail(r, -EPROTO, FR_WS_CLOSE_PROTOCOL); /* no extensions negotiated */
  if (h->masked != r->expect_masked)
    return fail(r, -EPROTO, FR_WS_CLOSE_PROTOCOL); /* section 5.1 */
  if (is_control(h->opcode))
    return 0; /* length and FIN already checked by fr_ws_parse_header */

  if (h->opcode == FR_WS_OP_CONT) {
    if (r->msg_opcode == 0)
      return fail(r, -EPROTO, FR_WS_CLOSE_PROTOCOL); /* nothing to continue */
    have = r->msg_len;
  } else if (r->msg_opcode != 0) {
    return fail(r, -EPROTO, FR_WS_CLOSE_PROTOCOL); /* section 5.4 */
  }

  /* The second test keeps have + payload + header inside size_t when there
   * is no max_message (and on 32-bit hosts). */
  if ((r->max_message != 0 && h->payload_len > r->max_message - have) ||
      h->payload_len > SIZE_MAX - FR_WS_MAX_HEADER - have)
    return fail(r, -EMSGSIZE, FR_WS_CLOSE_TOO_BIG);
  return 0;
}

/* Appends a frame's payload to the message being reassembled, unmasking the
 * copy (the input may be the caller's const buffer). */
static int append_msg(struct fr_ws_reader *r, const struct fr_ws_frame_hdr *h,
                      const uint8_t *payload) {
  size_t len = (size_t)h->payload_len;

  if (len == 0)
    return 0;
  if (reserve(&r->msg, &r->msg_cap, r->msg_len + len) != 0)
    return fail(r, -ENOMEM, FR_WS_CLOSE_INTERNAL);
  memcpy(r->msg + r->msg_len, payload, len);
  if (h->masked)
    fr_ws_mask(r->msg + r->msg_len, len, h->mask, 0);
  r->msg_len += len;
  return 0;
}

/* Handles one complete frame. Returns 0, the callback's value, or a
 * negative error with the reader failed. */
static int handle_frame(struct fr_ws_reader *r, const struct fr_ws_frame_hdr *h,
                        const uint8_t *payload, fr_ws_message_cb cb, void *arg) {
  size_t len = (size_t)h->payload_len;
  int opcode, rc;

  if (is_control(h->opcode)) {
    uint8_t tmp[125];

    if (h->masked) {
      if (len > 0)
        memcpy(tmp, payload, len);
      fr_ws_mask(tmp, len, h->mask, 0);
      payload = tmp;
    }
    return cb(arg, h->opcode, len > 0 ? payload : ws_empty, len);
  }

  if (h->opcode != FR_WS_OP_CONT && h->fin) {
    /* Unfragmented: hand over the input itself unless it must be unmasked.
     * msg serves as scratch and is left empty. */
    if (h->masked) {
      if ((rc = append_msg(r, h, payload)) != 0)
        return rc;
      payload = r->msg;
      r->msg_len = 0;
    }
    rc = cb(arg, h->opcode, len > 0 ? payload : ws_empty, len);
    trim(&r->msg, &r->msg_cap, r->msg_len);
    return rc;
  }

  if (h->opcode != FR_WS_OP_CONT)
    r->msg_opcode = h->opcode;
  if ((rc = append_msg(r, h, payload)) != 0)
    return rc;
  if (!h->fin)
    return 0;

  /* Reset before the callback so the reader is consistent if it stops us. */
  opcode = r->msg_opcode;
  len = r->msg_len;
  r->msg_opcode = 0;
  r->msg_len = 0;
  rc = cb(arg, opcode, len > 0 ? r->msg : ws_empty, len);
  trim(&r->msg, &r->msg_cap, r->msg_len);
  return rc;
}

/* <cb> must not call fr_ws_reader_feed() or fr_ws_reader_free() on <r>: the
 * data it receives may point into the reader's buffers. */
int fr_ws_reader_feed(struct fr_ws_reader *r, const uint8_t *data, size_t len,
                      fr_ws_message_cb cb, void *arg) {
  const uint8_t *src;
  size_t n, off = 0, left;
  int rc = 0;

  if (r->close_code != 0)
    return failed_error(r);

  /* With nothing buffered, whole frames are taken straight from <data> and
   * only a trailing partial frame is copied. */
  if (r->in_len > 0) {
    if (len > SIZE_MAX - r->in_len ||
        reserve(&r->in, &r->in_cap, r->in_len + len) != 0)
      return fail(r, -ENOMEM, FR_WS_CLOSE_INTERNAL);
    if (len > 0)
      memcpy(r->in + r->in_len, data, len);
    r->in_len += len;
    src = r->in;
    n = r->in_len;
  } else {
    src = data;
    n = len;
  }

  while (off < n) {
    struct fr_ws_frame_hdr h;
    int hl = fr_ws_parse_header(src + off, n - off, &h);

    if (hl < 0)
      return fail(r, -EPROTO, FR_WS_CLOSE_PROTOCOL);
    if (hl == 0)
      break;
    if ((rc = check_frame(r, &h)) != 0)
      return rc;
    if (h.payload_len > n - off - (size_t)hl)
      break; /* wait for the rest of the payload */
    rc = handle_frame(r, &h, src + off + hl, cb, arg);
    if (r->close_code != 0)
      return rc;
    off += (size_t)hl + (size_t)h.payload_len;
    if (rc != 0)
      break;
  }

  left = n - off;
  if (src == r->in) {
    if (off > 0 && left > 0)
      memmove(r->in, r->in + off, left);
    r->in_len = left;
    trim(&r->in, &r->in_cap, r->in_len);
  } else if (left > 0) {
    if (reserve(&r->in, &r->in_cap, left) != 0)
      return fail(r, -ENOMEM, FR_WS_CLOSE_INTERNAL);
    memcpy(r->in, src + off, left);
    r->in_len = left;
  }
  return rc;
}

int fr_ws_parse_close(const uint8_t *data, size_t len, int *code,
                      const char **reason, size_t *reason_len) {
  int c;

  if (len == 0) {
    *code = 1005; /* "no status received" (section 7.4.1) */
    if (reason)
      *reason = "";
    if (reason_len)
      *reason_len = 0;
    return 0;
  }
  if (len == 1)
    return -EPROTO;

  c = (data[0] << 8) | data[1];
  /* Section 7.4: 1004-1006 and 1015 are reserved or local-only, the rest of
   * 1000-2999 is unassigned except 1012-1014 (IANA registry), 3000-4999 are
   * for libraries and applications. */
  if (!((c >= 1000 && c <= 1003) || (c >= 1007 && c <= 1014) ||
        (c >= 3000 && c <= 4999)))
    return -EPROTO;
  *code = c;
  if (reason)
    *reason = (const char *)data + 2;
  if (reason_len)
    *reason_len = len - 2;
  return 0;
}
