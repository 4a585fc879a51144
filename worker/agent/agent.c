/* Implementation of agent.h: one poll loop over a signalfd, a wake-up pipe fed
 * by the etcd watch and lease threads, and the training process's socket. The
 * loop reconciles what runs with the newest assignment (level-triggered: only
 * the latest assignment matters, events in between may be skipped). */
#define _GNU_SOURCE
#include "worker/agent/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <inttypes.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/checks.h"
#include "common/log.h"
#include "common/mode_env.h"
#include "coordination/drain.h"
#include "codec/codec.h"
#include "coordination/assignment.h"
#include "coordination/etcd.h"
#include "coordination/job_mode.h"
#include "coordination/keys.h"
#include "coordination/membership.h"
#include "coordination/report.h"
#include "coordination/ringspec.h"
#include "kolo/v1/job.pb-c.h"
#include "worker/agent/capture.h"
#include "worker/agent/logserver.h"
#include "worker/agent/logstore.h"
#include "worker/agent/mode_check.h"
#include "worker/agent/fence.h"
#include "worker/agent/health.h"
#include "worker/agent/port.h"
#include "worker/agent/process.h"

#define LOG "agent"
#define REPORT_EVERY_MS 500
#define DRAIN_WAIT_MS 15000
#define REFORM_WAIT_S "600"
#define CAPTURE_DRAIN_MS 1000 /* how long an exited process's pipes may still be read */

typedef struct agent {
  const kolo_agent_options *opts;
  char id[129], host[256], listen[256], work_dir[256], assign_key[256];
  kolo_etcd *etcd;
  kolo_membership *reg;
  kolo_member record;
  kolo_member_label labels[64]; /* the record's labels point into label_text */
  char label_text[1024];
  kolo_etcd_watch *watch;
  int wake[2];
  pthread_mutex_t lock;
  char *assignment;       /* newest assignment value, NULL when none */
  int assignment_refused; /* that value does not decode and was logged once */
  int lease_lost;
  int fenced; /* the process is paused: the lease may have expired (fence.h) */
  int64_t fenced_at_ms;
  int64_t register_at_ms;   /* unregistered (etcd said the lease is gone): next attempt */
  int64_t register_wait_ms; /* and the back-off before the one after */

  /* the job being run */
  char job[129];
  int64_t epoch;      /* epoch of the newest ring loaded */
  int64_t sent_epoch; /* newest RING sent to the process */
  char *ring_line;
  kolo_agent_proc *proc;
  char done_job[129]; /* the process of this job exited at done_epoch: not restarted */
  int64_t done_epoch;
  /* the report */
  int64_t formed_epoch, failed_epoch, exit_epoch;
  int failed_rank, exited, exit_code;
  int hello;                              /* the process said HELLO */
  int64_t first_formed_epoch;             /* the first epoch its process formed (0: none yet) */
  char permanent[KOLO_AGENT_MODE_REASON]; /* why its failure is permanent (scheduler/decide.h:
                                           * its start failed, it did not acknowledge its
                                           * job's mode, ...); "" = not known */
  char failed_status[64];
  Kolo__V1__Struct *progress;       /* the process's REPORTs, merged (coordination/report.h) */
  kolo_agent_mode_check mode_check; /* does the process run the job's mode (mode_check.h) */
  int report_dirty;
  int64_t report_written_ms;
  int draining;
  int64_t drain_deadline_ms;
  int leave; /* the job let the process go: 0 not yet asked, 1 LEAVE sent, -1 stop it */
  int64_t leave_deadline_ms; /* after LEAVE: stop it past this */
  const char *state;
  /* job logs */
  kolo_agent_logstore *logstore;
  kolo_agent_capture *capture;
  kolo_agent_logserver *logserver;
  char logs_url[300], logs_token[40];
  char stderr_tail[2048];     /* last stderr lines of a process that failed */
  kolo_agent_health *health;  /* --http-listen; NULL without */
  kolo_agent_health_state hs; /* its counters, and what publish_health last sent */
  int port_fd; /* holds the data-plane port (port.h); -1 while another program has it */
} agent;

static int64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int64_t wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void poke(agent *a) {
  char byte = 1;
  ssize_t ignored = write(a->wake[1], &byte, 1);
  (void)ignored;
}

/* Watch thread: keep the newest assignment value and wake the loop. */
static void on_assignment(const kolo_etcd_watch_update *update, void *user) {
  agent *a = user;
  pthread_mutex_lock(&a->lock);
  a->assignment_refused = 0;
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
  pthread_mutex_unlock(&a->lock);
  poke(a);
}

static void on_lease_lost(int64_t lease, kolo_status status, const char *message, void *user) {
  agent *a = user;
  KOLO_LOGW(LOG, "registration lease %" PRIx64 " lost: %s", (uint64_t)lease,
            message ? message : "");
  pthread_mutex_lock(&a->lock);
  a->lease_lost = 1;
  pthread_mutex_unlock(&a->lock);
  poke(a);
}

static kolo_status set_state(agent *a, const char *state) {
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
static kolo_status register_worker(agent *a) {
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
static void lose_registration(agent *a) {
  a->hs.leases_lost++;
  a->fenced = 0; /* a paused process is killed below (SIGKILL needs no SIGCONT) */
  if (a->proc) { /* never restart it for the assignment it had */
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
static kolo_status reregister(agent *a) {
  if (a->reg != NULL || mono_ms() < a->register_at_ms) return KOLO_OK;
  kolo_status rc = register_once(a);
  if (rc == KOLO_OK || !transient(rc)) return rc;
  KOLO_LOGW(LOG, "cannot register worker %s again yet (%s); next try in %lld ms", a->id,
            kolo_etcd_last_error(), (long long)a->register_wait_ms);
  a->register_at_ms = mono_ms() + a->register_wait_ms;
  a->register_wait_ms = a->register_wait_ms * 2 > 4000 ? 4000 : a->register_wait_ms * 2;
  return KOLO_OK;
}

/* ---- reports ---- */

static void write_report(agent *a) {
  if (a->job[0] == '\0') return;
  char key[512];
  if (kolo_keys_report(a->job, a->id, key, sizeof key) != KOLO_OK) {
    KOLO_LOGW(LOG, "no report for job '%s': %s", a->job, kolo_etcd_last_error());
    return;
  }
  /* the record's owner is coordination/report.h (strings and progress borrowed here) */
  kolo_report r = {.worker = a->id,
                   .epoch = a->epoch,
                   .formed_epoch = a->formed_epoch,
                   .failed_epoch = a->failed_epoch,
                   .failed_rank = a->failed_rank,
                   .failed_status = a->failed_status,
                   .exited = a->exited,
                   .exit_code = a->exit_code,
                   .exit_epoch = a->exit_epoch,
                   .time_unix_ms = wall_ms(),
                   .pid = kolo_agent_proc_pid(a->proc),
                   .progress = a->progress,
                   .stderr_tail = a->exited && a->stderr_tail[0] ? a->stderr_tail : NULL,
                   .hello = a->hello,
                   .first_formed_epoch = a->first_formed_epoch,
                   .permanent = a->permanent[0] ? a->permanent : NULL};
  char *text = NULL;
  if (kolo_report_encode(&r, &text) != KOLO_OK) {
    KOLO_LOGW(LOG, "no report for job '%s': %s", a->job, kolo_etcd_last_error());
    return;
  }
  kolo_status rc = kolo_etcd_put(a->etcd, kolo_etcd_str(key), kolo_etcd_str(text), 0, NULL, NULL);
  free(text);
  if (rc != KOLO_OK) {
    KOLO_LOGW(LOG, "cannot write report %s: %s", key, kolo_etcd_last_error());
    a->hs.report_errors++;
    a->report_dirty =
        1; /* retried on the next tick: an exit or FAILED report must reach the coordinator */
    return;
  }
  a->hs.reports_written++;
  a->report_dirty = 0;
  a->report_written_ms = mono_ms();
}

/* The process failed the mode check: the report says so at once (the job fails without
 * re-forming) and the process is stopped. */
static void mode_failed(agent *a) {
  snprintf(a->permanent, sizeof a->permanent, "%s", a->mode_check.failure);
  KOLO_LOGE(LOG, "job %s: %s", a->job, a->permanent);
  write_report(a);
  if (a->proc)
    kolo_agent_proc_stop(a->proc, "the job's training mode was not acknowledged",
                         a->opts->stop_grace_ms);
}

static void on_msg(const kolo_agent_msg *msg, void *user) {
  agent *a = user;
  switch (msg->verb) {
    case KOLO_AGENT_HELLO:
      KOLO_LOGI(LOG, "process %lld says HELLO (agent protocol version %d)",
                (long long)msg->hello.pid, msg->hello.version);
      a->sent_epoch = 0; /* (re)send the current ring */
      if (!a->hello) {
        a->hello = 1;
        a->report_dirty = 1; /* the scheduler judges an early exit by it */
      }
      break;
    case KOLO_AGENT_MODE:
      KOLO_LOGI(LOG, "process of job %s acknowledges mode %s", a->job,
                kolo_mode_name((kolo_mode)msg->mode.mode));
      break;
    case KOLO_AGENT_FORMED:
      a->formed_epoch = (int64_t)msg->formed.epoch;
      if (a->first_formed_epoch == 0) a->first_formed_epoch = a->formed_epoch;
      KOLO_LOGI(LOG, "ring of epoch %lld formed", (long long)a->formed_epoch);
      write_report(a);
      break;
    case KOLO_AGENT_FAILED:
      a->failed_epoch = (int64_t)msg->failed.epoch;
      a->failed_rank = msg->failed.failed_rank;
      snprintf(a->failed_status, sizeof a->failed_status, "%s", msg->failed.status);
      KOLO_LOGW(LOG, "process reports epoch %lld failed: %s (rank %d)", (long long)a->failed_epoch,
                a->failed_status, a->failed_rank);
      write_report(a); /* at once: the coordinator re-forms without waiting for the TTL */
      break;
    case KOLO_AGENT_REPORT: {
      /* merged: a final line (e.g. kolo-train's "done") keeps earlier fields */
      if (kolo_report_progress_merge(&a->progress, msg->text, strlen(msg->text)) == KOLO_OK) {
        a->report_dirty = 1;
        if (mono_ms() - a->report_written_ms >= REPORT_EVERY_MS) write_report(a);
      } else {
        KOLO_LOGW(LOG, "ignoring a REPORT: %s", kolo_etcd_last_error());
      }
      break;
    }
    default:
      break; /* the codec lets only process -> agent verbs through */
  }
  double step = 0;
  int has_step = msg->verb == KOLO_AGENT_REPORT && a->progress != NULL &&
                 kolo_codec_struct_number(a->progress, "step", &step);
  if (kolo_agent_mode_check_msg(&a->mode_check, msg, has_step)) mode_failed(a);
}

/* Holds the data-plane port (port.h). At start a failure is logged (every job of
 * this worker would fail to form its ring while another program has the port);
 * later, while no process runs, it is tried again quietly each loop turn. */
static void hold_port(agent *a, int quiet) {
  if (a->port_fd >= 0) return;
  char err[320];
  if (kolo_agent_port_reserve(a->listen, &a->port_fd, err, sizeof err) == KOLO_OK) {
    if (quiet) KOLO_LOGI(LOG, "data-plane port %s held again", a->listen);
  } else if (!quiet) {
    KOLO_LOGW(LOG, "%s: a ring cannot form on this worker while another program holds it", err);
  }
}

/* ---- starting the process ---- */

typedef struct strv {
  char **items;
  size_t count, cap;
} strv;

static int strv_push(strv *v, char *owned) {
  if (owned == NULL) return -1;
  if (v->count + 2 > v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 16;
    char **grown = realloc(v->items, cap * sizeof *grown);
    if (grown == NULL) {
      free(owned);
      return -1;
    }
    v->items = grown;
    v->cap = cap;
  }
  v->items[v->count++] = owned;
  v->items[v->count] = NULL;
  return 0;
}

static char *format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *format(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  char *out = NULL;
  if (vasprintf(&out, fmt, args) < 0) out = NULL;
  va_end(args);
  return out;
}

static void strv_free(strv *v) {
  for (size_t i = 0; i < v->count; i++) free(v->items[i]);
  free(v->items);
  memset(v, 0, sizeof *v);
}

/* Reads the job spec at key (kolo.v1.JobSpec, written by kolo-server through the one
 * codec) through that codec; NULL if it cannot be read or does not decode (logged). */
static Kolo__V1__JobSpec *get_spec(agent *a, const char *key) {
  kolo_etcd_kv kv = {0};
  if (kolo_etcd_get(a->etcd, kolo_etcd_str(key), &kv, NULL) != KOLO_OK) {
    KOLO_LOGW(LOG, "cannot read %s: %s", key, kolo_etcd_last_error());
    return NULL;
  }
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  if (kolo_codec_read((const char *)kv.value, kv.value_len, &kolo__v1__job_spec__descriptor,
                      KOLO_CODEC_IGNORE_UNKNOWN, &msg, &fault) != KOLO_OK)
    KOLO_LOGW(LOG, "%s is not a job spec: %s", key, fault.message);
  kolo_etcd_kv_clear(&kv);
  return (Kolo__V1__JobSpec *)msg;
}

/* Reads the ring record at key through its codec (coordination/ringspec.h); 0 if
 * it cannot be read or is not a valid record (logged, naming what is wrong). */
static int get_ring(agent *a, const char *key, kolo_ringspec *ring) {
  kolo_etcd_kv kv = {0};
  if (kolo_etcd_get(a->etcd, kolo_etcd_str(key), &kv, NULL) != KOLO_OK) {
    KOLO_LOGW(LOG, "cannot read %s: %s", key, kolo_etcd_last_error());
    return 0;
  }
  kolo_status rc = kolo_ringspec_decode((const char *)kv.value, kv.value_len, ring);
  if (rc != KOLO_OK)
    KOLO_LOGE(LOG, "%s is not a valid ring record: %s", key, kolo_etcd_last_error());
  kolo_etcd_kv_clear(&kv);
  return rc == KOLO_OK;
}

/* Whether the ring's member entry for this worker names another registration of it:
 * the ring was planned for this worker before its lease expired (the process it had
 * is gone), so the coordinator counts that member lost and this registration must
 * not take its place. Entries without a lease (older records) name any. */
static int stale_member(agent *a, const kolo_ringspec *ring) {
  int me = kolo_ringspec_rank_of(ring, a->id);
  int64_t lease = me < 0 ? 0 : ring->members[me].lease;
  int64_t ours = a->reg ? kolo_membership_lease(a->reg) : 0;
  if (lease == 0 || lease == ours) return 0;
  KOLO_LOGW(LOG,
            "the ring names registration %" PRIx64 " of worker %s, not this one (%" PRIx64
            "): not joining it",
            (uint64_t)lease, a->id, (uint64_t)ours);
  return 1;
}

/* Builds the RING line for this worker from the ring record; NULL if absent from
 * it, or if the record does not make a valid RING (logged). */
static char *ring_line_for(agent *a, const kolo_ringspec *ring, int *rank, int *size) {
  int me = kolo_ringspec_rank_of(ring, a->id);
  if (me < 0 || ring->size > KOLO_AGENT_MAX_RING || stale_member(a, ring)) return NULL;
  const char **peers = calloc(ring->size, sizeof *peers);
  if (peers == NULL) return NULL;
  for (size_t i = 0; i < ring->size; i++) peers[i] = ring->members[i].address;
  const kolo_ringspec_member *mine = &ring->members[me];
  kolo_agent_msg msg = {
      .verb = KOLO_AGENT_RING,
      .ring = {
          .epoch = (uint64_t)ring->epoch,
          .rank = me,
          .size = (int)ring->size,
          .local_rank = mine->local_rank,
          .local_size = mine->local_size,
          .timeout_ms = (int)ring->timeout_ms,
          .secret = ring->secret,
          .listen_address = a->listen,
          .peers = peers,
          /* a planned ring (a drained member leaves): switch at the next commit, nothing redone */
          .planned = ring->planned}};
  char *line = NULL, error[256];
  if (kolo_agent_msg_format(&msg, &line, error, sizeof error) != KOLO_OK)
    KOLO_LOGE(LOG, "the ring record of epoch %lld is not a valid ring for this worker: %s",
              (long long)ring->epoch, error);
  free(peers);
  if (line == NULL) return NULL;
  *rank = me;
  *size = (int)ring->size;
  return line;
}

static int push_builtin_argv(agent *a, strv *argv, const Kolo__V1__BuiltinProgram *builtin,
                             const Kolo__V1__JobSpec *spec) {
  const char *bin = a->opts->train_bin;
  char self[PATH_MAX], fallback[PATH_MAX + 16];
  if (bin[0] == '\0') {
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    snprintf(fallback, sizeof fallback, "%s/kolo-train", dirname(self));
    bin = fallback;
  }
  int bad = strv_push(argv, strdup(bin));
  const char *model = builtin->model, *dataset = builtin->dataset;
  if (model && model[0]) bad |= strv_push(argv, format("--model=%s", model));
  if (dataset && dataset[0]) bad |= strv_push(argv, format("--dataset=%s", dataset));
  if (builtin->learning_rate > 0) bad |= strv_push(argv, format("--lr=%g", builtin->learning_rate));
  if (builtin->epochs > 0) bad |= strv_push(argv, format("--epochs=%u", builtin->epochs));
  if (builtin->steps > 0) bad |= strv_push(argv, format("--steps=%" PRIu64, builtin->steps));
  if (builtin->batch_size > 0) bad |= strv_push(argv, format("--batch=%u", builtin->batch_size));
  kolo_mode_spec mode; /* the same flags as kolo-server checked (coordination/job_mode.h) */
  kolo_job_mode_flag flags[KOLO_JOB_MODE_MAX_FLAGS];
  size_t n_flags = kolo_job_mode_spec(spec, &mode, NULL, 0) == KOLO_OK
                       ? kolo_job_mode_train_flags(&mode, flags)
                       : 0;
  for (size_t i = 0; i < n_flags; i++) bad |= strv_push(argv, strdup(flags[i].flag));
  const char *checkpoints = spec->checkpoint_dir;
  if (checkpoints && checkpoints[0])
    bad |= strv_push(argv, format("--checkpoint-dir=%s", checkpoints));
  for (size_t i = 0; i < builtin->n_hyper_parameters; i++) {
    const Kolo__V1__BuiltinProgram__HyperParametersEntry *h = builtin->hyper_parameters[i];
    bad |= strv_push(argv, format("--%s=%s", h->key, h->value ?: ""));
  }
  bad |= strv_push(argv, strdup("--json"));
  return bad;
}

/* Starts the process for job at ring. */
static void start_process(agent *a, const char *job, const kolo_ringspec *ring) {
  char key[512];
  Kolo__V1__JobSpec *spec =
      kolo_keys_job(job, "spec", key, sizeof key) == KOLO_OK ? get_spec(a, key) : NULL;
  strv argv = {0}, env = {0};
  int rank = 0, size = 0;
  char *line = ring_line_for(a, ring, &rank, &size);
  int64_t epoch = ring->epoch;
  const char *cwd = NULL;
  a->permanent[0] = '\0'; /* a new process: nothing judged yet */
  if (spec == NULL || line == NULL) goto out;
  int bad = 0, user_timeout = 0, user_unbuffered = 0, user_checkpoints = 0, user_tensorboard = 0;
  if (spec->program_case == KOLO__V1__JOB_SPEC__PROGRAM_EXEC && spec->exec) {
    const Kolo__V1__ExecProgram *exec = spec->exec;
    for (size_t i = 0; i < exec->n_argv; i++)
      bad |= strv_push(&argv, strdup(exec->argv[i] ? exec->argv[i] : ""));
    for (size_t i = 0; i < exec->n_env; i++) {
      const char *name = exec->env[i]->key;
      bad |= strv_push(&env, format("%s=%s", name, exec->env[i]->value ?: ""));
      if (strcmp(name, "KOLO_TIMEOUT") == 0) user_timeout = 1;
      if (strcmp(name, "PYTHONUNBUFFERED") == 0) user_unbuffered = 1;
      if (strcmp(name, "KOLO_CHECKPOINT_DIR") == 0) user_checkpoints = 1;
      if (strcmp(name, "KOLO_TENSORBOARD_DIR") == 0) user_tensorboard = 1;
    }
    /* the spec's checkpoint_dir, for kolo.torch's durable checkpoints (exec.env wins) */
    if (!user_checkpoints && spec->checkpoint_dir && spec->checkpoint_dir[0])
      bad |= strv_push(&env, format("KOLO_CHECKPOINT_DIR=%s", spec->checkpoint_dir));
    /* the spec's tensorboard_dir, for kolo.report's event files (kolo/tensorboard.py) */
    if (!user_tensorboard && spec->tensorboard_dir && spec->tensorboard_dir[0])
      bad |= strv_push(&env, format("KOLO_TENSORBOARD_DIR=%s", spec->tensorboard_dir));
    cwd = exec->working_dir;
  } else if (spec->program_case == KOLO__V1__JOB_SPEC__PROGRAM_BUILTIN && spec->builtin) {
    bad |= push_builtin_argv(a, &argv, spec->builtin, spec);
  }
  if (argv.count == 0 || bad) {
    KOLO_LOGE(LOG, "job %s has no program this agent can run", job);
    goto out;
  }
  /* the job's mode, for every process (after the program's own env: ours win) */
  kolo_mode_spec mode;
  kolo_mode_env mode_env;
  char why[256] = "";
  if (kolo_job_mode_spec(spec, &mode, why, sizeof why) != KOLO_OK ||
      kolo_mode_env_format(&mode, &mode_env) != KOLO_OK) {
    snprintf(a->permanent, sizeof a->permanent, "the job's mode cannot be run: %s", why);
    KOLO_LOGE(LOG, "job %s: %s", job, a->permanent);
    goto out;
  }
  for (int i = 0; i < KOLO_MODE_ENV_COUNT; i++) bad |= strv_push(&env, strdup(mode_env.entries[i]));
  kolo_agent_mode_check_start(&a->mode_check, mode.mode);
  bad |= strv_push(&env, format("KOLO_JOB_ID=%s", job));
  bad |= strv_push(&env, format("KOLO_WORKER_ID=%s", a->id));
  bad |= strv_push(&env, format("KOLO_RANK=%d", rank));
  bad |= strv_push(&env, format("KOLO_SIZE=%d", size));
  bad |= strv_push(&env, format("KOLO_EPOCH=%" PRId64, epoch));
  /* how long a survivor waits for the next ring: long, so that a job below
   * min_workers holds its state until workers return */
  if (!user_timeout) bad |= strv_push(&env, strdup("KOLO_TIMEOUT=" REFORM_WAIT_S));
  /* output goes to a pipe: without this Python would hold it in its buffer until exit */
  if (!user_unbuffered) bad |= strv_push(&env, strdup("PYTHONUNBUFFERED=1"));
  int out_fd = -1, err_fd = -1;
  if (!bad &&
      kolo_agent_capture_begin(a->capture, job, epoch, (uint32_t)rank, &out_fd, &err_fd) != KOLO_OK)
    KOLO_LOGW(LOG, "the output of job %s is not captured", job);
  kolo_agent_spawn spawn = {(const char *const *)argv.items,
                            (const char *const *)env.items,
                            cwd,
                            a->work_dir,
                            out_fd,
                            err_fd,
                            a->port_fd};
  kolo_status started = bad ? KOLO_ERR_NO_MEMORY : kolo_agent_proc_start(&spawn, &a->proc);
  if (out_fd >= 0) close(out_fd);
  if (err_fd >= 0) close(err_fd);
  a->stderr_tail[0] = '\0';
  if (started != KOLO_OK) {
    KOLO_LOGE(LOG, "cannot start the process of job %s", job);
    kolo_agent_capture_end(a->capture, 0, NULL, 0);
    goto out;
  }
  a->hs.processes_started++;
  snprintf(a->job, sizeof a->job, "%s", job);
  a->epoch = epoch;
  a->sent_epoch = 0;
  free(a->ring_line);
  a->ring_line = line;
  line = NULL;
  a->formed_epoch = a->failed_epoch = a->exit_epoch = 0;
  a->failed_rank = -1;
  a->failed_status[0] = '\0';
  a->exited = a->exit_code = 0;
  a->hello = 0;
  a->permanent[0] = '\0';
  a->first_formed_epoch = 0;
  if (a->progress) protobuf_c_message_free_unpacked(&a->progress->base, NULL);
  a->progress = NULL;
  write_report(a);
  set_state(a, a->draining ? "draining" : "busy");
out:
  if (a->proc == NULL && spec != NULL && line != NULL) {
    /* the program cannot start: say so as an exit, so the job does not wait on us */
    snprintf(a->job, sizeof a->job, "%s", job);
    a->epoch = epoch;
    a->exited = 1;
    a->exit_code = 127;
    a->exit_epoch = epoch;
    write_report(a);
    snprintf(a->done_job, sizeof a->done_job, "%s", job);
    a->done_epoch = epoch;
  }
  free(line);
  strv_free(&argv);
  strv_free(&env);
  if (spec) protobuf_c_message_free_unpacked(&spec->base, NULL);
}

/* Whether this registration of the worker is drained (its mark names our lease). */
static int drain_marked(agent *a) {
  char key[256];
  kolo_etcd_kv kv = {0};
  if (a->reg == NULL || kolo_keys_drain(a->id, key, sizeof key) != KOLO_OK ||
      kolo_etcd_get(a->etcd, kolo_etcd_str(key), &kv, NULL) != KOLO_OK)
    return 0;
  int mine =
      kolo_drain_mark_applies((const char *)kv.value, kv.value_len, kolo_membership_lease(a->reg));
  kolo_etcd_kv_clear(&kv);
  return mine;
}

/* The job let this worker go: if the worker is drained (SIGTERM, or a drain mark), the
 * process gets LEAVE and stops at its next commit, where its peers switch to the planned
 * ring, so nobody redoes a step; past DRAIN_WAIT_MS it is stopped. Returns 1 while it may
 * still leave by itself, 0 when the caller must stop it now. */
static int leave_gracefully(agent *a) {
  if (a->leave == 0) {
    a->leave = -1;
    if (!kolo_agent_proc_connected(a->proc) || !(a->draining || drain_marked(a))) return 0;
    if (kolo_agent_proc_send_msg(
            a->proc, &(kolo_agent_msg){.verb = KOLO_AGENT_LEAVE, .text = "drained"}) != KOLO_OK)
      return 0;
    a->leave = 1;
    a->leave_deadline_ms = mono_ms() + DRAIN_WAIT_MS;
    KOLO_LOGI(LOG, "worker %s drained: its process leaves job %s at its next commit", a->id,
              a->job);
  }
  return a->leave == 1 && mono_ms() < a->leave_deadline_ms;
}

/* Brings what runs in line with the newest assignment. */
static void reconcile(agent *a) {
  pthread_mutex_lock(&a->lock);
  char *value = a->assignment ? strdup(a->assignment) : NULL;
  int refused = a->assignment_refused;
  pthread_mutex_unlock(&a->lock);
  /* one that does not decode is no assignment (as a deleted one) */
  kolo_assignment assignment = {0};
  if (value && kolo_assignment_decode(value, strlen(value), &assignment) != KOLO_OK && !refused) {
    KOLO_LOGW(LOG, "assignment does not decode: %s", kolo_etcd_last_error());
    pthread_mutex_lock(&a->lock);
    a->assignment_refused = 1;
    pthread_mutex_unlock(&a->lock);
  }
  free(value);
  const char *job = assignment.job;
  int64_t epoch = assignment.epoch;
  const char *ring_key = assignment.ring;

  if (a->proc != NULL && (job == NULL || strcmp(job, a->job) != 0)) {
    if (job == NULL && leave_gracefully(a)) goto out; /* it stops at its next commit */
    kolo_agent_proc_stop(a->proc, job ? "reassigned" : "unassigned", a->opts->stop_grace_ms);
    goto out; /* the next job starts once this process is gone */
  }
  if (job == NULL) {
    if (a->proc == NULL) {
      a->job[0] = '\0';
      set_state(a, a->draining ? "draining" : "idle");
    }
    goto out;
  }
  if (a->proc == NULL && strcmp(job, a->done_job) == 0 && epoch <= a->done_epoch) goto out;
  if (a->proc != NULL && epoch <= a->epoch) goto out;
  kolo_ringspec ring;
  if (!get_ring(a, ring_key, &ring)) goto out;
  if (a->proc == NULL && stale_member(a, &ring)) {
    snprintf(a->done_job, sizeof a->done_job, "%s",
             job); /* never this epoch: the coordinator re-plans */
    a->done_epoch = epoch;
  } else if (a->proc == NULL) {
    start_process(a, job, &ring);
  } else {
    int rank, size;
    char *line = ring_line_for(a, &ring, &rank, &size);
    if (line != NULL) {
      free(a->ring_line);
      a->ring_line = line;
      a->epoch = ring.epoch;
      kolo_agent_capture_segment(a->capture, a->epoch, (uint32_t)rank);
      write_report(a);
    }
  }
  kolo_ringspec_clear(&ring);
out:
  if (a->proc && a->ring_line && a->sent_epoch < a->epoch && kolo_agent_proc_connected(a->proc)) {
    if (kolo_agent_proc_send(a->proc, a->ring_line) == KOLO_OK) {
      a->sent_epoch = a->epoch;
      a->hs.rings_sent++;
      KOLO_LOGI(LOG, "sent ring epoch %" PRId64 " of job %s", a->epoch, a->job);
    }
  }
  kolo_assignment_clear(&assignment);
}

static void reap(agent *a) {
  int code = 0;
  if (!kolo_agent_proc_reap(a->proc, &code)) return;
  KOLO_LOGI(LOG, "process of job %s exited with code %d", a->job, code);
  if (code != 0 && a->leave != 1) a->hs.processes_failed++; /* a leaver stops as asked */
  a->leave = 0;
  a->hello = kolo_agent_proc_said_hello(a->proc);
  const char *start_error = kolo_agent_proc_start_error(a->proc);
  if (start_error != NULL && start_error[0]) /* else: keep what the mode check found */
    snprintf(a->permanent, sizeof a->permanent, "%s", start_error);
  kolo_agent_proc_destroy(a->proc);
  a->proc = NULL;
  kolo_agent_capture_end(a->capture, CAPTURE_DRAIN_MS, a->stderr_tail, sizeof a->stderr_tail);
  if (code == 0) a->stderr_tail[0] = '\0';
  if (kolo_agent_mode_check_exit(&a->mode_check, code)) {
    snprintf(a->permanent, sizeof a->permanent, "%s", a->mode_check.failure);
    KOLO_LOGE(LOG, "job %s: %s", a->job, a->permanent);
  }
  a->exited = 1;
  a->exit_code = code;
  a->exit_epoch = a->epoch;
  snprintf(a->done_job, sizeof a->done_job, "%s", a->job);
  a->done_epoch = a->epoch;
  write_report(a);
}

/* The work dir holds the job output, the agent socket and the children file, all written by
 * this (often root) process: made 0700, or taken if it is this user's and no one else may
 * write it. The default one, in /tmp, must moreover not be a link (another user could have
 * made /tmp/kolo-worker-<id> first, with a `logs` link to a folder of this user's) and is
 * made private if it is not. */
static kolo_status private_work_dir(const char *dir, int is_default) {
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    KOLO_LOGE(LOG, "cannot create work dir %s: %s", dir, strerror(errno));
    return KOLO_ERR_IO;
  }
  struct stat st;
  if ((is_default ? lstat(dir, &st) : stat(dir, &st)) != 0 || !S_ISDIR(st.st_mode) ||
      st.st_uid != geteuid() || (!is_default && (st.st_mode & 022) != 0)) {
    KOLO_LOGE(LOG,
              "work dir %s is not a directory of this user that no one else may write (made by "
              "another user?): remove it or give --work-dir",
              dir);
    return KOLO_ERR_STATE;
  }
  if (is_default && (st.st_mode & 077) != 0 && chmod(dir, 0700) != 0) return KOLO_ERR_IO;
  return KOLO_OK;
}

/* The log store, the capture thread and the log server; fills the record's logs fields. */
static kolo_status setup_logs(agent *a) {
  const kolo_agent_options *o = a->opts;
  char dir[512];
  snprintf(dir, sizeof dir, "%s", o->log_dir[0] ? o->log_dir : "");
  if (dir[0] == '\0') snprintf(dir, sizeof dir, "%s/logs", a->work_dir);
  kolo_agent_logstore_config lc = {dir, o->log_file_bytes, o->log_job_bytes, o->log_total_bytes,
                                   o->log_retention_s};
  kolo_status rc = kolo_agent_logstore_open(&lc, &a->logstore);
  if (rc != KOLO_OK) {
    KOLO_LOGE(LOG, "cannot open the log store in %s: %s", dir, kolo_strerror(rc));
    return rc;
  }
  KOLO_CHECK(kolo_agent_capture_create(a->logstore, &a->capture));
  unsigned char secret[16];
  if (getrandom(secret, sizeof secret, 0) != (ssize_t)sizeof secret) return KOLO_ERR_SYSTEM;
  for (size_t i = 0; i < sizeof secret; i++) snprintf(a->logs_token + 2 * i, 3, "%02x", secret[i]);
  /* the advertised host is the one servers reach us at; the port is the log server's */
  const char *colon = strrchr(o->advertise, ':');
  int host_len = (int)(colon - o->advertise);
  char listen[300];
  if (o->logs_listen[0])
    snprintf(listen, sizeof listen, "%s", o->logs_listen);
  else
    snprintf(listen, sizeof listen, "%.*s:0", host_len, o->advertise);
  kolo_agent_logserver_config sc = {listen, a->logs_token, a->logstore};
  int port = 0;
  rc = kolo_agent_logserver_start(&sc, &a->logserver, &port);
  if (rc != KOLO_OK && o->logs_listen[0]) return rc; /* asked for: a mistake to report */
  if (rc != KOLO_OK) {
    /* e.g. an IPv6 --advertise: output is still captured (and in failure reports), not served */
    KOLO_LOGW(LOG,
              "cannot serve job logs on %s (give --logs-listen HOST:PORT); kolo logs will not "
              "reach this worker",
              listen);
    return KOLO_OK;
  }
  snprintf(a->logs_url, sizeof a->logs_url, "http://%.*s:%d", host_len, o->advertise, port);
  a->record.logs_url = a->logs_url;
  a->record.logs_token = a->logs_token;
  KOLO_LOGI(LOG, "serving job logs from %s at %s", dir, a->logs_url);
  return KOLO_OK;
}

/* Publishes what /readyz and /metrics show (health.h): cheap, done once per loop turn. */
/* The reported number under key (0 if none, as the health page shows it). */
static double progress_number(const Kolo__V1__Struct *progress, const char *key) {
  double d = 0;
  return kolo_codec_struct_number(progress, key, &d) ? d : 0;
}

/* The partition fence (fence.h): while no renewal of the lease has been acknowledged for a
 * TTL, the process is paused, so it cannot run beside a copy the scheduler started elsewhere;
 * it continues when etcd renews the lease again, and dies with lose_registration when etcd
 * says the lease is gone. */
static void fence(agent *a) {
  if (!a->opts->partition_fence || a->proc == NULL || a->reg == NULL) {
    a->fenced = 0;
    return;
  }
  int64_t now = mono_ms(), renewed = kolo_membership_renewed_ms(a->reg); /* CLOCK_MONOTONIC both */
  switch (kolo_agent_fence_decide(now, renewed, a->opts->lease_ttl_s * 1000LL, a->fenced)) {
    case KOLO_AGENT_FENCE_PAUSE:
      KOLO_LOGW(
          LOG,
          "no renewal of the lease acknowledged for %" PRId64
          " ms (TTL %d s): etcd may have "
          "expired it and the job may be running elsewhere, so the process (pid %d) is paused "
          "until etcd answers",
          now - renewed, a->opts->lease_ttl_s, (int)kolo_agent_proc_pid(a->proc));
      kolo_agent_proc_pause(a->proc, 1);
      a->fenced = 1;
      a->fenced_at_ms = now;
      a->hs.fences++;
      break;
    case KOLO_AGENT_FENCE_RESUME:
      KOLO_LOGI(LOG,
                "etcd renewed the lease again: the process continues after %" PRId64 " ms paused",
                now - a->fenced_at_ms);
      kolo_agent_proc_pause(a->proc, 0);
      a->fenced = 0;
      break;
    case KOLO_AGENT_FENCE_KEEP:
      break;
  }
}

/* At most wait_ms, less when the fence's deadline comes sooner (so it pauses on time). */
static int fence_wait_ms(const agent *a, int wait_ms) {
  if (!a->opts->partition_fence || a->proc == NULL || a->reg == NULL || a->fenced) return wait_ms;
  int64_t left = kolo_membership_renewed_ms(a->reg) +
                 kolo_agent_fence_after_ms(a->opts->lease_ttl_s * 1000LL) - mono_ms();
  return left < 0 ? 0 : left < wait_ms ? (int)left : wait_ms;
}

static void publish_health(agent *a) {
  if (a->health == NULL) return;
  kolo_agent_health_state *h = &a->hs;
  snprintf(h->id, sizeof h->id, "%s", a->id);
  h->registered = a->reg != NULL && kolo_membership_alive(a->reg);
  snprintf(h->state, sizeof h->state, "%s", a->state ? a->state : "");
  snprintf(h->job, sizeof h->job, "%s", a->proc ? a->job : "");
  h->epoch = a->proc ? a->epoch : 0;
  h->process_running = a->proc != NULL;
  h->fenced = a->fenced;
  h->has_progress = a->proc != NULL && a->progress != NULL;
  if (h->has_progress) {
    h->step = progress_number(a->progress, "step");
    if (!kolo_codec_struct_number(a->progress, "step", &h->step))
      h->step = progress_number(a->progress, "steps");
    h->total_steps = progress_number(a->progress, "total_steps");
    h->loss = progress_number(a->progress, "loss");
    h->samples_per_sec = progress_number(a->progress, "samples_per_sec");
  }
  kolo_agent_health_publish(a->health, h);
}

static kolo_status setup(agent *a) {
  const kolo_agent_options *o = a->opts;
  if (gethostname(a->host, sizeof a->host) != 0) snprintf(a->host, sizeof a->host, "localhost");
  a->host[sizeof a->host - 1] = '\0';
  if (o->id[0])
    snprintf(a->id, sizeof a->id, "%s", o->id);
  else
    snprintf(a->id, sizeof a->id, "%.100s-%d", a->host, (int)getpid());
  if (!kolo_keys_name_valid(a->id)) {
    KOLO_LOGE(LOG, "worker id '%s' is not a valid key segment ([A-Za-z0-9._-], 1..128)", a->id);
    return KOLO_ERR_INVALID_ARG;
  }
  if (!kolo_member_address_valid(o->advertise)) {
    KOLO_LOGE(LOG, "--advertise '%s' is not host:port", o->advertise);
    return KOLO_ERR_INVALID_ARG;
  }
  snprintf(a->listen, sizeof a->listen, "%s", o->listen[0] ? o->listen : o->advertise);
  KOLO_CHECK(kolo_keys_assign(a->id, a->assign_key, sizeof a->assign_key));
  hold_port(a, 0); /* before the log server binds a port of its own */

  /* the record */
  a->record.id = a->id;
  a->record.host = a->host;
  a->record.address = (char *)o->advertise;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  a->record.cpus = cpus > 0 && cpus < 65536 ? (int)cpus : 1;
  a->record.gpus = o->gpus;
  kolo_member_label *labels = a->labels;
  char *label_text = a->label_text;
  snprintf(label_text, sizeof a->label_text, "%s", o->labels);
  char *save = NULL;
  for (char *pair = strtok_r(label_text, ",", &save); pair && a->record.label_count < 64;
       pair = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(pair, '=');
    if (eq == NULL) {
      KOLO_LOGE(LOG, "--labels: '%s' is not key=value", pair);
      return KOLO_ERR_INVALID_ARG;
    }
    *eq = '\0';
    labels[a->record.label_count++] = (kolo_member_label){pair, eq + 1};
  }
  a->record.labels = labels;
  a->record.state = "idle";
  kolo_status rc = kolo_member_validate(&a->record);
  a->record.state = NULL;
  if (rc != KOLO_OK) {
    KOLO_LOGE(LOG, "bad worker record: %s", kolo_etcd_last_error());
    return rc;
  }

  if (o->work_dir[0])
    snprintf(a->work_dir, sizeof a->work_dir, "%s", o->work_dir);
  else
    snprintf(a->work_dir, sizeof a->work_dir, "/tmp/kolo-worker-%.200s", a->id);
  KOLO_CHECK(private_work_dir(a->work_dir, o->work_dir[0] == '\0'));
  kolo_agent_proc_sweep_orphans(a->work_dir); /* an earlier agent's, if it was killed */
  KOLO_CHECK(setup_logs(a));
  if (kolo_etcd_access_connect(&o->etcd_access, NULL, &a->etcd) != KOLO_OK) {
    KOLO_LOGE(LOG, "etcd client: %s", kolo_etcd_last_error());
    return KOLO_ERR_INVALID_ARG;
  }
  KOLO_CHECK(register_worker(a));

  kolo_etcd_kv kv = {0};
  int64_t revision = 0;
  rc = kolo_etcd_get(a->etcd, kolo_etcd_str(a->assign_key), &kv, &revision);
  if (rc == KOLO_OK) a->assignment = strdup((const char *)kv.value);
  kolo_etcd_kv_clear(&kv);
  if (rc != KOLO_OK && rc != KOLO_ERR_NOT_FOUND) return rc;
  kolo_etcd_watch_opts watch = {.key = kolo_etcd_str(a->assign_key),
                                .start_revision = revision + 1};
  return kolo_etcd_watch_start(a->etcd, &watch, on_assignment, a, &a->watch);
}

kolo_status kolo_agent_run(const kolo_agent_options *opts) {
  agent a;
  memset(&a, 0, sizeof a);
  a.opts = opts;
  a.failed_rank = -1;
  a.port_fd = -1;
  a.wake[0] = a.wake[1] = -1;
  pthread_mutex_init(&a.lock, NULL);
  kolo_status rc = KOLO_ERR_SYSTEM;
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGCHLD);
  int sfd = signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0 || pipe2(a.wake, O_CLOEXEC | O_NONBLOCK) != 0) goto out;
  if (opts->http_listen[0]) {
    /* before registering: liveness answers while a previous registration expires */
    int port = 0;
    rc = kolo_agent_health_start(opts->http_listen, &a.health, &port);
    if (rc != KOLO_OK) {
      KOLO_LOGE(LOG, "cannot serve --http-listen %s: %s", opts->http_listen, kolo_strerror(rc));
      goto out;
    }
    KOLO_LOGI(LOG, "health and metrics on %s (port %d)", opts->http_listen, port);
  }
  KOLO_CHECK_GOTO(setup(&a), rc, out);
  KOLO_LOGI(LOG, "worker %s ready (data plane %s, work dir %s)", a.id, opts->advertise, a.work_dir);
  reconcile(&a);
  for (;;) {
    publish_health(&a);
    struct pollfd fds[4];
    int proc_fds[2];
    int n_proc = kolo_agent_proc_poll_fds(a.proc, proc_fds);
    fds[0] = (struct pollfd){.fd = sfd, .events = POLLIN};
    fds[1] = (struct pollfd){.fd = a.wake[0], .events = POLLIN};
    for (int i = 0; i < n_proc; i++)
      fds[2 + i] = (struct pollfd){.fd = proc_fds[i], .events = POLLIN};
    poll(fds, (nfds_t)(2 + n_proc), fence_wait_ms(&a, 250));
    struct signalfd_siginfo info;
    while (read(sfd, &info, sizeof info) == (ssize_t)sizeof info) {
      if ((info.ssi_signo == SIGTERM || info.ssi_signo == SIGINT) && !a.draining) {
        KOLO_LOGI(LOG, "%s: draining (leaving the job, then exiting)",
                  strsignal((int)info.ssi_signo));
        a.draining = 1;
        a.drain_deadline_ms = mono_ms() + DRAIN_WAIT_MS;
        set_state(&a, "draining");
      }
    }
    char drained[64];
    while (read(a.wake[0], drained, sizeof drained) > 0) {
    }
    kolo_agent_proc_service(a.proc, on_msg, &a);
    reap(&a);
    pthread_mutex_lock(&a.lock);
    int lost = a.lease_lost;
    a.lease_lost = 0;
    pthread_mutex_unlock(&a.lock);
    if (lost) {
      lose_registration(&a);
      if (a.draining) break;
    }
    if (a.reg == NULL) {
      if (a.draining) break;
      rc = reregister(&a);
      if (rc != KOLO_OK) {
        KOLO_LOGE(LOG, "cannot register worker %s: %s (%s)", a.id, kolo_strerror(rc),
                  kolo_etcd_last_error());
        rc = KOLO_ERR_LEASE_LOST;
        goto out;
      }
    }
    if (a.proc == NULL) hold_port(&a, 1);
    if (a.reg != NULL) reconcile(&a); /* no process runs for an unregistered worker */
    fence(&a);
    kolo_agent_proc_tick(a.proc);
    if (a.report_dirty && mono_ms() - a.report_written_ms >= REPORT_EVERY_MS) write_report(&a);
    if (a.draining) {
      if (a.proc == NULL) break;
      if (mono_ms() > a.drain_deadline_ms)
        kolo_agent_proc_stop(a.proc, "worker draining", opts->stop_grace_ms);
    }
  }
  rc = KOLO_OK;
out:
  kolo_agent_health_stop(a.health);
  kolo_etcd_watch_stop(a.watch);
  kolo_agent_proc_destroy(a.proc);
  if (a.work_dir[0]) kolo_agent_proc_sweep_orphans(a.work_dir);
  if (a.capture) kolo_agent_capture_end(a.capture, CAPTURE_DRAIN_MS, NULL, 0);
  kolo_agent_logserver_stop(a.logserver);
  kolo_agent_capture_destroy(a.capture);
  kolo_agent_logstore_close(a.logstore);
  if (a.reg) kolo_membership_deregister(a.reg);
  if (a.etcd) kolo_etcd_destroy(a.etcd);
  free(a.assignment);
  free(a.ring_line);
  if (a.progress) protobuf_c_message_free_unpacked(&a.progress->base, NULL);
  if (sfd >= 0) close(sfd);
  if (a.wake[0] >= 0) close(a.wake[0]);
  if (a.wake[1] >= 0) close(a.wake[1]);
  if (a.port_fd >= 0) close(a.port_fd);
  pthread_mutex_destroy(&a.lock);
  if (rc == KOLO_OK) KOLO_LOGI(LOG, "worker %s stopped", a.id);
  return rc;
}
