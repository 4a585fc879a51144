/* False losses (issue 28, "count false losses in /metrics"): a ring broken because a member
 * was declared lost by the ring's failure detector while that member was alive all along.
 *
 * libkolo's liveness beat (collective/net/beat.c) fails a communicator with
 * KOLO_ERR_PEER_LOST naming a neighbour silent past its timeout; the neighbours' processes
 * send FAILED <epoch> KOLO_ERR_PEER_LOST <rank> to their agents, which write it into their
 * reports. A rank that is only slow (a loaded host) or paused for less than the scheduler
 * needs to act is still alive: its process finds its ring failed and reports FAILED itself.
 * The scheduler then sees nobody missing and re-forms the same members (STALLED_REFORM,
 * decide.h), each in the same process: nobody was gone, the re-form was for nothing.
 *
 * Member i of a job is falsely lost at the job's epoch when
 *  - a FAILED report of this epoch (any member's) names rank i with KOLO_ERR_PEER_LOST
 *    (a timeout, KOLO_ERR_TIMEOUT, accuses nobody of being gone), and
 *  - i is alive in the same process: its worker is registered under the lease the ring
 *    names (no lease expiry), its process has not exited in its current stay (no crash, no
 *    SIGKILL), and it reported this epoch's failure itself (its process ran after it was
 *    accused).
 * A re-form counts as one false loss (whatever the number of accusations: the accused and
 * its accusers name each other) when the decision is STALLED_REFORM and a member is falsely
 * lost. Not counted: a real loss in the same pass (the ring is re-formed without that
 * member: LOST_*), an accused member that reports only after the scheduler re-formed
 * without it (its agent then stops the process and the worker rejoins as a newcomer: a
 * process that was silent that long is treated as the silent host it looks like), a stall
 * past max_reconfigurations (no next ring). Pure: no I/O, no clock
 * (tests/unit/test_sched_false_loss.c). */
#ifndef KOLO_SCHED_FALSE_LOSS_H
#define KOLO_SCHED_FALSE_LOSS_H

#include <stddef.h>
#include <stdio.h>

#include "scheduler/decide.h"

/* Whether member i of job was falsely lost at the job's epoch (the rule above). */
int kolo_sched_falsely_lost(const kolo_sched_job_view *job, size_t i);

/* Whether decision d (for job) re-forms a ring broken by a false loss: 1 or 0, the
 * amount JobStatus.false_losses grows by. */
int kolo_sched_false_loss(const kolo_sched_job_view *job, const kolo_sched_decision *d);

/* Appends "; a false loss: w1 (rank 1) was declared lost (KOLO_ERR_PEER_LOST) while alive
 * in the same process" (every falsely lost member) to a decision's message when
 * d->false_loss (set by kolo_sched_decide) says so; nothing otherwise. */
void kolo_sched_print_false_loss(FILE *out, const kolo_sched_job_view *job,
                                 const kolo_sched_decision *d);

#endif
