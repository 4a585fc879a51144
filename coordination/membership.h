/* Worker membership in etcd: a worker registers a JSON record at
 * /kolo/v1/workers/<id> attached to its own lease, kept alive by a keep-alive
 * thread, so the record disappears within the TTL when the worker dies. The
 * coordinator lists and watches the live records. */
#ifndef KOLO_COORD_MEMBERSHIP_H
#define KOLO_COORD_MEMBERSHIP_H

#include <stddef.h>
#include <stdint.h>

#include "coordination/etcd.h"
#include "kolo/v1/records.pb-c.h"

/* One worker record: kolo.v1.WorkerRecord (proto/kolo/v1/records.proto) in the one JSON
 * codec (codec/); its users hold the message itself. JSON form (keys in order):
 *   {"id":"w1","host":"node-a","address":"10.0.0.5:7100","cpus":8,"gpus":1,
 *    "labels":{"zone":"a"},"state":"idle"}
 * id: a key segment (kolo_keys_name_valid); host: 1..255 printable characters;
 * address: the data-plane "host:port" ("[v6]:port" for IPv6); cpus, gpus: 0..65535;
 * labels: optional object of string values (at most 64, keys 1..128 printable characters,
 * each once, values at most 1024 bytes); state: 1..32 of [a-z_].
 * Optional, both or neither: "logs_url" (where the agent serves its jobs' output,
 * "http://host:port", at most 255 printable characters) and "logs_token" (the bearer
 * token that server needs, 16..128 of [A-Za-z0-9]); kolo-server reads them, never shows them.
 * Optional: "registered_unix_ms" (wall-clock time of this registration, > 0; written when set).
 * Unknown fields are ignored (a newer worker may add some). */

/* A live record as read from etcd: the message and its key's lease and revision. */
typedef struct kolo_worker_entry {
  Kolo__V1__WorkerRecord *record; /* owned; passed kolo_member_validate */
  int64_t lease;
  int64_t mod_revision;
} kolo_worker_entry;

/* Frees an array returned by kolo_membership_list or kolo_members_from_kvs. */
void kolo_worker_entries_free(kolo_worker_entry *entries, size_t count);

/* Whether address is "host:port" with a port in 1..65535 ("[v6addr]:port" too). */
int kolo_member_address_valid(const char *address);

/* Whether host is 1-255 printable characters (the record's host rule). */
int kolo_member_host_valid(const char *host);

/* Checks the rules above over a record, read or built: KOLO_ERR_PARSE for a missing field
 * (id, host, address, state, cpus, gpus) or a registered_unix_ms that is not positive,
 * KOLO_ERR_INVALID_ARG for a value that breaks a rule; err (may be NULL) says which. */
kolo_status kolo_member_validate(const Kolo__V1__WorkerRecord *m, char *err, size_t err_len);

/* Validates m and writes it as compact JSON (*json malloc'd): cpus and gpus always,
 * registered_unix_ms when > 0 (whatever m's has_ flags say), labels sorted by key. */
kolo_status kolo_member_write(const Kolo__V1__WorkerRecord *m, char **json, char *err,
                              size_t err_len);

/* Reads and validates a record: a new message (protobuf_c_message_free_unpacked), or
 * KOLO_ERR_PARSE for malformed JSON, a wrong field type or a missing field,
 * KOLO_ERR_INVALID_ARG for a bad value, with err naming it; *out is NULL then. */
kolo_status kolo_member_read(const char *json, size_t len, Kolo__V1__WorkerRecord **out, char *err,
                             size_t err_len);

/* ---- registration (the worker side) ---- */
typedef struct kolo_membership kolo_membership;

/* Grants a lease of ttl_s seconds, creates the record under it (create-if-absent:
 * KOLO_ERR_EXISTS while another live holder has the id, e.g. a previous instance
 * whose lease has not expired yet) and starts its keep-alive (PATIENT: it
 * keeps renewing while etcd cannot be reached). lost (optional) is called on the
 * keep-alive thread when etcd says the lease is gone; the record is gone then.
 * Blocks for at most two request deadlines. */
kolo_status kolo_membership_register(kolo_etcd *client, const Kolo__V1__WorkerRecord *m,
                                     int64_t ttl_s, kolo_etcd_lease_lost_fn lost, void *user,
                                     kolo_membership **out);

/* Rewrites the record (e.g. a new state) under the same lease; fails with
 * KOLO_ERR_LEASE_LOST if the lease is gone. The id cannot change. Blocks for at
 * most the request deadline. */
kolo_status kolo_membership_update(kolo_membership *reg, const Kolo__V1__WorkerRecord *m);

/* The lease the record is attached to. */
int64_t kolo_membership_lease(const kolo_membership *reg);

/* Whether the keep-alive still holds the lease. */
int kolo_membership_alive(const kolo_membership *reg);

/* When etcd last acknowledged a renewal of the lease (CLOCK_MONOTONIC ms). */
int64_t kolo_membership_renewed_ms(const kolo_membership *reg);

/* Stops the keep-alive, revokes the lease (which deletes the record) and frees
 * reg, also when the revoke fails (the record then expires within the TTL).
 * Blocks for at most the request deadline. */
kolo_status kolo_membership_deregister(kolo_membership *reg);

/* Stops the keep-alive and frees reg without touching etcd: the record expires
 * within the TTL (what a crash looks like). */
void kolo_membership_abandon(kolo_membership *reg);

/* ---- reading (the coordinator side) ---- */

/* Lists every live record, sorted by id. Records that fail to decode are skipped
 * with a warning (one bad record must not hide the others). *revision (optional)
 * is the snapshot's revision. Blocks for at most one deadline per 500 records. */
kolo_status kolo_membership_list(kolo_etcd *client, kolo_worker_entry **members, size_t *count,
                                 int64_t *revision);

/* The live records among key-values read under KOLO_KEY_WORKERS_PREFIX (a range, or a
 * watch-fed copy of one), decoded and sorted by id as kolo_membership_list returns them;
 * records that fail to decode are skipped with a warning. Free with kolo_worker_entries_free. */
kolo_status kolo_members_from_kvs(const kolo_etcd_kv *kvs, size_t n, kolo_worker_entry **members,
                                  size_t *count);

/* Called with the whole current member set, sorted by id, after every change.
 * The array lives only for the call; copy what you keep. */
typedef void (*kolo_membership_fn)(const kolo_worker_entry *members, size_t count, void *user);

typedef struct kolo_membership_watch kolo_membership_watch;

/* Lists the members and calls fn with them on the caller's thread before
 * returning, then watches for changes from that snapshot on and calls fn on the
 * watch thread after each one (also after a compaction resync). Blocks for the
 * initial list. */
kolo_status kolo_membership_watch_start(kolo_etcd *client, kolo_membership_fn fn, void *user,
                                        kolo_membership_watch **out);

/* Stops the watch promptly and frees it. NULL is ignored. */
void kolo_membership_watch_stop(kolo_membership_watch *watch);

#endif
