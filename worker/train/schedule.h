/* kolo_train_schedule: what every member of a ring must agree on to train one
 * model together -- the global batch (the window of the permutation one
 * micro-batch takes), windows per optimizer step, where an epoch ends, the
 * learning rate and its scale, and a fingerprint of every other setting that
 * changes the optimisation (optimizer, limits, mode and its settings, per-worker batch, model,
 * state layout; the seed is in the state and comes from rank 0). It is derived
 * once, when the run starts, from the settings and the size of the first ring;
 * in an elastic run it is registered with the committed state, so a newcomer
 * takes the ring's schedule from rank 0 instead of deriving its own from the
 * size of the ring it joins. At every (re-)form
 * each rank checks what it has against what rank 0 sent (pure functions here;
 * the trainer agrees on the verdict with one all-reduce): a mismatch is an
 * error, never a reason to train on. The record is 64 bytes, host byte order. */
#ifndef KOLO_TRAIN_SCHEDULE_H
#define KOLO_TRAIN_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "worker/train/optim.h"

#define KOLO_TRAIN_SCHEDULE_VERSION 1
#define KOLO_TRAIN_SCHEDULE_SCALE_LR 1u /* the learning rate is scaled by start_workers */

typedef struct kolo_train_schedule {
  uint16_t version;       /* KOLO_TRAIN_SCHEDULE_VERSION */
  uint16_t flags;         /* KOLO_TRAIN_SCHEDULE_SCALE_LR */
  uint32_t start_workers; /* ring size the schedule was derived for */
  uint64_t batch;         /* samples per worker per micro-batch at the start */
  uint64_t global_batch;  /* batch x start_workers: the window, fixed for the run */
  uint64_t accumulate;    /* windows per optimizer step */
  uint64_t epoch_samples; /* training samples per epoch: where an epoch ends */
  float lr;               /* base learning rate */
  float lr_scale;         /* its multiplier (start_workers with --scale-lr, else 1) */
  uint64_t settings;      /* fingerprint of the other shared settings */
  uint64_t state_bytes;   /* size of the training state */
} kolo_train_schedule;

/* What the schedule is derived from: the settings that must be equal on every rank. */
typedef struct kolo_train_schedule_input {
  uint64_t batch, accumulate, epoch_samples, state_bytes;
  kolo_train_optim_config optim; /* lr_scale ignored: scale_lr decides it */
  int scale_lr;
  uint32_t mode;
  uint64_t average_every, steps, epochs; /* (the seed travels in the state, from rank 0) */
  /* the mode's settings (trainer.h; unused ones are their defaults) */
  uint32_t max_staleness, nesterov, compression, fragments;
  float outer_lr, outer_momentum;
  const char *model; /* the model's description ("mlp:784-128-10") */
} kolo_train_schedule_input;

/* The schedule a run starting on a ring of workers ranks derives. */
void kolo_train_schedule_derive(const kolo_train_schedule_input *in, int workers,
                                kolo_train_schedule *out);

/* Checks the schedule received from rank 0 (ring) against this rank's. A
 * survivor (joined = 0) holds the schedule it trained with: every field must be
 * equal. A process at its first ring (joined = 1) holds what it derived from
 * its own settings and the size of that ring: every field must be equal except
 * start_workers, global_batch and lr_scale, which come from the size the run
 * started with; those must still be consistent with the ring's own start.
 * Returns 1 when they agree; otherwise 0 and a one-line reason in why
 * ("global batch 96 here, 64 in the ring"). */
int kolo_train_schedule_agrees(const kolo_train_schedule *mine, const kolo_train_schedule *ring,
                               int joined, char *why, size_t why_len);

#endif
