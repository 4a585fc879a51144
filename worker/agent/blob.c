/* Implementation of blob.h. */
#include "worker/agent/blob.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sha256.h"
#include "coordination/base64.h"
#include "coordination/keys.h"

kolo_status kolo_agent_blob_path(const char *work_dir, const char *job, char *buf, size_t len) {
  int n = snprintf(buf, len, "%s/blob-%s", work_dir, job);
  return n > 0 && (size_t)n < len ? KOLO_OK : KOLO_ERR_TOO_LARGE;
}

/* Appends chunk c of job to fd and h; why says what went wrong. */
static kolo_status fetch_chunk(kolo_etcd *etcd, const char *job, uint64_t c, uint64_t chunks,
                               int fd, kolo_sha256 *h, uint64_t *total, char *why, size_t why_len) {
  char key[256];
  kolo_status rc = kolo_keys_blob_chunk(job, c, key, sizeof key);
  kolo_etcd_kv kv = {0};
  if (rc == KOLO_OK) rc = kolo_etcd_get(etcd, kolo_etcd_str(key), &kv, NULL);
  if (rc != KOLO_OK) {
    snprintf(why, why_len,
             rc == KOLO_ERR_NOT_FOUND ? "the job's blob is missing: chunk %" PRIu64 " of %" PRIu64
                                        " is not in etcd (deleted, or never uploaded)"
                                      : "the job's blob cannot be read: chunk %" PRIu64
                                        " of %" PRIu64 ": %s",
             c, chunks, kolo_etcd_last_error());
    return rc;
  }
  unsigned char *data = NULL;
  size_t len = 0;
  rc = kolo_base64_decode_alloc((const char *)kv.value, kv.value_len, &data, &len);
  kolo_etcd_kv_clear(&kv);
  if (rc != KOLO_OK) {
    snprintf(why, why_len, "the job's blob is corrupted: chunk %" PRIu64 " is not base64", c);
    return KOLO_ERR_PARSE;
  }
  kolo_sha256_update(h, data, len);
  *total += len;
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, data + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      snprintf(why, why_len, "cannot write the job's blob: %s", strerror(errno));
      free(data);
      return KOLO_ERR_IO;
    }
    off += (size_t)w;
  }
  free(data);
  return KOLO_OK;
}

kolo_status kolo_agent_blob_fetch(kolo_etcd *etcd, const char *job, const Kolo__V1__BlobRef *ref,
                                  const char *path, char *why, size_t why_len) {
  char part[1100];
  snprintf(part, sizeof part, "%s.part", path);
  unlink(path);
  int fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(why, why_len, "cannot write the job's blob to %s: %s", part, strerror(errno));
    return KOLO_ERR_IO;
  }
  kolo_sha256 h;
  kolo_sha256_init(&h);
  uint64_t total = 0, chunks = (ref->size + KOLO_BLOB_CHUNK_BYTES - 1) / KOLO_BLOB_CHUNK_BYTES;
  kolo_status rc = KOLO_OK;
  for (uint64_t c = 0; c < chunks && rc == KOLO_OK && total <= ref->size; c++)
    rc = fetch_chunk(etcd, job, c, chunks, fd, &h, &total, why, why_len);
  if (close(fd) != 0 && rc == KOLO_OK) {
    snprintf(why, why_len, "cannot write the job's blob: %s", strerror(errno));
    rc = KOLO_ERR_IO;
  }
  if (rc == KOLO_OK) {
    uint8_t digest[KOLO_SHA256_BYTES];
    kolo_sha256_final(&h, digest);
    char hex[65];
    for (int i = 0; i < KOLO_SHA256_BYTES; i++) snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    if (total != ref->size || strcmp(hex, ref->sha256 ? ref->sha256 : "") != 0) {
      snprintf(why, why_len,
               "the job's blob is corrupted: the %" PRIu64
               " bytes fetched hash to %.16s..., the "
               "spec names %" PRIu64 " bytes with sha256 %.16s...",
               total, hex, ref->size, ref->sha256 ? ref->sha256 : "");
      rc = KOLO_ERR_PARSE;
    }
  }
  if (rc == KOLO_OK && rename(part, path) != 0) {
    snprintf(why, why_len, "cannot write the job's blob to %s: %s", path, strerror(errno));
    rc = KOLO_ERR_IO;
  }
  if (rc != KOLO_OK) unlink(part);
  return rc;
}
