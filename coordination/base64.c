/* Implementation of coordination/base64.h: a table-driven RFC 4648 codec that
 * rejects anything but canonical padded base64. */
#include "coordination/base64.h"

#include <stdint.h>
#include <stdlib.h>

static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t kolo_base64_encoded_len(size_t len) {
  return (len + 2) / 3 * 4;
}

void kolo_base64_encode(const void *data, size_t len, char *out) {
  const unsigned char *in = data;
  size_t o = 0;
  size_t i = 0;
  for (; i + 3 <= len; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
    out[o++] = kAlphabet[v >> 18];
    out[o++] = kAlphabet[(v >> 12) & 63];
    out[o++] = kAlphabet[(v >> 6) & 63];
    out[o++] = kAlphabet[v & 63];
  }
  if (len - i == 1) {
    uint32_t v = (uint32_t)in[i] << 16;
    out[o++] = kAlphabet[v >> 18];
    out[o++] = kAlphabet[(v >> 12) & 63];
    out[o++] = '=';
    out[o++] = '=';
  } else if (len - i == 2) {
    uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
    out[o++] = kAlphabet[v >> 18];
    out[o++] = kAlphabet[(v >> 12) & 63];
    out[o++] = kAlphabet[(v >> 6) & 63];
    out[o++] = '=';
  }
  out[o] = '\0';
}

kolo_status kolo_base64_encode_alloc(const void *data, size_t len, char **out) {
  *out = malloc(kolo_base64_encoded_len(len) + 1);
  if (*out == NULL) return KOLO_ERR_NO_MEMORY;
  kolo_base64_encode(data, len, *out);
  return KOLO_OK;
}

/* Value of one alphabet character, or -1. */
static int sextet(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

kolo_status kolo_base64_decode_alloc(const char *text, size_t text_len, unsigned char **out,
                                     size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  if (text_len % 4 != 0) return KOLO_ERR_PARSE;
  size_t pad = 0;
  if (text_len > 0 && text[text_len - 1] == '=') pad++;
  if (text_len > 1 && text[text_len - 2] == '=') pad++;
  size_t n = text_len / 4 * 3 - pad;
  unsigned char *buf = malloc(n + 1);
  if (buf == NULL) return KOLO_ERR_NO_MEMORY;
  size_t o = 0;
  for (size_t i = 0; i < text_len; i += 4) {
    int last = i + 4 == text_len;
    int v[4];
    for (int k = 0; k < 4; k++) {
      unsigned char c = (unsigned char)text[i + k];
      if (c == '=' && last && k >= 4 - (int)pad) {
        v[k] = 0;
        continue;
      }
      v[k] = sextet(c);
      if (v[k] < 0) goto bad;
    }
    uint32_t word =
        (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
    unsigned char bytes[3] = {(unsigned char)(word >> 16), (unsigned char)(word >> 8),
                              (unsigned char)word};
    size_t take = last ? 3 - pad : 3;
    /* Canonical form: the bits dropped by padding must be zero. */
    if (last && pad == 1 && (v[2] & 3) != 0) goto bad;
    if (last && pad == 2 && (v[1] & 15) != 0) goto bad;
    for (size_t k = 0; k < take; k++) buf[o++] = bytes[k];
  }
  buf[o] = '\0';
  *out = buf;
  *out_len = o;
  return KOLO_OK;
bad:
  free(buf);
  return KOLO_ERR_PARSE;
}
