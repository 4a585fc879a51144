/* kolo's one error type. Every kolo library and program returns kolo_status;
 * kolo_strerror() gives the fixed text for a code. The list below is the only
 * place a code is defined (X-macro), so the enum and the strings never drift. */
#ifndef KOLO_STATUS_H
#define KOLO_STATUS_H

#include "kolo/api.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* libkolo exports these: kolo/api.h */

/* X(name, value, text) */
#define KOLO_STATUS_LIST(X)                                                             \
  X(KOLO_OK, 0, "success")                                                              \
  X(KOLO_ERR_INVALID_ARG, 1, "invalid argument")                                        \
  X(KOLO_ERR_NO_MEMORY, 2, "out of memory")                                             \
  X(KOLO_ERR_SYSTEM, 3, "system call failed")                                           \
  X(KOLO_ERR_TIMEOUT, 4, "operation timed out")                                         \
  X(KOLO_ERR_PEER_LOST, 5, "peer lost")                                                 \
  X(KOLO_ERR_ABORTED, 6, "communicator aborted")                                        \
  X(KOLO_ERR_AUTH, 7, "authentication failed (wrong secret or token)")                  \
  X(KOLO_ERR_STALE_EPOCH, 8, "epoch mismatch (stale or future ring)")                   \
  X(KOLO_ERR_PROTOCOL, 9, "protocol error (malformed message from peer)")               \
  X(KOLO_ERR_CONNECT, 10, "could not connect")                                          \
  X(KOLO_ERR_ADDRESS, 11, "bad or unresolvable address")                                \
  X(KOLO_ERR_NOT_FOUND, 12, "not found")                                                \
  X(KOLO_ERR_EXISTS, 13, "already exists")                                              \
  X(KOLO_ERR_CONFLICT, 14, "conflict (compare failed)")                                 \
  X(KOLO_ERR_UNAVAILABLE, 15, "service unavailable")                                    \
  X(KOLO_ERR_TOO_LARGE, 16, "message or value too large")                               \
  X(KOLO_ERR_PARSE, 17, "malformed input")                                              \
  X(KOLO_ERR_UNSUPPORTED, 18, "operation not supported")                                \
  X(KOLO_ERR_STATE, 19, "operation not allowed in the current state")                   \
  X(KOLO_ERR_NO_DEVICE, 20, "no usable GPU device")                                     \
  X(KOLO_ERR_DEVICE, 21, "GPU runtime error")                                           \
  X(KOLO_ERR_NCCL, 22, "NCCL error")                                                    \
  X(KOLO_ERR_IO, 23, "I/O error")                                                       \
  X(KOLO_ERR_CORRUPT, 24, "corrupt data (checksum mismatch)")                           \
  X(KOLO_ERR_RING_CHANGED, 25, "ring changed: restore state and continue")              \
  X(KOLO_ERR_LEASE_LOST, 26, "etcd lease lost")                                         \
  X(KOLO_ERR_NOT_LEADER, 27, "not the leader")                                          \
  X(KOLO_ERR_INTERNAL, 28, "internal error")                                            \
  X(KOLO_ERR_STALLED, 29, "stalled: a named operation was not submitted by every rank") \
  X(KOLO_ERR_MISMATCH, 30, "ranks disagree on an operation (dtype, count, op or root)")

typedef enum kolo_status {
#define KOLO_STATUS_ENUM_(name, value, text) name = value,
  KOLO_STATUS_LIST(KOLO_STATUS_ENUM_)
#undef KOLO_STATUS_ENUM_
} kolo_status;

/* Fixed, static text for a status code; never NULL. */
const char *kolo_strerror(kolo_status status);

/* The code's name ("KOLO_ERR_PEER_LOST"); never NULL. */
const char *kolo_status_name(kolo_status status);

/* Converts an errno value to the closest kolo_status. */
kolo_status kolo_status_from_errno(int err);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
