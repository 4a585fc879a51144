/* Integration test of data-parallel training over a real TCP ring (libkolo,
 * 127.0.0.1, ports picked by the kernel), one thread per rank: 2 workers with
 * per-worker batch b end with the same weights (to float tolerance) as 1 worker
 * with batch 2b on the same data order, for MLP and LeNet; 3 workers whose
 * shares of a window differ (487 samples in windows of 15: every epoch ends
 * with a window of 7, split 3/2/2) match 1 worker with the whole window; SYNC
 * replicas are bit-identical; ASYNC replicas end identical after the final
 * average. */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kolo/kolo.h"
#include "tests/integration/train_ring.h"
#include "worker/train/trainer.h"

typedef struct fixture {
  kolo_train_dataset *train, *test;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  /* 480 samples: 15 global batches of 32 per epoch, so runs cross epochs */
  if (kolo_train_data_synthetic(11, 480, 200, &f->train, &f->test) != KOLO_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kolo_train_data_destroy(f->train);
  kolo_train_data_destroy(f->test);
  free(f);
  return 0;
}

static void base_config(const fixture *f, kolo_train_config *c) {
  kolo_train_config_defaults(c);
  c->train_set = f->train;
  c->test_set = f->test;
  c->hidden = "32,16";
  c->eval = 0;
  c->log_every = 0;
  c->optim.lr = 0.05f;
  c->optim.momentum = 0.9f;
  c->optim.weight_decay = 1e-4f;
}

/* 2 x batch b over the ring vs 1 x batch 2b alone: same weights; replicas bit-identical. */
static void check_equivalence(const fixture *f, const char *model, size_t b, uint64_t steps) {
  kolo_train_config c[2];
  base_config(f, &c[0]);
  c[0].model = model;
  c[0].batch = b;
  c[0].steps = steps;
  c[1] = c[0];
  rank_job jobs[2];
  run_ring(2, c, jobs);
  assert_int_equal(jobs[0].count, jobs[1].count);
  assert_memory_equal(jobs[0].params, jobs[1].params, jobs[0].count * sizeof(float));
  assert_int_equal(jobs[0].result.steps, steps);

  kolo_train_config single = c[0];
  single.batch = 2 * b;
  size_t n;
  float *p = run_single(&single, &n);
  assert_int_equal(n, jobs[0].count);
  double d = max_rel_diff(p, jobs[0].params, n);
  printf("%s: 2 x batch %zu vs 1 x batch %zu after %llu steps: max relative difference %.3g\n",
         model, b, 2 * b, (unsigned long long)steps, d);
  if (d > 1e-3) fail_msg("%s: weights differ by %g", model, d);

  /* and the comparison can fail: 1 worker with batch b follows another path */
  single.batch = b;
  float *q = run_single(&single, &n);
  assert_true(max_rel_diff(q, jobs[0].params, n) > 1e-2);
  free(p);
  free(q);
  free(jobs[0].params);
  free(jobs[1].params);
}

static void two_mlp_workers_with_batch_b_match_one_with_batch_2b(void **state) {
  check_equivalence(*state, "mlp", 16, 40);
}

static void two_lenet_workers_with_batch_b_match_one_with_batch_2b(void **state) {
  check_equivalence(*state, "lenet", 8, 8);
}

/* The gradient of a rank is scaled by size / window, so the AVG all-reduce is
 * the exact mean over the window even when the ranks' shares differ. */
static void unequal_shares_of_a_window_still_average_to_its_exact_mean(void **state) {
  (void)state;
  kolo_train_dataset *train = NULL, *test = NULL;
  assert_int_equal(kolo_train_data_synthetic(13, 487, 100, &train, &test), KOLO_OK);
  fixture local = {.train = train, .test = test};
  kolo_train_config c[3];
  base_config(&local, &c[0]);
  c[0].batch = 5;  /* windows of 15: 32 full ones and one of 7 per epoch */
  c[0].steps = 33; /* one epoch: 32 full windows, then the uneven one */
  c[1] = c[2] = c[0];
  rank_job jobs[3];
  run_ring(3, c, jobs);
  for (int r = 1; r < 3; r++)
    assert_memory_equal(jobs[0].params, jobs[r].params, jobs[0].count * sizeof(float));
  kolo_train_config single = c[0];
  single.batch = 15;
  size_t n;
  float *p = run_single(&single, &n);
  double d = max_rel_diff(p, jobs[0].params, n);
  printf(
      "3 x batch 5 (shares 3/2/2 at the epoch end) vs 1 x batch 15 after 33 steps: max relative "
      "difference %.3g\n",
      d);
  if (d > 1e-3) fail_msg("unequal shares: weights differ by %g", d);
  free(p);
  for (int r = 0; r < 3; r++) free(jobs[r].params);
  kolo_train_data_destroy(train);
  kolo_train_data_destroy(test);
}

static void adam_warmup_accumulation_and_lr_scaling_keep_the_equivalence(void **state) {
  fixture *f = *state;
  kolo_train_config c[2];
  base_config(f, &c[0]);
  c[0].optim.kind = KOLO_TRAIN_ADAM;
  c[0].optim.lr = 0.002f;
  c[0].optim.warmup = 5;
  c[0].scale_lr = 1; /* 2 workers: lr x 2 */
  c[0].accumulate = 2;
  c[0].batch = 8;
  c[0].steps = 25;
  c[1] = c[0];
  rank_job jobs[2];
  run_ring(2, c, jobs);
  assert_memory_equal(jobs[0].params, jobs[1].params, jobs[0].count * sizeof(float));
  kolo_train_config single = c[0];
  single.batch = 16;
  single.scale_lr = 0;
  single.optim.lr = 0.004f;
  size_t n;
  float *p = run_single(&single, &n);
  double d = max_rel_diff(p, jobs[0].params, n);
  printf("adam+warmup+accumulate+scale-lr: max relative difference %.3g\n", d);
  assert_true(d < 1e-3);
  /* without the doubled rate the single run goes elsewhere */
  single.optim.lr = 0.002f;
  float *q = run_single(&single, &n);
  assert_true(max_rel_diff(q, jobs[0].params, n) > 1e-2);
  free(p);
  free(q);
  free(jobs[0].params);
  free(jobs[1].params);
}

static void initial_state_and_data_order_come_from_rank_0(void **state) {
  fixture *f = *state;
  kolo_train_config c[2];
  base_config(f, &c[0]);
  c[0].batch = 16;
  c[0].steps = 20;
  c[1] = c[0];
  c[1].seed = 777; /* ignored: rank 0's weights and seed are broadcast */
  rank_job jobs[2];
  run_ring(2, c, jobs);
  assert_memory_equal(jobs[0].params, jobs[1].params, jobs[0].count * sizeof(float));
  kolo_train_config single = c[0];
  single.batch = 32;
  size_t n;
  float *p = run_single(&single, &n);
  assert_true(max_rel_diff(p, jobs[0].params, n) < 1e-3);
  free(p);
  free(jobs[0].params);
  free(jobs[1].params);
}

static void async_workers_end_identical_and_learn(void **state) {
  fixture *f = *state;
  kolo_train_config c[2];
  base_config(f, &c[0]);
  c[0].mode = KOLO_TRAIN_ASYNC;
  c[0].average_every = 4;
  c[0].batch = 16;
  c[0].steps = 0;
  c[0].epochs = 3;
  c[0].optim.lr = 0.02f;
  c[1] = c[0];
  rank_job jobs[2];
  run_ring(2, c, jobs);
  assert_memory_equal(jobs[0].params, jobs[1].params, jobs[0].count * sizeof(float));
  printf("async: accuracy %.3f after %llu steps\n", jobs[0].result.test_accuracy,
         (unsigned long long)jobs[0].result.steps);
  assert_true(jobs[0].result.test_accuracy >= 0.9);
  assert_true(jobs[0].result.test_accuracy == jobs[1].result.test_accuracy);
  /* async is not secretly sync: it differs from the 1 x 2b run */
  kolo_train_config single = c[0];
  single.mode = KOLO_TRAIN_SYNC;
  single.batch = 32;
  size_t n;
  float *p = run_single(&single, &n);
  assert_true(max_rel_diff(p, jobs[0].params, n) > 1e-3);
  free(p);
  free(jobs[0].params);
  free(jobs[1].params);
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Aborts rank 1's communicator mid-run: both ranks stop with an error, no hang. */
static void check_abort(const fixture *f, kolo_train_mode mode) {
  kolo_train_config c[2];
  base_config(f, &c[0]);
  c[0].mode = mode;
  c[0].average_every = 2;
  c[0].batch = 16;
  c[0].steps = 1000000; /* far more than the test lets it run */
  c[1] = c[0];
  rank_job jobs[2];
  ring g;
  double start = now_seconds();
  start_ring(&g, 2, c, jobs);
  kolo_comm *victim = NULL;
  while (!(victim = atomic_load(&jobs[1].comm)) && now_seconds() - start < 20) usleep(10000);
  assert_non_null(victim);
  usleep(200000); /* let it train a little */
  kolo_comm_abort(victim);
  join_ring(&g);
  double took = now_seconds() - start;
  printf("%s: abort of rank 1 -> rank 0 %s, rank 1 %s after %.2f s\n",
         mode == KOLO_TRAIN_SYNC ? "sync" : "async", kolo_status_name(jobs[0].status),
         kolo_status_name(jobs[1].status), took);
  assert_int_not_equal(jobs[0].status, KOLO_OK);
  assert_int_not_equal(jobs[1].status, KOLO_OK);
  assert_true(took < 15.0); /* well under the 30 s collective timeout */
}

static void aborting_one_rank_stops_sync_training_with_an_error(void **state) {
  check_abort(*state, KOLO_TRAIN_SYNC);
}

static void aborting_one_rank_stops_async_training_with_an_error(void **state) {
  check_abort(*state, KOLO_TRAIN_ASYNC);
}

int main(void) {
  openblas_set_num_threads(1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(two_mlp_workers_with_batch_b_match_one_with_batch_2b, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(two_lenet_workers_with_batch_b_match_one_with_batch_2b, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(unequal_shares_of_a_window_still_average_to_its_exact_mean,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(adam_warmup_accumulation_and_lr_scaling_keep_the_equivalence,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(initial_state_and_data_order_come_from_rank_0, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(async_workers_end_identical_and_learn, setup, teardown),
      cmocka_unit_test_setup_teardown(aborting_one_rank_stops_sync_training_with_an_error, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(aborting_one_rank_stops_async_training_with_an_error, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
