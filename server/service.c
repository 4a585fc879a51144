/* Implementation of service.h. */
#include "server/service.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "coordination/keys.h"
#include "kolo/v1/cluster.pb-c.h"
#include "kolo/v1/job.pb-c.h"
#include "server/blob.h"
#include "server/job_model.h"
#include "codec/codec.h"

#define KOLO_CHECK_ID(id)                                                \
  do {                                                                   \
    kolo_status id_rc_ = kolo_server_service_check_id(id, err, err_len); \
    if (id_rc_ != KOLO_OK) return id_rc_;                                \
  } while (0)

kolo_status kolo_server_service_check_id(const char *id, char *err, size_t err_len) {
  if (id == NULL || id[0] == '\0') {
    snprintf(err, err_len, "id: required");
    return KOLO_ERR_INVALID_ARG;
  }
  if (!kolo_server_job_id_valid(id)) {
    snprintf(err, err_len, "id: not a job id (1-63 of a-z, 0-9, '-')");
    return KOLO_ERR_INVALID_ARG;
  }
  return KOLO_OK;
}

static kolo_status not_found(kolo_status rc, const char *what, const char *id, char *err,
                             size_t err_len) {
  if (rc == KOLO_ERR_NOT_FOUND && (err[0] == '\0'))
    snprintf(err, err_len, "no %s %.100s", what, id);
  return rc;
}

kolo_status kolo_server_service_call(kolo_server_store *store, kolo_server_method method,
                                     const ProtobufCMessage *req, ProtobufCMessage **resp,
                                     char *err, size_t err_len) {
  kolo_status rc = KOLO_ERR_UNSUPPORTED;
  err[0] = '\0';
  *resp = NULL;
  switch (method) {
    case KOLO_SERVER_SUBMIT_JOB: {
      Kolo__V1__JobSpec *spec = (Kolo__V1__JobSpec *)kolo_codec_copy(req);
      if (spec == NULL) return KOLO_ERR_NO_MEMORY;
      rc = kolo_server_job_validate_spec(spec, err, err_len);
      if (rc == KOLO_OK) rc = kolo_server_blob_check(store, spec, err, err_len);
      int created = 0;
      if (rc == KOLO_OK)
        rc = kolo_server_store_submit(store, spec, (Kolo__V1__Job **)resp, &created, err, err_len);
      protobuf_c_message_free_unpacked(&spec->base, NULL);
      return rc;
    }
    case KOLO_SERVER_PUT_JOB_BLOB:
      return kolo_server_blob_put(store, (const Kolo__V1__PutJobBlobRequest *)req,
                                  (Kolo__V1__PutJobBlobResponse **)resp, err, err_len);
    case KOLO_SERVER_GET_JOB: {
      const Kolo__V1__GetJobRequest *r = (const Kolo__V1__GetJobRequest *)req;
      KOLO_CHECK_ID(r->id);
      rc = kolo_server_store_get(store, r->id, (Kolo__V1__Job **)resp);
      return not_found(rc, "job", r->id, err, err_len);
    }
    case KOLO_SERVER_LIST_JOBS: {
      const Kolo__V1__ListJobsRequest *r = (const Kolo__V1__ListJobsRequest *)req;
      if (r->phase < 0 || r->phase > KOLO__V1__PHASE__CANCELLED) {
        snprintf(err, err_len, "phase: unknown value %d", (int)r->phase);
        return KOLO_ERR_INVALID_ARG;
      }
      if (r->page_size > 1000) {
        snprintf(err, err_len, "page_size: at most 1000");
        return KOLO_ERR_INVALID_ARG;
      }
      return kolo_server_store_list(store, r, (Kolo__V1__ListJobsResponse **)resp);
    }
    case KOLO_SERVER_CANCEL_JOB: {
      const Kolo__V1__CancelJobRequest *r = (const Kolo__V1__CancelJobRequest *)req;
      KOLO_CHECK_ID(r->id);
      if (strlen(r->reason) > 256) {
        snprintf(err, err_len, "reason: at most 256 characters");
        return KOLO_ERR_INVALID_ARG;
      }
      rc = kolo_server_store_cancel(store, r->id, r->reason, (Kolo__V1__Job **)resp, err, err_len);
      return not_found(rc, "job", r->id, err, err_len);
    }
    case KOLO_SERVER_SCALE_JOB: {
      const Kolo__V1__ScaleJobRequest *r = (const Kolo__V1__ScaleJobRequest *)req;
      KOLO_CHECK_ID(r->id);
      rc = kolo_server_store_scale(store, r->id, r->min_workers, r->max_workers,
                                   (Kolo__V1__Job **)resp, err, err_len);
      return not_found(rc, "job", r->id, err, err_len);
    }
    case KOLO_SERVER_LIST_WORKERS:
      return kolo_server_store_list_workers(store, (Kolo__V1__ListWorkersResponse **)resp);
    case KOLO_SERVER_DRAIN_WORKER:
    case KOLO_SERVER_UNDRAIN_WORKER: {
      /* DrainWorkerRequest and UndrainWorkerRequest have the same one field */
      const char *id = method == KOLO_SERVER_DRAIN_WORKER
                           ? ((const Kolo__V1__DrainWorkerRequest *)req)->id
                           : ((const Kolo__V1__UndrainWorkerRequest *)req)->id;
      if (!kolo_keys_name_valid(id)) {
        snprintf(err, err_len, "id: %s",
                 id[0] ? "not a worker id (1-128 of A-Z a-z 0-9 . _ -)" : "required");
        return KOLO_ERR_INVALID_ARG;
      }
      rc = method == KOLO_SERVER_DRAIN_WORKER
               ? kolo_server_store_drain_worker(store, id, (Kolo__V1__Worker **)resp, err, err_len)
               : kolo_server_store_undrain_worker(store, id, (Kolo__V1__Worker **)resp, err,
                                                  err_len);
      return not_found(rc, "worker", id, err, err_len);
    }
    case KOLO_SERVER_GET_DEMAND:
      return kolo_server_store_get_demand(store, (Kolo__V1__Demand **)resp);
    case KOLO_SERVER_GET_JOB_METRICS: {
      const Kolo__V1__GetJobMetricsRequest *r = (const Kolo__V1__GetJobMetricsRequest *)req;
      KOLO_CHECK_ID(r->id);
      rc = kolo_server_store_metrics(store, r->id, r->since_step, (Kolo__V1__JobMetrics **)resp);
      return not_found(rc, "job", r->id, err, err_len);
    }
    default:
      snprintf(err, err_len, "not a unary method");
      return KOLO_ERR_UNSUPPORTED;
  }
}

int kolo_server_bearer_matches(const char *given, size_t len, const char *token) {
  static const char scheme[] = "bearer";
  if (given == NULL || token == NULL || len < sizeof scheme) return 0;
  for (size_t i = 0; i < sizeof scheme - 1; i++) {
    char c = given[i];
    if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
    if (c != scheme[i]) return 0;
  }
  size_t at = sizeof scheme - 1;
  if (given[at] != ' ') return 0;
  while (at < len && given[at] == ' ') at++;
  const char *presented = given + at;
  size_t presented_len = len - at, want_len = strlen(token);
  unsigned diff = (unsigned)(presented_len ^ want_len);
  for (size_t k = 0; k < want_len; k++)
    diff |= (unsigned)((uint8_t)presented[k < presented_len ? k : 0] ^ (uint8_t)token[k]);
  return diff == 0 && want_len > 0;
}

/* grpc_status_code values, fixed by the gRPC protocol. */
int kolo_server_grpc_code(kolo_status rc) {
  switch (rc) {
    case KOLO_OK:
      return 0;
    case KOLO_ERR_INVALID_ARG:
    case KOLO_ERR_PARSE:
      return 3; /* INVALID_ARGUMENT */
    case KOLO_ERR_TIMEOUT:
      return 4; /* DEADLINE_EXCEEDED */
    case KOLO_ERR_NOT_FOUND:
      return 5;
    case KOLO_ERR_EXISTS:
      return 6; /* ALREADY_EXISTS */
    case KOLO_ERR_TOO_LARGE:
    case KOLO_ERR_NO_MEMORY:
      return 8; /* RESOURCE_EXHAUSTED */
    case KOLO_ERR_STATE:
      return 9; /* FAILED_PRECONDITION */
    case KOLO_ERR_CONFLICT:
      return 10; /* ABORTED */
    case KOLO_ERR_UNSUPPORTED:
      return 12; /* UNIMPLEMENTED */
    case KOLO_ERR_UNAVAILABLE:
    case KOLO_ERR_CONNECT:
    case KOLO_ERR_NOT_LEADER:
    case KOLO_ERR_LEASE_LOST:
      return 14; /* UNAVAILABLE */
    case KOLO_ERR_AUTH:
      return 16; /* UNAUTHENTICATED */
    default:
      return 13; /* INTERNAL */
  }
}

int kolo_server_http_code(kolo_status rc) {
  switch (kolo_server_grpc_code(rc)) {
    case 0:
      return 200;
    case 3:
      return 400;
    case 4:
      return 504;
    case 5:
      return 404;
    case 6:
    case 9:
    case 10:
      return 409;
    case 8:
      return rc == KOLO_ERR_TOO_LARGE ? 413 : 503;
    case 12:
      return 501;
    case 14:
      return 503;
    case 16:
      return 401;
    default:
      return 500;
  }
}
