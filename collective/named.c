/* The entry points of engine.h: argument checks (a bad name, dtype, op, root,
 * count or scale factor is KOLO_ERR_INVALID_ARG with a log line naming it, and
 * nothing is queued), the request each call becomes, and the in-flight name
 * check (a name submitted again before its request completed is
 * KOLO_ERR_EXISTS). In CUDA mode an operation whose buffers are device memory
 * is marked on_device: negotiated like any other (the place is part of what
 * ranks must agree on), then submitted to NCCL by the executor, ordered after
 * the caller's stream (the _on_stream forms; the legacy default stream
 * otherwise). What NCCL cannot do here is KOLO_ERR_UNSUPPORTED at submission:
 * scale factors, grouped all-reduce and all-to-all of device buffers, uneven
 * reduce-scatter blocks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/face.h"
#include "common/checks.h"
#include "common/log.h"

static kolo_status check_name(const char *name, const char *what) {
  size_t length = name ? strnlen(name, KOLO_NAME_MAX + 1) : 0;
  if (length == 0 || length > KOLO_NAME_MAX) {
    KOLO_LOGE("kolo", "%s: a name of 1..%d bytes is required", what, KOLO_NAME_MAX);
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

static kolo_status check_types(kolo_comm *comm, const char *name, kolo_dtype dtype, int has_op,
                               kolo_op op) {
  if (comm == NULL) return KOLO_ERR_INVALID_ARG;
  if ((unsigned)dtype >= KOLO_DTYPE_COUNT) {
    KOLO_LOGE("kolo", "'%s': unknown dtype %d", name, (int)dtype);
    return KOLO_ERR_INVALID_ARG;
  }
  if (has_op && (unsigned)op >= KOLO_OP_COUNT) {
    KOLO_LOGE("kolo", "'%s': unknown reduction op %d", name, (int)op);
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

static kolo_status check_buffer(const char *name, const void *buffer, size_t count,
                                const char *which) {
  if (count > SIZE_MAX / 16) {
    KOLO_LOGE("kolo", "'%s': count %zu too large", name, count);
    return KOLO_ERR_TOO_LARGE;
  }
  if (count > 0 && buffer == NULL) {
    KOLO_LOGE("kolo", "'%s': NULL %s buffer with count %zu", name, which, count);
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

static kolo_status check_scales(const char *name, kolo_dtype dtype, double prescale,
                                double postscale) {
  if (!isfinite(prescale) || !isfinite(postscale)) {
    KOLO_LOGE("kolo", "'%s': prescale and postscale must be finite", name);
    return KOLO_ERR_INVALID_ARG;
  }
  if (!kolo_dtype_is_floating(dtype) && (prescale != 1.0 || postscale != 1.0)) {
    KOLO_LOGE("kolo", "'%s': scale factors other than 1 need a floating dtype, not %s", name,
              kolo_dtype_name(dtype));
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

/* Where an operation's buffers live: *device 0 (host) or 1 (CUDA device memory,
 * CUDA mode only). One buffer on each side is KOLO_ERR_INVALID_ARG; a stream
 * given with host buffers too (stream_call). */
static kolo_status placement(kolo_comm *comm, const char *name, const void *a, const void *b,
                             int stream_call, int *device) {
  *device = kolo_device_wanted(comm, a, b);
  if (*device && ((a != NULL && !kolo_device_is_device_memory(comm, a)) ||
                  (b != NULL && !kolo_device_is_device_memory(comm, b)))) {
    KOLO_LOGE("kolo", "'%s': one buffer is host memory, the other CUDA device memory", name);
    return KOLO_ERR_INVALID_ARG;
  }
  if (stream_call && !*device) {
    KOLO_LOGE("kolo", "'%s': a stream-ordered operation needs CUDA mode and device buffers", name);
    return kolo_device_mode(comm, NULL) ? KOLO_ERR_INVALID_ARG : KOLO_ERR_STATE;
  }
  return KOLO_OK;
}

static kolo_status unsupported_on_device(const char *name, const char *what) {
  KOLO_LOGE("kolo", "'%s': %s of CUDA buffers is not supported", name, what);
  return KOLO_ERR_UNSUPPORTED;
}

/* Marks prototype as a device operation ordered after stream. */
static void on_device(kolo_request *prototype, void *stream) {
  prototype->on_device = 1;
  prototype->cuda_stream = stream;
}

/* Queues prototype under its name: KOLO_ERR_EXISTS if that name is in flight here. */
static kolo_status submit_named(kolo_comm *comm, kolo_request *prototype, kolo_request **out) {
  pthread_mutex_lock(&comm->queue.mutex);
  kolo_status status = kolo_names_put(comm->in_flight, prototype->name, prototype);
  pthread_mutex_unlock(&comm->queue.mutex);
  if (status == KOLO_ERR_EXISTS) {
    KOLO_LOGE("kolo", "rank %d: '%s' submitted again before its request completed", comm->net.rank,
              prototype->name);
  }
  if (status != KOLO_OK) {
    free(prototype->members == &prototype->single ? NULL : prototype->members);
    return status;
  }
  status = kolo_queue_submit(comm, prototype, out);
  if (status != KOLO_OK) {
    pthread_mutex_lock(&comm->queue.mutex);
    kolo_names_remove(comm->in_flight, prototype->name);
    pthread_mutex_unlock(&comm->queue.mutex);
    free(prototype->members == &prototype->single ? NULL : prototype->members);
  }
  return status;
}

static void prototype_init(kolo_request *prototype, kolo_comm *comm, kolo_request_kind kind,
                           const char *name, kolo_dtype dtype) {
  memset(prototype, 0, sizeof *prototype);
  prototype->comm = comm;
  prototype->kind = kind;
  prototype->dtype = dtype;
  prototype->prescale = prototype->postscale = 1.0;
  prototype->last_rank = -1;
  snprintf(prototype->name, sizeof prototype->name, "%s", name);
}

static kolo_status allreduce_named(kolo_comm *comm, const char *name, const void *send, void *recv,
                                   size_t count, kolo_dtype dtype, kolo_op op, double prescale,
                                   double postscale, int stream_call, void *stream,
                                   kolo_request **request) {
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(check_name(name, "allreduce"));
  KOLO_CHECK(check_types(comm, name, dtype, 1, op));
  KOLO_CHECK(check_buffer(name, send, count, "send"));
  KOLO_CHECK(check_buffer(name, recv, count, "recv"));
  KOLO_CHECK(check_scales(name, dtype, prescale, postscale));
  int device = 0;
  KOLO_CHECK(placement(comm, name, send, recv, stream_call, &device));
  if (device && (prescale != 1.0 || postscale != 1.0))
    return unsupported_on_device(name, "a scaled all-reduce");
  kolo_request prototype;
  prototype_init(&prototype, comm, KOLO_REQUEST_ALLREDUCE, name, dtype);
  if (device) on_device(&prototype, stream);
  prototype.send = send; /* what NCCL is given; the ring reads members */
  prototype.recv = recv;
  prototype.op = op;
  prototype.count = count;
  prototype.prescale = prescale;
  prototype.postscale = postscale;
  prototype.single = (kolo_member){.name = NULL, .send = send, .recv = recv, .count = count};
  prototype.members = &prototype.single;
  prototype.member_count = 1;
  return submit_named(comm, &prototype, request);
}

kolo_status kolo_allreduce_named(kolo_comm *comm, const char *name, const void *send, void *recv,
                                 size_t count, kolo_dtype dtype, kolo_op op, double prescale,
                                 double postscale, kolo_request **request) {
  return allreduce_named(comm, name, send, recv, count, dtype, op, prescale, postscale, 0, NULL,
                         request);
}

kolo_status kolo_allreduce_named_on_stream(kolo_comm *comm, const char *name, const void *send,
                                           void *recv, size_t count, kolo_dtype dtype, kolo_op op,
                                           void *cuda_stream, kolo_request **request) {
  return allreduce_named(comm, name, send, recv, count, dtype, op, 1.0, 1.0, 1, cuda_stream,
                         request);
}

/* Copies a group's member table and names into one allocation. */
static kolo_status copy_members(kolo_request *prototype, int n, const char *const *names,
                                const void *const *sends, void *const *recvs,
                                const size_t *counts) {
  size_t names_bytes = 0;
  for (int i = 0; i < n; i++) names_bytes += strlen(names[i]) + 1;
  kolo_member *members = malloc((size_t)n * sizeof *members + names_bytes);
  if (members == NULL) return KOLO_ERR_NO_MEMORY;
  char *text = (char *)(members + n);
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    size_t length = strlen(names[i]) + 1;
    memcpy(text, names[i], length);
    members[i] =
        (kolo_member){.name = text, .send = sends[i], .recv = recvs[i], .count = counts[i]};
    text += length;
    total += counts[i];
  }
  prototype->members = members;
  prototype->member_count = n;
  prototype->count = total;
  return KOLO_OK;
}

kolo_status kolo_grouped_allreduce_named(kolo_comm *comm, const char *group_name, int n,
                                         const char *const *names, const void *const *sends,
                                         void *const *recvs, const size_t *counts, kolo_dtype dtype,
                                         kolo_op op, double prescale, double postscale,
                                         kolo_request **request) {
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(check_name(group_name, "grouped allreduce"));
  KOLO_CHECK(check_types(comm, group_name, dtype, 1, op));
  KOLO_CHECK(check_scales(group_name, dtype, prescale, postscale));
  if (n < 1 || names == NULL || sends == NULL || recvs == NULL || counts == NULL) {
    KOLO_LOGE("kolo", "'%s': a group needs n >= 1 and its names, sends, recvs and counts",
              group_name);
    return KOLO_ERR_INVALID_ARG;
  }
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    KOLO_CHECK(check_name(names[i], group_name));
    KOLO_CHECK(check_buffer(names[i], sends[i], counts[i], "send"));
    KOLO_CHECK(check_buffer(names[i], recvs[i], counts[i], "recv"));
    int device = 0;
    KOLO_CHECK(placement(comm, names[i], sends[i], recvs[i], 0, &device));
    if (device) return unsupported_on_device(names[i], "a grouped all-reduce");
    if (counts[i] > SIZE_MAX / 16 - total) return KOLO_ERR_TOO_LARGE;
    total += counts[i];
  }
  kolo_request prototype;
  prototype_init(&prototype, comm, KOLO_REQUEST_ALLREDUCE, group_name, dtype);
  prototype.op = op;
  prototype.prescale = prescale;
  prototype.postscale = postscale;
  KOLO_CHECK(copy_members(&prototype, n, names, sends, recvs, counts));
  return submit_named(comm, &prototype, request);
}

static kolo_status allgather_named(kolo_comm *comm, const char *name, const void *send,
                                   size_t send_count, void *recv, size_t recv_capacity,
                                   size_t *recv_counts, kolo_dtype dtype, int stream_call,
                                   void *stream, kolo_request **request) {
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(check_name(name, "allgather"));
  KOLO_CHECK(check_types(comm, name, dtype, 0, KOLO_SUM));
  KOLO_CHECK(check_buffer(name, send, send_count, "send"));
  if (recv != NULL) KOLO_CHECK(check_buffer(name, recv, recv_capacity, "recv"));
  int device = 0;
  KOLO_CHECK(placement(comm, name, send, recv, stream_call, &device));
  if (device && recv == NULL)
    return unsupported_on_device(name, "an all-gather into engine memory");
  kolo_request prototype;
  prototype_init(&prototype, comm, KOLO_REQUEST_ALLGATHER, name, dtype);
  if (device) on_device(&prototype, stream);
  prototype.send = send;
  prototype.recv = recv;
  prototype.count = send_count;
  prototype.recv_capacity = recv_capacity;
  prototype.recv_counts = recv_counts;
  prototype.engine_output = recv == NULL;
  return submit_named(comm, &prototype, request);
}

kolo_status kolo_allgather_named(kolo_comm *comm, const char *name, const void *send,
                                 size_t send_count, void *recv, size_t recv_capacity,
                                 size_t *recv_counts, kolo_dtype dtype, kolo_request **request) {
  return allgather_named(comm, name, send, send_count, recv, recv_capacity, recv_counts, dtype, 0,
                         NULL, request);
}

kolo_status kolo_allgather_named_on_stream(kolo_comm *comm, const char *name, const void *send,
                                           size_t send_count, void *recv, size_t recv_capacity,
                                           size_t *recv_counts, kolo_dtype dtype, void *cuda_stream,
                                           kolo_request **request) {
  return allgather_named(comm, name, send, send_count, recv, recv_capacity, recv_counts, dtype, 1,
                         cuda_stream, request);
}

static kolo_status broadcast_named(kolo_comm *comm, const char *name, void *buffer, size_t count,
                                   kolo_dtype dtype, int root, int stream_call, void *stream,
                                   kolo_request **request) {
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(check_name(name, "broadcast"));
  KOLO_CHECK(check_types(comm, name, dtype, 0, KOLO_SUM));
  KOLO_CHECK(check_buffer(name, buffer, count, "data"));
  int device = 0;
  KOLO_CHECK(placement(comm, name, buffer, buffer, stream_call, &device));
  if (root < 0 || root >= comm->net.size) {
    KOLO_LOGE("kolo", "'%s': broadcast root %d outside 0..%d", name, root, comm->net.size - 1);
    return KOLO_ERR_INVALID_ARG;
  }
  kolo_request prototype;
  prototype_init(&prototype, comm, KOLO_REQUEST_BROADCAST, name, dtype);
  if (device) on_device(&prototype, stream);
  prototype.send = buffer;
  prototype.recv = buffer;
  prototype.count = count;
  prototype.root = root;
  return submit_named(comm, &prototype, request);
}

kolo_status kolo_broadcast_named(kolo_comm *comm, const char *name, void *buffer, size_t count,
                                 kolo_dtype dtype, int root, kolo_request **request) {
  return broadcast_named(comm, name, buffer, count, dtype, root, 0, NULL, request);
}

kolo_status kolo_broadcast_named_on_stream(kolo_comm *comm, const char *name, void *buffer,
                                           size_t count, kolo_dtype dtype, int root,
                                           void *cuda_stream, kolo_request **request) {
  return broadcast_named(comm, name, buffer, count, dtype, root, 1, cuda_stream, request);
}

/* Whether every rank's block has the same size (NCCL's reduce-scatter). */
static int even_blocks(const size_t *counts, int n) {
  for (int r = 1; r < n; r++) {
    if (counts[r] != counts[0]) return 0;
  }
  return 1;
}

static kolo_status reducescatter_named(kolo_comm *comm, const char *name, const void *send,
                                       void *recv, size_t count, const size_t *recv_counts,
                                       kolo_dtype dtype, kolo_op op, int stream_call, void *stream,
                                       kolo_request **request) {
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(check_name(name, "reducescatter"));
  KOLO_CHECK(check_types(comm, name, dtype, 1, op));
  KOLO_CHECK(check_buffer(name, send, count, "send"));
  size_t mine = 0, total = 0;
  if (recv_counts == NULL) {
    if (count % (size_t)comm->net.size != 0) {
      KOLO_LOGE("kolo", "'%s': count %zu does not divide evenly over %d ranks", name, count,
                comm->net.size);
      return KOLO_ERR_INVALID_ARG;
    }
    mine = count / (size_t)comm->net.size;
  } else {
    for (int r = 0; r < comm->net.size; r++) total += recv_counts[r];
    if (total != count) {
      KOLO_LOGE("kolo", "'%s': recv_counts sum to %zu, count is %zu", name, total, count);
      return KOLO_ERR_INVALID_ARG;
    }
    mine = recv_counts[comm->net.rank];
  }
  KOLO_CHECK(check_buffer(name, recv, mine, "recv"));
  int device = 0;
  KOLO_CHECK(placement(comm, name, send, recv, stream_call, &device));
  if (device && recv_counts != NULL && !even_blocks(recv_counts, comm->net.size))
    return unsupported_on_device(name, "a reduce-scatter with uneven blocks");
  kolo_request prototype;
  prototype_init(&prototype, comm, KOLO_REQUEST_REDUCESCATTER, name, dtype);
  if (device) on_device(&prototype, stream);
  prototype.op = op;
  prototype.send = send;
  prototype.recv = recv;
  prototype.count = recv_counts == NULL ? mine : count;
  prototype.split_counts = recv_counts;
  return submit_named(comm, &prototype, request);
}

kolo_status kolo_reducescatter_named(kolo_comm *comm, const char *name, const void *send,
                                     void *recv, size_t count, const size_t *recv_counts,
                                     kolo_dtype dtype, kolo_op op, kolo_request **request) {
  return reducescatter_named(comm, name, send, recv, count, recv_counts, dtype, op, 0, NULL,
                             request);
}

kolo_status kolo_reducescatter_named_on_stream(kolo_comm *comm, const char *name, const void *send,
                                               void *recv, size_t count, const size_t *recv_counts,
                                               kolo_dtype dtype, kolo_op op, void *cuda_stream,
                                               kolo_request **request) {
  return reducescatter_named(comm, name, send, recv, count, recv_counts, dtype, op, 1, cuda_stream,
                             request);
}

kolo_status kolo_alltoall_named(kolo_comm *comm, const char *name, const void *send,
                                const size_t *send_counts, void *recv, size_t recv_capacity,
                                size_t *recv_counts, kolo_dtype dtype, kolo_request **request) {
  if (request == NULL) return KOLO_ERR_INVALID_ARG;
  KOLO_CHECK(check_name(name, "alltoall"));
  KOLO_CHECK(check_types(comm, name, dtype, 0, KOLO_SUM));
  if (send_counts == NULL) {
    KOLO_LOGE("kolo", "'%s': alltoall needs send_counts", name);
    return KOLO_ERR_INVALID_ARG;
  }
  size_t total = 0;
  for (int r = 0; r < comm->net.size; r++) {
    if (send_counts[r] > SIZE_MAX / 16 - total) return KOLO_ERR_TOO_LARGE;
    total += send_counts[r];
  }
  KOLO_CHECK(check_buffer(name, send, total, "send"));
  if (recv != NULL) KOLO_CHECK(check_buffer(name, recv, recv_capacity, "recv"));
  int device = 0;
  KOLO_CHECK(placement(comm, name, send, recv, 0, &device));
  if (device) return unsupported_on_device(name, "an all-to-all");
  kolo_request prototype;
  prototype_init(&prototype, comm, KOLO_REQUEST_ALLTOALL, name, dtype);
  prototype.send = send;
  prototype.recv = recv;
  prototype.count = total;
  prototype.split_counts = send_counts;
  prototype.recv_capacity = recv_capacity;
  prototype.recv_counts = recv_counts;
  prototype.engine_output = recv == NULL;
  return submit_named(comm, &prototype, request);
}

kolo_status kolo_join_async(kolo_comm *comm, kolo_request **request) {
  if (comm == NULL || request == NULL) return KOLO_ERR_INVALID_ARG;
  kolo_request prototype;
  prototype_init(&prototype, comm, KOLO_REQUEST_JOIN, "\x01join", KOLO_UINT8);
  return submit_named(comm, &prototype, request);
}
