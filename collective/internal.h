/* libkolo's internal structures: the communicator (ring connections, engine
 * thread, request queue, failure state, staging buffers) and the ring plan that
 * every collective is compiled into before the executor runs it. */
#ifndef KOLO_COLLECTIVE_INTERNAL_H
#define KOLO_COLLECTIVE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "collective/transport.h"
#include "kolo/kolo.h"

/* Big-endian 32-bit fields of the handshake and rendezvous messages. */
static inline void kolo_put32(uint8_t *out, uint32_t value) {
  out[0] = (uint8_t)(value >> 24);
  out[1] = (uint8_t)(value >> 16);
  out[2] = (uint8_t)(value >> 8);
  out[3] = (uint8_t)value;
}

static inline uint32_t kolo_get32(const uint8_t *in) {
  return ((uint32_t)in[0] << 24) | ((uint32_t)in[1] << 16) | ((uint32_t)in[2] << 8) | in[3];
}

/* The no-progress timeout from KOLO_TIMEOUT (seconds, fractions allowed), or
 * KOLO_DEFAULT_TIMEOUT_MS when unset or not a positive number. */
int kolo_timeout_ms_from_env(void);

/* dst = a (op) b for count elements; dst may alias a or b. AVG reduces as SUM. */
void kolo_reduce(void *dst, const void *a, const void *b, size_t count, kolo_dtype dtype,
                 kolo_op op);
/* buffer /= divisor element-wise (the AVG finalisation). */
void kolo_divide(void *buffer, size_t count, kolo_dtype dtype, int divisor);

typedef enum kolo_request_kind {
  KOLO_REQUEST_ALLREDUCE,
  KOLO_REQUEST_ALLGATHER,
  KOLO_REQUEST_BROADCAST,
  KOLO_REQUEST_REDUCESCATTER,
  KOLO_REQUEST_BARRIER,
} kolo_request_kind;

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
  kolo_status status;
  int done;     /* guarded by comm->mutex */
  int pooled;   /* lives in the comm's pool (async) rather than on a caller's stack */
  void *device_request; /* an NCCL request when the operation runs on device buffers */
  kolo_request *next;
};

/* One contiguous transfer of a ring plan. A send item streams buffer to the next
 * rank, but never past what recv item depends_on has processed (the pipeline).
 * A recv item streams from the previous rank into buffer; with local set it
 * stores local (op) incoming, segment by segment, else it copies. */
typedef struct kolo_ring_item {
  char *buffer;
  const char *local;
  size_t bytes;
  int depends_on;   /* send items: recv item index gating this send, -1 = none */
  int finalize_avg; /* recv items: divide each finished segment by the ring size */
} kolo_ring_item;

typedef struct kolo_ring_plan {
  kolo_ring_item *sends; /* capacity 2 * size */
  kolo_ring_item *recvs;
  size_t *processed;     /* per recv item: bytes final in buffer */
  int send_count;
  int recv_count;
  kolo_dtype dtype;
  kolo_op op;
} kolo_ring_plan;

/* Control message sent over the control connections when a communicator fails. */
typedef struct kolo_control_message {
  uint32_t magic;
  int32_t status;
  int32_t failed_rank;
  int32_t origin_rank;
} kolo_control_message;

#define KOLO_CONTROL_MAGIC 0x4b43544cu /* "KCTL" */

/* A control connection and the bytes of a partial message read from it. */
typedef struct kolo_control_link {
  kolo_transport_conn *conn;
  int peer_rank;
  int open;
  size_t filled;
  kolo_control_message message;
} kolo_control_link;

struct kolo_comm {
  uint64_t epoch;
  int rank, size, local_rank, local_size;
  int timeout_ms;
  char **peers;
  char *secret;
  uint8_t nccl_id[KOLO_NCCL_ID_BYTES];
  int has_nccl_id;
  const kolo_transport_ops *transport;

  /* ring connections (NULL when size == 1) */
  kolo_transport_conn *data_next; /* we send data to rank + 1 */
  kolo_transport_conn *data_prev; /* we receive data from rank - 1 */
  /* shared-memory rings with the neighbours (NULL when not on one host): large
   * operations stream through them, small ones keep TCP's lower latency */
  kolo_transport_conn *shm_next;
  kolo_transport_conn *shm_prev;
  size_t shm_min_bytes; /* operations of at least this many bytes use the rings */
  kolo_control_link control[2];   /* [0] to rank + 1, [1] to rank - 1 */

  /* engine: queue of requests, run by the engine thread or inline by a blocking caller */
  pthread_t engine;
  int engine_started;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  kolo_request *queue_head, *queue_tail;
  kolo_request *free_requests;
  int busy;
  int stopping;
  int wake_fd; /* eventfd: wakes the engine (queue, abort, stop) */
  int fail_fd; /* eventfd: readable forever once the communicator failed */

  /* failure: first one wins */
  atomic_int failed;
  pthread_mutex_t error_mutex;
  kolo_status error;
  int failed_rank;
  char error_message[256];

  /* buffers reused across calls (only the one runner touches them) */
  size_t segment_bytes;
  size_t small_bytes;
  char *staging;
  size_t staging_bytes;
  char *scratch;
  size_t scratch_bytes;
  uint64_t *counts;       /* size entries: all-gather counts */
  size_t *block_offsets;  /* size entries */
  size_t *block_bytes;    /* size entries */
  kolo_ring_plan plan;

  /* CUDA mode (collective/device.c) */
  int cuda_enabled;
  int cuda_device;
  struct kolo_nccl_comm *nccl;
};

/* Records the first failure, wakes every waiter and tells the ring neighbours.
 * Never blocks. Later failures are ignored. */
void kolo_comm_fail(kolo_comm *comm, kolo_status status, int failed_rank, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Runs one request to completion on the calling thread (engine or blocking
 * caller). engine_thread says whether the control links must be served too. */
kolo_status kolo_ring_run(kolo_comm *comm, kolo_request *request, int engine_thread);

/* Reads what a control link has to say; marks failure on a message or EOF. */
void kolo_control_service(kolo_comm *comm, kolo_control_link *link);

/* Handshake of a fresh connection (connector side / acceptor side). */
#define KOLO_CONNECTION_DATA 1
#define KOLO_CONNECTION_CONTROL 2
#define KOLO_CONNECTION_BELL 3 /* doorbell of a shared-memory ring */
struct kolo_shm_offer;
/* offer: a shared-memory ring offered on this (bell) connection, or NULL. */
kolo_status kolo_handshake_send_hello(kolo_comm *comm, kolo_transport_conn *conn, int kind,
                                      const struct kolo_shm_offer *offer, int64_t deadline_ns);
/* *shm_taken: whether the peer mapped the offered ring. */
kolo_status kolo_handshake_read_ack(kolo_comm *comm, kolo_transport_conn *conn, int *shm_taken,
                                    int64_t deadline_ns);
/* Reads a hello, checks secret/epoch/rank, answers; *kind is the connection kind.
 * When the hello offers a ring this host can map, *conn is replaced by a shared-
 * memory connection wrapping it. */
kolo_status kolo_handshake_accept(kolo_comm *comm, kolo_transport_conn **conn, int expected_rank,
                                  int *kind, int64_t deadline_ns);

/* Device-buffer dispatch (collective/device.c): whether either buffer is device
 * memory in a CUDA-mode communicator; submit an operation to NCCL; wait/test the
 * NCCL request; abort/destroy the epoch's NCCL communicator. */
int kolo_device_wanted(const kolo_comm *comm, const void *a, const void *b);
kolo_status kolo_device_submit(kolo_comm *comm, const kolo_request *request, void **device_request);
kolo_status kolo_device_wait(kolo_comm *comm, void *device_request);
kolo_status kolo_device_test(kolo_comm *comm, void *device_request, int *done, kolo_status *status);
void kolo_device_abort(kolo_comm *comm);
void kolo_device_destroy(kolo_comm *comm);

struct kolo_listener {
  const kolo_transport_ops *transport;
  kolo_transport_listener *listener;
};

#endif
