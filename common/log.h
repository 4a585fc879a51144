/* One-line logging for every kolo component: the functions are kolo/log.h's (public,
 * exported by libkolo, so a process has one log state); this adds the macros. */
#ifndef KOLO_COMMON_LOG_H
#define KOLO_COMMON_LOG_H

#include <stdarg.h>

#include "kolo/log.h"

#define KOLO_LOGE(component, ...) kolo_log(KOLO_LOG_ERROR, component, __VA_ARGS__)
#define KOLO_LOGW(component, ...) kolo_log(KOLO_LOG_WARN, component, __VA_ARGS__)
#define KOLO_LOGI(component, ...) kolo_log(KOLO_LOG_INFO, component, __VA_ARGS__)
#define KOLO_LOGD(component, ...)                                                           \
  do {                                                                                      \
    if (kolo_log_enabled(KOLO_LOG_DEBUG)) kolo_log(KOLO_LOG_DEBUG, component, __VA_ARGS__); \
  } while (0)

#endif
