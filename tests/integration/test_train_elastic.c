/* Elastic kolo-train against a test agent on a unix socket (the agent side of
 * the protocol in collective/elastic.c): three real kolo-train processes form
 * the ring the agent announces; one is SIGKILLed mid-run; the survivors re-form
 * at the next epoch, restore the last commit and finish. The run must end with
 * one reconfiguration and an accuracy close to an undisturbed run. A STOP from
 * the agent ends every rank promptly.
 * Usage: test_train_elastic [synthetic|fashion] (default synthetic). */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tests/integration/train_agent.h"

/* Each test's agent lives in its state, so teardown stops its processes even
 * when an assertion ends the test early. */
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

/* A survivor's "synced" report after the re-form: every member resumed from
 * the same state, the survivors' own last commit, taken at most one commit
 * interval before rank 0 left its ring (not an older commit, not step 0). */
static void assert_resumed_from_the_last_commit(const grown *run, const int *members, int n,
                                                const int *survivor, long long after) {
  long long step = json_number(run->synced[members[0]], "synced_step");
  long long crc = json_number(run->synced[members[0]], "synced_checksum");
  printf("rank 0 left its ring at step %lld, the ring resumed at step %lld (checksum %lld)\n",
         run->left_at, step, crc);
  assert_true(run->left_at >= after);
  assert_true(step <= run->left_at && step + 10 >= run->left_at);
  assert_true(step % 10 == 0); /* --commit-every 10 */
  for (int k = 0; k < n; k++) {
    const char *line = run->synced[members[k]];
    assert_int_equal(json_number(line, "synced_step"), step);
    assert_int_equal(json_number(line, "synced_checksum"), crc);
    if (!survivor[k]) continue;
    /* a survivor's own last commit is the ring's, or the one before it when the kill
     * came between the ranks' commits of one step (rank 0 finished the step and
     * committed, this rank's collective of it failed): then rank 0's state wins */
    long long committed = json_number(line, "committed_step");
    if (committed != step) assert_int_equal(committed, step - 10);
    if (committed == step) assert_int_equal(json_number(line, "committed_checksum"), crc);
  }
}

static void a_killed_worker_costs_at_most_one_point_of_accuracy(void **state) {
  agent *a = *state;
  int fashion = strcmp(g_dataset, "fashion") == 0;
  long long steps = fashion ? FASHION_EPOCHS * ((60000 + 95) / 96) : 6 * ((6000 + 47) / 48);
  grown plain, killed;
  run_job(a, 0, &plain);
  long kill_at = fashion ? 300 : 40;
  run_job(a, kill_at, &killed);
  printf("%s: undisturbed accuracy %.4f, with a worker killed %.4f (%d reconfiguration)\n",
         g_dataset, plain.accuracy, killed.accuracy, killed.reconfigurations);
  for (int i = 0; i < PROCS; i++) {
    assert_int_equal(plain.exits[i], 0);
    assert_int_equal(plain.steps[i], steps);
  }
  assert_int_equal(plain.reconfigurations, 0);
  assert_int_equal(killed.reconfigurations, 1);
  const int left[2] = {0, 2}, both[2] = {1, 1};
  for (int k = 0; k < 2; k++) {
    assert_int_equal(killed.exits[left[k]], 0);
    assert_int_equal(killed.steps[left[k]],
                     steps); /* the job's global batch kept: the same steps */
  }
  assert_resumed_from_the_last_commit(&killed, left, 2, both, kill_at);
  assert_true(plain.accuracy >= (fashion ? 0.84 : 0.9));
  assert_true(killed.accuracy >= plain.accuracy - 0.01);
}

/* Two processes form a ring; with join_at > 0 a third one (learning rate lr)
 * joins at epoch 2 once rank 0 reports that step. Every process must end. */
static void run_grow(agent *a, long join_at, const char *lr, grown *out) {
  memset(out, 0, sizeof *out);
  agent_stop(a);
  agent_start(a);
  int n = join_at > 0 ? 3 : 2;
  for (int i = 0; i < 2; i++) agent_spawn(a, i);
  int ring1[2] = {0, 1};
  agent_announce(a, 1, ring1, 2);
  for (int i = 0; i < 2; i++) agent_wait(a, i, "FORMED 1", NULL, 0, 60);
  if (join_at > 0) {
    agent_wait(a, 0, "REPORT {\"event\":\"progress\"", "\"step\":", join_at, 120);
    agent_spawn_lr(a, 2, lr);
    int ring2[3] = {0, 1, 2};
    agent_announce(a, 2, ring2, 3);
    for (int i = 0; i < 3; i++) agent_wait(a, i, "FORMED 2", NULL, 0, 60);
  }
  int same = strcmp(lr, "0.02") == 0;
  for (int i = 0; join_at > 0 && same && i < 3; i++)
    agent_wait_line(a, i, "REPORT {\"event\":\"synced\"",
                    i < 2 ? "\"synced_reason\":\"reform" : NULL, 0, 60, out->synced[i],
                    sizeof out->synced[i]);
  for (int i = 0; i < n; i++) {
    char done[1024] = "";
    if (same) {
      agent_wait_line(a, i, "REPORT {\"event\":\"done\"", NULL, 0, 240, done, sizeof done);
      out->steps[i] = json_number(done, "steps");
    }
    out->exits[i] = agent_wait_exit(a, i, 240);
  }
  if (out->exits[0] == 0) read_done(a, 0, &out->accuracy, &out->reconfigurations);
  out->left_at = join_at > 0 ? reform_step(a, 0) : -1;
}

static void a_newcomer_trains_by_the_ring_schedule_and_the_run_stays_exact(void **state) {
  agent *a = *state;
  int fashion = strcmp(g_dataset, "fashion") == 0;
  long long epochs = fashion ? FASHION_EPOCHS : 6, samples = fashion ? 60000 : 6000,
            global_batch = fashion ? 64 : 32;
  long long expected_steps = epochs * ((samples + global_batch - 1) / global_batch);
  grown plain, grew;
  run_grow(a, 0, "0.02", &plain);
  long join_at = fashion ? 300 : 40;
  run_grow(a, join_at, "0.02", &grew);
  printf("%s: 2 workers %.4f (%lld steps), a third joining at step %ld %.4f (%lld steps)\n",
         g_dataset, plain.accuracy, plain.steps[0], join_at, grew.accuracy, grew.steps[0]);
  for (int i = 0; i < 2; i++) assert_int_equal(plain.exits[i], 0);
  assert_int_equal(plain.steps[0], expected_steps);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(grew.exits[i], 0);
    /* the step count is the schedule's: it did not change when the ring grew */
    assert_int_equal(grew.steps[i], expected_steps);
    /* the newcomer took the ring's global batch (2 x batch), not 3 x batch */
    assert_int_equal(json_number(grew.synced[i], "global_batch"), global_batch);
    assert_int_equal(json_number(grew.synced[i], "workers"), 3);
  }
  /* every member continues from the same state: the survivors' last commit
   * before the join took them off their ring (how far past join_at that was
   * depends on the machine's load, not on kolo) */
  const int all[3] = {0, 1, 2}, survivor[3] = {1, 1, 0};
  assert_resumed_from_the_last_commit(&grew, all, 3, survivor, join_at);
  assert_true(json_number(grew.synced[0], "synced_step") < expected_steps);
  assert_true(plain.accuracy >= (fashion ? 0.84 : 0.9));
  assert_true(grew.accuracy >= plain.accuracy - 0.01 && grew.accuracy <= plain.accuracy + 0.01);
}

static void a_newcomer_with_another_learning_rate_fails_every_rank(void **state) {
  agent *a = *state;
  grown run;
  run_grow(a, 40, "0.05", &run);
  for (int i = 0; i < 3; i++) assert_int_equal(run.exits[i], 2); /* a usage error, not a crash */
  char cmd[512];
  snprintf(cmd, sizeof cmd, "grep -q 'learning rate 0.05 here, 0.02 in the ring' '%s/out.2'",
           a->dir);
  assert_int_equal(system(cmd), 0);
  for (int i = 0; i < 2; i++) {
    snprintf(cmd, sizeof cmd, "grep -q \"another rank's training schedule differs\" '%s/out.%d'",
             a->dir, i);
    assert_int_equal(system(cmd), 0);
  }
}

static void a_stop_from_the_agent_ends_every_rank_promptly(void **state) {
  agent *a = *state;
  agent_start(a);
  for (int i = 0; i < 2; i++) agent_spawn(a, i);
  int ring1[2] = {0, 1};
  agent_announce(a, 1, ring1, 2);
  agent_wait(a, 0, "REPORT {\"event\":\"progress\"", "\"step\":", 30, 120);
  double start = now_seconds();
  for (int i = 0; i < 2; i++) assert_int_equal(write(a->conns[i], "STOP cancelled\n", 15), 15);
  for (int i = 0; i < 2; i++) assert_int_equal(agent_wait_exit(a, i, 60), 1);
  assert_true(now_seconds() - start < 10.0);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "grep -q 'stopped by the agent\\|communicator aborted' '%s/out.0'",
           a->dir);
  assert_int_equal(system(cmd), 0);
  agent_stop(a);
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc > 1) g_dataset = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(a_killed_worker_costs_at_most_one_point_of_accuracy, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(
          a_newcomer_trains_by_the_ring_schedule_and_the_run_stays_exact, setup, teardown),
      cmocka_unit_test_setup_teardown(a_newcomer_with_another_learning_rate_fails_every_rank, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_stop_from_the_agent_ends_every_rank_promptly, setup,
                                      teardown),
  };
  /* KOLO_TEST_FILTER=<glob> runs only the matching cases (to reproduce one) */
  const char *filter = getenv("KOLO_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
