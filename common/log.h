/* One-line logging for every kolo component: "<time> <LEVEL> <component>: message".
 * The level comes from KOLO_LOG_LEVEL (error, warn, info, debug; default info),
 * read once; that cached level is the one process-wide setting logging keeps. */
#ifndef KOLO_COMMON_LOG_H
#define KOLO_COMMON_LOG_H

#include <stdarg.h>

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

#define KOLO_LOGE(component, ...) kolo_log(KOLO_LOG_ERROR, component, __VA_ARGS__)
#define KOLO_LOGW(component, ...) kolo_log(KOLO_LOG_WARN, component, __VA_ARGS__)
#define KOLO_LOGI(component, ...) kolo_log(KOLO_LOG_INFO, component, __VA_ARGS__)
#define KOLO_LOGD(component, ...) \
  do {                            \
    if (kolo_log_enabled(KOLO_LOG_DEBUG)) kolo_log(KOLO_LOG_DEBUG, component, __VA_ARGS__); \
  } while (0)

#endif
