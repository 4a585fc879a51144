/* The agent's mode acknowledgement check (worker/agent/mode_check.c): a non-SYNC job's
 * process fails when it reports progress or finishes before MODE, or acknowledges another
 * mode; a SYNC job's process needs no MODE; a crash is not judged; the reason names the
 * mode and what to do. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "worker/agent/mode_check.h"

static kolo_agent_msg hello(int version) {
  return (kolo_agent_msg){.verb = KOLO_AGENT_HELLO, .hello = {42, version}};
}
static kolo_agent_msg mode(kolo_mode m) {
  return (kolo_agent_msg){.verb = KOLO_AGENT_MODE, .mode = {(int)m}};
}
static const kolo_agent_msg report = {.verb = KOLO_AGENT_REPORT, .text = "{\"step\":1}"};
static const kolo_agent_msg formed = {.verb = KOLO_AGENT_FORMED, .formed = {1, 0, 2}};

static void an_acknowledging_process_passes(void **state) {
  (void)state;
  kolo_agent_mode_check c;
  kolo_agent_mode_check_start(&c, KOLO_MODE_ASYNC);
  kolo_agent_msg m = hello(3);
  assert_int_equal(kolo_agent_mode_check_msg(&c, &m, 0), 0);
  assert_int_equal(kolo_agent_mode_check_msg(&c, &formed, 0), 0);
  assert_int_equal(kolo_agent_mode_check_msg(&c, &report, 0), 0); /* no step: not progress */
  m = mode(KOLO_MODE_ASYNC);
  assert_int_equal(kolo_agent_mode_check_msg(&c, &m, 0), 0);
  assert_int_equal(kolo_agent_mode_check_msg(&c, &report, 1), 0);
  assert_int_equal(kolo_agent_mode_check_exit(&c, 0), 0);
  assert_string_equal(c.failure, "");
}

static void progress_before_mode_fails_with_the_reason(void **state) {
  (void)state;
  kolo_agent_mode_check c;
  kolo_agent_mode_check_start(&c, KOLO_MODE_ASYNC);
  kolo_agent_msg m = hello(3);
  kolo_agent_mode_check_msg(&c, &m, 0);
  assert_int_equal(kolo_agent_mode_check_msg(&c, &report, 1), 1);
  assert_non_null(strstr(c.failure,
                         "the program did not acknowledge mode ASYNC (it would have "
                         "run SYNC)"));
  assert_non_null(strstr(c.failure, "kolo_elastic_acknowledge_mode()"));
  assert_non_null(strstr(c.failure, "it reported progress"));
  /* only the first failure counts */
  assert_int_equal(kolo_agent_mode_check_exit(&c, 0), 0);
}

static void a_finished_process_that_never_acknowledged_fails_but_a_crash_is_its_own(void **state) {
  (void)state;
  kolo_agent_mode_check c;
  kolo_agent_mode_check_start(&c, KOLO_MODE_DILOCO);
  assert_int_equal(kolo_agent_mode_check_exit(&c, 1), 0);
  assert_string_equal(c.failure, "");
  assert_int_equal(kolo_agent_mode_check_exit(&c, 0), 1);
  assert_non_null(strstr(c.failure, "mode DILOCO"));
  assert_non_null(strstr(c.failure, "it finished"));
}

static void another_mode_fails_even_for_a_sync_job(void **state) {
  (void)state;
  kolo_agent_mode_check c;
  kolo_agent_mode_check_start(&c, KOLO_MODE_SYNC);
  assert_int_equal(kolo_agent_mode_check_msg(&c, &report, 1), 0); /* SYNC needs no MODE */
  kolo_agent_msg m = mode(KOLO_MODE_LOCAL_SGD);
  assert_int_equal(kolo_agent_mode_check_msg(&c, &m, 0), 1);
  assert_string_equal(c.failure,
                      "the program runs mode LOCAL_SGD, but the job asked for mode SYNC");
  kolo_agent_mode_check_start(&c, KOLO_MODE_DILOCO);
  m = mode(KOLO_MODE_LOCAL_SGD);
  assert_int_equal(kolo_agent_mode_check_msg(&c, &m, 0), 1);
}

static void an_old_libkolo_is_told_apart(void **state) {
  (void)state;
  kolo_agent_mode_check c;
  kolo_agent_mode_check_start(&c, KOLO_MODE_LOCAL_SGD);
  kolo_agent_msg m = hello(2);
  kolo_agent_mode_check_msg(&c, &m, 0);
  assert_int_equal(kolo_agent_mode_check_msg(&c, &report, 1), 1);
  assert_non_null(strstr(c.failure, "agent protocol version 2"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(an_acknowledging_process_passes),
      cmocka_unit_test(progress_before_mode_fails_with_the_reason),
      cmocka_unit_test(a_finished_process_that_never_acknowledged_fails_but_a_crash_is_its_own),
      cmocka_unit_test(another_mode_fails_even_for_a_sync_job),
      cmocka_unit_test(an_old_libkolo_is_told_apart),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
