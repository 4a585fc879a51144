/* The handshake every ring connection starts with (protocol version 3: a challenge and a
 * response, so that the ring's secret never crosses the wire). The connector sends a hello
 * (magic, protocol version, connection kind, epoch, rank, size, a fresh 16-byte nonce where
 * version 2 sent the secret, and on the bell connection a bulk-transport offer: name and
 * nonce). The acceptor (form.c reads hellos of many connections at once, kolo_hello_bytes_
 * needed saying when one is whole) refuses a stale epoch, a wrong rank, size or kind with an
 * ack at once; else it proves that it knows the secret: a challenge (magic, its own nonce,
 * HMAC-SHA-256(secret, "kolo-ring-acceptor" | hello | nonce)). The connector checks that
 * proof (a squatter on the port cannot make it: KOLO_ERR_AUTH, and nothing more is sent),
 * then proves itself: HMAC-SHA-256(secret, "kolo-ring-connector" | hello | nonce); the
 * acceptor checks it and answers the ack (verdict, whether it took the offer). Strangers get
 * a refusal and change nothing; something that is not a kolo hello gets no answer at all.
 * Version 2 peers (the secret in the hello) are refused as not kolo: every rank of a ring
 * must run the same protocol version. */
#include <string.h>

#include "common/checks.h"

#include "collective/net/net.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/sha256.h"

#include <sys/random.h>

#define HELLO_MAGIC 0x4b4f4c4fu     /* "KOLO" */
#define ACK_MAGIC 0x4b41434bu       /* "KACK" */
#define CHALLENGE_MAGIC 0x4b43484cu /* "KCHL" */
#define PROOF_MAGIC 0x4b505246u     /* "KPRF" */
/* 2: control links carry liveness beats; 3: a challenge and a response instead of the secret */
#define PROTOCOL_VERSION 3

/* ---- the wire records (pure) ---- */

size_t kolo_hello_encode(const kolo_hello *h, uint8_t *out) {
  kolo_put32(out, HELLO_MAGIC);
  kolo_put32(out + 4, ((uint32_t)PROTOCOL_VERSION << 16) | ((uint32_t)h->kind & 0xffffu));
  kolo_put32(out + 8, (uint32_t)(h->epoch >> 32));
  kolo_put32(out + 12, (uint32_t)h->epoch);
  kolo_put32(out + 16, (uint32_t)h->rank);
  kolo_put32(out + 20, (uint32_t)h->size);
  kolo_put32(out + 24, h->secret_length);
  memcpy(out + 28, h->secret, h->secret_length);
  uint8_t *tail = out + 28 + h->secret_length;
  kolo_put32(tail, h->name_length);
  kolo_put32(tail + 4, (uint32_t)(h->nonce >> 32));
  kolo_put32(tail + 8, (uint32_t)h->nonce);
  memcpy(tail + 12, h->offer_name, h->name_length);
  return KOLO_HELLO_HEADER_BYTES + h->secret_length + KOLO_HELLO_OFFER_BYTES + h->name_length;
}

kolo_status kolo_hello_decode_header(const uint8_t *header, kolo_hello *h) {
  memset(h, 0, sizeof *h);
  uint32_t version_kind = kolo_get32(header + 4);
  h->kind = (int)(version_kind & 0xffffu);
  h->epoch = ((uint64_t)kolo_get32(header + 8) << 32) | kolo_get32(header + 12);
  h->rank = (int)kolo_get32(header + 16);
  h->size = (int)kolo_get32(header + 20);
  h->secret_length = kolo_get32(header + 24);
  if (kolo_get32(header) != HELLO_MAGIC || (version_kind >> 16) != PROTOCOL_VERSION ||
      h->secret_length > KOLO_MAX_SECRET_BYTES)
    return KOLO_ERR_PROTOCOL;
  return KOLO_OK;
}

kolo_status kolo_hello_decode_offer(const uint8_t *offer, kolo_hello *h) {
  h->name_length = kolo_get32(offer);
  h->nonce = ((uint64_t)kolo_get32(offer + 4) << 32) | kolo_get32(offer + 8);
  h->offer_name[0] = '\0';
  return h->name_length > KOLO_BULK_NAME_BYTES ? KOLO_ERR_PROTOCOL : KOLO_OK;
}

kolo_status kolo_hello_decode(const uint8_t *bytes, size_t length, kolo_hello *h, size_t *used) {
  *used = 0;
  if (length < KOLO_HELLO_HEADER_BYTES) return KOLO_ERR_PROTOCOL;
  KOLO_CHECK(kolo_hello_decode_header(bytes, h));
  size_t at = KOLO_HELLO_HEADER_BYTES;
  if (length - at < (size_t)h->secret_length + KOLO_HELLO_OFFER_BYTES) return KOLO_ERR_PROTOCOL;
  memcpy(h->secret, bytes + at, h->secret_length);
  at += h->secret_length;
  KOLO_CHECK(kolo_hello_decode_offer(bytes + at, h));
  at += KOLO_HELLO_OFFER_BYTES;
  if (length - at < h->name_length) return KOLO_ERR_PROTOCOL;
  memcpy(h->offer_name, bytes + at, h->name_length);
  h->offer_name[h->name_length] = '\0';
  *used = at + h->name_length;
  return KOLO_OK;
}

kolo_status kolo_hello_judge(const kolo_hello *h, uint64_t epoch, int size, int expected_rank) {
  /* The epoch first: every epoch has its own secret (the scheduler draws one per ring), so a
   * neighbour still at another epoch also has another secret, and must be told STALE_EPOCH
   * (worth dialling again: elastic.c's create_comm) rather than AUTH (a stranger: fail). The
   * secret is proven afterwards (kolo_handshake_proof). */
  if (h->epoch != epoch) return KOLO_ERR_STALE_EPOCH;
  if (h->secret_length != KOLO_HANDSHAKE_NONCE_BYTES) return KOLO_ERR_PROTOCOL;
  if (h->size != size || h->rank != expected_rank ||
      (h->kind != KOLO_CONNECTION_DATA && h->kind != KOLO_CONNECTION_CONTROL &&
       h->kind != KOLO_CONNECTION_BELL && h->kind != KOLO_CONNECTION_MESH))
    return KOLO_ERR_PROTOCOL;
  return KOLO_OK;
}

void kolo_ack_encode(uint8_t *ack, kolo_status verdict, int bulk_taken) {
  kolo_put32(ack, ACK_MAGIC);
  kolo_put32(ack + 4, (uint32_t)verdict);
  kolo_put32(ack + 8, bulk_taken ? 1u : 0u);
}

kolo_status kolo_ack_decode(const uint8_t *ack, int *bulk_taken) {
  if (kolo_get32(ack) != ACK_MAGIC) return KOLO_ERR_PROTOCOL;
  uint32_t verdict = kolo_get32(ack + 4);
  /* a verdict must be a status this library knows: anything else is garbage */
  if (verdict > (uint32_t)INT32_MAX ||
      strcmp(kolo_status_name((kolo_status)verdict), "KOLO_ERR_UNKNOWN") == 0)
    return KOLO_ERR_PROTOCOL;
  if (bulk_taken != NULL) *bulk_taken = kolo_get32(ack + 8) == 1;
  return (kolo_status)verdict;
}

void kolo_handshake_proof(const char *secret, int acceptor, const uint8_t *hello,
                          size_t hello_length, const uint8_t *nonce,
                          uint8_t out[KOLO_SHA256_BYTES]) {
  const char *label = acceptor ? "kolo-ring-acceptor" : "kolo-ring-connector";
  const void *parts[3] = {label, hello, nonce};
  size_t lengths[3] = {strlen(label) + 1, hello_length, KOLO_HANDSHAKE_NONCE_BYTES};
  kolo_hmac_sha256(secret, strlen(secret), parts, lengths, 3, out);
}

/* ---- the handshake (I/O) ---- */

kolo_status kolo_handshake_send_hello(kolo_net *net, kolo_transport_conn *conn, int kind,
                                      const kolo_bulk_offer *offer, uint8_t *bytes, size_t *length,
                                      int64_t deadline_ns) {
  kolo_hello hello = {.kind = kind,
                      .epoch = net->epoch,
                      .rank = net->rank,
                      .size = net->size,
                      .secret_length = KOLO_HANDSHAKE_NONCE_BYTES,
                      .nonce = kolo_bulk_offer_nonce(offer)};
  if (getrandom(hello.secret, KOLO_HANDSHAKE_NONCE_BYTES, 0) != KOLO_HANDSHAKE_NONCE_BYTES)
    return KOLO_ERR_SYSTEM;
  const char *offer_name = kolo_bulk_offer_name(offer);
  hello.name_length = (uint32_t)strlen(offer_name);
  memcpy(hello.offer_name, offer_name, hello.name_length);
  *length = kolo_hello_encode(&hello, bytes);
  return kolo_transport_send_all(net->transport, conn, bytes, *length, deadline_ns);
}

kolo_status kolo_handshake_read_reply(kolo_net *net, kolo_transport_conn *conn,
                                      const uint8_t *hello, size_t hello_length, int *proved,
                                      int *bulk_taken, int64_t deadline_ns) {
  uint8_t reply[4 + KOLO_HANDSHAKE_NONCE_BYTES + KOLO_SHA256_BYTES];
  kolo_status status =
      kolo_transport_recv_all(net->transport, conn, reply, KOLO_ACK_BYTES, deadline_ns);
  if (status == KOLO_ERR_PEER_LOST) status = KOLO_ERR_CONNECT;
  if (status != KOLO_OK) return status;
  if (*proved || kolo_get32(reply) != CHALLENGE_MAGIC) {
    kolo_status verdict = kolo_ack_decode(reply, bulk_taken);
    /* a success comes only after our proof: before it, an OK is a peer breaking protocol */
    return verdict == KOLO_OK && !*proved ? KOLO_ERR_PROTOCOL : verdict;
  }
  status = kolo_transport_recv_all(net->transport, conn, reply + KOLO_ACK_BYTES,
                                   sizeof reply - KOLO_ACK_BYTES, deadline_ns);
  if (status != KOLO_OK) return KOLO_ERR_PROTOCOL;
  const uint8_t *nonce = reply + 4, *theirs = reply + 4 + KOLO_HANDSHAKE_NONCE_BYTES;
  uint8_t expected[KOLO_SHA256_BYTES], proof[4 + KOLO_SHA256_BYTES];
  kolo_handshake_proof(net->secret, 1, hello, hello_length, nonce, expected);
  if (!kolo_bytes_equal(expected, theirs, KOLO_SHA256_BYTES)) {
    KOLO_LOGW("kolo",
              "rank %d epoch %llu: the peer that answered does not know the ring's "
              "secret: nothing more is sent to it",
              net->rank, (unsigned long long)net->epoch);
    return KOLO_ERR_AUTH;
  }
  kolo_put32(proof, PROOF_MAGIC);
  kolo_handshake_proof(net->secret, 0, hello, hello_length, nonce, proof + 4);
  status = kolo_transport_send_all(net->transport, conn, proof, sizeof proof, deadline_ns);
  if (status != KOLO_OK) return status == KOLO_ERR_PEER_LOST ? KOLO_ERR_CONNECT : status;
  *proved = 1;
  return KOLO_OK;
}

/* The verdict on a well-formed hello, logged when it is a refusal. */
static kolo_status judge_hello(kolo_net *net, const kolo_hello *hello, int expected_rank) {
  kolo_status verdict = kolo_hello_judge(hello, net->epoch, net->size, expected_rank);
  if (verdict == KOLO_ERR_STALE_EPOCH)
    KOLO_LOGW("kolo", "rank %d epoch %llu: refused a connection from rank %d of epoch %llu",
              net->rank, (unsigned long long)net->epoch, hello->rank,
              (unsigned long long)hello->epoch);
  else if (verdict != KOLO_OK)
    KOLO_LOGW("kolo", "rank %d: refused a connection claiming rank %d of %d (want rank %d of %d)",
              net->rank, hello->rank, hello->size, expected_rank, net->size);
  return verdict;
}

size_t kolo_hello_bytes_needed(const uint8_t *bytes, size_t have) {
  kolo_hello h;
  if (have < KOLO_HELLO_HEADER_BYTES) return KOLO_HELLO_HEADER_BYTES;
  if (kolo_hello_decode_header(bytes, &h) != KOLO_OK) return 0;
  size_t offer_at = KOLO_HELLO_HEADER_BYTES + h.secret_length;
  if (have < offer_at + KOLO_HELLO_OFFER_BYTES) return offer_at + KOLO_HELLO_OFFER_BYTES;
  if (kolo_hello_decode_offer(bytes + offer_at, &h) != KOLO_OK) return 0;
  return offer_at + KOLO_HELLO_OFFER_BYTES + h.name_length;
}

kolo_status kolo_handshake_challenge(kolo_net *net, kolo_transport_conn *conn, const uint8_t *bytes,
                                     size_t length, int expected_rank, int *kind,
                                     uint8_t expect[KOLO_SHA256_BYTES], int64_t deadline_ns) {
  kolo_hello hello;
  size_t used = 0;
  if (kolo_hello_decode(bytes, length, &hello, &used) != KOLO_OK || used != length) {
    KOLO_LOGW("kolo", "rank %d: refused a connection: not a kolo hello", net->rank);
    return KOLO_ERR_PROTOCOL; /* not worth an answer */
  }
  *kind = hello.kind;
  kolo_status verdict = judge_hello(net, &hello, expected_rank);
  uint8_t challenge[4 + KOLO_HANDSHAKE_NONCE_BYTES + KOLO_SHA256_BYTES];
  if (verdict == KOLO_OK &&
      getrandom(challenge + 4, KOLO_HANDSHAKE_NONCE_BYTES, 0) != KOLO_HANDSHAKE_NONCE_BYTES)
    verdict = KOLO_ERR_SYSTEM;
  if (verdict != KOLO_OK) {
    uint8_t ack[KOLO_ACK_BYTES];
    kolo_ack_encode(ack, verdict, 0);
    kolo_transport_send_all(net->transport, conn, ack, sizeof ack, deadline_ns);
    return verdict;
  }
  const uint8_t *nonce = challenge + 4;
  kolo_put32(challenge, CHALLENGE_MAGIC);
  kolo_handshake_proof(net->secret, 1, bytes, length, nonce,
                       challenge + 4 + KOLO_HANDSHAKE_NONCE_BYTES);
  kolo_handshake_proof(net->secret, 0, bytes, length, nonce, expect);
  return kolo_transport_send_all(net->transport, conn, challenge, sizeof challenge, deadline_ns);
}

kolo_status kolo_handshake_finish(kolo_net *net, kolo_transport_conn *conn,
                                  const uint8_t *hello_bytes, size_t hello_length,
                                  const uint8_t *proof, const uint8_t *expect, kolo_channel *bulk,
                                  int64_t deadline_ns) {
  *bulk = (kolo_channel){0};
  kolo_hello hello;
  size_t used = 0;
  kolo_status verdict = KOLO_OK;
  if (kolo_hello_decode(hello_bytes, hello_length, &hello, &used) != KOLO_OK ||
      kolo_get32(proof) != PROOF_MAGIC)
    verdict = KOLO_ERR_PROTOCOL;
  else if (!kolo_bytes_equal(proof + 4, expect, KOLO_SHA256_BYTES))
    verdict = KOLO_ERR_AUTH;
  if (verdict == KOLO_ERR_AUTH)
    KOLO_LOGW("kolo", "rank %d epoch %llu: refused a connection from rank %d: wrong secret",
              net->rank, (unsigned long long)net->epoch, hello.rank);
  int bulk_taken = 0;
  if (verdict == KOLO_OK && hello.kind == KOLO_CONNECTION_BELL && hello.offer_name[0] != '\0')
    bulk_taken = kolo_bulk_accept(hello.offer_name, hello.nonce, conn, bulk) == KOLO_OK;
  uint8_t ack[KOLO_ACK_BYTES];
  kolo_ack_encode(ack, verdict, bulk_taken);
  kolo_transport_send_all(net->transport, conn, ack, sizeof ack, deadline_ns);
  return verdict;
}
