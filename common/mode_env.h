/* The KOLO_MODE* environment written from a kolo_mode_spec (include/kolo/mode.h): what
 * kolo-worker's agent and kolorun give every process, so kolo_mode_from_env reads back
 * the very spec. Internal to kolo (libkolo does not export it). */
#ifndef KOLO_COMMON_MODE_ENV_H
#define KOLO_COMMON_MODE_ENV_H

#include "kolo/mode.h"

#define KOLO_MODE_ENV_COUNT 8
#define KOLO_MODE_ENV_ENTRY 64 /* bytes of one "NAME=value" entry, its NUL included */

/* The variables' names, in the order kolo_mode_env_format writes them (KOLO_MODE first). */
extern const char *const kolo_mode_env_names[KOLO_MODE_ENV_COUNT];

typedef struct kolo_mode_env {
  char entries[KOLO_MODE_ENV_COUNT][KOLO_MODE_ENV_ENTRY]; /* "KOLO_MODE=DILOCO", ... */
} kolo_mode_env;

/* Every variable, for every mode (those the mode does not use hold its defaults), so
 * that nothing of the caller's own environment leaks in. Doubles are written so that
 * they read back exactly. KOLO_ERR_INVALID_ARG for a spec that does not validate. */
kolo_status kolo_mode_env_format(const kolo_mode_spec *spec, kolo_mode_env *out);

#endif
