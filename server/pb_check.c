/* Implementation of pb_check.h: a descriptor-guided walk of the protobuf wire format
 * (tags, varints, fixed and length-delimited fields) that reads every string field of
 * every nested message in place. */
#include "server/pb_check.h"

#include <stdio.h>
#include <string.h>

typedef struct walk {
  char *err;
  size_t err_len;
  char path[512];
} walk;

static kolo_status refuse(walk *w, const char *why) {
  if (w->err && w->err_len)
    snprintf(w->err, w->err_len, "%s: %s", w->path[0] ? w->path : "(message)", why);
  return KOLO_ERR_INVALID_ARG;
}

int kolo_server_utf8_valid(const char *text, size_t len) {
  const unsigned char *s = (const unsigned char *)text;
  size_t i = 0;
  while (i < len) {
    unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t n;
    unsigned cp, min;
    if (c >= 0xc2 && c <= 0xdf) {
      n = 1, cp = c & 0x1f, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 2, cp = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return 0; /* a continuation byte first, an overlong lead (c0, c1) or beyond f4 */
    }
    if (len - i <= n) return 0;
    for (size_t k = 1; k <= n; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return 0;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    i += n + 1;
  }
  return 1;
}

/* Reads a varint at *pos; 0 when truncated or longer than 10 bytes. */
static int read_varint(const uint8_t *data, size_t len, size_t *pos, uint64_t *out) {
  uint64_t value = 0;
  for (unsigned shift = 0; shift < 70; shift += 7) {
    if (*pos >= len) return 0;
    uint8_t b = data[(*pos)++];
    value |= (uint64_t)(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      *out = value;
      return 1;
    }
  }
  return 0;
}

static int field_is_map(const ProtobufCFieldDescriptor *field) {
  if (field->label != PROTOBUF_C_LABEL_REPEATED || field->type != PROTOBUF_C_TYPE_MESSAGE) return 0;
  const ProtobufCMessageDescriptor *entry = field->descriptor;
  size_t n = strlen(entry->short_name);
  return entry->n_fields == 2 && n > 5 && strcmp(entry->short_name + n - 5, "Entry") == 0;
}

/* What is wrong with a string's bytes, or NULL. */
static const char *string_problem(const uint8_t *bytes, size_t len) {
  if (memchr(bytes, '\0', len) != NULL) return "contains a NUL byte";
  if (!kolo_server_utf8_valid((const char *)bytes, len)) return "not valid UTF-8";
  return NULL;
}

static kolo_status check_string(walk *w, const uint8_t *bytes, size_t len) {
  const char *why = string_problem(bytes, len);
  return why ? refuse(w, why) : KOLO_OK;
}

static kolo_status check_message(walk *w, const ProtobufCMessageDescriptor *desc,
                                 const uint8_t *data, size_t len, int depth);

/* A map entry: its key names the value in the path ("labels.team"). The entry's wire
 * format is first checked as a message of its own (the key and value fields have no
 * name in the path), then the key, then the value. */
static kolo_status check_map_entry(walk *w, const ProtobufCFieldDescriptor *field,
                                   const uint8_t *data, size_t len, int depth) {
  const ProtobufCMessageDescriptor *entry = field->descriptor;
  const uint8_t *part[2] = {NULL, NULL};
  size_t part_len[2] = {0, 0}, pos = 0;
  while (pos < len) {
    uint64_t tag, n;
    if (!read_varint(data, len, &pos, &tag)) return refuse(w, "truncated map entry");
    unsigned wire = (unsigned)(tag & 7);
    if (wire == 2) {
      if (!read_varint(data, len, &pos, &n) || n > len - pos)
        return refuse(w, "truncated map entry");
      if (tag >> 3 == 1 || tag >> 3 == 2) { /* the last one wins, as when unpacking */
        part[(tag >> 3) - 1] = data + pos;
        part_len[(tag >> 3) - 1] = (size_t)n;
      }
      pos += (size_t)n;
    } else if (wire == 0) {
      if (!read_varint(data, len, &pos, &n)) return refuse(w, "truncated map entry");
    } else if (wire == 1 || wire == 5) {
      size_t size = wire == 1 ? 8 : 4;
      if (len - pos < size) return refuse(w, "truncated map entry");
      pos += size;
    } else {
      return refuse(w, "unsupported wire type in a map entry");
    }
  }
  size_t base = strlen(w->path);
  if (entry->fields[0].type == PROTOBUF_C_TYPE_STRING && part[0] != NULL) {
    const char *why = string_problem(part[0], part_len[0]);
    if (why) {
      char what[64];
      snprintf(what, sizeof what, "a key %s", why);
      return refuse(w, what);
    }
    snprintf(w->path + base, sizeof w->path - base, ".%.*s",
             (int)(part_len[0] > 100 ? 100 : part_len[0]), (const char *)part[0]);
  }
  kolo_status rc = KOLO_OK;
  if (part[1] != NULL && entry->fields[1].type == PROTOBUF_C_TYPE_STRING)
    rc = check_string(w, part[1], part_len[1]);
  else if (part[1] != NULL && entry->fields[1].type == PROTOBUF_C_TYPE_MESSAGE)
    rc = check_message(w, entry->fields[1].descriptor, part[1], part_len[1], depth + 1);
  if (rc == KOLO_OK) w->path[base] = '\0';
  return rc;
}

/* Names the field in the path: "spec" + ".builtin", with "[i]" for a repeated one. */
static void push_path(walk *w, size_t base, const ProtobufCFieldDescriptor *field, long index) {
  if (index >= 0)
    snprintf(w->path + base, sizeof w->path - base, "%s%s[%ld]", base ? "." : "", field->name,
             index);
  else
    snprintf(w->path + base, sizeof w->path - base, "%s%s", base ? "." : "", field->name);
}

static kolo_status check_message(walk *w, const ProtobufCMessageDescriptor *desc,
                                 const uint8_t *data, size_t len, int depth) {
  if (depth > KOLO_SERVER_PB_MAX_DEPTH) return refuse(w, "nested too deeply");
  size_t base = strlen(w->path);
  long seen[64] = {0}; /* occurrences of each repeated field so far, for "[i]" */
  size_t pos = 0;
  while (pos < len) {
    uint64_t tag, n;
    if (!read_varint(data, len, &pos, &tag)) return refuse(w, "truncated field tag");
    uint32_t number = (uint32_t)(tag >> 3);
    unsigned wire = (unsigned)(tag & 7);
    if (number == 0 || (tag >> 3) > 0x1fffffff) return refuse(w, "bad field number");
    const ProtobufCFieldDescriptor *field = protobuf_c_message_descriptor_get_field(desc, number);
    const uint8_t *payload = NULL;
    switch (wire) {
      case 0:
        if (!read_varint(data, len, &pos, &n)) return refuse(w, "truncated varint");
        break;
      case 1:
        if (len - pos < 8) return refuse(w, "truncated fixed64");
        pos += 8;
        break;
      case 5:
        if (len - pos < 4) return refuse(w, "truncated fixed32");
        pos += 4;
        break;
      case 2:
        if (!read_varint(data, len, &pos, &n) || n > len - pos)
          return refuse(w, "truncated length");
        payload = data + pos;
        pos += (size_t)n;
        break;
      default:
        return refuse(w, "unsupported wire type (groups)");
    }
    if (field == NULL || payload == NULL) continue; /* unknown fields and scalars need nothing */
    long index = -1;
    if (field->label == PROTOBUF_C_LABEL_REPEATED && !field_is_map(field)) {
      size_t slot = (size_t)(field - desc->fields);
      index = slot < 64 ? seen[slot]++ : 0;
    }
    push_path(w, base, field, index);
    kolo_status rc = KOLO_OK;
    if (field->type == PROTOBUF_C_TYPE_STRING)
      rc = check_string(w, payload, (size_t)n);
    else if (field->type == PROTOBUF_C_TYPE_MESSAGE && field_is_map(field))
      rc = check_map_entry(w, field, payload, (size_t)n, depth);
    else if (field->type == PROTOBUF_C_TYPE_MESSAGE)
      rc = check_message(w, field->descriptor, payload, (size_t)n, depth + 1);
    if (rc != KOLO_OK) return rc;
    w->path[base] = '\0';
  }
  return KOLO_OK;
}

kolo_status kolo_server_pb_check(const ProtobufCMessageDescriptor *desc, const uint8_t *data,
                                 size_t len, char *err, size_t err_len) {
  walk w = {err, err_len, ""};
  if (err && err_len) err[0] = '\0';
  return check_message(&w, desc, data, len, 0);
}
