/* The elastic state's sync (kolo_elastic_sync, issue 28): every rank ends with
 * rank 0's bytes of every state buffer. Each rank first digests its buffers
 * (128 bits each) and the ring all-gathers the digests; a buffer goes only to
 * the ranks whose digest differs from rank 0's (a newcomer, a survivor that
 * kept an older commit or, in a local mode, its own parameters), each fed by
 * the nearest rank before it that holds rank 0's bytes
 * (kolo_ring_broadcast_sources): not all from rank 0, and a buffer every rank
 * already holds moves nowhere. Taken across hosts, or with KOLO_STATE_SYNC=sources;
 * on one host, with KOLO_STATE_SYNC=root or for device buffers, the old path: every
 * buffer broadcast from rank 0 around the whole ring. */
#ifndef KOLO_COLLECTIVE_STATE_SYNC_H
#define KOLO_COLLECTIVE_STATE_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/kolo.h"

/* One registered state buffer of an elastic context (collective/elastic.c). */
typedef struct kolo_state_buffer {
  void *buffer;
  void *committed; /* host memory, whatever the buffer is */
  size_t bytes;
  int on_device; /* CUDA device memory: copied with CUDA copies, never memcpy */
} kolo_state_buffer;

/* A 128-bit digest of bytes (pure; four independent 64-bit lanes, the length
 * mixed in): equal bytes give equal digests on every rank. */
void kolo_state_digest(const void *data, size_t bytes, uint64_t out[2]);

/* Makes count buffers (their .buffer) equal to rank 0's on every rank of comm (collective).
 * from_root: broadcast every buffer from rank 0 (the old path; also when
 * KOLO_STATE_SYNC says root, or is unset on one host). received[i] (count entries, may not be NULL
 * when count > 0): whether this rank's buffer i was overwritten. */
kolo_status kolo_state_sync(kolo_comm *comm, const kolo_state_buffer *buffers, int count,
                            int from_root, uint8_t *received);

#endif
