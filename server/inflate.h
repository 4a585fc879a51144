/* Bounded decompression of a request body (a gRPC message sent with gzip or deflate): the
 * output stops at a limit, so a small compressed body can never grow the server's memory
 * past what --max-message-bytes allows, whatever it expands to. */
#ifndef KOLO_SERVER_INFLATE_H
#define KOLO_SERVER_INFLATE_H

#include <stddef.h>
#include <stdint.h>

#include "kolo/status.h"

/* Inflates in[0..in_len) (gzip or zlib format, told apart by the header) into a new
 * buffer *out (malloc'd, caller frees) of *out_len bytes. KOLO_ERR_TOO_LARGE as soon as
 * the output would pass limit bytes (nothing more is allocated); KOLO_ERR_PARSE for a
 * corrupt or truncated stream; KOLO_ERR_NO_MEMORY. Never allocates more than
 * limit + 64 KiB. */
kolo_status kolo_server_inflate(const uint8_t *in, size_t in_len, size_t limit, uint8_t **out,
                                size_t *out_len);

#endif
