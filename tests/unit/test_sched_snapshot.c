/* The scheduler's snapshot (scheduler/snapshot.h) built from key-values as
 * etcd returns them, without etcd: jobs sorted oldest first, unreadable jobs
 * dropped, drains and assignments attached to workers, the typed view a
 * decision is made from, and which assignments are stale. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/snapshot.h"

typedef struct kvs {
  kolo_etcd_kv items[32];
  size_t n;
} kvs;

static void add(kvs *set, const char *key, const char *value, int64_t mod) {
  kolo_etcd_kv *kv = &set->items[set->n++];
  kv->key = (unsigned char *)strdup(key);
  kv->key_len = strlen(key);
  kv->value = (unsigned char *)strdup(value);
  kv->value_len = strlen(value);
  kv->mod_revision = mod;
}

static kolo_etcd_range_result range(kvs *set) {
  return (kolo_etcd_range_result){.kvs = set->items, .count = set->n};
}

static void clear(kvs *set) {
  for (size_t i = 0; i < set->n; i++) kolo_etcd_kv_clear(&set->items[i]);
  set->n = 0;
}

static void add_member(kolo_sched_snapshot *snap, const char *json) {
  snap->members = realloc(snap->members, (snap->n_members + 1) * sizeof *snap->members);
  assert_non_null(snap->members);
  kolo_worker_entry *e = &snap->members[snap->n_members];
  memset(e, 0, sizeof *e);
  assert_int_equal(kolo_member_read(json, strlen(json), &e->record, NULL, 0), KOLO_OK);
  snap->n_members++;
}

typedef struct fixture {
  kolo_sched_snapshot snap;
  kvs assigns, drains, jobs;
} fixture;

/* Workers w1 (idle; a drain mark of its earlier registration is left), w2
 * (busy on job "b", registered again under another lease than its ring's), w3 (idle but drained by
 * an operator); job "b" RUNNING at epoch 2 on w1 and w2 (w2 joined at epoch 2, w9 lost at epoch 1),
 * job "a" older and PENDING, job "c" without a spec. */
static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  add_member(&f->snap,
             "{\"id\":\"w1\",\"host\":\"h\",\"address\":\"127.0.0.1:7001\",\"cpus\":1,\"gpus\":0,"
             "\"state\":\"idle\"}");
  add_member(&f->snap,
             "{\"id\":\"w2\",\"host\":\"h\",\"address\":\"127.0.0.1:7002\",\"cpus\":1,\"gpus\":0,"
             "\"state\":\"busy\"}");
  f->snap.members[0].lease =
      81; /* etcd's lease of each record (the ring names 81 for w1, 90 for w2) */
  f->snap.members[1].lease = 91;
  add_member(&f->snap,
             "{\"id\":\"w3\",\"host\":\"h\",\"address\":\"127.0.0.1:7003\",\"cpus\":1,\"gpus\":0,"
             "\"state\":\"idle\"}");
  /* whole assignment records (coordination/assignment.h) */
  add(&f->assigns, "/kolo/v1/assign/w2",
      "{\"job\":\"b\",\"epoch\":2,\"ring\":\"/kolo/v1/jobs/b/ring/00000000000000000002\","
      "\"rank\":0}",
      1);
  add(&f->assigns, "/kolo/v1/assign/w7",
      "{\"job\":\"gone\",\"epoch\":1,\"ring\":\"/kolo/v1/jobs/gone/ring/00000000000000000001\","
      "\"rank\":0}",
      1);
  add(&f->drains, "/kolo/v1/drain/w1", "{\"draining\":true,\"lease\":77}",
      1); /* an earlier registration's */
  add(&f->drains, "/kolo/v1/drain/w3", "{\"draining\":true,\"lease\":0}", 1);
  add(&f->jobs, "/kolo/v1/jobs/a/spec", "{\"min_workers\":1}", 3);
  add(&f->jobs, "/kolo/v1/jobs/a/status", "{\"phase\":\"PENDING\",\"created_unix_ms\":100}", 4);
  add(&f->jobs, "/kolo/v1/jobs/b/events/0000000007", "{}", 5);
  add(&f->jobs, "/kolo/v1/jobs/b/reports/w2",
      "{\"time_unix_ms\":900,\"exited\":true,\"exit_code\":3,\"exit_epoch\":2,\"failed_epoch\":2,"
      "\"failed_rank\":0,\"formed_epoch\":2}",
      6);
  add(&f->jobs, "/kolo/v1/jobs/b/ring/00000000000000000002",
      "{\"job\":\"b\",\"epoch\":2,\"timeout_ms\":30000,\"secret\":\"0123456789abcdef\",\"members\":"
      "["
      "{\"worker_id\":\"w1\",\"rank\":0,\"host\":\"h\",\"address\":\"127.0.0.1:7001\",\"local_"
      "rank\":0,"
      "\"local_size\":2,\"since_epoch\":1,\"lease\":81},"
      "{\"worker_id\":\"w2\",\"rank\":1,\"host\":\"h\",\"address\":\"127.0.0.1:7002\",\"local_"
      "rank\":1,"
      "\"local_size\":2,\"since_epoch\":2,\"lease\":90}],"
      "\"lost\":[{\"worker_id\":\"w9\",\"why\":\"its lease expired\"}]}",
      7);
  /* a newer epoch whose member has no address: the codec refuses it, the snapshot leaves it out */
  add(&f->jobs, "/kolo/v1/jobs/b/ring/00000000000000000003",
      "{\"job\":\"b\",\"epoch\":3,\"timeout_ms\":30000,\"secret\":\"0123456789abcdef\",\"members\":"
      "["
      "{\"worker_id\":\"w1\",\"rank\":0,\"host\":\"h\",\"local_rank\":0,\"local_size\":1,\"since_"
      "epoch\":1}],"
      "\"lost\":[]}",
      7);
  add(&f->jobs, "/kolo/v1/jobs/b/spec",
      "{\"min_workers\":1,\"max_workers\":4,\"max_reconfigurations\":3}", 8);
  add(&f->jobs, "/kolo/v1/jobs/b/status",
      "{\"phase\":\"RUNNING\",\"epoch\":2,\"created_unix_ms\":200,\"reconfigurations\":1,\"max_"
      "workers\":2,"
      "\"members\":[{\"worker_id\":\"w1\"},{\"worker_id\":\"w2\"}]}",
      9);
  add(&f->jobs, "/kolo/v1/jobs/c/status", "{\"phase\":\"PENDING\",\"created_unix_ms\":1}", 10);
  kolo_etcd_range_result a = range(&f->assigns), d = range(&f->drains), j = range(&f->jobs);
  assert_int_equal(kolo_sched_snapshot_fill(&f->snap, &a, &d, &j), KOLO_OK);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kolo_sched_snapshot_free(&f->snap);
  clear(&f->assigns);
  clear(&f->drains);
  clear(&f->jobs);
  free(f);
  return 0;
}

static void jobs_come_oldest_first_and_unreadable_ones_are_dropped(void **state) {
  fixture *f = *state;
  assert_int_equal(f->snap.n_jobs, 2);
  assert_string_equal(f->snap.jobs[0].id, "a");
  assert_string_equal(f->snap.jobs[1].id, "b");
  assert_int_equal(f->snap.jobs[1].max_seq, 7);
  assert_int_equal(f->snap.jobs[1].status_mod, 9);
  assert_int_equal(kolo_sched_job_phase(&f->snap.jobs[0]), KOLO__V1__PHASE__PENDING);
}

/* Judged (decide.h), not queued (plan.h): RUNNING b, and b again as a PENDING job forming its
 * first ring (the ring of its epoch exists); not a PENDING status whose epoch has no ring (no
 * SCHEDULED wrote it), nor queued a (issue 32). */
static void a_pending_job_is_scheduled_once_its_epoch_has_a_ring(void **state) {
  fixture *f = *state;
  kolo_sched_job *b = &f->snap.jobs[1];
  assert_false(kolo_sched_job_scheduled(&f->snap.jobs[0]));
  assert_true(kolo_sched_job_scheduled(b));
  b->status->phase = KOLO__V1__PHASE__PENDING;
  assert_true(kolo_sched_job_scheduled(b));
  b->status->epoch = 3; /* its ring record did not decode: left out */
  assert_false(kolo_sched_job_scheduled(b));
  b->status->phase = KOLO__V1__PHASE__RECONFIGURING;
  assert_true(kolo_sched_job_scheduled(b));
  b->status->phase = KOLO__V1__PHASE__RUNNING;
  b->status->epoch = 2;
}

/* A job's spec and status are kept as the messages they decode to (job.proto): the
 * decisions' view and apply.c's writes read their fields, never JSON. */
static void a_job_s_spec_and_status_are_kept_decoded(void **state) {
  fixture *f = *state;
  const kolo_sched_job *b = &f->snap.jobs[1];
  assert_int_equal(kolo_sched_job_phase(b), KOLO__V1__PHASE__RUNNING);
  assert_int_equal(b->status->epoch, 2);
  assert_int_equal(b->status->reconfigurations, 1);
  assert_int_equal(b->status->n_members, 2);
  assert_string_equal(kolo_sched_member_id(b, 0), "w1");
  assert_string_equal(kolo_sched_member_id(b, 1), "w2");
  assert_string_equal(kolo_sched_member_id(b, 2), ""); /* past the end */
  assert_int_equal(b->spec->max_reconfigurations, 3);
  assert_int_equal(b->spec->max_workers, 4);
  assert_int_equal(b->created, 200);
}

static void a_drained_or_assigned_worker_is_not_idle(void **state) {
  fixture *f = *state;
  assert_true(kolo_sched_find_worker(&f->snap, "w3")->draining);
  assert_false(kolo_sched_find_worker(&f->snap, "w1")->draining); /* the mark names another lease */
  assert_string_equal(kolo_sched_find_worker(&f->snap, "w2")->assign_job, "b");
  assert_int_equal(kolo_sched_count_idle(&f->snap), 1);
  kolo_sched_find_worker(&f->snap, "w1")->taken = 1;
  assert_int_equal(kolo_sched_count_idle(&f->snap), 0);
  assert_null(kolo_sched_find_worker(&f->snap, "w9"));
}

static void bounds_prefer_the_status_over_the_spec(void **state) {
  fixture *f = *state;
  assert_int_equal(kolo_sched_job_max_workers(&f->snap.jobs[1]), 2);
  assert_int_equal(kolo_sched_job_min_workers(&f->snap.jobs[1]), 1);
  assert_int_equal(kolo_sched_job_max_workers(&f->snap.jobs[0]), 1); /* absent: at least 1 */
}

static void ring_records_are_read_through_their_codec(void **state) {
  fixture *f = *state;
  const Kolo__V1__RingRecord *ring = kolo_sched_job_ring(&f->snap.jobs[1], 2);
  assert_non_null(ring);
  assert_int_equal(ring->n_members, 2);
  assert_string_equal(ring->members[1]->address, "127.0.0.1:7002");
  assert_null(kolo_sched_job_ring(&f->snap.jobs[1], 3)); /* no address: not a ring */
  assert_null(kolo_sched_job_ring(&f->snap.jobs[1], 1));
}

/* An etcd kept from before the keys helper held 10-digit event keys; a 20-digit key
 * sorts before them ("...00011" < "0000000010"), so the next number is the maximum
 * of the keys' numbers, not the last key's. */
static void event_numbers_of_both_key_widths_count(void **state) {
  (void)state;
  kolo_sched_snapshot snap = {0};
  kvs none = {0}, jobs = {0};
  add(&jobs, "/kolo/v1/jobs/old/events/00000000000000000011", "{}", 3);
  add(&jobs, "/kolo/v1/jobs/old/events/0000000010", "{}", 2);
  add(&jobs, "/kolo/v1/jobs/old/events/not-a-number", "{}", 2);
  add(&jobs, "/kolo/v1/jobs/old/spec", "{}", 1);
  add(&jobs, "/kolo/v1/jobs/old/status", "{\"phase\":\"RUNNING\"}", 3);
  kolo_etcd_range_result a = range(&none), d = range(&none), j = range(&jobs);
  assert_int_equal(kolo_sched_snapshot_fill(&snap, &a, &d, &j), KOLO_OK);
  assert_int_equal(snap.n_jobs, 1);
  assert_int_equal(snap.jobs[0].max_seq, 11);
  kolo_sched_snapshot_free(&snap);
  clear(&jobs);
}

/* An assignment that does not decode (coordination/assignment.h: here no ring) keeps its
 * worker busy with no job, so no pass plans the worker over it and the sweep, which keeps
 * only assignments to a member of an active job, takes it away. */
static void an_assignment_that_does_not_decode_is_no_job_and_keeps_the_worker_busy(void **state) {
  (void)state;
  kolo_sched_snapshot snap = {0};
  add_member(&snap,
             "{\"id\":\"w1\",\"host\":\"h\",\"address\":\"127.0.0.1:7001\",\"cpus\":1,"
             "\"gpus\":0,\"state\":\"idle\"}");
  kvs assigns = {0}, none = {0};
  add(&assigns, "/kolo/v1/assign/w1", "{\"job\":\"b\",\"epoch\":2}", 1);
  kolo_etcd_range_result a = range(&assigns), d = range(&none), j = range(&none);
  assert_int_equal(kolo_sched_snapshot_fill(&snap, &a, &d, &j), KOLO_OK);
  assert_int_equal(snap.n_assigns, 1);
  assert_string_equal(snap.assigns[0].worker_id, "w1");
  assert_string_equal(kolo_sched_find_worker(&snap, "w1")->assign_job, "");
  assert_false(kolo_sched_worker_idle(kolo_sched_find_worker(&snap, "w1")));
  assert_false(kolo_sched_assignment_valid(&snap, "w1", ""));
  kolo_sched_snapshot_free(&snap);
  clear(&assigns);
}

/* A spec or status that does not decode as its message (job.proto) leaves its job out, as
 * one that is not JSON did: the scheduler never writes over a status it cannot read. */
static void a_job_whose_status_or_spec_does_not_decode_is_left_out(void **state) {
  (void)state;
  kolo_sched_snapshot snap = {0};
  kvs none = {0}, jobs = {0};
  add(&jobs, "/kolo/v1/jobs/p/spec", "{\"min_workers\":1}", 1);
  add(&jobs, "/kolo/v1/jobs/p/status", "{\"phase\":\"WALKING\"}", 2);
  add(&jobs, "/kolo/v1/jobs/q/spec", "{\"min_workers\":-1}", 3);
  add(&jobs, "/kolo/v1/jobs/q/status", "{\"phase\":\"PENDING\"}", 4);
  add(&jobs, "/kolo/v1/jobs/r/spec", "{\"min_workers\":1,\"from_a_newer_server\":true}", 5);
  add(&jobs, "/kolo/v1/jobs/r/status", "{\"phase\":\"PENDING\"}", 6);
  kolo_etcd_range_result a = range(&none), d = range(&none), j = range(&jobs);
  assert_int_equal(kolo_sched_snapshot_fill(&snap, &a, &d, &j), KOLO_OK);
  assert_int_equal(snap.n_jobs, 1);
  assert_string_equal(snap.jobs[0].id, "r");
  kolo_sched_snapshot_free(&snap);
  clear(&jobs);
}

static void the_view_carries_records_reports_and_the_ring(void **state) {
  fixture *f = *state;
  kolo_sched_job_view view;
  kolo_sched_member *members;
  const char **earlier;
  assert_int_equal(
      kolo_sched_job_view_build(&f->snap, &f->snap.jobs[1], 1000, &view, &members, &earlier),
      KOLO_OK);
  assert_int_equal(view.phase, KOLO__V1__PHASE__RUNNING);
  assert_int_equal(view.epoch, 2);
  assert_true(view.has_ring);
  assert_int_equal(view.ring_size, 2);
  assert_int_equal(view.n_members, 2);
  assert_int_equal(view.max_workers, 2);
  assert_int_equal(view.reconfigurations, 1);
  assert_int_equal(view.max_reconfigurations, 3);
  assert_int_equal(view.idle, 1);
  assert_int_equal(view.now_unix_ms, 1000);
  assert_int_equal(view.n_earlier_lost, 1);
  assert_string_equal(view.earlier_lost[0], "w9");
  assert_string_equal(members[0].worker_id, "w1");
  assert_true(members[0].registered);
  assert_int_equal(members[0].since_epoch, 1);
  /* which registration: the ring's lease against the record's (w2 came back under 91) */
  assert_int_equal(members[0].lease, 81);
  assert_int_equal(members[0].ring_lease, 81);
  assert_int_equal(members[1].lease, 91);
  assert_int_equal(members[1].ring_lease, 90);
  assert_false(members[0].report.present);
  assert_int_equal(members[0].report.failed_rank, -1);
  const kolo_sched_report *r = &members[1].report;
  assert_int_equal(members[1].since_epoch, 2);
  assert_true(r->present && r->exited);
  assert_int_equal(r->exit_code, 3);
  assert_int_equal(r->exit_epoch, 2);
  assert_int_equal(r->failed_epoch, 2);
  assert_int_equal(r->failed_rank, 0);
  assert_int_equal(r->formed_epoch, 2);
  assert_int_equal(r->time_unix_ms, 900);
  free(members);
  free(earlier);
}

static void an_assignment_is_valid_only_for_a_member_of_an_active_job(void **state) {
  fixture *f = *state;
  assert_true(kolo_sched_assignment_valid(&f->snap, "w2", "b"));
  assert_false(kolo_sched_assignment_valid(&f->snap, "w3", "b"));    /* not a member */
  assert_false(kolo_sched_assignment_valid(&f->snap, "w7", "gone")); /* unknown job */
  assert_false(kolo_sched_assignment_valid(&f->snap, "w1", "a"));    /* pending job */
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(jobs_come_oldest_first_and_unreadable_ones_are_dropped),
      T(a_drained_or_assigned_worker_is_not_idle),
      T(a_job_s_spec_and_status_are_kept_decoded),
      T(a_pending_job_is_scheduled_once_its_epoch_has_a_ring),
      T(bounds_prefer_the_status_over_the_spec),
      T(ring_records_are_read_through_their_codec),
      cmocka_unit_test(event_numbers_of_both_key_widths_count),
      cmocka_unit_test(an_assignment_that_does_not_decode_is_no_job_and_keeps_the_worker_busy),
      cmocka_unit_test(a_job_whose_status_or_spec_does_not_decode_is_left_out),
      T(the_view_carries_records_reports_and_the_ring),
      T(an_assignment_is_valid_only_for_a_member_of_an_active_job),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
