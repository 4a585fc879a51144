/* Implementation of coordination/job_status.h: the job status's transitions over
 * kolo.v1.JobStatus, and its JSON through the one codec. */
#include "coordination/job_status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "kolo/mode.h"

int kolo_job_status_final(Kolo__V1__Phase phase) {
  return phase == KOLO__V1__PHASE__SUCCEEDED || phase == KOLO__V1__PHASE__FAILED ||
         phase == KOLO__V1__PHASE__CANCELLED;
}

int kolo_job_status_scheduled(const Kolo__V1__JobStatus *st) {
  if (st == NULL) return 0;
  return st->phase == KOLO__V1__PHASE__RUNNING || st->phase == KOLO__V1__PHASE__RECONFIGURING ||
         (st->phase == KOLO__V1__PHASE__PENDING && st->epoch > 0 && st->n_members > 0);
}

int kolo_job_status_allowed(Kolo__V1__Phase from, Kolo__V1__Phase to) {
  if (from == to || kolo_job_status_final(from)) return 0;
  if (to == KOLO__V1__PHASE__FAILED || to == KOLO__V1__PHASE__CANCELLED) return 1;
  switch (from) {
    case KOLO__V1__PHASE__PENDING:
      /* RUNNING when the first ring formed; RECONFIGURING when it lost a member or
       * stalled first; SUCCEEDED when rank 0 ended before one formed (a program without
       * libkolo forms none) */
      return to == KOLO__V1__PHASE__RUNNING || to == KOLO__V1__PHASE__RECONFIGURING ||
             to == KOLO__V1__PHASE__SUCCEEDED;
    case KOLO__V1__PHASE__RUNNING:
      return to == KOLO__V1__PHASE__RECONFIGURING || to == KOLO__V1__PHASE__SUCCEEDED ||
             to == KOLO__V1__PHASE__PENDING;
    case KOLO__V1__PHASE__RECONFIGURING:
      return to == KOLO__V1__PHASE__RUNNING || to == KOLO__V1__PHASE__PENDING;
    default:
      return 0;
  }
}

kolo_status kolo_job_status_read(const char *text, size_t len, Kolo__V1__JobStatus **out, char *err,
                                 size_t err_len) {
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  kolo_status rc = kolo_codec_read(text, len, &kolo__v1__job_status__descriptor,
                                   KOLO_CODEC_IGNORE_UNKNOWN, &msg, &fault);
  if (rc != KOLO_OK && err && err_len) snprintf(err, err_len, "job status: %s", fault.message);
  *out = (Kolo__V1__JobStatus *)msg;
  return rc;
}

char *kolo_job_status_write(const Kolo__V1__JobStatus *st) {
  return kolo_codec_dump(&st->base, 0);
}

void kolo_job_status_submitted(Kolo__V1__JobStatus *st, uint32_t min_workers, uint32_t max_workers,
                               int64_t now_ms) {
  st->phase = KOLO__V1__PHASE__PENDING;
  st->created_unix_ms = now_ms;
  st->updated_unix_ms = now_ms;
  st->min_workers = min_workers;
  st->max_workers = max_workers;
}

static kolo_status note_waiting(Kolo__V1__JobStatus *st, int64_t now_ms);

kolo_status kolo_job_status_cancel(Kolo__V1__JobStatus *st, const char *message, int64_t now_ms) {
  if (!kolo_job_status_allowed(st->phase, KOLO__V1__PHASE__CANCELLED)) return KOLO_ERR_STATE;
  if (kolo_codec_set_string(&st->error, message) != KOLO_OK) return KOLO_ERR_NO_MEMORY;
  st->phase = KOLO__V1__PHASE__CANCELLED;
  st->finished_unix_ms = now_ms;
  st->updated_unix_ms = now_ms;
  return note_waiting(st, now_ms);
}

/* RECONFIGURING with fewer members than min_workers: the survivors wait for workers
 * (st->waiting, its "since" kept from when the wait began); anything else clears it. */
static kolo_status note_waiting(Kolo__V1__JobStatus *st, int64_t now_ms) {
  uint32_t need = st->min_workers ? st->min_workers : 1;
  if (st->phase != KOLO__V1__PHASE__RECONFIGURING || st->n_members >= need) {
    if (st->waiting) protobuf_c_message_free_unpacked(&st->waiting->base, NULL);
    st->waiting = NULL;
    return KOLO_OK;
  }
  if (st->waiting == NULL) {
    st->waiting = malloc(sizeof *st->waiting);
    if (st->waiting == NULL) return KOLO_ERR_NO_MEMORY;
    kolo__v1__waiting_for_workers__init(st->waiting);
    st->waiting->since_unix_ms = now_ms;
  }
  st->waiting->have = (uint32_t)st->n_members;
  st->waiting->need = need;
  return KOLO_OK;
}

kolo_status kolo_job_status_scale(Kolo__V1__JobStatus *st, uint32_t min_workers,
                                  uint32_t max_workers, int64_t now_ms) {
  if (kolo_job_status_final(st->phase)) return KOLO_ERR_STATE;
  st->min_workers = min_workers;
  st->max_workers = max_workers;
  st->updated_unix_ms = now_ms;
  return note_waiting(st, now_ms);
}

void kolo_job_cancel_message(const char *reason, char *out, size_t len) {
  snprintf(out, len, "cancelled%s%.256s", reason && reason[0] ? ": " : "", reason ? reason : "");
}

void kolo_job_scale_message(uint32_t from_min, uint32_t from_max, uint32_t to_min, uint32_t to_max,
                            char *out, size_t len) {
  snprintf(out, len, "scaled from %u-%u to %u-%u workers", from_min, from_max, to_min, to_max);
}

/* Applies one intent to st; 1 with *ev filled, 0 if it does not apply, -1 out of memory. */
static int apply_intent(Kolo__V1__JobStatus *st, const Kolo__V1__JobIntent *in,
                        kolo_job_intent_event *ev) {
  kolo_status rc;
  if (in->cancel) {
    kolo_job_cancel_message(in->cancel->reason, ev->message, sizeof ev->message);
    ev->type = "CANCELLED";
    ev->time_unix_ms = in->cancel->time_unix_ms;
    rc = kolo_job_status_cancel(st, ev->message, ev->time_unix_ms);
  } else if (in->scale && in->scale->min_workers > 0) {
    const Kolo__V1__ScaleIntent *sc = in->scale;
    uint32_t max = sc->max_workers > sc->min_workers ? sc->max_workers : sc->min_workers;
    kolo_job_scale_message(st->min_workers, st->max_workers, sc->min_workers, max, ev->message,
                           sizeof ev->message);
    ev->type = "SCALED";
    ev->time_unix_ms = sc->time_unix_ms;
    rc = kolo_job_status_scale(st, sc->min_workers, max, ev->time_unix_ms);
  } else {
    return 0;
  }
  if (rc == KOLO_ERR_NO_MEMORY) return -1;
  return rc == KOLO_OK;
}

int kolo_job_status_apply_intents(Kolo__V1__JobStatus *st,
                                  const Kolo__V1__JobIntent *const *intents, size_t n,
                                  kolo_job_intent_event *events, int *applied) {
  int count = 0;
  for (size_t i = 0; i < n; i++) {
    int took = apply_intent(st, intents[i], &events[count]);
    if (took < 0) return -1;
    if (applied) applied[i] = took;
    count += took;
  }
  return count;
}

static void free_members(Kolo__V1__Member **members, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (members[i]) protobuf_c_message_free_unpacked(&members[i]->base, NULL);
  free(members);
}

kolo_status kolo_job_status_move(Kolo__V1__JobStatus *st, Kolo__V1__Phase phase,
                                 Kolo__V1__Member **members, size_t n, int count_reconfiguration,
                                 uint32_t count_drains, int64_t now_ms) {
  if (phase <= KOLO__V1__PHASE__PHASE_UNSPECIFIED || phase > KOLO__V1__PHASE__CANCELLED)
    return KOLO_ERR_INVALID_ARG;
  if (kolo_job_status_final(st->phase)) return KOLO_ERR_STATE;
  st->phase = phase;
  if (members != NULL) {
    free_members(st->members, st->n_members);
    st->members = members;
    st->n_members = n;
  }
  if (count_reconfiguration) st->reconfigurations++;
  st->drains += count_drains;
  st->updated_unix_ms = now_ms;
  return note_waiting(st, now_ms);
}

kolo_status kolo_job_status_epoch(Kolo__V1__JobStatus *st, Kolo__V1__Phase phase, uint64_t epoch,
                                  Kolo__V1__Member **members, size_t n, int count_reconfiguration,
                                  uint32_t count_drains, int64_t now_ms) {
  kolo_status rc =
      kolo_job_status_move(st, phase, members, n, count_reconfiguration, count_drains, now_ms);
  if (rc != KOLO_OK) return rc;
  st->epoch = epoch;
  if (st->started_unix_ms == 0) st->started_unix_ms = now_ms;
  return KOLO_OK;
}

kolo_status kolo_job_status_count_false_losses(Kolo__V1__JobStatus *st, uint32_t n) {
  if (kolo_job_status_final(st->phase)) return KOLO_ERR_STATE;
  st->false_losses = n > UINT32_MAX - st->false_losses ? UINT32_MAX : st->false_losses + n;
  return KOLO_OK;
}

/* A reported number under name, else under alias (may be NULL); 1 if there was one. */
static int reported(const Kolo__V1__Struct *progress, const char *name, const char *alias,
                    double *out) {
  return kolo_codec_struct_number(progress, name, out) ||
         (alias && kolo_codec_struct_number(progress, alias, out));
}

/* A step count: a number 0..2^64 (fractions cut; exact up to 2^53, as a double holds it). */
static int reported_count(const Kolo__V1__Struct *progress, const char *name, const char *alias,
                          uint64_t *out) {
  double d;
  if (!reported(progress, name, alias, &d) || d < 0 || d >= 18446744073709551616.0) return 0;
  *out = (uint64_t)d;
  return 1;
}

kolo_job_progress kolo_job_progress_from_report(const Kolo__V1__Struct *progress) {
  kolo_job_progress p;
  memset(&p, 0, sizeof p);
  if (progress == NULL) return p;
  if (reported_count(progress, "step", "steps", &p.step)) p.present |= KOLO_JOB_PROGRESS_STEP;
  if (reported_count(progress, "total_steps", NULL, &p.total_steps))
    p.present |= KOLO_JOB_PROGRESS_TOTAL_STEPS;
  if (reported(progress, "loss", NULL, &p.loss)) p.present |= KOLO_JOB_PROGRESS_LOSS;
  if (reported(progress, "samples_per_sec", "samples_per_sec_total", &p.samples_per_sec))
    p.present |= KOLO_JOB_PROGRESS_SAMPLES_PER_SEC;
  if (reported(progress, "accuracy", "train_accuracy", &p.accuracy))
    p.present |= KOLO_JOB_PROGRESS_ACCURACY;
  if (reported(progress, "train_accuracy", NULL, &p.train_accuracy))
    p.present |= KOLO_JOB_PROGRESS_TRAIN_ACCURACY;
  if (reported(progress, "test_accuracy", NULL, &p.test_accuracy))
    p.present |= KOLO_JOB_PROGRESS_TEST_ACCURACY;
  if (reported_count(progress, "rounds", NULL, &p.rounds)) p.present |= KOLO_JOB_PROGRESS_ROUNDS;
  if (reported_count(progress, "bytes_sent", NULL, &p.bytes_sent))
    p.present |= KOLO_JOB_PROGRESS_BYTES_SENT;
  if (reported(progress, "staleness", NULL, &p.staleness)) p.present |= KOLO_JOB_PROGRESS_STALENESS;
  if (reported(progress, "blocked_seconds", NULL, &p.blocked_seconds))
    p.present |= KOLO_JOB_PROGRESS_BLOCKED_SECONDS;
  const Kolo__V1__Value *mode = kolo_codec_struct_get(progress, "mode");
  kolo_mode parsed;
  if (mode != NULL && mode->kind_case == KOLO__V1__VALUE__KIND_STRING_VALUE &&
      kolo_mode_parse(mode->string_value, &parsed) == KOLO_OK) {
    p.mode = kolo_mode_name(parsed);
    p.present |= KOLO_JOB_PROGRESS_MODE;
  }
  return p;
}

#define MERGE(bit, field)                                \
  do {                                                   \
    if ((p->present & (bit)) && to->field != p->field) { \
      to->field = p->field;                              \
      changed = 1;                                       \
    }                                                    \
  } while (0)

int kolo_job_status_merge_progress(Kolo__V1__JobStatus *st, const kolo_job_progress *p,
                                   int64_t now_ms) {
  if (p == NULL || p->present == 0) return 0;
  if (st->progress == NULL) {
    st->progress = malloc(sizeof *st->progress);
    if (st->progress == NULL) return -1;
    kolo__v1__progress__init(st->progress);
  }
  Kolo__V1__Progress *to = st->progress;
  int changed = 0;
  MERGE(KOLO_JOB_PROGRESS_STEP, step);
  MERGE(KOLO_JOB_PROGRESS_TOTAL_STEPS, total_steps);
  MERGE(KOLO_JOB_PROGRESS_LOSS, loss);
  MERGE(KOLO_JOB_PROGRESS_SAMPLES_PER_SEC, samples_per_sec);
  MERGE(KOLO_JOB_PROGRESS_ACCURACY, accuracy);
  MERGE(KOLO_JOB_PROGRESS_TRAIN_ACCURACY, train_accuracy);
  MERGE(KOLO_JOB_PROGRESS_TEST_ACCURACY, test_accuracy);
  MERGE(KOLO_JOB_PROGRESS_ROUNDS, rounds);
  MERGE(KOLO_JOB_PROGRESS_BYTES_SENT, bytes_sent);
  MERGE(KOLO_JOB_PROGRESS_STALENESS, staleness);
  MERGE(KOLO_JOB_PROGRESS_BLOCKED_SECONDS, blocked_seconds);
  if ((p->present & KOLO_JOB_PROGRESS_MODE) && strcmp(to->mode ? to->mode : "", p->mode) != 0) {
    if (kolo_codec_set_string(&to->mode, p->mode) != KOLO_OK) return -1;
    changed = 1;
  }
  if (changed) st->updated_unix_ms = now_ms;
  return changed;
}

kolo_status kolo_job_status_finish(Kolo__V1__JobStatus *st, Kolo__V1__Phase phase,
                                   const char *message, const kolo_job_progress *p,
                                   int64_t now_ms) {
  if (phase != KOLO__V1__PHASE__SUCCEEDED && phase != KOLO__V1__PHASE__FAILED)
    return KOLO_ERR_INVALID_ARG;
  if (kolo_job_status_final(st->phase)) return KOLO_ERR_STATE;
  if (phase == KOLO__V1__PHASE__FAILED &&
      kolo_codec_set_string(&st->error, message ? message : "") != KOLO_OK)
    return KOLO_ERR_NO_MEMORY;
  if (kolo_job_status_merge_progress(st, p, now_ms) < 0) return KOLO_ERR_NO_MEMORY;
  st->phase = phase;
  st->finished_unix_ms = now_ms;
  st->updated_unix_ms = now_ms;
  return note_waiting(st, now_ms);
}
