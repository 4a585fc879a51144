/* The agent's report on a job: /kolo/v1/jobs/<job>/reports/<worker> (kolo_keys_report),
 * written by the worker's agent whenever its process forms a ring, fails, reports progress
 * or exits, read by the scheduler's snapshot. The record is kolo.v1.AgentReport
 * (proto/kolo/v1/records.proto) in the one JSON codec (codec/); its "progress" is the
 * training process's own JSON object, held as a kolo.v1.Struct (an open-ended value: every
 * key the process reported, any JSON inside, bounded by codec.h's KOLO_CODEC_OPEN_MAX_*).
 * Its users hold the message itself; this module owns its rules and its reads and writes.
 * JSON form (the same bytes as when progress travelled beside the
 * message):
 *   {"worker":"w1","epoch":3,"formed_epoch":3,"failed_epoch":0,"failed_rank":-1,
 *    "failed_status":"","exited":false,"exit_code":0,"exit_epoch":0,"time_unix_ms":...,
 *    "pid":4242,"progress":{"step":40,...},"stderr_tail":"..."}
 * Reading checks the types (integers are JSON integers, "progress" an object within the
 * limits) and the rules (kolo_report_validate), naming the field it refuses in the caller's
 * err buffer; every field is optional on read (a missing one reads as 0, a missing
 * failed_rank as -1, failed_status as "", hello as 1), unknown ones are skipped (a newer
 * agent may add some). */
#ifndef KOLO_COORD_REPORT_H
#define KOLO_COORD_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"
#include "kolo/v1/records.pb-c.h"

/* The rules over a report, read or built: a worker id, when present, passes
 * kolo_keys_name_valid. KOLO_ERR_INVALID_ARG with err (may be NULL) naming the field. */
kolo_status kolo_report_validate(const Kolo__V1__AgentReport *r, char *err, size_t err_len);

/* Reads a report's JSON: a new message (free it with protobuf_c_message_free_unpacked)
 * that passed kolo_report_validate, its absent fields filled in as documented above
 * (failed_rank -1, failed_status "", hello 1; a "" permanent reads as none, NULL), or
 * KOLO_ERR_PARSE for malformed JSON and wrong types, KOLO_ERR_INVALID_ARG for a rule, with
 * err naming the field; *out is NULL on failure. */
kolo_status kolo_report_read(const char *json, size_t len, Kolo__V1__AgentReport **out, char *err,
                             size_t err_len);

/* Writes r as compact JSON (*json malloc'd). The writer sets the values; presence is this
 * function's, as the agent always wrote it: worker (required), the counters, failed_status
 * ("" for NULL), exited and pid always; stderr_tail and progress when not NULL; hello only
 * when false (absent reads as said); permanent when not ""; first_formed_epoch when not 0
 * (the has_ flags in r are not read). KOLO_ERR_INVALID_ARG if the worker id is missing or
 * not valid or a string is not UTF-8. */
kolo_status kolo_report_write(const Kolo__V1__AgentReport *r, char **json, char *err,
                              size_t err_len);

/* Merges a process's REPORT line (text: a JSON object) into *progress, its keys
 * overwriting earlier ones (a final line keeps the fields it does not repeat). The merged
 * value is checked as a report reads it (KOLO_CODEC_OPEN_MAX_*); on any error *progress is
 * unchanged and err names the field ("progress.x: ..."): KOLO_ERR_PARSE for a line that is
 * not a JSON object, KOLO_ERR_INVALID_ARG past a limit. */
kolo_status kolo_report_progress_merge(Kolo__V1__Struct **progress, const char *text, size_t len,
                                       char *err, size_t err_len);

#endif
