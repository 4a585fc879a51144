/* A job spec's training mode (kolo.v1.JobSpec's mode and its parameters) as the C API's
 * kolo_mode_spec (include/kolo/mode.h): the one mapping kolo-server validates at submit,
 * maps to kolo-train's flags, and kolo-worker's agent turns into the KOLO_MODE*
 * environment of every process it starts, so the three can never disagree. Pure. */
#ifndef KOLO_COORD_JOB_MODE_H
#define KOLO_COORD_JOB_MODE_H

#include <stddef.h>

#include "kolo/mode.h"
#include "kolo/status.h"
#include "kolo/v1/job.pb-c.h"

/* The mode's defaults (kolo_mode_spec_default; MODE_UNSPECIFIED is SYNC) with every
 * parameter the spec gives applied. A parameter given for a mode that does not use it, or
 * out of its range, is KOLO_ERR_INVALID_ARG with "<field>: <why>" in err (may be NULL),
 * naming the spec's field (e.g. "average_every: only for modes ASYNC, LOCAL_SGD and
 * DILOCO (mode is SYNC)"). */
kolo_status kolo_job_mode_spec(const Kolo__V1__JobSpec *spec, kolo_mode_spec *out, char *err,
                               size_t err_len);

#endif
