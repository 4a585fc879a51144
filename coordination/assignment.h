/* The assignment record: /kolo/v1/assign/<worker> (kolo_keys_assign) names the job and
 * epoch a worker is to run and the ring record to run it by. The scheduler writes it
 * with the ring (scheduler/apply.c); the worker's agent reads it to know what to run, the
 * scheduler's snapshot to know who is busy (and to sweep stale ones), kolo-server to show
 * a worker's job. The record is kolo.v1.Assignment (proto/kolo/v1/records.proto) in the
 * one JSON codec (codec/); this module owns it. JSON form (as the scheduler always wrote
 * it): {"job":"j1","epoch":3,"ring":"/kolo/v1/jobs/j1/ring/00000000000000000003","rank":1}
 * Rules, checked before every write and after every read, each error naming the field
 * (kolo_etcd_last_error): every field present, integers as JSON integers, a valid job
 * id, epoch 0..2^53, ring = kolo_keys_ring(job, epoch), rank 0..65535. Unknown fields
 * are ignored (a newer scheduler may add some). */
#ifndef KOLO_COORD_ASSIGNMENT_H
#define KOLO_COORD_ASSIGNMENT_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

typedef struct kolo_assignment {
  char *job;     /* kolo_keys_name_valid */
  int64_t epoch; /* 0..2^53 */
  char *ring;    /* kolo_keys_ring(job, epoch) */
  int32_t rank;  /* 0..KOLO_RINGSPEC_MAX_SIZE-1 */
} kolo_assignment;

/* Frees the fields of a (not a) and zeroes it. NULL is fine. */
void kolo_assignment_clear(kolo_assignment *a);

/* Checks the rules; KOLO_ERR_INVALID_ARG naming the first broken one. */
kolo_status kolo_assignment_validate(const kolo_assignment *a);

/* Encodes a valid assignment as compact JSON (*json malloc'd, NULL on failure). */
kolo_status kolo_assignment_encode(const kolo_assignment *a, char **json);

/* Decodes and checks. KOLO_ERR_PARSE for malformed JSON, wrong types and missing fields,
 * KOLO_ERR_INVALID_ARG for values that break a rule; *out is zeroed on failure. */
kolo_status kolo_assignment_decode(const char *json, size_t len, kolo_assignment *out);

#endif
