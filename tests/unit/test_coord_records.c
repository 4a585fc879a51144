/* Unit tests for the JSON records kolo keeps in etcd: the ring spec
 * (coordination/ringspec.c) and the worker record (coordination/membership.c)
 * round-trip, and every kind of bad input is rejected with a message; plus the
 * key layout helpers (coordination/keys.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coordination/base64.h"
#include "coordination/etcd.h"
#include "coordination/keys.h"
#include "coordination/membership.h"
#include "coordination/ringspec.h"

static void sample(kolo_ringspec *s, kolo_ringspec_rank *ranks) {
  memset(s, 0, sizeof *s);
  ranks[0] = (kolo_ringspec_rank){"w1", "10.0.0.5:7100"};
  ranks[1] = (kolo_ringspec_rank){"w2", "[fe80::1]:7100"};
  ranks[2] = (kolo_ringspec_rank){"w3", "node-3.cluster:7100"};
  s->job = "job-1";
  s->epoch = 4;
  s->token = "0123456789abcdef0123456789abcdef";
  s->size = 3;
  s->ranks = ranks;
}

static void a_ring_spec_round_trips_with_and_without_an_nccl_id(void **state) {
  (void)state;
  kolo_ringspec s;
  kolo_ringspec_rank ranks[3];
  sample(&s, ranks);
  for (int with_id = 0; with_id < 2; with_id++) {
    s.has_nccl_id = with_id;
    for (int i = 0; i < KOLO_RINGSPEC_NCCL_ID_BYTES; i++) s.nccl_id[i] = (unsigned char)(i * 13 + 1);
    char *json = NULL;
    assert_int_equal(kolo_ringspec_encode(&s, &json), KOLO_OK);
    kolo_ringspec back;
    assert_int_equal(kolo_ringspec_decode(json, strlen(json), &back), KOLO_OK);
    assert_string_equal(back.job, "job-1");
    assert_int_equal(back.epoch, 4);
    assert_string_equal(back.token, s.token);
    assert_int_equal(back.size, 3);
    for (int r = 0; r < 3; r++) {
      assert_string_equal(back.ranks[r].worker, ranks[r].worker);
      assert_string_equal(back.ranks[r].address, ranks[r].address);
    }
    assert_int_equal(back.has_nccl_id, with_id);
    if (with_id) assert_memory_equal(back.nccl_id, s.nccl_id, KOLO_RINGSPEC_NCCL_ID_BYTES);
    assert_int_equal(kolo_ringspec_rank_of(&back, "w3"), 2);
    assert_int_equal(kolo_ringspec_rank_of(&back, "w9"), -1);
    kolo_ringspec_clear(&back);
    free(json);
  }
}

static void a_ring_spec_with_bad_fields_is_rejected(void **state) {
  (void)state;
  const char *ok_ranks = "[{\"rank\":0,\"worker\":\"w1\",\"address\":\"h:1\"}]";
  const char *token = "\"0123456789abcdef\"";
  char *id127 = calloc(1, 200), *id128 = calloc(1, 200);
  unsigned char raw[128] = {0};
  kolo_base64_encode(raw, 127, id127);
  kolo_base64_encode(raw, 128, id128);
  struct {
    kolo_status expect;
    const char *needle;
    char json[700];
  } cases[12];
  int n = 0;
#define CASE(st, nd, ...) \
  do { cases[n].expect = st; cases[n].needle = nd; snprintf(cases[n].json, sizeof cases[n].json, __VA_ARGS__); n++; } while (0)
  CASE(KOLO_ERR_PARSE, "malformed", "{\"job\":\"j\",");
  CASE(KOLO_ERR_PARSE, "unknown field 'extra'", "{\"job\":\"j\",\"epoch\":1,\"token\":%s,\"size\":1,\"ranks\":%s,\"extra\":1}", token, ok_ranks);
  CASE(KOLO_ERR_PARSE, "'epoch'", "{\"job\":\"j\",\"epoch\":\"1\",\"token\":%s,\"size\":1,\"ranks\":%s}", token, ok_ranks);
  CASE(KOLO_ERR_INVALID_ARG, "size 2", "{\"job\":\"j\",\"epoch\":1,\"token\":%s,\"size\":2,\"ranks\":%s}", token, ok_ranks);
  CASE(KOLO_ERR_INVALID_ARG, "in order", "{\"job\":\"j\",\"epoch\":1,\"token\":%s,\"size\":1,\"ranks\":[{\"rank\":1,\"worker\":\"w\",\"address\":\"h:1\"}]}", token);
  CASE(KOLO_ERR_INVALID_ARG, "holds ranks", "{\"job\":\"j\",\"epoch\":1,\"token\":%s,\"size\":2,\"ranks\":[{\"rank\":0,\"worker\":\"w\",\"address\":\"h:1\"},{\"rank\":1,\"worker\":\"w\",\"address\":\"h:2\"}]}", token);
  CASE(KOLO_ERR_INVALID_ARG, "address", "{\"job\":\"j\",\"epoch\":1,\"token\":%s,\"size\":1,\"ranks\":[{\"rank\":0,\"worker\":\"w\",\"address\":\"h:99999\"}]}", token);
  CASE(KOLO_ERR_INVALID_ARG, "token", "{\"job\":\"j\",\"epoch\":1,\"token\":\"short\",\"size\":1,\"ranks\":%s}", ok_ranks);
  CASE(KOLO_ERR_INVALID_ARG, "epoch", "{\"job\":\"j\",\"epoch\":-1,\"token\":%s,\"size\":1,\"ranks\":%s}", token, ok_ranks);
  CASE(KOLO_ERR_INVALID_ARG, "128 bytes", "{\"job\":\"j\",\"epoch\":1,\"token\":%s,\"size\":1,\"ranks\":%s,\"nccl_id\":\"%s\"}", token, ok_ranks, id127);
  CASE(KOLO_ERR_INVALID_ARG, "128 bytes", "{\"job\":\"j\",\"epoch\":1,\"token\":%s,\"size\":1,\"ranks\":%s,\"nccl_id\":\"not base64!\"}", token, ok_ranks);
  CASE(KOLO_ERR_PARSE, "malformed", "{\"job\":\"j\",\"job\":\"k\",\"epoch\":1,\"token\":%s,\"size\":1,\"ranks\":%s}", token, ok_ranks);
#undef CASE
  for (int i = 0; i < n; i++) {
    kolo_ringspec out;
    kolo_status rc = kolo_ringspec_decode(cases[i].json, strlen(cases[i].json), &out);
    if (rc != cases[i].expect || strstr(kolo_etcd_last_error(), cases[i].needle) == NULL)
      fail_msg("case %d: got %s '%s' for %s", i, kolo_status_name(rc), kolo_etcd_last_error(), cases[i].json);
    assert_null(out.ranks);
    assert_null(out.job);
  }
  /* The good variant of the same shape decodes. */
  char good[700];
  snprintf(good, sizeof good, "{\"job\":\"j\",\"epoch\":1,\"token\":%s,\"size\":1,\"ranks\":%s,\"nccl_id\":\"%s\"}", token,
           ok_ranks, id128);
  kolo_ringspec out;
  assert_int_equal(kolo_ringspec_decode(good, strlen(good), &out), KOLO_OK);
  kolo_ringspec_clear(&out);
  free(id127);
  free(id128);
}

static void encoding_an_invalid_ring_spec_fails(void **state) {
  (void)state;
  kolo_ringspec s;
  kolo_ringspec_rank ranks[3];
  sample(&s, ranks);
  ranks[1].worker = "w1";
  char *json = NULL;
  assert_int_equal(kolo_ringspec_encode(&s, &json), KOLO_ERR_INVALID_ARG);
  assert_null(json);
}

static void a_worker_record_round_trips_and_has_the_documented_shape(void **state) {
  (void)state;
  kolo_member_label labels[] = {{"zone", "a"}, {"gpu.model", "H200"}};
  kolo_member m = {.id = "w-7", .host = "node-a", .address = "10.0.0.5:7100", .cpus = 16, .gpus = 2,
                   .labels = labels, .label_count = 2, .state = "idle"};
  char *json = NULL;
  assert_int_equal(kolo_member_to_json(&m, &json), KOLO_OK);
  assert_string_equal(json,
                      "{\"address\":\"10.0.0.5:7100\",\"cpus\":16,\"gpus\":2,\"host\":\"node-a\",\"id\":\"w-7\","
                      "\"labels\":{\"gpu.model\":\"H200\",\"zone\":\"a\"},\"state\":\"idle\"}");
  kolo_member back;
  assert_int_equal(kolo_member_from_json(json, strlen(json), &back), KOLO_OK);
  assert_string_equal(back.id, "w-7");
  assert_string_equal(back.host, "node-a");
  assert_int_equal(back.cpus, 16);
  assert_int_equal(back.gpus, 2);
  assert_int_equal(back.label_count, 2);
  assert_int_equal(back.registered_unix_ms, 0); /* absent: not recorded */
  kolo_member_clear(&back);
  free(json);
  /* #12 item 10: the registration time travels in the record (ListWorkers' registered_unix_ms) */
  m.registered_unix_ms = 1764583200123;
  assert_int_equal(kolo_member_to_json(&m, &json), KOLO_OK);
  assert_non_null(strstr(json, "\"registered_unix_ms\":1764583200123"));
  assert_int_equal(kolo_member_from_json(json, strlen(json), &back), KOLO_OK);
  assert_int_equal(back.registered_unix_ms, 1764583200123);
  kolo_member_clear(&back);
  free(json);
}

static void bad_worker_records_are_rejected(void **state) {
  (void)state;
  const char *bad[] = {
      "{\"id\":\"w\"",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":1,\"gpus\":0}",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":\"1\",\"gpus\":0,\"state\":\"idle\"}",
      "{\"id\":\"w/x\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":1,\"gpus\":0,\"state\":\"idle\"}",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h\",\"cpus\":1,\"gpus\":0,\"state\":\"idle\"}",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":-1,\"gpus\":0,\"state\":\"idle\"}",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":1,\"gpus\":0,\"state\":\"Idle!\"}",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":1,\"gpus\":0,\"state\":\"idle\",\"labels\":{\"k\":1}}",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":1,\"gpus\":0,\"state\":\"idle\",\"registered_unix_ms\":-5}",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":1,\"gpus\":0,\"state\":\"idle\",\"registered_unix_ms\":\"1\"}",
      "[]",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kolo_member m;
    kolo_status rc = kolo_member_from_json(bad[i], strlen(bad[i]), &m);
    if (rc != KOLO_ERR_PARSE && rc != KOLO_ERR_INVALID_ARG) fail_msg("accepted: %s", bad[i]);
    assert_true(strstr(kolo_etcd_last_error(), "worker record") != NULL);
    assert_null(m.id);
  }
}

static void keys_follow_the_documented_layout(void **state) {
  (void)state;
  char key[128];
  assert_int_equal(kolo_keys_worker("w1", key, sizeof key), KOLO_OK);
  assert_string_equal(key, "/kolo/v1/workers/w1");
  assert_int_equal(kolo_keys_ring("job-1", 42, key, sizeof key), KOLO_OK);
  assert_string_equal(key, "/kolo/v1/jobs/job-1/ring/00000000000000000042");
  assert_int_equal(kolo_keys_job("job-1", "spec", key, sizeof key), KOLO_OK);
  assert_string_equal(key, "/kolo/v1/jobs/job-1/spec");
  assert_int_equal(kolo_keys_assign("w1", key, sizeof key), KOLO_OK);
  assert_string_equal(key, "/kolo/v1/assign/w1");
  assert_int_equal(kolo_keys_event("j", 7, key, sizeof key), KOLO_OK);
  assert_string_equal(key, "/kolo/v1/jobs/j/events/00000000000000000007");
  assert_int_equal(kolo_keys_worker("../x", key, sizeof key), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_keys_worker("..", key, sizeof key), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_keys_ring("j", -1, key, sizeof key), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_keys_worker("w1", key, 10), KOLO_ERR_TOO_LARGE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_ring_spec_round_trips_with_and_without_an_nccl_id),
      cmocka_unit_test(a_ring_spec_with_bad_fields_is_rejected),
      cmocka_unit_test(encoding_an_invalid_ring_spec_fails),
      cmocka_unit_test(a_worker_record_round_trips_and_has_the_documented_shape),
      cmocka_unit_test(bad_worker_records_are_rejected),
      cmocka_unit_test(keys_follow_the_documented_layout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
