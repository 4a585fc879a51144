/* Implementation of metrics.h. */
#include "server/metrics.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/job_model.h"

#define CODES 17
static const double bucket_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                       0.05,   0.1,   0.25,   0.5,   1.0};
#define BUCKETS (sizeof bucket_bounds / sizeof bucket_bounds[0])

typedef struct series {
  atomic_uint_fast64_t count[CODES];
  atomic_uint_fast64_t buckets[BUCKETS]; /* non-cumulative */
  atomic_uint_fast64_t micros_sum;
} series;

struct kolo_server_metrics {
  series s[2][KOLO_SERVER_METRIC_SLOTS];
  kolo_server_metrics_extra_fn extra;
  void *extra_arg;
};

void kolo_server_metrics_set_extra(kolo_server_metrics *m, kolo_server_metrics_extra_fn fn,
                                   void *arg) {
  m->extra = fn;
  m->extra_arg = arg;
}

kolo_status kolo_server_metrics_create(kolo_server_metrics **out) {
  *out = calloc(1, sizeof **out);
  return *out ? KOLO_OK : KOLO_ERR_NO_MEMORY;
}

void kolo_server_metrics_destroy(kolo_server_metrics *m) {
  free(m);
}

void kolo_server_metrics_observe(kolo_server_metrics *m, kolo_server_api api, int method,
                                 int grpc_code, double seconds) {
  if (m == NULL || method < 0 || method >= KOLO_SERVER_METRIC_SLOTS) return;
  series *s = &m->s[api][method];
  atomic_fetch_add(&s->count[grpc_code >= 0 && grpc_code < CODES ? grpc_code : 2], 1);
  size_t b = 0;
  while (b < BUCKETS && seconds > bucket_bounds[b]) b++;
  if (b < BUCKETS) atomic_fetch_add(&s->buckets[b], 1);
  atomic_fetch_add(&s->micros_sum, (uint_fast64_t)(seconds * 1e6));
}

typedef struct text {
  char *buf;
  size_t len, cap;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...) {
  for (;;) {
    va_list args;
    va_start(args, fmt);
    int n = t->buf ? vsnprintf(t->buf + t->len, t->cap - t->len, fmt, args) : -1;
    va_end(args);
    if (n >= 0 && (size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap ? t->cap * 2 : 8192;
    char *grown = realloc(t->buf, cap);
    if (grown == NULL) return;
    t->buf = grown;
    t->cap = cap;
  }
}

/* The demand for workers (demand.h): what an autoscaler scales the worker pool on. */
static void add_demand(text *t, const Kolo__V1__Demand *d) {
  static const struct {
    const char *name, *help;
  } gauges[] = {
      {"kolo_workers", "Workers registered in etcd."},
      {"kolo_workers_idle", "Registered workers with no job that are not draining."},
      {"kolo_workers_draining", "Registered workers that are drained or shutting down."},
      {"kolo_workers_wanted",
       "Workers the jobs want now: members of running jobs, up to max_workers of growable "
       "ones, max_workers of pending ones (scale the worker pool on this)."},
      {"kolo_workers_missing",
       "Workers wanted that no job has yet (pending jobs, jobs below max_workers)."},
      {"kolo_jobs_growable", "Running or re-forming jobs below their max_workers."},
  };
  uint32_t values[] = {d->workers_registered, d->workers_idle,    d->workers_draining,
                       d->workers_wanted,     d->workers_missing, d->growable_jobs};
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++)
    add(t, "# HELP %s %s\n# TYPE %s gauge\n%s %u\n", gauges[i].name, gauges[i].help, gauges[i].name,
        gauges[i].name, (unsigned)values[i]);
}

char *kolo_server_metrics_render(kolo_server_metrics *m, const uint64_t phase_counts[7],
                                 const Kolo__V1__Demand *demand, int is_leader) {
  static const char *const apis[] = {"grpc", "http"};
  text t = {0};
  add(&t, "# HELP kolo_jobs Jobs known to this server, by phase.\n# TYPE kolo_jobs gauge\n");
  for (int p = 1; p < 7; p++)
    add(&t, "kolo_jobs{phase=\"%s\"} %" PRIu64 "\n", kolo_server_job_phase_name((Kolo__V1__Phase)p),
        phase_counts[p]);
  if (demand) add_demand(&t, demand);
  add(&t,
      "# HELP kolo_server_leader 1 if this replica is the elected leader.\n"
      "# TYPE kolo_server_leader gauge\nkolo_server_leader %d\n",
      is_leader);
  add(&t,
      "# HELP kolo_requests_total Requests served, by transport, method and gRPC code.\n"
      "# TYPE kolo_requests_total counter\n");
  for (int a = 0; a < 2; a++)
    for (int k = 0; k < KOLO_SERVER_METRIC_SLOTS; k++)
      for (int c = 0; c < CODES; c++) {
        uint64_t n = atomic_load(&m->s[a][k].count[c]);
        if (n == 0) continue;
        add(&t, "kolo_requests_total{api=\"%s\",method=\"%s\",code=\"%s\"} %" PRIu64 "\n", apis[a],
            k < KOLO_SERVER_METHOD_COUNT ? kolo_server_methods[k].name : "other",
            kolo_server_grpc_code_name(c), n);
      }
  add(&t,
      "# HELP kolo_request_duration_seconds Request latency.\n"
      "# TYPE kolo_request_duration_seconds histogram\n");
  for (int a = 0; a < 2; a++)
    for (int k = 0; k < KOLO_SERVER_METRIC_SLOTS; k++) {
      series *s = &m->s[a][k];
      uint64_t total = 0;
      for (int c = 0; c < CODES; c++) total += atomic_load(&s->count[c]);
      if (total == 0) continue;
      const char *name = k < KOLO_SERVER_METHOD_COUNT ? kolo_server_methods[k].name : "other";
      uint64_t cumulative = 0;
      for (size_t b = 0; b < BUCKETS; b++) {
        cumulative += atomic_load(&s->buckets[b]);
        add(&t,
            "kolo_request_duration_seconds_bucket{api=\"%s\",method=\"%s\",le=\"%g\"} %" PRIu64
            "\n",
            apis[a], name, bucket_bounds[b], cumulative);
      }
      add(&t,
          "kolo_request_duration_seconds_bucket{api=\"%s\",method=\"%s\",le=\"+Inf\"} %" PRIu64
          "\n",
          apis[a], name, total);
      add(&t, "kolo_request_duration_seconds_sum{api=\"%s\",method=\"%s\"} %.6f\n", apis[a], name,
          (double)atomic_load(&s->micros_sum) / 1e6);
      add(&t, "kolo_request_duration_seconds_count{api=\"%s\",method=\"%s\"} %" PRIu64 "\n",
          apis[a], name, total);
    }
  char *extra = m->extra ? m->extra(m->extra_arg) : NULL;
  if (extra) add(&t, "%s", extra);
  free(extra);
  return t.buf;
}

/* A label value with \\, " and newlines escaped (ids are plain, but the view takes any key). */
static void add_label(text *t, const char *value) {
  for (const char *c = value; *c; c++) {
    if (*c == '\\' || *c == '"')
      add(t, "\\%c", *c);
    else if (*c == '\n')
      add(t, "\\n");
    else
      add(t, "%c", *c);
  }
}

typedef enum gauge_kind {
  G_STEP,
  G_TOTAL,
  G_LOSS,
  G_ACCURACY,
  G_RATE,
  G_RING,
  G_EPOCH,
  G_RECONF,
  G_FALSE_LOSSES,
  G_ROUNDS,
  G_BYTES,
  G_STALENESS,
  G_BLOCKED,
  G_COUNT
} gauge_kind;

static double gauge_value(const kolo_server_job_gauge *g, gauge_kind k) {
  switch (k) {
    case G_STEP:
      return (double)g->step;
    case G_TOTAL:
      return (double)g->total_steps;
    case G_LOSS:
      return g->loss;
    case G_ACCURACY:
      return g->accuracy;
    case G_RATE:
      return g->samples_per_sec;
    case G_RING:
      return (double)g->ring_size;
    case G_EPOCH:
      return (double)g->epoch;
    case G_FALSE_LOSSES:
      return (double)g->false_losses;
    case G_ROUNDS:
      return (double)g->rounds;
    case G_BYTES:
      return (double)g->bytes_sent;
    case G_STALENESS:
      return g->staleness;
    case G_BLOCKED:
      return g->blocked_seconds;
    default:
      return (double)g->reconfigurations;
  }
}

char *kolo_server_metrics_render_jobs(const kolo_server_job_gauge *jobs, size_t n,
                                      size_t left_out) {
  static const char *const names[G_COUNT][3] = {
      {"kolo_job_step", "gauge", "Training step the job reported last."},
      {"kolo_job_total_steps", "gauge", "Steps the job will run in all (0 = unknown)."},
      {"kolo_job_loss", "gauge", "Loss the job reported last."},
      {"kolo_job_accuracy", "gauge", "Accuracy the job reported last."},
      {"kolo_job_samples_per_second", "gauge", "Training throughput of the whole ring."},
      {"kolo_job_ring_size", "gauge", "Workers in the job's current ring."},
      {"kolo_job_ring_epoch", "gauge", "The job's current ring epoch."},
      {"kolo_job_reconfigurations_total", "counter", "Times the job's ring re-formed."},
      {"kolo_job_false_losses_total", "counter",
       "Re-forms for a member declared lost while alive (docs/ELASTIC.md)."},
      {"kolo_job_rounds_total", "counter", "Averaging rounds the job's training mode did."},
      {"kolo_job_bytes_sent_total", "counter", "Bytes rank 0 sent to synchronise."},
      {"kolo_job_staleness", "gauge", "ASYNC: averaging rounds outstanding, as observed."},
      {"kolo_job_blocked_seconds_total", "counter", "Seconds rank 0 waited for other ranks."},
  };
  text t = {0};
  add(&t,
      "# HELP kolo_job_series_left_out Jobs without per-job series (only %d are shown).\n"
      "# TYPE kolo_job_series_left_out gauge\nkolo_job_series_left_out %zu\n",
      KOLO_SERVER_METRICS_MAX_JOBS, left_out);
  for (int k = 0; k < G_COUNT; k++) {
    add(&t, "# HELP %s %s\n# TYPE %s %s\n", names[k][0], names[k][2], names[k][0], names[k][1]);
    for (size_t i = 0; i < n; i++) {
      add(&t, "%s{job=\"", names[k][0]);
      add_label(&t, jobs[i].id);
      add(&t, "\"} %.17g\n", gauge_value(&jobs[i], (gauge_kind)k));
    }
  }
  add(&t,
      "# HELP kolo_job_mode The job's training mode (its spec's; the value is always 1).\n"
      "# TYPE kolo_job_mode gauge\n");
  for (size_t i = 0; i < n; i++) {
    add(&t, "kolo_job_mode{job=\"");
    add_label(&t, jobs[i].id);
    add(&t, "\",mode=\"");
    add_label(&t, jobs[i].mode);
    add(&t, "\"} 1\n");
  }
  return t.buf;
}
