/* Private to coordination/: the client struct, the request engine shared by
 * the KV, lease and watch files, and the JSON <-> struct helpers the unit tests
 * exercise directly. Not installed, not for other components. */
#ifndef KOLO_COORD_ETCD_INTERNAL_H
#define KOLO_COORD_ETCD_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "coordination/etcd.h"

/* What every handle of one client shares: the endpoints and which answered
 * last, TLS and auth, the token, the pool of idle connections, and the counters
 * of the whole client. Freed with its last handle. */
typedef struct kolo_etcd_core {
  atomic_int handles; /* live handles; the last kolo_etcd_destroy frees the core */
  char **endpoints;
  size_t endpoint_count;
  atomic_size_t current; /* index of the endpoint that answered last */
  char *ca_file;
  char *cert_file;
  char *key_file;
  char *user;
  char *password;
  pthread_mutex_t lock; /* guards token and the handle pool */
  char *token;
  void **pool; /* idle CURL easy handles (keep their connections) */
  size_t pool_count;
  size_t pool_cap;
  atomic_uint_fast64_t requests[KOLO_ETCD_REQUEST_KINDS]; /* the whole client's */
  atomic_uint_fast64_t watches_started;
  atomic_int watches_running;
} kolo_etcd_core;

/* A handle: the shared core plus this user's deadlines and counters. */
struct kolo_etcd {
  kolo_etcd_core *core;
  int request_timeout_ms;
  int connect_timeout_ms;
  int watch_idle_ms;
  size_t max_value_bytes;
  atomic_uint_fast64_t requests[KOLO_ETCD_REQUEST_KINDS]; /* this handle's */
  atomic_uint_fast64_t watches_started;
  atomic_int watches_running;
  atomic_llong written_revision; /* highest revision of a write that succeeded through it */
};

/* Counts a watch stream opened (+1) or a watch ended (running -1) on a handle
 * and its client. */
void kolo_etcd_count_watch(kolo_etcd *client, int started, int running_delta);

/* Raises the handle's written revision to revision (a write through it succeeded). */
void kolo_etcd_note_write(kolo_etcd *client, int64_t revision);

/* Sets the calling thread's last error and returns status (for `return fail(...)`). */
kolo_status kolo_etcd_fail(kolo_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Milliseconds on the monotonic clock. */
int64_t kolo_etcd_now_ms(void);

/* Request flags. */
enum {
  KOLO_ETCD_IDEMPOTENT = 1, /* may be resent to another endpoint after a broken reply */
  KOLO_ETCD_NO_AUTH = 2,    /* do not attach or refresh the token (authenticate itself) */
};

/* POSTs body (not consumed) to /v3/<path> within timeout_ms (0 = the client's
 * deadline), failing over across endpoints; *reply gets the parsed JSON object.
 * cancel (optional) aborts the request when it becomes non-zero. Maps etcd errors
 * ({"error","code","message"}) to kolo_status with etcd's message. */
kolo_status kolo_etcd_call(kolo_etcd *client, const char *path, json_t *body, int timeout_ms,
                           int flags, const atomic_int *cancel, json_t **reply);

/* The endpoint URL at index i modulo the count. */
const char *kolo_etcd_endpoint(const kolo_etcd *client, size_t i);

/* The "Authorization" header line for the current token ("" when none), copied to buf.
 * Authenticates first (within timeout_ms, 0 = the client's deadline; cancel, if
 * given, aborts the login) when a user is configured and no token is held. */
kolo_status kolo_etcd_auth_header(kolo_etcd *client, char *buf, size_t size, int timeout_ms,
                                  const atomic_int *cancel);

/* Drops the token so that the next request authenticates again. */
void kolo_etcd_auth_invalidate(kolo_etcd *client);

/* Points a CURL easy handle at <endpoint>/v3/<path>: an http(s):// endpoint as it is, a
 * unix:///abs/path endpoint (a private etcd's unix socket) through that socket with
 * http://localhost as the URL. */
void kolo_etcd_set_url(void *curl_handle, const char *endpoint, const char *path);

/* Applies the client's TLS files (CA, cert, key) to a CURL easy handle. */
void kolo_etcd_apply_tls(const kolo_etcd *client, void *curl_handle);

/* Maps an etcd gateway error object to a status (gRPC code + message). */
kolo_status kolo_etcd_error_status(int grpc_code, const char *message);

/* ---- JSON helpers (tested by tests/unit/test_etcd_json.c) ---- */

/* Reads an int64 that etcd sends as a JSON string ("42") or number; absent = 0.
 * KOLO_ERR_PARSE when present but not an integer. */
kolo_status kolo_etcd_json_int64(const json_t *object, const char *name, int64_t *out);

/* Reads a boolean; absent = 0 (etcd omits false). KOLO_ERR_PARSE when not a boolean. */
kolo_status kolo_etcd_json_bool(const json_t *object, const char *name, int *out);

/* Adds name = base64(bytes) to object. */
kolo_status kolo_etcd_json_set_bytes(json_t *object, const char *name, kolo_etcd_bytes bytes);

/* Adds name = "<n>" (etcd's string form of an int64). */
kolo_status kolo_etcd_json_set_int64(json_t *object, const char *name, int64_t n);

/* Parses one mvccpb.KeyValue object into *kv (base64-decoded). */
kolo_status kolo_etcd_kv_from_json(const json_t *object, kolo_etcd_kv *kv);

/* Parses a RangeResponse object. */
kolo_status kolo_etcd_range_from_json(const json_t *reply, kolo_etcd_range_result *out);

/* Reads header.revision of a reply (0 when absent). */
kolo_status kolo_etcd_header_revision(const json_t *reply, int64_t *revision);

/* The range_end for a prefix: the prefix with its last byte that is not 0xff
 * incremented and what follows dropped; "\0" (all keys) when every byte is 0xff.
 * *end is malloc'd. */
kolo_status kolo_etcd_prefix_end(kolo_etcd_bytes prefix, unsigned char **end, size_t *end_len);

/* Builds a RangeRequest body. */
kolo_status kolo_etcd_range_request_json(const kolo_etcd_range_opts *opts, json_t **out);

/* Parses one line of a watch stream: {"result":{...}} or {"error":...}. */
typedef struct kolo_etcd_watch_message {
  int created;
  int canceled;
  int64_t compact_revision;
  int64_t header_revision;
  uint64_t cluster_id; /* header.cluster_id, 0 when absent */
  kolo_etcd_event *events;
  size_t event_count;
  char *cancel_reason;
} kolo_etcd_watch_message;

kolo_status kolo_etcd_watch_message_parse(const char *line, size_t len,
                                          kolo_etcd_watch_message *out);
void kolo_etcd_watch_message_clear(kolo_etcd_watch_message *message);

/* Frees the kvs of an event array and the array. */
void kolo_etcd_events_free(kolo_etcd_event *events, size_t count);

/* The CLOCK_MONOTONIC time ms from now, for pthread_cond_timedwait on condition
 * variables created with that clock (the keep-alive and watch sleeps). */
static inline struct timespec kolo_etcd_monotonic_after(int64_t ms) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += (ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  return until;
}

#endif
