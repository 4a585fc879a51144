/* GPU all-reduce benchmark: libkolo's path (kolo_allreduce_on_stream in CUDA
 * mode: pointer checks, stream ordering, NCCL, completion events) beside raw
 * NCCL (ncclAllReduce on a stream, cudaStreamSynchronize) on the same GPUs and
 * transport, interleaved round by round, median of the rounds per size. float32
 * sum, nccl-tests columns: time, algbw, busbw = algbw * 2(n-1)/n (0 for one
 * rank), and kolo's busbw over raw NCCL's (the target is 0.95 or better; with
 * one rank, where busbw is 0, the time ratio). Rank 0 prints; each time is the
 * slowest rank's. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

#define MAX_ROUNDS 15

typedef struct options {
  int ranks, iters, warmup, rounds;
  size_t min_bytes, max_bytes;
} options;

typedef struct bench {
  const options *opt;
  kolo_comm *comm;
  ncclComm_t nccl;
  cudaStream_t stream;
  float *send, *recv;
  double *slowest; /* device: one double for the max-reduction of times */
} bench;

static double seconds_since(uint64_t t0) {
  return (double)(gpu_now_ns() - t0) / 1e9;
}

/* iters stream-ordered all-reduces through libkolo, then wait for them all. */
static kolo_status time_kolo(bench *b, size_t count, int iters, double *us) {
  kolo_request *reqs[64];
  kolo_status st = KOLO_OK;
  uint64_t t0 = gpu_now_ns();
  for (int done = 0; done < iters && st == KOLO_OK;) {
    int batch = iters - done < 64 ? iters - done : 64, issued = 0;
    for (; issued < batch && st == KOLO_OK; issued++)
      st = kolo_allreduce_on_stream(b->comm, b->send, b->recv, count, KOLO_FLOAT32, KOLO_SUM,
                                    b->stream, &reqs[issued]);
    if (st != KOLO_OK) issued--;
    for (int i = 0; i < issued; i++) {
      kolo_status w = kolo_wait(reqs[i]);
      if (st == KOLO_OK) st = w;
    }
    done += batch;
  }
  *us = seconds_since(t0) * 1e6 / iters;
  return st;
}

static kolo_status time_nccl(bench *b, size_t count, int iters, double *us) {
  uint64_t t0 = gpu_now_ns();
  for (int i = 0; i < iters; i++)
    if (ncclAllReduce(b->send, b->recv, count, ncclFloat32, ncclSum, b->nccl, b->stream) !=
        ncclSuccess)
      return KOLO_ERR_NCCL;
  if (cudaStreamSynchronize(b->stream) != cudaSuccess) return KOLO_ERR_DEVICE;
  *us = seconds_since(t0) * 1e6 / iters;
  return KOLO_OK;
}

/* The slowest rank's value (a max all-reduce of one double, through kolo). */
static kolo_status slowest(bench *b, double *value) {
  kolo_status st = kolo_nccl_copy_to_device(b->slowest, value, sizeof *value);
  if (st == KOLO_OK)
    st = kolo_allreduce(b->comm, b->slowest, b->slowest, 1, KOLO_FLOAT64, KOLO_MAX);
  if (st == KOLO_OK) st = kolo_nccl_copy_to_host(value, b->slowest, sizeof *value);
  return st;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, by_value);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One size: rounds of (kolo, raw NCCL), interleaved; medians. */
static kolo_status measure(bench *b, size_t count, double *kolo_us, double *nccl_us) {
  const options *o = b->opt;
  double k[MAX_ROUNDS], n[MAX_ROUNDS], scratch;
  kolo_status st = time_kolo(b, count, o->warmup, &scratch);
  if (st == KOLO_OK) st = time_nccl(b, count, o->warmup, &scratch);
  for (int r = 0; r < o->rounds && st == KOLO_OK; r++) {
    st = time_kolo(b, count, o->iters, &k[r]);
    if (st == KOLO_OK) st = time_nccl(b, count, o->iters, &n[r]);
    if (st == KOLO_OK) st = slowest(b, &k[r]);
    if (st == KOLO_OK) st = slowest(b, &n[r]);
  }
  if (st != KOLO_OK) return st;
  *kolo_us = median(k, o->rounds);
  *nccl_us = median(n, o->rounds);
  return KOLO_OK;
}

static void print_header(const bench *b, int size) {
  char versions[128];
  kolo_nccl_versions(versions, sizeof versions);
  printf(
      "# GPU all-reduce, float32 sum: kolo (libkolo CUDA mode) vs raw NCCL, %d rank(s), "
      "%s\n",
      size, versions);
  printf("# %d warm-up + %d iterations per round, %d interleaved rounds, medians\n", b->opt->warmup,
         b->opt->iters, b->opt->rounds);
  if (gpu_on_fake())
    printf("# CPU stand-in (tests/support/fakegpu): these figures say nothing about GPUs\n");
  printf("#%11s %11s %10s %8s %8s %10s %8s %8s %6s\n", "size(B)", "count", "kolo(us)", "algbw",
         "busbw", "nccl(us)", "algbw", "busbw", "ratio");
}

static int rank_main(const gpu_rank *me) {
  const options *o = me->arg;
  bench b = {.opt = o};
  uint8_t id[KOLO_NCCL_ID_BYTES];
  ncclUniqueId uid;
  kolo_status st = gpu_ring_join(me, 1, me->rank, me->size, 60000, &b.comm);
  if (st == KOLO_OK) st = gpu_share_id(me->dir, 7, me->rank, 0, id, 60000);
  memcpy(uid.internal, id, sizeof uid.internal);
  if (st == KOLO_OK &&
      (cudaSetDevice(me->device) != cudaSuccess ||
       cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking) != cudaSuccess ||
       cudaMalloc((void **)&b.send, o->max_bytes) != cudaSuccess ||
       cudaMalloc((void **)&b.recv, o->max_bytes) != cudaSuccess ||
       cudaMalloc((void **)&b.slowest, sizeof(double)) != cudaSuccess))
    st = KOLO_ERR_DEVICE;
  if (st == KOLO_OK && ncclCommInitRank(&b.nccl, me->size, uid, me->rank) != ncclSuccess)
    st = KOLO_ERR_NCCL;
  if (st != KOLO_OK) return gpu_report(0, "bench rank %d: setup (%s)", me->rank, kolo_strerror(st));
  if (me->rank == 0) print_header(&b, me->size);
  double worst = 1e9;
  for (size_t bytes = o->min_bytes; bytes <= o->max_bytes && st == KOLO_OK; bytes *= 4) {
    size_t count = bytes / 4 ? bytes / 4 : 1;
    double k = 0, n = 0;
    st = measure(&b, count, &k, &n);
    if (st != KOLO_OK || me->rank != 0) continue;
    double factor = me->size > 1 ? 2.0 * (me->size - 1) / me->size : 0;
    double kalg = (double)(count * 4) / (k * 1e3), nalg = (double)(count * 4) / (n * 1e3);
    double ratio = factor > 0 ? (kalg * factor) / (nalg * factor) : n / k;
    if (ratio < worst) worst = ratio;
    printf(" %11zu %11zu %10.2f %8.2f %8.2f %10.2f %8.2f %8.2f %6.3f\n", count * 4, count, k, kalg,
           kalg * factor, n, nalg, nalg * factor, ratio);
  }
  int bad = 0;
  if (st != KOLO_OK)
    bad = gpu_report(0, "bench rank %d: %s", me->rank, kolo_strerror(st));
  else if (me->rank == 0)
    bad = gpu_report(1,
                     "bench: every size ran, kolo/raw NCCL busbw at worst %.3f (target >= "
                     "0.95: %s)",
                     worst,
                     gpu_on_fake()   ? "not measured on the stand-in"
                     : worst >= 0.95 ? "met"
                                     : "NOT met");
  (void)ncclCommDestroy(b.nccl);
  kolo_comm_destroy(b.comm);
  (void)cudaFree(b.send);
  (void)cudaFree(b.recv);
  (void)cudaFree(b.slowest);
  (void)cudaStreamDestroy(b.stream);
  return bad;
}

int main(int argc, char **argv) {
  options o = {.iters = 20, .warmup = 5, .rounds = 5, .min_bytes = 8, .max_bytes = 256u << 20};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc)
      o.ranks = atoi(argv[++i]);
    else if (strcmp(argv[i], "--max-bytes") == 0 && i + 1 < argc)
      o.max_bytes = (size_t)strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc)
      o.iters = atoi(argv[++i]);
    else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
      o.rounds = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--ranks N] [--max-bytes B] [--iters N] [--rounds N]\n", argv[0]);
      return 2;
    }
  }
  if (o.iters < 1 || o.rounds < 1 || o.rounds > MAX_ROUNDS || o.max_bytes < o.min_bytes ||
      o.ranks < 0 || o.ranks > GPU_MAX_RANKS)
    return 2;
  int gpus = gpu_count_in_child();
  if (gpus == 0) {
    printf("# no usable GPU: skipped\n");
    return GPU_EXIT_SKIP;
  }
  int ranks = o.ranks > 0 ? o.ranks : gpus;
  if (ranks > gpus)
    printf("# %d ranks share %d GPU(s): NCCL's socket transport on loopback\n", ranks, gpus);
  return gpu_run_ranks(ranks, gpus, rank_main, &o, 900, -1) ? 1 : 0;
}
