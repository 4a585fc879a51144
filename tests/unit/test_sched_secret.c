/* Unit tests for the ring secret (scheduler/apply.c): 32 hex digits from the OS's CSPRNG,
 * so no seed an outsider can guess reproduces it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/apply.h"

static void secrets_are_32_hex_digits_and_never_repeat(void **state) {
  (void)state;
  char seen[64][KOLO_SCHED_SECRET_LEN + 1];
  for (int i = 0; i < 64; i++) {
    assert_int_equal(kolo_sched_ring_secret(seen[i]), KOLO_OK);
    assert_int_equal(strlen(seen[i]), KOLO_SCHED_SECRET_LEN);
    assert_int_equal(strspn(seen[i], "0123456789abcdef"), KOLO_SCHED_SECRET_LEN);
    for (int k = 0; k < i; k++) assert_string_not_equal(seen[i], seen[k]);
  }
}

/* The old secret was rand() seeded with time ^ pid: the same seed gave the same secret. */
static void the_same_libc_seed_does_not_give_the_same_secret(void **state) {
  (void)state;
  char a[KOLO_SCHED_SECRET_LEN + 1], b[KOLO_SCHED_SECRET_LEN + 1];
  srand(42);
  assert_int_equal(kolo_sched_ring_secret(a), KOLO_OK);
  srand(42);
  assert_int_equal(kolo_sched_ring_secret(b), KOLO_OK);
  assert_string_not_equal(a, b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(secrets_are_32_hex_digits_and_never_repeat),
      cmocka_unit_test(the_same_libc_seed_does_not_give_the_same_secret),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
