/* The scheduler's per-job decision as one pure function over a typed view of
 * the job (its phase, epoch, members with their worker record and last report,
 * the idle workers, the clock): has it finished, which members are lost and
 * why, and then re-form / hold / fail, resume, mark formed, shrink, grow or
 * copy progress. No I/O and no JSON (phases are job.proto's enum): snapshot.c builds the view from
 * etcd's records, apply.c writes the decision. Sizes come from the view; nothing is clamped.
 * docs/ELASTIC.md gives the rules in prose; tests/unit/ test_sched_decide.c pins them down case by
 * case. */
#ifndef KOLO_SCHED_DECIDE_H
#define KOLO_SCHED_DECIDE_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"
#include "kolo/v1/job.pb-c.h"

#define KOLO_SCHED_FAILED_SETTLE_MS 500 /* wait this long for every survivor's FAILED report */
/* A rank named only in timeouts is alive as far as anyone knows (a dead or silent
 * neighbour shows as KOLO_ERR_PEER_LOST: closed sockets, the liveness beat), and
 * a live member of a failed ring reports it too: wait this long for its own
 * report before counting it lost (under load, reports arrive passes apart). */
#define KOLO_SCHED_TIMEOUT_SETTLE_MS 2000
#define KOLO_SCHED_FINISH_GRACE_MS                              \
  10000 /* after rank 0 exited 0, wait this long for the others \
         */
/* Permanent failures: a failure that no other worker and no other epoch would
 * change fails the job at once (KOLO_SCHED_PERMANENT_FAIL, with the first such
 * rank's stderr tail) instead of being re-planned as a lost worker until
 * max_reconfigurations. A member's failure is permanent when, in its current stay:
 *  - its agent says why (the report's `permanent`: the program could not be
 *    executed, it did not acknowledge its job's training mode, ...; an agent finding
 *    is one more reason, nothing else to add here), whatever its exit code, and
 *    before anything else, a finished rank 0 included (a process that ran another
 *    mode than asked to the end must not make its job SUCCEED);
 *  - its process exited with KOLO_SCHED_EXIT_USAGE: it refused its arguments
 *    (kolo-train's KOLO_TRAIN_EXIT_USAGE, getopt tools, Python's argparse);
 *  - its process exited by itself (a code 1..127, not a signal) before it said HELLO
 *    to its agent: it failed before kolo.init() (an import error, a script that
 *    does not exist, a function that cannot be unpickled), which no ring changes;
 *  - every member's process exited by itself with the same code and none formed a
 *    ring: the same early failure on every rank. A member that exited that way
 *    while others still run is waited for up to KOLO_SCHED_EARLY_SETTLE_MS, so the
 *    others' exits can be seen together.
 * A process killed by a signal (code >= 128: SIGKILL, the OOM killer) is a real
 * loss, whenever it happens. */
#define KOLO_SCHED_EXIT_USAGE 2
#define KOLO_SCHED_EARLY_SETTLE_MS 1500

/* The decisions judge the jobs the scheduler gave a ring (snapshot.h's kolo_sched_job_scheduled:
 * RUNNING, RECONFIGURING, or PENDING with the ring of its epoch, its first ring forming); a
 * queued PENDING job is plan.h's, an ended one nobody's. Phases are job.proto's enum, never
 * names. */

/* A member's last report (what its agent wrote under reports/<worker>). */
typedef struct kolo_sched_report {
  int present;               /* a report exists */
  int64_t time_unix_ms;      /* when the agent wrote it */
  int exited;                /* the process exited ... */
  int exit_code;             /* ... with this code ... */
  int64_t exit_epoch;        /* ... while at this epoch */
  int64_t failed_epoch;      /* the process said this epoch's ring failed ... */
  int64_t failed_rank;       /* ... naming this rank (-1: none) */
  int64_t formed_epoch;      /* newest epoch whose ring the process formed */
  const char *failed_status; /* borrowed: the status name of that failure ("KOLO_ERR_TIMEOUT"); NULL
                                if none */
  const char *
      stderr_tail; /* borrowed: last stderr lines of a process that exited non-zero; NULL if none */
  int hello;       /* the process said HELLO to its agent (reached kolo.init()) */
  const char *permanent; /* borrowed: the agent's reason its failure is permanent; NULL: none */
  int64_t first_formed_epoch; /* the first epoch its process formed (0: none, or not known) */
} kolo_sched_report;

typedef struct kolo_sched_member {
  const char *worker_id; /* borrowed */
  int registered;        /* its worker record exists (its lease lives) */
  int draining;          /* its record says draining, or an operator drained it */
  int64_t since_epoch;   /* first epoch of its current stay (from the ring; 0 if absent) */
  kolo_sched_report report;
  /* Which registration of the worker: a worker whose lease expired comes back under
   * the same id with a new lease, its process gone (the agent stops it), so a member
   * is its id AND the lease it was planned with. */
  int64_t lease;      /* the lease of its worker record now (0 when unregistered) */
  int64_t ring_lease; /* the lease the ring of this epoch names for it (0: not recorded) */
} kolo_sched_member;

/* A scheduled job (RUNNING, RECONFIGURING, or PENDING with its first ring forming) as the
 * scheduler sees it in one pass. */
typedef struct kolo_sched_job_view {
  Kolo__V1__Phase phase;            /* RUNNING, RECONFIGURING or PENDING (not formed yet) */
  int64_t epoch;                    /* the status's epoch */
  int has_ring;                     /* the ring record of that epoch was read */
  size_t ring_size;                 /* its members (0 without one) */
  const kolo_sched_member *members; /* status members, in rank order */
  size_t n_members;
  uint32_t min_workers, max_workers; /* effective (status over spec, at least 1) */
  uint32_t reconfigurations;         /* done so far */
  uint32_t max_reconfigurations;     /* from the spec; 0 = the default */
  size_t idle;                       /* idle workers free to join */
  const char *const *earlier_lost;   /* workers lost before this epoch (the ring's list) */
  size_t n_earlier_lost;
  int64_t now_unix_ms;
} kolo_sched_job_view;

typedef enum kolo_sched_action {
  KOLO_SCHED_NOTHING,     /* nothing to write this pass */
  KOLO_SCHED_FINISH,      /* SUCCEEDED: rank 0 exited 0 and the others did or the grace passed */
  KOLO_SCHED_LOST_REFORM, /* members lost: next epoch with the survivors (+ take idle) */
  KOLO_SCHED_LOST_HOLD,   /* members lost, below min_workers: RECONFIGURING, survivors wait */
  KOLO_SCHED_LOST_FAIL,   /* members lost past max_reconfigurations: FAILED */
  KOLO_SCHED_RESUME,      /* a held job has enough workers again: next epoch (+ take idle) */
  /* every member formed the epoch: RUNNING (the one place it is written), from PENDING (the
   * first ring) or RECONFIGURING; before FINISH when rank 0 exited 0 in such a ring */
  KOLO_SCHED_FORMED,
  KOLO_SCHED_SHRINK,   /* above max_workers: next epoch with the first keep members */
  KOLO_SCHED_GROW,     /* below max_workers with idle workers: next epoch (+ take idle) */
  KOLO_SCHED_PROGRESS, /* healthy: copy rank 0's progress into the status */
  /* Only drained members left (planned leaves, not losses: never counted against
   * max_reconfigurations, never a failure): */
  KOLO_SCHED_DRAIN_REFORM, /* next epoch with the others (+ take idle); planned when nobody joins */
  KOLO_SCHED_DRAIN_HOLD,   /* below min_workers: RECONFIGURING, the others wait */
  /* Members reported this epoch failed but every rank they name is alive (a
   * timeout with everyone alive, a ring that cannot form): the ring cannot make
   * progress, so it is re-formed with the same members, or the job fails; both
   * count against max_reconfigurations like a loss. */
  KOLO_SCHED_STALLED_REFORM, /* next epoch, same members */
  KOLO_SCHED_STALLED_FAIL,   /* past max_reconfigurations: FAILED */
  KOLO_SCHED_PERMANENT_FAIL, /* a member failed permanently (see above): FAILED now */
} kolo_sched_action;

typedef struct kolo_sched_lost {
  size_t member; /* index into the view's members */
  char why[256]; /* "its lease expired", "it is draining", ... */
  int drained;   /* a planned leave (the member is draining), not a loss */
  int permanent; /* its failure is permanent (see above) */
} kolo_sched_lost;

typedef struct kolo_sched_decision {
  kolo_sched_action action;
  size_t take;           /* LOST_REFORM, RESUME, GROW: idle workers to add */
  size_t keep;           /* SHRINK: members kept (the lowest ranks) */
  size_t exited;         /* FINISH: members whose process exited */
  kolo_sched_lost *lost; /* LOST_*, DRAIN_*: in detection order, one per member at most */
  size_t n_lost;         /* ... of which n_drained are drained members (planned leaves) */
  size_t n_drained;
  uint32_t limit; /* LOST_FAIL: the effective max_reconfigurations */
  /* DRAIN_REFORM (with survivors) and GROW: nobody failed, so the members go on until their
   * next commit and switch rings there (the ring record says "planned"): the change costs no
   * step. A newcomer's formation waits for that commit; libkolo aborts the old ring after
   * half the ring's timeout without one (collective/elastic_agent.c): the wait is bounded. */
  int planned;
  int stalled; /* FAILED reports at this epoch name no missing member (see STALLED_*) */
  int early;   /* members exited early, others still run: waiting (NOTHING) to see them all */
  /* FORMED after a re-form where no process of an earlier formed ring survived: every
   * member's process formed its first ring at this epoch, so the program starts from its
   * beginning (one that does not use kolo.elastic exits when its ring fails; the job starts
   * it again). */
  int restarted;
  /* STALLED_REFORM of a ring broken by a false loss: a member declared lost
   * (KOLO_ERR_PEER_LOST) is alive in the same process (scheduler/false_loss.h); 1 or 0 */
  int false_loss;
} kolo_sched_decision;

/* Decides what to do with one active job. *out is filled (free with
 * kolo_sched_decision_clear). KOLO_ERR_NO_MEMORY (out: NOTHING) is the only
 * error. */
kolo_status kolo_sched_decide(const kolo_sched_job_view *job, kolo_sched_decision *out);

void kolo_sched_decision_clear(kolo_sched_decision *decision);

/* Whether member index i is among the decision's lost. */
int kolo_sched_decision_lost(const kolo_sched_decision *decision, size_t i);

/* The event type a decision is logged under ("WORKER_LOST", "WORKER_DRAINED",
 * ...); NULL for NOTHING and PROGRESS. */
const char *kolo_sched_event_type(kolo_sched_action action);

/* The event message for a decision (malloc'd; NULL when out of memory or for an
 * action without an event). Names every lost worker with its reason on the first line;
 * a lost member whose process failed adds the last lines of its stderr below (at most
 * KOLO_SCHED_TAIL_WORKERS members, KOLO_SCHED_TAIL_BYTES each; a permanent failure
 * shows only the first permanently failed rank's), so the job's FAILED error says what
 * went wrong. */
#define KOLO_SCHED_TAIL_WORKERS 3
#define KOLO_SCHED_TAIL_BYTES 1536
char *kolo_sched_decision_message(const kolo_sched_job_view *job,
                                  const kolo_sched_decision *decision);

#endif
