/* A job's training mode reaches its processes and nobody silently runs another (issue 26),
 * on a real cluster (etcd, kolo-server, two kolo-workers on 127.0.0.1) with elastic_loop as
 * the exec program:
 * - an exec job asking for ASYNC whose program ignores the mode FAILS at once (no
 *   re-forming, no retry) with the reason "the program did not acknowledge mode ASYNC (it
 *   would have run SYNC) ...";
 * - the same program acknowledging the mode it reads from its environment
 *   (kolo_mode_from_env, kolo_elastic_acknowledge_mode) runs to SUCCEEDED, exact;
 * - a program acknowledging another mode than the job's fails naming both;
 * - a builtin ASYNC job (kolo-train acknowledges at start, its flags from the spec) runs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_worker_cluster.h"

static int setup(void **state) {
  cluster *c = calloc(1, sizeof *c);
  if (c == NULL || cluster_start(c, 1) != 0) return -1;
  for (int i = 1; i <= 2; i++)
    if (cluster_start_worker(c, i) != 0) return -1;
  *state = c;
  return 0;
}

static int teardown(void **state) {
  cluster_stop(*state);
  free(*state);
  return 0;
}

static json_t *status_of(json_t *job) {
  return json_object_get(job, "status");
}

static const char *error_of(json_t *job) {
  const char *error = json_string_value(json_object_get(status_of(job), "error"));
  return error ? error : "";
}

/* Submits a 2-worker ASYNC elastic_loop job whose processes acknowledge ack ("" = nothing)
 * and waits for it to end; returns the job. */
static json_t *run_async_job(cluster *c, const char *id, const char *ack, const char *end) {
  char env[128] = "";
  if (ack[0]) snprintf(env, sizeof env, "\"KOLO_LOOP_ACKNOWLEDGE\":\"%s\"", ack);
  assert_int_equal(
      cluster_submit_env(c, id, 2, 2, 60, 5, "\"mode\":\"ASYNC\",\"average_every\":4", env), 0);
  json_t *job = cluster_wait_phase(c, id, end, 0, 60000);
  assert_non_null(job);
  const char *phase = json_string_value(json_object_get(status_of(job), "phase"));
  if (strcmp(phase ? phase : "", end) != 0) {
    cluster_print_job(job);
    fail_msg("job %s ended %s, want %s", id, phase ? phase : "?", end);
  }
  return job;
}

static void an_async_job_whose_program_ignores_the_mode_fails_with_the_reason(void **state) {
  cluster *c = *state;
  json_t *job = run_async_job(c, "ignores", "", "FAILED");
  const char *error = error_of(job);
  if (strstr(error, "the program did not acknowledge mode ASYNC (it would have run SYNC)") ==
          NULL ||
      strstr(error, "kolo_elastic_acknowledge_mode()") == NULL)
    fail_msg("error: %s", error);
  /* failed at once: never re-formed, never retried as lost workers */
  assert_int_equal(json_integer_value(json_object_get(status_of(job), "reconfigurations")), 0);
  assert_null(cluster_event(job, "WORKER_LOST", 0));
  json_decref(job);
  assert_int_equal(cluster_wait_no_processes(c, "ignores", "w1", 10000), 0);
  assert_int_equal(cluster_wait_no_processes(c, "ignores", "w2", 10000), 0);
}

static void the_same_program_acknowledging_the_mode_runs(void **state) {
  cluster *c = *state;
  json_t *job = run_async_job(c, "acknowledges", "env", "SUCCEEDED");
  /* what the mode reports reaches the status (and from there /metrics and the history) */
  json_t *progress = json_object_get(status_of(job), "progress");
  assert_string_equal(json_string_value(json_object_get(progress, "mode")), "ASYNC");
  assert_int_equal(json_integer_value(json_object_get(progress, "rounds")), 12); /* 60 / 5 */
  assert_int_equal(json_integer_value(json_object_get(progress, "bytes_sent")), 60 * 1000 * 8);
  json_decref(job);
  assert_int_equal(cluster_results(c, "acknowledges", 60), 2);
}

static void a_program_acknowledging_another_mode_fails_naming_both(void **state) {
  cluster *c = *state;
  json_t *job = run_async_job(c, "other-mode", "SYNC", "FAILED");
  if (strstr(error_of(job), "the program runs mode SYNC, but the job asked for mode ASYNC") == NULL)
    fail_msg("error: %s", error_of(job));
  json_decref(job);
}

static void a_builtin_async_job_acknowledges_and_runs(void **state) {
  cluster *c = *state;
  char path[1200];
  snprintf(path, sizeof path, "%s/kolo-train",
           getenv("KOLO_BIN_DIR") ? getenv("KOLO_BIN_DIR") : ".");
  if (access(path, X_OK) != 0) skip(); /* a build without kolo-train */
  json_t *job = cluster_post(
      c, "/v1/jobs",
      "{\"id\":\"builtin-async\",\"name\":\"builtin-async\",\"min_workers\":2,\"mode\":\"ASYNC\","
      "\"average_every\":4,\"max_staleness\":1,\"builtin\":{\"model\":\"logreg\",\"dataset\":"
      "\"synthetic\",\"steps\":40,\"batch_size\":16}}");
  assert_non_null(job);
  json_decref(job);
  job = cluster_wait_phase(c, "builtin-async", "SUCCEEDED", 0, 120000);
  assert_non_null(job);
  const char *phase = json_string_value(json_object_get(status_of(job), "phase"));
  if (strcmp(phase ? phase : "", "SUCCEEDED") != 0) {
    cluster_print_job(job);
    fail_msg("builtin-async ended %s: %s", phase ? phase : "?", error_of(job));
  }
  json_decref(job);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(an_async_job_whose_program_ignores_the_mode_fails_with_the_reason),
      cmocka_unit_test(the_same_program_acknowledging_the_mode_runs),
      cmocka_unit_test(a_program_acknowledging_another_mode_fails_naming_both),
      cmocka_unit_test(a_builtin_async_job_acknowledges_and_runs),
  };
  const char *filter = getenv("KOLO_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  return cmocka_run_group_tests(tests, setup, teardown);
}
