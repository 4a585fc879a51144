/* kolo.v1 over HTTP/JSON (libmicrohttpd + jansson) for curl and probes: the job routes map
 * onto the same service functions as gRPC, errors are {"error":{"code","message"}}, plus
 * /healthz, /readyz and /metrics, and the dashboard: its page at / and /ui/... (embedded
 * files, ui.h) and its live updates at /v1/stream (server-sent events, http_stream.h). */
#ifndef KOLO_SERVER_HTTP_API_H
#define KOLO_SERVER_HTTP_API_H

#include <stddef.h>

#include "kolo/status.h"
#include "server/logs.h"
#include "server/metrics.h"
#include "server/store.h"

/* What /readyz and /metrics need from the rest of the server. */
typedef struct kolo_server_health {
  void *arg;
  int (*backend_ok)(void *arg);                                      /* etcd answers */
  int (*leader)(void *arg, char *leader_id, size_t len, int *is_me); /* 1 if a leader is known */
} kolo_server_health;

typedef struct kolo_server_http_config {
  const char *listen; /* host:port (IPv4); port 0 picks a free one */
  const char *tls_cert_pem;
  const char *tls_key_pem;
  const char *token; /* NULL = no auth; /healthz and /readyz stay open always */
  size_t max_message_bytes;
  int threads;
  kolo_server_store *store;
  kolo_server_metrics *metrics;
  kolo_server_health health;
  kolo_server_logs *logs;    /* GET /v1/jobs/<id>/logs */
  const char *allowed_hosts; /* --http-allowed-hosts: more Host names answered (http_guard.h) */
} kolo_server_http_config;

/* Request bodies held at once by all requests together (at least twice the largest message):
 * past it a body is dropped as it comes and its request answered 503. */
#define KOLO_SERVER_HTTP_BODY_BUDGET ((size_t)32 << 20)

typedef struct kolo_server_http kolo_server_http;

kolo_status kolo_server_http_start(const kolo_server_http_config *config, kolo_server_http **out,
                                   int *bound_port);
/* Stops accepting, ends open log streams, finishes requests in flight, frees. */
void kolo_server_http_stop(kolo_server_http *h);

#endif
