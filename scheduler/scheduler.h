/* kolo_sched: the elastic scheduler run by the leading kolo-server. On every
 * change under /kolo/v1/ (and on a short tick) it reads workers, assignments,
 * jobs, rings and worker reports from etcd, gang-schedules pending jobs, writes
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

/* Fills the leader key and its create revision when this replica leads;
 * KOLO_ERR_NOT_LEADER otherwise (the scheduler then only waits). */
typedef kolo_status (*kolo_sched_fence_fn)(void *arg, char *key, size_t len,
                                           int64_t *create_revision);

typedef struct kolo_sched_config {
  kolo_sched_fence_fn fence;
  void *fence_arg;
  int tick_ms;     /* pass at least this often while leading; 0 = 500 */
  kolo_etcd *etcd; /* the binary's one etcd client; the scheduler takes a handle of it
                      (kolo_etcd_share, default deadlines); it must outlive the scheduler */
} kolo_sched_config;

typedef struct kolo_sched kolo_sched;

/* Starts the scheduler thread (it idles while fence says not leader). */
kolo_status kolo_sched_start(const kolo_sched_config *config, kolo_sched **out);

/* Stops the thread and frees. NULL is ignored. */
void kolo_sched_stop(kolo_sched *sched);

#endif
