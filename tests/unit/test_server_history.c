/* Unit tests for the metrics history: history.c's pure rules (which point a status stands
 * for, appending, the provisional newest point, thinning that keeps the first and the newest
 * and prefers re-form points, even spacing), and the store + recorder over the in-memory kv
 * (same revision rules as etcd; the etcd-backed runs are in tests/integration): points land
 * in the view, since_step, the bound, a reload keeps them, rings without their secret, a
 * fence that is not held writes nothing, per-job gauges and the streams' jobs list. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/history.h"
#include "codec/codec.h"
#include "server/metrics.h"
#include "server/recorder.h"
#include "server/store.h"

/* ---- pure rules ---- */

static Kolo__V1__MetricPoint pt(uint64_t step, uint64_t epoch) {
  Kolo__V1__MetricPoint p = KOLO__V1__METRIC_POINT__INIT;
  p.step = step;
  p.epoch = epoch;
  p.loss = 1.0 / (double)(step + 1);
  p.ring_size = 2;
  return p;
}

/* A series driven through plan_next exactly as the recorder applies it. */
typedef struct series {
  Kolo__V1__MetricPoint pts[4096];
  const Kolo__V1__MetricPoint *view[4096];
  size_t n;
} series;

static void feed(series *s, Kolo__V1__MetricPoint next, size_t max) {
  for (size_t i = 0; i < s->n; i++) s->view[i] = &s->pts[i];
  kolo_server_history_plan plan = kolo_server_history_plan_next(s->view, s->n, &next, max);
  if (plan.action == KOLO_SERVER_HISTORY_REPLACE) {
    s->pts[s->n - 1] = next;
  } else if (plan.action == KOLO_SERVER_HISTORY_APPEND) {
    s->pts[s->n++] = next;
    if (plan.drop >= 0) {
      memmove(&s->pts[plan.drop], &s->pts[plan.drop + 1],
              (s->n - (size_t)plan.drop - 1) * sizeof s->pts[0]);
      s->n--;
    }
  }
}

static void a_status_without_progress_is_no_point_and_one_with_progress_maps_every_field(
    void **state) {
  (void)state;
  Kolo__V1__JobStatus st = KOLO__V1__JOB_STATUS__INIT;
  Kolo__V1__MetricPoint p;
  assert_false(kolo_server_history_point_of(&st, &p));
  Kolo__V1__Progress progress = KOLO__V1__PROGRESS__INIT;
  st.progress = &progress;
  assert_false(kolo_server_history_point_of(&st, &p)); /* step 0 */
  Kolo__V1__Member a = KOLO__V1__MEMBER__INIT, b = KOLO__V1__MEMBER__INIT;
  Kolo__V1__Member *members[] = {&a, &b};
  st.members = members;
  st.n_members = 2;
  st.epoch = 3;
  st.updated_unix_ms = 1234;
  progress.step = 40;
  progress.loss = 0.5;
  progress.accuracy = 0.8;
  progress.samples_per_sec = 900;
  progress.train_accuracy = 0.85;
  progress.test_accuracy = 0.75;
  progress.rounds = 6; /* the training mode's figures (issue 26) */
  progress.bytes_sent = 4096;
  progress.staleness = 1.5;
  progress.blocked_seconds = 0.25;
  assert_true(kolo_server_history_point_of(&st, &p));
  assert_int_equal(p.rounds, 6);
  assert_int_equal(p.bytes_sent, 4096);
  assert_true(p.staleness == 1.5 && p.blocked_seconds == 0.25);
  assert_true(p.train_accuracy == 0.85 && p.test_accuracy == 0.75);
  assert_int_equal(p.step, 40);
  assert_int_equal(p.time_unix_ms, 1234);
  assert_true(p.loss == 0.5 && p.accuracy == 0.8 && p.samples_per_sec == 900);
  assert_int_equal(p.ring_size, 2);
  assert_int_equal(p.epoch, 3);
}

static void an_older_or_equal_step_is_skipped_unless_its_values_changed(void **state) {
  (void)state;
  series *s = calloc(1, sizeof *s);
  feed(s, pt(10, 1), 100);
  feed(s, pt(20, 1), 100);
  assert_int_equal(s->n, 2);
  feed(s, pt(15, 1), 100); /* a step redone after a re-form */
  assert_int_equal(s->n, 2);
  assert_int_equal(s->pts[1].step, 20);
  feed(s, pt(20, 1), 100); /* nothing new */
  assert_int_equal(s->n, 2);
  Kolo__V1__MetricPoint final = pt(20, 1);
  final.accuracy = 0.9; /* the last evaluation arrives at the same step */
  const Kolo__V1__MetricPoint *view[] = {&s->pts[0], &s->pts[1]};
  kolo_server_history_plan plan = kolo_server_history_plan_next(view, 2, &final, 100);
  assert_int_equal(plan.action, KOLO_SERVER_HISTORY_REPLACE);
  assert_int_equal(plan.drop, -1);
  free(s);
}

static void a_long_run_keeps_at_most_max_points_the_first_and_the_newest_evenly_spaced(
    void **state) {
  (void)state;
  series *s = calloc(1, sizeof *s);
  const size_t max = 50;
  for (uint64_t step = 1; step <= 20000; step += 3) {
    feed(s, pt(step, 1), max);
    assert_true(s->n <= max);
    assert_int_equal(s->pts[0].step, 1);
    assert_int_equal(s->pts[s->n - 1].step, step);
  }
  assert_true(s->n >= max - 1);
  uint64_t lo = UINT64_MAX, hi = 0;
  for (size_t i = 1; i + 1 < s->n; i++) { /* the newest gap is provisional */
    uint64_t gap = s->pts[i].step - s->pts[i - 1].step;
    if (gap < lo) lo = gap;
    if (gap > hi) hi = gap;
  }
  /* even: the widest gap is within 2.5x of the narrowest (a dense tail would be ~100x) */
  assert_true(hi <= lo * 5 / 2);
  assert_true(hi < 20000 / max * 3);
  free(s);
}

static void thinning_keeps_the_points_where_the_ring_re_formed(void **state) {
  (void)state;
  series *s = calloc(1, sizeof *s);
  const size_t max = 20;
  uint64_t reforms[] = {300, 700, 1500};
  uint64_t epoch = 1;
  for (uint64_t step = 1; step <= 3000; step++) {
    for (int k = 0; k < 3; k++)
      if (step == reforms[k]) epoch++;
    feed(s, pt(step, epoch), max);
  }
  assert_true(s->n <= max);
  int seen[3] = {0, 0, 0};
  for (size_t i = 1; i < s->n; i++)
    if (kolo_server_history_is_reform(&s->pts[i - 1], &s->pts[i]))
      for (int k = 0; k < 3; k++)
        if (s->pts[i].step == reforms[k]) seen[k] = 1;
  assert_true(seen[0] && seen[1] && seen[2]);
  assert_int_equal(s->pts[s->n - 1].epoch, 4);
  free(s);
}

/* ---- store + recorder over the in-memory kv ---- */

typedef struct fixture {
  kolo_server_kv *kv;
  kolo_server_store *store;
  kolo_server_recorder *rec;
  int leading;
} fixture;

static kolo_status test_fence(void *arg, char *key, size_t len, int64_t *rev) {
  fixture *f = arg;
  if (!f->leading) return KOLO_ERR_NOT_LEADER;
  snprintf(key, len, "/kolo/v1/leader/test");
  *rev = 0; /* CREATE == 0: holds while no such key exists */
  return KOLO_OK;
}

static void start_recorder(fixture *f, size_t max_points) {
  kolo_server_recorder_stop(f->rec);
  kolo_server_recorder_config cfg = {f->store, f->kv, test_fence, f, max_points, 0, 1};
  assert_int_equal(kolo_server_recorder_start(&cfg, &f->rec), KOLO_OK);
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  assert_int_equal(kolo_server_kv_mem_create(&f->kv), KOLO_OK);
  assert_int_equal(kolo_server_store_create(f->kv, &f->store), KOLO_OK);
  f->leading = 1;
  start_recorder(f, 0);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kolo_server_recorder_stop(f->rec);
  kolo_server_store_destroy(f->store);
  f->kv->ops->destroy(f->kv);
  free(f);
  return 0;
}

static void put(fixture *f, const char *key, const char *value) {
  kolo_server_kv_put p = {key, value, 0};
  int64_t rev;
  assert_int_equal(f->kv->ops->txn(f->kv, NULL, 0, &p, 1, &rev), KOLO_OK);
}

static void submit(fixture *f, const char *id) {
  char text[256];
  snprintf(text, sizeof text,
           "{\"name\":\"n\",\"id\":\"%s\",\"min_workers\":1,\"builtin\":{\"model\":\"mlp\","
           "\"epochs\":1}}",
           id);
  ProtobufCMessage *msg = NULL;
  assert_int_equal(
      kolo_codec_parse(text, strlen(text), &kolo__v1__job_spec__descriptor, &msg, NULL, 0),
      KOLO_OK);
  Kolo__V1__Job *job = NULL;
  int created = 0;
  char err[256];
  assert_int_equal(
      kolo_server_store_submit(f->store, (Kolo__V1__JobSpec *)msg, &job, &created, err, sizeof err),
      KOLO_OK);
  protobuf_c_message_free_unpacked(msg, NULL);
  protobuf_c_message_free_unpacked(&job->base, NULL);
}

/* What the scheduler writes: a RUNNING status with rank 0's progress. */
static void progress(fixture *f, const char *id, uint64_t step, uint64_t epoch, int members,
                     const char *phase) {
  char key[128], value[768], list[256] = "";
  for (int i = 0; i < members; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list),
             "%s{\"worker_id\":\"w%d\",\"rank\":%d}", i ? "," : "", i, i);
  snprintf(key, sizeof key, "/kolo/v1/jobs/%s/status", id);
  snprintf(value, sizeof value,
           "{\"phase\":\"%s\",\"epoch\":%llu,\"members\":[%s],\"created_unix_ms\":1,\"updated_unix_"
           "ms\":%llu,\"reconfigurations\":3,\"false_losses\":2,"
           "\"progress\":{\"step\":%llu,\"total_steps\":1000,\"loss\":%g,\"accuracy\":0.5,"
           "\"samples_per_sec\":100}}",
           phase, (unsigned long long)epoch, list, (unsigned long long)(1000 + step),
           (unsigned long long)step, 1.0 / (double)step);
  put(f, key, value);
}

static Kolo__V1__JobMetrics *metrics(fixture *f, const char *id, uint64_t since) {
  Kolo__V1__JobMetrics *m = NULL;
  assert_int_equal(kolo_server_store_metrics(f->store, id, since, &m), KOLO_OK);
  return m;
}

static void recorded_points_reach_the_view_and_since_step_filters_them(void **state) {
  fixture *f = *state;
  submit(f, "h1");
  assert_int_equal(kolo_server_recorder_pass(f->rec), 0); /* PENDING, no progress */
  for (uint64_t step = 10; step <= 50; step += 10) {
    progress(f, "h1", step, 1, 2, "RUNNING");
    assert_int_equal(kolo_server_recorder_pass(f->rec), 1);
    assert_int_equal(kolo_server_recorder_pass(f->rec), 0); /* nothing new: no write */
  }
  Kolo__V1__JobMetrics *m = metrics(f, "h1", 0);
  assert_string_equal(m->id, "h1");
  assert_int_equal(m->n_points, 5);
  assert_int_equal(m->points[0]->step, 10);
  assert_int_equal(m->points[4]->step, 50);
  assert_int_equal(m->points[4]->time_unix_ms, 1050);
  assert_int_equal(m->points[4]->ring_size, 2);
  assert_true(m->points[4]->loss == 1.0 / 50);
  protobuf_c_message_free_unpacked(&m->base, NULL);
  m = metrics(f, "h1", 30);
  assert_int_equal(m->n_points, 2);
  assert_int_equal(m->points[0]->step, 40);
  protobuf_c_message_free_unpacked(&m->base, NULL);
  m = metrics(f, "h1", 50);
  assert_int_equal(m->n_points, 0);
  protobuf_c_message_free_unpacked(&m->base, NULL);
  Kolo__V1__JobMetrics *none = NULL;
  assert_int_equal(kolo_server_store_metrics(f->store, "nope", 0, &none), KOLO_ERR_NOT_FOUND);
}

static void the_history_stays_bounded_keeps_first_and_last_and_survives_a_reload(void **state) {
  fixture *f = *state;
  start_recorder(f, 8);
  submit(f, "h2");
  for (uint64_t step = 1; step <= 200; step++) {
    progress(f, "h2", step, step < 120 ? 1 : 2, step < 120 ? 3 : 2, "RUNNING");
    kolo_server_recorder_pass(f->rec);
    Kolo__V1__JobMetrics *m = metrics(f, "h2", 0);
    assert_true(m->n_points <= 8);
    assert_int_equal(m->points[0]->step, 1);
    assert_int_equal(m->points[m->n_points - 1]->step, step);
    protobuf_c_message_free_unpacked(&m->base, NULL);
  }
  /* the kv holds exactly the view's points (thinned ones were deleted) */
  kolo_server_kv_item *items = NULL;
  size_t n = 0;
  int64_t rev;
  assert_int_equal(f->kv->ops->range(f->kv, "/kolo/v1/metrics/h2/", &items, &n, &rev), KOLO_OK);
  Kolo__V1__JobMetrics *before = metrics(f, "h2", 0);
  assert_int_equal(n, before->n_points);
  kolo_server_kv_items_free(items, n);
  int reform_kept = 0;
  for (size_t i = 1; i < before->n_points; i++)
    reform_kept |= before->points[i]->step == 120 && before->points[i - 1]->epoch == 1;
  assert_true(reform_kept);
  /* a restarted server's view (a new store over the same kv) has the same series */
  kolo_server_recorder_stop(f->rec);
  f->rec = NULL;
  kolo_server_store_destroy(f->store);
  assert_int_equal(kolo_server_store_create(f->kv, &f->store), KOLO_OK);
  start_recorder(f, 8);
  Kolo__V1__JobMetrics *after = metrics(f, "h2", 0);
  size_t a = protobuf_c_message_get_packed_size(&before->base),
         b = protobuf_c_message_get_packed_size(&after->base);
  assert_int_equal(a, b);
  uint8_t *x = malloc(a + 1), *y = malloc(b + 1);
  protobuf_c_message_pack(&before->base, x);
  protobuf_c_message_pack(&after->base, y);
  assert_memory_equal(x, y, a);
  free(x);
  free(y);
  protobuf_c_message_free_unpacked(&before->base, NULL);
  protobuf_c_message_free_unpacked(&after->base, NULL);
}

static void a_replica_that_does_not_lead_writes_nothing(void **state) {
  fixture *f = *state;
  submit(f, "h3");
  progress(f, "h3", 5, 1, 1, "RUNNING");
  f->leading = 0;
  assert_int_equal(kolo_server_recorder_pass(f->rec), 0);
  f->leading = 1;
  /* a fence that no longer holds (another leader's key exists): the txn writes nothing */
  put(f, "/kolo/v1/leader/test", "someone");
  assert_int_equal(kolo_server_recorder_pass(f->rec), 0);
  Kolo__V1__JobMetrics *m = metrics(f, "h3", 0);
  assert_int_equal(m->n_points, 0);
  protobuf_c_message_free_unpacked(&m->base, NULL);
}

static void rings_are_listed_by_epoch_without_their_secret(void **state) {
  fixture *f = *state;
  submit(f, "h4");
  put(f, "/kolo/v1/jobs/h4/ring/00000000000000000002",
      "{\"job\":\"h4\",\"epoch\":2,\"timeout_ms\":30000,\"secret\":"
      "\"0123456789abcdef0123456789abcdef\","
      "\"members\":[{\"worker_id\":\"w1\",\"rank\":0,\"host\":\"h\",\"address\":\"127.0.0.1:1\","
      "\"local_rank\":0,\"local_size\":1,\"since_epoch\":1}],"
      "\"lost\":[{\"worker_id\":\"w2\",\"why\":\"its lease expired\"}]}");
  put(f, "/kolo/v1/jobs/h4/ring/00000000000000000001",
      "{\"job\":\"h4\",\"epoch\":1,\"timeout_ms\":30000,\"secret\":"
      "\"feedfeedfeedfeedfeedfeedfeedfeed\",\"members\":["
      "{\"worker_id\":\"w1\",\"rank\":0,\"host\":\"h\",\"address\":\"127.0.0.1:1\",\"local_rank\":"
      "0,"
      "\"local_size\":2,\"since_epoch\":1},"
      "{\"worker_id\":\"w2\",\"rank\":1,\"host\":\"h\",\"address\":\"127.0.0.1:2\",\"local_rank\":"
      "1,"
      "\"local_size\":2,\"since_epoch\":1}],\"lost\":[]}");
  /* a record the codec refuses (no address) is not shown, like one that is not JSON */
  put(f, "/kolo/v1/jobs/h4/ring/00000000000000000004",
      "{\"job\":\"h4\",\"epoch\":4,\"timeout_ms\":30000,\"secret\":"
      "\"feedfeedfeedfeedfeedfeedfeedfeed\",\"members\":["
      "{\"worker_id\":\"w1\",\"rank\":0,\"host\":\"h\",\"local_rank\":0,\"local_size\":1,\"since_"
      "epoch\":1}],"
      "\"lost\":[]}");
  put(f, "/kolo/v1/jobs/h4/ring/00000000000000000003", "not json");
  Kolo__V1__JobMetrics *m = metrics(f, "h4", 0);
  assert_int_equal(m->n_rings, 2);
  assert_int_equal(m->rings[0]->epoch, 1);
  assert_int_equal(m->rings[0]->n_members, 2);
  assert_string_equal(m->rings[0]->members[1]->worker_id, "w2");
  assert_int_equal(m->rings[1]->epoch, 2);
  assert_string_equal(m->rings[1]->members[0]->address, "127.0.0.1:1");
  char *json = kolo_codec_dump(&m->base, 0);
  assert_null(strstr(json, "0123456789abcdef"));
  assert_null(strstr(json, "feedfeed"));
  free(json);
  protobuf_c_message_free_unpacked(&m->base, NULL);
}

static void gauges_put_running_jobs_first_and_stay_bounded(void **state) {
  fixture *f = *state;
  submit(f, "g1");
  submit(f, "g2");
  submit(f, "g3");
  progress(f, "g1", 7, 2, 3, "SUCCEEDED");
  progress(f, "g2", 9, 1, 2, "RUNNING");
  kolo_server_job_gauge g[2];
  size_t left = 99;
  size_t n = kolo_server_store_job_gauges(f->store, g, 2, &left);
  assert_int_equal(n, 2);
  assert_int_equal(left, 1);
  /* unfinished first, newest created first: g3 (submitted now), then g2 (created at 1 ms) */
  assert_string_equal(g[0].id, "g3");
  assert_int_equal(g[0].phase, KOLO__V1__PHASE__PENDING);
  assert_string_equal(g[1].id, "g2");
  assert_int_equal(g[1].phase, KOLO__V1__PHASE__RUNNING);
  assert_int_equal(g[1].step, 9);
  kolo_server_job_gauge all[5];
  n = kolo_server_store_job_gauges(f->store, all, 5, &left);
  assert_int_equal(n, 3);
  assert_int_equal(left, 0);
  assert_string_equal(all[2].id, "g1");
  assert_int_equal(all[2].step, 7);
  assert_int_equal(all[2].ring_size, 3);
  assert_int_equal(all[2].reconfigurations, 3);
  assert_int_equal(all[2].false_losses, 2);
  char *text = kolo_server_metrics_render_jobs(all, n, 4);
  assert_non_null(strstr(text, "# TYPE kolo_job_false_losses_total counter\n"));
  assert_non_null(strstr(text, "kolo_job_false_losses_total{job=\"g1\"} 2\n"));
  assert_non_null(strstr(text, "kolo_job_reconfigurations_total{job=\"g1\"} 3\n"));
  assert_non_null(strstr(text, "kolo_job_step{job=\"g1\"} 7\n"));
  assert_non_null(strstr(text, "kolo_job_ring_size{job=\"g1\"} 3\n"));
  assert_non_null(strstr(text, "kolo_job_series_left_out 4\n"));
  assert_non_null(strstr(text, "kolo_job_mode{job=\"g1\",mode=\"SYNC\"} 1\n"));
  free(text);
  /* the training mode's figures (issue 26) */
  all[2].rounds = 12;
  all[2].bytes_sent = 4096;
  all[2].staleness = 1.5;
  all[2].blocked_seconds = 0.25;
  snprintf(all[2].mode, sizeof all[2].mode, "DILOCO");
  text = kolo_server_metrics_render_jobs(all, n, 0);
  assert_non_null(strstr(text, "kolo_job_rounds_total{job=\"g1\"} 12\n"));
  assert_non_null(strstr(text, "kolo_job_bytes_sent_total{job=\"g1\"} 4096\n"));
  assert_non_null(strstr(text, "kolo_job_staleness{job=\"g1\"} 1.5\n"));
  assert_non_null(strstr(text, "kolo_job_blocked_seconds_total{job=\"g1\"} 0.25\n"));
  assert_non_null(strstr(text, "kolo_job_mode{job=\"g1\",mode=\"DILOCO\"} 1\n"));
  free(text);
}

static void the_jobs_list_is_whole_first_then_only_what_changed_and_the_marks_move(void **state) {
  fixture *f = *state;
  kolo_server_store_marks m0, m1, m2;
  kolo_server_store_get_marks(f->store, "l1", &m0);
  assert_int_equal(m0.job, 0);
  submit(f, "l1");
  submit(f, "l2");
  char *a = NULL, *b = NULL;
  int full = 0;
  uint64_t mark = 0, mark2 = 0;
  assert_int_equal(kolo_server_store_jobs_json(f->store, 0, &a, &full, &mark), KOLO_OK);
  assert_true(full);
  assert_non_null(strstr(a, "\"id\":\"l1\""));
  assert_non_null(strstr(a, "\"id\":\"l2\""));
  /* ListJobs' shape, events left out */
  ProtobufCMessage *parsed = NULL;
  char err[256] = "";
  kolo_status prc = kolo_codec_parse(a, strlen(a), &kolo__v1__list_jobs_response__descriptor,
                                     &parsed, err, sizeof err);
  if (prc != KOLO_OK) fprintf(stderr, "%s\n%s\n", err, a);
  assert_int_equal(prc, KOLO_OK);
  assert_int_equal(((Kolo__V1__ListJobsResponse *)parsed)->n_jobs, 2);
  assert_int_equal(((Kolo__V1__ListJobsResponse *)parsed)->jobs[0]->n_events, 0);
  protobuf_c_message_free_unpacked(parsed, NULL);
  kolo_server_store_get_marks(f->store, "l1", &m1);
  assert_true(m1.list > m0.list && m1.job > 0);
  assert_int_equal(m1.list, mark);
  progress(f, "l1", 3, 1, 1, "RUNNING");
  kolo_server_recorder_pass(f->rec);
  kolo_server_store_get_marks(f->store, "l1", &m2);
  assert_true(m2.list > m1.list && m2.job > m1.job && m2.history > m1.history);
  assert_int_equal(kolo_server_store_jobs_json(f->store, mark, &b, &full, &mark2), KOLO_OK);
  assert_false(full);
  assert_non_null(strstr(b, "\"RUNNING\""));
  assert_null(strstr(b, "\"id\":\"l2\"")); /* unchanged: not sent again */
  assert_true(mark2 > mark);
  free(a);
  free(b);
  /* a job leaving the view (its spec deleted) makes the next list whole again */
  kolo_server_kv_put del = {"/kolo/v1/jobs/l2/spec", NULL, 0};
  int64_t rev;
  assert_int_equal(f->kv->ops->txn(f->kv, NULL, 0, &del, 1, &rev), KOLO_OK);
  assert_int_equal(kolo_server_store_jobs_json(f->store, mark2, &a, &full, &mark), KOLO_OK);
  assert_true(full);
  assert_non_null(strstr(a, "\"id\":\"l1\""));
  assert_null(strstr(a, "\"id\":\"l2\""));
  free(a);
  put(f, "/kolo/v1/workers/w9", "{\"id\":\"w9\"}");
  kolo_server_store_marks m3;
  kolo_server_store_get_marks(f->store, NULL, &m3);
  assert_true(m3.workers > m2.workers);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(
          a_status_without_progress_is_no_point_and_one_with_progress_maps_every_field),
      cmocka_unit_test(an_older_or_equal_step_is_skipped_unless_its_values_changed),
      cmocka_unit_test(a_long_run_keeps_at_most_max_points_the_first_and_the_newest_evenly_spaced),
      cmocka_unit_test(thinning_keeps_the_points_where_the_ring_re_formed),
      cmocka_unit_test_setup_teardown(recorded_points_reach_the_view_and_since_step_filters_them,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(
          the_history_stays_bounded_keeps_first_and_last_and_survives_a_reload, setup, teardown),
      cmocka_unit_test_setup_teardown(a_replica_that_does_not_lead_writes_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(rings_are_listed_by_epoch_without_their_secret, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(gauges_put_running_jobs_first_and_stay_bounded, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(
          the_jobs_list_is_whole_first_then_only_what_changed_and_the_marks_move, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
