/* The ring algorithms over plain buffers (never a request). Each collective is
 * compiled into a plan of send and recv items (reduce-scatter then all-gather
 * for all-reduce, or the pair exchange, or a gather for small buffers; a chain
 * for broadcast, chains from several sources for the elastic state; a shifted reduce-scatter; a
 * ring all-gather of per-rank blocks), and the executor (plan.c) streams the plan over the ring. */
#include <stdint.h>
#include <string.h>

#include "collective/algo/algo.h"

static size_t chunk_length(size_t count, int parts, int index) {
  return kolo_chunk_start(count, parts, index + 1) - kolo_chunk_start(count, parts, index);
}

static void plan_allreduce_ring(kolo_ring *ring, const char *src, char *dst, size_t count,
                                size_t element, kolo_op op) {
  kolo_ring_plan *plan = &ring->plan;
  int n = ring->net->size, r = ring->net->rank;
  /* reduce-scatter: after n-1 steps rank r owns the sum of chunk r+1 */
  for (int t = 0; t < n - 1; t++) {
    int send_chunk = kolo_wrap_rank(r - t, n);
    int recv_chunk = kolo_wrap_rank(r - t - 1, n);
    const char *from = (t == 0 ? src : dst) + kolo_chunk_start(count, n, send_chunk) * element;
    kolo_plan_send(plan, from, chunk_length(count, n, send_chunk) * element, t == 0 ? -1 : t - 1);
    size_t offset = kolo_chunk_start(count, n, recv_chunk) * element;
    kolo_plan_recv(plan, dst + offset, src + offset, chunk_length(count, n, recv_chunk) * element,
                   op == KOLO_AVG && t == n - 2);
  }
  /* all-gather: circulate the owned chunks */
  for (int u = 0; u < n - 1; u++) {
    int send_chunk = kolo_wrap_rank(r + 1 - u, n);
    int recv_chunk = kolo_wrap_rank(r - u, n);
    kolo_plan_send(plan, dst + kolo_chunk_start(count, n, send_chunk) * element,
                   chunk_length(count, n, send_chunk) * element, n - 2 + u);
    kolo_plan_recv(plan, dst + kolo_chunk_start(count, n, recv_chunk) * element, NULL,
                   chunk_length(count, n, recv_chunk) * element, 0);
  }
}

/* Latency path: gather every rank's whole buffer (n-1 steps instead of
 * 2(n-1)), then reduce locally in rank order so all ranks agree bit for bit.
 * This rank's block is sent and reduced straight from src (no copy), unless
 * dst overlaps it and it is read after dst was first written (rank >= 2). */
static kolo_status allreduce_gather(kolo_ring *ring, const char *src, char *dst, size_t count,
                                    kolo_dtype dtype, kolo_op op, int engine_thread) {
  int n = ring->net->size, r = ring->net->rank;
  size_t bytes = count * kolo_dtype_size(dtype);
  kolo_ring_plan *plan = &ring->plan;
  kolo_status status = kolo_ensure_buffer(&ring->scratch, &ring->scratch_bytes, bytes * (size_t)n);
  if (status != KOLO_OK) return status;
  char *gather = ring->scratch;
  uintptr_t from = (uintptr_t)src, to = (uintptr_t)dst;
  int overlaps = to < from + bytes && from < to + bytes;
  const char *own = src;
  if (overlaps && r >= 2) {
    memcpy(gather + bytes * (size_t)r, src, bytes);
    own = gather + bytes * (size_t)r;
  }
  for (int t = 0; t < n - 1; t++) {
    int send_block = kolo_wrap_rank(r - t, n);
    int recv_block = kolo_wrap_rank(r - t - 1, n);
    kolo_plan_send(plan, t == 0 ? own : gather + bytes * (size_t)send_block, bytes,
                   t == 0 ? -1 : t - 1);
    kolo_plan_recv(plan, gather + bytes * (size_t)recv_block, NULL, bytes, 0);
  }
  status = kolo_execute_plan(ring, engine_thread, bytes);
  if (status != KOLO_OK) return status;
  kolo_reduce(dst, r == 0 ? own : gather, r == 1 ? own : gather + bytes, count, dtype, op);
  for (int b = 2; b < n; b++) {
    kolo_reduce(dst, dst, b == r ? own : gather + bytes * (size_t)b, count, dtype, op);
  }
  if (op == KOLO_AVG) kolo_divide(dst, count, dtype, n);
  return KOLO_OK;
}

/* Two ranks: each sends its whole buffer and reduces the other's into dst as
 * it streams in: the same bytes on the wire as reduce-scatter + all-gather,
 * one step instead of two, and no send waits on the peer's reduction. The
 * operands go in rank order, so both ranks agree bit for bit (min/max with NaN
 * or signed zeros are not commutative); in place, a segment is reduced only
 * once it has been sent. */
static void plan_allreduce_pair(kolo_ring *ring, const char *src, char *dst, size_t bytes,
                                kolo_op op) {
  kolo_ring_plan *plan = &ring->plan;
  plan->segment_bytes = ring->pair_segment_bytes;
  kolo_plan_send(plan, src, bytes, -1);
  int index = kolo_plan_recv(plan, dst, src, bytes, op == KOLO_AVG);
  uintptr_t from = (uintptr_t)src, to = (uintptr_t)dst;
  plan->recvs[index].remote_first = ring->net->rank == 1;
  plan->recvs[index].guards_send = (to < from + bytes && from < to + bytes) ? 0 : -1;
}

kolo_status kolo_ring_allreduce(kolo_ring *ring, const void *send, void *recv, size_t count,
                                kolo_dtype dtype, kolo_op op, int engine_thread) {
  size_t element = kolo_dtype_size(dtype);
  size_t bytes = count * element;
  const char *src = send;
  char *dst = recv;
  int n = ring->net->size;
  if (n == 1 || count == 0) {
    if (src != dst && bytes > 0) memcpy(dst, src, bytes);
    return KOLO_OK;
  }
  kolo_plan_reset(&ring->plan, dtype, op);
  kolo_piece whole = {.src = src, .dst = dst, .bytes = bytes};
  switch (kolo_ring_select(ring, count, bytes)) {
    case KOLO_ALLREDUCE_DOUBLING:
      return kolo_allreduce_doubling(ring, &whole, 1, dtype, op, engine_thread);
    case KOLO_ALLREDUCE_TWO_LEVEL:
      return kolo_allreduce_two_level(ring, &whole, 1, dtype, op, engine_thread);
    case KOLO_ALLREDUCE_HALVING:
      return kolo_allreduce_halving(ring, &whole, 1, dtype, op, engine_thread);
    case KOLO_ALLREDUCE_GATHER:
      return allreduce_gather(ring, src, dst, count, dtype, op, engine_thread);
    case KOLO_ALLREDUCE_PAIR:
      plan_allreduce_pair(ring, src, dst, bytes, op);
      break;
    default:
      plan_allreduce_ring(ring, src, dst, count, element, op);
      break;
  }
  return kolo_execute_plan(ring, engine_thread, bytes);
}

kolo_status kolo_ring_broadcast(kolo_ring *ring, void *buffer, size_t bytes, int root,
                                kolo_dtype dtype, int engine_thread) {
  int n = ring->net->size;
  if (n == 1 || bytes == 0) return KOLO_OK;
  kolo_ring_plan *plan = &ring->plan;
  kolo_plan_reset(plan, dtype, KOLO_SUM);
  int position = kolo_wrap_rank(ring->net->rank - root, n);
  if (position == 0) {
    kolo_plan_send(plan, buffer, bytes, -1);
  } else {
    int index = kolo_plan_recv(plan, buffer, NULL, bytes, 0);
    if (position < n - 1) kolo_plan_send(plan, buffer, bytes, index);
  }
  return kolo_execute_plan(ring, engine_thread, bytes);
}

int kolo_sources_role(const uint8_t *holds, int size, int rank) {
  if (size <= 1) return 0;
  int role = holds[rank] ? 0 : KOLO_SOURCES_RECV;
  if (!holds[kolo_wrap_rank(rank + 1, size)]) role |= KOLO_SOURCES_SEND;
  return role;
}

kolo_status kolo_ring_broadcast_sources(kolo_ring *ring, void *buffer, size_t bytes,
                                        const uint8_t *holds, kolo_dtype dtype, int engine_thread) {
  int n = ring->net->size;
  if (n == 1 || bytes == 0) return KOLO_OK;
  kolo_ring_plan *plan = &ring->plan;
  kolo_plan_reset(plan, dtype, KOLO_SUM);
  int role = kolo_sources_role(holds, n, ring->net->rank), index = -1;
  if (role & KOLO_SOURCES_RECV) index = kolo_plan_recv(plan, buffer, NULL, bytes, 0);
  if (role & KOLO_SOURCES_SEND) kolo_plan_send(plan, buffer, bytes, index);
  return kolo_execute_plan(ring, engine_thread, bytes);
}

kolo_status kolo_ring_reducescatter(kolo_ring *ring, const void *send, void *recv, size_t count,
                                    kolo_dtype dtype, kolo_op op, int engine_thread) {
  int n = ring->net->size, r = ring->net->rank;
  size_t block = count * kolo_dtype_size(dtype);
  const char *src = send;
  char *dst = recv;
  if (block == 0) return KOLO_OK;
  if (n == 1) {
    if (src != dst) memmove(dst, src, block);
    return KOLO_OK;
  }
  kolo_status status = kolo_ensure_buffer(&ring->scratch, &ring->scratch_bytes, block * (size_t)n);
  if (status != KOLO_OK) return status;
  kolo_ring_plan *plan = &ring->plan;
  kolo_plan_reset(plan, dtype, op);
  /* reduce-scatter shifted so that rank r ends with block r */
  for (int t = 0; t < n - 1; t++) {
    int send_block = kolo_wrap_rank(r - t - 1, n);
    int recv_block = kolo_wrap_rank(r - t - 2, n);
    const char *from = (t == 0 ? src : ring->scratch) + (size_t)send_block * block;
    kolo_plan_send(plan, from, block, t == 0 ? -1 : t - 1);
    char *into = t == n - 2 ? dst : ring->scratch + (size_t)recv_block * block;
    kolo_plan_recv(plan, into, src + (size_t)recv_block * block, block,
                   op == KOLO_AVG && t == n - 2);
  }
  return kolo_execute_plan(ring, engine_thread, block * (size_t)n);
}

kolo_status kolo_ring_allgather_counts(kolo_ring *ring, size_t count, int engine_thread,
                                       size_t *total) {
  int n = ring->net->size, r = ring->net->rank;
  ring->counts[r] = (uint64_t)count;
  *total = count;
  if (n == 1) return KOLO_OK;
  size_t *count_offsets = ring->block_offsets;
  size_t *count_bytes = ring->block_bytes;
  for (int b = 0; b < n; b++) {
    count_offsets[b] = (size_t)b * sizeof(uint64_t);
    count_bytes[b] = sizeof(uint64_t);
  }
  kolo_plan_reset(&ring->plan, KOLO_UINT8, KOLO_SUM);
  kolo_plan_allgather_blocks(ring, (char *)ring->counts, count_offsets, count_bytes);
  kolo_status status = kolo_execute_plan(ring, engine_thread, 0);
  if (status != KOLO_OK) return status;
  *total = 0;
  for (int b = 0; b < n; b++) *total += (size_t)ring->counts[b];
  return KOLO_OK;
}

kolo_status kolo_ring_allgather_blocks(kolo_ring *ring, const void *send, void *recv,
                                       kolo_dtype dtype, size_t total, int engine_thread) {
  int n = ring->net->size, r = ring->net->rank;
  size_t element = kolo_dtype_size(dtype);
  size_t *offsets = ring->block_offsets;
  size_t *bytes = ring->block_bytes;
  size_t position = 0;
  for (int b = 0; b < n; b++) {
    offsets[b] = position * element;
    bytes[b] = (size_t)ring->counts[b] * element;
    position += (size_t)ring->counts[b];
  }
  char *out = recv;
  if (bytes[r] > 0 && out + offsets[r] != (const char *)send) {
    memmove(out + offsets[r], send, bytes[r]);
  }
  if (n == 1 || total == 0) return KOLO_OK;
  kolo_plan_reset(&ring->plan, dtype, KOLO_SUM);
  kolo_plan_allgather_blocks(ring, out, offsets, bytes);
  return kolo_execute_plan(ring, engine_thread, total * element);
}
