/* Unit tests for the ClusterService side of the store (server/workers.c) over the
 * in-memory kv: a drain mark goes under the lease of the worker's registration and drains
 * that registration only; undrain deletes it; a legacy mark drains nothing; demand counts
 * the view's jobs. Behind a kv that holds its watch back (a view that lags): ListWorkers,
 * demand, drain and undrain make no range; a drain waits for the view to show it, so the
 * next ListWorkers does; a view that does not catch up in time answers UNAVAILABLE. The
 * etcd-backed runs are in tests/integration/test_server_records.c (0 etcd ranges) and,
 * with real kolo-workers, tests/integration/test_server_drain.py. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "codec/codec.h"
#include "server/store.h"
#include "tests/unit/lag_kv.h"

typedef struct fixture {
  kolo_server_kv *kv;
  kolo_server_store *store;
  lag_kv *lag; /* = kv */
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  lag_kv *l = lag_kv_create();
  f->lag = l;
  f->kv = &l->base;
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

/* Registers worker id under lease as kolo-worker does (its record, attached to the lease). */
static void register_worker(fixture *f, const char *id, int64_t lease) {
  char key[128], value[256];
  snprintf(key, sizeof key, "/kolo/v1/workers/%s", id);
  snprintf(value, sizeof value,
           "{\"id\":\"%s\",\"host\":\"h\",\"address\":\"10.0.0.1:7100\",\"cpus\":2,"
           "\"gpus\":0,\"labels\":{},\"state\":\"idle\"}",
           id);
  kolo_server_kv_put put = {key, value, lease};
  int64_t rev;
  assert_int_equal(f->kv->ops->txn(f->kv, NULL, 0, &put, 1, &rev), KOLO_OK);
}

static void unregister_worker(fixture *f, const char *id) {
  char key[128];
  snprintf(key, sizeof key, "/kolo/v1/workers/%s", id);
  kolo_server_kv_put del = {key, NULL, 0};
  int64_t rev;
  assert_int_equal(f->kv->ops->txn(f->kv, NULL, 0, &del, 1, &rev), KOLO_OK);
}

/* The drain key of id as stored: NULL if absent, else its value (caller frees). */
static char *drain_mark(fixture *f, const char *id, int64_t *lease) {
  char key[128];
  snprintf(key, sizeof key, "/kolo/v1/drain/%s", id);
  kolo_server_kv_item *items = NULL;
  size_t n = 0;
  int64_t rev;
  assert_int_equal(f->kv->ops->range(f->kv, key, &items, &n, &rev), KOLO_OK);
  char *value = NULL;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(items[i].key, key) != 0) continue;
    value = strdup(items[i].value);
    if (lease) *lease = items[i].lease;
  }
  kolo_server_kv_items_free(items, n);
  return value;
}

static int listed_draining(fixture *f, const char *id) {
  Kolo__V1__ListWorkersResponse *all = NULL;
  assert_int_equal(kolo_server_store_list_workers(f->store, &all), KOLO_OK);
  int draining = -1;
  for (size_t i = 0; i < all->n_workers; i++)
    if (strcmp(all->workers[i]->id, id) == 0) draining = all->workers[i]->draining;
  protobuf_c_message_free_unpacked(&all->base, NULL);
  return draining;
}

static void a_drain_mark_is_written_under_the_registrations_lease(void **state) {
  fixture *f = *state;
  register_worker(f, "w1", 4242);
  register_worker(f, "w10", 99); /* a prefix of another id must not be confused with it */
  Kolo__V1__Worker *w = NULL;
  assert_int_equal(kolo_server_store_drain_worker(f->store, "w1", &w, NULL, 0), KOLO_OK);
  assert_string_equal(w->id, "w1");
  assert_true(w->draining);
  assert_string_equal(w->state, "DRAINING");
  protobuf_c_message_free_unpacked(&w->base, NULL);
  int64_t lease = 0;
  char *mark = drain_mark(f, "w1", &lease);
  assert_non_null(mark);
  assert_int_equal(lease, 4242);
  assert_non_null(strstr(mark, "\"lease\":4242"));
  free(mark);
  assert_int_equal(listed_draining(f, "w1"), 1);
  assert_int_equal(listed_draining(f, "w10"), 0);
}

static void the_next_registration_under_the_same_id_is_not_drained(void **state) {
  fixture *f = *state;
  register_worker(f, "w1", 1001);
  Kolo__V1__Worker *w = NULL;
  assert_int_equal(kolo_server_store_drain_worker(f->store, "w1", &w, NULL, 0), KOLO_OK);
  protobuf_c_message_free_unpacked(&w->base, NULL);
  /* the pod comes back under its name: a new lease (here the old mark even survived, as it
   * would if written by an older server without a lease) */
  unregister_worker(f, "w1");
  register_worker(f, "w1", 1002);
  assert_int_equal(listed_draining(f, "w1"), 0);
  Kolo__V1__Demand *d = NULL;
  assert_int_equal(kolo_server_store_get_demand(f->store, &d), KOLO_OK);
  assert_int_equal(d->workers_draining, 0);
  assert_int_equal(d->workers_idle, 1);
  protobuf_c_message_free_unpacked(&d->base, NULL);
}

static void a_legacy_mark_without_a_lease_drains_nothing(void **state) {
  fixture *f = *state;
  register_worker(f, "w2", 77);
  kolo_server_kv_put legacy = {"/kolo/v1/drain/w2", "{\"draining\":true,\"time_unix_ms\":1}", 0};
  int64_t rev;
  assert_int_equal(f->kv->ops->txn(f->kv, NULL, 0, &legacy, 1, &rev), KOLO_OK);
  assert_int_equal(listed_draining(f, "w2"), 0);
}

static void undrain_deletes_the_mark_and_is_idempotent(void **state) {
  fixture *f = *state;
  register_worker(f, "w3", 5);
  Kolo__V1__Worker *w = NULL;
  assert_int_equal(kolo_server_store_drain_worker(f->store, "w3", &w, NULL, 0), KOLO_OK);
  protobuf_c_message_free_unpacked(&w->base, NULL);
  for (int round = 0; round < 2; round++) {
    assert_int_equal(kolo_server_store_undrain_worker(f->store, "w3", &w, NULL, 0), KOLO_OK);
    assert_false(w->draining);
    assert_string_equal(w->state, "IDLE");
    protobuf_c_message_free_unpacked(&w->base, NULL);
    assert_null(drain_mark(f, "w3", NULL));
    assert_int_equal(listed_draining(f, "w3"), 0);
  }
}

static void unknown_workers_cannot_be_drained_or_undrained(void **state) {
  fixture *f = *state;
  Kolo__V1__Worker *w = NULL;
  assert_int_equal(kolo_server_store_drain_worker(f->store, "nobody", &w, NULL, 0),
                   KOLO_ERR_NOT_FOUND);
  assert_null(drain_mark(f, "nobody", NULL));
  assert_int_equal(kolo_server_store_undrain_worker(f->store, "nobody", &w, NULL, 0),
                   KOLO_ERR_NOT_FOUND);
  /* a mark left behind by a worker that is gone is still removed */
  kolo_server_kv_put left = {"/kolo/v1/drain/gone", "{\"draining\":true,\"lease\":3}", 0};
  int64_t rev;
  assert_int_equal(f->kv->ops->txn(f->kv, NULL, 0, &left, 1, &rev), KOLO_OK);
  assert_int_equal(kolo_server_store_undrain_worker(f->store, "gone", &w, NULL, 0),
                   KOLO_ERR_NOT_FOUND);
  assert_null(drain_mark(f, "gone", NULL));
  assert_int_equal(kolo_server_store_drain_worker(f->store, "a/b", &w, NULL, 0),
                   KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_server_store_undrain_worker(f->store, "..", &w, NULL, 0),
                   KOLO_ERR_INVALID_ARG);
}

static void demand_counts_the_jobs_in_the_view(void **state) {
  fixture *f = *state;
  const char *text =
      "{\"name\":\"n\",\"id\":\"d1\",\"min_workers\":2,\"max_workers\":5,"
      "\"builtin\":{\"model\":\"mlp\",\"epochs\":1}}";
  ProtobufCMessage *msg = NULL;
  assert_int_equal(
      kolo_codec_parse(text, strlen(text), &kolo__v1__job_spec__descriptor, &msg, NULL, 0),
      KOLO_OK);
  Kolo__V1__Job *job = NULL;
  int created = 0;
  char err[256];
  assert_int_equal(
      kolo_server_store_submit(f->store, (Kolo__V1__JobSpec *)msg, &job, &created, err, sizeof err),
      KOLO_OK);
  protobuf_c_message_free_unpacked(msg, NULL);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  register_worker(f, "w4", 1);
  Kolo__V1__Demand *d = NULL;
  assert_int_equal(kolo_server_store_get_demand(f->store, &d), KOLO_OK);
  assert_int_equal(d->workers_wanted, 5);
  assert_int_equal(d->workers_missing, 5);
  assert_int_equal(d->pending_jobs, 1);
  assert_int_equal(d->workers_registered, 1);
  assert_true(d->time_unix_ms > 0);
  protobuf_c_message_free_unpacked(&d->base, NULL);
}

static void put_record(fixture *f, const char *key, const char *value) {
  kolo_server_kv_put put = {key, value, 5};
  int64_t rev;
  assert_int_equal(f->kv->ops->txn(f->kv, NULL, 0, &put, 1, &rev), KOLO_OK);
}

/* ListWorkers reads records with kolo-worker's own codec: every field as written, and a
 * record the codec refuses (or one filed under another id) is left out, not guessed at. */
static void workers_are_read_through_the_worker_record_codec(void **state) {
  fixture *f = *state;
  put_record(
      f, "/kolo/v1/workers/w5",
      "{\"id\":\"w5\",\"host\":\"node-5\",\"address\":\"10.0.0.5:7100\",\"cpus\":8,\"gpus\":2,"
      "\"labels\":{\"zone\":\"b\"},\"state\":\"busy\",\"registered_unix_ms\":1234}");
  put_record(f, "/kolo/v1/workers/no-address",
             "{\"id\":\"no-address\",\"host\":\"h\",\"cpus\":1,\"gpus\":0,"
             "\"state\":\"idle\"}");
  put_record(f, "/kolo/v1/workers/elsewhere",
             "{\"id\":\"w6\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":1,"
             "\"gpus\":0,\"state\":\"idle\"}");
  put_record(f, "/kolo/v1/workers/bad-state",
             "{\"id\":\"bad-state\",\"host\":\"h\",\"address\":\"h:1\","
             "\"cpus\":1,\"gpus\":0,\"state\":\"IDLE!\"}");
  put_record(f, "/kolo/v1/assign/w5",
             "{\"job\":\"j5\",\"epoch\":1,\"ring\":\"/kolo/v1/jobs/j5/ring/00000000000000000001\","
             "\"rank\":0}");
  Kolo__V1__ListWorkersResponse *all = NULL;
  assert_int_equal(kolo_server_store_list_workers(f->store, &all), KOLO_OK);
  assert_int_equal(all->n_workers, 1);
  const Kolo__V1__Worker *w = all->workers[0];
  assert_string_equal(w->id, "w5");
  assert_string_equal(w->host, "node-5");
  assert_string_equal(w->address, "10.0.0.5:7100");
  assert_int_equal(w->slots, 8);
  assert_int_equal(w->gpus, 2);
  assert_string_equal(w->state, "BUSY");
  assert_string_equal(w->job_id, "j5");
  assert_int_equal(w->registered_unix_ms, 1234);
  assert_int_equal(w->n_labels, 1);
  assert_string_equal(w->labels[0]->key, "zone");
  assert_string_equal(w->labels[0]->value, "b");
  protobuf_c_message_free_unpacked(&all->base, NULL);
}

/* ListWorkers, demand, drain and undrain are served from the view: no range of the kv at
 * all (an unknown worker costs one compare-only txn, still no range). */
static void workers_drains_and_demand_read_no_range(void **state) {
  fixture *f = *state;
  register_worker(f, "w1", 11);
  register_worker(f, "w2", 12);
  int before = ranges(f->lag);
  Kolo__V1__Worker *w = NULL;
  assert_int_equal(listed_draining(f, "w1"), 0);
  assert_int_equal(kolo_server_store_drain_worker(f->store, "w1", &w, NULL, 0), KOLO_OK);
  assert_true(w->draining);
  protobuf_c_message_free_unpacked(&w->base, NULL);
  assert_int_equal(listed_draining(f, "w1"), 1);
  Kolo__V1__Demand *d = NULL;
  assert_int_equal(kolo_server_store_get_demand(f->store, &d), KOLO_OK);
  assert_int_equal(d->workers_registered, 2);
  assert_int_equal(d->workers_draining, 1);
  assert_int_equal(d->workers_idle, 1);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  assert_int_equal(kolo_server_store_undrain_worker(f->store, "w1", &w, NULL, 0), KOLO_OK);
  assert_false(w->draining);
  protobuf_c_message_free_unpacked(&w->base, NULL);
  assert_int_equal(kolo_server_store_drain_worker(f->store, "nobody", &w, NULL, 0),
                   KOLO_ERR_NOT_FOUND);
  assert_int_equal(ranges(f->lag), before);
}

/* Read-your-writes: a drain written while the view lags waits for the view to apply it, so
 * its answer and the ListWorkers right after it show the drain. */
static void a_drain_waits_for_the_view_so_the_next_list_shows_it(void **state) {
  fixture *f = *state;
  register_worker(f, "w1", 21);
  lag_pause(f->lag);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, resume_later, f->lag), 0);
  double start = now_s();
  Kolo__V1__Worker *w = NULL;
  char err[256] = "";
  assert_int_equal(kolo_server_store_drain_worker(f->store, "w1", &w, err, sizeof err), KOLO_OK);
  double waited = now_s() - start;
  assert_true(w->draining); /* answered from the view once it had the mark */
  assert_string_equal(w->state, "DRAINING");
  protobuf_c_message_free_unpacked(&w->base, NULL);
  assert_int_equal(listed_draining(f, "w1"), 1);
  assert_true(waited >= 0.25); /* it did wait for the held-back watch */
  pthread_join(t, NULL);
  /* the same for undrain */
  lag_pause(f->lag);
  assert_int_equal(pthread_create(&t, NULL, resume_later, f->lag), 0);
  assert_int_equal(kolo_server_store_undrain_worker(f->store, "w1", &w, err, sizeof err), KOLO_OK);
  assert_false(w->draining);
  protobuf_c_message_free_unpacked(&w->base, NULL);
  assert_int_equal(listed_draining(f, "w1"), 0);
  pthread_join(t, NULL);
}

/* A worker registered while the view lags is not taken for unknown: etcd is asked (no
 * range) and the drain waits for the view to show the registration. */
static void a_worker_the_view_has_not_seen_yet_is_still_drained(void **state) {
  fixture *f = *state;
  lag_pause(f->lag);
  register_worker(f, "w7", 77);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, resume_later, f->lag), 0);
  int before = ranges(f->lag);
  Kolo__V1__Worker *w = NULL;
  char err[256] = "";
  assert_int_equal(kolo_server_store_drain_worker(f->store, "w7", &w, err, sizeof err), KOLO_OK);
  assert_string_equal(w->id, "w7");
  assert_true(w->draining);
  protobuf_c_message_free_unpacked(&w->base, NULL);
  assert_int_equal(ranges(f->lag), before);
  pthread_join(t, NULL);
  int64_t lease = 0;
  char *mark = drain_mark(f, "w7", &lease);
  assert_non_null(mark);
  assert_int_equal(lease, 77);
  free(mark);
}

/* A view that does not catch up within the catch-up time: UNAVAILABLE with a message that
 * says so, never a stale answer; the view shows the drain once it catches up. */
static void a_view_that_does_not_catch_up_answers_unavailable(void **state) {
  fixture *f = *state;
  register_worker(f, "w1", 31);
  kolo_server_store_set_catch_up_ms(f->store, 200);
  assert_int_equal(kolo_server_store_catch_up_ms(f->store), 200);
  lag_pause(f->lag);
  Kolo__V1__Worker *w = NULL;
  char err[256] = "";
  assert_int_equal(kolo_server_store_drain_worker(f->store, "w1", &w, err, sizeof err),
                   KOLO_ERR_UNAVAILABLE);
  assert_null(w);
  assert_non_null(strstr(err, "drained worker w1"));
  assert_non_null(strstr(err, "has not reached revision"));
  assert_non_null(strstr(err, "within 200 ms"));
  char *mark = drain_mark(f, "w1", NULL);
  assert_non_null(mark); /* written all the same */
  free(mark);
  assert_int_equal(listed_draining(f, "w1"), 0); /* the lagging view */
  lag_resume(f->lag);
  assert_int_equal(listed_draining(f, "w1"), 1);
  lag_pause(f->lag);
  err[0] = '\0';
  assert_int_equal(kolo_server_store_undrain_worker(f->store, "w1", &w, err, sizeof err),
                   KOLO_ERR_UNAVAILABLE);
  assert_non_null(strstr(err, "undrained worker w1"));
  lag_resume(f->lag);
  assert_int_equal(listed_draining(f, "w1"), 0);
  kolo_server_store_set_catch_up_ms(f->store, 0);
  assert_int_equal(kolo_server_store_catch_up_ms(f->store), 5000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(a_drain_mark_is_written_under_the_registrations_lease, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(the_next_registration_under_the_same_id_is_not_drained, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_legacy_mark_without_a_lease_drains_nothing, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(undrain_deletes_the_mark_and_is_idempotent, setup, teardown),
      cmocka_unit_test_setup_teardown(unknown_workers_cannot_be_drained_or_undrained, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(demand_counts_the_jobs_in_the_view, setup, teardown),
      cmocka_unit_test_setup_teardown(workers_are_read_through_the_worker_record_codec, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(workers_drains_and_demand_read_no_range, setup, teardown),
      cmocka_unit_test_setup_teardown(a_drain_waits_for_the_view_so_the_next_list_shows_it, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_worker_the_view_has_not_seen_yet_is_still_drained, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_view_that_does_not_catch_up_answers_unavailable, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
