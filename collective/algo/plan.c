/* The ring plan and its executor. Every collective is compiled into a plan of
 * send and recv items over the ring's two directions (ring.c, ring_fused.c,
 * ring_uneven.c, doubling.c, two_level.c; the items over a list of pieces are
 * made here, kolo_plan_range), and this one executor streams a plan over the data
 * connections with non-blocking I/O, so that sending, receiving and reducing
 * overlap segment by segment. While it waits it spins a learned budget, then
 * sleeps in poll on the channels, the failure eventfd and (on the engine
 * thread) the control links; every wait has the no-progress deadline. */
#define _GNU_SOURCE /* POLLRDHUP */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collective/algo/algo.h"
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

int kolo_spin_yield_mode(int env_mode, int local_size, int cpus) {
  if (env_mode == 0 || env_mode == 1) return env_mode;
  return cpus > 0 && local_size > cpus ? 1 : -1;
}

int64_t kolo_yield_off_until(int64_t off_until_ns, int64_t now_ns, int64_t took_ns) {
  if (took_ns < KOLO_YIELD_SLOW_NS) return off_until_ns;
  return now_ns + KOLO_YIELD_OFF_NS;
}

/* One turn of a stalled spin at now_ns: pause for the first SPIN_PAUSE_NS (a
 * neighbour microseconds behind), then yield, so a neighbour waiting for this
 * core (more runnable ranks than cores) runs at once instead of after our
 * budget; unless a recent yield lost the core for a slice (kolo_yield_off_until:
 * 2 bound ranks next to a compiler, 1 MiB on shared memory 3.9 ms per
 * operation with the yield, 70 us without, #34) or KOLO_SPIN_YIELD says. */
#define SPIN_PAUSE_NS 1000
static void spin_turn(kolo_ring *ring, int64_t now_ns, int64_t spun_ns) {
  if (spun_ns < SPIN_PAUSE_NS || ring->spin_yield == 0 ||
      (ring->spin_yield < 0 && now_ns < ring->yield_off_until_ns)) {
    spin_pause();
    return;
  }
  sched_yield();
  if (ring->spin_yield < 0) {
    ring->yield_off_until_ns =
        kolo_yield_off_until(ring->yield_off_until_ns, now_ns, kolo_now_ns() - now_ns);
  }
}

/* First element of chunk index when count elements are split into parts chunks. */
size_t kolo_chunk_start(size_t count, int parts, int index) {
  size_t base = count / (size_t)parts, extra = count % (size_t)parts;
  return base * (size_t)index + ((size_t)index < extra ? (size_t)index : extra);
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
void kolo_plan_allgather_blocks(kolo_ring *ring, char *out, const size_t *offsets,
                                const size_t *bytes) {
  kolo_ring_plan *plan = &ring->plan;
  int n = ring->net->size, r = ring->net->rank;
  for (int t = 0; t < n - 1; t++) {
    int send_block = kolo_wrap_rank(r - t, n);
    int recv_block = kolo_wrap_rank(r - t - 1, n);
    kolo_plan_send(plan, out + offsets[send_block], bytes[send_block], t == 0 ? -1 : t - 1);
    kolo_plan_recv(plan, out + offsets[recv_block], NULL, bytes[recv_block], 0);
  }
}

/* ---- plans over pieces (a virtual concatenation: the fused, doubling and two-level
 * all-reduces) ---- */

/* The first piece that ends after byte begin (offsets: each piece's start). */
static int first_piece(const size_t *offsets, const kolo_piece *pieces, int count, size_t begin) {
  int low = 0, high = count - 1;
  while (low < high) {
    int mid = (low + high) / 2;
    if (offsets[mid] + pieces[mid].bytes <= begin)
      low = mid + 1;
    else
      high = mid;
  }
  return low;
}

int kolo_plan_range(kolo_ring_plan *plan, const kolo_piece *pieces, const size_t *offsets,
                    int count, size_t begin, size_t end, int mode, int depends_first,
                    int finalize) {
  int made = 0;
  if (begin >= end) {
    /* an empty chunk still takes one (empty) item so that steps line up */
    if (mode == KOLO_FROM_SRC || mode == KOLO_FROM_DST)
      kolo_plan_send(plan, NULL, 0, -1);
    else
      kolo_plan_recv(plan, NULL, NULL, 0, 0);
    return 1;
  }
  for (int p = first_piece(offsets, pieces, count, begin); p < count && offsets[p] < end; p++) {
    size_t from = begin > offsets[p] ? begin - offsets[p] : 0;
    size_t to = end - offsets[p] < pieces[p].bytes ? end - offsets[p] : pieces[p].bytes;
    if (to <= from) continue;
    const kolo_piece *piece = &pieces[p];
    switch (mode) {
      case KOLO_FROM_SRC:
        kolo_plan_send(plan, piece->src + from, to - from, -1);
        break;
      case KOLO_FROM_DST:
        kolo_plan_send(plan, piece->dst + from, to - from,
                       depends_first < 0 ? -1 : depends_first + made);
        break;
      case KOLO_REDUCE_INTO_DST:
        kolo_plan_recv(plan, piece->dst + from, piece->src + from, to - from, finalize);
        break;
      case KOLO_REDUCE_DST:
        kolo_plan_recv(plan, piece->dst + from, piece->dst + from, to - from, finalize);
        break;
      default:
        kolo_plan_recv(plan, piece->dst + from, NULL, to - from, 0);
        break;
    }
    made++;
  }
  return made;
}

/* ---- the executor ---- */

/* A data connection to neighbour rank failed. Give the control path a moment
 * to name the real origin (a neighbour that closed because a third rank died
 * reports that rank on its control link first), then blame the neighbour. */
static kolo_status data_link_failed(kolo_ring *ring, int neighbour, int engine_thread,
                                    const char *what) {
  int64_t deadline = kolo_deadline_after_ms(100);
  while (!atomic_load(&ring->net->failed)) {
    int wait_ms = kolo_ms_until(deadline);
    if (wait_ms == 0) break;
    struct pollfd fds[3];
    int count = 0;
    fds[count++] = (struct pollfd){.fd = ring->net->fail_fd, .events = POLLIN};
    int links[2] = {-1, -1};
    if (engine_thread) {
      for (int i = 0; i < 2; i++) {
        if (ring->net->control[i].open) {
          links[count - 1] = i;
          fds[count++] = (struct pollfd){.fd = kolo_channel_poll_fd(&ring->net->control[i].channel),
                                         .events = POLLIN};
        }
      }
    }
    if (poll(fds, (nfds_t)count, wait_ms) <= 0) continue;
    for (int i = 1; i < count; i++) {
      if (fds[i].revents) kolo_control_service(ring->net, &ring->net->control[links[i - 1]]);
    }
  }
  kolo_net_fail(ring->net, KOLO_ERR_PEER_LOST, neighbour, "peer lost: rank %d (%s)", neighbour,
                what);
  return kolo_net_error(ring->net, NULL);
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
static kolo_status reduce_from_view(kolo_ring *ring, const kolo_channel *channel,
                                    kolo_ring_item *item, int index, size_t limit, int *outcome) {
  kolo_ring_plan *plan = &ring->plan;
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
  if (item->finalize_avg)
    kolo_divide(item->buffer + done, n / element, plan->dtype, ring->net->size);
  kolo_channel_consume(channel, n);
  plan->processed[index] += n;
  *outcome = VIEW_REDUCED;
  return KOLO_OK;
}

/* One run of the executor over ring->plan: where each side stands. */
typedef struct plan_run {
  kolo_ring *ring;
  kolo_ring_plan *plan;
  const kolo_channel *to_next, *from_prev;
  size_t element, segment;
  int next, prev; /* the neighbours' ranks */
  int engine_thread;
  int send_index, recv_index;
  size_t sent;   /* bytes of the current send item on the wire */
  size_t staged; /* bytes of the current reduce segment in staging */
} plan_run;

/* Sends as far as the pipeline allows; *progress when something moved. */
static kolo_status run_sends(plan_run *run, int *progress) {
  kolo_ring_plan *plan = run->plan;
  while (run->send_index < plan->send_count) {
    kolo_ring_item *item = &plan->sends[run->send_index];
    size_t available = item->depends_on < 0 ? item->bytes : plan->processed[item->depends_on];
    if (run->sent < available) {
      size_t moved = 0;
      kolo_status status =
          kolo_channel_send(run->to_next, item->buffer + run->sent, available - run->sent, &moved);
      if (status != KOLO_OK)
        return data_link_failed(run->ring, run->next, run->engine_thread, "send failed");
      if (moved == 0) break;
      run->sent += moved;
      *progress = 1;
    }
    if (run->sent == item->bytes) {
      run->send_index++;
      run->sent = 0;
      continue;
    }
    break;
  }
  return KOLO_OK;
}

/* Receives: copies straight into place, or reduces out of the channel's
 * memory, or stages a segment and reduces it. *progress when something moved;
 * *reduce_waits when received data waits for the send it would overwrite. */
static kolo_status run_recvs(plan_run *run, int *progress, int *reduce_waits) {
  kolo_ring *ring = run->ring;
  kolo_ring_plan *plan = run->plan;
  size_t element = run->element;
  while (run->recv_index < plan->recv_count) {
    kolo_ring_item *item = &plan->recvs[run->recv_index];
    size_t done = plan->processed[run->recv_index];
    if (done == item->bytes) {
      run->recv_index++;
      run->staged = 0;
      continue;
    }
    size_t moved = 0;
    kolo_status status;
    if (item->local == NULL) {
      status = kolo_channel_recv(run->from_prev, item->buffer + done, item->bytes - done, &moved);
      if (status != KOLO_OK)
        return data_link_failed(ring, run->prev, run->engine_thread, "connection closed");
      if (moved == 0) break;
      plan->processed[run->recv_index] += moved;
      *progress = 1;
      continue;
    }
    if (run->staged == 0 && kolo_channel_can_peek(run->from_prev)) {
      int outcome = VIEW_NOTHING;
      status = reduce_from_view(ring, run->from_prev, item, run->recv_index,
                                send_limit(item, run->send_index, run->sent, done), &outcome);
      if (status != KOLO_OK)
        return data_link_failed(ring, run->prev, run->engine_thread, "connection closed");
      if (outcome == VIEW_REDUCED) {
        *progress = 1;
        continue;
      }
      if (outcome == VIEW_GUARDED) {
        *reduce_waits = 1; /* the data is there, the send it would overwrite is not */
        break;
      }
      if (outcome == VIEW_NOTHING) break;
      /* VIEW_SPLIT: copy this segment through staging below */
    }
    size_t want = item->bytes - done < run->segment ? item->bytes - done : run->segment;
    if (run->staged < want) {
      status = kolo_channel_recv(run->from_prev, ring->staging + run->staged, want - run->staged,
                                 &moved);
      if (status != KOLO_OK)
        return data_link_failed(ring, run->prev, run->engine_thread, "connection closed");
      if (moved == 0) break;
      run->staged += moved;
      *progress = 1;
      if (run->staged < want) continue;
    }
    if (send_behind(item, run->send_index, run->sent, done + want)) {
      *reduce_waits = 1; /* staging full: the send must move first */
      break;
    }
    const char *left = item->remote_first ? ring->staging : item->local + done;
    const char *right = item->remote_first ? item->local + done : ring->staging;
    kolo_reduce(item->buffer + done, left, right, want / element, plan->dtype, plan->op);
    if (item->finalize_avg)
      kolo_divide(item->buffer + done, want / element, plan->dtype, ring->net->size);
    plan->processed[run->recv_index] += want;
    run->staged = 0;
    *progress = 1;
  }
  return KOLO_OK;
}

/* Nothing moved and the spin is spent: sleeps in poll until a socket is ready,
 * a failure or abort is signalled, or the no-progress timeout (counted from
 * last_progress) expires. KOLO_OK: look again. */
static kolo_status sleep_in_poll(plan_run *run, int reduce_waits, int64_t last_progress) {
  kolo_ring *ring = run->ring;
  kolo_ring_plan *plan = run->plan;
  int send_index = run->send_index;
  struct pollfd fds[5];
  int count = 0;
  int want_send = send_index < plan->send_count &&
                  run->sent < (plan->sends[send_index].depends_on < 0
                                   ? plan->sends[send_index].bytes
                                   : plan->processed[plan->sends[send_index].depends_on]);
  fds[count++] = (struct pollfd){.fd = ring->net->fail_fd, .events = POLLIN};
  int sends_pending = send_index < plan->send_count;
  int recvs_pending = run->recv_index < plan->recv_count && !reduce_waits;
  int next_slot = count;
  fds[count++] = (struct pollfd){
      .fd = sends_pending ? kolo_channel_poll_fd(run->to_next) : -1,
      .events = (short)(POLLRDHUP | (want_send ? kolo_channel_poll_events(run->to_next, 1) : 0))};
  fds[count++] = (struct pollfd){.fd = recvs_pending ? kolo_channel_poll_fd(run->from_prev) : -1,
                                 .events = kolo_channel_poll_events(run->from_prev, 0)};
  int link_slot[2] = {-1, -1};
  if (run->engine_thread) {
    for (int i = 0; i < 2; i++) {
      if (ring->net->control[i].open) {
        link_slot[i] = count;
        fds[count++] = (struct pollfd){.fd = kolo_channel_poll_fd(&ring->net->control[i].channel),
                                       .events = POLLIN};
      }
    }
  }
  /* shared memory moves without the kernel: announce we are about to sleep,
   * and look again if the peer moved meanwhile */
  if (want_send && !kolo_channel_prepare_wait(run->to_next, 1)) return KOLO_OK;
  if (recvs_pending && !kolo_channel_prepare_wait(run->from_prev, 0)) return KOLO_OK;
  int64_t timeout_ns = (int64_t)ring->net->timeout_ms * 1000000LL;
  int64_t left_ns = last_progress + timeout_ns - kolo_now_ns();
  if (left_ns <= 0) {
    int waiting_on = run->recv_index < plan->recv_count ? run->prev : run->next;
    kolo_net_fail(ring->net, KOLO_ERR_TIMEOUT, waiting_on,
                  "timeout: no progress for %d ms (waiting on rank %d)", ring->net->timeout_ms,
                  waiting_on);
    return kolo_net_error(ring->net, NULL);
  }
  int wait_ms = (int)((left_ns + 999999) / 1000000);
  int ready = poll(fds, (nfds_t)count, wait_ms);
  if (ready < 0 && errno != EINTR) {
    kolo_net_fail(ring->net, KOLO_ERR_SYSTEM, -1, "poll failed: %s", strerror(errno));
    return kolo_net_error(ring->net, NULL);
  }
  if (ready <= 0) return KOLO_OK;
  for (int i = 0; i < 2; i++) {
    if (link_slot[i] >= 0 && fds[link_slot[i]].revents) {
      kolo_control_service(ring->net, &ring->net->control[i]);
    }
  }
  if (atomic_load(&ring->net->failed)) return kolo_net_error(ring->net, NULL);
  /* the next rank hung up while we still owe it data */
  if (sends_pending && (fds[next_slot].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
    return data_link_failed(ring, run->next, run->engine_thread, "connection closed");
  }
  return KOLO_OK;
}

kolo_status kolo_execute_plan(kolo_ring *ring, int engine_thread, size_t op_bytes) {
  return kolo_execute_plan_over(
      ring, engine_thread,
      kolo_direction_pick(&ring->net->next, op_bytes, ring->net->bulk_min_bytes),
      kolo_wrap_rank(ring->net->rank + 1, ring->net->size),
      kolo_direction_pick(&ring->net->prev, op_bytes, ring->net->bulk_min_bytes),
      kolo_wrap_rank(ring->net->rank - 1, ring->net->size));
}

kolo_status kolo_execute_plan_over(kolo_ring *ring, int engine_thread, const kolo_channel *to,
                                   int to_rank, const kolo_channel *from, int from_rank) {
  kolo_ring_plan *plan = &ring->plan;
  plan_run run = {.ring = ring,
                  .plan = plan,
                  .to_next = to,
                  .from_prev = from,
                  .element = kolo_dtype_size(plan->dtype),
                  .next = to_rank,
                  .prev = from_rank,
                  .engine_thread = engine_thread};
  size_t segment = plan->segment_bytes ? plan->segment_bytes : ring->segment_bytes;
  if (segment > ring->staging_bytes) segment = ring->staging_bytes;
  segment = segment / run.element * run.element;
  run.segment = segment == 0 ? run.element : segment;
  int64_t last_progress = kolo_now_ns();
  int64_t spin_until = 0; /* 0: no stall since the last progress; -1: slept in it */
  int64_t stalled_at = 0; /* when the current stall began */

  for (;;) {
    int progress = 0;
    int reduce_waits = 0; /* a received segment waits for the send it would overwrite */
    kolo_status status = run_sends(&run, &progress);
    if (status != KOLO_OK) return status;
    status = run_recvs(&run, &progress, &reduce_waits);
    if (status != KOLO_OK) return status;
    int finished = run.send_index == plan->send_count && run.recv_index == plan->recv_count;
    if (!finished && atomic_load(&ring->net->failed)) return kolo_net_error(ring->net, NULL);
    if (progress || finished) {
      last_progress = kolo_now_ns();
      if (spin_until != 0 && ring->spin_ns > 0) {
        ring->spin_budget_ns =
            kolo_spin_budget_next(ring->spin_budget_ns, ring->spin_ns, last_progress - stalled_at);
      }
      spin_until = 0;
      if (finished) return KOLO_OK;
      continue;
    }
    /* nothing moved: busy-poll a little first (a neighbour a few microseconds
     * behind costs no sleep and wake-up), bounded so a long wait sleeps */
    if (spin_until == 0) {
      stalled_at = kolo_now_ns();
      spin_until = ring->spin_budget_ns > 0 ? stalled_at + ring->spin_budget_ns : -1;
    }
    if (spin_until > 0) {
      int64_t now = kolo_now_ns();
      if (now < spin_until) {
        spin_turn(ring, now, now - stalled_at);
        continue;
      }
      spin_until = -1; /* slept since: no more spinning until progress */
    }
    status = sleep_in_poll(&run, reduce_waits, last_progress);
    if (status != KOLO_OK) return status;
  }
}
