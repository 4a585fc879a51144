/* Unit tests for kolo_allreduce_choose (collective/algo/ring.c): which all-reduce a
 * ring runs. Every rank must pick the same from the same inputs; the pair
 * exchange is for two ranks: over TCP within its size range, over shared
 * memory for small buffers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "collective/algo/algo.h"

#define SMALL (32 * 1024)
#define PAIR_MIN (32 * 1024)
#define PAIR_MAX (8 * 1024 * 1024)
#define PAIR_SHM_MAX (32 * 1024)

static kolo_allreduce_algo choose(int size, size_t bytes, int over_shm) {
  return kolo_allreduce_choose(size, bytes / 4, bytes, SMALL, PAIR_MIN, PAIR_MAX, PAIR_SHM_MAX,
                               over_shm);
}

static void small_buffers_take_the_gather_path(void **state) {
  (void)state;
  for (int size = 2; size <= 5; size++) {
    assert_int_equal(choose(size, 4, 0), KOLO_ALLREDUCE_GATHER);
    assert_int_equal(choose(size, SMALL, 0), KOLO_ALLREDUCE_GATHER);
    if (size > 2) assert_int_equal(choose(size, SMALL, 1), KOLO_ALLREDUCE_GATHER);
  }
}

static void two_ranks_over_shared_memory_exchange_small_buffers(void **state) {
  (void)state;
  assert_int_equal(choose(2, 8, 1), KOLO_ALLREDUCE_PAIR);
  assert_int_equal(choose(2, 4096, 1), KOLO_ALLREDUCE_PAIR);
  assert_int_equal(choose(2, PAIR_SHM_MAX, 1), KOLO_ALLREDUCE_PAIR);
  assert_int_equal(choose(2, PAIR_SHM_MAX + 4, 1), KOLO_ALLREDUCE_RING);
  /* one element on two ranks still gathers; KOLO_PAIR_SHM_MAX_BYTES bounds it */
  assert_int_equal(choose(2, 4, 1), KOLO_ALLREDUCE_GATHER);
  assert_int_equal(kolo_allreduce_choose(2, 1024, 4096, SMALL, PAIR_MIN, PAIR_MAX, 1024, 1),
                   KOLO_ALLREDUCE_GATHER);
}

static void fewer_elements_than_ranks_take_the_gather_path(void **state) {
  (void)state;
  /* 3 elements of 1 MiB each (a made-up wide type) on 4 ranks */
  assert_int_equal(kolo_allreduce_choose(4, 3, 3 << 20, SMALL, PAIR_MIN, PAIR_MAX, PAIR_SHM_MAX, 0),
                   KOLO_ALLREDUCE_GATHER);
}

static void two_ranks_over_tcp_exchange_within_the_pair_range(void **state) {
  (void)state;
  assert_int_equal(choose(2, SMALL + 4, 0), KOLO_ALLREDUCE_PAIR);
  assert_int_equal(choose(2, 1 << 20, 0), KOLO_ALLREDUCE_PAIR);
  assert_int_equal(choose(2, PAIR_MAX, 0), KOLO_ALLREDUCE_PAIR);
  assert_int_equal(choose(2, PAIR_MAX + 4, 0), KOLO_ALLREDUCE_RING);
  assert_int_equal(choose(2, 64 << 20, 0), KOLO_ALLREDUCE_RING);
}

static void shared_memory_and_larger_rings_keep_the_ring(void **state) {
  (void)state;
  assert_int_equal(choose(2, 1 << 20, 1), KOLO_ALLREDUCE_RING);
  for (int size = 3; size <= 8; size++)
    assert_int_equal(choose(size, 1 << 20, 0), KOLO_ALLREDUCE_RING);
}

static void the_pair_range_follows_its_settings(void **state) {
  (void)state;
  /* KOLO_PAIR_MIN_BYTES above KOLO_PAIR_MAX_BYTES turns the pair off */
  assert_int_equal(
      kolo_allreduce_choose(2, 1 << 18, 1 << 20, SMALL, SIZE_MAX, PAIR_MAX, PAIR_SHM_MAX, 0),
      KOLO_ALLREDUCE_RING);
  assert_int_equal(
      kolo_allreduce_choose(2, 1 << 22, 1 << 24, SMALL, PAIR_MIN, SIZE_MAX, PAIR_SHM_MAX, 0),
      KOLO_ALLREDUCE_PAIR);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(small_buffers_take_the_gather_path),
      cmocka_unit_test(fewer_elements_than_ranks_take_the_gather_path),
      cmocka_unit_test(two_ranks_over_shared_memory_exchange_small_buffers),
      cmocka_unit_test(two_ranks_over_tcp_exchange_within_the_pair_range),
      cmocka_unit_test(shared_memory_and_larger_rings_keep_the_ring),
      cmocka_unit_test(the_pair_range_follows_its_settings),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
