/* The worker's registration: its record under a lease (coordination/membership.h), the
 * state it advertises, losing the lease and registering again, and the partition fence
 * (fence.h) that holds the process while the lease may have expired. */
#define _GNU_SOURCE
#include "worker/agent/agent_internal.h"

static void on_lease_lost(int64_t lease, kolo_status status, const char *message, void *user) {
  agent *a = user;
  KOLO_LOGW(LOG, "registration lease %" PRIx64 " lost: %s", (uint64_t)lease,
            message ? message : "");
  pthread_mutex_lock(&a->lock);
  a->lease_lost = 1;
  pthread_mutex_unlock(&a->lock);
  poke(a);
}

kolo_status kolo_agent_set_state(agent *a, const char *state) {
  if (a->state == state || a->reg == NULL) return KOLO_OK;
  a->record.state = (char *)state;
  kolo_status rc = kolo_membership_update(a->reg, &a->record);
  a->record.state = NULL;
  if (rc == KOLO_OK) {
    a->state = state;
    KOLO_LOGI(LOG, "worker %s is %s", a->id, state);
  } else {
    KOLO_LOGW(LOG, "cannot set state %s: %s", state, kolo_etcd_last_error());
  }
  return rc;
}

/* Failures of a registration that a later attempt may not have. */
static int transient(kolo_status rc) {
  return rc == KOLO_ERR_EXISTS || rc == KOLO_ERR_UNAVAILABLE || rc == KOLO_ERR_CONNECT ||
         rc == KOLO_ERR_TIMEOUT;
}

/* One registration attempt (idle, under a fresh lease). */
static kolo_status register_once(agent *a) {
  a->record.state = "idle";
  a->record.registered_unix_ms = wall_ms(); /* ListWorkers' registered_unix_ms */
  kolo_status rc = kolo_membership_register(a->etcd, &a->record, a->opts->lease_ttl_s,
                                            on_lease_lost, a, &a->reg);
  a->record.state = NULL;
  if (rc != KOLO_OK) return rc;
  a->state = "idle";
  a->hs.registrations++;
  KOLO_LOGI(LOG, "registered worker %s at %s", a->id, a->record.address);
  return KOLO_OK;
}

/* At start: retries transient failures for a TTL + 10 s, then gives up. */
kolo_status kolo_agent_register_worker(agent *a) {
  int64_t deadline = mono_ms() + (a->opts->lease_ttl_s + 10) * 1000;
  kolo_status rc;
  for (;;) {
    rc = register_once(a);
    if (!transient(rc) || mono_ms() > deadline) break;
    KOLO_LOGW(LOG, "cannot register worker %s yet (%s); retrying", a->id, kolo_etcd_last_error());
    usleep(500 * 1000);
  }
  if (rc != KOLO_OK)
    KOLO_LOGE(LOG, "cannot register worker %s: %s (%s)", a->id, kolo_strerror(rc),
              kolo_etcd_last_error());
  return rc;
}

/* etcd said the lease is gone: the coordinator counts us gone, so the process
 * stops (its ring moved on without it) and we come back as a new worker. */
void kolo_agent_lose_registration(agent *a) {
  a->hs.leases_lost++;
  a->fenced = KOLO_AGENT_FENCED_NO; /* a held or paused process is killed below */
  if (a->proc) {                    /* never restart it for the assignment it had */
    snprintf(a->done_job, sizeof a->done_job, "%s", a->job);
    a->done_epoch = a->epoch;
  }
  kolo_agent_proc_destroy(a->proc);
  a->proc = NULL;
  kolo_agent_capture_end(a->capture, CAPTURE_DRAIN_MS, NULL, 0);
  a->leave = 0;
  kolo_membership_abandon(a->reg);
  a->reg = NULL;
  a->state = NULL;
  a->register_at_ms = mono_ms();
  a->register_wait_ms = 250;
}

/* Unregistered: one attempt when due; transient failures back off (up to 4 s)
 * and are retried for as long as it takes, since etcd may be unreachable for
 * a while (a partition): the main loop keeps serving signals meanwhile.
 * Returns KOLO_OK, or the error that no retry can fix. */
kolo_status kolo_agent_reregister(agent *a) {
  if (a->reg != NULL || mono_ms() < a->register_at_ms) return KOLO_OK;
  kolo_status rc = register_once(a);
  if (rc == KOLO_OK || !transient(rc)) return rc;
  KOLO_LOGW(LOG, "cannot register worker %s again yet (%s); next try in %lld ms", a->id,
            kolo_etcd_last_error(), (long long)a->register_wait_ms);
  a->register_at_ms = mono_ms() + a->register_wait_ms;
  a->register_wait_ms = a->register_wait_ms * 2 > 4000 ? 4000 : a->register_wait_ms * 2;
  return KOLO_OK;
}

/* Holds the process: HOLD when it speaks libkolo's hold (its beat goes on), else SIGSTOP. */
static void fence_pause(agent *a, int64_t now, int64_t renewed) {
  char why[160];
  snprintf(why, sizeof why,
           "no renewal of the worker's lease acknowledged for %" PRId64 " ms (TTL %d s)",
           now - renewed, a->opts->lease_ttl_s);
  int connection = kolo_agent_proc_hold_connection(a->proc);
  kolo_agent_msg hold = {.verb = KOLO_AGENT_HOLD, .text = why};
  if (connection > 0 && kolo_agent_proc_send_msg(a->proc, &hold) == KOLO_OK) {
    KOLO_LOGW(LOG,
              "%s: etcd may have expired it and the job may be running elsewhere, so the process "
              "(pid %d) is held (it starts no new collective; its beat goes on) until etcd answers",
              why, (int)kolo_agent_proc_pid(a->proc));
    a->fenced = KOLO_AGENT_FENCED_HELD;
    a->fence_connection = connection;
  } else {
    KOLO_LOGW(LOG,
              "%s: etcd may have expired it and the job may be running elsewhere, so the process "
              "(pid %d) is paused until etcd answers",
              why, (int)kolo_agent_proc_pid(a->proc));
    kolo_agent_proc_pause(a->proc, 1);
    a->fenced = KOLO_AGENT_FENCED_STOPPED;
  }
  a->fenced_at_ms = now;
  a->hs.fences++;
}

static void fence_resume(agent *a, int64_t now) {
  KOLO_LOGI(LOG, "etcd renewed the lease again: the process continues after %" PRId64 " ms %s",
            now - a->fenced_at_ms, a->fenced == KOLO_AGENT_FENCED_HELD ? "held" : "paused");
  if (a->fenced == KOLO_AGENT_FENCED_HELD) {
    kolo_agent_msg release = {.verb = KOLO_AGENT_RELEASE, .text = "etcd renewed the lease"};
    if (kolo_agent_proc_send_msg(a->proc, &release) != KOLO_OK) /* it lost us: it stops itself */
      KOLO_LOGW(LOG, "cannot send RELEASE: the process is no longer connected");
  } else {
    kolo_agent_proc_pause(a->proc, 0);
  }
  a->fenced = KOLO_AGENT_FENCED_NO;
}

/* The partition fence (fence.h): while no renewal of the lease has been acknowledged for a
 * TTL (less a margin), the process is held (HOLD: libkolo starts nothing new but keeps beating)
 * or, if it does not speak the hold (no libkolo, or an older one), paused with SIGSTOP, so it
 * cannot run beside a copy the scheduler started elsewhere; it continues when etcd renews the
 * lease again, and dies with kolo_agent_lose_registration when etcd says the lease is gone. A
 * held process whose connection went or was replaced (a new HELLO) is paused with SIGSTOP. */
void kolo_agent_fence(agent *a) {
  if (!a->opts->partition_fence || a->proc == NULL || a->reg == NULL) {
    a->fenced = KOLO_AGENT_FENCED_NO;
    return;
  }
  if (a->fenced == KOLO_AGENT_FENCED_HELD &&
      kolo_agent_proc_hold_connection(a->proc) != a->fence_connection) {
    KOLO_LOGW(LOG, "the held process (pid %d) left its connection: paused with SIGSTOP instead",
              (int)kolo_agent_proc_pid(a->proc));
    kolo_agent_proc_pause(a->proc, 1);
    a->fenced = KOLO_AGENT_FENCED_STOPPED;
  }
  int64_t now = mono_ms(), renewed = kolo_membership_renewed_ms(a->reg); /* CLOCK_MONOTONIC both */
  switch (kolo_agent_fence_decide(now, renewed, a->opts->lease_ttl_s * 1000LL, a->fenced != 0)) {
    case KOLO_AGENT_FENCE_PAUSE:
      fence_pause(a, now, renewed);
      break;
    case KOLO_AGENT_FENCE_RESUME:
      fence_resume(a, now);
      break;
    case KOLO_AGENT_FENCE_KEEP:
      break;
  }
}

/* At most wait_ms, less when the fence's deadline comes sooner (so it holds on time). */
int kolo_agent_fence_wait_ms(const agent *a, int wait_ms) {
  if (!a->opts->partition_fence || a->proc == NULL || a->reg == NULL || a->fenced) return wait_ms;
  int64_t left = kolo_membership_renewed_ms(a->reg) +
                 kolo_agent_fence_after_ms(a->opts->lease_ttl_s * 1000LL) - mono_ms();
  return left < 0 ? 0 : left < wait_ms ? (int)left : wait_ms;
}
