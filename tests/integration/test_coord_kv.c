/* Integration tests of the etcd client's KV and txn calls against a real etcd
 * started by the harness: byte keys, prev_kv, paged prefix ranges, prefix
 * deletes, compares on every target, create-if-absent conflicts, bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coordination/etcd.h"
#include "tests/support/etcd_harness.h"

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
                             .request_timeout_ms = 3000,
                             .max_value_bytes = 64 * 1024};
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

static void put_then_get_round_trips_binary_keys_and_values(void **state) {
  fixture *f = *state;
  const unsigned char key[] = {'/', 'b', 0, 0xff, 0x80, 'k'};
  const unsigned char value[] = {0, 1, 2, 0xfe, 0xff, '"', '\\'};
  int64_t rev = 0;
  assert_int_equal(kolo_etcd_put(f->client, (kolo_etcd_bytes){key, sizeof key},
                                 (kolo_etcd_bytes){value, sizeof value}, 0, NULL, &rev),
                   KOLO_OK);
  assert_true(rev > 0);
  kolo_etcd_kv kv;
  int64_t read_rev = 0;
  assert_int_equal(kolo_etcd_get(f->client, (kolo_etcd_bytes){key, sizeof key}, &kv, &read_rev),
                   KOLO_OK);
  assert_int_equal(kv.key_len, sizeof key);
  assert_memory_equal(kv.key, key, sizeof key);
  assert_int_equal(kv.value_len, sizeof value);
  assert_memory_equal(kv.value, value, sizeof value);
  assert_int_equal(kv.mod_revision, rev);
  assert_int_equal(kv.create_revision, rev);
  assert_int_equal(kv.version, 1);
  assert_true(read_rev >= rev);
  kolo_etcd_kv_clear(&kv);
}

static void put_with_prev_kv_returns_the_previous_value(void **state) {
  fixture *f = *state;
  kolo_etcd_kv prev;
  assert_int_equal(
      kolo_etcd_put(f->client, kolo_etcd_str("/p/x"), kolo_etcd_str("one"), 0, &prev, NULL),
      KOLO_OK);
  assert_null(prev.key);
  assert_int_equal(
      kolo_etcd_put(f->client, kolo_etcd_str("/p/x"), kolo_etcd_str("two"), 0, &prev, NULL),
      KOLO_OK);
  assert_non_null(prev.key);
  assert_string_equal((char *)prev.value, "one");
  assert_int_equal(prev.version, 1);
  kolo_etcd_kv_clear(&prev);
}

static void get_of_a_missing_key_is_not_found(void **state) {
  fixture *f = *state;
  kolo_etcd_kv kv;
  assert_int_equal(kolo_etcd_get(f->client, kolo_etcd_str("/no/such/key"), &kv, NULL),
                   KOLO_ERR_NOT_FOUND);
  assert_null(kv.key);
  assert_non_null(strstr(kolo_etcd_last_error(), "/no/such/key"));
}

static void range_prefix_pages_through_every_key_in_order(void **state) {
  fixture *f = *state;
  char key[64];
  for (int i = 0; i < 23; i++) {
    snprintf(key, sizeof key, "/r/k%02d", i);
    assert_int_equal(
        kolo_etcd_put(f->client, kolo_etcd_str(key), kolo_etcd_str(key + 3), 0, NULL, NULL),
        KOLO_OK);
  }
  assert_int_equal(
      kolo_etcd_put(f->client, kolo_etcd_str("/r0"), kolo_etcd_str("outside"), 0, NULL, NULL),
      KOLO_OK);
  assert_int_equal(
      kolo_etcd_put(f->client, kolo_etcd_str("/q"), kolo_etcd_str("outside"), 0, NULL, NULL),
      KOLO_OK);

  kolo_etcd_range_opts one_page = {.key = kolo_etcd_str("/r/"), .prefix = 1, .limit = 5};
  kolo_etcd_range_result page;
  assert_int_equal(kolo_etcd_range(f->client, &one_page, &page), KOLO_OK);
  assert_int_equal(page.count, 5);
  assert_true(page.more);
  assert_int_equal(page.total, 23);
  kolo_etcd_range_result_free(&page);

  kolo_etcd_range_result all;
  assert_int_equal(kolo_etcd_range_prefix(f->client, kolo_etcd_str("/r/"), 7, &all), KOLO_OK);
  assert_int_equal(all.count, 23);
  assert_false(all.more);
  for (int i = 0; i < 23; i++) {
    snprintf(key, sizeof key, "/r/k%02d", i);
    assert_string_equal((char *)all.kvs[i].key, key);
    assert_string_equal((char *)all.kvs[i].value, key + 3);
  }
  kolo_etcd_range_result_free(&all);
}

static void delete_prefix_removes_only_that_prefix(void **state) {
  fixture *f = *state;
  assert_int_equal(
      kolo_etcd_put(f->client, kolo_etcd_str("/d/a"), kolo_etcd_str("1"), 0, NULL, NULL), KOLO_OK);
  assert_int_equal(
      kolo_etcd_put(f->client, kolo_etcd_str("/d/b"), kolo_etcd_str("2"), 0, NULL, NULL), KOLO_OK);
  assert_int_equal(
      kolo_etcd_put(f->client, kolo_etcd_str("/d0"), kolo_etcd_str("3"), 0, NULL, NULL), KOLO_OK);
  int64_t deleted = 0;
  assert_int_equal(kolo_etcd_delete(f->client, kolo_etcd_str("/d/"), 1, &deleted, NULL), KOLO_OK);
  assert_int_equal(deleted, 2);
  kolo_etcd_kv kv;
  assert_int_equal(kolo_etcd_get(f->client, kolo_etcd_str("/d/a"), &kv, NULL), KOLO_ERR_NOT_FOUND);
  assert_int_equal(kolo_etcd_get(f->client, kolo_etcd_str("/d0"), &kv, NULL), KOLO_OK);
  kolo_etcd_kv_clear(&kv);
  assert_int_equal(kolo_etcd_delete(f->client, kolo_etcd_str("/d/a"), 0, &deleted, NULL), KOLO_OK);
  assert_int_equal(deleted, 0);
}

static void create_if_absent_conflicts_are_reported(void **state) {
  fixture *f = *state;
  int64_t rev = 0;
  assert_int_equal(kolo_etcd_create_key(f->client, kolo_etcd_str("/c/once"), kolo_etcd_str("first"),
                                        0, NULL, &rev),
                   KOLO_OK);
  assert_true(rev > 0);
  kolo_etcd_kv existing;
  assert_int_equal(kolo_etcd_create_key(f->client, kolo_etcd_str("/c/once"),
                                        kolo_etcd_str("second"), 0, &existing, NULL),
                   KOLO_ERR_EXISTS);
  assert_non_null(strstr(kolo_etcd_last_error(), "already exists"));
  assert_string_equal((char *)existing.value, "first");
  assert_int_equal(existing.create_revision, rev);
  kolo_etcd_kv_clear(&existing);

  /* The raw txn says the same: succeeded is false and the failure branch ran. */
  kolo_etcd_compare cmp = {
      .target = KOLO_ETCD_CMP_CREATE, .result = KOLO_ETCD_EQUAL, .key = kolo_etcd_str("/c/once")};
  kolo_etcd_op put = {
      .kind = KOLO_ETCD_OP_PUT, .key = kolo_etcd_str("/c/once"), .value = kolo_etcd_str("third")};
  kolo_etcd_op get = {.kind = KOLO_ETCD_OP_RANGE, .key = kolo_etcd_str("/c/once")};
  kolo_etcd_txn txn = {&cmp, 1, &put, 1, &get, 1};
  kolo_etcd_txn_result r;
  assert_int_equal(kolo_etcd_txn_run(f->client, &txn, &r), KOLO_OK);
  assert_false(r.succeeded);
  assert_int_equal(r.count, 1);
  assert_int_equal(r.responses[0].kind, KOLO_ETCD_OP_RANGE);
  assert_string_equal((char *)r.responses[0].range.kvs[0].value, "first");
  kolo_etcd_txn_result_free(&r);
}

static void txn_compares_version_mod_value_and_lease(void **state) {
  fixture *f = *state;
  int64_t rev = 0, lease = 0;
  assert_int_equal(kolo_etcd_lease_grant(f->client, 30, &lease, NULL), KOLO_OK);
  assert_int_equal(
      kolo_etcd_put(f->client, kolo_etcd_str("/t/k"), kolo_etcd_str("v1"), lease, NULL, &rev),
      KOLO_OK);
  kolo_etcd_compare good[] = {
      {.target = KOLO_ETCD_CMP_VERSION,
       .result = KOLO_ETCD_EQUAL,
       .key = kolo_etcd_str("/t/k"),
       .number = 1},
      {.target = KOLO_ETCD_CMP_MOD,
       .result = KOLO_ETCD_EQUAL,
       .key = kolo_etcd_str("/t/k"),
       .number = rev},
      {.target = KOLO_ETCD_CMP_VALUE,
       .result = KOLO_ETCD_EQUAL,
       .key = kolo_etcd_str("/t/k"),
       .value = kolo_etcd_str("v1")},
      {.target = KOLO_ETCD_CMP_LEASE,
       .result = KOLO_ETCD_EQUAL,
       .key = kolo_etcd_str("/t/k"),
       .number = lease},
      {.target = KOLO_ETCD_CMP_CREATE,
       .result = KOLO_ETCD_GREATER,
       .key = kolo_etcd_str("/t/k"),
       .number = 0},
  };
  kolo_etcd_op ops[] = {
      {.kind = KOLO_ETCD_OP_PUT,
       .key = kolo_etcd_str("/t/k"),
       .value = kolo_etcd_str("v2"),
       .lease = lease,
       .prev_kv = 1},
      {.kind = KOLO_ETCD_OP_DELETE, .key = kolo_etcd_str("/t/other")},
      {.kind = KOLO_ETCD_OP_RANGE, .key = kolo_etcd_str("/t/"), .prefix = 1},
  };
  kolo_etcd_txn txn = {good, 5, ops, 3, NULL, 0};
  kolo_etcd_txn_result r;
  assert_int_equal(kolo_etcd_txn_run(f->client, &txn, &r), KOLO_OK);
  assert_true(r.succeeded);
  assert_int_equal(r.count, 3);
  assert_int_equal(r.responses[0].kind, KOLO_ETCD_OP_PUT);
  assert_string_equal((char *)r.responses[0].range.kvs[0].value, "v1");
  assert_int_equal(r.responses[1].kind, KOLO_ETCD_OP_DELETE);
  assert_int_equal(r.responses[1].deleted, 0);
  assert_int_equal(r.responses[2].range.count, 1);
  assert_string_equal((char *)r.responses[2].range.kvs[0].value, "v2");
  assert_int_equal(r.revision, rev + 1);
  kolo_etcd_txn_result_free(&r);

  /* Each compare alone fails once the key moved on. */
  for (int i = 0; i < 4; i++) {
    kolo_etcd_compare stale = good[i];
    if (i == 3) stale.number = lease + 1;
    kolo_etcd_op put = {
        .kind = KOLO_ETCD_OP_PUT, .key = kolo_etcd_str("/t/k"), .value = kolo_etcd_str("v3")};
    kolo_etcd_txn t = {&stale, 1, &put, 1, NULL, 0};
    assert_int_equal(kolo_etcd_txn_run(f->client, &t, &r), KOLO_OK);
    assert_false(r.succeeded);
    kolo_etcd_txn_result_free(&r);
  }
  kolo_etcd_kv kv;
  assert_int_equal(kolo_etcd_get(f->client, kolo_etcd_str("/t/k"), &kv, NULL), KOLO_OK);
  assert_string_equal((char *)kv.value, "v2");
  kolo_etcd_kv_clear(&kv);
  assert_int_equal(kolo_etcd_lease_revoke(f->client, lease), KOLO_OK);
  assert_int_equal(kolo_etcd_get(f->client, kolo_etcd_str("/t/k"), &kv, NULL), KOLO_ERR_NOT_FOUND);
  assert_int_equal(kolo_etcd_lease_revoke(f->client, lease), KOLO_ERR_NOT_FOUND);
  assert_int_equal(kolo_etcd_lease_keepalive_once(f->client, lease, NULL), KOLO_ERR_LEASE_LOST);
}

static void oversize_values_and_empty_keys_are_refused_before_sending(void **state) {
  fixture *f = *state;
  size_t n = 64 * 1024 + 1;
  char *big = calloc(1, n);
  assert_int_equal(
      kolo_etcd_put(f->client, kolo_etcd_str("/big"), (kolo_etcd_bytes){big, n}, 0, NULL, NULL),
      KOLO_ERR_TOO_LARGE);
  assert_non_null(strstr(kolo_etcd_last_error(), "65537 bytes"));
  assert_int_equal(kolo_etcd_put(f->client, (kolo_etcd_bytes){big, n - 1 - 64 * 1024},
                                 kolo_etcd_str("x"), 0, NULL, NULL),
                   KOLO_ERR_INVALID_ARG);
  /* The largest allowed value does go through. */
  assert_int_equal(
      kolo_etcd_put(f->client, kolo_etcd_str("/big"), (kolo_etcd_bytes){big, n - 1}, 0, NULL, NULL),
      KOLO_OK);
  free(big);
  kolo_etcd_kv kv;
  assert_int_equal(kolo_etcd_get(f->client, kolo_etcd_str("/big"), &kv, NULL), KOLO_OK);
  assert_int_equal(kv.value_len, n - 1);
  kolo_etcd_kv_clear(&kv);
}

static void a_value_over_etcds_own_limit_is_too_large(void **state) {
  fixture *f = *state;
  const char *endpoints[] = {kolo_etcd_harness_url(f->etcd)};
  kolo_etcd_config config = {.endpoints = endpoints,
                             .endpoint_count = 1,
                             .request_timeout_ms = 5000,
                             .max_value_bytes = 8u << 20};
  kolo_etcd *roomy = NULL;
  assert_int_equal(kolo_etcd_create(&config, &roomy), KOLO_OK);
  size_t n = 2u << 20; /* etcd's default request limit is 1.5 MiB */
  char *big = calloc(1, n);
  kolo_status rc =
      kolo_etcd_put(roomy, kolo_etcd_str("/huge"), (kolo_etcd_bytes){big, n}, 0, NULL, NULL);
  print_message("2 MiB put: %s: %s\n", kolo_status_name(rc), kolo_etcd_last_error());
  assert_int_equal(rc, KOLO_ERR_TOO_LARGE);
  free(big);
  kolo_etcd_kv kv;
  assert_int_equal(kolo_etcd_get(roomy, kolo_etcd_str("/huge"), &kv, NULL), KOLO_ERR_NOT_FOUND);
  kolo_etcd_destroy(roomy);
}

static void etcd_rejections_carry_etcds_message(void **state) {
  fixture *f = *state;
  kolo_etcd_range_opts future = {.key = kolo_etcd_str("/x"), .revision = 1000000};
  kolo_etcd_range_result r;
  assert_int_equal(kolo_etcd_range(f->client, &future, &r), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(kolo_etcd_last_error(), "future revision"));
}

static void on_nothing(const kolo_etcd_watch_update *update, void *user) {
  (void)update;
  (void)user;
}

/* kolo_etcd_share: one client, several handles, each with its own deadlines,
 * counters and written revision; the connection lives while any handle does. */
static void shared_handles_have_their_own_deadlines_counters_and_written_revision(void **state) {
  fixture *f = *state;
  kolo_etcd *a = NULL, *b = NULL;
  kolo_etcd_config quick = {.request_timeout_ms = 1234};
  assert_int_equal(kolo_etcd_share(f->client, &quick, &a), KOLO_OK);
  assert_int_equal(kolo_etcd_share(a, NULL, &b), KOLO_OK);
  assert_int_equal(kolo_etcd_request_timeout_ms(a), 1234);
  assert_int_equal(kolo_etcd_request_timeout_ms(b), 5000);
  assert_int_equal(kolo_etcd_request_timeout_ms(f->client), 3000);
  kolo_etcd_stats whole0, stats;
  kolo_etcd_stats_get(f->client, 1, &whole0);
  assert_int_equal(whole0.handles, 3);

  int64_t rev = 0;
  assert_int_equal(kolo_etcd_put(a, kolo_etcd_str("/share/k"), kolo_etcd_str("v"), 0, NULL, &rev),
                   KOLO_OK);
  assert_int_equal(kolo_etcd_written_revision(a), rev);
  assert_int_equal(kolo_etcd_written_revision(b), 0);
  /* a txn whose compare fails writes nothing: the written revision stays */
  kolo_etcd_compare never = {.target = KOLO_ETCD_CMP_CREATE,
                             .result = KOLO_ETCD_EQUAL,
                             .key = kolo_etcd_str("/share/k"),
                             .number = 0};
  kolo_etcd_op put = {
      .kind = KOLO_ETCD_OP_PUT, .key = kolo_etcd_str("/share/k"), .value = kolo_etcd_str("w")};
  kolo_etcd_txn txn = {&never, 1, &put, 1, NULL, 0};
  kolo_etcd_txn_result result;
  assert_int_equal(kolo_etcd_txn_run(a, &txn, &result), KOLO_OK);
  assert_false(result.succeeded);
  kolo_etcd_txn_result_free(&result);
  assert_int_equal(kolo_etcd_written_revision(a), rev);
  kolo_etcd_stats_get(a, 0, &stats);
  assert_int_equal(stats.requests[KOLO_ETCD_REQ_PUT], 1);
  assert_int_equal(stats.requests[KOLO_ETCD_REQ_TXN], 1);
  assert_int_equal(stats.requests[KOLO_ETCD_REQ_RANGE], 0);

  /* a handle outlives the one it was shared from */
  kolo_etcd_destroy(a);
  kolo_etcd_kv kv;
  assert_int_equal(kolo_etcd_get(b, kolo_etcd_str("/share/k"), &kv, NULL), KOLO_OK);
  assert_string_equal((const char *)kv.value, "v");
  kolo_etcd_kv_clear(&kv);
  kolo_etcd_watch_opts opts = {.key = kolo_etcd_str("/share/"), .prefix = 1};
  kolo_etcd_watch *w = NULL;
  assert_int_equal(kolo_etcd_watch_start(b, &opts, on_nothing, NULL, &w), KOLO_OK);
  kolo_etcd_stats_get(b, 0, &stats);
  assert_int_equal(stats.requests[KOLO_ETCD_REQ_RANGE], 1);
  assert_int_equal(stats.watches_running, 1);
  kolo_etcd_stats whole;
  kolo_etcd_stats_get(f->client, 1, &whole);
  assert_int_equal(whole.handles, 2);
  assert_int_equal(whole.requests[KOLO_ETCD_REQ_PUT] - whole0.requests[KOLO_ETCD_REQ_PUT], 1);
  assert_int_equal(whole.requests[KOLO_ETCD_REQ_RANGE] - whole0.requests[KOLO_ETCD_REQ_RANGE], 1);
  assert_int_equal(whole.watches_running, whole0.watches_running + 1);
  kolo_etcd_watch_stop(w);
  kolo_etcd_stats_get(f->client, 1, &whole);
  assert_int_equal(whole.watches_running, whole0.watches_running);
  assert_int_equal(whole.watches_started, whole0.watches_started + 1);
  kolo_etcd_destroy(b);
  kolo_etcd_stats_get(f->client, 1, &whole);
  assert_int_equal(whole.handles, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(put_then_get_round_trips_binary_keys_and_values),
      cmocka_unit_test(put_with_prev_kv_returns_the_previous_value),
      cmocka_unit_test(get_of_a_missing_key_is_not_found),
      cmocka_unit_test(range_prefix_pages_through_every_key_in_order),
      cmocka_unit_test(delete_prefix_removes_only_that_prefix),
      cmocka_unit_test(create_if_absent_conflicts_are_reported),
      cmocka_unit_test(txn_compares_version_mod_value_and_lease),
      cmocka_unit_test(oversize_values_and_empty_keys_are_refused_before_sending),
      cmocka_unit_test(a_value_over_etcds_own_limit_is_too_large),
      cmocka_unit_test(etcd_rejections_carry_etcds_message),
      cmocka_unit_test(shared_handles_have_their_own_deadlines_counters_and_written_revision),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
