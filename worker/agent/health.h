/* kolo-worker's HTTP endpoint (--http-listen H:P): GET /healthz (200 while the process
 * serves), GET /readyz (200 while the worker is registered in etcd under a live lease, else
 * 503: what Kubernetes' readiness probe asks, so a StatefulSet rollout waits for each worker
 * to be back in the pool before it takes the next) and GET /metrics (Prometheus text: the
 * registration, state, job, epoch, progress and counters). No token: nothing here controls
 * anything, and the chart lets only the cluster's scrapers reach it (NetworkPolicy). The
 * agent loop publishes its state with kolo_agent_health_publish; libmicrohttpd's thread
 * answers from the last published copy, so a request never waits for the loop. */
#ifndef KOLO_AGENT_HEALTH_H
#define KOLO_AGENT_HEALTH_H

#include <stdint.h>

#include "kolo/status.h"

/* What the agent publishes (copied whole under a lock). */
typedef struct kolo_agent_health_state {
  char id[129];
  int registered; /* holds a live registration lease in etcd */
  char state[33]; /* idle, busy, draining, "" before the first registration */
  char job[129];  /* "" when none */
  int64_t epoch;  /* ring epoch of the job's newest ring */
  int process_running;
  int fenced;       /* the process is held by the partition fence (fence.h) */
  uint64_t fences;  /* times it was */
  int has_progress; /* the fields below come from the process's reports */
  double step, total_steps, loss, samples_per_sec;
  uint64_t registrations; /* times the worker registered (restarts after a lost lease) */
  uint64_t leases_lost;
  uint64_t processes_started;
  uint64_t processes_failed; /* exited non-zero */
  uint64_t rings_sent;       /* ring epochs forwarded to a process */
  uint64_t reports_written, report_errors;
} kolo_agent_health_state;

typedef struct kolo_agent_health kolo_agent_health;

/* Binds listen ("host:port", port 0 = any free one; *bound_port gets it) and serves on a
 * thread of libmicrohttpd's. KOLO_ERR_ADDRESS for a bad or busy address. */
kolo_status kolo_agent_health_start(const char *listen, kolo_agent_health **out, int *bound_port);

/* Replaces the published state (never blocks on a request for long). NULL h is ignored. */
void kolo_agent_health_publish(kolo_agent_health *h, const kolo_agent_health_state *state);

/* Stops serving and frees. NULL is ignored. */
void kolo_agent_health_stop(kolo_agent_health *h);

/* The bodies, for the routes and their unit test (malloc'd). */
char *kolo_agent_health_readyz_json(const kolo_agent_health_state *state);
char *kolo_agent_health_metrics_text(const kolo_agent_health_state *state);

#endif
