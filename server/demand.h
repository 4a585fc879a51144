/* The demand for workers, what an autoscaler scales the worker pool on: how many workers
 * the jobs want now (members of running jobs, what growable jobs still take up to their
 * max_workers, what pending jobs take), and how many of those no job has yet. A pure
 * function over the jobs' sizes and the worker counts, served as GetDemand, GET /v1/demand
 * and the kolo_workers_* gauges of /metrics. */
#ifndef KOLO_SERVER_DEMAND_H
#define KOLO_SERVER_DEMAND_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/v1/cluster.pb-c.h"
#include "kolo/v1/job.pb-c.h"

/* One job as the demand sees it: its phase, ring members now and current bounds. */
typedef struct kolo_server_job_size {
  Kolo__V1__Phase phase;
  uint32_t members;
  uint32_t min_workers, max_workers;
} kolo_server_job_size;

typedef struct kolo_server_worker_counts {
  uint32_t registered, idle, draining;
} kolo_server_worker_counts;

/* Fills the counters of out (an initialised Demand; time_unix_ms is left to the caller).
 * A queued job (PENDING without members) wants max_workers; a scheduled one (RUNNING,
 * RECONFIGURING, or PENDING with members: its first ring forming) wants max_workers and misses
 * what it has fewer members than that (a job shrinking to a lowered max_workers wants the
 * new max). Ended jobs want nothing. Sums saturate at UINT32_MAX. */
void kolo_server_demand_compute(const kolo_server_job_size *jobs, size_t n_jobs,
                                const kolo_server_worker_counts *workers, Kolo__V1__Demand *out);

/* Counts workers of a ListWorkers answer: idle = no job and state idle and not drained;
 * draining = drained or in state draining. */
void kolo_server_demand_count_workers(const Kolo__V1__ListWorkersResponse *workers,
                                      kolo_server_worker_counts *out);

#endif
