/* The negotiator's state (private to collective/engine/): shared by the thread
 * (negotiator.c) and what it does with decisions (decide.c). */
#ifndef KOLO_COLLECTIVE_ENGINE_ENGINE_STATE_H
#define KOLO_COLLECTIVE_ENGINE_ENGINE_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "collective/engine/names.h"
#include "collective/engine/negotiate.h"
#include "collective/engine/negotiator.h"
#include "collective/engine/timeline.h"
#include "common/clock.h"

typedef struct engine_config {
  int64_t cycle_ns;
  size_t fusion_threshold; /* 0 = every tensor alone */
  int64_t stall_warning_ns, stall_timeout_ns;
  uint32_t cache_capacity;
} engine_config;

typedef struct open_batch {
  kolo_request *request; /* KOLO_REQUEST_BATCH, not queued yet */
  size_t bytes;
} open_batch;

typedef struct kolo_engine kolo_engine;

struct kolo_engine {
  kolo_negotiator *nego;
  engine_config config;
  kolo_nego_table *table;
  kolo_nego_decision decision;
  kolo_names *local;          /* name -> this rank's undecided named request */
  kolo_request **unannounced; /* taken from the inbox, not in a message yet */
  size_t unannounced_count, unannounced_capacity;
  kolo_request *unnamed_head, *unnamed_tail; /* negotiated unnamed requests, by seq */
  kolo_request *join;                        /* this rank's join, until every rank joined */
  uint64_t unnamed_issued, unnamed_announced;
  int joined_announced;
  int64_t news_since; /* when the oldest unannounced news arrived; 0 = none */
  uint32_t cycle;
  char stall_names[4][KOLO_NAME_MAX + 1]; /* declarations for the next message */
  int stall_count;
  int declare_unnamed;
  int64_t unnamed_behind_since;
  int unnamed_warned;
  kolo_nego_buffer out;
  uint8_t *bits;
  size_t bits_capacity;
  kolo_nego_announce *announces;
  size_t announces_capacity;
  kolo_frame **frames; /* a cycle's frames and messages, size entries, reused */
  kolo_nego_message *messages;
  open_batch open[KOLO_DTYPE_COUNT * KOLO_OP_COUNT];
  kolo_request *batch_order[KOLO_DTYPE_COUNT * KOLO_OP_COUNT];
  kolo_engine_stats stats; /* guarded by nego->queue->mutex */
  kolo_timeline *timeline;
  int timeline_failed; /* the failure is in the timeline */
  int stalled;         /* this rank failed the communicator by a stall it decided */
};

/* News for the other ranks (a submission, a join, a stall to declare): a cycle
 * starts KOLO_CYCLE_TIME after the oldest unannounced news. */
static inline void kolo_engine_note_news(kolo_engine *e) {
  if (e->news_since == 0) e->news_since = kolo_now_ns();
}

/* Grows *array (of element-byte entries) to hold need entries. */
kolo_status kolo_engine_grow(void **array, size_t *capacity, size_t need, size_t element);
/* Acts on the cycle's decision (e->decision): queues what is ready for the
 * executor, completes joins, fails mismatches and stalls. */
kolo_status kolo_engine_act(kolo_engine *e, int64_t now);
/* Logs and declares (in e->stall_names, for the next message) the names and
 * unnamed operations stalled at now; returns when it should look again. */
int64_t kolo_engine_inspect_stalls(kolo_engine *e, int64_t now);

#endif
