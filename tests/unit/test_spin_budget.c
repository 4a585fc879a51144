/* Unit tests for kolo_spin_budget_next and kolo_yield_off_until
 * (collective/algo/plan.c): how long the
 * executor busy-polls a stalled transfer before it sleeps in poll. A stall
 * that a longer spin would have covered raises the budget (also after a sleep,
 * so it can never stay stuck at the floor); only a stall longer than the most
 * the executor may spin lowers it; it stays within [max/16, max]. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "collective/algo/algo.h"

#define US 1000LL
#define MAX (100 * US)
#define FLOOR (MAX / 16)

static void a_short_stall_at_the_floor_raises_the_budget_to_cover_it(void **state) {
  (void)state;
  /* a 20 us wait (a 64 KiB TCP exchange) that overran the floor and slept */
  assert_int_equal(kolo_spin_budget_next(FLOOR, MAX, 20 * US), 40 * US);
  /* a wake-up from poll included: 70 us is still within the most */
  assert_int_equal(kolo_spin_budget_next(FLOOR, MAX, 70 * US), MAX);
}

static void a_stall_covered_by_the_spin_keeps_growing_the_budget(void **state) {
  (void)state;
  assert_int_equal(kolo_spin_budget_next(10 * US, MAX, 1 * US), 20 * US);
  assert_int_equal(kolo_spin_budget_next(60 * US, MAX, 1 * US), MAX);
  assert_int_equal(kolo_spin_budget_next(MAX, MAX, MAX), MAX);
}

static void a_stall_longer_than_the_most_halves_the_budget_down_to_the_floor(void **state) {
  (void)state;
  assert_int_equal(kolo_spin_budget_next(MAX, MAX, MAX + 1), MAX / 2);
  assert_int_equal(kolo_spin_budget_next(MAX, MAX, 800000 * US), MAX / 2);
  int64_t budget = MAX;
  for (int i = 0; i < 10; i++) budget = kolo_spin_budget_next(budget, MAX, 10000 * US);
  assert_int_equal(budget, FLOOR);
}

static void the_budget_never_leaves_its_bounds(void **state) {
  (void)state;
  int64_t waits[] = {0, 1, 3 * US, FLOOR, MAX - 1, MAX, MAX + 1, 1000 * MAX};
  for (size_t b = 0; b < sizeof waits / sizeof *waits; b++) {
    for (size_t w = 0; w < sizeof waits / sizeof *waits; w++) {
      int64_t budget = waits[b] < FLOOR ? FLOOR : waits[b] > MAX ? MAX : waits[b];
      int64_t next = kolo_spin_budget_next(budget, MAX, waits[w]);
      assert_true(next >= FLOOR);
      assert_true(next <= MAX);
    }
  }
}

/* A yield that lost the core for a slice (a compiler on the other side of it)
 * stops the yields for KOLO_YIELD_OFF_NS; a quick one changes nothing, so an
 * earlier bound stands and ranks sharing cores keep yielding to each other. */
static void a_yield_that_lost_the_core_stops_the_yields_for_a_while(void **state) {
  (void)state;
  int64_t now = 5000000 * US;
  assert_int_equal(kolo_yield_off_until(0, now, 3 * US), 0);
  assert_int_equal(kolo_yield_off_until(0, now, KOLO_YIELD_SLOW_NS - 1), 0);
  assert_int_equal(kolo_yield_off_until(0, now, KOLO_YIELD_SLOW_NS), now + KOLO_YIELD_OFF_NS);
  assert_int_equal(kolo_yield_off_until(0, now, 4000 * US), now + KOLO_YIELD_OFF_NS);
  assert_int_equal(kolo_yield_off_until(now + 7, now, 20 * US), now + 7);
  /* a slow tick well below a time slice, above a wake-up of a yielding peer */
  assert_true(KOLO_YIELD_SLOW_NS >= 200 * US && KOLO_YIELD_SLOW_NS <= 1000 * US);
}

/* Unset, the adaptive rule applies only where every local rank can have a CPU; where ranks
 * outnumber CPUs a spin keeps yielding to the neighbour waiting for its core. */
static void ranks_that_outnumber_the_cpus_keep_the_old_yield_rule(void **state) {
  (void)state;
  assert_int_equal(kolo_spin_yield_mode(-1, 2, 2), -1);
  assert_int_equal(kolo_spin_yield_mode(-1, 1, 16), -1);
  assert_int_equal(kolo_spin_yield_mode(-1, 3, 2), 1);
  assert_int_equal(kolo_spin_yield_mode(-1, 8, 2), 1);
  assert_int_equal(kolo_spin_yield_mode(-1, 8, 0), -1); /* CPUs unknown */
  /* KOLO_SPIN_YIELD set wins either way */
  assert_int_equal(kolo_spin_yield_mode(0, 8, 2), 0);
  assert_int_equal(kolo_spin_yield_mode(1, 1, 2), 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_short_stall_at_the_floor_raises_the_budget_to_cover_it),
      cmocka_unit_test(a_stall_covered_by_the_spin_keeps_growing_the_budget),
      cmocka_unit_test(a_stall_longer_than_the_most_halves_the_budget_down_to_the_floor),
      cmocka_unit_test(the_budget_never_leaves_its_bounds),
      cmocka_unit_test(a_yield_that_lost_the_core_stops_the_yields_for_a_while),
      cmocka_unit_test(ranks_that_outnumber_the_cpus_keep_the_old_yield_rule),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
