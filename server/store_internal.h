/* The store's private parts, shared by its files (store.c: the job view and its writes;
 * store_history.c: metrics history, rings, per-job gauges and cached list forms). Nothing
 * outside server/store*.c includes this. */
#ifndef KOLO_SERVER_STORE_INTERNAL_H
#define KOLO_SERVER_STORE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "server/job_model.h"
#include "server/sorted.h"
#include "server/store.h"

/* One pending intent of a job: its key's name under intents/, message and create revision;
 * applied: whether the view's status took it (an earlier cancel leaves a later one nothing). */
typedef struct pending_intent {
  char name[96];
  Kolo__V1__JobIntent *msg;
  int64_t rev;
  int applied;
} pending_intent;

typedef struct entry {
  char id[KOLO_SERVER_ID_MAX + 1];
  Kolo__V1__JobSpec *spec;
  Kolo__V1__JobStatus *stored; /* the status as etcd holds it (the scheduler's) */
  int64_t status_rev;
  /* the user's pending intents (jobs/<id>/intents/<name>), in create-revision order */
  pending_intent *intents;
  size_t n_intents, cap_intents;
  /* what the view shows: stored with the pending intents applied (coordination/job_status.h),
   * and the events they add; rebuilt with the cached forms */
  Kolo__V1__JobStatus *status;
  Kolo__V1__Event **intent_events;
  size_t n_intent_events;
  Kolo__V1__Event **events; /* stored, sorted by seq */
  size_t n_events, cap_events;
  uint8_t *packed; /* Job with events; NULL until spec and status are both known */
  size_t packed_len;
  char *json;
  char *summary; /* the Job without its events as JSON (what ListJobs shows) */
  int touched;   /* changed in the batch being applied: in the store's touched list */
  int live;      /* in the store's live list */
  /* metrics history (/kolo/v1/metrics/<id>/<step>), sorted by step */
  Kolo__V1__MetricPoint **points;
  int64_t *point_revs; /* mod revision of each point's key */
  size_t n_points, cap_points;
  /* ring records (/kolo/v1/jobs/<id>/ring/<epoch>), sorted by epoch */
  Kolo__V1__RingEpoch **rings;
  size_t n_rings, cap_rings;
  uint64_t job_batch;     /* batch that last changed spec, status or events */
  uint64_t summary_batch; /* batch that last changed spec or status */
  uint64_t history_batch; /* batch that last changed points or rings */
} entry;

typedef struct subscriber {
  uint64_t handle;
  char id[KOLO_SERVER_ID_MAX + 1];
  kolo_server_store_watch_fn fn;
  void *arg;
  struct subscriber *next;
} subscriber;

struct kolo_server_store {
  kolo_server_kv *kv;
  pthread_rwlock_t lock; /* entries, batch counters */
  entry **entries;       /* sorted by id */
  size_t count, cap;
  pthread_mutex_t rev_lock;
  pthread_cond_t rev_cond;
  int64_t revision;         /* newest revision applied to the view */
  int catch_up_ms;          /* how long a write waits for the view to show it */
  pthread_mutex_t sub_lock; /* subscribers; held while delivering */
  subscriber *subs;
  uint64_t next_handle;
  /* change counters: one batch per watch delivery */
  uint64_t batch;         /* the batch being applied / last applied */
  uint64_t list_batch;    /* last batch that changed a job's spec or status, or the set of jobs */
  uint64_t removed_batch; /* last batch that removed a job from the view (or reloaded it whole) */
  uint64_t workers_batch; /* last batch that touched /kolo/v1/{workers,drain,assign}/ */
  kolo_server_store_change_fn on_change; /* under sub_lock */
  void *on_change_arg;
  /* store_records.c: every key under /kolo/v1/ but the metrics history, as etcd has it */
  kolo_server_kv_item *records; /* sorted by key; under lock */
  size_t n_records, cap_records;
  uint64_t reloads; /* times the view was rebuilt whole (under lock) */
  /* store_live.c, under lock, each with room for cap entries: the entries whose stored status
   * is not ended (one with no status yet included), sorted by id, which the scheduler's live
   * read walks; the entries the batch being applied touched */
  entry **live, **touched;
  size_t n_live, n_touched;
  kolo_server_store_records_fn records_fn; /* under sub_lock */
  void *records_arg;
};

/* store.c */
/* An entry's job id, for kolo_server_sorted_find over arrays of entry pointers. */
const char *kolo_server_entry_id(const void *element);
long kolo_server_store_find_entry(const kolo_server_store *s, const char *id);
/* Waits until the view has applied revision (a write of ours), up to timeout_ms:
 * KOLO_ERR_TIMEOUT if it has not. */
kolo_status kolo_server_store_wait_revision(kolo_server_store *s, int64_t revision, int timeout_ms);
/* KOLO_ERR_UNAVAILABLE with err saying that the write (what: "cancelled", ...) of job id at
 * revision is in etcd but the view has not shown it within the catch-up time. */
kolo_status kolo_server_store_view_behind(kolo_server_store *s, const char *what, const char *id,
                                          int64_t revision, char *err, size_t err_len);
entry *kolo_server_store_entry_for(kolo_server_store *s, const char *id);

/* store_records.c (write lock held for apply/clear) */
int kolo_server_store_record_kept(const char *key);
kolo_status kolo_server_store_apply_record(kolo_server_store *s, const kolo_server_kv_item *item,
                                           int is_delete);
void kolo_server_store_records_clear(kolo_server_store *s);
void kolo_server_store_records_free(kolo_server_store *s);

/* store_live.c: the live and touched lists (write lock held). reserve: room for cap entries
 * (before entries grows to cap). live_update: puts e in the live list or takes it out as its
 * stored status says (after e was made or its status applied). touch: e changed in this batch.
 * take_touched: the batch's touched entries, sorted by id, are s->touched[0..returned), and
 * none is touched any more. forget: e leaves both (before it is freed). clear: both empty (the
 * view reloaded, before its entries are freed). */
kolo_status kolo_server_store_lists_reserve(kolo_server_store *s, size_t cap);
void kolo_server_store_lists_free(kolo_server_store *s);
void kolo_server_store_live_update(kolo_server_store *s, entry *e);
void kolo_server_store_touch(kolo_server_store *s, entry *e);
size_t kolo_server_store_take_touched(kolo_server_store *s);
void kolo_server_store_lists_forget(kolo_server_store *s, entry *e);
void kolo_server_store_lists_clear(kolo_server_store *s);

/* store_history.c: applying /kolo/v1/metrics/ and ring keys to an entry (write lock held). */
void kolo_server_store_apply_point(kolo_server_store *s, const char *key,
                                   const kolo_server_kv_item *item, int is_delete);
void kolo_server_store_apply_ring(entry *e, const kolo_server_kv_item *item, int is_delete);
void kolo_server_store_history_free(entry *e);

#endif
