/* Implementation of coordination/ringspec.h: the ring record is kolo.v1.RingRecord
 * (proto/kolo/v1/records.proto), written and read as JSON by the one codec (codec/); this
 * file is its rules (presence, ranges, ranks in order, one rank per worker, local groups)
 * checked over the message before it is written and after it is read. */
#include "coordination/ringspec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "common/checks.h"
#include "coordination/keys.h"
#include "coordination/membership.h"
#include "coordination/record.h"
#include "kolo/v1/records.pb-c.h"

#define EPOCH_MAX ((int64_t)1 << 53)

static int secret_valid(const char *t) {
  if (t == NULL) return 0;
  size_t n = strlen(t);
  if (n < 16 || n > 256) return 0;
  return strspn(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_.-") == n;
}

static const char *shown(const char *s) {
  return s ? s : "(null)";
}

/* ---- the rules, over the message (what is read and what is about to be written) ---- */

static kolo_status missing(const char *what, const char *name, char *err, size_t err_len) {
  return kolo_record_fail(KOLO_ERR_PARSE, err, err_len, "ring record: %s has no '%s'", what, name);
}

static kolo_status in_range(const char *what, const char *name, int64_t v, int64_t min, int64_t max,
                            char *err, size_t err_len) {
  if (v >= min && v <= max) return KOLO_OK;
  return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                          "ring record: '%s' of %s is %lld, not in %lld..%lld", name, what,
                          (long long)v, (long long)min, (long long)max);
}

/* Every field a writer sets is there (the codec leaves absent ones NULL / has_ 0). */
static kolo_status check_member_present(const Kolo__V1__RingMember *m, const char *what, char *err,
                                        size_t err_len) {
  if (m->worker_id == NULL) return missing(what, "worker_id", err, err_len);
  if (!m->has_rank) return missing(what, "rank", err, err_len);
  if (m->host == NULL) return missing(what, "host", err, err_len);
  if (m->address == NULL) return missing(what, "address", err, err_len);
  if (!m->has_local_rank) return missing(what, "local_rank", err, err_len);
  if (!m->has_local_size) return missing(what, "local_size", err, err_len);
  if (!m->has_since_epoch) return missing(what, "since_epoch", err, err_len);
  return KOLO_OK;
}

static kolo_status check_present(const Kolo__V1__RingRecord *r, char *err, size_t err_len) {
  const char *top = "the record";
  if (r->job == NULL) return missing(top, "job", err, err_len);
  if (!r->has_epoch) return missing(top, "epoch", err, err_len);
  if (!r->has_timeout_ms) return missing(top, "timeout_ms", err, err_len);
  if (r->secret == NULL) return missing(top, "secret", err, err_len);
  if (r->members == NULL)
    return kolo_record_fail(KOLO_ERR_PARSE, err, err_len,
                            "ring record: 'members' is missing or not an array");
  for (size_t i = 0; i < r->n_members; i++) {
    char what[48];
    snprintf(what, sizeof what, "member %zu", i);
    KOLO_CHECK(check_member_present(r->members[i], what, err, err_len));
  }
  if (r->lost == NULL)
    return kolo_record_fail(KOLO_ERR_PARSE, err, err_len,
                            "ring record: 'lost' is missing or not an array");
  for (size_t i = 0; i < r->n_lost; i++) {
    char what[48];
    snprintf(what, sizeof what, "lost entry %zu", i);
    if (r->lost[i]->worker_id == NULL) return missing(what, "worker_id", err, err_len);
    if (r->lost[i]->why == NULL) return missing(what, "why", err, err_len);
  }
  return KOLO_OK;
}

static kolo_status check_member(const Kolo__V1__RingRecord *r, size_t i, char *err,
                                size_t err_len) {
  const Kolo__V1__RingMember *m = r->members[i];
  char what[48];
  snprintf(what, sizeof what, "member %zu", i);
  if (m->rank != (int64_t)i)
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "ring record: %s says rank %lld (members must be listed in rank order)",
                            what, (long long)m->rank);
  if (!kolo_keys_name_valid(m->worker_id))
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "ring record: member %zu has an invalid worker_id '%.64s'", i,
                            shown(m->worker_id));
  if (!kolo_member_host_valid(m->host))
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "ring record: member %zu (%s) host must be 1-255 printable characters",
                            i, m->worker_id);
  if (!kolo_member_address_valid(m->address))
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "ring record: member %zu (%s) address '%.64s' is not host:port", i,
                            m->worker_id, shown(m->address));
  KOLO_CHECK(
      in_range(what, "local_rank", m->local_rank, 0, KOLO_RINGSPEC_MAX_SIZE - 1, err, err_len));
  KOLO_CHECK(in_range(what, "local_size", m->local_size, 1, KOLO_RINGSPEC_MAX_SIZE, err, err_len));
  if ((size_t)m->local_size > r->n_members || m->local_rank >= m->local_size)
    return kolo_record_fail(
        KOLO_ERR_INVALID_ARG, err, err_len,
        "ring record: member %zu (%s) local_rank %d / local_size %d (need 0 <= local_rank < "
        "local_size <= %zu)",
        i, m->worker_id, (int)m->local_rank, (int)m->local_size, r->n_members);
  KOLO_CHECK(in_range(what, "since_epoch", m->since_epoch, 0, EPOCH_MAX, err, err_len));
  if (m->since_epoch > r->epoch)
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "ring record: member %zu (%s) since_epoch %lld is not in 0..%lld", i,
                            m->worker_id, (long long)m->since_epoch, (long long)r->epoch);
  if (m->has_lease) KOLO_CHECK(in_range(what, "lease", m->lease, 0, INT64_MAX, err, err_len));
  for (size_t k = 0; k < i; k++)
    if (strcmp(r->members[k]->worker_id, m->worker_id) == 0)
      return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                              "ring record: worker '%s' holds ranks %zu and %zu", m->worker_id, k,
                              i);
  return KOLO_OK;
}

/* The record's meaning: every rule of ringspec.h, the first broken one named. */
kolo_status kolo_ringspec_validate(const Kolo__V1__RingRecord *r, char *err, size_t err_len) {
  if (r == NULL) return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len, "ring record is NULL");
  const char *top = "the record";
  KOLO_CHECK(check_present(r, err, err_len));
  if (!kolo_keys_name_valid(r->job))
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "ring record: job id '%.64s' is not valid", shown(r->job));
  KOLO_CHECK(in_range(top, "epoch", r->epoch, 0, EPOCH_MAX, err, err_len));
  KOLO_CHECK(
      in_range(top, "timeout_ms", r->timeout_ms, 1, KOLO_RINGSPEC_MAX_TIMEOUT_MS, err, err_len));
  if (!secret_valid(r->secret))
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "ring record: secret must be 16-256 characters of [A-Za-z0-9+/=_.-]");
  if (r->n_members < 1 || r->n_members > KOLO_RINGSPEC_MAX_SIZE)
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len, "ring record: %zu members (1..%d)",
                            r->n_members, KOLO_RINGSPEC_MAX_SIZE);
  for (size_t i = 0; i < r->n_members; i++) KOLO_CHECK(check_member(r, i, err, err_len));
  if (r->n_lost > KOLO_RINGSPEC_MAX_LOST)
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                            "ring record: %zu lost entries (at most %d)", r->n_lost,
                            KOLO_RINGSPEC_MAX_LOST);
  for (size_t i = 0; i < r->n_lost; i++)
    if (!kolo_keys_name_valid(r->lost[i]->worker_id))
      return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len,
                              "ring record: lost entry %zu has an invalid worker_id '%.64s'", i,
                              shown(r->lost[i]->worker_id));
  return KOLO_OK;
}

/* ---- writing: a copy of the record with the record's presence ---- */

typedef struct ring_view {
  Kolo__V1__RingRecord record;
  Kolo__V1__RingMember *members;
  Kolo__V1__RingMember **member_ptrs;
} ring_view;

/* v->record: r with its presence set as the record is written (ringspec.h), members copied
 * (their strings, and the lost entries, borrowed from r). Free v->members and
 * v->member_ptrs. */
static kolo_status view_of(const Kolo__V1__RingRecord *r, ring_view *v, char *err, size_t err_len) {
  memset(v, 0, sizeof *v);
  size_t n = r->members ? r->n_members : 0;
  if (n > KOLO_RINGSPEC_MAX_SIZE)
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len, "ring record: %zu members (1..%d)",
                            n, KOLO_RINGSPEC_MAX_SIZE);
  v->members = calloc(n + 1, sizeof *v->members);
  v->member_ptrs = calloc(n + 1, sizeof *v->member_ptrs);
  if (!v->members || !v->member_ptrs) {
    free(v->members);
    free(v->member_ptrs);
    return kolo_record_fail(KOLO_ERR_NO_MEMORY, err, err_len,
                            "out of memory encoding a ring record");
  }
  v->record = *r;
  Kolo__V1__RingRecord *o = &v->record;
  o->has_epoch = o->has_timeout_ms = 1;
  o->planned = r->planned != 0;
  o->has_planned = o->planned; /* written only when set, as before */
  for (size_t i = 0; i < n; i++) {
    Kolo__V1__RingMember *m = &v->members[i];
    *m = r->members[i] ? *r->members[i] : (Kolo__V1__RingMember)KOLO__V1__RING_MEMBER__INIT;
    m->has_rank = m->has_local_rank = m->has_local_size = m->has_since_epoch = 1;
    m->rank = (int64_t)i;
    m->has_lease = m->lease != 0; /* written when known, as before; a negative one is refused */
    v->member_ptrs[i] = m;
  }
  o->n_members = n;
  o->members = v->member_ptrs;
  if (o->lost == NULL) o->n_lost = 0;
  static Kolo__V1__RingLost *no_lost[1];
  if (o->lost == NULL) o->lost = no_lost; /* "lost": [] */
  return KOLO_OK;
}

kolo_status kolo_ringspec_write(const Kolo__V1__RingRecord *r, char **json, char *err,
                                size_t err_len) {
  if (json == NULL) return KOLO_ERR_INVALID_ARG;
  *json = NULL;
  if (r == NULL) return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len, "ring record is NULL");
  ring_view v;
  KOLO_CHECK(view_of(r, &v, err, err_len));
  kolo_status rc = kolo_ringspec_validate(&v.record, err, err_len);
  if (rc == KOLO_OK) {
    *json = kolo_codec_dump(&v.record.base, 0);
    if (*json == NULL)
      rc = kolo_record_fail(KOLO_ERR_NO_MEMORY, err, err_len,
                            "out of memory encoding a ring record");
  }
  free(v.members);
  free(v.member_ptrs);
  return rc;
}

/* ---- decoding: the codec, then the rules, then the struct takes the strings ---- */

/* Words a codec fault the way this record's readers have always been told. */
static kolo_status fault_error(kolo_status rc, const kolo_codec_fault *f, char *err,
                               size_t err_len) {
  if (rc == KOLO_ERR_NO_MEMORY)
    return kolo_record_fail(rc, err, err_len, "out of memory reading a ring record");
  if (f->kind == KOLO_CODEC_FAULT_SYNTAX)
    return kolo_record_fail(KOLO_ERR_PARSE, err, err_len, "ring record: %s", f->message);
  if (f->field == NULL || f->kind != KOLO_CODEC_FAULT_TYPE)
    return kolo_record_fail(KOLO_ERR_PARSE, err, err_len, "ring record: %s",
                            f->path[0] ? f->message : "malformed JSON: not an object");
  char what[48] = "the record";
  size_t index;
  if (sscanf(f->path, "members[%zu]", &index) == 1)
    snprintf(what, sizeof what, "member %zu", index);
  else if (sscanf(f->path, "lost[%zu]", &index) == 1)
    snprintf(what, sizeof what, "lost entry %zu", index);
  const char *name = f->field->name;
  if (f->field->label == PROTOBUF_C_LABEL_REPEATED && strchr(f->path, '[') == NULL)
    return kolo_record_fail(KOLO_ERR_PARSE, err, err_len,
                            "ring record: '%s' is missing or not an array", name);
  switch (f->field->type) {
    case PROTOBUF_C_TYPE_MESSAGE:
      return kolo_record_fail(KOLO_ERR_PARSE, err, err_len, "ring record: %s is not an object",
                              what);
    case PROTOBUF_C_TYPE_STRING:
      return kolo_record_fail(KOLO_ERR_PARSE, err, err_len,
                              "ring record: '%s' of %s is not a string", name, what);
    case PROTOBUF_C_TYPE_BOOL:
      return kolo_record_fail(KOLO_ERR_PARSE, err, err_len, "ring record: '%s' is not a boolean",
                              name);
    default:
      return kolo_record_fail(KOLO_ERR_PARSE, err, err_len,
                              "ring record: '%s' of %s is not an integer", name, what);
  }
}

kolo_status kolo_ringspec_read(const char *text, size_t len, Kolo__V1__RingRecord **out, char *err,
                               size_t err_len) {
  if (out == NULL) return KOLO_ERR_INVALID_ARG;
  *out = NULL;
  if (text == NULL && len > 0)
    return kolo_record_fail(KOLO_ERR_INVALID_ARG, err, err_len, "ring record: no text");
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  kolo_status rc =
      kolo_codec_read(text ? text : "", text ? len : 0, &kolo__v1__ring_record__descriptor,
                      KOLO_CODEC_IGNORE_UNKNOWN | KOLO_CODEC_INTEGERS_ONLY, &msg, &fault);
  if (rc != KOLO_OK) return fault_error(rc, &fault, err, err_len);
  rc = kolo_ringspec_validate((Kolo__V1__RingRecord *)msg, err, err_len);
  if (rc != KOLO_OK) {
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
  }
  *out = (Kolo__V1__RingRecord *)msg;
  return KOLO_OK;
}

int kolo_ringspec_rank_of(const Kolo__V1__RingRecord *r, const char *worker) {
  for (size_t i = 0; r && worker && i < r->n_members; i++)
    if (r->members[i]->worker_id && strcmp(r->members[i]->worker_id, worker) == 0) return (int)i;
  return -1;
}
