/* kolo's etcd v3 client, spoken over etcd's HTTP/JSON gateway (etcd 3.4) with
 * libcurl + jansson: KV put/get/range/delete, txn, leases with a keep-alive
 * thread, and watches that resume after a broken connection and resync after a
 * compaction. It is the only code in kolo that talks to etcd. */
#ifndef KOLO_COORD_ETCD_H
#define KOLO_COORD_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors -------------------------------------------------------------------
 * Every function returns a kolo_status. When it is not KOLO_OK, the calling
 * thread's last coordination error message says what happened (which request,
 * which endpoint, etcd's own message). The text is thread-local and stays valid
 * until the next failing coordination call on the same thread. */
const char *kolo_etcd_last_error(void);

/* ---- bytes --------------------------------------------------------------------
 * Keys and values are byte strings; base64 is handled inside. */
typedef struct kolo_etcd_bytes {
  const void *data;
  size_t len;
} kolo_etcd_bytes;

/* A kolo_etcd_bytes view of a NUL-terminated string (without the NUL). */
kolo_etcd_bytes kolo_etcd_str(const char *text);

/* ---- client -------------------------------------------------------------------- */
typedef struct kolo_etcd kolo_etcd;

typedef struct kolo_etcd_config {
  /* Client URLs, e.g. "http://127.0.0.1:2379" or "https://etcd-0:2379"; at least one.
   * Requests go to the last endpoint that answered and fail over to the others
   * when it cannot be reached. */
  const char *const *endpoints;
  size_t endpoint_count;
  int request_timeout_ms; /* deadline of each unary request; 0 = 5000 */
  int connect_timeout_ms; /* TCP/TLS connect limit per endpoint; 0 = 1000 */
  int watch_idle_ms;      /* a watch stream silent this long is reconnected; 0 = 15000 */
  size_t max_value_bytes; /* larger values are refused before sending; 0 = 1 MiB */
  const char *ca_file;    /* TLS: CA bundle to verify etcd (NULL = system default) */
  const char *cert_file;  /* TLS client certificate (PEM), or NULL */
  const char *key_file;   /* TLS client key (PEM), or NULL */
  const char *user;       /* etcd auth user, or NULL for no auth */
  const char *password;
} kolo_etcd_config;

/* Creates a client. Does no I/O: an unreachable etcd shows up on the first call.
 * With a user set, the first request authenticates and later requests refresh the
 * token when etcd reports it expired. The client is thread-safe. */
kolo_status kolo_etcd_create(const kolo_etcd_config *config, kolo_etcd **out);

/* Frees the client. Stop every watch and keep-alive started on it first. */
void kolo_etcd_destroy(kolo_etcd *client);

/* The request deadline the client was configured with, in milliseconds. */
int kolo_etcd_request_timeout_ms(const kolo_etcd *client);

/* ---- one client, several users ----------------------------------------------------
 * A process talks to etcd through one client: one pool of connections, one auth
 * token, one choice of the endpoint that answers. Users of it that need other
 * deadlines (an election's short ones, a store's) each get a handle with
 * kolo_etcd_share: the same client with its own timeouts and counters. A handle is a
 * kolo_etcd like any other (any call takes it; it is thread-safe) and is freed with
 * kolo_etcd_destroy; the connection goes with the last handle. */

/* A new handle on client's connection; tuning (NULL = the defaults) gives only the
 * timeouts and limits (request_timeout_ms, connect_timeout_ms, watch_idle_ms,
 * max_value_bytes), its other fields are ignored. No I/O. */
kolo_status kolo_etcd_share(kolo_etcd *client, const kolo_etcd_config *tuning, kolo_etcd **out);

/* What a request to etcd was, for the counters. */
typedef enum kolo_etcd_request_kind {
  KOLO_ETCD_REQ_RANGE = 0,
  KOLO_ETCD_REQ_TXN,
  KOLO_ETCD_REQ_PUT,
  KOLO_ETCD_REQ_DELETE,
  KOLO_ETCD_REQ_LEASE, /* grant, revoke, keep-alive */
  KOLO_ETCD_REQ_AUTH,
  KOLO_ETCD_REQ_OTHER, /* compaction, ... */
  KOLO_ETCD_REQUEST_KINDS
} kolo_etcd_request_kind;

/* "range", "txn", "put", "delete", "lease", "auth", "other". */
const char *kolo_etcd_request_kind_name(kolo_etcd_request_kind kind);

typedef struct kolo_etcd_stats {
  uint64_t requests[KOLO_ETCD_REQUEST_KINDS]; /* unary requests sent (each endpoint tried) */
  uint64_t watches_started;                   /* kolo_etcd_watch_start calls that succeeded */
  int watches_running;                        /* watches not yet stopped */
  int handles;                                /* live handles of the client */
} kolo_etcd_stats;

/* The counters of this handle (whole_client = 0) or of every handle of its client
 * together (whole_client = 1). */
void kolo_etcd_stats_get(const kolo_etcd *client, int whole_client, kolo_etcd_stats *out);

/* The highest store revision of a write (put, delete, txn whose compares held) that
 * succeeded through this handle; 0 before any. A reader of a watch-fed view waits
 * for the view to reach it to read its own writes. */
int64_t kolo_etcd_written_revision(const kolo_etcd *client);

/* ---- key-values ------------------------------------------------------------------ */
typedef struct kolo_etcd_kv {
  unsigned char *key; /* NUL-terminated for convenience; key_len excludes the NUL */
  size_t key_len;
  unsigned char *value; /* NUL-terminated for convenience; never NULL in a result */
  size_t value_len;
  int64_t create_revision;
  int64_t mod_revision;
  int64_t version;
  int64_t lease;
} kolo_etcd_kv;

/* Frees the key and value of kv (not kv itself) and zeroes it. */
void kolo_etcd_kv_clear(kolo_etcd_kv *kv);

/* Writes key = value, attached to lease (0 = none). When prev is not NULL and the
 * key existed, *prev receives the previous key-value (prev->key is NULL if it did
 * not). *revision (optional) gets the revision of the write.
 * Blocks for at most the request deadline. KOLO_ERR_TOO_LARGE for an oversize value. */
kolo_status kolo_etcd_put(kolo_etcd *client, kolo_etcd_bytes key, kolo_etcd_bytes value,
                          int64_t lease, kolo_etcd_kv *prev, int64_t *revision);

/* Reads one key into *out (free with kolo_etcd_kv_clear). KOLO_ERR_NOT_FOUND when the
 * key does not exist. *revision (optional) gets the store revision of the read.
 * Blocks for at most the request deadline. */
kolo_status kolo_etcd_get(kolo_etcd *client, kolo_etcd_bytes key, kolo_etcd_kv *out,
                          int64_t *revision);

typedef struct kolo_etcd_range_result {
  kolo_etcd_kv *kvs;
  size_t count;
  int more;         /* more keys in the range than returned (limit reached) */
  int64_t total;    /* keys in the range at that revision */
  int64_t revision; /* store revision the read was served at */
} kolo_etcd_range_result;

void kolo_etcd_range_result_free(kolo_etcd_range_result *result);

typedef enum kolo_etcd_sort {
  KOLO_ETCD_SORT_KEY = 0,     /* etcd's default: ascending by key */
  KOLO_ETCD_SORT_CREATE_ASC,  /* oldest create revision first */
  KOLO_ETCD_SORT_CREATE_DESC, /* newest create revision first */
} kolo_etcd_sort;

typedef struct kolo_etcd_range_opts {
  kolo_etcd_bytes key;
  int prefix;       /* read every key starting with key */
  int64_t limit;    /* at most this many keys, 0 = no limit */
  int64_t revision; /* read at this revision, 0 = newest */
  int keys_only;    /* values come back empty */
  kolo_etcd_sort sort;
  int64_t max_create_revision; /* only keys created at or below it; 0 = no bound */
} kolo_etcd_range_opts;

/* One range request (one page when limit is set). Blocks for at most the deadline. */
kolo_status kolo_etcd_range(kolo_etcd *client, const kolo_etcd_range_opts *opts,
                            kolo_etcd_range_result *out);

/* Reads every key under prefix, page_size keys per request (0 = 500), all pages at
 * the revision of the first so the result is one consistent snapshot; the next page
 * continues after the last key returned. Each page has its own deadline. */
kolo_status kolo_etcd_range_prefix(kolo_etcd *client, kolo_etcd_bytes prefix, int64_t page_size,
                                   kolo_etcd_range_result *out);

/* Deletes key, or every key under it when prefix is set. *deleted and *revision are
 * optional. Deleting nothing is not an error (*deleted = 0). Blocks for at most the
 * request deadline. */
kolo_status kolo_etcd_delete(kolo_etcd *client, kolo_etcd_bytes key, int prefix, int64_t *deleted,
                             int64_t *revision);

/* Compacts the history up to revision (physical compaction); watches starting
 * before it get a resync. Blocks for at most the request deadline. */
kolo_status kolo_etcd_compact(kolo_etcd *client, int64_t revision);

/* ---- transactions ------------------------------------------------------------------ */
typedef enum kolo_etcd_cmp_target {
  KOLO_ETCD_CMP_VERSION,
  KOLO_ETCD_CMP_CREATE, /* create revision; 0 = the key does not exist */
  KOLO_ETCD_CMP_MOD,
  KOLO_ETCD_CMP_VALUE,
  KOLO_ETCD_CMP_LEASE,
} kolo_etcd_cmp_target;

typedef enum kolo_etcd_cmp_result {
  KOLO_ETCD_EQUAL,
  KOLO_ETCD_NOT_EQUAL,
  KOLO_ETCD_GREATER,
  KOLO_ETCD_LESS,
} kolo_etcd_cmp_result;

typedef struct kolo_etcd_compare {
  kolo_etcd_cmp_target target;
  kolo_etcd_cmp_result result;
  kolo_etcd_bytes key;
  int64_t number;        /* VERSION, CREATE, MOD, LEASE */
  kolo_etcd_bytes value; /* VALUE */
} kolo_etcd_compare;

typedef enum kolo_etcd_op_kind {
  KOLO_ETCD_OP_PUT,
  KOLO_ETCD_OP_DELETE,
  KOLO_ETCD_OP_RANGE,
} kolo_etcd_op_kind;

typedef struct kolo_etcd_op {
  kolo_etcd_op_kind kind;
  kolo_etcd_bytes key;
  kolo_etcd_bytes value; /* PUT */
  int64_t lease;         /* PUT */
  int prefix;            /* DELETE, RANGE */
  int prev_kv;           /* PUT, DELETE: return the previous value */
} kolo_etcd_op;

typedef struct kolo_etcd_txn {
  const kolo_etcd_compare *compares;
  size_t compare_count;
  const kolo_etcd_op *success;
  size_t success_count;
  const kolo_etcd_op *failure;
  size_t failure_count;
} kolo_etcd_txn;

typedef struct kolo_etcd_op_response {
  kolo_etcd_op_kind kind;
  int64_t revision;
  kolo_etcd_range_result range; /* RANGE: the keys; PUT/DELETE with prev_kv: previous kvs */
  int64_t deleted;              /* DELETE */
} kolo_etcd_op_response;

typedef struct kolo_etcd_txn_result {
  int succeeded;                    /* all compares held and the success ops ran */
  int64_t revision;                 /* store revision after the txn */
  kolo_etcd_op_response *responses; /* one per op of the branch that ran */
  size_t count;
} kolo_etcd_txn_result;

void kolo_etcd_txn_result_free(kolo_etcd_txn_result *result);

/* Runs a transaction. KOLO_OK means etcd executed it; result->succeeded says which
 * branch ran (a failed compare is not an error here). Blocks for at most the deadline. */
kolo_status kolo_etcd_txn_run(kolo_etcd *client, const kolo_etcd_txn *txn,
                              kolo_etcd_txn_result *result);

/* Creates key = value under lease only if the key does not exist (compare CREATE == 0).
 * KOLO_ERR_EXISTS when it does; *existing (optional) then receives the current
 * key-value. *revision (optional) gets the create revision on success.
 * Blocks for at most the request deadline. */
kolo_status kolo_etcd_create_key(kolo_etcd *client, kolo_etcd_bytes key, kolo_etcd_bytes value,
                                 int64_t lease, kolo_etcd_kv *existing, int64_t *revision);

/* ---- leases -------------------------------------------------------------------------- */

/* Grants a lease of ttl_s seconds (etcd may grant more; *granted_ttl_s optional).
 * Blocks for at most the request deadline. */
kolo_status kolo_etcd_lease_grant(kolo_etcd *client, int64_t ttl_s, int64_t *lease_id,
                                  int64_t *granted_ttl_s);

/* Revokes a lease; every key attached to it is deleted. KOLO_ERR_NOT_FOUND if the
 * lease no longer exists. Blocks for at most the request deadline. */
kolo_status kolo_etcd_lease_revoke(kolo_etcd *client, int64_t lease_id);

/* Renews a lease once; *ttl_s (optional) gets the renewed TTL. KOLO_ERR_LEASE_LOST
 * when etcd no longer knows the lease. Blocks for at most the request deadline. */
kolo_status kolo_etcd_lease_keepalive_once(kolo_etcd *client, int64_t lease_id, int64_t *ttl_s);

/* Called once, on the keep-alive thread, when the lease is lost (see
 * kolo_etcd_keepalive_mode). status is KOLO_ERR_LEASE_LOST; message says why.
 * Must not stop its own keep-alive. */
typedef void (*kolo_etcd_lease_lost_fn)(int64_t lease_id, kolo_status status, const char *message,
                                        void *user);

typedef struct kolo_etcd_keepalive kolo_etcd_keepalive;

/* When a keep-alive counts its lease lost. */
typedef enum kolo_etcd_keepalive_mode {
  /* etcd says the lease is gone, or no renewal was acknowledged for a whole TTL
   * (etcd may have expired it meanwhile): for a leader, which must step down
   * before another candidate can take over. */
  KOLO_ETCD_KEEPALIVE_STRICT = 0,
  /* Only when etcd answers that the lease is gone. While etcd cannot be reached
   * the keep-alive keeps renewing (every 200 ms-1 s), so a short etcd outage or
   * restart (which keeps leases) loses nothing; once etcd answers, its verdict
   * counts. For a worker, whose work does not need etcd. */
  KOLO_ETCD_KEEPALIVE_PATIENT = 1,
} kolo_etcd_keepalive_mode;

/* Starts a thread that renews lease_id every ttl_s/3 seconds (at least every
 * 500 ms apart) and calls lost (optional) once if the lease is lost; the thread
 * then ends. Does no I/O itself. STRICT mode. */
kolo_status kolo_etcd_keepalive_start(kolo_etcd *client, int64_t lease_id, int64_t ttl_s,
                                      kolo_etcd_lease_lost_fn lost, void *user,
                                      kolo_etcd_keepalive **out);

/* The same with an explicit mode. */
kolo_status kolo_etcd_keepalive_start_mode(kolo_etcd *client, int64_t lease_id, int64_t ttl_s,
                                           kolo_etcd_keepalive_mode mode,
                                           kolo_etcd_lease_lost_fn lost, void *user,
                                           kolo_etcd_keepalive **out);

/* Whether the keep-alive still holds its lease; turns false once the lost
 * callback (if any) has returned. */
int kolo_etcd_keepalive_alive(const kolo_etcd_keepalive *keepalive);

/* When etcd last acknowledged a renewal (CLOCK_MONOTONIC ms; the start
 * of the keep-alive before the first). */
int64_t kolo_etcd_keepalive_renewed_ms(const kolo_etcd_keepalive *keepalive);

/* Stops the thread (promptly: an in-flight renewal is cancelled) and frees it.
 * Does not revoke the lease. NULL is ignored. */
void kolo_etcd_keepalive_stop(kolo_etcd_keepalive *keepalive);

/* ---- watches ---------------------------------------------------------------------------- */
typedef enum kolo_etcd_event_type {
  KOLO_ETCD_EVENT_PUT,
  KOLO_ETCD_EVENT_DELETE,
} kolo_etcd_event_type;

typedef struct kolo_etcd_event {
  kolo_etcd_event_type type;
  kolo_etcd_kv kv;      /* for DELETE: key and mod_revision (the delete revision) */
  kolo_etcd_kv prev_kv; /* prev_kv.key is NULL when etcd sent none */
} kolo_etcd_event;

typedef enum kolo_etcd_watch_kind {
  KOLO_ETCD_WATCH_EVENTS, /* events, in revision order, none lost or repeated */
  KOLO_ETCD_WATCH_RESYNC, /* history was compacted (or etcd is a new cluster, its data
                             wiped or restored): kvs is the whole current state */
} kolo_etcd_watch_kind;

typedef struct kolo_etcd_watch_update {
  kolo_etcd_watch_kind kind;
  int64_t revision; /* EVENTS: the revision of the last event; RESYNC: the snapshot's */
  const kolo_etcd_event *events;
  size_t event_count;
  const kolo_etcd_kv *kvs; /* RESYNC only */
  size_t kv_count;
  int64_t compact_revision; /* RESYNC only: the revision etcd compacted to; 0 when the
                               cluster changed */
} kolo_etcd_watch_update;

/* Called on the watch's own thread, one update at a time, in order. The update
 * and everything it points to live only for the call. A slow callback holds the
 * stream back (etcd buffers); it must not stop its own watch. */
typedef void (*kolo_etcd_watch_fn)(const kolo_etcd_watch_update *update, void *user);

typedef struct kolo_etcd_watch_opts {
  kolo_etcd_bytes key;
  int prefix;             /* watch every key starting with key */
  int64_t start_revision; /* first revision to deliver; 0 = changes after now */
  int prev_kv;            /* include the previous key-value in events */
} kolo_etcd_watch_opts;

typedef struct kolo_etcd_watch kolo_etcd_watch;

/* Starts watching on a thread of its own. The thread reconnects after a broken
 * stream (rotating endpoints, backing off up to 1 s) and resumes from the last
 * delivered revision + 1; a stream that stays silent for watch_idle_ms is treated
 * as broken (progress notifications keep a healthy one alive). Does no I/O itself. */
kolo_status kolo_etcd_watch_start(kolo_etcd *client, const kolo_etcd_watch_opts *opts,
                                  kolo_etcd_watch_fn fn, void *user, kolo_etcd_watch **out);

/* The next revision the watch will deliver (last delivered + 1), 0 before the
 * stream was first created. */
int64_t kolo_etcd_watch_next_revision(const kolo_etcd_watch *watch);

/* Whether the stream is currently established. */
int kolo_etcd_watch_connected(const kolo_etcd_watch *watch);

/* Stops the watch thread promptly (the stream is aborted, not drained; a resync
 * read in progress after a compaction is waited for, at most one request deadline
 * per page) and frees it. Not from the watch's own callback (KOLO_ERR_STATE is logged and nothing
 * happens). NULL is ignored. */
void kolo_etcd_watch_stop(kolo_etcd_watch *watch);

#ifdef __cplusplus
}
#endif
#endif
