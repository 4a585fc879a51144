/* A scheduled job's first ring (scheduler/decide.h, coordination/job_status.h): the job stays
 * PENDING, with its epoch and members, until every member formed the ring; the FORMED decision
 * alone makes it RUNNING (issue 32). Pure, like test_sched_decide. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/sched_view.h"

#include "coordination/job_status.h"
#include "scheduler/decide.h"

/* A healthy RUNNING job of n members at epoch 3, every member formed it. */
static void healthy(fixture *f, size_t n) {
  healthy_view(f, n);
}

/* The decisions judge the jobs the scheduler gave a ring: RUNNING, RECONFIGURING, and PENDING
 * with an epoch and members (scheduled, the first ring forming); a queued PENDING job is
 * plan.h's (job.proto's enum; the phase names went with the JSON). */
static void only_jobs_with_a_ring_are_judged(void **state) {
  (void)state;
  Kolo__V1__Member m = KOLO__V1__MEMBER__INIT;
  Kolo__V1__Member *members[] = {&m};
  Kolo__V1__JobStatus st = KOLO__V1__JOB_STATUS__INIT;
  assert_false(kolo_job_status_scheduled(NULL));
  st.phase = KOLO__V1__PHASE__PENDING;
  assert_false(kolo_job_status_scheduled(&st)); /* queued */
  st.epoch = 1;
  assert_false(kolo_job_status_scheduled(&st)); /* an epoch without members: queued again */
  st.members = members;
  st.n_members = 1;
  assert_true(kolo_job_status_scheduled(&st)); /* scheduled, its first ring forming */
  st.phase = KOLO__V1__PHASE__RUNNING;
  assert_true(kolo_job_status_scheduled(&st));
  st.phase = KOLO__V1__PHASE__RECONFIGURING;
  assert_true(kolo_job_status_scheduled(&st));
  st.n_members = 0; /* held with no survivor */
  assert_true(kolo_job_status_scheduled(&st));
  Kolo__V1__Phase ended[] = {KOLO__V1__PHASE__PHASE_UNSPECIFIED, KOLO__V1__PHASE__SUCCEEDED,
                             KOLO__V1__PHASE__FAILED, KOLO__V1__PHASE__CANCELLED,
                             (Kolo__V1__Phase)42};
  st.n_members = 1;
  for (size_t i = 0; i < sizeof ended / sizeof ended[0]; i++) {
    st.phase = ended[i];
    assert_false(kolo_job_status_scheduled(&st));
  }
}

/* A scheduled job's first ring (PENDING, epoch 1): RUNNING is written once every member
 * formed it (FORMED, the one place), never at SCHEDULED; until then it neither grows nor
 * shrinks, and a loss re-forms it like any loss. */
static void a_scheduled_job_runs_only_once_its_first_ring_formed(void **state) {
  fixture *f = *state;
  healthy(f, 3);
  f->view.phase = KOLO__V1__PHASE__PENDING;
  f->view.epoch = 1;
  f->view.max_workers = 4;
  f->view.idle = 2;
  for (size_t i = 0; i < 3; i++) f->members[i].report = (kolo_sched_report){.failed_rank = -1};
  assert_int_equal(decide(f), KOLO_SCHED_NOTHING); /* no report yet */
  f->members[0].report = (kolo_sched_report){
      .present = 1, .time_unix_ms = NOW - 100, .formed_epoch = 1, .failed_rank = -1, .hello = 1};
  f->members[1].report = f->members[0].report;
  assert_int_equal(decide(f), KOLO_SCHED_NOTHING); /* 2 of 3 formed: no GROW either */
  f->view.max_workers = 2;
  assert_int_equal(decide(f), KOLO_SCHED_NOTHING); /* nor SHRINK */
  f->members[2].report = f->members[0].report;
  assert_int_equal(decide(f), KOLO_SCHED_FORMED);
  assert_false(f->d.restarted);
  assert_string_equal(kolo_sched_event_type(KOLO_SCHED_FORMED), "RING_FORMED");
  char *text = message(f);
  assert_string_equal(text, "every member formed epoch 1 (3 workers)");
  free(text);
  f->members[1].registered = 0; /* lost before its first ring formed */
  f->members[2].report.formed_epoch = 0;
  f->view.max_workers = 4;
  assert_int_equal(decide(f), KOLO_SCHED_LOST_REFORM);
}

/* A short program forms its ring, trains and exits before a pass saw the ring formed: the
 * job becomes RUNNING first (RING_FORMED), then finishes; one that never formed a ring (no
 * libkolo) finishes from PENDING. */
static void a_formed_ring_runs_before_it_finishes(void **state) {
  fixture *f = *state;
  healthy(f, 2);
  f->view.phase = KOLO__V1__PHASE__PENDING;
  f->view.epoch = 1;
  for (size_t i = 0; i < 2; i++) {
    f->members[i].report.formed_epoch = 1;
    f->members[i].report.exited = 1;
  }
  assert_int_equal(decide(f), KOLO_SCHED_FORMED);
  f->view.phase = KOLO__V1__PHASE__RECONFIGURING; /* the same after a re-form */
  assert_int_equal(decide(f), KOLO_SCHED_FORMED);
  f->view.phase = KOLO__V1__PHASE__RUNNING;
  assert_int_equal(decide(f), KOLO_SCHED_FINISH);
  f->view.phase = KOLO__V1__PHASE__PENDING;
  for (size_t i = 0; i < 2; i++) f->members[i].report.formed_epoch = 0;
  assert_int_equal(decide(f), KOLO_SCHED_FINISH);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(only_jobs_with_a_ring_are_judged),
      T(a_scheduled_job_runs_only_once_its_first_ring_formed),
      T(a_formed_ring_runs_before_it_finishes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
