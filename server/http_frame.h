/* The HTTP/1.x request framer of kolo-server's front end (http_front.h): a pure, incremental
 * reader of a client's byte stream that decides where each request's head and body end and
 * whether the bytes obey HTTP/1.1's syntax (RFC 9112) and kolo's limits, strictly enough
 * that libmicrohttpd behind it never meets a request it would refuse on its own (with its
 * HTML pages): the request line, header fields (no obs-fold, no bare CR/LF, no CTL), a single
 * Content-Length of digits or Transfer-Encoding: chunked (never both), chunk sizes,
 * extensions and trailers, an URI of at most KOLO_SERVER_HTTP_MAX_URI_BYTES and header
 * fields of at most KOLO_SERVER_HTTP_MAX_HEADER_BYTES (counted as libmicrohttpd's
 * name + value + 4), at most KOLO_SERVER_HTTP_MAX_FIELDS header fields, query arguments and
 * cookies each (every one is a record in libmicrohttpd's per-connection memory pool).
 * No I/O and no allocation: the caller feeds bytes and forwards the first `ready` ones. */
#ifndef KOLO_SERVER_HTTP_FRAME_H
#define KOLO_SERVER_HTTP_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define KOLO_SERVER_HTTP_MAX_URI_BYTES 8192
#define KOLO_SERVER_HTTP_MAX_HEADER_BYTES 16384
/* a whole head (request line, fields and their whitespace, empty lines before it) */
#define KOLO_SERVER_HTTP_MAX_HEAD_BYTES 32768
#define KOLO_SERVER_HTTP_MAX_FIELDS 100
#define KOLO_SERVER_HTTP_MAX_METHOD_BYTES 32
#define KOLO_SERVER_HTTP_MAX_CHUNK_LINE 1024

/* What to answer a stream that broke the rules: the HTTP status, kolo's error code name
 * (as in {"error":{"code":...}}) and a one-line message. */
typedef struct kolo_server_http_frame_error {
  int status;
  const char *code;
  char message[160];
} kolo_server_http_frame_error;

/* One client stream's framing state; fields other than ready/requests/error are private. */
typedef struct kolo_server_http_frame {
  int state;
  uint64_t fed;      /* bytes fed so far */
  uint64_t ready;    /* the stream's first `ready` bytes are whole heads or checked body bytes */
  uint64_t requests; /* requests whose head was complete */
  int failed;
  kolo_server_http_frame_error error;
  /* the request being read */
  size_t head_bytes, uri_bytes, header_bytes, method_bytes, version_len, line_bytes;
  unsigned fields, args, cookies, content_lengths, transfer_encodings;
  int in_query, trailers, chunked, http10, value_started, value_nondigit;
  char version[9];
  char name[24]; /* the field name being read, lower case (longer names are none we look at) */
  size_t name_len;
  char value[24]; /* the start of a Content-Length / Transfer-Encoding value */
  size_t value_len;
  uint64_t remaining; /* body bytes left (Content-Length) or of the current chunk */
  uint64_t content_length;
} kolo_server_http_frame;

void kolo_server_http_frame_init(kolo_server_http_frame *f);

/* Reads the next n bytes of the stream. Returns 0 while every byte fed is well framed (a
 * request may still be incomplete; f->ready says how many bytes from the stream's start may
 * be forwarded), or -1 once a byte broke the rules: f->error says what to answer and no byte
 * past f->ready may be forwarded; every later call returns -1 at once. */
int kolo_server_http_frame_feed(kolo_server_http_frame *f, const char *data, size_t n);

/* 1 when the stream is between requests (nothing of a next one read yet). */
int kolo_server_http_frame_idle(const kolo_server_http_frame *f);

#endif
