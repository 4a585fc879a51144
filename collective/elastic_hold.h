/* The process side of the partition fence (elastic_hold.c), for collective/elastic.c.
 * Internal to libkolo. */
#ifndef KOLO_COLLECTIVE_ELASTIC_HOLD_H
#define KOLO_COLLECTIVE_ELASTIC_HOLD_H

#include <pthread.h>

#include "common/agent_proto.h"
#include "kolo/kolo.h"

/* HOLD / RELEASE from the agent (on the elastic context's reader thread). Under mutex (the
 * context's), sets *held and holds or releases *current, the current communicator (NULL: none);
 * a communicator formed later starts held while *held (elastic.c: kolo_comm_hold). Held, it
 * starts no new collective and kolo_elastic_commit waits, until RELEASE; the beat goes on
 * meanwhile. */
void kolo_elastic_on_hold(pthread_mutex_t *mutex, int *held, kolo_comm *const *current,
                          const kolo_agent_msg *msg);

#endif
