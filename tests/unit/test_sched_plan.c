/* The scheduler's pure decisions: gang admission, the reaction to lost
 * members, ring order across epochs and local ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "scheduler/plan.h"

static void a_job_waits_until_min_workers_are_idle(void **state) {
  (void)state;
  assert_int_equal(kolo_sched_gang_take(2, 3, 4), 0);
  assert_int_equal(kolo_sched_gang_take(3, 3, 4), 3);
}

static void a_job_takes_at_most_max_workers(void **state) {
  (void)state;
  assert_int_equal(kolo_sched_gang_take(10, 2, 4), 4);
  assert_int_equal(kolo_sched_gang_take(10, 2, 0), 2); /* max below min means min */
}

static void a_loss_with_enough_survivors_reforms(void **state) {
  (void)state;
  size_t take = 99;
  assert_int_equal(kolo_sched_on_loss(2, 0, 2, 3, 0, 5, &take), KOLO_SCHED_REFORM);
  assert_int_equal(take, 0);
}

static void a_loss_fills_up_with_idle_workers_to_max(void **state) {
  (void)state;
  size_t take = 0;
  assert_int_equal(kolo_sched_on_loss(2, 5, 2, 4, 0, 5, &take), KOLO_SCHED_REFORM);
  assert_int_equal(take, 2);
}

static void idle_workers_can_lift_a_loss_back_to_min(void **state) {
  (void)state;
  size_t take = 0;
  assert_int_equal(kolo_sched_on_loss(1, 1, 2, 3, 0, 5, &take), KOLO_SCHED_REFORM);
  assert_int_equal(take, 1);
}

static void a_loss_below_min_waits(void **state) {
  (void)state;
  size_t take = 7;
  assert_int_equal(kolo_sched_on_loss(1, 0, 2, 3, 0, 5, &take), KOLO_SCHED_WAIT);
  assert_int_equal(take, 0);
}

static void a_loss_past_max_reconfigurations_fails(void **state) {
  (void)state;
  size_t take;
  assert_int_equal(kolo_sched_on_loss(2, 0, 1, 3, 1, 1, &take), KOLO_SCHED_FAIL);
  assert_int_equal(kolo_sched_on_loss(2, 0, 1, 3, 0, 1, &take), KOLO_SCHED_REFORM);
}

static void zero_max_reconfigurations_means_the_default(void **state) {
  (void)state;
  size_t take;
  assert_int_equal(
      kolo_sched_on_loss(2, 0, 1, 3, KOLO_SCHED_DEFAULT_MAX_RECONFIGURATIONS - 1, 0, &take),
      KOLO_SCHED_REFORM);
  assert_int_equal(
      kolo_sched_on_loss(2, 0, 1, 3, KOLO_SCHED_DEFAULT_MAX_RECONFIGURATIONS, 0, &take),
      KOLO_SCHED_FAIL);
}

static void survivors_keep_their_order_and_newcomers_follow(void **state) {
  (void)state;
  const char *survivors[] = {"w1", "w3"};
  const char *newcomers[] = {"w4", "w5"};
  const char *out[4];
  assert_int_equal(kolo_sched_plan_ring(survivors, 2, newcomers, 2, 4, out), 4);
  assert_string_equal(out[0], "w1");
  assert_string_equal(out[1], "w3");
  assert_string_equal(out[2], "w4");
  assert_string_equal(out[3], "w5");
}

static void a_shrink_keeps_rank_zero_and_drops_the_highest_ranks(void **state) {
  (void)state;
  const char *survivors[] = {"w2", "w1", "w3"};
  const char *out[3];
  assert_int_equal(kolo_sched_plan_ring(survivors, 3, NULL, 0, 2, out), 2);
  assert_string_equal(out[0], "w2");
  assert_string_equal(out[1], "w1");
}

static void local_ranks_count_members_on_the_same_host(void **state) {
  (void)state;
  const char *hosts[] = {"a", "b", "a", "a"};
  int rank[4], size[4];
  kolo_sched_local_ranks(hosts, 4, rank, size);
  assert_int_equal(rank[0], 0);
  assert_int_equal(rank[2], 1);
  assert_int_equal(rank[3], 2);
  assert_int_equal(size[0], 3);
  assert_int_equal(rank[1], 0);
  assert_int_equal(size[1], 1);
}

/* One pass over a pending queue (oldest first), as scheduler.c walks it:
 * takes[i] = workers job i gets, idle shrinking as jobs start. */
static void queue_pass(size_t capacity, size_t idle, const uint32_t *min, const uint32_t *max,
                       size_t n, size_t *takes) {
  kolo_sched_queue q = {.capacity = capacity, .held = 0};
  for (size_t i = 0; i < n; i++) {
    takes[i] = kolo_sched_queue_admit(&q, idle, min[i], max[i]);
    idle -= takes[i];
  }
}

/* The start-order rule: oldest first, and a waiting job that fits the cluster is
 * never overtaken, even by a job that would fit the idle workers now. */
static void pending_jobs_start_oldest_first_and_a_waiting_job_is_not_overtaken(void **state) {
  (void)state;
  size_t t[3];
  const uint32_t min1[] = {2, 1}, max1[] = {2, 1};
  queue_pass(4, 1, min1, max1, 2, t); /* 3 busy, 1 idle: job 0 waits, job 1 must not pass it */
  assert_int_equal(t[0], 0);
  assert_int_equal(t[1], 0);
  queue_pass(4, 3, min1, max1, 2, t); /* workers freed: both start, in order */
  assert_int_equal(t[0], 2);
  assert_int_equal(t[1], 1);
  const uint32_t min2[] = {2, 1}, max2[] = {4, 1};
  queue_pass(4, 4, min2, max2, 2, t); /* the older job takes up to its max first */
  assert_int_equal(t[0], 4);
  assert_int_equal(t[1], 0);
}

/* #12 item 9: a job larger than the whole cluster no longer blocks every later
 * job (before: strict FIFO, the queue stuck forever); once workers join and it
 * fits, it holds the queue again so it is not starved. */
static void a_job_larger_than_the_cluster_lets_smaller_jobs_run_past_it(void **state) {
  (void)state;
  size_t t[3];
  const uint32_t min[] = {3, 2, 1}, max[] = {3, 2, 1};
  queue_pass(2, 2, min, max, 3, t);
  assert_int_equal(t[0], 0);
  assert_int_equal(t[1], 2);        /* backfilled past job 0 */
  assert_int_equal(t[2], 0);        /* no idle left; job 1 started, so nothing held it */
  queue_pass(3, 2, min, max, 3, t); /* a third worker registered (busy): job 0 fits now and holds */
  assert_int_equal(t[0], 0);
  assert_int_equal(t[1], 0);
  assert_int_equal(t[2], 0);
  queue_pass(3, 3, min, max, 3, t);
  assert_int_equal(t[0], 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_job_waits_until_min_workers_are_idle),
      cmocka_unit_test(a_job_takes_at_most_max_workers),
      cmocka_unit_test(pending_jobs_start_oldest_first_and_a_waiting_job_is_not_overtaken),
      cmocka_unit_test(a_job_larger_than_the_cluster_lets_smaller_jobs_run_past_it),
      cmocka_unit_test(a_loss_with_enough_survivors_reforms),
      cmocka_unit_test(a_loss_fills_up_with_idle_workers_to_max),
      cmocka_unit_test(idle_workers_can_lift_a_loss_back_to_min),
      cmocka_unit_test(a_loss_below_min_waits),
      cmocka_unit_test(a_loss_past_max_reconfigurations_fails),
      cmocka_unit_test(zero_max_reconfigurations_means_the_default),
      cmocka_unit_test(survivors_keep_their_order_and_newcomers_follow),
      cmocka_unit_test(a_shrink_keeps_rank_zero_and_drops_the_highest_ranks),
      cmocka_unit_test(local_ranks_count_members_on_the_same_host),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
