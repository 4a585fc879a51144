/* Implementation of job_mode.h: the spec's fields onto the mode's defaults, each checked
 * against the modes that use it, then kolo_mode_spec_validate for the ranges. */
#include "coordination/job_mode.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* kolo_mode_spec's parameter names (what kolo_mode_spec_validate's messages start with) and
 * the job spec's fields of the same meaning. */
static const struct {
  const char *param, *field;
} fields[] = {{"sync_every", "average_every"},
              {"outer_lr", "outer_learning_rate"},
              {"nesterov", "outer_nesterov"}};

static kolo_status fail(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static kolo_status fail(char *err, size_t err_len, const char *fmt, ...) {
  if (err != NULL && err_len > 0) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(err, err_len, fmt, args);
    va_end(args);
  }
  return KOLO_ERR_INVALID_ARG;
}

kolo_status kolo_job_mode_spec(const Kolo__V1__JobSpec *spec, kolo_mode_spec *out, char *err,
                               size_t err_len) {
  if (spec == NULL || out == NULL) return fail(err, err_len, "no job spec");
  kolo_mode mode =
      spec->mode == KOLO__V1__MODE__MODE_UNSPECIFIED ? KOLO_MODE_SYNC : (kolo_mode)spec->mode;
  kolo_mode_spec s;
  if (kolo_mode_spec_default(mode, &s) != KOLO_OK)
    return fail(err, err_len, "mode: %d is not a mode (want SYNC, ASYNC, LOCAL_SGD or DILOCO)",
                (int)spec->mode);
  const char *name = kolo_mode_name(mode);
  if (spec->average_every != 0) {
    if (mode == KOLO_MODE_SYNC)
      return fail(err, err_len,
                  "average_every: only for modes ASYNC, LOCAL_SGD and DILOCO (mode is %s)", name);
    s.sync_every = spec->average_every;
  }
  char why[200];
  if (kolo_mode_spec_validate(&s, why, sizeof why) != KOLO_OK) {
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
      size_t n = strlen(fields[i].param);
      if (strncmp(why, fields[i].param, n) == 0 && why[n] == ':')
        return fail(err, err_len, "%s%s", fields[i].field, why + n);
    }
    return fail(err, err_len, "%s", why);
  }
  *out = s;
  return KOLO_OK;
}
