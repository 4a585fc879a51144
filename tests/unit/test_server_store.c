/* Unit tests for server/store.c over the in-memory kv (same revision rules as etcd; the
 * etcd-backed runs are in tests/integration): idempotent submit, compares on writes, the
 * watch-fed view, paging and filters, subscriptions, reload from the kv, and the raw
 * records the scheduler reads (kept, skipping the metrics history, rebuilt on a reload);
 * over a kv whose watch lags (tests/unit/lag_kv.h), a write answers once the view shows it
 * and UNAVAILABLE, saying so, when the view does not catch up in time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/job_model.h"
#include "codec/codec.h"
#include "server/store.h"
#include "tests/unit/lag_kv.h"

typedef struct fixture {
  kolo_server_kv *kv;
  kolo_server_store *store;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  assert_int_equal(kolo_server_kv_mem_create(&f->kv), KOLO_OK);
  assert_int_equal(kolo_server_store_create(f->kv, &f->store), KOLO_OK);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kolo_server_store_destroy(f->store);
  f->kv->ops->destroy(f->kv);
  free(f);
  return 0;
}

static Kolo__V1__JobSpec *spec_from(const char *text) {
  ProtobufCMessage *msg = NULL;
  assert_int_equal(
      kolo_codec_parse(text, strlen(text), &kolo__v1__job_spec__descriptor, &msg, NULL, 0),
      KOLO_OK);
  return (Kolo__V1__JobSpec *)msg;
}

static kolo_status submit(fixture *f, const char *text, Kolo__V1__Job **job, int *created) {
  char err[256];
  Kolo__V1__JobSpec *spec = spec_from(text);
  kolo_status rc = kolo_server_store_submit(f->store, spec, job, created, err, sizeof err);
  protobuf_c_message_free_unpacked(&spec->base, NULL);
  return rc;
}

#define SPEC(id, extra)          \
  "{\"name\":\"n\",\"id\":\"" id \
  "\",\"min_workers\":1,\"builtin\":{\"model\":\"mlp\",\"epochs\":1}" extra "}"

static void a_submitted_job_is_pending_and_readable(void **state) {
  fixture *f = *state;
  Kolo__V1__Job *job = NULL, *again = NULL;
  int created = 0;
  assert_int_equal(submit(f, SPEC("a1", ""), &job, &created), KOLO_OK);
  assert_true(created);
  assert_string_equal(job->id, "a1");
  assert_int_equal(job->status->phase, KOLO__V1__PHASE__PENDING);
  assert_int_equal(job->n_events, 1);
  assert_int_equal(kolo_server_store_get(f->store, "a1", &again), KOLO_OK);
  assert_string_equal(again->spec->name, "n");
  char *json = NULL;
  assert_int_equal(kolo_server_store_get_json(f->store, "a1", &json), KOLO_OK);
  assert_non_null(strstr(json, "\"phase\":\"PENDING\""));
  free(json);
  assert_int_equal(kolo_server_store_get(f->store, "nope", &job), KOLO_ERR_NOT_FOUND);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  protobuf_c_message_free_unpacked(&again->base, NULL);
}

static void a_repeated_submit_returns_the_job_and_a_different_spec_is_refused(void **state) {
  fixture *f = *state;
  Kolo__V1__Job *job = NULL;
  int created = 0;
  assert_int_equal(submit(f, SPEC("b1", ",\"labels\":{\"x\":\"1\",\"y\":\"2\"}"), &job, &created),
                   KOLO_OK);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  assert_int_equal(submit(f, SPEC("b1", ",\"labels\":{\"y\":\"2\",\"x\":\"1\"}"), &job, &created),
                   KOLO_OK);
  assert_false(created);
  assert_int_equal(job->n_events, 1);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  job = NULL;
  assert_int_equal(submit(f, SPEC("b1", ",\"max_workers\":3"), &job, &created), KOLO_ERR_EXISTS);
  assert_null(job);
}

static void cancel_then_cancel_again_is_a_state_error_and_keeps_the_events(void **state) {
  fixture *f = *state;
  Kolo__V1__Job *job = NULL;
  int created;
  char err[256];
  assert_int_equal(submit(f, SPEC("c1", ""), &job, &created), KOLO_OK);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  assert_int_equal(kolo_server_store_cancel(f->store, "c1", "test", &job, err, sizeof err),
                   KOLO_OK);
  assert_int_equal(job->status->phase, KOLO__V1__PHASE__CANCELLED);
  assert_int_equal(job->n_events, 2);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  job = NULL;
  assert_int_equal(kolo_server_store_cancel(f->store, "c1", "", &job, err, sizeof err),
                   KOLO_ERR_STATE);
  assert_int_equal(kolo_server_store_cancel(f->store, "zz", "", &job, err, sizeof err),
                   KOLO_ERR_NOT_FOUND);
  assert_int_equal(kolo_server_store_get(f->store, "c1", &job), KOLO_OK);
  assert_int_equal(job->n_events, 2);
  protobuf_c_message_free_unpacked(&job->base, NULL);
}

static void a_stale_status_revision_makes_the_write_retry_on_fresh_state(void **state) {
  fixture *f = *state;
  Kolo__V1__Job *job = NULL;
  int created;
  char err[256];
  assert_int_equal(submit(f, SPEC("d1", ""), &job, &created), KOLO_OK);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  /* Another writer (the scheduler) appends event 2 without touching the status. */
  kolo_server_kv_put put = {"/kolo/v1/jobs/d1/events/0000000002",
                            "{\"seq\":2,\"type\":\"SCHEDULED\",\"message\":\"x\"}", 0};
  int64_t rev;
  assert_int_equal(f->kv->ops->txn(f->kv, NULL, 0, &put, 1, &rev), KOLO_OK);
  assert_int_equal(kolo_server_store_scale(f->store, "d1", 2, 4, &job, err, sizeof err), KOLO_OK);
  assert_int_equal(job->n_events, 3);
  assert_string_equal(job->events[1]->type, "SCHEDULED");
  assert_string_equal(job->events[2]->type, "SCALED");
  assert_int_equal(job->status->max_workers, 4);
  protobuf_c_message_free_unpacked(&job->base, NULL);
}

/* Event keys are 20 digits (kolo_keys_event); an etcd kept from before holds 10-digit
 * ones, which sort AFTER the new keys: the view orders events by number, not by key. */
static void events_of_both_key_widths_are_read_in_number_order(void **state) {
  fixture *f = *state;
  Kolo__V1__Job *job = NULL;
  int created;
  assert_int_equal(submit(f, SPEC("w1", ""), &job, &created), KOLO_OK);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  kolo_server_kv_item *items = NULL;
  size_t n = 0;
  int64_t rev;
  assert_int_equal(f->kv->ops->range(f->kv, "/kolo/v1/jobs/w1/events/", &items, &n, &rev), KOLO_OK);
  assert_int_equal(n, 1);
  assert_string_equal(items[0].key, "/kolo/v1/jobs/w1/events/00000000000000000001");
  kolo_server_kv_items_free(items, n);
  kolo_server_kv_put old = {"/kolo/v1/jobs/w1/events/0000000002",
                            "{\"seq\":2,\"type\":\"SCHEDULED\",\"message\":\"old\"}", 0};
  assert_int_equal(f->kv->ops->txn(f->kv, NULL, 0, &old, 1, &rev), KOLO_OK);
  /* event 3 as the scheduler writes it (acting on a scale intent: kolo-server writes no event) */
  char text[160];
  assert_int_equal(kolo_keys_event("w1", 3, text, sizeof text), KOLO_OK);
  kolo_server_kv_put scaled = {text, "{\"seq\":3,\"type\":\"SCALED\",\"message\":\"x\"}", 0};
  assert_int_equal(f->kv->ops->txn(f->kv, NULL, 0, &scaled, 1, &rev), KOLO_OK);
  assert_int_equal(kolo_server_store_get(f->store, "w1", &job), KOLO_OK);
  assert_int_equal(job->n_events, 3);
  assert_string_equal(job->events[1]->message, "old");
  assert_string_equal(job->events[2]->type, "SCALED");
  protobuf_c_message_free_unpacked(&job->base, NULL);
  assert_int_equal(f->kv->ops->range(f->kv, "/kolo/v1/jobs/w1/events/", &items, &n, &rev), KOLO_OK);
  assert_int_equal(n, 3);
  assert_string_equal(items[0].key, "/kolo/v1/jobs/w1/events/00000000000000000001");
  assert_string_equal(
      items[1].key, "/kolo/v1/jobs/w1/events/00000000000000000003"); /* before the old "...0002" */
  assert_string_equal(items[2].key, "/kolo/v1/jobs/w1/events/0000000002");
  kolo_server_kv_items_free(items, n);
  /* a second replica loading this etcd sees the same order */
  kolo_server_store *other = NULL;
  assert_int_equal(kolo_server_store_create(f->kv, &other), KOLO_OK);
  assert_int_equal(kolo_server_store_get(other, "w1", &job), KOLO_OK);
  assert_int_equal(job->n_events, 3);
  for (size_t i = 0; i < 3; i++) assert_int_equal(job->events[i]->seq, i + 1);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  kolo_server_store_destroy(other);
}

static void list_filters_by_phase_and_label_and_pages_in_id_order(void **state) {
  fixture *f = *state;
  Kolo__V1__Job *job = NULL;
  int created;
  char err[256];
  const char *ids[] = {"e3", "e1", "e2", "e4"};
  for (int i = 0; i < 4; i++) {
    char text[256];
    snprintf(text, sizeof text,
             "{\"name\":\"n\",\"id\":\"%s\",\"min_workers\":1,\"builtin\":{\"model\":\"m\","
             "\"epochs\":1},"
             "\"labels\":{\"team\":\"%s\"}}",
             ids[i], i % 2 ? "b" : "a");
    assert_int_equal(submit(f, text, &job, &created), KOLO_OK);
    protobuf_c_message_free_unpacked(&job->base, NULL);
  }
  assert_int_equal(kolo_server_store_cancel(f->store, "e2", "", &job, err, sizeof err), KOLO_OK);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  Kolo__V1__ListJobsRequest req = KOLO__V1__LIST_JOBS_REQUEST__INIT;
  Kolo__V1__ListJobsResponse *resp = NULL;
  req.page_size = 3;
  assert_int_equal(kolo_server_store_list(f->store, &req, &resp), KOLO_OK);
  assert_int_equal(resp->n_jobs, 3);
  assert_string_equal(resp->jobs[0]->id, "e1");
  assert_string_equal(resp->jobs[2]->id, "e3");
  assert_int_equal(resp->jobs[0]->n_events, 0);
  assert_string_equal(resp->next_page_token, "e3");
  req.page_token = "e3";
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  assert_int_equal(kolo_server_store_list(f->store, &req, &resp), KOLO_OK);
  assert_int_equal(resp->n_jobs, 1);
  assert_string_equal(resp->next_page_token, "");
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  req.page_token = "";
  req.page_size = 0;
  req.phase = KOLO__V1__PHASE__PENDING;
  Kolo__V1__ListJobsRequest__LabelsEntry label = KOLO__V1__LIST_JOBS_REQUEST__LABELS_ENTRY__INIT;
  Kolo__V1__ListJobsRequest__LabelsEntry *labels[1] = {&label};
  label.key = "team";
  label.value = "b";
  req.labels = labels;
  req.n_labels = 1;
  assert_int_equal(kolo_server_store_list(f->store, &req, &resp), KOLO_OK);
  /* team b and PENDING: e1 and e4. */
  assert_int_equal(resp->n_jobs, 2);
  assert_string_equal(resp->jobs[0]->id, "e1");
  assert_string_equal(resp->jobs[1]->id, "e4");
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  uint64_t counts[7];
  kolo_server_store_count_phases(f->store, counts);
  assert_int_equal(counts[KOLO__V1__PHASE__PENDING], 3);
  assert_int_equal(counts[KOLO__V1__PHASE__CANCELLED], 1);
}

typedef struct seen {
  int calls;
  Kolo__V1__Phase last;
} seen;

static void record(void *arg, const uint8_t *packed, size_t len, Kolo__V1__Phase phase) {
  seen *s = arg;
  Kolo__V1__Job *job = kolo__v1__job__unpack(NULL, len, packed);
  assert_non_null(job);
  assert_int_equal(job->status->phase, phase);
  kolo__v1__job__free_unpacked(job, NULL);
  s->calls++;
  s->last = phase;
}

static void a_subscriber_sees_the_current_job_then_each_change_once(void **state) {
  fixture *f = *state;
  Kolo__V1__Job *job = NULL;
  int created;
  char err[256];
  seen s = {0, 0};
  uint64_t handle = 0;
  assert_int_equal(submit(f, SPEC("f1", ""), &job, &created), KOLO_OK);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  assert_int_equal(kolo_server_store_subscribe(f->store, "nope", record, &s, &handle),
                   KOLO_ERR_NOT_FOUND);
  assert_int_equal(kolo_server_store_subscribe(f->store, "f1", record, &s, &handle), KOLO_OK);
  assert_int_equal(s.calls, 1);
  assert_int_equal(kolo_server_store_scale(f->store, "f1", 1, 2, &job, err, sizeof err), KOLO_OK);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  assert_int_equal(s.calls, 2);
  assert_int_equal(kolo_server_store_cancel(f->store, "f1", "", &job, err, sizeof err), KOLO_OK);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  assert_int_equal(s.calls, 3);
  assert_int_equal(s.last, KOLO__V1__PHASE__CANCELLED);
  kolo_server_store_unsubscribe(f->store, handle);
}

static void a_new_store_over_the_same_kv_sees_every_job(void **state) {
  fixture *f = *state;
  Kolo__V1__Job *job = NULL;
  int created;
  assert_int_equal(submit(f, SPEC("g1", ""), &job, &created), KOLO_OK);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  kolo_server_store_destroy(f->store);
  assert_int_equal(kolo_server_store_create(f->kv, &f->store), KOLO_OK);
  assert_int_equal(kolo_server_store_get(f->store, "g1", &job), KOLO_OK);
  assert_int_equal(job->n_events, 1);
  protobuf_c_message_free_unpacked(&job->base, NULL);
}

/* ---- the records the scheduler reads (store_records.c) ---- */

/* kv_mem with the store's watch callback kept, so a test can deliver a reload. */
typedef struct spy_kv {
  kolo_server_kv base;
  kolo_server_kv *mem;
  kolo_server_kv_watch_fn fn;
  void *arg;
} spy_kv;

static kolo_status spy_range(kolo_server_kv *kv, const char *prefix, kolo_server_kv_item **items,
                             size_t *count, int64_t *revision) {
  kolo_server_kv *mem = ((spy_kv *)kv)->mem;
  return mem->ops->range(mem, prefix, items, count, revision);
}
static kolo_status spy_txn(kolo_server_kv *kv, const kolo_server_kv_compare *c, size_t nc,
                           const kolo_server_kv_put *p, size_t np, int64_t *revision) {
  kolo_server_kv *mem = ((spy_kv *)kv)->mem;
  return mem->ops->txn(mem, c, nc, p, np, revision);
}
static kolo_status spy_start_watch(kolo_server_kv *kv, const char *prefix, int64_t start,
                                   kolo_server_kv_watch_fn fn, void *arg) {
  spy_kv *spy = (spy_kv *)kv;
  spy->fn = fn;
  spy->arg = arg;
  return spy->mem->ops->start_watch(spy->mem, prefix, start, fn, arg);
}
static void spy_stop_watch(kolo_server_kv *kv) {
  kolo_server_kv *mem = ((spy_kv *)kv)->mem;
  mem->ops->stop_watch(mem);
}
static int spy_healthy(kolo_server_kv *kv) {
  (void)kv;
  return 1;
}
static void spy_destroy(kolo_server_kv *kv) {
  spy_kv *spy = (spy_kv *)kv;
  spy->mem->ops->destroy(spy->mem);
  free(spy);
}
static const kolo_server_kv_ops spy_ops = {spy_range,      spy_txn,     spy_start_watch,
                                           spy_stop_watch, spy_healthy, spy_destroy};

static int records_calls;
static void count_records(void *arg) {
  (void)arg;
  records_calls++;
}

static int64_t kv_put(kolo_server_kv *kv, const char *key, const char *value) {
  kolo_server_kv_put put = {key, value, 0};
  int64_t rev = 0;
  assert_int_equal(kv->ops->txn(kv, NULL, 0, &put, 1, &rev), KOLO_OK);
  return rev;
}

static void read_all(kolo_server_store *store, int64_t min, int timeout_ms, kolo_status want,
                     kolo_etcd_range_result out[3], uint64_t *reloads) {
  const char *const prefixes[3] = {"/kolo/v1/workers/", "/kolo/v1/jobs/", "/kolo/v1/metrics/"};
  int64_t rev = 0;
  assert_int_equal(
      kolo_server_store_read_records(store, prefixes, 3, min, timeout_ms, out, &rev, reloads),
      want);
}

static void free_all(kolo_etcd_range_result out[3]) {
  for (int i = 0; i < 3; i++) kolo_etcd_range_result_free(&out[i]);
}

static void the_records_follow_the_kv_skip_metrics_and_reload_whole(void **state) {
  (void)state;
  spy_kv *spy = calloc(1, sizeof *spy);
  spy->base.ops = &spy_ops;
  assert_int_equal(kolo_server_kv_mem_create(&spy->mem), KOLO_OK);
  kv_put(&spy->base, "/kolo/v1/workers/w1", "{\"id\":\"w1\"}");
  kolo_server_store *store = NULL;
  assert_int_equal(kolo_server_store_create(&spy->base, &store), KOLO_OK);
  records_calls = 0;
  kolo_server_store_set_records_fn(store, count_records, NULL);
  kv_put(&spy->base, "/kolo/v1/jobs/j/reports/w1", "{}");
  assert_int_equal(records_calls, 1);
  int64_t at = kv_put(&spy->base, "/kolo/v1/metrics/j/00000000000000000001", "{}");
  assert_int_equal(records_calls, 1); /* metrics history alone: no call */
  kolo_etcd_range_result out[3];
  uint64_t reloads = 9;
  read_all(store, at, 1000, KOLO_OK, out, &reloads);
  assert_int_equal(reloads, 0);
  assert_int_equal(out[0].count, 1);
  assert_string_equal((const char *)out[0].kvs[0].key, "/kolo/v1/workers/w1");
  assert_string_equal((const char *)out[0].kvs[0].value, "{\"id\":\"w1\"}");
  assert_int_equal(out[0].kvs[0].mod_revision, 1);
  assert_int_equal(out[1].count, 1);
  assert_int_equal(out[2].count, 0); /* not kept */
  assert_true(out[0].revision >= at);
  free_all(out);

  /* a reload (another etcd cluster, revisions from 1 again): only what it brings */
  kolo_server_kv_event fresh = {0, {"/kolo/v1/workers/w2", "{}", 2, 2, 2, 0}};
  assert_true(at > 2);
  spy->fn(spy->arg, &fresh, 1, 2, 1);
  assert_int_equal(records_calls, 2);
  read_all(store, 0, 0, KOLO_OK, out, &reloads);
  assert_int_equal(reloads, 1);
  assert_int_equal(out[0].count, 1);
  assert_string_equal((const char *)out[0].kvs[0].key, "/kolo/v1/workers/w2");
  assert_int_equal(out[1].count, 0);
  free_all(out);
  /* a read for the old cluster's revision times out, the reload counted */
  read_all(store, at, 100, KOLO_ERR_TIMEOUT, out, &reloads);
  assert_int_equal(reloads, 1);
  assert_int_equal(out[0].count, 0);
  kolo_server_store_set_records_fn(store, NULL, NULL);
  kolo_server_store_destroy(store);
  spy->base.ops->destroy(&spy->base);
}

static Kolo__V1__Phase phase_now(kolo_server_store *store, const char *id) {
  Kolo__V1__Job *job = NULL;
  if (kolo_server_store_get(store, id, &job) != KOLO_OK) return KOLO__V1__PHASE__PHASE_UNSPECIFIED;
  Kolo__V1__Phase phase = job->status->phase;
  protobuf_c_message_free_unpacked(&job->base, NULL);
  return phase;
}

/* Read-your-writes for job writes: a repeated submit compares with the view's spec (no
 * range); over a view that lags, a scale waits for the view and
 * answers the new bounds; a view that does not catch up in time gives UNAVAILABLE with a
 * message naming the revision, never the stale job; the view shows the write later. */
static void a_write_answers_from_the_view_once_it_shows_the_write_or_unavailable(void **state) {
  (void)state;
  lag_kv *lag = lag_kv_create();
  kolo_server_store *store = NULL;
  assert_int_equal(kolo_server_store_create(&lag->base, &store), KOLO_OK);
  char err[256] = "";
  int created = 0;
  Kolo__V1__Job *job = NULL;
  Kolo__V1__JobSpec *spec = spec_from(SPEC("lag-1", ",\"max_workers\":2"));
  assert_int_equal(kolo_server_store_submit(store, spec, &job, &created, err, sizeof err), KOLO_OK);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  int ranges_before = ranges(lag);
  assert_int_equal(kolo_server_store_submit(store, spec, &job, &created, err, sizeof err), KOLO_OK);
  assert_int_equal(created, 0); /* a retry: the existing spec compared from the view */
  protobuf_c_message_free_unpacked(&job->base, NULL);
  assert_int_equal(ranges(lag), ranges_before);
  lag_pause(lag);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, resume_later, lag), 0);
  assert_int_equal(kolo_server_store_scale(store, "lag-1", 1, 4, &job, err, sizeof err), KOLO_OK);
  assert_int_equal(job->status->max_workers, 4); /* the view after the write, not before */
  protobuf_c_message_free_unpacked(&job->base, NULL);
  pthread_join(t, NULL);

  kolo_server_store_set_catch_up_ms(store, 200);
  lag_pause(lag);
  err[0] = '\0';
  job = NULL;
  assert_int_equal(kolo_server_store_cancel(store, "lag-1", "bye", &job, err, sizeof err),
                   KOLO_ERR_UNAVAILABLE);
  assert_null(job);
  assert_non_null(strstr(err, "cancelled job lag-1"));
  assert_non_null(strstr(err, "has not reached revision"));
  assert_int_equal(phase_now(store, "lag-1"), KOLO__V1__PHASE__PENDING); /* the lagging view */
  err[0] = '\0';
  assert_int_equal(kolo_server_store_submit(store, spec, &job, &created, err, sizeof err),
                   KOLO_OK); /* the same spec again: the job as the view has it */
  protobuf_c_message_free_unpacked(&job->base, NULL);
  protobuf_c_message_free_unpacked(&spec->base, NULL);
  spec = spec_from(SPEC("lag-2", ""));
  err[0] = '\0';
  job = NULL;
  assert_int_equal(kolo_server_store_submit(store, spec, &job, &created, err, sizeof err),
                   KOLO_ERR_UNAVAILABLE);
  assert_null(job);
  assert_non_null(strstr(err, "submitted job lag-2"));
  protobuf_c_message_free_unpacked(&spec->base, NULL);
  lag_resume(lag);
  assert_int_equal(phase_now(store, "lag-1"), KOLO__V1__PHASE__CANCELLED);
  assert_int_equal(phase_now(store, "lag-2"), KOLO__V1__PHASE__PENDING);
  kolo_server_store_destroy(store);
  lag->base.ops->destroy(&lag->base);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(a_submitted_job_is_pending_and_readable, setup, teardown),
      cmocka_unit_test_setup_teardown(
          a_repeated_submit_returns_the_job_and_a_different_spec_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(
          cancel_then_cancel_again_is_a_state_error_and_keeps_the_events, setup, teardown),
      cmocka_unit_test_setup_teardown(events_of_both_key_widths_are_read_in_number_order, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_stale_status_revision_makes_the_write_retry_on_fresh_state,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(list_filters_by_phase_and_label_and_pages_in_id_order, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_subscriber_sees_the_current_job_then_each_change_once,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(a_new_store_over_the_same_kv_sees_every_job, setup, teardown),
      cmocka_unit_test(the_records_follow_the_kv_skip_metrics_and_reload_whole),
      cmocka_unit_test(a_write_answers_from_the_view_once_it_shows_the_write_or_unavailable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
