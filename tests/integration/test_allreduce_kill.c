/* A rank SIGKILLed during each all-reduce algorithm (recursive doubling, the
 * two-level all-reduce, halving, the flat ring), on rings whose hosts are faked by
 * loopback addresses (127.0.0.<host+1>; kolo reads hosts from the peers'
 * addresses): every survivor's all-reduce must fail with KOLO_ERR_PEER_LOST
 * naming the killed rank, soon (the target is one second; the assert allows 3 s
 * for a loaded 2-core CI machine and the measured times are printed), and the
 * survivors then form the next ring (its shape, mesh and algorithm planned
 * again) and all-reduce exactly on it. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kolo/kolo.h"

#define MAX_RANKS 8
#define DETECTION_ASSERT_S 3.0 /* target 1 s; wide margin for a loaded machine */

typedef struct scenario {
  const char *algo; /* KOLO_ALLREDUCE_ALGO */
  int hosts[4];     /* ranks per host, 0-terminated */
  int victim;
  size_t count; /* floats per all-reduce while the victim is killed */
} scenario;

static int64_t now_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
}

/* Listeners for size ranks on the hosts of host_of[] (127.0.0.<host+1>). */
static void listen_all(int size, const int *host_of, kolo_listener **listeners,
                       char addresses[][64], const char **peers) {
  for (int r = 0; r < size; r++) {
    char bind[32];
    snprintf(bind, sizeof bind, "127.0.0.%d:0", host_of[r] + 1);
    assert_int_equal(kolo_listener_create(bind, &listeners[r]), KOLO_OK);
    assert_int_equal(kolo_listener_address(listeners[r], addresses[r], 64), KOLO_OK);
    peers[r] = addresses[r];
  }
}

/* The next ring: the survivors all-reduce small integers exactly (any order of
 * float sums is exact for them), a small and a large buffer. */
static int next_ring(int rank, int size, const char **peers, kolo_listener *listener) {
  kolo_ring_spec spec = {
      .epoch = 2, .rank = rank, .size = size, .peers = peers, .secret = "k", .timeout_ms = 20000};
  kolo_comm *comm = NULL;
  if (kolo_comm_create(&spec, listener, &comm) != KOLO_OK) return 1;
  int bad = 0;
  size_t counts[] = {1, 3001, 1 << 18};
  float *data = malloc(sizeof(float) << 18), *out = malloc(sizeof(float) << 18);
  for (int c = 0; c < 3; c++) {
    for (size_t i = 0; i < counts[c]; i++) data[i] = (float)((int)(i % 1000) + rank);
    if (kolo_allreduce(comm, data, out, counts[c], KOLO_FLOAT32, KOLO_SUM) != KOLO_OK) {
      bad++;
      break;
    }
    for (size_t i = 0; i < counts[c]; i++) {
      float want = (float)(size * (int)(i % 1000) + size * (size - 1) / 2);
      if (out[i] != want && bad++ < 3)
        fprintf(stderr, "next ring rank %d: [%zu] = %g, want %g\n", rank, i, out[i], want);
    }
  }
  free(data);
  free(out);
  kolo_comm_destroy(comm);
  return bad;
}

static void kill_during(const scenario *s) {
  int host_of[MAX_RANKS] = {0}, size = 0;
  for (int h = 0; h < 4 && s->hosts[h] > 0; h++)
    for (int i = 0; i < s->hosts[h]; i++) host_of[size++] = h;
  int next_host_of[MAX_RANKS] = {0}, next_size = 0;
  for (int r = 0; r < size; r++)
    if (r != s->victim) next_host_of[next_size++] = host_of[r];
  kolo_listener *listeners[MAX_RANKS], *next_listeners[MAX_RANKS];
  char addresses[MAX_RANKS][64], next_addresses[MAX_RANKS][64];
  const char *peers[MAX_RANKS], *next_peers[MAX_RANKS];
  listen_all(size, host_of, listeners, addresses, peers);
  listen_all(next_size, next_host_of, next_listeners, next_addresses, next_peers);
  int reports[MAX_RANKS][2], go[2];
  assert_int_equal(pipe(go), 0);
  pid_t pids[MAX_RANKS] = {0};
  for (int r = 0; r < size; r++) {
    assert_int_equal(pipe(reports[r]), 0);
    pids[r] = fork();
    if (pids[r] != 0) continue;
    alarm(60);
    setenv("KOLO_ALLREDUCE_ALGO", s->algo, 1);
    int next_rank = r < s->victim ? r : r - 1;
    for (int other = 0; other < size; other++)
      if (other != r) kolo_listener_destroy(listeners[other]);
    for (int other = 0; other < next_size; other++)
      if (other != next_rank || r == s->victim) kolo_listener_destroy(next_listeners[other]);
    kolo_ring_spec spec = {
        .epoch = 1, .rank = r, .size = size, .peers = peers, .secret = "k", .timeout_ms = 20000};
    kolo_comm *comm = NULL;
    if (kolo_comm_create(&spec, listeners[r], &comm) != KOLO_OK) _exit(10);
    float *data = calloc(s->count, sizeof *data), *out = calloc(s->count, sizeof *out);
    kolo_status status = KOLO_OK;
    while (status == KOLO_OK)
      status = kolo_allreduce(comm, data, out, s->count, KOLO_FLOAT32, KOLO_SUM);
    int64_t report[3] = {now_ns(), status, -1};
    int failed_rank = -1;
    kolo_comm_error(comm, &failed_rank);
    report[2] = failed_rank;
    if (write(reports[r][1], report, sizeof report) != (ssize_t)sizeof report) _exit(11);
    char token;
    if (read(go[0], &token, 1) != 1) _exit(12); /* every survivor has reported */
    kolo_comm_destroy(comm);
    free(data);
    free(out);
    _exit(next_ring(next_rank, next_size, next_peers, next_listeners[next_rank]) ? 1 : 0);
  }
  for (int r = 0; r < size; r++) kolo_listener_destroy(listeners[r]);
  for (int r = 0; r < next_size; r++) kolo_listener_destroy(next_listeners[r]);
  usleep(500 * 1000); /* the ring forms and the all-reduces run */
  int64_t killed_ns = now_ns();
  kill(pids[s->victim], SIGKILL);
  double slowest = 0;
  for (int r = 0; r < size; r++) {
    if (r == s->victim) continue;
    int64_t report[3];
    assert_int_equal(read(reports[r][0], report, sizeof report), (ssize_t)sizeof report);
    double seconds = (double)(report[0] - killed_ns) / 1e9;
    fprintf(stderr, "%s: rank %d: %s naming rank %lld after %.3f s\n", s->algo, r,
            kolo_status_name((kolo_status)report[1]), (long long)report[2], seconds);
    assert_int_equal(report[1], KOLO_ERR_PEER_LOST);
    assert_int_equal(report[2], s->victim);
    if (seconds > slowest) slowest = seconds;
  }
  fprintf(stderr, "%s: every survivor failed within %.3f s of the kill\n", s->algo, slowest);
  assert_true(slowest < DETECTION_ASSERT_S);
  for (int r = 0; r < size; r++) assert_int_equal(write(go[1], "g", 1), 1);
  for (int r = 0; r < size; r++) {
    int wstatus = 0;
    waitpid(pids[r], &wstatus, 0);
    if (r == s->victim) continue;
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
      fprintf(stderr, "%s: rank %d on the next ring ended with 0x%x\n", s->algo, r, wstatus);
    assert_true(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  }
  close(go[0]);
  close(go[1]);
  for (int r = 0; r < size; r++) {
    close(reports[r][0]);
    close(reports[r][1]);
  }
}

static void a_kill_during_recursive_doubling_fails_every_survivor_and_the_next_ring_works(
    void **state) {
  (void)state;
  scenario s = {.algo = "doubling", .hosts = {1, 2, 3}, .victim = 2, .count = 1024};
  kill_during(&s);
}

static void a_kill_during_the_two_level_all_reduce_fails_every_survivor_and_the_next_ring_works(
    void **state) {
  (void)state;
  scenario s = {.algo = "two_level", .hosts = {2, 2, 2}, .victim = 3, .count = 1 << 20};
  kill_during(&s);
}

static void a_kill_during_the_halving_all_reduce_fails_every_survivor_and_the_next_ring_works(
    void **state) {
  (void)state;
  scenario s = {.algo = "halving", .hosts = {1, 2, 3}, .victim = 3, .count = 1 << 20};
  kill_during(&s);
}

static void a_kill_during_the_flat_ring_on_uneven_hosts_fails_every_survivor(void **state) {
  (void)state;
  scenario s = {.algo = "ring", .hosts = {1, 2, 3}, .victim = 4, .count = 1 << 20};
  kill_during(&s);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(
          a_kill_during_recursive_doubling_fails_every_survivor_and_the_next_ring_works),
      cmocka_unit_test(
          a_kill_during_the_two_level_all_reduce_fails_every_survivor_and_the_next_ring_works),
      cmocka_unit_test(
          a_kill_during_the_halving_all_reduce_fails_every_survivor_and_the_next_ring_works),
      cmocka_unit_test(a_kill_during_the_flat_ring_on_uneven_hosts_fails_every_survivor),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
