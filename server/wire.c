/* Implementation of wire.h: the kolo.v1 method table and the names of codes and phases. */
#include "server/wire.h"

#include "kolo/v1/cluster.pb-c.h"
#include "kolo/v1/job.pb-c.h"

const kolo_server_method_info kolo_server_methods[KOLO_SERVER_METHOD_COUNT] = {
    {"/kolo.v1.JobService/SubmitJob", "SubmitJob", &kolo__v1__job_spec__descriptor,
     &kolo__v1__job__descriptor, 0},
    {"/kolo.v1.JobService/GetJob", "GetJob", &kolo__v1__get_job_request__descriptor,
     &kolo__v1__job__descriptor, 0},
    {"/kolo.v1.JobService/ListJobs", "ListJobs", &kolo__v1__list_jobs_request__descriptor,
     &kolo__v1__list_jobs_response__descriptor, 0},
    {"/kolo.v1.JobService/CancelJob", "CancelJob", &kolo__v1__cancel_job_request__descriptor,
     &kolo__v1__job__descriptor, 0},
    {"/kolo.v1.JobService/ScaleJob", "ScaleJob", &kolo__v1__scale_job_request__descriptor,
     &kolo__v1__job__descriptor, 0},
    {"/kolo.v1.JobService/WatchJob", "WatchJob", &kolo__v1__watch_job_request__descriptor,
     &kolo__v1__job__descriptor, 1},
    {"/kolo.v1.ClusterService/ListWorkers", "ListWorkers",
     &kolo__v1__list_workers_request__descriptor, &kolo__v1__list_workers_response__descriptor, 0},
    {"/kolo.v1.ClusterService/DrainWorker", "DrainWorker",
     &kolo__v1__drain_worker_request__descriptor, &kolo__v1__worker__descriptor, 0},
    {"/kolo.v1.ClusterService/UndrainWorker", "UndrainWorker",
     &kolo__v1__undrain_worker_request__descriptor, &kolo__v1__worker__descriptor, 0},
    {"/kolo.v1.ClusterService/GetDemand", "GetDemand", &kolo__v1__get_demand_request__descriptor,
     &kolo__v1__demand__descriptor, 0},
    {"/kolo.v1.JobService/GetJobMetrics", "GetJobMetrics",
     &kolo__v1__get_job_metrics_request__descriptor, &kolo__v1__job_metrics__descriptor, 0},
    {"/kolo.v1.JobService/StreamLogs", "StreamLogs", &kolo__v1__stream_logs_request__descriptor,
     &kolo__v1__log_chunk__descriptor, 1},
    {"/kolo.v1.JobService/PutJobBlob", "PutJobBlob", &kolo__v1__put_job_blob_request__descriptor,
     &kolo__v1__put_job_blob_response__descriptor, 0},
};

const char *kolo_server_grpc_code_name(int code) {
  static const char *const names[] = {"OK",
                                      "CANCELLED",
                                      "UNKNOWN",
                                      "INVALID_ARGUMENT",
                                      "DEADLINE_EXCEEDED",
                                      "NOT_FOUND",
                                      "ALREADY_EXISTS",
                                      "PERMISSION_DENIED",
                                      "RESOURCE_EXHAUSTED",
                                      "FAILED_PRECONDITION",
                                      "ABORTED",
                                      "OUT_OF_RANGE",
                                      "UNIMPLEMENTED",
                                      "INTERNAL",
                                      "UNAVAILABLE",
                                      "DATA_LOSS",
                                      "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? names[code] : "UNKNOWN";
}

const char *kolo_server_job_phase_name(Kolo__V1__Phase phase) {
  const ProtobufCEnumValue *v =
      protobuf_c_enum_descriptor_get_value(&kolo__v1__phase__descriptor, phase);
  return v ? v->name : "PHASE_UNKNOWN";
}
