/* The network floor of libkolo (collective/net/): what the ring's connections
 * are made of and how they are made. Transports (transport.h: TCP, shared
 * memory), channels and directions (channel.h), the handshake of a fresh
 * connection and its wire records (handshake.c), ring formation (form.c), the
 * control links' messages and their read state, and the listener. Nothing here
 * knows a request, a plan or the engine. */
#ifndef KOLO_COLLECTIVE_NET_NET_H
#define KOLO_COLLECTIVE_NET_NET_H

#include <stddef.h>
#include <stdint.h>

#include "collective/net/channel.h"
#include "collective/net/transport.h"
#include "kolo/kolo.h"

/* Big-endian 32-bit fields of the handshake and rendezvous messages. */
static inline void kolo_put32(uint8_t *out, uint32_t value) {
  out[0] = (uint8_t)(value >> 24);
  out[1] = (uint8_t)(value >> 16);
  out[2] = (uint8_t)(value >> 8);
  out[3] = (uint8_t)value;
}

static inline uint32_t kolo_get32(const uint8_t *in) {
  return ((uint32_t)in[0] << 24) | ((uint32_t)in[1] << 16) | ((uint32_t)in[2] << 8) | in[3];
}

/* The longest job secret a hello may carry. */
#define KOLO_MAX_SECRET_BYTES 1024

/* Control message sent over the control connections when a communicator fails. */
typedef struct kolo_control_message {
  uint32_t magic;
  int32_t status;
  int32_t failed_rank;
  int32_t origin_rank;
} kolo_control_message;

#define KOLO_CONTROL_MAGIC 0x4b43544cu /* "KCTL" */
/* A liveness beat (beat.c): no content, only that the sender is alive. */
#define KOLO_BEAT_MAGIC 0x4b424541u /* "KBEA" */
#define KOLO_BEAT_INTERVAL_MS 100
#define KOLO_DEFAULT_PEER_TIMEOUT_MS 500
/* A negotiation frame: the header is a kolo_control_message whose status is the
 * payload length, failed_rank the cycle and origin_rank the rank whose message
 * the payload is; it travels from a rank to the next one only. */
#define KOLO_NEGO_MAGIC 0x4b4e4547u /* "KNEG" */
#define KOLO_NEGO_MAX_FRAME (16u * 1024u * 1024u)

/* A complete negotiation frame read from the previous rank. */
typedef struct kolo_frame {
  struct kolo_frame *next;
  uint32_t cycle;
  int32_t origin;
  uint32_t length;
  uint8_t data[];
} kolo_frame;

/* A control connection, the bytes of a partial message read from it, and the
 * negotiation frames it delivered that the negotiator has not used yet. */
typedef struct kolo_control_link {
  kolo_channel channel;
  int peer_rank;
  int open;
  size_t filled;
  kolo_control_message message;
  kolo_frame *frame; /* a frame whose payload is being read */
  size_t frame_filled;
  kolo_frame *frames_head, *frames_tail;
  int64_t heard_ns;      /* beat.c: when anything last arrived on this link */
  int64_t beat_due_ns;   /* beat.c: when the next beat is sent on it */
  int64_t beat_heard_ns; /* beat.c: when the last beat arrived (0: none yet) */
  int64_t gap_max_ns;    /* beat.c: the longest recent gap between beats (decaying) */
} kolo_control_link;

/* Forms the ring (form.c): dials rank + 1, accepts rank - 1, fills the
 * communicator's directions and control links. Blocks until the timeout. */
kolo_status kolo_form_ring(kolo_comm *comm, kolo_listener *listener);

/* Handshake of a fresh connection (connector side / acceptor side). */
#define KOLO_CONNECTION_DATA 1
#define KOLO_CONNECTION_CONTROL 2
#define KOLO_CONNECTION_BELL 3 /* doorbell of a shared-memory ring */
/* The handshake (handshake.c, protocol version 3: the secret is proven, never sent). */
#define KOLO_HANDSHAKE_NONCE_BYTES 16
/* Connector: sends the hello (offer: a bulk transport offered on this bell connection, or
 * NULL); its bytes (at most KOLO_HELLO_MAX_BYTES) are kept in bytes/length for the proofs. */
kolo_status kolo_handshake_send_hello(kolo_comm *comm, kolo_transport_conn *conn, int kind,
                                      const kolo_bulk_offer *offer, uint8_t *bytes, size_t *length,
                                      int64_t deadline_ns);
/* Connector: reads what the acceptor answered. Before our proof (*proved == 0): a refusal
 * (its verdict), or a challenge whose proof is checked (KOLO_ERR_AUTH when the acceptor
 * does not know the secret; nothing is sent to it then), and our proof sent: KOLO_OK with
 * *proved = 1, the ack still to come. After it: the ack's verdict; *bulk_taken says
 * whether the peer took the offered bulk transport. */
kolo_status kolo_handshake_read_reply(kolo_comm *comm, kolo_transport_conn *conn,
                                      const uint8_t *hello, size_t hello_length, int *proved,
                                      int *bulk_taken, int64_t deadline_ns);
/* Acceptor: judges the whole hello in bytes (read by the caller: form.c reads many at once);
 * *kind is its connection kind. A refusal is acked and returned; KOLO_OK: the challenge was
 * sent and expect holds the proof the connector must answer (KOLO_HANDSHAKE_PROOF_BYTES
 * more bytes). Not a kolo hello: KOLO_ERR_PROTOCOL and no answer. */
kolo_status kolo_handshake_challenge(kolo_comm *comm, kolo_transport_conn *conn,
                                     const uint8_t *bytes, size_t length, int expected_rank,
                                     int *kind, uint8_t expect[32], int64_t deadline_ns);
#define KOLO_HANDSHAKE_PROOF_BYTES (4 + 32)
/* Acceptor: checks the connector's proof and acks. When the hello offers a bulk transport
 * this host can open, *bulk is set to the reader side, which owns conn from then on; else
 * bulk->ops stays NULL. */
kolo_status kolo_handshake_finish(kolo_comm *comm, kolo_transport_conn *conn,
                                  const uint8_t *hello_bytes, size_t hello_length,
                                  const uint8_t *proof, const uint8_t *expect, kolo_channel *bulk,
                                  int64_t deadline_ns);
/* HMAC-SHA-256(secret, label | hello | nonce), label "kolo-ring-acceptor" (acceptor = 1) or
 * "kolo-ring-connector" (with its NUL): each side's proof of the secret. */
void kolo_handshake_proof(const char *secret, int acceptor, const uint8_t *hello,
                          size_t hello_length, const uint8_t *nonce, uint8_t out[32]);

/* The handshake's wire records as pure functions (handshake.c; fuzzed by
 * tests/fuzz/fuzz_ring_wire.c). A hello is a 28-byte header (magic, version << 16 |
 * kind, epoch, rank, size, nonce length), the connector's nonce (version 2: the secret,
 * whose fields kolo_hello still names it by), a 12-byte offer header (name length, nonce)
 * and the offer's name; a challenge is magic "KCHL", the acceptor's nonce and its proof; a
 * proof is magic "KPRF" and the connector's proof; an ack is magic, verdict, bulk taken. */
#define KOLO_HELLO_HEADER_BYTES 28
#define KOLO_HELLO_OFFER_BYTES 12
#define KOLO_HELLO_MAX_BYTES \
  (KOLO_HELLO_HEADER_BYTES + KOLO_MAX_SECRET_BYTES + KOLO_HELLO_OFFER_BYTES + KOLO_BULK_NAME_BYTES)
#define KOLO_ACK_BYTES 12
typedef struct kolo_hello {
  int kind;
  uint64_t epoch;
  int rank, size; /* as sent: a u32 read as int */
  uint32_t secret_length;
  char secret[KOLO_MAX_SECRET_BYTES];
  uint32_t name_length;
  char offer_name[KOLO_BULK_NAME_BYTES + 1]; /* NUL-terminated; "" = no offer */
  uint64_t nonce;
} kolo_hello;
/* Writes the hello (this protocol version) into out; returns its length. The
 * secret and the name must fit (secret_length <= KOLO_MAX_SECRET_BYTES, name_length
 * <= KOLO_BULK_NAME_BYTES). */
size_t kolo_hello_encode(const kolo_hello *hello, uint8_t *out);
/* The fixed header: KOLO_ERR_PROTOCOL when it is not a hello of this version or
 * announces a secret longer than KOLO_MAX_SECRET_BYTES (not worth an answer). */
kolo_status kolo_hello_decode_header(const uint8_t *header, kolo_hello *hello);
/* The offer header: KOLO_ERR_PROTOCOL when the name is longer than KOLO_BULK_NAME_BYTES. */
kolo_status kolo_hello_decode_offer(const uint8_t *offer, kolo_hello *hello);
/* A whole hello from length bytes, as the acceptor reads it piece by piece;
 * *used is its length. KOLO_ERR_PROTOCOL when bad or incomplete. */
kolo_status kolo_hello_decode(const uint8_t *bytes, size_t length, kolo_hello *hello, size_t *used);
/* How many bytes the hello starting at bytes (have of them read) is known to need so far:
 * the header, then up to the offer header, then all of it (== have when it is whole); 0 when
 * what was read is no kolo hello of this version. */
size_t kolo_hello_bytes_needed(const uint8_t *bytes, size_t have);
/* The verdict on a well-formed hello for a ring of (epoch, size) expecting expected_rank,
 * before any proof: KOLO_ERR_STALE_EPOCH, KOLO_ERR_PROTOCOL (rank, size, kind, or a nonce
 * that is not KOLO_HANDSHAKE_NONCE_BYTES long), or KOLO_OK. */
kolo_status kolo_hello_judge(const kolo_hello *hello, uint64_t epoch, int size, int expected_rank);
void kolo_ack_encode(uint8_t *ack, kolo_status verdict, int bulk_taken);
/* The acceptor's verdict; KOLO_ERR_PROTOCOL for a wrong magic or a verdict that
 * is no kolo status. */
kolo_status kolo_ack_decode(const uint8_t *ack, int *bulk_taken);

struct kolo_listener {
  const kolo_transport_ops *transport;
  kolo_transport_listener *listener;
};

#endif
