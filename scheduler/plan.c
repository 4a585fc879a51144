/* Implementation of plan.h. */
#include "scheduler/plan.h"

#include <string.h>

size_t kolo_sched_gang_take(size_t idle, uint32_t min_workers, uint32_t max_workers) {
  if (min_workers == 0) min_workers = 1;
  if (max_workers < min_workers) max_workers = min_workers;
  if (idle < min_workers) return 0;
  return idle < max_workers ? idle : max_workers;
}

size_t kolo_sched_queue_admit(kolo_sched_queue *q, size_t idle, uint32_t min_workers,
                              uint32_t max_workers) {
  if (q->held) return 0;
  size_t take = kolo_sched_gang_take(idle, min_workers, max_workers);
  if (take == 0 && (min_workers ? min_workers : 1) <= q->capacity) q->held = 1;
  return take;
}

kolo_sched_loss_action kolo_sched_on_loss(size_t survivors, size_t idle, uint32_t min_workers,
                                          uint32_t max_workers, uint32_t done,
                                          uint32_t max_reconfigurations, size_t *take) {
  *take = 0;
  uint32_t limit =
      max_reconfigurations ? max_reconfigurations : KOLO_SCHED_DEFAULT_MAX_RECONFIGURATIONS;
  if (done + 1 > limit) return KOLO_SCHED_FAIL;
  if (min_workers == 0) min_workers = 1;
  if (max_workers < min_workers) max_workers = min_workers;
  size_t room = survivors < max_workers ? max_workers - survivors : 0;
  size_t newcomers = idle < room ? idle : room;
  if (survivors + newcomers < min_workers) return KOLO_SCHED_WAIT;
  *take = newcomers;
  return KOLO_SCHED_REFORM;
}

size_t kolo_sched_plan_ring(const char *const *survivors, size_t n_survivors,
                            const char *const *newcomers, size_t n_new, size_t max,
                            const char **out) {
  size_t n = 0;
  for (size_t i = 0; i < n_survivors && n < max; i++) out[n++] = survivors[i];
  for (size_t i = 0; i < n_new && n < max; i++) out[n++] = newcomers[i];
  return n;
}

void kolo_sched_local_ranks(const char *const *hosts, size_t n, int *local_rank, int *local_size) {
  for (size_t i = 0; i < n; i++) {
    int before = 0, total = 0;
    for (size_t j = 0; j < n; j++) {
      if (strcmp(hosts[i], hosts[j]) != 0) continue;
      total++;
      if (j < i) before++;
    }
    local_rank[i] = before;
    local_size[i] = total;
  }
}
