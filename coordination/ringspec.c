/* Implementation of coordination/ringspec.h: the ring record is kolo.v1.RingRecord
 * (proto/kolo/v1/records.proto), written and read as JSON by the one codec (codec/); this
 * file is its rules (presence, ranges, ranks in order, one rank per worker, local groups)
 * checked over the message before it is written and after it is read, and the
 * kolo_ringspec struct its users hold. */
#include "coordination/ringspec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "common/checks.h"
#include "coordination/etcd_internal.h"
#include "coordination/keys.h"
#include "coordination/membership.h"
#include "kolo/v1/records.pb-c.h"

#define EPOCH_MAX ((int64_t)1 << 53)

void kolo_ringspec_clear(kolo_ringspec *s) {
  if (s == NULL) return;
  free(s->job);
  free(s->secret);
  for (size_t i = 0; s->members && i < s->size; i++) {
    free(s->members[i].worker_id);
    free(s->members[i].host);
    free(s->members[i].address);
  }
  free(s->members);
  for (size_t i = 0; s->lost && i < s->n_lost; i++) {
    free(s->lost[i].worker_id);
    free(s->lost[i].why);
  }
  free(s->lost);
  memset(s, 0, sizeof *s);
}

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

static kolo_status missing(const char *what, const char *name) {
  return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: %s has no '%s'", what, name);
}

static kolo_status in_range(const char *what, const char *name, int64_t v, int64_t min,
                            int64_t max) {
  if (v >= min && v <= max) return KOLO_OK;
  return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record: '%s' of %s is %lld, not in %lld..%lld",
                        name, what, (long long)v, (long long)min, (long long)max);
}

/* Every field a writer sets is there (the codec leaves absent ones NULL / has_ 0). */
static kolo_status check_member_present(const Kolo__V1__RingMember *m, const char *what) {
  if (m->worker_id == NULL) return missing(what, "worker_id");
  if (!m->has_rank) return missing(what, "rank");
  if (m->host == NULL) return missing(what, "host");
  if (m->address == NULL) return missing(what, "address");
  if (!m->has_local_rank) return missing(what, "local_rank");
  if (!m->has_local_size) return missing(what, "local_size");
  if (!m->has_since_epoch) return missing(what, "since_epoch");
  return KOLO_OK;
}

static kolo_status check_present(const Kolo__V1__RingRecord *r) {
  const char *top = "the record";
  if (r->job == NULL) return missing(top, "job");
  if (!r->has_epoch) return missing(top, "epoch");
  if (!r->has_timeout_ms) return missing(top, "timeout_ms");
  if (r->secret == NULL) return missing(top, "secret");
  if (r->members == NULL)
    return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: 'members' is missing or not an array");
  for (size_t i = 0; i < r->n_members; i++) {
    char what[48];
    snprintf(what, sizeof what, "member %zu", i);
    KOLO_CHECK(check_member_present(r->members[i], what));
  }
  if (r->lost == NULL)
    return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: 'lost' is missing or not an array");
  for (size_t i = 0; i < r->n_lost; i++) {
    char what[48];
    snprintf(what, sizeof what, "lost entry %zu", i);
    if (r->lost[i]->worker_id == NULL) return missing(what, "worker_id");
    if (r->lost[i]->why == NULL) return missing(what, "why");
  }
  return KOLO_OK;
}

static kolo_status check_member(const Kolo__V1__RingRecord *r, size_t i) {
  const Kolo__V1__RingMember *m = r->members[i];
  char what[48];
  snprintf(what, sizeof what, "member %zu", i);
  if (m->rank != (int64_t)i)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                          "ring record: %s says rank %lld (members must be listed in rank order)",
                          what, (long long)m->rank);
  if (!kolo_keys_name_valid(m->worker_id))
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                          "ring record: member %zu has an invalid worker_id '%.64s'", i,
                          shown(m->worker_id));
  if (!kolo_member_host_valid(m->host))
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                          "ring record: member %zu (%s) host must be 1-255 printable characters", i,
                          m->worker_id);
  if (!kolo_member_address_valid(m->address))
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                          "ring record: member %zu (%s) address '%.64s' is not host:port", i,
                          m->worker_id, shown(m->address));
  KOLO_CHECK(in_range(what, "local_rank", m->local_rank, 0, KOLO_RINGSPEC_MAX_SIZE - 1));
  KOLO_CHECK(in_range(what, "local_size", m->local_size, 1, KOLO_RINGSPEC_MAX_SIZE));
  if ((size_t)m->local_size > r->n_members || m->local_rank >= m->local_size)
    return kolo_etcd_fail(
        KOLO_ERR_INVALID_ARG,
        "ring record: member %zu (%s) local_rank %d / local_size %d (need 0 <= local_rank < "
        "local_size <= %zu)",
        i, m->worker_id, (int)m->local_rank, (int)m->local_size, r->n_members);
  KOLO_CHECK(in_range(what, "since_epoch", m->since_epoch, 0, EPOCH_MAX));
  if (m->since_epoch > r->epoch)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                          "ring record: member %zu (%s) since_epoch %lld is not in 0..%lld", i,
                          m->worker_id, (long long)m->since_epoch, (long long)r->epoch);
  if (m->has_lease) KOLO_CHECK(in_range(what, "lease", m->lease, 0, INT64_MAX));
  for (size_t k = 0; k < i; k++)
    if (strcmp(r->members[k]->worker_id, m->worker_id) == 0)
      return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                            "ring record: worker '%s' holds ranks %zu and %zu", m->worker_id, k, i);
  return KOLO_OK;
}

/* The record's meaning: every rule of ringspec.h, the first broken one named. */
static kolo_status check_record(const Kolo__V1__RingRecord *r) {
  const char *top = "the record";
  KOLO_CHECK(check_present(r));
  if (!kolo_keys_name_valid(r->job))
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record: job id '%.64s' is not valid",
                          shown(r->job));
  KOLO_CHECK(in_range(top, "epoch", r->epoch, 0, EPOCH_MAX));
  KOLO_CHECK(in_range(top, "timeout_ms", r->timeout_ms, 1, KOLO_RINGSPEC_MAX_TIMEOUT_MS));
  if (!secret_valid(r->secret))
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                          "ring record: secret must be 16-256 characters of [A-Za-z0-9+/=_.-]");
  if (r->n_members < 1 || r->n_members > KOLO_RINGSPEC_MAX_SIZE)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record: %zu members (1..%d)", r->n_members,
                          KOLO_RINGSPEC_MAX_SIZE);
  for (size_t i = 0; i < r->n_members; i++) KOLO_CHECK(check_member(r, i));
  if (r->n_lost > KOLO_RINGSPEC_MAX_LOST)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record: %zu lost entries (at most %d)",
                          r->n_lost, KOLO_RINGSPEC_MAX_LOST);
  for (size_t i = 0; i < r->n_lost; i++)
    if (!kolo_keys_name_valid(r->lost[i]->worker_id))
      return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                            "ring record: lost entry %zu has an invalid worker_id '%.64s'", i,
                            shown(r->lost[i]->worker_id));
  return KOLO_OK;
}

/* ---- the struct as a message: a view borrowing spec's strings (free with view_free) ---- */

typedef struct ring_view {
  Kolo__V1__RingRecord record;
  Kolo__V1__RingMember *members;
  Kolo__V1__RingMember **member_ptrs;
  Kolo__V1__RingLost *lost;
  Kolo__V1__RingLost **lost_ptrs;
} ring_view;

static void view_free(ring_view *v) {
  free(v->members);
  free(v->member_ptrs);
  free(v->lost);
  free(v->lost_ptrs);
}

static kolo_status view_of(const kolo_ringspec *s, ring_view *v) {
  memset(v, 0, sizeof *v);
  kolo__v1__ring_record__init(&v->record);
  size_t n = s->members ? s->size : 0, n_lost = s->lost ? s->n_lost : 0;
  if (n > KOLO_RINGSPEC_MAX_SIZE || n_lost > KOLO_RINGSPEC_MAX_LOST)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record: %zu members (1..%d)", s->size,
                          KOLO_RINGSPEC_MAX_SIZE);
  v->members = calloc(n + 1, sizeof *v->members);
  v->member_ptrs = calloc(n + 1, sizeof *v->member_ptrs);
  v->lost = calloc(n_lost + 1, sizeof *v->lost);
  v->lost_ptrs = calloc(n_lost + 1, sizeof *v->lost_ptrs);
  if (!v->members || !v->member_ptrs || !v->lost || !v->lost_ptrs) {
    view_free(v);
    return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory encoding a ring record");
  }
  Kolo__V1__RingRecord *r = &v->record;
  r->job = s->job;
  r->has_epoch = r->has_timeout_ms = 1;
  r->epoch = s->epoch;
  r->timeout_ms = s->timeout_ms;
  r->secret = s->secret;
  r->has_planned = r->planned = s->planned != 0;
  for (size_t i = 0; i < n; i++) {
    const kolo_ringspec_member *m = &s->members[i];
    Kolo__V1__RingMember *o = &v->members[i];
    kolo__v1__ring_member__init(o);
    o->worker_id = m->worker_id;
    o->host = m->host;
    o->address = m->address;
    o->has_rank = o->has_local_rank = o->has_local_size = o->has_since_epoch = 1;
    o->rank = (int64_t)i;
    o->local_rank = m->local_rank;
    o->local_size = m->local_size;
    o->since_epoch = m->since_epoch;
    o->has_lease = m->lease != 0; /* written when known, as before; a negative one is refused */
    o->lease = m->lease;
    v->member_ptrs[i] = o;
  }
  for (size_t i = 0; i < n_lost; i++) {
    kolo__v1__ring_lost__init(&v->lost[i]);
    v->lost[i].worker_id = s->lost[i].worker_id;
    v->lost[i].why = s->lost[i].why;
    v->lost_ptrs[i] = &v->lost[i];
  }
  r->n_members = n;
  r->members = v->member_ptrs;
  r->n_lost = n_lost;
  r->lost = v->lost_ptrs;
  return KOLO_OK;
}

kolo_status kolo_ringspec_validate(const kolo_ringspec *s) {
  if (s == NULL) return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record is NULL");
  ring_view v;
  KOLO_CHECK(view_of(s, &v));
  kolo_status rc = check_record(&v.record);
  view_free(&v);
  return rc;
}

kolo_status kolo_ringspec_encode(const kolo_ringspec *s, char **json) {
  if (json == NULL) return KOLO_ERR_INVALID_ARG;
  *json = NULL;
  if (s == NULL) return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record is NULL");
  ring_view v;
  KOLO_CHECK(view_of(s, &v));
  kolo_status rc = check_record(&v.record);
  if (rc == KOLO_OK) {
    *json = kolo_codec_dump(&v.record.base, 0);
    if (*json == NULL)
      rc = kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory encoding a ring record");
  }
  view_free(&v);
  return rc;
}

/* ---- decoding: the codec, then the rules, then the struct takes the strings ---- */

/* Words a codec fault the way this record's readers have always been told. */
static kolo_status fault_error(kolo_status rc, const kolo_codec_fault *f) {
  if (rc == KOLO_ERR_NO_MEMORY) return kolo_etcd_fail(rc, "out of memory reading a ring record");
  if (f->kind == KOLO_CODEC_FAULT_SYNTAX)
    return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: %s", f->message);
  if (f->field == NULL || f->kind != KOLO_CODEC_FAULT_TYPE)
    return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: %s",
                          f->path[0] ? f->message : "malformed JSON: not an object");
  char what[48] = "the record";
  size_t index;
  if (sscanf(f->path, "members[%zu]", &index) == 1)
    snprintf(what, sizeof what, "member %zu", index);
  else if (sscanf(f->path, "lost[%zu]", &index) == 1)
    snprintf(what, sizeof what, "lost entry %zu", index);
  const char *name = f->field->name;
  if (f->field->label == PROTOBUF_C_LABEL_REPEATED && strchr(f->path, '[') == NULL)
    return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: '%s' is missing or not an array", name);
  switch (f->field->type) {
    case PROTOBUF_C_TYPE_MESSAGE:
      return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: %s is not an object", what);
    case PROTOBUF_C_TYPE_STRING:
      return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: '%s' of %s is not a string", name, what);
    case PROTOBUF_C_TYPE_BOOL:
      return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: '%s' is not a boolean", name);
    default:
      return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: '%s' of %s is not an integer", name,
                            what);
  }
}

static char *take(char **slot) {
  char *s = *slot;
  *slot = NULL;
  return s;
}

/* Moves a checked record's values into out (strings change hands, nothing is copied). */
static kolo_status from_record(Kolo__V1__RingRecord *r, kolo_ringspec *out) {
  out->members = calloc(r->n_members, sizeof *out->members);
  out->lost = calloc(r->n_lost + 1, sizeof *out->lost);
  if (out->members == NULL || out->lost == NULL)
    return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  out->job = take(&r->job);
  out->secret = take(&r->secret);
  out->epoch = r->epoch;
  out->timeout_ms = r->timeout_ms;
  out->planned = r->has_planned && r->planned;
  out->size = r->n_members;
  for (size_t i = 0; i < r->n_members; i++) {
    Kolo__V1__RingMember *m = r->members[i];
    kolo_ringspec_member *o = &out->members[i];
    o->worker_id = take(&m->worker_id);
    o->host = take(&m->host);
    o->address = take(&m->address);
    o->local_rank = (int32_t)m->local_rank;
    o->local_size = (int32_t)m->local_size;
    o->since_epoch = m->since_epoch;
    o->lease = m->has_lease ? m->lease : 0;
  }
  out->n_lost = r->n_lost;
  for (size_t i = 0; i < r->n_lost; i++) {
    out->lost[i].worker_id = take(&r->lost[i]->worker_id);
    out->lost[i].why = take(&r->lost[i]->why);
  }
  return KOLO_OK;
}

kolo_status kolo_ringspec_decode(const char *text, size_t len, kolo_ringspec *out) {
  if (out == NULL) return KOLO_ERR_INVALID_ARG;
  memset(out, 0, sizeof *out);
  if (text == NULL && len > 0) return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record: no text");
  ProtobufCMessage *msg = NULL;
  kolo_codec_fault fault;
  kolo_status rc =
      kolo_codec_read(text ? text : "", text ? len : 0, &kolo__v1__ring_record__descriptor,
                      KOLO_CODEC_IGNORE_UNKNOWN | KOLO_CODEC_INTEGERS_ONLY, &msg, &fault);
  if (rc != KOLO_OK) return fault_error(rc, &fault);
  Kolo__V1__RingRecord *r = (Kolo__V1__RingRecord *)msg;
  rc = check_record(r);
  if (rc == KOLO_OK) rc = from_record(r, out);
  protobuf_c_message_free_unpacked(msg, NULL);
  if (rc != KOLO_OK) kolo_ringspec_clear(out);
  return rc;
}

int kolo_ringspec_rank_of(const kolo_ringspec *s, const char *worker) {
  for (size_t i = 0; s && worker && i < s->size; i++)
    if (strcmp(s->members[i].worker_id, worker) == 0) return (int)i;
  return -1;
}
