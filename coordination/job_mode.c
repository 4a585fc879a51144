/* Implementation of job_mode.h: the spec's fields onto the mode's defaults, each checked
 * against the modes that use it, then kolo_mode_spec_validate for the ranges. */
#include "coordination/job_mode.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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

/* "only for mode(s) <which> (mode is <mode>)", with a hint for LOCAL_SGD's outer optimizer. */
static kolo_status not_for(char *err, size_t err_len, const char *field, const char *which,
                           kolo_mode mode) {
  const char *hint = mode == KOLO_MODE_LOCAL_SGD && strncmp(field, "outer_", 6) == 0
                         ? "; LOCAL_SGD is DILOCO with outer_learning_rate 1 and outer_momentum 0"
                         : "";
  return fail(err, err_len, "%s: only for %s (mode is %s%s)", field, which, kolo_mode_name(mode),
              hint);
}

/* The outer optimizer's fields: DILOCO only. */
static kolo_status apply_outer(const Kolo__V1__JobSpec *spec, kolo_mode_spec *s, char *err,
                               size_t err_len) {
  const char *diloco = "mode DILOCO";
  if (spec->outer_learning_rate_given_case ==
      KOLO__V1__JOB_SPEC__OUTER_LEARNING_RATE_GIVEN_OUTER_LEARNING_RATE) {
    if (s->mode != KOLO_MODE_DILOCO)
      return not_for(err, err_len, "outer_learning_rate", diloco, s->mode);
    s->outer_lr = spec->outer_learning_rate;
  }
  if (spec->outer_momentum_given_case == KOLO__V1__JOB_SPEC__OUTER_MOMENTUM_GIVEN_OUTER_MOMENTUM) {
    if (s->mode != KOLO_MODE_DILOCO)
      return not_for(err, err_len, "outer_momentum", diloco, s->mode);
    s->outer_momentum = spec->outer_momentum;
  }
  if (spec->outer_nesterov_given_case == KOLO__V1__JOB_SPEC__OUTER_NESTEROV_GIVEN_OUTER_NESTEROV) {
    if (s->mode != KOLO_MODE_DILOCO)
      return not_for(err, err_len, "outer_nesterov", diloco, s->mode);
    s->nesterov = spec->outer_nesterov ? 1 : 0;
  }
  return KOLO_OK;
}

/* Every parameter the spec gives, checked against the modes that use it. */
static kolo_status apply(const Kolo__V1__JobSpec *spec, kolo_mode_spec *s, char *err,
                         size_t err_len) {
  kolo_mode mode = s->mode;
  int rounds = mode == KOLO_MODE_LOCAL_SGD || mode == KOLO_MODE_DILOCO;
  const char *round_modes = "modes LOCAL_SGD and DILOCO";
  if (spec->average_every != 0) {
    if (mode == KOLO_MODE_SYNC)
      return not_for(err, err_len, "average_every", "modes ASYNC, LOCAL_SGD and DILOCO", mode);
    s->sync_every = spec->average_every;
  }
  if (spec->max_staleness != 0) {
    if (mode == KOLO_MODE_SYNC)
      return not_for(err, err_len, "max_staleness", "modes ASYNC, LOCAL_SGD and DILOCO", mode);
    s->max_staleness = spec->max_staleness;
  }
  kolo_status status = apply_outer(spec, s, err, err_len);
  if (status != KOLO_OK) return status;
  if (spec->compression != KOLO__V1__COMPRESSION__COMPRESSION_NONE) {
    if (!rounds) return not_for(err, err_len, "compression", round_modes, mode);
    if (kolo_compression_name((kolo_compression)spec->compression)[0] == '?')
      return fail(err, err_len, "compression: %d is not a compression", (int)spec->compression);
    s->compression = (kolo_compression)spec->compression;
  }
  if (spec->fragments != 0) {
    if (!rounds) return not_for(err, err_len, "fragments", round_modes, mode);
    s->fragments = spec->fragments;
  }
  return KOLO_OK;
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
  kolo_status status = apply(spec, &s, err, err_len);
  if (status != KOLO_OK) return status;
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

/* A double as few digits as read back exactly. */
static void format_double(char *out, size_t len, const char *flag, double value) {
  for (int digits = 6; digits <= 17; digits++) {
    snprintf(out, len, "%s=%.*g", flag, digits, value);
    if (strtod(strchr(out, '=') + 1, NULL) == value) return;
  }
}

size_t kolo_job_mode_train_flags(const kolo_mode_spec *s, kolo_job_mode_flag *out) {
  size_t n = 0;
  if (s->mode == KOLO_MODE_SYNC) return 0;
  kolo_mode_spec d;
  kolo_mode_spec_default(s->mode, &d);
  char name[16];
  snprintf(name, sizeof name, "%s", kolo_mode_name(s->mode));
  for (char *c = name; *c; c++) *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
  out[n].field = "mode";
  snprintf(out[n++].flag, sizeof out->flag, "--mode=%s", name);
  out[n].field = "average_every";
  snprintf(out[n++].flag, sizeof out->flag, "--average-every=%u", s->sync_every);
  if (s->max_staleness != d.max_staleness) {
    out[n].field = "max_staleness";
    snprintf(out[n++].flag, sizeof out->flag, "--max-staleness=%u", s->max_staleness);
  }
  if (s->outer_lr != d.outer_lr) {
    out[n].field = "outer_learning_rate";
    format_double(out[n++].flag, sizeof out->flag, "--outer-lr", s->outer_lr);
  }
  if (s->outer_momentum != d.outer_momentum) {
    out[n].field = "outer_momentum";
    format_double(out[n++].flag, sizeof out->flag, "--outer-momentum", s->outer_momentum);
  }
  if (s->nesterov != d.nesterov) {
    out[n].field = "outer_nesterov";
    snprintf(out[n++].flag, sizeof out->flag, "--nesterov=%d", s->nesterov);
  }
  if (s->compression != d.compression) {
    out[n].field = "compression";
    snprintf(out[n++].flag, sizeof out->flag, "--compression=%s",
             kolo_compression_name(s->compression));
  }
  if (s->fragments != d.fragments) {
    out[n].field = "fragments";
    snprintf(out[n++].flag, sizeof out->flag, "--fragments=%u", s->fragments);
  }
  return n;
}
