/* libkolo's internal structures: the communicator (ring channels, engine
 * thread, request queue, failure state, staging buffers) and the ring plan that
 * every collective is compiled into before the executor runs it. The code is
 * split by concern: comm.c (lifetime), form.c (ring formation), handshake.c,
 * channel.c (channels, the bulk upgrade), failure.c (failure propagation),
 * queue.c (requests, engine thread), api.c (entry points), ring.c (algorithms
 * and the executor). */
#ifndef KOLO_COLLECTIVE_INTERNAL_H
#define KOLO_COLLECTIVE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "collective/channel.h"
#include "collective/names.h"
#include "collective/transport.h"
#include "kolo/engine.h"
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

/* The longest job secret a hello may carry. */
#define KOLO_MAX_SECRET_BYTES 1024

/* A byte count from the environment ("4096", "64K", "4M"), or fallback when
 * unset, zero or not a number. */
size_t kolo_size_from_env(const char *name, size_t fallback);

/* The no-progress timeout from KOLO_TIMEOUT (seconds, fractions allowed), or
 * KOLO_DEFAULT_TIMEOUT_MS when unset or not a positive number. */
int kolo_timeout_ms_from_env(void);

/* dst = a (op) b for count elements; dst may alias a or b; a and b may start at
 * any byte (dst must be aligned to the element). AVG reduces as SUM. */
void kolo_reduce(void *dst, const void *a, const void *b, size_t count, kolo_dtype dtype,
                 kolo_op op);
/* buffer /= divisor element-wise (the AVG finalisation). */
void kolo_divide(void *buffer, size_t count, kolo_dtype dtype, int divisor);
/* dst = src * factor (floating types; a plain copy for the others). dst may be src. */
void kolo_scale(void *dst, const void *src, size_t count, kolo_dtype dtype, double factor);
int kolo_dtype_is_floating(kolo_dtype dtype);
/* Fills count elements with op's identity (what a joined rank contributes). */
void kolo_fill_identity(void *buffer, size_t count, kolo_dtype dtype, kolo_op op);

typedef struct kolo_device kolo_device; /* CUDA mode state, collective/device.c */

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
  void *output;               /* what the engine allocated (handed over by _result) */
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
  int remote_first; /* recv items with local: the incoming data is the reduce's left operand */
  int guards_send;  /* recv items with local: a segment is reduced into buffer only once this
                     * send item (same offsets, e.g. in place) has sent it; -1 = none */
} kolo_ring_item;

typedef struct kolo_ring_plan {
  kolo_ring_item *sends; /* capacity items (at least 2 * size) */
  kolo_ring_item *recvs;
  size_t *processed; /* per recv item: bytes final in buffer */
  int send_count;
  int recv_count;
  int capacity; /* items each array holds */
  kolo_dtype dtype;
  kolo_op op;
  size_t segment_bytes; /* staged reductions' segment; 0 = comm->segment_bytes (reset) */
} kolo_ring_plan;

/* Control message sent over the control connections when a communicator fails. */
typedef struct kolo_control_message {
  uint32_t magic;
  int32_t status;
  int32_t failed_rank;
  int32_t origin_rank;
} kolo_control_message;

#define KOLO_CONTROL_MAGIC 0x4b43544cu /* "KCTL" */
/* A liveness beat (beat.c): no content, only that the sender is alive. */
#define KOLO_BEAT_MAGIC 0x4b424541u /* "KBEA" */
#define KOLO_BEAT_INTERVAL_MS 100
#define KOLO_DEFAULT_PEER_TIMEOUT_MS 500
/* A negotiation frame: the header is a kolo_control_message whose status is the
 * payload length, failed_rank the cycle and origin_rank the rank whose message
 * the payload is; it travels from a rank to the next one only. */
#define KOLO_NEGO_MAGIC 0x4b4e4547u /* "KNEG" */
#define KOLO_NEGO_MAX_FRAME (16u * 1024u * 1024u)

/* A complete negotiation frame read from the previous rank. */
typedef struct kolo_frame {
  struct kolo_frame *next;
  uint32_t cycle;
  int32_t origin;
  uint32_t length;
  uint8_t data[];
} kolo_frame;

/* A control connection, the bytes of a partial message read from it, and the
 * negotiation frames it delivered that the negotiator has not used yet. */
typedef struct kolo_control_link {
  kolo_channel channel;
  int peer_rank;
  int open;
  size_t filled;
  kolo_control_message message;
  kolo_frame *frame; /* a frame whose payload is being read */
  size_t frame_filled;
  kolo_frame *frames_head, *frames_tail;
  int64_t heard_ns;      /* beat.c: when anything last arrived on this link */
  int64_t beat_due_ns;   /* beat.c: when the next beat is sent on it */
  int64_t beat_heard_ns; /* beat.c: when the last beat arrived (0: none yet) */
  int64_t gap_max_ns;    /* beat.c: the longest recent gap between beats (decaying) */
} kolo_control_link;

/* One tensor of a fused all-reduce: send == NULL contributes op's identity (a
 * joined rank), recv == NULL discards the result. */
typedef struct kolo_fused_item {
  const void *send;
  void *recv;
  size_t count;
  double prescale, postscale;
} kolo_fused_item;

struct kolo_comm {
  uint64_t epoch;
  int rank, size, local_rank, local_size;
  int timeout_ms;
  char **peers;
  char *secret;
  uint8_t nccl_id[KOLO_NCCL_ID_BYTES];
  int has_nccl_id;
  /* connection setup: listen, dial, handshakes, control links (TCP) */
  const kolo_transport_ops *transport;

  /* the ring's two directions (unconnected when size == 1): each has a small
   * channel (TCP, lowest latency) and a bulk one (a shared-memory ring when the
   * neighbour shares the host, else the same TCP channel) */
  kolo_direction next;          /* we send data to rank + 1 */
  kolo_direction prev;          /* we receive data from rank - 1 */
  size_t bulk_min_bytes;        /* operations of at least this many bytes use the bulk channels */
  int64_t spin_ns;              /* the most a stalled transfer busy-polls before sleeping in poll */
  int64_t spin_budget_ns;       /* what it busy-polls now (ring.c adapts it; the runner's only) */
  kolo_control_link control[2]; /* [0] to rank + 1, [1] to rank - 1 */
  atomic_int peer_timeout_ms;   /* beat.c: a neighbour silent this long is lost (0: never) */

  /* named requests in flight on this rank (guarded by mutex) */
  kolo_names *in_flight;

  /* the negotiator thread (engine.c); the fields are guarded by mutex */
  pthread_t negotiator;
  int negotiator_started;
  struct kolo_engine *engine;
  kolo_request *inbox_head, *inbox_tail; /* negotiated requests not yet taken */
  int named_mode;          /* a named operation was submitted here: unnamed ones are negotiated */
  uint64_t unnamed_issued; /* unnamed operations issued here (direct and negotiated) */
  int hurry;               /* a thread waits on a negotiated request: negotiate now */
  size_t outstanding;      /* negotiated requests not completed */
  int say_goodbye;         /* destroy: tell the neighbours before closing */
  int negotiator_stopping;
  pthread_cond_t exec_cond; /* wakes the executor (queue, stop) */
  /* a failure for the neighbours, sent by the negotiator (the links' one writer) */
  kolo_control_message outbox;
  atomic_int outbox_pending;

  /* engine: queue of requests, run by the engine thread or inline by a blocking caller */
  pthread_t executor;
  int executor_started;
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
  size_t pair_min_bytes;     /* 2 ranks over TCP: all-reduces of pair_min_bytes..pair_max_bytes */
  size_t pair_max_bytes;     /* exchange whole buffers (kolo_allreduce_choose) */
  size_t pair_shm_max_bytes; /* 2 ranks over shared memory: the pair up to this size */
  size_t pair_segment_bytes; /* the pair exchange's segment (staging holds the larger one) */
  char *staging;
  size_t staging_bytes;
  char *scratch;
  size_t scratch_bytes;
  char *fusion; /* the fusion buffer (grows to the largest fused size seen) */
  size_t fusion_bytes;
  char *matrix; /* all-to-all: every rank's send counts and capacity */
  size_t matrix_bytes;
  uint64_t *counts;      /* size entries: all-gather counts */
  size_t *block_offsets; /* size entries */
  size_t *block_bytes;   /* size entries */
  kolo_ring_plan plan;

  /* CUDA mode (collective/device.c): NULL until kolo_comm_use_cuda, then set once */
  _Atomic(kolo_device *) device;
};

/* Records the first failure, wakes every waiter and tells the ring neighbours.
 * Never blocks. Later failures are ignored. */
void kolo_comm_fail(kolo_comm *comm, kolo_status status, int failed_rank, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Like kolo_comm_fail, without telling the neighbours: for a failure every rank
 * decides by itself from the same negotiation (a stall), so each keeps the full
 * message instead of a forwarded one. */
void kolo_comm_fail_local(kolo_comm *comm, kolo_status status, int failed_rank, const char *fmt,
                          ...) __attribute__((format(printf, 4, 5)));

/* Runs one request to completion on the calling thread (engine or blocking
 * caller). engine_thread says whether the control links must be served too. */
kolo_status kolo_ring_run(kolo_comm *comm, kolo_request *request, int engine_thread);

/* The ring plan and its executor (ring.c), for the algorithm files. */
/* Grows the plan's arrays to hold items send and recv items each. */
kolo_status kolo_plan_reserve(kolo_ring_plan *plan, int items);
void kolo_plan_reset(kolo_ring_plan *plan, kolo_dtype dtype, kolo_op op);
/* First element of chunk index when count elements are split into parts chunks. */
size_t kolo_chunk_start(size_t count, int parts, int index);
void kolo_plan_send(kolo_ring_plan *plan, const void *buffer, size_t bytes, int depends_on);
int kolo_plan_recv(kolo_ring_plan *plan, void *buffer, const void *local, size_t bytes,
                   int finalize_avg);
/* Ring all-gather of blocks already laid out in out (block b: bytes[b] at offsets[b]). */
void kolo_plan_allgather_blocks(kolo_comm *comm, char *out, const size_t *offsets,
                                const size_t *bytes);
/* Grows a reusable 64-byte-aligned buffer to at least need bytes. */
kolo_status kolo_ensure_buffer(char **buffer, size_t *have, size_t need);
/* Runs comm->plan; op_bytes (the same on every rank) picks bulk or small channels. */
kolo_status kolo_execute_plan(kolo_comm *comm, int engine_thread, size_t op_bytes);
/* recv = op over ranks of send (the small path or the ring, by size). */
/* How a ring all-reduces. A pure function of what every rank knows alike (ring
 * size, element count, bytes, the size settings, whether the links are shared
 * memory), never of a rank's own buffers, so that every rank picks the same:
 *   GATHER: at most small_bytes (or fewer elements than ranks): all-gather the
 *           whole buffers, reduce locally in rank order (n-1 latency steps);
 *   PAIR:   2 ranks over TCP, pair_min_bytes..pair_max_bytes, or over shared
 *           memory up to pair_shm_max_bytes (the peer's buffer is reduced
 *           straight out of the ring, so it beats the gather's copy): each sends its
 *           whole buffer and reduces the other's as it streams in;
 *   RING:   reduce-scatter + all-gather, pipelined per segment. */
typedef enum {
  KOLO_ALLREDUCE_GATHER,
  KOLO_ALLREDUCE_PAIR,
  KOLO_ALLREDUCE_RING
} kolo_allreduce_algo;
kolo_allreduce_algo kolo_allreduce_choose(int size, size_t count, size_t bytes, size_t small_bytes,
                                          size_t pair_min_bytes, size_t pair_max_bytes,
                                          size_t pair_shm_max_bytes, int over_shm);

/* The executor's next spin budget after a stall of waited_ns ended (spun out
 * or slept through), given the current budget and the most it may spin
 * (KOLO_SPIN_US): a stall within the most sets it to at least twice the wait,
 * a longer one halves it; always within [max/16, max]. Pure (ring.c). */
int64_t kolo_spin_budget_next(int64_t budget_ns, int64_t max_ns, int64_t waited_ns);

/* Whether an operation of bytes runs over shared memory in either ring
 * direction (the same answer on both ends of each link, so on every rank). */
int kolo_bulk_is_shm(const kolo_comm *comm, size_t bytes);

kolo_status kolo_ring_allreduce(kolo_comm *comm, const void *send, void *recv, size_t count,
                                kolo_dtype dtype, kolo_op op, int engine_thread);
/* ring_fused.c: one ring all-reduce over pieces that form a virtual
 * concatenation (element-aligned; src may equal dst). Uses the ring for any
 * size: callers send totals under the small-path threshold elsewhere. */
typedef struct kolo_piece {
  const char *src;
  char *dst;
  size_t bytes;
} kolo_piece;
kolo_status kolo_ring_allreduce_pieces(kolo_comm *comm, const kolo_piece *pieces, int count,
                                       kolo_dtype dtype, kolo_op op, int engine_thread);
/* ring_uneven.c: reduce-scatter with request->split_counts, all-to-all. */
kolo_status kolo_ring_reducescatter_v(kolo_comm *comm, kolo_request *request, int engine_thread);
kolo_status kolo_ring_alltoall(kolo_comm *comm, kolo_request *request, int engine_thread);

/* When a fused all-reduce's phases ended (for the timeline). */
typedef struct kolo_fused_times {
  int64_t start_ns, staged_ns, reduced_ns, end_ns;
} kolo_fused_times;

/* exec.c: named requests. */
kolo_status kolo_exec_allreduce(kolo_comm *comm, kolo_request *request, int engine_thread);
/* count tensors of one dtype and op as one all-reduce through the fusion buffer
 * (one tensor alone runs in place). */
kolo_status kolo_exec_fused(kolo_comm *comm, const kolo_fused_item *items, int count,
                            kolo_dtype dtype, kolo_op op, int engine_thread,
                            kolo_fused_times *times);
kolo_status kolo_exec_join(kolo_comm *comm, kolo_request *request, int engine_thread);
/* A reduce-scatter while ranks have joined (request->counts_from > 0): the
 * counts go from that rank to every rank, then the ring reduce-scatter-v runs
 * with them; a joined rank (request->internal) contributes op's identity and
 * drops its block. */
kolo_status kolo_exec_reducescatter_joined(kolo_comm *comm, kolo_request *request,
                                           int engine_thread);
/* Allocates the request's engine output (count elements) and points recv at it;
 * fails the communicator when memory runs out (the peers are mid-collective). */
kolo_status kolo_output_allocate(kolo_request *request, size_t count);
void kolo_request_message(kolo_request *request, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Reads what a control link has to say; marks failure on a message or EOF. */
void kolo_control_service(kolo_comm *comm, kolo_control_link *link);

/* What one 16-byte control-link message is (failure.c; pure, fuzzed): a beat, the
 * header of a negotiation frame (only from the previous rank, at most
 * KOLO_NEGO_MAX_FRAME bytes), a goodbye (status OK), a failure (a kolo status
 * naming a failed rank -1..size-1 reported by an origin 0..size-1), or garbage. */
typedef enum kolo_control_kind {
  KOLO_CONTROL_GARBAGE = 0,
  KOLO_CONTROL_BEAT,
  KOLO_CONTROL_FRAME,
  KOLO_CONTROL_GOODBYE,
  KOLO_CONTROL_FAILURE,
} kolo_control_kind;
kolo_control_kind kolo_control_classify(const kolo_control_message *message, int from_prev,
                                        int size);

/* Sends a control message on both links (skipping the link to skip_rank);
 * best effort, never blocks. Negotiator thread only. */
void kolo_control_send(kolo_comm *comm, const kolo_control_message *message, int skip_rank);

/* ---- the liveness beat (beat.c), run by the negotiator thread ---- */
/* KOLO_PEER_TIMEOUT in ms (seconds in the environment, fractions allowed; 0 =
 * never judge; at least three beat intervals), fallback_ms when unset or not a
 * number. */
int kolo_peer_timeout_ms_from_env(int fallback_ms);
/* Sets the timeout the beat judges neighbours by (any thread; 0 = never). */
void kolo_comm_set_peer_timeout(kolo_comm *comm, int timeout_ms);
/* Whether a link last heard at heard_ns is silent at now_ns (pure). */
int kolo_beat_silent(int64_t heard_ns, int64_t now_ns, int timeout_ms);
/* Starts the beat of a formed communicator (on the negotiator thread). */
void kolo_beat_start(kolo_comm *comm);
/* Something arrived on link; a beat arrived on it. */
void kolo_beat_heard(kolo_control_link *link);
void kolo_beat_received(kolo_control_link *link);
/* The decaying maximum after a gap (pure): a longer gap replaces it, a shorter
 * one pulls it down by 1/64 of the difference. */
int64_t kolo_beat_gap_update(int64_t gap_max_ns, int64_t gap_ns);
/* The timeout a link is judged by (pure): the configured one, stretched to
 * KOLO_BEAT_SLACK x the longest recent gap, at most KOLO_BEAT_MAX_STRETCH x the
 * configured one; 0 when judging is off. */
int kolo_beat_timeout_ms(int timeout_ms, int64_t gap_max_ns);
/* Sends the beats that are due; returns how long the caller may wait (ms)
 * before the next beat or silence deadline, or -1 for no limit. Never blocks
 * longer than the peer timeout. */
int kolo_beat_tick(kolo_comm *comm);
/* Fails the communicator (KOLO_ERR_PEER_LOST) for a link silent past the
 * timeout, after reading what is pending on it. */
void kolo_beat_check(kolo_comm *comm);
/* The oldest complete negotiation frame a link delivered (the caller frees it), or NULL. */
kolo_frame *kolo_control_take_frame(kolo_control_link *link);
/* Frees a link's partial and queued frames. */
void kolo_control_link_clear(kolo_control_link *link);

/* The engine (engine.c): the negotiator thread. */
kolo_status kolo_engine_start(kolo_comm *comm);
/* Wakes the negotiator (new submissions, a failure to send, stop). Never blocks. */
void kolo_engine_wake(kolo_comm *comm);
/* Stops and joins the negotiator: fails what it holds, sends the outbox or a goodbye. */
void kolo_engine_stop(kolo_comm *comm);
/* Hands a negotiated request to the negotiator (under comm->mutex). */
void kolo_engine_submit_locked(kolo_comm *comm, kolo_request *request);
/* Queues engine-decided work for the executor (under comm->mutex). */
void kolo_queue_push_locked(kolo_comm *comm, kolo_request *request);
/* Completes a request (under comm->mutex): status, message, waiters woken. */
void kolo_request_complete_locked(kolo_comm *comm, kolo_request *request, kolo_status status);
/* Waits (under comm->mutex) until the engine completed request, hurrying the
 * negotiator; a negotiated device operation is then submitted to NCCL, not done. */
void kolo_request_wait_done_locked(kolo_comm *comm, kolo_request *request);
/* Frees the engine (after kolo_engine_stop). */
void kolo_engine_free(kolo_comm *comm);
struct kolo_timeline;
/* The engine's timeline, or NULL when KOLO_TIMELINE is unset. */
struct kolo_timeline *kolo_engine_timeline(kolo_comm *comm);

/* Runs a batch: the fused all-reduce of its slots (fusion.c). */
kolo_status kolo_exec_batch(kolo_comm *comm, kolo_batch *batch, kolo_fused_times *times);
void kolo_batch_free(kolo_batch *batch);

/* Forms the ring (form.c): dials rank + 1, accepts rank - 1, fills the
 * communicator's directions and control links. Blocks until the timeout. */
kolo_status kolo_form_ring(kolo_comm *comm, kolo_listener *listener);

/* The request queue and engine thread (queue.c). */
kolo_status kolo_queue_start(kolo_comm *comm);
/* Whether a request is queued or running. */
int kolo_queue_pending(kolo_comm *comm);
/* Stops and joins the engine thread (after an abort if anything was pending). */
void kolo_queue_stop(kolo_comm *comm);
/* Frees the pooled requests. */
void kolo_queue_free(kolo_comm *comm);
/* Runs a request to completion, inline when nothing is queued. */
kolo_status kolo_queue_run_blocking(kolo_comm *comm, kolo_request *request);
/* Queues a copy of prototype; *out is the pooled request. */
kolo_status kolo_queue_submit(kolo_comm *comm, const kolo_request *prototype, kolo_request **out);

/* Handshake of a fresh connection (connector side / acceptor side). */
#define KOLO_CONNECTION_DATA 1
#define KOLO_CONNECTION_CONTROL 2
#define KOLO_CONNECTION_BELL 3 /* doorbell of a shared-memory ring */
/* offer: a bulk transport offered on this (bell) connection, or NULL. */
kolo_status kolo_handshake_send_hello(kolo_comm *comm, kolo_transport_conn *conn, int kind,
                                      const kolo_bulk_offer *offer, int64_t deadline_ns);
/* *bulk_taken: whether the peer took the offered bulk transport. */
kolo_status kolo_handshake_read_ack(kolo_comm *comm, kolo_transport_conn *conn, int *bulk_taken,
                                    int64_t deadline_ns);
/* Reads a hello, checks secret/epoch/rank, answers; *kind is the connection kind.
 * When the hello offers a bulk transport this host can open, *bulk is set to the
 * reader side, which owns conn from then on; else bulk->ops stays NULL. */
kolo_status kolo_handshake_accept(kolo_comm *comm, kolo_transport_conn *conn, int expected_rank,
                                  int *kind, kolo_channel *bulk, int64_t deadline_ns);

/* The handshake's wire records as pure functions (handshake.c; fuzzed by
 * tests/fuzz/fuzz_ring_wire.c). A hello is a 28-byte header (magic, version << 16 |
 * kind, epoch, rank, size, secret length), the secret, a 12-byte offer header
 * (name length, nonce) and the offer's name; an ack is magic, verdict, bulk taken. */
#define KOLO_HELLO_HEADER_BYTES 28
#define KOLO_HELLO_OFFER_BYTES 12
#define KOLO_HELLO_MAX_BYTES \
  (KOLO_HELLO_HEADER_BYTES + KOLO_MAX_SECRET_BYTES + KOLO_HELLO_OFFER_BYTES + KOLO_BULK_NAME_BYTES)
#define KOLO_ACK_BYTES 12
typedef struct kolo_hello {
  int kind;
  uint64_t epoch;
  int rank, size; /* as sent: a u32 read as int */
  uint32_t secret_length;
  char secret[KOLO_MAX_SECRET_BYTES];
  uint32_t name_length;
  char offer_name[KOLO_BULK_NAME_BYTES + 1]; /* NUL-terminated; "" = no offer */
  uint64_t nonce;
} kolo_hello;
/* Writes the hello (this protocol version) into out; returns its length. The
 * secret and the name must fit (secret_length <= KOLO_MAX_SECRET_BYTES, name_length
 * <= KOLO_BULK_NAME_BYTES). */
size_t kolo_hello_encode(const kolo_hello *hello, uint8_t *out);
/* The fixed header: KOLO_ERR_PROTOCOL when it is not a hello of this version or
 * announces a secret longer than KOLO_MAX_SECRET_BYTES (not worth an answer). */
kolo_status kolo_hello_decode_header(const uint8_t *header, kolo_hello *hello);
/* The offer header: KOLO_ERR_PROTOCOL when the name is longer than KOLO_BULK_NAME_BYTES. */
kolo_status kolo_hello_decode_offer(const uint8_t *offer, kolo_hello *hello);
/* A whole hello from length bytes, as the acceptor reads it piece by piece;
 * *used is its length. KOLO_ERR_PROTOCOL when bad or incomplete. */
kolo_status kolo_hello_decode(const uint8_t *bytes, size_t length, kolo_hello *hello, size_t *used);
/* The verdict on a well-formed hello for a ring of (secret, epoch, size) expecting
 * expected_rank: KOLO_ERR_AUTH (wrong secret, compared in constant time),
 * KOLO_ERR_STALE_EPOCH, KOLO_ERR_PROTOCOL (rank, size or kind), or KOLO_OK. */
kolo_status kolo_hello_judge(const kolo_hello *hello, const char *secret, uint64_t epoch, int size,
                             int expected_rank);
void kolo_ack_encode(uint8_t *ack, kolo_status verdict, int bulk_taken);
/* The acceptor's verdict; KOLO_ERR_PROTOCOL for a wrong magic or a verdict that
 * is no kolo status. */
kolo_status kolo_ack_decode(const uint8_t *ack, int *bulk_taken);

/* Device-buffer dispatch (collective/device.c). */
/* Whether either buffer is device memory in a CUDA-mode communicator. */
int kolo_device_wanted(const kolo_comm *comm, const void *a, const void *b);
/* 1 (and the CUDA device) when the communicator is in CUDA mode. */
int kolo_device_mode(const kolo_comm *comm, int *device);
/* Whether p is device memory (CUDA mode only; never touches CUDA otherwise). */
int kolo_device_is_device_memory(const kolo_comm *comm, const void *p);
/* Blocking copy between any two of host and device memory. */
kolo_status kolo_device_copy(void *dst, const void *src, size_t bytes);
/* Submits an operation to NCCL (ordered after request->cuda_stream). A failure
 * or refusal made by this rank alone fails the communicator. */
kolo_status kolo_device_submit(kolo_comm *comm, const kolo_request *request, void **device_request);
/* Wait/test an NCCL request; an NCCL error fails the communicator, and a
 * communicator that failed answers with its own error. */
kolo_status kolo_device_wait(kolo_comm *comm, void *device_request);
kolo_status kolo_device_test(kolo_comm *comm, void *device_request, int *done, kolo_status *status);
/* A stream-ordered call needs CUDA mode (STATE) and device buffers (INVALID_ARG,
 * which fails the communicator: the other ranks run it on their GPUs). */
kolo_status kolo_device_check_stream_call(kolo_comm *comm, const kolo_request *request);
/* Starts the NCCL communicator's abort; never blocks (failure.c calls it for
 * every failure the ring records). */
void kolo_device_abort(kolo_comm *comm);
/* Destroys the epoch's NCCL communicator and leaves CUDA mode. */
void kolo_device_destroy(kolo_comm *comm);

struct kolo_listener {
  const kolo_transport_ops *transport;
  kolo_transport_listener *listener;
};

#endif
