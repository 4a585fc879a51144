/* One pass's picture of the cluster, built at the start of the pass from the
 * records as etcd holds them (key/value/revisions/lease under workers/, assign/,
 * drain/ and jobs/: in kolo-server a copy kept by the store's watch-fed view, or a
 * range straight from etcd): live worker records (with drains and assignments), and every job's
 * spec, status, rings and reports, jobs ordered oldest first. Ring records are read through their
 * codec (coordination/ringspec.h; one that does not decode is logged and left out), and so is
 * every other record: assignments, drains, reports by their owners, a job's spec and status as
 * kolo.v1.JobSpec / JobStatus through the one codec (codec/). The typed view the decisions need
 * (decide.h) is built from those messages here, so neither the decisions nor apply.c see JSON.
 * kolo_sched_records_read is the only I/O; everything else is pure. */
#ifndef KOLO_SCHED_SNAPSHOT_H
#define KOLO_SCHED_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "coordination/assignment.h"
#include "coordination/etcd.h"
#include "coordination/membership.h"
#include "coordination/report.h"
#include "coordination/ringspec.h"
#include "kolo/v1/job.pb-c.h"
#include "scheduler/decide.h"

typedef struct kolo_sched_worker {
  kolo_worker_entry m; /* borrowed from the snapshot's member list */
  int draining;
  const char *assign_job; /* borrowed from the snapshot's assignments; NULL = none */
  int taken;              /* given to a job in this pass */
} kolo_sched_worker;

/* An assignment record (coordination/assignment.h) under /kolo/v1/assign/<worker_id>;
 * one that does not decode is kept (logged) with a NULL message and job "", so the worker
 * counts as busy and the sweep takes it away instead of a pass planning the worker over it. */
typedef struct kolo_sched_assign {
  char *worker_id;
  Kolo__V1__Assignment *a; /* the record; NULL when it does not decode */
  const char *job;         /* a->job, or "" when it does not decode */
} kolo_sched_assign;

/* A member's report under reports/<worker_id>, decoded by its owner. */
typedef struct kolo_sched_job_report {
  char *worker_id;
  Kolo__V1__AgentReport *r; /* as kolo_report_read gives it */
} kolo_sched_job_report;

/* A pending intent: its key, message and create revision. */
typedef struct kolo_sched_intent {
  char *key;
  Kolo__V1__JobIntent *msg;
  int64_t created;
} kolo_sched_intent;

typedef struct kolo_sched_job {
  char *id;
  Kolo__V1__JobSpec *spec;     /* decoded (fields a newer writer added are skipped) */
  Kolo__V1__JobStatus *status; /* ditto; apply.c changes a copy with coordination/job_status.h */
  int64_t status_mod;
  /* the user's pending intents (jobs/<id>/intents/<name>, kolo-server's), in create-revision
   * order (msg NULL: it does not decode; it is deleted unapplied), and intent_head's mod
   * revision (0: absent), which every other write of the job compares */
  kolo_sched_intent *intents;
  size_t n_intents;
  int64_t intent_head_mod;
  uint64_t max_seq;             /* highest event number */
  Kolo__V1__RingRecord **rings; /* the ring records that read (ringspec.h), in epoch order */
  size_t n_rings;
  kolo_sched_job_report *reports; /* the reports that decode (coordination/report.h) */
  size_t n_reports;
  int64_t created;
} kolo_sched_job;

typedef struct kolo_sched_snapshot {
  kolo_worker_entry *members;
  size_t n_members;
  kolo_sched_worker *workers;
  size_t n_workers;
  kolo_sched_job *jobs; /* oldest first */
  size_t n_jobs;
  kolo_sched_assign *assigns; /* every key under assign/, in key order */
  size_t n_assigns;
} kolo_sched_snapshot;

/* The key-values a snapshot is built from, each set sorted by key as a prefix range
 * returns it. */
typedef struct kolo_sched_records {
  kolo_etcd_range_result workers; /* KOLO_KEY_WORKERS_PREFIX */
  kolo_etcd_range_result assigns; /* KOLO_KEY_ASSIGN_PREFIX */
  kolo_etcd_range_result drains;  /* KOLO_KEY_DRAIN_PREFIX */
  kolo_etcd_range_result jobs;    /* KOLO_KEY_JOBS_PREFIX */
  int64_t revision;               /* a revision the records are at least at */
  uint64_t reloads;               /* a watch-fed copy: times it was rebuilt whole */
  int64_t waited_us;              /* how long the read waited for the copy to catch up (not work) */
} kolo_sched_records;

/* The prefixes of kolo_sched_records' sets, in field order. */
extern const char *const kolo_sched_record_prefixes[4];

/* Reads the records straight from etcd: four prefix ranges (for tools and tests;
 * kolo-server's scheduler reads the store's watch-fed copy). Blocks for them. */
kolo_status kolo_sched_records_read(kolo_etcd *etcd, kolo_sched_records *out);
void kolo_sched_records_free(kolo_sched_records *records);

/* Builds the snapshot from records (no I/O). On error *snap holds what was built so
 * far; free it with kolo_sched_snapshot_free either way. */
kolo_status kolo_sched_snapshot_build(kolo_sched_snapshot *snap, const kolo_sched_records *records);

/* Builds the jobs, workers and assignments from range results (no I/O): members
 * are the live worker records, assigns/drains/jobs the key-values under their
 * prefixes. Jobs without a readable spec and status are dropped. */
kolo_status kolo_sched_snapshot_fill(kolo_sched_snapshot *snap,
                                     const kolo_etcd_range_result *assigns,
                                     const kolo_etcd_range_result *drains,
                                     const kolo_etcd_range_result *jobs);

void kolo_sched_snapshot_free(kolo_sched_snapshot *snap);

kolo_sched_worker *kolo_sched_find_worker(kolo_sched_snapshot *snap, const char *id);

/* Registered, idle, not draining, without an assignment, not taken this pass. */
int kolo_sched_worker_idle(const kolo_sched_worker *w);
size_t kolo_sched_count_idle(const kolo_sched_snapshot *snap);

/* ---- job fields ---- */
Kolo__V1__Phase kolo_sched_job_phase(const kolo_sched_job *j);
/* Whether the scheduler gave j a ring and so judges it (decide.h) instead of queueing it
 * (plan.h): its status says so (coordination/job_status.h's kolo_job_status_scheduled), and a
 * PENDING one (scheduled, its first ring forming) has the ring record of its status's epoch,
 * which SCHEDULED wrote in the same txn. A PENDING status with members but no such ring is
 * none of the scheduler's doing: it stays queued. */
int kolo_sched_job_scheduled(const kolo_sched_job *j);
/* The effective bounds: the status's (ScaleJob changes them), else the spec's, at least 1. */
uint32_t kolo_sched_job_min_workers(const kolo_sched_job *j);
uint32_t kolo_sched_job_max_workers(const kolo_sched_job *j);
/* worker_id's report on j; NULL if there is none that decodes. */
const Kolo__V1__AgentReport *kolo_sched_job_report_of(const kolo_sched_job *j,
                                                      const char *worker_id);
/* j's ring record of epoch; NULL if there is none that decodes. */
const Kolo__V1__RingRecord *kolo_sched_job_ring(const kolo_sched_job *j, int64_t epoch);
/* The worker id of status member i ("" if it has none). */
const char *kolo_sched_member_id(const kolo_sched_job *j, size_t i);

/* The typed view of an active job. Fills *view and *members (an array of
 * view->n_members, malloc'd) and *earlier (the ring's lost list, malloc'd); the
 * strings are borrowed from the snapshot. Free both arrays. */
kolo_status kolo_sched_job_view_build(kolo_sched_snapshot *snap, const kolo_sched_job *j,
                                      int64_t now_unix_ms, kolo_sched_job_view *view,
                                      kolo_sched_member **members, const char ***earlier);

/* Whether worker_id's assignment to job_id belongs to an active job that lists
 * the worker as a member (otherwise it is stale and swept). */
int kolo_sched_assignment_valid(const kolo_sched_snapshot *snap, const char *worker_id,
                                const char *job_id);

#endif
