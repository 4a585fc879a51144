/* Implementation of coordination/ringspec.h: the ring spec's strict JSON codec. */
#include "coordination/ringspec.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "coordination/base64.h"
#include "coordination/etcd_internal.h"
#include "coordination/keys.h"
#include "coordination/membership.h"

void kolo_ringspec_clear(kolo_ringspec *s) {
  if (s == NULL) return;
  free(s->job);
  free(s->token);
  if (s->ranks)
    for (size_t i = 0; i < s->size; i++) {
      free(s->ranks[i].worker);
      free(s->ranks[i].address);
    }
  free(s->ranks);
  memset(s, 0, sizeof *s);
}

static int token_valid(const char *t) {
  if (t == NULL) return 0;
  size_t n = strlen(t);
  if (n < 16 || n > 256) return 0;
  return strspn(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_.-") == n;
}

kolo_status kolo_ringspec_validate(const kolo_ringspec *s) {
  if (s == NULL) return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring spec is NULL");
  if (!kolo_keys_name_valid(s->job))
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring spec: job id '%.64s' is not valid", s->job ? s->job : "(null)");
  if (s->epoch < 0 || s->epoch > (int64_t)1 << 53)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring spec: epoch must be in 0..2^53");
  if (!token_valid(s->token))
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring spec: token must be 16-256 characters of [A-Za-z0-9+/=_.-]");
  if (s->size < 1 || s->size > KOLO_RINGSPEC_MAX_SIZE || s->ranks == NULL)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring spec: size must be 1..%d with one entry per rank",
                          KOLO_RINGSPEC_MAX_SIZE);
  for (size_t i = 0; i < s->size; i++) {
    if (!kolo_keys_name_valid(s->ranks[i].worker))
      return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring spec: rank %zu has an invalid worker id", i);
    if (!kolo_member_address_valid(s->ranks[i].address))
      return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring spec: rank %zu address '%.64s' is not host:port", i,
                            s->ranks[i].address ? s->ranks[i].address : "(null)");
    for (size_t k = 0; k < i; k++)
      if (strcmp(s->ranks[k].worker, s->ranks[i].worker) == 0)
        return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring spec: worker '%s' holds ranks %zu and %zu",
                              s->ranks[i].worker, k, i);
  }
  return KOLO_OK;
}

kolo_status kolo_ringspec_encode(const kolo_ringspec *s, char **json) {
  *json = NULL;
  kolo_status rc = kolo_ringspec_validate(s);
  if (rc != KOLO_OK) return rc;
  json_t *ranks = json_array();
  for (size_t i = 0; ranks && i < s->size; i++)
    json_array_append_new(ranks, json_pack("{s:I, s:s, s:s}", "rank", (json_int_t)i, "worker", s->ranks[i].worker,
                                           "address", s->ranks[i].address));
  json_t *o = ranks ? json_pack("{s:s, s:I, s:s, s:I, s:o}", "job", s->job, "epoch", (json_int_t)s->epoch, "token",
                                s->token, "size", (json_int_t)s->size, "ranks", ranks)
                    : NULL;
  if (o && s->has_nccl_id) {
    char id[KOLO_RINGSPEC_NCCL_ID_BYTES * 2];
    kolo_base64_encode(s->nccl_id, KOLO_RINGSPEC_NCCL_ID_BYTES, id);
    json_object_set_new(o, "nccl_id", json_string(id));
  }
  *json = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(o);
  return *json ? KOLO_OK : kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory encoding a ring spec");
}

/* Fails on any member of o not listed in allowed (NULL-terminated). */
static kolo_status only_fields(const json_t *o, const char *what, const char *const *allowed) {
  const char *key;
  json_t *value;
  json_object_foreach((json_t *)o, key, value) {
    int known = 0;
    for (size_t i = 0; allowed[i]; i++) known |= strcmp(key, allowed[i]) == 0;
    if (!known) return kolo_etcd_fail(KOLO_ERR_PARSE, "ring spec: unknown field '%.64s' in %s", key, what);
  }
  return KOLO_OK;
}

static kolo_status get_string(const json_t *o, const char *name, const char *what, char **out) {
  json_t *v = json_object_get(o, name);
  if (v == NULL) return kolo_etcd_fail(KOLO_ERR_PARSE, "ring spec: %s has no '%s'", what, name);
  if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
    return kolo_etcd_fail(KOLO_ERR_PARSE, "ring spec: '%s' of %s is not a string", name, what);
  *out = strdup(json_string_value(v));
  return *out ? KOLO_OK : kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
}

static kolo_status get_int(const json_t *o, const char *name, const char *what, json_int_t *out) {
  json_t *v = json_object_get(o, name);
  if (v == NULL) return kolo_etcd_fail(KOLO_ERR_PARSE, "ring spec: %s has no '%s'", what, name);
  if (!json_is_integer(v)) return kolo_etcd_fail(KOLO_ERR_PARSE, "ring spec: '%s' of %s is not an integer", name, what);
  *out = json_integer_value(v);
  return KOLO_OK;
}

kolo_status kolo_ringspec_decode(const char *text, size_t len, kolo_ringspec *out) {
  static const char *const top_fields[] = {"job", "epoch", "token", "size", "ranks", "nccl_id", NULL};
  static const char *const rank_fields[] = {"rank", "worker", "address", NULL};
  memset(out, 0, sizeof *out);
  json_error_t error;
  json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &error);
  kolo_status rc = KOLO_OK;
  json_int_t epoch = 0, size = 0;
  if (o == NULL || !json_is_object(o)) {
    rc = kolo_etcd_fail(KOLO_ERR_PARSE, "ring spec: malformed JSON: %s", o ? "not an object" : error.text);
    goto out;
  }
  rc = only_fields(o, "the spec", top_fields);
  if (rc == KOLO_OK) rc = get_string(o, "job", "the spec", &out->job);
  if (rc == KOLO_OK) rc = get_int(o, "epoch", "the spec", &epoch);
  if (rc == KOLO_OK) rc = get_string(o, "token", "the spec", &out->token);
  if (rc == KOLO_OK) rc = get_int(o, "size", "the spec", &size);
  if (rc != KOLO_OK) goto out;
  out->epoch = epoch;
  json_t *ranks = json_object_get(o, "ranks");
  if (!json_is_array(ranks)) {
    rc = kolo_etcd_fail(KOLO_ERR_PARSE, "ring spec: 'ranks' is missing or not an array");
    goto out;
  }
  if (size < 1 || size > KOLO_RINGSPEC_MAX_SIZE || (size_t)size != json_array_size(ranks)) {
    rc = kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring spec: size %lld does not match %zu ranks (1..%d)", (long long)size,
                        json_array_size(ranks), KOLO_RINGSPEC_MAX_SIZE);
    goto out;
  }
  out->ranks = calloc((size_t)size, sizeof *out->ranks);
  if (out->ranks == NULL) {
    rc = kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
    goto out;
  }
  out->size = (size_t)size;
  for (size_t i = 0; i < out->size; i++) {
    json_t *r = json_array_get(ranks, i);
    json_int_t rank = -1;
    if (!json_is_object(r)) {
      rc = kolo_etcd_fail(KOLO_ERR_PARSE, "ring spec: rank entry %zu is not an object", i);
      goto out;
    }
    rc = only_fields(r, "a rank entry", rank_fields);
    if (rc == KOLO_OK) rc = get_int(r, "rank", "a rank entry", &rank);
    if (rc == KOLO_OK) rc = get_string(r, "worker", "a rank entry", &out->ranks[i].worker);
    if (rc == KOLO_OK) rc = get_string(r, "address", "a rank entry", &out->ranks[i].address);
    if (rc != KOLO_OK) goto out;
    if (rank != (json_int_t)i) {
      rc = kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring spec: entry %zu says rank %lld (ranks must be listed in order)", i,
                          (long long)rank);
      goto out;
    }
  }
  json_t *nccl = json_object_get(o, "nccl_id");
  if (nccl != NULL) {
    unsigned char *id = NULL;
    size_t id_len = 0;
    if (!json_is_string(nccl)) {
      rc = kolo_etcd_fail(KOLO_ERR_PARSE, "ring spec: 'nccl_id' is not a string");
      goto out;
    }
    if (kolo_base64_decode_alloc(json_string_value(nccl), json_string_length(nccl), &id, &id_len) != KOLO_OK ||
        id_len != KOLO_RINGSPEC_NCCL_ID_BYTES) {
      free(id);
      rc = kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "ring spec: 'nccl_id' must be base64 of exactly %d bytes",
                          KOLO_RINGSPEC_NCCL_ID_BYTES);
      goto out;
    }
    memcpy(out->nccl_id, id, KOLO_RINGSPEC_NCCL_ID_BYTES);
    out->has_nccl_id = 1;
    free(id);
  }
  rc = kolo_ringspec_validate(out);
out:
  json_decref(o);
  if (rc != KOLO_OK) kolo_ringspec_clear(out);
  return rc;
}

int kolo_ringspec_rank_of(const kolo_ringspec *s, const char *worker) {
  for (size_t i = 0; worker && i < s->size; i++)
    if (strcmp(s->ranks[i].worker, worker) == 0) return (int)i;
  return -1;
}
