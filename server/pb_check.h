/* The strings of a protobuf request, checked on the wire before anything decodes it:
 * protobuf-c copies a string field as it comes and ends it with a NUL, so an embedded NUL
 * byte would silently cut the C string short ("a\0b" read as "a"), and bytes that are not
 * UTF-8 would only fail later, deep in the JSON store, as "out of memory". This walk
 * follows the message's descriptor through every nested message and map entry and refuses
 * both, naming the field. */
#ifndef KOLO_SERVER_PB_CHECK_H
#define KOLO_SERVER_PB_CHECK_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

/* Nested messages deeper than this are refused (kolo's messages nest 3 deep). */
#define KOLO_SERVER_PB_MAX_DEPTH 16

/* KOLO_OK when every string field under desc in data[0..len) is UTF-8 without NUL bytes.
 * KOLO_ERR_INVALID_ARG with "<field path>: <why>" in err otherwise (also for a wire
 * format that does not parse: a truncated varint or length, a bad wire type). Unknown
 * fields are skipped. Pure: reads data, writes only err. */
kolo_status kolo_server_pb_check(const ProtobufCMessageDescriptor *desc, const uint8_t *data,
                                 size_t len, char *err, size_t err_len);

/* Whether s[0..len) is well-formed UTF-8 (no overlong forms, surrogates or code points
 * above U+10FFFF). */
int kolo_server_utf8_valid(const char *s, size_t len);

#endif
