/* Standard base64 (RFC 4648, with '=' padding) for the etcd JSON gateway, which
 * carries every key and value as base64. Strict decoding: no whitespace, no
 * missing padding, no stray characters, so a corrupt reply is an error. */
#ifndef KOLO_COORD_BASE64_H
#define KOLO_COORD_BASE64_H

#include <stddef.h>

#include "kolo/status.h"

/* Length of the encoding of len bytes, without the terminating NUL. */
size_t kolo_base64_encoded_len(size_t len);

/* Encodes len bytes into out, which must hold kolo_base64_encoded_len(len) + 1
 * bytes; out is NUL-terminated. */
void kolo_base64_encode(const void *data, size_t len, char *out);

/* Encodes into a new malloc'd NUL-terminated string (*out); KOLO_ERR_NO_MEMORY. */
kolo_status kolo_base64_encode_alloc(const void *data, size_t len, char **out);

/* Decodes text_len characters into a new malloc'd buffer (*out, NUL-terminated
 * for convenience, *out_len bytes without that NUL). Returns KOLO_ERR_PARSE when
 * the text is not canonical padded base64; *out is NULL then. */
kolo_status kolo_base64_decode_alloc(const char *text, size_t text_len, unsigned char **out,
                                     size_t *out_len);

#endif
