/* Implementation of blob.h over the store's kv (etcd, or kv_mem for --etcd none): chunks are
 * stored base64 (kv values are text), the meta record is JSON. */
#include "server/blob.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/checks.h"
#include "common/log.h"
#include "common/sha256.h"
#include "coordination/base64.h"
#include "coordination/job_status.h"
#include "coordination/keys.h"
#include "server/service.h"

#define LOG "blob"
#define DELETES_PER_TXN 64

static _Atomic uint64_t max_blob_bytes = KOLO_SERVER_BLOB_MAX_DEFAULT;

void kolo_server_blob_set_limit(uint64_t max_bytes) {
  atomic_store(&max_blob_bytes, max_bytes);
}

typedef struct meta {
  uint64_t size, received;
  char sha256[65];
  int complete;
  int64_t created_ms;
} meta;

static int64_t wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int sha256_hex_ok(const char *s) {
  return s && strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

static uint64_t chunk_count(uint64_t size) {
  return (size + KOLO_BLOB_CHUNK_BYTES - 1) / KOLO_BLOB_CHUNK_BYTES;
}

/* The meta record of job (NOT_FOUND if none; a record that does not parse counts as none). */
static kolo_status read_meta(kolo_server_kv *kv, const char *job, meta *m, int64_t *mod_rev) {
  char key[256];
  KOLO_CHECK(kolo_keys_blob_meta(job, key, sizeof key));
  kolo_server_kv_item *items = NULL;
  size_t n = 0;
  int64_t rev = 0;
  KOLO_CHECK(kv->ops->range(kv, key, &items, &n, &rev));
  kolo_status rc = KOLO_ERR_NOT_FOUND;
  for (size_t i = 0; i < n && rc != KOLO_OK; i++) {
    if (strcmp(items[i].key, key) != 0) continue; /* meta/a also finds meta/ab */
    json_t *root = json_loadb(items[i].value, items[i].value_len, 0, NULL);
    const char *sha = json_string_value(json_object_get(root, "sha256"));
    if (root && sha && strlen(sha) < sizeof m->sha256) {
      memset(m, 0, sizeof *m);
      m->size = (uint64_t)json_integer_value(json_object_get(root, "size"));
      m->received = (uint64_t)json_integer_value(json_object_get(root, "received"));
      m->complete = json_is_true(json_object_get(root, "complete"));
      m->created_ms = json_integer_value(json_object_get(root, "created_unix_ms"));
      snprintf(m->sha256, sizeof m->sha256, "%s", sha);
      *mod_rev = items[i].mod_revision;
      rc = KOLO_OK;
    }
    json_decref(root);
  }
  kolo_server_kv_items_free(items, n);
  return rc;
}

static char *meta_json(const meta *m) {
  json_t *root = json_pack("{s:I,s:s,s:I,s:b,s:I}", "size", (json_int_t)m->size, "sha256",
                           m->sha256, "received", (json_int_t)m->received, "complete", m->complete,
                           "created_unix_ms", (json_int_t)m->created_ms);
  char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  return text;
}

/* Deletes chunks [from, to) of job, DELETES_PER_TXN a txn. */
static kolo_status delete_chunks(kolo_server_kv *kv, const char *job, uint64_t from, uint64_t to) {
  char keys[DELETES_PER_TXN][256];
  kolo_server_kv_put puts[DELETES_PER_TXN];
  while (from < to) {
    size_t n = 0;
    for (; n < DELETES_PER_TXN && from < to; n++, from++) {
      KOLO_CHECK(kolo_keys_blob_chunk(job, from, keys[n], sizeof keys[n]));
      puts[n] = (kolo_server_kv_put){keys[n], NULL, 0};
    }
    int64_t rev;
    KOLO_CHECK(kv->ops->txn(kv, NULL, 0, puts, n, &rev));
  }
  return KOLO_OK;
}

/* Deletes a whole blob: its chunks (as many as meta's size needs), then its meta. */
static kolo_status delete_blob(kolo_server_kv *kv, const char *job, const meta *m) {
  KOLO_CHECK(delete_chunks(kv, job, 0, chunk_count(m->size)));
  char key[256];
  KOLO_CHECK(kolo_keys_blob_meta(job, key, sizeof key));
  kolo_server_kv_put del = {key, NULL, 0};
  int64_t rev;
  return kv->ops->txn(kv, NULL, 0, &del, 1, &rev);
}

/* Reads the stored chunks back one at a time and hashes them: KOLO_OK when they make size
 * bytes hashing to m->sha256; otherwise *why says what differs. */
static kolo_status verify(kolo_server_kv *kv, const char *job, const meta *m, char *why,
                          size_t why_len) {
  kolo_sha256 h;
  kolo_sha256_init(&h);
  uint64_t total = 0, chunks = chunk_count(m->size);
  for (uint64_t c = 0; c < chunks; c++) {
    char key[256];
    KOLO_CHECK(kolo_keys_blob_chunk(job, c, key, sizeof key));
    kolo_server_kv_item *items = NULL;
    size_t n = 0;
    int64_t rev;
    KOLO_CHECK(kv->ops->range(kv, key, &items, &n, &rev));
    unsigned char *data = NULL;
    size_t len = 0;
    kolo_status rc = n == 1
                         ? kolo_base64_decode_alloc(items[0].value, items[0].value_len, &data, &len)
                         : KOLO_ERR_NOT_FOUND;
    kolo_server_kv_items_free(items, n);
    if (rc != KOLO_OK) {
      snprintf(why, why_len, "chunk %" PRIu64 " is missing or unreadable", c);
      return KOLO_ERR_INVALID_ARG;
    }
    kolo_sha256_update(&h, data, len);
    total += len;
    free(data);
  }
  uint8_t digest[KOLO_SHA256_BYTES];
  kolo_sha256_final(&h, digest);
  char hex[65];
  for (int i = 0; i < KOLO_SHA256_BYTES; i++) snprintf(hex + 2 * i, 3, "%02x", digest[i]);
  if (total == m->size && strcmp(hex, m->sha256) == 0) return KOLO_OK;
  snprintf(why, why_len, "the %" PRIu64 " bytes received hash to %s, not the sha256 given (%s)",
           total, hex, m->sha256);
  return KOLO_ERR_INVALID_ARG;
}

/* The request's own checks (no store access). */
static kolo_status check_piece(const Kolo__V1__PutJobBlobRequest *r, char *err, size_t err_len) {
  kolo_status rc = kolo_server_service_check_id(r->id, err, err_len);
  if (rc != KOLO_OK) return rc;
  uint64_t limit = atomic_load(&max_blob_bytes), len = r->data.len;
  if (sha256_hex_ok(r->sha256) && r->size > limit) { /* the limit first: it is the user's fix */
    snprintf(err, err_len,
             "size: the blob is %" PRIu64 " bytes, over this server's limit of %" PRIu64
             " (kolo-server --max-blob-bytes)",
             r->size, limit);
    return KOLO_ERR_TOO_LARGE;
  }
  const char *why = !sha256_hex_ok(r->sha256)
                        ? "sha256: the whole blob's SHA-256, 64 lowercase hex digits"
                    : r->size == 0                      ? "size: required (the whole blob's bytes)"
                    : len == 0                          ? "data: empty"
                    : len > KOLO_BLOB_CHUNK_BYTES       ? "data: at most 262144 bytes a piece"
                    : r->offset % KOLO_BLOB_CHUNK_BYTES ? "offset: a multiple of 262144"
                    : r->offset + len > r->size         ? "data: goes past size"
                    : r->offset + len < r->size && len != KOLO_BLOB_CHUNK_BYTES
                        ? "data: every piece but the last is 262144 bytes"
                        : NULL;
  if (why) snprintf(err, err_len, "%s", why);
  return why ? KOLO_ERR_INVALID_ARG : KOLO_OK;
}

/* Whether the piece continues the upload in *old (KOLO_ERR_STATE with the reason if not). */
static kolo_status check_order(const Kolo__V1__PutJobBlobRequest *r, kolo_status found,
                               const meta *old, char *err, size_t err_len) {
  if (r->offset == 0) return KOLO_OK; /* starts (again) */
  if (found != KOLO_OK)
    snprintf(err, err_len, "no upload of job %s's blob is in progress: start at offset 0", r->id);
  else if (old->size != r->size || strcmp(old->sha256, r->sha256) != 0)
    snprintf(err, err_len,
             "the upload in progress for job %s is of another blob (%" PRIu64
             " bytes, sha256 %.16s...): start again at offset 0",
             r->id, old->size, old->sha256);
  else if (old->complete)
    snprintf(err, err_len, "job %s's blob is already complete", r->id);
  else if (old->received != r->offset)
    snprintf(err, err_len, "offset: expected %" PRIu64 " (the bytes received so far)",
             old->received);
  else
    return KOLO_OK;
  return KOLO_ERR_STATE;
}

static kolo_status job_exists(kolo_server_store *store, const char *id, char *err, size_t err_len) {
  uint8_t *packed = NULL;
  size_t len = 0;
  kolo_status rc = kolo_server_store_get_packed(store, id, &packed, &len);
  free(packed);
  if (rc == KOLO_OK) {
    snprintf(err, err_len, "job %s exists: a job's blob is uploaded before the job is submitted",
             id);
    return KOLO_ERR_EXISTS;
  }
  return rc == KOLO_ERR_NOT_FOUND ? KOLO_OK : rc;
}

/* Stores the piece and the new meta in one txn guarded by the meta's revision. */
static kolo_status store_piece(kolo_server_kv *kv, const Kolo__V1__PutJobBlobRequest *r,
                               const meta *m, int64_t meta_rev, char *err, size_t err_len) {
  char chunk_key[256], meta_key[256], *text = NULL, *json = meta_json(m);
  kolo_status rc = json ? KOLO_OK : KOLO_ERR_NO_MEMORY;
  if (rc == KOLO_OK) rc = kolo_keys_blob_meta(r->id, meta_key, sizeof meta_key);
  if (rc == KOLO_OK)
    rc =
        kolo_keys_blob_chunk(r->id, r->offset / KOLO_BLOB_CHUNK_BYTES, chunk_key, sizeof chunk_key);
  if (rc == KOLO_OK) rc = kolo_base64_encode_alloc(r->data.data, r->data.len, &text);
  if (rc == KOLO_OK) {
    kolo_server_kv_compare cmp = {meta_key, meta_rev ? KOLO_SERVER_KV_MOD : KOLO_SERVER_KV_CREATE,
                                  meta_rev};
    kolo_server_kv_put puts[2] = {{chunk_key, text, 0}, {meta_key, json, 0}};
    int64_t rev;
    rc = kv->ops->txn(kv, &cmp, 1, puts, 2, &rev);
    if (rc == KOLO_ERR_CONFLICT)
      snprintf(err, err_len, "another upload of job %s's blob changed it meanwhile", r->id);
  }
  free(text);
  free(json);
  return rc;
}

kolo_status kolo_server_blob_put(kolo_server_store *store, const Kolo__V1__PutJobBlobRequest *r,
                                 Kolo__V1__PutJobBlobResponse **resp, char *err, size_t err_len) {
  kolo_server_kv *kv = kolo_server_store_kv(store);
  KOLO_CHECK(check_piece(r, err, err_len));
  KOLO_CHECK(job_exists(store, r->id, err, err_len));
  meta old, m;
  int64_t meta_rev = 0;
  kolo_status found = read_meta(kv, r->id, &old, &meta_rev);
  if (found != KOLO_OK && found != KOLO_ERR_NOT_FOUND) return found;
  if (found != KOLO_OK) meta_rev = 0;
  KOLO_CHECK(check_order(r, found, &old, err, err_len));
  if (r->offset == 0 && found == KOLO_OK && chunk_count(old.size) > 1) /* a new start */
    KOLO_CHECK(delete_chunks(kv, r->id, 1, chunk_count(old.size)));
  m = (meta){r->size, r->offset + r->data.len, "", 0, r->offset ? old.created_ms : wall_ms()};
  snprintf(m.sha256, sizeof m.sha256, "%s", r->sha256);
  KOLO_CHECK(store_piece(kv, r, &m, meta_rev, err, err_len));
  if (m.received == m.size) {
    char why[256];
    if (verify(kv, r->id, &m, why, sizeof why) != KOLO_OK) {
      delete_blob(kv, r->id, &m);
      snprintf(err, err_len, "sha256: %s; nothing is kept, upload again", why);
      return KOLO_ERR_INVALID_ARG;
    }
    int64_t rev = 0;
    m.complete = 1;
    KOLO_CHECK(read_meta(kv, r->id, &old, &rev));
    char *json = meta_json(&m), meta_key[256];
    kolo_status rc =
        json ? kolo_keys_blob_meta(r->id, meta_key, sizeof meta_key) : KOLO_ERR_NO_MEMORY;
    if (rc == KOLO_OK) {
      kolo_server_kv_compare cmp = {meta_key, KOLO_SERVER_KV_MOD, rev};
      kolo_server_kv_put put = {meta_key, json, 0};
      int64_t new_rev;
      rc = kv->ops->txn(kv, &cmp, 1, &put, 1, &new_rev);
    }
    free(json);
    if (rc != KOLO_OK) return rc;
  }
  Kolo__V1__PutJobBlobResponse *out = malloc(sizeof *out);
  if (out == NULL) return KOLO_ERR_NO_MEMORY;
  kolo__v1__put_job_blob_response__init(out);
  out->received = m.received;
  out->complete = m.received == m.size;
  *resp = out;
  return KOLO_OK;
}

kolo_status kolo_server_blob_check(kolo_server_store *store, const Kolo__V1__JobSpec *spec,
                                   char *err, size_t err_len) {
  if (spec->program_case != KOLO__V1__JOB_SPEC__PROGRAM_EXEC || spec->exec == NULL ||
      spec->exec->blob == NULL)
    return KOLO_OK;
  const Kolo__V1__BlobRef *b = spec->exec->blob;
  if (spec->id == NULL || spec->id[0] == '\0') {
    snprintf(err, err_len, "exec.blob: needs the job's id (the blob is uploaded under it first)");
    return KOLO_ERR_INVALID_ARG;
  }
  if (!sha256_hex_ok(b->sha256) || b->size == 0) {
    snprintf(err, err_len, "exec.blob: size and sha256 (64 lowercase hex digits) required");
    return KOLO_ERR_INVALID_ARG;
  }
  meta m;
  int64_t rev;
  kolo_status rc = read_meta(kolo_server_store_kv(store), spec->id, &m, &rev);
  if (rc == KOLO_ERR_NOT_FOUND)
    snprintf(err, err_len, "exec.blob: no blob was uploaded for job %s (PutJobBlob first)",
             spec->id);
  else if (rc == KOLO_OK && !m.complete)
    snprintf(err, err_len,
             "exec.blob: the upload for job %s is not complete (%" PRIu64 " of %" PRIu64 " bytes)",
             spec->id, m.received, m.size);
  else if (rc == KOLO_OK && (m.size != b->size || strcmp(m.sha256, b->sha256) != 0))
    snprintf(err, err_len,
             "exec.blob: the blob uploaded for job %s is %" PRIu64
             " bytes with sha256 %.16s..., not the one the spec names",
             spec->id, m.size, m.sha256);
  else
    return rc;
  return rc == KOLO_OK || rc == KOLO_ERR_NOT_FOUND ? KOLO_ERR_INVALID_ARG : rc;
}

/* Whether job's blob should go: the job ended, or (no such job) the upload is an orphan. */
static int blob_unused(kolo_server_store *store, const char *job, const meta *m,
                       int64_t orphan_ms) {
  Kolo__V1__Job *j = NULL;
  kolo_status rc = kolo_server_store_get(store, job, &j);
  int unused = rc == KOLO_ERR_NOT_FOUND     ? wall_ms() - m->created_ms > orphan_ms
               : rc == KOLO_OK && j->status ? kolo_job_status_final(j->status->phase)
                                            : 0;
  if (j) protobuf_c_message_free_unpacked(&j->base, NULL);
  return unused;
}

kolo_status kolo_server_blob_sweep(kolo_server_store *store, int64_t orphan_ms, size_t *deleted) {
  kolo_server_kv *kv = kolo_server_store_kv(store);
  kolo_server_kv_item *items = NULL;
  size_t n = 0;
  int64_t rev;
  *deleted = 0;
  KOLO_CHECK(kv->ops->range(kv, KOLO_KEY_BLOBS_META_PREFIX, &items, &n, &rev));
  kolo_status rc = KOLO_OK;
  for (size_t i = 0; i < n && rc == KOLO_OK; i++) {
    const char *job = items[i].key + strlen(KOLO_KEY_BLOBS_META_PREFIX);
    meta m;
    int64_t meta_rev;
    if (!kolo_keys_name_valid(job) || read_meta(kv, job, &m, &meta_rev) != KOLO_OK) continue;
    if (!blob_unused(store, job, &m, orphan_ms)) continue;
    rc = delete_blob(kv, job, &m);
    if (rc == KOLO_OK) {
      (*deleted)++;
      KOLO_LOGI(LOG, "deleted the blob of job %s (%" PRIu64 " bytes)", job, m.size);
    }
  }
  kolo_server_kv_items_free(items, n);
  return rc;
}

struct kolo_server_blob_sweeper {
  kolo_server_store *store;
  int interval_ms;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int stop;
};

static void *sweep_thread(void *arg) {
  kolo_server_blob_sweeper *sw = arg;
  pthread_mutex_lock(&sw->lock);
  while (!sw->stop) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += sw->interval_ms / 1000;
    deadline.tv_nsec += (long)(sw->interval_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
      deadline.tv_sec++;
      deadline.tv_nsec -= 1000000000L;
    }
    if (pthread_cond_timedwait(&sw->cond, &sw->lock, &deadline) != ETIMEDOUT) continue;
    pthread_mutex_unlock(&sw->lock);
    size_t deleted;
    kolo_status rc = kolo_server_blob_sweep(sw->store, KOLO_SERVER_BLOB_ORPHAN_MS, &deleted);
    if (rc != KOLO_OK) KOLO_LOGD(LOG, "blob sweep: %s", kolo_strerror(rc));
    pthread_mutex_lock(&sw->lock);
  }
  pthread_mutex_unlock(&sw->lock);
  return NULL;
}

kolo_status kolo_server_blob_sweeper_start(kolo_server_store *store, int interval_ms,
                                           kolo_server_blob_sweeper **out) {
  kolo_server_blob_sweeper *sw = calloc(1, sizeof *sw);
  if (sw == NULL) return KOLO_ERR_NO_MEMORY;
  sw->store = store;
  sw->interval_ms = interval_ms > 0 ? interval_ms : KOLO_SERVER_BLOB_SWEEP_MS;
  pthread_mutex_init(&sw->lock, NULL);
  pthread_cond_init(&sw->cond, NULL);
  if (pthread_create(&sw->thread, NULL, sweep_thread, sw) != 0) {
    pthread_mutex_destroy(&sw->lock);
    pthread_cond_destroy(&sw->cond);
    free(sw);
    return KOLO_ERR_NO_MEMORY;
  }
  *out = sw;
  return KOLO_OK;
}

void kolo_server_blob_sweeper_stop(kolo_server_blob_sweeper *sw) {
  if (sw == NULL) return;
  pthread_mutex_lock(&sw->lock);
  sw->stop = 1;
  pthread_cond_signal(&sw->cond);
  pthread_mutex_unlock(&sw->lock);
  pthread_join(sw->thread, NULL);
  pthread_mutex_destroy(&sw->lock);
  pthread_cond_destroy(&sw->cond);
  free(sw);
}
