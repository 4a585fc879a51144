/* Multi-process correctness check of libkolo, run under kolorun (-np 1..8): every
 * all-reduce op x dtype against a serial reference computed locally from every
 * rank's deterministic inputs, in place and out of place, for edge and large
 * counts; all-gather with per-rank counts, broadcast from every root,
 * reduce-scatter, barrier, non-blocking requests, and argument errors. Results
 * must also be bit-identical on every rank. Exits 0 only if every rank passed. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collective_values.h"
#include "kolo/kolo.h"

#define LARGE_COUNT ((size_t)1000003)
#define MID_COUNT ((size_t)65537)

typedef struct checker {
  kolo_comm *comm;
  int rank, size;
  long failures;
  long cases;
  unsigned char *send, *recv, *copy; /* capacity elements of up to 8 bytes each */
  size_t capacity;
} checker;

static void failf(checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records one failure; prints the first few of each rank in full. */
static void failf(checker *c, const char *fmt, ...) {
  c->failures++;
  if (c->failures > 20) return;
  char line[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  fprintf(stderr, "FAIL rank %d: %s\n", c->rank, line);
}

/* A collective call that must succeed; anything else ends the program (the
 * communicator is unusable, and the other ranks will see this rank go). */
static void must(checker *c, kolo_status status, const char *what) {
  if (status == KOLO_OK) return;
  char message[256];
  kolo_comm_error_message(c->comm, message, sizeof message);
  fprintf(stderr, "FATAL rank %d: %s returned %s (%s) %s\n", c->rank, what,
          kolo_status_name(status), kolo_strerror(status), message);
  exit(1);
}

static double unit_roundoff(kolo_dtype dtype) {
  switch (dtype) {
    case KOLO_FLOAT16:
      return ldexp(1, -10);
    case KOLO_BFLOAT16:
      return ldexp(1, -7);
    case KOLO_FLOAT32:
      return ldexp(1, -23);
    case KOLO_FLOAT64:
      return ldexp(1, -52);
    default:
      return 0;
  }
}

/* Smallest positive subnormal of the dtype: the absolute error floor of a rounding. */
static double tiny(kolo_dtype dtype) {
  switch (dtype) {
    case KOLO_FLOAT16:
      return ldexp(1, -24);
    case KOLO_BFLOAT16:
      return ldexp(1, -133);
    case KOLO_FLOAT32:
      return ldexp(1, -149);
    default:
      return 0;
  }
}

/* The serial reference of element i over all ranks, and the error allowed. */
static void reference(const checker *c, kolo_dtype dtype, kolo_op op, uint64_t salt, size_t i,
                      double *want, double *tol) {
  int n = c->size;
  double acc = cv_input(0, i, dtype, op, salt);
  double magnitude = fabs(acc);
  int64_t isum = (int64_t)acc;
  for (int r = 1; r < n; r++) {
    double v = cv_input(r, i, dtype, op, salt);
    magnitude += fabs(v);
    switch (op) {
      case KOLO_SUM:
      case KOLO_AVG:
        acc += v;
        isum += (int64_t)v;
        break;
      case KOLO_MIN:
        acc = v < acc ? v : acc;
        break;
      case KOLO_MAX:
        acc = v > acc ? v : acc;
        break;
      case KOLO_PROD:
        acc *= v;
        break;
      default:
        break;
    }
  }
  *tol = 0;
  if (dtype == KOLO_BOOL && (op == KOLO_SUM || op == KOLO_AVG)) {
    *want = acc > 0; /* bool sums (and averages) are "any" */
    return;
  }
  if (!cv_is_float(dtype)) {
    *want = op == KOLO_AVG ? (double)(isum / n) : acc;
    return;
  }
  if (op == KOLO_SUM || op == KOLO_AVG) {
    /* each of up to n partial sums may be rounded to the dtype, plus the final one */
    double u = unit_roundoff(dtype);
    *tol = (n + 1) * u * magnitude + (n + 1) * tiny(dtype);
    if (op == KOLO_AVG) {
      acc /= n;
      *tol = *tol / n + u * fabs(acc) + tiny(dtype);
    }
  }
  *want = acc; /* min, max and products of powers of two are exact */
}

static int is_identical_everywhere(checker *c, const void *data, size_t bytes, const char *what) {
  int64_t mine = cv_checksum(data, bytes);
  int64_t all[64];
  must(c, kolo_allgather(c->comm, &mine, 1, all, 64, NULL, KOLO_INT64), "allgather(checksum)");
  for (int r = 0; r < c->size; r++) {
    if (all[r] != mine) {
      failf(c, "%s: result differs between rank %d and rank %d", what, c->rank, r);
      return 0;
    }
  }
  return 1;
}

/* The serial reference costs size evaluations per element, which dominates the run
 * time of the large cases (8 ranks on 2 cores, and ~10x more under ASan): past the
 * first and last 64 Ki elements, every 3rd element is compared (segment-sized
 * errors cannot hide between samples; a lone wrong element might). */
static size_t next_checked(size_t i, size_t count) {
  const size_t edge = 65536;
  if (i + 1 < edge || i + 1 >= count - (count < edge ? count : edge)) return i + 1;
  size_t next = i + 3;
  return next < count - edge ? next : count - edge;
}

static void check_allreduce(checker *c, kolo_dtype dtype, kolo_op op, size_t count, int in_place) {
  size_t width = kolo_dtype_size(dtype);
  uint64_t salt = (uint64_t)c->cases++;
  char what[160];
  snprintf(what, sizeof what, "allreduce op=%s dtype=%s count=%zu %s", kolo_op_name(op),
           kolo_dtype_name(dtype), count, in_place ? "in-place" : "out-of-place");
  cv_fill(c->rank, dtype, op, salt, c->send, count);
  memcpy(c->copy, c->send, count * width);
  memset(c->recv, 0xa5, count * width + 8);
  void *target = in_place ? c->send : c->recv;
  must(c, kolo_allreduce(c->comm, c->send, target, count, dtype, op), what);
  long before = c->failures;
  for (size_t i = 0; i < count && c->failures - before < 3; i = next_checked(i, count)) {
    double want, tol;
    reference(c, dtype, op, salt, i, &want, &tol);
    double got = cv_load(dtype, target, i);
    if (!(fabs(got - want) <= tol)) {
      failf(c, "%s: element %zu is %.17g, want %.17g (tolerance %.3g)", what, i, got, want, tol);
    }
  }
  if (!in_place && memcmp(c->send, c->copy, count * width) != 0) {
    failf(c, "%s: the send buffer was modified", what);
  }
  const unsigned char *after = (const unsigned char *)target + count * width;
  if (!in_place && after[0] != 0xa5) failf(c, "%s: wrote past the end of recv", what);
  is_identical_everywhere(c, target, count * width, what);
}

static void check_all_allreduces(checker *c) {
  size_t n = (size_t)c->size;
  size_t counts[] = {0, 1, n - 1, n + 1, 17, 1031};
  for (int dtype = 0; dtype < KOLO_DTYPE_COUNT; dtype++) {
    for (int op = 0; op < KOLO_OP_COUNT; op++) {
      for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        check_allreduce(c, (kolo_dtype)dtype, (kolo_op)op, counts[k], 1);
        check_allreduce(c, (kolo_dtype)dtype, (kolo_op)op, counts[k], 0);
      }
      check_allreduce(c, (kolo_dtype)dtype, (kolo_op)op, MID_COUNT, (dtype + op) % 2);
    }
  }
  /* the pipelined path: every dtype with sum, every op with float32 */
  for (int dtype = 0; dtype < KOLO_DTYPE_COUNT; dtype++) {
    check_allreduce(c, (kolo_dtype)dtype, KOLO_SUM, LARGE_COUNT, 1);
  }
  for (int op = 0; op < KOLO_OP_COUNT; op++) {
    if (op != KOLO_SUM) check_allreduce(c, KOLO_FLOAT32, (kolo_op)op, LARGE_COUNT, 1);
  }
  check_allreduce(c, KOLO_FLOAT32, KOLO_SUM, LARGE_COUNT, 0);
  check_allreduce(c, KOLO_BFLOAT16, KOLO_AVG, LARGE_COUNT + 2, 0);
}

/* Rank r's contribution count in allgather variant v (some ranks give 0). */
static size_t gather_count(int r, int v, int n) {
  switch (v) {
    case 0:
      return 0;
    case 1:
      return (size_t)r + 1;
    case 2:
      return (size_t)((r * 7 + 3) % 5); /* includes zeros */
    case 3:
      return r == n - 1 ? 1 : 0;
    default:
      return 300001 + (size_t)r; /* large */
  }
}

static void check_allgather(checker *c, kolo_dtype dtype, int variant) {
  int n = c->size;
  size_t width = kolo_dtype_size(dtype);
  uint64_t salt = (uint64_t)c->cases++;
  size_t mine = gather_count(c->rank, variant, n), total = 0;
  for (int r = 0; r < n; r++) total += gather_count(r, variant, n);
  char what[128];
  snprintf(what, sizeof what, "allgather dtype=%s variant=%d (own count %zu, total %zu)",
           kolo_dtype_name(dtype), variant, mine, total);
  cv_fill(c->rank, dtype, KOLO_MAX, salt, c->send, mine);
  memset(c->recv, 0xa5, total * width + 8);
  size_t counts[64];
  memset(counts, 0xff, sizeof counts);
  must(c, kolo_allgather(c->comm, c->send, mine, c->recv, total, counts, dtype), what);
  size_t offset = 0;
  for (int r = 0; r < n; r++) {
    size_t count = gather_count(r, variant, n);
    if (counts[r] != count)
      failf(c, "%s: recv_counts[%d] = %zu, want %zu", what, r, counts[r], count);
    for (size_t i = 0; i < count; i++) {
      double want = cv_input(r, i, dtype, KOLO_MAX, salt);
      double got = cv_load(dtype, c->recv, offset + i);
      if (got != want) {
        failf(c, "%s: element %zu of rank %d is %.17g, want %.17g", what, i, r, got, want);
        break;
      }
    }
    offset += count;
  }
  if (c->recv[total * width] != 0xa5) failf(c, "%s: wrote past the total", what);
  is_identical_everywhere(c, c->recv, total * width, what);
}

static void check_broadcast(checker *c, kolo_dtype dtype, size_t count, int root) {
  size_t width = kolo_dtype_size(dtype);
  uint64_t salt = (uint64_t)c->cases++;
  char what[128];
  snprintf(what, sizeof what, "broadcast dtype=%s count=%zu root=%d", kolo_dtype_name(dtype), count,
           root);
  if (c->rank == root) {
    cv_fill(root, dtype, KOLO_MAX, salt, c->send, count);
  } else {
    memset(c->send, 0x5a, count * width);
  }
  must(c, kolo_broadcast(c->comm, c->send, count, dtype, root), what);
  for (size_t i = 0; i < count; i++) {
    double want = cv_input(root, i, dtype, KOLO_MAX, salt);
    double got = cv_load(dtype, c->send, i);
    if (got != want) {
      failf(c, "%s: element %zu is %.17g, want %.17g", what, i, got, want);
      break;
    }
  }
}

static void check_reducescatter(checker *c, kolo_dtype dtype, kolo_op op, size_t recv_count) {
  int n = c->size;
  size_t width = kolo_dtype_size(dtype);
  uint64_t salt = (uint64_t)c->cases++;
  char what[160];
  snprintf(what, sizeof what, "reducescatter op=%s dtype=%s recv_count=%zu", kolo_op_name(op),
           kolo_dtype_name(dtype), recv_count);
  cv_fill(c->rank, dtype, op, salt, c->send, recv_count * (size_t)n);
  memcpy(c->copy, c->send, recv_count * (size_t)n * width);
  memset(c->recv, 0xa5, recv_count * width + 8);
  must(c, kolo_reducescatter(c->comm, c->send, c->recv, recv_count, dtype, op), what);
  size_t base = recv_count * (size_t)c->rank;
  for (size_t i = 0; i < recv_count; i++) {
    double want, tol;
    reference(c, dtype, op, salt, base + i, &want, &tol);
    double got = cv_load(dtype, c->recv, i);
    if (!(fabs(got - want) <= tol)) {
      failf(c, "%s: element %zu is %.17g, want %.17g (tolerance %.3g)", what, i, got, want, tol);
      break;
    }
  }
  if (c->recv[recv_count * width] != 0xa5) failf(c, "%s: wrote past recv_count", what);
  if (memcmp(c->send, c->copy, recv_count * (size_t)n * width) != 0) {
    failf(c, "%s: the send buffer was modified", what);
  }
}

static int64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* No rank leaves the barrier before the last one has entered it (one host, one clock). */
static void check_barrier(checker *c) {
  for (int round = 0; round < 3; round++) {
    usleep((useconds_t)(((c->rank + round) % c->size) * 20000));
    int64_t times[2] = {monotonic_ns(), 0};
    must(c, kolo_barrier(c->comm), "barrier");
    times[1] = monotonic_ns();
    int64_t all[128];
    must(c, kolo_allgather(c->comm, times, 2, all, 128, NULL, KOLO_INT64), "allgather(times)");
    int64_t last_entry = all[0], first_exit = all[1];
    for (int r = 0; r < c->size; r++) {
      if (all[2 * r] > last_entry) last_entry = all[2 * r];
      if (all[2 * r + 1] < first_exit) first_exit = all[2 * r + 1];
    }
    if (first_exit < last_entry) {
      failf(c, "barrier round %d: a rank left %.3f ms before the last one entered", round,
            (double)(last_entry - first_exit) / 1e6);
    }
  }
}

/* Several non-blocking requests in flight at once, finished with kolo_test and kolo_wait. */
static void check_nonblocking(checker *c) {
  int n = c->size;
  uint64_t salt = (uint64_t)c->cases++;
  size_t a_count = 100003, b_count = 1031, d_count = 4099, f_count = 5;
  float *a = malloc(a_count * sizeof *a);
  int32_t *b_in = malloc(b_count * sizeof *b_in), *b_out = malloc(b_count * sizeof *b_out);
  uint16_t *cc = malloc(17 * sizeof *cc);
  int64_t *d = malloc(d_count * sizeof *d);
  uint8_t e_in[64], e_out[64 * 65];
  double *f_in = malloc(f_count * (size_t)n * sizeof *f_in), f_out[5];
  if (!a || !b_in || !b_out || !cc || !d || !f_in) {
    fprintf(stderr, "FATAL rank %d: out of memory\n", c->rank);
    exit(1);
  }
  cv_fill(c->rank, KOLO_FLOAT32, KOLO_SUM, salt, a, a_count);
  cv_fill(c->rank, KOLO_INT32, KOLO_MAX, salt + 1, b_in, b_count);
  cv_fill(c->rank, KOLO_BFLOAT16, KOLO_AVG, salt + 2, cc, 17);
  if (c->rank == n - 1) {
    cv_fill(n - 1, KOLO_INT64, KOLO_MAX, salt + 3, d, d_count);
  } else {
    memset(d, 0, d_count * sizeof *d);
  }
  size_t e_count = (size_t)c->rank + 1;
  memset(e_in, c->rank + 1, e_count);
  cv_fill(c->rank, KOLO_FLOAT64, KOLO_SUM, salt + 5, f_in, f_count * (size_t)n);

  kolo_request *req[7] = {0};
  must(c, kolo_allreduce_async(c->comm, a, a, a_count, KOLO_FLOAT32, KOLO_SUM, &req[0]),
       "allreduce_async(a)");
  must(c, kolo_allreduce_async(c->comm, b_in, b_out, b_count, KOLO_INT32, KOLO_MAX, &req[1]),
       "allreduce_async(b)");
  must(c, kolo_allreduce_async(c->comm, cc, cc, 17, KOLO_BFLOAT16, KOLO_AVG, &req[2]),
       "allreduce_async(c)");
  must(c, kolo_broadcast_async(c->comm, d, d_count, KOLO_INT64, n - 1, &req[3]),
       "broadcast_async(d)");
  must(c,
       kolo_allgather_async(c->comm, e_in, e_count, e_out, sizeof e_out, NULL, KOLO_UINT8, &req[4]),
       "allgather_async(e)");
  must(c, kolo_reducescatter_async(c->comm, f_in, f_out, f_count, KOLO_FLOAT64, KOLO_SUM, &req[5]),
       "reducescatter_async(f)");
  must(c, kolo_barrier_async(c->comm, &req[6]), "barrier_async");

  /* even requests by polling kolo_test (bounded), odd ones by kolo_wait in reverse order */
  int64_t deadline = monotonic_ns() + (int64_t)120 * 1000000000;
  for (int i = 0; i < 7; i += 2) {
    int done = 0;
    kolo_status status = KOLO_ERR_INTERNAL;
    while (!done) {
      must(c, kolo_test(req[i], &done, &status), "kolo_test");
      if (!done) {
        if (monotonic_ns() > deadline) {
          fprintf(stderr, "FATAL rank %d: request %d not done after 120 s\n", c->rank, i);
          exit(1);
        }
        usleep(200);
      }
    }
    must(c, status, "non-blocking request (kolo_test)");
  }
  for (int i = 5; i >= 1; i -= 2) must(c, kolo_wait(req[i]), "non-blocking request (kolo_wait)");

  for (size_t i = 0; i < a_count; i++) {
    double want, tol;
    reference(c, KOLO_FLOAT32, KOLO_SUM, salt, i, &want, &tol);
    if (!(fabs(a[i] - want) <= tol)) {
      failf(c, "async allreduce float32 sum: element %zu is %.9g, want %.9g", i, a[i], want);
      break;
    }
  }
  for (size_t i = 0; i < b_count; i++) {
    double want, tol;
    reference(c, KOLO_INT32, KOLO_MAX, salt + 1, i, &want, &tol);
    if (b_out[i] != (int32_t)want) {
      failf(c, "async allreduce int32 max: element %zu is %d, want %.0f", i, b_out[i], want);
      break;
    }
  }
  for (size_t i = 0; i < 17; i++) {
    double want, tol;
    reference(c, KOLO_BFLOAT16, KOLO_AVG, salt + 2, i, &want, &tol);
    double got = kolo_bfloat16_to_float(cc[i]);
    if (!(fabs(got - want) <= tol)) {
      failf(c, "async allreduce bfloat16 avg: element %zu is %.9g, want %.9g", i, got, want);
      break;
    }
  }
  for (size_t i = 0; i < d_count; i++) {
    if ((double)d[i] != cv_input(n - 1, i, KOLO_INT64, KOLO_MAX, salt + 3)) {
      failf(c, "async broadcast int64 from %d: element %zu wrong", n - 1, i);
      break;
    }
  }
  size_t offset = 0;
  for (int r = 0; r < n; r++) {
    for (int i = 0; i <= r; i++) {
      if (e_out[offset + (size_t)i] != r + 1) {
        failf(c, "async allgather uint8: element %d of rank %d is %d", i, r,
              e_out[offset + (size_t)i]);
        r = n;
        break;
      }
    }
    offset += (size_t)r + 1;
  }
  for (size_t i = 0; i < f_count; i++) {
    double want, tol;
    reference(c, KOLO_FLOAT64, KOLO_SUM, salt + 5, f_count * (size_t)c->rank + i, &want, &tol);
    if (!(fabs(f_out[i] - want) <= tol)) {
      failf(c, "async reducescatter float64 sum: element %zu is %.17g, want %.17g", i, f_out[i],
            want);
      break;
    }
  }
  free(a);
  free(b_in);
  free(b_out);
  free(cc);
  free(d);
  free(f_in);
}

/* Bad arguments are refused locally, and the communicator still works afterwards. */
static void check_bad_arguments(checker *c) {
  float x[4] = {1, 2, 3, 4};
  struct {
    kolo_status got;
    const char *what;
  } cases[] = {
      {kolo_allreduce(c->comm, x, x, 4, KOLO_DTYPE_COUNT, KOLO_SUM), "allreduce with a bad dtype"},
      {kolo_allreduce(c->comm, x, x, 4, KOLO_FLOAT32, KOLO_OP_COUNT), "allreduce with a bad op"},
      {kolo_allreduce(c->comm, NULL, NULL, 4, KOLO_FLOAT32, KOLO_SUM), "allreduce of NULL"},
      {kolo_broadcast(c->comm, x, 4, KOLO_FLOAT32, c->size), "broadcast from root == size"},
      {kolo_broadcast(c->comm, x, 4, KOLO_FLOAT32, -1), "broadcast from root -1"},
      {kolo_allreduce(NULL, x, x, 4, KOLO_FLOAT32, KOLO_SUM), "allreduce on a NULL comm"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (cases[i].got != KOLO_ERR_INVALID_ARG) {
      failf(c, "%s returned %s, want KOLO_ERR_INVALID_ARG", cases[i].what,
            kolo_status_name(cases[i].got));
    }
  }
  must(c, kolo_barrier(c->comm), "barrier after bad arguments");
  /* a total over the receive capacity fails on every rank ... */
  float big[2] = {1, 2}, small[1];
  kolo_status status = kolo_allgather(c->comm, big, 2, small, 1, NULL, KOLO_FLOAT32);
  if (status != KOLO_ERR_TOO_LARGE) {
    failf(c, "allgather over capacity returned %s, want KOLO_ERR_TOO_LARGE",
          kolo_status_name(status));
  }
  /* ... and changes nothing: the next operation works */
  float one = 1, sum = 0;
  must(c, kolo_allreduce(c->comm, &one, &sum, 1, KOLO_FLOAT32, KOLO_SUM),
       "allreduce after TOO_LARGE");
  if (sum != (float)c->size) failf(c, "allreduce after TOO_LARGE gave %g", sum);
}

static void check_identity(checker *c) {
  const char *names[] = {"KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE",
                         "KOLO_EPOCH"};
  long got[] = {kolo_comm_rank(c->comm), kolo_comm_size(c->comm), kolo_comm_local_rank(c->comm),
                kolo_comm_local_size(c->comm), (long)kolo_comm_epoch(c->comm)};
  for (int i = 0; i < 5; i++) {
    const char *value = getenv(names[i]);
    if (value != NULL && atol(value) != got[i]) {
      failf(c, "%s is %s but the communicator says %ld", names[i], value, got[i]);
    }
  }
  int failed_rank = 7;
  if (kolo_comm_error(c->comm, &failed_rank) != KOLO_OK || failed_rank != -1) {
    failf(c, "a healthy communicator reports an error (rank %d)", failed_rank);
  }
}

int main(int argc, char **argv) {
  /* "allreduce": the all-reduce cases only (the algorithm tests force each one) */
  int allreduce_only = argc > 1 && strcmp(argv[1], "allreduce") == 0;
  checker c = {0};
  kolo_status status = kolo_comm_create_from_env(&c.comm);
  if (status != KOLO_OK) {
    fprintf(stderr, "FATAL: kolo_comm_create_from_env: %s\n", kolo_strerror(status));
    return 1;
  }
  c.rank = kolo_comm_rank(c.comm);
  c.size = kolo_comm_size(c.comm);
  if (c.size > 64) {
    fprintf(stderr, "FATAL: this check supports up to 64 ranks\n");
    return 1;
  }
  /* the largest case: an all-reduce of LARGE_COUNT + 2, or 300001+ elements per rank */
  c.capacity = LARGE_COUNT + 16 + 400000 * (size_t)c.size;
  c.send = malloc(c.capacity * 8);
  c.recv = malloc(c.capacity * 8);
  c.copy = malloc(c.capacity * 8);
  if (!c.send || !c.recv || !c.copy) {
    fprintf(stderr, "FATAL: out of memory\n");
    return 1;
  }
  double started = (double)monotonic_ns();
  check_identity(&c);
  check_all_allreduces(&c);
  for (int dtype = 0; dtype < KOLO_DTYPE_COUNT && !allreduce_only; dtype++) {
    for (int variant = 0; variant < 4; variant++) check_allgather(&c, (kolo_dtype)dtype, variant);
  }
  if (allreduce_only) goto done;
  check_allgather(&c, KOLO_FLOAT32, 4);
  for (int root = 0; root < c.size; root++) {
    check_broadcast(&c, KOLO_FLOAT64, 0, root);
    check_broadcast(&c, KOLO_UINT8, 1, root);
    check_broadcast(&c, (kolo_dtype)(KOLO_INT8 + root % 3), 17, root); /* int8, int16, bool */
    check_broadcast(&c, KOLO_BFLOAT16, 1031, root);
    check_broadcast(&c, KOLO_FLOAT32, root == 0 || root == c.size - 1 ? LARGE_COUNT : 65537, root);
  }
  for (int dtype = 0; dtype < KOLO_DTYPE_COUNT; dtype++) {
    for (int op = 0; op < KOLO_OP_COUNT; op++) {
      check_reducescatter(&c, (kolo_dtype)dtype, (kolo_op)op, (size_t)(op * 3 + dtype) % 9);
    }
  }
  check_reducescatter(&c, KOLO_FLOAT32, KOLO_SUM, 250001);
  check_reducescatter(&c, KOLO_INT64, KOLO_MAX, 250001);
  check_barrier(&c);
  check_nonblocking(&c);
  check_bad_arguments(&c);

done:;
  /* every rank learns whether any rank failed, so all exit alike */
  int64_t failures = c.failures, total = 0;
  must(&c, kolo_allreduce(c.comm, &failures, &total, 1, KOLO_INT64, KOLO_SUM),
       "allreduce(failures)");
  if (c.rank == 0) {
    printf("collective_check: %d ranks, %ld cases, %lld failures, %.1f s\n", c.size, c.cases,
           (long long)total, ((double)monotonic_ns() - started) / 1e9);
  }
  kolo_comm_destroy(c.comm);
  free(c.send);
  free(c.recv);
  free(c.copy);
  return total == 0 ? 0 : 1;
}
