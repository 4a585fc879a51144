/* Internal to kolo_nccl: the pieces that speak CUDA and NCCL types (error and
 * type mapping, device checks), shared by the module's files and its unit tests.
 * Not for libkolo: it uses kolo_nccl.h, which needs no CUDA headers. */
#ifndef KOLO_NCCL_INTERNAL_H
#define KOLO_NCCL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "kolo_nccl.h"

/* The one place an ncclResult_t becomes a kolo_status: ncclRemoteError and
 * ncclSystemError (a peer or its connection died) -> KOLO_ERR_PEER_LOST,
 * ncclUnhandledCudaError -> KOLO_ERR_DEVICE, invalid argument/usage ->
 * KOLO_ERR_INVALID_ARG, other failures -> KOLO_ERR_NCCL. ncclInProgress is not
 * an error; callers handle it before converting (it maps to KOLO_ERR_INTERNAL). */
kolo_status kolo_nccl_status_from_nccl(ncclResult_t result);

/* The one place a cudaError_t becomes a kolo_status: no device, no or too old a
 * driver, a stub driver, devices unavailable or an invalid ordinal ->
 * KOLO_ERR_NO_DEVICE; allocation failure -> KOLO_ERR_NO_MEMORY; invalid value ->
 * KOLO_ERR_INVALID_ARG; everything else -> KOLO_ERR_DEVICE. cudaErrorNotReady is
 * not an error; callers handle it first (it maps to KOLO_ERR_INTERNAL). */
kolo_status kolo_nccl_status_from_cuda(cudaError_t error);

/* "<what>: <NCCL error name>: <library text>[ (<last error>)]" into buffer.
 * last may be NULL or "" (it is ncclGetLastError of a communicator). */
void kolo_nccl_describe_nccl(ncclResult_t result, const char *what, const char *last,
                             char *buffer, size_t length);
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

/* Whether ptr is memory NCCL may use from CUDA device `device` (1) or not (0). */
typedef int (*kolo_nccl_ptr_check)(const void *ptr, int device);

/* Validates one collective for rank `rank` of `size` on `device`: kind, dtype,
 * op, root, counts (overflow -> KOLO_ERR_TOO_LARGE), buffers (through usable)
 * and overlap: in place only as NCCL allows it (allreduce send == recv; gather
 * send at the rank's block of recv; reduce-scatter recv at the rank's block of
 * send). KOLO_OK, or an error with the reason in message. Pure but for usable. */
kolo_status kolo_nccl_check_op(int rank, int size, int device, const kolo_nccl_op_desc *d,
                               kolo_nccl_ptr_check usable, char *message, size_t length);

/* Monotonic clock in nanoseconds, and the pause between polls: 32 sched_yield
 * calls, then sleeps growing from 20 us to 250 us (*backoff_ns holds the state;
 * start it at 0). */
uint64_t kolo_nccl_now_ns(void);
void kolo_nccl_backoff_sleep(uint64_t *backoff_ns);

#endif
