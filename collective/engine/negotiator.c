/* The engine's negotiator thread: one per communicator, the only reader and
 * writer of the control links. It takes negotiated requests from the inbox,
 * runs negotiation cycles (negotiate.h) with the other ranks, and hands what
 * every rank agreed on to the executor's queue (exec/) in the agreed order
 * (decide.c): fused batches of all-reduces (up to KOLO_FUSION_THRESHOLD bytes),
 * single operations, unnamed operations once every rank issued them, join
 * results.
 *
 * Cycles are started lazily, so an idle ring exchanges nothing: a rank with news
 * (a new submission, its join, a stall to declare) starts one KOLO_CYCLE_TIME
 * after its first unannounced news, or at once when a thread waits; a rank that
 * receives the previous rank's message for its next cycle joins that cycle at
 * once with whatever it has. A cycle is a ring all-gather of one message per
 * rank over the control links (n-1 hops); every rank then applies the same n
 * messages to its copy of the table and decides the same.
 *
 * The stall inspector (stall.c) runs on this thread too, each cycle. A failure
 * of the communicator (a dead peer, an abort) fails every request held here at
 * once with that failure. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collective/engine/negotiator.h"
#include "collective/engine/engine_state.h"
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

static void drain_wake(kolo_negotiator *nego) {
  uint64_t value;
  ssize_t ignored = read(nego->net->wake_fd, &value, sizeof value);
  (void)ignored;
}

void kolo_engine_submit_locked(kolo_negotiator *nego, kolo_request *request) {
  request->next = NULL;
  if (nego->inbox_tail)
    nego->inbox_tail->next = request;
  else
    nego->inbox_head = request;
  nego->inbox_tail = request;
}

/* ---- what this rank says ---- */

static uint64_t hash_counts(const size_t *counts, int n, uint64_t hash) {
  for (int i = 0; i < n; i++) {
    hash ^= (uint64_t)counts[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

static kolo_nego_meta request_meta(const kolo_negotiator *nego, const kolo_request *rq) {
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
      m.count = rq->split_counts ? rq->count : rq->count * (size_t)nego->net->size;
      m.aux = rq->split_counts
                  ? hash_counts(rq->split_counts, nego->net->size, 1469598103934665603ull)
                  : 0;
      break;
    default:
      m.count = rq->count;
      break; /* allgather, alltoall: per-rank sizes may differ */
  }
  return m;
}

/* Encodes this rank's message for the cycle into e->out. */
static kolo_status build_message(kolo_engine *e) {
  kolo_negotiator *nego = e->nego;
  kolo_nego_message m = {.unnamed_count = e->unnamed_issued};
  if (e->join != NULL) m.flags |= KOLO_NEGO_FLAG_JOINED;
  uint32_t bit_bytes = (kolo_nego_bits_used(e->table) + 7) / 8;
  KOLO_CHECK(kolo_engine_grow((void **)&e->bits, &e->bits_capacity, bit_bytes + 1, 1));
  KOLO_CHECK(kolo_engine_grow((void **)&e->announces, &e->announces_capacity,
                              e->unannounced_count + 1, sizeof *e->announces));
  memset(e->bits, 0, bit_bytes + 1);
  uint64_t cached = 0;
  for (size_t i = 0; i < e->unannounced_count; i++) {
    kolo_request *rq = e->unannounced[i];
    kolo_nego_meta meta = request_meta(nego, rq);
    int32_t bit = kolo_nego_cached_bit(e->table, rq->name, nego->net->rank, &meta);
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
  pthread_mutex_lock(&nego->queue->mutex);
  e->stats.cached += cached;
  e->stats.announced += m.announce_count;
  pthread_mutex_unlock(&nego->queue->mutex);
  e->unannounced_count = 0;
  e->unnamed_announced = e->unnamed_issued;
  e->joined_announced = e->join != NULL;
  e->stall_count = 0;
  e->declare_unnamed = 0;
  e->news_since = 0;
  return KOLO_OK;
}

/* ---- intake ---- */

/* Takes the inbox (under nego->queue->mutex) into the engine's own structures. */
static void take_inbox_locked(kolo_engine *e) {
  kolo_negotiator *nego = e->nego;
  kolo_request *rq = nego->inbox_head;
  nego->inbox_head = nego->inbox_tail = NULL;
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
               kolo_engine_grow((void **)&e->unannounced, &e->unannounced_capacity,
                                e->unannounced_count + 1, sizeof *e->unannounced) != KOLO_OK) {
      kolo_names_remove(e->local, rq->name);
      kolo_request_message(rq, "rank %d: out of memory for '%s'", nego->net->rank, rq->name);
      kolo_request_complete_locked(nego->queue, rq, KOLO_ERR_NO_MEMORY);
      rq = next;
      continue;
    } else {
      e->unannounced[e->unannounced_count++] = rq;
    }
    kolo_engine_note_news(e);
    rq = next;
  }
  e->unnamed_issued = nego->unnamed_issued;
  if ((e->join != NULL) != e->joined_announced) kolo_engine_note_news(e);
  if (e->unnamed_issued != e->unnamed_announced) {
    /* worth a cycle when negotiated ops wait on it here or another rank is ahead */
    int wanted = e->unnamed_head != NULL;
    for (int r = 0; r < nego->net->size && !wanted; r++) {
      wanted = kolo_nego_unnamed_count(e->table, r) > e->unnamed_announced;
    }
    if (wanted) kolo_engine_note_news(e);
  }
}

/* ---- failing what the engine holds ---- */

static void fail_one(void *value, void *context) {
  kolo_request *rq = value;
  kolo_negotiator *nego = context;
  kolo_request_complete_locked(
      nego->queue, rq,
      atomic_load(&nego->net->failed) ? kolo_net_error(nego->net, NULL) : KOLO_ERR_ABORTED);
}

static void fail_everything(kolo_engine *e) {
  kolo_negotiator *nego = e->nego;
  if (e->timeline != NULL && !e->timeline_failed) {
    char message[256];
    kolo_net_error_message(nego->net, message, sizeof message);
    int64_t now = kolo_now_ns();
    kolo_timeline_event(e->timeline, "engine", "FAILED", now, now,
                        message[0] ? message : "stopped");
    kolo_timeline_flush(e->timeline);
    e->timeline_failed = 1;
  }
  pthread_mutex_lock(&nego->queue->mutex);
  take_inbox_locked(e);
  kolo_names_drain(e->local, fail_one, nego);
  e->unannounced_count = 0;
  while (e->unnamed_head != NULL) {
    kolo_request *rq = e->unnamed_head;
    e->unnamed_head = rq->next;
    fail_one(rq, nego);
  }
  e->unnamed_tail = NULL;
  if (e->join != NULL) fail_one(e->join, nego);
  e->join = NULL;
  pthread_mutex_unlock(&nego->queue->mutex);
}

/* ---- the control links ---- */

static void flush_outbox(kolo_negotiator *nego) {
  if (!atomic_exchange(&nego->net->outbox_pending, 0)) return;
  kolo_control_message message = nego->net->outbox;
  kolo_control_send(nego->net, &message, message.failed_rank);
}

/* Sends one frame to the next rank (blocking, with the no-progress deadline). */
static kolo_status send_frame(kolo_engine *e, uint32_t cycle, int origin, const uint8_t *data,
                              uint32_t length) {
  kolo_negotiator *nego = e->nego;
  kolo_control_message header = {.magic = KOLO_NEGO_MAGIC,
                                 .status = (int32_t)length,
                                 .failed_rank = (int32_t)cycle,
                                 .origin_rank = origin};
  kolo_channel *channel = &nego->net->control[0].channel;
  int64_t deadline = kolo_deadline_after_ms(nego->net->timeout_ms);
  kolo_status status = kolo_channel_send_all(channel, &header, sizeof header, deadline);
  if (status == KOLO_OK && length > 0)
    status = kolo_channel_send_all(channel, data, length, deadline);
  if (status != KOLO_OK) {
    int next = nego->net->control[0].peer_rank;
    kolo_net_fail(nego->net, status == KOLO_ERR_TIMEOUT ? KOLO_ERR_TIMEOUT : KOLO_ERR_PEER_LOST,
                  next, "%s: rank %d (negotiation send failed)",
                  status == KOLO_ERR_TIMEOUT ? "timeout" : "peer lost", next);
    return kolo_net_error(nego->net, NULL);
  }
  pthread_mutex_lock(&nego->queue->mutex);
  e->stats.negotiation_bytes += sizeof header + length;
  pthread_mutex_unlock(&nego->queue->mutex);
  return KOLO_OK;
}

/* Polls the control links (and, when idle, the wake eventfd) for up to wait_ms,
 * sending the liveness beats that fall due and judging silent links (beat.c). */
static void poll_links(kolo_negotiator *nego, int with_wake, int wait_ms) {
  int beat_ms = kolo_beat_tick(nego->net);
  if (beat_ms >= 0 && (wait_ms < 0 || beat_ms < wait_ms)) wait_ms = beat_ms;
  struct pollfd fds[4];
  int count = 0, link_of[4] = {-1, -1, -1, -1};
  fds[count++] =
      (struct pollfd){.fd = with_wake ? nego->net->wake_fd : nego->net->fail_fd, .events = POLLIN};
  for (int i = 0; i < 2; i++) {
    if (nego->net->control[i].open && !atomic_load(&nego->net->failed)) {
      link_of[count] = i;
      fds[count++] = (struct pollfd){.fd = kolo_channel_poll_fd(&nego->net->control[i].channel),
                                     .events = POLLIN};
    }
  }
  if (poll(fds, (nfds_t)count, wait_ms) > 0) {
    if (with_wake && fds[0].revents) drain_wake(nego);
    for (int i = 1; i < count; i++) {
      if (fds[i].revents) kolo_control_service(nego->net, &nego->net->control[link_of[i]]);
    }
  }
  kolo_beat_check(nego->net);
}

/* The next frame from the previous rank, waiting up to the no-progress timeout. */
static kolo_frame *wait_frame(kolo_engine *e) {
  kolo_negotiator *nego = e->nego;
  int64_t deadline = kolo_deadline_after_ms(nego->net->timeout_ms);
  for (;;) {
    kolo_frame *frame = kolo_control_take_frame(&nego->net->control[1]);
    if (frame != NULL || atomic_load(&nego->net->failed)) return frame;
    if (!nego->net->control[1].open) { /* it said goodbye: its message will never come */
      int prev = nego->net->control[1].peer_rank;
      kolo_net_fail(nego->net, KOLO_ERR_PEER_LOST, prev,
                    "peer lost: rank %d closed its communicator during a negotiation cycle", prev);
      return NULL;
    }
    int wait_ms = kolo_ms_until(deadline);
    if (wait_ms == 0) {
      int prev = nego->net->control[1].peer_rank;
      kolo_net_fail(nego->net, KOLO_ERR_TIMEOUT, prev,
                    "timeout: no negotiation message from rank %d for %d ms", prev,
                    nego->net->timeout_ms);
      return NULL;
    }
    poll_links(nego, 0, wait_ms);
  }
}

/* ---- a cycle ---- */

static kolo_status gather_messages(kolo_engine *e, kolo_frame **frames,
                                   kolo_nego_message *messages) {
  kolo_negotiator *nego = e->nego;
  int n = nego->net->size, r = nego->net->rank;
  for (int t = 1; t < n; t++) {
    kolo_frame *frame = wait_frame(e);
    if (frame == NULL) return kolo_net_error(nego->net, NULL);
    int origin = kolo_wrap_rank(r - t, n);
    frames[origin] = frame;
    if (frame->cycle != e->cycle || frame->origin != origin) {
      kolo_net_fail(nego->net, KOLO_ERR_PROTOCOL, nego->net->control[1].peer_rank,
                    "protocol error: negotiation frame of cycle %u from rank %d, want cycle %u "
                    "from rank %d",
                    frame->cycle, frame->origin, e->cycle, origin);
      return kolo_net_error(nego->net, NULL);
    }
    if (t < n - 1)
      KOLO_CHECK(send_frame(e, frame->cycle, frame->origin, frame->data, frame->length));
    if (kolo_nego_decode(frame->data, frame->length, &messages[origin]) != KOLO_OK) {
      kolo_net_fail(nego->net, KOLO_ERR_PROTOCOL, nego->net->control[1].peer_rank,
                    "protocol error: malformed negotiation message of rank %d", origin);
      return kolo_net_error(nego->net, NULL);
    }
  }
  return KOLO_OK;
}

/* Kept out of line: bench/run_negotiation.sh counts the instructions in it. */
__attribute__((noinline)) static kolo_status run_cycle(kolo_engine *e) {
  kolo_negotiator *nego = e->nego;
  int n = nego->net->size, r = nego->net->rank;
  int64_t started = kolo_now_ns();
  pthread_mutex_lock(&nego->queue->mutex);
  take_inbox_locked(e);
  nego->hurry = 0;
  pthread_mutex_unlock(&nego->queue->mutex);
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
      kolo_net_fail(nego->net, status, -1,
                    "protocol error: a negotiation message names an unknown cache bit");
    }
  }
  for (int i = 0; i < n; i++) {
    kolo_nego_message_free(&messages[i]);
    free(frames[i]);
  }
  if (status != KOLO_OK) {
    if (!atomic_load(&nego->net->failed))
      kolo_net_fail(nego->net, status, nego->net->rank, "rank %d: negotiation failed: %s",
                    nego->net->rank, kolo_strerror(status));
    return status;
  }
  e->cycle++;
  if (e->timeline != NULL) {
    char detail[64];
    snprintf(detail, sizeof detail, "cycle %u: %zu ready", e->cycle, e->decision.ready_count);
    kolo_timeline_event(e->timeline, "engine", "CYCLE", started, now, detail);
  }
  status = kolo_engine_act(e, now);
  int64_t acted = kolo_now_ns();
  pthread_mutex_lock(&nego->queue->mutex);
  e->stats.cycles++;
  e->stats.negotiation_ns += (uint64_t)(acted - started);
  /* work: building this rank's message, then applying and dispatching the cycle */
  e->stats.negotiation_work_ns += (uint64_t)((built - started) + (acted - now));
  pthread_mutex_unlock(&nego->queue->mutex);
  return status;
}

/* ---- the stall inspector ---- */

/* ---- the thread ---- */

static int cycle_due(kolo_engine *e, int hurry, int64_t now, int64_t *wake_at) {
  kolo_negotiator *nego = e->nego;
  kolo_frame *head = nego->net->size > 1 ? nego->net->control[1].frames_head : NULL;
  if (head != NULL) return 1; /* the previous rank started our next cycle: join it */
  if (e->news_since == 0) return 0;
  if (hurry || nego->net->size == 1 || e->stall_count > 0 || e->declare_unnamed) return 1;
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
static void linger(kolo_negotiator *nego) {
  int64_t deadline = kolo_deadline_after_ms(LINGER_MS);
  for (;;) {
    struct pollfd fds[2];
    int count = 0, link_of[2];
    for (int i = 0; i < 2; i++) {
      if (!nego->net->control[i].open) continue;
      link_of[count] = i;
      fds[count++] = (struct pollfd){.fd = kolo_channel_poll_fd(&nego->net->control[i].channel),
                                     .events = POLLIN};
    }
    int wait_ms = kolo_ms_until(deadline);
    if (count == 0 || wait_ms == 0) return;
    if (poll(fds, (nfds_t)count, wait_ms) <= 0) continue;
    for (int i = 0; i < count; i++) {
      if (fds[i].revents) kolo_control_service(nego->net, &nego->net->control[link_of[i]]);
    }
  }
}

static void *negotiator_main(void *argument) {
  kolo_negotiator *nego = argument;
  kolo_engine *e = nego->engine;
  kolo_beat_start(nego->net);
  for (;;) {
    flush_outbox(nego);
    kolo_beat_tick(nego->net); /* also between back-to-back cycles */
    pthread_mutex_lock(&nego->queue->mutex);
    int stopping = nego->negotiator_stopping;
    int hurry = nego->hurry;
    take_inbox_locked(e);
    pthread_mutex_unlock(&nego->queue->mutex);
    if (atomic_load(&nego->net->failed) || stopping) {
      fail_everything(e);
      if (stopping) break;
      poll_links(nego, 1, -1);
      continue;
    }
    int64_t now = kolo_now_ns();
    int64_t wake_at = kolo_engine_inspect_stalls(e, now);
    if (cycle_due(e, hurry, now, &wake_at)) {
      run_cycle(e);
      continue;
    }
    int wait_ms = wake_at == INT64_MAX ? -1 : (int)((wake_at - now + 999999) / 1000000);
    poll_links(nego, 1, wait_ms);
  }
  flush_outbox(nego);
  if (e->stalled) linger(nego);
  if (nego->say_goodbye && !atomic_load(&nego->net->failed)) {
    kolo_control_message goodbye = {.magic = KOLO_CONTROL_MAGIC,
                                    .status = KOLO_OK,
                                    .failed_rank = nego->net->rank,
                                    .origin_rank = nego->net->rank};
    kolo_control_send(nego->net, &goodbye, -1);
  }
  return NULL;
}

kolo_status kolo_engine_start(kolo_negotiator *nego) {
  kolo_engine *e = calloc(1, sizeof *e);
  if (e == NULL) return KOLO_ERR_NO_MEMORY;
  e->nego = nego;
  e->config = config_from_env();
  kolo_status status = kolo_nego_table_create(nego->net->size, e->config.cache_capacity, &e->table);
  if (status == KOLO_OK) status = kolo_names_create(&e->local);
  e->frames = calloc((size_t)nego->net->size, sizeof *e->frames);
  e->messages = calloc((size_t)nego->net->size, sizeof *e->messages);
  if (status == KOLO_OK && (e->frames == NULL || e->messages == NULL)) status = KOLO_ERR_NO_MEMORY;
  if (status == KOLO_OK)
    status = kolo_timeline_open_from_env(nego->net->rank, nego->net->size, &e->timeline);
  nego->engine = e;
  if (status == KOLO_OK && pthread_create(&nego->negotiator, NULL, negotiator_main, nego) != 0) {
    status = KOLO_ERR_SYSTEM;
  }
  if (status == KOLO_OK) nego->negotiator_started = 1;
  return status;
}

void kolo_engine_stop(kolo_negotiator *nego) {
  kolo_engine *e = nego->engine;
  if (e == NULL) return;
  pthread_mutex_lock(&nego->queue->mutex);
  nego->negotiator_stopping = 1;
  pthread_mutex_unlock(&nego->queue->mutex);
  kolo_net_wake(nego->net);
  if (nego->negotiator_started) pthread_join(nego->negotiator, NULL);
  nego->negotiator_started = 0;
}

void kolo_engine_free(kolo_negotiator *nego) {
  kolo_engine *e = nego->engine;
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
  for (int i = 0; i < 2; i++) kolo_control_link_clear(&nego->net->control[i]);
  free(e);
  nego->engine = NULL;
}

kolo_timeline *kolo_engine_timeline(kolo_negotiator *nego) {
  return nego->engine != NULL ? nego->engine->timeline : NULL;
}

void kolo_engine_stats_locked(const kolo_negotiator *nego, kolo_engine_stats *stats) {
  if (nego->engine != NULL) *stats = nego->engine->stats;
}
