/* The agent's on-disk store of training-process output. Each job has a directory
 * <dir>/<job>/ of segment files "<seq>-e<epoch>-r<rank>.log": one segment per (epoch,
 * rank) the process ran at, rotated into a new segment past file_bytes. Bounded on disk:
 * past job_bytes a job's oldest segments are deleted; finished jobs are deleted after
 * retention_s, and the oldest finished jobs first while the whole store is over
 * total_bytes. Everything is derived from the files, so a restarted agent serves what
 * it kept. One writer per job (the capture thread), any number of readers (the log
 * server's connections); thread-safe. Readers get complete lines with their epoch and
 * rank, a tail of the last N lines per rank, and can wait for more while the job's
 * process is still running. */
#ifndef KOLO_AGENT_LOGSTORE_H
#define KOLO_AGENT_LOGSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

/* Lines longer than this are cut into pieces of this size (the capture does it). */
#define KOLO_AGENT_LOG_MAX_LINE 16384

typedef struct kolo_agent_logstore_config {
  const char *dir;      /* created if missing */
  uint64_t file_bytes;  /* a segment file past this is continued in a new one */
  uint64_t job_bytes;   /* per-job cap (at least 2 * file_bytes) */
  uint64_t total_bytes; /* cap over all jobs (at least job_bytes) */
  int64_t retention_s;  /* a finished job's logs are kept this long after its last line */
} kolo_agent_logstore_config;

typedef struct kolo_agent_logstore kolo_agent_logstore;

/* Checks the config (KOLO_ERR_INVALID_ARG), creates dir and loads what it holds. */
kolo_status kolo_agent_logstore_open(const kolo_agent_logstore_config *cfg,
                                     kolo_agent_logstore **out);
/* Ends every reader's waits from now on (they return KOLO_AGENT_LOG_END): for shutdown. */
void kolo_agent_logstore_shutdown(kolo_agent_logstore *store);
/* Frees the store; every reader must be closed before. */
void kolo_agent_logstore_close(kolo_agent_logstore *store);

/* ---- the writer ---- */

/* A process of job starts at (epoch, rank): the job becomes active with a new segment.
 * KOLO_ERR_INVALID_ARG for a job id that is not a key segment. */
kolo_status kolo_agent_logstore_begin(kolo_agent_logstore *store, const char *job, int64_t epoch,
                                      uint32_t rank);
/* The process moved to (epoch, rank): later lines go into a new segment. */
kolo_status kolo_agent_logstore_segment(kolo_agent_logstore *store, const char *job, int64_t epoch,
                                        uint32_t rank);
/* Appends complete lines (data ends with '\n'); rotates and applies the job cap. A write
 * error drops the data (the process is never blocked on the disk) and is logged once. */
kolo_status kolo_agent_logstore_append(kolo_agent_logstore *store, const char *job,
                                       const char *data, size_t len);
/* The job's process is gone: readers that have read everything end. */
void kolo_agent_logstore_finish(kolo_agent_logstore *store, const char *job);

/* Applies retention and the total cap at wall time now_s (active jobs are kept). */
void kolo_agent_logstore_sweep(kolo_agent_logstore *store, int64_t now_s);

/* Bytes on disk: of job (0 if unknown), or of every job when job is NULL. */
uint64_t kolo_agent_logstore_bytes(kolo_agent_logstore *store, const char *job);
/* Whether the store holds job. */
int kolo_agent_logstore_has(kolo_agent_logstore *store, const char *job);

/* ---- readers ---- */

typedef struct kolo_agent_logreader kolo_agent_logreader;

/* Where a reader is: the segment and the byte offset in it of the next line. */
typedef struct kolo_agent_log_cursor {
  uint64_t seq;
  uint64_t offset;
} kolo_agent_log_cursor;

typedef struct kolo_agent_log_line {
  const char *text; /* without its newline; valid until the next call on the reader */
  size_t len;
  int64_t epoch;
  uint32_t rank;
  kolo_agent_log_cursor next; /* resume here to continue after this line */
} kolo_agent_log_line;

typedef struct kolo_agent_logreader_opts {
  const uint32_t *ranks; /* only these ranks; NULL/0 = every rank */
  size_t n_ranks;
  uint64_t tail; /* only the last tail lines of each rank present now; 0 = all */
  const kolo_agent_log_cursor *after; /* resume from here (tail is then ignored); NULL = start */
} kolo_agent_logreader_opts;

/* KOLO_ERR_NOT_FOUND if the store has no such job. */
kolo_status kolo_agent_logreader_open(kolo_agent_logstore *store, const char *job,
                                      const kolo_agent_logreader_opts *opts,
                                      kolo_agent_logreader **out);

typedef enum kolo_agent_log_next {
  KOLO_AGENT_LOG_LINE = 1, /* *line is filled */
  KOLO_AGENT_LOG_WAIT = 0, /* nothing new within wait_ms; the job is still active */
  KOLO_AGENT_LOG_END = -1, /* everything was read and the job is not active (or gone) */
} kolo_agent_log_next;

/* The next line, waiting up to wait_ms for one while the job is active. *skipped (may be
 * NULL) counts segments that were deleted (rotated away) before this reader got there. */
kolo_agent_log_next kolo_agent_logreader_next(kolo_agent_logreader *reader, int wait_ms,
                                              kolo_agent_log_line *line, uint64_t *skipped);
void kolo_agent_logreader_close(kolo_agent_logreader *reader);

#endif
