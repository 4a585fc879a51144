/* Channels and the bulk upgrade. The ring's directions are built here from the
 * connections form.c accepted or dialled: the TCP data connection is every
 * direction's small channel; the bell connection becomes the bulk channel when
 * the neighbour could map the shared-memory ring offered on it. This is the one
 * place that names the shared-memory transport, so a further bulk transport is
 * added here (and in its own transport file) without touching the executor,
 * the handshake or ring formation. */
#include <stdlib.h>
#include <string.h>

#include "collective/net/channel.h"
#include "collective/net/transport_shm.h"

_Static_assert(KOLO_SHM_NAME_BYTES <= KOLO_BULK_NAME_BYTES, "offer names fit the hello");

struct kolo_bulk_offer {
  kolo_shm_offer *shm;
};

kolo_status kolo_channel_send_all(const kolo_channel *channel, const void *buffer, size_t length,
                                  int64_t deadline_ns) {
  return kolo_transport_send_all(channel->ops, channel->conn, buffer, length, deadline_ns);
}

kolo_status kolo_channel_recv_all(const kolo_channel *channel, void *buffer, size_t length,
                                  int64_t deadline_ns) {
  return kolo_transport_recv_all(channel->ops, channel->conn, buffer, length, deadline_ns);
}

void kolo_channel_close(kolo_channel *channel) {
  if (channel->ops != NULL) channel->ops->close(channel->conn);
  channel->ops = NULL;
  channel->conn = NULL;
}

void kolo_direction_close(kolo_direction *direction) {
  if (direction->bulk_owned) kolo_channel_close(&direction->bulk);
  kolo_channel_close(&direction->small);
  direction->bulk = direction->small;
  direction->bulk_owned = 0;
}

void kolo_bulk_offer_create(kolo_bulk_offer **out) {
  *out = NULL;
  if (!kolo_shm_enabled()) return;
  kolo_bulk_offer *offer = calloc(1, sizeof *offer);
  if (offer == NULL) return;
  if (kolo_shm_offer_create(&offer->shm) != KOLO_OK) {
    free(offer);
    return;
  }
  *out = offer;
}

const char *kolo_bulk_offer_name(const kolo_bulk_offer *offer) {
  return offer ? kolo_shm_offer_name(offer->shm) : "";
}

uint64_t kolo_bulk_offer_nonce(const kolo_bulk_offer *offer) {
  return offer ? kolo_shm_offer_nonce(offer->shm) : 0;
}

kolo_status kolo_bulk_offer_accepted(kolo_bulk_offer *offer, kolo_transport_conn *bell,
                                     kolo_direction *direction) {
  kolo_transport_conn *conn = NULL;
  kolo_status status = kolo_shm_offer_accepted(offer->shm, bell, &conn);
  if (status != KOLO_OK) kolo_shm_offer_destroy(offer->shm); /* bell stays the caller's */
  free(offer);
  if (status != KOLO_OK) return status;
  direction->bulk = (kolo_channel){.ops = &kolo_transport_shm, .conn = conn};
  direction->bulk_owned = 1;
  return KOLO_OK;
}

void kolo_bulk_offer_destroy(kolo_bulk_offer *offer) {
  if (offer == NULL) return;
  kolo_shm_offer_destroy(offer->shm);
  free(offer);
}

kolo_status kolo_bulk_accept(const char *name, uint64_t nonce, kolo_transport_conn *bell,
                             kolo_channel *out) {
  kolo_transport_conn *conn = NULL;
  kolo_status status = kolo_shm_accept(name, nonce, bell, &conn);
  if (status != KOLO_OK) return status;
  *out = (kolo_channel){.ops = &kolo_transport_shm, .conn = conn};
  return KOLO_OK;
}

int kolo_channel_is_bulk(const kolo_channel *channel) {
  return channel->ops == &kolo_transport_shm;
}
