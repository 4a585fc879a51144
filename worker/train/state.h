/* kolo_train_state: everything a training run needs to continue -- weights,
 * optimizer state, step and data position -- in ONE contiguous blob whose bytes
 * are its serialisation, so it can be checkpointed, broadcast from rank 0 or
 * committed/restored through libkolo's elastic state without a copy step. */
#ifndef KOLO_TRAIN_STATE_H
#define KOLO_TRAIN_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

/* The blob starts with this header (fixed-width fields, host byte order --
 * little-endian on every machine kolo targets), then param_count floats of
 * parameters, then optim_count floats of optimizer state, then, with
 * KOLO_TRAIN_STATE_OUTER in flags, the outer optimizer's state of LOCAL_SGD
 * and DILOCO: param_count floats of the round's start parameters and
 * param_count floats of outer momentum. */
#define KOLO_TRAIN_STATE_OUTER 1u
typedef struct kolo_train_state_header {
  char model[96];     /* model description ("mlp:784-256-10"); a restore must match */
  uint32_t optimizer; /* kolo_train_optim_kind */
  uint32_t flags;     /* KOLO_TRAIN_STATE_OUTER or 0 */
  uint64_t param_count;
  uint64_t optim_count;
  uint64_t step;         /* optimizer steps completed */
  uint64_t epoch;        /* current epoch (0-based) */
  uint64_t epoch_offset; /* global samples of this epoch's permutation already consumed */
  uint64_t samples;      /* samples consumed by all workers since the start */
  uint64_t seed;         /* the run's data / init seed */
} kolo_train_state_header;

typedef struct kolo_train_state kolo_train_state;

/* A zeroed state for a model (description, param_count) and an optimizer with
 * optim_count floats of state. */
kolo_status kolo_train_state_create(const char *model, uint32_t optimizer, size_t param_count,
                                    size_t optim_count, kolo_train_state **out);
/* The same with flags (KOLO_TRAIN_STATE_OUTER: room for the outer state). */
kolo_status kolo_train_state_create_flags(const char *model, uint32_t optimizer, size_t param_count,
                                          size_t optim_count, uint32_t flags,
                                          kolo_train_state **out);
void kolo_train_state_destroy(kolo_train_state *state);

kolo_train_state_header *kolo_train_state_header_of(kolo_train_state *state);
float *kolo_train_state_params(kolo_train_state *state);
float *kolo_train_state_optim(kolo_train_state *state);
/* The round's start parameters and the outer momentum; NULL without KOLO_TRAIN_STATE_OUTER. */
float *kolo_train_state_round_start(kolo_train_state *state);
float *kolo_train_state_outer_momentum(kolo_train_state *state);

/* The flat serialisation: the blob itself (valid as long as the state). */
void *kolo_train_state_data(kolo_train_state *state);
size_t kolo_train_state_size(const kolo_train_state *state);

/* A fast 32-bit checksum of the whole blob (four multiply-xor lanes over its
 * 64-bit words, folded): equal states give equal values on every machine kolo
 * targets; meant to tell states apart in reports and tests, not to protect
 * against tampering (checkpoints use CRC32). */
uint32_t kolo_train_state_checksum(const kolo_train_state *state);

/* Replaces the state with a serialisation after checking that it describes
 * the same model, optimizer, sizes and flags; KOLO_ERR_INVALID_ARG / KOLO_ERR_CORRUPT
 * otherwise, leaving the state untouched. */
kolo_status kolo_train_state_load(kolo_train_state *state, const void *data, size_t size);

#endif
