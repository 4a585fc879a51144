/* Elastic state and the process side of the agent protocol. A reader thread
 * takes ring announcements from the kolo-worker agent over a unix socket and
 * aborts the current communicator when a newer ring arrives; the training loop
 * commits, restores and re-forms through the kolo_elastic_* calls. A ring in
 * CUDA mode hands its mode to the next one, and state buffers in device memory
 * are committed to host copies with CUDA copies.
 *
 * Agent protocol, one text line per message:
 *   agent -> process  RING <epoch> <rank> <size> <local_rank> <local_size>
 *                          <timeout_ms> <secret|-> <listen_address> <address_0> ... [planned]
 *                     STOP <reason>
 *                     LEAVE <reason>
 * A "planned" ring (a member was drained: nobody failed) does not abort the current
 * communicator: the process goes on to its next commit, where kolo_elastic_commit
 * says KOLO_ERR_RING_CHANGED and the re-form restores that very commit, so no step
 * is redone. LEAVE is the drained member's side: it trains on up to its next commit
 * and stops there (commit answers KOLO_ERR_ABORTED, should_stop turns true), so its
 * peers switch rings at the same commit. (A parser that ignores the trailing
 * "planned" treats the ring as an immediate change, as before.)
 *   process -> agent  HELLO <pid>
 *                     FORMED <epoch> <rank> <size>
 *                     FAILED <epoch> <status_name> <failed_rank>
 *                     REPORT <json object> */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "collective/internal.h"
#include "common/checks.h"
#include "common/log.h"
#include "kolo/elastic.h"

#define MAX_LINE (64 * 1024)
#define MAX_BUFFERS 256

typedef struct ring_announcement {
  uint64_t epoch;
  int rank, size, local_rank, local_size, timeout_ms;
  char *secret;
  char *listen_address;
  char **peers;
  int planned; /* switch at the next commit instead of aborting the current ring */
} ring_announcement;

typedef struct state_buffer {
  void *buffer;
  void *committed; /* host memory, whatever the buffer is */
  size_t bytes;
  int on_device;   /* CUDA device memory: copied with CUDA copies, never memcpy */
} state_buffer;

struct kolo_elastic {
  int agent_fd; /* -1 without an agent */
  pthread_t reader;
  int reader_started;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  kolo_comm *comm;
  ring_announcement *pending; /* newest announced ring not yet formed */
  int stop_requested;
  int leave_requested; /* LEAVE: stop at the next commit */
  int agent_gone;
  int reconfigurations;
  state_buffer buffers[MAX_BUFFERS];
  int buffer_count;
  kolo_elastic_reset_fn reset;
  void *reset_user;
  pthread_mutex_t write_mutex;
  int cuda_device; /* >= 0: the rings are in CUDA mode on this device (carried across re-forms) */
};

static void free_announcement(ring_announcement *ring) {
  if (ring == NULL) return;
  if (ring->peers != NULL) {
    for (int i = 0; i < ring->size; i++) free(ring->peers[i]);
    free(ring->peers);
  }
  free(ring->secret);
  free(ring->listen_address);
  free(ring);
}

/* Parses a RING line (without the keyword); NULL on malformed input. */
static ring_announcement *parse_ring(char *text) {
  ring_announcement *ring = calloc(1, sizeof *ring);
  if (ring == NULL) return NULL;
  char *save = NULL;
  char *fields[8];
  for (int i = 0; i < 8; i++) {
    fields[i] = strtok_r(i == 0 ? text : NULL, " \t", &save);
    if (fields[i] == NULL) goto bad;
  }
  ring->epoch = strtoull(fields[0], NULL, 10);
  ring->rank = atoi(fields[1]);
  ring->size = atoi(fields[2]);
  ring->local_rank = atoi(fields[3]);
  ring->local_size = atoi(fields[4]);
  ring->timeout_ms = atoi(fields[5]);
  if (ring->size < 1 || ring->size > 65536 || ring->rank < 0 || ring->rank >= ring->size) goto bad;
  ring->secret = strdup(strcmp(fields[6], "-") == 0 ? "" : fields[6]);
  ring->listen_address = strdup(fields[7]);
  ring->peers = calloc((size_t)ring->size, sizeof *ring->peers);
  if (ring->secret == NULL || ring->listen_address == NULL || ring->peers == NULL) goto bad;
  for (int i = 0; i < ring->size; i++) {
    char *address = strtok_r(NULL, " \t", &save);
    if (address == NULL) goto bad;
    ring->peers[i] = strdup(address);
    if (ring->peers[i] == NULL) goto bad;
  }
  const char *flag = strtok_r(NULL, " \t", &save);
  ring->planned = flag != NULL && strcmp(flag, "planned") == 0;
  return ring;
bad:
  free_announcement(ring);
  return NULL;
}

static kolo_status send_line(kolo_elastic *elastic, const char *line) {
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

static void handle_line(kolo_elastic *elastic, char *line) {
  if (strncmp(line, "RING ", 5) == 0) {
    ring_announcement *ring = parse_ring(line + 5);
    if (ring == NULL) {
      KOLO_LOGE("elastic", "agent sent a malformed RING line; ignored");
      return;
    }
    pthread_mutex_lock(&elastic->mutex);
    uint64_t newest = elastic->pending ? elastic->pending->epoch
                                       : (elastic->comm ? kolo_comm_epoch(elastic->comm) : 0);
    if (ring->epoch > newest || (elastic->pending == NULL && elastic->comm == NULL)) {
      free_announcement(elastic->pending);
      elastic->pending = ring;
      ring = NULL;
      /* a collective blocked on the old ring must not wait for its timeout; a planned
       * ring waits for the next commit instead */
      if (elastic->comm != NULL && kolo_comm_epoch(elastic->comm) < elastic->pending->epoch &&
          !elastic->pending->planned) {
        kolo_comm_abort(elastic->comm);
      }
      pthread_cond_broadcast(&elastic->cond);
    }
    pthread_mutex_unlock(&elastic->mutex);
    free_announcement(ring);
  } else if (strncmp(line, "LEAVE", 5) == 0) {
    pthread_mutex_lock(&elastic->mutex);
    elastic->leave_requested = 1;
    pthread_cond_broadcast(&elastic->cond); /* a process waiting for a ring leaves now */
    pthread_mutex_unlock(&elastic->mutex);
  } else if (strncmp(line, "STOP", 4) == 0) {
    pthread_mutex_lock(&elastic->mutex);
    elastic->stop_requested = 1;
    if (elastic->comm != NULL) kolo_comm_abort(elastic->comm);
    pthread_cond_broadcast(&elastic->cond);
    pthread_mutex_unlock(&elastic->mutex);
  } else {
    KOLO_LOGW("elastic", "unknown line from the agent: %.40s", line);
  }
}

static void *reader_main(void *argument) {
  kolo_elastic *elastic = argument;
  char *buffer = malloc(MAX_LINE);
  size_t filled = 0;
  while (buffer != NULL) {
    ssize_t n = recv(elastic->agent_fd, buffer + filled, MAX_LINE - 1 - filled, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    filled += (size_t)n;
    char *start = buffer;
    char *newline;
    while ((newline = memchr(start, '\n', filled - (size_t)(start - buffer))) != NULL) {
      *newline = '\0';
      handle_line(elastic, start);
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

/* Waits for a ring newer than the current communicator's and forms it. */
static kolo_status form_next_ring(kolo_elastic *elastic) {
  int64_t deadline = kolo_deadline_after_ms(kolo_timeout_ms_from_env());
  pthread_mutex_lock(&elastic->mutex);
  for (;;) {
    if (elastic->leave_requested) elastic->stop_requested = 1; /* not training now: leave at once */
    if (elastic->stop_requested) {
      pthread_mutex_unlock(&elastic->mutex);
      return KOLO_ERR_ABORTED;
    }
    uint64_t current = elastic->comm ? kolo_comm_epoch(elastic->comm) : 0;
    if (elastic->pending != NULL && (elastic->comm == NULL || elastic->pending->epoch > current)) break;
    int left = kolo_ms_until(deadline);
    if (left == 0) {
      pthread_mutex_unlock(&elastic->mutex);
      KOLO_LOGE("elastic", "no new ring from the agent in time");
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

  kolo_listener *listener = NULL;
  kolo_comm *comm = NULL;
  kolo_status status = KOLO_OK;
  if (ring->size > 1) status = kolo_listener_create(ring->listen_address, &listener);
  if (status == KOLO_OK) {
    kolo_ring_spec spec = {.epoch = ring->epoch, .rank = ring->rank, .size = ring->size,
                           .local_rank = ring->local_rank, .local_size = ring->local_size,
                           .peers = (const char *const *)ring->peers, .secret = ring->secret,
                           .timeout_ms = ring->timeout_ms};
    status = kolo_comm_create(&spec, listener, &comm);
    /* the job re-forms around a silent member: find one fast (beat.c) */
    if (status == KOLO_OK)
      kolo_comm_set_peer_timeout(comm, kolo_peer_timeout_ms_from_env(KOLO_DEFAULT_PEER_TIMEOUT_MS));
  }
  /* a GPU job stays one: device buffers must not reach the TCP ring */
  if (status == KOLO_OK && elastic->cuda_device >= 0) {
    status = kolo_comm_use_cuda(comm, elastic->cuda_device);
    if (status != KOLO_OK) {
      kolo_comm_destroy(comm);
      comm = NULL;
    }
  }
  char line[128];
  if (status == KOLO_OK) {
    snprintf(line, sizeof line, "FORMED %llu %d %d\n", (unsigned long long)ring->epoch, ring->rank,
             ring->size);
  } else {
    snprintf(line, sizeof line, "FAILED %llu %s -1\n", (unsigned long long)ring->epoch,
             kolo_status_name(status));
  }
  send_line(elastic, line);
  pthread_mutex_lock(&elastic->mutex);
  elastic->comm = comm;
  /* a newer ring may have arrived while this one formed */
  if (comm != NULL && elastic->pending != NULL && elastic->pending->epoch > ring->epoch) {
    kolo_comm_abort(comm);
  }
  pthread_mutex_unlock(&elastic->mutex);
  free_announcement(ring);
  return status;
}

static kolo_status connect_agent(const char *path, int *out) {
  struct sockaddr_un address;
  memset(&address, 0, sizeof address);
  address.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof address.sun_path) return KOLO_ERR_ADDRESS;
  strcpy(address.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return kolo_status_from_errno(errno);
  if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
    int error = errno;
    close(fd);
    KOLO_LOGE("elastic", "cannot reach the agent at %s: %s", path, strerror(error));
    return KOLO_ERR_CONNECT;
  }
  *out = fd;
  return KOLO_OK;
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
  KOLO_CHECK_GOTO(connect_agent(agent, &elastic->agent_fd), status, fail);
  char hello[64];
  snprintf(hello, sizeof hello, "HELLO %d\n", (int)getpid());
  KOLO_CHECK_GOTO(send_line(elastic, hello), status, fail);
  if (pthread_create(&elastic->reader, NULL, reader_main, elastic) != 0) {
    status = KOLO_ERR_SYSTEM;
    goto fail;
  }
  elastic->reader_started = 1;
  /* a newer ring may arrive while the first one forms (the job grew or lost a
   * member meanwhile): then form that one, as kolo_elastic_reform would */
  for (;;) {
    status = form_next_ring(elastic);
    if (status == KOLO_OK) break;
    pthread_mutex_lock(&elastic->mutex);
    int newer = elastic->pending != NULL && !elastic->stop_requested;
    pthread_mutex_unlock(&elastic->mutex);
    if (!newer || status == KOLO_ERR_TIMEOUT) goto fail;
    KOLO_LOGW("elastic", "first ring failed (%s); forming the newer one", kolo_strerror(status));
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
    state->on_device = kolo_device_mode(comm, NULL) &&
                       kolo_device_is_device_memory(comm, state->buffer);
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
  KOLO_CHECK(copy_all(elastic, 1));
  pthread_mutex_lock(&elastic->mutex);
  int changed = elastic->pending != NULL && elastic->comm != NULL &&
                elastic->pending->epoch > kolo_comm_epoch(elastic->comm);
  int leave = elastic->leave_requested;
  if (leave) elastic->stop_requested = 1; /* drained: this commit is the last one */
  pthread_mutex_unlock(&elastic->mutex);
  if (leave) return KOLO_ERR_ABORTED;
  return changed ? KOLO_ERR_RING_CHANGED : KOLO_OK;
}

kolo_status kolo_elastic_restore(kolo_elastic *elastic) {
  if (elastic == NULL) return KOLO_ERR_INVALID_ARG;
  return copy_all(elastic, 0);
}

kolo_status kolo_elastic_sync(kolo_elastic *elastic) {
  if (elastic == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_comm *comm = kolo_elastic_comm(elastic);
  for (int i = 0; i < elastic->buffer_count; i++) {
    state_buffer *state = &elastic->buffers[i];
    KOLO_CHECK(kolo_broadcast(comm, state->buffer, state->bytes, KOLO_UINT8, 0));
  }
  return copy_all(elastic, 1);
}

kolo_status kolo_elastic_reform(kolo_elastic *elastic) {
  if (elastic == NULL) return KOLO_ERR_INVALID_ARG;
  if (elastic->agent_fd < 0) return KOLO_ERR_UNSUPPORTED;
  kolo_comm *comm = kolo_elastic_comm(elastic);
  if (comm != NULL) {
    int failed_rank = -1;
    kolo_status error = kolo_comm_error(comm, &failed_rank);
    /* A peer's abort names the peer: it is leaving (e.g. its agent died, which
     * the process notices before its death signal), so report it like a loss.
     * Our own abort (a ring change) names ourselves and is not reported. */
    if (error != KOLO_OK && (error != KOLO_ERR_ABORTED ||
                             (failed_rank >= 0 && failed_rank != kolo_comm_rank(comm)))) {
      char line[128];
      snprintf(line, sizeof line, "FAILED %llu %s %d\n", (unsigned long long)kolo_comm_epoch(comm),
               kolo_status_name(error), failed_rank);
      send_line(elastic, line);
    }
  }
  for (;;) {
    kolo_status status = form_next_ring(elastic);
    if (status == KOLO_OK) {
      kolo_elastic_restore(elastic);
      status = kolo_elastic_sync(elastic);
    }
    if (status == KOLO_OK) break;
    if (status == KOLO_ERR_TIMEOUT || kolo_elastic_should_stop(elastic)) return status;
    /* the new ring failed while forming (another change): wait for the next */
    KOLO_LOGW("elastic", "re-form failed (%s); waiting for the next ring", kolo_strerror(status));
  }
  elastic->reconfigurations++;
  if (elastic->reset != NULL) elastic->reset(elastic, elastic->reset_user);
  return KOLO_OK;
}

kolo_status kolo_elastic_report(kolo_elastic *elastic, const char *json) {
  if (elastic == NULL || json == NULL || strchr(json, '\n') != NULL) return KOLO_ERR_INVALID_ARG;
  if (elastic->agent_fd < 0) return KOLO_OK;
  size_t length = strlen(json) + 9;
  if (length > MAX_LINE) return KOLO_ERR_TOO_LARGE;
  char *line = malloc(length);
  if (line == NULL) return KOLO_ERR_NO_MEMORY;
  snprintf(line, length, "REPORT %s\n", json);
  kolo_status status = send_line(elastic, line);
  free(line);
  return status;
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
  free_announcement(elastic->pending);
  for (int i = 0; i < elastic->buffer_count; i++) free(elastic->buffers[i].committed);
  pthread_mutex_destroy(&elastic->mutex);
  pthread_mutex_destroy(&elastic->write_mutex);
  pthread_cond_destroy(&elastic->cond);
  free(elastic);
}
