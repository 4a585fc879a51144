/* Unit tests for drain marks (coordination/drain.c): a mark drains exactly the registration
 * whose lease it names; legacy, foreign and malformed marks drain nothing; and the drain
 * key helper validates the worker id. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coordination/drain.h"
#include "coordination/keys.h"

static int applies(const char *value, int64_t lease) {
  return kolo_drain_mark_applies(value, strlen(value), lease);
}

static void a_mark_drains_the_registration_whose_lease_it_names(void **state) {
  (void)state;
  int64_t lease = 0x694d8c7a1b2c3d4eLL;
  char *mark = kolo_drain_mark_json(lease, 1700000000123LL);
  assert_non_null(mark);
  assert_true(kolo_drain_mark_applies(mark, strlen(mark), lease));
  assert_non_null(strstr(mark, "\"time_unix_ms\":1700000000123"));
  free(mark);
}

static void a_mark_does_not_drain_the_next_registration_under_the_same_id(void **state) {
  (void)state;
  char *mark = kolo_drain_mark_json(7001, 1);
  assert_false(kolo_drain_mark_applies(mark, strlen(mark), 7002));
  assert_false(kolo_drain_mark_applies(mark, strlen(mark), 0));
  free(mark);
}

static void a_legacy_mark_without_a_lease_drains_nothing(void **state) {
  (void)state;
  /* what kolo-server wrote before marks belonged to a registration */
  assert_false(applies("{\"draining\":true,\"time_unix_ms\":1700000000000}", 0));
  assert_false(applies("{\"draining\":true,\"time_unix_ms\":1700000000000}", 5));
}

static void malformed_marks_drain_nothing(void **state) {
  (void)state;
  assert_false(applies("", 5));
  assert_false(applies("not json", 5));
  assert_false(applies("[5]", 5));
  assert_false(applies("{\"draining\":false,\"lease\":5}", 5));
  assert_false(applies("{\"draining\":1,\"lease\":5}", 5));
  assert_false(applies("{\"draining\":true,\"lease\":\"5\"}", 5));
  assert_false(applies("{\"draining\":true,\"lease\":5.0}", 5));
  assert_false(applies("{\"draining\":true,\"lease\":5,\"lease\":6}", 6));
  assert_false(kolo_drain_mark_applies(NULL, 0, 5));
  /* a NUL byte inside the value: the whole length is parsed, not a prefix */
  const char with_nul[] = "{\"draining\":true,\"lease\":5}\0junk";
  assert_false(kolo_drain_mark_applies(with_nul, sizeof with_nul - 1, 5));
  assert_true(kolo_drain_mark_applies(with_nul, strlen(with_nul), 5));
}

static void the_drain_key_is_built_from_a_valid_worker_id_only(void **state) {
  (void)state;
  char key[64];
  assert_int_equal(kolo_keys_drain("ci-kolo-worker-3", key, sizeof key), KOLO_OK);
  assert_string_equal(key, "/kolo/v1/drain/ci-kolo-worker-3");
  assert_string_equal(KOLO_KEY_DRAIN_PREFIX, "/kolo/v1/drain/");
  assert_int_equal(kolo_keys_drain("a/b", key, sizeof key), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_keys_drain("..", key, sizeof key), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_keys_drain("w1", key, 12), KOLO_ERR_TOO_LARGE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_mark_drains_the_registration_whose_lease_it_names),
      cmocka_unit_test(a_mark_does_not_drain_the_next_registration_under_the_same_id),
      cmocka_unit_test(a_legacy_mark_without_a_lease_drains_nothing),
      cmocka_unit_test(malformed_marks_drain_nothing),
      cmocka_unit_test(the_drain_key_is_built_from_a_valid_worker_id_only),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
