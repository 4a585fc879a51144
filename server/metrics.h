/* Request counters and latency histograms for /metrics (Prometheus text format): per
 * transport (grpc, http), method and gRPC code; lock-free (atomics) on the hot path. Also
 * the text of the per-job gauges. */
#ifndef KOLO_SERVER_METRICS_H
#define KOLO_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/v1/cluster.pb-c.h"
#include "server/service.h"
#include "server/store.h"

/* At most this many jobs get per-job series on /metrics (bounded label cardinality). */
#define KOLO_SERVER_METRICS_MAX_JOBS 100

typedef enum kolo_server_api { KOLO_SERVER_API_GRPC = 0, KOLO_SERVER_API_HTTP = 1 } kolo_server_api;

/* Methods beyond the RPCs, for HTTP routes that map to none and unknown gRPC methods. */
#define KOLO_SERVER_METRIC_OTHER KOLO_SERVER_METHOD_COUNT
#define KOLO_SERVER_METRIC_SLOTS (KOLO_SERVER_METHOD_COUNT + 1)

typedef struct kolo_server_metrics kolo_server_metrics;

kolo_status kolo_server_metrics_create(kolo_server_metrics **out);
void kolo_server_metrics_destroy(kolo_server_metrics *m);

/* Records one finished request. method: a kolo_server_method or KOLO_SERVER_METRIC_OTHER. */
void kolo_server_metrics_observe(kolo_server_metrics *m, kolo_server_api api, int method,
                                 int grpc_code, double seconds);

/* Lines that another part of the process adds to /metrics (kolo-server: its etcd client's
 * and its scheduler's counters): fn returns malloc'd Prometheus text (NULL = none), called
 * from render on an HTTP thread. Set it before the server serves. */
typedef char *(*kolo_server_metrics_extra_fn)(void *arg);
void kolo_server_metrics_set_extra(kolo_server_metrics *m, kolo_server_metrics_extra_fn fn,
                                   void *arg);

/* Appends the metrics as Prometheus text to a malloc'd buffer (caller frees). demand: the
 * demand for workers now (its worker gauges are left out when NULL: etcd unreachable). */
char *kolo_server_metrics_render(kolo_server_metrics *m, const uint64_t phase_counts[7],
                                 const Kolo__V1__Demand *demand, int is_leader);

/* Per-job gauges (label job="<id>") as Prometheus text (malloc'd): step, total steps, loss,
 * accuracy, samples/s, ring size, ring epoch, reconfigurations, false losses, the training
 * mode's rounds, bytes sent, staleness and blocked seconds, kolo_job_mode{job,mode} 1, and
 * how many jobs were left out beyond the bound. */
char *kolo_server_metrics_render_jobs(const kolo_server_job_gauge *jobs, size_t n, size_t left_out);

#endif
