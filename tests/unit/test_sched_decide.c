/* The scheduler's per-job decision (scheduler/decide.h), case by case: finish,
 * each way a member is lost, FAILED reports and their settle time, re-form /
 * hold / fail, resume, formed, shrink, grow, and the event messages. Views are
 * built by hand; no etcd. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/sched_view.h"

#include "scheduler/decide.h"
#include "scheduler/plan.h"

/* A healthy RUNNING job of n members at epoch 3, every member formed it. */
static void healthy(fixture *f, size_t n) {
  healthy_view(f, n);
}

static void a_healthy_ring_copies_progress(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  assert_int_equal(decide(f), KOLO_SCHED_PROGRESS);
  assert_null(kolo_sched_event_type(KOLO_SCHED_PROGRESS));
}

static void rank_zero_exiting_zero_finishes_once_everyone_exited(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  for (size_t i = 0; i < 3; i++) f->members[i].report.exited = 1;
  assert_int_equal(decide(f), KOLO_SCHED_FINISH);
  assert_int_equal(f->d.exited, 3);
  char *text = message(f);
  assert_string_equal(text, "rank 0 (w0) exited 0 at epoch 3; 3 of 3 processes exited");
  free(text);
}

static void rank_zero_exiting_zero_waits_for_the_others_until_the_grace(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  f->members[0].report.exited = 1;
  f->members[2].registered = 0; /* nothing else is looked at while finishing */
  assert_int_equal(decide(f), KOLO_SCHED_NOTHING);
  f->view.now_unix_ms = f->members[0].report.time_unix_ms + KOLO_SCHED_FINISH_GRACE_MS + 1;
  assert_int_equal(decide(f), KOLO_SCHED_FINISH);
  assert_int_equal(f->d.exited, 1);
}

static void a_member_without_a_record_is_lost_and_the_ring_reforms(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  f->members[1].registered = 0;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
  assert_int_equal(f->d.n_lost, 1);
  assert_int_equal(f->d.lost[0].member, 1);
  assert_string_equal(f->d.lost[0].why, "its lease expired");
  assert_true(kolo_sched_decision_lost(&f->d, 1));
  assert_false(kolo_sched_decision_lost(&f->d, 0));
  assert_string_equal(kolo_sched_event_type(f->d.action), "WORKER_LOST");
  char *text = message(f);
  assert_string_equal(text,
                      "lost w1 (its lease expired); re-forming with 2 survivors and 0 new workers");
  free(text);
}

/* test_chaos seed 1365150667: etcd paused past the workers' lease TTL expired both
 * members' leases; each agent stopped its process and registered again under the same
 * id within milliseconds, so no pass saw the record missing. The member is its lease:
 * a record under another lease is a worker that came back without the process. */
static void a_member_that_registered_again_under_a_new_lease_is_lost(void **state) {
  fixture *f = *state;
  healthy(f, 2);
  f->view.min_workers = 1;
  for (size_t i = 0; i < 2; i++)
    f->members[i].lease = f->members[i].ring_lease = 0x100 + (int64_t)i;
  assert_int_equal(decide(f), KOLO_SCHED_PROGRESS); /* the leases the ring was planned with */
  f->members[1].lease = 0x200;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
  assert_int_equal(f->d.n_lost, 1);
  assert_int_equal(f->d.lost[0].member, 1);
  char *text = message(f);
  assert_string_equal(
      text,
      "lost w1 (its lease expired and it registered again); re-forming with 1 survivors and "
      "0 new workers");
  free(text);
  f->members[0].lease = 0x300; /* both came back: nobody is left to carry the state */
  assert_int_equal(decide(f), KOLO_SCHED_LOST_HOLD);
  assert_int_equal(f->d.n_lost, 2);
}

/* A ring record written before members carried their lease names any registration. */
static void a_ring_without_leases_judges_by_the_record_alone(void **state) {
  fixture *f = *state;
  healthy(f, 2);
  f->members[0].lease = 0x100;
  f->members[1].lease = 0x200;
  assert_int_equal(decide(f), KOLO_SCHED_PROGRESS);
}

static void a_draining_member_leaves_as_planned_at_the_next_commit(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  f->members[2].draining = 1;
  f->members[2].report.exited = 1; /* also failed: the first reason wins */
  f->members[2].report.exit_code = 1;
  f->members[2].report.exit_epoch = 3;
  assert_int_equal(decide(f), KOLO_SCHED_DRAIN_REFORM);
  assert_int_equal(f->d.n_lost, 1);
  assert_int_equal(f->d.n_drained, 1);
  assert_true(f->d.lost[0].drained);
  assert_true(f->d.planned);
  assert_string_equal(f->d.lost[0].why, "it is draining");
  assert_string_equal(kolo_sched_event_type(f->d.action), "WORKER_DRAINED");
  char *text = message(f);
  assert_string_equal(
      text, "w2 left (drained); re-forming at the next commit with 2 workers and 0 new workers");
  free(text);
}

static void drains_never_count_against_max_reconfigurations(void **state) {
  fixture *f = *state;
  healthy(f, 4);
  f->view.reconfigurations = 2;
  f->view.max_reconfigurations = 2; /* one more loss would fail the job */
  f->members[3].draining = 1;
  f->members[1].draining = 1;
  assert_int_equal(decide(f), KOLO_SCHED_DRAIN_REFORM);
  assert_int_equal(f->d.n_drained, 2);
  char *text = message(f);
  assert_string_equal(
      text,
      "w1, w3 left (drained); re-forming at the next commit with 2 workers and 0 new workers");
  free(text);
}

static void a_drain_below_min_workers_holds_the_others(void **state) {
  fixture *f = *state;
  healthy(f, 2);
  f->view.reconfigurations = 10; /* at the default limit: a drain still never fails */
  f->members[1].draining = 1;
  assert_int_equal(decide(f), KOLO_SCHED_DRAIN_HOLD);
  assert_false(f->d.planned);
  assert_string_equal(kolo_sched_event_type(f->d.action), "WORKER_DRAINED");
  char *text = message(f);
  assert_string_equal(text,
                      "w1 left (drained); below min_workers: waiting for workers: have 1, need 2");
  free(text);
}

static void a_drain_that_takes_newcomers_is_planned_too(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  f->view.idle = 1;
  f->members[0].draining = 1;
  assert_int_equal(decide(f), KOLO_SCHED_DRAIN_REFORM);
  assert_int_equal(f->d.take, 1);
  assert_true(f->d.planned); /* the newcomer waits for the others' commit (bounded: libkolo) */
  char *text = message(f);
  assert_string_equal(
      text, "w0 left (drained); re-forming at the next commit with 2 workers and 1 new workers");
  free(text);
}

static void a_loss_with_a_drain_counts_one_reconfiguration_and_the_drain_apart(void **state) {
  fixture *f = *state;
  healthy(f, 4);
  f->members[1].registered = 0;
  f->members[2].draining = 1;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
  assert_int_equal(f->d.n_lost, 2);
  assert_int_equal(f->d.n_drained, 1);
  assert_false(f->d.planned);
  assert_string_equal(kolo_sched_event_type(f->d.action), "WORKER_LOST");
}

static void a_failed_process_is_lost_only_for_its_current_stay(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  kolo_sched_report *r = &f->members[1].report;
  r->exited = 1;
  r->exit_code = 137;
  r->exit_epoch = 2;
  f->members[1].since_epoch = 3; /* it rejoined at epoch 3: the old exit is history */
  assert_int_equal(decide(f), KOLO_SCHED_PROGRESS);
  f->members[1].since_epoch = 2;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
  assert_string_equal(f->d.lost[0].why, "its process exited with code 137");
}

/* Members 0 and 2 report epoch 3 failed, naming rank 1. */
static void neighbours_name(fixture *f, int64_t at) {
  for (size_t i = 0; i < 3; i += 2) {
    f->members[i].report.failed_epoch = 3;
    f->members[i].report.failed_rank = 1;
    f->members[i].report.time_unix_ms = at;
  }
}

static void a_rank_named_by_every_other_member_is_lost_at_once(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  neighbours_name(f, NOW - 1);
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
  assert_int_equal(f->d.n_lost, 1);
  assert_int_equal(f->d.lost[0].member, 1);
  assert_string_equal(f->d.lost[0].why, "its ring neighbours lost it at epoch 3");
}

static void a_named_rank_waits_for_the_settle_time_while_others_are_silent(void **state) {
  fixture *f = *state;
  healthy(f, 4);
  neighbours_name(f, NOW - 10);                     /* member 3 has not spoken */
  assert_int_equal(decide(f), KOLO_SCHED_PROGRESS); /* no loss yet: the next pass looks again */
  f->view.now_unix_ms = NOW - 10 + KOLO_SCHED_FAILED_SETTLE_MS;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
  assert_int_equal(f->d.lost[0].member, 1);
}

static void reports_of_an_older_epoch_are_ignored(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  neighbours_name(f, NOW - 1);
  f->members[0].report.failed_epoch = 2;
  f->members[2].report.failed_epoch = 2;
  assert_int_equal(decide(f), KOLO_SCHED_PROGRESS);
}

static void reports_are_not_read_while_the_ring_record_differs(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  neighbours_name(f, NOW - 1);
  f->view.ring_size = 4; /* held: the ring still lists a lost member */
  f->view.min_workers = 4;
  assert_int_equal(decide(f), KOLO_SCHED_NOTHING); /* and too few to resume */
}

static void a_loss_below_min_workers_holds_the_survivors(void **state) {
  fixture *f = *state;
  healthy(f, 2);
  f->members[1].registered = 0;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_HOLD);
  char *text = message(f);
  assert_string_equal(
      text, "lost w1 (its lease expired); below min_workers: waiting for workers: have 1, need 2");
  free(text);
}

static void a_loss_with_idle_workers_takes_them(void **state) {
  fixture *f = *state;
  healthy(f, 2);
  f->view.max_workers = 3;
  f->view.idle = 5;
  f->members[1].registered = 0;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
  assert_int_equal(f->d.take, 2);
}

static void a_loss_past_max_reconfigurations_fails_naming_everyone_lost(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  const char *earlier[] = {"w8", "w9"};
  f->view.earlier_lost = earlier;
  f->view.n_earlier_lost = 2;
  f->view.reconfigurations = 2;
  f->view.max_reconfigurations = 2;
  f->members[1].registered = 0;
  f->members[2].draining = 1;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_FAIL);
  assert_int_equal(f->d.limit, 2);
  assert_string_equal(kolo_sched_event_type(f->d.action), "FAILED");
  char *text = message(f);
  assert_string_equal(text,
                      "exceeded max_reconfigurations (2): lost workers w1 (its lease expired), "
                      "w2 (it is draining); earlier: w8, w9");
  free(text);
}

/* #12 item 5: a usage error (exit 2, kolo-train's bad arguments) fails the job at
 * once, never re-planned as a lost worker; any other exit code still is. */
static void a_usage_error_exit_fails_the_job_at_once(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  f->view.max_workers = 4;
  f->view.idle = 2; /* a re-form would be possible: it must not be chosen */
  f->members[1].report.exited = 1;
  f->members[1].report.exit_code = KOLO_SCHED_EXIT_USAGE;
  f->members[1].report.exit_epoch = 3;
  assert_int_equal(decide(f), KOLO_SCHED_PERMANENT_FAIL);
  assert_string_equal(kolo_sched_event_type(f->d.action), "FAILED");
  char *text = message(f);
  assert_string_equal(text,
                      "the program cannot succeed, retrying would not help: w1 (rank 1) its "
                      "process exited with code 2 (a usage error)");
  free(text);
  /* with the agent's stderr tail, the message shows the program's own reason */
  f->members[1].report.stderr_tail =
      "kolo-train: --batch must be 1..65536 (usage: kolo-train --help)";
  text = message(f);
  assert_string_equal(text,
                      "the program cannot succeed, retrying would not help: w1 (rank 1) its "
                      "process exited with code 2 (a usage error)\n"
                      "w1 (rank 1) stderr, last lines:\nkolo-train: --batch must be 1..65536 "
                      "(usage: kolo-train --help)");
  free(text);
  f->members[1].report.exit_code = 1;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
  /* a usage error from a member already leaving by drain is that member's planned leave */
  f->members[1].report.exit_code = KOLO_SCHED_EXIT_USAGE;
  f->members[1].draining = 1;
  assert_int_equal(decide(f), KOLO_SCHED_DRAIN_REFORM);
}

/* A permanent failure the agent found (a process that did not acknowledge the job's mode,
 * #26) fails the job at once, before anything else, finishing included: a program that ran
 * another mode than asked must not make the job SUCCEED, whatever its exit code. */
static void an_agents_permanent_reason_fails_the_job_even_while_finishing(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  f->view.idle = 2;
  const char *why = "the program did not acknowledge mode ASYNC (it would have run SYNC)";
  f->members[1].report.permanent = why;
  f->members[2].report.permanent = why;
  for (size_t i = 0; i < 3; i++) { /* every one exited 0, in this stay */
    f->members[i].report.exited = 1;
    f->members[i].report.exit_epoch = 3;
  }
  assert_int_equal(decide(f), KOLO_SCHED_PERMANENT_FAIL);
  assert_string_equal(kolo_sched_event_type(f->d.action), "FAILED");
  assert_int_equal(f->d.n_lost, 2);
  char *text = message(f);
  assert_string_equal(
      text,
      "the program cannot succeed, retrying would not help: w1 (rank 1) the program "
      "did not acknowledge mode ASYNC (it would have run SYNC); w2 (rank 2) the "
      "program did not acknowledge mode ASYNC (it would have run SYNC)");
  free(text);
  f->members[1].report.permanent = "";
  f->members[2].report.permanent = NULL;
  assert_int_equal(decide(f), KOLO_SCHED_FINISH);
}

/* #29: a program that cannot be executed (the agent's finding: exit 127, the reason on
 * its exec pipe) fails the job at once with the first rank's stderr tail only; a process
 * killed by a signal before it said HELLO is a real loss and re-forms. */
static void a_program_that_cannot_be_executed_fails_the_job_at_once(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  f->view.phase = KOLO__V1__PHASE__RECONFIGURING;
  f->view.idle = 2;
  f->view.max_workers = 4;
  for (size_t i = 0; i < 3; i++) {
    kolo_sched_report *r = &f->members[i].report;
    *r = (kolo_sched_report){.present = 1, .time_unix_ms = NOW - 10, .failed_rank = -1};
  }
  kolo_sched_report *r = &f->members[1].report;
  r->exited = 1;
  r->exit_code = 127;
  r->exit_epoch = 3;
  r->permanent = "its program could not be started: cannot execute python9: No such file";
  r->stderr_tail = "kolo-worker: its program could not be started: cannot execute python9";
  f->members[2].report = *r;
  f->members[2].report.stderr_tail = "the same on rank 2: not shown";
  assert_int_equal(decide(f), KOLO_SCHED_PERMANENT_FAIL);
  char *text = message(f);
  assert_string_equal(text,
                      "the program cannot succeed, retrying would not help: w1 (rank 1) its "
                      "program could not be started: cannot execute python9: No such file; "
                      "w2 (rank 2) its program could not be started: cannot execute python9: "
                      "No such file\n"
                      "w1 (rank 1) stderr, last lines:\n"
                      "kolo-worker: its program could not be started: cannot execute python9");
  free(text);
  /* killed (SIGKILL, the OOM killer) before HELLO: a loss, re-formed */
  f->members[2].report = (kolo_sched_report){.present = 1, .failed_rank = -1};
  *r = (kolo_sched_report){
      .present = 1, .exited = 1, .exit_code = 137, .exit_epoch = 3, .failed_rank = -1};
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
  /* an exit of an earlier stay is not this process's: nothing permanent about it */
  r->exit_code = 127;
  r->permanent = "its program could not be started: cannot execute python9: No such file";
  f->members[1].since_epoch = 4;
  assert_int_not_equal(decide(f), KOLO_SCHED_PERMANENT_FAIL);
}

/* #29: a process that exits by itself before it said HELLO failed before kolo.init()
 * (an import error, an unpicklable function): permanent. */
static void an_exit_before_hello_fails_the_job_at_once(void **state) {
  fixture *f = *state;
  healthy(f, 2);
  f->view.idle = 3;
  f->view.max_workers = 4;
  kolo_sched_report *r = &f->members[0].report;
  *r = (kolo_sched_report){
      .present = 1, .exited = 1, .exit_code = 1, .exit_epoch = 3, .failed_rank = -1};
  r->stderr_tail = "ModuleNotFoundError: No module named 'helpers'";
  assert_int_equal(decide(f), KOLO_SCHED_PERMANENT_FAIL);
  char *text = message(f);
  assert_string_equal(text,
                      "the program cannot succeed, retrying would not help: w0 (rank 0) its "
                      "process exited with code 1 before it reached kolo.init()\n"
                      "w0 (rank 0) stderr, last lines:\n"
                      "ModuleNotFoundError: No module named 'helpers'");
  free(text);
  r->hello = 1; /* after HELLO, the same exit of a formed ring is a loss */
  r->formed_epoch = 3;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
}

/* #29: the same early exit on every rank before any ring formed is permanent; one rank's
 * early exit waits a moment for the others, then is an ordinary loss. */
static void the_same_early_failure_on_every_rank_fails_the_job(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  f->view.phase = KOLO__V1__PHASE__RECONFIGURING;
  f->view.idle = 1;
  f->view.max_workers = 4;
  for (size_t i = 0; i < 3; i++)
    f->members[i].report = (kolo_sched_report){.present = 1,
                                               .time_unix_ms = NOW - 10,
                                               .hello = 1,
                                               .exited = 1,
                                               .exit_code = 3,
                                               .exit_epoch = 3,
                                               .failed_rank = -1,
                                               .stderr_tail = "RuntimeError: bad config"};
  assert_int_equal(decide(f), KOLO_SCHED_PERMANENT_FAIL);
  char *text = message(f);
  assert_non_null(strstr(text,
                         "w0 (rank 0) its process exited with code 3 before any ring "
                         "formed, as on every rank; w1 (rank 1)"));
  assert_non_null(strstr(text, "\nw0 (rank 0) stderr, last lines:\nRuntimeError: bad config"));
  assert_null(strstr(text, "w1 (rank 1) stderr"));
  free(text);
  /* different codes: not the same failure */
  f->members[2].report.exit_code = 4;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_HOLD);
  /* one rank exited early, the others run: wait for them a moment, then a loss */
  f->members[2].report = (kolo_sched_report){.present = 1, .hello = 1, .failed_rank = -1};
  f->members[1].report = f->members[2].report;
  assert_int_equal(decide(f), KOLO_SCHED_NOTHING);
  f->members[0].report.time_unix_ms = NOW - KOLO_SCHED_EARLY_SETTLE_MS;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
}

static void a_failed_process_s_stderr_tail_follows_the_reason_and_a_lease_loss_has_none(
    void **state) {
  fixture *f = *state;
  healthy(f, 3);
  f->view.reconfigurations = 1;
  f->view.max_reconfigurations = 1;
  kolo_sched_report *r = &f->members[2].report;
  r->exited = 1;
  r->exit_code = 1; /* 2 would be a usage error: FAILED at once */
  r->exit_epoch = 3;
  r->stderr_tail =
      "usage: train.py [--epochs N]\ntrain.py: error: unrecognized arguments: --epoch 3";
  f->members[1].registered = 0;
  f->members[1].report.stderr_tail = "not shown: this member's lease expired";
  assert_int_equal(decide(f), KOLO_SCHED_LOST_FAIL);
  char *text = message(f);
  assert_string_equal(
      text,
      "exceeded max_reconfigurations (1): lost workers w1 (its lease expired), "
      "w2 (its process exited with code 1)\n"
      "w2 (rank 2) stderr, last lines:\n"
      "usage: train.py [--epochs N]\ntrain.py: error: unrecognized arguments: --epoch 3");
  free(text);
  /* a long tail keeps its newest whole lines within the bound */
  char long_tail[4096] = "";
  for (int i = 0; i < 200; i++)
    snprintf(long_tail + strlen(long_tail), sizeof long_tail - strlen(long_tail), "line %03d\n", i);
  long_tail[strlen(long_tail) - 1] = '\0';
  r->stderr_tail = long_tail;
  f->view.reconfigurations = 0;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_HOLD); /* one survivor, below min_workers */
  text = message(f);
  const char *tail = strstr(text, "stderr, last lines:\n");
  assert_non_null(tail);
  tail += strlen("stderr, last lines:\n");
  assert_true(strlen(tail) <= KOLO_SCHED_TAIL_BYTES);
  assert_true(strncmp(tail, "line ", 5) == 0);
  assert_non_null(strstr(tail, "line 199"));
  assert_null(strstr(tail, "line 000"));
  free(text);
}

static void zero_max_reconfigurations_fails_at_the_default(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  f->view.reconfigurations = KOLO_SCHED_DEFAULT_MAX_RECONFIGURATIONS;
  f->members[1].registered = 0;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_FAIL);
  assert_int_equal(f->d.limit, KOLO_SCHED_DEFAULT_MAX_RECONFIGURATIONS);
}

static void a_held_job_resumes_when_enough_workers_are_idle(void **state) {
  fixture *f = *state;
  healthy(f, 1);
  f->view.phase = KOLO__V1__PHASE__RECONFIGURING;
  f->view.ring_size = 2; /* the ring still lists the lost member */
  f->view.max_workers = 3;
  assert_int_equal(decide(f), KOLO_SCHED_NOTHING);
  f->view.idle = 1;
  assert_int_equal(decide(f), KOLO_SCHED_RESUME);
  assert_int_equal(f->d.take, 1);
  char *text = message(f);
  assert_string_equal(text, "workers available again: resuming with 1 survivors and 1 new workers");
  free(text);
}

static void a_reconfiguring_ring_runs_once_every_member_formed_it(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  f->view.phase = KOLO__V1__PHASE__RECONFIGURING;
  f->members[2].report.formed_epoch = 2;
  assert_int_equal(decide(f), KOLO_SCHED_NOTHING);
  f->members[2].report.formed_epoch = 3;
  assert_int_equal(decide(f), KOLO_SCHED_FORMED);
  char *text = message(f);
  assert_string_equal(text, "every member formed epoch 3 (3 workers)");
  free(text);
}

/* Every member reports epoch 3 failed with a timeout, naming its successor. */
static void all_time_out(fixture *f, size_t n, int64_t at) {
  for (size_t i = 0; i < n; i++) {
    kolo_sched_report *r = &f->members[i].report;
    r->failed_epoch = 3;
    r->failed_rank = (int64_t)((i + 1) % n);
    r->failed_status = "KOLO_ERR_TIMEOUT";
    r->time_unix_ms = at;
  }
}

static void a_timeout_with_everyone_alive_reforms_the_same_members(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  all_time_out(f, 3, NOW - 1);
  assert_int_equal(decide(f), KOLO_SCHED_STALLED_REFORM);
  assert_int_equal(f->d.n_lost, 0);
  assert_int_equal(f->d.take, 0);
  assert_string_equal(kolo_sched_event_type(f->d.action), "RING_STALLED");
  char *text = message(f);
  assert_string_equal(
      text,
      "epoch 3 cannot make progress with every member alive: w0 (KOLO_ERR_TIMEOUT naming rank 1), "
      "w1 (KOLO_ERR_TIMEOUT naming rank 2), w2 (KOLO_ERR_TIMEOUT naming rank 0); "
      "re-forming the same 3 workers");
  free(text);
}

static void a_partial_stall_waits_for_the_settle_time(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  all_time_out(f, 2, NOW - 10); /* w0 and w1 name each other, w2 has not spoken */
  f->members[1].report.failed_rank = 0;
  assert_int_equal(decide(f), KOLO_SCHED_PROGRESS);
  f->view.now_unix_ms = NOW - 10 + KOLO_SCHED_FAILED_SETTLE_MS;
  assert_int_equal(decide(f), KOLO_SCHED_STALLED_REFORM);
}

/* The stall of a ring of 3 seen between two reports: w0 and w2 timed out naming
 * w1, whose own report has not arrived yet. A timeout is no evidence w1 is
 * gone (a dead or silent neighbour is KOLO_ERR_PEER_LOST), so w1 is not lost
 * before its own report had KOLO_SCHED_TIMEOUT_SETTLE_MS to come. */
static void a_rank_named_only_in_timeouts_has_time_to_report_itself(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  neighbours_name(f, NOW - 10);
  f->members[0].report.failed_status = f->members[2].report.failed_status = "KOLO_ERR_TIMEOUT";
  assert_int_equal(decide(f), KOLO_SCHED_PROGRESS);
  f->view.now_unix_ms = NOW - 10 + KOLO_SCHED_FAILED_SETTLE_MS; /* a PEER_LOST would be due here */
  assert_int_equal(decide(f), KOLO_SCHED_PROGRESS);
  /* its report arrives: a stall of live members, re-formed whole */
  f->members[1].report.failed_epoch = 3;
  f->members[1].report.failed_rank = 2;
  f->members[1].report.failed_status = "KOLO_ERR_TIMEOUT";
  f->members[1].report.time_unix_ms = NOW;
  assert_int_equal(decide(f), KOLO_SCHED_STALLED_REFORM);
  assert_int_equal(f->d.n_lost, 0);
  /* had it stayed silent, it is lost once the timeout settle time passed */
  f->members[1].report.failed_epoch = 0;
  f->view.now_unix_ms = NOW - 10 + KOLO_SCHED_TIMEOUT_SETTLE_MS;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
  assert_int_equal(f->d.n_lost, 1);
  assert_int_equal(f->d.lost[0].member, 1);
  /* one report with evidence (PEER_LOST) is enough to lose it at once */
  f->view.now_unix_ms = NOW;
  f->members[2].report.failed_status = "KOLO_ERR_PEER_LOST";
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
  assert_int_equal(f->d.lost[0].member, 1);
}

static void a_ring_that_cannot_form_is_re_formed_too(void **state) {
  fixture *f = *state;
  healthy(f, 2);
  f->view.phase = KOLO__V1__PHASE__RECONFIGURING;
  for (size_t i = 0; i < 2; i++) {
    f->members[i].report.failed_epoch = 3; /* forming epoch 3 failed, no rank named */
    f->members[i].report.failed_status = "KOLO_ERR_CONNECT";
    f->members[i].report.formed_epoch = 2;
  }
  assert_int_equal(decide(f), KOLO_SCHED_STALLED_REFORM);
  char *text = message(f);
  assert_string_equal(
      text,
      "epoch 3 cannot make progress with every member alive: w0 (KOLO_ERR_CONNECT), "
      "w1 (KOLO_ERR_CONNECT); re-forming the same 2 workers");
  free(text);
}

static void a_stall_past_max_reconfigurations_fails(void **state) {
  fixture *f = *state;
  healthy(f, 2);
  all_time_out(f, 2, NOW - 1);
  f->view.reconfigurations = 2;
  f->view.max_reconfigurations = 2;
  assert_int_equal(decide(f), KOLO_SCHED_STALLED_FAIL);
  assert_string_equal(kolo_sched_event_type(f->d.action), "FAILED");
  char *text = message(f);
  assert_string_equal(
      text,
      "exceeded max_reconfigurations (2): epoch 3 cannot make progress with every member alive: "
      "w0 (KOLO_ERR_TIMEOUT naming rank 1), w1 (KOLO_ERR_TIMEOUT naming rank 0)");
  free(text);
  f->view.reconfigurations = 1;
  assert_int_equal(decide(f), KOLO_SCHED_STALLED_REFORM);
}

static void a_real_loss_wins_over_a_stall(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  all_time_out(f, 3, NOW - 1);
  f->members[2].registered = 0; /* w2's lease is gone: it is lost, the others re-form without it */
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
  assert_int_equal(f->d.n_lost, 1);
}

/* #29: a re-formed ring where every process is new (none survived: a program without
 * kolo.elastic exits when its ring fails) says the job restarted from the beginning. */
static void a_ring_of_new_processes_only_says_it_restarted_from_the_beginning(void **state) {
  fixture *f = *state;
  healthy(f, 2);
  f->view.phase = KOLO__V1__PHASE__RECONFIGURING;
  for (size_t i = 0; i < 2; i++) f->members[i].report.first_formed_epoch = 3;
  assert_int_equal(decide(f), KOLO_SCHED_FORMED);
  char *text = message(f);
  assert_string_equal(text,
                      "every member formed epoch 3 (2 workers); restarted from the beginning: no "
                      "process of the earlier ring survived (a program that does not use "
                      "kolo.elastic exits when a worker is lost, and the job starts it again)");
  free(text);
  f->members[0].report.first_formed_epoch = 1; /* a survivor: an elastic re-form */
  assert_int_equal(decide(f), KOLO_SCHED_FORMED);
  text = message(f);
  assert_string_equal(text, "every member formed epoch 3 (2 workers)");
  free(text);
}

static void a_ring_above_max_workers_shrinks_to_its_lowest_ranks(void **state) {
  fixture *f = *state;
  healthy(f, 4);
  f->view.max_workers = 2;
  assert_int_equal(decide(f), KOLO_SCHED_SHRINK);
  assert_int_equal(f->d.keep, 2);
  char *text = message(f);
  assert_string_equal(text, "max_workers is 2: leaving 2 workers");
  free(text);
}

static void a_ring_below_max_workers_grows_with_idle_workers(void **state) {
  fixture *f = *state;
  healthy(f, 2);
  f->view.max_workers = 4;
  assert_int_equal(decide(f), KOLO_SCHED_PROGRESS); /* nobody idle */
  assert_false(f->d.planned);
  f->view.idle = 5;
  assert_int_equal(decide(f), KOLO_SCHED_GROW);
  assert_int_equal(f->d.take, 2);
  assert_true(f->d.planned); /* nobody failed: no step in flight is cut short */
  char *text = message(f);
  assert_string_equal(text, "2 idle workers join at the next commit (below max_workers 4)");
  free(text);
}

static void a_ring_that_has_not_formed_is_never_moved(void **state) {
  fixture *f = *state;
  healthy(f, 2);
  f->view.max_workers = 4;
  f->view.idle = 2;
  f->members[0].report.formed_epoch = 2;
  assert_int_equal(decide(f), KOLO_SCHED_NOTHING);
}

/* The old scheduler clamped members to 4096; a loss beyond that must be seen. */
static void a_ring_of_five_thousand_finds_a_loss_at_rank_4500(void **state) {
  (void)state;
  size_t n = 5000;
  kolo_sched_member *members = calloc(n, sizeof *members);
  char(*ids)[16] = calloc(n, sizeof *ids);
  assert_non_null(members);
  assert_non_null(ids);
  for (size_t i = 0; i < n; i++) {
    snprintf(ids[i], sizeof ids[i], "w%zu", i);
    members[i] =
        (kolo_sched_member){.worker_id = ids[i],
                            .registered = 1,
                            .since_epoch = 1,
                            .report = {.present = 1, .formed_epoch = 1, .failed_rank = -1}};
  }
  members[4500].registered = 0;
  kolo_sched_job_view view = {.phase = KOLO__V1__PHASE__RUNNING,
                              .epoch = 1,
                              .has_ring = 1,
                              .ring_size = n,
                              .members = members,
                              .n_members = n,
                              .min_workers = 1,
                              .max_workers = (uint32_t)n,
                              .now_unix_ms = NOW};
  kolo_sched_decision d;
  assert_int_equal(kolo_sched_decide(&view, &d), KOLO_OK);
  assert_int_equal(d.action, KOLO_SCHED_LOST_REFORM);
  assert_int_equal(d.n_lost, 1);
  assert_int_equal(d.lost[0].member, 4500);
  kolo_sched_decision_clear(&d);
  free(members);
  free(ids);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(a_healthy_ring_copies_progress),
      T(rank_zero_exiting_zero_finishes_once_everyone_exited),
      T(rank_zero_exiting_zero_waits_for_the_others_until_the_grace),
      T(a_member_without_a_record_is_lost_and_the_ring_reforms),
      T(a_member_that_registered_again_under_a_new_lease_is_lost),
      T(a_ring_without_leases_judges_by_the_record_alone),
      T(a_draining_member_leaves_as_planned_at_the_next_commit),
      T(drains_never_count_against_max_reconfigurations),
      T(a_drain_below_min_workers_holds_the_others),
      T(a_drain_that_takes_newcomers_is_planned_too),
      T(a_loss_with_a_drain_counts_one_reconfiguration_and_the_drain_apart),
      T(a_failed_process_is_lost_only_for_its_current_stay),
      T(a_rank_named_by_every_other_member_is_lost_at_once),
      T(a_named_rank_waits_for_the_settle_time_while_others_are_silent),
      T(reports_of_an_older_epoch_are_ignored),
      T(reports_are_not_read_while_the_ring_record_differs),
      T(a_loss_below_min_workers_holds_the_survivors),
      T(a_loss_with_idle_workers_takes_them),
      T(a_loss_past_max_reconfigurations_fails_naming_everyone_lost),
      T(an_agents_permanent_reason_fails_the_job_even_while_finishing),
      T(a_program_that_cannot_be_executed_fails_the_job_at_once),
      T(a_ring_of_new_processes_only_says_it_restarted_from_the_beginning),
      T(an_exit_before_hello_fails_the_job_at_once),
      T(the_same_early_failure_on_every_rank_fails_the_job),
      T(a_failed_process_s_stderr_tail_follows_the_reason_and_a_lease_loss_has_none),
      T(zero_max_reconfigurations_fails_at_the_default),
      T(a_usage_error_exit_fails_the_job_at_once),
      T(a_held_job_resumes_when_enough_workers_are_idle),
      T(a_reconfiguring_ring_runs_once_every_member_formed_it),
      T(a_ring_above_max_workers_shrinks_to_its_lowest_ranks),
      T(a_ring_below_max_workers_grows_with_idle_workers),
      T(a_ring_that_has_not_formed_is_never_moved),
      T(a_timeout_with_everyone_alive_reforms_the_same_members),
      T(a_partial_stall_waits_for_the_settle_time),
      T(a_rank_named_only_in_timeouts_has_time_to_report_itself),
      T(a_ring_that_cannot_form_is_re_formed_too),
      T(a_stall_past_max_reconfigurations_fails),
      T(a_real_loss_wins_over_a_stall),
      cmocka_unit_test(a_ring_of_five_thousand_finds_a_loss_at_rank_4500),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
