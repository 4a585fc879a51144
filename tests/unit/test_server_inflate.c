/* Unit tests for server/inflate.c: gzip and zlib bodies inflate exactly; output past the
 * limit stops with KOLO_ERR_TOO_LARGE however small the input (a "zip bomb"); corrupt,
 * truncated or trailing-garbage streams are KOLO_ERR_PARSE. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include "server/inflate.h"

/* Compresses data with zlib (gzip = 1: a gzip wrapper, as gRPC's "gzip"). */
static uint8_t *squeeze(const uint8_t *data, size_t len, int gzip, size_t *out_len) {
  z_stream z;
  memset(&z, 0, sizeof z);
  assert_int_equal(deflateInit2(&z, 9, Z_DEFLATED, gzip ? 15 + 16 : 15, 9, Z_DEFAULT_STRATEGY),
                   Z_OK);
  size_t cap = deflateBound(&z, len) + 64;
  uint8_t *out = malloc(cap);
  z.next_in = (Bytef *)data;
  z.avail_in = (uInt)len;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
  *out_len = cap - z.avail_out;
  deflateEnd(&z);
  return out;
}

static void gzip_and_zlib_bodies_inflate_exactly(void **state) {
  (void)state;
  uint8_t data[100000];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 7 % 251);
  for (int gzip = 0; gzip <= 1; gzip++) {
    size_t packed_len, len;
    uint8_t *packed = squeeze(data, sizeof data, gzip, &packed_len), *out = NULL;
    assert_int_equal(kolo_server_inflate(packed, packed_len, sizeof data, &out, &len), KOLO_OK);
    assert_int_equal(len, sizeof data);
    assert_memory_equal(out, data, sizeof data);
    free(out);
    /* one byte under the size is over the limit */
    assert_int_equal(kolo_server_inflate(packed, packed_len, sizeof data - 1, &out, &len),
                     KOLO_ERR_TOO_LARGE);
    free(packed);
  }
}

static void a_small_body_that_expands_past_the_limit_is_too_large(void **state) {
  (void)state;
  size_t big = 64u << 20, packed_len, len;
  uint8_t *zeros = calloc(1, big), *out = NULL;
  uint8_t *packed = squeeze(zeros, big, 1, &packed_len);
  free(zeros);
  assert_true(packed_len < 128 * 1024); /* 64 MiB of zeros is ~64 KiB of gzip */
  assert_int_equal(kolo_server_inflate(packed, packed_len, 4u << 20, &out, &len),
                   KOLO_ERR_TOO_LARGE);
  assert_null(out);
  free(packed);
}

static void corrupt_truncated_or_trailing_streams_are_parse_errors(void **state) {
  (void)state;
  const uint8_t text[] = "a request body that compresses";
  size_t packed_len, len;
  uint8_t *packed = squeeze(text, sizeof text, 1, &packed_len), *out = NULL;
  assert_int_equal(kolo_server_inflate(packed, packed_len / 2, 1024, &out, &len), KOLO_ERR_PARSE);
  uint8_t *longer = malloc(packed_len + 3);
  memcpy(longer, packed, packed_len);
  memcpy(longer + packed_len, "xyz", 3);
  assert_int_equal(kolo_server_inflate(longer, packed_len + 3, 1024, &out, &len), KOLO_ERR_PARSE);
  packed[packed_len / 2] ^= 0x55;
  kolo_status rc = kolo_server_inflate(packed, packed_len, 1024, &out, &len);
  assert_true(rc == KOLO_ERR_PARSE);
  const uint8_t garbage[] = "not compressed at all";
  assert_int_equal(kolo_server_inflate(garbage, sizeof garbage, 1024, &out, &len), KOLO_ERR_PARSE);
  assert_int_equal(kolo_server_inflate(garbage, 0, 1024, &out, &len), KOLO_ERR_PARSE);
  free(longer);
  free(packed);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gzip_and_zlib_bodies_inflate_exactly),
      cmocka_unit_test(a_small_body_that_expands_past_the_limit_is_too_large),
      cmocka_unit_test(corrupt_truncated_or_trailing_streams_are_parse_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
