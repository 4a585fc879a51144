/* The fused all-reduce: one ring all-reduce over a list of pieces that together
 * form a virtual concatenation of tensors (the fusion buffer for small ones, the
 * caller's own buffers for large ones). The ring's chunks are cut from the
 * virtual byte range, so every rank sends the same byte stream whichever of its
 * pieces hold the bytes; each chunk becomes one plan item per piece it touches,
 * and a send item waits on the recv item that produced the same bytes one step
 * earlier, as in the single-buffer ring. No byte of a large tensor is copied. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collective/algo/algo.h"
#include "common/checks.h"

static int wrap_rank(int value, int size) {
  return ((value % size) + size) % size;
}

enum {
  FROM_SRC = KOLO_FROM_SRC,
  FROM_DST = KOLO_FROM_DST,
  REDUCE_INTO_DST = KOLO_REDUCE_INTO_DST,
  COPY_INTO_DST = KOLO_COPY_INTO_DST
};

static void plan_pieces(kolo_ring *ring, const kolo_piece *pieces, const size_t *offsets, int count,
                        size_t elements, size_t element, kolo_op op, int *recv_first) {
  kolo_ring_plan *plan = &ring->plan;
  int n = ring->net->size, r = ring->net->rank;
#define CHUNK_BEGIN(c) (kolo_chunk_start(elements, n, (c)) * element)
#define CHUNK_END(c) (kolo_chunk_start(elements, n, (c) + 1) * element)
  for (int t = 0; t < n - 1; t++) { /* reduce-scatter */
    int sc = wrap_rank(r - t, n), rc = wrap_rank(r - t - 1, n);
    kolo_plan_range(plan, pieces, offsets, count, CHUNK_BEGIN(sc), CHUNK_END(sc),
                    t == 0 ? FROM_SRC : FROM_DST, t == 0 ? -1 : recv_first[t - 1], 0);
    recv_first[t] = plan->recv_count;
    kolo_plan_range(plan, pieces, offsets, count, CHUNK_BEGIN(rc), CHUNK_END(rc), REDUCE_INTO_DST,
                    -1, op == KOLO_AVG && t == n - 2);
  }
  for (int u = 0; u < n - 1; u++) { /* all-gather */
    int sc = wrap_rank(r + 1 - u, n), rc = wrap_rank(r - u, n);
    kolo_plan_range(plan, pieces, offsets, count, CHUNK_BEGIN(sc), CHUNK_END(sc), FROM_DST,
                    recv_first[n - 2 + u], 0);
    recv_first[n - 1 + u] = plan->recv_count;
    kolo_plan_range(plan, pieces, offsets, count, CHUNK_BEGIN(rc), CHUNK_END(rc), COPY_INTO_DST, -1,
                    0);
  }
#undef CHUNK_BEGIN
#undef CHUNK_END
}

/* Two ranks over TCP (kolo_allreduce_choose): every piece is sent whole, in
 * order (the same virtual byte stream as the ring's), and the peer's stream is
 * reduced into the pieces as it arrives, operands in rank order; a piece
 * reduced in place waits, segment by segment, for its own send. */
static void plan_pieces_pair(kolo_ring *ring, const kolo_piece *pieces, int count, kolo_op op) {
  kolo_ring_plan *plan = &ring->plan;
  plan->segment_bytes = ring->pair_segment_bytes;
  for (int p = 0; p < count; p++) kolo_plan_send(plan, pieces[p].src, pieces[p].bytes, -1);
  for (int p = 0; p < count; p++) {
    const kolo_piece *piece = &pieces[p];
    int index = kolo_plan_recv(plan, piece->dst, piece->src, piece->bytes, op == KOLO_AVG);
    uintptr_t from = (uintptr_t)piece->src, to = (uintptr_t)piece->dst;
    plan->recvs[index].remote_first = ring->net->rank == 1;
    plan->recvs[index].guards_send =
        (to < from + piece->bytes && from < to + piece->bytes) ? p : -1;
  }
}

kolo_status kolo_ring_allreduce_pieces(kolo_ring *ring, const kolo_piece *pieces, int count,
                                       kolo_dtype dtype, kolo_op op, int engine_thread) {
  size_t element = kolo_dtype_size(dtype), bytes = 0;
  size_t *offsets = malloc((size_t)(count > 0 ? count : 1) * sizeof *offsets);
  int *recv_first = malloc((size_t)(2 * ring->net->size) * sizeof *recv_first);
  kolo_status status = offsets && recv_first ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  for (int p = 0; p < count && status == KOLO_OK; p++) {
    offsets[p] = bytes;
    bytes += pieces[p].bytes;
  }
  /* each phase touches every piece at most once per chunk boundary it spans */
  if (status == KOLO_OK) status = kolo_plan_reserve(&ring->plan, 2 * (count + ring->net->size) + 4);
  if (status == KOLO_OK && ring->net->size == 1) {
    for (int p = 0; p < count; p++) {
      if (pieces[p].dst != pieces[p].src) memmove(pieces[p].dst, pieces[p].src, pieces[p].bytes);
    }
  } else if (status == KOLO_OK && bytes > 0) {
    kolo_plan_reset(&ring->plan, dtype, op);
    kolo_allreduce_algo algo = kolo_ring_select(ring, bytes / element, bytes);
    if (algo == KOLO_ALLREDUCE_DOUBLING) {
      status = kolo_allreduce_doubling(ring, pieces, count, dtype, op, engine_thread);
    } else if (algo == KOLO_ALLREDUCE_TWO_LEVEL) {
      status = kolo_allreduce_two_level(ring, pieces, count, dtype, op, engine_thread);
    } else if (algo == KOLO_ALLREDUCE_HALVING) {
      status = kolo_allreduce_halving(ring, pieces, count, dtype, op, engine_thread);
    } else {
      if (algo == KOLO_ALLREDUCE_PAIR)
        plan_pieces_pair(ring, pieces, count, op);
      else
        plan_pieces(ring, pieces, offsets, count, bytes / element, element, op, recv_first);
      status = kolo_execute_plan(ring, engine_thread, bytes);
    }
  }
  free(offsets);
  free(recv_first);
  return status;
}
