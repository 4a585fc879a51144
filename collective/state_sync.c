/* The elastic state's sync from several sources (state_sync.h). */
#include "collective/state_sync.h"

#include <stdlib.h>
#include <string.h>

#include "collective/face.h"
#include "common/checks.h"
#include "common/log.h"

#define PRIME1 0x9E3779B185EBCA87ull
#define PRIME2 0xC2B2AE3D27D4EB4Full
#define PRIME3 0x165667B19E3779F9ull
#define PRIME4 0x85EBCA77C2B2AE63ull

static inline uint64_t rotate(uint64_t x, int bits) {
  return (x << bits) | (x >> (64 - bits));
}

static inline uint64_t lane_round(uint64_t acc, uint64_t word) {
  return rotate(acc + word * PRIME2, 31) * PRIME1;
}

static uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= PRIME2;
  h ^= h >> 29;
  h *= PRIME3;
  return h ^ (h >> 32);
}

void kolo_state_digest(const void *data, size_t bytes, uint64_t out[2]) {
  const unsigned char *p = data;
  uint64_t lane[4] = {PRIME1 + PRIME2, PRIME2, 0, 0 - PRIME1}, word[4];
  size_t at = 0;
  for (; at + sizeof word <= bytes; at += sizeof word) {
    memcpy(word, p + at, sizeof word);
    for (int k = 0; k < 4; k++) lane[k] = lane_round(lane[k], word[k]);
  }
  memset(word, 0, sizeof word);
  if (bytes > at) memcpy(word, p + at, bytes - at); /* the tail, zero-padded: the length tells */
  for (int k = 0; k < 4; k++) lane[k] = lane_round(lane[k], word[k]);
  uint64_t length = (uint64_t)bytes;
  out[0] = avalanche(rotate(lane[0], 1) + rotate(lane[1], 7) + rotate(lane[2], 12) +
                     rotate(lane[3], 18) + length * PRIME4);
  out[1] = avalanche((lane[0] * PRIME3) ^ rotate(lane[1], 29) ^ (rotate(lane[2], 43) * PRIME4) ^
                     rotate(lane[3], 53) ^ (length + PRIME1));
}

static kolo_status broadcast_holds(kolo_comm *comm, void *buffer, size_t bytes,
                                   const uint8_t *holds) {
  kolo_request request = {.comm = comm,
                          .kind = KOLO_REQUEST_BROADCAST,
                          .send = buffer,
                          .recv = buffer,
                          .count = bytes,
                          .dtype = KOLO_UINT8,
                          .root = 0,
                          .holds = holds};
  return kolo_queue_run_blocking(comm, &request);
}

/* holds[i * n + r]: whether rank r's digest of buffer i is rank 0's. */
static void find_holders(const uint64_t *all, int count, int n, uint8_t *holds) {
  for (int i = 0; i < count; i++)
    for (int r = 0; r < n; r++)
      holds[(size_t)i * (size_t)n + (size_t)r] =
          memcmp(all + ((size_t)r * (size_t)count + (size_t)i) * 2, all + (size_t)i * 2,
                 2 * sizeof *all) == 0;
}

static kolo_status sync_from_sources(kolo_comm *comm, const kolo_state_buffer *buffers, int count,
                                     uint8_t *received) {
  int n = kolo_comm_size(comm), rank = kolo_comm_rank(comm);
  size_t words = (size_t)count * 2;
  uint64_t *mine = malloc(words * sizeof *mine), *all = malloc(words * (size_t)n * sizeof *all);
  uint8_t *holds = malloc((size_t)count * (size_t)n);
  kolo_status status = mine && all && holds ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  for (int i = 0; status == KOLO_OK && i < count; i++)
    kolo_state_digest(buffers[i].buffer, buffers[i].bytes, mine + (size_t)i * 2);
  if (status == KOLO_OK)
    status = kolo_allgather(comm, mine, words, all, words * (size_t)n, NULL, KOLO_INT64);
  if (status == KOLO_OK) find_holders(all, count, n, holds);
  size_t moved = 0;
  for (int i = 0; status == KOLO_OK && i < count; i++) {
    const uint8_t *row = holds + (size_t)i * (size_t)n;
    if (memchr(row, 0, (size_t)n) == NULL) continue; /* every rank holds it: nothing moves */
    status = broadcast_holds(comm, buffers[i].buffer, buffers[i].bytes, row);
    received[i] = !row[rank];
    moved += buffers[i].bytes;
  }
  if (status == KOLO_OK)
    KOLO_LOGD("elastic", "state sync: %zu bytes to the ranks that differ, this rank received %s",
              moved, memchr(received, 1, (size_t)count) ? "some" : "none");
  free(mine);
  free(all);
  free(holds);
  return status;
}

/* KOLO_STATE_SYNC: "root", "sources", or auto (unset, anything else): the sources
 * where the ring crosses hosts, whose links carry the state slower than a rank
 * digests it; on one host (shared memory) the digests cost about what the copies
 * they save do (docs/PERFORMANCE.md, issue 28's joiner). The same on every rank. */
static int use_sources(kolo_comm *comm) {
  const char *mode = getenv("KOLO_STATE_SYNC");
  if (mode != NULL && strcmp(mode, "root") == 0) return 0;
  if (mode != NULL && strcmp(mode, "sources") == 0) return 1;
  return comm->net.shape.hosts > 1;
}

kolo_status kolo_state_sync(kolo_comm *comm, const kolo_state_buffer *buffers, int count,
                            int from_root, uint8_t *received) {
  if (comm == NULL || count < 0 || (count > 0 && received == NULL)) return KOLO_ERR_INVALID_ARG;
  if (count == 0) return KOLO_OK;
  memset(received, 0, (size_t)count);
  if (kolo_comm_size(comm) == 1) return KOLO_OK;
  if (!from_root && use_sources(comm)) return sync_from_sources(comm, buffers, count, received);
  for (int i = 0; i < count; i++) {
    KOLO_CHECK(kolo_broadcast(comm, buffers[i].buffer, buffers[i].bytes, KOLO_UINT8, 0));
    received[i] = kolo_comm_rank(comm) != 0;
  }
  return KOLO_OK;
}
