/* kolo-server's HTTP request framer (server/http_frame.c): where requests end in a
 * pipelined stream, that a head is cleared only once whole and body bytes as they come, that
 * byte-at-a-time feeding frames exactly as one big feed does, and each rule broken gives its
 * status, code and message with nothing past the last good byte cleared. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/http_frame.h"

/* Feeds text whole (step 0) or in pieces of step bytes; returns the last feed's result. */
static int feed(kolo_server_http_frame *f, const char *text, size_t len, size_t step) {
  int rc = 0;
  if (step == 0) return kolo_server_http_frame_feed(f, text, len);
  for (size_t i = 0; i < len && rc == 0; i += step)
    rc = kolo_server_http_frame_feed(f, text + i, len - i < step ? len - i : step);
  return rc;
}

static int frame_all(const char *text, size_t step, kolo_server_http_frame *f) {
  kolo_server_http_frame_init(f);
  return feed(f, text, strlen(text), step);
}

static const char PIPELINE[] =
    "GET /v1/jobs HTTP/1.1\r\nHost: x\r\n\r\n"
    "\r\nPOST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
    "POST /v1/jobs/a:cancel HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n"
    "3;name=value\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n"
    "HEAD /healthz HTTP/1.0\r\n\r\n";

static void a_pipeline_of_good_requests_is_cleared_whole_however_it_is_split(void **state) {
  (void)state;
  size_t steps[] = {0, 1, 2, 3, 7, 64};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    kolo_server_http_frame f;
    assert_int_equal(frame_all(PIPELINE, steps[i], &f), 0);
    assert_int_equal(f.ready, strlen(PIPELINE));
    assert_int_equal(f.requests, 4);
    assert_true(kolo_server_http_frame_idle(&f));
  }
}

static void a_head_is_cleared_only_once_whole_and_body_bytes_as_they_come(void **state) {
  (void)state;
  kolo_server_http_frame f;
  kolo_server_http_frame_init(&f);
  const char first[] = "GET / HTTP/1.1\r\n\r\n";
  const char partial[] = "POST /v1/jobs HTTP/1.1\r\nContent-Length: 10\r\n";
  assert_int_equal(feed(&f, first, strlen(first), 0), 0);
  assert_int_equal(feed(&f, partial, strlen(partial), 0), 0);
  assert_int_equal(f.ready, strlen(first)); /* the second head is not whole yet */
  assert_false(kolo_server_http_frame_idle(&f));
  assert_int_equal(feed(&f, "\r\n", 2, 0), 0);
  uint64_t head_end = strlen(first) + strlen(partial) + 2;
  assert_int_equal(f.ready, head_end);
  assert_int_equal(feed(&f, "abcd", 4, 0), 0);
  assert_int_equal(f.ready, head_end + 4); /* body bytes are cleared at once */
  assert_int_equal(feed(&f, "efghijGET", 9, 0), 0);
  assert_int_equal(f.ready, head_end + 10); /* "GET" starts the next head */
  assert_int_equal(f.requests, 2);
}

typedef struct bad_case {
  const char *text;
  int status;
  const char *code;
  const char *message; /* a part of it */
  size_t good;         /* bytes that stay cleared: the requests before the bad one */
} bad_case;

#define OK1 "GET / HTTP/1.1\r\n\r\n"
#define CH "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
#define AFTER_CH (sizeof OK1 - 1 + sizeof CH - 1)

static const bad_case BAD[] = {
    {OK1 "GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400, "INVALID_ARGUMENT",
     "Content-Length is not a decimal number", 18},
    {OK1 "GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "INVALID_ARGUMENT", "decimal", 18},
    {OK1 "GET / HTTP/1.1\r\nContent-Length: 5 \r\n\r\n", 400, "INVALID_ARGUMENT", "decimal", 18},
    {OK1 "GET / HTTP/1.1\r\nContent-Length:\r\n\r\n", 400, "INVALID_ARGUMENT", "decimal", 18},
    {OK1 "GET / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 413,
     "RESOURCE_EXHAUSTED", "Content-Length of 20 digits", 18},
    {OK1 "GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400,
     "INVALID_ARGUMENT", "more than one Content-Length", 18},
    {OK1 "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
     "INVALID_ARGUMENT", "both Content-Length and Transfer-Encoding", 18},
    {OK1 "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, "UNIMPLEMENTED",
     "other than chunked", 18},
    {OK1 "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
     "INVALID_ARGUMENT", "more than one Transfer-Encoding", 18},
    {OK1 "GET / HTTP/2.0\r\n\r\n", 505, "UNIMPLEMENTED", "HTTP/2.0 is not supported", 18},
    {OK1 "GET / HTTP/0.9\r\n\r\n", 505, "UNIMPLEMENTED", "not supported", 18},
    {OK1 "GET / HTTP/1.10\r\n\r\n", 400, "INVALID_ARGUMENT", "malformed HTTP version", 18},
    {OK1 "GET / http/1.1\r\n\r\n", 400, "INVALID_ARGUMENT", "malformed HTTP version", 18},
    {OK1 "GET /\r\n\r\n", 400, "INVALID_ARGUMENT", "request target", 18},
    {OK1 "GET  / HTTP/1.1\r\n\r\n", 400, "INVALID_ARGUMENT", "empty request target", 18},
    {OK1 "GET /a\x01 HTTP/1.1\r\n\r\n", 400, "INVALID_ARGUMENT", "request target", 18},
    {OK1 "G(T / HTTP/1.1\r\n\r\n", 400, "INVALID_ARGUMENT", "method", 18},
    {OK1 "GET / HTTP/1.1\n\n", 400, "INVALID_ARGUMENT", "malformed HTTP version", 18},
    {OK1 "GET / HTTP/1.1\r\r\n", 400, "INVALID_ARGUMENT", "CR without LF", 18},
    {OK1 "GET / HTTP/1.1\r\nHost: x\n\r\n", 400, "INVALID_ARGUMENT", "header value", 18},
    {OK1 "GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", 400, "INVALID_ARGUMENT", "CR without LF", 18},
    {OK1 "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400, "INVALID_ARGUMENT", "header name", 18},
    {OK1 "GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, "INVALID_ARGUMENT", "header name", 18},
    {OK1 "GET / HTTP/1.1\r\n: x\r\n\r\n", 400, "INVALID_ARGUMENT", "header name", 18},
    {OK1 "GET / HTTP/1.1\r\nX-A: 1\r\n  folded\r\n\r\n", 400, "INVALID_ARGUMENT", "obs-fold", 18},
    {OK1 CH "zz\r\n", 400, "INVALID_ARGUMENT", "not a hexadecimal number", AFTER_CH},
    {OK1 CH "5\r\nhelloX", 400, "INVALID_ARGUMENT", "chunk data longer than its size",
     AFTER_CH + 8},
    {OK1 CH "5 \r\n", 400, "INVALID_ARGUMENT", "after a chunk size", AFTER_CH},
    {OK1 CH "10000000000000000\r\n", 413, "RESOURCE_EXHAUSTED", "chunk size too large", AFTER_CH},
    {OK1 CH "0\r\nX: 1\r\nBad Trailer: 1\r\n\r\n", 400, "INVALID_ARGUMENT", "header name",
     AFTER_CH + 9},
};

static void each_broken_rule_has_its_status_code_and_message_and_clears_nothing_after_it(
    void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
    const bad_case *b = &BAD[i];
    size_t len = strlen(b->text);
    for (size_t step = 0; step <= 1; step++) {
      kolo_server_http_frame f;
      kolo_server_http_frame_init(&f);
      int rc = feed(&f, b->text, len, step);
      if (rc == 0) fail_msg("case %zu framed: %s", i, b->text);
      assert_int_equal(f.error.status, b->status);
      assert_string_equal(f.error.code, b->code);
      if (strstr(f.error.message, b->message) == NULL)
        fail_msg("case %zu: '%s' lacks '%s'", i, f.error.message, b->message);
      if (f.ready != b->good)
        fail_msg("case %zu: ready %llu, want %zu", i, (unsigned long long)f.ready, b->good);
      assert_int_equal(kolo_server_http_frame_feed(&f, "GET / HTTP/1.1\r\n\r\n", 18), -1);
      assert_int_equal(f.ready, b->good);
    }
  }
}

static void chunk_lines_are_cleared_only_whole_and_data_as_it_comes(void **state) {
  (void)state;
  static const char head[] = CH;
  kolo_server_http_frame f;
  kolo_server_http_frame_init(&f);
  size_t at = sizeof head - 1;
  struct {
    const char *bytes;
    size_t cleared; /* after feeding them */
  } steps[] = {{head, at},
               {"1", at},
               {"0;x=y\r", at},
               {"\n", at + 8},
               {"0123456789", at + 18},
               {"abcdef", at + 24},
               {"\r", at + 24},
               {"\n", at + 26},
               {"0\r\n", at + 29},
               {"T: 1", at + 29},
               {"\r\n", at + 35},
               {"\r", at + 35},
               {"\n", at + 37}};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    assert_int_equal(feed(&f, steps[i].bytes, strlen(steps[i].bytes), 0), 0);
    if (f.ready != steps[i].cleared)
      fail_msg("step %zu: ready %llu, want %zu", i, (unsigned long long)f.ready, steps[i].cleared);
  }
  assert_true(kolo_server_http_frame_idle(&f));
  assert_int_equal(f.requests, 1);
}

static void a_nul_byte_in_a_header_value_is_refused(void **state) {
  (void)state;
  static const char text[] = "GET / HTTP/1.1\r\nX-A: a\0b\r\n\r\n";
  kolo_server_http_frame f;
  kolo_server_http_frame_init(&f);
  assert_int_equal(kolo_server_http_frame_feed(&f, text, sizeof text - 1), -1);
  assert_int_equal(f.error.status, 400);
  assert_int_equal(f.ready, 0);
}

/* A request whose URI, header bytes, fields, query arguments or cookies are n units long. */
static char *sized(const char *what, size_t n) {
  size_t cap = n * 16 + 256;
  char *buf = malloc(cap);
  size_t len = 0;
  if (strcmp(what, "uri") == 0) {
    len += (size_t)sprintf(buf, "GET /");
    memset(buf + len, 'a', n - 1);
    len += n - 1;
    len += (size_t)sprintf(buf + len, " HTTP/1.1\r\n\r\n");
  } else if (strcmp(what, "header") == 0) {
    /* name "X" + value + 4 = n bytes */
    len += (size_t)sprintf(buf, "GET / HTTP/1.1\r\nX: ");
    memset(buf + len, 'v', n - 5);
    len += n - 5;
    len += (size_t)sprintf(buf + len, "\r\n\r\n");
  } else if (strcmp(what, "fields") == 0) {
    len += (size_t)sprintf(buf, "GET / HTTP/1.1\r\n");
    for (size_t i = 0; i < n; i++) len += (size_t)sprintf(buf + len, "X%zu: 1\r\n", i);
    len += (size_t)sprintf(buf + len, "\r\n");
  } else if (strcmp(what, "args") == 0) {
    len += (size_t)sprintf(buf, "GET /v1/jobs?a");
    for (size_t i = 1; i < n; i++) len += (size_t)sprintf(buf + len, "&a");
    len += (size_t)sprintf(buf + len, " HTTP/1.1\r\n\r\n");
  } else {
    len += (size_t)sprintf(buf, "GET / HTTP/1.1\r\nCookie: c=1");
    for (size_t i = 1; i < n; i++) len += (size_t)sprintf(buf + len, "; c=1");
    len += (size_t)sprintf(buf + len, "\r\n\r\n");
  }
  buf[len] = '\0';
  return buf;
}

static void kolos_limits_hold_exactly_at_their_bounds(void **state) {
  (void)state;
  struct {
    const char *what;
    size_t limit;
    int status;
    const char *message;
  } limits[] = {
      {"uri", KOLO_SERVER_HTTP_MAX_URI_BYTES, 414, "request URI of more than 8192 bytes"},
      {"header", KOLO_SERVER_HTTP_MAX_HEADER_BYTES, 431, "request headers of more than 16384"},
      {"fields", KOLO_SERVER_HTTP_MAX_FIELDS, 431, "more than 100 header fields"},
      {"args", KOLO_SERVER_HTTP_MAX_FIELDS, 414, "more than 100 query arguments"},
      {"cookies", KOLO_SERVER_HTTP_MAX_FIELDS, 431, "more than 100 cookies"},
  };
  for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
    kolo_server_http_frame f;
    char *at = sized(limits[i].what, limits[i].limit);
    assert_int_equal(frame_all(at, 0, &f), 0);
    assert_int_equal(f.ready, strlen(at));
    free(at);
    char *over = sized(limits[i].what, limits[i].limit + 1);
    assert_int_equal(frame_all(over, 0, &f), -1);
    assert_int_equal(f.error.status, limits[i].status);
    assert_string_equal(f.error.code, "INVALID_ARGUMENT");
    if (strstr(f.error.message, limits[i].message) == NULL)
      fail_msg("%s: '%s' lacks '%s'", limits[i].what, f.error.message, limits[i].message);
    assert_int_equal(f.ready, 0);
    free(over);
  }
}

static void an_endless_header_or_whitespace_stops_at_the_head_limit(void **state) {
  (void)state;
  kolo_server_http_frame f;
  kolo_server_http_frame_init(&f);
  const char head[] = "GET / HTTP/1.1\r\nX:";
  assert_int_equal(kolo_server_http_frame_feed(&f, head, strlen(head)), 0);
  char spaces[4096];
  memset(spaces, ' ', sizeof spaces);
  int rc = 0;
  for (int i = 0; i < 64 && rc == 0; i++)
    rc = kolo_server_http_frame_feed(&f, spaces, sizeof spaces);
  assert_int_equal(rc, -1);
  assert_int_equal(f.error.status, 431);
  assert_true(f.fed <= KOLO_SERVER_HTTP_MAX_HEAD_BYTES);
}

static void a_long_chunk_extension_is_refused(void **state) {
  (void)state;
  char text[4096];
  int n = sprintf(text, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;");
  memset(text + n, 'e', 2000);
  text[n + 2000] = '\0';
  kolo_server_http_frame f;
  assert_int_equal(frame_all(text, 0, &f), -1);
  assert_int_equal(f.error.status, 400);
  assert_non_null(strstr(f.error.message, "chunk size line too long"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_pipeline_of_good_requests_is_cleared_whole_however_it_is_split),
      cmocka_unit_test(a_head_is_cleared_only_once_whole_and_body_bytes_as_they_come),
      cmocka_unit_test(
          each_broken_rule_has_its_status_code_and_message_and_clears_nothing_after_it),
      cmocka_unit_test(chunk_lines_are_cleared_only_whole_and_data_as_it_comes),
      cmocka_unit_test(a_nul_byte_in_a_header_value_is_refused),
      cmocka_unit_test(kolos_limits_hold_exactly_at_their_bounds),
      cmocka_unit_test(an_endless_header_or_whitespace_stops_at_the_head_limit),
      cmocka_unit_test(a_long_chunk_extension_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
