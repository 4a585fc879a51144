/* Unit tests for server/job_model.c: validation names the bad field, normalized specs
 * compare equal regardless of map order, and the phase machine refuses illegal moves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "server/job_model.h"
#include "coordination/job_mode.h"
#include "codec/codec.h"

static Kolo__V1__JobSpec *spec_from(const char *text) {
  ProtobufCMessage *msg = NULL;
  char err[256];
  assert_int_equal(
      kolo_codec_parse(text, strlen(text), &kolo__v1__job_spec__descriptor, &msg, err, sizeof err),
      KOLO_OK);
  return (Kolo__V1__JobSpec *)msg;
}

static void expect_invalid(const char *text, const char *field) {
  char err[256] = "";
  Kolo__V1__JobSpec *spec = spec_from(text);
  assert_int_equal(kolo_server_job_validate_spec(spec, err, sizeof err), KOLO_ERR_INVALID_ARG);
  if (strncmp(err, field, strlen(field)) != 0) fail_msg("expected '%s' in '%s'", field, err);
  protobuf_c_message_free_unpacked(&spec->base, NULL);
}

#define GOOD "\"name\":\"n\",\"min_workers\":1,\"builtin\":{\"model\":\"mlp\",\"epochs\":1}"

static void a_minimal_builtin_spec_is_valid(void **state) {
  (void)state;
  char err[256];
  Kolo__V1__JobSpec *spec = spec_from("{" GOOD "}");
  assert_int_equal(kolo_server_job_validate_spec(spec, err, sizeof err), KOLO_OK);
  protobuf_c_message_free_unpacked(&spec->base, NULL);
}

static void each_bad_field_is_named(void **state) {
  (void)state;
  expect_invalid("{\"min_workers\":1,\"builtin\":{\"model\":\"mlp\",\"epochs\":1}}", "name");
  expect_invalid("{\"name\":\"n\",\"builtin\":{\"model\":\"mlp\",\"epochs\":1}}", "min_workers");
  expect_invalid(
      "{\"name\":\"n\",\"min_workers\":3,\"max_workers\":2,\"builtin\":{\"model\":\"mlp\","
      "\"epochs\":1}}",
      "max_workers");
  expect_invalid("{\"name\":\"n\",\"min_workers\":1}", "program");
  expect_invalid("{\"name\":\"n\",\"min_workers\":1,\"builtin\":{\"epochs\":1}}", "builtin.model");
  expect_invalid("{\"name\":\"n\",\"min_workers\":1,\"builtin\":{\"model\":\"mlp\"}}",
                 "builtin.epochs");
  expect_invalid("{\"name\":\"n\",\"min_workers\":1,\"exec\":{\"argv\":[]}}", "exec.argv");
  expect_invalid(
      "{\"name\":\"n\",\"min_workers\":1,\"exec\":{\"argv\":[\"a\"],\"env\":{\"A=B\":\"1\"}}}",
      "exec.env.A=B");
  expect_invalid("{" GOOD ",\"id\":\"Bad/Id\"}", "id");
  expect_invalid("{" GOOD ",\"average_every\":4}", "average_every: only for modes ASYNC");
  expect_invalid("{" GOOD ",\"labels\":{\"bad key\":\"v\"}}", "labels.bad key");
  expect_invalid("{" GOOD ",\"collective_timeout_ms\":99999999}", "collective_timeout_ms");
  /* 2^63 was stored as a negative number and hid the job from every read */
  expect_invalid(
      "{\"name\":\"n\",\"min_workers\":1,\"builtin\":{\"model\":\"mlp\",\"steps\":"
      "\"9223372036854775808\"}}",
      "builtin.steps");
  expect_invalid(
      "{\"name\":\"n\",\"min_workers\":1,\"builtin\":{\"model\":\"mlp\",\"steps\":9007199254740993}"
      "}",
      "builtin.steps");
  char err[256];
  Kolo__V1__JobSpec *edge = spec_from(
      "{\"name\":\"n\",\"min_workers\":1,\"builtin\":{\"model\":\"mlp\",\"steps\":9007199254740992}"
      "}");
  assert_int_equal(kolo_server_job_validate_spec(edge, err, sizeof err), KOLO_OK);
  protobuf_c_message_free_unpacked(&edge->base, NULL);
}

static void expect_valid(const char *text) {
  char err[256] = "";
  Kolo__V1__JobSpec *spec = spec_from(text);
  if (kolo_server_job_validate_spec(spec, err, sizeof err) != KOLO_OK)
    fail_msg("%s: %s", text, err);
  protobuf_c_message_free_unpacked(&spec->base, NULL);
}

/* The training mode's parameters (issue 26): each checked against the modes that use it,
 * with its range, at submit; an exec job's env cannot set KOLO_MODE* itself. */
#define X(more) "{\"name\":\"n\",\"min_workers\":1,\"exec\":{\"argv\":[\"p\"]}," more "}"
static void the_modes_parameters_are_checked_naming_the_field_and_the_mode(void **state) {
  (void)state;
  expect_valid(
      X("\"mode\":\"DILOCO\",\"average_every\":50,\"outer_learning_rate\":0.7,"
        "\"outer_momentum\":0,\"outer_nesterov\":false,\"compression\":\"COMPRESSION_INT8\","
        "\"fragments\":5"));
  expect_valid(X("\"mode\":\"ASYNC\",\"average_every\":4,\"max_staleness\":3"));
  expect_valid(
      X("\"mode\":\"LOCAL_SGD\",\"average_every\":1,\"compression\":\"COMPRESSION_FP16\""));
  expect_invalid(X("\"mode\":\"DILOCO\",\"outer_momentum\":1"),
                 "outer_momentum: must be in [0, 1), got 1");
  expect_invalid(X("\"mode\":\"DILOCO\",\"outer_learning_rate\":0"),
                 "outer_learning_rate: must be in (0, 100], got 0");
  expect_invalid(X("\"mode\":\"DILOCO\",\"average_every\":4,\"fragments\":5"),
                 "fragments: must be in [1, 4]");
  expect_invalid(X("\"mode\":\"ASYNC\",\"outer_momentum\":0.5"),
                 "outer_momentum: only for mode DILOCO (mode is ASYNC)");
  expect_invalid(
      X("\"mode\":\"LOCAL_SGD\",\"outer_learning_rate\":0.5"),
      "outer_learning_rate: only for mode DILOCO (mode is LOCAL_SGD; LOCAL_SGD is DILOCO");
  expect_valid(X("\"mode\":\"DILOCO\",\"max_staleness\":2")); /* folded 2 rounds late */
  expect_invalid(X("\"mode\":\"LOCAL_SGD\",\"max_staleness\":1001"),
                 "max_staleness: must be in [0, 1000], got 1001");
  expect_invalid(X("\"max_staleness\":2"),
                 "max_staleness: only for modes ASYNC, LOCAL_SGD and DILOCO (mode is SYNC)");
  expect_invalid(
      "{\"name\":\"n\",\"min_workers\":1,\"mode\":\"DILOCO\",\"max_staleness\":1,"
      "\"builtin\":{\"model\":\"mlp\",\"epochs\":1}}",
      "max_staleness: the built-in trainer's LOCAL_SGD/DILOCO rounds wait");
  expect_invalid(X("\"mode\":\"ASYNC\",\"compression\":\"COMPRESSION_FP16\""),
                 "compression: only for modes LOCAL_SGD and DILOCO (mode is ASYNC)");
  expect_invalid(X("\"fragments\":2"), "fragments: only for modes LOCAL_SGD and DILOCO");
  expect_invalid(X("\"average_every\":4"),
                 "average_every: only for modes ASYNC, LOCAL_SGD and DILOCO");
  expect_invalid(X("\"mode\":\"ASYNC\",\"max_staleness\":1001"),
                 "max_staleness: must be in [1, 1000]");
  expect_invalid(
      "{\"name\":\"n\",\"min_workers\":1,\"exec\":{\"argv\":[\"p\"],\"env\":{\"KOLO_MODE\":"
      "\"ASYNC\"}}}",
      "exec.env.KOLO_MODE: set by kolo");
}

/* A builtin job's mode reaches kolo-train as flags (only where a value differs from the
 * mode's default, except --mode and --average-every); kolo-train's parser judges them. */
static void a_builtin_jobs_mode_becomes_kolo_train_flags(void **state) {
  (void)state;
  expect_valid("{" GOOD ",\"mode\":\"ASYNC\",\"average_every\":4}");
  kolo_mode_spec mode;
  kolo_job_mode_flag flags[KOLO_JOB_MODE_MAX_FLAGS];
  Kolo__V1__JobSpec *spec =
      spec_from(X("\"mode\":\"DILOCO\",\"average_every\":40,\"outer_momentum\":0,"
                  "\"outer_nesterov\":false,\"compression\":\"COMPRESSION_INT8\""));
  assert_int_equal(kolo_job_mode_spec(spec, &mode, NULL, 0), KOLO_OK);
  size_t n = kolo_job_mode_train_flags(&mode, flags);
  const char *want[] = {"--mode=diloco", "--average-every=40", "--outer-momentum=0", "--nesterov=0",
                        "--compression=int8"};
  assert_int_equal(n, 5);
  for (size_t i = 0; i < n; i++) assert_string_equal(flags[i].flag, want[i]);
  assert_string_equal(flags[2].field, "outer_momentum");
  protobuf_c_message_free_unpacked(&spec->base, NULL);
  spec = spec_from(X("\"mode\":\"SYNC\""));
  assert_int_equal(kolo_job_mode_spec(spec, &mode, NULL, 0), KOLO_OK);
  assert_int_equal(kolo_job_mode_train_flags(&mode, flags), 0);
  protobuf_c_message_free_unpacked(&spec->base, NULL);
}

/* What kolo-train's own parser refuses is refused at submit, naming the spec field
 * (before: accepted, then re-planned as lost workers until max_reconfigurations). */
static void builtin_arguments_are_checked_by_kolo_trains_parser(void **state) {
  (void)state;
#define B(inner) "{\"name\":\"n\",\"min_workers\":1,\"builtin\":{" inner "}}"
  expect_invalid(B("\"model\":\"nope\",\"epochs\":1"), "builtin.model: --model: 'nope'");
  expect_invalid(B("\"model\":\"mlp\",\"epochs\":1,\"batch_size\":4294967295"),
                 "builtin.batch_size: --batch must be 1..65536");
  expect_invalid(B("\"model\":\"mlp\",\"epochs\":1,\"dataset\":\"mnist\""),
                 "builtin.dataset: --dataset: unknown dataset 'mnist'");
  expect_invalid(B("\"model\":\"mlp\",\"epochs\":1,\"dataset\":\"csv:\""), "builtin.dataset");
  expect_invalid(B("\"model\":\"mlp\",\"epochs\":1,\"learning_rate\":1e-20"),
                 "builtin.learning_rate");
  expect_invalid(B("\"model\":\"mlp\",\"epochs\":1,\"hyper_parameters\":{\"colour\":\"red\"}"),
                 "builtin.hyper_parameters.colour: unknown or incomplete option '--colour=red'");
  expect_invalid(B("\"model\":\"mlp\",\"epochs\":1,\"hyper_parameters\":{\"optimizer\":\"lbfgs\"}"),
                 "builtin.hyper_parameters.optimizer: --optimizer: 'lbfgs'");
  expect_invalid(B("\"model\":\"mlp\",\"epochs\":1,\"hyper_parameters\":{\"threads\":\"0\"}"),
                 "builtin.hyper_parameters.threads");
  expect_invalid(B("\"model\":\"mlp\",\"epochs\":1,\"hyper_parameters\":{\"help\":\"\"}"),
                 "builtin.hyper_parameters.help");
  expect_invalid(B("\"model\":\"logreg\",\"epochs\":1,\"hyper_parameters\":{\"hidden\":\"32\"}"),
                 "builtin:");
  /* #12 item 5: hidden sizes kolo-train would refuse at setup (then exit 1: a "lost worker") */
  expect_invalid(
      B("\"model\":\"mlp\",\"epochs\":1,\"hyper_parameters\":{\"hidden\":\"abc\"}"),
      "builtin.hyper_parameters.hidden: --hidden: 'abc' (want up to 8 comma-separated widths");
  expect_invalid(B("\"model\":\"mlp\",\"epochs\":1,\"hyper_parameters\":{\"hidden\":\"32,,8\"}"),
                 "builtin.hyper_parameters.hidden");
  expect_invalid(B("\"model\":\"mlp\",\"epochs\":1,\"hyper_parameters\":{\"hidden\":\"0\"}"),
                 "builtin.hyper_parameters.hidden");
  expect_invalid(
      B("\"model\":\"mlp\",\"epochs\":1,\"hyper_parameters\":{\"hidden\":\"1,2,3,4,5,6,7,8,9\"}"),
      "builtin.hyper_parameters.hidden");
  expect_invalid(
      "{\"name\":\"n\",\"min_workers\":1,\"mode\":\"ASYNC\",\"average_every\":4,"
      "\"builtin\":{\"model\":\"mlp\",\"epochs\":1,\"hyper_parameters\":{\"mode\":\"fast\"}}}",
      "builtin.hyper_parameters.mode");
  /* what kolo-train takes passes: every model, dataset kind and known flag */
  const char *good[] = {
      B("\"model\":\"logreg\",\"steps\":5,\"batch_size\":65536"),
      B("\"model\":\"lenet\",\"epochs\":1,\"dataset\":\"fashion-mnist\",\"learning_rate\":0.1"),
      B("\"model\":\"mlp\",\"epochs\":2,\"dataset\":\"csv:/data/x.csv\","
        "\"hyper_parameters\":{\"hidden\":\"32\",\"eval\":\"false\",\"log-every\":\"5\","
        "\"optimizer\":\"adam\"}"),
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    char err[256] = "";
    Kolo__V1__JobSpec *spec = spec_from(good[i]);
    if (kolo_server_job_validate_spec(spec, err, sizeof err) != KOLO_OK)
      fail_msg("%s refused: %s", good[i], err);
    protobuf_c_message_free_unpacked(&spec->base, NULL);
  }
#undef B
}

static void specs_differing_only_in_map_order_are_equal_once_normalized(void **state) {
  (void)state;
  Kolo__V1__JobSpec *a = spec_from("{" GOOD ",\"labels\":{\"a\":\"1\",\"b\":\"2\"}}");
  Kolo__V1__JobSpec *b =
      spec_from("{" GOOD ",\"labels\":{\"b\":\"2\",\"a\":\"1\"},\"mode\":\"SYNC\"}");
  Kolo__V1__JobSpec *c = spec_from("{" GOOD ",\"labels\":{\"b\":\"3\",\"a\":\"1\"}}");
  kolo_server_job_normalize_spec(a);
  kolo_server_job_normalize_spec(b);
  kolo_server_job_normalize_spec(c);
  assert_int_equal(a->max_workers, 1);
  assert_true(kolo_server_job_spec_equal(a, b));
  assert_false(kolo_server_job_spec_equal(a, c));
  protobuf_c_message_free_unpacked(&a->base, NULL);
  protobuf_c_message_free_unpacked(&b->base, NULL);
  protobuf_c_message_free_unpacked(&c->base, NULL);
}

static void the_phase_machine_allows_only_forward_moves(void **state) {
  (void)state;
  assert_true(kolo_job_status_allowed(KOLO__V1__PHASE__PENDING, KOLO__V1__PHASE__RUNNING));
  assert_true(kolo_job_status_allowed(KOLO__V1__PHASE__PENDING, KOLO__V1__PHASE__CANCELLED));
  assert_true(kolo_job_status_allowed(KOLO__V1__PHASE__RUNNING, KOLO__V1__PHASE__RECONFIGURING));
  assert_true(kolo_job_status_allowed(KOLO__V1__PHASE__RECONFIGURING, KOLO__V1__PHASE__RUNNING));
  assert_false(kolo_job_status_allowed(KOLO__V1__PHASE__RECONFIGURING, KOLO__V1__PHASE__SUCCEEDED));
  assert_false(kolo_job_status_allowed(KOLO__V1__PHASE__SUCCEEDED, KOLO__V1__PHASE__CANCELLED));
  assert_false(kolo_job_status_allowed(KOLO__V1__PHASE__CANCELLED, KOLO__V1__PHASE__RUNNING));
  assert_false(kolo_job_status_allowed(KOLO__V1__PHASE__FAILED, KOLO__V1__PHASE__FAILED));
}

static void cancelling_a_pending_job_records_an_event_and_a_second_cancel_is_refused(void **state) {
  (void)state;
  char err[256];
  Kolo__V1__JobSpec *spec = spec_from("{" GOOD "}");
  kolo_server_job_normalize_spec(spec);
  Kolo__V1__Job *job = NULL;
  assert_int_equal(kolo_server_job_create(spec, "j-1", 1000, &job), KOLO_OK);
  assert_string_equal(job->id, "j-1");
  assert_string_equal(job->spec->id, "j-1");
  assert_int_equal(job->status->phase, KOLO__V1__PHASE__PENDING);
  assert_int_equal(job->n_events, 1);
  assert_string_equal(job->events[0]->type, "SUBMITTED");
  assert_int_equal(kolo_server_job_cancel(job, "user asked", 2000, err, sizeof err), KOLO_OK);
  assert_int_equal(job->status->phase, KOLO__V1__PHASE__CANCELLED);
  assert_int_equal(job->status->finished_unix_ms, 2000);
  assert_int_equal(job->n_events, 2);
  assert_int_equal(job->events[1]->seq, 2);
  assert_non_null(strstr(job->status->error, "user asked"));
  assert_int_equal(kolo_server_job_cancel(job, "", 3000, err, sizeof err), KOLO_ERR_STATE);
  assert_non_null(strstr(err, "CANCELLED"));
  assert_int_equal(job->n_events, 2);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  protobuf_c_message_free_unpacked(&spec->base, NULL);
}

static void scaling_checks_bounds_and_logs_an_event(void **state) {
  (void)state;
  char err[256];
  Kolo__V1__JobSpec *spec = spec_from("{" GOOD "}");
  Kolo__V1__Job *job = NULL;
  assert_int_equal(kolo_server_job_create(spec, "j-2", 1000, &job), KOLO_OK);
  assert_int_equal(kolo_server_job_scale(job, 3, 2, 1500, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "max_workers"));
  assert_int_equal(kolo_server_job_scale(job, 2, 5, 1500, err, sizeof err), KOLO_OK);
  assert_int_equal(job->status->min_workers, 2);
  assert_int_equal(job->status->max_workers, 5);
  assert_string_equal(job->events[job->n_events - 1]->type, "SCALED");
  assert_int_equal(kolo_server_job_cancel(job, NULL, 1600, err, sizeof err), KOLO_OK);
  assert_int_equal(kolo_server_job_scale(job, 1, 1, 1700, err, sizeof err), KOLO_ERR_STATE);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  protobuf_c_message_free_unpacked(&spec->base, NULL);
}

static void generated_ids_are_valid_and_distinct(void **state) {
  (void)state;
  char a[32], b[32];
  assert_int_equal(kolo_server_job_make_id(a, sizeof a), KOLO_OK);
  assert_int_equal(kolo_server_job_make_id(b, sizeof b), KOLO_OK);
  assert_true(kolo_server_job_id_valid(a));
  assert_string_not_equal(a, b);
  assert_false(kolo_server_job_id_valid("-x"));
  assert_false(kolo_server_job_id_valid("a/b"));
  assert_false(kolo_server_job_id_valid(""));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_minimal_builtin_spec_is_valid),
      cmocka_unit_test(each_bad_field_is_named),
      cmocka_unit_test(builtin_arguments_are_checked_by_kolo_trains_parser),
      cmocka_unit_test(the_modes_parameters_are_checked_naming_the_field_and_the_mode),
      cmocka_unit_test(a_builtin_jobs_mode_becomes_kolo_train_flags),
      cmocka_unit_test(specs_differing_only_in_map_order_are_equal_once_normalized),
      cmocka_unit_test(the_phase_machine_allows_only_forward_moves),
      cmocka_unit_test(cancelling_a_pending_job_records_an_event_and_a_second_cancel_is_refused),
      cmocka_unit_test(scaling_checks_bounds_and_logs_an_event),
      cmocka_unit_test(generated_ids_are_valid_and_distinct),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
