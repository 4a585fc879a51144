/* Requests and the executor thread. A request is taken from the
 * communicator's pool and either runs on the data plane at once or goes to the
 * negotiator (engine/negotiator.c) first:
 *   - unnamed operations issued before this rank's first named one run in
 *     program order, as MPI's do: a blocking one inline on the caller's thread
 *     when nothing is queued (no hand-off on the latency path), a non-blocking
 *     one on the executor thread;
 *   - named operations, and unnamed ones from then on, are negotiated, and the
 *     negotiator queues what every rank agreed on (single operations and fused
 *     batches) for the executor in the agreed order.
 * The executor runs its queue in order; it never reads the control links (the
 * negotiator does), so a long operation never delays failure detection.
 * Requests on device buffers in CUDA mode go to NCCL instead (device.c). */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collective/face.h"
#include "collective/engine/timeline.h"
#include "common/checks.h"
#include "common/clock.h"

/* Frees an engine-made request and what it owns (never handed to a caller). */
static void free_internal(kolo_request *request) {
  if (request->batch != NULL) kolo_batch_free(request->batch);
  free(request->output);
  free(request->scratch);
  free(request);
}

static const char *phase_name(kolo_request_kind kind) {
  switch (kind) {
    case KOLO_REQUEST_ALLGATHER:
      return "ALLGATHER";
    case KOLO_REQUEST_BROADCAST:
      return "BROADCAST";
    case KOLO_REQUEST_REDUCESCATTER:
      return "REDUCESCATTER";
    case KOLO_REQUEST_ALLTOALL:
      return "ALLTOALL";
    case KOLO_REQUEST_JOIN:
      return "JOIN";
    default:
      return "ALLREDUCE";
  }
}

/* The phases a finished request went through, on each of its tensors' rows. */
static void record_phases(kolo_comm *comm, const kolo_request *request,
                          const kolo_fused_times *times, kolo_status status) {
  kolo_timeline *timeline = kolo_engine_timeline(&comm->nego);
  if (timeline == NULL || !(request->negotiated || request->internal)) return;
  const char *detail = status == KOLO_OK ? NULL : kolo_strerror(status);
  if (request->kind != KOLO_REQUEST_BATCH) {
    if (request->name[0] == '\0') return;
    kolo_timeline_event(timeline, request->name, "WAIT_FOR_DATA", request->decided_ns,
                        times->start_ns, NULL);
    kolo_timeline_event(timeline, request->name, phase_name(request->kind), times->start_ns,
                        times->end_ns, detail);
    return;
  }
  const kolo_batch *batch = request->batch;
  for (int i = 0; i < batch->owner_count; i++) {
    const kolo_request *owner = batch->owners[i];
    kolo_timeline_event(timeline, owner->name, "WAIT_FOR_DATA", owner->decided_ns, times->start_ns,
                        NULL);
    if (times->staged_ns == 0) continue; /* failed before it started */
    kolo_timeline_event(timeline, owner->name, "MEMCPY_IN_FUSION_BUFFER", times->start_ns,
                        times->staged_ns, NULL);
    kolo_timeline_event(timeline, owner->name, "ALLREDUCE", times->staged_ns,
                        times->reduced_ns ? times->reduced_ns : kolo_now_ns(), detail);
    if (times->reduced_ns != 0) {
      kolo_timeline_event(timeline, owner->name, "MEMCPY_OUT_FUSION_BUFFER", times->reduced_ns,
                          times->end_ns, NULL);
    }
  }
}

/* A negotiated device operation: submitted to NCCL in the agreed order (the
 * host does not wait for NCCL here; kolo_wait does). */
static kolo_status submit_device(kolo_comm *comm, kolo_request *request, void **handle) {
  kolo_request d = *request;
  if (d.kind == KOLO_REQUEST_REDUCESCATTER && d.split_counts != NULL) {
    d.count = d.split_counts[0]; /* equal blocks (named.c): NCCL's recv count */
  }
  return kolo_device_submit(comm, &d, handle);
}

/* Runs one queued request on the executor thread and completes it. */
static void execute_one(kolo_comm *comm, kolo_request *request) {
  kolo_status status = KOLO_ERR_ABORTED;
  kolo_fused_times times = {.start_ns = kolo_now_ns()};
  void *device = NULL;
  if (!comm->queue.stopping) {
    /* a join was decided by every rank already: a peer that leaves after it
     * (training over, destroy) must not fail it (hvd.join() then exit) */
    if (request->kind == KOLO_REQUEST_JOIN)
      status = KOLO_OK;
    else if (request->on_device)
      status = submit_device(comm, request, &device);
    else if (request->kind == KOLO_REQUEST_BATCH)
      status = kolo_exec_batch(&comm->exec, request->batch, &times);
    else
      status = kolo_exec_run(&comm->exec, request, 0);
  }
  times.end_ns = kolo_now_ns();
  record_phases(comm, request, &times, status);
  pthread_mutex_lock(&comm->queue.mutex);
  comm->queue.busy = 0;
  if (request->kind == KOLO_REQUEST_BATCH) {
    for (int i = 0; i < request->batch->owner_count; i++) {
      kolo_request_complete_locked(&comm->queue, request->batch->owners[i], status);
    }
  }
  int internal = request->internal;
  request->device_request = device;
  /* once completed, a caller's request may vanish (a blocking call's is on its stack) */
  if (!internal) kolo_request_complete_locked(&comm->queue, request, status);
  pthread_cond_broadcast(&comm->queue.cond);
  pthread_mutex_unlock(&comm->queue.mutex);
  if (internal) free_internal(request);
}

static void *executor_main(void *argument) {
  kolo_comm *comm = argument;
  pthread_mutex_lock(&comm->queue.mutex);
  for (;;) {
    if (!comm->queue.busy && comm->queue.queue_head != NULL) {
      kolo_request *request = comm->queue.queue_head;
      comm->queue.queue_head = request->next;
      if (comm->queue.queue_head == NULL) comm->queue.queue_tail = NULL;
      comm->queue.busy = 1;
      pthread_mutex_unlock(&comm->queue.mutex);
      execute_one(comm, request);
      pthread_mutex_lock(&comm->queue.mutex);
      continue;
    }
    if (comm->queue.stopping && !comm->queue.busy) break;
    pthread_cond_wait(&comm->queue.exec_cond, &comm->queue.mutex);
  }
  pthread_mutex_unlock(&comm->queue.mutex);
  return NULL;
}

kolo_status kolo_queue_start(kolo_comm *comm) {
  if (pthread_create(&comm->executor, NULL, executor_main, comm) != 0) return KOLO_ERR_SYSTEM;
  comm->executor_started = 1;
  kolo_status status = kolo_engine_start(&comm->nego);
  if (status != KOLO_OK) kolo_queue_stop(comm);
  return status;
}

int kolo_queue_pending(kolo_comm *comm) {
  pthread_mutex_lock(&comm->queue.mutex);
  int pending = comm->queue.busy || comm->queue.queue_head != NULL || comm->queue.outstanding > 0;
  pthread_mutex_unlock(&comm->queue.mutex);
  return pending;
}

void kolo_queue_stop(kolo_comm *comm) {
  kolo_engine_stop(&comm->nego); /* first: it fails what it holds and hands nothing more over */
  pthread_mutex_lock(&comm->queue.mutex);
  comm->queue.stopping = 1;
  pthread_cond_broadcast(&comm->queue.exec_cond);
  pthread_mutex_unlock(&comm->queue.mutex);
  if (comm->executor_started) pthread_join(comm->executor, NULL);
  comm->executor_started = 0;
}

void kolo_queue_free(kolo_comm *comm) {
  while (comm->free_requests != NULL) {
    kolo_request *request = comm->free_requests;
    comm->free_requests = request->next;
    free(request);
  }
}

static int runs_on_device(const kolo_comm *comm, const kolo_request *request) {
  return request->kind != KOLO_REQUEST_BARRIER && request->name[0] == '\0' &&
         kolo_device_wanted(comm, request->send, request->recv);
}

/* An unnamed request in named mode: numbered and handed to the negotiator. */
static void submit_negotiated_locked(kolo_comm *comm, kolo_request *request) {
  request->negotiated = 1;
  request->seq = ++comm->nego.unnamed_issued;
  request->submitted_ns = kolo_now_ns();
  comm->queue.outstanding++;
  kolo_engine_submit_locked(&comm->nego, request);
}

static kolo_request *take_pooled_locked(kolo_comm *comm) {
  kolo_request *request = comm->free_requests;
  if (request != NULL) {
    comm->free_requests = request->next;
    return request;
  }
  return malloc(sizeof *request);
}

/* The latency path of a blocking unnamed operation before named mode: run on
 * the caller's thread at once when the executor has nothing (no hand-off), in
 * program order like the executor would. Under the mutex, which it drops while
 * the operation runs; returns 0 (mutex held, nothing done) when it cannot. */
static int run_inline_locked(kolo_comm *comm, kolo_request *request) {
  if (comm->queue.busy || comm->queue.queue_head != NULL) return 0;
  comm->queue.busy = 1;
  comm->nego.unnamed_issued++;
  pthread_mutex_unlock(&comm->queue.mutex);
  kolo_status status = kolo_exec_run(&comm->exec, request, 0);
  pthread_mutex_lock(&comm->queue.mutex);
  comm->queue.busy = 0;
  /* the executor only needs waking for what was queued meanwhile (waking it
   * for nothing cost a futex call and a context switch per operation) */
  if (comm->queue.queue_head != NULL || comm->queue.stopping)
    pthread_cond_signal(&comm->queue.exec_cond);
  kolo_request_complete_locked(&comm->queue, request, status);
  return 1;
}

kolo_status kolo_queue_submit(kolo_comm *comm, const kolo_request *prototype, int blocking,
                              kolo_request **out) {
  KOLO_CHECK(kolo_comm_hold_wait(comm)); /* the partition fence: nothing new starts */
  void *device = NULL;
  if (runs_on_device(comm, prototype)) KOLO_CHECK(kolo_device_submit(comm, prototype, &device));
  pthread_mutex_lock(&comm->queue.mutex);
  kolo_request *request = take_pooled_locked(comm);
  if (request == NULL) {
    pthread_mutex_unlock(&comm->queue.mutex);
    return KOLO_ERR_NO_MEMORY;
  }
  *request = *prototype;
  if (prototype->members == &prototype->single) request->members = &request->single;
  request->pooled = 1;
  request->done = 0;
  request->next = NULL;
  request->device_request = device;
  /* the negotiator takes the whole inbox at once: wake it for the first only */
  int wake = comm->nego.inbox_head == NULL;
  if (device != NULL) {
    wake = 0;
  } else if (request->name[0] != '\0') {
    comm->nego.named_mode = 1;
    request->negotiated = 1;
    request->submitted_ns = kolo_now_ns();
    comm->queue.outstanding++;
    kolo_engine_submit_locked(&comm->nego, request);
  } else if (comm->nego.named_mode) {
    submit_negotiated_locked(comm, request); /* a blocking caller's wait hurries it */
  } else {
    wake = 0;
    if (!blocking || !run_inline_locked(comm, request)) {
      comm->nego.unnamed_issued++;
      kolo_queue_push_locked(&comm->queue, request);
    }
  }
  pthread_mutex_unlock(&comm->queue.mutex);
  if (wake) kolo_net_wake(&comm->net);
  *out = request;
  return KOLO_OK;
}

kolo_status kolo_queue_run_blocking(kolo_comm *comm, const kolo_request *request) {
  kolo_request *submitted = NULL;
  KOLO_CHECK(kolo_queue_submit(comm, request, 1, &submitted));
  return kolo_wait(submitted);
}

/* Returns a request to the pool (under comm->queue.mutex), with what it still owns; a
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

void kolo_free(void *memory) {
  free(memory);
}

void kolo_request_wait_done_locked(kolo_comm *comm, kolo_request *request) {
  if (!request->done && request->negotiated && !comm->nego.hurry) {
    comm->nego.hurry = 1; /* someone waits: no point holding the cycle for more tensors */
    kolo_net_wake(&comm->net);
  }
  while (!request->done) pthread_cond_wait(&comm->queue.cond, &comm->queue.mutex);
}

kolo_status kolo_wait(kolo_request *request) {
  return kolo_wait_result(request, NULL);
}

kolo_status kolo_wait_result(kolo_request *request, kolo_result *result) {
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_comm *comm = request->comm;
  if (!request->negotiated && request->device_request != NULL) {
    kolo_status device_status = kolo_device_wait(comm, request->device_request);
    fill_result(request, device_status, result);
    pthread_mutex_lock(&comm->queue.mutex);
    release_request(comm, request);
    pthread_mutex_unlock(&comm->queue.mutex);
    return device_status;
  }
  pthread_mutex_lock(&comm->queue.mutex);
  kolo_request_wait_done_locked(comm, request);
  kolo_status status = request->status;
  if (request->device_request != NULL) { /* a negotiated device operation NCCL runs */
    pthread_mutex_unlock(&comm->queue.mutex);
    status = kolo_device_wait(comm, request->device_request);
    pthread_mutex_lock(&comm->queue.mutex);
    request->device_request = NULL;
  }
  fill_result(request, status, result);
  release_request(comm, request);
  pthread_mutex_unlock(&comm->queue.mutex);
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

/* kolo_test_result of a negotiated device operation the executor submitted to
 * NCCL (done, device_request set): whether NCCL has finished it. */
static kolo_status test_submitted(kolo_comm *comm, kolo_request *request, int *done,
                                  kolo_result *result) {
  kolo_status device_status = KOLO_OK;
  kolo_status rc = kolo_device_test(comm, request->device_request, done, &device_status);
  if (rc != KOLO_OK || !*done) return rc;
  pthread_mutex_lock(&comm->queue.mutex);
  request->device_request = NULL; /* freed by kolo_device_test */
  fill_result(request, device_status, result);
  release_request(comm, request);
  pthread_mutex_unlock(&comm->queue.mutex);
  return KOLO_OK;
}

kolo_status kolo_test_result(kolo_request *request, int *done, kolo_result *result) {
  if (request == NULL || done == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_comm *comm = request->comm;
  if (!request->negotiated && request->device_request != NULL) {
    kolo_status device_status = KOLO_OK;
    kolo_device_test(comm, request->device_request, done, &device_status);
    if (*done) {
      fill_result(request, device_status, result);
      pthread_mutex_lock(&comm->queue.mutex);
      release_request(comm, request);
      pthread_mutex_unlock(&comm->queue.mutex);
    }
    return KOLO_OK;
  }
  pthread_mutex_lock(&comm->queue.mutex);
  if (request->done && request->device_request != NULL) {
    pthread_mutex_unlock(&comm->queue.mutex);
    return test_submitted(comm, request, done, result);
  }
  *done = request->done;
  if (request->done) {
    fill_result(request, request->status, result);
    release_request(comm, request);
  }
  pthread_mutex_unlock(&comm->queue.mutex);
  return KOLO_OK;
}
