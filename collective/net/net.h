/* The network floor of libkolo (collective/net/): what the ring's connections
 * are made of and how they are made. Transports (transport.h: TCP, shared
 * memory), channels and directions (channel.h), the handshake of a fresh
 * connection and its wire records (handshake.c), ring formation (form.c), the
 * control links' messages and their read state, and the listener. Nothing here
 * knows a request, a plan or the engine. */
#ifndef KOLO_COLLECTIVE_NET_NET_H
#define KOLO_COLLECTIVE_NET_NET_H

#include <pthread.h>
#include <stdatomic.h>
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

/* The ring's shape as every rank sees it alike (mesh.c): hosts are the runs of
 * consecutive ranks whose addresses name the same host. */
typedef struct kolo_shape {
  int hosts;    /* runs of consecutive ranks on one host */
  int per_host; /* ranks on every host when all hosts have as many, else 0 */
  int host;     /* this rank's run */
  int local;    /* this rank's place in its run */
} kolo_shape;

/* The net floor's part of a communicator: who this rank is in which ring, the
 * ring's connections, the control links, and the failure record (fault.c: the
 * first failure wins; on_fail hears of it at once, never blocking: the
 * communicator points it at the device path, so this floor calls nothing
 * above it). */
typedef struct kolo_net {
  uint64_t epoch;
  int rank, size, local_rank, local_size;
  int timeout_ms;
  /* form.c: the formation gives up (KOLO_ERR_ABORTED) once this says its epoch is
   * superseded (an elastic process's agent announced a newer ring); NULL: never */
  int (*superseded)(void *context, uint64_t epoch);
  void *superseded_context;
  char **peers;
  char *secret;
  /* connection setup: listen, dial, handshakes, control links (TCP) */
  const kolo_transport_ops *transport;
  /* the ring's two directions (unconnected when size == 1): each has a small
   * channel (TCP, lowest latency) and a bulk one (a shared-memory ring when the
   * neighbour shares the host, else the same TCP channel) */
  kolo_direction next;          /* we send data to rank + 1 */
  kolo_direction prev;          /* we receive data from rank - 1 */
  size_t bulk_min_bytes;        /* operations of at least this many bytes use the bulk channels */
  kolo_control_link control[2]; /* [0] to rank + 1, [1] to rank - 1 */
  atomic_int peer_timeout_ms;   /* beat.c: a neighbour silent this long is lost (0: never) */
  int64_t own_gap_max_ns;       /* beat.c: longest recent gap between this rank's own beats */
  int wake_fd;                  /* eventfd: wakes the negotiator (queue, abort, stop) */
  int fail_fd;                  /* eventfd: readable forever once the communicator failed */
  /* failure: first one wins */
  atomic_int failed;
  pthread_mutex_t error_mutex;
  kolo_status error;
  int failed_rank;
  char error_message[256];
  /* a failure for the neighbours, sent by the negotiator (the links' one writer) */
  kolo_control_message outbox;
  atomic_int outbox_pending;
  void (*on_fail)(void *context); /* told of the first failure; may be NULL */
  void *on_fail_context;
  /* mesh.c: the ring's shape (hosts from the peers' addresses) and the links
   * beyond the ring neighbours that its algorithms need (one bidirectional TCP
   * connection per pair, mesh[peer]; ops NULL where there is none) */
  kolo_shape shape;
  kolo_channel *mesh;
} kolo_net;

/* Records the first failure, wakes every waiter and tells the ring neighbours.
 * Never blocks. Later failures are ignored. */
void kolo_net_fail(kolo_net *net, kolo_status status, int failed_rank, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Like kolo_net_fail, without telling the neighbours: for a failure every rank
 * decides by itself from the same negotiation (a stall), so each keeps the full
 * message instead of a forwarded one. */
void kolo_net_fail_local(kolo_net *net, kolo_status status, int failed_rank, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Reads what a control link has to say; marks failure on a message or EOF. */
void kolo_control_service(kolo_net *net, kolo_control_link *link);

/* What one 16-byte control-link message is (fault.c; pure, fuzzed): a beat, the
 * header of a negotiation frame (only from the previous rank, at most
 * KOLO_NEGO_MAX_FRAME bytes), a goodbye (status OK), a failure (a kolo status
 * naming a failed rank -1..size-1 reported by an origin 0..size-1), or garbage. */
typedef enum kolo_control_kind {
  KOLO_CONTROL_GARBAGE = 0,
  KOLO_CONTROL_BEAT,
  KOLO_CONTROL_FRAME,
  KOLO_CONTROL_GOODBYE,
  KOLO_CONTROL_FAILURE,
} kolo_control_kind;
kolo_control_kind kolo_control_classify(const kolo_control_message *message, int from_prev,
                                        int size);

/* Sends a control message on both links (skipping the link to skip_rank);
 * best effort, never blocks. Negotiator thread only. */
void kolo_control_send(kolo_net *net, const kolo_control_message *message, int skip_rank);

/* ---- the liveness beat (beat.c), run by the negotiator thread ---- */
/* KOLO_PEER_TIMEOUT in ms (seconds in the environment, fractions allowed; 0 =
 * never judge; at least three beat intervals), fallback_ms when unset or not a
 * number. */
int kolo_peer_timeout_ms_from_env(int fallback_ms);
/* Sets the timeout the beat judges neighbours by (any thread; 0 = never). */
void kolo_net_set_peer_timeout(kolo_net *net, int timeout_ms);
/* Whether a link last heard at heard_ns is silent at now_ns (pure). */
int kolo_beat_silent(int64_t heard_ns, int64_t now_ns, int timeout_ms);
/* Starts the beat of a formed communicator (on the negotiator thread). */
void kolo_beat_start(kolo_net *net);
/* Something arrived on link; a beat arrived on it. */
void kolo_beat_heard(kolo_control_link *link);
void kolo_beat_received(kolo_control_link *link);
/* The decaying maximum after a gap (pure): a longer gap replaces it, a shorter
 * one pulls it down by 1/64 of the difference. */
int64_t kolo_beat_gap_update(int64_t gap_max_ns, int64_t gap_ns);
/* The timeout a link is judged by (pure): the configured one, stretched to
 * KOLO_BEAT_SLACK x the longest recent gap, at most KOLO_BEAT_MAX_STRETCH x the
 * configured one; 0 when judging is off. */
int kolo_beat_timeout_ms(int timeout_ms, int64_t gap_max_ns);
/* The jitter a link is judged by (pure): the longer of the gaps seen between its
 * peer's beats and between this rank's own (how late this host let the negotiator
 * thread run: the same load delays a neighbour on it, before any of its beats
 * arrived late). */
int64_t kolo_beat_jitter_ns(int64_t link_gap_max_ns, int64_t own_gap_max_ns);
/* Sends the beats that are due; returns how long the caller may wait (ms)
 * before the next beat or silence deadline, or -1 for no limit. Never blocks
 * longer than the peer timeout. */
int kolo_beat_tick(kolo_net *net);
/* Fails the communicator (KOLO_ERR_PEER_LOST) for a link silent past the
 * timeout, after reading what is pending on it. */
void kolo_beat_check(kolo_net *net);
/* The oldest complete negotiation frame a link delivered (the caller frees it), or NULL. */
kolo_frame *kolo_control_take_frame(kolo_control_link *link);
/* Frees a link's partial and queued frames. */
void kolo_control_link_clear(kolo_control_link *link);

/* The failure, or KOLO_OK (and *failed_rank -1) while none was recorded; the
 * message of the first failure ("" when none). */
kolo_status kolo_net_error(const kolo_net *net, int *failed_rank);
void kolo_net_error_message(const kolo_net *net, char *buffer, size_t length);
/* Rings the wake eventfd: the negotiator looks at the links and the outbox
 * (new submissions, a failure to send, stop). Never blocks. */
void kolo_net_wake(kolo_net *net);

/* Forms the ring (form.c): dials rank + 1, accepts rank - 1, fills the
 * communicator's directions and control links. Blocks until the timeout. */
kolo_status kolo_form_ring(kolo_net *net, kolo_listener *listener);

/* ---- the mesh (mesh.c): links beyond the ring neighbours ---- */
/* The shape of a ring of size ranks with these addresses ("host:port"), seen
 * from rank (pure). */
kolo_shape kolo_shape_from_peers(char *const *peers, int size, int rank);
/* Recursive doubling's partners (pure): n ranks fold onto p = the largest power
 * of two <= n; ranks below 2(n-p) pair up (even r gives to r+1, which takes
 * part as new rank r/2; even r returns -1), the others are new rank r-(n-p). */
int kolo_doubling_pow2(int size);
int kolo_doubling_newrank(int size, int rank);
int kolo_doubling_oldrank(int size, int newrank);
/* Whether ranks a and b need a mesh link (pure, symmetric): recursive
 * doubling's partners and folds (size >= 3), and with an even shape of at
 * least 2 hosts x 2 ranks, the two-level all-reduce's cross-host rings (rank
 * +- per_host) and each host's wrap (its last rank to its first). */
int kolo_mesh_wants(const kolo_shape *shape, int size, int a, int b);
/* Forms the mesh after kolo_form_ring: waits until every rank formed its ring
 * links (a pass over the data links), then the lower rank of each pair dials
 * the higher on the listener, behind the usual handshake. Blocks until the
 * timeout; no links and KOLO_OK when none are wanted (KOLO_MESH=0: none). */
kolo_status kolo_form_mesh(kolo_net *net, kolo_listener *listener);
/* Closes and frees the mesh links. */
void kolo_mesh_close(kolo_net *net);

/* Handshake of a fresh connection (connector side / acceptor side). */
#define KOLO_CONNECTION_DATA 1
#define KOLO_CONNECTION_CONTROL 2
#define KOLO_CONNECTION_BELL 3 /* doorbell of a shared-memory ring */
#define KOLO_CONNECTION_MESH 4 /* a mesh link (mesh.c) */
/* The handshake (handshake.c, protocol version 3: the secret is proven, never sent). */
#define KOLO_HANDSHAKE_NONCE_BYTES 16
/* Connector: sends the hello (offer: a bulk transport offered on this bell connection, or
 * NULL); its bytes (at most KOLO_HELLO_MAX_BYTES) are kept in bytes/length for the proofs. */
kolo_status kolo_handshake_send_hello(kolo_net *net, kolo_transport_conn *conn, int kind,
                                      const kolo_bulk_offer *offer, uint8_t *bytes, size_t *length,
                                      int64_t deadline_ns);
/* Connector: reads what the acceptor answered. Before our proof (*proved == 0): a refusal
 * (its verdict), or a challenge whose proof is checked (KOLO_ERR_AUTH when the acceptor
 * does not know the secret; nothing is sent to it then), and our proof sent: KOLO_OK with
 * *proved = 1, the ack still to come. After it: the ack's verdict; *bulk_taken says
 * whether the peer took the offered bulk transport. */
kolo_status kolo_handshake_read_reply(kolo_net *net, kolo_transport_conn *conn,
                                      const uint8_t *hello, size_t hello_length, int *proved,
                                      int *bulk_taken, int64_t deadline_ns);
/* Acceptor: judges the whole hello in bytes (read by the caller: form.c reads many at once);
 * *kind is its connection kind. A refusal is acked and returned; KOLO_OK: the challenge was
 * sent and expect holds the proof the connector must answer (KOLO_HANDSHAKE_PROOF_BYTES
 * more bytes). Not a kolo hello: KOLO_ERR_PROTOCOL and no answer. */
kolo_status kolo_handshake_challenge(kolo_net *net, kolo_transport_conn *conn, const uint8_t *bytes,
                                     size_t length, int expected_rank, int *kind,
                                     uint8_t expect[32], int64_t deadline_ns);
#define KOLO_HANDSHAKE_PROOF_BYTES (4 + 32)
/* Acceptor: checks the connector's proof and acks. When the hello offers a bulk transport
 * this host can open, *bulk is set to the reader side, which owns conn from then on; else
 * bulk->ops stays NULL. */
kolo_status kolo_handshake_finish(kolo_net *net, kolo_transport_conn *conn,
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
