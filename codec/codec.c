/* Implementation of codec.h: walks protobuf-c descriptors, so every message of
 * proto/kolo/v1 gets the same JSON mapping without per-message code. */
#include "codec/codec.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checks.h"

#define MEMBER_PTR(msg, offset) ((void *)((char *)(msg) + (offset)))

/* A protobuf-c map field is a repeated "...Entry" message with fields key(1), value(2). */
static int field_is_map(const ProtobufCFieldDescriptor *field) {
  if (field->label != PROTOBUF_C_LABEL_REPEATED || field->type != PROTOBUF_C_TYPE_MESSAGE) return 0;
  const ProtobufCMessageDescriptor *entry = field->descriptor;
  size_t len = strlen(entry->short_name);
  return entry->n_fields == 2 && len > 5 && strcmp(entry->short_name + len - 5, "Entry") == 0 &&
         strcmp(entry->fields[0].name, "key") == 0 && strcmp(entry->fields[1].name, "value") == 0;
}

static size_t scalar_size(ProtobufCType type) {
  switch (type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_ENUM:
      return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
      return 8;
    case PROTOBUF_C_TYPE_FLOAT:
      return sizeof(float);
    case PROTOBUF_C_TYPE_DOUBLE:
      return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL:
      return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
      return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
      return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
      return sizeof(ProtobufCMessage *);
  }
  return 0;
}

static const char hex_digits[] = "0123456789abcdef";

/* ---- open-ended values (kolo.v1.Struct / Value / ListValue): codec.h ---- */

static int is_open(const ProtobufCMessageDescriptor *d) {
  return d == &kolo__v1__struct__descriptor || d == &kolo__v1__value__descriptor ||
         d == &kolo__v1__list_value__descriptor;
}

static json_t *encode_open(const ProtobufCMessage *msg);

static json_t *encode_number(double d) {
  if (!isfinite(d)) return json_null();
  if (d == floor(d) && fabs(d) < 9223372036854775808.0) return json_integer((json_int_t)d);
  return json_real(d);
}

static json_t *encode_open_value(const Kolo__V1__Value *v) {
  if (v == NULL) return json_null();
  switch (v->kind_case) {
    case KOLO__V1__VALUE__KIND_NUMBER_VALUE:
      return encode_number(v->number_value);
    case KOLO__V1__VALUE__KIND_STRING_VALUE:
      return json_string(v->string_value ? v->string_value : ""); /* NULL if not UTF-8 */
    case KOLO__V1__VALUE__KIND_BOOL_VALUE:
      return json_boolean(v->bool_value);
    case KOLO__V1__VALUE__KIND_STRUCT_VALUE:
      return v->struct_value ? encode_open(&v->struct_value->base) : json_object();
    case KOLO__V1__VALUE__KIND_LIST_VALUE:
      return v->list_value ? encode_open(&v->list_value->base) : json_array();
    default: /* NULL_VALUE, or nothing set */
      return json_null();
  }
}

/* A Struct as an object, a ListValue as an array, a Value as itself; NULL when out of
 * memory or a string is not UTF-8 (the whole value fails: nothing is dropped silently). */
static json_t *encode_open(const ProtobufCMessage *msg) {
  if (msg->descriptor == &kolo__v1__value__descriptor)
    return encode_open_value((const Kolo__V1__Value *)msg);
  if (msg->descriptor == &kolo__v1__list_value__descriptor) {
    const Kolo__V1__ListValue *l = (const Kolo__V1__ListValue *)msg;
    json_t *out = json_array();
    for (size_t i = 0; out && i < l->n_values; i++) {
      json_t *item = encode_open_value(l->values[i]);
      if (item == NULL || json_array_append_new(out, item) != 0) {
        json_decref(out);
        out = NULL;
      }
    }
    return out;
  }
  const Kolo__V1__Struct *st = (const Kolo__V1__Struct *)msg;
  json_t *out = json_object();
  for (size_t i = 0; out && i < st->n_fields; i++) {
    const Kolo__V1__Struct__FieldsEntry *e = st->fields[i];
    json_t *item = encode_open_value(e->value);
    if (item == NULL || json_object_set_new(out, e->key ? e->key : "", item) != 0) {
      json_decref(out);
      out = NULL;
    }
  }
  return out;
}

const Kolo__V1__Value *kolo_codec_struct_get(const Kolo__V1__Struct *s, const char *key) {
  for (size_t i = s && key ? s->n_fields : 0; i > 0; i--)
    if (s->fields[i - 1]->key && strcmp(s->fields[i - 1]->key, key) == 0)
      return s->fields[i - 1]->value;
  return NULL;
}

int kolo_codec_struct_number(const Kolo__V1__Struct *s, const char *key, double *out) {
  const Kolo__V1__Value *v = kolo_codec_struct_get(s, key);
  if (v == NULL || v->kind_case != KOLO__V1__VALUE__KIND_NUMBER_VALUE || !isfinite(v->number_value))
    return 0;
  *out = v->number_value;
  return 1;
}

/* Encodes one value (not repeated) stored at ptr. */
static json_t *encode_value(const ProtobufCFieldDescriptor *field, const void *ptr) {
  switch (field->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
      return json_integer(*(const int32_t *)ptr);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
      return json_integer(*(const uint32_t *)ptr);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
      return json_integer(*(const int64_t *)ptr);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: {
      /* A JSON integer holds int64 (jansson's json_int_t); above that, the decimal string
       * proto3 JSON uses, so every uint64 comes back exactly. */
      uint64_t u = *(const uint64_t *)ptr;
      if (u <= (uint64_t)INT64_MAX) return json_integer((json_int_t)u);
      char text[24];
      snprintf(text, sizeof text, "%" PRIu64, u);
      return json_string(text);
    }
    case PROTOBUF_C_TYPE_FLOAT:
      return json_real(isfinite(*(const float *)ptr) ? *(const float *)ptr : 0.0);
    case PROTOBUF_C_TYPE_DOUBLE:
      return json_real(isfinite(*(const double *)ptr) ? *(const double *)ptr : 0.0);
    case PROTOBUF_C_TYPE_BOOL:
      return json_boolean(*(const protobuf_c_boolean *)ptr);
    case PROTOBUF_C_TYPE_ENUM: {
      int value = *(const int *)ptr;
      const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(field->descriptor, value);
      return ev ? json_string(ev->name) : json_integer(value);
    }
    case PROTOBUF_C_TYPE_STRING: {
      const char *s = *(char *const *)ptr;
      return json_string(s ? s : "");
    }
    case PROTOBUF_C_TYPE_BYTES: {
      /* Bytes as lowercase hex; kolo's messages carry none today. */
      const ProtobufCBinaryData *bin = ptr;
      char *text = malloc(bin->len * 2 + 1);
      if (text == NULL) return NULL;
      for (size_t i = 0; i < bin->len; i++) {
        text[2 * i] = hex_digits[bin->data[i] >> 4];
        text[2 * i + 1] = hex_digits[bin->data[i] & 15];
      }
      text[bin->len * 2] = '\0';
      json_t *out = json_string(text);
      free(text);
      return out;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
      const ProtobufCMessage *sub = *(ProtobufCMessage *const *)ptr;
      if (sub == NULL && field->descriptor == &kolo__v1__value__descriptor) return json_null();
      return sub ? kolo_codec_to_json(sub) : json_object();
    }
  }
  return NULL;
}

json_t *kolo_codec_to_json(const ProtobufCMessage *msg) {
  const ProtobufCMessageDescriptor *desc = msg->descriptor;
  if (is_open(desc)) return encode_open(msg);
  json_t *obj = json_object();
  if (obj == NULL) return NULL;
  for (unsigned i = 0; i < desc->n_fields; i++) {
    const ProtobufCFieldDescriptor *field = &desc->fields[i];
    const void *ptr = MEMBER_PTR(msg, field->offset);
    json_t *value = NULL;
    if (field->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
      if (*(const uint32_t *)MEMBER_PTR(msg, field->quantifier_offset) != field->id) continue;
      value = encode_value(field, ptr);
    } else if (field->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t count = *(const size_t *)MEMBER_PTR(msg, field->quantifier_offset);
      const char *array = *(char *const *)ptr;
      size_t stride = scalar_size(field->type);
      if (field_is_map(field)) {
        const ProtobufCMessageDescriptor *entry = field->descriptor;
        value = json_object();
        for (size_t k = 0; value && k < count; k++) {
          const ProtobufCMessage *e = ((ProtobufCMessage *const *)array)[k];
          const char *key = *(char *const *)MEMBER_PTR(e, entry->fields[0].offset);
          /* a key or value jansson refuses (not UTF-8) fails the whole message: never a
           * silently dropped entry */
          json_t *item = encode_value(&entry->fields[1], MEMBER_PTR(e, entry->fields[1].offset));
          if (item == NULL || json_object_set_new(value, key ? key : "", item) != 0) {
            json_decref(value);
            value = NULL;
          }
        }
      } else {
        value = json_array();
        for (size_t k = 0; value && k < count; k++) {
          json_t *item = encode_value(field, array + k * stride);
          if (item == NULL || json_array_append_new(value, item) != 0) {
            json_decref(value);
            value = NULL;
          }
        }
      }
    } else {
      if (field->type == PROTOBUF_C_TYPE_MESSAGE && *(ProtobufCMessage *const *)ptr == NULL)
        continue;
      /* a proto2 optional string left unset (NULL) is absent, as the record's owner means */
      if (field->type == PROTOBUF_C_TYPE_STRING && field->label == PROTOBUF_C_LABEL_OPTIONAL &&
          *(char *const *)ptr == NULL)
        continue;
      if (field->label == PROTOBUF_C_LABEL_OPTIONAL && field->quantifier_offset &&
          field->type != PROTOBUF_C_TYPE_MESSAGE && field->type != PROTOBUF_C_TYPE_STRING &&
          !*(const protobuf_c_boolean *)MEMBER_PTR(msg, field->quantifier_offset))
        continue;
      value = encode_value(field, ptr);
    }
    if (value == NULL || json_object_set_new(obj, field->name, value) != 0) {
      json_decref(obj);
      return NULL;
    }
  }
  return obj;
}

/* ---- decoding ---- */

typedef struct decode_ctx {
  unsigned flags;          /* KOLO_CODEC_* */
  kolo_codec_fault *fault; /* never NULL */
  /* the open-ended field being decoded: its path and what it used so far */
  const ProtobufCFieldDescriptor *open_field;
  char open_path[512];
  size_t open_values, open_bytes;
} decode_ctx;

static kolo_status fail_as(decode_ctx *ctx, kolo_codec_fault_kind kind,
                           const ProtobufCFieldDescriptor *field, const char *path,
                           const char *what) {
  kolo_codec_fault *f = ctx->fault;
  f->kind = kind;
  f->field = field;
  snprintf(f->path, sizeof f->path, "%s", path);
  snprintf(f->message, sizeof f->message, "%s: %s", path[0] ? path : "(body)", what);
  return KOLO_ERR_INVALID_ARG;
}

/* A value of the wrong JSON type (or out of its type's range) for field. */
static kolo_status fail(decode_ctx *ctx, const ProtobufCFieldDescriptor *field, const char *path,
                        const char *what) {
  return fail_as(ctx, KOLO_CODEC_FAULT_TYPE, field, path, what);
}

static kolo_status decode_message(decode_ctx *ctx, const ProtobufCFieldDescriptor *field,
                                  const json_t *json, const ProtobufCMessageDescriptor *desc,
                                  const char *path, ProtobufCMessage **out);
static kolo_status decode_open(decode_ctx *ctx, const ProtobufCFieldDescriptor *field,
                               const json_t *json, const ProtobufCMessageDescriptor *desc,
                               const char *path, ProtobufCMessage **out);

/* Parses a decimal string: an optional '-' (signed only), then 1-20 digits, nothing else
 * (no spaces, no '+', no hex), within the type's range. */
static int parse_decimal(const char *s, int is_unsigned, uint64_t *magnitude, int *negative) {
  *negative = !is_unsigned && *s == '-';
  if (*negative) s++;
  if (*s < '0' || *s > '9') return 0;
  uint64_t value = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return 0;
    unsigned digit = (unsigned)(*s - '0');
    if (value > (UINT64_MAX - digit) / 10) return 0;
    value = value * 10 + digit;
  }
  *magnitude = value;
  return 1;
}

/* Reads an integer from a JSON integer, an integral real (|x| < 2^53, where every
 * integer is exact), or a decimal string. Unsigned values land in *u (all of uint64),
 * signed ones in *i. */
static int json_to_int(const decode_ctx *ctx, const json_t *v, int is_unsigned, int64_t *i,
                       uint64_t *u) {
  if (!json_is_integer(v) && (ctx->flags & KOLO_CODEC_INTEGERS_ONLY)) return 0;
  if (json_is_integer(v)) {
    json_int_t n = json_integer_value(v);
    if (is_unsigned && n < 0) return 0;
    *i = n;
    *u = (uint64_t)n;
    return 1;
  }
  if (json_is_real(v)) {
    double d = json_real_value(v);
    if (d != floor(d) || fabs(d) > 9007199254740992.0 || (is_unsigned && d < 0)) return 0;
    *i = (int64_t)d;
    *u = (uint64_t)(is_unsigned ? d : 0);
    return 1;
  }
  if (json_is_string(v)) {
    uint64_t magnitude;
    int negative;
    if (!parse_decimal(json_string_value(v), is_unsigned, &magnitude, &negative)) return 0;
    if (is_unsigned) {
      *u = magnitude;
      *i = magnitude > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)magnitude;
      return 1;
    }
    if (magnitude > (uint64_t)INT64_MAX + (negative ? 1u : 0u)) return 0;
    *i = negative ? (int64_t)(0 - magnitude) : (int64_t)magnitude;
    return 1;
  }
  return 0;
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Decodes one JSON value into the slot at ptr (not repeated). */
static kolo_status decode_value(decode_ctx *ctx, const ProtobufCFieldDescriptor *field,
                                const json_t *v, void *ptr, const char *path) {
  int64_t i = 0;
  uint64_t u = 0;
  switch (field->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
      if (!json_to_int(ctx, v, 0, &i, &u) || i < INT32_MIN || i > INT32_MAX)
        return fail(ctx, field, path, "expected a 32-bit integer");
      *(int32_t *)ptr = (int32_t)i;
      return KOLO_OK;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
      if (!json_to_int(ctx, v, 1, &i, &u) || u > UINT32_MAX)
        return fail(ctx, field, path, "expected an unsigned 32-bit integer");
      *(uint32_t *)ptr = (uint32_t)u;
      return KOLO_OK;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
      if (!json_to_int(ctx, v, 0, &i, &u))
        return fail(ctx, field, path, "expected a 64-bit integer");
      *(int64_t *)ptr = i;
      return KOLO_OK;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
      if (!json_to_int(ctx, v, 1, &i, &u))
        return fail(ctx, field, path, "expected an unsigned 64-bit integer");
      *(uint64_t *)ptr = u;
      return KOLO_OK;
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_DOUBLE: {
      double d;
      if (!json_is_number(v)) return fail(ctx, field, path, "expected a number");
      d = json_number_value(v);
      if (field->type == PROTOBUF_C_TYPE_FLOAT)
        *(float *)ptr = (float)d;
      else
        *(double *)ptr = d;
      return KOLO_OK;
    }
    case PROTOBUF_C_TYPE_BOOL:
      if (!json_is_boolean(v)) return fail(ctx, field, path, "expected true or false");
      *(protobuf_c_boolean *)ptr = json_is_true(v);
      return KOLO_OK;
    case PROTOBUF_C_TYPE_ENUM: {
      const ProtobufCEnumValue *ev = NULL;
      if (json_is_string(v))
        ev = protobuf_c_enum_descriptor_get_value_by_name(field->descriptor, json_string_value(v));
      else if (json_is_integer(v))
        ev = protobuf_c_enum_descriptor_get_value(field->descriptor, (int)json_integer_value(v));
      if (ev == NULL) {
        char what[256];
        const ProtobufCEnumDescriptor *ed = field->descriptor;
        size_t used = (size_t)snprintf(what, sizeof what, "expected one of");
        for (unsigned k = 0; k < ed->n_values && used < sizeof what; k++)
          used += (size_t)snprintf(what + used, sizeof what - used, " %s", ed->values[k].name);
        return fail(ctx, field, path, what);
      }
      *(int *)ptr = ev->value;
      return KOLO_OK;
    }
    case PROTOBUF_C_TYPE_STRING: {
      if (!json_is_string(v)) return fail(ctx, field, path, "expected a string");
      char *copy = strdup(json_string_value(v));
      if (copy == NULL) return KOLO_ERR_NO_MEMORY;
      char **slot = ptr;
      if (*slot && *slot != (char *)protobuf_c_empty_string && *slot != field->default_value)
        free(*slot);
      *slot = copy;
      return KOLO_OK;
    }
    case PROTOBUF_C_TYPE_BYTES: {
      if (!json_is_string(v)) return fail(ctx, field, path, "expected a hex string");
      const char *s = json_string_value(v);
      size_t len = strlen(s);
      if (len % 2) return fail(ctx, field, path, "expected a hex string");
      ProtobufCBinaryData *bin = ptr;
      uint8_t *data = malloc(len / 2 + 1);
      if (data == NULL) return KOLO_ERR_NO_MEMORY;
      for (size_t k = 0; k < len / 2; k++) {
        int hi = hex_value(s[2 * k]), lo = hex_value(s[2 * k + 1]);
        if (hi < 0 || lo < 0) {
          free(data);
          return fail(ctx, field, path, "expected a hex string");
        }
        data[k] = (uint8_t)(hi << 4 | lo);
      }
      bin->data = data;
      bin->len = len / 2;
      return KOLO_OK;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
      if (is_open(field->descriptor))
        return decode_open(ctx, field, v, field->descriptor, path, (ProtobufCMessage **)ptr);
      return decode_message(ctx, field, v, field->descriptor, path, (ProtobufCMessage **)ptr);
  }
  return fail(ctx, field, path, "unsupported field type");
}

/* ---- open-ended values ---- */

static kolo_status limit(decode_ctx *ctx, const char *path, const char *what) {
  return fail_as(ctx, KOLO_CODEC_FAULT_LIMIT, ctx->open_field, path, what);
}

/* Counts one value and n bytes of keys/strings against the field's budget. */
static kolo_status spend(decode_ctx *ctx, size_t n) {
  char what[128];
  if (++ctx->open_values > KOLO_CODEC_OPEN_MAX_VALUES) {
    snprintf(what, sizeof what, "more than %d values", KOLO_CODEC_OPEN_MAX_VALUES);
    return limit(ctx, ctx->open_path, what);
  }
  ctx->open_bytes += n;
  if (ctx->open_bytes > KOLO_CODEC_OPEN_MAX_BYTES) {
    snprintf(what, sizeof what, "more than %d bytes of keys and strings",
             KOLO_CODEC_OPEN_MAX_BYTES);
    return limit(ctx, ctx->open_path, what);
  }
  return KOLO_OK;
}

static kolo_status open_value(decode_ctx *ctx, const json_t *v, const char *path, int depth,
                              Kolo__V1__Value **out);

static kolo_status open_nested(decode_ctx *ctx, const char *path, int depth) {
  if (depth <= KOLO_CODEC_OPEN_MAX_DEPTH) return KOLO_OK;
  char what[128];
  snprintf(what, sizeof what, "nested deeper than %d levels", KOLO_CODEC_OPEN_MAX_DEPTH);
  return limit(ctx, path, what);
}

static kolo_status open_struct(decode_ctx *ctx, const json_t *v, const char *path, int depth,
                               Kolo__V1__Struct **out) {
  KOLO_CHECK(open_nested(ctx, path, depth));
  Kolo__V1__Struct *st = malloc(sizeof *st);
  if (st == NULL) return KOLO_ERR_NO_MEMORY;
  kolo__v1__struct__init(st);
  *out = st;
  size_t n = json_object_size(v);
  st->fields = calloc(n ? n : 1, sizeof *st->fields);
  if (st->fields == NULL) return KOLO_ERR_NO_MEMORY;
  const char *key;
  json_t *value;
  char sub[512];
  json_object_foreach((json_t *)v, key, value) {
    Kolo__V1__Struct__FieldsEntry *e = malloc(sizeof *e);
    if (e == NULL) return KOLO_ERR_NO_MEMORY;
    kolo__v1__struct__fields_entry__init(e);
    st->fields[st->n_fields++] = e;
    e->key = strdup(key);
    if (e->key == NULL) return KOLO_ERR_NO_MEMORY;
    snprintf(sub, sizeof sub, "%.250s%s%.250s", path, path[0] ? "." : "", key);
    KOLO_CHECK(spend(ctx, strlen(key)));
    KOLO_CHECK(open_value(ctx, value, sub, depth, &e->value));
  }
  return KOLO_OK;
}

static kolo_status open_list(decode_ctx *ctx, const json_t *v, const char *path, int depth,
                             Kolo__V1__ListValue **out) {
  KOLO_CHECK(open_nested(ctx, path, depth));
  Kolo__V1__ListValue *l = malloc(sizeof *l);
  if (l == NULL) return KOLO_ERR_NO_MEMORY;
  kolo__v1__list_value__init(l);
  *out = l;
  size_t n = json_array_size(v);
  l->values = calloc(n ? n : 1, sizeof *l->values);
  if (l->values == NULL) return KOLO_ERR_NO_MEMORY;
  char sub[512];
  for (size_t k = 0; k < n; k++) {
    snprintf(sub, sizeof sub, "%.400s[%zu]", path, k);
    l->n_values++; /* counted first: a half-built value is freed with the list */
    KOLO_CHECK(open_value(ctx, json_array_get(v, k), sub, depth, &l->values[k]));
  }
  return KOLO_OK;
}

/* One JSON value as a Value; objects and arrays one level deeper than depth. */
static kolo_status open_value(decode_ctx *ctx, const json_t *v, const char *path, int depth,
                              Kolo__V1__Value **out) {
  Kolo__V1__Value *value = malloc(sizeof *value);
  if (value == NULL) return KOLO_ERR_NO_MEMORY;
  kolo__v1__value__init(value);
  *out = value;
  KOLO_CHECK(spend(ctx, json_is_string(v) ? json_string_length(v) : 0));
  switch (json_typeof(v)) {
    case JSON_OBJECT:
      value->kind_case = KOLO__V1__VALUE__KIND_STRUCT_VALUE;
      value->struct_value = NULL;
      return open_struct(ctx, v, path, depth + 1, &value->struct_value);
    case JSON_ARRAY:
      value->kind_case = KOLO__V1__VALUE__KIND_LIST_VALUE;
      value->list_value = NULL;
      return open_list(ctx, v, path, depth + 1, &value->list_value);
    case JSON_STRING:
      value->string_value = strdup(json_string_value(v));
      if (value->string_value == NULL) return KOLO_ERR_NO_MEMORY;
      value->kind_case = KOLO__V1__VALUE__KIND_STRING_VALUE;
      return KOLO_OK;
    case JSON_INTEGER:
    case JSON_REAL:
      value->kind_case = KOLO__V1__VALUE__KIND_NUMBER_VALUE;
      value->number_value = json_number_value(v);
      return KOLO_OK;
    case JSON_TRUE:
    case JSON_FALSE:
      value->kind_case = KOLO__V1__VALUE__KIND_BOOL_VALUE;
      value->bool_value = json_is_true(v);
      return KOLO_OK;
    default:
      value->kind_case = KOLO__V1__VALUE__KIND_NULL_VALUE;
      value->null_value = KOLO__V1__NULL_VALUE__NULL_VALUE;
      return KOLO_OK;
  }
}

/* An open-ended message (desc: Struct, Value or ListValue) held by field at path: a new
 * budget for the field's whole value. A Struct must be an object, a ListValue an array. */
static kolo_status decode_open(decode_ctx *ctx, const ProtobufCFieldDescriptor *field,
                               const json_t *json, const ProtobufCMessageDescriptor *desc,
                               const char *path, ProtobufCMessage **out) {
  ctx->open_field = field;
  snprintf(ctx->open_path, sizeof ctx->open_path, "%s", path);
  ctx->open_values = ctx->open_bytes = 0;
  if (desc == &kolo__v1__value__descriptor)
    return open_value(ctx, json, path, 0, (Kolo__V1__Value **)out);
  if (desc == &kolo__v1__list_value__descriptor) {
    if (!json_is_array(json)) return fail(ctx, field, path, "expected an array");
    KOLO_CHECK(spend(ctx, 0));
    return open_list(ctx, json, path, 1, (Kolo__V1__ListValue **)out);
  }
  if (!json_is_object(json)) return fail(ctx, field, path, "expected a JSON object");
  KOLO_CHECK(spend(ctx, 0));
  return open_struct(ctx, json, path, 1, (Kolo__V1__Struct **)out);
}

static kolo_status decode_repeated(decode_ctx *ctx, const ProtobufCFieldDescriptor *field,
                                   const json_t *v, ProtobufCMessage *msg, const char *path) {
  size_t *count = MEMBER_PTR(msg, field->quantifier_offset);
  void **array = MEMBER_PTR(msg, field->offset);
  size_t stride = scalar_size(field->type);
  char sub[512];
  if (field_is_map(field)) {
    const ProtobufCMessageDescriptor *entry = field->descriptor;
    if (!json_is_object(v)) return fail(ctx, field, path, "expected an object");
    size_t n = json_object_size(v);
    *array = calloc(n ? n : 1, sizeof(ProtobufCMessage *));
    if (*array == NULL) return KOLO_ERR_NO_MEMORY;
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)v, key, value) {
      ProtobufCMessage *e = calloc(1, entry->sizeof_message);
      if (e == NULL) return KOLO_ERR_NO_MEMORY;
      entry->message_init(e);
      ((ProtobufCMessage **)*array)[(*count)++] = e;
      char **key_slot = MEMBER_PTR(e, entry->fields[0].offset);
      *key_slot = strdup(key);
      if (*key_slot == NULL) return KOLO_ERR_NO_MEMORY;
      snprintf(sub, sizeof sub, "%.250s.%.250s", path, key);
      kolo_status rc =
          decode_value(ctx, &entry->fields[1], value, MEMBER_PTR(e, entry->fields[1].offset), sub);
      if (rc != KOLO_OK) return rc;
    }
    return KOLO_OK;
  }
  if (!json_is_array(v)) return fail(ctx, field, path, "expected an array");
  size_t n = json_array_size(v);
  *array = calloc(n ? n : 1, stride);
  if (*array == NULL) return KOLO_ERR_NO_MEMORY;
  for (size_t k = 0; k < n; k++) {
    snprintf(sub, sizeof sub, "%.400s[%zu]", path, k);
    void *slot = (char *)*array + k * stride;
    if (field->type == PROTOBUF_C_TYPE_STRING) *(char **)slot = NULL;
    kolo_status rc = decode_value(ctx, field, json_array_get(v, k), slot, sub);
    if (rc != KOLO_OK) {
      /* Count what was filled so free_unpacked releases exactly that. */
      *count = (field->type == PROTOBUF_C_TYPE_STRING || field->type == PROTOBUF_C_TYPE_MESSAGE)
                   ? k + 1
                   : k;
      return rc;
    }
    *count = k + 1;
  }
  return KOLO_OK;
}

/* field: the field holding this message (NULL for the whole text), for the fault. */
static kolo_status decode_message(decode_ctx *ctx, const ProtobufCFieldDescriptor *field,
                                  const json_t *json, const ProtobufCMessageDescriptor *desc,
                                  const char *path, ProtobufCMessage **out) {
  if (!json_is_object(json))
    return fail(ctx, path[0] ? field : NULL, path, "expected a JSON object");
  ProtobufCMessage *msg = calloc(1, desc->sizeof_message);
  if (msg == NULL) return KOLO_ERR_NO_MEMORY;
  desc->message_init(msg);
  *out = msg;
  const char *key;
  json_t *value;
  char sub[512];
  json_object_foreach((json_t *)json, key, value) {
    snprintf(sub, sizeof sub, "%.250s%s%.250s", path, path[0] ? "." : "", key);
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(desc, key);
    if (f == NULL) {
      if (ctx->flags & KOLO_CODEC_IGNORE_UNKNOWN) continue;
      return fail_as(ctx, KOLO_CODEC_FAULT_SHAPE, NULL, sub, "unknown field");
    }
    if (json_is_null(value)) continue;
    kolo_status rc;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      if (*(size_t *)MEMBER_PTR(msg, f->quantifier_offset) != 0)
        return fail_as(ctx, KOLO_CODEC_FAULT_SHAPE, f, sub, "given twice");
      rc = decode_repeated(ctx, f, value, msg, sub);
    } else if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
      uint32_t *which = MEMBER_PTR(msg, f->quantifier_offset);
      if (*which != 0)
        return fail_as(ctx, KOLO_CODEC_FAULT_SHAPE, f, sub,
                       "only one member of the oneof may be set");
      if (f->type == PROTOBUF_C_TYPE_MESSAGE || f->type == PROTOBUF_C_TYPE_STRING)
        *(void **)MEMBER_PTR(msg, f->offset) = NULL;
      *which = f->id;
      rc = decode_value(ctx, f, value, MEMBER_PTR(msg, f->offset), sub);
    } else {
      rc = decode_value(ctx, f, value, MEMBER_PTR(msg, f->offset), sub);
      if (rc == KOLO_OK && f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset &&
          f->type != PROTOBUF_C_TYPE_MESSAGE && f->type != PROTOBUF_C_TYPE_STRING)
        *(protobuf_c_boolean *)MEMBER_PTR(msg, f->quantifier_offset) = 1;
    }
    if (rc != KOLO_OK) return rc;
  }
  return KOLO_OK;
}

/* Decodes json into a new message; on failure *fault says why and nothing is kept. */
static kolo_status decode_root(const json_t *json, const ProtobufCMessageDescriptor *desc,
                               unsigned flags, ProtobufCMessage **out, kolo_codec_fault *fault) {
  decode_ctx ctx = {.flags = flags, .fault = fault};
  ProtobufCMessage *msg = NULL;
  kolo_status rc = is_open(desc) ? decode_open(&ctx, NULL, json, desc, "", &msg)
                                 : decode_message(&ctx, NULL, json, desc, "", &msg);
  if (rc != KOLO_OK) {
    if (rc == KOLO_ERR_NO_MEMORY) {
      fault->kind = KOLO_CODEC_FAULT_MEMORY;
      snprintf(fault->message, sizeof fault->message, "out of memory");
    }
    if (msg) protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
  }
  *out = msg;
  return KOLO_OK;
}

static void fault_clear(kolo_codec_fault *fault) {
  memset(fault, 0, sizeof *fault);
}

static void copy_message(const kolo_codec_fault *fault, char *err, size_t err_len) {
  if (err && err_len) snprintf(err, err_len, "%s", fault->message);
}

kolo_status kolo_codec_from_json(const json_t *json, const ProtobufCMessageDescriptor *desc,
                                 ProtobufCMessage **out, char *err, size_t err_len) {
  kolo_codec_fault fault;
  fault_clear(&fault);
  kolo_status rc = decode_root(json, desc, 0, out, &fault);
  copy_message(&fault, err, err_len);
  return rc;
}

kolo_status kolo_codec_decode(const json_t *json, const ProtobufCMessageDescriptor *desc,
                              unsigned flags, ProtobufCMessage **out, kolo_codec_fault *fault) {
  kolo_codec_fault scratch;
  if (fault == NULL) fault = &scratch;
  fault_clear(fault);
  *out = NULL;
  return decode_root(json, desc, flags, out, fault);
}

kolo_status kolo_codec_read(const char *text, size_t length, const ProtobufCMessageDescriptor *desc,
                            unsigned flags, ProtobufCMessage **out, kolo_codec_fault *fault) {
  kolo_codec_fault scratch;
  if (fault == NULL) fault = &scratch;
  fault_clear(fault);
  *out = NULL;
  json_error_t jerr;
  json_t *json = json_loadb(text ? text : "", text ? length : 0, JSON_REJECT_DUPLICATES, &jerr);
  if (json == NULL) {
    fault->kind = KOLO_CODEC_FAULT_SYNTAX;
    snprintf(fault->message, sizeof fault->message, "malformed JSON at line %d column %d: %s",
             jerr.line, jerr.column, jerr.text);
    return KOLO_ERR_PARSE;
  }
  kolo_status rc = decode_root(json, desc, flags, out, fault);
  json_decref(json);
  return rc;
}

kolo_status kolo_codec_parse(const char *text, size_t length,
                             const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                             char *err, size_t err_len) {
  kolo_codec_fault fault;
  kolo_status rc = kolo_codec_read(text, length, desc, 0, out, &fault);
  copy_message(&fault, err, err_len);
  return rc;
}

char *kolo_codec_dump(const ProtobufCMessage *msg, int pretty) {
  json_t *json = kolo_codec_to_json(msg);
  if (json == NULL) return NULL;
  /* JSON_ENCODE_ANY: a kolo.v1.Value on its own may be a string or a number */
  char *text = json_dumps(
      json, (pretty ? JSON_INDENT(2) : JSON_COMPACT) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
  json_decref(json);
  return text;
}

ProtobufCMessage *kolo_codec_copy(const ProtobufCMessage *msg) {
  size_t size = protobuf_c_message_get_packed_size(msg);
  uint8_t *buf = malloc(size ? size : 1);
  if (buf == NULL) return NULL;
  protobuf_c_message_pack(msg, buf);
  ProtobufCMessage *copy = protobuf_c_message_unpack(msg->descriptor, NULL, size, buf);
  free(buf);
  return copy;
}

kolo_status kolo_codec_set_string(char **slot, const char *value) {
  char *copy = strdup(value ? value : "");
  if (copy == NULL) return KOLO_ERR_NO_MEMORY;
  if (*slot && *slot != (char *)protobuf_c_empty_string) free(*slot);
  *slot = copy;
  return KOLO_OK;
}
