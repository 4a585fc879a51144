/* Unit tests for collective/device.c through the public API, on whatever this
 * machine is: without a GPU (CI), asking a communicator for CUDA buffers is
 * refused with a clear status and it keeps working on host buffers; on a GPU
 * host the same tests check the GPU answers instead of failing. Bad devices,
 * NCCL_COMM_BLOCKING=1 and stream-ordered calls outside CUDA mode are refused
 * the same way on both. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "kolo/kolo.h"

static kolo_comm *single_rank_comm(void) {
  kolo_ring_spec spec = {.epoch = 1, .rank = 0, .size = 1};
  kolo_comm *comm = NULL;
  assert_int_equal(kolo_comm_create(&spec, NULL, &comm), KOLO_OK);
  return comm;
}

/* What kolo_comm_use_cuda answers for a valid device on this machine. */
static kolo_status expected_cuda_answer(void) {
#ifdef KOLO_TEST_HAVE_NCCL
  static int probed = 0;
  static kolo_status answer;
  if (!probed) {
    kolo_comm *comm = single_rank_comm();
    answer = kolo_comm_use_cuda(comm, KOLO_CUDA_LOCAL_DEVICE);
    kolo_comm_destroy(comm);
    probed = 1;
    /* either this machine has a GPU or it says clearly that it has none */
    assert_true(answer == KOLO_OK || answer == KOLO_ERR_NO_DEVICE);
  }
  return answer;
#else
  return KOLO_ERR_UNSUPPORTED;
#endif
}

static void asking_for_cuda_gives_this_machines_answer(void **state) {
  (void)state;
  kolo_comm *comm = single_rank_comm();
  assert_int_equal(kolo_comm_use_cuda(comm, 0), expected_cuda_answer());
  kolo_comm_destroy(comm);
}

static void host_collectives_still_work_after_asking(void **state) {
  (void)state;
  kolo_comm *comm = single_rank_comm();
  (void)kolo_comm_use_cuda(comm, 0);
  float values[3] = {1, 2, 3}, out[3] = {0};
  assert_int_equal(kolo_allreduce(comm, values, out, 3, KOLO_FLOAT32, KOLO_SUM), KOLO_OK);
  assert_true(out[2] == 3.0f);
  assert_int_equal(kolo_comm_error(comm, NULL), KOLO_OK);
  kolo_comm_destroy(comm);
}

static void use_cuda_rejects_a_null_communicator(void **state) {
  (void)state;
  assert_int_equal(kolo_comm_use_cuda(NULL, 0), KOLO_ERR_INVALID_ARG);
}

/* Negative devices used to be mapped by global rank; only the named
 * local-rank choice is a valid negative. */
static void a_negative_device_other_than_the_local_choice_is_refused(void **state) {
  (void)state;
  kolo_comm *comm = single_rank_comm();
#ifdef KOLO_TEST_HAVE_NCCL
  assert_int_equal(kolo_comm_use_cuda(comm, -2), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_comm_use_cuda(comm, -100), KOLO_ERR_INVALID_ARG);
#else
  assert_int_equal(kolo_comm_use_cuda(comm, -2), KOLO_ERR_UNSUPPORTED);
#endif
  assert_int_equal(kolo_comm_use_cuda(comm, KOLO_CUDA_LOCAL_DEVICE), expected_cuda_answer());
  kolo_comm_destroy(comm);
}

static void nccl_comm_blocking_set_to_one_is_refused_up_front(void **state) {
  (void)state;
  kolo_comm *comm = single_rank_comm();
  setenv("NCCL_COMM_BLOCKING", "1", 1);
  kolo_status status = kolo_comm_use_cuda(comm, 0);
  unsetenv("NCCL_COMM_BLOCKING");
#ifdef KOLO_TEST_HAVE_NCCL
  assert_int_equal(status, KOLO_ERR_INVALID_ARG);
#else
  assert_int_equal(status, KOLO_ERR_UNSUPPORTED);
#endif
  kolo_comm_destroy(comm);
}

/* Outside CUDA mode a stream-ordered call is refused the same on every rank
 * (nobody is in CUDA mode), so it must not fail the communicator. */
static void stream_calls_outside_cuda_mode_are_refused_and_the_ring_lives(void **state) {
  (void)state;
  kolo_comm *comm = single_rank_comm();
  float values[4] = {1, 2, 3, 4}, out[4] = {0};
  size_t counts[1];
  kolo_request *request = NULL;
#ifdef KOLO_TEST_HAVE_NCCL
  kolo_status want = KOLO_ERR_STATE;
#else
  kolo_status want = KOLO_ERR_UNSUPPORTED;
#endif
  assert_int_equal(
      kolo_allreduce_on_stream(comm, values, out, 4, KOLO_FLOAT32, KOLO_SUM, NULL, &request), want);
  assert_int_equal(kolo_broadcast_on_stream(comm, values, 4, KOLO_FLOAT32, 0, NULL, &request),
                   want);
  assert_int_equal(
      kolo_allgather_on_stream(comm, values, 4, out, 4, counts, KOLO_FLOAT32, NULL, &request),
      want);
  assert_int_equal(
      kolo_reducescatter_on_stream(comm, values, out, 4, KOLO_FLOAT32, KOLO_MAX, NULL, &request),
      want);
  /* argument errors come first, as for the other forms */
  assert_int_equal(
      kolo_allreduce_on_stream(comm, values, out, 4, KOLO_FLOAT32, KOLO_SUM, NULL, NULL),
      KOLO_ERR_INVALID_ARG);
  assert_int_equal(
      kolo_allreduce_on_stream(comm, values, out, 4, KOLO_DTYPE_COUNT, KOLO_SUM, NULL, &request),
      KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_comm_error(comm, NULL), KOLO_OK);
  assert_int_equal(kolo_allreduce(comm, values, out, 4, KOLO_FLOAT32, KOLO_SUM), KOLO_OK);
  assert_true(out[3] == 4.0f);
  kolo_comm_destroy(comm);
}

/* A host request has no device event and no stream to order. */
static void host_requests_have_no_cuda_event(void **state) {
  (void)state;
  kolo_comm *comm = single_rank_comm();
  float values[2] = {5, 6}, out[2] = {0};
  kolo_request *request = NULL;
  assert_int_equal(kolo_allreduce_async(comm, values, out, 2, KOLO_FLOAT32, KOLO_SUM, &request),
                   KOLO_OK);
  assert_null(kolo_request_cuda_event(request));
  assert_int_equal(kolo_stream_wait(request, NULL), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_wait(request), KOLO_OK);
  assert_true(out[1] == 6.0f);
  assert_null(kolo_request_cuda_event(NULL));
  assert_int_equal(kolo_stream_wait(NULL, NULL), KOLO_ERR_INVALID_ARG);
  kolo_comm_destroy(comm);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(asking_for_cuda_gives_this_machines_answer),
      cmocka_unit_test(host_collectives_still_work_after_asking),
      cmocka_unit_test(use_cuda_rejects_a_null_communicator),
      cmocka_unit_test(a_negative_device_other_than_the_local_choice_is_refused),
      cmocka_unit_test(nccl_comm_blocking_set_to_one_is_refused_up_front),
      cmocka_unit_test(stream_calls_outside_cuda_mode_are_refused_and_the_ring_lives),
      cmocka_unit_test(host_requests_have_no_cuda_event),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
