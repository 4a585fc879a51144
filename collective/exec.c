/* Running named requests on the ring: all-reduce with prescale and postscale,
 * several tensors fused through one buffer (a grouped all-reduce, and the
 * engine's fusion), the outputs the engine allocates, and per-request error
 * messages. Runs on whichever thread executes the request. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/internal.h"
#include "common/checks.h"
#include "common/log.h"

void kolo_request_message(kolo_request *request, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(request->message, sizeof request->message, fmt, args);
  va_end(args);
}

kolo_status kolo_output_allocate(kolo_request *request, size_t count) {
  size_t bytes = count * kolo_dtype_size(request->dtype);
  void *output = malloc(bytes > 0 ? bytes : 1);
  if (output == NULL) {
    kolo_comm *comm = request->comm;
    kolo_comm_fail(comm, KOLO_ERR_NO_MEMORY, comm->rank,
                   "rank %d: out of memory for the %zu-byte output of '%s'", comm->rank, bytes,
                   request->name);
    return KOLO_ERR_NO_MEMORY;
  }
  free(request->output);
  request->output = output;
  request->output_count = count;
  request->recv = output;
  return KOLO_OK;
}

/* One tensor alone: scale into recv first when asked, reduce in place, scale after. */
static kolo_status run_single(kolo_comm *comm, const kolo_fused_item *item, kolo_dtype dtype,
                              kolo_op op, int engine_thread) {
  const void *src = item->send;
  if (item->prescale != 1.0) {
    kolo_scale(item->recv, item->send, item->count, dtype, item->prescale);
    src = item->recv;
  }
  KOLO_CHECK(kolo_ring_allreduce(comm, src, item->recv, item->count, dtype, op, engine_thread));
  if (item->postscale != 1.0) kolo_scale(item->recv, item->recv, item->count, dtype, item->postscale);
  return KOLO_OK;
}

kolo_status kolo_exec_fused(kolo_comm *comm, const kolo_fused_item *items, int count,
                            kolo_dtype dtype, kolo_op op, int engine_thread) {
  if (count == 1) return run_single(comm, &items[0], dtype, op, engine_thread);
  size_t element = kolo_dtype_size(dtype), total = 0;
  for (int i = 0; i < count; i++) total += items[i].count;
  KOLO_CHECK(kolo_ensure_buffer(&comm->fusion, &comm->fusion_bytes, total * element));
  char *at = comm->fusion;
  for (int i = 0; i < count; i++) {
    size_t bytes = items[i].count * element;
    if (items[i].send == NULL) kolo_fill_identity(at, items[i].count, dtype, op); /* joined */
    else if (items[i].prescale != 1.0) kolo_scale(at, items[i].send, items[i].count, dtype, items[i].prescale);
    else if (bytes > 0) memcpy(at, items[i].send, bytes);
    at += bytes;
  }
  KOLO_CHECK(kolo_ring_allreduce(comm, comm->fusion, comm->fusion, total, dtype, op, engine_thread));
  at = comm->fusion;
  for (int i = 0; i < count; i++) {
    size_t bytes = items[i].count * element;
    if (items[i].recv != NULL && items[i].postscale != 1.0) {
      kolo_scale(items[i].recv, at, items[i].count, dtype, items[i].postscale);
    } else if (items[i].recv != NULL && bytes > 0) {
      memcpy(items[i].recv, at, bytes);
    }
    at += bytes;
  }
  return KOLO_OK;
}

kolo_status kolo_exec_allreduce(kolo_comm *comm, kolo_request *request, int engine_thread) {
  if (request->member_count == 0) { /* the unnamed API */
    return kolo_ring_allreduce(comm, request->send, request->recv, request->count, request->dtype,
                               request->op, engine_thread);
  }
  kolo_fused_item stack_items[8] = {{0}};
  kolo_fused_item *items = stack_items;
  if (request->member_count > 8) {
    items = malloc((size_t)request->member_count * sizeof *items);
    if (items == NULL) {
      kolo_comm_fail(comm, KOLO_ERR_NO_MEMORY, comm->rank, "rank %d: out of memory", comm->rank);
      return KOLO_ERR_NO_MEMORY;
    }
  }
  for (int i = 0; i < request->member_count; i++) {
    const kolo_member *m = &request->members[i];
    items[i] = (kolo_fused_item){.send = m->send, .recv = m->recv, .count = m->count,
                                 .prescale = request->prescale, .postscale = request->postscale};
  }
  kolo_status status = kolo_exec_fused(comm, items, request->member_count, request->dtype,
                                       request->op, engine_thread);
  if (items != stack_items) free(items);
  return status;
}

/* The first, order-bound join: every rank's join meets in one max-all-reduce of
 * the ranks, so the result names the highest rank (the negotiating engine will
 * name the one that really joined last). */
kolo_status kolo_exec_join(kolo_comm *comm, kolo_request *request, int engine_thread) {
  int32_t me = comm->rank, last = 0;
  KOLO_CHECK(kolo_ring_allreduce(comm, &me, &last, 1, KOLO_INT32, KOLO_MAX, engine_thread));
  request->last_rank = last;
  return KOLO_OK;
}
