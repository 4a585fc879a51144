/* Implementation of coordination/ringspec.h: the ring record's JSON codec. */
#include "coordination/ringspec.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/checks.h"
#include "coordination/etcd_internal.h"
#include "coordination/keys.h"
#include "coordination/membership.h"

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

static kolo_status validate_member(const kolo_ringspec *s, size_t i) {
  const kolo_ringspec_member *m = &s->members[i];
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
  if (m->local_size < 1 || (size_t)m->local_size > s->size || m->local_rank < 0 ||
      m->local_rank >= m->local_size)
    return kolo_etcd_fail(
        KOLO_ERR_INVALID_ARG,
        "ring record: member %zu (%s) local_rank %d / local_size %d (need 0 <= local_rank < "
        "local_size <= %zu)",
        i, m->worker_id, (int)m->local_rank, (int)m->local_size, s->size);
  if (m->since_epoch < 0 || m->since_epoch > s->epoch)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                          "ring record: member %zu (%s) since_epoch %lld is not in 0..%lld", i,
                          m->worker_id, (long long)m->since_epoch, (long long)s->epoch);
  if (m->lease < 0)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                          "ring record: member %zu (%s) lease %lld is negative", i, m->worker_id,
                          (long long)m->lease);
  for (size_t k = 0; k < i; k++)
    if (strcmp(s->members[k].worker_id, m->worker_id) == 0)
      return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                            "ring record: worker '%s' holds ranks %zu and %zu", m->worker_id, k, i);
  return KOLO_OK;
}

kolo_status kolo_ringspec_validate(const kolo_ringspec *s) {
  if (s == NULL) return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record is NULL");
  if (!kolo_keys_name_valid(s->job))
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record: job id '%.64s' is not valid",
                          shown(s->job));
  if (s->epoch < 0 || s->epoch > EPOCH_MAX)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record: epoch must be in 0..2^53");
  if (s->timeout_ms < 1 || s->timeout_ms > KOLO_RINGSPEC_MAX_TIMEOUT_MS)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record: timeout_ms %lld is not in 1..%d",
                          (long long)s->timeout_ms, KOLO_RINGSPEC_MAX_TIMEOUT_MS);
  if (!secret_valid(s->secret))
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                          "ring record: secret must be 16-256 characters of [A-Za-z0-9+/=_.-]");
  if (s->size < 1 || s->size > KOLO_RINGSPEC_MAX_SIZE || s->members == NULL)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record: it must have 1..%d members",
                          KOLO_RINGSPEC_MAX_SIZE);
  for (size_t i = 0; i < s->size; i++) KOLO_CHECK(validate_member(s, i));
  if (s->n_lost > KOLO_RINGSPEC_MAX_LOST || (s->n_lost > 0 && s->lost == NULL))
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record: at most %d lost entries",
                          KOLO_RINGSPEC_MAX_LOST);
  for (size_t i = 0; i < s->n_lost; i++) {
    if (!kolo_keys_name_valid(s->lost[i].worker_id))
      return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                            "ring record: lost entry %zu has an invalid worker_id '%.64s'", i,
                            shown(s->lost[i].worker_id));
    if (s->lost[i].why == NULL)
      return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record: lost entry %zu has no why", i);
  }
  return KOLO_OK;
}

/* ---- encoding ---- */

static json_t *member_json(const kolo_ringspec_member *m, size_t rank) {
  json_t *o = json_pack("{s:s, s:I, s:s, s:s, s:i, s:i, s:I}", "worker_id", m->worker_id, "rank",
                        (json_int_t)rank, "host", m->host, "address", m->address, "local_rank",
                        (int)m->local_rank, "local_size", (int)m->local_size, "since_epoch",
                        (json_int_t)m->since_epoch);
  if (o && m->lease > 0 &&
      json_object_set_new(o, "lease", json_integer((json_int_t)m->lease)) != 0) {
    json_decref(o);
    o = NULL;
  }
  return o;
}

kolo_status kolo_ringspec_encode(const kolo_ringspec *s, char **json) {
  if (json == NULL) return KOLO_ERR_INVALID_ARG;
  *json = NULL;
  KOLO_CHECK(kolo_ringspec_validate(s));
  json_t *members = json_array(), *lost = json_array();
  int bad = members == NULL || lost == NULL;
  for (size_t i = 0; !bad && i < s->size; i++)
    bad = json_array_append_new(members, member_json(&s->members[i], i));
  for (size_t i = 0; !bad && i < s->n_lost; i++)
    bad = json_array_append_new(
        lost, json_pack("{s:s, s:s}", "worker_id", s->lost[i].worker_id, "why", s->lost[i].why));
  /* json_pack's "o" takes the arrays even when it fails */
  json_t *o = bad ? NULL
                  : json_pack("{s:s, s:I, s:I, s:s, s:o, s:o}", "job", s->job, "epoch",
                              (json_int_t)s->epoch, "timeout_ms", (json_int_t)s->timeout_ms,
                              "secret", s->secret, "members", members, "lost", lost);
  if (bad) {
    json_decref(members);
    json_decref(lost);
  }
  if (o && s->planned && json_object_set_new(o, "planned", json_true()) != 0) {
    json_decref(o);
    o = NULL;
  }
  *json = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(o);
  return *json ? KOLO_OK
               : kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory encoding a ring record");
}

/* ---- decoding ---- */

static kolo_status get_string(const json_t *o, const char *name, const char *what, char **out) {
  json_t *v = json_object_get(o, name);
  if (v == NULL) return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: %s has no '%s'", what, name);
  if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
    return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: '%s' of %s is not a string", name, what);
  *out = strdup(json_string_value(v));
  return *out ? KOLO_OK : kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
}

static kolo_status get_int(const json_t *o, const char *name, const char *what, json_int_t min,
                           json_int_t max, json_int_t *out) {
  json_t *v = json_object_get(o, name);
  if (v == NULL) return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: %s has no '%s'", what, name);
  if (!json_is_integer(v))
    return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: '%s' of %s is not an integer", name, what);
  *out = json_integer_value(v);
  if (*out < min || *out > max)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                          "ring record: '%s' of %s is %lld, not in %lld..%lld", name, what,
                          (long long)*out, (long long)min, (long long)max);
  return KOLO_OK;
}

static kolo_status decode_member(const json_t *r, size_t i, kolo_ringspec_member *m) {
  char what[48];
  snprintf(what, sizeof what, "member %zu", i);
  if (!json_is_object(r))
    return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: %s is not an object", what);
  json_int_t rank = -1, local_rank = 0, local_size = 0, since = 0;
  KOLO_CHECK(get_string(r, "worker_id", what, &m->worker_id));
  KOLO_CHECK(get_int(r, "rank", what, 0, KOLO_RINGSPEC_MAX_SIZE - 1, &rank));
  if (rank != (json_int_t)i)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG,
                          "ring record: %s says rank %lld (members must be listed in rank order)",
                          what, (long long)rank);
  KOLO_CHECK(get_string(r, "host", what, &m->host));
  KOLO_CHECK(get_string(r, "address", what, &m->address));
  KOLO_CHECK(get_int(r, "local_rank", what, 0, KOLO_RINGSPEC_MAX_SIZE - 1, &local_rank));
  KOLO_CHECK(get_int(r, "local_size", what, 1, KOLO_RINGSPEC_MAX_SIZE, &local_size));
  KOLO_CHECK(get_int(r, "since_epoch", what, 0, EPOCH_MAX, &since));
  json_int_t lease = 0;
  if (json_object_get(r, "lease") != NULL)
    KOLO_CHECK(get_int(r, "lease", what, 0, INT64_MAX, &lease));
  m->lease = lease;
  m->local_rank = (int32_t)local_rank;
  m->local_size = (int32_t)local_size;
  m->since_epoch = since;
  return KOLO_OK;
}

static kolo_status decode_members(const json_t *o, kolo_ringspec *out) {
  json_t *members = json_object_get(o, "members");
  if (!json_is_array(members))
    return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: 'members' is missing or not an array");
  size_t n = json_array_size(members);
  if (n < 1 || n > KOLO_RINGSPEC_MAX_SIZE)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record: %zu members (1..%d)", n,
                          KOLO_RINGSPEC_MAX_SIZE);
  out->members = calloc(n, sizeof *out->members);
  if (out->members == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  out->size = n;
  for (size_t i = 0; i < n; i++)
    KOLO_CHECK(decode_member(json_array_get(members, i), i, &out->members[i]));
  return KOLO_OK;
}

static kolo_status decode_lost(const json_t *o, kolo_ringspec *out) {
  json_t *lost = json_object_get(o, "lost");
  if (!json_is_array(lost))
    return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: 'lost' is missing or not an array");
  size_t n = json_array_size(lost);
  if (n > KOLO_RINGSPEC_MAX_LOST)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record: %zu lost entries (at most %d)", n,
                          KOLO_RINGSPEC_MAX_LOST);
  out->lost = calloc(n + 1, sizeof *out->lost);
  if (out->lost == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  out->n_lost = n;
  for (size_t i = 0; i < n; i++) {
    json_t *entry = json_array_get(lost, i);
    char what[48];
    snprintf(what, sizeof what, "lost entry %zu", i);
    if (!json_is_object(entry))
      return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: %s is not an object", what);
    KOLO_CHECK(get_string(entry, "worker_id", what, &out->lost[i].worker_id));
    KOLO_CHECK(get_string(entry, "why", what, &out->lost[i].why));
  }
  return KOLO_OK;
}

static kolo_status decode_object(const json_t *o, kolo_ringspec *out) {
  json_int_t epoch = 0, timeout = 0;
  KOLO_CHECK(get_string(o, "job", "the record", &out->job));
  KOLO_CHECK(get_int(o, "epoch", "the record", 0, EPOCH_MAX, &epoch));
  KOLO_CHECK(get_int(o, "timeout_ms", "the record", 1, KOLO_RINGSPEC_MAX_TIMEOUT_MS, &timeout));
  KOLO_CHECK(get_string(o, "secret", "the record", &out->secret));
  out->epoch = epoch;
  out->timeout_ms = timeout;
  KOLO_CHECK(decode_members(o, out));
  KOLO_CHECK(decode_lost(o, out));
  json_t *planned = json_object_get(o, "planned");
  if (planned != NULL && !json_is_boolean(planned))
    return kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: 'planned' is not a boolean");
  out->planned = json_is_true(planned);
  return kolo_ringspec_validate(out);
}

kolo_status kolo_ringspec_decode(const char *text, size_t len, kolo_ringspec *out) {
  if (out == NULL) return KOLO_ERR_INVALID_ARG;
  memset(out, 0, sizeof *out);
  if (text == NULL && len > 0) return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring record: no text");
  json_error_t error;
  json_t *o = json_loadb(text ? text : "", len, JSON_REJECT_DUPLICATES, &error);
  kolo_status rc;
  if (o == NULL || !json_is_object(o))
    rc = kolo_etcd_fail(KOLO_ERR_PARSE, "ring record: malformed JSON: %s",
                        o ? "not an object" : error.text);
  else
    rc = decode_object(o, out);
  json_decref(o);
  if (rc != KOLO_OK) kolo_ringspec_clear(out);
  return rc;
}

int kolo_ringspec_rank_of(const kolo_ringspec *s, const char *worker) {
  for (size_t i = 0; s && worker && i < s->size; i++)
    if (strcmp(s->members[i].worker_id, worker) == 0) return (int)i;
  return -1;
}
