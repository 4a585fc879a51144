/* kolo_nccl: validation of one collective's arguments before anything is
 * enqueued (types, root, counts, buffers, the in-place rules NCCL accepts).
 * Pure apart from the pointer check it is given, so it is unit-tested here. */
#include <stdint.h>
#include <stdio.h>

#include "nccl_internal.h"

/* Checks one buffer through the given pointer check. */
static kolo_status check_buffer(int device, const void *ptr, const char *what,
                                kolo_nccl_ptr_check usable, char *message, size_t length) {
  if (ptr == NULL) {
    snprintf(message, length, "%s is NULL", what);
    return KOLO_ERR_INVALID_ARG;
  }
  if (!usable(ptr, device)) {
    snprintf(message, length, "%s is not device memory on CUDA device %d", what, device);
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

/* Whether [a, a+an) and [b, b+bn) overlap (byte ranges). */
static int overlaps(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

kolo_status kolo_nccl_check_op(int rank, int size, int device, const kolo_nccl_op_desc *d,
                               kolo_nccl_ptr_check usable, char *message, size_t length) {
  if (d == NULL || usable == NULL || size < 1 || rank < 0 || rank >= size) {
    snprintf(message, length, "invalid operation descriptor");
    return KOLO_ERR_INVALID_ARG;
  }
  ncclDataType_t dt;
  ncclRedOp_t op;
  size_t es = kolo_nccl_dtype_size(d->dtype);
  if (kolo_nccl_dtype_to_nccl(d->dtype, &dt) != KOLO_OK || es == 0) {
    snprintf(message, length, "unknown dtype %d", (int)d->dtype);
    return KOLO_ERR_INVALID_ARG;
  }
  size_t n = (size_t)size;
  size_t limit = SIZE_MAX / es / n; /* element counts beyond this overflow a byte size */
  switch (d->kind) {
    case KOLO_NCCL_ALLREDUCE:
    case KOLO_NCCL_REDUCESCATTER:
      if (kolo_nccl_op_to_nccl(d->op, &op) != KOLO_OK) {
        snprintf(message, length, "unknown reduction op %d", (int)d->op);
        return KOLO_ERR_INVALID_ARG;
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
    case KOLO_NCCL_ALLGATHERV:
      if (d->counts == NULL) {
        snprintf(message, length, "allgatherv without counts");
        return KOLO_ERR_INVALID_ARG;
      }
      break;
    default:
      snprintf(message, length, "unknown operation kind %d", (int)d->kind);
      return KOLO_ERR_INVALID_ARG;
  }
  if (d->kind != KOLO_NCCL_ALLGATHERV && d->count > limit) {
    snprintf(message, length, "count %zu too large", d->count);
    return KOLO_ERR_TOO_LARGE;
  }
  size_t send_n = d->count, recv_n = d->count, in_place_offset = 0;
  if (d->kind == KOLO_NCCL_ALLGATHER) {
    recv_n = d->count * n;
    in_place_offset = d->count * (size_t)rank;
  } else if (d->kind == KOLO_NCCL_REDUCESCATTER) {
    send_n = d->count * n;
  } else if (d->kind == KOLO_NCCL_ALLGATHERV) {
    size_t total = 0;
    for (size_t r = 0; r < n; r++) {
      if (d->counts[r] > limit - total) {
        snprintf(message, length, "allgatherv counts overflow");
        return KOLO_ERR_TOO_LARGE;
      }
      if ((int)r == rank) in_place_offset = total;
      total += d->counts[r];
    }
    send_n = d->counts[rank];
    recv_n = total;
  }
  kolo_status st;
  if (recv_n > 0 && (st = check_buffer(device, d->recv, "recv", usable, message, length)) != KOLO_OK)
    return st;
  if (d->kind != KOLO_NCCL_BROADCAST && send_n > 0) {
    if ((st = check_buffer(device, d->send, "send", usable, message, length)) != KOLO_OK) return st;
    /* In place is allowed only where NCCL allows it: send == recv for allreduce,
     * send at the rank's own block of recv (gather) or recv at the rank's block of
     * send (reduce-scatter). Any other overlap is refused. */
    uintptr_t s = (uintptr_t)d->send, r = (uintptr_t)d->recv;
    int exact = 0;
    if (d->kind == KOLO_NCCL_ALLREDUCE) exact = s == r;
    else if (d->kind == KOLO_NCCL_REDUCESCATTER) exact = r == s + d->count * (size_t)rank * es;
    else exact = s == r + in_place_offset * es;
    if (!exact && overlaps(d->send, send_n * es, d->recv, recv_n * es)) {
      snprintf(message, length, "send and recv overlap other than in place");
      return KOLO_ERR_INVALID_ARG;
    }
  }
  return KOLO_OK;
}

