/* kolo_nccl: validation of one collective's arguments before anything is
 * enqueued (types, root, counts, the whole byte range of each buffer), and the
 * decision whether send and recv overlap in a way NCCL does not accept, so the
 * operation is staged through scratch memory. Pure apart from the pointer check
 * it is given, so it is unit-tested here. Every rank decides the same for the
 * same call: no overlap is refused. */
#include <stdint.h>
#include <stdio.h>

#include "nccl_internal.h"

/* Checks one buffer's byte range through the given pointer check. */
static kolo_status check_buffer(int device, const void *ptr, size_t bytes, const char *what,
                                kolo_nccl_ptr_check usable, char *message, size_t length) {
  if (ptr == NULL) {
    snprintf(message, length, "%s is NULL", what);
    return KOLO_ERR_INVALID_ARG;
  }
  if (!usable(ptr, bytes, device)) {
    snprintf(message, length,
             "%s (%zu bytes) is not one device allocation on CUDA device %d (host memory, "
             "another device, or the buffer runs past its allocation)",
             what, bytes, device);
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

/* Whether [a, a+an) and [b, b+bn) overlap (byte ranges). */
static int overlaps(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

/* Elements before this rank's block of an allgatherv. */
static size_t allgatherv_offset(int rank, const size_t *counts) {
  size_t offset = 0;
  for (int r = 0; r < rank; r++) offset += counts[r];
  return offset;
}

size_t kolo_nccl_send_bytes(int rank, int size, const kolo_nccl_op_desc *d) {
  size_t es = kolo_nccl_dtype_size(d->dtype);
  switch (d->kind) {
    case KOLO_NCCL_REDUCESCATTER:
      return d->count * (size_t)size * es;
    case KOLO_NCCL_ALLGATHERV:
      return d->counts[rank] * es;
    case KOLO_NCCL_BROADCAST:
      return 0; /* in place on recv */
    default:
      return d->count * es;
  }
}

size_t kolo_nccl_recv_bytes(int rank, int size, const kolo_nccl_op_desc *d) {
  size_t es = kolo_nccl_dtype_size(d->dtype);
  switch (d->kind) {
    case KOLO_NCCL_ALLGATHER:
      return d->count * (size_t)size * es;
    case KOLO_NCCL_ALLGATHERV:
      return (allgatherv_offset(size, d->counts)) * es;
    default:
      (void)rank;
      return d->count * es;
  }
}

/* Kind-specific checks: op, root, counts. */
static kolo_status check_kind(int rank, int size, const kolo_nccl_op_desc *d, size_t limit,
                              char *message, size_t length) {
  ncclRedOp_t op;
  switch (d->kind) {
    case KOLO_NCCL_ALLREDUCE:
    case KOLO_NCCL_REDUCESCATTER:
      if (kolo_nccl_op_to_nccl(d->op, &op) != KOLO_OK) {
        snprintf(message, length, "unknown reduction op %d", (int)d->op);
        return KOLO_ERR_INVALID_ARG;
      }
      if (d->dtype == KOLO_INT16) {
        snprintf(message, length, "int16 does not reduce on the GPU (NCCL has no int16)");
        return KOLO_ERR_UNSUPPORTED;
      }
      if (d->dtype == KOLO_BOOL && d->op != KOLO_MIN && d->op != KOLO_MAX) {
        snprintf(message, length, "bool reduces on the GPU with min (all) or max (any) only");
        return KOLO_ERR_UNSUPPORTED;
      }
      break;
    case KOLO_NCCL_BROADCAST:
      if (d->root < 0 || d->root >= size) {
        snprintf(message, length, "broadcast root %d outside 0..%d", d->root, size - 1);
        return KOLO_ERR_INVALID_ARG;
      }
      break;
    case KOLO_NCCL_ALLGATHER:
      break;
    case KOLO_NCCL_ALLGATHERV: {
      if (d->counts == NULL) {
        snprintf(message, length, "allgatherv without counts");
        return KOLO_ERR_INVALID_ARG;
      }
      size_t total = 0;
      for (int r = 0; r < size; r++) {
        if (d->counts[r] > limit - total) {
          snprintf(message, length, "allgatherv counts overflow");
          return KOLO_ERR_TOO_LARGE;
        }
        total += d->counts[r];
      }
      (void)rank;
      return KOLO_OK;
    }
    default:
      snprintf(message, length, "unknown operation kind %d", (int)d->kind);
      return KOLO_ERR_INVALID_ARG;
  }
  if (d->count > limit) {
    snprintf(message, length, "count %zu too large", d->count);
    return KOLO_ERR_TOO_LARGE;
  }
  return KOLO_OK;
}

/* Whether send/recv are one of NCCL's in-place forms. */
static int nccl_in_place(int rank, const kolo_nccl_op_desc *d) {
  uintptr_t s = (uintptr_t)d->send, r = (uintptr_t)d->recv;
  size_t es = kolo_nccl_dtype_size(d->dtype);
  switch (d->kind) {
    case KOLO_NCCL_ALLREDUCE:
      return s == r;
    case KOLO_NCCL_REDUCESCATTER:
      return r == s + d->count * (size_t)rank * es;
    case KOLO_NCCL_ALLGATHER:
      return s == r + d->count * (size_t)rank * es;
    case KOLO_NCCL_ALLGATHERV:
      return s == r + allgatherv_offset(rank, d->counts) * es;
    default:
      return 1;
  }
}

kolo_status kolo_nccl_check_op(int rank, int size, int device, const kolo_nccl_op_desc *d,
                               kolo_nccl_ptr_check usable, int *staged, char *message,
                               size_t length) {
  if (staged != NULL) *staged = 0;
  if (d == NULL || usable == NULL || size < 1 || rank < 0 || rank >= size) {
    snprintf(message, length, "invalid operation descriptor");
    return KOLO_ERR_INVALID_ARG;
  }
  ncclDataType_t dt;
  size_t es = kolo_nccl_dtype_size(d->dtype);
  if (kolo_nccl_dtype_to_nccl(d->dtype, &dt) != KOLO_OK || es == 0) {
    snprintf(message, length, "unknown dtype %d", (int)d->dtype);
    return KOLO_ERR_INVALID_ARG;
  }
  size_t limit = SIZE_MAX / es / (size_t)size; /* element counts beyond this overflow */
  kolo_status st = check_kind(rank, size, d, limit, message, length);
  if (st != KOLO_OK) return st;
  size_t send_bytes = kolo_nccl_send_bytes(rank, size, d);
  size_t recv_bytes = kolo_nccl_recv_bytes(rank, size, d);
  if (recv_bytes > 0 &&
      (st = check_buffer(device, d->recv, recv_bytes, "recv", usable, message, length)) != KOLO_OK)
    return st;
  if (send_bytes == 0) return KOLO_OK;
  if ((st = check_buffer(device, d->send, send_bytes, "send", usable, message, length)) != KOLO_OK)
    return st;
  /* NCCL accepts only its in-place forms; kolo.h allows send == recv for every
   * collective (the CPU ring does), so any other overlap is staged, never refused:
   * a refusal on some ranks only would leave the others waiting. */
  if (staged != NULL && !nccl_in_place(rank, d) &&
      overlaps(d->send, send_bytes, d->recv, recv_bytes))
    *staged = 1;
  return KOLO_OK;
}
