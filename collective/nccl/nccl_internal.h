/* Internal to kolo_nccl: the pieces that speak CUDA and NCCL types (error and
 * type mapping, argument checks, the communicator's structure shared by the
 * lifecycle, submit and completion files), also used by the unit tests. Not for
 * libkolo: it uses kolo_nccl.h, which needs no CUDA headers. */
#ifndef KOLO_NCCL_INTERNAL_H
#define KOLO_NCCL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "kolo_nccl.h"

/* ncclBfloat16. Before NCCL 2.24, nccl.h declares it only when
 * __CUDA_BF16_TYPES_EXIST__ is defined, which cuda_bf16.h does for C++ only, so
 * a C file never saw it and kolo_nccl did not build. Its value has been 9 since
 * NCCL 2.10 (bfloat16 support); 2.24 declares it unconditionally. */
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE < 22400 && !defined(__CUDA_BF16_TYPES_EXIST__)
#define KOLO_NCCL_BFLOAT16 ((ncclDataType_t)9)
#else
#define KOLO_NCCL_BFLOAT16 ncclBfloat16
#endif

/* The one place an ncclResult_t becomes a kolo_status: ncclRemoteError (a peer
 * or its connection failed) -> KOLO_ERR_PEER_LOST; ncclSystemError (a failed
 * system call: a peer's reset socket, but as well a local fault such as a full
 * /dev/shm or no file descriptors left) -> KOLO_ERR_SYSTEM; ncclUnhandledCudaError
 * -> KOLO_ERR_DEVICE; invalid argument/usage -> KOLO_ERR_INVALID_ARG; other
 * failures -> KOLO_ERR_NCCL. ncclInProgress is not an error; callers handle it
 * before converting (it maps to KOLO_ERR_INTERNAL). */
kolo_status kolo_nccl_status_from_nccl(ncclResult_t result);

/* The one place a cudaError_t becomes a kolo_status: no device, no or too old a
 * driver, a stub driver, devices unavailable or an invalid ordinal ->
 * KOLO_ERR_NO_DEVICE; allocation failure -> KOLO_ERR_NO_MEMORY; invalid value or
 * resource handle -> KOLO_ERR_INVALID_ARG; everything else -> KOLO_ERR_DEVICE.
 * cudaErrorNotReady is not an error; callers handle it first (KOLO_ERR_INTERNAL). */
kolo_status kolo_nccl_status_from_cuda(cudaError_t error);

/* After one of kolo's own CUDA calls returned `error`: clears the error it left
 * in the calling thread's last-error slot (cudaGetLastError), so the caller's
 * next check does not see kolo's failure as its own. kolo never clears the slot
 * otherwise, so an error the caller's own code left pending stays for the
 * caller to read. cudaSuccess: nothing to do. */
void kolo_nccl_cuda_forget(cudaError_t error);

/* "<what>: <NCCL error name>: <library text>[ (<last error>)]" into buffer.
 * last may be NULL or "" (it is ncclGetLastError of a communicator). */
void kolo_nccl_describe_nccl(ncclResult_t result, const char *what, const char *last, char *buffer,
                             size_t length);
/* "<what>: <cudaError name>: <library text>" into buffer. */
void kolo_nccl_describe_cuda(cudaError_t error, const char *what, char *buffer, size_t length);

/* kolo dtype/op to NCCL; KOLO_ERR_INVALID_ARG for unknown values. KOLO_AVG is
 * ncclAvg (integer types: sum then integer division, as on the CPU path). */
kolo_status kolo_nccl_dtype_to_nccl(kolo_dtype dtype, ncclDataType_t *out);
kolo_status kolo_nccl_op_to_nccl(kolo_op op, ncclRedOp_t *out);

/* Checks that `device` is a usable CUDA device and makes it current for this
 * thread. KOLO_ERR_NO_DEVICE (with the runtime's reason in message) when there is
 * no GPU or device is out of range. */
kolo_status kolo_nccl_use_device(int device, char *message, size_t length);

/* Makes `device` current on the calling thread if it is not already (one
 * cudaGetDevice, and cudaSetDevice only when it differs). */
cudaError_t kolo_nccl_make_current(int device);

/* The calling thread's CUDA binding around one of kolo's calls on a caller's
 * thread: enter makes `device` current; exit puts back the context the thread
 * had bound, if it had one. A thread with none keeps `device` afterwards, so no
 * context is ever created on a GPU kolo does not use (a fresh thread's default
 * device 0, say). Without the driver entry points, enter only makes `device`
 * current. */
typedef struct kolo_nccl_guard {
  void *saved; /* the CUcontext bound at enter */
  int restore;
} kolo_nccl_guard;
cudaError_t kolo_nccl_guard_enter(int device, kolo_nccl_guard *guard);
void kolo_nccl_guard_exit(kolo_nccl_guard *guard);

/* Whether [ptr, ptr + bytes) is memory NCCL may use from CUDA device `device`:
 * one device (or managed) allocation that holds the whole range (1), or not (0). */
typedef int (*kolo_nccl_ptr_check)(const void *ptr, size_t bytes, int device);

/* The real check for kolo_nccl_check_op: cudaPointerGetAttributes on the start,
 * and the allocation's extent (cuMemGetAddressRange, through the runtime's
 * driver entry point) must hold the last byte; without that entry point, the
 * last byte must be device memory of the same device. */
int kolo_nccl_device_range(const void *ptr, size_t bytes, int device);

/* Validates one collective for rank `rank` of `size` on `device`: kind, dtype,
 * op, root, counts (overflow -> KOLO_ERR_TOO_LARGE) and buffers (through usable,
 * the whole byte range of each). Overlap of send and recv is never refused: the
 * in-place forms NCCL accepts (allreduce send == recv; gather send at the rank's
 * block of recv; reduce-scatter recv at the rank's block of send) run as they
 * are, and any other overlap sets *staged (send goes through a scratch buffer,
 * or the reduce-scatter result does), so the answer cannot differ by rank for
 * the same call. KOLO_OK, or an error with the reason in message. Pure but for
 * usable. staged may be NULL. */
kolo_status kolo_nccl_check_op(int rank, int size, int device, const kolo_nccl_op_desc *d,
                               kolo_nccl_ptr_check usable, int *staged, char *message,
                               size_t length);

/* Bytes of the send side and of the recv side of a checked descriptor. */
size_t kolo_nccl_send_bytes(int rank, int size, const kolo_nccl_op_desc *d);
size_t kolo_nccl_recv_bytes(int rank, int size, const kolo_nccl_op_desc *d);

/* Monotonic clock in nanoseconds. */
uint64_t kolo_nccl_now_ns(void);

/* How long to pause before polling again something that began elapsed_ns ago:
 * 0 (yield once) for the first 100 us, since a small GPU collective completes
 * within microseconds; then elapsed/16, kept between 20 us and 2 ms, so a
 * poll overshoots the end of a long operation by about 6% of its duration at
 * most instead of a fixed step. Pure. */
uint64_t kolo_nccl_pause_ns(uint64_t elapsed_ns);
/* Yields or sleeps as kolo_nccl_pause_ns(now - start_ns) says. */
void kolo_nccl_pause(uint64_t start_ns);

/* Pure pieces of kolo_nccl_blocking_forced (kolo_nccl.h): the value of `name` in conf-file text
 * (lines NAME=VALUE, '#' comments; the first one wins, as NCCL's setenv(…, 0) does), copied into
 * value; 1 if found. And whether a value forces blocking. */
int kolo_nccl_conf_value(const char *text, const char *name, char *value, size_t length);
int kolo_nccl_blocking_value(const char *value);

/* ---- the communicator (nccl_comm.c, nccl_submit.c, nccl_wait.c) ---- */

#define KOLO_NCCL_EVENT_POOL 64

struct kolo_nccl_comm {
  pthread_mutex_t mu;         /* guards everything below and every NCCL call on `nccl` */
  pthread_cond_t changed;     /* broadcast when the state changes (abort finished) */
  atomic_int abort_requested; /* set first by an abort; ends every poll loop */
  kolo_nccl_state state;
  kolo_status failure; /* first error; KOLO_OK while none */
  char error[512];     /* its description, library message included */
  int rank, size, device;
  int timeout_ms;      /* creation, enqueue and finalize deadline */
  int op_timeout_ms;   /* no-progress deadline of submitted operations */
  ncclComm_t nccl;     /* NULL once aborted or destroyed */
  cudaStream_t stream; /* kolo's non-blocking stream; every collective runs on it */
  int have_stream;
  cudaEvent_t input; /* recorded on the caller's stream, waited for by kolo's */
  int have_input;
  uint64_t progress_ns; /* last time the stream was seen to make progress */
  int pending;          /* requests handed out and not yet freed */
  uint64_t *count_dev;  /* size slots: scratch for kolo_nccl_exchange_counts */
  uint64_t *count_host; /* the same, pinned host memory */
  char *scratch;        /* device staging for overlapping send/recv */
  size_t scratch_bytes;
  int scratch_pooled;                       /* from cudaMallocAsync (freed in stream order) */
  cudaEvent_t events[KOLO_NCCL_EVENT_POOL]; /* completion events ready for reuse */
  int event_count;

  pthread_mutex_t abort_mu; /* guards the aborter; never taken while holding mu */
  pthread_t aborter;        /* runs ncclCommAbort so kolo_nccl_comm_abort never blocks */
  int aborter_started;
};

struct kolo_nccl_request {
  kolo_nccl_comm *comm;
  cudaEvent_t event;
  uint64_t submit_ns;
};

/* Shared by the communicator's files; all need comm->mu held. */
void kolo_nccl_transition_locked(kolo_nccl_comm *comm, kolo_nccl_event event);
/* Records the first failure (status + text), moves to FAILED, logs once, and
 * starts the abort so kernels stuck on a dead peer stop. */
void kolo_nccl_fail_locked(kolo_nccl_comm *comm, kolo_status status, const char *message);
void kolo_nccl_fail_nccl_locked(kolo_nccl_comm *comm, ncclResult_t result, const char *what);
void kolo_nccl_fail_cuda_locked(kolo_nccl_comm *comm, cudaError_t error, const char *what);
/* Waits while NCCL reports ncclInProgress (non-blocking init, group end,
 * finalize), until the comm's deadline from start_ns. The lock stays held (NCCL
 * allows no other call meanwhile) but an abort request or cancelled() ends the
 * wait. Returns the final result, or sets *timed_out / *aborted. */
ncclResult_t kolo_nccl_settle_locked(kolo_nccl_comm *comm, ncclResult_t result, uint64_t start_ns,
                                     int (*cancelled)(void *), void *user, int *timed_out,
                                     int *aborted);
/* Flags the abort and starts the abort thread (once), which takes mu and runs
 * ncclCommAbort; when no thread can be started it aborts inline. Never blocks
 * on mu, so it may be called with mu held (abort_mu is taken inside mu, never
 * the other way round). */
void kolo_nccl_request_abort(kolo_nccl_comm *comm);
/* ncclCommAbort and the move to ABORTED, with mu held (no-op once aborted). */
void kolo_nccl_finish_abort_locked(kolo_nccl_comm *comm);
/* Whether an abort thread was started (it then finishes the abort). */
int kolo_nccl_aborter_running(kolo_nccl_comm *comm);

#endif
