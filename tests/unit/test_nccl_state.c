/* Unit tests for collective/nccl/nccl_state.c: the communicator lifecycle
 * (NEW -> INITIALIZING -> READY -> FAILED|ABORTED -> DESTROYED) as a pure table,
 * checked transition by transition. Needs no GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "kolo_nccl.h"

#define S_NEW KOLO_NCCL_STATE_NEW
#define S_INIT KOLO_NCCL_STATE_INITIALIZING
#define S_READY KOLO_NCCL_STATE_READY
#define S_FAILED KOLO_NCCL_STATE_FAILED
#define S_ABORTED KOLO_NCCL_STATE_ABORTED
#define S_DEAD KOLO_NCCL_STATE_DESTROYED
#define NO (-1) /* refused */

/* Expected next state for [state][event]; events in kolo_nccl_event order:
 * INIT_START, INIT_DONE, ERROR, ABORT, DESTROY. */
static const int expected[6][5] = {
    [S_NEW] = {S_INIT, NO, S_FAILED, NO, S_DEAD},
    [S_INIT] = {NO, S_READY, S_FAILED, S_ABORTED, NO},
    [S_READY] = {NO, NO, S_FAILED, S_ABORTED, S_DEAD},
    [S_FAILED] = {NO, NO, S_FAILED, S_ABORTED, NO},
    [S_ABORTED] = {NO, NO, S_ABORTED, S_ABORTED, S_DEAD},
    [S_DEAD] = {NO, NO, NO, NO, NO},
};

static void every_transition_matches_the_lifecycle_table(void **state) {
  (void)state;
  for (int s = S_NEW; s <= S_DEAD; s++) {
    for (int e = KOLO_NCCL_EV_INIT_START; e <= KOLO_NCCL_EV_DESTROY; e++) {
      kolo_nccl_state next = (kolo_nccl_state)77;
      kolo_status st = kolo_nccl_state_next((kolo_nccl_state)s, (kolo_nccl_event)e, &next);
      if (expected[s][e] == NO) {
        assert_int_equal(st, KOLO_ERR_STATE);
        assert_int_equal(next, 77); /* untouched on refusal */
      } else {
        assert_int_equal(st, KOLO_OK);
        assert_int_equal(next, expected[s][e]);
      }
    }
  }
}

/* Applies events in order from NEW and returns the final state (asserting each step). */
static kolo_nccl_state run(const kolo_nccl_event *events, size_t n) {
  kolo_nccl_state s = S_NEW;
  for (size_t i = 0; i < n; i++) assert_int_equal(kolo_nccl_state_next(s, events[i], &s), KOLO_OK);
  return s;
}

static void a_healthy_communicator_goes_from_new_to_destroyed(void **state) {
  (void)state;
  const kolo_nccl_event ev[] = {KOLO_NCCL_EV_INIT_START, KOLO_NCCL_EV_INIT_DONE,
                                KOLO_NCCL_EV_DESTROY};
  assert_int_equal(run(ev, 3), S_DEAD);
}

static void a_lost_peer_is_aborted_and_then_destroyed(void **state) {
  (void)state;
  const kolo_nccl_event ev[] = {KOLO_NCCL_EV_INIT_START, KOLO_NCCL_EV_INIT_DONE, KOLO_NCCL_EV_ERROR,
                                KOLO_NCCL_EV_ABORT, KOLO_NCCL_EV_DESTROY};
  assert_int_equal(run(ev, 5), S_DEAD);
}

static void a_failed_communicator_cannot_be_destroyed_without_abort(void **state) {
  (void)state;
  kolo_nccl_state next = S_FAILED;
  assert_int_equal(kolo_nccl_state_next(S_FAILED, KOLO_NCCL_EV_DESTROY, &next), KOLO_ERR_STATE);
  assert_int_equal(kolo_nccl_state_next(S_INIT, KOLO_NCCL_EV_DESTROY, &next), KOLO_ERR_STATE);
}

static void an_init_that_times_out_is_aborted(void **state) {
  (void)state;
  const kolo_nccl_event ev[] = {KOLO_NCCL_EV_INIT_START, KOLO_NCCL_EV_ERROR, KOLO_NCCL_EV_ABORT};
  assert_int_equal(run(ev, 3), S_ABORTED);
}

static void errors_after_an_abort_keep_it_aborted(void **state) {
  (void)state;
  const kolo_nccl_event ev[] = {KOLO_NCCL_EV_INIT_START, KOLO_NCCL_EV_INIT_DONE, KOLO_NCCL_EV_ABORT,
                                KOLO_NCCL_EV_ERROR, KOLO_NCCL_EV_ABORT};
  assert_int_equal(run(ev, 5), S_ABORTED);
}

static void an_aborted_communicator_is_never_ready_again(void **state) {
  (void)state;
  kolo_nccl_state next = S_ABORTED;
  assert_int_equal(kolo_nccl_state_next(S_ABORTED, KOLO_NCCL_EV_INIT_START, &next), KOLO_ERR_STATE);
  assert_int_equal(kolo_nccl_state_next(S_ABORTED, KOLO_NCCL_EV_INIT_DONE, &next), KOLO_ERR_STATE);
  assert_int_equal(next, S_ABORTED);
}

static void an_unknown_state_refuses_every_event(void **state) {
  (void)state;
  kolo_nccl_state next = S_NEW;
  assert_int_equal(kolo_nccl_state_next((kolo_nccl_state)42, KOLO_NCCL_EV_ABORT, &next),
                   KOLO_ERR_STATE);
  assert_int_equal(kolo_nccl_state_next(S_NEW, (kolo_nccl_event)42, &next), KOLO_ERR_STATE);
}

static void only_a_ready_communicator_accepts_operations(void **state) {
  (void)state;
  assert_int_equal(kolo_nccl_state_submit_status(S_READY, KOLO_OK), KOLO_OK);
  assert_int_equal(kolo_nccl_state_submit_status(S_FAILED, KOLO_ERR_PEER_LOST), KOLO_ERR_PEER_LOST);
  assert_int_equal(kolo_nccl_state_submit_status(S_FAILED, KOLO_ERR_TIMEOUT), KOLO_ERR_TIMEOUT);
  assert_int_equal(kolo_nccl_state_submit_status(S_ABORTED, KOLO_ERR_PEER_LOST), KOLO_ERR_ABORTED);
  assert_int_equal(kolo_nccl_state_submit_status(S_NEW, KOLO_OK), KOLO_ERR_STATE);
  assert_int_equal(kolo_nccl_state_submit_status(S_INIT, KOLO_OK), KOLO_ERR_STATE);
  assert_int_equal(kolo_nccl_state_submit_status(S_DEAD, KOLO_OK), KOLO_ERR_STATE);
}

static void every_state_has_a_distinct_name(void **state) {
  (void)state;
  for (int a = S_NEW; a <= S_DEAD; a++) {
    assert_string_not_equal(kolo_nccl_state_name((kolo_nccl_state)a), "unknown");
    for (int b = a + 1; b <= S_DEAD; b++)
      assert_string_not_equal(kolo_nccl_state_name((kolo_nccl_state)a),
                              kolo_nccl_state_name((kolo_nccl_state)b));
  }
  assert_string_equal(kolo_nccl_state_name((kolo_nccl_state)9), "unknown");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_transition_matches_the_lifecycle_table),
      cmocka_unit_test(a_healthy_communicator_goes_from_new_to_destroyed),
      cmocka_unit_test(a_lost_peer_is_aborted_and_then_destroyed),
      cmocka_unit_test(a_failed_communicator_cannot_be_destroyed_without_abort),
      cmocka_unit_test(an_init_that_times_out_is_aborted),
      cmocka_unit_test(errors_after_an_abort_keep_it_aborted),
      cmocka_unit_test(an_aborted_communicator_is_never_ready_again),
      cmocka_unit_test(an_unknown_state_refuses_every_event),
      cmocka_unit_test(only_a_ready_communicator_accepts_operations),
      cmocka_unit_test(every_state_has_a_distinct_name),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
