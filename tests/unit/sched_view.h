/* The hand-built job views the scheduler's decision tests share (test_sched_decide,
 * test_sched_forming, test_sched_false_loss): a fixture of up to 8 members, a healthy
 * RUNNING ring to start each case from, and the cmocka setup/teardown. Pure: no etcd. */
#ifndef KOLO_TESTS_UNIT_SCHED_VIEW_H
#define KOLO_TESTS_UNIT_SCHED_VIEW_H

#include <stdlib.h>
#include <string.h>

#include "scheduler/decide.h"

#define NOW 1000000

static const char *const IDS[] = {"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7"};

typedef struct fixture {
  kolo_sched_member members[8];
  kolo_sched_job_view view;
  kolo_sched_decision d;
} fixture;

/* A healthy RUNNING job of n (<= 8) members at epoch 3, every member formed it. */
static inline void healthy_view(fixture *f, size_t n) {
  memset(f, 0, sizeof *f);
  for (size_t i = 0; i < n; i++) {
    kolo_sched_member *m = &f->members[i];
    m->worker_id = IDS[i];
    m->registered = 1;
    m->since_epoch = 1;
    m->report = (kolo_sched_report){
        .present = 1, .time_unix_ms = NOW - 100, .formed_epoch = 3, .failed_rank = -1, .hello = 1};
  }
  f->view = (kolo_sched_job_view){.phase = KOLO__V1__PHASE__RUNNING,
                                  .epoch = 3,
                                  .has_ring = 1,
                                  .ring_size = n,
                                  .members = f->members,
                                  .n_members = n,
                                  .min_workers = 2,
                                  .max_workers = n,
                                  .now_unix_ms = NOW};
}

static inline kolo_sched_action decide(fixture *f) {
  kolo_sched_decision_clear(&f->d);
  assert_int_equal(kolo_sched_decide(&f->view, &f->d), KOLO_OK);
  return f->d.action;
}

static inline char *message(fixture *f) {
  return kolo_sched_decision_message(&f->view, &f->d);
}

static inline int setup(void **state) {
  *state = calloc(1, sizeof(fixture));
  return *state ? 0 : -1;
}

static inline int teardown(void **state) {
  fixture *f = *state;
  kolo_sched_decision_clear(&f->d);
  free(f);
  return 0;
}

#endif
