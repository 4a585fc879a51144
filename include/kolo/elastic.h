/* Elastic training with libkolo, like Horovod's hvd.elastic State: the process
 * gets its ring from the kolo-worker agent (not from static environment), so the
 * ring can change under it. The loop registers its state buffers, commits them
 * every few steps, and on a failed collective or a ring change calls
 * kolo_elastic_reform, which forms the next epoch's ring, restores the last
 * commit and broadcasts it from the new rank 0 (a survivor). */
#ifndef KOLO_ELASTIC_H
#define KOLO_ELASTIC_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/kolo.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* libkolo exports these: kolo/api.h */

typedef struct kolo_elastic kolo_elastic;

/* Called after every re-form, once the state has been synchronised (e.g. to
 * rescale the learning rate to the new size). */
typedef void (*kolo_elastic_reset_fn)(kolo_elastic *elastic, void *user);

/* Connects to the agent at KOLO_AGENT_SOCKET (a unix socket path) and forms the
 * first ring it announces; without KOLO_AGENT_SOCKET it falls back to
 * kolo_comm_create_from_env (a fixed ring, e.g. under kolorun). Blocks until the
 * ring is formed or KOLO_TIMEOUT passes. */
kolo_status kolo_elastic_create(kolo_elastic **out);

/* The current communicator; changes after kolo_elastic_reform. Never NULL after
 * a successful create. Owned by the elastic context. */
kolo_comm *kolo_elastic_comm(kolo_elastic *elastic);

/* Adds a buffer to the state (weights, optimizer state, counters). The buffer
 * stays owned by the caller and must outlive the context. Register the same
 * buffers, in the same order and sizes, on every rank. */
kolo_status kolo_elastic_register(kolo_elastic *elastic, void *buffer, size_t bytes);

void kolo_elastic_set_reset_callback(kolo_elastic *elastic, kolo_elastic_reset_fn callback,
                                     void *user);

/* Copies the registered buffers into the committed copy (in memory). Returns
 * KOLO_ERR_RING_CHANGED when the agent has announced a newer ring: the caller
 * should then call kolo_elastic_reform (a ring announced as planned, when a
 * drained member leaves, is taken up here rather than by aborting the current
 * ring, so the re-form restores this very commit). Returns KOLO_ERR_ABORTED, and
 * should_stop turns true, when the agent asked this process to leave (its worker
 * is drained): the caller stops, as for STOP. Does not communicate. */
kolo_status kolo_elastic_commit(kolo_elastic *elastic);

/* Copies the committed state back into the registered buffers. */
kolo_status kolo_elastic_restore(kolo_elastic *elastic);

/* Makes the registered buffers rank 0's on every rank, then commits (only the
 * ranks whose buffers differ receive them: kolo_sync_buffers).
 * Call once after create so new members start from the ring's state. */
kolo_status kolo_elastic_sync(kolo_elastic *elastic);

/* kolo_elastic_sync's transfer for buffers a caller keeps itself (kolo.torch's
 * TorchState.sync): makes count host buffers equal to rank 0's on every rank of
 * comm. Each rank digests its buffers (128 bits each) and the ring all-gathers
 * the digests; a buffer goes only to the ranks whose digest differs from rank
 * 0's, each fed by the nearest rank before it that holds rank 0's bytes, so it
 * is not sent from rank 0 around the whole ring, and one every rank holds moves
 * nowhere. That is the way across hosts or with KOLO_STATE_SYNC=sources; on one
 * host (shared memory copies as fast as a digest reads) or with
 * KOLO_STATE_SYNC=root every buffer is broadcast from rank 0 instead.
 * received (count entries, or NULL): whether this rank's buffer i was
 * overwritten. Collective: the same count and sizes on every rank. */
kolo_status kolo_sync_buffers(kolo_comm *comm, void *const *buffers, const size_t *bytes, int count,
                              uint8_t *received);

/* After a collective failed (peer lost, aborted by a ring change) or commit said
 * KOLO_ERR_RING_CHANGED: waits for the agent's next ring (newer epoch), forms it,
 * restores the last commit, syncs from the new rank 0 and calls the reset
 * callback. Blocks up to KOLO_TIMEOUT. Without an agent: KOLO_ERR_UNSUPPORTED. */
kolo_status kolo_elastic_reform(kolo_elastic *elastic);

/* Sends one progress line to the agent (a JSON object, no newline), which
 * forwards it to the job status. No-op without an agent. Never blocks long.
 * KOLO_ERR_INVALID_ARG for a text that is not one JSON object line. */
kolo_status kolo_elastic_report(kolo_elastic *elastic, const char *json);

/* Whether the agent asked the process to stop (job cancelled or finished). */
int kolo_elastic_should_stop(kolo_elastic *elastic);

/* Number of re-forms so far. */
int kolo_elastic_reconfigurations(const kolo_elastic *elastic);

void kolo_elastic_destroy(kolo_elastic *elastic);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
