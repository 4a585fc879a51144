/* Implementation of store.h: the watch-fed view (a sorted array of jobs, each with cached
 * packed and JSON forms) and the txn-based writes. The view follows all of /kolo/v1/ with one
 * watch: jobs here, metrics history and rings in store_history.c, and a change counter for
 * the worker keys. */
#include "server/store.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/checks.h"
#include "common/log.h"
#include "server/job_model.h"
#include "codec/codec.h"
#include "server/store_internal.h"

#define LOG "store"
#define CATCH_UP_MS 5000 /* default of kolo_server_store_set_catch_up_ms */
#define KOLO_CHECK_GOTO_RC(call) KOLO_CHECK_GOTO(call, rc, out)

/* ---- the view ---- */

const char *kolo_server_entry_id(const void *element) {
  return (*(entry *const *)element)->id;
}

long kolo_server_store_find_entry(const kolo_server_store *s, const char *id) {
  return kolo_server_sorted_find(s->entries, s->count, sizeof *s->entries, kolo_server_entry_id,
                                 id);
}

/* Drops what the view shows (the status with intents applied and their events). */
static void entry_clear_shown(entry *e) {
  if (e->status) protobuf_c_message_free_unpacked(&e->status->base, NULL);
  e->status = NULL;
  for (size_t i = 0; i < e->n_intent_events; i++)
    protobuf_c_message_free_unpacked(&e->intent_events[i]->base, NULL);
  e->n_intent_events = 0;
}

/* What the view shows of e: its stored status with the pending intents applied, as the
 * scheduler will write it (coordination/job_status.h, the same function and times), and
 * the events they add numbered after the stored ones. A final stored status takes no intent
 * (one written after the job ended is refused to its writer and deleted). */
static kolo_status entry_show(entry *e) {
  entry_clear_shown(e);
  if (e->stored == NULL) return KOLO_OK;
  e->status = (Kolo__V1__JobStatus *)kolo_codec_copy(&e->stored->base);
  if (e->status == NULL) return KOLO_ERR_NO_MEMORY;
  for (size_t i = 0; i < e->n_intents; i++) e->intents[i].applied = 0;
  if (kolo_job_status_final(e->stored->phase) || e->n_intents == 0) return KOLO_OK;
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  const Kolo__V1__JobIntent **in = malloc(e->n_intents * sizeof *in);
  kolo_job_intent_event *evs = malloc(e->n_intents * sizeof *evs);
  int *applied = calloc(e->n_intents, sizeof *applied);
  Kolo__V1__Event **grown = realloc(e->intent_events, e->n_intents * sizeof *grown);
  if (grown) e->intent_events = grown;
  if (!in || !evs || !applied || !grown) goto out;
  for (size_t i = 0; i < e->n_intents; i++) in[i] = e->intents[i].msg;
  int n = kolo_job_status_apply_intents(e->status, in, e->n_intents, evs, applied);
  if (n < 0) goto out;
  for (size_t i = 0; i < e->n_intents; i++) e->intents[i].applied = applied[i];
  uint64_t seq = e->n_events ? e->events[e->n_events - 1]->seq : 0;
  for (int i = 0; i < n; i++) {
    Kolo__V1__Event *ev = malloc(sizeof *ev);
    if (ev == NULL) goto out;
    kolo__v1__event__init(ev);
    e->intent_events[e->n_intent_events++] = ev;
    ev->seq = seq + 1 + (uint64_t)i;
    ev->time_unix_ms = evs[i].time_unix_ms;
    ev->epoch = e->status->epoch;
    if (kolo_codec_set_string(&ev->type, evs[i].type) != KOLO_OK ||
        kolo_codec_set_string(&ev->message, evs[i].message) != KOLO_OK)
      goto out;
  }
  rc = KOLO_OK;
out:
  free(in);
  free(evs);
  free(applied);
  return rc;
}

static void entry_free(entry *e) {
  if (e == NULL) return;
  if (e->spec) protobuf_c_message_free_unpacked(&e->spec->base, NULL);
  if (e->stored) protobuf_c_message_free_unpacked(&e->stored->base, NULL);
  for (size_t i = 0; i < e->n_intents; i++)
    protobuf_c_message_free_unpacked(&e->intents[i].msg->base, NULL);
  free(e->intents);
  entry_clear_shown(e);
  free(e->intent_events);
  for (size_t i = 0; i < e->n_events; i++)
    protobuf_c_message_free_unpacked(&e->events[i]->base, NULL);
  free(e->events);
  free(e->packed);
  free(e->json);
  free(e->summary);
  kolo_server_store_history_free(e);
  free(e);
}

entry *kolo_server_store_entry_for(kolo_server_store *s, const char *id) {
  long at = kolo_server_store_find_entry(s, id);
  if (at >= 0) return s->entries[at];
  if (s->count == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    if (kolo_server_store_lists_reserve(s, cap) != KOLO_OK) return NULL;
    entry **grown = realloc(s->entries, cap * sizeof *grown);
    if (grown == NULL) return NULL;
    s->entries = grown;
    s->cap = cap;
  }
  entry *e = calloc(1, sizeof *e);
  if (e == NULL) return NULL;
  snprintf(e->id, sizeof e->id, "%s", id);
  size_t pos = (size_t)(-at - 1);
  memmove(&s->entries[pos + 1], &s->entries[pos], (s->count - pos) * sizeof *s->entries);
  s->entries[pos] = e;
  s->count++;
  kolo_server_store_live_update(s, e); /* no status yet: live */
  return e;
}

/* A Job that borrows the entry's parts (never free it; only pack or encode it). events: the
 * stored events and the intents' (NULL: none). */
static void borrow_job(entry *e, Kolo__V1__Job *job, Kolo__V1__Event **events, size_t n_events) {
  kolo__v1__job__init(job);
  job->id = e->id;
  job->spec = e->spec;
  job->status = e->status;
  job->events = events;
  job->n_events = events ? n_events : 0;
}

/* The stored events then the intents' into out (room for n_events + 2), the log bounded as
 * the scheduler's write will leave it (the first and the last KOLO_EVENTS_KEPT). */
static size_t shown_events(const entry *e, Kolo__V1__Event **out) {
  size_t n = 0, total = e->n_events + e->n_intent_events;
  size_t skip = total > KOLO_EVENTS_KEPT + 1 ? total - (KOLO_EVENTS_KEPT + 1) : 0;
  for (size_t i = 0; i < e->n_events; i++)
    if (i == 0 || i > skip) out[n++] = e->events[i];
  for (size_t i = 0; i < e->n_intent_events; i++) out[n++] = e->intent_events[i];
  return n;
}

/* Rebuilds what the view shows of e and its cached forms; 1 if the packed job changed (a
 * scheduler's write of what the view already showed changes nothing a watcher sees). */
static int entry_rebuild(entry *e) {
  uint8_t *old = e->packed;
  size_t old_len = e->packed_len;
  int changed = 1;
  free(e->json);
  free(e->summary);
  e->packed = NULL;
  e->json = e->summary = NULL;
  Kolo__V1__Event **events = NULL;
  if (entry_show(e) != KOLO_OK || e->spec == NULL || e->status == NULL) goto out;
  events = malloc((e->n_events + e->n_intent_events + 1) * sizeof *events);
  if (events == NULL) goto out;
  Kolo__V1__Job job;
  borrow_job(e, &job, events, shown_events(e, events));
  e->packed_len = kolo__v1__job__get_packed_size(&job);
  e->packed = malloc(e->packed_len + 1);
  if (e->packed) kolo__v1__job__pack(&job, e->packed);
  e->json = kolo_codec_dump(&job.base, 0);
  borrow_job(e, &job, NULL, 0);
  e->summary = kolo_codec_dump(&job.base, 0);
  if (e->json == NULL || e->summary == NULL) {
    free(e->packed);
    e->packed = NULL;
  }
  changed = e->packed == NULL || old == NULL || old_len != e->packed_len ||
            memcmp(old, e->packed, old_len) != 0;
out:
  free(events);
  free(old);
  return changed;
}

static kolo_status entry_put_event(entry *e, Kolo__V1__Event *ev) {
  size_t pos = e->n_events;
  while (pos > 0 && e->events[pos - 1]->seq >= ev->seq) pos--;
  if (pos < e->n_events && e->events[pos]->seq == ev->seq) {
    protobuf_c_message_free_unpacked(&e->events[pos]->base, NULL);
    e->events[pos] = ev;
    return KOLO_OK;
  }
  if (e->n_events == e->cap_events) {
    size_t cap = e->cap_events ? e->cap_events * 2 : 8;
    Kolo__V1__Event **grown = realloc(e->events, cap * sizeof *grown);
    if (grown == NULL) return KOLO_ERR_NO_MEMORY;
    e->events = grown;
    e->cap_events = cap;
  }
  memmove(&e->events[pos + 1], &e->events[pos], (e->n_events - pos) * sizeof *e->events);
  e->events[pos] = ev;
  e->n_events++;
  /* the bounded log (coordination/keys.h): the first event and the last KOLO_EVENTS_KEPT */
  while (e->n_events > KOLO_EVENTS_KEPT + 1) {
    protobuf_c_message_free_unpacked(&e->events[1]->base, NULL);
    memmove(&e->events[1], &e->events[2], (e->n_events - 2) * sizeof *e->events);
    e->n_events--;
  }
  return KOLO_OK;
}

/* Adds (msg, created at rev; e takes it) or removes (NULL) e's pending intent name, keeping
 * them in create-revision order. */
static kolo_status entry_set_intent(entry *e, const char *name, Kolo__V1__JobIntent *msg,
                                    int64_t rev) {
  size_t at = 0;
  while (at < e->n_intents && strcmp(e->intents[at].name, name) != 0) at++;
  if (at < e->n_intents) { /* never rewritten by kolo; a put again replaces it */
    protobuf_c_message_free_unpacked(&e->intents[at].msg->base, NULL);
    memmove(&e->intents[at], &e->intents[at + 1], (e->n_intents - at - 1) * sizeof *e->intents);
    e->n_intents--;
  }
  if (msg == NULL) return KOLO_OK;
  if (strlen(name) >= sizeof e->intents[0].name) return KOLO_ERR_INVALID_ARG;
  if (e->n_intents == e->cap_intents) {
    size_t cap = e->cap_intents ? e->cap_intents * 2 : 4;
    pending_intent *grown = realloc(e->intents, cap * sizeof *grown);
    if (grown == NULL) return KOLO_ERR_NO_MEMORY;
    e->intents = grown;
    e->cap_intents = cap;
  }
  size_t pos = e->n_intents;
  while (pos > 0 && e->intents[pos - 1].rev > rev) pos--;
  memmove(&e->intents[pos + 1], &e->intents[pos], (e->n_intents - pos) * sizeof *e->intents);
  e->intents[pos] = (pending_intent){.msg = msg, .rev = rev};
  snprintf(e->intents[pos].name, sizeof e->intents[pos].name, "%s", name);
  e->n_intents++;
  return KOLO_OK;
}

/* Applies one key of /kolo/v1/jobs/ to the view (write lock held). */
static void apply_job_item(kolo_server_store *s, const kolo_server_kv_item *item, int is_delete) {
  const char *rest = item->key + strlen(KOLO_KEY_JOBS_PREFIX);
  const char *slash = strchr(rest, '/');
  if (slash == NULL || (size_t)(slash - rest) > KOLO_SERVER_ID_MAX) return;
  char id[KOLO_SERVER_ID_MAX + 1];
  memcpy(id, rest, (size_t)(slash - rest));
  id[slash - rest] = '\0';
  const char *part = slash + 1;
  const ProtobufCMessageDescriptor *desc;
  if (strcmp(part, "spec") == 0)
    desc = &kolo__v1__job_spec__descriptor;
  else if (strcmp(part, "status") == 0)
    desc = &kolo__v1__job_status__descriptor;
  else if (strncmp(part, "events/", 7) == 0)
    desc = &kolo__v1__event__descriptor;
  else if (strncmp(part, KOLO_KEY_JOB_INTENTS, strlen(KOLO_KEY_JOB_INTENTS)) == 0)
    desc = &kolo__v1__job_intent__descriptor;
  else if (strncmp(part, "ring/", 5) == 0) {
    entry *e = NULL;
    if (!is_delete) {
      e = kolo_server_store_entry_for(s, id);
    } else {
      long at = kolo_server_store_find_entry(s, id);
      if (at >= 0) e = s->entries[at];
    }
    if (e) {
      kolo_server_store_apply_ring(e, item, is_delete);
      e->history_batch = s->batch;
    }
    return;
  } else
    return; /* reports/<worker> and others belong to the scheduler */
  if (is_delete) {
    long at = kolo_server_store_find_entry(s, id);
    if (at < 0) return;
    /* The scheduler acted on an intent (or its writer took it back). */
    if (desc == &kolo__v1__job_intent__descriptor) {
      entry_set_intent(s->entries[at], part + strlen(KOLO_KEY_JOB_INTENTS), NULL, 0);
      kolo_server_store_touch(s, s->entries[at]);
      s->list_batch = s->entries[at]->summary_batch = s->batch;
      return;
    }
    /* Deleting a job's spec removes the job from the view (operators' cleanup). */
    if (desc == &kolo__v1__job_spec__descriptor) {
      kolo_server_store_lists_forget(s, s->entries[at]);
      entry_free(s->entries[at]);
      memmove(&s->entries[at], &s->entries[at + 1],
              (s->count - (size_t)at - 1) * sizeof *s->entries);
      s->count--;
      s->list_batch = s->removed_batch = s->batch;
    }
    return;
  }
  ProtobufCMessage *msg = NULL;
  char err[256];
  if (kolo_codec_parse(item->value, item->value_len, desc, &msg, err, sizeof err) != KOLO_OK) {
    KOLO_LOGW(LOG, "ignoring %s: %s", item->key, err);
    return;
  }
  entry *e = kolo_server_store_entry_for(s, id);
  if (e == NULL) {
    protobuf_c_message_free_unpacked(msg, NULL);
    return;
  }
  if (desc == &kolo__v1__job_spec__descriptor) {
    if (e->spec) protobuf_c_message_free_unpacked(&e->spec->base, NULL);
    e->spec = (Kolo__V1__JobSpec *)msg;
    s->list_batch = e->summary_batch = s->batch;
  } else if (desc == &kolo__v1__job_status__descriptor) {
    if (e->stored) protobuf_c_message_free_unpacked(&e->stored->base, NULL);
    e->stored = (Kolo__V1__JobStatus *)msg;
    e->status_rev = item->mod_revision;
    kolo_server_store_live_update(s, e);
    s->list_batch = e->summary_batch = s->batch;
  } else if (desc != &kolo__v1__event__descriptor) {
    if (entry_set_intent(e, part + strlen(KOLO_KEY_JOB_INTENTS), (Kolo__V1__JobIntent *)msg,
                         item->create_revision) != KOLO_OK)
      protobuf_c_message_free_unpacked(msg, NULL);
    s->list_batch = e->summary_batch = s->batch;
  } else if (entry_put_event(e, (Kolo__V1__Event *)msg) != KOLO_OK) {
    protobuf_c_message_free_unpacked(msg, NULL);
  }
  kolo_server_store_touch(s, e);
}

static int has_prefix(const char *key, const char *prefix) {
  return strncmp(key, prefix, strlen(prefix)) == 0;
}

/* Applies one key under /kolo/v1/ to the view (write lock held). */
static void apply_item(kolo_server_store *s, const kolo_server_kv_item *item, int is_delete) {
  if (kolo_server_store_apply_record(s, item, is_delete) != KOLO_OK)
    KOLO_LOGE(LOG, "out of memory keeping %s for the scheduler", item->key);
  if (has_prefix(item->key, KOLO_KEY_JOBS_PREFIX))
    apply_job_item(s, item, is_delete);
  else if (has_prefix(item->key, KOLO_KEY_METRICS_PREFIX))
    kolo_server_store_apply_point(s, item->key, item, is_delete);
  else if (has_prefix(item->key, KOLO_KEY_WORKERS_PREFIX) ||
           has_prefix(item->key, KOLO_KEY_DRAIN_PREFIX) ||
           has_prefix(item->key, KOLO_KEY_ASSIGN_PREFIX))
    s->workers_batch = s->batch;
}

/* Records how far the view got; reset = a resync (etcd's history may even have gone back). */
static void set_revision(kolo_server_store *s, int64_t revision, int reset) {
  pthread_mutex_lock(&s->rev_lock);
  if (revision > s->revision || reset) s->revision = revision;
  pthread_cond_broadcast(&s->rev_cond);
  pthread_mutex_unlock(&s->rev_lock);
}

/* The kv watch callback: apply the batch, then tell subscribers of each changed job once. */
static void on_watch(void *arg, const kolo_server_kv_event *events, size_t count, int64_t revision,
                     int reset) {
  kolo_server_store *s = arg;
  pthread_mutex_lock(&s->sub_lock);
  pthread_rwlock_wrlock(&s->lock);
  s->batch++;
  int records_changed = reset;
  if (reset) {
    /* History was compacted away: rebuild the view from the snapshot. */
    KOLO_LOGW(LOG, "watch resynced at revision %" PRId64 "; reloading %zu keys", revision, count);
    kolo_server_store_lists_clear(s);
    for (size_t i = 0; i < s->count; i++) entry_free(s->entries[i]);
    s->count = 0;
    kolo_server_store_records_clear(s);
    s->reloads++;
    s->list_batch = s->workers_batch = s->removed_batch = s->batch;
  }
  for (size_t i = 0; i < count; i++) {
    apply_item(s, &events[i].item, events[i].is_delete);
    records_changed |= kolo_server_store_record_kept(events[i].item.key);
  }
  /* the touched ones only, in id order: a batch costs what it touched, not every job */
  size_t n_touched = kolo_server_store_take_touched(s);
  for (size_t i = 0; i < n_touched; i++) {
    entry *e = s->touched[i];
    e->job_batch = s->batch;
    if (!entry_rebuild(e) || e->packed == NULL) continue;
    for (subscriber *sub = s->subs; sub; sub = sub->next)
      if (strcmp(sub->id, e->id) == 0)
        sub->fn(sub->arg, e->packed, e->packed_len, e->status->phase);
  }
  pthread_rwlock_unlock(&s->lock);
  /* under sub_lock, so that kolo_server_store_set_change_fn waits for a call in flight */
  if (s->on_change) s->on_change(s->on_change_arg);
  /* the revision before records_fn: a reader it wakes finds the batch applied */
  set_revision(s, revision, reset);
  if (records_changed && s->records_fn) s->records_fn(s->records_arg);
  pthread_mutex_unlock(&s->sub_lock);
}

/* Waits until the view has applied revision (a write of ours), up to timeout_ms. */
kolo_status kolo_server_store_wait_revision(kolo_server_store *s, int64_t revision,
                                            int timeout_ms) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += timeout_ms / 1000;
  deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  kolo_status rc = KOLO_OK;
  pthread_mutex_lock(&s->rev_lock);
  while (s->revision < revision) {
    if (pthread_cond_timedwait(&s->rev_cond, &s->rev_lock, &deadline) == ETIMEDOUT) {
      rc = s->revision >= revision ? KOLO_OK : KOLO_ERR_TIMEOUT;
      break;
    }
  }
  pthread_mutex_unlock(&s->rev_lock);
  return rc;
}

int64_t kolo_server_store_revision(kolo_server_store *s) {
  pthread_mutex_lock(&s->rev_lock);
  int64_t rev = s->revision;
  pthread_mutex_unlock(&s->rev_lock);
  return rev;
}

kolo_status kolo_server_store_create(kolo_server_kv *kv, kolo_server_store **out) {
  kolo_status rc;
  kolo_server_kv_item *items = NULL;
  size_t n = 0;
  int64_t revision = 0;
  kolo_server_store *s = calloc(1, sizeof *s);
  if (s == NULL) return KOLO_ERR_NO_MEMORY;
  s->kv = kv;
  s->next_handle = 1;
  s->catch_up_ms = CATCH_UP_MS;
  pthread_rwlock_init(&s->lock, NULL);
  pthread_mutex_init(&s->rev_lock, NULL);
  pthread_cond_init(&s->rev_cond, NULL);
  pthread_mutex_init(&s->sub_lock, NULL);
  s->batch = 1;
  KOLO_CHECK_GOTO_RC(kv->ops->range(kv, KOLO_KEY_ROOT, &items, &n, &revision));
  pthread_rwlock_wrlock(&s->lock);
  for (size_t i = 0; i < n; i++) apply_item(s, &items[i], 0);
  kolo_server_store_take_touched(s); /* every entry is rebuilt below */
  for (size_t i = 0; i < s->count; i++) {
    s->entries[i]->job_batch = s->entries[i]->summary_batch = s->batch;
    entry_rebuild(s->entries[i]);
  }
  s->list_batch = s->workers_batch = s->batch;
  pthread_rwlock_unlock(&s->lock);
  s->revision = revision;
  KOLO_CHECK_GOTO_RC(kv->ops->start_watch(kv, KOLO_KEY_ROOT, revision + 1, on_watch, s));
  KOLO_LOGI(LOG, "loaded %zu jobs at revision %" PRId64, s->count, revision);
  kolo_server_kv_items_free(items, n);
  *out = s;
  return KOLO_OK;
out:
  kolo_server_kv_items_free(items, n);
  kolo_server_store_destroy(s);
  return rc;
}

void kolo_server_store_destroy(kolo_server_store *s) {
  if (s == NULL) return;
  s->kv->ops->stop_watch(s->kv);
  for (size_t i = 0; i < s->count; i++) entry_free(s->entries[i]);
  free(s->entries);
  kolo_server_store_lists_free(s);
  kolo_server_store_records_free(s);
  while (s->subs) {
    subscriber *next = s->subs->next;
    free(s->subs);
    s->subs = next;
  }
  pthread_rwlock_destroy(&s->lock);
  pthread_mutex_destroy(&s->rev_lock);
  pthread_cond_destroy(&s->rev_cond);
  pthread_mutex_destroy(&s->sub_lock);
  free(s);
}

/* ---- reads ---- */

kolo_status kolo_server_store_get_packed(kolo_server_store *s, const char *id, uint8_t **buf,
                                         size_t *len) {
  kolo_status rc = KOLO_ERR_NOT_FOUND;
  pthread_rwlock_rdlock(&s->lock);
  long at = kolo_server_store_find_entry(s, id);
  if (at >= 0 && s->entries[at]->packed) {
    entry *e = s->entries[at];
    *buf = malloc(e->packed_len + 1);
    rc = *buf ? KOLO_OK : KOLO_ERR_NO_MEMORY;
    if (*buf) {
      memcpy(*buf, e->packed, e->packed_len);
      *len = e->packed_len;
    }
  }
  pthread_rwlock_unlock(&s->lock);
  return rc;
}

kolo_status kolo_server_store_get_json(kolo_server_store *s, const char *id, char **json) {
  kolo_status rc = KOLO_ERR_NOT_FOUND;
  pthread_rwlock_rdlock(&s->lock);
  long at = kolo_server_store_find_entry(s, id);
  if (at >= 0 && s->entries[at]->json) {
    *json = strdup(s->entries[at]->json);
    rc = *json ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  }
  pthread_rwlock_unlock(&s->lock);
  return rc;
}

kolo_status kolo_server_store_get(kolo_server_store *s, const char *id, Kolo__V1__Job **out) {
  uint8_t *buf = NULL;
  size_t len = 0;
  KOLO_CHECK(kolo_server_store_get_packed(s, id, &buf, &len));
  *out = kolo__v1__job__unpack(NULL, len, buf);
  free(buf);
  return *out ? KOLO_OK : KOLO_ERR_NO_MEMORY;
}

static int labels_match(const Kolo__V1__JobSpec *spec, const Kolo__V1__ListJobsRequest *req) {
  for (size_t i = 0; i < req->n_labels; i++) {
    int found = 0;
    for (size_t j = 0; j < spec->n_labels && !found; j++)
      found = strcmp(spec->labels[j]->key, req->labels[i]->key) == 0 &&
              strcmp(spec->labels[j]->value, req->labels[i]->value) == 0;
    if (!found) return 0;
  }
  return 1;
}

kolo_status kolo_server_store_list(kolo_server_store *s, const Kolo__V1__ListJobsRequest *req,
                                   Kolo__V1__ListJobsResponse **out) {
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  size_t limit = req->page_size == 0 ? 100 : req->page_size > 1000 ? 1000 : req->page_size;
  Kolo__V1__ListJobsResponse *resp = malloc(sizeof *resp);
  if (resp == NULL) return KOLO_ERR_NO_MEMORY;
  kolo__v1__list_jobs_response__init(resp);
  pthread_rwlock_rdlock(&s->lock);
  resp->jobs = calloc(limit, sizeof *resp->jobs);
  if (resp->jobs == NULL) goto out;
  const char *after = req->page_token ? req->page_token : "";
  for (size_t i = 0; i < s->count; i++) {
    entry *e = s->entries[i];
    if (e->packed == NULL || strcmp(e->id, after) <= 0) continue;
    if (req->phase != KOLO__V1__PHASE__PHASE_UNSPECIFIED && e->status->phase != req->phase)
      continue;
    if (!labels_match(e->spec, req)) continue;
    if (resp->n_jobs == limit) {
      rc = kolo_codec_set_string(&resp->next_page_token, resp->jobs[limit - 1]->id);
      if (rc != KOLO_OK) goto out;
      break;
    }
    Kolo__V1__Job borrowed;
    borrow_job(e, &borrowed, NULL, 0);
    Kolo__V1__Job *copy = (Kolo__V1__Job *)kolo_codec_copy(&borrowed.base);
    if (copy == NULL) goto out;
    resp->jobs[resp->n_jobs++] = copy;
  }
  rc = KOLO_OK;
out:
  pthread_rwlock_unlock(&s->lock);
  if (rc != KOLO_OK) {
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
  }
  *out = resp;
  return KOLO_OK;
}

kolo_status kolo_server_store_job_sizes(kolo_server_store *s, kolo_server_job_size **out,
                                        size_t *n) {
  pthread_rwlock_rdlock(&s->lock);
  kolo_server_job_size *sizes = calloc(s->count + 1, sizeof *sizes);
  size_t k = 0;
  for (size_t i = 0; sizes && i < s->count; i++) {
    const entry *e = s->entries[i];
    if (e->status == NULL || e->spec == NULL) continue;
    sizes[k++] = (kolo_server_job_size){
        e->status->phase, (uint32_t)e->status->n_members,
        e->status->min_workers ? e->status->min_workers : e->spec->min_workers,
        e->status->max_workers ? e->status->max_workers : e->spec->max_workers};
  }
  pthread_rwlock_unlock(&s->lock);
  *out = sizes;
  *n = k;
  return sizes ? KOLO_OK : KOLO_ERR_NO_MEMORY;
}

void kolo_server_store_count_phases(kolo_server_store *s, uint64_t counts[7]) {
  memset(counts, 0, 7 * sizeof counts[0]);
  pthread_rwlock_rdlock(&s->lock);
  for (size_t i = 0; i < s->count; i++)
    if (s->entries[i]->status && (unsigned)s->entries[i]->status->phase < 7)
      counts[s->entries[i]->status->phase]++;
  pthread_rwlock_unlock(&s->lock);
}

/* ---- writes ---- */

/* Job ids the store writes are valid key segments (kolo_server_job_id_valid is stricter
 * than kolo_keys_name_valid), so these never fail for them; the status says if they do. */
static kolo_status job_key(char *out, size_t len, const char *id, const char *part) {
  return kolo_keys_job(id, part, out, len);
}

static kolo_status event_key(char *out, size_t len, const char *id, uint64_t seq) {
  return kolo_keys_event(id, (int64_t)seq, out, len);
}

kolo_status kolo_server_store_view_behind(kolo_server_store *s, const char *what, const char *id,
                                          int64_t revision, char *err, size_t err_len) {
  if (err && err_len)
    snprintf(err, err_len,
             "%s job %.63s, but this server's view of etcd has not reached revision %" PRId64
             " within %d ms; GetJob shows it once it has",
             what, id, revision, s->catch_up_ms);
  return KOLO_ERR_UNAVAILABLE;
}

/* A copy of id's spec as the view holds it (KOLO_ERR_NOT_FOUND if it has none). */
static kolo_status view_spec(kolo_server_store *s, const char *id, Kolo__V1__JobSpec **out) {
  kolo_status rc = KOLO_ERR_NOT_FOUND;
  pthread_rwlock_rdlock(&s->lock);
  long at = kolo_server_store_find_entry(s, id);
  if (at >= 0 && s->entries[at]->spec) {
    *out = (Kolo__V1__JobSpec *)kolo_codec_copy(&s->entries[at]->spec->base);
    rc = *out ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  }
  pthread_rwlock_unlock(&s->lock);
  return rc;
}

/* The stored spec of id read from kv itself (the view may not have caught up yet). */
static kolo_status read_spec(kolo_server_store *s, const char *id, Kolo__V1__JobSpec **out) {
  char key[160];
  kolo_server_kv_item *items = NULL;
  size_t n = 0;
  int64_t revision;
  KOLO_CHECK(job_key(key, sizeof key, id, "spec"));
  KOLO_CHECK(s->kv->ops->range(s->kv, key, &items, &n, &revision));
  kolo_status rc = KOLO_ERR_NOT_FOUND;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(items[i].key, key) != 0) continue;
    ProtobufCMessage *msg = NULL;
    rc = kolo_codec_parse(items[i].value, items[i].value_len, &kolo__v1__job_spec__descriptor, &msg,
                          NULL, 0);
    if (rc == KOLO_OK) *out = (Kolo__V1__JobSpec *)msg;
    break;
  }
  kolo_server_kv_items_free(items, n);
  if (rc == KOLO_OK) kolo_server_store_wait_revision(s, revision, s->catch_up_ms);
  return rc;
}

kolo_status kolo_server_store_submit(kolo_server_store *s, Kolo__V1__JobSpec *spec,
                                     Kolo__V1__Job **out, int *created, char *err, size_t err_len) {
  kolo_status rc;
  char id[KOLO_SERVER_ID_MAX + 1];
  char spec_key[160], status_key[160], event_key_text[160];
  char *spec_json = NULL, *status_json = NULL, *event_json = NULL;
  Kolo__V1__Job *job = NULL;
  *created = 0;
  kolo_server_job_normalize_spec(spec);
  if (spec->id && spec->id[0])
    snprintf(id, sizeof id, "%s", spec->id);
  else
    KOLO_CHECK(kolo_server_job_make_id(id, sizeof id));
  KOLO_CHECK_GOTO_RC(kolo_codec_set_string(&spec->id, id));
  KOLO_CHECK_GOTO_RC(kolo_server_job_create(spec, id, kolo_server_now_ms(), &job));
  spec_json = kolo_codec_dump(&job->spec->base, 0);
  status_json = kolo_codec_dump(&job->status->base, 0);
  event_json = kolo_codec_dump(&job->events[0]->base, 0);
  rc = KOLO_ERR_NO_MEMORY;
  if (!spec_json || !status_json || !event_json) goto out;
  if (job_key(spec_key, sizeof spec_key, id, "spec") != KOLO_OK ||
      job_key(status_key, sizeof status_key, id, "status") != KOLO_OK ||
      event_key(event_key_text, sizeof event_key_text, id, 1) != KOLO_OK) {
    rc = KOLO_ERR_INVALID_ARG;
    goto out;
  }
  kolo_server_kv_compare cmp = {spec_key, KOLO_SERVER_KV_CREATE, 0};
  kolo_server_kv_put puts[3] = {
      {spec_key, spec_json, 0}, {status_key, status_json, 0}, {event_key_text, event_json, 0}};
  int64_t revision = 0;
  rc = s->kv->ops->txn(s->kv, &cmp, 1, puts, 3, &revision);
  if (rc == KOLO_OK) {
    *created = 1;
    KOLO_LOGI(LOG, "job %s (%s) submitted at revision %" PRId64, id, spec->name, revision);
    if (kolo_server_store_wait_revision(s, revision, s->catch_up_ms) != KOLO_OK) {
      rc = kolo_server_store_view_behind(s, "submitted", id, revision, err, err_len);
      goto out;
    }
    rc = kolo_server_store_get(s, id, out);
    goto out;
  }
  if (rc != KOLO_ERR_CONFLICT) goto out;
  /* The id exists: the same spec is a retry and gets the job; another is a clash. The view
   * holds that spec once it has reached etcd's revision of the conflict; else (the revision
   * is a key the view never sees, or the view is stuck) the spec is read from etcd. */
  Kolo__V1__JobSpec *existing = NULL;
  rc = KOLO_ERR_NOT_FOUND;
  if (revision > 0 && kolo_server_store_wait_revision(s, revision, s->catch_up_ms) == KOLO_OK)
    rc = view_spec(s, id, &existing);
  if (rc == KOLO_ERR_NOT_FOUND) rc = read_spec(s, id, &existing);
  if (rc != KOLO_OK) goto out;
  kolo_server_job_normalize_spec(existing);
  int same = kolo_server_job_spec_equal(existing, job->spec);
  protobuf_c_message_free_unpacked(&existing->base, NULL);
  if (!same) {
    if (err && err_len) snprintf(err, err_len, "job %s already exists with a different spec", id);
    rc = KOLO_ERR_EXISTS;
    goto out;
  }
  rc = kolo_server_store_get(s, id, out);
out:
  free(spec_json);
  free(status_json);
  free(event_json);
  if (job) protobuf_c_message_free_unpacked(&job->base, NULL);
  return rc;
}

/* ---- subscriptions ---- */

kolo_status kolo_server_store_subscribe(kolo_server_store *s, const char *id,
                                        kolo_server_store_watch_fn fn, void *arg,
                                        uint64_t *handle) {
  subscriber *sub = calloc(1, sizeof *sub);
  if (sub == NULL) return KOLO_ERR_NO_MEMORY;
  snprintf(sub->id, sizeof sub->id, "%s", id);
  sub->fn = fn;
  sub->arg = arg;
  kolo_status rc = KOLO_ERR_NOT_FOUND;
  pthread_mutex_lock(&s->sub_lock);
  pthread_rwlock_rdlock(&s->lock);
  long at = kolo_server_store_find_entry(s, id);
  if (at >= 0 && s->entries[at]->packed) {
    entry *e = s->entries[at];
    sub->handle = s->next_handle++;
    sub->next = s->subs;
    s->subs = sub;
    *handle = sub->handle;
    fn(arg, e->packed, e->packed_len, e->status->phase);
    rc = KOLO_OK;
  }
  pthread_rwlock_unlock(&s->lock);
  pthread_mutex_unlock(&s->sub_lock);
  if (rc != KOLO_OK) free(sub);
  return rc;
}

void kolo_server_store_unsubscribe(kolo_server_store *s, uint64_t handle) {
  pthread_mutex_lock(&s->sub_lock);
  for (subscriber **p = &s->subs; *p; p = &(*p)->next) {
    if ((*p)->handle == handle) {
      subscriber *gone = *p;
      *p = gone->next;
      free(gone);
      break;
    }
  }
  pthread_mutex_unlock(&s->sub_lock);
}

kolo_server_kv *kolo_server_store_kv(kolo_server_store *s) {
  return s->kv;
}

void kolo_server_store_set_catch_up_ms(kolo_server_store *s, int ms) {
  s->catch_up_ms = ms > 0 ? ms : CATCH_UP_MS;
}

int kolo_server_store_catch_up_ms(const kolo_server_store *s) {
  return s->catch_up_ms;
}
