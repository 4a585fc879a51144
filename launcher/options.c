/* Implementation of options.h: a small hand-written parser (getopt would permute
 * the program's own arguments, which must be passed through untouched). */
#include "launcher/options.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kolo_launcher_usage(void) {
  return "usage: kolorun -np N [--timeout S] [--host H] [--] program [args...]";
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

kolo_status kolo_launcher_options_parse(int argc, char **argv, kolo_launcher_options *out,
                                        char *error, size_t error_length) {
  if (out == NULL || argv == NULL) return KOLO_ERR_INVALID_ARG;
  memset(out, 0, sizeof *out);
  out->host = "127.0.0.1";
  int index = 1;
  for (; index < argc; index++) {
    const char *arg = argv[index];
    const char *value = NULL;
    int missing = 0;
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
  if (out->nprocs == 0) return fail(error, error_length, "missing -np N");
  if (index >= argc) return fail(error, error_length, "missing program to run");
  out->program = argv + index;
  return KOLO_OK;
}
