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
                                       request->op, engine_thread, NULL);
  if (items != stack_items) free(items);
  return status;
}

/* A join: the negotiation already decided it (every rank joined; last_rank
 * set), and it reaches the executor only to complete after everything it took
 * part in. */
kolo_status kolo_exec_join(kolo_comm *comm, kolo_request *request, int engine_thread) {
  (void)comm, (void)request, (void)engine_thread;
  return KOLO_OK;
}
