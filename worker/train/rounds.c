/* Implementation of rounds.h: ASYNC's ring of outstanding averages and the
 * outer syncs of LOCAL_SGD/DILOCO (docs/TRAINER.md has the exact rules). */
#include "worker/train/rounds.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/train/outer.h"

typedef struct round {
  float *snapshot;       /* the model when the round started (the all-reduce's send buffer) */
  float *average;        /* the average arriving */
  float *applied;        /* corrections of older rounds folded in after snapshot was taken */
  kolo_request *request; /* in flight, or NULL */
} round;

struct kolo_train_rounds {
  kolo_train_config config;
  size_t param_count;
  round *ring; /* ASYNC: max_staleness slots, the oldest at head */
  uint32_t head, outstanding;
  float *delta;    /* LOCAL_SGD/DILOCO: the pseudo-gradient of a fragment */
  void *wire;      /* its encoding (fp16 / int8) */
  uint8_t *gather; /* int8: every rank's encoding */
  size_t gather_bytes;
  kolo_train_rounds_stats stats;
};

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int comm_size(kolo_comm *comm) {
#ifndef KOLO_TRAIN_NO_COMM
  return comm ? kolo_comm_size(comm) : 1;
#else
  (void)comm;
  return 1;
#endif
}

/* Bytes one rank sends in a ring all-reduce of `bytes` over n ranks. */
static uint64_t allreduce_bytes(size_t bytes, int n) {
  return n > 1 ? (uint64_t)(2.0 * (double)(n - 1) / (double)n * (double)bytes) : 0;
}

static int outer_mode(const kolo_train_rounds *r) {
  return r->config.mode == KOLO_TRAIN_LOCAL_SGD || r->config.mode == KOLO_TRAIN_DILOCO;
}

kolo_status kolo_train_rounds_create(const kolo_train_config *config, size_t param_count,
                                     kolo_train_rounds **out) {
  if (!config || !out || config->mode == KOLO_TRAIN_SYNC || config->average_every == 0 ||
      config->max_staleness == 0 || config->fragments == 0 || param_count == 0)
    return KOLO_ERR_INVALID_ARG;
  kolo_train_rounds *r = calloc(1, sizeof *r);
  if (!r) return KOLO_ERR_NO_MEMORY;
  r->config = *config;
  r->param_count = param_count;
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  if (config->mode == KOLO_TRAIN_ASYNC) {
    r->ring = calloc(config->max_staleness, sizeof *r->ring); /* buffers when first used */
    if (!r->ring) goto fail;
  } else {
    size_t largest = (param_count + config->fragments - 1) / config->fragments + 1;
    r->delta = malloc(param_count * sizeof(float));
    r->wire = malloc(kolo_train_int8_size(largest) + largest * sizeof(uint16_t));
    if (!r->delta || !r->wire) goto fail;
  }
  *out = r;
  return KOLO_OK;
fail:
  kolo_train_rounds_destroy(r);
  return rc;
}

void kolo_train_rounds_destroy(kolo_train_rounds *r) {
  if (!r) return;
  kolo_train_rounds_drop(r);
  for (uint32_t k = 0; r->ring && k < r->config.max_staleness; k++) {
    free(r->ring[k].snapshot);
    free(r->ring[k].applied);
    free(r->ring[k].average);
  }
  free(r->ring);
  free(r->delta);
  free(r->wire);
  free(r->gather);
  free(r);
}

void kolo_train_rounds_reset(kolo_train_state *state) {
  float *start = kolo_train_state_round_start(state);
  if (!start) return;
  size_t n = kolo_train_state_header_of(state)->param_count;
  memcpy(start, kolo_train_state_params(state), n * sizeof(float));
  memset(kolo_train_state_outer_momentum(state), 0, n * sizeof(float));
}

void kolo_train_rounds_drop(kolo_train_rounds *r) {
#ifndef KOLO_TRAIN_NO_COMM
  for (; r->ring && r->outstanding > 0; r->outstanding--) {
    round *o = &r->ring[r->head];
    if (o->request) kolo_wait(o->request);
    o->request = NULL;
    r->head = (r->head + 1) % r->config.max_staleness;
  }
#endif
  r->outstanding = 0;
}

void kolo_train_rounds_stats_of(const kolo_train_rounds *r, kolo_train_rounds_stats *out) {
  *out = r->stats;
}

int kolo_train_rounds_synced_at(const kolo_train_rounds *r, uint64_t step) {
  return outer_mode(r) && r->config.fragments == 1 && step % r->config.average_every == 0;
}

/* ---- ASYNC ---- */

#ifndef KOLO_TRAIN_NO_COMM
/* Completes the oldest round (block = 1 waits for it) and folds it in:
 * w <- w + c with c = average - snapshot - applied, the average plus the local progress
 * made since. applied holds the corrections of older rounds folded in after this round's
 * snapshot was taken: the snapshot (and so the average) does not have them, w does, so
 * without taking them out a rank would keep its own deviation of the older round (with
 * max_staleness >= 2 and short rounds that made the model diverge). c is added to the
 * applied of every round still outstanding, for the same reason. *done = 0 when it is
 * still running (block = 0). */
static kolo_status complete_oldest(kolo_train_rounds *r, int block, float *params, int *done) {
  round *o = &r->ring[r->head];
  kolo_status rc = KOLO_OK;
  *done = 1;
  if (block) {
    double start = now_seconds();
    rc = kolo_wait(o->request);
    r->stats.blocked_seconds += now_seconds() - start;
  } else {
    kolo_status st = KOLO_OK;
    rc = kolo_test(o->request, done, &st);
    if (rc == KOLO_OK && !*done) return KOLO_OK;
    if (rc == KOLO_OK) rc = st;
  }
  o->request = NULL;
  r->head = (r->head + 1) % r->config.max_staleness;
  r->outstanding--;
  if (rc != KOLO_OK) return rc;
  for (size_t i = 0; i < r->param_count; i++) {
    float c = o->average[i] - o->snapshot[i] - o->applied[i];
    params[i] += c;
    for (uint32_t k = 0; k < r->outstanding; k++)
      r->ring[(r->head + k) % r->config.max_staleness].applied[i] += c;
  }
  r->stats.rounds++;
  return KOLO_OK;
}

static kolo_status async_step(kolo_train_rounds *r, kolo_comm *comm, uint64_t step, float *params) {
  int done = 1;
  kolo_status rc = KOLO_OK;
  while (rc == KOLO_OK && r->outstanding > 0 && done) rc = complete_oldest(r, 0, params, &done);
  if (rc != KOLO_OK || step % r->config.average_every != 0) return rc;
  /* the bound: never more than max_staleness rounds outstanding */
  while (rc == KOLO_OK && r->outstanding >= r->config.max_staleness)
    rc = complete_oldest(r, 1, params, &done);
  if (rc != KOLO_OK) return rc;
  round *o = &r->ring[(r->head + r->outstanding) % r->config.max_staleness];
  if (!o->snapshot) o->snapshot = malloc(r->param_count * sizeof(float));
  if (!o->average) o->average = malloc(r->param_count * sizeof(float));
  if (!o->applied) o->applied = malloc(r->param_count * sizeof(float));
  if (!o->snapshot || !o->average || !o->applied) return KOLO_ERR_NO_MEMORY;
  memset(o->applied, 0, r->param_count * sizeof(float));
  memcpy(o->snapshot, params, r->param_count * sizeof(float));
  rc = kolo_allreduce_async(comm, o->snapshot, o->average, r->param_count, KOLO_FLOAT32, KOLO_AVG,
                            &o->request);
  if (rc != KOLO_OK) return rc;
  r->outstanding++;
  if (r->outstanding > r->stats.staleness) r->stats.staleness = r->outstanding;
  r->stats.bytes_sent += allreduce_bytes(r->param_count * sizeof(float), comm_size(comm));
  return KOLO_OK;
}
#endif

/* ---- LOCAL_SGD / DILOCO ---- */

/* Averages the pseudo-gradient delta[0..n) over the ring, as configured. */
static kolo_status average_delta(kolo_train_rounds *r, kolo_comm *comm, size_t n) {
#ifndef KOLO_TRAIN_NO_COMM
  int size = comm_size(comm);
  if (size < 2) return KOLO_OK;
  kolo_status rc = KOLO_OK;
  if (r->config.compression == KOLO_TRAIN_COMPRESS_NONE) {
    rc = kolo_allreduce(comm, r->delta, r->delta, n, KOLO_FLOAT32, KOLO_AVG);
    r->stats.bytes_sent += allreduce_bytes(n * sizeof(float), size);
  } else if (r->config.compression == KOLO_TRAIN_COMPRESS_FP16) {
    uint16_t *half = r->wire;
    for (size_t i = 0; i < n; i++) half[i] = kolo_float_to_half(r->delta[i]);
    rc = kolo_allreduce(comm, half, half, n, KOLO_FLOAT16, KOLO_AVG);
    for (size_t i = 0; rc == KOLO_OK && i < n; i++) r->delta[i] = kolo_half_to_float(half[i]);
    r->stats.bytes_sent += allreduce_bytes(n * sizeof(uint16_t), size);
  } else {
    /* int8 values do not add up in int8: every rank's encoding is gathered and
     * each rank decodes them all in rank order, so every replica gets the same sum */
    size_t bytes = kolo_train_int8_size(n);
    if (r->gather_bytes < bytes * (size_t)size) {
      uint8_t *g = realloc(r->gather, bytes * (size_t)size);
      if (!g) return KOLO_ERR_NO_MEMORY;
      r->gather = g;
      r->gather_bytes = bytes * (size_t)size;
    }
    kolo_train_int8_encode(r->delta, n, r->wire);
    rc = kolo_allgather(comm, r->wire, bytes, r->gather, r->gather_bytes, NULL, KOLO_UINT8);
    if (rc == KOLO_OK) {
      memset(r->delta, 0, n * sizeof(float));
      for (int k = 0; k < size; k++)
        kolo_train_int8_decode_add(r->gather + (size_t)k * bytes, n, 1.0f / (float)size, r->delta);
    }
    r->stats.bytes_sent += (uint64_t)(size - 1) * bytes;
  }
  return rc;
#else
  (void)r, (void)comm, (void)n;
  return KOLO_OK;
#endif
}

/* The outer sync of fragment f: its pseudo-gradient averaged, then the outer step. */
static kolo_status outer_sync(kolo_train_rounds *r, kolo_comm *comm, uint32_t f,
                              kolo_train_state *state) {
  size_t lo = r->param_count * f / r->config.fragments;
  size_t hi = r->param_count * (f + 1) / r->config.fragments, n = hi - lo;
  float *params = kolo_train_state_params(state) + lo;
  float *start = kolo_train_state_round_start(state) + lo;
  float *momentum = kolo_train_state_outer_momentum(state) + lo;
  for (size_t i = 0; i < n; i++) r->delta[i] = start[i] - params[i];
  double began = now_seconds();
  kolo_status rc = average_delta(r, comm, n);
  r->stats.blocked_seconds += now_seconds() - began;
  if (rc != KOLO_OK) return rc;
  kolo_train_outer_step(params, start, momentum, r->delta, n, r->config.outer_lr,
                        r->config.outer_momentum, r->config.nesterov);
  r->stats.rounds++;
  return KOLO_OK;
}

/* The step of a round at which fragment f is synced. */
static uint64_t fragment_offset(const kolo_train_rounds *r, uint32_t f) {
  return r->config.average_every * f / r->config.fragments;
}

kolo_status kolo_train_rounds_after_step(kolo_train_rounds *r, kolo_comm *comm, uint64_t step,
                                         kolo_train_state *state) {
  if (r->config.mode == KOLO_TRAIN_ASYNC) {
#ifndef KOLO_TRAIN_NO_COMM
    if (comm_size(comm) > 1) return async_step(r, comm, step, kolo_train_state_params(state));
#endif
    return KOLO_OK;
  }
  kolo_status rc = KOLO_OK;
  for (uint32_t f = 0; f < r->config.fragments && rc == KOLO_OK; f++) {
    if (step % r->config.average_every == fragment_offset(r, f)) rc = outer_sync(r, comm, f, state);
  }
  return rc;
}

kolo_status kolo_train_rounds_finish(kolo_train_rounds *r, kolo_comm *comm, uint64_t step,
                                     kolo_train_state *state) {
  kolo_status rc = KOLO_OK;
  if (r->config.mode == KOLO_TRAIN_ASYNC) {
#ifndef KOLO_TRAIN_NO_COMM
    float *params = kolo_train_state_params(state);
    int done = 1;
    while (rc == KOLO_OK && r->outstanding > 0) rc = complete_oldest(r, 1, params, &done);
    if (rc == KOLO_OK && comm_size(comm) > 1) {
      double began = now_seconds();
      rc = kolo_allreduce(comm, params, params, r->param_count, KOLO_FLOAT32, KOLO_AVG);
      r->stats.blocked_seconds += now_seconds() - began;
      r->stats.bytes_sent += allreduce_bytes(r->param_count * sizeof(float), comm_size(comm));
    }
#endif
    return rc;
  }
  /* every fragment not synced at this very step closes its round now */
  for (uint32_t f = 0; f < r->config.fragments && rc == KOLO_OK; f++) {
    if (step % r->config.average_every != fragment_offset(r, f)) rc = outer_sync(r, comm, f, state);
  }
  return rc;
}
