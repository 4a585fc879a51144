/* Implementation of recorder.h. */
#include "server/recorder.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "server/history.h"
#include "codec/codec.h"

#define LOG "recorder"
#define MAX_WRITES_PER_PASS 64

struct kolo_server_recorder {
  kolo_server_recorder_config cfg;
  pthread_t thread;
  int has_thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int stop;
  int was_leader;
};

/* One job's txn: [fence,] the point's key as the view saw it, the dropped point's key. */
static kolo_status write_one(kolo_server_recorder *r, const kolo_server_history_write *w,
                             const char *fence_key, int64_t fence_rev) {
  char point_key[160], drop_key[160];
  kolo_server_kv_compare cmps[3];
  kolo_server_kv_put puts[2];
  size_t nc = 0, np = 0;
  if (fence_key) cmps[nc++] = (kolo_server_kv_compare){fence_key, KOLO_SERVER_KV_CREATE, fence_rev};
  kolo_server_store_metrics_key(point_key, sizeof point_key, w->id, w->point.step);
  cmps[nc++] = w->point_rev ? (kolo_server_kv_compare){point_key, KOLO_SERVER_KV_MOD, w->point_rev}
                            : (kolo_server_kv_compare){point_key, KOLO_SERVER_KV_CREATE, 0};
  char *value = kolo_codec_dump(&w->point.base, 0);
  if (value == NULL) return KOLO_ERR_NO_MEMORY;
  puts[np++] = (kolo_server_kv_put){point_key, value, 0};
  if (w->has_delete) {
    kolo_server_store_metrics_key(drop_key, sizeof drop_key, w->id, w->delete_step);
    cmps[nc++] = (kolo_server_kv_compare){drop_key, KOLO_SERVER_KV_MOD, w->delete_rev};
    puts[np++] = (kolo_server_kv_put){drop_key, NULL, 0};
  }
  int64_t revision = 0;
  kolo_status rc = r->cfg.kv->ops->txn(r->cfg.kv, cmps, nc, puts, np, &revision);
  free(value);
  return rc;
}

size_t kolo_server_recorder_pass(kolo_server_recorder *r) {
  char fence_key[256];
  int64_t fence_rev = 0;
  if (r->cfg.fence) {
    int leader = r->cfg.fence(r->cfg.fence_arg, fence_key, sizeof fence_key, &fence_rev) == KOLO_OK;
    if (leader != r->was_leader)
      KOLO_LOGI(LOG, leader ? "leading: recording metrics" : "not leading: recording stops");
    r->was_leader = leader;
    if (!leader) return 0;
  }
  kolo_server_history_write *writes = NULL;
  size_t n = 0, written = 0;
  if (kolo_server_store_history_writes(r->cfg.store, r->cfg.max_points, MAX_WRITES_PER_PASS,
                                       &writes, &n) != KOLO_OK)
    return 0;
  for (size_t i = 0; i < n; i++) {
    kolo_status rc = write_one(r, &writes[i], r->cfg.fence ? fence_key : NULL, fence_rev);
    if (rc == KOLO_OK)
      written++;
    else if (rc != KOLO_ERR_CONFLICT) /* a conflict: the view was behind; the next pass retries */
      KOLO_LOGD(LOG, "job %s: point at step %llu not written: %s", writes[i].id,
                (unsigned long long)writes[i].point.step, kolo_strerror(rc));
  }
  free(writes);
  return written;
}

static void *run(void *arg) {
  kolo_server_recorder *r = arg;
  pthread_mutex_lock(&r->lock);
  while (!r->stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += r->cfg.interval_ms / 1000;
    until.tv_nsec += (long)(r->cfg.interval_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    while (!r->stop && pthread_cond_timedwait(&r->cond, &r->lock, &until) != ETIMEDOUT) {
    }
    if (r->stop) break;
    pthread_mutex_unlock(&r->lock);
    kolo_server_recorder_pass(r);
    pthread_mutex_lock(&r->lock);
  }
  pthread_mutex_unlock(&r->lock);
  return NULL;
}

kolo_status kolo_server_recorder_start(const kolo_server_recorder_config *config,
                                       kolo_server_recorder **out) {
  if (config == NULL || config->store == NULL || config->kv == NULL || out == NULL)
    return KOLO_ERR_INVALID_ARG;
  kolo_server_recorder *r = calloc(1, sizeof *r);
  if (r == NULL) return KOLO_ERR_NO_MEMORY;
  r->cfg = *config;
  if (r->cfg.max_points == 0) r->cfg.max_points = KOLO_SERVER_HISTORY_DEFAULT_POINTS;
  if (r->cfg.interval_ms <= 0) r->cfg.interval_ms = KOLO_SERVER_RECORDER_DEFAULT_INTERVAL_MS;
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->cond, NULL);
  if (!r->cfg.no_thread) {
    if (pthread_create(&r->thread, NULL, run, r) != 0) {
      kolo_server_recorder_stop(r);
      return KOLO_ERR_SYSTEM;
    }
    r->has_thread = 1;
  }
  *out = r;
  return KOLO_OK;
}

void kolo_server_recorder_stop(kolo_server_recorder *r) {
  if (r == NULL) return;
  if (r->has_thread) {
    pthread_mutex_lock(&r->lock);
    r->stop = 1;
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->lock);
    pthread_join(r->thread, NULL);
  }
  pthread_mutex_destroy(&r->lock);
  pthread_cond_destroy(&r->cond);
  free(r);
}
