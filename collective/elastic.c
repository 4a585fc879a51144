/* Elastic state and the training loop's side of a re-form: the kolo_elastic_* calls commit,
 * restore and re-form; collective/elastic_agent.c is the link to the kolo-worker agent (the
 * lines sent to it, and the reader thread that takes ring announcements and aborts the current
 * communicator when a newer ring arrives). A ring in CUDA mode hands its mode to the next one,
 * and state buffers in device memory are committed to host copies with CUDA copies.
 *
 * The lines themselves (HELLO, RING, FORMED, FAILED, REPORT, MODE, STOP, LEAVE,
 * REFUSED, HOLD, RELEASE: elastic_hold.c) are defined, parsed and formatted by common/agent_proto.h
 * only. A "planned" ring (nobody failed: a member was drained, or workers join) does not abort
 * the current communicator: the process goes on to its next commit, where kolo_elastic_commit
 * says KOLO_ERR_RING_CHANGED and the re-form restores that very commit, so no step is redone
 * (within half the ring's timeout: elastic_agent.c). LEAVE is the drained member's side: it
 * trains on up to its next commit and stops there (commit answers KOLO_ERR_ABORTED,
 * should_stop turns true), so its peers switch rings at the same commit. REFUSED (the agent
 * does not speak our protocol version) fails kolo_elastic_create with KOLO_ERR_PROTOCOL.
 *
 * A ring that fails while it forms (a member died, or was not there within the
 * ring's timeout: a newcomer's process still starting, e.g. Python importing
 * torch on a loaded host) is reported FAILED to the agent, and the process waits
 * for the next ring the coordinator announces (a stall re-forms the same
 * members): it stays alive, with its state. Only "no new ring within
 * KOLO_TIMEOUT", a stop or a refusal end kolo_elastic_create / _reform. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "collective/elastic_hold.h"
#include "collective/elastic_internal.h"
#include "collective/face.h"
#include "collective/state_sync.h"
#include "common/agent_proto.h"
#include "common/agent_socket.h"
#include "common/checks.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/log.h"
#include "kolo/elastic.h"
#include "kolo/mode.h"

#define STALE_RETRY_MS 50 /* pause before forming again with a neighbour at another epoch */

/* Whether a ring newer than epoch was announced, or the process must stop. */
static int superseded(void *context, uint64_t epoch) {
  kolo_elastic *elastic = context;
  pthread_mutex_lock(&elastic->mutex);
  int yes = elastic->stop_requested || elastic->leave_requested ||
            (elastic->pending != NULL && elastic->pending->epoch > epoch);
  pthread_mutex_unlock(&elastic->mutex);
  return yes;
}

/* Whether a formation that failed this way may succeed when tried again: a neighbour
 * refused us for being at another epoch, or closed our connection before it answered
 * (it gave up a formation of its own). A neighbour that is not there at all is not
 * among these: the dial already waits for it up to the deadline. */
static int worth_retrying(kolo_status status) {
  return status == KOLO_ERR_STALE_EPOCH || status == KOLO_ERR_CONNECT ||
         status == KOLO_ERR_PEER_LOST;
}

/* Forms ring r. A neighbour at another epoch refuses us (KOLO_ERR_STALE_EPOCH), or drops our
 * connection when its own formation of that epoch fails. One behind us (on, or forming, a ring
 * it has not left yet: two ring changes close together, such as a drain and a join, or two
 * drains) is brought our ring by its agent and comes over, so we dial again within the ring's
 * timeout rather than fail this epoch (a re-form of a ring whose members all live, for nothing).
 * One ahead of us means our ring is replaced: our agent brings the newer one, which ends the
 * retries and the formation under way (form.c asks superseded() every 100 ms), as STOP does. */
/* Where the ring listens: the agent's held listener when it handed us one (KOLO_LISTEN_FD,
 * worker/agent/port.h: the port stays the agent's between epochs, so no one else can listen
 * there), else the ring's address. */
static const char *listen_address(const kolo_agent_ring *r) {
  static __thread char fd_address[32];
  const char *fd = getenv("KOLO_LISTEN_FD");
  if (fd == NULL || fd[0] == '\0') return r->listen_address;
  snprintf(fd_address, sizeof fd_address, "fd:%s", fd);
  return fd_address;
}

static kolo_status create_comm(kolo_elastic *elastic, const kolo_agent_ring *r, kolo_comm **out) {
  int64_t deadline =
      kolo_deadline_after_ms(r->timeout_ms > 0 ? r->timeout_ms : kolo_timeout_ms_from_env());
  for (;;) {
    kolo_listener *listener = NULL;
    int left = kolo_ms_until(deadline);
    kolo_status status = KOLO_OK;
    if (r->size > 1) status = kolo_listener_create(listen_address(r), &listener);
    if (status == KOLO_OK) {
      kolo_ring_spec spec = {.epoch = r->epoch,
                             .rank = r->rank,
                             .size = r->size,
                             .local_rank = r->local_rank,
                             .local_size = r->local_size,
                             .peers = r->peers,
                             .secret = r->secret,
                             .timeout_ms = left > 0 ? left : 1};
      status = kolo_comm_create_superseded(&spec, listener, superseded, elastic, out);
    }
    if (!worth_retrying(status) || kolo_ms_until(deadline) < STALE_RETRY_MS ||
        superseded(elastic, r->epoch))
      return status;
    KOLO_LOGI(
        "elastic",
        "rank %d epoch %llu: not formed (%s): a neighbour is at another epoch; dialling again",
        r->rank, (unsigned long long)r->epoch, kolo_strerror(status));
    pthread_mutex_lock(&elastic->mutex); /* a newer ring or a stop wakes us early */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += STALE_RETRY_MS * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&elastic->cond, &elastic->mutex, &until);
    pthread_mutex_unlock(&elastic->mutex);
  }
}

/* Waits for a ring newer than the current communicator's and forms it.
 * *no_ring is set when none arrived within KOLO_TIMEOUT (KOLO_ERR_TIMEOUT then
 * means that, not a formation that timed out). */
static kolo_status form_next_ring(kolo_elastic *elastic, int *no_ring) {
  int64_t deadline = kolo_deadline_after_ms(kolo_timeout_ms_from_env());
  *no_ring = 0;
  pthread_mutex_lock(&elastic->mutex);
  for (;;) {
    if (elastic->leave_requested) elastic->stop_requested = 1; /* not training now: leave at once */
    if (elastic->stop_requested) {
      kolo_status why = elastic->refused ? KOLO_ERR_PROTOCOL : KOLO_ERR_ABORTED;
      pthread_mutex_unlock(&elastic->mutex);
      return why;
    }
    uint64_t current = elastic->comm ? kolo_comm_epoch(elastic->comm) : 0;
    if (elastic->pending != NULL && (elastic->comm == NULL || elastic->pending->epoch > current))
      break;
    int left = kolo_ms_until(deadline);
    if (left == 0) {
      pthread_mutex_unlock(&elastic->mutex);
      KOLO_LOGE("elastic", "no new ring from the agent in time");
      *no_ring = 1;
      return KOLO_ERR_TIMEOUT;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    int wait_ms = left < 200 ? left : 200;
    until.tv_nsec += (long)wait_ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&elastic->cond, &elastic->mutex, &until);
  }
  ring_announcement *ring = elastic->pending;
  elastic->pending = NULL;
  kolo_comm *old = elastic->comm;
  elastic->comm = NULL;
  int device = -1;
  if (kolo_device_mode(old, &device)) elastic->cuda_device = device;
  pthread_mutex_unlock(&elastic->mutex);
  kolo_comm_destroy(old);

  kolo_comm *comm = NULL;
  const kolo_agent_ring *r = &ring->msg.ring;
  kolo_status status = create_comm(elastic, r, &comm);
  /* the job re-forms around a silent member: find one fast (beat.c) */
  if (status == KOLO_OK)
    kolo_comm_set_peer_timeout(comm, kolo_peer_timeout_ms_from_env(KOLO_DEFAULT_PEER_TIMEOUT_MS));
  /* a GPU job stays one: device buffers must not reach the TCP ring */
  if (status == KOLO_OK && elastic->cuda_device >= 0) {
    status = kolo_comm_use_cuda(comm, elastic->cuda_device);
    if (status != KOLO_OK) {
      kolo_comm_destroy(comm);
      comm = NULL;
    }
  }
  if (status == KOLO_OK) {
    kolo_elastic_send_msg(elastic, &(kolo_agent_msg){.verb = KOLO_AGENT_FORMED,
                                                     .formed = {r->epoch, r->rank, r->size}});
  } else {
    kolo_elastic_send_msg(elastic,
                          &(kolo_agent_msg){.verb = KOLO_AGENT_FAILED,
                                            .failed = {r->epoch, kolo_status_name(status), -1}});
  }
  pthread_mutex_lock(&elastic->mutex);
  elastic->comm = comm;
  kolo_comm_hold(comm, elastic->held); /* a ring formed while held starts held */
  /* a newer ring may have arrived while this one formed */
  if (comm != NULL && elastic->pending != NULL && elastic->pending->epoch > ring->epoch) {
    kolo_comm_abort(comm);
  }
  pthread_mutex_unlock(&elastic->mutex);
  kolo_elastic_free_announcement(ring);
  return status;
}

kolo_status kolo_elastic_create(kolo_elastic **out) {
  if (out == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_elastic *elastic = calloc(1, sizeof *elastic);
  if (elastic == NULL) return KOLO_ERR_NO_MEMORY;
  elastic->agent_fd = -1;
  elastic->cuda_device = -1;
  pthread_mutex_init(&elastic->mutex, NULL);
  pthread_mutex_init(&elastic->write_mutex, NULL);
  pthread_cond_init(&elastic->cond, NULL);
  kolo_status status;
  const char *agent = getenv("KOLO_AGENT_SOCKET");
  if (agent == NULL || *agent == '\0') {
    KOLO_CHECK_GOTO(kolo_comm_create_from_env(&elastic->comm), status, fail);
    *out = elastic;
    return KOLO_OK;
  }
  KOLO_CHECK_GOTO(kolo_agent_connect(agent, &elastic->agent_fd), status, fail);
  KOLO_CHECK_GOTO(kolo_elastic_send_msg(
                      elastic, &(kolo_agent_msg){.verb = KOLO_AGENT_HELLO,
                                                 .hello = {getpid(), KOLO_AGENT_PROTOCOL_VERSION}}),
                  status, fail);
  if (pthread_create(&elastic->reader, NULL, kolo_elastic_reader_main, elastic) != 0) {
    status = KOLO_ERR_SYSTEM;
    goto fail;
  }
  elastic->reader_started = 1;
  /* a newer ring may arrive while the first one forms (the job grew or lost a
   * member meanwhile): then form that one, as kolo_elastic_reform would */
  for (;;) {
    int no_ring = 0;
    status = form_next_ring(elastic, &no_ring);
    if (status == KOLO_OK) break;
    if (no_ring || status == KOLO_ERR_PROTOCOL || kolo_elastic_should_stop(elastic)) goto fail;
    KOLO_LOGW("elastic", "first ring failed (%s); waiting for the next one", kolo_strerror(status));
  }
  *out = elastic;
  return KOLO_OK;
fail:
  kolo_elastic_destroy(elastic);
  return status;
}

kolo_comm *kolo_elastic_comm(kolo_elastic *elastic) {
  if (elastic == NULL) return NULL;
  pthread_mutex_lock(&elastic->mutex);
  kolo_comm *comm = elastic->comm;
  pthread_mutex_unlock(&elastic->mutex);
  return comm;
}

/* Whether a state buffer is device memory. Only asked in CUDA mode (a CPU
 * job never touches CUDA); once device, always device. */
static int state_on_device(kolo_elastic *elastic, state_buffer *state) {
  if (!state->on_device && state->bytes > 0) {
    kolo_comm *comm = kolo_elastic_comm(elastic);
    state->on_device =
        kolo_device_mode(comm, NULL) && kolo_device_is_device_memory(comm, state->buffer);
  }
  return state->on_device;
}

/* Copies one state buffer: with the CUDA runtime for device memory (a host
 * memcpy of device memory faults), memcpy otherwise. */
static kolo_status copy_state(kolo_elastic *elastic, state_buffer *state, int to_committed) {
  if (state->bytes == 0) return KOLO_OK;
  void *dst = to_committed ? state->committed : state->buffer;
  const void *src = to_committed ? state->buffer : state->committed;
  if (state_on_device(elastic, state)) return kolo_device_copy(dst, src, state->bytes);
  memcpy(dst, src, state->bytes);
  return KOLO_OK;
}

static kolo_status copy_all(kolo_elastic *elastic, int to_committed) {
  for (int i = 0; i < elastic->buffer_count; i++)
    KOLO_CHECK(copy_state(elastic, &elastic->buffers[i], to_committed));
  return KOLO_OK;
}

kolo_status kolo_elastic_register(kolo_elastic *elastic, void *buffer, size_t bytes) {
  if (elastic == NULL || (buffer == NULL && bytes > 0)) return KOLO_ERR_INVALID_ARG;
  if (elastic->buffer_count == MAX_BUFFERS) return KOLO_ERR_TOO_LARGE;
  void *committed = malloc(bytes ? bytes : 1);
  if (committed == NULL) return KOLO_ERR_NO_MEMORY;
  state_buffer *state = &elastic->buffers[elastic->buffer_count];
  *state = (state_buffer){buffer, committed, bytes, 0};
  kolo_status status = copy_state(elastic, state, 1);
  if (status != KOLO_OK) {
    free(committed);
    return status;
  }
  elastic->buffer_count++;
  return KOLO_OK;
}

void kolo_elastic_set_reset_callback(kolo_elastic *elastic, kolo_elastic_reset_fn callback,
                                     void *user) {
  if (elastic == NULL) return;
  elastic->reset = callback;
  elastic->reset_user = user;
}

kolo_status kolo_elastic_commit(kolo_elastic *elastic) {
  if (elastic == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(kolo_comm_hold_wait(kolo_elastic_comm(elastic))); /* held: commit nothing yet */
  KOLO_CHECK(copy_all(elastic, 1));
  pthread_mutex_lock(&elastic->mutex);
  elastic->commits++;
  int changed = elastic->pending != NULL && elastic->comm != NULL &&
                elastic->pending->epoch > kolo_comm_epoch(elastic->comm);
  int leave = elastic->leave_requested;
  if (leave) elastic->stop_requested = 1; /* drained: this commit is the last one */
  pthread_mutex_unlock(&elastic->mutex);
  if (leave) return KOLO_ERR_ABORTED;
  return changed ? KOLO_ERR_RING_CHANGED : KOLO_OK;
}

kolo_status kolo_elastic_restore(kolo_elastic *elastic) {
  return elastic == NULL ? KOLO_ERR_INVALID_ARG : copy_all(elastic, 0);
}

/* Rank 0's state (state_sync.h), committed; restored (a re-form): only what changed. */
static kolo_status sync_state(kolo_elastic *elastic, int restored) {
  int count = elastic->buffer_count, device = 0;
  uint8_t got[MAX_BUFFERS]; /* the buffers this rank received */
  for (int i = 0; i < count; i++) device |= state_on_device(elastic, &elastic->buffers[i]);
  KOLO_CHECK(kolo_state_sync(kolo_elastic_comm(elastic), elastic->buffers, count, device, got));
  for (int i = 0; i < count; i++)
    if (!restored || got[i]) KOLO_CHECK(copy_state(elastic, &elastic->buffers[i], 1));
  return KOLO_OK;
}

kolo_status kolo_elastic_sync(kolo_elastic *elastic) {
  return elastic == NULL ? KOLO_ERR_INVALID_ARG : sync_state(elastic, 0);
}

/* kolo_elastic_sync's transfer for a caller's own buffers (state_sync.h does the work). */
kolo_status kolo_sync_buffers(kolo_comm *comm, void *const *buffers, const size_t *bytes, int count,
                              uint8_t *received) {
  if (comm == NULL || count < 0 || (count > 0 && (buffers == NULL || bytes == NULL)))
    return KOLO_ERR_INVALID_ARG;
  if (count == 0) return KOLO_OK;
  kolo_state_buffer *states = calloc((size_t)count, sizeof *states);
  uint8_t *got = received != NULL ? received : malloc((size_t)count);
  kolo_status status = states && got ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  for (int i = 0; status == KOLO_OK && i < count; i++) {
    if (buffers[i] == NULL && bytes[i] > 0) status = KOLO_ERR_INVALID_ARG;
    states[i] = (kolo_state_buffer){.buffer = buffers[i], .bytes = bytes[i]};
  }
  if (status == KOLO_OK) status = kolo_state_sync(comm, states, count, 0, got);
  free(states);
  if (got != received) free(got);
  return status;
}

/* Tells the agent how the current ring failed, if it did. A peer's abort names
 * the peer: it is leaving (e.g. its agent died, which the process notices before
 * its death signal), so it is reported like a loss. Our own abort (a ring
 * change) names ourselves and is not reported. */
static void report_ring_failure(kolo_elastic *elastic) {
  kolo_comm *comm = kolo_elastic_comm(elastic);
  if (comm == NULL) return;
  int failed_rank = -1;
  kolo_status error = kolo_comm_error(comm, &failed_rank);
  if (error != KOLO_OK &&
      (error != KOLO_ERR_ABORTED || (failed_rank >= 0 && failed_rank != kolo_comm_rank(comm))))
    kolo_elastic_send_msg(
        elastic,
        &(kolo_agent_msg){.verb = KOLO_AGENT_FAILED,
                          .failed = {kolo_comm_epoch(comm), kolo_status_name(error), failed_rank}});
}

kolo_status kolo_elastic_reform(kolo_elastic *elastic) {
  if (elastic == NULL) return KOLO_ERR_INVALID_ARG;
  if (elastic->agent_fd < 0) return KOLO_ERR_UNSUPPORTED;
  report_ring_failure(elastic);
  for (;;) {
    int no_ring = 0;
    kolo_status status = form_next_ring(elastic, &no_ring);
    if (status == KOLO_OK) {
      status = kolo_elastic_restore(elastic);
      if (status == KOLO_OK) status = sync_state(elastic, 1);
      if (status != KOLO_OK) report_ring_failure(elastic); /* formed, then failed in the sync */
    }
    if (status == KOLO_OK) break;
    if (no_ring || kolo_elastic_should_stop(elastic)) return status;
    /* the new ring failed while forming or syncing (another change, or a member not
     * there in time): FAILED went to the agent; wait for the next */
    KOLO_LOGW("elastic", "re-form failed (%s); waiting for the next ring", kolo_strerror(status));
  }
  elastic->reconfigurations++;
  if (elastic->reset != NULL) elastic->reset(elastic, elastic->reset_user);
  return KOLO_OK;
}

kolo_status kolo_elastic_report(kolo_elastic *elastic, const char *json) {
  if (elastic == NULL || json == NULL || strchr(json, '\n') != NULL) return KOLO_ERR_INVALID_ARG;
  if (elastic->agent_fd < 0) return KOLO_OK;
  if (strlen(json) + 8 >= KOLO_AGENT_MAX_LINE) return KOLO_ERR_TOO_LARGE;
  kolo_agent_msg msg = {.verb = KOLO_AGENT_REPORT, .text = json};
  char *line = NULL, error[256];
  kolo_status status = kolo_agent_msg_format(&msg, &line, error, sizeof error);
  if (status != KOLO_OK) {
    KOLO_LOGW("elastic", "report refused: %s", error); /* e.g. not an object, a control byte */
    return status;
  }
  status = kolo_elastic_send_line(elastic, line);
  free(line);
  return status;
}

/* MODE <name> (agent protocol version 3): the job's mode check is the agent's. */
kolo_status kolo_elastic_acknowledge_mode(kolo_elastic *elastic, kolo_mode mode) {
  if (elastic == NULL || mode < KOLO_MODE_SYNC || mode > KOLO_MODE_DILOCO)
    return KOLO_ERR_INVALID_ARG;
  if (elastic->agent_fd < 0) return KOLO_OK;
  return kolo_elastic_send_msg(elastic,
                               &(kolo_agent_msg){.verb = KOLO_AGENT_MODE, .mode = {(int)mode}});
}

int kolo_elastic_should_stop(kolo_elastic *elastic) {
  if (elastic == NULL) return 1;
  pthread_mutex_lock(&elastic->mutex);
  int stop = elastic->stop_requested;
  pthread_mutex_unlock(&elastic->mutex);
  return stop;
}

int kolo_elastic_reconfigurations(const kolo_elastic *elastic) {
  return elastic ? elastic->reconfigurations : 0;
}

void kolo_elastic_destroy(kolo_elastic *elastic) {
  if (elastic == NULL) return;
  pthread_mutex_lock(&elastic->mutex);
  kolo_comm *comm = elastic->comm;
  elastic->comm = NULL; /* the reader thread must not abort it while it closes */
  pthread_mutex_unlock(&elastic->mutex);
  kolo_comm_destroy(comm);
  if (elastic->agent_fd >= 0) shutdown(elastic->agent_fd, SHUT_RDWR);
  if (elastic->reader_started) pthread_join(elastic->reader, NULL);
  if (elastic->agent_fd >= 0) close(elastic->agent_fd);
  kolo_elastic_free_announcement(elastic->pending);
  for (int i = 0; i < elastic->buffer_count; i++) free(elastic->buffers[i].committed);
  pthread_mutex_destroy(&elastic->mutex);
  pthread_mutex_destroy(&elastic->write_mutex);
  pthread_cond_destroy(&elastic->cond);
  free(elastic);
}
