/* The job's blob (ExecProgram.blob, server/blob.h): fetched from etcd chunk by chunk before the
 * process starts, written to a file of the agent's work dir whose path the process gets as
 * KOLO_JOB_BLOB, and checked against the spec's size and SHA-256. A blob that is missing or
 * does not match fails the job at once (a permanent failure, with the reason). */
#ifndef KOLO_AGENT_BLOB_H
#define KOLO_AGENT_BLOB_H

#include <stddef.h>

#include "coordination/etcd.h"
#include "kolo/status.h"
#include "kolo/v1/job.pb-c.h"

/* "<work_dir>/blob-<job>" into buf. */
kolo_status kolo_agent_blob_path(const char *work_dir, const char *job, char *buf, size_t len);

/* Fetches job's blob into path (through path.part, renamed when whole and checked; one chunk in
 * memory at a time). On failure path does not exist and why says what went wrong. */
kolo_status kolo_agent_blob_fetch(kolo_etcd *etcd, const char *job, const Kolo__V1__BlobRef *ref,
                                  const char *path, char *why, size_t why_len);

#endif
