/* Warm joins' pure part (worker/agent/warm_join.h): a survivor waits for exactly the members
 * that joined after the ring its process formed, and a newcomer counts as up only once its
 * process, started for the new epoch or a later one, said HELLO (or already exited). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "worker/agent/warm_join.h"

static kolo_ringspec ring_of(kolo_ringspec_member *members, size_t n, int64_t epoch) {
  return (kolo_ringspec){.job = "j", .epoch = epoch, .size = n, .members = members};
}

static void a_survivor_waits_for_the_members_that_joined_after_its_ring(void **state) {
  (void)state;
  kolo_ringspec_member m[4] = {{.worker_id = "w1", .since_epoch = 1},
                               {.worker_id = "w2", .since_epoch = 3},
                               {.worker_id = "w3", .since_epoch = 5},
                               {.worker_id = "w4", .since_epoch = 5}};
  kolo_ringspec ring = ring_of(m, 4, 5);
  size_t out[4];
  /* w1 formed epoch 4: w3 and w4 joined at 5, w2 was in its ring */
  assert_int_equal(kolo_agent_warm_join_newcomers(&ring, "w1", 4, out, 4), 2);
  assert_int_equal(out[0], 2);
  assert_int_equal(out[1], 3);
  /* w3 is one of them: it waits only for w4, and only if its process formed a ring */
  assert_int_equal(kolo_agent_warm_join_newcomers(&ring, "w3", 4, out, 4), 1);
  assert_int_equal(out[0], 3);
  /* a process that formed epoch 2 has not seen w2 either */
  assert_int_equal(kolo_agent_warm_join_newcomers(&ring, "w1", 2, out, 4), 3);
  /* the count is whole even where out is short */
  assert_int_equal(kolo_agent_warm_join_newcomers(&ring, "w1", 2, out, 1), 3);
  assert_int_equal(out[0], 1);
}

static void a_process_that_never_formed_a_ring_waits_for_nobody(void **state) {
  (void)state;
  kolo_ringspec_member m[2] = {{.worker_id = "w1", .since_epoch = 2},
                               {.worker_id = "w2", .since_epoch = 2}};
  kolo_ringspec ring = ring_of(m, 2, 2);
  size_t out[2];
  assert_int_equal(kolo_agent_warm_join_newcomers(&ring, "w1", 0, out, 2), 0);
  /* a ring with no newcomer (a loss, a shrink) holds nothing */
  assert_int_equal(kolo_agent_warm_join_newcomers(&ring, "w1", 2, out, 2), 0);
}

static void a_newcomer_is_up_once_its_process_said_hello_at_the_new_epoch(void **state) {
  (void)state;
  Kolo__V1__AgentReport r = KOLO__V1__AGENT_REPORT__INIT;
  r.epoch = 5;
  r.hello = 0;
  assert_false(kolo_agent_warm_join_ready(&r, 5)); /* started, still importing */
  r.hello = 1;
  assert_true(kolo_agent_warm_join_ready(&r, 5));
  assert_true(kolo_agent_warm_join_ready(&r, 4)); /* started for a later ring */
  /* an earlier life's report (the same worker id before it was lost) does not count */
  r.epoch = 3;
  assert_false(kolo_agent_warm_join_ready(&r, 5));
  r.exited = 1;
  assert_false(kolo_agent_warm_join_ready(&r, 5));
  /* exited at the new epoch: nothing to wait for, the ring fails as it would have */
  kolo__v1__agent_report__init(&r);
  r.epoch = 5;
  r.exited = 1;
  assert_true(kolo_agent_warm_join_ready(&r, 5));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_survivor_waits_for_the_members_that_joined_after_its_ring),
      cmocka_unit_test(a_process_that_never_formed_a_ring_waits_for_nobody),
      cmocka_unit_test(a_newcomer_is_up_once_its_process_said_hello_at_the_new_epoch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
