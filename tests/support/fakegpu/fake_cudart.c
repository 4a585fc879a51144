/* fakegpu's libcudart: the subset of the CUDA runtime kolo and its GPU test
 * programs call, on the CPU (see fakegpu.h for what is modelled and why).
 * Device memory is a PROT_NONE region whose pages the fake reaches through a
 * second mapping; streams are threads running FIFOs; events count generations. */
#define _GNU_SOURCE
#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fakegpu.h"

#define REGION_BYTES (1ull << 32) /* device address space, split between devices */
#define MAX_DEVICES 8
#define MAX_ALLOCATIONS 4096
#define ALIGN 256

/* ---- per-thread state: current device, last error ---- */

static _Thread_local int current_device = -1; /* -1: no context bound */
static _Thread_local cudaError_t last_error = cudaSuccess;

static cudaError_t fail(cudaError_t error) {
  last_error = error;
  return error;
}

static int device_count(void) {
  const char *value = getenv("FAKEGPU_DEVICES");
  int n = value != NULL && *value != '\0' ? atoi(value) : 1;
  return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

static atomic_int contexts[MAX_DEVICES];

int fakegpu_need_context(void) {
  if (current_device < 0) current_device = 0; /* the runtime's implicit device 0 */
  atomic_store(&contexts[current_device], 1);
  return current_device;
}

int fakegpu_context_made(int device) {
  return device >= 0 && device < MAX_DEVICES && atomic_load(&contexts[device]);
}

/* ---- device memory ---- */

typedef struct allocation {
  uintptr_t start;
  size_t bytes;
  int device;
  int live;
  int pinned_host; /* cudaMallocHost: host memory the runtime knows */
} allocation;

static pthread_mutex_t memory_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t memory_once = PTHREAD_ONCE_INIT;
static char *device_base;  /* PROT_NONE view: what callers get */
static char *backing_base; /* the same pages, read-write, for the fake */
static size_t next_offset[MAX_DEVICES];
static allocation allocations[MAX_ALLOCATIONS];
static int allocation_count;

static void map_memory(void) {
  int fd = memfd_create("fakegpu", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)REGION_BYTES) != 0) abort();
  device_base = mmap(NULL, REGION_BYTES, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  backing_base =
      mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (device_base == MAP_FAILED || backing_base == MAP_FAILED) abort();
  close(fd);
}

static size_t device_span(void) {
  int n = device_count();
  return (size_t)(REGION_BYTES / (uint64_t)(n > 0 ? n : 1));
}

/* The live allocation holding ptr (device or pinned host), or NULL. Lock held. */
static allocation *find_allocation(uintptr_t p) {
  for (int i = 0; i < allocation_count; i++) {
    allocation *a = &allocations[i];
    if (a->live && p >= a->start && p < a->start + a->bytes) return a;
  }
  return NULL;
}

static cudaError_t device_malloc(void **out, size_t bytes, int device) {
  pthread_once(&memory_once, map_memory);
  if (bytes == 0) bytes = 1;
  size_t rounded = (bytes + ALIGN - 1) / ALIGN * ALIGN;
  pthread_mutex_lock(&memory_mu);
  /* reuse a freed block of this device that fits, else take fresh space */
  allocation *slot = NULL;
  for (int i = 0; i < allocation_count && slot == NULL; i++) {
    allocation *a = &allocations[i];
    if (!a->live && !a->pinned_host && a->device == device && a->bytes >= rounded) slot = a;
  }
  if (slot == NULL) {
    size_t span = device_span();
    if (allocation_count == MAX_ALLOCATIONS || next_offset[device] + rounded > span) {
      pthread_mutex_unlock(&memory_mu);
      return fail(cudaErrorMemoryAllocation);
    }
    slot = &allocations[allocation_count++];
    slot->start = (uintptr_t)device_base + (size_t)device * span + next_offset[device];
    slot->bytes = rounded;
    slot->device = device;
    next_offset[device] += rounded;
  }
  slot->live = 1;
  pthread_mutex_unlock(&memory_mu);
  *out = (void *)slot->start;
  return cudaSuccess;
}

void *fakegpu_host_view(const void *ptr, size_t bytes) {
  pthread_once(&memory_once, map_memory);
  uintptr_t p = (uintptr_t)ptr;
  if (p < (uintptr_t)device_base || p >= (uintptr_t)device_base + REGION_BYTES) return NULL;
  pthread_mutex_lock(&memory_mu);
  allocation *a = find_allocation(p);
  int ok = a != NULL && !a->pinned_host && bytes <= a->start + a->bytes - p;
  pthread_mutex_unlock(&memory_mu);
  return ok ? backing_base + (p - (uintptr_t)device_base) : NULL;
}

/* Where the fake reads or writes ptr: the backing view of device memory, or
 * ptr itself for host memory. */
static void *access_view(const void *ptr) {
  uintptr_t p = (uintptr_t)ptr;
  if (device_base != NULL && p >= (uintptr_t)device_base &&
      p < (uintptr_t)device_base + REGION_BYTES)
    return backing_base + (p - (uintptr_t)device_base);
  return (void *)ptr;
}

size_t fakegpu_device_bytes_in_use(int device) {
  size_t total = 0;
  pthread_mutex_lock(&memory_mu);
  for (int i = 0; i < allocation_count; i++)
    if (allocations[i].live && !allocations[i].pinned_host && allocations[i].device == device)
      total += allocations[i].bytes;
  pthread_mutex_unlock(&memory_mu);
  return total;
}

static void release_allocation(void *ptr) {
  pthread_mutex_lock(&memory_mu);
  allocation *a = find_allocation((uintptr_t)ptr);
  if (a != NULL && !a->pinned_host) a->live = 0;
  pthread_mutex_unlock(&memory_mu);
}

/* ---- events ---- */

struct CUevent_st {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t recorded, completed;
  atomic_int refs; /* the caller's + one per queued operation */
};

static void event_unref(cudaEvent_t e) {
  if (atomic_fetch_sub(&e->refs, 1) == 1) {
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
  }
}

/* ---- streams ---- */

enum { OP_COPY, OP_SET, OP_HOST, OP_RECORD, OP_WAIT, OP_FREE, OP_CALL };

typedef struct op {
  int kind;
  void *dst;
  const void *src;
  size_t bytes;
  int value;
  void (*fn)(void *);
  void *arg;
  cudaEvent_t event;
  uint64_t generation;
  struct op *next;
} op;

struct CUstream_st {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  op *head, *tail;
  uint64_t queued, finished;
  int destroyed, device, legacy;
  struct CUstream_st *next_stream; /* all streams, for cudaFree's device sync */
};

static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *streams;
static atomic_int stream_threads;
static struct CUstream_st *legacy_stream;
static pthread_once_t legacy_once = PTHREAD_ONCE_INIT;

int fakegpu_stream_threads(void) {
  return atomic_load(&stream_threads);
}

static void run_op(op *o) {
  switch (o->kind) {
    case OP_COPY:
      memmove(o->dst, o->src, o->bytes);
      break;
    case OP_SET:
      memset(o->dst, o->value, o->bytes);
      break;
    case OP_HOST:
    case OP_CALL:
      o->fn(o->arg);
      break;
    case OP_RECORD:
      pthread_mutex_lock(&o->event->mu);
      if (o->generation > o->event->completed) o->event->completed = o->generation;
      pthread_cond_broadcast(&o->event->cv);
      pthread_mutex_unlock(&o->event->mu);
      event_unref(o->event);
      break;
    case OP_WAIT:
      pthread_mutex_lock(&o->event->mu);
      while (o->event->completed < o->generation) pthread_cond_wait(&o->event->cv, &o->event->mu);
      pthread_mutex_unlock(&o->event->mu);
      event_unref(o->event);
      break;
    case OP_FREE:
      release_allocation(o->dst);
      break;
  }
}

static void unlink_stream(struct CUstream_st *s) {
  pthread_mutex_lock(&streams_mu);
  for (struct CUstream_st **p = &streams; *p != NULL; p = &(*p)->next_stream) {
    if (*p == s) {
      *p = s->next_stream;
      break;
    }
  }
  pthread_mutex_unlock(&streams_mu);
}

static void *stream_main(void *argument) {
  struct CUstream_st *s = argument;
  current_device = s->device;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (s->head == NULL && !s->destroyed) pthread_cond_wait(&s->cv, &s->mu);
    if (s->head == NULL) break; /* destroyed and drained */
    op *o = s->head;
    pthread_mutex_unlock(&s->mu);
    run_op(o);
    pthread_mutex_lock(&s->mu);
    s->head = o->next;
    if (s->head == NULL) s->tail = NULL;
    s->finished++;
    pthread_cond_broadcast(&s->cv);
    free(o);
  }
  pthread_mutex_unlock(&s->mu);
  unlink_stream(s);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
  atomic_fetch_sub(&stream_threads, 1);
  return NULL;
}

static struct CUstream_st *new_stream(int device, int legacy) {
  struct CUstream_st *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->device = device;
  s->legacy = legacy;
  pthread_t thread;
  atomic_fetch_add(&stream_threads, 1);
  if (pthread_create(&thread, NULL, stream_main, s) != 0) {
    atomic_fetch_sub(&stream_threads, 1);
    free(s);
    return NULL;
  }
  pthread_detach(thread);
  pthread_mutex_lock(&streams_mu);
  s->next_stream = streams;
  streams = s;
  pthread_mutex_unlock(&streams_mu);
  return s;
}

static void make_legacy(void) {
  legacy_stream = new_stream(0, 1);
}

static struct CUstream_st *resolve(cudaStream_t stream) {
  if (stream == NULL || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    pthread_once(&legacy_once, make_legacy);
    return legacy_stream;
  }
  return stream;
}

/* Appends an operation; returns its ticket (the stream's count after it). */
static uint64_t enqueue(struct CUstream_st *s, op *o) {
  pthread_mutex_lock(&s->mu);
  o->next = NULL;
  if (s->tail)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  uint64_t ticket = ++s->queued;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return ticket;
}

static void wait_ticket(struct CUstream_st *s, uint64_t ticket) {
  pthread_mutex_lock(&s->mu);
  while (s->finished < ticket) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

static cudaError_t submit(cudaStream_t stream, op o) {
  op *copy = malloc(sizeof *copy);
  if (copy == NULL) return fail(cudaErrorMemoryAllocation);
  *copy = o;
  enqueue(resolve(stream), copy);
  return cudaSuccess;
}

void fakegpu_stream_call(cudaStream_t stream, void (*fn)(void *), void *arg) {
  (void)submit(stream, (op){.kind = OP_CALL, .fn = fn, .arg = arg});
}

/* Waits until every stream of device has run what it had queued. */
static void device_sync(int device) {
  for (;;) {
    struct CUstream_st *busy = NULL;
    uint64_t ticket = 0;
    pthread_mutex_lock(&streams_mu);
    for (struct CUstream_st *s = streams; s != NULL && busy == NULL; s = s->next_stream) {
      pthread_mutex_lock(&s->mu);
      if ((s->device == device || s->legacy) && s->finished < s->queued) {
        busy = s;
        ticket = s->queued;
      }
      pthread_mutex_unlock(&s->mu);
    }
    if (busy == NULL) {
      pthread_mutex_unlock(&streams_mu);
      return;
    }
    pthread_mutex_lock(&busy->mu); /* taken before streams_mu is released: busy stays alive */
    pthread_mutex_unlock(&streams_mu);
    while (busy->finished < ticket) pthread_cond_wait(&busy->cv, &busy->mu);
    pthread_mutex_unlock(&busy->mu);
  }
}

/* ---- the runtime API ---- */

cudaError_t cudaGetDeviceCount(int *count) {
  int n = device_count();
  *count = n;
  return n > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaGetDevice(int *device) {
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  *device = current_device >= 0 ? current_device : 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device_count() == 0) return fail(cudaErrorNoDevice);
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  current_device = device;
  atomic_store(&contexts[device], 1);
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  return last_error;
}

cudaError_t cudaRuntimeGetVersion(int *version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version) {
  *version = device_count() > 0 ? CUDART_VERSION : 0;
  return cudaSuccess;
}

const char *cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorStubLibrary:
      return "cudaErrorStubLibrary";
    case cudaErrorDevicesUnavailable:
      return "cudaErrorDevicesUnavailable";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    default:
      return "cudaErrorUnknown";
  }
}

const char *cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "fakegpu error";
}

static int no_device(void) {
  return device_count() == 0;
}

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
  if (no_device()) return fail(cudaErrorNoDevice);
  if (ptr == NULL) return fail(cudaErrorInvalidValue);
  return device_malloc(ptr, bytes, fakegpu_need_context());
}

cudaError_t cudaMallocAsync(void **ptr, size_t bytes, cudaStream_t stream) {
  if (no_device()) return fail(cudaErrorNoDevice);
  if (ptr == NULL) return fail(cudaErrorInvalidValue);
  return device_malloc(ptr, bytes, resolve(stream)->device);
}

cudaError_t cudaFree(void *ptr) {
  if (ptr == NULL) return cudaSuccess;
  if (no_device()) return fail(cudaErrorNoDevice);
  pthread_mutex_lock(&memory_mu);
  allocation *a = find_allocation((uintptr_t)ptr);
  int device = a != NULL && !a->pinned_host && a->start == (uintptr_t)ptr ? a->device : -1;
  pthread_mutex_unlock(&memory_mu);
  if (device < 0) return fail(cudaErrorInvalidValue);
  device_sync(device); /* the real cudaFree waits for the device too */
  release_allocation(ptr);
  return cudaSuccess;
}

cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream) {
  if (ptr == NULL) return cudaSuccess;
  /* freed when the stream gets there, without waiting for the device */
  return submit(stream, (op){.kind = OP_FREE, .dst = ptr});
}

cudaError_t cudaMallocHost(void **ptr, size_t bytes) {
  if (no_device()) return fail(cudaErrorNoDevice);
  void *p = malloc(bytes ? bytes : 1);
  if (p == NULL) return fail(cudaErrorMemoryAllocation);
  pthread_mutex_lock(&memory_mu);
  if (allocation_count == MAX_ALLOCATIONS) {
    pthread_mutex_unlock(&memory_mu);
    free(p);
    return fail(cudaErrorMemoryAllocation);
  }
  allocations[allocation_count++] =
      (allocation){.start = (uintptr_t)p, .bytes = bytes ? bytes : 1, .live = 1, .pinned_host = 1};
  pthread_mutex_unlock(&memory_mu);
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr) {
  if (ptr == NULL) return cudaSuccess;
  pthread_mutex_lock(&memory_mu);
  allocation *a = find_allocation((uintptr_t)ptr);
  if (a != NULL && a->pinned_host) {
    a->live = 0;
    a->pinned_host = 0;
    a->device = -1;
  }
  pthread_mutex_unlock(&memory_mu);
  free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  if (no_device()) return fail(cudaErrorNoDevice);
  int device = fakegpu_need_context();
  *total = device_span();
  *free_bytes = *total - fakegpu_device_bytes_in_use(device);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr) {
  if (no_device()) return fail(cudaErrorNoDevice);
  if (attr == NULL) return fail(cudaErrorInvalidValue);
  (void)fakegpu_need_context(); /* as CUDA 12: asking initializes the runtime here */
  pthread_once(&memory_once, map_memory);
  memset(attr, 0, sizeof *attr);
  attr->type = cudaMemoryTypeUnregistered;
  attr->device = -2;
  pthread_mutex_lock(&memory_mu);
  allocation *a = find_allocation((uintptr_t)ptr);
  if (a != NULL) {
    attr->type = a->pinned_host ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
    attr->device = a->pinned_host ? 0 : a->device;
    attr->devicePointer = (void *)ptr;
    attr->hostPointer = a->pinned_host ? (void *)ptr : NULL;
  }
  pthread_mutex_unlock(&memory_mu);
  return cudaSuccess;
}

/* A copy's direction does not matter to the fake: both sides are reachable. */
static cudaError_t copy_op(void *dst, const void *src, size_t bytes, op *out) {
  if (no_device()) return fail(cudaErrorNoDevice);
  if (bytes > 0 && (dst == NULL || src == NULL)) return fail(cudaErrorInvalidValue);
  pthread_once(&memory_once, map_memory);
  *out = (op){.kind = OP_COPY, .dst = access_view(dst), .src = access_view(src), .bytes = bytes};
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  (void)kind;
  op o;
  cudaError_t e = copy_op(dst, src, bytes, &o);
  return e != cudaSuccess ? e : submit(stream, o);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
  (void)kind;
  op o;
  cudaError_t e = copy_op(dst, src, bytes, &o);
  if (e != cudaSuccess) return e;
  (void)fakegpu_need_context();
  op *copy = malloc(sizeof *copy);
  if (copy == NULL) return fail(cudaErrorMemoryAllocation);
  *copy = o;
  struct CUstream_st *s = resolve(NULL);
  wait_ticket(s, enqueue(s, copy)); /* synchronous, on the legacy default stream */
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream) {
  if (no_device()) return fail(cudaErrorNoDevice);
  pthread_once(&memory_once, map_memory);
  return submit(stream,
                (op){.kind = OP_SET, .dst = access_view(dst), .value = value, .bytes = bytes});
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *user) {
  if (no_device()) return fail(cudaErrorNoDevice);
  return submit(stream, (op){.kind = OP_HOST, .fn = fn, .arg = user});
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
  (void)flags;
  if (no_device()) return fail(cudaErrorNoDevice);
  struct CUstream_st *s = new_stream(fakegpu_need_context(), 0);
  if (s == NULL) return fail(cudaErrorMemoryAllocation);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) {
  return cudaStreamCreateWithFlags(stream, 0);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == NULL || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return fail(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&stream->mu);
  stream->destroyed = 1; /* its thread ends once the queued work is done */
  pthread_cond_broadcast(&stream->cv);
  pthread_mutex_unlock(&stream->mu);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  struct CUstream_st *s = resolve(stream);
  pthread_mutex_lock(&s->mu);
  uint64_t ticket = s->queued;
  pthread_mutex_unlock(&s->mu);
  wait_ticket(s, ticket);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  device_sync(fakegpu_need_context());
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
  (void)flags;
  if (no_device()) return fail(cudaErrorNoDevice);
  (void)fakegpu_need_context();
  cudaEvent_t e = calloc(1, sizeof *e);
  if (e == NULL) return fail(cudaErrorMemoryAllocation);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  atomic_init(&e->refs, 1);
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  return cudaEventCreateWithFlags(event, 0);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == NULL) return fail(cudaErrorInvalidResourceHandle);
  event_unref(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == NULL) return fail(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&event->mu);
  uint64_t generation = ++event->recorded;
  pthread_mutex_unlock(&event->mu);
  atomic_fetch_add(&event->refs, 1);
  return submit(stream, (op){.kind = OP_RECORD, .event = event, .generation = generation});
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (event == NULL) return fail(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&event->mu);
  int done = event->completed >= event->recorded;
  pthread_mutex_unlock(&event->mu);
  return done ? cudaSuccess : cudaErrorNotReady; /* not an error: slot untouched */
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == NULL) return fail(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&event->mu);
  uint64_t generation = event->recorded;
  while (event->completed < generation) pthread_cond_wait(&event->cv, &event->mu);
  pthread_mutex_unlock(&event->mu);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  (void)flags;
  if (event == NULL) return fail(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&event->mu);
  uint64_t generation = event->recorded; /* the record in effect now, as CUDA does */
  pthread_mutex_unlock(&event->mu);
  atomic_fetch_add(&event->refs, 1);
  return submit(stream, (op){.kind = OP_WAIT, .event = event, .generation = generation});
}

/* ---- driver entry points: address ranges and context binding ---- */

static CUresult fake_address_range(CUdeviceptr *base, size_t *size, CUdeviceptr ptr) {
  pthread_mutex_lock(&memory_mu);
  allocation *a = find_allocation((uintptr_t)ptr);
  int ok = a != NULL && !a->pinned_host;
  if (ok) {
    if (base) *base = (CUdeviceptr)a->start;
    if (size) *size = a->bytes;
  }
  pthread_mutex_unlock(&memory_mu);
  return ok ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

static CUresult fake_ctx_get(CUcontext *ctx) {
  *ctx = current_device >= 0 ? (CUcontext)(uintptr_t)(current_device + 1) : NULL;
  return CUDA_SUCCESS;
}

static CUresult fake_ctx_set(CUcontext ctx) {
  current_device = ctx != NULL ? (int)(uintptr_t)ctx - 1 : -1;
  return CUDA_SUCCESS;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status) {
  (void)version, (void)flags;
  *fn = NULL;
  if (strcmp(symbol, "cuMemGetAddressRange") == 0)
    *fn = (void *)fake_address_range;
  else if (strcmp(symbol, "cuCtxGetCurrent") == 0)
    *fn = (void *)fake_ctx_get;
  else if (strcmp(symbol, "cuCtxSetCurrent") == 0)
    *fn = (void *)fake_ctx_set;
  if (status != NULL)
    *status = *fn != NULL ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
