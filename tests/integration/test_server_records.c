/* The store's watch-fed records (server/store_records.c), which kolo-server's scheduler
 * reads instead of etcd, against a real etcd: they equal an etcd range over the same
 * prefixes key for key (value, revisions, lease) and build the same scheduler snapshot,
 * after the first load and after puts, deletes and an expired lease arrive by the watch
 * (a reload is test_server_store's case); the scheduler schedules a job from them with no
 * etcd read or watch of its own (PENDING until its ring formed, then RUNNING with RING_FORMED),
 * and waits for its own write before its next pass;
 * metrics history writes alone do not wake it. ListWorkers, demand, drain and undrain
 * (server/workers.c) read them too: no etcd range, and a drain shows in the next list. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "codec/codec.h"
#include "coordination/etcd.h"
#include "scheduler/scheduler.h"
#include "scheduler/snapshot.h"
#include "server/kv.h"
#include "server/store.h"
#include "tests/support/etcd_harness.h"

#define WORKER(id, port, state)                                     \
  "{\"id\":\"" id "\",\"host\":\"h\",\"address\":\"127.0.0.1:" port \
  "\",\"cpus\":1,\"gpus\":0,"                                       \
  "\"state\":\"" state "\"}"

typedef struct fixture {
  kolo_etcd_harness *etcd;
  kolo_etcd *client;
  kolo_server_kv *kv;
  kolo_server_store *store;
} fixture;

static int64_t put(fixture *f, const char *key, const char *value, int64_t lease) {
  int64_t rev = 0;
  assert_int_equal(
      kolo_etcd_put(f->client, kolo_etcd_str(key), kolo_etcd_str(value), lease, NULL, &rev),
      KOLO_OK);
  return rev;
}

static int64_t del(fixture *f, const char *key) {
  int64_t rev = 0;
  assert_int_equal(kolo_etcd_delete(f->client, kolo_etcd_str(key), 0, NULL, &rev), KOLO_OK);
  return rev;
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (kolo_etcd_harness_start(NULL, &f->etcd) != KOLO_OK) return -1;
  const char *endpoints[] = {kolo_etcd_harness_url(f->etcd)};
  kolo_etcd_config config = {.endpoints = endpoints, .endpoint_count = 1};
  if (kolo_etcd_create(&config, &f->client) != KOLO_OK) return -1;
  *state = f;
  return 0;
}

static void open_store(fixture *f) {
  assert_int_equal(kolo_server_kv_etcd_create(f->client, &f->kv), KOLO_OK);
  assert_int_equal(kolo_server_store_create(f->kv, &f->store), KOLO_OK);
}

static int teardown(void **state) {
  fixture *f = *state;
  kolo_server_store_destroy(f->store);
  if (f->kv) f->kv->ops->destroy(f->kv);
  kolo_etcd_destroy(f->client);
  kolo_etcd_harness_destroy(f->etcd);
  free(f);
  return 0;
}

/* The store's records, once it has applied revision. */
static kolo_status view_records(fixture *f, int64_t revision, int timeout_ms,
                                kolo_sched_records *out) {
  kolo_etcd_range_result sets[4];
  memset(out, 0, sizeof *out);
  kolo_status rc = kolo_server_store_read_records(f->store, kolo_sched_record_prefixes, 4, revision,
                                                  timeout_ms, sets, &out->revision, &out->reloads);
  out->workers = sets[0];
  out->assigns = sets[1];
  out->drains = sets[2];
  out->jobs = sets[3];
  return rc;
}

static void assert_same_set(const kolo_etcd_range_result *a, const kolo_etcd_range_result *b) {
  assert_int_equal(a->count, b->count);
  for (size_t i = 0; i < a->count; i++) {
    assert_string_equal((const char *)a->kvs[i].key, (const char *)b->kvs[i].key);
    assert_int_equal(a->kvs[i].value_len, b->kvs[i].value_len);
    assert_memory_equal(a->kvs[i].value, b->kvs[i].value, a->kvs[i].value_len);
    assert_int_equal(a->kvs[i].mod_revision, b->kvs[i].mod_revision);
    assert_int_equal(a->kvs[i].create_revision, b->kvs[i].create_revision);
    assert_int_equal(a->kvs[i].lease, b->kvs[i].lease);
  }
}

/* Whether two messages hold the same values (their wire bytes compared). */
static int same_message(const ProtobufCMessage *a, const ProtobufCMessage *b) {
  size_t n = protobuf_c_message_get_packed_size(a);
  if (n != protobuf_c_message_get_packed_size(b)) return 0;
  uint8_t *x = malloc(n + 1), *y = malloc(n + 1);
  assert_non_null(x);
  assert_non_null(y);
  protobuf_c_message_pack(a, x);
  protobuf_c_message_pack(b, y);
  int same = memcmp(x, y, n) == 0;
  free(x);
  free(y);
  return same;
}

static void assert_same_snapshot(const kolo_sched_snapshot *a, const kolo_sched_snapshot *b) {
  assert_int_equal(a->n_workers, b->n_workers);
  for (size_t i = 0; i < a->n_workers; i++) {
    assert_string_equal(a->workers[i].m.record->id, b->workers[i].m.record->id);
    assert_int_equal(a->workers[i].m.lease, b->workers[i].m.lease);
    assert_string_equal(a->workers[i].m.record->state, b->workers[i].m.record->state);
    assert_int_equal(a->workers[i].draining, b->workers[i].draining);
    assert_int_equal(a->workers[i].assign_job == NULL, b->workers[i].assign_job == NULL);
    if (a->workers[i].assign_job)
      assert_string_equal(a->workers[i].assign_job, b->workers[i].assign_job);
  }
  assert_int_equal(a->n_assigns, b->n_assigns);
  for (size_t i = 0; i < a->n_assigns; i++) {
    assert_string_equal(a->assigns[i].worker_id, b->assigns[i].worker_id);
    assert_string_equal(a->assigns[i].job, b->assigns[i].job);
    assert_int_equal(a->assigns[i].a == NULL, b->assigns[i].a == NULL);
    if (a->assigns[i].a) {
      assert_int_equal(a->assigns[i].a->epoch, b->assigns[i].a->epoch);
      assert_int_equal(a->assigns[i].a->rank, b->assigns[i].a->rank);
    }
  }
  assert_int_equal(a->n_jobs, b->n_jobs);
  for (size_t i = 0; i < a->n_jobs; i++) {
    const kolo_sched_job *x = &a->jobs[i], *y = &b->jobs[i];
    assert_string_equal(x->id, y->id);
    assert_true(same_message(&x->spec->base, &y->spec->base));
    assert_true(same_message(&x->status->base, &y->status->base));
    assert_int_equal(x->status_mod, y->status_mod);
    assert_int_equal(x->max_seq, y->max_seq);
    assert_int_equal(x->created, y->created);
    assert_int_equal(x->n_reports, y->n_reports); /* the same reports, decoded alike */
    for (size_t r = 0; r < x->n_reports; r++) {
      assert_string_equal(x->reports[r].worker_id, y->reports[r].worker_id);
      assert_int_equal(x->reports[r].r->time_unix_ms, y->reports[r].r->time_unix_ms);
      assert_int_equal(x->reports[r].r->formed_epoch, y->reports[r].r->formed_epoch);
      assert_int_equal(x->reports[r].r->exit_code, y->reports[r].r->exit_code);
      assert_int_equal(x->reports[r].r->progress == NULL, y->reports[r].r->progress == NULL);
      if (x->reports[r].r->progress)
        assert_true(
            same_message(&x->reports[r].r->progress->base, &y->reports[r].r->progress->base));
    }
    assert_int_equal(x->n_rings, y->n_rings);
    for (size_t r = 0; r < x->n_rings; r++) {
      assert_int_equal(x->rings[r]->epoch, y->rings[r]->epoch);
      assert_int_equal(x->rings[r]->n_members, y->rings[r]->n_members);
    }
  }
}

/* The view (at revision) and etcd agree on every record and on the snapshot. */
static void assert_view_is_etcd(fixture *f, int64_t revision) {
  kolo_sched_records view, direct;
  assert_int_equal(view_records(f, revision, 5000, &view), KOLO_OK);
  assert_int_equal(kolo_sched_records_read(f->client, &direct), KOLO_OK);
  assert_same_set(&view.workers, &direct.workers);
  assert_same_set(&view.assigns, &direct.assigns);
  assert_same_set(&view.drains, &direct.drains);
  assert_same_set(&view.jobs, &direct.jobs);
  kolo_sched_snapshot a, b;
  assert_int_equal(kolo_sched_snapshot_build(&a, &view), KOLO_OK);
  assert_int_equal(kolo_sched_snapshot_build(&b, &direct), KOLO_OK);
  assert_same_snapshot(&a, &b);
  kolo_sched_snapshot_free(&a);
  kolo_sched_snapshot_free(&b);
  kolo_sched_records_free(&view);
  kolo_sched_records_free(&direct);
}

#define RING2                                                                                     \
  "{\"job\":\"b\",\"epoch\":2,\"timeout_ms\":30000,\"secret\":\"0123456789abcdef\",\"members\":[" \
  "{\"worker_id\":\"w1\",\"rank\":0,\"host\":\"h\",\"address\":\"127.0.0.1:7001\","               \
  "\"local_rank\":0,\"local_size\":1,\"since_epoch\":1}],\"lost\":[]}"

static void the_records_equal_an_etcd_range_and_build_the_same_snapshot(void **state) {
  fixture *f = *state;
  int64_t lease = 0;
  assert_int_equal(kolo_etcd_lease_grant(f->client, 60, &lease, NULL), KOLO_OK);
  put(f, "/kolo/v1/workers/w1", WORKER("w1", "7001", "busy"), lease);
  put(f, "/kolo/v1/workers/w2", WORKER("w2", "7002", "idle"), lease);
  put(f, "/kolo/v1/assign/w1",
      "{\"job\":\"b\",\"epoch\":2,\"ring\":\"/kolo/v1/jobs/b/ring/00000000000000000002\","
      "\"rank\":0}",
      0);
  put(f, "/kolo/v1/drain/w2", "{\"draining\":true,\"lease\":0}", 0);
  put(f, "/kolo/v1/jobs/a/spec", "{\"min_workers\":1}", 0);
  put(f, "/kolo/v1/jobs/a/status", "{\"phase\":\"PENDING\",\"created_unix_ms\":100}", 0);
  put(f, "/kolo/v1/jobs/b/spec", "{\"min_workers\":1,\"max_workers\":2}", 0);
  put(f, "/kolo/v1/jobs/b/status",
      "{\"phase\":\"RUNNING\",\"epoch\":2,\"created_unix_ms\":50,\"members\":[{\"worker_id\":"
      "\"w1\"}]}",
      0);
  put(f, "/kolo/v1/jobs/b/events/00000000000000000001", "{}", 0);
  put(f, "/kolo/v1/jobs/b/events/0000000007", "{}", 0); /* an older writer's width */
  put(f, "/kolo/v1/jobs/b/ring/00000000000000000002", RING2, 0);
  put(f, "/kolo/v1/jobs/b/reports/w1", "{\"time_unix_ms\":900,\"formed_epoch\":2}", 0);
  put(f, "/kolo/v1/metrics/b/00000000000000000010", "{\"step\":10}", 0);
  int64_t rev = put(f, "/kolo/v1/leader/1", "me", 0);
  open_store(f); /* the first load */
  assert_view_is_etcd(f, rev);
  /* what the watch brings: new, changed and deleted keys, and an expired lease */
  put(f, "/kolo/v1/jobs/a/reports/w2", "{\"time_unix_ms\":901}", 0);
  put(f, "/kolo/v1/jobs/b/status",
      "{\"phase\":\"RECONFIGURING\",\"epoch\":2,\"created_unix_ms\":50,\"members\":[]}", 0);
  put(f, "/kolo/v1/jobs/b/events/00000000000000000009", "{}", 0);
  del(f, "/kolo/v1/drain/w2");
  del(f, "/kolo/v1/jobs/b/reports/w1");
  put(f, "/kolo/v1/metrics/b/00000000000000000020", "{\"step\":20}", 0);
  assert_int_equal(kolo_etcd_lease_revoke(f->client, lease), KOLO_OK);
  rev = put(f, "/kolo/v1/workers/w3", WORKER("w3", "7003", "idle"), 0);
  assert_view_is_etcd(f, rev);
  kolo_sched_records view;
  assert_int_equal(view_records(f, rev, 5000, &view), KOLO_OK);
  assert_int_equal(view.workers.count, 1); /* w1 and w2 went with their lease */
  assert_true(view.revision >= rev);
  kolo_sched_records_free(&view);
}

/* ---- the scheduler over the records ---- */

typedef struct leader {
  char key[64];
  int64_t revision;
} leader;

static kolo_status fence(void *arg, char *key, size_t len, int64_t *revision) {
  leader *l = arg;
  snprintf(key, len, "%s", l->key);
  *revision = l->revision;
  return KOLO_OK;
}

/* The scheduler's read: the store's records, behind a gate the test can close at a
 * revision (a view that lags: a read for a later revision times out). */
typedef struct gate {
  fixture *f;
  int64_t cap;     /* 0 = open */
  int64_t max_min; /* the highest revision a read asked for */
  int timeouts;
} gate;

static kolo_status read_fn(void *arg, int64_t min_revision, int timeout_ms,
                           kolo_sched_records *out) {
  gate *g = arg;
  int64_t seen = __atomic_load_n(&g->max_min, __ATOMIC_SEQ_CST);
  if (min_revision > seen) __atomic_store_n(&g->max_min, min_revision, __ATOMIC_SEQ_CST);
  int64_t cap = __atomic_load_n(&g->cap, __ATOMIC_SEQ_CST);
  if (cap > 0 && min_revision > cap) {
    struct timespec pause = {0, (timeout_ms < 100 ? timeout_ms : 100) * 1000000L};
    nanosleep(&pause, NULL);
    kolo_status rc = view_records(g->f, 0, 0, out); /* for its reload count */
    kolo_etcd_range_result *sets[4] = {&out->workers, &out->assigns, &out->drains, &out->jobs};
    for (int i = 0; i < 4 && rc == KOLO_OK; i++) kolo_etcd_range_result_free(sets[i]);
    __atomic_add_fetch(&g->timeouts, 1, __ATOMIC_SEQ_CST);
    return KOLO_ERR_TIMEOUT;
  }
  return view_records(g->f, min_revision, timeout_ms, out);
}

typedef struct wakeups {
  kolo_sched *sched;
  int calls;
} wakeups;

static void on_records(void *arg) {
  wakeups *w = arg;
  __atomic_add_fetch(&w->calls, 1, __ATOMIC_SEQ_CST);
  kolo_sched_notify(w->sched);
}

static Kolo__V1__JobSpec *spec_from(const char *text) {
  ProtobufCMessage *msg = NULL;
  assert_int_equal(
      kolo_codec_parse(text, strlen(text), &kolo__v1__job_spec__descriptor, &msg, NULL, 0),
      KOLO_OK);
  return (Kolo__V1__JobSpec *)msg;
}

static Kolo__V1__Phase phase_of(fixture *f, const char *id) {
  Kolo__V1__Job *job = NULL;
  if (kolo_server_store_get(f->store, id, &job) != KOLO_OK)
    return KOLO__V1__PHASE__PHASE_UNSPECIFIED;
  Kolo__V1__Phase p = job->status->phase;
  protobuf_c_message_free_unpacked(&job->base, NULL);
  return p;
}

static uint64_t epoch_of(fixture *f, const char *id) {
  Kolo__V1__Job *job = NULL;
  if (kolo_server_store_get(f->store, id, &job) != KOLO_OK) return 0;
  uint64_t epoch = job->status->epoch;
  protobuf_c_message_free_unpacked(&job->base, NULL);
  return epoch;
}

/* job's first event of type at epoch; NULL if none. */
static const Kolo__V1__Event *event_of(const Kolo__V1__Job *job, const char *type, uint64_t epoch) {
  for (size_t i = 0; i < job->n_events; i++)
    if (strcmp(job->events[i]->type, type) == 0 && job->events[i]->epoch == epoch)
      return job->events[i];
  return NULL;
}

static void the_scheduler_schedules_from_the_records_without_reading_etcd(void **state) {
  fixture *f = *state;
  leader l = {"/kolo/v1/leader/test", 0};
  l.revision = put(f, l.key, "test", 0);
  put(f, "/kolo/v1/workers/w1", WORKER("w1", "7001", "idle"), 0);
  open_store(f);

  /* metrics history alone wakes nothing; any other record does (before the scheduler
   * runs, so that none of its writes comes in between) */
  wakeups counter = {0};
  kolo_server_store_set_records_fn(f->store, on_records, &counter);
  int64_t rev = put(f, "/kolo/v1/metrics/j0/00000000000000000001", "{\"step\":1}", 0);
  kolo_sched_records view;
  assert_int_equal(view_records(f, rev, 5000, &view), KOLO_OK);
  kolo_sched_records_free(&view);
  struct timespec settle = {0, 200 * 1000000L};
  nanosleep(&settle, NULL); /* records_fn runs just after the revision is set */
  assert_int_equal(__atomic_load_n(&counter.calls, __ATOMIC_SEQ_CST), 0);
  put(f, "/kolo/v1/jobs/j0/reports/w1", "{\"time_unix_ms\":1}", 0);
  int i = 0;
  for (; i < 100 && __atomic_load_n(&counter.calls, __ATOMIC_SEQ_CST) == 0; i++)
    nanosleep(&settle, NULL);
  assert_int_equal(__atomic_load_n(&counter.calls, __ATOMIC_SEQ_CST), 1);

  wakeups w = {0};
  gate g = {f, 0, 0, 0};
  kolo_sched_config config = {fence, &l, 200, f->client, read_fn, &g};
  assert_int_equal(kolo_sched_start(&config, &w.sched), KOLO_OK);
  kolo_server_store_set_records_fn(f->store, on_records, &w);

  Kolo__V1__JobSpec *spec = spec_from(
      "{\"name\":\"n\",\"id\":\"j1\",\"min_workers\":1,\"max_workers\":2,\"exec\":{\"argv\":"
      "[\"/bin/true\"]}}");
  Kolo__V1__Job *job = NULL;
  int created = 0;
  char err[256];
  assert_int_equal(kolo_server_store_submit(f->store, spec, &job, &created, err, sizeof err),
                   KOLO_OK);
  protobuf_c_message_free_unpacked(&spec->base, NULL);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  for (i = 0; i < 200 && epoch_of(f, "j1") == 0; i++) {
    struct timespec pause = {0, 50 * 1000000L};
    nanosleep(&pause, NULL);
  }
  assert_true(i < 200); /* scheduled within 10 s */
  /* SCHEDULED is not RUNNING: the job stays PENDING, with its epoch and members, until its
   * ring formed (no member reported it yet) */
  Kolo__V1__Job *now = NULL;
  assert_int_equal(kolo_server_store_get(f->store, "j1", &now), KOLO_OK);
  assert_int_equal(now->status->phase, KOLO__V1__PHASE__PENDING);
  assert_int_equal(now->status->n_members, 1);
  assert_non_null(event_of(now, "SCHEDULED", 1));
  assert_null(event_of(now, "RING_FORMED", 1));
  protobuf_c_message_free_unpacked(&now->base, NULL);
  kolo_etcd_kv kv;
  assert_int_equal(kolo_etcd_get(f->client, kolo_etcd_str("/kolo/v1/assign/w1"), &kv, NULL),
                   KOLO_OK);
  assert_non_null(strstr((const char *)kv.value, "\"j1\""));
  kolo_etcd_kv_clear(&kv);
  /* a pass after its write: it waited for the records to show it (else it would have
   * scheduled j1 again on a view without it and written a conflict or a second epoch) */
  uint64_t passes = kolo_sched_passes(w.sched);
  for (i = 0; i < 100 && kolo_sched_passes(w.sched) < passes + 3; i++) {
    struct timespec pause = {0, 50 * 1000000L};
    nanosleep(&pause, NULL);
  }
  assert_true(kolo_sched_passes(w.sched) >= passes + 3);
  kolo_etcd_stats st;
  kolo_etcd_stats_get(kolo_sched_etcd(w.sched), 0, &st);
  assert_int_equal(st.requests[KOLO_ETCD_REQ_RANGE], 0); /* every pass read the records */
  assert_int_equal(st.watches_started, 0);
  assert_true(st.requests[KOLO_ETCD_REQ_TXN] >= 1);
  assert_true(kolo_etcd_written_revision(kolo_sched_etcd(w.sched)) > l.revision);
  assert_int_equal(kolo_server_store_get(f->store, "j1", &now), KOLO_OK);
  assert_int_equal(now->status->epoch, 1); /* one epoch: no pass redid the start */
  /* passes went by, still PENDING: a scheduled job is not queued again, nor RUNNING */
  assert_int_equal(now->status->phase, KOLO__V1__PHASE__PENDING);
  assert_null(event_of(now, "RING_FORMED", 1));
  protobuf_c_message_free_unpacked(&now->base, NULL);

  /* w1 formed epoch 1: RUNNING comes with the RING_FORMED event, written together */
  put(f, "/kolo/v1/jobs/j1/reports/w1", "{\"time_unix_ms\":2,\"formed_epoch\":1}", 0);
  for (i = 0; i < 200 && phase_of(f, "j1") == KOLO__V1__PHASE__PENDING; i++) {
    struct timespec pause = {0, 50 * 1000000L};
    nanosleep(&pause, NULL);
  }
  assert_int_equal(kolo_server_store_get(f->store, "j1", &now), KOLO_OK);
  assert_int_equal(now->status->phase, KOLO__V1__PHASE__RUNNING);
  assert_int_equal(now->status->epoch, 1);
  assert_true(now->n_events >= 1);
  assert_string_equal(now->events[now->n_events - 1]->type, "RING_FORMED");
  assert_int_equal(now->events[now->n_events - 1]->epoch, 1);
  protobuf_c_message_free_unpacked(&now->base, NULL);

  /* A view that lags behind the scheduler's own write: the job grows (w2 comes idle), then
   * every read waits for that write and no pass runs meanwhile. */
  int64_t head = put(f, "/kolo/v1/health", "x", 0);
  __atomic_store_n(&g.cap, head + 1, __ATOMIC_SEQ_CST); /* w2 passes the gate */
  put(f, "/kolo/v1/workers/w2", WORKER("w2", "7002", "idle"), 0);
  for (i = 0; i < 200; i++) {
    assert_int_equal(kolo_server_store_get(f->store, "j1", &now), KOLO_OK);
    int64_t epoch = (int64_t)now->status->epoch;
    protobuf_c_message_free_unpacked(&now->base, NULL);
    if (epoch == 2) break;
    struct timespec pause = {0, 50 * 1000000L};
    nanosleep(&pause, NULL);
  }
  assert_true(i < 200); /* grown to epoch 2 */
  int64_t grown_at = kolo_etcd_written_revision(kolo_sched_etcd(w.sched));
  assert_true(grown_at > head + 1);
  for (i = 0; i < 100 && __atomic_load_n(&g.timeouts, __ATOMIC_SEQ_CST) < 3; i++) {
    struct timespec pause = {0, 50 * 1000000L};
    nanosleep(&pause, NULL);
  }
  assert_true(__atomic_load_n(&g.timeouts, __ATOMIC_SEQ_CST) >= 3);
  passes = kolo_sched_passes(w.sched);
  struct timespec wait = {0, 500 * 1000000L};
  nanosleep(&wait, NULL);
  assert_int_equal(kolo_sched_passes(w.sched), passes); /* none on the lagging view */
  assert_int_equal(__atomic_load_n(&g.max_min, __ATOMIC_SEQ_CST),
                   kolo_etcd_written_revision(kolo_sched_etcd(w.sched)));
  __atomic_store_n(&g.cap, 0, __ATOMIC_SEQ_CST); /* the view catches up: passes go on */
  for (i = 0; i < 100 && kolo_sched_passes(w.sched) < passes + 2; i++) {
    struct timespec pause = {0, 50 * 1000000L};
    nanosleep(&pause, NULL);
  }
  assert_true(kolo_sched_passes(w.sched) >= passes + 2);
  assert_int_equal(kolo_server_store_get(f->store, "j1", &now), KOLO_OK);
  assert_int_equal(now->status->epoch, 2);
  assert_int_equal(now->status->n_members, 2);
  protobuf_c_message_free_unpacked(&now->base, NULL);

  kolo_server_store_set_records_fn(f->store, NULL, NULL);
  kolo_sched_stop(w.sched);
}

static uint64_t store_ranges(fixture *f) {
  kolo_etcd_stats st;
  kolo_etcd_stats_get(kolo_server_kv_etcd_handle(f->kv), 0, &st);
  return st.requests[KOLO_ETCD_REQ_RANGE];
}

static int draining_in_list(fixture *f, const char *id) {
  Kolo__V1__ListWorkersResponse *all = NULL;
  assert_int_equal(kolo_server_store_list_workers(f->store, &all), KOLO_OK);
  int draining = -1;
  for (size_t i = 0; i < all->n_workers; i++)
    if (strcmp(all->workers[i]->id, id) == 0) draining = all->workers[i]->draining;
  protobuf_c_message_free_unpacked(&all->base, NULL);
  return draining;
}

static void workers_drains_and_demand_make_no_etcd_range(void **state) {
  fixture *f = *state;
  int64_t lease = 0;
  assert_int_equal(kolo_etcd_lease_grant(f->client, 30, &lease, NULL), KOLO_OK);
  put(f, "/kolo/v1/workers/w1", WORKER("w1", "7001", "idle"), lease);
  put(f, "/kolo/v1/workers/w2", WORKER("w2", "7002", "busy"), lease);
  open_store(f);
  uint64_t before = store_ranges(f);
  assert_true(before >= 1); /* the first load */
  assert_int_equal(draining_in_list(f, "w1"), 0);
  Kolo__V1__Worker *w = NULL;
  char err[256] = "";
  assert_int_equal(kolo_server_store_drain_worker(f->store, "w1", &w, err, sizeof err), KOLO_OK);
  assert_true(w->draining);
  protobuf_c_message_free_unpacked(&w->base, NULL);
  assert_int_equal(draining_in_list(f, "w1"), 1); /* read-your-writes, with no read of etcd */
  Kolo__V1__Demand *d = NULL;
  assert_int_equal(kolo_server_store_get_demand(f->store, &d), KOLO_OK);
  assert_int_equal(d->workers_registered, 2);
  assert_int_equal(d->workers_draining, 1);
  protobuf_c_message_free_unpacked(&d->base, NULL);
  assert_int_equal(kolo_server_store_undrain_worker(f->store, "w1", &w, err, sizeof err), KOLO_OK);
  assert_false(w->draining);
  protobuf_c_message_free_unpacked(&w->base, NULL);
  assert_int_equal(draining_in_list(f, "w1"), 0);
  assert_int_equal(kolo_server_store_drain_worker(f->store, "nobody", &w, err, sizeof err),
                   KOLO_ERR_NOT_FOUND);
  assert_int_equal(store_ranges(f), before);
  /* the mark really is in etcd, under the registration's lease */
  assert_int_equal(kolo_server_store_drain_worker(f->store, "w2", &w, err, sizeof err), KOLO_OK);
  protobuf_c_message_free_unpacked(&w->base, NULL);
  kolo_etcd_kv kv;
  assert_int_equal(kolo_etcd_get(f->client, kolo_etcd_str("/kolo/v1/drain/w2"), &kv, NULL),
                   KOLO_OK);
  assert_int_equal(kv.lease, lease);
  kolo_etcd_kv_clear(&kv);
  assert_int_equal(store_ranges(f), before);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(the_records_equal_an_etcd_range_and_build_the_same_snapshot,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(the_scheduler_schedules_from_the_records_without_reading_etcd,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(workers_drains_and_demand_make_no_etcd_range, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
