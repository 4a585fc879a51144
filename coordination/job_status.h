/* The job status record, /kolo/v1/jobs/<job>/status: kolo.v1.JobStatus (job.proto), one
 * owner. kolo-server writes it once, at submit; every later write is the scheduler's (a
 * new epoch, a phase change, the end, progress, and the user's intents: CancelJob and
 * ScaleJob store a kolo.v1.JobIntent at jobs/<id>/intents/<name> (coordination/keys.h)
 * that the scheduler applies with kolo_job_status_apply_intents, and kolo-server's view
 * shows a status with its pending intents applied by the same function). Both build the
 * change with the pure functions below over the message and store it with kolo_job_status_write
 * (the one codec, codec/), so the phases, the counters (reconfigurations, drains), the times and
 * the progress follow one set of rules whichever process writes them
 * (tests/unit/test_job_status.c). Every transition sets updated_unix_ms to the caller's now_ms (the
 * caller's clock: the functions read none). Phases: PENDING -> RUNNING <-> RECONFIGURING ->
 * SUCCEEDED | FAILED. RUNNING means "the ring formed": the scheduler writes it in one place, when
 * every member reported the status's epoch formed (RING_FORMED). A job it gang-schedules stays
 * PENDING, with its epoch and members (SCHEDULED), until its first ring formed; a loss or a stall
 * before that re-forms it (PENDING -> RECONFIGURING), and rank 0 ending before (a program without
 * libkolo forms no ring) ends it (PENDING -> SUCCEEDED). RUNNING or RECONFIGURING -> PENDING
 * (the ring lost its members and waits for new ones); any non-final phase -> CANCELLED or FAILED
 * (kolo_job_status_allowed, which cancel applies). The scheduler's moves need only that the phase
 * is not final: a final phase never changes, whoever asks. */
#ifndef KOLO_COORD_JOB_STATUS_H
#define KOLO_COORD_JOB_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"
#include "kolo/v1/job.pb-c.h"
#include "kolo/v1/records.pb-c.h"

/* ---- phases ---- */
int kolo_job_status_final(Kolo__V1__Phase phase);
/* Whether the scheduler has given st's job a ring (its epoch and members): RUNNING,
 * RECONFIGURING, or PENDING with an epoch and members (scheduled, its first ring not formed
 * yet). A PENDING job without them waits in the scheduler's queue. */
int kolo_job_status_scheduled(const Kolo__V1__JobStatus *st);
/* Whether a status in from may move to to (the rule above; from == to is not a move). */
int kolo_job_status_allowed(Kolo__V1__Phase from, Kolo__V1__Phase to);

/* ---- the record ---- */
/* Decodes a status read from etcd (text: its JSON; fields a newer writer added are
 * skipped); a new message (protobuf_c_message_free_unpacked), or KOLO_ERR_PARSE (not JSON) /
 * KOLO_ERR_INVALID_ARG with err naming the field. The scheduler's snapshot reads it so. */
kolo_status kolo_job_status_read(const char *text, size_t len, Kolo__V1__JobStatus **out, char *err,
                                 size_t err_len);
/* The compact JSON stored in etcd (malloc'd; NULL when out of memory). */
char *kolo_job_status_write(const Kolo__V1__JobStatus *st);

/* ---- transitions (pure) ---- */
/* A new job: PENDING, created now, bounds from the spec. */
void kolo_job_status_submitted(Kolo__V1__JobStatus *st, uint32_t min_workers, uint32_t max_workers,
                               int64_t now_ms);

/* CANCELLED with error = message, finished now. KOLO_ERR_STATE if st may not move there. */
kolo_status kolo_job_status_cancel(Kolo__V1__JobStatus *st, const char *message, int64_t now_ms);

/* New bounds. KOLO_ERR_STATE once final (the caller checks the bounds themselves). */
kolo_status kolo_job_status_scale(Kolo__V1__JobStatus *st, uint32_t min_workers,
                                  uint32_t max_workers, int64_t now_ms);

/* ---- the user's intents (pure) ---- */
/* The event an intent adds: type and message, at the intent's time. */
typedef struct kolo_job_intent_event {
  const char *type; /* "CANCELLED" or "SCALED" */
  char message[320];
  int64_t time_unix_ms;
} kolo_job_intent_event;

/* The event messages (one wording for the view and the scheduler). */
void kolo_job_cancel_message(const char *reason, char *out, size_t len);
void kolo_job_scale_message(uint32_t from_min, uint32_t from_max, uint32_t to_min, uint32_t to_max,
                            char *out, size_t len);

/* Applies intents[0..n) (in the order they were accepted: their keys' create revisions) to st,
 * each at its own time (cancel: kolo_job_status_cancel; scale: kolo_job_status_scale); one that
 * no longer applies (st final by then) or holds neither changes nothing. events[k] for each
 * that applied, in order; applied[i] (optional) says whether intents[i] did. Returns how many
 * events, -1 when out of memory (st is then partly changed: drop it). */
int kolo_job_status_apply_intents(Kolo__V1__JobStatus *st,
                                  const Kolo__V1__JobIntent *const *intents, size_t n,
                                  kolo_job_intent_event *events, int *applied);

/* A change of phase (or none: the same phase), and of members when members is not NULL
 * (st takes members[0..n) and the array; the old ones are freed), reconfigurations +
 * count_reconfiguration, drains + count_drains; `waiting` set while RECONFIGURING below
 * min_workers (since kept from the first such move), cleared otherwise (so by scale too).
 * KOLO_ERR_STATE if st is final, KOLO_ERR_INVALID_ARG for no phase; st is unchanged then and
 * members stay the caller's. */
kolo_status kolo_job_status_move(Kolo__V1__JobStatus *st, Kolo__V1__Phase phase,
                                 Kolo__V1__Member **members, size_t n, int count_reconfiguration,
                                 uint32_t count_drains, int64_t now_ms);

/* A new epoch (a ring written): kolo_job_status_move plus epoch, and started_unix_ms
 * the first time the job runs. */
kolo_status kolo_job_status_epoch(Kolo__V1__JobStatus *st, Kolo__V1__Phase phase, uint64_t epoch,
                                  Kolo__V1__Member **members, size_t n, int count_reconfiguration,
                                  uint32_t count_drains, int64_t now_ms);

/* A re-form that a false loss caused (scheduler/false_loss.h): false_losses + n (the
 * epoch itself is written by kolo_job_status_epoch, in the same change). Saturates.
 * KOLO_ERR_STATE if st is final. */
kolo_status kolo_job_status_count_false_losses(Kolo__V1__JobStatus *st, uint32_t n);

/* The progress a training process reported (its report's "progress", a kolo.v1.Struct: the
 * typed value, read with codec.h's kolo_codec_struct_number): the
 * JobStatus.progress fields it holds, under their names or kolo-train's ("steps",
 * "samples_per_sec_total", "train_accuracy" as the accuracy), and the training mode's
 * "rounds", "bytes_sent", "staleness", "blocked_seconds" and "mode" (a mode's name, any
 * case; another text is ignored). Counts must be non-negative numbers (a fraction is cut);
 * other fields are ignored. */
enum {
  KOLO_JOB_PROGRESS_STEP = 1u << 0,
  KOLO_JOB_PROGRESS_TOTAL_STEPS = 1u << 1,
  KOLO_JOB_PROGRESS_LOSS = 1u << 2,
  KOLO_JOB_PROGRESS_SAMPLES_PER_SEC = 1u << 3,
  KOLO_JOB_PROGRESS_ACCURACY = 1u << 4,
  KOLO_JOB_PROGRESS_TRAIN_ACCURACY = 1u << 5,
  KOLO_JOB_PROGRESS_TEST_ACCURACY = 1u << 6,
  KOLO_JOB_PROGRESS_ROUNDS = 1u << 7,
  KOLO_JOB_PROGRESS_BYTES_SENT = 1u << 8,
  KOLO_JOB_PROGRESS_STALENESS = 1u << 9,
  KOLO_JOB_PROGRESS_BLOCKED_SECONDS = 1u << 10,
  KOLO_JOB_PROGRESS_MODE = 1u << 11,
};
typedef struct kolo_job_progress {
  unsigned present; /* KOLO_JOB_PROGRESS_* of the fields below that were reported */
  uint64_t step, total_steps;
  double loss, samples_per_sec, accuracy, train_accuracy, test_accuracy;
  uint64_t rounds, bytes_sent;
  double staleness, blocked_seconds;
  const char *mode; /* a static name ("DILOCO"); NULL when not reported */
} kolo_job_progress;
kolo_job_progress kolo_job_progress_from_report(const Kolo__V1__Struct *progress);

/* Overwrites the reported fields of st's progress (the others stay). Returns 1 if any
 * value changed (then updated_unix_ms = now_ms), 0 if not, -1 when out of memory. */
int kolo_job_status_merge_progress(Kolo__V1__JobStatus *st, const kolo_job_progress *p,
                                   int64_t now_ms);

/* The end: SUCCEEDED or FAILED (error = message when FAILED), finished now, the last
 * progress merged (p may be NULL). KOLO_ERR_STATE if st is final already,
 * KOLO_ERR_INVALID_ARG for another phase. */
kolo_status kolo_job_status_finish(Kolo__V1__JobStatus *st, Kolo__V1__Phase phase,
                                   const char *message, const kolo_job_progress *p, int64_t now_ms);

#endif
