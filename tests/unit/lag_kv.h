/* A kv.h backend for unit tests: the in-memory kv behind a wrapper that counts range calls
 * and can hold its watch deliveries back (lag_pause) and deliver them later in order
 * (lag_resume, or resume_later on a thread after 300 ms): a store over it has a view that
 * lags behind the kv, as a kolo-server's view lags behind etcd. Used by test_server_workers,
 * test_server_store and test_server_store_live (which delivers reloads through fn). */
#ifndef KOLO_TESTS_UNIT_LAG_KV_H
#define KOLO_TESTS_UNIT_LAG_KV_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/kv.h"

typedef struct held_batch {
  kolo_server_kv_event *events;
  size_t count;
  int64_t revision;
} held_batch;

typedef struct lag_kv {
  kolo_server_kv base;
  kolo_server_kv *inner; /* the in-memory kv */
  kolo_server_kv_watch_fn fn;
  void *arg;
  pthread_mutex_t lock; /* held while delivering, so batches keep their order */
  int paused;
  held_batch held[64];
  size_t n_held;
  int ranges;
} lag_kv;

static kolo_status lag_range(kolo_server_kv *kv, const char *prefix, kolo_server_kv_item **items,
                             size_t *count, int64_t *revision) {
  lag_kv *l = (lag_kv *)kv;
  __atomic_add_fetch(&l->ranges, 1, __ATOMIC_SEQ_CST);
  return l->inner->ops->range(l->inner, prefix, items, count, revision);
}

static kolo_status lag_txn(kolo_server_kv *kv, const kolo_server_kv_compare *compares, size_t nc,
                           const kolo_server_kv_put *puts, size_t np, int64_t *revision) {
  lag_kv *l = (lag_kv *)kv;
  return l->inner->ops->txn(l->inner, compares, nc, puts, np, revision);
}

static void lag_on_watch(void *arg, const kolo_server_kv_event *events, size_t count,
                         int64_t revision, int reset) {
  lag_kv *l = arg;
  pthread_mutex_lock(&l->lock);
  if (!l->paused) {
    l->fn(l->arg, events, count, revision, reset);
  } else {
    if (l->n_held == 64) abort(); /* a test holds back at most 64 batches */
    held_batch *b = &l->held[l->n_held++];
    b->events = calloc(count + 1, sizeof *b->events);
    for (size_t i = 0; i < count; i++) {
      b->events[i] = events[i];
      b->events[i].item.key = strdup(events[i].item.key);
      b->events[i].item.value = strdup(events[i].item.value ? events[i].item.value : "");
    }
    b->count = count;
    b->revision = revision;
  }
  pthread_mutex_unlock(&l->lock);
}

static kolo_status lag_start_watch(kolo_server_kv *kv, const char *prefix, int64_t start_revision,
                                   kolo_server_kv_watch_fn fn, void *arg) {
  lag_kv *l = (lag_kv *)kv;
  l->fn = fn;
  l->arg = arg;
  return l->inner->ops->start_watch(l->inner, prefix, start_revision, lag_on_watch, l);
}

static void lag_stop_watch(kolo_server_kv *kv) {
  lag_kv *l = (lag_kv *)kv;
  l->inner->ops->stop_watch(l->inner);
}

static int lag_healthy(kolo_server_kv *kv) {
  (void)kv;
  return 1;
}

static void free_batch(held_batch *b) {
  for (size_t i = 0; i < b->count; i++) {
    free(b->events[i].item.key);
    free(b->events[i].item.value);
  }
  free(b->events);
}

static void lag_destroy(kolo_server_kv *kv) {
  lag_kv *l = (lag_kv *)kv;
  l->inner->ops->destroy(l->inner);
  for (size_t i = 0; i < l->n_held; i++) free_batch(&l->held[i]);
  pthread_mutex_destroy(&l->lock);
  free(l);
}

static const kolo_server_kv_ops lag_ops = {lag_range,      lag_txn,     lag_start_watch,
                                           lag_stop_watch, lag_healthy, lag_destroy};

static inline void lag_pause(lag_kv *l) {
  pthread_mutex_lock(&l->lock);
  l->paused = 1;
  pthread_mutex_unlock(&l->lock);
}

/* Delivers what was held back, in order, and lets the watch through again. */
static inline void lag_resume(lag_kv *l) {
  pthread_mutex_lock(&l->lock);
  for (size_t i = 0; i < l->n_held; i++) {
    l->fn(l->arg, l->held[i].events, l->held[i].count, l->held[i].revision, 0);
    free_batch(&l->held[i]);
  }
  l->n_held = 0;
  l->paused = 0;
  pthread_mutex_unlock(&l->lock);
}

static inline void *resume_later(void *arg) {
  struct timespec pause = {0, 300 * 1000000L};
  nanosleep(&pause, NULL);
  lag_resume(arg);
  return NULL;
}

static inline int ranges(lag_kv *l) {
  return __atomic_load_n(&l->ranges, __ATOMIC_SEQ_CST);
}

static inline double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A lagging kv over a new in-memory kv (destroy it through its ops). */
static inline lag_kv *lag_kv_create(void) {
  lag_kv *l = calloc(1, sizeof *l);
  if (l == NULL) abort();
  l->base.ops = &lag_ops;
  pthread_mutex_init(&l->lock, NULL);
  if (kolo_server_kv_mem_create(&l->inner) != KOLO_OK) abort();
  return l;
}

#endif
