/* False losses (scheduler/false_loss.h), case by case over hand-built views: a member
 * declared lost by its neighbours (KOLO_ERR_PEER_LOST) that is alive in the same process
 * and reported the failure itself is a false loss, counted once per re-form; a silent,
 * exited, re-registered or merely timed-out member is not, nor is a stall with no next
 * ring. No etcd. */
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
#include "scheduler/false_loss.h"

#define LOST "KOLO_ERR_PEER_LOST"

/* A RUNNING job of n members at epoch 3, every member formed it, under the ring's lease. */
static void healthy(fixture *f, size_t n) {
  kolo_sched_decision_clear(&f->d); /* an earlier decision of the same case */
  healthy_view(f, n);
  for (size_t i = 0; i < n; i++) f->members[i].lease = f->members[i].ring_lease = 100 + (int64_t)i;
}

/* Member i's process says this epoch's ring failed with status, naming rank named. */
static void failed(fixture *f, size_t i, const char *status, int64_t named) {
  kolo_sched_report *r = &f->members[i].report;
  r->failed_epoch = f->view.epoch;
  r->failed_rank = named;
  r->failed_status = status;
  r->time_unix_ms = NOW - 10;
}

/* w1 was silent past the beat's timeout (w0 and w2 lost it) but its process ran on and
 * reported the failure too: the same three re-form, and that is one false loss. */
static void a_member_declared_lost_that_reports_itself_is_a_false_loss(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  failed(f, 0, LOST, 1);
  failed(f, 2, LOST, 1);
  failed(f, 1, LOST, 1); /* told by its neighbours' propagated failure */
  assert_int_equal(decide(f), KOLO_SCHED_STALLED_REFORM);
  assert_int_equal(f->d.false_loss, 1);
  assert_true(kolo_sched_falsely_lost(&f->view, 1));
  assert_false(kolo_sched_falsely_lost(&f->view, 0));
  assert_false(kolo_sched_falsely_lost(&f->view, 2));
  char *text = kolo_sched_decision_message(&f->view, &f->d);
  assert_non_null(text);
  assert_non_null(strstr(text,
                         "re-forming the same 3 workers; a false loss: w1 (rank 1) was "
                         "declared lost (KOLO_ERR_PEER_LOST) while alive in the same "
                         "process"));
  free(text);
}

/* The accused and its accusers name each other: still one broken ring, one false loss. */
static void mutual_accusations_count_once(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  failed(f, 0, LOST, 1);
  failed(f, 2, LOST, 1);
  failed(f, 1, LOST, 0); /* it found its link to w0 closed */
  assert_int_equal(decide(f), KOLO_SCHED_STALLED_REFORM);
  assert_int_equal(kolo_sched_false_loss(&f->view, &f->d), 1);
  char *text = kolo_sched_decision_message(&f->view, &f->d);
  assert_non_null(strstr(text, "a false loss: w0 (rank 0), w1 (rank 1) were declared lost"));
  free(text);
}

/* A silent member that has not spoken is lost (a real silent loss), not a false one. */
static void a_silent_member_that_does_not_report_is_a_real_loss(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  failed(f, 0, LOST, 1);
  failed(f, 2, LOST, 1);
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
  assert_int_equal(f->d.false_loss, 0);
  assert_false(kolo_sched_falsely_lost(&f->view, 1));
}

/* Killed (SIGKILL: 137) after it reported, re-registered under a new lease, or its worker
 * gone: not alive in the same process, so not falsely lost, whatever it said. */
static void a_member_whose_process_or_lease_is_gone_is_not_falsely_lost(void **state) {
  fixture *f = *state;
  for (int gone = 0; gone < 3; gone++) {
    healthy(f, 3);
    failed(f, 0, LOST, 1);
    failed(f, 2, LOST, 1);
    failed(f, 1, LOST, 0);
    kolo_sched_member *m = &f->members[1];
    if (gone == 0) {
      m->report.exited = 1;
      m->report.exit_code = 137;
      m->report.exit_epoch = 3;
    } else if (gone == 1) {
      m->lease = 999;
    } else {
      m->registered = 0;
    }
    assert_false(kolo_sched_falsely_lost(&f->view, 1));
    assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
    assert_int_equal(f->d.false_loss, 0);
  }
}

/* Timeouts accuse nobody of being gone (ranks disagreeing on a collective): a stall, not
 * a false loss; nor is a failure of an earlier epoch. */
static void a_stall_of_timeouts_or_an_old_failure_is_no_false_loss(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  for (size_t i = 0; i < 3; i++) failed(f, i, "KOLO_ERR_TIMEOUT", (int64_t)((i + 1) % 3));
  assert_int_equal(decide(f), KOLO_SCHED_STALLED_REFORM);
  assert_int_equal(f->d.false_loss, 0);
  char *text = kolo_sched_decision_message(&f->view, &f->d);
  assert_null(strstr(text, "false loss"));
  free(text);
  healthy(f, 3);
  failed(f, 0, LOST, 1);
  failed(f, 1, LOST, 1);
  f->members[0].report.failed_epoch = 2;
  f->members[1].report.failed_epoch = 2;
  assert_false(kolo_sched_falsely_lost(&f->view, 1));
  assert_int_equal(decide(f), KOLO_SCHED_PROGRESS);
  assert_int_equal(f->d.false_loss, 0);
}

/* Past max_reconfigurations the stall fails the job: no next ring, no false loss counted. */
static void a_stall_that_fails_the_job_counts_none(void **state) {
  fixture *f = *state;
  healthy(f, 2);
  f->view.max_reconfigurations = 2;
  f->view.reconfigurations = 2;
  failed(f, 0, LOST, 1);
  failed(f, 1, LOST, 0);
  assert_int_equal(decide(f), KOLO_SCHED_STALLED_FAIL);
  assert_int_equal(f->d.false_loss, 0);
  assert_true(kolo_sched_falsely_lost(&f->view, 1));
  assert_int_equal(kolo_sched_false_loss(&f->view, &f->d), 0);
}

/* A view without this epoch's ring (or another size) judges nobody. */
static void without_the_ring_nobody_is_judged(void **state) {
  fixture *f = *state;
  healthy(f, 2);
  failed(f, 0, LOST, 1);
  failed(f, 1, LOST, 0);
  f->view.has_ring = 0;
  assert_false(kolo_sched_falsely_lost(&f->view, 1));
  f->view.has_ring = 1;
  f->view.ring_size = 3;
  assert_false(kolo_sched_falsely_lost(&f->view, 1));
  assert_false(kolo_sched_falsely_lost(&f->view, 7));
}

int main(void) {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(a_member_declared_lost_that_reports_itself_is_a_false_loss),
      T(mutual_accusations_count_once),
      T(a_silent_member_that_does_not_report_is_a_real_loss),
      T(a_member_whose_process_or_lease_is_gone_is_not_falsely_lost),
      T(a_stall_of_timeouts_or_an_old_failure_is_no_false_loss),
      T(a_stall_that_fails_the_job_counts_none),
      T(without_the_ring_nobody_is_judged),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
