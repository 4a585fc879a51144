/* The built-in trainer as an elastic service job: a real etcd, kolo-server and
 * three kolo-worker agents running kolo-train on Fashion-MNIST. One run goes
 * undisturbed; in a second, identical run one worker is SIGKILLed mid-training.
 * The disturbed job must re-form once, finish, and land within one accuracy
 * point of the undisturbed one. (kolo-train keeps the job's global batch when
 * the ring shrinks; before it did, the survivors trained at 2 x 32 instead of
 * 3 x 32 and landed 0.5-0.9 points lower from the batch size alone.) */
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

static json_t *status_of(json_t *job) { return json_object_get(job, "status"); }

static void submit_mlp(cluster *c, const char *id) {
  char body[512];
  snprintf(body, sizeof body,
           "{\"id\":\"%s\",\"name\":\"%s\",\"min_workers\":2,\"max_workers\":3,"
           "\"builtin\":{\"model\":\"mlp\",\"dataset\":\"fashion-mnist\",\"learning_rate\":0.02,"
           "\"epochs\":4,\"batch_size\":32,\"hyper_parameters\":{\"hidden\":\"128\",\"seed\":\"7\"}}}",
           id, id);
  json_t *job = cluster_post(c, "/v1/jobs", body);
  assert_non_null(job);
  json_decref(job);
}

static double final_accuracy(json_t *job) {
  return json_number_value(json_object_get(json_object_get(status_of(job), "progress"), "accuracy"));
}

static void a_builtin_job_that_loses_a_worker_ends_within_a_point_of_an_undisturbed_one(void **state) {
  cluster *c = *state;
  char train[512];
  snprintf(train, sizeof train, "%s/kolo-train", getenv("KOLO_BIN_DIR"));
  FILE *probe = fopen(train, "r");
  if (probe == NULL) KOLO_TEST_SKIP("%s is not part of this build", train);
  fclose(probe);
  FILE *data = fopen("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", "r");
  if (data == NULL) KOLO_TEST_SKIP("Debian's dataset-fashion-mnist is not installed");
  fclose(data);
  for (int i = 1; i <= 3; i++) assert_int_equal(cluster_start_worker(c, i), 0);

  submit_mlp(c, "calm");
  json_t *calm = cluster_wait_phase(c, "calm", "SUCCEEDED", 1, 120000);
  assert_string_equal(json_string_value(json_object_get(status_of(calm), "phase")), "SUCCEEDED");
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
  double storm_accuracy = final_accuracy(storm);
  char *dump = json_dumps(json_object_get(status, "progress"), 0);
  printf("storm progress %s\n", dump);
  free(dump);
  json_decref(storm);

  printf("undisturbed %.2f%%, one worker killed %.2f%%\n", 100 * calm_accuracy, 100 * storm_accuracy);
  assert_true(calm_accuracy > 0.84);
  assert_true(storm_accuracy > calm_accuracy - 0.01);
  assert_true(storm_accuracy < calm_accuracy + 0.01);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(
          a_builtin_job_that_loses_a_worker_ends_within_a_point_of_an_undisturbed_one, setup,
          teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
