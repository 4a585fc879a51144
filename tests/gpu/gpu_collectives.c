/* GPU correctness test: every collective (allreduce, reducescatter, broadcast,
 * allgather, allgatherv) x every dtype x every op, on device buffers, one rank
 * per GPU in its own process, checked against a host reference; plus a grouped
 * call, the count exchange, non-blocking test(), and refusal of host buffers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

typedef struct options {
  int quick;
} options;

static const kolo_dtype dtypes[] = {KOLO_UINT8,   KOLO_INT32,   KOLO_INT64,  KOLO_FLOAT16,
                                    KOLO_BFLOAT16, KOLO_FLOAT32, KOLO_FLOAT64};
static const char *dtype_names[] = {"uint8", "int32", "int64", "float16",
                                    "bfloat16", "float32", "float64"};
static const kolo_op ops[] = {KOLO_SUM, KOLO_AVG, KOLO_MIN, KOLO_MAX, KOLO_PROD};
static const char *op_names[] = {"sum", "avg", "min", "max", "prod"};

/* Input element i of rank r: small integers, exact in every type; PROD uses 1..2
 * so products stay representable (uint8 wraps the same way on both sides). */
static double value(kolo_op op, int rank, size_t i) {
  if (op == KOLO_PROD) return (double)((rank + (int)(i % 2)) % 2 + 1);
  return (double)((rank * 7 + (int)(i % 4) * 3) % 4 + 1);
}

static double reference(kolo_dtype dtype, kolo_op op, int size, size_t i) {
  double acc = value(op, 0, i);
  for (int r = 1; r < size; r++) {
    double v = value(op, r, i);
    switch (op) {
      case KOLO_SUM: case KOLO_AVG: acc += v; break;
      case KOLO_MIN: acc = v < acc ? v : acc; break;
      case KOLO_MAX: acc = v > acc ? v : acc; break;
      case KOLO_PROD: acc *= v; break;
      default: break;
    }
  }
  if (op == KOLO_PROD && dtype == KOLO_UINT8) acc = fmod(acc, 256.0);
  if (op == KOLO_AVG) acc = gpu_tolerance(dtype) == 0 ? floor(acc / size) : acc / size;
  return acc;
}

static int close_enough(kolo_dtype dtype, double got, double want) {
  double tol = gpu_tolerance(dtype);
  if (tol == 0) return got == want;
  return fabs(got - want) <= tol * (fabs(want) > 1 ? fabs(want) : 1);
}

typedef struct bufs {
  void *dsend, *drecv; /* device */
  char *hsend, *hrecv; /* host */
  size_t bytes;
} bufs;

/* Fills the device recv buffer with a pattern no result can equal by chance. */
static kolo_status poison(bufs *b, size_t bytes) {
  memset(b->hrecv, 0xab, bytes);
  return kolo_nccl_copy_to_device(b->drecv, b->hrecv, bytes);
}

/* Runs one request to completion and reports a failure with the comm's text. */
static int finish(kolo_nccl_comm *comm, kolo_status st, kolo_nccl_request *req, const char *what) {
  if (st == KOLO_OK) st = kolo_nccl_wait(req);
  if (st != KOLO_OK) {
    char message[512];
    kolo_nccl_comm_error(comm, message, sizeof message);
    printf("# %s: %s (%s)\n", what, kolo_strerror(st), message);
    return 1;
  }
  return 0;
}

static int check_allreduce(kolo_nccl_comm *comm, bufs *b, kolo_dtype dt, size_t count) {
  int rank = kolo_nccl_comm_rank(comm), size = kolo_nccl_comm_size(comm), bad = 0;
  size_t es = kolo_nccl_dtype_size(dt);
  for (size_t o = 0; o < 5; o++) {
    for (int in_place = 0; in_place < 2; in_place++) {
      if (in_place && ops[o] != KOLO_SUM && ops[o] != KOLO_MAX) continue;
      for (size_t i = 0; i < count; i++) gpu_store(dt, b->hsend, i, value(ops[o], rank, i));
      if (poison(b, count * es) != KOLO_OK) return 1;
      void *dst = in_place ? b->dsend : b->drecv;
      if (kolo_nccl_copy_to_device(b->dsend, b->hsend, count * es) != KOLO_OK) return 1;
      kolo_nccl_request *req = NULL;
      kolo_status st = kolo_nccl_allreduce_async(comm, b->dsend, dst, count, dt, ops[o], &req);
      if (finish(comm, st, req, "allreduce")) return 1;
      if (kolo_nccl_copy_to_host(b->hrecv, dst, count * es) != KOLO_OK) return 1;
      for (size_t i = 0; i < count; i++) {
        double want = reference(dt, ops[o], size, i), got = gpu_load(dt, b->hrecv, i);
        if (!close_enough(dt, got, want)) {
          printf("# allreduce %s%s count=%zu [%zu]: got %g want %g\n", op_names[o],
                 in_place ? " in place" : "", count, i, got, want);
          bad++;
          break;
        }
      }
    }
  }
  return bad;
}

static int check_reducescatter(kolo_nccl_comm *comm, bufs *b, kolo_dtype dt, size_t count) {
  int rank = kolo_nccl_comm_rank(comm), size = kolo_nccl_comm_size(comm), bad = 0;
  size_t es = kolo_nccl_dtype_size(dt), total = count * (size_t)size;
  for (size_t o = 0; o < 5; o++) {
    for (size_t j = 0; j < total; j++) gpu_store(dt, b->hsend, j, value(ops[o], rank, j));
    if (poison(b, count * es) != KOLO_OK) return 1;
    if (kolo_nccl_copy_to_device(b->dsend, b->hsend, total * es) != KOLO_OK) return 1;
    kolo_nccl_request *req = NULL;
    kolo_status st = kolo_nccl_reducescatter_async(comm, b->dsend, b->drecv, count, dt, ops[o], &req);
    if (finish(comm, st, req, "reducescatter")) return 1;
    if (kolo_nccl_copy_to_host(b->hrecv, b->drecv, count * es) != KOLO_OK) return 1;
    for (size_t i = 0; i < count; i++) {
      double want = reference(dt, ops[o], size, (size_t)rank * count + i);
      double got = gpu_load(dt, b->hrecv, i);
      if (!close_enough(dt, got, want)) {
        printf("# reducescatter %s count=%zu [%zu]: got %g want %g\n", op_names[o], count, i, got,
               want);
        bad++;
        break;
      }
    }
  }
  return bad;
}

static int check_broadcast(kolo_nccl_comm *comm, bufs *b, kolo_dtype dt, size_t count) {
  int rank = kolo_nccl_comm_rank(comm), size = kolo_nccl_comm_size(comm), bad = 0;
  size_t es = kolo_nccl_dtype_size(dt);
  int roots[2] = {0, size - 1};
  for (int k = 0; k < 2; k++) {
    int root = roots[k];
    if (rank == root) {
      for (size_t i = 0; i < count; i++) gpu_store(dt, b->hsend, i, value(KOLO_SUM, root, i));
      if (kolo_nccl_copy_to_device(b->drecv, b->hsend, count * es) != KOLO_OK) return 1;
    } else if (poison(b, count * es) != KOLO_OK) {
      return 1;
    }
    kolo_nccl_request *req = NULL;
    kolo_status st = kolo_nccl_broadcast_async(comm, b->drecv, count, dt, root, &req);
    if (finish(comm, st, req, "broadcast")) return 1;
    if (kolo_nccl_copy_to_host(b->hrecv, b->drecv, count * es) != KOLO_OK) return 1;
    for (size_t i = 0; i < count; i++) {
      double want = value(KOLO_SUM, root, i), got = gpu_load(dt, b->hrecv, i);
      if (got != want) {
        printf("# broadcast root=%d count=%zu [%zu]: got %g want %g\n", root, count, i, got, want);
        bad++;
        break;
      }
    }
  }
  return bad;
}

/* variable = 0: equal counts (ncclAllGather); 1: counts differ by rank (grouped broadcasts). */
static int check_allgather(kolo_nccl_comm *comm, bufs *b, kolo_dtype dt, size_t count,
                           int variable) {
  int rank = kolo_nccl_comm_rank(comm), size = kolo_nccl_comm_size(comm);
  size_t es = kolo_nccl_dtype_size(dt);
  size_t counts[256], total = 0;
  for (int r = 0; r < size; r++) {
    counts[r] = variable ? (count + (size_t)r * 3) / (size_t)(r % 2 + 1) : count;
    total += counts[r];
  }
  if (variable) {
    size_t seen[256];
    if (kolo_nccl_exchange_counts(comm, counts[rank], seen) != KOLO_OK) {
      printf("# count exchange failed\n");
      return 1;
    }
    if (memcmp(seen, counts, (size_t)size * sizeof(size_t)) != 0) {
      printf("# count exchange returned other counts\n");
      return 1;
    }
  }
  for (size_t i = 0; i < counts[rank]; i++) gpu_store(dt, b->hsend, i, value(KOLO_MAX, rank, i));
  if (poison(b, total * es) != KOLO_OK) return 1;
  if (kolo_nccl_copy_to_device(b->dsend, b->hsend, counts[rank] * es) != KOLO_OK) return 1;
  kolo_nccl_request *req = NULL;
  kolo_status st = variable
                       ? kolo_nccl_allgatherv_async(comm, b->dsend, b->drecv, counts, dt, &req)
                       : kolo_nccl_allgather_async(comm, b->dsend, count, b->drecv, dt, &req);
  if (finish(comm, st, req, variable ? "allgatherv" : "allgather")) return 1;
  if (kolo_nccl_copy_to_host(b->hrecv, b->drecv, total * es) != KOLO_OK) return 1;
  size_t off = 0;
  for (int r = 0; r < size; r++) {
    for (size_t i = 0; i < counts[r]; i++) {
      double want = value(KOLO_MAX, r, i), got = gpu_load(dt, b->hrecv, off + i);
      if (got != want) {
        printf("# allgather%s block %d [%zu]: got %g want %g\n", variable ? "v" : "", r, i, got,
               want);
        return 1;
      }
    }
    off += counts[r];
  }
  return 0;
}

/* Three collectives of different types in one ncclGroupStart/End, one request,
 * completed through kolo_nccl_test polling (never blocks). */
static int check_group(kolo_nccl_comm *comm, bufs *b) {
  int rank = kolo_nccl_comm_rank(comm), size = kolo_nccl_comm_size(comm);
  const size_t n = 1000;
  char *ds = b->dsend, *dr = b->drecv;
  for (size_t i = 0; i < n; i++) {
    gpu_store(KOLO_FLOAT32, b->hsend, i, value(KOLO_SUM, rank, i));
    gpu_store(KOLO_BFLOAT16, b->hsend + 4 * n, i, value(KOLO_SUM, rank, i));
    gpu_store(KOLO_INT64, b->hsend + 6 * n, i, rank == 0 ? (double)i : -1.0);
  }
  if (kolo_nccl_copy_to_device(ds, b->hsend, 14 * n) != KOLO_OK) return 1;
  kolo_nccl_op_desc group[3] = {
      {.kind = KOLO_NCCL_ALLREDUCE, .send = ds, .recv = dr, .count = n, .dtype = KOLO_FLOAT32,
       .op = KOLO_SUM},
      {.kind = KOLO_NCCL_ALLREDUCE, .send = ds + 4 * n, .recv = dr + 4 * n, .count = n,
       .dtype = KOLO_BFLOAT16, .op = KOLO_SUM},
      {.kind = KOLO_NCCL_BROADCAST, .recv = ds + 6 * n, .count = n, .dtype = KOLO_INT64, .root = 0},
  };
  kolo_nccl_request *req = NULL;
  kolo_status st = kolo_nccl_group_async(comm, group, 3, &req);
  if (st != KOLO_OK) return finish(comm, st, req, "group");
  int done = 0, polls = 0;
  uint64_t deadline = gpu_now_ns() + 30000000000ull;
  while (!done && gpu_now_ns() < deadline) {
    if (kolo_nccl_test(req, &done, &st) != KOLO_OK) return 1;
    polls++;
  }
  if (!done || st != KOLO_OK) {
    printf("# group: done=%d status=%s after %d polls\n", done, kolo_strerror(st), polls);
    return 1;
  }
  if (kolo_nccl_copy_to_host(b->hrecv, dr, 6 * n) != KOLO_OK) return 1;
  if (kolo_nccl_copy_to_host(b->hrecv + 6 * n, ds + 6 * n, 8 * n) != KOLO_OK) return 1;
  for (size_t i = 0; i < n; i++) {
    double want = reference(KOLO_FLOAT32, KOLO_SUM, size, i);
    if (gpu_load(KOLO_FLOAT32, b->hrecv, i) != want ||
        gpu_load(KOLO_BFLOAT16, b->hrecv + 4 * n, i) != want ||
        gpu_load(KOLO_INT64, b->hrecv + 6 * n, i) != (double)i) {
      printf("# group: wrong element %zu\n", i);
      return 1;
    }
  }
  return 0;
}

/* Host memory handed to a collective is refused before anything is enqueued,
 * and the communicator stays usable. */
static int check_host_buffer_refused(kolo_nccl_comm *comm, bufs *b) {
  kolo_nccl_request *req = NULL;
  kolo_status st = kolo_nccl_allreduce_async(comm, b->hsend, b->hrecv, 16, KOLO_FLOAT32, KOLO_SUM, &req);
  if (st != KOLO_ERR_INVALID_ARG || req != NULL) {
    printf("# host buffer: got %s\n", kolo_strerror(st));
    return 1;
  }
  if (kolo_nccl_comm_state(comm) != KOLO_NCCL_STATE_READY) return 1;
  st = kolo_nccl_allreduce_async(comm, b->dsend, b->drecv, 16, KOLO_FLOAT32, KOLO_SUM, &req);
  return finish(comm, st, req, "allreduce after refusal");
}

static int rank_main(int rank, int size, const char *dir, void *arg) {
  const options *opt = arg;
  int failures = 0;
  uint8_t id[KOLO_NCCL_ID_BYTES];
  kolo_status st = gpu_share_id(dir, 0, rank, 0, id, 60000);
  if (st != KOLO_OK) return gpu_report(0, "rank %d got the unique id (%s)", rank, kolo_strerror(st));
  kolo_nccl_comm *comm = NULL;
  st = kolo_nccl_comm_create(id, rank, size, rank, 60000, &comm);
  failures += gpu_report(st == KOLO_OK, "rank %d/%d: communicator ready on device %d (%s)", rank,
                         size, rank, kolo_strerror(st));
  if (st != KOLO_OK) return 1;

  size_t counts[2] = {1, opt->quick ? 1003 : 65539};
  size_t max_elems = (counts[1] + (size_t)size * 3) * (size_t)size;
  bufs b = {.bytes = max_elems * 8 + 64};
  if (b.bytes < 16000) b.bytes = 16000; /* check_group packs 14 * 1000 bytes */
  b.hsend = malloc(b.bytes);
  b.hrecv = malloc(b.bytes);
  if (b.hsend == NULL || b.hrecv == NULL ||
      kolo_nccl_device_alloc(rank, b.bytes, &b.dsend) != KOLO_OK ||
      kolo_nccl_device_alloc(rank, b.bytes, &b.drecv) != KOLO_OK) {
    failures += gpu_report(0, "rank %d: buffers of %zu bytes", rank, b.bytes);
    goto out;
  }
  failures += gpu_report(kolo_nccl_is_device_pointer(b.dsend) && !kolo_nccl_is_device_pointer(b.hsend),
                         "rank %d: device and host buffers are told apart", rank);
  for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
    int bad[5] = {0};
    for (size_t c = 0; c < 2; c++) {
      bad[0] += check_allreduce(comm, &b, dtypes[d], counts[c]);
      bad[1] += check_reducescatter(comm, &b, dtypes[d], counts[c]);
      bad[2] += check_broadcast(comm, &b, dtypes[d], counts[c]);
      bad[3] += check_allgather(comm, &b, dtypes[d], counts[c], 0);
      bad[4] += check_allgather(comm, &b, dtypes[d], counts[c], 1);
    }
    const char *what[5] = {"allreduce (sum avg min max prod, in place)",
                           "reducescatter (sum avg min max prod)", "broadcast (roots 0, last)",
                           "allgather", "allgatherv (counts differ, exchanged)"};
    for (int k = 0; k < 5; k++)
      failures += gpu_report(bad[k] == 0, "rank %d/%d: %s %s, counts %zu and %zu", rank, size,
                             what[k], dtype_names[d], counts[0], counts[1]);
  }
  failures += gpu_report(check_group(comm, &b) == 0,
                         "rank %d/%d: grouped float32+bfloat16 allreduce and int64 broadcast, "
                         "completed by test()", rank, size);
  failures += gpu_report(check_host_buffer_refused(comm, &b) == 0,
                         "rank %d/%d: host buffer refused with INVALID_ARG, comm stays ready", rank,
                         size);
out:
  kolo_nccl_device_free(b.dsend);
  kolo_nccl_device_free(b.drecv);
  free(b.hsend);
  free(b.hrecv);
  kolo_nccl_comm_destroy(comm);
  return failures > 100 ? 100 : failures;
}

int main(int argc, char **argv) {
  options opt = {0};
  int want = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) opt.quick = 1;
    else if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) want = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--quick] [--ranks N]\n", argv[0]);
      return 2;
    }
  }
  int gpus = gpu_count_in_child();
  if (gpus == 0) {
    printf("# no usable GPU: skipped\n");
    return GPU_EXIT_SKIP;
  }
  int ranks = want > 0 && want < gpus ? want : gpus;
  printf("# collectives: %d rank(s), one per GPU (%d GPU(s) present)%s\n", ranks, gpus,
         ranks == 1 ? "; 1-rank variant only" : "");
  int failed = gpu_run_ranks(ranks, rank_main, &opt, 600, -1);
  return failed ? 1 : 0;
}
