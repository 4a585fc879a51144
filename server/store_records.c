/* The store's copy of the records as etcd holds them: every key under /kolo/v1/ but the
 * metrics history, with its value, revisions and lease, kept sorted by key and fed by the
 * store's one watch (on_watch applies each batch here too). kolo-server's scheduler reads
 * its passes from it (kolo_server_store_read_records) instead of re-reading etcd, and is
 * told of each batch that may matter to it (kolo_server_store_set_records_fn). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/store_internal.h"

/* Index of key in the records, or -(insertion point) - 1. */
static long find_record(const kolo_server_store *s, const char *key) {
  return kolo_server_sorted_find(s->records, s->n_records, sizeof *s->records,
                                 kolo_server_kv_item_key, key);
}

static void item_clear(kolo_server_kv_item *item) {
  free(item->key);
  free(item->value);
  memset(item, 0, sizeof *item);
}

int kolo_server_store_record_kept(const char *key) {
  size_t root = strlen(KOLO_KEY_ROOT), metrics = strlen(KOLO_KEY_METRICS_PREFIX);
  return strncmp(key, KOLO_KEY_ROOT, root) == 0 && strncmp(key, KOLO_KEY_METRICS_PREFIX, metrics);
}

kolo_status kolo_server_store_apply_record(kolo_server_store *s, const kolo_server_kv_item *item,
                                           int is_delete) {
  if (!kolo_server_store_record_kept(item->key)) return KOLO_OK;
  long at = find_record(s, item->key);
  if (is_delete) {
    if (at < 0) return KOLO_OK;
    item_clear(&s->records[at]);
    memmove(&s->records[at], &s->records[at + 1],
            (s->n_records - (size_t)at - 1) * sizeof *s->records);
    s->n_records--;
    return KOLO_OK;
  }
  char *value = malloc(item->value_len + 1);
  if (value == NULL) return KOLO_ERR_NO_MEMORY;
  memcpy(value, item->value, item->value_len);
  value[item->value_len] = '\0';
  kolo_server_kv_item *slot;
  if (at >= 0) {
    slot = &s->records[at];
    free(slot->value);
  } else {
    if (s->n_records == s->cap_records) {
      size_t cap = s->cap_records ? s->cap_records * 2 : 256;
      kolo_server_kv_item *grown = realloc(s->records, cap * sizeof *grown);
      if (grown == NULL) {
        free(value);
        return KOLO_ERR_NO_MEMORY;
      }
      s->records = grown;
      s->cap_records = cap;
    }
    size_t pos = (size_t)(-at - 1);
    memmove(&s->records[pos + 1], &s->records[pos], (s->n_records - pos) * sizeof *s->records);
    slot = &s->records[pos];
    memset(slot, 0, sizeof *slot);
    slot->key = strdup(item->key);
    if (slot->key == NULL) {
      memmove(&s->records[pos], &s->records[pos + 1], (s->n_records - pos) * sizeof *s->records);
      free(value);
      return KOLO_ERR_NO_MEMORY;
    }
    s->n_records++;
  }
  slot->value = value;
  slot->value_len = item->value_len;
  slot->create_revision = item->create_revision;
  slot->mod_revision = item->mod_revision;
  slot->lease = item->lease;
  return KOLO_OK;
}

void kolo_server_store_records_clear(kolo_server_store *s) {
  for (size_t i = 0; i < s->n_records; i++) item_clear(&s->records[i]);
  s->n_records = 0;
}

void kolo_server_store_records_free(kolo_server_store *s) {
  kolo_server_store_records_clear(s);
  free(s->records);
  s->records = NULL;
  s->cap_records = 0;
}

void kolo_server_store_set_records_fn(kolo_server_store *s, kolo_server_store_records_fn fn,
                                      void *arg) {
  pthread_mutex_lock(&s->sub_lock);
  s->records_fn = fn;
  s->records_arg = arg;
  pthread_mutex_unlock(&s->sub_lock);
}

/* The records under prefix: [*first, *end) (they are adjacent: sorted by key). */
static void find_group(const kolo_server_store *s, const char *prefix, size_t *first, size_t *end) {
  long at = find_record(s, prefix);
  size_t plen = strlen(prefix);
  *first = at >= 0 ? (size_t)at : (size_t)(-at - 1);
  *end = *first;
  while (*end < s->n_records && strncmp(s->records[*end].key, prefix, plen) == 0) (*end)++;
}

/* Appends records [first, end) to out (room for them allocated by the caller). */
static kolo_status copy_range(const kolo_server_store *s, size_t first, size_t end,
                              kolo_etcd_range_result *out) {
  for (size_t i = first; i < end; i++) {
    const kolo_server_kv_item *r = &s->records[i];
    kolo_etcd_kv *kv = &out->kvs[out->count];
    size_t klen = strlen(r->key);
    kv->key = malloc(klen + 1);
    kv->value = malloc(r->value_len + 1);
    if (kv->key == NULL || kv->value == NULL) {
      kolo_etcd_kv_clear(kv);
      return KOLO_ERR_NO_MEMORY;
    }
    memcpy(kv->key, r->key, klen + 1);
    kv->key_len = klen;
    memcpy(kv->value, r->value, r->value_len + 1);
    kv->value_len = r->value_len;
    kv->create_revision = r->create_revision;
    kv->mod_revision = r->mod_revision;
    kv->lease = r->lease;
    out->count++;
  }
  out->total = (int64_t)out->count;
  return KOLO_OK;
}

/* Copies the records under prefix into *out. */
static kolo_status copy_prefix(const kolo_server_store *s, const char *prefix,
                               kolo_etcd_range_result *out) {
  size_t first, end;
  find_group(s, prefix, &first, &end);
  out->kvs = calloc(end - first + 1, sizeof *out->kvs);
  if (out->kvs == NULL) return KOLO_ERR_NO_MEMORY;
  return copy_range(s, first, end, out);
}

/* Copies the records of every job the view does not hold as ended, job by job in id order
 * (each job's keys adjacent, as a prefix range returns them), from the live list: its cost
 * grows with the live jobs and their records (and the log of all records), not with the ended
 * jobs (#32, #35). */
static kolo_status copy_live_jobs(const kolo_server_store *s, kolo_etcd_range_result *out) {
  size_t(*groups)[2] = calloc(s->n_live + 1, sizeof *groups), total = 0;
  if (groups == NULL) return KOLO_ERR_NO_MEMORY;
  char prefix[512];
  for (size_t i = 0; i < s->n_live; i++) {
    snprintf(prefix, sizeof prefix, "%s%s/", KOLO_KEY_JOBS_PREFIX, s->live[i]->id);
    find_group(s, prefix, &groups[i][0], &groups[i][1]);
    total += groups[i][1] - groups[i][0];
  }
  kolo_status rc = KOLO_ERR_NO_MEMORY;
  out->kvs = calloc(total + 1, sizeof *out->kvs);
  if (out->kvs != NULL) rc = KOLO_OK;
  for (size_t g = 0; rc == KOLO_OK && g < s->n_live; g++)
    rc = copy_range(s, groups[g][0], groups[g][1], out);
  free(groups);
  return rc;
}

/* Waits until the view has applied revision or timeout_ms passed (KOLO_ERR_TIMEOUT). */
static kolo_status wait_applied(kolo_server_store *s, int64_t revision, int timeout_ms) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += timeout_ms / 1000;
  deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  kolo_status rc = KOLO_OK;
  pthread_mutex_lock(&s->rev_lock);
  while (s->revision < revision)
    if (pthread_cond_timedwait(&s->rev_cond, &s->rev_lock, &deadline) == ETIMEDOUT) {
      rc = s->revision >= revision ? KOLO_OK : KOLO_ERR_TIMEOUT;
      break;
    }
  pthread_mutex_unlock(&s->rev_lock);
  return rc;
}

static int64_t mono_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static kolo_status read_records(kolo_server_store *s, const char *const *prefixes, size_t n,
                                int64_t min_revision, int timeout_ms, int live_jobs,
                                kolo_etcd_range_result *out, int64_t *revision, uint64_t *reloads,
                                int64_t *waited_us) {
  memset(out, 0, n * sizeof *out);
  int64_t started = mono_us();
  kolo_status rc = min_revision > 0 ? wait_applied(s, min_revision, timeout_ms) : KOLO_OK;
  if (waited_us) *waited_us = mono_us() - started;
  pthread_rwlock_rdlock(&s->lock);
  if (reloads) *reloads = s->reloads;
  for (size_t i = 0; rc == KOLO_OK && i < n; i++)
    rc = live_jobs && strcmp(prefixes[i], KOLO_KEY_JOBS_PREFIX) == 0
             ? copy_live_jobs(s, &out[i])
             : copy_prefix(s, prefixes[i], &out[i]);
  /* the data under the read lock is at least at this revision (it is set after each batch) */
  int64_t at = kolo_server_store_revision(s);
  pthread_rwlock_unlock(&s->lock);
  for (size_t i = 0; i < n; i++) out[i].revision = at;
  if (revision) *revision = at;
  if (rc != KOLO_OK)
    for (size_t i = 0; i < n; i++) kolo_etcd_range_result_free(&out[i]);
  return rc;
}

kolo_status kolo_server_store_read_records(kolo_server_store *s, const char *const *prefixes,
                                           size_t n, int64_t min_revision, int timeout_ms,
                                           kolo_etcd_range_result *out, int64_t *revision,
                                           uint64_t *reloads) {
  return read_records(s, prefixes, n, min_revision, timeout_ms, 0, out, revision, reloads, NULL);
}

kolo_status kolo_server_store_read_live_records(kolo_server_store *s, const char *const *prefixes,
                                                size_t n, int64_t min_revision, int timeout_ms,
                                                kolo_etcd_range_result *out, int64_t *revision,
                                                uint64_t *reloads, int64_t *waited_us) {
  return read_records(s, prefixes, n, min_revision, timeout_ms, 1, out, revision, reloads,
                      waited_us);
}
