/* The ring record: what the scheduler writes for each epoch of a job at
 * /kolo/v1/jobs/<job>/ring/<epoch> (kolo_keys_ring) and the agent (and the
 * scheduler's next pass, and kolo-server's logs and history) reads: who holds which
 * rank, where to connect, the epoch's shared secret, the collective timeout, and every
 * worker the job has lost so far. The record is the message kolo.v1.RingRecord
 * (proto/kolo/v1/records.proto), stored as JSON by the one codec (codec/codec.h); this
 * module owns it: its rules, checked over the message before every write and after
 * every read, and kolo_ringspec, the struct its users hold. JSON form (unchanged since
 * the scheduler first wrote it, byte for byte):
 *   {"job":"j1","epoch":3,"timeout_ms":30000,"secret":"3f9a...",
 *    "members":[{"worker_id":"w1","rank":0,"host":"node-a","address":"10.0.0.5:7100",
 *                "local_rank":0,"local_size":1,"since_epoch":1,"lease":7587892}, ...],
 *    "lost":[{"worker_id":"w9","why":"its lease expired"}],
 *    "planned":true}
 * "planned" is present only when set (a drained member leaves: members switch at
 * their next commit, nothing is redone), "lease" only when known; "lost" may be empty.
 * Decoding checks every rule below and fails with a message naming the field
 * (read it with kolo_etcd_last_error): duplicate fields, wrong types (integers are JSON
 * integers), a missing field (a member without an address is an error, never a
 * placeholder), ranks out of order, a worker holding two ranks, bad ids, hosts or
 * addresses, local ranks outside their host group, a since_epoch after the epoch.
 * Unknown fields are ignored (a newer scheduler may add some; an older agent still runs
 * the ring). */
#ifndef KOLO_COORD_RINGSPEC_H
#define KOLO_COORD_RINGSPEC_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

#define KOLO_RINGSPEC_MAX_SIZE 65536           /* members of one ring (= KOLO_AGENT_MAX_RING) */
#define KOLO_RINGSPEC_MAX_LOST 65536           /* entries of the lost list */
#define KOLO_RINGSPEC_MAX_TIMEOUT_MS INT32_MAX /* what the agent protocol carries */

typedef struct kolo_ringspec_member {
  char *worker_id;     /* kolo_keys_name_valid */
  char *host;          /* 1-255 printable characters (the worker record's host) */
  char *address;       /* data-plane "host:port" (kolo_member_address_valid) */
  int32_t local_rank;  /* 0 <= local_rank < local_size */
  int32_t local_size;  /* members on this host, 1..size */
  int64_t since_epoch; /* first epoch of its unbroken membership, 0..epoch */
  /* Which registration of the worker the epoch was planned with (its record's etcd
   * lease; 0 = not recorded, older records): a worker whose lease expired comes back
   * under the same id with another lease and without its process, so it is not this
   * member (scheduler/decide.h). JSON "lease", present when not 0. */
  int64_t lease;
} kolo_ringspec_member;

typedef struct kolo_ringspec_lost {
  char *worker_id; /* a worker this job lost at an earlier re-form (kolo_keys_name_valid) */
  char *why;       /* why, for people: any string */
} kolo_ringspec_lost;

typedef struct kolo_ringspec {
  char *job;          /* job id (kolo_keys_name_valid) */
  int64_t epoch;      /* 0..2^53 */
  int64_t timeout_ms; /* collective timeout, 1..KOLO_RINGSPEC_MAX_TIMEOUT_MS */
  char *secret;       /* the epoch's shared secret: 16-256 characters of [A-Za-z0-9+/=_.-] */
  size_t size;        /* members, 1..KOLO_RINGSPEC_MAX_SIZE; members[i] holds rank i */
  kolo_ringspec_member *members;
  size_t n_lost;
  kolo_ringspec_lost *lost;
  int planned; /* members switch at their next commit (a drain) */
} kolo_ringspec;

/* Frees the fields of spec (not spec) and zeroes it. NULL is fine. */
void kolo_ringspec_clear(kolo_ringspec *spec);

/* Checks every rule above; KOLO_ERR_INVALID_ARG with a message (kolo_etcd_last_error)
 * on the first broken one. */
kolo_status kolo_ringspec_validate(const kolo_ringspec *spec);

/* Encodes a valid spec as compact JSON (*json malloc'd, NULL on failure). */
kolo_status kolo_ringspec_encode(const kolo_ringspec *spec, char **json);

/* Decodes and validates. KOLO_ERR_PARSE for malformed JSON, duplicate or missing
 * fields and wrong types; KOLO_ERR_INVALID_ARG for values that break a rule. *out
 * is zeroed on failure. */
kolo_status kolo_ringspec_decode(const char *json, size_t len, kolo_ringspec *out);

/* The rank of worker in spec, or -1. */
int kolo_ringspec_rank_of(const kolo_ringspec *spec, const char *worker);

#endif
