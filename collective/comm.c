/* Communicators: forming the ring (connect to the next rank, accept from the
 * previous one, a handshake on every connection), the engine thread that runs
 * non-blocking requests and watches the control links, failure propagation,
 * abort, and the public collective entry points. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "collective/internal.h"
#include "collective/transport_shm.h"
#include "common/checks.h"
#include "common/log.h"

#define HELLO_MAGIC 0x4b4f4c4fu /* "KOLO" */
#define ACK_MAGIC 0x4b41434bu   /* "KACK" */
#define PROTOCOL_VERSION 1
#define MAX_SECRET_BYTES 1024
#define DEFAULT_SEGMENT_BYTES (256 * 1024)
#define DEFAULT_SMALL_BYTES (32 * 1024)
/* operations from this size on stream through shared memory (same-host neighbours) */
#define DEFAULT_SHM_MIN_BYTES (256 * 1024)

/* ---- failure ---- */

static void send_control(kolo_comm *comm, const kolo_control_message *message, int skip_rank) {
  for (int i = 0; i < 2; i++) {
    kolo_control_link *link = &comm->control[i];
    if (link->conn == NULL || link->peer_rank == skip_rank) continue;
    size_t moved = 0;
    /* best effort, never blocks: 16 bytes always fit an idle socket buffer */
    comm->transport->send(link->conn, message, sizeof *message, &moved);
  }
}

static void record_failure(kolo_comm *comm, kolo_status status, int failed_rank, int propagate,
                           int origin_rank, kolo_log_level level, const char *fmt, va_list args) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&comm->failed, &expected, 1)) return;
  pthread_mutex_lock(&comm->error_mutex);
  comm->error = status;
  comm->failed_rank = failed_rank;
  vsnprintf(comm->error_message, sizeof comm->error_message, fmt, args);
  pthread_mutex_unlock(&comm->error_mutex);
  kolo_log(level, "kolo", "rank %d epoch %llu: %s", comm->rank, (unsigned long long)comm->epoch,
           comm->error_message);
  uint64_t one = 1;
  ssize_t ignored = write(comm->fail_fd, &one, sizeof one);
  ignored = write(comm->wake_fd, &one, sizeof one);
  (void)ignored;
  if (propagate && comm->size > 1) {
    kolo_control_message message = {.magic = KOLO_CONTROL_MAGIC,
                                    .status = (int32_t)status,
                                    .failed_rank = failed_rank,
                                    .origin_rank = origin_rank};
    send_control(comm, &message, failed_rank);
  }
}

void kolo_comm_fail(kolo_comm *comm, kolo_status status, int failed_rank, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  record_failure(comm, status, failed_rank, 1, comm->rank, KOLO_LOG_WARN, fmt, args);
  va_end(args);
}

static void fail_quietly(kolo_comm *comm, kolo_status status, int failed_rank, int propagate,
                         int origin_rank, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  record_failure(comm, status, failed_rank, propagate, origin_rank, KOLO_LOG_INFO, fmt, args);
  va_end(args);
}

void kolo_control_service(kolo_comm *comm, kolo_control_link *link) {
  if (!link->open) return;
  for (;;) {
    size_t moved = 0;
    kolo_status status = comm->transport->recv(
        link->conn, (char *)&link->message + link->filled, sizeof link->message - link->filled,
        &moved);
    if (status != KOLO_OK) {
      link->open = 0;
      kolo_comm_fail(comm, KOLO_ERR_PEER_LOST, link->peer_rank,
                     "peer lost: rank %d (connection closed)", link->peer_rank);
      return;
    }
    if (moved == 0) return;
    link->filled += moved;
    if (link->filled < sizeof link->message) continue;
    link->filled = 0;
    kolo_control_message message = link->message;
    if (message.magic != KOLO_CONTROL_MAGIC) {
      link->open = 0;
      kolo_comm_fail(comm, KOLO_ERR_PROTOCOL, link->peer_rank,
                     "protocol error: garbage on the control link from rank %d", link->peer_rank);
      return;
    }
    if (message.status == KOLO_OK) {
      /* goodbye: the neighbour finished and closed its communicator. Not a
       * failure by itself: an operation that still needs it sees its data
       * connection close and fails then. */
      link->open = 0;
      KOLO_LOGD("kolo", "rank %d: rank %d closed its communicator", comm->rank, link->peer_rank);
      return;
    }
    kolo_status remote = (kolo_status)message.status;
    fail_quietly(comm, remote, message.failed_rank, 1, message.origin_rank,
                 "%s: rank %d (reported by rank %d)", kolo_strerror(remote), message.failed_rank,
                 message.origin_rank);
  }
}

/* ---- handshake ---- */

kolo_status kolo_handshake_send_hello(kolo_comm *comm, kolo_transport_conn *conn, int kind,
                                      const kolo_shm_offer *offer, int64_t deadline_ns) {
  uint8_t hello[28 + MAX_SECRET_BYTES + 12 + KOLO_SHM_NAME_BYTES];
  size_t secret_length = strlen(comm->secret);
  const char *shm_name = offer ? kolo_shm_offer_name(offer) : "";
  size_t name_length = strlen(shm_name);
  uint64_t nonce = offer ? kolo_shm_offer_nonce(offer) : 0;
  kolo_put32(hello, HELLO_MAGIC);
  kolo_put32(hello + 4, ((uint32_t)PROTOCOL_VERSION << 16) | (uint32_t)kind);
  kolo_put32(hello + 8, (uint32_t)(comm->epoch >> 32));
  kolo_put32(hello + 12, (uint32_t)comm->epoch);
  kolo_put32(hello + 16, (uint32_t)comm->rank);
  kolo_put32(hello + 20, (uint32_t)comm->size);
  kolo_put32(hello + 24, (uint32_t)secret_length);
  memcpy(hello + 28, comm->secret, secret_length);
  uint8_t *tail = hello + 28 + secret_length;
  kolo_put32(tail, (uint32_t)name_length);
  kolo_put32(tail + 4, (uint32_t)(nonce >> 32));
  kolo_put32(tail + 8, (uint32_t)nonce);
  memcpy(tail + 12, shm_name, name_length);
  return kolo_transport_send_all(comm->transport, conn, hello,
                                 28 + secret_length + 12 + name_length, deadline_ns);
}

kolo_status kolo_handshake_read_ack(kolo_comm *comm, kolo_transport_conn *conn, int *shm_taken,
                                    int64_t deadline_ns) {
  uint8_t ack[12];
  kolo_status status = kolo_transport_recv_all(comm->transport, conn, ack, sizeof ack, deadline_ns);
  if (status == KOLO_ERR_PEER_LOST) status = KOLO_ERR_CONNECT;
  if (status != KOLO_OK) return status;
  if (kolo_get32(ack) != ACK_MAGIC) return KOLO_ERR_PROTOCOL;
  if (shm_taken != NULL) *shm_taken = kolo_get32(ack + 8) == 1;
  return (kolo_status)kolo_get32(ack + 4);
}

static int secrets_equal(const char *a, size_t a_length, const char *b, size_t b_length) {
  unsigned difference = (unsigned)(a_length ^ b_length);
  for (size_t i = 0; i < a_length && i < b_length; i++) difference |= (unsigned)(a[i] ^ b[i]);
  return difference == 0;
}

kolo_status kolo_handshake_accept(kolo_comm *comm, kolo_transport_conn **connection,
                                  int expected_rank, int *kind, int64_t deadline_ns) {
  kolo_transport_conn *conn = *connection;
  /* a stranger gets at most one second to introduce itself */
  int64_t short_deadline = kolo_deadline_after_ms(1000);
  if (short_deadline > deadline_ns) short_deadline = deadline_ns;
  uint8_t header[28];
  kolo_status status =
      kolo_transport_recv_all(comm->transport, conn, header, sizeof header, short_deadline);
  if (status != KOLO_OK) return status == KOLO_ERR_TIMEOUT ? KOLO_ERR_PROTOCOL : status;
  kolo_status verdict = KOLO_OK;
  uint32_t version_kind = kolo_get32(header + 4);
  uint64_t epoch = ((uint64_t)kolo_get32(header + 8) << 32) | kolo_get32(header + 12);
  int rank = (int)kolo_get32(header + 16), size = (int)kolo_get32(header + 20);
  uint32_t secret_length = kolo_get32(header + 24);
  char secret[MAX_SECRET_BYTES];
  if (kolo_get32(header) != HELLO_MAGIC || (version_kind >> 16) != PROTOCOL_VERSION ||
      secret_length > MAX_SECRET_BYTES) {
    KOLO_LOGW("kolo", "rank %d: refused a connection: not a kolo hello", comm->rank);
    return KOLO_ERR_PROTOCOL; /* not worth an answer */
  }
  status = kolo_transport_recv_all(comm->transport, conn, secret, secret_length, short_deadline);
  uint8_t offer[12];
  char shm_name[KOLO_SHM_NAME_BYTES + 1] = "";
  if (status == KOLO_OK) status = kolo_transport_recv_all(comm->transport, conn, offer, 12, short_deadline);
  uint32_t name_length = status == KOLO_OK ? kolo_get32(offer) : 0;
  if (status == KOLO_OK && name_length > KOLO_SHM_NAME_BYTES) status = KOLO_ERR_PROTOCOL;
  if (status == KOLO_OK) {
    status = kolo_transport_recv_all(comm->transport, conn, shm_name, name_length, short_deadline);
    shm_name[name_length] = '\0';
  }
  if (status != KOLO_OK) return KOLO_ERR_PROTOCOL;
  *kind = (int)(version_kind & 0xffffu);
  if (!secrets_equal(secret, secret_length, comm->secret, strlen(comm->secret))) {
    verdict = KOLO_ERR_AUTH;
    KOLO_LOGW("kolo", "rank %d epoch %llu: refused a connection from rank %d: wrong secret",
              comm->rank, (unsigned long long)comm->epoch, rank);
  } else if (epoch != comm->epoch) {
    verdict = KOLO_ERR_STALE_EPOCH;
    KOLO_LOGW("kolo", "rank %d epoch %llu: refused a connection from rank %d of epoch %llu",
              comm->rank, (unsigned long long)comm->epoch, rank, (unsigned long long)epoch);
  } else if (size != comm->size || rank != expected_rank ||
             (*kind != KOLO_CONNECTION_DATA && *kind != KOLO_CONNECTION_CONTROL &&
              *kind != KOLO_CONNECTION_BELL)) {
    verdict = KOLO_ERR_PROTOCOL;
    KOLO_LOGW("kolo", "rank %d: refused a connection claiming rank %d of %d (want rank %d of %d)",
              comm->rank, rank, size, expected_rank, comm->size);
  }
  uint32_t shm_taken = 0;
  kolo_transport_conn *shared = NULL;
  if (verdict == KOLO_OK && *kind == KOLO_CONNECTION_BELL && name_length > 0) {
    uint64_t nonce = ((uint64_t)kolo_get32(offer + 4) << 32) | kolo_get32(offer + 8);
    shm_taken = kolo_shm_accept(shm_name, nonce, conn, &shared) == KOLO_OK;
  }
  uint8_t ack[12];
  kolo_put32(ack, ACK_MAGIC);
  kolo_put32(ack + 4, (uint32_t)verdict);
  kolo_put32(ack + 8, shm_taken);
  kolo_transport_send_all(comm->transport, conn, ack, sizeof ack, short_deadline);
  if (shm_taken) *connection = shared;
  return verdict;
}

/* ---- listeners ---- */

kolo_status kolo_listener_create(const char *bind_address, kolo_listener **out) {
  if (bind_address == NULL || out == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_listener *listener = calloc(1, sizeof *listener);
  if (listener == NULL) return KOLO_ERR_NO_MEMORY;
  listener->transport = &kolo_transport_tcp;
  kolo_status status = listener->transport->listen(bind_address, &listener->listener);
  if (status != KOLO_OK) {
    free(listener);
    return status;
  }
  *out = listener;
  return KOLO_OK;
}

kolo_status kolo_listener_address(const kolo_listener *listener, char *buffer, size_t length) {
  if (listener == NULL || buffer == NULL) return KOLO_ERR_INVALID_ARG;
  return listener->transport->listener_address(listener->listener, buffer, length);
}

void kolo_listener_destroy(kolo_listener *listener) {
  if (listener == NULL) return;
  listener->transport->close_listener(listener->listener);
  free(listener);
}

/* ---- creation ---- */

static size_t size_from_env(const char *name, size_t fallback) {
  const char *value = getenv(name);
  if (value == NULL || *value == '\0') return fallback;
  char *end = NULL;
  unsigned long long parsed = strtoull(value, &end, 10);
  if (end == value || parsed == 0) return fallback;
  if (*end == 'K' || *end == 'k') parsed *= 1024ULL;
  if (*end == 'M' || *end == 'm') parsed *= 1024ULL * 1024ULL;
  return (size_t)parsed;
}

int kolo_timeout_ms_from_env(void) {
  const char *value = getenv("KOLO_TIMEOUT");
  if (value == NULL || *value == '\0') return KOLO_DEFAULT_TIMEOUT_MS;
  char *end = NULL;
  double seconds = strtod(value, &end);
  if (end == value || seconds <= 0) return KOLO_DEFAULT_TIMEOUT_MS;
  return (int)(seconds * 1000.0);
}

static void free_comm(kolo_comm *comm) {
  if (comm->peers != NULL) {
    for (int i = 0; i < comm->size; i++) free(comm->peers[i]);
    free(comm->peers);
  }
  free(comm->secret);
  if (comm->transport != NULL) {
    comm->transport->close(comm->data_next);
    comm->transport->close(comm->data_prev);
    kolo_transport_shm.close(comm->shm_next);
    kolo_transport_shm.close(comm->shm_prev);
    comm->transport->close(comm->control[0].conn);
    comm->transport->close(comm->control[1].conn);
  }
  if (comm->wake_fd >= 0) close(comm->wake_fd);
  if (comm->fail_fd >= 0) close(comm->fail_fd);
  while (comm->free_requests != NULL) {
    kolo_request *request = comm->free_requests;
    comm->free_requests = request->next;
    free(request);
  }
  free(comm->staging);
  free(comm->scratch);
  free(comm->counts);
  free(comm->block_offsets);
  free(comm->block_bytes);
  free(comm->plan.sends);
  free(comm->plan.recvs);
  free(comm->plan.processed);
  pthread_mutex_destroy(&comm->mutex);
  pthread_mutex_destroy(&comm->error_mutex);
  pthread_cond_destroy(&comm->cond);
  free(comm);
}

static kolo_status validate_spec(const kolo_ring_spec *spec) {
  if (spec == NULL || spec->size < 1 || spec->rank < 0 || spec->rank >= spec->size) {
    KOLO_LOGE("kolo", "ring spec: need 0 <= rank < size");
    return KOLO_ERR_INVALID_ARG;
  }
  if (spec->secret != NULL && strlen(spec->secret) > MAX_SECRET_BYTES) {
    KOLO_LOGE("kolo", "ring spec: secret longer than %d bytes", MAX_SECRET_BYTES);
    return KOLO_ERR_INVALID_ARG;
  }
  if (spec->size > 1) {
    if (spec->peers == NULL) {
      KOLO_LOGE("kolo", "ring spec: peers missing");
      return KOLO_ERR_INVALID_ARG;
    }
    for (int i = 0; i < spec->size; i++) {
      if (spec->peers[i] == NULL || spec->peers[i][0] == '\0') {
        KOLO_LOGE("kolo", "ring spec: address of rank %d missing", i);
        return KOLO_ERR_INVALID_ARG;
      }
    }
  }
  return KOLO_OK;
}

static void *engine_main(void *argument);

static kolo_status allocate_comm(const kolo_ring_spec *spec, kolo_comm **out) {
  kolo_comm *comm = calloc(1, sizeof *comm);
  if (comm == NULL) return KOLO_ERR_NO_MEMORY;
  comm->wake_fd = -1;
  comm->fail_fd = -1;
  pthread_mutex_init(&comm->mutex, NULL);
  pthread_mutex_init(&comm->error_mutex, NULL);
  pthread_cond_init(&comm->cond, NULL);
  atomic_init(&comm->failed, 0);
  comm->epoch = spec->epoch;
  comm->rank = spec->rank;
  comm->size = spec->size;
  comm->local_rank = spec->local_size > 0 ? spec->local_rank : spec->rank;
  comm->local_size = spec->local_size > 0 ? spec->local_size : spec->size;
  comm->timeout_ms = spec->timeout_ms > 0 ? spec->timeout_ms : kolo_timeout_ms_from_env();
  comm->transport = &kolo_transport_tcp;
  comm->shm_min_bytes = size_from_env("KOLO_SHM_MIN_BYTES", DEFAULT_SHM_MIN_BYTES);
  comm->failed_rank = -1;
  comm->segment_bytes = size_from_env("KOLO_SEGMENT_BYTES", DEFAULT_SEGMENT_BYTES);
  comm->small_bytes = size_from_env("KOLO_SMALL_BYTES", DEFAULT_SMALL_BYTES);
  if (comm->segment_bytes < 64) comm->segment_bytes = 64;
  comm->secret = strdup(spec->secret ? spec->secret : "");
  size_t n = (size_t)spec->size;
  comm->peers = calloc(n, sizeof *comm->peers);
  comm->counts = calloc(n, sizeof *comm->counts);
  comm->block_offsets = calloc(n, sizeof *comm->block_offsets);
  comm->block_bytes = calloc(n, sizeof *comm->block_bytes);
  comm->plan.sends = calloc(2 * n, sizeof *comm->plan.sends);
  comm->plan.recvs = calloc(2 * n, sizeof *comm->plan.recvs);
  comm->plan.processed = calloc(2 * n, sizeof *comm->plan.processed);
  comm->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  comm->fail_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (comm->secret == NULL || comm->peers == NULL || comm->counts == NULL ||
      comm->block_offsets == NULL || comm->block_bytes == NULL || comm->plan.sends == NULL ||
      comm->plan.recvs == NULL || comm->plan.processed == NULL || comm->wake_fd < 0 ||
      comm->fail_fd < 0 ||
      posix_memalign((void **)&comm->staging, 64, comm->segment_bytes) != 0) {
    comm->staging = NULL;
    free_comm(comm);
    return KOLO_ERR_NO_MEMORY;
  }
  memset(comm->staging, 0, comm->segment_bytes);
  comm->staging_bytes = comm->segment_bytes;
  for (int i = 0; i < spec->size && spec->peers != NULL; i++) {
    comm->peers[i] = strdup(spec->peers[i] ? spec->peers[i] : "");
    if (comm->peers[i] == NULL) {
      free_comm(comm);
      return KOLO_ERR_NO_MEMORY;
    }
  }
  if (spec->nccl_id != NULL) {
    memcpy(comm->nccl_id, spec->nccl_id, KOLO_NCCL_ID_BYTES);
    comm->has_nccl_id = 1;
  }
  *out = comm;
  return KOLO_OK;
}

/* Connects three connections to the next rank (data, control, and the doorbell
 * of a shared-memory ring offered on it), accepts the same three from the
 * previous one, and checks every handshake; strangers (wrong secret, other
 * epoch) are refused and the accept loop goes on until the deadline. */
static kolo_status form_ring(kolo_comm *comm, kolo_listener *listener) {
  int n = comm->size;
  int next = (comm->rank + 1) % n, prev = (comm->rank + n - 1) % n;
  int64_t deadline = kolo_deadline_after_ms(comm->timeout_ms);
  const kolo_transport_ops *tp = comm->transport;
  kolo_status status = KOLO_OK;
  static const int kinds[3] = {KOLO_CONNECTION_DATA, KOLO_CONNECTION_CONTROL, KOLO_CONNECTION_BELL};
  kolo_transport_conn *outgoing[3] = {NULL, NULL, NULL};
  kolo_transport_conn *incoming[3] = {NULL, NULL, NULL};
  kolo_shm_offer *offer = NULL;
  int acked[3] = {0, 0, 0};
  int shm_given = 0;

  if (kolo_shm_enabled() && kolo_shm_offer_create(&offer) != KOLO_OK) offer = NULL;
  for (int i = 0; i < 3 && status == KOLO_OK; i++) {
    status = tp->connect(comm->peers[next], deadline, &outgoing[i]);
    if (status == KOLO_OK) {
      status = kolo_handshake_send_hello(comm, outgoing[i], kinds[i], i == 2 ? offer : NULL,
                                         deadline);
    }
  }
  if (status != KOLO_OK) {
    KOLO_LOGE("kolo", "rank %d epoch %llu: cannot reach rank %d at %s: %s", comm->rank,
              (unsigned long long)comm->epoch, next, comm->peers[next], kolo_strerror(status));
    goto out;
  }
  /* accept from the previous rank while watching our own outgoing connections:
   * a refusal (wrong secret, other epoch) must end this call at once, not after
   * the timeout spent waiting for a neighbour that will never dial us */
  for (;;) {
    int accepting = incoming[0] == NULL || incoming[1] == NULL || incoming[2] == NULL;
    if (!accepting && acked[0] && acked[1] && acked[2]) break;
    struct pollfd fds[4];
    fds[0] = (struct pollfd){.fd = accepting ? tp->listener_poll_fd(listener->listener) : -1,
                             .events = POLLIN};
    for (int i = 0; i < 3; i++) {
      fds[1 + i] = (struct pollfd){.fd = acked[i] ? -1 : tp->poll_fd(outgoing[i]), .events = POLLIN};
    }
    int wait_ms = kolo_ms_until(deadline);
    if (wait_ms == 0) {
      status = KOLO_ERR_TIMEOUT;
      KOLO_LOGE("kolo", "rank %d epoch %llu: ring not formed in time (rank %d %s)", comm->rank,
                (unsigned long long)comm->epoch, accepting ? prev : next,
                accepting ? "did not connect" : "did not answer");
      goto out;
    }
    if (poll(fds, 4, wait_ms) <= 0) continue;
    for (int i = 0; i < 3; i++) {
      if (fds[1 + i].revents == 0) continue;
      int shm_taken = 0;
      status = kolo_handshake_read_ack(comm, outgoing[i], &shm_taken, deadline);
      if (status != KOLO_OK) {
        KOLO_LOGE("kolo", "rank %d epoch %llu: rank %d refused us: %s", comm->rank,
                  (unsigned long long)comm->epoch, next, kolo_strerror(status));
        goto out;
      }
      acked[i] = 1;
      if (i == 2 && shm_taken && offer != NULL) shm_given = 1;
    }
    if (fds[0].revents == 0) continue;
    kolo_transport_conn *conn = NULL;
    status = tp->accept(listener->listener, kolo_deadline_after_ms(0), &conn);
    if (status == KOLO_ERR_TIMEOUT) continue;
    if (status != KOLO_OK) goto out;
    int kind = 0;
    kolo_transport_conn *accepted = conn;
    status = kolo_handshake_accept(comm, &accepted, prev, &kind, deadline);
    int slot = kind - KOLO_CONNECTION_DATA;
    if (status == KOLO_OK && slot >= 0 && slot < 3 && incoming[slot] == NULL) {
      if (accepted != conn) {
        comm->shm_prev = accepted; /* a ring we mapped: its bell is this connection */
        incoming[slot] = accepted;
      } else {
        incoming[slot] = conn;
      }
    } else if (accepted != conn) {
      kolo_transport_shm.close(accepted); /* a duplicate that mapped a ring */
    } else {
      tp->close(conn); /* refused stranger or duplicate: changes nothing */
    }
    status = KOLO_OK;
  }
  comm->data_next = outgoing[0];
  comm->data_prev = incoming[0];
  comm->control[0] = (kolo_control_link){.conn = outgoing[1], .peer_rank = next, .open = 1};
  comm->control[1] = (kolo_control_link){.conn = incoming[1], .peer_rank = prev, .open = 1};
  outgoing[0] = outgoing[1] = incoming[0] = incoming[1] = NULL;
  if (shm_given) {
    status = kolo_shm_offer_accepted(offer, outgoing[2], &comm->shm_next);
    offer = NULL;
    if (status != KOLO_OK) goto out;
    outgoing[2] = NULL;
  }
  if (comm->shm_prev != NULL) incoming[2] = NULL; /* owned by shm_prev */
  status = KOLO_OK;
out:
  kolo_shm_offer_destroy(offer); /* not taken (another host): TCP only */
  for (int i = 0; i < 3; i++) {
    tp->close(outgoing[i]);
    if (incoming[i] != comm->shm_prev) tp->close(incoming[i]);
  }
  return status;
}

kolo_status kolo_comm_create(const kolo_ring_spec *spec, kolo_listener *listener,
                             kolo_comm **out) {
  kolo_comm *comm = NULL;
  kolo_status status = out == NULL ? KOLO_ERR_INVALID_ARG : validate_spec(spec);
  if (status != KOLO_OK) goto out;
  status = allocate_comm(spec, &comm);
  if (status != KOLO_OK) goto out;
  if (comm->size > 1) {
    if (listener == NULL) {
      status = kolo_listener_create(comm->peers[comm->rank], &listener);
      if (status != KOLO_OK) goto out;
    }
    status = form_ring(comm, listener);
    if (status != KOLO_OK) goto out;
  }
  if (pthread_create(&comm->engine, NULL, engine_main, comm) != 0) {
    status = KOLO_ERR_SYSTEM;
    goto out;
  }
  comm->engine_started = 1;
  KOLO_LOGD("kolo", "rank %d of %d joined the ring at epoch %llu (shared memory out: %s, in: %s)",
            comm->rank, comm->size, (unsigned long long)comm->epoch,
            comm->shm_next ? "yes" : "no", comm->shm_prev ? "yes" : "no");
  *out = comm;
  comm = NULL;
out:
  kolo_listener_destroy(listener);
  if (comm != NULL) free_comm(comm);
  return status;
}

/* ---- engine ---- */

static void complete_request(kolo_comm *comm, kolo_request *request, kolo_status status) {
  request->status = status;
  request->done = 1;
  pthread_cond_broadcast(&comm->cond);
}

static void *engine_main(void *argument) {
  kolo_comm *comm = argument;
  for (;;) {
    pthread_mutex_lock(&comm->mutex);
    if (!comm->busy && comm->queue_head != NULL) {
      kolo_request *request = comm->queue_head;
      comm->queue_head = request->next;
      if (comm->queue_head == NULL) comm->queue_tail = NULL;
      comm->busy = 1;
      pthread_mutex_unlock(&comm->mutex);
      kolo_status status = comm->stopping ? KOLO_ERR_ABORTED : kolo_ring_run(comm, request, 1);
      pthread_mutex_lock(&comm->mutex);
      comm->busy = 0;
      complete_request(comm, request, status);
      pthread_mutex_unlock(&comm->mutex);
      continue;
    }
    int stopping = comm->stopping && !comm->busy;
    pthread_mutex_unlock(&comm->mutex);
    if (stopping) break;
    struct pollfd fds[3];
    int count = 0, link_of[3] = {-1, -1, -1};
    fds[count++] = (struct pollfd){.fd = comm->wake_fd, .events = POLLIN};
    for (int i = 0; i < 2; i++) {
      if (comm->control[i].open && !atomic_load(&comm->failed)) {
        link_of[count] = i;
        fds[count++] = (struct pollfd){.fd = comm->transport->poll_fd(comm->control[i].conn),
                                       .events = POLLIN};
      }
    }
    if (poll(fds, (nfds_t)count, -1) <= 0) continue;
    if (fds[0].revents) {
      uint64_t value;
      ssize_t ignored = read(comm->wake_fd, &value, sizeof value);
      (void)ignored;
    }
    for (int i = 1; i < count; i++) {
      if (fds[i].revents) kolo_control_service(comm, &comm->control[link_of[i]]);
    }
  }
  return NULL;
}

static void wake_engine(kolo_comm *comm) {
  uint64_t one = 1;
  ssize_t ignored = write(comm->wake_fd, &one, sizeof one);
  (void)ignored;
}

/* Runs a blocking request: inline on the caller's thread when nothing is queued
 * (no thread hand-off on the latency path), else behind the queued ones. */
static kolo_status run_blocking(kolo_comm *comm, kolo_request *request) {
  if (request->kind != KOLO_REQUEST_BARRIER &&
      kolo_device_wanted(comm, request->send, request->recv)) {
    void *device_request = NULL;
    KOLO_CHECK(kolo_device_submit(comm, request, &device_request));
    return kolo_device_wait(comm, device_request);
  }
  pthread_mutex_lock(&comm->mutex);
  if (!comm->busy && comm->queue_head == NULL) {
    comm->busy = 1;
    pthread_mutex_unlock(&comm->mutex);
    kolo_status status = kolo_ring_run(comm, request, 0);
    pthread_mutex_lock(&comm->mutex);
    comm->busy = 0;
    if (comm->queue_head != NULL || comm->stopping) wake_engine(comm);
    pthread_cond_broadcast(&comm->cond);
    pthread_mutex_unlock(&comm->mutex);
    return status;
  }
  request->next = NULL;
  if (comm->queue_tail) comm->queue_tail->next = request;
  else comm->queue_head = request;
  comm->queue_tail = request;
  wake_engine(comm);
  while (!request->done) pthread_cond_wait(&comm->cond, &comm->mutex);
  kolo_status status = request->status;
  pthread_mutex_unlock(&comm->mutex);
  return status;
}

static kolo_status submit_async(kolo_comm *comm, const kolo_request *prototype,
                                kolo_request **out) {
  void *device_request = NULL;
  if (prototype->kind != KOLO_REQUEST_BARRIER &&
      kolo_device_wanted(comm, prototype->send, prototype->recv)) {
    KOLO_CHECK(kolo_device_submit(comm, prototype, &device_request));
  }
  pthread_mutex_lock(&comm->mutex);
  kolo_request *request = comm->free_requests;
  if (request != NULL) {
    comm->free_requests = request->next;
  } else {
    request = malloc(sizeof *request);
    if (request == NULL) {
      pthread_mutex_unlock(&comm->mutex);
      return KOLO_ERR_NO_MEMORY;
    }
  }
  *request = *prototype;
  request->pooled = 1;
  request->done = 0;
  request->next = NULL;
  request->device_request = device_request;
  if (device_request != NULL) { /* NCCL runs it; nothing to queue */
    pthread_mutex_unlock(&comm->mutex);
    *out = request;
    return KOLO_OK;
  }
  if (comm->queue_tail) comm->queue_tail->next = request;
  else comm->queue_head = request;
  comm->queue_tail = request;
  pthread_mutex_unlock(&comm->mutex);
  wake_engine(comm);
  *out = request;
  return KOLO_OK;
}

static void release_request(kolo_comm *comm, kolo_request *request) {
  request->next = comm->free_requests;
  comm->free_requests = request;
}

kolo_status kolo_wait(kolo_request *request) {
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_comm *comm = request->comm;
  if (request->device_request != NULL) {
    kolo_status device_status = kolo_device_wait(comm, request->device_request);
    pthread_mutex_lock(&comm->mutex);
    release_request(comm, request);
    pthread_mutex_unlock(&comm->mutex);
    return device_status;
  }
  pthread_mutex_lock(&comm->mutex);
  while (!request->done) pthread_cond_wait(&comm->cond, &comm->mutex);
  kolo_status status = request->status;
  release_request(comm, request);
  pthread_mutex_unlock(&comm->mutex);
  return status;
}

kolo_status kolo_test(kolo_request *request, int *done, kolo_status *status) {
  if (request == NULL || done == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_comm *comm = request->comm;
  if (request->device_request != NULL) {
    kolo_status device_status = KOLO_OK;
    kolo_device_test(comm, request->device_request, done, &device_status);
    if (*done) {
      if (status != NULL) *status = device_status;
      pthread_mutex_lock(&comm->mutex);
      release_request(comm, request);
      pthread_mutex_unlock(&comm->mutex);
    }
    return KOLO_OK;
  }
  pthread_mutex_lock(&comm->mutex);
  *done = request->done;
  if (request->done) {
    if (status != NULL) *status = request->status;
    release_request(comm, request);
  }
  pthread_mutex_unlock(&comm->mutex);
  return KOLO_OK;
}

/* ---- accessors, abort, destroy ---- */

int kolo_comm_rank(const kolo_comm *comm) { return comm ? comm->rank : -1; }
int kolo_comm_size(const kolo_comm *comm) { return comm ? comm->size : 0; }
int kolo_comm_local_rank(const kolo_comm *comm) { return comm ? comm->local_rank : -1; }
int kolo_comm_local_size(const kolo_comm *comm) { return comm ? comm->local_size : 0; }
uint64_t kolo_comm_epoch(const kolo_comm *comm) { return comm ? comm->epoch : 0; }

kolo_status kolo_comm_error(const kolo_comm *comm, int *failed_rank) {
  if (comm == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_comm *mutable_comm = (kolo_comm *)comm;
  if (!atomic_load(&mutable_comm->failed)) {
    if (failed_rank) *failed_rank = -1;
    return KOLO_OK;
  }
  pthread_mutex_lock(&mutable_comm->error_mutex);
  kolo_status status = comm->error;
  if (failed_rank) *failed_rank = comm->failed_rank;
  pthread_mutex_unlock(&mutable_comm->error_mutex);
  return status;
}

void kolo_comm_error_message(const kolo_comm *comm, char *buffer, size_t length) {
  if (buffer == NULL || length == 0) return;
  buffer[0] = '\0';
  if (comm == NULL) return;
  kolo_comm *mutable_comm = (kolo_comm *)comm;
  if (!atomic_load(&mutable_comm->failed)) return;
  pthread_mutex_lock(&mutable_comm->error_mutex);
  snprintf(buffer, length, "%s", comm->error_message);
  pthread_mutex_unlock(&mutable_comm->error_mutex);
}

void kolo_comm_abort(kolo_comm *comm) {
  if (comm == NULL) return;
  kolo_comm_fail(comm, KOLO_ERR_ABORTED, comm->rank, "aborted by rank %d", comm->rank);
  kolo_device_abort(comm);
}

void kolo_comm_destroy(kolo_comm *comm) {
  if (comm == NULL) return;
  pthread_mutex_lock(&comm->mutex);
  int pending = comm->busy || comm->queue_head != NULL;
  pthread_mutex_unlock(&comm->mutex);
  if (pending) {
    kolo_comm_fail(comm, KOLO_ERR_ABORTED, comm->rank, "communicator of rank %d destroyed",
                   comm->rank);
  } else if (!atomic_load(&comm->failed) && comm->size > 1) {
    kolo_control_message goodbye = {.magic = KOLO_CONTROL_MAGIC, .status = KOLO_OK,
                                    .failed_rank = comm->rank, .origin_rank = comm->rank};
    send_control(comm, &goodbye, -1);
  }
  pthread_mutex_lock(&comm->mutex);
  comm->stopping = 1;
  pthread_mutex_unlock(&comm->mutex);
  wake_engine(comm);
  if (comm->engine_started) pthread_join(comm->engine, NULL);
  kolo_device_destroy(comm);
  free_comm(comm);
}

/* ---- public collectives ---- */

static kolo_status check_common(kolo_comm *comm, kolo_dtype dtype, size_t count,
                                const void *a, const void *b) {
  if (comm == NULL) return KOLO_ERR_INVALID_ARG;
  if ((unsigned)dtype >= KOLO_DTYPE_COUNT) {
    KOLO_LOGE("kolo", "unknown dtype %d", (int)dtype);
    return KOLO_ERR_INVALID_ARG;
  }
  if (count > SIZE_MAX / 8 / (size_t)(comm->size > 0 ? comm->size : 1)) return KOLO_ERR_TOO_LARGE;
  if (count > 0 && (a == NULL || b == NULL)) {
    KOLO_LOGE("kolo", "NULL buffer with count %zu", count);
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

static kolo_status check_op(kolo_op op) {
  if ((unsigned)op >= KOLO_OP_COUNT) {
    KOLO_LOGE("kolo", "unknown reduction op %d", (int)op);
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

static kolo_status prepare_allreduce(kolo_comm *comm, const void *send, void *recv, size_t count,
                                     kolo_dtype dtype, kolo_op op, kolo_request *request) {
  KOLO_CHECK(check_common(comm, dtype, count, send, recv));
  KOLO_CHECK(check_op(op));
  *request = (kolo_request){.comm = comm, .kind = KOLO_REQUEST_ALLREDUCE, .send = send,
                            .recv = recv, .count = count, .dtype = dtype, .op = op};
  return KOLO_OK;
}

static kolo_status prepare_allgather(kolo_comm *comm, const void *send, size_t send_count,
                                     void *recv, size_t recv_capacity, size_t *recv_counts,
                                     kolo_dtype dtype, kolo_request *request) {
  KOLO_CHECK(check_common(comm, dtype, send_count, send, send));
  KOLO_CHECK(check_common(comm, dtype, recv_capacity, recv, recv));
  *request = (kolo_request){.comm = comm, .kind = KOLO_REQUEST_ALLGATHER, .send = send,
                            .recv = recv, .count = send_count, .recv_capacity = recv_capacity,
                            .recv_counts = recv_counts, .dtype = dtype};
  return KOLO_OK;
}

static kolo_status prepare_broadcast(kolo_comm *comm, void *buffer, size_t count,
                                     kolo_dtype dtype, int root, kolo_request *request) {
  KOLO_CHECK(check_common(comm, dtype, count, buffer, buffer));
  if (root < 0 || root >= comm->size) {
    KOLO_LOGE("kolo", "broadcast root %d outside 0..%d", root, comm->size - 1);
    return KOLO_ERR_INVALID_ARG;
  }
  *request = (kolo_request){.comm = comm, .kind = KOLO_REQUEST_BROADCAST, .send = buffer,
                            .recv = buffer, .count = count, .dtype = dtype, .root = root};
  return KOLO_OK;
}

static kolo_status prepare_reducescatter(kolo_comm *comm, const void *send, void *recv,
                                         size_t recv_count, kolo_dtype dtype, kolo_op op,
                                         kolo_request *request) {
  KOLO_CHECK(check_common(comm, dtype, recv_count, send, recv));
  KOLO_CHECK(check_op(op));
  *request = (kolo_request){.comm = comm, .kind = KOLO_REQUEST_REDUCESCATTER, .send = send,
                            .recv = recv, .count = recv_count, .dtype = dtype, .op = op};
  return KOLO_OK;
}

static kolo_status prepare_barrier(kolo_comm *comm, kolo_request *request) {
  if (comm == NULL) return KOLO_ERR_INVALID_ARG;
  *request = (kolo_request){.comm = comm, .kind = KOLO_REQUEST_BARRIER};
  return KOLO_OK;
}

kolo_status kolo_allreduce_async(kolo_comm *comm, const void *send, void *recv, size_t count,
                                 kolo_dtype dtype, kolo_op op, kolo_request **request) {
  kolo_request prototype;
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(prepare_allreduce(comm, send, recv, count, dtype, op, &prototype));
  return submit_async(comm, &prototype, request);
}

kolo_status kolo_allreduce(kolo_comm *comm, const void *send, void *recv, size_t count,
                           kolo_dtype dtype, kolo_op op) {
  kolo_request request;
  KOLO_CHECK(prepare_allreduce(comm, send, recv, count, dtype, op, &request));
  return run_blocking(comm, &request);
}

kolo_status kolo_allgather_async(kolo_comm *comm, const void *send, size_t send_count, void *recv,
                                 size_t recv_capacity, size_t *recv_counts, kolo_dtype dtype,
                                 kolo_request **request) {
  kolo_request prototype;
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(prepare_allgather(comm, send, send_count, recv, recv_capacity, recv_counts, dtype,
                               &prototype));
  return submit_async(comm, &prototype, request);
}

kolo_status kolo_allgather(kolo_comm *comm, const void *send, size_t send_count, void *recv,
                           size_t recv_capacity, size_t *recv_counts, kolo_dtype dtype) {
  kolo_request request;
  KOLO_CHECK(prepare_allgather(comm, send, send_count, recv, recv_capacity, recv_counts, dtype,
                               &request));
  return run_blocking(comm, &request);
}

kolo_status kolo_broadcast_async(kolo_comm *comm, void *buffer, size_t count, kolo_dtype dtype,
                                 int root, kolo_request **request) {
  kolo_request prototype;
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(prepare_broadcast(comm, buffer, count, dtype, root, &prototype));
  return submit_async(comm, &prototype, request);
}

kolo_status kolo_broadcast(kolo_comm *comm, void *buffer, size_t count, kolo_dtype dtype,
                           int root) {
  kolo_request request;
  KOLO_CHECK(prepare_broadcast(comm, buffer, count, dtype, root, &request));
  return run_blocking(comm, &request);
}

kolo_status kolo_reducescatter_async(kolo_comm *comm, const void *send, void *recv,
                                     size_t recv_count, kolo_dtype dtype, kolo_op op,
                                     kolo_request **request) {
  kolo_request prototype;
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(prepare_reducescatter(comm, send, recv, recv_count, dtype, op, &prototype));
  return submit_async(comm, &prototype, request);
}

kolo_status kolo_reducescatter(kolo_comm *comm, const void *send, void *recv, size_t recv_count,
                               kolo_dtype dtype, kolo_op op) {
  kolo_request request;
  KOLO_CHECK(prepare_reducescatter(comm, send, recv, recv_count, dtype, op, &request));
  return run_blocking(comm, &request);
}

kolo_status kolo_barrier_async(kolo_comm *comm, kolo_request **request) {
  kolo_request prototype;
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(prepare_barrier(comm, &prototype));
  return submit_async(comm, &prototype, request);
}

kolo_status kolo_barrier(kolo_comm *comm) {
  kolo_request request;
  KOLO_CHECK(prepare_barrier(comm, &request));
  return run_blocking(comm, &request);
}
