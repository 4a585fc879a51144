/* One simulated kolo-worker agent of the fleet (bench/scale/fleet.c): it talks to etcd
 * exactly as worker/agent/agent.c does, through the same coordination/ code (its own etcd
 * client, kolo_membership_register under a lease with its keep-alive thread, a watch on its
 * assign/<id> key, kolo_etcd_get of the ring record and the job spec, reports through
 * coordination/report.h at the agent's rate, state changes idle/busy/draining), so the
 * scheduler and kolo-server cannot tell it from a real agent. Only the training process is
 * simulated: it "forms" a ring form_ms after its agent has the ring, then steps every
 * step_ms (progress {"step","total_steps","loss"} merged as a process's REPORT lines are) and
 * exits 0 after its job's steps (the spec's builtin.steps, else the fleet's default). A
 * neighbour's loss is told by the fleet (kolo_fleet_agent_peer_lost), as libkolo would
 * report it (FAILED, KOLO_ERR_PEER_LOST, naming the rank). Not thread-safe: one fleet
 * thread ticks an agent; only the watch and keep-alive threads run beside it. */
#ifndef KOLO_BENCH_FLEET_AGENT_H
#define KOLO_BENCH_FLEET_AGENT_H

#include <stdint.h>

#include "coordination/etcd.h"
#include "kolo/status.h"

typedef struct kolo_fleet_agent kolo_fleet_agent;

/* What an agent tells the fleet (on its ticking thread): "registered", "assigned" (a
 * ring of a new epoch reached this agent; detail = its rank), "formed" (detail = rank),
 * "step" (detail = step), "failed" (detail = the rank named), "exited" (detail = code),
 * "idle", "left" (drained and gone), "lost" (killed, or its lease lost for good). */
typedef void (*kolo_fleet_event_fn)(void *user, const kolo_fleet_agent *a, const char *what,
                                    const char *job, int64_t epoch, int64_t detail);

/* The highest step a fleet process of job has reached (a newcomer takes it from its
 * ring's rank 0, as a real one takes the broadcast state). */
typedef int64_t (*kolo_fleet_step_fn)(void *user, const char *job);

typedef struct kolo_fleet_agent_config {
  const char *etcd_url;
  const char *id, *host, *address;
  int64_t lease_ttl_s; /* the agent's --lease-ttl (default 3) */
  int form_ms;         /* a ring forms this long after its agent has it */
  int step_ms;         /* one training step */
  int64_t steps;       /* a job's steps when its spec names none */
  int report_ms;       /* progress reports at most this often (the agent's 500 ms) */
  kolo_fleet_event_fn on_event;
  kolo_fleet_step_fn job_step;
  void *user;
} kolo_fleet_agent_config;

/* Registers (idle, under a fresh lease), reads its assignment and starts watching it. */
kolo_status kolo_fleet_agent_start(const kolo_fleet_agent_config *config, kolo_fleet_agent **out);

/* Does what is due at now_ms (monotonic): the newest assignment, the process's forming,
 * steps, reports and exit, a lost lease. Returns 0 once the agent is gone (left or killed). */
int kolo_fleet_agent_tick(kolo_fleet_agent *a, int64_t now_ms);

/* Thread-safe posts, applied at the agent's next tick:
 * drain: SIGTERM to the agent (draining; it leaves its job at its next step and exits);
 * kill: the whole worker dies (kill -9 of agent and process): no more requests, the
 *   lease expires by itself (the fleet tells its ring neighbours: peer_lost);
 * peer_lost: a neighbour of job's ring at epoch died as rank `rank`: if this agent's
 *   process runs in that ring it reports FAILED (KOLO_ERR_PEER_LOST, naming rank) at at_ms. */
void kolo_fleet_agent_drain(kolo_fleet_agent *a);
void kolo_fleet_agent_kill(kolo_fleet_agent *a);
/* hold (on = 1): the agent is never idle: when it has no process and no assignment it is
 * drained and leaves (so the scheduler sees no idle simulated worker); 0: as usual. */
void kolo_fleet_agent_hold(kolo_fleet_agent *a, int on);
void kolo_fleet_agent_peer_lost(kolo_fleet_agent *a, const char *job, int64_t epoch, int rank,
                                int64_t at_ms);

const char *kolo_fleet_agent_id(const kolo_fleet_agent *a);

/* Stops the watch, deregisters (revokes the lease) unless killed, frees. NULL is ignored. */
void kolo_fleet_agent_destroy(kolo_fleet_agent *a);

#endif
