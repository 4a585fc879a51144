/* The job model, pure logic with no I/O: spec validation that names the bad field,
 * canonical specs (so a repeated submit can be recognised), the phase machine, and
 * the event log. The store and both APIs call these; tests/unit/test_server_job_model.c
 * pins them down. */
#ifndef KOLO_SERVER_JOB_MODEL_H
#define KOLO_SERVER_JOB_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"
#include "kolo/v1/job.pb-c.h"
#include "coordination/job_status.h"
#include "server/wire.h" /* kolo_server_job_phase_name */

#define KOLO_SERVER_MAX_WORKERS 4096
#define KOLO_SERVER_ID_MAX 63
/* builtin.steps: every JSON reader (the scheduler, the agent, a browser) holds it exactly. */
#define KOLO_SERVER_MAX_STEPS (UINT64_C(1) << 53)

/* Checks a submitted spec. KOLO_ERR_INVALID_ARG with "<field>: <why>" in err when bad. */
kolo_status kolo_server_job_validate_spec(const Kolo__V1__JobSpec *spec, char *err, size_t err_len);

/* Fills defaults (mode SYNC, max_workers = min_workers when 0) and sorts every map by key,
 * so two specs that mean the same thing pack to the same bytes. */
void kolo_server_job_normalize_spec(Kolo__V1__JobSpec *spec);

/* Whether two normalized specs are the same (packed bytes compare equal). */
int kolo_server_job_spec_equal(const Kolo__V1__JobSpec *a, const Kolo__V1__JobSpec *b);

/* Whether id is acceptable as a job id (1..63 of [a-z0-9-], starting with a letter or digit):
 * it becomes part of an etcd key. */
int kolo_server_job_id_valid(const char *id);

/* Writes a fresh random id ("j-" + 16 hex digits) into out (at least 19 bytes). */
kolo_status kolo_server_job_make_id(char *out, size_t len);

/* The phase machine and every status transition are coordination/job_status.h's (the
 * status's one owner, shared with the scheduler): kolo_job_status_allowed / _final. */

/* A new PENDING job for a validated, normalized spec, with event 1 "SUBMITTED".
 * Free with protobuf_c_message_free_unpacked(&job->base, NULL). */
kolo_status kolo_server_job_create(const Kolo__V1__JobSpec *spec, const char *id, int64_t now_ms,
                                   Kolo__V1__Job **out);

/* Appends event number (last + 1) to job->events. */
kolo_status kolo_server_job_append_event(Kolo__V1__Job *job, const char *type, const char *message,
                                         int64_t now_ms);

/* Moves job to CANCELLED (KOLO_ERR_STATE if it already ended), recording reason. */
kolo_status kolo_server_job_cancel(Kolo__V1__Job *job, const char *reason, int64_t now_ms,
                                   char *err, size_t err_len);

/* Sets new worker bounds (KOLO_ERR_INVALID_ARG if bad, KOLO_ERR_STATE if the job ended). */
kolo_status kolo_server_job_scale(Kolo__V1__Job *job, uint32_t min_workers, uint32_t max_workers,
                                  int64_t now_ms, char *err, size_t err_len);

/* Milliseconds since the Unix epoch. */
int64_t kolo_server_now_ms(void);

#endif
