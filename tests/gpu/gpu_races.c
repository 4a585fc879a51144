/* Concurrency of libkolo's GPU path, for ThreadSanitizer (run under a TSan
 * build on the CPU stand-in it reports any data race) and as a plain check:
 * - one thread runs device all-gathers with counts that change every call while
 *   another runs host all-gathers on the same communicator (the engine thread
 *   serves those): each must see only its own counts and exact results (both
 *   used to share comm->block_bytes);
 * - a thread makes the first GPU call of a ring, which creates the NCCL
 *   communicator, while another aborts the ring: both end, nothing hangs (the
 *   NCCL handle used to be read and written without a lock). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

#define ROUNDS 60
#define BASE 257

typedef struct worker {
  kolo_comm *comm;
  const gpu_rank *me;
  int device_side;
  int bad;
  kolo_status st;
} worker;

/* Round k: rank r contributes BASE + 7k + 3r elements of value 1000r + i (host)
 * or -(1000r + i) (device); the gather must be exact. */
static size_t count_of(int round, int rank) {
  return BASE + 7u * (size_t)round + 3u * (size_t)rank;
}

static int check_gather(const worker *w, int round, const int64_t *out, const size_t *counts) {
  size_t offset = 0;
  for (int r = 0; r < w->me->size; r++) {
    if (counts[r] != count_of(round, r)) return 1;
    for (size_t i = 0; i < counts[r]; i++) {
      int64_t want = (int64_t)(1000 * r) + (int64_t)i;
      if (out[offset + i] != (w->device_side ? -want : want)) return 1;
    }
    offset += counts[r];
  }
  return 0;
}

static void *gather_rounds(void *argument) {
  worker *w = argument;
  size_t capacity = 0;
  for (int r = 0; r < w->me->size; r++) capacity += count_of(ROUNDS, r);
  int64_t *send = calloc(capacity, sizeof *send), *out = calloc(capacity, sizeof *out);
  int64_t *dsend = NULL, *dout = NULL;
  size_t counts[GPU_MAX_RANKS];
  w->st = send && out ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  if (w->device_side && w->st == KOLO_OK) {
    w->st = kolo_nccl_device_alloc(w->me->device, capacity * 8, (void **)&dsend);
    if (w->st == KOLO_OK)
      w->st = kolo_nccl_device_alloc(w->me->device, capacity * 8, (void **)&dout);
  }
  for (int round = 0; round < ROUNDS && w->st == KOLO_OK; round++) {
    size_t mine = count_of(round, w->me->rank);
    for (size_t i = 0; i < mine; i++) {
      int64_t v = (int64_t)(1000 * w->me->rank) + (int64_t)i;
      send[i] = w->device_side ? -v : v;
    }
    if (w->device_side) {
      w->st = kolo_nccl_copy_to_device(dsend, send, mine * 8);
      if (w->st == KOLO_OK)
        w->st = kolo_allgather(w->comm, dsend, mine, dout, capacity, counts, KOLO_INT64);
      if (w->st == KOLO_OK) w->st = kolo_nccl_copy_to_host(out, dout, capacity * 8);
    } else {
      kolo_request *req = NULL;
      w->st = kolo_allgather_async(w->comm, send, mine, out, capacity, counts, KOLO_INT64, &req);
      if (w->st == KOLO_OK) w->st = kolo_wait(req);
    }
    if (w->st == KOLO_OK) w->bad += check_gather(w, round, out, counts);
  }
  kolo_nccl_device_free(dsend);
  kolo_nccl_device_free(dout);
  free(send);
  free(out);
  return NULL;
}

static int concurrent_gathers(const gpu_rank *me, kolo_comm *comm) {
  worker host = {.comm = comm, .me = me}, device = {.comm = comm, .me = me, .device_side = 1};
  pthread_t threads[2];
  pthread_create(&threads[0], NULL, gather_rounds, &host);
  pthread_create(&threads[1], NULL, gather_rounds, &device);
  pthread_join(threads[0], NULL);
  pthread_join(threads[1], NULL);
  return gpu_report(host.st == KOLO_OK && device.st == KOLO_OK && host.bad + device.bad == 0,
                    "rank %d: %d host and %d device all-gathers at once on one ring, counts "
                    "changing every call, all exact (%s, %s, %d wrong)",
                    me->rank, ROUNDS, ROUNDS, kolo_strerror(host.st), kolo_strerror(device.st),
                    host.bad + device.bad);
}

typedef struct first_call {
  kolo_comm *comm;
  float *dev;
  kolo_status st;
} first_call;

static void *make_the_first_gpu_call(void *argument) {
  first_call *f = argument;
  f->st = kolo_allreduce(f->comm, f->dev, f->dev, 1024, KOLO_FLOAT32, KOLO_SUM);
  return NULL;
}

static int abort_during_creation(const gpu_rank *me, int round, float *dev) {
  kolo_comm *comm = NULL;
  kolo_status st = gpu_ring_join(me, 10 + (uint64_t)round, me->rank, me->size, 30000, &comm);
  /* rank 0's abort may already reach the others while they agree on CUDA mode */
  if (st == KOLO_ERR_ABORTED && me->rank != 0) return 0;
  if (st != KOLO_OK)
    return gpu_report(0, "rank %d: ring %d (%s)", me->rank, round, kolo_strerror(st));
  first_call f = {.comm = comm, .dev = dev, .st = KOLO_ERR_INTERNAL};
  pthread_t thread;
  pthread_create(&thread, NULL, make_the_first_gpu_call, &f);
  if (me->rank == 0) {
    gpu_sleep_ms(round * 3); /* before, during or after the NCCL communicator's creation */
    kolo_comm_abort(comm);
  }
  pthread_join(thread, NULL);
  kolo_comm_destroy(comm);
  return f.st == KOLO_OK || f.st == KOLO_ERR_ABORTED ? 0 : 1;
}

static int rank_main(const gpu_rank *me) {
  kolo_comm *comm = NULL;
  kolo_status st = gpu_ring_join(me, 1, me->rank, me->size, 30000, &comm);
  if (st != KOLO_OK) return gpu_report(0, "rank %d: ring (%s)", me->rank, kolo_strerror(st));
  int bad = concurrent_gathers(me, comm);
  kolo_comm_destroy(comm);
  float *dev = NULL;
  if (kolo_nccl_device_alloc(me->device, 4096, (void **)&dev) != KOLO_OK)
    return bad + gpu_report(0, "rank %d: buffer", me->rank);
  int wrong = 0;
  for (int round = 0; round < 8; round++) wrong += abort_during_creation(me, round, dev);
  kolo_nccl_device_free(dev);
  bad += gpu_report(wrong == 0,
                    "rank %d: 8 rings aborted while a thread creates their NCCL "
                    "communicator: every call ends, OK or ABORTED (%d otherwise)",
                    me->rank, wrong);
  return bad;
}

int main(int argc, char **argv) {
  int ranks = 0, exit_code = 0;
  int gpus = gpu_start(argc, argv, 2, &ranks, &exit_code);
  if (gpus == 0) return exit_code;
  printf("# races: %d ranks on %d GPU(s)\n", ranks, gpus);
  return gpu_run_ranks(ranks, gpus, rank_main, NULL, 300, -1) ? 1 : 0;
}
