/* kolo-server's HTTP routing and query-argument rules as pure functions (no
 * libmicrohttpd, no I/O): which route a method and an unescaped URL path name
 * (with the job or worker id in it), the methods a path allows (405's Allow),
 * and how each route's query arguments (as libmicrohttpd hands them over: key,
 * value or NULL) fill its request or are refused with a message. http_api.c
 * does the I/O around them; tests/fuzz/fuzz_http_route.c states their
 * properties. */
#ifndef KOLO_SERVER_HTTP_ROUTE_H
#define KOLO_SERVER_HTTP_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"
#include "kolo/v1/job.pb-c.h"

#define KOLO_SERVER_ROUTE_ID_BYTES 128 /* an id in a path is shorter than this */

typedef enum kolo_server_route_kind {
  KOLO_ROUTE_NONE = 0, /* no route: 405 when allow is set, else 404 */
  KOLO_ROUTE_HEALTHZ,  /* GET /healthz (no token) */
  KOLO_ROUTE_READYZ,   /* GET /readyz (no token) */
  KOLO_ROUTE_UI,       /* GET /, /ui, /ui/... (no token; 404 when no such file) */
  KOLO_ROUTE_METRICS,
  KOLO_ROUTE_STREAM,
  KOLO_ROUTE_LIST_JOBS,
  KOLO_ROUTE_LIST_WORKERS,
  KOLO_ROUTE_DEMAND,
  KOLO_ROUTE_SUBMIT_JOB,
  KOLO_ROUTE_DRAIN_WORKER,   /* POST /v1/workers/<id>:drain */
  KOLO_ROUTE_UNDRAIN_WORKER, /* POST /v1/workers/<id>:undrain */
  KOLO_ROUTE_GET_JOB,        /* GET /v1/jobs/<id> */
  KOLO_ROUTE_JOB_LOGS,       /* GET /v1/jobs/<id>/logs */
  KOLO_ROUTE_JOB_EVENTS,     /* GET /v1/jobs/<id>/events */
  KOLO_ROUTE_JOB_METRICS,    /* GET /v1/jobs/<id>/metrics */
  KOLO_ROUTE_CANCEL_JOB,     /* POST /v1/jobs/<id>:cancel */
  KOLO_ROUTE_PUT_JOB_BLOB,   /* POST /v1/jobs/<id>/blob (a PutJobBlobRequest) */
  KOLO_ROUTE_SCALE_JOB,      /* POST /v1/jobs/<id>:scale */
} kolo_server_route_kind;

typedef struct kolo_server_route {
  kolo_server_route_kind kind;
  char id[KOLO_SERVER_ROUTE_ID_BYTES]; /* the job or worker id of the path, else "" */
  const char *allow; /* NONE: the methods the path allows (static), NULL for an unknown path */
} kolo_server_route;

/* The route for method (HEAD counts as GET) and path. Never fails: an unknown
 * route is KOLO_ROUTE_NONE, with allow set when only the method is wrong. */
void kolo_server_route_match(const char *method, const char *url, kolo_server_route *out);

/* The methods a known path answers ("GET, HEAD", "POST", ...), NULL for an unknown one. */
const char *kolo_server_route_methods(const char *url);

/* Whether a route is served without the bearer token. */
int kolo_server_route_public(kolo_server_route_kind kind);

/* Whether key is one of names (space-separated); else writes "<key>: unknown query parameter". */
int kolo_server_query_allowed(const char *names, const char *key, char *err, size_t err_len);

/* One query argument of GET /v1/jobs (phase, label=k=v repeatable, page_size 0..1000,
 * page_token) into req; KOLO_ERR_INVALID_ARG with a message naming the argument. */
kolo_status kolo_server_query_list_jobs(Kolo__V1__ListJobsRequest *req, const char *key,
                                        const char *value, char *err, size_t err_len);

/* One query argument of GET /v1/jobs/<id>/logs (rank repeatable up to max_ranks into
 * ranks, tail, follow) into req; KOLO_ERR_INVALID_ARG with a message. */
kolo_status kolo_server_query_logs(Kolo__V1__StreamLogsRequest *req, uint32_t *ranks,
                                   size_t max_ranks, const char *key, const char *value, char *err,
                                   size_t err_len);

/* since_step of GET /v1/jobs/<id>/metrics: a plain non-negative decimal that fits 64 bits. */
kolo_status kolo_server_query_since_step(const char *value, uint64_t *out, char *err,
                                         size_t err_len);

/* A yes/no argument: absent (NULL) = 0; "1", "true" or "" (a bare key) = 1; "0", "false" = 0. */
kolo_status kolo_server_query_flag(const char *name, const char *value, int *out, char *err,
                                   size_t err_len);

#endif
