/* kolo_nccl: the single conversions from ncclResult_t and cudaError_t to
 * kolo_status (with the library's message), and from kolo dtypes/ops to NCCL's. */
#include <stdio.h>

#include "nccl_internal.h"

kolo_status kolo_nccl_status_from_nccl(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return KOLO_OK;
    case ncclRemoteError:
      return KOLO_ERR_PEER_LOST;
    case ncclSystemError:
      return KOLO_ERR_SYSTEM;
    case ncclUnhandledCudaError:
      return KOLO_ERR_DEVICE;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return KOLO_ERR_INVALID_ARG;
    case ncclInProgress:
      return KOLO_ERR_INTERNAL;
    case ncclInternalError:
    default:
      return KOLO_ERR_NCCL;
  }
}

kolo_status kolo_nccl_status_from_cuda(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return KOLO_OK;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInvalidDevice:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorSystemNotReady:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorCallRequiresNewerDriver:
      return KOLO_ERR_NO_DEVICE;
    case cudaErrorMemoryAllocation:
      return KOLO_ERR_NO_MEMORY;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidResourceHandle:
      return KOLO_ERR_INVALID_ARG;
    case cudaErrorNotReady:
      return KOLO_ERR_INTERNAL;
    default:
      return KOLO_ERR_DEVICE;
  }
}

/* NCCL has no public name function; these are the enum's own names. */
static const char *nccl_result_name(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclUnknownResult";
  }
}

void kolo_nccl_cuda_forget(cudaError_t error) {
  if (error != cudaSuccess) (void)cudaGetLastError();
}

void kolo_nccl_describe_nccl(ncclResult_t result, const char *what, const char *last, char *buffer,
                             size_t length) {
  if (buffer == NULL || length == 0) return;
  const char *text = ncclGetErrorString(result);
  if (last != NULL && last[0] != '\0') {
    snprintf(buffer, length, "%s: %s: %s (%s)", what, nccl_result_name(result), text ? text : "",
             last);
  } else {
    snprintf(buffer, length, "%s: %s: %s", what, nccl_result_name(result), text ? text : "");
  }
}

void kolo_nccl_describe_cuda(cudaError_t error, const char *what, char *buffer, size_t length) {
  if (buffer == NULL || length == 0) return;
  const char *name = cudaGetErrorName(error);
  const char *text = cudaGetErrorString(error);
  snprintf(buffer, length, "%s: %s: %s", what, name ? name : "cudaError", text ? text : "");
}

kolo_status kolo_nccl_dtype_to_nccl(kolo_dtype dtype, ncclDataType_t *out) {
  switch (dtype) {
    case KOLO_UINT8:
      *out = ncclUint8;
      return KOLO_OK;
    case KOLO_INT32:
      *out = ncclInt32;
      return KOLO_OK;
    case KOLO_INT64:
      *out = ncclInt64;
      return KOLO_OK;
    case KOLO_FLOAT16:
      *out = ncclFloat16;
      return KOLO_OK;
    case KOLO_BFLOAT16:
      *out = KOLO_NCCL_BFLOAT16;
      return KOLO_OK;
    case KOLO_FLOAT32:
      *out = ncclFloat32;
      return KOLO_OK;
    case KOLO_FLOAT64:
      *out = ncclFloat64;
      return KOLO_OK;
    case KOLO_INT8:
      *out = ncclInt8;
      return KOLO_OK;
    case KOLO_INT16:
      *out = ncclFloat16; /* NCCL has no int16: a 2-byte carrier for moving data; never reduced */
      return KOLO_OK;
    case KOLO_BOOL:
      *out = ncclUint8; /* 0 or 1: min and max are all and any; other reductions refused */
      return KOLO_OK;
    default:
      return KOLO_ERR_INVALID_ARG;
  }
}

kolo_status kolo_nccl_op_to_nccl(kolo_op op, ncclRedOp_t *out) {
  switch (op) {
    case KOLO_SUM:
      *out = ncclSum;
      return KOLO_OK;
    case KOLO_AVG:
      *out = ncclAvg;
      return KOLO_OK;
    case KOLO_MIN:
      *out = ncclMin;
      return KOLO_OK;
    case KOLO_MAX:
      *out = ncclMax;
      return KOLO_OK;
    case KOLO_PROD:
      *out = ncclProd;
      return KOLO_OK;
    default:
      return KOLO_ERR_INVALID_ARG;
  }
}

size_t kolo_nccl_dtype_size(kolo_dtype dtype) {
  switch (dtype) {
    case KOLO_UINT8:
    case KOLO_INT8:
    case KOLO_BOOL:
      return 1;
    case KOLO_FLOAT16:
    case KOLO_BFLOAT16:
    case KOLO_INT16:
      return 2;
    case KOLO_INT32:
    case KOLO_FLOAT32:
      return 4;
    case KOLO_INT64:
    case KOLO_FLOAT64:
      return 8;
    default:
      return 0;
  }
}
