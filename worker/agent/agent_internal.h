/* What the agent's files share, internal to worker/agent/: agent.c (the poll loop, setup,
 * reconciling what runs with the assignment), registration.c (the worker record under its
 * lease, losing and renewing it, the partition fence), launch.c (a process for a ring: its
 * argv, environment and RING line) and report.c (the process's messages, the job report
 * in etcd, /metrics). One struct, the agent, owned by kolo_agent_run's loop thread; the
 * watch and lease threads touch only the fields under its lock. */
#ifndef KOLO_AGENT_INTERNAL_H
#define KOLO_AGENT_INTERNAL_H

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

/* How the partition fence holds the process (agent.fenced). */
enum {
  KOLO_AGENT_FENCED_NO = 0,
  KOLO_AGENT_FENCED_STOPPED, /* SIGSTOP: a process that does not speak HOLD */
  KOLO_AGENT_FENCED_HELD,    /* HOLD: libkolo starts nothing new, its beat goes on */
};

/* A survivor's RING line held while the ring's newcomers start (warm_join.h). */
typedef struct kolo_agent_warm {
  int64_t epoch;                             /* the held ring's epoch; 0 = nothing held */
  int64_t since_ms, deadline_ms, checked_ms; /* mono_ms */
  char **ids;                                /* the newcomers not up yet */
  size_t n;
} kolo_agent_warm;

typedef struct agent {
  const kolo_agent_options *opts;
  char id[129], host[256], listen[256], work_dir[256], assign_key[256];
  kolo_etcd *etcd;
  kolo_membership *reg;
  Kolo__V1__WorkerRecord record; /* coordination/membership.h; its strings are borrowed */
  Kolo__V1__WorkerRecord__LabelsEntry labels[64]; /* the record's labels point into label_text */
  Kolo__V1__WorkerRecord__LabelsEntry *label_ptrs[64];
  char label_text[1024];
  kolo_etcd_watch *watch;
  int wake[2];
  pthread_mutex_t lock;
  char *assignment;       /* newest assignment value, NULL when none */
  int assignment_refused; /* that value does not decode and was logged once */
  int lease_lost;
  int fenced;           /* KOLO_AGENT_FENCED_*: the lease may have expired (fence.h) */
  int fence_connection; /* held: the connection HOLD went on (kolo_agent_proc_hold_connection) */
  int64_t fenced_at_ms;
  int64_t register_at_ms;   /* unregistered (etcd said the lease is gone): next attempt */
  int64_t register_wait_ms; /* and the back-off before the one after */

  /* the job being run */
  char job[129];
  int64_t epoch;      /* epoch of the newest ring loaded */
  int64_t sent_epoch; /* newest RING sent to the process */
  char *ring_line;
  kolo_agent_warm warm; /* ring_line held until the newcomers are up (warm_join.h) */
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

static inline int64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static inline int64_t wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static inline void poke(agent *a) {
  char byte = 1;
  ssize_t ignored = write(a->wake[1], &byte, 1);
  (void)ignored;
}

kolo_status kolo_agent_set_state(agent *a, const char *state);

/* At start: retries transient failures for a TTL + 10 s, then gives up. */
kolo_status kolo_agent_register_worker(agent *a);

/* etcd said the lease is gone: the coordinator counts us gone, so the process
 * stops (its ring moved on without it) and we come back as a new worker. */
void kolo_agent_lose_registration(agent *a);

/* Unregistered: one attempt when due; transient failures back off (up to 4 s)
 * and are retried for as long as it takes, since etcd may be unreachable for
 * a while (a partition): the main loop keeps serving signals meanwhile.
 * Returns KOLO_OK, or the error that no retry can fix. */
kolo_status kolo_agent_reregister(agent *a);

void kolo_agent_write_report(agent *a);

void kolo_agent_on_msg(const kolo_agent_msg *msg, void *user);

/* Reads the ring record at key through its codec (coordination/ringspec.h): a new message
 * (protobuf_c_message_free_unpacked), or NULL if
 * it cannot be read or is not a valid record (logged, naming what is wrong). */
Kolo__V1__RingRecord *kolo_agent_get_ring(agent *a, const char *key);

/* Whether the ring's member entry for this worker names another registration of it:
 * the ring was planned for this worker before its lease expired (the process it had
 * is gone), so the coordinator counts that member lost and this registration must
 * not take its place. Entries without a lease (older records) name any. */
int kolo_agent_stale_member(agent *a, const Kolo__V1__RingRecord *ring);

/* Builds the RING line for this worker from the ring record; NULL if absent from
 * it, or if the record does not make a valid RING (logged). */
char *kolo_agent_ring_line_for(agent *a, const Kolo__V1__RingRecord *ring, int *rank, int *size);

/* Starts the process for job at ring. */
void kolo_agent_start_process(agent *a, const char *job, const Kolo__V1__RingRecord *ring);

/* The partition fence (fence.h): while no renewal of the lease has been acknowledged for a
 * TTL, the process is held (HOLD, or SIGSTOP for one that does not speak it), so it cannot run
 * beside a copy the scheduler started elsewhere; it continues when etcd renews the lease again,
 * and dies with lose_registration when etcd says the lease is gone. */
void kolo_agent_fence(agent *a);

/* At most wait_ms, less when the fence's deadline comes sooner (so it pauses on time). */
int kolo_agent_fence_wait_ms(const agent *a, int wait_ms);

/* Warm joins (warm_join.h): a newly loaded ring (begin) is held from a running process that
 * formed a ring before until the newcomers' processes are up (ready_now: 1 when the RING line
 * may go; it reads their reports at most every KOLO_AGENT_WARM_JOIN_POLL_MS), or for
 * --warm-join-ms at most; wait_ms shortens the loop's poll meanwhile. */
void kolo_agent_warm_join_begin(agent *a, const Kolo__V1__RingRecord *ring);
int kolo_agent_warm_join_ready_now(agent *a);
int kolo_agent_warm_join_wait_ms(const agent *a, int wait_ms);
void kolo_agent_warm_join_end(agent *a);

void kolo_agent_publish_health(agent *a);

#endif
