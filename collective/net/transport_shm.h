/* Shared-memory data connections between ranks on one host (transport_shm.c):
 * the offer made by the connecting side, its acceptance, and the ops table. */
#ifndef KOLO_COLLECTIVE_TRANSPORT_SHM_H
#define KOLO_COLLECTIVE_TRANSPORT_SHM_H

#include <stdint.h>

#include "collective/net/transport.h"

#define KOLO_SHM_NAME_BYTES 64

typedef struct kolo_shm_offer kolo_shm_offer;

/* Data connections only. Connection setup (listen, accept, connect) stays TCP. */
extern const kolo_transport_ops kolo_transport_shm;

/* Whether shared memory may be offered (KOLO_SHM=0 turns it off). */
int kolo_shm_enabled(void);

/* Connecting side: creates a ring (KOLO_SHM_BYTES, default 2 MiB) under a fresh
 * name. KOLO_ERR_UNSUPPORTED when shared memory is unavailable. */
kolo_status kolo_shm_offer_create(kolo_shm_offer **out);
const char *kolo_shm_offer_name(const kolo_shm_offer *offer);
uint64_t kolo_shm_offer_nonce(const kolo_shm_offer *offer);
/* The acceptor took the offer: *out (writer side) wraps tcp and owns it and the
 * mapping; the offer is freed. */
kolo_status kolo_shm_offer_accepted(kolo_shm_offer *offer, kolo_transport_conn *tcp,
                                    kolo_transport_conn **out);
/* Unlinks and frees an offer that was not taken; NULL is a no-op. */
void kolo_shm_offer_destroy(kolo_shm_offer *offer);

/* Accepting side: opens the named ring and checks its nonce; *out (reader side)
 * wraps tcp. KOLO_ERR_UNSUPPORTED when it cannot be opened (another host). */
kolo_status kolo_shm_accept(const char *name, uint64_t nonce, kolo_transport_conn *tcp,
                            kolo_transport_conn **out);

#endif
