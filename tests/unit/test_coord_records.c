/* Unit tests for the JSON records kolo keeps in etcd: the ring record
 * (coordination/ringspec.c) and the worker record (coordination/membership.c)
 * round-trip, and every kind of bad input is rejected with a message; plus the
 * key layout helpers (coordination/keys.c). The assignment and the agent's report are
 * test_coord_report_records.c's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "coordination/etcd.h"
#include "coordination/keys.h"
#include "coordination/membership.h"
#include "codec/codec.h"
#include "coordination/ringspec.h"

/* A ring record built in memory (strings borrowed), as the scheduler builds one. */
typedef struct sample_ring {
  Kolo__V1__RingRecord r;
  Kolo__V1__RingMember members[3];
  Kolo__V1__RingMember *member_ptrs[3];
  Kolo__V1__RingLost lost[1];
  Kolo__V1__RingLost *lost_ptrs[1];
} sample_ring;

static void member_of(Kolo__V1__RingMember *m, const char *id, const char *host,
                      const char *address, int64_t local_rank, int64_t local_size, int64_t since) {
  kolo__v1__ring_member__init(m);
  m->worker_id = (char *)id;
  m->host = (char *)host;
  m->address = (char *)address;
  m->local_rank = local_rank;
  m->local_size = local_size;
  m->since_epoch = since;
}

static void sample(sample_ring *t) {
  memset(t, 0, sizeof *t);
  member_of(&t->members[0], "w1", "node-a", "10.0.0.5:7100", 0, 2, 1);
  member_of(&t->members[1], "w2", "node-a", "[fe80::1]:7100", 1, 2, 3);
  member_of(&t->members[2], "w3", "node-b", "node-3.cluster:7100", 0, 1, 4);
  for (int i = 0; i < 3; i++) t->member_ptrs[i] = &t->members[i];
  kolo__v1__ring_lost__init(&t->lost[0]);
  t->lost[0].worker_id = "w9";
  t->lost[0].why = "its lease expired";
  t->lost_ptrs[0] = &t->lost[0];
  Kolo__V1__RingRecord *s = &t->r;
  kolo__v1__ring_record__init(s);
  s->job = "job-1";
  s->epoch = 4;
  s->timeout_ms = 30000;
  s->secret = "0123456789abcdef0123456789abcdef";
  s->n_members = 3;
  s->members = t->member_ptrs;
  s->n_lost = 1;
  s->lost = t->lost_ptrs;
}

/* The exact bytes the scheduler wrote before the codec owned the record: readers of
 * an existing etcd (and the server's lenient history reader) see the same shape. */
static const char documented[] =
    "{\"job\":\"job-1\",\"epoch\":4,\"timeout_ms\":30000,\"secret\":"
    "\"0123456789abcdef0123456789abcdef\","
    "\"members\":[{\"worker_id\":\"w1\",\"rank\":0,\"host\":\"node-a\",\"address\":\"10.0.0.5:"
    "7100\","
    "\"local_rank\":0,\"local_size\":2,\"since_epoch\":1},"
    "{\"worker_id\":\"w2\",\"rank\":1,\"host\":\"node-a\",\"address\":\"[fe80::1]:7100\","
    "\"local_rank\":1,\"local_size\":2,\"since_epoch\":3},"
    "{\"worker_id\":\"w3\",\"rank\":2,\"host\":\"node-b\",\"address\":\"node-3.cluster:7100\","
    "\"local_rank\":0,\"local_size\":1,\"since_epoch\":4}],"
    "\"lost\":[{\"worker_id\":\"w9\",\"why\":\"its lease expired\"}]}";

static void a_ring_record_round_trips_and_has_the_documented_shape(void **state) {
  (void)state;
  sample_ring t;
  sample(&t);
  Kolo__V1__RingMember *members = t.members;
  char err[256] = "";
  for (int planned = 0; planned < 2; planned++) {
    t.r.planned = planned;
    char *json = NULL;
    assert_int_equal(kolo_ringspec_write(&t.r, &json, err, sizeof err), KOLO_OK);
    char expected[sizeof documented + 32];
    snprintf(expected, sizeof expected, "%.*s%s", (int)strlen(documented) - 1, documented,
             planned ? ",\"planned\":true}" : "}");
    assert_string_equal(json, expected);
    Kolo__V1__RingRecord *back = NULL;
    assert_int_equal(kolo_ringspec_read(json, strlen(json), &back, err, sizeof err), KOLO_OK);
    assert_string_equal(back->job, "job-1");
    assert_int_equal(back->epoch, 4);
    assert_int_equal(back->timeout_ms, 30000);
    assert_string_equal(back->secret, t.r.secret);
    assert_int_equal(back->n_members, 3);
    for (int r = 0; r < 3; r++) {
      assert_string_equal(back->members[r]->worker_id, members[r].worker_id);
      assert_string_equal(back->members[r]->host, members[r].host);
      assert_string_equal(back->members[r]->address, members[r].address);
      assert_int_equal(back->members[r]->local_rank, members[r].local_rank);
      assert_int_equal(back->members[r]->local_size, members[r].local_size);
      assert_int_equal(back->members[r]->since_epoch, members[r].since_epoch);
    }
    assert_int_equal(back->n_lost, 1);
    assert_string_equal(back->lost[0]->worker_id, "w9");
    assert_string_equal(back->lost[0]->why, "its lease expired");
    assert_int_equal(back->planned, planned);
    assert_int_equal(kolo_ringspec_rank_of(back, "w3"), 2);
    assert_int_equal(kolo_ringspec_rank_of(back, "w9"), -1);
    protobuf_c_message_free_unpacked(&back->base, NULL);
    free(json);
  }
}

/* Records already in an etcd, as the json_pack writer before the codec (and the codec
 * since) wrote them, read back through kolo.v1.RingRecord unchanged; what is written
 * now is the same bytes, so a previous version reads it too. */
static void a_ring_record_written_the_old_way_is_read(void **state) {
  (void)state;
  char text[sizeof documented + 64];
  snprintf(text, sizeof text, "%.*s,\"planned\":true}", (int)strlen(documented) - 1, documented);
  const char *lease = strstr(documented, "\"since_epoch\":3}");
  char leased[sizeof documented + 64];
  snprintf(leased, sizeof leased, "%.*s\"since_epoch\":3,\"lease\":7587892}%s",
           (int)(lease - documented), documented, lease + strlen("\"since_epoch\":3}"));
  const char *old[] = {documented, text, leased};
  for (int i = 0; i < 3; i++) {
    Kolo__V1__RingRecord *back = NULL;
    char err[256] = "";
    assert_int_equal(kolo_ringspec_read(old[i], strlen(old[i]), &back, err, sizeof err), KOLO_OK);
    assert_string_equal(back->job, "job-1");
    assert_int_equal(back->n_members, 3);
    assert_string_equal(back->members[2]->address, "node-3.cluster:7100");
    assert_int_equal(back->members[1]->since_epoch, 3);
    assert_int_equal(back->members[1]->lease, i == 2 ? 7587892 : 0);
    assert_int_equal(back->planned, i == 1);
    char *again = NULL;
    assert_int_equal(kolo_ringspec_write(back, &again, err, sizeof err), KOLO_OK);
    assert_string_equal(again, old[i]);
    free(again);
    protobuf_c_message_free_unpacked(&back->base, NULL);
  }
}

/* Each member's lease (which registration of the worker the epoch means) is written
 * when known and read back; absent (older records) it is 0; a bad one is refused. */
static void a_member_s_lease_round_trips_and_is_optional(void **state) {
  (void)state;
  sample_ring t;
  sample(&t);
  Kolo__V1__RingMember *members = t.members;
  char err[256] = "";
  members[1].lease = 0x1fc4a231861dcb16;
  char *json = NULL;
  assert_int_equal(kolo_ringspec_write(&t.r, &json, err, sizeof err), KOLO_OK);
  assert_non_null(strstr(json, "\"since_epoch\":3,\"lease\":2289132844198251286}"));
  assert_null(
      strstr(strstr(json, "\"lease\"") + 1, "\"lease\"")); /* members without one have none */
  Kolo__V1__RingRecord *back = NULL;
  assert_int_equal(kolo_ringspec_read(json, strlen(json), &back, err, sizeof err), KOLO_OK);
  assert_int_equal(back->members[0]->lease, 0);
  assert_int_equal(back->members[1]->lease, 0x1fc4a231861dcb16);
  assert_int_equal(back->members[2]->lease, 0);
  protobuf_c_message_free_unpacked(&back->base, NULL);
  free(json);
  members[1].lease = -1;
  assert_int_equal(kolo_ringspec_write(&t.r, &json, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_null(json);
  const char *bad[] = {"-5", "\"7\"", "1.5"};
  for (size_t i = 0; i < 3; i++) {
    char text[600];
    snprintf(
        text, sizeof text,
        "{\"job\":\"j\",\"epoch\":1,\"timeout_ms\":5,\"secret\":\"0123456789abcdef\",\"members\":[{"
        "\"worker_id\":"
        "\"w\",\"rank\":0,\"host\":\"h\",\"address\":\"h:1\",\"local_rank\":0,\"local_size\":1,"
        "\"since_epoch\":1,\"lease\":%s}],\"lost\":[]}",
        bad[i]);
    Kolo__V1__RingRecord *out = NULL;
    assert_int_not_equal(kolo_ringspec_read(text, strlen(text), &out, err, sizeof err), KOLO_OK);
    assert_non_null(strstr(err, "'lease' of member 0"));
    assert_null(out);
  }
}

static void unknown_fields_are_ignored_and_an_empty_lost_list_is_fine(void **state) {
  (void)state;
  const char *json =
      "{\"job\":\"j\",\"epoch\":1,\"timeout_ms\":5,\"secret\":\"0123456789abcdef\",\"future\":[1],"
      "\"members\":[{\"worker_id\":\"w\",\"rank\":0,\"host\":\"h\",\"address\":\"h:1\",\"local_"
      "rank\":0,"
      "\"local_size\":1,\"since_epoch\":1,\"gpu\":\"x\"}],\"lost\":[]}";
  Kolo__V1__RingRecord *out = NULL;
  assert_int_equal(kolo_ringspec_read(json, strlen(json), &out, NULL, 0), KOLO_OK);
  assert_int_equal(out->n_members, 1);
  assert_int_equal(out->n_lost, 0);
  assert_int_equal(out->planned, 0);
  protobuf_c_message_free_unpacked(&out->base, NULL);
}

/* A one-member record with the member's fields in m, the top-level fields around
 * them in top (each a JSON fragment ending in a comma, or ""). */
static void one_member(char *out, size_t size, const char *top, const char *m, const char *lost) {
  snprintf(out, size,
           "{%s\"members\":[{\"worker_id\":\"w\",\"rank\":0,%s\"local_rank\":0,\"local_size\":1}],"
           "\"lost\":%s}",
           top, m, lost);
}

static void a_ring_record_with_bad_fields_is_rejected_naming_the_field(void **state) {
  (void)state;
  const char *top =
      "\"job\":\"j\",\"epoch\":2,\"timeout_ms\":30000,\"secret\":\"0123456789abcdef\",";
  const char *member = "\"host\":\"h\",\"address\":\"h:1\",\"since_epoch\":1,";
  struct {
    kolo_status expect;
    const char *needle;
    char json[900];
  } cases[24];
  int n = 0;
#define CASE(st, nd, t, m, l)                                 \
  do {                                                        \
    cases[n].expect = st;                                     \
    cases[n].needle = nd;                                     \
    one_member(cases[n].json, sizeof cases[n].json, t, m, l); \
    n++;                                                      \
  } while (0)
  CASE(KOLO_ERR_PARSE, "member 0 has no 'address'", top, "\"host\":\"h\",\"since_epoch\":1,", "[]");
  CASE(KOLO_ERR_INVALID_ARG, "address '?' is not host:port", top,
       "\"host\":\"h\",\"address\":\"?\",\"since_epoch\":1,", "[]");
  CASE(KOLO_ERR_PARSE, "member 0 has no 'host'", top, "\"address\":\"h:1\",\"since_epoch\":1,",
       "[]");
  CASE(KOLO_ERR_INVALID_ARG, "host must be", top,
       "\"host\":\"\",\"address\":\"h:1\",\"since_epoch\":1,", "[]");
  CASE(KOLO_ERR_INVALID_ARG, "since_epoch 3 is not in 0..2", top,
       "\"host\":\"h\",\"address\":\"h:1\",\"since_epoch\":3,", "[]");
  CASE(KOLO_ERR_PARSE, "member 0 has no 'since_epoch'", top, "\"host\":\"h\",\"address\":\"h:1\",",
       "[]");
  CASE(KOLO_ERR_PARSE, "the record has no 'secret'",
       "\"job\":\"j\",\"epoch\":2,\"timeout_ms\":30000,", member, "[]");
  CASE(KOLO_ERR_INVALID_ARG, "secret must be",
       "\"job\":\"j\",\"epoch\":2,\"timeout_ms\":30000,\"secret\":\"short\",", member, "[]");
  CASE(KOLO_ERR_INVALID_ARG, "'timeout_ms' of the record is 0",
       "\"job\":\"j\",\"epoch\":2,\"timeout_ms\":0,\"secret\":\"0123456789abcdef\",", member, "[]");
  CASE(KOLO_ERR_INVALID_ARG, "'epoch' of the record is -1",
       "\"job\":\"j\",\"epoch\":-1,\"timeout_ms\":1,\"secret\":\"0123456789abcdef\",", member,
       "[]");
  CASE(KOLO_ERR_PARSE, "'epoch' of the record is not an integer",
       "\"job\":\"j\",\"epoch\":\"2\",\"timeout_ms\":1,\"secret\":\"0123456789abcdef\",", member,
       "[]");
  CASE(KOLO_ERR_INVALID_ARG, "job id '../x' is not valid",
       "\"job\":\"../x\",\"epoch\":2,\"timeout_ms\":1,\"secret\":\"0123456789abcdef\",", member,
       "[]");
  CASE(KOLO_ERR_PARSE, "malformed JSON",
       "\"job\":\"j\",\"job\":\"k\",\"epoch\":2,\"timeout_ms\":1,\"secret\":\"0123456789abcdef\",",
       member, "[]");
  CASE(KOLO_ERR_PARSE, "'lost' is missing or not an array", top, member, "{}");
  CASE(KOLO_ERR_PARSE, "lost entry 0 has no 'why'", top, member, "[{\"worker_id\":\"w0\"}]");
  CASE(KOLO_ERR_INVALID_ARG, "lost entry 0 has an invalid worker_id", top, member,
       "[{\"worker_id\":\"\",\"why\":\"x\"}]");
  CASE(KOLO_ERR_PARSE, "'planned' is not a boolean",
       "\"planned\":1,\"job\":\"j\",\"epoch\":2,\"timeout_ms\":1,\"secret\":\"0123456789abcdef\",",
       member, "[]");
#undef CASE
  int simple = n;
  const char *whole[][3] = {
      {"1", "malformed JSON", "{\"job\":\"j\","},
      {"1", "malformed JSON: not an object", "[1]"},
      {"2", "members (1..",
       "{\"job\":\"j\",\"epoch\":2,\"timeout_ms\":1,\"secret\":\"0123456789abcdef\",\"members\":[],"
       "\"lost\":[]}"},
      {"1", "'members' is missing",
       "{\"job\":\"j\",\"epoch\":2,\"timeout_ms\":1,\"secret\":\"0123456789abcdef\",\"lost\":[]}"},
      {"2", "member 0 says rank 1 (members must be listed in rank order)",
       "{\"job\":\"j\",\"epoch\":2,\"timeout_ms\":1,\"secret\":\"0123456789abcdef\",\"lost\":[],"
       "\"members\":[{\"worker_id\":"
       "\"w\",\"rank\":1,\"host\":\"h\",\"address\":\"h:1\",\"local_rank\":0,\"local_size\":1,"
       "\"since_epoch\":1}]}"},
      {"2", "worker 'w' holds ranks 0 and 1",
       "{\"job\":\"j\",\"epoch\":2,\"timeout_ms\":1,\"secret\":\"0123456789abcdef\",\"lost\":[],"
       "\"members\":["
       "{\"worker_id\":\"w\",\"rank\":0,\"host\":\"h\",\"address\":\"h:1\",\"local_rank\":0,"
       "\"local_size\":2,\"since_epoch\":1},"
       "{\"worker_id\":\"w\",\"rank\":1,\"host\":\"h\",\"address\":\"h:2\",\"local_rank\":1,"
       "\"local_size\":2,\"since_epoch\":1}]}"},
      {"2", "local_rank 1 / local_size 1",
       "{\"job\":\"j\",\"epoch\":2,\"timeout_ms\":1,\"secret\":\"0123456789abcdef\",\"lost\":[],"
       "\"members\":[{\"worker_id\":"
       "\"w\",\"rank\":0,\"host\":\"h\",\"address\":\"h:1\",\"local_rank\":1,\"local_size\":1,"
       "\"since_epoch\":1}]}"},
  };
  for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
    cases[n].expect = whole[i][0][0] == '1' ? KOLO_ERR_PARSE : KOLO_ERR_INVALID_ARG;
    cases[n].needle = whole[i][1];
    snprintf(cases[n].json, sizeof cases[n].json, "%s", whole[i][2]);
    n++;
  }
  assert_true(n > simple);
  for (int i = 0; i < n; i++) {
    Kolo__V1__RingRecord *out = (Kolo__V1__RingRecord *)&out; /* must come back NULL */
    char err[256] = "";
    kolo_status rc =
        kolo_ringspec_read(cases[i].json, strlen(cases[i].json), &out, err, sizeof err);
    if (rc != cases[i].expect || strstr(err, cases[i].needle) == NULL)
      fail_msg("case %d: got %s '%s' for %s", i, kolo_status_name(rc), err, cases[i].json);
    assert_null(out);
  }
  /* The good variant of the same shape decodes. */
  char good[900];
  one_member(good, sizeof good, top, member, "[{\"worker_id\":\"w0\",\"why\":\"gone\"}]");
  Kolo__V1__RingRecord *out = NULL;
  assert_int_equal(kolo_ringspec_read(good, strlen(good), &out, NULL, 0), KOLO_OK);
  assert_string_equal(out->members[0]->address, "h:1");
  protobuf_c_message_free_unpacked(&out->base, NULL);
}

static void encoding_an_invalid_ring_record_fails(void **state) {
  (void)state;
  sample_ring t;
  sample(&t);
  Kolo__V1__RingMember *members = t.members;
  char err[256] = "";
  members[1].worker_id = "w1";
  char *json = NULL;
  assert_int_equal(kolo_ringspec_write(&t.r, &json, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_null(json);
  sample(&t);
  members[2].address = "?"; /* what a member without a worker record used to get */
  assert_int_equal(kolo_ringspec_write(&t.r, &json, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "member 2 (w3) address '?' is not host:port"));
  assert_null(json);
}

static void a_worker_record_round_trips_and_has_the_documented_shape(void **state) {
  (void)state;
  Kolo__V1__WorkerRecord__LabelsEntry zone = KOLO__V1__WORKER_RECORD__LABELS_ENTRY__INIT,
                                      model = KOLO__V1__WORKER_RECORD__LABELS_ENTRY__INIT;
  zone.key = "zone";
  zone.value = "a";
  model.key = "gpu.model";
  model.value = "H200";
  Kolo__V1__WorkerRecord__LabelsEntry *labels[] = {&zone, &model};
  Kolo__V1__WorkerRecord m = KOLO__V1__WORKER_RECORD__INIT; /* presence: kolo_member_write's */
  m.id = "w-7";
  m.host = "node-a";
  m.address = "10.0.0.5:7100";
  m.cpus = 16;
  m.gpus = 2;
  m.labels = labels;
  m.n_labels = 2;
  m.state = "idle";
  char *json = NULL, err[256] = "";
  assert_int_equal(kolo_member_write(&m, &json, err, sizeof err), KOLO_OK);
  assert_string_equal(
      json,
      "{\"address\":\"10.0.0.5:7100\",\"cpus\":16,\"gpus\":2,\"host\":\"node-a\",\"id\":\"w-7\","
      "\"labels\":{\"gpu.model\":\"H200\",\"zone\":\"a\"},\"state\":\"idle\"}");
  assert_ptr_equal(m.labels[0], &zone); /* the writer's order is left alone */
  Kolo__V1__WorkerRecord *back = NULL;
  assert_int_equal(kolo_member_read(json, strlen(json), &back, err, sizeof err), KOLO_OK);
  assert_string_equal(back->id, "w-7");
  assert_string_equal(back->host, "node-a");
  assert_int_equal(back->cpus, 16);
  assert_int_equal(back->gpus, 2);
  assert_int_equal(back->n_labels, 2);
  assert_int_equal(back->registered_unix_ms, 0); /* absent: not recorded */
  protobuf_c_message_free_unpacked(&back->base, NULL);
  free(json);
  /* #12 item 10: the registration time travels in the record (ListWorkers' registered_unix_ms) */
  m.registered_unix_ms = 1764583200123;
  assert_int_equal(kolo_member_write(&m, &json, err, sizeof err), KOLO_OK);
  assert_non_null(strstr(json, "\"registered_unix_ms\":1764583200123"));
  assert_int_equal(kolo_member_read(json, strlen(json), &back, err, sizeof err), KOLO_OK);
  assert_int_equal(back->registered_unix_ms, 1764583200123);
  protobuf_c_message_free_unpacked(&back->base, NULL);
  free(json);
  /* the rules hold over a record built in memory as over one read */
  m.state = "Busy";
  assert_int_equal(kolo_member_write(&m, &json, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "worker record w-7: state must be 1-32 of [a-z_]"));
  assert_null(json);
  m.state = "idle";
  model.key = "zone";
  assert_int_equal(kolo_member_validate(&m, err, sizeof err), KOLO_ERR_PARSE); /* no has_cpus */
  m.has_cpus = m.has_gpus = 1;
  assert_int_equal(kolo_member_validate(&m, err, sizeof err), KOLO_ERR_INVALID_ARG);
  assert_non_null(strstr(err, "label 'zone' appears twice"));
}

/* Worker records as kolo-worker has written them (JSON_SORT_KEYS, logs fields when set),
 * and one from a newer worker, read through kolo.v1.WorkerRecord; what is written now is
 * the same bytes (no empty logs fields). */
static void a_worker_record_written_the_old_way_is_read(void **state) {
  (void)state;
  const char *old =
      "{\"address\":\"10.0.0.5:7100\",\"cpus\":16,\"gpus\":2,\"host\":\"node-a\","
      "\"id\":\"w-7\",\"labels\":{},\"logs_token\":\"abcdefghijklmnop\","
      "\"logs_url\":\"http://10.0.0.5:7102\",\"registered_unix_ms\":17,"
      "\"state\":\"busy\"}";
  Kolo__V1__WorkerRecord *m = NULL;
  char err[256] = "";
  assert_int_equal(kolo_member_read(old, strlen(old), &m, err, sizeof err), KOLO_OK);
  assert_string_equal(m->logs_url, "http://10.0.0.5:7102");
  assert_string_equal(m->logs_token, "abcdefghijklmnop");
  assert_int_equal(m->registered_unix_ms, 17);
  assert_string_equal(m->state, "busy");
  char *again = NULL;
  assert_int_equal(kolo_member_write(m, &again, err, sizeof err), KOLO_OK);
  assert_string_equal(again, old);
  free(again);
  protobuf_c_message_free_unpacked(&m->base, NULL);
  const char *newer =
      "{\"address\":\"h:1\",\"cpus\":1,\"gpus\":0,\"host\":\"h\",\"id\":\"w\","
      "\"numa\":[0,1],\"state\":\"idle\"}";
  assert_int_equal(kolo_member_read(newer, strlen(newer), &m, err, sizeof err), KOLO_OK);
  assert_null(m->logs_url);
  assert_int_equal(m->n_labels, 0);
  assert_int_equal(kolo_member_write(m, &again, err, sizeof err), KOLO_OK);
  assert_null(strstr(again, "logs_")); /* none set: none written */
  free(again);
  protobuf_c_message_free_unpacked(&m->base, NULL);
}

static void bad_worker_records_are_rejected(void **state) {
  (void)state;
  const char *bad[] = {
      "{\"id\":\"w\"",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":1,\"gpus\":0}",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":\"1\",\"gpus\":0,\"state\":"
      "\"idle\"}",
      "{\"id\":\"w/"
      "x\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":1,\"gpus\":0,\"state\":\"idle\"}",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h\",\"cpus\":1,\"gpus\":0,\"state\":\"idle\"}",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":-1,\"gpus\":0,\"state\":\"idle\"}",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":1,\"gpus\":0,\"state\":\"Idle!\"}",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":1,\"gpus\":0,\"state\":\"idle\","
      "\"labels\":{\"k\":1}}",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":1,\"gpus\":0,\"state\":\"idle\","
      "\"registered_unix_ms\":-5}",
      "{\"id\":\"w\",\"host\":\"h\",\"address\":\"h:1\",\"cpus\":1,\"gpus\":0,\"state\":\"idle\","
      "\"registered_unix_ms\":\"1\"}",
      "[]",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    Kolo__V1__WorkerRecord *m = (Kolo__V1__WorkerRecord *)&m; /* must come back NULL */
    char err[256] = "";
    kolo_status rc = kolo_member_read(bad[i], strlen(bad[i]), &m, err, sizeof err);
    if (rc != KOLO_ERR_PARSE && rc != KOLO_ERR_INVALID_ARG) fail_msg("accepted: %s", bad[i]);
    assert_true(strstr(err, "worker record") != NULL);
    assert_null(m);
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
  assert_int_equal(kolo_keys_report("j", "w1", key, sizeof key), KOLO_OK);
  assert_string_equal(key, "/kolo/v1/jobs/j/reports/w1");
  assert_int_equal(kolo_keys_report("j", "a/b", key, sizeof key), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_keys_metrics("j", 12, key, sizeof key), KOLO_OK);
  assert_string_equal(key, "/kolo/v1/metrics/j/00000000000000000012");
  assert_int_equal(kolo_keys_drain("w1", key, sizeof key), KOLO_OK);
  assert_string_equal(key, "/kolo/v1/drain/w1");
  /* the bounded event log (#30): event 1 and the last KOLO_EVENTS_KEPT stay; writing seq
   * evicts seq - KEPT once that is past the first */
  assert_int_equal(kolo_keys_event_evicted(1), 0);
  assert_int_equal(kolo_keys_event_evicted(KOLO_EVENTS_KEPT + 1), 0);
  assert_int_equal(kolo_keys_event_evicted(KOLO_EVENTS_KEPT + 2), 2);
  assert_int_equal(kolo_keys_event_evicted(5000), 5000 - KOLO_EVENTS_KEPT);
  /* event numbers: what both key widths say (10 digits from older writers), nothing else */
  uint64_t n = 0;
  assert_true(kolo_keys_event_number("00000000000000000007", &n));
  assert_int_equal(n, 7);
  assert_true(kolo_keys_event_number("0000000010", &n));
  assert_int_equal(n, 10);
  assert_true(kolo_keys_event_number("18446744073709551615", &n));
  assert_true(n == UINT64_MAX);
  assert_false(kolo_keys_event_number("18446744073709551616", &n));
  assert_false(kolo_keys_event_number("", &n));
  assert_false(kolo_keys_event_number("12x", &n));
  assert_false(kolo_keys_event_number("-1", &n));
  assert_false(kolo_keys_event_number("000000000000000000001", &n)); /* 21 digits */
  assert_int_equal(kolo_keys_worker("../x", key, sizeof key), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_keys_worker("..", key, sizeof key), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_keys_ring("j", -1, key, sizeof key), KOLO_ERR_INVALID_ARG);
  assert_int_equal(kolo_keys_worker("w1", key, 10), KOLO_ERR_TOO_LARGE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_ring_record_round_trips_and_has_the_documented_shape),
      cmocka_unit_test(a_ring_record_written_the_old_way_is_read),
      cmocka_unit_test(a_member_s_lease_round_trips_and_is_optional),
      cmocka_unit_test(unknown_fields_are_ignored_and_an_empty_lost_list_is_fine),
      cmocka_unit_test(a_ring_record_with_bad_fields_is_rejected_naming_the_field),
      cmocka_unit_test(encoding_an_invalid_ring_record_fails),
      cmocka_unit_test(a_worker_record_round_trips_and_has_the_documented_shape),
      cmocka_unit_test(a_worker_record_written_the_old_way_is_read),
      cmocka_unit_test(bad_worker_records_are_rejected),
      cmocka_unit_test(keys_follow_the_documented_layout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
