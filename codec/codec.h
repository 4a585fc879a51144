/* kolo_codec: the JSON shape of every kolo.v1 message, a 1:1, descriptor-driven mapping of
 * the protobuf-c structs (same snake_case field names, enums as their names, maps as
 * objects, 64-bit integers as JSON numbers). It is the one codec of every record kolo
 * keeps in etcd or sends over HTTP: kolo-server (HTTP, the job store), the scheduler, the
 * agent and the CLI all link this library (kolo_codec) and nothing else to read and write
 * them, so a record is validated the same way whichever process reads it. It knows no
 * message in particular: semantic checks of a record live with its owner. */
#ifndef KOLO_CODEC_CODEC_H
#define KOLO_CODEC_CODEC_H

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

#include "kolo/status.h"
#include "kolo/v1/records.pb-c.h"

/* Encodes msg as a new JSON object. Every scalar field is present (zero values too), so
 * scripts can rely on the keys; unset sub-messages and unset oneof members are left out,
 * and so are a proto2 optional scalar whose has_ is 0 and an optional string left NULL.
 * 64-bit unsigned values above INT64_MAX are written as decimal strings (jansson's
 * integers are int64), so every value reads back exactly. Returns NULL when out of memory
 * or when a string is not UTF-8 (which jansson cannot hold; kolo_server_pb_check refuses
 * such requests at the door). */
json_t *kolo_codec_to_json(const ProtobufCMessage *msg);

/* Decodes a JSON object into a new message of type desc (free it with
 * protobuf_c_message_free_unpacked(msg, NULL)). Integers come as JSON integers, integral
 * reals below 2^53, or strict decimal strings (digits, an optional '-' for signed types),
 * each within its type's range. Unknown fields and wrong types are
 * KOLO_ERR_INVALID_ARG with the field's dotted path named in err ("spec.builtin.epochs: ..."). */
kolo_status kolo_codec_from_json(const json_t *json, const ProtobufCMessageDescriptor *desc,
                                 ProtobufCMessage **out, char *err, size_t err_len);

/* Parses text (JSON) and decodes it as above; a JSON syntax error is KOLO_ERR_PARSE. */
kolo_status kolo_codec_parse(const char *text, size_t length,
                             const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                             char *err, size_t err_len);

/* ---- reading records ----
 * A record read back from etcd is decoded like a request, with two differences a caller
 * asks for: fields a newer writer added are skipped (KOLO_CODEC_IGNORE_UNKNOWN: an older
 * reader still runs), and integers must be JSON integers (KOLO_CODEC_INTEGERS_ONLY: a
 * record's writer is a program, never a person typing "3"). Presence: a proto2 optional
 * scalar's has_ flag and a string's non-NULL pointer say it was in the JSON; a repeated
 * field given in the JSON (even as []) has a non-NULL array, an absent one NULL. So the
 * record's owner checks presence and meaning over the decoded message, and words the
 * error from the fault, which names the field. */
enum {
  KOLO_CODEC_IGNORE_UNKNOWN = 1u << 0,
  KOLO_CODEC_INTEGERS_ONLY = 1u << 1,
};

typedef enum kolo_codec_fault_kind {
  KOLO_CODEC_FAULT_NONE = 0,
  KOLO_CODEC_FAULT_SYNTAX, /* not JSON (KOLO_ERR_PARSE) */
  KOLO_CODEC_FAULT_TYPE,   /* a value of the wrong JSON type or range for its field */
  KOLO_CODEC_FAULT_SHAPE,  /* an unknown field, a field given twice, two members of a oneof */
  KOLO_CODEC_FAULT_MEMORY, /* out of memory (KOLO_ERR_NO_MEMORY) */
  KOLO_CODEC_FAULT_LIMIT,  /* an open-ended value past KOLO_CODEC_OPEN_MAX_* */
} kolo_codec_fault_kind;

typedef struct kolo_codec_fault {
  kolo_codec_fault_kind kind;
  /* the field refused (TYPE, SHAPE but unknown fields); for a value that should be a
   * message, the field holding it; NULL when the whole text is not an object */
  const ProtobufCFieldDescriptor *field;
  char path[512];     /* its dotted path: "members[2].lease"; "" = the whole text */
  char message[1024]; /* "members[2].lease: expected a 64-bit integer", or the syntax error */
} kolo_codec_fault;

/* Parses text and decodes it as a desc message with flags (KOLO_CODEC_*). KOLO_ERR_PARSE
 * for a syntax error (duplicate keys included), KOLO_ERR_INVALID_ARG for a TYPE, SHAPE or
 * LIMIT fault, KOLO_ERR_NO_MEMORY; *out is NULL on failure and *fault (may be NULL) says why. */
kolo_status kolo_codec_read(const char *text, size_t length, const ProtobufCMessageDescriptor *desc,
                            unsigned flags, ProtobufCMessage **out, kolo_codec_fault *fault);

/* The same over JSON already parsed. */
kolo_status kolo_codec_decode(const json_t *json, const ProtobufCMessageDescriptor *desc,
                              unsigned flags, ProtobufCMessage **out, kolo_codec_fault *fault);

/* Encodes msg as compact JSON text (malloc'd, caller frees); NULL when out of memory. */
char *kolo_codec_dump(const ProtobufCMessage *msg, int pretty);

/* Deep copy through pack/unpack; NULL when out of memory. */
ProtobufCMessage *kolo_codec_copy(const ProtobufCMessage *msg);

/* Replaces a string field's value with a malloc'd copy of value (freeing the old one). */
kolo_status kolo_codec_set_string(char **slot, const char *value);

/* ---- open-ended values ----
 * kolo.v1.Struct / Value / ListValue (records.proto: google.protobuf.Struct's shape) are
 * mapped the way protobuf's JSON mapping maps google.protobuf.Struct: a Struct is a JSON
 * object, a Value is the JSON value itself (null, number, string, bool, object, array), a
 * ListValue an array; wherever such a message appears (a field, a map value, the root).
 * Numbers are doubles: an integral one within int64 is written as a JSON integer ("40",
 * never "40.0"), so a record that always held plain JSON keeps its bytes; integers beyond
 * 2^53 lose precision, as in protobuf. Decoding bounds each open-ended field (one field's
 * whole value, nested parts included): at most KOLO_CODEC_OPEN_MAX_DEPTH levels of
 * objects/arrays, KOLO_CODEC_OPEN_MAX_VALUES values and KOLO_CODEC_OPEN_MAX_BYTES bytes of
 * keys and strings; past one, a LIMIT fault naming the field ("progress: ..."). Encoding
 * writes a non-finite number as null (JSON has none). */
#define KOLO_CODEC_OPEN_MAX_DEPTH 32
#define KOLO_CODEC_OPEN_MAX_VALUES 10000
#define KOLO_CODEC_OPEN_MAX_BYTES (256 * 1024)

/* The value under key in s (the last entry if a hand-built map repeats it); NULL if none
 * or s is NULL. */
const Kolo__V1__Value *kolo_codec_struct_get(const Kolo__V1__Struct *s, const char *key);
/* 1 and *out if the value under key is a finite number, else 0. */
int kolo_codec_struct_number(const Kolo__V1__Struct *s, const char *key, double *out);

#endif
