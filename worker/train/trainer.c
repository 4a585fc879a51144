/* kolo_train_trainer: the training loop. Data position is an offset into the
 * epoch's shared permutation; each micro-batch takes a global window of
 * batch * size samples and this rank its strided share (shard.h). SYNC averages
 * the fused gradient buffer every step; the other modes step on local
 * gradients and keep the replicas together through rounds.h (ASYNC: background
 * model averages; LOCAL_SGD/DILOCO: outer steps every H steps). See
 * docs/TRAINER.md. */
#include "worker/train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "kolo/engine.h"
#include "worker/train/checkpoint.h"
#include "worker/train/model.h"
#include "worker/train/rounds.h"
#include "worker/train/schedule.h"
#include "worker/train/shard.h"

#define LOG_TAG "train"
#define EVAL_BATCH 256
#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

struct kolo_train_trainer {
  kolo_train_config config;
  kolo_comm *comm;
  FILE *out;
  int rank, size;
  kolo_train_dataset *own_train, *own_test; /* loaded here (freed here) */
  const kolo_train_dataset *train, *test;
  kolo_train_model *model;
  kolo_train_state *state;
  size_t param_count, optim_count;
  size_t *perm;  /* current epoch's permutation */
  size_t *index; /* this rank's sample ids of a micro-batch */
  float *x;      /* gathered inputs (max(batch, EVAL_BATCH) samples) */
  int *y;
  kolo_train_rounds *rounds;          /* the non-SYNC modes' averaging (NULL in SYNC) */
  kolo_train_rounds_stats sync_stats; /* SYNC: its gradient all-reduces */
  kolo_elastic *elastic;              /* borrowed; NULL = a fixed ring or none */
  int reforms;                        /* rings re-formed during this run */
  size_t global_batch; /* samples per micro-batch over all ranks: schedule.global_batch */
  kolo_train_model_spec spec;
  size_t capacity;              /* samples the model and the batch buffers hold */
  kolo_train_schedule schedule; /* the ring's schedule (registered with the elastic state) */
  kolo_train_schedule own;      /* derived here from the settings and the first ring */
  int agreed;                   /* schedule is the ring's, checked (not only derived here) */
  uint64_t committed_step;      /* the last commit: its step and state checksum */
  uint32_t committed_checksum;
  int named_gradients; /* SYNC averages gradients as named tensors (KOLO_TRAIN_FUSED != 0) */
};

int kolo_train_has_comm(void) {
#ifdef KOLO_TRAIN_NO_COMM
  return 0;
#else
  return 1;
#endif
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- collectives (no-ops without a communicator) ---- */

static kolo_status comm_average(kolo_train_trainer *t, float *buffer, size_t count) {
#ifndef KOLO_TRAIN_NO_COMM
  if (t->comm && t->size > 1) {
    return kolo_allreduce(t->comm, buffer, buffer, count, KOLO_FLOAT32, KOLO_AVG);
  }
#endif
  (void)t, (void)buffer, (void)count;
  return KOLO_OK;
}

/* SYNC's gradient average: every layer's weight and bias as a named all-reduce
 * (engine.h), submitted in backward order (last layer first, as a framework's
 * hooks would) and fused back into one ring all-reduce by the engine, large
 * tensors in place. KOLO_TRAIN_FUSED=0 all-reduces the fused buffer in one
 * unnamed call instead (the old path, for comparison). */
static kolo_status comm_average_gradients(kolo_train_trainer *t, float *grads) {
#ifndef KOLO_TRAIN_NO_COMM
  if (t->comm && t->size > 1 && t->named_gradients) {
    enum { MAX_TENSORS = 128 };
    kolo_request *requests[MAX_TENSORS];
    size_t n = kolo_train_model_tensor_count(t->model), submitted = 0;
    kolo_status rc = n <= MAX_TENSORS ? KOLO_OK : KOLO_ERR_TOO_LARGE;
    for (size_t k = 0; k < n && rc == KOLO_OK; k++) {
      char name[64];
      size_t offset = 0, count = 0;
      rc = kolo_train_model_tensor(t->model, n - 1 - k, name, sizeof name, &offset, &count);
      if (rc == KOLO_OK) {
        rc = kolo_allreduce_named(t->comm, name, grads + offset, grads + offset, count,
                                  KOLO_FLOAT32, KOLO_AVG, 1.0, 1.0, &requests[submitted]);
      }
      if (rc == KOLO_OK) submitted++;
    }
    for (size_t k = 0; k < submitted; k++) {
      kolo_status waited = kolo_wait(requests[k]);
      if (rc == KOLO_OK) rc = waited;
    }
    return rc;
  }
#endif
  return comm_average(t, grads, t->param_count);
}

static kolo_status comm_sum_doubles(kolo_train_trainer *t, double *buffer, size_t count) {
#ifndef KOLO_TRAIN_NO_COMM
  if (t->comm && t->size > 1) {
    return kolo_allreduce(t->comm, buffer, buffer, count, KOLO_FLOAT64, KOLO_SUM);
  }
#endif
  (void)t, (void)buffer, (void)count;
  return KOLO_OK;
}

static kolo_status comm_broadcast_state(kolo_train_trainer *t) {
#ifndef KOLO_TRAIN_NO_COMM
  if (t->comm && t->size > 1) {
    kolo_status rc = kolo_broadcast(t->comm, kolo_train_state_data(t->state),
                                    kolo_train_state_size(t->state), KOLO_UINT8, 0);
    if (rc != KOLO_OK) return rc;
    return kolo_broadcast(t->comm, &t->schedule, sizeof t->schedule, KOLO_UINT8, 0);
  }
#endif
  (void)t;
  return KOLO_OK;
}

/* ---- the schedule every rank trains by (schedule.h) ---- */

/* This rank's schedule from its own settings and the size of its first ring. */
static void derive_schedule(kolo_train_trainer *t) {
  const kolo_train_config *c = &t->config;
  kolo_train_schedule_input in = {.batch = c->batch,
                                  .accumulate = c->accumulate,
                                  .epoch_samples = kolo_train_data_count(t->train),
                                  .state_bytes = kolo_train_state_size(t->state),
                                  .optim = c->optim,
                                  .scale_lr = c->scale_lr,
                                  .mode = (uint32_t)c->mode,
                                  .average_every = c->average_every,
                                  .max_staleness = c->max_staleness,
                                  .nesterov = (uint32_t)c->nesterov,
                                  .compression = (uint32_t)c->compression,
                                  .fragments = c->fragments,
                                  .outer_lr = c->outer_lr,
                                  .outer_momentum = c->outer_momentum,
                                  .steps = c->steps,
                                  .epochs = c->epochs,
                                  .model = kolo_train_model_describe(t->model)};
  kolo_train_schedule_derive(&in, t->size, &t->own);
  t->schedule = t->own;
  t->global_batch = (size_t)t->schedule.global_batch;
  t->config.optim.lr_scale = t->schedule.lr_scale;
}

/* Makes the model and batch buffers hold a share of up to need samples. */
static kolo_status ensure_capacity(kolo_train_trainer *t, size_t need) {
  if (need < EVAL_BATCH) need = EVAL_BATCH;
  if (need <= t->capacity) return KOLO_OK;
  kolo_train_model *model = NULL;
  kolo_status rc = kolo_train_model_create(&t->spec, need, &model);
  if (rc != KOLO_OK) return rc;
  size_t f = kolo_train_data_features(t->train);
  size_t *index = realloc(t->index, need * sizeof *index);
  if (index) t->index = index;
  float *x = index ? realloc(t->x, need * f * sizeof *x) : NULL;
  if (x) t->x = x;
  int *y = x ? realloc(t->y, need * sizeof *y) : NULL;
  if (y) t->y = y;
  if (!y) {
    kolo_train_model_destroy(model);
    return KOLO_ERR_NO_MEMORY;
  }
  kolo_train_model_destroy(t->model);
  t->model = model;
  kolo_train_model_bind(t->model, kolo_train_state_params(t->state));
  t->capacity = need;
  return KOLO_OK;
}

static uint32_t state_checksum(kolo_train_trainer *t) {
  return kolo_train_state_checksum(t->state);
}

/* Tells the agent (every rank) and stdout (rank 0, JSON) which state the ring
 * continues from: its step and checksum, and this rank's last commit. */
static void report_synced(kolo_train_trainer *t, const char *reason) {
  const kolo_train_state_header *h = kolo_train_state_header_of(t->state);
  char json[512];
  snprintf(
      json, sizeof json,
      "{\"event\":\"synced\",\"synced_reason\":\"%s\",\"synced_step\":%llu,\"synced_epoch\":%llu,"
      "\"synced_checksum\":%u,\"committed_step\":%llu,\"committed_checksum\":%u,\"global_batch\":%"
      "llu,"
      "\"workers\":%d,\"rank\":%d}",
      reason, (unsigned long long)h->step, (unsigned long long)h->epoch,
      (unsigned)state_checksum(t), (unsigned long long)t->committed_step,
      (unsigned)t->committed_checksum, (unsigned long long)t->schedule.global_batch, t->size,
      t->rank);
#ifndef KOLO_TRAIN_NO_COMM
  if (t->elastic) kolo_elastic_report(t->elastic, json);
#endif
  if (t->out && t->rank == 0 && t->config.json && !t->config.quiet) {
    fprintf(t->out, "%s\n", json);
    fflush(t->out);
  }
}

/* After the ring's state arrived from rank 0: checks its schedule against mine
 * (what this rank trained with, or derived if it never agreed), agrees on the
 * verdict with every rank, and adopts it. A mismatch anywhere fails every rank
 * with KOLO_ERR_MISMATCH: nobody trains on with a different schedule. */
static kolo_status agree_schedule(kolo_train_trainer *t, const kolo_train_schedule *mine,
                                  const char *reason) {
  char why[256];
  int agrees = kolo_train_schedule_agrees(mine, &t->schedule, !t->agreed, why, sizeof why);
  int32_t bad = !agrees;
#ifndef KOLO_TRAIN_NO_COMM
  if (t->comm && t->size > 1) {
    kolo_status rc = kolo_allreduce(t->comm, &bad, &bad, 1, KOLO_INT32, KOLO_MAX);
    if (rc != KOLO_OK) return rc;
  }
#endif
  if (!agrees)
    KOLO_LOGE(LOG_TAG, "rank %d: the ring's training schedule is not mine: %s", t->rank, why);
  if (bad) {
    if (agrees)
      KOLO_LOGE(LOG_TAG, "rank %d: another rank's training schedule differs (see its log)",
                t->rank);
    return KOLO_ERR_MISMATCH;
  }
  kolo_status rc = ensure_capacity(t, (size_t)t->schedule.global_batch);
  if (rc != KOLO_OK) return rc;
  t->global_batch = (size_t)t->schedule.global_batch;
  t->config.optim.lr_scale = t->schedule.lr_scale;
  t->agreed = 1;
  report_synced(t, reason);
  /* the sync committed what arrived */
  t->committed_step = kolo_train_state_header_of(t->state)->step;
  t->committed_checksum = state_checksum(t);
  return KOLO_OK;
}

/* ---- setup ---- */

/* Loads train and test sets named by config->dataset. */
static kolo_status load_data(kolo_train_trainer *t) {
  const kolo_train_config *c = &t->config;
  if (c->train_set && c->test_set) {
    t->train = c->train_set;
    t->test = c->test_set;
    return KOLO_OK;
  }
  const char *spec = c->dataset ? c->dataset : "synthetic";
  kolo_status rc;
  if (strcmp(spec, "synthetic") == 0) {
    rc = kolo_train_data_synthetic(c->seed, c->synthetic_train, c->synthetic_test, &t->own_train,
                                   &t->own_test);
  } else if (strcmp(spec, "fashion-mnist") == 0 || strncmp(spec, "idx:", 4) == 0) {
    const char *dir = spec[0] == 'i' ? spec + 4 : FASHION_MNIST_DIR;
    rc = kolo_train_data_load_idx_dir(dir, "train", &t->own_train);
    if (rc == KOLO_OK) rc = kolo_train_data_load_idx_dir(dir, "t10k", &t->own_test);
  } else if (strncmp(spec, "csv:", 4) == 0 || strncmp(spec, "libsvm:", 7) == 0) {
    int csv = spec[0] == 'c';
    const char *path = spec + (csv ? 4 : 7);
    kolo_train_dataset *all = NULL;
    rc = csv ? kolo_train_data_load_csv(path, &all) : kolo_train_data_load_libsvm(path, 0, &all);
    if (rc != KOLO_OK) return rc;
    if (c->test_dataset) {
      t->own_train = all;
      const char *tp = c->test_dataset;
      if (strncmp(tp, "csv:", 4) == 0) tp += 4;
      if (strncmp(tp, "libsvm:", 7) == 0) tp += 7;
      rc = csv ? kolo_train_data_load_csv(tp, &t->own_test)
               : kolo_train_data_load_libsvm(tp, kolo_train_data_features(all), &t->own_test);
      if (rc == KOLO_OK && kolo_train_data_features(t->own_test) != kolo_train_data_features(all)) {
        KOLO_LOGE(LOG_TAG, "%s: %zu features, the training set has %zu", tp,
                  kolo_train_data_features(t->own_test), kolo_train_data_features(all));
        rc = KOLO_ERR_PARSE;
      }
    } else {
      size_t n = kolo_train_data_count(all);
      if (n < 2) {
        KOLO_LOGE(LOG_TAG, "%s: need at least 2 samples to hold out a test split", path);
        kolo_train_data_destroy(all);
        return KOLO_ERR_PARSE;
      }
      size_t held = n / 10 ? n / 10 : 1;
      rc = kolo_train_data_split(all, held, &t->own_train, &t->own_test);
      kolo_train_data_destroy(all);
    }
  } else {
    KOLO_LOGE(LOG_TAG,
              "unknown dataset '%s' (fashion-mnist, idx:<dir>, csv:<file>, "
              "libsvm:<file>, synthetic)",
              spec);
    return KOLO_ERR_INVALID_ARG;
  }
  if (rc != KOLO_OK) return rc;
  t->train = t->own_train;
  t->test = t->own_test;
  return KOLO_OK;
}

kolo_status kolo_train_trainer_create(const kolo_train_config *config, kolo_comm *comm, FILE *out,
                                      kolo_train_trainer **trainer) {
  if (!config || !trainer || config->batch == 0 || config->accumulate == 0 ||
      config->average_every == 0 || (config->steps == 0 && config->epochs == 0) ||
      !(config->optim.lr > 0.0f)) {
    return KOLO_ERR_INVALID_ARG;
  }
  kolo_train_config resolved = *config;
  char why[256];
  if (kolo_train_mode_check(&resolved, why, sizeof why) != 0) {
    KOLO_LOGE(LOG_TAG, "%s", why);
    return KOLO_ERR_INVALID_ARG;
  }
  config = &resolved;
#ifdef KOLO_TRAIN_NO_COMM
  if (comm) return KOLO_ERR_UNSUPPORTED;
#endif
  kolo_train_trainer *t = calloc(1, sizeof *t);
  if (!t) return KOLO_ERR_NO_MEMORY;
  t->config = resolved;
  t->comm = comm;
  t->out = out;
  t->rank = 0;
  t->size = 1;
  const char *fused = getenv("KOLO_TRAIN_FUSED");
  t->named_gradients = fused == NULL || strcmp(fused, "0") != 0;
#ifndef KOLO_TRAIN_NO_COMM
  if (comm) {
    t->rank = kolo_comm_rank(comm);
    t->size = kolo_comm_size(comm);
  }
#endif
  /* The global batch stays what the job started with when the ring later shrinks
   * or grows (each rank's share changes instead), so a re-formed job keeps the
   * optimisation it began with: a lost worker costs time, not accuracy. It is
   * part of the schedule, which a newcomer takes from the ring (schedule.h). */
  t->global_batch = config->batch * (size_t)t->size;
  kolo_status rc = load_data(t);
  if (rc != KOLO_OK) goto fail;

  kolo_train_model_spec spec;
  memset(&spec, 0, sizeof spec);
  rc = kolo_train_model_spec_parse(config->model, config->hidden, &spec);
  t->spec = spec;
  if (rc != KOLO_OK) {
    KOLO_LOGE(LOG_TAG, "bad model '%s' / hidden sizes '%s'", config->model ? config->model : "",
              config->hidden ? config->hidden : "");
    goto fail;
  }
  kolo_train_data_shape(t->train, &spec.height, &spec.width, &spec.channels);
  spec.classes = kolo_train_data_classes(t->train);
  if (kolo_train_data_classes(t->test) > spec.classes)
    spec.classes = kolo_train_data_classes(t->test);
  if (spec.classes < 2) spec.classes = 2;
  t->spec = spec;
  /* a rank's share grows when the ring shrinks, up to the whole global batch */
  size_t max_batch = t->global_batch > EVAL_BATCH ? t->global_batch : EVAL_BATCH;
  t->capacity = max_batch;
  rc = kolo_train_model_create(&spec, max_batch, &t->model);
  if (rc != KOLO_OK) {
    KOLO_LOGE(LOG_TAG, "cannot build model %s for %zux%zux%zu inputs: %s", config->model,
              spec.height, spec.width, spec.channels, kolo_strerror(rc));
    goto fail;
  }
  t->param_count = kolo_train_model_param_count(t->model);
  t->optim_count = kolo_train_optim_state_count(config->optim.kind, t->param_count);
  int outer = config->mode == KOLO_TRAIN_LOCAL_SGD || config->mode == KOLO_TRAIN_DILOCO;
  rc = kolo_train_state_create_flags(kolo_train_model_describe(t->model), config->optim.kind,
                                     t->param_count, t->optim_count,
                                     outer ? KOLO_TRAIN_STATE_OUTER : 0, &t->state);
  if (rc == KOLO_OK && config->mode != KOLO_TRAIN_SYNC)
    rc = kolo_train_rounds_create(config, t->param_count, &t->rounds);
  if (rc != KOLO_OK) goto fail;
  kolo_train_model_bind(t->model, kolo_train_state_params(t->state));
  derive_schedule(t);

  size_t n = kolo_train_data_count(t->train), f = kolo_train_data_features(t->train);
  t->perm = malloc(n * sizeof *t->perm);
  t->index = malloc(max_batch * sizeof *t->index);
  t->x = malloc(max_batch * f * sizeof *t->x);
  t->y = malloc(max_batch * sizeof *t->y);
  if (!t->perm || !t->index || !t->x || !t->y) {
    rc = KOLO_ERR_NO_MEMORY;
    goto fail;
  }
  *trainer = t;
  return KOLO_OK;
fail:
  kolo_train_trainer_destroy(t);
  return rc;
}

kolo_status kolo_train_trainer_create_elastic(const kolo_train_config *config,
                                              kolo_elastic *elastic, FILE *out,
                                              kolo_train_trainer **trainer) {
#ifdef KOLO_TRAIN_NO_COMM
  (void)config, (void)elastic, (void)out, (void)trainer;
  return KOLO_ERR_UNSUPPORTED;
#else
  if (!elastic || !trainer) return KOLO_ERR_INVALID_ARG;
  kolo_train_trainer *t = NULL;
  kolo_status rc = kolo_train_trainer_create(config, kolo_elastic_comm(elastic), out, &t);
  if (rc != KOLO_OK) return rc;
  t->elastic = elastic;
  /* the whole training state is one buffer: registered once, same size on every
   * rank; the schedule is a second one, committed and broadcast with it */
  rc = kolo_elastic_register(elastic, kolo_train_state_data(t->state),
                             kolo_train_state_size(t->state));
  if (rc == KOLO_OK) rc = kolo_elastic_register(elastic, &t->schedule, sizeof t->schedule);
  if (rc != KOLO_OK) {
    kolo_train_trainer_destroy(t);
    return rc;
  }
  *trainer = t;
  return KOLO_OK;
#endif
}

void kolo_train_trainer_destroy(kolo_train_trainer *t) {
  if (!t) return;
  kolo_train_rounds_destroy(t->rounds); /* buffers must outlive the requests */
  kolo_train_model_destroy(t->model);
  kolo_train_state_destroy(t->state);
  kolo_train_data_destroy(t->own_train);
  kolo_train_data_destroy(t->own_test);
  free(t->perm);
  free(t->index);
  free(t->x);
  free(t->y);
  free(t);
}

kolo_train_state *kolo_train_trainer_state(kolo_train_trainer *t) {
  return t->state;
}

void kolo_train_trainer_mode_stats(const kolo_train_trainer *t, kolo_train_rounds_stats *out) {
  memset(out, 0, sizeof *out);
  if (t->rounds) {
    kolo_train_rounds_stats_of(t->rounds, out);
  } else {
    *out = t->sync_stats;
  }
}

/* ---- evaluation ---- */

/* Loss and accuracy on the test split, each rank taking the strided share
 * r, r+size, ... and the sums all-reduced. */
static kolo_status evaluate(kolo_train_trainer *t, double *accuracy, double *loss) {
  size_t n = kolo_train_data_count(t->test);
  double sums[3] = {0.0, 0.0, 0.0}; /* loss sum, correct, count */
  size_t pos = (size_t)t->rank;
  while (pos < n) {
    size_t b = 0;
    for (; b < EVAL_BATCH && pos < n; b++, pos += (size_t)t->size) t->index[b] = pos;
    kolo_train_data_gather(t->test, t->index, b, t->x, t->y);
    size_t correct = 0;
    double l = kolo_train_model_evaluate(t->model, t->x, t->y, b, &correct);
    sums[0] += l * (double)b;
    sums[1] += (double)correct;
    sums[2] += (double)b;
  }
  kolo_status rc = comm_sum_doubles(t, sums, 3);
  if (rc != KOLO_OK) return rc;
  *accuracy = sums[2] > 0 ? sums[1] / sums[2] : 0.0;
  *loss = sums[2] > 0 ? sums[0] / sums[2] : 0.0;
  return KOLO_OK;
}

/* ---- the loop ---- */

/* Moves to the next epoch: new permutation, offset 0. */
static void next_epoch(kolo_train_trainer *t) {
  kolo_train_state_header *h = kolo_train_state_header_of(t->state);
  h->epoch++;
  h->epoch_offset = 0;
  kolo_train_shuffle(h->seed, h->epoch, t->perm, kolo_train_data_count(t->train));
}

static kolo_status write_checkpoint(kolo_train_trainer *t) {
  if (!t->config.checkpoint_dir || t->rank != 0) return KOLO_OK;
  char path[4096];
  kolo_status rc =
      kolo_train_checkpoint_write(t->config.checkpoint_dir, t->state, path, sizeof path);
  if (rc == KOLO_OK) KOLO_LOGD(LOG_TAG, "checkpoint %s", path);
  return rc;
}

/* Sends one JSON object to the worker agent (elastic runs; every rank). */
static void report_to_agent(kolo_train_trainer *t, const char *json) {
#ifndef KOLO_TRAIN_NO_COMM
  if (t->elastic) kolo_elastic_report(t->elastic, json);
#else
  (void)t, (void)json;
#endif
}

/* The steps the whole run takes: the step limit, or else epochs x windows per
 * epoch (a window is one global batch; an optimizer step takes `accumulate` of
 * them). The global batch never changes, so neither does this. */
static uint64_t total_steps(const kolo_train_trainer *t) {
  if (t->config.steps) return t->config.steps;
  size_t n = kolo_train_data_count(t->train);
  uint64_t windows = t->global_batch ? (n + t->global_batch - 1) / t->global_batch : 0;
  uint64_t all = windows * t->config.epochs;
  return (all + t->config.accumulate - 1) / t->config.accumulate;
}

static void report_progress(kolo_train_trainer *t, double loss, double accuracy, double local_rate,
                            double total_rate, double lr) {
  const kolo_train_state_header *h = kolo_train_state_header_of(t->state);
  kolo_train_rounds_stats st;
  kolo_train_trainer_mode_stats(t, &st);
  char json[768];
  snprintf(
      json, sizeof json,
      "{\"event\":\"progress\",\"step\":%llu,\"total_steps\":%llu,\"epoch\":%llu,\"loss\":%.6f,"
      "\"train_accuracy\":%.6f,\"lr\":%.6g,\"samples_per_sec_worker\":%.1f,"
      "\"samples_per_sec_total\":%.1f,\"workers\":%d,\"rank\":%d,\"mode\":\"%s\","
      "\"rounds\":%llu,\"bytes_sent\":%llu,\"staleness\":%u,\"blocked_seconds\":%.3f}",
      (unsigned long long)h->step, (unsigned long long)total_steps(t), (unsigned long long)h->epoch,
      loss, accuracy, lr, local_rate, total_rate, t->size, t->rank,
      kolo_train_mode_name(t->config.mode), (unsigned long long)st.rounds,
      (unsigned long long)st.bytes_sent, (unsigned)st.staleness, st.blocked_seconds);
  report_to_agent(t, json);
  if (!t->out || t->rank != 0 || t->config.quiet) return;
  if (t->config.json) {
    fprintf(t->out, "%s\n", json);
  } else {
    fprintf(t->out,
            "step %6llu  epoch %3llu  loss %.4f  train acc %.3f  lr %.4g  "
            "samples/s %.0f per worker, %.0f total\n",
            (unsigned long long)h->step, (unsigned long long)h->epoch, loss, accuracy, lr,
            local_rate, total_rate);
  }
  fflush(t->out);
}

static void report_eval(kolo_train_trainer *t, uint64_t epoch, double accuracy, double loss) {
  char json[256];
  snprintf(json, sizeof json,
           "{\"event\":\"eval\",\"epoch\":%llu,\"step\":%llu,\"accuracy\":%.6f,"
           "\"loss\":%.6f,\"test_accuracy\":%.6f,\"test_loss\":%.6f}",
           (unsigned long long)epoch,
           (unsigned long long)kolo_train_state_header_of(t->state)->step, accuracy, loss, accuracy,
           loss);
  report_to_agent(t, json);
  if (!t->out || t->rank != 0 || t->config.quiet) return;
  if (t->config.json) {
    fprintf(t->out, "%s\n", json);
  } else {
    fprintf(t->out, "epoch %3llu  test accuracy %.4f  test loss %.4f\n", (unsigned long long)epoch,
            accuracy, loss);
  }
  fflush(t->out);
}

/* Fresh weights, or the newest valid checkpoint; then rank 0's state everywhere. */
static kolo_status initial_state(kolo_train_trainer *t, kolo_train_result *r) {
  kolo_train_state_header *h = kolo_train_state_header_of(t->state);
  kolo_train_model_init_params(t->model, t->config.seed);
  kolo_train_rounds_reset(t->state); /* the first round starts here */
  h->seed = t->config.seed;
  if (t->config.checkpoint_dir && t->rank == 0) {
    char path[4096];
    kolo_status rc =
        kolo_train_checkpoint_restore_latest(t->config.checkpoint_dir, t->state, path, sizeof path);
    if (rc == KOLO_OK) {
      KOLO_LOGI(LOG_TAG, "resumed from %s (step %llu, epoch %llu)", path,
                (unsigned long long)h->step, (unsigned long long)h->epoch);
    } else if (rc != KOLO_ERR_NOT_FOUND) {
      return rc;
    }
  }
  kolo_status rc;
  kolo_train_schedule mine = t->own;
#ifndef KOLO_TRAIN_NO_COMM
  if (t->elastic) {
    rc = kolo_elastic_sync(t->elastic); /* broadcast from rank 0, then the first commit */
  } else
#endif
  {
    rc = comm_broadcast_state(t);
  }
  if (rc == KOLO_OK) rc = agree_schedule(t, &mine, "start");
  if (rc != KOLO_OK) return rc;
  r->resumed_step = h->step;
  kolo_train_shuffle(h->seed, h->epoch, t->perm, kolo_train_data_count(t->train));
  return KOLO_OK;
}

/* Failures a re-formed ring can recover from. */
static int recoverable(kolo_status rc) {
  return rc == KOLO_ERR_PEER_LOST || rc == KOLO_ERR_ABORTED || rc == KOLO_ERR_TIMEOUT ||
         rc == KOLO_ERR_RING_CHANGED || rc == KOLO_ERR_CONNECT || rc == KOLO_ERR_STALE_EPOCH;
}

/* After a failed collective or a ring change: with an elastic context, forms
 * the agent's next ring, restores the last committed state (broadcast from the
 * new rank 0) and lets the loop continue from it; otherwise the failure stands. */
static kolo_status recover(kolo_train_trainer *t, kolo_status failure) {
#ifndef KOLO_TRAIN_NO_COMM
  if (!t->elastic || !recoverable(failure)) return failure;
  if (t->rounds) kolo_train_rounds_drop(t->rounds); /* on the failed communicator: at once */
  kolo_status rc = failure;
  /* the schedule trained with (it never changes in a run), or derived if none yet */
  kolo_train_schedule mine = t->agreed ? t->schedule : t->own;
  for (int attempt = 0; rc != KOLO_OK && attempt < 10; attempt++) {
    if (kolo_elastic_should_stop(t->elastic)) return KOLO_ERR_ABORTED;
    KOLO_LOGW(LOG_TAG, "rank %d: %s at step %llu; re-forming the ring", t->rank, kolo_strerror(rc),
              (unsigned long long)kolo_train_state_header_of(t->state)->step);
    rc = kolo_elastic_reform(t->elastic);
    if (rc == KOLO_OK) {
      t->comm = kolo_elastic_comm(t->elastic);
      t->rank = kolo_comm_rank(t->comm);
      t->size = kolo_comm_size(t->comm);
      rc = agree_schedule(t, &mine, "reform");
    }
    if (rc != KOLO_OK && !recoverable(rc)) return rc;
  }
  if (rc != KOLO_OK) return rc;
  /* the global batch did not change, so neither does the (scaled) learning rate */
  kolo_train_state_header *h = kolo_train_state_header_of(t->state);
  kolo_train_shuffle(h->seed, h->epoch, t->perm, kolo_train_data_count(t->train));
  t->reforms++;
  KOLO_LOGI(LOG_TAG, "rank %d of %d: resumed at step %llu (epoch %llu) after re-forming", t->rank,
            t->size, (unsigned long long)h->step, (unsigned long long)h->epoch);
  return KOLO_OK;
#else
  (void)t;
  return failure;
#endif
}

/* The stop condition: the step limit, or else the epoch limit. */
static int finished(kolo_train_trainer *t) {
  const kolo_train_state_header *h = kolo_train_state_header_of(t->state);
  return t->config.steps ? h->step >= t->config.steps : h->epoch >= t->config.epochs;
}

/* Why the run must stop now: NULL to go on, "a signal" or "the agent". */
static const char *stop_reason(kolo_train_trainer *t) {
  if (t->config.stop_flag && *t->config.stop_flag) return "a signal";
#ifndef KOLO_TRAIN_NO_COMM
  if (t->elastic && kolo_elastic_should_stop(t->elastic)) return "the agent";
#endif
  return NULL;
}

/* Whether to commit after this step: every commit_every steps; LOCAL_SGD and
 * DILOCO with one fragment only where the replicas are one model (a round's
 * end), at the first such step commit_every or more steps after the last
 * commit, so a re-formed ring resumes from a state every rank had. */
static int commit_due(kolo_train_trainer *t) {
  uint64_t step = kolo_train_state_header_of(t->state)->step, every = t->config.commit_every;
  if (every == 0) return 0;
  if (t->rounds && t->config.fragments == 1 && t->config.mode != KOLO_TRAIN_ASYNC)
    return kolo_train_rounds_synced_at(t->rounds, step) && step >= t->committed_step + every;
  return step % every == 0;
}

/* Commits the state to the elastic context (in memory, no communication). */
static kolo_status commit_state(kolo_train_trainer *t) {
#ifndef KOLO_TRAIN_NO_COMM
  if (t->elastic) {
    t->committed_step = kolo_train_state_header_of(t->state)->step;
    t->committed_checksum = state_checksum(t);
    return kolo_elastic_commit(t->elastic);
  }
#else
  (void)t;
#endif
  return KOLO_OK;
}

/* The end of training: the replicas of the other modes become one model (an
 * ASYNC average, LOCAL_SGD/DILOCO's last outer steps), then the final
 * evaluation (unless the last epoch-end one is of these weights). */
static kolo_status finish(kolo_train_trainer *t, int have_eval, kolo_train_result *result) {
  if (t->rounds) {
    kolo_status rc = kolo_train_rounds_finish(t->rounds, t->comm,
                                              kolo_train_state_header_of(t->state)->step, t->state);
    if (rc != KOLO_OK) return rc;
    have_eval = 0;
  }
  if (have_eval) return KOLO_OK;
  return evaluate(t, &result->test_accuracy, &result->test_loss);
}

kolo_status kolo_train_trainer_run(kolo_train_trainer *t, kolo_train_result *result) {
  if (!t || !result) return KOLO_ERR_INVALID_ARG;
  memset(result, 0, sizeof *result);
  const kolo_train_config *c = &t->config;
  kolo_train_state_header *h = kolo_train_state_header_of(t->state);
  float *params = kolo_train_state_params(t->state);
  float *optim = kolo_train_state_optim(t->state);
  size_t n = kolo_train_data_count(t->train);

  kolo_status rc = initial_state(t, result);
  while (rc != KOLO_OK && recoverable(rc) && t->elastic) rc = recover(t, rc);
  if (rc != KOLO_OK) goto out;
  result->total_steps = total_steps(t); /* by the ring's schedule, known once synced */

  double start = now_seconds(), window_start = start;
  double window_loss = 0.0;
  uint64_t window_batches = 0, window_local = 0, window_global = 0, window_correct = 0;
  uint64_t local_samples = 0, global_samples = 0;
  int have_eval = 0; /* the last epoch-end evaluation is of the current weights */
  for (;;) {
    const char *why = stop_reason(t);
    if (why) {
      KOLO_LOGW(LOG_TAG, "rank %d: stopped by %s at step %llu%s", t->rank, why,
                (unsigned long long)h->step,
                t->config.checkpoint_dir && t->rank == 0 ? "; writing a checkpoint" : "");
      write_checkpoint(t);
      result->steps = h->step;
      rc = KOLO_ERR_ABORTED;
      goto out;
    }
    if (finished(t)) {
      rc = finish(t, have_eval, result);
      if (rc == KOLO_OK) break;
      rc = recover(t, rc); /* back to the last commit; train up to the end again */
      if (rc != KOLO_OK) goto out;
      continue;
    }
    size_t global_batch = t->global_batch;
    float *grads =
        kolo_train_model_grads(t->model); /* the model is rebuilt if a ring needs more room */
    int local = t->rounds != NULL;        /* every mode but SYNC steps on local gradients */
    int epoch_ended = 0;
    uint64_t ended_epoch = h->epoch;
    for (size_t micro = 0; micro < c->accumulate; micro++) {
      if (h->epoch_offset >= n) {
        next_epoch(t);
        epoch_ended = 1;
      }
      size_t window = n - h->epoch_offset < global_batch ? n - h->epoch_offset : global_batch;
      size_t got =
          kolo_train_shard(t->perm, n, h->epoch_offset, global_batch, t->rank, t->size, t->index);
      kolo_train_data_gather(t->train, t->index, got, t->x, t->y);
      /* SYNC: scaled so that the AVG all-reduce yields the mean over the whole
       * window even when ranks' shares differ (size * grad / window, averaged
       * over size ranks); otherwise the mean over this rank's samples */
      float scale = 0.0f;
      if (got && !local && t->size > 1) {
        scale = (float)t->size / (float)(window * c->accumulate);
      } else if (got) {
        scale = 1.0f / (float)(got * c->accumulate);
      }
      size_t correct = 0;
      double loss =
          kolo_train_model_train_batch(t->model, t->x, t->y, got, scale, micro > 0, &correct);
      window_correct += correct;
      window_loss += loss;
      window_batches++;
      window_local += got;
      window_global += window;
      local_samples += got;
      global_samples += window;
      h->epoch_offset += window;
      h->samples += window;
    }
    if (h->epoch_offset >= n) {
      next_epoch(t);
      epoch_ended = 1;
    }
    if (!local) {
      double began = now_seconds();
      rc = comm_average_gradients(t, grads);
      if (t->size > 1) { /* bytes by the ring's count: 2 (n - 1) / n of the buffer */
        t->sync_stats.blocked_seconds += now_seconds() - began;
        t->sync_stats.rounds++;
        t->sync_stats.bytes_sent +=
            (uint64_t)(2.0 * (t->size - 1) / t->size * (double)(t->param_count * sizeof(float)));
      }
      if (rc != KOLO_OK) {
        rc = recover(t, rc);
        if (rc != KOLO_OK) goto out;
        continue;
      }
    }
    have_eval = 0;
    double lr = kolo_train_optim_lr(&t->config.optim, h->step);
    kolo_train_optim_step(&t->config.optim, h->step, params, grads, optim, t->param_count);
    h->step++;
    if (c->step_delay_us) usleep(c->step_delay_us); /* a deliberately slow rank */
    if (local) {
      rc = kolo_train_rounds_after_step(t->rounds, t->comm, h->step, t->state);
      if (rc != KOLO_OK) {
        rc = recover(t, rc);
        if (rc != KOLO_OK) goto out;
        continue;
      }
    }
    if (c->log_every && h->step % c->log_every == 0) {
      double now = now_seconds(), dt = now - window_start;
      result->last_loss = window_batches ? window_loss / (double)window_batches : 0.0;
      double train_accuracy = window_local ? (double)window_correct / (double)window_local : 0.0;
      report_progress(t, result->last_loss, train_accuracy,
                      dt > 0 ? (double)window_local / dt : 0.0,
                      dt > 0 ? (double)window_global / dt : 0.0, lr);
      window_start = now;
      window_loss = 0.0;
      window_batches = window_local = window_global = window_correct = 0;
    }
    if (epoch_ended) {
      result->epochs++;
      if (c->eval) {
        double acc = 0.0, l = 0.0;
        rc = evaluate(t, &acc, &l);
        if (rc != KOLO_OK) {
          rc = recover(t, rc);
          if (rc != KOLO_OK) goto out;
          continue;
        }
        report_eval(t, ended_epoch, acc, l);
        result->test_accuracy = acc;
        result->test_loss = l;
        have_eval = !local;
      }
    }
    if (commit_due(t)) {
      rc = commit_state(t);
      if (rc != KOLO_OK) {
        rc = recover(t, rc);
        if (rc != KOLO_OK) goto out;
        continue;
      }
    }
    if (c->checkpoint_every && h->step % c->checkpoint_every == 0) {
      rc = write_checkpoint(t);
      if (rc != KOLO_OK) goto out;
    }
  }
  if (window_batches) result->last_loss = window_loss / (double)window_batches;
  result->seconds = now_seconds() - start;
  result->steps = h->step;
  result->reconfigurations = t->reforms;
  if (result->seconds > 0) {
    result->samples_per_second_worker = (double)local_samples / result->seconds;
    result->samples_per_second_total = (double)global_samples / result->seconds;
  }
  rc = write_checkpoint(t);
out:
  if (rc != KOLO_OK && t->comm) {
    KOLO_LOGE(LOG_TAG, "rank %d: training failed at step %llu: %s", t->rank,
              (unsigned long long)h->step, kolo_strerror(rc));
  }
  return rc;
}
