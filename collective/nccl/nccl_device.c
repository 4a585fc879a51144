/* kolo_nccl: finding usable CUDA devices, telling device from host pointers, and
 * device buffers for callers and tests. Without a GPU each answers NO_DEVICE. */
#include <stdio.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include "common/log.h"
#include "nccl_internal.h"

#define COMPONENT "nccl"

uint64_t kolo_nccl_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void kolo_nccl_backoff_sleep(uint64_t *backoff_ns) {
  /* A GPU collective often finishes within microseconds: yield the CPU a few
   * times before sleeping, then sleep 20 us doubling to 250 us. */
  if (*backoff_ns < 32) {
    (*backoff_ns)++;
    sched_yield();
    return;
  }
  if (*backoff_ns < 20000) *backoff_ns = 20000;
  struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)*backoff_ns};
  nanosleep(&ts, NULL);
  *backoff_ns *= 2;
  if (*backoff_ns > 250000) *backoff_ns = 250000;
}

kolo_status kolo_nccl_device_count(int *count, char *message, size_t length) {
  if (count == NULL) return KOLO_ERR_INVALID_ARG;
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError(); /* clear a non-sticky error so later calls start clean */
    *count = 0;
    kolo_nccl_describe_cuda(err, "cudaGetDeviceCount", message, length);
    kolo_status st = kolo_nccl_status_from_cuda(err);
    /* Anything that stops us from counting devices means: no usable device. */
    return st == KOLO_ERR_NO_DEVICE ? st : KOLO_ERR_NO_DEVICE;
  }
  *count = n;
  if (n <= 0) {
    if (message != NULL && length > 0) snprintf(message, length, "no CUDA device present");
    return KOLO_ERR_NO_DEVICE;
  }
  if (message != NULL && length > 0) message[0] = '\0';
  return KOLO_OK;
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
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
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
    (void)cudaGetLastError();
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
    (void)cudaGetLastError(); /* no device, no driver, or unknown memory: host */
    return 0;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

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
    (void)cudaGetLastError();
    kolo_nccl_describe_cuda(err, "cudaMalloc", message, sizeof message);
    KOLO_LOGE(COMPONENT, "device buffer of %zu bytes on device %d: %s", bytes, device, message);
    return kolo_nccl_status_from_cuda(err);
  }
  *out = p;
  return KOLO_OK;
}

void kolo_nccl_device_free(void *ptr) {
  if (ptr == NULL) return;
  if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
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
    (void)cudaGetLastError();
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

void kolo_nccl_versions(char *buffer, size_t length) {
  if (buffer == NULL || length == 0) return;
  int nccl = 0, runtime = 0, driver = 0;
  if (ncclGetVersion(&nccl) != ncclSuccess) nccl = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  (void)cudaGetLastError();
  char drv[32] = "none";
  if (driver > 0) snprintf(drv, sizeof drv, "%d.%d", driver / 1000, (driver % 1000) / 10);
  /* NCCL >= 2.9 encodes X*10000 + Y*100 + Z. */
  snprintf(buffer, length, "NCCL %d.%d.%d, CUDA runtime %d.%d, driver %s", nccl / 10000,
           (nccl % 10000) / 100, nccl % 100, runtime / 1000, (runtime % 1000) / 10, drv);
}
