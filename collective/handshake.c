/* The handshake every ring connection starts with. The connector sends a hello
 * (magic, protocol version, connection kind, epoch, rank, size, job secret, and
 * on the bell connection a bulk-transport offer: name and nonce); the acceptor
 * checks it and answers an ack with a verdict and whether it took the offer.
 * Strangers (wrong secret, other epoch, wrong rank) get a refusal and change
 * nothing; something that is not a kolo hello gets no answer at all. */
#include <string.h>

#include "collective/internal.h"
#include "common/log.h"

#define HELLO_MAGIC 0x4b4f4c4fu /* "KOLO" */
#define ACK_MAGIC 0x4b41434bu   /* "KACK" */
#define PROTOCOL_VERSION 2 /* 2: control links carry liveness beats */

kolo_status kolo_handshake_send_hello(kolo_comm *comm, kolo_transport_conn *conn, int kind,
                                      const kolo_bulk_offer *offer, int64_t deadline_ns) {
  uint8_t hello[28 + KOLO_MAX_SECRET_BYTES + 12 + KOLO_BULK_NAME_BYTES];
  size_t secret_length = strlen(comm->secret);
  const char *offer_name = kolo_bulk_offer_name(offer);
  size_t name_length = strlen(offer_name);
  uint64_t nonce = kolo_bulk_offer_nonce(offer);
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
  memcpy(tail + 12, offer_name, name_length);
  return kolo_transport_send_all(comm->transport, conn, hello,
                                 28 + secret_length + 12 + name_length, deadline_ns);
}

kolo_status kolo_handshake_read_ack(kolo_comm *comm, kolo_transport_conn *conn, int *bulk_taken,
                                    int64_t deadline_ns) {
  uint8_t ack[12];
  kolo_status status = kolo_transport_recv_all(comm->transport, conn, ack, sizeof ack, deadline_ns);
  if (status == KOLO_ERR_PEER_LOST) status = KOLO_ERR_CONNECT;
  if (status != KOLO_OK) return status;
  if (kolo_get32(ack) != ACK_MAGIC) return KOLO_ERR_PROTOCOL;
  if (bulk_taken != NULL) *bulk_taken = kolo_get32(ack + 8) == 1;
  return (kolo_status)kolo_get32(ack + 4);
}

static int secrets_equal(const char *a, size_t a_length, const char *b, size_t b_length) {
  unsigned difference = (unsigned)(a_length ^ b_length);
  for (size_t i = 0; i < a_length && i < b_length; i++) difference |= (unsigned)(a[i] ^ b[i]);
  return difference == 0;
}

/* The hello after its fixed header: secret, offer header, offer name. */
typedef struct hello_tail {
  char secret[KOLO_MAX_SECRET_BYTES];
  uint32_t secret_length;
  char offer_name[KOLO_BULK_NAME_BYTES + 1];
  uint64_t nonce;
} hello_tail;

static kolo_status read_hello_tail(kolo_comm *comm, kolo_transport_conn *conn,
                                   uint32_t secret_length, hello_tail *tail, int64_t deadline) {
  uint8_t offer[12];
  tail->secret_length = secret_length;
  tail->offer_name[0] = '\0';
  kolo_status status = kolo_transport_recv_all(comm->transport, conn, tail->secret, secret_length,
                                               deadline);
  if (status == KOLO_OK) status = kolo_transport_recv_all(comm->transport, conn, offer, 12, deadline);
  if (status != KOLO_OK) return KOLO_ERR_PROTOCOL;
  uint32_t name_length = kolo_get32(offer);
  if (name_length > KOLO_BULK_NAME_BYTES) return KOLO_ERR_PROTOCOL;
  status = kolo_transport_recv_all(comm->transport, conn, tail->offer_name, name_length, deadline);
  if (status != KOLO_OK) return KOLO_ERR_PROTOCOL;
  tail->offer_name[name_length] = '\0';
  tail->nonce = ((uint64_t)kolo_get32(offer + 4) << 32) | kolo_get32(offer + 8);
  return KOLO_OK;
}

/* The verdict on a well-formed hello: who may join this ring's epoch. */
static kolo_status judge_hello(kolo_comm *comm, const hello_tail *tail, uint64_t epoch, int rank,
                               int size, int kind, int expected_rank) {
  if (!secrets_equal(tail->secret, tail->secret_length, comm->secret, strlen(comm->secret))) {
    KOLO_LOGW("kolo", "rank %d epoch %llu: refused a connection from rank %d: wrong secret",
              comm->rank, (unsigned long long)comm->epoch, rank);
    return KOLO_ERR_AUTH;
  }
  if (epoch != comm->epoch) {
    KOLO_LOGW("kolo", "rank %d epoch %llu: refused a connection from rank %d of epoch %llu",
              comm->rank, (unsigned long long)comm->epoch, rank, (unsigned long long)epoch);
    return KOLO_ERR_STALE_EPOCH;
  }
  if (size != comm->size || rank != expected_rank ||
      (kind != KOLO_CONNECTION_DATA && kind != KOLO_CONNECTION_CONTROL &&
       kind != KOLO_CONNECTION_BELL)) {
    KOLO_LOGW("kolo", "rank %d: refused a connection claiming rank %d of %d (want rank %d of %d)",
              comm->rank, rank, size, expected_rank, comm->size);
    return KOLO_ERR_PROTOCOL;
  }
  return KOLO_OK;
}

kolo_status kolo_handshake_accept(kolo_comm *comm, kolo_transport_conn *conn, int expected_rank,
                                  int *kind, kolo_channel *bulk, int64_t deadline_ns) {
  *bulk = (kolo_channel){0};
  /* a stranger gets at most one second to introduce itself */
  int64_t short_deadline = kolo_deadline_after_ms(1000);
  if (short_deadline > deadline_ns) short_deadline = deadline_ns;
  uint8_t header[28];
  kolo_status status =
      kolo_transport_recv_all(comm->transport, conn, header, sizeof header, short_deadline);
  if (status != KOLO_OK) return status == KOLO_ERR_TIMEOUT ? KOLO_ERR_PROTOCOL : status;
  uint32_t version_kind = kolo_get32(header + 4);
  uint64_t epoch = ((uint64_t)kolo_get32(header + 8) << 32) | kolo_get32(header + 12);
  int rank = (int)kolo_get32(header + 16), size = (int)kolo_get32(header + 20);
  uint32_t secret_length = kolo_get32(header + 24);
  if (kolo_get32(header) != HELLO_MAGIC || (version_kind >> 16) != PROTOCOL_VERSION ||
      secret_length > KOLO_MAX_SECRET_BYTES) {
    KOLO_LOGW("kolo", "rank %d: refused a connection: not a kolo hello", comm->rank);
    return KOLO_ERR_PROTOCOL; /* not worth an answer */
  }
  hello_tail tail;
  status = read_hello_tail(comm, conn, secret_length, &tail, short_deadline);
  if (status != KOLO_OK) return status;
  *kind = (int)(version_kind & 0xffffu);
  kolo_status verdict = judge_hello(comm, &tail, epoch, rank, size, *kind, expected_rank);
  uint32_t bulk_taken = 0;
  if (verdict == KOLO_OK && *kind == KOLO_CONNECTION_BELL && tail.offer_name[0] != '\0') {
    bulk_taken = kolo_bulk_accept(tail.offer_name, tail.nonce, conn, bulk) == KOLO_OK;
  }
  uint8_t ack[12];
  kolo_put32(ack, ACK_MAGIC);
  kolo_put32(ack + 4, (uint32_t)verdict);
  kolo_put32(ack + 8, bulk_taken);
  kolo_transport_send_all(comm->transport, conn, ack, sizeof ack, short_deadline);
  return verdict;
}
