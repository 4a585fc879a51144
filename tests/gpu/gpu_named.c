/* Named (engine.h) collectives on CUDA buffers: negotiated like host ones, then
 * run on NCCL. Every rank submits the same names in its own order (rotated and
 * reversed by rank), some through the _on_stream forms with the input written
 * late by an asynchronous copy on the caller's stream, some plain, a host named
 * all-reduce among them; results are checked exactly (integer-valued data).
 * Then: kolo_stream_wait on a named request orders a second stream after it;
 * a count mismatch and a host/device mismatch fail the name on every rank with
 * a message naming it, and the communicator stays usable; what NCCL cannot do
 * (scaled, all-to-all) is refused at submission; a device operation while a
 * rank has joined fails with KOLO_ERR_STATE on the others, and the joins end. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "kolo/engine.h"

#define SLOTS 12
#define RS_BLOCK 17

typedef enum slot_kind { AR, BCAST, GATHER, SCATTER, HOST_AR } slot_kind;

typedef struct slot {
  char name[32];
  slot_kind kind;
  size_t count;      /* send elements (gather: this rank's; scatter: the total) */
  size_t recv_count; /* elements the result holds */
  int on_stream;
  void *dsend, *drecv; /* device (or host for HOST_AR) */
  int32_t *hsend, *hrecv;
  size_t counts[GPU_MAX_RANKS];
  kolo_request *req;
} slot;

static size_t ar_counts[] = {1, 7, 1003, 4096, 65539, 3, 513, 20000};

static int32_t value(int rank, size_t i) {
  return (int32_t)((rank + 1) * (int)(i % 13) - 6);
}

static void slot_init(slot *s, int index, const gpu_rank *me) {
  memset(s, 0, sizeof *s);
  int n = me->size;
  if (index < 8) {
    s->kind = AR;
    s->count = s->recv_count = ar_counts[index];
    s->on_stream = index % 2;
    snprintf(s->name, sizeof s->name, "grad.%d", index);
  } else if (index == 8) {
    s->kind = BCAST;
    s->count = s->recv_count = 1000;
    s->on_stream = 1;
    snprintf(s->name, sizeof s->name, "bcast");
  } else if (index == 9) {
    s->kind = GATHER;
    s->count = (size_t)me->rank + 2;
    for (int r = 0; r < n; r++) s->recv_count += (size_t)r + 2;
    snprintf(s->name, sizeof s->name, "gather");
  } else if (index == 10) {
    s->kind = SCATTER;
    s->count = RS_BLOCK * (size_t)n;
    s->recv_count = RS_BLOCK;
    for (int r = 0; r < n; r++) s->counts[r] = RS_BLOCK;
    s->on_stream = 1;
    snprintf(s->name, sizeof s->name, "scatter");
  } else {
    s->kind = HOST_AR;
    s->count = s->recv_count = 100;
    snprintf(s->name, sizeof s->name, "host.sum");
  }
}

static int32_t expected(const slot *s, const gpu_rank *me, size_t i) {
  int n = me->size;
  int64_t sum = 0;
  switch (s->kind) {
    case BCAST:
      return (int32_t)(1000 + i); /* root 1's data */
    case GATHER: {
      for (int r = 0; r < n; r++) {
        if (i < (size_t)r + 2) return (int32_t)(100 * r + (int)i);
        i -= (size_t)r + 2;
      }
      return -1;
    }
    default:
      if (s->kind == SCATTER) i += (size_t)me->rank * RS_BLOCK; /* this rank's block of the sum */
      for (int r = 0; r < n; r++) sum += value(r, i);
      return (int32_t)sum;
  }
}

static int32_t input(const slot *s, const gpu_rank *me, size_t i) {
  if (s->kind == BCAST) return me->rank == 1 ? (int32_t)(1000 + i) : -7;
  if (s->kind == GATHER) return (int32_t)(100 * me->rank + (int)i);
  return value(me->rank, i);
}

static int slot_buffers(slot *s, const gpu_rank *me) {
  size_t sb = s->count * 4 + 4, rb = s->recv_count * 4 + 4;
  s->hsend = malloc(sb);
  s->hrecv = malloc(rb);
  if (s->hsend == NULL || s->hrecv == NULL) return 0;
  for (size_t i = 0; i < s->count; i++) s->hsend[i] = input(s, me, i);
  for (size_t i = 0; i < s->recv_count; i++) s->hrecv[i] = -99;
  if (s->kind == HOST_AR) {
    s->dsend = s->hsend;
    s->drecv = s->hrecv;
    return 1;
  }
  if (kolo_nccl_device_alloc(me->device, sb, &s->dsend) != KOLO_OK) return 0;
  if (s->kind == BCAST)
    s->drecv = s->dsend;
  else if (kolo_nccl_device_alloc(me->device, rb, &s->drecv) != KOLO_OK)
    return 0;
  if (s->kind != BCAST && kolo_nccl_copy_to_device(s->drecv, s->hrecv, rb) != KOLO_OK) return 0;
  return 1;
}

static void slot_free(slot *s) {
  if (s->kind != HOST_AR) {
    if (s->drecv != s->dsend) kolo_nccl_device_free(s->drecv);
    kolo_nccl_device_free(s->dsend);
  }
  free(s->hsend);
  free(s->hrecv);
}

/* Writes the input (late, on stream, for the _on_stream ones) and submits. */
static kolo_status slot_submit(slot *s, kolo_comm *comm, cudaStream_t stream) {
  void *st = s->on_stream ? (void *)stream : NULL;
  if (s->kind != HOST_AR) {
    if (s->on_stream) {
      if (cudaMemcpyAsync(s->dsend, s->hsend, s->count * 4, cudaMemcpyHostToDevice, stream) !=
          cudaSuccess)
        return KOLO_ERR_DEVICE;
    } else if (kolo_nccl_copy_to_device(s->dsend, s->hsend, s->count * 4) != KOLO_OK) {
      return KOLO_ERR_DEVICE;
    }
  }
  switch (s->kind) {
    case AR:
      return s->on_stream
                 ? kolo_allreduce_named_on_stream(comm, s->name, s->dsend, s->drecv, s->count,
                                                  KOLO_INT32, KOLO_SUM, st, &s->req)
                 : kolo_allreduce_named(comm, s->name, s->dsend, s->drecv, s->count, KOLO_INT32,
                                        KOLO_SUM, 1.0, 1.0, &s->req);
    case HOST_AR:
      return kolo_allreduce_named(comm, s->name, s->dsend, s->drecv, s->count, KOLO_INT32, KOLO_SUM,
                                  1.0, 1.0, &s->req);
    case BCAST:
      return kolo_broadcast_named_on_stream(comm, s->name, s->dsend, s->count, KOLO_INT32, 1, st,
                                            &s->req);
    case GATHER:
      return kolo_allgather_named(comm, s->name, s->dsend, s->count, s->drecv, s->recv_count, NULL,
                                  KOLO_INT32, &s->req);
    case SCATTER:
      return kolo_reducescatter_named_on_stream(comm, s->name, s->dsend, s->drecv, s->count,
                                                s->counts, KOLO_INT32, KOLO_SUM, st, &s->req);
  }
  return KOLO_ERR_INVALID_ARG;
}

static kolo_status slot_complete(slot *s, int poll) {
  if (!poll) return kolo_wait(s->req);
  for (;;) {
    int done = 0;
    kolo_status status = KOLO_OK;
    kolo_status rc = kolo_test(s->req, &done, &status);
    if (rc != KOLO_OK) return rc;
    if (done) return status;
    gpu_sleep_ms(1);
  }
}

static int slot_check(slot *s, const gpu_rank *me) {
  void *from = s->kind == BCAST ? s->dsend : s->drecv;
  if (s->kind != HOST_AR && kolo_nccl_copy_to_host(s->hrecv, from, s->recv_count * 4) != KOLO_OK)
    return 0;
  for (size_t i = 0; i < s->recv_count; i++) {
    if (s->hrecv[i] != expected(s, me, i)) {
      printf("# rank %d: '%s'[%zu] = %d, want %d\n", me->rank, s->name, i, s->hrecv[i],
             expected(s, me, i));
      return 0;
    }
  }
  return 1;
}

/* Every slot, submitted in this rank's own order, completed, checked. */
static int out_of_order(kolo_comm *comm, const gpu_rank *me, cudaStream_t stream) {
  slot slots[SLOTS];
  int ok = 1;
  for (int i = 0; i < SLOTS; i++) {
    slot_init(&slots[i], i, me);
    ok &= slot_buffers(&slots[i], me);
  }
  kolo_status st = ok ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  for (int k = 0; k < SLOTS && st == KOLO_OK; k++) {
    int i = (k + 5 * me->rank) % SLOTS;
    if (me->rank % 2) i = SLOTS - 1 - i;
    st = slot_submit(&slots[i], comm, stream);
    if (st != KOLO_OK)
      printf("# rank %d: submitting '%s': %s\n", me->rank, slots[i].name, kolo_strerror(st));
  }
  int right = 0;
  for (int i = 0; i < SLOTS && st == KOLO_OK; i++) {
    kolo_status done = slot_complete(&slots[i], i % 2);
    if (done != KOLO_OK)
      printf("# rank %d: '%s': %s\n", me->rank, slots[i].name, kolo_strerror(done));
    right += done == KOLO_OK && slot_check(&slots[i], me);
  }
  for (int i = 0; i < SLOTS; i++) slot_free(&slots[i]);
  return gpu_report(right == SLOTS,
                    "rank %d: %d named operations on CUDA buffers (and one on host buffers) "
                    "submitted out of order run on NCCL with exact results (%d right, %s)",
                    me->rank, SLOTS, right, kolo_strerror(st));
}

/* kolo_stream_wait on a named request: a second stream reads the result after
 * NCCL wrote it, the host never waiting for NCCL. */
static int stream_waits(kolo_comm *comm, const gpu_rank *me, cudaStream_t s1, cudaStream_t s2) {
  slot s;
  slot_init(&s, 4, me); /* 65539 elements */
  snprintf(s.name, sizeof s.name, "stream.wait");
  s.on_stream = 1;
  int ok = slot_buffers(&s, me);
  kolo_status st = ok ? slot_submit(&s, comm, s1) : KOLO_ERR_NO_MEMORY;
  if (st == KOLO_OK) st = kolo_stream_wait(s.req, s2);
  if (st == KOLO_OK && cudaMemcpyAsync(s.hrecv, s.drecv, s.recv_count * 4, cudaMemcpyDeviceToHost,
                                       s2) != cudaSuccess)
    st = KOLO_ERR_DEVICE;
  if (st == KOLO_OK && cudaStreamSynchronize(s2) != cudaSuccess) st = KOLO_ERR_DEVICE;
  int right = 1;
  for (size_t i = 0; i < s.recv_count && st == KOLO_OK; i++)
    right &= s.hrecv[i] == expected(&s, me, i);
  kolo_status waited = s.req != NULL ? kolo_wait(s.req) : st;
  slot_free(&s);
  return gpu_report(st == KOLO_OK && waited == KOLO_OK && right,
                    "rank %d: kolo_stream_wait orders a stream after a named device all-reduce "
                    "(%s, %s, %s)",
                    me->rank, kolo_strerror(st), kolo_strerror(waited),
                    right ? "exact" : "wrong data");
}

/* A named device all-reduce whose ranks disagree: MISMATCH with the name and
 * the disagreement in the message, on every rank. */
static int mismatch(kolo_comm *comm, const gpu_rank *me, const char *name, size_t count, int host,
                    const char *want) {
  void *dev = NULL;
  int32_t host_buffer[16] = {0};
  if (!host && kolo_nccl_device_alloc(me->device, 16 * 4, &dev) != KOLO_OK)
    return gpu_report(0, "rank %d: buffer", me->rank);
  void *buffer = host ? (void *)host_buffer : dev;
  kolo_request *req = NULL;
  kolo_result result = {0};
  kolo_status st =
      kolo_allreduce_named(comm, name, buffer, buffer, count, KOLO_INT32, KOLO_SUM, 1.0, 1.0, &req);
  if (st == KOLO_OK) st = kolo_wait_result(req, &result);
  kolo_nccl_device_free(dev);
  return gpu_report(st == KOLO_ERR_MISMATCH && strstr(result.message, name) != NULL &&
                        strstr(result.message, want) != NULL,
                    "rank %d: '%s' -> %s \"%s\"", me->rank, name, kolo_strerror(st),
                    result.message);
}

/* After the mismatches the communicator still runs named device operations. */
static int still_usable(kolo_comm *comm, const gpu_rank *me) {
  slot s;
  slot_init(&s, 2, me);
  snprintf(s.name, sizeof s.name, "after.mismatch");
  int ok = slot_buffers(&s, me);
  kolo_status st = ok ? slot_submit(&s, comm, NULL) : KOLO_ERR_NO_MEMORY;
  if (st == KOLO_OK) st = kolo_wait(s.req);
  int right = st == KOLO_OK && slot_check(&s, me);
  slot_free(&s);
  return gpu_report(right, "rank %d: the communicator is usable after the mismatches (%s)",
                    me->rank, kolo_strerror(st));
}

static int refusals(kolo_comm *comm, const gpu_rank *me) {
  void *dev = NULL;
  if (kolo_nccl_device_alloc(me->device, 64, &dev) != KOLO_OK) return gpu_report(0, "buffer");
  kolo_request *req = NULL;
  size_t counts[GPU_MAX_RANKS];
  for (int r = 0; r < me->size; r++) counts[r] = r == 0 ? 0 : 1;
  kolo_status scaled =
      kolo_allreduce_named(comm, "scaled", dev, dev, 4, KOLO_FLOAT32, KOLO_SUM, 0.5, 1.0, &req);
  kolo_status a2a =
      kolo_alltoall_named(comm, "a2a", dev, counts, dev, 16, NULL, KOLO_FLOAT32, &req);
  int32_t host[4] = {0};
  kolo_status host_stream = kolo_allreduce_named_on_stream(comm, "host.on.stream", host, host, 4,
                                                           KOLO_INT32, KOLO_SUM, NULL, &req);
  kolo_nccl_device_free(dev);
  return gpu_report(scaled == KOLO_ERR_UNSUPPORTED && a2a == KOLO_ERR_UNSUPPORTED &&
                        host_stream == KOLO_ERR_INVALID_ARG,
                    "rank %d: refused at submission: scaled %s, all-to-all %s, host buffers on a "
                    "stream %s",
                    me->rank, kolo_strerror(scaled), kolo_strerror(a2a),
                    kolo_strerror(host_stream));
}

/* The last rank joins; the others' device all-reduce fails with STATE, then
 * they join too and every join ends. */
static int joined(kolo_comm *comm, const gpu_rank *me) {
  int last = me->size - 1;
  kolo_status op = KOLO_OK, joined_status;
  kolo_result join_result = {0}, op_result = {0};
  kolo_request *join = NULL, *req = NULL;
  if (me->rank != last) {
    void *dev = NULL;
    if (kolo_nccl_device_alloc(me->device, 64, &dev) != KOLO_OK) return gpu_report(0, "buffer");
    op = kolo_allreduce_named(comm, "while.joined", dev, dev, 4, KOLO_INT32, KOLO_SUM, 1.0, 1.0,
                              &req);
    if (op == KOLO_OK) op = kolo_wait_result(req, &op_result);
    kolo_nccl_device_free(dev);
  }
  joined_status = kolo_join_async(comm, &join);
  if (joined_status == KOLO_OK) joined_status = kolo_wait_result(join, &join_result);
  int op_right =
      me->rank == last || (op == KOLO_ERR_STATE && strstr(op_result.message, "while.joined"));
  return gpu_report(op_right && joined_status == KOLO_OK && join_result.last_rank >= 0 &&
                        join_result.last_rank < last,
                    "rank %d: a device all-reduce while rank %d joined: %s \"%s\"; join %s, last "
                    "rank %d",
                    me->rank, last, kolo_strerror(op), op_result.message,
                    kolo_strerror(joined_status), join_result.last_rank);
}

static int rank_main(const gpu_rank *me) {
  kolo_comm *comm = NULL;
  kolo_status st = gpu_ring_join(me, 1, me->rank, me->size, 60000, &comm);
  if (st != KOLO_OK) return gpu_report(0, "rank %d: ring (%s)", me->rank, kolo_strerror(st));
  cudaStream_t s1 = NULL, s2 = NULL;
  if (cudaSetDevice(me->device) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) != cudaSuccess) {
    kolo_comm_destroy(comm);
    return gpu_report(0, "rank %d: streams", me->rank);
  }
  int bad = out_of_order(comm, me, s1);
  bad += stream_waits(comm, me, s1, s2);
  bad += mismatch(comm, me, "bad.count", me->rank == me->size - 1 ? 12 : 10, 0, "count 10");
  bad += mismatch(comm, me, "bad.place", 4, me->rank == 0, "host memory on rank 0");
  bad += still_usable(comm, me);
  bad += refusals(comm, me);
  bad += joined(comm, me);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  kolo_comm_destroy(comm);
  return bad;
}

int main(int argc, char **argv) {
  int ranks = 0, exit_code = 0;
  int gpus = gpu_start(argc, argv, 2, &ranks, &exit_code);
  if (gpus == 0) return exit_code;
  if (ranks < 2 || ranks > GPU_MAX_RANKS) {
    fprintf(stderr, "gpu_named: 2..%d ranks\n", GPU_MAX_RANKS);
    return 2;
  }
  printf("# named operations on CUDA buffers: %d ranks on %d GPU(s)\n", ranks, gpus);
  return gpu_run_ranks(ranks, gpus, rank_main, NULL, 300, -1) ? 1 : 0;
}
