/* The engine floor of libkolo (collective/engine/): the negotiator thread
 * (engine.c) that agrees with the other ranks which named operations are ready
 * (negotiate.h), the names table (names.h), the response cache and the
 * timeline (timeline.h). */
#ifndef KOLO_COLLECTIVE_ENGINE_ENGINE_H
#define KOLO_COLLECTIVE_ENGINE_ENGINE_H

#include "kolo/kolo.h"

/* The engine (engine.c): the negotiator thread. */
kolo_status kolo_engine_start(kolo_comm *comm);
/* Wakes the negotiator (new submissions, a failure to send, stop). Never blocks. */
void kolo_engine_wake(kolo_comm *comm);
/* Stops and joins the negotiator: fails what it holds, sends the outbox or a goodbye. */
void kolo_engine_stop(kolo_comm *comm);
/* Hands a negotiated request to the negotiator (under comm->mutex). */
void kolo_engine_submit_locked(kolo_comm *comm, kolo_request *request);
/* Frees the engine (after kolo_engine_stop). */
void kolo_engine_free(kolo_comm *comm);
struct kolo_timeline;
/* The engine's timeline, or NULL when KOLO_TIMELINE is unset. */
struct kolo_timeline *kolo_engine_timeline(kolo_comm *comm);


#endif
