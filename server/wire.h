/* kolo.v1 as a client sees it, beyond the generated messages: the method table (gRPC
 * path, name, request and response descriptors), the names of gRPC status codes and of
 * job phases. With codec/ (kolo_codec) it is library kolo_wire, all that the CLI links
 * of the server (the server's core links it too). */
#ifndef KOLO_SERVER_WIRE_H
#define KOLO_SERVER_WIRE_H

#include <protobuf-c/protobuf-c.h>

#include "kolo/v1/job.pb-c.h"

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
  KOLO_SERVER_PUT_JOB_BLOB,
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

/* The name of a grpc_status_code value ("INVALID_ARGUMENT"); "UNKNOWN" outside 0..16. */
const char *kolo_server_grpc_code_name(int code);

/* The proto name of a job phase ("RUNNING"); "PHASE_UNKNOWN" for a value not in the enum. */
const char *kolo_server_job_phase_name(Kolo__V1__Phase phase);

#endif
