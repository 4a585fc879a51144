/* libkolo: collective operations (all-reduce, all-gather, broadcast,
 * reduce-scatter, barrier) that keep N processes' buffers identical, over a
 * ring of TCP connections between CPUs. This is the C API a training program links. */
#ifndef KOLO_KOLO_H
#define KOLO_KOLO_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* libkolo exports these: kolo/api.h */

/* ---- element types and reduction operators ---- */

typedef enum kolo_dtype {
  KOLO_UINT8 = 0,
  KOLO_INT32 = 1,
  KOLO_INT64 = 2,
  KOLO_FLOAT16 = 3,  /* IEEE binary16; reduced in float32, rounded back (nearest even) */
  KOLO_BFLOAT16 = 4, /* bfloat16; reduced in float32, rounded back (nearest even) */
  KOLO_FLOAT32 = 5,
  KOLO_FLOAT64 = 6,
  KOLO_INT8 = 7,
  KOLO_INT16 =
      8, /* NCCL has no int16: on the GPU it moves (broadcast, all-gather) but does not reduce */
  KOLO_BOOL =
      9, /* one byte, 0 or 1; reduced as logic: sum, avg and max = any, min and prod = all */
  KOLO_DTYPE_COUNT = 10,
} kolo_dtype;

typedef enum kolo_op {
  KOLO_SUM = 0,
  KOLO_AVG = 1, /* sum divided by the number of ranks (integer division for integer types) */
  KOLO_MIN = 2,
  KOLO_MAX = 3,
  KOLO_PROD = 4,
  KOLO_OP_COUNT = 5,
} kolo_op;

/* Size in bytes of one element; 0 for an unknown type. */
size_t kolo_dtype_size(kolo_dtype dtype);
/* "float32", "bfloat16", ...; "unknown" for an unknown type. */
const char *kolo_dtype_name(kolo_dtype dtype);
/* "sum", "avg", ...; "unknown" for an unknown op. */
const char *kolo_op_name(kolo_op op);

/* ---- communicators ---- */

typedef struct kolo_comm kolo_comm;
typedef struct kolo_request kolo_request;
typedef struct kolo_listener kolo_listener;

/* Default per-operation timeout when neither the spec nor KOLO_TIMEOUT sets one. */
#define KOLO_DEFAULT_TIMEOUT_MS 60000
/* Size of the NCCL unique id carried in a ring spec (NCCL_UNIQUE_ID_BYTES). */
#define KOLO_NCCL_ID_BYTES 128

/* Everything a process needs to join one epoch of a ring. The worker agent
 * builds it from etcd; kolo_comm_create_from_env builds it from a rendezvous. */
typedef struct kolo_ring_spec {
  uint64_t epoch;           /* ring generation; connections from another epoch are refused */
  int rank;                 /* this process's rank, 0 <= rank < size */
  int size;                 /* number of ranks */
  int local_rank;           /* rank among the ranks on this host */
  int local_size;           /* ranks on this host */
  const char *const *peers; /* size data-plane addresses "host:port", indexed by rank */
  const char *secret;       /* job secret checked in every handshake; NULL or "" = none */
  int timeout_ms;           /* no-progress timeout per operation; <= 0 = KOLO_TIMEOUT or 60 s */
  const uint8_t *nccl_id;   /* KOLO_NCCL_ID_BYTES from rank 0 of this epoch, or NULL */
} kolo_ring_spec;

/* Binds a data-plane listener on "host:port" (port 0 picks a free one) before
 * the ring is known, so its address can be published. Does not block. "fd:N" takes
 * a copy of the listening socket N instead (a kolo-worker's held port, KOLO_LISTEN_FD). */
kolo_status kolo_listener_create(const char *bind_address, kolo_listener **out);
/* Writes the bound "host:port" into buffer. */
kolo_status kolo_listener_address(const kolo_listener *listener, char *buffer, size_t length);
/* Closes the listener; NULL is a no-op. */
void kolo_listener_destroy(kolo_listener *listener);

/* Connects this rank into the ring described by spec. Blocks until both ring
 * neighbours are connected and authenticated, or the timeout passes. If listener
 * is NULL the communicator listens on spec->peers[spec->rank]; otherwise it takes
 * ownership of listener (also on failure). The spec is copied. */
kolo_status kolo_comm_create(const kolo_ring_spec *spec, kolo_listener *listener, kolo_comm **out);

/* Builds the ring from the environment kolorun sets: KOLO_RANK, KOLO_SIZE,
 * KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE, KOLO_RENDEZVOUS (host:port of rank 0's
 * rendezvous) or KOLO_RENDEZVOUS_FD (an inherited listening socket, rank 0 only),
 * KOLO_SECRET, KOLO_EPOCH, KOLO_HOST (address to bind, default 127.0.0.1),
 * KOLO_TIMEOUT (seconds). Blocks until the ring is formed or the timeout passes. */
kolo_status kolo_comm_create_from_env(kolo_comm **out);

int kolo_comm_rank(const kolo_comm *comm);
int kolo_comm_size(const kolo_comm *comm);
int kolo_comm_local_rank(const kolo_comm *comm);
int kolo_comm_local_size(const kolo_comm *comm);
uint64_t kolo_comm_epoch(const kolo_comm *comm);

/* Which transport carries this rank's large operations to the next rank (peer 0)
 * or from the previous rank (peer 1): "shm" (shared memory, same host), "tcp", or
 * "none" (one rank, or a closed direction). Small operations always use TCP. For
 * diagnostics and tests; never blocks. */
const char *kolo_comm_transport(const kolo_comm *comm, int peer);

/* Makes every pending and later operation fail with KOLO_ERR_ABORTED (or the
 * error that caused the abort) and tells the ring neighbours. Never blocks; safe
 * from any thread, including while another thread waits on the communicator. */
void kolo_comm_abort(kolo_comm *comm);

/* Once the communicator has failed: the status of the failure (KOLO_OK if it has
 * not) and the rank it names (-1 if none, e.g. a timeout). Thread-safe. */
kolo_status kolo_comm_error(const kolo_comm *comm, int *failed_rank);

/* kolo_comm_use_cuda's device meaning "this rank's local rank modulo the GPUs
 * of this host" (the usual one-rank-per-GPU placement). */
#define KOLO_CUDA_LOCAL_DEVICE (-1)

/* Puts the communicator in CUDA mode: from then on, collectives whose buffers are
 * CUDA device memory run over NCCL (one rank per GPU) on kolo's own non-blocking
 * stream, with the same blocking/non-blocking API; host buffers keep using the
 * TCP ring. device is this rank's CUDA device, or KOLO_CUDA_LOCAL_DEVICE; other
 * negative values are KOLO_ERR_INVALID_ARG. Collective: every rank calls it at
 * the same point among its host collectives; the ranks agree, so all enter CUDA
 * mode or all get the same error, and share the epoch's NCCL id (the ring
 * spec's, or one rank 0 makes), which is a small all-reduce and broadcast on the
 * ring; the NCCL communicator is made at the first device operation. An
 * operation without KOLO_OP_STREAM is ordered after the work enqueued on the
 * legacy default stream; for other streams use KOLO_OP_STREAM (below). A failure of the ring (a
 * dead peer, an abort) aborts the GPU collectives in flight at once; an NCCL error fails the
 * communicator (kolo_comm_error) like a ring error. GPU operations fail on no progress after
 * KOLO_GPU_TIMEOUT seconds (default 600, never less than the ring's timeout).
 * KOLO_ERR_NO_DEVICE without a usable GPU; KOLO_ERR_INVALID_ARG when
 * NCCL_COMM_BLOCKING=1 is set (NCCL's setup would wait with no deadline);
 * KOLO_ERR_STATE if already in CUDA mode on another device; KOLO_ERR_UNSUPPORTED
 * when libkolo was built without CUDA/NCCL. */
kolo_status kolo_comm_use_cuda(kolo_comm *comm, int device);

/* NCCL_VERSION_CODE of the NCCL this libkolo was built with (e.g. 22809 for
 * 2.28.9), 0 when it was built without CUDA/NCCL (then CUDA mode is refused). */
int kolo_nccl_version(void);

/* Human-readable description of the last failure ("peer lost: rank 2 (connection
 * closed)"); "" when none. Thread-safe; the buffer is copied into. */
void kolo_comm_error_message(const kolo_comm *comm, char *buffer, size_t length);

/* Aborts if operations are pending, waits for the engine thread, closes the
 * sockets and frees everything. Pending requests must not be used afterwards. */
void kolo_comm_destroy(kolo_comm *comm);

/* ---- operations: one route each ----
 * Every collective is one submit function that takes its buffers, its options
 * (kolo_op_options, NULL = all defaults) and returns a request; the request is
 * completed with kolo_wait / kolo_test (or kolo_wait_result / kolo_test_result,
 * engine.h). The blocking form of any operation is its submit with
 * KOLO_OP_BLOCKING followed by kolo_wait. Every rank must issue the same
 * operations; unnamed ones in the same order on every rank (as with NCCL or MPI),
 * named ones in any order (engine.h). Buffers must stay valid until the request
 * completes. send may equal recv (in place). A request is freed by kolo_wait, or
 * by kolo_test once it reports done. */

/* kolo_op_options.flags */
/* The caller waits for the request at once (kolo_wait right after the submit):
 * an unnamed host operation may then run on the caller's thread inside the
 * submit, when nothing else is queued and no named operation was issued yet (the
 * latency path of the blocking calls: no hand-off to the executor thread). */
#define KOLO_OP_BLOCKING 1u
/* Stream-ordered (CUDA mode, device buffers): kolo's stream first waits on an
 * event recorded on cuda_stream (a cudaStream_t passed as a pointer so this header
 * needs no CUDA headers; NULL: the legacy default stream; cudaStreamPerThread: the
 * calling thread's per-thread default stream), so data the caller's kernels write
 * there before the call is what is sent; the host does not block. Without this
 * flag a device operation is ordered after the legacy default stream.
 * KOLO_ERR_STATE outside CUDA mode; host buffers are KOLO_ERR_INVALID_ARG and, for
 * an unnamed operation, since the other ranks run it on their GPUs, fail the
 * communicator (as any refusal made by one rank alone does). */
#define KOLO_OP_STREAM 2u

/* How one operation runs. Zero-initialised (or a NULL pointer) means the defaults:
 * unnamed, not stream-ordered, no scaling, the communicator's own ranks. */
typedef struct kolo_op_options {
  /* NULL: unnamed. An unnamed operation is named by its position among this
   * rank's unnamed operations: until this communicator's first named one they run
   * in program order with no negotiation (every rank issues them in the same
   * order); from then on they are negotiated by that position, in order with the
   * named ones. Otherwise 1..KOLO_NAME_MAX bytes: the operation is negotiated by
   * name (engine.h: ranks may submit names in any order; mismatches are reported). */
  const char *name;
  void *cuda_stream; /* with KOLO_OP_STREAM: the caller's cudaStream_t */
  unsigned flags;    /* KOLO_OP_BLOCKING | KOLO_OP_STREAM */
  /* all-reduce only: recv = op over ranks of (send * prescale), then * postscale;
   * 0 means 1 (no scaling). Factors other than 1 need a floating dtype (else
   * KOLO_ERR_INVALID_ARG) and host buffers (else KOLO_ERR_UNSUPPORTED). */
  double prescale;
  double postscale;
  int process_set; /* reserved for process sets on one communicator: must be 0 */
  /* All-gather and all-to-all with recv == NULL: who provides the output. NULL:
   * libkolo allocates it (kolo_result.output, the caller's to kolo_free). Else
   * alloc(alloc_context, count) is called once the output's element count is known
   * (the sizes only the ring learns), on the thread that runs the operation, and
   * only when count > 0: it returns memory for count elements of the operation's
   * dtype that stays the caller's (kolo_result.output is then NULL and
   * output_count tells the count), or NULL, which fails the operation as an
   * allocation failure inside libkolo does (KOLO_ERR_NO_MEMORY). It must not call
   * libkolo. Host memory only. */
  void *(*alloc)(void *alloc_context, size_t count);
  void *alloc_context;
} kolo_op_options;

kolo_status kolo_allreduce_submit(kolo_comm *comm, const void *send, void *recv, size_t count,
                                  kolo_dtype dtype, kolo_op op, const kolo_op_options *options,
                                  kolo_request **request);

/* Each rank contributes send_count elements (counts may differ by rank); recv
 * receives their concatenation in rank order. recv_capacity is recv's size in
 * elements (a total over it fails with KOLO_ERR_TOO_LARGE on every rank); with
 * recv == NULL the engine allocates the output (kolo_result.output, engine.h; not
 * on device buffers). recv_counts (size entries, may be NULL) receives every
 * rank's count; it must stay valid until completion. */
kolo_status kolo_allgather_submit(kolo_comm *comm, const void *send, size_t send_count, void *recv,
                                  size_t recv_capacity, size_t *recv_counts, kolo_dtype dtype,
                                  const kolo_op_options *options, kolo_request **request);

/* Copies root's buffer (count elements) into every rank's buffer. */
kolo_status kolo_broadcast_submit(kolo_comm *comm, void *buffer, size_t count, kolo_dtype dtype,
                                  int root, const kolo_op_options *options, kolo_request **request);

/* send holds count elements (the total). recv_counts NULL: every rank receives
 * count / size of the reduction (count must divide evenly); otherwise rank r
 * receives recv_counts[r] elements (size entries summing to count), in rank
 * order. Unequal blocks are not supported on device buffers. */
kolo_status kolo_reducescatter_submit(kolo_comm *comm, const void *send, void *recv, size_t count,
                                      const size_t *recv_counts, kolo_dtype dtype, kolo_op op,
                                      const kolo_op_options *options, kolo_request **request);

/* Completes when every rank has entered it (unnamed, host only). */
kolo_status kolo_barrier_submit(kolo_comm *comm, const kolo_op_options *options,
                                kolo_request **request);

/* ---- the request set (every operation's request) ---- */

/* Blocks until the request completes; returns its status and frees it. */
kolo_status kolo_wait(kolo_request *request);

/* Never blocks. Sets *done; when done, *status holds the result and the request is freed. */
kolo_status kolo_test(kolo_request *request, int *done, kolo_status *status);

/* Makes cuda_stream (NULL: legacy default) wait on the device until a device
 * request's collective is done; the host does not block, and the request stays
 * the caller's to complete with kolo_wait / kolo_test. If the operation fails,
 * the stream goes on once the abort has stopped the kernels, with the output
 * undefined: check the status. KOLO_ERR_INVALID_ARG for a request that does not
 * run on the device or a stream the runtime refuses. Any request on a device
 * buffer in CUDA mode qualifies, stream-ordered or not; for a named one (engine.h)
 * the host first waits for its negotiation (never for NCCL) and a request that
 * failed there returns its error. */
kolo_status kolo_stream_wait(kolo_request *request, void *cuda_stream);

/* The completion event (a cudaEvent_t) of a device request, valid until the
 * request is freed, for callers that wait on it themselves; NULL otherwise (and
 * for a named device request until the engine has submitted it to NCCL). */
void *kolo_request_cuda_event(kolo_request *request);

/* ---- the forms before the single route (issue 31) ----
 * Thin inline wrappers over the submit functions above, kept for one release so
 * that programs compile unchanged; libkolo no longer exports them. The blocking
 * ones are submit (KOLO_OP_BLOCKING) + kolo_wait, the _async ones a plain submit,
 * the _on_stream ones a submit with KOLO_OP_STREAM. */

static inline kolo_op_options kolo_op_options_of(const char *name, unsigned flags,
                                                 void *cuda_stream) {
  kolo_op_options options;
  options.name = name;
  options.cuda_stream = cuda_stream;
  options.flags = flags;
  options.prescale = 1.0;
  options.postscale = 1.0;
  options.process_set = 0;
  options.alloc = NULL;
  options.alloc_context = NULL;
  return options;
}

/* The blocking end of a submit: its error, or the status of the request it set
 * (read only after the submit returned: the address is what is passed). */
static inline kolo_status kolo_finish(kolo_status submitted, kolo_request *const *request) {
  return submitted != KOLO_OK ? submitted : kolo_wait(*request);
}

/* recv_count elements for every rank of comm: the total, or 0 with *status set. */
static inline size_t kolo_even_total(const kolo_comm *comm, size_t recv_count,
                                     kolo_status *status) {
  int size = kolo_comm_size(comm);
  *status = KOLO_OK;
  if (comm == NULL || size <= 0) {
    *status = KOLO_ERR_INVALID_ARG;
    return 0;
  }
  if (recv_count > SIZE_MAX / 16 / (size_t)size) {
    *status = KOLO_ERR_TOO_LARGE;
    return 0;
  }
  return recv_count * (size_t)size;
}

static inline kolo_status kolo_allreduce_async(kolo_comm *comm, const void *send, void *recv,
                                               size_t count, kolo_dtype dtype, kolo_op op,
                                               kolo_request **request) {
  return kolo_allreduce_submit(comm, send, recv, count, dtype, op, NULL, request);
}

static inline kolo_status kolo_allgather_async(kolo_comm *comm, const void *send, size_t send_count,
                                               void *recv, size_t recv_capacity,
                                               size_t *recv_counts, kolo_dtype dtype,
                                               kolo_request **request) {
  if (recv == NULL && recv_capacity > 0) return KOLO_ERR_INVALID_ARG;
  return kolo_allgather_submit(comm, send, send_count, recv, recv_capacity, recv_counts, dtype,
                               NULL, request);
}

static inline kolo_status kolo_broadcast_async(kolo_comm *comm, void *buffer, size_t count,
                                               kolo_dtype dtype, int root, kolo_request **request) {
  return kolo_broadcast_submit(comm, buffer, count, dtype, root, NULL, request);
}

static inline kolo_status kolo_reducescatter_async(kolo_comm *comm, const void *send, void *recv,
                                                   size_t recv_count, kolo_dtype dtype, kolo_op op,
                                                   kolo_request **request) {
  kolo_status status;
  size_t total = kolo_even_total(comm, recv_count, &status);
  if (status != KOLO_OK) return status;
  return kolo_reducescatter_submit(comm, send, recv, total, NULL, dtype, op, NULL, request);
}

static inline kolo_status kolo_barrier_async(kolo_comm *comm, kolo_request **request) {
  return kolo_barrier_submit(comm, NULL, request);
}

static inline kolo_status kolo_allreduce_on_stream(kolo_comm *comm, const void *send, void *recv,
                                                   size_t count, kolo_dtype dtype, kolo_op op,
                                                   void *cuda_stream, kolo_request **request) {
  kolo_op_options options = kolo_op_options_of(NULL, KOLO_OP_STREAM, cuda_stream);
  return kolo_allreduce_submit(comm, send, recv, count, dtype, op, &options, request);
}

static inline kolo_status kolo_allgather_on_stream(kolo_comm *comm, const void *send,
                                                   size_t send_count, void *recv,
                                                   size_t recv_capacity, size_t *recv_counts,
                                                   kolo_dtype dtype, void *cuda_stream,
                                                   kolo_request **request) {
  kolo_op_options options = kolo_op_options_of(NULL, KOLO_OP_STREAM, cuda_stream);
  if (recv == NULL && recv_capacity > 0) return KOLO_ERR_INVALID_ARG;
  return kolo_allgather_submit(comm, send, send_count, recv, recv_capacity, recv_counts, dtype,
                               &options, request);
}

static inline kolo_status kolo_broadcast_on_stream(kolo_comm *comm, void *buffer, size_t count,
                                                   kolo_dtype dtype, int root, void *cuda_stream,
                                                   kolo_request **request) {
  kolo_op_options options = kolo_op_options_of(NULL, KOLO_OP_STREAM, cuda_stream);
  return kolo_broadcast_submit(comm, buffer, count, dtype, root, &options, request);
}

static inline kolo_status kolo_reducescatter_on_stream(kolo_comm *comm, const void *send,
                                                       void *recv, size_t recv_count,
                                                       kolo_dtype dtype, kolo_op op,
                                                       void *cuda_stream, kolo_request **request) {
  kolo_op_options options = kolo_op_options_of(NULL, KOLO_OP_STREAM, cuda_stream);
  kolo_status status;
  size_t total = kolo_even_total(comm, recv_count, &status);
  if (status != KOLO_OK) return status;
  return kolo_reducescatter_submit(comm, send, recv, total, NULL, dtype, op, &options, request);
}

static inline kolo_status kolo_allreduce(kolo_comm *comm, const void *send, void *recv,
                                         size_t count, kolo_dtype dtype, kolo_op op) {
  kolo_op_options options = kolo_op_options_of(NULL, KOLO_OP_BLOCKING, NULL);
  kolo_request *request = NULL;
  return kolo_finish(kolo_allreduce_submit(comm, send, recv, count, dtype, op, &options, &request),
                     &request);
}

static inline kolo_status kolo_allgather(kolo_comm *comm, const void *send, size_t send_count,
                                         void *recv, size_t recv_capacity, size_t *recv_counts,
                                         kolo_dtype dtype) {
  kolo_op_options options = kolo_op_options_of(NULL, KOLO_OP_BLOCKING, NULL);
  kolo_request *request = NULL;
  if (recv == NULL && recv_capacity > 0) return KOLO_ERR_INVALID_ARG;
  return kolo_finish(kolo_allgather_submit(comm, send, send_count, recv, recv_capacity, recv_counts,
                                           dtype, &options, &request),
                     &request);
}

static inline kolo_status kolo_broadcast(kolo_comm *comm, void *buffer, size_t count,
                                         kolo_dtype dtype, int root) {
  kolo_op_options options = kolo_op_options_of(NULL, KOLO_OP_BLOCKING, NULL);
  kolo_request *request = NULL;
  return kolo_finish(kolo_broadcast_submit(comm, buffer, count, dtype, root, &options, &request),
                     &request);
}

static inline kolo_status kolo_reducescatter(kolo_comm *comm, const void *send, void *recv,
                                             size_t recv_count, kolo_dtype dtype, kolo_op op) {
  kolo_op_options options = kolo_op_options_of(NULL, KOLO_OP_BLOCKING, NULL);
  kolo_request *request = NULL;
  kolo_status status;
  size_t total = kolo_even_total(comm, recv_count, &status);
  if (status != KOLO_OK) return status;
  return kolo_finish(
      kolo_reducescatter_submit(comm, send, recv, total, NULL, dtype, op, &options, &request),
      &request);
}

static inline kolo_status kolo_barrier(kolo_comm *comm) {
  kolo_op_options options = kolo_op_options_of(NULL, KOLO_OP_BLOCKING, NULL);
  kolo_request *request = NULL;
  return kolo_finish(kolo_barrier_submit(comm, &options, &request), &request);
}

/* ---- float16 / bfloat16 helpers (round to nearest even) ---- */
float kolo_half_to_float(uint16_t half);
uint16_t kolo_float_to_half(float value);
float kolo_bfloat16_to_float(uint16_t value);
uint16_t kolo_float_to_bfloat16(float value);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
