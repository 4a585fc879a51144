/* libkolo's engine: named non-blocking collectives, Horovod-style.
 *
 * Framework threads hand named operations (kolo_op_options.name, kolo.h) to the communicator; a
 * background engine negotiates which names every rank has submitted (ranks may submit the same
 * names in any order), fuses ready tensors of one dtype and op into one buffer
 * (KOLO_FUSION_THRESHOLD bytes, KOLO_CYCLE_TIME ms), runs the collective on the ring (or NCCL in
 * CUDA mode) and completes the requests. A name that some ranks submitted and others did not is
 * logged after KOLO_STALL_WARNING seconds and fails on every rank with KOLO_ERR_STALLED after
 * KOLO_STALL_TIMEOUT seconds. Ranks that disagree on a name's dtype, count, op or root get an error
 * naming the tensor and the ranks, on every rank. KOLO_TIMELINE=path writes a Chrome trace.
 *
 * Names: 1..KOLO_NAME_MAX bytes, no NUL; one name may be in flight once per rank
 * at a time: submitting it again before its request was handed back as done
 * (by kolo_wait, kolo_test, kolo_wait_result or kolo_test_result) is
 * KOLO_ERR_EXISTS. The same name is reused once that happened (each step).
 *
 * Requests are completed with kolo_wait/kolo_test (kolo.h) or with the _result
 * forms below, which also return the error message and any output the engine
 * allocated. Buffers stay owned by the caller and must stay valid until the
 * request completes. A dead peer fails every pending named operation with
 * KOLO_ERR_PEER_LOST, as for unnamed ones. Unnamed operations may be mixed with
 * named ones on the same communicator.
 *
 * This header is the contract between the engine (collective/) and its users
 * (kolo-train, the Python package). Change it only together with them. */
#ifndef KOLO_ENGINE_H
#define KOLO_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/kolo.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* libkolo exports these: kolo/api.h */

#define KOLO_NAME_MAX 255
#define KOLO_RESULT_MESSAGE_BYTES 512

/* What a completed request tells besides its status. */
typedef struct kolo_result {
  kolo_status status;
  /* why it failed ("tensor 'fc1.weight': count 10 on ranks 0,2 but 12 on rank 1"); "" on success */
  char message[KOLO_RESULT_MESSAGE_BYTES];
  /* output the engine allocated (allgather/alltoall submitted with recv == NULL and
   * no kolo_op_options.alloc): output_count elements, owned by the caller from now
   * on, freed with kolo_free. With alloc given: NULL, and output_count elements
   * were written to the memory alloc returned. */
  void *output;
  size_t output_count;
  /* kolo_join_async: the last rank that joined; -1 otherwise */
  int last_rank;
} kolo_result;

/* Frees memory libkolo handed to the caller (kolo_result.output); NULL is a no-op. */
void kolo_free(void *memory);

/* Like kolo_wait: blocks until the request completes, fills *result (may be NULL)
 * and frees the request. Returns the request's status. */
kolo_status kolo_wait_result(kolo_request *request, kolo_result *result);

/* Like kolo_test: never blocks; when *done, fills *result and frees the request. */
kolo_status kolo_test_result(kolo_request *request, int *done, kolo_result *result);

/* ---- named operations ----
 * Every submit function of kolo.h takes a name in kolo_op_options.name; the
 * operations below need one (a NULL name is KOLO_ERR_INVALID_ARG). */

/* n tensors negotiated and fused as one unit: the request completes when all are
 * done. names[i] name the members (for errors and the timeline); options->name
 * names the group itself (the unit of negotiation). Host buffers only. */
kolo_status kolo_grouped_allreduce_submit(kolo_comm *comm, int n, const char *const *names,
                                          const void *const *sends, void *const *recvs,
                                          const size_t *counts, kolo_dtype dtype, kolo_op op,
                                          const kolo_op_options *options, kolo_request **request);

/* send_counts[r] elements (size entries, consecutive in send) go to rank r; rank r's
 * block for this rank arrives in rank order. recv/recv_capacity/recv_counts as for
 * kolo_allgather_submit (recv == NULL: the engine allocates). Host buffers only. */
kolo_status kolo_alltoall_submit(kolo_comm *comm, const void *send, const size_t *send_counts,
                                 void *recv, size_t recv_capacity, size_t *recv_counts,
                                 kolo_dtype dtype, const kolo_op_options *options,
                                 kolo_request **request);

/* CUDA device buffers (the communicator in CUDA mode: kolo_comm_use_cuda).
 * Named operations take device memory too: negotiated like a host operation
 * (host memory on one rank and device memory on another for the same name is a
 * mismatch, named in the error on every rank), then run on NCCL in the agreed
 * order, one NCCL operation per name (no fusion copy), ordered after the legacy
 * default stream, or after options->cuda_stream with KOLO_OP_STREAM (it must stay
 * valid until the request completes): NCCL starts once the work enqueued on that
 * stream by the time the engine submits the operation is done, which includes
 * everything enqueued before the call. kolo_wait/kolo_test complete when NCCL
 * has; kolo_stream_wait (kolo.h) makes a stream wait for the result without the
 * host waiting for NCCL (it waits, on the host, for the negotiation only), and
 * kolo_request_cuda_event is NULL until the engine has submitted the operation.
 * KOLO_OP_STREAM needs CUDA mode (else KOLO_ERR_STATE) and device buffers (else
 * KOLO_ERR_INVALID_ARG). Not on device buffers (KOLO_ERR_UNSUPPORTED):
 * prescale/postscale other than 1, grouped all-reduce, all-to-all, reduce-scatter
 * with unequal recv_counts, all-gather with recv == NULL. A device operation
 * while a rank has joined fails with KOLO_ERR_STATE on every rank (a joined
 * rank has no device buffer to take part with). */

/* This rank has no more data: until every rank has joined, it takes part in the
 * others' named host operations with neutral contributions and receives nothing
 * useful: all-reduce and reduce-scatter with op's identity (0 for SUM/AVG; AVG
 * still divides by the full size), all-gather and all-to-all with 0 elements
 * (the others' recv_counts say 0 for it), broadcast as a receiver (a broadcast
 * from a joined root fails with KOLO_ERR_STATE on every rank, as does any
 * operation on CUDA buffers). The request completes when all ranks have joined;
 * kolo_result.last_rank names the last one to join. options: NULL or defaults. */
kolo_status kolo_join_submit(kolo_comm *comm, const kolo_op_options *options,
                             kolo_request **request);

/* ---- the named forms before the single route (issue 31) ----
 * Inline wrappers kept for one release (libkolo no longer exports them): each is
 * the submit function with options.name (and KOLO_OP_STREAM for _on_stream). */

static inline kolo_op_options kolo_op_options_scaled(const char *name, double prescale,
                                                     double postscale) {
  kolo_op_options options = kolo_op_options_of(name, 0, NULL);
  options.prescale = prescale;
  options.postscale = postscale;
  return options;
}

static inline kolo_status kolo_allreduce_named(kolo_comm *comm, const char *name, const void *send,
                                               void *recv, size_t count, kolo_dtype dtype,
                                               kolo_op op, double prescale, double postscale,
                                               kolo_request **request) {
  kolo_op_options options = kolo_op_options_scaled(name, prescale, postscale);
  if (name == NULL) return KOLO_ERR_INVALID_ARG;
  return kolo_allreduce_submit(comm, send, recv, count, dtype, op, &options, request);
}

static inline kolo_status kolo_grouped_allreduce_named(kolo_comm *comm, const char *group_name,
                                                       int n, const char *const *names,
                                                       const void *const *sends, void *const *recvs,
                                                       const size_t *counts, kolo_dtype dtype,
                                                       kolo_op op, double prescale,
                                                       double postscale, kolo_request **request) {
  kolo_op_options options = kolo_op_options_scaled(group_name, prescale, postscale);
  if (group_name == NULL) return KOLO_ERR_INVALID_ARG;
  return kolo_grouped_allreduce_submit(comm, n, names, sends, recvs, counts, dtype, op, &options,
                                       request);
}

static inline kolo_status kolo_allgather_named(kolo_comm *comm, const char *name, const void *send,
                                               size_t send_count, void *recv, size_t recv_capacity,
                                               size_t *recv_counts, kolo_dtype dtype,
                                               kolo_request **request) {
  kolo_op_options options = kolo_op_options_of(name, 0, NULL);
  if (name == NULL) return KOLO_ERR_INVALID_ARG;
  return kolo_allgather_submit(comm, send, send_count, recv, recv_capacity, recv_counts, dtype,
                               &options, request);
}

static inline kolo_status kolo_broadcast_named(kolo_comm *comm, const char *name, void *buffer,
                                               size_t count, kolo_dtype dtype, int root,
                                               kolo_request **request) {
  kolo_op_options options = kolo_op_options_of(name, 0, NULL);
  if (name == NULL) return KOLO_ERR_INVALID_ARG;
  return kolo_broadcast_submit(comm, buffer, count, dtype, root, &options, request);
}

static inline kolo_status kolo_reducescatter_named(kolo_comm *comm, const char *name,
                                                   const void *send, void *recv, size_t count,
                                                   const size_t *recv_counts, kolo_dtype dtype,
                                                   kolo_op op, kolo_request **request) {
  kolo_op_options options = kolo_op_options_of(name, 0, NULL);
  if (name == NULL) return KOLO_ERR_INVALID_ARG;
  return kolo_reducescatter_submit(comm, send, recv, count, recv_counts, dtype, op, &options,
                                   request);
}

static inline kolo_status kolo_alltoall_named(kolo_comm *comm, const char *name, const void *send,
                                              const size_t *send_counts, void *recv,
                                              size_t recv_capacity, size_t *recv_counts,
                                              kolo_dtype dtype, kolo_request **request) {
  kolo_op_options options = kolo_op_options_of(name, 0, NULL);
  if (name == NULL) return KOLO_ERR_INVALID_ARG;
  return kolo_alltoall_submit(comm, send, send_counts, recv, recv_capacity, recv_counts, dtype,
                              &options, request);
}

static inline kolo_status kolo_allreduce_named_on_stream(kolo_comm *comm, const char *name,
                                                         const void *send, void *recv, size_t count,
                                                         kolo_dtype dtype, kolo_op op,
                                                         void *cuda_stream,
                                                         kolo_request **request) {
  kolo_op_options options = kolo_op_options_of(name, KOLO_OP_STREAM, cuda_stream);
  if (name == NULL) return KOLO_ERR_INVALID_ARG;
  return kolo_allreduce_submit(comm, send, recv, count, dtype, op, &options, request);
}

static inline kolo_status kolo_allgather_named_on_stream(kolo_comm *comm, const char *name,
                                                         const void *send, size_t send_count,
                                                         void *recv, size_t recv_capacity,
                                                         size_t *recv_counts, kolo_dtype dtype,
                                                         void *cuda_stream,
                                                         kolo_request **request) {
  kolo_op_options options = kolo_op_options_of(name, KOLO_OP_STREAM, cuda_stream);
  if (name == NULL) return KOLO_ERR_INVALID_ARG;
  return kolo_allgather_submit(comm, send, send_count, recv, recv_capacity, recv_counts, dtype,
                               &options, request);
}

static inline kolo_status kolo_broadcast_named_on_stream(kolo_comm *comm, const char *name,
                                                         void *buffer, size_t count,
                                                         kolo_dtype dtype, int root,
                                                         void *cuda_stream,
                                                         kolo_request **request) {
  kolo_op_options options = kolo_op_options_of(name, KOLO_OP_STREAM, cuda_stream);
  if (name == NULL) return KOLO_ERR_INVALID_ARG;
  return kolo_broadcast_submit(comm, buffer, count, dtype, root, &options, request);
}

static inline kolo_status kolo_reducescatter_named_on_stream(
    kolo_comm *comm, const char *name, const void *send, void *recv, size_t count,
    const size_t *recv_counts, kolo_dtype dtype, kolo_op op, void *cuda_stream,
    kolo_request **request) {
  kolo_op_options options = kolo_op_options_of(name, KOLO_OP_STREAM, cuda_stream);
  if (name == NULL) return KOLO_ERR_INVALID_ARG;
  return kolo_reducescatter_submit(comm, send, recv, count, recv_counts, dtype, op, &options,
                                   request);
}

static inline kolo_status kolo_join_async(kolo_comm *comm, kolo_request **request) {
  return kolo_join_submit(comm, NULL, request);
}

/* What the engine did on this rank since the communicator was created. */
typedef struct kolo_engine_stats {
  uint64_t cycles;            /* negotiation cycles run */
  uint64_t negotiation_ns;    /* time in them: sending this rank's message to the decision */
  uint64_t negotiation_bytes; /* bytes this rank sent for negotiation (own messages and forwards) */
  uint64_t announced;         /* submissions sent by name */
  uint64_t cached;            /* submissions sent as a response-cache bit */
  uint64_t batches;           /* fused all-reduces run (a lone tensor is a batch of one) */
  uint64_t fused_tensors;     /* tensors in them */
  uint64_t negotiation_work_ns; /* of negotiation_ns, the time spent computing (encoding,
                                 * deciding, dispatching), not waiting for other ranks */
} kolo_engine_stats;

/* Copies the counters; thread-safe, never blocks for long. */
kolo_status kolo_engine_stats_get(const kolo_comm *comm, kolo_engine_stats *stats);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
