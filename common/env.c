/* Settings read from the environment: byte counts and the no-progress timeout. */
#include "common/env.h"

#include <stdlib.h>

#include "kolo/kolo.h"

size_t kolo_size_from_env(const char *name, size_t fallback) {
  const char *value = getenv(name);
  if (value == NULL || *value == '\0') return fallback;
  char *end = NULL;
  unsigned long long parsed = strtoull(value, &end, 10);
  if (end == value || parsed == 0) return fallback;
  if (*end == 'K' || *end == 'k') parsed *= 1024ULL;
  if (*end == 'M' || *end == 'm') parsed *= 1024ULL * 1024ULL;
  return (size_t)parsed;
}

int kolo_timeout_ms_from_env(void) {
  const char *value = getenv("KOLO_TIMEOUT");
  if (value == NULL || *value == '\0') return KOLO_DEFAULT_TIMEOUT_MS;
  char *end = NULL;
  double seconds = strtod(value, &end);
  if (end == value || seconds <= 0) return KOLO_DEFAULT_TIMEOUT_MS;
  return (int)(seconds * 1000.0);
}
