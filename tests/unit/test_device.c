/* Unit tests for collective/device.c on a machine without a GPU: asking a
 * communicator for CUDA buffers is refused with a clear status, and the
 * communicator keeps working on host buffers afterwards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kolo/kolo.h"

static kolo_comm *single_rank_comm(void) {
  kolo_ring_spec spec = {.epoch = 1, .rank = 0, .size = 1};
  kolo_comm *comm = NULL;
  assert_int_equal(kolo_comm_create(&spec, NULL, &comm), KOLO_OK);
  return comm;
}

static void asking_for_cuda_without_a_device_is_refused_clearly(void **state) {
  (void)state;
  kolo_comm *comm = single_rank_comm();
  kolo_status status = kolo_comm_use_cuda(comm, 0);
#ifdef KOLO_TEST_HAVE_NCCL
  assert_int_equal(status, KOLO_ERR_NO_DEVICE);
#else
  assert_int_equal(status, KOLO_ERR_UNSUPPORTED);
#endif
  kolo_comm_destroy(comm);
}

static void host_collectives_still_work_after_the_refusal(void **state) {
  (void)state;
  kolo_comm *comm = single_rank_comm();
  assert_int_not_equal(kolo_comm_use_cuda(comm, 0), KOLO_OK);
  float values[3] = {1, 2, 3}, out[3] = {0};
  assert_int_equal(kolo_allreduce(comm, values, out, 3, KOLO_FLOAT32, KOLO_SUM), KOLO_OK);
  assert_true(out[2] == 3.0f);
  kolo_comm_destroy(comm);
}

static void use_cuda_rejects_a_null_communicator(void **state) {
  (void)state;
  assert_int_equal(kolo_comm_use_cuda(NULL, 0), KOLO_ERR_INVALID_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(asking_for_cuda_without_a_device_is_refused_clearly),
      cmocka_unit_test(host_collectives_still_work_after_the_refusal),
      cmocka_unit_test(use_cuda_rejects_a_null_communicator),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
