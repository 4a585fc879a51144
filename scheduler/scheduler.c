/* Implementation of scheduler.h: one thread; each pass takes a snapshot of the
 * cluster from etcd, decides per job (FIFO by creation time) with plan.h, and
 * writes each decision as one fenced txn that also compares the job status's
 * mod revision, so a stale snapshot or a deposed leader writes nothing. */
#define _GNU_SOURCE
#include "scheduler/scheduler.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "coordination/etcd.h"
#include "coordination/keys.h"
#include "coordination/membership.h"
#include "coordination/planner.h"
#include "scheduler/plan.h"

#define LOG "sched"
#define MAX_OPS 1024
#define FAILED_SETTLE_MS 500 /* wait this long for every survivor's FAILED report */
#define FINISH_GRACE_MS 10000
#define PROGRESS_EVERY_MS 1000
#define DRAIN_PREFIX "/kolo/v1/drain/"

struct kolo_sched {
  kolo_sched_config config;
  kolo_etcd *etcd;
  kolo_etcd_watch *watch;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int stop, changed;
  char endpoint_text[1024];
};

typedef struct worker {
  kolo_member m;
  int draining;
  const char *assign_job; /* borrowed from the snapshot's assignment JSON */
  int taken;              /* given to a job in this pass */
} worker;

typedef struct job {
  char id[160];
  json_t *spec, *status;
  int64_t status_mod;
  uint64_t max_seq;
  json_t *rings;   /* "<epoch>" -> ring */
  json_t *reports; /* worker id -> report */
  int64_t created;
} job;

typedef struct snapshot {
  kolo_member *members;
  size_t n_members;
  worker *workers;
  size_t n_workers;
  job *jobs;
  size_t n_jobs;
  json_t *assigns; /* worker id -> assignment */
} snapshot;

typedef struct txn {
  kolo_etcd_compare cmps[MAX_OPS];
  size_t nc;
  kolo_etcd_op ops[MAX_OPS];
  size_t no;
  char *owned[4 * MAX_OPS];
  size_t n_owned;
  int overflow;
} txn;

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

/* ---- txn building ---- */

static const char *keep(txn *t, char *owned) {
  if (owned == NULL || t->n_owned == sizeof t->owned / sizeof t->owned[0]) {
    free(owned);
    t->overflow = 1;
    return "";
  }
  t->owned[t->n_owned++] = owned;
  return owned;
}

static void txn_put(txn *t, char *key, char *value) {
  const char *k = keep(t, key), *v = keep(t, value);
  if (t->no == MAX_OPS) {
    t->overflow = 1;
    return;
  }
  t->ops[t->no++] = (kolo_etcd_op){.kind = KOLO_ETCD_OP_PUT, .key = kolo_etcd_str(k), .value = kolo_etcd_str(v)};
}

static void txn_del(txn *t, char *key) {
  const char *k = keep(t, key);
  if (t->no == MAX_OPS) {
    t->overflow = 1;
    return;
  }
  t->ops[t->no++] = (kolo_etcd_op){.kind = KOLO_ETCD_OP_DELETE, .key = kolo_etcd_str(k)};
}

static void txn_cmp(txn *t, kolo_etcd_cmp_target target, char *key, int64_t number) {
  const char *k = keep(t, key);
  if (t->nc == MAX_OPS) {
    t->overflow = 1;
    return;
  }
  t->cmps[t->nc++] = (kolo_etcd_compare){.target = target, .result = KOLO_ETCD_EQUAL,
                                         .key = kolo_etcd_str(k), .number = number};
}

static void txn_free(txn *t) {
  for (size_t i = 0; i < t->n_owned; i++) free(t->owned[i]);
  free(t);
}

/* Runs t fenced by the leader key. KOLO_OK only when every compare held. */
static kolo_status txn_commit(kolo_sched *s, txn *t) {
  char key[512];
  int64_t revision = 0;
  kolo_status rc = s->config.fence(s->config.fence_arg, key, sizeof key, &revision);
  if (rc != KOLO_OK) return rc;
  if (t->overflow) {
    KOLO_LOGE(LOG, "a decision needs more than %d txn operations; skipped", MAX_OPS);
    return KOLO_ERR_TOO_LARGE;
  }
  txn_cmp(t, KOLO_ETCD_CMP_CREATE, strdup(key), revision);
  kolo_etcd_txn request = {t->cmps, t->nc, t->ops, t->no, NULL, 0};
  kolo_etcd_txn_result result;
  memset(&result, 0, sizeof result);
  rc = kolo_etcd_txn_run(s->etcd, &request, &result);
  if (rc == KOLO_OK && !result.succeeded) rc = KOLO_ERR_CONFLICT;
  if (rc != KOLO_OK && rc != KOLO_ERR_CONFLICT) KOLO_LOGW(LOG, "txn failed: %s", kolo_etcd_last_error());
  kolo_etcd_txn_result_free(&result);
  return rc;
}

/* ---- job JSON helpers ---- */

static const char *phase_of(const job *j) {
  return json_string_value(json_object_get(j->status, "phase")) ?: "";
}

static int64_t int_of(const json_t *object, const char *name) {
  return (int64_t)json_integer_value(json_object_get(object, name));
}

static uint32_t bound(const job *j, const char *name) {
  int64_t v = int_of(j->status, name);
  if (v <= 0) v = int_of(j->spec, name);
  return v > 0 ? (uint32_t)v : 1;
}

static json_t *ring_at(const job *j, int64_t epoch) {
  char name[32];
  snprintf(name, sizeof name, "%" PRId64, epoch);
  return json_object_get(j->rings, name);
}

/* Starts a write of j: status compare, a copy of the status to edit. */
static json_t *begin_job_write(txn *t, const job *j) {
  txn_cmp(t, KOLO_ETCD_CMP_MOD, fmt(KOLO_KEY_JOBS_PREFIX "%s/status", j->id), j->status_mod);
  return json_deep_copy(j->status);
}

static void add_event(txn *t, job *j, const char *type, int64_t epoch, const char *message) {
  uint64_t seq = ++j->max_seq;
  char *key = fmt(KOLO_KEY_JOBS_PREFIX "%s/events/%010" PRIu64, j->id, seq);
  json_t *event = json_pack("{s:I, s:I, s:s, s:s, s:I}", "seq", (json_int_t)seq, "time_unix_ms",
                            (json_int_t)wall_ms(), "type", type, "message", message, "epoch",
                            (json_int_t)epoch);
  txn_cmp(t, KOLO_ETCD_CMP_CREATE, key ? strdup(key) : NULL, 0);
  txn_put(t, key, event ? json_dumps(event, JSON_COMPACT) : NULL);
  json_decref(event);
  KOLO_LOGI(LOG, "job %s: %s (epoch %" PRId64 "): %s", j->id, type, epoch, message);
}

static void finish_job_write(txn *t, const job *j, json_t *status) {
  json_object_set_new(status, "updated_unix_ms", json_integer(wall_ms()));
  txn_put(t, fmt(KOLO_KEY_JOBS_PREFIX "%s/status", j->id), json_dumps(status, JSON_COMPACT));
  json_decref(status);
}

/* ---- the snapshot ---- */

static void snapshot_free(snapshot *snap) {
  kolo_members_free(snap->members, snap->n_members);
  free(snap->workers);
  for (size_t i = 0; i < snap->n_jobs; i++) {
    json_decref(snap->jobs[i].spec);
    json_decref(snap->jobs[i].status);
    json_decref(snap->jobs[i].rings);
    json_decref(snap->jobs[i].reports);
  }
  free(snap->jobs);
  json_decref(snap->assigns);
  memset(snap, 0, sizeof *snap);
}

static job *job_for(snapshot *snap, const char *id, size_t id_len) {
  if (id_len >= sizeof snap->jobs[0].id) return NULL;
  if (snap->n_jobs > 0 && strlen(snap->jobs[snap->n_jobs - 1].id) == id_len &&
      memcmp(snap->jobs[snap->n_jobs - 1].id, id, id_len) == 0)
    return &snap->jobs[snap->n_jobs - 1];
  job *grown = realloc(snap->jobs, (snap->n_jobs + 1) * sizeof *grown);
  if (grown == NULL) return NULL;
  snap->jobs = grown;
  job *j = &snap->jobs[snap->n_jobs++];
  memset(j, 0, sizeof *j);
  memcpy(j->id, id, id_len);
  j->rings = json_object();
  j->reports = json_object();
  return j;
}

static int by_creation(const void *a, const void *b) {
  const job *x = a, *y = b;
  if (x->created != y->created) return x->created < y->created ? -1 : 1;
  return strcmp(x->id, y->id);
}

static kolo_status load(kolo_sched *s, snapshot *snap) {
  memset(snap, 0, sizeof *snap);
  kolo_status rc = kolo_membership_list(s->etcd, &snap->members, &snap->n_members, NULL);
  if (rc != KOLO_OK) return rc;
  kolo_etcd_range_result assigns = {0}, drains = {0}, jobs = {0};
  rc = kolo_etcd_range_prefix(s->etcd, kolo_etcd_str(KOLO_KEY_ASSIGN_PREFIX), 0, &assigns);
  if (rc == KOLO_OK) rc = kolo_etcd_range_prefix(s->etcd, kolo_etcd_str(DRAIN_PREFIX), 0, &drains);
  if (rc == KOLO_OK) rc = kolo_etcd_range_prefix(s->etcd, kolo_etcd_str(KOLO_KEY_JOBS_PREFIX), 0, &jobs);
  if (rc != KOLO_OK) goto out;
  snap->assigns = json_object();
  for (size_t i = 0; i < assigns.count; i++) {
    json_t *value = json_loadb((const char *)assigns.kvs[i].value, assigns.kvs[i].value_len, 0, NULL);
    if (value) json_object_set_new(snap->assigns, (const char *)assigns.kvs[i].key + strlen(KOLO_KEY_ASSIGN_PREFIX), value);
  }
  snap->workers = calloc(snap->n_members + 1, sizeof *snap->workers);
  if (snap->workers == NULL) {
    rc = KOLO_ERR_NO_MEMORY;
    goto out;
  }
  for (size_t i = 0; i < snap->n_members; i++) {
    worker *w = &snap->workers[snap->n_workers++];
    w->m = snap->members[i];
    w->draining = strcmp(w->m.state, "draining") == 0;
    for (size_t d = 0; d < drains.count; d++)
      if (strcmp((const char *)drains.kvs[d].key + strlen(DRAIN_PREFIX), w->m.id) == 0) w->draining = 1;
    w->assign_job = json_string_value(json_object_get(json_object_get(snap->assigns, w->m.id), "job"));
  }
  size_t prefix = strlen(KOLO_KEY_JOBS_PREFIX);
  for (size_t i = 0; i < jobs.count; i++) {
    const char *rest = (const char *)jobs.kvs[i].key + prefix;
    const char *slash = strchr(rest, '/');
    if (slash == NULL) continue;
    job *j = job_for(snap, rest, (size_t)(slash - rest));
    if (j == NULL) continue;
    const char *part = slash + 1;
    const char *text = (const char *)jobs.kvs[i].value;
    size_t length = jobs.kvs[i].value_len;
    if (strncmp(part, "events/", 7) == 0) {
      uint64_t seq = strtoull(part + 7, NULL, 10);
      if (seq > j->max_seq) j->max_seq = seq;
    } else if (strcmp(part, "spec") == 0) {
      j->spec = json_loadb(text, length, 0, NULL);
    } else if (strcmp(part, "status") == 0) {
      j->status = json_loadb(text, length, 0, NULL);
      j->status_mod = jobs.kvs[i].mod_revision;
      j->created = int_of(j->status, "created_unix_ms");
    } else if (strncmp(part, "ring/", 5) == 0) {
      json_t *ring = json_loadb(text, length, 0, NULL);
      char name[32];
      snprintf(name, sizeof name, "%" PRId64, int_of(ring, "epoch"));
      if (ring) json_object_set_new(j->rings, name, ring);
    } else if (strncmp(part, "reports/", 8) == 0) {
      json_t *report = json_loadb(text, length, 0, NULL);
      if (report) json_object_set_new(j->reports, part + 8, report);
    }
  }
  /* jobs without a readable spec and status are not ours to touch */
  size_t kept = 0;
  for (size_t i = 0; i < snap->n_jobs; i++) {
    if (json_is_object(snap->jobs[i].spec) && json_is_object(snap->jobs[i].status)) {
      snap->jobs[kept++] = snap->jobs[i];
    } else {
      json_decref(snap->jobs[i].spec);
      json_decref(snap->jobs[i].status);
      json_decref(snap->jobs[i].rings);
      json_decref(snap->jobs[i].reports);
    }
  }
  snap->n_jobs = kept;
  if (snap->n_jobs > 1) qsort(snap->jobs, snap->n_jobs, sizeof *snap->jobs, by_creation);
out:
  kolo_etcd_range_result_free(&assigns);
  kolo_etcd_range_result_free(&drains);
  kolo_etcd_range_result_free(&jobs);
  return rc;
}

static worker *find_worker(snapshot *snap, const char *id) {
  for (size_t i = 0; i < snap->n_workers; i++)
    if (strcmp(snap->workers[i].m.id, id) == 0) return &snap->workers[i];
  return NULL;
}

static int is_idle(const worker *w) {
  return !w->taken && !w->draining && w->assign_job == NULL && strcmp(w->m.state, "idle") == 0;
}

static size_t count_idle(const snapshot *snap) {
  size_t n = 0;
  for (size_t i = 0; i < snap->n_workers; i++) n += is_idle(&snap->workers[i]);
  return n;
}

/* ---- decisions ---- */

/* Ranks the chosen members with coord's planner (grouped by host, survivors in
 * their old order, rank 0 the survivor with the lowest old rank). Leaves order
 * as it is if the planner refuses. */
static void order_by_planner(snapshot *snap, const json_t *old_ring, const char **order, size_t n) {
  if (n == 0) return;
  kolo_planner_member *members = calloc(n, sizeof *members);
  size_t *ranks = calloc(n, sizeof *ranks);
  const char **reordered = calloc(n, sizeof *reordered);
  json_t *old_members = json_object_get(old_ring, "members");
  size_t n_previous = json_array_size(old_members);
  const char **previous = calloc(n_previous + 1, sizeof *previous);
  if (members && ranks && reordered && previous) {
    for (size_t i = 0; i < n; i++) {
      worker *w = find_worker(snap, order[i]);
      members[i] = (kolo_planner_member){order[i], w ? w->m.host : "?", w ? w->m.address : "?"};
    }
    for (size_t i = 0; i < n_previous; i++)
      previous[i] = json_string_value(json_object_get(json_array_get(old_members, i), "worker_id")) ?: "?";
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

/* Writes epoch (status.epoch + 1) of j with members = survivors + newcomers,
 * removing the removed workers' assignments; phase and events go with it. */
static kolo_status write_epoch(kolo_sched *s, snapshot *snap, job *j, const char *const *survivors,
                               size_t n_survivors, size_t take, const char *const *removed,
                               size_t n_removed, const char *phase, const char *event_type,
                               const char *event_message, int count_reconfiguration,
                               const json_t *lost_list) {
  const char **newcomers = calloc(take + 1, sizeof *newcomers);
  const char **order = calloc(n_survivors + take + 1, sizeof *order);
  txn *t = calloc(1, sizeof *t);
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  if (!newcomers || !order || !t) goto out;
  size_t n_new = 0;
  for (size_t i = 0; i < snap->n_workers && n_new < take; i++)
    if (is_idle(&snap->workers[i])) newcomers[n_new++] = snap->workers[i].m.id;
  size_t n = kolo_sched_plan_ring(survivors, n_survivors, newcomers, n_new, bound(j, "max_workers"), order);
  int64_t old_epoch = int_of(j->status, "epoch");
  int64_t epoch = old_epoch + 1;
  json_t *old_ring = ring_at(j, old_epoch);
  order_by_planner(snap, old_ring, order, n);
  const char *hosts[4096];
  int local_rank[4096], local_size[4096];
  if (n > 4096) n = 4096;
  for (size_t i = 0; i < n; i++) {
    worker *w = find_worker(snap, order[i]);
    hosts[i] = w ? w->m.host : "?";
  }
  kolo_sched_local_ranks(hosts, n, local_rank, local_size);
  char secret[33];
  for (int i = 0; i < 32; i++) secret[i] = "0123456789abcdef"[rand() & 15];
  secret[32] = '\0';
  json_t *ring_members = json_array(), *status_members = json_array();
  for (size_t i = 0; i < n; i++) {
    worker *w = find_worker(snap, order[i]);
    int64_t since = epoch;
    size_t k;
    json_t *old;
    json_array_foreach(json_object_get(old_ring, "members"), k, old) {
      if (strcmp(json_string_value(json_object_get(old, "worker_id")) ?: "", order[i]) == 0)
        since = int_of(old, "since_epoch") ?: old_epoch;
    }
    json_array_append_new(ring_members,
                          json_pack("{s:s, s:i, s:s, s:s, s:i, s:i, s:I}", "worker_id", order[i], "rank",
                                    (int)i, "host", w ? w->m.host : "?", "address", w ? w->m.address : "?",
                                    "local_rank", local_rank[i], "local_size", local_size[i],
                                    "since_epoch", (json_int_t)since));
    json_array_append_new(status_members, json_pack("{s:s, s:i, s:s, s:s}", "worker_id", order[i], "rank",
                                                    (int)i, "host", w ? w->m.host : "?", "address",
                                                    w ? w->m.address : "?"));
  }
  json_t *lost = json_deep_copy(json_object_get(old_ring, "lost"));
  if (!json_is_array(lost)) {
    json_decref(lost);
    lost = json_array();
  }
  if (lost_list) json_array_extend(lost, (json_t *)lost_list);
  int64_t timeout_ms = int_of(j->spec, "collective_timeout_ms");
  json_t *ring = json_pack("{s:s, s:I, s:I, s:s, s:o, s:o}", "job", j->id, "epoch", (json_int_t)epoch,
                           "timeout_ms", (json_int_t)(timeout_ms > 0 ? timeout_ms : 30000), "secret", secret,
                           "members", ring_members, "lost", lost);
  char ring_key[512];
  kolo_keys_ring(j->id, epoch, ring_key, sizeof ring_key);
  json_t *status = begin_job_write(t, j);
  json_object_set_new(status, "phase", json_string(phase));
  json_object_set_new(status, "epoch", json_integer(epoch));
  json_object_set_new(status, "members", status_members);
  if (int_of(status, "started_unix_ms") == 0) json_object_set_new(status, "started_unix_ms", json_integer(wall_ms()));
  if (count_reconfiguration)
    json_object_set_new(status, "reconfigurations", json_integer(int_of(status, "reconfigurations") + 1));
  add_event(t, j, event_type, epoch, event_message);
  if (strcmp(event_type, "SCHEDULED") != 0 || n > 0) {
    char *members_text = NULL;
    size_t length = 0;
    FILE *out = open_memstream(&members_text, &length);
    for (size_t i = 0; out && i < n; i++) fprintf(out, "%s%s", i ? ", " : "", order[i]);
    if (out) fclose(out);
    char *message = fmt("epoch %" PRId64 ": %zu workers (%s), rank 0 is %s", epoch, n,
                        members_text ? members_text : "", n ? order[0] : "-");
    add_event(t, j, "RING_PLANNED", epoch, message ? message : "");
    free(message);
    free(members_text);
  }
  finish_job_write(t, j, status);
  txn_put(t, strdup(ring_key), json_dumps(ring, JSON_COMPACT));
  for (size_t i = 0; i < n; i++) {
    char key[512];
    kolo_keys_assign(order[i], key, sizeof key);
    worker *w = find_worker(snap, order[i]);
    /* a newcomer must still be free when this lands */
    if (w && w->assign_job == NULL) txn_cmp(t, KOLO_ETCD_CMP_CREATE, strdup(key), 0);
    json_t *assignment = json_pack("{s:s, s:I, s:s, s:i}", "job", j->id, "epoch", (json_int_t)epoch, "ring",
                                   ring_key, "rank", (int)i);
    txn_put(t, strdup(key), json_dumps(assignment, JSON_COMPACT));
    json_decref(assignment);
  }
  for (size_t i = 0; i < n_removed; i++) {
    char key[512];
    if (kolo_keys_assign(removed[i], key, sizeof key) == KOLO_OK) txn_del(t, strdup(key));
  }
  json_decref(ring);
  rc = txn_commit(s, t);
  if (rc == KOLO_OK) {
    for (size_t i = 0; i < n_new; i++) find_worker(snap, newcomers[i])->taken = 1;
  }
out:
  free(newcomers);
  free(order);
  if (t) txn_free(t);
  return rc;
}

/* The Progress fields of a process's report (JobStatus.progress takes no
 * others); kolo-train's names are accepted as well. A new object. */
static json_t *progress_fields(const json_t *report) {
  static const char *const names[][2] = {{"step", "steps"}, {"total_steps", NULL}, {"loss", NULL},
                                         {"samples_per_sec", "samples_per_sec_total"},
                                         {"accuracy", "train_accuracy"}};
  json_t *clean = json_object();
  for (size_t i = 0; i < 5; i++) {
    json_t *value = json_object_get(report, names[i][0]);
    if (!json_is_number(value) && names[i][1]) value = json_object_get(report, names[i][1]);
    if (json_is_number(value)) json_object_set(clean, names[i][0], value);
  }
  return clean;
}

/* Ends j in phase (SUCCEEDED/FAILED) and takes every member's assignment away. */
static kolo_status end_job(kolo_sched *s, snapshot *snap, job *j, const char *phase, const char *type,
                           const char *message) {
  txn *t = calloc(1, sizeof *t);
  if (t == NULL) return KOLO_ERR_NO_MEMORY;
  json_t *status = begin_job_write(t, j);
  json_object_set_new(status, "phase", json_string(phase));
  json_object_set_new(status, "finished_unix_ms", json_integer(wall_ms()));
  if (strcmp(phase, "FAILED") == 0) json_object_set_new(status, "error", json_string(message));
  /* the last progress rank 0 reported (the periodic copy is throttled) */
  const char *rank0 = json_string_value(json_object_get(json_array_get(json_object_get(j->status, "members"), 0), "worker_id"));
  json_t *progress = rank0 ? json_object_get(json_object_get(j->reports, rank0), "progress") : NULL;
  if (json_is_object(progress)) {
    json_t *merged = json_deep_copy(json_object_get(status, "progress"));
    if (!json_is_object(merged)) {
      json_decref(merged);
      merged = json_object();
    }
    json_t *clean = progress_fields(progress);
    json_object_update(merged, clean);
    json_decref(clean);
    json_object_set_new(status, "progress", merged);
  }
  add_event(t, j, type, int_of(j->status, "epoch"), message);
  finish_job_write(t, j, status);
  for (size_t i = 0; i < snap->n_workers; i++) {
    worker *w = &snap->workers[i];
    if (w->assign_job && strcmp(w->assign_job, j->id) == 0) {
      char key[512];
      if (kolo_keys_assign(w->m.id, key, sizeof key) == KOLO_OK) txn_del(t, strdup(key));
    }
  }
  kolo_status rc = txn_commit(s, t);
  txn_free(t);
  return rc;
}

/* A plain status change with one event (phase, no ring change). */
static kolo_status set_phase(kolo_sched *s, job *j, const char *phase, json_t *members, const char *type,
                             const char *message, const char *const *removed, size_t n_removed,
                             int count_reconfiguration) {
  txn *t = calloc(1, sizeof *t);
  if (t == NULL) return KOLO_ERR_NO_MEMORY;
  json_t *status = begin_job_write(t, j);
  json_object_set_new(status, "phase", json_string(phase));
  if (members) json_object_set(status, "members", members);
  if (count_reconfiguration)
    json_object_set_new(status, "reconfigurations", json_integer(int_of(status, "reconfigurations") + 1));
  if (type) add_event(t, j, type, int_of(j->status, "epoch"), message);
  finish_job_write(t, j, status);
  for (size_t i = 0; i < n_removed; i++) {
    char key[512];
    if (kolo_keys_assign(removed[i], key, sizeof key) == KOLO_OK) txn_del(t, strdup(key));
  }
  kolo_status rc = txn_commit(s, t);
  txn_free(t);
  return rc;
}

static void maybe_progress(kolo_sched *s, job *j, const char *rank0) {
  json_t *progress = json_object_get(json_object_get(j->reports, rank0), "progress");
  if (!json_is_object(progress)) return;
  if (wall_ms() - int_of(j->status, "updated_unix_ms") < PROGRESS_EVERY_MS) return;
  json_t *clean = progress_fields(progress);
  json_t *current = json_object_get(j->status, "progress");
  int same = 1;
  const char *key;
  json_t *value;
  json_object_foreach(clean, key, value) {
    if (!json_equal(value, json_object_get(current, key))) same = 0;
  }
  if (!same) {
    txn *t = calloc(1, sizeof *t);
    if (t) {
      json_t *status = begin_job_write(t, j);
      json_t *merged = json_is_object(current) ? json_deep_copy(current) : json_object();
      json_object_update(merged, clean);
      json_object_set_new(status, "progress", merged);
      finish_job_write(t, j, status);
      txn_commit(s, t);
      txn_free(t);
    }
  }
  json_decref(clean);
}

typedef struct loss {
  const char *ids[4096];
  const char *why[4096];
  char text[4096][96];
  size_t n;
} loss;

static void mark_lost(loss *l, const char *id, const char *why) {
  for (size_t i = 0; i < l->n; i++)
    if (strcmp(l->ids[i], id) == 0) return;
  if (l->n == 4096) return;
  snprintf(l->text[l->n], sizeof l->text[l->n], "%s", why);
  l->ids[l->n] = id;
  l->why[l->n] = l->text[l->n];
  l->n++;
}

static int is_lost(const loss *l, const char *id) {
  for (size_t i = 0; i < l->n; i++)
    if (strcmp(l->ids[i], id) == 0) return 1;
  return 0;
}

/* One running (or re-forming) job; returns 1 if it wrote something. */
static int handle_active(kolo_sched *s, snapshot *snap, job *j) {
  json_t *members = json_object_get(j->status, "members");
  int64_t epoch = int_of(j->status, "epoch");
  json_t *ring = ring_at(j, epoch);
  size_t n = json_array_size(members);
  const char *ids[4096];
  if (n > 4096) n = 4096;
  for (size_t i = 0; i < n; i++)
    ids[i] = json_string_value(json_object_get(json_array_get(members, i), "worker_id")) ?: "";
  const char *phase = phase_of(j);
  int64_t now = wall_ms();

  /* finished: rank 0 exited 0 (the others follow; give them a grace) */
  if (n > 0) {
    json_t *r0 = json_object_get(j->reports, ids[0]);
    if (json_is_true(json_object_get(r0, "exited")) && int_of(r0, "exit_code") == 0) {
      size_t exited = 0;
      for (size_t i = 0; i < n; i++)
        exited += json_is_true(json_object_get(json_object_get(j->reports, ids[i]), "exited"));
      if (exited == n || now - int_of(r0, "time_unix_ms") > FINISH_GRACE_MS) {
        char message[160];
        snprintf(message, sizeof message, "rank 0 (%s) exited 0 at epoch %" PRId64 "; %zu of %zu processes exited",
                 ids[0], epoch, exited, n);
        end_job(s, snap, j, "SUCCEEDED", "FINISHED", message);
        return 1;
      }
      return 0;
    }
  }

  /* lost members */
  loss *l = calloc(1, sizeof *l);
  if (l == NULL) return 0;
  int wrote = 0;
  for (size_t i = 0; i < n; i++) {
    worker *w = find_worker(snap, ids[i]);
    if (w == NULL) {
      mark_lost(l, ids[i], "its lease expired");
      continue;
    }
    if (w->draining) mark_lost(l, ids[i], "it is draining");
    json_t *report = json_object_get(j->reports, ids[i]);
    int64_t since = 0;
    size_t k;
    json_t *member;
    json_array_foreach(json_object_get(ring, "members"), k, member) {
      if (strcmp(json_string_value(json_object_get(member, "worker_id")) ?: "", ids[i]) == 0)
        since = int_of(member, "since_epoch");
    }
    if (json_is_true(json_object_get(report, "exited")) && int_of(report, "exit_code") != 0 &&
        int_of(report, "exit_epoch") >= since) {
      char why[96];
      snprintf(why, sizeof why, "its process exited with code %d", (int)int_of(report, "exit_code"));
      mark_lost(l, ids[i], why);
    }
  }
  /* FAILED reports: a reporter is alive; the rank it names (if not a reporter) is dead */
  if (ring != NULL && json_array_size(json_object_get(ring, "members")) == n) {
    int reporters = 0, oldest_ms = 0;
    int64_t oldest = now;
    int named[4096] = {0};
    int reported[4096] = {0};
    for (size_t i = 0; i < n; i++) {
      json_t *report = json_object_get(j->reports, ids[i]);
      if (int_of(report, "failed_epoch") != epoch) continue;
      reported[i] = 1;
      reporters++;
      int64_t rank = int_of(report, "failed_rank");
      if (rank >= 0 && (size_t)rank < n) named[rank] = 1;
      int64_t at = int_of(report, "time_unix_ms");
      if (at < oldest) oldest = at;
    }
    oldest_ms = (int)(now - oldest);
    int suspects = 0, silent = 0;
    for (size_t i = 0; i < n; i++) {
      if (named[i] && !reported[i]) suspects++;
      else if (!reported[i] && !is_lost(l, ids[i])) silent++;
    }
    /* act when every other member has spoken, or after a short settle time */
    if (reporters > 0 && suspects > 0) {
      if (silent == 0 || oldest_ms >= FAILED_SETTLE_MS) {
        for (size_t i = 0; i < n; i++) {
          if (named[i] && !reported[i]) {
            char why[96];
            snprintf(why, sizeof why, "its ring neighbours lost it at epoch %" PRId64, epoch);
            mark_lost(l, ids[i], why);
          }
        }
      } /* else: the next pass (at most one tick away) looks again */
    }
  }

  uint32_t min = bound(j, "min_workers"), max = bound(j, "max_workers");
  if (l->n > 0) {
    size_t k;
    const char *survivors[4096];
    size_t n_survivors = 0;
    for (size_t i = 0; i < n; i++)
      if (!is_lost(l, ids[i])) survivors[n_survivors++] = ids[i];
    json_t *lost_list = json_array();
    char names[2048] = "";
    size_t used = 0;
    for (size_t i = 0; i < l->n; i++) {
      json_array_append_new(lost_list, json_pack("{s:s, s:s}", "worker_id", l->ids[i], "why", l->why[i]));
      used += (size_t)snprintf(names + used, used < sizeof names ? sizeof names - used : 0, "%s%s (%s)",
                               i ? ", " : "", l->ids[i], l->why[i]);
      if (used >= sizeof names) used = sizeof names - 1;
    }
    size_t take = 0;
    uint32_t done = (uint32_t)int_of(j->status, "reconfigurations");
    uint32_t limit = (uint32_t)int_of(j->spec, "max_reconfigurations");
    kolo_sched_loss_action action =
        kolo_sched_on_loss(n_survivors, count_idle(snap), min, max, done, limit, &take);
    char message[4200];
    if (action == KOLO_SCHED_FAIL) {
      /* name every worker lost since the job started: the earlier ones are in the ring */
      char earlier[1024] = "";
      size_t at = 0;
      json_t *gone;
      json_array_foreach(json_object_get(ring, "lost"), k, gone) {
        at += (size_t)snprintf(earlier + at, at < sizeof earlier ? sizeof earlier - at : 0, "%s%s",
                               at ? ", " : "", json_string_value(json_object_get(gone, "worker_id")) ?: "?");
        if (at >= sizeof earlier) at = sizeof earlier - 1;
      }
      snprintf(message, sizeof message, "exceeded max_reconfigurations (%u): lost workers %s%s%s",
               limit ? limit : KOLO_SCHED_DEFAULT_MAX_RECONFIGURATIONS, names, at ? "; earlier: " : "",
               earlier);
      wrote = end_job(s, snap, j, "FAILED", "FAILED", message) == KOLO_OK;
    } else if (action == KOLO_SCHED_REFORM) {
      snprintf(message, sizeof message, "lost %s; re-forming with %zu survivors and %zu new workers", names,
               n_survivors, take);
      wrote = write_epoch(s, snap, j, survivors, n_survivors, take, l->ids, l->n, "RECONFIGURING",
                          "WORKER_LOST", message, 1, lost_list) == KOLO_OK;
    } else {
      snprintf(message, sizeof message, "lost %s; %zu workers left, below min_workers %u: waiting for workers",
               names, n_survivors, min);
      json_t *kept = json_array();
      for (size_t i = 0; i < n; i++)
        if (!is_lost(l, ids[i])) json_array_append(kept, json_array_get(members, i));
      wrote = set_phase(s, j, "RECONFIGURING", kept, "WORKER_LOST", message, l->ids, l->n, 1) == KOLO_OK;
      json_decref(kept);
    }
    json_decref(lost_list);
    free(l);
    return wrote;
  }
  free(l);

  size_t ring_size = json_array_size(json_object_get(ring, "members"));
  size_t idle = count_idle(snap);
  if (n != ring_size) {
    /* waiting below min_workers (members hold the survivors of the last ring) */
    size_t take = 0;
    if (kolo_sched_on_loss(n, idle, min, max, 0, 0, &take) == KOLO_SCHED_REFORM) {
      char message[160];
      snprintf(message, sizeof message, "workers available again: resuming with %zu survivors and %zu new workers",
               n, take);
      wrote = write_epoch(s, snap, j, ids, n, take, NULL, 0, "RECONFIGURING", "RESUMING", message, 0, NULL) ==
              KOLO_OK;
    }
    return wrote;
  }
  if (strcmp(phase, "RECONFIGURING") == 0) {
    size_t formed = 0;
    for (size_t i = 0; i < n; i++)
      formed += int_of(json_object_get(j->reports, ids[i]), "formed_epoch") >= epoch;
    if (formed == n && n > 0) {
      char message[128];
      snprintf(message, sizeof message, "every member formed epoch %" PRId64 " (%zu workers)", epoch, n);
      return set_phase(s, j, "RUNNING", NULL, "RING_FORMED", message, NULL, 0, 0) == KOLO_OK;
    }
    return 0;
  }
  /* RUNNING: shrink to a lowered max, grow with idle workers below max; but
   * never move a ring that has not formed yet (its processes would fail to
   * form the old epoch while their peers already moved on) */
  size_t formed = 0;
  for (size_t i = 0; i < n; i++) formed += int_of(json_object_get(j->reports, ids[i]), "formed_epoch") >= epoch;
  if (formed < n) return 0;
  if (n > max) {
    const char *removed[4096];
    size_t n_removed = 0;
    for (size_t i = max; i < n; i++) removed[n_removed++] = ids[i];
    char message[128];
    snprintf(message, sizeof message, "max_workers is %u: leaving %zu workers", max, n_removed);
    return write_epoch(s, snap, j, ids, max, 0, removed, n_removed, "RECONFIGURING", "SHRINKING", message, 0,
                       NULL) == KOLO_OK;
  }
  if (n < max && idle > 0) {
    size_t take = idle < max - n ? idle : max - n;
    char message[128];
    snprintf(message, sizeof message, "%zu idle workers join (below max_workers %u)", take, max);
    return write_epoch(s, snap, j, ids, n, take, NULL, 0, "RECONFIGURING", "WORKER_JOINED", message, 0, NULL) ==
           KOLO_OK;
  }
  if (n > 0) maybe_progress(s, j, ids[0]);
  return 0;
}

/* Removes assignments that point at no active membership (ended or unknown job). */
static void sweep(kolo_sched *s, snapshot *snap) {
  const char *worker_id;
  json_t *assignment;
  json_object_foreach(snap->assigns, worker_id, assignment) {
    const char *job_id = json_string_value(json_object_get(assignment, "job")) ?: "";
    int valid = 0;
    for (size_t i = 0; i < snap->n_jobs && !valid; i++) {
      job *j = &snap->jobs[i];
      if (strcmp(j->id, job_id) != 0) continue;
      const char *phase = phase_of(j);
      if (strcmp(phase, "RUNNING") != 0 && strcmp(phase, "RECONFIGURING") != 0) break;
      size_t k;
      json_t *member;
      json_array_foreach(json_object_get(j->status, "members"), k, member) {
        if (strcmp(json_string_value(json_object_get(member, "worker_id")) ?: "", worker_id) == 0) valid = 1;
      }
    }
    if (valid) continue;
    txn *t = calloc(1, sizeof *t);
    if (t == NULL) return;
    char key[512];
    if (kolo_keys_assign(worker_id, key, sizeof key) == KOLO_OK) {
      txn_del(t, strdup(key));
      if (txn_commit(s, t) == KOLO_OK) KOLO_LOGI(LOG, "took stale assignment of %s (job %s) away", worker_id, job_id);
    }
    txn_free(t);
  }
}

/* One pass over the whole cluster. */
static void pass(kolo_sched *s) {
  snapshot snap;
  if (load(s, &snap) != KOLO_OK) {
    KOLO_LOGW(LOG, "cannot read the cluster: %s", kolo_etcd_last_error());
    snapshot_free(&snap);
    return;
  }
  int wrote = 0, blocked = 0;
  for (size_t i = 0; i < snap.n_jobs; i++) {
    job *j = &snap.jobs[i];
    const char *phase = phase_of(j);
    if (strcmp(phase, "PENDING") == 0) {
      if (blocked) continue; /* FIFO: nobody overtakes the oldest pending job */
      size_t take = kolo_sched_gang_take(count_idle(&snap), bound(j, "min_workers"), bound(j, "max_workers"));
      if (take == 0) {
        blocked = 1;
        continue;
      }
      char message[128];
      snprintf(message, sizeof message, "gang of %zu workers (min %u, max %u)", take, bound(j, "min_workers"),
               bound(j, "max_workers"));
      wrote |= write_epoch(s, &snap, j, NULL, 0, take, NULL, 0, "RUNNING", "SCHEDULED", message, 0, NULL) == KOLO_OK;
    } else if (strcmp(phase, "RUNNING") == 0 || strcmp(phase, "RECONFIGURING") == 0) {
      wrote |= handle_active(s, &snap, j);
    }
  }
  if (!wrote) sweep(s, &snap);
  snapshot_free(&snap);
}

/* ---- the thread ---- */

static void on_change(const kolo_etcd_watch_update *update, void *user) {
  kolo_sched *s = user;
  (void)update;
  pthread_mutex_lock(&s->lock);
  s->changed = 1;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->lock);
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
    if (leader != was_leader) KOLO_LOGI(LOG, leader ? "leading: scheduling starts" : "not leading: scheduling stops");
    was_leader = leader;
    if (leader) pass(s);
    usleep(20 * 1000); /* let a burst of changes arrive as one pass */
  }
  return NULL;
}

kolo_status kolo_sched_start(const kolo_sched_config *config, kolo_sched **out) {
  if (config == NULL || config->endpoints == NULL || config->fence == NULL || out == NULL)
    return KOLO_ERR_INVALID_ARG;
  kolo_sched *s = calloc(1, sizeof *s);
  if (s == NULL) return KOLO_ERR_NO_MEMORY;
  s->config = *config;
  if (s->config.tick_ms <= 0) s->config.tick_ms = 500;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  snprintf(s->endpoint_text, sizeof s->endpoint_text, "%s", config->endpoints);
  const char *endpoints[16];
  size_t n = 0;
  char *save = NULL;
  for (char *e = strtok_r(s->endpoint_text, ",", &save); e && n < 16; e = strtok_r(NULL, ",", &save))
    endpoints[n++] = e;
  kolo_etcd_config etcd_config = {.endpoints = endpoints, .endpoint_count = n};
  kolo_status rc = kolo_etcd_create(&etcd_config, &s->etcd);
  if (rc != KOLO_OK) goto fail;
  kolo_etcd_watch_opts watch = {.key = kolo_etcd_str(KOLO_KEY_ROOT), .prefix = 1};
  rc = kolo_etcd_watch_start(s->etcd, &watch, on_change, s, &s->watch);
  if (rc != KOLO_OK) goto fail;
  srand((unsigned)(wall_ms() ^ getpid()));
  if (pthread_create(&s->thread, NULL, run, s) != 0) {
    rc = KOLO_ERR_SYSTEM;
    goto fail;
  }
  *out = s;
  return KOLO_OK;
fail:
  kolo_etcd_watch_stop(s->watch);
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
  kolo_etcd_watch_stop(s->watch);
  kolo_etcd_destroy(s->etcd);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
}
