/* Unit tests for collective/nccl/nccl_map.c: ncclResult_t and cudaError_t become
 * the kolo_status callers branch on, with the library's text, and kolo dtypes and
 * ops map to NCCL's. Needs no GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "nccl_internal.h"

static void a_dead_peer_in_nccl_becomes_peer_lost(void **state) {
  (void)state;
  assert_int_equal(kolo_nccl_status_from_nccl(ncclRemoteError), KOLO_ERR_PEER_LOST);
}

/* ncclSystemError covers local faults too (a full /dev/shm, no fds left): it
 * must not name a peer as lost. */
static void a_system_error_in_nccl_is_not_taken_for_a_lost_peer(void **state) {
  (void)state;
  assert_int_equal(kolo_nccl_status_from_nccl(ncclSystemError), KOLO_ERR_SYSTEM);
}

static void other_nccl_results_map_to_their_own_codes(void **state) {
  (void)state;
  assert_int_equal(kolo_nccl_status_from_nccl(ncclSuccess), KOLO_OK);
  assert_int_equal(kolo_nccl_status_from_nccl(ncclUnhandledCudaError), KOLO_ERR_DEVICE);
  assert_int_equal(kolo_nccl_status_from_nccl(ncclInvalidArgument), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_status_from_nccl(ncclInvalidUsage), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_status_from_nccl(ncclInternalError), KOLO_ERR_NCCL);
  assert_int_equal(kolo_nccl_status_from_nccl(ncclInProgress), KOLO_ERR_INTERNAL);
  assert_int_equal(kolo_nccl_status_from_nccl((ncclResult_t)99), KOLO_ERR_NCCL);
}

static void a_missing_gpu_or_driver_becomes_no_device(void **state) {
  (void)state;
  assert_int_equal(kolo_nccl_status_from_cuda(cudaErrorNoDevice), KOLO_ERR_NO_DEVICE);
  assert_int_equal(kolo_nccl_status_from_cuda(cudaErrorInsufficientDriver), KOLO_ERR_NO_DEVICE);
  assert_int_equal(kolo_nccl_status_from_cuda(cudaErrorStubLibrary), KOLO_ERR_NO_DEVICE);
  assert_int_equal(kolo_nccl_status_from_cuda(cudaErrorInvalidDevice), KOLO_ERR_NO_DEVICE);
  assert_int_equal(kolo_nccl_status_from_cuda(cudaErrorDevicesUnavailable), KOLO_ERR_NO_DEVICE);
}

static void other_cuda_errors_map_to_their_own_codes(void **state) {
  (void)state;
  assert_int_equal(kolo_nccl_status_from_cuda(cudaSuccess), KOLO_OK);
  assert_int_equal(kolo_nccl_status_from_cuda(cudaErrorMemoryAllocation), KOLO_ERR_NO_MEMORY);
  assert_int_equal(kolo_nccl_status_from_cuda(cudaErrorInvalidValue), KOLO_ERR_INVALID_ARG);
  /* a stream handle the runtime refuses is the caller's bad argument */
  assert_int_equal(kolo_nccl_status_from_cuda(cudaErrorInvalidResourceHandle),
                   KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_status_from_cuda(cudaErrorLaunchFailure), KOLO_ERR_DEVICE);
  assert_int_equal(kolo_nccl_status_from_cuda(cudaErrorIllegalAddress), KOLO_ERR_DEVICE);
  assert_int_equal(kolo_nccl_status_from_cuda(cudaErrorNotReady), KOLO_ERR_INTERNAL);
}

static void nccl_descriptions_carry_the_library_message(void **state) {
  (void)state;
  char buf[512];
  kolo_nccl_describe_nccl(ncclRemoteError, "ncclAllReduce", "peer 3 closed", buf, sizeof buf);
  assert_non_null(strstr(buf, "ncclAllReduce: ncclRemoteError: "));
  assert_non_null(strstr(buf, ncclGetErrorString(ncclRemoteError)));
  assert_non_null(strstr(buf, "(peer 3 closed)"));
  char want[512];
  snprintf(want, sizeof want, "init: ncclSystemError: %s", ncclGetErrorString(ncclSystemError));
  kolo_nccl_describe_nccl(ncclSystemError, "init", NULL, buf, sizeof buf);
  assert_string_equal(buf, want); /* no last-error suffix when there is none */
  kolo_nccl_describe_nccl(ncclSystemError, "init", "", buf, sizeof buf);
  assert_string_equal(buf, want);
  /* A tiny buffer is truncated, never overrun. */
  char tiny[8];
  kolo_nccl_describe_nccl(ncclSystemError, "init", NULL, tiny, sizeof tiny);
  assert_int_equal(strlen(tiny), sizeof tiny - 1);
}

static void cuda_descriptions_carry_the_library_message(void **state) {
  (void)state;
  char buf[512];
  kolo_nccl_describe_cuda(cudaErrorInsufficientDriver, "cudaGetDeviceCount", buf, sizeof buf);
  assert_non_null(strstr(buf, "cudaGetDeviceCount: cudaErrorInsufficientDriver: "));
  assert_non_null(strstr(buf, cudaGetErrorString(cudaErrorInsufficientDriver)));
}

static void every_kolo_dtype_maps_to_the_matching_nccl_type(void **state) {
  (void)state;
  const struct {
    kolo_dtype k;
    ncclDataType_t n;
    size_t size;
  } table[] = {
      {KOLO_UINT8, ncclUint8, 1},       {KOLO_INT32, ncclInt32, 4},
      {KOLO_INT64, ncclInt64, 8},       {KOLO_FLOAT16, ncclFloat16, 2},
      {KOLO_BFLOAT16, ncclBfloat16, 2}, {KOLO_FLOAT32, ncclFloat32, 4},
      {KOLO_FLOAT64, ncclFloat64, 8},   {KOLO_INT8, ncclInt8, 1},
      {KOLO_INT16, ncclFloat16, 2}, /* a carrier: NCCL has no int16 */
      {KOLO_BOOL, ncclUint8, 1},
  };
  assert_int_equal(sizeof table / sizeof table[0], KOLO_DTYPE_COUNT);
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    ncclDataType_t out = ncclNumTypes;
    assert_int_equal(kolo_nccl_dtype_to_nccl(table[i].k, &out), KOLO_OK);
    assert_int_equal(out, table[i].n);
    assert_int_equal(kolo_nccl_dtype_size(table[i].k), table[i].size);
  }
}

static void an_unknown_dtype_is_refused(void **state) {
  (void)state;
  ncclDataType_t out = ncclNumTypes;
  assert_int_equal(kolo_nccl_dtype_to_nccl(KOLO_DTYPE_COUNT, &out), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_nccl_dtype_to_nccl((kolo_dtype)-1, &out), KOLO_ERR_INVALID_ARG);
  assert_int_equal(out, ncclNumTypes);
  assert_int_equal(kolo_nccl_dtype_size(KOLO_DTYPE_COUNT), 0);
}

static void every_kolo_op_maps_to_the_matching_nccl_op(void **state) {
  (void)state;
  const struct {
    kolo_op k;
    ncclRedOp_t n;
  } table[] = {
      {KOLO_SUM, ncclSum}, {KOLO_AVG, ncclAvg},   {KOLO_MIN, ncclMin},
      {KOLO_MAX, ncclMax}, {KOLO_PROD, ncclProd},
  };
  assert_int_equal(sizeof table / sizeof table[0], KOLO_OP_COUNT);
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    ncclRedOp_t out = ncclNumOps;
    assert_int_equal(kolo_nccl_op_to_nccl(table[i].k, &out), KOLO_OK);
    assert_int_equal(out, table[i].n);
  }
}

static void an_unknown_op_is_refused(void **state) {
  (void)state;
  ncclRedOp_t out = ncclNumOps;
  assert_int_equal(kolo_nccl_op_to_nccl(KOLO_OP_COUNT, &out), KOLO_ERR_INVALID_ARG);
  assert_int_equal(out, ncclNumOps);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_dead_peer_in_nccl_becomes_peer_lost),
      cmocka_unit_test(a_system_error_in_nccl_is_not_taken_for_a_lost_peer),
      cmocka_unit_test(other_nccl_results_map_to_their_own_codes),
      cmocka_unit_test(a_missing_gpu_or_driver_becomes_no_device),
      cmocka_unit_test(other_cuda_errors_map_to_their_own_codes),
      cmocka_unit_test(nccl_descriptions_carry_the_library_message),
      cmocka_unit_test(cuda_descriptions_carry_the_library_message),
      cmocka_unit_test(every_kolo_dtype_maps_to_the_matching_nccl_type),
      cmocka_unit_test(an_unknown_dtype_is_refused),
      cmocka_unit_test(every_kolo_op_maps_to_the_matching_nccl_op),
      cmocka_unit_test(an_unknown_op_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
