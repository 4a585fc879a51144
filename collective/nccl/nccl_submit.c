/* kolo_nccl: submitting collectives. Every call validates all its descriptors
 * first, orders kolo's stream after the caller's stream (an event recorded
 * there), stages overlapping send/recv through device scratch memory, issues
 * the NCCL calls in one ncclGroupStart/End, waits (bounded) while NCCL enqueues,
 * and records the request's completion event on kolo's stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "nccl_internal.h"

#define COMPONENT "nccl"
#define SCRATCH_ALIGN 256

/* One descriptor as it is issued: the caller's, with send or recv replaced by
 * scratch when staged. */
typedef struct issued_op {
  kolo_nccl_op_desc d;
  int staged;
  size_t scratch_offset; /* where its staging lives in comm->scratch */
  size_t scratch_bytes;
} issued_op;

static size_t align_up(size_t n) {
  return (n + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN;
}

/* State check under the lock, the comm's device current for the call (guard).
 * Returns with the lock held and the guard entered on KOLO_OK only. */
static kolo_status begin_submit(kolo_nccl_comm *comm, kolo_nccl_guard *guard) {
  pthread_mutex_lock(&comm->mu);
  kolo_status st = kolo_nccl_state_submit_status(comm->state, comm->failure);
  if (st == KOLO_OK && atomic_load(&comm->abort_requested)) st = KOLO_ERR_ABORTED;
  if (st != KOLO_OK && comm->failure != KOLO_OK) st = comm->failure;
  if (st == KOLO_OK) {
    cudaError_t e = kolo_nccl_guard_enter(comm->device, guard);
    if (e != cudaSuccess) {
      kolo_nccl_fail_cuda_locked(comm, e, "cudaSetDevice");
      st = comm->failure;
    }
  }
  if (st != KOLO_OK) pthread_mutex_unlock(&comm->mu);
  return st;
}

static void end_submit(kolo_nccl_comm *comm, kolo_nccl_guard *guard) {
  kolo_nccl_guard_exit(guard);
  pthread_mutex_unlock(&comm->mu);
}

/* Grows the scratch buffer to at least bytes, in kolo's stream order (the old
 * one is freed after the work already queued on the stream that uses it). */
static kolo_status ensure_scratch_locked(kolo_nccl_comm *comm, size_t bytes) {
  if (bytes <= comm->scratch_bytes) return KOLO_OK;
  void *fresh = NULL;
  int pooled = 1;
  cudaError_t e = cudaMallocAsync(&fresh, bytes, comm->stream);
  if (e == cudaErrorNotSupported) {
    kolo_nccl_cuda_forget(e);
    pooled = 0;
    e = cudaMalloc(&fresh, bytes);
  }
  if (e != cudaSuccess) {
    kolo_nccl_cuda_forget(e);
    char message[256];
    kolo_nccl_describe_cuda(e, "staging buffer", message, sizeof message);
    KOLO_LOGE(COMPONENT, "rank %d/%d: %s (%zu bytes)", comm->rank, comm->size, message, bytes);
    return kolo_nccl_status_from_cuda(e);
  }
  if (comm->scratch != NULL) {
    /* cudaFree would wait for the whole device: a kernel stuck on a dead peer
     * would hang it. Pool memory is freed in stream order instead; plain memory
     * (no pools on this device) is kept, only the first size is ever replaced. */
    if (comm->scratch_pooled)
      kolo_nccl_cuda_forget(cudaFreeAsync(comm->scratch, comm->stream));
    else
      KOLO_LOGW(COMPONENT,
                "rank %d/%d: staging buffer grown without memory pools; "
                "%zu bytes kept until destroy",
                comm->rank, comm->size, comm->scratch_bytes);
  }
  comm->scratch = fresh;
  comm->scratch_bytes = bytes;
  comm->scratch_pooled = pooled;
  return KOLO_OK;
}

/* kolo's stream waits for what the caller enqueued on `stream` so far. A
 * handle the runtime refuses is the caller's error: nothing enqueued. */
static kolo_status order_after_locked(kolo_nccl_comm *comm, void *stream) {
  cudaError_t e = cudaEventRecord(comm->input, (cudaStream_t)stream);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(comm->stream, comm->input, 0);
  if (e == cudaSuccess) return KOLO_OK;
  kolo_status st = kolo_nccl_status_from_cuda(e);
  if (st == KOLO_ERR_INVALID_ARG) {
    char message[256];
    kolo_nccl_cuda_forget(e);
    kolo_nccl_describe_cuda(e, "caller's stream", message, sizeof message);
    KOLO_LOGE(COMPONENT, "rank %d/%d: %s", comm->rank, comm->size, message);
    return st;
  }
  kolo_nccl_fail_cuda_locked(comm, e, "ordering after the caller's stream");
  return comm->failure;
}

/* Checks every descriptor and plans the staging; refused input leaves nothing
 * enqueued and the comm READY. *scratch receives the staging bytes needed. */
static kolo_status plan_ops_locked(kolo_nccl_comm *comm, const kolo_nccl_op_desc *ops, size_t n,
                                   issued_op *plan, size_t *scratch) {
  char message[320];
  *scratch = 0;
  for (size_t i = 0; i < n; i++) {
    plan[i] = (issued_op){.d = ops[i]};
    kolo_status st =
        kolo_nccl_check_op(comm->rank, comm->size, comm->device, &ops[i], kolo_nccl_device_range,
                           &plan[i].staged, message, sizeof message);
    if (st != KOLO_OK) {
      KOLO_LOGE(COMPONENT, "rank %d/%d: operation %zu of %zu: %s", comm->rank, comm->size, i, n,
                message);
      return st;
    }
    if (!plan[i].staged) continue;
    size_t bytes = ops[i].kind == KOLO_NCCL_REDUCESCATTER
                       ? kolo_nccl_recv_bytes(comm->rank, comm->size, &ops[i])
                       : kolo_nccl_send_bytes(comm->rank, comm->size, &ops[i]);
    plan[i].scratch_offset = *scratch;
    plan[i].scratch_bytes = bytes;
    if (align_up(bytes) < bytes || *scratch + align_up(bytes) < *scratch) return KOLO_ERR_TOO_LARGE;
    *scratch += align_up(bytes);
  }
  return KOLO_OK;
}

/* Points staged descriptors at scratch and copies the send sides there. */
static kolo_status stage_inputs_locked(kolo_nccl_comm *comm, issued_op *plan, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!plan[i].staged) continue;
    char *scratch = comm->scratch + plan[i].scratch_offset;
    if (plan[i].d.kind == KOLO_NCCL_REDUCESCATTER) {
      plan[i].d.recv = scratch; /* copied to the caller's recv after the group */
      continue;
    }
    cudaError_t e = cudaMemcpyAsync(scratch, plan[i].d.send, plan[i].scratch_bytes,
                                    cudaMemcpyDeviceToDevice, comm->stream);
    if (e != cudaSuccess) {
      kolo_nccl_fail_cuda_locked(comm, e, "staging a send buffer");
      return comm->failure;
    }
    plan[i].d.send = scratch;
  }
  return KOLO_OK;
}

static kolo_status unstage_outputs_locked(kolo_nccl_comm *comm, const kolo_nccl_op_desc *ops,
                                          const issued_op *plan, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!plan[i].staged || plan[i].d.kind != KOLO_NCCL_REDUCESCATTER) continue;
    cudaError_t e = cudaMemcpyAsync(ops[i].recv, plan[i].d.recv, plan[i].scratch_bytes,
                                    cudaMemcpyDeviceToDevice, comm->stream);
    if (e != cudaSuccess) {
      kolo_nccl_fail_cuda_locked(comm, e, "copying a staged result");
      return comm->failure;
    }
  }
  return KOLO_OK;
}

/* Issues one descriptor's NCCL calls (inside the caller's group). */
static ncclResult_t issue_op(kolo_nccl_comm *comm, const kolo_nccl_op_desc *d) {
  ncclDataType_t dt = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  (void)kolo_nccl_dtype_to_nccl(d->dtype, &dt);
  (void)kolo_nccl_op_to_nccl(d->op, &op);
  size_t es = kolo_nccl_dtype_size(d->dtype);
  switch (d->kind) {
    case KOLO_NCCL_ALLREDUCE:
      return ncclAllReduce(d->send, d->recv, d->count, dt, op, comm->nccl, comm->stream);
    case KOLO_NCCL_BROADCAST:
      return ncclBroadcast(d->recv, d->recv, d->count, dt, d->root, comm->nccl, comm->stream);
    case KOLO_NCCL_ALLGATHER:
      return ncclAllGather(d->send, d->recv, d->count, dt, comm->nccl, comm->stream);
    case KOLO_NCCL_REDUCESCATTER:
      return ncclReduceScatter(d->send, d->recv, d->count, dt, op, comm->nccl, comm->stream);
    case KOLO_NCCL_ALLGATHERV: {
      /* Every rank roots one broadcast of its block, into recv at its offset. */
      char *base = d->recv;
      size_t offset = 0;
      for (int r = 0; r < comm->size; r++) {
        size_t c = d->counts[r];
        if (c > 0) {
          const void *src = r == comm->rank ? d->send : (const void *)(base + offset * es);
          ncclResult_t res =
              ncclBroadcast(src, base + offset * es, c, dt, r, comm->nccl, comm->stream);
          if (res != ncclSuccess) return res;
        }
        offset += c;
      }
      return ncclSuccess;
    }
  }
  return ncclInvalidArgument;
}

/* Ends a group started by the caller and waits (bounded) while NCCL is still
 * enqueueing; on failure the communicator is FAILED. */
static kolo_status end_group_locked(kolo_nccl_comm *comm, ncclResult_t issued, uint64_t start) {
  ncclResult_t r = ncclGroupEnd();
  if (issued != ncclSuccess && issued != ncclInProgress) r = issued;
  int timed_out = 0, aborted = 0;
  r = kolo_nccl_settle_locked(comm, r, start, NULL, NULL, &timed_out, &aborted);
  if (aborted) return KOLO_ERR_ABORTED; /* the abort itself runs once we unlock */
  if (timed_out) {
    char message[128];
    snprintf(message, sizeof message, "enqueue not finished after %d ms", comm->timeout_ms);
    kolo_nccl_fail_locked(comm, KOLO_ERR_TIMEOUT, message);
    return KOLO_ERR_TIMEOUT;
  }
  if (r != ncclSuccess) {
    kolo_nccl_fail_nccl_locked(comm, r, "ncclGroupEnd");
    return comm->failure;
  }
  return KOLO_OK;
}

/* Makes a request whose event is recorded on kolo's stream now. */
static kolo_status record_request_locked(kolo_nccl_comm *comm, kolo_nccl_request **request) {
  kolo_nccl_request *req = calloc(1, sizeof *req);
  if (req == NULL) return KOLO_ERR_NO_MEMORY;
  cudaError_t e = cudaSuccess;
  if (comm->event_count > 0)
    req->event = comm->events[--comm->event_count];
  else
    e = cudaEventCreateWithFlags(&req->event, cudaEventDisableTiming);
  if (e == cudaSuccess) {
    e = cudaEventRecord(req->event, comm->stream);
    if (e != cudaSuccess) kolo_nccl_cuda_forget(cudaEventDestroy(req->event));
  }
  if (e != cudaSuccess) {
    free(req);
    kolo_nccl_fail_cuda_locked(comm, e, "cudaEventRecord");
    return comm->failure;
  }
  req->comm = comm;
  req->submit_ns = kolo_nccl_now_ns();
  comm->pending++;
  *request = req;
  return KOLO_OK;
}

/* The group, with the lock held and the plan made. */
static kolo_status submit_planned_locked(kolo_nccl_comm *comm, const kolo_nccl_op_desc *ops,
                                         issued_op *plan, size_t n, size_t scratch, void *stream,
                                         kolo_nccl_request **request) {
  kolo_status st = ensure_scratch_locked(comm, scratch);
  if (st == KOLO_OK) st = order_after_locked(comm, stream);
  if (st != KOLO_OK) return st;
  if ((st = stage_inputs_locked(comm, plan, n)) != KOLO_OK) return st;
  uint64_t start = kolo_nccl_now_ns();
  ncclResult_t issued = ncclGroupStart();
  for (size_t i = 0; i < n && (issued == ncclSuccess || issued == ncclInProgress); i++)
    issued = issue_op(comm, &plan[i].d);
  st = end_group_locked(comm, issued, start);
  if (st == KOLO_OK) st = unstage_outputs_locked(comm, ops, plan, n);
  if (st == KOLO_OK) st = record_request_locked(comm, request);
  return st;
}

kolo_status kolo_nccl_group_after(kolo_nccl_comm *comm, const kolo_nccl_op_desc *ops, size_t n,
                                  void *stream, kolo_nccl_request **request) {
  if (request != NULL) *request = NULL;
  if (comm == NULL || ops == NULL || n == 0 || request == NULL) return KOLO_ERR_INVALID_ARG;
  issued_op local[8];
  issued_op *plan = n <= 8 ? local : calloc(n, sizeof *plan);
  if (plan == NULL) return KOLO_ERR_NO_MEMORY;
  kolo_nccl_guard guard;
  kolo_status st = begin_submit(comm, &guard);
  if (st == KOLO_OK) {
    size_t scratch = 0;
    st = plan_ops_locked(comm, ops, n, plan, &scratch);
    if (st == KOLO_OK) st = submit_planned_locked(comm, ops, plan, n, scratch, stream, request);
    end_submit(comm, &guard);
  }
  if (plan != local) free(plan);
  return st;
}

kolo_status kolo_nccl_group_async(kolo_nccl_comm *comm, const kolo_nccl_op_desc *ops, size_t n,
                                  kolo_nccl_request **request) {
  return kolo_nccl_group_after(comm, ops, n, NULL, request);
}

kolo_status kolo_nccl_allreduce_async(kolo_nccl_comm *comm, const void *send, void *recv,
                                      size_t count, kolo_dtype dtype, kolo_op op,
                                      kolo_nccl_request **request) {
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_ALLREDUCE,
                         .send = send,
                         .recv = recv,
                         .count = count,
                         .dtype = dtype,
                         .op = op};
  return kolo_nccl_group_async(comm, &d, 1, request);
}

kolo_status kolo_nccl_broadcast_async(kolo_nccl_comm *comm, void *buffer, size_t count,
                                      kolo_dtype dtype, int root, kolo_nccl_request **request) {
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_BROADCAST,
                         .send = buffer,
                         .recv = buffer,
                         .count = count,
                         .dtype = dtype,
                         .root = root};
  return kolo_nccl_group_async(comm, &d, 1, request);
}

kolo_status kolo_nccl_allgather_async(kolo_nccl_comm *comm, const void *send, size_t count,
                                      void *recv, kolo_dtype dtype, kolo_nccl_request **request) {
  kolo_nccl_op_desc d = {
      .kind = KOLO_NCCL_ALLGATHER, .send = send, .recv = recv, .count = count, .dtype = dtype};
  return kolo_nccl_group_async(comm, &d, 1, request);
}

kolo_status kolo_nccl_allgatherv_async(kolo_nccl_comm *comm, const void *send, void *recv,
                                       const size_t *counts, kolo_dtype dtype,
                                       kolo_nccl_request **request) {
  kolo_nccl_op_desc d = {
      .kind = KOLO_NCCL_ALLGATHERV, .send = send, .recv = recv, .counts = counts, .dtype = dtype};
  return kolo_nccl_group_async(comm, &d, 1, request);
}

kolo_status kolo_nccl_reducescatter_async(kolo_nccl_comm *comm, const void *send, void *recv,
                                          size_t recv_count, kolo_dtype dtype, kolo_op op,
                                          kolo_nccl_request **request) {
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_REDUCESCATTER,
                         .send = send,
                         .recv = recv,
                         .count = recv_count,
                         .dtype = dtype,
                         .op = op};
  return kolo_nccl_group_async(comm, &d, 1, request);
}

kolo_status kolo_nccl_stream_wait(kolo_nccl_request *request, void *stream) {
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  cudaError_t e = cudaStreamWaitEvent((cudaStream_t)stream, request->event, 0);
  if (e == cudaSuccess) return KOLO_OK;
  kolo_nccl_cuda_forget(e);
  char message[256];
  kolo_nccl_describe_cuda(e, "stream wait on a request", message, sizeof message);
  KOLO_LOGE(COMPONENT, "%s", message);
  return kolo_nccl_status_from_cuda(e);
}

void *kolo_nccl_request_event(kolo_nccl_request *request) {
  return request != NULL ? (void *)request->event : NULL;
}

kolo_status kolo_nccl_exchange_counts(kolo_nccl_comm *comm, size_t my_count, size_t *counts) {
  if (comm == NULL || counts == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_nccl_guard guard;
  kolo_status st = begin_submit(comm, &guard);
  if (st != KOLO_OK) return st;
  /* Pinned host slot: a pageable copy would wait for the stream without a deadline. */
  comm->count_host[comm->rank] = (uint64_t)my_count;
  uint64_t *mine = comm->count_dev + comm->rank;
  kolo_nccl_request *req = NULL;
  cudaError_t e = cudaMemcpyAsync(mine, comm->count_host + comm->rank, sizeof(uint64_t),
                                  cudaMemcpyHostToDevice, comm->stream);
  if (e != cudaSuccess) {
    kolo_nccl_fail_cuda_locked(comm, e, "count exchange: copy to device");
    st = comm->failure;
    goto unlock;
  }
  uint64_t start = kolo_nccl_now_ns();
  ncclResult_t issued = ncclGroupStart();
  if (issued == ncclSuccess)
    issued = ncclAllGather(mine, comm->count_dev, 1, ncclUint64, comm->nccl, comm->stream);
  st = end_group_locked(comm, issued, start);
  if (st != KOLO_OK) goto unlock;
  e = cudaMemcpyAsync(comm->count_host, comm->count_dev, (size_t)comm->size * sizeof(uint64_t),
                      cudaMemcpyDeviceToHost, comm->stream);
  if (e != cudaSuccess) {
    kolo_nccl_fail_cuda_locked(comm, e, "count exchange: copy to host");
    st = comm->failure;
    goto unlock;
  }
  st = record_request_locked(comm, &req);
unlock:
  end_submit(comm, &guard);
  if (st != KOLO_OK) return st;
  st = kolo_nccl_wait(req);
  if (st != KOLO_OK) return st;
  for (int r = 0; r < comm->size; r++) counts[r] = (size_t)comm->count_host[r];
  return KOLO_OK;
}
