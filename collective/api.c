/* The public operations, one submit function each (kolo.h, engine.h): every
 * one resolves its options and checks its arguments (route.c), builds one
 * request and hands it to kolo_route_submit. The blocking calls and the older
 * forms are inline wrappers in the headers (submit + kolo_wait). Gradient
 * scaling is decided here, for the all-reduces alone, and applied in one place:
 * the fused all-reduce of the execution floor (exec/fusion.c), which a scaled
 * request reaches through its member table, named or not. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/route.h"
#include "common/checks.h"
#include "common/log.h"

kolo_status kolo_allreduce_submit(kolo_comm *comm, const void *send, void *recv, size_t count,
                                  kolo_dtype dtype, kolo_op op, const kolo_op_options *options,
                                  kolo_request **request) {
  kolo_route route;
  KOLO_CHECK(kolo_route_begin(comm, options, "allreduce", request, &route));
  KOLO_CHECK(kolo_route_check_types(&route, dtype, 1, op));
  KOLO_CHECK(kolo_route_check_buffer(route.what, send, count, "send"));
  KOLO_CHECK(kolo_route_check_buffer(route.what, recv, count, "recv"));
  KOLO_CHECK(kolo_route_check_scales(&route, dtype));
  int device = 0, scaled = route.prescale != 1.0 || route.postscale != 1.0;
  KOLO_CHECK(kolo_route_place(comm, &route, send, recv, &device));
  if (device && scaled) return kolo_route_unsupported_on_device(&route, "a scaled all-reduce");
  kolo_request prototype;
  kolo_route_prototype(&prototype, comm, &route, KOLO_REQUEST_ALLREDUCE, dtype, device);
  prototype.send = send; /* what NCCL and the unnamed ring path are given */
  prototype.recv = recv;
  prototype.op = op;
  prototype.count = count;
  if (route.name != NULL || scaled) { /* the fused path: negotiated, or scaled */
    prototype.prescale = route.prescale;
    prototype.postscale = route.postscale;
    prototype.single = (kolo_member){.name = NULL, .send = send, .recv = recv, .count = count};
    prototype.members = &prototype.single;
    prototype.member_count = 1;
  }
  return kolo_route_submit(comm, &route, &prototype, request);
}

kolo_status kolo_allgather_submit(kolo_comm *comm, const void *send, size_t send_count, void *recv,
                                  size_t recv_capacity, size_t *recv_counts, kolo_dtype dtype,
                                  const kolo_op_options *options, kolo_request **request) {
  kolo_route route;
  KOLO_CHECK(kolo_route_begin(comm, options, "allgather", request, &route));
  KOLO_CHECK(kolo_route_check_types(&route, dtype, 0, KOLO_SUM));
  KOLO_CHECK(kolo_route_check_buffer(route.what, send, send_count, "send"));
  if (recv != NULL) KOLO_CHECK(kolo_route_check_buffer(route.what, recv, recv_capacity, "recv"));
  if (send_count > SIZE_MAX / 16 / (size_t)comm->net.size) return KOLO_ERR_TOO_LARGE;
  int device = 0;
  KOLO_CHECK(kolo_route_place(comm, &route, send, recv, &device));
  if (device && recv == NULL)
    return kolo_route_unsupported_on_device(&route, "an all-gather into engine memory");
  kolo_request prototype;
  kolo_route_prototype(&prototype, comm, &route, KOLO_REQUEST_ALLGATHER, dtype, device);
  prototype.send = send;
  prototype.recv = recv;
  prototype.count = send_count;
  prototype.recv_capacity = recv_capacity;
  prototype.recv_counts = recv_counts;
  prototype.engine_output = recv == NULL;
  return kolo_route_submit(comm, &route, &prototype, request);
}

kolo_status kolo_broadcast_submit(kolo_comm *comm, void *buffer, size_t count, kolo_dtype dtype,
                                  int root, const kolo_op_options *options,
                                  kolo_request **request) {
  kolo_route route;
  KOLO_CHECK(kolo_route_begin(comm, options, "broadcast", request, &route));
  KOLO_CHECK(kolo_route_check_types(&route, dtype, 0, KOLO_SUM));
  KOLO_CHECK(kolo_route_check_buffer(route.what, buffer, count, "data"));
  int device = 0;
  KOLO_CHECK(kolo_route_place(comm, &route, buffer, buffer, &device));
  if (root < 0 || root >= comm->net.size) {
    KOLO_LOGE("kolo", "'%s': broadcast root %d outside 0..%d", route.what, root,
              comm->net.size - 1);
    return KOLO_ERR_INVALID_ARG;
  }
  kolo_request prototype;
  kolo_route_prototype(&prototype, comm, &route, KOLO_REQUEST_BROADCAST, dtype, device);
  prototype.send = buffer;
  prototype.recv = buffer;
  prototype.count = count;
  prototype.root = root;
  return kolo_route_submit(comm, &route, &prototype, request);
}

/* Whether every rank's block has the same size (NCCL's reduce-scatter). */
static int even_blocks(const size_t *counts, int n) {
  for (int r = 1; r < n; r++) {
    if (counts[r] != counts[0]) return 0;
  }
  return 1;
}

/* This rank's block of a reduce-scatter of count elements. */
static kolo_status reducescatter_block(kolo_comm *comm, const kolo_route *route, size_t count,
                                       const size_t *recv_counts, size_t *mine) {
  if (recv_counts == NULL) {
    if (count % (size_t)comm->net.size != 0) {
      KOLO_LOGE("kolo", "'%s': count %zu does not divide evenly over %d ranks", route->what, count,
                comm->net.size);
      return KOLO_ERR_INVALID_ARG;
    }
    *mine = count / (size_t)comm->net.size;
    return KOLO_OK;
  }
  size_t total = 0;
  for (int r = 0; r < comm->net.size; r++) total += recv_counts[r];
  if (total != count) {
    KOLO_LOGE("kolo", "'%s': recv_counts sum to %zu, count is %zu", route->what, total, count);
    return KOLO_ERR_INVALID_ARG;
  }
  *mine = recv_counts[comm->net.rank];
  return KOLO_OK;
}

kolo_status kolo_reducescatter_submit(kolo_comm *comm, const void *send, void *recv, size_t count,
                                      const size_t *recv_counts, kolo_dtype dtype, kolo_op op,
                                      const kolo_op_options *options, kolo_request **request) {
  kolo_route route;
  size_t mine = 0;
  KOLO_CHECK(kolo_route_begin(comm, options, "reducescatter", request, &route));
  KOLO_CHECK(kolo_route_check_types(&route, dtype, 1, op));
  KOLO_CHECK(kolo_route_check_buffer(route.what, send, count, "send"));
  KOLO_CHECK(reducescatter_block(comm, &route, count, recv_counts, &mine));
  KOLO_CHECK(kolo_route_check_buffer(route.what, recv, mine, "recv"));
  int device = 0;
  KOLO_CHECK(kolo_route_place(comm, &route, send, recv, &device));
  if (device && recv_counts != NULL && !even_blocks(recv_counts, comm->net.size))
    return kolo_route_unsupported_on_device(&route, "a reduce-scatter with uneven blocks");
  /* an unnamed device operation goes to NCCL as it is: equal blocks by count */
  if (device && route.name == NULL) recv_counts = NULL;
  kolo_request prototype;
  kolo_route_prototype(&prototype, comm, &route, KOLO_REQUEST_REDUCESCATTER, dtype, device);
  prototype.op = op;
  prototype.send = send;
  prototype.recv = recv;
  prototype.count = recv_counts == NULL ? mine : count;
  prototype.split_counts = recv_counts;
  return kolo_route_submit(comm, &route, &prototype, request);
}

kolo_status kolo_barrier_submit(kolo_comm *comm, const kolo_op_options *options,
                                kolo_request **request) {
  kolo_route route;
  KOLO_CHECK(kolo_route_begin(comm, options, "barrier", request, &route));
  if (route.name != NULL || route.stream_call) {
    KOLO_LOGE("kolo", "barrier: takes no name and no stream");
    return KOLO_ERR_INVALID_ARG;
  }
  kolo_request prototype;
  kolo_route_prototype(&prototype, comm, &route, KOLO_REQUEST_BARRIER, KOLO_UINT8, 0);
  return kolo_route_submit(comm, &route, &prototype, request);
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

/* A group's members: names, buffers on the host, a total that fits. */
static kolo_status check_group(kolo_comm *comm, const kolo_route *route, int n,
                               const char *const *names, const void *const *sends,
                               void *const *recvs, const size_t *counts) {
  if (n < 1 || names == NULL || sends == NULL || recvs == NULL || counts == NULL) {
    KOLO_LOGE("kolo", "'%s': a group needs n >= 1 and its names, sends, recvs and counts",
              route->what);
    return KOLO_ERR_INVALID_ARG;
  }
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    kolo_route member = *route;
    member.name = member.what = names[i];
    if (names[i] == NULL || names[i][0] == '\0' || strlen(names[i]) > KOLO_NAME_MAX) {
      KOLO_LOGE("kolo", "%s: a name of 1..%d bytes is required", route->what, KOLO_NAME_MAX);
      return KOLO_ERR_INVALID_ARG;
    }
    KOLO_CHECK(kolo_route_check_buffer(names[i], sends[i], counts[i], "send"));
    KOLO_CHECK(kolo_route_check_buffer(names[i], recvs[i], counts[i], "recv"));
    int device = 0;
    member.stream_call = 0;
    KOLO_CHECK(kolo_route_place(comm, &member, sends[i], recvs[i], &device));
    if (device) return kolo_route_unsupported_on_device(&member, "a grouped all-reduce");
    if (counts[i] > SIZE_MAX / 16 - total) return KOLO_ERR_TOO_LARGE;
    total += counts[i];
  }
  return KOLO_OK;
}

kolo_status kolo_grouped_allreduce_submit(kolo_comm *comm, int n, const char *const *names,
                                          const void *const *sends, void *const *recvs,
                                          const size_t *counts, kolo_dtype dtype, kolo_op op,
                                          const kolo_op_options *options, kolo_request **request) {
  kolo_route route;
  KOLO_CHECK(kolo_route_begin(comm, options, "grouped allreduce", request, &route));
  if (route.name == NULL) {
    KOLO_LOGE("kolo", "grouped allreduce: a name of 1..%d bytes is required", KOLO_NAME_MAX);
    return KOLO_ERR_INVALID_ARG;
  }
  KOLO_CHECK(kolo_route_check_types(&route, dtype, 1, op));
  KOLO_CHECK(kolo_route_check_scales(&route, dtype));
  KOLO_CHECK(check_group(comm, &route, n, names, sends, recvs, counts));
  kolo_request prototype;
  kolo_route_prototype(&prototype, comm, &route, KOLO_REQUEST_ALLREDUCE, dtype, 0);
  prototype.op = op;
  prototype.prescale = route.prescale;
  prototype.postscale = route.postscale;
  KOLO_CHECK(copy_members(&prototype, n, names, sends, recvs, counts));
  return kolo_route_submit(comm, &route, &prototype, request);
}

kolo_status kolo_alltoall_submit(kolo_comm *comm, const void *send, const size_t *send_counts,
                                 void *recv, size_t recv_capacity, size_t *recv_counts,
                                 kolo_dtype dtype, const kolo_op_options *options,
                                 kolo_request **request) {
  kolo_route route;
  KOLO_CHECK(kolo_route_begin(comm, options, "alltoall", request, &route));
  if (route.name == NULL || send_counts == NULL) {
    KOLO_LOGE("kolo", "'%s': alltoall needs a name and send_counts", route.what);
    return KOLO_ERR_INVALID_ARG;
  }
  KOLO_CHECK(kolo_route_check_types(&route, dtype, 0, KOLO_SUM));
  size_t total = 0;
  for (int r = 0; r < comm->net.size; r++) {
    if (send_counts[r] > SIZE_MAX / 16 - total) return KOLO_ERR_TOO_LARGE;
    total += send_counts[r];
  }
  KOLO_CHECK(kolo_route_check_buffer(route.what, send, total, "send"));
  if (recv != NULL) KOLO_CHECK(kolo_route_check_buffer(route.what, recv, recv_capacity, "recv"));
  int device = 0;
  route.stream_call = 0;
  KOLO_CHECK(kolo_route_place(comm, &route, send, recv, &device));
  if (device) return kolo_route_unsupported_on_device(&route, "an all-to-all");
  kolo_request prototype;
  kolo_route_prototype(&prototype, comm, &route, KOLO_REQUEST_ALLTOALL, dtype, 0);
  prototype.send = send;
  prototype.recv = recv;
  prototype.count = total;
  prototype.split_counts = send_counts;
  prototype.recv_capacity = recv_capacity;
  prototype.recv_counts = recv_counts;
  prototype.engine_output = recv == NULL;
  return kolo_route_submit(comm, &route, &prototype, request);
}

kolo_status kolo_join_submit(kolo_comm *comm, const kolo_op_options *options,
                             kolo_request **request) {
  kolo_route route;
  KOLO_CHECK(kolo_route_begin(comm, options, "join", request, &route));
  if (route.name != NULL || route.stream_call) {
    KOLO_LOGE("kolo", "join: takes no name and no stream");
    return KOLO_ERR_INVALID_ARG;
  }
  kolo_request prototype;
  kolo_route_prototype(&prototype, comm, &route, KOLO_REQUEST_JOIN, KOLO_UINT8, 0);
  snprintf(prototype.name, sizeof prototype.name, "%s", "\x01join");
  return kolo_route_submit(comm, &route, &prototype, request);
}
