/* Server-sent events on the watch-fed view, for the dashboard (GET /v1/stream): each open
 * stream gets the jobs list, the workers list and one job with its metrics history, first
 * whole and then again whenever they change, never more often than every KOLO_SERVER_STREAM_TICK_MS
 * however fast the view changes, and a comment every KOLO_SERVER_STREAM_PING_MS. A stream waits
 * suspended (libmicrohttpd's suspend/resume), so open streams hold no thread; what it sends is
 * built from the view's cached forms on the HTTP thread that writes it, and nothing more is
 * built while the client has not read the last batch (a slow client holds one batch at most).
 * The workers list is read from etcd once per change by the hub's thread, for all streams. */
#ifndef KOLO_SERVER_HTTP_STREAM_H
#define KOLO_SERVER_HTTP_STREAM_H

#include <microhttpd.h>
#include <stddef.h>

#include "kolo/status.h"
#include "server/store.h"

#define KOLO_SERVER_STREAM_TICK_MS 250
#define KOLO_SERVER_STREAM_PING_MS 15000
#define KOLO_SERVER_STREAM_MAX 256

typedef struct kolo_server_stream_topics {
  int jobs;     /* "jobs" events: ListJobsResponse JSON of every job (events left out) */
  int workers;  /* "workers" events: ListWorkersResponse JSON */
  char job[64]; /* "" or a job id: "job" events (the Job with its events) and "metrics" events
                   (JobMetrics JSON: the points since those already sent, and every ring) */
} kolo_server_stream_topics;

typedef struct kolo_server_stream_hub kolo_server_stream_hub;

/* Starts the hub's thread and registers it for the store's changes. */
kolo_status kolo_server_stream_hub_create(kolo_server_store *store, size_t max_streams,
                                          kolo_server_stream_hub **out);
/* Ends every open stream (they finish their last event and close) and refuses new ones; call it
 * before MHD_stop_daemon, which must not find suspended connections. */
void kolo_server_stream_hub_close(kolo_server_stream_hub *hub);
/* Stops the thread and frees (after MHD_stop_daemon has released every stream). */
void kolo_server_stream_hub_destroy(kolo_server_stream_hub *hub);

/* A response that streams topics to conn (queue it with MHD_queue_response, then destroy your
 * reference). KOLO_ERR_UNAVAILABLE when max_streams are open or the hub is closing. */
kolo_status kolo_server_stream_open(kolo_server_stream_hub *hub, struct MHD_Connection *conn,
                                    const kolo_server_stream_topics *topics,
                                    struct MHD_Response **out);

/* Streams open now. */
size_t kolo_server_stream_count(kolo_server_stream_hub *hub);

#endif
