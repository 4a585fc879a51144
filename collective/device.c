/* Device-buffer dispatch: when a communicator is in CUDA mode (entered by
 * cuda.c's kolo_comm_use_cuda through kolo_device_prepare and
 * kolo_device_enter), collectives on device memory go to the NCCL data plane
 * (collective/nccl/) instead of the TCP ring. The NCCL communicator of an epoch
 * is created at the first device operation, from the ring spec's NCCL id or, when
 * the spec has none, from an id that rank 0 makes and broadcasts over the ring.
 *
 * Failure is coupled both ways. A failure the ring records (a neighbour's
 * control link closing, an abort, a ring change) aborts the NCCL communicator
 * at once (the net floor's on_fail hook calls kolo_device_abort, which never
 * blocks), so GPU
 * collectives stuck on a dead peer end in milliseconds like CPU ones; creation
 * waiting for a dead peer is cancelled the same way. An error NCCL reports, or a
 * refusal that only this rank made (a host buffer, a bad stream), fails the
 * communicator, so kolo_comm_error says so, the neighbours learn it over the
 * control links and destroy sends no goodbye. GPU operations have their own
 * long no-progress deadline (KOLO_GPU_TIMEOUT), since dead peers are found by
 * the control links, not by waiting. This file calls nothing of the face above
 * it (the queue, the API): they call it. */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "collective/face.h"
#include "common/log.h"

#ifdef KOLO_HAVE_NCCL
#include "kolo_nccl.h"

#define DEFAULT_GPU_TIMEOUT_MS (10 * 60 * 1000)
/* an NCCL error waits this long for the control links to name a dead rank */
#define NAME_THE_PEER_MS 100

struct kolo_device {
  int device;                     /* CUDA ordinal of this rank */
  uint8_t id[KOLO_NCCL_ID_BYTES]; /* the epoch's NCCL unique id, agreed by kolo_comm_use_cuda */
  int op_timeout_ms;              /* no-progress deadline of GPU operations */
  pthread_mutex_t mutex; /* one submit at a time into kolo_nccl; the NCCL comm's creation */
  _Atomic(kolo_nccl_comm *) nccl;
  size_t *counts; /* size entries: the device all-gather's counts (mutex) */
};

static kolo_device *device_of(const kolo_comm *comm) {
  return atomic_load(&((kolo_comm *)comm)->device);
}

/* KOLO_GPU_TIMEOUT (seconds, fractions allowed), else 10 minutes. */
static int gpu_timeout_ms(void) {
  const char *value = getenv("KOLO_GPU_TIMEOUT");
  if (value == NULL || *value == '\0') return DEFAULT_GPU_TIMEOUT_MS;
  char *end = NULL;
  double seconds = strtod(value, &end);
  if (end == value || seconds <= 0 || seconds > 2e6) return DEFAULT_GPU_TIMEOUT_MS;
  return (int)(seconds * 1000.0);
}

/* The device to use, or -1 with the reason logged. */
static int pick_device(const kolo_comm *comm, int device, int count) {
  if (device == KOLO_CUDA_LOCAL_DEVICE) return comm->net.local_rank % count;
  if (device >= count) {
    KOLO_LOGE("kolo", "rank %d: CUDA device %d asked for, %d present", comm->net.rank, device,
              count);
    return -1;
  }
  return device;
}

/* This rank's own answer to kolo_comm_use_cuda, before the ring agrees. */
static kolo_status local_cuda_check(kolo_comm *comm, int device, int *chosen) {
  if (device < 0 && device != KOLO_CUDA_LOCAL_DEVICE) {
    KOLO_LOGE("kolo", "rank %d: CUDA device %d is not a device ordinal", comm->net.rank, device);
    return KOLO_ERR_INVALID_ARG;
  }
  char reason[1100];
  if (kolo_nccl_blocking_forced(reason, sizeof reason)) {
    KOLO_LOGE("kolo",
              "rank %d: NCCL_COMM_BLOCKING=1 (from %s) would make NCCL's setup wait "
              "with no deadline; unset it to use CUDA buffers",
              comm->net.rank, reason);
    return KOLO_ERR_INVALID_ARG;
  }
  int count = 0;
  kolo_status status = kolo_nccl_device_count(&count, reason, sizeof reason);
  if (status != KOLO_OK) {
    KOLO_LOGE("kolo", "rank %d: CUDA buffers asked for, but %s (%s)", comm->net.rank,
              kolo_strerror(status), reason);
    return status;
  }
  *chosen = pick_device(comm, device, count);
  if (*chosen < 0) return KOLO_ERR_NO_DEVICE;
  kolo_device *current = device_of(comm);
  if (current != NULL && current->device != *chosen) {
    KOLO_LOGE("kolo", "rank %d: already in CUDA mode on device %d (asked for %d)", comm->net.rank,
              current->device, *chosen);
    return KOLO_ERR_STATE;
  }
  return KOLO_OK;
}

kolo_status kolo_device_prepare(kolo_comm *comm, int device, int *chosen,
                                uint8_t id[KOLO_NCCL_ID_BYTES]) {
  kolo_status local = local_cuda_check(comm, device, chosen);
  if (comm->has_nccl_id)
    memcpy(id, comm->nccl_id, KOLO_NCCL_ID_BYTES);
  else
    memset(id, 0, KOLO_NCCL_ID_BYTES);
  /* the id must be made in rank 0's own process: NCCL's bootstrap listener lives there */
  if (local == KOLO_OK && comm->net.rank == 0 && !comm->has_nccl_id)
    local = kolo_nccl_id_create(id);
  return local;
}

static kolo_device *new_device(kolo_comm *comm, int chosen, const uint8_t *id) {
  kolo_device *dev = calloc(1, sizeof *dev);
  size_t *counts = calloc((size_t)comm->net.size, sizeof *counts);
  if (dev == NULL || counts == NULL) {
    free(dev);
    free(counts);
    return NULL;
  }
  dev->device = chosen;
  memcpy(dev->id, id, KOLO_NCCL_ID_BYTES);
  dev->op_timeout_ms = gpu_timeout_ms();
  if (dev->op_timeout_ms < comm->net.timeout_ms) dev->op_timeout_ms = comm->net.timeout_ms;
  pthread_mutex_init(&dev->mutex, NULL);
  atomic_init(&dev->nccl, NULL);
  dev->counts = counts;
  return dev;
}

kolo_status kolo_device_enter(kolo_comm *comm, int chosen, const uint8_t *id) {
  if (device_of(comm) != NULL) return KOLO_OK; /* again, on the same device */
  kolo_device *dev = new_device(comm, chosen, id);
  if (dev == NULL) {
    kolo_net_fail(&comm->net, KOLO_ERR_NO_MEMORY, comm->net.rank,
                  "rank %d: no memory for CUDA mode", comm->net.rank);
    return KOLO_ERR_NO_MEMORY;
  }
  atomic_store(&comm->device, dev); /* published once: readers load it atomically */
  return KOLO_OK;
}

int kolo_device_mode(const kolo_comm *comm, int *device) {
  kolo_device *dev = comm != NULL ? device_of(comm) : NULL;
  if (device != NULL) *device = dev != NULL ? dev->device : -1;
  return dev != NULL;
}

int kolo_device_wanted(const kolo_comm *comm, const void *a, const void *b) {
  kolo_device *dev = device_of(comm);
  if (dev == NULL) return 0;
  return kolo_nccl_is_device_pointer_on(a, dev->device) ||
         kolo_nccl_is_device_pointer_on(b, dev->device);
}

int kolo_device_is_device_memory(const kolo_comm *comm, const void *p) {
  kolo_device *dev = comm != NULL ? device_of(comm) : NULL;
  return dev != NULL && kolo_nccl_is_device_pointer_on(p, dev->device);
}

kolo_status kolo_device_copy(void *dst, const void *src, size_t bytes) {
  return kolo_nccl_copy(dst, src, bytes);
}

/* Creation waits for the other ranks; a failure of the ring ends that wait. */
static int ring_failed(void *user) {
  return atomic_load(&((kolo_comm *)user)->net.failed);
}

/* Creates the epoch's NCCL communicator once; dev->mutex held. */
static kolo_status ensure_nccl(kolo_comm *comm, kolo_device *dev) {
  if (atomic_load(&dev->nccl) != NULL) return KOLO_OK;
  if (atomic_load(&comm->net.failed)) return kolo_net_error(&comm->net, NULL);
  kolo_status status;
  kolo_nccl_options options = {.device = dev->device,
                               .timeout_ms = comm->net.timeout_ms,
                               .op_timeout_ms = dev->op_timeout_ms,
                               .cancelled = ring_failed,
                               .cancel_user = comm};
  kolo_nccl_comm *nccl = NULL;
  status = kolo_nccl_comm_create_with(dev->id, comm->net.rank, comm->net.size, &options, &nccl);
  if (status != KOLO_OK)
    return atomic_load(&comm->net.failed) ? kolo_net_error(&comm->net, NULL) : status;
  atomic_store(&dev->nccl, nccl);
  /* a failure recorded meanwhile may have found no NCCL comm to abort */
  if (atomic_load(&comm->net.failed)) kolo_nccl_comm_abort(nccl);
  return KOLO_OK;
}

/* The all-gather with counts unknown in advance: exchange them (a collective
 * decision, the same on every rank), then the blocks. dev->mutex held. */
static kolo_status submit_allgather(kolo_comm *comm, kolo_device *dev, kolo_nccl_comm *nccl,
                                    const kolo_request *request, kolo_nccl_request **handle,
                                    int *shared_refusal) {
  kolo_status status = kolo_nccl_exchange_counts(nccl, request->count, dev->counts);
  if (status != KOLO_OK) return status;
  size_t total = 0;
  for (int r = 0; r < comm->net.size; r++) {
    total += dev->counts[r];
    if (request->recv_counts != NULL) request->recv_counts[r] = dev->counts[r];
  }
  if (total > request->recv_capacity) {
    KOLO_LOGE("kolo", "allgather: %zu elements do not fit the receive capacity %zu", total,
              request->recv_capacity);
    *shared_refusal = 1;
    return KOLO_ERR_TOO_LARGE;
  }
  kolo_nccl_op_desc d = {.kind = KOLO_NCCL_ALLGATHERV,
                         .send = request->send,
                         .recv = request->recv,
                         .counts = dev->counts,
                         .dtype = request->dtype};
  return kolo_nccl_group_after(nccl, &d, 1, request->cuda_stream, handle);
}

static kolo_status submit_locked(kolo_comm *comm, kolo_device *dev, const kolo_request *request,
                                 kolo_nccl_request **handle, int *shared_refusal) {
  kolo_status status = ensure_nccl(comm, dev);
  if (status != KOLO_OK) return status;
  kolo_nccl_comm *nccl = atomic_load(&dev->nccl);
  kolo_nccl_op_desc d = {.send = request->send,
                         .recv = request->recv,
                         .count = request->count,
                         .dtype = request->dtype,
                         .op = request->op,
                         .root = request->root};
  switch (request->kind) {
    case KOLO_REQUEST_ALLREDUCE:
      d.kind = KOLO_NCCL_ALLREDUCE;
      break;
    case KOLO_REQUEST_BROADCAST:
      d.kind = KOLO_NCCL_BROADCAST;
      break;
    case KOLO_REQUEST_REDUCESCATTER:
      d.kind = KOLO_NCCL_REDUCESCATTER;
      break;
    case KOLO_REQUEST_ALLGATHER:
      return submit_allgather(comm, dev, nccl, request, handle, shared_refusal);
    default:
      *shared_refusal = 1;
      return KOLO_ERR_UNSUPPORTED;
  }
  return kolo_nccl_group_after(nccl, &d, 1, request->cuda_stream, handle);
}

kolo_status kolo_device_submit(kolo_comm *comm, const kolo_request *request, void **nccl_request) {
  kolo_device *dev = device_of(comm);
  if (dev == NULL) return KOLO_ERR_STATE;
  if (atomic_load(&comm->net.failed))
    return kolo_net_error(&comm->net, NULL); /* a dead ring submits nothing */
  kolo_nccl_request *handle = NULL;
  int shared_refusal = 0;
  pthread_mutex_lock(&dev->mutex);
  kolo_status status = submit_locked(comm, dev, request, &handle, &shared_refusal);
  pthread_mutex_unlock(&dev->mutex);
  if (status == KOLO_OK) {
    *nccl_request = handle;
    return KOLO_OK;
  }
  if (atomic_load(&comm->net.failed)) return kolo_net_error(&comm->net, NULL);
  /* The other ranks submitted this operation and wait for this one: a refusal
   * or failure made here alone must fail the ring, or they wait for their
   * deadline. (A capacity refusal is decided alike on every rank: not so.) */
  if (!shared_refusal)
    kolo_net_fail(&comm->net, status, comm->net.rank, "rank %d could not run a GPU collective: %s",
                  comm->net.rank, kolo_strerror(status));
  return status;
}

/* After NCCL reported an error: gives the control links a moment to name a
 * dead rank (they see a SIGKILLed peer within milliseconds), then records
 * NCCL's verdict unless one came. Returns the communicator's error. */
static kolo_status fail_from_nccl(kolo_comm *comm, kolo_device *dev, kolo_status status) {
  if (!atomic_load(&comm->net.failed)) {
    struct pollfd pfd = {.fd = comm->net.fail_fd, .events = POLLIN};
    (void)poll(&pfd, 1, NAME_THE_PEER_MS);
  }
  if (!atomic_load(&comm->net.failed)) {
    char message[200] = "";
    kolo_nccl_comm *nccl = atomic_load(&dev->nccl);
    if (nccl != NULL) (void)kolo_nccl_comm_error(nccl, message, sizeof message);
    kolo_net_fail(&comm->net, status, -1, "GPU collective failed: %s", message);
  }
  return kolo_net_error(&comm->net, NULL);
}

static kolo_status finish(kolo_comm *comm, kolo_status status) {
  if (status == KOLO_OK) return KOLO_OK;
  if (atomic_load(&comm->net.failed)) return kolo_net_error(&comm->net, NULL);
  return fail_from_nccl(comm, device_of(comm), status);
}

kolo_status kolo_device_wait(kolo_comm *comm, void *nccl_request) {
  return finish(comm, kolo_nccl_wait(nccl_request));
}

kolo_status kolo_device_test(kolo_comm *comm, void *nccl_request, int *done, kolo_status *status) {
  kolo_status polled = KOLO_OK;
  kolo_status st = kolo_nccl_test(nccl_request, done, &polled);
  if (st != KOLO_OK) return st;
  if (*done) *status = finish(comm, polled);
  return KOLO_OK;
}

kolo_status kolo_device_stream_wait(void *device_request, void *cuda_stream) {
  return kolo_nccl_stream_wait(device_request, cuda_stream);
}

void *kolo_device_event(void *device_request) {
  return kolo_nccl_request_event(device_request);
}

kolo_status kolo_device_check_stream_call(kolo_comm *comm, const kolo_request *request) {
  kolo_device *dev = device_of(comm);
  if (dev == NULL) {
    KOLO_LOGE("kolo",
              "rank %d: a stream-ordered collective needs CUDA mode "
              "(kolo_comm_use_cuda)",
              comm->net.rank);
    return KOLO_ERR_STATE;
  }
  if (kolo_device_wanted(comm, request->send, request->recv)) return KOLO_OK;
  /* host buffers on this rank while the others run it on their GPUs */
  kolo_net_fail(&comm->net, KOLO_ERR_INVALID_ARG, comm->net.rank,
                "rank %d passed host buffers to a stream-ordered collective", comm->net.rank);
  return KOLO_ERR_INVALID_ARG;
}

void kolo_device_abort(kolo_comm *comm) {
  kolo_device *dev = device_of(comm);
  if (dev == NULL) return;
  kolo_nccl_comm *nccl = atomic_load(&dev->nccl);
  if (nccl != NULL) kolo_nccl_comm_abort(nccl); /* never blocks */
}

void kolo_device_destroy(kolo_comm *comm) {
  kolo_device *dev = atomic_exchange(&comm->device, NULL);
  if (dev == NULL) return;
  kolo_nccl_comm *nccl = atomic_load(&dev->nccl);
  if (nccl != NULL && atomic_load(&comm->net.failed)) kolo_nccl_comm_abort(nccl);
  kolo_nccl_comm_destroy(nccl); /* finalizes a healthy one; joins a running abort */
  pthread_mutex_destroy(&dev->mutex);
  free(dev->counts);
  free(dev);
}

int kolo_nccl_version(void) {
  return kolo_nccl_build_version();
}

#else /* built without CUDA/NCCL */

int kolo_nccl_version(void) {
  return 0;
}

int kolo_device_mode(const kolo_comm *comm, int *device) {
  (void)comm;
  if (device != NULL) *device = -1;
  return 0;
}

int kolo_device_wanted(const kolo_comm *comm, const void *a, const void *b) {
  (void)comm, (void)a, (void)b;
  return 0;
}

int kolo_device_is_device_memory(const kolo_comm *comm, const void *p) {
  (void)comm, (void)p;
  return 0;
}

kolo_status kolo_device_copy(void *dst, const void *src, size_t bytes) {
  (void)dst, (void)src, (void)bytes;
  return KOLO_ERR_UNSUPPORTED;
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

kolo_status kolo_device_check_stream_call(kolo_comm *comm, const kolo_request *request) {
  (void)comm, (void)request;
  KOLO_LOGE("kolo", "stream-ordered collectives need a libkolo built with CUDA/NCCL");
  return KOLO_ERR_UNSUPPORTED;
}

void kolo_device_abort(kolo_comm *comm) {
  (void)comm;
}
void kolo_device_destroy(kolo_comm *comm) {
  (void)comm;
}

#endif
