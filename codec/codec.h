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

/* Encodes msg as a new JSON object. Every scalar field is present (zero values too), so
 * scripts can rely on the keys; unset sub-messages and unset oneof members are left out.
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

/* Encodes msg as compact JSON text (malloc'd, caller frees); NULL when out of memory. */
char *kolo_codec_dump(const ProtobufCMessage *msg, int pretty);

/* Deep copy through pack/unpack; NULL when out of memory. */
ProtobufCMessage *kolo_codec_copy(const ProtobufCMessage *msg);

/* Replaces a string field's value with a malloc'd copy of value (freeing the old one). */
kolo_status kolo_codec_set_string(char **slot, const char *value);

#endif
