/* ClusterService's side of the store: workers registered under /kolo/v1/workers/ (written
 * by kolo-worker), drain marks under /kolo/v1/drain/ (each written under the lease of the
 * registration it drains, coordination/drain.h) and assignments under /kolo/v1/assign/
 * (the scheduler's). All read from the store's watch-fed records, decoded by their owners
 * (coordination/membership.h, drain.h, assignment.h): no etcd range per call. A drain or
 * undrain writes through the kv, then waits for the view to apply its own write before it
 * answers from the view (read-your-writes), or answers UNAVAILABLE past the catch-up time. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checks.h"
#include "common/log.h"
#include "coordination/assignment.h"
#include "coordination/drain.h"
#include "coordination/etcd.h"
#include "coordination/keys.h"
#include "coordination/membership.h"
#include "server/job_model.h"
#include "codec/codec.h"
#include "server/store.h"

#define LOG "store"
#define KOLO_CHECK_GOTO_RC(call) KOLO_CHECK_GOTO(call, rc, out)

/* Worker.state as cluster.proto names it (IDLE, BUSY, DRAINING): kolo-worker's record
 * says "idle"/"busy"/"draining"; any other word is passed on upper-cased. */
static const char *state_name(const char *state) {
  static __thread char upper[32];
  if (state == NULL || state[0] == '\0') return "IDLE";
  size_t i = 0;
  for (; state[i] && i < sizeof upper - 1; i++)
    upper[i] = (char)(state[i] >= 'a' && state[i] <= 'z' ? state[i] - 'a' + 'A' : state[i]);
  upper[i] = '\0';
  return upper;
}

/* A worker registration as ListWorkers shows it, from its decoded record (NULL when out of
 * memory). */
static Kolo__V1__Worker *worker_from_member(const kolo_worker_entry *e) {
  const Kolo__V1__WorkerRecord *m = e->record;
  Kolo__V1__Worker *w = malloc(sizeof *w);
  if (w == NULL) return NULL;
  kolo__v1__worker__init(w);
  kolo_codec_set_string(&w->id, m->id);
  kolo_codec_set_string(&w->host, m->host);
  kolo_codec_set_string(&w->address, m->address);
  kolo_codec_set_string(&w->state, state_name(m->state));
  kolo_codec_set_string(&w->job_id, ""); /* from its assignment */
  w->slots = (uint32_t)m->cpus;          /* one slot per CPU */
  w->gpus = (uint32_t)m->gpus;
  w->registered_unix_ms = m->registered_unix_ms;
  w->labels = m->n_labels ? calloc(m->n_labels, sizeof *w->labels) : NULL;
  for (size_t i = 0; w->labels && i < m->n_labels; i++) {
    Kolo__V1__Worker__LabelsEntry *entry = malloc(sizeof *entry);
    if (entry == NULL) continue;
    kolo__v1__worker__labels_entry__init(entry);
    kolo_codec_set_string(&entry->key, m->labels[i]->key);
    kolo_codec_set_string(&entry->value, m->labels[i]->value);
    w->labels[w->n_labels++] = entry;
  }
  return w;
}

/* The record under exactly key in a prefix read (a prefix also finds w10 for w1), or NULL. */
static const kolo_etcd_kv *record_at(const kolo_etcd_range_result *set, const char *key) {
  for (size_t i = 0; i < set->count; i++)
    if (strcmp((const char *)set->kvs[i].key, key) == 0) return &set->kvs[i];
  return NULL;
}

/* The job a worker is assigned to, from /kolo/v1/assign/<id> (coordination/assignment.h);
 * "" if none or if it does not decode. */
static void set_job_from_assignment(Kolo__V1__Worker *w, const kolo_etcd_range_result *assigns) {
  char key[200];
  if (kolo_keys_assign(w->id, key, sizeof key) != KOLO_OK) return;
  const kolo_etcd_kv *kv = record_at(assigns, key);
  if (kv == NULL) return;
  Kolo__V1__Assignment *assignment = NULL;
  char err[256];
  if (kolo_assignment_read((const char *)kv->value, kv->value_len, &assignment, err, sizeof err) ==
      KOLO_OK) {
    kolo_codec_set_string(&w->job_id, assignment->job);
    protobuf_c_message_free_unpacked(&assignment->base, NULL);
  } else {
    KOLO_LOGW(LOG, "assignment of worker %s does not decode: %s", w->id, err);
  }
}

/* Whether the drain mark of worker m applies to its registration (its lease). */
static int drained(const kolo_worker_entry *m, const kolo_etcd_range_result *drains) {
  char key[200];
  if (kolo_keys_drain(m->record->id, key, sizeof key) != KOLO_OK) return 0;
  const kolo_etcd_kv *kv = record_at(drains, key);
  return kv && kolo_drain_mark_applies((const char *)kv->value, kv->value_len, m->lease);
}

/* The view's workers, drain marks and assignments, all from one state of it. */
typedef struct cluster_records {
  kolo_etcd_range_result workers, drains, assigns;
  int64_t revision; /* the view is at least at this revision */
} cluster_records;

static const char *const cluster_prefixes[3] = {KOLO_KEY_WORKERS_PREFIX, KOLO_KEY_DRAIN_PREFIX,
                                                KOLO_KEY_ASSIGN_PREFIX};

static void cluster_records_free(cluster_records *r) {
  kolo_etcd_range_result_free(&r->workers);
  kolo_etcd_range_result_free(&r->drains);
  kolo_etcd_range_result_free(&r->assigns);
}

/* The records once the view has applied min_revision (0: as it is); KOLO_ERR_TIMEOUT if it
 * has not within the store's catch-up time. */
static kolo_status read_cluster(kolo_server_store *s, int64_t min_revision, cluster_records *out) {
  kolo_etcd_range_result sets[3];
  kolo_status rc =
      kolo_server_store_read_records(s, cluster_prefixes, 3, min_revision,
                                     kolo_server_store_catch_up_ms(s), sets, &out->revision, NULL);
  out->workers = sets[0];
  out->drains = sets[1];
  out->assigns = sets[2];
  return rc;
}

/* ListWorkers' answer from the records (records that do not decode are left out, logged). */
static kolo_status list_from(const cluster_records *r, Kolo__V1__ListWorkersResponse **out) {
  kolo_worker_entry *members = NULL;
  size_t n = 0;
  KOLO_CHECK(kolo_members_from_kvs(r->workers.kvs, r->workers.count, &members, &n));
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  Kolo__V1__ListWorkersResponse *resp = malloc(sizeof *resp);
  if (resp == NULL) goto out;
  kolo__v1__list_workers_response__init(resp);
  resp->workers = calloc(n + 1, sizeof *resp->workers);
  if (resp->workers == NULL) {
    free(resp);
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    Kolo__V1__Worker *w = worker_from_member(&members[i]);
    if (w == NULL) continue;
    w->draining = drained(&members[i], &r->drains);
    if (w->draining) kolo_codec_set_string(&w->state, "DRAINING");
    set_job_from_assignment(w, &r->assigns);
    resp->workers[resp->n_workers++] = w;
  }
  *out = resp;
  rc = KOLO_OK;
out:
  kolo_worker_entries_free(members, n);
  return rc;
}

kolo_status kolo_server_store_list_workers(kolo_server_store *s,
                                           Kolo__V1__ListWorkersResponse **out) {
  cluster_records r;
  KOLO_CHECK(read_cluster(s, 0, &r));
  kolo_status rc = list_from(&r, out);
  cluster_records_free(&r);
  return rc;
}

/* A copy of worker id from the records; KOLO_ERR_NOT_FOUND if it is not registered there. */
static kolo_status worker_from(const cluster_records *r, const char *id, Kolo__V1__Worker **out) {
  Kolo__V1__ListWorkersResponse *all = NULL;
  KOLO_CHECK(list_from(r, &all));
  kolo_status rc = KOLO_ERR_NOT_FOUND;
  for (size_t i = 0; i < all->n_workers && rc == KOLO_ERR_NOT_FOUND; i++) {
    if (strcmp(all->workers[i]->id, id) != 0) continue;
    *out = (Kolo__V1__Worker *)kolo_codec_copy(&all->workers[i]->base);
    rc = *out ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  }
  protobuf_c_message_free_unpacked(&all->base, NULL);
  return rc;
}

/* Whether key is absent from etcd itself (a compare-only txn: no range). KOLO_OK = absent;
 * KOLO_ERR_CONFLICT = present, *head = etcd's revision then (0 if the kv does not say). */
static kolo_status absent_in_kv(kolo_server_kv *kv, const char *key, int64_t *head) {
  kolo_server_kv_compare absent = {key, KOLO_SERVER_KV_CREATE, 0};
  *head = 0;
  return kv->ops->txn(kv, &absent, 1, NULL, 0, head);
}

static kolo_status view_lags(kolo_server_store *s, const char *what, const char *id,
                             int64_t revision, char *err, size_t err_len) {
  snprintf(err, err_len,
           "%s worker %.128s, but this server's view of etcd has not reached revision %" PRId64
           " within %d ms; ListWorkers shows it once it has",
           what, id, revision, kolo_server_store_catch_up_ms(s));
  return KOLO_ERR_UNAVAILABLE;
}

/* The records with worker id's registration in them, once the view has applied written
 * (the caller's own write: KOLO_ERR_UNAVAILABLE, err set, if it does not in time; 0 = none).
 * A registration missing from the view is looked for in etcd: absent there too =
 * KOLO_ERR_NOT_FOUND; present = the view lags: read again once it reaches etcd's revision
 * then (a hint: etcd's revision may be a key the view never sees), else UNAVAILABLE. */
static kolo_status read_with_worker(kolo_server_store *s, const char *id, const char *what,
                                    int64_t written, cluster_records *r, char *err,
                                    size_t err_len) {
  char key[200];
  if (kolo_keys_worker(id, key, sizeof key) != KOLO_OK) return KOLO_ERR_INVALID_ARG;
  kolo_status rc = read_cluster(s, written, r);
  if (rc == KOLO_ERR_TIMEOUT) return view_lags(s, what, id, written, err, err_len);
  KOLO_CHECK(rc);
  if (record_at(&r->workers, key)) return KOLO_OK;
  cluster_records_free(r);
  int64_t head = 0;
  rc = absent_in_kv(kolo_server_store_kv(s), key, &head);
  if (rc != KOLO_ERR_CONFLICT) return rc == KOLO_OK ? KOLO_ERR_NOT_FOUND : rc;
  rc = read_cluster(s, head, r);
  if (rc == KOLO_ERR_TIMEOUT) rc = read_cluster(s, 0, r);
  KOLO_CHECK(rc);
  if (record_at(&r->workers, key)) return KOLO_OK;
  cluster_records_free(r);
  return view_lags(s, what, id, head, err, err_len);
}

/* Worker id as ListWorkers shows it once the view has applied written (0 = as it is). */
static kolo_status answer(kolo_server_store *s, const char *id, const char *what, int64_t written,
                          Kolo__V1__Worker **out, char *err, size_t err_len) {
  cluster_records r;
  KOLO_CHECK(read_with_worker(s, id, what, written, &r, err, err_len));
  kolo_status rc = worker_from(&r, id, out);
  cluster_records_free(&r);
  return rc;
}

kolo_status kolo_server_store_drain_worker(kolo_server_store *s, const char *id,
                                           Kolo__V1__Worker **out, char *err, size_t err_len) {
  kolo_server_kv *kv = kolo_server_store_kv(s);
  char worker_key[200], drain_key[200];
  if (kolo_keys_worker(id, worker_key, sizeof worker_key) != KOLO_OK ||
      kolo_keys_drain(id, drain_key, sizeof drain_key) != KOLO_OK)
    return KOLO_ERR_INVALID_ARG;
  /* the mark goes under the registration's lease, in a txn that the registration is still
   * the one the view shows: a worker that registered again meanwhile is read again, once
   * the view has reached etcd's revision of the conflict */
  kolo_status rc = KOLO_ERR_CONFLICT;
  int64_t written = 0;
  for (int attempt = 0; attempt < 3 && rc == KOLO_ERR_CONFLICT; attempt++) {
    cluster_records r;
    KOLO_CHECK(read_with_worker(s, id, "drain", 0, &r, err, err_len));
    const kolo_etcd_kv *reg = record_at(&r.workers, worker_key);
    int64_t created = reg->create_revision, lease = reg->lease;
    cluster_records_free(&r);
    char *mark = kolo_drain_mark_json(lease, kolo_server_now_ms());
    if (mark == NULL) return KOLO_ERR_NO_MEMORY;
    kolo_server_kv_compare same = {worker_key, KOLO_SERVER_KV_CREATE, created};
    kolo_server_kv_put put = {drain_key, mark, lease};
    int64_t revision = 0;
    rc = kv->ops->txn(kv, &same, 1, &put, 1, &revision);
    free(mark);
    if (rc == KOLO_OK) written = revision;
    if (rc == KOLO_ERR_CONFLICT) {
      /* registered again (or gone): let the view reach etcd's revision of the conflict */
      cluster_records later;
      if (revision > 0 && read_cluster(s, revision, &later) == KOLO_OK)
        cluster_records_free(&later);
    }
  }
  if (rc == KOLO_ERR_CONFLICT) {
    snprintf(err, err_len, "worker %.128s registered again three times while being drained", id);
    return KOLO_ERR_UNAVAILABLE;
  }
  KOLO_CHECK(rc);
  KOLO_LOGI(LOG, "worker %s drained at revision %" PRId64, id, written);
  return answer(s, id, "drained", written, out, err, err_len);
}

kolo_status kolo_server_store_undrain_worker(kolo_server_store *s, const char *id,
                                             Kolo__V1__Worker **out, char *err, size_t err_len) {
  kolo_server_kv *kv = kolo_server_store_kv(s);
  char drain_key[200];
  if (kolo_keys_drain(id, drain_key, sizeof drain_key) != KOLO_OK) return KOLO_ERR_INVALID_ARG;
  /* the mark the view shows is deleted if it is still that one; none = etcd must have none
   * either (then nothing is written and there is nothing to wait for) */
  kolo_status rc = KOLO_ERR_CONFLICT;
  int64_t at = 0, written = 0;
  for (int attempt = 0; attempt < 3 && rc == KOLO_ERR_CONFLICT; attempt++) {
    cluster_records r;
    rc = read_cluster(s, at, &r);
    if (rc == KOLO_ERR_TIMEOUT) rc = read_cluster(s, 0, &r); /* at was a hint: read as is */
    KOLO_CHECK(rc);
    const kolo_etcd_kv *mark = record_at(&r.drains, drain_key);
    kolo_server_kv_compare same = {drain_key, mark ? KOLO_SERVER_KV_MOD : KOLO_SERVER_KV_CREATE,
                                   mark ? mark->mod_revision : 0};
    kolo_server_kv_put remove = {drain_key, NULL, 0};
    int64_t revision = 0;
    rc = kv->ops->txn(kv, &same, 1, &remove, mark ? 1 : 0, &revision);
    if (rc == KOLO_OK && mark) written = revision;
    if (rc == KOLO_ERR_CONFLICT) at = revision; /* etcd's revision then (0 if not told) */
    cluster_records_free(&r);
  }
  if (rc == KOLO_ERR_CONFLICT) {
    snprintf(err, err_len, "the drain mark of worker %.128s kept changing; try again", id);
    return KOLO_ERR_UNAVAILABLE;
  }
  KOLO_CHECK(rc);
  KOLO_LOGI(LOG, "worker %s undrained", id);
  return answer(s, id, "undrained", written, out, err, err_len);
}

kolo_status kolo_server_store_get_demand(kolo_server_store *s, Kolo__V1__Demand **out) {
  Kolo__V1__ListWorkersResponse *all = NULL;
  kolo_server_job_size *jobs = NULL;
  size_t n_jobs = 0;
  kolo_status rc;
  KOLO_CHECK_GOTO_RC(kolo_server_store_list_workers(s, &all));
  KOLO_CHECK_GOTO_RC(kolo_server_store_job_sizes(s, &jobs, &n_jobs));
  kolo_server_worker_counts counts;
  kolo_server_demand_count_workers(all, &counts);
  rc = KOLO_ERR_NO_MEMORY;
  Kolo__V1__Demand *demand = malloc(sizeof *demand);
  if (demand == NULL) goto out;
  kolo__v1__demand__init(demand);
  kolo_server_demand_compute(jobs, n_jobs, &counts, demand);
  demand->time_unix_ms = kolo_server_now_ms();
  *out = demand;
  rc = KOLO_OK;
out:
  if (all) protobuf_c_message_free_unpacked(&all->base, NULL);
  free(jobs);
  return rc;
}
