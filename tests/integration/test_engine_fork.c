/* The named engine's behaviour across real processes on 127.0.0.1 (ranks forked
 * with explicit ring specs): mismatches named on every rank, a missing tensor
 * ending in KOLO_ERR_STALLED within the timeout, join with ranks finishing at
 * different steps, fusion on and off giving identical bits, the response cache
 * in steady state, a rank that waits sleeping rather than spinning, the
 * timeline parsing as JSON (also after a peer loss), and a SIGKILLed rank
 * failing the others' pending named operations within a second. */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kolo/engine.h"

#if defined(__SANITIZE_ADDRESS__)
#define DETECTION_BOUND_S 3.0
#else
#define DETECTION_BOUND_S 1.0
#endif
#define MAX_RANKS 8

typedef int (*rank_body)(kolo_comm *comm, void *argument);

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Forks size ranks joined in one ring; returns how many ranks failed; *killed
 * (may be NULL) counts those that died of a signal. */
static int run_ranks(int size, rank_body body, void *argument, int *killed) {
  kolo_listener *listeners[MAX_RANKS];
  char addresses[MAX_RANKS][64];
  const char *peers[MAX_RANKS];
  for (int r = 0; r < size; r++) {
    assert_int_equal(kolo_listener_create("127.0.0.1:0", &listeners[r]), KOLO_OK);
    assert_int_equal(kolo_listener_address(listeners[r], addresses[r], sizeof addresses[r]),
                     KOLO_OK);
    peers[r] = addresses[r];
  }
  pid_t pids[MAX_RANKS];
  for (int r = 0; r < size; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      alarm(60);
      for (int other = 0; other < size; other++) {
        if (other != r) kolo_listener_destroy(listeners[other]);
      }
      kolo_ring_spec spec = {.epoch = 1,
                             .rank = r,
                             .size = size,
                             .peers = peers,
                             .secret = "s3cret",
                             .timeout_ms = 20000};
      kolo_comm *comm = NULL;
      if (kolo_comm_create(&spec, listeners[r], &comm) != KOLO_OK) _exit(10);
      int failures = body(comm, argument);
      kolo_comm_destroy(comm);
      _exit(failures ? 1 : 0);
    }
  }
  for (int r = 0; r < size; r++) kolo_listener_destroy(listeners[r]);
  int failed = 0;
  if (killed) *killed = 0;
  for (int r = 0; r < size; r++) {
    int wstatus = 0;
    waitpid(pids[r], &wstatus, 0);
    if (WIFSIGNALED(wstatus) && killed)
      (*killed)++;
    else if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      fprintf(stderr, "rank %d ended with status 0x%x\n", r, wstatus);
      failed++;
    }
  }
  return failed;
}

static int check(int ok, kolo_comm *comm, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int check(int ok, kolo_comm *comm, const char *fmt, ...) {
  if (ok) return 0;
  char line[700];
  va_list args;
  va_start(args, fmt);
  vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  fprintf(stderr, "rank %d: %s\n", kolo_comm_rank(comm), line);
  return 1;
}

/* ---- mismatches ---- */

static int mismatch_body(kolo_comm *comm, void *argument) {
  (void)argument;
  int rank = kolo_comm_rank(comm), failures = 0;
  float a[12] = {0}, out[12];
  double d[4] = {0};
  kolo_request *count_request, *dtype_request, *op_request;
  /* rank 1 disagrees on the count, rank 2 on the dtype, rank 0 on the op */
  kolo_allreduce_named(comm, "fc1.weight", a, out, rank == 1 ? 12 : 10, KOLO_FLOAT32, KOLO_SUM, 1,
                       1, &count_request);
  if (rank == 2)
    kolo_allreduce_named(comm, "fc1.bias", d, d, 4, KOLO_FLOAT64, KOLO_SUM, 1, 1, &dtype_request);
  else
    kolo_allreduce_named(comm, "fc1.bias", a, a, 4, KOLO_FLOAT32, KOLO_SUM, 1, 1, &dtype_request);
  kolo_allreduce_named(comm, "scale", a, a, 1, KOLO_FLOAT32, rank == 0 ? KOLO_MAX : KOLO_SUM, 1, 1,
                       &op_request);
  kolo_result result;
  kolo_status status = kolo_wait_result(count_request, &result);
  failures +=
      check(status == KOLO_ERR_MISMATCH &&
                strcmp(result.message,
                       "tensor 'fc1.weight': count 10 on ranks 0,2 but count 12 on rank 1") == 0,
            comm, "count mismatch: %s '%s'", kolo_status_name(status), result.message);
  status = kolo_wait_result(dtype_request, &result);
  failures += check(status == KOLO_ERR_MISMATCH && strstr(result.message, "'fc1.bias'") &&
                        strstr(result.message, "dtype float64 on rank 2"),
                    comm, "dtype mismatch: %s '%s'", kolo_status_name(status), result.message);
  status = kolo_wait_result(op_request, &result);
  failures += check(status == KOLO_ERR_MISMATCH && strstr(result.message, "op max on rank 0") &&
                        strstr(result.message, "op sum on ranks 1-2"),
                    comm, "op mismatch: %s '%s'", kolo_status_name(status), result.message);
  /* a mismatch is the operation's error, not the communicator's: the next one works */
  float one = 1, sum = 0;
  kolo_request *next;
  kolo_allreduce_named(comm, "after", &one, &sum, 1, KOLO_FLOAT32, KOLO_SUM, 1, 1, &next);
  failures += check(kolo_wait(next) == KOLO_OK && sum == 3.0f, comm, "after a mismatch: %g", sum);
  return failures;
}

static void mismatched_dtype_count_and_op_are_named_on_every_rank(void **state) {
  (void)state;
  assert_int_equal(run_ranks(3, mismatch_body, NULL, NULL), 0);
}

/* ---- stalls ---- */

static int stall_body(kolo_comm *comm, void *argument) {
  (void)argument;
  int rank = kolo_comm_rank(comm), size = kolo_comm_size(comm);
  float x = 1;
  double started = now_s();
  kolo_status status;
  char message[512];
  if (rank != size - 1) {
    kolo_request *request;
    kolo_allreduce_named(comm, "lonely", &x, &x, 1, KOLO_FLOAT32, KOLO_SUM, 1, 1, &request);
    kolo_result result;
    status = kolo_wait_result(request, &result);
    snprintf(message, sizeof message, "%s", result.message);
  } else {
    /* the missing rank submits nothing: it learns it from the communicator */
    while ((status = kolo_comm_error(comm, NULL)) == KOLO_OK && now_s() - started < 20)
      usleep(10000);
    kolo_comm_error_message(comm, message, sizeof message);
  }
  double waited = now_s() - started;
  int failures = check(status == KOLO_ERR_STALLED, comm, "stall: %s", kolo_status_name(status));
  failures +=
      check(strstr(message, "'lonely'") != NULL && strstr(message, "not by rank(s) 2") != NULL,
            comm, "stall message '%s'", message);
  /* KOLO_STALL_TIMEOUT is 1.5 s: bounded, not silent */
  failures += check(waited >= 1.4 && waited < 1.5 + 2 * DETECTION_BOUND_S, comm,
                    "stall after %.2f s", waited);
  return failures;
}

static void a_missing_tensor_ends_in_stalled_on_every_rank_within_the_timeout(void **state) {
  (void)state;
  setenv("KOLO_STALL_WARNING", "0.5", 1);
  setenv("KOLO_STALL_TIMEOUT", "1.5", 1);
  int failed = run_ranks(3, stall_body, NULL, NULL);
  unsetenv("KOLO_STALL_WARNING");
  unsetenv("KOLO_STALL_TIMEOUT");
  assert_int_equal(failed, 0);
}

/* ---- join ---- */

static float join_value(int rank, int step, size_t i) {
  return (float)(rank + 1) * 100.0f + (float)step + (float)i;
}

/* Rank r runs 2 + 2r steps of two named all-reduces (SUM and AVG), then joins. */
static int join_body(kolo_comm *comm, void *argument) {
  (void)argument;
  int rank = kolo_comm_rank(comm), size = kolo_comm_size(comm), failures = 0;
  enum { COUNT = 70000 };
  float *sum = malloc(COUNT * sizeof *sum), *avg = malloc(3 * sizeof *avg);
  for (int step = 0; step < 2 + 2 * rank; step++) {
    for (size_t i = 0; i < COUNT; i++) sum[i] = join_value(rank, step, i);
    for (size_t i = 0; i < 3; i++) avg[i] = (float)(rank + 1);
    kolo_request *requests[2];
    kolo_allreduce_named(comm, "grad.big", sum, sum, COUNT, KOLO_FLOAT32, KOLO_SUM, 1, 1,
                         &requests[0]);
    kolo_allreduce_named(comm, "grad.avg", avg, avg, 3, KOLO_FLOAT32, KOLO_AVG, 1, 1, &requests[1]);
    failures += kolo_wait(requests[1]) != KOLO_OK;
    failures += kolo_wait(requests[0]) != KOLO_OK;
    float want_avg = 0;
    for (int r = 0; r < size; r++) want_avg += step < 2 + 2 * r ? (float)(r + 1) : 0.0f;
    want_avg /= (float)size; /* AVG divides by the full size */
    failures += check(avg[0] == want_avg, comm, "step %d avg %g want %g", step, avg[0], want_avg);
    for (size_t i = 0; i < COUNT; i += 997) {
      float want = 0;
      for (int r = 0; r < size; r++) want += step < 2 + 2 * r ? join_value(r, step, i) : 0.0f;
      if (sum[i] != want) {
        failures += check(0, comm, "step %d [%zu]: %g want %g", step, i, sum[i], want);
        break;
      }
    }
  }
  kolo_request *join;
  kolo_join_async(comm, &join);
  kolo_result result;
  failures += check(kolo_wait_result(join, &result) == KOLO_OK && result.last_rank == size - 1,
                    comm, "join: %s last %d", kolo_status_name(result.status), result.last_rank);
  /* after the join every rank is back to normal */
  float one = 1, total = 0;
  kolo_request *after;
  kolo_allreduce_named(comm, "after.join", &one, &total, 1, KOLO_FLOAT32, KOLO_SUM, 1, 1, &after);
  failures +=
      check(kolo_wait(after) == KOLO_OK && total == (float)size, comm, "after join %g", total);
  free(sum);
  free(avg);
  return failures;
}

static void join_with_ranks_finishing_at_different_steps_gives_exact_sums(void **state) {
  (void)state;
  assert_int_equal(run_ranks(4, join_body, NULL, NULL), 0);
}

/* Rank r runs 1 + r steps of a reduce-scatter with uneven blocks (SUM), one with
 * even blocks (AVG) and an all-to-all with uneven splits, then joins: a joined
 * rank contributes identity values to the reduce-scatters and nothing to the
 * all-to-all, and the results are exact on the ranks still running. */
enum { RS_BASE = 1000 };

static int32_t rs_value(int rank, int step, size_t i) {
  return (int32_t)((rank + 1) * 7 + step * 3 + (int)(i % 101));
}
static size_t rs_block(int b) {
  return (size_t)(RS_BASE + 37 * b);
}
static size_t a2a_count(int from, int to) {
  return (size_t)(from + 2 * to + 1);
}
static int32_t a2a_value(int from, int to, int step, size_t i) {
  return (int32_t)(100000 * from + 1000 * to + 10 * step + (int)i);
}

static int join_rs_a2a_step(kolo_comm *comm, int step, int (*active)(int rank, int step)) {
  int rank = kolo_comm_rank(comm), size = kolo_comm_size(comm), failures = 0;
  size_t counts[MAX_RANKS], total = 0, offset = 0;
  for (int b = 0; b < size; b++) {
    counts[b] = rs_block(b);
    if (b < rank) offset += counts[b];
    total += counts[b];
  }
  int32_t *send = malloc(total * sizeof *send), *mine = malloc(counts[rank] * sizeof *mine);
  double *even = malloc((size_t)size * 4 * sizeof *even), even_mine[4];
  for (size_t i = 0; i < total; i++) send[i] = rs_value(rank, step, i);
  for (size_t i = 0; i < (size_t)size * 4; i++) even[i] = (double)(rank + 1) * (double)(i + 1);
  size_t a2a_send[MAX_RANKS], a2a_total = 0, got[MAX_RANKS];
  for (int d = 0; d < size; d++) a2a_total += a2a_send[d] = a2a_count(rank, d);
  int32_t *a2a = malloc(a2a_total * sizeof *a2a), *at = a2a;
  for (int d = 0; d < size; d++) {
    for (size_t i = 0; i < a2a_send[d]; i++) *at++ = a2a_value(rank, d, step, i);
  }
  kolo_request *rq[3];
  failures += kolo_reducescatter_named(comm, "rs.uneven", send, mine, total, counts, KOLO_INT32,
                                       KOLO_SUM, &rq[0]) != KOLO_OK;
  failures +=
      kolo_alltoall_named(comm, "a2a", a2a, a2a_send, NULL, 0, got, KOLO_INT32, &rq[1]) != KOLO_OK;
  failures += kolo_reducescatter_named(comm, "rs.even", even, even_mine, (size_t)size * 4, NULL,
                                       KOLO_FLOAT64, KOLO_AVG, &rq[2]) != KOLO_OK;
  kolo_result result[3];
  for (int k = 0; k < 3; k++) {
    kolo_status status = kolo_wait_result(rq[k], &result[k]);
    failures += check(status == KOLO_OK, comm, "step %d op %d: %s %s", step, k,
                      kolo_status_name(status), result[k].message);
  }
  for (size_t i = 0; i < counts[rank] && failures == 0; i++) {
    int64_t want = 0;
    for (int r = 0; r < size; r++) want += active(r, step) ? rs_value(r, step, offset + i) : 0;
    if (mine[i] != (int32_t)want)
      failures +=
          check(0, comm, "step %d rs [%zu] %d want %lld", step, i, mine[i], (long long)want);
  }
  for (size_t i = 0; i < 4 && failures == 0; i++) {
    double want = 0;
    for (int r = 0; r < size; r++)
      want += active(r, step) ? (double)(r + 1) * (double)(rank * 4 + i + 1) : 0;
    want /= size; /* AVG divides by the full size */
    failures += check(even_mine[i] == want, comm, "step %d rs.even [%zu] %g want %g", step, i,
                      even_mine[i], want);
  }
  const int32_t *in = result[1].output;
  for (int o = 0; o < size && failures == 0; o++) {
    size_t want_count = active(o, step) ? a2a_count(o, rank) : 0;
    failures += check(got[o] == want_count, comm, "step %d a2a from %d: %zu elements, want %zu",
                      step, o, got[o], want_count);
    for (size_t i = 0; i < got[o] && failures == 0; i++) {
      failures += check(in[i] == a2a_value(o, rank, step, i), comm, "step %d a2a from %d [%zu]",
                        step, o, i);
    }
    in += got[o];
  }
  kolo_free(result[1].output);
  free(send);
  free(mine);
  free(even);
  free(a2a);
  return failures;
}

static int rs_a2a_active(int rank, int step) {
  return step < 1 + rank;
}

static int join_rs_a2a_body(kolo_comm *comm, void *argument) {
  (void)argument;
  int rank = kolo_comm_rank(comm), failures = 0;
  for (int step = 0; step < 1 + rank && failures == 0; step++) {
    failures += join_rs_a2a_step(comm, step, rs_a2a_active);
  }
  kolo_request *join;
  kolo_result result;
  failures +=
      check(kolo_join_async(comm, &join) == KOLO_OK && kolo_wait_result(join, &result) == KOLO_OK &&
                result.last_rank == kolo_comm_size(comm) - 1,
            comm, "join: %s last %d", kolo_status_name(result.status), result.last_rank);
  return failures;
}

static void joined_ranks_take_part_in_reducescatter_and_alltoall_with_neutral_values(void **state) {
  (void)state;
  assert_int_equal(run_ranks(3, join_rs_a2a_body, NULL, NULL), 0);
}

/* ---- fusion ---- */

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Random floats (not exactly summable): the fused results must equal, bit for
 * bit, the same tensors all-reduced one by one (unnamed, never fused). */
static int fusion_body(kolo_comm *comm, void *argument) {
  int expect_fused = *(int *)argument;
  int rank = kolo_comm_rank(comm), failures = 0;
  static const size_t sizes[] = {64, 9408, 1, 147456, 256, 2359296, 1000, 33, 65536, 2048};
  enum { N = sizeof sizes / sizeof sizes[0] };
  float *send[N], *fused[N], *alone[N];
  for (int t = 0; t < N; t++) {
    send[t] = malloc(sizes[t] * sizeof(float));
    fused[t] = malloc(sizes[t] * sizeof(float));
    alone[t] = malloc(sizes[t] * sizeof(float));
    for (size_t i = 0; i < sizes[t]; i++) {
      send[t][i] =
          (float)((double)(mix(((uint64_t)rank << 40) ^ ((uint64_t)t << 32) ^ i) >> 11) * 0x1p-53 -
                  0.5);
    }
  }
  kolo_request *requests[N];
  char name[32];
  for (int k = 0; k < N; k++) {
    int t = rank % 2 ? N - 1 - k : k;
    snprintf(name, sizeof name, "layer%d", t);
    kolo_allreduce_named(comm, name, send[t], fused[t], sizes[t], KOLO_FLOAT32, KOLO_AVG, 0.5, 2.0,
                         &requests[t]);
  }
  for (int t = 0; t < N; t++) failures += kolo_wait(requests[t]) != KOLO_OK;
  for (int t = 0; t < N; t++) {
    for (size_t i = 0; i < sizes[t]; i++) alone[t][i] = (float)((double)send[t][i] * 0.5);
    failures +=
        kolo_allreduce(comm, alone[t], alone[t], sizes[t], KOLO_FLOAT32, KOLO_AVG) != KOLO_OK;
    for (size_t i = 0; i < sizes[t]; i++) alone[t][i] = (float)((double)alone[t][i] * 2.0);
    failures += check(memcmp(alone[t], fused[t], sizes[t] * sizeof(float)) == 0, comm,
                      "tensor %d (%zu elements): fused and unfused bits differ", t, sizes[t]);
  }
  kolo_engine_stats stats;
  kolo_engine_stats_get(comm, &stats);
  if (expect_fused) {
    failures += check(stats.batches < N, comm, "fusion on: %llu batches for %d tensors",
                      (unsigned long long)stats.batches, N);
  } else {
    failures += check(stats.batches == N, comm, "fusion off: %llu batches for %d tensors",
                      (unsigned long long)stats.batches, N);
  }
  for (int t = 0; t < N; t++) {
    free(send[t]);
    free(fused[t]);
    free(alone[t]);
  }
  return failures;
}

static void fusion_on_and_off_give_identical_bits(void **state) {
  (void)state;
  int fused = 1, unfused = 0;
  assert_int_equal(run_ranks(2, fusion_body, &fused, NULL), 0);
  setenv("KOLO_FUSION_THRESHOLD", "0", 1);
  int failed = run_ranks(2, fusion_body, &unfused, NULL);
  unsetenv("KOLO_FUSION_THRESHOLD");
  assert_int_equal(failed, 0);
}

/* ---- the response cache, and sleeping while waiting ---- */

static int cache_body(kolo_comm *comm, void *argument) {
  (void)argument;
  int rank = kolo_comm_rank(comm), failures = 0;
  enum { N = 40, STEPS = 20 };
  float values[N];
  char names[N][32];
  for (int t = 0; t < N; t++) snprintf(names[t], sizeof names[t], "resnet.block%d.conv", t);
  for (int step = 0; step < STEPS; step++) {
    kolo_request *requests[N];
    for (int k = 0; k < N; k++) {
      int t = rank ? N - 1 - k : k;
      values[t] = (float)(step + t);
      kolo_allreduce_named(comm, names[t], &values[t], &values[t], 1, KOLO_FLOAT32, KOLO_SUM, 1, 1,
                           &requests[t]);
    }
    for (int t = 0; t < N; t++) failures += kolo_wait(requests[t]) != KOLO_OK;
    for (int t = 0; t < N; t++) failures += values[t] != (float)(2 * (step + t));
  }
  kolo_engine_stats stats;
  kolo_engine_stats_get(comm, &stats);
  /* each name goes by name once, every later step by bit */
  failures += check(stats.announced == N && stats.cached == (uint64_t)N * (STEPS - 1), comm,
                    "announced %llu cached %llu", (unsigned long long)stats.announced,
                    (unsigned long long)stats.cached);
  /* a rank whose tensor waits for a late peer sleeps: no cycles, little CPU */
  float x = 1;
  kolo_request *late;
  struct rusage before, after;
  getrusage(RUSAGE_SELF, &before);
  if (rank == 1) usleep(800 * 1000);
  kolo_allreduce_named(comm, "late", &x, &x, 1, KOLO_FLOAT32, KOLO_SUM, 1, 1, &late);
  failures += kolo_wait(late) != KOLO_OK || x != 2.0f;
  getrusage(RUSAGE_SELF, &after);
  kolo_engine_stats later;
  kolo_engine_stats_get(comm, &later);
  double cpu = (double)(after.ru_utime.tv_sec - before.ru_utime.tv_sec + after.ru_stime.tv_sec -
                        before.ru_stime.tv_sec) +
               (double)(after.ru_utime.tv_usec - before.ru_utime.tv_usec + after.ru_stime.tv_usec -
                        before.ru_stime.tv_usec) /
                   1e6;
  failures += check(rank == 1 || (cpu < 0.2 && later.cycles - stats.cycles <= 3), comm,
                    "waiting 0.8 s cost %.3f s of CPU and %llu cycles", cpu,
                    (unsigned long long)(later.cycles - stats.cycles));
  return failures;
}

static void steady_state_agrees_by_cache_bits_and_a_waiting_rank_sleeps(void **state) {
  (void)state;
  assert_int_equal(run_ranks(2, cache_body, NULL, NULL), 0);
}

/* ---- the timeline ---- */

static char timeline_path[256];

static int timeline_body(kolo_comm *comm, void *argument) {
  int kill_rank = *(int *)argument;
  int rank = kolo_comm_rank(comm), failures = 0;
  float small[16] = {0}, *big = calloc(300000, sizeof(float));
  for (int step = 0; step < 3; step++) {
    kolo_request *a, *b, *g;
    kolo_allreduce_named(comm, "weights \"big\"", big, big, 300000, KOLO_FLOAT32, KOLO_SUM, 1, 1,
                         &a);
    kolo_allreduce_named(comm, "bias", small, small, 16, KOLO_FLOAT32, KOLO_SUM, 1, 1, &b);
    kolo_allgather_named(comm, "ids", small, 2, NULL, 0, NULL, KOLO_FLOAT32, &g);
    kolo_status sa = kolo_wait(a), sb = kolo_wait(b), sg = kolo_wait(g);
    failures += check(sa == KOLO_OK && sb == KOLO_OK && sg == KOLO_OK, comm, "step %d: %s %s %s",
                      step, kolo_status_name(sa), kolo_status_name(sb), kolo_status_name(sg));
  }
  if (kill_rank >= 0) {
    /* the steps are over everywhere once this completes on the killed rank (every
     * rank submitted it after its last wait); on the others it may complete or
     * meet the kill (their steps' last bytes were never at risk then) */
    kolo_request *steps_done;
    kolo_status synced = kolo_allreduce_named(comm, "steps.done", small, small, 16, KOLO_FLOAT32,
                                              KOLO_SUM, 1, 1, &steps_done);
    if (synced == KOLO_OK) synced = kolo_wait(steps_done);
    if (rank == kill_rank) raise(SIGKILL);
    failures += check(synced == KOLO_OK || synced == KOLO_ERR_PEER_LOST, comm, "steps.done: %s",
                      kolo_status_name(synced));
    kolo_request *pending;
    kolo_status status = kolo_allreduce_named(comm, "never", small, small, 16, KOLO_FLOAT32,
                                              KOLO_SUM, 1, 1, &pending);
    if (status == KOLO_OK) status = kolo_wait(pending);
    failures += check(status == KOLO_ERR_PEER_LOST, comm, "never: %s", kolo_status_name(status));
    /* the process lives on: its file must already parse (it is not closed yet) */
    char command[600];
    snprintf(command, sizeof command,
             "/usr/bin/python3 -c \"import json,sys; e=json.load(open(sys.argv[1])); "
             "assert any(x.get('name')=='FAILED' for x in e), 'no FAILED event'\" %s%s",
             timeline_path, rank == 0 ? "" : (rank == 1 ? ".1" : ".2"));
    failures += check(system(command) == 0, comm, "timeline after peer loss does not parse");
  }
  free(big);
  return failures;
}

static void the_timeline_parses_as_json_with_each_tensors_phases(void **state) {
  (void)state;
  snprintf(timeline_path, sizeof timeline_path, "/tmp/kolo-timeline-%d.json", (int)getpid());
  setenv("KOLO_TIMELINE", timeline_path, 1);
  int no_kill = -1;
  int failed = run_ranks(2, timeline_body, &no_kill, NULL);
  assert_int_equal(failed, 0);
  char command[1200];
  snprintf(
      command, sizeof command,
      "/usr/bin/python3 -c \"import json,sys\n"
      "for rank, path in enumerate(sys.argv[1:]):\n"
      "  events = json.load(open(path))\n"
      "  rows = {e['tid']: e['args']['name'] for e in events if e.get('name') == 'thread_name'}\n"
      "  phases = {(rows[e['tid']], e['name']) for e in events if e.get('ph') == 'X'}\n"
      "  for want in [('weights \\\"big\\\"', 'NEGOTIATE'), ('weights \\\"big\\\"', 'ALLREDUCE'),\n"
      "               ('bias', 'MEMCPY_IN_FUSION_BUFFER'), ('bias', 'MEMCPY_OUT_FUSION_BUFFER'),\n"
      "               ('bias', 'WAIT_FOR_DATA'), ('ids', 'ALLGATHER'), ('engine', 'CYCLE')]:\n"
      "    assert want in phases, (rank, want, sorted(phases))\n"
      "  assert all(e['pid'] == rank for e in events if 'pid' in e)\n\" %s %s.1",
      timeline_path, timeline_path);
  int parsed = system(command);
  /* and after a peer loss, the survivor's file (still open) parses too */
  int kill_rank = 1;
  int killed = 0;
  failed = run_ranks(3, timeline_body, &kill_rank, &killed);
  unsetenv("KOLO_TIMELINE");
  char path[300];
  snprintf(path, sizeof path, "%s", timeline_path);
  unlink(path);
  for (int r = 1; r < 3; r++) {
    snprintf(path, sizeof path, "%s.%d", timeline_path, r);
    unlink(path);
  }
  assert_int_equal(parsed, 0);
  assert_int_equal(killed, 1);
  assert_int_equal(failed, 0);
}

/* ---- a killed rank ---- */

static int kill_body(kolo_comm *comm, void *argument) {
  (void)argument;
  int rank = kolo_comm_rank(comm), size = kolo_comm_size(comm), failures = 0;
  float x = 1;
  kolo_request *sync;
  kolo_allreduce_named(comm, "sync", &x, &x, 1, KOLO_FLOAT32, KOLO_SUM, 1, 1, &sync);
  failures += kolo_wait(sync) != KOLO_OK;
  double killed_at = now_s() + 0.3;
  if (rank == size - 1) {
    while (now_s() < killed_at) usleep(1000);
    raise(SIGKILL);
  }
  /* pending named ops of every kind, none of which the dead rank will ever submit */
  float data[64] = {0};
  kolo_request *requests[3];
  kolo_allreduce_named(comm, "pending.grad", data, data, 64, KOLO_FLOAT32, KOLO_SUM, 1, 1,
                       &requests[0]);
  kolo_broadcast_named(comm, "pending.bcast", data, 8, KOLO_FLOAT32, 0, &requests[1]);
  kolo_allgather_named(comm, "pending.gather", data, 4, NULL, 0, NULL, KOLO_FLOAT32, &requests[2]);
  for (int i = 0; i < 3; i++) {
    kolo_result result;
    kolo_status status = kolo_wait_result(requests[i], &result);
    double late = now_s() - killed_at;
    failures += check(status == KOLO_ERR_PEER_LOST && strstr(result.message, "rank 3") != NULL,
                      comm, "pending %d: %s '%s'", i, kolo_status_name(status), result.message);
    failures +=
        check(late < DETECTION_BOUND_S, comm, "pending %d failed %.3f s after the kill", i, late);
  }
  return failures;
}

static void a_killed_rank_fails_pending_named_ops_on_the_others_within_a_second(void **state) {
  (void)state;
  int killed = 0;
  assert_int_equal(run_ranks(4, kill_body, NULL, &killed), 0);
  assert_int_equal(killed, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(mismatched_dtype_count_and_op_are_named_on_every_rank),
      cmocka_unit_test(a_missing_tensor_ends_in_stalled_on_every_rank_within_the_timeout),
      cmocka_unit_test(join_with_ranks_finishing_at_different_steps_gives_exact_sums),
      cmocka_unit_test(joined_ranks_take_part_in_reducescatter_and_alltoall_with_neutral_values),
      cmocka_unit_test(fusion_on_and_off_give_identical_bits),
      cmocka_unit_test(steady_state_agrees_by_cache_bits_and_a_waiting_rank_sleeps),
      cmocka_unit_test(the_timeline_parses_as_json_with_each_tensors_phases),
      cmocka_unit_test(a_killed_rank_fails_pending_named_ops_on_the_others_within_a_second),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
