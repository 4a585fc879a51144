/* libkolo's face: the communicator (struct kolo_comm, whose parts the floors
 * below own), failure handling and the control links' service (failure.c), the
 * liveness beat (beat.c), the request queue and executor thread (queue.c), and
 * the device path (device.c). The floors, from the ground up: net/ (transports,
 * channels, handshake, formation), algo/ (reductions, plans, algorithms), exec/
 * (requests to algorithms, fusion), engine/ (negotiation, names, timeline). */
#ifndef KOLO_COLLECTIVE_COMM_H
#define KOLO_COLLECTIVE_COMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "collective/algo/algo.h"
#include "collective/engine/engine.h"
#include "collective/engine/names.h"
#include "collective/exec/exec.h"
#include "collective/net/net.h"
#include "kolo/engine.h"
#include "kolo/kolo.h"

typedef struct kolo_device kolo_device; /* CUDA mode state, collective/device.c */

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

/* Queues engine-decided work for the executor (under comm->mutex). */
void kolo_queue_push_locked(kolo_comm *comm, kolo_request *request);
/* Completes a request (under comm->mutex): status, message, waiters woken. */
void kolo_request_complete_locked(kolo_comm *comm, kolo_request *request, kolo_status status);
/* Waits (under comm->mutex) until the engine completed request, hurrying the
 * negotiator; a negotiated device operation is then submitted to NCCL, not done. */
void kolo_request_wait_done_locked(kolo_comm *comm, kolo_request *request);

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


#endif
