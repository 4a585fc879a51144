/* kolo_nccl: finding usable CUDA devices, telling device from host pointers
 * (and checking that a whole buffer lies in one device allocation), device
 * buffers and copies for callers and tests, and the poll pause. Without a GPU
 * each answers NO_DEVICE. kolo clears the CUDA runtime's last-error slot only
 * right after one of its own calls failed (kolo_nccl_cuda_forget). */
#include <cuda.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "nccl_internal.h"

#define COMPONENT "nccl"

uint64_t kolo_nccl_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t kolo_nccl_pause_ns(uint64_t elapsed_ns) {
  if (elapsed_ns < 100000ull) return 0;
  uint64_t pause = elapsed_ns / 16;
  if (pause < 20000ull) pause = 20000ull;
  if (pause > 2000000ull) pause = 2000000ull;
  return pause;
}

void kolo_nccl_pause(uint64_t start_ns) {
  uint64_t now = kolo_nccl_now_ns();
  uint64_t pause = kolo_nccl_pause_ns(now > start_ns ? now - start_ns : 0);
  if (pause == 0) {
    sched_yield();
    return;
  }
  struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)pause};
  nanosleep(&ts, NULL);
}

kolo_status kolo_nccl_device_count(int *count, char *message, size_t length) {
  if (count == NULL) return KOLO_ERR_INVALID_ARG;
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    kolo_nccl_cuda_forget(err);
    *count = 0;
    kolo_nccl_describe_cuda(err, "cudaGetDeviceCount", message, length);
    /* Anything that stops us from counting devices means: no usable device. */
    return KOLO_ERR_NO_DEVICE;
  }
  *count = n;
  if (n <= 0) {
    if (message != NULL && length > 0) snprintf(message, length, "no CUDA device present");
    return KOLO_ERR_NO_DEVICE;
  }
  if (message != NULL && length > 0) message[0] = '\0';
  return KOLO_OK;
}

cudaError_t kolo_nccl_make_current(int device) {
  int current = -1;
  cudaError_t err = cudaGetDevice(&current);
  if (err == cudaSuccess && current == device) return cudaSuccess;
  if (err != cudaSuccess) kolo_nccl_cuda_forget(err);
  err = cudaSetDevice(device);
  if (err != cudaSuccess) kolo_nccl_cuda_forget(err);
  return err;
}

kolo_status kolo_nccl_use_device(int device, char *message, size_t length) {
  int n = 0;
  kolo_status st = kolo_nccl_device_count(&n, message, length);
  if (st != KOLO_OK) return st;
  if (device < 0 || device >= n) {
    if (message != NULL && length > 0)
      snprintf(message, length, "CUDA device %d requested, %d present", device, n);
    return KOLO_ERR_NO_DEVICE;
  }
  cudaError_t err = kolo_nccl_make_current(device);
  if (err != cudaSuccess) {
    kolo_nccl_describe_cuda(err, "cudaSetDevice", message, length);
    return kolo_nccl_status_from_cuda(err);
  }
  return KOLO_OK;
}

kolo_status kolo_nccl_pointer_device(const void *ptr, int *is_device, int *device) {
  if (is_device == NULL || device == NULL) return KOLO_ERR_INVALID_ARG;
  *is_device = 0;
  *device = -1;
  int n = 0;
  char message[256];
  kolo_status st = kolo_nccl_device_count(&n, message, sizeof message);
  if (st != KOLO_OK) return st;
  if (ptr == NULL) return KOLO_OK;
  struct cudaPointerAttributes attr;
  memset(&attr, 0, sizeof attr);
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    /* Older runtimes report plain host memory as cudaErrorInvalidValue. */
    kolo_nccl_cuda_forget(err);
    return err == cudaErrorInvalidValue ? KOLO_OK : kolo_nccl_status_from_cuda(err);
  }
  if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) {
    *is_device = 1;
    *device = attr.device;
  }
  return KOLO_OK;
}

int kolo_nccl_is_device_pointer(const void *ptr) {
  if (ptr == NULL) return 0;
  struct cudaPointerAttributes attr;
  memset(&attr, 0, sizeof attr);
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    kolo_nccl_cuda_forget(err); /* no device, no driver, or unknown memory: host */
    return 0;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

int kolo_nccl_is_device_pointer_on(const void *ptr, int device) {
  if (ptr == NULL) return 0;
  if (device < 0) return kolo_nccl_is_device_pointer(ptr);
  kolo_nccl_guard guard;
  if (kolo_nccl_guard_enter(device, &guard) != cudaSuccess) return 0;
  int is_device = kolo_nccl_is_device_pointer(ptr);
  kolo_nccl_guard_exit(&guard);
  return is_device;
}

/* ---- driver entry points (no link against libcuda) ---- */

typedef CUresult (*address_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);
typedef CUresult (*ctx_get_fn)(CUcontext *ctx);
typedef CUresult (*ctx_set_fn)(CUcontext ctx);
static address_range_fn address_range;
static ctx_get_fn ctx_get_current;
static ctx_set_fn ctx_set_current;
static pthread_once_t entry_points_once = PTHREAD_ONCE_INIT;

static void *entry_point(const char *symbol) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &found);
#else
  cudaError_t err = cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault, &found);
#endif
  if (err != cudaSuccess) kolo_nccl_cuda_forget(err);
  return err == cudaSuccess && found == cudaDriverEntryPointSuccess ? fn : NULL;
}

static void find_entry_points(void) {
  address_range = (address_range_fn)entry_point("cuMemGetAddressRange");
  ctx_get_current = (ctx_get_fn)entry_point("cuCtxGetCurrent");
  ctx_set_current = (ctx_set_fn)entry_point("cuCtxSetCurrent");
}

cudaError_t kolo_nccl_guard_enter(int device, kolo_nccl_guard *guard) {
  guard->saved = NULL;
  guard->restore = 0;
  pthread_once(&entry_points_once, find_entry_points);
  CUcontext saved = NULL;
  if (ctx_get_current == NULL || ctx_set_current == NULL || ctx_get_current(&saved) != CUDA_SUCCESS)
    return kolo_nccl_make_current(device);
  if (saved != NULL) {
    int current = -1;
    cudaError_t err = cudaGetDevice(&current);
    if (err != cudaSuccess) kolo_nccl_cuda_forget(err);
    if (err == cudaSuccess && current == device) return cudaSuccess;
  }
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) {
    kolo_nccl_cuda_forget(err);
    return err;
  }
  /* a thread that had chosen a device gets it back; one that had none keeps
   * kolo's, so no context is ever made on a device kolo does not use */
  guard->saved = saved;
  guard->restore = saved != NULL;
  return cudaSuccess;
}

void kolo_nccl_guard_exit(kolo_nccl_guard *guard) {
  if (guard->restore && ctx_set_current != NULL) (void)ctx_set_current((CUcontext)guard->saved);
  guard->restore = 0;
}

/* ---- the extent of an allocation ---- */

/* Device memory of `device` (or managed memory) at p. */
static int device_byte(const void *p, int device) {
  struct cudaPointerAttributes attr;
  memset(&attr, 0, sizeof attr);
  cudaError_t err = cudaPointerGetAttributes(&attr, p);
  if (err != cudaSuccess) {
    kolo_nccl_cuda_forget(err);
    return 0;
  }
  return attr.type == cudaMemoryTypeManaged ||
         (attr.type == cudaMemoryTypeDevice && attr.device == device);
}

int kolo_nccl_device_range(const void *ptr, size_t bytes, int device) {
  if (ptr == NULL || !device_byte(ptr, device)) return 0;
  if (bytes <= 1) return 1;
  uintptr_t start = (uintptr_t)ptr;
  if (start + bytes < start) return 0; /* wraps around */
  pthread_once(&entry_points_once, find_entry_points);
  if (address_range != NULL) {
    CUdeviceptr base = 0;
    size_t size = 0;
    if (address_range(&base, &size, (CUdeviceptr)start) == CUDA_SUCCESS)
      return start - (uintptr_t)base + bytes <= size;
    return 0;
  }
  return device_byte((const char *)ptr + bytes - 1, device);
}

/* ---- buffers and copies ---- */

kolo_status kolo_nccl_device_alloc(int device, size_t bytes, void **out) {
  if (out == NULL) return KOLO_ERR_INVALID_ARG;
  *out = NULL;
  char message[256];
  kolo_status st = kolo_nccl_use_device(device, message, sizeof message);
  if (st != KOLO_OK) {
    KOLO_LOGE(COMPONENT, "device buffer of %zu bytes: %s: %s", bytes, kolo_strerror(st), message);
    return st;
  }
  if (bytes == 0) bytes = 1; /* a valid, unique pointer even for empty buffers */
  void *p = NULL;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    kolo_nccl_cuda_forget(err);
    kolo_nccl_describe_cuda(err, "cudaMalloc", message, sizeof message);
    KOLO_LOGE(COMPONENT, "device buffer of %zu bytes on device %d: %s", bytes, device, message);
    return kolo_nccl_status_from_cuda(err);
  }
  *out = p;
  return KOLO_OK;
}

void kolo_nccl_device_free(void *ptr) {
  if (ptr == NULL) return;
  kolo_nccl_cuda_forget(cudaFree(ptr));
}

/* One blocking cudaMemcpy with the device check and error text in one place. */
static kolo_status copy_bytes(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                              const char *what) {
  if ((dst == NULL || src == NULL) && bytes > 0) return KOLO_ERR_INVALID_ARG;
  if (bytes == 0) return KOLO_OK;
  int n = 0;
  char message[256];
  kolo_status st = kolo_nccl_device_count(&n, message, sizeof message);
  if (st != KOLO_OK) {
    KOLO_LOGE(COMPONENT, "%s: %s: %s", what, kolo_strerror(st), message);
    return st;
  }
  cudaError_t err = cudaMemcpy(dst, src, bytes, kind);
  if (err != cudaSuccess) {
    kolo_nccl_cuda_forget(err);
    kolo_nccl_describe_cuda(err, what, message, sizeof message);
    KOLO_LOGE(COMPONENT, "%s", message);
    return kolo_nccl_status_from_cuda(err);
  }
  return KOLO_OK;
}

kolo_status kolo_nccl_copy_to_device(void *device_dst, const void *host_src, size_t bytes) {
  return copy_bytes(device_dst, host_src, bytes, cudaMemcpyHostToDevice, "copy to device");
}

kolo_status kolo_nccl_copy_to_host(void *host_dst, const void *device_src, size_t bytes) {
  return copy_bytes(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, "copy to host");
}

kolo_status kolo_nccl_copy(void *dst, const void *src, size_t bytes) {
  return copy_bytes(dst, src, bytes, cudaMemcpyDefault, "copy");
}

int kolo_nccl_build_version(void) {
  return NCCL_VERSION_CODE;
}

void kolo_nccl_versions(char *buffer, size_t length) {
  if (buffer == NULL || length == 0) return;
  int nccl = 0, runtime = 0, driver = 0;
  if (ncclGetVersion(&nccl) != ncclSuccess) nccl = 0;
  cudaError_t err = cudaRuntimeGetVersion(&runtime);
  if (err != cudaSuccess) {
    kolo_nccl_cuda_forget(err);
    runtime = 0;
  }
  err = cudaDriverGetVersion(&driver);
  if (err != cudaSuccess) {
    kolo_nccl_cuda_forget(err);
    driver = 0;
  }
  char drv[32] = "none";
  if (driver > 0) snprintf(drv, sizeof drv, "%d.%d", driver / 1000, (driver % 1000) / 10);
  /* NCCL >= 2.9 encodes X*10000 + Y*100 + Z. */
  snprintf(buffer, length, "NCCL %d.%d.%d, CUDA runtime %d.%d, driver %s", nccl / 10000,
           (nccl % 10000) / 100, nccl % 100, runtime / 1000, (runtime % 1000) / 10, drv);
}
