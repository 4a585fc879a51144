/* The engine's negotiator thread: one per communicator, the only reader and
 * writer of the control links. It takes negotiated requests from the inbox,
 * runs negotiation cycles (negotiate.h) with the other ranks, and hands what
 * every rank agreed on to the executor (queue.c) in the agreed order: fused
 * batches of all-reduces (up to KOLO_FUSION_THRESHOLD bytes), single
 * operations, unnamed operations once every rank issued them, join results.
 *
 * Cycles are started lazily, so an idle ring exchanges nothing: a rank with news
 * (a new submission, its join, a stall to declare) starts one KOLO_CYCLE_TIME
 * after its first unannounced news, or at once when a thread waits; a rank that
 * receives the previous rank's message for its next cycle joins that cycle at
 * once with whatever it has. A cycle is a ring all-gather of one message per
 * rank over the control links (n-1 hops); every rank then applies the same n
 * messages to its copy of the table and decides the same.
 *
 * The stall inspector runs here too: a name some ranks submitted and others
 * did not is logged after KOLO_STALL_WARNING seconds and, after
 * KOLO_STALL_TIMEOUT, declared in this rank's next message, which fails the
 * communicator with KOLO_ERR_STALLED on every rank, naming the tensor and the
 * missing ranks. A failure of the communicator (a dead peer, an abort) fails
 * every request held here at once with that failure. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collective/comm.h"
#include "collective/engine/negotiate.h"
#include "collective/engine/timeline.h"
#include "common/checks.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/log.h"

#define DEFAULT_CYCLE_MS 1.0
#define DEFAULT_FUSION_THRESHOLD (64u * 1024u * 1024u)
#define DEFAULT_STALL_WARNING_S 60.0
#define DEFAULT_STALL_TIMEOUT_S 300.0
#define DEFAULT_CACHE_CAPACITY 4096

typedef struct engine_config {
  int64_t cycle_ns;
  size_t fusion_threshold; /* 0 = every tensor alone */
  int64_t stall_warning_ns, stall_timeout_ns;
  uint32_t cache_capacity;
} engine_config;

typedef struct open_batch {
  kolo_request *request; /* KOLO_REQUEST_BATCH, not queued yet */
  size_t bytes;
} open_batch;

typedef struct kolo_engine kolo_engine;

struct kolo_engine {
  kolo_comm *comm;
  engine_config config;
  kolo_nego_table *table;
  kolo_nego_decision decision;
  kolo_names *local;          /* name -> this rank's undecided named request */
  kolo_request **unannounced; /* taken from the inbox, not in a message yet */
  size_t unannounced_count, unannounced_capacity;
  kolo_request *unnamed_head, *unnamed_tail; /* negotiated unnamed requests, by seq */
  kolo_request *join;                        /* this rank's join, until every rank joined */
  uint64_t unnamed_issued, unnamed_announced;
  int joined_announced;
  int64_t news_since; /* when the oldest unannounced news arrived; 0 = none */
  uint32_t cycle;
  char stall_names[4][KOLO_NAME_MAX + 1]; /* declarations for the next message */
  int stall_count;
  int declare_unnamed;
  int64_t unnamed_behind_since;
  int unnamed_warned;
  kolo_nego_buffer out;
  uint8_t *bits;
  size_t bits_capacity;
  kolo_nego_announce *announces;
  size_t announces_capacity;
  kolo_frame **frames; /* a cycle's frames and messages, size entries, reused */
  kolo_nego_message *messages;
  open_batch open[KOLO_DTYPE_COUNT * KOLO_OP_COUNT];
  kolo_request *batch_order[KOLO_DTYPE_COUNT * KOLO_OP_COUNT];
  kolo_engine_stats stats; /* guarded by comm->mutex */
  kolo_timeline *timeline;
  int timeline_failed; /* the failure is in the timeline */
  int stalled;         /* this rank failed the communicator by a stall it decided */
};

static double env_double(const char *name, double fallback) {
  const char *value = getenv(name);
  if (value == NULL || *value == '\0') return fallback;
  char *end = NULL;
  double parsed = strtod(value, &end);
  if (end == value || parsed < 0) {
    KOLO_LOGW("kolo", "%s=%s is not a number >= 0; using %g", name, value, fallback);
    return fallback;
  }
  return parsed;
}

static engine_config config_from_env(void) {
  engine_config c;
  c.cycle_ns = (int64_t)(env_double("KOLO_CYCLE_TIME", DEFAULT_CYCLE_MS) * 1e6);
  const char *threshold = getenv("KOLO_FUSION_THRESHOLD");
  c.fusion_threshold = threshold != NULL && strcmp(threshold, "0") == 0
                           ? 0
                           : kolo_size_from_env("KOLO_FUSION_THRESHOLD", DEFAULT_FUSION_THRESHOLD);
  double timeout = env_double("KOLO_STALL_TIMEOUT", DEFAULT_STALL_TIMEOUT_S);
  double warning = env_double("KOLO_STALL_WARNING", DEFAULT_STALL_WARNING_S);
  if (timeout <= 0) timeout = DEFAULT_STALL_TIMEOUT_S;
  if (warning <= 0 || warning > timeout) warning = timeout;
  c.stall_timeout_ns = (int64_t)(timeout * 1e9);
  c.stall_warning_ns = (int64_t)(warning * 1e9);
  c.cache_capacity = (uint32_t)kolo_size_from_env("KOLO_CACHE_CAPACITY", DEFAULT_CACHE_CAPACITY);
  return c;
}

void kolo_engine_wake(kolo_comm *comm) {
  uint64_t one = 1;
  ssize_t ignored = write(comm->wake_fd, &one, sizeof one);
  (void)ignored;
}

static void drain_wake(kolo_comm *comm) {
  uint64_t value;
  ssize_t ignored = read(comm->wake_fd, &value, sizeof value);
  (void)ignored;
}

void kolo_engine_submit_locked(kolo_comm *comm, kolo_request *request) {
  request->next = NULL;
  if (comm->inbox_tail)
    comm->inbox_tail->next = request;
  else
    comm->inbox_head = request;
  comm->inbox_tail = request;
}

/* ---- what this rank says ---- */

static uint64_t hash_counts(const size_t *counts, int n, uint64_t hash) {
  for (int i = 0; i < n; i++) {
    hash ^= (uint64_t)counts[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

static kolo_nego_meta request_meta(const kolo_comm *comm, const kolo_request *rq) {
  kolo_nego_meta m = {.kind = (uint8_t)rq->kind,
                      .dtype = (uint8_t)rq->dtype,
                      .members = 1,
                      .device = (uint8_t)(rq->on_device != 0)};
  switch (rq->kind) {
    case KOLO_REQUEST_ALLREDUCE: {
      m.op = (uint8_t)rq->op;
      m.count = rq->count;
      m.members = (uint32_t)rq->member_count;
      if (rq->member_count > 1) {
        uint64_t hash = 1469598103934665603ull;
        for (int i = 0; i < rq->member_count; i++)
          hash = hash_counts(&rq->members[i].count, 1, hash);
        m.aux = hash;
      }
      break;
    }
    case KOLO_REQUEST_BROADCAST:
      m.count = rq->count;
      m.root = rq->root;
      break;
    case KOLO_REQUEST_REDUCESCATTER:
      m.op = (uint8_t)rq->op;
      m.count = rq->split_counts ? rq->count : rq->count * (size_t)comm->size;
      m.aux =
          rq->split_counts ? hash_counts(rq->split_counts, comm->size, 1469598103934665603ull) : 0;
      break;
    default:
      m.count = rq->count;
      break; /* allgather, alltoall: per-rank sizes may differ */
  }
  return m;
}

static kolo_status grow(void **array, size_t *capacity, size_t need, size_t element) {
  if (need <= *capacity) return KOLO_OK;
  size_t grown = *capacity ? *capacity : 64;
  while (grown < need) grown *= 2;
  void *memory = realloc(*array, grown * element);
  if (memory == NULL) return KOLO_ERR_NO_MEMORY;
  *array = memory;
  *capacity = grown;
  return KOLO_OK;
}

/* Encodes this rank's message for the cycle into e->out. */
static kolo_status build_message(kolo_engine *e) {
  kolo_comm *comm = e->comm;
  kolo_nego_message m = {.unnamed_count = e->unnamed_issued};
  if (e->join != NULL) m.flags |= KOLO_NEGO_FLAG_JOINED;
  uint32_t bit_bytes = (kolo_nego_bits_used(e->table) + 7) / 8;
  KOLO_CHECK(grow((void **)&e->bits, &e->bits_capacity, bit_bytes + 1, 1));
  KOLO_CHECK(grow((void **)&e->announces, &e->announces_capacity, e->unannounced_count + 1,
                  sizeof *e->announces));
  memset(e->bits, 0, bit_bytes + 1);
  uint64_t cached = 0;
  for (size_t i = 0; i < e->unannounced_count; i++) {
    kolo_request *rq = e->unannounced[i];
    kolo_nego_meta meta = request_meta(comm, rq);
    int32_t bit = kolo_nego_cached_bit(e->table, rq->name, comm->rank, &meta);
    if (bit >= 0) {
      e->bits[bit / 8] |= (uint8_t)(1u << (bit % 8));
      if ((uint32_t)bit / 8 + 1 > m.bit_bytes) m.bit_bytes = (uint32_t)bit / 8 + 1;
      cached++;
      continue;
    }
    e->announces[m.announce_count++] =
        (kolo_nego_announce){.name = rq->name, .name_length = strlen(rq->name), .meta = meta};
  }
  m.bits = e->bits;
  m.announces = e->announces;
  kolo_nego_announce stalls[5];
  for (int i = 0; i < e->stall_count; i++) {
    stalls[m.stall_count++] =
        (kolo_nego_announce){.name = e->stall_names[i], .name_length = strlen(e->stall_names[i])};
  }
  if (e->declare_unnamed)
    stalls[m.stall_count++] = (kolo_nego_announce){.name = "", .name_length = 0};
  m.stalls = stalls;
  m.stall_seconds = (uint32_t)(e->config.stall_timeout_ns / 1000000000);
  e->out.length = 0;
  KOLO_CHECK(kolo_nego_encode(&m, &e->out));
  pthread_mutex_lock(&comm->mutex);
  e->stats.cached += cached;
  e->stats.announced += m.announce_count;
  pthread_mutex_unlock(&comm->mutex);
  e->unannounced_count = 0;
  e->unnamed_announced = e->unnamed_issued;
  e->joined_announced = e->join != NULL;
  e->stall_count = 0;
  e->declare_unnamed = 0;
  e->news_since = 0;
  return KOLO_OK;
}

/* ---- intake ---- */

static void note_news(kolo_engine *e) {
  if (e->news_since == 0) e->news_since = kolo_now_ns();
}

/* Takes the inbox (under comm->mutex) into the engine's own structures. */
static void take_inbox_locked(kolo_engine *e) {
  kolo_comm *comm = e->comm;
  kolo_request *rq = comm->inbox_head;
  comm->inbox_head = comm->inbox_tail = NULL;
  while (rq != NULL) {
    kolo_request *next = rq->next;
    rq->next = NULL;
    if (rq->name[0] == '\0') {
      if (e->unnamed_tail)
        e->unnamed_tail->next = rq;
      else
        e->unnamed_head = rq;
      e->unnamed_tail = rq;
    } else if (rq->kind == KOLO_REQUEST_JOIN) {
      e->join = rq;
    } else if (kolo_names_put(e->local, rq->name, rq) != KOLO_OK ||
               grow((void **)&e->unannounced, &e->unannounced_capacity, e->unannounced_count + 1,
                    sizeof *e->unannounced) != KOLO_OK) {
      kolo_names_remove(e->local, rq->name);
      kolo_request_message(rq, "rank %d: out of memory for '%s'", comm->rank, rq->name);
      kolo_request_complete_locked(comm, rq, KOLO_ERR_NO_MEMORY);
      rq = next;
      continue;
    } else {
      e->unannounced[e->unannounced_count++] = rq;
    }
    note_news(e);
    rq = next;
  }
  e->unnamed_issued = comm->unnamed_issued;
  if ((e->join != NULL) != e->joined_announced) note_news(e);
  if (e->unnamed_issued != e->unnamed_announced) {
    /* worth a cycle when negotiated ops wait on it here or another rank is ahead */
    int wanted = e->unnamed_head != NULL;
    for (int r = 0; r < comm->size && !wanted; r++) {
      wanted = kolo_nego_unnamed_count(e->table, r) > e->unnamed_announced;
    }
    if (wanted) note_news(e);
  }
}

/* ---- failing what the engine holds ---- */

static void fail_one(void *value, void *context) {
  kolo_request *rq = value;
  kolo_comm *comm = context;
  kolo_request_complete_locked(
      comm, rq, atomic_load(&comm->failed) ? kolo_comm_error(comm, NULL) : KOLO_ERR_ABORTED);
}

static void fail_everything(kolo_engine *e) {
  kolo_comm *comm = e->comm;
  if (e->timeline != NULL && !e->timeline_failed) {
    char message[256];
    kolo_comm_error_message(comm, message, sizeof message);
    int64_t now = kolo_now_ns();
    kolo_timeline_event(e->timeline, "engine", "FAILED", now, now,
                        message[0] ? message : "stopped");
    kolo_timeline_flush(e->timeline);
    e->timeline_failed = 1;
  }
  pthread_mutex_lock(&comm->mutex);
  take_inbox_locked(e);
  kolo_names_drain(e->local, fail_one, comm);
  e->unannounced_count = 0;
  while (e->unnamed_head != NULL) {
    kolo_request *rq = e->unnamed_head;
    e->unnamed_head = rq->next;
    fail_one(rq, comm);
  }
  e->unnamed_tail = NULL;
  if (e->join != NULL) fail_one(e->join, comm);
  e->join = NULL;
  pthread_mutex_unlock(&comm->mutex);
}

/* ---- the control links ---- */

static void flush_outbox(kolo_comm *comm) {
  if (!atomic_exchange(&comm->outbox_pending, 0)) return;
  kolo_control_message message = comm->outbox;
  kolo_control_send(comm, &message, message.failed_rank);
}

/* Sends one frame to the next rank (blocking, with the no-progress deadline). */
static kolo_status send_frame(kolo_engine *e, uint32_t cycle, int origin, const uint8_t *data,
                              uint32_t length) {
  kolo_comm *comm = e->comm;
  kolo_control_message header = {.magic = KOLO_NEGO_MAGIC,
                                 .status = (int32_t)length,
                                 .failed_rank = (int32_t)cycle,
                                 .origin_rank = origin};
  kolo_channel *channel = &comm->control[0].channel;
  int64_t deadline = kolo_deadline_after_ms(comm->timeout_ms);
  kolo_status status = kolo_channel_send_all(channel, &header, sizeof header, deadline);
  if (status == KOLO_OK && length > 0)
    status = kolo_channel_send_all(channel, data, length, deadline);
  if (status != KOLO_OK) {
    int next = comm->control[0].peer_rank;
    kolo_comm_fail(comm, status == KOLO_ERR_TIMEOUT ? KOLO_ERR_TIMEOUT : KOLO_ERR_PEER_LOST, next,
                   "%s: rank %d (negotiation send failed)",
                   status == KOLO_ERR_TIMEOUT ? "timeout" : "peer lost", next);
    return kolo_comm_error(comm, NULL);
  }
  pthread_mutex_lock(&comm->mutex);
  e->stats.negotiation_bytes += sizeof header + length;
  pthread_mutex_unlock(&comm->mutex);
  return KOLO_OK;
}

/* Polls the control links (and, when idle, the wake eventfd) for up to wait_ms,
 * sending the liveness beats that fall due and judging silent links (beat.c). */
static void poll_links(kolo_comm *comm, int with_wake, int wait_ms) {
  int beat_ms = kolo_beat_tick(comm);
  if (beat_ms >= 0 && (wait_ms < 0 || beat_ms < wait_ms)) wait_ms = beat_ms;
  struct pollfd fds[4];
  int count = 0, link_of[4] = {-1, -1, -1, -1};
  fds[count++] = (struct pollfd){.fd = with_wake ? comm->wake_fd : comm->fail_fd, .events = POLLIN};
  for (int i = 0; i < 2; i++) {
    if (comm->control[i].open && !atomic_load(&comm->failed)) {
      link_of[count] = i;
      fds[count++] =
          (struct pollfd){.fd = kolo_channel_poll_fd(&comm->control[i].channel), .events = POLLIN};
    }
  }
  if (poll(fds, (nfds_t)count, wait_ms) > 0) {
    if (with_wake && fds[0].revents) drain_wake(comm);
    for (int i = 1; i < count; i++) {
      if (fds[i].revents) kolo_control_service(comm, &comm->control[link_of[i]]);
    }
  }
  kolo_beat_check(comm);
}

/* The next frame from the previous rank, waiting up to the no-progress timeout. */
static kolo_frame *wait_frame(kolo_engine *e) {
  kolo_comm *comm = e->comm;
  int64_t deadline = kolo_deadline_after_ms(comm->timeout_ms);
  for (;;) {
    kolo_frame *frame = kolo_control_take_frame(&comm->control[1]);
    if (frame != NULL || atomic_load(&comm->failed)) return frame;
    if (!comm->control[1].open) { /* it said goodbye: its message will never come */
      int prev = comm->control[1].peer_rank;
      kolo_comm_fail(comm, KOLO_ERR_PEER_LOST, prev,
                     "peer lost: rank %d closed its communicator during a negotiation cycle", prev);
      return NULL;
    }
    int wait_ms = kolo_ms_until(deadline);
    if (wait_ms == 0) {
      int prev = comm->control[1].peer_rank;
      kolo_comm_fail(comm, KOLO_ERR_TIMEOUT, prev,
                     "timeout: no negotiation message from rank %d for %d ms", prev,
                     comm->timeout_ms);
      return NULL;
    }
    poll_links(comm, 0, wait_ms);
  }
}

static int wrap_rank(int value, int size) {
  return ((value % size) + size) % size;
}

/* ---- acting on a decision ---- */

static kolo_request *internal_request(kolo_comm *comm, kolo_request_kind kind, kolo_dtype dtype) {
  kolo_request *rq = calloc(1, sizeof *rq);
  if (rq == NULL) return NULL;
  rq->comm = comm;
  rq->kind = kind;
  rq->dtype = dtype;
  rq->internal = 1;
  rq->prescale = rq->postscale = 1.0;
  rq->last_rank = -1;
  return rq;
}

/* This rank joined: it takes part in the others' operation with nothing of its own. */
static kolo_request *joined_participation(kolo_comm *comm, const kolo_nego_ready *ready) {
  kolo_request *rq =
      internal_request(comm, (kolo_request_kind)ready->meta.kind, (kolo_dtype)ready->meta.dtype);
  if (rq == NULL) return NULL;
  snprintf(rq->name, sizeof rq->name, "%s", ready->name);
  if (rq->kind == KOLO_REQUEST_ALLGATHER) {
    rq->engine_output = 1; /* receives the others' blocks, then drops them */
  } else if (rq->kind == KOLO_REQUEST_BROADCAST) {
    rq->count = ready->meta.count;
    rq->root = ready->meta.root;
    rq->scratch = malloc(rq->count * kolo_dtype_size(rq->dtype) + 1);
    rq->send = rq->recv = rq->scratch;
    if (rq->scratch == NULL) {
      free(rq);
      return NULL;
    }
  } else if (rq->kind == KOLO_REQUEST_REDUCESCATTER) {
    rq->op = (kolo_op)ready->meta.op; /* identity values; the counts come at execution */
    rq->count = ready->meta.count;
  } else if (rq->kind == KOLO_REQUEST_ALLTOALL) {
    /* sends nothing (zero counts, which send points at), receives the others' blocks */
    rq->scratch = calloc((size_t)comm->size + 1, sizeof(size_t));
    rq->split_counts = rq->scratch;
    rq->send = rq->scratch;
    rq->engine_output = 1;
    if (rq->scratch == NULL) {
      free(rq);
      return NULL;
    }
  }
  return rq;
}

/* The first rank that submitted a ready entry (the others joined), or -1 when all did. */
static int first_submitter_if_joined(const kolo_comm *comm, const kolo_nego_ready *ready) {
  int first = -1, all = 1;
  for (int r = 0; r < comm->size; r++) {
    if (ready->submitted[r] && first < 0) first = r;
    all &= ready->submitted[r] != 0;
  }
  return all ? -1 : first;
}

static kolo_status batch_add(kolo_batch *b, kolo_request *owner, int member, size_t count) {
  KOLO_CHECK(
      grow((void **)&b->slots, &b->slot_capacity, (size_t)b->slot_count + 1, sizeof *b->slots));
  b->slots[b->slot_count++] = (kolo_batch_slot){.owner = owner, .member = member, .count = count};
  b->elements += count;
  return KOLO_OK;
}

static kolo_status batch_add_owner(kolo_batch *b, kolo_request *owner) {
  KOLO_CHECK(
      grow((void **)&b->owners, &b->owner_capacity, (size_t)b->owner_count + 1, sizeof *b->owners));
  b->owners[b->owner_count++] = owner;
  return KOLO_OK;
}

/* Queues a batch for the executor (under comm->mutex). */
static void close_batch(kolo_engine *e, open_batch *slot) {
  if (slot->request == NULL) return;
  kolo_comm *comm = e->comm;
  e->stats.batches++;
  e->stats.fused_tensors += (uint64_t)slot->request->batch->owner_count;
  kolo_queue_push_locked(comm, slot->request);
  slot->request = NULL;
  slot->bytes = 0;
}

/* Adds a ready all-reduce to the open batch of its dtype and op (opening one,
 * or closing a full one first). rq NULL: this rank joined (neutral values). */
static kolo_status add_to_batch(kolo_engine *e, const kolo_nego_ready *ready, kolo_request *rq,
                                int *opened) {
  kolo_comm *comm = e->comm;
  kolo_dtype dtype = (kolo_dtype)ready->meta.dtype;
  kolo_op op = (kolo_op)ready->meta.op;
  size_t bytes = ready->meta.count * kolo_dtype_size(dtype);
  open_batch *slot = &e->open[dtype * KOLO_OP_COUNT + op];
  size_t threshold = e->config.fusion_threshold;
  if (slot->request != NULL && (threshold == 0 || slot->bytes + bytes > threshold)) {
    close_batch(e, slot);
  }
  if (slot->request == NULL) {
    kolo_request *batch_request = internal_request(comm, KOLO_REQUEST_BATCH, dtype);
    kolo_batch *batch = calloc(1, sizeof *batch);
    if (batch_request == NULL || batch == NULL) {
      free(batch_request);
      free(batch);
      return KOLO_ERR_NO_MEMORY;
    }
    batch->dtype = dtype;
    batch->op = op;
    /* room for the whole cycle up front (no regrowing per tensor) */
    size_t room = e->decision.ready_count;
    if (grow((void **)&batch->slots, &batch->slot_capacity, room, sizeof *batch->slots) !=
            KOLO_OK ||
        grow((void **)&batch->owners, &batch->owner_capacity, room, sizeof *batch->owners) !=
            KOLO_OK) {
      kolo_batch_free(batch);
      free(batch_request);
      return KOLO_ERR_NO_MEMORY;
    }
    batch_request->batch = batch;
    slot->request = batch_request;
    e->batch_order[(*opened)++] = batch_request;
  }
  kolo_batch *batch = slot->request->batch;
  slot->bytes += bytes;
  if (rq == NULL) return batch_add(batch, NULL, 0, ready->meta.count);
  for (int m = 0; m < rq->member_count; m++)
    KOLO_CHECK(batch_add(batch, rq, m, rq->members[m].count));
  return batch_add_owner(batch, rq);
}

/* Batches still open at the end of a cycle go to the executor, oldest first. */
static void close_open_batches(kolo_engine *e, int opened) {
  for (int i = 0; i < opened; i++) {
    kolo_request *request = e->batch_order[i];
    for (size_t k = 0; k < sizeof e->open / sizeof e->open[0]; k++) {
      if (e->open[k].request == request) close_batch(e, &e->open[k]);
    }
  }
}

/* One ready name: its error, a batch slot, or an operation of its own. */
static kolo_status dispatch_ready(kolo_engine *e, const kolo_nego_ready *ready, int64_t now,
                                  int *opened) {
  kolo_comm *comm = e->comm;
  kolo_request *rq = kolo_names_remove(e->local, ready->name);
  if (rq != NULL) {
    rq->decided_ns = now;
    kolo_timeline_event(e->timeline, rq->name, "NEGOTIATE", rq->submitted_ns, now,
                        ready->status == KOLO_OK ? NULL : ready->message);
  }
  if (ready->status != KOLO_OK) {
    if (rq == NULL) return KOLO_OK;
    snprintf(rq->message, sizeof rq->message, "%s", ready->message);
    KOLO_LOGE("kolo", "rank %d: %s", comm->rank, ready->message);
    kolo_request_complete_locked(comm, rq, ready->status);
    return KOLO_OK;
  }
  /* device all-reduces go to NCCL one by one (no host fusion buffer) */
  if (ready->meta.kind == KOLO_REQUEST_ALLREDUCE && !ready->meta.device)
    return add_to_batch(e, ready, rq, opened);
  if (rq == NULL) rq = joined_participation(comm, ready);
  if (rq == NULL) return KOLO_ERR_NO_MEMORY;
  if (ready->meta.kind == KOLO_REQUEST_REDUCESCATTER) {
    rq->counts_from = first_submitter_if_joined(comm, ready) + 1;
  }
  kolo_queue_push_locked(comm, rq);
  return KOLO_OK;
}

static kolo_status act(kolo_engine *e, int64_t now) {
  kolo_comm *comm = e->comm;
  kolo_nego_decision *d = &e->decision;
  if (d->stall != KOLO_OK) {
    /* every rank decides this from the same cycle: no forwarding (each keeps the names) */
    kolo_comm_fail_local(comm, KOLO_ERR_STALLED, d->stall_rank, "%s", d->stall_message);
    e->stalled = 1;
    return KOLO_ERR_STALLED;
  }
  kolo_status status = KOLO_OK;
  pthread_mutex_lock(&comm->mutex);
  while (e->unnamed_head != NULL && e->unnamed_head->seq <= d->unnamed_agreed) {
    kolo_request *rq = e->unnamed_head;
    e->unnamed_head = rq->next;
    if (e->unnamed_head == NULL) e->unnamed_tail = NULL;
    rq->decided_ns = now;
    kolo_queue_push_locked(comm, rq);
  }
  int opened = 0;
  for (size_t i = 0; i < d->ready_count && status == KOLO_OK; i++) {
    status = dispatch_ready(e, &d->ready[i], now, &opened);
  }
  close_open_batches(e, opened);
  if (d->join_done && e->join != NULL) {
    e->join->last_rank = d->last_rank;
    kolo_queue_push_locked(comm, e->join); /* after everything it took part in */
    e->join = NULL;
    e->joined_announced = 0; /* every rank's table forgot the joins: nothing to announce */
  }
  pthread_mutex_unlock(&comm->mutex);
  if (status != KOLO_OK) {
    kolo_comm_fail(comm, status, comm->rank, "rank %d: out of memory in the engine", comm->rank);
  }
  return status;
}

/* ---- a cycle ---- */

static kolo_status gather_messages(kolo_engine *e, kolo_frame **frames,
                                   kolo_nego_message *messages) {
  kolo_comm *comm = e->comm;
  int n = comm->size, r = comm->rank;
  for (int t = 1; t < n; t++) {
    kolo_frame *frame = wait_frame(e);
    if (frame == NULL) return kolo_comm_error(comm, NULL);
    int origin = wrap_rank(r - t, n);
    frames[origin] = frame;
    if (frame->cycle != e->cycle || frame->origin != origin) {
      kolo_comm_fail(comm, KOLO_ERR_PROTOCOL, comm->control[1].peer_rank,
                     "protocol error: negotiation frame of cycle %u from rank %d, want cycle %u "
                     "from rank %d",
                     frame->cycle, frame->origin, e->cycle, origin);
      return kolo_comm_error(comm, NULL);
    }
    if (t < n - 1)
      KOLO_CHECK(send_frame(e, frame->cycle, frame->origin, frame->data, frame->length));
    if (kolo_nego_decode(frame->data, frame->length, &messages[origin]) != KOLO_OK) {
      kolo_comm_fail(comm, KOLO_ERR_PROTOCOL, comm->control[1].peer_rank,
                     "protocol error: malformed negotiation message of rank %d", origin);
      return kolo_comm_error(comm, NULL);
    }
  }
  return KOLO_OK;
}

/* Kept out of line: bench/run_negotiation.sh counts the instructions in it. */
__attribute__((noinline)) static kolo_status run_cycle(kolo_engine *e) {
  kolo_comm *comm = e->comm;
  int n = comm->size, r = comm->rank;
  int64_t started = kolo_now_ns();
  pthread_mutex_lock(&comm->mutex);
  take_inbox_locked(e);
  comm->hurry = 0;
  pthread_mutex_unlock(&comm->mutex);
  KOLO_CHECK(build_message(e));
  int64_t built = kolo_now_ns();
  kolo_frame **frames = e->frames;
  kolo_nego_message *messages = e->messages;
  memset(frames, 0, (size_t)n * sizeof *frames);
  memset(messages, 0, (size_t)n * sizeof *messages);
  kolo_status status = KOLO_OK;
  if (status == KOLO_OK && n > 1) {
    status = send_frame(e, e->cycle, r, e->out.data, (uint32_t)e->out.length);
  }
  if (status == KOLO_OK) status = kolo_nego_decode(e->out.data, e->out.length, &messages[r]);
  if (status == KOLO_OK) status = gather_messages(e, frames, messages);
  int64_t now = kolo_now_ns();
  if (status == KOLO_OK) {
    status = kolo_nego_apply(e->table, messages, now, &e->decision);
    if (status == KOLO_ERR_PROTOCOL) {
      kolo_comm_fail(comm, status, -1,
                     "protocol error: a negotiation message names an unknown cache bit");
    }
  }
  for (int i = 0; i < n; i++) {
    kolo_nego_message_free(&messages[i]);
    free(frames[i]);
  }
  if (status != KOLO_OK) {
    if (!atomic_load(&comm->failed))
      kolo_comm_fail(comm, status, comm->rank, "rank %d: negotiation failed: %s", comm->rank,
                     kolo_strerror(status));
    return status;
  }
  e->cycle++;
  if (e->timeline != NULL) {
    char detail[64];
    snprintf(detail, sizeof detail, "cycle %u: %zu ready", e->cycle, e->decision.ready_count);
    kolo_timeline_event(e->timeline, "engine", "CYCLE", started, now, detail);
  }
  status = act(e, now);
  int64_t acted = kolo_now_ns();
  pthread_mutex_lock(&comm->mutex);
  e->stats.cycles++;
  e->stats.negotiation_ns += (uint64_t)(acted - started);
  /* work: building this rank's message, then applying and dispatching the cycle */
  e->stats.negotiation_work_ns += (uint64_t)((built - started) + (acted - now));
  pthread_mutex_unlock(&comm->mutex);
  return status;
}

/* ---- the stall inspector ---- */

typedef struct stall_scan {
  kolo_engine *engine;
  int64_t now;
  int64_t next; /* the next time the inspector has something to do */
} stall_scan;

static int inspect_entry(kolo_nego_entry *entry, void *context) {
  stall_scan *scan = context;
  kolo_engine *e = scan->engine;
  kolo_comm *comm = e->comm;
  int64_t age = scan->now - entry->since_ns;
  if (!entry->warned && age >= e->config.stall_warning_ns) {
    char have[160], missing[160];
    kolo_nego_format_ranks(entry->submitted, comm->size, 1, have, sizeof have);
    kolo_nego_format_ranks(entry->submitted, comm->size, 0, missing, sizeof missing);
    KOLO_LOGW("kolo",
              "rank %d: stall: tensor '%s' submitted by rank(s) %s, still missing from "
              "rank(s) %s after %.0f s",
              comm->rank, entry->name, have, missing, (double)age / 1e9);
    entry->warned = 1;
  }
  if (age >= e->config.stall_timeout_ns) {
    if (e->stall_count < 4) {
      snprintf(e->stall_names[e->stall_count++], sizeof e->stall_names[0], "%s", entry->name);
      note_news(e);
    }
    return 1;
  }
  int64_t due =
      entry->since_ns + (entry->warned ? e->config.stall_timeout_ns : e->config.stall_warning_ns);
  if (due < scan->next) scan->next = due;
  return 0;
}

/* Checks the stall deadlines; returns the next time it must look again. */
static int64_t inspect_stalls(kolo_engine *e, int64_t now) {
  stall_scan scan = {.engine = e, .now = now, .next = INT64_MAX};
  if (e->stall_count == 0) kolo_nego_for_each_pending(e->table, inspect_entry, &scan);
  kolo_comm *comm = e->comm;
  uint64_t low = UINT64_MAX, high = 0;
  for (int r = 0; r < comm->size; r++) {
    uint64_t count = kolo_nego_unnamed_count(e->table, r);
    low = count < low ? count : low;
    high = count > high ? count : high;
  }
  if (low == high) {
    e->unnamed_behind_since = 0;
    e->unnamed_warned = 0;
    return scan.next;
  }
  if (e->unnamed_behind_since == 0) e->unnamed_behind_since = now;
  int64_t age = now - e->unnamed_behind_since;
  if (!e->unnamed_warned && age >= e->config.stall_warning_ns) {
    KOLO_LOGW("kolo",
              "rank %d: stall: unnamed operation #%llu issued by some ranks only, for %.0f s",
              comm->rank, (unsigned long long)(low + 1), (double)age / 1e9);
    e->unnamed_warned = 1;
  }
  if (age >= e->config.stall_timeout_ns && !e->declare_unnamed) {
    e->declare_unnamed = 1;
    note_news(e);
  }
  int64_t due = e->unnamed_behind_since +
                (e->unnamed_warned ? e->config.stall_timeout_ns : e->config.stall_warning_ns);
  return due < scan.next ? due : scan.next;
}

/* ---- the thread ---- */

static int cycle_due(kolo_engine *e, int hurry, int64_t now, int64_t *wake_at) {
  kolo_comm *comm = e->comm;
  kolo_frame *head = comm->size > 1 ? comm->control[1].frames_head : NULL;
  if (head != NULL) return 1; /* the previous rank started our next cycle: join it */
  if (e->news_since == 0) return 0;
  if (hurry || comm->size == 1 || e->stall_count > 0 || e->declare_unnamed) return 1;
  int64_t due = e->news_since + e->config.cycle_ns;
  if (now >= due) return 1;
  if (due < *wake_at) *wake_at = due;
  return 0;
}

/* After a stall this rank decided, its neighbours decide it from the same cycle,
 * but one may still be waiting for the last frame of that cycle from its other
 * side: closing the links at once could make it see this rank's EOF first and
 * report PEER_LOST instead of the stall. So the links stay open until the
 * neighbours close theirs, at most LINGER_MS (destroy of a stalled ring only). */
#define LINGER_MS 500
static void linger(kolo_comm *comm) {
  int64_t deadline = kolo_deadline_after_ms(LINGER_MS);
  for (;;) {
    struct pollfd fds[2];
    int count = 0, link_of[2];
    for (int i = 0; i < 2; i++) {
      if (!comm->control[i].open) continue;
      link_of[count] = i;
      fds[count++] =
          (struct pollfd){.fd = kolo_channel_poll_fd(&comm->control[i].channel), .events = POLLIN};
    }
    int wait_ms = kolo_ms_until(deadline);
    if (count == 0 || wait_ms == 0) return;
    if (poll(fds, (nfds_t)count, wait_ms) <= 0) continue;
    for (int i = 0; i < count; i++) {
      if (fds[i].revents) kolo_control_service(comm, &comm->control[link_of[i]]);
    }
  }
}

static void *negotiator_main(void *argument) {
  kolo_comm *comm = argument;
  kolo_engine *e = comm->engine;
  kolo_beat_start(comm);
  for (;;) {
    flush_outbox(comm);
    kolo_beat_tick(comm); /* also between back-to-back cycles */
    pthread_mutex_lock(&comm->mutex);
    int stopping = comm->negotiator_stopping;
    int hurry = comm->hurry;
    take_inbox_locked(e);
    pthread_mutex_unlock(&comm->mutex);
    if (atomic_load(&comm->failed) || stopping) {
      fail_everything(e);
      if (stopping) break;
      poll_links(comm, 1, -1);
      continue;
    }
    int64_t now = kolo_now_ns();
    int64_t wake_at = inspect_stalls(e, now);
    if (cycle_due(e, hurry, now, &wake_at)) {
      run_cycle(e);
      continue;
    }
    int wait_ms = wake_at == INT64_MAX ? -1 : (int)((wake_at - now + 999999) / 1000000);
    poll_links(comm, 1, wait_ms);
  }
  flush_outbox(comm);
  if (e->stalled) linger(comm);
  if (comm->say_goodbye && !atomic_load(&comm->failed)) {
    kolo_control_message goodbye = {.magic = KOLO_CONTROL_MAGIC,
                                    .status = KOLO_OK,
                                    .failed_rank = comm->rank,
                                    .origin_rank = comm->rank};
    kolo_control_send(comm, &goodbye, -1);
  }
  return NULL;
}

kolo_status kolo_engine_start(kolo_comm *comm) {
  kolo_engine *e = calloc(1, sizeof *e);
  if (e == NULL) return KOLO_ERR_NO_MEMORY;
  e->comm = comm;
  e->config = config_from_env();
  kolo_status status = kolo_nego_table_create(comm->size, e->config.cache_capacity, &e->table);
  if (status == KOLO_OK) status = kolo_names_create(&e->local);
  e->frames = calloc((size_t)comm->size, sizeof *e->frames);
  e->messages = calloc((size_t)comm->size, sizeof *e->messages);
  if (status == KOLO_OK && (e->frames == NULL || e->messages == NULL)) status = KOLO_ERR_NO_MEMORY;
  if (status == KOLO_OK) status = kolo_timeline_open_from_env(comm->rank, comm->size, &e->timeline);
  comm->engine = e;
  if (status == KOLO_OK && pthread_create(&comm->negotiator, NULL, negotiator_main, comm) != 0) {
    status = KOLO_ERR_SYSTEM;
  }
  if (status == KOLO_OK) comm->negotiator_started = 1;
  return status;
}

void kolo_engine_stop(kolo_comm *comm) {
  kolo_engine *e = comm->engine;
  if (e == NULL) return;
  pthread_mutex_lock(&comm->mutex);
  comm->negotiator_stopping = 1;
  pthread_mutex_unlock(&comm->mutex);
  kolo_engine_wake(comm);
  if (comm->negotiator_started) pthread_join(comm->negotiator, NULL);
  comm->negotiator_started = 0;
}

void kolo_engine_free(kolo_comm *comm) {
  kolo_engine *e = comm->engine;
  if (e == NULL) return;
  kolo_timeline_close(e->timeline);
  kolo_nego_decision_free(&e->decision);
  kolo_nego_table_destroy(e->table);
  kolo_names_destroy(e->local);
  kolo_nego_buffer_free(&e->out);
  free(e->unannounced);
  free(e->bits);
  free(e->announces);
  free(e->frames);
  free(e->messages);
  for (int i = 0; i < 2; i++) kolo_control_link_clear(&comm->control[i]);
  free(e);
  comm->engine = NULL;
}

kolo_timeline *kolo_engine_timeline(kolo_comm *comm) {
  return comm->engine != NULL ? comm->engine->timeline : NULL;
}

kolo_status kolo_engine_stats_get(const kolo_comm *comm, kolo_engine_stats *stats) {
  if (comm == NULL || stats == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_comm *mutable_comm = (kolo_comm *)comm;
  memset(stats, 0, sizeof *stats);
  pthread_mutex_lock(&mutable_comm->mutex);
  if (comm->engine != NULL) *stats = comm->engine->stats;
  pthread_mutex_unlock(&mutable_comm->mutex);
  return KOLO_OK;
}
