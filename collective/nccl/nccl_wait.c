/* kolo_nccl: completing requests. test never blocks: it asks NCCL for an
 * asynchronous error, then the request's event; no progress for the op
 * deadline fails the communicator. A failed or aborted communicator's requests
 * complete only once ncclCommAbort has returned, so no kernel still writes a
 * buffer its owner is about to free. wait is test in a loop with pauses. */
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "nccl_internal.h"

static void free_request(kolo_nccl_request *req) {
  kolo_nccl_comm *comm = req->comm;
  pthread_mutex_lock(&comm->mu);
  if (comm->event_count < KOLO_NCCL_EVENT_POOL && comm->state == KOLO_NCCL_STATE_READY) {
    comm->events[comm->event_count++] = req->event; /* recorded again before reuse */
  } else {
    kolo_nccl_cuda_forget(cudaEventDestroy(req->event)); /* deferred by CUDA if pending */
  }
  comm->pending--;
  pthread_mutex_unlock(&comm->mu);
  free(req);
}

/* The request of an aborting communicator: done once the abort has finished
 * (aborting inline when no abort thread could be started). */
static void poll_aborting_locked(kolo_nccl_comm *comm, int *done, kolo_status *status) {
  if (comm->state != KOLO_NCCL_STATE_ABORTED && comm->state != KOLO_NCCL_STATE_DESTROYED) {
    if (kolo_nccl_aborter_running(comm)) {
      *done = 0;
      return;
    }
    kolo_nccl_finish_abort_locked(comm);
  }
  *status = comm->failure != KOLO_OK ? comm->failure : KOLO_ERR_ABORTED;
}

/* The event is not done: fails the communicator when the stream has made no
 * progress for the op deadline, counted from the later of the request's
 * submission and the last completion seen. */
static void check_progress_locked(kolo_nccl_comm *comm, const kolo_nccl_request *req, uint64_t now,
                                  int *done, kolo_status *status) {
  uint64_t since = req->submit_ns > comm->progress_ns ? req->submit_ns : comm->progress_ns;
  if (now - since <= (uint64_t)comm->op_timeout_ms * 1000000ull) {
    *done = 0;
    return;
  }
  char message[160];
  snprintf(message, sizeof message,
           "no progress for %d ms (a peer is gone or stuck; abort and re-form)",
           comm->op_timeout_ms);
  kolo_nccl_fail_locked(comm, KOLO_ERR_TIMEOUT, message);
  poll_aborting_locked(comm, done, status);
}

/* One poll of a request; sets *done and *status. Takes the comm lock. */
static void poll_request(kolo_nccl_request *req, int *done, kolo_status *status) {
  kolo_nccl_comm *comm = req->comm;
  *done = 1;
  pthread_mutex_lock(&comm->mu);
  if (atomic_load(&comm->abort_requested) || comm->state != KOLO_NCCL_STATE_READY) {
    poll_aborting_locked(comm, done, status);
    goto out;
  }
  ncclResult_t async = ncclSuccess;
  ncclResult_t q = ncclCommGetAsyncError(comm->nccl, &async);
  ncclResult_t r = q != ncclSuccess ? q : async;
  if (r != ncclSuccess && r != ncclInProgress) {
    kolo_nccl_fail_nccl_locked(comm, r, "ncclCommGetAsyncError");
    poll_aborting_locked(comm, done, status);
    goto out;
  }
  cudaError_t e = cudaEventQuery(req->event);
  uint64_t now = kolo_nccl_now_ns();
  if (e == cudaSuccess) {
    comm->progress_ns = now;
    *status = KOLO_OK;
  } else if (e == cudaErrorNotReady) { /* not an error: the last-error slot is untouched */
    check_progress_locked(comm, req, now, done, status);
  } else {
    kolo_nccl_fail_cuda_locked(comm, e, "cudaEventQuery");
    poll_aborting_locked(comm, done, status);
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
  uint64_t start = kolo_nccl_now_ns();
  int done = 0;
  kolo_status status = KOLO_OK;
  for (;;) {
    poll_request(request, &done, &status);
    if (done) break;
    kolo_nccl_pause(start); /* the deadline lives in poll_request */
  }
  free_request(request);
  return status;
}
