/* Implementation of snapshot.h: the member list from the worker records, then
 * one pass over the job keys that sorts each into its job by the key's path. */
#define _GNU_SOURCE
#include "scheduler/snapshot.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "common/checks.h"
#include "common/log.h"
#include "coordination/drain.h"
#include "coordination/job_status.h"
#include "coordination/keys.h"
#include "coordination/report.h"
#include "kolo/v1/job.pb-c.h"

#define LOG "sched"

static void job_free(kolo_sched_job *j) {
  free(j->id);
  if (j->spec) protobuf_c_message_free_unpacked(&j->spec->base, NULL);
  for (size_t i = 0; i < j->n_intents; i++) {
    free(j->intents[i].key);
    if (j->intents[i].msg) protobuf_c_message_free_unpacked(&j->intents[i].msg->base, NULL);
  }
  free(j->intents);
  if (j->status) protobuf_c_message_free_unpacked(&j->status->base, NULL);
  for (size_t i = 0; i < j->n_rings; i++)
    protobuf_c_message_free_unpacked(&j->rings[i]->base, NULL);
  free(j->rings);
  for (size_t i = 0; i < j->n_reports; i++) {
    free(j->reports[i].worker_id);
    protobuf_c_message_free_unpacked(&j->reports[i].r->base, NULL);
  }
  free(j->reports);
}

void kolo_sched_snapshot_free(kolo_sched_snapshot *snap) {
  kolo_worker_entries_free(snap->members, snap->n_members);
  free(snap->workers);
  for (size_t i = 0; i < snap->n_jobs; i++) job_free(&snap->jobs[i]);
  free(snap->jobs);
  for (size_t i = 0; i < snap->n_assigns; i++) {
    free(snap->assigns[i].worker_id);
    if (snap->assigns[i].a) protobuf_c_message_free_unpacked(&snap->assigns[i].a->base, NULL);
  }
  free(snap->assigns);
  memset(snap, 0, sizeof *snap);
}

/* The job with this id: the last one if it matches (keys come sorted, so a
 * job's keys are adjacent), else a new one. */
static kolo_sched_job *job_for(kolo_sched_snapshot *snap, const char *id, size_t id_len) {
  if (snap->n_jobs > 0) {
    kolo_sched_job *last = &snap->jobs[snap->n_jobs - 1];
    if (strlen(last->id) == id_len && memcmp(last->id, id, id_len) == 0) return last;
  }
  kolo_sched_job *grown = realloc(snap->jobs, (snap->n_jobs + 1) * sizeof *grown);
  if (grown == NULL) return NULL;
  snap->jobs = grown;
  kolo_sched_job *j = &snap->jobs[snap->n_jobs];
  memset(j, 0, sizeof *j);
  j->id = strndup(id, id_len);
  if (j->id == NULL) {
    job_free(j);
    return NULL;
  }
  snap->n_jobs++;
  return j;
}

static int by_creation(const void *a, const void *b) {
  const kolo_sched_job *x = a, *y = b;
  if (x->created != y->created) return x->created < y->created ? -1 : 1;
  return strcmp(x->id, y->id);
}

/* Adds the ring record at key to j's rings (keys come in epoch order). */
static void add_ring(kolo_sched_job *j, const char *key, const char *text, size_t length) {
  Kolo__V1__RingRecord *ring = NULL;
  char err[256];
  if (kolo_ringspec_read(text, length, &ring, err, sizeof err) != KOLO_OK) {
    KOLO_LOGW(LOG, "%s is not a valid ring record: %s", key, err);
    return;
  }
  Kolo__V1__RingRecord **grown = realloc(j->rings, (j->n_rings + 1) * sizeof *grown);
  if (grown == NULL) {
    protobuf_c_message_free_unpacked(&ring->base, NULL);
    return;
  }
  j->rings = grown;
  j->rings[j->n_rings++] = ring;
}

/* Keeps worker's report on j, decoded by its owner (coordination/report.h); one that
 * does not decode is logged and left out. */
static void add_report(kolo_sched_job *j, const char *worker, const char *text, size_t length) {
  Kolo__V1__AgentReport *r = NULL;
  char err[256];
  if (kolo_report_read(text, length, &r, err, sizeof err) != KOLO_OK) {
    KOLO_LOGW(LOG, "job %s: report of %s left out: %s", j->id, worker, err);
    return;
  }
  kolo_sched_job_report *grown = realloc(j->reports, (j->n_reports + 1) * sizeof *grown);
  char *id = strdup(worker);
  if (grown == NULL || id == NULL) {
    if (grown) j->reports = grown;
    free(id);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return;
  }
  j->reports = grown;
  j->reports[j->n_reports++] = (kolo_sched_job_report){id, r};
}

const Kolo__V1__AgentReport *kolo_sched_job_report_of(const kolo_sched_job *j,
                                                      const char *worker_id) {
  for (size_t i = 0; worker_id && i < j->n_reports; i++)
    if (strcmp(j->reports[i].worker_id, worker_id) == 0) return j->reports[i].r;
  return NULL;
}

/* j's spec (text) decoded as its message (desc) through the one codec (fields a
 * newer writer added are skipped), else NULL (logged): a job without a readable spec and
 * status is not the scheduler's to touch. *slot's old message is freed. */
static void decode_into(const kolo_sched_job *j, const char *what, const char *text, size_t length,
                        const ProtobufCMessageDescriptor *desc, ProtobufCMessage **slot) {
  if (*slot) protobuf_c_message_free_unpacked(*slot, NULL);
  *slot = NULL;
  kolo_codec_fault fault;
  if (kolo_codec_read(text, length, desc, KOLO_CODEC_IGNORE_UNKNOWN, slot, &fault) != KOLO_OK)
    KOLO_LOGW(LOG, "job %s: its %s does not decode: %s", j->id, what, fault.message);
}

/* Adds the intent at kv to j, in create-revision order (one that does not decode is kept
 * without its message, logged: the scheduler deletes it unapplied). */
static void add_intent(kolo_sched_job *j, const kolo_etcd_kv *kv) {
  kolo_sched_intent *grown = realloc(j->intents, (j->n_intents + 1) * sizeof *grown);
  if (grown == NULL) return;
  j->intents = grown;
  kolo_sched_intent in = {strdup((const char *)kv->key), NULL, kv->create_revision};
  if (in.key == NULL) return;
  decode_into(j, "intent", (const char *)kv->value, kv->value_len,
              &kolo__v1__job_intent__descriptor, (ProtobufCMessage **)&in.msg);
  size_t pos = j->n_intents;
  while (pos > 0 && j->intents[pos - 1].created > in.created) pos--;
  memmove(&j->intents[pos + 1], &j->intents[pos], (j->n_intents - pos) * sizeof *j->intents);
  j->intents[pos] = in;
  j->n_intents++;
}

/* Files one key under /kolo/v1/jobs/<id>/ into its job. */
static void add_job_key(kolo_sched_snapshot *snap, const kolo_etcd_kv *kv) {
  const char *rest = (const char *)kv->key + strlen(KOLO_KEY_JOBS_PREFIX);
  const char *slash = strchr(rest, '/');
  if (slash == NULL) return;
  kolo_sched_job *j = job_for(snap, rest, (size_t)(slash - rest));
  if (j == NULL) return;
  const char *part = slash + 1;
  const char *text = (const char *)kv->value;
  size_t length = kv->value_len;
  if (strncmp(part, "events/", 7) == 0) {
    /* 10-digit keys (older writers) sort after 20-digit ones: take the maximum, not the last */
    uint64_t seq = 0;
    if (kolo_keys_event_number(part + 7, &seq) && seq > j->max_seq) j->max_seq = seq;
  } else if (strcmp(part, "spec") == 0) {
    decode_into(j, "spec", text, length, &kolo__v1__job_spec__descriptor,
                (ProtobufCMessage **)&j->spec);
  } else if (strcmp(part, "status") == 0) {
    /* through its owner (coordination/job_status.h) */
    if (j->status) protobuf_c_message_free_unpacked(&j->status->base, NULL);
    char err[512];
    if (kolo_job_status_read(text, length, &j->status, err, sizeof err) != KOLO_OK)
      KOLO_LOGW(LOG, "job %s: its %s", j->id, err);
    j->status_mod = kv->mod_revision;
    j->created = j->status ? j->status->created_unix_ms : 0;
  } else if (strncmp(part, KOLO_KEY_JOB_INTENTS, strlen(KOLO_KEY_JOB_INTENTS)) == 0) {
    add_intent(j, kv);
  } else if (strcmp(part, KOLO_KEY_JOB_INTENT_HEAD) == 0) {
    j->intent_head_mod = kv->mod_revision;
  } else if (strncmp(part, "ring/", 5) == 0) {
    add_ring(j, (const char *)kv->key, text, length);
  } else if (strncmp(part, "reports/", 8) == 0) {
    add_report(j, part + 8, text, length);
  }
}

/* Whether a drain mark drains worker id's current registration (coordination/drain.h:
 * a mark of an earlier registration under the same id drains nothing). */
static int drained(const kolo_etcd_range_result *drains, const char *id, int64_t lease) {
  for (size_t d = 0; d < drains->count; d++)
    if (strcmp((const char *)drains->kvs[d].key + strlen(KOLO_KEY_DRAIN_PREFIX), id) == 0 &&
        kolo_drain_mark_applies((const char *)drains->kvs[d].value, drains->kvs[d].value_len,
                                lease))
      return 1;
  return 0;
}

/* Keeps the assignment under kv's key; one that does not decode is kept as job "". */
static kolo_status add_assign(kolo_sched_snapshot *snap, const kolo_etcd_kv *kv) {
  size_t n = strlen(KOLO_KEY_ASSIGN_PREFIX);
  if (kv->key == NULL || kv->key_len <= n) return KOLO_OK;
  kolo_sched_assign *a = &snap->assigns[snap->n_assigns];
  a->worker_id = strndup((const char *)kv->key + n, kv->key_len - n);
  if (a->worker_id == NULL) return KOLO_ERR_NO_MEMORY;
  snap->n_assigns++;
  char err[256];
  kolo_status rc =
      kolo_assignment_read((const char *)kv->value, kv->value_len, &a->a, err, sizeof err);
  if (rc == KOLO_ERR_NO_MEMORY) return rc;
  if (rc != KOLO_OK)
    KOLO_LOGW(LOG, "assignment of %s does not decode (to be swept): %s", a->worker_id, err);
  a->job = a->a ? a->a->job : "";
  return KOLO_OK;
}

static int assign_cmp(const void *a, const void *b) {
  return strcmp(((const kolo_sched_assign *)a)->worker_id,
                ((const kolo_sched_assign *)b)->worker_id);
}

static int worker_cmp(const void *a, const void *b) {
  return strcmp(((const kolo_sched_worker *)a)->m.record->id,
                ((const kolo_sched_worker *)b)->m.record->id);
}

/* Binary search (the assignments are sorted by worker id: kolo_sched_snapshot_fill). */
static const kolo_sched_assign *find_assign(const kolo_sched_snapshot *snap, const char *id) {
  kolo_sched_assign key = {.worker_id = (char *)id};
  return snap->n_assigns ? bsearch(&key, snap->assigns, snap->n_assigns, sizeof key, assign_cmp)
                         : NULL;
}

/* Sorts base by cmp unless it is sorted already (what etcd's ranges give). */
static void ensure_sorted(void *base, size_t n, size_t size,
                          int (*cmp)(const void *, const void *)) {
  for (size_t i = 1; i < n; i++)
    if (cmp((char *)base + (i - 1) * size, (char *)base + i * size) > 0) {
      qsort(base, n, size, cmp);
      return;
    }
}

kolo_status kolo_sched_snapshot_fill(kolo_sched_snapshot *snap,
                                     const kolo_etcd_range_result *assigns,
                                     const kolo_etcd_range_result *drains,
                                     const kolo_etcd_range_result *jobs) {
  snap->assigns = calloc(assigns->count + 1, sizeof *snap->assigns);
  snap->workers = calloc(snap->n_members + 1, sizeof *snap->workers);
  if (snap->assigns == NULL || snap->workers == NULL) return KOLO_ERR_NO_MEMORY;
  for (size_t i = 0; i < assigns->count; i++) KOLO_CHECK(add_assign(snap, &assigns->kvs[i]));
  /* lookups by worker id are binary searches: a pass is O(w log w), not O(w^2) (#35) */
  ensure_sorted(snap->assigns, snap->n_assigns, sizeof *snap->assigns, assign_cmp);
  for (size_t i = 0; i < snap->n_members; i++) {
    kolo_sched_worker *w = &snap->workers[snap->n_workers++];
    w->m = snap->members[i];
    w->draining =
        strcmp(w->m.record->state, "draining") == 0 || drained(drains, w->m.record->id, w->m.lease);
    const kolo_sched_assign *a = find_assign(snap, w->m.record->id);
    w->assign_job = a ? a->job : NULL;
  }
  ensure_sorted(snap->workers, snap->n_workers, sizeof *snap->workers, worker_cmp);
  for (size_t i = 0; i < jobs->count; i++) add_job_key(snap, &jobs->kvs[i]);
  /* jobs without a readable spec and status are not ours to touch */
  size_t kept = 0;
  for (size_t i = 0; i < snap->n_jobs; i++) {
    if (snap->jobs[i].spec != NULL && snap->jobs[i].status != NULL)
      snap->jobs[kept++] = snap->jobs[i];
    else
      job_free(&snap->jobs[i]);
  }
  snap->n_jobs = kept;
  if (snap->n_jobs > 1) qsort(snap->jobs, snap->n_jobs, sizeof *snap->jobs, by_creation);
  return KOLO_OK;
}

const char *const kolo_sched_record_prefixes[4] = {KOLO_KEY_WORKERS_PREFIX, KOLO_KEY_ASSIGN_PREFIX,
                                                   KOLO_KEY_DRAIN_PREFIX, KOLO_KEY_JOBS_PREFIX};

void kolo_sched_records_free(kolo_sched_records *r) {
  kolo_etcd_range_result_free(&r->workers);
  kolo_etcd_range_result_free(&r->assigns);
  kolo_etcd_range_result_free(&r->drains);
  kolo_etcd_range_result_free(&r->jobs);
  memset(r, 0, sizeof *r);
}

kolo_status kolo_sched_records_read(kolo_etcd *etcd, kolo_sched_records *out) {
  memset(out, 0, sizeof *out);
  kolo_etcd_range_result *sets[4] = {&out->workers, &out->assigns, &out->drains, &out->jobs};
  kolo_status rc = KOLO_OK;
  for (int i = 0; i < 4 && rc == KOLO_OK; i++)
    rc = kolo_etcd_range_prefix(etcd, kolo_etcd_str(kolo_sched_record_prefixes[i]), 0, sets[i]);
  out->revision = out->workers.revision;
  if (rc != KOLO_OK) kolo_sched_records_free(out);
  return rc;
}

kolo_status kolo_sched_snapshot_build(kolo_sched_snapshot *snap, const kolo_sched_records *r) {
  memset(snap, 0, sizeof *snap);
  kolo_status rc =
      kolo_members_from_kvs(r->workers.kvs, r->workers.count, &snap->members, &snap->n_members);
  if (rc != KOLO_OK) return rc;
  return kolo_sched_snapshot_fill(snap, &r->assigns, &r->drains, &r->jobs);
}

kolo_sched_worker *kolo_sched_find_worker(kolo_sched_snapshot *snap, const char *id) {
  Kolo__V1__WorkerRecord record = KOLO__V1__WORKER_RECORD__INIT;
  record.id = (char *)id;
  kolo_sched_worker key = {.m = {.record = &record}};
  return snap->n_workers ? bsearch(&key, snap->workers, snap->n_workers, sizeof key, worker_cmp)
                         : NULL;
}

int kolo_sched_worker_idle(const kolo_sched_worker *w) {
  return !w->taken && !w->draining && w->assign_job == NULL &&
         strcmp(w->m.record->state, "idle") == 0;
}

size_t kolo_sched_count_idle(const kolo_sched_snapshot *snap) {
  size_t n = 0;
  for (size_t i = 0; i < snap->n_workers; i++) n += kolo_sched_worker_idle(&snap->workers[i]);
  return n;
}

/* ---- job fields ---- */

Kolo__V1__Phase kolo_sched_job_phase(const kolo_sched_job *j) {
  return j->status ? j->status->phase : KOLO__V1__PHASE__PHASE_UNSPECIFIED;
}

int kolo_sched_job_scheduled(const kolo_sched_job *j) {
  if (!kolo_job_status_scheduled(j->status)) return 0;
  return j->status->phase != KOLO__V1__PHASE__PENDING ||
         kolo_sched_job_ring(j, (int64_t)j->status->epoch) != NULL;
}

static uint32_t bound(uint32_t from_status, uint32_t from_spec) {
  uint32_t v = from_status ? from_status : from_spec;
  return v > 0 ? v : 1;
}

uint32_t kolo_sched_job_min_workers(const kolo_sched_job *j) {
  return bound(j->status->min_workers, j->spec->min_workers);
}

uint32_t kolo_sched_job_max_workers(const kolo_sched_job *j) {
  return bound(j->status->max_workers, j->spec->max_workers);
}

const Kolo__V1__RingRecord *kolo_sched_job_ring(const kolo_sched_job *j, int64_t epoch) {
  for (size_t i = j->n_rings; i > 0; i--) /* the newest is the one asked for, mostly */
    if (j->rings[i - 1]->epoch == epoch) return j->rings[i - 1];
  return NULL;
}

const char *kolo_sched_member_id(const kolo_sched_job *j, size_t i) {
  if (i >= j->status->n_members || j->status->members[i]->worker_id == NULL) return "";
  return j->status->members[i]->worker_id;
}

/* The decisions' view of a report (strings borrowed from it); none if r is NULL. */
static kolo_sched_report report_of(const Kolo__V1__AgentReport *r) {
  kolo_sched_report out = {0};
  out.failed_rank = -1;
  if (r == NULL) return out;
  out.present = 1;
  out.time_unix_ms = r->time_unix_ms;
  out.exited = r->exited;
  out.exit_code = (int)r->exit_code;
  out.exit_epoch = r->exit_epoch;
  out.failed_epoch = r->failed_epoch;
  out.failed_rank = r->failed_rank;
  out.formed_epoch = r->formed_epoch;
  out.stderr_tail = r->stderr_tail;
  out.failed_status = r->failed_status;
  out.hello = r->hello;
  out.permanent = r->permanent;
  out.first_formed_epoch = r->first_formed_epoch;
  return out;
}

/* Worker id's entry in ring's members (NULL when it is not a member of it). */
static const Kolo__V1__RingMember *member_in(const Kolo__V1__RingRecord *ring, const char *id) {
  int rank = ring ? kolo_ringspec_rank_of(ring, id) : -1;
  return rank < 0 ? NULL : ring->members[rank];
}

kolo_status kolo_sched_job_view_build(kolo_sched_snapshot *snap, const kolo_sched_job *j,
                                      int64_t now_unix_ms, kolo_sched_job_view *view,
                                      kolo_sched_member **members, const char ***earlier) {
  memset(view, 0, sizeof *view);
  size_t n = j->status->n_members;
  view->epoch = (int64_t)j->status->epoch;
  const Kolo__V1__RingRecord *ring = kolo_sched_job_ring(j, view->epoch);
  size_t n_lost = ring ? ring->n_lost : 0;
  *members = calloc(n + 1, sizeof **members);
  *earlier = calloc(n_lost + 1, sizeof **earlier);
  if (*members == NULL || *earlier == NULL) {
    free(*members);
    free(*earlier);
    *members = NULL;
    *earlier = NULL;
    return KOLO_ERR_NO_MEMORY;
  }
  for (size_t i = 0; i < n; i++) {
    kolo_sched_member *m = &(*members)[i];
    m->worker_id = kolo_sched_member_id(j, i);
    kolo_sched_worker *w = kolo_sched_find_worker(snap, m->worker_id);
    m->registered = w != NULL;
    m->draining = w != NULL && w->draining;
    const Kolo__V1__RingMember *entry = member_in(ring, m->worker_id);
    m->since_epoch = entry ? entry->since_epoch : 0;
    m->lease = w != NULL ? w->m.lease : 0;
    m->ring_lease = entry ? entry->lease : 0;
    m->report = report_of(kolo_sched_job_report_of(j, m->worker_id));
  }
  for (size_t k = 0; k < n_lost; k++) (*earlier)[view->n_earlier_lost++] = ring->lost[k]->worker_id;
  view->phase = kolo_sched_job_phase(j);
  view->has_ring = ring != NULL;
  view->ring_size = ring ? ring->n_members : 0;
  view->members = *members;
  view->n_members = n;
  view->min_workers = kolo_sched_job_min_workers(j);
  view->max_workers = kolo_sched_job_max_workers(j);
  view->reconfigurations = j->status->reconfigurations;
  view->max_reconfigurations = j->spec->max_reconfigurations;
  view->idle = kolo_sched_count_idle(snap);
  view->earlier_lost = *earlier;
  view->now_unix_ms = now_unix_ms;
  return KOLO_OK;
}

int kolo_sched_assignment_valid(const kolo_sched_snapshot *snap, const char *worker_id,
                                const char *job_id) {
  for (size_t i = 0; i < snap->n_jobs; i++) {
    const kolo_sched_job *j = &snap->jobs[i];
    if (strcmp(j->id, job_id) != 0) continue;
    if (!kolo_sched_job_scheduled(j)) return 0;
    for (size_t m = 0; m < j->status->n_members; m++)
      if (strcmp(kolo_sched_member_id(j, m), worker_id) == 0) return 1;
    return 0;
  }
  return 0;
}
