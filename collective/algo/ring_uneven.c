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

#include "collective/comm.h"
#include "common/checks.h"
#include "common/log.h"

static int wrap_rank(int value, int size) {
  return ((value % size) + size) % size;
}

kolo_status kolo_ring_reducescatter_v(kolo_comm *comm, kolo_request *request, int engine_thread) {
  int n = comm->size, r = comm->rank;
  size_t element = kolo_dtype_size(request->dtype);
  size_t *offsets = comm->block_offsets, *bytes = comm->block_bytes, total = 0;
  for (int b = 0; b < n; b++) {
    offsets[b] = total;
    bytes[b] = request->split_counts[b] * element;
    total += bytes[b];
  }
  const char *src = request->send;
  char *dst = request->recv;
  if (total == 0) return KOLO_OK;
  if (n == 1) {
    if (src != dst) memmove(dst, src, bytes[0]);
    return KOLO_OK;
  }
  KOLO_CHECK(kolo_ensure_buffer(&comm->scratch, &comm->scratch_bytes, total));
  kolo_ring_plan *plan = &comm->plan;
  kolo_plan_reset(plan, request->dtype, request->op);
  /* shifted so that rank r ends with block r; the last step lands in recv */
  for (int t = 0; t < n - 1; t++) {
    int send_block = wrap_rank(r - t - 1, n);
    int recv_block = wrap_rank(r - t - 2, n);
    const char *from = (t == 0 ? src : comm->scratch) + offsets[send_block];
    kolo_plan_send(plan, from, bytes[send_block], t == 0 ? -1 : t - 1);
    char *into = t == n - 2 ? dst : comm->scratch + offsets[recv_block];
    kolo_plan_recv(plan, into, src + offsets[recv_block], bytes[recv_block],
                   request->op == KOLO_AVG && t == n - 2);
  }
  return kolo_execute_plan(comm, engine_thread, total);
}

/* Phase 1 of the all-to-all: row b of comm->matrix = rank b's n send counts and
 * its receive capacity (UINT64_MAX when the engine allocates). */
static kolo_status gather_split_matrix(kolo_comm *comm, kolo_request *request, int engine_thread) {
  int n = comm->size, r = comm->rank;
  size_t row = (size_t)(n + 1);
  KOLO_CHECK(
      kolo_ensure_buffer(&comm->matrix, &comm->matrix_bytes, (size_t)n * row * sizeof(uint64_t)));
  uint64_t *matrix = (uint64_t *)comm->matrix;
  for (int d = 0; d < n; d++) matrix[(size_t)r * row + (size_t)d] = request->split_counts[d];
  matrix[(size_t)r * row + (size_t)n] =
      request->engine_output ? UINT64_MAX : request->recv_capacity;
  if (n == 1) return KOLO_OK;
  for (int b = 0; b < n; b++) {
    comm->block_offsets[b] = (size_t)b * row * sizeof(uint64_t);
    comm->block_bytes[b] = row * sizeof(uint64_t);
  }
  kolo_plan_reset(&comm->plan, KOLO_UINT8, KOLO_SUM);
  kolo_plan_allgather_blocks(comm, comm->matrix, comm->block_offsets, comm->block_bytes);
  return kolo_execute_plan(comm, engine_thread, 0);
}

/* Every rank's receive total against its capacity (the same verdict on every rank). */
static kolo_status check_capacities(kolo_comm *comm, kolo_request *request, uint64_t *all_blocks) {
  int n = comm->size;
  size_t row = (size_t)(n + 1);
  const uint64_t *matrix = (const uint64_t *)comm->matrix;
  *all_blocks = 0;
  for (int d = 0; d < n; d++) {
    uint64_t total = 0;
    for (int o = 0; o < n; o++) total += matrix[(size_t)o * row + (size_t)d];
    *all_blocks += total;
    uint64_t capacity = matrix[(size_t)d * row + (size_t)n];
    if (total > capacity) {
      kolo_request_message(request, "alltoall '%s': rank %d receives %llu elements, capacity %llu",
                           request->name, d, (unsigned long long)total,
                           (unsigned long long)capacity);
      KOLO_LOGE("kolo", "rank %d: %s", comm->rank, request->message);
      return KOLO_ERR_TOO_LARGE;
    }
  }
  return KOLO_OK;
}

static size_t block_count(const kolo_comm *comm, int from, int to) {
  const uint64_t *matrix = (const uint64_t *)comm->matrix;
  return (size_t)matrix[(size_t)from * (size_t)(comm->size + 1) + (size_t)to];
}

/* Bytes of the bundle from origin o that rank r forwards after hop t: the
 * blocks for r+1 .. o+n-1. */
static size_t rest_bytes(const kolo_comm *comm, int o, int t, size_t element) {
  int n = comm->size, r = comm->rank;
  size_t bytes = 0;
  for (int k = 1; k <= n - 1 - t; k++) bytes += block_count(comm, o, wrap_rank(r + k, n)) * element;
  return bytes;
}

static kolo_status plan_alltoall(kolo_comm *comm, kolo_request *request, const size_t *out_offset) {
  int n = comm->size, r = comm->rank;
  size_t element = kolo_dtype_size(request->dtype);
  size_t scratch_total = 0;
  for (int t = 1; t < n - 1; t++)
    scratch_total += rest_bytes(comm, wrap_rank(r - t, n), t, element);
  KOLO_CHECK(kolo_ensure_buffer(&comm->scratch, &comm->scratch_bytes, scratch_total));
  const char *send = request->send;
  size_t mine_at = 0, total_send = 0;
  for (int d = 0; d < n; d++) {
    if (d == r) mine_at = total_send;
    total_send += block_count(comm, r, d) * element;
  }
  size_t after_mine = mine_at + block_count(comm, r, r) * element;
  kolo_ring_plan *plan = &comm->plan;
  kolo_plan_reset(plan, request->dtype, KOLO_SUM);
  /* step 1: my blocks for r+1 .. n-1, then for 0 .. r-1 */
  kolo_plan_send(plan, send + after_mine, total_send - after_mine, -1);
  kolo_plan_send(plan, send, mine_at, -1);
  char *region = comm->scratch;
  int previous_rest = -1;
  size_t previous_bytes = 0;
  char *previous_region = NULL;
  for (int t = 1; t <= n - 1; t++) {
    int o = wrap_rank(r - t, n);
    kolo_plan_recv(plan, (char *)request->recv + out_offset[o], NULL,
                   block_count(comm, o, r) * element, 0);
    if (previous_rest >= 0) kolo_plan_send(plan, previous_region, previous_bytes, previous_rest);
    previous_rest = -1;
    if (t < n - 1) {
      previous_bytes = rest_bytes(comm, o, t, element);
      previous_region = region;
      previous_rest = kolo_plan_recv(plan, region, NULL, previous_bytes, 0);
      region += previous_bytes;
    }
  }
  return KOLO_OK;
}

kolo_status kolo_ring_alltoall(kolo_comm *comm, kolo_request *request, int engine_thread) {
  int n = comm->size, r = comm->rank;
  size_t element = kolo_dtype_size(request->dtype);
  KOLO_CHECK(gather_split_matrix(comm, request, engine_thread));
  uint64_t all_blocks = 0;
  KOLO_CHECK(check_capacities(comm, request, &all_blocks));
  size_t *out_offset = comm->block_offsets, received = 0;
  for (int o = 0; o < n; o++) {
    out_offset[o] = received * element;
    received += block_count(comm, o, r);
    if (request->recv_counts != NULL) request->recv_counts[o] = block_count(comm, o, r);
  }
  if (request->engine_output) KOLO_CHECK(kolo_output_allocate(request, received));
  size_t mine_at = 0;
  for (int d = 0; d < r; d++) mine_at += block_count(comm, r, d) * element;
  size_t mine = block_count(comm, r, r) * element;
  if (mine > 0) {
    memmove((char *)request->recv + out_offset[r], (const char *)request->send + mine_at, mine);
  }
  if (n == 1 || all_blocks == 0) return KOLO_OK;
  KOLO_CHECK(plan_alltoall(comm, request, out_offset));
  return kolo_execute_plan(comm, engine_thread, (size_t)all_blocks * element);
}
