/* kolo_nccl: the GPU data plane. Collectives on CUDA device buffers through an
 * NCCL communicator on a CUDA stream owned by kolo, with deadlines on every wait
 * so a dead peer becomes an error, never a hang. Plain C; needs no CUDA headers. */
#ifndef KOLO_NCCL_H
#define KOLO_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/kolo.h"
#include "kolo/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Ownership and threading, for every function below:
 * - Buffers passed to an operation belong to the caller; they must be device
 *   memory (cudaMalloc, or managed memory) on the communicator's device, each one
 *   allocation holding the whole range, and stay valid until the request
 *   completes (kolo_nccl_wait, or kolo_nccl_test says done).
 * - Stream order: kolo's stream is a non-blocking CUDA stream, so kolo's
 *   collectives never serialise with compute on the legacy default stream. An
 *   operation first makes kolo's stream wait for the work enqueued so far on a
 *   stream: the caller's (the _after forms) or the legacy default stream (the
 *   others). The result is ready for the host when the request completes, and
 *   for a stream once kolo_nccl_stream_wait has ordered it after the request.
 * - A communicator is used by one thread at a time, except kolo_nccl_comm_abort,
 *   which may be called from any thread, also while another thread waits.
 * - Without a usable GPU every entry point that needs one returns
 *   KOLO_ERR_NO_DEVICE and logs the CUDA runtime's reason; none crashes or hangs.
 * - kolo clears the CUDA runtime's last-error slot only right after one of its
 *   own calls failed, so an error the caller's own code left pending stays. */

/* Length of the text form of a unique id (hex), without the terminating NUL. */
#define KOLO_NCCL_ID_TEXT_LENGTH (2 * KOLO_NCCL_ID_BYTES)

typedef struct kolo_nccl_comm kolo_nccl_comm;
typedef struct kolo_nccl_request kolo_nccl_request;

/* ---- devices and memory ---- */

/* Number of usable CUDA devices. Returns KOLO_ERR_NO_DEVICE when there is none
 * (no device, no driver, driver too old, runtime stub) and then writes the CUDA
 * runtime's reason into message (may be NULL). Does not block. */
kolo_status kolo_nccl_device_count(int *count, char *message, size_t length);

/* "NCCL 2.28.9, CUDA runtime 13.0, driver 13.0" (driver "none" without one)
 * into buffer, for logs and benchmark headers. Needs no GPU; never fails. */
void kolo_nccl_versions(char *buffer, size_t length);

/* NCCL_VERSION_CODE of the nccl.h kolo_nccl was compiled against. */
int kolo_nccl_build_version(void);

/* 1 when ptr is device memory (or managed memory) that NCCL can use, 0 for host
 * memory (pageable or pinned), NULL, or when there is no GPU. Never fails, never
 * blocks; about a microsecond once CUDA is up. Caution: on a machine with a GPU
 * the first call initializes the CUDA runtime in this process (a context on the
 * current device), so a CPU-only job should not call it: dispatch on it only
 * when the job runs in GPU mode (e.g. its ring spec carries an NCCL id). */
int kolo_nccl_is_device_pointer(const void *ptr);

/* kolo_nccl_is_device_pointer after making `device` current on the calling
 * thread (if it is not), so a thread that never chose a device does not create
 * a context on GPU 0 just by asking. device < 0: the thread's current device. */
int kolo_nccl_is_device_pointer_on(const void *ptr, int device);

/* Like kolo_nccl_is_device_pointer, and also the device ordinal the memory lives
 * on (-1 for host memory). Returns KOLO_ERR_NO_DEVICE without a GPU. */
kolo_status kolo_nccl_pointer_device(const void *ptr, int *is_device, int *device);

/* Allocates bytes of device memory on device. The caller owns the buffer and
 * frees it with kolo_nccl_device_free. Blocks only as cudaMalloc does. */
kolo_status kolo_nccl_device_alloc(int device, size_t bytes, void **out);
/* Frees a buffer from kolo_nccl_device_alloc; NULL is a no-op. */
void kolo_nccl_device_free(void *ptr);
/* Blocking copies between host and device memory (cudaMemcpy). */
kolo_status kolo_nccl_copy_to_device(void *device_dst, const void *host_src, size_t bytes);
kolo_status kolo_nccl_copy_to_host(void *host_dst, const void *device_src, size_t bytes);
/* Blocking copy in any direction (host or device on either side, told apart by
 * the runtime). On the legacy default stream, so it does not wait for kolo's. */
kolo_status kolo_nccl_copy(void *dst, const void *src, size_t bytes);

/* NCCL_COMM_BLOCKING, as NCCL reads it: from the environment, else the first
 * line "NCCL_COMM_BLOCKING=..." of NCCL_CONF_FILE (or ~/.nccl.conf), else of
 * /etc/nccl.conf. Returns 1 when NCCL will make communicators blocking (the
 * value parses as 1, like strtoll base 0) and writes where it came from into
 * source (may be NULL); 0 otherwise. A blocking communicator's creation waits
 * with no deadline, so kolo refuses to create one. Needs no GPU. */
int kolo_nccl_blocking_forced(char *source, size_t length);

/* ---- unique id: made by rank 0 of each epoch, carried as text in the ring spec ---- */

/* Makes a new NCCL unique id (ncclGetUniqueId). Rank 0 calls this once per epoch;
 * the id also starts NCCL's bootstrap listener in this process, so the process
 * must stay alive until the communicator is formed. Needs a GPU (KOLO_ERR_NO_DEVICE). */
kolo_status kolo_nccl_id_create(uint8_t id[KOLO_NCCL_ID_BYTES]);

/* Writes the id as KOLO_NCCL_ID_TEXT_LENGTH lowercase hex digits plus a NUL.
 * KOLO_ERR_TOO_LARGE when length is too small. Pure; needs no GPU. */
kolo_status kolo_nccl_id_encode(const uint8_t id[KOLO_NCCL_ID_BYTES], char *text, size_t length);

/* Strict inverse of kolo_nccl_id_encode: exactly KOLO_NCCL_ID_TEXT_LENGTH hex
 * digits (either case), nothing else; otherwise KOLO_ERR_PARSE and id untouched. */
kolo_status kolo_nccl_id_decode(const char *text, uint8_t id[KOLO_NCCL_ID_BYTES]);

/* ---- communicator ---- */

/* Lifecycle of a communicator. Transitions happen only through
 * kolo_nccl_state_next, so the rules are one table that tests can check. */
typedef enum kolo_nccl_state {
  KOLO_NCCL_STATE_NEW = 0,          /* allocated, NCCL not called yet */
  KOLO_NCCL_STATE_INITIALIZING = 1, /* ncclCommInitRankConfig running (non-blocking) */
  KOLO_NCCL_STATE_READY = 2,        /* operations may be submitted */
  KOLO_NCCL_STATE_FAILED = 3,       /* an error or timeout; only abort/destroy remain */
  KOLO_NCCL_STATE_ABORTED = 4,      /* ncclCommAbort done; build a new communicator */
  KOLO_NCCL_STATE_DESTROYED = 5,    /* resources released */
} kolo_nccl_state;

typedef enum kolo_nccl_event {
  KOLO_NCCL_EV_INIT_START = 0, /* ncclCommInitRankConfig called */
  KOLO_NCCL_EV_INIT_DONE = 1,  /* NCCL reported the communicator ready */
  KOLO_NCCL_EV_ERROR = 2,      /* NCCL/CUDA error, peer lost or deadline passed */
  KOLO_NCCL_EV_ABORT = 3,      /* ncclCommAbort called */
  KOLO_NCCL_EV_DESTROY = 4,    /* resources released */
} kolo_nccl_event;

/* Pure transition function: writes the next state for (state, event) and returns
 * KOLO_OK, or KOLO_ERR_STATE (and leaves *next alone) when the event is not
 * allowed in that state. Errors after an abort are absorbed (ABORTED stays). */
kolo_status kolo_nccl_state_next(kolo_nccl_state state, kolo_nccl_event event,
                                 kolo_nccl_state *next);

/* Pure: the status an operation submitted in this state gets. READY -> KOLO_OK;
 * FAILED -> failure (the error that failed it); ABORTED -> KOLO_ERR_ABORTED;
 * anything else -> KOLO_ERR_STATE. */
kolo_status kolo_nccl_state_submit_status(kolo_nccl_state state, kolo_status failure);

/* "new", "initializing", "ready", "failed", "aborted", "destroyed"; "unknown". */
const char *kolo_nccl_state_name(kolo_nccl_state state);

/* How a communicator is made. */
typedef struct kolo_nccl_options {
  int device;        /* CUDA device ordinal; negative: KOLO_ERR_INVALID_ARG */
  int timeout_ms;    /* creation, enqueue and finalize deadline; <= 0: KOLO_DEFAULT_TIMEOUT_MS */
  int op_timeout_ms; /* no-progress deadline of a submitted operation, counted from the
                        later of its submission and the last completion seen; <= 0:
                        timeout_ms. A caller that learns of dead peers by other means
                        (libkolo's control links) sets it long, so a late but healthy
                        peer (checkpointing, evaluating) is not taken for a dead one. */
  /* Polled while creation waits for the other ranks; nonzero ends it with
   * KOLO_ERR_ABORTED (the half-made communicator is aborted). May be NULL. */
  int (*cancelled)(void *user);
  void *cancel_user;
} kolo_nccl_options;

/* Joins rank `rank` of `size` into the NCCL communicator named by id.
 * Creation is non-blocking inside NCCL (config.blocking = 0); this function
 * polls ncclCommGetAsyncError until the communicator is ready, and blocks until
 * then, until the timeout passes (KOLO_ERR_TIMEOUT) or until cancelled
 * (KOLO_ERR_ABORTED); the half-made communicator is then aborted. Also creates
 * kolo's CUDA stream. On success the caller owns *out (kolo_nccl_comm_destroy).
 * KOLO_ERR_NO_DEVICE without a GPU; KOLO_ERR_INVALID_ARG when NCCL_COMM_BLOCKING=1
 * (environment or NCCL's conf files) would make creation block with no deadline. */
kolo_status kolo_nccl_comm_create_with(const uint8_t id[KOLO_NCCL_ID_BYTES], int rank, int size,
                                       const kolo_nccl_options *options, kolo_nccl_comm **out);

/* kolo_nccl_comm_create_with(device, timeout_ms, op_timeout_ms = timeout_ms). */
kolo_status kolo_nccl_comm_create(const uint8_t id[KOLO_NCCL_ID_BYTES], int rank, int size,
                                  int device, int timeout_ms, kolo_nccl_comm **out);

/* kolo_nccl_comm_create from a ring spec: its nccl_id (must not be NULL), rank,
 * size, timeout_ms; device < 0 picks spec->local_rank modulo the device count
 * (the rank among this host's ranks, never the global rank). */
kolo_status kolo_nccl_comm_create_from_spec(const kolo_ring_spec *spec, int device,
                                            kolo_nccl_comm **out);

int kolo_nccl_comm_rank(const kolo_nccl_comm *comm);
int kolo_nccl_comm_size(const kolo_nccl_comm *comm);
int kolo_nccl_comm_device(const kolo_nccl_comm *comm);
/* Current state (thread-safe snapshot). */
kolo_nccl_state kolo_nccl_comm_state(kolo_nccl_comm *comm);

/* The error that failed the communicator (KOLO_OK if none) and its description
 * (library message included) copied into buffer (may be NULL). Thread-safe. */
kolo_status kolo_nccl_comm_error(kolo_nccl_comm *comm, char *buffer, size_t length);

/* Starts tearing the NCCL communicator down (ncclCommAbort, on a thread of its
 * own) and returns at once: never blocks, safe from any thread, idempotent.
 * Kernels waiting for a dead peer stop; later submits fail at once with
 * KOLO_ERR_ABORTED (or the error recorded before); pending requests complete
 * with that status once ncclCommAbort has returned, so a buffer is never freed
 * under a kernel still writing it. The object stays valid until
 * kolo_nccl_comm_destroy; the next epoch creates a new communicator. A failure
 * kolo_nccl detects itself (NCCL error, no progress) starts the same abort. */
void kolo_nccl_comm_abort(kolo_nccl_comm *comm);

/* Blocks until an abort has finished (state ABORTED): KOLO_OK, or
 * KOLO_ERR_TIMEOUT after timeout_ms; KOLO_ERR_STATE when no abort was started. */
kolo_status kolo_nccl_comm_wait_aborted(kolo_nccl_comm *comm, int timeout_ms);

/* Releases everything. A READY communicator with nothing pending is finalized
 * (ncclCommFinalize, bounded by the timeout) and destroyed; otherwise it is
 * aborted first. Requests still outstanding must not be used afterwards. NULL is
 * a no-op. */
void kolo_nccl_comm_destroy(kolo_nccl_comm *comm);

/* ---- operations ----
 * Every rank must submit the same operations in the same order. Each _async call
 * validates everything first (bad input: an error and nothing enqueued), then
 * enqueues the NCCL calls on kolo's stream inside ncclGroupStart/End and records
 * a CUDA event; it returns once enqueued. It may wait, bounded by the timeout,
 * while NCCL sets up connections on first use. *request (owned by the caller)
 * is freed by kolo_nccl_wait, or by kolo_nccl_test once it reports done.
 * send and recv may overlap in any way for every collective, and every rank
 * decides alike: NCCL's in-place forms run as they are, any other overlap goes
 * through a scratch buffer on the device (kolo.h's send == recv included). A
 * refusal (bad buffer) is local to the rank that made it: the other ranks, who
 * submitted, wait until their deadline unless the caller aborts them. */

typedef enum kolo_nccl_kind {
  KOLO_NCCL_ALLREDUCE = 0,     /* send, recv: count elements */
  KOLO_NCCL_BROADCAST = 1,     /* recv (in place; send ignored): count elements from root */
  KOLO_NCCL_ALLGATHER = 2,     /* send: count; recv: count * size, rank order */
  KOLO_NCCL_ALLGATHERV = 3,    /* send: counts[rank]; recv: sum(counts), rank order */
  KOLO_NCCL_REDUCESCATTER = 4, /* send: count * size; recv: count (block `rank`) */
} kolo_nccl_kind;

/* One collective of a group. */
typedef struct kolo_nccl_op_desc {
  kolo_nccl_kind kind;
  const void *send;
  void *recv;
  size_t count;         /* per the kind above; unused for ALLGATHERV */
  const size_t *counts; /* ALLGATHERV: size entries, identical on every rank */
  kolo_dtype dtype;
  kolo_op op; /* ALLREDUCE, REDUCESCATTER */
  int root;   /* BROADCAST */
} kolo_nccl_op_desc;

/* Several collectives in one ncclGroupStart/End (e.g. a fused set of gradient
 * buffers), completed by one request. n may not be 0. The descriptors (and
 * counts arrays) are read before the call returns. Ordered after the work
 * enqueued so far on the legacy default stream. */
kolo_status kolo_nccl_group_async(kolo_nccl_comm *comm, const kolo_nccl_op_desc *ops, size_t n,
                                  kolo_nccl_request **request);

/* The same, ordered after the work enqueued so far on `stream` (a cudaStream_t;
 * NULL is the legacy default stream, cudaStreamPerThread the caller's per-thread
 * one): kolo's stream waits on an event recorded there, the host does not. A
 * stream handle the runtime refuses gives KOLO_ERR_INVALID_ARG, nothing
 * enqueued, the communicator stays READY. */
kolo_status kolo_nccl_group_after(kolo_nccl_comm *comm, const kolo_nccl_op_desc *ops, size_t n,
                                  void *stream, kolo_nccl_request **request);

/* Makes `stream` (a cudaStream_t, NULL = legacy default) wait on the device for
 * the request's completion; the host does not block. The request is still the
 * caller's: complete it with kolo_nccl_wait/test to learn its status (after a
 * failure the stream goes on once the abort has stopped the kernels, with the
 * output undefined). KOLO_ERR_INVALID_ARG for a stream the runtime refuses. */
kolo_status kolo_nccl_stream_wait(kolo_nccl_request *request, void *stream);

/* The request's completion event (a cudaEvent_t), valid until the request is
 * freed; for callers that wait on it themselves. NULL for NULL. */
void *kolo_nccl_request_event(kolo_nccl_request *request);

kolo_status kolo_nccl_allreduce_async(kolo_nccl_comm *comm, const void *send, void *recv,
                                      size_t count, kolo_dtype dtype, kolo_op op,
                                      kolo_nccl_request **request);
kolo_status kolo_nccl_broadcast_async(kolo_nccl_comm *comm, void *buffer, size_t count,
                                      kolo_dtype dtype, int root, kolo_nccl_request **request);
/* Equal counts: every rank sends count elements; recv holds count * size. */
kolo_status kolo_nccl_allgather_async(kolo_nccl_comm *comm, const void *send, size_t count,
                                      void *recv, kolo_dtype dtype, kolo_nccl_request **request);
/* Variable counts known to every rank (counts[r] elements from rank r), done as
 * grouped ncclBroadcast calls, one per rank, into recv at the running offset. */
kolo_status kolo_nccl_allgatherv_async(kolo_nccl_comm *comm, const void *send, void *recv,
                                       const size_t *counts, kolo_dtype dtype,
                                       kolo_nccl_request **request);
kolo_status kolo_nccl_reducescatter_async(kolo_nccl_comm *comm, const void *send, void *recv,
                                          size_t recv_count, kolo_dtype dtype, kolo_op op,
                                          kolo_nccl_request **request);

/* Blocking exchange of one count per rank (an ncclAllGather of 64-bit values):
 * counts (size entries) receives every rank's my_count. This is how libkolo's
 * kolo_allgather (counts unknown in advance) is built: exchange counts, check the
 * capacity (same answer on every rank), then kolo_nccl_allgatherv_async. */
kolo_status kolo_nccl_exchange_counts(kolo_nccl_comm *comm, size_t my_count, size_t *counts);

/* Never blocks. Checks the communicator (ncclCommGetAsyncError) and the request's
 * event (cudaEventQuery). Sets *done; when done, *status holds the result
 * (KOLO_OK, KOLO_ERR_PEER_LOST, KOLO_ERR_TIMEOUT when no progress for the
 * op_timeout, KOLO_ERR_ABORTED, ...) and the request is freed. A failure moves
 * the communicator to FAILED and starts its abort; a failed request is done once
 * the abort has stopped the kernels. Build a new communicator for the next epoch.
 * Returns KOLO_OK, or KOLO_ERR_INVALID_ARG for NULL arguments. */
kolo_status kolo_nccl_test(kolo_nccl_request *request, int *done, kolo_status *status);

/* Blocks until the request completes, polling (yields for the first 100 us,
 * then sleeps of about 1/16 of the time waited so far, at most 2 ms) with the
 * no-progress deadline; returns its status and frees it. */
kolo_status kolo_nccl_wait(kolo_nccl_request *request);

/* ---- type mapping (pure, no GPU needed) ---- */

/* Element size of a kolo dtype in bytes; 0 for an unknown one. */
size_t kolo_nccl_dtype_size(kolo_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
