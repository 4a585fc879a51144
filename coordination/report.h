/* The agent's report on a job: /kolo/v1/jobs/<job>/reports/<worker> (kolo_keys_report),
 * written by the worker's agent whenever its process forms a ring, fails, reports progress
 * or exits, read by the scheduler's snapshot. The record is kolo.v1.AgentReport
 * (proto/kolo/v1/records.proto) in the one JSON codec (codec/); its "progress" is the
 * training process's own JSON object, held as a kolo.v1.Struct (an open-ended value: every
 * key the process reported, any JSON inside, bounded by codec.h's KOLO_CODEC_OPEN_MAX_*).
 * This module owns it. JSON form (the same bytes as when progress travelled beside the
 * message):
 *   {"worker":"w1","epoch":3,"formed_epoch":3,"failed_epoch":0,"failed_rank":-1,
 *    "failed_status":"","exited":false,"exit_code":0,"exit_epoch":0,"time_unix_ms":...,
 *    "pid":4242,"progress":{"step":40,...},"stderr_tail":"..."}
 * Reading checks the types (integers are JSON integers, "progress" an object within the
 * limits) and names the field it refuses; every field is optional on read (a missing one reads as
 * 0, a missing failed_rank as -1), unknown ones are skipped (a newer agent may add some). */
#ifndef KOLO_COORD_REPORT_H
#define KOLO_COORD_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"
#include "kolo/v1/records.pb-c.h"

typedef struct kolo_report {
  char *worker;
  int64_t epoch, formed_epoch, failed_epoch, failed_rank;
  char *failed_status; /* "" = none */
  int exited;
  int64_t exit_code, exit_epoch, time_unix_ms, pid;
  Kolo__V1__Struct *progress; /* what the process reported (owned); NULL = none */
  char *stderr_tail;          /* NULL = none (written only then) */
  int hello;       /* the process said HELLO (a report without the field reads as 1) */
  char *permanent; /* why its failure can never succeed (agent's finding); NULL = none */
  int64_t first_formed_epoch; /* the first epoch its process formed (0: none, or not known) */
} kolo_report;

/* Frees the fields of r (not r) and zeroes it. NULL is fine. */
void kolo_report_clear(kolo_report *r);

/* Encodes r as compact JSON (*json malloc'd). KOLO_ERR_INVALID_ARG if the worker id is
 * not valid or a string is not UTF-8. */
kolo_status kolo_report_encode(const kolo_report *r, char **json);

/* Decodes and checks (kolo_etcd_last_error names the field); *out is zeroed on failure.
 * KOLO_ERR_PARSE for malformed JSON and wrong types. */
kolo_status kolo_report_decode(const char *json, size_t len, kolo_report *out);

/* Merges a process's REPORT line (text: a JSON object) into *progress, its keys
 * overwriting earlier ones (a final line keeps the fields it does not repeat). The merged
 * value is checked as a report reads it (KOLO_CODEC_OPEN_MAX_*); on any error *progress is
 * unchanged and kolo_etcd_last_error names the field ("progress.x: ..."):
 * KOLO_ERR_PARSE for a line that is not a JSON object, KOLO_ERR_INVALID_ARG past a limit. */
kolo_status kolo_report_progress_merge(Kolo__V1__Struct **progress, const char *text, size_t len);

#endif
