/* GPU failure test: a communicator whose peer never comes times out at creation;
 * one rank is SIGKILLed mid-training and the others see PEER_LOST (or, where
 * NCCL cannot notice, TIMEOUT) instead of hanging, abort, and form a new
 * communicator for the next epoch in the same process. With one GPU: the
 * 1-rank variants (creation timeout, abort, re-create). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_harness.h"

#define OP_TIMEOUT_MS 10000
#define ELEMS (1u << 20)

typedef struct options {
  int ranks;
} options;

/* One float32 sum allreduce of ELEMS ones; checks the result is `size`. */
static kolo_status allreduce_ones(kolo_nccl_comm *comm, float *dev, float *host) {
  for (size_t i = 0; i < ELEMS; i++) host[i] = 1.0f;
  kolo_status st = kolo_nccl_copy_to_device(dev, host, ELEMS * sizeof(float));
  if (st != KOLO_OK) return st;
  kolo_nccl_request *req = NULL;
  st = kolo_nccl_allreduce_async(comm, dev, dev, ELEMS, KOLO_FLOAT32, KOLO_SUM, &req);
  if (st == KOLO_OK) st = kolo_nccl_wait(req);
  if (st != KOLO_OK) return st;
  st = kolo_nccl_copy_to_host(host, dev, ELEMS * sizeof(float));
  if (st != KOLO_OK) return st;
  float want = (float)kolo_nccl_comm_size(comm);
  for (size_t i = 0; i < ELEMS; i += 4099)
    if (host[i] != want) return KOLO_ERR_CORRUPT;
  return KOLO_OK;
}

/* A communicator of 2 whose second rank never arrives: creation must give up
 * with KOLO_ERR_TIMEOUT at about the deadline, not hang. Runs as rank 0 alone. */
static int init_without_peer(int rank, int size, const char *dir, void *arg) {
  (void)size; (void)arg;
  uint8_t id[KOLO_NCCL_ID_BYTES];
  kolo_status st = gpu_share_id(dir, 9, rank, 0, id, 10000);
  if (st != KOLO_OK) return gpu_report(0, "id for the lonely communicator (%s)", kolo_strerror(st));
  kolo_nccl_comm *comm = NULL;
  uint64_t t0 = gpu_now_ns();
  st = kolo_nccl_comm_create(id, 0, 2, 0, 3000, &comm);
  double s = (double)(gpu_now_ns() - t0) / 1e9;
  int bad = gpu_report(st == KOLO_ERR_TIMEOUT && comm == NULL && s < 15,
                       "creation with a missing peer ends with TIMEOUT after %.1f s (got %s)", s,
                       kolo_strerror(st));
  kolo_nccl_comm_destroy(comm);
  return bad;
}

/* One rank: create, use, abort, check the aborted state, re-create, use. */
static int single_rank(int rank, int size, const char *dir, void *arg) {
  (void)size; (void)arg;
  int bad = 0;
  float *dev = NULL;
  float *host = malloc(ELEMS * sizeof(float));
  if (host == NULL || kolo_nccl_device_alloc(0, ELEMS * sizeof(float), (void **)&dev) != KOLO_OK)
    return gpu_report(0, "buffers");
  for (int epoch = 1; epoch <= 2; epoch++) {
    uint8_t id[KOLO_NCCL_ID_BYTES];
    kolo_nccl_comm *comm = NULL;
    kolo_status st = gpu_share_id(dir, epoch, rank, 0, id, 10000);
    if (st == KOLO_OK) st = kolo_nccl_comm_create(id, 0, 1, 0, OP_TIMEOUT_MS, &comm);
    bad += gpu_report(st == KOLO_OK, "epoch %d: 1-rank communicator created (%s)", epoch,
                      kolo_strerror(st));
    if (st != KOLO_OK) break;
    st = allreduce_ones(comm, dev, host);
    bad += gpu_report(st == KOLO_OK, "epoch %d: allreduce before abort (%s)", epoch, kolo_strerror(st));
    kolo_nccl_comm_abort(comm);
    kolo_nccl_comm_abort(comm); /* idempotent */
    kolo_status waited = kolo_nccl_comm_wait_aborted(comm, 5000);
    bad += gpu_report(waited == KOLO_OK, "epoch %d: abort finished within 5 s (%s)", epoch,
                      kolo_strerror(waited));
    kolo_nccl_request *req = NULL;
    st = kolo_nccl_allreduce_async(comm, dev, dev, 16, KOLO_FLOAT32, KOLO_SUM, &req);
    bad += gpu_report(kolo_nccl_comm_state(comm) == KOLO_NCCL_STATE_ABORTED &&
                          st == KOLO_ERR_ABORTED && req == NULL,
                      "epoch %d: after abort the state is aborted and submit says ABORTED (%s)",
                      epoch, kolo_strerror(st));
    kolo_nccl_comm_destroy(comm);
  }
  kolo_nccl_device_free(dev);
  free(host);
  return bad;
}

/* Many ranks: the last one dies by SIGKILL after a few steps; the others must
 * see an error within the deadline, abort, and re-form without it. */
static int kill_one(int rank, int size, const char *dir, void *arg) {
  (void)arg;
  int bad = 0, victim = size - 1;
  float *dev = NULL;
  float *host = malloc(ELEMS * sizeof(float));
  if (host == NULL || kolo_nccl_device_alloc(rank, ELEMS * sizeof(float), (void **)&dev) != KOLO_OK)
    return gpu_report(0, "rank %d: buffers", rank);
  uint8_t id[KOLO_NCCL_ID_BYTES];
  kolo_nccl_comm *comm = NULL;
  kolo_status st = gpu_share_id(dir, 1, rank, 0, id, 60000);
  if (st == KOLO_OK) st = kolo_nccl_comm_create(id, rank, size, rank, OP_TIMEOUT_MS, &comm);
  bad += gpu_report(st == KOLO_OK, "rank %d/%d: epoch 1 communicator (%s)", rank, size,
                    kolo_strerror(st));
  if (st != KOLO_OK) return bad;
  for (int step = 0; step < 3 && st == KOLO_OK; step++) st = allreduce_ones(comm, dev, host);
  bad += gpu_report(st == KOLO_OK, "rank %d/%d: 3 healthy steps (%s)", rank, size, kolo_strerror(st));
  if (rank == victim) {
    fflush(stdout);
    raise(SIGKILL); /* dies without any goodbye, like a crashed worker */
  }
  uint64_t t0 = gpu_now_ns();
  st = KOLO_OK;
  for (int step = 0; step < 1000 && st == KOLO_OK; step++) st = allreduce_ones(comm, dev, host);
  double s = (double)(gpu_now_ns() - t0) / 1e9;
  char message[512];
  kolo_nccl_comm_error(comm, message, sizeof message);
  bad += gpu_report(st == KOLO_ERR_PEER_LOST || st == KOLO_ERR_TIMEOUT,
                    "rank %d/%d: dead peer reported as %s after %.1f s, no hang (%s)", rank, size,
                    kolo_status_name(st), s, message);
  printf("# rank %d: %s\n", rank,
         st == KOLO_ERR_PEER_LOST ? "NCCL itself reported the lost peer"
                                  : "NCCL did not notice; kolo's no-progress deadline fired");
  kolo_nccl_comm_abort(comm);
  (void)kolo_nccl_comm_wait_aborted(comm, 10000);
  bad += gpu_report(kolo_nccl_comm_state(comm) == KOLO_NCCL_STATE_ABORTED,
                    "rank %d/%d: communicator aborted", rank, size);
  kolo_nccl_comm_destroy(comm);

  /* Epoch 2: the survivors, same ranks 0..size-2, a new id from rank 0. */
  comm = NULL;
  st = gpu_share_id(dir, 2, rank, 0, id, 60000);
  if (st == KOLO_OK) st = kolo_nccl_comm_create(id, rank, size - 1, rank, OP_TIMEOUT_MS, &comm);
  if (st == KOLO_OK) st = allreduce_ones(comm, dev, host);
  bad += gpu_report(st == KOLO_OK, "rank %d/%d: epoch 2 re-formed with %d ranks, allreduce correct (%s)",
                    rank, size, size - 1, kolo_strerror(st));
  kolo_nccl_comm_destroy(comm);
  kolo_nccl_device_free(dev);
  free(host);
  return bad > 100 ? 100 : bad;
}

int main(int argc, char **argv) {
  options opt = {0};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) continue;
    if (strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) opt.ranks = atoi(argv[++i]);
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
  int ranks = opt.ranks > 0 && opt.ranks < gpus ? opt.ranks : gpus;
  int failed = 0;
  printf("# abort: creation with a missing peer\n");
  failed += gpu_run_ranks(1, init_without_peer, &opt, 60, -1);
  printf("# abort: 1-rank abort and re-create%s\n", ranks == 1 ? " (only 1 GPU)" : "");
  failed += gpu_run_ranks(1, single_rank, &opt, 120, -1);
  if (ranks >= 2) {
    printf("# abort: %d ranks, rank %d killed, survivors re-form\n", ranks, ranks - 1);
    failed += gpu_run_ranks(ranks, kill_one, &opt, 180, ranks - 1);
  } else {
    printf("# abort: kill-one-rank test needs 2 GPUs: not run\n");
  }
  return failed ? 1 : 0;
}
