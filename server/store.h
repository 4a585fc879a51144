/* The job store: jobs live in etcd (through kv.h) under /kolo/v1/jobs/<id>/{spec,status,
 * events/<n>}; every change is a txn with revision compares, and reads are served from an
 * in-memory view fed by a prefix watch on /kolo/v1/ (so a GET never touches etcd). Every
 * replica keeps its own view; any replica may submit/cancel/scale because the compares make
 * concurrent writers safe. The view also holds each job's metrics history
 * (/kolo/v1/metrics/<id>/<step>, written by the leader's recorder) and ring epochs. */
#ifndef KOLO_SERVER_STORE_H
#define KOLO_SERVER_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "coordination/keys.h" /* the key layout: KOLO_KEY_*_PREFIX, kolo_keys_* */
#include "kolo/status.h"
#include "kolo/v1/cluster.pb-c.h"
#include "kolo/v1/job.pb-c.h"
#include "server/demand.h"
#include "server/kv.h"

typedef struct kolo_server_store kolo_server_store;

/* Loads every job from kv and starts following it. kv stays owned by the caller. */
kolo_status kolo_server_store_create(kolo_server_kv *kv, kolo_server_store **out);
void kolo_server_store_destroy(kolo_server_store *store);

/* Stores a new job for spec (validated by the caller; normalized here). A repeated submit
 * of the same id and spec returns the existing job (*created = 0); another spec under that
 * id is KOLO_ERR_EXISTS. *out: a copy to free with protobuf_c_message_free_unpacked. */
kolo_status kolo_server_store_submit(kolo_server_store *store, Kolo__V1__JobSpec *spec,
                                     Kolo__V1__Job **out, int *created, char *err, size_t err_len);

/* A copy of job id with its events (KOLO_ERR_NOT_FOUND if unknown). */
kolo_status kolo_server_store_get(kolo_server_store *store, const char *id, Kolo__V1__Job **out);
/* The same job as packed protobuf bytes or as JSON text (malloc'd copies of cached forms). */
kolo_status kolo_server_store_get_packed(kolo_server_store *store, const char *id, uint8_t **buf,
                                         size_t *len);
kolo_status kolo_server_store_get_json(kolo_server_store *store, const char *id, char **json);

/* Jobs ordered by id, filtered by phase (0 = any) and labels (all must match), after
 * page_token, at most page_size (0 = 100, max 1000); events left out. */
kolo_status kolo_server_store_list(kolo_server_store *store, const Kolo__V1__ListJobsRequest *req,
                                   Kolo__V1__ListJobsResponse **out);

/* The user's intents (store_intent.c): each stores a kolo.v1.JobIntent at
 * /kolo/v1/jobs/<id>/intents/<name> for the scheduler to apply (kolo-server never writes the
 * status after submit) and answers, once the view shows it, the job as the view shows it: the
 * status with the pending intents applied, as the scheduler will write it.
 * Cancel: CANCELLED with a CANCELLED event; KOLO_ERR_STATE if the job already ended (also when
 * it had ended in etcd before the intent got there: the intent is then deleted). */
kolo_status kolo_server_store_cancel(kolo_server_store *store, const char *id, const char *reason,
                                     Kolo__V1__Job **out, char *err, size_t err_len);
/* Scale: new worker bounds with a SCALED event; KOLO_ERR_STATE as for a cancel. */
kolo_status kolo_server_store_scale(kolo_server_store *store, const char *id, uint32_t min_workers,
                                    uint32_t max_workers, Kolo__V1__Job **out, char *err,
                                    size_t err_len);

/* Called (on the store's watch thread, without store locks held) with the packed job each
 * time it changes; must not block. */
typedef void (*kolo_server_store_watch_fn)(void *arg, const uint8_t *packed, size_t len,
                                           Kolo__V1__Phase phase);
/* Delivers the current version at once (from this thread), then every change. */
kolo_status kolo_server_store_subscribe(kolo_server_store *store, const char *id,
                                        kolo_server_store_watch_fn fn, void *arg, uint64_t *handle);
/* After it returns, fn is not running and will not be called again for handle. */
void kolo_server_store_unsubscribe(kolo_server_store *store, uint64_t handle);

/* Number of jobs in each phase (index = Kolo__V1__Phase, 7 slots). */
void kolo_server_store_count_phases(kolo_server_store *store, uint64_t counts[7]);

/* Phase, members and bounds of every job in the view (*out malloc'd, *n entries). */
kolo_status kolo_server_store_job_sizes(kolo_server_store *store, kolo_server_job_size **out,
                                        size_t *n);

/* The demand for workers now (demand.h) from the view's jobs and the registered workers. */
kolo_status kolo_server_store_get_demand(kolo_server_store *store, Kolo__V1__Demand **out);

/* ---- workers, drains, demand (workers.c) ----
 * Served from the view's records (kolo_server_store_read_records): worker records, drain
 * marks and assignments decoded by their owners (coordination/membership.h, drain.h,
 * assignment.h); no etcd range per call. */

/* Workers registered under /kolo/v1/workers/ as the view holds them (drained ones flagged). */
kolo_status kolo_server_store_list_workers(kolo_server_store *store,
                                           Kolo__V1__ListWorkersResponse **out);
/* Writes /kolo/v1/drain/<id> under the lease of the worker's current registration, so the
 * mark ends with it (coordination/drain.h); KOLO_ERR_NOT_FOUND if no such worker is
 * registered. *out: the worker as ListWorkers shows it once the view has applied the write
 * (read-your-writes: a ListWorkers after it shows the drain). KOLO_ERR_UNAVAILABLE (err says
 * so) if the view does not get there within the catch-up time: the mark may be written. */
kolo_status kolo_server_store_drain_worker(kolo_server_store *store, const char *id,
                                           Kolo__V1__Worker **out, char *err, size_t err_len);
/* Deletes /kolo/v1/drain/<id> (nothing to do if absent); KOLO_ERR_NOT_FOUND if no such
 * worker is registered (a mark it left is deleted all the same). Waits for the view like
 * kolo_server_store_drain_worker. */
kolo_status kolo_server_store_undrain_worker(kolo_server_store *store, const char *id,
                                             Kolo__V1__Worker **out, char *err, size_t err_len);

/* How long a write (submit, cancel, scale, drain, undrain) waits for the view to apply it
 * before it answers KOLO_ERR_UNAVAILABLE (default 5000 ms; <= 0 = the default). Set it
 * before the store serves. */
void kolo_server_store_set_catch_up_ms(kolo_server_store *store, int ms);
int kolo_server_store_catch_up_ms(const kolo_server_store *store);

/* ---- metrics history, rings, gauges (store_history.c) ---- */

/* "/kolo/v1/metrics/<id>/<step, 20 digits>" (key order = step order). */
void kolo_server_store_metrics_key(char *out, size_t len, const char *id, uint64_t step);

/* Job id's history: points with step > since_step, and every ring epoch. KOLO_ERR_NOT_FOUND
 * for an unknown job. */
kolo_status kolo_server_store_metrics(kolo_server_store *store, const char *id, uint64_t since_step,
                                      Kolo__V1__JobMetrics **out);

/* One txn's worth of history for one job, planned by history.h against the view. */
typedef struct kolo_server_history_write {
  char id[64];
  Kolo__V1__MetricPoint point; /* put at its step's key */
  int64_t point_rev;           /* that key's mod revision now (0 = absent: compare CREATE == 0) */
  int has_delete;              /* also delete the point at delete_step ... */
  uint64_t delete_step;
  int64_t delete_rev; /* ... if its key is still at this mod revision */
} kolo_server_history_write;

/* Plans the next point of every job whose status moved on, at most max_writes of them
 * (*out malloc'd, *n set; nothing to do = 0). max_points bounds each series. */
kolo_status kolo_server_store_history_writes(kolo_server_store *store, size_t max_points,
                                             size_t max_writes, kolo_server_history_write **out,
                                             size_t *n);

/* What /metrics shows per job. */
typedef struct kolo_server_job_gauge {
  char id[64];
  Kolo__V1__Phase phase;
  uint64_t step, total_steps, epoch;
  double loss, accuracy, samples_per_sec;
  uint32_t ring_size, reconfigurations, false_losses;
  uint64_t rounds, bytes_sent; /* the training mode's figures (JobStatus.progress) */
  double staleness, blocked_seconds;
  char mode[16]; /* the spec's mode ("SYNC" when unspecified) */
} kolo_server_job_gauge;

/* At most max jobs for /metrics (bounded label cardinality): jobs not yet finished first
 * (newest first), then finished ones (latest finished first). Returns how many were written;
 * *left_out = the jobs that did not fit. */
size_t kolo_server_store_job_gauges(kolo_server_store *store, kolo_server_job_gauge *out,
                                    size_t max, size_t *left_out);

/* ---- change marks (for server-sent events) ---- */

/* Called on the watch thread after each batch of changes was applied (the view's locks
 * released); must not block nor call the store. One at a time: setting it replaces the
 * previous one (NULL = none), and once set_change_fn returns the old one is not running. */
typedef void (*kolo_server_store_change_fn)(void *arg);
void kolo_server_store_set_change_fn(kolo_server_store *store, kolo_server_store_change_fn fn,
                                     void *arg);

/* ---- the records as etcd holds them (what kolo-server's scheduler reads) ----
 * The view also keeps every key under /kolo/v1/ except the metrics history
 * (/kolo/v1/metrics/) as raw key/value/revisions/lease, from the same watch. */

/* Called on the watch thread after each applied batch that touched a key outside
 * /kolo/v1/metrics/ or reloaded the view whole, without store locks held; must not block.
 * Replaces the previous one (NULL = none); once it returns the old one is not running. */
typedef void (*kolo_server_store_records_fn)(void *arg);
void kolo_server_store_set_records_fn(kolo_server_store *store, kolo_server_store_records_fn fn,
                                      void *arg);

/* Copies the records under each of prefixes[0..n) into out[i] (sorted by key, as an etcd
 * prefix range returns them; free each with kolo_etcd_range_result_free), all from one
 * state of the view, once the view has applied min_revision (0: at once). KOLO_ERR_TIMEOUT
 * (out empty) when it has not within timeout_ms. *revision (optional): a revision the copy
 * is at least at; *reloads (optional, also on a timeout): how many times the view was
 * rebuilt whole (a compaction or a new etcd cluster behind the watch). */
kolo_status kolo_server_store_read_records(kolo_server_store *store, const char *const *prefixes,
                                           size_t n, int64_t min_revision, int timeout_ms,
                                           kolo_etcd_range_result *out, int64_t *revision,
                                           uint64_t *reloads);

/* The same, except that under KOLO_KEY_JOBS_PREFIX only the keys of jobs the view does not
 * hold as ended (SUCCEEDED, FAILED, CANCELLED) are copied: what the scheduler reads for a pass
 * (nothing of an ended job is its to decide; an assignment to a job it does not see is
 * stale, as one to an ended job), so a pass's cost does not grow with the jobs that ended:
 * the read walks the live jobs only, a list the watch keeps (server/store_live.c), in id order.
 * *waited_us (optional): how long it waited for min_revision. */
kolo_status kolo_server_store_read_live_records(kolo_server_store *store,
                                                const char *const *prefixes, size_t n,
                                                int64_t min_revision, int timeout_ms,
                                                kolo_etcd_range_result *out, int64_t *revision,
                                                uint64_t *reloads, int64_t *waited_us);

/* Counters that grow whenever what they cover changes (compare with what you saw last). */
typedef struct kolo_server_store_marks {
  uint64_t list;    /* any job's spec or status, or the set of jobs */
  uint64_t workers; /* worker registrations, drains, assignments */
  uint64_t job;     /* job id (if given): its spec, status or events; 0 = unknown job */
  uint64_t history; /* job id: its metrics points or rings */
} kolo_server_store_marks;
void kolo_server_store_get_marks(kolo_server_store *store, const char *id,
                                 kolo_server_store_marks *out);

/* The jobs list for a stream, from each job's cached JSON (no encoding per reader): ListJobs'
 * shape (events left out, the first 1000 by id) with every job when since is 0 or a job left the
 * view after since (*full = 1); otherwise only the jobs whose spec or status changed after since
 * (*full = 0; the whole list instead if more than 1000 did). *mark: the since of the next call.
 * *json malloc'd. */
kolo_status kolo_server_store_jobs_json(kolo_server_store *store, uint64_t since, char **json,
                                        int *full, uint64_t *mark);

/* The kv the store writes through (workers.c writes drain marks with it). */
kolo_server_kv *kolo_server_store_kv(kolo_server_store *store);

/* Revision the view has caught up with. */
int64_t kolo_server_store_revision(kolo_server_store *store);

#endif
