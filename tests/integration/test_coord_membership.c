/* Integration tests of leases and worker membership against a real etcd: a
 * record held by a separate process stays while its keep-alive runs and is gone
 * within TTL + 1 s after SIGKILL; deregistration is immediate; a duplicate id is
 * refused; the lost-lease callback fires; the membership watch follows joins,
 * updates and leaves. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "coord_child.h"
#include "coordination/keys.h"
#include "coordination/membership.h"
#include "tests/support/etcd_harness.h"
#include "tests/support/worker_record.h"

#define TTL 2

typedef struct fixture {
  kolo_etcd_harness *etcd;
  kolo_etcd *client;
} fixture;

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void sleep_ms(long ms) {
  struct timespec d = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&d, NULL);
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (kolo_etcd_harness_start(NULL, &f->etcd) != KOLO_OK) return -1;
  const char *endpoints[] = {kolo_etcd_harness_url(f->etcd)};
  kolo_etcd_config config = {
      .endpoints = endpoints, .endpoint_count = 1, .request_timeout_ms = 2000};
  if (kolo_etcd_create(&config, &f->client) != KOLO_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kolo_etcd_destroy(f->client);
  kolo_etcd_harness_destroy(f->etcd);
  free(f);
  return 0;
}

static int record_exists(fixture *f, const char *id) {
  char key[256];
  assert_int_equal(kolo_keys_worker(id, key, sizeof key), KOLO_OK);
  kolo_etcd_kv kv;
  kolo_status rc = kolo_etcd_get(f->client, kolo_etcd_str(key), &kv, NULL);
  assert_true(rc == KOLO_OK || rc == KOLO_ERR_NOT_FOUND);
  kolo_etcd_kv_clear(&kv);
  return rc == KOLO_OK;
}

static void registration_stays_while_kept_alive_and_goes_within_ttl_after_sigkill(void **state) {
  fixture *f = *state;
  coord_child holder;
  const char *argv[] = {"coord_holder", kolo_etcd_harness_url(f->etcd), "held-1", "2", NULL};
  assert_int_equal(coord_child_start(&holder, "coord_holder", argv), 0);
  char line[256];
  assert_int_equal(coord_child_expect(&holder, "REGISTERED", line, sizeof line, 10000), 0);
  assert_true(record_exists(f, "held-1"));
  /* Well past the TTL, the keep-alive has renewed it. */
  sleep_ms(TTL * 1000 + 1500);
  assert_true(record_exists(f, "held-1"));

  coord_child_signal(&holder, SIGKILL);
  long long killed = now_ms();
  long long gone = -1;
  while (now_ms() - killed < (TTL + 3) * 1000) {
    if (!record_exists(f, "held-1")) {
      gone = now_ms() - killed;
      break;
    }
    sleep_ms(50);
  }
  coord_child_stop(&holder);
  print_message("record gone %lld ms after SIGKILL (TTL %d s)\n", gone, TTL);
  assert_true(gone >= 0);
  assert_true(gone <= (TTL + 1) * 1000);
}

static void deregister_removes_the_record_at_once(void **state) {
  fixture *f = *state;
  Kolo__V1__WorkerRecord m = kolo_test_worker_record("w-dereg", "h1", "127.0.0.1:7001", 4, "idle");
  kolo_membership *reg = NULL;
  assert_int_equal(kolo_membership_register(f->client, &m, TTL, NULL, NULL, &reg), KOLO_OK);
  assert_true(record_exists(f, "w-dereg"));
  assert_int_equal(kolo_membership_deregister(reg), KOLO_OK);
  assert_false(record_exists(f, "w-dereg"));
}

static void a_second_registration_of_a_live_id_is_refused(void **state) {
  fixture *f = *state;
  Kolo__V1__WorkerRecord m = kolo_test_worker_record("w-dup", "h1", "127.0.0.1:7002", 0, "idle");
  kolo_membership *first = NULL, *second = NULL;
  assert_int_equal(kolo_membership_register(f->client, &m, TTL, NULL, NULL, &first), KOLO_OK);
  m.address = "127.0.0.1:7003";
  assert_int_equal(kolo_membership_register(f->client, &m, TTL, NULL, NULL, &second),
                   KOLO_ERR_EXISTS);
  assert_null(second);
  assert_non_null(strstr(kolo_etcd_last_error(), "already registered"));
  /* The first record is untouched. */
  kolo_worker_entry *members = NULL;
  size_t count = 0;
  assert_int_equal(kolo_membership_list(f->client, &members, &count, NULL), KOLO_OK);
  int found = 0;
  for (size_t i = 0; i < count; i++)
    if (strcmp(members[i].record->id, "w-dup") == 0) {
      found = 1;
      assert_string_equal(members[i].record->address, "127.0.0.1:7002");
      assert_int_equal(members[i].lease, kolo_membership_lease(first));
    }
  assert_true(found);
  kolo_worker_entries_free(members, count);
  assert_int_equal(kolo_membership_deregister(first), KOLO_OK);
}

typedef struct lost_flag {
  pthread_mutex_t lock;
  int calls;
  kolo_status status;
  char message[256];
} lost_flag;

static void on_lost(int64_t lease, kolo_status status, const char *message, void *user) {
  lost_flag *l = user;
  pthread_mutex_lock(&l->lock);
  l->calls++;
  l->status = status;
  snprintf(l->message, sizeof l->message, "%s", message);
  pthread_mutex_unlock(&l->lock);
}

static void a_revoked_lease_is_reported_lost_and_updates_fail(void **state) {
  fixture *f = *state;
  lost_flag lost = {.lock = PTHREAD_MUTEX_INITIALIZER};
  Kolo__V1__WorkerRecord m = kolo_test_worker_record("w-lost", "h1", "127.0.0.1:7004", 0, "idle");
  kolo_membership *reg = NULL;
  assert_int_equal(kolo_membership_register(f->client, &m, TTL, on_lost, &lost, &reg), KOLO_OK);
  assert_int_equal(kolo_etcd_lease_revoke(f->client, kolo_membership_lease(reg)), KOLO_OK);
  long long start = now_ms();
  while (kolo_membership_alive(reg) && now_ms() - start < TTL * 1000 + 1000) sleep_ms(20);
  assert_false(kolo_membership_alive(reg));
  pthread_mutex_lock(&lost.lock);
  assert_int_equal(lost.calls, 1);
  assert_int_equal(lost.status, KOLO_ERR_LEASE_LOST);
  assert_non_null(strstr(lost.message, "no longer exists"));
  pthread_mutex_unlock(&lost.lock);
  m.state = "busy";
  assert_int_equal(kolo_membership_update(reg, &m), KOLO_ERR_LEASE_LOST);
  assert_false(record_exists(f, "w-lost"));
  assert_int_equal(kolo_membership_deregister(reg), KOLO_OK);
}

/* Remembers the last member snapshot a watch delivered. */
typedef struct seen {
  pthread_mutex_t lock;
  int calls;
  char ids[8][32];
  char states[8][32];
  size_t count;
} seen;

static void on_members(const kolo_worker_entry *members, size_t count, void *user) {
  seen *s = user;
  pthread_mutex_lock(&s->lock);
  s->calls++;
  s->count = 0;
  for (size_t i = 0; i < count && i < 8; i++) {
    snprintf(s->ids[i], 32, "%s", members[i].record->id);
    snprintf(s->states[i], 32, "%s", members[i].record->state);
    s->count++;
  }
  pthread_mutex_unlock(&s->lock);
}

/* Waits until the snapshot has n members and, if state is set, member 0 has it. */
static int wait_members(seen *s, size_t n, const char *state) {
  long long start = now_ms();
  while (now_ms() - start < 5000) {
    pthread_mutex_lock(&s->lock);
    int ok = s->count == n && (state == NULL || (n > 0 && strcmp(s->states[0], state) == 0));
    pthread_mutex_unlock(&s->lock);
    if (ok) return 1;
    sleep_ms(20);
  }
  return 0;
}

static void membership_watch_follows_joins_updates_and_leaves(void **state) {
  fixture *f = *state;
  /* A malformed record under the prefix must not hide the good ones. */
  assert_int_equal(kolo_etcd_put(f->client, kolo_etcd_str(KOLO_KEY_WORKERS_PREFIX "junk"),
                                 kolo_etcd_str("{not json"), 0, NULL, NULL),
                   KOLO_OK);
  seen s = {.lock = PTHREAD_MUTEX_INITIALIZER};
  kolo_membership_watch *watch = NULL;
  assert_int_equal(kolo_membership_watch_start(f->client, on_members, &s, &watch), KOLO_OK);
  assert_int_equal(s.calls, 1); /* the initial snapshot, before start returned */
  assert_int_equal(s.count, 0);

  Kolo__V1__WorkerRecord__LabelsEntry zone = KOLO__V1__WORKER_RECORD__LABELS_ENTRY__INIT;
  zone.key = "zone";
  zone.value = "a";
  Kolo__V1__WorkerRecord__LabelsEntry *labels[] = {&zone};
  Kolo__V1__WorkerRecord a = kolo_test_worker_record("wa", "h1", "127.0.0.1:7010", 8, "idle");
  a.gpus = 1;
  a.labels = labels;
  a.n_labels = 1;
  Kolo__V1__WorkerRecord b = kolo_test_worker_record("wb", "h2", "127.0.0.1:7011", 8, "idle");
  kolo_membership *ra = NULL, *rb = NULL;
  assert_int_equal(kolo_membership_register(f->client, &a, TTL, NULL, NULL, &ra), KOLO_OK);
  assert_int_equal(kolo_membership_register(f->client, &b, TTL, NULL, NULL, &rb), KOLO_OK);
  assert_true(wait_members(&s, 2, "idle"));
  a.state = "busy";
  assert_int_equal(kolo_membership_update(ra, &a), KOLO_OK);
  assert_true(wait_members(&s, 2, "busy"));
  assert_string_equal(s.ids[0], "wa");
  assert_string_equal(s.ids[1], "wb");
  assert_int_equal(kolo_membership_deregister(ra), KOLO_OK);
  assert_true(wait_members(&s, 1, "idle"));
  assert_string_equal(s.ids[0], "wb");
  /* A crashed holder leaves when its lease expires. */
  kolo_membership_abandon(rb);
  assert_true(wait_members(&s, 0, NULL));
  kolo_membership_watch_stop(watch);
  kolo_etcd_delete(f->client, kolo_etcd_str(KOLO_KEY_WORKERS_PREFIX "junk"), 0, NULL, NULL);
}

static void invalid_records_are_refused_with_the_field_named(void **state) {
  fixture *f = *state;
  kolo_membership *reg = NULL;
  Kolo__V1__WorkerRecord bad_id = kolo_test_worker_record("a/b", "h", "127.0.0.1:1", 0, "idle");
  assert_int_equal(kolo_membership_register(f->client, &bad_id, TTL, NULL, NULL, &reg),
                   KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(kolo_etcd_last_error(), "id"));
  Kolo__V1__WorkerRecord bad_addr = kolo_test_worker_record("ok", "h", "127.0.0.1", 0, "idle");
  assert_int_equal(kolo_membership_register(f->client, &bad_addr, TTL, NULL, NULL, &reg),
                   KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(kolo_etcd_last_error(), "address"));
  assert_null(reg);
  assert_false(record_exists(f, "ok"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(registration_stays_while_kept_alive_and_goes_within_ttl_after_sigkill),
      cmocka_unit_test(deregister_removes_the_record_at_once),
      cmocka_unit_test(a_second_registration_of_a_live_id_is_refused),
      cmocka_unit_test(a_revoked_lease_is_reported_lost_and_updates_fail),
      cmocka_unit_test(membership_watch_follows_joins_updates_and_leaves),
      cmocka_unit_test(invalid_records_are_refused_with_the_field_named),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
