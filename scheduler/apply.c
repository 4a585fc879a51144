/* Implementation of apply.h: the records the scheduler writes (ring, status,
 * events, assignments) put in one txn per decision; the ring record and the
 * assignments through their owners (coordination/ringspec.h, assignment.h), events as
 * kolo.v1.Event through the one codec (codec/). */
#define _GNU_SOURCE
#include "scheduler/apply.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "codec/codec.h"
#include "common/log.h"
#include "coordination/assignment.h"
#include "coordination/job_status.h"
#include "coordination/keys.h"
#include "coordination/planner.h"
#include "coordination/ringspec.h"
#include "kolo/v1/job.pb-c.h"
#include "scheduler/plan.h"
#include "scheduler/txn.h"

#define LOG "sched"
#define PROGRESS_EVERY_MS 1000

static int64_t wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static char *fmt(const char *format, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *format, ...) {
  va_list args;
  va_start(args, format);
  char *out = NULL;
  if (vasprintf(&out, format, args) < 0) out = NULL;
  va_end(args);
  return out;
}

static kolo_status commit(const kolo_sched_writer *wr, kolo_sched_txn *t) {
  return kolo_sched_txn_commit(t, wr->etcd, wr->fence, wr->fence_arg);
}

/* ---- status and events ---- */

/* A malloc'd copy of key (NULL, which breaks the txn, if building it failed). */
static char *key_copy(kolo_status built, const char *key) {
  return built == KOLO_OK ? strdup(key) : NULL;
}

static char *status_key(const kolo_sched_job *j) {
  char key[512];
  return key_copy(kolo_keys_job(j->id, "status", key, sizeof key), key);
}

/* Starts a write of j: status compare, a copy of the snapshot's status to change with
 * coordination/job_status.h (NULL when out of memory: the write fails). */
static Kolo__V1__JobStatus *begin_job_write(kolo_sched_txn *t, const kolo_sched_job *j) {
  kolo_sched_txn_compare(t, KOLO_ETCD_CMP_MOD, status_key(j), j->status_mod);
  /* a user's intent stored since the snapshot comes first: this write fails, the next pass
   * applies it (so an accepted cancel is never overtaken by another end of the job) */
  char key[512];
  kolo_sched_txn_compare(
      t, KOLO_ETCD_CMP_MOD,
      key_copy(kolo_keys_job(j->id, KOLO_KEY_JOB_INTENT_HEAD, key, sizeof key), key),
      j->intent_head_mod);
  return (Kolo__V1__JobStatus *)kolo_codec_copy(&j->status->base);
}

static void add_event_at(kolo_sched_txn *t, kolo_sched_job *j, const char *type, int64_t epoch,
                         const char *message, int64_t time_unix_ms) {
  uint64_t seq = ++j->max_seq;
  char buf[512];
  char *key = key_copy(kolo_keys_event(j->id, (int64_t)seq, buf, sizeof buf), buf);
  Kolo__V1__Event event = KOLO__V1__EVENT__INIT;
  event.seq = seq;
  event.time_unix_ms = time_unix_ms;
  event.type = (char *)type;
  event.message = (char *)message;
  event.epoch = epoch < 0 ? 0 : (uint64_t)epoch;
  kolo_sched_txn_compare(t, KOLO_ETCD_CMP_CREATE, key ? strdup(key) : NULL, 0);
  kolo_sched_txn_put(t, key, kolo_codec_dump(&event.base, 0)); /* NULL breaks the txn */
  uint64_t evicted = kolo_keys_event_evicted(seq);
  if (evicted)
    kolo_sched_txn_delete(t,
                          key_copy(kolo_keys_event(j->id, (int64_t)evicted, buf, sizeof buf), buf));
  KOLO_LOGI(LOG, "job %s: %s (epoch %" PRId64 "): %s", j->id, type, epoch, message);
}

static void add_event(kolo_sched_txn *t, kolo_sched_job *j, const char *type, int64_t epoch,
                      const char *message) {
  add_event_at(t, j, type, epoch, message, wall_ms());
}

/* Puts the changed status (st is freed); moved: the transition's result (a failed one,
 * or no status, breaks the txn so nothing of this decision is written). */
static void finish_job_write(kolo_sched_txn *t, const kolo_sched_job *j, Kolo__V1__JobStatus *st,
                             kolo_status moved) {
  if (moved != KOLO_OK && st != NULL)
    KOLO_LOGW(LOG, "job %s: status not changed: %s", j->id, kolo_strerror(moved));
  char *value = st && moved == KOLO_OK ? kolo_job_status_write(st) : NULL;
  kolo_sched_txn_put(t, status_key(j), value); /* NULL breaks the txn */
  if (st) protobuf_c_message_free_unpacked(&st->base, NULL);
}

/* A status member entry: {worker_id, rank, host, address}. NULL when out of memory. */
static Kolo__V1__Member *status_member(const char *worker_id, size_t rank, const char *host,
                                       const char *address) {
  Kolo__V1__Member *m = malloc(sizeof *m);
  if (m == NULL) return NULL;
  kolo__v1__member__init(m);
  m->rank = (uint32_t)rank;
  if (kolo_codec_set_string(&m->worker_id, worker_id) != KOLO_OK ||
      kolo_codec_set_string(&m->host, host) != KOLO_OK ||
      kolo_codec_set_string(&m->address, address) != KOLO_OK) {
    protobuf_c_message_free_unpacked(&m->base, NULL);
    return NULL;
  }
  return m;
}

static void free_status_members(Kolo__V1__Member **members, size_t n) {
  for (size_t i = 0; members && i < n; i++)
    if (members[i]) protobuf_c_message_free_unpacked(&members[i]->base, NULL);
  free(members);
}

static void delete_assignments(kolo_sched_txn *t, const char *const *ids, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char key[512];
    if (kolo_keys_assign(ids[i], key, sizeof key) == KOLO_OK) kolo_sched_txn_delete(t, strdup(key));
  }
}

/* ---- a new epoch ---- */

/* Ranks the chosen members with coord's planner (grouped by host, survivors in
 * their old order, rank 0 the survivor with the lowest old rank). Leaves order
 * as it is if the planner refuses. Every member of order is registered. */
static void order_by_planner(kolo_sched_snapshot *snap, const Kolo__V1__RingRecord *old_ring,
                             const char **order, size_t n) {
  if (n == 0) return;
  kolo_planner_member *members = calloc(n, sizeof *members);
  size_t *ranks = calloc(n, sizeof *ranks);
  const char **reordered = calloc(n, sizeof *reordered);
  size_t n_previous = old_ring ? old_ring->n_members : 0;
  const char **previous = calloc(n_previous + 1, sizeof *previous);
  if (members && ranks && reordered && previous) {
    for (size_t i = 0; i < n; i++) {
      kolo_sched_worker *w = kolo_sched_find_worker(snap, order[i]);
      members[i] = (kolo_planner_member){order[i], w->m.record->host, w->m.record->address};
    }
    for (size_t i = 0; i < n_previous; i++) previous[i] = old_ring->members[i]->worker_id;
    if (kolo_planner_plan(members, n, previous, n_previous, ranks) == KOLO_OK) {
      for (size_t i = 0; i < n; i++) reordered[i] = order[ranks[i]];
      memcpy(order, reordered, n * sizeof *order);
    } else {
      KOLO_LOGW(LOG, "ring planner: %s; keeping survivors-first order", kolo_etcd_last_error());
    }
  }
  free(members);
  free(ranks);
  free(reordered);
  free(previous);
}

/* Whether every member of order has a worker record (its host and address go in
 * the ring); logs the first that has none. */
static int all_registered(kolo_sched_snapshot *snap, const kolo_sched_job *j,
                          const char *const *order, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (kolo_sched_find_worker(snap, order[i]) == NULL) {
      KOLO_LOGW(LOG, "job %s: no epoch written: member %s has no worker record", j->id, order[i]);
      return 0;
    }
  return 1;
}

/* The ring's members (strings borrowed from snap and order) and the status's
 * member entries, for order at epoch. */
static kolo_status ring_members(kolo_sched_snapshot *snap, const Kolo__V1__RingRecord *old_ring,
                                int64_t epoch, const char *const *order, size_t n,
                                Kolo__V1__RingMember *ring_out, Kolo__V1__Member **status_out) {
  const char **hosts = calloc(n + 1, sizeof *hosts);
  int *local_rank = calloc(n + 1, sizeof *local_rank),
      *local_size = calloc(n + 1, sizeof *local_size);
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  if (hosts == NULL || local_rank == NULL || local_size == NULL) goto out;
  for (size_t i = 0; i < n; i++) hosts[i] = kolo_sched_find_worker(snap, order[i])->m.record->host;
  kolo_sched_local_ranks(hosts, n, local_rank, local_size);
  for (size_t i = 0; i < n; i++) {
    const kolo_worker_entry *w = &kolo_sched_find_worker(snap, order[i])->m;
    int old_rank = kolo_ringspec_rank_of(old_ring, order[i]);
    /* a survivor keeps its first epoch (epoch - 1 if the old ring did not say) */
    int64_t since = old_rank < 0 ? epoch : old_ring->members[old_rank]->since_epoch ?: epoch - 1;
    Kolo__V1__RingMember *o = &ring_out[i]; /* presence: kolo_ringspec_write's */
    kolo__v1__ring_member__init(o);
    o->worker_id = (char *)order[i];
    o->host = w->record->host;
    o->address = w->record->address;
    o->local_rank = local_rank[i];
    o->local_size = local_size[i];
    o->since_epoch = since;
    /* the lease: which registration of the worker this epoch means (decide.h, kolo_sched_member) */
    o->lease = w->lease;
    status_out[i] = status_member(order[i], i, w->record->host, w->record->address);
    if (status_out[i] == NULL) goto out;
  }
  rc = KOLO_OK;
out:
  free(hosts);
  free(local_rank);
  free(local_size);
  return rc;
}

kolo_status kolo_sched_ring_secret(char out[KOLO_SCHED_SECRET_LEN + 1]) {
  uint8_t bytes[KOLO_SCHED_SECRET_LEN / 2];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return KOLO_ERR_SYSTEM;
    got += (size_t)n;
  }
  for (size_t i = 0; i < sizeof bytes; i++) {
    out[2 * i] = "0123456789abcdef"[bytes[i] >> 4];
    out[2 * i + 1] = "0123456789abcdef"[bytes[i] & 15];
  }
  out[KOLO_SCHED_SECRET_LEN] = '\0';
  return KOLO_OK;
}

/* The ring record of epoch (ringspec.h), encoded: members, a new secret, the
 * timeout, and the lost list so far (the old ring's plus the plan's). */
static kolo_status ring_record(const kolo_sched_job *j, const Kolo__V1__RingRecord *old_ring,
                               int64_t epoch, Kolo__V1__RingMember *members, size_t n,
                               const kolo_sched_epoch_plan *plan, char **json) {
  char secret[KOLO_SCHED_SECRET_LEN + 1];
  if (kolo_sched_ring_secret(secret) != KOLO_OK)
    return KOLO_ERR_SYSTEM; /* no epoch without a secret */
  size_t n_earlier = old_ring ? old_ring->n_lost : 0;
  Kolo__V1__RingLost *added = calloc(plan->n_lost + 1, sizeof *added);
  Kolo__V1__RingLost **lost = calloc(n_earlier + plan->n_lost + 1, sizeof *lost);
  Kolo__V1__RingMember **member_ptrs = calloc(n + 1, sizeof *member_ptrs);
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  if (added == NULL || lost == NULL || member_ptrs == NULL) goto out;
  for (size_t i = 0; i < n_earlier; i++) lost[i] = old_ring->lost[i];
  for (size_t i = 0; i < plan->n_lost; i++) {
    kolo__v1__ring_lost__init(&added[i]);
    added[i].worker_id = (char *)plan->lost_ids[i];
    added[i].why = (char *)plan->lost_why[i];
    lost[n_earlier + i] = &added[i];
  }
  for (size_t i = 0; i < n; i++) member_ptrs[i] = &members[i];
  int64_t timeout_ms = j->spec->collective_timeout_ms;
  /* the strings are borrowed; presence is kolo_ringspec_write's */
  Kolo__V1__RingRecord ring = KOLO__V1__RING_RECORD__INIT;
  ring.job = j->id;
  ring.epoch = epoch;
  ring.timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
  ring.secret = secret;
  ring.n_members = n;
  ring.members = member_ptrs;
  ring.n_lost = n_earlier + plan->n_lost;
  ring.lost = lost;
  /* members go on with the old ring up to their next commit, then switch (no step redone) */
  ring.planned = plan->planned != 0;
  char err[256];
  rc = kolo_ringspec_write(&ring, json, err, sizeof err);
  if (rc != KOLO_OK)
    KOLO_LOGE(LOG, "job %s: ring record of epoch %" PRId64 ": %s", j->id, epoch, err);
out:
  free(added);
  free(lost);
  free(member_ptrs);
  return rc;
}

/* RING_PLANNED's message: "epoch 3: 2 workers (w1, w3), rank 0 is w1". */
static char *planned_message(int64_t epoch, const char *const *order, size_t n) {
  char *names = NULL;
  size_t length = 0;
  FILE *out = open_memstream(&names, &length);
  for (size_t i = 0; out && i < n; i++) fprintf(out, "%s%s", i ? ", " : "", order[i]);
  if (out) fclose(out);
  char *message = fmt("epoch %" PRId64 ": %zu workers (%s), rank 0 is %s", epoch, n,
                      names ? names : "", n ? order[0] : "-");
  free(names);
  return message;
}

/* The status, events and assignments of the new epoch, added to t. */
static void add_epoch_writes(kolo_sched_txn *t, kolo_sched_snapshot *snap, kolo_sched_job *j,
                             int64_t epoch, const char *const *order, size_t n,
                             Kolo__V1__Member **status_members, const kolo_sched_epoch_plan *plan,
                             const char *ring_key) {
  Kolo__V1__JobStatus *status = begin_job_write(t, j);
  kolo_status moved = status ? kolo_job_status_epoch(status, plan->phase, (uint64_t)epoch,
                                                     status_members, n, plan->count_reconfiguration,
                                                     (uint32_t)plan->count_drains, wall_ms())
                             : KOLO_ERR_PARSE;
  if (moved != KOLO_OK) free_status_members(status_members, n); /* still ours */
  if (moved == KOLO_OK && plan->count_false_loss > 0)
    moved = kolo_job_status_count_false_losses(status, (uint32_t)plan->count_false_loss);
  add_event(t, j, plan->event_type, epoch, plan->event_message);
  if (strcmp(plan->event_type, "SCHEDULED") != 0 || n > 0) {
    char *message = planned_message(epoch, order, n);
    add_event(t, j, "RING_PLANNED", epoch, message ? message : "");
    free(message);
  }
  finish_job_write(t, j, status, moved);
  for (size_t i = 0; i < n; i++) {
    char key[512];
    kolo_keys_assign(order[i], key, sizeof key);
    kolo_sched_worker *w = kolo_sched_find_worker(snap, order[i]);
    /* a newcomer must still be free when this lands */
    if (w && w->assign_job == NULL) kolo_sched_txn_compare(t, KOLO_ETCD_CMP_CREATE, strdup(key), 0);
    Kolo__V1__Assignment assignment = KOLO__V1__ASSIGNMENT__INIT;
    assignment.job = j->id;
    assignment.ring = (char *)ring_key;
    assignment.has_epoch = assignment.has_rank = 1;
    assignment.epoch = epoch;
    assignment.rank = (int64_t)i;
    char *value = NULL, err[256];
    if (kolo_assignment_write(&assignment, &value, err, sizeof err) != KOLO_OK)
      KOLO_LOGW(LOG, "job %s: assignment of %s: %s", j->id, order[i], err);
    kolo_sched_txn_put(t, strdup(key), value); /* NULL breaks the txn */
  }
  delete_assignments(t, plan->removed, plan->n_removed);
}

kolo_status kolo_sched_write_epoch(const kolo_sched_writer *wr, kolo_sched_snapshot *snap,
                                   kolo_sched_job *j, const kolo_sched_epoch_plan *plan) {
  const char **newcomers = calloc(plan->take + 1, sizeof *newcomers);
  const char **order = calloc(plan->n_keep + plan->take + 1, sizeof *order);
  Kolo__V1__RingMember *members = calloc(plan->n_keep + plan->take + 1, sizeof *members);
  Kolo__V1__Member **status_members = calloc(plan->n_keep + plan->take + 1, sizeof *status_members);
  size_t n = 0;
  char *ring = NULL;
  kolo_sched_txn *t = kolo_sched_txn_create();
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  if (!newcomers || !order || !members || !status_members || !t) goto out;
  size_t n_new = 0;
  for (size_t i = 0; i < snap->n_workers && n_new < plan->take; i++)
    if (kolo_sched_worker_idle(&snap->workers[i]))
      newcomers[n_new++] = snap->workers[i].m.record->id;
  n = kolo_sched_plan_ring(plan->keep, plan->n_keep, newcomers, n_new,
                           kolo_sched_job_max_workers(j), order);
  int64_t epoch = (int64_t)j->status->epoch + 1;
  const Kolo__V1__RingRecord *old_ring = kolo_sched_job_ring(j, epoch - 1);
  rc = KOLO_ERR_NOT_FOUND;
  if (!all_registered(snap, j, order, n)) goto out;
  order_by_planner(snap, old_ring, order, n);
  rc = ring_members(snap, old_ring, epoch, order, n, members, status_members);
  if (rc == KOLO_OK) rc = ring_record(j, old_ring, epoch, members, n, plan, &ring);
  if (rc != KOLO_OK) goto out;
  char ring_key[512];
  kolo_keys_ring(j->id, epoch, ring_key, sizeof ring_key);
  add_epoch_writes(t, snap, j, epoch, order, n, status_members, plan, ring_key);
  status_members = NULL;
  kolo_sched_txn_put(t, strdup(ring_key), ring);
  ring = NULL; /* the txn owns it */
  rc = commit(wr, t);
  if (rc == KOLO_OK)
    for (size_t i = 0; i < n_new; i++) kolo_sched_find_worker(snap, newcomers[i])->taken = 1;
out:
  free_status_members(status_members, n);
  free(ring);
  kolo_sched_txn_destroy(t);
  free(members);
  free(newcomers);
  free(order);
  return rc;
}

/* ---- the other writes ---- */

/* Rank 0's last reported progress (coordination/job_status.h: the JobStatus.progress
 * fields it holds). */
static kolo_job_progress rank0_progress(const kolo_sched_job *j) {
  const Kolo__V1__AgentReport *r = kolo_sched_job_report_of(j, kolo_sched_member_id(j, 0));
  return kolo_job_progress_from_report(r ? r->progress : NULL);
}

kolo_status kolo_sched_end_job(const kolo_sched_writer *wr, kolo_sched_snapshot *snap,
                               kolo_sched_job *j, Kolo__V1__Phase phase, const char *type,
                               const char *message) {
  kolo_sched_txn *t = kolo_sched_txn_create();
  if (t == NULL) return KOLO_ERR_NO_MEMORY;
  Kolo__V1__JobStatus *status = begin_job_write(t, j);
  /* the last progress rank 0 reported (the periodic copy is throttled) */
  kolo_job_progress progress = rank0_progress(j);
  kolo_status moved = status ? kolo_job_status_finish(status, phase, message, &progress, wall_ms())
                             : KOLO_ERR_NO_MEMORY;
  add_event(t, j, type, (int64_t)j->status->epoch, message);
  finish_job_write(t, j, status, moved);
  for (size_t i = 0; i < snap->n_workers; i++) {
    kolo_sched_worker *w = &snap->workers[i];
    if (w->assign_job && strcmp(w->assign_job, j->id) == 0)
      delete_assignments(t, (const char *const *)&w->m.record->id, 1);
  }
  kolo_status rc = commit(wr, t);
  kolo_sched_txn_destroy(t);
  return rc;
}

/* Copies of members[0..n) (a new array; an empty one for n == 0). */
static kolo_status copy_members(const Kolo__V1__Member *const *members, size_t n,
                                Kolo__V1__Member ***out) {
  *out = calloc(n + 1, sizeof **out);
  if (*out == NULL) return KOLO_ERR_NO_MEMORY;
  for (size_t i = 0; i < n; i++) {
    (*out)[i] = (Kolo__V1__Member *)kolo_codec_copy(&members[i]->base);
    if ((*out)[i] == NULL) return KOLO_ERR_NO_MEMORY;
  }
  return KOLO_OK;
}

kolo_status kolo_sched_write_change(const kolo_sched_writer *wr, kolo_sched_job *j,
                                    const kolo_sched_change *c) {
  kolo_sched_txn *t = kolo_sched_txn_create();
  if (t == NULL) return KOLO_ERR_NO_MEMORY;
  Kolo__V1__JobStatus *status = begin_job_write(t, j);
  Kolo__V1__Member **kept = NULL;
  kolo_status moved = status ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  if (moved == KOLO_OK && c->set_members) moved = copy_members(c->members, c->n_members, &kept);
  if (moved == KOLO_OK)
    moved = kolo_job_status_move(status, c->phase, kept, c->set_members ? c->n_members : 0,
                                 c->count_reconfiguration, (uint32_t)c->count_drains, wall_ms());
  if (moved != KOLO_OK) free_status_members(kept, c->n_members);
  if (c->event_type) add_event(t, j, c->event_type, (int64_t)j->status->epoch, c->event_message);
  finish_job_write(t, j, status, moved);
  delete_assignments(t, c->removed, c->n_removed);
  kolo_status rc = commit(wr, t);
  kolo_sched_txn_destroy(t);
  return rc;
}

void kolo_sched_copy_progress(const kolo_sched_writer *wr, kolo_sched_job *j) {
  kolo_job_progress progress = rank0_progress(j);
  if (progress.present == 0) return;
  if (wall_ms() - j->status->updated_unix_ms < PROGRESS_EVERY_MS) return;
  kolo_sched_txn *t = kolo_sched_txn_create();
  if (t == NULL) return;
  Kolo__V1__JobStatus *status = begin_job_write(t, j);
  int changed = status ? kolo_job_status_merge_progress(status, &progress, wall_ms()) : -1;
  if (changed != 0) { /* unchanged: nothing to write */
    finish_job_write(t, j, status, changed > 0 ? KOLO_OK : KOLO_ERR_NO_MEMORY);
    if (changed > 0) commit(wr, t);
  } else if (status) {
    protobuf_c_message_free_unpacked(&status->base, NULL);
  }
  kolo_sched_txn_destroy(t);
}

void kolo_sched_sweep(const kolo_sched_writer *wr, kolo_sched_snapshot *snap) {
  for (size_t i = 0; i < snap->n_assigns; i++) {
    const char *worker_id = snap->assigns[i].worker_id, *job_id = snap->assigns[i].job;
    char key[512];
    if (kolo_sched_assignment_valid(snap, worker_id, job_id) ||
        kolo_keys_assign(worker_id, key, sizeof key) != KOLO_OK)
      continue;
    kolo_sched_txn *t = kolo_sched_txn_create();
    if (t == NULL) return;
    kolo_sched_txn_delete(t, strdup(key));
    if (commit(wr, t) == KOLO_OK)
      KOLO_LOGI(LOG, "took stale assignment of %s (job %s) away", worker_id, job_id);
    kolo_sched_txn_destroy(t);
  }
}

/* ---- the user's intents ---- */

kolo_status kolo_sched_apply_intents(const kolo_sched_writer *wr, kolo_sched_snapshot *snap,
                                     kolo_sched_job *j) {
  size_t n = j->n_intents < KOLO_SCHED_INTENTS_PER_TXN ? j->n_intents : KOLO_SCHED_INTENTS_PER_TXN;
  kolo_sched_txn *t = kolo_sched_txn_create();
  const Kolo__V1__JobIntent **in = calloc(n + 1, sizeof *in);
  kolo_job_intent_event *events = calloc(n + 1, sizeof *events);
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  if (t == NULL || in == NULL || events == NULL) goto out;
  /* no intent_head compare: intents stored since stay pending for the next pass */
  kolo_sched_txn_compare(t, KOLO_ETCD_CMP_MOD, status_key(j), j->status_mod);
  Kolo__V1__JobStatus *status = (Kolo__V1__JobStatus *)kolo_codec_copy(&j->status->base);
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (j->intents[i].msg) in[k++] = j->intents[i].msg;
  int added = status ? kolo_job_status_apply_intents(status, in, k, events, NULL) : -1;
  for (int i = 0; i < added; i++) /* the intent's own time: what kolo-server's view showed */
    add_event_at(t, j, events[i].type, (int64_t)j->status->epoch, events[i].message,
                 events[i].time_unix_ms);
  int cancelled = status && status->phase == KOLO__V1__PHASE__CANCELLED;
  finish_job_write(t, j, status, added < 0 ? KOLO_ERR_NO_MEMORY : KOLO_OK);
  for (size_t i = 0; i < n; i++) /* applied or not (a cancel before it, or not decoding) */
    kolo_sched_txn_delete(t, strdup(j->intents[i].key));
  for (size_t i = 0; cancelled && i < snap->n_workers; i++) {
    kolo_sched_worker *w = &snap->workers[i];
    if (w->assign_job && strcmp(w->assign_job, j->id) == 0)
      delete_assignments(t, (const char *const *)&w->m.id, 1);
  }
  rc = commit(wr, t);
out:
  kolo_sched_txn_destroy(t);
  free(in);
  free(events);
  return rc;
}
