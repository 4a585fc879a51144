/* Running named requests on the ring: the join, the reduce-scatter while ranks
 * have joined, the outputs the engine allocates, and per-request error
 * messages (the all-reduce, with its prescale and postscale, and several
 * tensors fused through one buffer are fusion.c's). Runs on whichever thread
 * executes the request. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/exec/exec.h"
#include "common/checks.h"
#include "common/log.h"

void kolo_request_message(kolo_request *request, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(request->message, sizeof request->message, fmt, args);
  va_end(args);
}

/* The caller's allocator (kolo_op_options.alloc) gives memory the caller keeps;
 * nothing is asked for an empty output, whose zero-byte copies need a non-NULL
 * address all the same. */
static void *caller_output(kolo_request *request, size_t count) {
  static unsigned char empty[1];
  if (count == 0) return empty;
  return request->output_alloc(request->output_alloc_context, count);
}

kolo_status kolo_output_allocate(kolo_exec *ex, kolo_request *request, size_t count) {
  size_t bytes = count * kolo_dtype_size(request->dtype);
  int caller = request->output_alloc != NULL;
  void *output = caller ? caller_output(request, count) : malloc(bytes > 0 ? bytes : 1);
  if (output == NULL) {
    kolo_net_fail(ex->ring->net, KOLO_ERR_NO_MEMORY, ex->ring->net->rank,
                  "rank %d: %s for the %zu-byte output of '%s'", ex->ring->net->rank,
                  caller ? "the caller's allocator gave no memory" : "out of memory", bytes,
                  request->name);
    return KOLO_ERR_NO_MEMORY;
  }
  free(request->output);
  request->output = caller ? NULL : output;
  request->output_count = count;
  request->recv = output;
  return KOLO_OK;
}

/* A join: the negotiation already decided it (every rank joined; last_rank
 * set), and it reaches the executor only to complete after everything it took
 * part in. */
kolo_status kolo_exec_join(kolo_exec *ex, kolo_request *request, int engine_thread) {
  (void)ex, (void)request, (void)engine_thread;
  return KOLO_OK;
}

/* Every rank takes the reduce-scatter's recv counts from the rank that shares
 * them (an int64 broadcast of size entries): a joined rank has none of its own. */
static kolo_status share_counts(kolo_exec *ex, const kolo_request *request, int root,
                                size_t *counts, int engine_thread) {
  int n = ex->ring->net->size;
  int64_t *shared = calloc((size_t)n, sizeof *shared);
  if (shared == NULL) return KOLO_ERR_NO_MEMORY;
  for (int b = 0; b < n && ex->ring->net->rank == root; b++) {
    shared[b] = (int64_t)(request->split_counts ? request->split_counts[b] : request->count);
  }
  kolo_net *net = ex->ring->net;
  kolo_status status = atomic_load(&net->failed)
                           ? kolo_net_error(net, NULL)
                           : kolo_ring_broadcast(ex->ring, shared, (size_t)n * sizeof *shared, root,
                                                 KOLO_INT64, engine_thread);
  for (int b = 0; b < n; b++) counts[b] = (size_t)shared[b];
  free(shared);
  return status;
}

kolo_status kolo_exec_reducescatter_joined(kolo_exec *ex, kolo_request *request,
                                           int engine_thread) {
  int n = ex->ring->net->size;
  size_t *counts = calloc((size_t)n, sizeof *counts);
  char *identity = NULL, *block = NULL;
  kolo_status status = counts != NULL ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  if (status == KOLO_OK)
    status = share_counts(ex, request, request->counts_from - 1, counts, engine_thread);
  kolo_request run = *request;
  run.split_counts = counts;
  if (status == KOLO_OK && request->internal) { /* this rank joined */
    size_t element = kolo_dtype_size(request->dtype), total = 0;
    for (int b = 0; b < n; b++) total += counts[b];
    identity = malloc(total * element + 1);
    block = malloc(counts[ex->ring->net->rank] * element + 1);
    if (identity == NULL || block == NULL)
      status = KOLO_ERR_NO_MEMORY;
    else
      kolo_fill_identity(identity, total, request->dtype, request->op);
    run.send = identity;
    run.recv = block;
  }
  if (status == KOLO_OK)
    status = kolo_ring_reducescatter_v(ex->ring, run.send, run.recv, run.split_counts, run.dtype,
                                       run.op, engine_thread);
  if (status == KOLO_ERR_NO_MEMORY &&
      !atomic_load(&ex->ring->net->failed)) { /* the peers are mid-collective */
    kolo_net_fail(ex->ring->net, status, ex->ring->net->rank,
                  "rank %d: out of memory for reduce-scatter '%s'", ex->ring->net->rank,
                  request->name);
  }
  free(identity);
  free(block);
  free(counts);
  return status;
}
