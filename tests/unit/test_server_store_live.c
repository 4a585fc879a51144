/* Unit tests for the scheduler's live read of server/store_records.c over the in-memory kv
 * (tests/unit/lag_kv.h, whose kept watch callback lets a test deliver a reload): the keys of
 * a job the view holds as ended are left out, and the live list kept on the watch stays the
 * same as a full read filtered by each job's stored phase (the oracle below, which knows
 * nothing of the list) as jobs end, appear, come back, are deleted, and the view reloads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec/codec.h"
#include "server/store.h"
#include "tests/unit/lag_kv.h"

#define JOBS "/kolo/v1/jobs/"

typedef struct fixture {
  lag_kv *kv;
  kolo_server_store *store;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  f->kv = lag_kv_create();
  assert_int_equal(kolo_server_store_create(&f->kv->base, &f->store), KOLO_OK);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kolo_server_store_destroy(f->store);
  f->kv->base.ops->destroy(&f->kv->base);
  free(f);
  return 0;
}

static int64_t kv_put(fixture *f, const char *key, const char *value) {
  kolo_server_kv_put put = {key, value, 0};
  int64_t rev = 0;
  assert_int_equal(f->kv->base.ops->txn(&f->kv->base, NULL, 0, &put, 1, &rev), KOLO_OK);
  return rev;
}

static void job_put(fixture *f, const char *id, const char *part, const char *value) {
  char key[256];
  snprintf(key, sizeof key, JOBS "%s/%s", id, part);
  kv_put(f, key, value);
}

static void put_status(fixture *f, const char *id, const char *phase) {
  char value[64];
  snprintf(value, sizeof value, "{\"phase\":\"%s\"}", phase);
  job_put(f, id, "status", value);
}

/* A job as kolo-server writes one: spec, status (phase), its first event. */
static void put_job(fixture *f, const char *id, const char *phase) {
  char spec[128];
  snprintf(spec, sizeof spec, "{\"name\":\"n\",\"id\":\"%s\",\"min_workers\":1}", id);
  job_put(f, id, "spec", spec);
  put_status(f, id, phase);
  job_put(f, id, "events/00000000000000000001", "{\"seq\":\"1\",\"type\":\"SUBMITTED\"}");
}

/* Deletes every key of job id, its spec first (an operator's cleanup), in one txn. */
static void delete_job(fixture *f, const char *id) {
  char prefix[128];
  snprintf(prefix, sizeof prefix, JOBS "%s/", id);
  kolo_server_kv_item *items = NULL;
  size_t n = 0;
  int64_t rev = 0;
  kolo_server_kv *kv = &f->kv->base;
  assert_int_equal(kv->ops->range(kv, prefix, &items, &n, &rev), KOLO_OK);
  kolo_server_kv_put *dels = calloc(n + 2, sizeof *dels);
  char spec[160];
  snprintf(spec, sizeof spec, "%sspec", prefix);
  size_t k = 0;
  dels[k++] = (kolo_server_kv_put){spec, NULL, 0};
  for (size_t i = 0; i < n; i++)
    if (strcmp(items[i].key, spec) != 0) dels[k++] = (kolo_server_kv_put){items[i].key, NULL, 0};
  assert_int_equal(kv->ops->txn(kv, NULL, 0, dels, k, &rev), KOLO_OK);
  free(dels);
  kolo_server_kv_items_free(items, n);
}

/* ---- the oracle: a full read filtered by each job's stored phase, knowing no list ---- */

typedef struct group {
  char id[128];
  size_t first, end;  /* its keys in the full read */
  int in_view, ended; /* a key that makes a view entry; its stored status ended */
} group;

static int group_cmp(const void *a, const void *b) {
  return strcmp(((const group *)a)->id, ((const group *)b)->id);
}

static int ended_phase(const char *value, size_t len) {
  ProtobufCMessage *msg = NULL;
  if (kolo_codec_parse(value, len, &kolo__v1__job_status__descriptor, &msg, NULL, 0) != KOLO_OK)
    return 0;
  Kolo__V1__Phase p = ((Kolo__V1__JobStatus *)msg)->phase;
  protobuf_c_message_free_unpacked(msg, NULL);
  return p == KOLO__V1__PHASE__SUCCEEDED || p == KOLO__V1__PHASE__FAILED ||
         p == KOLO__V1__PHASE__CANCELLED;
}

/* The jobs of the full read (sorted by key) as groups sorted by id; *n groups. */
static group *groups_of(const kolo_etcd_range_result *all, size_t *n) {
  group *g = calloc(all->count + 1, sizeof *g);
  *n = 0;
  for (size_t i = 0; i < all->count; i++) {
    const char *rest = (const char *)all->kvs[i].key + strlen(JOBS);
    const char *slash = strchr(rest, '/');
    assert_non_null(slash);
    size_t id_len = (size_t)(slash - rest), at = 0;
    while (at < *n && !(strlen(g[at].id) == id_len && memcmp(g[at].id, rest, id_len) == 0)) at++;
    if (at == *n) {
      memcpy(g[at].id, rest, id_len);
      g[at].first = i;
      (*n)++;
    }
    assert_int_equal(g[at].end == 0 || g[at].end == i, 1); /* a job's keys are adjacent */
    g[at].end = i + 1;
    const char *part = slash + 1;
    if (strcmp(part, "status") == 0)
      g[at].ended = ended_phase((const char *)all->kvs[i].value, all->kvs[i].value_len);
    /* the keys that make a view entry (reports/ alone do not) */
    if (strcmp(part, "spec") == 0 || strcmp(part, "status") == 0 ||
        strncmp(part, "events/", 7) == 0 || strncmp(part, "ring/", 5) == 0 ||
        strncmp(part, "intents/", 8) == 0)
      g[at].in_view = 1;
  }
  qsort(g, *n, sizeof *g, group_cmp);
  return g;
}

/* The live read equals the oracle: the keys of every job in the view whose stored status
 * is not ended, job by job in id order, each job's keys in key order. Returns the live
 * jobs' ids, comma-separated, into ids. */
static void live_equals_oracle(fixture *f, char *ids, size_t ids_len) {
  const char *const prefixes[1] = {JOBS};
  kolo_etcd_range_result all, live;
  assert_int_equal(kolo_server_store_read_records(f->store, prefixes, 1, 0, 0, &all, NULL, NULL),
                   KOLO_OK);
  assert_int_equal(
      kolo_server_store_read_live_records(f->store, prefixes, 1, 0, 0, &live, NULL, NULL, NULL),
      KOLO_OK);
  size_t n = 0, at = 0;
  group *g = groups_of(&all, &n);
  ids[0] = '\0';
  for (size_t j = 0; j < n; j++) {
    if (!g[j].in_view || g[j].ended) continue;
    snprintf(ids + strlen(ids), ids_len - strlen(ids), "%s%s", ids[0] ? "," : "", g[j].id);
    for (size_t i = g[j].first; i < g[j].end; i++, at++) {
      assert_true(at < live.count);
      assert_string_equal((const char *)live.kvs[at].key, (const char *)all.kvs[i].key);
      assert_string_equal((const char *)live.kvs[at].value, (const char *)all.kvs[i].value);
      assert_int_equal(live.kvs[at].mod_revision, all.kvs[i].mod_revision);
    }
  }
  assert_int_equal(live.count, at);
  free(g);
  kolo_etcd_range_result_free(&all);
  kolo_etcd_range_result_free(&live);
}

static void assert_live(fixture *f, const char *want) {
  char ids[4096];
  live_equals_oracle(f, ids, sizeof ids);
  assert_string_equal(ids, want);
}

/* The scheduler's read (#35): the keys of a job the view holds as ended are left out, those
 * of a live job (and every other prefix) are copied whole; the plain read keeps both. */
static void the_live_read_leaves_out_the_keys_of_ended_jobs(void **state) {
  fixture *f = *state;
  put_job(f, "live", "PENDING");
  put_job(f, "live-ended", "PENDING");
  put_status(f, "live-ended", "CANCELLED"); /* ended as the scheduler ends it */
  job_put(f, "live", "reports/w1", "{}");
  job_put(f, "live-ended", "reports/w1", "{}");
  int64_t at = kv_put(f, "/kolo/v1/workers/w1", "{}");
  const char *const prefixes[2] = {"/kolo/v1/workers/", JOBS};
  kolo_etcd_range_result all[2], live[2];
  assert_int_equal(kolo_server_store_read_records(f->store, prefixes, 2, at, 1000, all, NULL, NULL),
                   KOLO_OK);
  assert_int_equal(
      kolo_server_store_read_live_records(f->store, prefixes, 2, at, 1000, live, NULL, NULL, NULL),
      KOLO_OK);
  assert_int_equal(live[0].count, 1);
  assert_int_equal(all[0].count, 1);
  size_t live_keys = 0, ended_keys = 0;
  for (size_t i = 0; i < all[1].count; i++) {
    const char *key = (const char *)all[1].kvs[i].key;
    if (strncmp(key, JOBS "live/", 19) == 0) live_keys++;
    if (strncmp(key, JOBS "live-ended/", 25) == 0) ended_keys++;
  }
  assert_int_equal(live_keys, 4); /* spec, status, an event, the report */
  assert_int_equal(ended_keys, 4);
  assert_int_equal(all[1].count, live_keys + ended_keys);
  assert_int_equal(live[1].count, live_keys);
  for (size_t i = 0; i < live[1].count; i++)
    assert_int_equal(strncmp((const char *)live[1].kvs[i].key, JOBS "live/", 19), 0);
  assert_string_equal((const char *)live[1].kvs[live_keys - 1].key, JOBS "live/status");
  for (int i = 0; i < 2; i++) {
    kolo_etcd_range_result_free(&all[i]);
    kolo_etcd_range_result_free(&live[i]);
  }
}

/* Delivers the kv's whole state as a reload (a compaction behind the watch), leaving out
 * every key of the jobs whose id contains skip (NULL: none), as another etcd would. */
static void reload(fixture *f, const char *skip) {
  kolo_server_kv_item *items = NULL;
  size_t n = 0;
  int64_t rev = 0;
  kolo_server_kv *kv = &f->kv->base;
  assert_int_equal(kv->ops->range(kv, "/kolo/v1/", &items, &n, &rev), KOLO_OK);
  kolo_server_kv_event *events = calloc(n + 1, sizeof *events);
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (skip == NULL || strstr(items[i].key, skip) == NULL) events[k++].item = items[i];
  f->kv->fn(f->kv->arg, events, k, rev, 1);
  free(events);
  kolo_server_kv_items_free(items, n);
}

/* The live list kept on the watch, step by step: a job leaves it when its stored status
 * ends and comes back if rewritten live; a new job enters it (one with a ring record and no
 * status yet too); a deleted job leaves it; ids whose key order differs from their id
 * order ("a" and "a-b") keep the id order; a reload rebuilds it from what it brings. */
static void the_live_list_follows_jobs_ending_appearing_and_a_reload(void **state) {
  fixture *f = *state;
  put_job(f, "a", "PENDING");
  put_job(f, "a-b", "RUNNING");
  put_job(f, "b", "RECONFIGURING");
  assert_live(f, "a,a-b,b");
  put_status(f, "b", "SUCCEEDED");
  assert_live(f, "a,a-b");
  put_status(f, "a-b", "FAILED");
  assert_live(f, "a");
  put_status(f, "a-b", "RECONFIGURING"); /* an operator's rewrite: live again */
  assert_live(f, "a,a-b");
  job_put(f, "c", "ring/00000000000000000001", "{}"); /* no status yet: live */
  assert_live(f, "a,a-b,c");
  put_job(f, "c", "RUNNING");
  job_put(f, "c", "reports/w1", "{}");
  job_put(f, "d", "reports/w1", "{}"); /* a report alone makes no job */
  assert_live(f, "a,a-b,c");
  /* touched, then deleted whole, in one batch */
  kolo_server_kv_put last[4] = {{JOBS "a/status", "{\"phase\":\"RUNNING\"}", 0},
                                {JOBS "a/spec", NULL, 0},
                                {JOBS "a/status", NULL, 0},
                                {JOBS "a/events/00000000000000000001", NULL, 0}};
  int64_t rev = 0;
  assert_int_equal(f->kv->base.ops->txn(&f->kv->base, NULL, 0, last, 4, &rev), KOLO_OK);
  assert_live(f, "a-b,c");
  put_status(f, "c", "CANCELLED");
  reload(f, NULL);
  assert_live(f, "a-b");
  put_job(f, "e", "PENDING");
  assert_live(f, "a-b,e");
  reload(f, "a-b");
  assert_live(f, "e");
  put_status(f, "e", "SUCCEEDED");
  put_job(f, "a", "PENDING"); /* an id again after its deletion */
  assert_live(f, "a");
  delete_job(f, "a");
  assert_live(f, "");
}

/* A fixed-seed random walk over 30 jobs (ids with and without a dash): creations, status
 * rewrites to any phase, reports, deletions and reloads (some leaving jobs out); after every
 * step the live read equals the oracle. */
static void the_live_read_equals_a_filtered_full_read_through_a_random_walk(void **state) {
  fixture *f = *state;
  static const char *const phases[] = {"PENDING",   "RECONFIGURING", "RUNNING",  "RECONFIGURING",
                                       "SUCCEEDED", "FAILED",        "CANCELLED"};
  char ids[30][16];
  int present[30] = {0};
  for (int i = 0; i < 30; i++) snprintf(ids[i], sizeof ids[i], i % 3 ? "j%d" : "j%d-x", i / 3);
  uint32_t seed = 12345;
  char live[4096];
  size_t most = 0, fewest = 30;
  for (int step = 0; step < 600; step++) {
    seed = seed * 1664525u + 1013904223u;
    uint32_t r = seed >> 8;
    int j = (int)(r % 30), op = (int)((r / 30) % 10);
    if (step % 150 == 149) {
      reload(f, step % 300 == 149 ? NULL : "-x");
    } else if (!present[j]) {
      put_job(f, ids[j], phases[(r / 300) % 7]);
      present[j] = 1;
    } else if (op < 6) {
      put_status(f, ids[j], phases[(r / 300) % 7]);
    } else if (op < 8) {
      job_put(f, ids[j], "reports/w1", "{\"time_unix_ms\":\"1\"}");
    } else {
      delete_job(f, ids[j]);
      present[j] = 0;
    }
    live_equals_oracle(f, live, sizeof live);
    size_t n = live[0] ? 1 : 0;
    for (const char *c = live; *c; c++) n += *c == ',';
    if (n > most) most = n;
    if (n < fewest) fewest = n;
  }
  assert_true(most >= 10); /* the walk went through many live jobs and few */
  assert_true(fewest <= 5);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(the_live_read_leaves_out_the_keys_of_ended_jobs, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(the_live_list_follows_jobs_ending_appearing_and_a_reload,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(
          the_live_read_equals_a_filtered_full_read_through_a_random_walk, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
