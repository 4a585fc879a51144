/* The process's link to its kolo-worker agent (collective/elastic.c's other half): lines
 * sent to the agent, and the reader thread that takes the agent's lines. RING replaces the
 * pending announcement and aborts the current communicator, except for a "planned" ring (no
 * member failed: a drain, a join), which waits for the process's next commit, where
 * kolo_elastic_commit says KOLO_ERR_RING_CHANGED and the re-form restores that very commit, so
 * no step is redone. A planned ring waits at most half the ring's timeout (a newcomer forming
 * it waits up to the whole timeout), and not at all in a process that never committed (a
 * program that does not use kolo.elastic): then the old ring is aborted as for any other ring.
 * STOP and REFUSED abort the communicator; LEAVE stops the process at its next commit;
 * HOLD/RELEASE go to elastic_hold.c. When the agent's socket closes the process stops. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "collective/elastic_hold.h"
#include "collective/elastic_internal.h"
#include "collective/face.h"
#include "common/agent_proto.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/log.h"
#include "kolo/kolo.h"

#define MAX_LINE KOLO_AGENT_MAX_LINE

/* How long a planned ring waits for this process's next commit: half the ring's timeout (0:
 * KOLO_TIMEOUT's, as the formation takes it: elastic.c), so a newcomer forming the new ring
 * (which waits up to the whole timeout) sees it form. */
static int planned_switch_ms(int timeout_ms) {
  return (timeout_ms > 0 ? timeout_ms : kolo_timeout_ms_from_env()) / 2;
}

void kolo_elastic_free_announcement(ring_announcement *ring) {
  if (ring == NULL) return;
  kolo_agent_msg_clear(&ring->msg);
  free(ring);
}

static ring_announcement *announcement_from(kolo_agent_msg *msg) {
  ring_announcement *ring = calloc(1, sizeof *ring);
  if (ring == NULL) return NULL;
  ring->msg = *msg;
  memset(msg, 0, sizeof *msg); /* moved */
  ring->epoch = ring->msg.ring.epoch;
  ring->planned = ring->msg.ring.planned;
  return ring;
}

kolo_status kolo_elastic_send_line(kolo_elastic *elastic, const char *line) {
  if (elastic->agent_fd < 0) return KOLO_OK;
  pthread_mutex_lock(&elastic->write_mutex);
  size_t length = strlen(line), done = 0;
  kolo_status status = KOLO_OK;
  int64_t deadline = kolo_deadline_after_ms(2000);
  while (done < length) {
    ssize_t n = send(elastic->agent_fd, line + done, length - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      struct pollfd pfd = {.fd = elastic->agent_fd, .events = POLLOUT};
      if (kolo_ms_until(deadline) == 0) {
        status = KOLO_ERR_TIMEOUT;
        break;
      }
      poll(&pfd, 1, kolo_ms_until(deadline));
      continue;
    }
    status = KOLO_ERR_PEER_LOST;
    break;
  }
  pthread_mutex_unlock(&elastic->write_mutex);
  return status;
}

/* Formats msg and sends it; a message that cannot be formatted is a bug here. */
kolo_status kolo_elastic_send_msg(kolo_elastic *elastic, const kolo_agent_msg *msg) {
  char *line = NULL, error[256];
  kolo_status status = kolo_agent_msg_format(msg, &line, error, sizeof error);
  if (status != KOLO_OK) {
    KOLO_LOGE("elastic", "cannot send %s to the agent: %s", kolo_agent_verb_name(msg->verb), error);
    return status;
  }
  status = kolo_elastic_send_line(elastic, line);
  free(line);
  return status;
}

static void on_ring(kolo_elastic *elastic, kolo_agent_msg *msg) {
  ring_announcement *ring = announcement_from(msg);
  if (ring == NULL) {
    KOLO_LOGE("elastic", "out of memory for a RING line; ignored");
    return;
  }
  pthread_mutex_lock(&elastic->mutex);
  uint64_t newest = elastic->pending ? elastic->pending->epoch
                                     : (elastic->comm ? kolo_comm_epoch(elastic->comm) : 0);
  if (ring->epoch > newest || (elastic->pending == NULL && elastic->comm == NULL)) {
    kolo_elastic_free_announcement(elastic->pending);
    elastic->pending = ring;
    ring = NULL;
    /* a collective blocked on the old ring must not wait for its timeout; a planned
     * ring waits for the next commit instead, within half the ring's timeout (a newcomer
     * forming it waits for that commit), and not at all in a process that never commits */
    if (elastic->comm != NULL && kolo_comm_epoch(elastic->comm) < elastic->pending->epoch) {
      if (!elastic->pending->planned || elastic->commits == 0)
        kolo_comm_abort(elastic->comm);
      else
        elastic->pending->switch_by_ns =
            kolo_deadline_after_ms(planned_switch_ms(elastic->pending->msg.ring.timeout_ms));
    }
    pthread_cond_broadcast(&elastic->cond);
  }
  pthread_mutex_unlock(&elastic->mutex);
  kolo_elastic_free_announcement(ring);
}

/* STOP, LEAVE or REFUSED: stop training (LEAVE: at the next commit). */
static void on_stop(kolo_elastic *elastic, const kolo_agent_msg *msg) {
  if (msg->verb == KOLO_AGENT_REFUSED)
    KOLO_LOGE("elastic",
              "the agent refused this process: it speaks agent protocol versions %d..%d, this "
              "libkolo speaks %d "
              "(%s)",
              msg->refused.min_version, msg->refused.max_version, KOLO_AGENT_PROTOCOL_VERSION,
              msg->text);
  pthread_mutex_lock(&elastic->mutex);
  if (msg->verb == KOLO_AGENT_LEAVE) {
    elastic->leave_requested = 1;
  } else {
    elastic->stop_requested = 1;
    if (msg->verb == KOLO_AGENT_REFUSED) elastic->refused = 1;
    if (elastic->comm != NULL) kolo_comm_abort(elastic->comm);
  }
  pthread_cond_broadcast(&elastic->cond); /* a process waiting for a ring leaves now */
  pthread_mutex_unlock(&elastic->mutex);
}

static void handle_line(kolo_elastic *elastic, const char *line, size_t length) {
  kolo_agent_msg msg;
  char error[256];
  if (kolo_agent_msg_parse(line, length, KOLO_AGENT_TO_PROCESS, &msg, error, sizeof error) !=
      KOLO_OK) {
    KOLO_LOGE("elastic", "ignored a malformed line from the agent: %s", error);
    return;
  }
  if (msg.verb == KOLO_AGENT_RING)
    on_ring(elastic, &msg);
  else if (msg.verb == KOLO_AGENT_HOLD || msg.verb == KOLO_AGENT_RELEASE)
    kolo_elastic_on_hold(&elastic->mutex, &elastic->held, &elastic->comm, &msg);
  else
    on_stop(elastic, &msg);
  kolo_agent_msg_clear(&msg);
}

/* A planned ring whose switch time passed without a commit: the old ring is aborted (the
 * step in flight is redone, as for any other ring). Returns the next switch time, or 0. */
static int64_t expire_planned(kolo_elastic *elastic) {
  pthread_mutex_lock(&elastic->mutex);
  ring_announcement *ring = elastic->pending;
  int64_t by = ring != NULL && elastic->comm != NULL && kolo_comm_epoch(elastic->comm) < ring->epoch
                   ? ring->switch_by_ns
                   : 0;
  if (by != 0 && kolo_ms_until(by) == 0) {
    KOLO_LOGW(
        "elastic", "no commit within %d ms of planned ring %" PRIu64 ": aborting epoch %" PRIu64,
        planned_switch_ms(ring->msg.ring.timeout_ms), ring->epoch, kolo_comm_epoch(elastic->comm));
    kolo_comm_abort(elastic->comm);
    ring->switch_by_ns = by = 0;
  }
  pthread_mutex_unlock(&elastic->mutex);
  return by;
}

void *kolo_elastic_reader_main(void *argument) {
  kolo_elastic *elastic = argument;
  char *buffer = malloc(MAX_LINE);
  size_t filled = 0;
  while (buffer != NULL) {
    int64_t switch_by = expire_planned(elastic);
    struct pollfd pfd = {.fd = elastic->agent_fd, .events = POLLIN};
    if (switch_by != 0) { /* wait for a line only until the switch time */
      int ready = poll(&pfd, 1, kolo_ms_until(switch_by));
      if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
    }
    ssize_t n = recv(elastic->agent_fd, buffer + filled, MAX_LINE - 1 - filled, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    filled += (size_t)n;
    char *start = buffer;
    char *newline;
    while ((newline = memchr(start, '\n', filled - (size_t)(start - buffer))) != NULL) {
      handle_line(elastic, start, (size_t)(newline - start));
      start = newline + 1;
    }
    filled -= (size_t)(start - buffer);
    memmove(buffer, start, filled);
    if (filled == MAX_LINE - 1) filled = 0; /* an endless line: drop it */
  }
  free(buffer);
  /* the agent is gone (or we are shutting down): never keep training orphaned */
  pthread_mutex_lock(&elastic->mutex);
  elastic->agent_gone = 1;
  elastic->stop_requested = 1;
  if (elastic->comm != NULL) kolo_comm_abort(elastic->comm);
  pthread_cond_broadcast(&elastic->cond);
  pthread_mutex_unlock(&elastic->mutex);
  return NULL;
}
