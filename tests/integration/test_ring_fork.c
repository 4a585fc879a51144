/* Multi-process tests of libkolo's ring on 127.0.0.1: the parent binds one
 * listener per rank, forks the ranks with explicit ring specs, and each rank
 * checks its results; the parent asserts every rank exited 0. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>

#include <cmocka.h>

#include "kolo/kolo.h"

typedef int (*rank_body)(kolo_comm *comm, void *argument);

/* The detection bound of the issue is one second; under AddressSanitizer every
 * reduction runs several times slower, so the bound there only proves liveness. */
#if defined(__SANITIZE_ADDRESS__)
#define DETECTION_BOUND_S 3.0
#else
#define DETECTION_BOUND_S 1.0
#endif

#define MAX_RANKS 8

/* The ranks of the last run_ranks call. */
static pid_t last_pids[MAX_RANKS];
static int last_size;
static time_t last_start; /* when it began: older objects with a reused pid are not its */

/* An environment setting ("NAME=VALUE") for one rank only, applied in its child
 * before it joins the ring; a test sets and clears them. */
static char *rank_setting[MAX_RANKS];

/* Forks size ranks joined in one ring; returns how many ranks failed. */
static int run_ranks(int size, rank_body body, void *argument) {
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
  last_start = time(NULL);
  for (int r = 0; r < size; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      alarm(60);
      if (rank_setting[r] != NULL) putenv(rank_setting[r]);
      for (int other = 0; other < size; other++) {
        if (other != r) kolo_listener_destroy(listeners[other]);
      }
      kolo_ring_spec spec = {.epoch = 1,
                             .rank = r,
                             .size = size,
                             .peers = peers,
                             .secret = "s3cret",
                             .timeout_ms = 20000};
      kolo_comm *comm = NULL;
      kolo_status status = kolo_comm_create(&spec, listeners[r], &comm);
      if (status != KOLO_OK) {
        fprintf(stderr, "rank %d: create: %s\n", r, kolo_strerror(status));
        _exit(10);
      }
      int failures = body(comm, argument);
      kolo_comm_destroy(comm);
      _exit(failures ? 1 : 0);
    }
  }
  for (int r = 0; r < size; r++) kolo_listener_destroy(listeners[r]);
  memcpy(last_pids, pids, sizeof pids[0] * (size_t)size);
  last_size = size;
  int failed = 0;
  for (int r = 0; r < size; r++) {
    int wstatus = 0;
    waitpid(pids[r], &wstatus, 0);
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      fprintf(stderr, "rank %d ended with status 0x%x\n", r, wstatus);
      failed++;
    }
  }
  return failed;
}

/* The bulk transport every rank must find in both directions ("shm", "tcp"), or
 * NULL to not check; set by a test before run_ranks (the ranks inherit it). */
static const char *expected_transport;

static int transport_is_expected(kolo_comm *comm) {
  if (expected_transport == NULL || kolo_comm_size(comm) < 2) return 1;
  for (int peer = 0; peer < 2; peer++) {
    if (strcmp(kolo_comm_transport(comm, peer), expected_transport) != 0) {
      fprintf(stderr, "rank %d: %s uses %s, want %s\n", kolo_comm_rank(comm),
              peer ? "prev" : "next", kolo_comm_transport(comm, peer), expected_transport);
      return 0;
    }
  }
  return 1;
}

/* How many shared-memory objects of the last run's ranks are left in /dev/shm
 * (libkolo names them /kolo-<creator pid>-<nonce> and unlinks them as soon as both
 * sides have mapped them, so none may be left). An object older than the run is
 * another process's that had the same pid (a killed test elsewhere on the machine). */
static int leftover_shm_objects(void) {
  DIR *dir = opendir("/dev/shm");
  if (dir == NULL) return 0;
  int n = 0;
  struct dirent *entry;
  while ((entry = readdir(dir)) != NULL) {
    for (int r = 0; r < last_size; r++) {
      char prefix[32];
      snprintf(prefix, sizeof prefix, "kolo-%d-", (int)last_pids[r]);
      if (strncmp(entry->d_name, prefix, strlen(prefix)) != 0) continue;
      char path[300];
      struct stat info;
      snprintf(path, sizeof path, "/dev/shm/%s", entry->d_name);
      n += stat(path, &info) != 0 || info.st_mtime >= last_start;
    }
  }
  closedir(dir);
  return n;
}

static float value_of(int rank, size_t index) {
  return (float)((rank + 1) * 0.5 + (double)(index % 97));
}

static int allreduce_float_sum(kolo_comm *comm, void *argument) {
  size_t count = *(size_t *)argument;
  int rank = kolo_comm_rank(comm), size = kolo_comm_size(comm);
  float *data = malloc(count * sizeof *data + 4);
  float *out = malloc(count * sizeof *out + 4);
  for (size_t i = 0; i < count; i++) data[i] = value_of(rank, i);
  int bad = transport_is_expected(comm) ? 0 : 1;
  for (int round = 0; round < 3; round++) {
    kolo_status status = kolo_allreduce(comm, data, out, count, KOLO_FLOAT32, KOLO_SUM);
    if (status != KOLO_OK) {
      fprintf(stderr, "rank %d: allreduce: %s\n", rank, kolo_strerror(status));
      bad++;
      break;
    }
    for (size_t i = 0; i < count; i++) {
      float expected = 0;
      for (int r = 0; r < size; r++) expected += value_of(r, i);
      if (out[i] != expected && bad++ < 5) {
        fprintf(stderr, "rank %d: [%zu] = %g, want %g\n", rank, i, out[i], expected);
      }
    }
  }
  free(data);
  free(out);
  return bad;
}

static void allreduce_matches_the_serial_sum_for_many_sizes(void **state) {
  (void)state;
  size_t counts[] = {0, 1, 3, 7, 1000, 8193, 300001, 2000003};
  expected_transport = "shm"; /* every rank on this host: the bulk path is shared memory */
  for (int size = 1; size <= 5; size++) {
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      int failed = run_ranks(size, allreduce_float_sum, &counts[c]);
      assert_int_equal(leftover_shm_objects(), 0);
      if (failed) fprintf(stderr, "size %d count %zu failed\n", size, counts[c]);
      assert_int_equal(failed, 0);
    }
  }
  expected_transport = NULL;
}

/* The same sums over plain TCP data connections (shared memory turned off). */
static void allreduce_is_right_over_tcp_without_shared_memory(void **state) {
  (void)state;
  setenv("KOLO_SHM", "0", 1);
  expected_transport = "tcp";
  size_t counts[] = {5, 40000, 2000003};
  for (int size = 2; size <= 4; size++) {
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      assert_int_equal(run_ranks(size, allreduce_float_sum, &counts[c]), 0);
    }
  }
  expected_transport = NULL;
  unsetenv("KOLO_SHM");
}

/* FNV-1a over the bytes of a result, to compare results across ranks. */
static uint64_t hash_bytes(const void *data, size_t length) {
  const unsigned char *p = data;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < length; i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

/* Rank r's input: NaN on one rank only and zeros of opposite signs at some
 * positions (where min/max depend on the operands' order), plain values elsewhere. */
static float tricky_value(int rank, size_t i) {
  switch (i % 7) {
    case 0:
      return rank == 0 ? __builtin_nanf("") : 1.0f;
    case 1:
      return rank == 1 ? __builtin_nanf("") : 2.0f;
    case 2:
      return rank == 0 ? -0.0f : 0.0f;
    default:
      return value_of(rank, i);
  }
}

static int plain_result_is_right(kolo_op op, size_t i, float got) {
  if (i % 7 < 3) return 1; /* only agreement is asserted there */
  float a = value_of(0, i), b = value_of(1, i);
  float want = op == KOLO_MIN   ? (a < b ? a : b)
               : op == KOLO_MAX ? (a > b ? a : b)
               : op == KOLO_AVG ? (a + b) / 2
                                : a + b;
  return got == want;
}

/* Two ranks over TCP exchange whole buffers (the pair all-reduce): results are
 * right, bit for bit the same on both ranks even where the operands' order
 * matters, and the same in place as out of place. */
static int pair_results_agree(kolo_comm *comm, void *argument) {
  size_t count = *(size_t *)argument;
  int rank = kolo_comm_rank(comm), bad = !transport_is_expected(comm);
  float *data = malloc(count * sizeof *data), *out = malloc(count * sizeof *out);
  const kolo_op ops[] = {KOLO_SUM, KOLO_AVG, KOLO_MIN, KOLO_MAX};
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
    uint64_t hashes[2];
    for (int in_place = 0; in_place < 2; in_place++) {
      for (size_t i = 0; i < count; i++) data[i] = tricky_value(rank, i);
      float *target = in_place ? data : out;
      if (kolo_allreduce(comm, data, target, count, KOLO_FLOAT32, ops[o]) != KOLO_OK) return 1;
      for (size_t i = 0; i < count; i++) {
        if (!plain_result_is_right(ops[o], i, target[i]) && bad++ < 5) {
          fprintf(stderr, "rank %d op %d in place %d: [%zu] = %g\n", rank, (int)ops[o], in_place, i,
                  target[i]);
        }
      }
      hashes[in_place] = hash_bytes(target, count * sizeof *target);
    }
    if (hashes[0] != hashes[1]) {
      fprintf(stderr, "rank %d op %d: in place differs from out of place\n", rank, (int)ops[o]);
      bad++;
    }
    int64_t mine = (int64_t)hashes[0], low = 0, high = 0;
    if (kolo_allreduce(comm, &mine, &low, 1, KOLO_INT64, KOLO_MIN) != KOLO_OK ||
        kolo_allreduce(comm, &mine, &high, 1, KOLO_INT64, KOLO_MAX) != KOLO_OK) {
      return 1;
    }
    if (low != high) {
      fprintf(stderr, "rank %d op %d: the ranks' results differ\n", rank, (int)ops[o]);
      bad++;
    }
  }
  free(data);
  free(out);
  return bad;
}

static void two_ranks_over_tcp_agree_bit_for_bit(void **state) {
  (void)state;
  setenv("KOLO_SHM", "0", 1);
  expected_transport = "tcp";
  size_t counts[] = {8192 + 3, 262144, 1000003}; /* 32 KiB + 12 B, 1 MiB, ~4 MiB */
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    assert_int_equal(run_ranks(2, pair_results_agree, &counts[c]), 0);
  }
  /* a tiny socket buffer: in place, the reduction keeps waiting for the send */
  setenv("KOLO_SOCKET_BUFFER_BYTES", "4096", 1);
  assert_int_equal(run_ranks(2, pair_results_agree, &counts[1]), 0);
  unsetenv("KOLO_SOCKET_BUFFER_BYTES");
  expected_transport = NULL;
  unsetenv("KOLO_SHM");
}

/* The TCP transport's detour through its bounce buffer (32 bytes off the
 * caller's alignment, chosen when the kernel's straight copy is slow) moves the
 * same bytes: forced on both ranks, on one rank only, with a tiny socket buffer
 * (partial sends and receives), and on a ring of three (receives straight into
 * the caller's buffer). */
static void the_tcp_bounce_buffer_detour_keeps_results_exact(void **state) {
  (void)state;
  setenv("KOLO_SHM", "0", 1);
  setenv("KOLO_TCP_ALIGN", "shift", 1);
  expected_transport = "tcp";
  size_t counts[] = {8192 + 3, 262144, 1000003};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    assert_int_equal(run_ranks(2, pair_results_agree, &counts[c]), 0);
  }
  static char straight[] = "KOLO_TCP_ALIGN=0";
  rank_setting[1] = straight;
  assert_int_equal(run_ranks(2, pair_results_agree, &counts[2]), 0);
  rank_setting[1] = NULL;
  setenv("KOLO_SOCKET_BUFFER_BYTES", "4096", 1);
  assert_int_equal(run_ranks(2, pair_results_agree, &counts[1]), 0);
  unsetenv("KOLO_SOCKET_BUFFER_BYTES");
  size_t ring_count = 2000003;
  assert_int_equal(run_ranks(3, allreduce_float_sum, &ring_count), 0);
  expected_transport = NULL;
  unsetenv("KOLO_TCP_ALIGN");
  unsetenv("KOLO_SHM");
}

/* Two ranks over shared memory exchange small buffers the same way (the peer's
 * buffer reduced straight out of the ring): right, bit for bit the same on both
 * ranks and in place. Then the pair forced onto 4 MB buffers with a 64 KiB ring
 * one way and 8 MiB the other: in place, rank 0's reduction must keep waiting
 * for its own send while the peer's data sits unread in the ring. */
static void two_ranks_over_shared_memory_agree_bit_for_bit(void **state) {
  (void)state;
  expected_transport = "shm";
  size_t counts[] = {3, 4096 + 3, 8192, 8192 + 3}; /* the last is past the pair: the ring */
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    assert_int_equal(run_ranks(2, pair_results_agree, &counts[c]), 0);
  }
  setenv("KOLO_PAIR_SHM_MAX_BYTES", "64M", 1);
  /* a rank writes the ring it offers: rank 1's is large, so its whole buffer
   * lands in rank 0's view long before rank 0 has sent its own */
  static char small_ring[] = "KOLO_SHM_BYTES=65536", large_ring[] = "KOLO_SHM_BYTES=8388608";
  rank_setting[0] = small_ring;
  rank_setting[1] = large_ring;
  size_t large = 1000003;
  assert_int_equal(run_ranks(2, pair_results_agree, &large), 0);
  assert_int_equal(leftover_shm_objects(), 0);
  rank_setting[0] = rank_setting[1] = NULL;
  unsetenv("KOLO_PAIR_SHM_MAX_BYTES");
  expected_transport = NULL;
}

/* A shared-memory ring much smaller than the messages: the ring wraps many times. */
static void allreduce_is_right_through_a_small_wrapping_shared_memory_ring(void **state) {
  (void)state;
  setenv("KOLO_SHM_BYTES", "65536", 1);
  expected_transport = "shm"; /* really through shared memory, not a silent TCP fallback */
  size_t counts[] = {40000, 2000003};
  for (int size = 2; size <= 3; size++) {
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      assert_int_equal(run_ranks(size, allreduce_float_sum, &counts[c]), 0);
      assert_int_equal(leftover_shm_objects(), 0); /* nothing left in /dev/shm */
    }
  }
  expected_transport = NULL;
  unsetenv("KOLO_SHM_BYTES");
}

/* Reductions read straight out of the shared-memory ring (no staging copy): a
 * one-byte operation first leaves the ring's position off the element grid, so
 * float64 and int32 elements straddle the ring's end and go through staging,
 * the rest is reduced in place from the ring; in and out of place, exact. */
static int misaligned_reductions(kolo_comm *comm, void *argument) {
  size_t count = *(size_t *)argument;
  int rank = kolo_comm_rank(comm), size = kolo_comm_size(comm);
  int bad = !transport_is_expected(comm);
  double *wide = malloc(count * sizeof *wide), *wide_out = malloc(count * sizeof *wide_out);
  int32_t *narrow = malloc(count * sizeof *narrow), *narrow_out = malloc(count * sizeof *narrow);
  for (int round = 0; round < 4 && !bad; round++) {
    uint8_t token = (uint8_t)(rank + round), top = 0;
    if (kolo_allreduce(comm, &token, &top, 1, KOLO_UINT8, KOLO_MAX) != KOLO_OK) return 1;
    if (top != (uint8_t)(size - 1 + round)) bad++;
    int in_place = round % 2;
    for (size_t i = 0; i < count; i++) {
      wide[i] = (double)(rank + 1) * 0.25 + (double)(i % 1001);
      narrow[i] = (int32_t)(rank * 3 + (int)(i % 89));
    }
    double *wide_target = in_place ? wide : wide_out;
    int32_t *narrow_target = in_place ? narrow : narrow_out;
    if (kolo_allreduce(comm, wide, wide_target, count, KOLO_FLOAT64, KOLO_SUM) != KOLO_OK ||
        kolo_allreduce(comm, narrow, narrow_target, count, KOLO_INT32, KOLO_MAX) != KOLO_OK) {
      return 1;
    }
    for (size_t i = 0; i < count; i++) {
      double want = 0.25 * size * (size + 1) / 2 + (double)size * (double)(i % 1001);
      int32_t top_narrow = (int32_t)((size - 1) * 3 + (int)(i % 89));
      if ((wide_target[i] != want || narrow_target[i] != top_narrow) && bad++ < 5) {
        fprintf(stderr, "rank %d round %d: [%zu] = %g / %d, want %g / %d\n", rank, round, i,
                wide_target[i], narrow_target[i], want, top_narrow);
      }
    }
  }
  free(wide);
  free(wide_out);
  free(narrow);
  free(narrow_out);
  return bad;
}

static void reductions_from_a_misaligned_wrapping_shared_memory_ring_are_exact(void **state) {
  (void)state;
  setenv("KOLO_SHM_BYTES", "65536", 1);
  expected_transport = "shm";
  size_t counts[] = {8191, 100003}; /* below and above the ring's size */
  for (int size = 2; size <= 3; size++) {
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      assert_int_equal(run_ranks(size, misaligned_reductions, &counts[c]), 0);
      assert_int_equal(leftover_shm_objects(), 0);
    }
  }
  expected_transport = NULL;
  unsetenv("KOLO_SHM_BYTES");
}

static int many_collectives(kolo_comm *comm, void *argument) {
  (void)argument;
  int rank = kolo_comm_rank(comm), size = kolo_comm_size(comm);
  int bad = 0;
  /* allgather with counts rank + 1 */
  size_t total = (size_t)size * (size_t)(size + 1) / 2;
  int32_t mine[MAX_RANKS + 1], all[64];
  size_t counts[MAX_RANKS];
  for (int i = 0; i <= rank; i++) mine[i] = rank * 100 + i;
  if (kolo_allgather(comm, mine, (size_t)rank + 1, all, 64, counts, KOLO_INT32) != KOLO_OK) bad++;
  size_t position = 0;
  for (int r = 0; r < size; r++) {
    if (counts[r] != (size_t)r + 1) bad++;
    for (int i = 0; i <= r; i++) {
      if (all[position++] != r * 100 + i) bad++;
    }
  }
  if (position != total) bad++;
  /* broadcast from every root */
  for (int root = 0; root < size; root++) {
    int64_t values[1000];
    for (int i = 0; i < 1000; i++) values[i] = rank == root ? root * 1000 + i : -1;
    if (kolo_broadcast(comm, values, 1000, KOLO_INT64, root) != KOLO_OK) bad++;
    for (int i = 0; i < 1000; i++) {
      if (values[i] != root * 1000 + i) bad++;
    }
  }
  /* reducescatter: block b of rank r holds r + b */
  double send[MAX_RANKS * 5], recv[5];
  for (int b = 0; b < size; b++) {
    for (int i = 0; i < 5; i++) send[b * 5 + i] = rank + b + i;
  }
  if (kolo_reducescatter(comm, send, recv, 5, KOLO_FLOAT64, KOLO_MAX) != KOLO_OK) bad++;
  for (int i = 0; i < 5; i++) {
    if (recv[i] != (double)(size - 1 + rank + i)) bad++;
  }
  /* non-blocking: two in flight */
  int32_t x[4] = {rank, rank, rank, rank}, y[4] = {1, 2, 3, 4};
  kolo_request *first = NULL, *second = NULL;
  if (kolo_allreduce_async(comm, x, x, 4, KOLO_INT32, KOLO_SUM, &first) != KOLO_OK) bad++;
  if (kolo_allreduce_async(comm, y, y, 4, KOLO_INT32, KOLO_PROD, &second) != KOLO_OK) bad++;
  if (kolo_wait(first) != KOLO_OK || kolo_wait(second) != KOLO_OK) bad++;
  int64_t product = 1;
  for (int r = 0; r < size; r++) product *= 1;
  if (x[0] != size * (size - 1) / 2) bad++;
  if (y[3] != (int32_t)(1LL << (2 * size))) bad++;
  (void)product;
  if (kolo_barrier(comm) != KOLO_OK) bad++;
  if (bad) fprintf(stderr, "rank %d: %d mismatches\n", rank, bad);
  return bad;
}

static void other_collectives_work_for_every_ring_size(void **state) {
  (void)state;
  for (int size = 1; size <= 6; size++)
    assert_int_equal(run_ranks(size, many_collectives, NULL), 0);
}

static double cpu_seconds(void) {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return (double)(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         (double)(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

/* Small all-reduces (they spin a little before sleeping), then rank 1 comes
 * 0.8 s late: rank 0's wait must sleep, not spin. */
static int late_peer_body(kolo_comm *comm, void *argument) {
  size_t count = argument ? *(size_t *)argument : 1024; /* 4 KiB: the gather path */
  int steps = count > 1024 ? 20 : 200;
  int rank = kolo_comm_rank(comm), bad = !transport_is_expected(comm);
  float *values = malloc(count * sizeof *values), *sums = malloc(count * sizeof *sums);
  for (int step = 0; step < steps; step++) {
    for (size_t i = 0; i < count; i++) values[i] = (float)(rank + (int)(i % 1000) + step);
    if (kolo_allreduce(comm, values, sums, count, KOLO_FLOAT32, KOLO_SUM) != KOLO_OK) return 1;
    for (size_t i = 0; i < count; i++) bad += sums[i] != (float)(1 + 2 * ((int)(i % 1000) + step));
  }
  double before = cpu_seconds();
  if (rank == 1) usleep(800 * 1000);
  if (kolo_allreduce(comm, values, sums, count, KOLO_FLOAT32, KOLO_SUM) != KOLO_OK) return 1;
  double cpu = cpu_seconds() - before;
  if (rank == 0 && cpu > 0.1) {
    fprintf(stderr, "rank 0: waiting 0.8 s for rank 1 cost %.3f s of CPU\n", cpu);
    bad++;
  }
  free(values);
  free(sums);
  return bad;
}

static void a_rank_waiting_for_a_late_peer_sleeps_on_both_transports(void **state) {
  (void)state;
  expected_transport = "shm";
  assert_int_equal(run_ranks(2, late_peer_body, NULL), 0);
  setenv("KOLO_SHM", "0", 1);
  expected_transport = "tcp";
  assert_int_equal(run_ranks(2, late_peer_body, NULL), 0);
  size_t pair_count = 1 << 18; /* 1 MiB: two ranks' pair all-reduce */
  assert_int_equal(run_ranks(2, late_peer_body, &pair_count), 0);
  unsetenv("KOLO_SHM");
  expected_transport = NULL;
}

/* Every rank loops over large all-reduces; the parent SIGKILLs one rank and the
 * others must report KOLO_ERR_PEER_LOST naming it within a second. */
static void killed_rank_is_reported_within_a_second(int size, size_t count, int out_of_place) {
  {
    int victim = size - 2;
    kolo_listener *listeners[MAX_RANKS];
    char addresses[MAX_RANKS][64];
    const char *peers[MAX_RANKS];
    int pipes[MAX_RANKS][2];
    for (int r = 0; r < size; r++) {
      assert_int_equal(kolo_listener_create("127.0.0.1:0", &listeners[r]), KOLO_OK);
      kolo_listener_address(listeners[r], addresses[r], sizeof addresses[r]);
      peers[r] = addresses[r];
      assert_int_equal(pipe(pipes[r]), 0);
    }
    pid_t pids[MAX_RANKS];
    for (int r = 0; r < size; r++) {
      pids[r] = fork();
      if (pids[r] == 0) {
        alarm(30);
        for (int other = 0; other < size; other++) {
          if (other != r) kolo_listener_destroy(listeners[other]);
        }
        kolo_ring_spec spec = {.epoch = 7, .rank = r, .size = size, .peers = peers, .secret = "x"};
        kolo_comm *comm = NULL;
        if (kolo_comm_create(&spec, listeners[r], &comm) != KOLO_OK) _exit(10);
        float *data = calloc(count, sizeof *data);
        float *out = out_of_place ? calloc(count, sizeof *out) : data;
        kolo_status status = KOLO_OK;
        while (status == KOLO_OK)
          status = kolo_allreduce(comm, data, out, count, KOLO_FLOAT32, KOLO_SUM);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int failed_rank = -1;
        kolo_status recorded = kolo_comm_error(comm, &failed_rank);
        int64_t report[3] = {(int64_t)status * 1000 + failed_rank,
                             (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec, recorded};
        ssize_t written = write(pipes[r][1], report, sizeof report);
        (void)written;
        kolo_comm_destroy(comm);
        _exit(0);
      }
    }
    for (int r = 0; r < size; r++) kolo_listener_destroy(listeners[r]);
    struct timespec pause = {0, 300 * 1000000L};
    nanosleep(&pause, NULL);
    struct timespec killed;
    clock_gettime(CLOCK_MONOTONIC, &killed);
    kill(pids[victim], SIGKILL);
    int64_t killed_ns = (int64_t)killed.tv_sec * 1000000000LL + killed.tv_nsec;
    for (int r = 0; r < size; r++) {
      int wstatus;
      waitpid(pids[r], &wstatus, 0);
      if (r == victim) continue;
      int64_t report[3];
      assert_int_equal(read(pipes[r][0], report, sizeof report), (ssize_t)sizeof report);
      double seconds = (double)(report[1] - killed_ns) / 1e9;
      fprintf(stderr, "size %d rank %d: status %lld rank %lld after %.3f s\n", size, r,
              (long long)(report[0] / 1000), (long long)(report[0] % 1000), seconds);
      assert_int_equal(report[0], KOLO_ERR_PEER_LOST * 1000 + victim);
      assert_true(seconds < DETECTION_BOUND_S);
    }
  }
}

static void survivors_report_the_killed_rank_within_a_second(void **state) {
  (void)state;
  for (int size = 2; size <= 5; size++) killed_rank_is_reported_within_a_second(size, 8 << 20, 0);
}

/* The same through two ranks' small pair all-reduce over shared memory (16 KiB
 * reduced straight out of the ring, in place). */
static void a_killed_peer_is_reported_within_a_second_over_shared_memory_pairs(void **state) {
  (void)state;
  killed_rank_is_reported_within_a_second(2, 4096, 0);
}

/* The same through two ranks' pair all-reduce over TCP (4 MiB, out of place). */
static void a_killed_peer_is_reported_within_a_second_over_tcp_pairs(void **state) {
  (void)state;
  setenv("KOLO_SHM", "0", 1);
  killed_rank_is_reported_within_a_second(2, 1 << 20, 1);
  unsetenv("KOLO_SHM");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(allreduce_matches_the_serial_sum_for_many_sizes),
      cmocka_unit_test(other_collectives_work_for_every_ring_size),
      cmocka_unit_test(allreduce_is_right_over_tcp_without_shared_memory),
      cmocka_unit_test(two_ranks_over_tcp_agree_bit_for_bit),
      cmocka_unit_test(the_tcp_bounce_buffer_detour_keeps_results_exact),
      cmocka_unit_test(two_ranks_over_shared_memory_agree_bit_for_bit),
      cmocka_unit_test(allreduce_is_right_through_a_small_wrapping_shared_memory_ring),
      cmocka_unit_test(reductions_from_a_misaligned_wrapping_shared_memory_ring_are_exact),
      cmocka_unit_test(survivors_report_the_killed_rank_within_a_second),
      cmocka_unit_test(a_killed_peer_is_reported_within_a_second_over_tcp_pairs),
      cmocka_unit_test(a_killed_peer_is_reported_within_a_second_over_shared_memory_pairs),
      cmocka_unit_test(a_rank_waiting_for_a_late_peer_sleeps_on_both_transports),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
