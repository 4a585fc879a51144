/* Unit tests for kolo_nccl's poll pause (collective/nccl/nccl_device.c): yields
 * while a GPU collective may still be about to finish (the first 100 us), then
 * sleeps in proportion to the time already waited, so neither small-message
 * latency nor a long wait's CPU use suffers from a fixed step. Needs no GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "nccl_internal.h"

static void the_first_hundred_microseconds_only_yield(void **state) {
  (void)state;
  assert_int_equal(kolo_nccl_pause_ns(0), 0);
  assert_int_equal(kolo_nccl_pause_ns(50000), 0);
  assert_int_equal(kolo_nccl_pause_ns(99999), 0);
  assert_true(kolo_nccl_pause_ns(100000) > 0);
}

static void later_pauses_are_a_sixteenth_of_the_wait_within_bounds(void **state) {
  (void)state;
  assert_int_equal(kolo_nccl_pause_ns(100000), 20000);           /* floor 20 us */
  assert_int_equal(kolo_nccl_pause_ns(1000000), 62500);          /* 1 ms waited: 62.5 us */
  assert_int_equal(kolo_nccl_pause_ns(16000000), 1000000);       /* 16 ms: 1 ms */
  assert_int_equal(kolo_nccl_pause_ns(60000000000ull), 2000000); /* cap 2 ms */
  /* never shorter after a longer wait */
  uint64_t last = 0;
  for (uint64_t t = 0; t < 100000000ull; t += 37000) {
    uint64_t p = kolo_nccl_pause_ns(t);
    assert_true(p >= last);
    last = p;
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_first_hundred_microseconds_only_yield),
      cmocka_unit_test(later_pauses_are_a_sixteenth_of_the_wait_within_bounds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
