/* The single route (issue 31) under kolorun, on every rank: kolo_op_options that
 * libkolo must refuse (a process set, unknown flags, a named barrier), an unnamed
 * all-reduce with prescale/postscale (before #31 only named ones scaled), an
 * unnamed all-gather into memory libkolo allocates, all-gathers and an all-to-all
 * into memory the caller's allocator gives once the size is known (asked only for
 * a non-empty output), and the blocking call as
 * submit (KOLO_OP_BLOCKING) + kolo_wait on the same request. Exit 0 when every
 * rank saw what it should. */
#include <stdio.h>
#include <string.h>

#include "kolo/engine.h"
#include "kolo/kolo.h"

static int failures;

static void expect(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "FAIL: %s\n", what);
    failures++;
  }
}

static void check_refusals(kolo_comm *comm) {
  float x[2] = {1, 2};
  kolo_request *request = NULL;
  kolo_op_options set = {.process_set = 1};
  expect(kolo_allreduce_submit(comm, x, x, 2, KOLO_FLOAT32, KOLO_SUM, &set, &request) ==
             KOLO_ERR_INVALID_ARG,
         "a process set other than 0 is refused");
  kolo_op_options flags = {.flags = 0x80u};
  expect(kolo_allreduce_submit(comm, x, x, 2, KOLO_FLOAT32, KOLO_SUM, &flags, &request) ==
             KOLO_ERR_INVALID_ARG,
         "unknown flags are refused");
  kolo_op_options named = {.name = "barrier"};
  expect(kolo_barrier_submit(comm, &named, &request) == KOLO_ERR_INVALID_ARG,
         "a named barrier is refused");
  kolo_op_options integer = {.prescale = 2.0};
  int32_t n[1] = {1};
  expect(kolo_allreduce_submit(comm, n, n, 1, KOLO_INT32, KOLO_SUM, &integer, &request) ==
             KOLO_ERR_INVALID_ARG,
         "an integer all-reduce with a scale factor is refused");
  expect(request == NULL, "no request comes back from a refusal");
}

/* recv = sum over ranks of (send * 2) * 0.25, exact for these small integers. */
static void check_scaled_unnamed(kolo_comm *comm, int rank, int size) {
  float send[3], recv[3] = {0};
  for (int i = 0; i < 3; i++) send[i] = (float)(rank + 1 + i);
  kolo_op_options options = {.flags = KOLO_OP_BLOCKING, .prescale = 2.0, .postscale = 0.25};
  kolo_request *request = NULL;
  expect(kolo_allreduce_submit(comm, send, recv, 3, KOLO_FLOAT32, KOLO_SUM, &options, &request) ==
             KOLO_OK,
         "scaled unnamed all-reduce submitted");
  expect(request != NULL && kolo_wait(request) == KOLO_OK, "scaled unnamed all-reduce done");
  for (int i = 0; i < 3; i++) {
    double sum = 0;
    for (int r = 0; r < size; r++) sum += r + 1 + i;
    if (recv[i] != (float)(sum * 0.5)) {
      fprintf(stderr, "FAIL: scaled unnamed all-reduce [%d] = %g, want %g\n", i, recv[i],
              sum * 0.5);
      failures++;
    }
  }
}

/* Each rank gives rank+1 int32 values; libkolo allocates the concatenation. */
static void check_allocated_allgather(kolo_comm *comm, int rank, int size) {
  int32_t send[64];
  for (int i = 0; i <= rank; i++) send[i] = rank * 100 + i;
  kolo_request *request = NULL;
  kolo_result result;
  expect(kolo_allgather_submit(comm, send, (size_t)rank + 1, NULL, 0, NULL, KOLO_INT32, NULL,
                               &request) == KOLO_OK,
         "unnamed all-gather into libkolo's memory submitted");
  expect(kolo_wait_result(request, &result) == KOLO_OK, "unnamed all-gather done");
  size_t want = (size_t)size * (size_t)(size + 1) / 2, at = 0;
  expect(result.output != NULL && result.output_count == want, "all-gather output count");
  const int32_t *out = result.output;
  for (int r = 0; r < size && out != NULL && result.output_count == want; r++) {
    for (int i = 0; i <= r; i++) expect(out[at++] == r * 100 + i, "all-gather output value");
  }
  kolo_free(result.output);
}

/* The caller's allocator (kolo_op_options.alloc): hands out its buffer once and
 * remembers the count it was asked for. */
typedef struct arena {
  int32_t buffer[4096];
  size_t asked;
  int calls;
} arena;

static void *arena_alloc(void *context, size_t count) {
  arena *a = context;
  a->calls++;
  a->asked = count;
  return count <= 4096 ? a->buffer : NULL;
}

/* Each rank gives rank+1 int32 values (none with empty); the output lands in the
 * caller's memory and libkolo hands back none of its own. */
static void check_caller_allgather(kolo_comm *comm, int rank, int size, int empty) {
  int32_t send[64];
  for (int i = 0; i <= rank; i++) send[i] = rank * 100 + i;
  arena a = {.calls = 0};
  kolo_op_options options = {.alloc = arena_alloc, .alloc_context = &a};
  kolo_request *request = NULL;
  kolo_result result;
  size_t mine = empty ? 0 : (size_t)rank + 1;
  expect(kolo_allgather_submit(comm, send, mine, NULL, 0, NULL, KOLO_INT32, &options, &request) ==
             KOLO_OK,
         "all-gather into the caller's memory submitted");
  expect(kolo_wait_result(request, &result) == KOLO_OK, "all-gather into the caller's memory");
  size_t want = empty ? 0 : (size_t)size * (size_t)(size + 1) / 2, at = 0;
  expect(result.output == NULL && result.output_count == want, "caller's all-gather: no output");
  expect(a.calls == (want > 0) && a.asked == want, "the allocator is asked once, for the count");
  for (int r = 0; r < size && !empty; r++) {
    for (int i = 0; i <= r; i++) expect(a.buffer[at++] == r * 100 + i, "caller's all-gather value");
  }
}

/* Rank r sends r+1 values to every rank: each receives size(size+1)/2 values. */
static void check_caller_alltoall(kolo_comm *comm, int rank, int size) {
  int32_t send[64 * 64];
  size_t counts[64], received[64];
  for (int to = 0, at = 0; to < size; to++) {
    counts[to] = (size_t)rank + 1;
    for (int i = 0; i <= rank; i++) send[at++] = rank * 1000 + to * 10 + i;
  }
  arena a = {.calls = 0};
  kolo_op_options options = {.name = "route_check.a2a", .alloc = arena_alloc, .alloc_context = &a};
  kolo_request *request = NULL;
  kolo_result result;
  expect(kolo_alltoall_submit(comm, send, counts, NULL, 0, received, KOLO_INT32, &options,
                              &request) == KOLO_OK,
         "all-to-all into the caller's memory submitted");
  expect(kolo_wait_result(request, &result) == KOLO_OK, "all-to-all into the caller's memory");
  size_t want = (size_t)size * (size_t)(size + 1) / 2, at = 0;
  expect(result.output == NULL && result.output_count == want && a.calls == 1 && a.asked == want,
         "caller's all-to-all: asked once for the count, no output of libkolo's");
  for (int r = 0; r < size; r++) {
    expect(received[r] == (size_t)r + 1, "caller's all-to-all received count");
    for (int i = 0; i <= r; i++) expect(a.buffer[at++] == r * 1000 + rank * 10 + i, "a2a value");
  }
}

int main(void) {
  kolo_comm *comm = NULL;
  if (kolo_comm_create_from_env(&comm) != KOLO_OK) {
    fprintf(stderr, "FATAL: kolo_comm_create_from_env\n");
    return 1;
  }
  int rank = kolo_comm_rank(comm), size = kolo_comm_size(comm);
  if (size > 63) return 1;
  check_refusals(comm);
  check_scaled_unnamed(comm, rank, size);
  check_allocated_allgather(comm, rank, size);
  check_caller_allgather(comm, rank, size, 0);
  check_caller_allgather(comm, rank, size, 1);
  check_caller_alltoall(comm, rank, size);
  int64_t mine = failures, total = 0;
  if (kolo_allreduce(comm, &mine, &total, 1, KOLO_INT64, KOLO_SUM) != KOLO_OK) total = 1;
  if (rank == 0) printf("route_check: %d ranks, %lld failures\n", size, (long long)total);
  kolo_comm_destroy(comm);
  return total == 0 ? 0 : 1;
}
