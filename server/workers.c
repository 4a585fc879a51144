/* ClusterService's side of the store: workers registered under /kolo/v1/workers/ (written
 * by kolo-worker, read here through the same codec, coordination/membership.h) and drain marks
 * under /kolo/v1/drain/, each written under the lease of the registration it drains
 * (coordination/drain.h). Read straight from etcd: these are rare calls, unlike job reads. */
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

/* A worker registration read through the worker record's codec (coordination/membership.h,
 * the one kolo-worker writes with); NULL (logged) for a record that does not decode or whose
 * id is not its key's, as kolo_membership_list skips them. */
static Kolo__V1__Worker *worker_from_record(const char *key, const char *text, size_t len) {
  kolo_member m;
  if (kolo_member_from_json(text, len, &m) != KOLO_OK) {
    KOLO_LOGW(LOG, "ignoring %s: %s", key, kolo_etcd_last_error());
    return NULL;
  }
  Kolo__V1__Worker *w = NULL;
  if (strcmp(m.id, key + strlen(KOLO_KEY_WORKERS_PREFIX)) != 0) {
    KOLO_LOGW(LOG, "ignoring %s: the record says id '%s'", key, m.id);
    goto out;
  }
  w = malloc(sizeof *w);
  if (w == NULL) goto out;
  kolo__v1__worker__init(w);
  kolo_codec_set_string(&w->id, m.id);
  kolo_codec_set_string(&w->host, m.host);
  kolo_codec_set_string(&w->address, m.address);
  kolo_codec_set_string(&w->state, state_name(m.state));
  kolo_codec_set_string(&w->job_id, ""); /* from its assignment */
  w->slots = (uint32_t)m.cpus;           /* one slot per CPU */
  w->gpus = (uint32_t)m.gpus;
  w->registered_unix_ms = m.registered_unix_ms;
  w->labels = m.label_count ? calloc(m.label_count, sizeof *w->labels) : NULL;
  for (size_t i = 0; w->labels && i < m.label_count; i++) {
    Kolo__V1__Worker__LabelsEntry *entry = malloc(sizeof *entry);
    if (entry == NULL) continue;
    kolo__v1__worker__labels_entry__init(entry);
    kolo_codec_set_string(&entry->key, m.labels[i].key);
    kolo_codec_set_string(&entry->value, m.labels[i].value);
    w->labels[w->n_labels++] = entry;
  }
out:
  kolo_member_clear(&m);
  return w;
}

/* The job a worker is assigned to, from /kolo/v1/assign/<id> (coordination/assignment.h);
 * "" if none or if it does not decode. */
static void set_job_from_assignments(Kolo__V1__Worker *w, const kolo_server_kv_item *assigns,
                                     size_t n_assigns) {
  for (size_t a = 0; a < n_assigns; a++) {
    if (strcmp(assigns[a].key + strlen(KOLO_KEY_ASSIGN_PREFIX), w->id) != 0) continue;
    kolo_assignment assignment;
    if (kolo_assignment_decode(assigns[a].value, assigns[a].value_len, &assignment) == KOLO_OK)
      kolo_codec_set_string(&w->job_id, assignment.job);
    else
      KOLO_LOGW(LOG, "assignment of worker %s does not decode: %s", w->id, kolo_etcd_last_error());
    kolo_assignment_clear(&assignment);
  }
}

/* The drain mark of worker id that applies to its registration holding lease, or NULL. */
static const kolo_server_kv_item *drain_mark_of(const kolo_server_kv_item *drains, size_t n,
                                                const char *id, int64_t lease) {
  for (size_t d = 0; d < n; d++)
    if (strcmp(drains[d].key + strlen(KOLO_KEY_DRAIN_PREFIX), id) == 0 &&
        kolo_drain_mark_applies(drains[d].value, drains[d].value_len, lease))
      return &drains[d];
  return NULL;
}

kolo_status kolo_server_store_list_workers(kolo_server_store *s,
                                           Kolo__V1__ListWorkersResponse **out) {
  kolo_server_kv *kv = kolo_server_store_kv(s);
  kolo_server_kv_item *items = NULL, *drains = NULL, *assigns = NULL;
  size_t n = 0, n_drains = 0, n_assigns = 0;
  int64_t revision;
  kolo_status rc;
  KOLO_CHECK(kv->ops->range(kv, KOLO_KEY_WORKERS_PREFIX, &items, &n, &revision));
  KOLO_CHECK_GOTO_RC(kv->ops->range(kv, KOLO_KEY_DRAIN_PREFIX, &drains, &n_drains, &revision));
  KOLO_CHECK_GOTO_RC(kv->ops->range(kv, KOLO_KEY_ASSIGN_PREFIX, &assigns, &n_assigns, &revision));
  rc = KOLO_ERR_NO_MEMORY;
  Kolo__V1__ListWorkersResponse *resp = malloc(sizeof *resp);
  if (resp == NULL) goto out;
  kolo__v1__list_workers_response__init(resp);
  resp->workers = calloc(n + 1, sizeof *resp->workers);
  if (resp->workers == NULL) {
    free(resp);
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    Kolo__V1__Worker *w = worker_from_record(items[i].key, items[i].value, items[i].value_len);
    if (w == NULL) continue;
    w->draining = drain_mark_of(drains, n_drains, items[i].key + strlen(KOLO_KEY_WORKERS_PREFIX),
                                items[i].lease) != NULL;
    if (w->draining) kolo_codec_set_string(&w->state, "DRAINING");
    set_job_from_assignments(w, assigns, n_assigns);
    resp->workers[resp->n_workers++] = w;
  }
  *out = resp;
  rc = KOLO_OK;
out:
  kolo_server_kv_items_free(items, n);
  kolo_server_kv_items_free(drains, n_drains);
  kolo_server_kv_items_free(assigns, n_assigns);
  return rc;
}

/* A copy of worker id as ListWorkers shows it; KOLO_ERR_NOT_FOUND if it is not registered. */
static kolo_status get_worker(kolo_server_store *s, const char *id, Kolo__V1__Worker **out) {
  Kolo__V1__ListWorkersResponse *all = NULL;
  KOLO_CHECK(kolo_server_store_list_workers(s, &all));
  kolo_status rc = KOLO_ERR_NOT_FOUND;
  for (size_t i = 0; i < all->n_workers && rc == KOLO_ERR_NOT_FOUND; i++) {
    if (strcmp(all->workers[i]->id, id) != 0) continue;
    *out = (Kolo__V1__Worker *)kolo_codec_copy(&all->workers[i]->base);
    rc = *out ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  }
  protobuf_c_message_free_unpacked(&all->base, NULL);
  return rc;
}

/* The registration of worker id: its record's create revision and lease (NOT_FOUND if none). */
static kolo_status find_registration(kolo_server_kv *kv, const char *key, int64_t *created,
                                     int64_t *lease) {
  kolo_server_kv_item *items = NULL;
  size_t n = 0;
  int64_t revision;
  KOLO_CHECK(kv->ops->range(kv, key, &items, &n, &revision));
  kolo_status rc = KOLO_ERR_NOT_FOUND;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(items[i].key, key) != 0) continue; /* a prefix range: w1 also finds w10 */
    *created = items[i].create_revision;
    *lease = items[i].lease;
    rc = KOLO_OK;
  }
  kolo_server_kv_items_free(items, n);
  return rc;
}

kolo_status kolo_server_store_drain_worker(kolo_server_store *s, const char *id,
                                           Kolo__V1__Worker **out) {
  kolo_server_kv *kv = kolo_server_store_kv(s);
  char worker_key[200], drain_key[200];
  if (kolo_keys_worker(id, worker_key, sizeof worker_key) != KOLO_OK ||
      kolo_keys_drain(id, drain_key, sizeof drain_key) != KOLO_OK)
    return KOLO_ERR_INVALID_ARG;
  kolo_status rc = KOLO_ERR_CONFLICT;
  /* the mark goes under the registration's lease, in a txn that the registration is still
   * the one read: a worker that re-registers in between is read again */
  for (int attempt = 0; attempt < 3 && rc == KOLO_ERR_CONFLICT; attempt++) {
    int64_t created = 0, lease = 0, revision;
    KOLO_CHECK(find_registration(kv, worker_key, &created, &lease));
    char *mark = kolo_drain_mark_json(lease, kolo_server_now_ms());
    if (mark == NULL) return KOLO_ERR_NO_MEMORY;
    kolo_server_kv_compare same = {worker_key, KOLO_SERVER_KV_CREATE, created};
    kolo_server_kv_put put = {drain_key, mark, lease};
    rc = kv->ops->txn(kv, &same, 1, &put, 1, &revision);
    free(mark);
  }
  if (rc == KOLO_ERR_CONFLICT)
    rc = KOLO_ERR_UNAVAILABLE; /* registered again three times meanwhile */
  KOLO_CHECK(rc);
  KOLO_LOGI(LOG, "worker %s drained", id);
  return get_worker(s, id, out);
}

kolo_status kolo_server_store_undrain_worker(kolo_server_store *s, const char *id,
                                             Kolo__V1__Worker **out) {
  kolo_server_kv *kv = kolo_server_store_kv(s);
  char drain_key[200];
  if (kolo_keys_drain(id, drain_key, sizeof drain_key) != KOLO_OK) return KOLO_ERR_INVALID_ARG;
  kolo_server_kv_put remove = {drain_key, NULL, 0};
  int64_t revision;
  KOLO_CHECK(kv->ops->txn(kv, NULL, 0, &remove, 1, &revision));
  KOLO_LOGI(LOG, "worker %s undrained", id);
  return get_worker(s, id, out);
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
