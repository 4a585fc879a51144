/* Unit tests for kolo_nccl on a machine without a GPU (this one, CI): every entry
 * point that needs a device really calls the CUDA runtime and answers
 * KOLO_ERR_NO_DEVICE with a clear message; none crashes or hangs. On a machine
 * that has a GPU the whole program reports itself skipped to CTest (exit 77;
 * label nogpu), and test_device and tests/gpu check that machine instead. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kolo_nccl.h"
#include "../support/skip.h"

static void counting_devices_says_no_device_and_why(void **state) {
  (void)state;
  int n = -1;
  char message[256] = "untouched";
  assert_int_equal(kolo_nccl_device_count(&n, message, sizeof message), KOLO_ERR_NO_DEVICE);
  assert_int_equal(n, 0);
  /* The runtime's own reason (e.g. cudaErrorInsufficientDriver / cudaErrorNoDevice). */
  assert_true(strstr(message, "cuda") != NULL || strstr(message, "CUDA") != NULL);
  /* Asking twice gives the same answer (no sticky state, no crash). */
  assert_int_equal(kolo_nccl_device_count(&n, NULL, 0), KOLO_ERR_NO_DEVICE);
}

static void asking_for_a_device_buffer_says_no_device(void **state) {
  (void)state;
  void *p = (void *)0x1;
  assert_int_equal(kolo_nccl_device_alloc(0, 4096, &p), KOLO_ERR_NO_DEVICE);
  assert_null(p);
  kolo_nccl_device_free(NULL);
}

static void copying_to_or_from_a_device_says_no_device(void **state) {
  (void)state;
  char host[16] = {0}, other[16] = {0};
  assert_int_equal(kolo_nccl_copy_to_device(other, host, sizeof host), KOLO_ERR_NO_DEVICE);
  assert_int_equal(kolo_nccl_copy_to_host(host, other, sizeof host), KOLO_ERR_NO_DEVICE);
  assert_int_equal(kolo_nccl_copy(host, other, sizeof host), KOLO_ERR_NO_DEVICE);
}

static void asking_for_a_communicator_says_no_device(void **state) {
  (void)state;
  uint8_t id[KOLO_NCCL_ID_BYTES] = {0};
  kolo_nccl_comm *comm = (kolo_nccl_comm *)0x1;
  assert_int_equal(kolo_nccl_comm_create(id, 0, 2, 0, 1000, &comm), KOLO_ERR_NO_DEVICE);
  assert_null(comm);
  kolo_nccl_options options = {.device = 0, .timeout_ms = 1000, .op_timeout_ms = 5000};
  assert_int_equal(kolo_nccl_comm_create_with(id, 1, 2, &options, &comm), KOLO_ERR_NO_DEVICE);
  assert_null(comm);
}

/* A negative device used to be taken as "global rank modulo the device count",
 * which puts ranks of a second host on the wrong GPUs: it is refused, before
 * the device is even looked at. */
static void a_negative_device_is_refused(void **state) {
  (void)state;
  uint8_t id[KOLO_NCCL_ID_BYTES] = {0};
  kolo_nccl_comm *comm = (kolo_nccl_comm *)0x1;
  assert_int_equal(kolo_nccl_comm_create(id, 1, 2, -1, 1000, &comm), KOLO_ERR_INVALID_ARG);
  assert_null(comm);
  kolo_nccl_options options = {.device = -3};
  assert_int_equal(kolo_nccl_comm_create_with(id, 0, 1, &options, &comm), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_comm_create_with(id, 0, 1, NULL, &comm), KOLO_ERR_INVALID_ARG);
}

/* NCCL_COMM_BLOCKING=1 would override config.blocking = 0 and make creation
 * wait for a missing peer with no deadline: refused with INVALID_ARG whatever
 * the device situation. */
static void nccl_comm_blocking_set_to_one_is_refused(void **state) {
  (void)state;
  uint8_t id[KOLO_NCCL_ID_BYTES] = {0};
  kolo_nccl_comm *comm = NULL;
  setenv("NCCL_COMM_BLOCKING", "1", 1);
  assert_int_equal(kolo_nccl_comm_create(id, 0, 2, 0, 1000, &comm), KOLO_ERR_INVALID_ARG);
  assert_null(comm);
  setenv("NCCL_COMM_BLOCKING", "0", 1); /* what kolo asks for anyway: fine */
  kolo_status st = kolo_nccl_comm_create(id, 0, 2, 0, 1000, &comm);
  unsetenv("NCCL_COMM_BLOCKING");
  assert_int_not_equal(st, KOLO_ERR_INVALID_ARG);
}

static void a_communicator_from_a_ring_spec_says_no_device(void **state) {
  (void)state;
  uint8_t id[KOLO_NCCL_ID_BYTES] = {0};
  kolo_ring_spec spec;
  memset(&spec, 0, sizeof spec);
  spec.epoch = 3;
  spec.rank = 0;
  spec.size = 1;
  spec.nccl_id = id;
  kolo_nccl_comm *comm = NULL;
  assert_int_equal(kolo_nccl_comm_create_from_spec(&spec, -1, &comm), KOLO_ERR_NO_DEVICE);
  assert_null(comm);
  spec.nccl_id = NULL; /* bad input is still reported as such */
  assert_int_equal(kolo_nccl_comm_create_from_spec(&spec, 0, &comm), KOLO_ERR_INVALID_ARG);
}

static void making_a_unique_id_says_no_device(void **state) {
  (void)state;
  uint8_t id[KOLO_NCCL_ID_BYTES];
  memset(id, 0x77, sizeof id);
  assert_int_equal(kolo_nccl_id_create(id), KOLO_ERR_NO_DEVICE);
  assert_int_equal(id[0], 0x77);
}

static void host_memory_is_never_taken_for_device_memory(void **state) {
  (void)state;
  int stack_value = 5;
  void *heap = malloc(64);
  assert_non_null(heap);
  assert_int_equal(kolo_nccl_is_device_pointer(&stack_value), 0);
  assert_int_equal(kolo_nccl_is_device_pointer(heap), 0);
  assert_int_equal(kolo_nccl_is_device_pointer(NULL), 0);
  assert_int_equal(kolo_nccl_is_device_pointer_on(heap, 0), 0);
  assert_int_equal(kolo_nccl_is_device_pointer_on(NULL, -1), 0);
  int is_device = 1, device = 7;
  assert_int_equal(kolo_nccl_pointer_device(heap, &is_device, &device), KOLO_ERR_NO_DEVICE);
  assert_int_equal(is_device, 0);
  assert_int_equal(device, -1);
  free(heap);
}

static void bad_arguments_are_refused_before_the_device_check(void **state) {
  (void)state;
  uint8_t id[KOLO_NCCL_ID_BYTES] = {0};
  kolo_nccl_comm *comm = NULL;
  assert_int_equal(kolo_nccl_comm_create(id, 2, 2, 0, 1000, &comm), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_comm_create(id, -1, 2, 0, 1000, &comm), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_comm_create(id, 0, 0, 0, 1000, &comm), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_comm_create(NULL, 0, 1, 0, 1000, &comm), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_comm_create(id, 0, 1, 0, 1000, NULL), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_device_count(NULL, NULL, 0), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_device_alloc(0, 16, NULL), KOLO_ERR_INVALID_ARG);
}

static void operations_without_a_communicator_are_refused(void **state) {
  (void)state;
  kolo_nccl_request *req = (kolo_nccl_request *)0x1;
  int x = 0;
  assert_int_equal(kolo_nccl_allreduce_async(NULL, &x, &x, 1, KOLO_FLOAT32, KOLO_SUM, &req),
                   KOLO_ERR_INVALID_ARG);
  assert_null(req);
  assert_int_equal(kolo_nccl_broadcast_async(NULL, &x, 1, KOLO_INT32, 0, &req),
                   KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_allgather_async(NULL, &x, 1, &x, KOLO_INT32, &req),
                   KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_reducescatter_async(NULL, &x, &x, 1, KOLO_INT32, KOLO_MAX, &req),
                   KOLO_ERR_INVALID_ARG);
  size_t counts[1] = {1};
  assert_int_equal(kolo_nccl_allgatherv_async(NULL, &x, &x, counts, KOLO_INT32, &req),
                   KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_exchange_counts(NULL, 1, counts), KOLO_ERR_INVALID_ARG);
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_ALLREDUCE,
                         .send = &x,
                         .recv = &x,
                         .count = 1,
                         .dtype = KOLO_INT32,
                         .op = KOLO_SUM};
  assert_int_equal(kolo_nccl_group_after(NULL, &d, 1, NULL, &req), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_stream_wait(NULL, NULL), KOLO_ERR_INVALID_ARG);
  assert_null(kolo_nccl_request_event(NULL));
  assert_int_equal(kolo_nccl_comm_wait_aborted(NULL, 10), KOLO_ERR_INVALID_ARG);
  int done = 0;
  kolo_status st = KOLO_OK;
  assert_int_equal(kolo_nccl_test(NULL, &done, &st), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_wait(NULL), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_comm_error(NULL, NULL, 0), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_comm_state(NULL), KOLO_NCCL_STATE_DESTROYED);
  kolo_nccl_comm_abort(NULL);
  kolo_nccl_comm_destroy(NULL);
}

static void versions_are_reported_without_a_device(void **state) {
  (void)state;
  char text[128];
  kolo_nccl_versions(text, sizeof text);
  assert_non_null(strstr(text, "NCCL 2."));
  assert_non_null(strstr(text, "CUDA runtime "));
  char tiny[6];
  kolo_nccl_versions(tiny, sizeof tiny);
  assert_int_equal(strlen(tiny), sizeof tiny - 1);
  kolo_nccl_versions(NULL, 0);
}

int main(void) {
  int n = 0;
  if (kolo_nccl_device_count(&n, NULL, 0) == KOLO_OK)
    KOLO_TEST_SKIP("a CUDA device is present (%d): this test is for machines without one", n);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(counting_devices_says_no_device_and_why),
      cmocka_unit_test(asking_for_a_device_buffer_says_no_device),
      cmocka_unit_test(copying_to_or_from_a_device_says_no_device),
      cmocka_unit_test(asking_for_a_communicator_says_no_device),
      cmocka_unit_test(a_negative_device_is_refused),
      cmocka_unit_test(nccl_comm_blocking_set_to_one_is_refused),
      cmocka_unit_test(a_communicator_from_a_ring_spec_says_no_device),
      cmocka_unit_test(making_a_unique_id_says_no_device),
      cmocka_unit_test(host_memory_is_never_taken_for_device_memory),
      cmocka_unit_test(bad_arguments_are_refused_before_the_device_check),
      cmocka_unit_test(operations_without_a_communicator_are_refused),
      cmocka_unit_test(versions_are_reported_without_a_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
