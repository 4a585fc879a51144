/* A real kolo cluster on 127.0.0.1 for the worker tests: one etcd (the
 * kolo_test_etcd harness), kolo-server replicas and kolo-worker agents started
 * as child processes (each dies with the test through PR_SET_PDEATHSIG), HTTP
 * helpers to submit and read jobs, and waits with deadlines. */
#ifndef KOLO_TEST_WORKER_CLUSTER_H
#define KOLO_TEST_WORKER_CLUSTER_H

#include <jansson.h>
#include <sys/types.h>

#include "tests/support/etcd_harness.h"

#define CLUSTER_MAX_SERVERS 2
#define CLUSTER_MAX_WORKERS 8
#define CLUSTER_TTL_S "2"

typedef struct cluster {
  kolo_etcd_harness *etcd;
  char dir[128];
  pid_t servers[CLUSTER_MAX_SERVERS];
  int http_ports[CLUSTER_MAX_SERVERS];
  pid_t workers[CLUSTER_MAX_WORKERS];
  int port_fds[CLUSTER_MAX_WORKERS]; /* each worker's data-plane port, held (see reserve_port) */
  int ports[CLUSTER_MAX_WORKERS];    /* and its number */
  int keep; /* a wait failed: cluster_stop keeps dir (its logs) and says where */
} cluster;

/* Starts etcd and n_servers kolo-server replicas (server 0 first, so it leads). */
int cluster_start(cluster *c, int n_servers);

/* Starts kolo-worker "w<index>" with a fresh data-plane port; waits until it is
 * registered. Returns 0 on success. */
int cluster_start_worker(cluster *c, int index);

/* The data-plane port of worker index (127.0.0.1), 0 if none was started there. */
int cluster_worker_port(cluster *c, int index);

/* Lets go of the harness's own hold on worker index's port (kept until
 * cluster_stop otherwise), so that a test sees what the agent holds by itself. */
void cluster_release_port(cluster *c, int index);

/* Sends sig to worker index; for SIGKILL also reaps it. */
void cluster_signal_worker(cluster *c, int index, int sig);

/* Waits for worker index to exit; returns its exit code or -1 on timeout. */
int cluster_wait_worker(cluster *c, int index, int timeout_ms);

/* SIGKILLs server index. */
void cluster_kill_server(cluster *c, int index);

/* Submits an elastic_loop job (writing its results to <dir>/<id>.result).
 * extra: more spec fields as JSON members, e.g. "\"max_reconfigurations\":1" or "". */
int cluster_submit(cluster *c, const char *id, int min_workers, int max_workers, int steps,
                   int delay_ms, const char *extra);

/* The same with more environment for the processes: env holds JSON members of
 * the exec env object, e.g. "\"KOLO_LOOP_STALL_UNTIL\":\"1\"" or "". */
int cluster_submit_env(cluster *c, const char *id, int min_workers, int max_workers, int steps,
                       int delay_ms, const char *extra, const char *env);

/* POST path with body to the first live server; the JSON answer or NULL. */
json_t *cluster_post(cluster *c, const char *path, const char *body);

/* The state of worker id as /v1/workers says, lower-cased ("idle", "busy", ...; "" if absent). */
const char *cluster_worker_state(cluster *c, const char *id, char *buf, size_t len);

/* GET /v1/jobs/<id> from the first live server; NULL on error. */
json_t *cluster_job(cluster *c, const char *id);

/* Polls until the job's phase is phase (and epoch >= min_epoch), or the job
 * ends in another phase, or timeout_ms passes. Returns the job (caller frees). */
json_t *cluster_wait_phase(cluster *c, const char *id, const char *phase, int min_epoch,
                           int timeout_ms);

/* Polls until rank 0's reported step reaches step. */
int cluster_wait_step(cluster *c, const char *id, int step, int timeout_ms);

/* The first event of type (at or after epoch), or NULL; borrowed from job. */
json_t *cluster_event(json_t *job, const char *type, int min_epoch);

/* Checks the result file: count lines, every one "RESULT <steps> ... exact";
 * returns the number of lines, or -1 if any line is wrong. */
int cluster_results(cluster *c, const char *id, int steps);

/* Live processes started for job by this cluster's worker (found by their
 * KOLO_JOB_ID, KOLO_WORKER_ID and KOLO_AGENT_SOCKET environment in /proc: a
 * job of the same name in another cluster on the machine is not counted). */
int cluster_job_processes(cluster *c, const char *job, const char *worker);

/* The pid of one such process (the lowest), or -1. */
pid_t cluster_job_pid(cluster *c, const char *job, const char *worker);

/* Waits until no such process is left; 0 on success. */
int cluster_wait_no_processes(cluster *c, const char *job, const char *worker, int timeout_ms);

/* The report worker's agent wrote for job (/kolo/v1/jobs/<job>/reports/<worker>,
 * read from etcd), or NULL. Caller frees. */
json_t *cluster_report(cluster *c, const char *job, const char *worker);

/* Prints the job's phase and events to stderr (for a failing test's log). */
void cluster_print_job(json_t *job);

/* For a wait that failed: prints why, the job id's phase and events (id may be
 * NULL), the tails of the servers' and agents' logs and of the job's process
 * logs, and marks the cluster kept (cluster_stop leaves its files). Every
 * cluster_wait_* and cluster_start_worker calls it when it gives up. */
void cluster_dump(cluster *c, const char *id, const char *why);

int64_t cluster_now_ms(void);

/* Kills everything, removes the directory (unless KOLO_KEEP is set or a wait
 * failed: then it prints where the files are). */
void cluster_stop(cluster *c);

#endif
