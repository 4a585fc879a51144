/* Channels: one direction of a connection as an {ops, connection} pair, so the
 * code that moves bytes (the executor, the control links) calls through the
 * table it was given and never names a transport. Each ring direction has two:
 * `small` (the TCP data connection) and `bulk` (a shared-memory ring when the
 * neighbour shares the host, else the same TCP channel); which transport backs
 * each is decided once, when the ring forms (channel.c, the only file besides
 * the transports themselves that knows which transports exist). */
#ifndef KOLO_COLLECTIVE_CHANNEL_H
#define KOLO_COLLECTIVE_CHANNEL_H

#include <stddef.h>
#include <stdint.h>

#include "collective/net/transport.h"

typedef struct kolo_channel {
  const kolo_transport_ops *ops; /* NULL when the channel is not connected */
  kolo_transport_conn *conn;
} kolo_channel;

/* One direction of the ring (to the next rank, or from the previous one). */
typedef struct kolo_direction {
  kolo_channel small; /* TCP: lowest latency for small operations */
  kolo_channel bulk;  /* the bulk transport, or a copy of small when there is none */
  int bulk_owned;     /* bulk is its own connection (closed apart from small) */
} kolo_direction;

/* Never block; same contracts as the kolo_transport_ops members. */
static inline kolo_status kolo_channel_send(const kolo_channel *channel, const void *buffer,
                                            size_t length, size_t *moved) {
  return channel->ops->send(channel->conn, buffer, length, moved);
}

static inline kolo_status kolo_channel_recv(const kolo_channel *channel, void *buffer,
                                            size_t length, size_t *moved) {
  return channel->ops->recv(channel->conn, buffer, length, moved);
}

/* Whether the channel can show received bytes in place (peek/consume). */
static inline int kolo_channel_can_peek(const kolo_channel *channel) {
  return channel->ops->peek != NULL;
}

static inline kolo_status kolo_channel_peek(const kolo_channel *channel, const void **data,
                                            size_t length, size_t *available) {
  return channel->ops->peek(channel->conn, data, length, available);
}

static inline void kolo_channel_consume(const kolo_channel *channel, size_t bytes) {
  channel->ops->consume(channel->conn, bytes);
}

static inline int kolo_channel_poll_fd(const kolo_channel *channel) {
  return channel->ops->poll_fd(channel->conn);
}

static inline short kolo_channel_poll_events(const kolo_channel *channel, int sending) {
  return channel->ops->poll_events(channel->conn, sending);
}

/* 1 when it is safe to sleep in poll (see kolo_transport_ops.prepare_wait). */
static inline int kolo_channel_prepare_wait(const kolo_channel *channel, int sending) {
  return channel->ops->prepare_wait == NULL || channel->ops->prepare_wait(channel->conn, sending);
}

/* Blocking helpers with a deadline, for handshakes and control messages. */
kolo_status kolo_channel_send_all(const kolo_channel *channel, const void *buffer, size_t length,
                                  int64_t deadline_ns);
kolo_status kolo_channel_recv_all(const kolo_channel *channel, void *buffer, size_t length,
                                  int64_t deadline_ns);

/* Closes the connection (if any) and clears the channel; never blocks. */
void kolo_channel_close(kolo_channel *channel);

/* The channel an operation of op_bytes uses in this direction: bulk from
 * bulk_min_bytes on (op_bytes and bulk_min_bytes are the same on every rank, and
 * a writer has a bulk channel exactly when its reader has one, so both ends of a
 * direction always pick the same one). */
static inline const kolo_channel *kolo_direction_pick(const kolo_direction *direction,
                                                      size_t op_bytes, size_t bulk_min_bytes) {
  return op_bytes >= bulk_min_bytes ? &direction->bulk : &direction->small;
}

/* Closes both channels of a direction. */
void kolo_direction_close(kolo_direction *direction);

/* ---- the bulk upgrade, negotiated on the bell connection at ring formation ----
 * The connecting side creates an offer (a transport-specific rendezvous: a name
 * and a nonce) and sends it in its hello; the accepting side tries to take it and
 * says so in its ack. Today the one bulk transport is shared memory. */
typedef struct kolo_bulk_offer kolo_bulk_offer;

#define KOLO_BULK_NAME_BYTES 64

/* *out = an offer, or NULL when no bulk transport is enabled or available here. */
void kolo_bulk_offer_create(kolo_bulk_offer **out);
const char *kolo_bulk_offer_name(const kolo_bulk_offer *offer); /* "" for NULL */
uint64_t kolo_bulk_offer_nonce(const kolo_bulk_offer *offer);   /* 0 for NULL */
/* The peer took the offer: direction->bulk becomes the writer side wrapping
 * bell (which it now owns); the offer is consumed. */
kolo_status kolo_bulk_offer_accepted(kolo_bulk_offer *offer, kolo_transport_conn *bell,
                                     kolo_direction *direction);
/* Frees an offer that was not taken; NULL is a no-op. */
void kolo_bulk_offer_destroy(kolo_bulk_offer *offer);

/* Accepting side: tries to open the offered rendezvous; on success *out is the
 * reader side wrapping bell (and owns it). KOLO_ERR_UNSUPPORTED when it cannot
 * be opened here (another host). */
kolo_status kolo_bulk_accept(const char *name, uint64_t nonce, kolo_transport_conn *bell,
                             kolo_channel *out);

/* Whether an accepted channel is a bulk one (as opposed to plain TCP). */
int kolo_channel_is_bulk(const kolo_channel *channel);

#endif
