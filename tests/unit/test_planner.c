/* Unit tests for coordination/planner.c: ranks grouped by host (one crossing per
 * host boundary), survivors keep their order, rank 0 is the lowest-ranked
 * survivor, newcomers slot in deterministically, input order does not matter,
 * bad input is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coordination/etcd.h"
#include "coordination/planner.h"

#define M(id, host) \
  { id, host, "127.0.0.1:1" }

/* Plans and writes the ids by rank into ids[]. */
static void plan(const kolo_planner_member *members, size_t n, const char *const *prev,
                 size_t prev_n, const char **ids) {
  size_t order[64];
  assert_int_equal(kolo_planner_plan(members, n, prev, prev_n, order), KOLO_OK);
  int used[64] = {0};
  for (size_t r = 0; r < n; r++) {
    assert_true(order[r] < n);
    assert_false(used[order[r]]); /* a permutation */
    used[order[r]] = 1;
    ids[r] = members[order[r]].id;
  }
}

static const char *host_of(const kolo_planner_member *members, size_t n, const char *id) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(members[i].id, id) == 0) return members[i].host;
  return NULL;
}

/* Number of ring edges (r -> r+1 mod n) that cross between hosts. */
static size_t crossings(const kolo_planner_member *members, size_t n, const char **ids) {
  size_t c = 0;
  for (size_t r = 0; r < n; r++)
    if (strcmp(host_of(members, n, ids[r]), host_of(members, n, ids[(r + 1) % n])) != 0) c++;
  return c;
}

static void a_first_ring_groups_ranks_by_host(void **state) {
  (void)state;
  kolo_planner_member m[] = {M("w5", "hb"), M("w1", "ha"), M("w4", "hc"), M("w2", "hb"),
                             M("w3", "ha"), M("w6", "hc"), M("w0", "hb")};
  const char *ids[7];
  plan(m, 7, NULL, 0, ids);
  /* Hosts by name, members by id within a host. */
  const char *expected[] = {"w1", "w3", "w0", "w2", "w5", "w4", "w6"};
  for (int r = 0; r < 7; r++) assert_string_equal(ids[r], expected[r]);
  assert_int_equal(crossings(m, 7, ids), 3); /* three hosts: three boundaries, each crossed once */
}

static void survivors_keep_their_order_and_rank_zero_survives(void **state) {
  (void)state;
  /* Previous ring: a0 a1 | b0 b1 | c0. a0 (rank 0) died, c0 died, newcomers n1 (host b), n2 (new
   * host d). */
  const char *prev[] = {"a0", "a1", "b0", "b1", "c0"};
  kolo_planner_member m[] = {M("n2", "hd"), M("b1", "hb"), M("n1", "hb"), M("a1", "ha"),
                             M("b0", "hb")};
  const char *ids[5];
  plan(m, 5, prev, 5, ids);
  const char *expected[] = {"a1", "b0", "b1", "n1", "n2"};
  for (int r = 0; r < 5; r++) assert_string_equal(ids[r], expected[r]);
  assert_string_equal(ids[0], "a1"); /* lowest surviving previous rank */
  assert_int_equal(crossings(m, 5, ids), 3);
}

static void rank_zero_is_a_survivor_even_when_its_host_sorts_last(void **state) {
  (void)state;
  const char *prev[] = {"z1", "z2", "a9"};
  kolo_planner_member m[] = {M("a0", "aaa"), M("z2", "zzz"), M("a9", "aaa"), M("new", "bbb")};
  const char *ids[4];
  plan(m, 4, prev, 3, ids);
  assert_string_equal(ids[0], "z2");
  /* aaa holds a9 (previous rank 2): its survivor comes first, then its newcomer a0. */
  const char *expected[] = {"z2", "a9", "a0", "new"};
  for (int r = 0; r < 4; r++) assert_string_equal(ids[r], expected[r]);
}

static void an_unchanged_membership_keeps_every_rank(void **state) {
  (void)state;
  const char *prev[] = {"x", "y", "p", "q"};
  kolo_planner_member m[] = {M("q", "h2"), M("p", "h2"), M("y", "h1"), M("x", "h1")};
  const char *ids[4];
  plan(m, 4, prev, 4, ids);
  for (int r = 0; r < 4; r++) assert_string_equal(ids[r], prev[r]);
}

static void the_plan_does_not_depend_on_input_order(void **state) {
  (void)state;
  const char *prev[] = {"w3", "w1", "w7"};
  kolo_planner_member m[] = {M("w1", "h1"), M("w2", "h2"), M("w3", "h1"), M("w4", "h3"),
                             M("w5", "h2"), M("w6", "h3"), M("w7", "h2"), M("w8", "h1")};
  const char *reference[8];
  plan(m, 8, prev, 3, reference);
  srand(7);
  for (int round = 0; round < 50; round++) {
    for (int i = 7; i > 0; i--) {
      int j = rand() % (i + 1);
      kolo_planner_member t = m[i];
      m[i] = m[j];
      m[j] = t;
    }
    const char *ids[8];
    plan(m, 8, prev, 3, ids);
    for (int r = 0; r < 8; r++) assert_string_equal(ids[r], reference[r]);
    assert_int_equal(crossings(m, 8, ids), 3);
  }
  assert_string_equal(reference[0], "w3");
}

static void bad_input_is_refused_with_a_reason(void **state) {
  (void)state;
  size_t order[4];
  kolo_planner_member dup[] = {M("a", "h"), M("a", "h2")};
  assert_int_equal(kolo_planner_plan(dup, 2, NULL, 0, order), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(kolo_etcd_last_error(), "twice"));
  kolo_planner_member empty[] = {M("a", "")};
  assert_int_equal(kolo_planner_plan(empty, 1, NULL, 0, order), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_planner_plan(empty, 0, NULL, 0, order), KOLO_ERR_INVALID_ARG);
  kolo_planner_member ok[] = {M("a", "h")};
  const char *prev_dup[] = {"a", "a"};
  assert_int_equal(kolo_planner_plan(ok, 1, prev_dup, 2, order), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_planner_plan(ok, 1, NULL, 0, order), KOLO_OK);
  assert_int_equal(order[0], 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_first_ring_groups_ranks_by_host),
      cmocka_unit_test(survivors_keep_their_order_and_rank_zero_survives),
      cmocka_unit_test(rank_zero_is_a_survivor_even_when_its_host_sorts_last),
      cmocka_unit_test(an_unchanged_membership_keeps_every_rank),
      cmocka_unit_test(the_plan_does_not_depend_on_input_order),
      cmocka_unit_test(bad_input_is_refused_with_a_reason),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
