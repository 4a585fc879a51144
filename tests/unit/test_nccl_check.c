/* Unit tests for collective/nccl/nccl_check.c: a collective's arguments are
 * validated before anything is enqueued: bad types, roots, counts, host buffers
 * and overlaps other than NCCL's in-place forms are refused with a reason.
 * "Device memory" here is an arena the pointer check recognises. Needs no GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "nccl_internal.h"

static char arena[1 << 16]; /* stands for memory on device 0 */
static char host[256];      /* ordinary host memory */

static int arena_on_device_0(const void *ptr, int device) {
  const char *p = ptr;
  return device == 0 && p >= arena && p < arena + sizeof arena;
}

/* rank 1 of 4 on device 0 */
static kolo_status check(const kolo_nccl_op_desc *d, char *message) {
  return kolo_nccl_check_op(1, 4, 0, d, arena_on_device_0, message, 256);
}

static kolo_nccl_op_desc allreduce(const void *send, void *recv, size_t count) {
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_ALLREDUCE, .send = send, .recv = recv, .count = count,
                         .dtype = KOLO_FLOAT32, .op = KOLO_SUM};
  return d;
}

static void a_valid_allreduce_passes_out_of_place_and_in_place(void **state) {
  (void)state;
  char msg[256];
  kolo_nccl_op_desc d = allreduce(arena, arena + 4096, 100);
  assert_int_equal(check(&d, msg), KOLO_OK);
  d = allreduce(arena, arena, 100);
  assert_int_equal(check(&d, msg), KOLO_OK);
}

static void an_unknown_dtype_op_or_kind_is_refused(void **state) {
  (void)state;
  char msg[256];
  kolo_nccl_op_desc d = allreduce(arena, arena + 4096, 10);
  d.dtype = KOLO_DTYPE_COUNT;
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(msg, "dtype"));
  d = allreduce(arena, arena + 4096, 10);
  d.op = KOLO_OP_COUNT;
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(msg, "op"));
  d.kind = (kolo_nccl_kind)99;
  d.op = KOLO_SUM;
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(msg, "kind"));
}

static void a_host_buffer_is_refused_with_its_name(void **state) {
  (void)state;
  char msg[256];
  kolo_nccl_op_desc d = allreduce(host, arena, 10);
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(msg, "send is not device memory"));
  d = allreduce(arena, host, 10);
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(msg, "recv is not device memory"));
  /* Memory of another device is refused the same way. */
  assert_int_equal(kolo_nccl_check_op(0, 2, 1, &d, arena_on_device_0, msg, sizeof msg),
                   KOLO_ERR_INVALID_ARG);
}

static void empty_operations_need_no_buffers(void **state) {
  (void)state;
  char msg[256];
  kolo_nccl_op_desc d = allreduce(NULL, NULL, 0);
  assert_int_equal(check(&d, msg), KOLO_OK);
  d = allreduce(NULL, arena, 4);
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(msg, "send is NULL"));
}

static void a_broadcast_root_outside_the_ring_is_refused(void **state) {
  (void)state;
  char msg[256];
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_BROADCAST, .recv = arena, .count = 8,
                         .dtype = KOLO_INT64, .root = 4};
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(msg, "root 4"));
  d.root = -1;
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG);
  d.root = 3;
  d.send = host; /* ignored: broadcast is in place on recv */
  assert_int_equal(check(&d, msg), KOLO_OK);
}

static void allgather_in_place_means_send_at_the_ranks_own_block(void **state) {
  (void)state;
  char msg[256];
  /* rank 1, count 10 float32: its block of recv starts 40 bytes in. */
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_ALLGATHER, .send = arena + 40, .recv = arena,
                         .count = 10, .dtype = KOLO_FLOAT32};
  assert_int_equal(check(&d, msg), KOLO_OK);
  d.send = arena; /* rank 0's block: would be overwritten */
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(msg, "overlap"));
  d.send = arena + 160; /* just past recv (4 * 40 bytes): no overlap */
  assert_int_equal(check(&d, msg), KOLO_OK);
}

static void reducescatter_in_place_means_recv_at_the_ranks_own_block(void **state) {
  (void)state;
  char msg[256];
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_REDUCESCATTER, .send = arena, .recv = arena + 40,
                         .count = 10, .dtype = KOLO_FLOAT32, .op = KOLO_MAX};
  assert_int_equal(check(&d, msg), KOLO_OK);
  d.recv = arena + 44; /* overlapping, but not the rank's block */
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG);
}

static void allgatherv_needs_counts_and_uses_the_ranks_offset(void **state) {
  (void)state;
  char msg[256];
  size_t counts[4] = {3, 5, 0, 7};
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_ALLGATHERV, .send = arena + 3 * 8, .recv = arena,
                         .dtype = KOLO_INT64, .count = SIZE_MAX /* unused */};
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG); /* no counts */
  d.counts = counts;
  assert_int_equal(check(&d, msg), KOLO_OK); /* in place at offset 3 */
  d.send = arena + 8;
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG);
}

static void counts_whose_byte_size_overflows_are_too_large(void **state) {
  (void)state;
  char msg[256];
  kolo_nccl_op_desc d = allreduce(arena, arena + 4096, SIZE_MAX / 2);
  assert_int_equal(check(&d, msg), KOLO_ERR_TOO_LARGE);
  d.kind = KOLO_NCCL_ALLGATHER;
  d.count = SIZE_MAX / 8; /* times 4 ranks times 4 bytes overflows */
  assert_int_equal(check(&d, msg), KOLO_ERR_TOO_LARGE);
  size_t counts[4] = {SIZE_MAX / 16, SIZE_MAX / 16, 1, 1};
  kolo_nccl_op_desc v = {.kind = KOLO_NCCL_ALLGATHERV, .send = arena, .recv = arena + 64,
                         .counts = counts, .dtype = KOLO_FLOAT64};
  assert_int_equal(check(&v, msg), KOLO_ERR_TOO_LARGE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_valid_allreduce_passes_out_of_place_and_in_place),
      cmocka_unit_test(an_unknown_dtype_op_or_kind_is_refused),
      cmocka_unit_test(a_host_buffer_is_refused_with_its_name),
      cmocka_unit_test(empty_operations_need_no_buffers),
      cmocka_unit_test(a_broadcast_root_outside_the_ring_is_refused),
      cmocka_unit_test(allgather_in_place_means_send_at_the_ranks_own_block),
      cmocka_unit_test(reducescatter_in_place_means_recv_at_the_ranks_own_block),
      cmocka_unit_test(allgatherv_needs_counts_and_uses_the_ranks_offset),
      cmocka_unit_test(counts_whose_byte_size_overflows_are_too_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
