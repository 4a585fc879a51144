/* Implementation of http_frame.h: one state per syntactic position, fed a byte at a time in
 * the head and in bulk through bodies and chunk data. Bytes are cleared only at points where
 * libmicrohttpd holds no partial line: a whole head, a whole chunk size line, trailer line or
 * CRLF after chunk data, and body bytes as they come; so when the front end ends the stream
 * after an error, libmicrohttpd holds nothing of ours but whole lines and body bytes. */
#include "server/http_frame.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum {
  S_START,      /* between requests: a request line or an empty line before it */
  S_LEAD_LF,    /* CR of an empty line before a request seen */
  S_METHOD,     /* in the method token */
  S_TARGET,     /* in the request target */
  S_VERSION,    /* in HTTP/d.d */
  S_REQ_LF,     /* CR after the version seen */
  S_FIELD,      /* at the start of a field line (or the empty line ending the head) */
  S_NAME,       /* in a field name */
  S_OWS,        /* after the colon, before the value */
  S_VALUE,      /* in a field value */
  S_FIELD_LF,   /* CR after a field value seen */
  S_END_LF,     /* CR of the empty line ending the head (or the trailers) seen */
  S_BODY,       /* Content-Length bytes left */
  S_CHUNK_SIZE, /* in a chunk size */
  S_CHUNK_EXT,  /* in chunk extensions */
  S_CHUNK_LF,   /* CR after a chunk size line seen */
  S_DATA,       /* chunk data left */
  S_DATA_CR,    /* chunk data read: CRLF expected */
  S_DATA_LF,
};

static int fail(kolo_server_http_frame *f, int status, const char *code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->error.message, sizeof f->error.message, fmt, ap);
  va_end(ap);
  f->error.status = status;
  f->error.code = code;
  f->failed = 1;
  return -1;
}

static int bad(kolo_server_http_frame *f, const char *what) {
  return fail(f, 400, "INVALID_ARGUMENT", "malformed HTTP request: %s", what);
}

static int is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return 1;
  return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* field-value bytes: visible ASCII, space, tab and obs-text; never CR, LF, NUL or DEL */
static int is_vchar(unsigned char c) {
  return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static int hex_value(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static void next_request(kolo_server_http_frame *f) {
  uint64_t fed = f->fed, ready = f->ready, requests = f->requests;
  memset(f, 0, sizeof *f);
  f->fed = fed;
  f->ready = ready;
  f->requests = requests;
  f->state = S_START;
}

void kolo_server_http_frame_init(kolo_server_http_frame *f) {
  memset(f, 0, sizeof *f);
  f->state = S_START;
}

int kolo_server_http_frame_idle(const kolo_server_http_frame *f) {
  return !f->failed && f->state == S_START && f->head_bytes == 0;
}

static int name_is(const kolo_server_http_frame *f, const char *lower) {
  return f->name_len == strlen(lower) && memcmp(f->name, lower, f->name_len) == 0;
}

/* A field line is complete: judge the fields kolo (or libmicrohttpd) reads. */
static int end_field(kolo_server_http_frame *f) {
  f->header_bytes += 4;
  if (f->header_bytes > KOLO_SERVER_HTTP_MAX_HEADER_BYTES)
    return fail(f, 431, "INVALID_ARGUMENT", "request headers of more than %d bytes",
                KOLO_SERVER_HTTP_MAX_HEADER_BYTES);
  if (++f->fields > KOLO_SERVER_HTTP_MAX_FIELDS)
    return fail(f, 431, "INVALID_ARGUMENT", "request with more than %d header fields",
                KOLO_SERVER_HTTP_MAX_FIELDS);
  if (f->trailers) return 0; /* a trailer field means nothing to the framing */
  if (name_is(f, "cookie") && ++f->cookies > KOLO_SERVER_HTTP_MAX_FIELDS)
    return fail(f, 431, "INVALID_ARGUMENT", "request with more than %d cookies",
                KOLO_SERVER_HTTP_MAX_FIELDS);
  if (name_is(f, "content-length")) {
    if (++f->content_lengths > 1) return bad(f, "more than one Content-Length");
    if (f->value_len == 0 || f->value_nondigit)
      return bad(f, "Content-Length is not a decimal number");
    if (f->value_len > 18)
      return fail(f, 413, "RESOURCE_EXHAUSTED", "Content-Length of %zu digits is too large",
                  f->value_len);
    uint64_t v = 0;
    for (size_t i = 0; i < f->value_len; i++) v = v * 10 + (uint64_t)(f->value[i] - '0');
    f->content_length = v;
  } else if (name_is(f, "transfer-encoding")) {
    if (++f->transfer_encodings > 1) return bad(f, "more than one Transfer-Encoding");
    static const char chunked[] = "chunked";
    int ok = f->value_len == 7;
    for (size_t i = 0; ok && i < 7; i++) ok = (f->value[i] | 0x20) == chunked[i];
    if (!ok)
      return fail(f, 501, "UNIMPLEMENTED", "Transfer-Encoding other than chunked is not supported");
    f->chunked = 1;
  }
  return 0;
}

/* The empty line after the fields: the head (or the trailers) is complete. */
static int end_head(kolo_server_http_frame *f) {
  if (f->chunked && f->content_lengths && !f->trailers)
    return bad(f, "both Content-Length and Transfer-Encoding");
  f->ready = f->fed;
  if (f->trailers) {
    next_request(f);
    return 0;
  }
  f->requests++;
  if (f->chunked) {
    f->state = S_CHUNK_SIZE;
    f->line_bytes = 0;
  } else if (f->content_length > 0) {
    f->remaining = f->content_length;
    f->state = S_BODY;
  } else {
    next_request(f);
  }
  return 0;
}

static int head_byte(kolo_server_http_frame *f, unsigned char c) {
  if (++f->head_bytes > KOLO_SERVER_HTTP_MAX_HEAD_BYTES) {
    if (f->state <= S_VERSION)
      return fail(f, 414, "INVALID_ARGUMENT", "request line of more than %d bytes",
                  KOLO_SERVER_HTTP_MAX_HEAD_BYTES);
    return fail(f, 431, "INVALID_ARGUMENT", "request headers of more than %d bytes",
                KOLO_SERVER_HTTP_MAX_HEAD_BYTES);
  }
  switch (f->state) {
    case S_START:
      if (c == '\r') return f->state = S_LEAD_LF, 0;
      if (!is_tchar(c)) return bad(f, "the request line does not start with a method");
      f->state = S_METHOD;
      f->method_bytes = 1;
      return 0;
    case S_LEAD_LF:
      if (c != '\n') return bad(f, "CR without LF");
      f->state = S_START;
      return 0;
    case S_METHOD:
      if (c == ' ') return f->state = S_TARGET, 0;
      if (!is_tchar(c)) return bad(f, "invalid character in the method");
      if (++f->method_bytes > KOLO_SERVER_HTTP_MAX_METHOD_BYTES) return bad(f, "method too long");
      return 0;
    case S_TARGET:
      if (c == ' ') {
        if (f->uri_bytes == 0) return bad(f, "empty request target");
        f->state = S_VERSION;
        return 0;
      }
      if (c <= 0x20 || c == 0x7f) return bad(f, "invalid character in the request target");
      if (++f->uri_bytes > KOLO_SERVER_HTTP_MAX_URI_BYTES)
        return fail(f, 414, "INVALID_ARGUMENT", "request URI of more than %d bytes",
                    KOLO_SERVER_HTTP_MAX_URI_BYTES);
      if (c == '?' && !f->in_query) {
        f->in_query = 1;
        f->args = 1;
      } else if (c == '&' && f->in_query && ++f->args > KOLO_SERVER_HTTP_MAX_FIELDS)
        return fail(f, 414, "INVALID_ARGUMENT", "request URI with more than %d query arguments",
                    KOLO_SERVER_HTTP_MAX_FIELDS);
      return 0;
    case S_VERSION:
      if (c == '\r') {
        const char *v = f->version;
        if (f->version_len != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' ||
            v[6] != '.' || v[7] < '0' || v[7] > '9')
          return bad(f, "malformed HTTP version");
        if (v[5] != '1')
          return fail(f, 505, "UNIMPLEMENTED", "HTTP version %.8s is not supported (HTTP/1.x is)",
                      v);
        f->http10 = v[7] == '0';
        f->state = S_REQ_LF;
        return 0;
      }
      if (f->version_len >= 8) return bad(f, "malformed HTTP version");
      f->version[f->version_len++] = (char)c;
      return 0;
    case S_REQ_LF:
      if (c != '\n') return bad(f, "CR without LF");
      f->state = S_FIELD;
      return 0;
    case S_FIELD:
      if (c == '\r') return f->state = S_END_LF, 0;
      if (c == ' ' || c == '\t') return bad(f, "folded header line (obs-fold)");
      if (!is_tchar(c)) return bad(f, "invalid character in a header name");
      f->name_len = 0;
      f->value_len = 0;
      f->value_nondigit = 0;
      f->state = S_NAME;
      __attribute__((fallthrough)); /* the byte is the name's first */
    case S_NAME:
      if (c == ':') {
        if (f->name_len == 0) return bad(f, "empty header name");
        f->state = S_OWS;
        return 0;
      }
      if (!is_tchar(c)) return bad(f, "invalid character in a header name");
      if (f->name_len < sizeof f->name)
        f->name[f->name_len] = (char)(c | (c >= 'A' && c <= 'Z' ? 0x20 : 0));
      f->name_len++;
      if (++f->header_bytes > KOLO_SERVER_HTTP_MAX_HEADER_BYTES)
        return fail(f, 431, "INVALID_ARGUMENT", "request headers of more than %d bytes",
                    KOLO_SERVER_HTTP_MAX_HEADER_BYTES);
      return 0;
    case S_OWS:
      if (c == ' ' || c == '\t') return 0;
      f->state = S_VALUE;
      __attribute__((fallthrough));
    case S_VALUE:
      if (c == '\r') return f->state = S_FIELD_LF, 0;
      if (!is_vchar(c)) return bad(f, "invalid character in a header value");
      if (f->value_len < sizeof f->value) f->value[f->value_len] = (char)c;
      f->value_len++;
      if (c < '0' || c > '9') f->value_nondigit = 1;
      if (c == ';' && !f->trailers && name_is(f, "cookie") &&
          ++f->cookies > KOLO_SERVER_HTTP_MAX_FIELDS)
        return fail(f, 431, "INVALID_ARGUMENT", "request with more than %d cookies",
                    KOLO_SERVER_HTTP_MAX_FIELDS);
      if (++f->header_bytes > KOLO_SERVER_HTTP_MAX_HEADER_BYTES)
        return fail(f, 431, "INVALID_ARGUMENT", "request headers of more than %d bytes",
                    KOLO_SERVER_HTTP_MAX_HEADER_BYTES);
      return 0;
    case S_FIELD_LF:
      if (c != '\n') return bad(f, "CR without LF");
      f->state = S_FIELD;
      if (end_field(f) != 0) return -1;
      if (f->trailers) f->ready = f->fed; /* a whole trailer line */
      return 0;
    case S_END_LF:
      if (c != '\n') return bad(f, "CR without LF");
      return end_head(f);
  }
  return bad(f, "internal framing state");
}

static int chunk_byte(kolo_server_http_frame *f, unsigned char c) {
  if (++f->line_bytes > KOLO_SERVER_HTTP_MAX_CHUNK_LINE && f->state != S_DATA_CR &&
      f->state != S_DATA_LF)
    return bad(f, "chunk size line too long");
  switch (f->state) {
    case S_CHUNK_SIZE: {
      int v = hex_value(c);
      if (v >= 0) {
        if (f->remaining >> 58) return fail(f, 413, "RESOURCE_EXHAUSTED", "chunk size too large");
        f->remaining = f->remaining * 16 + (uint64_t)v;
        f->value_started = 1;
        return 0;
      }
      if (!f->value_started) return bad(f, "chunk size is not a hexadecimal number");
      if (c == ';') return f->state = S_CHUNK_EXT, 0;
      if (c == '\r') return f->state = S_CHUNK_LF, 0;
      return bad(f, "invalid character after a chunk size");
    }
    case S_CHUNK_EXT:
      if (c == '\r') return f->state = S_CHUNK_LF, 0;
      if (!is_vchar(c)) return bad(f, "invalid character in a chunk extension");
      return 0;
    case S_CHUNK_LF:
      if (c != '\n') return bad(f, "CR without LF");
      f->value_started = 0;
      f->ready = f->fed; /* a whole chunk size line */
      if (f->remaining == 0) {
        f->trailers = 1;
        f->state = S_FIELD;
      } else {
        f->state = S_DATA;
      }
      return 0;
    case S_DATA_CR:
      if (c != '\r') return bad(f, "chunk data longer than its size");
      f->state = S_DATA_LF;
      return 0;
    case S_DATA_LF:
      if (c != '\n') return bad(f, "CR without LF");
      f->ready = f->fed;
      f->state = S_CHUNK_SIZE;
      f->line_bytes = 0;
      return 0;
  }
  return bad(f, "internal framing state");
}

int kolo_server_http_frame_feed(kolo_server_http_frame *f, const char *data, size_t n) {
  if (f->failed) return -1;
  const unsigned char *p = (const unsigned char *)data;
  size_t i = 0;
  while (i < n) {
    if (f->state == S_BODY || f->state == S_DATA) {
      size_t take = n - i;
      if ((uint64_t)take > f->remaining) take = (size_t)f->remaining;
      f->remaining -= take;
      i += take;
      f->fed += take;
      f->ready = f->fed;
      if (f->remaining == 0) {
        if (f->state == S_BODY)
          next_request(f);
        else
          f->state = S_DATA_CR;
      }
      continue;
    }
    f->fed++; /* the byte's own position: a line's last byte clears it with the line */
    int rc = f->state >= S_CHUNK_SIZE ? chunk_byte(f, p[i]) : head_byte(f, p[i]);
    if (rc != 0) {
      f->fed--;
      return -1;
    }
    i++;
  }
  return 0;
}
