/* kolo's log: one line per message on stderr, "<time> <LEVEL> <component>[pid]: text".
 * The level comes from KOLO_LOG_LEVEL (error, warn, info, debug; default info), read
 * once, or from kolo_log_set_level. libkolo holds the one log state of a process:
 * a program linked with libkolo that sets the level here sets it for libkolo's own
 * messages too (programs that do not link libkolo have kolo_common's copy). */
#ifndef KOLO_LOG_H
#define KOLO_LOG_H

#include "kolo/api.h"

#ifdef __cplusplus
extern "C" {
#endif
#pragma GCC visibility push(default) /* libkolo exports these: kolo/api.h */

typedef enum kolo_log_level {
  KOLO_LOG_ERROR = 0,
  KOLO_LOG_WARN = 1,
  KOLO_LOG_INFO = 2,
  KOLO_LOG_DEBUG = 3,
} kolo_log_level;

/* Writes one line to stderr if level is enabled. Thread-safe (one write(2) per line). */
void kolo_log(kolo_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Whether a message at this level would be written. */
int kolo_log_enabled(kolo_log_level level);

/* Overrides the level read from the environment (tests, --verbose flags). */
void kolo_log_set_level(kolo_log_level level);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif
#endif
