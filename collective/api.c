/* The public collective entry points of kolo.h: argument checks, a request
 * built from them, and the queue (queue.c) that runs it blocking or not. */
#include <stdint.h>

#include "collective/face.h"
#include "common/checks.h"
#include "common/log.h"

static kolo_status check_common(kolo_comm *comm, kolo_dtype dtype, size_t count, const void *a,
                                const void *b) {
  if (comm == NULL) return KOLO_ERR_INVALID_ARG;
  if ((unsigned)dtype >= KOLO_DTYPE_COUNT) {
    KOLO_LOGE("kolo", "unknown dtype %d", (int)dtype);
    return KOLO_ERR_INVALID_ARG;
  }
  if (count > SIZE_MAX / 8 / (size_t)(comm->net.size > 0 ? comm->net.size : 1))
    return KOLO_ERR_TOO_LARGE;
  if (count > 0 && (a == NULL || b == NULL)) {
    KOLO_LOGE("kolo", "NULL buffer with count %zu", count);
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

static kolo_status check_op(kolo_op op) {
  if ((unsigned)op >= KOLO_OP_COUNT) {
    KOLO_LOGE("kolo", "unknown reduction op %d", (int)op);
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

static kolo_status prepare_allreduce(kolo_comm *comm, const void *send, void *recv, size_t count,
                                     kolo_dtype dtype, kolo_op op, kolo_request *request) {
  KOLO_CHECK(check_common(comm, dtype, count, send, recv));
  KOLO_CHECK(check_op(op));
  *request = (kolo_request){.comm = comm,
                            .kind = KOLO_REQUEST_ALLREDUCE,
                            .send = send,
                            .recv = recv,
                            .count = count,
                            .dtype = dtype,
                            .op = op};
  return KOLO_OK;
}

static kolo_status prepare_allgather(kolo_comm *comm, const void *send, size_t send_count,
                                     void *recv, size_t recv_capacity, size_t *recv_counts,
                                     kolo_dtype dtype, kolo_request *request) {
  KOLO_CHECK(check_common(comm, dtype, send_count, send, send));
  KOLO_CHECK(check_common(comm, dtype, recv_capacity, recv, recv));
  *request = (kolo_request){.comm = comm,
                            .kind = KOLO_REQUEST_ALLGATHER,
                            .send = send,
                            .recv = recv,
                            .count = send_count,
                            .recv_capacity = recv_capacity,
                            .recv_counts = recv_counts,
                            .dtype = dtype};
  return KOLO_OK;
}

static kolo_status prepare_broadcast(kolo_comm *comm, void *buffer, size_t count, kolo_dtype dtype,
                                     int root, kolo_request *request) {
  KOLO_CHECK(check_common(comm, dtype, count, buffer, buffer));
  if (root < 0 || root >= comm->net.size) {
    KOLO_LOGE("kolo", "broadcast root %d outside 0..%d", root, comm->net.size - 1);
    return KOLO_ERR_INVALID_ARG;
  }
  *request = (kolo_request){.comm = comm,
                            .kind = KOLO_REQUEST_BROADCAST,
                            .send = buffer,
                            .recv = buffer,
                            .count = count,
                            .dtype = dtype,
                            .root = root};
  return KOLO_OK;
}

static kolo_status prepare_reducescatter(kolo_comm *comm, const void *send, void *recv,
                                         size_t recv_count, kolo_dtype dtype, kolo_op op,
                                         kolo_request *request) {
  KOLO_CHECK(check_common(comm, dtype, recv_count, send, recv));
  KOLO_CHECK(check_op(op));
  *request = (kolo_request){.comm = comm,
                            .kind = KOLO_REQUEST_REDUCESCATTER,
                            .send = send,
                            .recv = recv,
                            .count = recv_count,
                            .dtype = dtype,
                            .op = op};
  return KOLO_OK;
}

static kolo_status prepare_barrier(kolo_comm *comm, kolo_request *request) {
  if (comm == NULL) return KOLO_ERR_INVALID_ARG;
  *request = (kolo_request){.comm = comm, .kind = KOLO_REQUEST_BARRIER};
  return KOLO_OK;
}

kolo_status kolo_allreduce_async(kolo_comm *comm, const void *send, void *recv, size_t count,
                                 kolo_dtype dtype, kolo_op op, kolo_request **request) {
  kolo_request prototype;
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(prepare_allreduce(comm, send, recv, count, dtype, op, &prototype));
  return kolo_queue_submit(comm, &prototype, request);
}

kolo_status kolo_allreduce(kolo_comm *comm, const void *send, void *recv, size_t count,
                           kolo_dtype dtype, kolo_op op) {
  kolo_request request;
  KOLO_CHECK(prepare_allreduce(comm, send, recv, count, dtype, op, &request));
  return kolo_queue_run_blocking(comm, &request);
}

kolo_status kolo_allgather_async(kolo_comm *comm, const void *send, size_t send_count, void *recv,
                                 size_t recv_capacity, size_t *recv_counts, kolo_dtype dtype,
                                 kolo_request **request) {
  kolo_request prototype;
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(prepare_allgather(comm, send, send_count, recv, recv_capacity, recv_counts, dtype,
                               &prototype));
  return kolo_queue_submit(comm, &prototype, request);
}

kolo_status kolo_allgather(kolo_comm *comm, const void *send, size_t send_count, void *recv,
                           size_t recv_capacity, size_t *recv_counts, kolo_dtype dtype) {
  kolo_request request;
  KOLO_CHECK(
      prepare_allgather(comm, send, send_count, recv, recv_capacity, recv_counts, dtype, &request));
  return kolo_queue_run_blocking(comm, &request);
}

kolo_status kolo_broadcast_async(kolo_comm *comm, void *buffer, size_t count, kolo_dtype dtype,
                                 int root, kolo_request **request) {
  kolo_request prototype;
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(prepare_broadcast(comm, buffer, count, dtype, root, &prototype));
  return kolo_queue_submit(comm, &prototype, request);
}

kolo_status kolo_broadcast(kolo_comm *comm, void *buffer, size_t count, kolo_dtype dtype,
                           int root) {
  kolo_request request;
  KOLO_CHECK(prepare_broadcast(comm, buffer, count, dtype, root, &request));
  return kolo_queue_run_blocking(comm, &request);
}

kolo_status kolo_reducescatter_async(kolo_comm *comm, const void *send, void *recv,
                                     size_t recv_count, kolo_dtype dtype, kolo_op op,
                                     kolo_request **request) {
  kolo_request prototype;
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(prepare_reducescatter(comm, send, recv, recv_count, dtype, op, &prototype));
  return kolo_queue_submit(comm, &prototype, request);
}

kolo_status kolo_reducescatter(kolo_comm *comm, const void *send, void *recv, size_t recv_count,
                               kolo_dtype dtype, kolo_op op) {
  kolo_request request;
  KOLO_CHECK(prepare_reducescatter(comm, send, recv, recv_count, dtype, op, &request));
  return kolo_queue_run_blocking(comm, &request);
}

/* The stream-ordered forms: the same checks, then CUDA mode and device buffers
 * required (device.c), then queued like any request (it goes to NCCL). */
static kolo_status submit_on_stream(kolo_comm *comm, kolo_request *prototype, void *stream,
                                    kolo_request **request) {
  prototype->cuda_stream = stream;
  KOLO_CHECK(kolo_device_check_stream_call(comm, prototype));
  return kolo_queue_submit(comm, prototype, request);
}

kolo_status kolo_allreduce_on_stream(kolo_comm *comm, const void *send, void *recv, size_t count,
                                     kolo_dtype dtype, kolo_op op, void *cuda_stream,
                                     kolo_request **request) {
  kolo_request prototype;
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(prepare_allreduce(comm, send, recv, count, dtype, op, &prototype));
  return submit_on_stream(comm, &prototype, cuda_stream, request);
}

kolo_status kolo_allgather_on_stream(kolo_comm *comm, const void *send, size_t send_count,
                                     void *recv, size_t recv_capacity, size_t *recv_counts,
                                     kolo_dtype dtype, void *cuda_stream, kolo_request **request) {
  kolo_request prototype;
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(prepare_allgather(comm, send, send_count, recv, recv_capacity, recv_counts, dtype,
                               &prototype));
  return submit_on_stream(comm, &prototype, cuda_stream, request);
}

kolo_status kolo_broadcast_on_stream(kolo_comm *comm, void *buffer, size_t count, kolo_dtype dtype,
                                     int root, void *cuda_stream, kolo_request **request) {
  kolo_request prototype;
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(prepare_broadcast(comm, buffer, count, dtype, root, &prototype));
  return submit_on_stream(comm, &prototype, cuda_stream, request);
}

kolo_status kolo_reducescatter_on_stream(kolo_comm *comm, const void *send, void *recv,
                                         size_t recv_count, kolo_dtype dtype, kolo_op op,
                                         void *cuda_stream, kolo_request **request) {
  kolo_request prototype;
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(prepare_reducescatter(comm, send, recv, recv_count, dtype, op, &prototype));
  return submit_on_stream(comm, &prototype, cuda_stream, request);
}

kolo_status kolo_barrier_async(kolo_comm *comm, kolo_request **request) {
  kolo_request prototype;
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(prepare_barrier(comm, &prototype));
  return kolo_queue_submit(comm, &prototype, request);
}

kolo_status kolo_barrier(kolo_comm *comm) {
  kolo_request request;
  KOLO_CHECK(prepare_barrier(comm, &request));
  return kolo_queue_run_blocking(comm, &request);
}
