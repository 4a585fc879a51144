/* Integration tests of the etcd client when etcd is not there: stopped (every
 * call fails fast with a clear error), frozen with SIGSTOP (calls end at their
 * deadline; a watch notices the silence and reconnects after SIGCONT), one of
 * several endpoints dead (failover), a keep-alive riding out a restart, and the
 * two keep-alive modes through an outage longer than the TTL: a worker's
 * (PATIENT) keeps its lease, a leader's (STRICT) gives it up. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "coordination/membership.h"
#include "tests/support/etcd_harness.h"
#include "tests/support/worker_record.h"

typedef struct fixture {
  kolo_etcd_harness *etcd;
  kolo_etcd *client;
} fixture;

/* Sends SIGSTOP and waits (up to 2 s) until the kernel reports the process
 * stopped: kill() returns before every thread of a running process has stopped,
 * and a request served in that gap would not meet a frozen etcd. */
static void freeze(pid_t pid) {
  kill(pid, SIGSTOP);
  char path[64], text[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  for (int i = 0; i < 200; i++) {
    FILE *file = fopen(path, "r");
    size_t n = file ? fread(text, 1, sizeof text - 1, file) : 0;
    if (file) fclose(file);
    text[n] = '\0';
    const char *close_paren = strrchr(text, ')');
    if (close_paren != NULL && (close_paren[2] == 'T' || close_paren[2] == 't')) {
      struct timespec settle = {0, 20 * 1000000L}; /* let the other threads follow */
      nanosleep(&settle, NULL);
      return;
    }
    struct timespec pause = {0, 10 * 1000000L};
    nanosleep(&pause, NULL);
  }
}

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void sleep_ms(long ms) {
  struct timespec d = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&d, NULL);
}

static kolo_etcd *client_for(const char *const *endpoints, size_t n, int timeout_ms) {
  kolo_etcd_config config = {.endpoints = endpoints,
                             .endpoint_count = n,
                             .request_timeout_ms = timeout_ms,
                             .connect_timeout_ms = 300,
                             .watch_idle_ms = 2000};
  kolo_etcd *c = NULL;
  assert_int_equal(kolo_etcd_create(&config, &c), KOLO_OK);
  return c;
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (kolo_etcd_harness_start(NULL, &f->etcd) != KOLO_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kolo_etcd_harness_destroy(f->etcd);
  free(f);
  return 0;
}

/* A loopback port nobody listens on (bound, then released). */
static int dead_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  bind(fd, (struct sockaddr *)&a, sizeof a);
  getsockname(fd, (struct sockaddr *)&a, &len);
  close(fd);
  return ntohs(a.sin_port);
}

static void with_etcd_stopped_every_call_fails_fast_with_a_clear_error(void **state) {
  fixture *f = *state;
  const char *endpoints[] = {kolo_etcd_harness_url(f->etcd)};
  kolo_etcd *c = client_for(endpoints, 1, 1000);
  assert_int_equal(kolo_etcd_harness_stop(f->etcd), KOLO_OK);
  long long t0 = now_ms();
  kolo_etcd_kv kv;
  kolo_etcd_range_result r;
  int64_t lease;
  assert_int_equal(kolo_etcd_put(c, kolo_etcd_str("/u/k"), kolo_etcd_str("v"), 0, NULL, NULL),
                   KOLO_ERR_UNAVAILABLE);
  assert_non_null(strstr(kolo_etcd_last_error(), "etcd unavailable"));
  assert_non_null(strstr(kolo_etcd_last_error(), endpoints[0]));
  assert_int_equal(kolo_etcd_get(c, kolo_etcd_str("/u/k"), &kv, NULL), KOLO_ERR_UNAVAILABLE);
  assert_int_equal(kolo_etcd_range_prefix(c, kolo_etcd_str("/u/"), 0, &r), KOLO_ERR_UNAVAILABLE);
  assert_int_equal(kolo_etcd_lease_grant(c, 2, &lease, NULL), KOLO_ERR_UNAVAILABLE);
  assert_int_equal(kolo_etcd_delete(c, kolo_etcd_str("/u/k"), 1, NULL, NULL), KOLO_ERR_UNAVAILABLE);
  assert_int_equal(
      kolo_etcd_create_key(c, kolo_etcd_str("/u/k"), kolo_etcd_str("v"), 0, NULL, NULL),
      KOLO_ERR_UNAVAILABLE);
  Kolo__V1__WorkerRecord m = kolo_test_worker_record("w", "h", "127.0.0.1:1", 0, "idle");
  kolo_membership *reg = NULL;
  assert_int_equal(kolo_membership_register(c, &m, 2, NULL, NULL, &reg), KOLO_ERR_UNAVAILABLE);
  long long took = now_ms() - t0;
  print_message("7 calls against a stopped etcd failed in %lld ms total\n", took);
  assert_true(took < 1000);
  assert_int_equal(kolo_etcd_harness_restart(f->etcd), KOLO_OK);
  assert_int_equal(kolo_etcd_put(c, kolo_etcd_str("/u/k"), kolo_etcd_str("v"), 0, NULL, NULL),
                   KOLO_OK);
  kolo_etcd_destroy(c);
}

static void with_etcd_frozen_calls_end_at_their_deadline(void **state) {
  fixture *f = *state;
  const char *endpoints[] = {kolo_etcd_harness_url(f->etcd)};
  kolo_etcd *c = client_for(endpoints, 1, 800);
  assert_int_equal(kolo_etcd_put(c, kolo_etcd_str("/u/f"), kolo_etcd_str("v"), 0, NULL, NULL),
                   KOLO_OK);
  freeze(kolo_etcd_harness_pid(f->etcd));
  long long t0 = now_ms();
  kolo_status rc = kolo_etcd_put(c, kolo_etcd_str("/u/f"), kolo_etcd_str("w"), 0, NULL, NULL);
  long long took = now_ms() - t0;
  kolo_etcd_kv kv;
  t0 = now_ms();
  kolo_status rc2 = kolo_etcd_get(c, kolo_etcd_str("/u/f"), &kv, NULL);
  long long took2 = now_ms() - t0;
  kill(kolo_etcd_harness_pid(f->etcd), SIGCONT);
  print_message(
      "put and get against a frozen etcd returned after %lld and %lld ms (deadline 800)\n", took,
      took2);
  assert_int_equal(rc, KOLO_ERR_TIMEOUT);
  assert_int_equal(rc2, KOLO_ERR_TIMEOUT);
  assert_true(took >= 750 && took < 1500);
  assert_true(took2 >= 750 && took2 < 1500);
  kolo_etcd_destroy(c);
}

typedef struct counter {
  pthread_mutex_t lock;
  int events;
} counter;

static void count_events(const kolo_etcd_watch_update *u, void *user) {
  counter *n = user;
  pthread_mutex_lock(&n->lock);
  n->events += (int)u->event_count;
  pthread_mutex_unlock(&n->lock);
}

static void a_watch_notices_a_frozen_etcd_and_recovers(void **state) {
  fixture *f = *state;
  const char *endpoints[] = {kolo_etcd_harness_url(f->etcd)};
  kolo_etcd *c = client_for(endpoints, 1, 1000);
  counter n = {.lock = PTHREAD_MUTEX_INITIALIZER};
  kolo_etcd_watch *w = NULL;
  kolo_etcd_watch_opts opts = {.key = kolo_etcd_str("/u/w/"), .prefix = 1};
  assert_int_equal(kolo_etcd_watch_start(c, &opts, count_events, &n, &w), KOLO_OK);
  long long t0 = now_ms();
  while (!kolo_etcd_watch_connected(w) && now_ms() - t0 < 5000) sleep_ms(10);
  assert_true(kolo_etcd_watch_connected(w));
  /* Progress notifications (every 1 s) keep a healthy idle stream up. */
  sleep_ms(2500);
  assert_true(kolo_etcd_watch_connected(w));
  freeze(kolo_etcd_harness_pid(f->etcd));
  t0 = now_ms();
  while (kolo_etcd_watch_connected(w) && now_ms() - t0 < 6000) sleep_ms(50);
  long long noticed = now_ms() - t0;
  kill(kolo_etcd_harness_pid(f->etcd), SIGCONT);
  print_message("watch dropped a frozen etcd after %lld ms (idle limit 2000)\n", noticed);
  assert_true(noticed < 4500);
  assert_int_equal(kolo_etcd_put(c, kolo_etcd_str("/u/w/a"), kolo_etcd_str("1"), 0, NULL, NULL),
                   KOLO_OK);
  t0 = now_ms();
  int events = 0;
  while (now_ms() - t0 < 5000) {
    pthread_mutex_lock(&n.lock);
    events = n.events;
    pthread_mutex_unlock(&n.lock);
    if (events) break;
    sleep_ms(20);
  }
  kolo_etcd_watch_stop(w);
  assert_int_equal(events, 1);
  kolo_etcd_destroy(c);
}

static void a_dead_endpoint_fails_over_to_a_live_one(void **state) {
  fixture *f = *state;
  char dead[64];
  snprintf(dead, sizeof dead, "http://127.0.0.1:%d", dead_port());
  const char *endpoints[] = {dead, kolo_etcd_harness_url(f->etcd)};
  kolo_etcd *c = client_for(endpoints, 2, 1000);
  assert_int_equal(kolo_etcd_put(c, kolo_etcd_str("/u/fo"), kolo_etcd_str("v"), 0, NULL, NULL),
                   KOLO_OK);
  kolo_etcd_kv kv;
  assert_int_equal(kolo_etcd_get(c, kolo_etcd_str("/u/fo"), &kv, NULL), KOLO_OK);
  kolo_etcd_kv_clear(&kv);
  /* Both down: the error names both endpoints. */
  assert_int_equal(kolo_etcd_harness_stop(f->etcd), KOLO_OK);
  assert_int_equal(kolo_etcd_get(c, kolo_etcd_str("/u/fo"), &kv, NULL), KOLO_ERR_UNAVAILABLE);
  assert_non_null(strstr(kolo_etcd_last_error(), dead));
  assert_non_null(strstr(kolo_etcd_last_error(), kolo_etcd_harness_url(f->etcd)));
  assert_int_equal(kolo_etcd_harness_restart(f->etcd), KOLO_OK);
  kolo_etcd_destroy(c);
}

static void a_keepalive_rides_out_an_etcd_restart(void **state) {
  fixture *f = *state;
  const char *endpoints[] = {kolo_etcd_harness_url(f->etcd)};
  kolo_etcd *c = client_for(endpoints, 1, 1000);
  Kolo__V1__WorkerRecord m = kolo_test_worker_record("w-restart", "h", "127.0.0.1:1", 0, "idle");
  kolo_membership *reg = NULL;
  assert_int_equal(kolo_membership_register(c, &m, 6, NULL, NULL, &reg), KOLO_OK);
  assert_int_equal(kolo_etcd_harness_stop(f->etcd), KOLO_OK);
  assert_int_equal(kolo_etcd_harness_restart(f->etcd), KOLO_OK);
  sleep_ms(3000);
  assert_true(kolo_membership_alive(reg));
  kolo_etcd_kv kv;
  assert_int_equal(kolo_etcd_get(c, kolo_etcd_str("/kolo/v1/workers/w-restart"), &kv, NULL),
                   KOLO_OK);
  kolo_etcd_kv_clear(&kv);
  assert_int_equal(kolo_membership_deregister(reg), KOLO_OK);
  kolo_etcd_destroy(c);
}

typedef struct lost_count {
  pthread_mutex_t lock;
  int calls;
  long long at_ms;
} lost_count;

static void count_lost(int64_t lease, kolo_status status, const char *message, void *user) {
  (void)lease, (void)status, (void)message;
  lost_count *l = user;
  pthread_mutex_lock(&l->lock);
  l->calls++;
  l->at_ms = now_ms();
  pthread_mutex_unlock(&l->lock);
}

static int lost_calls(lost_count *l) {
  pthread_mutex_lock(&l->lock);
  int calls = l->calls;
  pthread_mutex_unlock(&l->lock);
  return calls;
}

static void only_etcd_ends_a_worker_lease_through_an_outage_longer_than_its_ttl(void **state) {
  fixture *f = *state;
  const char *endpoints[] = {kolo_etcd_harness_url(f->etcd)};
  kolo_etcd *c = client_for(endpoints, 1, 1000);
  lost_count worker = {.lock = PTHREAD_MUTEX_INITIALIZER},
             leader = {.lock = PTHREAD_MUTEX_INITIALIZER};
  Kolo__V1__WorkerRecord m = kolo_test_worker_record("w-outage", "h", "127.0.0.1:1", 0, "idle");
  kolo_membership *reg = NULL;
  assert_int_equal(kolo_membership_register(c, &m, 2, count_lost, &worker, &reg), KOLO_OK);
  int64_t lease = 0;
  kolo_etcd_keepalive *strict = NULL;
  assert_int_equal(kolo_etcd_lease_grant(c, 2, &lease, NULL), KOLO_OK);
  assert_int_equal(kolo_etcd_keepalive_start(c, lease, 2, count_lost, &leader, &strict), KOLO_OK);
  long long killed = now_ms();
  assert_int_equal(kolo_etcd_harness_kill(f->etcd), KOLO_OK);
  sleep_ms(3500); /* well past the 2 s TTL with etcd gone */
  assert_int_equal(lost_calls(&worker), 0);
  assert_true(kolo_membership_alive(reg));
  assert_int_equal(lost_calls(&leader), 1); /* a leader must step down by itself */
  print_message("strict keep-alive gave up %lld ms after the kill\n", leader.at_ms - killed);
  assert_true(leader.at_ms - killed < 3000);
  assert_int_equal(kolo_etcd_harness_restart(f->etcd), KOLO_OK);
  sleep_ms(1500); /* a few renewals against the restarted etcd (which kept the lease) */
  assert_int_equal(lost_calls(&worker), 0);
  assert_true(kolo_membership_alive(reg));
  kolo_etcd_kv kv;
  assert_int_equal(kolo_etcd_get(c, kolo_etcd_str("/kolo/v1/workers/w-outage"), &kv, NULL),
                   KOLO_OK);
  kolo_etcd_kv_clear(&kv);
  /* and once etcd says the lease is gone, it ends */
  assert_int_equal(kolo_etcd_lease_revoke(c, kolo_membership_lease(reg)), KOLO_OK);
  long long start = now_ms();
  while (lost_calls(&worker) == 0 && now_ms() - start < 3000) sleep_ms(20);
  assert_int_equal(lost_calls(&worker), 1);
  assert_false(kolo_membership_alive(reg));
  kolo_etcd_keepalive_stop(strict);
  kolo_membership_abandon(reg);
  kolo_etcd_destroy(c);
}

static void a_keepalive_stops_promptly_while_a_renewal_hangs(void **state) {
  fixture *f = *state;
  const char *endpoints[] = {kolo_etcd_harness_url(f->etcd)};
  kolo_etcd *c = client_for(endpoints, 1, 5000);
  Kolo__V1__WorkerRecord m = kolo_test_worker_record("w-hang", "h", "127.0.0.1:1", 0, "idle");
  kolo_membership *reg = NULL;
  assert_int_equal(kolo_membership_register(c, &m, 3, NULL, NULL, &reg), KOLO_OK);
  freeze(kolo_etcd_harness_pid(f->etcd));
  sleep_ms(1300); /* the renewal (every 1 s) is now waiting on the frozen etcd */
  long long t0 = now_ms();
  kolo_membership_abandon(reg);
  long long took = now_ms() - t0;
  kill(kolo_etcd_harness_pid(f->etcd), SIGCONT);
  print_message("keep-alive stopped in %lld ms with a renewal in flight\n", took);
  assert_true(took < 1500);
  kolo_etcd_destroy(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(with_etcd_stopped_every_call_fails_fast_with_a_clear_error),
      cmocka_unit_test(with_etcd_frozen_calls_end_at_their_deadline),
      cmocka_unit_test(a_watch_notices_a_frozen_etcd_and_recovers),
      cmocka_unit_test(a_dead_endpoint_fails_over_to_a_live_one),
      cmocka_unit_test(a_keepalive_rides_out_an_etcd_restart),
      cmocka_unit_test(only_etcd_ends_a_worker_lease_through_an_outage_longer_than_its_ttl),
      cmocka_unit_test(a_keepalive_stops_promptly_while_a_renewal_hangs),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
