/* Unit tests for server/store_intent.c over the in-memory kv: CancelJob and ScaleJob store the
 * user's intent (jobs/<id>/intent/{cancel,scale}) and never the job's status or events; the
 * view shows the job with its pending intents applied, as the scheduler will write it, so
 * the scheduler's write (simulated here byte for byte) changes nothing a watcher sees; an
 * intent that reaches etcd after the job ended is refused and taken back
 * (coordination/job_status.h kolo_job_status_apply_intents, the one rule for both). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec/codec.h"
#include "coordination/job_status.h"
#include "server/job_model.h"
#include "server/store.h"
#include "tests/unit/lag_kv.h"

#define SPEC(id)                 \
  "{\"name\":\"n\",\"id\":\"" id \
  "\",\"min_workers\":1,\"builtin\":{\"model\":\"mlp\",\"epochs\":1}}"

static void submit(kolo_server_store *store, const char *text) {
  ProtobufCMessage *msg = NULL;
  assert_int_equal(
      kolo_codec_parse(text, strlen(text), &kolo__v1__job_spec__descriptor, &msg, NULL, 0),
      KOLO_OK);
  Kolo__V1__Job *job = NULL;
  int created = 0;
  char err[256];
  assert_int_equal(
      kolo_server_store_submit(store, (Kolo__V1__JobSpec *)msg, &job, &created, err, sizeof err),
      KOLO_OK);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  protobuf_c_message_free_unpacked(msg, NULL);
}

/* The value at key ("" if absent; the caller frees). */
static char *kv_value(kolo_server_kv *kv, const char *key) {
  kolo_server_kv_item *items = NULL;
  size_t n = 0;
  int64_t rev;
  assert_int_equal(kv->ops->range(kv, key, &items, &n, &rev), KOLO_OK);
  char *out = NULL;
  for (size_t i = 0; i < n && !out; i++)
    if (strcmp(items[i].key, key) == 0) out = strndup(items[i].value, items[i].value_len);
  kolo_server_kv_items_free(items, n);
  return out ? out : strdup("");
}

/* How many keys are under prefix; the first one's name into key. */
static size_t only_key(kolo_server_kv *kv, const char *prefix, char *key, size_t len) {
  kolo_server_kv_item *items = NULL;
  size_t n = 0;
  int64_t rev;
  assert_int_equal(kv->ops->range(kv, prefix, &items, &n, &rev), KOLO_OK);
  if (n > 0) snprintf(key, len, "%s", items[0].key);
  kolo_server_kv_items_free(items, n);
  return n;
}

typedef struct seen {
  int calls;
} seen;

static void count(void *arg, const uint8_t *packed, size_t len, Kolo__V1__Phase phase) {
  (void)packed;
  (void)len;
  (void)phase;
  ((seen *)arg)->calls++;
}

static void a_cancel_stores_an_intent_and_the_schedulers_write_changes_nothing_seen(void **state) {
  (void)state;
  kolo_server_kv *kv = NULL;
  kolo_server_store *store = NULL;
  assert_int_equal(kolo_server_kv_mem_create(&kv), KOLO_OK);
  assert_int_equal(kolo_server_store_create(kv, &store), KOLO_OK);
  submit(store, SPEC("i1"));
  char *status_before = kv_value(kv, "/kolo/v1/jobs/i1/status");
  seen s = {0};
  uint64_t handle = 0;
  assert_int_equal(kolo_server_store_subscribe(store, "i1", count, &s, &handle), KOLO_OK);
  Kolo__V1__Job *job = NULL;
  char err[256];
  assert_int_equal(kolo_server_store_cancel(store, "i1", "stop", &job, err, sizeof err), KOLO_OK);
  assert_int_equal(job->status->phase, KOLO__V1__PHASE__CANCELLED);
  assert_string_equal(job->status->error, "cancelled: stop");
  assert_int_equal(job->n_events, 2);
  assert_string_equal(job->events[1]->type, "CANCELLED");
  assert_int_equal(s.calls, 2);
  /* kolo-server wrote the intent only: the status and the events are as submitted */
  char *status_after = kv_value(kv, "/kolo/v1/jobs/i1/status");
  assert_string_equal(status_after, status_before);
  char *intent = kv_value(kv, "/kolo/v1/jobs/i1/intent_head");
  assert_non_null(strstr(intent, "\"reason\":\"stop\""));
  char intent_key[256];
  assert_int_equal(only_key(kv, "/kolo/v1/jobs/i1/intents/", intent_key, sizeof intent_key), 1);
  char *event2 = kv_value(kv, "/kolo/v1/jobs/i1/events/00000000000000000002");
  assert_string_equal(event2, "");
  /* the scheduler acts: status, event 2 and the intent deleted, in one txn */
  char *st = kolo_job_status_write(job->status), *ev = kolo_codec_dump(&job->events[1]->base, 0);
  kolo_server_kv_put puts[3] = {{"/kolo/v1/jobs/i1/status", st, 0},
                                {"/kolo/v1/jobs/i1/events/00000000000000000002", ev, 0},
                                {intent_key, NULL, 0}};
  int64_t rev = 0;
  assert_int_equal(kv->ops->txn(kv, NULL, 0, puts, 3, &rev), KOLO_OK);
  Kolo__V1__Job *after = NULL;
  assert_int_equal(kolo_server_store_get(store, "i1", &after), KOLO_OK);
  assert_int_equal(after->status->phase, KOLO__V1__PHASE__CANCELLED);
  assert_int_equal(after->n_events, 2);
  assert_int_equal(s.calls, 2); /* the same job: no change for a watcher */
  /* a cancelled job takes no further intent */
  Kolo__V1__Job *again = NULL;
  assert_int_equal(kolo_server_store_scale(store, "i1", 2, 2, &again, err, sizeof err),
                   KOLO_ERR_STATE);
  kolo_server_store_unsubscribe(store, handle);
  free(st);
  free(ev);
  free(intent);
  free(event2);
  free(status_before);
  free(status_after);
  protobuf_c_message_free_unpacked(&after->base, NULL);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  kolo_server_store_destroy(store);
  kv->ops->destroy(kv);
}

static void intents_apply_in_the_order_they_were_accepted(void **state) {
  (void)state;
  kolo_server_kv *kv = NULL;
  kolo_server_store *store = NULL;
  assert_int_equal(kolo_server_kv_mem_create(&kv), KOLO_OK);
  assert_int_equal(kolo_server_store_create(kv, &store), KOLO_OK);
  submit(store, SPEC("i2"));
  Kolo__V1__Job *job = NULL;
  char err[256];
  assert_int_equal(kolo_server_store_scale(store, "i2", 2, 4, &job, err, sizeof err), KOLO_OK);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  assert_int_equal(kolo_server_store_scale(store, "i2", 3, 0, &job, err, sizeof err), KOLO_OK);
  assert_int_equal(job->status->min_workers, 3); /* both pending, applied in order */
  assert_int_equal(job->status->max_workers, 3);
  assert_int_equal(job->n_events, 3);
  assert_string_equal(job->events[1]->message, "scaled from 1-1 to 2-4 workers");
  assert_string_equal(job->events[2]->message, "scaled from 2-4 to 3-3 workers");
  protobuf_c_message_free_unpacked(&job->base, NULL);
  assert_int_equal(kolo_server_store_cancel(store, "i2", "", &job, err, sizeof err), KOLO_OK);
  assert_int_equal(job->n_events, 4);
  assert_string_equal(job->events[3]->type, "CANCELLED");
  assert_int_equal(job->events[3]->seq, 4);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  assert_int_equal(only_key(kv, "/kolo/v1/jobs/i2/intents/", err, sizeof err), 3);
  assert_int_equal(kolo_server_store_cancel(store, "i2", "", &job, err, sizeof err),
                   KOLO_ERR_STATE);
  /* the rule itself: a cancel accepted before a scale leaves the scale nothing to do */
  Kolo__V1__JobStatus st = KOLO__V1__JOB_STATUS__INIT;
  st.phase = KOLO__V1__PHASE__RUNNING;
  Kolo__V1__CancelIntent cancel = KOLO__V1__CANCEL_INTENT__INIT;
  Kolo__V1__ScaleIntent scale = KOLO__V1__SCALE_INTENT__INIT;
  cancel.reason = "r";
  cancel.time_unix_ms = 7;
  scale.min_workers = 2;
  Kolo__V1__JobIntent first = KOLO__V1__JOB_INTENT__INIT, second = KOLO__V1__JOB_INTENT__INIT;
  first.cancel = &cancel;
  second.scale = &scale;
  const Kolo__V1__JobIntent *in[2] = {&first, &second};
  kolo_job_intent_event events[2];
  int applied[2] = {-1, -1};
  assert_int_equal(kolo_job_status_apply_intents(&st, in, 2, events, applied), 1);
  assert_int_equal(applied[0], 1);
  assert_int_equal(applied[1], 0);
  assert_string_equal(events[0].type, "CANCELLED");
  assert_int_equal(events[0].time_unix_ms, 7);
  assert_int_equal(st.finished_unix_ms, 7);
  assert_int_equal(st.min_workers, 0);
  free(st.error);
  kolo_server_store_destroy(store);
  kv->ops->destroy(kv);
}

/* The view lags: the job has ended in etcd (the scheduler's write) but the view still shows
 * it PENDING, so the cancel is checked against the old status and its intent stored; once the
 * view shows both, the cancel is refused and its intent deleted (the scheduler, which leaves
 * ended jobs alone, would never apply it). */
static void an_intent_stored_after_the_end_is_refused_and_taken_back(void **state) {
  (void)state;
  lag_kv *lag = lag_kv_create();
  kolo_server_store *store = NULL;
  assert_int_equal(kolo_server_store_create(&lag->base, &store), KOLO_OK);
  submit(store, SPEC("i3"));
  lag_pause(lag);
  kolo_server_kv_put ended = {"/kolo/v1/jobs/i3/status", "{\"phase\":\"SUCCEEDED\"}", 0};
  int64_t rev = 0;
  assert_int_equal(lag->base.ops->txn(&lag->base, NULL, 0, &ended, 1, &rev), KOLO_OK);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, resume_later, lag), 0);
  Kolo__V1__Job *job = NULL;
  char err[256] = "";
  assert_int_equal(kolo_server_store_cancel(store, "i3", "late", &job, err, sizeof err),
                   KOLO_ERR_STATE);
  assert_null(job);
  assert_non_null(strstr(err, "SUCCEEDED"));
  pthread_join(t, NULL);
  char key[256];
  assert_int_equal(only_key(&lag->base, "/kolo/v1/jobs/i3/intents/", key, sizeof key), 0);
  assert_int_equal(kolo_server_store_get(store, "i3", &job), KOLO_OK);
  assert_int_equal(job->status->phase, KOLO__V1__PHASE__SUCCEEDED);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  kolo_server_store_destroy(store);
  lag->base.ops->destroy(&lag->base);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_cancel_stores_an_intent_and_the_schedulers_write_changes_nothing_seen),
      cmocka_unit_test(intents_apply_in_the_order_they_were_accepted),
      cmocka_unit_test(an_intent_stored_after_the_end_is_refused_and_taken_back),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
