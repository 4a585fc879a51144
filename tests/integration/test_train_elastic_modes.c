/* A kill in every non-SYNC mode of kolo-train continues in the same processes
 * (the test agent of train_agent.h; synthetic data, 3 processes, one SIGKILLed
 * at step 40): the survivors re-form once, resume from one state and finish
 * the whole schedule. LOCAL_SGD and DILOCO commit only at a round's end, where
 * every replica is the same model with the same outer state, so the ring
 * resumes at a step every survivor committed, which ends a round; ASYNC
 * resumes from the new rank 0's commit. Every process acknowledges its mode to the agent (DILOCO's
 * from the job's KOLO_MODE* environment, without a --mode flag). */
#define _GNU_SOURCE /* accept4 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/integration/train_agent.h"

static int setup(void **state) {
  agent *a = calloc(1, sizeof *a);
  if (!a) return -1;
  *state = a;
  return 0;
}

static int teardown(void **state) {
  agent_stop(*state);
  free(*state);
  return 0;
}

/* Runs the mode's flags (or, with env, the job's KOLO_MODE* environment)
 * with process 1 killed at step 40; checks the run and that every process
 * acknowledged mode (kolo_elastic_acknowledge_mode's MODE line). */
static void check_kill(agent *a, const char *const *mode_args, const char *const *env,
                       const char *mode, int rounds_commit) {
  g_extra_args = mode_args;
  g_extra_env = env;
  grown run;
  run_job(a, 40, &run);
  g_extra_args = g_extra_env = NULL;
  /* (the killed process's lines after its FORMED are not read: the survivors') */
  printf("acknowledged: %s, %s\n", run.mode[0], run.mode[2]);
  assert_string_equal(run.mode[0], mode);
  assert_string_equal(run.mode[2], mode);
  const int left[2] = {0, 2};
  long long steps = 6 * ((6000 + 47) / 48); /* the global batch (3 x 16) is kept */
  long long step = json_number(run.synced[0], "synced_step");
  long long crc = json_number(run.synced[0], "synced_checksum");
  printf(
      "%s: rank 0 left at step %lld, the ring resumed at %lld (checksum %lld), "
      "accuracy %.4f, %d reconfiguration\n",
      mode, run.left_at, step, crc, run.accuracy, run.reconfigurations);
  assert_int_equal(run.reconfigurations, 1);
  for (int k = 0; k < 2; k++) {
    int i = left[k];
    assert_int_equal(run.exits[i], 0);
    assert_int_equal(run.steps[i], steps);
    assert_int_equal(json_number(run.synced[i], "synced_step"), step);
    assert_int_equal(json_number(run.synced[i], "synced_checksum"), crc);
  }
  assert_true(step > 0 && step <= run.left_at);
  if (rounds_commit) {
    /* H = 8, --commit-every 10: a commit at the first round end 10 or more
     * steps after the last, i.e. every 16 steps */
    assert_true(step % 16 == 0 && step + 16 >= run.left_at);
    for (int k = 0; k < 2; k++) {
      const char *line = run.synced[left[k]];
      long long committed = json_number(line, "committed_step");
      /* its own last commit, or (killed between the ranks' commits of one step) the one
       * before; the whole state is rank 0's own (the inner optimizer's moments are each
       * rank's: only the weights and the outer state are every rank's) */
      if (committed != step) assert_int_equal(committed, step - 16);
      if (committed == step && k == 0)
        assert_int_equal(json_number(line, "committed_checksum"), crc);
    }
  } else {
    assert_true(step % 10 == 0 && step + 10 >= run.left_at);
  }
  assert_true(run.accuracy >= 0.9);
}

static void a_kill_in_async_mode_continues(void **state) {
  static const char *const args[] = {"--mode", "async", "--average-every", "4", "--max-staleness",
                                     "2",      NULL};
  check_kill(*state, args, NULL, "ASYNC", 0);
}

static void a_kill_in_local_sgd_mode_continues_from_a_round_end(void **state) {
  static const char *const args[] = {"--mode", "local_sgd", "--average-every", "8", NULL};
  check_kill(*state, args, NULL, "LOCAL_SGD", 1);
}

/* DILOCO as a job asks for it: no --mode flag, the agent's KOLO_MODE* environment */
static void a_kill_in_diloco_mode_continues_from_a_round_end(void **state) {
  static const char *const env[] = {"KOLO_MODE=DILOCO", "KOLO_MODE_SYNC_EVERY=8",
                                    "KOLO_MODE_COMPRESSION=int8", NULL};
  static const char *const none[] = {NULL};
  check_kill(*state, none, env, "DILOCO", 1);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(a_kill_in_async_mode_continues, setup, teardown),
      cmocka_unit_test_setup_teardown(a_kill_in_local_sgd_mode_continues_from_a_round_end, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_kill_in_diloco_mode_continues_from_a_round_end, setup,
                                      teardown),
  };
  const char *filter = getenv("KOLO_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
