/* Device-buffer dispatch: when a communicator is in CUDA mode
 * (kolo_comm_use_cuda), collectives on device memory go to the NCCL data plane
 * (collective/nccl/) instead of the TCP ring. The NCCL communicator of an epoch
 * is created at the first device operation, from the ring spec's NCCL id or, when
 * the spec has none, from an id that rank 0 makes and broadcasts over the ring.
 * Built without CUDA/NCCL, CUDA mode is refused with KOLO_ERR_UNSUPPORTED. */
#include <string.h>

#include "collective/internal.h"
#include "common/log.h"

#ifdef KOLO_HAVE_NCCL
#include "kolo_nccl.h"

kolo_status kolo_comm_use_cuda(kolo_comm *comm, int device) {
  if (comm == NULL) return KOLO_ERR_INVALID_ARG;
  int count = 0;
  char reason[160];
  kolo_status status = kolo_nccl_device_count(&count, reason, sizeof reason);
  if (status != KOLO_OK) {
    KOLO_LOGE("kolo", "rank %d: CUDA buffers asked for, but %s (%s)", comm->rank,
              kolo_strerror(status), reason);
    return status;
  }
  if (device >= count) {
    KOLO_LOGE("kolo", "rank %d: CUDA device %d asked for, %d present", comm->rank, device, count);
    return KOLO_ERR_NO_DEVICE;
  }
  comm->cuda_device = device;
  comm->cuda_enabled = 1;
  return KOLO_OK;
}

int kolo_device_wanted(const kolo_comm *comm, const void *a, const void *b) {
  if (!comm->cuda_enabled) return 0;
  return kolo_nccl_is_device_pointer(a) || kolo_nccl_is_device_pointer(b);
}

static kolo_status ensure_nccl(kolo_comm *comm) {
  if (comm->nccl != NULL) return KOLO_OK;
  if (atomic_load(&comm->failed)) return comm->error;
  uint8_t id[KOLO_NCCL_ID_BYTES];
  kolo_status status = KOLO_OK;
  if (comm->has_nccl_id) {
    memcpy(id, comm->nccl_id, sizeof id);
  } else {
    /* the id must be made in rank 0's own process: NCCL's bootstrap lives there */
    memset(id, 0, sizeof id);
    if (comm->rank == 0) status = kolo_nccl_id_create(id);
    uint8_t ok = status == KOLO_OK;
    kolo_status shared = kolo_allreduce(comm, &ok, &ok, 1, KOLO_UINT8, KOLO_MIN);
    if (shared != KOLO_OK) return shared;
    if (!ok) return status != KOLO_OK ? status : KOLO_ERR_NCCL;
    status = kolo_broadcast(comm, id, sizeof id, KOLO_UINT8, 0);
    if (status != KOLO_OK) return status;
  }
  kolo_nccl_comm *nccl = NULL;
  status = kolo_nccl_comm_create(id, comm->rank, comm->size, comm->cuda_device, comm->timeout_ms,
                                 &nccl);
  if (status != KOLO_OK) return status;
  comm->nccl = nccl;
  return KOLO_OK;
}

kolo_status kolo_device_submit(kolo_comm *comm, const kolo_request *request,
                               void **nccl_request) {
  kolo_status status = ensure_nccl(comm);
  if (status != KOLO_OK) return status;
  kolo_nccl_request *handle = NULL;
  switch (request->kind) {
    case KOLO_REQUEST_ALLREDUCE:
      status = kolo_nccl_allreduce_async(comm->nccl, request->send, request->recv, request->count,
                                         request->dtype, request->op, &handle);
      break;
    case KOLO_REQUEST_BROADCAST:
      status = kolo_nccl_broadcast_async(comm->nccl, request->recv, request->count,
                                         request->dtype, request->root, &handle);
      break;
    case KOLO_REQUEST_REDUCESCATTER:
      status = kolo_nccl_reducescatter_async(comm->nccl, request->send, request->recv,
                                             request->count, request->dtype, request->op, &handle);
      break;
    case KOLO_REQUEST_ALLGATHER: {
      size_t total = 0;
      status = kolo_nccl_exchange_counts(comm->nccl, request->count, comm->block_bytes);
      if (status != KOLO_OK) break;
      for (int r = 0; r < comm->size; r++) {
        total += comm->block_bytes[r];
        if (request->recv_counts != NULL) request->recv_counts[r] = comm->block_bytes[r];
      }
      if (total > request->recv_capacity) {
        status = KOLO_ERR_TOO_LARGE;
        break;
      }
      status = kolo_nccl_allgatherv_async(comm->nccl, request->send, request->recv,
                                          comm->block_bytes, request->dtype, &handle);
      break;
    }
    default:
      status = KOLO_ERR_UNSUPPORTED;
  }
  if (status == KOLO_OK) *nccl_request = handle;
  return status;
}

kolo_status kolo_device_wait(kolo_comm *comm, void *nccl_request) {
  (void)comm;
  return kolo_nccl_wait(nccl_request);
}

kolo_status kolo_device_test(kolo_comm *comm, void *nccl_request, int *done, kolo_status *status) {
  (void)comm;
  return kolo_nccl_test(nccl_request, done, status);
}

void kolo_device_abort(kolo_comm *comm) {
  if (comm->nccl != NULL) kolo_nccl_comm_abort(comm->nccl);
}

void kolo_device_destroy(kolo_comm *comm) {
  kolo_nccl_comm_destroy(comm->nccl);
  comm->nccl = NULL;
}

#else /* built without CUDA/NCCL */

kolo_status kolo_comm_use_cuda(kolo_comm *comm, int device) {
  (void)device;
  if (comm == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_LOGE("kolo", "CUDA buffers asked for, but this libkolo was built without CUDA/NCCL");
  return KOLO_ERR_UNSUPPORTED;
}

int kolo_device_wanted(const kolo_comm *comm, const void *a, const void *b) {
  (void)comm, (void)a, (void)b;
  return 0;
}

kolo_status kolo_device_submit(kolo_comm *comm, const kolo_request *request, void **nccl_request) {
  (void)comm, (void)request, (void)nccl_request;
  return KOLO_ERR_UNSUPPORTED;
}

kolo_status kolo_device_wait(kolo_comm *comm, void *nccl_request) {
  (void)comm, (void)nccl_request;
  return KOLO_ERR_UNSUPPORTED;
}

kolo_status kolo_device_test(kolo_comm *comm, void *nccl_request, int *done, kolo_status *status) {
  (void)comm, (void)nccl_request;
  *done = 1;
  *status = KOLO_ERR_UNSUPPORTED;
  return KOLO_OK;
}

void kolo_device_abort(kolo_comm *comm) { (void)comm; }
void kolo_device_destroy(kolo_comm *comm) { (void)comm; }

#endif
