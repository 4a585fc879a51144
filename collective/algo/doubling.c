/* The latency all-reduce: recursive doubling over the mesh links, log2(p)
 * steps instead of the gather's n-1 (p: the largest power of two <= n). Ranks
 * below 2(n-p) first fold in pairs (the even one gives its buffer to the odd
 * one, which takes part for both, and gets the result back at the end). In
 * each step a rank exchanges its whole partial with its partner (new rank ^
 * 2^k) and reduces, operands in new-rank order: partners compute the same
 * bits, so after the last step every rank holds the same bits (a group of 2^k
 * ranks agrees after step k). AVG divides once, at the end, before the result
 * goes back to a folded rank. Works over pieces (a virtual concatenation), so
 * the engine's fused batches take it as well as single buffers. */
#include <stdint.h>

#include "collective/algo/algo.h"

static int overlaps(const kolo_piece *piece) {
  uintptr_t from = (uintptr_t)piece->src, to = (uintptr_t)piece->dst;
  return to < from + piece->bytes && from < to + piece->bytes;
}

/* Every piece sent whole (from dst once this rank's value lives there), and the
 * partner's reduced into dst as it streams in; a piece reduced over what is
 * being sent waits, segment by segment, for its own send. */
static void plan_exchange(kolo_ring_plan *plan, const kolo_piece *pieces, int count, int in_dst,
                          int remote_first, int send, int reduce) {
  for (int p = 0; send && p < count; p++)
    kolo_plan_send(plan, in_dst ? pieces[p].dst : pieces[p].src, pieces[p].bytes, -1);
  for (int p = 0; reduce && p < count; p++) {
    const char *local = in_dst ? pieces[p].dst : pieces[p].src;
    int index = kolo_plan_recv(plan, pieces[p].dst, local, pieces[p].bytes, 0);
    plan->recvs[index].remote_first = remote_first;
    plan->recvs[index].guards_send = send && (in_dst || overlaps(&pieces[p])) ? p : -1;
  }
}

static kolo_status run_with(kolo_ring *ring, int peer, int engine_thread) {
  const kolo_channel *link = &ring->net->mesh[peer];
  return kolo_execute_plan_over(ring, engine_thread, link, peer, link, peer);
}

/* A folded (even) rank: gives its buffer to rank + 1 and receives the result. */
static kolo_status folded_rank(kolo_ring *ring, const kolo_piece *pieces, int count,
                               int engine_thread) {
  kolo_ring_plan *plan = &ring->plan;
  for (int p = 0; p < count; p++) kolo_plan_send(plan, pieces[p].src, pieces[p].bytes, -1);
  /* the result comes back only after the partner received all of ours, so the
   * copy may land on src (in place) safely */
  for (int p = 0; p < count; p++) kolo_plan_recv(plan, pieces[p].dst, NULL, pieces[p].bytes, 0);
  return run_with(ring, ring->net->rank + 1, engine_thread);
}

kolo_status kolo_allreduce_doubling(kolo_ring *ring, const kolo_piece *pieces, int count,
                                    kolo_dtype dtype, kolo_op op, int engine_thread) {
  int n = ring->net->size, r = ring->net->rank;
  int p = kolo_doubling_pow2(n), rem = n - p;
  int newrank = kolo_doubling_newrank(n, r);
  kolo_ring_plan *plan = &ring->plan;
  kolo_status status = kolo_plan_reserve(plan, 2 * count + 4);
  if (status != KOLO_OK) return status;
  kolo_plan_reset(plan, dtype, op);
  if (newrank < 0) return folded_rank(ring, pieces, count, engine_thread);
  int in_dst = 0;
  if (r < 2 * rem) { /* take rank - 1's buffer: dst = theirs (op) ours */
    plan_exchange(plan, pieces, count, 0, 1, 0, 1);
    status = run_with(ring, r - 1, engine_thread);
    if (status != KOLO_OK) return status;
    in_dst = 1;
  }
  for (int mask = 1; mask < p; mask <<= 1) {
    int partner_new = newrank ^ mask;
    kolo_plan_reset(plan, dtype, op);
    plan_exchange(plan, pieces, count, in_dst, partner_new < newrank, 1, 1);
    status = run_with(ring, kolo_doubling_oldrank(n, partner_new), engine_thread);
    if (status != KOLO_OK) return status;
    in_dst = 1;
  }
  size_t element = kolo_dtype_size(dtype);
  if (op == KOLO_AVG)
    for (int q = 0; q < count; q++) kolo_divide(pieces[q].dst, pieces[q].bytes / element, dtype, n);
  if (r < 2 * rem) { /* the result back to the folded rank */
    kolo_plan_reset(plan, dtype, op);
    for (int q = 0; q < count; q++) kolo_plan_send(plan, pieces[q].dst, pieces[q].bytes, -1);
    status = run_with(ring, r - 1, engine_thread);
  }
  return status;
}
