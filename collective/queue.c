/* The request queue and the engine thread. Non-blocking calls take a request
 * from the communicator's pool and queue it; the engine thread runs queued
 * requests in order and, while idle, watches the control links so that a
 * failure reaches a rank that is not in a collective. A blocking call with
 * nothing queued runs inline on the caller's thread (no hand-off on the latency
 * path), else waits behind the queued ones. Requests on device buffers in CUDA
 * mode go to NCCL instead (device.c). */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collective/internal.h"
#include "common/checks.h"

/* Marks a request done (under comm->mutex). */
static void complete_request(kolo_comm *comm, kolo_request *request, kolo_status status) {
  request->status = status;
  if (status != KOLO_OK && request->message[0] == '\0' && atomic_load(&comm->failed)) {
    kolo_comm_error_message(comm, request->message, sizeof request->message);
  }
  request->done = 1;
  pthread_cond_broadcast(&comm->cond);
}

/* Sleeps until woken (queue, abort, stop) or a control link has something. */
static void engine_idle(kolo_comm *comm) {
  struct pollfd fds[3];
  int count = 0, link_of[3] = {-1, -1, -1};
  fds[count++] = (struct pollfd){.fd = comm->wake_fd, .events = POLLIN};
  for (int i = 0; i < 2; i++) {
    if (comm->control[i].open && !atomic_load(&comm->failed)) {
      link_of[count] = i;
      fds[count++] = (struct pollfd){.fd = kolo_channel_poll_fd(&comm->control[i].channel),
                                     .events = POLLIN};
    }
  }
  if (poll(fds, (nfds_t)count, -1) <= 0) return;
  if (fds[0].revents) {
    uint64_t value;
    ssize_t ignored = read(comm->wake_fd, &value, sizeof value);
    (void)ignored;
  }
  for (int i = 1; i < count; i++) {
    if (fds[i].revents) kolo_control_service(comm, &comm->control[link_of[i]]);
  }
}

static void *engine_main(void *argument) {
  kolo_comm *comm = argument;
  for (;;) {
    pthread_mutex_lock(&comm->mutex);
    if (!comm->busy && comm->queue_head != NULL) {
      kolo_request *request = comm->queue_head;
      comm->queue_head = request->next;
      if (comm->queue_head == NULL) comm->queue_tail = NULL;
      comm->busy = 1;
      pthread_mutex_unlock(&comm->mutex);
      kolo_status status = comm->stopping ? KOLO_ERR_ABORTED : kolo_ring_run(comm, request, 1);
      pthread_mutex_lock(&comm->mutex);
      comm->busy = 0;
      complete_request(comm, request, status);
      pthread_mutex_unlock(&comm->mutex);
      continue;
    }
    int stopping = comm->stopping && !comm->busy;
    pthread_mutex_unlock(&comm->mutex);
    if (stopping) break;
    engine_idle(comm);
  }
  return NULL;
}

kolo_status kolo_queue_start(kolo_comm *comm) {
  if (pthread_create(&comm->engine, NULL, engine_main, comm) != 0) return KOLO_ERR_SYSTEM;
  comm->engine_started = 1;
  return KOLO_OK;
}

static void wake_engine(kolo_comm *comm) {
  uint64_t one = 1;
  ssize_t ignored = write(comm->wake_fd, &one, sizeof one);
  (void)ignored;
}

int kolo_queue_pending(kolo_comm *comm) {
  pthread_mutex_lock(&comm->mutex);
  int pending = comm->busy || comm->queue_head != NULL;
  pthread_mutex_unlock(&comm->mutex);
  return pending;
}

void kolo_queue_stop(kolo_comm *comm) {
  pthread_mutex_lock(&comm->mutex);
  comm->stopping = 1;
  pthread_mutex_unlock(&comm->mutex);
  wake_engine(comm);
  if (comm->engine_started) pthread_join(comm->engine, NULL);
  comm->engine_started = 0;
}

void kolo_queue_free(kolo_comm *comm) {
  while (comm->free_requests != NULL) {
    kolo_request *request = comm->free_requests;
    comm->free_requests = request->next;
    free(request);
  }
}

kolo_status kolo_queue_run_blocking(kolo_comm *comm, kolo_request *request) {
  if (request->kind != KOLO_REQUEST_BARRIER &&
      kolo_device_wanted(comm, request->send, request->recv)) {
    void *device_request = NULL;
    KOLO_CHECK(kolo_device_submit(comm, request, &device_request));
    return kolo_device_wait(comm, device_request);
  }
  pthread_mutex_lock(&comm->mutex);
  if (!comm->busy && comm->queue_head == NULL) {
    comm->busy = 1;
    pthread_mutex_unlock(&comm->mutex);
    kolo_status status = kolo_ring_run(comm, request, 0);
    pthread_mutex_lock(&comm->mutex);
    comm->busy = 0;
    if (comm->queue_head != NULL || comm->stopping) wake_engine(comm);
    pthread_cond_broadcast(&comm->cond);
    pthread_mutex_unlock(&comm->mutex);
    return status;
  }
  request->next = NULL;
  if (comm->queue_tail) comm->queue_tail->next = request;
  else comm->queue_head = request;
  comm->queue_tail = request;
  wake_engine(comm);
  while (!request->done) pthread_cond_wait(&comm->cond, &comm->mutex);
  kolo_status status = request->status;
  pthread_mutex_unlock(&comm->mutex);
  return status;
}

kolo_status kolo_queue_submit(kolo_comm *comm, const kolo_request *prototype, kolo_request **out) {
  void *device_request = NULL;
  if (prototype->kind != KOLO_REQUEST_BARRIER &&
      kolo_device_wanted(comm, prototype->send, prototype->recv)) {
    KOLO_CHECK(kolo_device_submit(comm, prototype, &device_request));
  }
  pthread_mutex_lock(&comm->mutex);
  kolo_request *request = comm->free_requests;
  if (request != NULL) {
    comm->free_requests = request->next;
  } else {
    request = malloc(sizeof *request);
    if (request == NULL) {
      pthread_mutex_unlock(&comm->mutex);
      return KOLO_ERR_NO_MEMORY;
    }
  }
  *request = *prototype;
  if (prototype->members == &prototype->single) request->members = &request->single;
  request->pooled = 1;
  request->done = 0;
  request->next = NULL;
  request->device_request = device_request;
  if (device_request != NULL) { /* NCCL runs it; nothing to queue */
    pthread_mutex_unlock(&comm->mutex);
    *out = request;
    return KOLO_OK;
  }
  if (comm->queue_tail) comm->queue_tail->next = request;
  else comm->queue_head = request;
  comm->queue_tail = request;
  pthread_mutex_unlock(&comm->mutex);
  wake_engine(comm);
  *out = request;
  return KOLO_OK;
}

/* Returns a request to the pool (under comm->mutex), with what it still owns; a
 * named one's name may be submitted again from now on. */
static void release_request(kolo_comm *comm, kolo_request *request) {
  if (request->name[0] != '\0') kolo_names_remove(comm->in_flight, request->name);
  if (request->members != &request->single) free(request->members);
  request->members = NULL;
  free(request->output);
  request->output = NULL;
  request->next = comm->free_requests;
  comm->free_requests = request;
}

/* Copies what a completed request tells into result (NULL = nothing), handing
 * over any output the engine allocated. */
static void fill_result(kolo_request *request, kolo_status status, kolo_result *result) {
  if (result == NULL) return;
  result->status = status;
  memcpy(result->message, request->message, sizeof result->message);
  result->output = request->output;
  result->output_count = request->output_count;
  result->last_rank = request->last_rank;
  request->output = NULL;
}

void kolo_free(void *memory) { free(memory); }

kolo_status kolo_wait(kolo_request *request) { return kolo_wait_result(request, NULL); }

kolo_status kolo_wait_result(kolo_request *request, kolo_result *result) {
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_comm *comm = request->comm;
  if (request->device_request != NULL) {
    kolo_status device_status = kolo_device_wait(comm, request->device_request);
    fill_result(request, device_status, result);
    pthread_mutex_lock(&comm->mutex);
    release_request(comm, request);
    pthread_mutex_unlock(&comm->mutex);
    return device_status;
  }
  pthread_mutex_lock(&comm->mutex);
  while (!request->done) pthread_cond_wait(&comm->cond, &comm->mutex);
  kolo_status status = request->status;
  fill_result(request, status, result);
  release_request(comm, request);
  pthread_mutex_unlock(&comm->mutex);
  return status;
}

kolo_status kolo_test(kolo_request *request, int *done, kolo_status *status) {
  kolo_result result;
  kolo_status rc = kolo_test_result(request, done, &result);
  if (rc == KOLO_OK && *done) {
    if (status != NULL) *status = result.status;
    free(result.output);
  }
  return rc;
}

kolo_status kolo_test_result(kolo_request *request, int *done, kolo_result *result) {
  if (request == NULL || done == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_comm *comm = request->comm;
  if (request->device_request != NULL) {
    kolo_status device_status = KOLO_OK;
    kolo_device_test(comm, request->device_request, done, &device_status);
    if (*done) {
      fill_result(request, device_status, result);
      pthread_mutex_lock(&comm->mutex);
      release_request(comm, request);
      pthread_mutex_unlock(&comm->mutex);
    }
    return KOLO_OK;
  }
  pthread_mutex_lock(&comm->mutex);
  *done = request->done;
  if (request->done) {
    fill_result(request, request->status, result);
    release_request(comm, request);
  }
  pthread_mutex_unlock(&comm->mutex);
  return KOLO_OK;
}
