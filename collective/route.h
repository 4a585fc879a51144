/* libkolo's single route (issue 31): what api.c and named.c share. Every public
 * submit function resolves its kolo_op_options into a kolo_route, checks its
 * arguments with the helpers below (a bad one is KOLO_ERR_INVALID_ARG with a log
 * line naming it, and nothing is queued), builds one request and hands it to
 * kolo_route_submit, the one place that decides where it goes. */
#ifndef KOLO_COLLECTIVE_ROUTE_H
#define KOLO_COLLECTIVE_ROUTE_H

#include "collective/face.h"

/* An operation's options, resolved (defaults filled in). */
typedef struct kolo_route {
  const char *name; /* NULL: unnamed (ordered by position) */
  const char *what; /* name, or the operation's kind, for log lines */
  void *stream;     /* stream_call: the caller's stream */
  int stream_call;  /* KOLO_OP_STREAM */
  int blocking;     /* KOLO_OP_BLOCKING */
  double prescale, postscale;
  void *(*alloc)(void *, size_t); /* the caller's output allocator (NULL: libkolo's) */
  void *alloc_context;
} kolo_route;

/* Resolves options (NULL: defaults) for an operation of kind what; a name, if
 * given, is checked. INVALID_ARG for a NULL comm or out, unknown flags, a process
 * set, or a bad name. */
kolo_status kolo_route_begin(kolo_comm *comm, const kolo_op_options *options, const char *what,
                             kolo_request **out, kolo_route *route);
/* The operation's dtype and (has_op) reduction op. */
kolo_status kolo_route_check_types(const kolo_route *route, kolo_dtype dtype, int has_op,
                                   kolo_op op);
/* count elements at buffer (which: "send", "recv"...): not too many, not NULL. */
kolo_status kolo_route_check_buffer(const char *what, const void *buffer, size_t count,
                                    const char *which);
/* Scale factors: finite, and 1 unless the dtype is floating. */
kolo_status kolo_route_check_scales(const kolo_route *route, kolo_dtype dtype);
/* Where the buffers live: *device 1 for CUDA device memory (CUDA mode only). A
 * named operation refuses one buffer on each side, and a stream call with host
 * buffers; an unnamed stream call is checked at submission (its refusal fails
 * the communicator: the other ranks run it on their GPUs). */
kolo_status kolo_route_place(kolo_comm *comm, const kolo_route *route, const void *a, const void *b,
                             int *device);
/* KOLO_ERR_UNSUPPORTED, logged: what cannot run on device buffers. */
kolo_status kolo_route_unsupported_on_device(const kolo_route *route, const char *what);
/* A request of kind for route, zeroed but for what every request carries; a
 * device operation (named: negotiated first) is marked for NCCL. */
void kolo_route_prototype(kolo_request *prototype, kolo_comm *comm, const kolo_route *route,
                          kolo_request_kind kind, kolo_dtype dtype, int device);
/* The one submission: a named request under its name (KOLO_ERR_EXISTS while that
 * name is in flight here), an unnamed one to the queue (kolo_queue_submit). On
 * failure it frees a member table the prototype owns. */
kolo_status kolo_route_submit(kolo_comm *comm, const kolo_route *route, kolo_request *prototype,
                              kolo_request **out);

#endif
