/* A job spec's training mode (kolo.v1.JobSpec's mode and its parameters) as the C API's
 * kolo_mode_spec (include/kolo/mode.h): the one mapping kolo-server validates at submit,
 * maps to kolo-train's flags, and kolo-worker's agent turns into the KOLO_MODE*
 * environment of every process it starts (and into kolo-train's flags for builtin jobs),
 * so they can never disagree. Pure. */
#ifndef KOLO_COORD_JOB_MODE_H
#define KOLO_COORD_JOB_MODE_H

#include <stddef.h>

#include "kolo/mode.h"
#include "kolo/status.h"
#include "kolo/v1/job.pb-c.h"

/* The mode's defaults (kolo_mode_spec_default; MODE_UNSPECIFIED is SYNC) with every
 * parameter the spec gives applied (0, or an absent outer_*, = the default). A parameter
 * given for a mode that does not use it, or out of its range, is KOLO_ERR_INVALID_ARG with
 * "<field>: <why>" in err (may be NULL), naming the spec's field, e.g. "max_staleness: only
 * for mode ASYNC (mode is DILOCO)" or "outer_momentum: must be in [0, 1), got 1". */
kolo_status kolo_job_mode_spec(const Kolo__V1__JobSpec *spec, kolo_mode_spec *out, char *err,
                               size_t err_len);

#define KOLO_JOB_MODE_MAX_FLAGS 8

/* One kolo-train flag and the spec field it comes from. */
typedef struct kolo_job_mode_flag {
  const char *field; /* "mode", "average_every", ... */
  char flag[64];     /* "--mode=diloco" */
} kolo_job_mode_flag;

/* kolo-train's flags for spec (at most KOLO_JOB_MODE_MAX_FLAGS into out; returns how many):
 * none for SYNC; else --mode=<async|local_sgd|diloco> and --average-every=<sync_every>, then
 * --max-staleness, --outer-lr, --outer-momentum, --nesterov=0|1, --compression, --fragments
 * only where the value differs from the mode's default (kolo-train defaults to the same). */
size_t kolo_job_mode_train_flags(const kolo_mode_spec *spec, kolo_job_mode_flag *out);

#endif
