/* Implementation of common/log.h: timestamped single-line records on stderr. */
#include "log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* -1 = not read from the environment yet. */
static atomic_int log_level = -1;

static int level_from_env(void) {
  const char *value = getenv("KOLO_LOG_LEVEL");
  if (value == NULL) return KOLO_LOG_INFO;
  if (strcasecmp(value, "error") == 0) return KOLO_LOG_ERROR;
  if (strcasecmp(value, "warn") == 0 || strcasecmp(value, "warning") == 0) return KOLO_LOG_WARN;
  if (strcasecmp(value, "debug") == 0) return KOLO_LOG_DEBUG;
  return KOLO_LOG_INFO;
}

int kolo_log_enabled(kolo_log_level level) {
  int current = atomic_load(&log_level);
  if (current < 0) {
    current = level_from_env();
    atomic_store(&log_level, current);
  }
  return (int)level <= current;
}

void kolo_log_set_level(kolo_log_level level) {
  atomic_store(&log_level, (int)level);
}

void kolo_log(kolo_log_level level, const char *component, const char *fmt, ...) {
  static const char *const names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
  if (!kolo_log_enabled(level)) return;
  char line[1024];
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  struct tm parts;
  gmtime_r(&now.tv_sec, &parts);
  int used = snprintf(
      line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s[%d]: ", parts.tm_year + 1900,
      parts.tm_mon + 1, parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec,
      now.tv_nsec / 1000000L, names[level], component ? component : "kolo", (int)getpid());
  if (used < 0) return;
  va_list args;
  va_start(args, fmt);
  int more = vsnprintf(line + used, sizeof line - (size_t)used - 1, fmt, args);
  va_end(args);
  size_t length = (size_t)used + (more < 0 ? 0 : (size_t)more);
  if (length > sizeof line - 2) length = sizeof line - 2;
  line[length++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, length);
  (void)ignored;
}
