/* kolo.v1 over gRPC on the C core: a completion queue served by several threads, one
 * registered request kept posted per method plus a generic one (unknown methods get
 * UNIMPLEMENTED), optional TLS and bearer token, and a draining stop. */
#ifndef KOLO_SERVER_GRPC_API_H
#define KOLO_SERVER_GRPC_API_H

#include <stddef.h>

#include "kolo/status.h"
#include "server/logs.h"
#include "server/metrics.h"
#include "server/store.h"

typedef struct kolo_server_grpc_config {
  const char *listen;       /* host:port; port 0 picks a free one */
  const char *tls_cert_pem; /* NULL = plaintext */
  const char *tls_key_pem;
  const char *token;        /* NULL = no auth; else "authorization: Bearer <token>" required */
  size_t max_message_bytes; /* larger requests are RESOURCE_EXHAUSTED */
  int threads;              /* completion-queue threads */
  kolo_server_store *store;
  kolo_server_metrics *metrics;
  kolo_server_logs *logs; /* StreamLogs */
} kolo_server_grpc_config;

typedef struct kolo_server_grpc kolo_server_grpc;

/* Binds, starts serving, and reports the bound port. */
kolo_status kolo_server_grpc_start(const kolo_server_grpc_config *config, kolo_server_grpc **out,
                                   int *bound_port);

/* Stops taking calls, lets unary calls in flight finish (up to grace_ms), ends open
 * WatchJob and StreamLogs streams, joins the threads and frees everything. */
void kolo_server_grpc_stop(kolo_server_grpc *g, int grace_ms);

/* Calls currently being served (for draining and tests). */
int kolo_server_grpc_active_calls(kolo_server_grpc *g);

#endif
