/* The execution floor of libkolo (collective/exec/): the request as the
 * executor runs it (kinds, named members, fused batches), the one dispatcher
 * from a request to its algorithm (dispatch.c), the all-reduce and fusion
 * (fusion.c), the joined forms and the engine's outputs (exec.c), and the queue the executor runs
 * in order, whose lock the engine shares (run_queue.c). */
#ifndef KOLO_COLLECTIVE_EXEC_EXEC_H
#define KOLO_COLLECTIVE_EXEC_EXEC_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "collective/algo/algo.h"
#include "collective/net/net.h"
#include "kolo/engine.h"
#include "kolo/kolo.h"

typedef enum kolo_request_kind {
  KOLO_REQUEST_ALLREDUCE,
  KOLO_REQUEST_ALLGATHER,
  KOLO_REQUEST_BROADCAST,
  KOLO_REQUEST_REDUCESCATTER,
  KOLO_REQUEST_BARRIER,
  KOLO_REQUEST_ALLTOALL,
  KOLO_REQUEST_JOIN,
  KOLO_REQUEST_BATCH, /* engine-made: a fused all-reduce of negotiated tensors */
} kolo_request_kind;

struct kolo_batch;

/* One tensor of a named all-reduce (a grouped one has several). */
typedef struct kolo_member {
  const char *name; /* points into the request's names blob */
  const void *send;
  void *recv;
  size_t count;
} kolo_member;

struct kolo_request {
  kolo_comm *comm;
  kolo_request_kind kind;
  const void *send;
  void *recv;
  size_t count; /* allreduce/broadcast count, allgather send count, reducescatter recv count */
  size_t recv_capacity;
  size_t *recv_counts;
  kolo_dtype dtype;
  kolo_op op;
  int root;
  const uint8_t *holds; /* broadcast: NULL (from root), or per rank whether it holds the
                         * bytes already (kolo_ring_broadcast_sources; the same everywhere) */
  kolo_status status;
  int done;             /* guarded by comm->mutex */
  int pooled;           /* lives in the comm's pool (async) rather than on a caller's stack */
  void *device_request; /* an NCCL request when the operation runs on device buffers */
  void *cuda_stream;    /* device operations: ordered after the caller's stream (NULL: legacy) */
  kolo_request *next;

  /* named operations (engine.h); name[0] == '\0' for the unnamed API */
  char name[KOLO_NAME_MAX + 1];
  double prescale, postscale; /* all-reduce: 1.0 = none */
  const size_t *split_counts; /* reducescatter: per-rank recv counts; alltoall: per-rank
                               * send counts (caller's; NULL = even split) */
  int engine_output;          /* allgather/alltoall with recv == NULL: the engine allocates */
  void *(*output_alloc)(void *, size_t); /* engine_output: the caller's allocator, or NULL */
  void *output_alloc_context;
  void *output; /* what the engine allocated (handed over by _result) */
  size_t output_count;
  int last_rank;        /* join: the last rank to join */
  int member_count;     /* all-reduce: 1, or a group's size */
  kolo_member *members; /* member_count entries (malloc'd with the names blob) */
  kolo_member single;   /* members points here for a plain named all-reduce */
  char message[KOLO_RESULT_MESSAGE_BYTES];

  /* the engine */
  int negotiated;           /* goes through the negotiator (named, or unnamed in named mode) */
  uint64_t seq;             /* unnamed: its sequence number among this rank's unnamed ops */
  int64_t submitted_ns;     /* when it was submitted (timeline, stall) */
  int64_t decided_ns;       /* when negotiation made it ready */
  int internal;             /* engine-made (batch, joined participation): freed, not pooled */
  int counts_from;          /* reduce-scatter while ranks joined: 1 + the rank whose recv
                             * counts every rank takes first (a joined rank has none);
                             * 0 otherwise */
  int on_device;            /* named, on CUDA buffers: after negotiation the executor
                             * submits it to NCCL (device_request, set under comm->mutex
                             * when done) and kolo_wait waits for NCCL */
  struct kolo_batch *batch; /* KOLO_REQUEST_BATCH */
  void *scratch;            /* internal: a buffer it owns */
};

/* A fused all-reduce the negotiator handed to the executor: slots in the order
 * of the virtual concatenation (the same on every rank), and the requests it
 * completes. A slot without an owner is a joined rank's neutral contribution. */
typedef struct kolo_batch_slot {
  kolo_request *owner; /* NULL: neutral (this rank joined) */
  int member;          /* which member of owner */
  size_t count;
} kolo_batch_slot;

typedef struct kolo_batch {
  kolo_dtype dtype;
  kolo_op op;
  kolo_batch_slot *slots;
  int slot_count;
  size_t slot_capacity;
  kolo_request **owners;
  int owner_count;
  size_t owner_capacity;
  size_t elements;
} kolo_batch;

/* One tensor of a fused all-reduce: send == NULL contributes op's identity (a
 * joined rank), recv == NULL discards the result. */
typedef struct kolo_fused_item {
  const void *send;
  void *recv;
  size_t count;
  double prescale, postscale;
} kolo_fused_item;

/* The execution floor's part of a communicator: the ring it runs algorithms
 * on, and the fusion buffer (grows to the largest fused size seen). */
typedef struct kolo_exec {
  kolo_ring *ring;
  char *fusion;
  size_t fusion_bytes;
} kolo_exec;

/* The executor's queue: requests run in order by one runner (the executor
 * thread, or a blocking caller inline when nothing is queued). The engine
 * shares its mutex for its own fields; cond wakes waiters on a completion,
 * exec_cond the executor. */
typedef struct kolo_queue {
  kolo_net *net;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  pthread_cond_t exec_cond;
  kolo_request *queue_head, *queue_tail;
  int busy;
  int stopping;
  size_t outstanding; /* negotiated requests not completed */
} kolo_queue;

/* Queues engine-decided work for the executor (under queue->mutex). */
void kolo_queue_push_locked(kolo_queue *queue, kolo_request *request);
/* Completes a request (under queue->mutex): status, message, waiters woken. */
void kolo_request_complete_locked(kolo_queue *queue, kolo_request *request, kolo_status status);

/* Runs one request to completion on the calling thread (the executor or a
 * blocking caller): the one dispatcher (dispatch.c). engine_thread says whether
 * the control links must be served too. */
kolo_status kolo_exec_run(kolo_exec *ex, kolo_request *request, int engine_thread);

/* When a fused all-reduce's phases ended (for the timeline). */
typedef struct kolo_fused_times {
  int64_t start_ns, staged_ns, reduced_ns, end_ns;
} kolo_fused_times;

/* fusion.c: an all-reduce request (unnamed: the ring's; named: its members fused). */
kolo_status kolo_exec_allreduce(kolo_exec *ex, kolo_request *request, int engine_thread);
/* count tensors of one dtype and op as one all-reduce through the fusion buffer
 * (one tensor alone runs in place). */
kolo_status kolo_exec_fused(kolo_exec *ex, const kolo_fused_item *items, int count,
                            kolo_dtype dtype, kolo_op op, int engine_thread,
                            kolo_fused_times *times);
/* exec.c: named requests. */
kolo_status kolo_exec_join(kolo_exec *ex, kolo_request *request, int engine_thread);
/* A reduce-scatter while ranks have joined (request->counts_from > 0): the
 * counts go from that rank to every rank, then the ring reduce-scatter-v runs
 * with them; a joined rank (request->internal) contributes op's identity and
 * drops its block. */
kolo_status kolo_exec_reducescatter_joined(kolo_exec *ex, kolo_request *request, int engine_thread);
/* Allocates the request's engine output (count elements) and points recv at it;
 * fails the communicator when memory runs out (the peers are mid-collective). */
kolo_status kolo_output_allocate(kolo_exec *ex, kolo_request *request, size_t count);
void kolo_request_message(kolo_request *request, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Runs a batch: the fused all-reduce of its slots (fusion.c). */
kolo_status kolo_exec_batch(kolo_exec *ex, kolo_batch *batch, kolo_fused_times *times);
void kolo_batch_free(kolo_batch *batch);

#endif
