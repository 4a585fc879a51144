/* Job logs for StreamLogs and GET /v1/jobs/<id>/logs. The output stays on the workers
 * that ran the job (worker/agent/logstore.h); a stream finds them (the job's rings, then
 * its current members as they change), reads each worker's logs URL and token from its
 * etcd record, and fetches from all of them at once over HTTP (libcurl multi, one thread
 * per stream), merging lines as they arrive. Memory is bounded: each stream holds at
 * most buffer_bytes of lines (plus one record per worker); when the consumer does not
 * take them the transfers are paused, so TCP pushes back all the way to the agents, and
 * a consumer that takes nothing for stall_ms while the buffer is full is cut off. At most
 * max_streams run at once. A worker that cannot be reached gives a notice line (and is
 * retried while a followed job runs); resuming uses the agent's cursor, so no line is
 * repeated or lost across a reconnect. */
#ifndef KOLO_SERVER_LOGS_H
#define KOLO_SERVER_LOGS_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"
#include "kolo/v1/job.pb-c.h"
#include "server/store.h"

#define KOLO_SERVER_LOGS_MAX_RANKS 64

typedef struct kolo_server_logs_config {
  kolo_server_store *store;
  int max_streams;     /* 0 = 64 */
  size_t buffer_bytes; /* per stream; 0 = 256 KiB */
  int stall_ms;        /* 0 = 120000 */
} kolo_server_logs_config;

typedef struct kolo_server_logs kolo_server_logs;

kolo_status kolo_server_logs_create(const kolo_server_logs_config *cfg, kolo_server_logs **out);
/* Every stream must be closed before. */
void kolo_server_logs_destroy(kolo_server_logs *logs);

typedef struct kolo_server_logstream kolo_server_logstream;

/* Called on the stream's thread when lines become available after a take found none,
 * and once when the stream ends; must not block. */
typedef void (*kolo_server_logstream_notify)(void *arg);

/* Checks the request (INVALID_ARG naming the field, NOT_FOUND for an unknown job,
 * TOO_LARGE past max_streams) and starts the stream's thread. */
kolo_status kolo_server_logstream_open(kolo_server_logs *logs,
                                       const Kolo__V1__StreamLogsRequest *req,
                                       kolo_server_logstream_notify notify, void *arg,
                                       kolo_server_logstream **out, char *err, size_t err_len);

/* Optional: a socket whose peer hanging up ends the stream (checked every second). */
void kolo_server_logstream_watch_fd(kolo_server_logstream *s, int fd);

typedef enum kolo_server_logstream_state {
  KOLO_SERVER_LOGS_DATA = 1,  /* something was taken */
  KOLO_SERVER_LOGS_EMPTY = 0, /* nothing now; notify will be called */
  KOLO_SERVER_LOGS_END = -1,  /* nothing more will come; *end_status says why */
} kolo_server_logstream_state;

/* Takes up to max_bytes of lines as a packed LogChunk (*packed malloc'd). */
kolo_server_logstream_state kolo_server_logstream_take_chunk(kolo_server_logstream *s,
                                                             size_t max_bytes, uint8_t **packed,
                                                             size_t *len);
/* Takes whole lines as text into buf: "[<rank>] <line>\n", or the bare line when the
 * request named exactly one rank; notices as "[kolo] <notice>\n". */
kolo_server_logstream_state kolo_server_logstream_take_text(kolo_server_logstream *s, char *buf,
                                                            size_t cap, size_t *len);
/* KOLO_OK while the stream runs or after it ended normally; else why it was cut
 * (TOO_LARGE: the consumer stalled; ABORTED: its peer hung up), with a message. */
kolo_status kolo_server_logstream_end_status(kolo_server_logstream *s, char *message, size_t len);

/* Stops the thread and frees (any time, on any thread but the stream's own). */
void kolo_server_logstream_close(kolo_server_logstream *s);

#endif
