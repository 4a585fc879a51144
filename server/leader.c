/* Implementation of leader.h: one thread that keeps a lease and a candidate key, and
 * re-reads the candidates every poll interval. */
#include "server/leader.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/checks.h"
#include "common/log.h"
#include "coordination/etcd.h"

#define LOG "leader"
#define POLL_MS 250
#define MAX_ENDPOINTS 16

struct kolo_server_leader {
  kolo_etcd *client;
  char name[128];
  int ttl_s;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int stop;
  atomic_int lease_lost;
  int64_t lease;
  kolo_etcd_keepalive *keepalive;
  /* what the last poll saw, under lock */
  char my_key[96];
  int64_t my_revision;
  int known, is_me;
  char leader_name[128];
};

static void on_lost(int64_t lease_id, kolo_status status, const char *message, void *user) {
  kolo_server_leader *l = user;
  (void)status;
  KOLO_LOGW(LOG, "lease %" PRIx64 " lost: %s", (uint64_t)lease_id, message ? message : "");
  atomic_store(&l->lease_lost, 1);
}

/* Gets a lease and puts our candidate key under it. */
static kolo_status campaign(kolo_server_leader *l) {
  int64_t lease = 0, granted = 0, revision = 0;
  KOLO_CHECK(kolo_etcd_lease_grant(l->client, l->ttl_s, &lease, &granted));
  char key[96];
  snprintf(key, sizeof key, KOLO_SERVER_LEADER_PREFIX "%016" PRIx64, (uint64_t)lease);
  kolo_status rc = kolo_etcd_create_key(l->client, kolo_etcd_str(key), kolo_etcd_str(l->name), lease,
                                        NULL, &revision);
  if (rc == KOLO_OK) rc = kolo_etcd_keepalive_start(l->client, lease, l->ttl_s, on_lost, l, &l->keepalive);
  if (rc != KOLO_OK) {
    kolo_etcd_lease_revoke(l->client, lease);
    return rc;
  }
  atomic_store(&l->lease_lost, 0);
  pthread_mutex_lock(&l->lock);
  l->lease = lease;
  snprintf(l->my_key, sizeof l->my_key, "%s", key);
  l->my_revision = revision;
  pthread_mutex_unlock(&l->lock);
  KOLO_LOGI(LOG, "%s campaigning as %s (revision %" PRId64 ")", l->name, key, revision);
  return KOLO_OK;
}

static void drop_lease(kolo_server_leader *l, int revoke) {
  kolo_etcd_keepalive_stop(l->keepalive);
  l->keepalive = NULL;
  if (revoke && l->lease) kolo_etcd_lease_revoke(l->client, l->lease);
  pthread_mutex_lock(&l->lock);
  l->lease = 0;
  l->my_key[0] = '\0';
  l->is_me = 0;
  pthread_mutex_unlock(&l->lock);
}

/* Reads the candidates: the lowest create revision leads. */
static void poll_leader(kolo_server_leader *l) {
  kolo_etcd_range_result res;
  memset(&res, 0, sizeof res);
  if (kolo_etcd_range_prefix(l->client, kolo_etcd_str(KOLO_SERVER_LEADER_PREFIX), 100, &res) != KOLO_OK) {
    pthread_mutex_lock(&l->lock);
    l->known = 0;
    l->is_me = 0;
    pthread_mutex_unlock(&l->lock);
    return;
  }
  const kolo_etcd_kv *best = NULL;
  for (size_t i = 0; i < res.count; i++)
    if (best == NULL || res.kvs[i].create_revision < best->create_revision) best = &res.kvs[i];
  pthread_mutex_lock(&l->lock);
  int was_me = l->is_me;
  l->known = best != NULL;
  l->is_me = best && l->my_key[0] && strcmp((const char *)best->key, l->my_key) == 0 &&
             !atomic_load(&l->lease_lost);
  snprintf(l->leader_name, sizeof l->leader_name, "%.*s", best ? (int)best->value_len : 0,
           best ? (const char *)best->value : "");
  int now_me = l->is_me;
  pthread_mutex_unlock(&l->lock);
  if (now_me && !was_me) KOLO_LOGI(LOG, "%s is now the leader", l->name);
  if (!now_me && was_me) KOLO_LOGW(LOG, "%s is no longer the leader", l->name);
  kolo_etcd_range_result_free(&res);
}

static void *run(void *arg) {
  kolo_server_leader *l = arg;
  pthread_mutex_lock(&l->lock);
  while (!l->stop) {
    pthread_mutex_unlock(&l->lock);
    if (atomic_load(&l->lease_lost) && l->keepalive) drop_lease(l, 0);
    if (l->keepalive == NULL && campaign(l) != KOLO_OK)
      KOLO_LOGW(LOG, "campaign failed: %s", kolo_etcd_last_error());
    poll_leader(l);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_nsec += POLL_MS * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
      deadline.tv_sec++;
      deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&l->lock);
    while (!l->stop && pthread_cond_timedwait(&l->cond, &l->lock, &deadline) != ETIMEDOUT) {
    }
  }
  pthread_mutex_unlock(&l->lock);
  return NULL;
}

kolo_status kolo_server_leader_start(const char *endpoints, const char *name, int ttl_s,
                                     kolo_server_leader **out) {
  kolo_server_leader *l = calloc(1, sizeof *l);
  if (l == NULL) return KOLO_ERR_NO_MEMORY;
  char *copy = strdup(endpoints);
  const char *list[MAX_ENDPOINTS];
  size_t n = 0;
  char *save = NULL;
  for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok && n < MAX_ENDPOINTS;
       tok = strtok_r(NULL, ",", &save))
    list[n++] = tok;
  kolo_etcd_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.endpoints = list;
  cfg.endpoint_count = n;
  cfg.request_timeout_ms = 1000;
  kolo_status rc = n ? kolo_etcd_create(&cfg, &l->client) : KOLO_ERR_INVALID_ARG;
  free(copy);
  if (rc != KOLO_OK) {
    free(l);
    return rc;
  }
  snprintf(l->name, sizeof l->name, "%s", name);
  l->ttl_s = ttl_s > 0 ? ttl_s : 3;
  pthread_mutex_init(&l->lock, NULL);
  pthread_cond_init(&l->cond, NULL);
  pthread_create(&l->thread, NULL, run, l);
  *out = l;
  return KOLO_OK;
}

void kolo_server_leader_stop(kolo_server_leader *l) {
  if (l == NULL) return;
  pthread_mutex_lock(&l->lock);
  l->stop = 1;
  pthread_cond_broadcast(&l->cond);
  pthread_mutex_unlock(&l->lock);
  pthread_join(l->thread, NULL);
  drop_lease(l, 1);
  kolo_etcd_destroy(l->client);
  pthread_mutex_destroy(&l->lock);
  pthread_cond_destroy(&l->cond);
  free(l);
}

int kolo_server_leader_get(kolo_server_leader *l, char *leader_name, size_t len, int *is_me) {
  pthread_mutex_lock(&l->lock);
  int known = l->known;
  if (leader_name && len) snprintf(leader_name, len, "%s", l->leader_name);
  if (is_me) *is_me = l->is_me;
  pthread_mutex_unlock(&l->lock);
  return known;
}

kolo_status kolo_server_leader_fence(kolo_server_leader *l, char *key, size_t len,
                                     int64_t *create_revision) {
  kolo_status rc = KOLO_ERR_NOT_LEADER;
  pthread_mutex_lock(&l->lock);
  if (l->is_me) {
    snprintf(key, len, "%s", l->my_key);
    *create_revision = l->my_revision;
    rc = KOLO_OK;
  }
  pthread_mutex_unlock(&l->lock);
  return rc;
}
