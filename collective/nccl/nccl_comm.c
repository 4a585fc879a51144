/* kolo_nccl: one NCCL communicator per epoch (created non-blocking with a
 * deadline), kolo's CUDA stream, grouped collectives completed by CUDA events,
 * and test/wait that turn a dead peer into an error instead of a hang. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "nccl_internal.h"

#define COMPONENT "nccl"

struct kolo_nccl_comm {
  pthread_mutex_t mu;       /* guards everything below and every NCCL call on `nccl` */
  atomic_int abort_requested; /* set first by kolo_nccl_comm_abort, read by poll loops */
  kolo_nccl_state state;
  kolo_status failure;      /* first error; KOLO_OK while none */
  char error[512];          /* its description, library message included */
  int rank, size, device, timeout_ms;
  ncclComm_t nccl;          /* NULL once aborted or destroyed */
  cudaStream_t stream;      /* kolo's stream; every collective runs on it */
  int have_stream;
  uint64_t progress_ns;     /* last time the stream was seen to make progress */
  int pending;              /* requests handed out and not yet freed */
  uint64_t *count_dev;      /* size slots: scratch for kolo_nccl_exchange_counts */
  uint64_t *count_host;     /* the same, pinned host memory */
};

struct kolo_nccl_request {
  kolo_nccl_comm *comm;
  cudaEvent_t event;
  uint64_t submit_ns;
};

/* Moves the state machine; an event the table refuses is a kolo bug, logged. */
static void transition_locked(kolo_nccl_comm *comm, kolo_nccl_event event) {
  kolo_nccl_state next;
  if (kolo_nccl_state_next(comm->state, event, &next) != KOLO_OK) {
    KOLO_LOGE(COMPONENT, "internal: event %d refused in state %s", (int)event,
              kolo_nccl_state_name(comm->state));
    return;
  }
  comm->state = next;
}

/* Records the first failure (status + text), moves to FAILED and logs once. */
static void fail_locked(kolo_nccl_comm *comm, kolo_status status, const char *message) {
  if (comm->failure == KOLO_OK) {
    comm->failure = status;
    snprintf(comm->error, sizeof comm->error, "%s", message);
    KOLO_LOGE(COMPONENT, "rank %d/%d: %s: %s", comm->rank, comm->size, kolo_strerror(status),
              message);
  }
  transition_locked(comm, KOLO_NCCL_EV_ERROR);
}

static void fail_nccl_locked(kolo_nccl_comm *comm, ncclResult_t r, const char *what) {
  char message[512];
  kolo_nccl_describe_nccl(r, what, ncclGetLastError(comm->nccl), message, sizeof message);
  fail_locked(comm, kolo_nccl_status_from_nccl(r), message);
}

static void fail_cuda_locked(kolo_nccl_comm *comm, cudaError_t e, const char *what) {
  char message[512];
  (void)cudaGetLastError();
  kolo_nccl_describe_cuda(e, what, message, sizeof message);
  fail_locked(comm, kolo_nccl_status_from_cuda(e), message);
}

/* ncclCommAbort exactly once; the handle is gone afterwards. */
static void abort_nccl_locked(kolo_nccl_comm *comm) {
  if (comm->nccl != NULL) {
    ncclResult_t r = ncclCommAbort(comm->nccl);
    if (r != ncclSuccess && r != ncclInProgress)
      KOLO_LOGW(COMPONENT, "ncclCommAbort: %s", ncclGetErrorString(r));
    comm->nccl = NULL;
  }
}

/* Waits while NCCL reports ncclInProgress on this communicator (non-blocking
 * init, group end, finalize), with the comm's deadline from start_ns. The lock
 * stays held (NCCL allows no other call meanwhile) but an abort request ends
 * the wait. Returns the final ncclResult_t, or sets *timed_out / *aborted. */
static ncclResult_t settle_locked(kolo_nccl_comm *comm, ncclResult_t r, uint64_t start_ns,
                                  int *timed_out, int *aborted) {
  uint64_t backoff = 0;
  uint64_t deadline = start_ns + (uint64_t)comm->timeout_ms * 1000000ull;
  *timed_out = 0;
  *aborted = 0;
  while (r == ncclInProgress) {
    if (atomic_load(&comm->abort_requested)) {
      *aborted = 1;
      return r;
    }
    if (kolo_nccl_now_ns() > deadline) {
      *timed_out = 1;
      return r;
    }
    ncclResult_t async = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(comm->nccl, &async);
    r = q != ncclSuccess ? q : async;
    if (r == ncclInProgress) kolo_nccl_backoff_sleep(&backoff);
  }
  return r;
}

static void free_comm_resources(kolo_nccl_comm *comm) {
  if (comm->device >= 0) (void)cudaSetDevice(comm->device);
  if (comm->count_dev != NULL) (void)cudaFree(comm->count_dev);
  if (comm->count_host != NULL) (void)cudaFreeHost(comm->count_host);
  if (comm->have_stream) (void)cudaStreamDestroy(comm->stream);
  (void)cudaGetLastError();
  pthread_mutex_destroy(&comm->mu);
  free(comm);
}

kolo_status kolo_nccl_comm_create(const uint8_t id[KOLO_NCCL_ID_BYTES], int rank, int size,
                                  int device, int timeout_ms, kolo_nccl_comm **out) {
  if (out == NULL) return KOLO_ERR_INVALID_ARG;
  *out = NULL;
  if (id == NULL || size < 1 || rank < 0 || rank >= size) return KOLO_ERR_INVALID_ARG;
  char message[512];
  int ndev = 0;
  kolo_status st = kolo_nccl_device_count(&ndev, message, sizeof message);
  if (st != KOLO_OK) {
    KOLO_LOGE(COMPONENT, "communicator rank %d/%d: %s: %s", rank, size, kolo_strerror(st),
              message);
    return st;
  }
  if (device < 0) device = rank % ndev;
  st = kolo_nccl_use_device(device, message, sizeof message);
  if (st != KOLO_OK) {
    KOLO_LOGE(COMPONENT, "communicator rank %d/%d: %s: %s", rank, size, kolo_strerror(st),
              message);
    return st;
  }

  kolo_nccl_comm *comm = calloc(1, sizeof *comm);
  if (comm == NULL) return KOLO_ERR_NO_MEMORY;
  pthread_mutex_init(&comm->mu, NULL);
  atomic_init(&comm->abort_requested, 0);
  comm->state = KOLO_NCCL_STATE_NEW;
  comm->rank = rank;
  comm->size = size;
  comm->device = device;
  comm->timeout_ms = timeout_ms > 0 ? timeout_ms : KOLO_DEFAULT_TIMEOUT_MS;

  cudaError_t e = cudaStreamCreate(&comm->stream);
  if (e != cudaSuccess) goto cuda_fail;
  comm->have_stream = 1;
  e = cudaMalloc((void **)&comm->count_dev, (size_t)size * sizeof(uint64_t));
  if (e != cudaSuccess) goto cuda_fail;
  e = cudaMallocHost((void **)&comm->count_host, (size_t)size * sizeof(uint64_t));
  if (e != cudaSuccess) goto cuda_fail;

  ncclUniqueId uid;
  memcpy(uid.internal, id, KOLO_NCCL_ID_BYTES);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0; /* we poll with our own deadline instead of blocking in NCCL */
  uint64_t start = kolo_nccl_now_ns();
  pthread_mutex_lock(&comm->mu);
  ncclResult_t r = ncclCommInitRankConfig(&comm->nccl, size, uid, rank, &config);
  transition_locked(comm, KOLO_NCCL_EV_INIT_START);
  int timed_out = 0, aborted = 0;
  if (r == ncclSuccess || r == ncclInProgress) {
    if (r == ncclSuccess) {
      ncclResult_t async = ncclSuccess;
      ncclResult_t q = ncclCommGetAsyncError(comm->nccl, &async);
      r = q != ncclSuccess ? q : async;
    }
    r = settle_locked(comm, r, start, &timed_out, &aborted);
  }
  if (timed_out) {
    snprintf(message, sizeof message, "ncclCommInitRankConfig: not ready after %d ms",
             comm->timeout_ms);
    fail_locked(comm, KOLO_ERR_TIMEOUT, message);
  } else if (r != ncclSuccess) {
    fail_nccl_locked(comm, r, "ncclCommInitRankConfig");
  } else {
    transition_locked(comm, KOLO_NCCL_EV_INIT_DONE);
    comm->progress_ns = kolo_nccl_now_ns();
  }
  if (comm->state != KOLO_NCCL_STATE_READY) {
    st = comm->failure;
    abort_nccl_locked(comm);
    transition_locked(comm, KOLO_NCCL_EV_ABORT);
    transition_locked(comm, KOLO_NCCL_EV_DESTROY);
    pthread_mutex_unlock(&comm->mu);
    free_comm_resources(comm);
    return st;
  }
  pthread_mutex_unlock(&comm->mu);
  KOLO_LOGD(COMPONENT, "communicator rank %d/%d ready on device %d", rank, size, device);
  *out = comm;
  return KOLO_OK;

cuda_fail:
  (void)cudaGetLastError();
  kolo_nccl_describe_cuda(e, "communicator setup", message, sizeof message);
  KOLO_LOGE(COMPONENT, "rank %d/%d: %s", rank, size, message);
  st = kolo_nccl_status_from_cuda(e);
  free_comm_resources(comm);
  return st;
}

kolo_status kolo_nccl_comm_create_from_spec(const kolo_ring_spec *spec, int device,
                                            kolo_nccl_comm **out) {
  if (out == NULL) return KOLO_ERR_INVALID_ARG;
  *out = NULL;
  if (spec == NULL || spec->nccl_id == NULL) return KOLO_ERR_INVALID_ARG;
  if (device < 0) {
    int ndev = 0;
    char message[256];
    kolo_status st = kolo_nccl_device_count(&ndev, message, sizeof message);
    if (st != KOLO_OK) {
      KOLO_LOGE(COMPONENT, "communicator from ring spec: %s: %s", kolo_strerror(st), message);
      return st;
    }
    device = (spec->local_rank > 0 ? spec->local_rank : 0) % ndev;
  }
  return kolo_nccl_comm_create(spec->nccl_id, spec->rank, spec->size, device, spec->timeout_ms,
                               out);
}

int kolo_nccl_comm_rank(const kolo_nccl_comm *comm) { return comm ? comm->rank : -1; }
int kolo_nccl_comm_size(const kolo_nccl_comm *comm) { return comm ? comm->size : 0; }
int kolo_nccl_comm_device(const kolo_nccl_comm *comm) { return comm ? comm->device : -1; }

kolo_nccl_state kolo_nccl_comm_state(kolo_nccl_comm *comm) {
  if (comm == NULL) return KOLO_NCCL_STATE_DESTROYED;
  pthread_mutex_lock(&comm->mu);
  kolo_nccl_state s = comm->state;
  pthread_mutex_unlock(&comm->mu);
  return s;
}

kolo_status kolo_nccl_comm_error(kolo_nccl_comm *comm, char *buffer, size_t length) {
  if (comm == NULL) return KOLO_ERR_INVALID_ARG;
  pthread_mutex_lock(&comm->mu);
  kolo_status st = comm->failure;
  if (buffer != NULL && length > 0) snprintf(buffer, length, "%s", comm->error);
  pthread_mutex_unlock(&comm->mu);
  return st;
}

void kolo_nccl_comm_abort(kolo_nccl_comm *comm) {
  if (comm == NULL) return;
  atomic_store(&comm->abort_requested, 1); /* ends any settle loop holding the lock */
  pthread_mutex_lock(&comm->mu);
  if (comm->state == KOLO_NCCL_STATE_INITIALIZING || comm->state == KOLO_NCCL_STATE_READY ||
      comm->state == KOLO_NCCL_STATE_FAILED) {
    (void)cudaSetDevice(comm->device);
    abort_nccl_locked(comm);
    transition_locked(comm, KOLO_NCCL_EV_ABORT);
    KOLO_LOGI(COMPONENT, "rank %d/%d: communicator aborted", comm->rank, comm->size);
  }
  pthread_mutex_unlock(&comm->mu);
}

void kolo_nccl_comm_destroy(kolo_nccl_comm *comm) {
  if (comm == NULL) return;
  pthread_mutex_lock(&comm->mu);
  (void)cudaSetDevice(comm->device);
  if (comm->state == KOLO_NCCL_STATE_READY && comm->pending == 0 &&
      !atomic_load(&comm->abort_requested)) {
    /* Clean path: flush, wait (bounded) for quiescence, then free locally. */
    uint64_t start = kolo_nccl_now_ns();
    int timed_out = 0, aborted = 0;
    ncclResult_t r = ncclCommFinalize(comm->nccl);
    if (r == ncclSuccess || r == ncclInProgress) {
      /* Finalize completes asynchronously: its async state says when. */
      ncclResult_t async = ncclSuccess;
      ncclResult_t q = ncclCommGetAsyncError(comm->nccl, &async);
      r = q != ncclSuccess ? q : async;
      r = settle_locked(comm, r, start, &timed_out, &aborted);
    }
    if (r == ncclSuccess && !timed_out && !aborted) {
      (void)ncclCommDestroy(comm->nccl);
      comm->nccl = NULL;
    } else {
      KOLO_LOGW(COMPONENT, "rank %d/%d: finalize did not complete; aborting", comm->rank,
                comm->size);
      abort_nccl_locked(comm);
      transition_locked(comm, KOLO_NCCL_EV_ABORT);
    }
  } else if (comm->state != KOLO_NCCL_STATE_ABORTED) {
    abort_nccl_locked(comm);
    transition_locked(comm, KOLO_NCCL_EV_ABORT);
  }
  transition_locked(comm, KOLO_NCCL_EV_DESTROY);
  if (comm->pending > 0)
    KOLO_LOGW(COMPONENT, "rank %d/%d: destroyed with %d requests outstanding", comm->rank,
              comm->size, comm->pending);
  pthread_mutex_unlock(&comm->mu);
  free_comm_resources(comm);
}

/* ---- operations ---- */

/* Pointer check for kolo_nccl_check_op: device memory on `device`, or managed. */
static int usable_device_memory(const void *ptr, int device) {
  struct cudaPointerAttributes attr;
  memset(&attr, 0, sizeof attr);
  cudaError_t e = cudaPointerGetAttributes(&attr, ptr);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return attr.type == cudaMemoryTypeManaged ||
         (attr.type == cudaMemoryTypeDevice && attr.device == device);
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
          ncclResult_t res = ncclBroadcast(src, base + offset * es, c, dt, r, comm->nccl,
                                           comm->stream);
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
  r = settle_locked(comm, r, start, &timed_out, &aborted);
  if (aborted) return KOLO_ERR_ABORTED; /* the abort itself runs once we unlock */
  if (timed_out) {
    char message[128];
    snprintf(message, sizeof message, "enqueue not finished after %d ms", comm->timeout_ms);
    fail_locked(comm, KOLO_ERR_TIMEOUT, message);
    return KOLO_ERR_TIMEOUT;
  }
  if (r != ncclSuccess) {
    fail_nccl_locked(comm, r, "ncclGroupEnd");
    return comm->failure;
  }
  return KOLO_OK;
}

/* Makes a request whose event is recorded on kolo's stream now. */
static kolo_status record_request_locked(kolo_nccl_comm *comm, kolo_nccl_request **request) {
  kolo_nccl_request *req = calloc(1, sizeof *req);
  if (req == NULL) return KOLO_ERR_NO_MEMORY;
  cudaError_t e = cudaEventCreateWithFlags(&req->event, cudaEventDisableTiming);
  if (e == cudaSuccess) {
    e = cudaEventRecord(req->event, comm->stream);
    if (e != cudaSuccess) (void)cudaEventDestroy(req->event);
  }
  if (e != cudaSuccess) {
    free(req);
    fail_cuda_locked(comm, e, "cudaEventRecord");
    return comm->failure;
  }
  req->comm = comm;
  req->submit_ns = kolo_nccl_now_ns();
  comm->pending++;
  *request = req;
  return KOLO_OK;
}

/* Common entry: state check under the lock, device current. Returns with the
 * lock held on KOLO_OK only. */
static kolo_status begin_submit(kolo_nccl_comm *comm) {
  pthread_mutex_lock(&comm->mu);
  kolo_status st = kolo_nccl_state_submit_status(comm->state, comm->failure);
  if (st == KOLO_OK && atomic_load(&comm->abort_requested)) st = KOLO_ERR_ABORTED;
  if (st == KOLO_OK) {
    cudaError_t e = cudaSetDevice(comm->device);
    if (e != cudaSuccess) {
      fail_cuda_locked(comm, e, "cudaSetDevice");
      st = comm->failure;
    }
  }
  if (st != KOLO_OK) pthread_mutex_unlock(&comm->mu);
  return st;
}

kolo_status kolo_nccl_group_async(kolo_nccl_comm *comm, const kolo_nccl_op_desc *ops, size_t n,
                                  kolo_nccl_request **request) {
  if (request != NULL) *request = NULL;
  if (comm == NULL || ops == NULL || n == 0 || request == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_status st = begin_submit(comm);
  if (st != KOLO_OK) return st;
  char message[256];
  for (size_t i = 0; i < n; i++) {
    st = kolo_nccl_check_op(comm->rank, comm->size, comm->device, &ops[i], usable_device_memory,
                            message, sizeof message);
    if (st != KOLO_OK) {
      /* Bad input: refused before anything is enqueued; the comm stays READY. */
      KOLO_LOGE(COMPONENT, "rank %d/%d: operation %zu of %zu: %s", comm->rank, comm->size, i, n,
                message);
      pthread_mutex_unlock(&comm->mu);
      return st;
    }
  }
  uint64_t start = kolo_nccl_now_ns();
  ncclResult_t issued = ncclGroupStart();
  for (size_t i = 0; i < n && (issued == ncclSuccess || issued == ncclInProgress); i++)
    issued = issue_op(comm, &ops[i]);
  st = end_group_locked(comm, issued, start);
  if (st == KOLO_OK) st = record_request_locked(comm, request);
  pthread_mutex_unlock(&comm->mu);
  return st;
}

kolo_status kolo_nccl_allreduce_async(kolo_nccl_comm *comm, const void *send, void *recv,
                                      size_t count, kolo_dtype dtype, kolo_op op,
                                      kolo_nccl_request **request) {
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_ALLREDUCE, .send = send, .recv = recv,
                         .count = count, .dtype = dtype, .op = op};
  return kolo_nccl_group_async(comm, &d, 1, request);
}

kolo_status kolo_nccl_broadcast_async(kolo_nccl_comm *comm, void *buffer, size_t count,
                                      kolo_dtype dtype, int root, kolo_nccl_request **request) {
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_BROADCAST, .send = buffer, .recv = buffer,
                         .count = count, .dtype = dtype, .root = root};
  return kolo_nccl_group_async(comm, &d, 1, request);
}

kolo_status kolo_nccl_allgather_async(kolo_nccl_comm *comm, const void *send, size_t count,
                                      void *recv, kolo_dtype dtype, kolo_nccl_request **request) {
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_ALLGATHER, .send = send, .recv = recv,
                         .count = count, .dtype = dtype};
  return kolo_nccl_group_async(comm, &d, 1, request);
}

kolo_status kolo_nccl_allgatherv_async(kolo_nccl_comm *comm, const void *send, void *recv,
                                       const size_t *counts, kolo_dtype dtype,
                                       kolo_nccl_request **request) {
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_ALLGATHERV, .send = send, .recv = recv,
                         .counts = counts, .dtype = dtype};
  return kolo_nccl_group_async(comm, &d, 1, request);
}

kolo_status kolo_nccl_reducescatter_async(kolo_nccl_comm *comm, const void *send, void *recv,
                                          size_t recv_count, kolo_dtype dtype, kolo_op op,
                                          kolo_nccl_request **request) {
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_REDUCESCATTER, .send = send, .recv = recv,
                         .count = recv_count, .dtype = dtype, .op = op};
  return kolo_nccl_group_async(comm, &d, 1, request);
}

kolo_status kolo_nccl_exchange_counts(kolo_nccl_comm *comm, size_t my_count, size_t *counts) {
  if (comm == NULL || counts == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_status st = begin_submit(comm);
  if (st != KOLO_OK) return st;
  /* Pinned host slot: a pageable copy would wait for the stream without a deadline. */
  comm->count_host[comm->rank] = (uint64_t)my_count;
  uint64_t *mine = comm->count_dev + comm->rank;
  kolo_nccl_request *req = NULL;
  cudaError_t e = cudaMemcpyAsync(mine, comm->count_host + comm->rank, sizeof(uint64_t),
                                  cudaMemcpyHostToDevice, comm->stream);
  if (e != cudaSuccess) {
    fail_cuda_locked(comm, e, "count exchange: copy to device");
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
    fail_cuda_locked(comm, e, "count exchange: copy to host");
    st = comm->failure;
    goto unlock;
  }
  st = record_request_locked(comm, &req);
unlock:
  pthread_mutex_unlock(&comm->mu);
  if (st != KOLO_OK) return st;
  st = kolo_nccl_wait(req);
  if (st != KOLO_OK) return st;
  for (int r = 0; r < comm->size; r++) counts[r] = (size_t)comm->count_host[r];
  return KOLO_OK;
}

/* ---- completion ---- */

static void free_request(kolo_nccl_request *req) {
  kolo_nccl_comm *comm = req->comm;
  pthread_mutex_lock(&comm->mu);
  (void)cudaEventDestroy(req->event); /* deferred by CUDA if still pending */
  (void)cudaGetLastError();
  comm->pending--;
  pthread_mutex_unlock(&comm->mu);
  free(req);
}

/* One poll of a request; sets *done and *status. Takes the comm lock. */
static void poll_request(kolo_nccl_request *req, int *done, kolo_status *status) {
  kolo_nccl_comm *comm = req->comm;
  *done = 1;
  pthread_mutex_lock(&comm->mu);
  if (comm->state == KOLO_NCCL_STATE_ABORTED || atomic_load(&comm->abort_requested)) {
    *status = comm->failure != KOLO_OK ? comm->failure : KOLO_ERR_ABORTED;
    goto out;
  }
  if (comm->state != KOLO_NCCL_STATE_READY) {
    *status = kolo_nccl_state_submit_status(comm->state, comm->failure);
    goto out;
  }
  ncclResult_t async = ncclSuccess;
  ncclResult_t q = ncclCommGetAsyncError(comm->nccl, &async);
  ncclResult_t r = q != ncclSuccess ? q : async;
  if (r != ncclSuccess && r != ncclInProgress) {
    fail_nccl_locked(comm, r, "ncclCommGetAsyncError");
    *status = comm->failure;
    goto out;
  }
  cudaError_t e = cudaEventQuery(req->event);
  uint64_t now = kolo_nccl_now_ns();
  if (e == cudaSuccess) {
    comm->progress_ns = now;
    *status = KOLO_OK;
  } else if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    uint64_t since = req->submit_ns > comm->progress_ns ? req->submit_ns : comm->progress_ns;
    if (now - since > (uint64_t)comm->timeout_ms * 1000000ull) {
      char message[160];
      snprintf(message, sizeof message,
               "no progress for %d ms (a peer is gone or stuck; abort and re-form)",
               comm->timeout_ms);
      fail_locked(comm, KOLO_ERR_TIMEOUT, message);
      *status = KOLO_ERR_TIMEOUT;
    } else {
      *done = 0;
    }
  } else {
    fail_cuda_locked(comm, e, "cudaEventQuery");
    *status = comm->failure;
  }
out:
  pthread_mutex_unlock(&comm->mu);
}

kolo_status kolo_nccl_test(kolo_nccl_request *request, int *done, kolo_status *status) {
  if (request == NULL || done == NULL || status == NULL) return KOLO_ERR_INVALID_ARG;
  poll_request(request, done, status);
  if (*done) free_request(request);
  return KOLO_OK;
}

kolo_status kolo_nccl_wait(kolo_nccl_request *request) {
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  uint64_t backoff = 0;
  int done = 0;
  kolo_status status = KOLO_OK;
  for (;;) {
    poll_request(request, &done, &status);
    if (done) break;
    kolo_nccl_backoff_sleep(&backoff); /* the deadline lives in poll_request */
  }
  free_request(request);
  return status;
}
