/* Settings read from the environment (common/env.c). */
#ifndef KOLO_COMMON_ENV_H
#define KOLO_COMMON_ENV_H

#include <stddef.h>

/* A byte count from the environment ("4096", "64K", "4M"), or fallback when
 * unset, zero or not a number. */
size_t kolo_size_from_env(const char *name, size_t fallback);

/* The no-progress timeout from KOLO_TIMEOUT (seconds, fractions allowed), or
 * KOLO_DEFAULT_TIMEOUT_MS when unset or not a positive number. */
int kolo_timeout_ms_from_env(void);

#endif
