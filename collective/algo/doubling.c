/* The latency all-reduces over the mesh links, both on the partners of
 * recursive doubling (p: the largest power of two <= n). Ranks below 2(n-p)
 * first fold in pairs (the even one gives its buffer to the odd one, which
 * takes part for both, and gets the result back at the end).
 *
 * Recursive doubling: log2(p) steps instead of the gather's n-1. In each step
 * a rank exchanges its whole partial with its partner (new rank ^ 2^k) and
 * reduces, operands in new-rank order: partners compute the same bits, so
 * after the last step every rank holds the same bits (a group of 2^k ranks
 * agrees after step k). AVG divides once, at the end, before the result goes
 * back to a folded rank.
 *
 * Halving (Rabenseifner's): a reduce-scatter by recursive vector halving with
 * distance doubling (step k: with new rank ^ 2^k, send the half of the current
 * range the partner keeps and reduce the half this rank keeps), then an
 * all-gather by recursive vector doubling in the reverse order. 2 log2(p)
 * steps, and each rank's links carry the ring's 2(p-1)/p of the buffer where
 * doubling's carry log2(p) buffers. Ranks are ordered by host, so the nearest
 * partners (one host) move the largest halves and the hops across hosts the
 * smallest. Every element's final value is made by one rank (AVG divided there)
 * and copied to the others: the same bits everywhere.
 *
 * Both work over pieces (a virtual concatenation), so the engine's fused
 * batches take them as well as single buffers. */
#include <stdint.h>
#include <stdlib.h>

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

/* What the ranks that take part run between the folds (in_dst: this rank's value is in
 * dst already, after it took its folded neighbour's). */
typedef kolo_status (*fold_core)(void *context, int newrank, int p, int in_dst);

/* The fold around core: a folded (even) rank below 2(n-p) gives its buffer to rank + 1
 * and gets the result back; that odd rank reduces it into dst first and sends the
 * result back after core. */
static kolo_status with_fold(kolo_ring *ring, const kolo_piece *pieces, int count, kolo_dtype dtype,
                             kolo_op op, int engine_thread, fold_core core, void *context) {
  int n = ring->net->size, r = ring->net->rank;
  int p = kolo_doubling_pow2(n), rem = n - p;
  int newrank = kolo_doubling_newrank(n, r);
  kolo_ring_plan *plan = &ring->plan;
  kolo_status status = kolo_plan_reserve(plan, 2 * count + 4);
  if (status != KOLO_OK) return status;
  kolo_plan_reset(plan, dtype, op);
  if (newrank < 0) return folded_rank(ring, pieces, count, engine_thread);
  if (r < 2 * rem) { /* take rank - 1's buffer: dst = theirs (op) ours */
    plan_exchange(plan, pieces, count, 0, 1, 0, 1);
    status = run_with(ring, r - 1, engine_thread);
    if (status != KOLO_OK) return status;
  }
  status = core(context, newrank, p, r < 2 * rem);
  if (status == KOLO_OK && r < 2 * rem) { /* the result back to the folded rank */
    kolo_plan_reset(plan, dtype, op);
    for (int q = 0; q < count; q++) kolo_plan_send(plan, pieces[q].dst, pieces[q].bytes, -1);
    status = run_with(ring, r - 1, engine_thread);
  }
  return status;
}

/* One algorithm's call, as the cores see it. */
typedef struct call {
  kolo_ring *ring;
  const kolo_piece *pieces;
  size_t *offsets; /* halving: each piece's first byte */
  int count;
  kolo_dtype dtype;
  kolo_op op;
  int engine_thread;
} call;

static kolo_status doubling_core(void *context, int newrank, int p, int in_dst) {
  const call *c = context;
  kolo_ring *ring = c->ring;
  kolo_status status = KOLO_OK;
  for (int mask = 1; mask < p && status == KOLO_OK; mask <<= 1) {
    int partner_new = newrank ^ mask;
    kolo_plan_reset(&ring->plan, c->dtype, c->op);
    plan_exchange(&ring->plan, c->pieces, c->count, in_dst, partner_new < newrank, 1, 1);
    status = run_with(ring, kolo_doubling_oldrank(ring->net->size, partner_new), c->engine_thread);
    in_dst = 1;
  }
  size_t element = kolo_dtype_size(c->dtype);
  for (int q = 0; status == KOLO_OK && c->op == KOLO_AVG && q < c->count; q++)
    kolo_divide(c->pieces[q].dst, c->pieces[q].bytes / element, c->dtype, ring->net->size);
  return status;
}

kolo_status kolo_allreduce_doubling(kolo_ring *ring, const kolo_piece *pieces, int count,
                                    kolo_dtype dtype, kolo_op op, int engine_thread) {
  call c = {ring, pieces, NULL, count, dtype, op, engine_thread};
  return with_fold(ring, pieces, count, dtype, op, engine_thread, doubling_core, &c);
}

/* The halving's ranges: [lo[k], hi[k]) elements of the virtual buffer held after step k. */
#define HALVING_MAX_STEPS 32

static void plan_elements(kolo_ring_plan *plan, const call *c, size_t lo, size_t hi, int mode,
                          int finalize) {
  size_t element = kolo_dtype_size(c->dtype);
  kolo_plan_range(plan, c->pieces, c->offsets, c->count, lo * element, hi * element, mode, -1,
                  finalize);
}

/* One step with partner (a new rank): send [give_lo, give_hi) (from src before this rank's
 * value lives in dst), then receive [take_lo, take_hi), reduced (reduce_mode) or copied. */
static kolo_status halving_step(const call *c, int partner_new, size_t give_lo, size_t give_hi,
                                int send_mode, size_t take_lo, size_t take_hi, int recv_mode,
                                int finalize) {
  kolo_ring_plan *plan = &c->ring->plan;
  kolo_plan_reset(plan, c->dtype, c->op);
  plan_elements(plan, c, give_lo, give_hi, send_mode, 0);
  plan_elements(plan, c, take_lo, take_hi, recv_mode, finalize);
  return run_with(c->ring, kolo_doubling_oldrank(c->ring->net->size, partner_new),
                  c->engine_thread);
}

/* Steps 1..log2(p) and back, between the folds. */
static kolo_status halving_core(void *context, int newrank, int p, int in_dst) {
  const call *c = context;
  size_t lo[HALVING_MAX_STEPS + 1], hi[HALVING_MAX_STEPS + 1], bytes = 0;
  for (int q = 0; q < c->count; q++) bytes += c->pieces[q].bytes;
  int steps = 0;
  kolo_status status = KOLO_OK;
  lo[0] = 0;
  hi[0] = bytes / kolo_dtype_size(c->dtype);
  for (int mask = 1; mask < p && status == KOLO_OK; mask <<= 1, steps++) {
    size_t mid = lo[steps] + (hi[steps] - lo[steps]) / 2;
    int upper = (newrank & mask) != 0; /* this rank keeps the upper half */
    lo[steps + 1] = upper ? mid : lo[steps];
    hi[steps + 1] = upper ? hi[steps] : mid;
    status = halving_step(c, newrank ^ mask, upper ? lo[steps] : mid, upper ? mid : hi[steps],
                          in_dst ? KOLO_FROM_DST : KOLO_FROM_SRC, lo[steps + 1], hi[steps + 1],
                          in_dst ? KOLO_REDUCE_DST : KOLO_REDUCE_INTO_DST,
                          c->op == KOLO_AVG && mask * 2 >= p);
    in_dst = 1;
  }
  for (int k = steps; k > 0 && status == KOLO_OK; k--) { /* the all-gather, nearest last */
    int upper = lo[k] != lo[k - 1];                      /* the sibling is below */
    status =
        halving_step(c, newrank ^ (1 << (k - 1)), lo[k], hi[k], KOLO_FROM_DST,
                     upper ? lo[k - 1] : hi[k], upper ? lo[k] : hi[k - 1], KOLO_COPY_INTO_DST, 0);
  }
  return status;
}

kolo_status kolo_allreduce_halving(kolo_ring *ring, const kolo_piece *pieces, int count,
                                   kolo_dtype dtype, kolo_op op, int engine_thread) {
  call c = {ring,         pieces, malloc((size_t)(count > 0 ? count : 1) * sizeof(size_t)),
            count,        dtype,  op,
            engine_thread};
  if (c.offsets == NULL) return KOLO_ERR_NO_MEMORY;
  size_t bytes = 0;
  for (int q = 0; q < count; q++) {
    c.offsets[q] = bytes;
    bytes += pieces[q].bytes;
  }
  kolo_status status = with_fold(ring, pieces, count, dtype, op, engine_thread, halving_core, &c);
  free(c.offsets);
  return status;
}
