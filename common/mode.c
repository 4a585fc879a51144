/* Implementation of include/kolo/mode.h (names, defaults, validation, the KOLO_MODE*
 * environment) and of common/mode_env.h. Pure functions over the spec and getenv; in
 * kolo_common, so libkolo exports them and kolo's own programs (the agent, kolorun,
 * kolo-server) use the same names and checks without the data plane. The acknowledgement
 * itself, which talks to the agent, is kolo_elastic_acknowledge_mode in collective/. */
#include "kolo/mode.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mode_env.h"

static const char *const mode_names[] = {NULL, "SYNC", "ASYNC", "LOCAL_SGD", "DILOCO"};
static const char *const compression_names[] = {"none", "fp16", "int8"};

const char *const kolo_mode_env_names[KOLO_MODE_ENV_COUNT] = {"KOLO_MODE",
                                                              "KOLO_MODE_SYNC_EVERY",
                                                              "KOLO_MODE_MAX_STALENESS",
                                                              "KOLO_MODE_OUTER_LR",
                                                              "KOLO_MODE_OUTER_MOMENTUM",
                                                              "KOLO_MODE_NESTEROV",
                                                              "KOLO_MODE_COMPRESSION",
                                                              "KOLO_MODE_FRAGMENTS"};

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

const char *kolo_mode_name(kolo_mode mode) {
  return mode >= KOLO_MODE_SYNC && mode <= KOLO_MODE_DILOCO ? mode_names[mode] : "?";
}

/* Whether text names name, ignoring case and reading '-' as '_'. */
static int same_name(const char *text, const char *name) {
  for (; *text && *name; text++, name++) {
    char c = *text == '-' ? '_' : (char)toupper((unsigned char)*text);
    if (c != toupper((unsigned char)*name)) return 0;
  }
  return *text == '\0' && *name == '\0';
}

kolo_status kolo_mode_parse(const char *name, kolo_mode *out) {
  if (name == NULL || out == NULL) return KOLO_ERR_INVALID_ARG;
  for (int m = KOLO_MODE_SYNC; m <= KOLO_MODE_DILOCO; m++) {
    if (same_name(name, mode_names[m])) {
      *out = (kolo_mode)m;
      return KOLO_OK;
    }
  }
  return KOLO_ERR_INVALID_ARG;
}

const char *kolo_compression_name(kolo_compression compression) {
  return compression >= KOLO_COMPRESSION_NONE && compression <= KOLO_COMPRESSION_INT8
             ? compression_names[compression]
             : "?";
}

kolo_status kolo_compression_parse(const char *name, kolo_compression *out) {
  if (name == NULL || out == NULL) return KOLO_ERR_INVALID_ARG;
  for (int c = KOLO_COMPRESSION_NONE; c <= KOLO_COMPRESSION_INT8; c++) {
    if (same_name(name, compression_names[c])) {
      *out = (kolo_compression)c;
      return KOLO_OK;
    }
  }
  return KOLO_ERR_INVALID_ARG;
}

kolo_status kolo_mode_spec_default(kolo_mode mode, kolo_mode_spec *out) {
  if (out == NULL || mode < KOLO_MODE_SYNC || mode > KOLO_MODE_DILOCO) return KOLO_ERR_INVALID_ARG;
  *out = (kolo_mode_spec){.mode = mode,
                          .sync_every = 1,
                          .max_staleness = 0,
                          .outer_lr = 1.0,
                          .outer_momentum = 0.0,
                          .nesterov = 0,
                          .compression = KOLO_COMPRESSION_NONE,
                          .fragments = 1};
  if (mode == KOLO_MODE_ASYNC) {
    out->sync_every = 8;
    out->max_staleness = 1;
  } else if (mode == KOLO_MODE_LOCAL_SGD) {
    out->sync_every = 50;
  } else if (mode == KOLO_MODE_DILOCO) {
    out->sync_every = 50;
    out->outer_lr = 0.7;
    out->outer_momentum = 0.9;
    out->nesterov = 1;
  }
  return KOLO_OK;
}

/* The checks of the outer optimizer (LOCAL_SGD: fixed at 1 / 0 / no Nesterov). */
static kolo_status validate_outer(const kolo_mode_spec *s, char *err, size_t err_len) {
  const char *mode = kolo_mode_name(s->mode);
  if (s->mode != KOLO_MODE_DILOCO) {
    if (s->outer_lr != 1.0 || s->outer_momentum != 0.0 || s->nesterov != 0)
      return fail(err, err_len,
                  "outer_lr, outer_momentum, nesterov: mode %s has no outer optimizer "
                  "(its outer step is plain averaging: lr 1, momentum 0); use DILOCO",
                  mode);
    return KOLO_OK;
  }
  if (!(s->outer_lr > 0.0 && s->outer_lr <= KOLO_MODE_MAX_OUTER_LR))
    return fail(err, err_len, "outer_lr: must be in (0, %g], got %g", KOLO_MODE_MAX_OUTER_LR,
                s->outer_lr);
  if (!(s->outer_momentum >= 0.0 && s->outer_momentum < 1.0))
    return fail(err, err_len, "outer_momentum: must be in [0, 1), got %g", s->outer_momentum);
  if (s->nesterov != 0 && s->nesterov != 1)
    return fail(err, err_len, "nesterov: must be 0 or 1, got %d", s->nesterov);
  return KOLO_OK;
}

kolo_status kolo_mode_spec_validate(const kolo_mode_spec *s, char *err, size_t err_len) {
  if (s == NULL) return fail(err, err_len, "no mode spec");
  if (s->mode < KOLO_MODE_SYNC || s->mode > KOLO_MODE_DILOCO)
    return fail(err, err_len, "mode: %d is not a mode (want SYNC, ASYNC, LOCAL_SGD or DILOCO)",
                (int)s->mode);
  const char *mode = kolo_mode_name(s->mode);
  int rounds = s->mode == KOLO_MODE_LOCAL_SGD || s->mode == KOLO_MODE_DILOCO;
  if (s->mode == KOLO_MODE_SYNC && s->sync_every != 1)
    return fail(err, err_len, "sync_every: mode SYNC syncs every step (got %u)", s->sync_every);
  if (s->sync_every < 1 || s->sync_every > KOLO_MODE_MAX_SYNC_EVERY)
    return fail(err, err_len, "sync_every: must be in [1, %u], got %u", KOLO_MODE_MAX_SYNC_EVERY,
                s->sync_every);
  if (s->mode == KOLO_MODE_ASYNC &&
      (s->max_staleness < 1 || s->max_staleness > KOLO_MODE_MAX_STALENESS))
    return fail(err, err_len, "max_staleness: must be in [1, %u], got %u", KOLO_MODE_MAX_STALENESS,
                s->max_staleness);
  if (rounds && s->max_staleness > KOLO_MODE_MAX_STALENESS)
    return fail(err, err_len, "max_staleness: must be in [0, %u], got %u", KOLO_MODE_MAX_STALENESS,
                s->max_staleness);
  if (s->mode == KOLO_MODE_SYNC && s->max_staleness != 0)
    return fail(err, err_len,
                "max_staleness: only modes ASYNC, LOCAL_SGD and DILOCO have one (mode is %s)",
                mode);
  kolo_status status = validate_outer(s, err, err_len);
  if (status != KOLO_OK) return status;
  if (s->compression < KOLO_COMPRESSION_NONE || s->compression > KOLO_COMPRESSION_INT8)
    return fail(err, err_len, "compression: %d is not a compression (want none, fp16 or int8)",
                (int)s->compression);
  if (!rounds && s->compression != KOLO_COMPRESSION_NONE)
    return fail(err, err_len, "compression: only modes LOCAL_SGD and DILOCO compress (mode is %s)",
                mode);
  if (!rounds && s->fragments != 1)
    return fail(err, err_len,
                "fragments: only modes LOCAL_SGD and DILOCO stream fragments (mode is %s)", mode);
  uint32_t most = s->sync_every < KOLO_MODE_MAX_FRAGMENTS ? s->sync_every : KOLO_MODE_MAX_FRAGMENTS;
  if (s->fragments < 1 || s->fragments > most)
    return fail(err, err_len, "fragments: must be in [1, %u] (at most sync_every), got %u", most,
                s->fragments);
  return KOLO_OK;
}

/* ---- the environment ---- */

enum {
  ENV_MODE,
  ENV_SYNC_EVERY,
  ENV_MAX_STALENESS,
  ENV_OUTER_LR,
  ENV_OUTER_MOMENTUM,
  ENV_NESTEROV,
  ENV_COMPRESSION,
  ENV_FRAGMENTS
};

static kolo_status env_u32(const char *name, const char *text, uint32_t *out, char *err,
                           size_t err_len) {
  size_t n = strspn(text, "0123456789");
  errno = 0;
  unsigned long long value = n > 0 && n <= 10 && text[n] == '\0' ? strtoull(text, NULL, 10) : 0;
  if (n == 0 || n > 10 || text[n] != '\0' || errno != 0 || value > UINT32_MAX)
    return fail(err, err_len, "%s: '%.40s' is not a whole number", name, text);
  *out = (uint32_t)value;
  return KOLO_OK;
}

static kolo_status env_double(const char *name, const char *text, double *out, char *err,
                              size_t err_len) {
  char *end = NULL;
  errno = 0;
  double value = strtod(text, &end);
  if (text[0] == '\0' || isspace((unsigned char)text[0]) || *end != '\0' || errno != 0 ||
      !isfinite(value))
    return fail(err, err_len, "%s: '%.40s' is not a number", name, text);
  *out = value;
  return KOLO_OK;
}

/* Reads variable i into the scratch spec *s; every variable is read, used or not. */
static kolo_status env_read(int i, const char *text, kolo_mode_spec *s, char *err, size_t err_len) {
  const char *name = kolo_mode_env_names[i];
  uint32_t nesterov = 0;
  kolo_status status = KOLO_OK;
  switch (i) {
    case ENV_SYNC_EVERY:
      return env_u32(name, text, &s->sync_every, err, err_len);
    case ENV_MAX_STALENESS:
      return env_u32(name, text, &s->max_staleness, err, err_len);
    case ENV_OUTER_LR:
      return env_double(name, text, &s->outer_lr, err, err_len);
    case ENV_OUTER_MOMENTUM:
      return env_double(name, text, &s->outer_momentum, err, err_len);
    case ENV_NESTEROV:
      status = env_u32(name, text, &nesterov, err, err_len);
      if (status == KOLO_OK && nesterov > 1)
        return fail(err, err_len, "%s: '%.40s' is not 0 or 1", name, text);
      s->nesterov = (int)nesterov;
      return status;
    case ENV_COMPRESSION:
      if (kolo_compression_parse(text, &s->compression) != KOLO_OK)
        return fail(err, err_len, "%s: '%.40s' is not none, fp16 or int8", name, text);
      return KOLO_OK;
    case ENV_FRAGMENTS:
      return env_u32(name, text, &s->fragments, err, err_len);
    default:
      return KOLO_OK;
  }
}

/* Whether mode uses variable i (the others keep the mode's defaults). */
static int env_used(kolo_mode mode, int i) {
  switch (i) {
    case ENV_SYNC_EVERY:
      return mode != KOLO_MODE_SYNC;
    case ENV_MAX_STALENESS:
      return mode != KOLO_MODE_SYNC;
    case ENV_OUTER_LR:
    case ENV_OUTER_MOMENTUM:
    case ENV_NESTEROV:
      return mode == KOLO_MODE_DILOCO;
    case ENV_COMPRESSION:
    case ENV_FRAGMENTS:
      return mode == KOLO_MODE_LOCAL_SGD || mode == KOLO_MODE_DILOCO;
    default:
      return 0;
  }
}

kolo_status kolo_mode_from_env(kolo_mode_spec *out, char *err, size_t err_len) {
  if (out == NULL) return fail(err, err_len, "no spec to fill");
  if (err != NULL && err_len > 0) err[0] = '\0';
  kolo_mode mode = KOLO_MODE_SYNC;
  const char *text = getenv("KOLO_MODE");
  if (text != NULL && text[0] != '\0' && kolo_mode_parse(text, &mode) != KOLO_OK)
    return fail(err, err_len,
                "KOLO_MODE: '%.40s' is not a mode (want SYNC, ASYNC, LOCAL_SGD or DILOCO)", text);
  kolo_mode_spec spec, scratch;
  kolo_mode_spec_default(mode, &spec);
  for (int i = ENV_SYNC_EVERY; i < KOLO_MODE_ENV_COUNT; i++) {
    text = getenv(kolo_mode_env_names[i]);
    if (text == NULL) continue;
    scratch = spec;
    kolo_status status = env_read(i, text, &scratch, err, err_len);
    if (status != KOLO_OK) return status;
    if (env_used(mode, i)) spec = scratch;
  }
  char why[200];
  if (kolo_mode_spec_validate(&spec, why, sizeof why) != KOLO_OK)
    return fail(err, err_len, "KOLO_MODE* (mode %s): %s", kolo_mode_name(mode), why);
  *out = spec;
  return KOLO_OK;
}

/* A double that reads back as the same value, in as few digits as that takes. */
static void format_double(char *out, size_t len, const char *name, double value) {
  for (int digits = 6; digits <= 17; digits++) {
    snprintf(out, len, "%s=%.*g", name, digits, value);
    if (strtod(strchr(out, '=') + 1, NULL) == value) return;
  }
}

kolo_status kolo_mode_env_format(const kolo_mode_spec *s, kolo_mode_env *out) {
  if (out == NULL || kolo_mode_spec_validate(s, NULL, 0) != KOLO_OK) return KOLO_ERR_INVALID_ARG;
  const char *const *n = kolo_mode_env_names;
  size_t len = sizeof out->entries[0];
  snprintf(out->entries[ENV_MODE], len, "%s=%s", n[ENV_MODE], kolo_mode_name(s->mode));
  snprintf(out->entries[ENV_SYNC_EVERY], len, "%s=%u", n[ENV_SYNC_EVERY], s->sync_every);
  snprintf(out->entries[ENV_MAX_STALENESS], len, "%s=%u", n[ENV_MAX_STALENESS], s->max_staleness);
  format_double(out->entries[ENV_OUTER_LR], len, n[ENV_OUTER_LR], s->outer_lr);
  format_double(out->entries[ENV_OUTER_MOMENTUM], len, n[ENV_OUTER_MOMENTUM], s->outer_momentum);
  snprintf(out->entries[ENV_NESTEROV], len, "%s=%d", n[ENV_NESTEROV], s->nesterov);
  snprintf(out->entries[ENV_COMPRESSION], len, "%s=%s", n[ENV_COMPRESSION],
           kolo_compression_name(s->compression));
  snprintf(out->entries[ENV_FRAGMENTS], len, "%s=%u", n[ENV_FRAGMENTS], s->fragments);
  return KOLO_OK;
}
