/* The built-in trainer as an elastic service job: a real etcd, kolo-server and
 * kolo-worker agents running kolo-train on Fashion-MNIST (4 epochs, batch 32
 * per worker).
 * - Shrink: one run of three workers goes undisturbed; in a second, identical
 *   run one worker is SIGKILLed mid-training. The disturbed job re-forms once,
 *   takes exactly as many steps, resumes from its last commit, and lands within
 *   a quarter of a point of the undisturbed one. (kolo-train keeps the job's global
 *   batch when the ring shrinks; before it did, the survivors trained at 2 x 32
 *   instead of 3 x 32 and landed 0.5-0.9 points lower from the batch size alone.)
 * - Growth: a job started on two workers gains a third mid-run, over shared
 *   memory and over TCP only (KOLO_SHM=0, the path between hosts). The ring
 *   grows without a reconfiguration, the newcomer trains by the ring's schedule
 *   (2 x 32, not 3 x 32), the step count is exact and the accuracy within one
 *   point of an undisturbed two-worker run. (Before the schedule travelled with
 *   the state, the newcomer used 3 x 32: with shared memory every rank timed out
 *   within a few hundred steps; over TCP the model was silently corrupted.) */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../support/skip.h"
#include "test_worker_cluster.h"

static int setup(void **state) {
  cluster *c = calloc(1, sizeof *c);
  *state = c;
  return c && cluster_start(c, 1) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  cluster *c = *state;
  if (c) cluster_stop(c);
  free(c);
  return 0;
}

/* Skips (exit 77, which CI refuses unless justified) without kolo-train or the dataset. */
static void require_trainer_and_data(void) {
  char train[512];
  snprintf(train, sizeof train, "%s/kolo-train", getenv("KOLO_BIN_DIR"));
  FILE *probe = fopen(train, "r");
  if (probe == NULL) KOLO_TEST_SKIP("%s is not part of this build", train);
  fclose(probe);
  FILE *data = fopen("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", "r");
  if (data == NULL) KOLO_TEST_SKIP("Debian's dataset-fashion-mnist is not installed");
  fclose(data);
}

static json_t *status_of(json_t *job) {
  return json_object_get(job, "status");
}

static void submit_mlp(cluster *c, const char *id) {
  char body[512];
  snprintf(
      body, sizeof body,
      "{\"id\":\"%s\",\"name\":\"%s\",\"min_workers\":2,\"max_workers\":3,"
      "\"builtin\":{\"model\":\"mlp\",\"dataset\":\"fashion-mnist\",\"learning_rate\":0.02,"
      "\"epochs\":4,\"batch_size\":32,\"hyper_parameters\":{\"hidden\":\"128\",\"seed\":\"7\"}}}",
      id, id);
  json_t *job = cluster_post(c, "/v1/jobs", body);
  assert_non_null(job);
  json_decref(job);
}

static double final_accuracy(json_t *job) {
  return json_number_value(
      json_object_get(json_object_get(status_of(job), "progress"), "accuracy"));
}

static json_int_t final_step(json_t *job) {
  return json_integer_value(json_object_get(json_object_get(status_of(job), "progress"), "step"));
}

/* 4 epochs of Fashion-MNIST's 60000 samples in windows of global_batch */
static json_int_t steps_for(json_int_t global_batch) {
  return 4 * ((60000 + global_batch - 1) / global_batch);
}

static json_int_t report_int(json_t *report, const char *name) {
  return json_integer_value(json_object_get(json_object_get(report, "progress"), name));
}

/* Every worker listed continued from the same state after its last re-form
 * (same step and state checksum), at least min_step: the commit the new ring's
 * rank 0 held (kolo_elastic_sync broadcasts rank 0's state, as Horovod's
 * state.sync() does). A survivor cut short between its reduction and its commit
 * holds the commit before (one --commit-every, 10 steps, back); when rank 0 was
 * the one cut short, the others hold one commit more (CI: w5 at 780, the ring
 * resumed at rank 0 w4's 770). A newcomer's state came from the ring. Each
 * trained by the ring's global batch. */
static void assert_resumed_together(cluster *c, const char *job, const char *const *workers, int n,
                                    const int *survivor, json_int_t min_step,
                                    json_int_t global_batch) {
  json_int_t step = -1, crc = -1;
  int newest = 0, survivors = 0;
  for (int i = 0; i < n; i++) {
    json_t *report = cluster_report(c, job, workers[i]);
    assert_non_null(report);
    char *text = json_dumps(json_object_get(report, "progress"), JSON_COMPACT);
    printf("%s report of %s: %s\n", job, workers[i], text ? text : "?");
    free(text);
    const char *reason =
        json_string_value(json_object_get(json_object_get(report, "progress"), "synced_reason"));
    assert_non_null(reason);
    assert_string_equal(reason, survivor[i] ? "reform" : "start");
    if (i == 0) {
      step = report_int(report, "synced_step");
      crc = report_int(report, "synced_checksum");
    }
    assert_int_equal(report_int(report, "synced_step"), step);
    assert_int_equal(report_int(report, "synced_checksum"), crc);
    assert_int_equal(report_int(report, "global_batch"), global_batch);
    if (survivor[i]) {
      json_int_t committed = report_int(report, "committed_step");
      assert_true(committed <= step + 10 && committed >= step - 10);
      if (committed == step) {
        assert_int_equal(report_int(report, "committed_checksum"), crc);
        newest++;
      }
    }
    json_decref(report);
  }
  assert_true(step >= min_step);
  for (int i = 0; i < n; i++) survivors += survivor[i] != 0;
  if (survivors) assert_true(newest >= 1); /* the ring resumed from a commit someone held */
}

static void a_builtin_job_that_loses_a_worker_ends_within_a_point_of_an_undisturbed_one(
    void **state) {
  cluster *c = *state;
  require_trainer_and_data();
  for (int i = 1; i <= 3; i++) assert_int_equal(cluster_start_worker(c, i), 0);

  submit_mlp(c, "calm");
  json_t *calm = cluster_wait_phase(c, "calm", "SUCCEEDED", 1, 120000);
  assert_string_equal(json_string_value(json_object_get(status_of(calm), "phase")), "SUCCEEDED");
  assert_int_equal(final_step(calm), steps_for(96));
  double calm_accuracy = final_accuracy(calm);
  char *calm_dump = json_dumps(json_object_get(status_of(calm), "progress"), 0);
  printf("calm progress %s\n", calm_dump);
  free(calm_dump);
  json_decref(calm);

  submit_mlp(c, "storm");
  assert_int_equal(cluster_wait_step(c, "storm", 200, 60000), 0);
  cluster_signal_worker(c, 2, SIGKILL);
  json_t *storm = cluster_wait_phase(c, "storm", "SUCCEEDED", 2, 120000);
  json_t *status = status_of(storm);
  assert_string_equal(json_string_value(json_object_get(status, "phase")), "SUCCEEDED");
  assert_int_equal(json_integer_value(json_object_get(status, "reconfigurations")), 1);
  assert_non_null(cluster_event(storm, "WORKER_LOST", 2));
  assert_int_equal(final_step(storm), steps_for(96)); /* none skipped, none counted twice */
  const char *survivors[] = {"w1", "w3"};
  const int both[] = {1, 1};
  assert_resumed_together(c, "storm", survivors, 2, both, 200, 96);
  double storm_accuracy = final_accuracy(storm);
  char *dump = json_dumps(json_object_get(status, "progress"), 0);
  printf("storm progress %s\n", dump);
  free(dump);
  json_decref(storm);

  printf("undisturbed %.2f%%, one worker killed %.2f%%\n", 100 * calm_accuracy,
         100 * storm_accuracy);
  assert_true(calm_accuracy > 0.84);
  /* the same schedule and data order from the same commit: only the reduction's
   * rounding differs, and that alone moves the result: 86.39% vs 86.39% once,
   * 86.15% vs 86.41% in CI (the calm run's ranks sum in another order from
   * run to run). The global batch itself is checked above; the trainer that
   * dropped it to 2 x 32 landed 0.5-0.9 points lower */
  assert_true(storm_accuracy > calm_accuracy - 0.005);
  assert_true(storm_accuracy < calm_accuracy + 0.005);
}

/* Runs job id on workers w<first> and w<first+1>, a third (w<first+2>) joining
 * once rank 0 reports step 200; returns the finished job. */
static json_t *grow_job(cluster *c, const char *id, int first) {
  submit_mlp(c, id);
  assert_int_equal(cluster_wait_step(c, id, 200, 60000), 0);
  assert_int_equal(cluster_start_worker(c, first + 2), 0);
  json_t *job = cluster_wait_phase(c, id, "SUCCEEDED", 2, 180000);
  json_t *status = status_of(job);
  if (strcmp(json_string_value(json_object_get(status, "phase")) ?: "", "SUCCEEDED") != 0 ||
      json_integer_value(json_object_get(status, "epoch")) != 2)
    cluster_dump(c, id, "the grown job did not end SUCCEEDED at epoch 2");
  assert_string_equal(json_string_value(json_object_get(status, "phase")), "SUCCEEDED");
  assert_int_equal(json_integer_value(json_object_get(status, "epoch")), 2);
  assert_int_equal(json_array_size(json_object_get(status, "members")), 3);
  assert_int_equal(json_integer_value(json_object_get(status, "reconfigurations")), 0);
  assert_non_null(cluster_event(job, "WORKER_JOINED", 2));
  /* the ring kept the schedule it started with: 2 x 32 per window */
  assert_int_equal(final_step(job), steps_for(64));
  char w[3][16];
  const char *workers[3];
  for (int i = 0; i < 3; i++) {
    snprintf(w[i], sizeof w[i], "w%d", first + i);
    workers[i] = w[i];
  }
  const int survivor[] = {1, 1, 0};
  assert_resumed_together(c, id, workers, 3, survivor, 200, 64);
  return job;
}

static void a_builtin_job_that_grows_keeps_its_schedule_over_shared_memory_and_tcp(void **state) {
  cluster *c = *state;
  require_trainer_and_data();
  for (int i = 1; i <= 2; i++) assert_int_equal(cluster_start_worker(c, i), 0);
  submit_mlp(c, "pair");
  json_t *pair = cluster_wait_phase(c, "pair", "SUCCEEDED", 1, 120000);
  assert_string_equal(json_string_value(json_object_get(status_of(pair), "phase")), "SUCCEEDED");
  assert_int_equal(final_step(pair), steps_for(64));
  double pair_accuracy = final_accuracy(pair);
  json_decref(pair);

  json_t *shm = grow_job(c, "grow-shm", 1);
  double shm_accuracy = final_accuracy(shm);
  json_decref(shm);

  /* the same over TCP only: fresh workers whose processes inherit KOLO_SHM=0 */
  for (int i = 1; i <= 3; i++) {
    cluster_signal_worker(c, i, SIGTERM);
    assert_int_equal(cluster_wait_worker(c, i, 20000), 0);
  }
  setenv("KOLO_SHM", "0", 1);
  for (int i = 4; i <= 5; i++) assert_int_equal(cluster_start_worker(c, i), 0);
  json_t *tcp = grow_job(c, "grow-tcp", 4);
  unsetenv("KOLO_SHM");
  double tcp_accuracy = final_accuracy(tcp);
  json_decref(tcp);

  printf("two workers %.2f%%, a third joining: shared memory %.2f%%, TCP %.2f%%\n",
         100 * pair_accuracy, 100 * shm_accuracy, 100 * tcp_accuracy);
  assert_true(pair_accuracy > 0.84);
  assert_true(shm_accuracy > pair_accuracy - 0.01 && shm_accuracy < pair_accuracy + 0.01);
  assert_true(tcp_accuracy > pair_accuracy - 0.01 && tcp_accuracy < pair_accuracy + 0.01);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(
          a_builtin_job_that_loses_a_worker_ends_within_a_point_of_an_undisturbed_one, setup,
          teardown),
      cmocka_unit_test_setup_teardown(
          a_builtin_job_that_grows_keeps_its_schedule_over_shared_memory_and_tcp, setup, teardown),
  };
  /* KOLO_TEST_FILTER=<glob> runs only the matching cases (to reproduce one) */
  const char *filter = getenv("KOLO_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
