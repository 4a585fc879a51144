/* Leases: grant, revoke, one renewal, and the keep-alive thread that renews a
 * lease every TTL/3 and reports its loss once (etcd forgot it, or, in STRICT
 * mode, no renewal was acknowledged for a whole TTL). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "coordination/etcd_internal.h"

#define COMPONENT "etcd-lease"

kolo_status kolo_etcd_lease_grant(kolo_etcd *c, int64_t ttl_s, int64_t *lease_id,
                                  int64_t *granted_ttl_s) {
  *lease_id = 0;
  if (ttl_s < 1) return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "lease TTL must be at least 1 s");
  json_t *body = json_object(), *reply = NULL;
  if (body == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  kolo_status rc = kolo_etcd_json_set_int64(body, "TTL", ttl_s);
  if (rc == KOLO_OK) rc = kolo_etcd_call(c, "lease/grant", body, 0, 0, NULL, &reply);
  int64_t id = 0, ttl = 0;
  if (rc == KOLO_OK) rc = kolo_etcd_json_int64(reply, "ID", &id);
  if (rc == KOLO_OK) rc = kolo_etcd_json_int64(reply, "TTL", &ttl);
  if (rc == KOLO_OK && (id == 0 || ttl <= 0))
    rc = kolo_etcd_fail(KOLO_ERR_PROTOCOL, "etcd lease/grant reply has no ID or TTL");
  if (rc == KOLO_OK) {
    *lease_id = id;
    if (granted_ttl_s) *granted_ttl_s = ttl;
  }
  json_decref(body);
  json_decref(reply);
  return rc;
}

kolo_status kolo_etcd_lease_revoke(kolo_etcd *c, int64_t lease_id) {
  json_t *body = json_object(), *reply = NULL;
  if (body == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  kolo_status rc = kolo_etcd_json_set_int64(body, "ID", lease_id);
  if (rc == KOLO_OK)
    rc = kolo_etcd_call(c, "lease/revoke", body, 0, KOLO_ETCD_IDEMPOTENT, NULL, &reply);
  json_decref(body);
  json_decref(reply);
  return rc;
}

/* One renewal with an explicit deadline and cancel flag (the keep-alive thread's form). */
static kolo_status keepalive_once(kolo_etcd *c, int64_t lease_id, int timeout_ms,
                                  const atomic_int *cancel, int64_t *ttl_s) {
  json_t *body = json_object(), *reply = NULL;
  if (body == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  kolo_status rc = kolo_etcd_json_set_int64(body, "ID", lease_id);
  if (rc == KOLO_OK)
    rc = kolo_etcd_call(c, "lease/keepalive", body, timeout_ms, KOLO_ETCD_IDEMPOTENT, cancel,
                        &reply);
  int64_t ttl = 0;
  if (rc == KOLO_OK) {
    json_t *result = json_object_get(reply, "result");
    if (!json_is_object(result))
      rc = kolo_etcd_fail(KOLO_ERR_PROTOCOL, "etcd lease/keepalive reply has no result");
    else
      rc = kolo_etcd_json_int64(result, "TTL", &ttl);
  }
  /* A reply without TTL means etcd no longer has the lease. */
  if (rc == KOLO_OK && ttl <= 0)
    rc = kolo_etcd_fail(KOLO_ERR_LEASE_LOST, "etcd lease %" PRIx64 " no longer exists",
                        (uint64_t)lease_id);
  if (rc == KOLO_OK && ttl_s) *ttl_s = ttl;
  json_decref(body);
  json_decref(reply);
  return rc;
}

kolo_status kolo_etcd_lease_keepalive_once(kolo_etcd *c, int64_t lease_id, int64_t *ttl_s) {
  return keepalive_once(c, lease_id, 0, NULL, ttl_s);
}

/* ---- keep-alive thread ---- */

struct kolo_etcd_keepalive {
  kolo_etcd *client;
  int64_t lease_id;
  int64_t ttl_ms;
  kolo_etcd_keepalive_mode mode;
  kolo_etcd_lease_lost_fn lost;
  void *user;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  atomic_int stopping;
  atomic_int alive;
  _Atomic int64_t renewed_ms; /* monotonic time of the last acknowledged renewal */
};

/* Sleeps up to ms unless stop is requested; returns whether to stop. */
static int sleep_unless_stopped(kolo_etcd_keepalive *k, int64_t ms) {
  struct timespec until = kolo_etcd_monotonic_after(ms);
  pthread_mutex_lock(&k->lock);
  while (!atomic_load(&k->stopping)) {
    if (pthread_cond_timedwait(&k->wake, &k->lock, &until) == ETIMEDOUT) break;
  }
  pthread_mutex_unlock(&k->lock);
  return atomic_load(&k->stopping);
}

static void *keepalive_main(void *arg) {
  kolo_etcd_keepalive *k = arg;
  int64_t interval = k->ttl_ms / 3;
  if (interval < 500) interval = 500;
  int64_t last_ok = atomic_load(&k->renewed_ms); /* the lease was fresh when we were started */
  int64_t wait = interval, last_warning = 0;
  int failures = 0;
  char reason[512] = "";
  while (!sleep_unless_stopped(k, wait)) {
    int64_t now = kolo_etcd_now_ms();
    int64_t left = last_ok + k->ttl_ms - now;
    int timeout = kolo_etcd_request_timeout_ms(k->client);
    if (k->mode == KOLO_ETCD_KEEPALIVE_STRICT) {
      if (left <= 0) {
        snprintf(reason, sizeof reason,
                 "etcd lease %" PRIx64 " expired: no renewal acknowledged for %" PRId64 " ms (%s)",
                 (uint64_t)k->lease_id, now - last_ok, kolo_etcd_last_error());
        break;
      }
      if (left < timeout) timeout = (int)left;
    }
    int64_t ttl = 0;
    KOLO_LOGD(COMPONENT, "renewing lease %" PRIx64 " (deadline %d ms)", (uint64_t)k->lease_id,
              timeout);
    kolo_status rc = keepalive_once(k->client, k->lease_id, timeout, &k->stopping, &ttl);
    KOLO_LOGD(COMPONENT, "renewal of %" PRIx64 ": %s", (uint64_t)k->lease_id, kolo_status_name(rc));
    if (rc == KOLO_OK) {
      if (failures > 0)
        KOLO_LOGI(COMPONENT, "lease %" PRIx64 " renewed again after %" PRId64 " ms without etcd",
                  (uint64_t)k->lease_id, kolo_etcd_now_ms() - last_ok);
      last_ok = kolo_etcd_now_ms();
      atomic_store(&k->renewed_ms, last_ok);
      wait = interval;
      failures = 0;
      continue;
    }
    if (atomic_load(&k->stopping)) break;
    if (rc == KOLO_ERR_LEASE_LOST || rc == KOLO_ERR_NOT_FOUND) {
      snprintf(reason, sizeof reason, "%s", kolo_etcd_last_error());
      break;
    }
    /* etcd unreachable for now: retry soon, the lease may still be alive
     * (a warning when it starts, then every 5 s) */
    if (failures++ == 0 || kolo_etcd_now_ms() - last_warning >= 5000) {
      KOLO_LOGW(COMPONENT, "renewing lease %" PRIx64 " failed, retrying: %s", (uint64_t)k->lease_id,
                kolo_etcd_last_error());
      last_warning = kolo_etcd_now_ms();
    }
    wait = interval / 3 < 200 ? 200 : interval / 3;
    if (wait > 1000) wait = 1000;
  }
  if (!atomic_load(&k->stopping) && reason[0]) {
    KOLO_LOGW(COMPONENT, "%s", reason);
    if (k->lost) k->lost(k->lease_id, KOLO_ERR_LEASE_LOST, reason, k->user);
    atomic_store(&k->alive, 0);
  }
  return NULL;
}

kolo_status kolo_etcd_keepalive_start(kolo_etcd *c, int64_t lease_id, int64_t ttl_s,
                                      kolo_etcd_lease_lost_fn lost, void *user,
                                      kolo_etcd_keepalive **out) {
  return kolo_etcd_keepalive_start_mode(c, lease_id, ttl_s, KOLO_ETCD_KEEPALIVE_STRICT, lost, user,
                                        out);
}

kolo_status kolo_etcd_keepalive_start_mode(kolo_etcd *c, int64_t lease_id, int64_t ttl_s,
                                           kolo_etcd_keepalive_mode mode,
                                           kolo_etcd_lease_lost_fn lost, void *user,
                                           kolo_etcd_keepalive **out) {
  *out = NULL;
  if (c == NULL || lease_id == 0 || ttl_s < 1)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                          "keep-alive needs a client, a lease and a TTL >= 1 s");
  kolo_etcd_keepalive *k = calloc(1, sizeof *k);
  if (k == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  k->client = c;
  k->lease_id = lease_id;
  k->ttl_ms = ttl_s * 1000;
  k->mode = mode;
  k->lost = lost;
  k->user = user;
  atomic_init(&k->stopping, 0);
  atomic_init(&k->alive, 1);
  atomic_init(&k->renewed_ms, kolo_etcd_now_ms());
  pthread_mutex_init(&k->lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&k->wake, &attr);
  pthread_condattr_destroy(&attr);
  int err = pthread_create(&k->thread, NULL, keepalive_main, k);
  if (err != 0) {
    pthread_cond_destroy(&k->wake);
    pthread_mutex_destroy(&k->lock);
    free(k);
    return kolo_etcd_fail(kolo_status_from_errno(err), "cannot start the keep-alive thread: %s",
                          strerror(err));
  }
  *out = k;
  return KOLO_OK;
}

int kolo_etcd_keepalive_alive(const kolo_etcd_keepalive *k) {
  return atomic_load(&k->alive);
}

int64_t kolo_etcd_keepalive_renewed_ms(const kolo_etcd_keepalive *k) {
  return atomic_load(&k->renewed_ms);
}

void kolo_etcd_keepalive_stop(kolo_etcd_keepalive *k) {
  if (k == NULL) return;
  pthread_mutex_lock(&k->lock);
  atomic_store(&k->stopping, 1);
  pthread_cond_broadcast(&k->wake);
  pthread_mutex_unlock(&k->lock);
  pthread_join(k->thread, NULL);
  pthread_cond_destroy(&k->wake);
  pthread_mutex_destroy(&k->lock);
  free(k);
}
