/* The ring algorithms. Each collective is compiled into a plan of send and recv
 * items (reduce-scatter then all-gather for all-reduce; a chain for broadcast;
 * a ring all-gather for small buffers), and one executor streams the plan over
 * the ring's data connections with non-blocking I/O, so that sending, receiving
 * and reducing overlap segment by segment. */
#define _GNU_SOURCE /* POLLRDHUP */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collective/comm.h"
#include "common/clock.h"
#include "common/log.h"

/* A hint to the CPU that this is a busy-wait loop. */
static inline void spin_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* The spin budget learns how long stalls last (competitive spinning): a stall
 * that ended within KOLO_SPIN_US, spun out or slept through, sets it to twice
 * that wait, so the next one like it costs no sleep and wake-up (a wake-up
 * from poll costs 25-100 us on this VM); only a stall longer than KOLO_SPIN_US
 * (the neighbour is away: computing, descheduled) halves it, down to a
 * sixteenth, so a rank that mostly waits long burns little CPU. The old rule
 * (double on a spin that saw progress, halve on a sleep) could only go down: a
 * one-stall operation's success was never counted, and once at the floor
 * every 64 KiB wait overran it, slept, and made the neighbour wait in turn. */
int64_t kolo_spin_budget_next(int64_t budget_ns, int64_t max_ns, int64_t waited_ns) {
  int64_t budget = budget_ns;
  if (waited_ns <= max_ns) {
    budget = budget * 2 > waited_ns * 2 ? budget * 2 : waited_ns * 2;
  } else {
    budget /= 2;
  }
  if (budget > max_ns) budget = max_ns;
  if (budget < max_ns / 16) budget = max_ns / 16;
  return budget;
}

/* One turn of a stalled spin: pause for the first SPIN_PAUSE_NS (a neighbour
 * microseconds behind), then yield, so a neighbour waiting for this core (more
 * runnable ranks than cores) runs at once instead of after our budget. */
#define SPIN_PAUSE_NS 1000
static void spin_turn(int64_t spun_ns) {
  if (spun_ns < SPIN_PAUSE_NS) {
    spin_pause();
  } else {
    sched_yield();
  }
}

static int wrap_rank(int value, int size) {
  return ((value % size) + size) % size;
}

/* First element of chunk index when count elements are split into parts chunks. */
size_t kolo_chunk_start(size_t count, int parts, int index) {
  size_t base = count / (size_t)parts, extra = count % (size_t)parts;
  return base * (size_t)index + ((size_t)index < extra ? (size_t)index : extra);
}

static size_t chunk_length(size_t count, int parts, int index) {
  return kolo_chunk_start(count, parts, index + 1) - kolo_chunk_start(count, parts, index);
}

kolo_status kolo_plan_reserve(kolo_ring_plan *plan, int items) {
  if (items <= plan->capacity) return KOLO_OK;
  int capacity = plan->capacity ? plan->capacity : 16;
  while (capacity < items) capacity *= 2;
  kolo_ring_item *sends = realloc(plan->sends, (size_t)capacity * sizeof *sends);
  if (sends == NULL) return KOLO_ERR_NO_MEMORY;
  plan->sends = sends;
  kolo_ring_item *recvs = realloc(plan->recvs, (size_t)capacity * sizeof *recvs);
  if (recvs == NULL) return KOLO_ERR_NO_MEMORY;
  plan->recvs = recvs;
  size_t *processed = realloc(plan->processed, (size_t)capacity * sizeof *processed);
  if (processed == NULL) return KOLO_ERR_NO_MEMORY;
  plan->processed = processed;
  plan->capacity = capacity;
  return KOLO_OK;
}

void kolo_plan_reset(kolo_ring_plan *plan, kolo_dtype dtype, kolo_op op) {
  plan->send_count = 0;
  plan->recv_count = 0;
  plan->dtype = dtype;
  plan->op = op;
  plan->segment_bytes = 0;
}

void kolo_plan_send(kolo_ring_plan *plan, const void *buffer, size_t bytes, int depends_on) {
  kolo_ring_item *item = &plan->sends[plan->send_count++];
  item->buffer = (char *)buffer;
  item->local = NULL;
  item->bytes = bytes;
  item->depends_on = depends_on;
  item->finalize_avg = 0;
  item->remote_first = 0;
  item->guards_send = -1;
}

int kolo_plan_recv(kolo_ring_plan *plan, void *buffer, const void *local, size_t bytes,
                   int finalize_avg) {
  int index = plan->recv_count++;
  kolo_ring_item *item = &plan->recvs[index];
  item->buffer = buffer;
  item->local = local;
  item->bytes = bytes;
  item->depends_on = -1;
  item->finalize_avg = finalize_avg;
  item->remote_first = 0;
  item->guards_send = -1;
  plan->processed[index] = 0;
  return index;
}

/* Grows a reusable buffer; allocation happens only when a larger size is first
 * seen, and the new memory is touched once here rather than on the hot path. */
kolo_status kolo_ensure_buffer(char **buffer, size_t *have, size_t need) {
  if (*have >= need) return KOLO_OK;
  size_t size = *have ? *have : 4096;
  while (size < need) size *= 2;
  char *grown = NULL;
  if (posix_memalign((void **)&grown, 64, size) != 0) return KOLO_ERR_NO_MEMORY;
  memset(grown, 0, size);
  free(*buffer);
  *buffer = grown;
  *have = size;
  return KOLO_OK;
}

/* Ring all-gather of equal or unequal blocks already laid out in out: block b
 * is bytes[b] long at offset offsets[b]; this rank's block is in place. */
void kolo_plan_allgather_blocks(kolo_comm *comm, char *out, const size_t *offsets,
                                const size_t *bytes) {
  kolo_ring_plan *plan = &comm->plan;
  int n = comm->size, r = comm->rank;
  for (int t = 0; t < n - 1; t++) {
    int send_block = wrap_rank(r - t, n);
    int recv_block = wrap_rank(r - t - 1, n);
    kolo_plan_send(plan, out + offsets[send_block], bytes[send_block], t == 0 ? -1 : t - 1);
    kolo_plan_recv(plan, out + offsets[recv_block], NULL, bytes[recv_block], 0);
  }
}

static void plan_allreduce_ring(kolo_comm *comm, const char *src, char *dst, size_t count,
                                size_t element, kolo_op op) {
  kolo_ring_plan *plan = &comm->plan;
  int n = comm->size, r = comm->rank;
  /* reduce-scatter: after n-1 steps rank r owns the sum of chunk r+1 */
  for (int t = 0; t < n - 1; t++) {
    int send_chunk = wrap_rank(r - t, n);
    int recv_chunk = wrap_rank(r - t - 1, n);
    const char *from = (t == 0 ? src : dst) + kolo_chunk_start(count, n, send_chunk) * element;
    kolo_plan_send(plan, from, chunk_length(count, n, send_chunk) * element, t == 0 ? -1 : t - 1);
    size_t offset = kolo_chunk_start(count, n, recv_chunk) * element;
    kolo_plan_recv(plan, dst + offset, src + offset, chunk_length(count, n, recv_chunk) * element,
                   op == KOLO_AVG && t == n - 2);
  }
  /* all-gather: circulate the owned chunks */
  for (int u = 0; u < n - 1; u++) {
    int send_chunk = wrap_rank(r + 1 - u, n);
    int recv_chunk = wrap_rank(r - u, n);
    kolo_plan_send(plan, dst + kolo_chunk_start(count, n, send_chunk) * element,
                   chunk_length(count, n, send_chunk) * element, n - 2 + u);
    kolo_plan_recv(plan, dst + kolo_chunk_start(count, n, recv_chunk) * element, NULL,
                   chunk_length(count, n, recv_chunk) * element, 0);
  }
}

kolo_allreduce_algo kolo_allreduce_choose(int size, size_t count, size_t bytes, size_t small_bytes,
                                          size_t pair_min_bytes, size_t pair_max_bytes,
                                          size_t pair_shm_max_bytes, int over_shm) {
  if (count < (size_t)size) return KOLO_ALLREDUCE_GATHER;
  /* over shared memory the pair reduces the peer's buffer straight out of the
   * ring (the gather copies it out first), up to where the ring's halved
   * reduction wins (#16 A/B runs) */
  if (size == 2 && over_shm && bytes <= pair_shm_max_bytes) return KOLO_ALLREDUCE_PAIR;
  if (bytes <= small_bytes) return KOLO_ALLREDUCE_GATHER;
  /* over TCP the kernel's copies dominate and the pair moves the same bytes as
   * the ring with no step waiting on the peer's reduction; over shared memory
   * copies are cheap and the ring's halved reduction wins, as it does over TCP
   * once the buffers leave the cache (#16 A/B runs) */
  if (size == 2 && !over_shm && bytes >= pair_min_bytes && bytes <= pair_max_bytes) {
    return KOLO_ALLREDUCE_PAIR;
  }
  return KOLO_ALLREDUCE_RING;
}

/* Latency path: gather every rank's whole buffer (n-1 steps instead of
 * 2(n-1)), then reduce locally in rank order so all ranks agree bit for bit.
 * This rank's block is sent and reduced straight from src (no copy), unless
 * dst overlaps it and it is read after dst was first written (rank >= 2). */
static kolo_status allreduce_gather(kolo_comm *comm, const char *src, char *dst, size_t count,
                                    kolo_dtype dtype, kolo_op op, int engine_thread) {
  int n = comm->size, r = comm->rank;
  size_t bytes = count * kolo_dtype_size(dtype);
  kolo_ring_plan *plan = &comm->plan;
  kolo_status status = kolo_ensure_buffer(&comm->scratch, &comm->scratch_bytes, bytes * (size_t)n);
  if (status != KOLO_OK) return status;
  char *gather = comm->scratch;
  uintptr_t from = (uintptr_t)src, to = (uintptr_t)dst;
  int overlaps = to < from + bytes && from < to + bytes;
  const char *own = src;
  if (overlaps && r >= 2) {
    memcpy(gather + bytes * (size_t)r, src, bytes);
    own = gather + bytes * (size_t)r;
  }
  for (int t = 0; t < n - 1; t++) {
    int send_block = wrap_rank(r - t, n);
    int recv_block = wrap_rank(r - t - 1, n);
    kolo_plan_send(plan, t == 0 ? own : gather + bytes * (size_t)send_block, bytes,
                   t == 0 ? -1 : t - 1);
    kolo_plan_recv(plan, gather + bytes * (size_t)recv_block, NULL, bytes, 0);
  }
  status = kolo_execute_plan(comm, engine_thread, bytes);
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
static void plan_allreduce_pair(kolo_comm *comm, const char *src, char *dst, size_t bytes,
                                kolo_op op) {
  kolo_ring_plan *plan = &comm->plan;
  plan->segment_bytes = comm->pair_segment_bytes;
  kolo_plan_send(plan, src, bytes, -1);
  int index = kolo_plan_recv(plan, dst, src, bytes, op == KOLO_AVG);
  uintptr_t from = (uintptr_t)src, to = (uintptr_t)dst;
  plan->recvs[index].remote_first = comm->rank == 1;
  plan->recvs[index].guards_send = (to < from + bytes && from < to + bytes) ? 0 : -1;
}

/* Whether this operation's bulk channel is shared memory in either direction
 * (the same answer on both ends of each link, so on every rank). */
int kolo_bulk_is_shm(const kolo_comm *comm, size_t bytes) {
  return kolo_channel_is_bulk(kolo_direction_pick(&comm->next, bytes, comm->bulk_min_bytes)) ||
         kolo_channel_is_bulk(kolo_direction_pick(&comm->prev, bytes, comm->bulk_min_bytes));
}

kolo_status kolo_ring_allreduce(kolo_comm *comm, const void *send, void *recv, size_t count,
                                kolo_dtype dtype, kolo_op op, int engine_thread) {
  size_t element = kolo_dtype_size(dtype);
  size_t bytes = count * element;
  const char *src = send;
  char *dst = recv;
  int n = comm->size;
  if (n == 1 || count == 0) {
    if (src != dst && bytes > 0) memcpy(dst, src, bytes);
    return KOLO_OK;
  }
  kolo_plan_reset(&comm->plan, dtype, op);
  switch (kolo_allreduce_choose(n, count, bytes, comm->small_bytes, comm->pair_min_bytes,
                                comm->pair_max_bytes, comm->pair_shm_max_bytes,
                                kolo_bulk_is_shm(comm, bytes))) {
    case KOLO_ALLREDUCE_GATHER:
      return allreduce_gather(comm, src, dst, count, dtype, op, engine_thread);
    case KOLO_ALLREDUCE_PAIR:
      plan_allreduce_pair(comm, src, dst, bytes, op);
      break;
    case KOLO_ALLREDUCE_RING:
      plan_allreduce_ring(comm, src, dst, count, element, op);
      break;
  }
  return kolo_execute_plan(comm, engine_thread, bytes);
}

static kolo_status run_allgather(kolo_comm *comm, kolo_request *request, int engine_thread) {
  int n = comm->size, r = comm->rank;
  size_t element = kolo_dtype_size(request->dtype);
  kolo_status status;
  /* phase 1: every rank's count */
  comm->counts[r] = (uint64_t)request->count;
  size_t total = request->count;
  if (n > 1) {
    size_t *count_offsets = comm->block_offsets;
    size_t *count_bytes = comm->block_bytes;
    for (int b = 0; b < n; b++) {
      count_offsets[b] = (size_t)b * sizeof(uint64_t);
      count_bytes[b] = sizeof(uint64_t);
    }
    kolo_plan_reset(&comm->plan, KOLO_UINT8, KOLO_SUM);
    kolo_plan_allgather_blocks(comm, (char *)comm->counts, count_offsets, count_bytes);
    status = kolo_execute_plan(comm, engine_thread, 0);
    if (status != KOLO_OK) return status;
    total = 0;
    for (int b = 0; b < n; b++) total += (size_t)comm->counts[b];
  }
  if (request->recv_counts != NULL) {
    for (int b = 0; b < n; b++) request->recv_counts[b] = (size_t)comm->counts[b];
  }
  if (request->engine_output) {
    status = kolo_output_allocate(request, total);
    if (status != KOLO_OK) return status;
  } else if (total > request->recv_capacity) {
    KOLO_LOGE("kolo", "allgather: %zu elements do not fit the receive capacity %zu", total,
              request->recv_capacity);
    kolo_request_message(request, "allgather: %zu elements do not fit the receive capacity %zu",
                         total, request->recv_capacity);
    return KOLO_ERR_TOO_LARGE;
  }
  /* phase 2: the blocks themselves */
  size_t *offsets = comm->block_offsets;
  size_t *bytes = comm->block_bytes;
  size_t position = 0;
  for (int b = 0; b < n; b++) {
    offsets[b] = position * element;
    bytes[b] = (size_t)comm->counts[b] * element;
    position += (size_t)comm->counts[b];
  }
  char *out = request->recv;
  if (bytes[r] > 0 && out + offsets[r] != (const char *)request->send) {
    memmove(out + offsets[r], request->send, bytes[r]);
  }
  if (n == 1 || total == 0) return KOLO_OK;
  kolo_plan_reset(&comm->plan, request->dtype, KOLO_SUM);
  kolo_plan_allgather_blocks(comm, out, offsets, bytes);
  return kolo_execute_plan(comm, engine_thread, total * element);
}

static kolo_status run_broadcast(kolo_comm *comm, kolo_request *request, int engine_thread) {
  int n = comm->size;
  size_t bytes = request->count * kolo_dtype_size(request->dtype);
  if (n == 1 || bytes == 0) return KOLO_OK;
  kolo_ring_plan *plan = &comm->plan;
  kolo_plan_reset(plan, request->dtype, KOLO_SUM);
  int position = wrap_rank(comm->rank - request->root, n);
  if (position == 0) {
    kolo_plan_send(plan, request->recv, bytes, -1);
  } else {
    int index = kolo_plan_recv(plan, request->recv, NULL, bytes, 0);
    if (position < n - 1) kolo_plan_send(plan, request->recv, bytes, index);
  }
  return kolo_execute_plan(comm, engine_thread, bytes);
}

static kolo_status run_reducescatter(kolo_comm *comm, kolo_request *request, int engine_thread) {
  int n = comm->size, r = comm->rank;
  size_t element = kolo_dtype_size(request->dtype);
  size_t block = request->count * element;
  const char *src = request->send;
  char *dst = request->recv;
  if (block == 0) return KOLO_OK;
  if (n == 1) {
    if (src != dst) memmove(dst, src, block);
    return KOLO_OK;
  }
  kolo_status status = kolo_ensure_buffer(&comm->scratch, &comm->scratch_bytes, block * (size_t)n);
  if (status != KOLO_OK) return status;
  kolo_ring_plan *plan = &comm->plan;
  kolo_plan_reset(plan, request->dtype, request->op);
  /* reduce-scatter shifted so that rank r ends with block r */
  for (int t = 0; t < n - 1; t++) {
    int send_block = wrap_rank(r - t - 1, n);
    int recv_block = wrap_rank(r - t - 2, n);
    const char *from = (t == 0 ? src : comm->scratch) + (size_t)send_block * block;
    kolo_plan_send(plan, from, block, t == 0 ? -1 : t - 1);
    char *into = t == n - 2 ? dst : comm->scratch + (size_t)recv_block * block;
    kolo_plan_recv(plan, into, src + (size_t)recv_block * block, block,
                   request->op == KOLO_AVG && t == n - 2);
  }
  return kolo_execute_plan(comm, engine_thread, block * (size_t)n);
}

kolo_status kolo_ring_run(kolo_comm *comm, kolo_request *request, int engine_thread) {
  if (atomic_load(&comm->failed)) return kolo_comm_error(comm, NULL);
  switch (request->kind) {
    case KOLO_REQUEST_ALLREDUCE:
      return kolo_exec_allreduce(comm, request, engine_thread);
    case KOLO_REQUEST_ALLGATHER:
      return run_allgather(comm, request, engine_thread);
    case KOLO_REQUEST_BROADCAST:
      return run_broadcast(comm, request, engine_thread);
    case KOLO_REQUEST_REDUCESCATTER:
      if (request->counts_from > 0)
        return kolo_exec_reducescatter_joined(comm, request, engine_thread);
      if (request->split_counts != NULL)
        return kolo_ring_reducescatter_v(comm, request, engine_thread);
      return run_reducescatter(comm, request, engine_thread);
    case KOLO_REQUEST_ALLTOALL:
      return kolo_ring_alltoall(comm, request, engine_thread);
    case KOLO_REQUEST_JOIN:
      return kolo_exec_join(comm, request, engine_thread);
    case KOLO_REQUEST_BATCH:
      return kolo_exec_batch(comm, request->batch, NULL);
    case KOLO_REQUEST_BARRIER: {
      uint8_t token = 1, result = 0;
      return kolo_ring_allreduce(comm, &token, &result, 1, KOLO_UINT8, KOLO_MAX, engine_thread);
    }
  }
  return KOLO_ERR_INVALID_ARG;
}

/* ---- the executor ---- */

/* A data connection to neighbour rank failed. Give the control path a moment
 * to name the real origin (a neighbour that closed because a third rank died
 * reports that rank on its control link first), then blame the neighbour. */
static kolo_status data_link_failed(kolo_comm *comm, int neighbour, int engine_thread,
                                    const char *what) {
  int64_t deadline = kolo_deadline_after_ms(100);
  while (!atomic_load(&comm->failed)) {
    int wait_ms = kolo_ms_until(deadline);
    if (wait_ms == 0) break;
    struct pollfd fds[3];
    int count = 0;
    fds[count++] = (struct pollfd){.fd = comm->fail_fd, .events = POLLIN};
    int links[2] = {-1, -1};
    if (engine_thread) {
      for (int i = 0; i < 2; i++) {
        if (comm->control[i].open) {
          links[count - 1] = i;
          fds[count++] = (struct pollfd){.fd = kolo_channel_poll_fd(&comm->control[i].channel),
                                         .events = POLLIN};
        }
      }
    }
    if (poll(fds, (nfds_t)count, wait_ms) <= 0) continue;
    for (int i = 1; i < count; i++) {
      if (fds[i].revents) kolo_control_service(comm, &comm->control[links[i - 1]]);
    }
  }
  kolo_comm_fail(comm, KOLO_ERR_PEER_LOST, neighbour, "peer lost: rank %d (%s)", neighbour, what);
  return kolo_comm_error(comm, NULL);
}

/* A recv item that guards a send (in place) may not reduce up to end before
 * that send has moved end bytes. */
static int send_behind(const kolo_ring_item *item, int send_index, size_t sent, size_t end) {
  if (item->guards_send < 0 || send_index > item->guards_send) return 0;
  return send_index < item->guards_send || sent < end;
}

/* How many bytes of a guarding recv item, from done on, the send it guards has
 * moved already (SIZE_MAX when it guards none). */
static size_t send_limit(const kolo_ring_item *item, int send_index, size_t sent, size_t done) {
  if (item->guards_send < 0 || send_index > item->guards_send) return SIZE_MAX;
  if (send_index < item->guards_send || sent <= done) return 0;
  return sent - done;
}

/* What reduce_from_view did. */
enum { VIEW_NOTHING, VIEW_REDUCED, VIEW_GUARDED, VIEW_SPLIT };

/* Reduces the received elements that lie whole in the channel's memory straight
 * into place (no staging copy), at most limit bytes (the in-place guard).
 * *outcome: VIEW_REDUCED (some were), VIEW_NOTHING (none arrived), VIEW_GUARDED
 * (they wait for the send they would overwrite), VIEW_SPLIT (less than one
 * element shows: split at the ring's end or still being written; the caller
 * copies it through staging). */
static kolo_status reduce_from_view(kolo_comm *comm, const kolo_channel *channel,
                                    kolo_ring_item *item, int index, size_t limit, int *outcome) {
  kolo_ring_plan *plan = &comm->plan;
  size_t element = kolo_dtype_size(plan->dtype);
  size_t done = plan->processed[index];
  const void *view = NULL;
  size_t available = 0;
  *outcome = VIEW_NOTHING;
  kolo_status status = kolo_channel_peek(channel, &view, item->bytes - done, &available);
  if (status != KOLO_OK || available == 0) return status;
  if (available < element) {
    *outcome = VIEW_SPLIT;
    return KOLO_OK;
  }
  size_t n = (available < limit ? available : limit) / element * element;
  if (n == 0) {
    *outcome = VIEW_GUARDED;
    return KOLO_OK;
  }
  const char *left = item->remote_first ? view : item->local + done;
  const char *right = item->remote_first ? item->local + done : view;
  kolo_reduce(item->buffer + done, left, right, n / element, plan->dtype, plan->op);
  if (item->finalize_avg) kolo_divide(item->buffer + done, n / element, plan->dtype, comm->size);
  kolo_channel_consume(channel, n);
  plan->processed[index] += n;
  *outcome = VIEW_REDUCED;
  return KOLO_OK;
}

kolo_status kolo_execute_plan(kolo_comm *comm, int engine_thread, size_t op_bytes) {
  kolo_ring_plan *plan = &comm->plan;
  const kolo_channel *to_next = kolo_direction_pick(&comm->next, op_bytes, comm->bulk_min_bytes);
  const kolo_channel *from_prev = kolo_direction_pick(&comm->prev, op_bytes, comm->bulk_min_bytes);
  size_t element = kolo_dtype_size(plan->dtype);
  size_t segment = plan->segment_bytes ? plan->segment_bytes : comm->segment_bytes;
  if (segment > comm->staging_bytes) segment = comm->staging_bytes;
  segment = segment / element * element;
  if (segment == 0) segment = element;
  int next = wrap_rank(comm->rank + 1, comm->size);
  int prev = wrap_rank(comm->rank - 1, comm->size);
  int send_index = 0, recv_index = 0;
  size_t sent = 0;   /* bytes of the current send item on the wire */
  size_t staged = 0; /* bytes of the current reduce segment in staging */
  int64_t last_progress = kolo_now_ns();
  int64_t timeout_ns = (int64_t)comm->timeout_ms * 1000000LL;
  int64_t spin_until = 0; /* 0: no stall since the last progress; -1: slept in it */
  int64_t stalled_at = 0; /* when the current stall began */

  for (;;) {
    int progress = 0;
    int reduce_waits = 0; /* a received segment waits for the send it would overwrite */
    /* sends, as far as the pipeline allows */
    while (send_index < plan->send_count) {
      kolo_ring_item *item = &plan->sends[send_index];
      size_t available = item->depends_on < 0 ? item->bytes : plan->processed[item->depends_on];
      if (sent < available) {
        size_t moved = 0;
        kolo_status status =
            kolo_channel_send(to_next, item->buffer + sent, available - sent, &moved);
        if (status != KOLO_OK) return data_link_failed(comm, next, engine_thread, "send failed");
        if (moved == 0) break;
        sent += moved;
        progress = 1;
      }
      if (sent == item->bytes) {
        send_index++;
        sent = 0;
        continue;
      }
      break;
    }
    /* receives: copy straight into place, or stage a segment and reduce it */
    while (recv_index < plan->recv_count) {
      kolo_ring_item *item = &plan->recvs[recv_index];
      size_t done = plan->processed[recv_index];
      if (done == item->bytes) {
        recv_index++;
        staged = 0;
        continue;
      }
      size_t moved = 0;
      kolo_status status;
      if (item->local == NULL) {
        status = kolo_channel_recv(from_prev, item->buffer + done, item->bytes - done, &moved);
        if (status != KOLO_OK)
          return data_link_failed(comm, prev, engine_thread, "connection closed");
        if (moved == 0) break;
        plan->processed[recv_index] += moved;
        progress = 1;
        continue;
      }
      if (staged == 0 && kolo_channel_can_peek(from_prev)) {
        int outcome = VIEW_NOTHING;
        status = reduce_from_view(comm, from_prev, item, recv_index,
                                  send_limit(item, send_index, sent, done), &outcome);
        if (status != KOLO_OK)
          return data_link_failed(comm, prev, engine_thread, "connection closed");
        if (outcome == VIEW_REDUCED) {
          progress = 1;
          continue;
        }
        if (outcome == VIEW_GUARDED) {
          reduce_waits = 1; /* the data is there, the send it would overwrite is not */
          break;
        }
        if (outcome == VIEW_NOTHING) break;
        /* VIEW_SPLIT: copy this segment through staging below */
      }
      size_t want = item->bytes - done < segment ? item->bytes - done : segment;
      if (staged < want) {
        status = kolo_channel_recv(from_prev, comm->staging + staged, want - staged, &moved);
        if (status != KOLO_OK)
          return data_link_failed(comm, prev, engine_thread, "connection closed");
        if (moved == 0) break;
        staged += moved;
        progress = 1;
        if (staged < want) continue;
      }
      if (send_behind(item, send_index, sent, done + want)) {
        reduce_waits = 1; /* staging full: the send must move first */
        break;
      }
      const char *left = item->remote_first ? comm->staging : item->local + done;
      const char *right = item->remote_first ? item->local + done : comm->staging;
      kolo_reduce(item->buffer + done, left, right, want / element, plan->dtype, plan->op);
      if (item->finalize_avg)
        kolo_divide(item->buffer + done, want / element, plan->dtype, comm->size);
      plan->processed[recv_index] += want;
      staged = 0;
      progress = 1;
    }
    int finished = send_index == plan->send_count && recv_index == plan->recv_count;
    if (!finished && atomic_load(&comm->failed)) return kolo_comm_error(comm, NULL);
    if (progress || finished) {
      last_progress = kolo_now_ns();
      if (spin_until != 0 && comm->spin_ns > 0) {
        comm->spin_budget_ns =
            kolo_spin_budget_next(comm->spin_budget_ns, comm->spin_ns, last_progress - stalled_at);
      }
      spin_until = 0;
      if (finished) return KOLO_OK;
      continue;
    }
    /* nothing moved: busy-poll a little first (a neighbour a few microseconds
     * behind costs no sleep and wake-up), bounded so a long wait sleeps */
    if (spin_until == 0) {
      stalled_at = kolo_now_ns();
      spin_until = comm->spin_budget_ns > 0 ? stalled_at + comm->spin_budget_ns : -1;
    }
    if (spin_until > 0) {
      int64_t now = kolo_now_ns();
      if (now < spin_until) {
        spin_turn(now - stalled_at);
        continue;
      }
      spin_until = -1; /* slept since: no more spinning until progress */
    }
    /* still nothing: sleep in poll until a socket is ready, a failure or abort
     * is signalled, or the no-progress timeout expires */
    struct pollfd fds[5];
    int count = 0;
    int want_send = send_index < plan->send_count &&
                    sent < (plan->sends[send_index].depends_on < 0
                                ? plan->sends[send_index].bytes
                                : plan->processed[plan->sends[send_index].depends_on]);
    fds[count++] = (struct pollfd){.fd = comm->fail_fd, .events = POLLIN};
    int sends_pending = send_index < plan->send_count;
    int recvs_pending = recv_index < plan->recv_count && !reduce_waits;
    int next_slot = count;
    fds[count++] = (struct pollfd){
        .fd = sends_pending ? kolo_channel_poll_fd(to_next) : -1,
        .events = (short)(POLLRDHUP | (want_send ? kolo_channel_poll_events(to_next, 1) : 0))};
    fds[count++] = (struct pollfd){.fd = recvs_pending ? kolo_channel_poll_fd(from_prev) : -1,
                                   .events = kolo_channel_poll_events(from_prev, 0)};
    int link_slot[2] = {-1, -1};
    if (engine_thread) {
      for (int i = 0; i < 2; i++) {
        if (comm->control[i].open) {
          link_slot[i] = count;
          fds[count++] = (struct pollfd){.fd = kolo_channel_poll_fd(&comm->control[i].channel),
                                         .events = POLLIN};
        }
      }
    }
    /* shared memory moves without the kernel: announce we are about to sleep,
     * and look again if the peer moved meanwhile */
    if (want_send && !kolo_channel_prepare_wait(to_next, 1)) continue;
    if (recvs_pending && !kolo_channel_prepare_wait(from_prev, 0)) continue;
    int64_t left_ns = last_progress + timeout_ns - kolo_now_ns();
    if (left_ns <= 0) {
      int waiting_on = recv_index < plan->recv_count ? prev : next;
      kolo_comm_fail(comm, KOLO_ERR_TIMEOUT, waiting_on,
                     "timeout: no progress for %d ms (waiting on rank %d)", comm->timeout_ms,
                     waiting_on);
      return kolo_comm_error(comm, NULL);
    }
    int wait_ms = (int)((left_ns + 999999) / 1000000);
    int ready = poll(fds, (nfds_t)count, wait_ms);
    if (ready < 0 && errno != EINTR) {
      kolo_comm_fail(comm, KOLO_ERR_SYSTEM, -1, "poll failed: %s", strerror(errno));
      return kolo_comm_error(comm, NULL);
    }
    if (ready <= 0) continue;
    for (int i = 0; i < 2; i++) {
      if (link_slot[i] >= 0 && fds[link_slot[i]].revents) {
        kolo_control_service(comm, &comm->control[i]);
      }
    }
    if (atomic_load(&comm->failed)) return kolo_comm_error(comm, NULL);
    /* the next rank hung up while we still owe it data */
    if (sends_pending && (fds[next_slot].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
      return data_link_failed(comm, next, engine_thread, "connection closed");
    }
  }
}
