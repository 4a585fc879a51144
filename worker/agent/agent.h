/* The kolo-worker agent: registers this worker in etcd under a lease, watches
 * its assignment (/kolo/v1/assign/<id>) and the ring it names, runs one
 * training process per assignment, forwards every ring epoch to it, and writes
 * what the process reports to /kolo/v1/jobs/<job>/reports/<id>. */
#ifndef KOLO_AGENT_AGENT_H
#define KOLO_AGENT_AGENT_H

#include <stdint.h>
#include <stdio.h>

#include "coordination/etcd_access.h"
#include "kolo/status.h"

typedef struct kolo_agent_options {
  char etcd[1024];              /* comma-separated client URLs */
  kolo_etcd_access etcd_access; /* --etcd-ca/-cert/-key/-user/-password-file (password loaded) */
  char advertise[256];          /* data-plane host:port peers connect to */
  char listen[256];             /* what the process binds; "" = advertise */
  char id[129];                 /* "" = <host>-<pid> */
  int lease_ttl_s;
  char work_dir[256]; /* "" = /tmp/kolo-worker-<id> */
  char labels[1024];  /* k=v,k=v */
  int gpus;
  char train_bin[1024]; /* kolo-train for builtin jobs; "" = next to kolo-worker */
  int stop_grace_ms;
  int warm_join_ms;      /* --warm-join-ms: the longest a survivor trains on while a grown ring's
                          * newcomers start (warm_join.h); 0 = switch at once */
  int partition_fence;   /* --partition-fence: pause the process while the lease may have
                          * expired (fence.h); off by default, docs/ELASTIC.md says why */
  char http_listen[256]; /* /healthz, /readyz, /metrics (health.h); "" = none */
  /* job logs (worker/agent/logstore.h) */
  char logs_listen[256]; /* where the log server binds; "" = the --advertise host, port 0 */
  char log_dir[256];     /* "" = <work_dir>/logs */
  uint64_t log_file_bytes, log_job_bytes, log_total_bytes;
  int64_t log_retention_s;
} kolo_agent_options;

/* Parses argv. KOLO_ERR_ABORTED after --help; KOLO_ERR_INVALID_ARG with err set. */
kolo_status kolo_agent_options_parse(int argc, char **argv, kolo_agent_options *opts, char *err,
                                     size_t err_len);
void kolo_agent_options_usage(FILE *out);

/* Runs until SIGTERM/SIGINT (drain, then return KOLO_OK) or a fatal error.
 * The caller blocks SIGTERM, SIGINT and SIGCHLD first. */
kolo_status kolo_agent_run(const kolo_agent_options *opts);

#endif
