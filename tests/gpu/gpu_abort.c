/* GPU failure handling through libkolo in CUDA mode:
 * - abort from a second thread while one rank withholds its call: the blocked
 *   GPU collective returns ABORTED in under 2 s, kolo_comm_abort itself returns
 *   at once (ncclCommAbort runs on a thread of its own), the withholding rank
 *   learns it too, and every rank then makes a new ring in the same process;
 * - SIGKILL of one rank mid-collective: the survivors' GPU collective fails in
 *   under a second with PEER_LOST naming it (the ring's control links abort
 *   NCCL), then they re-form as n-1 ranks and all-reduce correctly;
 * - an NCCL error on one rank fails the communicator on every rank (CPU
 *   stand-in only: real NCCL errors cannot be injected);
 * - kolo_nccl: creation with a missing peer ends with TIMEOUT at its deadline. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_harness.h"

#define ELEMS (1u << 20)

typedef struct device_buffers {
  float *dev;
  float *host;
} device_buffers;

static int buffers_make(const gpu_rank *me, device_buffers *b) {
  b->host = malloc(ELEMS * sizeof(float));
  return b->host != NULL &&
         kolo_nccl_device_alloc(me->device, ELEMS * sizeof(float), (void **)&b->dev) == KOLO_OK;
}

static void buffers_free(device_buffers *b) {
  kolo_nccl_device_free(b->dev);
  free(b->host);
}

/* One float32 sum all-reduce of (rank + 1) values; checks the result. */
static kolo_status allreduce_checked(kolo_comm *comm, device_buffers *b) {
  int rank = kolo_comm_rank(comm), size = kolo_comm_size(comm);
  for (size_t i = 0; i < ELEMS; i++) b->host[i] = (float)(rank + 1);
  kolo_status st = kolo_nccl_copy_to_device(b->dev, b->host, ELEMS * sizeof(float));
  if (st == KOLO_OK) st = kolo_allreduce(comm, b->dev, b->dev, ELEMS, KOLO_FLOAT32, KOLO_SUM);
  if (st == KOLO_OK) st = kolo_nccl_copy_to_host(b->host, b->dev, ELEMS * sizeof(float));
  if (st != KOLO_OK) return st;
  float want = (float)(size * (size + 1) / 2);
  for (size_t i = 0; i < ELEMS; i += 4099)
    if (b->host[i] != want) return KOLO_ERR_CORRUPT;
  return KOLO_OK;
}

/* Epoch `epoch` of all ranks 0..size-1, then one checked all-reduce. */
static int reform_and_check(const gpu_rank *me, uint64_t epoch, int size, device_buffers *b) {
  kolo_comm *comm = NULL;
  kolo_status st = gpu_ring_join(me, epoch, me->rank, size, 30000, &comm);
  if (st == KOLO_OK) st = allreduce_checked(comm, b);
  kolo_comm_destroy(comm);
  return gpu_report(st == KOLO_OK,
                    "rank %d: new ring (epoch %llu, %d ranks) in the same "
                    "process, all-reduce correct (%s)",
                    me->rank, (unsigned long long)epoch, size, kolo_strerror(st));
}

/* ---- abort from a second thread ---- */

typedef struct aborter {
  kolo_comm *comm;
  uint64_t at_ns;      /* when kolo_comm_abort was called */
  double call_seconds; /* how long the call itself took */
} aborter;

static void *abort_later(void *argument) {
  aborter *a = argument;
  gpu_sleep_ms(500);
  a->at_ns = gpu_now_ns();
  kolo_comm_abort(a->comm);
  a->call_seconds = (double)(gpu_now_ns() - a->at_ns) / 1e9;
  return NULL;
}

static int abort_from_a_thread(const gpu_rank *me) {
  /* on the CPU stand-in, make ncclCommAbort slow: kolo_comm_abort must still return at once */
  if (gpu_on_fake() && me->rank == 0) setenv("FAKEGPU_ABORT_DELAY_MS", "800", 1);
  device_buffers b;
  if (!buffers_make(me, &b)) return gpu_report(0, "rank %d: buffers", me->rank);
  kolo_comm *comm = NULL;
  kolo_status st = gpu_ring_join(me, 1, me->rank, me->size, 30000, &comm);
  if (st == KOLO_OK) st = allreduce_checked(comm, &b); /* NCCL is up before the abort */
  int bad = gpu_report(st == KOLO_OK, "rank %d: ring in CUDA mode, first all-reduce (%s)", me->rank,
                       kolo_strerror(st));
  if (st != KOLO_OK) {
    kolo_comm_destroy(comm);
    buffers_free(&b);
    return bad;
  }
  if (me->rank == 1) { /* withholds its call; learns of the abort meanwhile */
    gpu_sleep_ms(3000);
    int failed_rank = -1;
    st = kolo_comm_error(comm, &failed_rank);
    bad += gpu_report(st == KOLO_ERR_ABORTED && failed_rank == 0,
                      "rank 1 (withholding): sees rank 0's abort (%s, rank %d)", kolo_strerror(st),
                      failed_rank);
  } else {
    aborter a = {.comm = comm};
    pthread_t thread;
    int threaded = me->rank == 0 && pthread_create(&thread, NULL, abort_later, &a) == 0;
    st = kolo_allreduce(comm, b.dev, b.dev, ELEMS, KOLO_FLOAT32, KOLO_SUM);
    uint64_t returned = gpu_now_ns();
    if (threaded) pthread_join(thread, NULL);
    if (me->rank == 0) {
      double after = (double)(returned - a.at_ns) / 1e9;
      bad += gpu_report(st == KOLO_ERR_ABORTED && after < 2.0,
                        "rank 0: blocked GPU all-reduce returns ABORTED %.3f s after "
                        "kolo_comm_abort from another thread (%s)",
                        after, kolo_strerror(st));
      bad +=
          gpu_report(a.call_seconds < 0.1,
                     "rank 0: kolo_comm_abort returned in %.3f s (never blocks)", a.call_seconds);
    } else {
      bad += gpu_report(st == KOLO_ERR_ABORTED,
                        "rank %d: its GPU all-reduce fails with "
                        "rank 0's abort (%s)",
                        me->rank, kolo_strerror(st));
    }
  }
  kolo_comm_destroy(comm);
  bad += reform_and_check(me, 2, me->size, &b);
  buffers_free(&b);
  return bad;
}

/* ---- SIGKILL of a rank ---- */

static int kill_one(const gpu_rank *me) {
  int victim = me->size - 1;
  device_buffers b;
  if (!buffers_make(me, &b)) return gpu_report(0, "rank %d: buffers", me->rank);
  kolo_comm *comm = NULL;
  kolo_status st = gpu_ring_join(me, 1, me->rank, me->size, 30000, &comm);
  for (int step = 0; step < 3 && st == KOLO_OK; step++) st = allreduce_checked(comm, &b);
  int bad = gpu_report(st == KOLO_OK, "rank %d/%d: 3 healthy GPU all-reduces (%s)", me->rank,
                       me->size, kolo_strerror(st));
  /* every rank past its healthy steps; a survivor still in this barrier when the
   * victim dies learns it here, which counts the same */
  if (st == KOLO_OK) st = kolo_barrier(comm);
  char path[512];
  snprintf(path, sizeof path, "%s/killed_at", me->dir);
  if (me->rank == victim) {
    gpu_sleep_ms(300); /* the survivors are inside their next all-reduce */
    FILE *f = fopen(path, "w");
    if (f != NULL) {
      fprintf(f, "%llu\n", (unsigned long long)gpu_now_ns());
      fclose(f);
    }
    raise(SIGKILL); /* dies without a goodbye, like a crashed worker */
  }
  for (int step = 0; step < 1000 && st == KOLO_OK; step++)
    st = kolo_allreduce(comm, b.dev, b.dev, ELEMS, KOLO_FLOAT32, KOLO_SUM);
  uint64_t failed_ns = gpu_now_ns();
  unsigned long long killed_ns = 0;
  FILE *f = fopen(path, "r");
  if (f == NULL || fscanf(f, "%llu", &killed_ns) != 1) killed_ns = failed_ns;
  if (f != NULL) fclose(f);
  double s = (double)(failed_ns - killed_ns) / 1e9;
  int failed_rank = -1;
  kolo_status recorded = kolo_comm_error(comm, &failed_rank);
  bad += gpu_report(st == KOLO_ERR_PEER_LOST && recorded == KOLO_ERR_PEER_LOST &&
                        failed_rank == victim && s < 1.0,
                    "rank %d: the GPU all-reduce fails %.3f s after rank %d was killed, "
                    "PEER_LOST naming it (%s, rank %d)",
                    me->rank, s, victim, kolo_strerror(st), failed_rank);
  kolo_comm_destroy(comm);
  bad += reform_and_check(me, 2, me->size - 1, &b);
  buffers_free(&b);
  return bad;
}

/* ---- an NCCL error on one rank (CPU stand-in: FAKEGPU_NCCL_FAIL_AT) ---- */

static int nccl_error_fails_every_rank(const gpu_rank *me) {
  if (me->rank == 1) setenv("FAKEGPU_NCCL_FAIL_AT", "3", 1); /* its third collective fails */
  device_buffers b;
  if (!buffers_make(me, &b)) return gpu_report(0, "rank %d: buffers", me->rank);
  kolo_comm *comm = NULL;
  kolo_status st = gpu_ring_join(me, 1, me->rank, me->size, 30000, &comm);
  for (int step = 0; step < 10 && st == KOLO_OK; step++) st = allreduce_checked(comm, &b);
  int failed_rank = -2;
  kolo_status recorded = kolo_comm_error(comm, &failed_rank);
  int pass = st != KOLO_OK && recorded == KOLO_ERR_NCCL;
  int bad = gpu_report(pass,
                       "rank %d: an NCCL error on rank 1 fails the communicator here too "
                       "(%s, kolo_comm_error %s)",
                       me->rank, kolo_strerror(st), kolo_strerror(recorded));
  kolo_comm_destroy(comm);
  buffers_free(&b);
  return bad;
}

/* ---- kolo_nccl: a peer that never comes ---- */

static int init_without_peer(const gpu_rank *me) {
  uint8_t id[KOLO_NCCL_ID_BYTES];
  kolo_status st = gpu_share_id(me->dir, 9, 0, 0, id, 10000);
  if (st != KOLO_OK) return gpu_report(0, "id for the lonely communicator (%s)", kolo_strerror(st));
  kolo_nccl_comm *comm = NULL;
  uint64_t t0 = gpu_now_ns();
  st = kolo_nccl_comm_create(id, 0, 2, me->device, 3000, &comm);
  double s = (double)(gpu_now_ns() - t0) / 1e9;
  int bad = gpu_report(st == KOLO_ERR_TIMEOUT && comm == NULL && s >= 2.5 && s < 15,
                       "creation with a missing peer ends with TIMEOUT after %.1f s (got %s)", s,
                       kolo_strerror(st));
  kolo_nccl_comm_destroy(comm);
  return bad;
}

int main(int argc, char **argv) {
  int ranks = 0, exit_code = 0;
  int gpus = gpu_start(argc, argv, 3, &ranks, &exit_code);
  if (gpus == 0) return exit_code;
  int failed = 0;
  printf("# abort: creation with a missing peer (kolo_nccl)\n");
  failed += gpu_run_ranks(1, gpus, init_without_peer, NULL, 60, -1);
  printf("# abort: %d ranks on %d GPU(s), abort from a second thread, rank 1 withholding\n", ranks,
         gpus);
  failed += gpu_run_ranks(ranks, gpus, abort_from_a_thread, NULL, 180, -1);
  printf("# abort: %d ranks, rank %d SIGKILLed, survivors re-form\n", ranks, ranks - 1);
  failed += gpu_run_ranks(ranks, gpus, kill_one, NULL, 180, ranks - 1);
  if (gpu_on_fake()) {
    printf("# abort: an NCCL error on rank 1 (injected in the CPU stand-in)\n");
    failed += gpu_run_ranks(ranks, gpus, nccl_error_fails_every_rank, NULL, 120, -1);
  } else {
    printf("# abort: NCCL error injection exists only in the CPU stand-in; not run here\n");
  }
  return failed ? 1 : 0;
}
