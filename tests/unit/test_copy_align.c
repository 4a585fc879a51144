/* Unit tests for kolo_copy_align_next (collective/net/copy_align.c): whether the
 * TCP transport's next large call goes straight or through the bounce buffer
 * 32 bytes off (out of AMD's slow `rep movsb` window). Both modes get timed
 * twice before a choice, the shifted mode needs a clear win, one slow timing does not
 * flip the choice, a mode that gets much dearer has the other re-timed at once,
 * and the other mode is re-timed (one call) every KOLO_COPY_ALIGN_PROBE_EVERY
 * calls. kolo_copy_bytes copies exactly what memcpy would at every distance,
 * size and tail, including the short distances it detours for. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "collective/net/copy_align.h"

#define FAST 150  /* ns per KiB: a 64 KiB copy in the fast case */
#define SLOW 1100 /* the same copy 1..31 bytes short of its source */

/* Feeds n timings of the mode the chooser currently picks, cost(mode). */
static void feed(kolo_copy_align *a, int n, int64_t straight, int64_t shifted) {
  for (int i = 0; i < n; i++) kolo_copy_align_next(a, a->shifted ? shifted : straight);
}

/* A chooser past a connection's cold first calls. */
static kolo_copy_align warm(void) {
  kolo_copy_align a = {0};
  for (int i = 0; i < KOLO_COPY_ALIGN_WARMUP_CALLS; i++) kolo_copy_align_next(&a, 50 * SLOW);
  return a;
}

static void a_connections_first_calls_are_not_counted(void **state) {
  (void)state;
  kolo_copy_align a = {0};
  for (int i = 0; i < KOLO_COPY_ALIGN_WARMUP_CALLS; i++) {
    kolo_copy_align_next(&a, i == 0 ? 50 * SLOW : FAST);
    assert_int_equal(a.shifted, 0);
  }
  assert_int_equal(a.cost[0], 0);
  assert_int_equal(a.cost[1], 0);
}

static void both_modes_are_timed_twice_before_any_choice(void **state) {
  (void)state;
  kolo_copy_align a = warm();
  kolo_copy_align_next(&a, SLOW); /* one slow call is no verdict */
  assert_int_equal(a.shifted, 0);
  kolo_copy_align_next(&a, FAST);
  assert_int_equal(a.shifted, 1); /* never timed: try it */
  kolo_copy_align_next(&a, SLOW);
  assert_int_equal(a.shifted, 1); /* a probe is two calls */
  kolo_copy_align_next(&a, SLOW);
  assert_int_equal(a.shifted, 0); /* it was slower */
}

static void a_slow_straight_copy_moves_to_the_bounce_buffer_and_stays(void **state) {
  (void)state;
  kolo_copy_align a = warm();
  feed(&a, 4, SLOW, FAST);
  assert_int_equal(a.shifted, 1);
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < KOLO_COPY_ALIGN_PROBE_EVERY_SHIFTED - 1; i++) {
      kolo_copy_align_next(&a, FAST);
      assert_int_equal(a.shifted, 1);
    }
    kolo_copy_align_next(&a, FAST);
    assert_int_equal(a.shifted, 0); /* the shifted mode checks back soon */
    kolo_copy_align_next(&a, SLOW); /* straight is still slow */
    assert_int_equal(a.shifted, 1);
  }
}

static void the_shifted_mode_must_win_clearly(void **state) {
  (void)state;
  kolo_copy_align a = warm();
  feed(&a, 4, 1000, 800); /* only 1.25x: the extra memcpy is not worth it */
  assert_int_equal(a.shifted, 0);
  kolo_copy_align b = warm();
  feed(&b, 4, 1000, 740); /* 1.35x */
  assert_int_equal(b.shifted, 1);
}

static void one_preempted_call_does_not_flip_the_choice(void **state) {
  (void)state;
  kolo_copy_align a = warm();
  feed(&a, 6, FAST, SLOW);
  assert_int_equal(a.shifted, 0);
  kolo_copy_align_next(&a, 20 * FAST); /* the straight call was descheduled once */
  assert_int_equal(a.shifted, 0);
  feed(&a, 3, FAST, SLOW);
  assert_int_equal(a.shifted, 0);
}

static void a_mode_that_gets_dearer_has_the_other_timed_at_once(void **state) {
  (void)state;
  kolo_copy_align a = warm();
  feed(&a, 6, FAST, SLOW); /* straight is right */
  assert_int_equal(a.shifted, 0);
  /* the kernel's fragment offset moved: straight is now the slow one */
  kolo_copy_align_next(&a, SLOW);
  assert_int_equal(a.shifted, 0); /* one slow timing: not yet */
  kolo_copy_align_next(&a, SLOW);
  assert_int_equal(a.shifted, 1); /* two: look at the other mode */
  feed(&a, 10, SLOW, FAST);
  assert_int_equal(a.shifted, 1);
}

static void the_other_mode_is_timed_again_every_probe_period(void **state) {
  (void)state;
  kolo_copy_align a = warm();
  feed(&a, 4, FAST, SLOW);
  assert_int_equal(a.shifted, 0);
  int probes = 0;
  for (int i = 0; i < 10 * (KOLO_COPY_ALIGN_PROBE_EVERY + 1); i++) {
    int was = a.shifted;
    kolo_copy_align_next(&a, a.shifted ? SLOW : FAST);
    probes += !was && a.shifted;
  }
  assert_int_equal(probes, 10);
  assert_int_equal(a.shifted, 0);
}

static void a_periodic_probe_finds_a_mode_that_became_cheaper(void **state) {
  (void)state;
  kolo_copy_align a = warm();
  feed(&a, 4, SLOW, 2 * SLOW); /* both slow at first: straight */
  assert_int_equal(a.shifted, 0);
  feed(&a, KOLO_COPY_ALIGN_PROBE_EVERY + 1, SLOW, FAST);
  assert_int_equal(a.shifted, 1);
}

static void short_distances_are_1_to_63_bytes_after_the_source_modulo_4096(void **state) {
  (void)state;
  static char page[3 * 4096];
  char *src = page + 4096;
  assert_false(kolo_copy_short_distance(src, src));
  assert_true(kolo_copy_short_distance(src + 1, src));
  assert_true(kolo_copy_short_distance(src + 63, src));
  assert_false(kolo_copy_short_distance(src + 64, src));
  assert_true(kolo_copy_short_distance(src + 4096 + 16, src));
  assert_false(kolo_copy_short_distance(src + 4096, src));
  assert_false(kolo_copy_short_distance(src - 16, src)); /* before the source: fine */
}

static void copy_bytes_copies_what_memcpy_copies_at_every_distance(void **state) {
  (void)state;
  size_t sizes[] = {0, 1, 63, 64, 1023, 1024, 1025, 4096 + 7, 65536, 65483};
  size_t capacity = 65536 + 2 * 4096;
  unsigned char *src = malloc(capacity), *got = malloc(capacity), *want = malloc(capacity);
  assert_non_null(src);
  assert_non_null(got);
  assert_non_null(want);
  for (size_t i = 0; i < capacity; i++) src[i] = (unsigned char)(i * 131 + 7);
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    for (size_t from = 0; from < 80; from += 13) {
      for (size_t to = 0; to < 130; to += 3) { /* short distances and not */
        memset(got, 0xAA, capacity);
        memset(want, 0xAA, capacity);
        kolo_copy_bytes(got + to, src + from, sizes[k]);
        memcpy(want + to, src + from, sizes[k]);
        assert_memory_equal(got, want, capacity); /* nothing before or after either */
      }
    }
  }
  free(src);
  free(got);
  free(want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_connections_first_calls_are_not_counted),
      cmocka_unit_test(both_modes_are_timed_twice_before_any_choice),
      cmocka_unit_test(a_slow_straight_copy_moves_to_the_bounce_buffer_and_stays),
      cmocka_unit_test(the_shifted_mode_must_win_clearly),
      cmocka_unit_test(one_preempted_call_does_not_flip_the_choice),
      cmocka_unit_test(a_mode_that_gets_dearer_has_the_other_timed_at_once),
      cmocka_unit_test(the_other_mode_is_timed_again_every_probe_period),
      cmocka_unit_test(a_periodic_probe_finds_a_mode_that_became_cheaper),
      cmocka_unit_test(short_distances_are_1_to_63_bytes_after_the_source_modulo_4096),
      cmocka_unit_test(copy_bytes_copies_what_memcpy_copies_at_every_distance),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
