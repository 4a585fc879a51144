/* CUDA mode at the communicator's face: kolo_comm_use_cuda (this rank's check
 * and NCCL id from the device path, the ring's agreement over two host
 * collectives on the internal blocking path, then the device path entered),
 * and the request-level device calls kolo_stream_wait and
 * kolo_request_cuda_event (a negotiated device operation is waited for on the
 * host until the engine has submitted it). Built without CUDA/NCCL, CUDA mode is
 * refused with KOLO_ERR_UNSUPPORTED. */
#include <stdint.h>
#include <string.h>

#include "collective/face.h"
#include "common/log.h"

#ifdef KOLO_HAVE_NCCL

/* The ring agrees: every rank gets the highest status any rank had (so all
 * enter CUDA mode or none does), and rank 0's NCCL id unless the ring spec
 * carried one. Host collectives, at the point every rank calls this, so they
 * never interleave with the caller's other host collectives (which a first
 * device operation on another thread could not promise). */
static kolo_status agree(kolo_comm *comm, kolo_status local, uint8_t id[KOLO_NCCL_ID_BYTES]) {
  int32_t worst = (int32_t)local;
  if (comm->net.size > 1) {
    kolo_request max = {.comm = comm,
                        .kind = KOLO_REQUEST_ALLREDUCE,
                        .send = &worst,
                        .recv = &worst,
                        .count = 1,
                        .dtype = KOLO_INT32,
                        .op = KOLO_MAX};
    kolo_status shared = kolo_queue_run_blocking(comm, &max);
    if (shared != KOLO_OK) return shared;
  }
  if (worst != KOLO_OK) {
    if (local == KOLO_OK)
      KOLO_LOGE("kolo", "rank %d: another rank could not enter CUDA mode (%s)", comm->net.rank,
                kolo_strerror((kolo_status)worst));
    return (kolo_status)worst;
  }
  if (comm->net.size == 1 || comm->has_nccl_id) return KOLO_OK;
  kolo_request share = {.comm = comm,
                        .kind = KOLO_REQUEST_BROADCAST,
                        .send = id,
                        .recv = id,
                        .count = KOLO_NCCL_ID_BYTES,
                        .dtype = KOLO_UINT8,
                        .root = 0};
  return kolo_queue_run_blocking(comm, &share);
}

kolo_status kolo_comm_use_cuda(kolo_comm *comm, int device) {
  if (comm == NULL) return KOLO_ERR_INVALID_ARG;
  int chosen = -1;
  uint8_t id[KOLO_NCCL_ID_BYTES];
  kolo_status status = agree(comm, kolo_device_prepare(comm, device, &chosen, id), id);
  if (status != KOLO_OK) return status;
  return kolo_device_enter(comm, chosen, id);
}

/* A named device operation (engine.h) reaches NCCL only after negotiation:
 * waits on the host for that (not for NCCL); its handle, or NULL with *status
 * saying why there is none (a mismatch, a failure). */
static void *negotiated_handle(kolo_request *request, kolo_status *status) {
  kolo_comm *comm = request->comm;
  pthread_mutex_lock(&comm->queue.mutex);
  kolo_request_wait_done_locked(comm, request);
  void *handle = request->device_request;
  *status = request->status;
  pthread_mutex_unlock(&comm->queue.mutex);
  return handle;
}

kolo_status kolo_stream_wait(kolo_request *request, void *cuda_stream) {
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  void *handle = request->device_request;
  kolo_status status = KOLO_ERR_INVALID_ARG;
  if (request->negotiated && request->on_device) handle = negotiated_handle(request, &status);
  if (handle == NULL) return status != KOLO_OK ? status : KOLO_ERR_INVALID_ARG;
  return kolo_device_stream_wait(handle, cuda_stream);
}

void *kolo_request_cuda_event(kolo_request *request) {
  if (request == NULL) return NULL;
  void *handle = request->device_request;
  if (request->negotiated) {
    pthread_mutex_lock(&request->comm->queue.mutex);
    handle = request->done ? request->device_request : NULL; /* NULL until submitted */
    pthread_mutex_unlock(&request->comm->queue.mutex);
  }
  return handle != NULL ? kolo_device_event(handle) : NULL;
}

#else /* built without CUDA/NCCL */

kolo_status kolo_comm_use_cuda(kolo_comm *comm, int device) {
  (void)device;
  if (comm == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_LOGE("kolo", "CUDA buffers asked for, but this libkolo was built without CUDA/NCCL");
  return KOLO_ERR_UNSUPPORTED;
}

kolo_status kolo_stream_wait(kolo_request *request, void *cuda_stream) {
  (void)request, (void)cuda_stream;
  return KOLO_ERR_INVALID_ARG; /* no request runs on a device in this build */
}

void *kolo_request_cuda_event(kolo_request *request) {
  (void)request;
  return NULL;
}

#endif
