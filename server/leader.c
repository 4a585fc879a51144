/* Implementation of leader.h over libkolo_coord's election (coordination/election.h):
 * one thread campaigns in short waits and observes who leads in between. */
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
#include "coordination/election.h"
#include "coordination/etcd.h"

#define LOG "leader"
#define POLL_MS 250

struct kolo_server_leader {
  kolo_etcd *client;
  char name[128];
  int ttl_s;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int stop;
  atomic_int lease_lost;
  kolo_election *election; /* owned by the thread while it runs */
  /* what the thread saw last, under lock */
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

/* Waits up to ms or until stop; returns 1 when stopping. */
static int pause_ms(kolo_server_leader *l, int ms) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_nsec += (long)ms * 1000000L;
  while (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&l->lock);
  while (!l->stop && pthread_cond_timedwait(&l->cond, &l->lock, &deadline) != ETIMEDOUT) {
  }
  int stop = l->stop;
  pthread_mutex_unlock(&l->lock);
  return stop;
}

static void drop_election(kolo_server_leader *l) {
  kolo_election_destroy(l->election);
  l->election = NULL;
  pthread_mutex_lock(&l->lock);
  l->my_key[0] = '\0';
  l->is_me = 0;
  pthread_mutex_unlock(&l->lock);
}

/* Reads who leads now (the lowest candidate) and whether it is us. */
static void observe(kolo_server_leader *l) {
  kolo_etcd_kv kv;
  memset(&kv, 0, sizeof kv);
  kolo_status rc = kolo_election_leader(l->client, NULL, &kv);
  int me = l->election && kolo_election_is_leader(l->election) && !atomic_load(&l->lease_lost);
  pthread_mutex_lock(&l->lock);
  int was_me = l->is_me;
  l->known = rc == KOLO_OK;
  l->is_me = me && rc == KOLO_OK;
  snprintf(l->leader_name, sizeof l->leader_name, "%.*s", rc == KOLO_OK ? (int)kv.value_len : 0,
           rc == KOLO_OK ? (const char *)kv.value : "");
  if (l->election) {
    snprintf(l->my_key, sizeof l->my_key, "%s", kolo_election_key(l->election));
    l->my_revision = kolo_election_revision(l->election);
  }
  int now_me = l->is_me;
  pthread_mutex_unlock(&l->lock);
  kolo_etcd_kv_clear(&kv);
  if (now_me && !was_me) KOLO_LOGI(LOG, "%s is now the leader", l->name);
  if (!now_me && was_me) KOLO_LOGW(LOG, "%s is no longer the leader", l->name);
}

static void *run(void *arg) {
  kolo_server_leader *l = arg;
  for (;;) {
    pthread_mutex_lock(&l->lock);
    int stop = l->stop;
    pthread_mutex_unlock(&l->lock);
    if (stop) break;
    if (l->election && atomic_load(&l->lease_lost)) drop_election(l);
    if (l->election == NULL) {
      atomic_store(&l->lease_lost, 0);
      if (kolo_election_create(l->client, NULL, l->name, l->ttl_s, on_lost, l, &l->election) !=
          KOLO_OK) {
        KOLO_LOGW(LOG, "cannot join the election: %s", kolo_etcd_last_error());
        l->election = NULL;
        observe(l);
        pause_ms(l, POLL_MS);
        continue;
      }
    }
    int waited = 0;
    if (!kolo_election_is_leader(l->election)) {
      kolo_status rc = kolo_election_campaign(l->election, POLL_MS);
      waited = rc == KOLO_ERR_TIMEOUT;
      if (rc == KOLO_ERR_LEASE_LOST) drop_election(l);
    }
    observe(l);
    if (!waited) pause_ms(l, POLL_MS);
  }
  return NULL;
}

kolo_status kolo_server_leader_start(kolo_etcd *etcd, const char *name, int ttl_s,
                                     kolo_server_leader **out) {
  kolo_server_leader *l = calloc(1, sizeof *l);
  if (l == NULL) return KOLO_ERR_NO_MEMORY;
  kolo_etcd_config tuning = {.request_timeout_ms = 1000};
  kolo_status rc = kolo_etcd_share(etcd, &tuning, &l->client);
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
  kolo_election_destroy(l->election); /* resigns: the next replica leads at once */
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

const kolo_etcd *kolo_server_leader_etcd(const kolo_server_leader *l) {
  return l->client;
}
