/* kolo_sched: the elastic scheduler run by the leading kolo-server. On every
 * change under /kolo/v1/ (kolo_sched_notify) and on a short tick it reads workers,
 * assignments, jobs, rings and worker reports from a watch-fed copy of etcd's
 * records (kolo-server's store: no etcd read per pass), gang-schedules pending jobs, writes
 * ring epochs and per-worker assignments, re-forms rings around lost workers,
 * grows jobs with idle workers and ends jobs, all with txns fenced by the
 * leader key. It keeps no state of its own: a new leader continues where the
 * old one stopped. docs/ELASTIC.md describes the protocol. */
#ifndef KOLO_SCHED_SCHEDULER_H
#define KOLO_SCHED_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>

#include "coordination/etcd.h"
#include "kolo/status.h"
#include "scheduler/snapshot.h"

/* Fills the leader key and its create revision when this replica leads;
 * KOLO_ERR_NOT_LEADER otherwise (the scheduler then only waits). */
typedef kolo_status (*kolo_sched_fence_fn)(void *arg, char *key, size_t len,
                                           int64_t *create_revision);

/* Fills *out with the records (snapshot.h) from one state of a watch-fed copy of
 * etcd, once the copy has applied min_revision (0: at once); KOLO_ERR_TIMEOUT when
 * it has not within timeout_ms (out->reloads still set, the sets empty). */
typedef kolo_status (*kolo_sched_read_fn)(void *arg, int64_t min_revision, int timeout_ms,
                                          kolo_sched_records *out);

typedef struct kolo_sched_config {
  kolo_sched_fence_fn fence;
  void *fence_arg;
  int tick_ms;             /* pass at least this often while leading; 0 = 500 */
  kolo_etcd *etcd;         /* the binary's one etcd client; the scheduler takes a handle of it
                              (kolo_etcd_share, default deadlines) for its writes; it must
                              outlive the scheduler */
  kolo_sched_read_fn read; /* where passes read the cluster from */
  void *read_arg;
} kolo_sched_config;

typedef struct kolo_sched kolo_sched;

/* Starts the scheduler thread (it idles while fence says not leader). */
kolo_status kolo_sched_start(const kolo_sched_config *config, kolo_sched **out);

/* Stops the thread and frees. NULL is ignored. */
void kolo_sched_stop(kolo_sched *sched);

/* Asks for a pass soon: the records changed (call it after each change of the
 * copy that read serves, except metrics history alone). Never blocks. */
void kolo_sched_notify(kolo_sched *sched);

/* How long passes took, as a Prometheus histogram: the whole pass (read, snapshot,
 * decisions and their writes) and its snapshot alone (read + decode). Upper bounds of
 * the buckets in seconds: KOLO_SCHED_PASS_BUCKETS; counts are cumulative as Prometheus
 * wants them (the last bucket, +Inf, equals count). */
#define KOLO_SCHED_PASS_BUCKET_COUNT 15
extern const double kolo_sched_pass_bucket_bounds[KOLO_SCHED_PASS_BUCKET_COUNT];
typedef struct kolo_sched_timing {
  uint64_t count;
  double sum_s, max_s;
  uint64_t buckets[KOLO_SCHED_PASS_BUCKET_COUNT + 1]; /* the last is +Inf */
} kolo_sched_timing;
void kolo_sched_pass_timing(const kolo_sched *sched, kolo_sched_timing *pass,
                            kolo_sched_timing *snapshot);

/* Passes run so far, and the scheduler's etcd handle (its counters: the etcd
 * requests the scheduler made, kolo_etcd_stats_get). */
uint64_t kolo_sched_passes(const kolo_sched *sched);
const kolo_etcd *kolo_sched_etcd(const kolo_sched *sched);

#endif
