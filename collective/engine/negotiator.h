/* The engine floor of libkolo (collective/engine/): the negotiator thread
 * (negotiator.c) that agrees with the other ranks which named operations are ready
 * (negotiate.h), the names table (names.h), the response cache and the
 * timeline (timeline.h). It reads and writes the control links (net/) and hands
 * what every rank agreed on to the executor's queue (exec/). */
#ifndef KOLO_COLLECTIVE_ENGINE_NEGOTIATOR_H
#define KOLO_COLLECTIVE_ENGINE_NEGOTIATOR_H

#include <pthread.h>
#include <stdint.h>

#include "collective/exec/exec.h"
#include "collective/net/net.h"
#include "kolo/engine.h"
#include "kolo/kolo.h"

/* The engine floor's part of a communicator. Its fields are guarded by
 * queue->mutex (the executor's queue, shared with the face's submissions). */
typedef struct kolo_negotiator {
  kolo_net *net;
  kolo_queue *queue;
  kolo_comm *comm; /* the communicator the engine's own requests belong to (opaque here) */
  pthread_t negotiator;
  int negotiator_started;
  struct kolo_engine *engine;
  kolo_request *inbox_head, *inbox_tail; /* negotiated requests not yet taken */
  int named_mode;          /* a named operation was submitted here: unnamed ones are negotiated */
  uint64_t unnamed_issued; /* unnamed operations issued here (direct and negotiated) */
  int hurry;               /* a thread waits on a negotiated request: negotiate now */
  int say_goodbye;         /* destroy: tell the neighbours before closing */
  int negotiator_stopping;
} kolo_negotiator;

/* Starts the negotiator thread. */
kolo_status kolo_engine_start(kolo_negotiator *nego);
/* Stops and joins the negotiator: fails what it holds, sends the outbox or a goodbye. */
void kolo_engine_stop(kolo_negotiator *nego);
/* Hands a negotiated request to the negotiator (under queue->mutex). */
void kolo_engine_submit_locked(kolo_negotiator *nego, kolo_request *request);
/* Frees the engine (after kolo_engine_stop). */
void kolo_engine_free(kolo_negotiator *nego);
struct kolo_timeline;
/* The engine's timeline, or NULL when KOLO_TIMELINE is unset. */
struct kolo_timeline *kolo_engine_timeline(kolo_negotiator *nego);
/* The engine's counters (zero before it started); under queue->mutex. */
void kolo_engine_stats_locked(const kolo_negotiator *nego, kolo_engine_stats *stats);

#endif
