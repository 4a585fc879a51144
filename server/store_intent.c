/* CancelJob and ScaleJob (store.h): kolo-server writes the user's intent, never the job's
 * status or events. Each is one txn that puts a kolo.v1.JobIntent under a new key
 * /kolo/v1/jobs/<id>/intents/<time>-<random> and again at .../intent_head, with no compare:
 * two replicas' intents never conflict, and they apply in the order etcd took them (create
 * revisions). The scheduler (the leader) alone applies them to the status, appends their
 * events and deletes them (scheduler/apply.c); each of its other writes of the job compares
 * intent_head's mod revision, so none overtakes an intent it has not seen. The view shows a
 * job with its pending intents applied by the same pure function (coordination/job_status.h),
 * so a cancel answers CANCELLED at once and the scheduler's write later changes nothing a
 * reader sees. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "common/checks.h"
#include "common/log.h"
#include "server/store_internal.h"

#define LOG "store"

typedef kolo_status (*check_fn)(Kolo__V1__Job *job, const void *arg, char *err, size_t err_len);

typedef struct intent_write {
  const char *what; /* "cancelled", "scaled" */
  check_fn check;   /* the transition on a copy of the job as shown: its errors are the API's */
  const void *arg;
  const Kolo__V1__JobIntent *intent;
} intent_write;

/* A copy of job id as the view shows it. */
static kolo_status view_job(kolo_server_store *s, const char *id, Kolo__V1__Job **job) {
  kolo_status rc = KOLO_ERR_NOT_FOUND;
  pthread_rwlock_rdlock(&s->lock);
  long at = kolo_server_store_find_entry(s, id);
  if (at >= 0 && s->entries[at]->packed) {
    entry *e = s->entries[at];
    *job = kolo__v1__job__unpack(NULL, e->packed_len, e->packed);
    rc = *job ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  }
  pthread_rwlock_unlock(&s->lock);
  return rc;
}

/* A new intent's key: "<id>/intents/<time ms, 20 digits>-<64 random bits, hex>" (unique
 * without a compare). */
static kolo_status intent_key(const char *id, int64_t now_ms, char *name, size_t name_len,
                              char *key, size_t key_len) {
  uint64_t r = 0;
  FILE *f = fopen("/dev/urandom", "rb");
  size_t got = f ? fread(&r, sizeof r, 1, f) : 0;
  if (f) fclose(f);
  if (got != 1) r = (uint64_t)now_ms * 2654435761u ^ (uint64_t)(uintptr_t)&r;
  snprintf(name, name_len, "%020" PRId64 "-%016" PRIx64, now_ms, r);
  char leaf[128];
  snprintf(leaf, sizeof leaf, KOLO_KEY_JOB_INTENTS "%s", name);
  return kolo_keys_job(id, leaf, key, key_len);
}

/* The txn: the intent at a new key and at intent_head. *revision: the write's. */
static kolo_status put_intent(kolo_server_store *s, const char *id, const intent_write *w,
                              char *name, size_t name_len, int64_t *revision) {
  char key[256], head[160];
  KOLO_CHECK(intent_key(id, kolo_server_now_ms(), name, name_len, key, sizeof key));
  KOLO_CHECK(kolo_keys_job(id, KOLO_KEY_JOB_INTENT_HEAD, head, sizeof head));
  char *value = kolo_codec_dump(&w->intent->base, 0);
  if (value == NULL) return KOLO_ERR_NO_MEMORY;
  kolo_server_kv_compare cmp = {key, KOLO_SERVER_KV_CREATE, 0};
  kolo_server_kv_put puts[2] = {{key, value, 0}, {head, value, 0}};
  kolo_status rc = s->kv->ops->txn(s->kv, &cmp, 1, puts, 2, revision);
  free(value);
  return rc;
}

/* After the view shows our intent (name, written at revision): KOLO_ERR_STATE (err says why)
 * if it will never apply: the stored status ended before it (the scheduler, which leaves ended
 * jobs alone, would never see it: it is deleted here) or an intent before it (a cancel) leaves
 * it nothing to do (the scheduler deletes it with that one). */
static kolo_status refused_after(kolo_server_store *s, const char *id, const intent_write *w,
                                 const char *name, char *err, size_t err_len) {
  Kolo__V1__Phase phase = KOLO__V1__PHASE__PHASE_UNSPECIFIED;
  int ended = 0;
  pthread_rwlock_rdlock(&s->lock);
  long at = kolo_server_store_find_entry(s, id);
  if (at >= 0) {
    const entry *e = s->entries[at];
    for (size_t i = 0; i < e->n_intents; i++) {
      if (strcmp(e->intents[i].name, name) != 0 || e->intents[i].applied) continue;
      ended = e->stored && kolo_job_status_final(e->stored->phase);
      phase = e->status ? e->status->phase : KOLO__V1__PHASE__PHASE_UNSPECIFIED;
    }
  }
  pthread_rwlock_unlock(&s->lock);
  if (phase == KOLO__V1__PHASE__PHASE_UNSPECIFIED) return KOLO_OK;
  char key[256], leaf[128];
  snprintf(leaf, sizeof leaf, KOLO_KEY_JOB_INTENTS "%s", name);
  int64_t rev = 0;
  if (ended && kolo_keys_job(id, leaf, key, sizeof key) == KOLO_OK) {
    kolo_server_kv_put del = {key, NULL, 0};
    if (s->kv->ops->txn(s->kv, NULL, 0, &del, 1, &rev) != KOLO_OK)
      KOLO_LOGW(LOG, "job %s: could not take back the intent %s", id, key);
  }
  if (err && err_len)
    snprintf(err, err_len, "job %.63s is %s and can no longer be %s", id,
             kolo_server_job_phase_name(phase), w->what);
  return KOLO_ERR_STATE;
}

/* Checks the transition on the job as the view shows it, writes the intent, waits for the
 * view to show it and answers the job as shown. */
static kolo_status write_intent(kolo_server_store *s, const char *id, const intent_write *w,
                                Kolo__V1__Job **out, char *err, size_t err_len) {
  Kolo__V1__Job *job = NULL;
  int64_t revision = 0;
  char name[96];
  if (err && err_len) err[0] = '\0';
  kolo_status rc = view_job(s, id, &job);
  if (rc != KOLO_OK) {
    if (rc == KOLO_ERR_NOT_FOUND && err && err_len) snprintf(err, err_len, "no job %.63s", id);
    return rc;
  }
  rc = w->check(job, w->arg, err, err_len);
  protobuf_c_message_free_unpacked(&job->base, NULL);
  if (rc != KOLO_OK) return rc;
  rc = put_intent(s, id, w, name, sizeof name, &revision);
  if (rc != KOLO_OK) return rc;
  KOLO_LOGI(LOG, "job %s: intent %s stored at revision %" PRId64, id, name, revision);
  if (kolo_server_store_wait_revision(s, revision, s->catch_up_ms) != KOLO_OK)
    return kolo_server_store_view_behind(s, w->what, id, revision, err, err_len);
  rc = refused_after(s, id, w, name, err, err_len);
  return rc == KOLO_OK ? kolo_server_store_get(s, id, out) : rc;
}

static kolo_status check_cancel(Kolo__V1__Job *job, const void *arg, char *err, size_t err_len) {
  return kolo_server_job_cancel(job, arg, kolo_server_now_ms(), err, err_len);
}

kolo_status kolo_server_store_cancel(kolo_server_store *s, const char *id, const char *reason,
                                     Kolo__V1__Job **out, char *err, size_t err_len) {
  Kolo__V1__CancelIntent cancel = KOLO__V1__CANCEL_INTENT__INIT;
  Kolo__V1__JobIntent intent = KOLO__V1__JOB_INTENT__INIT;
  cancel.reason = (char *)(reason ? reason : "");
  cancel.time_unix_ms = kolo_server_now_ms();
  intent.cancel = &cancel;
  intent_write w = {"cancelled", check_cancel, cancel.reason, &intent};
  return write_intent(s, id, &w, out, err, err_len);
}

static kolo_status check_scale(Kolo__V1__Job *job, const void *arg, char *err, size_t err_len) {
  const Kolo__V1__ScaleIntent *a = arg;
  return kolo_server_job_scale(job, a->min_workers, a->max_workers, kolo_server_now_ms(), err,
                               err_len);
}

kolo_status kolo_server_store_scale(kolo_server_store *s, const char *id, uint32_t min_workers,
                                    uint32_t max_workers, Kolo__V1__Job **out, char *err,
                                    size_t err_len) {
  Kolo__V1__ScaleIntent scale = KOLO__V1__SCALE_INTENT__INIT;
  Kolo__V1__JobIntent intent = KOLO__V1__JOB_INTENT__INIT;
  scale.min_workers = min_workers;
  scale.max_workers = max_workers ? max_workers : min_workers;
  scale.time_unix_ms = kolo_server_now_ms();
  intent.scale = &scale;
  intent_write w = {"scaled", check_scale, &scale, &intent};
  return write_intent(s, id, &w, out, err, err_len);
}
