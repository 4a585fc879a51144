/* Unit tests for codec/codec.c: the JSON shape is a 1:1 mapping of the protobuf
 * messages, bad input names the offending field, and nothing leaks on error paths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kolo/v1/job.pb-c.h"
#include "kolo/v1/records.pb-c.h"
#include "codec/codec.h"

static Kolo__V1__JobSpec *parse_spec(const char *text, kolo_status *rc, char *err, size_t len) {
  ProtobufCMessage *msg = NULL;
  *rc = kolo_codec_parse(text, strlen(text), &kolo__v1__job_spec__descriptor, &msg, err, len);
  return (Kolo__V1__JobSpec *)msg;
}

static void a_full_spec_decodes_into_every_field(void **state) {
  (void)state;
  char err[256];
  kolo_status rc;
  Kolo__V1__JobSpec *spec = parse_spec(
      "{\"name\":\"mnist\",\"id\":\"j1\",\"mode\":\"ASYNC\",\"min_workers\":2,\"max_workers\":4,"
      "\"builtin\":{\"model\":\"mlp\",\"dataset\":\"fashion-mnist\",\"learning_rate\":0.05,"
      "\"epochs\":3,\"batch_size\":64,\"hyper_parameters\":{\"hidden\":\"128\"}},"
      "\"labels\":{\"team\":\"a\",\"env\":\"dev\"},\"average_every\":8,\"checkpoint_dir\":\"/tmp/"
      "c\"}",
      &rc, err, sizeof err);
  assert_int_equal(rc, KOLO_OK);
  assert_string_equal(spec->name, "mnist");
  assert_int_equal(spec->mode, KOLO__V1__MODE__ASYNC);
  assert_int_equal(spec->max_workers, 4);
  assert_int_equal(spec->program_case, KOLO__V1__JOB_SPEC__PROGRAM_BUILTIN);
  assert_string_equal(spec->builtin->dataset, "fashion-mnist");
  assert_true(spec->builtin->learning_rate > 0.049 && spec->builtin->learning_rate < 0.051);
  assert_int_equal(spec->builtin->n_hyper_parameters, 1);
  assert_string_equal(spec->builtin->hyper_parameters[0]->value, "128");
  assert_int_equal(spec->n_labels, 2);
  assert_int_equal(spec->average_every, 8);
  protobuf_c_message_free_unpacked(&spec->base, NULL);
}

static void encoding_then_decoding_gives_back_the_same_message(void **state) {
  (void)state;
  char err[256];
  kolo_status rc;
  Kolo__V1__JobSpec *spec = parse_spec(
      "{\"name\":\"x\",\"min_workers\":1,\"exec\":{\"argv\":[\"/bin/true\",\"-v\"],"
      "\"env\":{\"A\":\"1\"},\"working_dir\":\"/\"}}",
      &rc, err, sizeof err);
  assert_int_equal(rc, KOLO_OK);
  char *text = kolo_codec_dump(&spec->base, 0);
  assert_non_null(text);
  assert_non_null(strstr(text, "\"mode\":\"MODE_UNSPECIFIED\""));
  assert_non_null(strstr(text, "\"argv\":[\"/bin/true\",\"-v\"]"));
  assert_null(strstr(text, "\"builtin\""));
  Kolo__V1__JobSpec *again = parse_spec(text, &rc, err, sizeof err);
  assert_int_equal(rc, KOLO_OK);
  assert_int_equal(kolo__v1__job_spec__get_packed_size(spec),
                   kolo__v1__job_spec__get_packed_size(again));
  assert_string_equal(again->exec->argv[1], "-v");
  assert_string_equal(again->exec->env[0]->key, "A");
  free(text);
  protobuf_c_message_free_unpacked(&spec->base, NULL);
  protobuf_c_message_free_unpacked(&again->base, NULL);
}

static void an_unknown_field_is_named_in_the_error(void **state) {
  (void)state;
  char err[256];
  kolo_status rc;
  Kolo__V1__JobSpec *spec = parse_spec(
      "{\"name\":\"x\",\"builtin\":{\"model\":\"m\",\"colour\":1}}", &rc, err, sizeof err);
  assert_null(spec);
  assert_int_equal(rc, KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "builtin.colour"));
}

static void a_wrong_type_is_named_in_the_error(void **state) {
  (void)state;
  char err[256];
  kolo_status rc;
  assert_null(parse_spec("{\"min_workers\":\"two\"}", &rc, err, sizeof err));
  assert_int_equal(rc, KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "min_workers"));
  assert_null(parse_spec("{\"min_workers\":-1}", &rc, err, sizeof err));
  assert_non_null(strstr(err, "min_workers"));
  assert_null(parse_spec("{\"mode\":\"FAST\"}", &rc, err, sizeof err));
  assert_non_null(strstr(err, "mode"));
  assert_non_null(strstr(err, "ASYNC"));
  assert_null(parse_spec("{\"exec\":{\"argv\":[\"a\",3]}}", &rc, err, sizeof err));
  assert_non_null(strstr(err, "exec.argv[1]"));
  assert_null(parse_spec("{\"labels\":{\"a\":\"b\",\"c\":7}}", &rc, err, sizeof err));
  assert_non_null(strstr(err, "labels.c"));
}

static void both_members_of_the_program_oneof_are_refused(void **state) {
  (void)state;
  char err[256];
  kolo_status rc;
  assert_null(parse_spec("{\"builtin\":{\"model\":\"m\"},\"exec\":{\"argv\":[\"a\"]}}", &rc, err,
                         sizeof err));
  assert_int_equal(rc, KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "oneof"));
}

static void garbage_text_is_a_parse_error(void **state) {
  (void)state;
  char err[256];
  kolo_status rc;
  assert_null(parse_spec("{\"name\": ", &rc, err, sizeof err));
  assert_int_equal(rc, KOLO_ERR_PARSE);
  assert_non_null(strstr(err, "malformed JSON"));
  assert_null(parse_spec("[1,2]", &rc, err, sizeof err));
  assert_int_equal(rc, KOLO_ERR_INVALID_ARG);
}

static void sixty_four_bit_integers_accept_numbers_and_strings(void **state) {
  (void)state;
  ProtobufCMessage *msg = NULL;
  char err[128];
  const char *text = "{\"step\":\"12345678901\",\"total_steps\":99,\"loss\":1}";
  assert_int_equal(
      kolo_codec_parse(text, strlen(text), &kolo__v1__progress__descriptor, &msg, err, sizeof err),
      KOLO_OK);
  Kolo__V1__Progress *p = (Kolo__V1__Progress *)msg;
  assert_true(p->step == 12345678901ULL);
  assert_true(p->total_steps == 99);
  assert_true(p->loss == 1.0);
  protobuf_c_message_free_unpacked(msg, NULL);
}

static Kolo__V1__Progress *parse_progress(const char *text, kolo_status *rc) {
  ProtobufCMessage *msg = NULL;
  char err[128];
  *rc =
      kolo_codec_parse(text, strlen(text), &kolo__v1__progress__descriptor, &msg, err, sizeof err);
  return (Kolo__V1__Progress *)msg;
}

/* Every uint64 round-trips exactly: values above INT64_MAX (jansson's integers are int64)
 * go out as decimal strings and come back as the same number. */
static void every_uint64_round_trips_exactly_through_json(void **state) {
  (void)state;
  const uint64_t values[] = {
      0, 1, (uint64_t)INT64_MAX, (uint64_t)INT64_MAX + 1, UINT64_MAX - 1, UINT64_MAX};
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
    Kolo__V1__Progress p = KOLO__V1__PROGRESS__INIT;
    p.step = values[i];
    p.total_steps = values[i];
    char *text = kolo_codec_dump(&p.base, 0);
    assert_non_null(text);
    kolo_status rc;
    Kolo__V1__Progress *back = parse_progress(text, &rc);
    assert_int_equal(rc, KOLO_OK);
    assert_true(back->step == values[i]);
    assert_true(back->total_steps == values[i]);
    protobuf_c_message_free_unpacked(&back->base, NULL);
    free(text);
  }
  Kolo__V1__Progress big = KOLO__V1__PROGRESS__INIT;
  big.step = UINT64_MAX;
  char *text = kolo_codec_dump(&big.base, 0);
  assert_non_null(strstr(text, "\"step\":\"18446744073709551615\""));
  free(text);
}

static void integers_in_strings_are_strict_decimal_within_range(void **state) {
  (void)state;
  const char *refused[] = {
      "{\"step\":\" 12\"}",  "{\"step\":\"+12\"}",
      "{\"step\":\"0x10\"}", "{\"step\":\"1e3\"}",
      "{\"step\":\"-1\"}",   "{\"step\":\"\"}",
      "{\"step\":\"12 \"}",  "{\"step\":\"18446744073709551616\"}",
      "{\"step\":-1}",       "{\"step\":1.5}",
      "{\"step\":1e300}",
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    kolo_status rc;
    assert_null(parse_progress(refused[i], &rc));
    assert_int_equal(rc, KOLO_ERR_INVALID_ARG);
  }
  kolo_status rc;
  Kolo__V1__Progress *p =
      parse_progress("{\"step\":\"18446744073709551615\",\"total_steps\":4e15}", &rc);
  assert_int_equal(rc, KOLO_OK);
  assert_true(p->step == UINT64_MAX);
  assert_true(p->total_steps == 4000000000000000ULL);
  protobuf_c_message_free_unpacked(&p->base, NULL);
  /* int64 takes its whole range from strings, and no more */
  ProtobufCMessage *msg = NULL;
  char err[128];
  const char *low = "{\"created_unix_ms\":\"-9223372036854775808\"}";
  assert_int_equal(
      kolo_codec_parse(low, strlen(low), &kolo__v1__job_status__descriptor, &msg, err, sizeof err),
      KOLO_OK);
  assert_true(((Kolo__V1__JobStatus *)msg)->created_unix_ms == INT64_MIN);
  protobuf_c_message_free_unpacked(msg, NULL);
  const char *past = "{\"created_unix_ms\":\"9223372036854775808\"}";
  assert_int_equal(kolo_codec_parse(past, strlen(past), &kolo__v1__job_status__descriptor, &msg,
                                    err, sizeof err),
                   KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "created_unix_ms"));
}

/* A map value jansson cannot hold (not UTF-8) fails the encoding; it is never dropped. */
static void a_map_entry_that_is_not_utf8_fails_the_encoding_instead_of_vanishing(void **state) {
  (void)state;
  Kolo__V1__JobSpec spec = KOLO__V1__JOB_SPEC__INIT;
  Kolo__V1__JobSpec__LabelsEntry entry = KOLO__V1__JOB_SPEC__LABELS_ENTRY__INIT;
  Kolo__V1__JobSpec__LabelsEntry *entries[] = {&entry};
  entry.key = "team";
  entry.value = "\xff\xfe";
  spec.labels = entries;
  spec.n_labels = 1;
  spec.name = "x";
  assert_null(kolo_codec_to_json(&spec.base));
  entry.value = "ok";
  entry.key = "\xc0\x80";
  assert_null(kolo_codec_to_json(&spec.base));
  entry.key = "team";
  json_t *json = kolo_codec_to_json(&spec.base);
  assert_non_null(json);
  assert_string_equal(json_string_value(json_object_get(json_object_get(json, "labels"), "team")),
                      "ok");
  json_decref(json);
}

/* ---- reading records (kolo_codec_read) ---- */

static Kolo__V1__RingRecord *read_ring(const char *text, unsigned flags, kolo_status *rc,
                                       kolo_codec_fault *fault) {
  ProtobufCMessage *msg = NULL;
  *rc = kolo_codec_read(text, strlen(text), &kolo__v1__ring_record__descriptor, flags, &msg, fault);
  return (Kolo__V1__RingRecord *)msg;
}

static void a_record_reader_skips_fields_a_newer_writer_added_at_every_level(void **state) {
  (void)state;
  const char *text =
      "{\"job\":\"j\",\"future\":{\"x\":[1]},\"members\":[{\"worker_id\":\"w\","
      "\"gpu\":\"H200\"}]}";
  kolo_status rc;
  kolo_codec_fault fault;
  Kolo__V1__RingRecord *r = read_ring(text, KOLO_CODEC_IGNORE_UNKNOWN, &rc, &fault);
  assert_int_equal(rc, KOLO_OK);
  assert_string_equal(r->job, "j");
  assert_int_equal(r->n_members, 1);
  assert_string_equal(r->members[0]->worker_id, "w");
  protobuf_c_message_free_unpacked(&r->base, NULL);
  /* without the flag the same text is refused, the field named */
  r = read_ring(text, 0, &rc, &fault);
  assert_null(r);
  assert_int_equal(rc, KOLO_ERR_INVALID_ARG);
  assert_int_equal(fault.kind, KOLO_CODEC_FAULT_SHAPE);
  assert_string_equal(fault.path, "future");
  assert_null(fault.field);
}

static void integers_only_refuses_strings_and_reals_and_names_the_field(void **state) {
  (void)state;
  const char *bad[] = {"\"7\"", "7.0", "true"};
  for (size_t i = 0; i < 3; i++) {
    char text[200];
    snprintf(text, sizeof text, "{\"members\":[{},{\"lease\":%s}]}", bad[i]);
    kolo_status rc;
    kolo_codec_fault fault;
    assert_null(read_ring(text, KOLO_CODEC_INTEGERS_ONLY, &rc, &fault));
    assert_int_equal(rc, KOLO_ERR_INVALID_ARG);
    assert_int_equal(fault.kind, KOLO_CODEC_FAULT_TYPE);
    assert_string_equal(fault.path, "members[1].lease");
    assert_non_null(fault.field);
    assert_string_equal(fault.field->name, "lease");
    assert_non_null(strstr(fault.message, "members[1].lease: expected a 64-bit integer"));
  }
  /* a request reader (no flag) still takes the decimal string */
  kolo_status rc;
  Kolo__V1__RingRecord *r = read_ring("{\"epoch\":\"7\"}", 0, &rc, NULL);
  assert_int_equal(rc, KOLO_OK);
  assert_int_equal(r->epoch, 7);
  protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void a_read_record_shows_which_fields_were_there(void **state) {
  (void)state;
  kolo_status rc;
  Kolo__V1__RingRecord *r =
      read_ring("{\"epoch\":0,\"members\":[],\"planned\":false}", 0, &rc, NULL);
  assert_int_equal(rc, KOLO_OK);
  assert_true(r->has_epoch); /* present, even as 0 */
  assert_false(r->has_timeout_ms);
  assert_true(r->has_planned);
  assert_null(r->job);         /* an absent string */
  assert_non_null(r->members); /* [] given */
  assert_int_equal(r->n_members, 0);
  assert_null(r->lost); /* not given */
  protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void a_record_that_is_not_json_or_not_an_object_is_a_fault_of_its_own_kind(void **state) {
  (void)state;
  kolo_status rc;
  kolo_codec_fault fault;
  assert_null(read_ring("{\"job\":\"a\",\"job\":\"b\"}", 0, &rc, &fault));
  assert_int_equal(rc, KOLO_ERR_PARSE);
  assert_int_equal(fault.kind, KOLO_CODEC_FAULT_SYNTAX);
  assert_non_null(strstr(fault.message, "malformed JSON"));
  assert_null(read_ring("[1]", 0, &rc, &fault));
  assert_int_equal(rc, KOLO_ERR_INVALID_ARG);
  assert_int_equal(fault.kind, KOLO_CODEC_FAULT_TYPE);
  assert_string_equal(fault.path, "");
  assert_null(fault.field);
  assert_null(read_ring("{\"members\":[3]}", 0, &rc, &fault));
  assert_string_equal(fault.path, "members[0]");
  assert_string_equal(fault.field->name, "members");
}

/* ---- open-ended values (kolo.v1.Struct / Value / ListValue) ---- */

/* Reads text as an AgentReport (its progress is a Struct) with the record flags. */
static kolo_status read_report(const char *text, ProtobufCMessage **out, kolo_codec_fault *fault) {
  return kolo_codec_read(text, strlen(text), &kolo__v1__agent_report__descriptor,
                         KOLO_CODEC_IGNORE_UNKNOWN | KOLO_CODEC_INTEGERS_ONLY, out, fault);
}

/* A Struct maps to a plain JSON object like google.protobuf.Struct: every JSON kind inside
 * reads and writes back to the same bytes (integers without a fraction, key order kept). */
static void a_struct_is_plain_json_and_keeps_its_bytes(void **state) {
  (void)state;
  const char *text =
      "{\"progress\":{\"step\":40,\"loss\":0.25,\"event\":\"synced\",\"ok\":true,\"none\":null,"
      "\"list\":[1,-2,\"x\",false,null,[],{}],\"nested\":{\"a\":{\"b\":[{\"c\":1.5}]}},"
      "\"big\":9007199254740992,\"neg\":-17,\"empty\":{}}}";
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  assert_int_equal(read_report(text, &msg, &fault), KOLO_OK);
  const Kolo__V1__AgentReport *r = (const Kolo__V1__AgentReport *)msg;
  assert_non_null(r->progress);
  assert_int_equal(r->progress->n_fields, 10);
  double d = 0;
  assert_true(kolo_codec_struct_number(r->progress, "step", &d) && d == 40);
  assert_false(kolo_codec_struct_number(r->progress, "event", &d)); /* a string */
  assert_false(kolo_codec_struct_number(r->progress, "missing", &d));
  const Kolo__V1__Value *list = kolo_codec_struct_get(r->progress, "list");
  assert_int_equal(list->kind_case, KOLO__V1__VALUE__KIND_LIST_VALUE);
  assert_int_equal(list->list_value->n_values, 7);
  assert_int_equal(list->list_value->values[4]->kind_case, KOLO__V1__VALUE__KIND_NULL_VALUE);
  assert_int_equal(kolo_codec_struct_get(r->progress, "none")->kind_case,
                   KOLO__V1__VALUE__KIND_NULL_VALUE);
  char *back = kolo_codec_dump(msg, 0);
  assert_string_equal(back, text);
  free(back);
  /* the binary form carries it too (a copy is a pack + unpack) */
  ProtobufCMessage *copy = kolo_codec_copy(msg);
  back = kolo_codec_dump(copy, 0);
  assert_string_equal(back, text);
  free(back);
  protobuf_c_message_free_unpacked(copy, NULL);
  protobuf_c_message_free_unpacked(msg, NULL);
  /* numbers are doubles, as in protobuf: an integral real is written as an integer */
  assert_int_equal(read_report("{\"progress\":{\"x\":1.0,\"y\":-0.5}}", &msg, &fault), KOLO_OK);
  back = kolo_codec_dump(msg, 0);
  assert_string_equal(back, "{\"progress\":{\"x\":1,\"y\":-0.5}}");
  free(back);
  protobuf_c_message_free_unpacked(msg, NULL);
  /* the messages on their own: a Struct is an object, a ListValue an array, a Value anything */
  assert_int_equal(
      kolo_codec_read("[1,{\"a\":[]}]", 12, &kolo__v1__list_value__descriptor, 0, &msg, &fault),
      KOLO_OK);
  back = kolo_codec_dump(msg, 0);
  assert_string_equal(back, "[1,{\"a\":[]}]");
  free(back);
  protobuf_c_message_free_unpacked(msg, NULL);
  assert_int_equal(kolo_codec_read("[1]", 3, &kolo__v1__struct__descriptor, 0, &msg, &fault),
                   KOLO_ERR_INVALID_ARG);
  json_t *string = json_string("s");
  assert_int_equal(kolo_codec_decode(string, &kolo__v1__value__descriptor, 0, &msg, &fault),
                   KOLO_OK);
  json_decref(string);
  back = kolo_codec_dump(msg, 0);
  assert_string_equal(back, "\"s\"");
  free(back);
  protobuf_c_message_free_unpacked(msg, NULL);
}

static void a_struct_field_that_is_not_an_object_is_named(void **state) {
  (void)state;
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  assert_int_equal(read_report("{\"progress\":[1,2]}", &msg, &fault), KOLO_ERR_INVALID_ARG);
  assert_null(msg);
  assert_int_equal(fault.kind, KOLO_CODEC_FAULT_TYPE);
  assert_string_equal(fault.path, "progress");
  assert_non_null(strstr(fault.message, "progress: expected a JSON object"));
}

/* Depth, value count and string bytes of one open-ended field are bounded; the fault names
 * the field (and, for depth, where it went too deep) and nothing is kept. */
static void an_open_ended_value_past_its_limits_is_refused_naming_the_field(void **state) {
  (void)state;
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  /* depth: 32 levels read, 33 do not */
  for (int levels = KOLO_CODEC_OPEN_MAX_DEPTH; levels <= KOLO_CODEC_OPEN_MAX_DEPTH + 1; levels++) {
    char text[1024] = "{\"progress\":";
    for (int i = 0; i < levels; i++) strcat(text, "{\"d\":");
    strcat(text, "1");
    for (int i = 0; i < levels; i++) strcat(text, "}");
    strcat(text, "}");
    kolo_status rc = read_report(text, &msg, &fault);
    if (levels == KOLO_CODEC_OPEN_MAX_DEPTH) {
      assert_int_equal(rc, KOLO_OK);
      protobuf_c_message_free_unpacked(msg, NULL);
      continue;
    }
    assert_int_equal(rc, KOLO_ERR_INVALID_ARG);
    assert_null(msg);
    assert_int_equal(fault.kind, KOLO_CODEC_FAULT_LIMIT);
    assert_non_null(strstr(fault.message, "progress.d.d"));
    assert_non_null(strstr(fault.message, "nested deeper than 32 levels"));
  }
  /* arrays nest too */
  char deep[256] = "{\"progress\":{\"l\":";
  for (int i = 0; i < 40; i++) strcat(deep, "[");
  for (int i = 0; i < 40; i++) strcat(deep, "]");
  strcat(deep, "}}");
  assert_int_equal(read_report(deep, &msg, &fault), KOLO_ERR_INVALID_ARG);
  assert_int_equal(fault.kind, KOLO_CODEC_FAULT_LIMIT);
  assert_non_null(strstr(fault.message, "progress.l[0]"));
  /* values: one list of more than the limit */
  size_t n = KOLO_CODEC_OPEN_MAX_VALUES + 1;
  char *many = malloc(32 + 2 * n);
  char *end = many + sprintf(many, "{\"progress\":{\"l\":[");
  for (size_t i = 0; i < n; i++) end += sprintf(end, i ? ",0" : "0");
  strcpy(end, "]}}");
  assert_int_equal(read_report(many, &msg, &fault), KOLO_ERR_INVALID_ARG);
  assert_int_equal(fault.kind, KOLO_CODEC_FAULT_LIMIT);
  assert_string_equal(fault.path, "progress");
  assert_non_null(strstr(fault.message, "progress: more than 10000 values"));
  free(many);
  /* bytes: one string past the limit */
  size_t big = KOLO_CODEC_OPEN_MAX_BYTES + 1;
  char *huge = malloc(big + 64);
  size_t head = (size_t)sprintf(huge, "{\"progress\":{\"s\":\"");
  memset(huge + head, 'x', big);
  strcpy(huge + head + big, "\"}}");
  assert_int_equal(read_report(huge, &msg, &fault), KOLO_ERR_INVALID_ARG);
  assert_int_equal(fault.kind, KOLO_CODEC_FAULT_LIMIT);
  assert_non_null(strstr(fault.message, "progress: more than 262144 bytes of keys and strings"));
  free(huge);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_full_spec_decodes_into_every_field),
      cmocka_unit_test(encoding_then_decoding_gives_back_the_same_message),
      cmocka_unit_test(an_unknown_field_is_named_in_the_error),
      cmocka_unit_test(a_wrong_type_is_named_in_the_error),
      cmocka_unit_test(both_members_of_the_program_oneof_are_refused),
      cmocka_unit_test(garbage_text_is_a_parse_error),
      cmocka_unit_test(sixty_four_bit_integers_accept_numbers_and_strings),
      cmocka_unit_test(every_uint64_round_trips_exactly_through_json),
      cmocka_unit_test(integers_in_strings_are_strict_decimal_within_range),
      cmocka_unit_test(a_map_entry_that_is_not_utf8_fails_the_encoding_instead_of_vanishing),
      cmocka_unit_test(a_record_reader_skips_fields_a_newer_writer_added_at_every_level),
      cmocka_unit_test(integers_only_refuses_strings_and_reals_and_names_the_field),
      cmocka_unit_test(a_read_record_shows_which_fields_were_there),
      cmocka_unit_test(a_record_that_is_not_json_or_not_an_object_is_a_fault_of_its_own_kind),
      cmocka_unit_test(a_struct_is_plain_json_and_keeps_its_bytes),
      cmocka_unit_test(a_struct_field_that_is_not_an_object_is_named),
      cmocka_unit_test(an_open_ended_value_past_its_limits_is_refused_naming_the_field),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
