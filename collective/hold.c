/* The partition fence's hold on a communicator (face.h: kolo_comm_hold). The kolo-worker
 * agent holds a process whose lease etcd may have expired (HOLD, collective/elastic_hold.c):
 * the training thread must start nothing more, since the scheduler may be starting the job
 * elsewhere, but the negotiator thread must go on beating, so that in an etcd outage (every
 * worker held, each at a slightly different moment) no neighbour sees a silent rank and the
 * job re-forms for nothing, as it would around a SIGSTOPped process. So the hold is a gate at
 * the two doors every operation goes through (queue.c) and at kolo_elastic_commit; what was
 * already submitted may finish. The wait is bounded by the ring's no-progress timeout: a
 * neighbour waiting on a held rank gives up after that long anyway. */
#include <errno.h>
#include <time.h>

#include "collective/face.h"
#include "common/clock.h"
#include "common/log.h"

#define HOLD_POLL_MS 100 /* how often a held wait looks at the communicator's failure */

void kolo_comm_hold(kolo_comm *comm, int held) {
  if (comm == NULL) return;
  pthread_mutex_lock(&comm->hold_mutex);
  atomic_store(&comm->held, held ? 1 : 0);
  pthread_cond_broadcast(&comm->hold_cond);
  pthread_mutex_unlock(&comm->hold_mutex);
}

/* Waits on hold_cond (locked) for at most ms. */
static void wait_a_little(kolo_comm *comm, int ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += (long)ms * 1000000L;
  until.tv_sec += until.tv_nsec / 1000000000L;
  until.tv_nsec %= 1000000000L;
  pthread_cond_timedwait(&comm->hold_cond, &comm->hold_mutex, &until);
}

kolo_status kolo_comm_hold_wait(kolo_comm *comm) {
  if (comm == NULL || !atomic_load(&comm->held)) return KOLO_OK;
  int64_t deadline = kolo_deadline_after_ms(comm->net.timeout_ms);
  int64_t since = kolo_now_ns();
  KOLO_LOGI("kolo",
            "rank %d epoch %llu: held by the agent (its lease may have expired): no new "
            "collective until it releases, at most %d ms",
            comm->net.rank, (unsigned long long)comm->net.epoch, comm->net.timeout_ms);
  int timed_out = 0;
  pthread_mutex_lock(&comm->hold_mutex);
  while (atomic_load(&comm->held) && !atomic_load(&comm->net.failed)) {
    int left = kolo_ms_until(deadline);
    if (left == 0) {
      timed_out = 1;
      break;
    }
    wait_a_little(comm, left < HOLD_POLL_MS ? left : HOLD_POLL_MS);
  }
  pthread_mutex_unlock(&comm->hold_mutex);
  if (timed_out)
    kolo_net_fail(&comm->net, KOLO_ERR_TIMEOUT, -1,
                  "timeout: held by the agent for %d ms (the ring's timeout): etcd has not "
                  "renewed this worker's lease",
                  comm->net.timeout_ms);
  if (atomic_load(&comm->net.failed)) return kolo_net_error(&comm->net, NULL);
  KOLO_LOGI("kolo", "rank %d: released by the agent after %lld ms held", comm->net.rank,
            (long long)((kolo_now_ns() - since) / 1000000));
  return KOLO_OK;
}
