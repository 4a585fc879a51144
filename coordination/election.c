/* Implementation of coordination/election.h: candidate keys under leases, the
 * wait on the predecessor's deletion (a one-key watch), and the fenced txn. */
#include "coordination/election.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "coordination/etcd_internal.h"
#include "coordination/keys.h"

#define COMPONENT "election"

struct kolo_election {
  kolo_etcd *client;
  char prefix[200];
  char key[256];
  char *value;
  int64_t lease;
  int64_t ttl_s;
  int64_t revision; /* create revision of our key, 0 when not campaigning */
  atomic_int leader;
  kolo_etcd_keepalive *keepalive;
  kolo_etcd_lease_lost_fn lost;
  void *user;
  /* The wait on the predecessor. */
  pthread_mutex_t lock;
  pthread_cond_t changed;
  int predecessor_gone;
  int lease_lost;
};

static void on_lease_lost(int64_t lease, kolo_status status, const char *message, void *user) {
  kolo_election *e = user;
  atomic_store(&e->leader, 0);
  pthread_mutex_lock(&e->lock);
  e->lease_lost = 1;
  pthread_cond_broadcast(&e->changed);
  pthread_mutex_unlock(&e->lock);
  if (e->lost) e->lost(lease, status, message, e->user);
}

kolo_status kolo_election_create(kolo_etcd *client, const char *prefix, const char *value,
                                 int64_t ttl_s, kolo_etcd_lease_lost_fn lost, void *user,
                                 kolo_election **out) {
  *out = NULL;
  if (prefix == NULL) prefix = KOLO_KEY_LEADER_PREFIX;
  if (client == NULL || prefix[0] == '\0' || strlen(prefix) >= 200)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                          "election needs a client and a prefix under 200 bytes");
  kolo_election *e = calloc(1, sizeof *e);
  if (e == NULL || (e->value = strdup(value ? value : "")) == NULL) {
    free(e);
    return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  }
  e->client = client;
  snprintf(e->prefix, sizeof e->prefix, "%s", prefix);
  e->lost = lost;
  e->user = user;
  atomic_init(&e->leader, 0);
  pthread_mutex_init(&e->lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&e->changed, &attr);
  pthread_condattr_destroy(&attr);
  kolo_status rc = kolo_etcd_lease_grant(client, ttl_s, &e->lease, &e->ttl_s);
  if (rc == KOLO_OK) {
    snprintf(e->key, sizeof e->key, "%s%" PRIx64, e->prefix, (uint64_t)e->lease);
    rc = kolo_etcd_keepalive_start(client, e->lease, e->ttl_s, on_lease_lost, e, &e->keepalive);
    if (rc != KOLO_OK) kolo_etcd_lease_revoke(client, e->lease);
  }
  if (rc != KOLO_OK) {
    pthread_cond_destroy(&e->changed);
    pthread_mutex_destroy(&e->lock);
    free(e->value);
    free(e);
    return rc;
  }
  *out = e;
  return KOLO_OK;
}

/* Creates our key, or adopts it when it already exists under our lease. */
static kolo_status enter(kolo_election *e) {
  kolo_etcd_kv existing;
  int64_t revision = 0;
  kolo_status rc = kolo_etcd_create_key(e->client, kolo_etcd_str(e->key), kolo_etcd_str(e->value),
                                        e->lease, &existing, &revision);
  if (rc == KOLO_OK) {
    e->revision = revision;
    return KOLO_OK;
  }
  if (rc == KOLO_ERR_EXISTS) {
    if (existing.lease == e->lease) {
      e->revision = existing.create_revision;
      rc = KOLO_OK;
    } else {
      rc = kolo_etcd_fail(KOLO_ERR_CONFLICT, "election key %s is held by another lease", e->key);
    }
    kolo_etcd_kv_clear(&existing);
  } else if (rc == KOLO_ERR_NOT_FOUND) {
    rc = kolo_etcd_fail(KOLO_ERR_LEASE_LOST, "election lease is gone: %s", kolo_etcd_last_error());
  }
  return rc;
}

static void on_predecessor(const kolo_etcd_watch_update *u, void *user) {
  kolo_election *e = user;
  int gone = u->kind == KOLO_ETCD_WATCH_RESYNC && u->kv_count == 0;
  for (size_t i = 0; i < u->event_count; i++)
    if (u->events[i].type == KOLO_ETCD_EVENT_DELETE) gone = 1;
  if (!gone) return;
  pthread_mutex_lock(&e->lock);
  e->predecessor_gone = 1;
  pthread_cond_broadcast(&e->changed);
  pthread_mutex_unlock(&e->lock);
}

/* Waits until the predecessor key is deleted, the lease is lost or the deadline
 * (0 = none) passes. */
static kolo_status wait_predecessor(kolo_election *e, const kolo_etcd_kv *pred,
                                    int64_t from_revision, int64_t deadline) {
  pthread_mutex_lock(&e->lock);
  e->predecessor_gone = 0;
  pthread_mutex_unlock(&e->lock);
  kolo_etcd_watch *w = NULL;
  kolo_etcd_watch_opts opts = {.key = {pred->key, pred->key_len}, .start_revision = from_revision};
  kolo_status rc = kolo_etcd_watch_start(e->client, &opts, on_predecessor, e, &w);
  if (rc != KOLO_OK) return rc;
  struct timespec until;
  if (deadline) {
    int64_t left = deadline - kolo_etcd_now_ms();
    if (left < 0) left = 0;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += left / 1000;
    until.tv_nsec += (left % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
  }
  pthread_mutex_lock(&e->lock);
  while (!e->predecessor_gone && !e->lease_lost) {
    if (deadline) {
      if (pthread_cond_timedwait(&e->changed, &e->lock, &until) == ETIMEDOUT) break;
    } else {
      pthread_cond_wait(&e->changed, &e->lock);
    }
  }
  int gone = e->predecessor_gone, lost = e->lease_lost;
  pthread_mutex_unlock(&e->lock);
  kolo_etcd_watch_stop(w);
  if (lost) return kolo_etcd_fail(KOLO_ERR_LEASE_LOST, "election lease lost while campaigning");
  if (!gone)
    return kolo_etcd_fail(KOLO_ERR_TIMEOUT, "campaign: still not the leader after the timeout");
  return KOLO_OK;
}

kolo_status kolo_election_campaign(kolo_election *e, int timeout_ms) {
  int64_t deadline = timeout_ms > 0 ? kolo_etcd_now_ms() + timeout_ms : 0;
  pthread_mutex_lock(&e->lock);
  int lost = e->lease_lost;
  pthread_mutex_unlock(&e->lock);
  if (lost)
    return kolo_etcd_fail(KOLO_ERR_LEASE_LOST, "election lease %" PRIx64 " is lost",
                          (uint64_t)e->lease);
  kolo_status rc = enter(e);
  if (rc != KOLO_OK) return rc;
  for (;;) {
    /* The newest key created before ours is the one to wait for. */
    kolo_etcd_range_opts opts = {.key = kolo_etcd_str(e->prefix),
                                 .prefix = 1,
                                 .limit = 1,
                                 .sort = KOLO_ETCD_SORT_CREATE_DESC,
                                 .max_create_revision = e->revision - 1};
    kolo_etcd_range_result r;
    rc = kolo_etcd_range(e->client, &opts, &r);
    if (rc != KOLO_OK) return rc;
    if (r.count == 0) {
      kolo_etcd_range_result_free(&r);
      /* Still ours? (The lease may have expired while we waited.) */
      kolo_etcd_kv mine;
      rc = kolo_etcd_get(e->client, kolo_etcd_str(e->key), &mine, NULL);
      if (rc == KOLO_ERR_NOT_FOUND || (rc == KOLO_OK && mine.create_revision != e->revision))
        rc = kolo_etcd_fail(KOLO_ERR_LEASE_LOST, "election key %s vanished while campaigning",
                            e->key);
      kolo_etcd_kv_clear(&mine);
      if (rc != KOLO_OK) return rc;
      atomic_store(&e->leader, 1);
      KOLO_LOGI(COMPONENT, "leading: %s (create revision %" PRId64 ")", e->key, e->revision);
      return KOLO_OK;
    }
    KOLO_LOGD(COMPONENT, "%s waits for %s", e->key, (char *)r.kvs[0].key);
    rc = wait_predecessor(e, &r.kvs[0], r.revision + 1, deadline);
    kolo_etcd_range_result_free(&r);
    if (rc != KOLO_OK) return rc;
  }
}

int kolo_election_is_leader(const kolo_election *e) {
  return atomic_load(&e->leader);
}
const char *kolo_election_key(const kolo_election *e) {
  return e->key;
}
int64_t kolo_election_revision(const kolo_election *e) {
  return e->revision;
}

kolo_status kolo_election_fenced_txn(kolo_election *e, const kolo_etcd_txn *txn,
                                     kolo_etcd_txn_result *result) {
  memset(result, 0, sizeof *result);
  if (e->revision == 0)
    return kolo_etcd_fail(KOLO_ERR_NOT_LEADER, "not campaigning: no leader key");
  size_t nc = txn->compare_count + 1, nf = txn->failure_count + 1;
  kolo_etcd_compare *compares = calloc(nc, sizeof *compares);
  kolo_etcd_op *failure = calloc(nf, sizeof *failure);
  kolo_status rc = KOLO_OK;
  if (compares == NULL || failure == NULL) {
    rc = kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
    goto out;
  }
  if (txn->compare_count) memcpy(compares, txn->compares, txn->compare_count * sizeof *compares);
  compares[nc - 1] = (kolo_etcd_compare){.target = KOLO_ETCD_CMP_CREATE,
                                         .result = KOLO_ETCD_EQUAL,
                                         .key = kolo_etcd_str(e->key),
                                         .number = e->revision};
  /* On failure, also read our key to tell a lost fence from the caller's compares. */
  if (txn->failure_count) memcpy(failure, txn->failure, txn->failure_count * sizeof *failure);
  failure[nf - 1] = (kolo_etcd_op){.kind = KOLO_ETCD_OP_RANGE, .key = kolo_etcd_str(e->key)};
  kolo_etcd_txn fenced = {compares, nc, txn->success, txn->success_count, failure, nf};
  rc = kolo_etcd_txn_run(e->client, &fenced, result);
  if (rc != KOLO_OK || result->succeeded) goto out;
  kolo_etcd_op_response *mine = &result->responses[result->count - 1];
  int fence_holds = mine->range.count == 1 && mine->range.kvs[0].create_revision == e->revision;
  kolo_etcd_range_result_free(&mine->range);
  result->count--;
  if (!fence_holds) {
    atomic_store(&e->leader, 0);
    kolo_etcd_txn_result_free(result);
    rc = kolo_etcd_fail(KOLO_ERR_NOT_LEADER, "fenced write refused: %s is no longer the leader key",
                        e->key);
  }
out:
  free(compares);
  free(failure);
  return rc;
}

kolo_status kolo_election_resign(kolo_election *e) {
  atomic_store(&e->leader, 0);
  if (e->revision == 0) return KOLO_OK;
  kolo_etcd_compare cmp = {.target = KOLO_ETCD_CMP_CREATE,
                           .result = KOLO_ETCD_EQUAL,
                           .key = kolo_etcd_str(e->key),
                           .number = e->revision};
  kolo_etcd_op del = {.kind = KOLO_ETCD_OP_DELETE, .key = kolo_etcd_str(e->key)};
  kolo_etcd_txn txn = {&cmp, 1, &del, 1, NULL, 0};
  kolo_etcd_txn_result r;
  kolo_status rc = kolo_etcd_txn_run(e->client, &txn, &r);
  if (rc == KOLO_OK) {
    kolo_etcd_txn_result_free(&r);
    e->revision = 0;
  }
  return rc;
}

void kolo_election_destroy(kolo_election *e) {
  if (e == NULL) return;
  kolo_etcd_keepalive_stop(e->keepalive);
  if (kolo_election_resign(e) != KOLO_OK)
    KOLO_LOGW(COMPONENT, "resigning %s failed: %s", e->key, kolo_etcd_last_error());
  kolo_etcd_lease_revoke(e->client, e->lease);
  pthread_cond_destroy(&e->changed);
  pthread_mutex_destroy(&e->lock);
  free(e->value);
  free(e);
}

kolo_status kolo_election_leader(kolo_etcd *client, const char *prefix, kolo_etcd_kv *leader) {
  memset(leader, 0, sizeof *leader);
  if (prefix == NULL) prefix = KOLO_KEY_LEADER_PREFIX;
  kolo_etcd_range_opts opts = {
      .key = kolo_etcd_str(prefix), .prefix = 1, .limit = 1, .sort = KOLO_ETCD_SORT_CREATE_ASC};
  kolo_etcd_range_result r;
  kolo_status rc = kolo_etcd_range(client, &opts, &r);
  if (rc != KOLO_OK) return rc;
  if (r.count == 0) {
    kolo_etcd_range_result_free(&r);
    return kolo_etcd_fail(KOLO_ERR_NOT_FOUND, "no leader under %s", prefix);
  }
  *leader = r.kvs[0];
  memset(&r.kvs[0], 0, sizeof r.kvs[0]);
  kolo_etcd_range_result_free(&r);
  return KOLO_OK;
}

/* ---- observer ---- */

struct kolo_election_observer {
  kolo_etcd *client;
  char prefix[200];
  kolo_election_observe_fn fn;
  void *user;
  unsigned char *key; /* current leader key, NULL when none */
  int64_t create_revision;
  kolo_etcd_watch *watch;
};

/* Re-reads the leader and reports it if it changed. */
static void observe_refresh(kolo_election_observer *o) {
  kolo_etcd_kv leader;
  kolo_status rc = kolo_election_leader(o->client, o->prefix, &leader);
  if (rc != KOLO_OK && rc != KOLO_ERR_NOT_FOUND) {
    KOLO_LOGW(COMPONENT, "observing %s: %s", o->prefix, kolo_etcd_last_error());
    return;
  }
  int have = rc == KOLO_OK;
  int same = have ? (o->key && strcmp((char *)o->key, (char *)leader.key) == 0 &&
                     o->create_revision == leader.create_revision)
                  : o->key == NULL;
  if (!same) {
    free(o->key);
    o->key = NULL;
    o->create_revision = 0;
    if (have) {
      o->key = (unsigned char *)strdup((char *)leader.key);
      o->create_revision = leader.create_revision;
    }
    o->fn(have ? &leader : NULL, o->user);
  }
  kolo_etcd_kv_clear(&leader);
}

static void on_candidates(const kolo_etcd_watch_update *u, void *user) {
  (void)u;
  observe_refresh(user);
}

kolo_status kolo_election_observe_start(kolo_etcd *client, const char *prefix,
                                        kolo_election_observe_fn fn, void *user,
                                        kolo_election_observer **out) {
  *out = NULL;
  if (prefix == NULL) prefix = KOLO_KEY_LEADER_PREFIX;
  if (client == NULL || fn == NULL || prefix[0] == '\0' || strlen(prefix) >= 200)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "observer needs a client, a callback and a prefix");
  kolo_election_observer *o = calloc(1, sizeof *o);
  if (o == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  o->client = client;
  snprintf(o->prefix, sizeof o->prefix, "%s", prefix);
  o->fn = fn;
  o->user = user;
  int64_t revision = 0;
  kolo_etcd_range_opts opts = {
      .key = kolo_etcd_str(prefix), .prefix = 1, .limit = 1, .sort = KOLO_ETCD_SORT_CREATE_ASC};
  kolo_etcd_range_result r;
  kolo_status rc = kolo_etcd_range(client, &opts, &r);
  if (rc != KOLO_OK) {
    free(o);
    return rc;
  }
  revision = r.revision;
  if (r.count == 1) {
    o->key = (unsigned char *)strdup((char *)r.kvs[0].key);
    o->create_revision = r.kvs[0].create_revision;
  }
  fn(r.count == 1 ? &r.kvs[0] : NULL, user);
  kolo_etcd_range_result_free(&r);
  kolo_etcd_watch_opts wopts = {
      .key = kolo_etcd_str(prefix), .prefix = 1, .start_revision = revision + 1};
  rc = kolo_etcd_watch_start(client, &wopts, on_candidates, o, &o->watch);
  if (rc != KOLO_OK) {
    free(o->key);
    free(o);
    return rc;
  }
  *out = o;
  return KOLO_OK;
}

void kolo_election_observe_stop(kolo_election_observer *o) {
  if (o == NULL) return;
  kolo_etcd_watch_stop(o->watch);
  free(o->key);
  free(o);
}
