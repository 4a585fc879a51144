/* The narrow key-value interface the job store needs from etcd: prefix range, txn with
 * revision compares, and a prefix watch that delivers whole revisions at a time. kv_etcd.c
 * implements it over libkolo_coord; kv_mem.c is an in-process stand-in with the same
 * revision semantics for unit tests and `--etcd none`. */
#ifndef KOLO_SERVER_KV_H
#define KOLO_SERVER_KV_H

#include <stddef.h>
#include <stdint.h>

#include "coordination/etcd.h"
#include "kolo/status.h"

typedef struct kolo_server_kv_item {
  char *key;
  char *value; /* NUL-terminated copy of the value */
  size_t value_len;
  int64_t create_revision;
  int64_t mod_revision;
  int64_t lease; /* the lease the key is attached to (0 = none) */
} kolo_server_kv_item;

/* An item's key: how server/sorted.h reads an array of items sorted by key. */
static inline const char *kolo_server_kv_item_key(const void *item) {
  return ((const kolo_server_kv_item *)item)->key;
}

typedef enum kolo_server_kv_target {
  KOLO_SERVER_KV_CREATE = 0, /* create_revision (0 = key absent) */
  KOLO_SERVER_KV_MOD = 1,    /* mod_revision */
} kolo_server_kv_target;

/* Compare: target(key) == revision. */
typedef struct kolo_server_kv_compare {
  const char *key;
  kolo_server_kv_target target;
  int64_t revision;
} kolo_server_kv_compare;

/* A put, or a delete when value is NULL. lease (0 = none): the key goes when the lease does. */
typedef struct kolo_server_kv_put {
  const char *key;
  const char *value;
  int64_t lease;
} kolo_server_kv_put;

typedef struct kolo_server_kv_event {
  int is_delete;
  kolo_server_kv_item item; /* value empty on delete */
} kolo_server_kv_event;

/* Called with the events of one or more revisions, in order. revision = the newest one seen.
 * The backend resumes a broken watch itself from revision + 1. reset = 1 means history
 * was lost (compaction): events are then the whole current state under the prefix, as puts. */
typedef void (*kolo_server_kv_watch_fn)(void *arg, const kolo_server_kv_event *events, size_t count,
                                        int64_t revision, int reset);

typedef struct kolo_server_kv kolo_server_kv;

typedef struct kolo_server_kv_ops {
  /* Every key under prefix, sorted; *revision = the store revision of the snapshot. */
  kolo_status (*range)(kolo_server_kv *kv, const char *prefix, kolo_server_kv_item **items,
                       size_t *count, int64_t *revision);
  /* All compares hold -> all puts (and deletes) applied atomically (*revision = new
   * revision; the current one if nothing changed, as etcd: a delete of an absent key or no
   * puts); otherwise KOLO_ERR_CONFLICT, nothing changes and *revision = the current
   * revision (etcd's header). A put under a lease that no longer exists fails as a whole
   * (KOLO_ERR_NOT_FOUND with etcd). */
  kolo_status (*txn)(kolo_server_kv *kv, const kolo_server_kv_compare *compares, size_t n_compares,
                     const kolo_server_kv_put *puts, size_t n_puts, int64_t *revision);
  /* Delivers changes under prefix after start_revision to fn on a thread of the kv's
   * until stop_watch. One watch per kv. */
  kolo_status (*start_watch)(kolo_server_kv *kv, const char *prefix, int64_t start_revision,
                             kolo_server_kv_watch_fn fn, void *arg);
  void (*stop_watch)(kolo_server_kv *kv);
  /* Whether the backend answers now (for /readyz). */
  int (*healthy)(kolo_server_kv *kv);
  void (*destroy)(kolo_server_kv *kv);
} kolo_server_kv_ops;

struct kolo_server_kv {
  const kolo_server_kv_ops *ops;
};

void kolo_server_kv_items_free(kolo_server_kv_item *items, size_t count);

/* The in-process backend. */
kolo_status kolo_server_kv_mem_create(kolo_server_kv **out);

/* The etcd backend over libkolo_coord, on a handle of etcd (the binary's one client,
 * kolo_etcd_share) with the store's deadlines: 3 s per request, a watch silent for 5 s
 * reconnects. etcd must outlive the kv. */
kolo_status kolo_server_kv_etcd_create(kolo_etcd *etcd, kolo_server_kv **out);

/* The etcd backend's handle (for its counters, kolo_etcd_stats_get). Only for a kv made by
 * kolo_server_kv_etcd_create. */
const kolo_etcd *kolo_server_kv_etcd_handle(const kolo_server_kv *kv);

#endif
