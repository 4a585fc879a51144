/* The scheduler's writes: each decision becomes one fenced txn over the job's
 * status (compared by mod revision), its events, its ring and its members'
 * assignments, so a job is never half-moved and a stale snapshot or a deposed
 * leader writes nothing (the txn fails and the next pass reads again). */
#ifndef KOLO_SCHED_APPLY_H
#define KOLO_SCHED_APPLY_H

#include "coordination/etcd.h"
#include "kolo/v1/job.pb-c.h"
#include "scheduler/decide.h"
#include "scheduler/scheduler.h"
#include "scheduler/snapshot.h"

typedef struct kolo_sched_writer {
  kolo_etcd *etcd;
  kolo_sched_fence_fn fence;
  void *fence_arg;
} kolo_sched_writer;

/* A new epoch of a job: who stays, how many idle workers join, whose assignment
 * goes, and what the status and events say. */
typedef struct kolo_sched_epoch_plan {
  const char *const *keep; /* members carried over, in their old rank order */
  size_t n_keep;
  size_t take;                /* idle workers to add (the first idle ones) */
  const char *const *removed; /* workers whose assignment is deleted */
  size_t n_removed;
  Kolo__V1__Phase phase;  /* the status's new phase */
  const char *event_type; /* and its event */
  const char *event_message;
  int count_reconfiguration;   /* reconfigurations + 1 */
  int count_false_loss;        /* false_losses + this (scheduler/false_loss.h) */
  size_t count_drains;         /* drains + this many (planned leaves of drained members) */
  int planned;                 /* the ring says "planned": members switch at their next commit */
  const char *const *lost_ids; /* appended to the ring's lost list, with why */
  const char *const *lost_why;
  size_t n_lost;
} kolo_sched_epoch_plan;

/* Writes epoch (status.epoch + 1) of j: the ring (ranked by coord's planner),
 * the status, RING_PLANNED and the plan's event, every member's assignment (a
 * newcomer's compared absent) and the removed assignments deleted. Newcomers
 * are marked taken in snap on success. */
/* A ring's shared secret: 128 bits from the OS's CSPRNG (getrandom), as 32 lowercase hex
 * digits. It was rand() seeded with the time and the pid, which anyone who could guess
 * both could reproduce and so join a ring. KOLO_ERR_SYSTEM if the kernel gives none. */
#define KOLO_SCHED_SECRET_LEN 32
kolo_status kolo_sched_ring_secret(char out[KOLO_SCHED_SECRET_LEN + 1]);

kolo_status kolo_sched_write_epoch(const kolo_sched_writer *wr, kolo_sched_snapshot *snap,
                                   kolo_sched_job *j, const kolo_sched_epoch_plan *plan);

/* Ends j in phase (SUCCEEDED/FAILED) with event type and message, copies rank
 * 0's last progress into the status and deletes every member's assignment. */
kolo_status kolo_sched_end_job(const kolo_sched_writer *wr, kolo_sched_snapshot *snap,
                               kolo_sched_job *j, Kolo__V1__Phase phase, const char *type,
                               const char *message);

/* A status change without a ring change. */
typedef struct kolo_sched_change {
  Kolo__V1__Phase phase; /* the status's new phase (or the same one) */
  int set_members;       /* replace the status's members with members[0..n_members) (copied) */
  const Kolo__V1__Member *const *members;
  size_t n_members;
  const char *event_type; /* one event (NULL: none) ... */
  const char *event_message;
  const char *const *removed; /* workers whose assignment is deleted */
  size_t n_removed;
  int count_reconfiguration; /* reconfigurations + this */
  size_t count_drains;       /* drains + this */
} kolo_sched_change;

kolo_status kolo_sched_write_change(const kolo_sched_writer *wr, kolo_sched_job *j,
                                    const kolo_sched_change *change);

/* Acts on j's pending intents (kolo-server's jobs/<id>/intents/<name>), the oldest
 * KOLO_SCHED_INTENTS_PER_TXN of them (etcd bounds a txn's operations; the rest wait a pass):
 * applies them to the status in the order they were accepted, each at its own time, with its
 * event (coordination/job_status.h: what kolo-server's view already shows), deletes them
 * (applied or not) and, when the job is now CANCELLED, every member's assignment. */
#define KOLO_SCHED_INTENTS_PER_TXN 24
kolo_status kolo_sched_apply_intents(const kolo_sched_writer *wr, kolo_sched_snapshot *snap,
                                     kolo_sched_job *j);

/* Copies rank 0's reported progress into the status, at most once a second and
 * only when it changed. */
void kolo_sched_copy_progress(const kolo_sched_writer *wr, kolo_sched_job *j);

/* Deletes every assignment that kolo_sched_assignment_valid refuses. */
void kolo_sched_sweep(const kolo_sched_writer *wr, kolo_sched_snapshot *snap);

#endif
