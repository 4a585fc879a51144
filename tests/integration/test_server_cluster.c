/* What the control plane reports about jobs and workers once real workers run them: a
 * real etcd, one kolo-server and kolo-worker agents running kolo-train (the cluster
 * harness of tests/integration/test_worker_cluster.h). Each case is one promise of
 * docs/API.md that needs a running job to check: progress.total_steps, the worker
 * records' state names and registration time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_worker_cluster.h"
#include "tests/support/skip.h"

static int setup(void **state) {
  cluster *c = calloc(1, sizeof *c);
  *state = c;
  if (c == NULL || cluster_start(c, 1) != 0) return -1;
  for (int i = 1; i <= 2; i++)
    if (cluster_start_worker(c, i) != 0) return -1;
  return 0;
}

static int teardown(void **state) {
  cluster *c = *state;
  if (c) cluster_stop(c);
  free(c);
  return 0;
}

static json_t *progress_of(json_t *job) {
  return json_object_get(json_object_get(job, "status"), "progress");
}

static uint64_t field_u64(json_t *obj, const char *name) {
  return (uint64_t)json_integer_value(json_object_get(obj, name));
}

/* Submits a 2-worker logreg job on kolo-train's synthetic data (6000 samples) and waits
 * for it to end; returns the final job. */
static json_t *run_builtin(cluster *c, const char *id, const char *program) {
  char body[768];
  snprintf(body, sizeof body,
           "{\"id\":\"%s\",\"name\":\"%s\",\"min_workers\":2,"
           "\"builtin\":{\"model\":\"logreg\",\"dataset\":\"synthetic\",%s,"
           "\"hyper_parameters\":{\"log-every\":\"5\",\"eval\":\"false\"}}}",
           id, id, program);
  json_t *submitted = cluster_post(c, "/v1/jobs", body);
  assert_non_null(submitted);
  json_decref(submitted);
  json_t *job = cluster_wait_phase(c, id, "SUCCEEDED", 1, 120000);
  assert_non_null(job);
  const char *phase = json_string_value(json_object_get(json_object_get(job, "status"), "phase"));
  if (phase == NULL || strcmp(phase, "SUCCEEDED") != 0) cluster_print_job(job);
  assert_string_equal(phase, "SUCCEEDED");
  return job;
}

static void a_job_with_a_step_limit_reports_it_as_total_steps(void **state) {
  cluster *c = *state;
  json_t *job = run_builtin(c, "steps-60", "\"steps\":60,\"batch_size\":16");
  json_t *progress = progress_of(job);
  assert_int_equal(field_u64(progress, "step"), 60);
  assert_int_equal(field_u64(progress, "total_steps"), 60);
  json_decref(job);
}

static void a_job_with_epochs_reports_epochs_times_steps_per_epoch(void **state) {
  cluster *c = *state;
  /* 6000 samples, 2 workers x 100 = 200 per step: 30 steps per epoch, 2 epochs */
  json_t *job = run_builtin(c, "epochs-2", "\"epochs\":2,\"batch_size\":100");
  json_t *progress = progress_of(job);
  assert_int_equal(field_u64(progress, "total_steps"), 60);
  assert_int_equal(field_u64(progress, "step"), 60);
  json_decref(job);
}

int main(void) {
  const char *bin = getenv("KOLO_BIN_DIR");
  char train[512];
  snprintf(train, sizeof train, "%s/kolo-train", bin ? bin : ".");
  FILE *probe = fopen(train, "r");
  if (probe == NULL) KOLO_TEST_SKIP("kolo-train is not part of this build");
  fclose(probe);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_job_with_a_step_limit_reports_it_as_total_steps),
      cmocka_unit_test(a_job_with_epochs_reports_epochs_times_steps_per_epoch),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
