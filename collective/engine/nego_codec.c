/* The negotiation messages' wire codec (negotiate.h): a message is encoded into
 * a growing buffer and decoded with every length checked against what arrived
 * (fuzzed). Little-endian fields. */
#include <stdlib.h>
#include <string.h>

#include "collective/engine/negotiate.h"
#include "common/checks.h"

void kolo_nego_buffer_free(kolo_nego_buffer *buffer) {
  free(buffer->data);
  *buffer = (kolo_nego_buffer){0};
}

static kolo_status reserve(kolo_nego_buffer *out, size_t more) {
  if (out->length + more <= out->capacity) return KOLO_OK;
  size_t capacity = out->capacity ? out->capacity : 256;
  while (capacity < out->length + more) capacity *= 2;
  uint8_t *grown = realloc(out->data, capacity);
  if (grown == NULL) return KOLO_ERR_NO_MEMORY;
  out->data = grown;
  out->capacity = capacity;
  return KOLO_OK;
}

static void put_le(kolo_nego_buffer *out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; i++) out->data[out->length++] = (uint8_t)(value >> (8 * i));
}

static void put_bytes(kolo_nego_buffer *out, const void *data, size_t length) {
  if (length > 0) memcpy(out->data + out->length, data, length);
  out->length += length;
}

/* An announcement: a 2-byte name length, the name, then kind, dtype, op,
 * device (0 host, 1 CUDA), root (4), members (4), count (8), aux (8). */
#define ANNOUNCE_META_BYTES 28
#define ANNOUNCE_MIN_BYTES (2 + 1 + ANNOUNCE_META_BYTES)

static size_t encoded_size(const kolo_nego_message *m) {
  size_t size = 4 + 8 + 4 + m->bit_bytes + 4 + 4 + 4;
  for (uint32_t i = 0; i < m->announce_count; i++) {
    size += 2 + m->announces[i].name_length + ANNOUNCE_META_BYTES;
  }
  for (uint32_t i = 0; i < m->stall_count; i++) size += 2 + m->stalls[i].name_length;
  return size;
}

kolo_status kolo_nego_encode(const kolo_nego_message *m, kolo_nego_buffer *out) {
  for (uint32_t i = 0; i < m->announce_count; i++) {
    if (m->announces[i].name_length > KOLO_NAME_MAX) return KOLO_ERR_INVALID_ARG;
  }
  kolo_status status = reserve(out, encoded_size(m));
  if (status != KOLO_OK) return status;
  put_le(out, m->flags, 4);
  put_le(out, m->unnamed_count, 8);
  put_le(out, m->bit_bytes, 4);
  put_bytes(out, m->bits, m->bit_bytes);
  put_le(out, m->announce_count, 4);
  for (uint32_t i = 0; i < m->announce_count; i++) {
    const kolo_nego_announce *a = &m->announces[i];
    put_le(out, a->name_length, 2);
    put_bytes(out, a->name, a->name_length);
    put_le(out, a->meta.kind, 1);
    put_le(out, a->meta.dtype, 1);
    put_le(out, a->meta.op, 1);
    put_le(out, a->meta.device, 1);
    put_le(out, (uint32_t)a->meta.root, 4);
    put_le(out, a->meta.members, 4);
    put_le(out, a->meta.count, 8);
    put_le(out, a->meta.aux, 8);
  }
  put_le(out, m->stall_count, 4);
  put_le(out, m->stall_seconds, 4);
  for (uint32_t i = 0; i < m->stall_count; i++) {
    put_le(out, m->stalls[i].name_length, 2);
    put_bytes(out, m->stalls[i].name, m->stalls[i].name_length);
  }
  return KOLO_OK;
}

typedef struct reader {
  const uint8_t *data;
  size_t length, at;
  int bad;
} reader;

static uint64_t get_le(reader *in, int bytes) {
  if (in->bad || in->length - in->at < (size_t)bytes) {
    in->bad = 1;
    return 0;
  }
  uint64_t value = 0;
  for (int i = 0; i < bytes; i++) value |= (uint64_t)in->data[in->at++] << (8 * i);
  return value;
}

static const uint8_t *get_bytes(reader *in, size_t length) {
  if (in->bad || in->length - in->at < length) {
    in->bad = 1;
    return NULL;
  }
  const uint8_t *at = in->data + in->at;
  in->at += length;
  return at;
}

/* A name: 1..KOLO_NAME_MAX bytes without NUL (stall names may be empty). */
static int get_name(reader *in, kolo_nego_announce *a, int allow_empty) {
  a->name_length = (size_t)get_le(in, 2);
  a->name = (const char *)get_bytes(in, a->name_length);
  if (in->bad || a->name_length > KOLO_NAME_MAX || (!allow_empty && a->name_length == 0)) return 0;
  return memchr(a->name, '\0', a->name_length) == NULL;
}

void kolo_nego_message_free(kolo_nego_message *message) {
  free(message->announces);
  free(message->stalls);
  message->announces = message->stalls = NULL;
}

static kolo_status decode_lists(reader *in, kolo_nego_message *m) {
  m->announce_count = (uint32_t)get_le(in, 4);
  /* every announcement takes at least ANNOUNCE_MIN_BYTES: a count beyond that is a lie */
  if (in->bad || m->announce_count > (in->length - in->at) / ANNOUNCE_MIN_BYTES) {
    return KOLO_ERR_PROTOCOL;
  }
  m->announces = calloc(m->announce_count ? m->announce_count : 1, sizeof *m->announces);
  if (m->announces == NULL) return KOLO_ERR_NO_MEMORY;
  for (uint32_t i = 0; i < m->announce_count; i++) {
    kolo_nego_announce *a = &m->announces[i];
    if (!get_name(in, a, 0)) return KOLO_ERR_PROTOCOL;
    a->meta.kind = (uint8_t)get_le(in, 1);
    a->meta.dtype = (uint8_t)get_le(in, 1);
    a->meta.op = (uint8_t)get_le(in, 1);
    a->meta.device = (uint8_t)get_le(in, 1);
    if (a->meta.device > 1) return KOLO_ERR_PROTOCOL;
    a->meta.root = (int32_t)(uint32_t)get_le(in, 4);
    a->meta.members = (uint32_t)get_le(in, 4);
    a->meta.count = get_le(in, 8);
    a->meta.aux = get_le(in, 8);
    if (in->bad) return KOLO_ERR_PROTOCOL;
  }
  m->stall_count = (uint32_t)get_le(in, 4);
  m->stall_seconds = (uint32_t)get_le(in, 4);
  if (in->bad || m->stall_count > (in->length - in->at) / 2) return KOLO_ERR_PROTOCOL;
  m->stalls = calloc(m->stall_count ? m->stall_count : 1, sizeof *m->stalls);
  if (m->stalls == NULL) return KOLO_ERR_NO_MEMORY;
  for (uint32_t i = 0; i < m->stall_count; i++) {
    if (!get_name(in, &m->stalls[i], 1)) return KOLO_ERR_PROTOCOL;
  }
  return in->at == in->length ? KOLO_OK : KOLO_ERR_PROTOCOL;
}

kolo_status kolo_nego_decode(const uint8_t *data, size_t length, kolo_nego_message *out) {
  *out = (kolo_nego_message){0};
  reader in = {.data = data, .length = length};
  out->flags = (uint32_t)get_le(&in, 4);
  out->unnamed_count = get_le(&in, 8);
  out->bit_bytes = (uint32_t)get_le(&in, 4);
  out->bits = get_bytes(&in, out->bit_bytes);
  if (in.bad) return KOLO_ERR_PROTOCOL;
  kolo_status status = decode_lists(&in, out);
  if (status != KOLO_OK) kolo_nego_message_free(out);
  return status;
}

/* ---- the table ---- */
