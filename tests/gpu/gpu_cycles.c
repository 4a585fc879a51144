/* Resource hygiene of libkolo's GPU path: 30 create / use / destroy cycles of
 * a ring in CUDA mode leave file descriptors, threads and GPU memory flat; an
 * error the caller's own CUDA code left pending survives kolo's calls; and a
 * thread that never chose a device does not make a context on GPU 0 when it
 * calls kolo (checked on the CPU stand-in, which counts contexts, with the
 * ring on device 1). */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

#define CYCLES 30
#define ELEMS 65536

typedef struct usage {
  int fds, threads;
  size_t free_bytes;
} usage;

static usage measure(int device) {
  usage u = {gpu_open_fds(), gpu_threads(), 0};
  size_t total = 0;
  (void)cudaSetDevice(device);
  if (cudaMemGetInfo(&u.free_bytes, &total) != cudaSuccess) u.free_bytes = 0;
  return u;
}

/* Threads of the previous cycle (NCCL's, the runtime's) may take a moment to end. */
static usage settle(int device, const usage *goal) {
  usage u = measure(device);
  for (int i = 0; i < 50 && (u.threads > goal->threads || u.fds > goal->fds); i++) {
    gpu_sleep_ms(20);
    u = measure(device);
  }
  return u;
}

static kolo_status one_cycle(const gpu_rank *me, uint64_t epoch, float *dev, float *host) {
  kolo_comm *comm = NULL;
  kolo_status st = gpu_ring_join(me, epoch, me->rank, me->size, 30000, &comm);
  for (size_t i = 0; i < ELEMS; i++) host[i] = (float)(me->rank + 1);
  if (st == KOLO_OK) st = kolo_nccl_copy_to_device(dev, host, ELEMS * 4);
  if (st == KOLO_OK) st = kolo_allreduce(comm, dev, dev, ELEMS, KOLO_FLOAT32, KOLO_SUM);
  if (st == KOLO_OK) st = kolo_nccl_copy_to_host(host, dev, ELEMS * 4);
  float want = (float)(me->size * (me->size + 1) / 2);
  if (st == KOLO_OK && (host[0] != want || host[ELEMS - 1] != want)) st = KOLO_ERR_CORRUPT;
  kolo_comm_destroy(comm);
  return st;
}

static int cycles(const gpu_rank *me) {
  float *dev = NULL, *host = malloc(ELEMS * 4);
  if (host == NULL || kolo_nccl_device_alloc(me->device, ELEMS * 4, (void **)&dev) != KOLO_OK)
    return gpu_report(0, "rank %d: buffers", me->rank);
  kolo_status st = KOLO_OK;
  usage first = {0}, last = {0};
  int cycle = 1;
  for (; cycle <= CYCLES && st == KOLO_OK; cycle++) {
    st = one_cycle(me, (uint64_t)cycle, dev, host);
    if (cycle == 3) first = measure(me->device); /* after warm-up: the runtime's own threads */
  }
  if (st == KOLO_OK) last = settle(me->device, &first);
  long drift = (long)first.free_bytes - (long)last.free_bytes;
  int bad = gpu_report(st == KOLO_OK, "rank %d: %d create/use/destroy cycles in CUDA mode (%s)",
                       me->rank, cycle - 1, kolo_strerror(st));
  bad += gpu_report(
      st == KOLO_OK && last.fds <= first.fds && last.threads <= first.threads && drift <= (1 << 20),
      "rank %d: flat after cycle 3 -> %d: fds %d -> %d, threads %d -> %d, GPU "
      "memory in use %+ld bytes",
      me->rank, CYCLES, first.fds, last.fds, first.threads, last.threads, drift);
  kolo_nccl_device_free(dev);
  free(host);
  return bad;
}

/* The caller's pending CUDA error (a refused copy) is still there after a
 * whole GPU collective through kolo. */
static int pending_error_survives(const gpu_rank *me) {
  float *dev = NULL, host[16] = {0};
  if (kolo_nccl_device_alloc(me->device, sizeof host, (void **)&dev) != KOLO_OK)
    return gpu_report(0, "rank %d: buffer", me->rank);
  kolo_comm *comm = NULL;
  kolo_status st = gpu_ring_join(me, 100, me->rank, me->size, 30000, &comm);
  if (st == KOLO_OK) st = kolo_allreduce(comm, dev, dev, 16, KOLO_FLOAT32, KOLO_SUM); /* NCCL up */
  cudaError_t mine = cudaMemcpy(NULL, host, sizeof host, cudaMemcpyHostToDevice);
  if (st == KOLO_OK) st = kolo_allreduce(comm, dev, dev, 16, KOLO_FLOAT32, KOLO_SUM);
  cudaError_t still = cudaPeekAtLastError();
  (void)cudaGetLastError();
  kolo_comm_destroy(comm);
  kolo_nccl_device_free(dev);
  return gpu_report(st == KOLO_OK && mine != cudaSuccess && still == mine,
                    "rank %d: the caller's pending CUDA error (%s) survives a kolo GPU "
                    "collective (slot after: %s)",
                    me->rank, cudaGetErrorName(mine), cudaGetErrorName(still));
}

typedef struct fresh_thread {
  kolo_comm *comm;
  float *dev;
  kolo_status st;
} fresh_thread;

static void *call_from_a_fresh_thread(void *argument) {
  fresh_thread *t = argument;
  t->st = kolo_allreduce(t->comm, t->dev, t->dev, 16, KOLO_FLOAT32, KOLO_SUM);
  return NULL;
}

/* One rank on device 1; a fresh thread (no current device) makes the first
 * GPU call, which also creates the NCCL communicator. */
static int no_context_on_gpu0(const gpu_rank *me) {
  int (*made)(int) = NULL;
  *(void **)&made = dlsym(RTLD_DEFAULT, "fakegpu_context_made");
  gpu_rank on1 = *me;
  on1.device = 1;
  float *dev = NULL;
  kolo_comm *comm = NULL;
  kolo_status st = kolo_nccl_device_alloc(1, 64, (void **)&dev);
  if (st == KOLO_OK) st = gpu_ring_join(&on1, 200, 0, 1, 30000, &comm);
  fresh_thread t = {.comm = comm, .dev = dev, .st = KOLO_ERR_INTERNAL};
  pthread_t thread;
  if (st == KOLO_OK && pthread_create(&thread, NULL, call_from_a_fresh_thread, &t) == 0)
    pthread_join(thread, NULL);
  int on0 = made != NULL ? made(0) : -1;
  kolo_comm_destroy(comm);
  kolo_nccl_device_free(dev);
  return gpu_report(st == KOLO_OK && t.st == KOLO_OK && on0 == 0,
                    "a thread with no current device calling kolo (ring on device 1) makes no "
                    "context on GPU 0 (%s, contexts on 0: %d)",
                    kolo_strerror(t.st), on0);
}

int main(int argc, char **argv) {
  int ranks = 0, exit_code = 0;
  int gpus = gpu_start(argc, argv, 2, &ranks, &exit_code);
  if (gpus == 0) return exit_code;
  int failed = 0;
  printf("# cycles: %d ranks on %d GPU(s), %d cycles\n", ranks, gpus, CYCLES);
  failed += gpu_run_ranks(ranks, gpus, cycles, NULL, 600, -1);
  failed += gpu_run_ranks(ranks, gpus, pending_error_survives, NULL, 120, -1);
  if (gpu_on_fake() && gpus >= 2) {
    failed += gpu_run_ranks(1, gpus, no_context_on_gpu0, NULL, 60, -1);
  } else {
    printf("# context check: needs the CPU stand-in's context count and 2 devices; not run\n");
  }
  return failed ? 1 : 0;
}
