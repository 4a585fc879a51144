/* The ring record: what the scheduler writes for each epoch of a job at
 * /kolo/v1/jobs/<job>/ring/<epoch> (kolo_keys_ring) and the agent (and the
 * scheduler's next pass, and kolo-server's logs and history) reads: who holds which
 * rank, where to connect, the epoch's shared secret, the collective timeout, and every
 * worker the job has lost so far. The record is the message kolo.v1.RingRecord
 * (proto/kolo/v1/records.proto), stored as JSON by the one codec (codec/codec.h); this
 * module owns it: its rules, checked over the message before every write and after
 * every read (its users hold the message itself). JSON form (unchanged since
 * the scheduler first wrote it, byte for byte):
 *   {"job":"j1","epoch":3,"timeout_ms":30000,"secret":"3f9a...",
 *    "members":[{"worker_id":"w1","rank":0,"host":"node-a","address":"10.0.0.5:7100",
 *                "local_rank":0,"local_size":1,"since_epoch":1,"lease":7587892}, ...],
 *    "lost":[{"worker_id":"w9","why":"its lease expired"}],
 *    "planned":true}
 * "planned" is present only when set (a drained member leaves: members switch at
 * their next commit, nothing is redone), "lease" only when known; "lost" may be empty.
 * Reading checks every rule below and fails with a message naming the field (in the
 * caller's err buffer): duplicate fields, wrong types (integers are JSON
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
#include "kolo/v1/records.pb-c.h"

#define KOLO_RINGSPEC_MAX_SIZE 65536           /* members of one ring (= KOLO_AGENT_MAX_RING) */
#define KOLO_RINGSPEC_MAX_LOST 65536           /* entries of the lost list */
#define KOLO_RINGSPEC_MAX_TIMEOUT_MS INT32_MAX /* what the agent protocol carries */

/* The rules: job a valid id (kolo_keys_name_valid); epoch 0..2^53; timeout_ms
 * 1..KOLO_RINGSPEC_MAX_TIMEOUT_MS; secret 16-256 characters of [A-Za-z0-9+/=_.-]; 1..
 * KOLO_RINGSPEC_MAX_SIZE members, members[i] holding rank i, each with a valid worker_id
 * held once, a host of 1-255 printable characters (the worker record's), a data-plane
 * address "host:port" (kolo_member_address_valid), 0 <= local_rank < local_size <= the
 * ring's size, since_epoch 0..epoch (the first epoch of its unbroken membership), lease >= 0
 * (the registration of the worker the epoch was planned with, its record's etcd lease; 0 =
 * not recorded: scheduler/decide.h); at most KOLO_RINGSPEC_MAX_LOST lost entries, each a
 * valid worker_id and a why (any string, for people).
 * kolo_ringspec_validate checks them over a record, read or built: KOLO_ERR_PARSE for a missing
 * field (as a read reports it), KOLO_ERR_INVALID_ARG for a broken rule, err (may be NULL) naming
 * the first. */
kolo_status kolo_ringspec_validate(const Kolo__V1__RingRecord *r, char *err, size_t err_len);

/* Reads a record's JSON and validates it: a new message (free it with
 * protobuf_c_message_free_unpacked), or KOLO_ERR_PARSE for malformed JSON, duplicate or
 * missing fields and wrong types, KOLO_ERR_INVALID_ARG for values that break a rule, with
 * err naming the field; *out is NULL on failure. */
kolo_status kolo_ringspec_read(const char *json, size_t len, Kolo__V1__RingRecord **out, char *err,
                               size_t err_len);

/* Validates r and writes it as compact JSON (*json malloc'd, NULL on failure). Presence is
 * the record's, whatever r's has_ flags say: every field always, each member's rank its
 * index, "lease" when not 0, "planned" only when set. */
kolo_status kolo_ringspec_write(const Kolo__V1__RingRecord *r, char **json, char *err,
                                size_t err_len);

/* The rank of worker in r, or -1. */
int kolo_ringspec_rank_of(const Kolo__V1__RingRecord *r, const char *worker);

#endif
