/* The scheduler's pure decisions, with no I/O so that unit tests pin them down:
 * gang admission, what to do when members are lost, ring order across epochs,
 * and local ranks. scheduler.c applies them to what it reads from etcd. */
#ifndef KOLO_SCHED_PLAN_H
#define KOLO_SCHED_PLAN_H

#include <stddef.h>
#include <stdint.h>

/* max_reconfigurations 0 in a spec means this many. */
#define KOLO_SCHED_DEFAULT_MAX_RECONFIGURATIONS 10

/* Gang admission: a job needing min_workers (>= 1) and taking up to max_workers
 * starts only when at least min_workers are idle. Returns how many it takes
 * (0 = it must wait). */
size_t kolo_sched_gang_take(size_t idle, uint32_t min_workers, uint32_t max_workers);

/* The pending queue, walked oldest first in one pass (docs/ELASTIC.md, "Start
 * order"): a job starts when its gang fits the idle workers and no older job
 * holds the queue. A job that must wait holds the queue (FIFO: nobody overtakes
 * it, so it is never starved) only if it fits the cluster, i.e. its min_workers
 * is at most the capacity (registered workers not draining, busy or idle): it
 * waits for running jobs to end. A job larger than the whole cluster holds
 * nothing: later jobs that fit run past it (backfill) until workers join and it
 * fits; from then on it holds the queue again. Start with {capacity, 0}. */
typedef struct kolo_sched_queue {
  size_t capacity; /* registered workers not draining */
  int held;        /* an older pending job that fits the cluster is waiting */
} kolo_sched_queue;

/* The next pending job in age order, with idle workers free now: how many it
 * takes (0 = it waits; *q updated). */
size_t kolo_sched_queue_admit(kolo_sched_queue *q, size_t idle, uint32_t min_workers,
                              uint32_t max_workers);

typedef enum kolo_sched_loss_action {
  KOLO_SCHED_REFORM, /* write the next epoch with the survivors (+ newcomers) */
  KOLO_SCHED_WAIT,   /* below min_workers: hold the survivors, wait for workers */
  KOLO_SCHED_FAIL,   /* past max_reconfigurations */
} kolo_sched_loss_action;

/* What to do after losing members: survivors remain, idle workers are free,
 * done reconfigurations happened before this one. *take = newcomers to add
 * (for REFORM; never beyond max_workers). */
kolo_sched_loss_action kolo_sched_on_loss(size_t survivors, size_t idle, uint32_t min_workers,
                                          uint32_t max_workers, uint32_t done,
                                          uint32_t max_reconfigurations, size_t *take);

/* Who is in the next ring: the survivors in their old rank order, then the
 * newcomers, at most max entries (a shrink drops the highest ranks). The final
 * rank order (grouped by host) comes from coord's planner (planner.h), which
 * keeps the survivors' order and makes a survivor rank 0. out needs room for
 * n_survivors + n_new entries; returns the count written. */
size_t kolo_sched_plan_ring(const char *const *survivors, size_t n_survivors,
                            const char *const *newcomers, size_t n_new, size_t max,
                            const char **out);

/* Local rank and size of each member among the members on the same host. */
void kolo_sched_local_ranks(const char *const *hosts, size_t n, int *local_rank, int *local_size);

#endif
