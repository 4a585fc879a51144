/* The process side of the partition fence (agent protocol version 4; docs/ELASTIC.md, "etcd
 * outages"). The kolo-worker agent sends HOLD once no renewal of its lease was acknowledged for
 * nearly a TTL (etcd may have expired it, and the scheduler may be starting this job elsewhere)
 * and RELEASE when etcd renews it again; when etcd says the lease is gone it kills the process
 * instead. Held, the process starts no new collective and commits nothing (hold.c), but its
 * beat goes on: in an etcd outage every worker is held, and none of them looks dead to its
 * neighbours, so the job goes on where it stopped once etcd answers. */
#include "collective/elastic_hold.h"

#include "collective/face.h"
#include "common/log.h"

void kolo_elastic_on_hold(pthread_mutex_t *mutex, int *held, kolo_comm *const *current,
                          const kolo_agent_msg *msg) {
  int hold = msg->verb == KOLO_AGENT_HOLD;
  pthread_mutex_lock(mutex);
  int was = *held;
  *held = hold;
  kolo_comm_hold(*current, hold);
  pthread_mutex_unlock(mutex);
  if (hold == was)
    KOLO_LOGW("elastic", "%s from the agent while %s: nothing changes (%s)",
              kolo_agent_verb_name(msg->verb), was ? "held" : "not held", msg->text);
  else if (hold)
    KOLO_LOGW("elastic", "held by the agent: no new collective or commit until it releases (%s)",
              msg->text);
  else
    KOLO_LOGI("elastic", "released by the agent (%s)", msg->text);
}
