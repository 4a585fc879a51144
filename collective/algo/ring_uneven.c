/* Ring collectives with per-rank sizes, over the plans and the executor of
 * ring.c: reduce-scatter where rank r receives counts[r] elements, and
 * all-to-all with uneven splits. The all-to-all first all-gathers every rank's
 * send counts and receive capacity (so every rank knows every block's size and
 * fails a too-small receive buffer alike), then moves the blocks in n-1 ring
 * steps: at step 1 a rank sends its bundle of blocks for ranks r+1 .. r+n-1; at
 * each later step it keeps the first block of what arrived (its own, straight
 * into the output) and forwards the rest, so a block for the rank k hops away
 * travels k hops and nothing is sent twice over one link. */
#include <stdlib.h>
#include <string.h>

#include "collective/algo/algo.h"
#include "common/checks.h"

kolo_status kolo_ring_reducescatter_v(kolo_ring *ring, const void *send, void *recv,
                                      const size_t *recv_counts, kolo_dtype dtype, kolo_op op,
                                      int engine_thread) {
  int n = ring->net->size, r = ring->net->rank;
  size_t element = kolo_dtype_size(dtype);
  size_t *offsets = ring->block_offsets, *bytes = ring->block_bytes, total = 0;
  for (int b = 0; b < n; b++) {
    offsets[b] = total;
    bytes[b] = recv_counts[b] * element;
    total += bytes[b];
  }
  const char *src = send;
  char *dst = recv;
  if (total == 0) return KOLO_OK;
  if (n == 1) {
    if (src != dst) memmove(dst, src, bytes[0]);
    return KOLO_OK;
  }
  KOLO_CHECK(kolo_ensure_buffer(&ring->scratch, &ring->scratch_bytes, total));
  kolo_ring_plan *plan = &ring->plan;
  kolo_plan_reset(plan, dtype, op);
  /* shifted so that rank r ends with block r; the last step lands in recv */
  for (int t = 0; t < n - 1; t++) {
    int send_block = kolo_wrap_rank(r - t - 1, n);
    int recv_block = kolo_wrap_rank(r - t - 2, n);
    const char *from = (t == 0 ? src : ring->scratch) + offsets[send_block];
    kolo_plan_send(plan, from, bytes[send_block], t == 0 ? -1 : t - 1);
    char *into = t == n - 2 ? dst : ring->scratch + offsets[recv_block];
    kolo_plan_recv(plan, into, src + offsets[recv_block], bytes[recv_block],
                   op == KOLO_AVG && t == n - 2);
  }
  return kolo_execute_plan(ring, engine_thread, total);
}

kolo_status kolo_ring_alltoall_counts(kolo_ring *ring, const size_t *split_counts,
                                      uint64_t capacity, int engine_thread) {
  int n = ring->net->size, r = ring->net->rank;
  size_t row = (size_t)(n + 1);
  KOLO_CHECK(
      kolo_ensure_buffer(&ring->matrix, &ring->matrix_bytes, (size_t)n * row * sizeof(uint64_t)));
  uint64_t *matrix = (uint64_t *)ring->matrix;
  for (int d = 0; d < n; d++) matrix[(size_t)r * row + (size_t)d] = split_counts[d];
  matrix[(size_t)r * row + (size_t)n] = capacity;
  if (n == 1) return KOLO_OK;
  for (int b = 0; b < n; b++) {
    ring->block_offsets[b] = (size_t)b * row * sizeof(uint64_t);
    ring->block_bytes[b] = row * sizeof(uint64_t);
  }
  kolo_plan_reset(&ring->plan, KOLO_UINT8, KOLO_SUM);
  kolo_plan_allgather_blocks(ring, ring->matrix, ring->block_offsets, ring->block_bytes);
  return kolo_execute_plan(ring, engine_thread, 0);
}

int kolo_alltoall_overflow(const kolo_ring *ring, uint64_t *all_blocks, uint64_t *total,
                           uint64_t *capacity) {
  int n = ring->net->size;
  size_t row = (size_t)(n + 1);
  const uint64_t *matrix = (const uint64_t *)ring->matrix;
  *all_blocks = 0;
  for (int d = 0; d < n; d++) {
    *total = 0;
    for (int o = 0; o < n; o++) *total += matrix[(size_t)o * row + (size_t)d];
    *all_blocks += *total;
    *capacity = matrix[(size_t)d * row + (size_t)n];
    if (*total > *capacity) return d;
  }
  return -1;
}

size_t kolo_alltoall_block(const kolo_ring *ring, int from, int to) {
  const uint64_t *matrix = (const uint64_t *)ring->matrix;
  return (size_t)matrix[(size_t)from * (size_t)(ring->net->size + 1) + (size_t)to];
}

/* Bytes of the bundle from origin o that rank r forwards after hop t: the
 * blocks for r+1 .. o+n-1. */
static size_t rest_bytes(const kolo_ring *ring, int o, int t, size_t element) {
  int n = ring->net->size, r = ring->net->rank;
  size_t bytes = 0;
  for (int k = 1; k <= n - 1 - t; k++)
    bytes += kolo_alltoall_block(ring, o, kolo_wrap_rank(r + k, n)) * element;
  return bytes;
}

static kolo_status plan_alltoall(kolo_ring *ring, const void *send_buffer, void *recv,
                                 kolo_dtype dtype, const size_t *out_offset) {
  int n = ring->net->size, r = ring->net->rank;
  size_t element = kolo_dtype_size(dtype);
  size_t scratch_total = 0;
  for (int t = 1; t < n - 1; t++)
    scratch_total += rest_bytes(ring, kolo_wrap_rank(r - t, n), t, element);
  KOLO_CHECK(kolo_ensure_buffer(&ring->scratch, &ring->scratch_bytes, scratch_total));
  const char *send = send_buffer;
  size_t mine_at = 0, total_send = 0;
  for (int d = 0; d < n; d++) {
    if (d == r) mine_at = total_send;
    total_send += kolo_alltoall_block(ring, r, d) * element;
  }
  size_t after_mine = mine_at + kolo_alltoall_block(ring, r, r) * element;
  kolo_ring_plan *plan = &ring->plan;
  kolo_plan_reset(plan, dtype, KOLO_SUM);
  /* step 1: my blocks for r+1 .. n-1, then for 0 .. r-1 */
  kolo_plan_send(plan, send + after_mine, total_send - after_mine, -1);
  kolo_plan_send(plan, send, mine_at, -1);
  char *region = ring->scratch;
  int previous_rest = -1;
  size_t previous_bytes = 0;
  char *previous_region = NULL;
  for (int t = 1; t <= n - 1; t++) {
    int o = kolo_wrap_rank(r - t, n);
    kolo_plan_recv(plan, (char *)recv + out_offset[o], NULL,
                   kolo_alltoall_block(ring, o, r) * element, 0);
    if (previous_rest >= 0) kolo_plan_send(plan, previous_region, previous_bytes, previous_rest);
    previous_rest = -1;
    if (t < n - 1) {
      previous_bytes = rest_bytes(ring, o, t, element);
      previous_region = region;
      previous_rest = kolo_plan_recv(plan, region, NULL, previous_bytes, 0);
      region += previous_bytes;
    }
  }
  return KOLO_OK;
}

kolo_status kolo_ring_alltoall_blocks(kolo_ring *ring, const void *send, void *recv,
                                      kolo_dtype dtype, const size_t *out_offset,
                                      uint64_t all_blocks, int engine_thread) {
  int n = ring->net->size, r = ring->net->rank;
  size_t element = kolo_dtype_size(dtype);
  size_t mine_at = 0;
  for (int d = 0; d < r; d++) mine_at += kolo_alltoall_block(ring, r, d) * element;
  size_t mine = kolo_alltoall_block(ring, r, r) * element;
  if (mine > 0) {
    memmove((char *)recv + out_offset[r], (const char *)send + mine_at, mine);
  }
  if (n == 1 || all_blocks == 0) return KOLO_OK;
  KOLO_CHECK(plan_alltoall(ring, send, recv, dtype, out_offset));
  return kolo_execute_plan(ring, engine_thread, (size_t)all_blocks * element);
}
