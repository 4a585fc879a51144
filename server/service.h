/* The RPCs of kolo.v1 as plain functions on decoded messages: the one place requests are
 * checked and mapped onto the store, shared by the gRPC and HTTP transports. Also the
 * mapping of kolo_status to gRPC codes and HTTP statuses. The method table is server/wire.h. */
#ifndef KOLO_SERVER_SERVICE_H
#define KOLO_SERVER_SERVICE_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

#include "kolo/status.h"
#include "server/store.h"
#include "server/wire.h"

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

/* gRPC status code (grpc_status_code values) for a kolo_status (names: server/wire.h). */
int kolo_server_grpc_code(kolo_status rc);
/* HTTP status for a kolo_status. */
int kolo_server_http_code(kolo_status rc);

#endif
