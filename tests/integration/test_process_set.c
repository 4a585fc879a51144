/* Process sets (include/kolo/process_set.h) across forked ranks on 127.0.0.1:
 * kolo_comm_split's agreement (non-members get no communicator, bad or
 * disagreeing options fail on every rank and leave the parent usable), every
 * collective on a set exact against a reference computed here, and a killed
 * member failing the other members within a second. The parent process forks
 * the ranks with explicit ring specs and asserts that every rank exited 0. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kolo/engine.h"
#include "kolo/kolo.h"
#include "kolo/process_set.h"

#define MAX_RANKS 6
/* The bound; measured 10-60 ms here (under AddressSanitizer only liveness). */
#if defined(__SANITIZE_ADDRESS__)
#define DETECTION_BOUND_S 3.0
#else
#define DETECTION_BOUND_S 1.0
#endif

typedef int (*rank_body)(kolo_comm *comm);

/* Forks size ranks joined in one ring; returns the ranks that failed (bit r: rank r). */
static int run_ranks(int size, rank_body body) {
  kolo_listener *listeners[MAX_RANKS];
  char addresses[MAX_RANKS][64];
  const char *peers[MAX_RANKS];
  for (int r = 0; r < size; r++) {
    assert_int_equal(kolo_listener_create("127.0.0.1:0", &listeners[r]), KOLO_OK);
    assert_int_equal(kolo_listener_address(listeners[r], addresses[r], sizeof addresses[r]),
                     KOLO_OK);
    peers[r] = addresses[r];
  }
  pid_t pids[MAX_RANKS];
  for (int r = 0; r < size; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      alarm(60);
      for (int other = 0; other < size; other++)
        if (other != r) kolo_listener_destroy(listeners[other]);
      kolo_ring_spec spec = {
          .epoch = 3, .rank = r, .size = size, .peers = peers, .secret = "s", .timeout_ms = 20000};
      kolo_comm *comm = NULL;
      if (kolo_comm_create(&spec, listeners[r], &comm) != KOLO_OK) _exit(10);
      int failures = body(comm);
      kolo_comm_destroy(comm);
      _exit(failures ? 1 : 0);
    }
  }
  for (int r = 0; r < size; r++) kolo_listener_destroy(listeners[r]);
  int failed = 0;
  for (int r = 0; r < size; r++) {
    int wstatus = 0;
    waitpid(pids[r], &wstatus, 0);
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      fprintf(stderr, "rank %d ended with status 0x%x\n", r, wstatus);
      failed |= 1 << r;
    }
  }
  return failed;
}

#define EXPECT(cond)                                                                            \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      fprintf(stderr, "rank %d: %s:%d: %s\n", kolo_comm_rank(comm), __FILE__, __LINE__, #cond); \
      return 1;                                                                                 \
    }                                                                                           \
  } while (0)

/* What parent rank g contributes at index i: integers, so every sum is exact. */
static int64_t value_of(int g, size_t i) {
  return (int64_t)(g + 1) * 1000 + (int64_t)(i % 251);
}

/* Every collective of the set {members} on set, checked element by element
 * against the definition over the members' parent ranks. */
static int check_collectives(kolo_comm *comm, kolo_comm *set, const int *members, int n) {
  int me = kolo_comm_rank(set);
  EXPECT(kolo_comm_size(set) == n && members[me] == kolo_comm_rank(comm));
  enum { COUNT = 70000 }; /* past the small path: the ring's own algorithms run */
  int64_t *send = malloc(COUNT * sizeof *send), *recv = malloc(COUNT * n * sizeof *recv);
  EXPECT(send != NULL && recv != NULL);
  for (size_t i = 0; i < COUNT; i++) send[i] = value_of(members[me], i);
  EXPECT(kolo_allreduce(set, send, recv, COUNT, KOLO_INT64, KOLO_SUM) == KOLO_OK);
  for (size_t i = 0; i < COUNT; i++) {
    int64_t want = 0;
    for (int m = 0; m < n; m++) want += value_of(members[m], i);
    EXPECT(recv[i] == want);
  }
  /* all-gather: member m gives m + 1 elements */
  size_t counts[MAX_RANKS];
  EXPECT(kolo_allgather(set, send, (size_t)me + 1, recv, COUNT, counts, KOLO_INT64) == KOLO_OK);
  size_t at = 0;
  for (int m = 0; m < n; m++) {
    EXPECT(counts[m] == (size_t)m + 1);
    for (size_t i = 0; i <= (size_t)m; i++) EXPECT(recv[at++] == value_of(members[m], i));
  }
  /* broadcast from the set's last rank */
  for (size_t i = 0; i < COUNT; i++) recv[i] = value_of(members[me], i);
  EXPECT(kolo_broadcast(set, recv, COUNT, KOLO_INT64, n - 1) == KOLO_OK);
  for (size_t i = 0; i < COUNT; i++) EXPECT(recv[i] == value_of(members[n - 1], i));
  /* reduce-scatter: block me of the sum */
  size_t block = COUNT / (size_t)n;
  EXPECT(kolo_reducescatter(set, send, recv, block, KOLO_INT64, KOLO_MAX) == KOLO_OK);
  for (size_t i = 0; i < block; i++) {
    int64_t want = INT64_MIN;
    for (int m = 0; m < n; m++)
      if (value_of(members[m], (size_t)me * block + i) > want)
        want = value_of(members[m], (size_t)me * block + i);
    EXPECT(recv[i] == want);
  }
  /* all-to-all (engine): member m sends 2 elements to each member */
  size_t send_counts[MAX_RANKS], recv_counts[MAX_RANKS];
  for (int m = 0; m < n; m++) send_counts[m] = 2;
  kolo_request *request = NULL;
  kolo_result result;
  EXPECT(kolo_alltoall_named(set, "a2a", send, send_counts, NULL, 0, recv_counts, KOLO_INT64,
                             &request) == KOLO_OK);
  EXPECT(kolo_wait_result(request, &result) == KOLO_OK && result.output_count == 2 * (size_t)n);
  const int64_t *got = result.output;
  for (int m = 0; m < n; m++)
    for (size_t i = 0; i < 2; i++)
      EXPECT(got[2 * m + i] == value_of(members[m], 2 * (size_t)me + i));
  kolo_free(result.output);
  free(send);
  free(recv);
  return 0;
}

static kolo_status split(kolo_comm *comm, int id, const int *ranks, int n, kolo_comm **out) {
  kolo_split_options options = {.ranks = ranks, .n_ranks = n, .id = id};
  return kolo_comm_split(comm, &options, out);
}

/* The sets {0,2} and {1,2} of a ring of 3, {0..n-1} of the whole ring, {1}
 * alone; non-members get NULL; the parent still runs its own collectives. */
static int sets_run_every_collective_exactly(kolo_comm *comm) {
  static const int outer[] = {0, 2}, inner[] = {1, 2}, all[] = {0, 1, 2}, one[] = {1};
  int rank = kolo_comm_rank(comm);
  struct {
    const int *ranks;
    int n;
  } sets[] = {{outer, 2}, {inner, 2}, {all, 3}, {one, 1}};
  for (int s = 0; s < 4; s++) {
    kolo_comm *set = NULL;
    EXPECT(split(comm, s + 1, sets[s].ranks, sets[s].n, &set) == KOLO_OK);
    int member = 0;
    for (int i = 0; i < sets[s].n; i++) member |= sets[s].ranks[i] == rank;
    EXPECT((set != NULL) == member);
    if (set != NULL && check_collectives(comm, set, sets[s].ranks, sets[s].n) != 0) return 1;
    kolo_comm_destroy(set);
    int64_t x = rank, sum = 0;
    EXPECT(kolo_allreduce(comm, &x, &sum, 1, KOLO_INT64, KOLO_SUM) == KOLO_OK && sum == 3);
  }
  return 0;
}

static void sets_run_every_collective_exactly_on_3_ranks(void **state) {
  (void)state;
  assert_int_equal(run_ranks(3, sets_run_every_collective_exactly), 0);
}

/* Bad options on every rank, or options that differ between ranks, fail alike
 * on every rank; the parent stays usable. */
static int bad_options_fail_on_every_rank(kolo_comm *comm) {
  int rank = kolo_comm_rank(comm);
  static const int out_of_range[] = {0, 3}, unsorted[] = {1, 0}, repeated[] = {1, 1};
  kolo_comm *set = (kolo_comm *)1;
  EXPECT(split(comm, 1, out_of_range, 2, &set) == KOLO_ERR_INVALID_ARG && set == NULL);
  EXPECT(split(comm, 1, unsorted, 2, &set) == KOLO_ERR_INVALID_ARG);
  EXPECT(split(comm, 1, repeated, 2, &set) == KOLO_ERR_INVALID_ARG);
  EXPECT(split(comm, 0, unsorted + 1, 1, &set) == KOLO_ERR_INVALID_ARG); /* id 0 */
  EXPECT(split(comm, 1, out_of_range, 0, &set) == KOLO_ERR_INVALID_ARG); /* no members */
  /* rank 2 alone names other members, or another id: a mismatch on every rank */
  static const int usual[] = {0, 1}, other[] = {0, 2};
  EXPECT(split(comm, 1, rank == 2 ? other : usual, 2, &set) == KOLO_ERR_MISMATCH && set == NULL);
  EXPECT(split(comm, rank == 1 ? 2 : 1, usual, 2, &set) == KOLO_ERR_MISMATCH && set == NULL);
  /* one rank's bad options fail the others too (they took part in the agreement) */
  EXPECT(split(comm, 1, rank == 0 ? out_of_range : usual, 2, &set) == KOLO_ERR_INVALID_ARG);
  int64_t x = rank, sum = 0;
  EXPECT(kolo_allreduce(comm, &x, &sum, 1, KOLO_INT64, KOLO_SUM) == KOLO_OK && sum == 3);
  EXPECT(split(comm, 1, usual, 2, &set) == KOLO_OK && (set != NULL) == (rank < 2));
  kolo_comm_destroy(set);
  return 0;
}

static void bad_or_disagreeing_options_fail_on_every_rank(void **state) {
  (void)state;
  assert_int_equal(run_ranks(3, bad_options_fail_on_every_rank), 0);
}

/* shared with the ranks: when the victim died, when each survivor saw it */
static int64_t *shared_clock;

static int64_t now_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
}

/* Ring of 4, set {1,2,3}: rank 3 SIGKILLs itself while the set runs
 * all-reduces; members 1 and 2 must fail with PEER_LOST naming set rank 2 within
 * a second. */
static int killed_member_fails_the_set(kolo_comm *comm) {
  static const int members[] = {1, 2, 3};
  kolo_comm *set = NULL;
  EXPECT(split(comm, 9, members, 3, &set) == KOLO_OK);
  if (set == NULL) return 0; /* rank 0: not a member */
  enum { COUNT = 1 << 18 };
  float *data = calloc(COUNT, sizeof *data);
  EXPECT(data != NULL);
  if (kolo_comm_rank(comm) == 3) {
    struct timespec pause = {0, 300 * 1000000L};
    nanosleep(&pause, NULL);
    shared_clock[0] = now_ns();
    raise(SIGKILL);
  }
  kolo_status status = KOLO_OK;
  while (status == KOLO_OK) status = kolo_allreduce(set, data, data, COUNT, KOLO_FLOAT32, KOLO_SUM);
  shared_clock[kolo_comm_rank(comm)] = now_ns();
  int failed_rank = -1;
  kolo_status recorded = kolo_comm_error(set, &failed_rank);
  fprintf(stderr, "rank %d: %s, set rank %d, %.3f s after the kill\n", kolo_comm_rank(comm),
          kolo_strerror(status), failed_rank,
          (double)(shared_clock[kolo_comm_rank(comm)] - shared_clock[0]) / 1e9);
  EXPECT(status == KOLO_ERR_PEER_LOST && recorded == KOLO_ERR_PEER_LOST && failed_rank == 2);
  kolo_comm_destroy(set);
  free(data);
  return 0;
}

static void a_killed_member_fails_the_others_within_a_second(void **state) {
  (void)state;
  shared_clock = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(shared_clock != MAP_FAILED);
  memset(shared_clock, 0, 4096);
  int failed = run_ranks(4, killed_member_fails_the_set);
  assert_int_equal(failed, 1 << 3); /* the killed rank only: the others' checks passed */
  for (int r = 1; r <= 2; r++) {
    assert_true(shared_clock[r] > shared_clock[0]);
    assert_true((double)(shared_clock[r] - shared_clock[0]) / 1e9 < DETECTION_BOUND_S);
  }
  munmap(shared_clock, 4096);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sets_run_every_collective_exactly_on_3_ranks),
      cmocka_unit_test(bad_or_disagreeing_options_fail_on_every_rank),
      cmocka_unit_test(a_killed_member_fails_the_others_within_a_second),
  };
  return cmocka_run_group_tests(tests, 0, NULL);
}
