/* Unit tests for the records the scheduler and the agent exchange per worker: the
 * assignment (coordination/assignment.c) and the agent's report (coordination/report.c)
 * keep the bytes they always had, read back, and every rule is refused naming the field;
 * the report's progress merges REPORT lines within the codec's limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec/codec.h"
#include "coordination/assignment.h"
#include "coordination/report.h"
#include "coordination/ringspec.h"

/* The assignment (coordination/assignment.h): the scheduler's bytes, read back; every
 * rule refused naming the field. */
static void an_assignment_round_trips_and_has_the_documented_shape(void **state) {
  (void)state;
  const char *old =
      "{\"job\":\"j1\",\"epoch\":3,\"ring\":\"/kolo/v1/jobs/j1/ring/"
      "00000000000000000003\",\"rank\":1}";
  Kolo__V1__Assignment a = KOLO__V1__ASSIGNMENT__INIT;
  a.job = "j1";
  a.ring = "/kolo/v1/jobs/j1/ring/00000000000000000003";
  a.has_epoch = a.has_rank = 1;
  a.epoch = 3;
  a.rank = 1;
  char *json = NULL, err[256] = "";
  assert_int_equal(kolo_assignment_write(&a, &json, err, sizeof err), KOLO_OK);
  assert_string_equal(json, old);
  Kolo__V1__Assignment *back = NULL;
  assert_int_equal(kolo_assignment_read(json, strlen(json), &back, err, sizeof err), KOLO_OK);
  assert_string_equal(back->job, "j1");
  assert_int_equal(back->epoch, 3);
  assert_string_equal(back->ring, a.ring);
  assert_int_equal(back->rank, 1);
  protobuf_c_message_free_unpacked(&back->base, NULL);
  free(json);
  const char *newer =
      "{\"job\":\"j1\",\"gpu\":0,\"epoch\":3,\"ring\":\"/kolo/v1/jobs/j1/ring/"
      "00000000000000000003\",\"rank\":1}";
  assert_int_equal(kolo_assignment_read(newer, strlen(newer), &back, err, sizeof err), KOLO_OK);
  protobuf_c_message_free_unpacked(&back->base, NULL);
  a.ring = "/kolo/v1/jobs/j2/ring/00000000000000000003";
  assert_int_equal(kolo_assignment_write(&a, &json, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(
      strstr(err, "'ring' '/kolo/v1/jobs/j2/ring/00000000000000000003' is not the ring"));
  assert_null(json);
  /* the rules hold over a message built in memory as over one read */
  a.ring = "/kolo/v1/jobs/j1/ring/00000000000000000003";
  a.rank = KOLO_RINGSPEC_MAX_SIZE;
  assert_int_equal(kolo_assignment_validate(&a, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "'rank' 65536 is not in 0..65535"));
  a.rank = 0;
  a.has_epoch = 0;
  assert_int_equal(kolo_assignment_validate(&a, err, sizeof err), KOLO_ERR_PARSE);
  assert_non_null(strstr(err, "has no 'epoch'"));
  assert_int_equal(kolo_assignment_validate(&a, NULL, 0), KOLO_ERR_PARSE);
}

static void a_bad_assignment_is_refused_naming_the_field(void **state) {
  (void)state;
  const char *ring = "\"ring\":\"/kolo/v1/jobs/j/ring/00000000000000000001\"";
  struct {
    kolo_status rc;
    const char *needle;
    char json[300];
  } cases[8];
  int n = 0;
#define CASE(st, nd, ...)                                       \
  do {                                                          \
    cases[n].rc = st;                                           \
    cases[n].needle = nd;                                       \
    snprintf(cases[n].json, sizeof cases[n].json, __VA_ARGS__); \
    n++;                                                        \
  } while (0)
  CASE(KOLO_ERR_PARSE, "has no 'ring'", "{\"job\":\"j\",\"epoch\":1,\"rank\":0}");
  CASE(KOLO_ERR_PARSE, "has no 'rank'", "{\"job\":\"j\",\"epoch\":1,%s}", ring);
  CASE(KOLO_ERR_PARSE, "'epoch' is not an integer", "{\"job\":\"j\",\"epoch\":\"1\",%s,\"rank\":0}",
       ring);
  CASE(KOLO_ERR_INVALID_ARG, "'ring' '/kolo/v1/jobs/j/ring/00000000000000000001' is not the ring",
       "{\"job\":\"j\",\"epoch\":2,%s,\"rank\":0}", ring);
  CASE(KOLO_ERR_INVALID_ARG, "'rank' -1", "{\"job\":\"j\",\"epoch\":1,%s,\"rank\":-1}", ring);
  CASE(KOLO_ERR_INVALID_ARG, "job id '../j'", "{\"job\":\"../j\",\"epoch\":1,%s,\"rank\":0}", ring);
  CASE(KOLO_ERR_PARSE, "malformed JSON", "{\"job\":\"j\",");
  CASE(KOLO_ERR_PARSE, "not an object", "[]");
#undef CASE
  for (int i = 0; i < n; i++) {
    Kolo__V1__Assignment *out = (Kolo__V1__Assignment *)&out; /* must come back NULL */
    char err[256] = "";
    kolo_status rc =
        kolo_assignment_read(cases[i].json, strlen(cases[i].json), &out, err, sizeof err);
    if (rc != cases[i].rc || strstr(err, cases[i].needle) == NULL)
      fail_msg("case %d: got %s '%s' for %s", i, kolo_status_name(rc), err, cases[i].json);
    assert_null(out);
  }
}

/* The agent's report (coordination/report.h): as the agent wrote it before (json_pack, the
 * process's progress in the middle), read back with the progress passed through as is; a
 * partial one reads with defaults; a wrong type is refused naming the field. */
static void an_agent_report_carries_the_process_s_progress_as_is(void **state) {
  (void)state;
  const char *old =
      "{\"worker\":\"w1\",\"epoch\":3,\"formed_epoch\":3,\"failed_epoch\":0,"
      "\"failed_rank\":-1,\"failed_status\":\"\",\"exited\":true,\"exit_code\":1,"
      "\"exit_epoch\":3,\"time_unix_ms\":1700000000000,\"pid\":4242,"
      "\"progress\":{\"step\":40,\"event\":\"synced\",\"synced_step\":30},"
      "\"stderr_tail\":\"boom\"}";
  Kolo__V1__AgentReport *r = NULL, *back = NULL;
  char err[256] = "";
  assert_int_equal(kolo_report_read(old, strlen(old), &r, err, sizeof err), KOLO_OK);
  assert_string_equal(r->worker, "w1");
  assert_int_equal(r->failed_rank, -1);
  assert_true(r->exited);
  assert_int_equal(r->exit_code, 1);
  assert_int_equal(r->pid, 4242);
  assert_string_equal(r->stderr_tail, "boom");
  const Kolo__V1__Value *event = kolo_codec_struct_get(r->progress, "event");
  assert_non_null(event);
  assert_string_equal(event->string_value, "synced");
  char *json = NULL;
  assert_int_equal(kolo_report_write(r, &json, err, sizeof err), KOLO_OK);
  assert_int_equal(kolo_report_read(json, strlen(json), &back, err, sizeof err), KOLO_OK);
  double synced_step = 0;
  assert_true(kolo_codec_struct_number(back->progress, "synced_step", &synced_step));
  assert_true(synced_step == 30);
  assert_int_equal(back->time_unix_ms, 1700000000000);
  assert_string_equal(back->stderr_tail, "boom");
  protobuf_c_message_free_unpacked(&back->base, NULL);
  free(json);
  r->exited = 0;
  free(r->stderr_tail);
  r->stderr_tail = NULL;
  assert_int_equal(kolo_report_write(r, &json, err, sizeof err), KOLO_OK);
  assert_null(strstr(json, "stderr_tail")); /* only an exited process's */
  free(json);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  const char *partial = "{\"time_unix_ms\":900,\"formed_epoch\":2,\"gpu_util\":0.5}";
  assert_int_equal(kolo_report_read(partial, strlen(partial), &r, err, sizeof err), KOLO_OK);
  assert_int_equal(r->formed_epoch, 2);
  assert_int_equal(r->failed_rank, -1);
  assert_string_equal(r->failed_status, "");
  assert_null(r->progress);
  /* a report without a worker reads, but is not written */
  assert_int_equal(kolo_report_write(r, &json, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "worker '(null)' is not valid"));
  assert_null(json);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  const char *bad[][2] = {{"{\"exit_code\":\"1\"}", "exit_code"},
                          {"{\"progress\":[1]}", "'progress' is not an object"},
                          {"{\"exited\":1}", "exited"},
                          {"{\"worker\":\"../w\"}", "worker '../w' is not valid"},
                          {"[]", "not an object"}};
  for (size_t i = 0; i < 5; i++) {
    r = (Kolo__V1__AgentReport *)&r; /* must come back NULL */
    err[0] = '\0';
    assert_int_not_equal(kolo_report_read(bad[i][0], strlen(bad[i][0]), &r, err, sizeof err),
                         KOLO_OK);
    if (strstr(err, bad[i][1]) == NULL) fail_msg("case %zu: '%s' for %s", i, err, bad[i][0]);
    assert_null(r);
  }
  /* the rules hold over a report built in memory as over one read */
  Kolo__V1__AgentReport built = KOLO__V1__AGENT_REPORT__INIT;
  assert_int_equal(kolo_report_validate(&built, err, sizeof err), KOLO_OK);
  built.worker = "a/b";
  assert_int_equal(kolo_report_validate(&built, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "worker 'a/b' is not valid"));
  assert_int_equal(kolo_report_write(&built, &json, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_null(json);
}

/* The report's progress is a kolo.v1.Struct now, and the record's bytes are what the
 * previous version wrote (the progress object appended after the message's fields). */
static void a_report_with_progress_is_written_as_before(void **state) {
  (void)state;
  const char *old =
      "{\"worker\":\"w1\",\"epoch\":3,\"formed_epoch\":3,\"failed_epoch\":0,"
      "\"failed_rank\":-1,\"failed_status\":\"\",\"exited\":true,\"exit_code\":1,"
      "\"exit_epoch\":3,\"time_unix_ms\":1700000000000,\"pid\":4242,"
      "\"progress\":{\"step\":40,\"loss\":0.5,\"event\":\"synced\",\"list\":[1,null,{}]},"
      "\"stderr_tail\":\"boom\"}";
  const char *now =
      "{\"worker\":\"w1\",\"epoch\":3,\"formed_epoch\":3,\"failed_epoch\":0,"
      "\"failed_rank\":-1,\"failed_status\":\"\",\"exited\":true,\"exit_code\":1,"
      "\"exit_epoch\":3,\"time_unix_ms\":1700000000000,\"pid\":4242,\"stderr_tail\":\"boom\","
      "\"progress\":{\"step\":40,\"loss\":0.5,\"event\":\"synced\",\"list\":[1,null,{}]}}";
  Kolo__V1__AgentReport *r = NULL;
  char err[256] = "";
  assert_int_equal(kolo_report_read(old, strlen(old), &r, err, sizeof err), KOLO_OK);
  char *json = NULL;
  assert_int_equal(kolo_report_write(r, &json, err, sizeof err), KOLO_OK);
  assert_string_equal(json, now);
  free(json);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  assert_int_equal(kolo_report_read(now, strlen(now), &r, err, sizeof err), KOLO_OK);
  assert_int_equal(r->progress->n_fields, 4);
  assert_int_equal(r->hello, 1); /* absent: an older agent, read as said */
  assert_null(r->permanent);
  /* #29: a process that never said HELLO, and the agent's permanent reason, round-trip */
  r->hello = 0;
  r->permanent = strdup("its program could not be started: cannot execute x: No such file");
  assert_int_equal(kolo_report_write(r, &json, err, sizeof err), KOLO_OK);
  assert_non_null(strstr(json, "\"hello\":false,\"permanent\":\"its program could not be"));
  protobuf_c_message_free_unpacked(&r->base, NULL);
  assert_int_equal(kolo_report_read(json, strlen(json), &r, err, sizeof err), KOLO_OK);
  assert_int_equal(r->hello, 0);
  assert_string_equal(r->permanent,
                      "its program could not be started: cannot execute x: No such file");
  free(json);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  /* a message built in memory is written with the record's presence, whatever its has_
   * flags say: every counter, failed_status "", no hello when said, no empty permanent */
  Kolo__V1__AgentReport built = KOLO__V1__AGENT_REPORT__INIT;
  built.worker = "w2";
  built.hello = 1;
  built.permanent = "";
  built.failed_rank = -1;
  assert_int_equal(kolo_report_write(&built, &json, err, sizeof err), KOLO_OK);
  assert_string_equal(json,
                      "{\"worker\":\"w2\",\"epoch\":0,\"formed_epoch\":0,\"failed_epoch\":0,"
                      "\"failed_rank\":-1,\"failed_status\":\"\",\"exited\":false,\"exit_code\":0,"
                      "\"exit_epoch\":0,\"time_unix_ms\":0,\"pid\":0}");
  free(json);
  /* too deep a progress: the report does not decode, the error names the field */
  char deep[512] = "{\"worker\":\"w1\",\"progress\":";
  for (int i = 0; i < 40; i++) strcat(deep, "{\"x\":");
  strcat(deep, "0");
  for (int i = 0; i < 41; i++) strcat(deep, "}");
  assert_int_equal(kolo_report_read(deep, strlen(deep), &r, err, sizeof err), KOLO_ERR_PARSE);
  assert_non_null(strstr(err, "progress.x.x"));
  assert_non_null(strstr(err, "nested deeper than"));
  assert_null(r);
}

/* The agent merges each REPORT line into the progress (newest value wins, earlier keys
 * stay); a line that is not an object, or a merge past the limits, changes nothing. */
static void report_lines_merge_into_the_progress_within_its_limits(void **state) {
  (void)state;
  Kolo__V1__Struct *p = NULL;
  char err[256] = "";
  const char *first = "{\"step\":10,\"loss\":2.5}", *second = "{\"step\":20,\"event\":\"done\"}";
  assert_int_equal(kolo_report_progress_merge(&p, first, strlen(first), err, sizeof err), KOLO_OK);
  assert_int_equal(kolo_report_progress_merge(&p, second, strlen(second), err, sizeof err),
                   KOLO_OK);
  double d = 0;
  assert_true(kolo_codec_struct_number(p, "step", &d) && d == 20);
  assert_true(kolo_codec_struct_number(p, "loss", &d) && d == 2.5);
  assert_string_equal(kolo_codec_struct_get(p, "event")->string_value, "done");
  const char *not_object = "[1]", *garbage = "{\"step\":";
  assert_int_equal(kolo_report_progress_merge(&p, not_object, strlen(not_object), err, sizeof err),
                   KOLO_ERR_PARSE);
  assert_int_equal(kolo_report_progress_merge(&p, garbage, strlen(garbage), err, sizeof err),
                   KOLO_ERR_PARSE);
  assert_non_null(strstr(err, "progress"));
  /* each line is small, but together they pass the value limit: the last one is refused */
  kolo_status rc = KOLO_OK;
  int lines = 0;
  for (; lines < 20 && rc == KOLO_OK; lines++) {
    char line[16 * 1024];
    char *end = line + sprintf(line, "{\"l%d\":[", lines);
    for (int i = 0; i < 1000; i++) end += sprintf(end, i ? ",%d" : "%d", i);
    strcpy(end, "]}");
    rc = kolo_report_progress_merge(&p, line, strlen(line), err, sizeof err);
  }
  assert_int_equal(rc, KOLO_ERR_INVALID_ARG);
  assert_int_equal(lines, 10); /* 9 lists of 1001 values + 3 fit, the 10th does not */
  assert_non_null(strstr(err, "progress: more than 10000 values"));
  assert_int_equal(p->n_fields, 3 + 9); /* what was merged before stays */
  protobuf_c_message_free_unpacked(&p->base, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(an_assignment_round_trips_and_has_the_documented_shape),
      cmocka_unit_test(a_bad_assignment_is_refused_naming_the_field),
      cmocka_unit_test(an_agent_report_carries_the_process_s_progress_as_is),
      cmocka_unit_test(a_report_with_progress_is_written_as_before),
      cmocka_unit_test(report_lines_merge_into_the_progress_within_its_limits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
