/* Unit tests for the demand for workers (server/demand.c): what pending, running, growable,
 * shrinking and ended jobs want, and how workers are counted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "server/demand.h"

#define P(phase) KOLO__V1__PHASE__##phase

static Kolo__V1__Demand compute(const kolo_server_job_size *jobs, size_t n) {
  Kolo__V1__Demand d = KOLO__V1__DEMAND__INIT;
  kolo_server_worker_counts workers = {5, 2, 1};
  kolo_server_demand_compute(jobs, n, &workers, &d);
  return d;
}

static void no_jobs_want_no_workers(void **state) {
  (void)state;
  Kolo__V1__Demand d = compute(NULL, 0);
  assert_int_equal(d.workers_wanted, 0);
  assert_int_equal(d.workers_missing, 0);
  assert_int_equal(d.pending_jobs, 0);
  assert_int_equal(d.growable_jobs, 0);
  assert_int_equal(d.workers_registered, 5);
  assert_int_equal(d.workers_idle, 2);
  assert_int_equal(d.workers_draining, 1);
}

static void a_pending_job_wants_its_max_workers(void **state) {
  (void)state;
  kolo_server_job_size jobs[] = {{P(PENDING), 0, 2, 6}};
  Kolo__V1__Demand d = compute(jobs, 1);
  assert_int_equal(d.workers_wanted, 6);
  assert_int_equal(d.workers_missing, 6);
  assert_int_equal(d.pending_jobs, 1);
}

/* Scheduled, its first ring not formed yet (PENDING with members): it has its gang and is no
 * pending job; it misses only what it is below max_workers. */
static void a_scheduled_job_forming_its_ring_wants_what_a_running_one_does(void **state) {
  (void)state;
  kolo_server_job_size jobs[] = {{P(PENDING), 2, 2, 6}, {P(PENDING), 0, 1, 1}};
  Kolo__V1__Demand d = compute(jobs, 2);
  assert_int_equal(d.workers_wanted, 6 + 1);
  assert_int_equal(d.workers_missing, 4 + 1);
  assert_int_equal(d.pending_jobs, 1);
  assert_int_equal(d.growable_jobs, 1);
}

static void a_full_running_job_wants_what_it_has(void **state) {
  (void)state;
  kolo_server_job_size jobs[] = {{P(RUNNING), 4, 2, 4}};
  Kolo__V1__Demand d = compute(jobs, 1);
  assert_int_equal(d.workers_wanted, 4);
  assert_int_equal(d.workers_missing, 0);
  assert_int_equal(d.growable_jobs, 0);
}

static void a_job_below_max_workers_is_growable_and_misses_the_rest(void **state) {
  (void)state;
  kolo_server_job_size jobs[] = {{P(RUNNING), 2, 2, 4}, {P(RECONFIGURING), 1, 2, 3}};
  Kolo__V1__Demand d = compute(jobs, 2);
  assert_int_equal(d.workers_wanted, 7);
  assert_int_equal(d.workers_missing, 2 + 2);
  assert_int_equal(d.growable_jobs, 2);
}

static void a_job_shrinking_to_a_lowered_max_wants_the_new_max(void **state) {
  (void)state;
  kolo_server_job_size jobs[] = {{P(RUNNING), 6, 1, 3}};
  Kolo__V1__Demand d = compute(jobs, 1);
  assert_int_equal(d.workers_wanted, 3);
  assert_int_equal(d.workers_missing, 0);
  assert_int_equal(d.growable_jobs, 0);
}

static void a_max_below_min_counts_as_min(void **state) {
  (void)state;
  /* max_workers 0 in a spec means min_workers */
  kolo_server_job_size jobs[] = {{P(PENDING), 0, 3, 0}};
  assert_int_equal(compute(jobs, 1).workers_wanted, 3);
}

static void ended_jobs_want_nothing(void **state) {
  (void)state;
  kolo_server_job_size jobs[] = {{P(SUCCEEDED), 4, 2, 4},
                                 {P(FAILED), 0, 2, 4},
                                 {P(CANCELLED), 1, 1, 8},
                                 {P(PHASE_UNSPECIFIED), 0, 1, 9},
                                 {(Kolo__V1__Phase)77, 0, 1, 9}};
  Kolo__V1__Demand d = compute(jobs, 5);
  assert_int_equal(d.workers_wanted, 0);
  assert_int_equal(d.workers_missing, 0);
}

static void sums_saturate_instead_of_wrapping(void **state) {
  (void)state;
  kolo_server_job_size jobs[3];
  for (int i = 0; i < 3; i++) jobs[i] = (kolo_server_job_size){P(PENDING), 0, 1, 0x7fffffffu};
  Kolo__V1__Demand d = compute(jobs, 3);
  assert_int_equal(d.workers_wanted, UINT32_MAX);
  assert_int_equal(d.workers_missing, UINT32_MAX);
}

static void workers_are_counted_as_idle_busy_or_draining(void **state) {
  (void)state;
  Kolo__V1__Worker w[5];
  Kolo__V1__Worker *list[5];
  const char *states[] = {"idle", "BUSY", "IDLE", "draining", "idle"};
  const char *jobs[] = {"", "j1", "", "", "j2"};
  for (int i = 0; i < 5; i++) {
    kolo__v1__worker__init(&w[i]);
    w[i].state = (char *)states[i];
    w[i].job_id = (char *)jobs[i];
    list[i] = &w[i];
  }
  w[2].draining = 1; /* idle but drained */
  Kolo__V1__ListWorkersResponse resp = KOLO__V1__LIST_WORKERS_RESPONSE__INIT;
  resp.workers = list;
  resp.n_workers = 5;
  kolo_server_worker_counts c;
  kolo_server_demand_count_workers(&resp, &c);
  assert_int_equal(c.registered, 5);
  assert_int_equal(c.idle, 1);     /* w0 only: w4 still has an assignment */
  assert_int_equal(c.draining, 2); /* w2 drained, w3 shutting down */
  kolo_server_demand_count_workers(NULL, &c);
  assert_int_equal(c.registered, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(no_jobs_want_no_workers),
      cmocka_unit_test(a_pending_job_wants_its_max_workers),
      cmocka_unit_test(a_scheduled_job_forming_its_ring_wants_what_a_running_one_does),
      cmocka_unit_test(a_full_running_job_wants_what_it_has),
      cmocka_unit_test(a_job_below_max_workers_is_growable_and_misses_the_rest),
      cmocka_unit_test(a_job_shrinking_to_a_lowered_max_wants_the_new_max),
      cmocka_unit_test(a_max_below_min_counts_as_min),
      cmocka_unit_test(ended_jobs_want_nothing),
      cmocka_unit_test(sums_saturate_instead_of_wrapping),
      cmocka_unit_test(workers_are_counted_as_idle_busy_or_draining),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
