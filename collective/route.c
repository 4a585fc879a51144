/* The single route (issue 31): the options of every public submit function
 * resolved, its arguments checked (a bad name, dtype, op, count, buffer or scale
 * factor is KOLO_ERR_INVALID_ARG with a log line naming it, and nothing is
 * queued), and the one submission. Named operations go under their name (a name
 * submitted again before its request completed is KOLO_ERR_EXISTS) to the
 * negotiator; unnamed ones to the queue (queue.c), which runs them in program
 * order (a blocking one on the caller's thread when nothing is queued) until the
 * first named operation, and has them negotiated by position after it. In CUDA
 * mode an operation on device memory goes to NCCL: an unnamed one at once, a
 * named one (marked on_device) once negotiated, ordered after the caller's stream
 * (KOLO_OP_STREAM) or the legacy default stream. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/route.h"
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

kolo_status kolo_route_begin(kolo_comm *comm, const kolo_op_options *options, const char *what,
                             kolo_request **out, kolo_route *route) {
  static const kolo_op_options defaults = {0};
  const kolo_op_options *o = options != NULL ? options : &defaults;
  if (comm == NULL || out == NULL) return KOLO_ERR_INVALID_ARG;
  if ((o->flags & ~(KOLO_OP_BLOCKING | KOLO_OP_STREAM)) != 0) {
    KOLO_LOGE("kolo", "%s: unknown option flags 0x%x", what, o->flags);
    return KOLO_ERR_INVALID_ARG;
  }
  if (o->process_set != 0) {
    KOLO_LOGE("kolo", "%s: process_set %d: only 0 (the communicator's own ranks) for now", what,
              o->process_set);
    return KOLO_ERR_INVALID_ARG;
  }
  if (o->name != NULL) KOLO_CHECK(check_name(o->name, what));
  *route = (kolo_route){.name = o->name,
                        .what = o->name != NULL ? o->name : what,
                        .stream = o->cuda_stream,
                        .stream_call = (o->flags & KOLO_OP_STREAM) != 0,
                        .blocking = (o->flags & KOLO_OP_BLOCKING) != 0,
                        .prescale = o->prescale == 0.0 ? 1.0 : o->prescale,
                        .postscale = o->postscale == 0.0 ? 1.0 : o->postscale,
                        .alloc = o->alloc,
                        .alloc_context = o->alloc_context};
  return KOLO_OK;
}

kolo_status kolo_route_check_types(const kolo_route *route, kolo_dtype dtype, int has_op,
                                   kolo_op op) {
  if ((unsigned)dtype >= KOLO_DTYPE_COUNT) {
    KOLO_LOGE("kolo", "'%s': unknown dtype %d", route->what, (int)dtype);
    return KOLO_ERR_INVALID_ARG;
  }
  if (has_op && (unsigned)op >= KOLO_OP_COUNT) {
    KOLO_LOGE("kolo", "'%s': unknown reduction op %d", route->what, (int)op);
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

kolo_status kolo_route_check_buffer(const char *what, const void *buffer, size_t count,
                                    const char *which) {
  if (count > SIZE_MAX / 16) {
    KOLO_LOGE("kolo", "'%s': count %zu too large", what, count);
    return KOLO_ERR_TOO_LARGE;
  }
  if (count > 0 && buffer == NULL) {
    KOLO_LOGE("kolo", "'%s': NULL %s buffer with count %zu", what, which, count);
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

kolo_status kolo_route_check_scales(const kolo_route *route, kolo_dtype dtype) {
  if (!isfinite(route->prescale) || !isfinite(route->postscale)) {
    KOLO_LOGE("kolo", "'%s': prescale and postscale must be finite", route->what);
    return KOLO_ERR_INVALID_ARG;
  }
  if (!kolo_dtype_is_floating(dtype) && (route->prescale != 1.0 || route->postscale != 1.0)) {
    KOLO_LOGE("kolo", "'%s': scale factors other than 1 need a floating dtype, not %s", route->what,
              kolo_dtype_name(dtype));
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

kolo_status kolo_route_place(kolo_comm *comm, const kolo_route *route, const void *a, const void *b,
                             int *device) {
  *device = kolo_device_wanted(comm, a, b);
  if (route->name == NULL) return KOLO_OK; /* an unnamed stream call: kolo_route_submit */
  if (*device && ((a != NULL && !kolo_device_is_device_memory(comm, a)) ||
                  (b != NULL && !kolo_device_is_device_memory(comm, b)))) {
    KOLO_LOGE("kolo", "'%s': one buffer is host memory, the other CUDA device memory", route->what);
    return KOLO_ERR_INVALID_ARG;
  }
  if (route->stream_call && !*device) {
    KOLO_LOGE("kolo", "'%s': a stream-ordered operation needs CUDA mode and device buffers",
              route->what);
    return kolo_device_mode(comm, NULL) ? KOLO_ERR_INVALID_ARG : KOLO_ERR_STATE;
  }
  return KOLO_OK;
}

kolo_status kolo_route_unsupported_on_device(const kolo_route *route, const char *what) {
  KOLO_LOGE("kolo", "'%s': %s of CUDA buffers is not supported", route->what, what);
  return KOLO_ERR_UNSUPPORTED;
}

void kolo_route_prototype(kolo_request *prototype, kolo_comm *comm, const kolo_route *route,
                          kolo_request_kind kind, kolo_dtype dtype, int device) {
  memset(prototype, 0, sizeof *prototype);
  prototype->comm = comm;
  prototype->kind = kind;
  prototype->dtype = dtype;
  prototype->prescale = prototype->postscale = 1.0;
  prototype->last_rank = -1;
  if (route->name != NULL) snprintf(prototype->name, sizeof prototype->name, "%s", route->name);
  if (route->stream_call) prototype->cuda_stream = route->stream;
  prototype->output_alloc = route->alloc;
  prototype->output_alloc_context = route->alloc_context;
  /* a named device operation is negotiated first, then submitted to NCCL by the
   * executor; an unnamed one goes to NCCL at submission (kolo_queue_submit) */
  if (device && route->name != NULL) prototype->on_device = 1;
}

static void free_members(kolo_request *prototype) {
  if (prototype->members != &prototype->single) free(prototype->members);
  prototype->members = NULL;
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
    free_members(prototype);
    return status;
  }
  status = kolo_queue_submit(comm, prototype, 0, out);
  if (status != KOLO_OK) {
    pthread_mutex_lock(&comm->queue.mutex);
    kolo_names_remove(comm->in_flight, prototype->name);
    pthread_mutex_unlock(&comm->queue.mutex);
    free_members(prototype);
  }
  return status;
}

kolo_status kolo_route_submit(kolo_comm *comm, const kolo_route *route, kolo_request *prototype,
                              kolo_request **out) {
  if (prototype->name[0] != '\0') return submit_named(comm, prototype, out);
  kolo_status status = KOLO_OK;
  if (route->stream_call) status = kolo_device_check_stream_call(comm, prototype);
  if (status == KOLO_OK) status = kolo_queue_submit(comm, prototype, route->blocking, out);
  if (status != KOLO_OK) free_members(prototype);
  return status;
}
