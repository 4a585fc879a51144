/* Integration tests of etcd watches against a real etcd: events arrive in
 * order; a watch survives etcd being stopped (SIGTERM) and killed (SIGKILL) and
 * restarted on the same data dir with nothing lost or repeated; a watch that
 * starts below the compaction point reports a resync with the current state;
 * stop is prompt. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "coordination/etcd.h"
#include "tests/support/etcd_harness.h"

typedef struct record {
  int type;
  char key[64];
  char value[64];
  int64_t revision;
} record;

/* Collects what a watch delivers, for the test thread to wait on. */
typedef struct collector {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  record items[256];
  size_t count;
  int resyncs;
  int64_t resync_revision;
  int64_t compact_revision;
  char snapshot[8][64]; /* "key=value" of the last resync */
  size_t snapshot_count;
} collector;

static void collect(const kolo_etcd_watch_update *u, void *user) {
  collector *c = user;
  pthread_mutex_lock(&c->lock);
  if (u->kind == KOLO_ETCD_WATCH_RESYNC) {
    c->resyncs++;
    c->resync_revision = u->revision;
    c->compact_revision = u->compact_revision;
    c->snapshot_count = 0;
    for (size_t i = 0; i < u->kv_count && i < 8; i++)
      snprintf(c->snapshot[c->snapshot_count++], 64, "%s=%s", (char *)u->kvs[i].key,
               (char *)u->kvs[i].value);
  }
  for (size_t i = 0; i < u->event_count && c->count < 256; i++) {
    record *r = &c->items[c->count++];
    r->type = u->events[i].type;
    snprintf(r->key, sizeof r->key, "%s", (char *)u->events[i].kv.key);
    snprintf(r->value, sizeof r->value, "%s", (char *)u->events[i].kv.value);
    r->revision = u->events[i].kv.mod_revision;
  }
  pthread_cond_broadcast(&c->changed);
  pthread_mutex_unlock(&c->lock);
}

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Waits until at least n events (or one more resync than `resyncs`) arrived. */
static int wait_for(collector *c, size_t n, int resyncs, int timeout_ms) {
  long long deadline = now_ms() + timeout_ms;
  pthread_mutex_lock(&c->lock);
  while (c->count < n || c->resyncs < resyncs) {
    long long left = deadline - now_ms();
    if (left <= 0) break;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += left / 1000;
    until.tv_nsec += (left % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&c->changed, &c->lock, &until);
  }
  int ok = c->count >= n && c->resyncs >= resyncs;
  pthread_mutex_unlock(&c->lock);
  return ok;
}

static collector *collector_new(void) {
  collector *c = calloc(1, sizeof *c);
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->changed, NULL);
  return c;
}

static void collector_free(collector *c) {
  pthread_cond_destroy(&c->changed);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

typedef struct fixture {
  kolo_etcd_harness *etcd;
  kolo_etcd *client;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (kolo_etcd_harness_start(NULL, &f->etcd) != KOLO_OK) return -1;
  const char *endpoints[] = {kolo_etcd_harness_url(f->etcd)};
  kolo_etcd_config config = {.endpoints = endpoints,
                             .endpoint_count = 1,
                             .request_timeout_ms = 2000,
                             .watch_idle_ms = 3000};
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

static void wait_connected(kolo_etcd_watch *w) {
  long long deadline = now_ms() + 5000;
  while (!kolo_etcd_watch_connected(w) && now_ms() < deadline) {
    struct timespec d = {0, 10 * 1000000L};
    nanosleep(&d, NULL);
  }
  assert_true(kolo_etcd_watch_connected(w));
}

static void put(fixture *f, const char *key, const char *value, int64_t *rev) {
  assert_int_equal(kolo_etcd_put(f->client, kolo_etcd_str(key), kolo_etcd_str(value), 0, NULL, rev),
                   KOLO_OK);
}

static void watch_delivers_puts_and_deletes_in_order(void **state) {
  fixture *f = *state;
  collector *c = collector_new();
  kolo_etcd_watch *w = NULL;
  kolo_etcd_watch_opts opts = {.key = kolo_etcd_str("/w1/"), .prefix = 1, .prev_kv = 1};
  assert_int_equal(kolo_etcd_watch_start(f->client, &opts, collect, c, &w), KOLO_OK);
  wait_connected(w);
  int64_t revs[30];
  char key[32], value[32];
  /* Every third step deletes the key the step before wrote. */
  for (int i = 0; i < 30; i++) {
    snprintf(key, sizeof key, "/w1/k%d", (i % 3 == 2 ? i - 1 : i) % 4);
    if (i % 3 == 2) {
      assert_int_equal(kolo_etcd_delete(f->client, kolo_etcd_str(key), 0, NULL, &revs[i]), KOLO_OK);
    } else {
      snprintf(value, sizeof value, "v%d", i);
      put(f, key, value, &revs[i]);
    }
  }
  put(f, "/w10", "outside the prefix", NULL);
  assert_true(wait_for(c, 30, 0, 5000));
  kolo_etcd_watch_stop(w);
  assert_int_equal(c->count, 30); /* the key outside the prefix never came */
  for (int i = 0; i < 30; i++) {
    snprintf(key, sizeof key, "/w1/k%d", (i % 3 == 2 ? i - 1 : i) % 4);
    assert_string_equal(c->items[i].key, key);
    assert_int_equal(c->items[i].revision, revs[i]);
    assert_int_equal(c->items[i].type, i % 3 == 2 ? KOLO_ETCD_EVENT_DELETE : KOLO_ETCD_EVENT_PUT);
  }
  collector_free(c);
}

/* Writes n keys under prefix numbered from first. */
static void put_batch(fixture *f, const char *prefix, int first, int n) {
  char key[64];
  for (int i = first; i < first + n; i++) {
    snprintf(key, sizeof key, "%s%03d", prefix, i);
    put(f, key, "x", NULL);
  }
}

static void watch_resumes_after_etcd_restarts_with_nothing_lost_or_repeated(void **state) {
  fixture *f = *state;
  collector *c = collector_new();
  kolo_etcd_watch *w = NULL;
  kolo_etcd_watch_opts opts = {.key = kolo_etcd_str("/w2/"), .prefix = 1};
  assert_int_equal(kolo_etcd_watch_start(f->client, &opts, collect, c, &w), KOLO_OK);
  wait_connected(w);
  put_batch(f, "/w2/", 0, 5);
  assert_true(wait_for(c, 5, 0, 5000));

  /* Graceful stop, then a crash; writes land right after each restart, before the
   * watch has reconnected (it backs off), so it must fetch them from history. */
  assert_int_equal(kolo_etcd_harness_stop(f->etcd), KOLO_OK);
  assert_int_equal(kolo_etcd_harness_restart(f->etcd), KOLO_OK);
  put_batch(f, "/w2/", 5, 5);
  assert_true(wait_for(c, 10, 0, 8000));
  assert_int_equal(kolo_etcd_harness_kill(f->etcd), KOLO_OK);
  assert_int_equal(kolo_etcd_harness_restart(f->etcd), KOLO_OK);
  put_batch(f, "/w2/", 10, 5);
  assert_true(wait_for(c, 15, 0, 8000));
  /* Quiet for a moment: nothing extra (no replays) shows up. */
  struct timespec d = {1, 0};
  nanosleep(&d, NULL);
  kolo_etcd_watch_stop(w);
  assert_int_equal(c->count, 15);
  char key[64];
  for (int i = 0; i < 15; i++) {
    snprintf(key, sizeof key, "/w2/%03d", i);
    assert_string_equal(c->items[i].key, key);
    if (i > 0) assert_int_equal(c->items[i].revision, c->items[i - 1].revision + 1);
  }
  collector_free(c);
}

static void compacted_watch_reports_resync_with_the_current_state(void **state) {
  fixture *f = *state;
  int64_t early = 0, head = 0;
  put(f, "/w3/a", "1", &early);
  put(f, "/w3/b", "2", NULL);
  put(f, "/w3/a", "3", NULL);
  assert_int_equal(kolo_etcd_delete(f->client, kolo_etcd_str("/w3/b"), 0, NULL, NULL), KOLO_OK);
  put(f, "/w3/c", "4", &head);
  assert_int_equal(kolo_etcd_compact(f->client, head), KOLO_OK);

  collector *c = collector_new();
  kolo_etcd_watch *w = NULL;
  kolo_etcd_watch_opts opts = {.key = kolo_etcd_str("/w3/"), .prefix = 1, .start_revision = early};
  assert_int_equal(kolo_etcd_watch_start(f->client, &opts, collect, c, &w), KOLO_OK);
  assert_true(wait_for(c, 0, 1, 5000));
  assert_int_equal(c->count, 0); /* no stale events before the resync */
  assert_int_equal(c->compact_revision, head);
  assert_true(c->resync_revision >= head);
  assert_int_equal(c->snapshot_count, 2);
  assert_string_equal(c->snapshot[0], "/w3/a=3");
  assert_string_equal(c->snapshot[1], "/w3/c=4");
  /* It goes on from the snapshot's head. */
  int64_t next = 0;
  put(f, "/w3/d", "5", &next);
  assert_true(wait_for(c, 1, 1, 5000));
  kolo_etcd_watch_stop(w);
  assert_int_equal(c->count, 1);
  assert_string_equal(c->items[0].key, "/w3/d");
  assert_int_equal(c->items[0].revision, next);
  assert_int_equal(c->resyncs, 1);
  collector_free(c);
}

static void watch_from_an_old_revision_replays_history(void **state) {
  fixture *f = *state;
  int64_t first = 0;
  put(f, "/w4/k", "a", &first);
  put(f, "/w4/k", "b", NULL);
  collector *c = collector_new();
  kolo_etcd_watch *w = NULL;
  kolo_etcd_watch_opts opts = {.key = kolo_etcd_str("/w4/k"), .start_revision = first};
  assert_int_equal(kolo_etcd_watch_start(f->client, &opts, collect, c, &w), KOLO_OK);
  assert_true(wait_for(c, 2, 0, 5000));
  kolo_etcd_watch_stop(w);
  assert_string_equal(c->items[0].value, "a");
  assert_string_equal(c->items[1].value, "b");
  assert_int_equal(c->items[0].revision, first);
  collector_free(c);
}

static void stop_is_prompt_when_idle_and_when_etcd_is_down(void **state) {
  fixture *f = *state;
  collector *c = collector_new();
  kolo_etcd_watch *w = NULL;
  kolo_etcd_watch_opts opts = {.key = kolo_etcd_str("/w5/"), .prefix = 1};
  assert_int_equal(kolo_etcd_watch_start(f->client, &opts, collect, c, &w), KOLO_OK);
  wait_connected(w);
  long long t0 = now_ms();
  kolo_etcd_watch_stop(w);
  assert_true(now_ms() - t0 < 500);

  assert_int_equal(kolo_etcd_watch_start(f->client, &opts, collect, c, &w), KOLO_OK);
  wait_connected(w);
  assert_int_equal(kolo_etcd_harness_kill(f->etcd), KOLO_OK);
  struct timespec d = {0, 300 * 1000000L};
  nanosleep(&d, NULL);
  assert_false(kolo_etcd_watch_connected(w));
  t0 = now_ms();
  kolo_etcd_watch_stop(w);
  assert_true(now_ms() - t0 < 500);
  assert_int_equal(kolo_etcd_harness_restart(f->etcd), KOLO_OK);
  collector_free(c);
}

static void a_watch_resyncs_when_etcd_comes_back_with_wiped_data(void **state) {
  fixture *f = *state;
  for (int i = 0; i < 30; i++) put(f, "/w6/pad", "x", NULL); /* move the revision well up */
  put(f, "/w6/old", "1", NULL);
  collector *c = collector_new();
  kolo_etcd_watch *w = NULL;
  kolo_etcd_watch_opts opts = {.key = kolo_etcd_str("/w6/"), .prefix = 1};
  assert_int_equal(kolo_etcd_watch_start(f->client, &opts, collect, c, &w), KOLO_OK);
  wait_connected(w);
  put(f, "/w6/a", "1", NULL);
  assert_true(wait_for(c, 1, 0, 5000));
  /* Disaster: etcd loses its data and starts over (revision back to 1). */
  assert_int_equal(kolo_etcd_harness_stop(f->etcd), KOLO_OK);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s/data'", kolo_etcd_harness_dir(f->etcd));
  assert_int_equal(system(cmd), 0);
  assert_int_equal(kolo_etcd_harness_restart(f->etcd), KOLO_OK);
  /* The watch sees the store went back and reports the (empty) new state. */
  assert_true(wait_for(c, 1, 1, 8000));
  assert_int_equal(c->compact_revision, 0);
  assert_int_equal(c->snapshot_count, 0);
  /* And it follows the new history from its start. */
  int64_t rev = 0;
  put(f, "/w6/fresh", "2", &rev);
  assert_true(rev < 10);
  assert_true(wait_for(c, 2, 1, 5000));
  kolo_etcd_watch_stop(w);
  assert_int_equal(c->count, 2);
  assert_string_equal(c->items[1].key, "/w6/fresh");
  assert_int_equal(c->items[1].revision, rev);
  collector_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(watch_delivers_puts_and_deletes_in_order),
      cmocka_unit_test(watch_resumes_after_etcd_restarts_with_nothing_lost_or_repeated),
      cmocka_unit_test(compacted_watch_reports_resync_with_the_current_state),
      cmocka_unit_test(watch_from_an_old_revision_replays_history),
      cmocka_unit_test(stop_is_prompt_when_idle_and_when_etcd_is_down),
      cmocka_unit_test(a_watch_resyncs_when_etcd_comes_back_with_wiped_data),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
