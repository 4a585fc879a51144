/* The partition fence (#30 item 6): a worker that cannot reach etcd keeps training (an etcd
 * restart must cost no steps), but once its lease cannot have been renewed for (nearly) a TTL,
 * etcd (if it is up) has expired it and the scheduler may be starting the job elsewhere. From
 * then on the process is held (HOLD inside libkolo, whose beat goes on; SIGSTOP of its group for
 * a process that does not speak HOLD: registration.c) so two copies never run at once; it
 * resumes when etcd acknowledges a renewal again (the lease was alive: an etcd outage), and
 * is killed when etcd says the lease is gone (agent.c: lose_registration). A pure decision. */
#ifndef KOLO_AGENT_FENCE_H
#define KOLO_AGENT_FENCE_H

#include <stdint.h>

typedef enum kolo_agent_fence_action {
  KOLO_AGENT_FENCE_KEEP = 0, /* nothing changes */
  KOLO_AGENT_FENCE_PAUSE,    /* stop the process: the lease may have expired */
  KOLO_AGENT_FENCE_RESUME,   /* continue it: etcd renewed the lease again */
} kolo_agent_fence_action;

/* How long after the last acknowledged renewal the process is paused: the TTL less a margin
 * (a quarter of it, at most 500 ms) for this agent's own lateness. */
int64_t kolo_agent_fence_after_ms(int64_t ttl_ms);

/* now_ms and renewed_ms on one monotonic clock (kolo_membership_renewed_ms); paused: the
 * process is paused by the fence now. */
kolo_agent_fence_action kolo_agent_fence_decide(int64_t now_ms, int64_t renewed_ms, int64_t ttl_ms,
                                                int paused);

#endif
