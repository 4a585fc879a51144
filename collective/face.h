/* libkolo's face: the communicator (struct kolo_comm, whose parts the floors
 * below own: kolo_net is the net floor's), the request queue and executor thread
 * (queue.c), the entry points (api.c, named.c), and the device path (device.c). The floors, from
 * the ground up: net/ (transports, channels, handshake, formation), algo/ (reductions, plans,
 * algorithms), exec/ (requests to algorithms, fusion), engine/ (negotiation, names, timeline). */
#ifndef KOLO_COLLECTIVE_FACE_H
#define KOLO_COLLECTIVE_FACE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "collective/algo/algo.h"
#include "collective/engine/negotiator.h"
#include "collective/engine/names.h"
#include "collective/exec/exec.h"
#include "collective/net/net.h"
#include "kolo/engine.h"
#include "kolo/kolo.h"

typedef struct kolo_device kolo_device;               /* CUDA mode state, collective/device.c */
typedef struct kolo_machine_ranks kolo_machine_ranks; /* common/machine_ranks.h */

struct kolo_comm {
  /* net/: who we are, the ring's connections and control links, the failure record */
  kolo_net net;
  uint8_t nccl_id[KOLO_NCCL_ID_BYTES];
  int has_nccl_id;

  /* named requests in flight on this rank (guarded by queue.mutex) */
  kolo_names *in_flight;

  /* engine/: the negotiator thread and what it holds */
  kolo_negotiator nego;

  /* the executor thread runs the queue; a blocking caller runs inline when it is empty */
  kolo_queue queue; /* exec/: guarded by queue.mutex, which the engine shares */
  pthread_t executor;
  int executor_started;
  kolo_request *free_requests;

  /* algo/: settings, buffers and the plan of the ring algorithms */
  kolo_ring ring;
  kolo_machine_ranks *machine_ranks; /* this process's registration on the machine, or NULL */
  kolo_exec exec;                    /* exec/: the fusion buffer */

  /* CUDA mode (collective/device.c): NULL until kolo_comm_use_cuda, then set once */
  _Atomic(kolo_device *) device;

  /* the agent's hold (hold.c): while held, no new operation starts; the beat goes on */
  pthread_mutex_t hold_mutex;
  pthread_cond_t hold_cond;
  atomic_int held; /* read without the lock on every operation: one load when not held */
};

/* kolo_comm_create whose ring formation gives up with KOLO_ERR_ABORTED as soon as
 * superseded(context, epoch) says the epoch is replaced (checked every 100 ms). */
kolo_status kolo_comm_create_superseded(const kolo_ring_spec *spec, kolo_listener *listener,
                                        int (*superseded)(void *context, uint64_t epoch),
                                        void *context, kolo_comm **out);

/* Sets the timeout the beat judges neighbours by (any thread; 0 = never). */
void kolo_comm_set_peer_timeout(kolo_comm *comm, int timeout_ms);

/* The partition fence's hold (hold.c; any thread): held, every new operation (each entry to
 * kolo_queue_run_blocking / kolo_queue_submit) and kolo_elastic_commit waits in
 * kolo_comm_hold_wait until released, while the negotiator thread keeps beating, so the
 * neighbours see a live rank that is slow, not a silent one. */
void kolo_comm_hold(kolo_comm *comm, int held);
/* KOLO_OK at once when not held (or comm is NULL); else waits until released. A failed or
 * aborted communicator (STOP, a newer ring, a lost peer) ends the wait with its error; so does
 * the ring's no-progress timeout, which fails the communicator with KOLO_ERR_TIMEOUT. */
kolo_status kolo_comm_hold_wait(kolo_comm *comm);

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
/* The one submission: a copy of prototype goes to NCCL (an unnamed device
 * operation), to the negotiator (named, or unnamed in named mode) or to the
 * executor's queue; *out is the pooled request. blocking: the caller waits at
 * once, so an unnamed host operation before named mode runs on its thread here
 * when nothing is queued (the blocking calls' latency path). */
kolo_status kolo_queue_submit(kolo_comm *comm, const kolo_request *prototype, int blocking,
                              kolo_request **out);
/* kolo_queue_submit (blocking) + kolo_wait, for libkolo's own collectives. */
kolo_status kolo_queue_run_blocking(kolo_comm *comm, const kolo_request *request);

/* Device-buffer dispatch (collective/device.c). */
/* CUDA mode's two local steps (kolo_comm_use_cuda in cuda.c agrees between
 * them): this rank's check of device (KOLO_OK, *chosen the ordinal) with the
 * epoch's NCCL id (the spec's, or rank 0's new one), and entering CUDA mode
 * once the ring agreed. */
kolo_status kolo_device_prepare(kolo_comm *comm, int device, int *chosen,
                                uint8_t id[KOLO_NCCL_ID_BYTES]);
kolo_status kolo_device_enter(kolo_comm *comm, int chosen, const uint8_t *id);
/* A submitted NCCL request: make a stream wait for it; its CUDA event. */
kolo_status kolo_device_stream_wait(void *device_request, void *cuda_stream);
void *kolo_device_event(void *device_request);
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
/* Starts the NCCL communicator's abort; never blocks (the net floor's on_fail hook calls it for
 * every failure the ring records). */
void kolo_device_abort(kolo_comm *comm);
/* Destroys the epoch's NCCL communicator and leaves CUDA mode. */
void kolo_device_destroy(kolo_comm *comm);

#endif
