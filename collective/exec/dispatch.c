/* The one dispatcher: a request to the algorithm that runs it (kolo_exec_run),
 * on the calling thread (the executor, or a blocking caller inline). The
 * request-level steps of the collectives with sizes known only on the ring
 * (all-gather, all-to-all) sit here, between their algorithm's phases: the
 * receive counts handed back, the engine's output allocated, the capacity
 * checked with the same verdict on every rank. */
#include <stdint.h>

#include "collective/exec/exec.h"
#include "common/checks.h"
#include "common/log.h"

static kolo_status run_allgather(kolo_exec *ex, kolo_request *request, int engine_thread) {
  kolo_ring *ring = ex->ring;
  size_t total = 0;
  KOLO_CHECK(kolo_ring_allgather_counts(ring, request->count, engine_thread, &total));
  if (request->recv_counts != NULL) {
    for (int b = 0; b < ring->net->size; b++) request->recv_counts[b] = (size_t)ring->counts[b];
  }
  if (request->engine_output) {
    KOLO_CHECK(kolo_output_allocate(ex, request, total));
  } else if (total > request->recv_capacity) {
    KOLO_LOGE("kolo", "allgather: %zu elements do not fit the receive capacity %zu", total,
              request->recv_capacity);
    kolo_request_message(request, "allgather: %zu elements do not fit the receive capacity %zu",
                         total, request->recv_capacity);
    return KOLO_ERR_TOO_LARGE;
  }
  return kolo_ring_allgather_blocks(ring, request->send, request->recv, request->dtype, total,
                                    engine_thread);
}

static kolo_status run_alltoall(kolo_exec *ex, kolo_request *request, int engine_thread) {
  kolo_ring *ring = ex->ring;
  int n = ring->net->size, r = ring->net->rank;
  size_t element = kolo_dtype_size(request->dtype);
  uint64_t capacity = request->engine_output ? UINT64_MAX : request->recv_capacity;
  KOLO_CHECK(kolo_ring_alltoall_counts(ring, request->split_counts, capacity, engine_thread));
  uint64_t all_blocks = 0, total = 0;
  int d = kolo_alltoall_overflow(ring, &all_blocks, &total, &capacity);
  if (d >= 0) {
    kolo_request_message(request, "alltoall '%s': rank %d receives %llu elements, capacity %llu",
                         request->name, d, (unsigned long long)total, (unsigned long long)capacity);
    KOLO_LOGE("kolo", "rank %d: %s", r, request->message);
    return KOLO_ERR_TOO_LARGE;
  }
  size_t *out_offset = ring->block_offsets, received = 0;
  for (int o = 0; o < n; o++) {
    out_offset[o] = received * element;
    received += kolo_alltoall_block(ring, o, r);
    if (request->recv_counts != NULL) request->recv_counts[o] = kolo_alltoall_block(ring, o, r);
  }
  if (request->engine_output) KOLO_CHECK(kolo_output_allocate(ex, request, received));
  return kolo_ring_alltoall_blocks(ring, request->send, request->recv, request->dtype, out_offset,
                                   all_blocks, engine_thread);
}

kolo_status kolo_exec_run(kolo_exec *ex, kolo_request *request, int engine_thread) {
  kolo_ring *ring = ex->ring;
  if (atomic_load(&ring->net->failed)) return kolo_net_error(ring->net, NULL);
  switch (request->kind) {
    case KOLO_REQUEST_ALLREDUCE:
      return kolo_exec_allreduce(ex, request, engine_thread);
    case KOLO_REQUEST_ALLGATHER:
      return run_allgather(ex, request, engine_thread);
    case KOLO_REQUEST_BROADCAST:
      if (request->holds != NULL)
        return kolo_ring_broadcast_sources(ring, request->recv,
                                           request->count * kolo_dtype_size(request->dtype),
                                           request->holds, request->dtype, engine_thread);
      return kolo_ring_broadcast(ring, request->recv,
                                 request->count * kolo_dtype_size(request->dtype), request->root,
                                 request->dtype, engine_thread);
    case KOLO_REQUEST_REDUCESCATTER:
      if (request->counts_from > 0)
        return kolo_exec_reducescatter_joined(ex, request, engine_thread);
      if (request->split_counts != NULL)
        return kolo_ring_reducescatter_v(ring, request->send, request->recv, request->split_counts,
                                         request->dtype, request->op, engine_thread);
      return kolo_ring_reducescatter(ring, request->send, request->recv, request->count,
                                     request->dtype, request->op, engine_thread);
    case KOLO_REQUEST_ALLTOALL:
      return run_alltoall(ex, request, engine_thread);
    case KOLO_REQUEST_JOIN:
      return kolo_exec_join(ex, request, engine_thread);
    case KOLO_REQUEST_BATCH:
      return kolo_exec_batch(ex, request->batch, NULL);
    case KOLO_REQUEST_BARRIER: {
      uint8_t token = 1, result = 0;
      return kolo_ring_allreduce(ring, &token, &result, 1, KOLO_UINT8, KOLO_MAX, engine_thread);
    }
  }
  return KOLO_ERR_INVALID_ARG;
}
