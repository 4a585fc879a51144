/* Failure propagation and the control links (the net floor's fault record). The
 * first failure a rank records (a dead neighbour, a timeout, an abort, garbage
 * from a peer) wins: it is stored with its rank and message, every waiter is
 * woken through the eventfds, and the negotiator thread (engine/negotiator.c, the only writer
 * of the control links) sends it as a 16-byte control message over both links;
 * a rank that learns a failure from a control message records it and forwards
 * it once, so the whole ring learns the failed rank's number within a few hops.
 * A goodbye (status OK) on a control link is a neighbour closing normally, not
 * a failure. Every failure is also told to the net's on_fail hook, which the
 * communicator points at the device path (the epoch's NCCL communicator is
 * aborted, so GPU collectives waiting for a dead peer end as soon as the ring
 * knows): this floor calls nothing above it. The same links carry the engine's negotiation frames
 * (header + payload) from each rank to the next; they are read here into a queue. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collective/net/net.h"
#include "common/clock.h"
#include "common/log.h"

void kolo_control_send(kolo_net *net, const kolo_control_message *message, int skip_rank) {
  /* only the negotiator thread writes the links (no interleaved frames) */
  for (int i = 0; i < 2; i++) {
    kolo_control_link *link = &net->control[i];
    if (link->channel.ops == NULL || link->peer_rank == skip_rank) continue;
    size_t moved = 0;
    /* best effort, never blocks: 16 bytes always fit an idle socket buffer */
    kolo_channel_send(&link->channel, message, sizeof *message, &moved);
  }
}

static void record_failure(kolo_net *net, kolo_status status, int failed_rank, int propagate,
                           int origin_rank, kolo_log_level level, const char *fmt, va_list args) {
  /* failed is set under the lock with the error itself, so a reader that sees
   * failed and then takes the lock (kolo_net_error) always reads the error */
  pthread_mutex_lock(&net->error_mutex);
  int expected = 0;
  if (!atomic_compare_exchange_strong(&net->failed, &expected, 1)) {
    pthread_mutex_unlock(&net->error_mutex);
    return;
  }
  net->error = status;
  net->failed_rank = failed_rank;
  vsnprintf(net->error_message, sizeof net->error_message, fmt, args);
  pthread_mutex_unlock(&net->error_mutex);
  kolo_log(level, "kolo", "rank %d epoch %llu: %s", net->rank, (unsigned long long)net->epoch,
           net->error_message);
  uint64_t one = 1;
  ssize_t ignored = write(net->fail_fd, &one, sizeof one);
  ignored = write(net->wake_fd, &one, sizeof one);
  (void)ignored;
  /* who else must hear at once (the device path: GPU collectives in flight wait
   * for this peer too); never blocks */
  if (net->on_fail != NULL) net->on_fail(net->on_fail_context);
  if (propagate && net->size > 1) {
    net->outbox = (kolo_control_message){.magic = KOLO_CONTROL_MAGIC,
                                         .status = (int32_t)status,
                                         .failed_rank = failed_rank,
                                         .origin_rank = origin_rank};
    atomic_store(&net->outbox_pending, 1);
    kolo_net_wake(net);
  }
}

void kolo_net_wake(kolo_net *net) {
  uint64_t one = 1;
  ssize_t ignored = write(net->wake_fd, &one, sizeof one);
  (void)ignored;
}

void kolo_net_fail(kolo_net *net, kolo_status status, int failed_rank, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  record_failure(net, status, failed_rank, 1, net->rank, KOLO_LOG_WARN, fmt, args);
  va_end(args);
}

void kolo_net_fail_local(kolo_net *net, kolo_status status, int failed_rank, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  record_failure(net, status, failed_rank, 0, net->rank, KOLO_LOG_WARN, fmt, args);
  va_end(args);
}

static void fail_quietly(kolo_net *net, kolo_status status, int failed_rank, int propagate,
                         int origin_rank, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  record_failure(net, status, failed_rank, propagate, origin_rank, KOLO_LOG_INFO, fmt, args);
  va_end(args);
}

static void link_lost(kolo_net *net, kolo_control_link *link) {
  link->open = 0;
  kolo_net_fail(net, KOLO_ERR_PEER_LOST, link->peer_rank, "peer lost: rank %d (connection closed)",
                link->peer_rank);
}

int64_t kolo_beat_gap_update(int64_t gap_max_ns, int64_t gap_ns) {
  if (gap_ns >= gap_max_ns) return gap_ns;
  return gap_max_ns - (gap_max_ns - gap_ns) / 64;
}

/* Something arrived on link; a beat arrived on it (the beat judges by these). */
void kolo_beat_heard(kolo_control_link *link) {
  int64_t now = kolo_now_ns();
  if (now > link->heard_ns) link->heard_ns = now;
}

void kolo_beat_received(kolo_control_link *link) {
  int64_t now = kolo_now_ns();
  if (link->beat_heard_ns > 0)
    link->gap_max_ns = kolo_beat_gap_update(link->gap_max_ns, now - link->beat_heard_ns);
  link->beat_heard_ns = now;
}

/* Reads what there is of the current frame's payload; 1 when the link is done
 * for now (nothing more to read, or it failed). */
static int read_frame(kolo_net *net, kolo_control_link *link) {
  kolo_frame *frame = link->frame;
  while (link->frame_filled < frame->length) {
    size_t moved = 0;
    kolo_status status = kolo_channel_recv(&link->channel, frame->data + link->frame_filled,
                                           frame->length - link->frame_filled, &moved);
    if (status != KOLO_OK) {
      link_lost(net, link);
      return 1;
    }
    if (moved == 0) return 1;
    kolo_beat_heard(link);
    link->frame_filled += moved;
  }
  link->frame = NULL;
  frame->next = NULL;
  if (link->frames_tail)
    link->frames_tail->next = frame;
  else
    link->frames_head = frame;
  link->frames_tail = frame;
  return 0;
}

kolo_control_kind kolo_control_classify(const kolo_control_message *m, int from_prev, int size) {
  if (m->magic == KOLO_BEAT_MAGIC) return KOLO_CONTROL_BEAT;
  if (m->magic == KOLO_NEGO_MAGIC && from_prev && (uint32_t)m->status <= KOLO_NEGO_MAX_FRAME)
    return KOLO_CONTROL_FRAME;
  if (m->magic != KOLO_CONTROL_MAGIC) return KOLO_CONTROL_GARBAGE;
  if (m->status == KOLO_OK) return KOLO_CONTROL_GOODBYE;
  /* a failure names a status this library knows and ranks of this ring */
  if (strcmp(kolo_status_name((kolo_status)m->status), "KOLO_ERR_UNKNOWN") == 0 ||
      m->failed_rank < -1 || m->failed_rank >= size || m->origin_rank < 0 || m->origin_rank >= size)
    return KOLO_CONTROL_GARBAGE;
  return KOLO_CONTROL_FAILURE;
}

/* A frame header arrived: starts reading its payload (classified as a frame). */
static int start_frame(kolo_net *net, kolo_control_link *link, const kolo_control_message *header) {
  uint32_t length = (uint32_t)header->status;
  kolo_frame *frame = malloc(sizeof *frame + length);
  if (frame == NULL) {
    kolo_net_fail(net, KOLO_ERR_NO_MEMORY, net->rank, "rank %d: out of memory", net->rank);
    return 1;
  }
  frame->cycle = (uint32_t)header->failed_rank;
  frame->origin = header->origin_rank;
  frame->length = length;
  link->frame = frame;
  link->frame_filled = 0;
  return 1;
}

kolo_frame *kolo_control_take_frame(kolo_control_link *link) {
  kolo_frame *frame = link->frames_head;
  if (frame == NULL) return NULL;
  link->frames_head = frame->next;
  if (link->frames_head == NULL) link->frames_tail = NULL;
  return frame;
}

void kolo_control_link_clear(kolo_control_link *link) {
  free(link->frame);
  link->frame = NULL;
  kolo_frame *frame;
  while ((frame = kolo_control_take_frame(link)) != NULL) free(frame);
}

void kolo_control_service(kolo_net *net, kolo_control_link *link) {
  if (!link->open) return;
  for (;;) {
    if (link->frame != NULL) {
      if (read_frame(net, link)) return;
      continue;
    }
    size_t moved = 0;
    kolo_status status = kolo_channel_recv(&link->channel, (char *)&link->message + link->filled,
                                           sizeof link->message - link->filled, &moved);
    if (status != KOLO_OK) {
      link_lost(net, link);
      return;
    }
    if (moved == 0) return;
    kolo_beat_heard(link);
    link->filled += moved;
    if (link->filled < sizeof link->message) continue;
    link->filled = 0;
    kolo_control_message message = link->message;
    kolo_control_kind kind = kolo_control_classify(&message, link == &net->control[1], net->size);
    if (kind == KOLO_CONTROL_BEAT) { /* alive: that is all it says */
      kolo_beat_received(link);
      continue;
    }
    if (kind == KOLO_CONTROL_FRAME && start_frame(net, link, &message)) continue;
    if (kind == KOLO_CONTROL_GARBAGE) {
      link->open = 0;
      kolo_net_fail(net, KOLO_ERR_PROTOCOL, link->peer_rank,
                    "protocol error: garbage on the control link from rank %d", link->peer_rank);
      return;
    }
    if (kind == KOLO_CONTROL_GOODBYE) {
      /* goodbye: the neighbour finished and closed its communicator. Not a
       * failure by itself: an operation that still needs it sees its data
       * connection close and fails then. */
      link->open = 0;
      KOLO_LOGD("kolo", "rank %d: rank %d closed its communicator", net->rank, link->peer_rank);
      return;
    }
    kolo_status remote = (kolo_status)message.status;
    fail_quietly(net, remote, message.failed_rank, 1, message.origin_rank,
                 "%s: rank %d (reported by rank %d)", kolo_strerror(remote), message.failed_rank,
                 message.origin_rank);
  }
}

kolo_status kolo_net_error(const kolo_net *net, int *failed_rank) {
  if (net == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_net *mutable_net = (kolo_net *)net;
  if (!atomic_load(&mutable_net->failed)) {
    if (failed_rank) *failed_rank = -1;
    return KOLO_OK;
  }
  pthread_mutex_lock(&mutable_net->error_mutex);
  kolo_status status = net->error;
  if (failed_rank) *failed_rank = net->failed_rank;
  pthread_mutex_unlock(&mutable_net->error_mutex);
  return status;
}

void kolo_net_error_message(const kolo_net *net, char *buffer, size_t length) {
  if (buffer == NULL || length == 0) return;
  buffer[0] = '\0';
  if (net == NULL) return;
  kolo_net *mutable_net = (kolo_net *)net;
  if (!atomic_load(&mutable_net->failed)) return;
  pthread_mutex_lock(&mutable_net->error_mutex);
  snprintf(buffer, length, "%s", net->error_message);
  pthread_mutex_unlock(&mutable_net->error_mutex);
}
