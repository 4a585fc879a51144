/* Multi-process check of the named engine (include/kolo/engine.h), run under
 * kolorun (-np 1..5): every call with exact expected results computed locally
 * from every rank's deterministic inputs (small integers, so sums, scalings by
 * powers of two and AVG agree bit for bit with a serial reference). The first
 * argument picks how ranks submit each batch of named requests:
 *   ordered  - every rank in the same order;
 *   reversed - rank r uses a rank-dependent order (odd ranks reversed, even
 *              ranks rotated by r), so ranks never agree on the order.
 * Also checks argument errors, KOLO_ERR_EXISTS for a name still in flight, and
 * the kolo_result fields. Exits 0 only if every rank passed. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kolo/engine.h"

#define MAX_TENSORS 64

typedef struct checker {
  kolo_comm *comm;
  int rank, size;
  int reversed;
  long failures, cases;
} checker;

static void failf(checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void failf(checker *c, const char *fmt, ...) {
  c->failures++;
  if (c->failures > 20) return;
  char line[600];
  va_list args;
  va_start(args, fmt);
  vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  fprintf(stderr, "FAIL rank %d: %s\n", c->rank, line);
}

static void must(checker *c, kolo_status status, const char *what) {
  if (status == KOLO_OK) return;
  char message[256];
  kolo_comm_error_message(c->comm, message, sizeof message);
  fprintf(stderr, "FATAL rank %d: %s returned %s %s\n", c->rank, what, kolo_status_name(status),
          message);
  exit(1);
}

/* The position at which this rank submits item i of n. */
static int order_of(const checker *c, int i, int n) {
  if (!c->reversed) return i;
  if (c->rank % 2 == 1) return n - 1 - i;
  return (i + c->rank) % n;
}

/* A small integer input: exact in every dtype used here. */
static double value(int rank, int tensor, size_t i) {
  return (double)((rank * 7 + tensor * 3 + (int)(i % 1009)) % 13) - 6.0;
}

static void store(kolo_dtype dtype, void *buffer, size_t i, double v) {
  switch (dtype) {
    case KOLO_INT32:
      ((int32_t *)buffer)[i] = (int32_t)v;
      break;
    case KOLO_INT64:
      ((int64_t *)buffer)[i] = (int64_t)v;
      break;
    case KOLO_FLOAT64:
      ((double *)buffer)[i] = v;
      break;
    default:
      ((float *)buffer)[i] = (float)v;
      break;
  }
}

static double load(kolo_dtype dtype, const void *buffer, size_t i) {
  switch (dtype) {
    case KOLO_INT32:
      return ((const int32_t *)buffer)[i];
    case KOLO_INT64:
      return (double)((const int64_t *)buffer)[i];
    case KOLO_FLOAT64:
      return ((const double *)buffer)[i];
    default:
      return ((const float *)buffer)[i];
  }
}

/* op over ranks of value(r, tensor, i) * prescale, then * postscale, as the
 * library computes it for these exact inputs. */
static double expected_reduce(const checker *c, kolo_dtype dtype, kolo_op op, int tensor, size_t i,
                              double prescale, double postscale) {
  double acc = value(0, tensor, i) * prescale;
  for (int r = 1; r < c->size; r++) {
    double v = value(r, tensor, i) * prescale;
    switch (op) {
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
        acc += v;
        break;
    }
  }
  if (op == KOLO_AVG) {
    if (dtype == KOLO_FLOAT32)
      acc = (float)acc / (float)c->size;
    else if (dtype == KOLO_FLOAT64)
      acc = acc / c->size;
    else
      acc = (double)((int64_t)acc / c->size);
  }
  if (dtype == KOLO_FLOAT32) return (float)((float)acc * postscale);
  return acc * postscale;
}

/* n named all-reduces of different sizes submitted in this rank's order, then waited. */
static void check_allreduces(checker *c, kolo_dtype dtype, kolo_op op, double pre, double post,
                             int in_place) {
  static const size_t sizes[] = {1, 0, 7, 1000, 33000, 5, 250000, 64, 3, 70001, 2, 9};
  const int n = (int)(sizeof sizes / sizeof sizes[0]);
  size_t element = kolo_dtype_size(dtype);
  void *send[16], *recv[16];
  kolo_request *requests[16];
  char name[64];
  for (int t = 0; t < n; t++) {
    send[t] = malloc(sizes[t] * element + 8);
    recv[t] = in_place ? send[t] : malloc(sizes[t] * element + 8);
    for (size_t i = 0; i < sizes[t]; i++) store(dtype, send[t], i, value(c->rank, t, i));
  }
  for (int k = 0; k < n; k++) {
    int t = order_of(c, k, n);
    snprintf(name, sizeof name, "grad.%s.%s.%d.%d", kolo_dtype_name(dtype), kolo_op_name(op), t,
             in_place);
    must(c,
         kolo_allreduce_named(c->comm, name, send[t], recv[t], sizes[t], dtype, op, pre, post,
                              &requests[t]),
         name);
  }
  for (int k = 0; k < n; k++) {
    int t = order_of(c, n - 1 - k, n);
    kolo_result result;
    must(c, kolo_wait_result(requests[t], &result), "wait allreduce");
    if (result.message[0] != '\0') failf(c, "success with message '%s'", result.message);
    c->cases++;
    for (size_t i = 0; i < sizes[t]; i++) {
      double want = expected_reduce(c, dtype, op, t, i, pre, post);
      double got = load(dtype, recv[t], i);
      if (got != want) {
        failf(c, "allreduce %s %s tensor %d [%zu]: got %g want %g", kolo_dtype_name(dtype),
              kolo_op_name(op), t, i, got, want);
        break;
      }
    }
  }
  for (int t = 0; t < n; t++) {
    if (!in_place) free(recv[t]);
    free(send[t]);
  }
}

static void check_grouped(checker *c) {
  enum { MEMBERS = 4 };
  static const size_t counts[MEMBERS] = {3, 40000, 0, 17};
  const char *names[MEMBERS] = {"layer.w", "layer.b", "layer.empty", "layer.scale"};
  float *send[MEMBERS], *recv[MEMBERS];
  for (int m = 0; m < MEMBERS; m++) {
    send[m] = malloc(counts[m] * sizeof(float) + 4);
    recv[m] = malloc(counts[m] * sizeof(float) + 4);
    for (size_t i = 0; i < counts[m]; i++) send[m][i] = (float)value(c->rank, 20 + m, i);
  }
  kolo_request *request = NULL;
  must(c,
       kolo_grouped_allreduce_named(c->comm, "group.layer", MEMBERS, names,
                                    (const void *const *)send, (void *const *)recv, counts,
                                    KOLO_FLOAT32, KOLO_SUM, 2.0, 0.25, &request),
       "grouped");
  must(c, kolo_wait(request), "wait grouped");
  for (int m = 0; m < MEMBERS; m++) {
    c->cases++;
    for (size_t i = 0; i < counts[m]; i++) {
      double want = expected_reduce(c, KOLO_FLOAT32, KOLO_SUM, 20 + m, i, 2.0, 0.25);
      if (recv[m][i] != want) {
        failf(c, "grouped member %d [%zu]: got %g want %g", m, i, recv[m][i], want);
        break;
      }
    }
    free(send[m]);
    free(recv[m]);
  }
}

/* All-gathers with per-rank counts: one into a caller buffer, one the engine allocates. */
static void check_allgathers(checker *c) {
  size_t mine = (size_t)c->rank * 1000 + 3, total = 0;
  for (int r = 0; r < c->size; r++) total += (size_t)r * 1000 + 3;
  int64_t *send = malloc(mine * sizeof *send);
  int64_t *into = malloc(total * sizeof *into);
  size_t counts_a[8], counts_b[8];
  for (size_t i = 0; i < mine; i++) send[i] = (int64_t)c->rank * 100000 + (int64_t)i;
  kolo_request *requests[2];
  int first = c->reversed && c->rank % 2 == 1;
  for (int k = 0; k < 2; k++) {
    int which = first ? 1 - k : k;
    if (which == 0) {
      must(c,
           kolo_allgather_named(c->comm, "gather.into", send, mine, into, total, counts_a,
                                KOLO_INT64, &requests[0]),
           "allgather into");
    } else {
      must(c,
           kolo_allgather_named(c->comm, "gather.alloc", send, mine, NULL, 0, counts_b, KOLO_INT64,
                                &requests[1]),
           "allgather alloc");
    }
  }
  kolo_result result;
  must(c, kolo_wait(requests[0]), "wait allgather into");
  must(c, kolo_wait_result(requests[1], &result), "wait allgather alloc");
  if (result.output == NULL || result.output_count != total) {
    failf(c, "allgather alloc: output %p with %zu elements, want %zu", result.output,
          result.output_count, total);
  }
  const int64_t *outputs[2] = {into, result.output};
  for (int which = 0; which < 2 && result.output != NULL; which++) {
    c->cases++;
    size_t at = 0;
    for (int r = 0; r < c->size; r++) {
      size_t count = (size_t)r * 1000 + 3;
      if ((which ? counts_b : counts_a)[r] != count) failf(c, "allgather counts[%d] wrong", r);
      for (size_t i = 0; i < count; i++, at++) {
        if (outputs[which][at] != (int64_t)r * 100000 + (int64_t)i) {
          failf(c, "allgather %d: block %d [%zu] wrong", which, r, i);
          break;
        }
      }
    }
  }
  kolo_free(result.output);
  free(send);
  free(into);
}

static void check_broadcasts(checker *c) {
  enum { COUNT = 5001 };
  double *buffers[8];
  kolo_request *requests[8];
  char name[32];
  for (int root = 0; root < c->size; root++) {
    buffers[root] = malloc(COUNT * sizeof(double));
    for (int i = 0; i < COUNT; i++) buffers[root][i] = c->rank == root ? root * 1000.0 + i : -1;
  }
  for (int k = 0; k < c->size; k++) {
    int root = order_of(c, k, c->size);
    snprintf(name, sizeof name, "bcast.%d", root);
    must(c,
         kolo_broadcast_named(c->comm, name, buffers[root], COUNT, KOLO_FLOAT64, root,
                              &requests[root]),
         name);
  }
  for (int root = 0; root < c->size; root++) {
    must(c, kolo_wait(requests[root]), "wait broadcast");
    c->cases++;
    for (int i = 0; i < COUNT; i++) {
      if (buffers[root][i] != root * 1000.0 + i) {
        failf(c, "broadcast root %d [%d]: got %g", root, i, buffers[root][i]);
        break;
      }
    }
    free(buffers[root]);
  }
}

/* Reduce-scatter with rank r receiving 2r+1 elements, and an even one. */
static void check_reducescatters(checker *c) {
  size_t counts[8], total = 0, offset_mine = 0;
  for (int r = 0; r < c->size; r++) {
    counts[r] = 2 * (size_t)r + 1 + (r == 1 ? 70000 : 0);
    if (r == c->rank) offset_mine = total;
    total += counts[r];
  }
  int32_t *send = malloc(total * sizeof *send), *recv = malloc(counts[c->rank] * sizeof *recv);
  for (size_t i = 0; i < total; i++) send[i] = (int32_t)value(c->rank, 30, i);
  size_t even = 6 * (size_t)c->size;
  float *send_even = malloc(even * sizeof(float)), recv_even[6];
  for (size_t i = 0; i < even; i++) send_even[i] = (float)value(c->rank, 31, i);
  kolo_request *requests[2];
  for (int k = 0; k < 2; k++) {
    int which = c->reversed && c->rank % 2 == 1 ? 1 - k : k;
    if (which == 0) {
      must(c,
           kolo_reducescatter_named(c->comm, "rs.uneven", send, recv, total, counts, KOLO_INT32,
                                    KOLO_SUM, &requests[0]),
           "reducescatter uneven");
    } else {
      must(c,
           kolo_reducescatter_named(c->comm, "rs.even", send_even, recv_even, even, NULL,
                                    KOLO_FLOAT32, KOLO_MAX, &requests[1]),
           "reducescatter even");
    }
  }
  must(c, kolo_wait(requests[0]), "wait rs uneven");
  must(c, kolo_wait(requests[1]), "wait rs even");
  c->cases += 2;
  for (size_t i = 0; i < counts[c->rank]; i++) {
    double want = expected_reduce(c, KOLO_INT32, KOLO_SUM, 30, offset_mine + i, 1, 1);
    if (recv[i] != want) {
      failf(c, "reducescatter uneven [%zu]: got %d want %g", i, recv[i], want);
      break;
    }
  }
  for (size_t i = 0; i < 6; i++) {
    double want = expected_reduce(c, KOLO_FLOAT32, KOLO_MAX, 31, 6 * (size_t)c->rank + i, 1, 1);
    if (recv_even[i] != want)
      failf(c, "reducescatter even [%zu]: got %g want %g", i, recv_even[i], want);
  }
  free(send);
  free(recv);
  free(send_even);
}

/* Rank s sends (s + 2d) % 5 * 3000 + d elements to rank d (some zero), encoded (s, d, i). */
static size_t a2a_count(int s, int d) {
  return (size_t)((s + 2 * d) % 5) * 3000 + (size_t)d;
}
static int32_t a2a_value(int s, int d, size_t i) {
  return s * 1000000 + d * 100000 + (int32_t)i;
}

static void check_alltoalls(checker *c) {
  size_t send_counts[8], total = 0, incoming = 0;
  for (int d = 0; d < c->size; d++) {
    send_counts[d] = a2a_count(c->rank, d);
    total += send_counts[d];
    incoming += a2a_count(d, c->rank);
  }
  int32_t *send = malloc(total * sizeof *send + 4), *into = malloc(incoming * sizeof *into + 4);
  size_t at = 0;
  for (int d = 0; d < c->size; d++) {
    for (size_t i = 0; i < send_counts[d]; i++) send[at++] = a2a_value(c->rank, d, i);
  }
  size_t counts_a[8], counts_b[8];
  kolo_request *requests[2];
  for (int k = 0; k < 2; k++) {
    int which = c->reversed && c->rank % 2 == 1 ? 1 - k : k;
    if (which == 0) {
      must(c,
           kolo_alltoall_named(c->comm, "a2a.into", send, send_counts, into, incoming, counts_a,
                               KOLO_INT32, &requests[0]),
           "alltoall into");
    } else {
      must(c,
           kolo_alltoall_named(c->comm, "a2a.alloc", send, send_counts, NULL, 0, counts_b,
                               KOLO_INT32, &requests[1]),
           "alltoall alloc");
    }
  }
  kolo_result result;
  must(c, kolo_wait(requests[0]), "wait alltoall into");
  must(c, kolo_wait_result(requests[1], &result), "wait alltoall alloc");
  if (result.output_count != incoming)
    failf(c, "alltoall alloc: %zu elements", result.output_count);
  const int32_t *outputs[2] = {into, result.output};
  for (int which = 0; which < 2 && result.output != NULL; which++) {
    c->cases++;
    at = 0;
    for (int s = 0; s < c->size; s++) {
      if ((which ? counts_b : counts_a)[s] != a2a_count(s, c->rank)) failf(c, "a2a counts[%d]", s);
      for (size_t i = 0; i < a2a_count(s, c->rank); i++, at++) {
        if (outputs[which][at] != a2a_value(s, c->rank, i)) {
          failf(c, "alltoall %d: from %d [%zu] got %d", which, s, i, outputs[which][at]);
          break;
        }
      }
    }
  }
  kolo_free(result.output);
  free(send);
  free(into);
}

/* A too-small receive buffer on one rank fails that alltoall on every rank alike. */
static void check_alltoall_capacity(checker *c) {
  if (c->size < 2) return;
  size_t send_counts[8];
  for (int d = 0; d < c->size; d++) send_counts[d] = 4;
  int32_t send[32] = {0}, into[32];
  size_t capacity = c->rank == 1 ? 3 : 4 * (size_t)c->size;
  kolo_request *request;
  must(c,
       kolo_alltoall_named(c->comm, "a2a.small", send, send_counts, into, capacity, NULL,
                           KOLO_INT32, &request),
       "alltoall small");
  kolo_result result;
  kolo_status status = kolo_wait_result(request, &result);
  c->cases++;
  if (status != KOLO_ERR_TOO_LARGE || strstr(result.message, "rank 1") == NULL) {
    failf(c, "alltoall over rank 1's capacity: %s '%s'", kolo_status_name(status), result.message);
  }
}

static void check_join(checker *c) {
  kolo_request *request;
  must(c, kolo_join_async(c->comm, &request), "join");
  kolo_result result;
  must(c, kolo_wait_result(request, &result), "wait join");
  c->cases++;
  if (result.last_rank < 0 || result.last_rank >= c->size) {
    failf(c, "join: last rank %d", result.last_rank);
  }
  int32_t last = result.last_rank, low = 0, high = 0;
  must(c, kolo_allreduce(c->comm, &last, &low, 1, KOLO_INT32, KOLO_MIN), "min");
  must(c, kolo_allreduce(c->comm, &last, &high, 1, KOLO_INT32, KOLO_MAX), "max");
  if (low != high) failf(c, "join: ranks disagree on the last rank (%d..%d)", low, high);
}

static void expect_status(checker *c, kolo_status got, kolo_status want, const char *what) {
  c->cases++;
  if (got != want) failf(c, "%s: %s, want %s", what, kolo_status_name(got), kolo_status_name(want));
}

static void check_bad_arguments(checker *c) {
  float x[4] = {1, 2, 3, 4};
  int32_t k[4] = {1, 2, 3, 4};
  kolo_request *request = NULL;
  char long_name[KOLO_NAME_MAX + 2];
  memset(long_name, 'a', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  expect_status(c,
                kolo_allreduce_named(c->comm, "", x, x, 4, KOLO_FLOAT32, KOLO_SUM, 1, 1, &request),
                KOLO_ERR_INVALID_ARG, "empty name");
  expect_status(
      c, kolo_allreduce_named(c->comm, NULL, x, x, 4, KOLO_FLOAT32, KOLO_SUM, 1, 1, &request),
      KOLO_ERR_INVALID_ARG, "NULL name");
  expect_status(
      c, kolo_allreduce_named(c->comm, long_name, x, x, 4, KOLO_FLOAT32, KOLO_SUM, 1, 1, &request),
      KOLO_ERR_INVALID_ARG, "name over KOLO_NAME_MAX");
  expect_status(c,
                kolo_allreduce_named(c->comm, "k", k, k, 4, KOLO_INT32, KOLO_SUM, 0.5, 1, &request),
                KOLO_ERR_INVALID_ARG, "prescale on int32");
  expect_status(
      c, kolo_allreduce_named(c->comm, "x", x, x, 4, KOLO_FLOAT32, KOLO_SUM, NAN, 1, &request),
      KOLO_ERR_INVALID_ARG, "NaN prescale");
  expect_status(
      c, kolo_allreduce_named(c->comm, "x", x, x, 4, (kolo_dtype)99, KOLO_SUM, 1, 1, &request),
      KOLO_ERR_INVALID_ARG, "unknown dtype");
  expect_status(
      c, kolo_allreduce_named(c->comm, "x", x, x, 4, KOLO_FLOAT32, (kolo_op)42, 1, 1, &request),
      KOLO_ERR_INVALID_ARG, "unknown op");
  expect_status(
      c, kolo_allreduce_named(c->comm, "x", NULL, x, 4, KOLO_FLOAT32, KOLO_SUM, 1, 1, &request),
      KOLO_ERR_INVALID_ARG, "NULL send");
  expect_status(c, kolo_allreduce_named(c->comm, "x", x, x, 4, KOLO_FLOAT32, KOLO_SUM, 1, 1, NULL),
                KOLO_ERR_INVALID_ARG, "NULL request");
  expect_status(c, kolo_broadcast_named(c->comm, "b", x, 4, KOLO_FLOAT32, c->size, &request),
                KOLO_ERR_INVALID_ARG, "broadcast root out of range");
  if (c->size > 1) {
    expect_status(c,
                  kolo_reducescatter_named(c->comm, "r", x, x, (size_t)c->size * 4 + 1, NULL,
                                           KOLO_FLOAT32, KOLO_SUM, &request),
                  KOLO_ERR_INVALID_ARG, "reducescatter count not divisible");
  }
  expect_status(c,
                kolo_alltoall_named(c->comm, "a", x, NULL, NULL, 0, NULL, KOLO_FLOAT32, &request),
                KOLO_ERR_INVALID_ARG, "alltoall without send counts");
  expect_status(c,
                kolo_grouped_allreduce_named(c->comm, "g", 0, NULL, NULL, NULL, NULL, KOLO_FLOAT32,
                                             KOLO_SUM, 1, 1, &request),
                KOLO_ERR_INVALID_ARG, "empty group");
  expect_status(c, kolo_join_async(NULL, &request), KOLO_ERR_INVALID_ARG, "join without comm");
  expect_status(c, kolo_wait_result(NULL, NULL), KOLO_ERR_INVALID_ARG, "wait_result(NULL)");
  /* a name still in flight here cannot be submitted again; afterwards it can */
  kolo_request *first = NULL, *second = NULL;
  must(c, kolo_allreduce_named(c->comm, "dup", x, x, 4, KOLO_FLOAT32, KOLO_SUM, 1, 1, &first),
       "dup");
  expect_status(c,
                kolo_allreduce_named(c->comm, "dup", k, k, 4, KOLO_INT32, KOLO_SUM, 1, 1, &second),
                KOLO_ERR_EXISTS, "same name while in flight");
  must(c, kolo_wait(first), "wait dup");
  must(c, kolo_allreduce_named(c->comm, "dup", x, x, 4, KOLO_FLOAT32, KOLO_SUM, 1, 1, &first),
       "dup again");
  int done = 0;
  kolo_result result;
  while (!done) must(c, kolo_test_result(first, &done, &result), "test_result");
  expect_status(c, result.status, KOLO_OK, "test_result status");
  /* and nothing broke: the next operation works */
  float one = 1, sum = 0;
  must(c, kolo_allreduce(c->comm, &one, &sum, 1, KOLO_FLOAT32, KOLO_SUM), "allreduce after errors");
  if (sum != (float)c->size) failf(c, "allreduce after errors gave %g", sum);
}

static uint64_t monotonic_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
}

int main(int argc, char **argv) {
  checker c = {0};
  const char *mode = argc > 1 ? argv[1] : "ordered";
  if (strcmp(mode, "ordered") != 0 && strcmp(mode, "reversed") != 0) {
    fprintf(stderr, "usage: engine_check [ordered|reversed]\n");
    return 2;
  }
  c.reversed = strcmp(mode, "reversed") == 0;
  must(&c, kolo_comm_create_from_env(&c.comm), "kolo_comm_create_from_env");
  c.rank = kolo_comm_rank(c.comm);
  c.size = kolo_comm_size(c.comm);
  if (c.size > 8) {
    fprintf(stderr, "FATAL: this check supports up to 8 ranks\n");
    return 1;
  }
  uint64_t started = monotonic_ns();
  check_allreduces(&c, KOLO_FLOAT32, KOLO_SUM, 1, 1, 0);
  check_allreduces(&c, KOLO_FLOAT32, KOLO_SUM, 0.5, 4, 1);
  check_allreduces(&c, KOLO_FLOAT32, KOLO_AVG, 1, 1, 0);
  check_allreduces(&c, KOLO_FLOAT64, KOLO_MAX, 1, 1, 1);
  check_allreduces(&c, KOLO_INT32, KOLO_SUM, 1, 1, 0);
  check_allreduces(&c, KOLO_INT64, KOLO_MIN, 1, 1, 0);
  check_grouped(&c);
  check_allgathers(&c);
  check_broadcasts(&c);
  check_reducescatters(&c);
  check_alltoalls(&c);
  check_alltoall_capacity(&c);
  check_join(&c);
  check_bad_arguments(&c);
  int64_t failures = c.failures, total = 0;
  must(&c, kolo_allreduce(c.comm, &failures, &total, 1, KOLO_INT64, KOLO_SUM),
       "allreduce(failures)");
  if (c.rank == 0) {
    printf("engine_check %s: %d ranks, %ld cases, %lld failures, %.1f s\n", mode, c.size, c.cases,
           (long long)total, (double)(monotonic_ns() - started) / 1e9);
  }
  kolo_comm_destroy(c.comm);
  return total == 0 ? 0 : 1;
}
