/* SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for the ring handshake's challenge and
 * response (collective/net/handshake.c): a neighbour proves it knows the ring's secret
 * without sending it. One-shot functions over byte strings; no allocation. */
#ifndef KOLO_COMMON_SHA256_H
#define KOLO_COMMON_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define KOLO_SHA256_BYTES 32

typedef struct kolo_sha256 {
  uint32_t state[8];
  uint64_t length; /* bytes hashed so far */
  uint8_t block[64];
  size_t used; /* bytes waiting in block */
} kolo_sha256;

void kolo_sha256_init(kolo_sha256 *h);
void kolo_sha256_update(kolo_sha256 *h, const void *data, size_t length);
void kolo_sha256_final(kolo_sha256 *h, uint8_t out[KOLO_SHA256_BYTES]);

/* HMAC-SHA-256 of the concatenation of n parts (parts[i] of lengths[i] bytes) under key. */
void kolo_hmac_sha256(const void *key, size_t key_length, const void *const *parts,
                      const size_t *lengths, size_t n, uint8_t out[KOLO_SHA256_BYTES]);

/* 1 when a and b (length bytes each) are equal; the time does not depend on where they differ. */
int kolo_bytes_equal(const uint8_t *a, const uint8_t *b, size_t length);

#endif
