/* kolo_train_trainer: the data-parallel training loop of kolo-train. It owns
 * the datasets, the model and the training state; with a communicator it keeps
 * replicas in step (SYNC: every layer's gradients as named all-reduces that
 * the engine fuses into one; ASYNC: a background model average every k steps),
 * without one it trains alone. */
#ifndef KOLO_TRAIN_TRAINER_H
#define KOLO_TRAIN_TRAINER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kolo/elastic.h"
#include "kolo/kolo.h"
#include "kolo/status.h"
#include "worker/train/data.h"
#include "worker/train/optim.h"
#include "worker/train/state.h"

/* The values are kolo_mode's (include/kolo/mode.h; checked in trainer.c). */
typedef enum kolo_train_mode {
  KOLO_TRAIN_SYNC = 1,      /* gradients averaged every step */
  KOLO_TRAIN_ASYNC = 2,     /* background model averages, bounded staleness */
  KOLO_TRAIN_LOCAL_SGD = 3, /* H local steps, then the models averaged */
  KOLO_TRAIN_DILOCO = 4,    /* H local steps, then an outer Nesterov step on the average */
} kolo_train_mode;

/* How LOCAL_SGD/DILOCO send the outer gradient (kolo_compression's values). */
typedef enum kolo_train_compression {
  KOLO_TRAIN_COMPRESS_NONE = 0, /* float32 all-reduce */
  KOLO_TRAIN_COMPRESS_FP16 = 1, /* float16 all-reduce */
  KOLO_TRAIN_COMPRESS_INT8 = 2, /* int8 with a float32 scale per chunk, all-gathered */
} kolo_train_compression;

/* Which mode settings a command line gave (kolo_train_config.mode_given). */
enum {
  KOLO_TRAIN_GIVEN_MODE = 1u << 0,
  KOLO_TRAIN_GIVEN_AVERAGE_EVERY = 1u << 1,
  KOLO_TRAIN_GIVEN_MAX_STALENESS = 1u << 2,
  KOLO_TRAIN_GIVEN_OUTER_LR = 1u << 3,
  KOLO_TRAIN_GIVEN_OUTER_MOMENTUM = 1u << 4,
  KOLO_TRAIN_GIVEN_NESTEROV = 1u << 5,
  KOLO_TRAIN_GIVEN_COMPRESSION = 1u << 6,
  KOLO_TRAIN_GIVEN_FRAGMENTS = 1u << 7,
};

typedef struct kolo_train_config {
  const char *model;        /* "mlp" or "lenet" */
  const char *hidden;       /* MLP hidden sizes, "256,128" */
  const char *dataset;      /* fashion-mnist | idx:<dir> | csv:<file> | libsvm:<file> | synthetic */
  const char *test_dataset; /* csv:/libsvm: test file; NULL holds out the last 10% */
  const kolo_train_dataset *train_set, *test_set; /* preloaded sets (tests); override dataset */
  size_t synthetic_train, synthetic_test;         /* sizes of the synthetic set */
  uint64_t epochs;   /* stop after this many epochs (when steps is 0) */
  uint64_t steps;    /* stop after this many optimizer steps; 0 = use epochs */
  size_t batch;      /* samples per worker per micro-batch */
  size_t accumulate; /* micro-batches per optimizer step */
  kolo_train_optim_config optim;
  int scale_lr; /* multiply the learning rate by the number of workers */
  kolo_train_mode mode;
  uint64_t average_every; /* ASYNC: steps between averages; LOCAL_SGD/DILOCO: inner steps H */
  uint32_t max_staleness; /* ASYNC: averaging rounds a rank may have outstanding (>= 1) */
  float outer_lr;         /* LOCAL_SGD (1) / DILOCO: the outer optimizer's learning rate */
  float outer_momentum;   /* LOCAL_SGD (0) / DILOCO: its momentum, in [0, 1) */
  int nesterov;           /* DILOCO: Nesterov momentum (1) or heavy ball (0) */
  kolo_train_compression compression; /* LOCAL_SGD/DILOCO: the outer gradient on the wire */
  uint32_t fragments;     /* LOCAL_SGD/DILOCO: model fragments synced at staggered steps */
  unsigned mode_given;    /* KOLO_TRAIN_GIVEN_* bits: set by the flag parser */
  uint32_t step_delay_us; /* sleep after every step (a deliberately slow rank: tests, bench) */
  uint64_t seed;
  const char *checkpoint_dir; /* NULL = no checkpoints */
  uint64_t checkpoint_every;  /* steps between checkpoints; 0 = only at the end */
  int eval;                   /* evaluate on the test split at the end of each epoch */
  int json;                   /* progress as JSON lines */
  int quiet;                  /* only the final line */
  uint64_t log_every;         /* steps between progress lines */
  uint64_t commit_every;      /* elastic runs: steps between in-memory state commits */
  /* checked at every step boundary; non-zero = stop (checkpoint written on rank 0)
   * and return KOLO_ERR_ABORTED. Set from a signal handler. NULL = none. */
  const volatile sig_atomic_t *stop_flag;
} kolo_train_config;

/* Defaults: mlp 256,128; synthetic 6000/1000; 1 epoch; batch 64; SGD lr 0.02
 * momentum 0.9; SYNC; average every 8; seed 1; eval on; log every 100 steps. */
void kolo_train_config_defaults(kolo_train_config *config);

/* "sync", "async", "local_sgd" (or "local-sgd"), "diloco"; any case. */
kolo_status kolo_train_mode_parse(const char *name, kolo_train_mode *mode);
const char *kolo_train_mode_name(kolo_train_mode mode); /* "sync", ...; NULL if unknown */
/* "none", "fp16", "int8"; any case. */
kolo_status kolo_train_compression_parse(const char *name, kolo_train_compression *out);
const char *kolo_train_compression_name(kolo_train_compression compression);

/* Gives the mode's settings not in config->mode_given their defaults for
 * config->mode (ASYNC: max_staleness 1; LOCAL_SGD: outer lr 1, momentum 0, no
 * Nesterov; DILOCO: outer lr 0.7, momentum 0.9, Nesterov; compression none,
 * 1 fragment), then checks them: values in range, and no setting given for a
 * mode that does not use it. Returns 0, or -1 with a one-line reason in why
 * naming the flag and the mode ("--outer-lr: only for --mode diloco, not
 * local_sgd (outer lr 1, momentum 0)"). */
int kolo_train_mode_resolve(kolo_train_config *config, char *why, size_t why_len);

/* What kolo_train_trainer_create does with a config: the settings config->mode
 * does not use are set to their neutral values (LOCAL_SGD: outer lr 1,
 * momentum 0, no Nesterov; not ASYNC: max_staleness 1; not LOCAL_SGD/DILOCO:
 * no compression, 1 fragment), the others are checked. 0, or -1 and why. */
int kolo_train_mode_check(kolo_train_config *config, char *why, size_t why_len);

typedef struct kolo_train_result {
  uint64_t steps;       /* optimizer steps completed (including resumed ones) */
  uint64_t epochs;      /* epochs completed */
  uint64_t total_steps; /* steps the whole run takes (the step limit or epochs x steps per epoch) */
  uint64_t resumed_step; /* the step a checkpoint resumed from; 0 = fresh start */
  double last_loss;      /* mean training loss of the last logging window */
  double test_accuracy;  /* final evaluation on the test split */
  double test_loss;
  double seconds; /* wall time of the training loop */
  double samples_per_second_worker;
  double samples_per_second_total;
  int reconfigurations; /* rings re-formed during the run (elastic) */
} kolo_train_result;

typedef struct kolo_train_trainer kolo_train_trainer;

/* Loads the data, builds the model and state. comm may be NULL (one process);
 * it is borrowed, not owned. out is where progress lines go on rank 0 (NULL = none). */
kolo_status kolo_train_trainer_create(const kolo_train_config *config, kolo_comm *comm, FILE *out,
                                      kolo_train_trainer **trainer);
/* The same for an elastic run: the communicator comes from elastic (it may
 * change when the ring is re-formed); the training state is registered with it
 * as one buffer, committed every commit_every steps, and restored after a
 * re-form. elastic is borrowed and must outlive the trainer. */
kolo_status kolo_train_trainer_create_elastic(const kolo_train_config *config,
                                              kolo_elastic *elastic, FILE *out,
                                              kolo_train_trainer **trainer);
void kolo_train_trainer_destroy(kolo_train_trainer *trainer);

/* Resumes from the newest valid checkpoint (if configured), synchronises the
 * initial state from rank 0, trains until the step or epoch limit, evaluates
 * and writes the final checkpoint. In an elastic run a failed collective or a
 * ring change re-forms the ring and continues from the last commit; a stop
 * request from the agent ends the run with KOLO_ERR_ABORTED. */
kolo_status kolo_train_trainer_run(kolo_train_trainer *trainer, kolo_train_result *result);

/* The training state (weights, optimizer state, step, data position). */
kolo_train_state *kolo_train_trainer_state(kolo_train_trainer *trainer);

/* The mode's figures so far (rounds.h; SYNC: one round per step, its
 * all-reduce's bytes and time). rounds counts this process's rounds (an
 * elastic run restarts nothing: rounds repeated after a re-form count again). */
struct kolo_train_rounds_stats;
void kolo_train_trainer_mode_stats(const kolo_train_trainer *trainer,
                                   struct kolo_train_rounds_stats *out);

/* Whether this build can use a communicator (linked with libkolo). */
int kolo_train_has_comm(void);

#endif
