/* Stream order of libkolo's GPU collectives. The probe: a collective's input is
 * written by an asynchronous copy on the caller's non-blocking stream, queued
 * behind 300 ms of other work (a host function) there; the _on_stream call must
 * send the new data, and the unordered call (ordered after the legacy default
 * stream only) must be seen to send the stale data, which shows the probe can
 * tell. Then: kolo_stream_wait orders a second stream after a collective
 * without the host waiting; and a stream-ordered collective does not wait for
 * compute queued on the legacy default stream (kolo's stream is non-blocking),
 * while the unordered form does. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

#define COUNT 4096
#define DELAY_MS 300
#define STALE_DELAY_MS 1500 /* long: an unordered collective must surely read before it */
#define POISON -1000.0f

typedef struct probe {
  kolo_comm *comm;
  const gpu_rank *me;
  float *dev_in, *dev_out;
  float *pinned_in, *pinned_out;
  cudaStream_t s1, s2;
} probe;

static void CUDART_CB sleep_on_stream(void *ms) {
  gpu_sleep_ms((int)(intptr_t)ms);
}

static float want(const probe *p) {
  float sum = 0;
  for (int r = 0; r < p->me->size; r++) sum += (float)(r + 1);
  return sum;
}

/* dev_in and dev_out to POISON now; pinned_in to this rank's real input. */
static int prepare(probe *p) {
  for (int i = 0; i < COUNT; i++) p->pinned_out[i] = POISON;
  for (int i = 0; i < COUNT; i++) p->pinned_in[i] = (float)(p->me->rank + 1);
  return cudaMemcpy(p->dev_in, p->pinned_out, COUNT * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(p->dev_out, p->pinned_out, COUNT * 4, cudaMemcpyHostToDevice) == cudaSuccess;
}

/* The real input reaches dev_in on s1 only after ms of other work there. The
 * ranks start together (a barrier on the ring), so the delay is the same for all. */
static int produce_late(probe *p, int ms) {
  if (kolo_barrier(p->comm) != KOLO_OK) return 0;
  return cudaLaunchHostFunc(p->s1, sleep_on_stream, (void *)(intptr_t)ms) == cudaSuccess &&
         cudaMemcpyAsync(p->dev_in, p->pinned_in, COUNT * 4, cudaMemcpyHostToDevice, p->s1) ==
             cudaSuccess;
}

/* Copies dev_out back (after s1 and the legacy stream are idle); its first value. */
static float result(probe *p) {
  (void)cudaStreamSynchronize(p->s1);
  float first = POISON;
  if (cudaMemcpy(p->pinned_out, p->dev_out, COUNT * 4, cudaMemcpyDeviceToHost) == cudaSuccess)
    first = p->pinned_out[0];
  for (int i = 1; i < COUNT; i++)
    if (p->pinned_out[i] != first) return POISON - 1; /* torn: neither old nor new */
  return first;
}

static int probe_ordered(probe *p) {
  kolo_request *req = NULL;
  kolo_status st = prepare(p) && produce_late(p, DELAY_MS) ? KOLO_OK : KOLO_ERR_DEVICE;
  if (st == KOLO_OK)
    st = kolo_allreduce_on_stream(p->comm, p->dev_in, p->dev_out, COUNT, KOLO_FLOAT32, KOLO_SUM,
                                  p->s1, &req);
  if (st == KOLO_OK) st = kolo_wait(req);
  float got = result(p);
  return gpu_report(
      st == KOLO_OK && got == want(p),
      "rank %d: _on_stream sends what the caller's stream wrote (got %g, want %g, %s)", p->me->rank,
      got, want(p), kolo_strerror(st));
}

static int probe_unordered(probe *p) {
  kolo_request *req = NULL;
  kolo_status st = prepare(p) && produce_late(p, STALE_DELAY_MS) ? KOLO_OK : KOLO_ERR_DEVICE;
  if (st == KOLO_OK)
    st = kolo_allreduce_async(p->comm, p->dev_in, p->dev_out, COUNT, KOLO_FLOAT32, KOLO_SUM, &req);
  if (st == KOLO_OK) st = kolo_wait(req);
  float got = result(p);
  float stale = POISON * (float)p->me->size;
  return gpu_report(st == KOLO_OK && got == stale,
                    "rank %d: the probe can tell: the unordered call read the stale input "
                    "(got %g, stale %g)",
                    p->me->rank, got, stale);
}

static int stream_wait_orders_a_second_stream(probe *p) {
  kolo_request *req = NULL;
  kolo_status st = prepare(p) && produce_late(p, DELAY_MS) ? KOLO_OK : KOLO_ERR_DEVICE;
  if (st == KOLO_OK)
    st = kolo_allreduce_on_stream(p->comm, p->dev_in, p->dev_out, COUNT, KOLO_FLOAT32, KOLO_SUM,
                                  p->s1, &req);
  if (st == KOLO_OK) st = kolo_stream_wait(req, p->s2);
  if (st == KOLO_OK && cudaMemcpyAsync(p->pinned_out, p->dev_out, COUNT * 4, cudaMemcpyDeviceToHost,
                                       p->s2) != cudaSuccess)
    st = KOLO_ERR_DEVICE;
  if (st == KOLO_OK && cudaStreamSynchronize(p->s2) != cudaSuccess) st = KOLO_ERR_DEVICE;
  float got = p->pinned_out[0];
  int has_event = req != NULL && kolo_request_cuda_event(req) != NULL;
  kolo_status waited = req != NULL ? kolo_wait(req) : st;
  (void)result(p);
  return gpu_report(st == KOLO_OK && waited == KOLO_OK && has_event && got == want(p),
                    "rank %d: kolo_stream_wait orders another stream after the collective "
                    "(got %g, want %g, %s)",
                    p->me->rank, got, want(p), kolo_strerror(st));
}

/* Time (s) of one collective submitted after 1.5 s of work on the legacy stream. */
static double after_legacy_work(probe *p, int ordered, kolo_status *st) {
  if (!prepare(p)) {
    *st = KOLO_ERR_DEVICE;
    return 0;
  }
  (void)cudaMemcpy(p->dev_in, p->pinned_in, COUNT * 4, cudaMemcpyHostToDevice);
  if (kolo_barrier(p->comm) != KOLO_OK) {
    *st = KOLO_ERR_PEER_LOST;
    return 0;
  }
  (void)cudaLaunchHostFunc(NULL, sleep_on_stream, (void *)(intptr_t)1500);
  uint64_t t0 = gpu_now_ns();
  kolo_request *req = NULL;
  *st = ordered ? kolo_allreduce_on_stream(p->comm, p->dev_in, p->dev_out, COUNT, KOLO_FLOAT32,
                                           KOLO_SUM, p->s1, &req)
                : kolo_allreduce_async(p->comm, p->dev_in, p->dev_out, COUNT, KOLO_FLOAT32,
                                       KOLO_SUM, &req);
  if (*st == KOLO_OK) *st = kolo_wait(req);
  double s = (double)(gpu_now_ns() - t0) / 1e9;
  (void)cudaStreamSynchronize(NULL);
  return s;
}

static int legacy_stream_does_not_serialise(probe *p) {
  kolo_status st1, st2;
  double ordered = after_legacy_work(p, 1, &st1);
  double unordered = after_legacy_work(p, 0, &st2);
  int bad = gpu_report(st1 == KOLO_OK && ordered < 1.0,
                       "rank %d: a stream-ordered collective does not wait for 1.5 s of legacy "
                       "default-stream work (%.2f s)",
                       p->me->rank, ordered);
  bad += gpu_report(st2 == KOLO_OK && unordered >= 1.4,
                    "rank %d: the unordered form is ordered after it, as documented (%.2f s)",
                    p->me->rank, unordered);
  return bad;
}

static int rank_main(const gpu_rank *me) {
  kolo_comm *comm = NULL;
  kolo_status st = gpu_ring_join(me, 1, me->rank, me->size, 60000, &comm);
  if (st != KOLO_OK)
    return gpu_report(0, "rank %d: ring in CUDA mode (%s)", me->rank, kolo_strerror(st));
  probe p = {.comm = comm, .me = me};
  int bad = 0;
  if (cudaSetDevice(me->device) != cudaSuccess ||
      cudaMalloc((void **)&p.dev_in, COUNT * 4) != cudaSuccess ||
      cudaMalloc((void **)&p.dev_out, COUNT * 4) != cudaSuccess ||
      cudaMallocHost((void **)&p.pinned_in, COUNT * 4) != cudaSuccess ||
      cudaMallocHost((void **)&p.pinned_out, COUNT * 4) != cudaSuccess ||
      cudaStreamCreateWithFlags(&p.s1, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&p.s2, cudaStreamNonBlocking) != cudaSuccess) {
    bad = gpu_report(0, "rank %d: CUDA setup", me->rank);
  } else {
    bad += probe_ordered(&p);
    bad += probe_unordered(&p);
    bad += stream_wait_orders_a_second_stream(&p);
    bad += legacy_stream_does_not_serialise(&p);
  }
  (void)cudaStreamDestroy(p.s1);
  (void)cudaStreamDestroy(p.s2);
  (void)cudaFree(p.dev_in);
  (void)cudaFree(p.dev_out);
  (void)cudaFreeHost(p.pinned_in);
  (void)cudaFreeHost(p.pinned_out);
  kolo_comm_destroy(comm);
  return bad;
}

int main(int argc, char **argv) {
  int ranks = 0, exit_code = 0;
  int gpus = gpu_start(argc, argv, 2, &ranks, &exit_code);
  if (gpus == 0) return exit_code;
  printf("# stream order: %d rank(s) on %d GPU(s)\n", ranks, gpus);
  return gpu_run_ranks(ranks, gpus, rank_main, NULL, 300, -1) ? 1 : 0;
}
