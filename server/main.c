/* kolo-server: wires the job store (etcd or memory), the leader election, the gRPC and
 * HTTP transports together, and runs until SIGTERM/SIGINT, then drains and exits 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "server/etcd_child.h"
#include "server/grpc_api.h"
#include "server/http_api.h"
#include "server/kv.h"
#include "server/blob.h"
#include "server/leader.h"
#include "server/logs.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/recorder.h"
#include "server/store.h"
#include "scheduler/scheduler.h"

#define LOG "server"
#define STARTUP_ATTEMPTS 60 /* 500 ms apart */

typedef struct server {
  kolo_server_options opts;
  char *tls_cert, *tls_key, *token;
  kolo_server_etcd_child *etcd_child;
  kolo_etcd_access
      child_access; /* the private etcd child's (--etcd auto): its URL, no TLS or auth */
  kolo_etcd *etcd;  /* the one etcd client: store, leader and scheduler hold handles of it */
  int kv_on_etcd;   /* kv is kolo_server_kv_etcd_create's */
  kolo_server_kv *kv;
  kolo_server_store *store;
  kolo_server_leader *leader;
  kolo_server_metrics *metrics;
  kolo_server_grpc *grpc;
  kolo_server_http *http;
  kolo_server_logs *logs;
  kolo_sched *sched; /* scheduling runs while this replica leads */
  /* guards sched for /metrics, which is served until after the scheduler stops */
  pthread_mutex_t sched_lock;
  kolo_server_recorder *recorder;  /* metrics history, written while this replica leads */
  kolo_server_blob_sweeper *blobs; /* deletes the blobs of ended jobs (every replica) */
} server;

/* Reads a whole (small) file; NULL with errno on failure. */
static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = (len + 4096 + 1) * 2;
      char *grown = realloc(buf, cap);
      if (grown == NULL) break;
      buf = grown;
    }
    size_t n = fread(buf + len, 1, 4096, f);
    len += n;
    if (n < 4096) break;
  }
  fclose(f);
  if (buf) buf[len] = '\0';
  return buf;
}

static int backend_ok(void *arg) {
  server *s = arg;
  return s->kv->ops->healthy(s->kv);
}

static int leader_of(void *arg, char *name, size_t len, int *is_me) {
  server *s = arg;
  if (s->leader == NULL) {
    /* --etcd none: a single replica that leads itself. */
    snprintf(name, len, "%s", s->opts.name);
    *is_me = 1;
    return 1;
  }
  return kolo_server_leader_get(s->leader, name, len, is_me);
}

static int write_port_file(const char *path, int grpc_port, int http_port) {
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (f == NULL) return -1;
  fprintf(f, "grpc_port=%d\nhttp_port=%d\npid=%d\n", grpc_port, http_port, (int)getpid());
  if (fclose(f) != 0) return -1;
  return rename(tmp, path);
}

/* The scheduler and the metrics recorder ask through this whether this replica leads (and for the
 * fence). */
static kolo_status leader_fence(void *arg, char *key, size_t len, int64_t *revision) {
  return kolo_server_leader_fence(arg, key, len, revision);
}

/* ---- the scheduler reads the store's watch-fed records (no etcd read of its own) ---- */

static kolo_status read_records(void *arg, int64_t min_revision, int timeout_ms,
                                kolo_sched_records *out) {
  kolo_etcd_range_result sets[4];
  /* ended jobs left out: a pass's cost does not grow with them (store.h) */
  kolo_status rc = kolo_server_store_read_live_records(
      arg, kolo_sched_record_prefixes, 4, min_revision, timeout_ms, sets, &out->revision,
      &out->reloads, &out->waited_us);
  out->workers = sets[0];
  out->assigns = sets[1];
  out->drains = sets[2];
  out->jobs = sets[3];
  return rc;
}

static void records_changed(void *arg) {
  kolo_sched_notify(arg);
}

/* ---- /metrics: what this process asks of etcd ---- */

static void add_handle(char **text, const char *name, const kolo_etcd *h, int whole) {
  kolo_etcd_stats st;
  kolo_etcd_stats_get(h, whole, &st);
  for (int k = 0; k < KOLO_ETCD_REQUEST_KINDS; k++) {
    if (st.requests[k] == 0) continue;
    char *more = NULL;
    if (asprintf(&more, "%skolo_etcd_requests_total{handle=\"%s\",kind=\"%s\"} %" PRIu64 "\n",
                 *text, name, kolo_etcd_request_kind_name((kolo_etcd_request_kind)k),
                 st.requests[k]) < 0)
      return;
    free(*text);
    *text = more;
  }
  char *more = NULL;
  if (asprintf(&more, "%skolo_etcd_watches{handle=\"%s\"} %d\n", *text, name, st.watches_running) <
      0)
    return;
  free(*text);
  *text = more;
}

/* Appends a Prometheus histogram (and the max as a gauge) to *text. */
static void add_timing(char **text, const char *name, const char *help,
                       const kolo_sched_timing *t) {
  char *more = NULL;
  if (asprintf(&more, "%s# HELP %s %s\n# TYPE %s histogram\n", *text, name, help, name) < 0) return;
  free(*text);
  *text = more;
  for (int i = 0; i <= KOLO_SCHED_PASS_BUCKET_COUNT; i++) {
    char le[32];
    if (i < KOLO_SCHED_PASS_BUCKET_COUNT)
      snprintf(le, sizeof le, "%g", kolo_sched_pass_bucket_bounds[i]);
    else
      snprintf(le, sizeof le, "+Inf");
    if (asprintf(&more, "%s%s_bucket{le=\"%s\"} %" PRIu64 "\n", *text, name, le, t->buckets[i]) < 0)
      return;
    free(*text);
    *text = more;
  }
  if (asprintf(&more, "%s%s_sum %.9f\n%s_count %" PRIu64 "\n# TYPE %s_max gauge\n%s_max %.9f\n",
               *text, name, t->sum_s, name, t->count, name, name, t->max_s) < 0)
    return;
  free(*text);
  *text = more;
}

static char *etcd_metrics(void *arg) {
  server *s = arg;
  if (s->etcd == NULL) return NULL;
  kolo_etcd_stats all;
  kolo_etcd_stats_get(s->etcd, 1, &all);
  char *text = NULL;
  if (asprintf(&text,
               "# HELP kolo_etcd_clients etcd clients (connection pools) this process holds.\n"
               "# TYPE kolo_etcd_clients gauge\nkolo_etcd_clients 1\n"
               "# HELP kolo_etcd_handles Handles sharing that client (its own and its users').\n"
               "# TYPE kolo_etcd_handles gauge\nkolo_etcd_handles %d\n"
               "# HELP kolo_etcd_requests_total Unary etcd requests sent, by user and kind.\n"
               "# TYPE kolo_etcd_requests_total counter\n"
               "# HELP kolo_etcd_watches etcd watches running, by user.\n"
               "# TYPE kolo_etcd_watches gauge\n",
               all.handles) < 0)
    return NULL;
  add_handle(&text, "all", s->etcd, 1);
  if (s->kv_on_etcd) add_handle(&text, "store", kolo_server_kv_etcd_handle(s->kv), 0);
  if (s->leader) add_handle(&text, "leader", kolo_server_leader_etcd(s->leader), 0);
  pthread_mutex_lock(&s->sched_lock);
  if (s->sched) {
    add_handle(&text, "scheduler", kolo_sched_etcd(s->sched), 0);
    char *more = NULL;
    if (asprintf(&more,
                 "%s# HELP kolo_scheduler_passes_total Scheduler passes run (while leading).\n"
                 "# TYPE kolo_scheduler_passes_total counter\nkolo_scheduler_passes_total %" PRIu64
                 "\n",
                 text, kolo_sched_passes(s->sched)) >= 0) {
      free(text);
      text = more;
    }
    kolo_sched_timing pass, snapshot;
    kolo_sched_pass_timing(s->sched, &pass, &snapshot);
    add_timing(&text, "kolo_scheduler_pass_seconds",
               "Scheduler passes: copy and decode the records, decide, write (not the wait for the "
               "view to show the last write).",
               &pass);
    add_timing(&text, "kolo_scheduler_snapshot_seconds",
               "The snapshot part of each pass: copy the records, decode them.", &snapshot);
  }
  pthread_mutex_unlock(&s->sched_lock);
  return text;
}

static void teardown(server *s) {
  if (s->store)
    kolo_server_store_set_records_fn(s->store, NULL, NULL); /* before the scheduler goes */
  pthread_mutex_lock(&s->sched_lock);
  kolo_sched *sched = s->sched;
  s->sched = NULL;
  pthread_mutex_unlock(&s->sched_lock);
  kolo_sched_stop(sched);
  kolo_server_recorder_stop(s->recorder);
  kolo_server_blob_sweeper_stop(s->blobs);
  if (s->grpc) kolo_server_grpc_stop(s->grpc, s->opts.grace_ms);
  kolo_server_http_stop(s->http);
  kolo_server_logs_destroy(s->logs); /* every stream was closed with its call */
  kolo_server_leader_stop(s->leader);
  kolo_server_store_destroy(s->store);
  if (s->kv) s->kv->ops->destroy(s->kv);
  kolo_etcd_destroy(s->etcd); /* after every user of it */
  kolo_server_etcd_child_stop(s->etcd_child);
  kolo_server_metrics_destroy(s->metrics);
  free(s->tls_cert);
  free(s->tls_key);
  free(s->token);
  pthread_mutex_destroy(&s->sched_lock);
}

int main(int argc, char **argv) {
  server s;
  memset(&s, 0, sizeof s);
  pthread_mutex_init(&s.sched_lock, NULL);
  char err[512];
  kolo_status rc = kolo_server_options_parse(argc, argv, &s.opts, err, sizeof err);
  if (rc == KOLO_ERR_ABORTED) return 0;
  if (rc != KOLO_OK) {
    fprintf(stderr, "kolo-server: %s\n", err);
    kolo_server_options_usage(stderr);
    return 2;
  }
  if (s.opts.log_level[0]) {
    const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
      if (strcmp(s.opts.log_level, names[i]) == 0) kolo_log_set_level((kolo_log_level)i);
  }
  /* Block the stop signals before any thread exists (gRPC's included); main sigwaits. */
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
  signal(SIGPIPE, SIG_IGN);

  int exit_code = 1;
  if (s.opts.tls_cert[0]) {
    s.tls_cert = read_file(s.opts.tls_cert);
    s.tls_key = read_file(s.opts.tls_key);
    if (s.tls_cert == NULL || s.tls_key == NULL) {
      KOLO_LOGE(LOG, "cannot read --tls-cert/--tls-key: %s", strerror(errno));
      goto out;
    }
  }
  if (s.opts.token_file[0]) {
    s.token = read_file(s.opts.token_file);
    if (s.token == NULL) {
      KOLO_LOGE(LOG, "cannot read --token-file %s: %s", s.opts.token_file, strerror(errno));
      goto out;
    }
    const char *token = NULL;
    if (kolo_server_token_parse(s.token, &token, err, sizeof err) != KOLO_OK) {
      KOLO_LOGE(LOG, "--token-file %s: %s", s.opts.token_file, err);
      goto out;
    }
    memmove(s.token, token, strlen(token) + 1);
  }
  const char *endpoints = s.opts.etcd;
  /* one etcd access for every client of this binary (parsed with the options); the
   * private etcd child is plain HTTP on its own unix socket (etcd_child.h) */
  const kolo_etcd_access *access = &s.opts.etcd_access;
  if (strcmp(s.opts.etcd, "none") == 0) {
    rc = kolo_server_kv_mem_create(&s.kv);
    KOLO_LOGW(LOG, "--etcd none: jobs live in memory only and are lost on exit");
  } else {
    if (strcmp(s.opts.etcd, "auto") == 0) {
      rc = kolo_server_etcd_child_start(s.opts.data_dir, 30000, &s.etcd_child);
      if (rc != KOLO_OK) {
        KOLO_LOGE(LOG, "cannot start a private etcd: %s", kolo_strerror(rc));
        goto out;
      }
      endpoints = kolo_server_etcd_child_url(s.etcd_child);
      rc = kolo_etcd_access_set_endpoints(&s.child_access, endpoints, err, sizeof err);
      if (rc != KOLO_OK) {
        KOLO_LOGE(LOG, "private etcd: %s", err);
        goto out;
      }
      access = &s.child_access;
    }
    /* one client for the whole binary: store, leader and scheduler share its connections */
    rc = kolo_etcd_access_connect(access, NULL, &s.etcd);
    if (rc == KOLO_OK) rc = kolo_server_kv_etcd_create(s.etcd, &s.kv);
    s.kv_on_etcd = rc == KOLO_OK;
  }
  if (rc != KOLO_OK) {
    KOLO_LOGE(LOG, "job store backend: %s", kolo_strerror(rc));
    goto out;
  }
  /* etcd may come up after us (a pod starting next to it): retry the first load for a
   * while, still answering SIGTERM at once. */
  for (int attempt = 1;; attempt++) {
    rc = kolo_server_store_create(s.kv, &s.store);
    if (rc == KOLO_OK) break;
    if (attempt >= STARTUP_ATTEMPTS) {
      KOLO_LOGE(LOG, "cannot load jobs from etcd at %s: %s; giving up", endpoints,
                kolo_strerror(rc));
      goto out;
    }
    if (attempt == 1)
      KOLO_LOGW(LOG, "etcd at %s not answering (%s); retrying for %d s", endpoints,
                kolo_strerror(rc), STARTUP_ATTEMPTS / 2);
    struct timespec pause = {0, 500 * 1000000L};
    if (sigtimedwait(&stop_signals, NULL, &pause) > 0) {
      KOLO_LOGI(LOG, "stopped before etcd answered");
      exit_code = 0;
      goto out;
    }
  }
  if (s.etcd_child || strcmp(s.opts.etcd, "none") != 0) {
    rc = kolo_server_leader_start(s.etcd, s.opts.name, s.opts.leader_ttl_s, &s.leader);
    if (rc != KOLO_OK) {
      KOLO_LOGE(LOG, "leader election: %s", kolo_strerror(rc));
      goto out;
    }
    /* the scheduler's passes read the store's watch-fed records: the store's watch is the
     * only one this process holds on /kolo/v1/ */
    kolo_sched_config sc = {leader_fence, s.leader, 0, s.etcd, read_records, s.store};
    kolo_sched *sched = NULL;
    if (kolo_sched_start(&sc, &sched) != KOLO_OK) goto out;
    pthread_mutex_lock(&s.sched_lock);
    s.sched = sched;
    pthread_mutex_unlock(&s.sched_lock);
    kolo_server_store_set_records_fn(s.store, records_changed, sched);
  }
  kolo_server_recorder_config rc_cfg = {s.store,
                                        s.kv,
                                        s.leader ? leader_fence : NULL,
                                        s.leader,
                                        (size_t)s.opts.metrics_points,
                                        s.opts.metrics_interval_ms,
                                        0};
  if (kolo_server_recorder_start(&rc_cfg, &s.recorder) != KOLO_OK) goto out;
  kolo_server_blob_set_limit(s.opts.max_blob_bytes);
  if (kolo_server_blob_sweeper_start(s.store, 0, &s.blobs) != KOLO_OK) goto out;
  if (kolo_server_metrics_create(&s.metrics) != KOLO_OK) goto out;
  kolo_server_metrics_set_extra(s.metrics, etcd_metrics, &s);
  kolo_server_logs_config lc = {s.store, s.opts.max_log_streams, 0, 0};
  if (kolo_server_logs_create(&lc, &s.logs) != KOLO_OK) goto out;

  int grpc_port = 0, http_port = 0;
  kolo_server_grpc_config gc = {
      s.opts.grpc_listen, s.tls_cert, s.tls_key, s.token, s.opts.max_message_bytes,
      s.opts.threads,     s.store,    s.metrics, s.logs};
  rc = kolo_server_grpc_start(&gc, &s.grpc, &grpc_port);
  if (rc != KOLO_OK) {
    KOLO_LOGE(LOG, "gRPC on %s: %s", s.opts.grpc_listen, kolo_strerror(rc));
    goto out;
  }
  if (strcmp(s.opts.http_listen, "off") != 0) {
    kolo_server_http_config hc = {s.opts.http_listen,
                                  s.tls_cert,
                                  s.tls_key,
                                  s.token,
                                  s.opts.max_message_bytes,
                                  s.opts.http_threads,
                                  s.store,
                                  s.metrics,
                                  {&s, backend_ok, leader_of},
                                  s.logs,
                                  s.opts.http_allowed_hosts};
    rc = kolo_server_http_start(&hc, &s.http, &http_port);
    if (rc != KOLO_OK) {
      KOLO_LOGE(LOG, "HTTP on %s: %s", s.opts.http_listen, kolo_strerror(rc));
      goto out;
    }
  }
  KOLO_LOGI(LOG, "kolo-server %s ready: grpc_port=%d http_port=%d etcd=%s tls=%s auth=%s",
            s.opts.name, grpc_port, http_port, endpoints, s.tls_cert ? "on" : "off",
            s.token ? "token" : "off");
  if (s.opts.port_file[0] && write_port_file(s.opts.port_file, grpc_port, http_port) != 0) {
    KOLO_LOGE(LOG, "cannot write --port-file %s: %s", s.opts.port_file, strerror(errno));
    goto out;
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  KOLO_LOGI(LOG, "%s: draining calls in flight (up to %d ms) and stopping", strsignal(sig),
            s.opts.grace_ms);
  exit_code = 0;
out:
  teardown(&s);
  if (exit_code == 0) KOLO_LOGI(LOG, "stopped");
  return exit_code;
}
