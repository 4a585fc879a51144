/* kolo's etcd key layout, in one place (see docs/COORDINATION.md). Every key
 * kolo writes is built by these helpers so that the layout cannot drift between
 * the server, the worker and the tests. */
#ifndef KOLO_COORD_KEYS_H
#define KOLO_COORD_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

#define KOLO_KEY_ROOT "/kolo/v1/"
#define KOLO_KEY_LEADER_PREFIX "/kolo/v1/leader/"   /* + <lease id, hex> */
#define KOLO_KEY_WORKERS_PREFIX "/kolo/v1/workers/" /* + <worker id> */
#define KOLO_KEY_JOBS_PREFIX                                                               \
  "/kolo/v1/jobs/" /* + <job id>/{spec,status,events/,ring/,reports/,intents/,intent_head} \
                    */
#define KOLO_KEY_ASSIGN_PREFIX "/kolo/v1/assign/"   /* + <worker id> */
#define KOLO_KEY_DRAIN_PREFIX "/kolo/v1/drain/"     /* + <worker id> (coordination/drain.h) */
#define KOLO_KEY_METRICS_PREFIX "/kolo/v1/metrics/" /* + <job id>/<step> (server/recorder.c) */
/* Job blobs (kolo.v1 PutJobBlob, server/blob.h): "/kolo/blobs/meta/<job>" (JSON: size,
 * sha256, received, complete, created_unix_ms) and "/kolo/blobs/data/<job>/<chunk>" (raw
 * bytes, KOLO_BLOB_CHUNK_BYTES each, the chunk number zero-padded to 8 digits). Outside
 * /kolo/v1/ on purpose: every kolo-server replica watches /kolo/v1/ and keeps it in memory. */
#define KOLO_KEY_BLOBS_META_PREFIX "/kolo/blobs/meta/"
#define KOLO_KEY_BLOBS_DATA_PREFIX "/kolo/blobs/data/"
/* 256 KiB: a chunk is 342 KiB in base64 through etcd's JSON gateway, far under its 1.5 MiB
 * request limit. */
#define KOLO_BLOB_CHUNK_BYTES (256u * 1024u)
/* read (never written) by health probes: found or not found both mean etcd answers */
#define KOLO_KEY_HEALTH "/kolo/v1/health"

/* Whether name can be one path segment of a key: 1..128 characters of
 * [A-Za-z0-9._-], not "." or "..". Worker and job ids must be. */
int kolo_keys_name_valid(const char *name);

/* "/kolo/v1/workers/<id>". KOLO_ERR_INVALID_ARG for a bad id, KOLO_ERR_TOO_LARGE
 * when buf is too small. */
kolo_status kolo_keys_worker(const char *worker_id, char *buf, size_t size);

/* "/kolo/v1/assign/<id>". */
kolo_status kolo_keys_assign(const char *worker_id, char *buf, size_t size);

/* "/kolo/v1/drain/<id>". */
kolo_status kolo_keys_drain(const char *worker_id, char *buf, size_t size);

/* The leaves of a user's intents (kolo-server writes them, the scheduler acts on them and
 * deletes them: coordination/job_status.h), each a kolo.v1.JobIntent: "intents/<unique>" one
 * per accepted CancelJob/ScaleJob (applied in create-revision order), and "intent_head" the
 * newest one again (the scheduler's writes compare its mod revision). */
#define KOLO_KEY_JOB_INTENTS "intents/"
#define KOLO_KEY_JOB_INTENT_HEAD "intent_head"

/* "/kolo/v1/jobs/<job>/<leaf>" for leaf "spec", "status", "events/", "ring/", "reports/",
 * KOLO_KEY_JOB_INTENTS (+ its name), KOLO_KEY_JOB_INTENT_HEAD. */
kolo_status kolo_keys_job(const char *job_id, const char *leaf, char *buf, size_t size);

/* "/kolo/blobs/meta/<job>" and "/kolo/blobs/data/<job>/<chunk, 8 digits>". */
kolo_status kolo_keys_blob_meta(const char *job_id, char *buf, size_t size);
kolo_status kolo_keys_blob_chunk(const char *job_id, uint64_t chunk, char *buf, size_t size);

/* "/kolo/v1/jobs/<job>/ring/<epoch>", the epoch zero-padded to 20 digits so that
 * key order is epoch order (the newest ring is the last key under ring/). */
kolo_status kolo_keys_ring(const char *job_id, int64_t epoch, char *buf, size_t size);

/* "/kolo/v1/jobs/<job>/events/<n>", n zero-padded to 20 digits. Until this helper was
 * used everywhere the server and the scheduler wrote 10 digits, so an etcd kept from
 * then holds both widths, and "events/00000000000000000011" sorts BEFORE
 * "events/0000000010": readers take the number from the key (kolo_keys_event_number)
 * or the record's "seq", never the order of the keys. */
kolo_status kolo_keys_event(const char *job_id, int64_t n, char *buf, size_t size);

/* The event number of an event key's last segment (what follows "events/"): 1 to 20
 * decimal digits, nothing else. 0 if it is not one. */
int kolo_keys_event_number(const char *segment, uint64_t *n);

/* A job's event log is bounded (#30): it keeps its first event (SUBMITTED) and its last
 * KOLO_EVENTS_KEPT. Whoever writes event seq deletes event kolo_keys_event_evicted(seq) in the
 * same txn (0: none), and the server's view drops the same ones, so etcd, memory and GetJob
 * stay bounded however often a job is scaled or re-formed. */
#define KOLO_EVENTS_KEPT 100
uint64_t kolo_keys_event_evicted(uint64_t seq);

/* "/kolo/v1/jobs/<job>/reports/<worker>": what worker's agent reports about the job. */
kolo_status kolo_keys_report(const char *job_id, const char *worker_id, char *buf, size_t size);

/* "/kolo/v1/metrics/<job>/<step>", step zero-padded to 20 digits (a job's metrics
 * history, in step order). */
kolo_status kolo_keys_metrics(const char *job_id, uint64_t step, char *buf, size_t size);

#endif
