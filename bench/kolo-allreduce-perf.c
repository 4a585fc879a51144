/* kolo-allreduce-perf: all-reduce bus bandwidth over a size sweep, in the columns
 * of nccl-tests (size, count, type, redop, time, algbw, busbw, #wrong). Run it
 * under kolorun: `kolorun -np 2 kolo-allreduce-perf -b 4K -e 64M -f 4`. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kolo/kolo.h"
#ifdef KOLO_BENCH_CUDA
#include "kolo_nccl.h"
#endif

typedef struct bench_options {
  size_t min_bytes, max_bytes;
  double factor;
  int warmups, iterations;
  kolo_dtype dtype;
  kolo_op op;
  int check;
  int in_place;
  int cuda; /* -D cuda: buffers in GPU memory, all-reduce over NCCL */
} bench_options;

static void usage(FILE *out) {
  fprintf(out,
          "usage: kolo-allreduce-perf [-b MIN] [-e MAX] [-f FACTOR] [-w WARMUPS] [-n ITERS]\n"
          "                           [-d DTYPE] [-o OP] [-c 0|1] [-i 0|1] [-D host|cuda]\n"
          "  sizes in bytes with K/M/G suffixes (defaults: -b 4K -e 64M -f 4 -w 5 -n 20)\n"
          "  -d uint8|int32|int64|float16|bfloat16|float32|float64 (default float32)\n"
          "  -o sum|avg|min|max|prod (default sum); -c 1 checks results; -i 1 in place\n"
          "  -D cuda: buffers in GPU memory (rank r on CUDA device local_rank), NCCL data plane\n");
}

static int parse_size(const char *text, size_t *out) {
  char *end = NULL;
  errno = 0;
  double value = strtod(text, &end);
  if (errno != 0 || end == text || value < 0) return -1;
  double scale = 1;
  if (*end == 'K' || *end == 'k')
    scale = 1024.0, end++;
  else if (*end == 'M' || *end == 'm')
    scale = 1024.0 * 1024.0, end++;
  else if (*end == 'G' || *end == 'g')
    scale = 1024.0 * 1024.0 * 1024.0, end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0') return -1;
  *out = (size_t)(value * scale);
  return 0;
}

static int parse_int(const char *text, int min, int *out) {
  char *end = NULL;
  long value = strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < min || value > 1000000) return -1;
  *out = (int)value;
  return 0;
}

static int parse_options(int argc, char **argv, bench_options *o) {
  *o = (bench_options){.min_bytes = 4096,
                       .max_bytes = 64u << 20,
                       .factor = 4,
                       .warmups = 5,
                       .iterations = 20,
                       .dtype = KOLO_FLOAT32,
                       .op = KOLO_SUM,
                       .check = 1};
  int c;
  while ((c = getopt(argc, argv, "b:e:f:w:n:d:o:c:i:D:h")) != -1) {
    int bad = 0;
    switch (c) {
      case 'b':
        bad = parse_size(optarg, &o->min_bytes);
        break;
      case 'e':
        bad = parse_size(optarg, &o->max_bytes);
        break;
      case 'f':
        o->factor = atof(optarg);
        bad = o->factor < 1.01;
        break;
      case 'w':
        bad = parse_int(optarg, 0, &o->warmups);
        break;
      case 'n':
        bad = parse_int(optarg, 1, &o->iterations);
        break;
      case 'c':
        bad = parse_int(optarg, 0, &o->check);
        break;
      case 'i':
        bad = parse_int(optarg, 0, &o->in_place);
        break;
      case 'd':
        bad = 1;
        for (int d = 0; d < KOLO_DTYPE_COUNT; d++) {
          if (strcmp(optarg, kolo_dtype_name((kolo_dtype)d)) == 0)
            o->dtype = (kolo_dtype)d, bad = 0;
        }
        break;
      case 'o':
        bad = 1;
        for (int p = 0; p < KOLO_OP_COUNT; p++) {
          if (strcmp(optarg, kolo_op_name((kolo_op)p)) == 0) o->op = (kolo_op)p, bad = 0;
        }
        break;
      case 'D':
        bad = strcmp(optarg, "cuda") != 0 && strcmp(optarg, "host") != 0;
        o->cuda = strcmp(optarg, "cuda") == 0;
        break;
      case 'h':
        usage(stdout);
        exit(0);
      default:
        bad = 1;
    }
    if (bad) {
      fprintf(stderr, "kolo-allreduce-perf: bad value for -%c\n", optopt ? optopt : c);
      usage(stderr);
      return -1;
    }
  }
  if (optind != argc || o->min_bytes > o->max_bytes || o->max_bytes == 0) {
    fprintf(stderr, "kolo-allreduce-perf: bad arguments (need -b <= -e, no extra words)\n");
    usage(stderr);
    return -1;
  }
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Input of rank for element i, chosen so the exact result is known and small. */
static double input(kolo_op op, int rank, int size, size_t i) {
  switch (op) {
    case KOLO_PROD:
      return (i + (size_t)rank) % (size_t)size == 0 ? 2 : 1; /* product is 2 */
    case KOLO_MIN:
    case KOLO_MAX:
      return (double)((i + (size_t)rank) % 7);
    default:
      return (double)((i + (size_t)rank) % 5);
  }
}

static double expected(kolo_op op, kolo_dtype dtype, int size, size_t i) {
  double acc = input(op, 0, size, i);
  for (int r = 1; r < size; r++) {
    double v = input(op, r, size, i);
    if (op == KOLO_MIN)
      acc = v < acc ? v : acc;
    else if (op == KOLO_MAX)
      acc = v > acc ? v : acc;
    else if (op == KOLO_PROD)
      acc *= v;
    else
      acc += v;
  }
  if (op == KOLO_AVG) {
    int integer = dtype == KOLO_UINT8 || dtype == KOLO_INT32 || dtype == KOLO_INT64;
    acc = integer ? floor(acc / size) : acc / size;
  }
  return acc;
}

static void store(kolo_dtype dtype, void *buffer, size_t i, double v) {
  switch (dtype) {
    case KOLO_UINT8:
      ((uint8_t *)buffer)[i] = (uint8_t)v;
      break;
    case KOLO_INT32:
      ((int32_t *)buffer)[i] = (int32_t)v;
      break;
    case KOLO_INT64:
      ((int64_t *)buffer)[i] = (int64_t)v;
      break;
    case KOLO_FLOAT16:
      ((uint16_t *)buffer)[i] = kolo_float_to_half((float)v);
      break;
    case KOLO_BFLOAT16:
      ((uint16_t *)buffer)[i] = kolo_float_to_bfloat16((float)v);
      break;
    case KOLO_FLOAT32:
      ((float *)buffer)[i] = (float)v;
      break;
    default:
      ((double *)buffer)[i] = v;
      break;
  }
}

static double load(kolo_dtype dtype, const void *buffer, size_t i) {
  switch (dtype) {
    case KOLO_UINT8:
      return ((const uint8_t *)buffer)[i];
    case KOLO_INT32:
      return ((const int32_t *)buffer)[i];
    case KOLO_INT64:
      return (double)((const int64_t *)buffer)[i];
    case KOLO_FLOAT16:
      return kolo_half_to_float(((const uint16_t *)buffer)[i]);
    case KOLO_BFLOAT16:
      return kolo_bfloat16_to_float(((const uint16_t *)buffer)[i]);
    case KOLO_FLOAT32:
      return ((const float *)buffer)[i];
    default:
      return ((const double *)buffer)[i];
  }
}

static double tolerance(kolo_dtype dtype, double want) {
  double relative = dtype == KOLO_FLOAT16 ? 1e-3 : dtype == KOLO_BFLOAT16 ? 8e-3 : 1e-6;
  int integer = dtype == KOLO_UINT8 || dtype == KOLO_INT32 || dtype == KOLO_INT64;
  return integer ? 0 : relative * fabs(want) + 1e-12;
}

static void fill(const bench_options *o, int rank, int size, void *buffer, size_t count) {
  for (size_t i = 0; i < count; i++) store(o->dtype, buffer, i, input(o->op, rank, size, i));
}

/* The operation's buffers: host memory, or GPU memory with host mirrors. */
typedef struct bench_buffers {
  void *send, *recv;           /* what the all-reduce sees */
  void *host_send, *host_recv; /* where inputs are made and results checked */
} bench_buffers;

static kolo_status upload(const bench_options *o, bench_buffers *b, size_t bytes) {
#ifdef KOLO_BENCH_CUDA
  if (o->cuda) return kolo_nccl_copy_to_device(b->send, b->host_send, bytes);
#endif
  (void)o, (void)b, (void)bytes;
  return KOLO_OK;
}

static kolo_status download(const bench_options *o, bench_buffers *b, const void *target,
                            size_t bytes) {
#ifdef KOLO_BENCH_CUDA
  if (o->cuda) return kolo_nccl_copy_to_host(b->host_recv, target, bytes);
#endif
  (void)bytes;
  if (target != b->host_recv) b->host_recv = (void *)target;
  (void)o;
  return KOLO_OK;
}

static kolo_status allocate(const bench_options *o, kolo_comm *comm, bench_buffers *b,
                            size_t bytes) {
  b->host_send = malloc(bytes);
  b->host_recv = malloc(bytes);
  if (b->host_send == NULL || b->host_recv == NULL) return KOLO_ERR_NO_MEMORY;
  memset(b->host_send, 0, bytes);
  memset(b->host_recv, 0, bytes);
  b->send = b->host_send;
  b->recv = b->host_recv;
  if (!o->cuda) return KOLO_OK;
  kolo_status status = kolo_comm_use_cuda(comm, kolo_comm_local_rank(comm));
  if (status != KOLO_OK) return status;
#ifdef KOLO_BENCH_CUDA
  int device = kolo_comm_local_rank(comm);
  b->send = b->recv = NULL; /* device buffers from here on (release frees them) */
  status = kolo_nccl_device_alloc(device, bytes, &b->send);
  if (status == KOLO_OK) status = kolo_nccl_device_alloc(device, bytes, &b->recv);
  return status;
#else
  return KOLO_ERR_UNSUPPORTED;
#endif
}

static void release(const bench_options *o, bench_buffers *b) {
#ifdef KOLO_BENCH_CUDA
  if (o->cuda && b->send != b->host_send) { /* device buffers were made */
    kolo_nccl_device_free(b->send);
    kolo_nccl_device_free(b->recv);
  }
#endif
  (void)o;
  free(b->host_send);
  free(b->host_recv);
}

/* One all-reduce on fresh inputs, compared element by element; returns #wrong. */
static long long check_once(kolo_comm *comm, const bench_options *o, bench_buffers *b, size_t count,
                            kolo_status *status) {
  int rank = kolo_comm_rank(comm), size = kolo_comm_size(comm);
  size_t bytes = count * kolo_dtype_size(o->dtype);
  fill(o, rank, size, b->host_send, count);
  *status = upload(o, b, bytes);
  if (*status != KOLO_OK) return -1;
  void *target = o->in_place ? b->send : b->recv;
  *status = kolo_allreduce(comm, b->send, target, count, o->dtype, o->op);
  if (*status != KOLO_OK) return -1;
  bench_buffers result = *b;
  *status = download(o, &result, target, bytes);
  if (*status != KOLO_OK) return -1;
  long long wrong = 0;
  for (size_t i = 0; i < count; i++) {
    double want = expected(o->op, o->dtype, size, i);
    if (!(fabs(load(o->dtype, result.host_recv, i) - want) <= tolerance(o->dtype, want))) wrong++;
  }
  return wrong;
}

static int fail(kolo_comm *comm, kolo_status status, const char *what) {
  char message[256];
  kolo_comm_error_message(comm, message, sizeof message);
  fprintf(stderr, "kolo-allreduce-perf: %s: %s %s\n", what, kolo_strerror(status), message);
  return 1;
}

int main(int argc, char **argv) {
  bench_options o;
  if (parse_options(argc, argv, &o) != 0) return 2;
  kolo_comm *comm = NULL;
  kolo_status status = kolo_comm_create_from_env(&comm);
  if (status != KOLO_OK) {
    fprintf(stderr, "kolo-allreduce-perf: kolo_comm_create_from_env: %s (run it under kolorun)\n",
            kolo_strerror(status));
    return 1;
  }
  int rank = kolo_comm_rank(comm), size = kolo_comm_size(comm);
  size_t width = kolo_dtype_size(o.dtype);
  size_t max_count = o.max_bytes / width;
  /* allocated and touched once, reused for every size */
  bench_buffers buffers = {0};
  status = allocate(&o, comm, &buffers, max_count * width + 64);
  double *times = malloc((size_t)o.iterations * sizeof *times);
  if (status != KOLO_OK || times == NULL) {
    fprintf(stderr, "kolo-allreduce-perf: cannot set up %s buffers: %s\n", o.cuda ? "CUDA" : "host",
            kolo_strerror(status != KOLO_OK ? status : KOLO_ERR_NO_MEMORY));
    release(&o, &buffers);
    free(times);
    kolo_comm_destroy(comm);
    return 1;
  }
  void *send = buffers.send, *recv = buffers.recv;
  double factor = 2.0 * (size - 1) / size;
  if (rank == 0) {
    printf(
        "# kolo-allreduce-perf: %d ranks, %s buffers, dtype %s, op %s, %s, %d warm-up and %d "
        "timed iterations per size\n",
        size, o.cuda ? "CUDA" : "host", kolo_dtype_name(o.dtype), kolo_op_name(o.op),
        o.in_place ? "in place" : "out of place", o.warmups, o.iterations);
    printf(
        "# time = median of the per-iteration times on each rank, then the max over ranks;\n"
        "# algbw = size / time; busbw = algbw * 2(n-1)/n; #wrong from a separate checked run\n");
    printf("#%11s %12s %9s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop", "time",
           "algbw", "busbw", "#wrong");
    printf("#%11s %12s %9s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
           "(GB/s)", "");
    fflush(stdout);
  }
  double bus_sum = 0;
  int rows = 0;
  long long wrong_all = 0;
  for (double bytes_d = (double)o.min_bytes; bytes_d <= (double)o.max_bytes * 1.0000001;
       bytes_d *= o.factor) {
    size_t count = (size_t)bytes_d / width;
    if (count == 0) continue;
    size_t bytes = count * width;
    fill(&o, rank, size, buffers.host_send, count);
    status = upload(&o, &buffers, bytes);
    if (status != KOLO_OK) return fail(comm, status, "copy to the GPU");
    void *target = o.in_place ? send : recv;
    status = kolo_barrier(comm);
    if (status != KOLO_OK) return fail(comm, status, "barrier");
    for (int w = 0; w < o.warmups; w++) {
      status = kolo_allreduce(comm, send, target, count, o.dtype, o.op);
      if (status != KOLO_OK) return fail(comm, status, "warm-up all-reduce");
    }
    for (int it = 0; it < o.iterations; it++) {
      double start = now_s();
      status = kolo_allreduce(comm, send, target, count, o.dtype, o.op);
      times[it] = now_s() - start;
      if (status != KOLO_OK) return fail(comm, status, "all-reduce");
    }
    qsort(times, (size_t)o.iterations, sizeof *times, compare_doubles);
    double median = o.iterations % 2 ? times[o.iterations / 2]
                                     : (times[o.iterations / 2 - 1] + times[o.iterations / 2]) / 2;
    double slowest = 0;
    status = kolo_allreduce(comm, &median, &slowest, 1, KOLO_FLOAT64, KOLO_MAX);
    if (status != KOLO_OK) return fail(comm, status, "all-reduce of the times");
    long long wrong = 0, wrong_total = 0;
    if (o.check) {
      wrong = check_once(comm, &o, &buffers, count, &status);
      if (status != KOLO_OK) return fail(comm, status, "checked all-reduce");
      status = kolo_allreduce(comm, &wrong, &wrong_total, 1, KOLO_INT64, KOLO_SUM);
      if (status != KOLO_OK) return fail(comm, status, "all-reduce of #wrong");
    }
    wrong_all += wrong_total;
    double algbw = (double)bytes / slowest / 1e9;
    double busbw = algbw * factor;
    bus_sum += busbw;
    rows++;
    if (rank == 0) {
      char wrong_text[32];
      if (o.check)
        snprintf(wrong_text, sizeof wrong_text, "%lld", wrong_total);
      else
        snprintf(wrong_text, sizeof wrong_text, "N/A");
      printf(" %11zu %12zu %9s %6s %10.1f %8.2f %8.2f %7s\n", bytes, count,
             kolo_dtype_name(o.dtype), kolo_op_name(o.op), slowest * 1e6, algbw, busbw, wrong_text);
      fflush(stdout);
    }
  }
  if (rank == 0 && rows > 0) printf("# Avg bus bandwidth    : %.3f GB/s\n", bus_sum / rows);
  kolo_comm_destroy(comm);
  release(&o, &buffers);
  free(times);
  if (wrong_all != 0) {
    if (rank == 0) fprintf(stderr, "kolo-allreduce-perf: %lld wrong elements\n", wrong_all);
    return 1;
  }
  return 0;
}
