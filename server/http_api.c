/* Implementation of http_api.h: libmicrohttpd callbacks, request limits and each
 * route's I/O; which route a request names and how its query arguments read are
 * http_route.c's pure rules. */
#include "server/http_api.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "common/log.h"
#include "kolo/v1/cluster.pb-c.h"
#include "kolo/v1/job.pb-c.h"
#include "server/http_frame.h"
#include "server/http_front.h"
#include "server/http_guard.h"
#include "server/http_route.h"
#include "server/http_stream.h"
#include "codec/codec.h"
#include "server/pb_check.h"
#include "server/service.h"
#include "server/ui.h"

#define LOG "http"

typedef struct http_logs http_logs;

struct kolo_server_http {
  kolo_server_http_config cfg;
  struct MHD_Daemon *daemon;
  kolo_server_http_front *front;  /* owns the listening socket (plain HTTP) */
  kolo_server_stream_hub *events; /* GET /v1/stream */
  pthread_mutex_t lock;           /* the open log streams */
  http_logs *streams;
  size_t body_budget; /* request body bytes held at once, all requests together */
  size_t body_bytes;  /* held now (under lock) */
};

/* One GET /v1/jobs/<id>/logs answer: a log stream read by a content-reader callback that
 * suspends the connection while no line is ready and is resumed by the stream. */
struct http_logs {
  kolo_server_http *h;
  struct MHD_Connection *conn;
  kolo_server_logstream *stream;
  pthread_mutex_t lock;
  int suspended, shutdown;
  struct timespec started;
  http_logs *prev, *next;
};

/* Per-request state, made by on_uri from the raw request line: the body collected so far
 * and what the raw URL said before libmicrohttpd unescaped it. */
typedef struct request {
  char *body;
  size_t len, cap;
  size_t uri_bytes; /* the raw request URI's length */
  int too_large;
  int too_busy;   /* the server's body budget was spent: its body was dropped */
  int called;     /* on_request has seen this request once */
  int nul_escape; /* the raw URL holds %00: unescaped, it would cut the path or a value short */
  struct timespec started;
} request;

typedef struct reply {
  int status;
  char *body; /* malloc'd */
  const char *content_type;
  int method; /* for metrics */
  int grpc_code;
  http_logs *logs;                   /* set: stream this instead of body */
  const kolo_server_ui_asset *asset; /* instead of body: an embedded file (304 if not modified) */
  struct MHD_Response *stream;       /* instead of body: a server-sent event stream */
  const char *allow;                 /* 405: the route's methods, sent as Allow */
} reply;

static void reply_text(reply *r, int status, const char *content_type, char *body) {
  r->status = status;
  r->content_type = content_type;
  r->body = body;
}

static void reply_error(reply *r, kolo_status rc, const char *message) {
  int code = kolo_server_grpc_code(rc);
  json_t *obj = json_pack("{s:{s:s,s:s}}", "error", "code", kolo_server_grpc_code_name(code),
                          "message", message && message[0] ? message : kolo_strerror(rc));
  char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
  json_decref(obj);
  r->grpc_code = code;
  reply_text(r, kolo_server_http_code(rc), "application/json", text);
}

static void reply_message(reply *r, const ProtobufCMessage *msg) {
  char *text = kolo_codec_dump(msg, 0);
  if (text == NULL) {
    reply_error(r, KOLO_ERR_NO_MEMORY, NULL);
    return;
  }
  r->grpc_code = 0;
  reply_text(r, 200, "application/json", text);
}

/* Runs a unary RPC and turns its outcome into a reply. */
static void call_service(kolo_server_http *h, reply *r, kolo_server_method method,
                         const ProtobufCMessage *req) {
  char err[512];
  ProtobufCMessage *resp = NULL;
  r->method = method;
  kolo_status rc = kolo_server_service_call(h->cfg.store, method, req, &resp, err, sizeof err);
  if (rc != KOLO_OK) {
    reply_error(r, rc, err);
    return;
  }
  reply_message(r, resp);
  protobuf_c_message_free_unpacked(resp, NULL);
}

/* Decodes a POST body as message type desc (empty body = empty message). */
static kolo_status decode_body(request *req, const ProtobufCMessageDescriptor *desc,
                               ProtobufCMessage **out, char *err, size_t err_len) {
  if (req->len == 0) return kolo_codec_parse("{}", 2, desc, out, err, err_len);
  return kolo_codec_parse(req->body, req->len, desc, out, err, err_len);
}

typedef struct list_query {
  Kolo__V1__ListJobsRequest *req;
  kolo_status rc;
  char err[256];
} list_query;

typedef struct allowed_args {
  const char *names; /* space-separated */
  char *err;
  size_t err_len;
  int ok;
} allowed_args;

static enum MHD_Result check_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value) {
  allowed_args *a = cls;
  (void)kind;
  (void)value;
  if (a->ok && !kolo_server_query_allowed(a->names, key, a->err, a->err_len)) a->ok = 0;
  return MHD_YES;
}

/* Whether every query argument of the request is one of names (space-separated). */
static int only_args(struct MHD_Connection *conn, const char *names, char *err, size_t err_len) {
  allowed_args a = {names, err, err_len, 1};
  MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, check_arg, &a);
  return a.ok;
}

/* Query arguments of GET /v1/jobs (http_route.c); the first refusal wins. */
static enum MHD_Result list_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value) {
  list_query *q = cls;
  (void)kind;
  if (q->rc == KOLO_OK)
    q->rc = kolo_server_query_list_jobs(q->req, key, value, q->err, sizeof q->err);
  return MHD_YES;
}

static void route_list(kolo_server_http *h, struct MHD_Connection *conn, reply *r) {
  Kolo__V1__ListJobsRequest *req = malloc(sizeof *req);
  if (req == NULL) return reply_error(r, KOLO_ERR_NO_MEMORY, NULL);
  kolo__v1__list_jobs_request__init(req);
  list_query q = {req, KOLO_OK, ""};
  MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, list_arg, &q);
  r->method = KOLO_SERVER_LIST_JOBS;
  if (q.rc != KOLO_OK)
    reply_error(r, q.rc, q.err);
  else
    call_service(h, r, KOLO_SERVER_LIST_JOBS, &req->base);
  protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* GET /v1/jobs/<id>/metrics[?since_step=N] */
static void route_job_metrics(kolo_server_http *h, struct MHD_Connection *conn, const char *id,
                              reply *r) {
  Kolo__V1__GetJobMetricsRequest req = KOLO__V1__GET_JOB_METRICS_REQUEST__INIT;
  char err[256];
  r->method = KOLO_SERVER_GET_JOB_METRICS;
  if (!only_args(conn, "since_step", err, sizeof err))
    return reply_error(r, KOLO_ERR_INVALID_ARG, err);
  const char *since = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "since_step");
  if (since && kolo_server_query_since_step(since, &req.since_step, err, sizeof err) != KOLO_OK)
    return reply_error(r, KOLO_ERR_INVALID_ARG, err);
  req.id = (char *)id;
  call_service(h, r, KOLO_SERVER_GET_JOB_METRICS, &req.base);
}

static void route_readyz(kolo_server_http *h, reply *r) {
  kolo_server_health *health = &h->cfg.health;
  char leader[128] = "";
  int is_me = 0;
  int backend = health->backend_ok ? health->backend_ok(health->arg) : 1;
  int known = health->leader ? health->leader(health->arg, leader, sizeof leader, &is_me) : 1;
  json_t *obj = json_pack("{s:b,s:b,s:s,s:b,s:I}", "ready", backend && known, "etcd", backend,
                          "leader", leader, "is_leader", is_me, "revision",
                          (json_int_t)kolo_server_store_revision(h->cfg.store));
  r->grpc_code = backend && known ? 0 : 14;
  reply_text(r, backend && known ? 200 : 503, "application/json", json_dumps(obj, JSON_COMPACT));
  json_decref(obj);
}

static void route_metrics(kolo_server_http *h, reply *r) {
  uint64_t phases[7];
  kolo_server_store_count_phases(h->cfg.store, phases);
  Kolo__V1__Demand *demand = NULL;
  if (kolo_server_store_get_demand(h->cfg.store, &demand) != KOLO_OK) demand = NULL;
  int is_me = 0;
  char leader[128];
  if (h->cfg.health.leader) h->cfg.health.leader(h->cfg.health.arg, leader, sizeof leader, &is_me);
  char *base = kolo_server_metrics_render(h->cfg.metrics, phases, demand, is_me);
  if (demand) protobuf_c_message_free_unpacked(&demand->base, NULL);
  kolo_server_job_gauge *gauges = calloc(KOLO_SERVER_METRICS_MAX_JOBS, sizeof *gauges);
  size_t left_out = 0, n = 0;
  if (gauges)
    n = kolo_server_store_job_gauges(h->cfg.store, gauges, KOLO_SERVER_METRICS_MAX_JOBS, &left_out);
  char *jobs = gauges ? kolo_server_metrics_render_jobs(gauges, n, left_out) : NULL;
  free(gauges);
  char *body = NULL;
  if (base && jobs) {
    size_t a = strlen(base), b = strlen(jobs);
    body = malloc(a + b + 1);
    if (body) {
      memcpy(body, base, a);
      memcpy(body + a, jobs, b + 1);
    }
  }
  free(base);
  free(jobs);
  reply_text(r, 200, "text/plain; version=0.0.4", body);
}

/* ---- GET /v1/jobs/<id>/logs ---- */

typedef struct logs_query {
  Kolo__V1__StreamLogsRequest *req;
  uint32_t ranks[KOLO_SERVER_LOGS_MAX_RANKS];
  kolo_status rc;
  char err[160];
} logs_query;

/* Query arguments of GET /v1/jobs/<id>/logs (http_route.c); the first refusal wins. */
static enum MHD_Result logs_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value) {
  logs_query *q = cls;
  (void)kind;
  if (q->rc == KOLO_OK)
    q->rc = kolo_server_query_logs(q->req, q->ranks, KOLO_SERVER_LOGS_MAX_RANKS, key, value, q->err,
                                   sizeof q->err);
  return MHD_YES;
}

static void logs_notify(void *arg) {
  http_logs *hl = arg;
  pthread_mutex_lock(&hl->lock);
  if (hl->suspended) {
    hl->suspended = 0;
    MHD_resume_connection(hl->conn);
  }
  pthread_mutex_unlock(&hl->lock);
}

static ssize_t logs_read(void *cls, uint64_t pos, char *buf, size_t max) {
  http_logs *hl = cls;
  (void)pos;
  pthread_mutex_lock(&hl->lock);
  if (hl->shutdown) {
    pthread_mutex_unlock(&hl->lock);
    return MHD_CONTENT_READER_END_WITH_ERROR;
  }
  size_t n = 0;
  kolo_server_logstream_state state = kolo_server_logstream_take_text(hl->stream, buf, max, &n);
  ssize_t ret = (ssize_t)n;
  if (state == KOLO_SERVER_LOGS_END)
    ret = kolo_server_logstream_end_status(hl->stream, NULL, 0) == KOLO_OK
              ? MHD_CONTENT_READER_END_OF_STREAM
              : MHD_CONTENT_READER_END_WITH_ERROR;
  if (state == KOLO_SERVER_LOGS_EMPTY) {
    /* nothing now: the stream's notify resumes us */
    hl->suspended = 1;
    MHD_suspend_connection(hl->conn);
    ret = 0;
  }
  pthread_mutex_unlock(&hl->lock);
  return ret;
}

static void logs_free(void *cls) {
  http_logs *hl = cls;
  kolo_server_http *h = hl->h;
  kolo_server_logstream_close(hl->stream); /* no notify after this */
  pthread_mutex_lock(&h->lock);
  if (hl->prev)
    hl->prev->next = hl->next;
  else
    h->streams = hl->next;
  if (hl->next) hl->next->prev = hl->prev;
  pthread_mutex_unlock(&h->lock);
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  double seconds =
      (double)(now.tv_sec - hl->started.tv_sec) + (double)(now.tv_nsec - hl->started.tv_nsec) / 1e9;
  kolo_server_metrics_observe(h->cfg.metrics, KOLO_SERVER_API_HTTP, KOLO_SERVER_STREAM_LOGS, 0,
                              seconds);
  pthread_mutex_destroy(&hl->lock);
  free(hl);
}

static void route_logs(kolo_server_http *h, struct MHD_Connection *conn, const char *id, reply *r) {
  char err[256];
  r->method = KOLO_SERVER_STREAM_LOGS;
  Kolo__V1__StreamLogsRequest req = KOLO__V1__STREAM_LOGS_REQUEST__INIT;
  logs_query q = {&req, {0}, KOLO_OK, ""};
  req.id = (char *)id;
  req.ranks = q.ranks;
  MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, logs_arg, &q);
  if (q.rc != KOLO_OK) return reply_error(r, q.rc, q.err);
  if (h->cfg.logs == NULL) return reply_error(r, KOLO_ERR_UNSUPPORTED, "logs are not served here");
  http_logs *hl = calloc(1, sizeof *hl);
  if (hl == NULL) return reply_error(r, KOLO_ERR_NO_MEMORY, NULL);
  hl->h = h;
  hl->conn = conn;
  pthread_mutex_init(&hl->lock, NULL);
  clock_gettime(CLOCK_MONOTONIC, &hl->started);
  /* the stream may notify at once: the connection is not suspended yet, so that is a no-op */
  kolo_status rc =
      kolo_server_logstream_open(h->cfg.logs, &req, logs_notify, hl, &hl->stream, err, sizeof err);
  if (rc != KOLO_OK) {
    pthread_mutex_destroy(&hl->lock);
    free(hl);
    return reply_error(r, rc, err);
  }
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (info) kolo_server_logstream_watch_fd(hl->stream, info->connect_fd);
  pthread_mutex_lock(&h->lock);
  hl->next = h->streams;
  if (h->streams) h->streams->prev = hl;
  h->streams = hl;
  pthread_mutex_unlock(&h->lock);
  r->logs = hl;
  r->status = 200;
  r->grpc_code = 0;
}

/* GET /, /ui/...: the dashboard's files; never need the token (they hold no data). */
static int route_ui(struct MHD_Connection *conn, const char *url, reply *r) {
  if (strcmp(url, "/") != 0 && strcmp(url, "/ui") != 0 && strncmp(url, "/ui/", 4) != 0) return 0;
  const kolo_server_ui_asset *asset = kolo_server_ui_find(url);
  if (asset == NULL) return 0; /* the generic 404 */
  const char *match = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "If-None-Match");
  r->asset = asset;
  r->grpc_code = 0;
  r->status = match && strcmp(match, asset->etag) == 0 ? 304 : 200;
  r->content_type = kolo_server_ui_content_type(asset->path);
  return 1;
}

/* Parses a yes/no query argument ("1", "true", "0", "false"). */
static int flag_arg(struct MHD_Connection *conn, const char *name, int *out, char *err,
                    size_t err_len) {
  const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
  return kolo_server_query_flag(name, v, out, err, err_len) == KOLO_OK;
}

/* GET /v1/stream?jobs=1&workers=1&job=<id>: server-sent events (http_stream.h). */
static void route_stream(kolo_server_http *h, struct MHD_Connection *conn, reply *r) {
  char err[256];
  kolo_server_stream_topics topics;
  memset(&topics, 0, sizeof topics);
  if (!only_args(conn, "jobs workers job", err, sizeof err) ||
      !flag_arg(conn, "jobs", &topics.jobs, err, sizeof err) ||
      !flag_arg(conn, "workers", &topics.workers, err, sizeof err))
    return reply_error(r, KOLO_ERR_INVALID_ARG, err);
  const char *job = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "job");
  if (job) {
    kolo_status rc = kolo_server_service_check_id(job, err, sizeof err);
    if (rc != KOLO_OK) return reply_error(r, rc, err);
    snprintf(topics.job, sizeof topics.job, "%s", job);
  }
  if (!topics.jobs && !topics.workers && !topics.job[0])
    return reply_error(r, KOLO_ERR_INVALID_ARG,
                       "stream: name at least one of jobs=1, workers=1, job=<id>");
  kolo_status rc = kolo_server_stream_open(h->events, conn, &topics, &r->stream);
  if (rc == KOLO_ERR_UNAVAILABLE)
    return reply_error(r, rc, "too many open streams; try again later");
  if (rc != KOLO_OK) return reply_error(r, rc, NULL);
  r->status = 200;
  r->grpc_code = 0;
}

/* GET /v1/jobs/<id>/events: the job's event log. */
static void route_events(kolo_server_http *h, const char *id, reply *r) {
  char err[256];
  Kolo__V1__Job *job = NULL;
  r->method = KOLO_SERVER_GET_JOB;
  kolo_status rc = kolo_server_service_check_id(id, err, sizeof err);
  if (rc == KOLO_OK) rc = kolo_server_store_get(h->cfg.store, id, &job);
  if (rc == KOLO_ERR_NOT_FOUND) snprintf(err, sizeof err, "no job %.100s", id);
  if (rc != KOLO_OK) return reply_error(r, rc, err);
  json_t *obj = kolo_codec_to_json(&job->base);
  json_t *out = json_pack("{s:s,s:O}", "id", job->id, "events", json_object_get(obj, "events"));
  r->grpc_code = 0;
  reply_text(r, 200, "application/json", json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER));
  json_decref(out);
  json_decref(obj);
  protobuf_c_message_free_unpacked(&job->base, NULL);
}

/* GET /v1/jobs/<id>: the view keeps every job's JSON ready (the hot path). */
static void route_get_job(kolo_server_http *h, const char *id, reply *r) {
  char err[256];
  char *json = NULL;
  r->method = KOLO_SERVER_GET_JOB;
  kolo_status rc = kolo_server_service_check_id(id, err, sizeof err);
  if (rc == KOLO_OK) rc = kolo_server_store_get_json(h->cfg.store, id, &json);
  if (rc == KOLO_ERR_NOT_FOUND) snprintf(err, sizeof err, "no job %.100s", id);
  if (rc != KOLO_OK) return reply_error(r, rc, err);
  r->grpc_code = 0;
  reply_text(r, 200, "application/json", json);
}

/* POST /v1/jobs (a JobSpec body), /v1/jobs/<id>:cancel and :scale (the id in the path
 * wins over one in the body). */
static void route_body(kolo_server_http *h, request *req, const kolo_server_route *m, reply *r) {
  char err[512];
  int submit = m->kind == KOLO_ROUTE_SUBMIT_JOB, cancel = m->kind == KOLO_ROUTE_CANCEL_JOB,
      blob = m->kind == KOLO_ROUTE_PUT_JOB_BLOB;
  const ProtobufCMessageDescriptor *desc = submit   ? &kolo__v1__job_spec__descriptor
                                           : cancel ? &kolo__v1__cancel_job_request__descriptor
                                           : blob   ? &kolo__v1__put_job_blob_request__descriptor
                                                    : &kolo__v1__scale_job_request__descriptor;
  kolo_server_method method = submit   ? KOLO_SERVER_SUBMIT_JOB
                              : cancel ? KOLO_SERVER_CANCEL_JOB
                              : blob   ? KOLO_SERVER_PUT_JOB_BLOB
                                       : KOLO_SERVER_SCALE_JOB;
  ProtobufCMessage *msg = NULL;
  r->method = method;
  kolo_status rc = decode_body(req, desc, &msg, err, sizeof err);
  if (rc != KOLO_OK) return reply_error(r, rc, err);
  if (!submit) {
    char **id_slot = cancel ? &((Kolo__V1__CancelJobRequest *)msg)->id
                     : blob ? &((Kolo__V1__PutJobBlobRequest *)msg)->id
                            : &((Kolo__V1__ScaleJobRequest *)msg)->id;
    kolo_codec_set_string(id_slot, m->id);
  }
  call_service(h, r, method, msg);
  protobuf_c_message_free_unpacked(msg, NULL);
}

/* No route: 405 with Allow when only the method is wrong, else 404. */
static void route_none(const char *url, const char *method, const char *allow, reply *r) {
  char err[512];
  if (allow) {
    snprintf(err, sizeof err, "%.8s is not allowed on %.200s (allowed: %s)", method, url, allow);
    r->grpc_code = 12;
    r->allow = allow;
    json_t *obj = json_pack("{s:{s:s,s:s}}", "error", "code", "UNIMPLEMENTED", "message", err);
    reply_text(r, 405, "application/json", json_dumps(obj, JSON_COMPACT));
    json_decref(obj);
    return;
  }
  snprintf(err, sizeof err, "no route for %.8s %.200s", method, url);
  r->grpc_code = 5;
  json_t *obj = json_pack("{s:{s:s,s:s}}", "error", "code", "NOT_FOUND", "message", err);
  reply_text(r, 404, "application/json", json_dumps(obj, JSON_COMPACT));
  json_decref(obj);
}

/* The routes behind the token and the request checks. */
static void route_api(kolo_server_http *h, struct MHD_Connection *conn, const char *url,
                      const char *method, request *req, const kolo_server_route *m, reply *r) {
  switch (m->kind) {
    case KOLO_ROUTE_METRICS:
      return route_metrics(h, r);
    case KOLO_ROUTE_STREAM:
      return route_stream(h, conn, r);
    case KOLO_ROUTE_LIST_JOBS:
      return route_list(h, conn, r);
    case KOLO_ROUTE_LIST_WORKERS: {
      Kolo__V1__ListWorkersRequest lw = KOLO__V1__LIST_WORKERS_REQUEST__INIT;
      return call_service(h, r, KOLO_SERVER_LIST_WORKERS, &lw.base);
    }
    case KOLO_ROUTE_DEMAND: {
      Kolo__V1__GetDemandRequest gd = KOLO__V1__GET_DEMAND_REQUEST__INIT;
      return call_service(h, r, KOLO_SERVER_GET_DEMAND, &gd.base);
    }
    case KOLO_ROUTE_DRAIN_WORKER: {
      Kolo__V1__DrainWorkerRequest dr = KOLO__V1__DRAIN_WORKER_REQUEST__INIT;
      dr.id = (char *)m->id;
      return call_service(h, r, KOLO_SERVER_DRAIN_WORKER, &dr.base);
    }
    case KOLO_ROUTE_UNDRAIN_WORKER: {
      Kolo__V1__UndrainWorkerRequest ur = KOLO__V1__UNDRAIN_WORKER_REQUEST__INIT;
      ur.id = (char *)m->id;
      return call_service(h, r, KOLO_SERVER_UNDRAIN_WORKER, &ur.base);
    }
    case KOLO_ROUTE_SUBMIT_JOB:
    case KOLO_ROUTE_CANCEL_JOB:
    case KOLO_ROUTE_PUT_JOB_BLOB:
    case KOLO_ROUTE_SCALE_JOB:
      return route_body(h, req, m, r);
    case KOLO_ROUTE_GET_JOB:
      return route_get_job(h, m->id, r);
    case KOLO_ROUTE_JOB_LOGS:
      return route_logs(h, conn, m->id, r);
    case KOLO_ROUTE_JOB_EVENTS:
      return route_events(h, m->id, r);
    case KOLO_ROUTE_JOB_METRICS:
      return route_job_metrics(h, conn, m->id, r);
    default: /* NONE, or a dashboard path without such a file (GET is allowed there: 404) */
      return route_none(url, method, m->kind == KOLO_ROUTE_NONE ? m->allow : NULL, r);
  }
}

static void route(kolo_server_http *h, struct MHD_Connection *conn, const char *url,
                  const char *method, request *req, reply *r) {
  char err[512];
  kolo_server_route m;
  kolo_server_route_match(method, url, &m);
  r->method = KOLO_SERVER_METRIC_OTHER;
  if (m.kind == KOLO_ROUTE_HEALTHZ) {
    r->grpc_code = 0;
    return reply_text(r, 200, "application/json", strdup("{\"status\":\"ok\"}"));
  }
  if (m.kind == KOLO_ROUTE_READYZ) return route_readyz(h, r);
  if (m.kind == KOLO_ROUTE_UI && !req->nul_escape && route_ui(conn, url, r)) return;
  if (h->cfg.token) {
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (!kolo_server_bearer_matches(auth, auth ? strlen(auth) : 0, h->cfg.token))
      return reply_error(r, KOLO_ERR_AUTH, "missing or wrong bearer token");
  }
  if (req->nul_escape)
    return reply_error(r, KOLO_ERR_INVALID_ARG, "the URL holds an escaped NUL byte (%00)");
  if (!kolo_server_utf8_valid(url, strlen(url)))
    return reply_error(r, KOLO_ERR_INVALID_ARG, "the URL path is not valid UTF-8");
  if (req->too_large) {
    snprintf(err, sizeof err, "request body over the %zu byte limit", h->cfg.max_message_bytes);
    return reply_error(r, KOLO_ERR_TOO_LARGE, err);
  }
  route_api(h, conn, url, method, req, &m, r);
}

/* kolo's own limits on a request's URI and headers, answered as JSON 414/431 (by the front
 * end's framer, http_frame.h, before libmicrohttpd sees the request; checked here again).
 * They sit well inside libmicrohttpd's per-connection buffer (HTTP_CONNECTION_BUFFER). */
#define HTTP_MAX_URI_BYTES KOLO_SERVER_HTTP_MAX_URI_BYTES
#define HTTP_MAX_HEADER_BYTES KOLO_SERVER_HTTP_MAX_HEADER_BYTES
#define HTTP_CONNECTION_BUFFER (128 * 1024)
#define HTTP_MAX_CONNECTIONS 4096 /* clients at once (the front end's limit) */

static enum MHD_Result add_header_bytes(void *cls, enum MHD_ValueKind kind, const char *key,
                                        const char *value) {
  (void)kind;
  *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4; /* "key: value\r\n" */
  return MHD_YES;
}

/* Queues a JSON error answer at once (before any body is read). */
static enum MHD_Result queue_json_error(struct MHD_Connection *conn, unsigned status,
                                        const char *code, const char *message) {
  json_t *obj = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", message);
  char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
  json_decref(obj);
  if (text == NULL) return MHD_NO;
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
  if (resp == NULL) {
    free(text);
    return MHD_NO;
  }
  MHD_add_response_header(resp, "Content-Type", "application/json");
  MHD_add_response_header(resp, "Connection", "close");
  if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
  enum MHD_Result ret = MHD_queue_response(conn, status, resp);
  MHD_destroy_response(resp);
  return ret;
}

/* 414/431 as JSON for a URI or header block over kolo's limits; MHD_YES = within them. */
static enum MHD_Result check_request_size(struct MHD_Connection *conn, const request *req,
                                          int *refused) {
  char message[128];
  *refused = 1;
  if (req->uri_bytes > HTTP_MAX_URI_BYTES) {
    snprintf(message, sizeof message, "request URI of %zu bytes exceeds %d", req->uri_bytes,
             HTTP_MAX_URI_BYTES);
    return queue_json_error(conn, 414, "INVALID_ARGUMENT", message);
  }
  size_t header_bytes = 0;
  MHD_get_connection_values(conn, MHD_HEADER_KIND, add_header_bytes, &header_bytes);
  if (header_bytes > HTTP_MAX_HEADER_BYTES) {
    snprintf(message, sizeof message, "request headers of %zu bytes exceed %d", header_bytes,
             HTTP_MAX_HEADER_BYTES);
    return queue_json_error(conn, 431, "INVALID_ARGUMENT", message);
  }
  *refused = 0;
  return MHD_YES;
}

static const char *header(struct MHD_Connection *conn, const char *name) {
  return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, name);
}

/* The door, before any body byte is read: the browser rules (http_guard.h), then the token,
 * so a client without it never has a body buffered. MHD_YES with *refused = 0: come in. */
static enum MHD_Result check_door(kolo_server_http *h, struct MHD_Connection *conn, const char *url,
                                  const char *method, int *refused) {
  kolo_server_route m;
  kolo_server_route_match(method, url, &m);
  const char *length = header(conn, "Content-Length");
  kolo_server_http_guard_request g = {method,
                                      header(conn, "Host"),
                                      header(conn, "Origin"),
                                      header(conn, "Sec-Fetch-Site"),
                                      header(conn, "Content-Type"),
                                      (length && strspn(length, "0") != strlen(length)) ||
                                          header(conn, "Transfer-Encoding") != NULL};
  kolo_server_http_guard_refusal no;
  int probe = m.kind == KOLO_ROUTE_HEALTHZ || m.kind == KOLO_ROUTE_READYZ;
  *refused = 1;
  if (!kolo_server_http_guard_check(&g, h->cfg.allowed_hosts, !probe, &no)) {
    KOLO_LOGD(LOG, "refused %s %s: %s", method, url, no.message);
    return queue_json_error(conn, (unsigned)no.status, no.code, no.message);
  }
  if (h->cfg.token && !kolo_server_route_public(m.kind)) {
    const char *auth = header(conn, "Authorization");
    if (!kolo_server_bearer_matches(auth, auth ? strlen(auth) : 0, h->cfg.token))
      return queue_json_error(conn, 401, "UNAUTHENTICATED", "missing or wrong bearer token");
  }
  *refused = 0;
  return MHD_YES;
}

/* Takes n more body bytes into req, within the server's budget (else the body is dropped
 * and the request answered 503). MHD_NO: out of memory. */
static enum MHD_Result take_body(kolo_server_http *h, request *req, const char *data, size_t n) {
  if (req->too_large || req->too_busy) return MHD_YES; /* dropped as it comes */
  if (req->len + n > h->cfg.max_message_bytes) {
    req->too_large = 1;
    return MHD_YES;
  }
  pthread_mutex_lock(&h->lock);
  int fits = h->body_bytes + n <= h->body_budget;
  if (fits) h->body_bytes += n;
  pthread_mutex_unlock(&h->lock);
  if (!fits) {
    req->too_busy = 1;
    return MHD_YES;
  }
  if (req->len + n + 1 > req->cap) {
    size_t cap = (req->len + n + 1) * 2;
    if (cap > h->cfg.max_message_bytes + 1) cap = h->cfg.max_message_bytes + 1;
    char *grown = realloc(req->body, cap);
    if (grown == NULL) return MHD_NO;
    req->body = grown;
    req->cap = cap;
  }
  memcpy(req->body + req->len, data, n);
  req->len += n;
  return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
  kolo_server_http *h = cls;
  (void)version;
  request *req = *con_cls;
  if (req == NULL) return MHD_NO; /* on_uri could not allocate it */
  if (!req->called) {
    req->called = 1;
    int refused = 0;
    enum MHD_Result checked = check_request_size(conn, req, &refused);
    if (!refused) checked = check_door(h, conn, url, method, &refused);
    return refused ? checked : MHD_YES;
  }
  if (*upload_data_size > 0) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    return take_body(h, req, upload_data, n);
  }
  if (req->too_busy) {
    pthread_mutex_lock(&h->lock);
    h->body_bytes -= req->len; /* what it held goes back to the others now */
    pthread_mutex_unlock(&h->lock);
    req->len = 0;
    return queue_json_error(conn, 503, "UNAVAILABLE",
                            "the server holds too many request bodies now; try again later");
  }
  reply r = {500, NULL, "application/json", KOLO_SERVER_METRIC_OTHER, 13, NULL, NULL, NULL, NULL};
  route(h, conn, url, method, req, &r);
  if (r.logs) {
    struct MHD_Response *stream = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024,
                                                                    logs_read, r.logs, logs_free);
    if (stream == NULL) {
      logs_free(r.logs);
      return MHD_NO;
    }
    MHD_add_response_header(stream, "Content-Type", "text/plain; charset=utf-8");
    MHD_add_response_header(stream, "X-Content-Type-Options", "nosniff");
    enum MHD_Result queued = MHD_queue_response(conn, 200, stream);
    MHD_destroy_response(stream);
    return queued;
  }
  struct MHD_Response *resp = r.stream;
  if (resp == NULL && r.asset) {
    /* 304: no body; 200: the embedded bytes, never copied */
    resp = MHD_create_response_from_buffer(r.status == 304 ? 0 : r.asset->len,
                                           (void *)r.asset->data, MHD_RESPMEM_PERSISTENT);
    if (resp) {
      MHD_add_response_header(resp, "ETag", r.asset->etag);
      MHD_add_response_header(resp, "Cache-Control", "no-cache");
      MHD_add_response_header(resp, "Content-Security-Policy", KOLO_SERVER_UI_CSP);
      MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
      MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    }
  } else if (resp == NULL) {
    if (r.body == NULL) reply_error(&r, KOLO_ERR_NO_MEMORY, NULL);
    const char *body =
        r.body ? r.body : "{\"error\":{\"code\":\"INTERNAL\",\"message\":\"out of memory\"}}";
    resp = MHD_create_response_from_buffer(strlen(body), (void *)body,
                                           r.body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (resp == NULL) free(r.body);
  }
  if (resp == NULL) return MHD_NO;
  if (r.stream == NULL) MHD_add_response_header(resp, "Content-Type", r.content_type);
  if (r.status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
  if (r.allow) MHD_add_response_header(resp, "Allow", r.allow);
  enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r.status, resp);
  MHD_destroy_response(resp);
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  double seconds = (double)(now.tv_sec - req->started.tv_sec) +
                   (double)(now.tv_nsec - req->started.tv_nsec) / 1e9;
  kolo_server_metrics_observe(h->cfg.metrics, KOLO_SERVER_API_HTTP, r.method, r.grpc_code, seconds);
  if (r.status >= 500) KOLO_LOGW(LOG, "%s %s -> %d", method, url, r.status);
  return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  kolo_server_http *h = cls;
  (void)conn;
  (void)toe;
  request *req = *con_cls;
  if (req == NULL) return;
  pthread_mutex_lock(&h->lock);
  h->body_bytes -= req->len;
  pthread_mutex_unlock(&h->lock);
  free(req->body);
  free(req);
  *con_cls = NULL;
}

/* Called with the raw request line's URI, before libmicrohttpd unescapes it; what it
 * returns is the request's con_cls. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn) {
  (void)cls;
  (void)conn;
  request *req = calloc(1, sizeof *req);
  if (req == NULL) return NULL;
  clock_gettime(CLOCK_MONOTONIC, &req->started);
  req->uri_bytes = uri ? strlen(uri) : 0;
  for (const char *p = uri; p && (p = strchr(p, '%')) != NULL; p++)
    if (p[1] == '0' && p[2] == '0') req->nul_escape = 1;
  return req;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
  char line[512];
  (void)cls;
  vsnprintf(line, sizeof line, fmt, ap);
  line[strcspn(line, "\n")] = '\0';
  KOLO_LOGD(LOG, "libmicrohttpd: %s", line);
}

/* The front end hands each client's socketpair end to libmicrohttpd. */
static int hand_over(void *arg, int fd, const struct sockaddr *peer, socklen_t peer_len) {
  kolo_server_http *h = arg;
  return MHD_add_connection(h->daemon, fd, peer, peer_len) == MHD_YES ? 0 : -1;
}

kolo_status kolo_server_http_start(const kolo_server_http_config *config, kolo_server_http **out,
                                   int *bound_port) {
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  char host[128];
  const char *colon = strrchr(config->listen, ':');
  if (colon == NULL || (size_t)(colon - config->listen) >= sizeof host) return KOLO_ERR_ADDRESS;
  memcpy(host, config->listen, (size_t)(colon - config->listen));
  host[colon - config->listen] = '\0';
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (*end != '\0' || port < 0 || port > 65535) return KOLO_ERR_ADDRESS;
  if (host[0] == '\0' || strcmp(host, "0.0.0.0") == 0)
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
  else if (strcmp(host, "localhost") == 0)
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  else if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
    return KOLO_ERR_ADDRESS;
  addr.sin_port = htons((uint16_t)port);

  kolo_server_http *h = calloc(1, sizeof *h);
  if (h == NULL) return KOLO_ERR_NO_MEMORY;
  h->cfg = *config;
  pthread_mutex_init(&h->lock, NULL);
  if (h->cfg.max_message_bytes == 0) h->cfg.max_message_bytes = 4u << 20;
  h->body_budget = KOLO_SERVER_HTTP_BODY_BUDGET;
  if (h->body_budget < 2 * h->cfg.max_message_bytes) h->body_budget = 2 * h->cfg.max_message_bytes;
  /* kolo's front end listens, terminates TLS and frames; libmicrohttpd gets plain HTTP on
   * socketpairs, in its poll() loop, not epoll: 0.9.75's edge-triggered epoll stops reading
   * after a short read, so an end of stream that arrived with the last bytes (the front
   * end's half-close after a framing error, or a client's) went unseen until the timeout. */
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME |
                   MHD_USE_POLL | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
  if (kolo_server_stream_hub_create(config->store, KOLO_SERVER_STREAM_MAX, &h->events) != KOLO_OK) {
    free(h);
    return KOLO_ERR_NO_MEMORY;
  }
  unsigned threads = (unsigned)(config->threads > 0 ? config->threads : 2);
  /* libmicrohttpd must never reach its own connection limit (each pool thread gets limit /
   * threads, filled by descriptor number): 0.9.75's MHD_stop_daemon then deadlocks in a pool
   * thread that holds its own lock (measured: SIGTERM hung with ~4090 requests in flight, not
   * with 3500). The front end's limit is the one clients meet; this leaves every thread room
   * for all of them plus the ones libmicrohttpd has not yet cleaned up after a close. */
  unsigned mhd_limit = (HTTP_MAX_CONNECTIONS + 1024) * threads;
  h->daemon = MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, h, MHD_OPTION_THREAD_POOL_SIZE, threads,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
      MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      (size_t)HTTP_CONNECTION_BUFFER, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
      MHD_OPTION_URI_LOG_CALLBACK, on_uri, h, MHD_OPTION_END);
  if (h->daemon == NULL) {
    KOLO_LOGE(LOG, "cannot start the HTTP server on %s", config->listen);
    kolo_server_stream_hub_destroy(h->events);
    free(h);
    return KOLO_ERR_ADDRESS;
  }
  kolo_server_http_front_config fc = {
      addr, HTTP_MAX_CONNECTIONS, 60, hand_over, h, config->tls_cert_pem, config->tls_key_pem};
  kolo_status rc = kolo_server_http_front_start(&fc, &h->front, bound_port);
  if (rc != KOLO_OK) {
    KOLO_LOGE(LOG, "cannot start the HTTP server on %s", config->listen);
    MHD_stop_daemon(h->daemon);
    kolo_server_stream_hub_destroy(h->events);
    free(h);
    return rc;
  }
  *out = h;
  return KOLO_OK;
}

void kolo_server_http_stop(kolo_server_http *h) {
  if (h == NULL) return;
  kolo_server_http_front_stop(h->front); /* no new client; every client connection closed */
  kolo_server_stream_hub_close(
      h->events); /* no suspended connection may be left for MHD_stop_daemon */
  /* open log streams end now (a suspended connection must be resumed to be closed) */
  pthread_mutex_lock(&h->lock);
  for (http_logs *hl = h->streams; hl; hl = hl->next) {
    pthread_mutex_lock(&hl->lock);
    hl->shutdown = 1;
    if (hl->suspended) {
      hl->suspended = 0;
      MHD_resume_connection(hl->conn);
    }
    pthread_mutex_unlock(&hl->lock);
  }
  pthread_mutex_unlock(&h->lock);
  MHD_stop_daemon(h->daemon);
  kolo_server_stream_hub_destroy(h->events);
  pthread_mutex_destroy(&h->lock);
  free(h);
}
