/* The thread-per-rank ring harness of kolo-train's integration tests
 * (test_train_equivalence.c, test_train_modes_ring.c): each rank joins a real
 * TCP ring on 127.0.0.1 (ports picked by the kernel), trains with its own
 * config and keeps a copy of its final weights and mode figures; run_single
 * trains the same config alone. Header-only (static functions): include it
 * after cmocka.h in one test file. */
#ifndef KOLO_TESTS_TRAIN_RING_H
#define KOLO_TESTS_TRAIN_RING_H

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kolo/kolo.h"
#include "worker/train/rounds.h"
#include "worker/train/trainer.h"

#define MAX_RANKS 4

typedef struct rank_job {
  _Atomic(kolo_comm *) comm; /* published once joined, for the abort test */
  kolo_ring_spec spec;
  kolo_listener *listener;
  kolo_train_config config;
  kolo_status status;
  kolo_train_result result;
  float *params;
  size_t count;
  kolo_train_rounds_stats stats; /* the mode's figures (kolo_train_trainer_mode_stats) */
} rank_job;

/* One rank: join the ring, train, keep a copy of the final weights. */
__attribute__((unused)) static void *rank_main(void *arg) {
  rank_job *j = arg;
  kolo_comm *comm = NULL;
  kolo_train_trainer *t = NULL;
  j->status = kolo_comm_create(&j->spec, j->listener, &comm);
  if (j->status != KOLO_OK) return NULL;
  atomic_store(&j->comm, comm);
  j->status = kolo_train_trainer_create(&j->config, comm, NULL, &t);
  if (j->status == KOLO_OK) j->status = kolo_train_trainer_run(t, &j->result);
  if (j->status == KOLO_OK) {
    kolo_train_state *s = kolo_train_trainer_state(t);
    j->count = kolo_train_state_header_of(s)->param_count;
    j->params = malloc(j->count * sizeof(float));
    memcpy(j->params, kolo_train_state_params(s), j->count * sizeof(float));
    kolo_train_trainer_mode_stats(t, &j->stats);
  }
  kolo_train_trainer_destroy(t);
  atomic_store(&j->comm, NULL);
  kolo_comm_destroy(comm);
  return NULL;
}

typedef struct ring {
  char addresses[MAX_RANKS][64];
  const char *peers[MAX_RANKS];
  pthread_t threads[MAX_RANKS];
  int size;
} ring;

/* Starts configs[0..size) as the ranks of one ring, one thread each. */
__attribute__((unused)) static void start_ring(ring *g, int size, const kolo_train_config *configs,
                                               rank_job *jobs) {
  char(*addresses)[64] = g->addresses;
  const char **peers = g->peers;
  pthread_t *threads = g->threads;
  g->size = size;
  for (int r = 0; r < size; r++) {
    memset(&jobs[r], 0, sizeof jobs[r]);
    assert_int_equal(kolo_listener_create("127.0.0.1:0", &jobs[r].listener), KOLO_OK);
    assert_int_equal(kolo_listener_address(jobs[r].listener, addresses[r], sizeof addresses[r]),
                     KOLO_OK);
    peers[r] = addresses[r];
  }
  for (int r = 0; r < size; r++) {
    kolo_ring_spec *s = &jobs[r].spec;
    s->epoch = 1;
    s->rank = r;
    s->size = size;
    s->local_rank = r;
    s->local_size = size;
    s->peers = peers;
    s->secret = "equivalence";
    s->timeout_ms = 30000;
    jobs[r].config = configs[r];
    assert_int_equal(pthread_create(&threads[r], NULL, rank_main, &jobs[r]), 0);
  }
}

__attribute__((unused)) static void join_ring(ring *g) {
  for (int r = 0; r < g->size; r++) pthread_join(g->threads[r], NULL);
}

/* Runs configs[0..size) as the ranks of one ring; jobs receive the results. */
__attribute__((unused)) static void run_ring(int size, const kolo_train_config *configs,
                                             rank_job *jobs) {
  ring g;
  start_ring(&g, size, configs, jobs);
  join_ring(&g);
  for (int r = 0; r < size; r++) {
    if (jobs[r].status != KOLO_OK) {
      fail_msg("rank %d failed: %s", r, kolo_strerror(jobs[r].status));
    }
  }
}

/* The same config run by one process without a communicator. */
__attribute__((unused)) static float *run_single(const kolo_train_config *c, size_t *count) {
  kolo_train_trainer *t = NULL;
  assert_int_equal(kolo_train_trainer_create(c, NULL, NULL, &t), KOLO_OK);
  kolo_train_result r;
  assert_int_equal(kolo_train_trainer_run(t, &r), KOLO_OK);
  kolo_train_state *s = kolo_train_trainer_state(t);
  *count = kolo_train_state_header_of(s)->param_count;
  float *p = malloc(*count * sizeof(float));
  memcpy(p, kolo_train_state_params(s), *count * sizeof(float));
  kolo_train_trainer_destroy(t);
  return p;
}

__attribute__((unused)) static double max_rel_diff(const float *a, const float *b, size_t n) {
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]) / (1e-3 + fabs((double)a[i]));
    if (d > worst) worst = d;
  }
  return worst;
}

#endif
