/* The partition fence's decision (fence.h). etcd counts a lease's TTL from the renewal it
 * received, which is before the acknowledgement we saw, so renewed_ms + ttl_ms is at or after
 * the moment etcd may expire the lease. The scheduler needs the expiry, a pass and a new
 * process before another copy runs, but this agent may itself be late (a loaded machine), so
 * it pauses a margin before: a quarter of the TTL, at most 500 ms (measured: with the pause at
 * the TTL itself the old copy's last write came only 0.28-0.62 s before the new copy's first). */
#include "worker/agent/fence.h"

int64_t kolo_agent_fence_after_ms(int64_t ttl_ms) {
  int64_t margin = ttl_ms / 4 < 500 ? ttl_ms / 4 : 500;
  return ttl_ms - margin;
}

kolo_agent_fence_action kolo_agent_fence_decide(int64_t now_ms, int64_t renewed_ms, int64_t ttl_ms,
                                                int paused) {
  int expired = now_ms - renewed_ms >= kolo_agent_fence_after_ms(ttl_ms);
  if (!paused && expired) return KOLO_AGENT_FENCE_PAUSE;
  if (paused && !expired) return KOLO_AGENT_FENCE_RESUME;
  return KOLO_AGENT_FENCE_KEEP;
}
