/* The ring spec record a coordinator writes for each epoch of a job at
 * /kolo/v1/jobs/<job>/ring/<epoch> (kolo_keys_ring) and workers read: who holds
 * which rank, where to connect, the shared secret of the epoch, and optionally
 * the NCCL unique id. JSON form:
 *   {"job":"j1","epoch":3,"size":2,"token":"3f9a...",
 *    "ranks":[{"rank":0,"worker":"w1","address":"10.0.0.5:7100"},
 *             {"rank":1,"worker":"w2","address":"10.0.0.6:7100"}],
 *    "nccl_id":"<base64 of 128 bytes>"}
 * Decoding is strict: unknown or duplicate fields, wrong types, ranks out of
 * order, size != number of ranks, duplicate workers, bad addresses and an NCCL id
 * that is not exactly 128 bytes are all rejected with a message saying which. */
#ifndef KOLO_COORD_RINGSPEC_H
#define KOLO_COORD_RINGSPEC_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

#define KOLO_RINGSPEC_NCCL_ID_BYTES 128
#define KOLO_RINGSPEC_MAX_SIZE 65536

typedef struct kolo_ringspec_rank {
  char *worker;  /* worker id (kolo_keys_name_valid) */
  char *address; /* data-plane "host:port" */
} kolo_ringspec_rank;

typedef struct kolo_ringspec {
  char *job;      /* job id (kolo_keys_name_valid) */
  int64_t epoch;  /* >= 0 */
  char *token;    /* the epoch's shared secret: 16..256 characters of [A-Za-z0-9+/=_.-] */
  size_t size;    /* number of ranks, 1..KOLO_RINGSPEC_MAX_SIZE */
  kolo_ringspec_rank *ranks;
  int has_nccl_id;
  unsigned char nccl_id[KOLO_RINGSPEC_NCCL_ID_BYTES];
} kolo_ringspec;

/* Frees the fields of spec (not spec) and zeroes it. */
void kolo_ringspec_clear(kolo_ringspec *spec);

/* Checks every rule above; KOLO_ERR_INVALID_ARG with a message on the first broken one. */
kolo_status kolo_ringspec_validate(const kolo_ringspec *spec);

/* Encodes a valid spec as compact JSON (*json malloc'd). */
kolo_status kolo_ringspec_encode(const kolo_ringspec *spec, char **json);

/* Decodes and validates. KOLO_ERR_PARSE for malformed JSON, unknown fields or
 * wrong types; KOLO_ERR_INVALID_ARG for values that break a rule. *out is zeroed
 * on failure. */
kolo_status kolo_ringspec_decode(const char *json, size_t len, kolo_ringspec *out);

/* The rank of worker in spec, or -1. */
int kolo_ringspec_rank_of(const kolo_ringspec *spec, const char *worker);

#endif
