/* The RPCs of kolo.v1 as plain functions on decoded messages: the one place requests are
 * checked and mapped onto the store, shared by the gRPC and HTTP transports. Also the
 * mapping of kolo_status to gRPC codes and HTTP statuses. */
#ifndef KOLO_SERVER_SERVICE_H
#define KOLO_SERVER_SERVICE_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

#include "kolo/status.h"
#include "server/store.h"

typedef enum kolo_server_method {
  KOLO_SERVER_SUBMIT_JOB = 0,
  KOLO_SERVER_GET_JOB,
  KOLO_SERVER_LIST_JOBS,
  KOLO_SERVER_CANCEL_JOB,
  KOLO_SERVER_SCALE_JOB,
  KOLO_SERVER_WATCH_JOB,
  KOLO_SERVER_LIST_WORKERS,
  KOLO_SERVER_DRAIN_WORKER,
  KOLO_SERVER_UNDRAIN_WORKER,
  KOLO_SERVER_GET_DEMAND,
  KOLO_SERVER_GET_JOB_METRICS,
  KOLO_SERVER_STREAM_LOGS, /* streamed by the transports themselves (server/logs.h) */
  KOLO_SERVER_METHOD_COUNT
} kolo_server_method;

typedef struct kolo_server_method_info {
  const char *path; /* "/kolo.v1.JobService/SubmitJob" */
  const char *name; /* "SubmitJob" */
  const ProtobufCMessageDescriptor *request;
  const ProtobufCMessageDescriptor *response;
  int server_streaming;
} kolo_server_method_info;

extern const kolo_server_method_info kolo_server_methods[KOLO_SERVER_METHOD_COUNT];

/* Runs a unary method (not WatchJob). On error *resp stays NULL and err says why, naming
 * the request field for KOLO_ERR_INVALID_ARG. */
kolo_status kolo_server_service_call(kolo_server_store *store, kolo_server_method method,
                                     const ProtobufCMessage *req, ProtobufCMessage **resp,
                                     char *err, size_t err_len);

/* Checks a request that carries a job id ("id: required" / "id: ..."). */
kolo_status kolo_server_service_check_id(const char *id, char *err, size_t err_len);

/* Whether an Authorization value (gRPC metadata or HTTP header, given[0..len), not
 * NUL-terminated) is "Bearer <token>": the scheme matched case-insensitively (RFC 7235),
 * one or more spaces, then the token compared in constant time. NULL given = no. */
int kolo_server_bearer_matches(const char *given, size_t len, const char *token);

/* gRPC status code (grpc_status_code values) and its name for a kolo_status. */
int kolo_server_grpc_code(kolo_status rc);
const char *kolo_server_grpc_code_name(int code);
/* HTTP status for a kolo_status. */
int kolo_server_http_code(kolo_status rc);

#endif
