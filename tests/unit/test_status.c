/* Unit tests for common/status.c: every code has a distinct name and text, and
 * errno values map to the codes callers branch on. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "kolo/status.h"

static void every_status_has_a_distinct_text_and_name(void **state) {
  (void)state;
  const kolo_status codes[] = {
#define CODE_(name, value, text) name,
      KOLO_STATUS_LIST(CODE_)
#undef CODE_
  };
  size_t count = sizeof codes / sizeof codes[0];
  for (size_t i = 0; i < count; i++) {
    assert_non_null(kolo_strerror(codes[i]));
    assert_true(strncmp(kolo_status_name(codes[i]), "KOLO_", 5) == 0);
    for (size_t j = i + 1; j < count; j++) {
      assert_int_not_equal(codes[i], codes[j]);
      assert_string_not_equal(kolo_strerror(codes[i]), kolo_strerror(codes[j]));
    }
  }
}

static void unknown_status_has_a_fallback_text(void **state) {
  (void)state;
  assert_string_equal(kolo_strerror((kolo_status)9999), "unknown status");
  assert_string_equal(kolo_status_name((kolo_status)9999), "KOLO_ERR_UNKNOWN");
}

static void connection_errors_map_to_peer_lost(void **state) {
  (void)state;
  assert_int_equal(kolo_status_from_errno(ECONNRESET), KOLO_ERR_PEER_LOST);
  assert_int_equal(kolo_status_from_errno(EPIPE), KOLO_ERR_PEER_LOST);
  assert_int_equal(kolo_status_from_errno(ECONNREFUSED), KOLO_ERR_CONNECT);
  assert_int_equal(kolo_status_from_errno(ENOMEM), KOLO_ERR_NO_MEMORY);
  assert_int_equal(kolo_status_from_errno(0), KOLO_OK);
  assert_int_equal(kolo_status_from_errno(EBADF), KOLO_ERR_SYSTEM);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_status_has_a_distinct_text_and_name),
      cmocka_unit_test(unknown_status_has_a_fallback_text),
      cmocka_unit_test(connection_errors_map_to_peer_lost),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
