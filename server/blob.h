/* Job blobs (#29): a file a job's processes need that is too big for the job spec (kolo.Runner's
 * pickled payload, a notebook closure holding a numpy array). The client uploads it before
 * submitting the job, in pieces of at most KOLO_BLOB_CHUNK_BYTES (PutJobBlob, gRPC or HTTP,
 * behind the token like every write); each piece is one etcd txn (the chunk, base64, and the
 * meta record: coordination/keys.h), so the server holds one piece at a time whatever the
 * blob's size. The last piece is accepted once the stored chunks, read back one at a time,
 * hash to the SHA-256 the client named. SubmitJob then accepts an ExecProgram.blob only if it
 * names a complete upload under the job's id; each worker fetches and checks it before
 * starting the process (worker/agent/blob.c). The sweeper deletes the blob of a job that has
 * ended (or whose spec was deleted), and an upload no job took within KOLO_SERVER_BLOB_ORPHAN_MS.
 */
#ifndef KOLO_SERVER_BLOB_H
#define KOLO_SERVER_BLOB_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"
#include "kolo/v1/job.pb-c.h"
#include "server/store.h"

#define KOLO_SERVER_BLOB_MAX_DEFAULT (64u << 20) /* --max-blob-bytes */
#define KOLO_SERVER_BLOB_ORPHAN_MS (10 * 60 * 1000)
#define KOLO_SERVER_BLOB_SWEEP_MS 5000

/* The largest blob PutJobBlob accepts (set once at startup; default above). */
void kolo_server_blob_set_limit(uint64_t max_bytes);

/* One piece of an upload. KOLO_ERR_INVALID_ARG (a bad field, named; a digest mismatch on the
 * last piece, which deletes the upload), KOLO_ERR_TOO_LARGE (size over the limit),
 * KOLO_ERR_EXISTS (the job exists), KOLO_ERR_STATE (a piece out of order: the message says
 * which offset is expected), KOLO_ERR_CONFLICT (another upload of the same id raced). */
kolo_status kolo_server_blob_put(kolo_server_store *store, const Kolo__V1__PutJobBlobRequest *req,
                                 Kolo__V1__PutJobBlobResponse **resp, char *err, size_t err_len);

/* At submit: a spec whose exec.blob is set needs an id and a complete upload under it with
 * that size and digest (KOLO_ERR_INVALID_ARG naming exec.blob otherwise). */
kolo_status kolo_server_blob_check(kolo_server_store *store, const Kolo__V1__JobSpec *spec,
                                   char *err, size_t err_len);

/* Deletes the blobs of ended or deleted jobs and orphan uploads older than orphan_ms. */
kolo_status kolo_server_blob_sweep(kolo_server_store *store, int64_t orphan_ms, size_t *deleted);

typedef struct kolo_server_blob_sweeper kolo_server_blob_sweeper;
/* Sweeps every interval_ms on a thread of its own until stopped. */
kolo_status kolo_server_blob_sweeper_start(kolo_server_store *store, int interval_ms,
                                           kolo_server_blob_sweeper **out);
void kolo_server_blob_sweeper_stop(kolo_server_blob_sweeper *sw);

#endif
