/* Implementation of scheduler.h: one thread; each pass builds a snapshot of the
 * cluster (snapshot.c) from the records read through config.read (kolo-server's
 * watch-fed copy of etcd, never older than the scheduler's own last write),
 * decides per job, oldest first (plan.h for pending jobs, decide.h for active
 * ones), and writes each decision as one fenced txn that also compares the job
 * status's mod revision (apply.c), so a stale snapshot or a deposed leader
 * writes nothing. */
#define _GNU_SOURCE
#include "scheduler/scheduler.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "coordination/etcd.h"
#include "coordination/job_status.h"
#include "scheduler/apply.h"
#include "scheduler/decide.h"
#include "scheduler/plan.h"
#include "scheduler/snapshot.h"

#define LOG "sched"
#define CATCH_UP_MS 2000 /* how long a pass waits for the records to show its last write */

struct kolo_sched {
  kolo_sched_config config;
  kolo_etcd *etcd; /* a handle of the binary's client: the writes (and their revision) */
  kolo_sched_writer writer;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int stop, changed;
  atomic_uint_fast64_t passes;
  /* the scheduler thread's own: */
  int64_t caught_up; /* the last write revision a read was seen to include */
  uint64_t reloads;  /* the records' reload count at the last read */
  kolo_sched_timing pass_timing, snapshot_timing; /* under lock */
};

const double kolo_sched_pass_bucket_bounds[KOLO_SCHED_PASS_BUCKET_COUNT] = {
    0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10};

static double mono_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void timing_add(kolo_sched *s, kolo_sched_timing *t, double seconds) {
  pthread_mutex_lock(&s->lock);
  t->count++;
  t->sum_s += seconds;
  if (seconds > t->max_s) t->max_s = seconds;
  for (int i = 0; i < KOLO_SCHED_PASS_BUCKET_COUNT; i++)
    t->buckets[i] += seconds <= kolo_sched_pass_bucket_bounds[i];
  t->buckets[KOLO_SCHED_PASS_BUCKET_COUNT]++;
  pthread_mutex_unlock(&s->lock);
}

void kolo_sched_pass_timing(const kolo_sched *sched, kolo_sched_timing *pass,
                            kolo_sched_timing *snapshot) {
  kolo_sched *s = (kolo_sched *)sched;
  pthread_mutex_lock(&s->lock);
  if (pass) *pass = s->pass_timing;
  if (snapshot) *snapshot = s->snapshot_timing;
  pthread_mutex_unlock(&s->lock);
}

static int64_t wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- applying a decision ---- */

/* The lost members' ids and reasons (drained ones included), those of the real
 * losses only (for the ring's lost list), and the survivors' ids, in rank order. */
typedef struct loss_lists {
  const char **lost_ids, **lost_why, **survivors;
  const char **gone_ids, **gone_why; /* lost, not drained */
  size_t n_survivors, n_gone;
} loss_lists;

static int loss_lists_build(const kolo_sched_job_view *view, const kolo_sched_decision *d,
                            loss_lists *out) {
  memset(out, 0, sizeof *out);
  out->lost_ids = calloc(d->n_lost + 1, sizeof *out->lost_ids);
  out->lost_why = calloc(d->n_lost + 1, sizeof *out->lost_why);
  out->survivors = calloc(view->n_members + 1, sizeof *out->survivors);
  out->gone_ids = calloc(d->n_lost + 1, sizeof *out->gone_ids);
  out->gone_why = calloc(d->n_lost + 1, sizeof *out->gone_why);
  if (!out->lost_ids || !out->lost_why || !out->survivors || !out->gone_ids || !out->gone_why)
    return 0;
  for (size_t i = 0; i < d->n_lost; i++) {
    out->lost_ids[i] = view->members[d->lost[i].member].worker_id;
    out->lost_why[i] = d->lost[i].why;
    if (d->lost[i].drained) continue;
    out->gone_ids[out->n_gone] = out->lost_ids[i];
    out->gone_why[out->n_gone++] = out->lost_why[i];
  }
  for (size_t i = 0; i < view->n_members; i++)
    if (!kolo_sched_decision_lost(d, i))
      out->survivors[out->n_survivors++] = view->members[i].worker_id;
  return 1;
}

static void loss_lists_free(loss_lists *l) {
  free(l->lost_ids);
  free(l->lost_why);
  free(l->survivors);
  free(l->gone_ids);
  free(l->gone_why);
}

/* Holds the survivors below min_workers: status members shrink, the ring stays. */
static kolo_status hold(kolo_sched *s, kolo_sched_job *j, const kolo_sched_decision *d,
                        const loss_lists *l, const char *message) {
  size_t n = j->status->n_members, n_kept = 0;
  const Kolo__V1__Member **kept = calloc(n + 1, sizeof *kept);
  if (kept == NULL) return KOLO_ERR_NO_MEMORY;
  for (size_t i = 0; i < n; i++)
    if (!kolo_sched_decision_lost(d, i)) kept[n_kept++] = j->status->members[i];
  kolo_sched_change change = {.phase = KOLO__V1__PHASE__RECONFIGURING,
                              .set_members = 1,
                              .members = kept,
                              .n_members = n_kept,
                              .event_type = kolo_sched_event_type(d->action),
                              .event_message = message,
                              .removed = l->lost_ids,
                              .n_removed = d->n_lost,
                              .count_reconfiguration = d->n_lost > d->n_drained,
                              .count_drains = d->n_drained};
  kolo_status rc = kolo_sched_write_change(&s->writer, j, &change);
  free(kept);
  return rc;
}

/* Writes decision d about j (view is what it was made from). 1 if it wrote. */
static int apply(kolo_sched *s, kolo_sched_snapshot *snap, kolo_sched_job *j,
                 const kolo_sched_job_view *view, const kolo_sched_decision *d) {
  if (d->action == KOLO_SCHED_NOTHING) return 0;
  if (d->action == KOLO_SCHED_PROGRESS) {
    kolo_sched_copy_progress(&s->writer, j);
    return 0;
  }
  char *message = kolo_sched_decision_message(view, d);
  loss_lists l;
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  if (message == NULL || !loss_lists_build(view, d, &l)) goto out;
  const char *type = kolo_sched_event_type(d->action);
  kolo_sched_epoch_plan plan = {.keep = l.survivors,
                                .n_keep = l.n_survivors,
                                .take = d->take,
                                .phase = KOLO__V1__PHASE__RECONFIGURING,
                                .event_type = type,
                                .event_message = message};
  switch (d->action) {
    case KOLO_SCHED_FINISH:
      rc = kolo_sched_end_job(&s->writer, snap, j, KOLO__V1__PHASE__SUCCEEDED, type, message);
      break;
    case KOLO_SCHED_LOST_FAIL:
    case KOLO_SCHED_PERMANENT_FAIL:
    case KOLO_SCHED_STALLED_FAIL:
      rc = kolo_sched_end_job(&s->writer, snap, j, KOLO__V1__PHASE__FAILED, type, message);
      break;
    case KOLO_SCHED_STALLED_REFORM:
      plan.count_reconfiguration = 1;
      plan.count_false_loss = d->false_loss;
      rc = kolo_sched_write_epoch(&s->writer, snap, j, &plan);
      break;
    case KOLO_SCHED_LOST_HOLD:
    case KOLO_SCHED_DRAIN_HOLD:
      rc = hold(s, j, d, &l, message);
      break;
    case KOLO_SCHED_LOST_REFORM:
    case KOLO_SCHED_DRAIN_REFORM:
      plan.removed = l.lost_ids;
      plan.n_removed = d->n_lost;
      plan.count_reconfiguration = d->action == KOLO_SCHED_LOST_REFORM;
      plan.count_drains = d->n_drained;
      plan.planned = d->planned;
      plan.lost_ids = l.gone_ids;
      plan.lost_why = l.gone_why;
      plan.n_lost = l.n_gone;
      rc = kolo_sched_write_epoch(&s->writer, snap, j, &plan);
      break;
    case KOLO_SCHED_RESUME:
    case KOLO_SCHED_GROW:
      plan.planned = d->planned;
      rc = kolo_sched_write_epoch(&s->writer, snap, j, &plan);
      break;
    case KOLO_SCHED_SHRINK:
      plan.n_keep = d->keep;
      plan.removed = l.survivors + d->keep;
      plan.n_removed = l.n_survivors - d->keep;
      rc = kolo_sched_write_epoch(&s->writer, snap, j, &plan);
      break;
    case KOLO_SCHED_FORMED: {
      kolo_sched_change change = {
          .phase = KOLO__V1__PHASE__RUNNING, .event_type = type, .event_message = message};
      rc = kolo_sched_write_change(&s->writer, j, &change);
      break;
    }
    default:
      break;
  }
  loss_lists_free(&l);
out:
  free(message);
  return rc == KOLO_OK;
}

/* One scheduled job (running, re-forming, or forming its first ring); returns 1 if it wrote
 * something. */
static int handle_active(kolo_sched *s, kolo_sched_snapshot *snap, kolo_sched_job *j) {
  kolo_sched_job_view view;
  kolo_sched_member *members = NULL;
  const char **earlier = NULL;
  kolo_sched_decision d;
  int wrote = 0;
  if (kolo_sched_job_view_build(snap, j, wall_ms(), &view, &members, &earlier) != KOLO_OK) return 0;
  if (kolo_sched_decide(&view, &d) == KOLO_OK) {
    wrote = apply(s, snap, j, &view, &d);
    kolo_sched_decision_clear(&d);
  }
  free(members);
  free(earlier);
  return wrote;
}

/* Gang-schedules pending job j if the queue admits it now (plan.h). */
static void start_pending(kolo_sched *s, kolo_sched_snapshot *snap, kolo_sched_queue *queue,
                          kolo_sched_job *j, int *wrote) {
  uint32_t min = kolo_sched_job_min_workers(j), max = kolo_sched_job_max_workers(j);
  size_t take = kolo_sched_queue_admit(queue, kolo_sched_count_idle(snap), min, max);
  if (take == 0) return;
  char message[128];
  snprintf(message, sizeof message, "gang of %zu workers (min %u, max %u)", take, min, max);
  /* PENDING until every member formed the ring: RUNNING is written at FORMED alone */
  kolo_sched_epoch_plan plan = {.take = take,
                                .phase = KOLO__V1__PHASE__PENDING,
                                .event_type = "SCHEDULED",
                                .event_message = message};
  *wrote |= kolo_sched_write_epoch(&s->writer, snap, j, &plan) == KOLO_OK;
}

/* Registered workers not draining (busy or idle): what a pending job can ever get now. */
static size_t capacity(const kolo_sched_snapshot *snap) {
  size_t n = 0;
  for (size_t i = 0; i < snap->n_workers; i++) n += !snap->workers[i].draining;
  return n;
}

/* Reads the records for a pass, never older than this scheduler's last write (a
 * pass acting on a view without it would decide again what it just wrote).
 * 0: skip this pass. */
static int read_records(kolo_sched *s, kolo_sched_records *r) {
  int64_t wrote = kolo_etcd_written_revision(s->etcd);
  int64_t want = wrote != s->caught_up ? wrote : 0;
  memset(r, 0, sizeof *r);
  kolo_status rc = s->config.read(s->config.read_arg, want, CATCH_UP_MS, r);
  if (rc == KOLO_OK) {
    s->caught_up = wrote;
    s->reloads = r->reloads;
    return 1;
  }
  if (rc == KOLO_ERR_TIMEOUT && r->reloads != s->reloads) {
    /* rebuilt whole since (a new etcd cluster restarts its revisions): the write's
     * revision may never come; the next pass takes the records as they are */
    KOLO_LOGW(LOG, "the records reloaded without revision %" PRId64 " (my last write): going on",
              want);
    s->caught_up = wrote;
    s->reloads = r->reloads;
  } else if (rc == KOLO_ERR_TIMEOUT) {
    KOLO_LOGW(LOG,
              "the records lack revision %" PRId64 " (my last write) after %d ms: pass skipped",
              want, CATCH_UP_MS);
  } else {
    KOLO_LOGW(LOG, "cannot read the cluster: %s", kolo_strerror(rc));
  }
  kolo_sched_records_free(r);
  return 0;
}

/* One pass over the whole cluster. */
static void pass(kolo_sched *s) {
  double started = mono_s();
  kolo_sched_records records;
  if (!read_records(s, &records)) return;
  /* the time waiting for the copy to show this scheduler's last write is not the pass's work */
  started += (double)records.waited_us * 1e-6;
  kolo_sched_snapshot snap;
  kolo_status built = kolo_sched_snapshot_build(&snap, &records);
  kolo_sched_records_free(&records);
  timing_add(s, &s->snapshot_timing, mono_s() - started);
  if (built != KOLO_OK) {
    KOLO_LOGW(LOG, "cannot build the cluster's snapshot: %s", kolo_strerror(built));
    kolo_sched_snapshot_free(&snap);
    return;
  }
  atomic_fetch_add(&s->passes, 1);
  int wrote = 0;
  kolo_sched_queue queue = {.capacity = capacity(&snap), .held = 0};
  for (size_t i = 0; i < snap.n_jobs; i++) {
    kolo_sched_job *j = &snap.jobs[i];
    Kolo__V1__Phase phase = kolo_sched_job_phase(j);
    int scheduled = kolo_sched_job_scheduled(j); /* a PENDING one: its first ring forming */
    int queued = phase == KOLO__V1__PHASE__PENDING && !scheduled;
    if (j->n_intents > 0 && !kolo_job_status_final(phase)) {
      /* the user's intents first; the next pass decides on the status they leave */
      wrote |= kolo_sched_apply_intents(&s->writer, &snap, j) == KOLO_OK;
      if (queued) queue.held = 1; /* FIFO: later jobs wait a pass */
    } else if (queued) {
      /* FIFO, with backfill past a job larger than the cluster (plan.h) */
      start_pending(s, &snap, &queue, j, &wrote);
    } else if (scheduled) {
      wrote |= handle_active(s, &snap, j);
    }
  }
  if (!wrote) kolo_sched_sweep(&s->writer, &snap);
  kolo_sched_snapshot_free(&snap);
  timing_add(s, &s->pass_timing, mono_s() - started);
}

/* ---- the thread ---- */

void kolo_sched_notify(kolo_sched *s) {
  if (s == NULL) return;
  pthread_mutex_lock(&s->lock);
  s->changed = 1;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->lock);
}

uint64_t kolo_sched_passes(const kolo_sched *s) {
  return atomic_load(&((kolo_sched *)s)->passes);
}

const kolo_etcd *kolo_sched_etcd(const kolo_sched *s) {
  return s->etcd;
}

static void *run(void *argument) {
  kolo_sched *s = argument;
  int was_leader = 0;
  for (;;) {
    pthread_mutex_lock(&s->lock);
    if (!s->changed && !s->stop) {
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_nsec += (long)s->config.tick_ms * 1000000L;
      until.tv_sec += until.tv_nsec / 1000000000L;
      until.tv_nsec %= 1000000000L;
      pthread_cond_timedwait(&s->cond, &s->lock, &until);
    }
    int stop = s->stop;
    s->changed = 0;
    pthread_mutex_unlock(&s->lock);
    if (stop) break;
    char key[512];
    int64_t revision;
    int leader = s->config.fence(s->config.fence_arg, key, sizeof key, &revision) == KOLO_OK;
    if (leader != was_leader)
      KOLO_LOGI(LOG, leader ? "leading: scheduling starts" : "not leading: scheduling stops");
    was_leader = leader;
    if (leader) pass(s);
    usleep(20 * 1000); /* let a burst of changes arrive as one pass */
  }
  return NULL;
}

kolo_status kolo_sched_start(const kolo_sched_config *config, kolo_sched **out) {
  if (config == NULL || config->etcd == NULL || config->fence == NULL || config->read == NULL ||
      out == NULL)
    return KOLO_ERR_INVALID_ARG;
  kolo_sched *s = calloc(1, sizeof *s);
  if (s == NULL) return KOLO_ERR_NO_MEMORY;
  s->config = *config;
  if (s->config.tick_ms <= 0) s->config.tick_ms = 500;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  kolo_status rc = kolo_etcd_share(config->etcd, NULL, &s->etcd);
  if (rc != KOLO_OK) goto fail;
  s->writer = (kolo_sched_writer){s->etcd, s->config.fence, s->config.fence_arg};
  if (pthread_create(&s->thread, NULL, run, s) != 0) {
    rc = KOLO_ERR_SYSTEM;
    goto fail;
  }
  *out = s;
  return KOLO_OK;
fail:
  kolo_etcd_destroy(s->etcd);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
  return rc;
}

void kolo_sched_stop(kolo_sched *s) {
  if (s == NULL) return;
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  kolo_etcd_destroy(s->etcd);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
}
