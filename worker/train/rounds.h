/* kolo_train_rounds: how the non-SYNC modes keep replicas together between
 * optimizer steps. ASYNC: every average_every steps a background average of
 * the model, folded in when it completes, at most max_staleness rounds
 * outstanding. LOCAL_SGD / DILOCO: every average_every (H) steps the
 * pseudo-gradient (the round's start parameters minus the average of the
 * replicas) goes through an outer SGD step with (Nesterov) momentum, whose
 * state -- the start parameters and the momentum -- lives in the training
 * state (state.h), so it is committed, checkpointed and broadcast with the
 * weights; with fragments F > 1 fragment f of the model is synced at the
 * steps s with s % H == f H / F. The outer gradient travels as float32,
 * float16 or int8 with a scale per chunk (outer.h). */
#ifndef KOLO_TRAIN_ROUNDS_H
#define KOLO_TRAIN_ROUNDS_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/kolo.h"
#include "kolo/status.h"
#include "worker/train/state.h"
#include "worker/train/trainer.h"

typedef struct kolo_train_rounds kolo_train_rounds;

typedef struct kolo_train_rounds_stats {
  uint64_t rounds;     /* ASYNC: averages folded in; LOCAL_SGD/DILOCO: outer syncs (per fragment) */
  uint64_t bytes_sent; /* what this rank sent for them, by the ring algorithms' count */
  uint32_t staleness;  /* ASYNC: the most rounds this rank had outstanding (<= max_staleness) */
  double blocked_seconds; /* time spent waiting for the others (blocking waits and syncs) */
} kolo_train_rounds_stats;

/* For config's mode (not SYNC) and a model of param_count parameters. */
kolo_status kolo_train_rounds_create(const kolo_train_config *config, size_t param_count,
                                     kolo_train_rounds **out);
/* Waits out any round in flight first (its buffers are the request's). */
void kolo_train_rounds_destroy(kolo_train_rounds *rounds);

/* A fresh run's outer state: the round starts at the current parameters,
 * momentum zero. No-op for ASYNC. */
void kolo_train_rounds_reset(kolo_train_state *state);

/* After optimizer step `step` (counted from 1) of the state's parameters:
 * whatever the mode does at that step. comm NULL (or of size 1): no
 * communication (LOCAL_SGD/DILOCO still take their outer step on the
 * replica alone). An error leaves the rounds to kolo_train_rounds_drop. */
kolo_status kolo_train_rounds_after_step(kolo_train_rounds *rounds, kolo_comm *comm, uint64_t step,
                                         kolo_train_state *state);

/* Whether every replica is the same after step `step`: LOCAL_SGD/DILOCO with
 * one fragment at the end of a round. */
int kolo_train_rounds_synced_at(const kolo_train_rounds *rounds, uint64_t step);

/* The end of training at step `step`: ASYNC folds every round in and averages
 * the replicas; LOCAL_SGD/DILOCO close every open round (fragment) with an
 * outer step. Afterwards every replica is the same. */
kolo_status kolo_train_rounds_finish(kolo_train_rounds *rounds, kolo_comm *comm, uint64_t step,
                                     kolo_train_state *state);

/* After a failed collective: abandons the rounds in flight (their requests
 * complete at once on the failed communicator). */
void kolo_train_rounds_drop(kolo_train_rounds *rounds);

void kolo_train_rounds_stats_of(const kolo_train_rounds *rounds, kolo_train_rounds_stats *out);

#endif
