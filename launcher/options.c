/* Implementation of options.h: a small hand-written parser (getopt would permute
 * the program's own arguments, which must be passed through untouched). */
#include "launcher/options.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kolo_launcher_usage(void) {
  return "usage: kolorun -np N [--timeout S] [--host H] [--mode M [--sync-every N] "
         "[--max-staleness N] [--outer-lr X] [--outer-momentum X] [--nesterov 0|1] "
         "[--compression none|fp16|int8] [--fragments N]] [--] program [args...]";
}

static kolo_status fail(char *error, size_t error_length, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static kolo_status fail(char *error, size_t error_length, const char *fmt, ...) {
  if (error != NULL && error_length > 0) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(error, error_length, fmt, args);
    va_end(args);
  }
  return KOLO_ERR_INVALID_ARG;
}

/* Matches "name value" or "name=value"; sets *value and advances *index past what it used. */
static int take_value(int argc, char **argv, int *index, const char *name, const char **value,
                      int *missing) {
  const char *arg = argv[*index];
  size_t name_length = strlen(name);
  if (strncmp(arg, name, name_length) != 0) return 0;
  if (arg[name_length] == '=') {
    *value = arg + name_length + 1;
    return 1;
  }
  if (arg[name_length] != '\0') return 0;
  if (*index + 1 >= argc) {
    *missing = 1;
    return 1;
  }
  *index += 1;
  *value = argv[*index];
  return 1;
}

static int parse_nprocs(const char *text, int *out) {
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') return 0;
  if (value < 1 || value > KOLO_LAUNCHER_MAX_RANKS) return 0;
  *out = (int)value;
  return 1;
}

static int parse_seconds(const char *text, double *out) {
  char *end = NULL;
  errno = 0;
  double value = strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !isfinite(value) || value <= 0) return 0;
  if (value > 1e7) return 0;
  *out = value;
  return 1;
}

/* The mode's options, in the order of kolo_mode_spec's fields, and the modes using each. */
enum { SYNC_EVERY, MAX_STALENESS, OUTER_LR, OUTER_MOMENTUM, NESTEROV, COMPRESSION, FRAGMENTS };
static const struct {
  const char *name;
  unsigned modes; /* bit per kolo_mode */
} mode_options[] = {
    {"--sync-every", 1u << KOLO_MODE_ASYNC | 1u << KOLO_MODE_LOCAL_SGD | 1u << KOLO_MODE_DILOCO},
    {"--max-staleness", 1u << KOLO_MODE_ASYNC | 1u << KOLO_MODE_LOCAL_SGD | 1u << KOLO_MODE_DILOCO},
    {"--outer-lr", 1u << KOLO_MODE_DILOCO},
    {"--outer-momentum", 1u << KOLO_MODE_DILOCO},
    {"--nesterov", 1u << KOLO_MODE_DILOCO},
    {"--compression", 1u << KOLO_MODE_LOCAL_SGD | 1u << KOLO_MODE_DILOCO},
    {"--fragments", 1u << KOLO_MODE_LOCAL_SGD | 1u << KOLO_MODE_DILOCO},
};
#define N_MODE_OPTIONS (sizeof mode_options / sizeof mode_options[0])

static int parse_u32(const char *text, uint32_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || value > UINT32_MAX) return 0;
  *out = (uint32_t)value;
  return 1;
}

/* Applies option i's value to the spec; 0 when it does not parse. */
static int apply_mode_option(int i, const char *value, kolo_mode_spec *s) {
  char *end = NULL;
  switch (i) {
    case SYNC_EVERY:
      return parse_u32(value, &s->sync_every);
    case MAX_STALENESS:
      return parse_u32(value, &s->max_staleness);
    case OUTER_LR:
    case OUTER_MOMENTUM: {
      double x = strtod(value, &end);
      if (end == value || *end != '\0' || !isfinite(x)) return 0;
      *(i == OUTER_LR ? &s->outer_lr : &s->outer_momentum) = x;
      return 1;
    }
    case NESTEROV:
      if (strcmp(value, "0") != 0 && strcmp(value, "1") != 0) return 0;
      s->nesterov = value[0] == '1';
      return 1;
    case COMPRESSION:
      return kolo_compression_parse(value, &s->compression) == KOLO_OK;
    default:
      return parse_u32(value, &s->fragments);
  }
}

/* --mode and the options given with it (values[i], NULL = not given) as out->mode. */
static kolo_status build_mode(const char *mode_name, const char *const *values,
                              kolo_launcher_options *out, char *error, size_t error_length) {
  kolo_mode mode = KOLO_MODE_SYNC;
  for (size_t i = 0; i < N_MODE_OPTIONS && mode_name == NULL; i++)
    if (values[i] != NULL)
      return fail(error, error_length, "%s needs --mode", mode_options[i].name);
  if (mode_name == NULL) return KOLO_OK;
  if (kolo_mode_parse(mode_name, &mode) != KOLO_OK)
    return fail(error, error_length, "bad --mode '%s' (want SYNC, ASYNC, LOCAL_SGD or DILOCO)",
                mode_name);
  kolo_mode_spec_default(mode, &out->mode);
  for (size_t i = 0; i < N_MODE_OPTIONS; i++) {
    if (values[i] == NULL) continue;
    if (!(mode_options[i].modes & 1u << mode))
      return fail(error, error_length, "%s is not an option of mode %s", mode_options[i].name,
                  kolo_mode_name(mode));
    if (!apply_mode_option((int)i, values[i], &out->mode))
      return fail(error, error_length, "bad %s '%s'", mode_options[i].name, values[i]);
  }
  char why[200];
  if (kolo_mode_spec_validate(&out->mode, why, sizeof why) != KOLO_OK)
    return fail(error, error_length, "--mode %s: %s", kolo_mode_name(mode), why);
  out->mode_given = 1;
  return KOLO_OK;
}

kolo_status kolo_launcher_options_parse(int argc, char **argv, kolo_launcher_options *out,
                                        char *error, size_t error_length) {
  if (out == NULL || argv == NULL) return KOLO_ERR_INVALID_ARG;
  memset(out, 0, sizeof *out);
  out->host = "127.0.0.1";
  const char *mode_name = NULL, *mode_values[N_MODE_OPTIONS] = {0};
  int index = 1;
  for (; index < argc; index++) {
    const char *arg = argv[index];
    const char *value = NULL;
    int missing = 0, mode_option = 0;
    if (take_value(argc, argv, &index, "--mode", &value, &missing)) {
      if (missing) return fail(error, error_length, "--mode needs a mode");
      mode_name = value;
      continue;
    }
    for (size_t i = 0; i < N_MODE_OPTIONS && !mode_option; i++) {
      if (!take_value(argc, argv, &index, mode_options[i].name, &value, &missing)) continue;
      if (missing) return fail(error, error_length, "%s needs a value", mode_options[i].name);
      mode_values[i] = value;
      mode_option = 1;
    }
    if (mode_option) continue;
    if (strcmp(arg, "--") == 0) {
      index++;
      break;
    }
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      out->help = 1;
      return KOLO_OK;
    }
    if (take_value(argc, argv, &index, "-np", &value, &missing) ||
        take_value(argc, argv, &index, "--np", &value, &missing) ||
        take_value(argc, argv, &index, "-n", &value, &missing)) {
      if (missing) return fail(error, error_length, "%s needs a number of ranks", arg);
      if (!parse_nprocs(value, &out->nprocs)) {
        return fail(error, error_length, "bad number of ranks '%s' (want 1..%d)", value,
                    KOLO_LAUNCHER_MAX_RANKS);
      }
      continue;
    }
    if (take_value(argc, argv, &index, "--timeout", &value, &missing)) {
      if (missing) return fail(error, error_length, "--timeout needs a number of seconds");
      if (!parse_seconds(value, &out->timeout_s)) {
        return fail(error, error_length, "bad timeout '%s' (want seconds > 0)", value);
      }
      continue;
    }
    if (take_value(argc, argv, &index, "--host", &value, &missing)) {
      if (missing || value[0] == '\0') return fail(error, error_length, "--host needs an address");
      out->host = value;
      out->host_given = 1;
      continue;
    }
    if (arg[0] == '-' && arg[1] != '\0') {
      return fail(error, error_length, "unknown option '%s'", arg);
    }
    break;
  }
  kolo_status status = build_mode(mode_name, mode_values, out, error, error_length);
  if (status != KOLO_OK) return status;
  if (out->nprocs == 0) return fail(error, error_length, "missing -np N");
  if (index >= argc) return fail(error, error_length, "missing program to run");
  out->program = argv + index;
  return KOLO_OK;
}
