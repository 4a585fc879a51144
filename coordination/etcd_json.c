/* JSON <-> struct conversions for the etcd gateway: etcd's int64-as-string
 * numbers, base64 keys and values, KeyValue / RangeResponse objects, prefix range
 * ends, and the lines of a watch stream. Pure functions, unit-tested. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordination/base64.h"
#include "coordination/etcd_internal.h"

kolo_status kolo_etcd_json_int64(const json_t *object, const char *name, int64_t *out) {
  *out = 0;
  json_t *v = json_object_get(object, name);
  if (v == NULL || json_is_null(v)) return KOLO_OK;
  if (json_is_integer(v)) {
    *out = (int64_t)json_integer_value(v);
    return KOLO_OK;
  }
  const char *s = json_string_value(v);
  if (s == NULL || s[0] == '\0')
    return kolo_etcd_fail(KOLO_ERR_PARSE, "etcd reply: field '%s' is not an integer", name);
  char *end = NULL;
  errno = 0;
  long long n = strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0')
    return kolo_etcd_fail(KOLO_ERR_PARSE, "etcd reply: field '%s' = '%.40s' is not an integer",
                          name, s);
  *out = (int64_t)n;
  return KOLO_OK;
}

kolo_status kolo_etcd_json_bool(const json_t *object, const char *name, int *out) {
  *out = 0;
  json_t *v = json_object_get(object, name);
  if (v == NULL || json_is_null(v)) return KOLO_OK;
  if (!json_is_boolean(v))
    return kolo_etcd_fail(KOLO_ERR_PARSE, "etcd reply: field '%s' is not a boolean", name);
  *out = json_is_true(v);
  return KOLO_OK;
}

kolo_status kolo_etcd_json_set_bytes(json_t *object, const char *name, kolo_etcd_bytes bytes) {
  char *text = NULL;
  if (kolo_base64_encode_alloc(bytes.data, bytes.len, &text) != KOLO_OK)
    return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory encoding '%s'", name);
  int bad = json_object_set_new(object, name, json_string(text));
  free(text);
  return bad ? kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory building JSON") : KOLO_OK;
}

kolo_status kolo_etcd_json_set_int64(json_t *object, const char *name, int64_t n) {
  char text[32];
  snprintf(text, sizeof text, "%" PRId64, n);
  return json_object_set_new(object, name, json_string(text))
             ? kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory building JSON")
             : KOLO_OK;
}

void kolo_etcd_kv_clear(kolo_etcd_kv *kv) {
  if (kv == NULL) return;
  free(kv->key);
  free(kv->value);
  memset(kv, 0, sizeof *kv);
}

/* Decodes a base64 field (absent = empty) into a NUL-terminated buffer. */
static kolo_status decode_field(const json_t *object, const char *name, int required,
                                unsigned char **out, size_t *len) {
  json_t *v = json_object_get(object, name);
  if (v == NULL) {
    if (required) return kolo_etcd_fail(KOLO_ERR_PARSE, "etcd reply: key-value has no '%s'", name);
    *out = calloc(1, 1);
    *len = 0;
    return *out ? KOLO_OK : kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  }
  const char *text = json_string_value(v);
  if (text == NULL) return kolo_etcd_fail(KOLO_ERR_PARSE, "etcd reply: '%s' is not a string", name);
  kolo_status rc = kolo_base64_decode_alloc(text, json_string_length(v), out, len);
  if (rc == KOLO_ERR_PARSE)
    return kolo_etcd_fail(KOLO_ERR_PARSE, "etcd reply: '%s' is not valid base64: '%.40s'", name,
                          text);
  return rc == KOLO_OK ? rc : kolo_etcd_fail(rc, "out of memory");
}

kolo_status kolo_etcd_kv_from_json(const json_t *object, kolo_etcd_kv *kv) {
  memset(kv, 0, sizeof *kv);
  if (!json_is_object(object))
    return kolo_etcd_fail(KOLO_ERR_PARSE, "etcd reply: key-value is not an object");
  kolo_status rc = decode_field(object, "key", 1, &kv->key, &kv->key_len);
  if (rc == KOLO_OK) rc = decode_field(object, "value", 0, &kv->value, &kv->value_len);
  if (rc == KOLO_OK) rc = kolo_etcd_json_int64(object, "create_revision", &kv->create_revision);
  if (rc == KOLO_OK) rc = kolo_etcd_json_int64(object, "mod_revision", &kv->mod_revision);
  if (rc == KOLO_OK) rc = kolo_etcd_json_int64(object, "version", &kv->version);
  if (rc == KOLO_OK) rc = kolo_etcd_json_int64(object, "lease", &kv->lease);
  if (rc != KOLO_OK) kolo_etcd_kv_clear(kv);
  return rc;
}

kolo_status kolo_etcd_header_revision(const json_t *reply, int64_t *revision) {
  *revision = 0;
  json_t *header = json_object_get(reply, "header");
  if (header == NULL) return KOLO_OK;
  if (!json_is_object(header))
    return kolo_etcd_fail(KOLO_ERR_PARSE, "etcd reply: 'header' is not an object");
  return kolo_etcd_json_int64(header, "revision", revision);
}

void kolo_etcd_range_result_free(kolo_etcd_range_result *result) {
  if (result == NULL) return;
  for (size_t i = 0; i < result->count; i++) kolo_etcd_kv_clear(&result->kvs[i]);
  free(result->kvs);
  memset(result, 0, sizeof *result);
}

/* Parses a JSON array of KeyValue objects into kvs/count. */
static kolo_status kvs_from_json(const json_t *array, kolo_etcd_kv **kvs, size_t *count) {
  *kvs = NULL;
  *count = 0;
  if (array == NULL) return KOLO_OK;
  if (!json_is_array(array))
    return kolo_etcd_fail(KOLO_ERR_PARSE, "etcd reply: 'kvs' is not an array");
  size_t n = json_array_size(array);
  if (n == 0) return KOLO_OK;
  *kvs = calloc(n, sizeof **kvs);
  if (*kvs == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  for (size_t i = 0; i < n; i++) {
    kolo_status rc = kolo_etcd_kv_from_json(json_array_get(array, i), &(*kvs)[i]);
    if (rc != KOLO_OK) {
      for (size_t k = 0; k < i; k++) kolo_etcd_kv_clear(&(*kvs)[k]);
      free(*kvs);
      *kvs = NULL;
      return rc;
    }
  }
  *count = n;
  return KOLO_OK;
}

kolo_status kolo_etcd_range_from_json(const json_t *reply, kolo_etcd_range_result *out) {
  memset(out, 0, sizeof *out);
  if (!json_is_object(reply))
    return kolo_etcd_fail(KOLO_ERR_PARSE, "etcd reply: range is not an object");
  kolo_status rc = kolo_etcd_header_revision(reply, &out->revision);
  if (rc == KOLO_OK) rc = kolo_etcd_json_bool(reply, "more", &out->more);
  if (rc == KOLO_OK) rc = kolo_etcd_json_int64(reply, "count", &out->total);
  if (rc == KOLO_OK) rc = kvs_from_json(json_object_get(reply, "kvs"), &out->kvs, &out->count);
  if (rc != KOLO_OK) kolo_etcd_range_result_free(out);
  return rc;
}

kolo_status kolo_etcd_prefix_end(kolo_etcd_bytes prefix, unsigned char **end, size_t *end_len) {
  const unsigned char *p = prefix.data;
  size_t n = prefix.len;
  while (n > 0 && p[n - 1] == 0xff) n--;
  if (n == 0) {
    /* Every key (etcd's convention: range_end "\0" means "to the end"). */
    *end = calloc(1, 2);
    *end_len = 1;
    return *end ? KOLO_OK : kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  }
  *end = malloc(n + 1);
  if (*end == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  memcpy(*end, p, n);
  (*end)[n - 1]++;
  (*end)[n] = '\0';
  *end_len = n;
  return KOLO_OK;
}

kolo_status kolo_etcd_range_request_json(const kolo_etcd_range_opts *opts, json_t **out) {
  *out = NULL;
  json_t *body = json_object();
  if (body == NULL) return kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
  kolo_status rc = kolo_etcd_json_set_bytes(body, "key", opts->key);
  if (rc == KOLO_OK && opts->prefix) {
    unsigned char *end = NULL;
    size_t end_len = 0;
    rc = kolo_etcd_prefix_end(opts->key, &end, &end_len);
    if (rc == KOLO_OK) {
      kolo_etcd_bytes e = {end, end_len};
      rc = kolo_etcd_json_set_bytes(body, "range_end", e);
    }
    free(end);
  }
  if (rc == KOLO_OK && opts->limit > 0) rc = kolo_etcd_json_set_int64(body, "limit", opts->limit);
  if (rc == KOLO_OK && opts->revision > 0)
    rc = kolo_etcd_json_set_int64(body, "revision", opts->revision);
  if (rc == KOLO_OK && opts->keys_only) json_object_set_new(body, "keys_only", json_true());
  if (rc == KOLO_OK && opts->sort != KOLO_ETCD_SORT_KEY) {
    json_object_set_new(body, "sort_target", json_string("CREATE"));
    json_object_set_new(
        body, "sort_order",
        json_string(opts->sort == KOLO_ETCD_SORT_CREATE_ASC ? "ASCEND" : "DESCEND"));
  }
  if (rc == KOLO_OK && opts->max_create_revision > 0)
    rc = kolo_etcd_json_set_int64(body, "max_create_revision", opts->max_create_revision);
  if (rc != KOLO_OK) {
    json_decref(body);
    return rc;
  }
  *out = body;
  return KOLO_OK;
}

void kolo_etcd_events_free(kolo_etcd_event *events, size_t count) {
  for (size_t i = 0; i < count; i++) {
    kolo_etcd_kv_clear(&events[i].kv);
    kolo_etcd_kv_clear(&events[i].prev_kv);
  }
  free(events);
}

void kolo_etcd_watch_message_clear(kolo_etcd_watch_message *m) {
  kolo_etcd_events_free(m->events, m->event_count);
  free(m->cancel_reason);
  memset(m, 0, sizeof *m);
}

/* Parses one mvccpb.Event. A PUT carries no "type" (its zero value). */
static kolo_status event_from_json(const json_t *object, kolo_etcd_event *event) {
  memset(event, 0, sizeof *event);
  if (!json_is_object(object))
    return kolo_etcd_fail(KOLO_ERR_PARSE, "watch event is not an object");
  json_t *type = json_object_get(object, "type");
  const char *t = type ? json_string_value(type) : "PUT";
  if (t == NULL) return kolo_etcd_fail(KOLO_ERR_PARSE, "watch event type is not a string");
  if (strcmp(t, "PUT") == 0)
    event->type = KOLO_ETCD_EVENT_PUT;
  else if (strcmp(t, "DELETE") == 0)
    event->type = KOLO_ETCD_EVENT_DELETE;
  else
    return kolo_etcd_fail(KOLO_ERR_PARSE, "watch event has unknown type '%.20s'", t);
  kolo_status rc = kolo_etcd_kv_from_json(json_object_get(object, "kv"), &event->kv);
  json_t *prev = json_object_get(object, "prev_kv");
  if (rc == KOLO_OK && prev != NULL) rc = kolo_etcd_kv_from_json(prev, &event->prev_kv);
  if (rc != KOLO_OK) {
    kolo_etcd_kv_clear(&event->kv);
    kolo_etcd_kv_clear(&event->prev_kv);
  }
  return rc;
}

kolo_status kolo_etcd_watch_message_parse(const char *line, size_t len,
                                          kolo_etcd_watch_message *out) {
  memset(out, 0, sizeof *out);
  json_error_t error;
  json_t *json = json_loadb(line, len, 0, &error);
  kolo_status rc = KOLO_OK;
  if (json == NULL || !json_is_object(json)) {
    rc = kolo_etcd_fail(KOLO_ERR_PARSE, "malformed watch message: %s",
                        json ? "not an object" : error.text);
    goto out;
  }
  json_t *err = json_object_get(json, "error");
  if (err != NULL) {
    const char *text = json_string_value(json_object_get(json, "message"));
    json_t *code = json_object_get(json, "code");
    int c = json_is_integer(code) ? (int)json_integer_value(code) : 2;
    rc = kolo_etcd_fail(kolo_etcd_error_status(c, text), "etcd watch error: %s (code %d)",
                        text ? text : "(no message)", c);
    goto out;
  }
  json_t *result = json_object_get(json, "result");
  if (!json_is_object(result)) {
    rc = kolo_etcd_fail(KOLO_ERR_PARSE, "watch message has no 'result' object");
    goto out;
  }
  rc = kolo_etcd_json_bool(result, "created", &out->created);
  if (rc == KOLO_OK) rc = kolo_etcd_json_bool(result, "canceled", &out->canceled);
  if (rc == KOLO_OK) rc = kolo_etcd_json_int64(result, "compact_revision", &out->compact_revision);
  if (rc == KOLO_OK) rc = kolo_etcd_header_revision(result, &out->header_revision);
  if (rc != KOLO_OK) goto out;
  /* cluster_id is a uint64 sent as a decimal string. */
  const char *cluster =
      json_string_value(json_object_get(json_object_get(result, "header"), "cluster_id"));
  if (cluster != NULL) {
    char *end = NULL;
    errno = 0;
    unsigned long long id = strtoull(cluster, &end, 10);
    if (errno != 0 || end == cluster || *end != '\0') {
      rc = kolo_etcd_fail(KOLO_ERR_PARSE, "watch message: cluster_id '%.30s' is not a number",
                          cluster);
      goto out;
    }
    out->cluster_id = (uint64_t)id;
  }
  const char *reason = json_string_value(json_object_get(result, "cancel_reason"));
  if (reason && (out->cancel_reason = strdup(reason)) == NULL) {
    rc = kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
    goto out;
  }
  json_t *events = json_object_get(result, "events");
  if (events != NULL) {
    if (!json_is_array(events)) {
      rc = kolo_etcd_fail(KOLO_ERR_PARSE, "watch message: 'events' is not an array");
      goto out;
    }
    size_t n = json_array_size(events);
    if (n > 0) {
      out->events = calloc(n, sizeof *out->events);
      if (out->events == NULL) {
        rc = kolo_etcd_fail(KOLO_ERR_NO_MEMORY, "out of memory");
        goto out;
      }
      for (size_t i = 0; i < n; i++) {
        rc = event_from_json(json_array_get(events, i), &out->events[i]);
        if (rc != KOLO_OK) goto out;
        out->event_count = i + 1;
      }
    }
  }
out:
  json_decref(json);
  if (rc != KOLO_OK) kolo_etcd_watch_message_clear(out);
  return rc;
}
