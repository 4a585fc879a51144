/* kv.h in memory: a sorted array of keys with etcd's revision rules (one revision per txn,
 * create/mod revisions per key) and a synchronous watch. Unit tests and `--etcd none`.
 * Leases are recorded with their keys but never expire (there are no lease holders here). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "server/kv.h"
#include "server/sorted.h"

typedef struct mem_kv {
  kolo_server_kv base;
  pthread_mutex_t lock;   /* keys, revision */
  pthread_mutex_t notify; /* serializes txn + watch delivery so events arrive in order */
  kolo_server_kv_item *items;
  size_t count, cap;
  int64_t revision;
  char *watch_prefix;
  kolo_server_kv_watch_fn watch_fn;
  void *watch_arg;
} mem_kv;

void kolo_server_kv_items_free(kolo_server_kv_item *items, size_t count) {
  for (size_t i = 0; i < count; i++) {
    free(items[i].key);
    free(items[i].value);
  }
  free(items);
}

/* Index of key, or -(insertion point) - 1. */
static long find(const mem_kv *m, const char *key) {
  return kolo_server_sorted_find(m->items, m->count, sizeof *m->items, kolo_server_kv_item_key,
                                 key);
}

static kolo_status copy_item(const kolo_server_kv_item *src, kolo_server_kv_item *dst) {
  dst->key = strdup(src->key);
  dst->value = malloc(src->value_len + 1);
  if (dst->key == NULL || dst->value == NULL) return KOLO_ERR_NO_MEMORY;
  memcpy(dst->value, src->value, src->value_len + 1);
  dst->value_len = src->value_len;
  dst->create_revision = src->create_revision;
  dst->mod_revision = src->mod_revision;
  dst->lease = src->lease;
  return KOLO_OK;
}

static kolo_status mem_range(kolo_server_kv *kv, const char *prefix, kolo_server_kv_item **items,
                             size_t *count, int64_t *revision) {
  mem_kv *m = (mem_kv *)kv;
  size_t plen = strlen(prefix);
  kolo_status rc = KOLO_OK;
  pthread_mutex_lock(&m->lock);
  long at = find(m, prefix);
  size_t start = at >= 0 ? (size_t)at : (size_t)(-at - 1), end = start;
  while (end < m->count && strncmp(m->items[end].key, prefix, plen) == 0) end++;
  kolo_server_kv_item *out = calloc(end - start + 1, sizeof *out);
  if (out == NULL) {
    rc = KOLO_ERR_NO_MEMORY;
    goto out;
  }
  for (size_t i = start; i < end && rc == KOLO_OK; i++)
    rc = copy_item(&m->items[i], &out[i - start]);
  *items = out;
  *count = end - start;
  *revision = m->revision;
out:
  pthread_mutex_unlock(&m->lock);
  if (rc != KOLO_OK && out) kolo_server_kv_items_free(out, end - start);
  return rc;
}

/* Removes item at (a delete in revision rev); a watched key becomes a delete event. */
static void delete_at(mem_kv *m, size_t at, int64_t rev, kolo_server_kv_event *event,
                      size_t *n_events) {
  kolo_server_kv_item *item = &m->items[at];
  if (m->watch_fn && strncmp(item->key, m->watch_prefix, strlen(m->watch_prefix)) == 0) {
    event->is_delete = 1;
    event->item = (kolo_server_kv_item){.key = item->key, .value = strdup(""), .mod_revision = rev};
    (*n_events)++;
  } else {
    free(item->key);
  }
  free(item->value);
  memmove(item, item + 1, (m->count - at - 1) * sizeof *item);
  m->count--;
}

static kolo_status mem_txn(kolo_server_kv *kv, const kolo_server_kv_compare *compares,
                           size_t n_compares, const kolo_server_kv_put *puts, size_t n_puts,
                           int64_t *revision) {
  mem_kv *m = (mem_kv *)kv;
  kolo_status rc = KOLO_OK;
  kolo_server_kv_event *events = calloc(n_puts + 1, sizeof *events);
  size_t n_events = 0;
  if (events == NULL) return KOLO_ERR_NO_MEMORY;
  pthread_mutex_lock(&m->notify);
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < n_compares; i++) {
    long at = find(m, compares[i].key);
    int64_t actual = 0;
    if (at >= 0)
      actual = compares[i].target == KOLO_SERVER_KV_CREATE ? m->items[at].create_revision
                                                           : m->items[at].mod_revision;
    if (actual != compares[i].revision) {
      rc = KOLO_ERR_CONFLICT;
      if (revision) *revision = m->revision; /* etcd's header revision */
      goto unlock;
    }
  }
  int64_t rev = m->revision + 1;
  size_t changed = 0; /* like etcd, a txn that changes nothing makes no revision */
  for (size_t i = 0; i < n_puts; i++) {
    long at = find(m, puts[i].key);
    if (puts[i].value == NULL) {
      if (at >= 0) delete_at(m, (size_t)at, rev, &events[n_events], &n_events);
      changed += at >= 0;
      continue;
    }
    changed++;
    char *value = strdup(puts[i].value);
    if (value == NULL) {
      rc = KOLO_ERR_NO_MEMORY;
      goto unlock;
    }
    if (at < 0) {
      if (m->count == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        kolo_server_kv_item *grown = realloc(m->items, cap * sizeof *grown);
        if (grown == NULL) {
          free(value);
          rc = KOLO_ERR_NO_MEMORY;
          goto unlock;
        }
        m->items = grown;
        m->cap = cap;
      }
      size_t pos = (size_t)(-at - 1);
      memmove(&m->items[pos + 1], &m->items[pos], (m->count - pos) * sizeof *m->items);
      m->count++;
      m->items[pos].key = strdup(puts[i].key);
      m->items[pos].create_revision = rev;
      m->items[pos].value = NULL;
      at = (long)pos;
    } else {
      free(m->items[at].value);
    }
    m->items[at].value = value;
    m->items[at].value_len = strlen(value);
    m->items[at].mod_revision = rev;
    m->items[at].lease = puts[i].lease;
    if (m->watch_fn && strncmp(puts[i].key, m->watch_prefix, strlen(m->watch_prefix)) == 0 &&
        copy_item(&m->items[at], &events[n_events].item) == KOLO_OK)
      n_events++;
  }
  if (changed) m->revision = rev;
  if (revision) *revision = m->revision;
unlock:
  pthread_mutex_unlock(&m->lock);
  if (rc == KOLO_OK && n_events && m->watch_fn)
    m->watch_fn(m->watch_arg, events, n_events, m->revision, 0);
  pthread_mutex_unlock(&m->notify);
  for (size_t i = 0; i < n_events; i++) {
    free(events[i].item.key);
    free(events[i].item.value);
  }
  free(events);
  return rc;
}

static kolo_status mem_start_watch(kolo_server_kv *kv, const char *prefix, int64_t start_revision,
                                   kolo_server_kv_watch_fn fn, void *arg) {
  mem_kv *m = (mem_kv *)kv;
  (void)start_revision; /* no history kept: callers range first under the same lock order */
  pthread_mutex_lock(&m->notify);
  free(m->watch_prefix);
  m->watch_prefix = strdup(prefix);
  m->watch_fn = m->watch_prefix ? fn : NULL;
  m->watch_arg = arg;
  pthread_mutex_unlock(&m->notify);
  return m->watch_prefix ? KOLO_OK : KOLO_ERR_NO_MEMORY;
}

static void mem_stop_watch(kolo_server_kv *kv) {
  mem_kv *m = (mem_kv *)kv;
  pthread_mutex_lock(&m->notify);
  m->watch_fn = NULL;
  pthread_mutex_unlock(&m->notify);
}

static int mem_healthy(kolo_server_kv *kv) {
  return kv != NULL;
}

static void mem_destroy(kolo_server_kv *kv) {
  mem_kv *m = (mem_kv *)kv;
  if (m == NULL) return;
  kolo_server_kv_items_free(m->items, m->count);
  free(m->watch_prefix);
  pthread_mutex_destroy(&m->lock);
  pthread_mutex_destroy(&m->notify);
  free(m);
}

static const kolo_server_kv_ops mem_ops = {mem_range,      mem_txn,     mem_start_watch,
                                           mem_stop_watch, mem_healthy, mem_destroy};

kolo_status kolo_server_kv_mem_create(kolo_server_kv **out) {
  mem_kv *m = calloc(1, sizeof *m);
  if (m == NULL) return KOLO_ERR_NO_MEMORY;
  m->base.ops = &mem_ops;
  pthread_mutex_init(&m->lock, NULL);
  pthread_mutex_init(&m->notify, NULL);
  *out = &m->base;
  return KOLO_OK;
}
