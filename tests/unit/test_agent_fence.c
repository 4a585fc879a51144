/* The partition fence's decision (worker/agent/fence.h): a process is paused once no lease
 * renewal was acknowledged for the TTL less a margin, not before, and continues as soon as one is.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "worker/agent/fence.h"

static void a_renewal_within_the_ttl_keeps_the_process_running(void **state) {
  (void)state;
  assert_int_equal(kolo_agent_fence_decide(10000, 10000, 3000, 0), KOLO_AGENT_FENCE_KEEP);
  assert_int_equal(kolo_agent_fence_decide(12499, 10000, 3000, 0), KOLO_AGENT_FENCE_KEEP);
}

static void a_ttl_less_its_margin_without_renewal_pauses_it_once(void **state) {
  (void)state;
  /* the margin: a quarter of the TTL, at most 500 ms */
  assert_int_equal(kolo_agent_fence_after_ms(3000), 2500);
  assert_int_equal(kolo_agent_fence_after_ms(1000), 750);
  assert_int_equal(kolo_agent_fence_decide(12500, 10000, 3000, 0), KOLO_AGENT_FENCE_PAUSE);
  assert_int_equal(kolo_agent_fence_decide(20000, 10000, 3000, 1), KOLO_AGENT_FENCE_KEEP);
}

static void a_renewal_after_the_pause_continues_it(void **state) {
  (void)state;
  assert_int_equal(kolo_agent_fence_decide(20000, 19900, 3000, 1), KOLO_AGENT_FENCE_RESUME);
  assert_int_equal(kolo_agent_fence_decide(20000, 19900, 3000, 0), KOLO_AGENT_FENCE_KEEP);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_renewal_within_the_ttl_keeps_the_process_running),
      cmocka_unit_test(a_ttl_less_its_margin_without_renewal_pauses_it_once),
      cmocka_unit_test(a_renewal_after_the_pause_continues_it),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
