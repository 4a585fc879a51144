/* fakegpu: a CPU stand-in for the CUDA runtime (libcudart) and NCCL (libnccl),
 * built as libraries with the real sonames so that kolo's binaries load it
 * instead of the real ones when its folder comes first in LD_LIBRARY_PATH. It
 * exists so that CI, which has no GPU, runs kolo's GPU control flow for real:
 * stream order, events, failure coupling, aborts, staging, device state copies.
 * It proves nothing about real CUDA or NCCL; tests/gpu/run.sh on a GPU does.
 *
 * What it models, and how:
 * - device memory lives in a region the host cannot touch (mapped PROT_NONE;
 *   the same pages are mapped a second time for the fake's own use), so a host
 *   memcpy of device memory faults as on a real GPU;
 * - streams are FIFOs run by one thread each, events are generation counters,
 *   cudaStreamWaitEvent waits on the device side, the host never blocks except
 *   in the synchronous calls; kolo's non-blocking stream is not ordered after
 *   the legacy default stream unless kolo orders it;
 * - cudaFree waits for every stream of its device, as the real one does, so a
 *   kernel stuck on a dead peer hangs it;
 * - the last-error slot is per thread and not sticky, a context is made on a
 *   device when a call needs one (counted: fakegpu_context_made);
 * - NCCL communicators of several processes meet in a POSIX shared-memory
 *   segment named by the unique id; collectives run on the stream's thread in
 *   chunks through per-rank slots; a dead peer makes them spin until
 *   ncclCommAbort, like NCCL's intra-node transports (FAKEGPU_NCCL_DETECTS=1
 *   makes NCCL report ncclRemoteError instead); non-blocking init completes
 *   once every rank arrived; NCCL_COMM_BLOCKING=1 makes init block forever.
 *
 * Environment: FAKEGPU_DEVICES (default 1; 0 = no device), FAKEGPU_NCCL_DETECTS,
 * FAKEGPU_ABORT_DELAY_MS (ncclCommAbort takes this long), FAKEGPU_NCCL_FAIL_AT=k
 * (the process's k-th collective fails with ncclInternalError). */
#ifndef KOLO_FAKEGPU_H
#define KOLO_FAKEGPU_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

/* Shared by the fake libcudart (which defines them) and the fake libnccl. */

/* The fake's own view of device memory at ptr (NULL if ptr is not inside a live
 * device allocation of at least bytes from ptr). */
void *fakegpu_host_view(const void *ptr, size_t bytes);

/* Runs fn(arg) on the stream's thread, in order with the stream's other work. */
void fakegpu_stream_call(cudaStream_t stream, void (*fn)(void *), void *arg);

/* The calling thread's current device, making a context there if none. */
int fakegpu_need_context(void);

/* For tests: 1 once a context was made on device (by any thread). */
int fakegpu_context_made(int device);
/* For tests: the number of stream threads alive, and bytes of device memory in use. */
int fakegpu_stream_threads(void);
size_t fakegpu_device_bytes_in_use(int device);

#endif
