/* Key-value calls of the etcd client: put, get, range (paged), delete, compact
 * and transactions, each one request with the client's deadline. */
#include <stdlib.h>
#include <string.h>

#include "coordination/etcd_internal.h"

/* Refuses keys and values the gateway would reject, before any I/O. */
static kolo_status check_key(const kolo_etcd *c, kolo_etcd_bytes key, const char *what) {
  if (key.len == 0 || key.data == NULL)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "%s: empty key", what);
  if (key.len > 16 * 1024)
    return kolo_etcd_fail(KOLO_ERR_TOO_LARGE, "%s: key of %zu bytes is too long (16 KiB max)", what,
                          key.len);
  return KOLO_OK;
}

static kolo_status check_value(const kolo_etcd *c, kolo_etcd_bytes value, const char *what) {
  if (value.len > 0 && value.data == NULL)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "%s: value is NULL", what);
  if (value.len > c->max_value_bytes)
    return kolo_etcd_fail(KOLO_ERR_TOO_LARGE,
                          "%s: value of %zu bytes exceeds the limit of %zu bytes", what, value.len,
                          c->max_value_bytes);
  return KOLO_OK;
}

/* Moves the first kv of a range result into *out (the rest is freed). */
static void take_first(kolo_etcd_range_result *r, kolo_etcd_kv *out) {
  memset(out, 0, sizeof *out);
  if (r->count > 0) {
    *out = r->kvs[0];
    memset(&r->kvs[0], 0, sizeof r->kvs[0]);
  }
  kolo_etcd_range_result_free(r);
}

/* Builds a PutRequest body. */
static kolo_status put_json(kolo_etcd_bytes key, kolo_etcd_bytes value, int64_t lease, int prev,
                            json_t **out) {
  json_t *body = json_object();
  if (body == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  kolo_status rc = kolo_etcd_json_set_bytes(body, "key", key);
  if (rc == KOLO_OK) rc = kolo_etcd_json_set_bytes(body, "value", value);
  if (rc == KOLO_OK && lease) rc = kolo_etcd_json_set_int64(body, "lease", lease);
  if (rc == KOLO_OK && prev) json_object_set_new(body, "prev_kv", json_true());
  if (rc != KOLO_OK) {
    json_decref(body);
    body = NULL;
  }
  *out = body;
  return rc;
}

/* Builds a DeleteRangeRequest body. */
static kolo_status delete_json(kolo_etcd_bytes key, int prefix, int prev, json_t **out) {
  json_t *body = json_object();
  if (body == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  kolo_status rc = kolo_etcd_json_set_bytes(body, "key", key);
  if (rc == KOLO_OK && prefix) {
    unsigned char *end = NULL;
    size_t end_len = 0;
    rc = kolo_etcd_prefix_end(key, &end, &end_len);
    if (rc == KOLO_OK)
      rc = kolo_etcd_json_set_bytes(body, "range_end", (kolo_etcd_bytes){end, end_len});
    free(end);
  }
  if (rc == KOLO_OK && prev) json_object_set_new(body, "prev_kv", json_true());
  if (rc != KOLO_OK) {
    json_decref(body);
    body = NULL;
  }
  *out = body;
  return rc;
}

kolo_status kolo_etcd_put(kolo_etcd *c, kolo_etcd_bytes key, kolo_etcd_bytes value, int64_t lease,
                          kolo_etcd_kv *prev, int64_t *revision) {
  if (prev) memset(prev, 0, sizeof *prev);
  kolo_status rc = check_key(c, key, "put");
  if (rc == KOLO_OK) rc = check_value(c, value, "put");
  if (rc != KOLO_OK) return rc;
  json_t *body = NULL, *reply = NULL;
  rc = put_json(key, value, lease, prev != NULL, &body);
  if (rc == KOLO_OK) rc = kolo_etcd_call(c, "kv/put", body, 0, 0, NULL, &reply);
  int64_t written = 0;
  if (rc == KOLO_OK) rc = kolo_etcd_header_revision(reply, &written);
  if (rc == KOLO_OK) kolo_etcd_note_write(c, written);
  if (rc == KOLO_OK && revision) *revision = written;
  json_t *p = reply ? json_object_get(reply, "prev_kv") : NULL;
  if (rc == KOLO_OK && prev && p) rc = kolo_etcd_kv_from_json(p, prev);
  json_decref(body);
  json_decref(reply);
  return rc;
}

kolo_status kolo_etcd_range(kolo_etcd *c, const kolo_etcd_range_opts *opts,
                            kolo_etcd_range_result *out) {
  memset(out, 0, sizeof *out);
  kolo_status rc = check_key(c, opts->key, "range");
  if (rc != KOLO_OK) return rc;
  json_t *body = NULL, *reply = NULL;
  rc = kolo_etcd_range_request_json(opts, &body);
  if (rc == KOLO_OK)
    rc = kolo_etcd_call(c, "kv/range", body, 0, KOLO_ETCD_IDEMPOTENT, NULL, &reply);
  if (rc == KOLO_OK) rc = kolo_etcd_range_from_json(reply, out);
  json_decref(body);
  json_decref(reply);
  return rc;
}

kolo_status kolo_etcd_get(kolo_etcd *c, kolo_etcd_bytes key, kolo_etcd_kv *out, int64_t *revision) {
  memset(out, 0, sizeof *out);
  kolo_etcd_range_opts opts = {.key = key};
  kolo_etcd_range_result r;
  kolo_status rc = kolo_etcd_range(c, &opts, &r);
  if (rc != KOLO_OK) return rc;
  if (revision) *revision = r.revision;
  if (r.count == 0) {
    kolo_etcd_range_result_free(&r);
    return kolo_etcd_fail(KOLO_ERR_NOT_FOUND, "etcd get: key '%.*s' does not exist",
                          (int)(key.len > 200 ? 200 : key.len), (const char *)key.data);
  }
  take_first(&r, out);
  return KOLO_OK;
}

kolo_status kolo_etcd_range_prefix(kolo_etcd *c, kolo_etcd_bytes prefix, int64_t page_size,
                                   kolo_etcd_range_result *out) {
  memset(out, 0, sizeof *out);
  unsigned char *end = NULL;
  size_t end_len = 0;
  unsigned char *cursor = NULL;
  size_t cap = 0;
  kolo_status rc = check_key(c, prefix, "range");
  if (rc == KOLO_OK) rc = kolo_etcd_prefix_end(prefix, &end, &end_len);
  if (rc != KOLO_OK) return rc;
  kolo_etcd_bytes from = prefix;
  if (page_size <= 0) page_size = 500;
  for (;;) {
    /* Each page starts at the key after the last one read and stops at the prefix end. */
    json_t *body = json_object(), *reply = NULL;
    if (body == NULL) {
      rc = kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
      break;
    }
    rc = kolo_etcd_json_set_bytes(body, "key", from);
    if (rc == KOLO_OK)
      rc = kolo_etcd_json_set_bytes(body, "range_end", (kolo_etcd_bytes){end, end_len});
    if (rc == KOLO_OK) rc = kolo_etcd_json_set_int64(body, "limit", page_size);
    if (rc == KOLO_OK && out->revision)
      rc = kolo_etcd_json_set_int64(body, "revision", out->revision);
    if (rc == KOLO_OK)
      rc = kolo_etcd_call(c, "kv/range", body, 0, KOLO_ETCD_IDEMPOTENT, NULL, &reply);
    kolo_etcd_range_result page = {0};
    if (rc == KOLO_OK) rc = kolo_etcd_range_from_json(reply, &page);
    json_decref(body);
    json_decref(reply);
    if (rc != KOLO_OK) break;
    if (out->revision == 0) {
      out->revision = page.revision;
      out->total = page.total;
    }
    if (page.count > 0) {
      kolo_etcd_kv *grown = realloc(out->kvs, (out->count + page.count) * sizeof *grown);
      if (grown == NULL) {
        kolo_etcd_range_result_free(&page);
        rc = kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
        break;
      }
      out->kvs = grown;
      memcpy(out->kvs + out->count, page.kvs, page.count * sizeof *page.kvs);
      out->count += page.count;
      free(page.kvs);
      page.kvs = NULL;
    }
    int more = page.more && page.count > 0;
    if (!more) break;
    /* Continuation: the last key with a 0 byte appended is the next possible key. */
    const kolo_etcd_kv *last = &out->kvs[out->count - 1];
    if (cap < last->key_len + 1) {
      cap = last->key_len + 1;
      unsigned char *grown = realloc(cursor, cap);
      if (grown == NULL) {
        rc = kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
        break;
      }
      cursor = grown;
    }
    memcpy(cursor, last->key, last->key_len);
    cursor[last->key_len] = 0;
    from.data = cursor;
    from.len = last->key_len + 1;
  }
  free(end);
  free(cursor);
  if (rc != KOLO_OK) kolo_etcd_range_result_free(out);
  return rc;
}

kolo_status kolo_etcd_delete(kolo_etcd *c, kolo_etcd_bytes key, int prefix, int64_t *deleted,
                             int64_t *revision) {
  if (deleted) *deleted = 0;
  kolo_status rc = check_key(c, key, "delete");
  if (rc != KOLO_OK) return rc;
  json_t *body = NULL, *reply = NULL;
  rc = delete_json(key, prefix, 0, &body);
  if (rc == KOLO_OK) rc = kolo_etcd_call(c, "kv/deleterange", body, 0, 0, NULL, &reply);
  int64_t n = 0;
  if (rc == KOLO_OK) rc = kolo_etcd_json_int64(reply, "deleted", &n);
  int64_t written = 0;
  if (rc == KOLO_OK) rc = kolo_etcd_header_revision(reply, &written);
  if (rc == KOLO_OK && n > 0) kolo_etcd_note_write(c, written);
  if (rc == KOLO_OK && revision) *revision = written;
  if (rc == KOLO_OK && deleted) *deleted = n;
  json_decref(body);
  json_decref(reply);
  return rc;
}

kolo_status kolo_etcd_compact(kolo_etcd *c, int64_t revision) {
  json_t *body = json_object(), *reply = NULL;
  if (body == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  kolo_status rc = kolo_etcd_json_set_int64(body, "revision", revision);
  if (rc == KOLO_OK) json_object_set_new(body, "physical", json_true());
  if (rc == KOLO_OK) rc = kolo_etcd_call(c, "kv/compaction", body, 0, 0, NULL, &reply);
  json_decref(body);
  json_decref(reply);
  return rc;
}

/* ---- txn ---- */

static const char *target_name(kolo_etcd_cmp_target t) {
  switch (t) {
    case KOLO_ETCD_CMP_VERSION:
      return "VERSION";
    case KOLO_ETCD_CMP_CREATE:
      return "CREATE";
    case KOLO_ETCD_CMP_MOD:
      return "MOD";
    case KOLO_ETCD_CMP_VALUE:
      return "VALUE";
    case KOLO_ETCD_CMP_LEASE:
      return "LEASE";
  }
  return NULL;
}

static const char *result_name(kolo_etcd_cmp_result r) {
  switch (r) {
    case KOLO_ETCD_EQUAL:
      return "EQUAL";
    case KOLO_ETCD_NOT_EQUAL:
      return "NOT_EQUAL";
    case KOLO_ETCD_GREATER:
      return "GREATER";
    case KOLO_ETCD_LESS:
      return "LESS";
  }
  return NULL;
}

static kolo_status compare_json(const kolo_etcd *c, const kolo_etcd_compare *cmp, json_t **out) {
  *out = NULL;
  const char *target = target_name(cmp->target), *result = result_name(cmp->result);
  if (target == NULL || result == NULL)
    return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "txn: unknown compare target or result");
  kolo_status rc = check_key(c, cmp->key, "txn compare");
  if (rc != KOLO_OK) return rc;
  json_t *o = json_pack("{s:s, s:s}", "target", target, "result", result);
  if (o == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  rc = kolo_etcd_json_set_bytes(o, "key", cmp->key);
  if (rc == KOLO_OK) {
    switch (cmp->target) {
      case KOLO_ETCD_CMP_VERSION:
        rc = kolo_etcd_json_set_int64(o, "version", cmp->number);
        break;
      case KOLO_ETCD_CMP_CREATE:
        rc = kolo_etcd_json_set_int64(o, "create_revision", cmp->number);
        break;
      case KOLO_ETCD_CMP_MOD:
        rc = kolo_etcd_json_set_int64(o, "mod_revision", cmp->number);
        break;
      case KOLO_ETCD_CMP_LEASE:
        rc = kolo_etcd_json_set_int64(o, "lease", cmp->number);
        break;
      case KOLO_ETCD_CMP_VALUE:
        rc = check_value(c, cmp->value, "txn compare");
        if (rc == KOLO_OK) rc = kolo_etcd_json_set_bytes(o, "value", cmp->value);
        break;
    }
  }
  if (rc != KOLO_OK) {
    json_decref(o);
    return rc;
  }
  *out = o;
  return KOLO_OK;
}

static kolo_status op_json(const kolo_etcd *c, const kolo_etcd_op *op, json_t **out) {
  *out = NULL;
  json_t *inner = NULL;
  const char *name = NULL;
  kolo_status rc = check_key(c, op->key, "txn op");
  if (rc != KOLO_OK) return rc;
  switch (op->kind) {
    case KOLO_ETCD_OP_PUT:
      name = "request_put";
      rc = check_value(c, op->value, "txn put");
      if (rc == KOLO_OK) rc = put_json(op->key, op->value, op->lease, op->prev_kv, &inner);
      break;
    case KOLO_ETCD_OP_DELETE:
      name = "request_delete_range";
      rc = delete_json(op->key, op->prefix, op->prev_kv, &inner);
      break;
    case KOLO_ETCD_OP_RANGE: {
      name = "request_range";
      kolo_etcd_range_opts opts = {.key = op->key, .prefix = op->prefix};
      rc = kolo_etcd_range_request_json(&opts, &inner);
      break;
    }
    default:
      return kolo_etcd_fail(KOLO_ERR_INVALID_ARG, "txn: unknown op kind %d", (int)op->kind);
  }
  if (rc != KOLO_OK) return rc;
  *out = json_pack("{s:o}", name, inner);
  return *out ? KOLO_OK : kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
}

void kolo_etcd_txn_result_free(kolo_etcd_txn_result *result) {
  if (result == NULL) return;
  for (size_t i = 0; i < result->count; i++)
    kolo_etcd_range_result_free(&result->responses[i].range);
  free(result->responses);
  memset(result, 0, sizeof *result);
}

/* Parses one ResponseOp: {"response_range"|"response_put"|"response_delete_range": {...}}. */
static kolo_status response_from_json(const json_t *o, kolo_etcd_op_response *r) {
  memset(r, 0, sizeof *r);
  json_t *inner;
  kolo_status rc = KOLO_OK;
  if ((inner = json_object_get(o, "response_range")) != NULL) {
    r->kind = KOLO_ETCD_OP_RANGE;
    rc = kolo_etcd_range_from_json(inner, &r->range);
  } else if ((inner = json_object_get(o, "response_put")) != NULL) {
    r->kind = KOLO_ETCD_OP_PUT;
    json_t *prev = json_object_get(inner, "prev_kv");
    rc = kolo_etcd_header_revision(inner, &r->range.revision);
    if (rc == KOLO_OK && prev) {
      r->range.kvs = calloc(1, sizeof *r->range.kvs);
      if (r->range.kvs == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
      rc = kolo_etcd_kv_from_json(prev, &r->range.kvs[0]);
      if (rc == KOLO_OK) r->range.count = 1;
    }
  } else if ((inner = json_object_get(o, "response_delete_range")) != NULL) {
    r->kind = KOLO_ETCD_OP_DELETE;
    rc = kolo_etcd_json_int64(inner, "deleted", &r->deleted);
    json_t *prev = json_object_get(inner, "prev_kvs");
    if (rc == KOLO_OK && prev) {
      json_t *wrapped = json_pack("{s:O}", "kvs", prev);
      rc = wrapped ? kolo_etcd_range_from_json(wrapped, &r->range)
                   : kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
      json_decref(wrapped);
    }
  } else {
    return kolo_etcd_fail(KOLO_ERR_PARSE, "etcd txn reply: unknown response op");
  }
  if (rc == KOLO_OK && inner) rc = kolo_etcd_header_revision(inner, &r->revision);
  if (rc != KOLO_OK) kolo_etcd_range_result_free(&r->range);
  return rc;
}

/* Builds a JSON array from n compares or ops. */
static kolo_status txn_array(const kolo_etcd *c, const void *items, size_t n, int compares,
                             json_t **out) {
  json_t *array = json_array();
  if (array == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *item = NULL;
    kolo_status rc = compares ? compare_json(c, (const kolo_etcd_compare *)items + i, &item)
                              : op_json(c, (const kolo_etcd_op *)items + i, &item);
    if (rc != KOLO_OK) {
      json_decref(array);
      return rc;
    }
    json_array_append_new(array, item);
  }
  *out = array;
  return KOLO_OK;
}

kolo_status kolo_etcd_txn_run(kolo_etcd *c, const kolo_etcd_txn *txn,
                              kolo_etcd_txn_result *result) {
  memset(result, 0, sizeof *result);
  json_t *compares = NULL, *success = NULL, *failure = NULL, *body = NULL, *reply = NULL;
  kolo_status rc = txn_array(c, txn->compares, txn->compare_count, 1, &compares);
  if (rc == KOLO_OK) rc = txn_array(c, txn->success, txn->success_count, 0, &success);
  if (rc == KOLO_OK) rc = txn_array(c, txn->failure, txn->failure_count, 0, &failure);
  if (rc == KOLO_OK) {
    body =
        json_pack("{s:o, s:o, s:o}", "compare", compares, "success", success, "failure", failure);
    compares = success = failure = NULL;
    if (body == NULL) rc = kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  }
  if (rc == KOLO_OK) rc = kolo_etcd_call(c, "kv/txn", body, 0, 0, NULL, &reply);
  if (rc == KOLO_OK) rc = kolo_etcd_json_bool(reply, "succeeded", &result->succeeded);
  if (rc == KOLO_OK) rc = kolo_etcd_header_revision(reply, &result->revision);
  if (rc == KOLO_OK && result->succeeded) kolo_etcd_note_write(c, result->revision);
  json_t *responses = reply ? json_object_get(reply, "responses") : NULL;
  if (rc == KOLO_OK && responses != NULL) {
    if (!json_is_array(responses)) {
      rc = kolo_etcd_fail(KOLO_ERR_PARSE, "etcd txn reply: 'responses' is not an array");
    } else if (json_array_size(responses) > 0) {
      size_t n = json_array_size(responses);
      result->responses = calloc(n, sizeof *result->responses);
      if (result->responses == NULL) rc = kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
      for (size_t i = 0; rc == KOLO_OK && i < n; i++) {
        rc = response_from_json(json_array_get(responses, i), &result->responses[i]);
        if (rc == KOLO_OK) result->count = i + 1;
      }
    }
  }
  size_t expected = result->succeeded ? txn->success_count : txn->failure_count;
  if (rc == KOLO_OK && result->count != expected)
    rc = kolo_etcd_fail(KOLO_ERR_PROTOCOL, "etcd txn reply: %zu responses for %zu ops",
                        result->count, expected);
  json_decref(compares);
  json_decref(success);
  json_decref(failure);
  json_decref(body);
  json_decref(reply);
  if (rc != KOLO_OK) kolo_etcd_txn_result_free(result);
  return rc;
}

kolo_status kolo_etcd_create_key(kolo_etcd *c, kolo_etcd_bytes key, kolo_etcd_bytes value,
                                 int64_t lease, kolo_etcd_kv *existing, int64_t *revision) {
  if (existing) memset(existing, 0, sizeof *existing);
  kolo_etcd_compare cmp = {
      .target = KOLO_ETCD_CMP_CREATE, .result = KOLO_ETCD_EQUAL, .key = key, .number = 0};
  kolo_etcd_op put = {.kind = KOLO_ETCD_OP_PUT, .key = key, .value = value, .lease = lease};
  kolo_etcd_op get = {.kind = KOLO_ETCD_OP_RANGE, .key = key};
  kolo_etcd_txn txn = {&cmp, 1, &put, 1, &get, 1};
  kolo_etcd_txn_result r;
  kolo_status rc = kolo_etcd_txn_run(c, &txn, &r);
  if (rc != KOLO_OK) return rc;
  if (r.succeeded) {
    if (revision) *revision = r.revision;
  } else {
    if (existing && r.count == 1) take_first(&r.responses[0].range, existing);
    rc = kolo_etcd_fail(KOLO_ERR_EXISTS, "etcd create: key '%.*s' already exists",
                        (int)(key.len > 200 ? 200 : key.len), (const char *)key.data);
  }
  kolo_etcd_txn_result_free(&r);
  return rc;
}
