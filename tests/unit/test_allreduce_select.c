/* Unit tests for the all-reduce selection (collective/algo/select.c) and the
 * pure parts of the mesh it relies on (collective/net/mesh.c): the ring's shape
 * from the peers' addresses, recursive doubling's partners, which pairs get a
 * mesh link, and which algorithm runs for a shape, a size and an override.
 * Every rank computes these alike from the same inputs: none takes the rank's
 * own buffers or timing, and the shape is checked from every rank's view. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "collective/algo/algo.h"

#define KIB ((size_t)1024)

static const kolo_allreduce_limits defaults = {.small_bytes = 32 * KIB,
                                               .pair_min_bytes = 32 * KIB,
                                               .pair_max_bytes = 8192 * KIB,
                                               .pair_shm_max_bytes = 32 * KIB,
                                               .doubling_max_bytes = 32 * KIB,
                                               .doubling_hosts_max_bytes = 32 * KIB,
                                               .halving_hosts_max_bytes = 512 * KIB,
                                               .halving_ring_max_bytes = 2048 * KIB,
                                               .two_level_min_bytes = 32 * KIB,
                                               .forced = -1};

static kolo_allreduce_algo pick(int size, int hosts, int per_host, size_t bytes, int forced) {
  kolo_allreduce_shape shape = {
      .size = size, .hosts = hosts, .per_host = per_host, .mesh = size >= 3, .over_shm = 0};
  kolo_allreduce_limits limits = defaults;
  limits.forced = forced;
  return kolo_allreduce_select(&shape, &limits, bytes / 4, bytes);
}

/* Addresses for hosts with ranks[h] ranks each ("127.0.0.<h+1>:<port>"). */
static int addresses(const int *ranks, int hosts, char storage[][32], char **peers) {
  int n = 0;
  for (int h = 0; h < hosts; h++) {
    for (int i = 0; i < ranks[h]; i++, n++) {
      snprintf(storage[n], 32, "127.0.0.%d:%d", h + 1, 4000 + n);
      peers[n] = storage[n];
    }
  }
  return n;
}

static void the_shape_is_read_from_the_peers_addresses_alike_on_every_rank(void **state) {
  (void)state;
  char storage[16][32];
  char *peers[16];
  int uneven[] = {1, 2, 3};
  int n = addresses(uneven, 3, storage, peers);
  int want_host[] = {0, 1, 1, 2, 2, 2}, want_local[] = {0, 0, 1, 0, 1, 2};
  for (int r = 0; r < n; r++) {
    kolo_shape shape = kolo_shape_from_peers(peers, n, r);
    assert_int_equal(shape.hosts, 3);
    assert_int_equal(shape.per_host, 0);
    assert_int_equal(shape.host, want_host[r]);
    assert_int_equal(shape.local, want_local[r]);
  }
  int even[] = {2, 2, 2, 2};
  n = addresses(even, 4, storage, peers);
  for (int r = 0; r < n; r++) {
    kolo_shape shape = kolo_shape_from_peers(peers, n, r);
    assert_int_equal(shape.hosts, 4);
    assert_int_equal(shape.per_host, 2);
    assert_int_equal(shape.host, r / 2);
    assert_int_equal(shape.local, r % 2);
  }
  char *v6[] = {"[::1]:5", "[::1]:6", "[::2]:5", "[::2]:6"};
  kolo_shape shape = kolo_shape_from_peers(v6, 4, 3);
  assert_int_equal(shape.hosts, 2);
  assert_int_equal(shape.per_host, 2);
  assert_int_equal(shape.host, 1);
  char *one[] = {"10.0.0.1:1", "10.0.0.1:2", "10.0.0.1:3"};
  shape = kolo_shape_from_peers(one, 3, 2);
  assert_int_equal(shape.hosts, 1);
  assert_int_equal(shape.per_host, 3);
  assert_int_equal(shape.local, 2);
  /* a host that appears twice, apart, is two runs */
  char *split[] = {"a:1", "b:1", "a:2", "b:2"};
  shape = kolo_shape_from_peers(split, 4, 2);
  assert_int_equal(shape.hosts, 4);
  assert_int_equal(shape.per_host, 1);
}

static void recursive_doubling_folds_any_size_onto_a_power_of_two(void **state) {
  (void)state;
  int want_steps[] = {0, 0, 1, 3, 2, 4, 4, 4, 3, 5};
  for (int n = 2; n < 10; n++) assert_int_equal(kolo_doubling_steps(n), want_steps[n]);
  for (int n = 1; n <= 70; n++) {
    int p = kolo_doubling_pow2(n), taking = 0;
    assert_true(p <= n && 2 * p > n);
    for (int r = 0; r < n; r++) {
      int nr = kolo_doubling_newrank(n, r);
      if (nr < 0) {
        assert_int_equal(r % 2, 0);
        assert_true(r < 2 * (n - p));
        continue;
      }
      taking++;
      assert_true(nr < p);
      assert_int_equal(kolo_doubling_oldrank(n, nr), r);
    }
    assert_int_equal(taking, p);
  }
}

static void mesh_links_are_symmetric_and_cover_every_partner(void **state) {
  (void)state;
  kolo_shape shapes[] = {{.hosts = 1, .per_host = 0},
                         {.hosts = 4, .per_host = 2},
                         {.hosts = 2, .per_host = 4},
                         {.hosts = 3, .per_host = 0}};
  int sizes[] = {7, 8, 8, 6};
  for (int s = 0; s < 4; s++) {
    int n = sizes[s];
    for (int a = 0; a < n; a++) {
      int links = 0;
      for (int b = 0; b < n; b++) {
        assert_int_equal(kolo_mesh_wants(&shapes[s], n, a, b),
                         kolo_mesh_wants(&shapes[s], n, b, a));
        links += kolo_mesh_wants(&shapes[s], n, a, b);
      }
      assert_true(links >= 1 && links <= 3 + 4); /* log2(8) partners, fold, 2 across, wrap */
      int na = kolo_doubling_newrank(n, a), p = kolo_doubling_pow2(n);
      for (int mask = 1; na >= 0 && mask < p; mask <<= 1)
        assert_true(kolo_mesh_wants(&shapes[s], n, a, kolo_doubling_oldrank(n, na ^ mask)));
      if (shapes[s].per_host >= 2) {
        int per = shapes[s].per_host;
        assert_true(kolo_mesh_wants(&shapes[s], n, a, (a + per) % n));
        assert_true(kolo_mesh_wants(&shapes[s], n, a, a - a % per + (a % per + per - 1) % per) ||
                    a % per != 0);
      }
    }
  }
  /* two ranks need none: the ring's own links do */
  assert_false(kolo_mesh_wants(&shapes[0], 2, 0, 1));
}

static void small_buffers_on_many_ranks_take_recursive_doubling(void **state) {
  (void)state;
  assert_int_equal(pick(8, 1, 8, 4 * KIB, -1), KOLO_ALLREDUCE_DOUBLING);
  assert_int_equal(pick(8, 8, 1, 4 * KIB, -1), KOLO_ALLREDUCE_DOUBLING);
  assert_int_equal(pick(6, 3, 0, 32 * KIB, -1), KOLO_ALLREDUCE_DOUBLING);
  assert_int_equal(pick(4, 2, 2, 4, -1), KOLO_ALLREDUCE_DOUBLING); /* one element */
  /* where doubling has no fewer steps than the gather (3: 3 vs 2, 5: 4 vs 4) */
  assert_int_equal(pick(3, 1, 3, 4 * KIB, -1), KOLO_ALLREDUCE_GATHER);
  assert_int_equal(pick(5, 1, 5, 4 * KIB, -1), KOLO_ALLREDUCE_GATHER);
  /* two ranks keep their pair and gather */
  assert_int_equal(pick(2, 1, 2, 4 * KIB, -1), KOLO_ALLREDUCE_GATHER);
  assert_int_equal(pick(2, 2, 1, 64 * KIB, -1), KOLO_ALLREDUCE_PAIR);
  /* above the limit: the ring */
  assert_int_equal(pick(8, 1, 8, 32 * KIB + 4, -1), KOLO_ALLREDUCE_RING);
}

static void even_host_shapes_take_two_levels_above_the_middle_sizes(void **state) {
  (void)state;
  assert_int_equal(pick(8, 4, 2, 1024 * KIB, -1), KOLO_ALLREDUCE_TWO_LEVEL);
  assert_int_equal(pick(8, 2, 4, 512 * KIB + 4, -1), KOLO_ALLREDUCE_TWO_LEVEL);
  assert_int_equal(pick(8, 2, 4, 256 * 1024 * KIB, -1), KOLO_ALLREDUCE_TWO_LEVEL);
  assert_int_equal(pick(8, 4, 2, 32 * KIB, -1), KOLO_ALLREDUCE_DOUBLING);
  /* one host, one rank per host, or uneven hosts: the flat ring (past halving) */
  assert_int_equal(pick(8, 1, 8, 1024 * KIB, -1), KOLO_ALLREDUCE_RING);
  assert_int_equal(pick(8, 8, 1, 4096 * KIB, -1), KOLO_ALLREDUCE_RING);
  assert_int_equal(pick(6, 3, 0, 4096 * KIB, -1), KOLO_ALLREDUCE_RING);
}

/* Where a hop crosses hosts it costs a network latency, so doubling's log2 p
 * steps pay off up to a larger size than on one host, where the ring's hops
 * are shared memory; every rank reads the same shape from the same addresses,
 * so every rank takes the same limit and algorithm. */
static void where_hops_cross_hosts_the_middle_sizes_take_halving(void **state) {
  (void)state;
  assert_int_equal(pick(8, 8, 1, 32 * KIB, -1), KOLO_ALLREDUCE_DOUBLING);
  assert_int_equal(pick(8, 2, 4, 32 * KIB + 4, -1), KOLO_ALLREDUCE_HALVING);
  assert_int_equal(pick(8, 4, 2, 64 * KIB, -1), KOLO_ALLREDUCE_HALVING);
  assert_int_equal(pick(8, 8, 1, 512 * KIB, -1), KOLO_ALLREDUCE_HALVING);
  assert_int_equal(pick(6, 3, 0, 256 * KIB, -1), KOLO_ALLREDUCE_HALVING); /* uneven hosts */
  assert_int_equal(pick(3, 3, 1, 64 * KIB, -1), KOLO_ALLREDUCE_HALVING);  /* with a fold */
  assert_int_equal(pick(8, 4, 2, 512 * KIB + 4, -1), KOLO_ALLREDUCE_TWO_LEVEL);
  /* where two levels cannot run, the flat ring is the alternative: halving further */
  assert_int_equal(pick(8, 8, 1, 2048 * KIB, -1), KOLO_ALLREDUCE_HALVING);
  assert_int_equal(pick(6, 3, 0, 1024 * KIB, -1), KOLO_ALLREDUCE_HALVING);
  assert_int_equal(pick(8, 8, 1, 2048 * KIB + 4, -1), KOLO_ALLREDUCE_RING);
  assert_int_equal(pick(6, 3, 0, 2048 * KIB + 4, -1), KOLO_ALLREDUCE_RING);
  /* not on one host (its ring runs over shared memory), nor without the mesh */
  assert_int_equal(pick(8, 1, 8, 64 * KIB, -1), KOLO_ALLREDUCE_RING);
  kolo_allreduce_shape no_mesh = {.size = 8, .hosts = 4, .per_host = 2, .mesh = 0};
  assert_int_equal(kolo_allreduce_select(&no_mesh, &defaults, 16 * KIB, 64 * KIB),
                   KOLO_ALLREDUCE_RING);
  /* fewer elements than ranks: not halving (doubling, whatever the size limit) */
  kolo_allreduce_limits low = defaults;
  low.doubling_hosts_max_bytes = 0;
  kolo_allreduce_shape hosts = {.size = 8, .hosts = 4, .per_host = 2, .mesh = 1};
  assert_int_equal(kolo_allreduce_select(&hosts, &low, 7, 28), KOLO_ALLREDUCE_GATHER);
  assert_int_equal(kolo_allreduce_select(&hosts, &low, 8, 32), KOLO_ALLREDUCE_HALVING);
}

/* Where a hop crosses hosts it costs a network latency, so doubling's log2 p
 * steps pay off up to a larger size than on one host, where the ring's hops
 * are shared memory; every rank reads the same shape from the same addresses,
 * so every rank takes the same limit and algorithm. */
static void the_doubling_crossover_is_higher_where_hops_cross_hosts(void **state) {
  (void)state;
  kolo_allreduce_limits high = defaults;
  high.doubling_hosts_max_bytes = 64 * KIB;
  kolo_allreduce_shape eight = {.size = 8, .hosts = 8, .per_host = 1, .mesh = 1};
  assert_int_equal(kolo_allreduce_select(&eight, &high, 16 * KIB, 64 * KIB),
                   KOLO_ALLREDUCE_DOUBLING);
  assert_int_equal(pick(8, 4, 2, 32 * KIB, -1), KOLO_ALLREDUCE_DOUBLING);
  assert_int_equal(pick(6, 3, 0, 32 * KIB, -1), KOLO_ALLREDUCE_DOUBLING);
  /* one host keeps the lower crossover: the ring above 32 KiB */
  assert_int_equal(pick(8, 1, 8, 64 * KIB, -1), KOLO_ALLREDUCE_RING);
  assert_int_equal(pick(4, 1, 4, 32 * KIB + 4, -1), KOLO_ALLREDUCE_RING);
  assert_int_equal(pick(4, 1, 4, 32 * KIB, -1), KOLO_ALLREDUCE_DOUBLING);
  /* two ranks on two hosts: no doubling at any size (the pair) */
  assert_int_equal(pick(2, 2, 1, 64 * KIB, -1), KOLO_ALLREDUCE_PAIR);
  /* the limit from every rank's view of the same addresses */
  char storage[16][32];
  char *peers[16];
  int even[] = {2, 2, 2, 2}, one[] = {8};
  for (int layout = 0; layout < 2; layout++) {
    int n = layout == 0 ? addresses(even, 4, storage, peers) : addresses(one, 1, storage, peers);
    for (int r = 0; r < n; r++) {
      kolo_shape seen = kolo_shape_from_peers(peers, n, r);
      kolo_allreduce_shape shape = {.size = n,
                                    .hosts = seen.hosts,
                                    .per_host = seen.per_host,
                                    .mesh = 1,
                                    .over_shm = seen.hosts == 1};
      assert_int_equal(kolo_doubling_limit(&shape, &high), layout == 0 ? 64 * KIB : 32 * KIB);
      assert_int_equal(kolo_allreduce_select(&shape, &high, 16 * KIB, 64 * KIB),
                       layout == 0 ? KOLO_ALLREDUCE_DOUBLING : KOLO_ALLREDUCE_RING);
      assert_int_equal(kolo_allreduce_select(&shape, &defaults, 32 * KIB, 128 * KIB),
                       layout == 0 ? KOLO_ALLREDUCE_HALVING : KOLO_ALLREDUCE_RING);
    }
  }
}

static void an_override_is_taken_only_where_the_shape_allows_it(void **state) {
  (void)state;
  assert_int_equal(kolo_allreduce_algo_parse(NULL), -1);
  assert_int_equal(kolo_allreduce_algo_parse("auto"), -1);
  assert_int_equal(kolo_allreduce_algo_parse("two_level"), KOLO_ALLREDUCE_TWO_LEVEL);
  assert_int_equal(kolo_allreduce_algo_parse("doubling"), KOLO_ALLREDUCE_DOUBLING);
  assert_int_equal(kolo_allreduce_algo_parse("halving"), KOLO_ALLREDUCE_HALVING);
  assert_int_equal(kolo_allreduce_algo_parse("ring"), KOLO_ALLREDUCE_RING);
  assert_int_equal(kolo_allreduce_algo_parse("fastest"), -2);
  for (int a = 0; a < KOLO_ALLREDUCE_ALGO_COUNT; a++)
    assert_int_equal(kolo_allreduce_algo_parse(kolo_allreduce_algo_name((kolo_allreduce_algo)a)),
                     a);
  assert_int_equal(pick(8, 4, 2, 4 * KIB, KOLO_ALLREDUCE_TWO_LEVEL), KOLO_ALLREDUCE_TWO_LEVEL);
  assert_int_equal(pick(8, 4, 2, 64 * KIB * KIB, KOLO_ALLREDUCE_DOUBLING), KOLO_ALLREDUCE_DOUBLING);
  assert_int_equal(pick(8, 4, 2, 4 * KIB, KOLO_ALLREDUCE_RING), KOLO_ALLREDUCE_RING);
  /* not allowed: two levels on uneven hosts or fewer elements than ranks, doubling
   * without the mesh, the pair on more than two ranks: the automatic choice */
  assert_int_equal(pick(6, 3, 0, 4096 * KIB, KOLO_ALLREDUCE_TWO_LEVEL), KOLO_ALLREDUCE_RING);
  assert_int_equal(pick(8, 4, 2, 16, KOLO_ALLREDUCE_TWO_LEVEL), KOLO_ALLREDUCE_DOUBLING);
  assert_int_equal(pick(2, 1, 2, 4 * KIB, KOLO_ALLREDUCE_DOUBLING), KOLO_ALLREDUCE_GATHER);
  assert_int_equal(pick(8, 1, 8, 1024 * KIB, KOLO_ALLREDUCE_PAIR), KOLO_ALLREDUCE_RING);
  assert_int_equal(pick(8, 1, 8, 16, KOLO_ALLREDUCE_RING), KOLO_ALLREDUCE_DOUBLING);
  /* halving where doubling may run, one host included, but not on two ranks */
  assert_int_equal(pick(8, 1, 8, 1024 * KIB, KOLO_ALLREDUCE_HALVING), KOLO_ALLREDUCE_HALVING);
  assert_int_equal(pick(5, 5, 1, 4 * KIB, KOLO_ALLREDUCE_HALVING), KOLO_ALLREDUCE_HALVING);
  assert_int_equal(pick(2, 2, 1, 64 * KIB, KOLO_ALLREDUCE_HALVING), KOLO_ALLREDUCE_PAIR);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_shape_is_read_from_the_peers_addresses_alike_on_every_rank),
      cmocka_unit_test(recursive_doubling_folds_any_size_onto_a_power_of_two),
      cmocka_unit_test(mesh_links_are_symmetric_and_cover_every_partner),
      cmocka_unit_test(small_buffers_on_many_ranks_take_recursive_doubling),
      cmocka_unit_test(even_host_shapes_take_two_levels_above_the_middle_sizes),
      cmocka_unit_test(where_hops_cross_hosts_the_middle_sizes_take_halving),
      cmocka_unit_test(the_doubling_crossover_is_higher_where_hops_cross_hosts),
      cmocka_unit_test(an_override_is_taken_only_where_the_shape_allows_it),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
