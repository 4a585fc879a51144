/* Implementation of demand.h. */
#include "server/demand.h"

#include <strings.h>

static uint32_t saturate(uint64_t v) {
  return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

void kolo_server_demand_compute(const kolo_server_job_size *jobs, size_t n_jobs,
                                const kolo_server_worker_counts *workers, Kolo__V1__Demand *out) {
  uint64_t wanted = 0, missing = 0, pending = 0, growable = 0;
  for (size_t i = 0; i < n_jobs; i++) {
    const kolo_server_job_size *j = &jobs[i];
    uint32_t max = j->max_workers > j->min_workers ? j->max_workers : j->min_workers;
    int ended = j->phase != KOLO__V1__PHASE__PENDING && j->phase != KOLO__V1__PHASE__RUNNING &&
                j->phase != KOLO__V1__PHASE__RECONFIGURING; /* (or unknown): wants nothing */
    if (ended) continue;
    wanted += max;
    if (j->phase == KOLO__V1__PHASE__PENDING && j->members == 0) { /* queued */
      missing += max;
      pending++;
    } else if (j->members < max) { /* scheduled: running, re-forming or forming its first ring */
      missing += max - j->members;
      growable++;
    }
  }
  out->workers_wanted = saturate(wanted);
  out->workers_missing = saturate(missing);
  out->pending_jobs = saturate(pending);
  out->growable_jobs = saturate(growable);
  out->workers_registered = workers ? workers->registered : 0;
  out->workers_idle = workers ? workers->idle : 0;
  out->workers_draining = workers ? workers->draining : 0;
}

void kolo_server_demand_count_workers(const Kolo__V1__ListWorkersResponse *list,
                                      kolo_server_worker_counts *out) {
  *out = (kolo_server_worker_counts){0};
  if (list == NULL) return;
  for (size_t i = 0; i < list->n_workers; i++) {
    const Kolo__V1__Worker *w = list->workers[i];
    int draining = w->draining || (w->state && strcasecmp(w->state, "draining") == 0);
    int idle = !draining && (w->job_id == NULL || w->job_id[0] == '\0') && w->state &&
               strcasecmp(w->state, "idle") == 0;
    out->registered++;
    out->draining += (uint32_t)draining;
    out->idle += (uint32_t)idle;
  }
}
