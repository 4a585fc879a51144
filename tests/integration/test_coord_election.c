/* Integration tests of leader election against a real etcd, with candidates in
 * separate processes: one leads; after SIGKILL the other leads within TTL + 1 s;
 * a leader deposed while paused (SIGSTOP past its TTL) has its fenced write
 * refused. In-process: resign hands over, campaign times out, a failing caller
 * compare is not mistaken for a lost fence. */
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
#include "coordination/election.h"
#include "tests/support/etcd_harness.h"

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

static void start_candidate(fixture *f, coord_child *c, const char *prefix, const char *name) {
  const char *argv[] = {"coord_candidate", kolo_etcd_harness_url(f->etcd), prefix, name, "2", NULL};
  assert_int_equal(coord_child_start(c, "coord_candidate", argv), 0);
  char line[256];
  assert_int_equal(coord_child_expect(c, "CANDIDATE", line, sizeof line, 10000), 0);
}

static void the_other_candidate_leads_within_ttl_after_the_leader_is_killed(void **state) {
  fixture *f = *state;
  coord_child a, b;
  char line[256];
  start_candidate(f, &a, "/e1/", "alpha");
  assert_int_equal(coord_child_expect(&a, "LEADER alpha", line, sizeof line, 5000), 0);
  start_candidate(f, &b, "/e1/", "beta");
  /* beta queues behind alpha. */
  assert_int_not_equal(coord_child_read_line(&b, line, sizeof line, 1000), 0);
  kolo_etcd_kv leader;
  assert_int_equal(kolo_election_leader(f->client, "/e1/", &leader), KOLO_OK);
  assert_string_equal((char *)leader.value, "alpha");
  kolo_etcd_kv_clear(&leader);

  coord_child_signal(&a, SIGKILL);
  long long killed = now_ms();
  int led = coord_child_expect(&b, "LEADER beta", line, sizeof line, (TTL + 3) * 1000);
  long long took = now_ms() - killed;
  print_message("beta leads %lld ms after alpha's SIGKILL (TTL %d s)\n", took, TTL);
  coord_child_stop(&a);
  assert_int_equal(led, 0);
  assert_true(took <= (TTL + 1) * 1000);
  assert_int_equal(kolo_election_leader(f->client, "/e1/", &leader), KOLO_OK);
  assert_string_equal((char *)leader.value, "beta");
  kolo_etcd_kv_clear(&leader);
  coord_child_stop(&b);
}

static void a_deposed_leaders_fenced_write_fails(void **state) {
  fixture *f = *state;
  coord_child a, b;
  char line[256];
  start_candidate(f, &a, "/e2/", "alpha");
  assert_int_equal(coord_child_expect(&a, "LEADER alpha", line, sizeof line, 5000), 0);
  start_candidate(f, &b, "/e2/", "beta");
  assert_int_equal(coord_child_send(&a, "write /e2-data/x alpha-1"), 0);
  assert_int_equal(coord_child_expect(&a, "WRITE", line, sizeof line, 5000), 0);
  assert_string_equal(line, "WRITE OK");

  /* alpha freezes past its TTL (a long GC pause, a partition): beta takes over. */
  coord_child_signal(&a, SIGSTOP);
  int led = coord_child_expect(&b, "LEADER beta", line, sizeof line, (TTL + 3) * 1000);
  coord_child_signal(&a, SIGCONT);
  assert_int_equal(led, 0);
  /* alpha still believes it leads until it tries to write. */
  assert_int_equal(coord_child_send(&a, "write /e2-data/x alpha-2"), 0);
  assert_int_equal(coord_child_expect(&a, "WRITE", line, sizeof line, 5000), 0);
  assert_non_null(strstr(line, "KOLO_ERR_NOT_LEADER"));
  assert_int_equal(coord_child_send(&b, "write /e2-data/x beta-1"), 0);
  assert_int_equal(coord_child_expect(&b, "WRITE", line, sizeof line, 5000), 0);
  assert_string_equal(line, "WRITE OK");
  kolo_etcd_kv kv;
  assert_int_equal(kolo_etcd_get(f->client, kolo_etcd_str("/e2-data/x"), &kv, NULL), KOLO_OK);
  assert_string_equal((char *)kv.value, "beta-1");
  kolo_etcd_kv_clear(&kv);
  coord_child_stop(&a);
  coord_child_stop(&b);
}

static void resign_hands_over_and_campaign_times_out_while_queued(void **state) {
  fixture *f = *state;
  kolo_election *first = NULL, *second = NULL;
  assert_int_equal(kolo_election_create(f->client, "/e3/", "one", TTL, NULL, NULL, &first),
                   KOLO_OK);
  assert_int_equal(kolo_election_create(f->client, "/e3/", "two", TTL, NULL, NULL, &second),
                   KOLO_OK);
  assert_int_equal(kolo_election_campaign(first, 2000), KOLO_OK);
  assert_true(kolo_election_is_leader(first));
  long long t0 = now_ms();
  assert_int_equal(kolo_election_campaign(second, 300), KOLO_ERR_TIMEOUT);
  long long waited = now_ms() - t0;
  assert_true(waited >= 300 && waited < 1500);
  assert_false(kolo_election_is_leader(second));
  /* Campaigning again is idempotent (same key, same revision). */
  int64_t rev = kolo_election_revision(second);
  assert_int_equal(kolo_election_campaign(second, 100), KOLO_ERR_TIMEOUT);
  assert_int_equal(kolo_election_revision(second), rev);
  assert_int_equal(kolo_election_resign(first), KOLO_OK);
  assert_false(kolo_election_is_leader(first));
  t0 = now_ms();
  assert_int_equal(kolo_election_campaign(second, 3000), KOLO_OK);
  assert_true(now_ms() - t0 < 1000);
  kolo_etcd_kv leader;
  assert_int_equal(kolo_election_leader(f->client, "/e3/", &leader), KOLO_OK);
  assert_string_equal((char *)leader.value, "two");
  kolo_etcd_kv_clear(&leader);
  /* The resigned leader can no longer write. */
  kolo_etcd_op put = {
      .kind = KOLO_ETCD_OP_PUT, .key = kolo_etcd_str("/e3-data/y"), .value = kolo_etcd_str("1")};
  kolo_etcd_txn txn = {NULL, 0, &put, 1, NULL, 0};
  kolo_etcd_txn_result r;
  assert_int_equal(kolo_election_fenced_txn(first, &txn, &r), KOLO_ERR_NOT_LEADER);
  kolo_election_destroy(first);
  kolo_election_destroy(second);
  assert_int_equal(kolo_election_leader(f->client, "/e3/", &leader), KOLO_ERR_NOT_FOUND);
}

static void a_failing_caller_compare_is_not_a_lost_fence(void **state) {
  fixture *f = *state;
  kolo_election *e = NULL;
  assert_int_equal(kolo_election_create(f->client, "/e4/", "solo", TTL, NULL, NULL, &e), KOLO_OK);
  assert_int_equal(kolo_election_campaign(e, 2000), KOLO_OK);
  kolo_etcd_compare cmp = {.target = KOLO_ETCD_CMP_VERSION,
                           .result = KOLO_ETCD_EQUAL,
                           .key = kolo_etcd_str("/e4-data/z"),
                           .number = 5};
  kolo_etcd_op put = {
      .kind = KOLO_ETCD_OP_PUT, .key = kolo_etcd_str("/e4-data/z"), .value = kolo_etcd_str("1")};
  kolo_etcd_op get = {.kind = KOLO_ETCD_OP_RANGE, .key = kolo_etcd_str("/e4-data/z")};
  kolo_etcd_txn txn = {&cmp, 1, &put, 1, &get, 1};
  kolo_etcd_txn_result r;
  assert_int_equal(kolo_election_fenced_txn(e, &txn, &r), KOLO_OK);
  assert_false(r.succeeded);
  assert_int_equal(r.count, 1); /* only the caller's failure op, not the fence probe */
  kolo_etcd_txn_result_free(&r);
  assert_true(kolo_election_is_leader(e));
  cmp.number = 0;
  assert_int_equal(kolo_election_fenced_txn(e, &txn, &r), KOLO_OK);
  assert_true(r.succeeded);
  kolo_etcd_txn_result_free(&r);
  kolo_election_destroy(e);
}

/* Records the leaders an observer reports ("-" for none). */
typedef struct history {
  pthread_mutex_t lock;
  char seen[8][32];
  int count;
} history;

static void on_leader(const kolo_etcd_kv *leader, void *user) {
  history *h = user;
  pthread_mutex_lock(&h->lock);
  if (h->count < 8) snprintf(h->seen[h->count++], 32, "%s", leader ? (char *)leader->value : "-");
  pthread_mutex_unlock(&h->lock);
}

static int wait_history(history *h, int n) {
  for (int i = 0; i < 250; i++) {
    pthread_mutex_lock(&h->lock);
    int got = h->count;
    pthread_mutex_unlock(&h->lock);
    if (got >= n) return got;
    struct timespec d = {0, 20 * 1000000L};
    nanosleep(&d, NULL);
  }
  return -1;
}

static void an_observer_reports_each_change_of_leader(void **state) {
  fixture *f = *state;
  history h = {.lock = PTHREAD_MUTEX_INITIALIZER};
  kolo_election_observer *o = NULL;
  assert_int_equal(kolo_election_observe_start(f->client, "/e5/", on_leader, &h, &o), KOLO_OK);
  assert_int_equal(h.count, 1);
  assert_string_equal(h.seen[0], "-");
  kolo_election *first = NULL, *second = NULL;
  assert_int_equal(kolo_election_create(f->client, "/e5/", "one", TTL, NULL, NULL, &first),
                   KOLO_OK);
  assert_int_equal(kolo_election_create(f->client, "/e5/", "two", TTL, NULL, NULL, &second),
                   KOLO_OK);
  assert_int_equal(kolo_election_campaign(first, 2000), KOLO_OK);
  assert_int_equal(wait_history(&h, 2), 2);
  assert_int_equal(kolo_election_campaign(second, 200), KOLO_ERR_TIMEOUT); /* queued: no change */
  assert_int_equal(kolo_election_resign(first), KOLO_OK);
  assert_int_equal(wait_history(&h, 3), 3);
  kolo_election_destroy(second);
  assert_int_equal(wait_history(&h, 4), 4);
  kolo_election_observe_stop(o);
  kolo_election_destroy(first);
  assert_string_equal(h.seen[1], "one");
  assert_string_equal(h.seen[2], "two");
  assert_string_equal(h.seen[3], "-");
  assert_int_equal(h.count, 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_other_candidate_leads_within_ttl_after_the_leader_is_killed),
      cmocka_unit_test(a_deposed_leaders_fenced_write_fails),
      cmocka_unit_test(resign_hands_over_and_campaign_times_out_while_queued),
      cmocka_unit_test(a_failing_caller_compare_is_not_a_lost_fence),
      cmocka_unit_test(an_observer_reports_each_change_of_leader),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
