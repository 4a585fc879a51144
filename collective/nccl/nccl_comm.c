/* kolo_nccl: the life of one NCCL communicator per epoch: non-blocking creation
 * with a deadline (and a cancel hook), kolo's non-blocking CUDA stream, failure
 * recording, the abort that runs ncclCommAbort on a thread of its own so that
 * kolo_nccl_comm_abort never blocks, and finalize-or-abort destruction. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "nccl_internal.h"

#define COMPONENT "nccl"

void kolo_nccl_transition_locked(kolo_nccl_comm *comm, kolo_nccl_event event) {
  kolo_nccl_state next;
  if (kolo_nccl_state_next(comm->state, event, &next) != KOLO_OK) {
    KOLO_LOGE(COMPONENT, "internal: event %d refused in state %s", (int)event,
              kolo_nccl_state_name(comm->state));
    return;
  }
  if (next != comm->state) pthread_cond_broadcast(&comm->changed);
  comm->state = next;
}

void kolo_nccl_fail_locked(kolo_nccl_comm *comm, kolo_status status, const char *message) {
  if (comm->failure == KOLO_OK) {
    comm->failure = status;
    snprintf(comm->error, sizeof comm->error, "%s", message);
    KOLO_LOGE(COMPONENT, "rank %d/%d: %s: %s", comm->rank, comm->size, kolo_strerror(status),
              message);
  }
  kolo_nccl_transition_locked(comm, KOLO_NCCL_EV_ERROR);
  /* a failed communicator's kernels may spin on a dead peer; stop them */
  if (comm->state == KOLO_NCCL_STATE_FAILED) kolo_nccl_request_abort(comm);
}

void kolo_nccl_fail_nccl_locked(kolo_nccl_comm *comm, ncclResult_t r, const char *what) {
  char message[512];
  kolo_nccl_describe_nccl(r, what, comm->nccl ? ncclGetLastError(comm->nccl) : NULL, message,
                          sizeof message);
  kolo_nccl_fail_locked(comm, kolo_nccl_status_from_nccl(r), message);
}

void kolo_nccl_fail_cuda_locked(kolo_nccl_comm *comm, cudaError_t e, const char *what) {
  char message[512];
  kolo_nccl_cuda_forget(e);
  kolo_nccl_describe_cuda(e, what, message, sizeof message);
  kolo_nccl_fail_locked(comm, kolo_nccl_status_from_cuda(e), message);
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

void kolo_nccl_finish_abort_locked(kolo_nccl_comm *comm) {
  if (comm->state == KOLO_NCCL_STATE_INITIALIZING || comm->state == KOLO_NCCL_STATE_READY ||
      comm->state == KOLO_NCCL_STATE_FAILED) {
    (void)kolo_nccl_make_current(comm->device);
    uint64_t start = kolo_nccl_now_ns();
    abort_nccl_locked(comm);
    kolo_nccl_transition_locked(comm, KOLO_NCCL_EV_ABORT);
    KOLO_LOGI(COMPONENT, "rank %d/%d: communicator aborted (%.1f ms)", comm->rank, comm->size,
              (double)(kolo_nccl_now_ns() - start) / 1e6);
  }
  pthread_cond_broadcast(&comm->changed);
}

/* The abort on the abort thread or the destroy path: takes the lock (poll
 * loops holding it end on abort_requested) and finishes the abort. */
static void finish_abort(kolo_nccl_comm *comm) {
  pthread_mutex_lock(&comm->mu);
  kolo_nccl_finish_abort_locked(comm);
  pthread_mutex_unlock(&comm->mu);
}

int kolo_nccl_aborter_running(kolo_nccl_comm *comm) {
  pthread_mutex_lock(&comm->abort_mu);
  int started = comm->aborter_started;
  pthread_mutex_unlock(&comm->abort_mu);
  return started;
}

static void *aborter_main(void *argument) {
  finish_abort(argument);
  return NULL;
}

void kolo_nccl_request_abort(kolo_nccl_comm *comm) {
  atomic_store(&comm->abort_requested, 1);
  pthread_mutex_lock(&comm->abort_mu);
  int start = !comm->aborter_started;
  if (start) comm->aborter_started = 1;
  int created = start && pthread_create(&comm->aborter, NULL, aborter_main, comm) == 0;
  if (start && !created) comm->aborter_started = 0;
  pthread_mutex_unlock(&comm->abort_mu);
  if (start && !created) {
    /* no thread to spare: the next poll of a request (or destroy) aborts inline */
    KOLO_LOGW(COMPONENT, "rank %d/%d: no thread for the abort (%s); aborting on the next poll",
              comm->rank, comm->size, strerror(errno));
  }
}

void kolo_nccl_comm_abort(kolo_nccl_comm *comm) {
  if (comm == NULL) return;
  kolo_nccl_request_abort(comm);
}

kolo_status kolo_nccl_comm_wait_aborted(kolo_nccl_comm *comm, int timeout_ms) {
  if (comm == NULL) return KOLO_ERR_INVALID_ARG;
  if (!atomic_load(&comm->abort_requested)) return KOLO_ERR_STATE;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += timeout_ms / 1000;
  until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&comm->mu);
  int timed_out = 0;
  while (comm->state != KOLO_NCCL_STATE_ABORTED && comm->state != KOLO_NCCL_STATE_DESTROYED &&
         !timed_out)
    timed_out = pthread_cond_timedwait(&comm->changed, &comm->mu, &until) == ETIMEDOUT;
  int done = comm->state == KOLO_NCCL_STATE_ABORTED || comm->state == KOLO_NCCL_STATE_DESTROYED;
  pthread_mutex_unlock(&comm->mu);
  return done ? KOLO_OK : KOLO_ERR_TIMEOUT;
}

ncclResult_t kolo_nccl_settle_locked(kolo_nccl_comm *comm, ncclResult_t r, uint64_t start_ns,
                                     int (*cancelled)(void *), void *user, int *timed_out,
                                     int *aborted) {
  uint64_t deadline = start_ns + (uint64_t)comm->timeout_ms * 1000000ull;
  uint64_t polling = kolo_nccl_now_ns();
  *timed_out = 0;
  *aborted = 0;
  while (r == ncclInProgress) {
    if (atomic_load(&comm->abort_requested) || (cancelled != NULL && cancelled(user))) {
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
    if (r == ncclInProgress) kolo_nccl_pause(polling);
  }
  return r;
}

static void free_comm_resources(kolo_nccl_comm *comm) {
  if (comm->device >= 0) (void)kolo_nccl_make_current(comm->device);
  if (comm->count_dev != NULL) kolo_nccl_cuda_forget(cudaFree(comm->count_dev));
  if (comm->count_host != NULL) kolo_nccl_cuda_forget(cudaFreeHost(comm->count_host));
  if (comm->scratch != NULL) {
    cudaError_t e =
        comm->scratch_pooled ? cudaFreeAsync(comm->scratch, comm->stream) : cudaFree(comm->scratch);
    kolo_nccl_cuda_forget(e);
  }
  for (int i = 0; i < comm->event_count; i++)
    kolo_nccl_cuda_forget(cudaEventDestroy(comm->events[i]));
  if (comm->have_input) kolo_nccl_cuda_forget(cudaEventDestroy(comm->input));
  if (comm->have_stream) kolo_nccl_cuda_forget(cudaStreamDestroy(comm->stream));
  pthread_cond_destroy(&comm->changed);
  pthread_mutex_destroy(&comm->mu);
  pthread_mutex_destroy(&comm->abort_mu);
  free(comm);
}

/* The pieces of a communicator that need the device but not NCCL. */
static kolo_status setup_locals(kolo_nccl_comm *comm) {
  cudaError_t e = cudaStreamCreateWithFlags(&comm->stream, cudaStreamNonBlocking);
  if (e == cudaSuccess) comm->have_stream = 1;
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&comm->input, cudaEventDisableTiming);
  if (e == cudaSuccess) comm->have_input = 1;
  if (e == cudaSuccess)
    e = cudaMalloc((void **)&comm->count_dev, (size_t)comm->size * sizeof(uint64_t));
  if (e == cudaSuccess)
    e = cudaMallocHost((void **)&comm->count_host, (size_t)comm->size * sizeof(uint64_t));
  if (e == cudaSuccess) return KOLO_OK;
  char message[512];
  kolo_nccl_cuda_forget(e);
  kolo_nccl_describe_cuda(e, "communicator setup", message, sizeof message);
  KOLO_LOGE(COMPONENT, "rank %d/%d: %s", comm->rank, comm->size, message);
  return kolo_nccl_status_from_cuda(e);
}

/* Starts ncclCommInitRankConfig (non-blocking) and waits, bounded, until ready.
 * Called with the lock held; on failure the comm is aborted and a status returned. */
static kolo_status init_nccl_locked(kolo_nccl_comm *comm, const uint8_t id[KOLO_NCCL_ID_BYTES],
                                    const kolo_nccl_options *options) {
  ncclUniqueId uid;
  memcpy(uid.internal, id, KOLO_NCCL_ID_BYTES);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0; /* we poll with our own deadline instead of blocking in NCCL */
  uint64_t start = kolo_nccl_now_ns();
  ncclResult_t r = ncclCommInitRankConfig(&comm->nccl, comm->size, uid, comm->rank, &config);
  kolo_nccl_transition_locked(comm, KOLO_NCCL_EV_INIT_START);
  int timed_out = 0, aborted = 0;
  if (r == ncclSuccess || r == ncclInProgress) {
    ncclResult_t async = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(comm->nccl, &async);
    r = q != ncclSuccess ? q : async;
    r = kolo_nccl_settle_locked(comm, r, start, options->cancelled, options->cancel_user,
                                &timed_out, &aborted);
  }
  char message[512];
  if (aborted) {
    snprintf(message, sizeof message, "ncclCommInitRankConfig: cancelled while waiting for peers");
    kolo_nccl_fail_locked(comm, KOLO_ERR_ABORTED, message);
  } else if (timed_out) {
    snprintf(message, sizeof message, "ncclCommInitRankConfig: not ready after %d ms",
             comm->timeout_ms);
    kolo_nccl_fail_locked(comm, KOLO_ERR_TIMEOUT, message);
  } else if (r != ncclSuccess) {
    kolo_nccl_fail_nccl_locked(comm, r, "ncclCommInitRankConfig");
  } else {
    kolo_nccl_transition_locked(comm, KOLO_NCCL_EV_INIT_DONE);
    comm->progress_ns = kolo_nccl_now_ns();
    return KOLO_OK;
  }
  return comm->failure;
}

/* Refuses what would make creation unbounded or pick the wrong GPU. */
static kolo_status check_create_args(int rank, int size, const kolo_nccl_options *options) {
  char source[1100];
  if (options->device < 0) {
    KOLO_LOGE(COMPONENT, "communicator rank %d/%d: CUDA device %d is not a device ordinal", rank,
              size, options->device);
    return KOLO_ERR_INVALID_ARG;
  }
  if (kolo_nccl_blocking_forced(source, sizeof source)) {
    KOLO_LOGE(COMPONENT,
              "communicator rank %d/%d: NCCL_COMM_BLOCKING=1 (from %s) makes NCCL's "
              "communicator creation block with no deadline; kolo needs non-blocking "
              "communicators: unset it",
              rank, size, source);
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

/* The communicator object, before any CUDA or NCCL call. */
static kolo_nccl_comm *new_comm(int rank, int size, const kolo_nccl_options *options) {
  kolo_nccl_comm *comm = calloc(1, sizeof *comm);
  if (comm == NULL) return NULL;
  pthread_mutex_init(&comm->mu, NULL);
  pthread_mutex_init(&comm->abort_mu, NULL);
  pthread_cond_init(&comm->changed, NULL);
  atomic_init(&comm->abort_requested, 0);
  comm->state = KOLO_NCCL_STATE_NEW;
  comm->rank = rank;
  comm->size = size;
  comm->device = options->device;
  comm->timeout_ms = options->timeout_ms > 0 ? options->timeout_ms : KOLO_DEFAULT_TIMEOUT_MS;
  comm->op_timeout_ms = options->op_timeout_ms > 0 ? options->op_timeout_ms : comm->timeout_ms;
  return comm;
}

kolo_status kolo_nccl_comm_create_with(const uint8_t id[KOLO_NCCL_ID_BYTES], int rank, int size,
                                       const kolo_nccl_options *options, kolo_nccl_comm **out) {
  if (out == NULL) return KOLO_ERR_INVALID_ARG;
  *out = NULL;
  if (id == NULL || options == NULL || size < 1 || rank < 0 || rank >= size)
    return KOLO_ERR_INVALID_ARG;
  kolo_status st = check_create_args(rank, size, options);
  if (st != KOLO_OK) return st;
  char message[512];
  int ndev = 0;
  st = kolo_nccl_device_count(&ndev, message, sizeof message);
  if (st == KOLO_OK && options->device >= ndev) {
    snprintf(message, sizeof message, "CUDA device %d requested, %d present", options->device,
             ndev);
    st = KOLO_ERR_NO_DEVICE;
  }
  kolo_nccl_guard guard;
  cudaError_t e = st == KOLO_OK ? kolo_nccl_guard_enter(options->device, &guard) : cudaSuccess;
  if (st == KOLO_OK && e != cudaSuccess) {
    kolo_nccl_describe_cuda(e, "cudaSetDevice", message, sizeof message);
    st = kolo_nccl_status_from_cuda(e);
  }
  if (st != KOLO_OK) {
    KOLO_LOGE(COMPONENT, "communicator rank %d/%d: %s: %s", rank, size, kolo_strerror(st), message);
    return st;
  }
  kolo_nccl_comm *comm = new_comm(rank, size, options);
  st = comm == NULL ? KOLO_ERR_NO_MEMORY : setup_locals(comm);
  if (st == KOLO_OK) {
    pthread_mutex_lock(&comm->mu);
    st = init_nccl_locked(comm, id, options);
    pthread_mutex_unlock(&comm->mu);
    if (st != KOLO_OK) kolo_nccl_comm_destroy(comm); /* joins the abort the failure started */
  } else if (comm != NULL) {
    free_comm_resources(comm);
  }
  kolo_nccl_guard_exit(&guard);
  if (st != KOLO_OK) return st;
  KOLO_LOGD(COMPONENT, "communicator rank %d/%d ready on device %d", rank, size, comm->device);
  *out = comm;
  return KOLO_OK;
}

kolo_status kolo_nccl_comm_create(const uint8_t id[KOLO_NCCL_ID_BYTES], int rank, int size,
                                  int device, int timeout_ms, kolo_nccl_comm **out) {
  kolo_nccl_options options = {
      .device = device, .timeout_ms = timeout_ms, .op_timeout_ms = timeout_ms};
  return kolo_nccl_comm_create_with(id, rank, size, &options, out);
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

int kolo_nccl_comm_rank(const kolo_nccl_comm *comm) {
  return comm ? comm->rank : -1;
}
int kolo_nccl_comm_size(const kolo_nccl_comm *comm) {
  return comm ? comm->size : 0;
}
int kolo_nccl_comm_device(const kolo_nccl_comm *comm) {
  return comm ? comm->device : -1;
}

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

/* Clean path of destroy: flush, wait (bounded) for quiescence, free locally.
 * Returns 0 when NCCL did not finalize in time (the caller aborts). */
static int finalize_locked(kolo_nccl_comm *comm) {
  uint64_t start = kolo_nccl_now_ns();
  int timed_out = 0, aborted = 0;
  ncclResult_t r = ncclCommFinalize(comm->nccl);
  if (r == ncclSuccess || r == ncclInProgress) {
    /* Finalize completes asynchronously: its async state says when. */
    ncclResult_t async = ncclSuccess;
    ncclResult_t q = ncclCommGetAsyncError(comm->nccl, &async);
    r = q != ncclSuccess ? q : async;
    r = kolo_nccl_settle_locked(comm, r, start, NULL, NULL, &timed_out, &aborted);
  }
  if (r != ncclSuccess || timed_out || aborted) {
    KOLO_LOGW(COMPONENT, "rank %d/%d: finalize did not complete; aborting", comm->rank, comm->size);
    return 0;
  }
  (void)ncclCommDestroy(comm->nccl);
  comm->nccl = NULL;
  return 1;
}

void kolo_nccl_comm_destroy(kolo_nccl_comm *comm) {
  if (comm == NULL) return;
  kolo_nccl_guard guard;
  (void)kolo_nccl_guard_enter(comm->device, &guard);
  pthread_mutex_lock(&comm->mu);
  int clean = comm->state == KOLO_NCCL_STATE_READY && comm->pending == 0 &&
              !atomic_load(&comm->abort_requested) && finalize_locked(comm);
  pthread_mutex_unlock(&comm->mu);
  if (!clean) {
    atomic_store(&comm->abort_requested, 1);
    pthread_mutex_lock(&comm->abort_mu);
    int started = comm->aborter_started;
    comm->aborter_started = 1; /* no abort thread starts from now on */
    pthread_mutex_unlock(&comm->abort_mu);
    if (started) pthread_join(comm->aborter, NULL);
    finish_abort(comm); /* a no-op when the thread did it */
  }
  pthread_mutex_lock(&comm->mu);
  kolo_nccl_transition_locked(comm, KOLO_NCCL_EV_DESTROY);
  if (comm->pending > 0)
    KOLO_LOGW(COMPONENT, "rank %d/%d: destroyed with %d requests outstanding", comm->rank,
              comm->size, comm->pending);
  pthread_mutex_unlock(&comm->mu);
  free_comm_resources(comm);
  kolo_nccl_guard_exit(&guard);
}
