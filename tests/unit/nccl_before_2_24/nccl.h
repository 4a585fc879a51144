/* A stand-in for the nccl.h of NCCL 2.14-2.23, written for kolo's build test
 * (not NVIDIA's file): only what kolo_nccl's mapping code uses, with the one
 * trait that broke the build: ncclBfloat16 exists only when
 * __CUDA_BF16_TYPES_EXIST__ is defined (cuda_bf16.h defines it for C++), so a C
 * translation unit does not see it. Values are NCCL's ABI, the same in 2.28. */
#ifndef KOLO_TEST_NCCL_BEFORE_2_24_H
#define KOLO_TEST_NCCL_BEFORE_2_24_H

#include <cuda_runtime.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 23
#define NCCL_PATCH 4
#define NCCL_VERSION_CODE 22304

typedef struct ncclComm *ncclComm_t;
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
#if defined(__CUDA_BF16_TYPES_EXIST__)
  ncclBfloat16 = 9,
  ncclNumTypes = 10
#else
  ncclNumTypes = 9
#endif
} ncclDataType_t;

const char *ncclGetErrorString(ncclResult_t result);

#endif
