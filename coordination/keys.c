/* Implementation of coordination/keys.h: validated, fixed-format etcd keys. */
#include "coordination/keys.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "coordination/etcd_internal.h"

int kolo_keys_name_valid(const char *name) {
  if (name == NULL) return 0;
  size_t n = strlen(name);
  if (n == 0 || n > 128 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-';
    if (!ok) return 0;
  }
  return 1;
}

/* snprintf into buf, reporting truncation as KOLO_ERR_TOO_LARGE. */
static kolo_status fit(int n, size_t size) {
  if (n < 0 || (size_t)n >= size) return kolo_etcd_fail(KOLO_ERR_TOO_LARGE, "key buffer too small");
  return KOLO_OK;
}

static kolo_status check_name(const char *what, const char *name) {
  if (kolo_keys_name_valid(name)) return KOLO_OK;
  return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                        "%s '%.64s' is not valid (1-128 characters of A-Z a-z 0-9 . _ -)", what,
                        name ? name : "(null)");
}

kolo_status kolo_keys_worker(const char *id, char *buf, size_t size) {
  kolo_status rc = check_name("worker id", id);
  return rc != KOLO_OK ? rc : fit(snprintf(buf, size, KOLO_KEY_WORKERS_PREFIX "%s", id), size);
}

kolo_status kolo_keys_assign(const char *id, char *buf, size_t size) {
  kolo_status rc = check_name("worker id", id);
  return rc != KOLO_OK ? rc : fit(snprintf(buf, size, KOLO_KEY_ASSIGN_PREFIX "%s", id), size);
}

kolo_status kolo_keys_drain(const char *id, char *buf, size_t size) {
  kolo_status rc = check_name("worker id", id);
  return rc != KOLO_OK ? rc : fit(snprintf(buf, size, KOLO_KEY_DRAIN_PREFIX "%s", id), size);
}

kolo_status kolo_keys_job(const char *job, const char *leaf, char *buf, size_t size) {
  kolo_status rc = check_name("job id", job);
  return rc != KOLO_OK
             ? rc
             : fit(snprintf(buf, size, KOLO_KEY_JOBS_PREFIX "%s/%s", job, leaf ? leaf : ""), size);
}

kolo_status kolo_keys_blob_meta(const char *job, char *buf, size_t size) {
  kolo_status rc = check_name("job id", job);
  return rc != KOLO_OK ? rc : fit(snprintf(buf, size, KOLO_KEY_BLOBS_META_PREFIX "%s", job), size);
}

kolo_status kolo_keys_blob_chunk(const char *job, uint64_t chunk, char *buf, size_t size) {
  kolo_status rc = check_name("job id", job);
  return rc != KOLO_OK
             ? rc
             : fit(snprintf(buf, size, KOLO_KEY_BLOBS_DATA_PREFIX "%s/%08" PRIu64, job, chunk),
                   size);
}

kolo_status kolo_keys_ring(const char *job, int64_t epoch, char *buf, size_t size) {
  kolo_status rc = check_name("job id", job);
  if (rc == KOLO_OK && epoch < 0)
    rc = kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring epoch must not be negative");
  return rc != KOLO_OK
             ? rc
             : fit(snprintf(buf, size, KOLO_KEY_JOBS_PREFIX "%s/ring/%020" PRId64, job, epoch),
                   size);
}

kolo_status kolo_keys_event(const char *job, int64_t n, char *buf, size_t size) {
  kolo_status rc = check_name("job id", job);
  if (rc == KOLO_OK && n < 0)
    rc = kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "event number must not be negative");
  return rc != KOLO_OK
             ? rc
             : fit(snprintf(buf, size, KOLO_KEY_JOBS_PREFIX "%s/events/%020" PRId64, job, n), size);
}

int kolo_keys_event_number(const char *segment, uint64_t *n) {
  size_t digits = segment ? strspn(segment, "0123456789") : 0;
  if (digits == 0 || digits > 20 || segment[digits] != '\0') return 0;
  uint64_t value = 0;
  for (size_t i = 0; i < digits; i++) {
    unsigned d = (unsigned)(segment[i] - '0');
    if (value > (UINT64_MAX - d) / 10) return 0;
    value = value * 10 + d;
  }
  *n = value;
  return 1;
}

uint64_t kolo_keys_event_evicted(uint64_t seq) {
  return seq > KOLO_EVENTS_KEPT + 1 ? seq - KOLO_EVENTS_KEPT : 0;
}

kolo_status kolo_keys_report(const char *job, const char *worker, char *buf, size_t size) {
  kolo_status rc = check_name("job id", job);
  if (rc == KOLO_OK) rc = check_name("worker id", worker);
  return rc != KOLO_OK
             ? rc
             : fit(snprintf(buf, size, KOLO_KEY_JOBS_PREFIX "%s/reports/%s", job, worker), size);
}

kolo_status kolo_keys_metrics(const char *job, uint64_t step, char *buf, size_t size) {
  kolo_status rc = check_name("job id", job);
  return rc != KOLO_OK
             ? rc
             : fit(snprintf(buf, size, KOLO_KEY_METRICS_PREFIX "%s/%020" PRIu64, job, step), size);
}
