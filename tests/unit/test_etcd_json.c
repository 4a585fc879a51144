/* Unit tests for coordination/etcd_json.c: the shapes the etcd 3.4 gateway sends
 * (int64 as strings, omitted zero values, base64 keys, watch stream lines) parse
 * as expected, and malformed replies become KOLO_ERR_PARSE with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coordination/etcd_internal.h"

static json_t *parse(const char *text) {
  json_error_t e;
  json_t *j = json_loads(text, 0, &e);
  assert_non_null(j);
  return j;
}

static void reads_int64_sent_as_strings_numbers_or_omitted(void **state) {
  (void)state;
  json_t *j = parse("{\"a\":\"9007199254740993\",\"b\":7,\"c\":\"x1\",\"d\":true}");
  int64_t v = -1;
  assert_int_equal(kolo_etcd_json_int64(j, "a", &v), KOLO_OK);
  assert_true(v == 9007199254740993LL);
  assert_int_equal(kolo_etcd_json_int64(j, "b", &v), KOLO_OK);
  assert_int_equal(v, 7);
  assert_int_equal(kolo_etcd_json_int64(j, "missing", &v), KOLO_OK);
  assert_int_equal(v, 0);
  assert_int_equal(kolo_etcd_json_int64(j, "c", &v), KOLO_ERR_PARSE);
  assert_non_null(strstr(kolo_etcd_last_error(), "'c'"));
  assert_int_equal(kolo_etcd_json_int64(j, "d", &v), KOLO_ERR_PARSE);
  json_decref(j);
}

static void parses_a_range_reply_with_omitted_fields(void **state) {
  (void)state;
  json_t *j = parse(
      "{\"header\":{\"revision\":\"12\"},\"kvs\":[{\"key\":\"Zm9v\",\"create_revision\":\"2\","
      "\"mod_revision\":\"11\",\"version\":\"3\",\"value\":\"YmFy\",\"lease\":\"694d\"},"
      "{\"key\":\"Zm9w\",\"create_revision\":\"5\",\"mod_revision\":\"5\",\"version\":\"1\"}],"
      "\"more\":true,\"count\":\"9\"}");
  kolo_etcd_range_result r;
  assert_int_equal(kolo_etcd_range_from_json(j, &r), KOLO_ERR_PARSE); /* lease not decimal */
  json_object_set_new(json_array_get(json_object_get(j, "kvs"), 0), "lease", json_string("694"));
  assert_int_equal(kolo_etcd_range_from_json(j, &r), KOLO_OK);
  assert_int_equal(r.revision, 12);
  assert_int_equal(r.count, 2);
  assert_true(r.more);
  assert_int_equal(r.total, 9);
  assert_string_equal((char *)r.kvs[0].key, "foo");
  assert_string_equal((char *)r.kvs[0].value, "bar");
  assert_int_equal(r.kvs[0].lease, 694);
  assert_int_equal(r.kvs[0].mod_revision, 11);
  assert_string_equal((char *)r.kvs[1].key, "fop");
  assert_int_equal(r.kvs[1].value_len, 0);
  assert_non_null(r.kvs[1].value);
  kolo_etcd_range_result_free(&r);
  json_decref(j);
}

static void a_key_that_is_not_base64_is_a_parse_error(void **state) {
  (void)state;
  json_t *j = parse("{\"kvs\":[{\"key\":\"not base64!\"}]}");
  kolo_etcd_range_result r;
  assert_int_equal(kolo_etcd_range_from_json(j, &r), KOLO_ERR_PARSE);
  assert_non_null(strstr(kolo_etcd_last_error(), "base64"));
  assert_null(r.kvs);
  assert_int_equal(r.count, 0);
  json_decref(j);
}

static void prefix_end_increments_the_last_byte(void **state) {
  (void)state;
  unsigned char *end = NULL;
  size_t len = 0;
  assert_int_equal(kolo_etcd_prefix_end(kolo_etcd_str("/kolo/v1/workers/"), &end, &len), KOLO_OK);
  assert_int_equal(len, 17);
  assert_memory_equal(end, "/kolo/v1/workers0", 17);
  free(end);
  const unsigned char tail[] = {'a', 0xff, 0xff};
  assert_int_equal(kolo_etcd_prefix_end((kolo_etcd_bytes){tail, 3}, &end, &len), KOLO_OK);
  assert_int_equal(len, 1);
  assert_int_equal(end[0], 'b');
  free(end);
  const unsigned char all[] = {0xff};
  assert_int_equal(kolo_etcd_prefix_end((kolo_etcd_bytes){all, 1}, &end, &len), KOLO_OK);
  assert_int_equal(len, 1);
  assert_int_equal(end[0], 0);
  free(end);
}

static void range_request_carries_base64_and_string_numbers(void **state) {
  (void)state;
  kolo_etcd_range_opts opts = {.key = kolo_etcd_str("ab"), .prefix = 1, .limit = 10, .revision = 5};
  json_t *body = NULL;
  assert_int_equal(kolo_etcd_range_request_json(&opts, &body), KOLO_OK);
  assert_string_equal(json_string_value(json_object_get(body, "key")), "YWI=");
  assert_string_equal(json_string_value(json_object_get(body, "range_end")), "YWM=");
  assert_string_equal(json_string_value(json_object_get(body, "limit")), "10");
  assert_string_equal(json_string_value(json_object_get(body, "revision")), "5");
  json_decref(body);
}

static void parses_watch_lines_put_delete_created_and_compacted(void **state) {
  (void)state;
  kolo_etcd_watch_message m;
  const char *created =
      "{\"result\":{\"header\":{\"cluster_id\":\"18328519036988811354\",\"revision\":\"3\"},"
      "\"created\":true}}";
  assert_int_equal(kolo_etcd_watch_message_parse(created, strlen(created), &m), KOLO_OK);
  assert_true(m.created);
  assert_int_equal(m.header_revision, 3);
  assert_true(m.cluster_id == 18328519036988811354ULL); /* above INT64_MAX */
  assert_int_equal(m.event_count, 0);
  kolo_etcd_watch_message_clear(&m);

  const char *events =
      "{\"result\":{\"header\":{\"revision\":\"5\"},\"events\":[{\"kv\":{\"key\":\"Zm9v\","
      "\"mod_revision\":\"4\",\"value\":\"eHg=\"}},{\"type\":\"DELETE\",\"kv\":{\"key\":\"Zm9v\","
      "\"mod_revision\":\"5\"},\"prev_kv\":{\"key\":\"Zm9v\",\"value\":\"eHg=\"}}]}}";
  assert_int_equal(kolo_etcd_watch_message_parse(events, strlen(events), &m), KOLO_OK);
  assert_int_equal(m.event_count, 2);
  assert_int_equal(m.events[0].type, KOLO_ETCD_EVENT_PUT);
  assert_string_equal((char *)m.events[0].kv.value, "xx");
  assert_null(m.events[0].prev_kv.key);
  assert_int_equal(m.events[1].type, KOLO_ETCD_EVENT_DELETE);
  assert_int_equal(m.events[1].kv.mod_revision, 5);
  assert_string_equal((char *)m.events[1].prev_kv.value, "xx");
  kolo_etcd_watch_message_clear(&m);

  const char *compacted =
      "{\"result\":{\"header\":{},\"canceled\":true,\"compact_revision\":\"3\"}}";
  assert_int_equal(kolo_etcd_watch_message_parse(compacted, strlen(compacted), &m), KOLO_OK);
  assert_true(m.canceled);
  assert_int_equal(m.compact_revision, 3);
  kolo_etcd_watch_message_clear(&m);
}

static void malformed_watch_lines_are_parse_errors(void **state) {
  (void)state;
  kolo_etcd_watch_message m;
  const char *bad[] = {"{\"result\":", "[1,2]", "{\"nothing\":1}",
                       "{\"result\":{\"events\":[{\"type\":\"BOGUS\",\"kv\":{\"key\":\"Zm9v\"}}]}}",
                       "{\"result\":{\"events\":[{\"kv\":{\"key\":\"%%%%\"}}]}}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(kolo_etcd_watch_message_parse(bad[i], strlen(bad[i]), &m), KOLO_ERR_PARSE);
    assert_null(m.events);
  }
  const char *err = "{\"error\":\"x\",\"code\":16,\"message\":\"etcdserver: invalid auth token\"}";
  assert_int_equal(kolo_etcd_watch_message_parse(err, strlen(err), &m), KOLO_ERR_AUTH);
  assert_non_null(strstr(kolo_etcd_last_error(), "invalid auth token"));
}

static void grpc_codes_map_to_kolo_statuses(void **state) {
  (void)state;
  assert_int_equal(kolo_etcd_error_status(5, "etcdserver: requested lease not found"),
                   KOLO_ERR_NOT_FOUND);
  assert_int_equal(kolo_etcd_error_status(16, "etcdserver: invalid auth token"), KOLO_ERR_AUTH);
  assert_int_equal(kolo_etcd_error_status(3, "etcdserver: request is too large"),
                   KOLO_ERR_TOO_LARGE);
  assert_int_equal(
      kolo_etcd_error_status(11, "etcdserver: mvcc: required revision has been compacted"),
      KOLO_ERR_NOT_FOUND);
  assert_int_equal(kolo_etcd_error_status(14, "etcdserver: no leader"), KOLO_ERR_UNAVAILABLE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(reads_int64_sent_as_strings_numbers_or_omitted),
      cmocka_unit_test(parses_a_range_reply_with_omitted_fields),
      cmocka_unit_test(a_key_that_is_not_base64_is_a_parse_error),
      cmocka_unit_test(prefix_end_increments_the_last_byte),
      cmocka_unit_test(range_request_carries_base64_and_string_numbers),
      cmocka_unit_test(parses_watch_lines_put_delete_created_and_compacted),
      cmocka_unit_test(malformed_watch_lines_are_parse_errors),
      cmocka_unit_test(grpc_codes_map_to_kolo_statuses),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
