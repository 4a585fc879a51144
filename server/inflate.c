/* Implementation of inflate.h over zlib: inflate into a buffer that grows by doubling up
 * to the limit, and stop the moment a byte past the limit would be written. */
#include "server/inflate.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define CHUNK (64u << 10)

kolo_status kolo_server_inflate(const uint8_t *in, size_t in_len, size_t limit, uint8_t **out,
                                size_t *out_len) {
  z_stream z;
  memset(&z, 0, sizeof z);
  if (inflateInit2(&z, 15 + 32) != Z_OK) return KOLO_ERR_NO_MEMORY; /* 32: gzip or zlib */
  kolo_status rc = KOLO_ERR_PARSE;
  size_t cap = CHUNK < limit + 1 ? CHUNK : limit + 1, used = 0;
  uint8_t *buf = malloc(cap);
  if (buf == NULL) {
    inflateEnd(&z);
    return KOLO_ERR_NO_MEMORY;
  }
  z.next_in = (Bytef *)in;
  size_t in_left = in_len;
  for (;;) {
    if (used == cap) {
      if (cap > limit) { /* one byte past the limit was produced */
        rc = KOLO_ERR_TOO_LARGE;
        break;
      }
      size_t grown_cap = cap * 2 < limit + 1 ? cap * 2 : limit + 1;
      uint8_t *grown = realloc(buf, grown_cap);
      if (grown == NULL) {
        rc = KOLO_ERR_NO_MEMORY;
        break;
      }
      buf = grown;
      cap = grown_cap;
    }
    uInt in_now = in_left > (1u << 30) ? (1u << 30) : (uInt)in_left;
    z.avail_in = in_now;
    z.next_out = buf + used;
    z.avail_out = (uInt)(cap - used > (1u << 30) ? (1u << 30) : cap - used);
    uInt out_before = z.avail_out;
    int zrc = inflate(&z, Z_NO_FLUSH);
    in_left -= in_now - z.avail_in;
    used += out_before - z.avail_out;
    if (zrc == Z_STREAM_END) {
      rc = used > limit ? KOLO_ERR_TOO_LARGE : (in_left == 0 ? KOLO_OK : KOLO_ERR_PARSE);
      break;
    }
    if (zrc == Z_BUF_ERROR && in_left == 0 && z.avail_out > 0) break; /* truncated */
    if (zrc != Z_OK && zrc != Z_BUF_ERROR) {
      rc = zrc == Z_MEM_ERROR ? KOLO_ERR_NO_MEMORY : KOLO_ERR_PARSE;
      break;
    }
  }
  inflateEnd(&z);
  if (rc != KOLO_OK) {
    free(buf);
    return rc;
  }
  *out = buf;
  *out_len = used;
  return KOLO_OK;
}
