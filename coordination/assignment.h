/* The assignment record: /kolo/v1/assign/<worker> (kolo_keys_assign) names the job and
 * epoch a worker is to run and the ring record to run it by. The scheduler writes it
 * with the ring (scheduler/apply.c); the worker's agent reads it to know what to run, the
 * scheduler's snapshot to know who is busy (and to sweep stale ones), kolo-server to show
 * a worker's job. The record is kolo.v1.Assignment (proto/kolo/v1/records.proto) in the
 * one JSON codec (codec/); its users hold the message itself, and this module owns its
 * rules. JSON form (as the scheduler always wrote it):
 *   {"job":"j1","epoch":3,"ring":"/kolo/v1/jobs/j1/ring/00000000000000000003","rank":1}
 * Rules, checked before every write and after every read, each error naming the field
 * (in the caller's err buffer): every field present, integers as JSON integers, a valid
 * job id, epoch 0..2^53, ring = kolo_keys_ring(job, epoch), rank 0..65535. Unknown fields
 * are ignored (a newer scheduler may add some). */
#ifndef KOLO_COORD_ASSIGNMENT_H
#define KOLO_COORD_ASSIGNMENT_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"
#include "kolo/v1/records.pb-c.h"

/* Checks the rules: KOLO_ERR_PARSE for a missing field (as a read reports it),
 * KOLO_ERR_INVALID_ARG for a value that breaks a rule; err (may be NULL) names it. */
kolo_status kolo_assignment_validate(const Kolo__V1__Assignment *a, char *err, size_t err_len);

/* Reads a record's JSON and validates it: a new message (free it with
 * protobuf_c_message_free_unpacked), or KOLO_ERR_PARSE for malformed JSON, wrong types and
 * missing fields, KOLO_ERR_INVALID_ARG for values that break a rule, with err naming the
 * field; *out is NULL on failure. */
kolo_status kolo_assignment_read(const char *json, size_t len, Kolo__V1__Assignment **out,
                                 char *err, size_t err_len);

/* Validates a and encodes it as compact JSON (*json malloc'd, NULL on failure). */
kolo_status kolo_assignment_write(const Kolo__V1__Assignment *a, char **json, char *err,
                                  size_t err_len);

#endif
