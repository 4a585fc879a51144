/* The liveness beat's pure rules (collective/net/beat.c): when a link is silent,
 * how the longest recent beat gap decays, how the timeout stretches on a
 * loaded machine and never past its cap, and KOLO_PEER_TIMEOUT parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "collective/net/net.h"

#define MS 1000000LL

static void a_link_is_silent_once_the_timeout_passed(void **state) {
  (void)state;
  assert_false(kolo_beat_silent(1000 * MS, 1499 * MS, 500));
  assert_true(kolo_beat_silent(1000 * MS, 1500 * MS, 500));
  assert_false(kolo_beat_silent(1000 * MS, 99999 * MS, 0)); /* judging off */
  assert_false(
      kolo_beat_silent(2000 * MS, 1000 * MS, 500)); /* the start-up grace: heard in the future */
}

static void a_longer_gap_replaces_the_maximum_and_shorter_ones_pull_it_down_slowly(void **state) {
  (void)state;
  assert_int_equal(kolo_beat_gap_update(100 * MS, 400 * MS), 400 * MS);
  int64_t max = 400 * MS;
  for (int i = 0; i < 44; i++)
    max = kolo_beat_gap_update(max, 100 * MS);   /* ~4.4 s of regular beats */
  assert_true(max > 240 * MS && max < 260 * MS); /* about half way back */
  for (int i = 0; i < 1000; i++) max = kolo_beat_gap_update(max, 100 * MS);
  assert_true(max < 101 * MS);
}

static void the_timeout_stretches_with_late_beats_up_to_its_cap(void **state) {
  (void)state;
  assert_int_equal(kolo_beat_timeout_ms(500, 100 * MS), 500);   /* a quiet machine */
  assert_int_equal(kolo_beat_timeout_ms(500, 224 * MS), 896);   /* beats 224 ms apart */
  assert_int_equal(kolo_beat_timeout_ms(500, 5000 * MS), 4000); /* at most 8 x the configured */
  assert_int_equal(kolo_beat_timeout_ms(0, 5000 * MS), 0);      /* off stays off */
}

static void this_hosts_own_late_beats_stretch_a_links_timeout_before_the_peer_is_late(
    void **state) {
  (void)state;
  /* the peer's beats are regular so far, but this rank's own came 300 ms apart */
  int64_t jitter = kolo_beat_jitter_ns(100 * MS, 300 * MS);
  assert_int_equal(jitter, 300 * MS);
  assert_int_equal(kolo_beat_timeout_ms(500, jitter), 1200);
  assert_int_equal(kolo_beat_jitter_ns(400 * MS, 100 * MS), 400 * MS); /* the peer's, when longer */
  /* quiet on both sides: the configured timeout */
  assert_int_equal(kolo_beat_timeout_ms(500, kolo_beat_jitter_ns(100 * MS, 101 * MS)), 500);
}

static void the_peer_timeout_comes_from_the_environment_in_seconds(void **state) {
  (void)state;
  unsetenv("KOLO_PEER_TIMEOUT");
  assert_int_equal(kolo_peer_timeout_ms_from_env(500), 500);
  assert_int_equal(kolo_peer_timeout_ms_from_env(0), 0);
  setenv("KOLO_PEER_TIMEOUT", "0.75", 1);
  assert_int_equal(kolo_peer_timeout_ms_from_env(0), 750);
  setenv("KOLO_PEER_TIMEOUT", "2", 1);
  assert_int_equal(kolo_peer_timeout_ms_from_env(500), 2000);
  setenv("KOLO_PEER_TIMEOUT", "0", 1);
  assert_int_equal(kolo_peer_timeout_ms_from_env(500), 0);
  setenv("KOLO_PEER_TIMEOUT", "0.01", 1); /* shorter than three beats: raised */
  assert_int_equal(kolo_peer_timeout_ms_from_env(500), 3 * KOLO_BEAT_INTERVAL_MS);
  setenv("KOLO_PEER_TIMEOUT", "soon", 1);
  assert_int_equal(kolo_peer_timeout_ms_from_env(500), 500);
  setenv("KOLO_PEER_TIMEOUT", "-1", 1);
  assert_int_equal(kolo_peer_timeout_ms_from_env(500), 500);
  unsetenv("KOLO_PEER_TIMEOUT");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_link_is_silent_once_the_timeout_passed),
      cmocka_unit_test(a_longer_gap_replaces_the_maximum_and_shorter_ones_pull_it_down_slowly),
      cmocka_unit_test(the_timeout_stretches_with_late_beats_up_to_its_cap),
      cmocka_unit_test(this_hosts_own_late_beats_stretch_a_links_timeout_before_the_peer_is_late),
      cmocka_unit_test(the_peer_timeout_comes_from_the_environment_in_seconds),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
