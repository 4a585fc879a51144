/* Warm joins' pure part (worker/agent/warm_join.h): a survivor waits for exactly the members
 * that joined after the ring its process formed, and a newcomer counts as up only once its
 * process, started for the new epoch or a later one, said HELLO (or already exited). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "worker/agent/warm_join.h"

/* A ring of n members (ids and since_epoch; the rest is not read here) at epoch. */
typedef struct test_ring {
  Kolo__V1__RingRecord r;
  Kolo__V1__RingMember m[4];
  Kolo__V1__RingMember *ptrs[4];
} test_ring;

static void ring_of(test_ring *t, const char *const *ids, const int64_t *since, size_t n,
                    int64_t epoch) {
  kolo__v1__ring_record__init(&t->r);
  t->r.job = "j";
  t->r.epoch = epoch;
  for (size_t i = 0; i < n; i++) {
    kolo__v1__ring_member__init(&t->m[i]);
    t->m[i].worker_id = (char *)ids[i];
    t->m[i].since_epoch = since[i];
    t->ptrs[i] = &t->m[i];
  }
  t->r.n_members = n;
  t->r.members = t->ptrs;
}

static void a_survivor_waits_for_the_members_that_joined_after_its_ring(void **state) {
  (void)state;
  const char *ids[] = {"w1", "w2", "w3", "w4"};
  const int64_t since[] = {1, 3, 5, 5};
  test_ring t;
  ring_of(&t, ids, since, 4, 5);
  const Kolo__V1__RingRecord *ring = &t.r;
  size_t out[4];
  /* w1 formed epoch 4: w3 and w4 joined at 5, w2 was in its ring */
  assert_int_equal(kolo_agent_warm_join_newcomers(ring, "w1", 4, out, 4), 2);
  assert_int_equal(out[0], 2);
  assert_int_equal(out[1], 3);
  /* w3 is one of them: it waits only for w4, and only if its process formed a ring */
  assert_int_equal(kolo_agent_warm_join_newcomers(ring, "w3", 4, out, 4), 1);
  assert_int_equal(out[0], 3);
  /* a process that formed epoch 2 has not seen w2 either */
  assert_int_equal(kolo_agent_warm_join_newcomers(ring, "w1", 2, out, 4), 3);
  /* the count is whole even where out is short */
  assert_int_equal(kolo_agent_warm_join_newcomers(ring, "w1", 2, out, 1), 3);
  assert_int_equal(out[0], 1);
}

static void a_process_that_never_formed_a_ring_waits_for_nobody(void **state) {
  (void)state;
  const char *ids[] = {"w1", "w2"};
  const int64_t since[] = {2, 2};
  test_ring t;
  ring_of(&t, ids, since, 2, 2);
  const Kolo__V1__RingRecord *ring = &t.r;
  size_t out[2];
  assert_int_equal(kolo_agent_warm_join_newcomers(ring, "w1", 0, out, 2), 0);
  /* a ring with no newcomer (a loss, a shrink) holds nothing */
  assert_int_equal(kolo_agent_warm_join_newcomers(ring, "w1", 2, out, 2), 0);
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
