/* GPU all-reduce benchmark: float32 sum on device buffers, one rank per GPU,
 * printed in nccl-tests' columns (size count type redop time algbw busbw), with
 * busbw = algbw * 2(n-1)/n. Rank 0 prints; timings are the slowest rank's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

typedef struct options {
  size_t min_bytes, max_bytes;
  int iters, warmup;
} options;

/* Runs iters allreduces back to back: all enqueued, then the last one polled
 * with kolo_nccl_test in a tight loop (a benchmark may spin; stream order means
 * the others are done too), then every request freed. */
static kolo_status run_iters(kolo_nccl_comm *comm, void *send, void *recv, size_t count, int iters) {
  kolo_nccl_request **reqs = calloc((size_t)iters, sizeof *reqs);
  if (reqs == NULL) return KOLO_ERR_NO_MEMORY;
  kolo_status st = KOLO_OK;
  int issued = 0;
  while (issued < iters && st == KOLO_OK) {
    st = kolo_nccl_allreduce_async(comm, send, recv, count, KOLO_FLOAT32, KOLO_SUM, &reqs[issued]);
    if (st == KOLO_OK) issued++;
  }
  if (issued > 0) {
    int done = 0;
    kolo_status last = KOLO_OK;
    while (!done && kolo_nccl_test(reqs[issued - 1], &done, &last) == KOLO_OK) {
    }
    if (st == KOLO_OK) st = last;
    for (int i = 0; i < issued - 1; i++) {
      kolo_status w = kolo_nccl_wait(reqs[i]);
      if (st == KOLO_OK) st = w;
    }
  }
  free(reqs);
  return st;
}

static int rank_main(int rank, int size, const char *dir, void *arg) {
  const options *opt = arg;
  uint8_t id[KOLO_NCCL_ID_BYTES];
  kolo_nccl_comm *comm = NULL;
  kolo_status st = gpu_share_id(dir, 0, rank, 0, id, 60000);
  if (st == KOLO_OK) st = kolo_nccl_comm_create(id, rank, size, rank, 60000, &comm);
  if (st != KOLO_OK) return gpu_report(0, "bench rank %d: communicator (%s)", rank, kolo_strerror(st));
  void *send = NULL, *recv = NULL, *tdev = NULL;
  int bad = 0;
  if (kolo_nccl_device_alloc(rank, opt->max_bytes, &send) != KOLO_OK ||
      kolo_nccl_device_alloc(rank, opt->max_bytes, &recv) != KOLO_OK ||
      kolo_nccl_device_alloc(rank, sizeof(double), &tdev) != KOLO_OK) {
    bad = gpu_report(0, "bench rank %d: %zu-byte buffers", rank, opt->max_bytes);
    goto out;
  }
  if (rank == 0) {
    printf("# kolo_nccl allreduce, %d rank(s), %d warmup + %d iterations per size\n", size,
           opt->warmup, opt->iters);
    printf("#%12s %12s %8s %6s %10s %8s %8s\n", "size", "count", "type", "redop", "time",
           "algbw", "busbw");
    printf("#%12s %12s %8s %6s %10s %8s %8s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
           "(GB/s)");
  }
  for (size_t bytes = opt->min_bytes; bytes <= opt->max_bytes && st == KOLO_OK; bytes *= 4) {
    size_t count = bytes / 4;
    if (count == 0) count = 1;
    st = run_iters(comm, send, recv, count, opt->warmup);
    uint64_t t0 = gpu_now_ns();
    if (st == KOLO_OK) st = run_iters(comm, send, recv, count, opt->iters);
    double us = (double)(gpu_now_ns() - t0) / 1e3 / opt->iters;
    /* Take the slowest rank's time: a max-allreduce of it (a float64 on the GPU). */
    if (st == KOLO_OK) st = kolo_nccl_copy_to_device(tdev, &us, sizeof us);
    kolo_nccl_request *req = NULL;
    if (st == KOLO_OK) st = kolo_nccl_allreduce_async(comm, tdev, tdev, 1, KOLO_FLOAT64, KOLO_MAX, &req);
    if (st == KOLO_OK) st = kolo_nccl_wait(req);
    if (st == KOLO_OK) st = kolo_nccl_copy_to_host(&us, tdev, sizeof us);
    if (st != KOLO_OK) break;
    double algbw = (double)(count * 4) / (us * 1e3); /* bytes/ns = GB/s */
    double busbw = algbw * 2.0 * (size - 1) / size;
    if (rank == 0)
      printf(" %12zu %12zu %8s %6s %10.2f %8.2f %8.2f\n", count * 4, count, "float", "sum", us,
             algbw, busbw);
  }
  if (st != KOLO_OK) bad = gpu_report(0, "bench rank %d: %s", rank, kolo_strerror(st));
  else if (rank == 0) bad = gpu_report(1, "bench: %d rank(s) ran every size", size);
out:
  kolo_nccl_device_free(send);
  kolo_nccl_device_free(recv);
  kolo_nccl_device_free(tdev);
  kolo_nccl_comm_destroy(comm);
  return bad;
}

int main(int argc, char **argv) {
  options opt = {.min_bytes = 8, .max_bytes = 256u << 20, .iters = 20, .warmup = 5};
  int want = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) want = atoi(argv[++i]);
    else if (strcmp(argv[i], "--max-bytes") == 0 && i + 1 < argc)
      opt.max_bytes = (size_t)strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) opt.iters = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--ranks N] [--max-bytes B] [--iters N]\n", argv[0]);
      return 2;
    }
  }
  if (opt.iters < 1 || opt.max_bytes < opt.min_bytes) return 2;
  int gpus = gpu_count_in_child();
  if (gpus == 0) {
    printf("# no usable GPU: skipped\n");
    return GPU_EXIT_SKIP;
  }
  int ranks = want > 0 && want < gpus ? want : gpus;
  if (ranks == 1) printf("# 1 GPU: 1-rank all-reduce (a device copy; busbw is 0 by definition)\n");
  return gpu_run_ranks(ranks, rank_main, &opt, 600, -1) ? 1 : 0;
}
