/* The metrics recorder: while this replica leads, a thread that every interval turns each
 * job's latest progress (the view's JobStatus) into points of its metrics history at
 * /kolo/v1/metrics/<job>/<step>, as history.h plans them: at most one txn per job per
 * interval whatever the job's step rate, each fenced by the leader key and compared with the
 * view's revisions of the keys it touches (a stale view or a deposed leader writes nothing;
 * the next pass retries on fresh state). It keeps no state of its own, so a new leader goes
 * on where the old one stopped, and every replica's view mirrors the same series. */
#ifndef KOLO_SERVER_RECORDER_H
#define KOLO_SERVER_RECORDER_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"
#include "server/kv.h"
#include "server/store.h"

#define KOLO_SERVER_RECORDER_DEFAULT_INTERVAL_MS 1000

/* Fills the leader key and its create revision while this replica leads; KOLO_ERR_NOT_LEADER
 * otherwise (the pass then writes nothing). */
typedef kolo_status (*kolo_server_recorder_fence_fn)(void *arg, char *key, size_t len,
                                                     int64_t *create_revision);

typedef struct kolo_server_recorder_config {
  kolo_server_store *store;
  kolo_server_kv *kv;
  kolo_server_recorder_fence_fn fence; /* NULL: this process alone writes (--etcd none), unfenced */
  void *fence_arg;
  size_t max_points; /* per job; 0 = KOLO_SERVER_HISTORY_DEFAULT_POINTS */
  int interval_ms;   /* 0 = KOLO_SERVER_RECORDER_DEFAULT_INTERVAL_MS */
  int no_thread;     /* tests: no thread; call kolo_server_recorder_pass */
} kolo_server_recorder_config;

typedef struct kolo_server_recorder kolo_server_recorder;

kolo_status kolo_server_recorder_start(const kolo_server_recorder_config *config,
                                       kolo_server_recorder **out);
/* Stops the thread (waits for a pass in flight) and frees. NULL is ignored. */
void kolo_server_recorder_stop(kolo_server_recorder *r);

/* One pass now: returns how many points it wrote (0 when not leading or nothing was due). */
size_t kolo_server_recorder_pass(kolo_server_recorder *r);

#endif
