/* Unit tests for coordination/job_status.c: the job status's transitions as pure functions
 * over kolo.v1.JobStatus (the one owner kolo-server and the scheduler both write through),
 * and its JSON through the codec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec/codec.h"
#include "coordination/job_status.h"

static Kolo__V1__JobStatus *new_status(void) {
  Kolo__V1__JobStatus *st = malloc(sizeof *st);
  assert_non_null(st);
  kolo__v1__job_status__init(st);
  kolo_job_status_submitted(st, 2, 4, 1000);
  return st;
}

static void free_status(Kolo__V1__JobStatus *st) {
  protobuf_c_message_free_unpacked(&st->base, NULL);
}

static Kolo__V1__Member **members(size_t n, const char *prefix) {
  Kolo__V1__Member **out = calloc(n + 1, sizeof *out);
  for (size_t i = 0; i < n; i++) {
    out[i] = malloc(sizeof *out[i]);
    kolo__v1__member__init(out[i]);
    char id[32];
    snprintf(id, sizeof id, "%s%zu", prefix, i);
    out[i]->worker_id = strdup(id);
    out[i]->rank = (uint32_t)i;
  }
  return out;
}

static void a_submitted_job_is_pending_with_the_spec_s_bounds(void **state) {
  (void)state;
  Kolo__V1__JobStatus *st = new_status();
  assert_int_equal(st->phase, KOLO__V1__PHASE__PENDING);
  assert_int_equal(st->created_unix_ms, 1000);
  assert_int_equal(st->updated_unix_ms, 1000);
  assert_int_equal(st->min_workers, 2);
  assert_int_equal(st->max_workers, 4);
  assert_int_equal(st->started_unix_ms, 0);
  free_status(st);
}

static void an_epoch_sets_phase_members_and_counts_and_starts_the_clock_once(void **state) {
  (void)state;
  Kolo__V1__JobStatus *st = new_status();
  assert_int_equal(
      kolo_job_status_epoch(st, KOLO__V1__PHASE__RUNNING, 1, members(2, "a"), 2, 0, 0, 2000),
      KOLO_OK);
  assert_int_equal(st->phase, KOLO__V1__PHASE__RUNNING);
  assert_int_equal(st->epoch, 1);
  assert_int_equal(st->n_members, 2);
  assert_string_equal(st->members[1]->worker_id, "a1");
  assert_int_equal(st->started_unix_ms, 2000);
  assert_int_equal(st->reconfigurations, 0);
  /* a re-form after a loss and a drain: counted apart */
  assert_int_equal(
      kolo_job_status_epoch(st, KOLO__V1__PHASE__RUNNING, 2, members(3, "b"), 3, 1, 2, 3000),
      KOLO_OK);
  assert_int_equal(st->epoch, 2);
  assert_int_equal(st->n_members, 3);
  assert_string_equal(st->members[0]->worker_id, "b0");
  assert_int_equal(st->started_unix_ms, 2000); /* the first start stays */
  assert_int_equal(st->updated_unix_ms, 3000);
  assert_int_equal(st->reconfigurations, 1);
  assert_int_equal(st->drains, 2);
  free_status(st);
}

static void a_move_keeps_members_unless_given_and_refuses_no_phase(void **state) {
  (void)state;
  Kolo__V1__JobStatus *st = new_status();
  assert_int_equal(
      kolo_job_status_epoch(st, KOLO__V1__PHASE__RUNNING, 1, members(2, "a"), 2, 0, 0, 2000),
      KOLO_OK);
  assert_int_equal(kolo_job_status_move(st, KOLO__V1__PHASE__RECONFIGURING, NULL, 0, 1, 0, 2500),
                   KOLO_OK);
  assert_int_equal(st->phase, KOLO__V1__PHASE__RECONFIGURING);
  assert_int_equal(st->n_members, 2);
  assert_int_equal(st->reconfigurations, 1);
  assert_int_equal(st->epoch, 1); /* a move is not an epoch */
  assert_int_equal(
      kolo_job_status_move(st, KOLO__V1__PHASE__RUNNING, members(1, "k"), 1, 0, 0, 2600), KOLO_OK);
  assert_int_equal(st->n_members, 1);
  assert_string_equal(st->members[0]->worker_id, "k0");
  assert_int_equal(
      kolo_job_status_move(st, KOLO__V1__PHASE__PHASE_UNSPECIFIED, NULL, 0, 0, 0, 2700),
      KOLO_ERR_INVALID_ARG);
  assert_int_equal(st->phase, KOLO__V1__PHASE__RUNNING);
  assert_int_equal(st->updated_unix_ms, 2600);
  free_status(st);
}

/* #29: a job held below min_workers says so (have, need, since when) until it resumes, is
 * scaled down to what it has, or ends. */
static void a_job_below_min_workers_says_it_waits_and_since_when(void **state) {
  (void)state;
  Kolo__V1__JobStatus *st = new_status(); /* min_workers 2 */
  assert_int_equal(
      kolo_job_status_epoch(st, KOLO__V1__PHASE__RUNNING, 1, members(2, "a"), 2, 0, 0, 2000),
      KOLO_OK);
  assert_null(st->waiting);
  assert_int_equal(
      kolo_job_status_move(st, KOLO__V1__PHASE__RECONFIGURING, members(1, "a"), 1, 1, 0, 3000),
      KOLO_OK);
  assert_non_null(st->waiting);
  assert_int_equal(st->waiting->have, 1);
  assert_int_equal(st->waiting->need, 2);
  assert_int_equal(st->waiting->since_unix_ms, 3000);
  /* its JSON, as HTTP clients and the dashboard read it */
  char *json = kolo_job_status_write(st);
  printf("%s\n", json);
  assert_non_null(strstr(json, "\"waiting\":{\"have\":1,\"need\":2,\"since_unix_ms\":3000}"));
  free(json);
  /* scaled up while waiting: the same wait, a new need */
  assert_int_equal(kolo_job_status_scale(st, 3, 4, 4000), KOLO_OK);
  assert_int_equal(st->waiting->need, 3);
  assert_int_equal(st->waiting->since_unix_ms, 3000);
  /* resumed with enough workers: no longer waiting */
  assert_int_equal(
      kolo_job_status_epoch(st, KOLO__V1__PHASE__RECONFIGURING, 2, members(3, "b"), 3, 0, 0, 5000),
      KOLO_OK);
  assert_null(st->waiting);
  /* waiting again, then scaled down to what it has */
  assert_int_equal(
      kolo_job_status_move(st, KOLO__V1__PHASE__RECONFIGURING, members(1, "b"), 1, 1, 0, 6000),
      KOLO_OK);
  assert_int_equal(st->waiting->since_unix_ms, 6000);
  assert_int_equal(kolo_job_status_scale(st, 1, 4, 7000), KOLO_OK);
  assert_null(st->waiting);
  /* and a job that fails while waiting is not waiting any more */
  assert_int_equal(kolo_job_status_scale(st, 2, 4, 8000), KOLO_OK);
  assert_non_null(st->waiting);
  assert_int_equal(kolo_job_status_finish(st, KOLO__V1__PHASE__FAILED, "gone", NULL, 9000),
                   KOLO_OK);
  assert_null(st->waiting);
  free_status(st);
}

static void a_final_status_never_changes_whoever_asks(void **state) {
  (void)state;
  Kolo__V1__JobStatus *st = new_status();
  assert_int_equal(kolo_job_status_cancel(st, "cancelled: user asked", 1500), KOLO_OK);
  assert_int_equal(st->phase, KOLO__V1__PHASE__CANCELLED);
  assert_string_equal(st->error, "cancelled: user asked");
  assert_int_equal(st->finished_unix_ms, 1500);
  Kolo__V1__Member **m = members(1, "x");
  assert_int_equal(kolo_job_status_move(st, KOLO__V1__PHASE__RUNNING, m, 1, 1, 0, 1600),
                   KOLO_ERR_STATE);
  assert_int_equal(st->n_members, 0); /* the caller keeps m */
  protobuf_c_message_free_unpacked(&m[0]->base, NULL);
  free(m);
  assert_int_equal(kolo_job_status_epoch(st, KOLO__V1__PHASE__RUNNING, 1, NULL, 0, 0, 0, 1600),
                   KOLO_ERR_STATE);
  assert_int_equal(kolo_job_status_finish(st, KOLO__V1__PHASE__FAILED, "x", NULL, 1600),
                   KOLO_ERR_STATE);
  assert_int_equal(kolo_job_status_cancel(st, "again", 1600), KOLO_ERR_STATE);
  assert_int_equal(kolo_job_status_scale(st, 1, 1, 1600), KOLO_ERR_STATE);
  assert_int_equal(st->phase, KOLO__V1__PHASE__CANCELLED);
  assert_string_equal(st->error, "cancelled: user asked");
  assert_int_equal(st->reconfigurations, 0);
  assert_int_equal(st->updated_unix_ms, 1500);
  free_status(st);
}

static void false_losses_count_up_saturate_and_stay_once_final(void **state) {
  (void)state;
  Kolo__V1__JobStatus *st = new_status();
  assert_int_equal(st->false_losses, 0);
  assert_int_equal(kolo_job_status_count_false_losses(st, 1), KOLO_OK);
  assert_int_equal(kolo_job_status_count_false_losses(st, 2), KOLO_OK);
  assert_int_equal(st->false_losses, 3);
  char *json = kolo_job_status_write(st);
  assert_non_null(strstr(json, "\"false_losses\":3"));
  free(json);
  st->false_losses = UINT32_MAX - 1;
  assert_int_equal(kolo_job_status_count_false_losses(st, 5), KOLO_OK);
  assert_int_equal(st->false_losses, UINT32_MAX);
  st->false_losses = 3;
  assert_int_equal(kolo_job_status_cancel(st, "cancelled", 1500), KOLO_OK);
  assert_int_equal(kolo_job_status_count_false_losses(st, 1), KOLO_ERR_STATE);
  assert_int_equal(st->false_losses, 3);
  free_status(st);
}

static void scaling_changes_the_bounds_only(void **state) {
  (void)state;
  Kolo__V1__JobStatus *st = new_status();
  assert_int_equal(kolo_job_status_scale(st, 3, 5, 1200), KOLO_OK);
  assert_int_equal(st->min_workers, 3);
  assert_int_equal(st->max_workers, 5);
  assert_int_equal(st->phase, KOLO__V1__PHASE__PENDING);
  assert_int_equal(st->updated_unix_ms, 1200);
  free_status(st);
}

static void the_phase_machine_is_the_one_the_api_enforces(void **state) {
  (void)state;
  assert_true(kolo_job_status_allowed(KOLO__V1__PHASE__PENDING, KOLO__V1__PHASE__RUNNING));
  assert_true(kolo_job_status_allowed(KOLO__V1__PHASE__RUNNING, KOLO__V1__PHASE__PENDING));
  assert_true(kolo_job_status_allowed(KOLO__V1__PHASE__RECONFIGURING, KOLO__V1__PHASE__FAILED));
  /* scheduled, before its first ring formed: a loss re-forms it; rank 0 may end (a program
   * without libkolo forms no ring) */
  assert_true(kolo_job_status_allowed(KOLO__V1__PHASE__PENDING, KOLO__V1__PHASE__RECONFIGURING));
  assert_true(kolo_job_status_allowed(KOLO__V1__PHASE__PENDING, KOLO__V1__PHASE__SUCCEEDED));
  assert_false(kolo_job_status_allowed(KOLO__V1__PHASE__PENDING, KOLO__V1__PHASE__PENDING));
  assert_false(kolo_job_status_allowed(KOLO__V1__PHASE__RECONFIGURING, KOLO__V1__PHASE__SUCCEEDED));
  assert_false(kolo_job_status_allowed(KOLO__V1__PHASE__SUCCEEDED, KOLO__V1__PHASE__CANCELLED));
  assert_false(kolo_job_status_allowed(KOLO__V1__PHASE__RUNNING, KOLO__V1__PHASE__RUNNING));
}

/* A report's progress as the report's reader holds it: a kolo.v1.Struct through the codec. */
static Kolo__V1__Struct *progress_of(const char *text) {
  ProtobufCMessage *msg = NULL;
  assert_int_equal(
      kolo_codec_read(text, strlen(text), &kolo__v1__struct__descriptor, 0, &msg, NULL), KOLO_OK);
  return (Kolo__V1__Struct *)msg;
}

static void progress_is_read_from_a_report_under_either_name(void **state) {
  (void)state;
  Kolo__V1__Struct *r = progress_of(
      "{\"steps\":40,\"total_steps\":100,\"loss\":0.25,\"samples_per_sec_total\":"
      "512.5,\"train_accuracy\":0.75,\"test_accuracy\":\"0.9\",\"event\":\"x\"}");
  kolo_job_progress p = kolo_job_progress_from_report(r);
  assert_int_equal(p.step, 40);
  assert_int_equal(p.total_steps, 100);
  assert_true(p.loss == 0.25);
  assert_true(p.samples_per_sec == 512.5);
  assert_true(p.accuracy == 0.75); /* kolo-train's training accuracy stands in */
  assert_true(p.train_accuracy == 0.75);
  assert_int_equal(p.present & KOLO_JOB_PROGRESS_TEST_ACCURACY, 0); /* a string is no number */
  protobuf_c_message_free_unpacked(&r->base, NULL);
  r = progress_of("{\"step\":-3,\"steps\":7,\"total_steps\":12.7,\"accuracy\":0.5}");
  p = kolo_job_progress_from_report(r);
  assert_int_equal(p.present & KOLO_JOB_PROGRESS_STEP,
                   0); /* "step" wins over "steps", and is bad */
  assert_int_equal(p.total_steps, 12);
  assert_true(p.accuracy == 0.5);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  p = kolo_job_progress_from_report(NULL);
  assert_int_equal(p.present, 0);
}

/* The training mode's report keys (issue 26) reach the status: rounds, bytes sent, staleness,
 * blocked seconds, and the mode's canonical name (a text that is no mode is ignored). */
static void the_training_modes_figures_reach_the_status(void **state) {
  (void)state;
  Kolo__V1__Struct *r = progress_of(
      "{\"step\":5,\"rounds\":12,\"bytes_sent\":4096,\"staleness\":1.5,"
      "\"blocked_seconds\":0.25,\"mode\":\"diloco\"}");
  kolo_job_progress p = kolo_job_progress_from_report(r);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  assert_int_equal(p.rounds, 12);
  assert_int_equal(p.bytes_sent, 4096);
  assert_true(p.staleness == 1.5 && p.blocked_seconds == 0.25);
  assert_string_equal(p.mode, "DILOCO");
  Kolo__V1__JobStatus *st = new_status();
  assert_int_equal(kolo_job_status_merge_progress(st, &p, 2000), 1);
  assert_int_equal(st->progress->rounds, 12);
  assert_int_equal(st->progress->bytes_sent, 4096);
  assert_true(st->progress->staleness == 1.5 && st->progress->blocked_seconds == 0.25);
  assert_string_equal(st->progress->mode, "DILOCO");
  assert_int_equal(kolo_job_status_merge_progress(st, &p, 3000), 0); /* nothing new */
  free_status(st);
  r = progress_of("{\"rounds\":-1,\"mode\":\"hogwild\"}");
  p = kolo_job_progress_from_report(r);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  assert_int_equal(p.present & (KOLO_JOB_PROGRESS_ROUNDS | KOLO_JOB_PROGRESS_MODE), 0);
}

static void merged_progress_overwrites_what_was_reported_and_says_if_it_changed(void **state) {
  (void)state;
  Kolo__V1__JobStatus *st = new_status();
  kolo_job_progress p = {
      .present = KOLO_JOB_PROGRESS_STEP | KOLO_JOB_PROGRESS_LOSS, .step = 10, .loss = 0.5};
  assert_int_equal(kolo_job_status_merge_progress(st, &p, 2000), 1);
  assert_int_equal(st->progress->step, 10);
  assert_true(st->progress->loss == 0.5);
  assert_int_equal(st->updated_unix_ms, 2000);
  assert_int_equal(kolo_job_status_merge_progress(st, &p, 3000), 0); /* the same: no write */
  assert_int_equal(st->updated_unix_ms, 2000);
  kolo_job_progress q = {.present = KOLO_JOB_PROGRESS_STEP, .step = 11, .loss = 9.0};
  assert_int_equal(kolo_job_status_merge_progress(st, &q, 4000), 1);
  assert_int_equal(st->progress->step, 11);
  assert_true(st->progress->loss == 0.5); /* not reported: kept */
  free_status(st);
}

static void a_job_ends_with_its_error_and_last_progress(void **state) {
  (void)state;
  Kolo__V1__JobStatus *st = new_status();
  assert_int_equal(
      kolo_job_status_epoch(st, KOLO__V1__PHASE__RUNNING, 1, members(1, "a"), 1, 0, 0, 2000),
      KOLO_OK);
  kolo_job_progress p = {.present = KOLO_JOB_PROGRESS_STEP, .step = 99};
  assert_int_equal(kolo_job_status_finish(st, KOLO__V1__PHASE__RUNNING, "x", &p, 3000),
                   KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_job_status_finish(st, KOLO__V1__PHASE__FAILED, "w1 exited 1", &p, 3000),
                   KOLO_OK);
  assert_int_equal(st->phase, KOLO__V1__PHASE__FAILED);
  assert_string_equal(st->error, "w1 exited 1");
  assert_int_equal(st->finished_unix_ms, 3000);
  assert_int_equal(st->progress->step, 99);
  free_status(st);
  st = new_status();
  assert_int_equal(kolo_job_status_finish(st, KOLO__V1__PHASE__SUCCEEDED, "done", NULL, 3000),
                   KOLO_OK);
  assert_string_equal(st->error, ""); /* only a failure says why */
  assert_null(st->progress);
  free_status(st);
}

static void a_status_round_trips_and_a_newer_writer_s_fields_are_skipped(void **state) {
  (void)state;
  Kolo__V1__JobStatus *st = new_status();
  assert_int_equal(
      kolo_job_status_epoch(st, KOLO__V1__PHASE__RUNNING, 7, members(2, "a"), 2, 1, 0, 2000),
      KOLO_OK);
  char *text = kolo_job_status_write(st);
  assert_non_null(text);
  assert_non_null(
      strstr(text, "\"phase\":\"RUNNING\",\"epoch\":7,\"members\":[{\"worker_id\":\"a0\""));
  json_t *json = json_loads(text, 0, NULL);
  json_object_set_new(json, "from_the_future", json_true());
  char *newer = json_dumps(json, JSON_COMPACT);
  Kolo__V1__JobStatus *back = NULL;
  char err[256];
  assert_int_equal(kolo_job_status_read(newer, strlen(newer), &back, err, sizeof err), KOLO_OK);
  free(newer);
  assert_int_equal(back->epoch, 7);
  assert_int_equal(back->reconfigurations, 1);
  assert_string_equal(back->members[1]->worker_id, "a1");
  json_decref(json);
  const char *walking = "{\"phase\":\"WALKING\"}";
  Kolo__V1__JobStatus *bad = NULL;
  assert_int_equal(kolo_job_status_read(walking, strlen(walking), &bad, err, sizeof err),
                   KOLO_ERR_INVALID_ARG);
  assert_null(bad);
  assert_non_null(strstr(err, "phase: expected one of"));
  free(text);
  free_status(back);
  free_status(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_submitted_job_is_pending_with_the_spec_s_bounds),
      cmocka_unit_test(an_epoch_sets_phase_members_and_counts_and_starts_the_clock_once),
      cmocka_unit_test(a_move_keeps_members_unless_given_and_refuses_no_phase),
      cmocka_unit_test(a_job_below_min_workers_says_it_waits_and_since_when),
      cmocka_unit_test(a_final_status_never_changes_whoever_asks),
      cmocka_unit_test(false_losses_count_up_saturate_and_stay_once_final),
      cmocka_unit_test(scaling_changes_the_bounds_only),
      cmocka_unit_test(the_phase_machine_is_the_one_the_api_enforces),
      cmocka_unit_test(progress_is_read_from_a_report_under_either_name),
      cmocka_unit_test(the_training_modes_figures_reach_the_status),
      cmocka_unit_test(merged_progress_overwrites_what_was_reported_and_says_if_it_changed),
      cmocka_unit_test(a_job_ends_with_its_error_and_last_progress),
      cmocka_unit_test(a_status_round_trips_and_a_newer_writer_s_fields_are_skipped),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
