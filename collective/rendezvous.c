/* Ring formation from the environment (what kolorun sets up): every rank binds a
 * data-plane listener, registers its address with rank 0's rendezvous socket,
 * and receives the whole ring back; then kolo_comm_create forms the ring. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/face.h"
#include "common/checks.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/log.h"

#define RENDEZVOUS_MAGIC 0x4b524456u /* "KRDV" */
#define MAX_ADDRESS_BYTES 256
#define MAX_SECRET_BYTES 1024

static int env_int(const char *name, int fallback, int *ok) {
  const char *value = getenv(name);
  if (value == NULL || *value == '\0') return fallback;
  char *end = NULL;
  long parsed = strtol(value, &end, 10);
  if (end == value || *end != '\0' || parsed < 0 || parsed > 1 << 20) {
    KOLO_LOGE("kolo", "%s='%s' is not a valid number", name, value);
    *ok = 0;
    return fallback;
  }
  return (int)parsed;
}

typedef struct rendezvous_peer {
  kolo_transport_conn *conn;
  char address[MAX_ADDRESS_BYTES];
} rendezvous_peer;

static kolo_status send_registration(const kolo_transport_ops *tp, kolo_transport_conn *conn,
                                     int rank, int size, const char *secret, const char *address,
                                     int64_t deadline) {
  uint8_t message[20 + MAX_SECRET_BYTES + MAX_ADDRESS_BYTES];
  size_t secret_length = strlen(secret), address_length = strlen(address);
  kolo_put32(message, RENDEZVOUS_MAGIC);
  kolo_put32(message + 4, (uint32_t)rank);
  kolo_put32(message + 8, (uint32_t)size);
  kolo_put32(message + 12, (uint32_t)secret_length);
  memcpy(message + 16, secret, secret_length);
  kolo_put32(message + 16 + secret_length, (uint32_t)address_length);
  memcpy(message + 20 + secret_length, address, address_length);
  return kolo_transport_send_all(tp, conn, message, 20 + secret_length + address_length, deadline);
}

/* Rank 0: collects size-1 registrations, refusing strangers, then answers all. */
static kolo_status gather_ring(const kolo_transport_ops *tp, kolo_transport_listener *rendezvous,
                               int size, const char *secret, const char *own_address,
                               rendezvous_peer *peers, int64_t deadline) {
  snprintf(peers[0].address, sizeof peers[0].address, "%s", own_address);
  int joined = 1;
  while (joined < size) {
    kolo_transport_conn *conn = NULL;
    KOLO_CHECK(tp->accept(rendezvous, deadline, &conn));
    int64_t short_deadline = kolo_deadline_after_ms(2000);
    if (short_deadline > deadline) short_deadline = deadline;
    uint8_t header[16];
    char their_secret[MAX_SECRET_BYTES + 1];
    kolo_status verdict = kolo_transport_recv_all(tp, conn, header, sizeof header, short_deadline);
    uint32_t secret_length = verdict == KOLO_OK ? kolo_get32(header + 12) : 0;
    int rank = (int)kolo_get32(header + 4);
    if (verdict == KOLO_OK &&
        (kolo_get32(header) != RENDEZVOUS_MAGIC || secret_length > MAX_SECRET_BYTES)) {
      verdict = KOLO_ERR_PROTOCOL;
    }
    if (verdict == KOLO_OK) {
      verdict = kolo_transport_recv_all(tp, conn, their_secret, secret_length, short_deadline);
    }
    uint8_t length_bytes[4];
    if (verdict == KOLO_OK)
      verdict = kolo_transport_recv_all(tp, conn, length_bytes, 4, short_deadline);
    uint32_t address_length = verdict == KOLO_OK ? kolo_get32(length_bytes) : 0;
    if (verdict == KOLO_OK && (address_length == 0 || address_length >= MAX_ADDRESS_BYTES)) {
      verdict = KOLO_ERR_PROTOCOL;
    }
    char address[MAX_ADDRESS_BYTES];
    if (verdict == KOLO_OK)
      verdict = kolo_transport_recv_all(tp, conn, address, address_length, short_deadline);
    if (verdict == KOLO_OK) {
      address[address_length] = '\0';
      their_secret[secret_length] = '\0';
      if (secret_length != strlen(secret) || memcmp(their_secret, secret, secret_length) != 0) {
        verdict = KOLO_ERR_AUTH;
      } else if ((int)kolo_get32(header + 8) != size || rank <= 0 || rank >= size ||
                 peers[rank].conn != NULL) {
        verdict = KOLO_ERR_PROTOCOL;
      }
    }
    if (verdict != KOLO_OK) {
      KOLO_LOGW("kolo", "rendezvous: refused a registration: %s", kolo_strerror(verdict));
      uint8_t refusal[8];
      kolo_put32(refusal, RENDEZVOUS_MAGIC);
      kolo_put32(refusal + 4, (uint32_t)verdict);
      kolo_transport_send_all(tp, conn, refusal, sizeof refusal, short_deadline);
      tp->close(conn);
      continue;
    }
    peers[rank].conn = conn;
    snprintf(peers[rank].address, sizeof peers[rank].address, "%s", address);
    joined++;
  }
  /* the ring, to everyone */
  size_t capacity = 8 + (size_t)size * (4 + MAX_ADDRESS_BYTES);
  uint8_t *reply = malloc(capacity);
  if (reply == NULL) return KOLO_ERR_NO_MEMORY;
  size_t length = 8;
  kolo_put32(reply, RENDEZVOUS_MAGIC);
  kolo_put32(reply + 4, KOLO_OK);
  for (int r = 0; r < size; r++) {
    size_t address_length = strlen(peers[r].address);
    kolo_put32(reply + length, (uint32_t)address_length);
    memcpy(reply + length + 4, peers[r].address, address_length);
    length += 4 + address_length;
  }
  kolo_status status = KOLO_OK;
  for (int r = 1; r < size && status == KOLO_OK; r++) {
    status = kolo_transport_send_all(tp, peers[r].conn, reply, length, deadline);
  }
  free(reply);
  return status;
}

/* Other ranks: register, then read the ring. */
static kolo_status join_ring(const kolo_transport_ops *tp, const char *rendezvous_address, int rank,
                             int size, const char *secret, const char *own_address,
                             rendezvous_peer *peers, int64_t deadline) {
  kolo_transport_conn *conn = NULL;
  kolo_status status = tp->connect(rendezvous_address, deadline, &conn);
  if (status != KOLO_OK) {
    KOLO_LOGE("kolo", "rank %d: cannot reach the rendezvous at %s: %s", rank, rendezvous_address,
              kolo_strerror(status));
    return status;
  }
  status = send_registration(tp, conn, rank, size, secret, own_address, deadline);
  uint8_t header[8];
  if (status == KOLO_OK)
    status = kolo_transport_recv_all(tp, conn, header, sizeof header, deadline);
  if (status == KOLO_OK && kolo_get32(header) != RENDEZVOUS_MAGIC) status = KOLO_ERR_PROTOCOL;
  if (status == KOLO_OK) status = (kolo_status)kolo_get32(header + 4);
  for (int r = 0; r < size && status == KOLO_OK; r++) {
    uint8_t length_bytes[4];
    status = kolo_transport_recv_all(tp, conn, length_bytes, 4, deadline);
    uint32_t length = status == KOLO_OK ? kolo_get32(length_bytes) : 0;
    if (status == KOLO_OK && (length == 0 || length >= MAX_ADDRESS_BYTES))
      status = KOLO_ERR_PROTOCOL;
    if (status == KOLO_OK)
      status = kolo_transport_recv_all(tp, conn, peers[r].address, length, deadline);
    if (status == KOLO_OK) peers[r].address[length] = '\0';
  }
  tp->close(conn);
  if (status != KOLO_OK) {
    KOLO_LOGE("kolo", "rank %d: rendezvous failed: %s", rank, kolo_strerror(status));
  }
  return status;
}

kolo_status kolo_comm_create_from_env(kolo_comm **out) {
  int ok = 1;
  if (out == NULL) return KOLO_ERR_INVALID_ARG;
  int size = env_int("KOLO_SIZE", -1, &ok);
  int rank = env_int("KOLO_RANK", -1, &ok);
  int local_rank = env_int("KOLO_LOCAL_RANK", rank, &ok);
  int local_size = env_int("KOLO_LOCAL_SIZE", size, &ok);
  int epoch = env_int("KOLO_EPOCH", 1, &ok);
  int inherited_fd = env_int("KOLO_RENDEZVOUS_FD", -1, &ok);
  const char *rendezvous_address = getenv("KOLO_RENDEZVOUS");
  const char *secret = getenv("KOLO_SECRET");
  const char *host = getenv("KOLO_HOST");
  if (!ok) return KOLO_ERR_INVALID_ARG;
  if (size < 1 || rank < 0 || rank >= size) {
    KOLO_LOGE("kolo", "KOLO_SIZE and KOLO_RANK must be set (0 <= rank < size); run under kolorun");
    return KOLO_ERR_INVALID_ARG;
  }
  if (secret == NULL) secret = "";
  if (strlen(secret) > MAX_SECRET_BYTES) return KOLO_ERR_INVALID_ARG;
  if (host == NULL || *host == '\0') host = "127.0.0.1";
  kolo_ring_spec spec = {.epoch = (uint64_t)epoch,
                         .rank = rank,
                         .size = size,
                         .local_rank = local_rank,
                         .local_size = local_size,
                         .secret = secret};
  if (size == 1) return kolo_comm_create(&spec, NULL, out);
  if (rendezvous_address == NULL && !(rank == 0 && inherited_fd >= 0)) {
    KOLO_LOGE("kolo", "KOLO_RENDEZVOUS (host:port of rank 0) is not set");
    return KOLO_ERR_INVALID_ARG;
  }

  const kolo_transport_ops *tp = &kolo_transport_tcp;
  kolo_status status;
  kolo_listener *listener = NULL;
  kolo_transport_listener *rendezvous = NULL;
  rendezvous_peer *peers = calloc((size_t)size, sizeof *peers);
  const char **addresses = calloc((size_t)size, sizeof *addresses);
  char bind_address[MAX_ADDRESS_BYTES], own_address[MAX_ADDRESS_BYTES];
  spec.timeout_ms = 0;
  int64_t deadline = 0;
  KOLO_REQUIRE_GOTO(peers != NULL && addresses != NULL, KOLO_ERR_NO_MEMORY, status, out);
  snprintf(bind_address, sizeof bind_address, strchr(host, ':') ? "[%s]:0" : "%s:0", host);
  KOLO_CHECK_GOTO(kolo_listener_create(bind_address, &listener), status, out);
  KOLO_CHECK_GOTO(kolo_listener_address(listener, own_address, sizeof own_address), status, out);
  deadline = kolo_deadline_after_ms(kolo_timeout_ms_from_env());
  if (rank == 0) {
    if (inherited_fd >= 0) {
      KOLO_CHECK_GOTO(tp->listener_from_fd(inherited_fd, &rendezvous), status, out);
    } else {
      KOLO_CHECK_GOTO(tp->listen(rendezvous_address, &rendezvous), status, out);
    }
    KOLO_CHECK_GOTO(gather_ring(tp, rendezvous, size, secret, own_address, peers, deadline), status,
                    out);
  } else {
    KOLO_CHECK_GOTO(
        join_ring(tp, rendezvous_address, rank, size, secret, own_address, peers, deadline), status,
        out);
  }
  for (int r = 0; r < size; r++) addresses[r] = peers[r].address;
  spec.peers = addresses;
  status = kolo_comm_create(&spec, listener, out);
  listener = NULL; /* taken by kolo_comm_create */
out:
  if (peers != NULL) {
    for (int r = 0; r < size; r++) tp->close(peers[r].conn);
  }
  tp->close_listener(rendezvous);
  kolo_listener_destroy(listener);
  free(peers);
  free(addresses);
  return status;
}
