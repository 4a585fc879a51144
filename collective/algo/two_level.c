/* The two-level all-reduce, for rings of H hosts with L ranks each (L, H >= 2;
 * kolo_shape): (1) a reduce-scatter inside each host, over the ring's own
 * links between the host's ranks (shared memory where the neighbours took it)
 * and the host's wrap link (mesh: its last rank to its first), leaving local
 * rank l with shard (l+1) mod L summed over the host; (2) L rings across hosts
 * at once, one per local rank, each on its own mesh TCP links (rank +- L), each
 * a ring all-reduce of that rank's shard; (3) an all-gather of the shards
 * inside the host. Every shard's final value is made by one rank and copied
 * everywhere else, so every rank holds the same bits. Works over pieces (a
 * virtual concatenation), so the engine's fused batches take it as well. */
#include <stdlib.h>

#include "collective/algo/algo.h"

/* The element range of a sub-ring's buffer and where this rank sits in it. */
typedef struct subring {
  const kolo_piece *pieces;
  const size_t *offsets;
  int count;
  size_t element;
  size_t base, elements; /* the range, in elements of the virtual buffer */
  int members, position;
} subring;

static size_t chunk_byte(const subring *s, int chunk) {
  return (s->base + kolo_chunk_start(s->elements, s->members, chunk)) * s->element;
}

static void plan_range_of(kolo_ring_plan *plan, const subring *s, int chunk, int mode,
                          int depends_first, int finalize) {
  kolo_plan_range(plan, s->pieces, s->offsets, s->count, chunk_byte(s, chunk),
                  chunk_byte(s, chunk + 1), mode, depends_first, finalize);
}

/* A ring over the sub-ring's members: a reduce-scatter (reduce_mode; its first
 * sends from first_send_mode) and/or an all-gather of the chunk each member owns
 * after a reduce-scatter (position + 1), pipelined like the flat ring. */
static void plan_subring(kolo_ring_plan *plan, const subring *s, int reduce_mode,
                         int first_send_mode, int gather, int finalize, int *recv_first) {
  int m = s->members, pos = s->position, at = 0;
  for (int t = 0; reduce_mode >= 0 && t < m - 1; t++, at++) {
    plan_range_of(plan, s, kolo_wrap_rank(pos - t, m), t == 0 ? first_send_mode : KOLO_FROM_DST,
                  t == 0 ? -1 : recv_first[at - 1], 0);
    recv_first[at] = plan->recv_count;
    plan_range_of(plan, s, kolo_wrap_rank(pos - t - 1, m), reduce_mode, -1, finalize && t == m - 2);
  }
  for (int u = 0; gather && u < m - 1; u++, at++) {
    plan_range_of(plan, s, kolo_wrap_rank(pos + 1 - u, m), KOLO_FROM_DST,
                  at == 0 ? -1 : recv_first[at - 1], 0);
    recv_first[at] = plan->recv_count;
    plan_range_of(plan, s, kolo_wrap_rank(pos - u, m), KOLO_COPY_INTO_DST, -1, 0);
  }
}

/* Runs the plan around this rank's host: to the next local rank (the ring's
 * link, or the wrap from the last one) and from the previous one. */
static kolo_status run_in_host(kolo_ring *ring, int engine_thread, size_t bytes) {
  const kolo_net *net = ring->net;
  int per = net->shape.per_host, l = net->shape.local, first = net->rank - l;
  const kolo_channel *to =
      l < per - 1 ? kolo_direction_pick(&net->next, bytes, net->bulk_min_bytes) : &net->mesh[first];
  const kolo_channel *from = l > 0 ? kolo_direction_pick(&net->prev, bytes, net->bulk_min_bytes)
                                   : &net->mesh[first + per - 1];
  return kolo_execute_plan_over(ring, engine_thread, to, first + (l + 1) % per, from,
                                first + (l + per - 1) % per);
}

/* Runs the plan around this rank's cross-host ring (rank +- per_host). */
static kolo_status run_across(kolo_ring *ring, int engine_thread) {
  const kolo_net *net = ring->net;
  int to = kolo_wrap_rank(net->rank + net->shape.per_host, net->size);
  int from = kolo_wrap_rank(net->rank - net->shape.per_host, net->size);
  return kolo_execute_plan_over(ring, engine_thread, &net->mesh[to], to, &net->mesh[from], from);
}

kolo_status kolo_allreduce_two_level(kolo_ring *ring, const kolo_piece *pieces, int count,
                                     kolo_dtype dtype, kolo_op op, int engine_thread) {
  const kolo_net *net = ring->net;
  size_t element = kolo_dtype_size(dtype), bytes = 0;
  size_t *offsets = malloc((size_t)(count > 0 ? count : 1) * sizeof *offsets);
  int *recv_first = malloc((size_t)(2 * net->size) * sizeof *recv_first);
  kolo_status status = offsets && recv_first ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  for (int p = 0; p < count && status == KOLO_OK; p++) {
    offsets[p] = bytes;
    bytes += pieces[p].bytes;
  }
  if (status == KOLO_OK) status = kolo_plan_reserve(&ring->plan, 2 * (count + net->size) + 4);
  int per = net->shape.per_host, hosts = net->shape.hosts, l = net->shape.local;
  size_t elements = bytes / element;
  subring in_host = {pieces, offsets, count, element, 0, elements, per, l};
  int shard = (l + 1) % per;
  size_t shard_base = kolo_chunk_start(elements, per, shard);
  subring across = {pieces,     offsets,
                    count,      element,
                    shard_base, kolo_chunk_start(elements, per, shard + 1) - shard_base,
                    hosts,      net->shape.host};
  if (status == KOLO_OK) { /* (1) reduce-scatter inside the host */
    kolo_plan_reset(&ring->plan, dtype, op);
    plan_subring(&ring->plan, &in_host, KOLO_REDUCE_INTO_DST, KOLO_FROM_SRC, 0, 0, recv_first);
    status = run_in_host(ring, engine_thread, bytes);
  }
  if (status == KOLO_OK) { /* (2) this rank's shard across the hosts */
    kolo_plan_reset(&ring->plan, dtype, op);
    plan_subring(&ring->plan, &across, KOLO_REDUCE_DST, KOLO_FROM_DST, 1, op == KOLO_AVG,
                 recv_first);
    status = run_across(ring, engine_thread);
  }
  if (status == KOLO_OK) { /* (3) all-gather inside the host */
    kolo_plan_reset(&ring->plan, dtype, op);
    plan_subring(&ring->plan, &in_host, -1, KOLO_FROM_DST, 1, 0, recv_first);
    status = run_in_host(ring, engine_thread, bytes);
  }
  free(offsets);
  free(recv_first);
  return status;
}
