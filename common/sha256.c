/* Implementation of sha256.h, written from FIPS 180-4 section 6.2 and RFC 2104; checked
 * against the FIPS and RFC 4231 test vectors in tests/unit/test_sha256.c. */
#include "common/sha256.h"

#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

static void compress(uint32_t state[8], const uint8_t block[64]) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++)
    w[t] = (uint32_t)block[4 * t] << 24 | (uint32_t)block[4 * t + 1] << 16 |
           (uint32_t)block[4 * t + 2] << 8 | block[4 * t + 3];
  for (int t = 16; t < 64; t++) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3], e = state[4], f = state[5],
           g = state[6], h = state[7];
  for (int t = 0; t < 64; t++) {
    uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

void kolo_sha256_init(kolo_sha256 *h) {
  static const uint32_t initial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(h->state, initial, sizeof initial);
  h->length = 0;
  h->used = 0;
}

void kolo_sha256_update(kolo_sha256 *h, const void *data, size_t length) {
  const uint8_t *p = data;
  h->length += length;
  while (length > 0) {
    size_t take = 64 - h->used < length ? 64 - h->used : length;
    memcpy(h->block + h->used, p, take);
    h->used += take;
    p += take;
    length -= take;
    if (h->used == 64) {
      compress(h->state, h->block);
      h->used = 0;
    }
  }
}

void kolo_sha256_final(kolo_sha256 *h, uint8_t out[KOLO_SHA256_BYTES]) {
  uint64_t bits = h->length * 8;
  uint8_t pad = 0x80;
  kolo_sha256_update(h, &pad, 1);
  uint8_t zero = 0;
  while (h->used != 56) kolo_sha256_update(h, &zero, 1);
  uint8_t length[8];
  for (int i = 0; i < 8; i++) length[i] = (uint8_t)(bits >> (56 - 8 * i));
  kolo_sha256_update(h, length, 8);
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 4; j++) out[4 * i + j] = (uint8_t)(h->state[i] >> (24 - 8 * j));
}

void kolo_hmac_sha256(const void *key, size_t key_length, const void *const *parts,
                      const size_t *lengths, size_t n, uint8_t out[KOLO_SHA256_BYTES]) {
  uint8_t k[64] = {0}, pad[64], inner[KOLO_SHA256_BYTES];
  kolo_sha256 h;
  if (key_length > 64) {
    kolo_sha256_init(&h);
    kolo_sha256_update(&h, key, key_length);
    kolo_sha256_final(&h, k);
  } else {
    memcpy(k, key, key_length);
  }
  for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
  kolo_sha256_init(&h);
  kolo_sha256_update(&h, pad, 64);
  for (size_t i = 0; i < n; i++) kolo_sha256_update(&h, parts[i], lengths[i]);
  kolo_sha256_final(&h, inner);
  for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
  kolo_sha256_init(&h);
  kolo_sha256_update(&h, pad, 64);
  kolo_sha256_update(&h, inner, sizeof inner);
  kolo_sha256_final(&h, out);
}

int kolo_bytes_equal(const uint8_t *a, const uint8_t *b, size_t length) {
  uint8_t difference = 0;
  for (size_t i = 0; i < length; i++) difference |= (uint8_t)(a[i] ^ b[i]);
  return difference == 0;
}
