/* Unit tests for collective/nccl/nccl_check.c: a collective's arguments are
 * validated before anything is enqueued: bad types, roots, counts, host buffers
 * and buffers that run past their allocation are refused with a reason; overlaps
 * other than NCCL's in-place forms are staged, never refused, so every rank
 * decides alike. "Device memory" here is an arena the pointer check recognises
 * as one allocation. Needs no GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "nccl_internal.h"

static char arena[1 << 16]; /* stands for memory on device 0 */
static char host[256];      /* ordinary host memory */

static size_t last_bytes; /* the byte length the last check asked about */

static int arena_on_device_0(const void *ptr, size_t bytes, int device) {
  const char *p = ptr;
  last_bytes = bytes;
  return device == 0 && p >= arena && p < arena + sizeof arena &&
         bytes <= (size_t)(arena + sizeof arena - p);
}

static int staged;

/* rank 1 of 4 on device 0 */
static kolo_status check_rank(int rank, const kolo_nccl_op_desc *d, char *message) {
  return kolo_nccl_check_op(rank, 4, 0, d, arena_on_device_0, &staged, message, 256);
}

static kolo_status check(const kolo_nccl_op_desc *d, char *message) {
  return check_rank(1, d, message);
}

static kolo_nccl_op_desc allreduce(const void *send, void *recv, size_t count) {
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_ALLREDUCE,
                         .send = send,
                         .recv = recv,
                         .count = count,
                         .dtype = KOLO_FLOAT32,
                         .op = KOLO_SUM};
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

/* NCCL has no int16 (it moves as a 2-byte carrier, never reduces) and bool is
 * 0/1 bytes, whose NCCL sum would not be "any": both refused with a reason. */
static void int16_and_bool_reductions_the_gpu_cannot_do_are_refused(void **state) {
  (void)state;
  char msg[256];
  kolo_nccl_op_desc d = allreduce(arena, arena + 4096, 10);
  d.dtype = KOLO_INT16;
  assert_int_equal(check(&d, msg), KOLO_ERR_UNSUPPORTED);
  assert_non_null(strstr(msg, "int16"));
  d.dtype = KOLO_BOOL;
  assert_int_equal(check(&d, msg), KOLO_ERR_UNSUPPORTED);
  assert_non_null(strstr(msg, "bool"));
  d.op = KOLO_MAX;
  assert_int_equal(check(&d, msg), KOLO_OK);
  d.dtype = KOLO_INT8;
  d.op = KOLO_SUM;
  assert_int_equal(check(&d, msg), KOLO_OK);
  kolo_nccl_op_desc b = {.kind = KOLO_NCCL_BROADCAST, .send = arena, .recv = arena, .count = 10,
                         .dtype = KOLO_INT16, .root = 0};
  assert_int_equal(check(&b, msg), KOLO_OK);
}

static void a_host_buffer_is_refused_with_its_name(void **state) {
  (void)state;
  char msg[256];
  kolo_nccl_op_desc d = allreduce(host, arena, 10);
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(msg, "send (40 bytes) is not one device allocation"));
  d = allreduce(arena, host, 10);
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(msg, "recv (40 bytes) is not one device allocation"));
  /* Memory of another device is refused the same way. */
  d = allreduce(arena, arena + 4096, 10);
  assert_int_equal(kolo_nccl_check_op(0, 2, 1, &d, arena_on_device_0, NULL, msg, sizeof msg),
                   KOLO_ERR_INVALID_ARG);
}

/* The whole range is checked, not only the start: a buffer that begins in
 * device memory and runs past its allocation is refused. */
static void a_buffer_running_past_its_allocation_is_refused(void **state) {
  (void)state;
  char msg[256];
  char *tail = arena + sizeof arena - 40; /* room for 10 float32 */
  kolo_nccl_op_desc d = allreduce(arena, tail, 10);
  assert_int_equal(check(&d, msg), KOLO_OK);
  d = allreduce(arena, tail, 11);
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(msg, "recv (44 bytes)"));
  /* the gather's recv is size * count, the reduce-scatter's send too */
  kolo_nccl_op_desc g = {.kind = KOLO_NCCL_ALLGATHER,
                         .send = arena,
                         .recv = arena + 1024,
                         .count = 10,
                         .dtype = KOLO_FLOAT32};
  assert_int_equal(check(&g, msg), KOLO_OK);
  assert_int_equal(last_bytes, 40);    /* send was checked last: count elements */
  g.recv = arena + sizeof arena - 159; /* 4 * 40 = 160 needed */
  assert_int_equal(check(&g, msg), KOLO_ERR_INVALID_ARG);
  kolo_nccl_op_desc r = {.kind = KOLO_NCCL_REDUCESCATTER,
                         .send = arena + sizeof arena - 159,
                         .recv = arena,
                         .count = 10,
                         .dtype = KOLO_FLOAT32,
                         .op = KOLO_SUM};
  assert_int_equal(check(&r, msg), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(msg, "send (160 bytes)"));
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
  kolo_nccl_op_desc d = {
      .kind = KOLO_NCCL_BROADCAST, .recv = arena, .count = 8, .dtype = KOLO_INT64, .root = 4};
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
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_ALLGATHER,
                         .send = arena + 40,
                         .recv = arena,
                         .count = 10,
                         .dtype = KOLO_FLOAT32};
  assert_int_equal(check(&d, msg), KOLO_OK);
  assert_int_equal(staged, 0);
  d.send = arena + 160; /* just past recv (4 * 40 bytes): no overlap */
  assert_int_equal(check(&d, msg), KOLO_OK);
  assert_int_equal(staged, 0);
}

/* kolo.h allows send == recv for every collective. On rank 0 that is NCCL's own
 * in-place form; on every other rank it overlaps block 0. Refusing it there
 * left rank 0 waiting for a peer that had already returned: now every rank
 * accepts, and those that need it stage. */
static void send_equal_to_recv_is_accepted_on_every_rank(void **state) {
  (void)state;
  char msg[256];
  size_t counts[4] = {3, 5, 0, 7};
  for (int rank = 0; rank < 4; rank++) {
    kolo_nccl_op_desc g = {.kind = KOLO_NCCL_ALLGATHER,
                           .send = arena,
                           .recv = arena,
                           .count = 10,
                           .dtype = KOLO_FLOAT32};
    assert_int_equal(check_rank(rank, &g, msg), KOLO_OK);
    assert_int_equal(staged, rank != 0);
    kolo_nccl_op_desc v = {.kind = KOLO_NCCL_ALLGATHERV,
                           .send = arena,
                           .recv = arena,
                           .counts = counts,
                           .dtype = KOLO_INT64};
    assert_int_equal(check_rank(rank, &v, msg), KOLO_OK);
    assert_int_equal(staged, rank != 0 && counts[rank] > 0);
    kolo_nccl_op_desc r = {.kind = KOLO_NCCL_REDUCESCATTER,
                           .send = arena,
                           .recv = arena,
                           .count = 10,
                           .dtype = KOLO_FLOAT32,
                           .op = KOLO_SUM};
    assert_int_equal(check_rank(rank, &r, msg), KOLO_OK);
    assert_int_equal(staged, rank != 0);
    kolo_nccl_op_desc a = allreduce(arena, arena, 10);
    assert_int_equal(check_rank(rank, &a, msg), KOLO_OK);
    assert_int_equal(staged, 0);
  }
}

static void any_other_overlap_is_staged_not_refused(void **state) {
  (void)state;
  char msg[256];
  kolo_nccl_op_desc a = allreduce(arena, arena + 4, 10); /* shifted by one element */
  assert_int_equal(check(&a, msg), KOLO_OK);
  assert_int_equal(staged, 1);
  kolo_nccl_op_desc r = {.kind = KOLO_NCCL_REDUCESCATTER,
                         .send = arena,
                         .recv = arena + 40,
                         .count = 10,
                         .dtype = KOLO_FLOAT32,
                         .op = KOLO_MAX};
  assert_int_equal(check(&r, msg), KOLO_OK); /* rank 1's own block: NCCL in place */
  assert_int_equal(staged, 0);
  r.recv = arena + 44; /* overlapping, but not the rank's block */
  assert_int_equal(check(&r, msg), KOLO_OK);
  assert_int_equal(staged, 1);
  /* the flag is optional */
  assert_int_equal(kolo_nccl_check_op(1, 4, 0, &r, arena_on_device_0, NULL, msg, sizeof msg),
                   KOLO_OK);
}

static void allgatherv_needs_counts_and_uses_the_ranks_offset(void **state) {
  (void)state;
  char msg[256];
  size_t counts[4] = {3, 5, 0, 7};
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_ALLGATHERV,
                         .send = arena + 3 * 8,
                         .recv = arena,
                         .dtype = KOLO_INT64,
                         .count = SIZE_MAX /* unused */};
  assert_int_equal(check(&d, msg), KOLO_ERR_INVALID_ARG); /* no counts */
  d.counts = counts;
  assert_int_equal(check(&d, msg), KOLO_OK); /* in place at offset 3 */
  assert_int_equal(staged, 0);
  d.send = arena + 8;
  assert_int_equal(check(&d, msg), KOLO_OK);
  assert_int_equal(staged, 1);
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
  kolo_nccl_op_desc v = {.kind = KOLO_NCCL_ALLGATHERV,
                         .send = arena,
                         .recv = arena + 64,
                         .counts = counts,
                         .dtype = KOLO_FLOAT64};
  assert_int_equal(check(&v, msg), KOLO_ERR_TOO_LARGE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_valid_allreduce_passes_out_of_place_and_in_place),
      cmocka_unit_test(an_unknown_dtype_op_or_kind_is_refused),
      cmocka_unit_test(int16_and_bool_reductions_the_gpu_cannot_do_are_refused),
      cmocka_unit_test(a_host_buffer_is_refused_with_its_name),
      cmocka_unit_test(empty_operations_need_no_buffers),
      cmocka_unit_test(a_broadcast_root_outside_the_ring_is_refused),
      cmocka_unit_test(allgather_in_place_means_send_at_the_ranks_own_block),
      cmocka_unit_test(send_equal_to_recv_is_accepted_on_every_rank),
      cmocka_unit_test(any_other_overlap_is_staged_not_refused),
      cmocka_unit_test(a_buffer_running_past_its_allocation_is_refused),
      cmocka_unit_test(allgatherv_needs_counts_and_uses_the_ranks_offset),
      cmocka_unit_test(counts_whose_byte_size_overflows_are_too_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
