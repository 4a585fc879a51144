/* Implementation of grpc_api.h. Every call has a context with an atomic refcount: one
 * reference per batch in flight plus one "base" reference for the call itself; whichever
 * completion drops the last one frees it (completions of one call may arrive on two
 * threads at once). */
#include "server/grpc_api.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "kolo/v1/job.pb-c.h"
#include "server/inflate.h"
#include "server/job_model.h"
#include "server/pb_check.h"
#include "server/service.h"

#define LOG "grpc"
#define GENERIC (-1)
#define MAX_THREADS 32
/* A WatchJob client further behind than this many versions or bytes queued (not
 * counting the message in flight) is coalesced: the queued versions are dropped and
 * only the newest is kept. Each Job carries its whole event log, so nothing is lost
 * but intermediate states; a stalled watcher costs at most about this much memory. */
#define WATCH_QUEUE_MAX 256
#define WATCH_QUEUE_MAX_BYTES (4u << 20)
/* StreamLogs sends lines in LogChunk messages of about this size. */
#define LOG_CHUNK_BYTES (64 * 1024)

typedef enum tag_kind { TAG_NEW, TAG_DONE, TAG_SEND, TAG_STATUS, TAG_CLOSE, TAG_SHUTDOWN } tag_kind;

typedef struct call_ctx call_ctx;
typedef struct tag {
  call_ctx *ctx;
  tag_kind kind;
} tag;

typedef struct queued {
  grpc_byte_buffer *buf;
  struct queued *next;
} queued;

struct call_ctx {
  atomic_int refs;
  kolo_server_grpc *g;
  int method; /* kolo_server_method or GENERIC */
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
  grpc_call_details details;
  grpc_byte_buffer *payload;
  grpc_byte_buffer *response;
  int recv_cancelled;
  struct timespec started;
  int code;
  tag t_new, t_done, t_send, t_status, t_close;
  /* WatchJob state, under lock. */
  pthread_mutex_t lock;
  queued *head, *tail;
  size_t queued_count;
  size_t queued_bytes;
  int status_code; /* the stream's final status, sent once the queue is empty */
  int md_sent, in_flight, final_queued, status_started, closed;
  uint64_t sub;
  kolo_server_logstream *logs; /* StreamLogs, under lock */
};

struct kolo_server_grpc {
  kolo_server_grpc_config cfg;
  grpc_server *server;
  grpc_completion_queue *cq;
  void *registered[KOLO_SERVER_METHOD_COUNT];
  pthread_t threads[MAX_THREADS];
  int n_threads;
  atomic_int stopping;
  atomic_int active; /* unary calls being served */
  atomic_int watches;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int shutdown_done;
  tag t_shutdown;
};

static double seconds_since(const struct timespec *start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

static void ctx_unref(call_ctx *ctx) {
  if (atomic_fetch_sub(&ctx->refs, 1) != 1) return;
  if (ctx->call) grpc_call_unref(ctx->call);
  grpc_metadata_array_destroy(&ctx->md);
  if (ctx->method == GENERIC) grpc_call_details_destroy(&ctx->details);
  if (ctx->payload) grpc_byte_buffer_destroy(ctx->payload);
  if (ctx->response) grpc_byte_buffer_destroy(ctx->response);
  while (ctx->head) {
    queued *next = ctx->head->next;
    grpc_byte_buffer_destroy(ctx->head->buf);
    free(ctx->head);
    ctx->head = next;
  }
  pthread_mutex_destroy(&ctx->lock);
  free(ctx);
}

/* Posts one request for method (or a generic one) so the next such call has a context. */
static void post_request(kolo_server_grpc *g, int method) {
  if (atomic_load(&g->stopping)) return;
  call_ctx *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return;
  atomic_init(&ctx->refs, 1);
  ctx->g = g;
  ctx->method = method;
  ctx->t_new = (tag){ctx, TAG_NEW};
  ctx->t_done = (tag){ctx, TAG_DONE};
  ctx->t_send = (tag){ctx, TAG_SEND};
  ctx->t_status = (tag){ctx, TAG_STATUS};
  ctx->t_close = (tag){ctx, TAG_CLOSE};
  pthread_mutex_init(&ctx->lock, NULL);
  grpc_metadata_array_init(&ctx->md);
  grpc_call_error err;
  if (method == GENERIC) {
    grpc_call_details_init(&ctx->details);
    err = grpc_server_request_call(g->server, &ctx->call, &ctx->details, &ctx->md, g->cq, g->cq,
                                   &ctx->t_new);
  } else {
    err = grpc_server_request_registered_call(g->server, g->registered[method], &ctx->call,
                                              &ctx->deadline, &ctx->md, &ctx->payload, g->cq, g->cq,
                                              &ctx->t_new);
  }
  if (err != GRPC_CALL_OK) {
    KOLO_LOGE(LOG, "request_call failed: %d", (int)err);
    ctx_unref(ctx);
  }
}

/* Answers a unary call: initial metadata, the response if any, the status; one batch. */
static void finish_unary(call_ctx *ctx, int code, const char *message, const uint8_t *resp,
                         size_t len) {
  grpc_op ops[4];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  ctx->code = code;
  ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
  n++;
  if (resp != NULL && code == 0) {
    grpc_slice slice = grpc_slice_from_copied_buffer((const char *)resp, len);
    ctx->response = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = ctx->response;
    n++;
  }
  grpc_slice details = grpc_slice_from_copied_string(message ? message : "");
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = (grpc_status_code)code;
  ops[n].data.send_status_from_server.status_details = &details;
  n++;
  ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[n].data.recv_close_on_server.cancelled = &ctx->recv_cancelled;
  n++;
  grpc_call_error err = grpc_call_start_batch(ctx->call, ops, n, &ctx->t_done, NULL);
  grpc_slice_unref(details);
  if (err != GRPC_CALL_OK) {
    KOLO_LOGW(LOG, "start_batch (unary reply) failed: %d", (int)err);
    atomic_fetch_sub(&ctx->g->active, 1);
    ctx_unref(ctx);
  }
}

static void finish_status(call_ctx *ctx, kolo_status rc, const char *err) {
  char message[512];
  snprintf(message, sizeof message, "%s", err && err[0] ? err : kolo_strerror(rc));
  finish_unary(ctx, kolo_server_grpc_code(rc), message, NULL, 0);
}

/* The call's "authorization" metadata against the token (service.c's bearer rule). */
static int authorized(call_ctx *ctx) {
  const char *token = ctx->g->cfg.token;
  if (token == NULL) return 1;
  for (size_t i = 0; i < ctx->md.count; i++) {
    if (grpc_slice_str_cmp(ctx->md.metadata[i].key, "authorization") != 0) continue;
    grpc_slice v = ctx->md.metadata[i].value;
    return kolo_server_bearer_matches((const char *)GRPC_SLICE_START_PTR(v), GRPC_SLICE_LENGTH(v),
                                      token);
  }
  return 0;
}

/* ---- WatchJob ---- */

static void pump_locked(call_ctx *ctx) {
  if (ctx->closed || ctx->in_flight || ctx->status_started) return;
  if (ctx->head == NULL && !ctx->final_queued) return;
  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!ctx->md_sent) {
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ctx->md_sent = 1;
  }
  if (ctx->head) {
    queued *q = ctx->head;
    ctx->head = q->next;
    ctx->queued_count--;
    ctx->queued_bytes -= grpc_byte_buffer_length(q->buf);
    if (ctx->head == NULL) ctx->tail = NULL;
    if (ctx->response) grpc_byte_buffer_destroy(ctx->response);
    ctx->response = q->buf;
    free(q);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = ctx->response;
    n++;
    atomic_fetch_add(&ctx->refs, 1);
    ctx->in_flight = 1;
    if (grpc_call_start_batch(ctx->call, ops, n, &ctx->t_send, NULL) != GRPC_CALL_OK) {
      ctx->in_flight = 0;
      ctx->closed = 1;
      atomic_fetch_sub(&ctx->refs, 1); /* the base reference is still held */
    }
    return;
  }
  if (ctx->final_queued) {
    /* The job ended: close the stream with OK once its last state went out. */
    grpc_slice details = grpc_slice_from_static_string(
        ctx->status_code ? "watcher too slow: too many versions queued" : "");
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)ctx->status_code;
    ops[n].data.send_status_from_server.status_details = &details;
    n++;
    ctx->status_started = 1;
    ctx->code = ctx->status_code;
    atomic_fetch_add(&ctx->refs, 1);
    if (grpc_call_start_batch(ctx->call, ops, n, &ctx->t_status, NULL) != GRPC_CALL_OK)
      atomic_fetch_sub(&ctx->refs, 1);
  }
}

/* Store subscription callback: queue the new version (each change once) and send. */
static void on_job(void *arg, const uint8_t *packed, size_t len, Kolo__V1__Phase phase) {
  call_ctx *ctx = arg;
  pthread_mutex_lock(&ctx->lock);
  if (!ctx->closed && !ctx->final_queued && ctx->head &&
      (ctx->queued_count >= WATCH_QUEUE_MAX || ctx->queued_bytes + len > WATCH_QUEUE_MAX_BYTES)) {
    /* The client does not keep up: the newest version replaces what is queued. */
    while (ctx->head) {
      queued *next = ctx->head->next;
      grpc_byte_buffer_destroy(ctx->head->buf);
      free(ctx->head);
      ctx->head = next;
    }
    ctx->tail = NULL;
    ctx->queued_count = 0;
    ctx->queued_bytes = 0;
  }
  if (!ctx->closed && !ctx->final_queued) {
    queued *q = malloc(sizeof *q);
    if (q) {
      ctx->queued_count++;
      ctx->queued_bytes += len;
      grpc_slice slice = grpc_slice_from_copied_buffer((const char *)packed, len);
      q->buf = grpc_raw_byte_buffer_create(&slice, 1);
      grpc_slice_unref(slice);
      q->next = NULL;
      if (ctx->tail)
        ctx->tail->next = q;
      else
        ctx->head = q;
      ctx->tail = q;
    }
    if (kolo_job_status_final(phase)) ctx->final_queued = 1;
    pump_locked(ctx);
  }
  pthread_mutex_unlock(&ctx->lock);
}

static void start_watch(call_ctx *ctx, const Kolo__V1__WatchJobRequest *req) {
  kolo_server_grpc *g = ctx->g;
  char err[256];
  kolo_status rc = kolo_server_service_check_id(req->id, err, sizeof err);
  uint8_t *probe = NULL;
  size_t probe_len;
  if (rc == KOLO_OK) {
    rc = kolo_server_store_get_packed(g->cfg.store, req->id, &probe, &probe_len);
    if (rc == KOLO_ERR_NOT_FOUND) snprintf(err, sizeof err, "no job %.100s", req->id);
    free(probe);
  }
  if (rc != KOLO_OK) {
    atomic_fetch_add(&g->active, 1);
    finish_status(ctx, rc, err);
    return;
  }
  atomic_fetch_add(&g->watches, 1);
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &ctx->recv_cancelled;
  atomic_fetch_add(&ctx->refs, 1);
  if (grpc_call_start_batch(ctx->call, &op, 1, &ctx->t_close, NULL) != GRPC_CALL_OK) {
    atomic_fetch_sub(&g->watches, 1);
    atomic_fetch_sub(&ctx->refs, 1);
    ctx_unref(ctx);
    return;
  }
  /* The close may complete on another thread while we subscribe: hold a reference, and
   * whoever comes second (us or on_watch_closed) removes the subscription. */
  atomic_fetch_add(&ctx->refs, 1);
  uint64_t handle = 0;
  rc = kolo_server_store_subscribe(g->cfg.store, req->id, on_job, ctx, &handle);
  pthread_mutex_lock(&ctx->lock);
  int closed = ctx->closed;
  if (!closed) ctx->sub = handle;
  if (rc != KOLO_OK) {
    /* Deleted in between: end the stream. */
    ctx->final_queued = 1;
    pump_locked(ctx);
  }
  pthread_mutex_unlock(&ctx->lock);
  if (closed && handle) kolo_server_store_unsubscribe(g->cfg.store, handle);
  KOLO_LOGD(LOG, "WatchJob %s started", req->id);
  ctx_unref(ctx);
}

static void on_watch_closed(call_ctx *ctx) {
  pthread_mutex_lock(&ctx->lock);
  ctx->closed = 1;
  uint64_t handle = ctx->sub;
  ctx->sub = 0;
  pthread_mutex_unlock(&ctx->lock);
  /* After this returns on_job is not running and will not run again for ctx. */
  if (handle) kolo_server_store_unsubscribe(ctx->g->cfg.store, handle);
  if (!ctx->status_started) ctx->code = 1; /* CANCELLED by the client */
  kolo_server_metrics_observe(ctx->g->cfg.metrics, KOLO_SERVER_API_GRPC, KOLO_SERVER_WATCH_JOB,
                              ctx->code, seconds_since(&ctx->started));
  atomic_fetch_sub(&ctx->g->watches, 1);
  ctx_unref(ctx); /* the close batch */
  ctx_unref(ctx); /* the call */
}

/* ---- StreamLogs ---- */

/* Sends the next chunk, or the final status once the stream is over (one send at a time). */
static void pump_logs_locked(call_ctx *ctx) {
  if (ctx->closed || ctx->in_flight || ctx->status_started || ctx->logs == NULL) return;
  uint8_t *packed = NULL;
  size_t len = 0;
  kolo_server_logstream_state state =
      kolo_server_logstream_take_chunk(ctx->logs, LOG_CHUNK_BYTES, &packed, &len);
  if (state == KOLO_SERVER_LOGS_EMPTY) return; /* the stream notifies when lines come */
  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!ctx->md_sent) {
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ctx->md_sent = 1;
  }
  if (state == KOLO_SERVER_LOGS_DATA) {
    grpc_slice slice = grpc_slice_from_copied_buffer((const char *)packed, len);
    free(packed);
    if (ctx->response) grpc_byte_buffer_destroy(ctx->response);
    ctx->response = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = ctx->response;
    n++;
    atomic_fetch_add(&ctx->refs, 1);
    ctx->in_flight = 1;
    if (grpc_call_start_batch(ctx->call, ops, n, &ctx->t_send, NULL) != GRPC_CALL_OK) {
      ctx->in_flight = 0;
      ctx->closed = 1;
      atomic_fetch_sub(&ctx->refs, 1);
    }
    return;
  }
  char message[256];
  kolo_status rc = kolo_server_logstream_end_status(ctx->logs, message, sizeof message);
  ctx->code = rc == KOLO_OK ? 0 : kolo_server_grpc_code(rc);
  grpc_slice details = grpc_slice_from_copied_string(rc == KOLO_OK ? "" : message);
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = (grpc_status_code)ctx->code;
  ops[n].data.send_status_from_server.status_details = &details;
  n++;
  ctx->status_started = 1;
  atomic_fetch_add(&ctx->refs, 1);
  if (grpc_call_start_batch(ctx->call, ops, n, &ctx->t_status, NULL) != GRPC_CALL_OK)
    atomic_fetch_sub(&ctx->refs, 1);
  grpc_slice_unref(details);
}

/* The stream's thread: lines are ready, or the stream ended. */
static void on_logs_ready(void *arg) {
  call_ctx *ctx = arg;
  pthread_mutex_lock(&ctx->lock);
  if (ctx->logs != NULL && ctx->in_flight && !ctx->closed) {
    /* a reader that stopped reading holds the send: cut it off if the stream says so */
    char message[256];
    if (kolo_server_logstream_end_status(ctx->logs, message, sizeof message) != KOLO_OK)
      grpc_call_cancel_with_status(ctx->call, GRPC_STATUS_RESOURCE_EXHAUSTED, message, NULL);
  }
  pump_logs_locked(ctx);
  pthread_mutex_unlock(&ctx->lock);
}

static void start_logs(call_ctx *ctx, const Kolo__V1__StreamLogsRequest *req) {
  kolo_server_grpc *g = ctx->g;
  char err[256] = "";
  kolo_server_logstream *stream = NULL;
  kolo_status rc = g->cfg.logs ? kolo_server_logstream_open(g->cfg.logs, req, on_logs_ready, ctx,
                                                            &stream, err, sizeof err)
                               : KOLO_ERR_UNSUPPORTED;
  if (rc != KOLO_OK) {
    atomic_fetch_add(&g->active, 1);
    finish_status(ctx, rc, err);
    return;
  }
  atomic_fetch_add(&g->watches, 1);
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &ctx->recv_cancelled;
  atomic_fetch_add(&ctx->refs, 1);
  if (grpc_call_start_batch(ctx->call, &op, 1, &ctx->t_close, NULL) != GRPC_CALL_OK) {
    kolo_server_logstream_close(stream);
    atomic_fetch_sub(&g->watches, 1);
    atomic_fetch_sub(&ctx->refs, 1);
    ctx_unref(ctx);
    return;
  }
  pthread_mutex_lock(&ctx->lock);
  ctx->logs = stream;
  pump_logs_locked(ctx);
  pthread_mutex_unlock(&ctx->lock);
  KOLO_LOGD(LOG, "StreamLogs %s started", req->id);
}

static void on_logs_closed(call_ctx *ctx) {
  pthread_mutex_lock(&ctx->lock);
  ctx->closed = 1;
  kolo_server_logstream *stream = ctx->logs;
  ctx->logs = NULL;
  pthread_mutex_unlock(&ctx->lock);
  /* after this the stream's thread is gone: on_logs_ready will not run again */
  kolo_server_logstream_close(stream);
  if (!ctx->status_started) ctx->code = 1; /* CANCELLED by the client */
  kolo_server_metrics_observe(ctx->g->cfg.metrics, KOLO_SERVER_API_GRPC, KOLO_SERVER_STREAM_LOGS,
                              ctx->code, seconds_since(&ctx->started));
  atomic_fetch_sub(&ctx->g->watches, 1);
  ctx_unref(ctx); /* the close batch */
  ctx_unref(ctx); /* the call */
}

/* ---- dispatch ---- */

/* The request's bytes (malloc'd). Per-message decompression is off in the core, so a
 * compressed message arrives as it came and is inflated here, never past the message
 * limit: a 64 KiB gzip body of 64 MiB costs at most the limit, not 64 MiB. */
static kolo_status read_request(call_ctx *ctx, uint8_t **out, size_t *len, char *err,
                                size_t err_len) {
  grpc_byte_buffer *payload = ctx->payload;
  grpc_compression_algorithm algorithm = payload->data.raw.compression;
  size_t limit = ctx->g->cfg.max_message_bytes ? ctx->g->cfg.max_message_bytes : 4u << 20;
  const grpc_slice_buffer *slices = &payload->data.raw.slice_buffer;
  uint8_t *wire = malloc(slices->length + 1);
  if (wire == NULL) return KOLO_ERR_NO_MEMORY;
  size_t used = 0;
  for (size_t i = 0; i < slices->count; i++) {
    size_t n = GRPC_SLICE_LENGTH(slices->slices[i]);
    memcpy(wire + used, GRPC_SLICE_START_PTR(slices->slices[i]), n);
    used += n;
  }
  if (algorithm == GRPC_COMPRESS_NONE) {
    *out = wire;
    *len = used;
    return KOLO_OK;
  }
  kolo_status rc = KOLO_ERR_UNSUPPORTED;
  if (algorithm == GRPC_COMPRESS_GZIP || algorithm == GRPC_COMPRESS_DEFLATE)
    rc = kolo_server_inflate(wire, used, limit, out, len);
  free(wire);
  if (rc == KOLO_ERR_TOO_LARGE)
    snprintf(err, err_len, "request decompresses to more than the %zu byte limit", limit);
  else if (rc == KOLO_ERR_PARSE)
    snprintf(err, err_len, "malformed request: the compressed message does not inflate");
  else if (rc == KOLO_ERR_UNSUPPORTED)
    snprintf(err, err_len, "unsupported message compression %d", (int)algorithm);
  return rc;
}

static void on_new_call(call_ctx *ctx) {
  kolo_server_grpc *g = ctx->g;
  post_request(g, ctx->method);
  clock_gettime(CLOCK_MONOTONIC, &ctx->started);
  if (ctx->method == GENERIC) {
    char message[300];
    size_t len = GRPC_SLICE_LENGTH(ctx->details.method);
    snprintf(message, sizeof message, "unknown method %.*s", (int)(len > 200 ? 200 : len),
             (const char *)GRPC_SLICE_START_PTR(ctx->details.method));
    atomic_fetch_add(&g->active, 1);
    finish_unary(ctx, GRPC_STATUS_UNIMPLEMENTED, message, NULL, 0);
    return;
  }
  const kolo_server_method_info *info = &kolo_server_methods[ctx->method];
  if (!authorized(ctx)) {
    atomic_fetch_add(&g->active, 1);
    finish_unary(ctx, GRPC_STATUS_UNAUTHENTICATED, "missing or wrong bearer token", NULL, 0);
    return;
  }
  if (ctx->payload == NULL) {
    atomic_fetch_add(&g->active, 1);
    char message[128];
    snprintf(message, sizeof message, "missing request message (%s)", info->request->name);
    finish_unary(ctx, GRPC_STATUS_INVALID_ARGUMENT, message, NULL, 0);
    return;
  }
  uint8_t *body = NULL;
  size_t body_len = 0;
  char err[512];
  err[0] = '\0';
  kolo_status rc = read_request(ctx, &body, &body_len, err, sizeof err);
  ProtobufCMessage *req = NULL;
  if (rc == KOLO_OK) {
    req = protobuf_c_message_unpack(info->request, NULL, body_len, body);
    if (req == NULL) {
      rc = KOLO_ERR_INVALID_ARG;
      snprintf(err, sizeof err, "malformed request: not a valid %s message", info->request->name);
    }
  }
  /* Strings are checked on the wire: unpacked, a NUL would already have cut them short. */
  if (rc == KOLO_OK) rc = kolo_server_pb_check(info->request, body, body_len, err, sizeof err);
  free(body);
  if (rc != KOLO_OK) {
    if (req) protobuf_c_message_free_unpacked(req, NULL);
    atomic_fetch_add(&g->active, 1);
    finish_status(ctx, rc, err);
    return;
  }
  if (ctx->method == KOLO_SERVER_WATCH_JOB) {
    start_watch(ctx, (Kolo__V1__WatchJobRequest *)req);
    protobuf_c_message_free_unpacked(req, NULL);
    return;
  }
  if (ctx->method == KOLO_SERVER_STREAM_LOGS) {
    start_logs(ctx, (Kolo__V1__StreamLogsRequest *)req);
    protobuf_c_message_free_unpacked(req, NULL);
    return;
  }
  atomic_fetch_add(&g->active, 1);
  if (ctx->method == KOLO_SERVER_GET_JOB) {
    /* Hot path: the view keeps every job packed already. */
    const char *id = ((Kolo__V1__GetJobRequest *)req)->id;
    uint8_t *buf = NULL;
    size_t len = 0;
    rc = kolo_server_service_check_id(id, err, sizeof err);
    if (rc == KOLO_OK) rc = kolo_server_store_get_packed(g->cfg.store, id, &buf, &len);
    if (rc == KOLO_ERR_NOT_FOUND) snprintf(err, sizeof err, "no job %.100s", id);
    if (rc == KOLO_OK)
      finish_unary(ctx, 0, NULL, buf, len);
    else
      finish_status(ctx, rc, err);
    free(buf);
  } else {
    ProtobufCMessage *resp = NULL;
    rc = kolo_server_service_call(g->cfg.store, (kolo_server_method)ctx->method, req, &resp, err,
                                  sizeof err);
    if (rc == KOLO_OK) {
      size_t len = protobuf_c_message_get_packed_size(resp);
      uint8_t *buf = malloc(len + 1);
      if (buf) {
        protobuf_c_message_pack(resp, buf);
        finish_unary(ctx, 0, NULL, buf, len);
      } else {
        finish_status(ctx, KOLO_ERR_NO_MEMORY, NULL);
      }
      free(buf);
      protobuf_c_message_free_unpacked(resp, NULL);
    } else {
      if (rc != KOLO_ERR_NOT_FOUND && rc != KOLO_ERR_INVALID_ARG && rc != KOLO_ERR_STATE &&
          rc != KOLO_ERR_EXISTS)
        KOLO_LOGW(LOG, "%s failed: %s (%s)", info->name, kolo_strerror(rc), err);
      finish_status(ctx, rc, err);
    }
  }
  protobuf_c_message_free_unpacked(req, NULL);
}

static void *cq_thread(void *arg) {
  kolo_server_grpc *g = arg;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type != GRPC_OP_COMPLETE) continue;
    tag *t = ev.tag;
    if (t->kind == TAG_SHUTDOWN) {
      pthread_mutex_lock(&g->lock);
      g->shutdown_done = 1;
      pthread_cond_broadcast(&g->cond);
      pthread_mutex_unlock(&g->lock);
      grpc_completion_queue_shutdown(g->cq);
      continue;
    }
    call_ctx *ctx = t->ctx;
    switch (t->kind) {
      case TAG_NEW:
        if (ev.success)
          on_new_call(ctx);
        else
          ctx_unref(ctx);
        break;
      case TAG_DONE: {
        int method = ctx->method == GENERIC ? KOLO_SERVER_METRIC_OTHER : ctx->method;
        kolo_server_metrics_observe(g->cfg.metrics, KOLO_SERVER_API_GRPC, method, ctx->code,
                                    seconds_since(&ctx->started));
        atomic_fetch_sub(&g->active, 1);
        ctx_unref(ctx);
        break;
      }
      case TAG_SEND:
        pthread_mutex_lock(&ctx->lock);
        ctx->in_flight = 0;
        if (!ev.success)
          ctx->closed = 1;
        else if (ctx->method == KOLO_SERVER_STREAM_LOGS)
          pump_logs_locked(ctx);
        else
          pump_locked(ctx);
        pthread_mutex_unlock(&ctx->lock);
        ctx_unref(ctx);
        break;
      case TAG_STATUS:
        ctx_unref(ctx);
        break;
      case TAG_CLOSE:
        if (ctx->method == KOLO_SERVER_STREAM_LOGS)
          on_logs_closed(ctx);
        else
          on_watch_closed(ctx);
        break;
      default:
        break;
    }
  }
  return NULL;
}

kolo_status kolo_server_grpc_start(const kolo_server_grpc_config *config, kolo_server_grpc **out,
                                   int *bound_port) {
  kolo_server_grpc *g = calloc(1, sizeof *g);
  if (g == NULL) return KOLO_ERR_NO_MEMORY;
  g->cfg = *config;
  pthread_mutex_init(&g->lock, NULL);
  pthread_cond_init(&g->cond, NULL);
  g->t_shutdown = (tag){NULL, TAG_SHUTDOWN};
  grpc_init();
  grpc_arg args[3];
  memset(args, 0, sizeof args);
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = (int)(config->max_message_bytes ? config->max_message_bytes : 4u << 20);
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = -1;
  /* read_request inflates compressed messages itself, within the limit */
  args[2].type = GRPC_ARG_INTEGER;
  args[2].key = GRPC_ARG_ENABLE_PER_MESSAGE_DECOMPRESSION;
  args[2].value.integer = 0;
  grpc_channel_args channel_args = {3, args};
  g->server = grpc_server_create(&channel_args, NULL);
  g->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(g->server, g->cq, NULL);
  for (int m = 0; m < KOLO_SERVER_METHOD_COUNT; m++)
    g->registered[m] = grpc_server_register_method(g->server, kolo_server_methods[m].path, NULL,
                                                   GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
  grpc_server_credentials *creds;
  if (config->tls_cert_pem) {
    grpc_ssl_pem_key_cert_pair pair = {config->tls_key_pem, config->tls_cert_pem};
    creds = grpc_ssl_server_credentials_create(NULL, &pair, 1, 0, NULL);
  } else {
    creds = grpc_insecure_server_credentials_create();
  }
  int port = grpc_server_add_http2_port(g->server, config->listen, creds);
  grpc_server_credentials_release(creds);
  if (port <= 0) {
    KOLO_LOGE(LOG, "cannot listen on %s", config->listen);
    grpc_server_destroy(g->server);
    grpc_completion_queue_shutdown(g->cq);
    while (grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(g->cq);
    grpc_shutdown();
    free(g);
    return KOLO_ERR_ADDRESS;
  }
  grpc_server_start(g->server);
  for (int m = 0; m < KOLO_SERVER_METHOD_COUNT; m++) {
    post_request(g, m);
    post_request(g, m);
  }
  post_request(g, GENERIC);
  g->n_threads =
      config->threads > 0 ? (config->threads > MAX_THREADS ? MAX_THREADS : config->threads) : 4;
  for (int i = 0; i < g->n_threads; i++) pthread_create(&g->threads[i], NULL, cq_thread, g);
  *bound_port = port;
  *out = g;
  return KOLO_OK;
}

int kolo_server_grpc_active_calls(kolo_server_grpc *g) {
  return atomic_load(&g->active) + atomic_load(&g->watches);
}

void kolo_server_grpc_stop(kolo_server_grpc *g, int grace_ms) {
  if (g == NULL) return;
  atomic_store(&g->stopping, 1);
  grpc_server_shutdown_and_notify(g->server, g->cq, &g->t_shutdown);
  /* Let unary calls in flight finish; WatchJob streams never finish on their own. */
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  while (atomic_load(&g->active) > 0 && seconds_since(&start) * 1000 < grace_ms) {
    struct timespec pause = {0, 10 * 1000000L};
    nanosleep(&pause, NULL);
  }
  int left = atomic_load(&g->active);
  if (left) KOLO_LOGW(LOG, "%d calls still running after %d ms; cancelling them", left, grace_ms);
  grpc_server_cancel_all_calls(g->server);
  pthread_mutex_lock(&g->lock);
  while (!g->shutdown_done) pthread_cond_wait(&g->cond, &g->lock);
  pthread_mutex_unlock(&g->lock);
  for (int i = 0; i < g->n_threads; i++) pthread_join(g->threads[i], NULL);
  grpc_server_destroy(g->server);
  grpc_completion_queue_destroy(g->cq);
  grpc_shutdown();
  pthread_mutex_destroy(&g->lock);
  pthread_cond_destroy(&g->cond);
  free(g);
}
