/* Implementation of health.h over libmicrohttpd (as kolo-server's HTTP API). */
#define _GNU_SOURCE
#include "worker/agent/health.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

#define LOG "agent"
/* Connections at once (one poll loop: an idle one costs a descriptor and a few KiB), and from
 * one address: strangers holding idle connections from one address leave the probes room. */
#define HEALTH_CONNECTIONS 1024
#define HEALTH_PER_CLIENT 128

struct kolo_agent_health {
  struct MHD_Daemon *daemon;
  pthread_mutex_t lock;
  kolo_agent_health_state state;
};

char *kolo_agent_health_readyz_json(const kolo_agent_health_state *s) {
  json_t *o =
      json_pack("{s:b, s:s, s:b, s:s, s:s, s:I}", "ready", s->registered, "id", s->id, "registered",
                s->registered, "state", s->state, "job", s->job, "epoch", (json_int_t)s->epoch);
  char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return text;
}

/* Appends one gauge or counter with its HELP and TYPE lines. */
static void metric(FILE *out, const char *name, const char *type, const char *help,
                   const char *labels, double value) {
  fprintf(out, "# HELP %s %s\n# TYPE %s %s\n%s%s %.17g\n", name, help, name, type, name, labels,
          value);
}

/* A label value with \, " and newlines escaped as the text format wants. */
static void escaped(FILE *out, const char *value) {
  for (const char *p = value; *p; p++) {
    if (*p == '\\' || *p == '"') fputc('\\', out);
    if (*p == '\n') {
      fputs("\\n", out);
      continue;
    }
    fputc(*p, out);
  }
}

char *kolo_agent_health_metrics_text(const kolo_agent_health_state *s) {
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  if (out == NULL) return NULL;
  metric(out, "kolo_worker_registered", "gauge",
         "1 while the worker holds its registration lease in etcd.", "", s->registered);
  static const char *const states[] = {"idle", "busy", "draining"};
  fprintf(out,
          "# HELP kolo_worker_state The worker's state (1 for the current one).\n"
          "# TYPE kolo_worker_state gauge\n");
  for (size_t i = 0; i < 3; i++)
    fprintf(out, "kolo_worker_state{state=\"%s\"} %d\n", states[i],
            strcmp(s->state, states[i]) == 0);
  fprintf(out,
          "# HELP kolo_worker_job The job the worker runs (1 while assigned).\n# TYPE "
          "kolo_worker_job gauge\n");
  if (s->job[0]) {
    fputs("kolo_worker_job{job=\"", out);
    escaped(out, s->job);
    fprintf(out, "\"} 1\n");
  }
  metric(out, "kolo_worker_epoch", "gauge",
         "Ring epoch of the job's newest ring (0 without a job).", "", (double)s->epoch);
  metric(out, "kolo_worker_process_running", "gauge", "1 while a training process runs.", "",
         s->process_running);
  if (s->has_progress) {
    metric(out, "kolo_worker_step", "gauge", "Last step the training process reported.", "",
           s->step);
    metric(out, "kolo_worker_total_steps", "gauge",
           "Steps the whole run takes, as the process reported.", "", s->total_steps);
    metric(out, "kolo_worker_loss", "gauge", "Last training loss the process reported.", "",
           s->loss);
    metric(out, "kolo_worker_samples_per_second", "gauge",
           "Training throughput the process reported.", "", s->samples_per_sec);
  }
  metric(out, "kolo_worker_registrations_total", "counter",
         "Registrations in etcd (more than 1: a lease was lost).", "", (double)s->registrations);
  metric(out, "kolo_worker_leases_lost_total", "counter", "Registration leases lost.", "",
         (double)s->leases_lost);
  metric(out, "kolo_worker_fenced", "gauge",
         "1 while the process is held (HOLD or SIGSTOP) because no lease renewal was acknowledged "
         "for a TTL.",
         "", s->fenced);
  metric(out, "kolo_worker_fences_total", "counter",
         "Times the process was held by the partition fence.", "", (double)s->fences);
  metric(out, "kolo_worker_processes_started_total", "counter", "Training processes started.", "",
         (double)s->processes_started);
  metric(out, "kolo_worker_processes_failed_total", "counter",
         "Training processes that exited non-zero.", "", (double)s->processes_failed);
  metric(out, "kolo_worker_rings_sent_total", "counter",
         "Ring epochs forwarded to a training process.", "", (double)s->rings_sent);
  metric(out, "kolo_worker_reports_written_total", "counter", "Reports written to etcd.", "",
         (double)s->reports_written);
  metric(out, "kolo_worker_report_errors_total", "counter", "Reports etcd did not take (retried).",
         "", (double)s->report_errors);
  fclose(out);
  return buf;
}

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status, const char *type,
                              char *body) {
  const char *text =
      body ? body : "{\"error\":{\"code\":\"INTERNAL\",\"message\":\"out of memory\"}}";
  struct MHD_Response *resp = MHD_create_response_from_buffer(
      strlen(text), (void *)text, body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (resp == NULL) {
    free(body);
    return MHD_NO;
  }
  MHD_add_response_header(resp, "Content-Type", type);
  enum MHD_Result ret = MHD_queue_response(conn, body ? status : 500, resp);
  MHD_destroy_response(resp);
  return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  kolo_agent_health *h = cls;
  (void)version, (void)upload;
  if (*con_cls == NULL) { /* first call: headers only */
    *con_cls = h;
    return MHD_YES;
  }
  if (*upload_size > 0) { /* no route takes a body: discard it */
    *upload_size = 0;
    return MHD_YES;
  }
  kolo_agent_health_state s;
  pthread_mutex_lock(&h->lock);
  s = h->state;
  pthread_mutex_unlock(&h->lock);
  int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
  const char *json = "application/json";
  if (get && strcmp(url, "/healthz") == 0)
    return answer(conn, 200, json, strdup("{\"status\":\"ok\"}"));
  if (get && strcmp(url, "/readyz") == 0)
    return answer(conn, s.registered ? 200 : 503, json, kolo_agent_health_readyz_json(&s));
  if (get && strcmp(url, "/metrics") == 0)
    return answer(conn, 200, "text/plain; version=0.0.4", kolo_agent_health_metrics_text(&s));
  int known =
      strcmp(url, "/healthz") == 0 || strcmp(url, "/readyz") == 0 || strcmp(url, "/metrics") == 0;
  json_t *o =
      json_pack("{s:{s:s, s:s+}}", "error", "code", known ? "METHOD_NOT_ALLOWED" : "NOT_FOUND",
                "message", known ? "only GET: " : "no route: ", url);
  char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return answer(conn, known ? 405 : 404, json, text);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  char line[512];
  (void)cls;
  vsnprintf(line, sizeof line, fmt, ap);
  line[strcspn(line, "\n")] = '\0';
  KOLO_LOGD(LOG, "libmicrohttpd: %s", line);
}

static int parse_listen(const char *listen, struct sockaddr_in *addr) {
  memset(addr, 0, sizeof *addr);
  addr->sin_family = AF_INET;
  const char *colon = listen ? strrchr(listen, ':') : NULL;
  char host[64];
  if (colon == NULL || (size_t)(colon - listen) >= sizeof host) return -1;
  memcpy(host, listen, (size_t)(colon - listen));
  host[colon - listen] = '\0';
  char *end = NULL;
  long port = strtol(colon + 1, &end, 10);
  if (colon[1] == '\0' || *end != '\0' || port < 0 || port > 65535) return -1;
  if (host[0] == '\0' || strcmp(host, "0.0.0.0") == 0)
    addr->sin_addr.s_addr = htonl(INADDR_ANY);
  else if (strcmp(host, "localhost") == 0)
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  else if (inet_pton(AF_INET, host, &addr->sin_addr) != 1)
    return -1;
  addr->sin_port = htons((uint16_t)port);
  return 0;
}

kolo_status kolo_agent_health_start(const char *listen, kolo_agent_health **out, int *bound_port) {
  struct sockaddr_in addr;
  if (parse_listen(listen, &addr) != 0) return KOLO_ERR_ADDRESS;
  kolo_agent_health *h = calloc(1, sizeof *h);
  if (h == NULL) return KOLO_ERR_NO_MEMORY;
  pthread_mutex_init(&h->lock, NULL);
  h->daemon = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request,
      h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT,
      (unsigned)HEALTH_CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)HEALTH_PER_CLIENT,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
      MHD_OPTION_END);
  if (h->daemon == NULL) {
    pthread_mutex_destroy(&h->lock);
    free(h);
    return KOLO_ERR_ADDRESS;
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
  if (bound_port) *bound_port = info ? (int)info->port : (int)ntohs(addr.sin_port);
  *out = h;
  return KOLO_OK;
}

void kolo_agent_health_publish(kolo_agent_health *h, const kolo_agent_health_state *state) {
  if (h == NULL || state == NULL) return;
  pthread_mutex_lock(&h->lock);
  h->state = *state;
  pthread_mutex_unlock(&h->lock);
}

void kolo_agent_health_stop(kolo_agent_health *h) {
  if (h == NULL) return;
  MHD_stop_daemon(h->daemon);
  pthread_mutex_destroy(&h->lock);
  free(h);
}
