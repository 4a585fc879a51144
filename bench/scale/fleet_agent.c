/* Implementation of fleet_agent.h: worker/agent/agent.c's etcd side (registration,
 * assignment watch, reconcile, reports, state) over a simulated process. Each step
 * below names the agent.c function it mirrors. */
#define _GNU_SOURCE
#include "bench/scale/fleet_agent.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codec/codec.h"
#include "coordination/assignment.h"
#include "coordination/drain.h"
#include "coordination/keys.h"
#include "coordination/membership.h"
#include "coordination/report.h"
#include "coordination/ringspec.h"
#include "kolo/v1/job.pb-c.h"

#define EXIT_STOPPED 143 /* what the agent's reap sees of a process it stopped (SIGTERM) */

struct kolo_fleet_agent {
  kolo_fleet_agent_config c;
  char id[129], host[256], address[300], assign_key[256];
  char logs_url[300], logs_token[40]; /* as a real agent publishes them (nothing serves them) */
  kolo_etcd *etcd;
  kolo_membership *reg;
  Kolo__V1__WorkerRecord record; /* coordination/membership.h; strings borrowed */
  kolo_etcd_watch *watch;
  pthread_mutex_t lock;
  char *assignment; /* newest value (watch thread); NULL = none */
  int changed;      /* a new value since the last reconcile */
  int lease_lost;
  int pend_drain, pend_kill;             /* posted by other threads, applied by tick */
  int hold;                              /* set by kolo_fleet_agent_hold */
  int64_t pend_fail_at, pend_fail_epoch; /* a neighbour's loss (peer_lost) */
  int pend_fail_rank;
  char pend_fail_job[129];
  const char *state;
  int draining, killed, gone;
  /* the simulated process (agent.c's a->proc and its report fields) */
  int running, leaving;
  char job[129];
  int64_t epoch, rank, size;
  int64_t form_at, next_step, step, total;
  int64_t formed_epoch, first_formed_epoch, failed_epoch, failed_rank, exit_epoch;
  int hello, exited, exit_code;
  char failed_status[64];
  int64_t fail_at, fail_epoch, fail_rank; /* a neighbour's loss to report at fail_at */
  Kolo__V1__Struct *progress;
  char done_job[129];
  int64_t done_epoch;
  int report_dirty;
  int64_t report_written_ms;
};

static int64_t wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void event(kolo_fleet_agent *a, const char *what, int64_t epoch, int64_t detail) {
  if (a->c.on_event) a->c.on_event(a->c.user, a, what, a->job, epoch, detail);
}

/* agent.c on_assignment: keep the newest value. */
static void on_assignment(const kolo_etcd_watch_update *update, void *user) {
  kolo_fleet_agent *a = user;
  pthread_mutex_lock(&a->lock);
  if (update->kind == KOLO_ETCD_WATCH_RESYNC) {
    free(a->assignment);
    a->assignment = update->kv_count ? strdup((const char *)update->kvs[0].value) : NULL;
  }
  for (size_t i = 0; update->kind == KOLO_ETCD_WATCH_EVENTS && i < update->event_count; i++) {
    free(a->assignment);
    a->assignment = update->events[i].type == KOLO_ETCD_EVENT_PUT
                        ? strdup((const char *)update->events[i].kv.value)
                        : NULL;
  }
  a->changed = 1;
  pthread_mutex_unlock(&a->lock);
}

static void on_lease_lost(int64_t lease, kolo_status status, const char *message, void *user) {
  (void)lease, (void)status, (void)message;
  kolo_fleet_agent *a = user;
  pthread_mutex_lock(&a->lock);
  a->lease_lost = 1;
  pthread_mutex_unlock(&a->lock);
}

/* agent.c set_state */
static void set_state(kolo_fleet_agent *a, const char *state) {
  if (a->state == state || a->reg == NULL) return;
  a->record.state = (char *)state;
  if (kolo_membership_update(a->reg, &a->record) == KOLO_OK) a->state = state;
  a->record.state = NULL;
}

/* agent.c register_once */
static kolo_status register_once(kolo_fleet_agent *a) {
  a->record.state = "idle";
  a->record.registered_unix_ms = wall_ms();
  kolo_status rc =
      kolo_membership_register(a->etcd, &a->record, a->c.lease_ttl_s, on_lease_lost, a, &a->reg);
  a->record.state = NULL;
  if (rc == KOLO_OK) a->state = "idle";
  return rc;
}

/* agent.c write_report */
static void write_report(kolo_fleet_agent *a, int64_t now) {
  char key[512];
  if (a->job[0] == '\0' || kolo_keys_report(a->job, a->id, key, sizeof key) != KOLO_OK) return;
  Kolo__V1__AgentReport r = KOLO__V1__AGENT_REPORT__INIT; /* presence: kolo_report_write's */
  r.worker = a->id;
  r.epoch = a->epoch;
  r.formed_epoch = a->formed_epoch;
  r.failed_epoch = a->failed_epoch;
  r.failed_rank = a->failed_rank;
  r.failed_status = a->failed_status;
  r.exited = a->exited != 0;
  r.exit_code = a->exit_code;
  r.exit_epoch = a->exit_epoch;
  r.time_unix_ms = wall_ms();
  r.pid = a->running ? 100000 + (int64_t)(a->rank + 1) : 0;
  r.progress = a->progress;
  r.hello = a->hello != 0;
  r.first_formed_epoch = a->first_formed_epoch;
  char *text = NULL;
  if (kolo_report_write(&r, &text, NULL, 0) != KOLO_OK) return;
  kolo_status rc = kolo_etcd_put(a->etcd, kolo_etcd_str(key), kolo_etcd_str(text), 0, NULL, NULL);
  free(text);
  a->report_dirty = rc != KOLO_OK; /* retried: an exit must reach the scheduler */
  if (rc == KOLO_OK) a->report_written_ms = now;
}

/* A REPORT line of the process merged into the progress (coordination/report.h). */
static void progress_line(kolo_fleet_agent *a) {
  char line[160];
  snprintf(line, sizeof line, "{\"step\":%" PRId64 ",\"total_steps\":%" PRId64 ",\"loss\":%.4f}",
           a->step, a->total, 2.3 / (1.0 + (double)a->step / 50.0));
  if (kolo_report_progress_merge(&a->progress, line, strlen(line), NULL, 0) == KOLO_OK)
    a->report_dirty = 1;
}

/* The process ended with code (agent.c reap). */
static void process_exit(kolo_fleet_agent *a, int code, int64_t now) {
  a->running = a->leaving = 0;
  a->form_at = a->fail_at = 0;
  a->exited = 1;
  a->exit_code = code;
  a->exit_epoch = a->epoch;
  snprintf(a->done_job, sizeof a->done_job, "%s", a->job);
  a->done_epoch = a->epoch;
  write_report(a, now);
  event(a, "exited", a->epoch, code);
  a->changed = 1; /* reconcile again: the next assignment may wait on this exit */
}

/* A JobSpec's steps: builtin.steps, else the fleet's default. */
static int64_t spec_steps(kolo_fleet_agent *a, const char *job) {
  char key[512];
  kolo_etcd_kv kv = {0};
  int64_t steps = a->c.steps;
  if (kolo_keys_job(job, "spec", key, sizeof key) != KOLO_OK ||
      kolo_etcd_get(a->etcd, kolo_etcd_str(key), &kv, NULL) != KOLO_OK)
    return steps;
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  if (kolo_codec_read((const char *)kv.value, kv.value_len, &kolo__v1__job_spec__descriptor,
                      KOLO_CODEC_IGNORE_UNKNOWN, &msg, &fault) == KOLO_OK) {
    const Kolo__V1__JobSpec *spec = (const Kolo__V1__JobSpec *)msg;
    if (spec->program_case == KOLO__V1__JOB_SPEC__PROGRAM_BUILTIN && spec->builtin &&
        spec->builtin->steps > 0)
      steps = (int64_t)spec->builtin->steps;
    protobuf_c_message_free_unpacked(msg, NULL);
  }
  kolo_etcd_kv_clear(&kv);
  return steps;
}

/* agent.c start_process: a new process of job at ring (rank me). */
static void start_process(kolo_fleet_agent *a, const char *job, const Kolo__V1__RingRecord *ring,
                          int me, int64_t now) {
  a->total = spec_steps(a, job);
  snprintf(a->job, sizeof a->job, "%s", job);
  a->running = 1;
  a->leaving = 0;
  a->epoch = ring->epoch;
  a->rank = me;
  a->size = (int64_t)ring->n_members;
  a->formed_epoch = a->failed_epoch = a->exit_epoch = a->first_formed_epoch = 0;
  a->failed_rank = -1;
  a->failed_status[0] = '\0';
  a->exited = a->exit_code = a->hello = 0;
  a->step = 0;
  a->fail_at = 0;
  if (a->progress) protobuf_c_message_free_unpacked(&a->progress->base, NULL);
  a->progress = NULL;
  write_report(a, now);
  set_state(a, a->draining ? "draining" : "busy");
  a->form_at = now + a->c.form_ms;
  event(a, "assigned", a->epoch, me);
}

/* agent.c get_ring */
static Kolo__V1__RingRecord *get_ring(kolo_fleet_agent *a, const char *key) {
  kolo_etcd_kv kv = {0};
  if (kolo_etcd_get(a->etcd, kolo_etcd_str(key), &kv, NULL) != KOLO_OK) return NULL;
  Kolo__V1__RingRecord *ring = NULL;
  kolo_ringspec_read((const char *)kv.value, kv.value_len, &ring, NULL, 0);
  kolo_etcd_kv_clear(&kv);
  return ring;
}

/* agent.c drain_marked: an operator's DrainWorker names this registration. */
static int drain_marked(kolo_fleet_agent *a) {
  return a->reg != NULL && kolo_drain_marked(a->etcd, a->id, kolo_membership_lease(a->reg));
}

/* The assignment names (job, epoch) at ring_key: start, move to the newer ring, or nothing. */
static void take_ring(kolo_fleet_agent *a, const char *job, int64_t epoch, const char *ring_key,
                      int64_t now) {
  if (!a->running && strcmp(job, a->done_job) == 0 && epoch <= a->done_epoch) return;
  if (a->running && epoch <= a->epoch) return;
  Kolo__V1__RingRecord *ring = get_ring(a, ring_key);
  if (ring == NULL) return;
  int me = kolo_ringspec_rank_of(ring, a->id);
  int64_t lease = me < 0 ? 0 : ring->members[me]->lease;
  int stale = me < 0 || (lease != 0 && a->reg && lease != kolo_membership_lease(a->reg));
  if (stale && !a->running) { /* agent.c stale_member: never this epoch */
    snprintf(a->done_job, sizeof a->done_job, "%s", job);
    a->done_epoch = epoch;
  } else if (!a->running) {
    start_process(a, job, ring, me, now);
  } else if (!stale) {
    a->epoch = ring->epoch;
    a->rank = me;
    a->size = (int64_t)ring->n_members;
    write_report(a, now);
    a->form_at = now + a->c.form_ms;
    event(a, "assigned", a->epoch, me);
  }
  protobuf_c_message_free_unpacked(&ring->base, NULL);
}

/* agent.c reconcile: what runs follows the newest assignment. */
static void reconcile(kolo_fleet_agent *a, int64_t now) {
  pthread_mutex_lock(&a->lock);
  char *value = a->assignment ? strdup(a->assignment) : NULL;
  a->changed = 0;
  pthread_mutex_unlock(&a->lock);
  Kolo__V1__Assignment *as = NULL;
  if (value) kolo_assignment_read(value, strlen(value), &as, NULL, 0);
  free(value);
  const char *job = as ? as->job : NULL;
  if (a->running && (job == NULL || strcmp(job, a->job) != 0)) {
    int formed = a->formed_epoch == a->epoch && a->form_at == 0;
    if (job == NULL && !a->leaving && formed && (a->draining || drain_marked(a)))
      a->leaving = 1; /* LEAVE: it stops at its next commit (the next step here) */
    else if (!a->leaving)
      process_exit(a, EXIT_STOPPED, now);
    goto out;
  }
  if (job == NULL) {
    if (!a->running) {
      if (a->job[0]) event(a, "idle", a->epoch, 0);
      a->job[0] = '\0';
      if (a->hold) a->draining = 1; /* held: never idle, it leaves (kolo_fleet_agent_hold) */
      set_state(a, a->draining ? "draining" : "idle");
    }
    goto out;
  }
  take_ring(a, job, as->epoch, as->ring, now);
out:
  if (as) protobuf_c_message_free_unpacked(&as->base, NULL);
}

/* The simulated process: forming, a neighbour's loss, steps, exit. */
static void run_process(kolo_fleet_agent *a, int64_t now) {
  if (a->fail_at && now >= a->fail_at) {
    a->fail_at = 0;
    if (a->fail_epoch == a->epoch && a->formed_epoch >= a->epoch) {
      a->failed_epoch = a->fail_epoch;
      a->failed_rank = a->fail_rank;
      snprintf(a->failed_status, sizeof a->failed_status, "%s",
               kolo_status_name(KOLO_ERR_PEER_LOST));
      write_report(a, now); /* at once, as agent.c on FAILED */
      event(a, "failed", a->epoch, a->fail_rank);
    }
  }
  if (a->form_at && now >= a->form_at) {
    a->form_at = 0;
    a->hello = 1;
    a->formed_epoch = a->epoch;
    if (a->first_formed_epoch == 0) a->first_formed_epoch = a->epoch;
    if (a->c.job_step) { /* the new rank 0 broadcasts the committed state */
      int64_t s = a->c.job_step(a->c.user, a->job);
      if (s > a->step) a->step = s;
    }
    a->next_step = now + a->c.step_ms;
    write_report(a, now);
    event(a, "formed", a->epoch, a->rank);
  }
  int stepping = a->formed_epoch == a->epoch && a->failed_epoch < a->epoch && a->form_at == 0;
  if (stepping && now >= a->next_step) {
    a->step++;
    a->next_step += a->c.step_ms;
    if (a->next_step < now) a->next_step = now + a->c.step_ms;
    progress_line(a);
    event(a, "step", a->epoch, a->step);
    if (a->leaving || a->step >= a->total) {
      process_exit(a, 0, now);
      return;
    }
  }
  if (a->report_dirty && now - a->report_written_ms >= a->c.report_ms) write_report(a, now);
}

/* The worker dies: no more requests; the lease expires by itself. */
static void kill_now(kolo_fleet_agent *a) {
  kolo_etcd_watch_stop(a->watch);
  a->watch = NULL;
  kolo_membership_abandon(a->reg);
  a->reg = NULL;
  a->killed = a->gone = 1;
  a->running = 0;
  event(a, "lost", a->epoch, 0);
}

int kolo_fleet_agent_tick(kolo_fleet_agent *a, int64_t now) {
  if (a->gone) return 0;
  pthread_mutex_lock(&a->lock);
  int lost = a->lease_lost, changed = a->changed, drain = a->pend_drain, kill = a->pend_kill;
  a->lease_lost = a->pend_drain = 0;
  if (a->pend_fail_at && a->running && strcmp(a->pend_fail_job, a->job) == 0 &&
      a->pend_fail_epoch == a->epoch && a->pend_fail_rank != a->rank) {
    a->fail_at = a->pend_fail_at;
    a->fail_epoch = a->pend_fail_epoch;
    a->fail_rank = a->pend_fail_rank;
  }
  a->pend_fail_at = 0;
  pthread_mutex_unlock(&a->lock);
  if (kill) {
    kill_now(a);
    return 0;
  }
  if (a->hold && !a->running && !a->draining && a->state && strcmp(a->state, "idle") == 0)
    drain = 1;
  if (drain && !a->draining) {
    a->draining = 1;
    set_state(a, "draining");
  }
  if (lost) { /* agent.c lose_registration: the process goes, the worker comes back */
    if (a->running) {
      snprintf(a->done_job, sizeof a->done_job, "%s", a->job);
      a->done_epoch = a->epoch;
    }
    a->running = a->leaving = 0;
    kolo_membership_abandon(a->reg);
    a->reg = NULL;
    a->state = NULL;
    if (a->draining || register_once(a) != KOLO_OK) { /* gone; the fleet may add another */
      a->gone = 1;
      event(a, "lost", a->epoch, 0);
      return 0;
    }
    changed = 1;
  }
  if (a->running) run_process(a, now);
  if (changed || a->changed) reconcile(a, now);
  if (a->draining && !a->running) { /* agent.c: no process left: it exits, deregistered */
    kolo_etcd_watch_stop(a->watch);
    a->watch = NULL;
    if (a->reg) kolo_membership_deregister(a->reg);
    a->reg = NULL;
    a->gone = 1;
    event(a, "left", a->epoch, 0);
    return 0;
  }
  return 1;
}

void kolo_fleet_agent_drain(kolo_fleet_agent *a) {
  pthread_mutex_lock(&a->lock);
  a->pend_drain = 1;
  pthread_mutex_unlock(&a->lock);
}

void kolo_fleet_agent_hold(kolo_fleet_agent *a, int on) {
  pthread_mutex_lock(&a->lock);
  a->hold = on;
  pthread_mutex_unlock(&a->lock);
}

void kolo_fleet_agent_kill(kolo_fleet_agent *a) {
  pthread_mutex_lock(&a->lock);
  a->pend_kill = 1;
  pthread_mutex_unlock(&a->lock);
}

void kolo_fleet_agent_peer_lost(kolo_fleet_agent *a, const char *job, int64_t epoch, int rank,
                                int64_t at_ms) {
  pthread_mutex_lock(&a->lock);
  snprintf(a->pend_fail_job, sizeof a->pend_fail_job, "%s", job);
  a->pend_fail_epoch = epoch;
  a->pend_fail_rank = rank;
  a->pend_fail_at = at_ms;
  pthread_mutex_unlock(&a->lock);
}

const char *kolo_fleet_agent_id(const kolo_fleet_agent *a) {
  return a->id;
}

kolo_status kolo_fleet_agent_start(const kolo_fleet_agent_config *c, kolo_fleet_agent **out) {
  if (c == NULL || c->id == NULL || !kolo_keys_name_valid(c->id) || c->address == NULL ||
      !kolo_member_address_valid(c->address) || out == NULL)
    return KOLO_ERR_INVALID_ARG;
  kolo_fleet_agent *a = calloc(1, sizeof *a);
  if (a == NULL) return KOLO_ERR_NO_MEMORY;
  pthread_mutex_init(&a->lock, NULL);
  a->c = *c;
  a->failed_rank = -1;
  snprintf(a->id, sizeof a->id, "%s", c->id);
  snprintf(a->host, sizeof a->host, "%s", c->host ? c->host : "localhost");
  snprintf(a->address, sizeof a->address, "%s", c->address);
  snprintf(a->logs_url, sizeof a->logs_url, "http://%s:9", a->host);
  for (int i = 0; i < 32; i++) a->logs_token[i] = "0123456789abcdef"[(unsigned)random() % 16];
  kolo__v1__worker_record__init(&a->record);
  a->record.id = a->id;
  a->record.host = a->host;
  a->record.address = a->address;
  a->record.has_cpus = a->record.has_gpus = 1;
  a->record.cpus = 1;
  a->record.logs_url = a->logs_url;
  a->record.logs_token = a->logs_token;
  kolo_status rc = kolo_keys_assign(a->id, a->assign_key, sizeof a->assign_key);
  const char *endpoints[1] = {c->etcd_url};
  kolo_etcd_config ec = {.endpoints = endpoints, .endpoint_count = 1};
  if (rc == KOLO_OK) rc = kolo_etcd_create(&ec, &a->etcd); /* each agent its own client */
  if (rc == KOLO_OK) rc = register_once(a);
  kolo_etcd_kv kv = {0};
  int64_t revision = 0;
  if (rc == KOLO_OK) {
    rc = kolo_etcd_get(a->etcd, kolo_etcd_str(a->assign_key), &kv, &revision);
    if (rc == KOLO_OK) a->assignment = strdup((const char *)kv.value);
    a->changed = 1;
    kolo_etcd_kv_clear(&kv);
    if (rc == KOLO_ERR_NOT_FOUND) rc = KOLO_OK;
  }
  if (rc == KOLO_OK) {
    kolo_etcd_watch_opts w = {.key = kolo_etcd_str(a->assign_key), .start_revision = revision + 1};
    rc = kolo_etcd_watch_start(a->etcd, &w, on_assignment, a, &a->watch);
  }
  if (rc != KOLO_OK) {
    kolo_fleet_agent_destroy(a);
    return rc;
  }
  event(a, "registered", 0, 0);
  *out = a;
  return KOLO_OK;
}

void kolo_fleet_agent_destroy(kolo_fleet_agent *a) {
  if (a == NULL) return;
  kolo_etcd_watch_stop(a->watch);
  if (a->reg) kolo_membership_deregister(a->reg);
  kolo_etcd_destroy(a->etcd);
  free(a->assignment);
  if (a->progress) protobuf_c_message_free_unpacked(&a->progress->base, NULL);
  pthread_mutex_destroy(&a->lock);
  free(a);
}
