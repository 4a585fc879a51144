/* fakegpu's libnccl: communicators of several processes meeting in a POSIX
 * shared-memory segment named by the unique id, collectives run on the CUDA
 * stream's thread (fake_cudart.c) in chunks through one slot per rank. See
 * fakegpu.h for what is modelled. A collective step k: wait until every rank
 * consumed step k-1 (my slot is free), post my chunk, wait until every rank
 * posted step k, compute my output from the slots, mark step k consumed. A
 * dead peer makes the wait spin until ncclCommAbort (or, with
 * FAKEGPU_NCCL_DETECTS=1, fail with ncclRemoteError). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nccl.h>

#include "fakegpu.h"

#define SEG_MAGIC 0x46414b45u /* "FAKE" */
#define MAX_RANKS 16
#define SLOT_BYTES (4u << 20)
#define HEADER_BYTES 4096

typedef struct rank_slot {
  atomic_int pid;
  atomic_ullong posted, consumed;
} rank_slot;

typedef struct segment {
  atomic_uint magic;
  atomic_int size;
  atomic_int arrived;
  rank_slot slots[MAX_RANKS];
} segment;

struct ncclComm {
  int rank, size, blocking;
  char name[64];
  segment *seg;
  char *data; /* size slots of SLOT_BYTES */
  size_t mapped;
  atomic_int aborted;
  atomic_int async;    /* ncclResult_t */
  atomic_int inflight; /* collectives queued or running */
  atomic_int refs;     /* the handle + one per queued collective */
  atomic_int running;  /* a collective is on the stream thread right now */
  int initialized, finalizing;
  uint64_t step; /* on the stream thread only */
};

typedef struct coll {
  ncclComm_t comm;
  int kind; /* 0 allreduce, 1 broadcast, 2 allgather, 3 reducescatter */
  const char *send;
  char *recv;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
} coll;

static void comm_unref(ncclComm_t comm) {
  if (atomic_fetch_sub(&comm->refs, 1) != 1) return;
  if (comm->seg != NULL) munmap(comm->seg, comm->mapped);
  free(comm);
}

ncclResult_t ncclGetVersion(int *version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "fakegpu NCCL error";
  }
}

const char *ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return "";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return ncclUnhandledCudaError;
  static atomic_uint counter;
  memset(id, 0, sizeof *id);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(id->internal, sizeof id->internal, "kolofake-%d-%u-%ld%09ld", (int)getpid(),
           atomic_fetch_add(&counter, 1), (long)ts.tv_sec, ts.tv_nsec);
  return ncclSuccess;
}

static void sleep_us(long us) {
  struct timespec ts = {.tv_sec = 0, .tv_nsec = us * 1000L};
  nanosleep(&ts, NULL);
}

/* Whether any peer's process is gone (checked only with FAKEGPU_NCCL_DETECTS). */
static int peer_dead(ncclComm_t comm) {
  for (int r = 0; r < comm->size; r++) {
    int pid = atomic_load(&comm->seg->slots[r].pid);
    if (r != comm->rank && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) return 1;
  }
  return 0;
}

/* Spins until every rank's counter reaches want; 0 when aborted or failed. */
static int wait_all(ncclComm_t comm, int posted, uint64_t want) {
  const char *detect = getenv("FAKEGPU_NCCL_DETECTS");
  unsigned spins = 0;
  for (;;) {
    int ready = 1;
    for (int r = 0; r < comm->size && ready; r++) {
      rank_slot *slot = &comm->seg->slots[r];
      ready = (posted ? atomic_load(&slot->posted) : atomic_load(&slot->consumed)) >= want;
    }
    if (ready) return 1;
    if (atomic_load(&comm->aborted)) return 0;
    if (detect != NULL && detect[0] == '1' && (spins & 63) == 0 && peer_dead(comm)) {
      atomic_store(&comm->async, ncclRemoteError);
      return 0;
    }
    if (++spins < 200)
      sched_yield();
    else
      sleep_us(50);
  }
}

/* ---- element arithmetic ---- */

static size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = ldexpf((float)mant, -24);
    return sign ? -f : f;
  }
  uint32_t x = exp == 31 ? (sign | 0x7f800000u | (mant << 13))
                         : (sign | ((exp - 15 + 127) << 23) | (mant << 13));
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, mant = x & 0x7fffffu;
  int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
  if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - exp), half = mant >> shift, rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13), rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++;
  return (uint16_t)half;
}

static float bf16_to_float(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static int is_float(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat32 || t == ncclFloat64;
}

static double load_f(ncclDataType_t t, const char *p) {
  switch (t) {
    case ncclFloat16: {
      uint16_t v;
      memcpy(&v, p, 2);
      return half_to_float(v);
    }
    case ncclBfloat16: {
      uint16_t v;
      memcpy(&v, p, 2);
      return bf16_to_float(v);
    }
    case ncclFloat32: {
      float v;
      memcpy(&v, p, 4);
      return v;
    }
    default: {
      double v;
      memcpy(&v, p, 8);
      return v;
    }
  }
}

static void store_f(ncclDataType_t t, char *p, double v) {
  switch (t) {
    case ncclFloat16: {
      uint16_t h = float_to_half((float)v);
      memcpy(p, &h, 2);
      break;
    }
    case ncclBfloat16: {
      uint16_t h = float_to_bf16((float)v);
      memcpy(p, &h, 2);
      break;
    }
    case ncclFloat32: {
      float f = (float)v;
      memcpy(p, &f, 4);
      break;
    }
    default:
      memcpy(p, &v, 8);
  }
}

/* Integers as unsigned 64-bit two's complement (wrapping like the device). */
static uint64_t load_i(ncclDataType_t t, const char *p) {
  switch (t) {
    case ncclInt8:
      return (uint64_t)(int64_t) * (const int8_t *)p;
    case ncclUint8:
      return *(const uint8_t *)p;
    case ncclInt32: {
      int32_t v;
      memcpy(&v, p, 4);
      return (uint64_t)(int64_t)v;
    }
    case ncclUint32: {
      uint32_t v;
      memcpy(&v, p, 4);
      return v;
    }
    default: {
      uint64_t v;
      memcpy(&v, p, 8);
      return v;
    }
  }
}

static void store_i(ncclDataType_t t, char *p, uint64_t v) {
  size_t n = type_size(t);
  memcpy(p, &v, n); /* little-endian: the low bytes */
}

static int is_signed(ncclDataType_t t) {
  return t == ncclInt8 || t == ncclInt32 || t == ncclInt64;
}

/* v as the type holds it: NCCL reduces integers in their own width (wrapping). */
static uint64_t wrap(ncclDataType_t t, uint64_t v) {
  char tmp[8];
  store_i(t, tmp, v);
  return load_i(t, tmp);
}

/* out[i] = op over ranks of slot_r[i], for n elements at byte offset in each slot. */
static void reduce(ncclComm_t comm, char *out, size_t offset, size_t n, ncclDataType_t t,
                   ncclRedOp_t op) {
  size_t es = type_size(t);
  for (size_t i = 0; i < n; i++) {
    const char *first = comm->data + offset + i * es;
    if (is_float(t)) {
      double acc = load_f(t, first);
      for (int r = 1; r < comm->size; r++) {
        double v = load_f(t, comm->data + (size_t)r * SLOT_BYTES + offset + i * es);
        if (op == ncclSum || op == ncclAvg)
          acc += v;
        else if (op == ncclProd)
          acc *= v;
        else if (op == ncclMax)
          acc = v > acc ? v : acc;
        else
          acc = v < acc ? v : acc;
      }
      if (op == ncclAvg) acc /= comm->size;
      store_f(t, out + i * es, acc);
    } else {
      uint64_t acc = load_i(t, first);
      for (int r = 1; r < comm->size; r++) {
        uint64_t v = load_i(t, comm->data + (size_t)r * SLOT_BYTES + offset + i * es);
        int less = is_signed(t) ? (int64_t)v < (int64_t)acc : v < acc;
        if (op == ncclSum || op == ncclAvg)
          acc = wrap(t, acc + v);
        else if (op == ncclProd)
          acc = wrap(t, acc * v);
        else if (op == ncclMax)
          acc = less ? acc : v;
        else
          acc = less ? v : acc;
      }
      if (op == ncclAvg)
        acc = is_signed(t) ? (uint64_t)((int64_t)acc / comm->size) : acc / (uint64_t)comm->size;
      store_i(t, out + i * es, acc);
    }
  }
}

/* ---- collectives, on the stream thread ---- */

/* One step: post bytes from `mine` (NULL: nothing to post) into my slot. */
static int step_post(ncclComm_t comm, const char *mine, size_t bytes) {
  uint64_t k = ++comm->step;
  if (!wait_all(comm, 0, k - 1)) return 0;
  if (mine != NULL && bytes > 0) memcpy(comm->data + (size_t)comm->rank * SLOT_BYTES, mine, bytes);
  atomic_store(&comm->seg->slots[comm->rank].posted, k);
  return wait_all(comm, 1, k);
}

static void step_done(ncclComm_t comm) {
  atomic_store(&comm->seg->slots[comm->rank].consumed, comm->step);
}

static int run_chunks(coll *c) {
  ncclComm_t comm = c->comm;
  size_t es = type_size(c->type), n = (size_t)comm->size;
  size_t per = c->kind == 3 ? SLOT_BYTES / es / n : SLOT_BYTES / es;
  for (size_t off = 0; off < c->count; off += per) {
    size_t len = c->count - off < per ? c->count - off : per;
    char *slot_mine = comm->data + (size_t)comm->rank * SLOT_BYTES;
    if (c->kind == 3) { /* reduce-scatter: my slot holds my chunk of every block */
      uint64_t k = ++comm->step;
      if (!wait_all(comm, 0, k - 1)) return 0;
      for (size_t b = 0; b < n; b++)
        memcpy(slot_mine + b * len * es, c->send + (b * c->count + off) * es, len * es);
      atomic_store(&comm->seg->slots[comm->rank].posted, k);
      if (!wait_all(comm, 1, k)) return 0;
      reduce(comm, c->recv + off * es, (size_t)comm->rank * len * es, len, c->type, c->op);
    } else if (c->kind == 1) { /* broadcast */
      if (!step_post(comm, comm->rank == c->root ? c->send + off * es : NULL, len * es)) return 0;
      memmove(c->recv + off * es, comm->data + (size_t)c->root * SLOT_BYTES, len * es);
    } else if (c->kind == 2) { /* all-gather */
      if (!step_post(comm, c->send + off * es, len * es)) return 0;
      for (size_t r = 0; r < n; r++)
        memmove(c->recv + (r * c->count + off) * es, comm->data + r * SLOT_BYTES, len * es);
    } else { /* all-reduce */
      if (!step_post(comm, c->send + off * es, len * es)) return 0;
      reduce(comm, c->recv + off * es, 0, len, c->type, c->op);
    }
    step_done(comm);
  }
  return 1;
}

/* FAKEGPU_NCCL_FAIL_AT=k: this process's k-th collective fails (ncclInternalError). */
static int injected_failure(void) {
  static atomic_int collectives;
  const char *at = getenv("FAKEGPU_NCCL_FAIL_AT");
  int n = atomic_fetch_add(&collectives, 1) + 1;
  return at != NULL && atoi(at) == n;
}

static void run_coll(void *argument) {
  coll *c = argument;
  ncclComm_t comm = c->comm;
  if (injected_failure()) atomic_store(&comm->async, ncclInternalError);
  atomic_store(&comm->running, 1);
  if (!atomic_load(&comm->aborted) && atomic_load(&comm->async) == ncclSuccess) (void)run_chunks(c);
  atomic_store(&comm->running, 0);
  atomic_fetch_sub(&comm->inflight, 1);
  comm_unref(comm);
  free(c);
}

/* ---- groups ---- */

typedef struct pending {
  coll *c;
  cudaStream_t stream;
} pending;

static _Thread_local int group_depth;
static _Thread_local pending *group_ops;
static _Thread_local size_t group_count, group_capacity;
static _Thread_local int group_nonblocking;

static void launch(coll *c, cudaStream_t stream) {
  atomic_fetch_add(&c->comm->inflight, 1);
  atomic_fetch_add(&c->comm->refs, 1);
  fakegpu_stream_call(stream, run_coll, c);
}

ncclResult_t ncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  for (size_t i = 0; i < group_count; i++) launch(group_ops[i].c, group_ops[i].stream);
  group_count = 0;
  int nonblocking = group_nonblocking;
  group_nonblocking = 0;
  return nonblocking ? ncclInProgress : ncclSuccess; /* exercises the caller's settle loop */
}

static ncclResult_t enqueue(ncclComm_t comm, int kind, const void *send, void *recv, size_t count,
                            ncclDataType_t type, ncclRedOp_t op, int root, cudaStream_t stream) {
  if (comm == NULL || type_size(type) == 0) return ncclInvalidArgument;
  if (atomic_load(&comm->aborted)) return ncclInvalidUsage;
  size_t es = type_size(type), n = (size_t)comm->size;
  size_t send_bytes = (kind == 3 ? count * n : count) * es;
  size_t recv_bytes = (kind == 2 ? count * n : count) * es;
  if (kind == 1 && comm->rank != root) send_bytes = 0;
  /* NCCL leaves overlapping buffers other than its in-place forms undefined;
   * the stand-in refuses them, so a caller that relies on them is caught */
  uintptr_t s = (uintptr_t)send, r = (uintptr_t)recv;
  int in_place = kind == 0 || kind == 1 ? s == r
                 : kind == 2            ? s == r + (size_t)comm->rank * count * es
                                        : r == s + (size_t)comm->rank * count * es;
  if (!in_place && send_bytes && recv_bytes && s < r + recv_bytes && r < s + send_bytes)
    return ncclInvalidArgument;
  coll *c = calloc(1, sizeof *c);
  if (c == NULL) return ncclSystemError;
  *c = (coll){.comm = comm, .kind = kind, .count = count, .type = type, .op = op, .root = root};
  c->send = send_bytes ? fakegpu_host_view(send, send_bytes) : NULL;
  c->recv = recv_bytes ? fakegpu_host_view(recv, recv_bytes) : NULL;
  if ((send_bytes && c->send == NULL) || (recv_bytes && c->recv == NULL)) {
    free(c);
    return ncclInvalidArgument; /* not device memory: NCCL refuses it too */
  }
  if (group_depth == 0) {
    launch(c, stream);
    return ncclSuccess;
  }
  if (group_count == group_capacity) {
    size_t capacity = group_capacity ? 2 * group_capacity : 16;
    pending *grown = realloc(group_ops, capacity * sizeof *grown);
    if (grown == NULL) {
      free(c);
      return ncclSystemError;
    }
    group_ops = grown;
    group_capacity = capacity;
  }
  group_ops[group_count++] = (pending){c, stream};
  if (!comm->blocking) group_nonblocking = 1;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, 0, send, recv, count, type, op, 0, stream);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  if (comm != NULL && (root < 0 || root >= comm->size)) return ncclInvalidArgument;
  return enqueue(comm, 1, send, recv, count, type, ncclSum, root, stream);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, 2, send, recv, count, type, ncclSum, 0, stream);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, 3, send, recv, count, type, op, 0, stream);
}

/* ---- communicators ---- */

static int arrived(ncclComm_t comm) {
  return atomic_load(&comm->seg->arrived) >= comm->size;
}

static ncclResult_t join(ncclComm_t comm, const ncclUniqueId *id) {
  snprintf(comm->name, sizeof comm->name, "/%.60s", id->internal);
  int fd = shm_open(comm->name, O_CREAT | O_RDWR, 0600);
  if (fd < 0) return ncclSystemError;
  comm->mapped = HEADER_BYTES + (size_t)comm->size * SLOT_BYTES;
  if (ftruncate(fd, (off_t)comm->mapped) != 0) {
    close(fd);
    return ncclSystemError;
  }
  comm->seg = mmap(NULL, comm->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (comm->seg == MAP_FAILED) {
    comm->seg = NULL;
    return ncclSystemError;
  }
  comm->data = (char *)comm->seg + HEADER_BYTES;
  int expected = 0;
  if (!atomic_compare_exchange_strong(&comm->seg->size, &expected, comm->size) &&
      expected != comm->size)
    return ncclInvalidUsage;
  atomic_store(&comm->seg->slots[comm->rank].pid, (int)getpid());
  atomic_fetch_add(&comm->seg->arrived, 1);
  return ncclSuccess;
}

static ncclResult_t init_rank(ncclComm_t *out, int size, ncclUniqueId id, int rank, int blocking) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return ncclUnhandledCudaError;
  if (out == NULL || size < 1 || size > MAX_RANKS || rank < 0 || rank >= size)
    return ncclInvalidArgument;
  (void)fakegpu_need_context();
  const char *env = getenv("NCCL_COMM_BLOCKING");
  if (env != NULL && strtol(env, NULL, 0) == 1) blocking = 1;
  ncclComm_t comm = calloc(1, sizeof *comm);
  if (comm == NULL) return ncclSystemError;
  comm->rank = rank;
  comm->size = size;
  comm->blocking = blocking;
  atomic_init(&comm->refs, 1);
  atomic_init(&comm->async, ncclInProgress);
  ncclResult_t r = join(comm, &id);
  if (r != ncclSuccess) {
    comm_unref(comm);
    return r;
  }
  *out = comm;
  if (!blocking) return ncclInProgress;
  while (!arrived(comm)) sleep_us(200); /* NCCL's blocking init: no deadline of its own */
  comm->initialized = 1;
  shm_unlink(comm->name);
  atomic_store(&comm->async, ncclSuccess);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int size, ncclUniqueId id, int rank,
                                    ncclConfig_t *config) {
  int blocking = config == NULL || config->blocking != 0;
  return init_rank(comm, size, id, rank, blocking);
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int size, ncclUniqueId id, int rank) {
  return init_rank(comm, size, id, rank, 1);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async) {
  if (comm == NULL || async == NULL) return ncclInvalidArgument;
  ncclResult_t state = (ncclResult_t)atomic_load(&comm->async);
  if (state == ncclInProgress && !comm->initialized && arrived(comm)) {
    comm->initialized = 1;
    shm_unlink(comm->name); /* every rank has mapped it */
    atomic_store(&comm->async, ncclSuccess);
    state = ncclSuccess;
  }
  if (state == ncclInProgress && comm->finalizing && atomic_load(&comm->inflight) == 0) {
    atomic_store(&comm->async, ncclSuccess);
    state = ncclSuccess;
  }
  *async = state;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == NULL) return ncclInvalidArgument;
  comm->finalizing = 1;
  if (comm->blocking) {
    while (atomic_load(&comm->inflight) > 0) sleep_us(100);
    return ncclSuccess;
  }
  atomic_store(&comm->async, ncclInProgress);
  return ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == NULL) return ncclInvalidArgument;
  comm_unref(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == NULL) return ncclInvalidArgument;
  const char *delay = getenv("FAKEGPU_ABORT_DELAY_MS");
  if (delay != NULL) sleep_us(atol(delay) * 1000L);
  atomic_store(&comm->aborted, 1);
  /* NCCL's abort returns once its kernels stopped: the running collective sees
   * the flag; queued ones do nothing when their turn comes */
  while (atomic_load(&comm->running)) sleep_us(100);
  if (!comm->initialized) shm_unlink(comm->name);
  comm_unref(comm);
  return ncclSuccess;
}
